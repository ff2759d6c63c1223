"""The CUDA kernels of A*S, A*S^T and SDDMM (kernels/_cuda_primitives.py, through gmat's GPU
dispatch) against numpy/scipy references.

Each test runs on two backends:

* ``sim``: numba's CUDA simulator on numpy operands.  ``NUMBA_ENABLE_CUDASIM`` must be set
  before numba is imported, so :func:`test_under_simulator` (the one test of an ordinary run)
  runs this file again in a subprocess with the variable set, where the ``sim`` cases run;
* ``gpu``: a real device on cupy operands (marker ``gpu``; skipped without a device), through
  the public ``gmat.mult_as`` / ``mult_ast`` / ``sddmm``.

The simulator runs every thread as a Python thread: the shapes are tiny, and a small segment
length (``SEG_STEPS``) makes the row split (several groups per column, atomics) happen on them.
"""

import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

from roofline import gmat
from tests._helpers import BACKENDS, SIM, not_under_simulator, run_under_simulator, sim_or_gpu


@pytest.fixture(params=BACKENDS)
def backend(request):
    return sim_or_gpu(request.param, gmat.gpu_available)


@not_under_simulator
def test_under_simulator():
    """Run this file's ``sim`` cases under numba's CUDA simulator (in a subprocess)."""
    tests = [os.path.join(os.path.dirname(__file__), f)
             for f in ("test_cuda_primitives.py", "test_cuda_cd.py", "test_cuda_losses.py")]
    run_under_simulator(*[t for t in tests if os.path.exists(t)], timeout=600)


def test_import_gmat_imports_no_cuda():
    """``import roofline.gmat`` never imports cupy or numba.cuda (a fresh interpreter)."""
    code = ("import sys, roofline.gmat, roofline.kernels; "
            "bad = [m for m in ('cupy', 'numba.cuda', 'numba_cuda') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ---------------------------------------------------------------------------------------------
# operands


def _matrix(dtype, index_dtype, *, n=29, m=10, seed=0, hot=True):
    """A power-law-ish CSC ``n x m``: empty rows and columns, one hot column (an example holding
    most of the values) and one hot row (a feature in nearly every example)."""
    rng = np.random.default_rng(seed)
    D = np.zeros((n, m))
    mask = rng.random((n, m)) < 0.12
    D[mask] = rng.normal(size=mask.sum())
    empty = [1, 6] if m > 6 else [1]
    D[:, empty] = 0.0  # empty columns
    D[[2, 9, n - 1], :] = 0.0  # empty rows
    if hot:
        D[:, 4] = rng.normal(size=n)  # the hot column
        D[4, :] = rng.normal(size=m)  # the hot row
        D[[2, 9, n - 1], 4] = 0.0
        D[4, empty] = 0.0
    S = sp.csc_matrix(D.astype(dtype))
    S.indices = S.indices.astype(index_dtype)
    S.indptr = S.indptr.astype(index_dtype)
    return S


def _dense(k, n, dtype, seed, order="F"):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(k, n)).astype(dtype)
    return np.asfortranarray(a) if order == "F" else np.ascontiguousarray(a)


def _tol(dtype):
    return dict(rtol=2e-5, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)


@pytest.fixture(autouse=True)
def _small_blocks(monkeypatch):
    """Blocks of one warp on the simulator (each simulated thread is a Python thread; this also
    caps a group at 32 lanes, so k = 40 runs two row chunks)."""
    if SIM:
        from roofline.kernels import _cuda_primitives

        monkeypatch.setattr(_cuda_primitives, "BLOCK", 32)


@pytest.fixture
def short_segments(monkeypatch, backend):
    """Segments of 2 steps on the simulator (the hot column splits into several groups)."""
    from roofline.kernels import _cuda_primitives

    if backend == "sim":
        monkeypatch.setattr(_cuda_primitives, "SEG_STEPS", 2)
    return backend


def _run(backend, fn, S, *dense, **kw):
    """Call the GPU path of ``fn`` (``"as"``, ``"ast"``, ``"sddmm"``): the gmat public function
    on cupy operands, the dispatch's GPU function on numpy operands under the simulator."""
    from roofline import gmat
    from roofline.gmat import _primitives as P

    if backend == "gpu":
        import cupy

        Sg = gmat.to_device(S, "gpu")
        dg = [cupy.asarray(d, order="F" if d.flags.f_contiguous else "C") for d in dense]
        if fn == "as":
            return cupy.asnumpy(gmat.mult_as(dg[0], Sg))
        if fn == "ast":
            return cupy.asnumpy(gmat.mult_ast(dg[0], Sg))
        return cupy.asnumpy(gmat.sddmm(Sg, dg[0], dg[1], **kw).data)
    gmat.check_csc(S)
    if fn == "as":
        A = dense[0]
        shape = (S.shape[1],) if A.ndim == 1 else (A.shape[0], S.shape[1])
        return P._gpu_mult_as(A, S, np.full(shape, np.nan, A.dtype, order="F"))
    if fn == "ast":
        A = dense[0]
        shape = (S.shape[0],) if A.ndim == 1 else (A.shape[0], S.shape[0])
        return P._gpu_mult_ast(A, S, np.full(shape, np.nan, A.dtype, order="F"))
    out = np.full(S.indptr[-1], np.nan, dense[0].dtype)
    return P._gpu_sddmm(S, dense[0], dense[1], out, kw.get("scale", True))


# ---------------------------------------------------------------------------------------------
# the kernels against the references

K_VALUES = [1, 5, 40]


def _sim_subset(backend, dtype, index_dtype, k=1):
    """The simulator runs a covering subset (each simulated thread is a Python thread): int32
    indices with float32, int64 with float64, k = 40 with float32 only; the GPU runs all."""
    if backend != "sim":
        return
    if (np.dtype(dtype) == np.float32) != (np.dtype(index_dtype) == np.int32):
        pytest.skip("simulator subset: int32 indices with float32, int64 with float64")
    if k >= 40 and np.dtype(dtype) == np.float64:
        pytest.skip("simulator subset: k = 40 with float32 only")


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("k", K_VALUES)
def test_mult_as(short_segments, dtype, index_dtype, k):
    _sim_subset(short_segments, dtype, index_dtype, k)
    S = _matrix(dtype, index_dtype, seed=k)
    A = _dense(k, S.shape[0], dtype, seed=1)
    got = _run(short_segments, "as", S, A)
    np.testing.assert_allclose(got, A @ S.toarray(), **_tol(dtype))


def test_mult_as_vector_and_c_order(short_segments, dtype):
    S = _matrix(dtype, np.int32, seed=3)
    a = _dense(1, S.shape[0], dtype, seed=2)[0]
    np.testing.assert_allclose(_run(short_segments, "as", S, a), a @ S.toarray(), **_tol(dtype))
    A = _dense(3, S.shape[0], dtype, seed=4, order="C")
    np.testing.assert_allclose(_run(short_segments, "as", S, A), A @ S.toarray(), **_tol(dtype))


def test_mult_as_wide_k(backend, dtype):
    """k above one group's 128 lanes: the row chunks loop."""
    S = _matrix(dtype, np.int32, n=12, m=5, seed=5)
    A = _dense(130, S.shape[0], dtype, seed=6)
    np.testing.assert_allclose(_run(backend, "as", S, A), A @ S.toarray(), **_tol(dtype))


@pytest.mark.parametrize("method", ["atomic", "gather"])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("k", K_VALUES)
def test_mult_ast(short_segments, monkeypatch, dtype, index_dtype, k, method):
    from roofline.gmat import _primitives as P

    _sim_subset(short_segments, dtype, index_dtype, k)
    monkeypatch.setattr(P, "GPU_AST_METHOD", method)
    S = _matrix(dtype, index_dtype, seed=10 + k)
    B = _dense(k, S.shape[1], dtype, seed=7)
    got = _run(short_segments, "ast", S, B)
    np.testing.assert_allclose(got, B @ S.toarray().T, **_tol(dtype))


def test_mult_ast_gather_sees_value_edits(backend, monkeypatch, dtype):
    """The transposed index is cached on the matrix and reads the values through a
    permutation: an in-place edit of ``S.data`` is seen by the next call."""
    from roofline.gmat import _primitives as P

    if backend == "sim" and np.dtype(dtype) == np.float32:
        pytest.skip("simulator subset: float64 only")
    monkeypatch.setattr(P, "GPU_AST_METHOD", "gather")
    S = _matrix(dtype, np.int32, seed=21, m=7)
    B = _dense(2, S.shape[1], dtype, seed=8)
    if backend == "gpu":
        import cupy

        from roofline import gmat

        Sg = gmat.to_device(S, "gpu")
        Bg = cupy.asarray(B, order="F")
        gmat.mult_ast(Bg, Sg)
        Sg.data *= 3
        np.testing.assert_allclose(cupy.asnumpy(gmat.mult_ast(Bg, Sg)),
                                   3 * (B @ S.toarray().T), **_tol(dtype))
        return
    _run(backend, "ast", S, B)
    assert P._gpu_has(S, "T")
    S.data *= 3
    np.testing.assert_allclose(_run(backend, "ast", S, B), B @ S.toarray().T, **_tol(dtype))


@pytest.mark.parametrize("scale", [True, False])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("k", K_VALUES)
def test_sddmm(short_segments, dtype, index_dtype, k, scale):
    _sim_subset(short_segments, dtype, index_dtype, k)
    if short_segments == "sim" and k == 40 and not scale:
        pytest.skip("simulator subset: one k = 40 SDDMM")
    S = _matrix(dtype, index_dtype, seed=20 + k, n=17 if k == 40 else 29)
    A = _dense(k, S.shape[0], dtype, seed=9)
    B = _dense(k, S.shape[1], dtype, seed=10)
    got = _run(short_segments, "sddmm", S, A, B, scale=scale)
    full = A.T @ B
    rows = S.indices.astype(np.int64)
    cols = np.repeat(np.arange(S.shape[1]), np.diff(S.indptr))
    want = full[rows, cols] * (S.data if scale else 1)
    np.testing.assert_allclose(got, want, **_tol(dtype))


def test_empty_matrix(backend, dtype):
    S = sp.csc_matrix((6, 4), dtype=dtype)
    A = _dense(3, 6, dtype, seed=1)
    B = _dense(3, 4, dtype, seed=2)
    np.testing.assert_array_equal(_run(backend, "as", S, A), np.zeros((3, 4)))
    np.testing.assert_array_equal(_run(backend, "ast", S, B), np.zeros((3, 6)))
    assert _run(backend, "sddmm", S, A, B).shape == (0,)


def test_out_of_range_index_raises(backend, dtype):
    """A row index edited out of range after validation: the kernel skips it and counts a
    fault, the dispatch raises (as on the CPU)."""
    if backend == "gpu":
        pytest.skip("gmat re-validates cupy matrices on the host path; simulator-only check")
    from roofline import gmat

    S = _matrix(dtype, np.int32, seed=30)
    gmat.check_csc(S)
    S.indices[S.indptr[5]] = S.shape[0] + 3  # behind the validation mark's back
    A = _dense(2, S.shape[0], dtype, seed=1)
    with pytest.raises(ValueError, match="out of range"):
        _run(backend, "as", S, A)


def test_segment_plan_splits_long_columns():
    from roofline.kernels import segment_plan

    indptr = np.array([0, 0, 5, 6, 20])
    segcol, segoff, nseg, split = segment_plan(indptr, 4)
    assert nseg == 1 + 2 + 1 + 4 and split
    np.testing.assert_array_equal(segoff, [0, 1, 3, 4, 8])
    np.testing.assert_array_equal(segcol, [0, 1, 1, 2, 3, 3, 3, 3])
    assert not segment_plan(indptr, 16)[3]


def test_transpose_index():
    from roofline.kernels import transpose_index

    S = _matrix(np.float64, np.int32, seed=4)
    indptr_t, cols, perm = transpose_index(S.indptr, S.indices, S.shape[0])
    T = sp.csc_matrix((S.data[perm], cols, indptr_t), shape=S.shape[::-1])
    np.testing.assert_array_equal(T.toarray(), S.toarray().T)
    assert T.has_sorted_indices


@pytest.mark.parametrize("k,itemsize,cached,want", [
    (1, 4, False, "atomic"), (16, 4, False, "atomic"), (128, 4, False, "gather"),
    (16, 4, True, "gather"), (1, 8, True, "atomic"),
])
def test_ast_cost_model(monkeypatch, k, itemsize, cached, want):
    from roofline.gmat import _primitives as P

    monkeypatch.setattr(P, "GPU_AST_METHOD", "auto")
    assert P.gpu_ast_method(10**6, k, itemsize, cached) == want


@pytest.mark.skipif(not SIM, reason="the simulator's shared arrays (test_under_simulator)")
def test_simulator_threads_that_race_to_a_shared_array_get_the_same_one():
    """Two threads of a block that both miss the simulator's allocation table (forced here: its
    lookup waits until both have looked) still receive one shared array; numba-cuda's own
    check-then-set gives each its own, and a reduction reads uninitialised memory."""
    import threading

    from numba.cuda.simulator import kernelapi

    from roofline.kernels import _cuda_primitives as cp

    cp._cuda()  # installs the atomic allocation under the simulator
    both_looked = threading.Barrier(2, timeout=10)

    class _Table(dict):
        def get(self, key, default=None):
            res = super().get(key, default)
            both_looked.wait()
            return res

    shared = kernelapi.FakeCUDAShared(0)
    shared._allocations = _Table()
    got = [None, None]

    def thread(k):
        got[k] = shared.array(4, np.float64)  # one calling line for both threads

    threads = [threading.Thread(target=thread, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert got[0] is not None and got[0] is got[1]
    assert got[0].shape == (4,) and got[0].dtype == np.float64
    assert list(shared._allocations.values()) == [got[0]]
