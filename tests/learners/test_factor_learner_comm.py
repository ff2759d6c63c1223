"""Data-parallel minibatch training of the factor models (``Learner(..., comm=, sync_every=)``:
k-means, NMF, LDA and MF replicas combined by :class:`FactorSync`'s per-model rules)."""

import math

import numpy as np
import pytest
import scipy.sparse as sp

from roofline import comm as rcomm
from roofline.datasources import MatSource
from roofline.learners import (
    LDA,
    ADAGrad,
    KMeansModel,
    Learner,
    MFModel,
    ModelUpdate,
    NMFModel,
    beta_divergence,
)
from roofline.learners._parallel import FactorSync

# -- data: planted structure, examples as columns --------------------------------------------


def _blobs(n=6000, d=20, k=10, seed=0):
    rng = np.random.default_rng(seed)
    C = rng.normal(0, 4, (k, d))
    lab = rng.integers(0, k, n)
    return np.asfortranarray((C[lab] + rng.normal(0, 1, (n, d))).T.astype(np.float64))


def _low_rank_nonneg(n=1200, v=150, r=4, density=0.15, seed=1):
    """Sparse non-negative ``v x n`` (CSC): a rank-r non-negative product at random entries."""
    rng = np.random.default_rng(seed)
    W, H = rng.gamma(1.0, 1.0, (v, r)), rng.gamma(1.0, 1.0, (r, n))
    mask = sp.random(v, n, density=density, random_state=seed, format="csc")
    mask.data[:] = 1.0
    return sp.csc_matrix(mask.multiply(W @ H))


def _documents(D=900, K=4, V=120, length=60, seed=2):
    """Words x documents CSC (float32) drawn from K block topics."""
    rng = np.random.default_rng(seed)
    beta = np.full((K, V), 0.02)
    for t in range(K):
        beta[t, t * (V // K):(t + 1) * (V // K)] += rng.gamma(2.0, 1.0, V // K)
    beta /= beta.sum(axis=1, keepdims=True)
    theta = rng.dirichlet(np.full(K, 0.3), D)
    X = np.vstack([rng.multinomial(n, theta[d] @ beta)
                   for d, n in enumerate(rng.poisson(length, D))])
    return sp.csc_matrix(X.T.astype(np.float32))


def _ratings(n_users=1200, n_items=150, r=4, seed=3):
    """Items x users CSC (float64) of a rank-r rating matrix plus noise; users rate 5 to 40
    items (so that the ranks' minibatches hold different numbers of ratings)."""
    rng = np.random.default_rng(seed)
    U, V = rng.normal(0, 1, (n_users, r)), rng.normal(0, 1, (n_items, r))
    rows, cols = [], []
    for u in range(n_users):
        n = int(rng.integers(5, 41))
        rows.append(rng.choice(n_items, n, replace=False))
        cols.append(np.full(n, u))
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    vals = 3.0 + (U[cols] * V[rows]).sum(axis=1) + rng.normal(0, 0.1, rows.size)
    return sp.csc_matrix((vals, (rows, cols)), shape=(n_items, n_users))


DATA = {}


def data(name):
    if name not in DATA:
        DATA[name] = {"kmeans": _blobs, "nmf": _low_rank_nonneg, "lda": _documents,
                      "mf": _ratings}[name]()
    return DATA[name]


# -- one training run per model, returning its objective ---------------------------------------


def _train(name, comm=None, **kw):
    X = data(name)
    held = None
    if name == "kmeans":
        model, opt, passes, bs = KMeansModel(n_clusters=10, dtype="float64"), ModelUpdate(), 2, 200
    elif name == "nmf":
        model, opt, passes, bs = (NMFModel(n_components=4, dtype="float64"), ModelUpdate(), 3,
                                  100)
    elif name == "lda":
        X, held = X[:, :750], X[:, 750:]
        model = LDA(n_components=4, total_samples=750, learning_offset=2.0)
        opt, passes, bs = ModelUpdate(), 8, 50
    else:
        X, held = X[:, :1000], X[:, 1000:]
        model = MFModel(factors=4, regularization=0.02, dtype="float64")
        opt, passes, bs = ADAGrad(lr=0.3, fused=False), 40, 50
    L = Learner(MatSource(X, batch_size=bs), model, opt, n_passes=passes, progress=False,
                heldout=None if held is None else MatSource(held, batch_size=250), comm=comm,
                **kw)
    res = L.train()
    if name == "kmeans":
        objective = float(model.assign(X)[1].sum())  # inertia
    elif name == "nmf":
        objective = float(beta_divergence(X, model.components, model.transform(X), 2))
    elif name == "lda":
        objective = math.exp(L.evaluate()["loss"])  # held-out perplexity (per-word bound)
    else:
        objective = L.evaluate()["loss"]  # held-out users: squared error + penalty, per rating
    arrays = {k: np.array(v, copy=True) for k, v in model.parameters().items()}
    return {"objective": objective, "arrays": arrays, "n_examples": res.n_examples,
            "model": model, "sync": None if L._sync is None else dict(L._sync.stats),
            "trace": res.trace}


BASE = {}


def base(name):
    if name not in BASE:
        BASE[name] = _train(name)
    return BASE[name]


#: relative tolerance of the data-parallel objective against the single process's (K <= 4,
#: sync_every=2; measured gaps are well inside these)
TOL = {"kmeans": 0.01, "nmf": 0.03, "lda": 0.015, "mf": 0.05}
NAMES = ["kmeans", "nmf", "lda", "mf"]


@pytest.mark.parametrize("name", NAMES)
def test_one_rank_equals_plain_learner(name):
    b = base(name)
    (one,) = rcomm.run(lambda c: _train(name, c, sync_every=3), 1, backend="threads")
    assert one["objective"] == b["objective"]
    for k, v in b["arrays"].items():
        np.testing.assert_array_equal(one["arrays"][k], v)


@pytest.mark.parametrize("k", [2, 4])
@pytest.mark.parametrize("name", NAMES)
def test_reaches_single_process_objective_replicas_identical(name, k):
    b = base(name)
    outs = rcomm.run(lambda c: _train(name, c, sync_every=2), k, backend="threads")
    for o in outs[1:]:  # bit-identical replicas after training
        for key, v in outs[0]["arrays"].items():
            np.testing.assert_array_equal(o["arrays"][key], v)
    got, ref = outs[0]["objective"], b["objective"]
    print(f"{name} K={k}: {got:.6g} vs {ref:.6g} ({(got - ref) / ref:+.2%})")
    assert abs(got - ref) <= TOL[name] * abs(ref), (name, k, got, ref)
    assert sum(o["n_examples"] for o in outs) == b["n_examples"]  # every example, once a pass
    assert outs[0]["sync"]["syncs"] > 0
    # the held-out loss is recorded as for a GLM, the same on every rank
    if name in ("lda", "mf"):
        assert outs[0]["trace"][-1]["heldout_loss"] == outs[1]["trace"][-1]["heldout_loss"]
    # the counters count over the ranks
    if name == "lda":  # documents over the ranks; steps: one per averaged step of a replica
        assert outs[0]["model"].documents_seen == b["model"].documents_seen
        steps = b["model"].n_batch_iter
        assert steps / k <= outs[0]["model"].n_batch_iter <= steps / k + 8 * 2
    if name == "mf":  # mu: the running mean of every rank's ratings, as in one process
        assert outs[0]["model"].mu == pytest.approx(b["model"].mu, rel=1e-12)


def test_kmeans_counts_sum_over_the_ranks():
    """Without reassignment, the centers' counts total every example absorbed, over all
    ranks and passes (the per-center learning rates of one process)."""
    X = data("kmeans")

    def work(c):
        m = KMeansModel(n_clusters=10, dtype="float64", reassignment_ratio=0.0)
        Learner(MatSource(X, batch_size=200), m, ModelUpdate(), n_passes=2, progress=False,
                comm=c, sync_every=3).train()
        return m.counts.copy()

    outs = rcomm.run(work, 2, backend="threads")
    assert outs[0].sum() == pytest.approx(2 * X.shape[1], rel=1e-12)
    np.testing.assert_array_equal(outs[0], outs[1])


def test_kmeans_rule_weights_centers_by_counts():
    """The combine rule on hand-made replicas: every rank starts from the same centre, then
    each absorbs a different weight; the result is the running mean of every example."""
    rng = np.random.default_rng(5)
    c0, n0 = rng.normal(size=(3, 4)), np.array([2.0, 1.0, 5.0])
    sums = [rng.normal(size=(3, 4)) for _ in range(2)]
    adds = [np.array([1.0, 0.0, 3.0]), np.array([4.0, 0.0, 1.0])]

    def work(c):
        m = KMeansModel(n_clusters=3, dtype="float64")
        m.init(4)
        m.set_parameters(c0, n0)
        s = FactorSync(c, m)
        n1 = n0 + adds[c.rank]
        m.set_parameters((c0 * n0[:, None] + sums[c.rank]) / n1[:, None], n1)
        s.sync(done=True)
        return m.centers.copy(), m.counts.copy()

    outs = rcomm.run(work, 2, backend="threads")
    n = n0 + adds[0] + adds[1]
    want = (c0 * n0[:, None] + sums[0] + sums[1]) / n[:, None]
    np.testing.assert_allclose(outs[0][0], want, rtol=1e-12)
    np.testing.assert_array_equal(outs[0][1], n)
    np.testing.assert_array_equal(outs[0][0], outs[1][0])


def test_lda_rule_averages_lambda_and_counts_steps_and_documents():
    rng = np.random.default_rng(6)
    lam0 = rng.gamma(2.0, 1.0, (3, 8))
    lam = [rng.gamma(2.0, 1.0, (3, 8)) for _ in range(2)]

    def work(c):
        m = LDA(n_components=3, dtype="float64")
        m.init(8)
        m.set_parameters(lam0, n_batch_iter=5)
        m.documents_seen = 7
        s = FactorSync(c, m)
        m.set_parameters(lam[c.rank], n_batch_iter=5 + 2 + 2 * c.rank)
        m.documents_seen = 7 + 10 * (c.rank + 1)
        s.sync(done=True)
        return m.components_.copy(), m.n_batch_iter, m.documents_seen

    outs = rcomm.run(work, 2, backend="threads")
    np.testing.assert_allclose(outs[0][0], (lam[0] + lam[1]) / 2, rtol=1e-12)
    assert outs[0][1] == outs[1][1] == 5 + 3  # the mean of 2 and 4 steps
    assert outs[0][2] == outs[1][2] == 7 + 30  # documents: summed


@pytest.mark.slow
@pytest.mark.multiprocess
def test_tcp_processes_kmeans_and_lda():
    for name in ("kmeans", "lda"):
        outs = rcomm.run(_tcp_train, 2, backend="tcp", timeout=120, args=(name,))
        for key, v in outs[0][1].items():
            np.testing.assert_array_equal(outs[1][1][key], v)
        assert abs(outs[0][0] - base(name)["objective"]) <= TOL[name] * base(name)["objective"]


def _tcp_train(c, name):
    o = _train(name, c, sync_every=2)
    return o["objective"], o["arrays"]


class _Opaque:
    """A model the learner cannot average (no coef/intercept, not a factor model)."""

    initialized, n_features, device = True, 20, "cpu"

    def update(self, batch, cache=None):
        return 0.0, 1.0


def test_errors():
    X = data("kmeans")

    def work(c):
        src = MatSource(X, batch_size=200)
        with pytest.raises(TypeError, match="cannot be averaged"):
            Learner(src, _Opaque(), ModelUpdate(), comm=c, progress=False).train()
        for kw in ({"elastic": 0.5}, {"sync": "sparse"}, {"sync_schedule": 8}):
            with pytest.raises(ValueError, match=next(iter(kw))):
                Learner(src, KMeansModel(n_clusters=3), ModelUpdate(), comm=c, progress=False,
                        **kw).train()
        with pytest.raises(TypeError, match="FactorSync"):
            FactorSync(c, _Opaque())
        return True

    assert rcomm.run(work, 2, backend="threads") == [True, True]


def test_checkpoints_per_rank_and_reload(tmp_path):
    """Each rank writes its own checkpoint; the learner reloads a factor model's arrays."""
    X = data("nmf")
    ck = str(tmp_path / "nmf.npz")

    def work(c):
        m = NMFModel(n_components=4, dtype="float64")
        L = Learner(MatSource(X, batch_size=100), m, ModelUpdate(), n_passes=1, progress=False,
                    comm=c, sync_every=2, checkpoint=ck)
        L.train()
        return m.components.copy()

    outs = rcomm.run(work, 2, backend="threads")
    for r in (0, 1):
        other = NMFModel(n_components=4, dtype="float64")
        L = Learner(MatSource(X, batch_size=100), other, ModelUpdate(), progress=False)
        L.load_checkpoint(f"{ck}.rank{r}")
        np.testing.assert_array_equal(other.components, outs[r])
