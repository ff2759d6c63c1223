"""GMat: BIDMach operator syntax over the primitives."""

import numpy as np
import pytest

from roofline import gmat
from roofline.gmat import GMat


@pytest.fixture
def ops(dtype):
    rng = np.random.default_rng(1)
    S = gmat.powerlaw_csc(300, 40, 6, dtype=dtype, random_state=2)
    A = np.asfortranarray(rng.standard_normal((3, 300)).astype(dtype))
    B = np.asfortranarray(rng.standard_normal((3, 40)).astype(dtype))
    return S, A, B


def test_products_dispatch_to_primitives(ops):
    S, A, B = ops
    gS, gA, gB = GMat(S), GMat(A), GMat(B)
    np.testing.assert_array_equal((gA * gS).value, gmat.mult_as(A, S))
    np.testing.assert_array_equal((gB * gS.T).value, gmat.mult_ast(B, S))
    np.testing.assert_array_equal((A * gS).value, gmat.mult_as(A, S))  # ndarray on the left
    np.testing.assert_array_equal(gA.sddmm(gS, gB).value.data, gmat.sddmm(S, A, B).data)
    np.testing.assert_allclose((gA.T * gB).value, A.T @ B)
    np.testing.assert_array_equal((2 * gA).value, 2 * A)
    assert gS.T.T is gS and gS.T.shape == (40, 300)


def test_repr_array_and_errors(ops):
    S, A, _ = ops
    g = GMat(S)
    assert "sparse CSC" in repr(g) and "300x40" in repr(g) and "on cpu" in repr(g)
    np.testing.assert_array_equal(np.asarray(g), S.toarray())
    with pytest.raises(TypeError):
        GMat(S) * GMat(A)  # sparse * dense is not a primitive
    with pytest.raises(TypeError, match="value has dtype int64"):
        GMat(np.ones(3, dtype=np.int64))
