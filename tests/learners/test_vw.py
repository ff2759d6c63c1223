"""Vowpal Wabbit's hybrid learner (issue 19): the online pass, the weighted average and the
all-reduced L-BFGS reach the single-process optimum for K = 1, 2, 4 ranks, with the same model
bit for bit on every rank, in fewer L-BFGS iterations than from zero."""

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression, Ridge

from roofline import gmat
from roofline.comm import run
from roofline.glm import alpha_from_peer
from roofline.learners import fit_vw_hybrid

N, D = 6000, 800


def _problem(loss="logistic", seed=0):
    rng = np.random.default_rng(seed)
    X = gmat.powerlaw_csc(D, N, 15.0, dtype=np.float64, random_state=seed + 1)
    w = rng.standard_normal(D)
    eta = X.T @ w / 3 + 0.3
    if loss == "logistic":
        y = np.where(rng.random(N) < 1 / (1 + np.exp(-eta)), 1.0, -1.0)
    else:
        y = eta + 0.5 * rng.standard_normal(N)
    return X, y


def _objective(X, y, alpha, w, b):
    m = y * (X.T @ w + b)
    return float(np.logaddexp(0.0, -m).mean() + alpha / 2 * w @ w)


def _rank_fit(comm, loss, alpha, passes=1):
    X, y = _problem(loss)
    mine = np.arange(comm.rank, N, comm.size)  # this rank's examples
    res = fit_vw_hybrid(X[:, mine], y[mine], loss=loss, alpha=alpha, comm=comm,
                        online_passes=passes, tol=1e-9, max_iter=1000)
    return res.coef, res.intercept, res.n_iter, res.converged


@pytest.fixture(scope="module")
def sk_logistic():
    X, y = _problem()
    C = 0.5
    sk = LogisticRegression(C=C, tol=1e-12, max_iter=20000).fit(X.T.tocsr(), y)
    return alpha_from_peer("C", C, N), sk.coef_.ravel(), float(sk.intercept_[0])


@pytest.mark.parametrize("K", [1, 2, 4])
def test_logistic_reaches_the_optimum_on_every_rank(K, sk_logistic):
    alpha, coef, b = sk_logistic
    out = run(_rank_fit, K, backend="threads", args=("logistic", alpha))
    for c, bb, it, conv in out:
        assert conv
        np.testing.assert_array_equal(c, out[0][0])  # bit-identical on every rank
        assert bb == out[0][1] and it == out[0][2]
    X, y = _problem()
    # the objective to 1e-10 of scikit-learn's; the coefficients then agree to
    # sqrt(2 * gap / alpha) ~ 2e-4 along the rare features' weakly curved directions
    assert _objective(X, y, alpha, out[0][0], out[0][1]) == pytest.approx(
        _objective(X, y, alpha, coef, b), rel=1e-10)
    np.testing.assert_allclose(out[0][0], coef, rtol=0, atol=5e-4)
    assert out[0][1] == pytest.approx(b, abs=5e-4)


def test_squared_loss_equals_ridge():
    X, y = _problem("squared")
    alpha = 1e-3
    sk = Ridge(alpha=alpha * N, tol=1e-12, solver="cholesky").fit(X.T.toarray(), y)
    out = run(_rank_fit, 2, backend="threads", args=("squared", alpha))
    np.testing.assert_allclose(out[0][0], sk.coef_, rtol=0, atol=5e-4)
    assert out[0][1] == pytest.approx(sk.intercept_, abs=5e-4)


def test_the_online_pass_saves_lbfgs_iterations(sk_logistic):
    """The paper's point, measured: from the averaged online model L-BFGS needs fewer
    iterations than from zero (here on 2 ranks)."""
    alpha = sk_logistic[0]
    warm = run(_rank_fit, 2, backend="threads", args=("logistic", alpha, 1))[0]
    cold = run(_rank_fit, 2, backend="threads", args=("logistic", alpha, 0))[0]
    np.testing.assert_allclose(warm[0], cold[0], rtol=0, atol=5e-4)  # the same optimum
    assert warm[2] < cold[2], (warm[2], cold[2])


@pytest.mark.slow
@pytest.mark.multiprocess
def test_real_processes_equal_threads(sk_logistic):
    alpha = sk_logistic[0]
    tcp = run(_rank_fit, 2, backend="tcp", args=("logistic", alpha), timeout=60)
    thr = run(_rank_fit, 2, backend="threads", args=("logistic", alpha))
    np.testing.assert_array_equal(tcp[0][0], tcp[1][0])
    np.testing.assert_array_equal(tcp[0][0], thr[0][0])  # Kylix reduces in the same order


def test_bad_input_names_the_argument():
    X, y = _problem()
    with pytest.raises(ValueError, match="alpha must be a positive"):
        fit_vw_hybrid(X, y, alpha=0.0)
    with pytest.raises(ValueError, match="loss must be one of"):
        fit_vw_hybrid(X, y, alpha=1e-3, loss="hinge")
    with pytest.raises(ValueError, match="y has 10 entries but X has 6000"):
        fit_vw_hybrid(X, y[:10], alpha=1e-3)
    with pytest.raises(ValueError, match="must hold binary labels in"):
        fit_vw_hybrid(X, y * 2, alpha=1e-3)
    with pytest.raises(ValueError, match="online_passes must be an int"):
        fit_vw_hybrid(X, y, alpha=1e-3, online_passes=-1)
    bad = X.copy()
    bad.data[0] = np.nan
    with pytest.raises(ValueError, match="X has a non-finite value"):
        fit_vw_hybrid(bad, y, alpha=1e-3)


def _mismatched(comm):
    X, y = _problem()
    return fit_vw_hybrid(X[: D - comm.rank], y, alpha=1e-3, comm=comm)


def test_ranks_with_different_feature_counts_are_refused():
    with pytest.raises(ValueError, match="different numbers of features"):
        run(_mismatched, 2, backend="threads")


def _estimator_rank(comm, C):
    from roofline.learners import LogisticRegression as RLogisticRegression

    X, y = _problem()
    mine = np.arange(comm.rank, N, comm.size)
    Xs = X.T.tocsr()[mine]
    clf = RLogisticRegression(C=C, solver="vw-hybrid", tol=1e-9, max_iter=1000, comm=comm)
    return clf.fit(Xs, y[mine]).coef_.ravel(), float(clf.intercept_[0])


def test_the_estimators_take_solver_vw_hybrid(sk_logistic):
    from roofline.learners import LinearSVC as RLinearSVC
    from roofline.learners import LogisticRegression as RLogisticRegression
    from roofline.learners import Ridge as RRidge

    alpha, coef, b = sk_logistic
    X, y = _problem()
    clf = RLogisticRegression(C=0.5, solver="vw-hybrid", tol=1e-9, max_iter=1000)
    clf.fit(X.T.tocsr(), y)
    np.testing.assert_allclose(clf.coef_.ravel(), coef, rtol=0, atol=5e-4)
    out = run(_estimator_rank, 2, backend="threads", args=(0.5,))  # comm=: each rank its rows
    np.testing.assert_array_equal(out[0][0], out[1][0])
    np.testing.assert_allclose(out[0][0], coef, rtol=0, atol=5e-4)
    Xr, yr = _problem("squared")
    sk = Ridge(alpha=30.0, solver="cholesky").fit(Xr.T.toarray(), yr)
    rr = RRidge(alpha=30.0, solver="vw-hybrid", tol=1e-10, max_iter=1000).fit(Xr.T.tocsr(), yr)
    np.testing.assert_allclose(rr.coef_.ravel(), sk.coef_, rtol=0, atol=5e-4)
    with pytest.raises(ValueError, match="vw-hybrid.*logistic and squared"):
        RLinearSVC(solver="vw-hybrid").fit(X.T.tocsr(), y)
