"""Explicit SIMD row operations for the numba kernels.

LLVM vectorises the short inner loops of the gather/scatter kernels poorly: a row update
``o[kk] += v * a[kk]`` over ``k`` values of two rows that may alias is compiled, with a constant
``k``, to ``k`` scalar fused multiply-adds, each with its own loads and store, and with a
runtime ``k`` to a vector loop behind per-row alias checks and trip-count branches (measured
here, 4M random 16-wide float32 row updates with both rows in cache: 31 ms constant-``k``
scalar, 12.5 ms runtime-``k``, 7.1 ms with this intrinsic).  This module emits the vector code
directly, one *lane block* of ``W = 64 / itemsize`` values (16 float32 or 8 float64, one cache
line) per call:

``vaxpy(o, i, a, j, off, v)``
    ``o[i, off:off+W] += v * a[j, off:off+W]``

In kernels whose time goes to cache misses rather than to the update itself (``A*S`` and
``SDDMM`` gathering model columns) the explicit form measured no faster (0.8-1.0x), so only
:func:`~roofline.kernels.csc_mult_t_blocked`, whose updates run in cache, uses it.

``o`` and ``a`` are 2-D C-contiguous arrays of one float dtype; rows need not be aligned
(the loads and stores are unaligned).  Nothing is bounds-checked: callers keep
``off + W <= k`` and the rows in range, and handle the last ``k % W`` values with scalar code
(:func:`lanes` gives ``W`` for a dtype inside a kernel).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ._prefetch import row_pointer

__all__ = ["lanes", "vaxpy"]

_LINE = 64


def _row_vector_ptr(context, builder, aryty, ary_val, row, rowty, off, offty, vecty):
    """Pointer to ``<W x T>`` at ``ary[row, off]`` of a 2-D C-contiguous array."""
    o = context.cast(builder, off, offty, types.intp)
    itemsize = context.get_constant(types.intp, aryty.dtype.bitwidth // 8)
    return row_pointer(context, builder, aryty, ary_val, row, rowty, builder.mul(o, itemsize),
                       vecty.as_pointer())


def _float_array2d(arr):
    return (isinstance(arr, types.Array) and arr.ndim == 2
            and isinstance(arr.dtype, types.Float))


def _vec_type(context, dtype):
    elt = context.get_value_type(dtype)
    return ir.VectorType(elt, _LINE // (dtype.bitwidth // 8)), elt


def _load(builder, ptr, dtype):
    return builder.load(ptr, align=dtype.bitwidth // 8)


@intrinsic
def lanes(typingctx, arr):
    """``W``, the number of values one lane block of ``arr``'s dtype holds (a constant)."""
    if not isinstance(arr, types.Array) or not isinstance(arr.dtype, types.Float):
        return None

    def codegen(context, builder, signature, args):
        return context.get_constant(types.intp, _LINE // (arr.dtype.bitwidth // 8))

    return types.intp(arr), codegen


@intrinsic
def vaxpy(typingctx, o, i, a, j, off, v):
    """``o[i, off:off+W] += v * a[j, off:off+W]``."""
    if not (_float_array2d(o) and _float_array2d(a) and o.dtype == a.dtype):
        return None
    sig = types.void(o, i, a, j, off, v)

    def codegen(context, builder, signature, args):
        dt = o.dtype
        vecty, elt = _vec_type(context, dt)
        po = _row_vector_ptr(context, builder, o, args[0], args[1], signature.args[1],
                             args[4], signature.args[4], vecty)
        pa = _row_vector_ptr(context, builder, a, args[2], args[3], signature.args[3],
                             args[4], signature.args[4], vecty)
        s = context.cast(builder, args[5], signature.args[5], dt)
        sv = cgutils.get_null_value(vecty)
        for lane in range(vecty.count):
            sv = builder.insert_element(sv, s, ir.Constant(ir.IntType(32), lane))
        fma = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(vecty, [vecty, vecty, vecty]),
            f"llvm.fmuladd.v{vecty.count}f{dt.bitwidth}")
        res = builder.call(fma, [sv, _load(builder, pa, dt), _load(builder, po, dt)])
        builder.store(res, po, align=dt.bitwidth // 8)
        return context.get_dummy_value()

    return sig, codegen
