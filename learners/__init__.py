"""Learners: Learner / Model / Optimizer / Mixin, GLMs, scikit-learn estimators, experiment CLI.

Compose learning BIDMach's way::

    from roofline.datasources import MatSource
    from roofline.learners import GLM, ADAGrad, L2Regularizer, Learner

    learner = Learner(MatSource(X, y, batch_size=10_000), GLM(loss="logistic"), ADAGrad(lr=0.2),
                      mixins=[L2Regularizer(1e-7)], holdout_every=11, eval_every=20)
    learner.train()
"""

from roofline.comm import (  # re-exported for compatibility: they live in roofline.comm
    Communicator,
    InProcessCommunicator,
    InProcessGroup,
)
from roofline.gmat import Options, option  # the one options system (gmat/_options.py)
from roofline.gmat.glm import alpha_from_peer, alpha_to_peer  # the one peer conversion

from ._cd import CDOptions, CDResult, fit_glm_cd
from ._cd_stream import fit_glm_cd_stream
from ._checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from ._cocoa import check_pure_blocks, pure_blocks
from ._estimators import LinearRegression, LinearSVC, LogisticRegression, Ridge
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
from ._vw import VWHybridResult, fit_vw_hybrid

__all__ = [
    "ADAGrad",
    "ADAGradOptions",
    "CDOptions",
    "CDResult",
    "Checkpoint",
    "Communicator",
    "GLM",
    "GLMOptions",
    "InProcessCommunicator",
    "InProcessGroup",
    "L1Regularizer",
    "L2Regularizer",
    "LBFGS",
    "LBFGSOptions",
    "LOSSES",
    "Learner",
    "LearnerOptions",
    "LinearRegression",
    "LinearSVC",
    "LogisticRegression",
    "MetricsRecorder",
    "Mixin",
    "Model",
    "Optimizer",
    "Options",
    "Ridge",
    "SGD",
    "SGDOptions",
    "TrainResult",
    "VWHybridResult",
    "alpha_from_peer",
    "alpha_to_peer",
    "check_pure_blocks",
    "fit_glm_cd",
    "fit_glm_cd_stream",
    "fit_vw_hybrid",
    "load_checkpoint",
    "option",
    "pure_blocks",
    "save_checkpoint",
]
