"""Ridge regression by its normal equations (``solver="cholesky"``), for few features.

Minimises the objective of :mod:`._cd_problem` with the squared loss::

    P(w, b) = (1/n) sum_i s_i (x_i^T w + b - y_i)^2 / 2 + alpha ||w||^2 / 2

(``s_i`` the sample weights, of mean 1; the intercept ``b`` unregularised) by one Cholesky
factorisation of the ``(d + 1) x (d + 1)`` system

    [X S X^T / n + alpha I    X s / n ] [w]   [X S y / n]
    [s^T X^T / n              sum s / n] [b] = [s^T y / n]

The Gram matrix ``X S X^T`` costs one pass over the data and ``nnz * (nnz per example)``
multiply-adds (``n d^2`` dense), then ``d^3 / 3`` for the factorisation: with a few hundred
features that is less than the Hessian-vector products of one Newton run, and the answer is
exact to rounding.  The duality gap of the result is certified as the iterative solvers'
(:meth:`GLMProblem.certificate`).  :func:`solve_ridge` refines with Newton the rare solution
that rounding leaves short of ``tol``.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import scipy.linalg
import scipy.sparse as sp

from roofline.kernels import SQUARED

from . import _losses
from . import newton as gnewton
from ._newton import fit_newton
from ._problem import GLMProblem, GLMResult, check_X, mean_one_weights, positive

__all__ = [
    "CHOLESKY_MAX_FEATURES",
    "fit_cholesky",
    "solve_ridge",
]

logger = logging.getLogger(__name__)

#: The most features ``solver="cholesky"`` accepts (a ``d x d`` float64 Gram matrix: 32 MiB).
CHOLESKY_MAX_FEATURES = 2048
_CHUNK_VALUES = 1 << 21  # values of a densified chunk of examples (16 MiB)


def _certificate(pb, w, b, s):
    """``(P, gap)`` at ``(w, b)``: the duality gap of the dual point ``a = -l'(z)`` by
    :meth:`GLMProblem.certificate`, as the iterative solvers compute it (``s``: the weights
    of mean 1, or ``None``)."""
    X, y = pb.X, pb.y
    z = np.asarray(X.T @ w, dtype=np.float64).ravel() + b
    L, g_b, h_b, dl, _ = gnewton.loss_derivs(z, y, pb.loss, sw=s)
    u = np.asarray(X @ (dl if s is None else dl * s), dtype=np.float64).ravel()
    parts = np.array([L, gnewton.conj_sum(-dl, y, pb.loss, s), -g_b, g_b, h_b])
    return pb.certificate(parts, pb.reg(w), float(u @ u), b)


def _gram(X, s, y):
    """``X S X^T``, ``X S y`` and ``X S 1`` of the CSC ``X`` (``s=None``: ``S = I``).

    Sparse products where the examples hold few values (under a tenth of the features);
    otherwise dense BLAS over chunks of examples densified a few MiB at a time."""
    d, n = X.shape
    if not sp.issparse(X):
        Xf = np.asarray(X, dtype=np.float64)
        Xs = Xf if s is None else Xf * s
        return Xs @ Xf.T, Xs @ y, Xs.sum(axis=1)
    if X.nnz < 0.1 * d * n:
        Xs = X if s is None else X.multiply(s[None, :]).tocsc()
        return ((Xs @ X.T).toarray(), np.asarray(Xs @ y, dtype=np.float64).ravel(),
                np.asarray(Xs.sum(axis=1), dtype=np.float64).ravel())
    G = np.zeros((d, d))
    Xy = np.zeros(d)
    X1 = np.zeros(d)
    step = max(1, _CHUNK_VALUES // max(d, 1))
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        Xc = X[:, lo:hi].toarray().astype(np.float64, copy=False)
        Xsc = Xc if s is None else Xc * s[lo:hi]
        G += Xsc @ Xc.T
        Xy += Xsc @ y[lo:hi]
        X1 += Xsc.sum(axis=1)
    return G, Xy, X1


def fit_cholesky(X, y, *, alpha, fit_intercept=True, sample_weight=None, tol=1e-6):
    """Fit L2-regularised least squares exactly, by the normal equations.

    Parameters
    ----------
    X : CSC matrix or ndarray, shape (n_features, n_examples)
        Examples as columns (the project layout); at most :data:`CHOLESKY_MAX_FEATURES`
        features.
    y : array, shape (n_examples,)
        Targets.
    alpha : float
        Regularisation strength of the mean-loss objective (positive).
    fit_intercept : bool
        An unregularised intercept.
    sample_weight : array, shape (n_examples,), optional
        Non-negative weights with a positive sum (scaled to mean 1, as
        :func:`~roofline.glm._newton.fit_newton` does).
    tol : float
        ``converged`` is ``gap <= tol * |P|``: rounding in an ill-conditioned system (features
        on scales far apart) can leave the solution short of it, and the caller then refines
        it (:func:`solve_ridge` runs Newton from it).

    Returns
    -------
    GLMResult
        With ``solver="cholesky"``, ``n_iter=1`` and the duality gap of the solution.

    Raises
    ------
    ValueError
        On bad input, or more than :data:`CHOLESKY_MAX_FEATURES` features.
    """
    t0 = time.perf_counter()
    alpha = positive(alpha, "alpha")
    tol = positive(tol, "tol")
    X = check_X(X, keep_dense=True)
    d, n = X.shape
    if d > CHOLESKY_MAX_FEATURES:
        raise ValueError(f"solver='cholesky' takes at most {CHOLESKY_MAX_FEATURES} features "
                         f"(its d x d Gram matrix), X has {d}; use solver='newton'")
    y = _losses.check_labels(y, "squared", margin=True)
    if y.shape[0] != n:
        raise ValueError(f"y has {y.shape[0]} entries but X has {n} examples (columns); X "
                         "must be (n_features, n_examples)")
    sw = mean_one_weights(sample_weight, n)
    fi = bool(fit_intercept)
    m = d + fi
    G = np.empty((m, m))
    rhs = np.empty(m)
    G[:d, :d], Xs_y, Xs_1 = _gram(X, sw, y)
    G[:d, :d] /= n
    G[np.arange(d), np.arange(d)] += alpha
    rhs[:d] = Xs_y / n
    if fi:
        G[:d, d] = G[d, :d] = Xs_1 / n
        s = np.ones(n) if sw is None else sw
        G[d, d] = s.sum() / n
        rhs[d] = float(s @ y) / n
    sol = scipy.linalg.cho_solve(scipy.linalg.cho_factor(G, lower=True, check_finite=False),
                                 rhs, check_finite=False)
    w = np.array(sol[:d])
    b = float(sol[d]) if fi else 0.0
    t_solve = time.perf_counter() - t0
    t1 = time.perf_counter()
    pb = GLMProblem(X, y, SQUARED, False, alpha, fi, primal=False)
    P, gap = _certificate(pb, w, b, sw)
    t_check = time.perf_counter() - t1
    res = GLMResult(coef=w, intercept=b, n_iter=1, objective=np.array([P]),
                   gap_history=np.array([gap]), times=np.array([t_solve]), gap=float(gap),
                   converged=bool(gap <= tol * abs(P)), time=0.0, check_time=t_check,
                   solver="cholesky", loss="squared", penalty="l2", alpha=alpha, dual=False,
                   info={"n_features": d})
    res.time = time.perf_counter() - t0
    return res


def solve_ridge(X, y, *, alpha, fit_intercept=True, tol=1e-6, max_iter=200,
                sample_weight=None, gtol=None, verbose=0, n_jobs=1):
    """:func:`fit_cholesky`, refined by trust-region Newton from its solution when rounding
    in an ill-conditioned system left it short of ``tol`` (then ``info["refined"]``).

    Parameters
    ----------
    X, y, alpha, fit_intercept, tol, sample_weight
        As for :func:`fit_cholesky`.
    max_iter, gtol, verbose, n_jobs
        Newton's, as for :func:`~roofline.glm._newton.fit_newton`.

    Returns
    -------
    GLMResult
        ``solver="cholesky"``, or ``"newton"`` after a refinement.
    """
    res = fit_cholesky(X, y, alpha=alpha, fit_intercept=fit_intercept,
                       sample_weight=sample_weight, tol=tol)
    if res.converged:
        return res
    logger.info("cholesky: relative gap %.3e after the solve; refining with newton",
                res.gap / max(abs(res.objective[-1]), 1e-300))
    res = fit_newton(X, y, loss="squared", alpha=alpha, fit_intercept=fit_intercept, tol=tol,
                     max_iter=max_iter, coef_init=res.coef, intercept_init=res.intercept,
                     verbose=verbose, n_jobs=n_jobs, sample_weight=sample_weight, gtol=gtol)
    res.info["refined"] = "cholesky, then newton"
    return res
