"""Sources streaming from a real HDFS (NameNode + DataNode started by the fixture) through
fsspec + hdfs-native: remote streams equal local reads of the same bytes."""

import gzip

import fsspec
import numpy as np
import pytest

from roofline.datasources import (
    CriteoSource,
    FileSource,
    MatSource,
    SVMLightSource,
    make_criteo_like,
    write_shards,
)

pytestmark = pytest.mark.slow


def _put(url, data: bytes):
    with fsspec.open(url, "wb") as f:
        f.write(data)


def _same(a, b):
    a, b = list(a), list(b)
    assert len(a) == len(b) > 0
    for x, y in zip(a, b, strict=True):
        assert x.start == y.start and x.X.shape == y.X.shape and (x.X != y.X).nnz == 0
        np.testing.assert_array_equal(x.y, y.y)


def test_hdfs_svmlight_and_criteo(hdfs_cluster, tmp_path):
    rng = np.random.default_rng(0)
    lines = [f"{rng.integers(0, 2)} " + " ".join(
        f"{i}:{rng.random():.5f}" for i in np.unique(rng.integers(1, 4000, 15)))
        for _ in range(20_000)]
    raw = ("\n".join(lines) + "\n").encode()
    for name, data in (("d.svm", raw), ("d.svm.gz", gzip.compress(raw))):
        (tmp_path / name).write_bytes(data)
        _put(f"{hdfs_cluster.url}/in/{name}", data)
        kw = dict(n_features=4000, zero_based=False, batch_size=2048, chunk_bytes=256 << 10)
        _same(SVMLightSource(f"{hdfs_cluster.url}/in/{name}", **kw).prefetch(2),
              SVMLightSource(tmp_path / name, **kw))
    p = make_criteo_like(5000, seed=1, path=tmp_path / "c.tsv")
    _put(f"{hdfs_cluster.url}/in/c.tsv", open(p, "rb").read())
    _same(CriteoSource(f"{hdfs_cluster.url}/in/c.tsv", n_bits=18, chunk_bytes=128 << 10),
          CriteoSource(p, n_bits=18, chunk_bytes=128 << 10))


@pytest.mark.parametrize("fmt", ["npz", "h5"])
def test_hdfs_striped_shards(hdfs_cluster, data, fmt):
    X, y, w = data
    dirs = [f"{hdfs_cluster.url}/shards-{fmt}/d0", f"{hdfs_cluster.url}/shards-{fmt}/d1"]
    paths = write_shards(MatSource(X, y, w, batch_size=500), f"s-{{i:03d}}.{fmt}", dirs=dirs,
                         examples_per_shard=200)
    assert len(paths) == 6 and paths[1].startswith(dirs[1])
    src = FileSource(f"s-{{i:03d}}.{fmt}", dirs=dirs, batch_size=100, order="random", seed=2)
    assert src.n_examples == X.shape[1]
    ids = []
    for mb in src.prefetch(2):
        ids.append(mb.w)
    got = np.concatenate(ids)
    np.testing.assert_array_equal(np.sort(got), np.sort(w))  # every example exactly once
    _same(FileSource(f"s-{{i:03d}}.{fmt}", dirs=dirs, batch_size=128),
          MatSource(X, y, w, batch_size=128))
