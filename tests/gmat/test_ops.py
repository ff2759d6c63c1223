"""Elementwise GLM ops against direct numpy formulas (in float64 on safe ranges)."""

import numpy as np
import pytest

from roofline import gmat


def test_sigmoid_matches_formula_and_is_stable(dtype):
    x = np.linspace(-30, 30, 101).astype(dtype)
    ref = 1.0 / (1.0 + np.exp(-x.astype(np.float64)))
    out = np.empty_like(x)
    res = gmat.sigmoid(x, out=out)
    assert res is out
    rtol = 1e-6 if dtype == np.float32 else 1e-14
    np.testing.assert_allclose(out, ref, rtol=rtol, atol=1e-7 if dtype == np.float32 else 1e-15)
    extreme = np.array([-1e4, 1e4], dtype=dtype)
    np.testing.assert_array_equal(gmat.sigmoid(extreme), [0.0, 1.0])
    y = x.copy()
    gmat.sigmoid(y, out=y)  # in place
    np.testing.assert_array_equal(y, out)


def test_log1pexp_matches_formula_and_is_stable(dtype):
    x = np.linspace(-30, 30, 101).astype(dtype)
    ref = np.log1p(np.exp(x.astype(np.float64)))
    rtol = 1e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(gmat.log1pexp(x), ref, rtol=rtol)
    big = np.array([1e4, -1e4], dtype=dtype)
    np.testing.assert_allclose(gmat.log1pexp(big), [1e4, 0.0])
    with pytest.raises(ValueError, match="in place"):
        gmat.log1pexp(x, out=x)


def test_axpy(dtype):
    x = np.arange(5, dtype=dtype)
    y = np.ones(5, dtype=dtype)
    assert gmat.axpy(2.0, x, y) is y
    np.testing.assert_array_equal(y, 1 + 2 * np.arange(5))
    gmat.axpy(1, x, y)
    np.testing.assert_array_equal(y, 1 + 3 * np.arange(5))
    with pytest.raises(ValueError, match="shape"):
        gmat.axpy(1.0, x[:3], y)
    with pytest.raises(TypeError, match="dtype"):
        gmat.axpy(1.0, x.astype(np.float64 if dtype == np.float32 else np.float32), y)


def test_out_mismatch():
    with pytest.raises(ValueError, match="out has shape"):
        gmat.sigmoid(np.zeros(3), out=np.zeros(4))
