"""Generalized linear models (``roofline.glm``): the losses, the problem, the solvers and the
one front door.

Fit a model with :func:`fit_glm` (in memory; ``comm=`` for several processes) or
:func:`fit_glm_stream` (out of core, over a DataSource)::

    from roofline.glm import fit_glm
    res = fit_glm(X, y, loss="logistic", alpha=1e-5)    # X: n_features x n_examples
    res.coef, res.intercept, res.solver, res.gap

Layout: the losses' vocabulary (:mod:`._losses`), the problem and its certificates
(:mod:`._problem`), the solvers' steps (the public submodules :mod:`roofline.glm.cd` and
:mod:`roofline.glm.newton`, over the numba kernels of :mod:`roofline.kernels`), the solvers
(sequential and TPA-SCD in :mod:`._scd`, the CoCoA family in :mod:`._cocoa`, trust-region
Newton in :mod:`._newton`, Cholesky in :mod:`._direct`, streaming SDCA in :mod:`._stream`,
multinomial logistic regression in :mod:`._multinomial`),
the measured ``solver="auto"`` rule (:mod:`._auto`), the solver registry (one row per solver,
from which every front door dispatches: :mod:`._registry`), the front door (:mod:`._fit`), and the
fused ADAGrad GLM step of the minibatch learners (:mod:`._fused`).  The minibatch framework
(Learner / Model / Optimizer), the estimators and the CLI live in :mod:`roofline.learners`.

Objective
---------
Roofline's one scaling is the *mean* loss plus ``alpha`` times the regulariser, as in
scikit-learn's ``SGDClassifier``::

    F(w, b) = (1 / sum_j s_j) sum_j s_j l(y_j, eta_j) + alpha R(w),    eta_j = w^T x_j + b

    R(w) = ||w||^2 / 2   (L2)        R(w) = ||w||_1   (L1)

with example weights ``s_j`` (1 when absent); the intercept ``b`` is not regularised (the dual
CD solvers regularise a constant feature instead, as liblinear and snapml do).

Losses
------
One loss table, ``roofline.kernels.LOSS_TABLE`` (a record per loss), from which every list
below is derived: ``LOSS_CODES`` (the kernels' ``loss`` argument), ``LOSSES``,
``LOSS_ALIASES``, ``CD_LOSSES``, ``SMOOTH_LOSSES``, ``LOSS_LABELS``, ``LOSS_PEERS`` (the peers'
names: :func:`loss_to_peer`) and :func:`losses_where`; names and aliases are resolved by
:func:`resolve_loss`:

=================  ====  ===============================  ==========================
canonical name     code  aliases                          supported by
=================  ====  ===============================  ==========================
``squared``        0     ``linear``, ``least_squares``    GLM / fused step, CD
``logistic``       1     ``log``, ``log_loss``            GLM / fused step, CD
``hinge``          2                                      GLM / fused step, CD
``squared_hinge``  3                                      GLM / fused step
=================  ====  ===============================  ==========================

Each loss has two label conventions (:func:`check_labels`):

* the *GLM form* (the minibatch learners and the fused step; ``margin=False``; over arrays
  on either device: :func:`loss_deriv`): labels ``{0, 1}`` (logistic: any value in
  ``[0, 1]``), ``s = 2 [y > 0] - 1``::

      squared        l = (eta - y)^2 / 2
      logistic       l = log(1 + exp(eta)) - y eta
      hinge          l = max(0, 1 - s eta)
      squared_hinge  l = max(0, 1 - s eta)^2

* the *margin form* (the coordinate-descent steps of :mod:`roofline.glm.cd`;
  ``margin=True``): classifier labels ``{-1, +1}`` (``{0, 1}`` mapped),
  ``squared (z - y)^2 / 2``, ``logistic log(1 + exp(-y z))``, ``hinge max(0, 1 - y z)``.

Regularisation vocabulary
-------------------------
Every name below is the one strength ``alpha`` of the objective above, or converts to it here
(:func:`alpha_from_peer` / :func:`alpha_to_peer` are the only conversions):

==================================================  ============================================
name (where)                                        relation to ``alpha``
==================================================  ============================================
``alpha`` (``fit_glm``, its options)                ``alpha``
``reg2weight`` (``L2Regularizer``, ``L2Options``)   ``alpha`` (L2, ``R = ||W||_F^2 / 2``)
``reg1weight`` (``L1Regularizer``, ``L1Options``)   ``alpha`` (L1, ``R = ||W||_1``)
``l2``, ``l1`` (the fused steps, ADAGrad)           ``alpha``, applied lazily to the touched
                                                    feature columns (as BIDMach and VW do)
``lambda`` (learner docstrings, the estimators)     ``alpha``
``lam_n`` (:mod:`roofline.glm.cd`, the kernels)     ``n * alpha``: the CD steps work in sums,
                                                    ``sum_i l_i + lam_n R(w)``
scikit-learn ``SGDClassifier(alpha=)``              ``alpha``
scikit-learn ``Lasso(alpha=)`` (peer ``"lasso"``)   ``alpha``
scikit-learn ``Ridge(alpha=)`` (peer ``"ridge"``)   ``alpha_ridge / n``
scikit-learn / liblinear ``C`` (peer ``"C"``)       ``1 / (C n)``
snapml ``regularizer`` (peer ``"snapml"``)          ``regularizer / n``
Vowpal Wabbit ``--l2`` (peer ``"vw"``)              ``l2`` (added to every example's gradient by
                                                    VW's online learners)
==================================================  ============================================

``n`` is the number of examples (the sum of the example weights for weighted fits).  The dual
variables of the CD solvers (one per example) are called ``a``, never ``alpha``.
"""

from importlib.metadata import version as _dist_version

from . import cd, newton
from ._auto import LBFGS_AUTO_SCALE, choose_solver
from ._cocoa import check_pure_blocks, pure_blocks, worker_shards
from ._fit import GLMResult, GLMSolverOptions, fit_glm
from ._fused import (
    MAX_NNZ,
    FusedWorkspace,
    adagrad_glm_step,
    glm_adagrad_online_step,
    glm_adagrad_step,
)
from ._losses import (
    CD_LOSSES,
    GLM_LOSSES,
    LOSS_ALIASES,
    LOSS_CODES,
    LOSS_LABELS,
    LOSS_PEERS,
    LOSSES,
    PEERS,
    SMOOTH_LOSSES,
    alpha_from_peer,
    alpha_to_peer,
    check_labels,
    glm_labels,
    loss_code,
    loss_deriv,
    loss_from_peer,
    loss_to_peer,
    losses_where,
    resolve_loss,
)
from ._multinomial import (
    MULTINOMIAL_SOLVERS,
    MultinomialResult,
    fit_multinomial,
    softmax_loss,
)
from ._newton import duality_gap
from ._problem import (
    check_on_every_rank,
    check_positive,
    check_sample_weight,
    check_X,
    primal_certificate,
    verbose_logging,
)
from ._registry import (
    SolverSpec,
    check_solver,
    get_solver,
    register_solver,
    solver_names,
    solvers,
    unregister_solver,
)
from ._stream import fit_glm_stream

__version__ = _dist_version("roofline")  # the installed distribution's version

__all__ = [
    "CD_LOSSES",
    "GLM_LOSSES",
    "LBFGS_AUTO_SCALE",
    "LOSSES",
    "LOSS_ALIASES",
    "LOSS_CODES",
    "LOSS_LABELS",
    "LOSS_PEERS",
    "MAX_NNZ",
    "MULTINOMIAL_SOLVERS",
    "PEERS",
    "SMOOTH_LOSSES",
    "FusedWorkspace",
    "GLMResult",
    "GLMSolverOptions",
    "MultinomialResult",
    "SolverSpec",
    "adagrad_glm_step",
    "alpha_from_peer",
    "alpha_to_peer",
    "cd",
    "check_X",
    "check_labels",
    "check_on_every_rank",
    "check_positive",
    "check_pure_blocks",
    "check_sample_weight",
    "check_solver",
    "choose_solver",
    "duality_gap",
    "fit_glm",
    "fit_glm_stream",
    "fit_multinomial",
    "get_solver",
    "glm_adagrad_online_step",
    "glm_adagrad_step",
    "glm_labels",
    "loss_code",
    "loss_deriv",
    "loss_from_peer",
    "loss_to_peer",
    "losses_where",
    "newton",
    "primal_certificate",
    "pure_blocks",
    "register_solver",
    "resolve_loss",
    "softmax_loss",
    "solver_names",
    "solvers",
    "unregister_solver",
    "verbose_logging",
    "worker_shards",
]
