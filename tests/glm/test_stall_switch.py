"""The stall switch of fit_glm: a dual CD run whose gap falls too slowly hands its primal
point to the trust-region Newton solver."""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from roofline.glm import fit_glm
from roofline.glm._problem import StallMonitor


def _badly_scaled(n=4000, d=30, seed=0):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((n, d)) * np.logspace(-2, 2, d)
    y = np.where(A[:, 0] / 0.01 + A[:, 3] / 0.03 + rng.standard_normal(n) > 0, 1.0, -1.0)
    return np.ascontiguousarray(A.T), y


def test_monitor_fires_on_a_slow_rate_only():
    fast = StallMonitor(1e-6)
    assert not any(fast(it, 1.0, 0.5 ** it) for it in range(1, 40))
    slow = StallMonitor(1e-6)
    fired = [slow(it, 1.0, 0.1 * 0.98 ** it) for it in range(1, 40)]
    assert fired.index(True) == slow.min_checks - 1 and sum(fired) == 1
    assert slow.predicted > slow.budget
    flat = StallMonitor(1e-6)
    assert any(flat(it, 1.0, 1e-2) for it in range(1, 10))  # no progress at all


@pytest.mark.parametrize("loss", ["logistic", "squared"])
def test_a_stalled_dual_run_finishes_with_newton(loss):
    X, y = _badly_scaled()
    if loss == "squared":
        y = X[0] / 0.01 + np.random.default_rng(1).standard_normal(y.size)
    kw = dict(loss=loss, alpha=1.0 / y.size, fit_intercept=False, tol=1e-8, max_iter=200,
              solver="scd", random_state=0)
    ref = fit_glm(X, y, **{**kw, "solver": "newton", "tol": 1e-12})
    res = fit_glm(X, y, **kw)
    sw = res.info["stall_switch"]
    assert res.converged and res.gap <= 1e-8 * abs(res.objective[-1])
    assert res.solver == "scd" and not res.dual and res.dual_coef is None
    assert 0 < sw["at_iter"] < res.n_iter and sw["newton_iter"] >= 1
    assert res.objective[-1] == pytest.approx(ref.objective[-1], rel=1e-7)
    assert res.objective.size == res.gap_history.size == res.times.size
    assert np.all(np.diff(res.times) >= 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        off = fit_glm(X, y, **kw, stall_switch=False)
    assert not off.converged and "stall_switch" not in off.info


def test_no_switch_where_dual_cd_is_fast():
    from roofline.datasources import make_criteo_like_matrix

    X, y = make_criteo_like_matrix(20_000, seed=3, n_bits=16)
    res = fit_glm(X, np.where(y > 0, 1.0, -1.0), loss="logistic", alpha=1 / (0.3 * 20_000),
                     fit_intercept=False, solver="scd", random_state=0)
    assert res.converged and "stall_switch" not in res.info and res.dual


def test_no_switch_for_the_hinge_l1_or_a_regularised_intercept():
    X, y = _badly_scaled(n=1500)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for kw in (dict(loss="hinge", fit_intercept=False),
                   dict(loss="logistic", penalty="l1", fit_intercept=False),
                   dict(loss="logistic", dual=True, fit_intercept=True,
                        intercept_scaling=1.0)):
            res = fit_glm(X, y, alpha=1.0 / y.size, solver="scd", max_iter=40, **kw)
            assert "stall_switch" not in res.info


def test_a_user_callback_stop_is_not_a_switch():
    X, y = _badly_scaled()
    res = fit_glm(X, y, loss="logistic", alpha=1.0 / y.size, fit_intercept=False,
                     solver="scd", max_iter=200, callback=lambda it, w, b: it >= 3)
    assert res.info["stopped_by_callback"] and "stall_switch" not in res.info
