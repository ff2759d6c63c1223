"""The machine probes that are kernels of their own (the gather stream)."""

import numpy as np
import pytest

from roofline import kernels


@pytest.mark.parametrize("distance", [0, 4, 64])
@pytest.mark.parametrize("n_threads", [1, 3])
def test_gather_rows_visits_every_index_once(rng, dtype, distance, n_threads):
    """The checksums add up to the sum of the gathered rows: every position of ``idx`` is
    visited exactly once, whatever the prefetch distance and the thread split."""
    AT = rng.standard_normal((50, 16)).astype(dtype)
    idx = rng.integers(0, 50, 1001).astype(np.int32)
    sums = kernels.gather_rows(AT, idx, distance, n_threads)
    assert sums.shape == (n_threads,)
    np.testing.assert_allclose(sums.sum(), AT[idx].astype(np.float64).sum(), rtol=1e-4)
