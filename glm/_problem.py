"""Coordinate-descent solvers for generalized linear models (Snap ML / SDCA / Google SCD family).

The objective (written once; every solver here minimises exactly this)
----------------------------------------------------------------------
With ``X`` of shape ``(n_features, n_examples)`` (one column = one example, the project layout),
``n = n_examples``, margins ``z_i = x_i^T w + b``::

    P(w, b) = (1/n) * sum_i loss(z_i, y_i) + alpha * R(w)

    R(w) = ||w||^2 / 2      (penalty="l2")
    R(w) = ||w||_1          (penalty="l1")
    R(w) = r ||w||_1 + (1 - r) ||w||^2 / 2
                            (penalty="elasticnet", r = l1_ratio in [0, 1]: scikit-learn's
                             parametrisation; r = 1 is the l1 problem, r = 0 the l2 one)

    loss="squared"   loss(z, y) = (z - y)^2 / 2
    loss="logistic"  loss(z, y) = log(1 + exp(-y z)),   y in {-1, +1}   ({0, 1} accepted)
    loss="hinge"     loss(z, y) = max(0, 1 - y z),       y in {-1, +1}   ({0, 1} accepted)

The intercept ``b`` is *not* regularised (it is its own coordinate, as in scikit-learn's
Ridge, Lasso and LogisticRegression): the primal solvers step it between coordinates, the
one-process dual (SDCA) holds it fixed through each sweep (the dual at a fixed ``b``) and moves it
between sweeps (``_scd.FreeIntercept``).  The other dual solvers (TPA-SCD's threads, CoCoA+, the
streamed and GPU duals), or any dual given ``intercept_scaling``, append instead, as liblinear and
snapml do, a constant feature of value ``intercept_scaling`` whose weight *is* regularised.

Conversions to peers' conventions live in one place, :func:`alpha_from_peer` /
:func:`alpha_to_peer`:

* scikit-learn ``Ridge(alpha=a)`` (``||y - Xw||^2 + a ||w||^2``): ``alpha = a / n``;
* scikit-learn ``Lasso(alpha=a)`` (``||y - Xw||^2 / (2n) + a ||w||_1``): ``alpha = a``;
* scikit-learn ``LogisticRegression(C=c)``, ``LinearSVC(C=c)``
  (``c * sum loss + ||w||^2 / 2``): ``alpha = 1 / (c n)``;
* snapml ``regularizer=r`` (``sum loss + r ||w||^2 / 2``, i.e. liblinear with ``C = 1/r``):
  ``alpha = r / n``.

Stopping certificate: the duality gap ``G = P(w, b) - D(a) >= P(w, b) - P*``.  A primal solver
maps its iterate to the dual point ``a_i = -loss'(z_i)`` (rescaled into the dual's feasible set
for the l1 penalty; the elastic net's conjugate is finite everywhere, no rescaling: see
:meth:`GLMProblem.certificate`); with an intercept, ``G`` is the gap of the problem with ``b``
held fixed, plus the second-order estimate ``g_b^2 / (2 h_b)`` of what moving ``b`` would
still gain.  A solver stops when ``G <= tol * |P|``.

This module is the leaf of the coordinate-descent chain (each module imports only those above
it; nothing imports lazily)::

    _cd_problem   losses, peer conversions, GLMResult, validation, GLMProblem, traces,
                  check schedule, progress reporting (this module)
    _cd_solvers   sequential SCD and TPA-SCD                      (imports _cd_problem)
    _cocoa        CoCoA+ / hierarchical CoCoA / pure-block SCD    (imports _cd_problem)
    _cd           fit_glm and GLMSolverOptions, the front door        (imports the three above)
    _cd_stream    out-of-core SDCA                                (imports _cd_problem)

Inside the chain ``alpha`` always means the regularisation strength; the dual variables (one
per example) are called ``a``.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
import warnings
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from roofline import gmat
from roofline.kernels import LOGISTIC, SQUARED

from . import cd

__all__ = [
    "GLMResult",
    "CheckSchedule",
    "GLMProblem",
    "StallMonitor",
    "Trace",
    "check_X",
    "check_positive",
    "check_on_every_rank",
    "check_sample_weight",
    "comm_weights",
    "mean_one_weights",
    "positive",
    "primal_certificate",
    "progress_bar",
    "verbose_logging",
    "warn_not_converged",
]

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------
# result


@dataclass
class GLMResult:
    """What a coordinate-descent solver returns.

    The parameters are also the attributes.

    Parameters
    ----------
    coef : ndarray, shape (n_features,)
        The coefficients.
    intercept : float
        The intercept (0 without one).
    n_iter : int
        Epochs (passes over the data) for ``scd``/``tpa-scd``/``pure-block``; communication
        rounds for ``cocoa``/``hcocoa``.
    objective : ndarray
        ``P(w, b)`` at every check (every ``check_every`` iterations).
    gap_history : ndarray
        Duality gap at every check.
    times : ndarray
        Cumulative solver seconds at every check, *excluding* the time spent computing the
        checks themselves (reported separately in ``check_time``).
    gap : float
        The last duality gap.
    converged : bool
        ``gap <= tol * |objective|`` was reached.
    time : float
        Wall seconds of the whole call (including checks and setup).
    check_time : float
        Seconds spent computing the checks (objective and gap), excluded from ``times``.
    dual_coef : ndarray or None
        The dual variables (one per example) for the dual solvers.
    solver : str
        The solver that ran (``"scd"``, ``"cocoa"``, ``"newton"``, ...).
    loss : str
        The canonical loss name (``"squared"``, ``"logistic"``, ``"hinge"``).
    penalty : {"l2", "l1", "elasticnet"}
        The regulariser.
    alpha : float
        Its strength, against the mean loss.
    dual : bool
        Whether the dual problem was solved.
    info : dict
        Solver-specific details (threads used, communication counters, stop reasons, ...).
    l1_ratio : float or None
        The elastic net's mixing parameter (``penalty="elasticnet"``; None otherwise).
    """

    coef: np.ndarray
    intercept: float
    n_iter: int
    objective: np.ndarray
    gap_history: np.ndarray
    times: np.ndarray
    gap: float
    converged: bool
    time: float
    check_time: float = 0.0
    dual_coef: np.ndarray | None = None
    solver: str = "scd"
    loss: str = "squared"
    penalty: str = "l2"
    alpha: float = 0.0
    dual: bool = False
    info: dict = field(default_factory=dict)
    l1_ratio: float | None = None

    @property
    def relative_gap(self) -> float:
        """float: the last duality gap over the last objective, ``gap / |P|``: what
        ``converged`` compares with ``tol``."""
        return self.gap / max(abs(float(self.objective[-1])), 1e-300)


# ---------------------------------------------------------------------------------------------
# validation


def check_X(X, name="X", allow_no_examples=False, keep_dense=False):
    """A GLM solver's feature matrix, validated: CSC (or dense), ``n_features x n_examples``.

    Parameters
    ----------
    X : scipy.sparse CSC matrix or ndarray, shape (n_features, n_examples)
        One column per example.  A dense array must hold finite values.
    name : str, default="X"
        The argument's name in the errors.
    allow_no_examples : bool, default=False
        Accept zero columns (one rank's shard of a distributed fit may hold no examples).
    keep_dense : bool, default=False
        Return a dense ``X`` as it is (the solvers with a dense path) instead of as CSC.

    Returns
    -------
    scipy.sparse CSC matrix or ndarray

    Raises
    ------
    TypeError
        For another sparse format (the message says how to convert) or another type.
    ValueError
        For a malformed CSC matrix, a non-finite dense value (naming its feature and example)
        or an empty matrix.

    Notes
    -----
    A CSC matrix is checked in full on every call (:func:`roofline.gmat.check_csc` with
    ``force=True``), even one validated before: the solvers' kernels trust its structure,
    and a matrix edited in place since (``X.indices[i] = ...``) must fail here, not there.
    """
    if sp.issparse(X):
        if X.format != "csc":
            raise TypeError(
                f"{name} must be CSC of shape (n_features, n_examples) (one column = one "
                f"example), got {X.format.upper()}; convert with {name}.tocsc()"
            )
        # every call re-validates in full (O(nnz), less than one pass of any solver): the
        # mark an earlier check left on X vouches only for the entries its fingerprint
        # samples, and an in-place edit off the sample would reach the unchecked kernels
        gmat.check_csc(X, name, force=True)
    else:
        if not isinstance(X, np.ndarray):
            raise TypeError(f"{name} must be a scipy.sparse CSC matrix or an ndarray")
        gmat.as_dense(X, name, ndim=(2,))
        if not np.isfinite(X).all():
            pos = np.argwhere(~np.isfinite(X))[0]
            raise ValueError(
                f"{name} has a non-finite value {X[tuple(pos)]} at feature {pos[0]}, "
                f"example {pos[1]}"
            )
        if not keep_dense:
            X = cd.csc_from_dense(X)
    if X.shape[0] == 0 or (X.shape[1] == 0 and not allow_no_examples):
        raise ValueError(f"{name} is empty: shape {X.shape} (n_features, n_examples)")
    return X


def mean_one_weights(sample_weight, n):
    """Validated example weights scaled to mean 1 (``None`` stays ``None``): the mean loss
    ``sum_i s_i l_i / n`` is then scikit-learn's weighted mean ``sum_i w_i l_i / sum_i w_i``."""
    if sample_weight is None:
        return None
    sw = check_sample_weight(sample_weight, n)
    return sw * (n / sw.sum())


def check_sample_weight(sample_weight, n, *, positive_sum=True):
    """Example weights, validated: ``n`` finite non-negative values (with a positive sum).

    The one check of ``sample_weight`` behind :func:`fit_glm`, the solvers and the
    estimators, with one set of messages.

    Parameters
    ----------
    sample_weight : array-like, shape (n,)
        The weights.
    n : int
        The number of examples.
    positive_sum : bool, default=True
        Require a positive sum (one rank's share of a distributed fit may sum to zero).

    Returns
    -------
    ndarray of float64, shape (n,)

    Raises
    ------
    ValueError
        Naming ``sample_weight`` and, for a negative weight, its first index.
    """
    sw = np.asarray(sample_weight, dtype=np.float64).ravel()
    if sw.shape[0] != n:
        raise ValueError(f"sample_weight has {sw.shape[0]} entries but X has {n} examples "
                         "(columns)")
    if not np.isfinite(sw).all():
        raise ValueError("sample_weight must be finite")
    neg = np.flatnonzero(sw < 0)
    if neg.size:
        raise ValueError(f"sample_weight must be non-negative, got sample_weight[{neg[0]}] = "
                         f"{float(sw[neg[0]])!r} ({neg.size} negative entries)")
    if positive_sum and not sw.sum() > 0:
        raise ValueError("sample_weight sums to zero: at least one sample needs a positive "
                         "weight")
    return sw


def check_on_every_rank(comm, fn, caller):
    """Run this rank's input checks ``fn()``; every rank raises if one rank's failed (one
    all-reduce), so that no rank waits in a collective for a peer that gave up.

    Parameters
    ----------
    comm : roofline.comm.Communicator
        Every rank calls this (collective).
    fn : callable
        ``fn() -> value``: the checks, raising ``ValueError`` or ``TypeError``.
    caller : str
        Named in the error of the ranks whose own checks passed (``"fit_glm(comm=)"``).

    Returns
    -------
    object
        ``fn()``'s value.

    Raises
    ------
    ValueError, TypeError
        This rank's error prefixed with its rank, or a ``ValueError`` naming the first rank
        whose checks failed.
    """
    err = None
    try:
        out = fn()
    except (ValueError, TypeError) as e:
        err, out = e, None
    bad = comm.allreduce(np.array([comm.rank + 1 if err else 0], dtype=np.int64), op="max")
    if err is not None:
        raise type(err)(f"rank {comm.rank}: {err}") from err
    if bad[0]:
        raise ValueError(f"{caller}: the input of rank {int(bad[0]) - 1} failed its checks "
                         "(its error names the argument)")
    return out


def comm_weights(comm, sample_weight, n_local):
    """This rank's example weights scaled to mean one over *every* rank's examples, or
    ``None`` where the weights are the same everywhere (the unweighted problem).

    The collective twin of :func:`mean_one_weights`: the sum and the count are global, so that
    weights that are uniform within each rank but differ between the ranks keep their meaning
    (what repeating the rows would mean), and a rank whose weights are all zero is valid input
    while the global sum is positive.  A rank without weights (``None``) weighs its examples 1
    when another rank has weights.

    Parameters
    ----------
    comm : roofline.comm.Communicator
        Every rank calls this (collective; two all-reduces).
    sample_weight : array-like, shape (n_local,), or None
        This rank's weights.
    n_local : int
        This rank's number of examples.

    Returns
    -------
    ndarray of float64, shape (n_local,), or None
        ``s_i * n / sum_j s_j`` (``n`` and the sum over every rank), the same decision
        (``None`` or not) on every rank.

    Raises
    ------
    ValueError
        On every rank: a rank's weights fail :func:`check_sample_weight` (without the
        positive sum), or the weights sum to zero over every rank.
    """
    sw = None
    if sample_weight is not None:
        sw = check_on_every_rank(comm, lambda: check_sample_weight(
            sample_weight, n_local, positive_sum=False), "fit_glm(comm=)")
    else:
        check_on_every_rank(comm, lambda: None, "fit_glm(comm=)")
    has = sw is not None
    lo = float(sw.min()) if has and sw.size else np.inf
    hi = float(sw.max()) if has and sw.size else -np.inf
    if not has and n_local:  # ones, where another rank has weights
        lo = hi = 1.0
    tot = comm.allreduce(np.array([float(n_local), float(sw.sum()) if has else float(n_local),
                                   float(has)]))
    ext = comm.allreduce(np.array([hi, -lo]), op="max")
    if not tot[2]:
        return None  # no rank has weights
    if not tot[1] > 0:
        raise ValueError("sample_weight sums to zero over every rank: at least one sample "
                         "needs a positive weight")
    if ext[0] == -ext[1]:
        return None  # the same weight everywhere: the unweighted problem
    local = sw if has else np.ones(n_local)
    return local * (tot[0] / tot[1])


def check_positive(v, name, integer=False):
    """A positive finite number (or a positive integer) argument, validated.

    Parameters
    ----------
    v : object
        The value.
    name : str
        The argument's name in the error.
    integer : bool, default=False
        Require a positive integer (``bool`` refused).

    Returns
    -------
    float or int

    Raises
    ------
    ValueError
        Naming the argument and the value.
    """
    if integer:
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
        return int(v)
    numeric = isinstance(v, (int, float, np.floating, np.integer)) and not isinstance(v, bool)
    if not numeric or not (v > 0) or not np.isfinite(v):
        raise ValueError(f"{name} must be a positive finite number, got {v!r}")
    return float(v)


positive = check_positive  # the solvers' short name


# ---------------------------------------------------------------------------------------------
# the certificate (module docstring: "Stopping certificate")


# A free intercept's check bounds the logistic conjugates of the scaled side of the balanced
# dual point (GLMProblem._balanced_parts) from the sums of its first pass where the scaling
# theta is at most this (the bound's shortfall grows as theta^3 / (1 - theta)); else one more
# pass over that side evaluates them.  On 200k Criteo-like examples (73% negatives, the scaled
# side at most checks) the pass cost ~5 ms of a ~20 ms check (load ~4).
_ENTROPY_BOUND_THETA = 1e-2


def vdot(x, y):
    """``x^T y`` of two 1-D float64 arrays without BLAS (``np.einsum``'s own loop).

    The dual checks' dot products of feature- or example-length vectors: OpenBLAS's threaded
    ``ddot`` of 2^18 values took 12-20 ms on a loaded 2-core machine (its threads contend
    with the other processes' for the cores) against ~0.1 ms here; a check with an
    unregularised intercept makes several (benchmarks/intercept.py, 200k Criteo-like
    examples x 2^18 features: ~0.3 s of its checks)."""
    return float(np.einsum("i,i->", x, y))


def _certificate(parts, reg, u_sq, b, *, n, lam_n, l1, fit_intercept, lam_conj=None):
    """``(P, gap)`` of a primal point from its sums ``parts = [L, C, A, g_b, h_b]`` (loss
    sum, conjugate sum of the dual candidate, the candidate's sum times the l1 scale, the
    intercept's gradient and curvature sums), ``reg = R(w)`` and ``u_sq = ||X a||^2``
    (the elastic net: ``sum_j soft(u_j, lam1)^2`` with ``lam_conj = lam2``, the conjugate
    ``sum_j soft(u_j, lam1)^2 / (2 lam2)`` of ``lam1 |w| + lam2 w^2 / 2``)."""
    L, C, A, g_b, h_b = parts
    P = (L + lam_n * reg) / n
    D = (C - b * A) / n
    if not l1:
        D -= 0.5 * u_sq / ((lam_n if lam_conj is None else lam_conj) * n)
    gap = P - D
    if fit_intercept and h_b > 0:
        gap += g_b * g_b / (2.0 * h_b * n)
    return P, max(gap, 0.0)


def primal_certificate(loss_sum, conj_sum, g_b, h_b, u_sq, coef, intercept, *, n, alpha,
                       fit_intercept):
    """The objective and the duality gap of an L2 primal point, from its (all-reduced) sums.

    The certificate every :func:`~roofline.glm.fit_glm` solver stops on (``gap <= tol *
    |P|``): the dual point of margins ``z`` is ``a_i = -s_i loss'(z_i)`` (``s`` the example
    weights, 1 without), and ``P - P* <= gap``.  With an intercept, ``gap`` is that of the
    problem with ``b`` held fixed plus ``g_b^2 / (2 h_b n)``, the second-order estimate of
    what moving ``b`` still gains.  Any solver that has these sums (a pass computing the
    gradient has all of them) certifies its iterate with no extra pass:
    :func:`roofline.glm.duality_gap` computes them from the data.

    Parameters
    ----------
    loss_sum : float
        ``sum_i s_i loss(z_i, y_i)``.
    conj_sum : float
        ``sum_i s_i (-loss*(loss'(z_i)))``: :func:`roofline.glm.newton.conj_sum` of
        ``-loss'(z)`` (with the weights).
    g_b, h_b : float
        ``sum_i s_i loss'(z_i)`` and ``sum_i s_i loss''(z_i)``.
    u_sq : float
        ``||X S loss'(z)||^2`` (the squared norm of the loss part of the gradient, unscaled).
    coef : ndarray, shape (n_features,)
    intercept : float
    n : int
        The number of examples (over every rank).
    alpha : float
        The L2 strength (mean-loss scaling, :func:`~roofline.glm.fit_glm`'s).
    fit_intercept : bool

    Returns
    -------
    P, gap : float
    """
    w = np.asarray(coef, dtype=np.float64)
    return _certificate([loss_sum, conj_sum, -g_b, g_b, h_b], 0.5 * float(w @ w), u_sq,
                        float(intercept), n=n, lam_n=float(alpha) * n, l1=False,
                        fit_intercept=fit_intercept)


# ---------------------------------------------------------------------------------------------
# the problem: data in both layouts, objectives and certificates


class GLMProblem:
    """One GLM training problem: data, labels and the objective's exact scaling.

    Holds ``X`` (``n_features x n_examples`` CSC) and, when the primal is needed, its
    feature-major twin (``X^T`` as CSC: column ``j`` = the examples where feature ``j`` occurs).
    """

    def __init__(self, X, y, loss_code, l1, alpha, fit_intercept, intercept_scaling=1.0,
                 primal=True, n_total=None, serial=False, sample_weight=None, l1_ratio=None):
        self.X = X
        #: the dual's example weights (mean one over every example), or None: see
        #: :meth:`weight_levels`
        self.sw = None if sample_weight is None else np.asarray(sample_weight, np.float64)
        self.levels = None if self.sw is None else self.weight_levels(self.sw, y)
        # a worker thread must not launch numba parallel kernels (see cd.matvec)
        self._parallel = not serial
        self.y = y
        self.loss = int(loss_code)
        self.l1 = bool(l1)
        self.alpha = float(alpha)
        self.d, self.n_local = X.shape
        # a worker holding a shard of the examples still uses the global scaling
        self.n = self.n_local if n_total is None else int(n_total)
        self.lam_n = self.alpha * self.n
        #: the elastic net's ``r`` strictly inside (0, 1), else None (``r = 1`` is the l1
        #: problem, ``l1=True``; ``r = 0`` the l2 one): ``R = r |w|_1 + (1 - r) |w|^2 / 2``,
        #: i.e. ``lam1 = r lam_n`` and ``lam2 = (1 - r) lam_n`` in the sum objective
        self.l1_ratio = None
        if l1_ratio is not None and 0.0 < float(l1_ratio) < 1.0:
            if self.l1:
                raise ValueError("GLMProblem: l1_ratio in (0, 1) is the elastic net, not l1")
            self.l1_ratio = float(l1_ratio)
        self.fit_intercept = bool(fit_intercept)
        #: the dual keeps an unregularised intercept ``b`` of its own (``intercept_scaling=None``,
        #: :func:`roofline.glm._scd.scd_dual`), not liblinear's regularised constant feature
        self.free_intercept = self.fit_intercept and intercept_scaling is None
        self.icpt = (float(intercept_scaling) if fit_intercept and intercept_scaling is not None
                     else 0.0)
        self.Xt = None
        #: :func:`cd.unit_columns` of ``X`` once a solver has them (the dual's record):
        #: the maps then skip the values of all-ones examples
        self.unit = None
        #: the smaller class's examples as a CSC matrix of their own (:meth:`_minority`)
        self._minority_cols = None
        if primal:
            self.Xt = cd.feature_major(X)
            self.colsq_primal = cd.col_sqnorms(self.Xt, parallel=self._parallel)

    @staticmethod
    def weight_levels(sw, y):
        """The examples grouped by their weight: ``[(s, idx, y[idx]), ...]`` over the distinct
        positive weights ``s`` (zero-weight examples are in no group: their dual variables
        stay 0 and they add nothing to any sum).

        The weighted dual (weighted SDCA): example ``i``'s loss is ``s_i l_i``, its dual
        variable ``a_i = s_i b_i`` with ``b_i`` in the unweighted loss's dual domain (the
        hinge's box ``[0, s_i]``), its conjugate term ``s_i (-l_i^*(-b_i))``.  A coordinate step
        in ``b_i`` is the unweighted step with the margin ``x_i^T v / lam_n`` and the curvature
        ``s_i ||x_i||^2 / lam_n``, which moves ``v`` by ``s_i`` times the step: the unweighted
        kernel against ``v / s`` with ``lam_n / s``, for every example of one weight at once.
        """
        pos = np.flatnonzero(sw > 0)
        vals, inv = np.unique(sw[pos], return_inverse=True)
        order = np.argsort(inv, kind="stable")
        cuts = np.searchsorted(inv[order], np.arange(vals.size + 1))
        out = []
        for k, c in enumerate(vals):
            idx = pos[order[cuts[k]:cuts[k + 1]]].astype(np.int64)
            out.append((float(c), idx, np.ascontiguousarray(y[idx])))
        return out

    # -- basic maps --------------------------------------------------------------------------
    def margins(self, w, b, out=None):
        """``z = X^T w + b`` in float64."""
        return cd.matvec(self.X, w, out, b, parallel=self._parallel, unit=self.unit)

    def xdot(self, a, out=None):
        """``X a`` (a d-vector) in float64."""
        out = np.zeros(self.d) if out is None else out
        out[:] = 0.0
        return cd.matvec_t(self.X, a, out, unit=self.unit)

    def reg(self, w):
        if self.l1_ratio is not None:
            r = self.l1_ratio
            return r * float(np.abs(w).sum()) + 0.5 * (1.0 - r) * float(w @ w)
        return float(np.abs(w).sum()) if self.l1 else 0.5 * float(w @ w)

    @property
    def lam1(self):
        """The L1 strength of the sum objective (``lam_n`` for l1, ``r lam_n`` for the elastic
        net, 0 for l2)."""
        if self.l1_ratio is not None:
            return self.l1_ratio * self.lam_n
        return self.lam_n if self.l1 else 0.0

    @property
    def lam2(self):
        """The L2 strength of the sum objective (``(1 - r) lam_n`` for the elastic net)."""
        if self.l1_ratio is not None:
            return (1.0 - self.l1_ratio) * self.lam_n
        return 0.0 if self.l1 else self.lam_n

    def primal_step_kw(self):
        """The penalty's keywords of :func:`cd.primal_epoch` / :func:`cd.primal_tpa`
        (``l1``, ``lam_n`` and, for the elastic net only, ``lam2``)."""
        if self.l1_ratio is not None:
            return dict(l1=True, lam_n=self.lam1, lam2=self.lam2)
        return dict(l1=self.l1, lam_n=self.lam_n)

    def primal_obj(self, z, w):
        return (cd.loss_sum(z, self.y, self.loss) + self.lam_n * self.reg(w)) / self.n

    # -- certificates ------------------------------------------------------------------------
    def dual_scale(self, u_inf):
        """The factor that makes ``a`` dual-feasible for the l1 penalty (1 for l2)."""
        if not self.l1 or u_inf <= self.lam_n:
            return 1.0
        return self.lam_n / u_inf

    def dual_candidate(self, z):
        """``(a, g_b, h_b)``: the dual point ``a = -loss'(z)`` of margins ``z`` and the
        intercept's gradient and curvature sums."""
        return cd.grad(z, self.y, self.loss)

    def grad_parts(self, z, cand, b, s):
        """Local sums for the primal certificate over this object's examples:
        ``[sum loss(z), sum -loss*(-s a), s * sum a, g_b, h_b]``, ``cand`` from
        :meth:`dual_candidate`."""
        a, g_b, h_b = cand
        return np.array([cd.loss_sum(z, self.y, self.loss),
                         cd.conj_sum(s * a, self.y, self.loss), s * a.sum(), g_b, h_b])

    def certificate(self, parts, reg, u_sq, b):
        """``(P, gap)`` from (possibly all-reduced) sums: ``parts`` from :meth:`grad_parts`,
        ``reg = R(w)``, ``u_sq = ||X a||^2`` (the elastic net: :meth:`conj_sq` of ``X a``).

        The elastic net's dual is that of l2 with the conjugate of ``lam1 |w| + lam2 w^2 / 2``,
        ``sum_j soft(u_j, lam1)^2 / (2 lam2)``: finite everywhere, so the dual point
        ``a = -loss'(z)`` needs no rescaling and the gap is exact (at a fixed intercept)."""
        return _certificate(parts, reg, u_sq, b, n=self.n, lam_n=self.lam_n, l1=self.l1,
                            fit_intercept=self.fit_intercept,
                            lam_conj=None if self.l1_ratio is None else self.lam2)

    def conj_sq(self, u):
        """``||u||^2``, or for the elastic net ``sum_j soft(u_j, lam1)^2`` (the squared norm
        in the penalty's conjugate at ``u = X a``)."""
        if self.l1_ratio is None:
            return float(u @ u)
        t = np.maximum(np.abs(u) - self.lam1, 0.0)
        return float(t @ t)

    def primal_gap(self, w, b, z):
        """``(P, gap)`` for a primal iterate (see the module docstring)."""
        cand = self.dual_candidate(z)
        u = self.xdot(cand[0])
        s = self.dual_scale(float(np.abs(u).max()))
        return self.certificate(self.grad_parts(z, cand, b, s), self.reg(w), self.conj_sq(u), b)

    def dual_point(self, a):
        """Exact ``v = [X a; icpt * sum(a)]`` for the dual variables."""
        v = np.zeros(self.d + (1 if self.icpt else 0))
        self.xdot(a, v[: self.d])
        if self.icpt:
            v[self.d] = self.icpt * a.sum()
        return v

    def dual_obj(self, a, v, conj=None):
        """``D(a)``; ``conj``: ``cd_conj_sum`` of ``a`` when the caller has it."""
        C = cd.conj_sum(a, self.y, self.loss) if conj is None else conj
        return (C - 0.5 * vdot(v, v) / self.lam_n) / self.n

    def dual_colsq(self):
        return cd.col_sqnorms(self.X, parallel=self._parallel)

    def dual_primal(self, v, b=0.0):
        """The primal point ``(w, b)`` of the dual vector ``v`` (``b``: the unregularised
        intercept of a :attr:`free_intercept` dual, returned as it is)."""
        wf = v / self.lam_n
        w = wf[: self.d]
        if self.icpt:
            b = self.icpt * wf[self.d]
        return w, float(b)

    def dual_parts(self, a, v, b=None, direction=None):
        """Local sums ``[sum loss(z), sum -loss*(-a)]`` over this object's examples.

        With sample weights (:meth:`weight_levels`), ``a`` holds the per-unit-weight dual
        variables ``b = a / s`` and the sums are ``[sum s loss(z), sum s (-loss*(-b))]``.

        ``b``: the unregularised intercept of a :attr:`free_intercept` dual (unweighted, one
        process); the margins are then shifted by ``b`` and the sums are
        ``[sum loss(z), sum -loss*(-a), sum a, sum -loss*(-a'), ||X a'||^2, ||v||^2]`` with
        ``a'`` the feasible point of :meth:`balanced_dual` (:meth:`dual_certificate`), or
        with ``direction = (d, X d)`` (``sum d = 1``, from :meth:`projected_dual_gap`)
        ``a' = a - d sum a`` where that is in the loss's dual domain (no scatter)."""
        # z = X^T (v / lam_n) + b without the d-vector w (a fresh array of 2^22 features costs
        # more in page faults than the product itself)
        z = self.margins(v[: self.d], 0.0)
        shift = self.icpt * v[self.d] / self.lam_n if self.icpt else 0.0
        if b is not None:
            if self.levels is not None:
                raise ValueError("a dual with an unregularised intercept takes no sample "
                                 "weights")
            # one pass over the examples (a and y are strided columns of the solver's
            # per-example records: each numpy pass over them reads all of the records)
            f = cd.free_parts(z, 1.0 / self.lam_n, shift + b, a, self.y, self.loss)
            S = float(f[4])
            C = float(f[1] + f[2] + f[3])
            a2 = None
            if direction is not None and S != 0.0:
                a2 = a - S * direction[0]
                if self.loss == LOGISTIC and not (
                        (a2 * self.y).min() >= 0.0 and (a2 * self.y).max() <= 1.0):
                    a2 = None
                else:
                    u = v[: self.d] - S * direction[1]
                    C2 = cd.conj_sum(a2, self.y, self.loss)
            if a2 is None:
                C2, u = self._balanced_parts(a, v, f)
            return np.array([f[0], C, S, C2, vdot(u, u), vdot(v, v)])
        z *= 1.0 / self.lam_n
        if shift:
            z += shift
        if self.levels is not None:
            L = C = 0.0
            for c, idx, y in self.levels:
                L += c * cd.loss_sum(z[idx], y, self.loss)
                C += c * cd.conj_sum(a[idx], y, self.loss)
            return np.array([L, C])
        return np.array([cd.loss_sum(z, self.y, self.loss),
                         cd.conj_sum(a, self.y, self.loss)])

    def balanced_dual(self, a, v, S=None):
        """A feasible point ``a'`` of the dual with an unregularised intercept (whose
        constraint is ``sum a' = 0``) near ``a``, and ``X a'``.

        The dual variables of the sign of ``S = sum a`` are scaled by ``1 - theta``,
        ``theta = |S| / sum_{sign a_i = sign S} |a_i|`` (at most 1): each stays in its loss's
        dual domain (an interval holding 0 and ``a_i``) and the sum becomes 0.  ``X a' = v -
        theta X a_s`` costs a scatter over the examples of one sign only: those of ``a_s``,
        or, where the other sign has fewer, those of ``a_o = a - a_s`` (``X a_s = v - X a_o``;
        for the logistic loss the signs are the classes: on Criteo-like data, whose positives
        are ~27% of the examples, a scatter over those where ``S < 0`` instead of the other
        ~73%)."""
        S = float(a.sum()) if S is None else S
        if S == 0.0:
            return a, v[: self.d]
        side = np.maximum(a, 0.0) if S > 0.0 else np.minimum(a, 0.0)
        theta = S / float(side.sum())
        if (self.loss != SQUARED and self._minority() is not None
                and float((a * self.y).min()) >= 0.0):
            # the signs are the classes (the classification losses: y a in [0, 1] and more):
            # the smaller class's examples, compacted once, scatter in ~a third of the time of
            # the same examples picked out of X (200k Criteo-like x 2^18, 27% positives: 6 ms
            # against 16 ms on the loaded machine; the copy costs ~15 ms once)
            sign, idx, Xc, unit = self._minority()
            xs = cd.matvec_t(Xc, np.ascontiguousarray(a[idx]), np.zeros(self.d), unit=unit)
            return a - theta * side, self._blend(xs, v, theta, sign * S > 0.0)
        n_side = np.count_nonzero(side)
        if np.count_nonzero(a) - n_side < n_side:
            # X a' = v - theta (v - X a_o) = (1 - theta) v + theta X a_o
            u = self.xdot(a - side)
            u *= theta
            u += (1.0 - theta) * v[: self.d]
        else:
            u = self.xdot(side)
            u *= -theta
            u += v[: self.d]
        return a - theta * side, u

    def _balanced_parts(self, a, v, f):
        """``(sum -loss*(-a'), X a')`` at the point ``a'`` of :meth:`balanced_dual`, from the
        statistics ``f`` of :func:`cd.free_parts` (``a'`` itself is not formed).

        For the classification losses (``y a >= 0``, :meth:`_minority`) the conjugate sum of
        ``a'`` is that of the side left as it is (from ``f``) plus the scaled side's, in one
        pass that also gathers the smaller class's ``a`` for its scatter (over the smaller
        class only, where that is the scaled side); else :meth:`balanced_dual`."""
        S = float(f[4])
        if S == 0.0:
            return float(f[1] + f[2] + f[3]), v[: self.d]
        if self.loss == SQUARED or not f[7] >= 0.0 or self._minority() is None:
            a2, u = self.balanced_dual(a, v, S)
            return cd.conj_sum(a2, self.y, self.loss), u
        side = 1.0 if S > 0.0 else -1.0
        theta = S / float(f[5] if S > 0.0 else f[6])
        sign, idx, Xc, unit = self._minority()
        kept = float((f[2] if S > 0.0 else f[1]) + f[3])  # the side left as it is
        t1, t2 = (f[8], f[9]) if S > 0.0 else (f[10], f[11])
        if (self.loss == LOGISTIC and theta <= _ENTROPY_BOUND_THETA and np.isfinite(t1)
                and np.isfinite(t2)):
            # the scaled side's conjugates without a pass over it: the entropy H is concave,
            # H'' = -1 / (xi (1 - xi)), and on [(1 - theta) beta, beta] xi (1 - xi) >=
            # (1 - theta) beta (1 - beta), so H((1 - theta) beta) >= H(beta) - theta beta
            # H'(beta) - theta^2 beta / (2 (1 - theta) (1 - beta)): a lower bound of D(a')
            # (the certificate stays one), short of it by O(theta^3) (theta ~ 1e-4..1e-3)
            c_side = float(f[1] if S > 0.0 else f[2])
            C2 = kept + (c_side - theta * t1 - 0.5 * theta * theta / (1.0 - theta) * t2)
            xa = a[idx]
        else:
            xa = np.empty(idx.size)
            C2 = kept + cd.scaled_side_conj(a, self.y, self.loss, theta, side, idx,
                                            sign == side, xa)
        xs = cd.matvec_t(Xc, xa, np.zeros(self.d), unit=unit)
        return C2, self._blend(xs, v, theta, sign * S > 0.0)

    def _blend(self, xs, v, theta, scaled):
        """``X a'`` from the smaller class's ``xs = X a_c`` (in place): ``v - theta xs`` where
        that class is the scaled side, else ``(1 - theta) v + theta xs``."""
        if scaled:  # X a_s itself
            xs *= -theta
            xs += v[: self.d]
        else:  # X a' = (1 - theta) v + theta X a_o
            xs *= theta
            xs += (1.0 - theta) * v[: self.d]
        return xs

    def _minority(self):
        """``(sign, idx, X_c, unit_c)``: the examples ``idx`` of the smaller class (labels of
        sign ``sign``) and their columns of ``X`` copied into a CSC matrix of their own
        (``unit_c`` their :attr:`unit` flags), made at the first call (the memory of those
        columns: at most half of ``X``'s); None where a label is 0 (not two classes)."""
        if self._minority_cols is None and not np.all(self.y != 0.0):
            self._minority_cols = False
        if self._minority_cols is None:
            n_pos = int(np.count_nonzero(self.y > 0))
            sign = 1.0 if n_pos <= self.n_local - n_pos else -1.0
            idx = np.flatnonzero(self.y * sign > 0)
            Xc = sp.csc_matrix(self.X[:, idx])
            unit = None if self.unit is None else np.ascontiguousarray(self.unit[idx])
            self._minority_cols = (sign, idx, Xc, unit)
        return self._minority_cols or None

    def dual_certificate(self, parts, v, b=0.0):
        """``(P, gap)`` of a dual iterate from (all-reduced) :meth:`dual_parts`.

        With the two sums of a regularised (or no) intercept, the plain duality gap.  With the
        six of a :attr:`free_intercept` dual at the intercept ``b``: ``P(w, b) - D(a')``, the
        duality gap of the problem with the unregularised intercept at the feasible point
        ``a'`` of :meth:`balanced_dual` (``D(a') <= P*``: a certificate with no estimate in
        it).  It is loose where frequent features move with ``b`` (the correction ``a - a'``
        moves them): once the gap at the fixed ``b`` meets the tolerance, the solver tries the
        closer zero-sum points of :meth:`projected_dual_gap` (as rigorous).  (The primal
        solvers' kind of estimate, the gap at the fixed ``b`` plus a second-order estimate of
        what moving ``b`` still gains with a secant curvature, was tried: it under-estimated
        the suboptimality, up to 80x on a small sparse problem.)
        """
        if len(parts) == 2:
            q = 0.5 * vdot(v, v) / self.lam_n  # = lam_n ||w||^2 / 2
            L, C = parts
            P = (L + q) / self.n
            return P, max(P - (C - q) / self.n, 0.0)
        L, _, _, C2, uu, vv = parts
        P = (L + 0.5 * vv / self.lam_n) / self.n
        return P, max(P - (C2 - 0.5 * uu / self.lam_n) / self.n, 0.0)

    def projected_dual_gap(self, a, v, parts, target=0.0, max_iter=8, start=None):
        """A tighter certificate of a :attr:`free_intercept` dual (logistic, squared loss):
        ``P(w, b) - max_k D(a'_k)`` over zero-sum feasible points ``a'_k`` near ``a``.

        The certificate of :meth:`dual_certificate` corrects ``sum a`` by scaling the dual
        variables of its sign, which moves ``X a`` along the frequent features.  Here the
        correction ``delta`` (``a' = a - delta``, ``sum delta = S = sum a``) comes from the
        dual's second-order model, ``min g^T delta + delta^T (H + X^T X / lam_n) delta / 2``
        on ``sum delta = S`` (``g`` the dual's gradient, ``H`` the conjugates' curvature
        ``1 / l''``): projected conjugate gradients, preconditioned by ``H`` (the projection
        onto ``sum = 0`` in its metric), from the better of the correction distributed by
        curvature (``delta_i ~ l''_i``) and ``start`` (the direction that certified last
        time, scaled to ``S``).  Each candidate ``a - delta`` is evaluated **exactly** (the
        model only proposes it); where it leaves the loss's dual domain (the logistic's
        ``y a in [0, 1]``) it is blended with the scaled point of :meth:`balanced_dual`
        (zero-sum, feasible) as far as the domain allows.  Every point evaluated is zero-sum
        (to rounding) and feasible, so ``D(a') <= P*``: the value returned bounds the
        suboptimality ``P(w, b) - P*`` with no estimate in it.  A step costs a scatter and a
        gather over the data; it stops once the gap is at most ``target`` or after
        ``max_iter`` steps.

        Parameters
        ----------
        a, v : ndarray
            The dual variables and ``X a``.
        parts : ndarray
            Their six :meth:`dual_parts` at the intercept ``b``.
        target : float
            Stop once the gap is at most this.
        max_iter : int
            Conjugate-gradient steps at most.
        start : tuple of ndarray, optional
            ``(d, X d)`` with ``sum d = 1``: a direction to try first (``delta = S d``).

        Returns
        -------
        gap : float
            ``P(w, b) - D(a')`` for the best ``a'`` found, at most the certificate of
            :meth:`dual_certificate`.
        direction : tuple of ndarray or None
            ``(d, X d)`` of the best correction, ``d = delta / S`` (None: the scaled point's).
        """
        L, _, S, C2, uu, vv = (float(t) for t in parts)
        n, lam, y = self.n, self.lam_n, self.y
        P = (L + 0.5 * vv / lam) / n
        best = [max(P - (C2 - 0.5 * uu / lam) / n, 0.0), None]
        if self.loss not in (LOGISTIC, SQUARED) or S == 0.0 or best[0] <= target:
            return best[0], None
        logistic = self.loss == LOGISTIC
        vd = v[: self.d]
        fallback = []  # balanced_dual's feasible, zero-sum point (a scatter): when needed

        def balanced():
            if not fallback:
                fallback.extend(self.balanced_dual(a, v, S))
            return fallback
        if logistic:
            beta = np.clip(a * y, 0.0, 1.0)
            W = beta * (1.0 - beta)  # 1 / H: l''
            inner = W > 0.0
            if not inner.any():
                return best[0], None
        else:
            W, inner = np.ones_like(a), None
        Q = W  # the preconditioner (H's inverse)
        sw = float(Q.sum())

        def exact(delta, xdelta):
            a2 = a - delta
            t = 1.0
            b2 = a2 * y
            lo, hi = b2 < 0.0, b2 > 1.0
            if logistic and (lo.any() or hi.any()):
                # y a' in [0, 1]: blend with a1 (inside) as far as it may go
                a1, u1 = balanced()
                b1 = a1 * y
                if lo.any():
                    t = min(t, float(np.min(b1[lo] / (b1[lo] - b2[lo]))))
                if hi.any():
                    t = min(t, float(np.min((1.0 - b1[hi]) / (b2[hi] - b1[hi]))))
                t = max(t, 0.0)
            for tt in (t, 0.5 * t) if t < 1.0 else (t,):
                if tt < 1.0:
                    a1, u1 = balanced()
                    ap = (1.0 - tt) * a1 + tt * a2
                    up = (1.0 - tt) * u1 + tt * (vd - xdelta)
                else:
                    ap, up = a2, vd - xdelta
                if logistic:  # rounding: keep the point inside the domain
                    ap = y * np.clip(ap * y, 0.0, 1.0)
                gap = P - (cd.conj_sum(ap, y, self.loss) - 0.5 * vdot(up, up) / lam) / n
                if gap <= best[0]:
                    best[:] = [max(gap, 0.0), ((a - ap) / S, (vd - up) / S)]
            logger.debug("projected dual point: t %.3g, certificate %.3e", t, best[0])

        if start is not None:  # the last direction: no scatter
            delta, xdelta = S * start[0], S * start[1]
            exact(delta, xdelta)
        if best[0] <= target or max_iter < 1:
            return best[0], best[1]
        if start is None or best[1] is None:  # (not feasible there) curvature-distributed
            delta = Q * (S / sw)
            xdelta = self.xdot(delta)
            exact(delta, xdelta)
            if best[0] <= target:
                return best[0], best[1]
        if logistic:
            with np.errstate(divide="ignore", invalid="ignore"):
                g = -y * (np.log(beta) - np.log1p(-beta))
            g = np.where(inner, g, 0.0)  # the examples at their domain's ends stay put
        else:
            g = y - a

        def project(r):  # Q r, projected onto sum = 0 in Q's metric
            z = Q * r
            z -= Q * (float(z.sum()) / sw)
            return z

        def matvec(p):  # (H + X^T X / lam) p, and X p
            xp = self.xdot(p)
            Mp = self.margins(xp, 0.0)
            Mp *= 1.0 / lam
            Mp += np.divide(p, W, out=np.zeros_like(p), where=inner) if logistic else p
            return Mp, xp

        # r = -(g + M delta): the gradient of the dual at a - delta, one gather of v - X delta
        r = self.margins(vd - xdelta, 0.0)
        r *= 1.0 / lam
        r -= g
        r -= np.divide(delta, W, out=np.zeros_like(delta), where=inner) if logistic else delta
        z = project(r)
        p = z.copy()
        rz = vdot(r, z)
        for _ in range(max_iter):
            if best[0] <= target or not rz > 0.0:
                break
            Mp, xp = matvec(p)
            pMp = vdot(p, Mp)
            if not pMp > 0.0:
                break
            alpha = rz / pMp
            delta += alpha * p
            xdelta += alpha * xp
            r -= alpha * Mp
            exact(delta, xdelta)
            z = project(r)
            rz, rz_old = vdot(r, z), rz
            p *= rz / rz_old
            p += z
        return best[0], best[1]

    def fixed_intercept_gap(self, parts, v, b):
        """The duality gap of the problem at the fixed intercept ``b`` (of a
        :attr:`free_intercept` dual's five :meth:`dual_parts`): ``P(w, b) - D_b(a)``,
        ``D_b(a) = (sum -loss*(-a) - b sum a - lam_n ||w||^2 / 2) / n``, a lower bound of
        ``min_w P(w, b)`` only."""
        L, C, S = parts[:3]
        q = 0.5 * parts[5] / self.lam_n
        return max((L + q) / self.n - (C - b * S - q) / self.n, 0.0)

    def dual_gap(self, a, v):
        """``(P, gap)`` for a dual iterate holding all the examples."""
        return self.dual_certificate(self.dual_parts(a, v), v)


# ---------------------------------------------------------------------------------------------
# bookkeeping shared by the solvers


class Trace:
    """Objective / gap / time trace with the check time kept out of the solver time."""

    def __init__(self, tol, verbose=0):
        self.tol = tol
        self.verbose = verbose
        self.P, self.G, self.T = [], [], []
        self.solve = 0.0
        self.check = 0.0
        self._t = None
        #: ``monitor(it, P, gap) -> bool`` after each check of :meth:`end_check`; ``True``
        #: stops the solver as a callback would (:class:`StallMonitor`)
        self.monitor = None

    def start(self):
        self._t = time.perf_counter()

    def stop(self):
        self.solve += time.perf_counter() - self._t

    def record(self, it, P, gap, t_check):
        self.check += t_check
        self.P.append(P)
        self.G.append(gap)
        self.T.append(self.solve)
        lvl = logging.INFO if self.verbose else logging.DEBUG
        logger.log(lvl, "iter %d  objective %.10g  gap %.3e  time %.3fs", it, P, gap, self.solve)
        if not np.isfinite(P):
            raise FloatingPointError(
                f"the objective became {P} at iteration {it}: the solver diverged "
                "(use damping / adaptive damping, or a larger alpha)"
            )
        return self.converged(P, gap)

    def converged(self, P, gap):
        """Whether a relative duality gap ``gap / |P|`` meets the tolerance."""
        return gap <= self.tol * max(abs(P), 1e-300)

    def end_check(self, it, P, gap, t0, callback=None, point=None):
        """The tail of a check: the user's callback, then :meth:`record`.

        Parameters
        ----------
        it : int
            The iteration checked.
        P, gap : float
            Its objective and duality gap.
        t0 : float
            ``time.perf_counter()`` when the check began (the callback's time counts as
            check time).
        callback : callable or None
            ``callback(it, w, b)``; returning ``True`` asks the solver to stop.
        point : callable, optional
            ``point() -> (w, b)``, the primal point shown to ``callback``.

        Returns
        -------
        {"converged", "stopped", None}
            ``"converged"`` when the gap meets the tolerance, ``"stopped"`` when the callback
            asked to stop, ``None`` to go on.
        """
        stop = callback is not None and bool(callback(it, *point()))
        if self.record(it, P, gap, time.perf_counter() - t0):
            return "converged"
        if not stop and self.monitor is not None and self.monitor(it, P, gap):
            stop = True
        return "stopped" if stop else None


class StallMonitor:
    """Tells when a coordinate-descent run converges too slowly to finish: the stall switch
    of :func:`roofline.learners.fit_glm` (``stall_switch``).

    After each check it fits the gap's recent linear rate ``r`` per check (over the last
    ``window`` checks) and predicts the checks still needed to reach ``tol``:
    ``log(tol |P| / gap) / log(r)``.  It fires once that exceeds ``budget`` checks (each about
    one pass over the data) and the run has made at least ``min_checks`` checks; the caller
    then hands the primal point to the trust-region Newton solver, whose whole run costs
    about as many passes as ``budget`` on the problems where dual CD crawls.

    Parameters
    ----------
    tol : float
        The relative duality-gap target.
    budget : float
        Predicted further checks above which the run is deemed stalled.
    min_checks : int
        Checks before the first decision (the first sweeps' rate is not the asymptotic one).
    window : int
        Checks the rate is measured over.
    """

    def __init__(self, tol, budget=40.0, min_checks=6, window=4):
        self.tol, self.budget = float(tol), float(budget)
        self.min_checks, self.window = int(min_checks), int(window)
        self.gaps = []
        self.fired_at = None
        self.predicted = None

    def __call__(self, it, P, gap):
        """Record a check; ``True`` when the run should hand over."""
        rel = gap / max(abs(P), 1e-300)
        self.gaps.append(rel)
        k = len(self.gaps)
        if k < max(self.min_checks, self.window + 1) or self.fired_at is not None:
            return False
        old = self.gaps[-1 - self.window]
        if not (rel > 0 and old > 0):
            return False
        rate = (rel / old) ** (1.0 / self.window)
        if rate >= 1.0:
            need = float("inf")
        else:
            need = np.log(self.tol / rel) / np.log(rate)
        if need > self.budget:
            self.fired_at, self.predicted = it, need
            return True
        return False


class _NoBar:
    """The progress bar of a quiet fit: ``update`` and ``close`` do nothing.  A disabled
    ``tqdm`` costs ~0.2 ms to create (it scans its registry of live bars), a sixth of a
    millisecond fit."""

    disable = True

    def update(self, n=1):
        pass

    def close(self):
        pass


def progress_bar(total, verbose, desc):
    """A ``tqdm`` bar over ``total`` iterations, shown only with ``verbose`` on a terminal
    (:func:`verbose_logging` reports the progress everywhere else); otherwise a bar that
    does nothing."""
    if not (verbose and sys.stderr.isatty()):
        return _NoBar()
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc)


# the logger the solvers' progress goes to (every module of the chain logs under it)
_PACKAGE_LOGGER = "roofline"


@contextlib.contextmanager
def verbose_logging(verbose):
    """A context in which, with ``verbose >= 1``, the solvers' INFO progress lines reach stderr.

    When logging is configured (any handler on the ``roofline`` logger or above it)
    nothing changes: the application decides.  Otherwise a stderr handler is attached to
    ``roofline`` at level INFO for the duration (terminal or not), and removed after.

    Parameters
    ----------
    verbose : int or bool
        The estimators' and solvers' ``verbose`` argument.

    Yields
    ------
    None
    """
    log = logging.getLogger(_PACKAGE_LOGGER)
    if not verbose or log.hasHandlers():
        yield
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    level = log.level
    log.addHandler(handler)
    if log.getEffectiveLevel() > logging.INFO:
        log.setLevel(logging.INFO)
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


def convergence_warning():
    """scikit-learn's :class:`~sklearn.exceptions.ConvergenceWarning`, imported when a solver
    warns (``import roofline.glm`` does not import scikit-learn: ~1.2 s of a command's start).

    Returns
    -------
    type
        The warning class users filter.
    """
    from sklearn.exceptions import ConvergenceWarning

    return ConvergenceWarning


def warn_not_converged(solver, tol, n_iter, gap, objective, reason="max_iter", stacklevel=3):
    """Emit :class:`sklearn.exceptions.ConvergenceWarning` for a solver that stopped before its
    duality gap met ``tol`` (``reason``: ``"max_iter"``, or why it stalled)."""
    rel = gap / max(abs(objective), 1e-300) if np.isfinite(objective) else float("nan")
    why = (f"reached max_iter={n_iter}" if reason == "max_iter" else reason)
    warnings.warn(
        f"{solver} {why} without converging: relative duality gap {rel:.3e} > tol={tol:g}; "
        "raise max_iter, loosen tol, or increase alpha",
        convergence_warning(), stacklevel=stacklevel,
    )


class CheckSchedule:
    """When a sweeping solver computes its duality gap (``check_every`` of :func:`fit_glm`).

    An integer checks every that many sweeps.  ``"auto"`` checks once the sweeps since the last
    check have made as many coordinate steps as there are coordinates: after every full sweep,
    and every ``1 / active_fraction`` partial sweeps.  A check costs about one pass over the
    data (at 1M Criteo-like examples ~0.15 s, against ~0.37 s for a full dual sweep and ~0.08 s
    for a partial one), so checks take about a third of the run instead of two thirds with a
    check after each partial sweep; the schedule counts steps, not seconds, so a seeded run stays
    deterministic.  The last iteration is always checked.
    """

    def __init__(self, check_every, max_iter, n_coords):
        self.every, self.max_iter, self.n = check_every, max_iter, n_coords
        self.steps = 0

    def due(self, it, n_steps):
        """Whether to check after sweep ``it`` (from 1), which made ``n_steps`` steps."""
        self.steps += n_steps
        if it == self.max_iter:
            return True
        if self.every != "auto":
            return it % self.every == 0
        if self.steps >= self.n:
            self.steps = 0
            return True
        return False

