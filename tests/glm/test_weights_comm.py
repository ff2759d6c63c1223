"""Issue 32, items 1 and 2: sample weights over ``comm=`` mean what they say.

Each rank passes its own examples and their weights; the fit must be the one-process weighted
fit of all the examples (the weights scaled to mean one by their *global* sum and count):
weights that are uniform within each rank but differ between the ranks are not the unweighted
problem, and a rank whose weights are all zero is valid input while the global sum is
positive.  References: the one-process weighted Newton fit (the same objective), or the
unweighted dual on repeated rows (integer weights), with explicit tolerances.
"""

import numpy as np
import pytest
import scipy.sparse as sp

from roofline.comm import run
from roofline.glm import fit_glm

ALPHA = 1e-2
OBJ_RTOL = 1e-6  # both runs converge to a relative duality gap of 1e-10
COEF_ATOL = 2e-4


def _data(loss="logistic", d=8, n=240, seed=0):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((d, n)) * rng.uniform(0.5, 2.0, (d, 1))
    A[rng.random((d, n)) < 0.3] = 0.0
    z = rng.standard_normal(d) @ A / np.sqrt(d) + 0.3
    if loss == "squared":
        y = z + 0.3 * rng.standard_normal(n)
    else:
        y = np.where(rng.random(n) < 1 / (1 + np.exp(-2 * z)), 1.0, -1.0)
    return sp.csc_matrix(A), y


def _shards(n, K):
    return np.array_split(np.arange(n), K)


def _per_rank(n, K, kind):
    """Weights of every example: ``uniform``: rank r's all r + 1 (differing between ranks only);
    ``spread``: integer weights 0-3 differing everywhere; ``zero-rank``: the last rank's all
    zero, the others' integers 1-3."""
    rng = np.random.default_rng(7)
    sw = np.empty(n)
    for r, idx in enumerate(_shards(n, K)):
        if kind == "uniform":
            sw[idx] = r + 1.0
        elif kind == "spread":
            sw[idx] = rng.integers(0, 4, idx.size)
        else:
            sw[idx] = 0.0 if r == K - 1 else rng.integers(1, 4, idx.size)
    return sw


def _with_constant(X, scaling=1.0):
    """``X`` with a constant feature appended: the dual's regularised intercept as a feature."""
    return sp.vstack([X, sp.csc_matrix(np.full((1, X.shape[1]), scaling))]).tocsc()


def _rank_fit(comm, loss, solver, kind, fit_intercept, K, alpha=ALPHA):
    X, y = _data(loss)
    sw = _per_rank(X.shape[1], K, kind)
    mine = _shards(X.shape[1], K)[comm.rank]
    dual = True if solver == "cocoa" else None
    res = fit_glm(X[:, mine], y[mine], loss=loss, alpha=alpha, solver=solver, dual=dual,
                  fit_intercept=fit_intercept, sample_weight=sw[mine], comm=comm, tol=1e-10,
                  max_iter=3000, random_state=0)
    return res


def _reference(loss, kind, fit_intercept, K):
    """The one-process weighted optimum; the dual's intercept is a regularised constant
    feature, so for CoCoA's reference it is a feature of Newton's problem."""
    X, y = _data(loss)
    sw = _per_rank(X.shape[1], K, kind)
    Xr = _with_constant(X) if fit_intercept else X
    ref = fit_glm(Xr, y, loss=loss, alpha=ALPHA, solver="newton", fit_intercept=False,
                  sample_weight=sw, tol=1e-12, max_iter=200)
    coef = ref.coef[:-1] if fit_intercept else ref.coef
    icpt = ref.coef[-1] if fit_intercept else 0.0
    return coef, icpt, float(ref.objective[-1])


def _check(out, coef, icpt, obj):
    for res in out:
        np.testing.assert_array_equal(res.coef, out[0].coef)
        assert res.converged
        assert abs(res.objective[-1] - obj) <= OBJ_RTOL * abs(obj), (res.objective[-1], obj)
        np.testing.assert_allclose(res.coef, coef, atol=COEF_ATOL)
        assert abs(res.intercept - icpt) <= COEF_ATOL


@pytest.mark.parametrize("kind", ["uniform", "spread", "zero-rank"])
@pytest.mark.parametrize("loss,fit_intercept", [("logistic", False), ("logistic", True),
                                                ("squared", True)])
def test_cocoa_dual_takes_the_weights(kind, loss, fit_intercept):
    K = 2
    coef, icpt, obj = _reference(loss, kind, fit_intercept, K)
    out = run(_rank_fit, K, backend="threads", args=(loss, "cocoa", kind, fit_intercept, K),
              timeout=120)
    _check(out, coef, icpt, obj)


@pytest.mark.parametrize("kind", ["uniform", "spread", "zero-rank"])
def test_cocoa_hinge_weights_equal_repeated_rows(kind):
    """The hinge's dual box scaled by the weight: the optimum of the rows repeated as often
    as their (integer) weights, by the one-process dual (a stronger regularisation than the
    other tests': the weighted hinge dual converges slowly at alpha = 1e-2, as on the repeated
    rows)."""
    K, alpha = 2, 0.1
    X, y = _data()
    sw = _per_rank(X.shape[1], K, kind).astype(int)
    rep = np.repeat(np.arange(X.shape[1]), sw)
    # CoCoA's regularised constant feature (intercept_scaling=1; scd's own default keeps the
    # intercept unregularised)
    ref = fit_glm(X[:, rep], y[rep], loss="hinge", alpha=alpha, solver="scd", tol=1e-11,
                  max_iter=20000, random_state=0, intercept_scaling=1.0)
    out = run(_rank_fit, K, backend="threads",
              args=("hinge", "cocoa", kind, True, K, alpha), timeout=120)
    _check(out, ref.coef, ref.intercept, float(ref.objective[-1]))


@pytest.mark.parametrize("kind", ["uniform", "spread", "zero-rank"])
def test_distributed_newton_takes_the_weights(kind):
    K = 2
    X, y = _data()
    sw = _per_rank(X.shape[1], K, kind)
    ref = fit_glm(X, y, loss="logistic", alpha=ALPHA, solver="newton", sample_weight=sw,
                  tol=1e-12, max_iter=200)
    for backend in ("threads", "tcp"):
        out = run(_rank_fit, K, backend=backend,
                  args=("logistic", "newton", kind, True, K), timeout=120)
        for res in out:
            assert abs(res.objective[-1] - ref.objective[-1]) <= 1e-9 * ref.objective[-1]
            np.testing.assert_allclose(res.coef, ref.coef, rtol=1e-5, atol=1e-5)
            assert abs(res.intercept - ref.intercept) <= 1e-5


def test_auto_over_comm_takes_the_weights():
    """``solver="auto"`` with ``comm=``: Newton for the logistic loss, CoCoA+ for the hinge;
    either way the weighted optimum."""
    K = 2
    coef, icpt, obj = _reference("logistic", "uniform", False, K)
    out = run(_rank_fit, K, backend="threads", args=("logistic", "auto", "uniform", False, K),
              timeout=120)
    assert out[0].solver == "newton"
    _check(out, coef, icpt, obj)


def _bad_rank_fit(comm, case):
    X, y = _data()
    mine = _shards(X.shape[1], comm.size)[comm.rank]
    sw = np.ones(mine.size)
    kw = dict(loss="logistic", alpha=ALPHA, solver="cocoa", dual=True, comm=comm)
    if case == "all-zero":
        sw[:] = 0.0
    elif case == "negative" and comm.rank == 1:
        sw[3] = -1.0
    elif case == "l1":
        kw.update(penalty="l1", dual=None)
        sw *= comm.rank + 1.0
    try:
        fit_glm(X[:, mine], y[mine], sample_weight=sw, **kw)
    except ValueError as e:
        return str(e)
    return None


@pytest.mark.parametrize("case,words", [
    ("all-zero", "sums to zero over every rank"),
    ("negative", "non-negative"),
    ("l1", "sample_weight"),
])
def test_bad_weights_fail_on_every_rank(case, words):
    """Every rank raises (no rank left waiting for a peer that gave up): the rank at fault
    says what, the others name it."""
    out = run(_bad_rank_fit, 2, backend="threads", args=(case,), timeout=60)
    assert all(msg is not None for msg in out), out
    assert words in out[1], out
    if case == "negative":
        assert "rank 1" in out[0], out
    else:
        assert words in out[0], out
