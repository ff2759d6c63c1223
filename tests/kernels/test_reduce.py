"""The sparse all-reduce loops against numpy's fancy indexing."""

import numpy as np
import pytest

from roofline.kernels import reduce_gather, reduce_scatter_add


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("n,m", [(0, 0), (1, 1), (50, 0), (1000, 300), (5000, 5000)])
def test_scatter_add_and_gather_match_numpy(dtype, n, m):
    rng = np.random.default_rng([n, m])
    pos = np.sort(rng.choice(n, m, replace=False)).astype(np.int64) if n else np.zeros(0, np.int64)
    vals = (rng.standard_normal(m) * 100).astype(dtype)
    acc = (rng.standard_normal(n) * 100).astype(dtype)
    want = acc.copy()
    want[pos] += vals
    reduce_scatter_add(acc, pos, vals)
    np.testing.assert_array_equal(acc, want)  # the same single additions: bit-identical
    out = np.empty(m, dtype)
    reduce_gather(acc, pos, out)
    np.testing.assert_array_equal(out, acc[pos])


def test_gather_unsorted_positions_with_repeats():
    src = np.arange(10, dtype=np.float64)
    pos = np.array([9, 0, 9, 3], np.int64)
    out = np.empty(4)
    reduce_gather(src, pos, out)
    np.testing.assert_array_equal(out, [9, 0, 9, 3])
