"""Compute kernels behind :mod:`roofline.gmat`: numba CPU kernels over raw arrays.

Learners never call these directly; they go through ``roofline.gmat``.
"""

from ._csc import (
    check_csc_structure,
    csc_mult,
    csc_mult_t,
    csc_sddmm,
    default_threads,
    nnz_chunks,
    row_slabs,
)

__all__ = [
    "check_csc_structure",
    "csc_mult",
    "csc_mult_t",
    "csc_sddmm",
    "default_threads",
    "nnz_chunks",
    "row_slabs",
]

from ._svmlight import find_line_starts, svmlight_parse  # noqa: E402  (svmlight parser, issue 4)

__all__ += ["find_line_starts", "svmlight_parse"]

from ._glm import adagrad_glm_update, glm_accumulate_touched  # noqa: E402  (fused GLM, issue 5)

__all__ += ["adagrad_glm_update", "glm_accumulate_touched"]
