"""Trust-region Newton-CG (liblinear's TRON) for smooth L2-regularised GLMs, in the primal.

Minimises the objective of :mod:`._cd_problem` (written there once)::

    P(w, b) = (1/n) sum_i loss(x_i^T w + b, y_i) + alpha ||w||^2 / 2

for ``loss`` in ``squared``, ``logistic`` and ``squared_hinge`` (``max(0, 1 - y z)^2``,
liblinear's L2-loss SVM), with the intercept ``b`` unregularised (its own coordinate, as in
scikit-learn).  Each outer iteration solves the Newton system ``H s = -g`` by preconditioned
conjugate gradients inside a trust region (Lin, Weng and Keerthi 2008; Hsia, Chiang and Lin
2018's diagonal preconditioner ``M = 0.99 I + 0.01 diag(H)``, in liblinear's scaling where the
regulariser's Hessian is ``I``).  A Hessian-vector product is one fused pass over the examples
(:func:`roofline.glm.newton.hess_vec`: ``x_i^T s`` then the scatter of ``D_i t_i x_i`` while
the column is in cache); the gradient is one more pass, the objective at a trial point one
matvec.

Stopping is the same certificate as the coordinate-descent solvers': the duality gap of the
primal iterate's dual point ``a = -loss'(z)``, :meth:`GLMProblem.certificate` (with the
intercept's second-order term), computed from the gradient's own pass at no extra cost; the
solver stops when ``gap <= tol * |P|``.

Distributed (:func:`fit_newton_comm`, ``fit_newton(comm=)``): every rank holds its own
examples and runs the same loop; the loss at a trial point with its gradient (and the
Hessian's diagonal and the certificate's sums, one reduce) and every Hessian-vector product
are local sums added across the ranks (one Kylix plan over the union of the ranks' features
for sparse data, the dense all-reduce for dense data), so the iterates are the single-process
ones up to the order of summation and the iteration count does not grow with the number of
ranks.

Why it exists: dual coordinate descent needs many sweeps when the regularisation is weak
relative to the data's scale and conditioning (dense correlated or badly scaled features, an
intercept, rare positives); Newton-CG's iteration count depends on the conditioning only
through the CG steps, and ~10-30 outer iterations reach 1e-6.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import scipy.sparse as sp

from roofline.comm import Communicator
from roofline.kernels import limit_blas_threads

from . import _losses
from . import newton as gnewton
from ._problem import (
    GLMProblem,
    GLMResult,
    Trace,
    check_on_every_rank,
    check_sample_weight,
    check_X,
    comm_weights,
    mean_one_weights,
    positive,
    progress_bar,
    verbose_logging,
    warn_not_converged,
)

__all__ = [
    "NEWTON_LOSSES",
    "duality_gap",
    "fit_newton",
    "fit_newton_comm",
    "newton_primal",
]

logger = logging.getLogger(__name__)

#: The losses ``solver="newton"`` solves (smooth, with a generalised second derivative).
NEWTON_LOSSES = gnewton.SMOOTH_LOSSES

# liblinear's TRON constants (tron.cpp)
_ETA0, _ETA1, _ETA2 = 1e-4, 0.25, 0.75
_SIGMA1, _SIGMA2, _SIGMA3 = 0.25, 0.5, 4.0
_PCG_ALPHA = 0.01  # M = (1 - a) I + a diag(H), liblinear's scaling
#: Data at least this dense (stored values over ``d n``) run on a dense float64 copy in
#: Fortran order (each example a contiguous column), on the fused one-pass kernels of
#: :mod:`roofline.glm.newton` (``dense_eval``: a point's margins, loss, gradient, Hessian
#: diagonal and certificate; ``dense_hess_vec``) ...
DENSE_MIN_DENSITY = 0.3
#: ... when it holds at most this many values (256 MiB).  Dense input is used as it is when in
#: Fortran order (or as a float64 copy if another dtype), copied to Fortran order up to this
#: size, and above it run in C order on BLAS matrix-vector products.
DENSE_MAX_VALUES = 1 << 25


class _Smooth:
    """The objective in liblinear's scaling ``f = P * n / lam_n = ||w||^2/2 + C sum loss``
    (``C = 1 / lam_n``) over the stacked variables ``x = [w; b]``."""

    def __init__(self, pb: GLMProblem, n_threads=None, sw=None):
        self.pb = pb
        self.sw = sw  # example weights of mean 1, or None
        self.X = pb.X
        self.d = pb.d
        self.Xd = None  # the dense path: float64 (d, n)
        d, n = pb.X.shape
        if not sp.issparse(pb.X):
            small = d * n <= DENSE_MAX_VALUES
            self.Xd = (np.asfortranarray(pb.X, dtype=np.float64) if small
                       else np.asarray(pb.X, dtype=np.float64))
        elif pb.X.nnz >= DENSE_MIN_DENSITY * d * n and d * n <= DENSE_MAX_VALUES:
            self.Xd = pb.X.T.toarray().astype(np.float64, copy=False).T  # Fortran order
        # dense examples as contiguous columns: the fused one-pass kernels (gmat.newton.dense_*)
        self.fused = self.Xd is not None and self.Xd.flags.f_contiguous
        self.k = gnewton.dense_threads(self.Xd, n_threads) if self.fused else 1
        self.fi = bool(pb.fit_intercept)
        self.C = 1.0 / pb.lam_n
        self.z = np.empty(pb.n_local)
        self.dl = np.empty(pb.n_local)
        self.D = np.empty(pb.n_local)
        # a trial point's derivatives, kept apart until it is accepted (the fused dense pass
        # and the distributed evaluation compute them with the loss)
        self._dl_t = np.empty(pb.n_local)
        self._D_t = np.empty(pb.n_local)
        self._pending = self._hd = None
        self._trial = None  # distributed: the reduced sums at the last trial point
        self.n_fun = 0  # objective evaluations (start and trial points)
        self.work = None if self.Xd is not None else gnewton.hess_vec_workspace(self.X,
                                                                                 n_threads)
        self._hv = np.empty(self.d)
        self.L = self.g_b = self.h_b = 0.0
        #: distributed (:func:`fit_newton` with ``comm``): the :class:`_Reducer` that sums the
        #: local sums over the ranks, and the positions of this rank's features in the
        #: variables ``x`` (the union of every rank's features; ``None``: the same features)
        self.red = None
        self.pos = None
        self._hdiag = None  # the reduced Hessian diagonal of the last gradient (distributed)

    def split(self, x):
        return x[: self.dx], (float(x[self.dx]) if self.fi else 0.0)

    @property
    def dx(self):
        """The number of coefficients in ``x`` (``d``, or the union's size when
        distributed)."""
        return self.d if self.red is None else self.red.n_union

    def _local(self, w):
        """``w`` (over the variables' features) at this rank's features."""
        return w if self.pos is None else w[self.pos]

    def fun(self, x, z):
        """``f(x)`` with the margins written into ``z``; also keeps the loss sum.

        Distributed, the gradient's sums at ``x`` are reduced with the loss in the same
        collective (:meth:`_fun_grad`): :meth:`grad` at an accepted trial point then sends
        nothing."""
        w, b = self.split(x)
        self.n_fun += 1
        if self.red is not None:
            L = self._fun_grad(w, b, z)
        else:
            L = self._loss(self._local(w), b, z)
        return 0.5 * float(w @ w) + self.C * L, L

    def _fun_grad(self, w, b, z):
        """Distributed: this rank's loss, ``X S l'``, Hessian diagonal and certificate sums at
        ``(w, b)`` (margins into ``z``, derivatives into the trial buffers), summed over the
        ranks in one reduce and kept for :meth:`grad`; returns the summed loss."""
        pb = self.pb
        wl = self._local(w)
        if pb.n_local == 0:
            Xdl, h, sums = np.zeros(self.d), np.zeros(self.d), (0.0, 0.0, 0.0, 0.0, 0.0)
        elif self.fused:
            Xdl, h, s4, _, _, _ = gnewton.dense_eval(self.Xd, wl, b, pb.y, pb.loss, self.sw,
                                                     z=z, dl=self._dl_t, D=self._D_t,
                                                     n_chunks=self.k)
            sums = (*(float(v) for v in s4), float(s4[2]))
        else:
            if self.Xd is not None:
                np.dot(self.Xd.T, wl, out=z)
                z += b
            else:
                pb.margins(wl, b, z)
            L, g_b, h_b, dl, D = gnewton.loss_derivs(z, pb.y, pb.loss, self._dl_t, self._D_t,
                                                     self.sw)
            dlw = dl if self.sw is None else dl * self.sw
            Xdl = self.Xd @ dlw if self.Xd is not None else pb.xdot(dlw)
            conj = gnewton.conj_sum(-dl, pb.y, pb.loss, self.sw)
            h, hb = self._diag_of(D)
            sums = (L, g_b, h_b, conj, hb)
        Xdl, h, sums = self.red.grad(Xdl, h, sums)
        self._trial = (z, Xdl, h, sums)
        return sums[0]

    def _loss(self, w, b, z):
        """This rank's loss sum at ``(w, b)`` (its own features), margins into ``z``."""
        if self.pb.n_local == 0:
            return 0.0
        if self.fused:  # the whole evaluation, kept for grad() if x is accepted
            g, hd, sums, _, _, _ = gnewton.dense_eval(self.Xd, w, b, self.pb.y, self.pb.loss,
                                                      self.sw, z=z, dl=self._dl_t,
                                                      D=self._D_t, n_chunks=self.k)
            self._pending = (z, g, hd, sums)
            return float(sums[0])
        if self.Xd is not None:
            np.dot(self.Xd.T, w, out=z)
            z += b
        else:
            self.pb.margins(w, b, z)
        return gnewton.loss_sum(z, self.pb.y, self.pb.loss, self.sw)

    def grad(self, x, z):
        """The gradient at ``x`` (margins ``z``), the derivatives kept for the Hessian, and
        the duality-gap certificate ``(P, gap)`` of :class:`GLMProblem`."""
        pb = self.pb
        w, b = self.split(x)
        if self.red is not None:  # the sums reduced with the loss at x (fun)
            if self._trial is None or self._trial[0] is not z:
                self._fun_grad(w, b, z)
            _, Xdl, h, (L, g_b, h_b, conj, hb) = self._trial
            self._trial = None
            self._hdiag = (h, hb)
            self.dl, self._dl_t = self._dl_t, self.dl  # the trial's derivatives accepted
            self.D, self._D_t = self._D_t, self.D
        else:
            Xdl, (L, g_b, h_b, conj) = self._grad_sums(self._local(w), b, z)
        g = np.empty_like(x)
        g[: self.dx] = w + self.C * Xdl
        if self.fi:
            g[self.dx] = self.C * g_b
        # the certificate: a = -l'(z), u = X S a (S the weights)
        parts = np.array([L, conj, -g_b, g_b, h_b])
        P, gap = pb.certificate(parts, pb.reg(w), float(Xdl @ Xdl), b)
        self.L, self.g_b, self.h_b = L, g_b, h_b
        return g, P, gap

    def _grad_sums(self, w, b, z):
        """This rank's ``X S l'(z)`` and ``(L, g_b, h_b, conj)`` sums; keeps ``l'``, ``D``."""
        pb = self.pb
        if pb.n_local == 0:
            return np.zeros(self.d), (0.0, 0.0, 0.0, 0.0)
        if self.fused:
            if self._pending is None or self._pending[0] is not z:
                self._loss(w, b, z)
            _, Xdl, self._hd, sums = self._pending
            self._pending = None
            self.dl, self._dl_t = self._dl_t, self.dl
            self.D, self._D_t = self._D_t, self.D
            return Xdl, tuple(float(v) for v in sums)
        L, g_b, h_b, dl, D = gnewton.loss_derivs(z, pb.y, pb.loss, self.dl, self.D, self.sw)
        dlw = dl if self.sw is None else dl * self.sw
        Xdl = self.Xd @ dlw if self.Xd is not None else pb.xdot(dlw)  # X S l'(z) = -X S a
        conj = gnewton.conj_sum(-dl, pb.y, pb.loss, self.sw)
        return Xdl, (L, g_b, h_b, conj)

    def _diag_of(self, D):
        """This rank's diagonal of ``X D X^T`` and ``sum D``."""
        if self.Xd is not None:
            return np.einsum("ij,ij,j->i", self.Xd, self.Xd, D), float(D.sum())
        return gnewton.hess_diag(self.X, D, np.empty(self.d))

    def diag(self):
        """The preconditioner ``M = (1 - a) + a diag(H)``."""
        M = np.empty(self.dx + self.fi)
        if self.red is not None:
            h, hb = self._hdiag
        elif self.fused:
            h, hb = self._hd, self.h_b
        elif self.Xd is not None:
            h = np.einsum("ij,ij,j->i", self.Xd, self.Xd, self.D)
            hb = float(self.D.sum())
        else:
            h, hb = gnewton.hess_diag(self.X, self.D, M[: self.d])
        M[: self.dx] = (1.0 - _PCG_ALPHA) + _PCG_ALPHA * (1.0 + self.C * h)
        if self.fi:
            M[self.dx] = (1.0 - _PCG_ALPHA) + _PCG_ALPHA * self.C * hb
        return M

    def hv(self, s):
        """``H s``."""
        sw, sb = self.split(s)
        out = np.empty_like(s)
        hw, hb = self._hv_sums(self._local(sw), sb)
        if self.red is not None:
            hw, hb = self.red.hv(hw, hb)
        out[: self.dx] = sw + self.C * hw
        if self.fi:
            out[self.dx] = self.C * hb
        return out

    def _hv_sums(self, sw, sb):
        """This rank's ``X D (X^T s + s_b)`` and ``sum D (X^T s + s_b)``."""
        if self.pb.n_local == 0:
            return np.zeros(self.d), 0.0
        if self.fused:
            return gnewton.dense_hess_vec(self.Xd, self.D, sw, sb, self._hv, n_chunks=self.k)
        if self.Xd is not None:  # two BLAS matrix-vector products
            t = self.Xd.T @ sw
            t += sb
            t *= self.D
            return self.Xd @ t, float(t.sum())
        return gnewton.hess_vec(self.X, self.D, sw, sb, self._hv, work=self.work)


def _trpcg(f: _Smooth, delta, g, M, eps_cg):
    """Preconditioned CG on ``H s = -g`` inside ``||s||_M <= delta`` (liblinear's trpcg).

    Returns ``s, r`` (the residual ``-g - H s``), the CG steps and whether the boundary was
    reached."""
    n = g.shape[0]
    s = np.zeros(n)
    r = -g
    z = r / M
    d = z.copy()
    zTr = float(z @ r)
    gMinv_norm = np.sqrt(zTr)
    cgtol = min(eps_cg, np.sqrt(gMinv_norm))
    cg_iter = 0
    max_cg = max(n, 5)
    while cg_iter < max_cg:
        if np.sqrt(max(zTr, 0.0)) <= cgtol * gMinv_norm:
            break
        cg_iter += 1
        Hd = f.hv(d)
        dHd = float(d @ Hd)
        if not dHd > 0:
            break
        alpha = zTr / dHd
        s += alpha * d
        sMs = float(s @ (M * s))
        if np.sqrt(sMs) > delta:
            s -= alpha * d
            sTMd = float(s @ (M * d))
            sTMs = float(s @ (M * s))
            dTMd = float(d @ (M * d))
            dsq = delta * delta
            rad = np.sqrt(max(sTMd * sTMd + dTMd * (dsq - sTMs), 0.0))
            alpha = (dsq - sTMs) / (sTMd + rad) if sTMd >= 0 else (rad - sTMd) / dTMd
            s += alpha * d
            r -= alpha * Hd
            return s, r, cg_iter, True
        r -= alpha * Hd
        z = r / M
        znew = float(z @ r)
        d = z + (znew / zTr) * d
        zTr = znew
    return s, r, cg_iter, False


def _tron(f, x, trace, *, max_iter, verbose, callback, point, eps_cg, gtol, on_iter=None):
    """TRON's outer loop from ``x`` over the objective ``f`` (:class:`_Smooth`): every rank
    of a distributed run takes the same steps (its reduced sums are bit-identical).

    Returns ``x, n_iter, converged, status, stalled, cg_total``; ``on_iter(it, cg_steps)``
    is called after each accepted step, before its check."""
    trace.start()
    fval, _ = f.fun(x, f.z)
    g, P, gap = f.grad(x, f.z)
    trace.stop()
    it = 0
    cg_total = 0

    def check(it, P, gap, x, g):
        # the callback sees every step (not the start), as in the CD solvers
        status = trace.end_check(it, P, gap, time.perf_counter(), callback if it else None,
                                 lambda: point(x))
        if gtol is None or status == "stopped":
            return status
        return "converged" if f.pb.alpha * float(np.abs(g).max()) <= gtol else None

    status = check(0, P, gap, x, g)
    conv = status == "converged"
    stalled = False
    bar = progress_bar(max_iter, verbose, "newton")
    if status is None:
        trace.start()
        M = f.diag()
        delta = np.sqrt(float(g @ (M * g)))
        z_new = np.empty_like(f.z)
        while it < max_iter:
            s, r, cg_it, boundary = _trpcg(f, delta, g, M, eps_cg)
            cg_total += cg_it
            x_new = x + s
            gs = float(g @ s)
            prered = -0.5 * (gs - float(s @ r))
            fnew, _ = f.fun(x_new, z_new)
            actred = fval - fnew
            sMnorm = np.sqrt(float(s @ (M * s)))
            if it == 0 and cg_total == cg_it:
                delta = min(delta, sMnorm)
            if fnew - fval - gs <= 0:
                alpha = _SIGMA3
            else:
                alpha = max(_SIGMA1, -0.5 * (gs / (fnew - fval - gs)))
            if actred < _ETA0 * prered:
                delta = min(alpha * sMnorm, _SIGMA2 * delta)
            elif actred < _ETA1 * prered:
                delta = max(_SIGMA1 * delta, min(alpha * sMnorm, _SIGMA2 * delta))
            elif actred < _ETA2 * prered:
                delta = max(_SIGMA1 * delta, min(alpha * sMnorm, _SIGMA3 * delta))
            elif boundary:
                delta = _SIGMA3 * delta
            else:
                delta = max(delta, min(alpha * sMnorm, _SIGMA3 * delta))
            if actred > _ETA0 * prered:
                it += 1
                x = x_new
                fval = fnew
                f.z, z_new = z_new, f.z
                g, P, gap = f.grad(x, f.z)
                trace.stop()
                bar.update(1)
                logger.debug("newton: iter %d  cg %d  delta %.3e", it, cg_it, delta)
                if on_iter is not None:
                    on_iter(it, cg_it)
                status = check(it, P, gap, x, g)
                if status is not None:
                    conv = status == "converged"
                    break
                trace.start()
                M = f.diag()
            if prered <= 0 or (abs(actred) <= 1e-12 * abs(fval)
                               and abs(prered) <= 1e-12 * abs(fval)) or delta <= 1e-300:
                stalled = True
                trace.stop()
                logger.info("newton: the trust region collapsed at iteration %d (relative gap "
                            "%.3e): the objective is at its rounding floor", it,
                            gap / max(abs(P), 1e-300))
                break
        else:
            trace.stop()
    bar.close()
    return x, it, conv, status, stalled, cg_total


def newton_primal(pb: GLMProblem, w, b, *, max_iter, trace, verbose=0, callback=None,
                  n_threads=None, eps_cg=0.1, sample_weight=None, gtol=None, **_ignored):
    """TRON on ``pb`` from ``(w, b)``; the calling convention of the CD solvers.

    Parameters
    ----------
    pb : GLMProblem
        With ``l1=False`` and a smooth loss code (0, 1 or 3); ``primal=False`` suffices (the
        feature-major copy is not used).
    w : ndarray of float64, shape (n_features,)
        The start (warm start: ``coef_init``, or a dual solver's primal point); not modified.
    b : float
        The intercept's start (ignored without ``pb.fit_intercept``).
    max_iter : int
        Newton (outer, accepted) iterations.
    trace : Trace
        Records the objective and gap at the start and after every accepted step.
    n_threads : int, optional
        Threads of the Hessian-vector products (default numba's).
    eps_cg : float
        The CG's relative tolerance (liblinear's 0.1).
    sample_weight : ndarray of float64, shape (n_examples,), optional
        Example weights of mean 1 (the objective's mean loss becomes ``sum_i s_i l_i / n``);
        ``None``: all 1.
    gtol : float, optional
        Converged when the max-norm of the gradient of ``P`` is at most ``gtol``, instead of
        the duality-gap test (the gap is still recorded).


    Returns
    -------
    w, b, None, n_iter, converged, info
        ``info``: ``cg_iter`` (total CG steps, i.e. Hessian-vector products), ``n_hv``,
        ``stopped_by_callback``, ``stalled`` (the trust region collapsed before ``tol``).
    """
    if pb.l1:
        raise ValueError("solver='newton' needs penalty='l2'")
    # features that occur in no example have their optimum at 0 (their gradient is w_j):
    # solve over the others only (hashed data: most of the 2^k buckets may be empty)
    full_d = pb.d
    occ = np.bincount(pb.X.indices, minlength=pb.d) > 0 if sp.issparse(pb.X) else None
    keep = None
    if occ is not None and not occ.all():
        keep = np.flatnonzero(occ)
        newid = np.cumsum(occ) - 1
        Xc = sp.csc_matrix((pb.X.data, newid[pb.X.indices].astype(pb.X.indices.dtype),
                            pb.X.indptr), shape=(keep.size, pb.n_local))
        pb = GLMProblem(Xc, pb.y, pb.loss, False, pb.alpha, pb.fit_intercept,
                        primal=False, serial=not pb._parallel)
        w = np.asarray(w)[keep]
    f = _Smooth(pb, n_threads, sample_weight)

    def point(x):
        """``(w, b)`` of ``x`` over all the features."""
        wx, bx = f.split(x)
        if keep is None:
            return wx, bx
        wfull = np.zeros(full_d)
        wfull[keep] = wx
        return wfull, bx

    x = np.zeros(pb.d + f.fi)
    x[: pb.d] = w
    if f.fi:
        x[pb.d] = b
    # the CG's vector algebra and the BLAS products on the calling thread(s) only: an OpenBLAS
    # pool of more threads than n_threads spins on cores other work holds (measured on the
    # loaded 2-core VM: 4.5 CPU s for a fit that takes 0.7 on one thread), as for the ranks
    # of fit_newton_comm
    with limit_blas_threads(n_threads):
        x, it, conv, status, stalled, cg_total = _tron(f, x, trace, max_iter=max_iter,
                                                       verbose=verbose, callback=callback,
                                                       point=point, eps_cg=eps_cg, gtol=gtol)
    wf, bf = point(x)
    info = {"n_active_features": pb.d, "cg_iter": cg_total, "n_hv": cg_total, "stalled": stalled,
            "stopped_by_callback": status == "stopped",
            "parallel_hv": f.work is not None}
    return np.array(wf, dtype=np.float64), bf, None, it, conv, info


def fit_newton(X, y, *, loss="logistic", alpha, fit_intercept=True, tol=1e-6, max_iter=200,
               coef_init=None, intercept_init=0.0, verbose=0, callback=None, n_jobs=1,
               sample_weight=None, gtol=None, comm=None):
    """Fit a smooth L2-regularised GLM by trust-region Newton-CG (TRON).

    Parameters
    ----------
    X : CSC matrix or ndarray, shape (n_features, n_examples)
        Examples as columns (the project layout).
    y : array, shape (n_examples,)
        Targets (``squared``) or binary labels in {-1, 1} or {0, 1}.
    loss : {"logistic", "squared", "squared_hinge"}
    alpha : float
        Regularisation strength of the mean-loss objective (:mod:`._cd_problem`).
    fit_intercept : bool
        An unregularised intercept.
    tol : float
        Stop when the duality gap is below ``tol * |P|`` (relative), as :func:`fit_glm`.
    max_iter : int
        Newton iterations; stopping there without meeting ``tol`` emits
        :class:`sklearn.exceptions.ConvergenceWarning`.
    coef_init : array, shape (n_features,), optional
    intercept_init : float
        Warm start.
    verbose : int
        ``>= 1``: log every iteration at INFO (stderr when logging is not configured).
    callback : callable, optional
        ``callback(iteration, coef, intercept)`` after every Newton step; ``True`` stops.
    n_jobs : int
        Threads of the matrix-vector and Hessian-vector products (``None``: numba's).  With
        ``1`` every pass runs on the calling thread.
    sample_weight : array, shape (n_examples,), optional
        Non-negative example weights with a positive sum.  The objective's mean loss becomes
        the weighted mean ``sum_i s_i l_i / sum_i s_i`` (scikit-learn's weights, in the
        mean-loss scaling: repeating an example ``k`` times and weighting it ``k`` give the
        same problem when ``alpha`` is scaled by ``n / sum(s)``, see
        :func:`roofline.glm.alpha_from_peer`).
    gtol : float, optional
        Stop when the max-norm of the objective's gradient (mean-loss scale, intercept
        included) is at most ``gtol``, instead of the duality-gap test: the sense of ``tol``
        of scikit-learn's and Roofline's L-BFGS, which the estimators use.  Near the optimum
        the gap is about ``||g||^2 / (2 alpha)``, so ``gtol = 1e-6`` asks for far more than
        ``tol = 1e-6``.
    comm : roofline.comm.Communicator, optional
        Run with this process as one rank of ``comm``, ``X``, ``y`` and ``sample_weight``
        being this rank's examples: :func:`fit_newton_comm` (``callback`` is not supported
        there).

    Returns
    -------
    GLMResult
        With ``solver="newton"``, ``info["cg_iter"]`` the CG steps.
    """
    if comm is not None:
        if callback is not None:
            raise ValueError("fit_newton(comm=) takes no callback")
        return fit_newton_comm(comm, X, y, loss=loss, alpha=alpha, fit_intercept=fit_intercept,
                               tol=tol, max_iter=max_iter, coef_init=coef_init,
                               intercept_init=intercept_init, verbose=verbose, n_jobs=n_jobs,
                               sample_weight=sample_weight, gtol=gtol)
    t0 = time.perf_counter()
    name = _losses.resolve_loss(loss, allowed=NEWTON_LOSSES)
    code = _losses.LOSS_CODES[name]
    alpha = positive(alpha, "alpha")
    tol = positive(tol, "tol")
    max_iter = positive(max_iter, "max_iter", integer=True)
    X = check_X(X, keep_dense=True)
    y = _losses.check_labels(y, name, margin=True)
    if y.shape[0] != X.shape[1]:
        raise ValueError(f"y has {y.shape[0]} entries but X has {X.shape[1]} examples "
                         "(columns); X must be (n_features, n_examples)")
    w0 = np.zeros(X.shape[0])
    if coef_init is not None:
        c = np.asarray(coef_init, dtype=np.float64).ravel()
        if c.shape[0] != X.shape[0] or not np.isfinite(c).all():
            raise ValueError(f"coef_init must be {X.shape[0]} finite numbers")
        w0[:] = c
    sw = mean_one_weights(sample_weight, X.shape[1])
    pb = GLMProblem(X, y, code, False, alpha, fit_intercept, primal=False,
                    serial=(n_jobs or 1) == 1)
    trace = Trace(tol, verbose)
    with verbose_logging(verbose):
        w, b, _, it, conv, info = newton_primal(pb, w0, float(intercept_init), max_iter=max_iter,
                                                trace=trace, verbose=verbose, callback=callback,
                                                n_threads=n_jobs, sample_weight=sw,
                                                gtol=None if gtol is None
                                                else positive(gtol, "gtol"))
    res = GLMResult(coef=w, intercept=float(b), n_iter=int(it), objective=np.asarray(trace.P),
                   gap_history=np.asarray(trace.G), times=np.asarray(trace.T),
                   gap=float(trace.G[-1]), converged=bool(conv), time=0.0,
                   check_time=trace.check, solver="newton", loss=name, penalty="l2",
                   alpha=alpha, dual=False, info=info)
    res.time = time.perf_counter() - t0
    floor_ok = gtol is not None and info["stalled"] and res.gap <= tol * abs(res.objective[-1])
    if not conv and not info["stopped_by_callback"] and not floor_ok:
        reason = "stalled at the rounding floor" if info["stalled"] else f"reached max_iter={it}"
        if gtol is not None:
            reason += f" (gradient test, gtol={gtol:g})"
        warn_not_converged("newton", tol, it, res.gap, float(res.objective[-1]), reason=reason)
    return res


# ---------------------------------------------------------------------------------------------
# distributed: every rank holds its own examples; the sums are reduced across the ranks

#: The scalars reduced after the features: the intercept's entry (``g_b``, ``sum D``, the
#: product's ``hb``), then the loss, ``h_b`` and the conjugate sums.
_N_TAIL = 4


class _Reducer:
    """Sums a rank's local sums over the ranks of ``comm``: the Kylix plan configured once
    (sparse data: this rank's features in, the union of every rank's features out, and the
    :data:`_N_TAIL` scalars after them), or the dense all-reduce (``local is None``: every rank
    has all ``d`` features).  Counts the collectives and the seconds spent in them."""

    def __init__(self, comm, d, local=None, union=None):
        self.comm = comm
        self.n_union = d if union is None else int(union.size)
        self.plan = None if local is None else union_plan(comm, d, local, union, _N_TAIL)
        self.seconds = 0.0
        self.calls = 0

    def _sum(self, v):
        t0 = time.perf_counter()
        out = self.comm.allreduce(v) if self.plan is None else self.plan.reduce(v)
        self.seconds += time.perf_counter() - t0
        self.calls += 1
        return out

    def grad(self, Xdl, h, sums):
        """``X S l'``, ``diag(X D X^T)`` and ``(L, g_b, h_b, conj, hb)`` summed: one reduce
        of two columns."""
        m, u = Xdl.shape[0], self.n_union
        L, g_b, h_b, conj, hb = sums
        v = np.zeros((m + _N_TAIL, 2))
        v[:m, 0], v[:m, 1] = Xdl, h
        v[m:, 0] = (g_b, L, h_b, conj)
        v[m, 1] = hb
        out = self._sum(v)
        t = out[u:]
        return (np.ascontiguousarray(out[:u, 0]), np.ascontiguousarray(out[:u, 1]),
                (float(t[1, 0]), float(t[0, 0]), float(t[2, 0]), float(t[3, 0]),
                 float(t[0, 1])))

    def hv(self, hw, hb):
        m, u = hw.shape[0], self.n_union
        v = np.zeros(m + _N_TAIL)
        v[:m] = hw
        v[m] = hb
        out = self._sum(v)
        return out[:u], float(out[u])


def feature_union(comm, X):
    """``(occ, union)``: the mask of the features occurring in this rank's examples (CSC
    ``X``) and the sorted union of every rank's (one ``max`` all-reduce)."""
    occ = np.bincount(X.indices, minlength=X.shape[0]) > 0
    return occ, np.flatnonzero(comm.allreduce(occ.astype(np.uint8), op="max"))


def union_plan(comm, d, local, union, n_tail):
    """The Kylix plan of a distributed solver's sums: this rank's ``local`` features in, the
    ``union`` of every rank's out, each followed by ``n_tail`` entries after feature ``d - 1``
    (the solver's scalars)."""
    tail = d + np.arange(n_tail, dtype=np.int64)
    return comm.sparse_plan(np.concatenate([local, tail]), want=np.concatenate([union, tail]))


def _checked_shard(X, y, loss, allow_no_examples):
    """This rank's ``X`` (CSC or dense) and ``y`` in the margin form, their sizes matching."""
    Xl = check_X(X, allow_no_examples=allow_no_examples, keep_dense=True)
    yl = _losses.check_labels(y, loss, margin=True, single_class_ok=True)
    if yl.shape[0] != Xl.shape[1]:
        raise ValueError(f"y has {yl.shape[0]} entries but X has {Xl.shape[1]} examples "
                         "(columns); X must be (n_features, n_examples)")
    return Xl, yl


def _agree(comm, values, what, caller="fit_newton(comm=)"):
    """Check that ``values`` (numbers) are the same on every rank: one ``max`` all-reduce."""
    v = np.asarray(values, dtype=np.float64)
    m = comm.allreduce(np.concatenate([v, -v]), op="max")
    k = v.size
    bad = [w for i, w in enumerate(what) if m[i] != -m[k + i]]
    if bad:
        raise ValueError(f"{caller}: {', '.join(bad)} differ between the ranks "
                         f"(rank {comm.rank} has "
                         + ", ".join(f"{w}={x:g}" for w, x in zip(what, v, strict=True)
                                     if w in bad) + ")")


def _local_checks(comm, fn):
    """Run this rank's input checks ``fn()``; every rank raises if one rank's failed (one
    all-reduce), so that no rank waits for a peer that gave up."""
    return check_on_every_rank(comm, fn, "fit_newton(comm=)")


def fit_newton_comm(comm, X, y, *, loss="logistic", alpha, fit_intercept=True, tol=1e-6,
                    max_iter=200, coef_init=None, intercept_init=0.0, verbose=0, n_jobs=1,
                    sample_weight=None, gtol=None, eps_cg=0.1):
    """TRON with this process as one rank of ``comm``, holding its own examples.

    The objective is :func:`fit_newton`'s over the examples of every rank (``n`` the total
    count; the weights scaled to mean 1 by their global sum, so that weights differing between
    the ranks mean what repeated rows would).  Every pass of the single-process solver runs on
    the local examples and its sums are added across the ranks: at the start and at each trial
    point, the loss together with the gradient, the Hessian's diagonal and the certificate's
    sums (one reduce: the gradient is computed on the trial point before it is known to be
    accepted, so that an accepted step costs no second collective), and every Hessian-vector
    product of the CG steps (one reduce each): ``n_hv + n_fun`` collectives in all.
    Sparse data reduce through one Kylix plan (:meth:`Communicator.sparse_plan`) configured
    once over the union of the ranks' features, dense data through the dense
    :meth:`Communicator.allreduce`.  The reduced sums are bit-identical on every rank, so every
    rank takes the same steps: the iterates are the single-process ones up to the order of
    summation, at any ``comm.size``, with the same stopping test.

    Parameters
    ----------
    comm : roofline.comm.Communicator
        Every rank calls this with its own shard (collective).
    X : CSC matrix or ndarray, shape (n_features, n_local)
        This rank's examples as columns; the same ``n_features`` on every rank; a rank may
        hold no examples.
    y : array, shape (n_local,)
        This rank's targets (one class only is fine: the classes are over all ranks).
    loss, alpha, fit_intercept, tol, max_iter, verbose, n_jobs, gtol
        As :func:`fit_newton`; the same on every rank (checked).  ``n_jobs`` is ignored (one
        thread) when the ranks are threads of one process.
    coef_init, intercept_init
        The warm start: rank 0's is used.
    sample_weight : array, shape (n_local,), optional
        This rank's example weights (ranks without them weigh their examples 1 when another
        rank has weights).
    eps_cg : float
        The CG's relative tolerance (liblinear's 0.1).

    Returns
    -------
    GLMResult
        The same on every rank (up to the times).  ``info``: ``cg_iter`` (= ``n_hv``, the
        Hessian-vector products), ``n_fun`` (objective evaluations), ``n_ranks``,
        ``reduce`` (``"sparse"`` or ``"dense"``), ``n_union_features``, ``setup`` (the
        collectives, messages, bytes and seconds of the configuration) and ``per_iter``: one
        dict per accepted iteration with ``cg_steps``, ``wall_s``, ``compute_s`` (wall minus
        the time inside collectives), ``comm_s``, ``collectives`` and ``bytes_sent`` (this
        rank's, from ``comm.stats``), for a cluster cost model.
    """
    if not isinstance(comm, Communicator):
        raise TypeError(f"comm must be a roofline.comm.Communicator, got {type(comm).__name__}")
    threads = 1 if comm.shares_process else n_jobs
    # a rank's BLAS calls (the CG's vector algebra, dense products) on its own threads only:
    # OpenBLAS pools of every rank spinning on the same cores cost 4x (kernels/_threads.py)
    with limit_blas_threads(threads):
        return _fit_newton_comm(
            comm, X, y, loss=loss, alpha=alpha, fit_intercept=fit_intercept, tol=tol,
            max_iter=max_iter, coef_init=coef_init, intercept_init=intercept_init,
            verbose=verbose, threads=threads, sample_weight=sample_weight, gtol=gtol,
            eps_cg=eps_cg)


def _fit_newton_comm(comm, X, y, *, loss, alpha, fit_intercept, tol, max_iter, coef_init,
                     intercept_init, verbose, threads, sample_weight, gtol, eps_cg):
    """:func:`fit_newton_comm` with ``threads`` threads per rank (BLAS limited by the caller)."""
    t0 = time.perf_counter()
    name = _losses.resolve_loss(loss, allowed=NEWTON_LOSSES)
    code = _losses.LOSS_CODES[name]
    alpha = positive(alpha, "alpha")
    tol = positive(tol, "tol")
    max_iter = positive(max_iter, "max_iter", integer=True)
    gtol = None if gtol is None else positive(gtol, "gtol")
    stats0 = dict(comm.stats) if isinstance(getattr(comm, "stats", None), dict) else {}

    def local():
        Xl, yl = _checked_shard(X, y, name, allow_no_examples=True)
        sw = None if sample_weight is None else check_sample_weight(
            sample_weight, Xl.shape[1], positive_sum=False)
        return Xl, yl, sw

    Xl, yl, sw = _local_checks(comm, local)
    d, n_local = Xl.shape
    _agree(comm, [d, alpha, tol, max_iter, bool(fit_intercept), code, -1 if gtol is None
                  else gtol, eps_cg],
           ["n_features", "alpha", "tol", "max_iter", "fit_intercept", "loss", "gtol", "eps_cg"])
    dense = not sp.issparse(Xl)
    tot = comm.allreduce(np.array([n_local, 0.0 if sw is None else sw.sum(),
                                   sw is not None, dense], dtype=np.float64))
    n = int(tot[0])
    if n == 0:
        raise ValueError("fit_newton(comm=): no rank holds an example")
    if tot[2]:  # weights somewhere: scaled to mean 1 over every rank's examples
        if not tot[1] > 0:
            raise ValueError("sample_weight must have a positive sum (over every rank)")
        sw = (np.ones(n_local) if sw is None else sw) * (n / tot[1])
    w0, b0 = comm.broadcast((coef_init, float(intercept_init)))
    w_init = np.zeros(d)
    if w0 is not None:
        c = np.asarray(w0, dtype=np.float64).ravel()
        if c.shape[0] != d or not np.isfinite(c).all():
            raise ValueError(f"coef_init must be {d} finite numbers")
        w_init[:] = c
    # the features: the union of the ranks' (a feature in no example stays at 0, as in one
    # process); dense data (on any rank) keep all of them and reduce densely
    if tot[3]:
        union = lf = pos = None
        Xc = Xl
    else:
        occ, union = feature_union(comm, Xl)
        lf = np.flatnonzero(occ)
        pos = np.searchsorted(union, lf)
        newid = np.cumsum(occ) - 1
        Xc = sp.csc_matrix((Xl.data, newid[Xl.indices].astype(Xl.indices.dtype), Xl.indptr),
                           shape=(lf.size, n_local))
    pb = GLMProblem(Xc, yl, code, False, alpha, fit_intercept, primal=False, n_total=n,
                    serial=comm.shares_process or (threads or 1) == 1)
    f = _Smooth(pb, threads, sw)
    f.red = _Reducer(comm, d, lf, union)
    f.pos = pos
    u = f.dx
    setup = {"seconds": time.perf_counter() - t0,
             "bytes_sent": _stat(comm, "bytes_sent") - stats0.get("bytes_sent", 0),
             "calls": _stat(comm, "calls") - stats0.get("calls", 0),
             "messages": _stat(comm, "messages") - stats0.get("messages", 0)}

    def point(x):
        wx, bx = f.split(x)
        if union is None:
            return wx, bx
        wfull = np.zeros(d)
        wfull[union] = wx
        return wfull, bx

    per_iter = []
    last = [time.perf_counter(), 0.0, 0, _stat(comm, "bytes_sent")]

    def on_iter(it, cg_it):
        now, red = time.perf_counter(), f.red
        wall, cs = now - last[0], red.seconds - last[1]
        nbytes = _stat(comm, "bytes_sent")
        per_iter.append({"iter": it, "cg_steps": cg_it, "wall_s": wall, "compute_s": wall - cs,
                         "comm_s": cs, "collectives": red.calls - last[2],
                         "bytes_sent": nbytes - last[3]})
        last[:] = [now, red.seconds, red.calls, nbytes]

    x = np.zeros(u + f.fi)
    x[:u] = w_init if union is None else w_init[union]
    if f.fi:
        x[u] = b0
    trace = Trace(tol, verbose if comm.rank == 0 else 0)
    with verbose_logging(verbose if comm.rank == 0 else 0):
        x, it, conv, status, stalled, cg_total = _tron(
            f, x, trace, max_iter=max_iter, verbose=verbose if comm.rank == 0 else 0,
            callback=None, point=point, eps_cg=eps_cg, gtol=gtol, on_iter=on_iter)
    wf, bf = point(x)
    info = {"n_active_features": u, "cg_iter": cg_total, "n_hv": cg_total, "n_fun": f.n_fun,
            "stalled": stalled,
            "stopped_by_callback": False, "parallel_hv": f.work is not None,
            "n_ranks": comm.size, "reduce": "dense" if union is None else "sparse",
            "n_union_features": u, "n_examples": n, "setup": setup, "per_iter": per_iter,
            "collectives": f.red.calls, "comm_seconds": f.red.seconds,
            "bytes_sent": _stat(comm, "bytes_sent") - stats0.get("bytes_sent", 0)}
    res = GLMResult(coef=np.array(wf, dtype=np.float64), intercept=float(bf), n_iter=int(it),
                    objective=np.asarray(trace.P), gap_history=np.asarray(trace.G),
                    times=np.asarray(trace.T), gap=float(trace.G[-1]), converged=bool(conv),
                    time=0.0, check_time=trace.check, solver="newton", loss=name,
                    penalty="l2", alpha=alpha, dual=False, info=info)
    res.time = time.perf_counter() - t0
    floor_ok = gtol is not None and stalled and res.gap <= tol * abs(res.objective[-1])
    if not conv and not floor_ok and comm.rank == 0:
        reason = "stalled at the rounding floor" if stalled else f"reached max_iter={it}"
        if gtol is not None:
            reason += f" (gradient test, gtol={gtol:g})"
        warn_not_converged("newton", tol, it, res.gap, float(res.objective[-1]), reason=reason)
    return res


def duality_gap(X, y, coef, intercept=0.0, *, loss="logistic", alpha, fit_intercept=True,
                sample_weight=None, comm=None):
    """The objective and the certified duality gap of a model, over every rank's examples.

    The certificate the solvers stop on (:func:`roofline.glm.primal_certificate`): ``P - P*
    <= gap``, so ``gap / |P|`` bounds the relative suboptimality of any model, whoever
    trained it (a peer's, an early-stopped one).  One pass over the data; with ``comm``, one
    all-reduce of a ``n_features + 4`` vector.

    Parameters
    ----------
    X : CSC matrix or ndarray, shape (n_features, n_examples)
        The examples as columns (with ``comm``: this rank's).
    y : array, shape (n_examples,)
        Targets in the loss's label form.
    coef : array, shape (n_features,)
    intercept : float, default=0.0
        Must be 0 without ``fit_intercept``.
    loss : str, default="logistic"
        A smooth loss (:data:`roofline.glm.SMOOTH_LOSSES`).
    alpha : float
        The L2 strength of :func:`~roofline.glm.fit_glm`'s objective.
    fit_intercept : bool, default=True
        Whether the problem has an unregularised intercept (the gap then includes the gain
        still available by moving it).
    sample_weight : array, shape (n_examples,), optional
        Example weights (scaled to mean one over every rank, as the solvers do).
    comm : roofline.comm.Communicator, optional
        Every rank calls this with its own examples and the same model (collective).

    Returns
    -------
    P, gap : float
        The objective and its duality gap (the same on every rank).
    """
    name = _losses.resolve_loss(loss, allowed=NEWTON_LOSSES)
    code = _losses.LOSS_CODES[name]
    alpha = positive(alpha, "alpha")

    def local():
        Xl, yl = _checked_shard(X, y, name, allow_no_examples=comm is not None)
        w = np.asarray(coef, dtype=np.float64).ravel()
        if w.shape[0] != Xl.shape[0] or not np.isfinite(w).all():
            raise ValueError(f"coef must be {Xl.shape[0]} finite numbers (one per feature), "
                             f"got shape {np.shape(coef)}")
        b = float(intercept)
        if not np.isfinite(b) or (b != 0.0 and not fit_intercept):
            raise ValueError(f"intercept must be finite, and 0 without fit_intercept; got {b}")
        return Xl, yl, w, b

    if comm is None:
        Xl, yl, w, b = local()
        sw = mean_one_weights(sample_weight, Xl.shape[1])
        n = Xl.shape[1]
    else:
        Xl, yl, w, b = check_on_every_rank(comm, local, "duality_gap(comm=)")
        sw = comm_weights(comm, sample_weight, Xl.shape[1])
        n = int(comm.allreduce(np.array([float(Xl.shape[1])]))[0])
    if n == 0:
        raise ValueError("duality_gap: no examples")
    pb = GLMProblem(Xl, yl, code, False, alpha, fit_intercept, primal=False, n_total=n,
                    serial=True)
    f = _Smooth(pb, 1, sw)
    if comm is not None:
        f.red = _Reducer(comm, Xl.shape[0])
    x = np.append(w, b) if fit_intercept else w
    f.fun(x, f.z)
    _, P, gap = f.grad(x, f.z)
    return float(P), float(gap)


def _stat(comm, key):
    s = getattr(comm, "stats", None)
    return int(s.get(key, 0)) if isinstance(s, dict) else 0
