"""Background prefetch (datasources/_prefetch.py): same stream, errors re-raised, clean stops."""

import threading
import time

import numpy as np
import pytest

from roofline.datasources import DataSource, DataSourceOptions, MatSource, Prefetch, SVMLightSource


def _same(a, b):
    assert len(a) == len(b)
    for ma, mb in zip(a, b, strict=True):
        assert ma.start == mb.start
        np.testing.assert_array_equal(ma.X.toarray(), mb.X.toarray())
        np.testing.assert_array_equal(ma.y, mb.y)


@pytest.mark.parametrize("depth", [1, 2, 5])
def test_prefetched_equals_unprefetched(data, depth):
    X, y, w = data
    src = MatSource(X, y, w, batch_size=97)
    pf = Prefetch(src, depth=depth)
    plain = list(src)
    for _ in range(2):  # two passes
        _same(list(pf), plain)
    pf.close()


def _write_svm(path, n, bad_line=None):
    lines = [f"{i % 2} {1 + i % 7}:{i}.5 9:1" for i in range(n)]
    if bad_line is not None:
        lines[bad_line - 1] = "1 3:oops"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_prefetched_svmlight_equals_unprefetched(tmp_path):
    p = _write_svm(tmp_path / "a.svm", 5000)
    src = SVMLightSource(p, n_features=9, zero_based=False, batch_size=128, chunk_bytes=4096)
    _same(list(src.prefetch(3)), list(src))


def test_worker_error_reraised_with_context(tmp_path):
    p = _write_svm(tmp_path / "bad.svm", 5000, bad_line=4000)
    src = SVMLightSource(p, n_features=9, zero_based=False, batch_size=100, chunk_bytes=4096)
    got = []
    with pytest.raises(ValueError, match=r"bad\.svm, line 4000: .*not a number") as ei:
        for mb in Prefetch(src, depth=2):
            got.append(mb)
    # everything before the chunk holding the bad line was delivered, in order
    assert len(got) >= 10 and [mb.start for mb in got] == [100 * i for i in range(len(got))]
    notes = "".join(getattr(ei.value, "__notes__", []))
    assert "prefetch thread" in notes and f"minibatch {len(got)}" in notes
    # the traceback reaches into the parser (original context kept)
    tb = ei.traceback
    assert any("_svmlight.py" in str(e.path) for e in tb)
    time.sleep(0.2)
    assert not [t for t in threading.enumerate() if t.name == "roofline-prefetch"]


class _Slow(DataSource):
    """A source that records how far it has produced (runs in the worker thread)."""

    def __init__(self, n, delay=0.0):
        self.opts = DataSourceOptions(batch_size=1)
        self.n_features, self.n_examples = 1, n
        self.produced = 0
        self.delay = delay
        self.closed = False

    def _batches(self):
        import scipy.sparse as sp

        from roofline.datasources import Minibatch

        try:
            for i in range(self.n_examples):
                time.sleep(self.delay)
                self.produced = i + 1
                yield Minibatch(sp.csc_matrix(np.ones((1, 1), np.float32)), None, None, i)
        finally:
            self.closed = True


def _wait(cond, timeout=5.0):
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            return False
        time.sleep(0.005)
    return True


def test_runs_ahead_but_bounded():
    src = _Slow(100)
    it = iter(Prefetch(src, depth=3))
    next(it)
    # the worker fills the queue while the consumer holds batch 0 ...
    assert _wait(lambda: src.produced >= 4)
    time.sleep(0.1)
    # ... and no further than depth + one in hand + one being put
    assert src.produced <= 1 + 3 + 1
    it.close()
    assert _wait(lambda: src.closed)


def test_early_break_and_close_do_not_hang():
    src = _Slow(10_000, delay=0.001)
    pf = Prefetch(src, depth=2)
    t0 = time.monotonic()
    for mb in pf:
        if mb.start == 5:
            break
    assert _wait(lambda: not [t for t in threading.enumerate() if t.name == "roofline-prefetch"])
    assert src.closed and src.produced < 100
    it = iter(pf)
    next(it)
    pf.close()
    assert _wait(lambda: not [t for t in threading.enumerate() if t.name == "roofline-prefetch"])
    assert time.monotonic() - t0 < 10


def test_bad_depth(data):
    X, y, _ = data
    with pytest.raises(ValueError, match="depth"):
        Prefetch(MatSource(X, y), depth=0)
