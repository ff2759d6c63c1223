"""The register-blocked gather, the tiled transposition, the transposed index and the exact
compare (kernels/_spmm.py) against numpy / scipy references."""

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from roofline import gmat, kernels

TOL = {np.float32: 2e-4, np.float64: 1e-11}


def _csc(rng, n, m, density, dtype, itype, empty=True):
    """Random CSC with some empty rows and columns (``empty``), ``itype`` indices."""
    S = sp.random(n, m, density=density, format="csc", dtype=np.float64, random_state=rng)
    if empty and n > 2 and m > 2:
        S = sp.csc_matrix(S.multiply(rng.random((1, m)) > 0.2))  # empty columns
        S = sp.csc_matrix(S.multiply(rng.random((n, 1)) > 0.2))  # empty rows
    S.sort_indices()
    S = sp.csc_matrix((S.data.astype(dtype), S.indices.astype(itype), S.indptr.astype(itype)),
                      shape=(n, m))
    return S


def _zipf(n, m, dtype, itype, seed=0):
    return gmat.powerlaw_csc(n, m, 12, dtype=dtype, index_dtype=itype, random_state=seed)


def _gather_ref(X, S):
    """``out[:, j] = sum_p data[p] X[:, indices[p]]``: ``X @ S`` in float64."""
    return np.asarray((S.T.astype(np.float64) @ X.T.astype(np.float64)).T)


def _run_gather(X, S, order, n_chunks=5):
    k = X.shape[0]
    out = np.full((k, S.shape[1]), np.nan, X.dtype, order=order)
    bounds = kernels.nnz_chunks(S.indptr, min(max(S.shape[1], 1), n_chunks))
    faults = kernels.csc_gather_mult(np.ascontiguousarray(X.T), S.indptr, S.indices, S.data,
                                     out.T, bounds)
    return faults, out


def _close(actual, expected, dtype):
    tol = TOL[np.dtype(dtype).type]
    scale = max(1.0, float(np.abs(expected).max(initial=0.0)))
    np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol * scale)


# k values that hit every lane-block combination (8, 4, 2, 1 vectors) and a scalar remainder
K_FLOAT32 = [16, 17, 31, 32, 48, 64, 80, 112, 128, 129, 144, 255, 256, 3]
K_FLOAT64 = [8, 9, 16, 24, 32, 40, 56, 64, 65, 72, 127, 128, 5]


@pytest.mark.parametrize("dtype,ks", [(np.float32, K_FLOAT32), (np.float64, K_FLOAT64)])
@pytest.mark.parametrize("itype", [np.int32, np.int64])
@pytest.mark.parametrize("order", ["F", "C"])
def test_gather_mult_matches_scipy(dtype, ks, itype, order):
    rng = np.random.default_rng(0)
    for k in ks:
        S = _csc(rng, 300, 90, 0.05, dtype, itype)
        X = rng.standard_normal((k, 300)).astype(dtype)
        faults, out = _run_gather(X, S, order)
        assert faults == 0
        _close(out, _gather_ref(X, S), dtype)


@pytest.mark.parametrize("itype", [np.int32, np.int64])
def test_gather_mult_powerlaw_and_transposed_index(dtype, itype):
    """Zipf data, as A*S over the CSC arrays and as A*S^T over the CSR ones."""
    rng = np.random.default_rng(1)
    S = _zipf(4000, 700, dtype, itype)
    for k in (lanes := 64 // np.dtype(dtype).itemsize, 2 * lanes + 3, 8 * lanes):
        X = rng.standard_normal((k, 4000)).astype(dtype)
        faults, out = _run_gather(X, S, "F", n_chunks=16)
        assert faults == 0
        _close(out, _gather_ref(X, S), dtype)
        R = S.tocsr()  # S^T as CSC
        D = rng.standard_normal((k, 700)).astype(dtype)
        faults, out = _run_gather(D, sp.csc_matrix((R.data, R.indices, R.indptr),
                                                    shape=(700, 4000)), "C")
        assert faults == 0
        _close(out, np.asarray(S.astype(np.float64) @ D.T.astype(np.float64)).T, dtype)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 60), m=st.integers(1, 40), k=st.integers(1, 70),
       density=st.floats(0.0, 0.6), seed=st.integers(0, 2**16),
       f64=st.booleans(), i64=st.booleans(), c_out=st.booleans())
def test_gather_mult_random_shapes(n, m, k, density, seed, f64, i64, c_out):
    dtype = np.float64 if f64 else np.float32
    rng = np.random.default_rng(seed)
    S = _csc(rng, n, m, density, dtype, np.int64 if i64 else np.int32)
    X = rng.standard_normal((k, n)).astype(dtype)
    faults, out = _run_gather(X, S, "C" if c_out else "F", n_chunks=int(rng.integers(1, 6)))
    assert faults == 0
    _close(out, _gather_ref(X, S), dtype)


def test_gather_mult_faults_never_read_outside(dtype):
    """An out-of-range or negative index, or an indptr range outside the arrays, is a fault
    (counted per column) and not a crash; the other columns are still right."""
    rng = np.random.default_rng(2)
    S = _csc(rng, 200, 30, 0.1, dtype, np.int32, empty=False)
    X = rng.standard_normal((2 * 64 // np.dtype(dtype).itemsize + 1, 200)).astype(dtype)
    ref = _gather_ref(X, S)
    bad = S.copy()
    bad.indices[bad.indptr[3]] = 2**30
    bad.indices[bad.indptr[7]] = -5
    faults, out = _run_gather(X, bad, "F")
    assert faults == 2
    ok = [j for j in range(30) if j not in (3, 7)]
    _close(out[:, ok], ref[:, ok], dtype)
    bad = S.copy()
    bad.indptr[5] = 10**9
    faults, out = _run_gather(X, bad, "F")
    assert faults >= 1


@settings(max_examples=60, deadline=None)
@given(r=st.integers(0, 150), c=st.integers(0, 300), f64=st.booleans())
def test_transpose_into_random_shapes(r, c, f64):
    dtype = np.float64 if f64 else np.float32
    src = np.random.default_rng(r * 1000 + c).standard_normal((r, c)).astype(dtype)
    dst = np.full((c, r), np.nan, dtype)
    kernels.transpose_into(src, dst)
    np.testing.assert_array_equal(dst, src.T)


def test_transpose_into_wide():
    src = np.arange(16 * 70_000, dtype=np.float32).reshape(16, 70_000)
    dst = np.empty((70_000, 16), np.float32)
    kernels.transpose_into(src, dst)
    np.testing.assert_array_equal(dst, src.T)


@pytest.mark.parametrize("itype", [np.int32, np.int64])
def test_csc_transpose_index_is_scipys_csr(dtype, itype):
    rng = np.random.default_rng(3)
    for S in (_csc(rng, 500, 80, 0.05, dtype, itype), _zipf(3000, 400, dtype, itype),
              _csc(rng, 7, 5, 0.0, dtype, itype)):
        n, m = S.shape
        t_indptr = np.empty(n + 1, np.int64)
        t_indices = np.empty(S.nnz, np.int32)
        t_data = np.empty(S.nnz, dtype)
        assert kernels.csc_transpose_index(S.indptr, S.indices, S.data, n, t_indptr,
                                           t_indices, t_data)
        R = S.tocsr()
        R.sort_indices()
        np.testing.assert_array_equal(t_indptr, R.indptr)
        np.testing.assert_array_equal(t_indices, R.indices)
        np.testing.assert_array_equal(t_data, R.data)


def test_csc_transpose_index_rejects_bad_structure():
    S = _csc(np.random.default_rng(4), 50, 20, 0.2, np.float64, np.int32, empty=False)
    out = (np.empty(51, np.int64), np.empty(S.nnz, np.int32), np.empty(S.nnz))
    bad = S.copy()
    bad.indices[3] = 50
    assert not kernels.csc_transpose_index(bad.indptr, bad.indices, bad.data, 50, *out)
    bad = S.copy()
    bad.indices[3] = -1
    assert not kernels.csc_transpose_index(bad.indptr, bad.indices, bad.data, 50, *out)
    bad = S.copy()
    bad.indptr[4] = bad.indptr[5] + 1
    assert not kernels.csc_transpose_index(bad.indptr, bad.indices, bad.data, 50, *out)
    assert not kernels.csc_transpose_index(S.indptr, S.indices, S.data, 49, *out)


def test_arrays_equal():
    a = np.arange(10_001, dtype=np.int64)
    assert kernels.arrays_equal(a, a.copy())
    for pos in (0, 5000, 10_000):
        b = a.copy()
        b[pos] += 1
        assert not kernels.arrays_equal(a, b)
    assert not kernels.arrays_equal(a, a[:-1])
    assert kernels.arrays_equal(a[:0], a[:0])
    z = np.array([0.0, 1.0]).view(np.uint64)
    assert not kernels.arrays_equal(z, np.array([-0.0, 1.0]).view(np.uint64))  # bit for bit


# ---------------------------------------------------------------------------------------------
# k = 1: csc_gather_vec (A*S) and csc_scatter_vec (A*S^T by row slabs)


def _vec_sets(rng, dtype, itype):
    """Random shapes with empty rows / columns, a Zipf matrix, and degenerate ones."""
    return [_csc(rng, 300, 90, 0.05, dtype, itype), _csc(rng, 57, 400, 0.3, dtype, itype),
            _zipf(4000, 700, dtype, itype), _csc(rng, 7, 5, 0.0, dtype, itype),
            _csc(rng, 1, 30, 0.5, dtype, itype), _csc(rng, 40, 1, 0.5, dtype, itype)]


@pytest.mark.parametrize("itype", [np.int32, np.int64])
def test_gather_vec_matches_scipy(dtype, itype):
    rng = np.random.default_rng(10)
    for S in _vec_sets(rng, dtype, itype):
        n, m = S.shape
        a = rng.standard_normal(n).astype(dtype)
        for n_chunks in (1, 3, 16):
            out = np.full(m, np.nan, dtype)
            bounds = kernels.nnz_chunks(S.indptr, max(1, min(m, n_chunks)))
            assert kernels.csc_gather_vec(a, S.indptr, S.indices, S.data, out, bounds) == 0
            _close(out, S.T.astype(np.float64) @ a.astype(np.float64), dtype)


@pytest.mark.parametrize("itype", [np.int32, np.int64])
def test_scatter_vec_matches_scipy(dtype, itype):
    """Every slab count (rows split by entries, one slab, more slabs than needed) overwrites
    the whole output (NaN before) with scipy's ``S @ a``."""
    rng = np.random.default_rng(11)
    for S in _vec_sets(rng, dtype, itype):
        n, m = S.shape
        a = rng.standard_normal(m).astype(dtype)
        for n_slabs in (1, 2, 3, 7):
            out = np.full(n, np.nan, dtype)
            slabs = kernels.row_slabs(S.indices, S.nnz, n, max(1, min(n, n_slabs)))
            assert kernels.csc_scatter_vec(a, S.indptr, S.indices, S.data, out, slabs) == 0
            _close(out, S.astype(np.float64) @ a.astype(np.float64), dtype)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 80), m=st.integers(1, 60), density=st.floats(0.0, 0.7),
       seed=st.integers(0, 2**16), f64=st.booleans(), i64=st.booleans(),
       parts=st.integers(1, 6))
def test_vec_kernels_random_shapes(n, m, density, seed, f64, i64, parts):
    dtype = np.float64 if f64 else np.float32
    rng = np.random.default_rng(seed)
    S = _csc(rng, n, m, density, dtype, np.int64 if i64 else np.int32)
    a = rng.standard_normal(n).astype(dtype)
    d = rng.standard_normal(m).astype(dtype)
    out = np.full(m, np.nan, dtype)
    assert kernels.csc_gather_vec(a, S.indptr, S.indices, S.data, out,
                                  kernels.nnz_chunks(S.indptr, min(m, parts))) == 0
    _close(out, S.T.astype(np.float64) @ a.astype(np.float64), dtype)
    out = np.full(n, np.nan, dtype)
    assert kernels.csc_scatter_vec(d, S.indptr, S.indices, S.data, out,
                                   kernels.row_slabs(S.indices, S.nnz, n, min(n, parts))) == 0
    _close(out, S.astype(np.float64) @ d.astype(np.float64), dtype)


def test_vec_kernels_faults_never_read_outside(dtype):
    """Out-of-range and negative indices, and an ``indptr`` range outside the arrays, are
    faults, not crashes; the columns (A*S) the faults are not in stay right."""
    rng = np.random.default_rng(12)
    S = _csc(rng, 200, 30, 0.1, dtype, np.int32, empty=False)
    a = rng.standard_normal(200).astype(dtype)
    d = rng.standard_normal(30).astype(dtype)
    ref = S.T.astype(np.float64) @ a.astype(np.float64)
    bad = S.copy()
    bad.indices[bad.indptr[3]] = 2**30
    bad.indices[bad.indptr[7] + 1] = -5
    out = np.empty(30, dtype)
    assert kernels.csc_gather_vec(a, bad.indptr, bad.indices, bad.data, out,
                                  kernels.nnz_chunks(bad.indptr, 4)) == 2
    ok = [j for j in range(30) if j not in (3, 7)]
    _close(out[ok], ref[ok], dtype)
    slabs = np.array([0, 100, 200], np.int64)
    assert kernels.csc_scatter_vec(d, bad.indptr, bad.indices, bad.data, np.empty(200, dtype),
                                   slabs) >= 1
    bad = S.copy()
    bad.indptr[5] = 10**9
    assert kernels.csc_gather_vec(a, bad.indptr, bad.indices, bad.data, out,
                                  kernels.nnz_chunks(S.indptr, 4)) >= 1
    assert kernels.csc_scatter_vec(d, bad.indptr, bad.indices, bad.data, np.empty(200, dtype),
                                   slabs) >= 1


# ---------------------------------------------------------------------------------------------
# csc_gather_mult_checked: the gather over a kept transposed index, with the exact check


def _kept(S):
    """The transposed index of ``S`` and copies of the arrays it compares (gmat's layout)."""
    n = S.shape[0]
    t = (np.empty(n + 1, np.int64), np.empty(S.nnz, np.int32), np.empty(S.nnz, S.dtype))
    assert kernels.csc_transpose_index(S.indptr, S.indices, S.data, n, *t)
    return t, (S.indptr.copy(), S.indices.copy(), _bits(S.data).copy())


def _bits(x):
    return x.view(np.uint32 if x.dtype.itemsize == 4 else np.uint64)


def _run_checked(X, S, t, kept, n_chunks=5):
    k = X.shape[0]
    n = S.shape[0]
    out = np.full((k, n), np.nan, X.dtype, order="F")
    cur = (S.indptr, S.indices[:S.nnz], _bits(S.data[:S.nnz]))
    check = [a for pair in zip(cur, kept, strict=True) for a in pair]
    faults, changed = kernels.csc_gather_mult_checked(
        np.ascontiguousarray(X.T), *t, out.T, kernels.nnz_chunks(t[0], max(1, min(n, n_chunks))),
        *check)
    return faults, changed, out


@pytest.mark.parametrize("itype", [np.int32, np.int64])
def test_gather_mult_checked_sees_every_edit(dtype, itype):
    """Unchanged: the gather's result (A*S^T) and ``changed`` False.  Any edit of ``S``'s
    arrays, at the first, a middle or the last entry, or a changed length: ``changed``."""
    rng = np.random.default_rng(13)
    lw = 64 // np.dtype(dtype).itemsize
    for S in (_zipf(3000, 500, dtype, itype), _csc(rng, 1500, 200, 0.02, dtype, itype)):
        t, kept = _kept(S)
        for k in (lw, 2 * lw + 3, 8 * lw):
            D = rng.standard_normal((k, S.shape[1])).astype(dtype)
            for n_chunks in (1, 5, 64):
                faults, changed, out = _run_checked(D, S, t, kept, n_chunks)
                assert (faults, changed) == (0, False)
                _close(out, np.asarray(S.astype(np.float64) @ D.T.astype(np.float64)).T, dtype)
        D = rng.standard_normal((lw, S.shape[1])).astype(dtype)
        for pos in (0, S.nnz // 2, S.nnz - 1):
            E = S.copy()
            E.data[pos] = -E.data[pos]
            assert _run_checked(D, E, t, kept)[1]
            E = S.copy()
            E.data[pos] = np.copysign(0.0, E.data[pos]) if E.data[pos] == 0 else E.data[pos]
            E.data[pos] = np.nextafter(E.data[pos], np.inf)  # the smallest change
            assert _run_checked(D, E, t, kept)[1]
            E = S.copy()
            E.indices[pos] += 1 if E.indices[pos] + 1 < S.shape[0] else -1
            assert _run_checked(D, E, t, kept)[1]
        for j in (1, S.shape[1] // 2, S.shape[1] - 1):
            E = S.copy()
            E.indptr[j] += 1
            assert _run_checked(D, E, t, kept)[1]
        E = S.copy()
        E.indptr[-1] -= 1  # one entry fewer: lengths differ, nothing compared out of range
        assert _run_checked(D, E, t, kept)[1]


def test_scatter_vec_clips_slabs_to_the_output(dtype):
    """Slab bounds past the output (a caller's mistake) write nothing outside it."""
    rng = np.random.default_rng(14)
    S = _csc(rng, 100, 40, 0.2, dtype, np.int32)
    d = rng.standard_normal(40).astype(dtype)
    big = np.full(160, 7.0, dtype)
    slabs = np.array([-20, 60, 150], np.int64)
    assert kernels.csc_scatter_vec(d, S.indptr, S.indices, S.data, big[:100], slabs) == 0
    _close(big[:100], S.astype(np.float64) @ d.astype(np.float64), dtype)
    assert (big[100:] == 7.0).all()
