"""Ridge's scikit-learn parameters (issue 34): ``positive=True``, scikit-learn's solver names,
a per-target ``alpha``; each against scikit-learn (and, for ``positive``, the exact optimum by
:func:`scipy.optimize.nnls`) on the same call."""

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import nnls
from sklearn import linear_model as sklm
from sklearn.base import clone

from roofline.learners import LinearRegression, Ridge


def _data(n_targets=1, n=300, d=15, seed=0):
    """A linear model with coefficients of both signs (so that ``w >= 0`` binds)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) + rng.normal(size=d)  # not centred: the intercept matters
    W = rng.normal(scale=10.0, size=(d, n_targets))
    y = X @ W + 5.0 + rng.normal(size=(n, n_targets))
    sw = rng.uniform(0.5, 2.0, n)
    return X, (y[:, 0] if n_targets == 1 else y), sw


def _nnls_ridge(X, y, sw, alpha, fit_intercept=True):
    """The exact optimum of ``sum_i s_i (x_i w + b - y_i)^2 + alpha ||w||^2``, ``w >= 0``:
    NNLS of the weighted, centred data stacked over ``sqrt(alpha) I`` (the intercept, free,
    is the weighted means' difference)."""
    d = X.shape[1]
    mx = np.average(X, axis=0, weights=sw) if fit_intercept else np.zeros(d)
    my = np.average(y, weights=sw) if fit_intercept else 0.0
    A = np.vstack([np.sqrt(sw)[:, None] * (X - mx), np.sqrt(alpha) * np.eye(d)])
    w, _ = nnls(A, np.r_[np.sqrt(sw) * (y - my), np.zeros(d)], maxiter=50 * d)
    return w, my - mx @ w


def _scale(coef):
    return max(np.abs(coef).max(), 1.0)


@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("n_targets", [1, 2])
def test_positive_matches_nnls_and_sklearn(n_targets, sparse, fit_intercept):
    X, y, sw = _data(n_targets)
    Xin = sp.csr_matrix(X) if sparse else X
    ours = Ridge(alpha=3.0, positive=True, fit_intercept=fit_intercept, tol=1e-14,
                 max_iter=1000).fit(Xin, y, sample_weight=sw)
    sk = sklm.Ridge(alpha=3.0, positive=True, fit_intercept=fit_intercept,
                    tol=1e-12).fit(X, y, sample_weight=sw)
    assert ours.solver_ == "lbfgs-b"
    assert ours.coef_.shape == sk.coef_.shape
    Y = y.reshape(-1, 1) if n_targets == 1 else y
    coef, icpt = np.atleast_2d(ours.coef_), np.atleast_1d(ours.intercept_)
    for t in range(n_targets):
        w, b = _nnls_ridge(X, Y[:, t], sw, 3.0, fit_intercept)
        assert (w == 0).sum() >= 1  # the constraint is active: the test can fail
        np.testing.assert_allclose(coef[t], w, rtol=0, atol=1e-7 * _scale(w))
        np.testing.assert_array_equal(coef[t] == 0, w == 0)  # the same zeros
        assert abs(icpt[t] - b) <= 1e-7 * _scale(w)
    # scikit-learn's own lbfgs stops ~4e-7 (relative) from the exact optimum
    np.testing.assert_allclose(ours.coef_, sk.coef_, rtol=0, atol=1e-6 * _scale(sk.coef_))
    np.testing.assert_allclose(ours.intercept_, sk.intercept_, rtol=0,
                               atol=1e-6 * _scale(sk.coef_))
    assert (ours.coef_ >= 0).all()


def test_positive_changes_the_fit_and_float32():
    """Without ``positive`` some coefficients are negative (so the test above can fail); a
    float32 ``X`` gives float32 ``coef_`` as scikit-learn's."""
    X, y, sw = _data()
    assert (Ridge(alpha=3.0).fit(X, y).coef_ < 0).any()
    X32 = X.astype(np.float32)
    ours = Ridge(alpha=3.0, positive=True, tol=1e-10, max_iter=1000).fit(X32, y)
    sk = sklm.Ridge(alpha=3.0, positive=True, tol=1e-12).fit(X32, y)
    assert ours.coef_.dtype == sk.coef_.dtype == np.float32
    assert type(ours.intercept_) is type(sk.intercept_)
    w, _ = _nnls_ridge(X32.astype(np.float64), y, np.ones(len(y)), 3.0)
    np.testing.assert_allclose(ours.coef_, w, rtol=0, atol=2e-6 * _scale(w))


def test_positive_alpha_zero_is_nnls_and_warm_start():
    X, y, sw = _data(d=8)
    ours = Ridge(alpha=0.0, positive=True, tol=1e-10, max_iter=2000).fit(X, y)
    w, b = _nnls_ridge(X, y, np.ones(len(y)), 0.0)
    np.testing.assert_allclose(ours.coef_, w, rtol=0, atol=1e-7 * _scale(w))
    warm = Ridge(alpha=0.0, positive=True, tol=1e-7, max_iter=2000, warm_start=True)
    warm.fit(X, y)
    n_cold = warm.n_iter_
    warm.fit(X, y)
    assert warm.n_iter_ < n_cold
    np.testing.assert_allclose(warm.coef_, w, rtol=0, atol=1e-7 * _scale(w))


@pytest.mark.parametrize("solver", ["sparse_cg", "svd", "saga"])
def test_positive_needs_auto_or_lbfgs(solver):
    X, y, _ = _data()
    with pytest.raises(ValueError, match="positive=True needs solver 'auto' or 'lbfgs'"):
        Ridge(positive=True, solver=solver).fit(X, y)
    with pytest.raises(ValueError, match="positive must be a bool"):
        Ridge(positive="yes").fit(X, y)
    assert not hasattr(Ridge(positive=True), "partial_fit")  # auto / lbfgs have none


@pytest.mark.parametrize("name, row", [("auto", None), ("svd", "cholesky"),
                                       ("cholesky", "cholesky"), ("lsqr", "newton"),
                                       ("sparse_cg", "newton"), ("sag", None),
                                       ("saga", None), ("lbfgs", "lbfgs")])
@pytest.mark.parametrize("sparse", [False, True])
def test_sklearn_solver_names_reach_sklearns_optimum(name, row, sparse):
    X, y, sw = _data()
    Xin = sp.csr_matrix(X) if sparse else X
    ours = Ridge(alpha=3.0, solver=name, tol=1e-14, max_iter=2000).fit(Xin, y,
                                                                       sample_weight=sw)
    sk = sklm.Ridge(alpha=3.0, solver="svd").fit(X, y, sample_weight=sw)
    if row is not None:
        assert ours.solver_ == row
    atol = (1e-6 if name == "lbfgs" else 1e-8) * _scale(sk.coef_)
    np.testing.assert_allclose(ours.coef_, sk.coef_, rtol=0, atol=atol)
    np.testing.assert_allclose(ours.intercept_, sk.intercept_, rtol=0, atol=atol)


def test_svd_beyond_the_cholesky_rows_limit_runs_newton():
    rng = np.random.default_rng(0)
    X = sp.random(300, 2049, density=0.01, format="csr", random_state=1)
    y = rng.normal(size=300)
    ours = Ridge(alpha=1.0, solver="svd", tol=1e-14, max_iter=500).fit(X, y)
    assert ours.solver_ == "newton"
    sk = sklm.Ridge(alpha=1.0, solver="sparse_cg", tol=1e-12, max_iter=100_000).fit(X, y)
    np.testing.assert_allclose(ours.coef_, sk.coef_, rtol=0, atol=1e-7 * _scale(sk.coef_))


def test_unknown_solver_name_raises_naming_both_lists():
    X, y, _ = _data()
    with pytest.raises(ValueError, match=r"solver must be one of scikit-learn's .*'sparse_cg'.*"
                                         r"or the registry's .*'scd'.*got 'qr'"):
        Ridge(solver="qr").fit(X, y)


@pytest.mark.parametrize("sparse", [False, True])
def test_per_target_alpha_matches_sklearn(sparse):
    X, y, sw = _data(n_targets=3)
    Xin = sp.csr_matrix(X) if sparse else X
    alpha = np.array([0.1, 10.0, 300.0])
    ours = Ridge(alpha=alpha, tol=1e-14, max_iter=1000).fit(Xin, y, sample_weight=sw)
    sk = sklm.Ridge(alpha=alpha, solver="svd").fit(X, y, sample_weight=sw)
    assert ours.coef_.shape == (3, 15) and ours.intercept_.shape == (3,)
    np.testing.assert_allclose(ours.coef_, sk.coef_, rtol=0, atol=1e-8 * _scale(sk.coef_))
    np.testing.assert_allclose(ours.intercept_, sk.intercept_, rtol=0,
                               atol=1e-8 * _scale(sk.coef_))
    # each target is its own fit: not the fit with any one of the alphas
    assert np.abs(ours.coef_[2] - Ridge(alpha=0.1).fit(X, y).coef_[2]).max() > 1.0
    # one alpha in a length-1 array is every target's; positive with a per-target alpha
    one = Ridge(alpha=[3.0], tol=1e-14).fit(X, y)
    np.testing.assert_allclose(one.coef_, Ridge(alpha=3.0, tol=1e-14).fit(X, y).coef_,
                               rtol=0, atol=1e-10 * _scale(sk.coef_))
    pos = Ridge(alpha=alpha, positive=True, tol=1e-14, max_iter=1000).fit(X, y)
    skp = sklm.Ridge(alpha=alpha, positive=True, tol=1e-12).fit(X, y)
    np.testing.assert_allclose(pos.coef_, skp.coef_, rtol=0, atol=1e-6 * _scale(skp.coef_))


def test_per_target_alpha_errors_and_clone():
    X, y, _ = _data(n_targets=3)
    with pytest.raises(ValueError, match="alpha has 2 values for 3 targets"):
        Ridge(alpha=[1.0, 2.0]).fit(X, y)
    with pytest.raises(ValueError, match="alpha must hold non-negative finite floats"):
        Ridge(alpha=[1.0, -2.0, 1.0]).fit(X, y)
    with pytest.raises(ValueError, match="alpha must be a float or an array"):
        Ridge(alpha=["a", "b", "c"]).fit(X, y)
    with pytest.raises(ValueError, match="partial_fit needs one alpha for every target"):
        Ridge(alpha=[1.0, 2.0, 3.0], solver="sgd").partial_fit(X, y)
    est = Ridge(alpha=np.array([1.0, 2.0, 3.0]), positive=True, solver="sparse_cg")
    c = clone(est)
    assert c.get_params()["solver"] == "sparse_cg" and c.get_params()["positive"] is True
    np.testing.assert_array_equal(c.alpha, est.alpha)


@pytest.mark.parametrize("sparse", [False, True])
def test_linear_regression_positive_matches_sklearn_nnls(sparse):
    """LinearRegression(positive=True): scikit-learn solves NNLS exactly; ours (Ridge's
    bounded L-BFGS-B with alpha=0) agrees to 1e-8 with the same zeros."""
    X, y, sw = _data(d=10, seed=3)
    Xin = sp.csr_matrix(X) if sparse else X
    ours = LinearRegression(positive=True, tol=1e-10, max_iter=2000).fit(Xin, y,
                                                                         sample_weight=sw)
    sk = sklm.LinearRegression(positive=True).fit(X, y, sample_weight=sw)
    assert (sk.coef_ == 0).sum() >= 1 and ours.solver_ == "lbfgs-b"
    np.testing.assert_array_equal(ours.coef_ == 0, sk.coef_ == 0)
    np.testing.assert_allclose(ours.coef_, sk.coef_, rtol=0, atol=1e-8 * _scale(sk.coef_))
    assert abs(ours.intercept_ - sk.intercept_) <= 1e-8 * _scale(sk.coef_)
    with pytest.raises(ValueError, match="positive=True needs solver 'auto' or 'lbfgs'"):
        LinearRegression(positive=True, solver="sgd").fit(X, y)
