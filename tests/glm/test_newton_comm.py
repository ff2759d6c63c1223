"""Distributed trust-region Newton (glm/_newton.py, ``fit_newton(comm=)``, issue 31): every
rank holds its own examples; the iterates are the single-process ones up to summation order,
so the coefficients match the one-process fit to 1e-8 (relative) in the same iterations."""

import numpy as np
import pytest
import scipy.sparse as sp

from roofline.comm import run
from roofline.glm._newton import fit_newton, fit_newton_comm

KW = dict(alpha=1e-3, tol=1e-10, max_iter=100)
RTOL = 1e-8


def _data(loss, sparse, d=40, n=360, seed=0):
    """Examples as columns; with ``sparse``, features 0-4 occur only in the first sixth of
    the examples and feature 5 in none (the ranks' feature sets differ; the union is not
    every feature)."""
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((d, n)) * rng.uniform(0.2, 3.0, (d, 1))
    if sparse:
        A[rng.random((d, n)) < 0.75] = 0.0
        A[:5, n // 6:] = 0.0
        A[5] = 0.0
    w = rng.standard_normal(d) / np.sqrt(d)
    z = w @ A + 0.4
    if loss == "squared":
        y = z + 0.3 * rng.standard_normal(n)
    else:
        y = (rng.random(n) < 1 / (1 + np.exp(-2 * z))).astype(float)
    X = sp.csc_matrix(A) if sparse else np.ascontiguousarray(A)
    return X, y


def _shards(n, K, empty=None):
    """Contiguous shards of ``n`` examples over ``K`` ranks; rank ``empty`` holds none."""
    if empty is None:
        return np.array_split(np.arange(n), K)
    cuts = np.array_split(np.arange(n), K - 1)
    return cuts[:empty] + [np.arange(0)] + cuts[empty:]


def _rank_fit(comm, loss, sparse, fit_intercept, weights=False, empty=None):
    X, y = _data(loss, sparse)
    n = X.shape[1]
    mine = _shards(n, comm.size, empty)[comm.rank]
    sw = None
    if weights:  # different on every rank: rank r's examples weigh r + 1 (times a spread)
        sw = (comm.rank + 1.0) * np.random.default_rng(comm.rank).uniform(0.5, 2.0, mine.size)
    res = fit_newton(X[:, mine], y[mine], loss=loss, fit_intercept=fit_intercept,
                     sample_weight=sw, comm=comm, **KW)
    return res, sw


def _close(res, ref):
    scale = max(np.linalg.norm(ref.coef), 1e-300)
    assert np.linalg.norm(res.coef - ref.coef) <= RTOL * scale
    assert abs(res.intercept - ref.intercept) <= RTOL * max(abs(ref.intercept), scale)
    assert res.n_iter == ref.n_iter
    assert res.converged and ref.converged


def _same_on_every_rank(out):
    for r, _ in out[1:]:
        np.testing.assert_array_equal(r.coef, out[0][0].coef)
        assert r.intercept == out[0][0].intercept
        assert r.n_iter == out[0][0].n_iter
        np.testing.assert_array_equal(r.objective, out[0][0].objective)


@pytest.mark.parametrize("K", [1, 2, 4])
@pytest.mark.parametrize("sparse", [True, False], ids=["sparse", "dense"])
@pytest.mark.parametrize("loss", ["logistic", "squared"])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_threads_equal_the_single_process_fit(K, sparse, loss, fit_intercept):
    X, y = _data(loss, sparse)
    ref = fit_newton(X, y, loss=loss, fit_intercept=fit_intercept, **KW)
    out = run(_rank_fit, K, backend="threads", args=(loss, sparse, fit_intercept), timeout=60)
    _same_on_every_rank(out)
    res = out[0][0]
    _close(res, ref)
    assert res.info["reduce"] == ("sparse" if sparse else "dense")
    assert res.info["n_union_features"] == (X.shape[0] - 1 if sparse else X.shape[0])
    assert res.coef[5] == 0.0 or not sparse
    assert res.solver == "newton" and res.info["n_ranks"] == K


def test_squared_hinge():
    X, y = _data("squared_hinge", True)
    ref = fit_newton(X, y, loss="squared_hinge", **KW)
    out = run(_rank_fit, 3, backend="threads", args=("squared_hinge", True, True), timeout=60)
    _close(out[0][0], ref)


@pytest.mark.parametrize("sparse", [True, False], ids=["sparse", "dense"])
def test_weights_differing_between_ranks(sparse):
    """Each rank's weights scale by the global sum: the single-process weighted fit."""
    out = run(_rank_fit, 3, backend="threads", args=("logistic", sparse, True, True),
              timeout=60)
    X, y = _data("logistic", sparse)
    sw = np.concatenate([s for _, s in out])
    ref = fit_newton(X, y, sample_weight=sw, **KW)
    _close(out[0][0], ref)
    unweighted = fit_newton(X, y, **KW)
    assert np.linalg.norm(ref.coef - unweighted.coef) > 1e-3 * np.linalg.norm(ref.coef)


def _integer_weights(comm):
    X, y = _data("logistic", True)
    mine = _shards(X.shape[1], comm.size)[comm.rank]
    sw = np.full(mine.size, comm.rank + 1.0)  # rank r's examples count r + 1 times
    return fit_newton(X[:, mine], y[mine], sample_weight=sw, comm=comm, **KW).coef, sw


def test_integer_weights_mean_repeated_rows():
    """Weight k on a rank = its rows repeated k times in one process (not dropped)."""
    out = run(_integer_weights, 2, backend="threads", timeout=60)
    X, y = _data("logistic", True)
    reps = np.concatenate([s for _, s in out]).astype(int)
    idx = np.repeat(np.arange(X.shape[1]), reps)
    ref = fit_newton(X[:, idx], y[idx], **KW)
    np.testing.assert_allclose(out[0][0], ref.coef, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("sparse", [True, False], ids=["sparse", "dense"])
@pytest.mark.parametrize("empty", [0, 1])
def test_a_rank_with_no_examples(sparse, empty):
    X, y = _data("logistic", sparse)
    ref = fit_newton(X, y, **KW)
    out = run(_rank_fit, 3, backend="threads", args=("logistic", sparse, True, False, empty),
              timeout=60)
    _same_on_every_rank(out)
    _close(out[0][0], ref)


def _per_iter(comm):
    X, y = _data("logistic", True)
    mine = _shards(X.shape[1], comm.size)[comm.rank]
    return fit_newton_comm(comm, X[:, mine], y[mine], **KW).info


def test_per_iteration_counters():
    info = run(_per_iter, 2, backend="threads", timeout=60)[0]
    rows = info["per_iter"]
    assert len(rows) >= 1
    for r in rows:
        # per accepted step: the CG steps' products and one reduce of the trial point's loss
        # with its gradient (no second collective for the gradient once it is accepted)
        assert r["collectives"] >= r["cg_steps"] + 1
        assert r["bytes_sent"] > 0
        assert 0 <= r["comm_s"] <= r["wall_s"] and r["compute_s"] >= 0
    assert sum(r["collectives"] for r in rows) == info["collectives"]
    assert info["cg_iter"] == sum(r["cg_steps"] for r in rows)
    # exactly one collective per Hessian-vector product and one per objective evaluation
    # (the start and each trial point, accepted or not)
    assert info["collectives"] == info["n_hv"] + info["n_fun"]
    assert info["n_fun"] >= len(rows) + 1


@pytest.mark.parametrize("sparse", [True, False], ids=["sparse", "dense"])
def test_two_ranks_send_one_message_per_collective(sparse):
    """Two ranks: each of the fit's collectives (the Hessian-vector products and the trial
    points' loss-and-gradient reduces) is one message each way, no round trip."""
    def fit(comm):
        X, y = _data("logistic", sparse)
        mine = _shards(X.shape[1], comm.size)[comm.rank]
        before = comm.stats["messages"]
        info = fit_newton_comm(comm, X[:, mine], y[mine], **KW).info
        return info, comm.stats["messages"] - before

    for info, msgs in run(fit, 2, backend="threads", timeout=60):
        assert info["collectives"] == info["n_hv"] + info["n_fun"]
        assert msgs == info["collectives"] + info["setup"]["messages"]


def _mismatch(comm):
    X, y = _data("logistic", True)
    mine = _shards(X.shape[1], comm.size)[comm.rank]
    Xk = X[:, mine] if comm.rank == 0 else X[:-1, mine]  # rank 1: one feature less
    try:
        fit_newton(Xk, y[mine], comm=comm, **KW)
    except ValueError as e:
        return str(e)
    return None


def _bad_weights(comm):
    X, y = _data("logistic", True)
    mine = _shards(X.shape[1], comm.size)[comm.rank]
    sw = np.ones(mine.size)
    if comm.rank == 1:
        sw[0] = -1.0
    try:
        fit_newton(X[:, mine], y[mine], sample_weight=sw, comm=comm, **KW)
    except ValueError as e:
        return str(e)
    return None


def test_inconsistent_ranks_raise_on_every_rank():
    msgs = run(_mismatch, 2, backend="threads", timeout=30)
    assert all(m is not None and "n_features" in m for m in msgs)
    msgs = run(_bad_weights, 2, backend="threads", timeout=30)
    assert "rank 1" in msgs[1] and "sample_weight" in msgs[1]
    assert msgs[0] is not None and "rank 1" in msgs[0]


def test_bad_comm():
    X, y = _data("logistic", True)
    with pytest.raises(TypeError, match="Communicator"):
        fit_newton(X, y, comm=object(), **KW)


def _tcp_fit(comm, loss, sparse, weights):
    res, sw = _rank_fit(comm, loss, sparse, True, weights)
    return res.coef, res.intercept, res.n_iter, res.converged, sw, res.info["bytes_sent"]


@pytest.mark.multiprocess
@pytest.mark.parametrize("loss,sparse,weights", [("logistic", True, True),
                                                 ("squared", False, False)])
def test_tcp_two_processes(loss, sparse, weights):
    out = run(_tcp_fit, 2, backend="tcp", args=(loss, sparse, weights), timeout=60)
    X, y = _data(loss, sparse)
    sw = np.concatenate([o[4] for o in out]) if weights else None
    ref = fit_newton(X, y, loss=loss, sample_weight=sw, **KW)
    coef, b, it, conv, _, nbytes = out[0]
    np.testing.assert_array_equal(out[1][0], coef)
    assert np.linalg.norm(coef - ref.coef) <= RTOL * np.linalg.norm(ref.coef)
    assert abs(b - ref.intercept) <= RTOL * max(abs(ref.intercept), 1.0)
    assert it == ref.n_iter and conv
    assert nbytes > 0
