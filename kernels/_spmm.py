"""Register-blocked sparse times dense, layout conversion and the transposed index (numba CPU).

The gather ``outT[j, :] = sum_p data[p] * XT[indices[p], :]`` over the entries ``p`` of
compressed column ``j`` is the inner loop of ``A*S`` (over ``S``'s CSC arrays) and of ``A*S^T``
(over the CSR arrays of ``S``, its *transposed index*).  :func:`csc_gather_mult` runs it with
the running sums in vector registers: for each lane block of up to ``GATHER_VECTORS`` cache
lines of the output column (``W = 64 / itemsize`` values per line) it walks the column's
entries once, loading each entry's lines of ``XT`` and fusing them into the accumulators, and
stores the column once at the end.  :func:`~roofline.kernels.csc_mult` instead keeps its
accumulators in memory, whose load / FMA / store chain per entry runtime-``k`` loops cannot
break (measured here, 2^20 x 100k Zipf float32 on two threads: 1.3-1.7x slower at k = 16).
The entries' rows are prefetched ``GATHER_DISTANCE`` entries ahead across column boundaries.

At ``k = 1`` :func:`csc_gather_vec` is the sparse-times-vector kernel of ``A*S`` (two running
sums per column) and :func:`csc_scatter_vec` that of ``A*S^T`` (row slabs: ``S`` read once, no
private copies).  :func:`csc_gather_mult_checked` is the gather over a kept transposed index
that also proves, in the same pass, that the matrix it was built from is unchanged.

The other kernels give gmat every dense layout at the speed of the preferred one:
:func:`transpose_into` (a tiled parallel transposition, for C-ordered dense operands and
outputs), :func:`csc_transpose_index` (the CSR arrays of a CSC matrix, by counting sort) and
:func:`arrays_equal` (the exact check that a kept copy is still current).

As in :mod:`._csc`, nothing here validates, yet nothing reads or writes outside its arrays
whatever the index arrays hold: an entry whose index is out of range reads row 0 instead and
makes its column count as a fault (the column's result is then meaningless).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from ._csc import _first_at_least
from ._prefetch import prefetch_row
from ._simd import lanes
from ._threads import parallel_njit

__all__ = [
    "GATHER_DISTANCE",
    "GATHER_VECTORS",
    "SCATTER_DISTANCE",
    "TRANSPOSE_TILE",
    "arrays_equal",
    "csc_gather_mult",
    "csc_gather_mult_checked",
    "csc_gather_vec",
    "csc_scatter_vec",
    "csc_transpose_index",
    "transpose_into",
]

_FLAGS = dict(cache=True, nogil=True, fastmath=True)
_LINE = 64

#: Entries ahead whose rows :func:`csc_gather_mult` prefetches.
GATHER_DISTANCE = 16
#: Cache lines of the output column one pass over a column's entries accumulates in registers
#: (8 lines: 8 AVX-512 registers, or 16 AVX2 ones).
GATHER_VECTORS = 8
#: Entries ahead whose output row :func:`csc_scatter_vec` prefetches (measured here, one thread's
#: CPU time on 2^20 x 100k Zipf and uniform data: 96 made the float64 scatter 1.3-2.1x faster
#: and left float32 within noise; 16 gained nothing, 48 half as much).
SCATTER_DISTANCE = 96
#: Entries the checked gathers compare at a time: the compare of a run of gathered columns
#: waits until their entries reach this many, so it runs as one vectorised stretch (columns of
#: a transposed index are short: ~4 entries on 2^20 x 100k data).
CHECK_BLOCK = 512


def _intp(context, builder, val, ty):
    return context.cast(builder, val, ty, types.intp)


@intrinsic
def _gather_block(typingctx, outT, j, XT, indices, data, lo, hi, p_end, dist, off, nv):
    """``outT[j, off:off + nv*W] = sum_{p in [lo, hi)} data[p] * XT[indices[p], off:off+nv*W]``
    with ``nv`` (a literal) vector accumulators; rows ``indices[p + dist]`` are prefetched while
    ``p < p_end``.  Returns True when an index was out of range (row 0 was read instead)."""
    if not isinstance(nv, types.IntegerLiteral):
        return None
    for arr in (outT, XT):
        if not (isinstance(arr, types.Array) and arr.ndim == 2
                and isinstance(arr.dtype, types.Float)):
            return None
    if outT.dtype != XT.dtype or XT.layout != "C":
        return None
    n_vec = nv.literal_value
    sig = types.boolean(outT, j, XT, indices, data, lo, hi, p_end, dist, off, nv)

    def codegen(context, builder, signature, args):
        o_ty, j_ty, x_ty, i_ty, d_ty, lo_ty, hi_ty, pe_ty, di_ty, off_ty, _ = signature.args
        dt = x_ty.dtype
        isz = dt.bitwidth // 8
        elt = context.get_value_type(dt)
        vecty = ir.VectorType(elt, _LINE // isz)
        width = vecty.count
        intp = cgutils.intp_t
        X = context.make_array(x_ty)(context, builder, args[2])
        n_rows = cgutils.unpack_tuple(builder, X.shape)[0]
        x_stride = cgutils.unpack_tuple(builder, X.strides)[0]
        x_base = builder.ptrtoint(X.data, intp)
        ind_ptr = context.make_array(i_ty)(context, builder, args[3]).data
        dat_ptr = context.make_array(d_ty)(context, builder, args[4]).data
        lo = _intp(context, builder, args[5], lo_ty)
        hi = _intp(context, builder, args[6], hi_ty)
        p_end = _intp(context, builder, args[7], pe_ty)
        dist = _intp(context, builder, args[8], di_ty)
        off_b = builder.mul(_intp(context, builder, args[9], off_ty), intp(isz))
        zero = ir.Constant(vecty, None)
        accs = [cgutils.alloca_once_value(builder, zero) for _ in range(n_vec)]
        bad = cgutils.alloca_once_value(builder, ir.Constant(ir.IntType(1), 0))
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        pf = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
            "llvm.prefetch.p0")
        fma = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(vecty, [vecty, vecty, vecty]),
            f"llvm.fmuladd.v{width}f{dt.bitwidth}")

        def load_index(pos):
            raw = builder.load(cgutils.gep(builder, ind_ptr, pos))
            return context.cast(builder, raw, i_ty.dtype, types.intp)

        count = builder.sub(hi, lo)
        with cgutils.for_range(builder, count) as loop:
            p = builder.add(lo, loop.index)
            with builder.if_then(builder.icmp_signed("<", p, p_end), likely=True):
                q = load_index(builder.add(p, dist))
                row = builder.add(builder.add(x_base, builder.mul(q, x_stride)), off_b)
                for t in range(n_vec):
                    ptr = builder.inttoptr(builder.add(row, intp(t * _LINE)), i8p)
                    builder.call(pf, [ptr, i32(0), i32(3), i32(1)])
            i = load_index(p)
            ok = builder.icmp_unsigned("<", i, n_rows)
            builder.store(builder.or_(builder.load(bad), builder.not_(ok)), bad)
            i = builder.select(ok, i, intp(0))
            v = builder.load(cgutils.gep(builder, dat_ptr, p))
            vv = builder.insert_element(ir.Constant(vecty, ir.Undefined), v, i32(0))
            vv = builder.shuffle_vector(vv, ir.Constant(vecty, ir.Undefined),
                                        ir.Constant(ir.VectorType(i32, width), [0] * width))
            row = builder.add(builder.add(x_base, builder.mul(i, x_stride)), off_b)
            for t in range(n_vec):
                ptr = builder.inttoptr(builder.add(row, intp(t * _LINE)), vecty.as_pointer())
                a = builder.load(ptr, align=isz)
                builder.store(builder.call(fma, [vv, a, builder.load(accs[t])]), accs[t])
        O = context.make_array(o_ty)(context, builder, args[0])
        o_strides = cgutils.unpack_tuple(builder, O.strides)
        o_row = builder.add(builder.ptrtoint(O.data, intp),
                            builder.mul(_intp(context, builder, args[1], j_ty), o_strides[0]))
        if o_ty.layout == "C":
            o_row = builder.add(o_row, off_b)
            for t in range(n_vec):
                ptr = builder.inttoptr(builder.add(o_row, intp(t * _LINE)), vecty.as_pointer())
                builder.store(builder.load(accs[t]), ptr, align=isz)
        else:  # a strided row (a C-ordered output seen transposed): one store per value
            first = builder.udiv(off_b, intp(isz))
            for t in range(n_vec):
                acc = builder.load(accs[t])
                for lane in range(width):
                    col = builder.add(first, intp(t * width + lane))
                    ptr = builder.inttoptr(builder.add(o_row, builder.mul(col, o_strides[1])),
                                           elt.as_pointer())
                    builder.store(builder.extract_element(acc, i32(lane)), ptr)
        return builder.load(bad)

    return sig, codegen


@njit(inline="always", **_FLAGS)
def _gather_column(outT, j, XT, indices, data, lo, hi, p_end, kv, lw):
    """The lane blocks ``[0, kv)`` of output column ``j``; True on an out-of-range index."""
    bad = False
    step = GATHER_VECTORS * lw
    off = 0
    while off + step <= kv:
        bad |= _gather_block(outT, j, XT, indices, data, lo, hi, p_end, GATHER_DISTANCE, off, 8)
        off += step
    rest = (kv - off) // lw
    if rest >= 4:
        bad |= _gather_block(outT, j, XT, indices, data, lo, hi, p_end, GATHER_DISTANCE, off, 4)
        off += 4 * lw
        rest -= 4
    if rest >= 2:
        bad |= _gather_block(outT, j, XT, indices, data, lo, hi, p_end, GATHER_DISTANCE, off, 2)
        off += 2 * lw
        rest -= 2
    if rest >= 1:
        bad |= _gather_block(outT, j, XT, indices, data, lo, hi, p_end, GATHER_DISTANCE, off, 1)
    return bad


@parallel_njit(**_FLAGS)
def csc_gather_mult(XT, indptr, indices, data, outT, bounds):
    """``outT[j, :] = sum_p data[p] * XT[indices[p], :]`` over the entries ``p`` of column ``j``.

    ``A*S`` with ``XT = A.T`` (``n x k``, C-contiguous) over ``S``'s CSC arrays, or ``A*S^T``
    with ``XT = A.T`` (``m x k``) over its transposed index.  ``outT`` (``m x k``) may be
    C-contiguous (a Fortran-ordered output) or its transpose (a C-ordered one).  Thread chunks
    are ``bounds`` (balanced by entries, :func:`~roofline.kernels.nnz_chunks_into`).  The
    first ``k - k % W`` values of a column run in vector registers (see the module docstring),
    the last ``k % W`` in a scalar pass.  Returns the number of faulty columns (an ``indptr``
    range outside the arrays: output zero; an out-of-range index: output meaningless).
    """
    k = XT.shape[1]
    lw = lanes(XT)
    kv = k - k % lw
    un = np.uint64(XT.shape[0])
    limit = min(indices.shape[0], data.shape[0])
    n_chunks = bounds.shape[0] - 1
    faults = 0
    for c in prange(n_chunks):
        p_end = min(indptr[bounds[c + 1]], limit) - GATHER_DISTANCE
        for j in range(bounds[c], bounds[c + 1]):
            faults += _gather_one(outT, j, XT, indptr, indices, data, limit, p_end, k, kv, lw,
                                  un)
    return faults


@njit(inline="always", cache=True, nogil=True)
def _gather_one(outT, j, XT, indptr, indices, data, limit, p_end, k, kv, lw, un):
    """Output column ``j`` of the gather: its first ``kv`` values in vector registers, the
    last ``k - kv`` in a scalar pass.  Returns its faults: 1 for an ``indptr`` range outside
    the arrays (output zero), 1 for an out-of-range index (output meaningless)."""
    lo = indptr[j]
    hi = indptr[j + 1]
    faults = 0
    if lo < 0 or hi < lo or hi > limit:
        faults += 1
        lo = 0
        hi = 0
    bad = False
    if kv > 0:
        bad = _gather_column(outT, j, XT, indices, data, lo, hi, p_end, kv, lw)
    if kv < k:
        for kk in range(kv, k):
            outT[j, kk] = 0
        for p in range(lo, hi):
            i = np.uint64(indices[p])
            if i >= un:
                bad = True
                break
            v = data[p]
            for kk in range(kv, k):
                outT[j, kk] += v * XT[i, kk]
    if bad:
        faults += 1
    return faults


@njit(inline="always", cache=True, nogil=True)
def _dot_column(a, indices, data, lo, hi, un):
    """``(sum_p data[p] * a[indices[p]] over [lo, hi), bad)``: two independent running sums
    (even / odd entries), so the adds of consecutive entries do not wait on each other; the
    positions are unsigned (no wraparound test); ``bad`` when an index is out of range (the sum
    then stops there)."""
    z = a.dtype.type(0)
    s0 = z
    s1 = z
    one = np.uint64(1)
    p = np.uint64(lo)
    end = np.uint64(hi)
    while p + one < end:
        i0 = np.uint64(indices[p])
        i1 = np.uint64(indices[p + one])
        if i0 >= un or i1 >= un:
            return s0 + s1, True
        s0 += data[p] * a[i0]
        s1 += data[p + one] * a[i1]
        p += np.uint64(2)
    if p < end:
        i0 = np.uint64(indices[p])
        if i0 >= un:
            return s0 + s1, True
        s0 += data[p] * a[i0]
    return s0 + s1, False


@njit(inline="always", cache=True, nogil=True)
def _differ(cur, kept, lo, hi):
    """True when ``cur[lo:hi]`` and ``kept[lo:hi]`` differ (integer arrays; the range is clipped
    to both).  No branch inside and unsigned positions, so the loop is vectorised (measured
    here: a signed position's wraparound test made it 10x slower)."""
    d = cur.dtype.type(0)
    start = np.uint64(max(lo, 0))
    for p in range(start, np.uint64(max(min(hi, cur.shape[0], kept.shape[0]), start))):
        d |= cur[p] ^ kept[p]
    return d != 0


@njit(inline="always", cache=True, nogil=True)
def _check_lengths(indptr, nnz, cur_ptr, kept_ptr, cur_ind, kept_ind, cur_bits, kept_bits):
    """True when the kept copies can be compared in place: the index's ``indptr`` ends at
    ``nnz`` and every pair has equal length (``kept_ind`` / ``kept_bits`` of ``nnz``)."""
    return (indptr[indptr.shape[0] - 1] == nnz and nnz >= 0
            and cur_ptr.shape[0] == kept_ptr.shape[0]
            and cur_ind.shape[0] == nnz and kept_ind.shape[0] == nnz
            and cur_bits.shape[0] == nnz and kept_bits.shape[0] == nnz)


@parallel_njit(cache=True, nogil=True)
def csc_gather_vec(a, indptr, indices, data, out, bounds):
    """``k = 1`` case of :func:`csc_gather_mult` (sparse times vector):
    ``out[j] = sum_p data[p] * a[indices[p]]`` over the entries ``p`` of column ``j``.

    Two independent running sums per column (even and odd entries) and unsigned positions;
    no prefetch (on power-law data most reads of ``a`` hit cache, and the prefetch's extra
    index load costs more than the misses it hides) and no ``fastmath`` (LLVM would turn the
    reduction into AVX gathers, slower than scalar loads on AMD).  Threads get the chunks
    ``bounds``.  Returns the number of faulty columns (an ``indptr`` range outside the
    arrays: output zero; an out-of-range index: output meaningless).
    """
    un = np.uint64(a.shape[0])
    limit = min(indices.shape[0], data.shape[0])
    faults = 0
    for c in prange(bounds.shape[0] - 1):
        for j in range(bounds[c], bounds[c + 1]):
            lo = indptr[j]
            hi = indptr[j + 1]
            if lo < 0 or hi < lo or hi > limit:
                faults += 1
                hi = lo
            acc, bad = _dot_column(a, indices, data, lo, hi, un)
            out[j] = acc
            if bad:
                faults += 1
    return faults


@parallel_njit(**_FLAGS)
def csc_gather_mult_checked(XT, indptr, indices, data, outT, bounds, cur_ptr, kept_ptr,
                            cur_ind, kept_ind, cur_bits, kept_bits):
    """:func:`csc_gather_mult` over a kept index (``A*S^T`` over ``S``'s transposed index) that
    also checks, in the same pass, that ``S`` is unchanged since the index was built.

    ``cur_ptr``, ``cur_ind`` and ``cur_bits`` are ``S.indptr``, ``S.indices[:nnz]`` and
    ``S.data[:nnz]`` viewed as unsigned integers of its width; ``kept_*`` their copies taken
    when the index was built.  Column ``j`` of the index compares the positions ``[indptr[j],
    indptr[j + 1])`` of those arrays (as many as it gathers: the columns partition ``[0,
    nnz)``, so every entry of ``S`` is compared once and each thread compares as much as it
    gathers), and each thread chunk its share of ``cur_ptr``.  The compare is exact (every bit
    of ``S``'s arrays) but streams sequentially beside the gather's random reads of ``XT``
    instead of costing a pass of its own.  Returns ``(faults, changed)``: with ``changed`` the
    output is meaningless (nothing is read outside the arrays either way).
    """
    nnz = indptr[indptr.shape[0] - 1]
    if not _check_lengths(indptr, nnz, cur_ptr, kept_ptr, cur_ind, kept_ind, cur_bits,
                          kept_bits):
        return 0, True
    k = XT.shape[1]
    lw = lanes(XT)
    kv = k - k % lw
    un = np.uint64(XT.shape[0])
    limit = min(indices.shape[0], data.shape[0])
    n_chunks = bounds.shape[0] - 1
    n_ptr = cur_ptr.shape[0]
    faults = 0
    changed = 0
    for c in prange(n_chunks):
        diff = _differ(cur_ptr, kept_ptr, (n_ptr * c) // n_chunks, (n_ptr * (c + 1)) // n_chunks)
        done = indptr[bounds[c]]
        p_end = min(indptr[bounds[c + 1]], limit) - GATHER_DISTANCE
        for j in range(bounds[c], bounds[c + 1]):
            hi = indptr[j + 1]
            if indptr[j] < 0 or hi < indptr[j] or hi > limit:
                hi = 0  # a faulty range: counted by the gather, its entries not compared here
            faults += _gather_one(outT, j, XT, indptr, indices, data, limit, p_end, k, kv, lw,
                                  un)
            if hi - done >= CHECK_BLOCK:
                diff |= _differ(cur_ind, kept_ind, done, hi) | _differ(cur_bits, kept_bits,
                                                                        done, hi)
                done = hi
        end = indptr[bounds[c + 1]]
        diff |= _differ(cur_ind, kept_ind, done, end) | _differ(cur_bits, kept_bits, done, end)
        if diff:
            changed += 1
    return faults, changed > 0


@parallel_njit(cache=True, nogil=True)
def csc_scatter_vec(a, indptr, indices, data, out, slabs):
    """``out[i] = sum_{(i, j) in S} data * a[j]`` (``A*S^T`` at ``k = 1`` over ``S``'s CSC
    arrays, sparse-transpose times vector) by row slabs.

    Thread ``t`` owns the output rows ``slabs[t]:slabs[t + 1]`` (balanced by entries,
    :func:`~roofline.kernels.row_slabs_into`): it zeroes them, then walks every column from its
    first row ``>= slabs[t]`` (a binary search in the sorted column) to its first row past the
    slab, so ``S`` is read about once in all, no thread writes another's rows, and no private
    copies or reduction pass are needed.  The output value ``SCATTER_DISTANCE`` entries ahead
    is prefetched when it is in the slab (the output is ``n`` long, beyond L2 on
    million-feature data: a read-modify-write that misses stalls the store queue).  Returns
    the number of faults (columns outside the arrays, skipped; row indices out of range or
    unsorted past the slab end: the column's remaining entries are skipped).
    """
    n = out.shape[0]
    m = indptr.shape[0] - 1
    limit = min(indices.shape[0], data.shape[0])
    nnz = np.uint64(max(min(indptr[m], limit), 0))
    out_rows = out.reshape(-1, 1)  # prefetch_row's view
    faults = 0
    for s in prange(slabs.shape[0] - 1):
        r0 = min(max(slabs[s], 0), n)  # slabs outside [0, n] are clipped: no write outside
        r1 = min(max(slabs[s + 1], r0), n)
        width = np.uint64(r1 - r0)
        for i in range(r0, r1):
            out[i] = 0
        for j in range(min(m, a.shape[0])):
            lo = indptr[j]
            hi = indptr[j + 1]
            if lo < 0 or hi < lo or hi > limit:
                faults += 1
                continue
            aj = a[j]
            lo = _first_at_least(indices, lo, hi, r0)
            for p in range(np.uint64(lo), np.uint64(hi)):
                q = p + np.uint64(SCATTER_DISTANCE)
                if q < nnz:
                    iq = np.uint64(indices[q] - r0)
                    if iq < width:
                        prefetch_row(out_rows, iq + np.uint64(r0), 0)
                i = indices[p]
                if np.uint64(i - r0) >= width:  # past the slab (or out of range: a fault)
                    if i < 0 or i >= n:
                        faults += 1
                    break
                out[np.uint64(i)] += data[p] * aj
    return faults


#: Values one tile of :func:`transpose_into` moves (4096: 16 KiB of float32, in L1).
TRANSPOSE_TILE = 4096


@njit(inline="always", **_FLAGS)
def _transpose_8x8(src, dst, i0, j0):
    """``dst[j0:j0+8, i0:i0+8] = src[i0:i0+8, j0:j0+8].T`` (constant trip counts: unrolled
    into moves; a runtime-length loop here is vectorised into gathers and scatters, which run
    at a third of the speed on AMD)."""
    for a in range(8):
        for b in range(8):
            dst[j0 + b, i0 + a] = src[i0 + a, j0 + b]


@parallel_njit(**_FLAGS)
def transpose_into(src, dst):
    """``dst[j, i] = src[i, j]``: ``dst`` (``c x r``) gets the transpose of ``src`` (``r x c``),
    both C-contiguous.  Tiles of ``min(r, 64)`` rows by ``TRANSPOSE_TILE / min(r, 64)`` columns
    (in L1 also for a short wide ``src``) run in parallel, each as 8 x 8 blocks plus its
    edges (measured here, 16 x 2^20 float32: 1.7x faster than element loops, 2.3x the time
    of a plain copy)."""
    r, c = src.shape
    tr = max(8, min(r, 64))
    tc = max(64, TRANSPOSE_TILE // tr)
    nr = (r + tr - 1) // tr
    nc = (c + tc - 1) // tc
    for b in prange(nr * nc):
        j0 = (b // nr) * tc
        i0 = (b % nr) * tr
        j1 = min(c, j0 + tc)
        i1 = min(r, i0 + tr)
        i8 = i0 + (i1 - i0) // 8 * 8
        j8 = j0 + (j1 - j0) // 8 * 8
        for jj in range(j0, j8, 8):
            for ii in range(i0, i8, 8):
                _transpose_8x8(src, dst, ii, jj)
        for j in range(j0, j1):  # the edges: rows past i8, and columns past j8
            for i in range(i8 if j < j8 else i0, i1):
                dst[j, i] = src[i, j]


@njit(cache=True, nogil=True)
def csc_transpose_index(indptr, indices, data, n_rows, t_indptr, t_indices, t_data):
    """The CSR arrays of an ``n_rows x m`` CSC matrix (a counting sort by row): ``t_indptr``
    (``n_rows + 1``), ``t_indices`` (the column of each entry, increasing within a row) and
    ``t_data`` (``nnz = indptr[-1]`` entries each).  Returns False, with the outputs
    meaningless, when the structure is not a valid CSC one of that shape or does not fit the
    arrays (nothing is read or written outside them); True otherwise."""
    m = indptr.shape[0] - 1
    nnz = indptr[m]
    if (indptr[0] != 0 or nnz > indices.shape[0] or nnz > data.shape[0]
            or nnz > t_indices.shape[0] or nnz > t_data.shape[0]
            or t_indptr.shape[0] != n_rows + 1):
        return False
    t_indptr[:] = 0
    for j in range(m):
        if indptr[j + 1] < indptr[j] or indptr[j + 1] > nnz:
            return False
    for p in range(nnz):
        i = indices[p]
        if i < 0 or i >= n_rows:
            return False
        t_indptr[i + 1] += 1
    for i in range(n_rows):
        t_indptr[i + 1] += t_indptr[i]
    nxt = t_indptr[:n_rows].copy()
    for j in range(m):
        for p in range(indptr[j], indptr[j + 1]):
            i = indices[p]
            q = nxt[i]
            nxt[i] = q + 1
            t_indices[q] = j
            t_data[q] = data[p]
    return True


@parallel_njit(cache=True, nogil=True)
def arrays_equal(a, b):
    """True when the 1-D arrays ``a`` and ``b`` have the same length and ``a == b`` everywhere
    (a parallel scan; each part stops at its first difference).  Pass integer views of float
    arrays to compare them bit for bit."""
    n = a.shape[0]
    if b.shape[0] != n:
        return False
    n_parts = 64
    diff = np.zeros(n_parts, dtype=np.bool_)
    for t in prange(n_parts):
        for q in range((n * t) // n_parts, (n * (t + 1)) // n_parts):
            if a[q] != b[q]:
                diff[t] = True
                break
    for t in range(n_parts):
        if diff[t]:
            return False
    return True
