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

__all__ = ["CD_THREADS", "SIM_CD_THREADS", "DeviceDual", "cuda_ready", "eso_colsq",
           "eso_parts", "gpu_dual_tpa", "gpu_dual_tpa_epoch", "resident_blocks"]

#: Threads per block (per coordinate).  Criteo-like examples hold ~40 nonzeros: 64 threads keep
#: a warp or two busy per coordinate and many coordinates in flight per SM.
CD_THREADS = 64
#: ... and under numba's CUDA simulator, where every thread is a Python thread (the kernel is
#: the same: its loops stride over a coordinate's nonzeros by the block size).
SIM_CD_THREADS = 4


#: Blocks of a launch under the simulator (where they run one after the other).
SIM_BLOCKS = 2


def cuda_ready() -> bool:
    """Whether the CUDA kernels can run here: numba's CUDA simulator is on
    (``NUMBA_ENABLE_CUDASIM=1``), or numba.cuda sees a device.  Never raises."""
    try:
        if _cp._simulated():
            return True
        from numba import cuda as _c

        return bool(_c.is_available())
    except Exception:  # pragma: no cover - broken driver or numba-cuda
        return False


def _threads():
    return min(CD_THREADS, SIM_CD_THREADS) if _cp._simulated() else CD_THREADS


_KERNELS: dict = {}

cuda = None  # numba.cuda, bound on first use (the simulator swaps it inside its kernels)


def _build():
    global cuda
    key = _threads()
    if key in _KERNELS:
        return _KERNELS[key]
    cuda = _cp._cuda()
    nthreads = key
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
    if not _cp._simulated():
        blocks = int(blocks) or min(n, 4 * 65535)
        kern[blocks, _threads()](*_cp._args(indptr, indices, data, y, alpha, v, colsq, order),
                                 int(loss), float(lam_n), float(icpt), float(damp))
        return
    # the simulator runs the blocks one after the other: two exercise the grid stride at the
    # cost of one more set of threads (a Python thread each)
    blocks = int(blocks) or min(n, SIM_BLOCKS)
    _cp._launch(kern, blocks, _threads(), indptr, indices, data, y, alpha, v, colsq, order,
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


#: Share of the free device memory a :class:`DeviceDual` takes by default (the rest: the
#: CUDA context, cupy's pool, the caller's own arrays).
DEVICE_MEMORY_SHARE = 0.8


def resident_blocks() -> int:
    """Blocks of :func:`gpu_dual_tpa_epoch` the device runs at once (its multiprocessors times
    the blocks of ``CD_THREADS`` threads one holds, at most 32); 1 under the simulator, where
    the blocks run one after the other."""
    if _cp._simulated():
        return 1
    cuda = _cp._cuda()
    dev = cuda.get_current_device()
    try:  # CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR
        per_sm = min(32, int(dev.MAX_THREADS_PER_MULTIPROCESSOR) // _threads())
    except Exception:  # pragma: no cover - an attribute the binding lacks
        per_sm = 2048 // _threads()
    return int(dev.MULTIPROCESSOR_COUNT) * max(per_sm, 1)


def eso_parts(indptr, indices, data, n_features):
    """``(plain, hot)``: the examples' squared norms and their shares on shared features, for
    :func:`eso_colsq` at any ``tau``: ``plain[i] = ||x_i||^2``,
    ``hot[i] = sum_j x_ij^2 (omega_j - 1) / (m - 1)`` (feature ``j`` in ``omega_j`` of the
    ``m`` examples).

    Returns
    -------
    plain, hot : ndarray of float64, shape (m,)
    """
    ip = np.asarray(indptr)
    m = ip.shape[0] - 1
    nnz = int(ip[-1])
    ix = np.asarray(indices)[:nnz]
    omega = np.bincount(ix, minlength=int(n_features)).astype(np.float64)
    w2 = np.square(np.asarray(data)[:nnz], dtype=np.float64)
    owner = np.repeat(np.arange(m, dtype=np.int64), np.diff(ip).astype(np.int64))
    plain = np.bincount(owner, weights=w2, minlength=m)
    hot = np.bincount(owner, weights=w2 * ((omega - 1.0) / max(m - 1, 1))[ix], minlength=m)
    return plain, hot


def eso_colsq(indptr, indices, data, n_features, tau, icpt=0.0, parts=None):
    """The squared norms of the examples as the steps of ``tau`` concurrent blocks must see
    them: the ESO (expected separable overapproximation) of mini-batch SDCA for ``tau``
    coordinates updated at once (Richtarik & Takac 2016; Takac, Bijral, Richtarik & Srebro
    2013): feature ``j``, present in ``omega_j`` of the ``m`` examples, counts
    ``1 + (omega_j - 1) (tau - 1) / (m - 1)`` times in ``||x_i||^2``.

    A feature held by few examples keeps its weight (its steps rarely meet), one held by every
    example (the intercept's constant, the hot buckets of Criteo-like data) counts ``tau``
    times: the steps of ``tau`` blocks that read the same stale ``v`` then add up to at most
    one exact step along it, where unscaled steps overshoot up to ``tau``-fold (and diverge:
    the earlier benchmark harness's ``nan``).  The kernel adds ``icpt^2`` itself, so the
    constant feature's extra ``(tau - 1) icpt^2`` is added here.  ``parts``: the
    :func:`eso_parts` of the data when the caller has them.

    Returns
    -------
    ndarray of float64, shape (m,)
    """
    plain, hot = eso_parts(indptr, indices, data, n_features) if parts is None else parts
    return plain + (float(tau) - 1.0) * (hot + icpt * icpt)


class DeviceDual:
    """The dual of one CD problem on the device: the data, resident or streamed by chunks,
    and the dual state ``alpha`` (``m``) and ``v`` (``d``, plus the intercept's entry), always
    resident; epochs of :func:`gpu_dual_tpa_epoch` over it.

    The host arrays are the project layout's CSC pieces (a coordinate = an example = a column
    of ``X``).  When the data (structure, values, labels, norms and the permutation) fit in
    ``budget`` bytes beside the dual state, they are copied once and stay on the device;
    otherwise the examples are cut into contiguous chunks of at most half the remaining budget
    each, and every epoch streams them through a :class:`~._cuda_stream.DeviceChunkStream`
    (double buffered: the next chunk is copied while the current one trains, Snap ML's
    pipeline), in a fresh random order of the chunks, each chunk's examples in a fresh random
    order.  Everything runs through numba.cuda device arrays, on a GPU and under the CUDA
    simulator alike; the permutations are drawn on the device by cupy where it is present, on
    the host (numpy, from ``seed``) under the simulator.

    Parameters
    ----------
    indptr, indices, data : ndarray
        ``X`` (``d x m`` CSC) on the host; int32 or int64 indices, float32 or float64 values.
    y : ndarray, shape (m,)
        Labels in the margin form (``{-1, 1}`` for the classifiers).
    colsq : ndarray of float64, shape (m,)
        ``||x_i||^2`` (the intercept's share is added by the kernel).
    n_features : int
        ``d``.
    icpt : float
        The constant feature's value (0: no intercept entry in ``v``).
    budget : float or None
        Device bytes for this problem (None: :data:`DEVICE_MEMORY_SHARE` of the free device
        memory).
    seed : int
        Seeds the permutations.
    concurrency : int, optional
        Blocks in flight, the launch's grid (default :func:`resident_blocks`: as many as the
        device runs at once; 1 under the simulator).  With more than one, the steps use
        :func:`eso_colsq`'s norms, safe for that many steps against a stale ``v``.

    Raises
    ------
    ValueError
        ``budget`` cannot hold the dual state and one example's chunk twice.
    """

    def __init__(self, indptr, indices, data, y, colsq, n_features, *, icpt=0.0, budget=None,
                 seed=0, concurrency=None):
        cuda = _cp._cuda()
        self._cuda = cuda
        self.m = int(indptr.shape[0]) - 1
        self.d = int(n_features)
        self.icpt = float(icpt)
        nv = self.d + (1 if self.icpt != 0.0 else 0)
        if concurrency is None:
            concurrency = resident_blocks()
        if isinstance(concurrency, bool) or int(concurrency) < 1:
            raise ValueError(f"concurrency must be an int >= 1, got {concurrency!r}")
        #: blocks in flight (the launch's grid): at most this many steps read a stale ``v``
        self.concurrency = int(min(int(concurrency), max(self.m, 1)))
        colsq = np.array(colsq, dtype=np.float64)  # a copy: rewritten by set_tau
        self._eso = None
        #: the ``tau`` of the steps' norms (:func:`eso_colsq`; :meth:`set_tau`)
        self.tau = 1
        if self.concurrency > 1:
            self._eso = eso_parts(indptr, indices, data, self.d)
            self.tau = self.concurrency
            colsq[:] = eso_colsq(indptr, indices, data, self.d, self.tau, self.icpt,
                                 parts=self._eso)
        self._host = (np.asarray(indptr), np.asarray(indices), np.asarray(data),
                      np.asarray(y), colsq)
        if budget is None:
            budget = DEVICE_MEMORY_SHARE * float(cuda.current_context().get_memory_info()[0])
        self.budget = float(budget)
        state = 8 * (self.m + nv)
        ip, ix, dt, yy, cq = self._host
        per_nz = ix.itemsize + dt.itemsize
        # an example's bytes on the device: its nonzeros, its indptr entry, label, norm, order
        per_ex = np.diff(ip).astype(np.int64) * per_nz + (ip.itemsize + yy.itemsize + 16)
        data_bytes = int(per_ex.sum()) + ip.itemsize
        self.alpha = cuda.to_device(np.zeros(self.m))
        self.v = cuda.to_device(np.zeros(nv))
        self._rs = np.random.RandomState(int(seed) % 2**32)
        self._cupy_rs = None
        if state + data_bytes <= self.budget:
            self.chunks = None
            self._dev = tuple(cuda.to_device(np.ascontiguousarray(a)) for a in self._host)
            self.chunk_bounds = np.array([0, self.m], dtype=np.int64)
        else:
            half = (self.budget - state) / 2.0
            if not half >= float(per_ex.max(initial=0)) + ip.itemsize:
                raise ValueError(
                    f"device_memory={self.budget:.4g} bytes cannot hold the dual state "
                    f"({state} bytes) and two chunks of the largest example "
                    f"({int(per_ex.max(initial=0))} bytes): give more")
            cum = np.concatenate([[0], np.cumsum(per_ex)])
            bounds = [0]
            while bounds[-1] < self.m:
                lo = bounds[-1]
                hi = int(np.searchsorted(cum, cum[lo] + half - ip.itemsize, side="right")) - 1
                bounds.append(max(hi, lo + 1))
            self.chunk_bounds = np.array(bounds, dtype=np.int64)
            self.chunks = [self._host_chunk(lo, hi) for lo, hi in
                           zip(self.chunk_bounds[:-1], self.chunk_bounds[1:], strict=True)]
            from ._cuda_stream import DeviceChunkStream

            self._pipe = DeviceChunkStream(depth=2)
            self._dev = None

    def set_tau(self, tau):
        """Rewrite the steps' norms for ``tau`` concurrent steps (:func:`eso_colsq`; 1: the
        plain norms); on the device too when the data are resident (the streamed chunks read
        the host's array, which is rewritten in place)."""
        tau = int(min(max(int(tau), 1), self.concurrency))
        if tau == self.tau or self._eso is None:
            return
        self.synchronize()
        cq = self._host[4]
        cq[:] = self._eso[0] + (tau - 1.0) * (self._eso[1] + self.icpt * self.icpt)
        if self.chunks is None:
            self._dev[4].copy_to_device(cq)
        self.tau = tau

    def _blocks(self, n):
        """The launch's grid: ``concurrency`` blocks striding over the ``n`` coordinates (0:
        the launcher's default, under the simulator)."""
        return 0 if _cp._simulated() else max(1, min(self.concurrency, n))

    def _host_chunk(self, lo, hi):
        """Examples ``lo:hi`` as host arrays: indptr rebased to 0, indices, data, y, colsq."""
        ip, ix, dt, yy, cq = self._host
        a, b = int(ip[lo]), int(ip[hi])
        return (ip[lo:hi + 1] - ip[lo], ix[a:b], dt[a:b], yy[lo:hi], cq[lo:hi])

    @property
    def streamed(self):
        """Whether the data are streamed by chunks (they exceed the budget)."""
        return self.chunks is not None

    @property
    def bytes_streamed(self):
        """Host-to-device bytes the chunk stream has copied so far (0 when resident)."""
        return 0 if self.chunks is None else self._pipe.bytes_copied

    def _order(self, n):
        """A permutation of ``range(n)`` on the device (int64)."""
        if _cp._simulated():
            return self._cuda.to_device(self._rs.permutation(n).astype(np.int64))
        try:
            import cupy
        except ImportError:  # pragma: no cover - GPU without cupy
            return self._cuda.to_device(self._rs.permutation(n).astype(np.int64))
        if self._cupy_rs is None:
            self._cupy_rs = cupy.random.RandomState(int(self._rs.randint(2**31)))
        return self._cupy_rs.permutation(n).astype(np.int64)

    def epoch(self, loss, lam_n, damp=1.0):
        """One TPA-SCD epoch over every example (queued on the default stream)."""
        if self.chunks is None:
            ip, ix, dt, yy, cq = self._dev
            gpu_dual_tpa_epoch(ip, ix, dt, yy, self.alpha, self.v, cq, self._order(self.m),
                               loss, lam_n, self.icpt, damp, blocks=self._blocks(self.m))
            return
        which = self._rs.permutation(len(self.chunks))
        for k, (ip, ix, dt, yy, cq) in self._pipe.iterate(self.chunks[j] for j in which):
            j = int(which[k])
            lo, hi = int(self.chunk_bounds[j]), int(self.chunk_bounds[j + 1])
            gpu_dual_tpa_epoch(ip, ix, dt, yy, self.alpha[lo:hi], self.v, cq,
                               self._order(hi - lo), loss, lam_n, self.icpt, damp,
                               blocks=self._blocks(hi - lo))

    def synchronize(self):
        """Wait for the queued work."""
        self._cuda.synchronize()

    def get(self):
        """``(alpha, v)`` copied to the host (float64)."""
        self.synchronize()
        return self.alpha.copy_to_host(), self.v.copy_to_host()

    def set(self, alpha=None, v=None):
        """Overwrite ``alpha`` and/or ``v`` on the device from host arrays."""
        self.synchronize()
        if alpha is not None:
            self.alpha.copy_to_device(np.ascontiguousarray(alpha, dtype=np.float64))
        if v is not None:
            self.v.copy_to_device(np.ascontiguousarray(v, dtype=np.float64))

    def close(self):
        """Release the device memory (the stream's buffers included)."""
        self.synchronize()
        if self.chunks is not None:
            self._pipe.close()
        self._dev = None
        self.alpha = self.v = None
