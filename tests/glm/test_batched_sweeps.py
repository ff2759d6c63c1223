"""The dual ``scd``'s batched sweeps (``batch_sweeps=True``: glm/_scd.py
``_scd_dual_batched`` over ``glm.cd.dual_sweeps``), with liblinear's shrinking for the hinge:
when they run, where they check, and that they reach the optimum of the per-sweep path and of
scikit-learn's liblinear."""

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.svm import LinearSVC

from roofline.glm import _scd, alpha_from_peer, fit_glm
from tests._helpers import make_data

KW = dict(dual=True, fit_intercept=False, solver="scd", random_state=0)


def test_batched_sweeps_check_after_each_batch():
    """A batch reads at least _BATCH_VALUES stored values (each logistic sweep reads every
    example's values once, plus its changes), then the gap is checked: the checks' iterations
    count the sweeps, a seeded run repeats itself, and max_iter bounds the sweeps."""
    X, A, y = make_data(task="classification", seed=9)
    per_sweep = X.nnz + X.shape[1]
    most = -(-_scd._BATCH_VALUES // per_sweep)
    runs = []
    for _ in range(2):
        seen = []
        res = fit_glm(X, y, loss="logistic", alpha=1e-3, tol=1e-12, max_iter=5000,
                         callback=lambda it, w, b, seen=seen: seen.append(it), **KW)
        runs.append((seen, res))
    seen, res = runs[0]
    assert res.info["batched"] and res.converged
    assert 1 < seen[0] <= most and np.all(np.diff(seen) <= most) and np.all(np.diff(seen) > 0)
    assert seen[-1] == res.n_iter and len(res.objective) == len(seen)
    assert runs[1][0] == seen
    np.testing.assert_array_equal(runs[1][1].coef, res.coef)
    with pytest.warns(ConvergenceWarning, match="max_iter=7"):
        short = fit_glm(X, y, loss="logistic", alpha=1e-3, tol=1e-14, max_iter=7, **KW)
    assert short.n_iter == 7 and len(short.objective) == 1


@pytest.mark.parametrize("loss", ["squared", "logistic", "hinge"])
def test_batched_sweeps_reach_the_per_sweep_optimum(loss):
    X, A, y = make_data(task="regression" if loss == "squared" else "classification", seed=4,
                        n=600, d=40)
    kw = dict(loss=loss, alpha=1e-3, tol=1e-10, max_iter=20000, **KW)
    batched = fit_glm(X, y, **kw)
    plain = fit_glm(X, y, batch_sweeps=False, **kw)
    assert batched.info["batched"] and "batched" not in plain.info
    assert batched.converged and plain.converged
    P, Q = batched.objective[-1], plain.objective[-1]
    assert abs(P - Q) <= 2e-10 * abs(Q)
    np.testing.assert_allclose(batched.coef, plain.coef, rtol=0,
                               atol=1e-4 * np.abs(plain.coef).max())


@pytest.mark.filterwarnings("ignore:Liblinear failed to converge")
@pytest.mark.parametrize("C", [0.1, 1.0, 10.0])
def test_batched_hinge_matches_liblinear(C):
    """The shrinking hinge sweeps against scikit-learn's LinearSVC (liblinear's dual CD, run
    to a tight tolerance): the same primal objective to 1e-6."""
    X, A, y = make_data(task="classification", seed=2, n=500, d=30)
    ys = np.where(y > 0, 1.0, -1.0)
    alpha = alpha_from_peer("C", C, A.shape[0])
    res = fit_glm(X, y, loss="hinge", alpha=alpha, tol=1e-10, max_iter=100_000, **KW)
    assert res.info["batched"] and res.converged
    sk = LinearSVC(C=C, loss="hinge", dual=True, fit_intercept=False, tol=1e-12,
                   max_iter=1_000_000).fit(A, y)

    def P(w):
        return np.mean(np.maximum(0.0, 1 - ys * (A @ w))) + 0.5 * alpha * w @ w

    assert P(res.coef) <= P(sk.coef_.ravel()) * (1 + 1e-6)
    assert P(res.coef) == pytest.approx(res.objective[-1], rel=1e-9)


def test_hinge_without_shrinking_and_the_size_rule(monkeypatch):
    """``shrinking=False`` still converges; beyond _BATCH_MAX_VALUES stored values only the
    hinge is batched."""
    X, A, y = make_data(task="classification", seed=5)
    kw = dict(alpha=1e-2, tol=1e-9, max_iter=20000, **KW)
    a = fit_glm(X, y, loss="hinge", **kw)
    b = fit_glm(X, y, loss="hinge", shrinking=False, **kw)
    assert a.converged and b.converged and a.info["batched"] and b.info["batched"]
    assert abs(a.objective[-1] - b.objective[-1]) <= 2e-9 * abs(b.objective[-1])
    monkeypatch.setattr(_scd, "_BATCH_MAX_VALUES", X.nnz)
    assert "batched" not in fit_glm(X, y, loss="logistic", **kw).info
    assert fit_glm(X, y, loss="hinge", **kw).info["batched"]
    # an integer check_every, or threads, keep the per-sweep path
    assert "batched" not in fit_glm(X, y, loss="hinge", check_every=2, **kw).info
