"""``glm.cd.dual_sweeps``: batched sequential SDCA sweeps with liblinear's shrinking.

Checked against the one-sweep kernel (``dual_epoch``, bit for bit on the same order), against
the dual optimum reached by plain sweeps, for determinism, for the shrinking state's
invariants, and for argument validation.
"""

import numpy as np
import pytest

from roofline import glm


def _labels(X, rng, loss):
    n = X.shape[1]
    return rng.normal(size=n) if loss == 0 else np.where(rng.random(n) < 0.5, 1.0, -1.0)


def _start(X, icpt):
    n = X.shape[1]
    nv = X.shape[0] + (1 if icpt else 0)
    return (np.zeros(n), np.zeros(nv), np.arange(n, dtype=np.int64),
            np.array([float(n), np.inf, -np.inf]))


def _sweeps(X, y, a, v, order, shrink, loss, lam_n, icpt, **kw):
    kw = {"max_sweeps": 1, "budget": 0, "seed": 3, **kw}
    return glm.cd.dual_sweeps(X, y, a, v, order, shrink, loss=loss, lam_n=lam_n,
                               colsq=glm.cd.col_sqnorms(X), icpt=icpt, **kw)


@pytest.mark.parametrize("loss", [0, 1, 2])
@pytest.mark.parametrize("icpt", [0.0, 1.5])
def test_one_sweep_is_dual_epoch_on_its_order(powerlaw, rng, loss, icpt):
    """The first sweep visits every example once in the order it leaves in ``order`` (no
    example is shrunk in a first sweep) and takes dual_epoch's steps there, bit for bit."""
    X = powerlaw
    y = _labels(X, rng, loss)
    a, v, order, shrink = _start(X, icpt)
    sweeps, met = _sweeps(X, y, a, v, order, shrink, loss, 40.0, icpt)
    assert sweeps == 1 and not met
    np.testing.assert_array_equal(np.sort(order), np.arange(X.shape[1]))
    assert not np.array_equal(order, np.arange(X.shape[1]))  # shuffled
    a2, v2, _, _ = _start(X, icpt)
    glm.cd.dual_epoch(X, y, a2, v2, order.copy(), loss=loss, lam_n=40.0,
                       colsq=glm.cd.col_sqnorms(X), icpt=icpt)
    np.testing.assert_array_equal(a, a2)
    np.testing.assert_array_equal(v, v2)
    assert np.any(a != 0)


@pytest.mark.parametrize("loss", [0, 1, 2])
@pytest.mark.parametrize("icpt", [0.0, 1.5])
def test_sweeps_reach_the_dual_optimum(powerlaw, rng, loss, icpt):
    """Batched sweeps (shrinking for the hinge) end where many plain sweeps end: the same
    primal point ``v`` (unique: the primal is strongly convex), and ``v = X a`` holds."""
    X = powerlaw
    y = _labels(X, rng, loss)
    lam_n = 2.0
    colsq = glm.cd.col_sqnorms(X)
    a_ref, v_ref, _, _ = _start(X, icpt)
    for _ in range(3000):
        glm.cd.dual_epoch(X, y, a_ref, v_ref, rng.permutation(X.shape[1]).astype(np.int64),
                           loss=loss, lam_n=lam_n, colsq=colsq, icpt=icpt)
    a, v, order, shrink = _start(X, icpt)
    total, shrunk = 0, False
    for call in range(200):
        sweeps, met = _sweeps(X, y, a, v, order, shrink, loss, lam_n, icpt, max_sweeps=50,
                              budget=1 << 30, seed=call, eps=1e-10)
        total += sweeps
        shrunk |= shrink[0] < X.shape[1]
        if met:
            break
    np.testing.assert_array_equal(np.sort(order), np.arange(X.shape[1]))
    scale = np.abs(v_ref).max()
    np.testing.assert_allclose(v, v_ref, rtol=0, atol=1e-7 * scale)
    exact = X.astype(np.float64) @ a
    if icpt:
        exact = np.r_[exact, icpt * a.sum()]
    np.testing.assert_allclose(v, exact, rtol=0, atol=1e-9 * scale)
    if loss == 2:
        assert met, "the hinge sweeps met eps = 1e-10 over all examples"
        assert shrunk, "some example left the hinge sweeps"
        beta = a * y
        assert np.all((beta >= 0) & (beta <= 1))
    else:
        assert not met and shrink[0] == X.shape[1]  # only the hinge shrinks


def test_budget_and_max_sweeps_bound_a_call(powerlaw, rng):
    X = powerlaw
    y = _labels(X, rng, 1)
    a, v, order, shrink = _start(X, 0.0)
    assert _sweeps(X, y, a, v, order, shrink, 1, 5.0, 0.0, max_sweeps=4,
                   budget=1 << 40)[0] == 4
    one_sweep = X.nnz + X.shape[1]  # a sweep reads at least each example's values once
    assert _sweeps(X, y, a, v, order, shrink, 1, 5.0, 0.0, max_sweeps=100,
                   budget=3 * one_sweep)[0] <= 3
    assert _sweeps(X, y, a, v, order, shrink, 1, 5.0, 0.0, max_sweeps=100, budget=0)[0] == 1


@pytest.mark.parametrize("loss", [1, 2])
def test_a_seed_fixes_the_sweeps(powerlaw, rng, loss):
    X = powerlaw
    y = _labels(X, rng, loss)
    runs = []
    for seed in (5, 5, 6):
        a, v, order, shrink = _start(X, 0.0)
        for k in range(3):
            _sweeps(X, y, a, v, order, shrink, loss, 3.0, 0.0, max_sweeps=5, budget=1 << 30,
                    seed=seed + 7 * k)
        runs.append((a, v, order, shrink))
    for x, x2 in zip(runs[0], runs[1], strict=True):
        np.testing.assert_array_equal(x, x2)
    assert not np.array_equal(runs[0][0], runs[2][0])


def test_dual_sweeps_reject_bad_arguments(powerlaw, rng):
    X = powerlaw
    y = _labels(X, rng, 2)
    n = X.shape[1]

    def call(**kw):
        a, v, order, shrink = _start(X, 0.0)
        args = {"order": order, "shrink": shrink, "max_sweeps": 1, "budget": 0, "seed": 0,
                **kw}
        order, shrink = args.pop("order"), args.pop("shrink")
        return glm.cd.dual_sweeps(X, y, a, v, order, shrink, loss=2, lam_n=1.0,
                                   colsq=glm.cd.col_sqnorms(X), **args)

    with pytest.raises(ValueError, match="order must be an int64 permutation"):
        call(order=np.arange(n, dtype=np.int32))
    with pytest.raises(ValueError, match="order must be an int64 permutation"):
        call(order=np.arange(n - 1, dtype=np.int64))
    with pytest.raises(ValueError, match="shrink"):
        call(shrink=np.array([n, np.inf]))
    with pytest.raises(TypeError, match="shrink must have dtype float64"):
        call(shrink=np.array([n, 0, 0], dtype=np.int64))
    with pytest.raises(ValueError, match=r"shrink\[0\]"):
        call(shrink=np.array([n + 1.0, np.inf, -np.inf]))
    with pytest.raises(ValueError, match="max_sweeps must be >= 1"):
        call(max_sweeps=0)
    with pytest.raises(ValueError, match="seed must be in"):
        call(seed=-1)
    with pytest.raises(TypeError, match="CSC"):
        glm.cd.dual_sweeps(X.tocsr(), y, np.zeros(n), np.zeros(X.shape[0]),
                            np.arange(n, dtype=np.int64), np.array([n, np.inf, -np.inf]),
                            loss=2, lam_n=1.0, colsq=np.ones(n), max_sweeps=1, budget=0,
                            seed=0)


def test_no_shrinking_keeps_every_example(powerlaw, rng):
    """``shrinking=False``: the hinge sweeps keep all examples and still meet ``eps``, at the
    optimum of the shrinking sweeps."""
    X = powerlaw
    y = _labels(X, rng, 2)
    ends = []
    for shrinking in (True, False):
        a, v, order, shrink = _start(X, 0.0)
        for call in range(200):
            _, met = _sweeps(X, y, a, v, order, shrink, 2, 2.0, 0.0, max_sweeps=50,
                             budget=1 << 30, seed=call, eps=1e-10, shrinking=shrinking)
            if not shrinking:
                assert shrink[0] == X.shape[1]
            if met:
                break
        assert met
        ends.append(v)
    np.testing.assert_allclose(ends[1], ends[0], rtol=0, atol=1e-7 * np.abs(ends[0]).max())
