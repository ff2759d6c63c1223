"""Vowpal Wabbit's AllReduce learner (Agarwal, Chapelle, Dudik, Langford 2014): one online pass
per rank, a per-feature weighted average of the ranks' models, then L-BFGS on the global
objective with the loss and gradient all-reduced every iteration.

The objective is :func:`fit_glm`'s: ``P(w, b) = mean_i loss(y_i, x_i . w + b) +
alpha / 2 ||w||^2`` over every rank's examples (``b`` unregularised).

1. **Online pass** (``online_passes``): each rank runs Vowpal Wabbit's online ADAGrad over its
   own examples (:class:`~roofline.learners.ADAGrad` with ``online=True``: per-example adaptive
   steps), from zero.
2. **Averaging**: feature ``j``'s weight is the average of the ranks' weights, each weighted by
   the rank's squared-gradient sum for ``j`` (a rank that saw feature ``j`` often counts more;
   one that never saw it does not count), as VW's ``--span_server`` averaging does.
3. **L-BFGS** (two-loop recursion, 10 pairs, backtracking line search; warm-started from the
   average): every evaluation
   sums the ranks' loss and gradient with one dense all-reduce, so every rank runs the same
   iterations on bit-identical numbers and ends with the same model.

Warm-starting from the online average is the paper's point: L-BFGS then needs fewer of its
(expensive, one all-reduce each) iterations than from zero.
"""

from __future__ import annotations

import logging
import time
import warnings
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning

from roofline import glm
from roofline.datasources import MatSource

__all__ = ["VWHybridResult", "fit_vw_hybrid"]

logger = logging.getLogger(__name__)

#: The smooth losses Vowpal Wabbit has (the loss table's), in code order.
_LOSSES = glm.losses_where(smooth=True, peer="vw")


@dataclass(repr=False)
class VWHybridResult:
    """What :func:`fit_vw_hybrid` returns (the same on every rank).

    Parameters
    ----------
    coef : ndarray, shape (n_features,)
        The coefficients.
    intercept : float
        The intercept (0 without ``fit_intercept``).
    n_iter : int
        L-BFGS iterations.
    n_evals : int
        Objective and gradient evaluations (one all-reduce each).
    objective : ndarray
        The objective after each L-BFGS iteration (the warm start first).
    grad_norm : float
        The final gradient's max-norm.
    converged : bool
        ``gap <= tol * |objective|`` was reached.
    time : float
        Seconds of the whole fit.
    online_time : float
        Seconds of the online pass and the averaging.
    start_objective : float
        The objective at the averaged online model (at zero with ``online_passes=0``).
    gap : float
        The final duality gap (:func:`roofline.glm.primal_certificate`): ``objective[-1]``
        is at most ``gap`` above the optimum.
    """

    coef: np.ndarray
    intercept: float
    n_iter: int
    n_evals: int
    objective: np.ndarray
    grad_norm: float
    converged: bool
    time: float
    online_time: float
    start_objective: float
    gap: float = float("nan")

    def __repr__(self):
        return (f"VWHybridResult(n_iter={self.n_iter}, objective={self.objective[-1]:.6g}, "
                f"converged={self.converged}, time={self.time:.3g}s)")


def _online(X, y, loss, alpha, fit_intercept, passes, lr, batch_size):
    """One rank's online ADAGrad passes: ``(coef, intercept, sumsq, sumsq0)``."""
    from roofline.learners import GLM, ADAGrad, L2Regularizer, Learner

    d, n = X.shape
    if n == 0 or passes == 0:
        return np.zeros(d), 0.0, np.zeros(d), 0.0
    target = glm.glm_labels(y, loss)
    model = GLM(loss=loss, fit_intercept=fit_intercept, dtype="float64")
    opt = ADAGrad(lr=lr, online=True)
    src = MatSource(sp.csc_matrix(X, dtype=np.float64), target, batch_size=batch_size)
    learner = Learner(src, model, opt, mixins=[L2Regularizer(alpha)], n_passes=passes,
                      progress=False)
    learner.train()
    coef = np.asarray(model.coef, dtype=np.float64).ravel()
    b = float(np.asarray(model.intercept).ravel()[0]) if fit_intercept else 0.0
    sumsq = np.asarray(opt.sumsq, dtype=np.float64).ravel() - opt.opts.initsumsq
    sumsq0 = float(np.asarray(opt.sumsq0).ravel()[0]) - opt.opts.initsumsq
    return coef, b, np.maximum(sumsq, 0.0), max(sumsq0, 0.0)


def _loss_grad(X, y, w, b, loss):
    """Sum of the losses of this rank's examples, their gradient in ``w`` and in ``b`` (the
    loss table's margin form, ``glm.newton.loss_derivs``)."""
    eta = np.ascontiguousarray(X.T @ w + b, dtype=np.float64)
    code = glm.loss_code(loss)
    total, g0, h0, dl, _ = glm.newton.loss_derivs(eta, y, code)
    # the certificate's sums (glm.primal_certificate): the conjugate at the dual candidate
    # -l'(z) and the intercept's curvature
    conj = glm.newton.conj_sum(-dl, y, code)
    return total, X @ dl, g0, conj, h0


def _hess_diag(X, y, x, loss, fit_intercept, comm, n, alpha):
    """The diagonal of the objective's Hessian at ``x`` (all-reduced): ``mean_i c_i x_ij^2 +
    alpha`` with ``c_i`` the loss's curvature, and the intercept's ``mean_i c_i``."""
    d = X.shape[0]
    eta = np.ascontiguousarray(X.T @ x[:d] + (x[d] if fit_intercept else 0.0), dtype=np.float64)
    c = glm.newton.loss_derivs(eta, y, glm.loss_code(loss))[4]
    sq = X.multiply(X) if sp.issparse(X) else X * X
    local = np.concatenate([np.asarray(sq @ c).ravel(), [c.sum()]])
    tot = comm.allreduce(local) / n
    tot[:d] += alpha
    tot[d] = max(tot[d], 1e-12) if fit_intercept else 1.0
    return tot


def _two_loop(g, S, Y, RHO, Dinv):
    """L-BFGS's two-loop recursion: the inverse-Hessian estimate times ``g``, from the initial
    matrix ``diag(Dinv)`` scaled by the newest pair (a diagonally preconditioned L-BFGS)."""
    q = g.copy()
    alphas = []
    for s_k, y_k, rho in zip(reversed(S), reversed(Y), reversed(RHO), strict=True):
        a = rho * float(s_k @ q)
        q -= a * y_k
        alphas.append(a)
    if S:
        q *= Dinv * (float(S[-1] @ Y[-1]) / float(Y[-1] @ (Dinv * Y[-1])))
    else:
        q *= Dinv
    for (s_k, y_k, rho), a in zip(zip(S, Y, RHO, strict=True), reversed(alphas), strict=True):
        q += (a - rho * float(y_k @ q)) * s_k
    return q


def fit_vw_hybrid(X, y, *, loss="logistic", alpha, comm=None, fit_intercept=True,
                  online_passes=1, learning_rate=0.5, batch_size=1024, max_iter=200,
                  tol=1e-6, verbose=0):
    """Fit a GLM with Vowpal Wabbit's hybrid learner: online pass, average, then L-BFGS.

    Parameters
    ----------
    X : CSC matrix or ndarray, shape (n_features, n_examples)
        This rank's examples as columns (the project layout).
    y : array, shape (n_examples,)
        Targets (``squared``) or binary labels in {-1, 1} or {0, 1} (``logistic``).
    loss : {"logistic", "squared"}
    alpha : float
        L2 strength of the mean-loss objective (``alpha_from_peer`` converts scikit-learn's
        ``C`` and VW's ``--l2``).
    comm : roofline.comm.Communicator, optional
        The ranks of the job (each holding its own examples); ``None``: this process alone.
    fit_intercept : bool
        An unregularised intercept.
    online_passes : int
        Online ADAGrad passes before L-BFGS (``0``: L-BFGS from zero).
    learning_rate : float
        The online pass's per-example ADAGrad step.
    batch_size : int
        Examples per minibatch of the online pass (the unit of data delivery only).
    max_iter : int
        L-BFGS iterations; reaching it without meeting ``tol`` warns
        (:class:`~sklearn.exceptions.ConvergenceWarning`).
    tol : float
        Stop when the relative duality gap ``gap / |P|`` is at most ``tol``: the certificate
        every :func:`roofline.glm.fit_glm` solver stops on (:func:`roofline.glm.
        primal_certificate`, computed from the sums of each gradient evaluation at no extra
        pass), which bounds the relative suboptimality.
    verbose : int
        ``>= 1``: log every L-BFGS iteration at INFO.

    Returns
    -------
    VWHybridResult

    Raises
    ------
    ValueError
        Bad shapes, labels, ``alpha <= 0`` or options, naming the argument; also when the
        ranks disagree on the number of features.
    """
    t0 = time.perf_counter()
    loss = glm.resolve_loss(loss, allowed=_LOSSES)
    alpha = glm.check_positive(alpha, "alpha")
    max_iter = glm.check_positive(max_iter, "max_iter", integer=True)
    batch_size = glm.check_positive(batch_size, "batch_size", integer=True)
    learning_rate = glm.check_positive(learning_rate, "learning_rate")
    tol = glm.check_positive(tol, "tol")
    if (isinstance(online_passes, bool) or not isinstance(online_passes, (int, np.integer))
            or online_passes < 0):
        raise ValueError(f"online_passes must be an int >= 0, got {online_passes!r}")
    # the checks of the CD and Newton solvers: a CSC (or dense) shard, margin labels
    X = glm.check_X(X, allow_no_examples=True)
    y = glm.check_labels(y, loss, margin=True, single_class_ok=True)
    d, n_local = X.shape
    if y.shape[0] != n_local:
        raise ValueError(f"y has {y.shape[0]} entries but X has {n_local} examples (columns); "
                         "X must be (n_features, n_examples)")
    if comm is None:
        from roofline.comm import from_environment

        comm = from_environment()  # alone: a group of one
    dims = comm.allgather(d)
    if len(set(dims)) != 1:
        raise ValueError(f"the ranks' X have different numbers of features: {dims}")
    n = int(comm.allreduce(np.array([n_local], dtype=np.int64))[0])
    if n == 0:
        raise ValueError("no examples on any rank")

    # 1-2. online pass on every rank, then the per-feature weighted average
    coef, b, G, G0 = _online(X, y, loss, alpha, fit_intercept, online_passes, learning_rate,
                             batch_size)
    tot = comm.allreduce(np.concatenate([G * coef, [G0 * b], G, [G0]]))
    num, den = tot[:d + 1], tot[d + 1:]
    w0 = np.divide(num, den, out=np.zeros(d + 1), where=den > 0)
    online_time = time.perf_counter() - t0

    # 3. L-BFGS on the all-reduced objective
    evals = [0]

    def fun(x):
        w, bb = x[:d], (x[d] if fit_intercept else 0.0)
        total, g, g0, conj, h0 = _loss_grad(X, y, w, bb, loss)
        s = comm.allreduce(np.concatenate([[total], g, [g0, conj, h0]]))
        evals[0] += 1
        f = s[0] / n + 0.5 * alpha * float(w @ w)
        grad = np.empty(d + 1)
        grad[:d] = s[1:d + 1] / n + alpha * w
        grad[d] = s[d + 1] / n if fit_intercept else 0.0
        Xdl = s[1:d + 1]
        _, gap = glm.primal_certificate(s[0], s[d + 2], s[d + 1], s[d + 3], float(Xdl @ Xdl),
                                        w, bb, n=n, alpha=alpha, fit_intercept=fit_intercept)
        return f, grad, gap

    def certified(f, gap):
        return gap <= tol * max(abs(f), 1e-300)

    x0 = w0 if fit_intercept else np.r_[w0[:d], 0.0]
    f, g, gap = fun(x0)
    start = f
    Dinv = 1.0 / _hess_diag(X, y, x0, loss, fit_intercept, comm, n, alpha)
    x, history, it, converged, why = x0, [f], 0, False, "max_iter"
    S, Y, RHO = [], [], []
    for it in range(1, max_iter + 1):
        if certified(f, gap):
            converged, why, it = True, "gap", it - 1
            break
        p_dir = -_two_loop(g, S, Y, RHO, Dinv)
        slope = float(g @ p_dir)
        if slope >= 0:  # not a descent direction (numerical trouble): restart from -g
            S, Y, RHO = [], [], []
            p_dir, slope = -g, -float(g @ g)
        step = 1.0
        for _ in range(60):  # backtracking (Armijo); the unit step is almost always taken
            x_new = x + step * p_dir
            f_new, g_new, gap_new = fun(x_new)
            if f_new <= f + 1e-4 * step * slope:
                break
            step *= 0.5
        else:
            why = "line search failed"
            break
        s_k, y_k = x_new - x, g_new - g
        sy = float(s_k @ y_k)
        if sy > 1e-12 * np.sqrt(float(s_k @ s_k) * float(y_k @ y_k)):  # keep curvature pairs
            S.append(s_k)
            Y.append(y_k)
            RHO.append(1.0 / sy)
            if len(S) > 10:
                S.pop(0), Y.pop(0), RHO.pop(0)
        decrease = f - f_new
        x, f, g, gap = x_new, f_new, g_new, gap_new
        history.append(f)
        if verbose:
            logger.info("vw-hybrid L-BFGS iteration %d: objective %.10g, relative gap %.3g",
                        it, f, gap / max(abs(f), 1e-300))
        if certified(f, gap):
            converged, why = True, "gap"
            break
        if decrease <= 1e-15 * max(abs(f), 1e-300):  # no progress left in float64
            why = "stalled at the rounding floor"
            break
    w, bb = x[:d].copy(), (float(x[d]) if fit_intercept else 0.0)
    gnorm = float(np.abs(g).max())
    if not converged:
        warnings.warn(f"vw-hybrid: L-BFGS stopped after {it} iterations without meeting "
                      f"tol={tol:g} ({why}); raise max_iter or loosen tol",
                      ConvergenceWarning, stacklevel=2)
    res_nit = it
    return VWHybridResult(coef=w, intercept=bb, n_iter=int(res_nit), n_evals=evals[0],
                          objective=np.asarray(history, dtype=np.float64), grad_norm=gnorm,
                          converged=converged, time=time.perf_counter() - t0,
                          online_time=online_time, start_objective=float(start),
                          gap=float(gap))

