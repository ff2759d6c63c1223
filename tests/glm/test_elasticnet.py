"""The elastic net (``penalty="elasticnet"``, ``l1_ratio``) of :func:`roofline.glm.fit_glm`:
the primal coordinate descent's prox step, its duality-gap certificate and the front door's
routing and validation, against scikit-learn's ``ElasticNet`` and ``LogisticRegression``
(``solver="saga"``) on the same data."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import minimize_scalar
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import ElasticNet, LogisticRegression

from roofline.glm import cd, fit_glm
from roofline.glm._auto import choose_solver
from roofline.glm._problem import GLMProblem

ATOL = 1e-6


def _data(kind, n=150, d=20, seed=0, classify=False):
    """``(X_sk, X_ours)``: examples x features for scikit-learn, the project layout for ours;
    a sparse-true signal with noise."""
    rng = np.random.default_rng(seed)
    if kind == "dense":
        Xs = rng.standard_normal((n, d))
    else:
        Xs = sp.random(n, d, density=0.3, format="csr", random_state=seed,
                       data_rvs=rng.standard_normal)
    w = rng.standard_normal(d)
    w[::3] = 0.0
    z = np.asarray(Xs @ w).ravel() + 0.5
    if classify:
        y = np.where(z + 0.5 * rng.standard_normal(n) > 0, 1.0, 0.0)
    else:
        y = z + 0.3 * rng.standard_normal(n)
    X = Xs.T.tocsc() if sp.issparse(Xs) else np.ascontiguousarray(Xs.T)
    return Xs, X, y


def _same_support(ours, theirs):
    np.testing.assert_array_equal(ours == 0.0, theirs == 0.0)


@pytest.mark.parametrize("kind", ["dense", "sparse"])
@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("r", [0.2, 0.5, 0.9])
def test_squared_loss_equals_sklearn_elasticnet(kind, fit_intercept, r):
    """scikit-learn's ``ElasticNet(alpha=a)`` minimises ``||y - Xw||^2 / (2n) + a (r |w|_1 +
    (1 - r) |w|^2 / 2)``: our squared loss is ``(z - y)^2 / 2`` over the mean, so
    ``alpha = a``."""
    Xs, X, y = _data(kind)
    a = 0.05
    sk = ElasticNet(alpha=a, l1_ratio=r, fit_intercept=fit_intercept, tol=1e-13,
                    max_iter=200_000).fit(Xs, y)
    res = fit_glm(X, y, loss="squared", alpha=a, penalty="elasticnet", l1_ratio=r,
                  fit_intercept=fit_intercept, tol=1e-13, max_iter=20_000, random_state=0,
                  solver="scd")
    assert res.converged and res.solver == "scd" and not res.dual
    assert res.penalty == "elasticnet" and res.l1_ratio == r
    np.testing.assert_allclose(res.coef, sk.coef_, rtol=0, atol=ATOL)
    np.testing.assert_allclose(res.intercept, sk.intercept_, rtol=0, atol=ATOL)
    _same_support(res.coef, sk.coef_)
    assert 0 < np.count_nonzero(res.coef) < X.shape[0]  # the L1 part acts, and not alone


@pytest.mark.parametrize("kind", ["dense", "sparse"])
@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("r", [0.3, 0.8])
def test_logistic_equals_sklearn_saga(kind, fit_intercept, r):
    """``LogisticRegression(C=c, penalty="elasticnet")``: ``c sum loss + r |w|_1 + (1 - r)
    |w|^2 / 2``, i.e. ``alpha = 1 / (c n)``."""
    Xs, X, y = _data(kind, classify=True)
    C = 0.3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", FutureWarning)  # scikit-learn 1.8 deprecates penalty=
        sk = LogisticRegression(penalty="elasticnet", solver="saga", l1_ratio=r, C=C,
                                fit_intercept=fit_intercept, tol=1e-12,
                                max_iter=200_000).fit(Xs, y)
    res = fit_glm(X, y, loss="logistic", alpha=1.0 / (C * y.size), penalty="elasticnet",
                  l1_ratio=r, fit_intercept=fit_intercept, tol=1e-13, max_iter=20_000,
                  random_state=0)
    assert res.converged
    np.testing.assert_allclose(res.coef, sk.coef_[0], rtol=0, atol=ATOL)
    np.testing.assert_allclose(res.intercept, sk.intercept_[0] if fit_intercept else 0.0,
                               rtol=0, atol=ATOL)
    _same_support(res.coef, sk.coef_[0])
    assert 0 < np.count_nonzero(res.coef) < X.shape[0]


@pytest.mark.parametrize("loss", ["squared", "logistic"])
@pytest.mark.parametrize("r", [0.1, 0.6])
def test_gap_bounds_the_true_suboptimality(loss, r):
    """Every recorded gap (no intercept: the certificate has no estimate in it) bounds
    ``P(w) - P*``, ``P*`` from a far tighter fit; the last meets ``tol``."""
    Xs, X, y = _data("sparse", seed=3, classify=loss == "logistic")
    kw = dict(loss=loss, alpha=0.02, penalty="elasticnet", l1_ratio=r, fit_intercept=False,
              random_state=1)
    star = fit_glm(X, y, tol=1e-14, max_iter=50_000, **kw).objective[-1]
    res = fit_glm(X, y, tol=1e-3, check_every=1, active_fraction=1.0, **kw)
    assert res.converged and res.objective.size >= 2
    subopt = res.objective - star
    assert np.all(subopt <= res.gap_history + 1e-13 * abs(star)), (subopt, res.gap_history)
    assert res.gap <= 1e-3 * abs(res.objective[-1])
    assert subopt[0] > 0  # the first check is away from the optimum: the bound is tested


@pytest.mark.parametrize("loss", ["squared", "logistic"])
@pytest.mark.parametrize("tol", [1e-3, 1e-6])
def test_tol_is_the_relative_suboptimality_with_an_intercept(loss, tol):
    """With an intercept (the primal certificate's intercept term, as for l1 and l2): a fit
    that reports ``converged`` at ``tol`` is within ``tol`` (relative) of the optimum."""
    Xs, X, y = _data("dense", seed=9, classify=loss == "logistic")
    kw = dict(loss=loss, alpha=0.02, penalty="elasticnet", l1_ratio=0.5, random_state=2)
    star = fit_glm(X, y, tol=1e-14, max_iter=50_000, **kw).objective[-1]
    res = fit_glm(X, y, tol=tol, **kw)
    assert res.converged
    assert res.objective[-1] - star <= tol * abs(star)
    assert res.objective[-1] - star <= res.gap + 1e-13 * abs(star)


@pytest.mark.parametrize("loss", ["squared", "logistic"])
def test_certificate_is_the_exact_duality_gap(loss):
    """:meth:`GLMProblem.primal_gap` at an arbitrary point is ``P(w) - D(a)`` with the
    elastic net's conjugate computed here by one-dimensional maximisation, and ``D(a)``
    is below the optimum (weak duality)."""
    Xs, X, y = _data("sparse", n=60, d=8, seed=5, classify=loss == "logistic")
    code = 0 if loss == "squared" else 1
    ym = y if loss == "squared" else 2.0 * y - 1.0
    alpha, r = 0.05, 0.4
    Xc = sp.csc_matrix(X)
    pb = GLMProblem(Xc, ym, code, False, alpha, False, primal=True, l1_ratio=r)
    n = y.size
    lam1, lam2 = r * alpha * n, (1 - r) * alpha * n
    w = np.random.default_rng(0).standard_normal(8)
    z = Xc.T @ w
    P, gap = pb.primal_gap(w, 0.0, z)
    if loss == "squared":
        a = ym - z
        conj = float(np.sum(a * ym - 0.5 * a * a))  # -l*(-a) for l = (z - y)^2 / 2
        loss_sum = 0.5 * float(np.sum((z - ym) ** 2))
    else:
        p = 1.0 / (1.0 + np.exp(ym * z))  # y_i a_i in (0, 1)
        a = ym * p
        conj = float(-np.sum(p * np.log(p) + (1 - p) * np.log1p(-p)))
        loss_sum = float(np.sum(np.log1p(np.exp(-ym * z))))
    u = Xc @ a
    rstar = 0.0
    for uj in u:
        best = minimize_scalar(lambda v, uj=uj: -(uj * v - lam1 * abs(v) - 0.5 * lam2 * v * v),
                               bounds=(-1e3, 1e3), method="bounded",
                               options={"xatol": 1e-12})
        rstar += -best.fun
    D = (conj - rstar) / n
    P_ref = (loss_sum + lam1 * np.abs(w).sum() + 0.5 * lam2 * w @ w) / n
    np.testing.assert_allclose(P, P_ref, rtol=1e-12)
    np.testing.assert_allclose(gap, P_ref - D, rtol=1e-7)
    Pstar = fit_glm(X, y, loss=loss, alpha=alpha, penalty="elasticnet", l1_ratio=r,
                    fit_intercept=False, tol=1e-12, max_iter=20_000).objective[-1]
    assert D <= Pstar + 1e-12


@pytest.mark.parametrize("loss", ["squared", "logistic"])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_l1_ratio_one_and_zero_are_the_l1_and_l2_fits(loss, fit_intercept):
    """``l1_ratio=1`` runs exactly the l1 fit, ``l1_ratio=0`` exactly the l2 primal fit."""
    Xs, X, y = _data("dense", seed=2, classify=loss == "logistic")
    kw = dict(loss=loss, alpha=0.02, fit_intercept=fit_intercept, tol=1e-8, max_iter=5000,
              solver="scd", random_state=4)
    l1 = fit_glm(X, y, penalty="l1", **kw)
    en1 = fit_glm(X, y, penalty="elasticnet", l1_ratio=1.0, **kw)
    np.testing.assert_array_equal(en1.coef, l1.coef)
    assert en1.intercept == l1.intercept and en1.n_iter == l1.n_iter
    l2 = fit_glm(X, y, penalty="l2", dual=False, **kw)
    en0 = fit_glm(X, y, penalty="elasticnet", l1_ratio=0, **kw)
    assert not en0.dual
    np.testing.assert_array_equal(en0.coef, l2.coef)
    assert en0.intercept == l2.intercept
    assert np.count_nonzero(l1.coef) < np.count_nonzero(l2.coef)  # the two problems differ


def test_tpa_scd_primal_reaches_the_same_optimum():
    """``tpa-scd``'s primal (threads, replicas: deterministic) runs the same prox step."""
    Xs, X, y = _data("sparse", seed=6)
    kw = dict(loss="squared", alpha=0.05, penalty="elasticnet", l1_ratio=0.5, tol=1e-12,
              max_iter=20_000, random_state=0)
    ref = fit_glm(X, y, solver="scd", **kw)
    res = fit_glm(X, y, solver="tpa-scd", n_jobs=2, tpa_mode="replica", **kw)
    assert res.converged and res.solver == "tpa-scd" and not res.dual
    np.testing.assert_allclose(res.coef, ref.coef, rtol=0, atol=ATOL)
    np.testing.assert_allclose(res.intercept, ref.intercept, rtol=0, atol=ATOL)
    _same_support(res.coef, ref.coef)


def test_auto_routes_the_elastic_net_to_primal_scd():
    # few features (no more than examples): proximal Newton (glm/_prox_newton.py); wide
    # data: the primal scd
    Xs, X, y = _data("dense", seed=7, classify=True)
    res = fit_glm(X, y, loss="logistic", alpha=0.01, penalty="elasticnet", l1_ratio=0.5)
    assert res.solver == "prox-newton" and not res.dual and res.converged
    assert "elasticnet" in res.info["auto_reason"]
    chosen, _ = choose_solver(X, loss="squared", penalty="elasticnet", alpha=0.01)
    assert chosen == "prox-newton"  # where l2 would run cholesky
    chosen, reason = choose_solver(X[:, :5], loss="squared", penalty="elasticnet", alpha=0.01)
    assert chosen == "scd" and "elasticnet" in reason


def test_prox_step_is_the_exact_coordinate_minimiser():
    """The squared loss's coordinate step minimises ``||z + x (v - w_j) - y||^2 / 2 +
    lam1 |v| + lam2 v^2 / 2`` exactly (1-d numerical minimisation as the reference)."""
    rng = np.random.default_rng(8)
    n, d = 30, 5
    Xd = rng.standard_normal((n, d))
    A = sp.csc_matrix(Xd)  # feature-major: column j = feature j over the examples
    y = rng.standard_normal(n)
    colsq = cd.col_sqnorms(A)
    for lam1, lam2, j in [(3.0, 2.0, 0), (40.0, 1.0, 1), (0.5, 10.0, 2)]:
        w = rng.standard_normal(d)
        z = Xd @ w
        w_new, z_new = w.copy(), z.copy()
        cd.primal_epoch(A, y, w_new, z_new, np.array([j]), loss=0, l1=True, lam_n=lam1,
                        colsq=colsq, lam2=lam2)
        x, rest = Xd[:, j], z - Xd[:, j] * w[j]

        def f(v, x=x, rest=rest, lam1=lam1, lam2=lam2):
            return 0.5 * np.sum((rest + x * v - y) ** 2) + lam1 * abs(v) + 0.5 * lam2 * v * v

        best = minimize_scalar(f, bounds=(-50, 50), method="bounded", options={"xatol": 1e-12})
        assert abs(w_new[j] - best.x) < 1e-6
        assert f(w_new[j]) <= best.fun + 1e-12
        for eps in (1e-7, -1e-7):  # a convex function at its minimiser
            assert f(w_new[j]) <= f(w_new[j] + eps)
        np.testing.assert_allclose(z_new, Xd @ w_new, rtol=0, atol=1e-12)
    # the pure-block step from summed statistics: the same closed form
    w = np.array([0.5, -1.0, 0.2])
    g = np.array([1.0, -0.3, 0.05])
    h = np.array([2.0, 1.5, 3.0])
    delta = np.zeros(3)
    w0 = w.copy()
    cd.block_steps(w, np.arange(3), g, h, delta, l1=True, lam_n=0.4, lam2=0.7)
    t = h * w0 - g
    np.testing.assert_allclose(w, np.sign(t) * np.maximum(np.abs(t) - 0.4, 0) / (h + 0.7),
                               rtol=1e-15)
    np.testing.assert_allclose(delta, w - w0, rtol=1e-15)


def test_lam2_keyword_errors():
    A = sp.csc_matrix(np.ones((4, 2)))
    kw = dict(loss=0, colsq=np.full(2, 4.0), lam_n=1.0)
    args = (A, np.zeros(4), np.zeros(2), np.zeros(4), np.array([0]))
    with pytest.raises(ValueError, match="lam2 must be a finite number >= 0"):
        cd.primal_epoch(*args, l1=True, lam2=-1.0, **kw)
    with pytest.raises(ValueError, match="lam2 .* needs l1=True"):
        cd.primal_epoch(*args, l1=False, lam2=1.0, **kw)


@pytest.mark.parametrize("kw, match", [
    (dict(l1_ratio=-0.1), r"l1_ratio must be a number in \[0, 1\], got -0.1"),
    (dict(l1_ratio=1.5), r"l1_ratio must be a number in \[0, 1\]"),
    (dict(l1_ratio=float("nan")), r"l1_ratio must be a number in \[0, 1\]"),
    (dict(l1_ratio="0.5"), r"l1_ratio must be a number in \[0, 1\]"),
    (dict(l1_ratio=True), r"l1_ratio must be a number in \[0, 1\]"),
    (dict(), "penalty='elasticnet' needs l1_ratio"),
    (dict(l1_ratio=0.5, penalty="l2"), "l1_ratio is only used with penalty='elasticnet', "
                                       "got l1_ratio=0.5 with penalty='l2'"),
    (dict(l1_ratio=0.5, penalty="l1"), "l1_ratio is only used with penalty='elasticnet'"),
    (dict(l1_ratio=0.5, penalty="l3"), "penalty must be 'l2', 'l1' or 'elasticnet'"),
    (dict(l1_ratio=0.5, solver="newton"), "solver='newton' .* penalty='elasticnet'"),
    (dict(l1_ratio=0.5, solver="cholesky", loss="squared"),
     "solver='cholesky' .* penalty='elasticnet'"),
    (dict(l1_ratio=0.5, solver="cocoa"), "solver='cocoa' .* penalty='elasticnet'"),
    (dict(l1_ratio=0.5, solver="pure-block"), "solver='pure-block' .* penalty='elasticnet'"),
    (dict(l1_ratio=0.5, dual=True), "penalty='elasticnet' is solved in the primal only"),
    (dict(l1_ratio=0.5, loss="hinge"), "penalty='elasticnet' is not supported with "
                                       "loss='hinge'"),
    (dict(l1_ratio=0.5, device="gpu"), "needs penalty='l2', got 'elasticnet'"),
    (dict(l1_ratio=0.5, sample_weight=np.arange(1.0, 41.0)),
     "does not support non-uniform sample_weight"),
])
def test_bad_arguments_raise(kw, match):
    _, X, y = _data("dense", n=40, d=4, classify=True)
    call = dict(loss="logistic", alpha=0.1, penalty="elasticnet")
    call.update(kw)
    with pytest.raises(ValueError, match=match):
        fit_glm(X, y, **call)


def test_choose_solver_refuses_elastic_net_over_comm():
    _, X, _ = _data("dense", n=20, d=3)
    with pytest.raises(ValueError, match="penalty='elasticnet' .* comm= is not supported"):
        choose_solver(X, loss="squared", penalty="elasticnet", alpha=0.1, comm=object())
