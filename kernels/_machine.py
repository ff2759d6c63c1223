"""Kernels that measure the machine: STREAM-like triad, streaming read, an FMA loop, and a
row-gather stream (the random-access floor of the sparse primitives).

They run on numba's threads (the same pool as the sparse kernels), so the measured ceilings are
those of the thread count the primitives use.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ._csc import _prefetch_rows
from ._threads import parallel_njit

__all__ = ["fma_loop", "gather_rows", "stream_read", "stream_triad"]


@parallel_njit(cache=True, fastmath=True, nogil=True)
def stream_triad(a, b, c, s, n_blocks):
    """``a = b + s * c`` (STREAM triad), blocked so each thread streams contiguous memory."""
    n = a.shape[0]
    step = (n + n_blocks - 1) // n_blocks
    for t in prange(n_blocks):
        lo = t * step
        hi = min(n, lo + step)
        for i in range(lo, hi):
            a[i] = b[i] + s * c[i]


@parallel_njit(cache=True, fastmath=True, nogil=True)
def stream_read(b, n_blocks):
    """Sum of ``b`` (a pure streaming read), blocked per thread; returns the sum."""
    n = b.shape[0]
    step = (n + n_blocks - 1) // n_blocks
    total = 0.0
    for t in prange(n_blocks):
        lo = t * step
        hi = min(n, lo + step)
        acc = b.dtype.type(0)
        for i in range(lo, hi):
            acc += b[i]
        total += acc
    return total


@parallel_njit(cache=True, fastmath=True, nogil=True)
def gather_rows(AT, idx, distance, n_threads):
    """Sum the rows ``AT[idx[p]]`` for every ``p`` (each thread a contiguous share of ``idx``),
    prefetching the row ``distance`` positions ahead (``0``: no prefetch).

    This is the memory access stream of ``A*S`` and ``SDDMM`` (``idx = S.indices``: one model
    row per nonzero, in example order) with nothing else: no index arithmetic beyond the
    gather, no output.  Its time is a floor for any kernel that visits the nonzeros in that
    order, whatever its arithmetic.  Returns one checksum per thread.
    """
    n = idx.shape[0]
    k = AT.shape[1]
    row_bytes = k * AT.itemsize
    out = np.zeros(n_threads, dtype=AT.dtype)
    for t in prange(n_threads):
        p0 = n * t // n_threads
        p1 = n * (t + 1) // n_threads
        acc = np.zeros(k, dtype=AT.dtype)
        for p in range(p0, p1):
            if distance > 0 and p + distance < p1:
                _prefetch_rows(AT, idx, p + distance, row_bytes)
            a = AT[np.uint64(idx[p])]
            for kk in range(k):
                acc[kk] += a[kk]
        out[t] = acc.sum()
    return out


def _make_fma_loop(lanes):
    """An FMA loop over ``lanes`` independent chains (a compile-time constant, so LLVM unrolls
    the lane loop into vector FMAs on registers-resident accumulators)."""

    @njit(cache=True, fastmath=True, nogil=True)
    def _chains(acc, n_iter, m, c):
        # The lane loop is vectorised; eight dependent FMAs per load/store keep the loop
        # FMA-bound rather than store-bound.
        for _ in range(n_iter):
            for lane in range(lanes):
                x = acc[lane]
                x = x * m + c
                x = x * m + c
                x = x * m + c
                x = x * m + c
                x = x * m + c
                x = x * m + c
                x = x * m + c
                x = x * m + c
                acc[lane] = x

    @parallel_njit(cache=True, fastmath=True, nogil=True)
    def fma_loop(seed, n_iter, m, c):
        n_threads = seed.shape[0]
        out = np.zeros(n_threads, dtype=seed.dtype)
        for t in prange(n_threads):
            acc = np.empty(lanes, dtype=seed.dtype)
            for lane in range(lanes):
                acc[lane] = seed[t] + lane
            _chains(acc, n_iter, m, c)
            out[t] = acc.sum()
        return out

    return fma_loop


# 256 bytes of independent chains per thread (8 AVX2 registers: 64 float32 or 32 float64 lanes):
# enough to cover FMA latency times the FMA units, few enough that nothing spills.  Measured on
# this machine's Zen 3 cores these reach the nominal peak (2 FMA units x 8/4 lanes x 2 flops).
_FMA = {
    np.dtype(np.float32): (_make_fma_loop(64), 64),
    np.dtype(np.float64): (_make_fma_loop(32), 32),
}


def fma_loop(seed, n_iter):
    """Run ``n_iter`` iterations of independent FMA chains on ``len(seed)`` threads.

    Returns ``(checksums, flops)``: one checksum per thread (keeps the work observable) and the
    number of floating-point operations performed (2 per FMA).
    """
    fn, lanes = _FMA[np.dtype(seed.dtype)]
    dt = seed.dtype.type
    out = fn(seed, n_iter, dt(0.999999), dt(1e-6))
    return out, 2 * 8 * lanes * n_iter * seed.shape[0]
