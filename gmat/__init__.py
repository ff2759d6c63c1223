"""Generic CPU/GPU matrix layer: array kinds, rooflined sparse primitives, buffer cache.

The one dispatch point of Roofline: learners and datasources call these functions and never
branch on device or dtype themselves.

Sparse matrices are CSC with one column = one example (``n_features x n_examples``); dense
model matrices are ``k x n``, best stored in Fortran order.
"""

from ._arrays import (
    SUPPORTED_DTYPES,
    as_dense,
    check_csc,
    device_of,
    get_array_module,
    gpu_available,
    is_sparse,
    slice_columns,
    to_device,
)
from ._cache import BufferCache, default_cache
from ._primitives import mult_as, mult_ast, sddmm

__all__ = [
    "SUPPORTED_DTYPES",
    "BufferCache",
    "as_dense",
    "check_csc",
    "default_cache",
    "device_of",
    "get_array_module",
    "gpu_available",
    "is_sparse",
    "mult_as",
    "mult_ast",
    "sddmm",
    "slice_columns",
    "to_device",
]
