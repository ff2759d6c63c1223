"""LDA (issue 36): online and batch variational Bayes against scikit-learn on the same data and
the same draws, planted topics recovered (online, batch and the SAME sampler), the fused E-step
against the primitives' E-step, held-out perplexity in a Learner, distributed batch VB equal to
the single-process run, bad input."""

import math

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import linear_sum_assignment
from sklearn.decomposition import LatentDirichletAllocation as SkLDA

from roofline import gmat
from roofline.comm import run
from roofline.datasources import MatSource, Minibatch
from roofline.learners import Learner, ModelUpdate
from roofline.learners._checkpoint import save_checkpoint
from roofline.learners._lda import LDA, LatentDirichletAllocation


def planted(K=4, V=120, D=300, length=80, seed=0, doc_alpha=0.3, words_per_topic=None):
    """``(X rows-as-documents CSR float64, beta (K, V))``: each topic puts its mass on its own
    block of words (plus a little everywhere), documents drawn from the LDA generative model."""
    rng = np.random.default_rng(seed)
    beta = np.full((K, V), 0.02)
    block = V // K if words_per_topic is None else words_per_topic
    for k in range(K):
        beta[k, k * block:(k + 1) * block] += rng.gamma(2.0, 1.0, block)
    beta /= beta.sum(axis=1, keepdims=True)
    theta = rng.dirichlet(np.full(K, doc_alpha), D)
    lengths = rng.poisson(length, D)
    X = np.vstack([rng.multinomial(n, theta[d] @ beta) for d, n in enumerate(lengths)])
    return sp.csr_matrix(X.astype(np.float64)), beta


def matched_tv(est_topics, beta):
    """Largest total-variation distance between planted and estimated topics after the best
    (Hungarian) matching."""
    tv = 0.5 * np.abs(beta[:, None, :] - est_topics[None, :, :]).sum(axis=2)
    r, c = linear_sum_assignment(tv)
    return float(tv[r, c].max())


def columns(X, dtype=np.float64):
    """Rows-as-documents CSR to the learners' CSC words x documents."""
    Xr = sp.csr_matrix(X, dtype=dtype)
    Xr.sort_indices()
    return sp.csc_matrix((Xr.data, Xr.indices, Xr.indptr), shape=(Xr.shape[1], Xr.shape[0]))


# --- against scikit-learn: same data, same random draws ------------------------------------------

@pytest.mark.parametrize("method", ["batch", "online"])
def test_fit_equals_scikit_learn_with_the_same_draws(method):
    X, _ = planted(D=200, seed=1)
    kw = dict(n_components=4, learning_method=method, max_iter=4, batch_size=50)
    sk = SkLDA(random_state=0, **kw).fit(X)
    ours = LatentDirichletAllocation(random_state=np.random.RandomState(0), **kw).fit(X)
    # the E-steps stop documents at the same iterations: only summation order differs
    np.testing.assert_allclose(ours.components_, sk.components_, rtol=1e-6, atol=1e-8)
    assert ours.bound_ == pytest.approx(sk.bound_, rel=1e-8)
    assert ours.score(X) == pytest.approx(sk.score(X), rel=1e-8)
    assert ours.perplexity(X) == pytest.approx(sk.perplexity(X), rel=1e-8)
    assert ours.perplexity(X, sub_sampling=True) == pytest.approx(
        sk.perplexity(X, sub_sampling=True), rel=1e-8)
    np.testing.assert_allclose(ours.transform(X), sk.transform(X), atol=1e-7)
    # a document near the E-step's tolerance may stop one iteration apart
    np.testing.assert_allclose(ours.transform(X, normalize=False),
                               sk.transform(X, normalize=False), rtol=1e-4)
    assert ours.n_batch_iter_ == sk.n_batch_iter_


def test_partial_fit_equals_scikit_learn():
    X, _ = planted(D=150, seed=2)
    kw = dict(n_components=4, batch_size=40, total_samples=1000)
    sk = SkLDA(random_state=3, **kw)
    ours = LatentDirichletAllocation(random_state=np.random.RandomState(3), **kw)
    for part in (X[:90], X[90:]):
        sk.partial_fit(part)
        ours.partial_fit(part)
    np.testing.assert_allclose(ours.components_, sk.components_, rtol=1e-6)
    assert ours.perplexity(X) == pytest.approx(sk.perplexity(X), rel=1e-9)


def test_float32_matches_float64():
    X, _ = planted(D=150, seed=4)
    kw = dict(n_components=4, max_iter=3, random_state=5)
    p64 = LatentDirichletAllocation(dtype="float64", **kw).fit(X).perplexity(X)
    p32 = LatentDirichletAllocation(dtype="float32", **kw).fit(X).perplexity(X)
    assert p32 == pytest.approx(p64, rel=1e-4)


# --- the two E-steps -----------------------------------------------------------------------------

def test_fused_e_step_equals_the_primitives_e_step():
    X, _ = planted(D=120, seed=6)
    Xc = columns(X)
    a, b = LDA(n_components=4, dtype="float64", e_step="fused", seed=1), \
        LDA(n_components=4, dtype="float64", e_step="primitives", seed=1)
    a.init(Xc.shape[0])
    b.init(Xc.shape[0])
    ga, Sa = a.e_step(Xc, random_init=True, sstats=True)
    gb, Sb = b.e_step(Xc, random_init=True, sstats=True)
    np.testing.assert_allclose(ga, gb, rtol=1e-9)
    np.testing.assert_allclose(Sa, Sb, rtol=1e-9)
    assert a.last_estep["iterations"] == b.last_estep["iterations"]
    # sufficient statistics: every word's counts are spread over the topics
    np.testing.assert_allclose(Sa.sum(axis=0), np.asarray(Xc.sum(axis=1)).ravel(), rtol=1e-6)


@pytest.mark.parametrize("dtype, rtol", [("float64", 1e-9), ("float32", 2e-4)])
def test_fused_e_step_on_every_length_and_count_scale(dtype, rtol):
    """The fused kernel pads a document to whole SIMD vectors (lengths 1..40 cover every
    remainder mod 16) and evaluates exp(psi(gamma)) branch-free, from gamma near alpha to
    gamma ~ 1e6 (huge counts): it equals the primitives' E-step (scipy's digamma)."""
    rng = np.random.default_rng(3)
    V, K = 60, 5
    cols = []
    for n in range(1, 41):
        x = np.zeros(V)
        scale = 1e5 if n % 7 == 0 else 3.0
        x[rng.choice(V, n, replace=False)] = rng.integers(1, 4, n) * scale
        cols.append(x)
    Xc = sp.csc_matrix(np.array(cols).T.astype(dtype))
    a = LDA(n_components=K, dtype=dtype, e_step="fused", seed=2, mean_change_tol=0.0,
            max_doc_update_iter=30)
    b = LDA(n_components=K, dtype=dtype, e_step="primitives", seed=2, mean_change_tol=0.0,
            max_doc_update_iter=30)
    a.init(V)
    b.init(V)
    ga, Sa = a.e_step(Xc, random_init=True, sstats=True)
    gb, Sb = b.e_step(Xc, random_init=True, sstats=True)
    assert ga.max() > 1e6 and ga.min() < 0.5
    np.testing.assert_allclose(ga, gb, rtol=rtol, atol=rtol * 1e-2)
    np.testing.assert_allclose(Sa, Sb, rtol=rtol, atol=rtol * float(Sb.max()))


def test_online_training_loss_is_the_document_bound_before_the_step():
    X, _ = planted(D=100, seed=19)
    Xc = columns(X)
    for e_step in ("fused", "primitives"):
        a = LDA(n_components=4, dtype="float64", e_step=e_step, total_samples=100, seed=2)
        a.init(Xc.shape[0])
        b = LDA(n_components=4, dtype="float64", e_step=e_step, seed=2)
        b.init(Xc.shape[0])
        loss, words = a.update(Minibatch(Xc))
        gamma, _ = b.e_step(Xc, random_init=True)  # the same draws as a's step
        assert loss == pytest.approx(-b._doc_bound(Xc, gamma), rel=1e-9)
        assert words == float(Xc.sum())


# --- planted topics ------------------------------------------------------------------------------

@pytest.mark.parametrize("method,kw,tv_max", [
    ("batch", dict(max_iter=30), 0.08),
    ("online", dict(max_iter=10, batch_size=50, learning_offset=2.0), 0.08),
    ("online", dict(max_iter=20, batch_size=50, learning_offset=2.0, method="gibbs",
                    same=10), 0.08),
])
def test_planted_topics_are_recovered(method, kw, tv_max):
    X, beta = planted(K=4, V=120, D=400, seed=7)
    est = LatentDirichletAllocation(n_components=4, learning_method=method, random_state=0, **kw)
    est.fit(X)
    topics = est.components_ / est.components_.sum(axis=1, keepdims=True)
    assert matched_tv(topics, beta) < tv_max
    # a random model is far from the planted topics
    rnd = np.random.default_rng(0).dirichlet(np.ones(120), 4)
    assert matched_tv(rnd, beta) > 0.5


def test_same_annealing_grows_the_samples_and_reaches_the_planted_topics():
    """BIDMach's SAME: the samples per token grow linearly with the passes (same -> same_max
    over same_passes passes), and the annealed sampler recovers the planted topics."""
    X, beta = planted(K=4, V=120, D=400, seed=7)
    Xc = columns(X)
    model = LDA(n_components=4, method="gibbs", same=1, same_max=20, same_passes=5.0,
                total_samples=400, learning_offset=2.0, dtype="float64", seed=0)
    model.init(120)
    used = []
    for _ in range(20):
        for s in range(0, 400, 50):
            model.update(Minibatch(gmat.slice_columns(Xc, s, s + 50)))
            used.append(model.last_estep["same"])
    # step i (0-based) has seen 50 i documents = i / 8 passes: 1 + floor(19 min(1, i / 40))
    assert used == [1 + math.floor(19 * min(1.0, i / 40)) for i in range(160)]
    assert used[0] == 1 and used[-1] == 20 and model.documents_seen == 8000
    topics = model.components_ / model.components_.sum(axis=1, keepdims=True)
    assert matched_tv(topics, beta) < 0.06
    # the estimator passes the schedule through; same_max below same is refused
    est = LatentDirichletAllocation(n_components=4, learning_method="online", method="gibbs",
                                    same=1, same_max=20, same_passes=5.0, max_iter=10,
                                    batch_size=50, learning_offset=2.0, random_state=0).fit(X)
    assert est.model_.samples_per_token() == 20
    assert matched_tv(est.components_ / est.components_.sum(axis=1, keepdims=True), beta) < 0.08
    with pytest.raises(ValueError, match="same_max"):
        LDA(n_components=4, method="gibbs", same=5, same_max=2)


def test_top_words_are_the_topic_blocks():
    X, beta = planted(K=3, V=90, D=300, seed=8)
    est = LatentDirichletAllocation(n_components=3, max_iter=30, random_state=0).fit(X)
    blocks = {frozenset(range(k * 30, (k + 1) * 30)) for k in range(3)}
    for words in est.top_words(5):
        assert any(set(words) <= b for b in blocks)
    vocab = [f"w{i}" for i in range(90)]
    assert est.top_words(2, vocab)[0][0].startswith("w")


def test_online_reaches_batch_quality():
    X, _ = planted(K=4, V=120, D=600, seed=9)
    train, test = X[:500], X[500:]
    batch = LatentDirichletAllocation(n_components=4, max_iter=30, random_state=0).fit(train)
    online = LatentDirichletAllocation(n_components=4, learning_method="online", max_iter=10,
                                       batch_size=50, learning_offset=2.0,
                                       random_state=0).fit(train)
    pb, po = batch.perplexity(test), online.perplexity(test)
    # stated factor: online VB (10 passes) within 5% of batch VB's (30 passes) held-out
    # perplexity (measured: 1.6%)
    assert po < 1.05 * pb
    assert pb < 0.9 * 120  # both far below the uniform model's perplexity (V)


# --- the Learner ---------------------------------------------------------------------------------

def test_learner_trains_with_held_out_perplexity():
    X, _ = planted(K=4, V=120, D=500, seed=10)
    Xc = columns(X[:400], np.float32)
    Xh = columns(X[400:], np.float32)
    model = LDA(n_components=4, total_samples=400, learning_offset=2.0)
    learner = Learner(MatSource(Xc, batch_size=100), model, ModelUpdate(),
                      heldout=MatSource(Xh, batch_size=50), n_passes=3, eval_every=2,
                      progress=False)
    res = learner.train()
    held = [r["heldout_loss"] for r in res.trace]
    assert held[-1] < held[0]
    assert model.n_batch_iter == 12
    # the held-out loss is the negative per-word document bound of the held-out documents
    loss = sum(model.loss(Minibatch(gmat.slice_columns(Xh, s, s + 50)))[0] for s in (0, 50))
    assert held[-1] == pytest.approx(loss / float(Xh.sum()), rel=1e-6)
    # and exp of it (plus the topic term once) is the perplexity
    topic = model._topic_bound()
    assert model.perplexity(Xh) == pytest.approx(
        math.exp((loss - topic) / float(Xh.sum())), rel=1e-5)
    assert model.flops_per_step(None) > 0


@pytest.mark.parametrize("method", ["vb", "gibbs"])
def test_learner_gauges_lda_by_its_own_cost_model(method):
    """LDA's roofline gauge is its cost model (E-step primitives + M-step), not a GLM step's."""
    X, _ = planted(K=4, V=300, D=600, seed=12)
    Xc = columns(X, np.float32)
    model = LDA(n_components=4, total_samples=600, learning_offset=2.0, method=method)
    calls = []
    cost = model.cost

    def spy(batch):
        calls.append(batch.X.shape[1])
        return cost(batch)

    model.cost = spy
    learner = Learner(MatSource(Xc, batch_size=100), model, ModelUpdate(), n_passes=2,
                      eval_every=2, progress=False)
    res = learner.train()
    fr = [r["roofline_fraction"] for i, r in enumerate(res.trace)
          if i == 0 or r["step"] > res.trace[i - 1]["step"]]
    assert len(fr) >= 3 and all(0 < f <= 1 for f in fr), fr
    assert len(calls) == sum(1 for r in res.trace if not math.isnan(r["roofline_fraction"]))
    batch = next(iter(learner.datasource))
    machine = gmat.machine_roofline()
    c = cost(batch)
    assert learner.step_roofline_time(batch, machine) == c.roofline_time(machine)
    # bytes: SDDMM + A*S + A*S^T with K rows and the M-step's 4 passes over the K x V model
    K, (V, _) = 4, batch.X.shape
    prim = sum(f(batch.X, K).bytes for f in (gmat.cost_sddmm, gmat.cost_mult_as,
                                               gmat.cost_mult_ast))
    assert c.bytes == prim + 4 * K * V * 4 and c.nnz == batch.X.nnz
    # flops: the last step's visits per nonzero (E-step iterations and statistics) at this nnz
    per_visit = 4 * K if method == "vb" else K * (3 + model.opts.same)
    rate = model._last_visit_rate
    if method == "vb":  # at least one E-step iteration and the statistics, at most 100 + 1
        assert 2 <= rate <= model.opts.max_doc_update_iter + 1
    else:  # doc_iter sweeps
        assert rate == model.opts.doc_iter
    assert c.flops == round(per_visit * rate * batch.X.nnz) + 5 * K * V


def test_checkpoint_parameters_round_trip(tmp_path):
    X, _ = planted(D=100, seed=11)
    Xc = columns(X)
    a = LDA(n_components=4, dtype="float64", total_samples=100)
    a.init(Xc.shape[0])
    a.update(Minibatch(Xc))
    b = LDA(n_components=4, dtype="float64", total_samples=100)
    p = a.parameters()
    b.set_parameters(p["components"], p["n_batch_iter"])
    assert b.n_batch_iter == 1 and b.rho() == a.rho()
    assert b.perplexity(Xc) == a.perplexity(Xc)
    # the Learner's checkpoint writer stores the model's arrays
    save_checkpoint(tmp_path / "lda.npz", a)
    with np.load(tmp_path / "lda.npz") as z:
        np.testing.assert_array_equal(z["model.components"], a.components_)
        assert int(z["model.n_batch_iter"][0]) == 1


def test_gibbs_draws_from_the_model_rng():
    X, _ = planted(D=80, seed=18)
    Xc = columns(X)

    def run_once(seed):
        model = LDA(n_components=4, dtype="float64", method="gibbs", same=3, doc_iter=2,
                    total_samples=80, seed=seed)
        model.init(Xc.shape[0])
        model.update(Minibatch(Xc))
        return model.components_.copy()

    np.testing.assert_array_equal(run_once(1), run_once(1))
    assert not np.array_equal(run_once(1), run_once(2))


# --- distributed batch VB ------------------------------------------------------------------------

def _rank_fit(comm, n_iter):
    X, _ = planted(D=160, seed=12)
    Xc = columns(X)
    mine = np.array_split(np.arange(Xc.shape[1]), comm.size)[comm.rank]
    model = LDA(n_components=4, dtype="float64", seed=3)
    model.init(Xc.shape[0])
    res = model.fit_batch(Xc[:, mine], n_iter, comm=comm, evaluate_every=1, perp_tol=0.0)
    return np.asarray(model.components_), res.perplexities


def _single(n_iter):
    X, _ = planted(D=160, seed=12)
    model = LDA(n_components=4, dtype="float64", seed=3)
    model.init(X.shape[1])
    res = model.fit_batch(columns(X), n_iter, evaluate_every=1, perp_tol=0.0)
    return np.asarray(model.components_), res.perplexities


@pytest.mark.parametrize("backend,K", [
    pytest.param("tcp", 2, marks=[pytest.mark.multiprocess, pytest.mark.slow]),
    pytest.param("tcp", 4, marks=[pytest.mark.multiprocess, pytest.mark.slow]),
    ("threads", 3),
])
def test_distributed_batch_equals_single_process(backend, K):
    lam, perp = _single(3)
    out = run(_rank_fit, K, backend=backend, args=(3,), timeout=120)
    for lam_r, perp_r in out:
        np.testing.assert_array_equal(lam_r, out[0][0])  # every rank holds the same model
        np.testing.assert_allclose(lam_r, lam, rtol=1e-10)
        np.testing.assert_allclose(perp_r, perp, rtol=1e-10)


def test_estimator_fit_with_comm_of_one_rank_equals_plain_fit():
    X, _ = planted(D=100, seed=13)
    a = LatentDirichletAllocation(n_components=3, max_iter=3, random_state=1).fit(X)
    out = run(lambda comm: LatentDirichletAllocation(n_components=3, max_iter=3,
                                                     random_state=1).fit(X, comm=comm)
              .components_, 1, backend="threads")
    np.testing.assert_array_equal(out[0], a.components_)


# --- bad input -----------------------------------------------------------------------------------

def test_negative_counts_are_rejected():
    X, _ = planted(D=20, seed=14)
    X = X.tolil()
    X[0, 0] = -1.0
    with pytest.raises(ValueError, match="negative"):
        LatentDirichletAllocation(n_components=2).fit(X.tocsr())
    model = LDA(n_components=2, dtype="float64")
    model.init(X.shape[1])
    with pytest.raises(ValueError, match="negative"):
        model.update(Minibatch(columns(X)))


def test_empty_documents_get_the_prior_as_scikit_learn():
    X, _ = planted(D=60, seed=15)
    X = sp.vstack([X, sp.csr_matrix((2, X.shape[1]))]).tocsr()
    sk = SkLDA(n_components=3, random_state=0, max_iter=3).fit(X)
    ours = LatentDirichletAllocation(n_components=3, random_state=np.random.RandomState(0),
                                     max_iter=3).fit(X)
    T = ours.transform(X)
    np.testing.assert_allclose(T[-2:], 1.0 / 3)
    np.testing.assert_allclose(T, sk.transform(X), atol=1e-7)
    with pytest.raises(ValueError, match="no words"):
        ours.perplexity(sp.csr_matrix((3, X.shape[1])))


@pytest.mark.parametrize("kw,match", [
    (dict(n_components=0), "n_components"),
    (dict(learning_method="stochastic"), "learning_method"),
    (dict(method="gibbs", learning_method="batch"), "gibbs"),
    (dict(batch_size=0), "batch_size"),
    (dict(learning_decay=0.2), "learning_decay"),
    (dict(doc_topic_prior=-1.0), "doc_topic_prior"),
    (dict(random_state="x"), "random_state"),
])
def test_bad_parameters_name_themselves(kw, match):
    X, _ = planted(D=20, seed=16)
    with pytest.raises(ValueError, match=match):
        LatentDirichletAllocation(**kw).fit(X)


def test_model_checks_its_input():
    X, _ = planted(D=20, V=40, seed=17)
    model = LDA(n_components=2)  # float32
    with pytest.raises(RuntimeError, match="not initialised"):
        model.transform(columns(X, np.float32))
    model.init(40)
    with pytest.raises(TypeError, match="dtype"):
        model.transform(columns(X, np.float64))
    with pytest.raises(ValueError, match="words"):
        model.transform(columns(X[:, :30], np.float32))
    with pytest.raises(TypeError, match="CSC"):
        model.transform(np.ones((40, 3), np.float32))
    with pytest.raises(ValueError, match="n_features"):
        LDA().init(0)
    with pytest.raises(ValueError, match="n_words"):
        model.set_parameters(np.ones((3, 40)))
    with pytest.raises(ValueError, match="positive"):
        model.set_parameters(np.zeros((2, 40)))
    with pytest.raises(ValueError, match="n_components"):
        LDA(n_components=0)
    with pytest.raises(ValueError, match="features"):
        LatentDirichletAllocation(n_components=2, max_iter=1).fit(X).transform(X[:, :10])
