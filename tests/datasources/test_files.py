"""FileSource / ShardWriter / write_shards (datasources/_filesource.py, _writer.py, _shards.py)
 on real npz and HDF5 files."""

import h5py
import numpy as np
import pytest

from roofline.datasources import (
    FileSource,
    MatSource,
    ShardWriter,
    SVMLightSource,
    load_svmlight,
    read_shard,
    write_shards,
)
from roofline.datasources._base import _hstack


def _cat(batches):
    return (_hstack([mb.X for mb in batches]), np.concatenate([mb.y for mb in batches]),
            np.concatenate([mb.w for mb in batches]))


@pytest.mark.parametrize("fmt", ["npz", "h5"])
@pytest.mark.parametrize("n_dirs", [0, 1, 3])
def test_roundtrip_striped(tmp_path, data, fmt, n_dirs):
    X, y, w = data
    dirs = [tmp_path / f"disk{k}" for k in range(n_dirs)] or None
    pattern = f"part-{{i:04d}}.{fmt}" if dirs else str(tmp_path / f"part-{{i:04d}}.{fmt}")
    paths = write_shards(MatSource(X, y, w, batch_size=77), pattern, dirs=dirs,
                         examples_per_shard=100)
    assert len(paths) == 11  # 1037 examples
    if dirs:
        for i, p in enumerate(paths):  # striping: shard i on disk i % n
            assert str(p).startswith(str(dirs[i % n_dirs]))
    src = FileSource(pattern, dirs=dirs, batch_size=64)
    assert src.n_features == X.shape[0] and src.n_examples == X.shape[1]
    batches = list(src)
    ref = list(MatSource(X, y, w, batch_size=64))
    assert [mb.start for mb in batches] == [mb.start for mb in ref]
    for a, b in zip(batches, ref, strict=True):
        np.testing.assert_array_equal(a.X.toarray(), b.X.toarray())
        np.testing.assert_array_equal(a.y, b.y)
        np.testing.assert_array_equal(a.w, b.w)
        assert a.X.dtype == X.dtype
    src.close()


@pytest.mark.parametrize("fmt", ["npz", "h5"])
def test_random_order_every_example_once(tmp_path, data, fmt):
    X, y, _ = data
    ids = np.arange(X.shape[1], dtype=np.float64)
    dirs = [tmp_path / "a", tmp_path / "b"]
    write_shards(MatSource(X, y, ids, batch_size=500), f"s{{i}}.{fmt}", dirs=dirs,
                 examples_per_shard=90)
    src = FileSource(f"s{{i}}.{fmt}", dirs=dirs, order="random", seed=5, batch_size=50,
                     n_readers=3, lookahead=3)
    orders = []
    for _ in range(3):
        Xc, yc, wc = _cat(list(src))
        idx = wc.astype(np.int64)
        np.testing.assert_array_equal(np.sort(idx), np.arange(X.shape[1]))  # exactly once
        np.testing.assert_array_equal(Xc.toarray(), X[:, idx].toarray())
        np.testing.assert_array_equal(yc, y[idx])
        orders.append(idx)
    assert not np.array_equal(orders[0], orders[1])  # new shard order per pass
    again = FileSource(f"s{{i}}.{fmt}", dirs=dirs, order="random", seed=5, batch_size=50)
    np.testing.assert_array_equal(_cat(list(again))[2].astype(np.int64), orders[0])


def test_convert_svmlight_to_shards(tmp_path):
    rng = np.random.default_rng(0)
    lines = []
    for _ in range(700):
        idx = np.unique(rng.integers(1, 5000, rng.integers(0, 20)))
        lines.append(f"{rng.integers(0, 2)} " + " ".join(f"{i}:{rng.random():.5f}" for i in idx))
    p = tmp_path / "d.svm"
    p.write_text("\n".join(lines) + "\n")
    src = SVMLightSource(p, batch_size=128, dtype="float64")
    paths = write_shards(src, str(tmp_path / "sh" / "x-{i}.h5"), examples_per_shard=256)
    assert len(paths) == 3
    X, y = load_svmlight(p, dtype="float64")
    Xf, yf = load_svmlight(p, dtype="float64")
    fs = FileSource(str(tmp_path / "sh" / "x-{i}.h5"), batch_size=1000)
    mb = next(iter(fs.prefetch(2)))
    np.testing.assert_array_equal(mb.X.toarray(), X.toarray())
    np.testing.assert_array_equal(mb.y, y)
    assert mb.w is None and Xf.shape == X.shape and np.array_equal(yf, y)


def _good_arrays():
    return {
        "data": np.array([1.0, 2.0, 3.0]),
        "indices": np.array([0, 2, 1], dtype=np.int32),
        "indptr": np.array([0, 2, 2, 3], dtype=np.int32),
        "shape": np.array([4, 3]),
        "y": np.array([0.0, 1.0, 1.0]),
    }


_BROKEN = [
    ({"indptr": np.array([0, 2, 3], dtype=np.int32)}, "indptr has shape"),
    ({"data": np.array([1.0, 2.0])}, "must both have"),
    ({"y": np.array([0.0, 1.0])}, "y has shape"),
    ({"indices": np.array([2, 0, 1], dtype=np.int32)}, "unsorted or duplicate"),
    ({"indices": np.array([0, 9, 1], dtype=np.int32)}, "out of range"),
    ({"shape": np.array([5, 3])}, "has 5 features"),
    ({"data": np.array([1, 2, 3])}, "dtype int64"),
]


@pytest.mark.parametrize("fmt", ["npz", "h5"])
@pytest.mark.parametrize("change,msg", _BROKEN)
def test_broken_shard_is_named(tmp_path, fmt, change, msg):
    for i in range(3):
        a = _good_arrays()
        if i == 1:
            a.update(change)
        path = tmp_path / f"p{i}.{fmt}"
        if fmt == "npz":
            np.savez(path, **a)
        else:
            with h5py.File(path, "w") as h:
                for k, v in a.items():
                    if k == "shape":
                        h.attrs["shape"] = v
                    else:
                        h[k] = v
    with pytest.raises(ValueError, match=rf"shard .*p1\.{fmt}.*{msg}"):
        list(FileSource(str(tmp_path / f"p{{i}}.{fmt}"), batch_size=2))


def test_missing_and_bad_arguments(tmp_path, data):
    X, y, w = data
    with pytest.raises(ValueError, match="no shard found"):
        FileSource(str(tmp_path / "none-{i}.npz"))
    write_shards(MatSource(X, y), str(tmp_path / "q{i}.npz"), examples_per_shard=500)
    with pytest.raises(ValueError, match=r"q3\.npz does not exist"):
        FileSource(str(tmp_path / "q{i}.npz"), n_shards=4)
    with pytest.raises(ValueError, match="pattern"):
        FileSource(str(tmp_path / "q.npz"))
    with pytest.raises(ValueError, match="format"):
        FileSource(str(tmp_path / "q{i}.bin"))
    with pytest.raises(ValueError, match="seed"):
        FileSource(str(tmp_path / "q{i}.npz"), order="random")
    with pytest.raises(ValueError, match="n_readers"):
        FileSource(str(tmp_path / "q{i}.npz"), n_readers=0)
    with pytest.raises(TypeError, match="DataSource"):
        write_shards(X, str(tmp_path / "r{i}.npz"))


def test_shard_writer_blocks_and_read_shard(tmp_path, data):
    X, y, w = data
    with ShardWriter(str(tmp_path / "w-{i}.npz"), examples_per_shard=400) as wr:
        for a in range(0, X.shape[1], 333):
            b = min(a + 333, X.shape[1])
            wr.write(X[:, a:b].tocsc(), y[a:b], w[a:b])
    assert [read_shard(p)[0].shape[1] for p in wr.paths] == [400, 400, 237]
    Xr, yr, wr_ = read_shard(wr.paths[1])
    np.testing.assert_array_equal(Xr.toarray(), X[:, 400:800].toarray())
    np.testing.assert_array_equal(wr_, w[400:800])
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize("fmt", ["npz", "h5"])
def test_compressed_shards_fallback_path(tmp_path, data, fmt):
    """Compressed shards are read by np.load / h5py (the fast path handles stored ones)."""
    X, y, w = data
    write_shards(MatSource(X, y, w), str(tmp_path / f"z-{{i}}.{fmt}"), examples_per_shard=400,
                 compress=True)
    mb = next(iter(FileSource(str(tmp_path / f"z-{{i}}.{fmt}"), batch_size=5000)))
    assert (mb.X != X).nnz == 0 and np.array_equal(mb.y, y) and np.array_equal(mb.w, w)


@pytest.mark.parametrize("fmt", ["npz", "h5"])
def test_truncated_shard_is_named(tmp_path, data, fmt):
    X, y, w = data
    paths = write_shards(MatSource(X, y, w), str(tmp_path / f"t-{{i}}.{fmt}"),
                         examples_per_shard=400)
    src = FileSource(str(tmp_path / f"t-{{i}}.{fmt}"), batch_size=100)
    assert sum(mb.n_examples for mb in src) == X.shape[1]  # a pass caches the shard layouts
    raw = open(paths[1], "rb").read()
    # cut inside the arrays (past the headers, before the end)
    open(paths[1], "wb").write(raw[: len(raw) * 2 // 3])
    with pytest.raises(ValueError, match=rf"shard .*t-1\.{fmt}"):
        list(src)


@pytest.mark.parametrize("size", [1, 3, 12])
def test_ranks_read_disjoint_shards_covering_the_conversion(tmp_path, data, size):
    """rank/size: each rank of a distributed job reads shards i with i % size == rank; the
    ranks together read every example once (a rank may get no shard)."""
    X, y, w = data
    pattern = str(tmp_path / "part-{i:03d}.npz")
    write_shards(MatSource(X, y, w, batch_size=77), pattern, examples_per_shard=100)  # 11
    seen = []
    for rank in range(size):
        src = FileSource(pattern, rank=rank, size=size, batch_size=64)
        assert src.shard_ids == list(range(rank, 11, size))
        assert src.n_examples == sum(min(100, 1037 - 100 * i) for i in src.shard_ids)
        assert src.n_features == X.shape[0]
        seen += [mb.w for mb in src]  # the weights: distinct random values, one per example
        src.close()
    np.testing.assert_array_equal(np.sort(np.concatenate(seen)), np.sort(w))
    with pytest.raises(ValueError, match="'rank' = 3 must be below 'size' = 3"):
        FileSource(pattern, rank=3, size=3)


class _CyclicGarbage:
    """A reference cycle whose finalizer runs Python code: the garbage collector, triggered by
    the AST constructor's allocations, runs it there and lets another thread in."""

    def __init__(self):
        self.me = self

    def __del__(self):
        sum(range(20))


@pytest.mark.parametrize("compress", [False, True])
def test_shard_headers_parse_in_many_threads(tmp_path, data, compress):
    """Regression: numpy parses .npy headers with ast.literal_eval, and on CPython 3.11 reader
    threads parsing at the same time failed with "SystemError: AST constructor recursion depth
    mismatch" (seen in a CI run of test_broken_shard_is_named; CPython gh-106905).  Eight
    threads parse one shard's headers (the layout of the fast path, or np.load's fallback for
    compressed shards) with thread switches forced as often as possible."""
    import io
    import sys
    from concurrent.futures import ThreadPoolExecutor

    from roofline.datasources import _shards

    X, y, w = data
    paths = write_shards(MatSource(X[:, :50], y[:50], w[:50]), str(tmp_path / "h-{i}.npz"),
                         examples_per_shard=50, compress=compress)
    raw = open(paths[0], "rb").read()

    def work(_):
        for _ in range(600):
            _CyclicGarbage()
            f = io.BytesIO(raw)
            if compress:
                assert _shards._read_npz(f, "h-0.npz")["shape"][1] == 50
            else:
                assert _shards._npz_layout(f, "h-0.npz") is not None

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(work, range(8)))
    finally:
        sys.setswitchinterval(old)
