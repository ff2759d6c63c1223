"""solver="cholesky": ridge by its normal equations against scikit-learn and Newton."""

import numpy as np
import pytest
import scipy.sparse as sp

from roofline.glm import fit_glm
from roofline.glm._direct import CHOLESKY_MAX_FEATURES, fit_cholesky
from roofline.glm._newton import fit_newton


def _problem(seed, n=400, d=25, density=None):
    rng = np.random.default_rng(seed)
    if density is None:
        A = rng.standard_normal((n, d)) * np.logspace(-1, 1, d)
    else:
        A = sp.random(n, d, density=density, random_state=seed, format="csr")
        A.data = rng.standard_normal(A.nnz)
    y = A @ rng.standard_normal(d) + 0.1 * rng.standard_normal(n) + 2.0
    return A, np.asarray(y).ravel()


@pytest.mark.parametrize("density", [None, 0.5, 0.03])
@pytest.mark.parametrize("fit_intercept", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_matches_sklearn_ridge(density, fit_intercept, weighted):
    from sklearn.linear_model import Ridge

    A, y = _problem(1, density=density)
    n = A.shape[0]
    s = np.random.default_rng(2).integers(0, 4, n).astype(float) if weighted else None
    lam = 0.7  # scikit-learn's alpha: sum s_i r_i^2 + lam ||w||^2
    S = n if s is None else s.sum()
    X = A.T.tocsc() if sp.issparse(A) else np.ascontiguousarray(A.T)
    r = fit_cholesky(X, y, alpha=lam / S, fit_intercept=fit_intercept, sample_weight=s)
    sk = Ridge(alpha=lam, fit_intercept=fit_intercept, solver="cholesky" if density is None
               else "sparse_cg", tol=1e-14).fit(A, y, sample_weight=s)
    np.testing.assert_allclose(r.coef, sk.coef_, rtol=1e-7, atol=1e-9)
    assert r.intercept == pytest.approx(float(sk.intercept_), abs=1e-8)
    assert r.converged and r.gap <= 1e-10 * abs(r.objective[-1])
    # the certificate is Newton's: the same objective at Newton's optimum
    q = fit_newton(X, y, loss="squared", alpha=lam / S, fit_intercept=fit_intercept,
                   sample_weight=s, tol=1e-12)
    assert r.objective[-1] == pytest.approx(q.objective[-1], rel=1e-10)


def test_fit_glm_cd_and_auto_run_it():
    A, y = _problem(3)
    res = fit_glm(A.T, y, loss="squared", alpha=1e-2)  # the default: auto
    assert res.solver == "cholesky" and "Cholesky" in res.info["auto_reason"]
    ref = fit_glm(A.T, y, loss="squared", alpha=1e-2, solver="newton", tol=1e-12)
    assert res.objective[-1] == pytest.approx(ref.objective[-1], rel=1e-10)
    with pytest.raises(ValueError, match="solver='cholesky' solves ridge"):
        fit_glm(A.T, np.sign(y), loss="logistic", alpha=1e-2, solver="cholesky")
    with pytest.raises(ValueError, match="solver='cholesky' solves ridge"):
        fit_glm(A.T, y, loss="squared", alpha=1e-2, solver="cholesky", penalty="l1")


def test_an_ill_conditioned_system_is_refined_by_newton():
    A, y = _problem(4, n=300, d=6)
    A[:, 0] *= 1e7  # the Gram matrix's condition number ~1e14+
    res = fit_glm(A.T, y, loss="squared", alpha=1e-6, solver="cholesky", tol=1e-14)
    ref = fit_glm(A.T, y, loss="squared", alpha=1e-6, solver="newton", tol=1e-14)
    assert res.objective[-1] <= ref.objective[-1] * (1 + 1e-12)


def test_rejects_bad_input():
    X = np.ones((3, 5))
    y = np.arange(5.0)
    with pytest.raises(ValueError, match="alpha"):
        fit_cholesky(X, y, alpha=0.0)
    with pytest.raises(ValueError, match="y has 4 entries"):
        fit_cholesky(X, y[:4], alpha=1.0)
    with pytest.raises(ValueError, match="sample_weight"):
        fit_cholesky(X, y, alpha=1.0, sample_weight=-np.ones(5))
    with pytest.raises(ValueError, match="non-finite"):
        fit_cholesky(np.full((3, 5), np.nan), y, alpha=1.0)
    with pytest.raises(ValueError, match=f"at most {CHOLESKY_MAX_FEATURES} features"):
        fit_cholesky(sp.csc_matrix((CHOLESKY_MAX_FEATURES + 1, 5)), y, alpha=1.0)
