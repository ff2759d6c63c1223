"""Snap ML's streaming pipeline (kernels/_cuda_stream.py) and the streamed TPA-SCD problem
(kernels/_cuda_cd.py ``DeviceDual``).

The ``sim`` cases run under numba's CUDA simulator, in the subprocess that
:func:`test_under_simulator` starts (streams and events exist there and do nothing: the
copies are synchronous, so the tests check what the pipeline hands out, in order and bit for
bit); the ``gpu`` cases on a real device (marker ``gpu``; skipped without one), where the
copies overlap the consumer's kernels.
"""

import numpy as np
import pytest
import scipy.sparse as sp

from roofline.kernels import cuda_ready
from tests._helpers import BACKENDS, not_under_simulator, run_under_simulator, sim_or_gpu


@pytest.fixture(params=BACKENDS)
def backend(request):
    return sim_or_gpu(request.param, cuda_ready)


@not_under_simulator
def test_under_simulator():
    """This file's ``sim`` cases under numba's CUDA simulator (a subprocess)."""
    run_under_simulator(__file__, timeout=600)


def _chunks(seed=0, n=9):
    """Chunks of three fields of varying sizes (some empty, one growing past the buffers),
    several dtypes and a 2-D field."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        size = 0 if k == 2 else int(rng.integers(1, 30)) * (4 if k == 6 else 1)
        out.append((rng.normal(size=size).astype(np.float32),
                    rng.integers(-2**40, 2**40, size=size + 1, dtype=np.int64),
                    np.asfortranarray(rng.normal(size=(3, size)))))
    return out


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_pipeline_yields_every_chunk_in_order_bit_identical(backend, depth):
    from roofline.kernels import DeviceChunkStream

    chunks = _chunks()
    pulled = []

    def lazily():  # the pipeline reads at most ``depth`` chunks ahead of the consumer
        for k, c in enumerate(chunks):
            pulled.append(k)
            yield c

    pipe = DeviceChunkStream(depth=depth)
    for _ in range(2):  # the same buffers serve a second pass
        pulled.clear()
        seen = []
        for k, arrays in pipe.iterate(lazily()):
            assert max(pulled) == min(k + depth - 1, len(chunks) - 1)  # depth ahead
            host = [a.copy_to_host() for a in arrays]
            for got, want in zip(host, chunks[k], strict=True):
                assert got.dtype == want.dtype and got.shape == want.shape
                assert got.tobytes() == np.ascontiguousarray(want).tobytes()
            seen.append(k)
        assert seen == list(range(len(chunks)))
    total = sum(a.nbytes for c in chunks for a in c)
    assert pipe.bytes_copied == 2 * total and pipe.chunks_done == 2 * len(chunks)
    pipe.close()


def test_pipeline_of_nothing_and_bad_depth(backend):
    from roofline.kernels import DeviceChunkStream

    with DeviceChunkStream() as pipe:
        assert list(pipe.iterate([])) == []
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="depth"):
            DeviceChunkStream(depth=bad)


def _csc(seed=0, d=7, m=40):
    rng = np.random.default_rng(seed)
    D = rng.normal(size=(d, m)) * (rng.random((d, m)) < 0.4)
    D[:, 3] = 0.0
    return sp.csc_matrix(D)


def test_device_dual_cuts_the_examples_into_chunks_within_the_budget(backend):
    from roofline.kernels import DeviceDual

    X = _csc()
    m = X.shape[1]
    y = np.ones(m)
    colsq = np.asarray(X.multiply(X).sum(axis=0)).ravel()
    whole = DeviceDual(X.indptr, X.indices, X.data, y, colsq, X.shape[0], icpt=1.0)
    assert not whole.streamed and list(whole.chunk_bounds) == [0, m]
    whole.close()
    state = 8 * (m + X.shape[0] + 1)
    budget = state + 400
    dev = DeviceDual(X.indptr, X.indices, X.data, y, colsq, X.shape[0], icpt=1.0,
                     budget=budget)
    b = dev.chunk_bounds
    assert dev.streamed and b[0] == 0 and b[-1] == m and np.all(np.diff(b) >= 1)
    for (ip, ix, dt, yy, cq), lo, hi in zip(dev.chunks, b[:-1], b[1:], strict=True):
        sub = X[:, lo:hi]
        np.testing.assert_array_equal(ip, sub.indptr)
        np.testing.assert_array_equal(ix, sub.indices)
        np.testing.assert_array_equal(dt, sub.data)
        np.testing.assert_array_equal(cq, colsq[lo:hi])
        nbytes = ip.nbytes + ix.nbytes + dt.nbytes + yy.nbytes + cq.nbytes + 8 * (hi - lo)
        assert 2 * nbytes <= budget - state or hi - lo == 1
    dev.close()
    with pytest.raises(ValueError, match="device_memory"):
        DeviceDual(X.indptr, X.indices, X.data, y, colsq, X.shape[0], budget=state + 10)


def test_streamed_epochs_keep_v_equal_to_x_alpha(backend):
    """Chunked TPA epochs update ``alpha`` through views of the resident vector and ``v``
    with atomics: ``v = X alpha`` holds after every epoch, and the dual objective rises."""
    from roofline.kernels import LOSS_CODES, DeviceDual

    X = _csc(seed=1)
    d, m = X.shape
    rng = np.random.default_rng(1)
    y = np.where(rng.random(m) < 0.5, -1.0, 1.0)
    colsq = np.asarray(X.multiply(X).sum(axis=0)).ravel()
    lam_n = 0.1 * m
    dev = DeviceDual(X.indptr, X.indices, X.data, y, colsq, d,
                     budget=8 * (m + d) + 500, seed=4)
    assert dev.streamed and dev.chunk_bounds.size - 1 >= 3
    prev = -np.inf
    for _ in range(3):
        dev.epoch(LOSS_CODES["hinge"], lam_n)
        a, v = dev.get()
        np.testing.assert_allclose(v, X @ a, rtol=1e-12, atol=1e-12)
        assert np.all(a * y >= -1e-15) and np.all(a * y <= 1 + 1e-15)  # the hinge's box
        dual = float(np.sum(a * y)) - 0.5 * float(v @ v) / lam_n
        assert dual >= prev - 1e-12
        prev = dual
    assert dev.bytes_streamed >= 3 * (X.data.nbytes + X.indices.nbytes)
    dev.close()


def test_eso_norms_weigh_each_feature_by_the_examples_sharing_it():
    """``eso_colsq``: ``sum_j x_ij^2 (1 + (omega_j - 1)(tau - 1)/(m - 1))`` plus the constant
    feature's ``(tau - 1) icpt^2``; ``tau = 1`` is the plain norm (numpy only, no device)."""
    from roofline.kernels import eso_colsq

    X = _csc(seed=3, d=6, m=30)
    D = X.toarray()
    omega = (D != 0).sum(axis=1)
    m = D.shape[1]
    for tau in (1, 4, 30):
        f = 1.0 + (omega - 1.0) * (tau - 1.0) / (m - 1)
        want = (D**2 * f[:, None]).sum(axis=0) + (tau - 1.0) * 0.25
        got = eso_colsq(X.indptr, X.indices, X.data, X.shape[0], tau, icpt=0.5)
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)
    # a feature in every example counts tau times; one in a single example once
    X1 = sp.csc_matrix(np.vstack([np.ones(m), np.eye(1, m, 3)[0] * 2.0]))
    got = eso_colsq(X1.indptr, X1.indices, X1.data, 2, 8)
    np.testing.assert_allclose(got, np.where(np.arange(m) == 3, 8.0 + 4.0, 8.0))
