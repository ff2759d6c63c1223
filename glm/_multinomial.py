"""Multinomial logistic regression (the softmax loss) with L2, by trust-region Newton-CG or
L-BFGS.

Minimises, in Roofline's scaling (:mod:`roofline.glm`), for ``K`` classes, coefficients ``W``
(``K x d``) and intercepts ``b`` (``K``, unregularised)::

    F(W, b) = (1 / sum_j s_j) sum_j s_j (logsumexp(eta_j) - eta_j[y_j]) + alpha ||W||_F^2 / 2,
    eta_j = W x_j + b

which is scikit-learn's multinomial ``LogisticRegression`` objective divided by
``C sum_j s_j`` (``alpha = 1 / (C sum_j s_j)``).  Like scikit-learn's, the intercepts are
defined up to a common constant (the loss is invariant to adding ``c 1`` to ``b``); the
solvers start from ``b = 0`` and their steps keep ``sum_k b_k = 0``.

The products over the data are the rooflined primitives of :mod:`roofline.gmat`: ``W X`` is
``mult_as`` and the gradient ``G X^T`` is ``mult_ast`` over the ``K`` rows at once, for a CSC
``X`` (one column per example); numpy's BLAS products for a dense ``X``.  A Hessian-vector
product ``H v`` is one of each::

    U = V X + v_b,   T_j = s_j / S (p_j * U_j - p_j (p_j . U_j)),   H v = (T X^T + alpha V, T 1)

Stopping: the relative gradient norm, ``||grad F||_inf <= tol * ||grad F(0)||_inf`` (the same
criterion for both solvers; :attr:`MultinomialResult.grad_ratio`).  Features with values beyond
``2^20`` are solved in coefficients rescaled by powers of two (``W = V s``, the penalty
weighted by ``s^2``: the same problem and optimum), so that one huge feature does not dominate
the gradient and its test.
"""

from __future__ import annotations

import logging
import time
import warnings
from dataclasses import dataclass, field

import numpy as np
import scipy.optimize
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning

from roofline import gmat

from ._auto import LBFGS_AUTO_SCALE
from ._problem import check_positive, check_sample_weight, check_X

__all__ = ["MULTINOMIAL_SOLVERS", "MultinomialResult", "fit_multinomial", "softmax_loss"]

logger = logging.getLogger(__name__)

#: The solvers of :func:`fit_multinomial`.
MULTINOMIAL_SOLVERS = ("newton", "lbfgs")


@dataclass
class MultinomialResult:
    """What :func:`fit_multinomial` returns.

    Parameters
    ----------
    coef : ndarray, shape (n_classes, n_features)
        The coefficients, one row per class.
    intercept : ndarray, shape (n_classes,)
        The intercepts (zeros without one).
    n_iter : int
        Outer iterations (Newton steps, or L-BFGS iterations).
    objective : float
        ``F(W, b)`` at the solution.
    grad_ratio : float
        ``||grad F||_inf / ||grad F(0)||_inf`` at the solution: what ``converged`` compares
        with ``tol``.
    converged : bool
        ``grad_ratio <= tol`` was reached.
    time : float
        Wall seconds of the call.
    solver : str
        ``"newton"`` or ``"lbfgs"``.
    alpha : float
        The regularisation strength against the mean loss.
    info : dict
        Counts of function, gradient and Hessian-vector evaluations, the optimizer's message.
    """

    coef: np.ndarray
    intercept: np.ndarray
    n_iter: int
    objective: float
    grad_ratio: float
    converged: bool
    time: float
    solver: str = "newton"
    alpha: float = 0.0
    info: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        k, d = self.coef.shape
        return (f"MultinomialResult(n_classes={k}, n_features={d}, solver={self.solver!r}, "
                f"n_iter={self.n_iter}, objective={self.objective:.6g}, "
                f"grad_ratio={self.grad_ratio:.2e}, converged={self.converged}, "
                f"time={self.time:.3g}s)")


def softmax_loss(Z, y):
    """Per-example softmax losses and class probabilities of linear predictors.

    Parameters
    ----------
    Z : ndarray, shape (n_classes, n_examples)
        Linear predictors, one column per example.
    y : ndarray of int, shape (n_examples,)
        Class indices in ``[0, n_classes)``.

    Returns
    -------
    loss : ndarray, shape (n_examples,)
        ``logsumexp(Z[:, j]) - Z[y_j, j]`` in float64, without overflow.
    P : ndarray, shape (n_classes, n_examples)
        ``softmax(Z[:, j])`` in float64.

    Examples
    --------
    >>> import numpy as np
    >>> from roofline.glm import softmax_loss
    >>> loss, P = softmax_loss(np.zeros((2, 1)), np.array([1]))
    >>> round(float(loss[0]), 6), P.ravel().tolist()
    (0.693147, [0.5, 0.5])
    """
    Z = np.asarray(Z, dtype=np.float64)
    m = Z.max(axis=0)
    E = np.exp(Z - m)
    se = E.sum(axis=0)
    P = E / se
    cols = np.arange(Z.shape[1])
    loss = m + np.log(se) - Z[y, cols]
    return loss, P


class _Softmax:
    """The objective, its gradient and Hessian-vector products over validated data."""

    def __init__(self, X, y, K, s, alpha, fit_intercept, pen=None):
        self.X, self.y, self.K, self.alpha = X, y, K, alpha
        # the penalty's weight per feature (the squares of the features' scales: 1 unscaled)
        self.pen = np.ones(X.shape[0]) if pen is None else pen
        self.fit_intercept = fit_intercept
        self.d, self.n = X.shape
        self.sparse = sp.issparse(X)
        self.dt = X.dtype
        self.cols = np.arange(self.n)
        self.c = s / s.sum()  # the examples' weights in the mean loss
        self.at = None  # the last point evaluated: its probabilities P, objective and gradient
        self.P = None
        self.last = None
        self.n_hessp = 0

    def split(self, theta):
        Kd = self.K * self.d
        W = theta[:Kd].reshape(self.K, self.d)
        b = theta[Kd:] if self.fit_intercept else None
        return W, b

    def _times_X(self, V, vb):
        """``V X + vb`` (K x n, float64)."""
        if self.sparse:
            Z = gmat.mult_as(np.asfortranarray(V, dtype=self.dt), self.X)
        else:
            Z = V.astype(self.dt, copy=False) @ self.X
        Z = np.asarray(Z, dtype=np.float64)
        if vb is not None:
            Z += vb[:, None]
        return Z

    def _times_Xt(self, T):
        """``T X^T`` (K x d, float64)."""
        if self.sparse:
            G = gmat.mult_ast(np.asfortranarray(T, dtype=self.dt), self.X)
        else:
            G = T.astype(self.dt, copy=False) @ self.X.T
        return np.asarray(G, dtype=np.float64)

    def _pack(self, GW, Gb):
        if self.fit_intercept:
            return np.concatenate([GW.ravel(), Gb])
        return GW.ravel()

    def fun_grad(self, theta):
        # the solvers' first call is at the starting point, their last at the solution: both
        # evaluated here already (the initial gradient, the final one) are not recomputed
        if self.at is not None and np.array_equal(theta, self.at):
            f, g = self.last
            return f, g.copy()
        W, b = self.split(theta)
        loss, P = softmax_loss(self._times_X(W, b), self.y)
        f = float(self.c @ loss) + 0.5 * self.alpha * float(((W * W) @ self.pen).sum())
        T = P.copy()
        T[self.y, self.cols] -= 1.0
        T *= self.c
        g = self._pack(self._times_Xt(T) + self.alpha * W * self.pen, T.sum(axis=1))
        self.at, self.P, self.last = theta.copy(), P, (f, g)
        return f, g.copy()

    def hessp(self, theta, v):
        if self.at is None or not np.array_equal(theta, self.at):
            self.fun_grad(theta)
        self.n_hessp += 1
        V, vb = self.split(v)
        U = self._times_X(V, vb)
        P = self.P
        T = P * U
        T -= P * T.sum(axis=0)
        T *= self.c
        return self._pack(self._times_Xt(T) + self.alpha * V * self.pen, T.sum(axis=1))


def _rescaled(X):
    """``(S X, s)``: the features whose values exceed :data:`LBFGS_AUTO_SCALE` scaled by powers
    of two to at most 1 in magnitude (exact), ``s`` their scales (1 elsewhere); ``(X, None)``
    when none does.  The solvers then work on ``V = W / s`` with the penalty weighted by
    ``s^2``, the same problem, whose gradient is not dominated by one feature's scale."""
    big = np.abs(X).max(axis=1)
    big = np.asarray(big.toarray() if sp.issparse(big) else big, dtype=np.float64).ravel()
    if not (big > LBFGS_AUTO_SCALE).any():
        return X, None
    s = np.ones(X.shape[0])
    over = big > LBFGS_AUTO_SCALE
    s[over] = np.exp2(-np.ceil(np.log2(big[over])))
    if sp.issparse(X):
        X = sp.csc_matrix(sp.diags(s) @ X)
        X.sort_indices()
    else:
        X = X * s[:, None]
    return X, s


def _class_indices(y, n, n_classes):
    y = np.asarray(y).ravel()
    if y.shape[0] != n:
        raise ValueError(f"y has {y.shape[0]} entries but X has {n} examples (columns)")
    if y.dtype.kind not in "iu":
        if y.dtype.kind == "f" and np.all(np.isfinite(y)) and np.all(y == np.round(y)):
            y = y.astype(np.int64)
        else:
            raise ValueError("y must hold class indices 0 .. n_classes - 1 (integers); encode "
                             "labels with sklearn.preprocessing.LabelEncoder")
    y = y.astype(np.int64, copy=False)
    K = int(y.max()) + 1 if n_classes is None and n else n_classes
    if K is None or K < 2:
        raise ValueError(f"n_classes must be at least 2, got {K}")
    if n and (y.min() < 0 or y.max() >= K):
        raise ValueError(f"y must hold class indices in [0, {K}), got values in "
                         f"[{y.min()}, {y.max()}]")
    return y, int(K)


def fit_multinomial(X, y, *, alpha, n_classes=None, sample_weight=None, fit_intercept=True,
                    solver="newton", tol=1e-6, max_iter=100, coef_init=None,
                    intercept_init=None, verbose=0):
    """Fit an L2-regularised multinomial logistic regression (softmax loss).

    Parameters
    ----------
    X : scipy.sparse CSC matrix or ndarray, shape (n_features, n_examples)
        One column per example (a dense array is used as it is).  Other dtypes than float64
        are solved on a float64 copy.
    y : array-like of int, shape (n_examples,)
        Class indices in ``[0, n_classes)``.
    alpha : float
        L2 strength against the weighted mean loss (scikit-learn's ``C``:
        ``alpha = 1 / (C * sum(sample_weight))``).
    n_classes : int, optional
        The number of classes (``max(y) + 1`` when omitted; a class without examples is
        allowed).
    sample_weight : array-like, shape (n_examples,), optional
        Non-negative example weights.
    fit_intercept : bool, default=True
        Fit unregularised per-class intercepts.
    solver : {"newton", "lbfgs"}, default="newton"
        Trust-region Newton-CG (Hessian-vector products, scipy's ``trust-ncg``) or L-BFGS
        (scipy's ``L-BFGS-B``), both over the same objective and gradient.
    tol : float, default=1e-6
        Stop when ``||grad F||_inf <= tol * ||grad F(0)||_inf``.
    max_iter : int, default=100
        Outer iterations.
    coef_init : ndarray, shape (n_classes, n_features), optional
        Warm start.
    intercept_init : ndarray, shape (n_classes,), optional
        Warm start of the intercepts.
    verbose : int, default=0
        Log the result at INFO with ``verbose >= 1``.

    Returns
    -------
    MultinomialResult

    Raises
    ------
    ValueError
        For bad arguments, naming them.

    Warns
    -----
    sklearn.exceptions.ConvergenceWarning
        When ``max_iter`` is reached before ``tol``.

    Examples
    --------
    >>> import numpy as np
    >>> from roofline.glm import fit_multinomial
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((4, 300))            # 4 features x 300 examples
    >>> y = np.argmax(np.array([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 1.0]]) @ X, axis=0)
    >>> res = fit_multinomial(X, y, alpha=1e-3)
    >>> res.coef.shape, res.converged
    ((3, 4), True)
    """
    t0 = time.perf_counter()
    if solver not in MULTINOMIAL_SOLVERS:
        raise ValueError(f"solver must be one of {MULTINOMIAL_SOLVERS}, got {solver!r}")
    alpha = check_positive(alpha, "alpha")
    tol = check_positive(tol, "tol")
    max_iter = check_positive(max_iter, "max_iter", integer=True)
    X = check_X(X, keep_dense=True)
    if X.dtype != np.float64:
        # float32 products leave a gradient noise of ~1e-7 relative, above the usual tol: the
        # solve runs on a float64 copy (the caller casts the coefficients back if it wants)
        X = X.astype(np.float64)
    d, n = X.shape
    y, K = _class_indices(y, n, n_classes)
    s = np.ones(n) if sample_weight is None else check_sample_weight(sample_weight, n)
    X, scale = _rescaled(X)
    prob = _Softmax(X, y, K, s, alpha, bool(fit_intercept),
                    None if scale is None else scale * scale)

    theta0 = np.zeros(K * d + (K if fit_intercept else 0))
    _, g0 = prob.fun_grad(theta0)
    g0_norm = float(np.abs(g0).max()) if g0.size else 0.0
    if coef_init is not None:
        coef_init = np.asarray(coef_init, dtype=np.float64)
        if coef_init.shape != (K, d):
            raise ValueError(f"coef_init has shape {coef_init.shape}, expected {(K, d)}")
        theta0[:K * d] = (coef_init if scale is None else coef_init / scale).ravel()
    if intercept_init is not None and fit_intercept:
        intercept_init = np.asarray(intercept_init, dtype=np.float64).ravel()
        if intercept_init.shape != (K,):
            raise ValueError(f"intercept_init has shape {intercept_init.shape}, "
                             f"expected ({K},)")
        theta0[K * d:] = intercept_init - intercept_init.mean()
    target = tol * g0_norm
    if g0_norm == 0.0:  # all classes equally likely everywhere: 0 is the optimum
        res = theta0, 0
        message = "the gradient at zero is zero"
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # scipy's "A bad approximation"
            if solver == "newton":
                out = scipy.optimize.minimize(
                    prob.fun_grad, theta0, jac=True, hessp=prob.hessp, method="trust-ncg",
                    options={"gtol": target, "maxiter": max_iter})
            else:
                out = scipy.optimize.minimize(
                    prob.fun_grad, theta0, jac=True, method="L-BFGS-B",
                    options={"gtol": target, "ftol": 0.0, "maxiter": max_iter,
                             "maxcor": 20, "maxls": 40})
        res = out.x, int(out.nit)
        message = str(out.message)
    theta, nit = res
    f, g = prob.fun_grad(theta)
    ratio = float(np.abs(g).max()) / g0_norm if g0_norm else 0.0
    converged = ratio <= tol * (1 + 1e-9)
    W, b = prob.split(theta)
    result = MultinomialResult(
        coef=np.array(W) if scale is None else W * scale,
        intercept=np.zeros(K) if b is None else np.array(b),
        n_iter=max(int(nit), 1), objective=f, grad_ratio=ratio, converged=converged,
        time=time.perf_counter() - t0, solver=solver, alpha=alpha,
        info={"message": message, "hessp": prob.n_hessp, "n_classes": K})
    if not converged:
        warnings.warn(
            f"fit_multinomial(solver={solver!r}) stopped after {result.n_iter} iterations "
            f"({message}) with relative gradient {ratio:.3e} > tol={tol:g}; raise max_iter",
            ConvergenceWarning, stacklevel=2)
    if verbose:
        logger.info("%r", result)
    return result
