"""Every dense layout (Fortran and C order, operands and ``out=``) and the reused A*S^T
transposed index, against scipy/numpy references."""

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import roofline.gmat._primitives as prim
from roofline import gmat


def _csc(rng, n, m, density, dtype, itype=np.int32):
    S = sp.random(n, m, density=density, format="csc", dtype=np.float64, random_state=rng)
    S = sp.csc_matrix(S.multiply(rng.random((n, 1)) > 0.3))  # empty rows
    S = sp.csc_matrix(S.multiply(rng.random((1, m)) > 0.2))  # empty columns
    S.sort_indices()
    return sp.csc_matrix((S.data.astype(dtype), S.indices.astype(itype),
                          S.indptr.astype(itype)), shape=(n, m))


def _close(actual, expected, dtype):
    tol = 3e-5 if np.dtype(dtype) == np.float32 else 1e-12
    scale = max(1.0, float(np.abs(expected).max(initial=0.0)))
    np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol * scale)


def _ref_as(A, S):
    return np.asarray((S.T.astype(np.float64) @ A.T.astype(np.float64)).T)


def _ref_ast(A, S):
    return np.asarray((S.astype(np.float64) @ A.T.astype(np.float64)).T)


def _ref_sddmm(S, A, B):
    rows = S.indices[: S.nnz]
    cols = np.repeat(np.arange(S.shape[1]), np.diff(S.indptr))
    return np.einsum("ij,ij->j", A[:, rows].astype(np.float64),
                     B[:, cols].astype(np.float64)) * S.data


def _ks(dtype):
    lanes = 64 // np.dtype(dtype).itemsize
    return [1, 3, lanes, lanes + 1, 4 * lanes, 9 * lanes + 2]


@pytest.mark.parametrize("itype", [np.int32, np.int64])
@pytest.mark.parametrize("a_order", ["F", "C"])
@pytest.mark.parametrize("out_order", ["F", "C", None])
def test_mult_as_every_layout(dtype, itype, a_order, out_order):
    rng = np.random.default_rng(0)
    S = _csc(rng, 400, 120, 0.04, dtype, itype)
    for k in _ks(dtype):
        A = np.asarray(rng.standard_normal((k, 400)), dtype=dtype, order=a_order)
        out = None if out_order is None else np.full((k, 120), np.nan, dtype, order=out_order)
        C = gmat.mult_as(A, S, out=out)
        if out is not None:
            assert C is out
        _close(C, _ref_as(A, S), dtype)


@pytest.mark.parametrize("itype", [np.int32, np.int64])
@pytest.mark.parametrize("a_order", ["F", "C"])
@pytest.mark.parametrize("out_order", ["F", "C", None])
@pytest.mark.parametrize("reuse", [False, True])
def test_mult_ast_every_layout(dtype, itype, a_order, out_order, reuse, monkeypatch):
    """First use (scatter) and reuse (gather over the kept transposed index) alike."""
    monkeypatch.setattr(prim, "AST_REUSE", reuse)
    rng = np.random.default_rng(1)
    S = _csc(rng, 300, 150, 0.05, dtype, itype)
    for k in _ks(dtype):
        for _ in range(3):  # first use, the build, a reuse
            A = np.asarray(rng.standard_normal((k, 150)), dtype=dtype, order=a_order)
            out = None if out_order is None else np.full((k, 300), np.nan, dtype,
                                                           order=out_order)
            C = gmat.mult_ast(A, S, out=out)
            if out is not None:
                assert C is out
            _close(C, _ref_ast(A, S), dtype)
    # kept for the widths that gather (from one cache line of A per example)
    assert (getattr(S, prim._INDEX_ATTR, {"index": None})["index"] is not None) == reuse


@pytest.mark.parametrize("a_order", ["F", "C"])
def test_sddmm_every_layout(dtype, a_order):
    rng = np.random.default_rng(2)
    S = _csc(rng, 200, 90, 0.05, dtype)
    for k in _ks(dtype):
        A = np.asarray(rng.standard_normal((k, 200)), dtype=dtype, order=a_order)
        B = np.asarray(rng.standard_normal((k, 90)), dtype=dtype, order=a_order)
        _close(gmat.sddmm(S, A, B).data, _ref_sddmm(S, A, B), dtype)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 80), m=st.integers(1, 60), k=st.integers(1, 40),
       density=st.floats(0.0, 0.5), seed=st.integers(0, 2**16), f64=st.booleans(),
       i64=st.booleans(), c_a=st.booleans(), c_out=st.booleans())
def test_primitives_random_shapes_and_layouts(n, m, k, density, seed, f64, i64, c_a, c_out):
    dtype = np.float64 if f64 else np.float32
    rng = np.random.default_rng(seed)
    S = _csc(rng, n, m, density, dtype, np.int64 if i64 else np.int32)
    order = "C" if c_a else "F"
    A = np.asarray(rng.standard_normal((k, n)), dtype=dtype, order=order)
    D = np.asarray(rng.standard_normal((k, m)), dtype=dtype, order=order)
    out_order = "C" if c_out else "F"
    _close(gmat.mult_as(A, S, out=np.empty((k, m), dtype, order=out_order)), _ref_as(A, S),
           dtype)
    for _ in range(3):
        _close(gmat.mult_ast(D, S, out=np.empty((k, n), dtype, order=out_order)),
               _ref_ast(D, S), dtype)


@pytest.mark.parametrize("itype", [np.int32, np.int64])
def test_mult_ast_reuse_on_powerlaw_data(dtype, itype):
    rng = np.random.default_rng(3)
    S = gmat.powerlaw_csc(5000, 800, 15, dtype=dtype, index_dtype=itype, random_state=4)
    for k in (64 // np.dtype(dtype).itemsize, 40):
        A = np.asarray(rng.standard_normal((k, 800)), dtype=dtype, order="F")
        for _ in range(3):
            _close(gmat.mult_ast(A, S), _ref_ast(A, S), dtype)
    assert getattr(S, prim._INDEX_ATTR)["index"] is not None


def test_mult_ast_index_sees_every_in_place_edit(dtype):
    """Values and indices edited in place, off the fingerprint's sample: never a stale
    result."""
    rng = np.random.default_rng(5)
    S = _csc(rng, 400, 100, 0.05, dtype)
    A = np.asarray(rng.standard_normal((16, 100)), dtype=dtype, order="F")
    for _ in range(3):
        gmat.mult_ast(A, S)
    assert getattr(S, prim._INDEX_ATTR)["index"] is not None
    S.data[S.nnz // 2 + 1] *= -3  # a value
    _close(gmat.mult_ast(A, S), _ref_ast(A, S), dtype)
    for _ in range(2):
        _close(gmat.mult_ast(A, S), _ref_ast(A, S), dtype)
    # a row index moved within its column (still sorted and in range: a valid matrix)
    j = next(j for j in range(100) if S.indptr[j + 1] - S.indptr[j] >= 1)
    p = S.indptr[j + 1] - 1
    free = [i for i in range(S.indices[p] + 1, 400)]
    if free:
        S.indices[p] = free[0]
        _close(gmat.mult_ast(A, S), _ref_ast(A, S), dtype)
    # a new matrix of the same shape: its own index
    S2 = _csc(rng, 400, 100, 0.05, dtype)
    for _ in range(3):
        _close(gmat.mult_ast(A, S2), _ref_ast(A, S2), dtype)


def test_c_ordered_copies_are_reused():
    """The transposition of a C-ordered operand goes to a buffer kept between calls."""
    rng = np.random.default_rng(6)
    S = _csc(rng, 300, 50, 0.05, np.float32)
    A = rng.standard_normal((16, 300)).astype(np.float32)  # C order
    cache = gmat.default_cache()
    gmat.mult_as(A, S)
    n = cache.n_allocations
    for _ in range(3):
        _close(gmat.mult_as(A, S), _ref_as(A, S), np.float32)
    assert cache.n_allocations == n


def test_a_large_c_ordered_operand_is_named_once(monkeypatch, caplog):
    """A C-ordered operand of at least LAYOUT_WARN_MIN_BYTES: the first call says (a logged
    warning naming the operand and the fix) why it is slower than the Fortran layout, once per
    process and operand; a Fortran-ordered or small one says nothing above debug."""
    monkeypatch.setattr(prim, "_layout_said", set())
    rng = np.random.default_rng(3)
    S = _csc(rng, 300, 40, 0.05, np.float64)
    A_c = np.ascontiguousarray(rng.standard_normal((16, 300)))
    A_f = np.asfortranarray(A_c)
    small = np.ascontiguousarray(rng.standard_normal((2, 300)))  # below the threshold
    monkeypatch.setattr(prim, "LAYOUT_WARN_MIN_BYTES", A_c.nbytes)
    with caplog.at_level("DEBUG", logger="roofline.gmat._primitives"):
        _close(gmat.mult_as(A_f, S), _ref_as(A_f, S), np.float64)
        _close(gmat.mult_as(small, S), _ref_as(small, S), np.float64)
        assert not [r for r in caplog.records if r.levelname == "WARNING"]
        for _ in range(3):
            _close(gmat.mult_as(A_c, S), _ref_as(A_c, S), np.float64)
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(said) == 1, said
    assert "A of shape (16, 300) is C-ordered" in said[0] and "asfortranarray" in said[0]
