"""CriteoSource and the MurmurHash3 / Criteo kernels (datasources/_criteo.py, kernels/_hash.py).

Golden values come from outside the code under test: published MurmurHash3_x86_32 test vectors,
scikit-learn's independent C++ implementation (``sklearn.utils.murmurhash3_32``) and a
pure-Python transcription of the reference algorithm written here.
"""

import decimal
import gzip
import logging
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.utils import murmurhash3_32 as sk_murmur

from roofline.datasources import CRITEO_FIELDS, CriteoSource, criteo_field_seeds
from roofline.datasources._base import _hstack
from roofline.kernels import (
    criteo_int_bucket,
    log_bucket_thresholds,
    murmur3_32,
    murmur3_32_hex8,
    murmur3_32_int,
)


def _ref_murmur3_x86_32(key: bytes, seed: int) -> int:
    """Austin Appleby's MurmurHash3_x86_32, transcribed from the reference C++."""
    c1, c2, m = 0xCC9E2D51, 0x1B873593, 0xFFFFFFFF
    h = seed & m
    n = len(key)
    rotl = lambda x, r: ((x << r) | (x >> (32 - r))) & m  # noqa: E731
    for i in range(0, n - n % 4, 4):
        k = int.from_bytes(key[i : i + 4], "little")
        k = rotl((k * c1) & m, 15) * c2 & m
        h = (rotl(h ^ k, 13) * 5 + 0xE6546B64) & m
    tail = key[n - n % 4 :]
    if tail:
        k = int.from_bytes(tail, "little")
        h ^= rotl((k * c1) & m, 15) * c2 & m
    h ^= n
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & m
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & m
    return h ^ (h >> 16)


# published test vectors of MurmurHash3_x86_32 (key, seed, hash)
_VECTORS = [
    (b"", 0, 0),
    (b"", 1, 0x514E28B7),
    (b"", 0xFFFFFFFF, 0x81F16F39),
    (b"\0\0\0\0", 0, 0x2362F9DE),
    (b"aaaa", 0x9747B28C, 0x5A97808A),
    (b"a", 0x9747B28C, 0x7FA09EA6),
    (b"abc", 0, 0xB3DD93FA),
    (b"Hello, world!", 0x9747B28C, 0x24884CBA),
    (b"The quick brown fox jumps over the lazy dog", 0x9747B28C, 0x2FA826CD),
]


def _nb(key, seed):
    return int(murmur3_32(np.frombuffer(key, np.uint8) if key else np.zeros(0, np.uint8),
                          0, len(key), seed))


@pytest.mark.parametrize("key,seed,expected", _VECTORS)
def test_murmur3_published_vectors(key, seed, expected):
    assert _nb(key, seed) == expected
    assert _ref_murmur3_x86_32(key, seed) == expected


@settings(max_examples=300, deadline=None)
@given(key=st.binary(max_size=40), seed=st.integers(0, 2**32 - 1),
       ikey=st.integers(-(2**31), 2**31 - 1))
def test_murmur3_matches_independent_implementations(key, seed, ikey):
    h = _nb(key, seed)
    assert h == sk_murmur(key, seed=seed, positive=True) == _ref_murmur3_x86_32(key, seed)
    hi = int(murmur3_32_int(ikey, seed))
    assert hi == sk_murmur(np.int32(ikey), seed=seed, positive=True)
    assert hi == _ref_murmur3_x86_32(int(ikey).to_bytes(4, "little", signed=True), seed)


def test_murmur3_hex8():
    vals = np.array([0, 1, 0xDEADBEEF, 0xFFFFFFFF, 0x68FD1E64], dtype=np.uint32)
    out = np.empty(len(vals), np.uint32)
    murmur3_32_hex8(vals, 7, out)
    for v, h in zip(vals, out, strict=True):
        assert int(h) == sk_murmur(f"{int(v):08x}".encode(), seed=7, positive=True)


def _bucket(v: int) -> int:
    """3 + floor(ln(v)^2) with 50-digit decimals (independent of the kernel's threshold table)."""
    if v <= 2:
        return v
    ctx = decimal.Context(prec=50)
    return 3 + int(ctx.power(ctx.ln(decimal.Decimal(v)), 2).to_integral_value(
        rounding=decimal.ROUND_FLOOR))


def _expected_columns(line: str, n_bits: int, per_field: bool, hash_seed: int = 0):
    """Columns of one TSV line, from the documented definition, via sklearn's murmurhash."""
    fields = line.split("\t")[1:]
    mask = (1 << n_bits) - 1
    cols = []
    for f, tok in enumerate(fields):
        if tok == "":
            continue
        seed = (hash_seed + f) & 0xFFFFFFFF
        if f < 13:
            h = sk_murmur(np.int32(_bucket(int(tok))), seed=seed, positive=True)
        else:
            h = sk_murmur(tok.encode(), seed=seed, positive=True)
        cols.append((h & mask) + (f << n_bits if per_field else 0))
    u, c = np.unique(cols, return_counts=True)
    return u, c.astype(float)


_LINES = [
    "1\t1\t5\t0\t\t1382\t4\t15\t2\t181\t1\t2\t\t2\t68fd1e64\t80e26c9b\tfb936136\t7b4723c4"
    "\t25c83c98\t7e0ccccf\tde7995b8\t1f89b562\ta73ee510\ta8cd5504\tb2cb9c98\t37c9c164"
    "\t2824a5f6\t1adce6ef\t8ba8b39a\t891b62e7\te5ba7672\tf54016b9\t21ddcdc9\tb1252a9d"
    "\t07b5194c\t\t3a171ecb\tc5c50484\te8b83407\t9727dd16",
    "0\t\t-1\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t",
    "0\t" + "\t".join(["1000000000000"] * 13) + "\t" + "\t".join(["ABCDEF01"] * 26),
]


@pytest.mark.parametrize("layout", ["hashed", "per_field"])
@pytest.mark.parametrize("n_bits", [4, 18])
@pytest.mark.parametrize("hash_seed", [0, 12345])
def test_golden_columns(tmp_path, layout, n_bits, hash_seed):
    p = tmp_path / "c.tsv"
    p.write_text("\n".join(_LINES) + "\n")
    src = CriteoSource(p, n_bits=n_bits, layout=layout, hash_seed=hash_seed, dtype="float64")
    mb = next(iter(src))
    assert mb.X.shape == (src.n_features, 3)
    np.testing.assert_array_equal(mb.y, [1, 0, 0])
    for j, line in enumerate(_LINES):
        cols, counts = _expected_columns(line, n_bits, layout == "per_field", hash_seed)
        lo, hi = mb.X.indptr[j], mb.X.indptr[j + 1]
        np.testing.assert_array_equal(mb.X.indices[lo:hi], cols)
        np.testing.assert_array_equal(mb.X.data[lo:hi], counts)
    if layout == "per_field":
        blocks = src.feature_blocks()
        assert len(blocks) == 39 == len(CRITEO_FIELDS)
        # pure blocks: at most one non-zero per example in each field's column range
        for a, b in blocks:
            assert (mb.X[a:b].getnnz(axis=0) <= 1).all()
        assert src.n_features == 39 << n_bits


@pytest.mark.parametrize("seed", range(3))
def test_int_buckets_exact(seed):
    """Exact log buckets, including values next to the boundaries, against 50-digit decimals;
    v = 2416049438547 is one where float64 ln(v)**2 rounds to exactly 813."""
    rng = np.random.default_rng(seed)
    thr = log_bucket_thresholds()
    vals = [-5, -1, 0, 1, 2, 3, 4, 2416049438547, 2416049438548, 2**62]
    vals += [int(t) + d for t in rng.choice(thr[:1500], 40) for d in (-1, 0)]
    vals += [int(v) for v in rng.integers(3, 10**9, 50)]
    for v in vals:
        assert criteo_int_bucket(v, thr) == _bucket(v), v
    assert _bucket(2416049438547) == 3 + 812  # while float64 says 813
    assert math.floor(math.log(2416049438547) ** 2) == 813


def test_collision_rate_matches_expectation():
    """Distinct keys hashed into B buckets: occupied buckets ~ B (1 - (1 - 1/B)^K)."""
    B, K = 1 << 14, 20_000
    vals = np.arange(K, dtype=np.uint32) * np.uint32(2654435761)
    out = np.empty(K, np.uint32)
    for seed in (0, 17, 2**31):
        murmur3_32_hex8(vals, seed, out)
        occupied = len(np.unique(out & (B - 1)))
        q = 1 - 1 / B
        mean = B * (1 - q**K)
        var = B * q**K + B * (B - 1) * (1 - 2 / B) ** K - B**2 * q ** (2 * K)
        assert abs(occupied - mean) < 5 * math.sqrt(var), (occupied, mean, math.sqrt(var))
        # and the low bits are uniform: chi-square over 64 cells
        cnt = np.bincount(out & 63, minlength=64)
        chi2 = ((cnt - K / 64) ** 2 / (K / 64)).sum()
        assert chi2 < 120  # 63 d.o.f., p < 1e-5


def test_field_seeds():
    s = criteo_field_seeds(5)
    assert s.shape == (39,) and s[0] == 5 and s[38] == 43
    assert criteo_field_seeds(2**32 - 1)[1] == 0


_BAD = [
    ("2" + "\t" * 39, 1, "not 0 or 1"),
    ("x" + "\t" * 39, 1, "not 0 or 1"),
    ("1" + "\t" * 38, 1, "wrong number"),
    ("1" + "\t" * 40, 1, "wrong number"),
    ("1\t1.5" + "\t" * 38, 1, "integer field"),
    ("1" + "\t" * 14 + "xyz" + "\t" * 25, 1, "hexadecimal"),
    ("1" + "\t" * 14 + "é" + "\t" * 25, 1, "ASCII"),
]


@pytest.mark.parametrize("line,_n,what", _BAD)
def test_bad_lines(tmp_path, caplog, line, _n, what):
    good = "0" + "\t1" * 13 + "\tab" * 26
    p = tmp_path / "bad.tsv"
    p.write_bytes((good + "\n" + line + "\n" + good + "\n").encode())
    with pytest.raises(ValueError, match=rf"bad\.tsv, line 2: .*{what}"):
        list(CriteoSource(p, n_bits=8))
    with caplog.at_level(logging.WARNING, logger="roofline.datasources._criteo"):
        src = CriteoSource(p, n_bits=8, on_error="skip", batch_size=10)
        (mb,) = list(src)
    assert mb.n_examples == 2 and src.n_skipped == 1
    assert any("line 2" in r.getMessage() for r in caplog.records)
    assert any("skipped 1 malformed" in r.getMessage() for r in caplog.records)


def test_unlabeled_gzip_crlf_and_options(tmp_path):
    row = "\t".join(["3"] * 13 + ["0a"] * 26)
    p = tmp_path / "t.tsv.gz"
    p.write_bytes(gzip.compress(((row + "\r\n") * 5).encode()))
    (mb,) = list(CriteoSource(p, n_bits=10, has_label=False))
    assert mb.y is None and mb.n_examples == 5
    assert (mb.X.sum(axis=0) == 39).all()
    for kw, name in [({"n_bits": 0}, "n_bits"), ({"layout": "x"}, "layout"),
                     ({"hash_seed": 1.5}, "hash_seed"), ({"on_error": "no"}, "on_error")]:
        with pytest.raises(ValueError, match=name):
            CriteoSource(p, **kw)


def test_parallel_chunks_equal_serial(tmp_path):
    from roofline.datasources import make_criteo_like

    p = make_criteo_like(3000, seed=3, path=tmp_path / "c.tsv")
    a = CriteoSource(p, n_bits=16, chunk_bytes=64 << 10, n_threads=2, batch_size=700)
    a._parallel_min = 0
    b = CriteoSource(p, n_bits=16, n_threads=1, batch_size=700)
    Xa, Xb = _hstack([m.X for m in a]), _hstack([m.X for m in b])
    assert Xa.shape == (1 << 16, 3000)
    assert a.n_examples == 3000  # known after a pass
    assert (Xa != Xb).nnz == 0


@st.composite
def _criteo_line(draw):
    label = draw(st.sampled_from(["0", "1"]))
    ints = [draw(st.one_of(st.just(""), st.integers(-(10**6), 10**14).map(str)))
            for _ in range(13)]
    hexd = st.text(alphabet="0123456789abcdefABCDEF", min_size=1, max_size=16)
    cats = [draw(st.one_of(st.just(""), hexd)) for _ in range(26)]
    return "\t".join([label] + ints + cats)


@settings(max_examples=40, deadline=None)
@given(lines=st.lists(_criteo_line(), min_size=1, max_size=20),
       layout=st.sampled_from(["hashed", "per_field"]), n_bits=st.integers(1, 20),
       hash_seed=st.integers(0, 2**32 - 1))
def test_parser_matches_reference_definition(lines, layout, n_bits, hash_seed):
    import os
    import tempfile

    fd, path = tempfile.mkstemp(suffix=".tsv")
    try:
        with os.fdopen(fd, "w") as f:
            f.write("\n".join(lines) + "\n")
        src = CriteoSource(path, n_bits=n_bits, layout=layout, hash_seed=hash_seed,
                           dtype="float64", batch_size=100)
        (mb,) = list(src)
    finally:
        os.unlink(path)
    for j, line in enumerate(lines):
        cols, counts = _expected_columns(line, n_bits, layout == "per_field", hash_seed)
        lo, hi = mb.X.indptr[j], mb.X.indptr[j + 1]
        np.testing.assert_array_equal(mb.X.indices[lo:hi], cols)
        np.testing.assert_array_equal(mb.X.data[lo:hi], counts)
        assert mb.y[j] == float(line[0])
