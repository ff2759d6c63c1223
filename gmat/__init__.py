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
    csc_from_arrays,
    device_of,
    empty,
    get_array_module,
    gpu_available,
    is_sparse,
    slice_columns,
    to_device,
    zeros,
)
from ._cache import BufferCache, default_cache
from ._cost import Cost, cost_mult_as, cost_mult_ast, cost_sddmm
from ._fused import (
    GLM_LOSSES,
    FusedWorkspace,
    adagrad_glm_step,
    check_glm_labels,
    glm_adagrad_online_step,
    glm_adagrad_step,
)
from ._fused import MAX_NNZ as FUSED_MAX_NNZ
from ._gmat import GMat
from ._machine import MachineRoofline, machine_roofline, measure_machine
from ._ops import axpy, expit, log1pexp, sigmoid
from ._options import Options, OptionTypeError, load_toml, loads_toml, option, to_toml
from ._primitives import mult_as, mult_ast, sddmm
from ._random import powerlaw_csc
from ._report import (
    PrimitiveTiming,
    RooflineReport,
    benchmark_primitives,
    best_time,
    roofline_report,
)

__all__ = [
    "SUPPORTED_DTYPES",
    "BufferCache",
    "Cost",
    "FUSED_MAX_NNZ",
    "FusedWorkspace",
    "GLM_LOSSES",
    "GMat",
    "MachineRoofline",
    "OptionTypeError",
    "Options",
    "PrimitiveTiming",
    "RooflineReport",
    "benchmark_primitives",
    "best_time",
    "cost_mult_as",
    "cost_mult_ast",
    "cost_sddmm",
    "machine_roofline",
    "measure_machine",
    "powerlaw_csc",
    "roofline_report",
    "adagrad_glm_step",
    "as_dense",
    "axpy",
    "check_csc",
    "csc_from_arrays",
    "check_glm_labels",
    "default_cache",
    "device_of",
    "empty",
    "get_array_module",
    "glm_adagrad_online_step",
    "glm_adagrad_step",
    "gpu_available",
    "is_sparse",
    "log1pexp",
    "load_toml",
    "loads_toml",
    "mult_as",
    "mult_ast",
    "option",
    "sddmm",
    "expit",
    "sigmoid",
    "slice_columns",
    "to_device",
    "to_toml",
    "zeros",
]

from ._cd import (  # noqa: E402  (coordinate-descent steps, issue 6)
    cd_block_apply,
    cd_block_stats,
    cd_block_steps,
    cd_col_sqnorms,
    cd_conj_sum,
    cd_dual_epoch,
    cd_dual_tpa,
    cd_dual_tpa_split,
    cd_feature_major,
    cd_grad,
    cd_greedy_pure_blocks,
    cd_intercept_step,
    cd_loss_sum,
    cd_matvec,
    cd_matvec_t,
    cd_primal_epoch,
    cd_primal_tpa,
    cd_reorder_features,
    cd_unit_columns,
)

__all__ += [
    "cd_block_apply",
    "cd_block_stats",
    "cd_block_steps",
    "cd_col_sqnorms",
    "cd_unit_columns",
    "cd_conj_sum",
    "cd_dual_epoch",
    "cd_dual_tpa",
    "cd_dual_tpa_split",
    "cd_feature_major",
    "cd_grad",
    "cd_greedy_pure_blocks",
    "cd_intercept_step",
    "cd_loss_sum",
    "cd_matvec",
    "cd_matvec_t",
    "cd_primal_epoch",
    "cd_primal_tpa",
    "cd_reorder_features",
]
