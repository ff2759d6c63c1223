"""Faults in the inputs of the sources (issue 22): corrupt, missing and stale shards, integer
overflow, corrupt gzip, CR-only line endings, bad weights.  Every fault is a real file on disk;
each must be an error naming the file (and line), or a warning, never silently wrong data."""

import gzip
import json
import logging

import h5py
import numpy as np
import pytest
import scipy.sparse as sp

from roofline.datasources import (
    CriteoSource,
    FileSource,
    MatSource,
    ShardWriter,
    load_svmlight,
    make_criteo_like,
    write_shards,
)


def _matrix(n, seed=0, n_features=50, dtype=np.float32):
    rng = np.random.default_rng(seed)
    X = sp.random(n_features, n, density=0.1, format="csc", random_state=rng, dtype=dtype)
    X.data[:] = rng.uniform(0.5, 1.5, X.nnz)  # data sum ~ nnz: a corrupt value stands out
    y = rng.integers(0, 2, n).astype(dtype)
    return X, y


def _flip_inside(path, needle, n=64):
    """Flip ``n`` bytes of ``path`` where the bytes ``needle`` (an array's raw bytes) lie."""
    raw = bytearray(path.read_bytes())
    at = raw.find(needle)
    assert at > 0, "array bytes not found in the shard"
    for k in range(at, at + n):
        raw[k] ^= 0x5A
    path.write_bytes(bytes(raw))


# -- 1. corrupt shards ------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["npz", "h5"])
@pytest.mark.parametrize("cached", [False, True])
def test_corrupt_shard_is_an_error_naming_it(tmp_path, fmt, cached):
    X, y = _matrix(3000)
    pattern = str(tmp_path / f"part-{{i:03d}}.{fmt}")
    paths = write_shards(MatSource(X, y), pattern, examples_per_shard=1000)
    src = FileSource(pattern, batch_size=500, validate=True)
    if cached:  # a first pass caches the shard layouts (plain reads at known offsets after it)
        assert sum(mb.n_examples for mb in src) == 3000
    shard1 = X[:, 1000:2000].tocsc()
    _flip_inside(tmp_path / f"part-001.{fmt}", shard1.data[10:40].tobytes())
    with pytest.raises(ValueError, match=rf"shard .*part-001\.{fmt}.*corrupt"):
        list(FileSource(pattern, batch_size=500) if not cached else src)
    assert len(paths) == 3


def test_corrupt_index_bytes_are_caught_before_validation(tmp_path):
    """Flipped bytes in indptr are reported as corruption, not as a structure error."""
    X, y = _matrix(2000, seed=1)
    pattern = str(tmp_path / "s-{i}.npz")
    write_shards(MatSource(X, y), pattern, examples_per_shard=1000)
    _flip_inside(tmp_path / "s-0.npz", X.indptr[100:200].astype(np.int32).tobytes(), n=8)
    with pytest.raises(ValueError, match=r"shard .*s-0\.npz: corrupt: zip member indptr"):
        list(FileSource(pattern, batch_size=4000))


# -- 2. missing and stale shards ---------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["npz", "h5"])
def test_missing_shard_is_refused(tmp_path, fmt):
    X, y = _matrix(3000)
    pattern = str(tmp_path / f"part-{{i:03d}}.{fmt}")
    write_shards(MatSource(X, y), pattern, examples_per_shard=1000)
    (tmp_path / f"part-001.{fmt}").unlink()
    with pytest.raises(ValueError, match=rf"shard .*part-001\.{fmt} is missing.*lists 3 shards"):
        FileSource(pattern)


def test_reconversion_into_a_used_directory_reads_only_the_new_data(tmp_path):
    X_old, y_old = _matrix(10_000, seed=1)
    X_new, y_new = _matrix(4_000, seed=2)
    pattern = "part-{i:03d}.npz"
    write_shards(MatSource(X_old, y_old), pattern, dirs=tmp_path, examples_per_shard=1000)
    write_shards(MatSource(X_new, y_new), pattern, dirs=tmp_path, examples_per_shard=1000)
    assert (tmp_path / "part-009.npz").exists()  # the old shards are still there
    src = FileSource(pattern, dirs=tmp_path, batch_size=10_000)
    assert src.n_examples == 4000 and len(src.paths) == 4
    mb = next(iter(src))
    assert mb.n_examples == 4000
    assert (mb.X != X_new).nnz == 0 and np.array_equal(mb.y, y_new)


@pytest.mark.parametrize("fmt", ["npz", "h5"])
def test_stale_shard_with_a_matching_name_is_refused(tmp_path, fmt):
    """An interrupted conversion overwrote shard 0; the manifest (and shards 1, 2) are from the
    earlier one: shard 0 is stale although its name is right."""
    X, y = _matrix(3000, seed=3)
    pattern = str(tmp_path / f"p{{i}}.{fmt}")
    write_shards(MatSource(X, y), pattern, examples_per_shard=1000)
    X2, y2 = _matrix(1500, seed=4)
    with pytest.raises(RuntimeError, match="interrupted"), \
            ShardWriter(pattern, examples_per_shard=1000) as wr:
        wr.write(X2, y2)  # writes shard 0 (1000 examples), keeps 500 pending
        raise RuntimeError("interrupted")
    with pytest.raises(ValueError, match=rf"shard .*p0\.{fmt}: stale"):
        FileSource(pattern)


def test_manifest_is_json_written_last_with_counts_and_checksums(tmp_path):
    X, y = _matrix(2500, seed=5)
    pattern = "x-{i:02d}.h5"
    dirs = [tmp_path / "a", tmp_path / "b"]
    paths = write_shards(MatSource(X, y), pattern, dirs=dirs, examples_per_shard=1000)
    m = json.loads((tmp_path / "a" / "x-manifest.h5.json").read_text())
    assert [r["name"] for r in m["shards"]] == ["x-00.h5", "x-01.h5", "x-02.h5"]
    assert [r["n_examples"] for r in m["shards"]] == [1000, 1000, 500]
    assert [r["nnz"] for r in m["shards"]] == [X[:, a:a + 1000].nnz for a in (0, 1000, 2000)]
    assert m["n_examples"] == 2500 and m["nnz"] == X.nnz and m["n_features"] == 50
    assert not list(tmp_path.rglob("*.tmp"))
    for p, r in zip(paths, m["shards"], strict=True):
        with h5py.File(p) as h:
            assert h.attrs["conversion_id"] == m["conversion_id"]
            assert h["data"].fletcher32 and h["indices"].fletcher32
        assert set(r["crc32"]) == {"data", "indices", "indptr", "y"}


def test_no_manifest_warns_with_the_shard_count(tmp_path, caplog):
    X, y = _matrix(900, seed=6)
    for i in range(3):  # hand-made shards, no manifest
        B = X[:, 300 * i:300 * (i + 1)].tocsc()
        np.savez(tmp_path / f"h{i}.npz", data=B.data, indices=B.indices, indptr=B.indptr,
                 shape=np.array(B.shape), y=y[300 * i:300 * (i + 1)])
    with caplog.at_level(logging.WARNING, logger="roofline.datasources"):
        src = FileSource(str(tmp_path / "h{i}.npz"), batch_size=1000)
    assert src.n_examples == 900
    assert "no manifest" in caplog.text and "found 3 shards" in caplog.text
    (tmp_path / "h1.npz").unlink()  # a gap, then more shards: refused
    with pytest.raises(ValueError, match=r"shard .*h1\.npz is missing but .*h2\.npz exists"):
        FileSource(str(tmp_path / "h{i}.npz"))


# -- 9. integer overflow in text --------------------------------------------------------------


def test_svmlight_index_overflow_is_an_error(tmp_path):
    p = tmp_path / "big.svm"
    p.write_bytes(b"1 3:1\n0 9223372036854775807:2\n")  # int64's maximum: read exactly
    X, _ = load_svmlight(p)
    assert X.shape[0] == 9223372036854775807 and X.indices[-1] == 9223372036854775806
    p.write_bytes(b"1 3:1\n0 92233720368547758070:2\n")  # 20 digits: overflows
    with pytest.raises(ValueError, match=r"big\.svm, line 2: a feature index overflows"):
        load_svmlight(p)
    with pytest.raises(ValueError, match=r"big\.svm, line 2: a feature index overflows"):
        load_svmlight(p, n_features=10, zero_based=False)


def test_criteo_integer_overflow_says_so(tmp_path):
    line = "1\t" + "\t".join(["1"] * 13) + "\t" + "\t".join(["a1b2"] * 26) + "\n"
    bad = line.replace("1\t1\t", "1\t99999999999999999999\t", 1)
    p = tmp_path / "c.tsv"
    p.write_text(line + bad)
    with pytest.raises(ValueError, match=r"c\.tsv, line 2: an integer field overflows"):
        list(CriteoSource(p, n_bits=8))
    p.write_text(line + line.replace("1\t1\t", "1\t-9223372036854775807\t", 1))
    assert sum(mb.n_examples for mb in CriteoSource(p, n_bits=8)) == 2  # fits int64


# -- weaker ones --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["svmlight", "criteo"])
def test_corrupt_gzip_is_reported_as_corrupt_gzip(tmp_path, kind):
    """Stored (level 0) deflate blocks: the corrupted bytes decompress into garbage that fails
    to parse before the CRC-32 at the member's end is reached."""
    if kind == "svmlight":
        text = b"1 1:1\n" * 100_000
        bad_from, bad_to = b"1 1:1\n1 1:1\n", b"1 1:1\n1 1:x\n"
    else:
        text = make_criteo_like(3000, seed=1)
        bad_from = text[text.index(b"\t") : text.index(b"\t") + 2]
        bad_to = b"\t#"
    z = bytearray(gzip.compress(text, compresslevel=0))
    at = z.find(bad_from)
    z[at : at + len(bad_from)] = bad_to
    p = tmp_path / "c.gz"
    p.write_bytes(bytes(z))
    with pytest.raises(ValueError, match=r"c\.gz: corrupt gzip stream"):
        if kind == "svmlight":
            load_svmlight(p, n_features=2, zero_based=False, chunk_bytes=4096)
        else:
            list(CriteoSource(p, n_bits=8, chunk_bytes=4096))


def test_cr_only_line_endings_are_named(tmp_path):
    p = tmp_path / "mac.svm"
    p.write_bytes(b"1 1:1\n1 3:1\r0 2:1\r")
    with pytest.raises(ValueError, match=r"mac\.svm, line 2: the file uses CR-only line endings"):
        load_svmlight(p, n_features=5, zero_based=False)
    line = "1\t" + "\t".join(["1"] * 13) + "\t" + "\t".join(["a1b2"] * 26)
    q = tmp_path / "mac.tsv"
    q.write_text(line + "\r" + line + "\r", newline="")
    with pytest.raises(ValueError, match=r"mac\.tsv, line 1: the file uses CR-only line endings"):
        list(CriteoSource(q, n_bits=8))
    q.write_text(line + "\r\n" + line + "\r\n", newline="")  # CRLF stays accepted
    assert sum(mb.n_examples for mb in CriteoSource(q, n_bits=8)) == 2


def test_negative_weights_are_refused(tmp_path):
    X, y = _matrix(100, seed=7)
    w = np.ones(100, dtype=np.float32)
    w[17] = -0.5
    with pytest.raises(ValueError, match=r"w must hold finite non-negative.*w\[17\] = -0\.5"):
        MatSource(X, y, w)
    w[17] = np.nan
    with pytest.raises(ValueError, match=r"w\[17\] = nan"):
        MatSource(X, y, w)
    B = X.tocsc()
    w[17] = -1.0
    np.savez(tmp_path / "n0.npz", data=B.data, indices=B.indices, indptr=B.indptr,
             shape=np.array(B.shape), w=w)
    with pytest.raises(ValueError, match=r"shard .*n0\.npz: w must hold finite non-negative"):
        list(FileSource(str(tmp_path / "n{i}.npz")))


# -- issue 16: one helper stitches parsed blocks -----------------------------------------------


def test_stitch_csc_joins_blocks_column_wise():
    from roofline.datasources._text import stitch_csc

    rng = np.random.default_rng(8)
    blocks = [sp.random(20, n, density=0.3, format="csc", random_state=rng) for n in (3, 0, 5)]
    indptr, indices, data = stitch_csc([(b.indptr, b.indices, b.data) for b in blocks])
    ref = sp.hstack(blocks, format="csc")
    np.testing.assert_array_equal(indptr, ref.indptr)
    np.testing.assert_array_equal(indices, ref.indices)
    np.testing.assert_array_equal(data, ref.data)
    one = blocks[0]
    p1, i1, d1 = stitch_csc([(one.indptr, one.indices, one.data)])
    assert i1 is one.indices and d1 is one.data and np.array_equal(p1, one.indptr)
    p0, i0, d0 = stitch_csc([])
    assert p0.tolist() == [0] and len(i0) == len(d0) == 0
