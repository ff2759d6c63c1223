"""Learners: Learner / Model / Optimizer / Mixin, GLMs, scikit-learn estimators, experiment CLI.

Compose learning BIDMach's way::

    from roofline.datasources import MatSource
    from roofline.learners import GLM, ADAGrad, L2Regularizer, Learner

    learner = Learner(MatSource(X, y, batch_size=10_000), GLM(loss="logistic"), ADAGrad(lr=0.2),
                      mixins=[L2Regularizer(1e-7)], holdout_every=11, eval_every=20)
    learner.train()

The names load on first use (the module's ``__getattr__``, PEP 562): ``import
roofline.learners`` imports neither scikit-learn nor the solvers, so that the ``roofline``
command starts fast; ``from roofline.learners import LogisticRegression`` imports what that
class needs.
"""

import importlib
import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the names below, for type checkers and IDEs (loaded lazily at run time)
    from ._checkpoint import Checkpoint, load_checkpoint, save_checkpoint
    from ._estimators import LinearRegression, LinearSVC, LogisticRegression, Ridge
    from ._kmeans import KMeans, KMeansModel, KMeansOptions, MiniBatchKMeans, kmeans_plusplus
    from ._lda import LDA, LatentDirichletAllocation, LDABatchResult, LDAOptions
    from ._learner import Learner, LearnerOptions, TrainResult
    from ._mf import MatrixFactorization, MFModel, MFOptions, als_objective
    from ._mixins import L1Regularizer, L2Regularizer, MetricsRecorder, Mixin
    from ._models import GLM, LOSSES, GLMOptions, Model
    from ._nmf import NMF, MiniBatchNMF, NMFModel, NMFOptions, beta_divergence, nmf_init
    from ._optimizers import (
        LBFGS,
        SGD,
        ADAGrad,
        ADAGradOptions,
        LBFGSOptions,
        ModelUpdate,
        ModelUpdateOptions,
        Optimizer,
        SGDOptions,
    )
    from ._vw import VWHybridResult, fit_vw_hybrid

from importlib.metadata import version as _dist_version

__version__ = _dist_version("roofline")  # the installed distribution's version

__all__ = [
    "ADAGrad",
    "ADAGradOptions",
    "Checkpoint",
    "GLM",
    "GLMOptions",
    "KMeans",
    "KMeansModel",
    "KMeansOptions",
    "L1Regularizer",
    "L2Regularizer",
    "LBFGS",
    "LBFGSOptions",
    "LDA",
    "LDABatchResult",
    "LDAOptions",
    "LOSSES",
    "LatentDirichletAllocation",
    "Learner",
    "LearnerOptions",
    "LinearRegression",
    "LinearSVC",
    "LogisticRegression",
    "MFModel",
    "MFOptions",
    "MatrixFactorization",
    "MetricsRecorder",
    "MiniBatchKMeans",
    "MiniBatchNMF",
    "Mixin",
    "Model",
    "ModelUpdate",
    "ModelUpdateOptions",
    "NMF",
    "NMFModel",
    "NMFOptions",
    "Optimizer",
    "Ridge",
    "SGD",
    "SGDOptions",
    "TrainResult",
    "VWHybridResult",
    "als_objective",
    "beta_divergence",
    "fit_vw_hybrid",
    "kmeans_plusplus",
    "load_checkpoint",
    "nmf_init",
    "save_checkpoint",
]


#: Where each name of ``__all__`` lives: ``name -> private module``, imported on first use.
_HOMES = {
    **dict.fromkeys(("Checkpoint", "load_checkpoint", "save_checkpoint"), "_checkpoint"),
    **dict.fromkeys(("LinearRegression", "LinearSVC", "LogisticRegression", "Ridge"),
                    "_estimators"),
    **dict.fromkeys(("KMeans", "KMeansModel", "KMeansOptions", "MiniBatchKMeans",
                     "kmeans_plusplus"), "_kmeans"),
    **dict.fromkeys(("LDA", "LDABatchResult", "LDAOptions", "LatentDirichletAllocation"), "_lda"),
    **dict.fromkeys(("Learner", "LearnerOptions", "TrainResult"), "_learner"),
    **dict.fromkeys(("MFModel", "MFOptions", "MatrixFactorization", "als_objective"), "_mf"),
    **dict.fromkeys(("L1Regularizer", "L2Regularizer", "MetricsRecorder", "Mixin"), "_mixins"),
    **dict.fromkeys(("GLM", "LOSSES", "GLMOptions", "Model"), "_models"),
    **dict.fromkeys(("MiniBatchNMF", "NMF", "NMFModel", "NMFOptions", "beta_divergence",
                     "nmf_init"), "_nmf"),
    **dict.fromkeys(("LBFGS", "SGD", "ADAGrad", "ADAGradOptions", "LBFGSOptions", "ModelUpdate",
                     "ModelUpdateOptions", "Optimizer",
                     "SGDOptions"), "_optimizers"),
    **dict.fromkeys(("VWHybridResult", "fit_vw_hybrid"), "_vw"),
}


#: Names that moved to another package: ``name -> (new home, new name)``.  Reaching them here
#: still works for one release, with a :class:`DeprecationWarning` naming the new home.
_MOVED = {
    "CDOptions": ("roofline.glm", "GLMSolverOptions"),
    "CDResult": ("roofline.glm", "GLMResult"),
    "Communicator": ("roofline.comm", "Communicator"),
    "InProcessCommunicator": ("roofline.comm", "InProcessCommunicator"),
    "InProcessGroup": ("roofline.comm", "InProcessGroup"),
    "Options": ("roofline.gmat", "Options"),
    "alpha_from_peer": ("roofline.glm", "alpha_from_peer"),
    "alpha_to_peer": ("roofline.glm", "alpha_to_peer"),
    "check_pure_blocks": ("roofline.glm", "check_pure_blocks"),
    "fit_glm_cd": ("roofline.glm", "fit_glm"),
    "fit_glm_cd_stream": ("roofline.glm", "fit_glm_stream"),
    "option": ("roofline.gmat", "option"),
    "pure_blocks": ("roofline.glm", "pure_blocks"),
}


def __getattr__(name):
    """The names of ``__all__``, imported from their module on first use (then cached in the
    package), and the deprecated aliases of :data:`_MOVED` (removed in the next release)."""
    if name in _HOMES:
        value = getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
        globals()[name] = value
        return value
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, new = _MOVED[name]
    warnings.warn(f"roofline.learners.{name} is deprecated and will be removed in the next "
                  f"release; use {module}.{new}", DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(module), new)


def __dir__():
    return sorted(set(globals()) | set(__all__))
