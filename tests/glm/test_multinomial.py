"""Multinomial logistic regression (glm/_multinomial.py) against scikit-learn's multinomial
``LogisticRegression`` on the same objective, and its derivatives against finite differences."""

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_iris
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression

from roofline import glm
from roofline.glm._multinomial import _Softmax


def _objective(W, b, X_rows, y, s, alpha):
    """F(W, b) from scratch (examples as rows)."""
    Z = np.asarray(X_rows @ W.T) + b
    m = Z.max(axis=1, keepdims=True)
    lse = (m + np.log(np.exp(Z - m).sum(axis=1, keepdims=True))).ravel()
    loss = lse - Z[np.arange(len(y)), y]
    return float(s @ loss) / s.sum() + 0.5 * alpha * float((W * W).sum())


def _sparse_problem(rng, n=600, d=80, K=4, density=0.08, dtype=np.float64):
    Xr = sp.random(n, d, density=density, format="csr", random_state=rng, dtype=np.float64)
    Xr.data = rng.standard_normal(Xr.nnz)
    Xr = Xr.astype(dtype)
    W = rng.standard_normal((K, d)) * 2
    y = np.argmax(np.asarray(Xr @ W.T) + rng.gumbel(size=(n, K)), axis=1)
    return Xr, y


@pytest.mark.parametrize("solver", glm.MULTINOMIAL_SOLVERS)
@pytest.mark.parametrize("C", [0.1, 1.0, 100.0])
def test_iris_matches_sklearn(solver, C):
    X, y = load_iris(return_X_y=True)
    sk = LogisticRegression(C=C, tol=1e-12, max_iter=20000).fit(X, y)
    alpha = 1.0 / (C * len(y))
    res = glm.fit_multinomial(np.ascontiguousarray(X.T), y, alpha=alpha, solver=solver,
                              tol=1e-9, max_iter=2000)
    s = np.ones(len(y))
    f_sk = _objective(sk.coef_, sk.intercept_, X, y, s, alpha)
    assert res.objective == pytest.approx(_objective(res.coef, res.intercept, X, y, s, alpha),
                                          rel=1e-12)
    assert res.objective <= f_sk * (1 + 1e-9)
    assert res.objective == pytest.approx(f_sk, rel=1e-7)
    # the intercepts are defined up to a common constant: compare centred ones
    np.testing.assert_allclose(res.coef, sk.coef_, atol=2e-3 * max(1.0, np.abs(sk.coef_).max()))
    np.testing.assert_allclose(res.intercept - res.intercept.mean(),
                               sk.intercept_ - sk.intercept_.mean(), atol=2e-2 * max(1, C))


@pytest.mark.parametrize("solver", glm.MULTINOMIAL_SOLVERS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_sparse_weighted_matches_sklearn(solver, dtype, fit_intercept):
    rng = np.random.default_rng(5)
    Xr, y = _sparse_problem(rng, dtype=dtype)
    sw = rng.random(len(y)) * 3
    sw[:20] = 0.0  # zero weights are allowed
    C = 0.5
    sk = LogisticRegression(C=C, tol=1e-12, max_iter=20000, fit_intercept=fit_intercept)
    sk.fit(Xr.astype(np.float64), y, sample_weight=sw)
    alpha = 1.0 / (C * sw.sum())
    res = glm.fit_multinomial(Xr.T.tocsc(), y, alpha=alpha, sample_weight=sw, solver=solver,
                              fit_intercept=fit_intercept, tol=1e-8, max_iter=1000)
    X64 = Xr.astype(np.float64)
    f_sk = _objective(sk.coef_, sk.intercept_, X64, y, sw, alpha)
    f = _objective(res.coef, res.intercept, X64, y, sw, alpha)
    rel = 1e-5 if dtype == np.float32 else 1e-8
    assert f <= f_sk * (1 + rel)
    assert f == pytest.approx(f_sk, rel=rel)
    np.testing.assert_allclose(res.coef, sk.coef_, atol=1e-2 if dtype == np.float32 else 1e-3)
    if not fit_intercept:
        assert np.all(res.intercept == 0)
    # L-BFGS may stall at the precision of F a little above tol=1e-8 (no decrease left in
    # float64); Newton reaches it
    assert res.converged or (solver == "lbfgs" and res.grad_ratio < 1e-7)


def test_derivatives_against_finite_differences():
    rng = np.random.default_rng(1)
    Xr, y = _sparse_problem(rng, n=120, d=15, K=3, density=0.3)
    X = Xr.T.tocsc()
    s = rng.random(len(y)) + 0.5
    prob = _Softmax(X, y, 3, s, 0.05, True)
    theta = rng.standard_normal(3 * 15 + 3) * 0.3
    f, g = prob.fun_grad(theta)
    assert f == pytest.approx(_objective(*prob.split(theta), Xr, y, s, 0.05), rel=1e-12)
    eps = 1e-6
    for i in rng.choice(theta.size, 12, replace=False):
        e = np.zeros_like(theta)
        e[i] = eps
        fd = (prob.fun_grad(theta + e)[0] - prob.fun_grad(theta - e)[0]) / (2 * eps)
        assert g[i] == pytest.approx(fd, rel=1e-5, abs=1e-8)
    v = rng.standard_normal(theta.size)
    hv = prob.hessp(theta, v)
    fd = (prob.fun_grad(theta + eps * v)[1] - prob.fun_grad(theta - eps * v)[1]) / (2 * eps)
    np.testing.assert_allclose(hv, fd, rtol=1e-5, atol=1e-7)


def test_empty_class_and_warm_start():
    """A class without examples (``n_classes`` larger than the labels) and a warm start from
    the solution, which needs (almost) no iteration."""
    rng = np.random.default_rng(2)
    Xr, y = _sparse_problem(rng, K=3)
    X = Xr.T.tocsc()
    res = glm.fit_multinomial(X, y, alpha=1e-2, n_classes=4, tol=1e-8)
    assert res.coef.shape == (4, X.shape[0]) and res.converged
    p = np.exp(np.asarray(Xr @ res.coef.T) + res.intercept)
    p /= p.sum(axis=1, keepdims=True)
    assert p[:, 3].max() < 0.05  # the empty class is unlikely everywhere
    warm = glm.fit_multinomial(X, y, alpha=1e-2, n_classes=4, tol=1e-8, coef_init=res.coef,
                               intercept_init=res.intercept)
    assert warm.n_iter <= 2
    assert warm.objective == pytest.approx(res.objective, rel=1e-10)


def test_max_iter_warns_and_bad_arguments_are_named():
    X, y = load_iris(return_X_y=True)
    Xt = np.ascontiguousarray(X.T)
    with pytest.warns(ConvergenceWarning, match="raise max_iter"):
        res = glm.fit_multinomial(Xt, y, alpha=1e-4, max_iter=1, solver="lbfgs")
    assert not res.converged
    with pytest.raises(ValueError, match="solver must be one of"):
        glm.fit_multinomial(Xt, y, alpha=1e-2, solver="saga")
    with pytest.raises(ValueError, match="alpha must be a non-negative"):
        glm.fit_multinomial(Xt, y, alpha=-1.0)
    with pytest.raises(ValueError, match="alpha must be a non-negative"):
        glm.fit_multinomial(Xt, y, alpha=np.inf)
    with pytest.raises(ValueError, match="class indices"):
        glm.fit_multinomial(Xt, y + 0.5, alpha=1e-2)
    with pytest.raises(ValueError, match="at least 2"):
        glm.fit_multinomial(Xt, np.zeros(len(y), int), alpha=1e-2)
    with pytest.raises(ValueError, match=r"in \[0, 2\)"):
        glm.fit_multinomial(Xt, y, alpha=1e-2, n_classes=2)
    with pytest.raises(ValueError, match="y has 10 entries"):
        glm.fit_multinomial(Xt, y[:10], alpha=1e-2)
    with pytest.raises(ValueError, match="coef_init has shape"):
        glm.fit_multinomial(Xt, y, alpha=1e-2, coef_init=np.zeros((2, 4)))
    with pytest.raises(ValueError, match="sample_weight must be non-negative"):
        glm.fit_multinomial(Xt, y, alpha=1e-2, sample_weight=-np.ones(len(y)))


def test_softmax_loss_is_stable():
    Z = np.array([[1000.0, -1000.0], [0.0, 0.0]])
    loss, P = glm.softmax_loss(Z, np.array([1, 0]))
    assert np.all(np.isfinite(loss)) and np.all(np.isfinite(P))
    np.testing.assert_allclose(loss, [1000.0, 1000.0])
    np.testing.assert_allclose(P.sum(axis=0), 1.0)


@pytest.mark.parametrize("sparse", [False, True])
def test_a_feature_scaled_by_1e30(sparse):
    """A feature of 1e30 is solved in power-of-two rescaled coefficients (the same problem):
    the model is scikit-learn's with that feature scaled by 1e4 only (its penalty as good as
    nil there as at 1e30), not a near-zero one stopped by a gradient the feature dominates."""
    rng = np.random.default_rng(9)
    X = rng.standard_normal((600, 4))
    y = (X @ rng.standard_normal((4, 3)) + 0.3 * rng.standard_normal((600, 3))).argmax(1)
    Xs = X.copy()
    Xs[:, 2] *= 1e30
    Xt = sp.csc_matrix(Xs.T) if sparse else np.ascontiguousarray(Xs.T)
    res = glm.fit_multinomial(Xt, y, alpha=1.0 / 600, tol=1e-8)
    assert res.converged
    Xr = X.copy()
    Xr[:, 2] *= 1e4
    sk = LogisticRegression(tol=1e-12, max_iter=5000).fit(Xr, y)
    ref = sk.coef_.copy()
    ref[:, 2] *= 1e4
    got = res.coef.copy()
    got[:, 2] *= 1e30
    np.testing.assert_allclose(got, ref, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("per_class", [128, 0])
def test_block_preconditioner_on_raw_pixels(monkeypatch, per_class):
    """Dense data with few features: the per-class block preconditioner (features' scales and
    correlations; each class's own block, or one shared Gram matrix) reaches the diagonal
    one's optimum with fewer Hessian products."""
    from sklearn.datasets import load_digits

    from roofline.glm import _multinomial

    A, y = load_digits(return_X_y=True)
    A, y = A[:600], y[:600]
    X = np.ascontiguousarray(A.T)
    alpha = 1.0 / (10.0 * len(y))
    monkeypatch.setattr(_multinomial, "PER_CLASS_BLOCKS_MAX_FEATURES", per_class)
    block = glm.fit_multinomial(X, y, alpha=alpha, tol=1e-8, max_iter=200)
    monkeypatch.setattr(_multinomial, "BLOCK_PRECOND_MAX_FEATURES", 0)
    diag = glm.fit_multinomial(X, y, alpha=alpha, tol=1e-8, max_iter=200)
    assert block.converged and diag.converged
    assert block.objective == pytest.approx(diag.objective, rel=1e-10)
    np.testing.assert_allclose(block.coef, diag.coef, atol=1e-4)
    assert block.info["hessp"] < 0.7 * diag.info["hessp"]


@pytest.mark.parametrize("sparse", [False, True])
def test_fused_kernels_match_the_gmat_products(sparse):
    rng = np.random.default_rng(3)
    Xr, y = _sparse_problem(rng, n=300, d=40, K=5)
    X = Xr.T.tocsc() if sparse else np.ascontiguousarray(Xr.T.toarray())
    s = rng.random(len(y)) + 0.1
    a = _Softmax(X, y, 5, s, 0.01, True, fused=True)
    b = _Softmax(X, y, 5, s, 0.01, True, fused=False)
    theta = rng.standard_normal(5 * 40 + 5)
    v = rng.standard_normal(theta.size)
    fa, ga = a.fun_grad(theta)
    fb, gb = b.fun_grad(theta)
    assert fa == pytest.approx(fb, rel=1e-13)
    np.testing.assert_allclose(ga, gb, rtol=1e-11, atol=1e-14)
    np.testing.assert_allclose(a.hessp(theta, v), b.hessp(theta, v), rtol=1e-11, atol=1e-14)
    np.testing.assert_allclose(a.hess_diag(theta), b.hess_diag(theta), rtol=1e-11,
                               atol=1e-14)


@pytest.mark.parametrize("alpha", [1e-2, 0.0])
def test_features_without_values_are_skipped(alpha):
    """A sparse X whose features mostly hold no value (hashed data): the solve runs over the
    features present and the others come back as zeros; the fit equals the one over the
    features present alone, a warm start over every feature is accepted."""
    rng = np.random.default_rng(6)
    Xr, y = _sparse_problem(rng, n=400, d=30, K=3, density=0.2)
    big = sp.hstack([sp.csr_matrix((400, 50)), Xr, sp.csr_matrix((400, 200))]).tocsr()
    res = glm.fit_multinomial(big.T.tocsc(), y, alpha=alpha, tol=1e-8)
    ref = glm.fit_multinomial(Xr.T.tocsc(), y, alpha=alpha, tol=1e-8)
    assert res.coef.shape == (3, 280) and res.converged
    assert np.all(res.coef[:, :50] == 0) and np.all(res.coef[:, 80:] == 0)
    np.testing.assert_allclose(res.coef[:, 50:80], ref.coef, atol=1e-7)
    assert res.objective == pytest.approx(ref.objective, rel=1e-12)
    warm = glm.fit_multinomial(big.T.tocsc(), y, alpha=alpha, tol=1e-8, coef_init=res.coef,
                               intercept_init=res.intercept)
    assert warm.n_iter <= 2
