"""The dual (SDCA) with an unregularised intercept (issue 34): the same optimum as the primal
solvers' and scikit-learn's, a certified ``tol``, and ``auto`` choosing it."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import minimize

from roofline import glm
from roofline.glm._problem import GLMProblem
from roofline.kernels import LOSS_CODES


def _sparse_hot(n=1500, d=200, seed=0):
    """CTR-shaped: a few hot features in most examples (they move with the intercept)."""
    rng = np.random.default_rng(seed)
    hot = (rng.random((6, n)) < 0.7).astype(np.float64)
    cold = sp.random(d - 6, n, density=0.02, format="csc", random_state=rng)
    X = sp.vstack([sp.csc_matrix(hot), cold]).tocsc()
    w = rng.standard_normal(d)
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-(X.T @ w - 1.0))), 1.0, -1.0)
    return X, y


def _dense(n=600, d=8, seed=1):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((d, n)) * np.exp(rng.uniform(-1, 1, (d, 1))) + 0.5
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-(rng.standard_normal(d) @ X + 0.7))), 1.0,
                 -1.0)
    return np.ascontiguousarray(X), y


DATA = {"sparse-hot": _sparse_hot(), "dense": _dense()}


def _targets(name, loss):
    X, y = DATA[name]
    if loss == "squared":
        rng = np.random.default_rng(3)
        y = y * 2.0 + 3.0 + 0.3 * rng.standard_normal(y.size)
    return X, y


@pytest.mark.parametrize("name", sorted(DATA))
@pytest.mark.parametrize("loss", ["logistic", "squared"])
def test_dual_with_intercept_reaches_newtons_optimum(name, loss):
    X, y = _targets(name, loss)
    alpha = 1e-2
    ref = glm.fit_glm(X, y, loss=loss, alpha=alpha, solver="newton", tol=1e-13, max_iter=500)
    res = glm.fit_glm(X, y, loss=loss, alpha=alpha, solver="scd", tol=1e-11, max_iter=5000,
                      random_state=0)
    assert res.converged and res.dual and res.info["intercept"] == "unregularised"
    assert res.objective[-1] - ref.objective[-1] <= 1e-9 * abs(ref.objective[-1])
    np.testing.assert_allclose(res.coef, ref.coef, atol=2e-4)
    assert res.intercept == pytest.approx(ref.intercept, abs=2e-4)
    # the intercept is not regularised: it differs from the constant feature's optimum
    reg = glm.fit_glm(X, y, loss=loss, alpha=alpha, solver="scd", dual=True, tol=1e-11,
                      max_iter=5000, intercept_scaling=1.0, random_state=0)
    assert "intercept" not in reg.info
    assert abs(reg.intercept - ref.intercept) > 1e-3


@pytest.mark.parametrize("name", sorted(DATA))
def test_dual_with_intercept_matches_scikit_learn(name):
    from sklearn.linear_model import LogisticRegression

    X, y = DATA[name]
    n, C = X.shape[1], 0.5
    res = glm.fit_glm(X, y, loss="logistic", alpha=1 / (C * n), solver="scd", tol=1e-11,
                      max_iter=5000, random_state=0)
    Xs = X.T.tocsr() if sp.issparse(X) else X.T
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sk = LogisticRegression(C=C, tol=1e-12, max_iter=100_000).fit(Xs, y)
    assert res.dual
    np.testing.assert_allclose(res.coef, sk.coef_[0], atol=5e-4)
    assert res.intercept == pytest.approx(sk.intercept_[0], abs=5e-4)


def _hinge_reference(X, y, lam_n):
    """The exact optimum of the hinge with an unregularised intercept, from its dual QP
    (``max sum beta - ||X (y beta)||^2 / (2 lam_n)``, ``0 <= beta <= 1``, ``sum y beta = 0``)
    solved by SLSQP; returns ``(w, P* * n)`` (the dual optimum)."""
    Xd = X.toarray() if sp.issparse(X) else X
    G = (Xd * y).T @ (Xd * y) / lam_n
    n = y.size
    res = minimize(lambda b: 0.5 * b @ G @ b - b.sum(), np.full(n, 0.5),
                   jac=lambda b: G @ b - 1.0, bounds=[(0.0, 1.0)] * n,
                   constraints=[{"type": "eq", "fun": lambda b: b @ y, "jac": lambda b: y}],
                   method="SLSQP", options={"maxiter": 2000, "ftol": 1e-14})
    beta = res.x
    return Xd @ (y * beta) / lam_n, float(beta.sum() - 0.5 * beta @ G @ beta)


def test_hinge_with_intercept_reaches_the_exact_optimum():
    X, y = _sparse_hot(n=100, d=30, seed=4)
    n, alpha = X.shape[1], 2e-2
    w_ref, nD = _hinge_reference(X, y, alpha * n)
    res = glm.fit_glm(X, y, loss="hinge", alpha=alpha, tol=1e-9, max_iter=20_000,
                      random_state=0)
    assert res.converged and res.dual and res.info["intercept"] == "unregularised"
    z = X.T @ res.coef + res.intercept
    P = np.maximum(0.0, 1.0 - y * z).mean() + 0.5 * alpha * res.coef @ res.coef
    assert P == pytest.approx(res.objective[-1], rel=1e-10)
    assert P - nD / n <= 1e-7 * P  # the QP's optimum, within the tolerances of both
    np.testing.assert_allclose(res.coef, w_ref, atol=1e-3)
    # feasible duals: y_i a_i in [0, 1], and they sum to ~0 (the intercept's condition)
    beta = y * res.dual_coef
    assert beta.min() >= -1e-12 and beta.max() <= 1 + 1e-12
    assert abs(res.dual_coef.sum()) <= 1e-3 * n


@pytest.mark.parametrize("name", sorted(DATA))
@pytest.mark.parametrize("tol", [1e-3, 1e-6])
def test_tol_is_a_certified_suboptimality_with_the_intercept(name, tol):
    X, y = DATA[name]
    alpha = 1e-3
    ref = glm.fit_glm(X, y, loss="logistic", alpha=alpha, solver="newton", tol=1e-13,
                      max_iter=500)
    P_star = float(ref.objective[-1])
    res = glm.fit_glm(X, y, loss="logistic", alpha=alpha, solver="scd", tol=tol,
                      max_iter=5000, random_state=0, stall_switch=False, check_every=1)
    assert res.converged and res.dual
    # every recorded gap bounds the suboptimality of its point, and the last meets tol
    assert np.all(res.objective - P_star <= res.gap_history + 1e-12 * P_star)
    assert (res.objective[-1] - P_star) / P_star <= tol


def test_balanced_dual_is_feasible_and_a_lower_bound():
    """The certificate's dual point sums to zero and stays in each loss's domain, so its dual
    objective is below the optimum."""
    X, y = DATA["sparse-hot"]
    X = X.tocsc()
    alpha = 1e-2
    ref = glm.fit_glm(X, y, loss="logistic", alpha=alpha, solver="newton", tol=1e-13)
    rng = np.random.default_rng(0)
    pb = GLMProblem(X, y, LOSS_CODES["logistic"], False, alpha, True, None, primal=False)
    assert pb.free_intercept and pb.icpt == 0.0
    for _ in range(5):
        a = y * rng.uniform(0, 1, y.size)  # feasible for the logistic, sum != 0
        v = pb.dual_point(a)
        a2, u = pb.balanced_dual(a, v)
        assert abs(a2.sum()) <= 1e-9 * np.abs(a).sum()
        beta = y * a2
        assert beta.min() >= 0.0 and beta.max() <= 1.0
        np.testing.assert_allclose(u, pb.xdot(a2), rtol=1e-10, atol=1e-10)
        D = (glm.cd.conj_sum(a2, y, 1) - 0.5 * u @ u / pb.lam_n) / pb.n
        assert D <= ref.objective[-1] + 1e-12


def test_auto_runs_the_dual_with_an_intercept_on_sparse_data():
    from roofline.datasources import make_criteo_like_matrix

    X, y = make_criteo_like_matrix(6000, seed=2, n_bits=14)
    y = np.where(y > 0, 1.0, -1.0)
    alpha = 1 / (0.3 * y.size)
    assert glm.choose_solver(X, loss="logistic", alpha=alpha, fit_intercept=True)[0] == "scd"
    res = glm.fit_glm(X, y, loss="logistic", alpha=alpha, tol=1e-6, random_state=0)
    assert res.solver == "scd" and res.dual and res.converged
    assert res.info["intercept"] == "unregularised"
    ref = glm.fit_glm(X, y, loss="logistic", alpha=alpha, solver="newton", tol=1e-12)
    assert (res.objective[-1] - ref.objective[-1]) / ref.objective[-1] <= 1e-6
    assert res.intercept == pytest.approx(ref.intercept, abs=0.05)


def test_tpa_and_the_distributed_duals_keep_the_regularised_constant_feature():
    """Where the intercept cannot be free (TPA-SCD's threads, CoCoA), ``intercept_scaling``
    defaults to 1 (liblinear's constant feature), as before; the primal is ``dual=None``'s
    choice for ``tpa-scd`` with an intercept."""
    X, y = DATA["dense"]
    res = glm.fit_glm(X, y, loss="logistic", alpha=1e-2, solver="tpa-scd", n_jobs=2,
                      tol=1e-8, max_iter=2000, random_state=0)
    assert not res.dual
    reg = glm.fit_glm(X, y, loss="logistic", alpha=1e-2, solver="tpa-scd", n_jobs=2, dual=True,
                      tol=1e-8, max_iter=2000, random_state=0)
    one = glm.fit_glm(X, y, loss="logistic", alpha=1e-2, solver="scd", dual=True,
                      intercept_scaling=1.0, tol=1e-10, max_iter=5000, random_state=0)
    assert reg.dual and "intercept" not in reg.info
    assert reg.objective[-1] == pytest.approx(one.objective[-1], rel=1e-6)
    with pytest.raises(ValueError, match="intercept_scaling must be a positive"):
        glm.fit_glm(X, y, loss="logistic", alpha=1e-2, intercept_scaling=0.0)


def test_intercept_init_warm_starts_the_intercept():
    X, y = DATA["dense"]
    alpha = 1e-2
    ref = glm.fit_glm(X, y, loss="logistic", alpha=alpha, solver="newton", tol=1e-12)
    cold = glm.fit_glm(X, y, loss="logistic", alpha=alpha, solver="scd", dual=False, tol=1e-8,
                       coef_init=ref.coef, random_state=0, max_iter=500)
    warm = glm.fit_glm(X, y, loss="logistic", alpha=alpha, solver="scd", dual=False, tol=1e-8,
                       coef_init=ref.coef, intercept_init=ref.intercept, random_state=0,
                       max_iter=500)
    assert warm.converged and warm.n_iter <= 2 < cold.n_iter
    newton = glm.fit_glm(X, y, loss="logistic", alpha=alpha, solver="newton", tol=1e-8,
                         coef_init=ref.coef, intercept_init=ref.intercept)
    assert newton.n_iter <= 1
    # the dual starts its intercept there (and gets to the same optimum)
    dual = glm.fit_glm(X, y, loss="logistic", alpha=alpha, solver="scd", tol=1e-10,
                       intercept_init=ref.intercept + 0.5, random_state=0, max_iter=5000)
    assert dual.dual and dual.intercept == pytest.approx(ref.intercept, abs=1e-4)
    for bad in (float("nan"), "1", True):
        with pytest.raises(ValueError, match="intercept_init must be a finite number"):
            glm.fit_glm(X, y, loss="logistic", alpha=alpha, intercept_init=bad)


def _ref_objective(X, y, loss, alpha):
    return float(glm.fit_glm(X, y, loss=loss, alpha=alpha, solver="newton", tol=1e-13,
                             max_iter=500).objective[-1])


@pytest.mark.filterwarnings("ignore:scd reached max_iter")
@pytest.mark.parametrize("name", sorted(DATA))
@pytest.mark.parametrize("loss", ["logistic", "squared"])
def test_projected_certificate_is_a_rigorous_and_tighter_bound(name, loss):
    """``projected_dual_gap`` at dual points of a run (its sums ``a`` off zero, the
    intercept off its optimum): never below the true suboptimality ``P(w, b) - P*``, never
    above the scaled point's certificate, and its direction ``d`` (``sum d = 1``, ``X d``)
    gives a zero-sum dual point in the loss's domain."""
    X, y = _targets(name, loss)
    X = sp.csc_matrix(X)
    alpha = 1e-3
    P_star = _ref_objective(X, y, loss, alpha)
    pb = GLMProblem(X, y, LOSS_CODES[loss], False, alpha, True, None, primal=False)
    tighter = 0
    for sweeps in (2, 4, 8, 16):
        res = glm.fit_glm(X, y, loss=loss, alpha=alpha, solver="scd", tol=1e-14,
                          max_iter=sweeps, random_state=0, stall_switch=False)
        a = res.dual_coef.copy()
        for b in (res.intercept, res.intercept + 0.05):  # also off the run's intercept
            v = pb.dual_point(a)
            parts = pb.dual_parts(a, v, b)
            P, loose = pb.dual_certificate(parts, v, b)
            gap, direction = pb.projected_dual_gap(a, v, parts, 0.0, 6)
            sub = P - P_star
            assert gap >= sub - 1e-12 * abs(P_star)
            assert gap <= loose
            tighter += gap < 0.5 * loose
            if direction is not None:
                d, xd = direction
                assert d.sum() == pytest.approx(1.0, abs=1e-9)
                np.testing.assert_allclose(xd, pb.xdot(d), rtol=1e-8, atol=1e-10)
                ap = a - parts[2] * d
                assert abs(ap.sum()) <= 1e-9 * np.abs(a).sum()
                if loss == "logistic":
                    assert (y * ap).min() >= 0.0 and (y * ap).max() <= 1.0
                # the warm start from that direction certifies at least as well, no step
                again, _ = pb.projected_dual_gap(a, v, parts, 0.0, 0, direction)
                assert again <= gap * (1 + 1e-9) + 1e-15
    if name == "sparse-hot":  # the point of it where hot features move with the intercept
        assert tighter >= 4


def test_a_certificate_without_the_zero_sum_is_not_a_bound():
    """Why the correction must restore ``sum a' = 0``: at the dual optimum for a fixed
    intercept ``b`` off its optimum (``sum a != 0``), the fixed-``b`` gap is ~0 although
    ``P(w, b) - P* > 0`` (it bounds ``P(w, b) - min_w P(w, b)`` only); the projected
    certificate bounds the whole suboptimality."""
    X, y = DATA["sparse-hot"]
    X = X.tocsc()
    alpha = 1e-3
    P_star = _ref_objective(X, y, "logistic", alpha)
    pb = GLMProblem(X, y, LOSS_CODES["logistic"], False, alpha, True, None, primal=False)
    b = float(glm.fit_glm(X, y, loss="logistic", alpha=alpha, solver="newton",
                          tol=1e-13).intercept) + 0.5
    a, v = np.zeros(y.size), np.zeros(X.shape[0])
    colsq = np.asarray(X.multiply(X).sum(axis=0)).ravel()
    rng = np.random.default_rng(0)
    for _ in range(300):  # the dual of min_w P(w, b) at this b, to its optimum
        glm.cd.dual_epoch(X, y, a, v, rng.permutation(y.size).astype(np.int64), loss=1,
                          lam_n=pb.lam_n, colsq=colsq, offset=b)
    v = pb.dual_point(a)
    parts = pb.dual_parts(a, v, b)
    P = pb.dual_certificate(parts, v, b)[0]
    unsound = pb.fixed_intercept_gap(parts, v, b)
    gap, _ = pb.projected_dual_gap(a, v, parts, 0.0, 8)
    assert abs(parts[2]) > 1.0  # sum a far from 0
    assert unsound < 1e-3 * (P - P_star)
    assert P - P_star <= gap <= 3.0 * (P - P_star)  # rigorous and tight


@pytest.mark.parametrize("name", sorted(DATA))
@pytest.mark.parametrize("loss", ["logistic", "squared"])
@pytest.mark.parametrize("tol", [1e-4, 1e-7])
def test_every_certificate_bounds_the_suboptimality(name, loss, tol):
    """The recorded certificates (the projected point's where the scaled point's is loose)
    bound each check's true suboptimality, the run reaches ``tol``, and its last certificate
    is tighter than the scaled point's at the point returned where the latter misses
    ``tol``."""
    X, y = _targets(name, loss)
    alpha = 1e-3
    P_star = _ref_objective(X, y, loss, alpha)
    # (squared, dense: the per-sweep path's intercept moves wander off with a check every
    # sweep, a known limitation of FreeIntercept's secant there: the batched checks)
    every = "auto" if (name, loss) == ("dense", "squared") else 1
    res = glm.fit_glm(X, y, loss=loss, alpha=alpha, solver="scd", tol=tol, max_iter=20000,
                      random_state=0, stall_switch=False, check_every=every)
    assert res.converged and res.dual and res.info["intercept"] == "unregularised"
    assert np.all(res.objective - P_star <= res.gap_history + 1e-12 * abs(P_star))
    assert (res.objective[-1] - P_star) / abs(P_star) <= tol
    assert res.gap_history[-1] <= tol * abs(res.objective[-1])


@pytest.mark.parametrize("check_every", [1, 2])
def test_intercept_settles_when_checked_every_sweep(check_every):
    """Checks after every sweep see ``sum a`` before the sweeps have settled at the last
    intercept: the moves wait for the fixed-``b`` gap to halve, and a certificate grown far
    beyond the best sends ``b`` back (it wandered to ~3e7 before, the objective to 2e14)."""
    X, y = _targets("dense", "squared")
    alpha = 1e-3
    ref = glm.fit_glm(X, y, loss="squared", alpha=alpha, solver="newton", tol=1e-12)
    res = glm.fit_glm(X, y, loss="squared", alpha=alpha, solver="scd", tol=1e-6,
                      max_iter=5000, random_state=0, stall_switch=False,
                      check_every=check_every)
    assert res.converged and res.dual
    P_star = float(ref.objective[-1])
    assert (res.objective[-1] - P_star) / P_star <= 1e-6
    assert abs(res.intercept - ref.intercept) <= 1e-2


# -- session 8: the cheaper checks and the first move of b ------------------------------------


@pytest.mark.parametrize("loss", ["logistic", "squared"])
@pytest.mark.parametrize("share", [0.2, 0.8])
def test_balanced_dual_scatters_the_smaller_sign(loss, share, monkeypatch):
    """The scaled point's ``X a'`` comes from a scatter over the examples of one sign only,
    the fewer of the two (``X a_s = v - X a_o``): for the logistic the smaller class's
    columns, compacted once; and is ``X a'`` either way, ``a'`` zero-sum and feasible."""
    X, y = DATA["sparse-hot"]
    X = X.tocsc()
    rng = np.random.default_rng(1)
    y = np.where(rng.random(y.size) < share, 1.0, -1.0)
    pb = GLMProblem(X, y, LOSS_CODES[loss], False, 1e-2, True, None, primal=False)
    scattered = []
    matvec_t = glm.cd.matvec_t

    def counting(A, a, out, **kw):
        scattered.append((int(np.count_nonzero(a)), A.shape[1]))
        return matvec_t(A, a, out, **kw)

    for scale in (0.2, 0.9):  # sum a of either sign
        if loss == "logistic":
            beta = rng.uniform(0, 1, y.size)
            beta[y > 0] *= scale
            beta[y < 0] *= 1.1 - scale
            a = y * beta
            smaller = min(np.count_nonzero(y > 0), np.count_nonzero(y < 0))
        else:  # signs unrelated to the labels
            a = np.where(rng.random(y.size) < share, scale, scale - 1.1)
            a *= rng.uniform(0.5, 1.0, y.size)
            smaller = min(np.count_nonzero(a > 0), np.count_nonzero(a < 0))
        v = pb.dual_point(a)
        scattered.clear()
        monkeypatch.setattr(glm.cd, "matvec_t", counting)
        a2, u = pb.balanced_dual(a, v)
        monkeypatch.setattr(glm.cd, "matvec_t", matvec_t)
        # (the logistic's scatter runs over the compacted columns of the smaller class)
        assert scattered == [(smaller, smaller if loss == "logistic" else y.size)]
        assert abs(a2.sum()) <= 1e-9 * np.abs(a).sum()
        if loss == "logistic":
            assert (a2 * y).min() >= 0.0 and (a2 * y).max() <= 1.0
        np.testing.assert_allclose(u, pb.xdot(a2), rtol=1e-10, atol=1e-10)


def test_vdot_is_the_dot_product():
    from roofline.glm._problem import vdot

    rng = np.random.default_rng(0)
    x, z = rng.standard_normal(100_003), rng.standard_normal(100_003)
    assert vdot(x, z) == pytest.approx(float(np.dot(x, z)), rel=1e-12)
    assert vdot(x[::3], z[::3]) == pytest.approx(float(np.dot(x[::3], z[::3])), rel=1e-12)


def _fixed_b_optimum(X, y, loss, pb, b, sweeps=300):
    a, v = np.zeros(y.size), np.zeros(X.shape[0])
    colsq = np.asarray(X.multiply(X).sum(axis=0)).ravel() if sp.issparse(X) else (X * X).sum(0)
    rng = np.random.default_rng(0)
    for _ in range(sweeps):
        glm.cd.dual_epoch(X, y, a, v, rng.permutation(y.size).astype(np.int64), loss=loss,
                          lam_n=pb.lam_n, colsq=colsq, offset=b)
    return a, pb.dual_point(a), colsq


@pytest.mark.parametrize("name", sorted(DATA))
@pytest.mark.parametrize("loss", ["logistic", "squared"])
def test_curvature_bounds_hold(name, loss):
    """``FreeIntercept``'s bounds on ``f''(b) = 1^T M^{-1} 1`` (``M`` the fixed-``b`` dual's
    Hessian): ``_lower <= f'' <= _upper``, computed exactly from the dense ``M``; where the
    hot features move with ``b`` ``f''`` is far below Newton's ``h`` and the geometric mean
    of the bounds is closer to it than ``h`` is."""
    from roofline.glm._scd import FreeIntercept, null_intercept

    X, y = _targets(name, loss)
    Xs = sp.csc_matrix(X)
    code = LOSS_CODES[loss]
    pb = GLMProblem(Xs, y, code, False, 1e-3, True, None, primal=False)
    b0 = null_intercept(pb)
    a, v, colsq = _fixed_b_optimum(Xs, y, code, pb, b0)
    Xd = Xs.toarray()
    rng = np.random.default_rng(2)
    points = [a]
    if loss == "logistic":  # feasible points off the optimum too
        points.append(y * rng.uniform(0.05, 0.95, y.size))
    for pt in points:
        icb = FreeIntercept(pb, colsq, b0)
        if loss == "logistic":
            beta = np.clip(pt * y, 1e-6, 1 - 1e-6)
            H = 1.0 / (beta * (1.0 - beta))
        else:
            H = np.ones(y.size)
        M = np.diag(H) + Xd.T @ Xd / pb.lam_n
        exact = float(np.ones(y.size) @ np.linalg.solve(M, np.ones(y.size)))
        low, high = icb._lower(pt), icb._upper(pt)
        assert 0.0 < low <= exact * (1 + 1e-9)
        assert exact <= high * (1 + 1e-9)
        if name == "sparse-hot":
            assert exact < 0.2 * high
            assert abs(np.log(np.sqrt(low * high) / exact)) < abs(np.log(high / exact))


def test_the_first_move_of_b_is_not_negligible():
    """From the fixed-``b`` dual optimum at :func:`null_intercept` on data whose hot features
    move with ``b``, the first move (no secant slope yet) goes a good part of the way to
    ``b*`` (the geometric mean of two bounds of ``f''``: it may pass ``b*``, by at most half
    the distance here); with Newton's ``h`` alone it moved a small fraction."""
    from roofline.glm import _scd

    X, y = DATA["sparse-hot"]
    X = X.tocsc()
    alpha = 1e-3
    b_star = float(glm.fit_glm(X, y, loss="logistic", alpha=alpha, solver="newton",
                               tol=1e-13).intercept)
    pb = GLMProblem(X, y, LOSS_CODES["logistic"], False, alpha, True, None, primal=False)
    b0 = _scd.null_intercept(pb)
    a, v, colsq = _fixed_b_optimum(X, y, 1, pb, b0)
    parts = pb.dual_parts(a, v, b0)
    steps = {}
    for bounds in (True, False):
        icb = _scd.FreeIntercept(pb, colsq, b0)
        icb.radius = np.inf  # the step itself, not the trust radius
        old = _scd._FREE_FIRST_BOUNDS
        _scd._FREE_FIRST_BOUNDS = bounds
        try:
            assert icb.at_check(a, v, parts)
        finally:
            _scd._FREE_FIRST_BOUNDS = old
        steps[bounds] = (icb.b - b0) / (b_star - b0)
    assert 0.25 <= steps[True] <= 1.5  # (here 1.19: 19% past b*, which S's sign then shows)
    assert steps[False] < 0.1  # (0.066)


def test_the_projection_waits_a_check_after_a_move():
    """No projected certificate (its conjugate-gradient steps cost a scatter and a gather
    each) at the check right after ``b`` moved: ``sum a`` has not settled there."""
    from roofline.glm import _scd

    X, y = DATA["sparse-hot"]
    log = []
    at_check, project = _scd.FreeIntercept.at_check, GLMProblem.projected_dual_gap

    def at_check_logged(self, *args, **kw):
        moved = at_check(self, *args, **kw)
        log.append("moved" if moved else "stayed")
        return moved

    def project_logged(self, *args, **kw):
        log.append("projected")
        return project(self, *args, **kw)

    try:
        _scd.FreeIntercept.at_check = at_check_logged
        GLMProblem.projected_dual_gap = project_logged
        res = glm.fit_glm(X, y, loss="logistic", alpha=1e-3, solver="scd", tol=1e-7,
                          max_iter=20000, random_state=0, stall_switch=False, check_every=1)
    finally:
        _scd.FreeIntercept.at_check, GLMProblem.projected_dual_gap = at_check, project
    assert res.converged
    assert "projected" in log and "moved" in log
    for k, event in enumerate(log):
        if event == "projected":
            before = [e for e in log[:k] if e != "projected"]
            assert not before or before[-1] == "stayed"


# -- session 8b: the check's per-example passes fused ------------------------------------------


@pytest.mark.parametrize("loss", ["logistic", "hinge", "squared"])
@pytest.mark.parametrize("share", [0.2, 0.8])
def test_dual_parts_is_the_scaled_point_in_one_pass(loss, share, monkeypatch):
    """A free intercept's check sums at the scaled point of :meth:`balanced_dual` as the
    explicit formulas do, from strided dual variables (the solver's records); for the
    classification losses without a second conjugate pass over all examples and without
    forming ``a'``."""
    X, _ = DATA["sparse-hot"]
    X = X.tocsc()
    rng = np.random.default_rng(3)
    y = np.where(rng.random(X.shape[1]) < share, 1.0, -1.0)
    if loss == "squared":
        y = y + rng.normal(size=y.size)
    pb = GLMProblem(X, y, LOSS_CODES[loss], False, 1e-2, True, None, primal=False)
    calls = []
    conj_sum = glm.cd.conj_sum

    def counting(a, yy, lc):
        calls.append(a.size)
        return conj_sum(a, yy, lc)

    side_passes = []
    side_conj = glm.cd.scaled_side_conj

    def side_counting(*args):
        side_passes.append(1)
        return side_conj(*args)

    # sum a of either sign, far from 0 and near it (theta ~ 1e-3: the logistic conjugates
    # of the scaled side bounded from the first pass's sums)
    for scale, near in ((0.2, False), (0.9, False), (0.2, True), (0.9, True)):
        rec = np.zeros((y.size, 8))
        a = rec[:, 0]
        if loss == "squared":
            a[:] = rng.normal(size=y.size) + (scale - 0.5)
        else:
            beta = rng.uniform(0, 1, y.size)
            beta[y > 0] *= scale
            beta[y < 0] *= 1.1 - scale
            beta[rng.random(y.size) < 0.1] = 0.0
            if near:  # the larger side scaled down to the other's sum, times 1 +- 1e-3
                pos, neg = beta[y > 0].sum(), beta[y < 0].sum()
                big = y > 0 if pos > neg else y < 0
                beta[big] *= min(pos, neg) / max(pos, neg) * (1.0 + 4e-3 * (scale - 0.5))
            a[:] = y * beta
        v = pb.dual_point(a)
        b = -0.4
        calls.clear()
        side_passes.clear()
        monkeypatch.setattr(glm.cd, "conj_sum", counting)
        monkeypatch.setattr(glm.cd, "scaled_side_conj", side_counting)
        parts = pb.dual_parts(a, v, b)
        monkeypatch.setattr(glm.cd, "conj_sum", conj_sum)
        monkeypatch.setattr(glm.cd, "scaled_side_conj", side_conj)
        # a pass over the scaled side for the classification losses, but the logistic's
        # near sum a = 0 (the squared loss: balanced_dual's point)
        assert (side_passes != []) is (loss == "hinge" or (loss == "logistic" and not near))
        a2, u = pb.balanced_dual(a.copy(), v)
        z = X.T @ (v / pb.lam_n) + b
        want = [glm.cd.loss_sum(z, y, LOSS_CODES[loss]),
                conj_sum(a.copy(), y, LOSS_CODES[loss]), a.sum(),
                conj_sum(a2, y, LOSS_CODES[loss]), u @ u, v @ v]
        theta = abs(a.sum()) / np.abs(a[a * a.sum() > 0]).sum()
        if loss == "logistic" and theta <= 1e-2:
            # a lower bound of the scaled point's conjugate sum (D(a') from below), close
            assert parts[3] <= want[3] + 1e-12 * abs(want[3])
            assert parts[3] >= want[3] - 10 * theta**3 * np.abs(a).sum() / (1 - 0.995)
            want[3] = parts[3]
        np.testing.assert_allclose(parts, want, rtol=1e-10)
        assert calls == ([] if loss != "squared" else [y.size])


@pytest.mark.parametrize("ratio, moves", [(0.4, False), (0.2, True)])
def test_a_move_waits_until_the_fixed_gap_fell_to_0_35(ratio, moves):
    """After a move of ``b`` the next one waits until the sweeps have brought the fixed-b gap
    it opened down to ``_FREE_SETTLE`` (0.35) of it: at half of it ``sum a`` was still on
    its way (200k Criteo-like, C = 0.3, 1 seed in 8: a move at 0.495 of it overshot ``b`` and
    took 31 sweeps for 25)."""
    from roofline.glm import _scd

    assert _scd._FREE_SETTLE == 0.35
    X, y = DATA["sparse-hot"]
    pb = GLMProblem(X.tocsc(), y, LOSS_CODES["logistic"], False, 1e-2, True, None, primal=False)
    a = 0.5 * y
    v = pb.dual_point(a)
    icb = _scd.FreeIntercept(pb, np.ones(y.size), 0.0)
    icb.settle, icb.settle_checks = 1.0, 0
    n = pb.n
    # fixed-b gap (L - C) / n = ratio; the scaled point's certificate 2 + ratio (the
    # constraint's share the larger: a move is due but for the settling)
    parts = np.array([ratio * n, 0.0, -5.0, -2.0 * n, 0.0, 0.0])
    assert pb.fixed_intercept_gap(parts, v, 0.0) == pytest.approx(ratio)
    assert icb.at_check(a, v, parts) is moves
    assert (icb.b != 0.0) is moves
