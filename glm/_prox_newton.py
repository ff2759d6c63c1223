"""Proximal Newton for L1 and elastic-net logistic / squared regression (newGLMNET).

The solver of Yuan, Ho and Lin (2012), liblinear's L1 solver: each outer iteration forms the
second-order model of the smooth part of the objective at ``(w, b)``

    q(d) = g^T d + d^T H d / 2 + lam1 ||w + d||_1,   H = X D X^T + lam2 I

(``D = loss''(z)``, the sum objective ``sum_i loss(z_i) + lam1 |w|_1 + lam2 |w|^2 / 2``
with ``lam1 = r alpha n`` and ``lam2 = (1 - r) alpha n``), minimises it by cyclic coordinate
descent with the soft-thresholded Newton step of each coordinate, then takes an Armijo line
search on the true objective along ``d``.  The intercept is an unregularised coordinate of the
same model.  The model's gradient is kept incrementally: on dense data with few features
through the Gram matrix ``[X; 1] D [X; 1]^T`` (one BLAS product per outer iteration, ``O(d)``
per coordinate step), on sparse data through ``X^T d`` (one pass over a feature's column
per step).  Liblinear's shrinking keeps inactive zero coordinates out of the outer and inner
loops.

``tol`` is the relative suboptimality of every :func:`~roofline.glm.fit_glm` solver: the fit
stops when the duality gap of :class:`~roofline.glm._problem.GLMProblem` (the l1 / elastic-net
certificate of the CD solvers) is at most ``tol * |P|``.
"""

from __future__ import annotations

import logging
import time

import numba
import numpy as np
import scipy.sparse as sp

from roofline.kernels import LOGISTIC

from . import _losses, cd
from ._problem import GLMProblem, GLMResult, warn_not_converged

__all__ = ["fit_prox_newton", "run_prox_newton"]

logger = logging.getLogger(__name__)

#: Data with at most this many features (and no more features than examples) runs the
#: inner coordinate descent, and the face step, on the Gram matrix ``X D X^T`` (a dense
#: copy of ``[X; 1]`` of at most :data:`GRAM_MAX_VALUES` values); otherwise on the columns.
GRAM_MAX_FEATURES = 2048
GRAM_MAX_VALUES = 20_000_000

_NAME = "prox-newton"
_SIGMA = 0.01  # Armijo's constant (liblinear's)
_NU = 1e-12  # added to each coordinate's curvature (liblinear: 1e-12)
_MAX_INNER = 100
_MAX_LINE = 30


# ---------------------------------------------------------------------------------------------
# numba kernels


@numba.njit(cache=True, nogil=True)
def _derivs(z, y, loss, lp, D):
    """``lp = loss'(z)``, ``D = loss''(z)`` in place; returns the loss sum."""
    s = 0.0
    for i in range(z.shape[0]):
        if loss == LOGISTIC:
            m = y[i] * z[i]
            if m > 0:
                e = np.exp(-m)
                p = 1.0 / (1.0 + e)  # sigmoid(m)
                s += np.log1p(e)
            else:
                e = np.exp(m)
                p = e / (1.0 + e)
                s += -m + np.log1p(e)
            lp[i] = -y[i] * (1.0 - p)
            D[i] = max(p * (1.0 - p), 1e-12)
        else:
            r = z[i] - y[i]
            s += 0.5 * r * r
            lp[i] = r
            D[i] = 1.0
    return s


@numba.njit(cache=True, nogil=True)
def _loss_at(z, dz, t, y, loss):
    """``sum_i loss(z_i + t dz_i)``."""
    s = 0.0
    for i in range(z.shape[0]):
        v = z[i] + t * dz[i]
        if loss == LOGISTIC:
            m = y[i] * v
            if m > 0:
                s += np.log1p(np.exp(-m))
            else:
                s += -m + np.log1p(np.exp(m))
        else:
            r = v - y[i]
            s += 0.5 * r * r
    return s


@numba.njit(cache=True, nogil=True, inline="always")
def _newton_step(G, H, wj, dj, lam1):
    """The minimiser ``z`` of ``G z + H z^2 / 2 + lam1 |wj + dj + z|`` (liblinear's)."""
    Gp = G + lam1
    Gn = G - lam1
    wpd = wj + dj
    if Gp < H * wpd:
        return -Gp / H
    if Gn > H * wpd:
        return -Gn / H
    return -wpd


@numba.njit(cache=True, nogil=True, inline="always")
def _violation(G, wpd, lam1, gmax_old):
    """The optimality violation of coordinate ``j`` of the model (``G`` its smooth gradient,
    ``wpd = w_j + d_j``), or ``-1.0`` where liblinear's inner shrinking drops it (at zero, well
    inside ``[-lam1, lam1]`` by the last sweep's largest violation ``gmax_old``)."""
    Gp = G + lam1
    Gn = G - lam1
    if wpd == 0.0:
        if Gp < 0:
            return -Gp
        if Gn > 0:
            return Gn
        if Gp > gmax_old and Gn < -gmax_old:
            return -1.0
        return 0.0
    if wpd > 0:
        return abs(Gp)
    return abs(Gn)


@numba.njit(cache=True, nogil=True)
def _inner_gram(Hm, g, w, d, active, n_active, lam1, lam2, ncoef, icpt, stop, max_inner,
                Hd):
    """Cyclic CD on the model with the Gram matrix ``Hm`` (``(d+1) x (d+1)`` with the
    intercept's row last when ``icpt``): updates ``d`` and ``Hd = Hm d`` in place.  Returns
    the number of sweeps."""
    QP_Gmax_old = np.inf
    it = 0
    na = n_active
    while it < max_inner:
        QP_Gmax_new = 0.0
        QP_Gnorm1 = 0.0
        s = 0
        while s < na:
            j = active[s]
            if j == ncoef:  # the unregularised intercept
                G = g[j] + Hd[j]
                viol = abs(G)
                z = -G / (Hm[j, j] + _NU)
            else:
                G = g[j] + Hd[j] + lam2 * d[j]
                Hjj = Hm[j, j] + lam2 + _NU
                viol = _violation(G, w[j] + d[j], lam1, QP_Gmax_old)
                if viol < 0.0:
                    na -= 1
                    active[s], active[na] = active[na], active[s]
                    continue
                z = _newton_step(G, Hjj, w[j], d[j], lam1)
            QP_Gmax_new = max(QP_Gmax_new, viol)
            QP_Gnorm1 += viol
            if abs(z) > 1e-12:
                d[j] += z
                for k in range(Hm.shape[0]):
                    Hd[k] += z * Hm[k, j]
            s += 1
        it += 1
        if QP_Gnorm1 <= stop:
            if na == n_active:
                break
            na = n_active  # a last sweep over every coordinate of the outer active set
            QP_Gmax_old = np.inf
            continue
        QP_Gmax_old = QP_Gmax_new
    return it


@numba.njit(cache=True, nogil=True)
def _inner_csc(indptr, indices, data, Dv, g, Hdiag, w, d, active, n_active, lam1, lam2,
               ncoef, icpt, stop, max_inner, Xd):
    """Cyclic CD on the model over the features' columns (``X^T`` as CSC: column ``j`` =
    feature ``j``'s examples), with ``Xd = X^T d (+ d_b)`` kept in place.  ``d`` has
    ``ncoef + icpt`` entries (the intercept last).  Returns the number of sweeps."""
    QP_Gmax_old = np.inf
    it = 0
    na = n_active
    n = Xd.shape[0]
    while it < max_inner:
        QP_Gmax_new = 0.0
        QP_Gnorm1 = 0.0
        s = 0
        while s < na:
            j = active[s]
            if j == ncoef:  # the intercept: a coordinate over every example
                G = g[j]
                for i in range(n):
                    G += Dv[i] * Xd[i]
                z = -G / (Hdiag[j] + _NU)
                viol = abs(G)
                if abs(z) > 1e-12:
                    d[j] += z
                    for i in range(n):
                        Xd[i] += z
                QP_Gmax_new = max(QP_Gmax_new, viol)
                QP_Gnorm1 += viol
                s += 1
                continue
            G = g[j] + lam2 * d[j]
            for p in range(indptr[j], indptr[j + 1]):
                i = indices[p]
                G += data[p] * Dv[i] * Xd[i]
            Hjj = Hdiag[j] + lam2 + _NU
            viol = _violation(G, w[j] + d[j], lam1, QP_Gmax_old)
            if viol < 0.0:
                na -= 1
                active[s], active[na] = active[na], active[s]
                continue
            QP_Gmax_new = max(QP_Gmax_new, viol)
            QP_Gnorm1 += viol
            z = _newton_step(G, Hjj, w[j], d[j], lam1)
            if abs(z) > 1e-12:
                d[j] += z
                for p in range(indptr[j], indptr[j + 1]):
                    Xd[indices[p]] += z * data[p]
            s += 1
        it += 1
        if QP_Gnorm1 <= stop:
            if na == n_active:
                break
            na = n_active
            QP_Gmax_old = np.inf
            continue
        QP_Gmax_old = QP_Gmax_new
    return it


@numba.njit(cache=True, nogil=True)
def _csc_grad_diag(indptr, indices, data, lp, Dv, g, Hdiag):
    """``g_j = sum_i X_ji lp_i`` and ``Hdiag_j = sum_i X_ji^2 D_i`` over the features'
    columns."""
    for j in range(indptr.shape[0] - 1):
        a = 0.0
        h = 0.0
        for p in range(indptr[j], indptr[j + 1]):
            i = indices[p]
            v = data[p]
            a += v * lp[i]
            h += v * v * Dv[i]
        g[j] = a
        Hdiag[j] = h


# ---------------------------------------------------------------------------------------------
# the solver


@numba.njit(cache=True, nogil=True)
def _outer_active(g, w, lam1, lam2, ncoef, Gmax_old, n):
    """Liblinear's outer shrinking: the coordinates kept, the max and sum of the violations
    of the optimality conditions (the intercept, index ``ncoef``, always kept)."""
    keep = np.empty(g.shape[0], np.int64)
    k = 0
    vmax = 0.0
    vsum = 0.0
    bound = Gmax_old / n
    for j in range(ncoef):
        G = g[j] + lam2 * w[j]
        Gp = G + lam1
        Gn = G - lam1
        if w[j] > 0:
            viol = abs(Gp)
        elif w[j] < 0:
            viol = abs(Gn)
        elif Gp < 0:
            viol = -Gp
        elif Gn > 0:
            viol = Gn
        else:
            viol = 0.0
            if Gp > bound and Gn < -bound:
                continue
        keep[k] = j
        k += 1
        vmax = max(vmax, viol)
        vsum += viol
    if g.shape[0] > ncoef:
        viol = abs(g[ncoef])
        keep[k] = ncoef
        k += 1
        vmax = max(vmax, viol)
        vsum += viol
    return keep[:k].copy(), vmax, vsum


def _face_newton(Hm, gm, w, d, lam1, lam2, nf, rounds=10):
    """The minimiser of the model on the orthant face of ``w + d`` (the coordinates nonzero
    after the coordinate descent, with their signs, and the intercept), by an active-set
    walk: solve the face's linear system; where the solution leaves the orthant, move to its
    boundary, drop the coordinates that reached zero and solve again.  Each move lowers the
    model (convex on the face).  On dense data with few correlated features the coordinate
    descent alone converges slowly (breast cancer's unscaled columns); once the support is
    found this makes the outer iterations Newton's."""
    u = w + d
    for _ in range(rounds):
        nz = u[:nf] != 0.0
        S = np.flatnonzero(nz)
        if Hm.shape[0] > nf:
            S = np.append(S, nf)
        if S.size == 0:
            break
        N = np.flatnonzero(~nz)
        reg = S < nf
        sgn = np.where(reg, np.sign(u[S]), 0.0)
        H = Hm[np.ix_(S, S)].copy()
        ri = np.flatnonzero(reg)
        H[ri, ri] += lam2
        # the face's optimum of d_S with d_N = -w_N
        rhs = -(gm[S] + lam1 * sgn)
        if N.size:
            rhs += Hm[np.ix_(S, N)] @ w[N]
        try:
            dS = np.linalg.solve(H, rhs)
        except np.linalg.LinAlgError:
            break
        if not np.all(np.isfinite(dS)):
            break
        target = w[S] + dS
        cur = u[S]
        bad = reg & (np.sign(target) != sgn)
        if not bad.any():
            u = u.copy()
            u[S] = target
            u[N] = 0.0
            break
        theta = np.min(cur[bad] / (cur[bad] - target[bad]))  # in [0, 1)
        step = cur + theta * (target - cur)
        step[bad & (np.abs(cur / (cur - target) - theta) <= 1e-12)] = 0.0
        step[np.flatnonzero(reg)[np.sign(step[reg]) != sgn[reg]]] = 0.0
        u = u.copy()
        u[S] = step
    return u - w


def fit_prox_newton(X, y, *, loss="logistic", alpha, penalty="l1", l1_ratio=None,
                    fit_intercept=True, tol=1e-4, max_iter=1000, coef_init=None,
                    intercept_init=None, callback=None):
    """Minimise the mean loss plus the L1 or elastic-net penalty by proximal Newton.

    Parameters
    ----------
    X : ndarray or scipy.sparse matrix, shape (n_features, n_examples)
        The project layout (one column per example).
    y : ndarray, shape (n_examples,)
        Labels in the margin form of :func:`~roofline.glm.check_labels` (``+-1`` for the
        logistic loss; real targets for the squared loss).
    loss : {"logistic", "squared"}
    alpha : float
        The regularisation strength of the mean-loss objective (positive).
    penalty : {"l1", "elasticnet"}
    l1_ratio : float, optional
        ``r`` of ``r ||w||_1 + (1 - r) ||w||^2 / 2`` (``penalty="elasticnet"``).
    fit_intercept : bool
        An unregularised intercept.
    tol : float
        The relative suboptimality to reach: the duality gap at most ``tol * |P|``.
    max_iter : int
        Outer (Newton) iterations.
    coef_init : ndarray, optional
        The starting coefficients (a warm start).
    intercept_init : float, optional
        The starting intercept.
    callback : callable, optional
        ``callback(it, w, b)`` after each outer iteration; a true return value stops the fit.

    Returns
    -------
    GLMResult
        ``info["inner_sweeps"]``: the coordinate-descent sweeps of all the models;
        ``info["line_search_steps"]``: the halvings of the line searches.

    Raises
    ------
    ValueError
        A bad ``loss``, ``penalty``, ``l1_ratio``, ``alpha``, ``tol``, ``max_iter`` or a
        ``coef_init`` of the wrong length.
    """
    t0 = time.perf_counter()
    losses = _losses.losses_where(smooth=True, cd=True)  # the losses with a CD step and l''
    if loss not in losses:
        raise ValueError(f"loss must be one of {list(losses)} for solver {_NAME!r}, got "
                         f"{loss!r}")
    if penalty not in ("l1", "elasticnet"):
        raise ValueError(f"penalty must be 'l1' or 'elasticnet' for solver {_NAME!r}, got "
                         f"{penalty!r}")
    if penalty == "l1":
        r = 1.0
    else:
        if l1_ratio is None or not 0.0 <= float(l1_ratio) <= 1.0:
            raise ValueError(f"l1_ratio must be a number in [0, 1], got {l1_ratio!r}")
        r = float(l1_ratio)
    if not (np.isscalar(alpha) and alpha > 0 and np.isfinite(alpha)):
        raise ValueError(f"alpha must be a positive finite number, got {alpha!r}")
    if not (np.isscalar(tol) and tol > 0):
        raise ValueError(f"tol must be a positive number, got {tol!r}")
    if not isinstance(max_iter, (int, np.integer)) or max_iter < 1:
        raise ValueError(f"max_iter must be a positive integer, got {max_iter!r}")
    loss_code = _losses.LOSS_CODES[loss]
    dense = not sp.issparse(X)
    Xc = cd.csc_from_dense(np.asarray(X)) if dense else sp.csc_matrix(X)
    Xc.sum_duplicates()
    Xc.sort_indices()
    nf, n = Xc.shape
    y = np.ascontiguousarray(y, dtype=np.float64)
    if y.shape != (n,):
        raise ValueError(f"y has {y.shape[0]} entries but X has {n} examples (columns)")
    if loss_code == LOGISTIC:
        y = np.where(y > 0, 1.0, -1.0)
    lam_n = float(alpha) * n
    lam1, lam2 = r * lam_n, (1.0 - r) * lam_n
    prob = GLMProblem(Xc, y, loss_code, r == 1.0, alpha, fit_intercept, primal=False,
                      l1_ratio=r if 0.0 < r < 1.0 else None)
    icpt = 1 if fit_intercept else 0
    m = nf + icpt
    w = np.zeros(nf) if coef_init is None else np.array(coef_init, dtype=np.float64).ravel()
    if w.shape != (nf,):
        raise ValueError(f"coef_init has {w.shape[0]} entries but X has {nf} features (rows)")
    b = float(intercept_init) if (fit_intercept and intercept_init is not None) else 0.0
    gram = nf <= GRAM_MAX_FEATURES and nf <= n and m * n <= GRAM_MAX_VALUES
    if gram:
        Xa = np.empty((m, n))
        Xa[:nf] = X if dense else Xc.toarray()
        if icpt:
            Xa[nf] = 1.0
    else:
        Xt = cd.feature_major(Xc)  # column j = feature j
        ip, ix = Xt.indptr.astype(np.int64), Xt.indices.astype(np.int64)
        dat = Xt.data.astype(np.float64)
    z = prob.margins(w, b)
    lp, Dv = np.empty(n), np.empty(n)
    g, Hdiag = np.zeros(m), np.zeros(m)
    objective, gaps, times = [], [], []
    check_time = 0.0
    Gmax_old = np.inf
    eps_in = 1.0
    Gnorm1_init = None
    sweeps = halvings = 0
    converged = stopped = False
    P = gap = np.nan
    it = 0
    while True:
        Lsum = _derivs(z, y, loss_code, lp, Dv)
        tc = time.perf_counter()
        P, gap = prob.primal_gap(w, b, z)
        check_time += time.perf_counter() - tc
        objective.append(P)
        gaps.append(gap)
        times.append(time.perf_counter() - t0 - check_time)
        if gap <= tol * abs(P):
            converged = True
            break
        if it >= max_iter:
            break
        if callback is not None and it > 0 and callback(it, w, b):
            stopped = True
            break
        # the model: gradient and curvature of the smooth part
        if gram:
            XD = Xa * Dv
            Hm = XD @ Xa.T
            g[:] = Xa @ lp
            Hdiag[:] = np.diag(Hm)
        else:
            _csc_grad_diag(ip, ix, dat, lp, Dv, g, Hdiag)
            if icpt:
                g[nf] = lp.sum()
                Hdiag[nf] = Dv.sum()
        active, vmax, vsum = _outer_active(g, w, lam1, lam2, nf, Gmax_old, n)
        Gmax_old = vmax
        if Gnorm1_init is None:
            Gnorm1_init = vsum  # liblinear's inner tolerance: a fraction of the first one
        wfull = np.append(w, b) if icpt else w
        gm = g.copy()
        gm[:nf] += lam2 * w  # the model's gradient with the L2 part of the elastic net
        d = np.zeros(m)
        if gram:
            Hd = np.zeros(m)
            k = _inner_gram(Hm, gm, wfull, d, active, active.size, lam1, lam2, nf, icpt,
                            eps_in * Gnorm1_init, _MAX_INNER, Hd)
            d = _face_newton(Hm, gm, wfull, d, lam1, lam2, nf)
            Xd = Xa.T @ d
        else:
            Xd = np.zeros(n)
            k = _inner_csc(ip, ix, dat, Dv, gm, Hdiag, wfull, d, active, active.size,
                           lam1, lam2, nf, icpt, eps_in * Gnorm1_init, _MAX_INNER, Xd)
        sweeps += k
        if k <= 1:
            eps_in *= 0.25
        # Armijo on the true objective: delta = g^T d + lam2 w^T d + lam1 (|w+d|_1 - |w|_1)
        dw = d[:nf]
        l1_old = float(np.abs(w).sum())
        delta = float(g @ d) + lam2 * float(w @ dw) + lam1 * (float(np.abs(w + dw).sum())
                                                             - l1_old)
        F_old = Lsum + lam1 * l1_old + 0.5 * lam2 * float(w @ w)
        t = 1.0
        for _ in range(_MAX_LINE):
            wt = w + t * dw
            F_new = (_loss_at(z, Xd, t, y, loss_code) + lam1 * float(np.abs(wt).sum())
                     + 0.5 * lam2 * float(wt @ wt))
            if F_new - F_old <= _SIGMA * t * delta:
                break
            t *= 0.5
            halvings += 1
        else:
            logger.info("%s: the line search failed at iteration %d", _NAME, it)
            it += 1
            break
        w = wt
        if icpt:
            b += t * d[nf]
        z += t * Xd
        it += 1
    if it > 0 and not converged and not stopped:
        # the last step was taken after the last check
        Lsum = _derivs(z, y, loss_code, lp, Dv)
        P, gap = prob.primal_gap(w, b, z)
        converged = gap <= tol * abs(P)
    if not converged and not stopped:
        warn_not_converged(_NAME, tol, it, gap, P, stacklevel=4)
    return GLMResult(
        coef=w, intercept=float(b), n_iter=it, objective=np.asarray(objective),
        gap_history=np.asarray(gaps), times=np.asarray(times), gap=float(gap),
        converged=bool(converged), time=time.perf_counter() - t0, check_time=check_time,
        solver=_NAME, loss=loss, penalty=penalty, alpha=float(alpha),
        info={"inner_sweeps": sweeps, "line_search_steps": halvings, "gram": gram,
              "stopped_by_callback": stopped},
        l1_ratio=r if penalty == "elasticnet" else None)


def run_prox_newton(X, y, *, loss, alpha, penalty, fit_intercept, options, sample_weight=None,
                    coef_init=None, callback=None, comm=None, verbose=0, random_state=None,
                    blocks=None, comm_stats=None, intercept_init=None, l1_ratio=None):
    """The registry's proximal-Newton row: :func:`fit_prox_newton` (the front door's
    signature; see :mod:`roofline.glm._registry`).

    Returns
    -------
    GLMResult
    """
    return fit_prox_newton(X, y, loss=loss, alpha=alpha, penalty=penalty, l1_ratio=l1_ratio,
                           fit_intercept=fit_intercept, tol=options.tol,
                           max_iter=options.max_iter, coef_init=coef_init,
                           intercept_init=intercept_init, callback=callback)
