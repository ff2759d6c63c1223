"""Compute kernels behind :mod:`roofline.gmat`: numba CPU kernels over raw arrays, and CUDA
kernels (cupy ``RawModule``, compiled on first use) for the GPU.

An internal package: learners never call these directly, they go through ``roofline.gmat``;
the datasources use the parsers and hashes.  ``__all__`` is what those callers (and the kernel
tests) use, one private module per job:

``_csc``        sparse primitives ``A*S``, ``A*S^T``, SDDMM over CSC; work partitioning
``_machine``    micro-benchmarks of the machine and disk rooflines (stream, FMA, gather, files)
``_simd``       SIMD lane probes
``_losses``     the one loss table (LOSS_TABLE), the scalar losses (value, derivatives, conjugate)
``_als``        the per-row solves of alternating least squares (matrix factorization)
``_cd``         coordinate-descent steps (primal, dual/SDCA, TPA-SCD, pure blocks)
``_reduce``     the node-local loops of Kylix's sparse all-reduce (roofline.comm)
``_glm``        the fused ADAGrad GLM step on the CPU; the GLM-form loss over arrays
``_lda``        LDA's variational E-step, fused per document (roofline.learners' LDA)
``_softmax``    the multinomial (softmax) loss, gradient and Hessian products over CSC or dense
                data in one pass (roofline.glm's fit_multinomial)
``_cuda_glm``   the fused ADAGrad GLM step on the GPU (imports cupy lazily)
``_cuda_losses`` the GLM-form loss over device arrays (numba-cuda, imported lazily)
``_cuda_cd``    TPA-SCD of the dual on the GPU and its device-side problem (DeviceDual)
``_cuda_stream`` Snap ML's double-buffered host-to-device chunk pipeline (DeviceChunkStream)
``_cuda_primitives``  numba-cuda kernels of A*S, A*S^T, SDDMM and the GPU roofline's
                micro-benchmarks (numba.cuda imported on first launch; simulator-tested)
``_svmlight``, ``_criteo``, ``_hash``   text parsers and feature hashing of the datasources
``_threads``    the parallel kernels' decorator: idle OpenMP workers sleep (``OMP_WAIT_POLICY``)
"""

from importlib.metadata import version as _dist_version

from ._als import (
    als_explicit,
    als_explicit_cg,
    als_implicit_cg,
    als_implicit_cholesky,
    als_normal_equations,
    als_row_chunks,
    als_solve_systems,
)
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
    cd_free_parts,
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
    cd_scaled_side_conj,
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
    PREFETCH_DISTANCE,
    SLAB_SAMPLE,
    check_csc_structure,
    count_distinct_rows,
    csc_fingerprint,
    csc_mult,
    csc_mult_t,
    csc_mult_t_blocked,
    csc_sddmm,
    csc_sddmm_vec,
    default_threads,
    limit_threads,
    nnz_chunks,
    nnz_chunks_into,
    row_slabs,
    row_slabs_into,
)
from ._cuda_cd import DeviceDual, cuda_ready, eso_colsq, gpu_dual_tpa
from ._cuda_glm import GPU_ACC_HEAD, gpu_glm_scatter_update, gpu_glm_step
from ._cuda_losses import gpu_glm_loss_deriv
from ._cuda_primitives import (
    gpu_fma,
    gpu_layout,
    gpu_mult_as,
    gpu_mult_ast_atomic,
    gpu_mult_ast_gather,
    gpu_sddmm,
    gpu_seg_len,
    gpu_stream,
    segment_plan,
    transpose_index,
)
from ._cuda_stream import DeviceChunkStream
from ._glm import (
    adagrad_glm_update,
    adagrad_glm_update_serial,
    glm_accumulate_touched,
    glm_adagrad_online,
    glm_adagrad_online_vec,
    glm_forward_backward,
    glm_forward_backward_vec,
    glm_loss_deriv_cols,
)
from ._hash import murmur3_32, murmur3_32_hex8, murmur3_32_int
from ._lda import lda_digamma, lda_e_step, lda_e_step_serial, lda_gibbs_sweep
from ._losses import (
    HINGE,
    LABEL_FORMS,
    LOGISTIC,
    LOSS_CODES,
    LOSS_TABLE,
    SQUARED,
    SQUARED_HINGE,
    glm_loss_deriv,
)
from ._machine import (
    DiskRoofline,
    disk_roofline,
    fma_loop,
    gather_rows,
    measure_disk,
    stream_read,
    stream_read_repeat,
    stream_triad,
)
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
from ._softmax import (
    softmax_csc_eval,
    softmax_csc_hess,
    softmax_dense_eval,
    softmax_dense_hess,
    softmax_rows_times,
)
from ._spmm import (
    GATHER_DISTANCE,
    GATHER_VECTORS,
    SCATTER_DISTANCE,
    TRANSPOSE_TILE,
    arrays_equal,
    csc_gather_mult,
    csc_gather_mult_checked,
    csc_gather_vec,
    csc_scatter_vec,
    csc_transpose_index,
    transpose_into,
)
from ._svmlight import find_line_starts, svmlight_parse
from ._threads import limit_blas_threads, parallel_njit, quiet_openmp

__version__ = _dist_version("roofline")  # the installed distribution's version

__all__ = [
    "AST_BLOCK_SHIFT",
    "GATHER_DISTANCE",
    "GATHER_VECTORS",
    "GPU_ACC_HEAD",
    "HINGE",
    "LABEL_FORMS",
    "LOGISTIC",
    "LOSS_CODES",
    "LOSS_TABLE",
    "N_ACC",
    "N_CAT",
    "N_INT",
    "PREFETCH_DISTANCE",
    "SCATTER_DISTANCE",
    "SLAB_SAMPLE",
    "SQUARED",
    "SQUARED_HINGE",
    "TRANSPOSE_TILE",
    "DeviceChunkStream",
    "DeviceDual",
    "DiskRoofline",
    "adagrad_glm_update",
    "adagrad_glm_update_serial",
    "als_explicit",
    "als_explicit_cg",
    "als_implicit_cg",
    "als_implicit_cholesky",
    "als_normal_equations",
    "als_row_chunks",
    "als_solve_systems",
    "arrays_equal",
    "cd_block_apply",
    "cd_block_stats",
    "cd_block_steps",
    "cd_col_sqnorms",
    "cd_col_sqnorms_serial",
    "cd_conj_sum",
    "cd_dense_counts",
    "cd_dense_fill",
    "cd_dual_epoch",
    "cd_dual_epoch_parfor",
    "cd_dual_sweeps",
    "cd_dual_tpa",
    "cd_dual_tpa_split",
    "cd_feature_counts",
    "cd_free_parts",
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
    "cd_scaled_side_conj",
    "cd_unit_columns",
    "cd_unit_columns_serial",
    "check_csc_structure",
    "count_distinct_rows",
    "criteo_format",
    "criteo_hash_fields",
    "criteo_int_bucket",
    "criteo_parse",
    "csc_fingerprint",
    "csc_gather_mult",
    "csc_gather_mult_checked",
    "csc_gather_vec",
    "csc_mult",
    "csc_mult_t",
    "csc_mult_t_blocked",
    "csc_scatter_vec",
    "csc_sddmm",
    "csc_sddmm_vec",
    "csc_transpose_index",
    "cuda_ready",
    "default_threads",
    "disk_roofline",
    "eso_colsq",
    "find_line_starts",
    "fma_loop",
    "gather_rows",
    "glm_accumulate_touched",
    "glm_adagrad_online",
    "glm_adagrad_online_vec",
    "glm_forward_backward",
    "glm_forward_backward_vec",
    "glm_loss_deriv",
    "glm_loss_deriv_cols",
    "gpu_dual_tpa",
    "gpu_fma",
    "gpu_glm_loss_deriv",
    "gpu_glm_scatter_update",
    "gpu_glm_step",
    "gpu_layout",
    "gpu_mult_as",
    "gpu_mult_ast_atomic",
    "gpu_mult_ast_gather",
    "gpu_sddmm",
    "gpu_seg_len",
    "gpu_stream",
    "lanes",
    "lda_digamma",
    "lda_e_step",
    "lda_e_step_serial",
    "lda_gibbs_sweep",
    "limit_blas_threads",
    "limit_threads",
    "log_bucket_thresholds",
    "measure_disk",
    "murmur3_32",
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
    "nnz_chunks",
    "nnz_chunks_into",
    "parallel_njit",
    "quiet_openmp",
    "reduce_gather",
    "reduce_scatter_add",
    "row_slabs",
    "row_slabs_into",
    "segment_plan",
    "softmax_csc_eval",
    "softmax_csc_hess",
    "softmax_dense_eval",
    "softmax_dense_hess",
    "softmax_rows_times",
    "stream_read",
    "stream_read_repeat",
    "stream_triad",
    "svmlight_parse",
    "transpose_index",
    "transpose_into",
    "vaxpy",
]
