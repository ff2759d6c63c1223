"""choose_solver (glm/_auto.py): its decisions on representative problems, and that the
solver it picks for the suite's hard classes reaches the optimum."""

import numpy as np
import pytest
import scipy.sparse as sp

from roofline import gmat
from roofline.glm._auto import (
    CHOLESKY_AUTO_FEATURES,
    DUAL_MAX_C,
    DUAL_MAX_DENSITY,
    DUAL_MAX_HOT_MASS,
    DUAL_MAX_NNZ_PER_EXAMPLE,
    DUAL_MIN_EXAMPLES,
    HOT_FEATURE_FRACTION,
    choose_solver,
    hot_mass,
)


def _dense(n, d, rng):
    return rng.standard_normal((d, n))


def _hashed(n, d, per, rng):
    rows = rng.integers(0, d, n * per)
    cols = np.repeat(np.arange(n), per)
    X = sp.csc_matrix((np.ones(n * per), (rows, cols)), shape=(d, n))
    X.sum_duplicates()
    return X


@pytest.mark.parametrize("loss", ["logistic", "squared", "squared_hinge"])
@pytest.mark.parametrize("C", [0.01, 1.0, 100.0])
def test_smooth_small_and_dense_problems_get_newton(loss, C):
    """Newton, except ridge with few features: the normal equations (cholesky)."""
    rng = np.random.default_rng(0)
    for X in (_dense(569, 30, rng), _dense(5000, 101, rng), _hashed(2000, 50_000, 60, rng)):
        d, n = X.shape
        for fi in (False, True):
            solver, reason = choose_solver(X, loss=loss, alpha=1 / (C * n), fit_intercept=fi)
            if loss == "squared" and d <= CHOLESKY_AUTO_FEATURES:
                assert solver == "cholesky" and "Cholesky" in reason
            else:
                assert solver == "newton", reason
                assert "Newton" in reason


def test_nonsmooth_and_l1_get_scd():
    X = _dense(100, 5, np.random.default_rng(1))
    assert choose_solver(X, loss="hinge", alpha=1e-3)[0] == "scd"
    # L1 / the elastic net with few features: proximal Newton on the Gram matrix
    for loss in ("logistic", "squared"):
        for penalty in ("l1", "elasticnet"):
            solver, reason = choose_solver(X, loss=loss, penalty=penalty, alpha=1e-3)
            assert solver == "prox-newton" and "proximal Newton" in reason
    # more features than examples, or the squared hinge: primal coordinate descent
    wide = _dense(20, 50, np.random.default_rng(2))
    assert choose_solver(wide, loss="squared", penalty="l1", alpha=1e-3)[0] == "scd"
    assert choose_solver(wide, loss="squared", penalty="elasticnet", alpha=1e-3)[0] == "scd"
    assert choose_solver(wide, loss="logistic", penalty="elasticnet", alpha=1e-3)[0] == "scd"
    # ... but the logistic L1 with more features than examples: newGLMNET over the columns
    solver, reason = choose_solver(wide, loss="logistic", penalty="l1", alpha=1e-3)
    assert solver == "prox-newton" and "more features" in reason
    assert choose_solver(X, loss="squared_hinge", penalty="l1", alpha=1e-3)[0] == "scd"
    # beyond PROX_NEWTON_AUTO_FEATURES (the Gram matrix's n d^2): scd
    tall = _dense(400, 300, np.random.default_rng(3))
    assert choose_solver(tall, loss="logistic", penalty="elasticnet", alpha=1e-3)[0] == "scd"
    assert choose_solver(tall, loss="squared", penalty="l1", alpha=1e-3)[0] == "scd"
    assert choose_solver(tall[:256], loss="logistic", penalty="elasticnet",
                         alpha=1e-3)[0] == "prox-newton"


def test_large_sparse_strongly_regularised_gets_the_dual():
    rng = np.random.default_rng(2)
    n = DUAL_MIN_EXAMPLES
    X = _hashed(n, 1 << 20, 39, rng)
    strong = 1 / (0.3 * n)  # C = 0.3, the CTR setting
    assert choose_solver(X, loss="logistic", alpha=strong, fit_intercept=False)[0] == "scd"
    # each condition of the rule matters; weak regularisation: the dual only where the
    # examples share few features (uniformly hashed), not on power-law data
    weak = 1 / (10 * DUAL_MAX_C * n)
    solver, reason = choose_solver(X, loss="logistic", alpha=weak, fit_intercept=False)
    assert solver == "scd" and "sharing few features" in reason
    Z = gmat.powerlaw_csc(1 << 20, n, 39, dtype=np.float64, random_state=3)
    assert hot_mass(Z) > DUAL_MAX_HOT_MASS
    assert choose_solver(Z, loss="logistic", alpha=strong, fit_intercept=False)[0] == "scd"
    assert choose_solver(Z, loss="logistic", alpha=weak, fit_intercept=False)[0] == "newton"
    # with an intercept too (issue 34: the dual keeps it unregularised)
    assert choose_solver(X, loss="logistic", alpha=strong, fit_intercept=True)[0] == "scd"
    assert choose_solver(X[:, : n // 2], loss="logistic", alpha=strong,
                         fit_intercept=False)[0] == "newton"
    dense_rows = _hashed(n // 100, 1 << 12, DUAL_MAX_NNZ_PER_EXAMPLE + 50, rng)
    assert choose_solver(dense_rows, loss="logistic", alpha=1.0, fit_intercept=False)[0] \
        == "newton"


def test_large_dense_problems_with_few_features_get_newton():
    """The suite's "wild scales" / "1% positives" shape: many examples, strong
    regularisation, but every feature in every example: not the dual's regime."""
    X = _dense(DUAL_MIN_EXAMPLES, 51, np.random.default_rng(5))
    n = X.shape[1]
    solver, reason = choose_solver(X, loss="logistic", alpha=1 / (0.01 * n),
                                   fit_intercept=False)
    assert solver == "newton", reason
    assert DUAL_MAX_DENSITY < 1.0


def test_rejects_unknown_loss_and_penalty():
    X = np.ones((2, 3))
    with pytest.raises(ValueError, match="loss"):
        choose_solver(X, loss="poisson", alpha=1.0)
    with pytest.raises(ValueError, match="penalty"):
        choose_solver(X, loss="logistic", penalty="l3", alpha=1.0)


def test_the_choice_solves_a_wild_scales_problem():
    """The class where the dual CD never reached 1e-3 in the suite: what auto picks must."""
    from sklearn.linear_model import LogisticRegression

    from roofline.glm._newton import fit_newton

    rng = np.random.default_rng(3)
    n, d = 2000, 20
    B = rng.standard_normal((n, d))
    y = (rng.random(n) < 1 / (1 + np.exp(-B @ rng.standard_normal(d) / 2))).astype(float)
    A = B * 10.0 ** rng.uniform(-3, 3, d)
    alpha = 1 / (100 * n)
    solver, _ = choose_solver(A.T, loss="logistic", alpha=alpha, fit_intercept=True)
    assert solver == "newton"
    r = fit_newton(np.ascontiguousarray(A.T), y, loss="logistic", alpha=alpha, tol=1e-10)
    sk = LogisticRegression(C=100, tol=1e-12, max_iter=100_000).fit(A, y)
    z = A @ sk.coef_.ravel() + sk.intercept_[0]
    P_sk = np.logaddexp(0, -np.where(y > 0, 1, -1) * z).mean() + 0.5 * alpha * (sk.coef_**2).sum()
    assert r.converged
    assert r.objective[-1] <= P_sk * (1 + 1e-8)


# -- wired into fit_glm and the estimators ---------------------------------------------------


def _badly_scaled(seed=0, n=600, d=15):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * np.logspace(-2, 2, d)
    y = np.where(X[:, 0] / 0.01 + rng.standard_normal(n) > 0, 1, 0)
    return X, y


def test_fit_glm_cd_auto_runs_newton_and_reports_it():
    from roofline.glm import fit_glm

    X, y = _badly_scaled()
    auto = fit_glm(X.T, y, loss="logistic", alpha=1e-3, solver="auto", tol=1e-8)
    scd = fit_glm(X.T, y, loss="logistic", alpha=1e-3, solver="scd", tol=1e-8,
                     max_iter=5000)
    assert auto.solver == "newton" and "Newton" in auto.info["auto_reason"]
    assert auto.objective[-1] == pytest.approx(scd.objective[-1], rel=1e-7)
    with pytest.raises(ValueError, match="solver='newton' needs penalty='l2'"):
        fit_glm(X.T, y, loss="logistic", alpha=1e-3, solver="newton", penalty="l1")
    hinge = fit_glm(X.T, y, loss="hinge", alpha=1e-2, solver="auto", max_iter=3000)
    assert hinge.solver == "scd"


def _objective(est, kw, X, t, coef, b):
    """scikit-learn's objective of the estimator at ``(coef, b)``."""
    eta = X @ coef + b
    if est == "Ridge":
        return float(((t - eta) ** 2).sum() + kw["alpha"] * coef @ coef)
    ys = np.where(t > 0, 1.0, -1.0)
    if est == "LogisticRegression":
        losses = np.logaddexp(0.0, -ys * eta)
    else:
        losses = np.maximum(0.0, 1.0 - ys * eta) ** 2
    return float(kw["C"] * losses.sum() + 0.5 * coef @ coef)


@pytest.mark.parametrize("est,kw", [("LogisticRegression", {"C": 1.0}),
                                    ("Ridge", {"alpha": 2.0}),
                                    ("LinearSVC", {"C": 0.5})])
def test_estimators_solver_newton_and_auto_reach_the_optimum(est, kw):
    """On badly scaled features (1e-2 .. 1e2): Newton's objective is at least as low as
    scikit-learn's well-converged fit (Ridge: the exact Cholesky solution)."""
    import sklearn.linear_model as sklm

    from roofline import learners

    X, y = _badly_scaled()
    t = y if est != "Ridge" else X[:, 0] + y
    ref = {"LogisticRegression": lambda: sklm.LogisticRegression(C=kw["C"], tol=1e-12,
                                                                 max_iter=100000),
           "Ridge": lambda: sklm.Ridge(alpha=kw["alpha"], solver="cholesky"),
           "LinearSVC": lambda: learners.LinearSVC(solver="lbfgs", tol=1e-12, max_iter=20000,
                                                   **kw)}[est]().fit(X, t)
    best = _objective(est, kw, X, t, ref.coef_.ravel(), float(np.ravel(ref.intercept_)[0]))
    for solver in ("newton", "auto") + (("cholesky",) if est == "Ridge" else ()):
        m = getattr(learners, est)(solver=solver, tol=1e-10, max_iter=500, **kw).fit(X, t)
        assert m.solver_ == ("cholesky" if est == "Ridge" and solver != "newton" else "newton")
        got = _objective(est, kw, X, t, m.coef_.ravel(), float(np.ravel(m.intercept_)[0]))
        assert got <= best * (1 + 1e-9), (got, best)


def test_auto_with_sample_weights_runs_weighted_newton():
    """Integer weights give the model of the repeated rows, and scikit-learn's weighted
    optimum; the hinge (no Newton) falls back to lbfgs."""
    import sklearn.linear_model as sklm

    from roofline.learners import LinearSVC, LogisticRegression

    X, y = _badly_scaled(n=300)
    w = np.random.default_rng(1).integers(0, 4, y.size).astype(float)
    m = LogisticRegression(solver="auto", tol=1e-10).fit(X, y, sample_weight=w)
    assert m.solver_ == "newton"
    rep = np.repeat(np.arange(y.size), w.astype(int))
    r = LogisticRegression(solver="auto", tol=1e-10).fit(X[rep], y[rep])
    np.testing.assert_allclose(m.coef_, r.coef_, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(m.intercept_, r.intercept_, rtol=1e-7, atol=1e-9)
    sk = sklm.LogisticRegression(tol=1e-12, max_iter=100000).fit(X, y, sample_weight=w)
    ours = _objective("LogisticRegression", {"C": 1.0}, X[rep], y[rep], m.coef_.ravel(),
                      float(m.intercept_[0]))
    theirs = _objective("LogisticRegression", {"C": 1.0}, X[rep], y[rep], sk.coef_.ravel(),
                        float(sk.intercept_[0]))
    assert ours <= theirs * (1 + 1e-9)
    h = LinearSVC(loss="hinge", solver="auto", max_iter=50).fit(X, y, sample_weight=w + 0.5)
    assert h.solver_ == "lbfgs"


def test_auto_over_a_communicator_runs_newton_or_cocoa():
    """comm=: distributed Newton for a smooth loss with L2 (its iterations do not grow with
    the ranks), CoCoA+ for the hinge, L1, or when the dual is asked for."""
    from roofline.comm import from_environment
    from roofline.glm import fit_glm

    X, y = _badly_scaled()
    with from_environment() as comm:  # a group of one
        assert choose_solver(X.T, loss="logistic", alpha=1e-3, comm=comm)[0] == "newton"
        assert choose_solver(X.T, loss="hinge", alpha=1e-3, comm=comm)[0] == "cocoa"
        assert choose_solver(X.T, loss="logistic", penalty="l1", alpha=1e-3,
                             comm=comm)[0] == "cocoa"
        res_n = fit_glm(X.T, y, loss="logistic", alpha=1e-1, solver="auto", comm=comm)
        ref = fit_glm(X.T, y, loss="logistic", alpha=1e-1, solver="newton")
        assert res_n.solver == "newton" and "comm=" in res_n.info["auto_reason"]
        np.testing.assert_allclose(res_n.coef, ref.coef, rtol=1e-8, atol=1e-12)
        res = fit_glm(X.T, y, loss="logistic", alpha=1e-1, solver="auto", comm=comm,
                         dual=True, fit_intercept=False, max_iter=3000)
    assert res.solver == "cocoa" and "comm=" in res.info["auto_reason"]


def test_hot_mass_counts_the_values_of_frequent_features():
    """hot_mass: the share of stored values in features of at least HOT_FEATURE_FRACTION of
    the examples, the same for CSC, CSR and dense input; 0 without values."""
    n = 1000
    rows = np.r_[np.zeros(n, np.int64), np.arange(1, 301)]  # feature 0 in every example
    cols = np.r_[np.arange(n), np.arange(300)]  # features 1..300 once each
    X = sp.csc_matrix((np.ones(rows.size), (rows, cols)), shape=(400, n))
    assert HOT_FEATURE_FRACTION * n > 1
    assert hot_mass(X) == pytest.approx(n / (n + 300))
    assert hot_mass(X.tocsr()) == hot_mass(X) == hot_mass(X.toarray())
    assert hot_mass(sp.csc_matrix((5, 7))) == 0.0
