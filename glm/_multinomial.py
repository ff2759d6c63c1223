"""Multinomial logistic regression (the softmax loss) with L2 or unpenalised, by line-search
Newton-CG (preconditioned) or L-BFGS.

Minimises, in Roofline's scaling (:mod:`roofline.glm`), for ``K`` classes, coefficients ``W``
(``K x d``) and intercepts ``b`` (``K``, unregularised)::

    F(W, b) = (1 / sum_j s_j) sum_j s_j (logsumexp(eta_j) - eta_j[y_j]) + alpha ||W||_F^2 / 2,
    eta_j = W x_j + b

which is scikit-learn's multinomial ``LogisticRegression`` objective divided by
``C sum_j s_j`` (``alpha = 1 / (C sum_j s_j)``; ``alpha = 0`` is its ``penalty=None``).

The softmax is not identifiable: the loss does not change when a constant is added to every
intercept, nor (for each feature) when a common value is added to every class's
coefficient.  The penalty picks the centred representative (``sum_k W[k] = 0``) and leaves the
intercepts' constant free; ``alpha = 0`` leaves both free.  The solvers work in the subspace
of centred coefficients and intercepts (the loss's gradient lies in it; the preconditioned
residuals are projected back into it; warm starts are centred first, the same model): the
result is the centred optimum, the limit of the penalised ones as ``alpha -> 0`` (scikit-learn
returns the same model, up to that invisible shift).  Without a penalty, data that one
hyperplane per class separates have no optimum (the objective decreases to 0): the solvers
stop at ``max_iter`` with a ``ConvergenceWarning``, as scikit-learn's.

The products over the data are the fused kernels of :mod:`roofline.kernels` (``_softmax``):
one pass over a CSC ``X`` (one column per example) computes every example's
predictors, probabilities, loss and gradient factors ``T_j = c_j (p_j - e_{y_j})``, another
scatters ``T`` back to the features over ``X``'s CSR copy (parallel by features, float64
accumulators; float32 sparse data are read as they are).  The reference they are tested
against (``_Softmax(fused=False)``): the rooflined primitives of :mod:`roofline.gmat` (``W X``
is ``mult_as``, ``G X^T`` is ``mult_ast`` over the ``K`` rows at once), numpy's BLAS products
for a dense ``X``.  A Hessian-vector product ``H v`` is one
pass of each kind::

    U = V X + v_b,   T_j = s_j / S (p_j * U_j - p_j (p_j . U_j)),   H v = (T X^T + alpha V, T 1)

``solver="newton"``: Newton's steps by preconditioned conjugate gradients (per-class blocks
over the features for dense data with few features, LIBLINEAR's mix ``0.01 diag(H) + 0.99
alpha`` otherwise) to the forcing tolerance
``min(0.5, (||g|| / ||g_0||)^0.75) ||g||``, then an Armijo backtracking line search from the
full step.  Sparse features without a stored value are left out of the solve (their optimum
is 0).  The intercepts start at the log class frequencies (their optimum at ``W = 0``).

Distributed (``comm=``): every rank holds its own examples; the objective, its gradient and
every Hessian-vector product are the sums of the ranks' (one reduce each: a Kylix plan over
the union of the ranks' features for sparse data, configured once; the dense all-reduce
otherwise), and so is the preconditioner's diagonal.  The reduced values are the same on
every rank, so the deterministic solvers take the same steps everywhere: the iterates are the
single-process ones up to the order of summation, at any number of ranks.

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
import scipy.linalg
import scipy.linalg.blas
import scipy.optimize
import scipy.sparse as sp

from roofline import gmat, kernels

from ._auto import LBFGS_AUTO_SCALE
from ._newton import _agree, feature_union, union_plan
from ._problem import (
    check_on_every_rank,
    check_positive,
    check_sample_weight,
    check_X,
    convergence_warning,
)

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


#: The Newton-CG's forcing term: the conjugate gradient stops at a residual of
#: ``min(0.5, (||g|| / ||g_0||)^FORCING_POWER) ||g||`` (superlinear convergence).
FORCING_POWER = 0.75

#: Dense data with at most this many features get the per-class block preconditioner
#: (:meth:`_Softmax.preconditioner`).
BLOCK_PRECOND_MAX_FEATURES = 512

#: The block preconditioner's blocks up to this many features: each class's own (exact block
#: Jacobi, ``K`` weighted Gram products: ``d / 4`` Hessian products' cost); beyond, one shared
#: Gram matrix scaled per class (raw digits, 64 features: 4x fewer Hessian products).
PER_CLASS_BLOCKS_MAX_FEATURES = 128

#: Stored values per chunk of the parallel kernels (fewer: one chunk, the calling thread).
_CHUNK_WORK = 1 << 15


def _bounds(indptr, work):
    """Chunk boundaries of ``indptr``'s rows/columns, about equal stored values each."""
    m = indptr.shape[0] - 1
    n_chunks = int(min(max(1, work // _CHUNK_WORK), 4 * kernels.default_threads(), max(m, 1)))
    if n_chunks == 1:
        return np.array([0, m], dtype=np.int64)
    return kernels.nnz_chunks(np.asarray(indptr, dtype=np.int64), n_chunks)


class _Softmax:
    """The objective, its gradient, Hessian-vector products and the Hessian's diagonal over
    validated data."""

    def __init__(self, X, y, K, s, alpha, fit_intercept, pen=None, s_total=None, red=None,
                 fused=True):
        self.X, self.y, self.K, self.alpha = X, y, K, alpha
        #: distributed: the :class:`_Sum` of the ranks' loss and gradient sums (None alone)
        self.red = red
        # the penalty's weight per feature (the squares of the features' scales: 1 unscaled)
        self.pen = np.ones(X.shape[0]) if pen is None else pen
        self.fit_intercept = fit_intercept
        self.d, self.n = X.shape
        self.sparse = sp.issparse(X)
        self.dt = X.dtype
        self.cols = np.arange(self.n)
        # the examples' weights in the mean loss (the sum over every rank's examples)
        self.c = s / (s.sum() if s_total is None else s_total)
        self.at = None  # the last point evaluated: its probabilities P, objective and gradient
        self.P = None
        self.last = None
        self.n_hessp = 0
        # the fused kernels of roofline.kernels (one pass over the data per product), or the
        # gmat / numpy products (fused=False: the reference the kernels are tested against)
        self.fused = fused
        self._sq = None  # X's squared values (the Hessian's diagonal), made on first use
        self.pen_rep = None  # alpha * pen per coefficient (feature-major), made on first use
        if self.fused:
            self.c = np.ascontiguousarray(self.c, dtype=np.float64)
            self.T = np.empty((self.n, K))
            if self.sparse:
                self.Xr = X.tocsr()  # one row per feature: the scatters, parallel by features
                self.Xr.sort_indices()
                self.bc = _bounds(X.indptr, X.nnz * K)
                self.br = _bounds(self.Xr.indptr, X.nnz * K)
            else:
                self.bc = _bounds(np.arange(self.n + 1) * max(self.d, 1), self.n * self.d * K)

    def split(self, theta):
        Kd = self.K * self.d
        # stored feature-major (``W^T``, ``d x K``): the kernels' layout, without transposes
        W = theta[:Kd].reshape(self.d, self.K).T
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

    def _scatter(self, T, squared=False):
        """``X T`` transposed: ``(K, d)`` float64 from the example-major ``T`` (fused path)."""
        if self.sparse:
            G = np.empty((self.d, self.K))
            data = self.Xr.data
            if squared:
                if self._sq is None:
                    self._sq = np.square(data, dtype=np.float64)
                data = self._sq
            kernels.softmax_rows_times(self.Xr.indptr, self.Xr.indices, data, T, G, self.br)
            return G.T
        if squared:
            if self._sq is None:
                self._sq = np.square(self.X)
            return (self._sq @ T).T
        return (self.X @ T).T

    def _pack(self, GW, Gb):
        Kd = self.K * self.d
        out = np.empty(Kd + (self.K if self.fit_intercept else 0))
        out[:Kd].reshape(self.d, self.K)[...] = GW.T
        if self.fit_intercept:
            out[Kd:] = Gb
        return out

    def _loss_parts(self, W, b, direct=False):
        """``(L, GW, Gb, P)``: the weighted mean loss, its gradients and the probabilities
        (``P`` example-major ``(n, K)`` on the fused path, ``(K, n)`` otherwise)."""
        bb = np.zeros(self.K) if b is None else np.ascontiguousarray(b, dtype=np.float64)
        if self.fused:
            P, T, loss = np.empty((self.n, self.K)), self.T, np.empty(self.n)
            if self.sparse:
                kernels.softmax_csc_eval(self.X.indptr, self.X.indices, self.X.data,
                                         np.ascontiguousarray(W.T), bb, self.y, self.c, P, T,
                                         loss, self.bc)
            else:
                Z = self.X.T @ W.T
                Z += bb
                kernels.softmax_dense_eval(np.ascontiguousarray(Z), self.y, self.c, P, T, loss,
                                           self.bc)
            if direct:  # the gradient's factors: :meth:`_direct` scatters them
                return float(self.c @ loss), T, P
            return float(self.c @ loss), self._scatter(T), T.sum(axis=0), P
        loss, P = softmax_loss(self._times_X(W, b), self.y)
        T = P.copy()
        T[self.y, self.cols] -= 1.0
        T *= self.c
        return float(self.c @ loss), self._times_Xt(T), T.sum(axis=1), P

    def fun_grad(self, theta):
        # the solvers' first call is at the starting point, their last at the solution: both
        # evaluated here already (the initial gradient, the final one) are not recomputed
        if self.at is not None and np.array_equal(theta, self.at):
            f, g = self.last
            return f, g.copy()
        W, b = self.split(theta)
        if self.fused and self.red is None:
            L, T, P = self._loss_parts(W, b, direct=True)
            f = L + 0.5 * self.alpha * float(((W * W) @ self.pen).sum())
            g = self._direct(T, theta)
            self.at, self.P, self.last = theta.copy(), P, (f, g)
            return f, g.copy()
        L, GW, Gb, P = self._loss_parts(W, b)
        if self.red is not None:
            L, GW, Gb = self.red(L, GW, Gb)
        f = L + 0.5 * self.alpha * float(((W * W) @ self.pen).sum())
        g = self._pack(GW + self.alpha * W * self.pen, Gb)
        self.at, self.P, self.last = theta.copy(), P, (f, g)
        return f, g.copy()

    def _at(self, theta):
        if self.at is None or not np.array_equal(theta, self.at):
            self.fun_grad(theta)

    def hessp(self, theta, v):
        self._at(theta)
        return self.hessp_here(v)

    def _direct(self, T, v):
        """The packed ``(X T + alpha pen * V, T 1)`` written in place (fused, one process)."""
        Kd = self.K * self.d
        out = np.empty(v.size)
        G = out[:Kd].reshape(self.d, self.K)
        if self.sparse:
            kernels.softmax_rows_times(self.Xr.indptr, self.Xr.indices, self.Xr.data, T, G,
                                       self.br)
        else:
            np.matmul(self.X, T, out=G)
        if self.alpha > 0:
            if self.pen_rep is None:
                self.pen_rep = self.alpha * np.repeat(self.pen, self.K)
            out[:Kd] += self.pen_rep * v[:Kd]
        if self.fit_intercept:
            T.sum(axis=0, out=out[Kd:])
        return out

    def hessp_here(self, v):
        """``H v`` at the last point evaluated (:meth:`hessp` without the point's check)."""
        self.n_hessp += 1
        V, vb = self.split(v)
        P = self.P
        direct = self.fused and self.red is None
        if self.fused:
            T = self.T
            if self.sparse:
                kernels.softmax_csc_hess(
                    self.X.indptr, self.X.indices, self.X.data, np.ascontiguousarray(V.T),
                    np.zeros(self.K) if vb is None else np.ascontiguousarray(vb), P, self.c,
                    T, self.bc)
            else:
                U = self.X.T @ V.T
                if vb is not None:
                    U += vb
                kernels.softmax_dense_hess(np.ascontiguousarray(U), P, self.c, T, self.bc)
            if direct:
                return self._direct(T, v)
            HW, Hb = self._scatter(T), T.sum(axis=0)
        else:
            U = self._times_X(V, vb)
            T = P * U
            T -= P * T.sum(axis=0)
            T *= self.c
            HW, Hb = self._times_Xt(T), T.sum(axis=1)
        if self.red is not None:
            _, HW, Hb = self.red(0.0, HW, Hb)
        return self._pack(HW + self.alpha * V * self.pen, Hb)

    def preconditioner(self, theta):
        """The conjugate gradient's preconditioner at ``theta``, as a solve ``r -> M^-1 r``.

        Dense data with at most ``BLOCK_PRECOND_MAX_FEATURES`` features (one process):
        per class ``k``, the Hessian's diagonal block ``M_k = X diag(c p_k (1 - p_k)) X^T +
        alpha diag(pen)`` over the features and the intercept (block Jacobi; up to
        ``PER_CLASS_BLOCKS_MAX_FEATURES`` features), or beyond, ``s_k X diag(c w) X^T + alpha
        diag(pen)``, ``w_j`` the example's mean ``p_jk (1 - p_jk)`` over the classes and
        ``s_k`` the class's share of it (one Gram product, the cost of ``d / 4K`` Hessian
        products), and ``K`` Cholesky factorisations per Newton step: it captures the
        features' scales and correlations, what makes raw pixels ill-conditioned.  Otherwise
        LIBLINEAR's diagonal mix (Hsia, Chiang and Lin, 2018), ``0.01 diag(H) + 0.99 alpha`` (the
        penalty's curvature; the diagonal alone for the intercepts and with ``alpha = 0``),
        robust where the plain diagonal (Jacobi) is not: text-like data with power-law feature
        frequencies."""
        if not self.sparse and self.red is None and 0 < self.d <= BLOCK_PRECOND_MAX_FEATURES:
            return self._block_preconditioner(theta)
        diag = self.hess_diag(theta)
        m = 0.01 * diag
        Kd = self.K * self.d
        if self.alpha > 0:
            m[:Kd] += 0.99 * self.alpha * np.repeat(self.pen, self.K)
        else:
            m = diag
        minv = 1.0 / np.maximum(m, 1e-12 * max(float(m.max()), 1e-300))
        return lambda r: minv * r

    def _block_preconditioner(self, theta):
        self._at(theta)
        P = self.P if self.fused else self.P.T  # (n, K)
        Q = P * (1.0 - P)
        Q *= self.c[:, None]
        w = Q.sum(axis=1) / self.K
        tot = float(w.sum())
        X = np.asarray(self.X, dtype=np.float64)
        Xw = X * w
        fi = self.fit_intercept
        m = self.d + (1 if fi else 0)
        B = np.empty((m, m))
        B[:self.d, :self.d] = Xw @ X.T
        if fi:
            B[:self.d, -1] = B[-1, :self.d] = Xw.sum(axis=1)
            B[-1, -1] = tot
        share = Q.sum(axis=0) / tot if tot > 0 else np.ones(self.K)
        pen = np.zeros(m)
        pen[:self.d] = self.alpha * self.pen
        jitter = 1e-10 * max(float(np.abs(np.diag(B)).max()), 1e-300)
        facs = []
        exact = self.d <= PER_CLASS_BLOCKS_MAX_FEATURES
        for k in range(self.K):
            if exact:  # the Hessian's own diagonal block of class k
                Xq = X * Q[:, k]
                Mk = np.empty((m, m))
                Mk[:self.d, :self.d] = Xq @ X.T
                if fi:
                    Mk[:self.d, -1] = Mk[-1, :self.d] = Xq.sum(axis=1)
                    Mk[-1, -1] = Q[:, k].sum()
            else:
                Mk = share[k] * B
            Mk[np.diag_indices(m)] += pen + jitter
            facs.append(scipy.linalg.cho_factor(Mk, check_finite=False))
        K, d = self.K, self.d

        def solve(r):
            R = np.empty((m, K))
            R[:d] = r[:K * d].reshape(d, K)
            if fi:
                R[d] = r[K * d:]
            Z = np.empty_like(R)
            for k in range(K):
                Z[:, k] = scipy.linalg.cho_solve(facs[k], R[:, k], check_finite=False)
            out = np.empty_like(r)
            out[:K * d] = Z[:d].ravel()
            if fi:
                out[K * d:] = Z[d]
            return out

        return solve

    def hess_diag(self, theta):
        """The Hessian's diagonal at ``theta`` (the Newton-CG's Jacobi preconditioner)."""
        self._at(theta)
        P = self.P
        Q = P * (1.0 - P)
        if self.fused:
            Q *= self.c[:, None]
            DW, Db = self._scatter(Q, squared=True), Q.sum(axis=0)
        else:
            Q *= self.c
            if self.sparse:
                X2 = self.X.multiply(self.X).tocsc() if self._sq is None else self._sq
                self._sq = X2
                DW = np.asarray(Q @ X2.T.astype(np.float64), dtype=np.float64)
            else:
                if self._sq is None:
                    self._sq = np.square(np.asarray(self.X, dtype=np.float64))
                DW = Q @ self._sq.T
            Db = Q.sum(axis=1)
        if self.red is not None:
            _, DW, Db = self.red(0.0, np.asarray(DW), Db)
        W, _ = self.split(theta)
        return self._pack(DW + self.alpha * self.pen, Db)


class _Sum:
    """Sums ``(L, GW, Gb)`` (the loss, the ``K x d`` gradient and the intercepts') over the
    ranks of ``comm``: through one Kylix plan over the union of the ranks' features (``K``
    values per feature, the intercepts and the loss in two extra rows), configured once, or
    the dense all-reduce (``local is None``)."""

    def __init__(self, comm, d, K, local=None, union=None):
        self.comm, self.d, self.K = comm, d, K
        self.local, self.union = local, union
        self.plan = None if local is None else union_plan(comm, d, local, union, 2)
        self.calls = 0

    def __call__(self, L, GW, Gb):
        self.calls += 1
        K, d = self.K, self.d
        if self.plan is None:
            out = self.comm.allreduce(np.concatenate([GW.ravel(), Gb, [L]]))
            return float(out[-1]), out[:K * d].reshape(K, d), out[K * d:K * d + K]
        m, u = self.local.size, self.union.size
        v = np.zeros((m + 2, K))
        v[:m] = GW[:, self.local].T
        v[m] = Gb
        v[m + 1, 0] = L
        out = self.plan.reduce(v)
        G = np.zeros((K, d))
        G[:, self.union] = out[:u].T
        return float(out[u + 1, 0]), G, np.array(out[u])


def _projector(K, d, fit_intercept):
    """The projection onto the directions the softmax loss sees: the intercepts' mean over
    the classes removed (adding ``c 1`` to ``b`` changes nothing), and with ``alpha = 0`` each
    feature's coefficients' mean over the classes too (nor does adding ``w`` to every row of
    ``W``).  The loss's gradient lies in that subspace already; the Jacobi-preconditioned
    residuals are projected back into it."""
    Kd = K * d

    def project(v):
        if d:
            Wt = v[:Kd].reshape(d, K)  # feature-major (_Softmax.split)
            Wt -= Wt.mean(axis=1, keepdims=True)
        if fit_intercept:
            v[Kd:] -= v[Kd:].mean()
        return v

    return project


def _axpy(x, y, a):
    """``y += a x`` in place (BLAS, no temporary)."""
    return scipy.linalg.blas.daxpy(x, y, a=a)


def _pcg(prob, theta, g, precond, project, tol, max_cg):
    """Preconditioned conjugate gradient on ``H s = -g`` until ``||r||_2 <= tol``
    (``precond(r)``: the preconditioner's solve); returns ``(s, iterations)``."""
    prob._at(theta)
    x = np.zeros_like(g)
    r = -g
    z = project(precond(r))
    p = z.copy()
    rz = float(r @ z)
    i = 0
    for i in range(1, max_cg + 1):  # noqa: B007 (i: the iterations run)
        Hp = prob.hessp_here(p)
        pHp = float(p @ Hp)
        if not pHp > 0.0:  # no curvature along p (numerically): keep what we have
            if i == 1:
                x = p
            break
        a = rz / pHp
        x = _axpy(p, x, a=a)
        r = _axpy(Hp, r, a=-a)
        if float(np.sqrt(r @ r)) <= tol:
            break
        z = project(precond(r))
        rz_new = float(r @ z)
        p *= rz_new / rz
        p += z
        rz = rz_new
    return x, i


def _newton_cg(prob, theta, target, max_iter, project):
    """Line-search Newton-CG: Jacobi-preconditioned CG to a forcing tolerance
    ``min(0.5, sqrt(||g|| / ||g_0||)) ||g||``, then Armijo backtracking from the full step;
    stops when ``||g||_inf <= target``.  Returns ``(theta, iterations, message)``."""
    f, g = prob.fun_grad(theta)
    g0 = float(np.sqrt(g @ g))
    it = 0
    message = "converged"
    while float(np.abs(g).max()) > target:
        if it >= max_iter:
            message = "maximum number of iterations reached"
            break
        it += 1
        gn = float(np.sqrt(g @ g))
        precond = prob.preconditioner(theta)
        eta = min(0.5, (gn / g0) ** FORCING_POWER) if g0 > 0 else 0.5
        step, _ = _pcg(prob, theta, g, precond, project, eta * gn, 250)
        slope = float(g @ step)
        if not slope < 0.0:  # not a descent direction (rounding): the steepest one
            step, slope = -g, -float(g @ g)
        t = 1.0
        for _ in range(60):
            trial = theta + t * step
            f_new, g_new = prob.fun_grad(trial)
            if f_new <= f + 1e-4 * t * slope:
                break
            # at the optimum's rounding level F no longer tells (its changes are below
            # its precision): a step that keeps F there and shrinks the gradient is taken
            if (f_new <= f + 1e-14 * abs(f)
                    and float(np.abs(g_new).max()) < float(np.abs(g).max())):
                break
            t *= 0.5
        else:
            message = "the line search failed (no decrease: at the precision's limit)"
            break
        if f_new == f and t < 1.0:
            theta, f, g = trial, f_new, g_new
            message = "no decrease left (at the precision's limit)"
            break
        theta, f, g = trial, f_new, g_new
    return theta, it, message


def _touched(X):
    """``(X, keep)``: a sparse ``X`` without its features that hold no stored value, and the
    indices of the features kept (``None``: all are, or ``X`` is dense, or fewer than 10%
    would go).  Such a feature's gradient is 0 everywhere and its coefficients' optimum is 0
    (the centred one without a penalty): the solve skips them (hashed data leave most of a
    large feature space empty), the result puts them back as zeros."""
    if not sp.issparse(X) or X.shape[0] == 0:
        return X, None
    occ = np.bincount(X.indices, minlength=X.shape[0]) > 0
    if occ.sum() > 0.9 * X.shape[0]:
        return X, None
    keep = np.flatnonzero(occ)
    Xk = sp.csc_matrix(X[keep])
    Xk.sort_indices()
    return Xk, keep


def _feature_max(X):
    """Each feature's largest ``|value|`` (0 for a rank without examples)."""
    if X.shape[1] == 0:
        return np.zeros(X.shape[0])
    big = np.abs(X).max(axis=1)
    return np.asarray(big.toarray() if sp.issparse(big) else big, dtype=np.float64).ravel()


def _rescaled(X, big=None):
    """``(S X, s)``: the features whose values exceed :data:`LBFGS_AUTO_SCALE` scaled by powers
    of two to at most 1 in magnitude (exact), ``s`` their scales (1 elsewhere); ``(X, None)``
    when none does.  The solvers then work on ``V = W / s`` with the penalty weighted by
    ``s^2``, the same problem, whose gradient is not dominated by one feature's scale.
    ``big``: the features' largest magnitudes (over every rank; default ``X``'s)."""
    big = _feature_max(X) if big is None else big
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


def _class_indices(y, n, n_classes, need_k=True):
    """``(y, K)``: class indices validated; ``K`` None when ``need_k`` is false and
    ``n_classes`` not given (a rank of a distributed fit: the classes are over every rank)."""
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
    if n and y.min() < 0:
        raise ValueError(f"y must hold class indices (>= 0), got {y.min()}")
    if not need_k and n_classes is None:
        return y, None
    if K is None or K < 2:
        raise ValueError(f"n_classes must be at least 2, got {K}")
    if n and (y.min() < 0 or y.max() >= K):
        raise ValueError(f"y must hold class indices in [0, {K}), got values in "
                         f"[{y.min()}, {y.max()}]")
    return y, int(K)


def _check_alpha(alpha):
    """``alpha >= 0`` finite (0: unpenalised)."""
    if isinstance(alpha, (int, float, np.floating, np.integer)) and not isinstance(alpha, bool):
        alpha = float(alpha)
        if np.isfinite(alpha) and alpha >= 0:
            return alpha
    raise ValueError(f"alpha must be a non-negative finite number (0: unpenalised), got "
                     f"{alpha!r}")


def fit_multinomial(X, y, *, alpha, n_classes=None, sample_weight=None, fit_intercept=True,
                    solver="newton", tol=1e-6, max_iter=100, coef_init=None,
                    intercept_init=None, verbose=0, comm=None):
    """Fit a multinomial logistic regression (softmax loss), L2-regularised or unpenalised.

    Parameters
    ----------
    X : scipy.sparse CSC matrix or ndarray, shape (n_features, n_examples)
        One column per example (a dense array is used as it is).  Other dtypes than float64
        are solved on a float64 copy, except float32 CSC data with the fused kernels, read
        as they are into float64 accumulators.  The coefficients are float64.
    y : array-like of int, shape (n_examples,)
        Class indices in ``[0, n_classes)``.
    alpha : float
        L2 strength against the weighted mean loss (scikit-learn's ``C``:
        ``alpha = 1 / (C * sum(sample_weight))``); ``0``: unpenalised (scikit-learn's
        ``penalty=None``), the centred optimum (module docstring).
    n_classes : int, optional
        The number of classes (``max(y) + 1`` when omitted; a class without examples is
        allowed).
    sample_weight : array-like, shape (n_examples,), optional
        Non-negative example weights.
    fit_intercept : bool, default=True
        Fit unregularised per-class intercepts.
    solver : {"newton", "lbfgs"}, default="newton"
        Line-search Newton-CG (preconditioned conjugate gradients on Hessian-vector products,
        module docstring) or L-BFGS (scipy's ``L-BFGS-B``), both over the same objective and
        gradient.
    tol : float, default=1e-6
        Stop when ``||grad F||_inf <= tol * ||grad F(0)||_inf``.
    max_iter : int, default=100
        Outer iterations.
    coef_init : ndarray, shape (n_classes, n_features), optional
        Warm start (centred over the classes first: the same model).
    intercept_init : ndarray, shape (n_classes,), optional
        Warm start of the intercepts (default: the log class frequencies).
    verbose : int, default=0
        Log the result at INFO with ``verbose >= 1``.
    comm : roofline.comm.Communicator, optional
        Run with this process as one rank of ``comm``, ``X``, ``y`` and ``sample_weight``
        being this rank's examples (a rank may hold none, or some classes only): the objective
        over every rank's examples, the same iterates at any number of ranks (module
        docstring).  Every rank passes the same options (checked); rank 0's warm start is
        used.

    Returns
    -------
    MultinomialResult
        The same on every rank (up to the time); ``info["collectives"]`` counts the reduces.

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
    alpha = _check_alpha(alpha)
    tol = check_positive(tol, "tol")
    max_iter = check_positive(max_iter, "max_iter", integer=True)
    if comm is not None:
        from roofline.comm import Communicator

        if not isinstance(comm, Communicator):
            raise TypeError(f"comm must be a roofline.comm.Communicator, got "
                            f"{type(comm).__name__}")

    def local():
        Xl = check_X(X, keep_dense=True, allow_no_examples=comm is not None)
        if Xl.dtype != np.float64 and not sp.issparse(Xl):
            # float32 products leave a gradient noise of ~1e-7 relative, above the usual tol:
            # the solve runs on a float64 copy (the caller casts the coefficients back); the
            # fused sparse kernels read float32 values into float64 accumulators instead
            Xl = Xl.astype(np.float64)
        n = Xl.shape[1]
        yl, K = _class_indices(y, n, n_classes, need_k=comm is None)
        sl = np.ones(n) if sample_weight is None else check_sample_weight(
            sample_weight, n, positive_sum=comm is None)
        return Xl, yl, K, sl

    if comm is None:
        X, y, K, s = local()
        d_all, n = X.shape
        X, keep = _touched(X)
        d = X.shape[0]
        X, scale = _rescaled(X)
        prob = _Softmax(X, y, K, s, alpha, bool(fit_intercept),
                        None if scale is None else scale * scale)
    else:
        X, y, K, s, scale, prob = _distributed(comm, local, alpha, tol, max_iter, solver,
                                               fit_intercept, n_classes)
        d, n = X.shape
        d_all, keep = d, None
        coef_init, intercept_init = comm.broadcast((coef_init, intercept_init))

    theta0 = np.zeros(K * d + (K if fit_intercept else 0))
    _, g0 = prob.fun_grad(theta0)
    g0_norm = float(np.abs(g0).max()) if g0.size else 0.0
    project = _projector(K, d, bool(fit_intercept))
    if coef_init is not None:
        coef_init = np.asarray(coef_init, dtype=np.float64)
        if coef_init.shape != (K, d_all):
            raise ValueError(f"coef_init has shape {coef_init.shape}, expected {(K, d_all)}")
        if keep is not None:
            coef_init = coef_init[:, keep]
        theta0[:K * d] = (coef_init if scale is None else coef_init / scale).T.ravel()
    if intercept_init is not None and fit_intercept:
        intercept_init = np.asarray(intercept_init, dtype=np.float64).ravel()
        if intercept_init.shape != (K,):
            raise ValueError(f"intercept_init has shape {intercept_init.shape}, "
                             f"expected ({K},)")
        theta0[K * d:] = intercept_init
    elif fit_intercept and coef_init is None and g0_norm > 0.0:
        # the intercepts' optimum with W = 0: the log class frequencies (up to a constant)
        freq = np.bincount(y, weights=s, minlength=K)[:K] if len(y) else np.zeros(K)
        if comm is not None:
            freq = comm.allreduce(freq)
        theta0[K * d:] = np.log(np.maximum(freq / freq.sum(), 1e-8))
    theta0 = project(theta0)  # the representative without the invisible directions
    target = tol * g0_norm
    if g0_norm == 0.0:  # all classes equally likely everywhere: 0 is the optimum
        res = theta0, 0
        message = "the gradient at zero is zero"
    elif solver == "newton":
        theta, nit, message = _newton_cg(prob, theta0, target, max_iter, project)
        res = theta, nit
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            out = scipy.optimize.minimize(
                prob.fun_grad, theta0, jac=True, method="L-BFGS-B",
                options={"gtol": target, "ftol": 0.0, "maxiter": max_iter,
                         "maxcor": 20, "maxls": 40})
        res = project(out.x.copy()), int(out.nit)
        message = str(out.message)
    theta, nit = res
    f, g = prob.fun_grad(theta)
    ratio = float(np.abs(g).max()) / g0_norm if g0_norm else 0.0
    converged = ratio <= tol * (1 + 1e-9)
    W, b = prob.split(theta)
    W = W if scale is None else W * scale
    if keep is not None:  # the features without a stored value: 0 (their optimum)
        full = np.zeros((K, d_all))
        full[:, keep] = W
        W = full
    result = MultinomialResult(
        coef=np.ascontiguousarray(W),
        intercept=np.zeros(K) if b is None else np.array(b),
        n_iter=max(int(nit), 1), objective=f, grad_ratio=ratio, converged=converged,
        time=time.perf_counter() - t0, solver=solver, alpha=alpha,
        info={"message": message, "hessp": prob.n_hessp, "n_classes": K,
              "collectives": 0 if prob.red is None else prob.red.calls,
              "n_ranks": 1 if comm is None else comm.size})
    if not converged and (comm is None or comm.rank == 0):
        warnings.warn(
            f"fit_multinomial(solver={solver!r}) stopped after {result.n_iter} iterations "
            f"({message}) with relative gradient {ratio:.3e} > tol={tol:g}; raise max_iter",
            convergence_warning(), stacklevel=2)
    if verbose:
        logger.info("%r", result)
    return result


def _distributed(comm, local, alpha, tol, max_iter, solver, fit_intercept, n_classes):
    """The validated shard, the global class count, weights' sum and scales, and the
    objective over every rank (:func:`fit_multinomial` with ``comm``)."""

    caller = "fit_multinomial(comm=)"
    X, y, K, s = check_on_every_rank(comm, local, caller)
    d, n = X.shape
    _agree(comm, [d, alpha, tol, max_iter, MULTINOMIAL_SOLVERS.index(solver),
                  bool(fit_intercept), -1 if n_classes is None else n_classes],
           ["n_features", "alpha", "tol", "max_iter", "solver", "fit_intercept", "n_classes"],
           caller)
    dense = not sp.issparse(X)
    tot = comm.allreduce(np.array([n, s.sum(), dense], dtype=np.float64))
    top = comm.allreduce(np.array([-1.0 if n == 0 else float(y.max())]), op="max")
    if tot[0] == 0:
        raise ValueError(f"{caller}: no rank holds an example")
    if not tot[1] > 0:
        raise ValueError("sample_weight sums to zero over every rank: at least one sample "
                         "needs a positive weight")
    K = int(top[0]) + 1 if n_classes is None else int(n_classes)
    if K < 2:
        raise ValueError(f"n_classes must be at least 2, got {K} (over every rank)")
    if n and y.max() >= K:
        raise ValueError(f"y must hold class indices in [0, {K}), got {y.max()}")
    big = comm.allreduce(_feature_max(X), op="max")
    X, scale = _rescaled(X, big)
    if tot[2]:  # dense data on some rank: every rank reduces densely
        red = _Sum(comm, d, K)
    else:
        occ, union = feature_union(comm, X)
        red = _Sum(comm, d, K, np.flatnonzero(occ), union)
    prob = _Softmax(X, y, K, s, alpha, bool(fit_intercept),
                    None if scale is None else scale * scale, s_total=float(tot[1]), red=red)
    return X, y, K, s, scale, prob
