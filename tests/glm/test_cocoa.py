"""CoCoA+, hierarchical CoCoA and pure-block SCD (glm/_cocoa.py)."""

import threading

import numpy as np
import pytest
import scipy.sparse as sp

from roofline.comm import InProcessGroup
from roofline.glm import alpha_from_peer, check_pure_blocks, fit_glm, pure_blocks
from roofline.glm._cocoa import run_in_threads
from tests._helpers import make_data


@pytest.fixture(scope="module")
def logistic_problem():
    X, A, y = make_data(task="classification", seed=11, n=240, d=30)
    al = alpha_from_peer("C", 1.0, A.shape[0])
    refs = {
        # the dual's reference with CoCoA's regularised constant feature (intercept_scaling=1;
        # the one-process dual's own intercept is unregularised)
        dual: fit_glm(X, y, loss="logistic", alpha=al, dual=dual, tol=1e-13, random_state=0,
                      intercept_scaling=1.0)
        for dual in (False, True)
    }
    return X, y, al, refs


@pytest.mark.parametrize("dual", [False, True])
@pytest.mark.parametrize("K", [1, 2, 4])
def test_cocoa_reaches_the_single_solver_optimum(logistic_problem, dual, K):
    X, y, al, refs = logistic_problem
    st = {}
    res = fit_glm(X, y, loss="logistic", alpha=al, dual=dual, solver="cocoa", n_workers=K,
                     tol=1e-9, max_iter=3000, random_state=0, comm_stats=st)
    ref = refs[dual]
    assert res.converged and res.relative_gap <= 1e-9
    assert res.objective[-1] == pytest.approx(ref.objective[-1], rel=1e-8)
    np.testing.assert_allclose(res.coef, ref.coef, atol=3e-4)
    assert res.intercept == pytest.approx(ref.intercept, abs=3e-4)
    if K > 1:  # one outer all-reduce of the shared vector per round (the dual: and one of
        # the workers' feature counts, once, for its feature-wise sigma')
        assert st["outer"]["calls"] == res.n_iter + int(dual)
        assert st["inner"]["calls"] == 0  # nodes of one worker communicate nothing inside
    if dual:
        ys = np.where(y > 0, 1.0, -1.0)
        assert np.all((ys * res.dual_coef > 0) & (ys * res.dual_coef < 1))


@pytest.mark.parametrize("dual", [False, True])
def test_hierarchical_cocoa_same_optimum_fewer_outer_rounds(logistic_problem, dual):
    X, y, al, refs = logistic_problem
    kw = dict(loss="logistic", alpha=al, dual=dual, n_workers=4, tol=1e-7, max_iter=3000,
              random_state=0)
    flat = fit_glm(X, y, solver="cocoa", **kw)
    st = {}
    hier = fit_glm(X, y, solver="hcocoa", n_nodes=2, inner_rounds=4, comm_stats=st, **kw)
    assert flat.converged and hier.converged
    assert hier.objective[-1] == pytest.approx(refs[dual].objective[-1], rel=1e-6)
    np.testing.assert_allclose(hier.coef, refs[dual].coef, atol=3e-3)
    assert hier.n_iter < flat.n_iter  # outer (expensive) rounds
    assert st["inner"]["calls"] == 2 * 4 * hier.n_iter  # 2 node groups x 4 inner rounds
    assert st["outer"]["calls"] == 2 * hier.n_iter  # 2 cross-node groups (local ranks 0, 1)


def test_cocoa_is_deterministic_for_a_seed(logistic_problem):
    X, y, al, _ = logistic_problem
    runs = [fit_glm(X, y, loss="logistic", alpha=al, solver="cocoa", n_workers=3, dual=True,
                       max_iter=4, tol=1e-15, random_state=5) for _ in range(2)]
    np.testing.assert_array_equal(runs[0].coef, runs[1].coef)
    np.testing.assert_array_equal(runs[0].objective, runs[1].objective)


def test_cocoa_ridge_and_lasso_primal():
    X, A, y = make_data(seed=12, n=200, d=20)
    for penalty, alpha in (("l2", 0.05), ("l1", 0.02)):
        ref = fit_glm(X, y, loss="squared", penalty=penalty, alpha=alpha, tol=1e-13)
        res = fit_glm(X, y, loss="squared", penalty=penalty, alpha=alpha, solver="cocoa",
                         n_workers=4, tol=1e-10, max_iter=5000, random_state=0)
        assert res.converged
        np.testing.assert_allclose(res.coef, ref.coef, atol=1e-4)
        assert res.objective[-1] == pytest.approx(ref.objective[-1], rel=1e-9)


def _one_hot_fields(n=300, fields=6, card=9, seed=0):
    rng = np.random.default_rng(seed)
    cats = rng.zipf(1.5, size=(n, fields)) % card
    rows = np.repeat(np.arange(n), fields)
    feats = (cats + np.arange(fields) * card).ravel()
    X = sp.csc_matrix((np.ones(n * fields), (feats, rows)), shape=(fields * card, n))
    w = rng.normal(size=fields * card)
    y = (rng.random(n) < 1 / (1 + np.exp(-(X.T @ w)))).astype(int)
    field_of = np.repeat(np.arange(fields), card)
    return X, y, field_of


@pytest.mark.parametrize("loss", ["logistic", "squared"])
def test_pure_block_objective_independent_of_workers(loss):
    """Google SCD's defining property: the same iterates for 1, 2 and 4 workers."""
    X, y, field_of = _one_hot_fields()
    traces = []
    for K in (1, 2, 4):
        st = {}
        res = fit_glm(X, y, loss=loss, alpha=1e-3, solver="pure-block", n_workers=K,
                         blocks=field_of, max_iter=6, tol=1e-16, random_state=3, comm_stats=st)
        traces.append(res.objective)
        assert res.n_iter == 6 and res.info["n_blocks"] == 6
        if K > 1:
            assert st["world"]["calls"] > 6 * 6  # one all-reduce of statistics per block
    np.testing.assert_allclose(traces[1], traces[0], rtol=1e-13)
    np.testing.assert_allclose(traces[2], traces[0], rtol=1e-13)
    assert traces[0][-1] < traces[0][0]


def test_pure_block_reaches_the_optimum_and_greedy_blocks():
    X, y, field_of = _one_hot_fields(seed=1)
    ref = fit_glm(X, y, loss="logistic", alpha=1e-2, tol=1e-13, random_state=0)
    blocks = pure_blocks(X)
    check_pure_blocks(X, blocks)
    res = fit_glm(X, y, loss="logistic", alpha=1e-2, solver="pure-block", n_workers=2,
                     tol=1e-10, max_iter=2000, random_state=0)  # greedy blocks
    assert res.converged
    assert res.objective[-1] == pytest.approx(ref.objective[-1], rel=1e-9)
    np.testing.assert_allclose(res.coef, ref.coef, atol=1e-4)


def test_impure_blocks_are_rejected():
    X, y, field_of = _one_hot_fields()
    bad = field_of.copy()
    bad[bad == 1] = 0  # two fields merged: every example has 2 non-zeros in block 0
    with pytest.raises(ValueError, match="blocks are not pure: example 0"):
        fit_glm(X, y, loss="logistic", alpha=1e-3, solver="pure-block", blocks=bad)
    with pytest.raises(ValueError, match="one id per feature"):
        check_pure_blocks(X, field_of[:-1])
    with pytest.raises(ValueError, match="pure-block"):
        fit_glm(X, y, loss="hinge", alpha=1e-3, solver="pure-block", blocks=field_of)


def test_inprocess_allreduce_sum_max_and_failure():
    before = threading.active_count()  # other tests' pools (Dask's, numba's) may linger
    g = InProcessGroup(3, timeout=20)
    out = run_in_threads(
        lambda r: (g.communicator(r).allreduce(np.arange(4.0) * (r + 1)),
                   g.communicator(r).allreduce(np.array([float(r), -float(r)]), op="max")),
        3, [g])
    for s, m in out:
        np.testing.assert_array_equal(s, np.arange(4.0) * 6)
        np.testing.assert_array_equal(m, [2.0, 0.0])
    assert g.stats["calls"] == 2

    # a failing rank does not hang the others: its error comes back
    g2 = InProcessGroup(3, timeout=20)

    def work(r):
        if r == 1:
            raise RuntimeError("worker 1 failed")
        return g2.communicator(r).allreduce(np.ones(2))

    with pytest.raises(RuntimeError, match="worker 1 failed"):
        run_in_threads(work, 3, [g2])
    g3 = InProcessGroup(2, timeout=20)
    with pytest.raises(ValueError, match="shape mismatch"):
        run_in_threads(lambda r: g3.communicator(r).allreduce(np.ones(r + 1)), 2, [g3])
    # the failed groups' threads are gone (not one left per rank and group)
    assert threading.active_count() <= before + 2


def test_bad_distributed_parameters():
    X, A, y = make_data(n=50, d=8)
    with pytest.raises(ValueError, match="multiple of n_nodes"):
        fit_glm(X, y, loss="squared", alpha=0.1, solver="hcocoa", n_workers=3, n_nodes=2)
    with pytest.raises(ValueError, match="n_workers must be a positive integer"):
        fit_glm(X, y, loss="squared", alpha=0.1, solver="cocoa", n_workers=0)


def _rare_features(n=2000, d=2**15, k=10, seed=0):
    """Examples of k features drawn uniformly from many: most features on one worker only."""
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(d, size=(n, k)), axis=1)
    X = sp.csc_matrix((np.ones(n * k), rows.ravel(), np.arange(0, n * k + 1, k)), shape=(d, n))
    X.sum_duplicates()
    y = np.where(X.T @ rng.standard_normal(d) + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0)
    return X, y


def test_feature_wise_sigma_takes_fewer_rounds_on_rare_features(monkeypatch):
    """sigma_j = the number of workers touching feature j is safe (the same optimum) and, where
    most features live on one worker, needs fewer rounds than CoCoA+'s sigma' = K."""
    from roofline.glm import _cocoa

    X, y = _rare_features()
    kw = dict(loss="logistic", alpha=1e-3, solver="cocoa", n_workers=4, dual=True, tol=1e-6,
              max_iter=500, random_state=0, fit_intercept=False)
    ref = fit_glm(X, y, loss="logistic", alpha=1e-3, dual=True, solver="scd", tol=1e-10,
                  max_iter=500, random_state=0, fit_intercept=False)
    feat = fit_glm(X, y, **kw)
    monkeypatch.setattr(_cocoa, "FEATURE_SIGMA", False)
    flat = fit_glm(X, y, **kw)
    assert feat.converged and flat.converged
    for res in (feat, flat):
        assert res.objective[-1] == pytest.approx(ref.objective[-1], rel=1e-5)
    assert feat.n_iter * 1.5 <= flat.n_iter, (feat.n_iter, flat.n_iter)
