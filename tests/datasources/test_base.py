"""The DataSource protocol, MatSource and the CSC block helpers of datasources/_base.py."""

import numpy as np
import pytest
import scipy.sparse as sp

from roofline.datasources import MatSource, Minibatch
from roofline.datasources._base import _hstack, _Rebatcher, _slice_cols, _take_cols
from tests._helpers import powerlaw_matrix


def _dense(X):
    return X.toarray() if sp.issparse(X) else np.asarray(X)


@pytest.mark.parametrize("bs", [1, 100, 1037, 5000])
@pytest.mark.parametrize("drop_last", [False, True])
def test_matsource_batches(data, bs, drop_last):
    X, y, w = data
    src = MatSource(X, y, w, batch_size=bs, drop_last=drop_last)
    batches = list(src)
    n = X.shape[1]
    assert len(batches) == len(src) == (n // bs if drop_last else -(-n // bs))
    for i, mb in enumerate(batches):
        assert isinstance(mb, Minibatch) and mb.start == i * bs
        np.testing.assert_array_equal(_dense(mb.X), _dense(X[:, mb.start : mb.start + bs]))
        np.testing.assert_array_equal(mb.y, y[mb.start : mb.start + bs])
        np.testing.assert_array_equal(mb.w, w[mb.start : mb.start + bs])
    assert [mb.start for mb in src] == [mb.start for mb in batches]  # a new pass
    assert src.n_features == 300 and src.n_examples == n and src.opts.batch_size == bs


def test_matsource_bad_input():
    X = sp.random(5, 10, density=0.3, format="csc", dtype=np.float32, random_state=0)
    with pytest.raises(ValueError, match="y has 9 entries"):
        MatSource(X, np.zeros(9))
    with pytest.raises(ValueError, match="batch_size"):
        MatSource(X, batch_size=0)
    with pytest.raises(TypeError, match="CSC"):
        MatSource(X.tocsr())


@pytest.mark.parametrize("seed", range(4))
def test_helpers_match_scipy(dtype, seed):
    rng = np.random.default_rng(seed)
    blocks = [powerlaw_matrix(50, int(rng.integers(0, 40)), seed=seed * 10 + k, dtype=dtype,
                              empty_examples=0.5, signed=True)
              for k in range(4)]
    H = _hstack(blocks)
    np.testing.assert_array_equal(H.toarray(), sp.hstack(blocks).toarray())
    assert H.dtype == dtype and H.format == "csc"
    m = H.shape[1]
    a, b = sorted(rng.integers(0, m + 1, 2))
    np.testing.assert_array_equal(_slice_cols(H, a, b).toarray(), H.toarray()[:, a:b])
    cols = rng.integers(0, max(m, 1), size=min(m, 17)) if m else np.zeros(0, int)
    T = _take_cols(H, cols)
    np.testing.assert_array_equal(T.toarray(), H.toarray()[:, cols])
    T.check_format(full_check=True)
    # dense blocks too
    D = [b.toarray() for b in blocks]
    np.testing.assert_array_equal(_hstack(D), np.hstack(D))


@pytest.mark.parametrize("bs", [1, 3, 10, 64])
def test_rebatcher_exact_sizes(bs):
    rng = np.random.default_rng(bs)
    sizes = rng.integers(0, 25, size=12)
    blocks = [powerlaw_matrix(40, int(s), dtype=np.float32, seed=int(s) + 100 * k,
                              empty_examples=0.5, signed=True) for k, s in enumerate(sizes)]
    ys = [np.arange(s, dtype=np.float32) + 1000 * k for k, s in enumerate(sizes)]
    rb = _Rebatcher(bs)
    out = []
    for X, y in zip(blocks, ys, strict=True):
        out += list(rb.push(X, y))
    out += list(rb.finish())
    total = int(sizes.sum())
    assert [mb.n_examples for mb in out[:-1]] == [bs] * (len(out) - 1)
    assert sum(mb.n_examples for mb in out) == total
    assert [mb.start for mb in out] == list(range(0, total, bs))
    np.testing.assert_array_equal(_hstack([mb.X for mb in out]).toarray(),
                                  sp.hstack(blocks).toarray())
    np.testing.assert_array_equal(np.concatenate([mb.y for mb in out]), np.concatenate(ys))


def test_csc_constructor_gives_independent_matrices():
    from roofline import gmat
    from roofline.datasources._base import _csc

    a = _csc(np.array([1.0, 2.0], np.float32), np.array([0, 3], np.int32),
             np.array([0, 1, 2], np.int32), (4, 2))
    b = _csc(np.array([5.0], np.float32), np.array([1], np.int32), np.array([0, 0, 1], np.int32),
             (4, 2))
    gmat.check_csc(a)
    a.data *= 10
    a.indices = a.indices.copy()
    np.testing.assert_array_equal(a.toarray(), [[10, 0], [0, 0], [0, 0], [0, 20]])
    np.testing.assert_array_equal(b.toarray(), [[0, 0], [0, 5], [0, 0], [0, 0]])
    assert not hasattr(b, "_roofline_checked")
    gmat.check_csc(b)
    b.check_format(full_check=True)
    assert type(a) is sp.csc_matrix and a.has_sorted_indices and a.shape == (4, 2)
    c = _csc(np.zeros(0, np.float64), np.zeros(0, np.int64), np.zeros(3, np.int64), (4, 2),
             sp.csc_array)
    assert type(c) is sp.csc_array and c.dtype == np.float64 and c.nnz == 0
