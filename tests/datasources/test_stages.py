"""Composable stages (datasources/_stages.py): held-out split, shuffle buffer, device transfer."""

import numpy as np
import pytest

from roofline import gmat
from roofline.datasources import HeldOut, MatSource, Shuffle, ToDevice, split_heldout
from roofline.datasources._base import _hstack
from tests._helpers import assert_allclose_on


def _ids(batches):
    return np.concatenate([mb.w for mb in batches]).astype(np.int64)


def _tagged(data, bs, drop_last=False):
    """MatSource whose weights are the example ids (to track examples through stages)."""
    X, y, _ = data
    ids = np.arange(X.shape[1]).astype(X.dtype)
    return MatSource(X, y, ids, batch_size=bs, drop_last=drop_last), X, y


@pytest.mark.parametrize("every", [2, 3, 11])
def test_heldout_partitions_every_example(data, every):
    src, X, y = _tagged(data, 50)
    train, test = split_heldout(src, every=every)
    tr, te = list(train), list(test)
    n_batches = -(-X.shape[1] // 50)
    assert [mb.start // 50 for mb in te] == list(range(every - 1, n_batches, every))
    ids = np.sort(np.concatenate([_ids(tr), _ids(te)]))
    np.testing.assert_array_equal(ids, np.arange(X.shape[1]))
    assert train.n_examples == len(_ids(tr)) and test.n_examples == len(_ids(te))
    for mb in te:  # X/y stay aligned with their ids
        i = _ids([mb])
        np.testing.assert_array_equal(mb.X.toarray(), X[:, i].toarray())
        np.testing.assert_array_equal(mb.y, y[i])
    with pytest.raises(ValueError, match="every"):
        HeldOut(src, every=1)
    with pytest.raises(ValueError, match="part"):
        HeldOut(src, part="valid")


@pytest.mark.parametrize("buffer_size,bs", [(1, 7), (64, 10), (300, 32), (10_000, 100)])
def test_shuffle_each_example_once(data, buffer_size, bs):
    src, X, y = _tagged(data, bs)
    sh = Shuffle(src, buffer_size=buffer_size, seed=3)
    p1, p2 = list(sh), list(sh)
    for batches in (p1, p2):
        ids = _ids(batches)
        np.testing.assert_array_equal(np.sort(ids), np.arange(X.shape[1]))
        assert all(mb.n_examples == bs for mb in batches[:-1])
        assert [mb.start for mb in batches] == list(np.cumsum([0] + [mb.n_examples for mb in
                                                                   batches[:-1]]))
        Xs = _hstack([mb.X for mb in batches])
        np.testing.assert_array_equal(Xs.toarray(), X[:, ids].toarray())
        np.testing.assert_array_equal(np.concatenate([mb.y for mb in batches]), y[ids])
    cap = max(buffer_size, bs)
    if cap < X.shape[1]:
        # bounded buffer: the first minibatch only holds examples read before it was emitted
        assert _ids(p1[:1]).max() < cap + bs
    if buffer_size > 1:
        assert not np.array_equal(_ids(p1), _ids(p2))  # a new order every pass
        assert not np.array_equal(_ids(p1), np.arange(X.shape[1]))
    # reproducible for a seed
    sh2 = Shuffle(src, buffer_size=buffer_size, seed=3)
    np.testing.assert_array_equal(_ids(list(sh2)), _ids(p1))
    if buffer_size > 1:
        assert not np.array_equal(_ids(list(Shuffle(src, buffer_size=buffer_size, seed=4))),
                                  _ids(p1))


def test_shuffle_needs_explicit_seed(data):
    src, _, _ = _tagged(data, 10)
    with pytest.raises(ValueError, match="seed"):
        Shuffle(src, buffer_size=10)
    with pytest.raises(ValueError, match="buffer_size"):
        Shuffle(src, buffer_size=0, seed=1)


def test_shuffle_drop_last(data):
    src, X, _ = _tagged(data, 100, drop_last=True)
    batches = list(Shuffle(src, buffer_size=250, seed=0))
    assert all(mb.n_examples == 100 for mb in batches)
    assert len(np.unique(_ids(batches))) == sum(mb.n_examples for mb in batches)


def test_to_device_cpu_and_chaining(data):
    src, X, y = _tagged(data, 64)
    chained = src.heldout(5).shuffle(200, seed=1).to_device("cpu").prefetch(3)
    plain = Shuffle(HeldOut(src, every=5), buffer_size=200, seed=1)
    a, b = list(chained), list(plain)
    assert len(a) == len(b)
    for ma, mb in zip(a, b, strict=True):
        assert gmat.device_of(ma.X) == "cpu"
        np.testing.assert_array_equal(ma.X.toarray(), mb.X.toarray())
        np.testing.assert_array_equal(ma.w, mb.w)
    with pytest.raises(ValueError, match="device"):
        ToDevice(src, device="tpu")
    with pytest.raises(TypeError, match="DataSource"):
        ToDevice(X, device="cpu")


@pytest.mark.skipif(gmat.gpu_available(), reason="checks the no-GPU error")
def test_to_device_gpu_without_gpu(data):
    src, _, _ = _tagged(data, 64)
    with pytest.raises(RuntimeError, match="CUDA"):
        ToDevice(src, device="gpu")


def test_to_device_moves_every_minibatch(data, device):
    src, X, y = _tagged(data, 64)
    n = 0
    for mb in src.to_device(device):
        assert gmat.device_of(mb.X) == device and gmat.device_of(mb.y) == device
        assert_allclose_on(device, mb.X, X[:, mb.start : mb.start + 64], rtol=0)
        n += mb.n_examples
    assert n == X.shape[1]
