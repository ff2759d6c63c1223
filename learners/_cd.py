"""Coordinate-descent solvers for generalized linear models (Snap ML / SDCA / Google SCD family).

The objective (written once; every solver here minimises exactly this)
----------------------------------------------------------------------
With ``X`` of shape ``(n_features, n_examples)`` (one column = one example, the project layout),
``n = n_examples``, margins ``z_i = x_i^T w + b``::

    P(w, b) = (1/n) * sum_i loss(z_i, y_i) + alpha * R(w)

    R(w) = ||w||^2 / 2      (penalty="l2")
    R(w) = ||w||_1          (penalty="l1")

    loss="squared"   loss(z, y) = (z - y)^2 / 2
    loss="logistic"  loss(z, y) = log(1 + exp(-y z)),   y in {-1, +1}   ({0, 1} accepted)
    loss="hinge"     loss(z, y) = max(0, 1 - y z),       y in {-1, +1}   ({0, 1} accepted)

The intercept ``b`` is *not* regularised in the primal solvers (it is its own coordinate, as in
scikit-learn's Ridge, Lasso and LogisticRegression).  The dual solvers (SDCA) cannot keep an
unregularised intercept; there, as in liblinear and snapml, ``fit_intercept`` appends a constant
feature of value ``intercept_scaling`` whose weight *is* regularised.

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
for the l1 penalty); with an intercept, ``G`` is the gap of the problem with ``b`` held fixed,
plus the second-order estimate ``g_b^2 / (2 h_b)`` of what moving ``b`` would still gain.  A
solver stops when ``G <= tol * |P|``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from roofline import gmat

__all__ = [
    "CDResult",
    "alpha_from_peer",
    "alpha_to_peer",
    "fit_glm_cd",
]

logger = logging.getLogger(__name__)

LOSSES = {
    "squared": 0,
    "least_squares": 0,
    "logistic": 1,
    "log": 1,
    "log_loss": 1,
    "hinge": 2,
}
_LOSS_NAMES = {0: "squared", 1: "logistic", 2: "hinge"}
SOLVERS = ("scd", "tpa-scd", "cocoa", "hcocoa", "pure-block")

# ---------------------------------------------------------------------------------------------
# conversions (the one place where peers' conventions are translated)

_PEERS = {
    # peer: (function value -> alpha, alpha -> value); n = number of examples
    "ridge": (lambda a, n: a / n, lambda al, n: al * n),
    "lasso": (lambda a, n: a, lambda al, n: al),
    "C": (lambda c, n: 1.0 / (c * n), lambda al, n: 1.0 / (al * n)),
    "snapml": (lambda r, n: r / n, lambda al, n: al * n),
}


def alpha_from_peer(peer: str, value: float, n_examples: int) -> float:
    """Our ``alpha`` for a peer's regularisation parameter on ``n_examples`` examples.

    Parameters
    ----------
    peer : {"ridge", "lasso", "C", "snapml"}
        ``"ridge"``: scikit-learn ``Ridge(alpha=value)``; ``"lasso"``: ``Lasso(alpha=value)``;
        ``"C"``: ``LogisticRegression(C=value)`` / ``LinearSVC(C=value)`` / liblinear;
        ``"snapml"``: snapml's ``regularizer=value``.
    value : float
    n_examples : int
    """
    if peer not in _PEERS:
        raise ValueError(f"peer must be one of {sorted(_PEERS)}, got {peer!r}")
    if not value > 0:
        raise ValueError(f"value must be positive, got {value!r}")
    return float(_PEERS[peer][0](float(value), int(n_examples)))


def alpha_to_peer(peer: str, alpha: float, n_examples: int) -> float:
    """Inverse of :func:`alpha_from_peer`."""
    if peer not in _PEERS:
        raise ValueError(f"peer must be one of {sorted(_PEERS)}, got {peer!r}")
    if not alpha > 0:
        raise ValueError(f"alpha must be positive, got {alpha!r}")
    return float(_PEERS[peer][1](float(alpha), int(n_examples)))


# ---------------------------------------------------------------------------------------------
# result


@dataclass
class CDResult:
    """What a coordinate-descent solver returns.

    Attributes
    ----------
    coef : ndarray, shape (n_features,)
    intercept : float
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
    dual_coef : ndarray or None
        The dual variables (one per example) for the dual solvers.
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

    @property
    def relative_gap(self) -> float:
        return self.gap / max(abs(float(self.objective[-1])), 1e-300)


# ---------------------------------------------------------------------------------------------
# validation


def _check_labels(y, loss_code, name="y", single_class_ok=False):
    """Float64 labels; classifier labels mapped from {0, 1} or {-1, 1} to {-1, +1}."""
    y = np.asarray(y)
    if y.dtype.kind not in "biuf":
        raise TypeError(f"{name} must be numeric, got dtype {y.dtype}")
    y = y.astype(np.float64).ravel()
    if not np.isfinite(y).all():
        bad = int(np.flatnonzero(~np.isfinite(y))[0])
        raise ValueError(f"{name} has a non-finite value {y[bad]} at position {bad}")
    if loss_code == 0:
        return y
    vals = np.unique(y)
    if vals.size > 2 or not (set(vals.tolist()) <= {-1.0, 1.0} or set(vals.tolist()) <= {0.0, 1.0}):
        raise ValueError(
            f"{name} must hold binary labels in {{-1, 1}} or {{0, 1}} for loss="
            f"{_LOSS_NAMES[loss_code]!r}; found values {vals[:5].tolist()}"
            f"{' ...' if vals.size > 5 else ''}"
        )
    if vals.size < 2 and not single_class_ok:
        raise ValueError(
            f"{name} holds a single class ({vals[0]:g}); a classifier needs both classes"
        )
    return np.where(y > 0, 1.0, -1.0)


def _check_X(X, name="X"):
    if sp.issparse(X):
        if X.format != "csc":
            raise TypeError(
                f"{name} must be CSC of shape (n_features, n_examples) (one column = one "
                f"example), got {X.format.upper()}; convert with {name}.tocsc()"
            )
        gmat.check_csc(X, name)
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
        X = sp.csc_matrix(X)
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"{name} is empty: shape {X.shape} (n_features, n_examples)")
    return X


def _positive(v, name, integer=False):
    if integer:
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
        return int(v)
    numeric = isinstance(v, (int, float, np.floating, np.integer)) and not isinstance(v, bool)
    if not numeric or not (v > 0) or not np.isfinite(v):
        raise ValueError(f"{name} must be a positive finite number, got {v!r}")
    return float(v)


# ---------------------------------------------------------------------------------------------
# the problem: data in both layouts, objectives and certificates


class GLMProblem:
    """One GLM training problem: data, labels and the objective's exact scaling.

    Holds ``X`` (``n_features x n_examples`` CSC) and, when the primal is needed, its
    feature-major twin (``X^T`` as CSC: column ``j`` = the examples where feature ``j`` occurs).
    """

    def __init__(self, X, y, loss_code, l1, alpha, fit_intercept, intercept_scaling=1.0,
                 primal=True, n_total=None, serial=False):
        self.X = X
        # a worker thread must not launch numba parallel kernels (see gmat.cd_matvec)
        self._parallel = not serial
        self.y = y
        self.loss = int(loss_code)
        self.l1 = bool(l1)
        self.alpha = float(alpha)
        self.d, self.n_local = X.shape
        # a worker holding a shard of the examples still uses the global scaling
        self.n = self.n_local if n_total is None else int(n_total)
        self.lam_n = self.alpha * self.n
        self.fit_intercept = bool(fit_intercept)
        self.icpt = float(intercept_scaling) if fit_intercept else 0.0
        self.Xt = None
        if primal:
            self.Xt = gmat.cd_feature_major(X)
            self.colsq_primal = gmat.cd_col_sqnorms(self.Xt, parallel=self._parallel)

    # -- basic maps --------------------------------------------------------------------------
    def margins(self, w, b, out=None):
        """``z = X^T w + b`` in float64."""
        return gmat.cd_matvec(self.X, w, out, b, parallel=self._parallel)

    def xdot(self, a, out=None):
        """``X a`` (a d-vector) in float64."""
        out = np.zeros(self.d) if out is None else out
        out[:] = 0.0
        return gmat.cd_matvec_t(self.X, a, out)

    def reg(self, w):
        return float(np.abs(w).sum()) if self.l1 else 0.5 * float(w @ w)

    def primal_obj(self, z, w):
        return (gmat.cd_loss_sum(z, self.y, self.loss) + self.lam_n * self.reg(w)) / self.n

    # -- certificates ------------------------------------------------------------------------
    def dual_scale(self, u_inf):
        """The factor that makes ``a`` dual-feasible for the l1 penalty (1 for l2)."""
        if not self.l1 or u_inf <= self.lam_n:
            return 1.0
        return self.lam_n / u_inf

    def dual_candidate(self, z):
        """``(a, g_b, h_b)``: the dual point ``a = -loss'(z)`` of margins ``z`` and the
        intercept's gradient and curvature sums."""
        return gmat.cd_grad(z, self.y, self.loss)

    def grad_parts(self, z, cand, b, s):
        """Local sums for the primal certificate over this object's examples:
        ``[sum loss(z), sum -loss*(-s a), s * sum a, g_b, h_b]``, ``cand`` from
        :meth:`dual_candidate`."""
        a, g_b, h_b = cand
        return np.array([gmat.cd_loss_sum(z, self.y, self.loss),
                         gmat.cd_conj_sum(s * a, self.y, self.loss), s * a.sum(), g_b, h_b])

    def certificate(self, parts, reg, u_sq, b):
        """``(P, gap)`` from (possibly all-reduced) sums: ``parts`` from :meth:`grad_parts`,
        ``reg = R(w)``, ``u_sq = ||X a||^2``."""
        L, C, A, g_b, h_b = parts
        P = (L + self.lam_n * reg) / self.n
        D = (C - b * A) / self.n
        if not self.l1:
            D -= 0.5 * u_sq / (self.lam_n * self.n)
        gap = P - D
        if self.fit_intercept and h_b > 0:
            gap += g_b * g_b / (2.0 * h_b * self.n)
        return P, max(gap, 0.0)

    def primal_gap(self, w, b, z):
        """``(P, gap)`` for a primal iterate (see the module docstring)."""
        cand = self.dual_candidate(z)
        u = self.xdot(cand[0])
        s = self.dual_scale(float(np.abs(u).max()))
        return self.certificate(self.grad_parts(z, cand, b, s), self.reg(w), float(u @ u), b)

    def dual_point(self, alpha):
        """Exact ``v = [X alpha; icpt * sum(alpha)]`` for the dual variables."""
        v = np.zeros(self.d + (1 if self.icpt else 0))
        self.xdot(alpha, v[: self.d])
        if self.icpt:
            v[self.d] = self.icpt * alpha.sum()
        return v

    def dual_obj(self, alpha, v, conj=None):
        """``D(alpha)``; ``conj``: ``cd_conj_sum`` of ``alpha`` when the caller has it."""
        C = gmat.cd_conj_sum(alpha, self.y, self.loss) if conj is None else conj
        return (C - 0.5 * float(v @ v) / self.lam_n) / self.n

    def dual_colsq(self):
        return gmat.cd_col_sqnorms(self.X, parallel=self._parallel)

    def dual_primal(self, v):
        """The primal point ``(w, b)`` of the dual vector ``v``."""
        wf = v / self.lam_n
        w = wf[: self.d]
        b = self.icpt * wf[self.d] if self.icpt else 0.0
        return w, b

    def dual_parts(self, alpha, v):
        """Local sums ``[sum loss(z), sum -loss*(-alpha)]`` over this object's examples."""
        w, b = self.dual_primal(v)
        z = self.margins(w, b)
        return np.array([gmat.cd_loss_sum(z, self.y, self.loss),
                         gmat.cd_conj_sum(alpha, self.y, self.loss)])

    def dual_certificate(self, parts, v):
        """``(P, gap)`` of a dual iterate from (all-reduced) :meth:`dual_parts`; the
        intercept weight is regularised."""
        L, C = parts
        q = 0.5 * float(v @ v) / self.lam_n  # = lam_n ||w||^2 / 2
        P = (L + q) / self.n
        return P, max(P - (C - q) / self.n, 0.0)

    def dual_gap(self, alpha, v):
        """``(P, gap)`` for a dual iterate holding all the examples."""
        return self.dual_certificate(self.dual_parts(alpha, v), v)


# ---------------------------------------------------------------------------------------------
# bookkeeping shared by the solvers


class _Trace:
    """Objective / gap / time trace with the check time kept out of the solver time."""

    def __init__(self, tol, verbose=0):
        self.tol = tol
        self.verbose = verbose
        self.P, self.G, self.T = [], [], []
        self.solve = 0.0
        self.check = 0.0
        self._t = None

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


def _tqdm(total, verbose, desc):
    import sys

    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, disable=not (verbose and sys.stderr.isatty()))


class _CheckSchedule:
    """When a sweeping solver computes its duality gap (``check_every`` of :func:`fit_glm_cd`).

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


# ---------------------------------------------------------------------------------------------
# local solvers

# TPA-SCD's damping test tolerates a rise of the objective this small (relative): near the
# optimum the changes of a sub-epoch are below the rounding of the sums, and rejecting them on
# noise would halve the damping down to zero.
_NOISE = 1e-12


def _tpa_epoch(perm, coef, shared, extra, f_cur, damp, *, sweep, resync, objective, finish=None,
               accepted=None, restore=None, n_threads, sub_epochs, tpa_mode, adaptive_damping):
    """One TPA-SCD epoch, shared by the primal and the dual solvers.

    ``perm`` is cut into ``sub_epochs`` sub-epochs; in each, ``n_threads`` threads update
    disjoint coordinates asynchronously, and Snap ML's adaptive damping judges the result: a
    sub-epoch that raises the objective is discarded and the damping halved.

    Parameters
    ----------
    perm : ndarray of int64
        This epoch's coordinates.
    coef : ndarray
        The coordinates' values (``w`` or ``alpha``), updated in place.
    shared : ndarray
        The shared vector (the margins ``z`` or ``v = X alpha``).
    extra : float or None
        A value the formulation carries alongside (the primal's intercept), restored with the
        others when a sub-epoch is discarded.
    f_cur : float
        The objective to *minimise* (``P``, or ``-D`` for the dual) at the start.
    damp : float
        The step multiplier at the start.
    sweep : callable
        ``sweep(part, bounds, S, damp)`` runs the TPA kernel over the coordinates ``part`` split
        at ``bounds`` against ``S`` (2-D: one shared row, or one replica per thread).
    resync : callable or None
        ``resync(shared, extra)``: the exact shared vector after a Hogwild sub-epoch, whose
        unsynchronised adds lose updates where threads collide; ``None`` when the sweep loses
        none that matter (the dual's split sweep: the exact vector is restored at every check).
    objective : callable
        ``objective(shared)``: the objective to minimise at the current iterate.
    accepted : callable, optional
        Called after each sub-epoch that is kept (lets ``objective`` keep running sums).
    finish : callable, optional
        ``finish(shared, extra, damp)``: the new ``extra`` after a sub-epoch's coordinate steps
        (the intercept step), updating ``shared`` in place.
    restore : callable, optional
        ``restore(part)`` puts back ``coef[part]`` as it was before the sub-epoch (the sweep
        saved it); without it ``coef[part]`` is copied before each sub-epoch.
    n_threads, sub_epochs, tpa_mode, adaptive_damping
        As in :func:`fit_glm_cd`.

    Returns
    -------
    shared, extra, f_cur, damp : as above, at the end of the epoch
    n_rejected : int
        Sub-epochs discarded.
    """
    n_rejected = 0
    for part in np.array_split(perm, sub_epochs):
        # only the sub-epoch's own coordinates change: save those (unless the sweep does)
        coef0 = coef[part] if restore is None else None
        shared0, extra0 = shared.copy(), extra
        bounds = np.linspace(0, part.size, n_threads + 1).astype(np.int64)
        if tpa_mode == "hogwild":
            sweep(part, bounds, shared.reshape(1, -1), damp)
            if resync is not None:
                shared = resync(shared, extra)  # re-synchronise exactly before judging
        else:
            S = np.repeat(shared[None, :], n_threads, axis=0)
            sweep(part, bounds, S, damp)
            shared = shared0 + (S - shared0).sum(axis=0)
        if finish is not None:
            extra = finish(shared, extra, damp)
        with np.errstate(over="ignore", invalid="ignore"):
            f_new = objective(shared)
        if adaptive_damping and not f_new <= f_cur + _NOISE * abs(f_cur):
            if restore is None:  # discard, halve the damping
                coef[part] = coef0
            else:
                restore(part)
            shared, extra = shared0, extra0
            damp *= 0.5
            n_rejected += 1
            logger.debug("tpa-scd: sub-epoch rejected, damping -> %g", damp)
        else:
            f_cur = f_new
            if accepted is not None:
                accepted()
    return shared, extra, f_cur, damp, n_rejected


# Intercept Newton steps per full primal sweep.  One per sweep made the intercept the
# bottleneck (at 200k Criteo-like examples, relative gap 7e-2 after 40 sweeps; 7.6e-4 with 32 steps
# per sweep, each step costing one pass over the margins).
_INTERCEPT_STEPS = 16


def _scd_primal(pb: GLMProblem, w, b, *, max_iter, check_every, rng, trace, verbose,
                n_threads=1, tpa_mode="hogwild", adaptive_damping=True, damping=1.0,
                sub_epochs=1, callback=None, active_fraction=1.0, full_every=1):
    """Sequential (``n_threads == 1``) or TPA-SCD primal coordinate descent; each iteration
    sweeps the features of :func:`_sweep_coords` (all, or the active fraction)."""
    A = pb.Xt
    kw = dict(loss=pb.loss, l1=pb.l1, lam_n=pb.lam_n, colsq=pb.colsq_primal)
    # features that occur nowhere have their optimum at 0: set once, never visited
    feats = np.flatnonzero(np.diff(A.indptr)).astype(np.int64)
    if feats.size < pb.d:
        keep = w[feats]
        w[:] = 0.0
        w[feats] = keep
    z = pb.margins(w, b)
    conv = False
    it = 0
    damp = float(damping)
    n_rejected = 0
    P_cur = pb.primal_obj(z, w) if n_threads > 1 else None
    checks = _CheckSchedule(check_every, max_iter, feats.size)

    def sweep(part, bounds, Z, damp):
        gmat.cd_primal_tpa(A, pb.y, w, Z, part, bounds, damp=damp, **kw)

    def intercept(z, b, damp):
        return gmat.cd_intercept_step(pb.y, z, b, loss=pb.loss, damp=damp)

    tpa = dict(sweep=sweep, resync=lambda z, b: pb.margins(w, b, z),
               objective=lambda z: pb.primal_obj(z, w),
               finish=intercept if pb.fit_intercept else None, n_threads=n_threads,
               sub_epochs=sub_epochs, tpa_mode=tpa_mode, adaptive_damping=adaptive_damping)
    bar = _tqdm(max_iter, verbose, "scd")
    last_step = np.full(feats.size, np.inf)  # |change of w_j| at its last visit
    for it in range(1, max_iter + 1):
        trace.start()
        pos = _sweep_coords(it, rng, last_step, active_fraction, full_every)
        perm = feats[pos]
        before = w[perm]
        if n_threads == 1:
            # the intercept couples with every feature: a Newton step on it after each of up to
            # _INTERCEPT_STEPS chunks of a full sweep (fewer on partial ones), not once per sweep
            n_chunks = 1
            if pb.fit_intercept:
                n_chunks = max(1, round(_INTERCEPT_STEPS * perm.size / feats.size))
            for chunk in np.array_split(perm, n_chunks):
                gmat.cd_primal_epoch(A, pb.y, w, z, chunk, **kw)
                if pb.fit_intercept:
                    b = gmat.cd_intercept_step(pb.y, z, b, loss=pb.loss)
        else:
            z, b, P_cur, damp, rejected = _tpa_epoch(perm, w, z, b, P_cur, damp, **tpa)
            n_rejected += rejected
        last_step[pos] = np.abs(w[perm] - before)
        trace.stop()
        bar.update(1)
        if checks.due(it, perm.size):
            t0 = time.perf_counter()
            z = pb.margins(w, b, z)  # exact: drops the drift of the incremental updates
            with np.errstate(over="ignore", invalid="ignore"):  # divergence is reported below
                P, gap = pb.primal_gap(w, b, z)
            P_cur = P
            stop = callback is not None and bool(callback(it, w, b))
            if trace.record(it, P, gap, time.perf_counter() - t0):
                conv = True
                break
            if stop:
                break
    bar.close()
    return w, b, None, it, conv, {"damping": damp, "n_rejected": n_rejected}


def _sweep_coords(it, rng, last_step, active_fraction, full_every):
    """The coordinates (positions ``0 .. len(last_step) - 1``) of sweep ``it`` (from 1), in a
    fresh random order: all of them in sweep 1 and every ``full_every`` sweeps after it; in
    between, the ``active_fraction`` whose last step was largest (the ones still moving: on
    Criteo-like data a quarter of the examples holds ~90% of the dual's duality gap)."""
    n = last_step.shape[0]
    k = int(np.ceil(active_fraction * n))
    if k >= n or (it - 1) % full_every == 0:
        return rng.permutation(n).astype(np.int64, copy=False)
    active = np.argpartition(last_step, n - k)[n - k:]
    return active[rng.permutation(k)].astype(np.int64, copy=False)


def _scd_dual(pb: GLMProblem, alpha, *, max_iter, check_every, rng, trace, verbose, n_threads=1,
              tpa_mode="hogwild", adaptive_damping=True, damping=1.0, sub_epochs=1,
              callback=None, n_hot=0, active_fraction=1.0, full_every=1, warmup=False):
    """Sequential (``n_threads == 1``) or TPA-SCD dual coordinate ascent (SDCA).

    Each iteration is one sweep over :func:`_sweep_coords` (all examples, or the active
    fraction between full sweeps).

    ``pb.X`` has its features numbered by frequency (:func:`gmat.cd_reorder_features`); the
    first ``n_hot`` are the ones whose entries of ``v`` the TPA threads keep in sync
    (:func:`gmat.cd_dual_tpa_split`).  ``warmup``: the first sweep, from ``alpha = 0``, runs
    at :func:`_warmup_factor` times the regularisation.
    """
    X = pb.X
    # the per-example state lives in one cache-line record per example (alpha, y, squared
    # norm, last step, unit-values flag): a coordinate step touches one line of it instead of
    # five scattered ones (the sweeps run in random order; measured at 1M examples, dual sweeps
    # ~1.25x faster than with separate arrays).  The kernels take the columns as strided views;
    # the iterates are bit-identical.  Examples whose stored values are all one (one-hot /
    # hashed categorical data) are swept without reading their values (~1.2x more).
    rec = gmat.empty((pb.n, 8), np.float64, order="C")
    rec[:, 0] = alpha
    rec[:, 1] = pb.y
    gmat.cd_col_sqnorms(X, rec[:, 2])
    rec[:, 3] = np.inf  # |change of alpha_i| at its last visit (inf: none yet)
    gmat.cd_unit_columns(X, rec[:, 4])
    rec[:, 5:] = 0.0  # 5: alpha before its last TPA step (to discard a sub-epoch); 6, 7 spare
    alpha, y, colsq, last_step, prev = rec[:, 0], rec[:, 1], rec[:, 2], rec[:, 3], rec[:, 5]
    kw = dict(loss=pb.loss, colsq=colsq, icpt=pb.icpt, unit=rec[:, 4])
    # the regularisation the sweeps run at (lam_n_it, read by sweep() below): the problem's,
    # but raised for the first sweep from a cold start (see _warmup_factor)
    lam_first = pb.lam_n
    if warmup and not alpha.any() and pb.n >= _WARMUP_MIN_EXAMPLES:
        lam_first = pb.lam_n * _warmup_factor(colsq, pb.icpt, pb.lam_n)
    lam_n_it = pb.lam_n
    # X 0 = 0: no pass over the data for the usual start
    v = pb.dual_point(alpha) if alpha.any() else np.zeros(pb.d + (1 if pb.icpt else 0))
    conv = False
    it = 0
    damp = float(damping)
    n_rejected = 0
    # TPA minimises -D; its damping test keeps the conjugate sum as a running total that the
    # sweep kernels update (dconj), and the kernels record each example's step and previous
    # value in its record: a sub-epoch's bookkeeping reads no example a second time (gathered
    # afterwards in random order, the same numbers cost a cache miss per example: the 2-thread
    # sweeps at 1M examples took ~1.5x the time of their kernels)
    state = {"work": None, "conj": None}
    negD_cur = None
    dconj = np.zeros(n_threads)
    if n_threads > 1:
        state["conj"] = gmat.cd_conj_sum(alpha, pb.y, pb.loss)
        negD_cur = -pb.dual_obj(alpha, v, conj=state["conj"])

    def sweep(part, bounds, V, damp):
        dconj[:] = 0.0
        out = dict(steps=last_step, prev=prev, dconj=dconj, lam_n=lam_n_it)
        if tpa_mode == "hogwild":
            # refresh the hot entries often enough that each thread sees the others' changes
            # ~8 times a sweep (small problems would otherwise run like replicas), at most
            # every _PUBLISH_EVERY steps (a refresh moves the hot change rows between the
            # cores: at 1M examples one every 1562 steps cost a 2-thread partial sweep ~30%)
            every = int(np.clip(part.size // (8 * (bounds.size - 1)), 1, _PUBLISH_EVERY))
            state["work"] = gmat.cd_dual_tpa_split(X, y, alpha, V[0], part, bounds, n_hot=n_hot,
                                                   damp=damp, work=state["work"],
                                                   publish_every=every, **out, **kw)
        else:
            gmat.cd_dual_tpa(X, y, alpha, V, part, bounds, damp=damp, **out, **kw)

    def objective(v):
        state["after"] = state["conj"] + float(dconj.sum())
        return -pb.dual_obj(alpha, v, conj=state["after"])

    def accepted():
        state["conj"] = state["after"]

    def restore(part):
        alpha[part] = prev[part]

    tpa = dict(sweep=sweep, resync=None, objective=objective, accepted=accepted, restore=restore,
               n_threads=n_threads, sub_epochs=sub_epochs, tpa_mode=tpa_mode,
               adaptive_damping=adaptive_damping)
    bar = _tqdm(max_iter, verbose, "sdca")
    checks = _CheckSchedule(check_every, max_iter, pb.n)
    since_exact = 0  # checks since v was last recomputed exactly
    for it in range(1, max_iter + 1):
        trace.start()
        perm = _sweep_coords(it, rng, last_step, active_fraction, full_every)
        lam_n_it = lam_first if it == 1 else pb.lam_n
        if n_threads == 1:
            gmat.cd_dual_epoch(X, y, alpha, v, perm, steps=last_step, lam_n=lam_n_it, **kw)
        else:
            v, _, negD_cur, damp, rejected = _tpa_epoch(perm, alpha, v, None, negD_cur, damp,
                                                        **tpa)
            n_rejected += rejected
        trace.stop()
        bar.update(1)
        if checks.due(it, perm.size):
            t0 = time.perf_counter()
            # the exact v = X alpha (a full scatter over the data, as costly as the margins)
            # is recomputed every _EXACT_EVERY checks, at the last iteration, and before
            # convergence is declared; in between the sweeps' float64 increments stand (no
            # sweep loses an update: TPA's threads' changes are all summed into v; drift
            # measured below 1e-12 of max |v| after 20 sequential sweeps and after 2 + 6
            # two-thread sweeps at 1M examples)
            exact = it == max_iter or since_exact + 1 >= _EXACT_EVERY
            while True:
                if exact:
                    v = pb.dual_point(alpha)
                since_exact = 0 if exact else since_exact + 1
                with np.errstate(over="ignore", invalid="ignore"):  # divergence: see record
                    parts = pb.dual_parts(alpha, v)
                    P, gap = pb.dual_certificate(parts, v)
                if exact or not trace.converged(P, gap):
                    break
                exact = True  # looks converged: confirm on the exact v
            if n_threads > 1:
                state["conj"] = float(parts[1])  # the exact conjugate sum again
                with np.errstate(over="ignore", invalid="ignore"):
                    negD_cur = -pb.dual_obj(alpha, v, conj=state["conj"])
            stop = callback is not None and bool(callback(it, *pb.dual_primal(v)))
            if trace.record(it, P, gap, time.perf_counter() - t0):
                conv = True
                break
            if stop:
                break
    bar.close()
    # v is exact unless a callback stopped the loop between exact checks; the point returned is
    # then the one the callback saw (v within ~1e-12 of X alpha)
    w, b = pb.dual_primal(v)
    return w.copy(), b, alpha.copy(), it, conv, {"damping": damp, "n_rejected": n_rejected}


# ---------------------------------------------------------------------------------------------
# public entry point


# TPA-SCD's dual keeps in sync across its threads' replicas the features in at least 1 in
# _HOT_FRACTION examples (at least _HOT_MIN, at most _HOT_MAX of them): at 1M Criteo-like
# examples, 13k features holding 92% of the nonzeros; a thread sees the others' changes to the
# rarer ones at the end of the sub-epoch.
_HOT_FRACTION, _HOT_MIN, _HOT_MAX = 10_000, 2, 1 << 16
_PUBLISH_EVERY = 4096
# TPA-SCD's dual (hogwild mode) uses at most this many threads.  Measured on a 16-core Xeon at
# 1M Criteo-like examples: 2 threads converge like the sequential sweep (no sub-epoch rejected);
# 4, 8 and 16 threads had their first sub-epochs rejected until the damping fell to 1/32, and no
# fit reached 1e-3 in 30 sweeps (best held-out logloss 0.3185 after 87 sweeps on 8 threads).
# Each thread corrects the same hot-feature residual against its own replica before it sees the
# others' corrections, so T threads overshoot T-fold (2-fold is a reflection: the dual does not
# fall); neither a sequential first sweep, nor refreshing the hot entries T times more often,
# nor CoCoA+'s sigma' = T on the step curvature (cold features or all) fixed it there.
_TPA_DUAL_MAX_THREADS = 2
# Dual checks recompute v = X alpha exactly at least every this many checks.
_EXACT_EVERY = 8
# The dual's first sweep from alpha = 0 (fit_glm_cd(warmup=True)) runs at a regularisation
# raised until the mean curvature of a step, q = ||x_i||^2 / lam_n (how far one example's step
# moves its own margin per unit of its dual variable), is at most _WARMUP_Q, by at most
# _WARMUP_MAX.  From alpha = 0 every example in that sweep corrects its margin against a w
# that the examples after it will still move the same way (on the frequent features), and
# with a large q the sweep overshoots; sweeps at the problem's regularisation follow.  Measured
# (relative primal suboptimality, 3-4 seeds each, sweeps to 1e-3 / 1e-6): Criteo-like logistic
# 1M, C = 0.3 (q ~ 11): 18.5 -> 16 sweeps to 1e-3 (39 -> 35.5 to 1e-6); 100k, C = 1 / 0.3 /
# 0.1 / 0.03: 33.7 / 17.3 / 9.7 / 7 -> 29.3 / 15.3 / 9 / 7 (to 1e-6: 68.7 / 36.3 / 22 / 14 ->
# 63.7 / 34.3 / 21 / 14); ridge on the same data (C = 0.3): 82.7 -> 73.7; dense 20k x 100
# logistic, alpha = 1e-3: 59 -> 47, alpha = 1e-2 and 1e-1: no change.  A fixed factor hurt
# where q is small (x4 at C = 0.03: 7 -> 8 sweeps, 14 -> 15-18 to 1e-6): hence the cap on q,
# not a factor.  It also hurt on few examples (Criteo-like, 5000 examples, C = 0.3 / 1:
# 14 -> 16, 21-24 -> 25 sweeps; 20,000: level; duality-gap stops alike: 100k, C = 1: 36 -> 31,
# 200k: 39 -> 33, C = 0.3: 19-20 -> 18), so it applies from _WARMUP_MIN_EXAMPLES examples on.
_WARMUP_Q, _WARMUP_MAX = 2.0, 8.0
_WARMUP_MIN_EXAMPLES = 50_000


def _warmup_factor(colsq, icpt, lam_n):
    """The factor of the regularisation of the dual's first sweep from ``alpha = 0``: the
    mean step curvature brought down to ``_WARMUP_Q`` (1 where it is below), at most
    ``_WARMUP_MAX``; ``colsq`` is not empty (the warm-up needs ``_WARMUP_MIN_EXAMPLES``)."""
    q = (float(np.mean(colsq)) + icpt * icpt) / lam_n
    return float(min(max(q / _WARMUP_Q, 1.0), _WARMUP_MAX))


def _n_hot(counts, n_examples):
    """How many of the (frequency-ordered) features TPA-SCD's dual treats as hot."""
    threshold = max(_HOT_MIN, n_examples // _HOT_FRACTION)
    return int(min(_HOT_MAX, np.searchsorted(-counts, -threshold, side="right")))


def _unorder(w, order):
    """``w`` of the frequency-ordered features back in the original numbering."""
    out = np.empty_like(w)
    out[order] = w
    return out


def _resolve_dual(dual, loss_code, l1, fit_intercept, solver):
    if solver == "pure-block":
        if dual or loss_code == 2:
            raise ValueError("solver='pure-block' is a primal (feature-block) method: it needs a "
                             "smooth loss ('squared' or 'logistic') and dual=False/None")
        return False
    if loss_code == 2:
        if dual is False:
            raise ValueError("loss='hinge' is solved in the dual only (dual=False unsupported)")
        return True
    if l1:
        if dual:
            raise ValueError("penalty='l1' is solved in the primal only (dual=True not supported)")
        return False
    if dual is None:
        # the primal keeps the intercept unregularised, so it is the default with an intercept;
        # without one the dual (SDCA, Snap ML's default) usually converges in fewer epochs
        return not fit_intercept
    return bool(dual)


def fit_glm_cd(
    X,
    y,
    *,
    loss,
    alpha,
    penalty="l2",
    solver="scd",
    n_jobs=1,
    tol=1e-6,
    max_iter=1000,
    dual=None,
    fit_intercept=True,
    intercept_scaling=1.0,
    random_state=None,
    check_every="auto",
    verbose=0,
    tpa_mode="hogwild",
    adaptive_damping=True,
    damping=1.0,
    sub_epochs=1,
    active_fraction=0.2,
    full_every=6,
    n_workers=None,
    n_nodes=None,
    inner_rounds=4,
    local_epochs=1.0,
    blocks=None,
    comm_stats=None,
    coef_init=None,
    callback=None,
    warmup=True,
):
    """Fit a GLM by coordinate descent; see the module docstring for the exact objective.

    Parameters
    ----------
    X : CSC matrix or ndarray, shape (n_features, n_examples)
        Examples as columns (the project layout).  scikit-learn users: pass ``X_sk.T.tocsc()``
        (the learners' estimators do this for you).
    y : array, shape (n_examples,)
        Targets (``loss="squared"``) or binary labels in {-1, 1} or {0, 1}.
    loss : {"squared", "logistic", "hinge"}
    alpha : float
        Regularisation strength in *our* scaling (mean loss + ``alpha * R(w)``); convert
        scikit-learn's / snapml's parameters with :func:`alpha_from_peer`.
    penalty : {"l2", "l1"}
    solver : {"scd", "tpa-scd", "cocoa", "hcocoa", "pure-block"}
        ``scd``: sequential stochastic coordinate descent (deterministic for a seed).
        ``tpa-scd``: ``n_jobs`` numba threads on disjoint coordinates, asynchronously against the
        shared vector, with adaptive damping.  ``cocoa``: CoCoA+ over ``n_workers`` simulated
        workers (threads, in-process communicator).  ``hcocoa``: hierarchical CoCoA over
        ``n_nodes`` nodes of ``n_workers / n_nodes`` workers, ``inner_rounds`` node rounds per
        global round.  ``pure-block``: Google's SCD over pure feature blocks, ``n_workers``
        example shards.
    n_jobs : int
        Threads (``tpa-scd``; its dual in the default ``hogwild`` mode uses at most 2, with a
        warning: more overshoot, see ``_TPA_DUAL_MAX_THREADS``); default number of workers for
        ``cocoa``/``hcocoa``/``pure-block``.
    tol : float
        Stop when the duality gap is below ``tol * |P|`` (relative).
    max_iter : int
        Maximum epochs (``scd``, ``tpa-scd``, ``pure-block``) or global rounds (CoCoA).
    dual : bool or None
        Solve the dual (SDCA, coordinates = examples) or the primal (coordinates = features).
        ``None``: the dual without an intercept, the primal with one (it keeps the intercept
        unregularised); the hinge loss is dual only, the l1 penalty primal only.
    fit_intercept : bool
    intercept_scaling : float
        The constant feature's value in the dual (its weight is regularised there).
    random_state : None, int or numpy Generator
        Seeds the per-epoch coordinate permutations.
    check_every : int or "auto"
        Compute the duality gap every this many iterations.  ``"auto"`` (``scd``, ``tpa-scd``;
        ``1`` for the others): once the sweeps since the last check have made one step per
        coordinate, i.e. after every full sweep and every ``1 / active_fraction`` partial
        sweeps; a check costs about a pass over the data, as much as a few partial sweeps.
    verbose : int
    tpa_mode : {"hogwild", "replica"}
        ``hogwild``: the threads run without synchronisation (the primal's add into the one
        shared vector, which is re-synchronised exactly after each sub-epoch; the dual's work
        on per-thread replicas whose frequent features they refresh with the others' changes
        every few thousand steps, the rest merged at the end of the sub-epoch, so that no
        update is lost, see :func:`roofline.gmat.cd_dual_tpa_split`);
        ``replica``: each thread works against its own copy, and the copies' changes are added
        at the end of the sub-epoch (deterministic).
    adaptive_damping : bool
        Snap ML's rule for TPA-SCD: a sub-epoch that does not improve the objective is discarded
        and the damping halved.
    damping : float
        Initial step multiplier for TPA-SCD.
    sub_epochs : int
        TPA-SCD checks the objective this many times per epoch.
    active_fraction : float in (0, 1]
        ``scd``/``tpa-scd``: between full sweeps over the coordinates (examples in the dual,
        features in the primal), sweep only this fraction of them, the ones whose last step was
        largest (the coordinates still moving; on Criteo-like data a quarter of the examples
        holds ~90% of the dual's duality gap), in a fresh random order.  Every step is still an
        exact (dual) or Newton (primal) coordinate step, and the full sweeps keep SDCA's
        convergence; on Criteo-like data this reaches a given objective ~1.3-1.8x sooner in the
        dual (1M examples) and ~2x in the primal (200k).  ``1`` sweeps all coordinates every
        time.
    full_every : int
        Every this many sweeps (from the first) visits all coordinates.  ``max_iter`` and
        ``check_every`` count sweeps, partial ones included.
    n_workers, n_nodes, inner_rounds, local_epochs
        CoCoA parameters (``local_epochs`` = local passes over a worker's data per round).
    blocks : array of int, shape (n_features,), optional
        Pure-block assignment of each feature (``pure-block``); computed greedily when omitted.
    comm_stats : dict, optional
        Filled with communication counts (CoCoA, pure-block).
    coef_init : array, optional
        Warm start for the primal solvers.
    callback : callable, optional
        ``callback(iteration, coef, intercept)`` at every check of ``scd``/``tpa-scd`` (its
        time counts as check time, not solver time); ``coef`` is a live view, copy it to keep.
        Returning ``True`` stops the solver (``converged`` stays ``False``).
    warmup : bool
        ``scd``/``tpa-scd`` dual: run the first sweep (from ``alpha = 0``) at a larger
        regularisation, enough to bring the mean curvature of a coordinate step
        ``||x_i||^2 / (n * alpha)`` down to 2 (at most 8 times ``alpha``; no change where it is
        already below), from 50,000 examples on: there the plain first sweep overshoots.  The
        optimum is the same; on Criteo-like data (1M examples, C = 0.3) it takes ~3 sweeps
        fewer to a relative suboptimality of 1e-3 (18.5 -> 16); on a few thousand examples
        it cost 1-4 sweeps (hence the threshold).

    Returns
    -------
    CDResult
    """
    t_start = time.perf_counter()
    if not isinstance(loss, str) or loss not in LOSSES:
        raise ValueError(f"loss must be one of {sorted(LOSSES)}, got {loss!r}")
    if penalty not in ("l2", "l1"):
        raise ValueError(f"penalty must be 'l2' or 'l1', got {penalty!r}")
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
    if tpa_mode not in ("hogwild", "replica"):
        raise ValueError(f"tpa_mode must be 'hogwild' or 'replica', got {tpa_mode!r}")
    loss_code = LOSSES[loss]
    l1 = penalty == "l1"
    if l1 and loss_code == 2:
        raise ValueError("penalty='l1' is not supported with loss='hinge'")
    alpha = _positive(alpha, "alpha")
    tol = _positive(tol, "tol")
    max_iter = _positive(max_iter, "max_iter", integer=True)
    if isinstance(check_every, str):
        if check_every != "auto":
            raise ValueError(f"check_every must be a positive integer or 'auto', got "
                             f"{check_every!r}")
    else:
        check_every = _positive(check_every, "check_every", integer=True)
    n_jobs = _positive(n_jobs, "n_jobs", integer=True)
    sub_epochs = _positive(sub_epochs, "sub_epochs", integer=True)
    full_every = _positive(full_every, "full_every", integer=True)
    active_fraction = _positive(active_fraction, "active_fraction")
    if active_fraction > 1:
        raise ValueError(f"active_fraction must be in (0, 1], got {active_fraction!r}")
    damping = _positive(damping, "damping")
    X = _check_X(X)
    y = _check_labels(y, loss_code)
    if y.shape[0] != X.shape[1]:
        raise ValueError(
            f"y has {y.shape[0]} entries but X has {X.shape[1]} examples (columns); X must be "
            "(n_features, n_examples)"
        )
    use_dual = _resolve_dual(dual, loss_code, l1, fit_intercept, solver)
    rng = np.random.default_rng(random_state)
    trace = _Trace(tol, verbose)
    info = {}
    if solver in ("cocoa", "hcocoa", "pure-block"):
        from ._cocoa import _fit_distributed

        K = n_jobs if n_workers is None else _positive(n_workers, "n_workers", integer=True)
        w, b, a, it, conv, info = _fit_distributed(
            X, y, loss_code, l1, alpha, fit_intercept, intercept_scaling, use_dual, solver,
            K=K, n_nodes=n_nodes, inner_rounds=inner_rounds, local_epochs=local_epochs,
            blocks=blocks, max_iter=max_iter,
            check_every=1 if check_every == "auto" else check_every, rng=rng, trace=trace,
            comm_stats=comm_stats,
        )
    else:
        order = None
        if use_dual:
            # features numbered by frequency: the hot entries of v share cache lines, and
            # TPA-SCD tells them by their number (results are unchanged: see cd_reorder_features)
            X, order, counts = gmat.cd_reorder_features(X)
            n_hot = _n_hot(counts, X.shape[1])
            if callback is not None:
                user_callback = callback

                def callback(it, w, b):
                    return user_callback(it, _unorder(w, order), b)
        pb = GLMProblem(X, y, loss_code, l1, alpha, fit_intercept, intercept_scaling,
                        primal=not use_dual)
        n_threads = n_jobs if solver == "tpa-scd" else 1
        if use_dual and tpa_mode == "hogwild" and n_threads > _TPA_DUAL_MAX_THREADS:
            logger.warning(
                "tpa-scd's dual runs at most %d threads (n_jobs=%d): with more, its threads' "
                "replicas overshoot on the frequent features and the fit stalls; use "
                "tpa_mode='replica' (deterministic, needs the damping) or solver='cocoa' for "
                "more", _TPA_DUAL_MAX_THREADS, n_threads)
            n_threads = _TPA_DUAL_MAX_THREADS
        kw = dict(max_iter=max_iter, check_every=check_every, rng=rng, trace=trace,
                  verbose=verbose, n_threads=n_threads, tpa_mode=tpa_mode,
                  adaptive_damping=adaptive_damping, damping=damping, sub_epochs=sub_epochs,
                  callback=callback)
        if use_dual:
            w, b, a, it, conv, info = _scd_dual(pb, np.zeros(pb.n), n_hot=n_hot,
                                                active_fraction=active_fraction,
                                                full_every=full_every, warmup=bool(warmup),
                                                **kw)
            w = _unorder(w, order)
            info["n_threads"] = n_threads
        else:
            w0 = np.zeros(pb.d)
            if coef_init is not None:
                w0[:] = np.asarray(coef_init, dtype=np.float64).ravel()
            w, b, a, it, conv, info = _scd_primal(pb, w0, 0.0, active_fraction=active_fraction,
                                                  full_every=full_every, **kw)
    if not conv:
        logger.info("%s did not reach tol=%g in %d iterations (gap %.3e)", solver, tol, it,
                    trace.G[-1] if trace.G else float("nan"))
    return CDResult(
        coef=np.asarray(w, dtype=np.float64),
        intercept=float(b),
        n_iter=int(it),
        objective=np.asarray(trace.P),
        gap_history=np.asarray(trace.G),
        times=np.asarray(trace.T),
        gap=float(trace.G[-1]) if trace.G else float("nan"),
        converged=bool(conv),
        time=time.perf_counter() - t_start,
        check_time=trace.check,
        dual_coef=a,
        solver=solver,
        loss=_LOSS_NAMES[loss_code],
        penalty=penalty,
        alpha=alpha,
        dual=use_dual,
        info=info,
    )
