"""The rooflined sparse primitives ``A*S``, ``A*S^T`` and ``SDDMM`` (BIDMach names and semantics).

``S`` is always ``n_features x n_examples`` CSC.  Dense operands may be 2-D (``k x n``) or, for
``k = 1``, 1-D; the result has the same dimensionality.  Dense results are returned in Fortran
order (one column contiguous), the layout the kernels read fastest; pass ``out=`` or ``cache=``
to reuse buffers across minibatches.

Every layout runs on the CPU: a C-ordered dense operand (numpy's default) is transposed once per
call into a reused buffer by a tiled parallel kernel (:func:`roofline.kernels.transpose_into`,
one pass over the operand: the only cost over the Fortran layout, largest where the kernel
itself is cheapest), and ``out=`` may be Fortran- or C-ordered (the kernels store either).

``A*S^T`` on an ``S`` it has seen before gathers instead of scattering: on the second call with
the same validated ``S`` and ``k`` of at least a cache line (16 float32, 8 float64) it builds
``S``'s transposed index (its CSR arrays, a counting sort) and keeps it on the matrix object
with copies of ``S``'s arrays; every later call runs the same register-blocked gather as
``A*S`` over the transposed index (:func:`roofline.kernels.csc_gather_mult_checked`), with
no scatter and no atomics, after comparing ``S``'s arrays with those copies (one parallel
pass, :func:`roofline.kernels.arrays_equal`): exact, so an in-place edit anywhere is seen and
the call scatters instead (the index is rebuilt on the next call).  With
``AST_CHECK_IN_GATHER = True`` the compare runs inside the gather's own pass instead
(:func:`roofline.kernels.csc_gather_mult_checked`: the columns of the index compare as many
of ``S``'s entries as they gather, in vectorised stretches; measured slower here, see the
setting).  ``AST_REUSE = False`` turns reuse off.  At ``k = 1`` A*S^T always scatters by row slabs
(:func:`roofline.kernels.csc_scatter_vec`: one read of ``S``, which the gather plus the
check cannot beat), and ``A*S`` at ``k = 1`` is the sparse-times-vector kernel
:func:`roofline.kernels.csc_gather_vec`.
"""

from __future__ import annotations

import logging
import os
import threading

import numpy as np

from roofline import kernels

from ._arrays import (
    _CHECKED_ATTR,
    as_dense,
    check_csc,
    csc_from_arrays,
    device_of,
    empty,
    get_array_module,
)
from ._cache import BufferCache, default_cache

__all__ = ["mult_as", "mult_ast", "sddmm"]

logger = logging.getLogger(__name__)

_CHUNKS_PER_THREAD = 8

#: Below this much work (nonzeros x k, plus the output for A*S^T) a primitive runs on the
#: calling thread.  On a quiet 2-core machine numba's pool still wins by ~20 us at this size,
#: but when the other core is busy a parallel region waits for it to be scheduled (measured
#: here: 4 ms instead of 0.1 ms for a 10k-nonzero A*S); small calls are not worth that risk
#: (``python benchmarks/primitives.py --small`` prints both).
PARALLEL_MIN_WORK = 1 << 17


#: A*S^T with 2 <= k and rows of at most this many bytes runs by output blocks
#: (:func:`roofline.kernels.csc_mult_t_blocked`); wider rows use the row-slab kernel
#: (measured here, float32 on 2^20 x 100k Zipf data: blocks 1.3-1.6x faster for k = 4..32,
#: as fast at k = 64, 1.5x slower at k = 128).
BLOCKED_AST_MAX_ROW_BYTES = 128


#: Whether A*S^T keeps the transposed index of an ``S`` used again (see the module docstring).
AST_REUSE = True

#: Whether the reused index's exact check of ``S`` runs inside the gather's pass (``True``:
#: :func:`roofline.kernels.csc_gather_mult_checked`) or as a parallel pass of its own before
#: the gather (``False``: :func:`roofline.kernels.arrays_equal` on each array).  Measured here
#: (2^20 x 100k Zipf and uniform, float32 and float64, k = 16, loaded machine, one thread's CPU
#: time and two threads' wall time): the pass of its own 2-17% faster, so it is the default;
#: ``python benchmarks/primitives.py --peers`` times both side by side (row "A*S^T fused").
AST_CHECK_IN_GATHER = False

#: Copies of C-ordered dense operands up to this size stay in the calling thread's default
#: cache between calls (a first touch of fresh pages costs as much as the transposition).
_DENSE_COPY_CACHE_MAX_BYTES = 1 << 29

_INDEX_ATTR = "_roofline_ast_index"


def _gather_width(dtype) -> int:
    """Values per cache line: from this many rows of ``A`` (16 float32, 8 float64) A*S runs
    the register-blocked :func:`roofline.kernels.csc_gather_mult`."""
    return 64 // np.dtype(dtype).itemsize


def _threads_for(work: int):
    """The thread limit for a call of this much work (``None``: all of numba's threads)."""
    return 1 if work < PARALLEL_MIN_WORK else None


#: C-ordered dense operands of at least this many bytes get a one-time warning (see
#: :func:`_say_layout`); smaller ones cost too little to mention.
LAYOUT_WARN_MIN_BYTES = 1 << 22

_layout_said: set = set()


def _say_layout(A, name):
    """Say why a C-ordered dense operand is slower: once per process and operand name (a
    logged warning) for operands of at least :data:`LAYOUT_WARN_MIN_BYTES`, else at debug
    level.  gmat transposes it on every call (one pass over it: measured 1.4-1.8x the time of
    the Fortran-ordered call for A*S and SDDMM at k = 16 on 2^20 x 100k data here); a changed
    operand cannot be detected without reading it, so no converted copy is kept."""
    if A.nbytes >= LAYOUT_WARN_MIN_BYTES and name not in _layout_said:
        _layout_said.add(name)
        logger.warning(
            "%s of shape %s is C-ordered: gmat transposes it on every call (one pass over %d "
            "MB, up to ~1.8x the call's time); allocate it with gmat.empty or pass "
            "np.asfortranarray(%s) once to avoid that (said once per process)", name,
            A.shape, A.nbytes >> 20, name)
    else:
        logger.debug("%s of shape %s is not Fortran-ordered: transposing it (one pass)", name,
                     A.shape)


def _transposed_c(A, name):
    """``A.T`` as a C-contiguous ``(n, k)`` array: a view of a Fortran-ordered ``A``, else one
    tiled parallel transposition into a buffer reused across calls (per name and thread)."""
    if A.ndim == 1:
        return A.reshape(-1, 1) if A.flags.c_contiguous else np.ascontiguousarray(A)[:, None]
    if A.flags.f_contiguous:
        return A.T
    _say_layout(A, name)
    src = A if A.flags.c_contiguous else np.ascontiguousarray(A)
    shape = (A.shape[1], A.shape[0])
    if A.nbytes > _DENSE_COPY_CACHE_MAX_BYTES:
        buf = np.empty(shape, A.dtype)
    else:
        buf = _scratch(("dense_T", name), shape, A.dtype)
    kernels.transpose_into(src, buf)
    return buf


def _same_dtype(*pairs):
    (n0, x0), *rest = pairs
    for n, x in rest:
        if x.dtype != x0.dtype:
            raise TypeError(
                f"{n} has dtype {x.dtype} but {n0} has dtype {x0.dtype}; convert one of them "
                f"(e.g. {n}.astype({n0}.dtype)) so both match"
            )


def _check_writeable(out, name="out"):
    if isinstance(out, np.ndarray) and not out.flags.writeable:  # cupy arrays always are
        raise ValueError(f"{name} is read-only: pass a writeable array (e.g. {name}.copy())")


def _output(out, shape, dtype, cache, tag, name="out", like=None):
    """Validate or create a Fortran-ordered output buffer."""
    if out is not None:
        as_dense(out, name)
        _check_writeable(out, name)
        if out.shape != shape:
            raise ValueError(f"{name} has shape {out.shape}, expected {shape}")
        if out.dtype != dtype:
            raise TypeError(f"{name} has dtype {out.dtype}, expected {dtype}")
        if device_of(out) != device_of(like):
            raise ValueError(f"{name} is on {device_of(out)}, operands on {device_of(like)}")
        if not out.flags.f_contiguous:
            if device_of(out) == "gpu":
                raise ValueError(f"{name} must be Fortran-contiguous (allocate with order='F')")
            if not out.flags.c_contiguous:
                raise ValueError(f"{name} must be Fortran- or C-contiguous (a whole array, not "
                                 f"a strided view)")
        return out
    if cache is None or cache is False:
        return empty(shape, dtype, order="F", device=device_of(like))
    if cache is True:
        cache = default_cache()
    if not isinstance(cache, BufferCache):
        raise TypeError(f"cache must be a BufferCache, True or None, got {type(cache).__name__}")
    return cache.empty(shape, dtype, tag=tag, order="F", like=like)


def _scratch(name, shape, dtype, like=None):
    """Kernel scratch space from the default cache, one set per calling thread (so concurrent
    callers never share it): steady-state loops allocate nothing, scratch included."""
    return default_cache().empty(shape, dtype, tag=(name, threading.get_ident()), like=like)


#: Scratch buffers above this size are allocated per call instead of kept in the default
#: cache (a one-off call on a whole dataset should not pin that much memory for the process).
_SCRATCH_CACHE_MAX_BYTES = 64 << 20


def _scratch_at_least(name, n, dtype):
    """The first ``n`` entries of a reused 1-D scratch buffer whose length is rounded up to a
    power of two: minibatches of varying nnz share one buffer instead of one per size."""
    cap = 1 << max(12, (max(int(n), 1) - 1).bit_length())
    if cap * np.dtype(dtype).itemsize > _SCRATCH_CACHE_MAX_BYTES:
        return np.empty(n, dtype)
    return _scratch(name, (cap,), dtype)[:n]


def _overlaps(out, *inputs):
    """True when ``out`` may share memory with one of ``inputs`` (bounds test: a false alarm
    costs one temporary, never a wrong result)."""
    xp = np if type(out) is np.ndarray else get_array_module(out)
    return any(xp.may_share_memory(out, x) for x in inputs)


def _sparse_arrays(S):
    return (S.data, S.indices, S.indptr)


def _out_of_range(S, name="S"):
    """The error for a kernel that met row indices or ``indptr`` entries it could not use: the
    matrix was edited in place after validation (``check_csc`` re-validates in full)."""
    try:
        check_csc(S, name, force=True)
    except ValueError as exc:
        return ValueError(f"{exc} (was {name} modified in place after it was validated?)")
    return ValueError(f"{name} changed while it was being read")


def _chunks(indptr, n_chunks):
    """nnz-balanced column chunk boundaries, in a reused buffer."""
    return kernels.nnz_chunks_into(indptr, _scratch("chunks", (n_chunks + 1,), np.int64))


def mult_as(A, S, out=None, *, cache=None, tag="mult_as"):
    """Dense times sparse: ``C = A * S``.

    Parameters
    ----------
    A : array, shape (k, n) or (n,)
        Dense operand; Fortran order is read in place, C order costs one transposition.
    S : CSC matrix, shape (n, m)
        Sparse operand, one column per example.
    out : array, shape (k, m) or (m,), optional
        Output buffer, Fortran- or C-ordered (Fortran on the GPU).
    cache : BufferCache or True, optional
        Take the output from this cache (``True``: the default cache) under ``tag``.
    tag : hashable
        Cache tag.

    Returns
    -------
    C : array, shape (k, m) or (m,)
        ``C[:, j] = sum_i A[:, i] * S[i, j]``.
    """
    A = as_dense(A, "A")
    check_csc(S, "S")
    _same_dtype(("A", A), ("S", S))
    n, m = S.shape
    if A.shape[-1] != n:
        raise ValueError(f"A has {A.shape[-1]} columns but S has {n} rows (A * S needs them equal)")
    if device_of(A) != device_of(S):
        raise ValueError(f"A is on {device_of(A)} but S is on {device_of(S)}")
    shape = (m,) if A.ndim == 1 else (A.shape[0], m)
    out = _output(out, shape, A.dtype, cache, tag, like=A)
    if _overlaps(out, A, *_sparse_arrays(S)):  # out=A: compute aside, then copy (as numpy)
        out[...] = _mult_as(A, S, empty(shape, A.dtype, order="F", device=device_of(A)))
        return out
    return _mult_as(A, S, out)


def _mult_as(A, S, out):
    m = S.shape[1]
    k = 1 if A.ndim == 1 else A.shape[0]
    if device_of(A) == "gpu":  # pragma: no cover - needs a GPU
        return _gpu_mult_as(A, S, out)
    if k == 0 or m == 0:
        out[...] = 0
        return out
    with kernels.limit_threads(_threads_for(int(S.indptr[-1]) * k)) as threads:
        n_chunks = min(m, threads * _CHUNKS_PER_THREAD)
        bounds = _chunks(S.indptr, n_chunks)
        faults = _gather(A, S.indptr, S.indices, S.data, out, bounds, "A")
    if faults:
        raise _out_of_range(S)
    return out


def _gather(A, indptr, indices, data, out, bounds, name):
    """``out[:, j] = sum_p data[p] * A[:, indices[p]]`` over the entries of compressed column
    ``j``: A*S over ``S``'s CSC arrays, A*S^T over its transposed index.  Returns the kernel's
    fault count."""
    k = 1 if A.ndim == 1 else A.shape[0]
    if k == 1:
        # (1, n) and (n,) are contiguous in either order, and so is the output
        return kernels.csc_gather_vec(A.reshape(-1), indptr, indices, data, out.reshape(-1),
                                      bounds)
    AT = _transposed_c(A, name)
    if k >= _gather_width(A.dtype):
        return kernels.csc_gather_mult(AT, indptr, indices, data, out.T, bounds)
    acc = _scratch("mult_as_acc", (bounds.shape[0] - 1, kernels.N_ACC, k), A.dtype)
    return kernels.csc_mult(AT, indptr, indices, data, out.T, bounds, acc)


def mult_ast(A, S, out=None, *, cache=None, tag="mult_ast"):
    """Dense times transposed sparse: ``C = A * S^T`` (the GLM gradient).

    Parameters
    ----------
    A : array, shape (k, m) or (m,)
        Dense operand, one column per example; Fortran order is read in place, C order costs
        one transposition.
    S : CSC matrix, shape (n, m)
        Used again, its transposed index is kept (see the module docstring).
    out : array, shape (k, n) or (n,), optional
        Output buffer, Fortran- or C-ordered (Fortran on the GPU); overwritten, not
        accumulated into.
    cache, tag
        As in :func:`mult_as`.

    Returns
    -------
    C : array, shape (k, n) or (n,)
        ``C[:, i] = sum_j A[:, j] * S[i, j]``.
    """
    A = as_dense(A, "A")
    check_csc(S, "S")
    _same_dtype(("A", A), ("S", S))
    n, m = S.shape
    if A.shape[-1] != m:
        raise ValueError(
            f"A has {A.shape[-1]} columns but S has {m} columns (A * S^T needs them equal)"
        )
    if device_of(A) != device_of(S):
        raise ValueError(f"A is on {device_of(A)} but S is on {device_of(S)}")
    shape = (n,) if A.ndim == 1 else (A.shape[0], n)
    out = _output(out, shape, A.dtype, cache, tag, like=A)
    if _overlaps(out, A, *_sparse_arrays(S)):  # out=A: compute aside, then copy (as numpy)
        out[...] = _mult_ast(A, S, empty(shape, A.dtype, order="F", device=device_of(A)))
        return out
    return _mult_ast(A, S, out)


def _mult_ast(A, S, out):
    n, m = S.shape
    k = 1 if A.ndim == 1 else A.shape[0]
    if device_of(A) == "gpu":  # pragma: no cover - needs a GPU
        return _gpu_mult_ast(A, S, out)
    if k == 0 or n == 0:
        out[...] = 0
        return out
    nnz = int(S.indptr[-1])
    with kernels.limit_threads(_threads_for((nnz + n) * k)) as threads:
        # the reused index feeds the register-blocked gather: narrower k scatter faster (at
        # k = 1 the row-slab scatter reads S once, the gather its index and the exact check:
        # measured here, the slabs 1.3-1.4x faster than gather + check)
        index = _ast_index(S) if k >= _gather_width(A.dtype) else None
        if index is not None and _gather_kept(A, S, index, out, threads):
            return out  # S seen before and unchanged: gathered over its transposed index
        if k == 1:
            faults = kernels.csc_scatter_vec(A.reshape(-1), S.indptr, S.indices, S.data,
                                             out.reshape(-1), _slabs(S, threads))
        else:
            # the scatter kernels write rows of out.T: a C-ordered out gets them by transposition
            outT = out.T if out.flags.f_contiguous else _scratch("mult_ast_outT", (n, k),
                                                                 A.dtype)
            if k * A.dtype.itemsize <= BLOCKED_AST_MAX_ROW_BYTES:
                faults = _mult_ast_blocked(_transposed_c(A, "A"), S, outT, threads)
            else:
                seen = _scratch("mult_ast_seen", (n,), np.uint8)
                faults = kernels.csc_mult_t(_transposed_c(A, "A"), S.indptr, S.indices,
                                            S.data, outT, _slabs(S, threads), seen)
            if not out.flags.f_contiguous:
                kernels.transpose_into(outT, out)
    if faults:
        raise _out_of_range(S)
    return out


def _slabs(S, threads):
    """Output row slabs of about equal entries, one per thread, in reused buffers."""
    n = S.shape[0]
    return kernels.row_slabs_into(
        S.indices, int(S.indptr[-1]), n,
        _scratch("slabs", (max(1, min(n, threads)) + 1,), np.int64),
        _scratch("slab_sample", (kernels.SLAB_SAMPLE,), np.int64),  # fixed size: reused
    )


def _value_bits(data):
    """``data`` viewed as unsigned integers of its width (compared bit for bit)."""
    return data.view(np.uint32 if data.dtype.itemsize == 4 else np.uint64)


def _source_arrays(S):
    """``S``'s arrays as the kept index compares them: ``indptr``, ``indices[:nnz]`` and the
    bits of ``data[:nnz]``."""
    nnz = int(S.indptr[-1])
    return S.indptr, S.indices[:nnz], _value_bits(S.data[:nnz])


def _ast_index(S):
    """``S``'s transposed index when ``S`` is used again, else None (first use, reuse off, a
    matrix that takes no attributes, or a structure that does not build: the scatter kernels
    then report it).

    The index is the tuple ``(indptr, indices, data, fresh, indptr copy, indices copy, data
    bits copy)``: the CSR arrays of ``S``, whether they were built from ``S``'s arrays in this
    very call (then nothing can have changed since), and copies of ``S``'s arrays taken when
    they were built.  It is kept on the matrix object (its lifetime, not an LRU's) under the
    validation mark ``check_csc`` keeps there (replaced whenever the arrays, shape, nnz or
    fingerprint change); an in-place edit that keeps the mark is caught by the exact compare
    :func:`_gather_kept` runs in the gather's own pass, which then drops the index.
    """
    if not AST_REUSE:
        return None
    mark = getattr(S, _CHECKED_ATTR, None)
    entry = getattr(S, _INDEX_ATTR, None)
    if entry is not None and entry["mark"] is mark and mark is not None:
        index = entry["index"]
        if index is not None:
            return (*index[:3], False, *index[3:])
        n, m = S.shape
        arrays = _source_arrays(S)
        nnz = arrays[1].shape[0]
        itype = np.int32 if max(m, nnz) < 2**31 else np.int64
        index = (np.empty(n + 1, np.int64), np.empty(nnz, itype), np.empty(nnz, S.dtype),
                 *(a.copy() for a in arrays))
        if kernels.csc_transpose_index(S.indptr, S.indices, S.data, n, *index[:3]):
            entry["index"] = index
            return (*index[:3], True, *index[3:])
        return None
    try:
        setattr(S, _INDEX_ATTR, {"mark": mark, "index": None})
    except AttributeError:  # a matrix type that takes no attributes: never reused
        pass
    return None


def _gather_kept(A, S, index, out, threads):
    """A*S^T by the gather over ``S``'s kept transposed index (see :func:`_ast_index`) after
    the exact check that ``S`` is unchanged (inside the gather's pass with
    ``AST_CHECK_IN_GATHER``; none when the index is fresh).
    Returns False, with ``out`` meaningless and the index dropped, when ``S`` changed (the
    caller scatters instead)."""
    n = S.shape[0]
    t_indptr, t_indices, t_data, fresh = index[:4]
    bounds = _chunks(t_indptr, min(n, threads * _CHUNKS_PER_THREAD))
    if fresh:
        faults, changed = _gather(A, t_indptr, t_indices, t_data, out, bounds, "A"), False
    elif not AST_CHECK_IN_GATHER:
        changed = not all(kernels.arrays_equal(a, b)
                          for a, b in zip(_source_arrays(S), index[4:], strict=True))
        faults = 0 if changed else _gather(A, t_indptr, t_indices, t_data, out, bounds, "A")
    else:
        check = [a for pair in zip(_source_arrays(S), index[4:], strict=True) for a in pair]
        faults, changed = kernels.csc_gather_mult_checked(
            _transposed_c(A, "A"), t_indptr, t_indices, t_data, out.T, bounds, *check)
    if changed or faults:  # S edited in place: scatter now, rebuild on the next call
        getattr(S, _INDEX_ATTR)["index"] = None
        return False
    return True


def _mult_ast_blocked(AT, S, outT, threads):
    """A*S^T by output blocks (see :func:`roofline.kernels.csc_mult_t_blocked`); returns the
    kernel's fault count."""
    n, m = S.shape
    nnz = int(S.indptr[-1])
    shift = kernels.AST_BLOCK_SHIFT
    n_blocks = (n + (1 << shift) - 1) >> shift
    n_threads = max(1, min(threads, m))
    bounds = _chunks(S.indptr, n_threads)
    # float32 values ride in the upper half of the 8-byte entry when the key fits the lower
    packed = AT.dtype == np.float32 and (m << shift) < (1 << 32)
    dbits = S.data.view(np.uint32) if packed else np.empty(0, np.uint32)
    vals = (np.empty(0, AT.dtype) if packed
            else _scratch_at_least("mult_ast_vals", nnz, AT.dtype))
    return kernels.csc_mult_t_blocked(
        AT, S.indptr, S.indices, S.data, dbits, outT, bounds, shift,
        _scratch("mult_ast_counts", (n_threads, n_blocks), np.int64),
        _scratch_at_least("mult_ast_keys", nnz, np.uint64), vals,
        _scratch("mult_ast_starts", (n_blocks + 1,), np.int64),
        _scratch("mult_ast_owners", (n_threads + 1,), np.int64),
    )


def sddmm(S, A, B, out=None, *, scale=True, cache=None, tag="sddmm"):
    """Sampled dense-dense product: ``(A^T B)`` at the nonzeros of ``S``.

    Parameters
    ----------
    S : CSC matrix, shape (n, m)
        The sampling pattern (and, with ``scale=True``, the scale).
    A : array, shape (k, n) or (n,)
    B : array, shape (k, m) or (m,)
    out : array, shape (nnz,), optional
        Output values, in the order of ``S.data``.
    scale : bool
        Multiply each dot product by the value of ``S`` at that position (BIDMach's ``DDS``).
    cache, tag
        As in :func:`mult_as` (applies to the values array).

    Returns
    -------
    C : CSC matrix with ``S``'s pattern
        ``C[i, j] = dot(A[:, i], B[:, j]) * (S[i, j] if scale else 1)`` for each nonzero
        ``(i, j)`` of ``S``.  The structure arrays are shared with ``S`` (not copied).
    """
    A = as_dense(A, "A")
    B = as_dense(B, "B")
    check_csc(S, "S")
    _same_dtype(("A", A), ("B", B), ("S", S))
    n, m = S.shape
    if A.shape[-1] != n:
        raise ValueError(f"A has {A.shape[-1]} columns but S has {n} rows")
    if B.shape[-1] != m:
        raise ValueError(f"B has {B.shape[-1]} columns but S has {m} columns")
    ka = 1 if A.ndim == 1 else A.shape[0]
    kb = 1 if B.ndim == 1 else B.shape[0]
    if ka != kb:
        raise ValueError(f"A has {ka} rows but B has {kb} rows (SDDMM needs them equal)")
    if not (device_of(A) == device_of(B) == device_of(S)):
        raise ValueError("S, A and B must be on the same device")
    nnz = int(S.indptr[-1])
    if out is not None:
        as_dense(out, "out")
        _check_writeable(out)
        if out.shape != (nnz,):
            raise ValueError(f"out has shape {out.shape}, expected ({nnz},)")
        if out.dtype != A.dtype:
            raise TypeError(f"out has dtype {out.dtype}, expected {A.dtype}")
    else:
        out = _output(None, (nnz,), A.dtype, cache, tag, like=A)
    if _overlaps(out, A, B, *_sparse_arrays(S)):  # compute aside, then copy (as numpy)
        tmp = empty((nnz,), A.dtype, device=device_of(A))
        _sddmm(S, A, B, tmp, scale)
        out[...] = tmp
    else:
        _sddmm(S, A, B, out, scale)
    return _with_pattern(S, out)


def _sddmm(S, A, B, out, scale):
    """The values of :func:`sddmm` into ``out`` (arguments validated)."""
    m = S.shape[1]
    nnz = out.shape[0]
    ka = 1 if A.ndim == 1 else A.shape[0]
    if device_of(A) == "gpu":  # pragma: no cover - needs a GPU
        _gpu_sddmm(S, A, B, out, scale)
    elif ka == 0:
        out[...] = 0
    elif nnz:
        with kernels.limit_threads(_threads_for(nnz * ka)) as threads:
            bounds = _chunks(S.indptr, min(m, threads * _CHUNKS_PER_THREAD))
            if ka == 1:
                faults = kernels.csc_sddmm_vec(A.reshape(-1), B.reshape(-1), S.indptr,
                                               S.indices, S.data, out, bounds, bool(scale))
            else:
                faults = kernels.csc_sddmm(_transposed_c(A, "A"), _transposed_c(B, "B"),
                                           S.indptr, S.indices, S.data, out, bounds,
                                           bool(scale))
        if faults:
            raise _out_of_range(S)
    return out


def _with_pattern(S, values):
    """A CSC matrix of ``S``'s kind and pattern holding ``values`` (structure shared)."""
    return csc_from_arrays(type(S), values, S.indices[: values.shape[0]], S.indptr, S.shape)


# ---------------------------------------------------------------------------------------------
# cupy operands: the numba-cuda kernels of roofline.kernels._cuda_primitives

#: How A*S^T runs on the GPU: ``"auto"`` (the cost model of :func:`gpu_ast_method`),
#: ``"atomic"`` or ``"gather"``; set from ``ROOFLINE_GPU_AST`` at import.
GPU_AST_METHOD = os.environ.get("ROOFLINE_GPU_AST", "auto")

_GPU_ATTR = "_roofline_gpu_plans"

#: Bytes of device memory one random access moves at least (an L2 sector).
_SECTOR = 32


def _structure_id(S):
    return (id(S.indptr), id(S.indices), S.shape, int(S.indptr.shape[0]))


def _gpu_cached(S, key, build):
    """A per-matrix GPU plan (segment list, transposed index), kept on the matrix object while
    its structure arrays stay the same objects (a rebuilt matrix builds afresh)."""
    plans = getattr(S, _GPU_ATTR, None)
    sid = _structure_id(S)
    if plans is None or plans.get("_id") != sid:
        plans = {"_id": sid}
        setattr(S, _GPU_ATTR, plans)
    if key not in plans:
        plans[key] = build()
    return plans[key]


def _gpu_has(S, key) -> bool:
    plans = getattr(S, _GPU_ATTR, None)
    return plans is not None and plans.get("_id") == _structure_id(S) and key in plans


def _seg_len(k):
    return kernels.gpu_seg_len(k)


def _gpu_plan(S, k):
    L = _seg_len(k)
    return _gpu_cached(S, ("seg", L), lambda: kernels.segment_plan(S.indptr, L))


def _gpu_transposed(S, k):
    """The transposed index of ``S`` and its segment plan for this ``k`` (cached on ``S``)."""
    index = _gpu_cached(S, "T", lambda: kernels.transpose_index(S.indptr, S.indices,
                                                                S.shape[0]))
    L = _seg_len(k)
    plan = _gpu_cached(S, ("Tseg", L), lambda: kernels.segment_plan(index[0], L))
    return index, plan


def gpu_ast_method(nnz: int, k: int, itemsize: int, cached: bool) -> str:
    """The A*S^T strategy on the GPU by its memory traffic (bytes per nonzero).

    * ``"atomic"``: each nonzero reads and writes its feature's output column (a random
      ``max(32, k * itemsize)``-byte access, twice: the atomic read-modify-write);
    * ``"gather"``: each nonzero of the transposed index reads its position and example
      (8 bytes), its value through the permutation (a random sector) and the example's column of
      ``A`` (a random access); building the index first (when it is not cached) sorts the
      nonzeros by feature, ~48 bytes per nonzero.

    So the first call on a matrix takes atomics for small ``k`` and the index from
    ``k * itemsize`` of ~256 bytes on; once the index is cached (a matrix used again: full-batch
    solvers, epochs over device-resident data) the gather wins.  Hot features make atomics
    collide on the same addresses, which the model does not see: ``GPU_AST_METHOD`` (or
    ``ROOFLINE_GPU_AST``) forces either.
    """
    if GPU_AST_METHOD in ("atomic", "gather"):
        return GPU_AST_METHOD
    access = max(_SECTOR, k * itemsize)
    atomic = 2 * access
    gather = access + 8 + _SECTOR + (0 if cached else 48)
    return "gather" if gather < atomic else "atomic"


def _xp(a):
    """cupy for device arrays; numpy for host arrays (the GPU paths below also run on numpy
    operands under numba's CUDA simulator, which is how the tests reach them without a GPU)."""
    return np if isinstance(a, np.ndarray) else get_array_module(a)


def _gpu_prep(A, name):
    """``A`` as a 2-D ``(k, n)`` device array, Fortran-ordered (a copy only when it is not)."""
    if A.ndim == 1:
        return A.reshape(1, -1)
    if not A.flags.f_contiguous:
        logger.debug("%s of shape %s is not Fortran-ordered: copying it", name, A.shape)
        A = _xp(A).asfortranarray(A)
    return A


def _gpu_faults(faults, S):
    if int(faults[0]):
        raise _out_of_range(S)


def _gpu_mult_as(A, S, out):  # pragma: no cover - needs a GPU (simulator: tests/kernels)
    k = 1 if A.ndim == 1 else A.shape[0]
    out2 = out.reshape(1, -1) if out.ndim == 1 else out
    if k == 0 or S.shape[1] == 0:
        out[...] = 0
        return out
    plan = _gpu_plan(S, k)
    if plan[3]:
        out2[...] = 0
    faults = _xp(A).zeros(1, np.int32)
    kernels.gpu_mult_as(_gpu_prep(A, "A"), S.indptr, S.indices, S.data, plan, out2, faults)
    _gpu_faults(faults, S)
    return out


def _gpu_mult_ast(A, S, out):  # pragma: no cover - needs a GPU (simulator: tests/kernels)
    k = 1 if A.ndim == 1 else A.shape[0]
    out2 = out.reshape(1, -1) if out.ndim == 1 else out
    nnz = int(S.indptr[-1])
    if k == 0 or S.shape[0] == 0 or nnz == 0:
        out[...] = 0
        return out
    A2 = _gpu_prep(A, "A")
    faults = _xp(A).zeros(1, np.int32)
    method = gpu_ast_method(nnz, k, A.dtype.itemsize, _gpu_has(S, "T"))
    if method == "gather":
        index, plan = _gpu_transposed(S, k)
        if plan[3]:
            out2[...] = 0
        kernels.gpu_mult_ast_gather(A2, index, S.data, plan, out2, faults)
    else:
        out2[...] = 0
        kernels.gpu_mult_ast_atomic(A2, S.indptr, S.indices, S.data, _gpu_plan(S, k), out2,
                                    faults)
    _gpu_faults(faults, S)
    return out


def _gpu_sddmm(S, A, B, out, scale):  # pragma: no cover - needs a GPU (simulator: tests/kernels)
    k = 1 if A.ndim == 1 else A.shape[0]
    if out.shape[0] == 0:
        return out
    if k == 0:
        out[...] = 0
        return out
    faults = _xp(A).zeros(1, np.int32)
    kernels.gpu_sddmm(_gpu_prep(A, "A"), _gpu_prep(B, "B"), S.indptr, S.indices, S.data,
                      _gpu_plan(S, k), bool(scale), out, faults)
    _gpu_faults(faults, S)
    return out
