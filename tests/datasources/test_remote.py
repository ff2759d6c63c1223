"""Remote reads through fsspec (datasources/_io.py): HTTP with Range requests, memory://.

Remote streams must equal local reads of the same bytes, and must be read in ranges, never by
downloading the whole file first.
"""

import gzip

import fsspec
import numpy as np
import pytest

from roofline.datasources import (
    CriteoSource,
    FileSource,
    MatSource,
    SVMLightSource,
    load_svmlight,
    make_criteo_like,
    write_shards,
)
from roofline.datasources._base import _hstack

pytest.importorskip("aiohttp", reason="fsspec's http:// filesystem needs aiohttp")


def _svm_bytes(n, seed):
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(n):
        idx = np.unique(rng.integers(1, 3000, rng.integers(1, 30)))
        lines.append(f"{rng.integers(0, 2)} " + " ".join(f"{i}:{rng.random():.6f}" for i in idx))
    return ("\n".join(lines) + "\n").encode()


def _same_stream(a, b):
    a, b = list(a), list(b)
    assert len(a) == len(b) > 0
    for x, y in zip(a, b, strict=True):
        assert x.start == y.start
        assert (x.X != y.X).nnz == 0 and x.X.shape == y.X.shape
        np.testing.assert_array_equal(x.y, y.y)


@pytest.mark.parametrize("gz", [False, True])
def test_http_svmlight_streams_by_ranges(http_server, tmp_path, gz):
    base, root, log = http_server
    raw = _svm_bytes(12_000, seed=1)
    data = gzip.compress(raw) if gz else raw
    name = "d.svm.gz" if gz else "d.svm"
    (root / name).write_bytes(data)
    (tmp_path / name).write_bytes(data)
    kw = dict(n_features=3000, zero_based=False, batch_size=1000, chunk_bytes=64 << 10)
    local = SVMLightSource(tmp_path / name, **kw)
    remote = SVMLightSource(f"{base}/{name}", **kw)
    _same_stream(remote, local)
    gets = [r for r in log if r[0] == "GET"]
    size = len(data)
    block = 1 << 18  # the range size used for chunk_bytes below 256 KiB
    assert size > 4 * block
    # every GET was a range request for a small part of the file, and the file was read ~once
    assert gets and all(r[2] is not None and r[2].startswith("bytes=") for r in gets)
    assert max(r[3] for r in gets) <= block + (64 << 10)  # readahead: block + one read
    assert len(gets) >= size // block
    assert sum(r[3] for r in gets) <= 1.5 * size + block


def test_http_errors_name_the_url(http_server):
    base, root, _ = http_server
    (root / "bad.svm").write_bytes(b"1 1:1\n1 2:x\n")
    with pytest.raises(ValueError, match=r"http://127\.0\.0\.1:\d+/bad\.svm, line 2"):
        load_svmlight(f"{base}/bad.svm", n_features=3, zero_based=False)
    with pytest.raises(FileNotFoundError):
        load_svmlight(f"{base}/missing.svm", n_features=3, zero_based=False)


@pytest.mark.parametrize("fmt", ["npz", "h5"])
def test_http_shards(http_server, data, fmt):
    base, root, log = http_server
    X, y, w = data
    write_shards(MatSource(X, y, w, batch_size=300), f"p-{{i}}.{fmt}",
                 dirs=[root / "a", root / "b"], examples_per_shard=250)
    remote = FileSource(f"p-{{i}}.{fmt}", dirs=[f"{base}/a", f"{base}/b"], batch_size=128)
    local = FileSource(f"p-{{i}}.{fmt}", dirs=[root / "a", root / "b"], batch_size=128)
    assert remote.n_examples == X.shape[1] == local.n_examples
    _same_stream(remote, local)
    # data came only through range requests (a plain GET is only the 404 probe past the end)
    assert all(r[2] is not None for r in log if r[0] == "GET" and r[3] > 0)


def test_http_criteo(http_server, tmp_path):
    base, root, _ = http_server
    make_criteo_like(3000, seed=2, path=root / "c.tsv.gz")
    kw = dict(n_bits=16, batch_size=512, chunk_bytes=32 << 10)
    _same_stream(CriteoSource(f"{base}/c.tsv.gz", **kw), CriteoSource(root / "c.tsv.gz", **kw))


def test_memory_filesystem_roundtrip(data):
    X, y, w = data
    fs = fsspec.filesystem("memory")
    with fs.open("/rt/d.svm", "wb") as f:
        f.write(_svm_bytes(500, seed=3))
    Xm, ym = load_svmlight("memory:///rt/d.svm", dtype="float64")
    with fs.open("/rt/d.svm", "rb") as f:
        Xl, yl = load_svmlight_bytes(f.read())
    assert (Xm != Xl).nnz == 0 and np.array_equal(ym, yl)
    write_shards(MatSource(X, y, w, batch_size=400), "memory:///rt/s-{i}.npz",
                 examples_per_shard=300)
    src = FileSource("memory:///rt/s-{i}.npz", batch_size=2000)
    mb = next(iter(src))
    assert (mb.X != X).nnz == 0 and np.array_equal(mb.w, w)
    fs.rm("/rt", recursive=True)


def load_svmlight_bytes(b):
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".svm") as f:
        f.write(b)
        f.flush()
        return load_svmlight(f.name, dtype="float64")


def test_prefetch_over_http(http_server):
    base, root, _ = http_server
    (root / "d.svm").write_bytes(_svm_bytes(3000, seed=4))
    src = SVMLightSource(f"{base}/d.svm", n_features=3000, zero_based=False, batch_size=256,
                         chunk_bytes=32 << 10)
    a = _hstack([mb.X for mb in src.prefetch(3)])
    b = _hstack([mb.X for mb in src])
    assert (a != b).nnz == 0
