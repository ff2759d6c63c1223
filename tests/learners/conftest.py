"""Fixtures of the learners tests."""

import numpy as np
import pytest


@pytest.fixture(params=[np.float32, np.float64], ids=["f32", "f64"])
def dtype(request):
    return np.dtype(request.param)
