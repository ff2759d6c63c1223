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
(:meth:`GLMProblem.certificate`'s formula).
"""

from __future__ import annotations

import time

import numpy as np
import scipy.linalg
import scipy.sparse as sp

from roofline import gmat
from roofline.gmat import newton as gnewton

from ._cd_problem import CDResult, check_X, positive

__all__ = [
    "CHOLESKY_MAX_FEATURES",
    "fit_cholesky",
]

#: The most features ``solver="cholesky"`` accepts (a ``d x d`` float64 Gram matrix: 32 MiB).
CHOLESKY_MAX_FEATURES = 2048
_CHUNK_VALUES = 1 << 21  # values of a densified chunk of examples (16 MiB)
_SQUARED = gmat.glm.LOSS_CODES["squared"]


def _certificate(X, y, w, b, alpha, s, fit_intercept):
    """``(P, gap)`` at ``(w, b)``: the duality gap of the dual point ``a = -l'(z)``, as
    :meth:`GLMProblem.certificate` computes it for the iterative solvers."""
    n = y.shape[0]
    z = np.asarray(X.T @ w, dtype=np.float64).ravel() + b
    L, g_b, h_b, dl, _ = gnewton.loss_derivs(z, y, _SQUARED, sw=s)
    u = np.asarray(X @ (dl if s is None else dl * s), dtype=np.float64).ravel()
    conj = gnewton.conj_sum(-dl, y, _SQUARED, s)
    P = L / n + 0.5 * alpha * float(w @ w)
    D = (conj + b * g_b) / n - 0.5 * float(u @ u) / (alpha * n * n)
    gap = P - D
    if fit_intercept and h_b > 0:
        gap += g_b * g_b / (2.0 * h_b * n)
    return P, max(gap, 0.0)


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
        :func:`~roofline.learners._newton.fit_newton` does).
    tol : float
        ``converged`` is ``gap <= tol * |P|``: rounding in an ill-conditioned system (features
        on scales far apart) can leave the solution short of it, and the caller then refines
        it (:func:`~roofline.learners.fit_glm_cd` runs Newton from it).

    Returns
    -------
    CDResult
        With ``solver="cholesky"``, ``n_iter=1`` and the duality gap of the solution.

    Raises
    ------
    ValueError
        On bad input, or more than :data:`CHOLESKY_MAX_FEATURES` features.
    """
    t0 = time.perf_counter()
    alpha = positive(alpha, "alpha")
    tol = positive(tol, "tol")
    if sp.issparse(X):
        X = check_X(X)
    else:  # dense: used as it is (check_X would convert it to CSC)
        X = np.asarray(X)
        if X.ndim != 2 or X.dtype.kind not in "fiu":
            raise ValueError(f"X must be a 2-D numeric array (n_features, n_examples), got "
                             f"shape {X.shape} and dtype {X.dtype}")
        if not np.isfinite(X).all():
            raise ValueError("X has a non-finite value")
    d, n = X.shape
    if d > CHOLESKY_MAX_FEATURES:
        raise ValueError(f"solver='cholesky' takes at most {CHOLESKY_MAX_FEATURES} features "
                         f"(its d x d Gram matrix), X has {d}; use solver='newton'")
    y = gmat.glm.check_labels(y, "squared", margin=True)
    if y.shape[0] != n:
        raise ValueError(f"y has {y.shape[0]} entries but X has {n} examples (columns); X "
                         "must be (n_features, n_examples)")
    s = np.ones(n)
    weighted = sample_weight is not None
    if weighted:
        s = np.asarray(sample_weight, dtype=np.float64).ravel()
        if s.shape[0] != n:
            raise ValueError(f"sample_weight has {s.shape[0]} entries but X has {n} examples")
        if not np.isfinite(s).all() or (s < 0).any() or not s.sum() > 0:
            raise ValueError("sample_weight must be finite and non-negative with a positive "
                             "sum")
        s = s * (n / s.sum())
    fi = bool(fit_intercept)
    m = d + fi
    G = np.empty((m, m))
    rhs = np.empty(m)
    G[:d, :d], Xs_y, Xs_1 = _gram(X, s if weighted else None, y)
    G[:d, :d] /= n
    G[np.arange(d), np.arange(d)] += alpha
    rhs[:d] = Xs_y / n
    if fi:
        G[:d, d] = G[d, :d] = Xs_1 / n
        G[d, d] = s.sum() / n
        rhs[d] = float(s @ y) / n
    sol = scipy.linalg.cho_solve(scipy.linalg.cho_factor(G, lower=True, check_finite=False),
                                 rhs, check_finite=False)
    w = np.array(sol[:d])
    b = float(sol[d]) if fi else 0.0
    t_solve = time.perf_counter() - t0
    t1 = time.perf_counter()
    P, gap = _certificate(X, y, w, b, alpha, s if weighted else None, fi)
    t_check = time.perf_counter() - t1
    res = CDResult(coef=w, intercept=b, n_iter=1, objective=np.array([P]),
                   gap_history=np.array([gap]), times=np.array([t_solve]), gap=float(gap),
                   converged=bool(gap <= tol * abs(P)), time=0.0, check_time=t_check,
                   solver="cholesky", loss="squared", penalty="l2", alpha=alpha, dual=False,
                   info={"n_features": d})
    res.time = time.perf_counter() - t0
    return res
