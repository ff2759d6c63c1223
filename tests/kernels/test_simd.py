"""The explicit SIMD row update against numpy, both dtypes, unaligned rows."""

import numpy as np
from numba import njit

from roofline.kernels import lanes, vaxpy


@njit(cache=False)
def _apply(o, a, rows_o, rows_a, offs, v):
    for t in range(rows_o.shape[0]):
        vaxpy(o, rows_o[t], a, rows_a[t], offs[t], v)


@njit(cache=False)
def _lanes(a):
    return lanes(a)


def _unaligned(rng, shape, dtype):
    """A C-contiguous array starting one element past a cache-line boundary."""
    buf = np.empty(shape[0] * shape[1] + 64, dtype)
    start = (-(buf.ctypes.data // buf.itemsize) + 1) % (64 // buf.itemsize)
    out = buf[start:start + shape[0] * shape[1]].reshape(shape)
    assert out.ctypes.data % 64 != 0
    out[...] = rng.standard_normal(shape)
    return out


def test_lanes_is_one_cache_line():
    assert _lanes(np.zeros(3, np.float32)) == 16
    assert _lanes(np.zeros(3, np.float64)) == 8


def test_vaxpy_matches_numpy(rng, dtype):
    """Repeated rows included (updates accumulate in order), offsets anywhere in the row."""
    w = 64 // np.dtype(dtype).itemsize
    k = 3 * w + 5
    o = _unaligned(rng, (7, k), dtype)
    a = _unaligned(rng, (9, k), dtype)
    rows_o = rng.integers(0, 7, 40)
    rows_a = rng.integers(0, 9, 40)
    offs = rng.integers(0, k - w + 1, 40)
    v = np.dtype(dtype).type(0.37)
    expected = o.astype(np.float64)
    for r, s, c in zip(rows_o, rows_a, offs, strict=True):
        expected[r, c:c + w] += float(v) * a[s, c:c + w]
    untouched = o.copy()
    _apply(o, a, rows_o, rows_a, offs, v)
    tol = 1e-5 if np.dtype(dtype) == np.float32 else 1e-13
    np.testing.assert_allclose(o, expected, rtol=tol, atol=tol)
    # nothing outside the lane blocks written
    mask = np.zeros(o.shape, bool)
    for r, c in zip(rows_o, offs, strict=True):
        mask[r, c:c + w] = True
    np.testing.assert_array_equal(o[~mask], untouched[~mask])
