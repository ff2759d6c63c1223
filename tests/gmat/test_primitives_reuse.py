"""gmat's k = 1 paths (A*S: sparse times vector; A*S^T: row slabs) and the reused A*S^T index
whose exact check runs inside the gather, against scipy, with ``S`` edited in place between
calls."""

import numpy as np
import pytest
import scipy.sparse as sp

from roofline import gmat, kernels
from roofline.gmat import _primitives as prim


def _csc(rng, n, m, density, dtype, itype=np.int32):
    """Random CSC with empty rows and columns, ``itype`` indices."""
    S = sp.random(n, m, density=density, format="csc", dtype=np.float64, random_state=rng)
    S = sp.csc_matrix(S.multiply(rng.random((1, m)) > 0.2))
    S = sp.csc_matrix(S.multiply(rng.random((n, 1)) > 0.2))
    S.eliminate_zeros()
    S.sort_indices()
    return sp.csc_matrix((S.data.astype(dtype), S.indices.astype(itype),
                          S.indptr.astype(itype)), shape=(n, m))


def _sets(rng, dtype, itype):
    return [_csc(rng, 400, 120, 0.05, dtype, itype), _csc(rng, 30, 500, 0.4, dtype, itype),
            gmat.powerlaw_csc(5000, 800, 12, dtype=dtype, index_dtype=itype, random_state=3),
            _csc(rng, 9, 6, 0.0, dtype, itype)]


def _close(actual, expected, dtype):
    tol = 2e-5 if np.dtype(dtype) == np.float32 else 1e-12
    scale = max(1.0, float(np.abs(expected).max(initial=0.0)))
    np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol * scale)


def _kept_index(S):
    """The transposed index gmat keeps on ``S`` (None when there is none)."""
    entry = getattr(S, prim._INDEX_ATTR, None)
    return None if entry is None else entry["index"]


def _ref_as(A, S):
    return np.asarray(S.T.astype(np.float64) @ np.atleast_2d(A).T.astype(np.float64)).T


def _ref_ast(A, S):
    return np.asarray(S.astype(np.float64) @ np.atleast_2d(A).T.astype(np.float64)).T


@pytest.fixture(params=[1 << 62, 0], ids=["serial", "parallel"])
def threads(request, monkeypatch):
    """Both thread policies (one thread, and all of numba's with several chunks / slabs)."""
    monkeypatch.setattr(prim, "PARALLEL_MIN_WORK", request.param)


@pytest.mark.parametrize("itype", [np.int32, np.int64])
def test_k1_matches_scipy(dtype, itype, threads):
    """A*S and A*S^T at k = 1, 1-D and (1, n) operands, fresh and ``out=`` outputs (NaN
    before: overwritten), called repeatedly (k = 1 A*S^T never keeps an index)."""
    rng = np.random.default_rng(0)
    for S in _sets(rng, dtype, itype):
        n, m = S.shape
        a = rng.standard_normal(n).astype(dtype)
        d = rng.standard_normal(m).astype(dtype)
        for _ in range(3):
            _close(gmat.mult_as(a, S), _ref_as(a, S)[0], dtype)
            _close(gmat.mult_as(a.reshape(1, -1), S), _ref_as(a, S), dtype)
            _close(gmat.mult_ast(d, S), _ref_ast(d, S)[0], dtype)
            out = np.full((1, n), np.nan, dtype, order="C")
            _close(gmat.mult_ast(d.reshape(1, -1), S, out=out), _ref_ast(d, S), dtype)
        assert _kept_index(S) is None


def test_k1_ast_sees_in_place_edits(dtype):
    """k = 1 A*S^T reads ``S`` live: edits between calls give the fresh answer."""
    rng = np.random.default_rng(1)
    S = _csc(rng, 300, 80, 0.1, dtype)
    d = rng.standard_normal(80).astype(dtype)
    for step in range(4):
        _close(gmat.mult_ast(d, S), _ref_ast(d, S)[0], dtype)
        S.data[(step * 7) % S.nnz] *= -2


def test_k1_faults_are_errors(dtype):
    """An index edited out of range after validation: a clear error, not a crash."""
    rng = np.random.default_rng(2)
    S = _csc(rng, 300, 80, 0.1, dtype)
    gmat.mult_as(np.ones(300, dtype), S)
    S.indices[S.nnz // 2] = 10**6
    with pytest.raises(ValueError, match="modified in place"):
        gmat.mult_as(np.ones(300, dtype), S)
    with pytest.raises(ValueError, match="modified in place"):
        gmat.mult_ast(np.ones(80, dtype), S)


def _spy_checked(monkeypatch):
    calls = []
    real = kernels.csc_gather_mult_checked

    def spy(*args):
        result = real(*args)
        calls.append(result)
        return result

    monkeypatch.setattr(kernels, "csc_gather_mult_checked", spy)
    return calls


@pytest.mark.parametrize("itype", [np.int32, np.int64])
@pytest.mark.parametrize("order", ["F", "C"])
@pytest.mark.parametrize("in_gather", [True, False], ids=["check-in-gather", "check-apart"])
def test_reused_ast_sees_every_edit(dtype, itype, order, in_gather, threads, monkeypatch):
    """From the third call on, A*S^T at k >= a cache line gathers over the kept index (with
    ``AST_CHECK_IN_GATHER``: the checked gather); it is right, and every kind of in-place edit
    (a value by one ulp, a row index, an entry moved between columns through ``indptr``) gives
    the fresh answer, drops the index and rebuilds it on the next call."""
    monkeypatch.setattr(prim, "AST_CHECK_IN_GATHER", in_gather)
    calls = _spy_checked(monkeypatch)
    rng = np.random.default_rng(4)
    lw = 64 // np.dtype(dtype).itemsize
    S = gmat.powerlaw_csc(3000, 400, 12, dtype=dtype, index_dtype=itype, random_state=5)
    for k in (lw, 2 * lw + 1):
        A = np.asarray(rng.standard_normal((k, 400)), dtype=dtype, order=order)
        for _ in range(4):
            _close(gmat.mult_ast(A, S), _ref_ast(A, S), dtype)
    assert all(c == (0, False) for c in calls)
    assert bool(calls) == in_gather
    A = np.asarray(rng.standard_normal((lw, 400)), dtype=dtype, order=order)

    def edited_once():
        n_calls = len(calls)
        assert _kept_index(S) is not None
        _close(gmat.mult_ast(A, S), _ref_ast(A, S), dtype)  # the check sees the edit
        assert calls[n_calls:] == ([(0, True)] if in_gather else [])
        assert _kept_index(S) is None
        _close(gmat.mult_ast(A, S), _ref_ast(A, S), dtype)  # rebuilt (fresh: unchecked)
        _close(gmat.mult_ast(A, S), _ref_ast(A, S), dtype)  # checked again
        assert calls[n_calls + 1:] == ([(0, False)] if in_gather else [])

    p = S.nnz // 3
    S.data[p] = np.nextafter(S.data[p], np.inf)
    edited_once()
    S.data[S.nnz - 1] *= -1
    edited_once()
    # a row index moved within its column (still sorted and in range)
    j = next(j for j in range(400) if S.indptr[j + 1] > S.indptr[j]
             and S.indices[S.indptr[j + 1] - 1] + 1 < 3000)
    S.indices[S.indptr[j + 1] - 1] += 1
    edited_once()
    # the last entry of a column moved into the next, empty, column (only indptr changes)
    S = _csc(rng, 3000, 400, 0.01, dtype, itype)
    for _ in range(3):
        _close(gmat.mult_ast(A, S), _ref_ast(A, S), dtype)
    j = next(j for j in range(1, 400) if S.indptr[j] - S.indptr[j - 1] >= 2
             and S.indptr[j + 1] == S.indptr[j])
    S.indptr[j] -= 1
    edited_once()


def test_reuse_off_and_small_k_keep_no_index(dtype, monkeypatch):
    """``AST_REUSE = False`` and 1 < k below a cache line scatter every time, right."""
    rng = np.random.default_rng(6)
    S = _csc(rng, 500, 100, 0.05, dtype)
    lw = 64 // np.dtype(dtype).itemsize
    A = np.asarray(rng.standard_normal((lw - 1, 100)), dtype=dtype, order="F")
    for _ in range(3):
        _close(gmat.mult_ast(A, S), _ref_ast(A, S), dtype)
    assert _kept_index(S) is None
    monkeypatch.setattr(prim, "AST_REUSE", False)
    A = np.asarray(rng.standard_normal((lw, 100)), dtype=dtype, order="F")
    for _ in range(3):
        _close(gmat.mult_ast(A, S), _ref_ast(A, S), dtype)
    assert _kept_index(S) is None

