"""SVMLightSource and the numba svmlight parser, against sklearn.datasets.load_svmlight_file."""

import gzip
import logging
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.datasets import load_svmlight_file

from roofline.datasources import SVMLightSource, load_svmlight
from tests._helpers import powerlaw_matrix

_HC = [HealthCheck.function_scoped_fixture]

# -- generated files ------------------------------------------------------------------------------

_ws = st.sampled_from([" ", "  ", "\t", " \t "])


@st.composite
def _number(draw):
    kind = draw(st.sampled_from(["int", "repr", "sci", "g", "short", "tiny_huge", "dot"]))
    if kind == "int":
        return str(draw(st.integers(-(10**6), 10**6)))
    if kind == "dot":
        return draw(st.sampled_from(["1.", ".5", "-.25", "+3.", "0.", "-0", "007.5"]))
    x = draw(st.floats(allow_nan=False, allow_infinity=False, width=64,
                       min_value=-1e300, max_value=1e300))
    if kind == "repr":
        return repr(x)
    if kind == "sci":
        return f"{x:.{draw(st.integers(0, 20))}e}".replace("e", draw(st.sampled_from("eE")))
    if kind == "g":
        return f"{x:.{draw(st.integers(1, 17))}g}"
    if kind == "tiny_huge":
        return f"{draw(st.integers(1, 999))}e{draw(st.integers(-330, 300))}"
    return f"{x:.3f}"


@st.composite
def _line(draw, zero_based):
    if draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from(["", "   ", "# just a comment", "\t# c"]))
    base = 0 if zero_based else 1
    huge = draw(st.booleans())
    hi = 2**31 - 2 if huge else 60
    idx = sorted(draw(st.sets(st.integers(base, hi), max_size=8)))
    parts = [draw(_number())]
    if draw(st.integers(0, 5)) == 0:
        parts.append(f"qid:{draw(st.integers(0, 99))}")
    parts += [f"{i}:{draw(_number())}" for i in idx]
    s = ""
    for k, p in enumerate(parts):
        s += (draw(_ws) if k else draw(st.sampled_from(["", " "]))) + p
    if draw(st.booleans()):
        s += draw(_ws)
    if draw(st.integers(0, 4)) == 0:
        s += draw(st.sampled_from(["# tail comment", "#", " # é unicode ok"]))
    return s


@st.composite
def _svmlight_text(draw):
    zero_based = draw(st.booleans())
    lines = draw(st.lists(_line(zero_based), min_size=0, max_size=25))
    eol = draw(st.sampled_from(["\n", "\r\n"]))
    text = eol.join(lines)
    if lines and draw(st.booleans()):
        text += eol
    return zero_based, text.encode("utf-8")


def _sk(path, dtype, zero_based, n_features=None):
    X, y = load_svmlight_file(str(path), dtype=dtype, zero_based=zero_based,
                              n_features=n_features)
    return X.tocsr(), y


def _assert_same(X, y, Xs, ys, dtype):
    """Our X (features x examples, CSC) against sklearn's (examples x features, CSR)."""
    assert X.format == "csc"
    assert X.shape == Xs.shape[::-1]
    assert X.dtype == dtype and y.dtype == dtype
    np.testing.assert_array_equal(X.indptr, Xs.indptr)
    np.testing.assert_array_equal(X.indices, Xs.indices)
    np.testing.assert_array_equal(X.data, Xs.data)  # bit-exact: same correctly rounded parse
    np.testing.assert_array_equal(y, ys.astype(dtype))


@settings(max_examples=60, deadline=None, suppress_health_check=_HC)
@given(case=_svmlight_text(), dtype=st.sampled_from([np.float32, np.float64]),
       gz=st.booleans(), chunk=st.sampled_from([1024, 1 << 20]),
       auto=st.booleans())
def test_agrees_with_sklearn(tmp_path, case, dtype, gz, chunk, auto):
    zero_based, text = case
    path = tmp_path / ("f.svm.gz" if gz else "f.svm")
    path.write_bytes(gzip.compress(text) if gz else text)
    zb_sk = "auto" if auto else zero_based
    Xs, ys = _sk(path, np.float64, zb_sk)
    if Xs.shape[0] == 0:  # sklearn returns an empty dataset; we name the file
        with pytest.raises(ValueError, match="f.svm(.gz)?: no example"):
            load_svmlight(path, dtype=dtype, zero_based=zb_sk, chunk_bytes=chunk)
        return
    big = np.finfo(np.float32).max
    if dtype == np.float32 and (np.abs(Xs.data) > big).any() | (np.abs(ys) > big).any():
        # sklearn silently stores inf; we refuse
        with pytest.raises(ValueError, match="non-finite value"):
            load_svmlight(path, dtype=dtype, zero_based=zb_sk, chunk_bytes=chunk)
        return
    Xs, ys = _sk(path, dtype, zb_sk)
    X, y = load_svmlight(path, dtype=dtype, zero_based=zb_sk, chunk_bytes=chunk)
    if Xs.nnz == 0 and Xs.shape[1] == 1:
        # sklearn reports 1 feature for a file without any feature; we report 0
        assert X.shape == (0, Xs.shape[0])
        np.testing.assert_array_equal(y, ys.astype(dtype))
        return
    _assert_same(X, y, Xs, ys, dtype)


@settings(max_examples=15, deadline=None, suppress_health_check=_HC)
@given(case=_svmlight_text(), bs=st.integers(1, 7))
def test_streamed_batches_concatenate_to_sklearn(tmp_path, case, bs):
    """Known n_features + explicit base: single streaming pass, minibatches in order."""
    zero_based, text = case
    path = tmp_path / "f.svm"
    path.write_bytes(text)
    n_f = 2**31 - 1
    Xs, ys = _sk(path, np.float64, zero_based, n_features=n_f)
    src = SVMLightSource(path, n_features=n_f, zero_based=zero_based, dtype="float64",
                         batch_size=bs, chunk_bytes=1024)
    assert src.n_examples is None  # not scanned
    if Xs.shape[0] == 0:  # no example: an error naming the file at the end of the pass
        with pytest.raises(ValueError, match="f.svm: no example"):
            list(src)
        return
    batches = list(src)
    assert src.n_examples == Xs.shape[0]  # known after a full pass
    assert all(b.n_examples == bs for b in batches[:-1])
    assert [b.start for b in batches] == list(range(0, bs * len(batches), bs))
    if batches:
        assert 1 <= batches[-1].n_examples <= bs
        from roofline.datasources._base import _hstack

        X = _hstack([b.X for b in batches])
        y = np.concatenate([b.y for b in batches])
    else:
        X, y = load_svmlight(path, n_features=n_f, zero_based=zero_based, dtype="float64")
    _assert_same(X, y, Xs, ys, np.float64)


def _power_law_file(path, n_rows, seed, gz=False):
    """SVMlight text (one-based indices over 100,000 features) of a power-law matrix."""
    X = powerlaw_matrix(100_000, n_rows, 6, dtype=np.float64, seed=seed, signed=True)
    y = np.random.default_rng([seed, 2]).integers(0, 2, n_rows)
    ip, ix, v = X.indptr, X.indices, X.data
    lines = [f"{y[j]} " + " ".join(f"{i + 1}:{x:.6g}" for i, x in
                                   zip(ix[ip[j]:ip[j + 1]], v[ip[j]:ip[j + 1]], strict=True))
             for j in range(n_rows)]
    data = ("\n".join(lines) + "\n").encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_parallel_chunks_power_law(tmp_path, dtype):
    """Several chunks, each split across 2 threads: equal to sklearn, every row once."""
    path = _power_law_file(tmp_path / "p.svm", 6000, seed=1)
    src = SVMLightSource(path, dtype=dtype, chunk_bytes=64 << 10, n_threads=2,
                         batch_size=1000)
    src._parallel_min = 0
    from roofline.datasources._base import _hstack

    batches = list(src)
    src.close()
    assert len(batches) == 6 and src.n_examples == 6000
    X, y = _hstack([b.X for b in batches]), np.concatenate([b.y for b in batches])
    Xs, ys = _sk(path, dtype, "auto")
    _assert_same(X, y, Xs, ys, dtype)
    # a second pass yields the same
    X2 = _hstack([b.X for b in src])
    np.testing.assert_array_equal(X2.data, X.data)


def test_several_files_one_stream(tmp_path):
    a = _power_law_file(tmp_path / "a.svm", 300, seed=2)
    b = _power_law_file(tmp_path / "b.svm.gz", 200, seed=3, gz=True)
    X, y = load_svmlight([a, b], zero_based=False, n_features=100_000, dtype="float64")
    Xa, ya = _sk(a, np.float64, False, 100_000)
    Xb, yb = _sk(b, np.float64, False, 100_000)
    assert X.shape == (100_000, 500)
    assert (X[:, :300] != Xa.T).nnz == 0 and (X[:, 300:] != Xb.T).nnz == 0
    np.testing.assert_array_equal(y, np.concatenate([ya, yb]))


@pytest.mark.parametrize("text", [b"", b"\n\n", b"# a comment\n  # another\n\n",
                                  b"# no newline at the end"])
@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("scan", [True, False])
def test_empty_or_comment_only_file_is_an_error_naming_it(tmp_path, text, gz, scan):
    """No example in the input is an error naming the file, at construction when the files
    are scanned, else on the first pass, never an empty dataset."""
    p = tmp_path / ("empty.svm.gz" if gz else "empty.svm")
    p.write_bytes(gzip.compress(text) if gz else text)
    kw = {} if scan else dict(n_features=10, zero_based=False)
    with pytest.raises(ValueError, match=rf"{p.name}: no example .*empty or holds only "
                                         "comments"):
        load_svmlight(str(p), **kw)
    if not scan:
        src = SVMLightSource(str(p), **kw)
        with pytest.raises(ValueError, match=rf"{p.name}: no example"):
            list(src)
        src.close()


def test_one_empty_file_among_several_warns_naming_it(tmp_path, caplog):
    """An empty part file among non-empty ones (as Spark writes them) is read as nothing, with
    a warning naming it."""
    a = _power_law_file(tmp_path / "a.svm", 50, seed=2)
    e = tmp_path / "part-00001.svm"
    e.write_bytes(b"# header only\n")
    with caplog.at_level(logging.WARNING, logger="roofline.datasources._svmlight"):
        X, y = load_svmlight([a, str(e)], zero_based=False, n_features=100_000)
    assert X.shape == (100_000, 50) and y.shape == (50,)
    assert "part-00001.svm: no example" in caplog.text


def test_qid_ignored_with_note(tmp_path, caplog):
    p = tmp_path / "q.svm"
    p.write_bytes(b"1 qid:1 1:1\n0 qid:2 2:2\n1 3:3\n")
    with caplog.at_level(logging.INFO, logger="roofline.datasources._svmlight"):
        X, y = load_svmlight(p, zero_based=False, n_features=3, dtype="float64")
    np.testing.assert_array_equal(X.toarray(), np.diag([1.0, 2.0, 3.0]))
    assert any("qid on 2 lines" in r.getMessage() for r in caplog.records)


# -- bad input -----------------------------------------------------------------------------------

_BAD = [
    (b"1 1:1\nabc 1:2\n", 2, "label is not a number"),
    (b"1 1:1\n1:2 3:4\n", 2, "missing label"),
    (b"1 1:1\n1 2:x\n", 2, "value is not a number"),
    (b"1 1:1\n\n1 x:2\n", 3, "index is not an integer"),
    (b"1 3:1 2:1\n", 1, "strictly increasing"),
    (b"1 2:1 2:1\n", 1, "strictly increasing"),
    (b"1 1:1\n1 0:1\n", 2, "0 in one-based"),
    (b"1 -3:1\n", 1, "negative"),
    (b"1 1:1\n0 7:1\n", 2, "out of range"),
    (b"1 1:1\n1 5\n", 2, "no ':'"),
    (b"1 1:nan\n", 1, "non-finite"),
    (b"1 1:1e999\n", 1, "non-finite"),
    (b"inf 1:1\n", 1, "non-finite"),
    (b"1 1:1\n1 1:2 \xff\n", 2, "UTF-8"),
    (b"1 1:1 # caf\xe9\n", 1, "UTF-8"),
]


@pytest.mark.parametrize("text,line,what", _BAD)
def test_bad_line_names_file_and_line(tmp_path, text, line, what):
    p = tmp_path / "bad.svm"
    p.write_bytes(text)
    with pytest.raises(ValueError, match=rf"bad\.svm, line {line}: .*{what}"):
        load_svmlight(p, zero_based=False, n_features=5)


@pytest.mark.parametrize("text,line,what", _BAD)
def test_skip_mode_counts_and_keeps_good_lines(tmp_path, caplog, text, line, what):
    good = b"0 1:1.5 4:2\n"
    p = tmp_path / "bad.svm"
    p.write_bytes(good + text + good)
    with caplog.at_level(logging.WARNING, logger="roofline.datasources._svmlight"):
        src = SVMLightSource(p, zero_based=False, n_features=5, on_error="skip",
                             dtype="float64", batch_size=100)
        X = next(iter(src)).X
    n_bad = 1
    n_good_in_text = text.count(b"\n") - n_bad - text.count(b"\n\n")
    assert src.n_skipped == n_bad
    assert X.shape[1] == 2 + n_good_in_text
    np.testing.assert_array_equal(X[:, 0].toarray().ravel(), [1.5, 0, 0, 2, 0])
    np.testing.assert_array_equal(X[:, -1].toarray().ravel(), [1.5, 0, 0, 2, 0])
    msgs = [r.getMessage() for r in caplog.records]
    assert any(f"line {line + 1}" in m and what.split()[0] in m for m in msgs)
    assert any("skipped 1 malformed lines" in m for m in msgs)


@pytest.mark.parametrize("readahead", [True, False])
def test_truncated_gzip(tmp_path, readahead):
    text = b"".join(b"%d 1:%d 2:0.5\n" % (i % 2, i) for i in range(20000))
    z = gzip.compress(text)
    p = tmp_path / "t.svm.gz"
    p.write_bytes(z[: len(z) // 2])
    with pytest.raises(ValueError, match=r"t\.svm\.gz: gzip stream is truncated.*at line \d+"):
        load_svmlight(p, zero_based=False, n_features=2, readahead=readahead,
                      chunk_bytes=4096)


def test_readahead_equal_and_no_leaked_threads(tmp_path):
    import threading
    import time

    path = _power_law_file(tmp_path / "r.svm.gz", 3000, seed=4, gz=True)
    a = SVMLightSource(path, n_features=100_000, zero_based=False, chunk_bytes=16 << 10,
                       batch_size=256, readahead=True)
    b = SVMLightSource(path, n_features=100_000, zero_based=False, chunk_bytes=16 << 10,
                       batch_size=256, readahead=False)
    for x, y in zip(a, b, strict=True):
        assert (x.X != y.X).nnz == 0 and np.array_equal(x.y, y.y)
    it = iter(a)
    next(it)
    it.close()  # stop mid-file: the chunk reader thread must stop too
    t0 = time.monotonic()
    while [t for t in threading.enumerate() if t.name == "roofline-prefetch"]:
        assert time.monotonic() - t0 < 10, "reader thread leaked"
        time.sleep(0.01)


def test_corrupt_gzip(tmp_path):
    z = bytearray(gzip.compress(b"1 1:1\n" * 1000))
    z[20:40] = b"\x00" * 20
    p = tmp_path / "c.svm.gz"
    p.write_bytes(bytes(z))
    with pytest.raises(ValueError, match=r"c\.svm\.gz: corrupt gzip"):
        load_svmlight(p, zero_based=False, n_features=2)


def test_n_features_too_small(tmp_path):
    p = tmp_path / "s.svm"
    p.write_bytes(b"1 1:1 9:2\n")
    with pytest.raises(ValueError, match="n_features=4"):
        SVMLightSource(p, n_features=4)


@pytest.mark.parametrize(
    "kw,name",
    [({"zero_based": "yes"}, "zero_based"), ({"on_error": "ignore"}, "on_error"),
     ({"dtype": "int32"}, "dtype"), ({"n_threads": 0}, "n_threads"),
     ({"batch_size": 0}, "batch_size"), ({"n_features": -1}, "n_features")],
)
def test_bad_options(tmp_path, kw, name):
    p = tmp_path / "s.svm"
    p.write_bytes(b"1 1:1\n")
    with pytest.raises(ValueError, match=name):
        SVMLightSource(p, **kw)


def test_heart_scale_if_present():
    """The real libsvm example file shipped by Debian's liblinear-tools, when installed."""
    cands = [
        "/usr/share/doc/liblinear-tools/examples/heart_scale",
        "/usr/share/doc/liblinear-tools/examples/heart_scale.gz",
    ]
    path = next((c for c in cands if os.path.exists(c)), None)
    if path is None:
        pytest.skip("liblinear-tools examples (heart_scale) not installed")
    X, y = load_svmlight(path, dtype="float64")
    Xs, ys = _sk(path, np.float64, "auto")
    assert X.shape == (13, 270)
    _assert_same(X, y, Xs, ys, np.float64)
