"""Generic CPU/GPU matrix layer: array kinds, rooflined sparse primitives, buffer cache.

The one dispatch point of Roofline: learners and datasources call these functions and never
branch on device or dtype themselves.

Sparse matrices are CSC with one column = one example (``n_features x n_examples``); dense
model matrices are ``k x n``, best stored in Fortran order.

Public submodules: :mod:`roofline.glm.cd` (coordinate-descent steps) and
:mod:`roofline.glm` (the loss and regularisation vocabulary, label checks, conversions to
the peers' conventions, the fused ADAGrad GLM step).
"""

# the fused E-step and SAME sweep of roofline.learners' LDA and the per-row solves of its ALS
# (numba, CPU; arguments as the kernels document)
from importlib.metadata import version as _dist_version

from roofline.kernels import (
    als_explicit,
    als_explicit_cg,
    als_implicit_cg,
    als_implicit_cholesky,
    als_normal_equations,
    als_row_chunks,
    als_solve_systems,
    lda_e_step,
    lda_e_step_serial,
    lda_gibbs_sweep,
)

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
from ._machine import (
    DiskRoofline,
    MachineRoofline,
    cache_sizes,
    disk_roofline,
    machine_roofline,
    measure_machine,
)
from ._ops import axpy, expit, log1pexp, sigmoid
from ._options import Options, OptionTypeError, load_toml, loads_toml, option, to_toml
from ._plot import require_matplotlib
from ._primitives import mult_as, mult_ast, sddmm
from ._random import powerlaw_csc
from ._report import (
    PrimitiveTiming,
    RooflineReport,
    benchmark_primitives,
    best_time,
    roofline_report,
)

__version__ = _dist_version("roofline")  # the installed distribution's version

__all__ = [
    "SUPPORTED_DTYPES",
    "BufferCache",
    "Cost",
    "DiskRoofline",
    "GMat",
    "MachineRoofline",
    "OptionTypeError",
    "Options",
    "PrimitiveTiming",
    "RooflineReport",
    "als_explicit",
    "als_explicit_cg",
    "als_implicit_cg",
    "als_implicit_cholesky",
    "als_normal_equations",
    "als_row_chunks",
    "als_solve_systems",
    "as_dense",
    "axpy",
    "benchmark_primitives",
    "best_time",
    "cache_sizes",
    "check_csc",
    "cost_mult_as",
    "cost_mult_ast",
    "cost_sddmm",
    "csc_from_arrays",
    "default_cache",
    "device_of",
    "disk_roofline",
    "empty",
    "expit",
    "get_array_module",
    "gpu_available",
    "is_sparse",
    "lda_e_step",
    "lda_e_step_serial",
    "lda_gibbs_sweep",
    "load_toml",
    "loads_toml",
    "log1pexp",
    "machine_roofline",
    "measure_machine",
    "mult_as",
    "mult_ast",
    "option",
    "powerlaw_csc",
    "require_matplotlib",
    "roofline_report",
    "sddmm",
    "sigmoid",
    "slice_columns",
    "to_device",
    "to_toml",
    "zeros",
]


#: The GLM submodules that moved to :mod:`roofline.glm` (deprecated aliases, next release gone).
_MOVED = {"cd": "roofline.glm.cd", "glm": "roofline.glm", "newton": "roofline.glm.newton"}


def __getattr__(name):
    """``roofline.gmat.cd`` / ``.glm`` / ``.newton``: deprecated aliases (see :data:`_MOVED`)."""
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return importlib.import_module(f"{__name__}.{name}")
