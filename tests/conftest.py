"""Shared fixtures: power-law sparse matrices, dtypes, devices (GPU params skip without a GPU).

Plain helpers (data generators, ``assert_allclose_on``) are in ``tests/_helpers.py``.
"""

import os

import numpy as np
import pytest

from roofline import gmat
from tests._helpers import powerlaw_matrix

# Keep the machine-roofline cache of the test session away from the user's cache.
os.environ.setdefault("ROOFLINE_CACHE_DIR", os.path.join(os.path.dirname(__file__), ".cache"))

DTYPES = [np.float32, np.float64]


@pytest.fixture(params=DTYPES, ids=["float32", "float64"])
def dtype(request):
    """Both value dtypes, as ``numpy.dtype``."""
    return np.dtype(request.param)


@pytest.fixture(
    params=[
        "cpu",
        pytest.param("gpu", marks=pytest.mark.gpu),
    ]
)
def device(request):
    """``"cpu"`` and ``"gpu"``; the GPU case skips without a usable CUDA device."""
    if request.param == "gpu" and not gmat.gpu_available():
        pytest.skip("no CUDA device available")
    return request.param


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture
def powerlaw(dtype):
    """A small Zipf matrix (features x examples) with empty rows and skewed columns."""
    return gmat.powerlaw_csc(3000, 400, 12, dtype=dtype, random_state=7)


@pytest.fixture
def make_powerlaw():
    """The power-law factory :func:`tests._helpers.powerlaw_matrix` (empty columns and rows,
    signed values on request)."""
    return powerlaw_matrix
