"""The trust-region Newton solver (glm/_newton.py) and its steps (gmat.newton) against
scikit-learn's optima and numpy references."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression, Ridge

from roofline.glm import newton as gnewton
from roofline.glm._newton import fit_newton


def _problem(rng, n, d, dtype, sparse, scales=None):
    A = rng.standard_normal((n, d))
    if sparse:
        A[rng.random((n, d)) < 0.7] = 0.0
    w = rng.standard_normal(d) / np.sqrt(d)
    z = A @ w + 0.3
    y = (rng.random(n) < 1 / (1 + np.exp(-2 * z))).astype(float)
    if scales is not None:
        A *= scales
    A = A.astype(dtype)
    X = sp.csc_matrix(A.T) if sparse else np.ascontiguousarray(A.T)
    return A, X, y


def _tol(dtype):
    return 1e-5 if dtype == np.float64 else 1e-4


# ---------------------------------------------------------------------------------------------
# the steps


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("loss", [0, 1, 3])
def test_steps_match_numpy(dtype, loss):
    rng = np.random.default_rng(0)
    X = sp.random(40, 300, density=0.1, format="csc", random_state=rng, dtype=dtype)
    X[:, 5] = 0.0  # an empty example
    X.eliminate_zeros()
    y = np.where(rng.random(300) < 0.5, -1.0, 1.0)
    z = rng.standard_normal(300)
    L, g, h, dl, D = gnewton.loss_derivs(z, y, loss)
    if loss == 0:
        dl_ref, D_ref, L_ref = z - y, np.ones(300), 0.5 * ((z - y) ** 2).sum()
    elif loss == 1:
        s = 1 / (1 + np.exp(y * z))
        dl_ref, D_ref, L_ref = -y * s, s * (1 - s), np.logaddexp(0, -y * z).sum()
    else:
        m = np.maximum(0, 1 - y * z)
        dl_ref, D_ref, L_ref = -2 * y * m, 2.0 * (m > 0), (m**2).sum()
    np.testing.assert_allclose(dl, dl_ref, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(D, D_ref, rtol=1e-12, atol=1e-14)
    assert L == pytest.approx(L_ref, rel=1e-12)
    assert (g, h) == pytest.approx((dl_ref.sum(), D_ref.sum()), rel=1e-10, abs=1e-12)
    s = rng.standard_normal(40)
    Xd = X.toarray().astype(np.float64)
    ref = Xd @ (D * (Xd.T @ s + 0.7))
    rtol = 1e-12 if dtype == np.float64 else 1e-6
    out, hb = gnewton.hess_vec(X, D, s, 0.7)
    np.testing.assert_allclose(out, ref, rtol=rtol, atol=1e-10)
    assert hb == pytest.approx(float(D @ (Xd.T @ s + 0.7)), rel=rtol)
    work = np.empty((3, 40))
    out2, hb2 = gnewton.hess_vec(X, D, s, 0.7, work=work)
    np.testing.assert_allclose(out2, ref, rtol=rtol, atol=1e-10)
    assert hb2 == pytest.approx(hb, rel=1e-12)
    diag, hs = gnewton.hess_diag(X, D)
    np.testing.assert_allclose(diag, (Xd**2) @ D, rtol=rtol, atol=1e-12)
    assert hs == pytest.approx(D.sum())


@pytest.mark.parametrize("loss", [0, 1, 3])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("n_chunks", [1, 3])
def test_dense_fused_steps_match_numpy(loss, weighted, n_chunks):
    """The one-pass dense kernels against the two-pass numpy forms: margins, derivatives,
    gradient, Hessian diagonal, the certificate's conjugate sum, the Hessian-vector product;
    with an empty example, zero weights and logistic margins past exp's range."""
    rng = np.random.default_rng(14)
    d, n = 9, 700
    X = np.asfortranarray(rng.standard_normal((d, n)))
    X[:, 4] = 0.0
    X[:, 5] *= 400.0  # |margin| > 745 for the logistic
    y = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    w = rng.standard_normal(d)
    sw = rng.random(n) * 2 if weighted else None
    if weighted:
        sw[:7] = 0.0
    g, hd, sums, z, dl, D = gnewton.dense_eval(X, w, 0.25, y, loss, sw, n_chunks=n_chunks)
    z_ref = X.T @ w + 0.25
    L, gb, hb, dl_ref, D_ref = gnewton.loss_derivs(z_ref, y, loss, sw=sw)
    s = np.ones(n) if sw is None else sw
    np.testing.assert_allclose(z, z_ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dl, dl_ref, rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(D, D_ref, rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(g, X @ (s * dl_ref), rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(hd, (X * X) @ D_ref, rtol=1e-11, atol=1e-11)
    conj = gnewton.conj_sum(-dl_ref, y, loss, sw)
    np.testing.assert_allclose(sums, [L, gb, hb, conj], rtol=1e-10, atol=1e-9)
    v = rng.standard_normal(d)
    out, h = gnewton.dense_hess_vec(X, D, v, -0.5, n_chunks=n_chunks)
    t = D * (X.T @ v - 0.5)
    np.testing.assert_allclose(out, X @ t, rtol=1e-11, atol=1e-11)
    assert h == pytest.approx(t.sum(), rel=1e-11, abs=1e-11)


def test_dense_fused_steps_reject_bad_layout():
    X = np.ones((3, 5))  # C order
    with pytest.raises(ValueError, match="Fortran"):
        gnewton.dense_eval(X, np.zeros(3), 0.0, np.ones(5), 1)
    with pytest.raises(ValueError, match="Fortran"):
        gnewton.dense_hess_vec(np.asfortranarray(X, dtype=np.float32), np.ones(5), np.ones(3))
    with pytest.raises(ValueError, match="smooth"):
        gnewton.dense_eval(np.asfortranarray(X), np.zeros(3), 0.0, np.ones(5), 2)
    assert gnewton.dense_threads(np.asfortranarray(X), 4) == 1  # too small to split
    big = np.empty((64, 4096), order="F")
    assert gnewton.dense_threads(big, 4) == 4 and gnewton.dense_threads(big, 1) == 1


def test_steps_reject_hinge_and_bad_work():
    X = sp.random(5, 10, density=0.5, format="csc", random_state=0)
    with pytest.raises(ValueError, match="smooth"):
        gnewton.loss_derivs(np.zeros(10), np.ones(10), 2)
    with pytest.raises(ValueError, match="work"):
        gnewton.hess_vec(X, np.ones(10), np.ones(5), work=np.empty((2, 4)))


def test_workspace_rule():
    X = sp.random(10, 1000, density=0.5, format="csc", random_state=0)  # nnz 5000
    assert gnewton.hess_vec_workspace(X, 2).shape == (2, 10)
    assert gnewton.hess_vec_workspace(X, 1) is None
    wide = sp.random(10_000, 100, density=0.001, format="csc", random_state=0)
    assert gnewton.hess_vec_workspace(wide, 2) is None


# ---------------------------------------------------------------------------------------------
# the solver against scikit-learn


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("fit_intercept", [False, True])
@pytest.mark.parametrize("C", [0.01, 10.0])
def test_logistic_matches_sklearn(dtype, sparse, fit_intercept, C):
    rng = np.random.default_rng(1)
    A, X, y = _problem(rng, 400, 12, dtype, sparse)
    n = A.shape[0]
    r = fit_newton(X, y, loss="logistic", alpha=1 / (C * n), fit_intercept=fit_intercept,
                   tol=1e-12)
    sk = LogisticRegression(C=C, tol=1e-12, max_iter=10_000,
                            fit_intercept=fit_intercept).fit(A.astype(np.float64), y)
    assert r.converged and r.solver == "newton"
    scale = max(1.0, np.abs(sk.coef_).max())
    np.testing.assert_allclose(r.coef, sk.coef_.ravel(), atol=_tol(dtype) * scale)
    if fit_intercept:
        assert r.intercept == pytest.approx(sk.intercept_[0], abs=_tol(dtype) * scale)
    else:
        assert r.intercept == 0.0
    # the certificate is a true bound: the reported objective is the scikit-learn optimum's
    z = A.astype(np.float64) @ sk.coef_.ravel() + (sk.intercept_[0] if fit_intercept else 0)
    s = np.where(y > 0, 1, -1)
    P_sk = np.logaddexp(0, -s * z).mean() + 0.5 / (C * n) * (sk.coef_**2).sum()
    assert r.objective[-1] == pytest.approx(P_sk, rel=1e-9)
    assert r.objective[-1] <= P_sk * (1 + 1e-12)


@pytest.mark.parametrize("fit_intercept", [False, True])
def test_squared_matches_ridge_on_wild_scales(fit_intercept):
    rng = np.random.default_rng(2)
    A, X, _ = _problem(rng, 300, 8, np.float64, False, scales=10.0 ** np.arange(-3, 5) / 10)
    y = A @ rng.standard_normal(8) * 1e-3 + rng.standard_normal(300) + 2.0
    n = 300
    alpha = 1e-4
    r = fit_newton(X, y, loss="squared", alpha=alpha, fit_intercept=fit_intercept, tol=1e-9)
    sk = Ridge(alpha=alpha * n, fit_intercept=fit_intercept, solver="cholesky").fit(A, y)
    assert r.converged
    # the features of scale 1e-4 barely move the objective: their weights are determined to
    # ~1e-6 only; the objective itself to the certificate's 1e-9
    np.testing.assert_allclose(r.coef, sk.coef_, rtol=1e-4, atol=1e-6)
    if fit_intercept:
        assert r.intercept == pytest.approx(sk.intercept_, rel=1e-6)
    resid = A @ sk.coef_ + (sk.intercept_ if fit_intercept else 0.0) - y
    P_sk = 0.5 * np.mean(resid**2) + 0.5 * alpha * sk.coef_ @ sk.coef_
    assert r.objective[-1] == pytest.approx(P_sk, rel=1e-9)


def test_squared_hinge_matches_linearsvc():
    from sklearn.svm import LinearSVC

    rng = np.random.default_rng(3)
    A, X, y = _problem(rng, 300, 10, np.float64, True)
    C = 0.5
    r = fit_newton(X, y, loss="squared_hinge", alpha=1 / (C * 300), fit_intercept=False,
                   tol=1e-12)
    # LinearSVC: ||w||^2 / 2 + C sum max(0, 1 - y z)^2, i.e. alpha = 1 / (C n)
    sk = LinearSVC(C=C, loss="squared_hinge", dual=True, tol=1e-12, max_iter=100_000,
                   fit_intercept=False, random_state=0).fit(sp.csr_matrix(A), y)
    assert r.converged
    np.testing.assert_allclose(r.coef, sk.coef_.ravel(), atol=1e-6)


def test_warm_start_from_optimum_takes_no_step():
    rng = np.random.default_rng(4)
    A, X, y = _problem(rng, 500, 20, np.float64, True)
    r = fit_newton(X, y, loss="logistic", alpha=1e-3, tol=1e-10)
    r2 = fit_newton(X, y, loss="logistic", alpha=1e-3, tol=1e-8, coef_init=r.coef,
                    intercept_init=r.intercept)
    assert r2.converged and r2.n_iter == 0
    np.testing.assert_array_equal(r2.coef, r.coef)
    # a warm start near the optimum needs fewer steps than a cold one
    r3 = fit_newton(X, y, loss="logistic", alpha=1e-3, tol=1e-10, coef_init=0.9 * r.coef,
                    intercept_init=r.intercept)
    assert r3.converged and r3.n_iter < r.n_iter


def test_convergence_warning_on_max_iter():
    rng = np.random.default_rng(5)
    A, X, y = _problem(rng, 500, 20, np.float64, False, scales=10.0 ** rng.uniform(-2, 2, 20))
    with pytest.warns(ConvergenceWarning, match="newton reached max_iter=1"):
        r = fit_newton(X, y, loss="logistic", alpha=1e-6, tol=1e-12, max_iter=1)
    assert not r.converged and r.n_iter == 1
    assert r.gap > 1e-12 * abs(r.objective[-1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fit_newton(X, y, loss="logistic", alpha=1e-2, tol=1e-6)


def test_gap_history_is_monotone_objective_and_callback_stops():
    rng = np.random.default_rng(6)
    A, X, y = _problem(rng, 800, 30, np.float64, True)
    seen = []

    def cb(it, w, b):
        seen.append(it)
        return it == 2

    r = fit_newton(X, y, loss="logistic", alpha=1e-5, tol=1e-14, callback=cb)
    assert seen == [1, 2] and r.n_iter == 2 and not r.converged
    assert r.info["stopped_by_callback"]
    r = fit_newton(X, y, loss="logistic", alpha=1e-5, tol=1e-10)
    assert np.all(np.diff(r.objective) <= 1e-15)  # TRON only accepts descent steps
    assert r.gap_history[-1] <= 1e-10 * r.objective[-1]


def test_rejects_bad_input():
    X = np.ones((3, 4))
    with pytest.raises(ValueError, match="loss"):
        fit_newton(X, np.array([0, 1, 0, 1.0]), loss="hinge", alpha=1.0)
    with pytest.raises(ValueError, match="coef_init"):
        fit_newton(X, np.array([0, 1, 0, 1.0]), alpha=1.0, coef_init=np.ones(2))
    with pytest.raises(ValueError, match="examples"):
        fit_newton(X, np.array([0, 1, 0.0]), alpha=1.0)


@pytest.mark.parametrize("loss", ["logistic", "squared", "squared_hinge"])
def test_dense_path_matches_the_csc_kernels(loss, monkeypatch):
    """Dense input (and dense-enough CSC) runs on BLAS; the iterates are those of the CSC
    kernels up to rounding."""
    from roofline.glm import _newton

    rng = np.random.default_rng(11)
    A, X, y = _problem(rng, 600, 15, np.float64, True)
    dense = np.ascontiguousarray(X.toarray())
    kw = dict(loss=loss, alpha=1e-3, tol=1e-10)
    r_dense = fit_newton(dense, y, **kw)  # C order: a Fortran copy, the fused kernels
    r_fortran = fit_newton(np.asfortranarray(dense), y, **kw)  # as it is
    monkeypatch.setattr(_newton, "DENSE_MIN_DENSITY", 0.0)  # CSC always densified
    r_csc_dense = fit_newton(X, y, **kw)
    monkeypatch.setattr(_newton, "DENSE_MAX_VALUES", 0)  # C order too large to copy: BLAS
    r_blas = fit_newton(dense, y, **kw)
    monkeypatch.setattr(_newton, "DENSE_MIN_DENSITY", 2.0)  # never: the CSC kernels
    r_csc = fit_newton(X, y, **kw)
    for r in (r_dense, r_fortran, r_csc_dense, r_blas):
        assert r.n_iter == r_csc.n_iter
        np.testing.assert_allclose(r.objective, r_csc.objective, rtol=1e-10)
        np.testing.assert_allclose(r.coef, r_csc.coef, rtol=1e-7, atol=1e-10)
