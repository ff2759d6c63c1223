"""choose_solver (learners/_auto.py): its decisions on representative problems, and that the
solver it picks for the suite's hard classes reaches the optimum."""

import numpy as np
import pytest
import scipy.sparse as sp

from roofline.learners._auto import (
    DUAL_MAX_C,
    DUAL_MAX_NNZ_PER_EXAMPLE,
    DUAL_MIN_EXAMPLES,
    choose_solver,
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
    rng = np.random.default_rng(0)
    for X in (_dense(569, 30, rng), _dense(5000, 101, rng), _hashed(2000, 50_000, 60, rng)):
        n = X.shape[1]
        for fi in (False, True):
            solver, reason = choose_solver(X, loss=loss, alpha=1 / (C * n), fit_intercept=fi)
            assert solver == "newton", reason
            assert "Newton" in reason


def test_nonsmooth_and_l1_get_scd():
    X = _dense(100, 5, np.random.default_rng(1))
    assert choose_solver(X, loss="hinge", alpha=1e-3)[0] == "scd"
    assert choose_solver(X, loss="logistic", penalty="l1", alpha=1e-3)[0] == "scd"
    assert choose_solver(X, loss="squared", penalty="l1", alpha=1e-3)[0] == "scd"


def test_large_sparse_strongly_regularised_gets_the_dual():
    rng = np.random.default_rng(2)
    n = DUAL_MIN_EXAMPLES
    X = _hashed(n, 1 << 20, 39, rng)
    strong = 1 / (0.3 * n)  # C = 0.3, the CTR setting
    assert choose_solver(X, loss="logistic", alpha=strong, fit_intercept=False)[0] == "scd"
    # each condition of the rule matters
    weak = 1 / (10 * DUAL_MAX_C * n)
    assert choose_solver(X, loss="logistic", alpha=weak, fit_intercept=False)[0] == "newton"
    assert choose_solver(X, loss="logistic", alpha=strong, fit_intercept=True)[0] == "newton"
    assert choose_solver(X[:, : n // 2], loss="logistic", alpha=strong,
                         fit_intercept=False)[0] == "newton"
    dense_rows = _hashed(n // 100, 1 << 12, DUAL_MAX_NNZ_PER_EXAMPLE + 50, rng)
    assert choose_solver(dense_rows, loss="logistic", alpha=1.0, fit_intercept=False)[0] \
        == "newton"


def test_rejects_unknown_loss_and_penalty():
    X = np.ones((2, 3))
    with pytest.raises(ValueError, match="loss"):
        choose_solver(X, loss="poisson", alpha=1.0)
    with pytest.raises(ValueError, match="penalty"):
        choose_solver(X, loss="logistic", penalty="elasticnet", alpha=1.0)


def test_the_choice_solves_a_wild_scales_problem():
    """The class where the dual CD never reached 1e-3 in the suite: what auto picks must."""
    from sklearn.linear_model import LogisticRegression

    from roofline.learners._newton import fit_newton

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
