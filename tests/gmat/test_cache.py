"""Buffer cache: a steady-state minibatch loop allocates nothing."""

import numpy as np
import pytest

from roofline import gmat
from roofline.datasources import MatSource


def test_same_key_same_buffer_distinct_tags_distinct_buffers():
    cache = gmat.BufferCache()
    a = cache.empty((4, 3), np.float32, tag="a", order="F")
    assert cache.empty((4, 3), np.float32, tag="a", order="F") is a
    b = cache.empty((4, 3), np.float32, tag="b", order="F")
    assert b is not a
    assert cache.empty((4, 3), np.float64, tag="a", order="F") is not a
    assert cache.n_allocations == 3 and cache.n_hits == 1
    assert a.ctypes.data % 64 == 0
    assert "3 buffers" in repr(cache)


def test_zeros_and_eviction():
    cache = gmat.BufferCache(max_bytes=850)
    z = cache.zeros((10,), np.float64, tag="z")
    assert not z.any()
    cache.empty((100,), np.float64, tag="big")  # 80 + 800 B > 850 B: evicts the older one
    assert len(cache) == 1 and cache.nbytes == 800
    cache.clear()
    assert len(cache) == 0


def test_training_loop_steady_state_allocates_nothing(dtype):
    """A GLM-like step (predict with A*S, gradient with A*S^T) over minibatches of equal size."""
    S = gmat.powerlaw_csc(500, 1000, 8, dtype=dtype, random_state=0)
    y = np.random.default_rng(0).random(1000).astype(dtype)
    W = gmat.zeros((2, 500), dtype)
    cache = gmat.BufferCache()
    counts, scratch = [], []
    for batch in MatSource(S, y, batch_size=100):
        pred = gmat.mult_as(W, batch.X, cache=cache, tag="pred")
        np.subtract(pred, batch.y, out=pred)
        grad = gmat.mult_ast(pred, batch.X, cache=cache, tag="grad")
        gmat.axpy(-1e-3, grad, W)
        counts.append(cache.n_allocations)
        scratch.append(gmat.default_cache().n_allocations)  # the kernels' scratch space
    assert counts[0] == 2
    assert counts[-1] == 2, counts  # nothing allocated after the first step
    assert scratch[-1] == scratch[0], scratch  # ... and no kernel scratch either


def test_cache_true_uses_default_cache():
    S = gmat.powerlaw_csc(50, 20, 3, random_state=0)
    A = gmat.zeros((3, 50))
    out1 = gmat.mult_as(A, S, cache=True, tag="test-default")
    after_first = gmat.default_cache().n_allocations
    out2 = gmat.mult_as(A, S, cache=True, tag="test-default")
    assert out1 is out2
    assert gmat.default_cache().n_allocations == after_first


def test_bad_cache_argument():
    S = gmat.powerlaw_csc(50, 20, 3, random_state=0)
    with pytest.raises(TypeError, match="cache must be a BufferCache"):
        gmat.mult_as(gmat.zeros((1, 50)), S, cache="yes")


def test_cache_holds_any_dtype():
    cache = gmat.BufferCache()
    mask = cache.zeros((7,), np.bool_, tag="mask")
    idx = cache.empty((5,), np.int64, tag="idx")
    assert mask.dtype == np.bool_ and not mask.any() and idx.dtype == np.int64
