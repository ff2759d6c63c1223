"""numba CPU kernels over raw CSC arrays (one column = one example).

Every kernel takes raw arrays (``indptr``, ``indices``, ``data``, dense operands) and writes into
a caller-provided output; nothing here allocates per call except small partition vectors, and
nothing here validates (``roofline.gmat`` does that at the public boundary).

Dense layout: the dense operands are passed *transposed and C-contiguous*, i.e. a ``k x n``
matrix ``A`` stored in Fortran order is passed as ``AT = A.T`` with shape ``(n, k)``, so that one
column of ``A`` (one feature, or one example) is a contiguous run of ``k`` values.

Parallel strategy (documented choices)
--------------------------------------
``A*S`` and ``SDDMM``
    Parallel over the columns (examples) of ``S``: each output column / nonzero is owned by one
    thread, so there are no write races.  The columns are cut into chunks of equal *nnz* (not
    equal column count), so power-law column lengths do not unbalance the threads.
``A*S^T``
    The output ``A*S^T`` is ``k x n_features``; iterating over examples scatters into feature
    columns, so two threads would race on hot features.  We partition the *feature (row) range*
    into one contiguous slab per thread, balanced by nnz (a sampled histogram of the row
    indices), and every thread scans all columns of ``S`` but only processes the nonzeros whose
    row falls in its slab (found by binary search in the sorted row indices of each column).
    Each output element is therefore written by exactly one thread, with no atomics, no
    private copies of the output and no transposed index to build.  The cost is that every
    thread reads ``indptr`` once and bisects each column (``O(m log nnz_col)`` per thread).
"""

from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

__all__ = [
    "check_csc_structure",
    "csc_mult",
    "csc_mult_t",
    "csc_sddmm",
    "nnz_chunks",
    "row_slabs",
    "default_threads",
]

_FLAGS = dict(cache=True, nogil=True, fastmath=True)


@njit(cache=True, nogil=True)
def check_csc_structure(indptr, indices, data, n_rows, check_finite):
    """Scan a CSC structure once.

    Returns ``(code, column, position)``: code 0 = valid, 1 = indptr decreasing,
    2 = row index out of range, 3 = unsorted/duplicate rows within a column,
    4 = non-finite value.
    """
    m = indptr.shape[0] - 1
    for j in range(m):
        lo = indptr[j]
        hi = indptr[j + 1]
        if hi < lo:
            return 1, j, lo
        prev = -1
        for p in range(lo, hi):
            i = indices[p]
            if i < 0 or i >= n_rows:
                return 2, j, p
            if i <= prev:
                return 3, j, p
            prev = i
            if check_finite and not np.isfinite(data[p]):
                return 4, j, p
    return 0, -1, -1


@njit(cache=True, nogil=True)
def nnz_chunks(indptr, n_chunks):
    """Column boundaries ``b`` (length ``n_chunks + 1``) so that chunk ``c`` = columns
    ``b[c]:b[c+1]`` holds about ``nnz / n_chunks`` nonzeros."""
    m = indptr.shape[0] - 1
    bounds = np.empty(n_chunks + 1, dtype=np.int64)
    bounds[0] = 0
    nnz = indptr[m]
    j = 0
    for c in range(1, n_chunks):
        target = (nnz * c) // n_chunks
        # smallest j with indptr[j] >= target (columns are never split)
        lo = j
        hi = m
        while lo < hi:
            mid = (lo + hi) // 2
            if indptr[mid] < target:
                lo = mid + 1
            else:
                hi = mid
        j = lo
        bounds[c] = j
    bounds[n_chunks] = m
    return bounds


@njit(cache=True, nogil=True)
def row_slabs(indices, nnz, n_rows, n_slabs):
    """Row boundaries (length ``n_slabs + 1``) splitting ``[0, n_rows)`` into contiguous slabs of
    about equal nnz, estimated from a strided sample of at most 65536 row indices."""
    bounds = np.empty(n_slabs + 1, dtype=np.int64)
    bounds[0] = 0
    bounds[n_slabs] = n_rows
    if n_slabs == 1 or nnz == 0:
        for s in range(1, n_slabs):
            bounds[s] = (n_rows * s) // n_slabs
        return bounds
    step = max(1, nnz // 65536)
    ns = (nnz + step - 1) // step
    sample = np.empty(ns, dtype=np.int64)
    for t in range(ns):
        sample[t] = indices[t * step]
    sample.sort()
    for s in range(1, n_slabs):
        b = sample[(ns * s) // n_slabs]
        if b < bounds[s - 1]:
            b = bounds[s - 1]
        bounds[s] = b
    return bounds


@njit(parallel=True, **_FLAGS)
def csc_mult(AT, indptr, indices, data, outT, bounds):
    """``outT[j, :] = sum_p data[p] * AT[indices[p], :]`` over the nonzeros ``p`` of column ``j``.

    This is ``C = A * S`` with ``AT = A.T`` (``n x k``) and ``outT = C.T`` (``m x k``).
    """
    k = AT.shape[1]
    n_chunks = bounds.shape[0] - 1
    for c in prange(n_chunks):
        for j in range(bounds[c], bounds[c + 1]):
            o = outT[j]
            for kk in range(k):
                o[kk] = 0
            for p in range(indptr[j], indptr[j + 1]):
                v = data[p]
                a = AT[indices[p]]
                for kk in range(k):
                    o[kk] += v * a[kk]


@njit(parallel=True, **_FLAGS)
def csc_mult_t(AT, indptr, indices, data, outT, slabs):
    """``outT[i, :] = sum_{(i, j) in S} data * AT[j, :]``: ``C = A * S^T`` with ``AT = A.T``
    (``m x k``) and ``outT = C.T`` (``n x k``).  Thread ``t`` owns output rows ``slabs[t]:slabs[t+1]``.
    """
    k = AT.shape[1]
    m = indptr.shape[0] - 1
    n_slabs = slabs.shape[0] - 1
    for s in prange(n_slabs):
        r0 = slabs[s]
        r1 = slabs[s + 1]
        for i in range(r0, r1):
            for kk in range(k):
                outT[i, kk] = 0
        for j in range(m):
            lo = indptr[j]
            hi = indptr[j + 1]
            if lo == hi:
                continue
            # first nonzero with row >= r0
            if indices[lo] < r0:
                a0 = lo
                b0 = hi
                while a0 < b0:
                    mid = (a0 + b0) // 2
                    if indices[mid] < r0:
                        a0 = mid + 1
                    else:
                        b0 = mid
                lo = a0
            a = AT[j]
            for p in range(lo, hi):
                i = indices[p]
                if i >= r1:
                    break
                v = data[p]
                o = outT[i]
                for kk in range(k):
                    o[kk] += v * a[kk]


@njit(parallel=True, **_FLAGS)
def csc_sddmm(AT, BT, indptr, indices, data, out, bounds, scale):
    """``out[p] = dot(AT[indices[p]], BT[j]) * (data[p] if scale else 1)`` for nonzero ``p`` of
    column ``j``: SDDMM with ``A`` (``k x n``) and ``B`` (``k x m``) passed transposed."""
    k = AT.shape[1]
    n_chunks = bounds.shape[0] - 1
    for c in prange(n_chunks):
        for j in range(bounds[c], bounds[c + 1]):
            b = BT[j]
            for p in range(indptr[j], indptr[j + 1]):
                a = AT[indices[p]]
                acc = a[0] * b[0]  # k >= 1 (gmat handles k == 0)
                for kk in range(1, k):
                    acc += a[kk] * b[kk]
                out[p] = acc * data[p] if scale else acc


def default_threads() -> int:
    """The number of threads the kernels run on (numba's current setting)."""
    return numba.get_num_threads()
