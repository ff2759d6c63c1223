"""Generic CPU/GPU matrix layer: array kinds, rooflined sparse primitives, buffer cache.

The one dispatch point of Roofline: learners and datasources call these functions and never
branch on device or dtype themselves.

Sparse matrices are CSC with one column = one example (``n_features x n_examples``); dense
model matrices are ``k x n``, best stored in Fortran order.

Public submodules: :mod:`roofline.gmat.cd` (coordinate-descent steps) and
:mod:`roofline.gmat.glm` (the loss and regularisation vocabulary, label checks, conversions to
the peers' conventions, the fused ADAGrad GLM step).
"""

from . import cd, glm
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
    "GMat",
    "MachineRoofline",
    "OptionTypeError",
    "Options",
    "PrimitiveTiming",
    "RooflineReport",
    "as_dense",
    "axpy",
    "benchmark_primitives",
    "best_time",
    "cd",
    "check_csc",
    "cost_mult_as",
    "cost_mult_ast",
    "cost_sddmm",
    "csc_from_arrays",
    "default_cache",
    "device_of",
    "empty",
    "expit",
    "get_array_module",
    "glm",
    "gpu_available",
    "is_sparse",
    "load_toml",
    "loads_toml",
    "log1pexp",
    "machine_roofline",
    "measure_machine",
    "mult_as",
    "mult_ast",
    "option",
    "powerlaw_csc",
    "roofline_report",
    "sddmm",
    "sigmoid",
    "slice_columns",
    "to_device",
    "to_toml",
    "zeros",
]

# --- transitional, removed at integration ------------------------------------------------------
# The flat names of gmat.cd (``cd_<name>``) and gmat.glm, kept while callers move to the
# submodules; not in __all__.
cd_block_apply = cd.block_apply
cd_block_stats = cd.block_stats
cd_block_steps = cd.block_steps
cd_col_sqnorms = cd.col_sqnorms
cd_conj_sum = cd.conj_sum
cd_dual_epoch = cd.dual_epoch
cd_dual_tpa = cd.dual_tpa
cd_dual_tpa_split = cd.dual_tpa_split
cd_feature_major = cd.feature_major
cd_grad = cd.grad
cd_greedy_pure_blocks = cd.greedy_pure_blocks
cd_intercept_step = cd.intercept_step
cd_loss_sum = cd.loss_sum
cd_matvec = cd.matvec
cd_matvec_t = cd.matvec_t
cd_primal_epoch = cd.primal_epoch
cd_primal_tpa = cd.primal_tpa
cd_reorder_features = cd.reorder_features
cd_unit_columns = cd.unit_columns
FUSED_MAX_NNZ = glm.MAX_NNZ
GLM_LOSSES = glm.GLM_LOSSES
FusedWorkspace = glm.FusedWorkspace
adagrad_glm_step = glm.adagrad_glm_step
check_glm_labels = glm.check_labels
glm_adagrad_online_step = glm.glm_adagrad_online_step
glm_adagrad_step = glm.glm_adagrad_step
# --- end of the transitional block -------------------------------------------------------------
