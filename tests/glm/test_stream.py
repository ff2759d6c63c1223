"""Out-of-core SDCA from a DataSource with a prefetched next chunk (glm/_stream.py)."""

import threading

import numpy as np
import pytest
import scipy.sparse as sp

from roofline.datasources import DataSource, DataSourceOptions, MatSource, Minibatch
from roofline.glm import fit_glm, fit_glm_stream


def _data(n=400, d=20, seed=0):
    rng = np.random.default_rng(seed)
    X = sp.random(d, n, density=0.3, format="csc", random_state=rng)
    X.data = rng.normal(size=X.nnz)
    y = (rng.random(n) < 1 / (1 + np.exp(-(X.T @ rng.normal(size=d))))).astype(int)
    return X, y


@pytest.mark.parametrize("loss", ["logistic", "hinge", "squared"])
@pytest.mark.parametrize("batch_size", [400, 96])
def test_stream_reaches_the_in_memory_optimum(loss, batch_size):
    X, y = _data()
    yy = y if loss != "squared" else X.T @ np.arange(20.0) / 20
    # the streamed dual regularises its intercept (a constant feature): so does the reference
    ref = fit_glm(X, yy, loss=loss, alpha=0.05, dual=True, tol=1e-12, random_state=0,
                     max_iter=5000, intercept_scaling=1.0)
    res = fit_glm_stream(MatSource(X, yy, batch_size=batch_size), loss=loss, alpha=0.05,
                            tol=1e-9, max_iter=2000, random_state=0)
    assert res.converged and res.relative_gap <= 1e-9
    assert res.objective[-1] == pytest.approx(ref.objective[-1], rel=1e-8)
    np.testing.assert_allclose(res.coef, ref.coef, atol=1e-3)
    assert res.intercept == pytest.approx(ref.intercept, abs=1e-3)


def test_prefetch_changes_nothing_but_timing():
    X, y = _data(seed=1)
    runs = [fit_glm_stream(MatSource(X, y, batch_size=64), loss="logistic", alpha=0.05,
                              max_iter=4, tol=1e-15, random_state=3, prefetch_depth=depth)
            for depth in (0, 1, 3)]
    for r in runs[1:]:
        np.testing.assert_array_equal(r.coef, runs[0].coef)
        np.testing.assert_array_equal(r.objective, runs[0].objective)


class _Handshake(DataSource):
    """A source that flags, on its first pass, each chunk as soon as it is produced."""

    def __init__(self, X, y, batch_size):
        self.X, self.y = X, y
        self.opts = DataSourceOptions(batch_size=batch_size)
        self.n_features, self.n_examples = X.shape
        self.starts = list(range(0, X.shape[1], batch_size))
        self.produced = [threading.Event() for _ in self.starts]
        self.passes = 0

    def _batches(self):
        self.passes += 1
        for k, s in enumerate(self.starts):
            e = min(s + self.batch_size, self.n_examples)
            if self.passes == 1:
                self.produced[k].set()
            yield Minibatch(self.X[:, s:e].tocsc(), self.y[s:e], None, s)


@pytest.mark.parametrize("depth", [0, 1])
def test_next_chunk_is_produced_while_the_current_one_trains(depth):
    """Before training on chunk k starts, chunk k+1 is being produced (double buffer); without
    prefetch it cannot be (the handshake times out)."""
    X, y = _data(seed=2)
    src = _Handshake(X, y, batch_size=100)
    overlapped = []

    def on_chunk(it, k):
        if it == 1 and k + 1 < len(src.starts):
            overlapped.append(src.produced[k + 1].wait(timeout=5.0 if depth else 0.3))

    fit_glm_stream(src, loss="logistic", alpha=0.05, max_iter=1, prefetch_depth=depth,
                      on_chunk=on_chunk)
    assert len(overlapped) == 3
    assert all(overlapped) if depth else not any(overlapped)


def test_stream_bad_input():
    X, y = _data(n=100)
    bad = y.astype(float) + 1
    with pytest.raises(ValueError, match="chunk 0 y must hold binary labels"):
        fit_glm_stream(MatSource(X, bad, batch_size=40), loss="logistic", alpha=0.1)
    with pytest.raises(ValueError, match="has no labels"):
        fit_glm_stream(MatSource(X, None, batch_size=40), loss="logistic", alpha=0.1)
    with pytest.raises(ValueError, match="single class"):
        fit_glm_stream(MatSource(X, np.ones(100), batch_size=40), loss="logistic", alpha=0.1)
    with pytest.raises(ValueError, match="empty"):
        fit_glm_stream(MatSource(sp.csc_matrix((5, 0)), np.zeros(0)), loss="squared",
                          alpha=0.1)
    Xn = X.copy()
    Xn.data[-1] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        fit_glm_stream(MatSource(Xn, y, batch_size=40), loss="logistic", alpha=0.1,
                          prefetch_depth=0)
