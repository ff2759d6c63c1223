"""A software-prefetch intrinsic for numba kernels.

Random gathers of model columns are latency-bound: a core keeps only about ten cache misses in
flight on its own.  Prefetching the row needed ``D`` nonzeros ahead lets the memory system work on
many rows at once.  ``prefetch_row(arr, i)`` issues ``llvm.prefetch`` (read, keep in all cache
levels) for the cache line ``off`` bytes into row ``i`` of a C-contiguous 2-D array (or element
``i`` of a 1-D array), called as ``prefetch_row(arr, i, off)``.  It is a hint: it never faults,
and nothing is dereferenced (callers still keep the index in range).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["prefetch_row"]


def row_pointer(context, builder, aryty, ary_val, row, rowty, byte_off, ptr_type):
    """Codegen helper for intrinsics: ``ary.data + row * strides[0] + byte_off`` as a pointer of
    ``ptr_type`` (``byte_off``: an ``intp`` IR value)."""
    ary = context.make_array(aryty)(context, builder, ary_val)
    r = context.cast(builder, row, rowty, types.intp)
    stride0 = cgutils.unpack_tuple(builder, ary.strides)[0]
    offset = builder.add(builder.mul(r, stride0), byte_off)
    base = builder.ptrtoint(ary.data, cgutils.intp_t)
    return builder.inttoptr(builder.add(base, offset), ptr_type)


@intrinsic
def prefetch_row(typingctx, arr, row, byte_offset):
    """Prefetch (for reading, into all cache levels) the cache line at ``byte_offset`` bytes
    into row ``row`` of ``arr``."""
    if not isinstance(arr, types.Array) or arr.ndim not in (1, 2):
        return None
    if not isinstance(row, types.Integer) or not isinstance(byte_offset, types.Integer):
        return None
    sig = types.void(arr, row, byte_offset)

    def codegen(context, builder, signature, args):
        aryty, rowty, offty = signature.args
        off = context.cast(builder, args[2], offty, types.intp)
        i8p = ir.IntType(8).as_pointer()
        ptr = row_pointer(context, builder, aryty, args[0], args[1], rowty, off, i8p)
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        # rw = 0 (read), locality = 3 (keep in all levels), cache type = 1 (data)
        builder.call(fn, [ptr, i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return sig, codegen
