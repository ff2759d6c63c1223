"""The proximal Newton solver (glm/_prox_newton.py, newGLMNET) against scikit-learn's
liblinear (L1), saga (the elastic net) and Lasso, on the Gram path (few features) and the
column path (sparse, more features than examples)."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_breast_cancer
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import Lasso, LogisticRegression

from roofline.glm import choose_solver, fit_glm
from roofline.glm._prox_newton import fit_prox_newton

NAME = "prox-newton"


def _objective(A, y01, w, b, alpha, r=1.0, loss="logistic"):
    """Mean loss + alpha (r |w|_1 + (1 - r) |w|^2 / 2), examples as rows of ``A``."""
    z = A @ w + b
    if loss == "logistic":
        L = np.mean(np.logaddexp(0.0, -np.where(y01 > 0, 1.0, -1.0) * z))
    else:
        L = 0.5 * np.mean((z - y01) ** 2)
    return float(L + alpha * (r * np.abs(w).sum() + 0.5 * (1 - r) * (w @ w)))


def _liblinear_l1(A, y01, alpha, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = LogisticRegression(penalty="l1", solver="liblinear", C=1.0 / (alpha * A.shape[0]),
                               tol=1e-12, max_iter=100_000, **kw).fit(A, y01)
    return m.coef_.ravel(), float(np.ravel(m.intercept_)[0]) if kw.get("fit_intercept") else 0.0


@pytest.fixture(scope="module")
def cancer():
    A, y = load_breast_cancer(return_X_y=True)
    return A, y.astype(np.float64)


def _wide_sparse(rng, n=80, d=400, density=0.05):
    A = sp.random(n, d, density=density, random_state=rng, format="csr")
    w = np.zeros(d)
    w[:10] = rng.standard_normal(10) * 3
    y = (A @ w + 0.3 * rng.standard_normal(n) > 0).astype(np.float64)
    return A, y


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("alpha", [1e-2, 1e-3])
def test_l1_logistic_matches_liblinear_without_intercept(cancer, sparse, alpha):
    """Breast cancer's unscaled, correlated columns (the Gram path with the face step)."""
    A, y = cancer
    X = sp.csc_matrix(A.T) if sparse else np.ascontiguousarray(A.T)
    res = fit_prox_newton(X, y, alpha=alpha, fit_intercept=False, tol=1e-10, max_iter=200)
    assert res.converged and res.solver == NAME and res.info["gram"]
    ref, _ = _liblinear_l1(A, y, alpha, fit_intercept=False)
    P, Pref = _objective(A, y, res.coef, 0, alpha), _objective(A, y, ref, 0, alpha)
    assert P <= Pref * (1 + 1e-8)
    assert abs(P - Pref) <= 1e-7 * Pref
    np.testing.assert_array_equal(res.coef != 0, ref != 0)
    np.testing.assert_allclose(res.coef, ref, rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(res.objective[-1], P, rtol=1e-12)


@pytest.mark.parametrize("fit_intercept", [False, True])
def test_l1_sparse_columns_path_matches_liblinear(fit_intercept):
    """More features than examples: the inner coordinate descent over CSC columns.  With an
    intercept, liblinear's regularised constant feature of a large ``intercept_scaling``
    approximates the unregularised one."""
    rng = np.random.default_rng(0)
    A, y = _wide_sparse(rng)
    alpha = 0.02
    res = fit_prox_newton(A.T.tocsc(), y, alpha=alpha, fit_intercept=fit_intercept, tol=1e-10,
                          max_iter=500)
    assert res.converged and not res.info["gram"]
    kw = dict(fit_intercept=True, intercept_scaling=1e4) if fit_intercept else \
        dict(fit_intercept=False)
    ref, b = _liblinear_l1(A, y, alpha, **kw)
    P = _objective(A, y, res.coef, res.intercept, alpha)
    Pref = _objective(A, y, ref, b, alpha)
    assert P <= Pref * (1 + 1e-6) and abs(P - Pref) <= 1e-5 * Pref
    np.testing.assert_array_equal(res.coef != 0, np.abs(ref) > 1e-8)
    np.testing.assert_allclose(res.coef, ref, atol=2e-3)
    if fit_intercept:
        assert abs(res.intercept - b) <= 2e-3


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("fit_intercept", [False, True])
def test_elasticnet_matches_saga(sparse, fit_intercept):
    rng = np.random.default_rng(3)
    n, d = 300, 12
    A = rng.standard_normal((n, d))
    A[:, 1] = A[:, 0] + 0.1 * rng.standard_normal(n)  # correlated columns
    y = (A[:, 0] - A[:, 2] + 0.5 + rng.standard_normal(n) > 0).astype(np.float64)
    alpha, r = 0.02, 0.5
    X = sp.csc_matrix(A.T) if sparse else A.T.copy()
    res = fit_prox_newton(X, y, alpha=alpha, penalty="elasticnet", l1_ratio=r,
                          fit_intercept=fit_intercept, tol=1e-10)
    assert res.converged and res.l1_ratio == r
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = LogisticRegression(penalty="elasticnet", l1_ratio=r, solver="saga", tol=1e-12,
                               max_iter=100_000, C=1.0 / (alpha * n),
                               fit_intercept=fit_intercept).fit(A, y)
    ref, b = m.coef_.ravel(), float(m.intercept_[0])
    P = _objective(A, y, res.coef, res.intercept, alpha, r)
    Pref = _objective(A, y, ref, b, alpha, r)
    assert abs(P - Pref) <= 1e-8 * Pref
    np.testing.assert_array_equal(res.coef != 0, np.abs(ref) > 1e-10)
    np.testing.assert_allclose(res.coef, ref, atol=1e-4)
    assert abs(res.intercept - b) <= 1e-4


def test_squared_l1_matches_lasso():
    rng = np.random.default_rng(4)
    n, d = 200, 15
    A = rng.standard_normal((n, d)) * rng.uniform(0.1, 10, d)  # scaled columns
    y = A[:, :3] @ np.array([1.0, -2.0, 0.5]) + 1.5 + 0.1 * rng.standard_normal(n)
    alpha = 0.05
    res = fit_prox_newton(A.T.copy(), y, loss="squared", alpha=alpha, tol=1e-12)
    m = Lasso(alpha=alpha, tol=1e-14, max_iter=1_000_000).fit(A, y)
    assert res.converged
    np.testing.assert_array_equal(res.coef != 0, m.coef_ != 0)
    np.testing.assert_allclose(res.coef, m.coef_, atol=1e-6)
    assert abs(res.intercept - m.intercept_) <= 1e-6


@pytest.mark.parametrize("penalty", ["l1", "elasticnet"])
def test_certificate_bounds_the_true_suboptimality(cancer, penalty):
    A, y = cancer
    X = np.ascontiguousarray(A.T)
    alpha, kw = 1e-3, ({"l1_ratio": 0.7} if penalty == "elasticnet" else {})
    r = kw.get("l1_ratio", 1.0)
    star = fit_prox_newton(X, y, alpha=alpha, penalty=penalty, tol=1e-12, **kw)
    Pstar = _objective(A, y, star.coef, star.intercept, alpha, r)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for it in (1, 3, 6):
            res = fit_prox_newton(X, y, alpha=alpha, penalty=penalty, tol=1e-12, max_iter=it,
                                  **kw)
            P = _objective(A, y, res.coef, res.intercept, alpha, r)
            assert P - Pstar <= res.gap * (1 + 1e-9) + 1e-15
    # and tol is the relative suboptimality it stops at
    loose = fit_prox_newton(X, y, alpha=alpha, penalty=penalty, tol=1e-3, **kw)
    P = _objective(A, y, loose.coef, loose.intercept, alpha, r)
    assert loose.converged and (P - Pstar) <= 1e-3 * abs(P)


def test_warm_start_from_the_optimum_takes_no_iteration(cancer):
    A, y = cancer
    X = np.ascontiguousarray(A.T)
    cold = fit_prox_newton(X, y, alpha=1e-3, tol=1e-8)
    warm = fit_prox_newton(X, y, alpha=1e-3, tol=1e-8, coef_init=cold.coef,
                           intercept_init=cold.intercept)
    assert cold.n_iter > 2 and warm.n_iter == 0 and warm.converged
    # a warm start from a neighbouring alpha of the path takes fewer iterations
    near = fit_prox_newton(X, y, alpha=1.2e-3, tol=1e-8, coef_init=cold.coef,
                           intercept_init=cold.intercept)
    far = fit_prox_newton(X, y, alpha=1.2e-3, tol=1e-8)
    assert near.converged and near.n_iter < far.n_iter


def test_fit_glm_runs_it_and_auto_picks_it(cancer):
    A, y = cancer
    X = np.ascontiguousarray(A.T)
    res = fit_glm(X, y, loss="logistic", penalty="l1", alpha=1e-3, solver=NAME, tol=1e-9)
    auto = fit_glm(X, y, loss="logistic", penalty="elasticnet", l1_ratio=0.5, alpha=1e-3,
                   tol=1e-9)
    assert res.solver == NAME and res.converged and auto.solver == NAME
    assert "proximal Newton" in auto.info["auto_reason"]
    assert choose_solver(X, loss="logistic", penalty="l1", alpha=1e-3)[0] == NAME
    direct = fit_prox_newton(X, y, alpha=1e-3, tol=1e-9)
    np.testing.assert_allclose(res.coef, direct.coef, rtol=0, atol=1e-12)
    # the wide logistic L1 too (the columns' path)
    Aw, yw = _wide_sparse(np.random.default_rng(5))
    wide = fit_glm(Aw.T.tocsc(), yw, loss="logistic", penalty="l1", alpha=0.02, tol=1e-8)
    assert wide.solver == NAME and wide.converged and not wide.info["gram"]
    with pytest.raises(ValueError, match="solver='prox-newton' needs penalty='l1'"):
        fit_glm(X, y, loss="logistic", alpha=1e-3, solver=NAME)
    with pytest.raises(ValueError, match="solver='prox-newton'"):
        fit_glm(X, y, loss="squared_hinge", penalty="l1", alpha=1e-3, solver=NAME)


def test_bad_input_is_an_error_naming_the_argument(cancer):
    A, y = cancer
    X = np.ascontiguousarray(A.T)
    with pytest.raises(ValueError, match="loss must be one of .'squared', 'logistic'."):
        fit_prox_newton(X, y, loss="hinge", alpha=1e-3)
    with pytest.raises(ValueError, match="penalty must be 'l1' or 'elasticnet'"):
        fit_prox_newton(X, y, penalty="l2", alpha=1e-3)
    with pytest.raises(ValueError, match="l1_ratio must be a number in"):
        fit_prox_newton(X, y, penalty="elasticnet", l1_ratio=1.5, alpha=1e-3)
    with pytest.raises(ValueError, match="alpha must be a positive"):
        fit_prox_newton(X, y, alpha=0.0)
    with pytest.raises(ValueError, match="tol must be a positive"):
        fit_prox_newton(X, y, alpha=1e-3, tol=-1.0)
    with pytest.raises(ValueError, match="max_iter must be a positive integer"):
        fit_prox_newton(X, y, alpha=1e-3, max_iter=0)
    with pytest.raises(ValueError, match="coef_init has 3 entries"):
        fit_prox_newton(X, y, alpha=1e-3, coef_init=np.zeros(3))
    with pytest.raises(ValueError, match="y has 5 entries"):
        fit_prox_newton(X, y[:5], alpha=1e-3)
    with pytest.warns(ConvergenceWarning, match="prox-newton reached max_iter=1"):
        fit_prox_newton(X, y, alpha=1e-3, tol=1e-12, max_iter=1)
