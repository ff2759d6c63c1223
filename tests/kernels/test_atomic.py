"""The atomic float add used by the TPA kernels."""

import numpy as np
import pytest
from numba import njit, prange

from roofline.kernels._atomic import atomic_add


@njit(parallel=True, cache=False)
def _hammer(v, idx, vals, n_threads):
    for _t in prange(n_threads):
        for p in range(idx.shape[0]):
            atomic_add(v, idx[p], vals[p])


@pytest.mark.parametrize("n_threads", [1, 3])
def test_atomic_add_loses_nothing_under_contention(rng, dtype, n_threads):
    """Every thread adds the same values into 8 entries at once: every add lands (float
    sums of small integers are exact, whatever the order)."""
    idx = rng.integers(0, 8, 200_000)
    vals = rng.integers(1, 4, idx.shape[0]).astype(dtype)
    v = np.zeros(8, dtype)
    _hammer(v, idx, vals, n_threads)
    expected = n_threads * np.bincount(idx, weights=vals.astype(np.float64), minlength=8)
    np.testing.assert_array_equal(v, expected.astype(dtype))
