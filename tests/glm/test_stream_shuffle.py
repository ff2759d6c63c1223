"""The shuffle across chunks of the out-of-core SDCA (glm/_stream.py, issue 35): at 30 chunks it
converges per pass within 1.5x of the in-memory dual SCD, where the per-chunk permutation of the
first version (``shuffle=0``) does not; the schedule, its determinism and bad input."""

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning

from roofline.datasources import (
    DataSource,
    DataSourceOptions,
    MatSource,
    Minibatch,
    make_criteo_like_matrix,
)
from roofline.glm import fit_glm, fit_glm_stream

FACTOR = 1.5  # the bound on passes, against the in-memory solver
N_CHUNKS = 30


def _criteo(n=3000):
    X, y = make_criteo_like_matrix(n, seed=0, n_bits=12, dtype=np.float64)
    return X.tocsc(), y


def _passes_in_memory(X, y, loss, alpha, tol, seed):
    """Full sweeps of the in-memory dual SCD to a relative duality gap of ``tol``."""
    # intercept_scaling=1: the streamed dual's regularised intercept (a constant feature)
    res = fit_glm(X, y, loss=loss, alpha=alpha, dual=True, solver="scd", tol=tol,
                     max_iter=200, random_state=seed, check_every=1, active_fraction=1.0,
                     intercept_scaling=1.0)
    assert res.converged
    return res.n_iter


def _stream(X, y, loss, alpha, tol, seed, max_iter, **kw):
    src = MatSource(X, y, batch_size=-(-X.shape[1] // N_CHUNKS))
    assert len(src) == N_CHUNKS
    return fit_glm_stream(src, loss=loss, alpha=alpha, tol=tol, max_iter=max_iter,
                             random_state=seed, cache="memory", **kw)


@pytest.mark.parametrize("loss", ["logistic", "squared"])
@pytest.mark.parametrize("tol", [1e-3, 1e-6])
def test_30_chunks_converge_within_the_factor_of_in_memory(loss, tol):
    X, y = _criteo()
    if loss == "squared":
        y = 2.0 * y - 1.0 + 0.1 * np.random.default_rng(1).normal(size=y.size)
    alpha = 1.0 / (0.3 * X.shape[1])
    for seed in (0, 1):
        ref = _passes_in_memory(X, y, loss, alpha, tol, seed)
        budget = int(np.floor(FACTOR * ref))
        res = _stream(X, y, loss, alpha, tol, seed, max_iter=budget)
        assert res.converged, (ref, res.n_iter, res.relative_gap)
        assert res.n_iter <= FACTOR * ref


def test_the_per_chunk_permutation_misses_the_factor():
    """The first version's schedule (the source's order, each chunk's examples permuted on
    their own) is what the test above rejects: at 30 chunks it needs more than 3x the passes."""
    X, y = _criteo()
    alpha = 1.0 / (0.3 * X.shape[1])
    ref = _passes_in_memory(X, y, "logistic", alpha, 1e-6, 0)
    with pytest.warns(ConvergenceWarning, match="scd-stream reached max_iter"):
        res = _stream(X, y, "logistic", alpha, 1e-6, 0, max_iter=3 * ref, shuffle=0)
    assert not res.converged


def test_the_chunk_order_is_drawn_per_pass():
    """Pass 1 streams the source in order; each later pass visits every chunk once, in a fresh
    random order, the same for the same seed."""
    X, y = _criteo(600)
    seen = []

    def fit(seed):
        seen.clear()
        fit_glm_stream(MatSource(X, y, batch_size=60), loss="logistic", alpha=1e-2, max_iter=4,
                          tol=1e-15, random_state=seed, shuffle=3, cache="memory",
                          on_chunk=lambda it, k: seen.append((it, k)))
        return [[k for it, k in seen if it == p] for p in (1, 2, 3, 4)]

    with pytest.warns(ConvergenceWarning):  # max_iter
        orders = fit(0)
    assert orders[0] == list(range(10))
    for o in orders[1:]:
        assert sorted(o) == list(range(10))
    assert len({tuple(o) for o in orders[1:]}) == 3
    with pytest.warns(ConvergenceWarning):
        assert fit(0) == orders


@pytest.mark.parametrize("depth", [0, 2])
def test_disk_cache_and_memory_cache_give_the_same_iterates(depth):
    X, y = _criteo(800)
    runs = []
    for cache in ("disk", "memory"):
        with pytest.warns(ConvergenceWarning):  # max_iter
            runs.append(fit_glm_stream(MatSource(X, y, batch_size=70), loss="logistic",
                                          alpha=1e-3, max_iter=5, tol=1e-15, random_state=4,
                                          cache=cache, prefetch_depth=depth))
    np.testing.assert_array_equal(runs[0].coef, runs[1].coef)
    np.testing.assert_array_equal(runs[0].objective, runs[1].objective)
    np.testing.assert_array_equal(runs[0].dual_coef, runs[1].dual_coef)
    assert runs[0].info["n_chunks"] == 12 and runs[0].info["cache"] == "disk"


def test_a_group_of_all_chunks_reaches_the_optimum_of_one_chunk():
    X, y = _criteo(1000)
    kw = dict(loss="hinge", alpha=1e-3, tol=1e-9, max_iter=500, random_state=0)
    one = fit_glm_stream(MatSource(X, y, batch_size=1000), **kw)
    many = fit_glm_stream(MatSource(X, y, batch_size=90), shuffle=12, cache="memory", **kw)
    assert one.converged and many.converged
    assert many.objective[-1] == pytest.approx(one.objective[-1], rel=1e-8)


class _Chunks(DataSource):
    """Chunks given as a list per pass (``passes[p]`` for pass ``p``, the last one repeated)."""

    def __init__(self, passes, n_features, n_examples=None):
        self.passes = passes
        self.opts = DataSourceOptions(batch_size=10)
        self.n_features, self.n_examples = n_features, n_examples
        self.count = 0

    def _batches(self):
        chunks = self.passes[min(self.count, len(self.passes) - 1)]
        self.count += 1
        start = 0
        for X, y in chunks:
            yield Minibatch(X, y, None, start)
            start += X.shape[1]


def _chunk(d, m, seed):
    rng = np.random.default_rng(seed)
    X = sp.random(d, m, density=0.5, format="csc", random_state=rng)
    return X, (np.arange(m) % 2).astype(float)


def test_bad_chunks_are_named():
    good = [_chunk(6, 10, s) for s in range(3)]
    bad = good[:2] + [_chunk(7, 10, 9)]
    with pytest.raises(ValueError, match=r"chunk 2 of .* has 7 features, but the source declares "
                                         r"n_features=6"):
        fit_glm_stream(_Chunks([bad], 6, 30), loss="logistic", alpha=0.1)
    with pytest.raises(ValueError, match=r"covered 30 examples, but the source declares "
                                         r"n_examples=40"):
        fit_glm_stream(_Chunks([good], 6, 40), loss="logistic", alpha=0.1)
    with pytest.raises(ValueError, match=r"past the source's n_examples=25"):
        fit_glm_stream(_Chunks([good], 6, 25), loss="logistic", alpha=0.1)
    # shuffle=0 re-reads the source (for each pass and each check; a counting pass first:
    # n_examples is None), and a chunk that changed size is named
    other = good[:1] + [_chunk(6, 9, 5)] + good[2:]
    with pytest.raises(ValueError, match=r"chunk 1 of .* has 9 examples in pass 2 but 10 in "
                                         r"the first pass"):
        fit_glm_stream(_Chunks([good, good, good, other], 6), loss="logistic", alpha=0.1, shuffle=0)
    with pytest.raises(ValueError, match=r"the check after pass 1 of .* gave 2 chunks, the "
                                         r"first pass 3"):
        fit_glm_stream(_Chunks([good, good, good[:2]], 6), loss="logistic", alpha=0.1, shuffle=0)


def test_weighted_chunks_are_refused():
    X, y = _criteo(100)
    w = np.ones(100)
    w[70] = 2.0
    with pytest.raises(ValueError, match=r"chunk 1 of .* has example weights"):
        fit_glm_stream(MatSource(X, y, w, batch_size=50), loss="logistic", alpha=0.1)
    res = fit_glm_stream(MatSource(X, y, np.ones(100), batch_size=50), loss="logistic",
                            alpha=0.1)  # unit weights are no weights
    assert res.converged


@pytest.mark.parametrize("kw,match", [
    (dict(shuffle=-1), "shuffle must be a non-negative integer"),
    (dict(shuffle=1.5), "shuffle must be a non-negative integer"),
    (dict(shuffle=True), "shuffle must be a non-negative integer"),
    (dict(cache="ram"), r"cache must be one of \('disk', 'memory'\), got 'ram'"),
    (dict(prefetch_depth=-1), "prefetch_depth must be a non-negative integer"),
])
def test_bad_arguments(kw, match):
    X, y = _criteo(100)
    with pytest.raises(ValueError, match=match):
        fit_glm_stream(MatSource(X, y, batch_size=50), loss="logistic", alpha=0.1, **kw)
