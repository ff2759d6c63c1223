"""Compute kernels behind :mod:`roofline.gmat`: numba CPU kernels over raw arrays, and CUDA
kernels (cupy ``RawModule``, compiled on first use) for the GPU.

An internal package: learners never call these directly, they go through ``roofline.gmat``;
the datasources use the parsers and hashes.  ``__all__`` is what those callers (and the kernel
tests) use, one private module per job:

``_csc``        sparse primitives ``A*S``, ``A*S^T``, SDDMM over CSC; work partitioning
``_machine``    micro-benchmarks of the machine roofline (stream, FMA, gather)
``_simd``       SIMD lane probes
``_losses``     the one loss table (LOSS_TABLE), the scalar losses (value, derivatives, conjugate)
``_cd``         coordinate-descent steps (primal, dual/SDCA, TPA-SCD, pure blocks)
``_reduce``     the node-local loops of Kylix's sparse all-reduce (roofline.comm)
``_glm``        the fused ADAGrad GLM step on the CPU
``_cuda_glm``   the fused ADAGrad GLM step on the GPU (imports cupy lazily)
``_cuda_primitives``  numba-cuda kernels of A*S, A*S^T, SDDMM and the GPU roofline's
                micro-benchmarks (numba.cuda imported on first launch; simulator-tested)
``_svmlight``, ``_criteo``, ``_hash``   text parsers and feature hashing of the datasources
``_threads``    the parallel kernels' decorator: idle OpenMP workers sleep (``OMP_WAIT_POLICY``)
"""

from ._cd import (
    cd_block_apply,
    cd_block_stats,
    cd_block_steps,
    cd_col_sqnorms,
    cd_col_sqnorms_serial,
    cd_conj_sum,
    cd_dense_counts,
    cd_dense_fill,
    cd_dual_epoch,
    cd_dual_epoch_parfor,
    cd_dual_sweeps,
    cd_dual_tpa,
    cd_dual_tpa_split,
    cd_feature_counts,
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
    cd_unit_columns_serial,
)
from ._criteo import (
    N_CAT,
    N_INT,
    criteo_format,
    criteo_hash_fields,
    criteo_int_bucket,
    criteo_parse,
    log_bucket_thresholds,
)
from ._csc import (
    AST_BLOCK_SHIFT,
    N_ACC,
    SLAB_SAMPLE,
    check_csc_structure,
    count_distinct_rows,
    csc_fingerprint,
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
from ._cuda_glm import GPU_ACC_HEAD, gpu_glm_scatter_update, gpu_glm_step
from ._cuda_primitives import (
    gpu_layout,
    gpu_mult_as,
    gpu_mult_ast_atomic,
    gpu_mult_ast_gather,
    gpu_sddmm,
    segment_plan,
    transpose_index,
)
from ._glm import (
    adagrad_glm_update,
    adagrad_glm_update_serial,
    glm_accumulate_touched,
    glm_adagrad_online,
    glm_adagrad_online_vec,
    glm_forward_backward,
    glm_forward_backward_vec,
)
from ._hash import murmur3_32, murmur3_32_hex8, murmur3_32_int
from ._losses import HINGE, LOGISTIC, LOSS_CODES, LOSS_TABLE, SQUARED, SQUARED_HINGE
from ._machine import fma_loop, gather_rows, stream_read, stream_triad
from ._newton import (
    newton_conj_sum,
    newton_dense_eval,
    newton_dense_eval_parallel,
    newton_dense_hess_vec,
    newton_dense_hess_vec_parallel,
    newton_hess_diag,
    newton_hess_vec,
    newton_hess_vec_parallel,
    newton_loss_derivs,
    newton_loss_sum,
)
from ._reduce import reduce_gather, reduce_scatter_add
from ._simd import lanes, vaxpy
from ._svmlight import find_line_starts, svmlight_parse
from ._threads import parallel_njit, quiet_openmp

__all__ = [
    "AST_BLOCK_SHIFT",
    "GPU_ACC_HEAD",
    "HINGE",
    "LOGISTIC",
    "LOSS_CODES",
    "LOSS_TABLE",
    "N_ACC",
    "N_CAT",
    "N_INT",
    "SLAB_SAMPLE",
    "SQUARED",
    "SQUARED_HINGE",
    "adagrad_glm_update",
    "adagrad_glm_update_serial",
    "cd_block_apply",
    "cd_block_stats",
    "cd_block_steps",
    "cd_col_sqnorms",
    "cd_col_sqnorms_serial",
    "cd_conj_sum",
    "cd_dual_epoch",
    "cd_dual_epoch_parfor",
    "cd_dual_sweeps",
    "cd_dual_tpa",
    "cd_dual_tpa_split",
    "cd_dense_counts",
    "cd_dense_fill",
    "cd_feature_counts",
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
    "cd_unit_columns",
    "cd_unit_columns_serial",
    "check_csc_structure",
    "count_distinct_rows",
    "criteo_format",
    "criteo_hash_fields",
    "criteo_int_bucket",
    "criteo_parse",
    "csc_fingerprint",
    "csc_mult",
    "csc_mult_t",
    "csc_mult_t_blocked",
    "csc_mult_t_vec",
    "csc_mult_vec",
    "csc_sddmm",
    "csc_sddmm_vec",
    "default_threads",
    "find_line_starts",
    "fma_loop",
    "gather_rows",
    "glm_accumulate_touched",
    "glm_adagrad_online",
    "glm_adagrad_online_vec",
    "glm_forward_backward",
    "glm_forward_backward_vec",
    "gpu_glm_scatter_update",
    "gpu_glm_step",
    "gpu_layout",
    "gpu_mult_as",
    "gpu_mult_ast_atomic",
    "gpu_mult_ast_gather",
    "gpu_sddmm",
    "lanes",
    "limit_threads",
    "log_bucket_thresholds",
    "murmur3_32",
    "parallel_njit",
    "quiet_openmp",
    "murmur3_32_hex8",
    "murmur3_32_int",
    "newton_conj_sum",
    "newton_dense_eval",
    "newton_dense_eval_parallel",
    "newton_dense_hess_vec",
    "newton_dense_hess_vec_parallel",
    "newton_hess_diag",
    "newton_hess_vec",
    "newton_hess_vec_parallel",
    "newton_loss_derivs",
    "newton_loss_sum",
    "reduce_gather",
    "reduce_scatter_add",
    "nnz_chunks",
    "nnz_chunks_into",
    "row_slabs",
    "row_slabs_into",
    "segment_plan",
    "stream_read",
    "stream_triad",
    "svmlight_parse",
    "transpose_index",
    "vaxpy",
]
