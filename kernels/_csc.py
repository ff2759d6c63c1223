"""numba CPU kernels over raw CSC arrays (one column = one example).

Every kernel takes raw arrays (``indptr``, ``indices``, ``data``, dense operands) and writes into
a caller-provided output; nothing here allocates per call except small partition vectors, and
nothing here validates (``roofline.gmat`` does that at the public boundary).

Dense layout: the dense operands are passed *transposed and C-contiguous*, i.e. a ``k x n``
matrix ``A`` stored in Fortran order is passed as ``AT = A.T`` with shape ``(n, k)``, so that one
column of ``A`` (one feature, or one example) is a contiguous run of ``k`` values.

Indices into the dense operands are cast to unsigned before subscripting: numba otherwise
emits a negative-index wraparound check on every signed subscript (measured here: ~25% of a
serial scatter loop).  The indices are validated non-negative at the gmat boundary.

Memory safety: gmat validates a matrix once and remembers it (with a sampled fingerprint), so
an in-place edit after validation can reach a kernel.  The primitive kernels therefore never
read or write outside their arrays whatever ``indptr`` and ``indices`` hold: a column whose
``indptr`` range is not inside the arrays is skipped, a row index out of range stops its
column (one unsigned compare and a never-taken branch per nonzero: measured within noise of
the unchecked loops, where a min/max pass per column cost 25% at k = 1), and the kernel
returns the count of such *faults* (0 for a valid matrix); gmat turns a non-zero count into a
``ValueError``.  The results are only meaningful when it is 0.

Parallel strategy (documented choices)
--------------------------------------
``A*S`` and ``SDDMM``
    Parallel over the columns (examples) of ``S``: each output column / nonzero is owned by one
    thread, so there are no write races.  The columns are cut into chunks of equal *nnz* (not
    equal column count), so power-law column lengths do not unbalance the threads.
``A*S^T``
    The output ``A*S^T`` is ``k x n_features``; iterating over examples scatters into feature
    columns, so two threads would race on hot features.  For rows of at most 128 bytes gmat
    uses :func:`csc_mult_t_blocked`: the nonzeros are first partitioned by block of output rows
    (each thread its own columns, written into disjoint slots), then each thread owns whole
    blocks, so the scatter happens inside an L2-resident block (see its docstring).  For wider
    rows (where the partition costs more than it saves) we partition the *feature (row) range*
    into one contiguous slab per thread, balanced by nnz (a sampled histogram of the row
    indices), and every thread scans all columns of ``S`` but only processes the nonzeros whose
    row falls in its slab (found by binary search in the sorted row indices of each column).
    Each output element is therefore written by exactly one thread, with no atomics, no
    private copies of the output and no transposed index to build.  The cost is that every
    thread reads ``indptr`` once and bisects each column (``O(m log nnz_col)`` per thread).
"""

from __future__ import annotations

import contextlib

import numba
import numpy as np
from numba import njit, prange

from ._prefetch import prefetch_row
from ._simd import lanes, vaxpy
from ._threads import parallel_njit, quiet_openmp

__all__ = [
    "AST_BLOCK_SHIFT",
    "N_ACC",
    "SLAB_SAMPLE",
    "check_csc_structure",
    "count_distinct_rows",
    "csc_fingerprint",
    "csc_mult",
    "csc_mult_t",
    "csc_mult_t_blocked",
    "csc_sddmm",
    "csc_sddmm_vec",
    "nnz_chunks",
    "nnz_chunks_into",
    "row_slabs",
    "row_slabs_into",
    "default_threads",
    "limit_threads",
]

_FLAGS = dict(cache=True, nogil=True, fastmath=True)


@njit(cache=True, nogil=True, inline="always")
def _check_columns(indptr, indices, data, n_rows, check_finite, j0, j1):
    """First defect in columns ``j0:j1`` as ``(code, column, position)``; code 0 = none."""
    end = indptr[indptr.shape[0] - 1]
    for j in range(j0, j1):
        lo = indptr[j]
        hi = indptr[j + 1]
        if hi < lo or hi > end:  # decreasing here or further on: never read past the arrays
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


@parallel_njit(cache=True, nogil=True)
def check_csc_structure(indptr, indices, data, n_rows, check_finite):
    """Scan a CSC structure once, in parallel over equal column ranges.

    Returns ``(code, column, position)`` of the first defect (lowest column): code 0 = valid,
    1 = indptr decreasing, 2 = row index out of range, 3 = unsorted/duplicate rows within a
    column, 4 = non-finite value.  The column ranges do not depend on ``indptr`` (which is
    itself being checked), so a malformed ``indptr`` cannot make the scan skip columns; the
    caller checks ``indptr[0] == 0`` and that ``indptr[-1]`` fits the arrays first.
    """
    m = indptr.shape[0] - 1
    n_parts = min(max(m, 1), 64)
    codes = np.zeros(n_parts, dtype=np.int64)
    cols = np.full(n_parts, -1, dtype=np.int64)
    poss = np.full(n_parts, -1, dtype=np.int64)
    for t in prange(n_parts):
        j0 = (m * t) // n_parts
        j1 = (m * (t + 1)) // n_parts
        c, j, p = _check_columns(indptr, indices, data, n_rows, check_finite, j0, j1)
        codes[t] = c
        cols[t] = j
        poss[t] = p
    for t in range(n_parts):
        if codes[t] != 0:
            return codes[t], cols[t], poss[t]
    return 0, -1, -1


#: Entries of ``indptr`` and of ``indices`` that :func:`csc_fingerprint` samples.
FINGERPRINT_SAMPLES = 64

_FNV_OFFSET = np.uint64(14695981039346656037)
_FNV_PRIME = np.uint64(1099511628211)


@njit(cache=True, nogil=True)
def csc_fingerprint(indptr, indices):
    """A 64-bit digest (FNV-1a) of a CSC structure's ``len(indptr)``, ``indptr[0]``, nnz
    (``indptr[-1]``), and a strided sample of ``FINGERPRINT_SAMPLES`` entries of ``indptr`` and
    of ``indices[:nnz]`` (the last of each included).

    Costs well under a microsecond at any size: it tells cheaply whether a validated matrix
    still looks like it did (whole-array edits and a changed nnz always change it; an edit of a
    few entries off the sample does not, so kernels must not trust the structure blindly).
    """
    h = _FNV_OFFSET
    m1 = indptr.shape[0]
    h = (h ^ np.uint64(m1)) * _FNV_PRIME
    if m1 == 0:
        return h
    step = max(1, m1 // FINGERPRINT_SAMPLES)
    for t in range(0, m1, step):
        h = (h ^ np.uint64(indptr[t])) * _FNV_PRIME
    nnz = indptr[m1 - 1]
    h = (h ^ np.uint64(nnz)) * _FNV_PRIME
    n = min(max(nnz, 0), indices.shape[0])
    if n > 0:
        step = max(1, n // FINGERPRINT_SAMPLES)
        for t in range(0, n, step):
            h = (h ^ np.uint64(indices[t])) * _FNV_PRIME
        h = (h ^ np.uint64(indices[n - 1])) * _FNV_PRIME
    return h


SLAB_SAMPLE = 4096  # row indices sampled to place the A*S^T row slabs (quantile error ~1.5%)


@njit(cache=True, nogil=True)
def nnz_chunks_into(indptr, bounds):
    """Fill ``bounds`` (length ``n_chunks + 1``) with column boundaries such that chunk ``c`` =
    columns ``bounds[c]:bounds[c+1]`` holds about ``nnz / n_chunks`` nonzeros (columns are never
    split).  Returns ``bounds``."""
    n_chunks = bounds.shape[0] - 1
    m = indptr.shape[0] - 1
    bounds[0] = 0
    nnz = indptr[m]
    j = 0
    for c in range(1, n_chunks):
        target = (nnz * c) // n_chunks
        # smallest j with indptr[j] >= target
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
def nnz_chunks(indptr, n_chunks):
    """Allocating form of :func:`nnz_chunks_into`."""
    return nnz_chunks_into(indptr, np.empty(n_chunks + 1, dtype=np.int64))


@njit(cache=True, nogil=True)
def row_slabs_into(indices, nnz, n_rows, bounds, sample):
    """Fill ``bounds`` (length ``n_slabs + 1``) with row boundaries splitting ``[0, n_rows)``
    into contiguous slabs of about equal nnz, estimated from a strided sample of at most
    ``len(sample)`` row indices (``sample`` is scratch space).  Returns ``bounds``."""
    n_slabs = bounds.shape[0] - 1
    bounds[0] = 0
    bounds[n_slabs] = n_rows
    if n_slabs == 1 or nnz == 0:
        for s in range(1, n_slabs):
            bounds[s] = (n_rows * s) // n_slabs
        return bounds
    cap = sample.shape[0]
    step = max(1, (nnz + cap - 1) // cap)
    ns = (nnz + step - 1) // step
    for t in range(ns):
        sample[t] = indices[t * step]
    sample[:ns].sort()
    for s in range(1, n_slabs):
        b = sample[(ns * s) // n_slabs]
        if b < bounds[s - 1]:
            b = bounds[s - 1]
        if b > n_rows:  # an out-of-range index (the kernel reports it): keep slabs in range
            b = n_rows
        bounds[s] = b
    return bounds


@njit(cache=True, nogil=True)
def row_slabs(indices, nnz, n_rows, n_slabs):
    """Allocating form of :func:`row_slabs_into`."""
    return row_slabs_into(indices, nnz, n_rows, np.empty(n_slabs + 1, dtype=np.int64),
                          np.empty(min(max(nnz, 1), SLAB_SAMPLE), dtype=np.int64))


# Prefetch distance in nonzeros: far enough ahead to cover main-memory latency (~150 ns here)
# at a few ns per nonzero, near enough that the prefetched lines are still in L1/L2 when used.
PREFETCH_DISTANCE = 16
# Rotating accumulators per output column in A*S (a power of two).
N_ACC = 4


@njit(inline="always", **_FLAGS)
def _prefetch_rows(X, indices, q, row_bytes):
    """Prefetch every cache line of row ``indices[q]`` of ``X`` (``row_bytes`` long)."""
    r = indices[q]
    for off in range(0, row_bytes, 64):
        prefetch_row(X, r, off)


@parallel_njit(**_FLAGS)
def csc_mult(AT, indptr, indices, data, outT, bounds, scratch):
    """``outT[j, :] = sum_p data[p] * AT[indices[p], :]`` over the nonzeros ``p`` of column ``j``.

    This is ``C = A * S`` with ``AT = A.T`` (``n x k``) and ``outT = C.T`` (``m x k``).  The row
    of ``AT`` needed ``PREFETCH_DISTANCE`` nonzeros ahead is prefetched.  For small ``k`` the
    running sum of a column rotates over ``N_ACC`` accumulator rows (summed at the end of the
    column): one accumulator would chain every nonzero's FMA behind the previous one's store.
    ``scratch`` holds them: shape ``(n_chunks, N_ACC, k)``.  Returns the number of faulty
    columns (see the module docstring; their output is zero).
    """
    k = AT.shape[1]
    un = np.uint64(AT.shape[0])
    limit = min(indices.shape[0], data.shape[0])
    row_bytes = k * AT.itemsize
    n_acc = N_ACC if k <= 32 else 1
    mask = n_acc - 1
    n_chunks = bounds.shape[0] - 1
    faults = 0
    for c in prange(n_chunks):
        acc = scratch[c]
        p_end = min(indptr[bounds[c + 1]], limit) - PREFETCH_DISTANCE
        for j in range(bounds[c], bounds[c + 1]):
            for q in range(n_acc):
                for kk in range(k):
                    acc[q, kk] = 0
            lo = indptr[j]
            hi = indptr[j + 1]
            if lo < 0 or hi < lo or hi > limit:
                faults += 1
                hi = lo
            for p in range(lo, hi):
                if p < p_end:
                    _prefetch_rows(AT, indices, p + PREFETCH_DISTANCE, row_bytes)
                i = np.uint64(indices[p])
                if i >= un:
                    faults += 1
                    break
                v = data[p]
                a = AT[i]
                o = acc[(p - lo) & mask]
                for kk in range(k):
                    o[kk] += v * a[kk]
            o = outT[j]
            for kk in range(k):
                o[kk] = acc[0, kk]
            for q in range(1, n_acc):
                for kk in range(k):
                    o[kk] += acc[q, kk]
    return faults


# The k = 1 kernels are compiled without fastmath: with it LLVM vectorises the gather
# reduction with AVX2 gather instructions, which are slower than scalar loads on AMD (measured
# here: 14 ms against 5 ms for the 4M-nonzero A*S).  Their nonzero loops run over unsigned
# positions (numba's wraparound check on a signed subscript costs as much as the load), and
# they do not prefetch: on power-law data most of a vector's gathers hit cache and the
# prefetch's extra index load and branch cost more than the misses it hides (measured: 6.5 ms
# with against 5.1 ms without, one thread).
_FLAGS_VEC = dict(cache=True, nogil=True)


@parallel_njit(**_FLAGS)
def csc_mult_t(AT, indptr, indices, data, outT, slabs, seen):
    """``outT[i, :] = sum_{(i, j) in S} data * AT[j, :]``: ``C = A * S^T`` with ``AT = A.T``
    (``m x k``) and ``outT = C.T`` (``n x k``).

    Thread ``t`` owns output rows ``slabs[t]:slabs[t+1]``.  Output rows are not zeroed up front
    (a full extra pass over a ``k x n`` output that is mostly written by scattered updates
    anyway): the first nonzero that touches a row *writes* it, later ones accumulate, and a final
    sequential pass zeroes the rows no nonzero touched.  The output row needed
    ``PREFETCH_DISTANCE`` nonzeros ahead (when it belongs to the thread's slab) is prefetched.
    ``seen`` (``n`` bytes) is scratch space for the first-touch marks.  Returns a count of
    faults (columns outside the arrays, row indices out of range; see the module docstring).
    """
    k = AT.shape[1]
    n = outT.shape[0]
    limit = min(indices.shape[0], data.shape[0])
    row_bytes = k * outT.itemsize
    m = indptr.shape[0] - 1
    nnz = min(indptr[m], limit)
    n_slabs = slabs.shape[0] - 1
    faults = 0
    for s in prange(n_slabs):
        r0 = slabs[s]
        r1 = slabs[s + 1]
        width = np.uint64(r1 - r0)
        for i in range(r0, r1):
            seen[i] = 0
        for j in range(m):
            lo = indptr[j]
            hi = indptr[j + 1]
            if lo < 0 or hi < lo or hi > limit:
                faults += 1
                continue
            lo = _first_at_least(indices, lo, hi, r0)
            a = AT[j]
            for p in range(lo, hi):
                i = indices[p]
                if np.uint64(i - r0) >= width:  # past the slab (or out of range: a fault)
                    if i < 0 or i >= n:
                        faults += 1
                    break
                q = p + PREFETCH_DISTANCE
                if q < nnz:
                    iq = indices[q]
                    if iq >= r0 and iq < r1:
                        _prefetch_rows(outT, indices, q, row_bytes)
                v = data[p]
                ui = np.uint64(i)
                o = outT[ui]
                if seen[ui]:
                    for kk in range(k):
                        o[kk] += v * a[kk]
                else:
                    seen[ui] = 1
                    for kk in range(k):
                        o[kk] = v * a[kk]
        for i in range(r0, r1):
            if not seen[i]:
                for kk in range(k):
                    outT[i, kk] = 0
    return faults


#: Output rows per block of :func:`csc_mult_t_blocked` (log2): 1024 rows of up to 128 bytes
#: stay in L2 while the block's nonzeros accumulate into them (measured here, float32 k = 4..32
#: on 2^20 x 100k Zipf data: 2^10 and 2^11 were best, 2^14 up to 1.3x slower).
AST_BLOCK_SHIFT = 10


@parallel_njit(**_FLAGS)
def csc_mult_t_blocked(AT, indptr, indices, data, dbits, outT, bounds, shift, counts, keys,
                       vals, starts, owners):
    """``C = A * S^T`` (as :func:`csc_mult_t`) by output blocks: a two-pass partition of the
    nonzeros by the block of ``2**shift`` output rows they update, then one block at a time.

    1. Each thread counts the nonzeros of its columns ``bounds[t]:bounds[t+1]`` per block.
    2. It writes each of them as one entry ``(column << shift) | (row % 2**shift)`` into
       ``keys`` at its block's next slot (block-major, threads in order, so every block's
       entries are contiguous and, within a thread's share, in column order).  With
       ``dbits`` non-empty (float32: ``data`` viewed as ``uint32``) the value's bits ride in
       the key's upper 32 bits (one 8-byte entry, one write stream per block; needs
       ``m << shift < 2**32``); otherwise they go to ``vals``.
    3. Each thread owns a contiguous range of blocks, balanced by nonzeros plus output rows
       (both cost a pass): it zeroes a block's output rows (contiguous, so they now sit in
       L2) and adds ``v * AT[column]`` into them for the block's entries, prefetching the
       ``AT`` row 16 entries ahead.

    Every output row is written by one thread and the output is written block by block in
    order (its first touch, for a fresh buffer, is sequential).  The ``k``-wide row updates use
    explicit SIMD (:mod:`._simd`): for ``k * itemsize <= 128`` this is 1.3-1.7x faster than
    :func:`csc_mult_t`'s row slabs, which scatter into the whole output.  Scratch: ``counts``
    ``(T, n_blocks)`` int64, ``keys`` (``nnz``) uint64, ``vals`` (``nnz``, or empty when
    packed), ``starts`` (``n_blocks + 1``) and ``owners`` (``T + 1``) int64.
    """
    k = AT.shape[1]
    lw = lanes(AT)
    kv = k - k % lw
    n = outT.shape[0]
    n_threads = bounds.shape[0] - 1
    n_blocks = counts.shape[1]
    sh = np.uint64(shift)
    low = np.uint64((1 << shift) - 1)
    packed = dbits.shape[0] > 0
    limit = min(indices.shape[0], data.shape[0])
    if packed:
        limit = min(limit, dbits.shape[0])
    un = np.uint64(n)
    faults = 0
    for t in prange(n_threads):
        c = counts[t]
        for b in range(n_blocks):
            c[b] = 0
        for j in range(bounds[t], bounds[t + 1]):
            lo = indptr[j]
            hi = indptr[j + 1]
            if lo < 0 or hi < lo or hi > limit:
                faults += 1
                continue
            for p in range(lo, hi):
                i = np.uint64(indices[p])
                if i < un:
                    c[i >> sh] += 1
                else:
                    faults += 1
    total = 0
    for b in range(n_blocks):
        starts[b] = total
        for t in range(n_threads):
            cnt = counts[t, b]
            counts[t, b] = total
            total += cnt
    starts[n_blocks] = total
    if total > keys.shape[0] or (not packed and total > vals.shape[0]):
        return faults + 1  # overlapping columns (indptr edited): more entries than slots
    for t in prange(n_threads):
        c = counts[t]
        for j in range(bounds[t], bounds[t + 1]):
            jj = np.uint64(j) << sh
            lo = indptr[j]
            hi = indptr[j + 1]
            if lo < 0 or hi < lo or hi > limit:
                continue
            for p in range(lo, hi):
                i = np.uint64(indices[p])
                if i >= un:
                    continue
                b = i >> sh
                q = c[b]
                c[b] = q + 1
                if packed:
                    keys[q] = jj | (i & low) | (np.uint64(dbits[p]) << np.uint64(32))
                else:
                    keys[q] = jj | (i & low)
                    vals[q] = data[p]
    # owners: contiguous block ranges of about equal work (nonzeros + output rows zeroed)
    rows = 1 << shift
    work = total + n
    owners[0] = 0
    b = 0
    for t in range(1, n_threads):
        target = (work * t) // n_threads
        while b < n_blocks and starts[b] + min(b * rows, n) < target:
            b += 1
        owners[t] = b
    owners[n_threads] = n_blocks
    key_mask = np.uint64(0xFFFFFFFF) if packed else ~np.uint64(0)
    for t in prange(n_threads):
        for b in range(owners[t], owners[t + 1]):
            r0 = b * rows
            r1 = min(n, r0 + rows)
            outT[r0:r1] = 0
            q1 = starts[b + 1]
            for q in range(starts[b], q1):
                if q + PREFETCH_DISTANCE < q1:
                    prefetch_row(AT, (keys[q + PREFETCH_DISTANCE] & key_mask) >> sh, 0)
                e = keys[q]
                key = e & key_mask
                j = key >> sh
                i = np.uint64(r0) + (key & low)
                if packed:
                    v = np.uint32(e >> np.uint64(32)).view(np.float32)
                else:
                    v = vals[q]
                for c0 in range(0, kv, lw):
                    vaxpy(outT, i, AT, j, c0, v)
                for kk in range(kv, k):
                    outT[i, kk] += v * AT[j, kk]
    return faults


@njit(cache=True, nogil=True, inline="always")
def _first_at_least(indices, lo, hi, r0):
    """First position in ``[lo, hi)`` whose (sorted) row index is ``>= r0``."""
    if hi == lo or indices[lo] >= r0:
        return lo
    while lo < hi:
        mid = (lo + hi) // 2
        if indices[mid] < r0:
            lo = mid + 1
        else:
            hi = mid
    return lo


@parallel_njit(**_FLAGS_VEC)
def csc_sddmm_vec(a, b, indptr, indices, data, out, bounds, scale):
    """``k = 1`` case of :func:`csc_sddmm`: ``out[p] = a[indices[p]] * b[j] (* data[p])``.
    Returns the number of faulty columns (their values are left as they were)."""
    un = np.uint64(a.shape[0])
    limit = min(indices.shape[0], data.shape[0], out.shape[0])
    n_chunks = bounds.shape[0] - 1
    faults = 0
    for c in prange(n_chunks):
        for j in range(bounds[c], bounds[c + 1]):
            bj = b[j]
            lo = indptr[j]
            hi = indptr[j + 1]
            if lo < 0 or hi < lo or hi > limit:
                faults += 1
                hi = lo
            for p in range(np.uint64(lo), np.uint64(hi)):
                i = np.uint64(indices[p])
                if i >= un:
                    faults += 1
                    break
                if scale:
                    out[p] = a[i] * bj * data[p]
                else:
                    out[p] = a[i] * bj
    return faults


@parallel_njit(**_FLAGS)
def csc_sddmm(AT, BT, indptr, indices, data, out, bounds, scale):
    """``out[p] = dot(AT[indices[p]], BT[j]) * (data[p] if scale else 1)`` for nonzero ``p`` of
    column ``j``: SDDMM with ``A`` (``k x n``) and ``B`` (``k x m``) passed transposed
    (``k >= 1``; gmat handles ``k = 0``).  Returns the number of faulty columns (their values
    are left as they were)."""
    k = AT.shape[1]
    un = np.uint64(AT.shape[0])
    limit = min(indices.shape[0], data.shape[0], out.shape[0])
    row_bytes = k * AT.itemsize
    n_chunks = bounds.shape[0] - 1
    faults = 0
    for c in prange(n_chunks):
        p_end = min(indptr[bounds[c + 1]], limit) - PREFETCH_DISTANCE
        for j in range(bounds[c], bounds[c + 1]):
            b = BT[j]
            lo = indptr[j]
            hi = indptr[j + 1]
            if lo < 0 or hi < lo or hi > limit:
                faults += 1
                hi = lo
            for p in range(lo, hi):
                if p < p_end:
                    _prefetch_rows(AT, indices, p + PREFETCH_DISTANCE, row_bytes)
                i = np.uint64(indices[p])
                if i >= un:
                    faults += 1
                    break
                a = AT[i]
                # from zero over all of k: a loop from 1 vectorises with a peeled head and
                # ran 1.2-1.3x slower here (16 x 2^20 and 128 x 2^20 float32, Zipf)
                acc = AT.dtype.type(0)
                for kk in range(k):
                    acc += a[kk] * b[kk]
                out[p] = acc * data[p] if scale else acc
    return faults


def default_threads() -> int:
    """The number of threads the kernels run on (numba's current setting)."""
    quiet_openmp()  # asking numba starts its OpenMP pool
    return numba.get_num_threads()


@contextlib.contextmanager
def limit_threads(n: int | None):
    """Run the parallel kernels called inside the block on at most ``n`` threads.

    numba's thread count is per calling thread, so this affects no other thread.  With
    ``n = 1`` a parallel kernel runs on the calling thread without waking numba's pool (tens
    of microseconds saved per call).  ``None`` changes nothing.
    """
    quiet_openmp()
    prev = numba.get_num_threads()
    if n is None or n >= prev:
        yield prev
        return
    numba.set_num_threads(max(1, int(n)))
    try:
        yield numba.get_num_threads()
    finally:
        numba.set_num_threads(prev)


@njit(cache=True, nogil=True)
def count_distinct_rows(indices, nnz, n_rows):
    """Number of distinct row indices among ``indices[:nnz]`` (a bitmap pass)."""
    seen = np.zeros(n_rows, dtype=np.bool_)
    count = 0
    for p in range(nnz):
        i = indices[p]
        if not seen[i]:
            seen[i] = True
            count += 1
    return count
