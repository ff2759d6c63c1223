"""TPA-SCD on the GPU: Snap ML's twice-parallel asynchronous stochastic coordinate descent
(Parnell et al., "Large-scale stochastic learning using GPUs", 2017), dual form, in numba-cuda.

Same conventions as the CPU dual kernels of :mod:`._cd` (read them first): the structure is the
project layout ``X`` (``n_features x n_examples`` CSC, a coordinate = an example), losses in
margin form by their codes (:data:`._losses.LOSS_CODES`: squared, logistic, hinge; labels
``y in {-1, 1}`` for the classifiers), everything in sums: the solver minimises
``sum_i l(x_i^T w) + lam_n ||w||^2 / 2`` through the dual, ``v = X alpha`` (length
``n_features``, plus a trailing constant-feature entry when ``icpt != 0``), ``w = v / lam_n``.
``alpha`` and ``v`` are float64 (accumulations in float64 whatever the data dtype).

Parallel twice:

* *within* a coordinate, a thread block: its threads stride over the example's nonzeros for
  ``x_i^T v`` (reduced in shared memory), thread 0 takes the exact step of ``alpha[i]`` (the
  same closed forms, and the logistic's safeguarded Newton, as on the CPU), and the threads
  add ``delta * x_i`` into ``v`` with atomic adds;
* *across* coordinates, the blocks: each takes the next coordinate of the epoch's permutation
  (grid-stride) and runs asynchronously against the shared ``v``, as TPA-SCD's blocks do.

The permutation is drawn on the device (cupy's generator, seeded), one per epoch.  Under numba's
CUDA simulator the blocks run one after the other: sequential SDCA, which the tests compare with
the CPU optimum.
"""

from __future__ import annotations

import math

import numpy as np

from . import _cuda_primitives as _cp
from ._losses import HINGE, SQUARED

__all__ = ["CD_THREADS", "gpu_dual_tpa", "gpu_dual_tpa_epoch"]

#: Threads per block (per coordinate).  Criteo-like examples hold ~40 nonzeros: 64 threads keep
#: a warp or two busy per coordinate and many coordinates in flight per SM.
CD_THREADS = 64


_KERNELS: dict = {}

cuda = None  # numba.cuda, bound on first use (the simulator swaps it inside its kernels)


def _build():
    global cuda
    key = CD_THREADS
    if key in _KERNELS:
        return _KERNELS[key]
    cuda = _cp._cuda()
    nthreads = CD_THREADS
    sq, hg = SQUARED, HINGE  # anything else: logistic

    @cuda.jit(device=True)
    def sigmoid(t):
        if t >= 0.0:
            return 1.0 / (1.0 + math.exp(-t))
        z = math.exp(t)
        return z / (1.0 + z)

    @cuda.jit(device=True)
    def logistic_beta(beta, ym, q):
        # the CPU kernel's _logistic_dual_beta: safeguarded Newton on t = logit(b)
        if q <= 0.0:
            return sigmoid(-ym)
        lo = -ym - q * (1.0 - beta)
        hi = -ym + q * beta
        t = 0.5 * (lo + hi)
        if beta > 0.0 and beta < 1.0:
            t0 = math.log(beta / (1.0 - beta))
            t = min(max(t0, lo), hi)
        dx_old = hi - lo
        dx = dx_old
        for _ in range(100):
            s = sigmoid(t)
            g = -t - ym - q * (s - beta)
            if g > 0.0:
                lo = t
            else:
                hi = t
            ds = s * (1.0 - s)
            dg = -1.0 - q * ds
            step = -g / dg
            if abs(step) <= 1e-10 * (1.0 + abs(t)):
                return sigmoid(t + step)
            tn = t + step
            if tn <= lo or tn >= hi or abs(2.0 * g) > abs(dx_old * dg):
                tn = 0.5 * (lo + hi)
            dx_old = dx
            dx = tn - t
            t = tn
        return sigmoid(t)

    @cuda.jit(device=True)
    def dual_delta(acc, a, yi, loss, lam_n, q):
        m = acc / lam_n
        if loss == sq:
            return (yi - m - a) / (1.0 + q)
        beta = a * yi
        if loss == hg:
            g = yi * m - 1.0
            if q > 0.0:
                nb = beta - g / q
            else:
                nb = 1.0 if g < 0.0 else 0.0
            nb = min(max(nb, 0.0), 1.0)
            return yi * (nb - beta)
        return yi * (logistic_beta(beta, yi * m, q) - beta)

    @cuda.jit
    def tpa_epoch(indptr, indices, data, y, alpha, v, colsq, order, loss, lam_n, icpt, damp):
        part = cuda.shared.array(nthreads, np.float64)
        step = cuda.shared.array(1, np.float64)
        tid = cuda.threadIdx.x
        nf = v.shape[0] - 1 if icpt != 0.0 else v.shape[0]
        for t in range(cuda.blockIdx.x, order.shape[0], cuda.gridDim.x):  # block-uniform
            i = order[t]
            lo = indptr[i]
            hi = indptr[i + 1]
            acc = 0.0
            p = lo + tid
            while p < hi:
                acc += np.float64(data[p]) * v[indices[p]]
                p += nthreads
            part[tid] = acc
            cuda.syncthreads()
            stride = nthreads // 2
            while stride > 0:
                if tid < stride:
                    part[tid] += part[tid + stride]
                cuda.syncthreads()
                stride //= 2
            if tid == 0:
                dot = part[0]
                if icpt != 0.0:
                    dot += icpt * v[nf]
                q = (colsq[i] + icpt * icpt) / lam_n
                delta = dual_delta(dot, alpha[i], np.float64(y[i]), loss, lam_n, q) * damp
                alpha[i] += delta
                step[0] = delta
                if icpt != 0.0 and delta != 0.0:
                    cuda.atomic.add(v, nf, delta * icpt)
            cuda.syncthreads()
            delta = step[0]
            if delta != 0.0:
                p = lo + tid
                while p < hi:
                    cuda.atomic.add(v, indices[p], delta * np.float64(data[p]))
                    p += nthreads
            cuda.syncthreads()

    _KERNELS[key] = tpa_epoch
    return tpa_epoch


def gpu_dual_tpa_epoch(indptr, indices, data, y, alpha, v, colsq, order, loss, lam_n, icpt=0.0,
                       damp=1.0, *, blocks=0):
    """One asynchronous epoch over the examples ``order`` (device int array): a block per
    coordinate, ``blocks`` blocks in flight (default: one per coordinate, at most 65535 x 4;
    the grid strides over the rest).  ``colsq[i] = ||x_i||^2`` (float64)."""
    kern = _build()
    n = int(order.shape[0])
    if n == 0:
        return
    blocks = int(blocks) or min(n, 4 * 65535)
    kern[blocks, CD_THREADS](*_cp._args(indptr, indices, data, y, alpha, v, colsq, order),
                             int(loss), float(lam_n), float(icpt), float(damp))


def gpu_dual_tpa(indptr, indices, data, y, alpha, v, colsq, loss, lam_n, *, epochs=10,
                 icpt=0.0, seed=0, damp=1.0, blocks=0):
    """``epochs`` TPA-SCD epochs of the dual, each over a fresh permutation of the examples
    drawn on the device; updates ``alpha`` and ``v`` in place (numpy arrays under the
    simulator, cupy arrays on a GPU).  Returns ``alpha, v``."""
    xp = _cp._xp(alpha)
    m = int(alpha.shape[0])
    rs = xp.random.RandomState(seed)
    for _ in range(int(epochs)):
        order = rs.permutation(m).astype(np.int64)
        gpu_dual_tpa_epoch(indptr, indices, data, y, alpha, v, colsq, order, loss, lam_n, icpt,
                           damp, blocks=blocks)
    return alpha, v
