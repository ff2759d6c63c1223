"""gmat primitives A*S, A*S^T and SDDMM against scipy/numpy references.

The reference tests run on each device (``device`` fixture: the GPU case skips without a CUDA
device): operands are moved to the device, the result is checked to stay there and compared on
the host with the same tolerances (CuPy's ``numpy_cupy_allclose``).
"""

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from roofline import gmat
from roofline.kernels import PREFETCH_DISTANCE
from tests._helpers import assert_allclose_on, to_host


def _dense(rng, shape, dtype, order="F"):
    return np.asarray(rng.standard_normal(shape), dtype=dtype, order=order)


def _ref_as(A, S):
    A2 = A.reshape(1, -1) if A.ndim == 1 else A
    out = (S.T.astype(np.float64) @ A2.T.astype(np.float64)).T
    return out.reshape(-1) if A.ndim == 1 else out


def _ref_ast(A, S):
    A2 = A.reshape(1, -1) if A.ndim == 1 else A
    out = (S.astype(np.float64) @ A2.T.astype(np.float64)).T
    return out.reshape(-1) if A.ndim == 1 else out


def _ref_sddmm(S, A, B, scale=True):
    A2 = A.reshape(1, -1) if A.ndim == 1 else A
    B2 = B.reshape(1, -1) if B.ndim == 1 else B
    rows = S.indices[: S.nnz]
    cols = np.repeat(np.arange(S.shape[1]), np.diff(S.indptr))
    vals = np.einsum("ij,ij->j", A2[:, rows].astype(np.float64), B2[:, cols].astype(np.float64))
    return vals * S.data if scale else vals


def _random_csc(rng, n, m, density, dtype, index_dtype=np.int32, empty_rows=True):
    S = sp.random(n, m, density=density, format="csc", dtype=dtype, random_state=rng)
    if empty_rows and n > 2:
        S = sp.csc_matrix(S.multiply(rng.random((n, 1)) > 0.3))  # zero out ~30% of rows
    S.sort_indices()
    S.indices = S.indices.astype(index_dtype)
    S.indptr = S.indptr.astype(index_dtype)
    return S


def _tolerances(dtype, scale=1.0):
    rtol, atol = (2e-5, 2e-5) if np.dtype(dtype) == np.float32 else (1e-12, 1e-12)
    return rtol, atol * max(1.0, scale)


def _assert_close(actual, expected, dtype, scale=1.0):
    rtol, atol = _tolerances(dtype, scale)
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)


def _assert_close_on(device, actual, expected, dtype, scale=1.0):
    rtol, atol = _tolerances(dtype, scale)
    assert_allclose_on(device, actual, expected, rtol=rtol, atol=atol)


# k = None means a 1-D dense operand
KS = [None, 1, 3, 16, 33]


@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_mult_as_matches_scipy(rng, dtype, k, index_dtype, device):
    S = _random_csc(rng, 200, 150, 0.05, dtype, index_dtype)
    A = _dense(rng, (200,) if k is None else (k, 200), dtype)
    C = gmat.mult_as(gmat.to_device(A, device), gmat.to_device(S, device))
    assert C.shape == ((150,) if k is None else (k, 150))
    assert C.dtype == dtype and C.flags.f_contiguous
    _assert_close_on(device, C, _ref_as(A, S), dtype, scale=10)


@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_mult_ast_matches_scipy(rng, dtype, k, index_dtype, device):
    S = _random_csc(rng, 180, 220, 0.05, dtype, index_dtype)
    A = _dense(rng, (220,) if k is None else (k, 220), dtype)
    C = gmat.mult_ast(gmat.to_device(A, device), gmat.to_device(S, device))
    assert C.shape == ((180,) if k is None else (k, 180))
    _assert_close_on(device, C, _ref_ast(A, S), dtype, scale=10)


@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("scale", [True, False])
def test_sddmm_matches_numpy(rng, dtype, k, scale, device):
    S = _random_csc(rng, 120, 90, 0.08, dtype)
    A = _dense(rng, (120,) if k is None else (k, 120), dtype)
    B = _dense(rng, (90,) if k is None else (k, 90), dtype)
    C = gmat.sddmm(*(gmat.to_device(x, device) for x in (S, A, B)), scale=scale)
    assert gmat.is_sparse(C) and C.format == "csc" and C.shape == S.shape
    np.testing.assert_array_equal(to_host(C.indices), S.indices)
    np.testing.assert_array_equal(to_host(C.indptr), S.indptr)
    _assert_close_on(device, C.data, _ref_sddmm(S, A, B, scale), dtype, scale=10)


@pytest.mark.parametrize("k", [None, 16])
def test_powerlaw_data(powerlaw, rng, k, device):
    """Zipf rows and columns (hot features, empty features, skewed column lengths)."""
    S = powerlaw
    dtype = S.dtype
    n, m = S.shape
    assert np.diff(S.indptr).max() > 4 * S.nnz / m  # skewed column lengths
    assert np.bincount(S.indices, minlength=n).min() == 0  # some features never occur
    A = _dense(rng, (n,) if k is None else (k, n), dtype)
    B = _dense(rng, (m,) if k is None else (k, m), dtype)
    Sd, Ad, Bd = (gmat.to_device(x, device) for x in (S, A, B))
    _assert_close_on(device, gmat.mult_as(Ad, Sd), _ref_as(A, S), dtype, scale=30)
    _assert_close_on(device, gmat.mult_ast(Bd, Sd), _ref_ast(B, S), dtype, scale=30)
    _assert_close_on(device, gmat.sddmm(Sd, Ad, Bd).data, _ref_sddmm(S, A, B), dtype,
                     scale=30)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 60),
    m=st.integers(0, 60),
    density=st.floats(0.0, 1.0),
    k=st.sampled_from(KS),
    f64=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
def test_primitives_random_shapes(n, m, density, k, f64, seed):
    """Random shapes including empty matrices, single rows/columns, fully dense patterns."""
    dtype = np.dtype(np.float64 if f64 else np.float32)
    rng = np.random.default_rng(seed)
    S = _random_csc(rng, n, m, density, dtype, empty_rows=False)
    A = _dense(rng, (n,) if k is None else (k, n), dtype)
    B = _dense(rng, (m,) if k is None else (k, m), dtype)
    _assert_close(gmat.mult_as(A, S), _ref_as(A, S), dtype, scale=10)
    _assert_close(gmat.mult_ast(B, S), _ref_ast(B, S), dtype, scale=10)
    _assert_close(gmat.sddmm(S, A, B).data, _ref_sddmm(S, A, B), dtype, scale=10)


def test_long_columns_cross_prefetch_boundaries(rng, dtype):
    """Columns longer and shorter than the prefetch distance, and a single huge column."""
    n = 500
    lengths = [0, 1, PREFETCH_DISTANCE - 1, PREFETCH_DISTANCE, PREFETCH_DISTANCE + 1, 400, 3]
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    indices = np.concatenate([np.sort(rng.choice(n, L, replace=False)) for L in lengths])
    S = sp.csc_matrix(
        (rng.random(indptr[-1]).astype(dtype), indices.astype(np.int32), indptr),
        shape=(n, len(lengths)),
    )
    for k in (None, 4, 32):
        A = _dense(rng, (n,) if k is None else (k, n), dtype)
        B = _dense(rng, (len(lengths),) if k is None else (k, len(lengths)), dtype)
        _assert_close(gmat.mult_as(A, S), _ref_as(A, S), dtype, scale=30)
        _assert_close(gmat.mult_ast(B, S), _ref_ast(B, S), dtype, scale=30)
        _assert_close(gmat.sddmm(S, A, B).data, _ref_sddmm(S, A, B), dtype, scale=30)


def test_k_zero(rng, dtype):
    S = _random_csc(rng, 10, 8, 0.3, dtype)
    A = np.zeros((0, 10), dtype)
    assert gmat.mult_as(A, S).shape == (0, 8)
    assert gmat.mult_ast(np.zeros((0, 8), dtype), S).shape == (0, 10)
    assert gmat.sddmm(S, A, np.zeros((0, 8), dtype)).nnz == S.nnz


def test_c_ordered_dense_operand_gives_same_result(rng, dtype):
    S = _random_csc(rng, 50, 40, 0.1, dtype)
    A = _dense(rng, (5, 50), dtype, order="C")
    _assert_close(gmat.mult_as(A, S), _ref_as(A, S), dtype, scale=10)
    B = _dense(rng, (5, 40), dtype, order="C")
    _assert_close(gmat.mult_ast(B, S), _ref_ast(B, S), dtype, scale=10)


def test_out_buffer_is_used_and_overwritten(rng, dtype):
    S = _random_csc(rng, 60, 30, 0.2, dtype)
    A = _dense(rng, (4, 60), dtype)
    out = gmat.empty((4, 30), dtype)
    out.fill(np.nan)
    res = gmat.mult_as(A, S, out)
    assert res is out
    _assert_close(out, _ref_as(A, S), dtype, scale=10)
    B = _dense(rng, (4, 30), dtype)
    out2 = gmat.empty((4, 60), dtype)
    out2.fill(np.nan)  # rows of S that are empty must still be written (zeros)
    assert gmat.mult_ast(B, S, out2) is out2
    _assert_close(out2, _ref_ast(B, S), dtype, scale=10)
    vals = np.full(S.nnz, np.nan, dtype)
    C = gmat.sddmm(S, A, B, vals)
    assert np.shares_memory(C.data, vals)
    _assert_close(vals, _ref_sddmm(S, A, B), dtype, scale=10)


def test_csc_array_input_returns_same_class(rng):
    S = sp.csc_array(_random_csc(rng, 30, 20, 0.2, np.float64))
    A = _dense(rng, (3, 30), np.float64)
    B = _dense(rng, (3, 20), np.float64)
    C = gmat.sddmm(S, A, B)
    assert isinstance(C, sp.csc_array)
    _assert_close(gmat.mult_as(A, S), _ref_as(A, sp.csc_matrix(S)), np.float64)


class TestBadInput:
    def setup_method(self):
        rng = np.random.default_rng(0)
        self.S = _random_csc(rng, 20, 10, 0.3, np.float32)
        self.A = _dense(rng, (3, 20), np.float32)
        self.B = _dense(rng, (3, 10), np.float32)

    def test_shape_mismatch_names_arguments(self):
        with pytest.raises(ValueError, match="A has 19 columns but S has 20 rows"):
            gmat.mult_as(self.A[:, :19], self.S)
        with pytest.raises(ValueError, match="A has 20 columns but S has 10 columns"):
            gmat.mult_ast(self.A, self.S)
        with pytest.raises(ValueError, match="B has 9 columns"):
            gmat.sddmm(self.S, self.A, self.B[:, :9])
        with pytest.raises(ValueError, match="A has 3 rows but B has 2 rows"):
            gmat.sddmm(self.S, self.A, self.B[:2])

    def test_dtype_errors_name_arguments(self):
        with pytest.raises(TypeError, match="A has dtype float64 but S has dtype float32|"
                           "S has dtype float32 but A has dtype float64"):
            gmat.mult_as(self.A.astype(np.float64), self.S)
        with pytest.raises(TypeError, match="A has dtype int64"):
            gmat.mult_as(np.ones((3, 20), dtype=np.int64), self.S)
        with pytest.raises(TypeError, match="S has dtype complex128"):
            gmat.mult_as(self.A, self.S.astype(np.complex128))
        with pytest.raises(TypeError, match="out has dtype float64"):
            gmat.mult_as(self.A, self.S, np.empty((3, 10), order="F"))

    def test_out_errors(self):
        with pytest.raises(ValueError, match="out has shape"):
            gmat.mult_as(self.A, self.S, gmat.empty((3, 11), np.float32))
        with pytest.raises(ValueError, match="Fortran- or C-contiguous"):
            gmat.mult_as(self.A, self.S, np.empty((3, 20), np.float32, order="F")[:, ::2])

    def test_wrong_kinds(self):
        with pytest.raises(TypeError, match="CSC format"):
            gmat.mult_as(self.A, self.S.tocsr())
        with pytest.raises(TypeError, match="sparse CSC matrix"):
            gmat.mult_as(self.A, self.S.toarray())
        with pytest.raises(TypeError, match="A must be a dense array"):
            gmat.mult_as(self.S, self.S)
        with pytest.raises(TypeError, match="numpy or cupy array"):
            gmat.mult_as([[1.0] * 20], self.S)
        with pytest.raises(ValueError, match="ndim"):
            gmat.mult_as(np.ones((1, 3, 20), np.float32), self.S)

    def test_out_of_range_index(self):
        S = self.S.copy()
        S.indices[-1] = 20
        with pytest.raises(ValueError, match=r"S.indices\[\d+\] = 20 is out of range \[0, 20\)"):
            gmat.mult_as(self.A, S)
        S.indices[-1] = -1
        with pytest.raises(ValueError, match="out of range"):
            gmat.mult_ast(self.B, S)

    def test_unsorted_and_duplicate_indices(self):
        S = self.S.copy()
        col = int(np.argmax(np.diff(S.indptr)))
        lo = S.indptr[col]
        S.indices[lo], S.indices[lo + 1] = S.indices[lo + 1], S.indices[lo]
        with pytest.raises(ValueError, match=f"unsorted or duplicate row indices in column {col}"):
            gmat.sddmm(S, self.A, self.B)
        S.indices[lo] = S.indices[lo + 1]
        with pytest.raises(ValueError, match="duplicate"):
            gmat.mult_as(self.A, S)

    def test_malformed_indptr(self):
        S = self.S.copy()
        S.indptr = S.indptr[:-1]
        with pytest.raises(ValueError, match="indptr has length"):
            gmat.mult_as(self.A, S)

    def test_indptr_overshooting_in_the_middle(self):
        S = self.S.copy()
        indptr = S.indptr.copy()
        indptr[1] = S.nnz + 1000  # would read past the arrays if trusted
        S.indptr = indptr
        with pytest.raises(ValueError, match="indptr is not non-decreasing at column 0"):
            gmat.mult_as(self.A, S)

    def test_non_finite_values(self):
        S = self.S.copy()
        S.data[2] = np.inf
        with pytest.raises(ValueError, match="non-finite value inf at position 2"):
            gmat.mult_as(self.A, S)

    def test_validation_is_cached_but_replacing_arrays_rechecks(self):
        S = self.S.copy()
        gmat.mult_as(self.A, S)  # validated once
        bad = S.indices.copy()
        bad[0] = 99
        S.indices = bad  # a new array: the cached validation no longer applies
        with pytest.raises(ValueError, match="out of range"):
            gmat.mult_as(self.A, S)


@pytest.fixture(autouse=True, params=["serial", "parallel"])
def thread_policy(request, monkeypatch):
    """Run every test here both on the calling thread and on numba's pool (the primitives pick
    by the size of the call: PARALLEL_MIN_WORK)."""
    import roofline.gmat._primitives as prim

    monkeypatch.setattr(prim, "PARALLEL_MIN_WORK", 1 << 62 if request.param == "serial" else 0)
    return request.param


def test_small_calls_run_on_the_calling_thread(monkeypatch):
    """The size policy itself: a small call runs with numba limited to one thread, a large
    one with all of them (observed through the thread count the kernel wrapper sees)."""
    import roofline.gmat._primitives as prim
    from roofline import kernels

    seen = []
    real = kernels.csc_gather_vec

    def spy(*args):
        seen.append(kernels.default_threads())
        return real(*args)

    monkeypatch.setattr(kernels, "csc_gather_vec", spy)
    rng = np.random.default_rng(0)
    S = _random_csc(rng, 50, 40, 0.1, np.float64)
    a = _dense(rng, (50,), np.float64)
    for limit in (1 << 62, 0):
        monkeypatch.setattr(prim, "PARALLEL_MIN_WORK", limit)
        np.testing.assert_allclose(gmat.mult_as(a, S), _ref_as(a, S), rtol=1e-12, atol=1e-12)
    assert seen[0] == 1
    assert seen[1] == kernels.default_threads()


@pytest.mark.parametrize("n,m,density", [(20, 500, 0.9), (300, 40, 0.05), (5, 3, 1.0)])
def test_mult_ast_k1_private_outputs_and_serial(rng, dtype, n, m, density):
    """k = 1 A*S^T: many nonzeros per row (per-thread private outputs, summed) and few (one
    scatter on the calling thread) give scipy's result."""
    S = _random_csc(rng, n, m, density, dtype)
    a = _dense(rng, (m,), dtype)
    _assert_close(gmat.mult_ast(a, S), _ref_ast(a, S), dtype, scale=30)
    _assert_close(gmat.mult_ast(a.reshape(1, -1), S), _ref_ast(a.reshape(1, -1), S), dtype,
                  scale=30)


@pytest.mark.parametrize("k", [2, 5, 16, 17, 32])
def test_mult_ast_by_output_blocks(rng, dtype, k):
    """A*S^T with rows of at most 128 bytes runs by output blocks: several blocks and a
    partial last one, Zipf rows (hot blocks, never-used features), empty columns."""
    from roofline import kernels

    n = 3 * (1 << kernels.AST_BLOCK_SHIFT) + 77
    S = gmat.powerlaw_csc(n, 300, 15, dtype=dtype, random_state=3)
    S = sp.csc_matrix(S.multiply(rng.random((1, 300)) > 0.1))  # ~10% empty columns
    S.sort_indices()
    B = _dense(rng, (k, 300), dtype)
    _assert_close(gmat.mult_ast(B, S), _ref_ast(B, S), dtype, scale=30)


def test_mult_ast_path_by_row_bytes(monkeypatch):
    """The blocked kernel is used exactly for 2 <= k and k * itemsize <= 128 bytes."""
    import roofline.gmat._primitives as prim
    from roofline import kernels

    monkeypatch.setattr(prim, "AST_REUSE", False)  # the first-use (scatter) paths
    calls = []
    real = kernels.csc_mult_t_blocked
    monkeypatch.setattr(kernels, "csc_mult_t_blocked",
                        lambda *a: (calls.append(a[0].shape[1]), real(*a))[1])
    rng = np.random.default_rng(0)
    for dt, ks in ((np.float32, (1, 2, 32, 33)), (np.float64, (2, 16, 17))):
        S = _random_csc(rng, 70, 60, 0.1, dt)
        for k in ks:
            B = _dense(rng, (k, 60), dt)
            _assert_close(gmat.mult_ast(B, S), _ref_ast(B, S), dt, scale=10)
    assert calls == [2, 32, 2, 16]
    assert prim.BLOCKED_AST_MAX_ROW_BYTES == 128


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_blocked_kernel_packed_and_separate_values_agree(rng, threads):
    """float32 values packed into the entry's upper half or kept in their own array give
    identical results (same summation order), on 1 to 3 threads."""
    from roofline import kernels

    S = gmat.powerlaw_csc(2500, 200, 20, dtype=np.float32, random_state=5)
    n, m = S.shape
    AT = np.ascontiguousarray(_dense(rng, (200, 8), np.float32))
    shift = 8
    n_blocks = (n + (1 << shift) - 1) >> shift
    results = []
    for packed in (True, False):
        outT = np.full((n, 8), np.nan, np.float32)  # every row must be written
        bounds = kernels.nnz_chunks(S.indptr, threads)
        kernels.csc_mult_t_blocked(
            AT, S.indptr, S.indices, S.data,
            S.data.view(np.uint32) if packed else np.empty(0, np.uint32), outT, bounds, shift,
            np.empty((threads, n_blocks), np.int64), np.empty(S.nnz, np.uint64),
            np.empty(0 if packed else S.nnz, np.float32), np.empty(n_blocks + 1, np.int64),
            np.empty(threads + 1, np.int64))
        results.append(outT)
    np.testing.assert_array_equal(results[0], results[1])
    _assert_close(results[0].T, _ref_ast(AT.T, S), np.float32, scale=30)


def test_large_scratch_is_not_pinned_in_the_cache(monkeypatch):
    """Blocked A*S^T scratch above the cache limit is allocated per call (and the result is
    the same)."""
    import roofline.gmat._primitives as prim

    rng = np.random.default_rng(1)
    S = _random_csc(rng, 3000, 200, 0.02, np.float64)
    B = _dense(rng, (4, 200), np.float64)
    cache = gmat.default_cache()
    cache.clear()
    monkeypatch.setattr(prim, "AST_REUSE", False)  # the first-use (scatter) path
    monkeypatch.setattr(prim, "_SCRATCH_CACHE_MAX_BYTES", 1024)
    _assert_close(gmat.mult_ast(B, S), _ref_ast(B, S), np.float64, scale=10)
    assert not any(key[0][0] in ("mult_ast_keys", "mult_ast_vals") for key in cache._buffers)
    monkeypatch.setattr(prim, "_SCRATCH_CACHE_MAX_BYTES", 64 << 20)
    _assert_close(gmat.mult_ast(B, S), _ref_ast(B, S), np.float64, scale=10)
    assert any(key[0][0] == "mult_ast_keys" for key in cache._buffers)
