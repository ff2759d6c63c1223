"""Local coordinate-descent solvers (glm/_fit.py front door, glm/_scd.py)
against scikit-learn's optima."""

import os
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import Lasso, LogisticRegression, Ridge
from sklearn.svm import LinearSVC

from roofline import glm
from roofline.glm import GLMResult, _scd, alpha_from_peer, alpha_to_peer, fit_glm
from tests._helpers import make_data, powerlaw_matrix


def objective(X, y, w, b, loss, alpha, penalty="l2", reg_b=False):
    """Our documented objective, computed in numpy."""
    z = X.T @ w + b
    if loss == "squared":
        L = 0.5 * (z - y) ** 2
    else:
        ys = np.where(y > 0, 1.0, -1.0)
        L = np.logaddexp(0, -ys * z) if loss == "logistic" else np.maximum(0, 1 - ys * z)
    R = np.abs(w).sum() if penalty == "l1" else 0.5 * (w @ w + (b * b if reg_b else 0.0))
    return L.mean() + alpha * R


TOL = {np.float32: 1e-4, np.float64: 1e-6}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_ridge_matches_sklearn(dtype):
    X, A, y = make_data(dtype=dtype)
    n = A.shape[0]
    res = fit_glm(X, y, loss="squared", alpha=alpha_from_peer("ridge", 2.0, n), tol=1e-10,
                     random_state=0)
    sk = Ridge(alpha=2.0, solver="cholesky").fit(A.toarray().astype(np.float64), y)
    assert res.converged and res.relative_gap <= 1e-10
    np.testing.assert_allclose(res.coef, sk.coef_, atol=TOL[dtype] * 10)
    assert res.intercept == pytest.approx(sk.intercept_, abs=TOL[dtype] * 10)
    P_sk = objective(X.astype(np.float64), y, sk.coef_, sk.intercept_, "squared", res.alpha)
    # the certificate bounds the suboptimality, and the objective trace is ours
    assert res.objective[-1] - P_sk <= res.gap + 1e-12
    assert res.objective[-1] == pytest.approx(
        objective(X.astype(np.float64), y, res.coef, res.intercept, "squared", res.alpha),
        rel=1e-10)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_lasso_matches_sklearn(dtype):
    X, A, y = make_data(dtype=dtype, seed=1)
    res = fit_glm(X, y, loss="squared", penalty="l1", alpha=alpha_from_peer("lasso", 0.05, 300),
                     tol=1e-10, random_state=0)
    sk = Lasso(alpha=0.05, tol=1e-12, max_iter=100_000).fit(A.astype(np.float64), y)
    assert res.converged
    np.testing.assert_allclose(res.coef, sk.coef_, atol=1e-6)
    assert res.intercept == pytest.approx(sk.intercept_, abs=1e-6)
    assert np.count_nonzero(res.coef) == np.count_nonzero(sk.coef_) < A.shape[1]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("dual", [False, True])
def test_logistic_matches_sklearn(dtype, dual):
    X, A, y = make_data(task="classification", dtype=dtype, seed=2)
    n = A.shape[0]
    fi = not dual  # lbfgs leaves the intercept unregularised, as our primal does
    res = fit_glm(X, y, loss="logistic", alpha=alpha_from_peer("C", 0.5, n), dual=dual,
                     fit_intercept=fi, tol=1e-13, random_state=0)
    sk = LogisticRegression(C=0.5, tol=1e-12, max_iter=10_000, fit_intercept=fi).fit(
        A.astype(np.float64), y)
    assert res.converged and res.dual == dual
    np.testing.assert_allclose(res.coef, sk.coef_[0], atol=1e-5)
    if fi:
        assert res.intercept == pytest.approx(sk.intercept_[0], abs=1e-5)
    P_sk = objective(X.astype(np.float64), y, sk.coef_[0], sk.intercept_[0] if fi else 0.0,
                     "logistic", res.alpha)
    assert res.objective[-1] - P_sk <= res.gap + 1e-12


@pytest.mark.parametrize("fit_intercept", [False, True])
def test_hinge_svm_matches_liblinear(fit_intercept):
    X, A, y = make_data(task="classification", seed=3, n=200)
    n = A.shape[0]
    # intercept_scaling=1: liblinear's regularised intercept (a constant feature); without it
    # the dual's intercept is unregularised (tests/glm/test_dual_intercept.py)
    res = fit_glm(X, y, loss="hinge", alpha=alpha_from_peer("C", 0.1, n), tol=1e-10,
                     fit_intercept=fit_intercept, random_state=0, max_iter=20_000,
                     intercept_scaling=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sk = LinearSVC(C=0.1, loss="hinge", dual=True, tol=1e-12, max_iter=1_000_000,
                       fit_intercept=fit_intercept, random_state=0).fit(A, y)
    assert res.converged and res.dual
    b_sk = sk.intercept_[0] if fit_intercept else 0.0
    # liblinear regularises the intercept (intercept_scaling=1), as our dual does
    P_sk = objective(X, y, sk.coef_[0], b_sk, "hinge", res.alpha, reg_b=True)
    P_us = objective(X, y, res.coef, res.intercept, "hinge", res.alpha, reg_b=True)
    assert P_us == pytest.approx(res.objective[-1], rel=1e-10)
    assert P_us <= P_sk + 1e-9  # ours is at least as good as liblinear's
    assert P_sk - P_us <= 1e-6  # and both at the same optimum
    np.testing.assert_allclose(res.coef, sk.coef_[0], atol=2e-3)
    # the dual variables are feasible: y_i alpha_i in [0, 1]
    ys = np.where(y > 0, 1.0, -1.0)
    assert np.all(ys * res.dual_coef >= -1e-12) and np.all(ys * res.dual_coef <= 1 + 1e-12)


def test_gap_is_a_certificate_along_the_way():
    """Every recorded gap bounds the true suboptimality P(w_t) - P*."""
    X, A, y = make_data(task="classification", seed=4)
    al = alpha_from_peer("C", 1.0, 300)
    ref = fit_glm(X, y, loss="logistic", alpha=al, tol=1e-12, random_state=1, solver="scd")
    for dual in (False, True):
        res = fit_glm(X, y, loss="logistic", alpha=al, tol=1e-12, max_iter=6, dual=dual,
                         solver="scd", stall_switch=False,
                         fit_intercept=False if dual else True, random_state=0, check_every=1)
        if not dual:
            assert np.all(res.objective - ref.objective[-1] <= res.gap_history + 1e-12)
            assert res.gap_history[0] > res.gap_history[-1]
        assert len(res.objective) == 6 and not res.converged
        assert np.all(np.diff(res.times) >= 0)


def test_deterministic_for_a_seed():
    X, A, y = make_data(task="classification", seed=5)
    kw = dict(loss="logistic", alpha=1e-2, tol=1e-14, max_iter=5, solver="scd")
    for dual in (False, True):
        r1 = fit_glm(X, y, random_state=7, dual=dual, **kw)
        r2 = fit_glm(X, y, random_state=np.random.default_rng(7), dual=dual, **kw)
        r3 = fit_glm(X, y, random_state=8, dual=dual, **kw)
        np.testing.assert_array_equal(r1.coef, r2.coef)
        np.testing.assert_array_equal(r1.objective, r2.objective)
        assert not np.array_equal(r1.coef, r3.coef)


@pytest.mark.parametrize("mode", ["hogwild", "replica"])
@pytest.mark.parametrize("dual", [False, True])
def test_tpa_scd_reaches_the_optimum(mode, dual):
    X, A, y = make_data(task="classification", seed=6)
    al = alpha_from_peer("C", 1.0, 300)
    ref = fit_glm(X, y, loss="logistic", alpha=al, tol=1e-12, dual=dual, fit_intercept=False,
                     random_state=0)
    res = fit_glm(X, y, loss="logistic", alpha=al, tol=1e-10, dual=dual, fit_intercept=False,
                     solver="tpa-scd", n_jobs=4, tpa_mode=mode, random_state=0, max_iter=3000)
    assert res.converged
    np.testing.assert_allclose(res.coef, ref.coef, atol=1e-4)
    assert res.objective[-1] == pytest.approx(ref.objective[-1], rel=1e-9)


def _dense_correlated(seed=0, n=100, d=16):
    rng = np.random.default_rng(seed)
    Xd = rng.normal(size=(1, n)) + 0.3 * rng.normal(size=(d, n))  # one strong common factor
    y = Xd.T @ rng.normal(size=d) + rng.normal(size=n)
    return sp.csc_matrix(Xd), y


def test_tpa_dual_caps_its_threads_with_a_warning(caplog):
    """More than 2 threads overshoot in the dual's hogwild mode (measured on a 16-core Xeon):
    the solver runs 2, says so, and still reaches the optimum."""
    rng = np.random.default_rng(3)
    X = sp.random(60, 400, density=0.1, format="csc", random_state=rng)
    y = (rng.random(400) < 0.4).astype(float)
    kw = dict(loss="logistic", alpha=1e-2, dual=True, fit_intercept=False, tol=1e-10,
              random_state=0)
    ref = fit_glm(X, y, **kw)
    with caplog.at_level("WARNING", logger="roofline.glm._fit"):
        res = fit_glm(X, y, solver="tpa-scd", n_jobs=8, max_iter=3000, **kw)
    assert res.info["n_threads"] == 2
    assert any("at most 2 threads (n_jobs=8)" in r.getMessage() for r in caplog.records)
    assert res.converged and res.objective[-1] == pytest.approx(ref.objective[-1], rel=1e-8)
    caplog.clear()
    two = fit_glm(X, y, solver="tpa-scd", n_jobs=2, max_iter=3000, **kw)
    assert two.info["n_threads"] == 2 and not caplog.records
    # replica mode is not capped (deterministic; the damping test below runs it on 8 threads)
    rep = fit_glm(X, y, solver="tpa-scd", n_jobs=4, tpa_mode="replica", max_iter=3000, **kw)
    assert rep.info["n_threads"] == 4


@pytest.mark.parametrize("dual", [False, True])
def test_tpa_damping_turns_divergence_into_convergence(dual):
    """8 threads on a dense, correlated problem: without damping the simultaneous coordinate
    steps overshoot and the iterates blow up; Snap ML's adaptive damping converges."""
    X, y = _dense_correlated()
    kw = dict(loss="squared", alpha=0.3, solver="tpa-scd", n_jobs=8, tpa_mode="replica",
              dual=dual, fit_intercept=False, random_state=0, check_every=5, stall_switch=False)
    with pytest.raises(FloatingPointError, match="diverged"):
        fit_glm(X, y, adaptive_damping=False, max_iter=400, tol=1e-8, **kw)
    undamped = fit_glm(X, y, adaptive_damping=False, max_iter=10, tol=1e-8, **kw)
    assert undamped.objective[-1] > 100 * undamped.objective[0]
    res = fit_glm(X, y, adaptive_damping=True, max_iter=3000, tol=1e-8, **kw)
    ref = fit_glm(X, y, loss="squared", alpha=0.3, fit_intercept=False, tol=1e-12, dual=dual)
    assert res.converged and res.info["n_rejected"] >= 1 and res.info["damping"] < 1
    assert res.objective[-1] == pytest.approx(ref.objective[-1], rel=1e-7)


def test_conversions_round_trip():
    for peer, value in [("ridge", 3.0), ("lasso", 0.2), ("C", 0.7), ("snapml", 5.0),
                        ("vw", 1e-6)]:
        a = alpha_from_peer(peer, value, 1000)
        assert alpha_to_peer(peer, a, 1000) == pytest.approx(value)
    assert alpha_from_peer("C", 2.0, 100) == pytest.approx(1 / 200)
    assert alpha_from_peer("ridge", 2.0, 100) == pytest.approx(0.02)
    with pytest.raises(ValueError, match="peer"):
        alpha_from_peer("liblinear", 1.0, 10)


def test_result_object():
    X, A, y = make_data()
    res = fit_glm(X, y, loss="squared", alpha=0.01, random_state=0, check_every=1,
                     solver="scd")
    assert isinstance(res, GLMResult)
    assert res.coef.shape == (A.shape[1],) and res.n_iter == len(res.objective)
    assert res.time >= res.times[-1] >= 0 and res.dual_coef is None and not res.dual
    # dual=None: the primal with an (unregularised) intercept, the dual without one
    nodual = fit_glm(X, y, loss="squared", alpha=0.01, fit_intercept=False, random_state=0,
                        solver="scd")
    assert nodual.dual and nodual.dual_coef.shape == (A.shape[0],)


# -- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite_features_are_rejected(bad):
    X, A, y = make_data()
    X = X.copy()
    X.data[5] = bad
    with pytest.raises(ValueError, match="X has a non-finite value"):
        fit_glm(X, y, loss="squared", alpha=0.1)
    Xd = X.toarray()
    with pytest.raises(ValueError, match="X has a non-finite value"):
        fit_glm(Xd, y, loss="squared", alpha=0.1)


def test_bad_labels_are_rejected():
    X, A, y = make_data(task="classification")
    for loss in ("logistic", "hinge"):
        with pytest.raises(ValueError, match=r"y must hold binary labels"):
            fit_glm(X, y + 1, loss=loss, alpha=0.1)  # {1, 2}
        with pytest.raises(ValueError, match=r"y must hold binary labels"):
            fit_glm(X, np.where(y > 0, 0.5, -1.0), loss=loss, alpha=0.1)
        with pytest.raises(ValueError, match="single class"):
            fit_glm(X, np.ones_like(y), loss=loss, alpha=0.1)
    yy = y.astype(float)
    yy[3] = np.nan
    with pytest.raises(ValueError, match="y has a non-finite value"):
        fit_glm(X, yy, loss="squared", alpha=0.1)
    with pytest.raises(ValueError, match="y has 299 entries but X has 300 examples"):
        fit_glm(X, y[:-1], loss="logistic", alpha=0.1)
    # {0, 1} and {-1, 1} give the same model
    r01 = fit_glm(X, y, loss="logistic", alpha=0.1, random_state=0)
    rpm = fit_glm(X, 2 * y - 1, loss="logistic", alpha=0.1, random_state=0)
    np.testing.assert_array_equal(r01.coef, rpm.coef)


def test_empty_and_malformed_input():
    with pytest.raises(ValueError, match="X is empty"):
        fit_glm(sp.csc_matrix((5, 0)), np.zeros(0), loss="squared", alpha=0.1)
    with pytest.raises(ValueError, match="X is empty"):
        fit_glm(sp.csc_matrix((0, 4)), np.zeros(4), loss="squared", alpha=0.1)
    X, A, y = make_data()
    with pytest.raises(TypeError, match="CSC"):
        fit_glm(X.tocsr(), y, loss="squared", alpha=0.1)
    with pytest.raises(TypeError, match="float32 and float64"):
        fit_glm(X.astype(np.int64), y, loss="squared", alpha=0.1)
    with pytest.raises(ValueError, match="alpha must be a positive"):
        fit_glm(X, y, loss="squared", alpha=0.0)
    with pytest.raises(ValueError, match="loss must be one of"):
        fit_glm(X, y, loss="poisson", alpha=0.1)
    with pytest.raises(ValueError, match="solver must be one of"):
        fit_glm(X, y, loss="squared", alpha=0.1, solver="sag")
    with pytest.raises(ValueError, match="max_iter must be a positive integer"):
        fit_glm(X, y, loss="squared", alpha=0.1, max_iter=0)
    yc = (y > 0).astype(int)
    with pytest.raises(ValueError, match="dual only"):
        fit_glm(X, yc, loss="hinge", alpha=0.1, dual=False)
    with pytest.raises(ValueError, match="primal only"):
        fit_glm(X, y, loss="squared", penalty="l1", alpha=0.1, dual=True)
    with pytest.raises(ValueError, match="not supported with loss='hinge'"):
        fit_glm(X, yc, loss="hinge", penalty="l1", alpha=0.1)


def test_callback_sees_every_check_and_can_stop():
    X, A, y = make_data(task="classification", seed=9)
    for dual in (False, True):
        seen = []

        def cb(it, w, b, seen=seen):
            seen.append((it, w.copy(), b))
            return it == 3

        res = fit_glm(X, y, loss="logistic", alpha=1e-2, dual=dual, tol=1e-14, max_iter=50,
                         random_state=0, callback=cb, check_every=1, solver="scd")
        assert [s[0] for s in seen] == [1, 2, 3] and res.n_iter == 3 and not res.converged
        np.testing.assert_array_equal(seen[-1][1], res.coef)
        assert seen[-1][2] == res.intercept


def test_dual_sweeps_between_full_ones_visit_the_moving_examples():
    from roofline.glm._scd import sweep_coords as _dual_sweep_coords

    rng = np.random.default_rng(0)
    last = rng.random(1000)
    for it in (1, 7, 13):  # full sweeps: a permutation of all examples
        c = _dual_sweep_coords(it, rng, last, 0.2, 6)
        assert c.dtype == np.int64
        np.testing.assert_array_equal(np.sort(c), np.arange(1000))
    c = _dual_sweep_coords(2, rng, last, 0.2, 6)
    np.testing.assert_array_equal(np.sort(c), np.sort(np.argsort(last)[-200:]))
    assert not np.array_equal(c, np.sort(c))  # in a random order
    # an active fraction of 1 is plain SDCA: every sweep is full
    np.testing.assert_array_equal(np.sort(_dual_sweep_coords(2, rng, last, 1.0, 6)),
                                  np.arange(1000))


@pytest.mark.parametrize("loss", ["logistic", "hinge", "squared"])
def test_dual_active_sweeps_reach_the_plain_optimum(loss):
    task = "regression" if loss == "squared" else "classification"
    X, A, y = make_data(task=task, seed=11, n=400)
    kw = dict(loss=loss, alpha=1e-2, dual=True, fit_intercept=False, tol=1e-10, max_iter=5000,
              random_state=0)
    plain = fit_glm(X, y, active_fraction=1.0, **kw)
    active = fit_glm(X, y, active_fraction=0.2, full_every=6, **kw)
    assert plain.converged and active.converged
    assert active.objective[-1] == pytest.approx(plain.objective[-1], rel=1e-8)
    np.testing.assert_allclose(active.coef, plain.coef, atol=1e-4)


@pytest.mark.parametrize("alpha", [1e-4, 2e-3, 5e-2])
def test_dual_warmup_raises_the_first_sweeps_regularisation(alpha, monkeypatch):
    """From alpha = 0 the dual's first sweep runs at the regularisation that brings the mean
    step curvature ||x_i||^2 / lam_n down to 2 (at most 8 times the problem's, never below it;
    the three alphas: capped at 8, ~4.7, none), the second at the problem's: the iterates
    equal two plain kernel sweeps at those regularisations."""

    monkeypatch.setattr(_scd, "_WARMUP_MIN_EXAMPLES", 0)  # small data, to follow each sweep
    X, A, y = make_data(task="classification", seed=3, n=400)
    n = X.shape[1]
    colsq = glm.cd.col_sqnorms(X)
    ys = np.where(y > 0, 1.0, -1.0)
    lam_n = alpha * n
    factor = min(max(colsq.mean() / lam_n / 2.0, 1.0), 8.0)
    kw = dict(loss="logistic", alpha=alpha, dual=True, fit_intercept=False, random_state=0,
              active_fraction=1.0, tol=1e-14, batch_sweeps=False)  # one draw per sweep
    for warmup, f in ((True, factor), (False, 1.0)):
        rng = np.random.default_rng(0)  # the solver's draws: one permutation per sweep
        a, v = np.zeros(n), np.zeros(X.shape[0])
        for it in (1, 2):
            glm.cd.dual_epoch(X, ys, a, v, rng.permutation(n).astype(np.int64), loss=1,
                               lam_n=lam_n * (f if it == 1 else 1.0), colsq=colsq)
            res = fit_glm(X, y, max_iter=it, warmup=warmup, **kw)
            np.testing.assert_allclose(res.dual_coef, a, rtol=1e-12, atol=1e-15)
            np.testing.assert_allclose(res.coef, v / lam_n, rtol=1e-9, atol=1e-12)
    if alpha == 5e-2:
        assert factor == 1.0
    else:
        assert factor > 4.0


def test_dual_warmup_needs_many_examples():
    """Below _WARMUP_MIN_EXAMPLES examples the first sweep runs at the problem's
    regularisation (on a few thousand examples the raised one cost sweeps)."""
    X, A, y = make_data(task="classification", seed=3, n=400)
    kw = dict(loss="logistic", alpha=1e-4, dual=True, fit_intercept=False, random_state=0,
              max_iter=3)
    np.testing.assert_array_equal(fit_glm(X, y, warmup=True, **kw).dual_coef,
                                  fit_glm(X, y, warmup=False, **kw).dual_coef)


def test_dual_warmup_only_where_features_are_hot(monkeypatch):
    """The warm-up sweep counters the overshoot on shared (hot) features: it runs where at
    least REORDER_MIN_HOT_MASS of the values lie in hot features, not on hashed data whose
    buckets are all rare (there it cost time), where the iterates are those of warmup=False."""

    monkeypatch.setattr(_scd, "_WARMUP_MIN_EXAMPLES", 0)
    rng = np.random.default_rng(4)
    n, d, k = 3000, 1 << 16, 12
    rows = rng.integers(0, d, size=n * k)
    X = sp.csc_matrix((np.ones(n * k), (rows, np.repeat(np.arange(n), k))), shape=(d, n))
    X.sum_duplicates()
    X.data[:] = 1.0
    y = (rng.random(n) < 0.5).astype(float)
    kw = dict(loss="logistic", alpha=1e-4, dual=True, fit_intercept=False, random_state=0,
              max_iter=3, batch_sweeps=False)
    hashed = fit_glm(X, y, warmup=True, **kw)
    assert hashed.info["warmup"] is False
    np.testing.assert_array_equal(hashed.dual_coef,
                                  fit_glm(X, y, warmup=False, **kw).dual_coef)
    Xh, _, yh = make_data(task="classification", seed=3, n=400)
    assert fit_glm(Xh, yh, warmup=True, **kw).info["warmup"] is True


@pytest.mark.slow
def test_dual_warmup_takes_fewer_sweeps_on_many_examples():
    """On 100k Criteo-like examples (C = 1: mean step curvature ~36) the warm-up sweep makes
    the duality-gap stop come sooner (measured 36 -> 31 sweeps to 1e-3), at the same optimum."""
    from roofline.datasources import make_criteo_like_matrix

    X, y = make_criteo_like_matrix(100_000, seed=0, n_bits=20)
    kw = dict(loss="logistic", alpha=1.0 / X.shape[1], dual=True, fit_intercept=False,
              tol=1e-3, max_iter=200, random_state=0, check_every=1, stall_switch=False)
    off = fit_glm(X, y, warmup=False, **kw)
    on = fit_glm(X, y, warmup=True, **kw)
    assert off.converged and on.converged
    assert on.n_iter <= off.n_iter - 3
    # both certified within 1e-3 of the same optimum
    assert abs(on.objective[-1] - off.objective[-1]) <= on.gap + off.gap


def test_dual_active_sweep_options_are_checked():
    X, A, y = make_data(task="classification", seed=1)
    for bad in (0, 1.5, -0.1, float("nan")):
        with pytest.raises(ValueError, match="active_fraction must be"):
            fit_glm(X, y, loss="logistic", alpha=0.1, active_fraction=bad)
    with pytest.raises(ValueError, match="full_every must be a positive integer"):
        fit_glm(X, y, loss="logistic", alpha=0.1, full_every=0)


@pytest.mark.parametrize("loss", ["logistic", "hinge"])
def test_tpa_dual_with_intercept_reaches_the_sequential_optimum(loss):
    """TPA-SCD's dual buffers the hot features and the constant feature per thread; with an
    intercept (the constant feature, regularised in the dual) it reaches SDCA's optimum."""
    X, A, y = make_data(task="classification", seed=12, n=500)
    kw = dict(loss=loss, alpha=1e-2, dual=True, fit_intercept=True, intercept_scaling=2.0,
              tol=1e-10, max_iter=3000, random_state=0)
    ref = fit_glm(X, y, **kw)
    res = fit_glm(X, y, solver="tpa-scd", n_jobs=3, **kw)
    assert ref.converged and res.converged
    assert res.objective[-1] == pytest.approx(ref.objective[-1], rel=1e-8)
    np.testing.assert_allclose(res.coef, ref.coef, atol=1e-4)
    assert res.intercept == pytest.approx(ref.intercept, abs=1e-4)


def test_sequential_dual_recomputes_v_sparingly_and_confirms_convergence(monkeypatch):
    """Sequential SDCA checks rebuild v = X alpha only every few checks (its float64 increments
    are exact to ~1e-12) but always before declaring convergence and at the last iteration."""
    import roofline.glm._problem as cdp
    import roofline.glm._scd as cds

    X, A, y = make_data(task="classification", seed=3)
    seen = []
    real = cdp.GLMProblem.dual_point
    monkeypatch.setattr(cdp.GLMProblem, "dual_point",
                        lambda self, a: (seen.append(a.copy()), real(self, a))[1])
    res = fit_glm(X, y, loss="logistic", alpha=1e-2, dual=True, tol=1e-15, max_iter=20,
                     random_state=0)
    assert not res.converged and res.n_iter == 20
    assert len(seen) <= 1 + 20 // cds._EXACT_EVERY + 1  # start, every few checks, the last
    np.testing.assert_array_equal(seen[-1], res.dual_coef)  # the last check was exact
    seen.clear()
    res = fit_glm(X, y, loss="logistic", alpha=1e-2, dual=True, tol=1e-8, max_iter=500,
                     fit_intercept=False, random_state=0)
    assert res.converged
    np.testing.assert_array_equal(seen[-1], res.dual_coef)  # declared on an exact v
    ref = LogisticRegression(C=1 / (1e-2 * X.shape[1]), fit_intercept=False, tol=1e-12,
                             max_iter=10_000).fit(A, y)
    np.testing.assert_allclose(res.coef, ref.coef_.ravel(), rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("solver", ["scd", "tpa-scd"])
def test_dual_on_one_hot_data_matches_sklearn(solver):
    """One-hot categorical examples (all values one: the dual sweeps skip reading them) mixed
    with examples that also hold a real-valued feature reach scikit-learn's optimum."""
    rng = np.random.default_rng(11)
    n, fields, cats = 400, 4, 6
    rows = np.arange(n).repeat(fields)
    cols = (rng.integers(0, cats, size=(n, fields)) + cats * np.arange(fields)).ravel()
    vals = np.ones(rows.size)
    real = np.flatnonzero(rng.random(n) < 0.4)  # these examples also hold a real value
    rows = np.concatenate([rows, real])
    cols = np.concatenate([cols, np.full(real.size, fields * cats)])
    vals = np.concatenate([vals, rng.normal(size=real.size)])
    A = sp.csr_matrix((vals, (rows, cols)), shape=(n, fields * cats + 1))
    eta = A @ rng.normal(size=A.shape[1])
    y = (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(np.int64)
    X = A.T.tocsc()
    res = fit_glm(X, y, loss="logistic", alpha=alpha_from_peer("C", 0.5, n), dual=True,
                     solver=solver, n_jobs=2, fit_intercept=False, tol=1e-12, max_iter=2000,
                     random_state=0)
    sk = LogisticRegression(C=0.5, tol=1e-12, max_iter=10_000, fit_intercept=False).fit(A, y)
    assert res.converged
    np.testing.assert_allclose(res.coef, sk.coef_[0], atol=1e-5)


@pytest.mark.parametrize("dual", [False, True])
def test_auto_checks_follow_the_coordinate_steps(dual):
    """check_every="auto" (the default) checks once the sweeps since the last check made one
    step per coordinate: after each full sweep and every 1 / active_fraction partial ones, and at
    the last iteration; steps, not seconds, so a seeded run is deterministic.  (The dual's
    batched sweeps, the default on small problems, check after each batch instead:
    test_batched_sweeps_check_after_each_batch.)"""
    X, A, y = make_data(task="classification", seed=9)
    kw = dict(loss="logistic", alpha=1e-2, dual=dual, fit_intercept=False, tol=1e-14,
              max_iter=12, random_state=0, active_fraction=0.25, full_every=4, solver="scd",
              batch_sweeps=False)
    runs = []
    for _ in range(2):
        seen = []
        res = fit_glm(X, y, callback=lambda it, w, b, seen=seen: seen.append(it), **kw)
        runs.append((seen, res))
    # full sweeps 1, 5, 9; three partial sweeps of a quarter between them make 3/4 of a step
    # per coordinate, so the next full sweep completes it
    assert runs[0][0] == [1, 5, 9, 12]
    assert runs[0][1].n_iter == 12 and len(runs[0][1].objective) == 4
    assert runs[1][0] == runs[0][0]
    np.testing.assert_array_equal(runs[1][1].coef, runs[0][1].coef)
    seen = []
    fit_glm(X, y, callback=lambda it, w, b: seen.append(it), **dict(kw, active_fraction=0.2,
                                                                      full_every=6))
    assert seen == [1, 6, 7, 12]  # five partial fifths complete a step per coordinate
    with pytest.raises(ValueError, match="check_every must be a positive integer or 'auto'"):
        fit_glm(X, y, loss="logistic", alpha=1e-2, check_every="often")


_WORKQUEUE_SCRIPT = """
import numpy as np, scipy.sparse as sp
from roofline.glm import fit_glm
rng = np.random.default_rng(0)
X = sp.random(200, 4000, density=0.05, format="csc", random_state=1)
y = np.where(rng.random(4000) < 0.5, -1.0, 1.0)
for solver, dual in (("cocoa", True), ("cocoa", False), ("hcocoa", True), ("scd", True)):
    r = fit_glm(X, y, loss="logistic", alpha=1e-3, solver=solver, dual=dual, n_jobs=4,
                   n_nodes=2 if solver == "hcocoa" else None, fit_intercept=False, max_iter=5,
                   tol=1e-12, random_state=0)
    assert np.isfinite(r.objective).all()
import numba
print("layer", numba.threading_layer())
"""


def test_threaded_workers_make_no_parallel_launch_under_workqueue():
    """CoCoA's in-process workers are threads: under numba's workqueue layer, which aborts the
    process when two threads launch parallel kernels at once, they must run serial kernels
    only (the single-process SCD may launch from the main thread)."""
    import subprocess
    import sys

    env = dict(os.environ, NUMBA_THREADING_LAYER="workqueue", NUMBA_NUM_THREADS="2")
    proc = subprocess.run([sys.executable, "-c", _WORKQUEUE_SCRIPT], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "layer workqueue" in proc.stdout


def test_options_object_equals_the_keyword_arguments():
    """fit_glm(options=GLMSolverOptions(...)) runs exactly what the same keyword arguments run;
    keyword arguments override the options' fields; unknown keywords are a TypeError."""
    from roofline.glm import GLMSolverOptions

    X, A, y = make_data(task="classification", seed=4)
    kw = dict(loss="logistic", alpha=1e-2, random_state=0)
    for settings in (dict(solver="scd", dual=True, max_iter=7, tol=1e-12, check_every=2),
                     dict(solver="cocoa", n_workers=3, max_iter=5, tol=1e-12, dual=False),
                     dict(solver="tpa-scd", n_jobs=2, tpa_mode="replica", max_iter=4,
                          tol=1e-12, dual=True)):
        with pytest.warns(ConvergenceWarning):
            by_kw = fit_glm(X, y, **kw, **settings)
        with pytest.warns(ConvergenceWarning):
            by_opts = fit_glm(X, y, **kw, options=GLMSolverOptions(**settings))
        np.testing.assert_array_equal(by_opts.coef, by_kw.coef)
        assert by_opts.intercept == by_kw.intercept and by_opts.n_iter == by_kw.n_iter
    opts = GLMSolverOptions(solver="scd", max_iter=3, tol=1e-12, dual=True)
    with pytest.warns(ConvergenceWarning):
        res = fit_glm(X, y, **kw, options=opts, max_iter=5)  # the keyword wins
    assert res.n_iter == 5 and opts.max_iter == 3
    with pytest.raises(TypeError, match="unexpected keyword argument.*'max_iters'"):
        fit_glm(X, y, **kw, max_iters=5)
    with pytest.raises(TypeError, match="options must be a GLMSolverOptions"):
        fit_glm(X, y, **kw, options={"max_iter": 5})
    with pytest.raises(ValueError, match="option 'solver' must be one of"):
        GLMSolverOptions(solver="lbfgs")
    assert GLMSolverOptions.from_toml(opts.to_toml()) == opts


def test_shrinking_skips_coordinates_held_at_a_bound_between_full_sweeps():
    from roofline.glm._scd import sweep_coords

    rng = np.random.default_rng(0)
    last = rng.random(1000)
    last[:900] = 0.0  # 900 coordinates did not move: held at a bound
    c = sweep_coords(2, rng, last, 0.2, 6, shrinking=True)
    np.testing.assert_array_equal(np.sort(c), np.arange(900, 1000))  # only the 100 movers
    c = sweep_coords(2, rng, last, 0.2, 6, shrinking=False)
    assert c.size == 200  # the 100 movers and 100 of the others
    assert sweep_coords(7, rng, last, 0.2, 6, shrinking=True).size == 1000  # full sweep
    assert sweep_coords(2, rng, np.zeros(50), 0.2, 6, shrinking=True).size == 50


@pytest.mark.parametrize("loss,penalty", [("hinge", "l2"), ("squared", "l1")])
def test_shrinking_reaches_the_same_optimum(loss, penalty):
    task = "regression" if loss == "squared" else "classification"
    X, A, y = make_data(task=task, seed=12, n=400)
    kw = dict(loss=loss, penalty=penalty, alpha=2e-2, fit_intercept=False, tol=1e-9,
              max_iter=20000, random_state=0, solver="scd")
    on = fit_glm(X, y, shrinking=True, **kw)
    off = fit_glm(X, y, shrinking=False, **kw)
    assert on.converged and off.converged
    assert on.objective[-1] == pytest.approx(off.objective[-1], rel=1e-8)


@pytest.mark.parametrize("loss", ["logistic", "hinge"])
def test_dual_renumbers_the_features_only_where_some_are_hot(loss, monkeypatch):
    """The one-thread dual renumbers the features by frequency on power-law data, not on
    hashed-like data whose features are all rare, nor where there are too few features for
    the numbering to matter (REORDER_MIN_FEATURES); the fit is the same either way."""
    from roofline.glm import _fit

    rng = np.random.default_rng(21)
    n, d = 3000, 1 << 16
    rows = rng.integers(0, d, size=(n, 12))  # hashed: every feature rare
    Xh = sp.csc_matrix((np.ones(rows.size), (rows.ravel(), np.repeat(np.arange(n), 12))),
                       shape=(d, n))
    Xh.sum_duplicates()
    Xh.data[:] = 1.0
    Xp = powerlaw_matrix(8000, n, 12.0, seed=3)
    Xs = powerlaw_matrix(_fit.REORDER_MIN_FEATURES, n, 12.0, seed=3)  # as hot, fewer features
    y = np.where(rng.random(n) < 0.4, 1.0, 0.0)
    kw = dict(loss=loss, alpha=1e-3, solver="scd", tol=1e-9, random_state=0,
              fit_intercept=False)
    rh = fit_glm(Xh, y, **kw)
    rp = fit_glm(Xp, y, **kw)
    assert not rh.info["reordered"] and rp.info["reordered"]
    assert not fit_glm(Xs, y, **kw).info["reordered"]
    monkeypatch.setattr(_fit, "REORDER_MIN_HOT_MASS", 0.0)  # always renumber
    rh2 = fit_glm(Xh, y, **kw)
    assert rh2.info["reordered"]
    np.testing.assert_allclose(rh2.coef, rh.coef, rtol=1e-9, atol=1e-12)
    assert rh2.objective[-1] == pytest.approx(rh.objective[-1], rel=1e-12)
