"""CUDA kernels of the sparse primitives ``A*S``, ``A*S^T`` and SDDMM, and of the GPU roofline's
micro-benchmarks, written in numba-cuda (``numba.cuda.jit``) so that the very same kernels run
under numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) in every CI run.

``S`` is ``n x m`` CSC (one column = one example) given as raw arrays ``(indptr, indices,
data)``, int32 or int64 indices, float32 or float64 values; dense operands are 2-D, ``k`` rows,
best Fortran-ordered (a column's ``k`` values contiguous).  The launchers take cupy arrays (or,
under the simulator, numpy arrays) and never allocate the outputs.

Layout, tuned for power-law data
--------------------------------
A *group* of ``T`` lanes (32, 64 or 128: the next power of two of ``k``, at least a warp)
works on one *segment* of one column of the sparse operand; a block of :data:`BLOCK` threads
holds ``BLOCK // T`` groups.  The lanes of a group form ``rl x sl`` (``rl = min(T, pow2(k))``
row lanes times ``sl = T / rl`` nonzero lanes): lane ``(r, s)`` owns output rows
``r, r + rl, ...`` and takes every ``sl``-th nonzero of the segment, so consecutive lanes read
consecutive rows of a dense column (coalesced), and small ``k`` still keeps a warp busy (at
``k = 1`` the 32 lanes split the example's nonzeros, CSR-vector style).

* **Row split.**  A column of more than ``L = sl * SEG_STEPS`` nonzeros (a long example; in the
  transposed index, a hot feature) is cut into segments of ``L``, each its own group, combined
  with atomic adds; every other column is written once with a plain store.  The segment list
  (:func:`segment_plan`) is computed once per matrix and cached by the caller.
* **A*S** (:func:`gpu_mult_as`): the output column is accumulated in registers (one per lane
  and row chunk), reduced across the ``sl`` nonzero lanes in shared memory, written once.
* **A*S^T**: either atomics (:func:`gpu_mult_ast_atomic`: the group loads the example's column
  of ``A`` into registers once and adds ``a * x`` into the output column of each nonzero's
  feature) or a gather over the transposed index (:func:`transpose_index`, cached by the
  caller: the same kernel as ``A*S`` over ``S^T``, reading the values through a permutation so
  that the index never holds a stale copy of them).  ``roofline.gmat`` chooses by its cost
  model.
* **SDDMM** (:func:`gpu_sddmm`): the group keeps the example's column of ``B`` in registers
  and, per nonzero, reads the feature's column of ``A`` with consecutive lanes (coalesced),
  reducing the ``rl`` partial products in shared memory.

The simulator has no warp shuffles, so every reduction goes through shared memory with
``syncthreads`` (loops are block-uniform for that reason).  Out-of-range row indices are
skipped and counted in ``faults[0]`` (the caller raises), as on the CPU.  Float atomics make
the summation order of split columns, and so the last bits, vary from run to run.

numba.cuda is imported when a kernel is first compiled, never at import time.
"""

from __future__ import annotations

import sys

import numpy as np

__all__ = [
    "BLOCK",
    "SEG_STEPS",
    "gpu_fma",
    "gpu_layout",
    "gpu_mult_as",
    "gpu_mult_ast_atomic",
    "gpu_mult_ast_gather",
    "gpu_sddmm",
    "gpu_seg_len",
    "gpu_stream",
    "segment_plan",
    "transpose_index",
]

#: Threads per block of the primitive kernels (a power of two, 32 to 128; the simulator tests
#: use 32, which also caps a group at 32 lanes, so their k = 40 runs two row chunks).
BLOCK = 128

#: Segment length in steps of a group: a column of more than ``sl * SEG_STEPS`` nonzeros is
#: split (row split) so that one long column never holds up a block.
SEG_STEPS = 64

_KERNELS: dict = {}


def _xp(a):
    """numpy for host arrays (the simulator), cupy otherwise."""
    if isinstance(a, np.ndarray):
        return np
    import cupy

    return cupy


def gpu_layout(k: int) -> tuple[int, int, int, int]:
    """``(T, rl, sl, G)`` for ``k`` dense rows: lanes per group, row lanes, nonzero lanes,
    groups per block (see the module docstring)."""
    kp = 1 << max(0, (max(int(k), 1) - 1).bit_length())
    t = min(32 if kp <= 32 else (64 if kp <= 64 else 128), BLOCK)
    rl = min(kp, t)
    return t, rl, t // rl, BLOCK // t


def gpu_seg_len(k: int) -> int:
    """The segment length ``L = sl * SEG_STEPS`` of the row split for ``k`` dense rows: a
    column of more than ``L`` nonzeros is split into several groups (see the module notes)."""
    return gpu_layout(k)[2] * SEG_STEPS


def segment_plan(indptr, seg_len: int):
    """The row split of a CSC structure into segments of at most ``seg_len`` nonzeros.

    Parameters
    ----------
    indptr : array (numpy or cupy), length ``m + 1``
    seg_len : int

    Returns
    -------
    (segcol, segoff, nseg, split)
        ``segcol[s]``: the column of segment ``s`` (int32 when ``m < 2^31``); ``segoff``
        (length ``m + 1``): the first segment of each column (an empty column has one, which
        writes zeros); ``nseg``: their number (a host int); ``split``: whether any column has
        more than one segment (then the A*S output must be zeroed first).
    """
    xp = _xp(indptr)
    m = indptr.shape[0] - 1
    lens = xp.diff(indptr).astype(np.int64)
    counts = xp.maximum((lens + (seg_len - 1)) // seg_len, 1)
    segoff = xp.zeros(m + 1, np.int64)
    xp.cumsum(counts, out=segoff[1:])
    nseg = int(segoff[-1])
    cdt = np.int32 if m < 2**31 - 1 else np.int64
    segcol = xp.repeat(xp.arange(m, dtype=cdt), counts)
    return segcol, segoff, nseg, nseg > m


def transpose_index(indptr, indices, n_rows: int):
    """The CSC structure of ``S^T`` (``S`` ``n_rows x m``) with, instead of values, the position
    of each entry in ``S.data`` (the gather of :func:`gpu_mult_ast_gather` reads the values
    through it, so an in-place edit of ``S.data`` is always seen).

    Returns
    -------
    (indptr_t, cols, perm)
        ``indptr_t`` (length ``n_rows + 1``, int64), ``cols`` (the example of each entry, the
        index dtype) and ``perm`` (int64 when ``nnz >= 2^31``, int32 otherwise), entries of each
        feature in increasing example order.
    """
    xp = _xp(indptr)
    m = indptr.shape[0] - 1
    nnz = int(indptr[-1])
    rows = indices[:nnz].astype(np.int64)
    cols = xp.repeat(xp.arange(m, dtype=indices.dtype), xp.diff(indptr).astype(np.int64))
    # by row, ties by position (so each feature's examples stay in increasing order whether
    # or not the sort is stable)
    perm = xp.argsort(rows * max(nnz, 1) + xp.arange(nnz, dtype=np.int64))
    counts = xp.bincount(rows, minlength=n_rows) if nnz else xp.zeros(n_rows, np.int64)
    indptr_t = xp.zeros(n_rows + 1, np.int64)
    xp.cumsum(counts[:n_rows], out=indptr_t[1:])
    pdt = np.int32 if nnz < 2**31 - 1 else np.int64
    return indptr_t, cols[perm], perm.astype(pdt)


cuda = None  # numba.cuda, bound on first use (the simulator swaps it inside its kernels)


def _cuda():
    global cuda
    if cuda is None:
        from numba import cuda as _mod

        cuda = _mod
        # small grids (tests, tiny minibatches) are intended: numba-cuda's low-occupancy
        # NumbaPerformanceWarning would be an error under the test suite's warning filter
        try:
            from numba.cuda.core import config as _cfg

            _cfg.CUDA_LOW_OCCUPANCY_WARNINGS = 0
        except ImportError:  # pragma: no cover - older numba-cuda
            pass
        from numba.core import config as _core_cfg

        _core_cfg.CUDA_LOW_OCCUPANCY_WARNINGS = 0
        if _simulated():
            _atomic_sim_shared()
    return cuda


def _atomic_sim_shared():
    """Make the CUDA simulator hand every thread of a block the same shared array.

    numba-cuda's simulator (``FakeCUDAShared.array``, 0.30) keeps a launch's static shared
    arrays in a dict keyed by the calling line and fills it check-then-set without a lock; the
    block's threads are Python threads, so two of them that both miss the key each allocate an
    array of their own.  A thread with its own array writes a reduction's partial sum where
    nobody reads it and reads uninitialised memory instead (measured: 1 run in 3 of a seeded
    TPA-SCD fit under the simulator diverged from the others at its first epoch).  The
    replacement inserts with ``dict.setdefault``, atomic under the interpreter lock, keyed as
    the original is: the caller's file and line.  Simulator only; without the private
    ``_allocations`` dict (another numba-cuda) the original runs.
    """
    from numba.core import types
    from numba.cuda.simulator import kernelapi

    cls = kernelapi.FakeCUDAShared
    if getattr(cls.array, "_roofline_atomic", False):
        return
    original = cls.array

    def array(self, shape, dtype, alignment=None):
        allocations = getattr(self, "_allocations", None)
        if alignment is not None or shape == 0 or not isinstance(allocations, dict):
            return original(self, shape, dtype, alignment)
        frame = sys._getframe(1)
        key = (frame.f_code.co_filename, frame.f_lineno)
        res = allocations.get(key)
        if res is None:
            from numba.np import numpy_support

            dt = numpy_support.as_dtype(dtype) if isinstance(dtype, types.Type) else dtype
            res = allocations.setdefault(key, np.empty(shape, dt))
        return res

    array._roofline_atomic = True
    cls.array = array


_SIM = [None]


def _simulated() -> bool:
    if _SIM[0] is None:
        from numba.core import config

        _SIM[0] = bool(config.ENABLE_CUDASIM)
    return _SIM[0]


#: The interpreter's switch interval while a kernel runs under the simulator (:func:`_launch`).
SIM_SWITCH_S = 2e-5


def _launch(kern, grid, block, *args):
    """``kern[grid, block](*args)``.  Under numba's CUDA simulator a block's threads are Python
    threads that its launcher polls while holding the interpreter lock: at the default switch
    interval (5 ms) every ``syncthreads`` waits out about one, so the interval is
    :data:`SIM_SWITCH_S` for the launch (measured: this module's simulator tests 55 s -> 10 s,
    a TPA-SCD epoch of 120 coordinates 9 s -> 0.3 s).  On a GPU it is the plain launch."""
    if not _simulated():
        kern[grid, block](*args)
        return
    old = sys.getswitchinterval()
    sys.setswitchinterval(SIM_SWITCH_S)
    try:
        kern[grid, block](*args)
    finally:
        sys.setswitchinterval(old)


def _args(*arrays):
    if _simulated():
        return arrays
    _cuda()
    return tuple(a if isinstance(a, np.ndarray) or not hasattr(a, "__cuda_array_interface__")
                 else cuda.as_cuda_array(a, sync=False) for a in arrays)


def _build(dtype):
    """The primitive kernels for values of ``dtype``, compiled lazily by numba on first launch
    (each index dtype is its own specialisation)."""
    key = (np.dtype(dtype).char, BLOCK)
    if key in _KERNELS:
        return _KERNELS[key]
    _cuda()
    real = np.float32 if key[0] == "f" else np.float64
    nblock = BLOCK
    ngroups_max = max(1, BLOCK // 32)

    @cuda.jit
    def as_kernel(A, indptr, indices, data, perm, segcol, segoff, seg_len, k, rl, sl, t_lanes,
                  nseg, out, faults):
        part = cuda.shared.array(nblock, real)
        tid = cuda.threadIdx.x
        g = tid // t_lanes
        lane = tid - g * t_lanes
        r0 = lane % rl
        s = lane // rl
        seg = cuda.blockIdx.x * (nblock // t_lanes) + g
        n = A.shape[1]
        valid = seg < nseg
        lo = 0
        hi = 0
        j = 0
        split = False
        if valid:
            j = segcol[seg]
            first = segoff[j]
            lo = indptr[j] + (seg - first) * seg_len
            hi = min(lo + seg_len, indptr[j + 1])
            split = segoff[j + 1] - first > 1
        use_perm = perm.shape[0] > 0
        for q0 in range(0, k, rl):
            r = q0 + r0
            acc = real(0)
            if valid and r < k:
                p = lo + s
                while p < hi:
                    i = indices[p]
                    if i >= 0 and i < n:
                        if use_perm:
                            acc += data[perm[p]] * A[r, i]
                        else:
                            acc += data[p] * A[r, i]
                    elif r == 0:
                        cuda.atomic.add(faults, 0, 1)
                    p += sl
            part[tid] = acc
            cuda.syncthreads()
            stride = sl // 2
            while stride > 0:
                if s < stride:
                    part[tid] += part[tid + stride * rl]
                cuda.syncthreads()
                stride //= 2
            if valid and s == 0 and r < k:
                if split:
                    cuda.atomic.add(out, (r, j), part[tid])
                else:
                    out[r, j] = part[tid]
            cuda.syncthreads()

    @cuda.jit
    def ast_atomic_kernel(A, indptr, indices, data, segcol, segoff, seg_len, k, rl, sl,
                          t_lanes, nseg, out, faults):
        tid = cuda.threadIdx.x
        g = tid // t_lanes
        lane = tid - g * t_lanes
        r0 = lane % rl
        s = lane // rl
        seg = cuda.blockIdx.x * (nblock // t_lanes) + g
        if seg >= nseg:
            return
        n = out.shape[1]
        j = segcol[seg]
        first = segoff[j]
        lo = indptr[j] + (seg - first) * seg_len
        hi = min(lo + seg_len, indptr[j + 1])
        for q0 in range(0, k, rl):
            r = q0 + r0
            if r < k:
                a = A[r, j]  # the example's column of A, in a register
                p = lo + s
                while p < hi:
                    i = indices[p]
                    if i >= 0 and i < n:
                        cuda.atomic.add(out, (r, i), data[p] * a)
                    elif r == 0:
                        cuda.atomic.add(faults, 0, 1)
                    p += sl

    @cuda.jit
    def sddmm_kernel(A, B, indptr, indices, data, segcol, segoff, seg_len, k, rl, sl, t_lanes,
                     nseg, scale, out, faults):
        part = cuda.shared.array(nblock, real)
        steps = cuda.shared.array(ngroups_max, np.int64)
        tid = cuda.threadIdx.x
        ngroups = nblock // t_lanes
        g = tid // t_lanes
        lane = tid - g * t_lanes
        r0 = lane % rl
        s = lane // rl
        seg = cuda.blockIdx.x * ngroups + g
        n = A.shape[1]
        valid = seg < nseg
        lo = 0
        hi = 0
        j = 0
        if valid:
            j = segcol[seg]
            lo = indptr[j] + (seg - segoff[j]) * seg_len
            hi = min(lo + seg_len, indptr[j + 1])
        if lane == 0:
            steps[g] = (hi - lo + sl - 1) // sl
        b0 = real(0)  # the example's first row chunk of B, in a register
        if valid and r0 < k:
            b0 = B[r0, j]
        cuda.syncthreads()
        n_steps = 0
        for q in range(ngroups):
            n_steps = max(n_steps, steps[q])
        for step in range(n_steps):  # block-uniform: every thread reaches each syncthreads
            p = lo + step * sl + s
            live = valid and p < hi
            i = 0
            if live:
                i = indices[p]
                if i < 0 or i >= n:
                    live = False
                    if r0 == 0:
                        cuda.atomic.add(faults, 0, 1)
                        out[p] = real(0)
            acc = real(0)
            if live:
                if r0 < k:
                    acc = A[r0, i] * b0
                for q0 in range(rl, k, rl):
                    r = q0 + r0
                    if r < k:
                        acc += A[r, i] * B[r, j]
            part[tid] = acc
            cuda.syncthreads()
            stride = rl // 2
            while stride > 0:
                if r0 < stride:
                    part[tid] += part[tid + stride]
                cuda.syncthreads()
                stride //= 2
            if live and r0 == 0:
                v = part[tid]
                if scale:
                    v *= data[p]
                out[p] = v
            cuda.syncthreads()

    fns = (as_kernel, ast_atomic_kernel, sddmm_kernel)
    _KERNELS[key] = fns
    return fns


def _grid(nseg: int, t_lanes: int) -> int:
    return max(1, -(-int(nseg) // (BLOCK // t_lanes)))


def _empty_perm(like):
    return _xp(like).zeros(0, np.int32)


def gpu_mult_as(A, indptr, indices, data, plan, out, faults, *, perm=None):
    """``out = A * S`` (``A`` ``k x n``, ``out`` ``k x m``, both 2-D, any order); ``plan`` is
    :func:`segment_plan` of ``indptr`` with ``seg_len = sl * SEG_STEPS`` for this ``k``
    (:func:`gpu_layout`); with ``plan.split`` the caller zeroes ``out`` first.  ``perm``: read
    ``data[perm[p]]`` (the transposed index of :func:`transpose_index`).  ``faults`` (int32,
    ``(1,)``) counts out-of-range row indices."""
    k = A.shape[0]
    t, rl, sl, _ = gpu_layout(k)
    segcol, segoff, nseg, _split = plan
    kern = _build(A.dtype)[0]
    p = _empty_perm(indptr) if perm is None else perm
    _launch(kern, _grid(nseg, t), BLOCK, *_args(A, indptr, indices, data, p, segcol, segoff),
            sl * SEG_STEPS, k, rl, sl, t, nseg, *_args(out, faults))


def gpu_mult_ast_atomic(A, indptr, indices, data, plan, out, faults):
    """``out += A * S^T`` by atomic adds (``A`` ``k x m``, ``out`` ``k x n``, zeroed by the
    caller); ``plan`` as in :func:`gpu_mult_as`."""
    k = A.shape[0]
    t, rl, sl, _ = gpu_layout(k)
    segcol, segoff, nseg, _split = plan
    kern = _build(A.dtype)[1]
    _launch(kern, _grid(nseg, t), BLOCK, *_args(A, indptr, indices, data, segcol, segoff),
            sl * SEG_STEPS, k, rl, sl, t, nseg, *_args(out, faults))


def gpu_mult_ast_gather(A, index, data, plan, out, faults):
    """``out = A * S^T`` through the transposed index ``index`` (:func:`transpose_index`) and
    its segment plan: :func:`gpu_mult_as` over ``S^T`` (hot features split across groups)."""
    indptr_t, cols, perm = index
    gpu_mult_as(A, indptr_t, cols, data, plan, out, faults, perm=perm)


def gpu_sddmm(A, B, indptr, indices, data, plan, scale, out, faults):
    """``out[p] = dot(A[:, indices[p]], B[:, j]) (* data[p])`` for the nonzeros ``p`` of each
    column ``j`` (``A`` ``k x n``, ``B`` ``k x m``); ``plan`` as in :func:`gpu_mult_as`."""
    k = A.shape[0]
    t, rl, sl, _ = gpu_layout(k)
    segcol, segoff, nseg, _split = plan
    kern = _build(A.dtype)[2]
    _launch(kern, _grid(nseg, t), BLOCK, *_args(A, B, indptr, indices, data, segcol, segoff),
            sl * SEG_STEPS, k, rl, sl, t, nseg, bool(scale), *_args(out, faults))


# ---------------------------------------------------------------------------------------------
# micro-benchmarks of the GPU roofline

_BENCH: dict = {}


def _bench_kernels():
    if "k" in _BENCH:
        return _BENCH["k"]
    _cuda()

    @cuda.jit
    def triad(a, b, c, s):
        i = cuda.grid(1)
        step = cuda.gridsize(1)
        while i < a.shape[0]:
            a[i] = b[i] + s * c[i]
            i += step

    @cuda.jit
    def copy(a, b):
        i = cuda.grid(1)
        step = cuda.gridsize(1)
        while i < a.shape[0]:
            a[i] = b[i]
            i += step

    @cuda.jit
    def read(b, out):
        part = cuda.shared.array(256, np.float64)
        i = cuda.grid(1)
        step = cuda.gridsize(1)
        acc = 0.0
        while i < b.shape[0]:
            acc += b[i]
            i += step
        part[cuda.threadIdx.x] = acc
        cuda.syncthreads()
        if cuda.threadIdx.x == 0:
            tot = 0.0
            for q in range(cuda.blockDim.x):
                tot += part[q]
            cuda.atomic.add(out, 0, tot)

    def make_fma(real):
        @cuda.jit
        def fma(seed, n_iter, out):
            i = cuda.grid(1)
            x = seed[i % seed.shape[0]]
            a0 = x
            a1 = x + real(1)
            a2 = x + real(2)
            a3 = x + real(3)
            a4 = x + real(4)
            a5 = x + real(5)
            a6 = x + real(6)
            a7 = x + real(7)
            m = real(0.999999)
            c = real(1e-6)
            for _ in range(n_iter):
                a0 = a0 * m + c
                a1 = a1 * m + c
                a2 = a2 * m + c
                a3 = a3 * m + c
                a4 = a4 * m + c
                a5 = a5 * m + c
                a6 = a6 * m + c
                a7 = a7 * m + c
            out[i] = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))

        return fma

    ks = dict(triad=triad, copy=copy, read=read, fma32=make_fma(np.float32),
              fma64=make_fma(np.float64))
    _BENCH["k"] = ks
    return ks


#: FMAs per thread and iteration of :func:`gpu_fma` (8 independent chains).
FMA_CHAINS = 8


def gpu_stream(kind, a, b=None, c=None, out=None, *, blocks=0, threads=256):
    """Launch one streaming micro-benchmark over float64 device arrays: ``"triad"``
    (``a = b + 3 c``), ``"copy"`` (``a = b``) or ``"read"`` (``out[0] += sum(a)``)."""
    ks = _bench_kernels()
    blocks = blocks or max(1, min(-(-a.shape[0] // threads), 65535))
    if kind == "triad":
        ks["triad"][blocks, threads](*_args(a, b, c), 3.0)
    elif kind == "copy":
        ks["copy"][blocks, threads](*_args(a, b))
    elif kind == "read":
        ks["read"][blocks, threads](*_args(a, out))
    else:
        raise ValueError(f"unknown stream kernel {kind!r}")


def gpu_fma(seed, n_iter, out, *, blocks, threads=256):
    """The FMA loop: ``blocks x threads`` threads each run :data:`FMA_CHAINS` chains of
    ``n_iter`` multiply-adds on registers; returns the flops (``2 * FMA_CHAINS * n_iter`` per
    thread).  ``seed``'s dtype (float32/float64) picks the kernel; ``out`` has one entry per
    thread."""
    ks = _bench_kernels()
    kern = ks["fma32" if np.dtype(seed.dtype) == np.float32 else "fma64"]
    kern[blocks, threads](*_args(seed), int(n_iter), *_args(out))
    return 2.0 * FMA_CHAINS * n_iter * blocks * threads
