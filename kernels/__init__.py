"""Compute kernels behind :mod:`roofline.gmat`: numba CPU kernels over raw arrays, and CUDA
kernels (cupy ``RawModule``, compiled on first use) for the GPU.

Learners never call these directly; they go through ``roofline.gmat``.
"""

from ._csc import (
    AST_BLOCK_SHIFT,
    N_ACC,
    SLAB_SAMPLE,
    check_csc_structure,
    count_distinct_rows,
    csc_mult,
    csc_mult_t,
    csc_mult_t_blocked,
    csc_mult_t_vec,
    csc_mult_vec,
    csc_sddmm,
    csc_sddmm_vec,
    default_threads,
    limit_threads,
    nnz_chunks,
    nnz_chunks_into,
    row_slabs,
    row_slabs_into,
)
from ._machine import fma_loop, gather_rows, stream_read, stream_triad
from ._simd import lanes, vaxpy

__all__ = [
    "AST_BLOCK_SHIFT",
    "N_ACC",
    "SLAB_SAMPLE",
    "check_csc_structure",
    "count_distinct_rows",
    "csc_mult",
    "csc_mult_vec",
    "csc_mult_t",
    "csc_mult_t_blocked",
    "csc_mult_t_vec",
    "csc_sddmm",
    "csc_sddmm_vec",
    "default_threads",
    "limit_threads",
    "nnz_chunks",
    "nnz_chunks_into",
    "row_slabs",
    "row_slabs_into",
    "fma_loop",
    "gather_rows",
    "stream_read",
    "stream_triad",
    "lanes",
    "vaxpy",
]

from ._cd import (  # noqa: E402  (coordinate-descent kernels, issue 6)
    cd_block_apply,
    cd_block_stats,
    cd_block_steps,
    cd_col_sqnorms,
    cd_col_sqnorms_serial,
    cd_conj_sum,
    cd_dual_epoch,
    cd_dual_epoch_parfor,
    cd_dual_tpa,
    cd_dual_tpa_split,
    cd_frequency_order,
    cd_grad,
    cd_greedy_pure_blocks,
    cd_intercept_step,
    cd_loss_sum,
    cd_matvec,
    cd_matvec_serial,
    cd_matvec_t,
    cd_primal_epoch,
    cd_primal_tpa,
    cd_remap_indices,
    cd_unit_columns,
)

__all__ += [
    "cd_block_apply",
    "cd_block_stats",
    "cd_block_steps",
    "cd_col_sqnorms",
    "cd_col_sqnorms_serial",
    "cd_unit_columns",
    "cd_conj_sum",
    "cd_dual_epoch",
    "cd_dual_epoch_parfor",
    "cd_dual_tpa",
    "cd_dual_tpa_split",
    "cd_frequency_order",
    "cd_grad",
    "cd_greedy_pure_blocks",
    "cd_intercept_step",
    "cd_loss_sum",
    "cd_matvec",
    "cd_matvec_serial",
    "cd_matvec_t",
    "cd_primal_epoch",
    "cd_primal_tpa",
    "cd_remap_indices",
]

from ._glm import (  # noqa: E402  (fused GLM, issue 5)
    GLM_LOSS_CODES,
    adagrad_glm_update,
    adagrad_glm_update_serial,
    glm_accumulate_touched,
    glm_adagrad_online,
    glm_adagrad_online_vec,
    glm_forward_backward,
    glm_forward_backward_vec,
)

__all__ += [
    "GLM_LOSS_CODES",
    "adagrad_glm_update",
    "adagrad_glm_update_serial",
    "glm_accumulate_touched",
    "glm_adagrad_online",
    "glm_adagrad_online_vec",
    "glm_forward_backward",
    "glm_forward_backward_vec",
]

from ._cuda_glm import (  # noqa: E402  (the fused GLM step on the GPU; imports cupy lazily)
    GPU_ACC_HEAD,
    gpu_glm_scatter_update,
    gpu_glm_step,
)

__all__ += ["GPU_ACC_HEAD", "gpu_glm_scatter_update", "gpu_glm_step"]

from ._svmlight import find_line_starts, svmlight_parse  # noqa: E402  (svmlight parser, issue 4)

__all__ += ["find_line_starts", "svmlight_parse"]

from ._criteo import (  # noqa: E402  (Criteo TSV parse/hash/format, issue 4)
    N_CAT,
    N_INT,
    criteo_format,
    criteo_hash_fields,
    criteo_int_bucket,
    criteo_parse,
    log_bucket_thresholds,
)
from ._hash import murmur3_32, murmur3_32_hex8, murmur3_32_int  # noqa: E402  (issue 4)

__all__ += [
    "N_CAT",
    "N_INT",
    "criteo_format",
    "criteo_hash_fields",
    "criteo_int_bucket",
    "criteo_parse",
    "log_bucket_thresholds",
    "murmur3_32",
    "murmur3_32_hex8",
    "murmur3_32_int",
]
