"""Learners: Learner / Model / Optimizer / Mixin, GLMs, scikit-learn estimators, experiment CLI.

Compose learning BIDMach's way::

    from roofline.datasources import MatSource
    from roofline.learners import GLM, ADAGrad, L2Regularizer, Learner

    learner = Learner(MatSource(X, y, batch_size=10_000), GLM(loss="logistic"), ADAGrad(lr=0.2),
                      mixins=[L2Regularizer(1e-7)], holdout_every=11, eval_every=20)
    learner.train()
"""

from ._checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from ._learner import Learner, LearnerOptions, TrainResult
from ._mixins import L1Regularizer, L2Regularizer, MetricsRecorder, Mixin
from ._models import GLM, LOSSES, GLMOptions, Model
from ._optimizers import (
    LBFGS,
    SGD,
    ADAGrad,
    ADAGradOptions,
    LBFGSOptions,
    Optimizer,
    SGDOptions,
)
from ._options import Options, option

__all__ = [
    "ADAGrad",
    "ADAGradOptions",
    "Checkpoint",
    "GLM",
    "GLMOptions",
    "L1Regularizer",
    "L2Regularizer",
    "LBFGS",
    "LBFGSOptions",
    "LOSSES",
    "Learner",
    "LearnerOptions",
    "MetricsRecorder",
    "Mixin",
    "Model",
    "Optimizer",
    "Options",
    "SGD",
    "SGDOptions",
    "TrainResult",
    "load_checkpoint",
    "option",
    "save_checkpoint",
]
