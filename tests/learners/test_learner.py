"""Learner, optimizers and mixins against known optima (scikit-learn) and by construction.

The device tests run every optimizer path with the model on each device (``device`` fixture:
the GPU case skips without a CUDA device) against the same learner on the CPU, from the same data
and start; the GPU's atomic sums make the last bits differ, so models are compared within
rounding.
"""

import csv
import math
import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.linear_model import LogisticRegression, Ridge

from roofline import gmat
from roofline.datasources import MatSource, make_criteo_like_matrix
from roofline.learners import (
    GLM,
    LBFGS,
    SGD,
    ADAGrad,
    L1Regularizer,
    L2Regularizer,
    Learner,
    MetricsRecorder,
)
from tests._helpers import assert_allclose_on, make_problem


def lbfgs_learner(X, y, lam, loss="logistic", k=1, **kw):
    return Learner(MatSource(X, y, batch_size=128), GLM(loss=loss, n_outputs=k, dtype="float64"),
                   LBFGS(tol=1e-10, ftol=1e-16, max_iter=1000), mixins=[L2Regularizer(lam)],
                   progress=False, **kw)


# -- the optimum: L-BFGS vs scikit-learn ---------------------------------------------------------

def test_lbfgs_logistic_matches_sklearn():
    X, y = make_problem(30, 500, loss="logistic", seed=3)
    C = 0.5
    n = X.shape[1]
    # sklearn: C sum_i l_i + ||w||^2 / 2 == C n (mean loss + lambda/2 ||w||^2), lambda = 1/(C n)
    lam = 1.0 / (C * n)
    L = lbfgs_learner(X, y, lam)
    L.train()
    sk = LogisticRegression(C=C, tol=1e-12, max_iter=10_000).fit(X.T.tocsr(), y)
    np.testing.assert_allclose(L.model.coef[0], sk.coef_[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(L.model.intercept, sk.intercept_, rtol=1e-5, atol=1e-6)
    ref = GLM(dtype="float64")
    ref.set_parameters(sk.coef_, sk.intercept_)
    f_sk = Learner(MatSource(X, y), ref, LBFGS(), mixins=[L2Regularizer(lam)]).objective()
    assert L.objective() == pytest.approx(f_sk, rel=1e-10)
    assert L.objective() <= f_sk + 1e-12


def test_lbfgs_ridge_matches_sklearn():
    X, y = make_problem(25, 300, loss="linear", seed=4)
    alpha = 3.0
    n = X.shape[1]
    # sklearn: ||y - Xw - b||^2 + alpha ||w||^2 == 2n * (mean (1/2) r^2 + lambda/2 ||w||^2),
    # lambda = alpha / n
    L = lbfgs_learner(X, y, alpha / n, loss="linear")
    L.train()
    sk = Ridge(alpha=alpha, solver="svd").fit(X.T.toarray(), y)
    np.testing.assert_allclose(L.model.coef[0], sk.coef_, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(L.model.intercept[0], sk.intercept_, rtol=1e-6, atol=1e-7)


def test_lbfgs_refuses_l1():
    X, y = make_problem(5, 20)
    L = Learner(MatSource(X, y), GLM(dtype="float64"), LBFGS(), mixins=[L1Regularizer(0.1)],
                progress=False)
    with pytest.raises(ValueError, match="non-smooth"):
        L.train()


# -- stochastic optimizers: within a stated gap in bounded passes --------------------------------

@pytest.mark.parametrize("opt,bs,passes,gap", [
    (lambda: ADAGrad(lr=0.5, schedule="invscaling", t0=20), 25, 20, 2e-4),
    (lambda: SGD(lr=2.0, schedule="invscaling", texp=0.5, t0=20), 100, 20, 5e-4),
])
def test_stochastic_optimizers_reach_the_optimum(opt, bs, passes, gap):
    """Relative objective gap to the L-BFGS optimum after ``passes`` passes (deterministic)."""
    X, y = make_problem(30, 500, loss="logistic", seed=3)
    lam = 1e-2
    ref = lbfgs_learner(X, y, lam)
    ref.train()
    f_star = ref.objective()
    L = Learner(MatSource(X, y, batch_size=bs), GLM(dtype="float64"), opt(),
                mixins=[L2Regularizer(lam)], n_passes=passes, progress=False)
    L.train()
    assert L.objective() - f_star < gap * abs(f_star)
    assert L.objective() >= f_star - 1e-9  # f_star is the optimum


# -- multi-label == k independent fits -----------------------------------------------------------

@pytest.mark.parametrize("make_opt,rtol", [(lambda: LBFGS(tol=1e-10, max_iter=1000), 1e-5),
                                           (lambda: ADAGrad(lr=0.3), 1e-12)])
def test_multilabel_equals_independent_fits(make_opt, rtol):
    X, Y = make_problem(20, 300, k=3, loss="logistic", seed=5)
    lam = 1e-2
    joint = Learner(MatSource(X, Y, batch_size=50), GLM(n_outputs=3, dtype="float64"),
                    make_opt(), mixins=[L2Regularizer(lam)], n_passes=3, progress=False)
    joint.train()
    for r in range(3):
        single = Learner(MatSource(X, Y[r], batch_size=50), GLM(dtype="float64"), make_opt(),
                         mixins=[L2Regularizer(lam)], n_passes=3, progress=False)
        single.train()
        np.testing.assert_allclose(joint.model.coef[r], single.model.coef[0], rtol=rtol,
                                   atol=rtol)
        np.testing.assert_allclose(joint.model.intercept[r], single.model.intercept[0],
                                   rtol=rtol, atol=rtol)


# -- fused ADAGrad vs the unfused reference -----------------------------------------------------

@pytest.mark.parametrize("k", [1, 4])
def test_fused_adagrad_equals_unfused(k, dtype):
    X, y = make_criteo_like_matrix(3000, n_bits=11, dtype=dtype, seed=k)
    Y = np.vstack([y] + [np.roll(y, r) for r in range(1, k)]) if k > 1 else y
    models = []
    for fused in (True, False):
        L = Learner(MatSource(X, Y, batch_size=200), GLM(n_outputs=k, dtype=dtype.name),
                    ADAGrad(lr=0.2, fused=fused), n_passes=2, progress=False)
        L.train()
        models.append(L.model)
    tol = 1e-4 if dtype == np.float32 else 1e-11
    np.testing.assert_allclose(models[0].coef, models[1].coef, rtol=tol, atol=tol)
    np.testing.assert_allclose(models[0].intercept, models[1].intercept, rtol=tol, atol=tol)
    assert np.count_nonzero(models[0].coef) > 0.3 * models[0].coef.size


@pytest.mark.parametrize("loss", ["linear", "hinge", "squared_hinge", "logistic"])
def test_fused_adagrad_equals_unfused_losses_weights(loss):
    """The whole-step fused kernel (forward, loss, gradient, update) against the unfused
    reference for every loss, with example weights and without an intercept."""
    X, y = make_criteo_like_matrix(2000, n_bits=10, dtype=np.float64, seed=5)
    w = np.random.default_rng(1).random(len(y)) + 0.5
    fit = loss != "hinge"
    models, results = [], []
    for fused in (True, False):
        L = Learner(MatSource(X, y, w, batch_size=150),
                    GLM(loss=loss, dtype="float64", fit_intercept=fit),
                    ADAGrad(lr=0.1, fused=fused), n_passes=2, progress=False)
        results.append(L.train())
        models.append(L.model)
    np.testing.assert_allclose(models[0].coef, models[1].coef, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(models[0].intercept, models[1].intercept, rtol=1e-10,
                               atol=1e-10)
    assert np.count_nonzero(models[0].coef) > 0.3 * models[0].coef.size
    losses = [[r["train_loss"] for r in res.trace] for res in results]
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-10)


@pytest.mark.parametrize("loss", ["logistic", "squared_hinge"])
def test_online_adagrad_is_minibatch_adagrad_of_one_example(loss):
    """ADAGrad(online=True) over minibatches of 150 = the unfused per-minibatch ADAGrad over
    minibatches of one example (the minibatch is only the unit of delivery)."""
    X, y = make_criteo_like_matrix(300, n_bits=9, dtype=np.float64, seed=11)
    # (no example weights: a minibatch of one divides its gradient by its own weight)
    a = Learner(MatSource(X, y, batch_size=75), GLM(loss=loss, dtype="float64"),
                ADAGrad(lr=0.1, online=True), n_passes=2, progress=False)
    b = Learner(MatSource(X, y, batch_size=1), GLM(loss=loss, dtype="float64"),
                ADAGrad(lr=0.1, fused=False), n_passes=2, progress=False)
    ra, rb = a.train(), b.train()
    np.testing.assert_allclose(a.model.coef, b.model.coef, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(a.model.intercept, b.model.intercept, rtol=1e-9, atol=1e-12)
    assert np.count_nonzero(a.model.coef) > 0.3 * a.model.coef.size
    # the trained loss is the progressive one: the same sums in both
    assert sum(r["train_loss"] for r in ra.trace) == pytest.approx(
        sum(r["train_loss"] for r in rb.trace), rel=1e-9)


def test_online_adagrad_refuses_what_it_cannot_fuse():
    X, y = make_criteo_like_matrix(200, n_bits=8, dtype=np.float64, seed=1)
    L = Learner(MatSource(X.toarray(), y, batch_size=50), GLM(dtype="float64"),
                ADAGrad(online=True), progress=False)
    with pytest.raises(ValueError, match=r"online=True\) needs fused=True, sparse"):
        L.train()
    L = Learner(MatSource(X, y, batch_size=50), GLM(dtype="float64"),
                ADAGrad(online=True, fused=False), progress=False)
    with pytest.raises(ValueError, match="got fused=False"):
        L.train()


@pytest.mark.parametrize("l1,l2", [(0.0, 1e-3), (2e-3, 0.0), (1e-3, 1e-3)])
def test_fused_adagrad_lazy_regularisation_reference(l1, l2):
    """With L1/L2 the fused step regularises the touched columns only (BIDMach/VW)."""
    X, y = make_criteo_like_matrix(600, n_bits=10, dtype=np.float64, seed=9)
    mixins = ([L1Regularizer(l1)] if l1 else []) + ([L2Regularizer(l2)] if l2 else [])
    lr, eps, init = 0.3, 1e-8, 1e-8
    L = Learner(MatSource(X, y, batch_size=100), GLM(dtype="float64"),
                ADAGrad(lr=lr, epsilon=eps, initsumsq=init), mixins=mixins, progress=False)
    L.train()
    # numpy reference
    n = X.shape[0]
    w, b = np.zeros(n), 0.0
    s, s0 = np.full(n, init), init
    for start in range(0, 600, 100):
        Xb = X[:, start:start + 100].toarray()
        yb = y[start:start + 100]
        eta = w @ Xb + b
        d = (1 / (1 + np.exp(-eta)) - yb) / 100
        g0 = d.sum()
        touched = np.flatnonzero((Xb != 0).any(axis=1))
        g = (Xb @ d)[touched] + l2 * w[touched]
        s[touched] += g * g
        step = lr / (np.sqrt(s[touched]) + eps)
        wt = w[touched] - step * g
        w[touched] = np.sign(wt) * np.maximum(np.abs(wt) - l1 * step, 0)
        s0 += g0 * g0
        b -= lr * g0 / (np.sqrt(s0) + eps)
    np.testing.assert_allclose(L.model.coef[0], w, rtol=1e-10, atol=1e-12)
    assert L.model.intercept[0] == pytest.approx(b, rel=1e-10)
    if l1:
        assert np.count_nonzero(L.model.coef) < np.count_nonzero(np.abs(w) + 1)


# -- steady state allocates nothing --------------------------------------------------------------

@pytest.mark.parametrize("fused", [True, False])
def test_steady_state_step_allocates_nothing(fused):
    X, y = make_criteo_like_matrix(16000, n_bits=12, dtype=np.float64, seed=2)
    Y = np.vstack([y, 1 - y, y, 1 - y])
    src = MatSource(X, Y, batch_size=2000)
    model = GLM(n_outputs=4, dtype="float64")
    model.init(X.shape[0])
    opt = ADAGrad(lr=0.1, fused=fused)
    cache = gmat.BufferCache()
    opt.init(model, cache)
    mixins = [L2Regularizer(1e-4), MetricsRecorder()]
    L = Learner(src, model, opt, mixins=mixins, cache=cache, progress=False)
    for m in mixins:
        m.init(L)
    batches = list(src)
    for b in batches[:2]:
        opt.step(model, b, mixins, cache)
    n_alloc, ws_alloc = cache.n_allocations, opt.workspace.n_allocations
    tracemalloc.start()
    for b in batches[2:]:
        opt.step(model, b, mixins, cache)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert cache.n_allocations == n_alloc
    assert opt.workspace.n_allocations == ws_alloc
    if fused:
        # minibatch buffers are 4 x 2000 x 8 = 64 kB, the gradient 4 x 4096 x 8 = 128 kB: no
        # allocation of that order happens in a steady-state fused step.  (The unfused step
        # calls gmat.mult_ast, whose row-slab partition allocates a sample of the indices on
        # every call: a gmat matter, reported to the lead.)
        assert peak < 8_000, peak


# -- held-out data is never trained on (by construction) -----------------------------------------

@pytest.mark.parametrize("make_opt", [lambda: ADAGrad(lr=0.3), lambda: LBFGS(tol=1e-9)])
def test_heldout_minibatches_are_never_trained_on(make_opt):
    X, y = make_problem(20, 600, loss="logistic", seed=7)
    bs, every = 50, 3
    held = [i for i in range(12) if i % every == every - 1]
    y_bad = y.copy()
    for i in held:  # poison the held-out labels: any training on them would change the model
        y_bad[i * bs:(i + 1) * bs] = 1 - y_bad[i * bs:(i + 1) * bs]
    A = Learner(MatSource(X, y_bad, batch_size=bs), GLM(dtype="float64"), make_opt(),
                mixins=[L2Regularizer(1e-3)], holdout_every=every, n_passes=2, progress=False)
    res = A.train()
    keep = np.concatenate([np.arange(i * bs, (i + 1) * bs) for i in range(12) if i not in held])
    B = Learner(MatSource(X[:, keep], y[keep], batch_size=bs), GLM(dtype="float64"), make_opt(),
                mixins=[L2Regularizer(1e-3)], n_passes=2, progress=False)
    B.train()
    np.testing.assert_array_equal(A.model.coef, B.model.coef)
    hidx = np.concatenate([np.arange(i * bs, (i + 1) * bs) for i in held])
    ev = A.evaluate(MatSource(X[:, hidx], y_bad[hidx]))
    if isinstance(A.optimizer, LBFGS):
        assert res.trace[-1]["heldout_loss"] == pytest.approx(ev["loss"], rel=1e-12)
    assert A.evaluate()["loss"] == pytest.approx(ev["loss"], rel=1e-12)


def test_heldout_source_trace_and_early_stopping():
    X, y = make_problem(20, 2000, loss="logistic", seed=8)
    # the held-out labels are flipped: its loss rises as the model learns
    L = Learner(MatSource(X, y, batch_size=20), GLM(dtype="float64"), ADAGrad(lr=0.3),
                heldout=MatSource(X[:, :300], 1 - y[:300]), eval_every=5, early_stopping=True,
                patience=3, n_passes=5, progress=False)
    res = L.train()
    assert res.stopped_early
    assert len(res.trace) == 4 and res.n_steps == 20 and res.n_passes == 1
    losses = [r["heldout_loss"] for r in res.trace]
    assert losses == sorted(losses)
    assert res.best_heldout_loss == losses[0]
    for r in res.trace:
        assert r["examples"] == r["step"] * 20


# -- mixins --------------------------------------------------------------------------------------

def test_metrics_recorder_records_each_pass(tmp_path):
    X, y = make_problem(15, 200, loss="logistic", seed=1)
    rec = MetricsRecorder(path=str(tmp_path / "m.csv"))
    L = Learner(MatSource(X, y, batch_size=40), GLM(dtype="float64"), SGD(lr=0.5),
                mixins=[rec], holdout_every=5, n_passes=3, progress=False)
    L.train()
    assert [r["pass"] for r in rec.records] == [0, 1, 2]
    assert all(r["examples"] == 160 for r in rec.records)
    # pass 0's training loss: mean over its 4 training minibatches, before each step
    M = GLM(dtype="float64")
    M.init(15)
    S = SGD(lr=0.5)
    S.init(M)
    tot = wt = 0
    for i, b in enumerate(MatSource(X, y, batch_size=40)):
        if i % 5 != 4:
            ls, ws = S.step(M, b)
            tot, wt = tot + ls, wt + ws
    assert rec.records[0]["train_loss"] == pytest.approx(tot / wt, rel=1e-12)
    assert rec.records[0]["train_loss"] > rec.records[2]["train_loss"]
    rows = list(csv.DictReader(open(tmp_path / "m.csv")))
    assert len(rows) == 3 and float(rows[2]["coef_norm"]) == pytest.approx(
        np.linalg.norm(L.model.coef))


def test_l1_prox_soft_thresholds_sgd_step():
    X, y = make_problem(12, 30, loss="linear", seed=2)
    m = GLM(loss="linear", dtype="float64")
    m.init(12)
    m.set_parameters(np.linspace(-0.05, 0.05, 12))
    w0 = m.coef[0].copy()
    L = Learner(MatSource(X, y, batch_size=30), m, SGD(lr=0.1, schedule="constant"),
                mixins=[L1Regularizer(0.2)], progress=False)
    L.train()
    Xd = X.toarray()
    g = ((w0 @ Xd - y) @ Xd.T) / 30
    z = w0 - 0.1 * g
    np.testing.assert_allclose(m.coef[0], np.sign(z) * np.maximum(np.abs(z) - 0.02, 0),
                               rtol=1e-12, atol=1e-15)
    assert np.count_nonzero(m.coef) < 12


def test_predict_and_dense_source():
    X, y = make_problem(10, 90, loss="logistic", seed=3)
    L = lbfgs_learner(X, y, 1e-2)
    L.train()
    p = L.predict(MatSource(X, y, batch_size=7))
    Xd = np.asfortranarray(X.toarray())
    q = L.predict(MatSource(Xd, y, batch_size=50))
    np.testing.assert_allclose(p, q, rtol=1e-12)
    assert p.shape == (90,) and ((p > 0) & (p < 1)).all()
    assert L.evaluate(MatSource(sp.csc_matrix(X), y))["loss"] == pytest.approx(
        L.evaluate(MatSource(Xd, y))["loss"], rel=1e-12)


@pytest.mark.slow  # the first call measures the machine (then cached by gmat)
def test_roofline_gauge_is_a_fraction():
    X, y = make_criteo_like_matrix(20000, n_bits=16, dtype=np.float32, seed=4)
    L = Learner(MatSource(X, y, batch_size=2000), GLM(), ADAGrad(), eval_every=3,
                roofline_gauge="on", progress=False)
    res = L.train()
    fr = [r["roofline_fraction"] for r in res.trace]
    assert all(0 < f <= 1 for f in fr), fr
    off = Learner(MatSource(X, y, batch_size=2000), GLM(), ADAGrad(), progress=False,
                  roofline_gauge="off").train()
    assert all(math.isnan(r["roofline_fraction"]) for r in off.trace)


# -- the same learners with the model on each device ---------------------------------------------

def _pair(X, y, device, make_model, make_opt, mixins=(), move_source=True, **kw):
    """The same learner on the CPU (the reference) and on ``device``; returns both trained.

    With ``move_source`` the data source holds ``device`` arrays and the learner follows it
    (``device="auto"``); otherwise the source stays on the host and ``device=`` moves minibatches.
    """
    ref = Learner(MatSource(X, y, batch_size=64), make_model(), make_opt(),
                  mixins=[m() for m in mixins], progress=False, **kw)
    if move_source:
        src = MatSource(gmat.to_device(X, device), gmat.to_device(y, device), batch_size=64)
        device_opt = "auto"
    else:
        src = MatSource(X, y, batch_size=64)
        device_opt = device
    on = Learner(src, make_model(), make_opt(), mixins=[m() for m in mixins], progress=False,
                 device=device_opt, **kw)
    ref.train()
    on.train()
    return ref, on


def _close(device, ref, on, rtol=1e-9, atol=1e-11):
    assert on.model.device == device
    assert_allclose_on(device, on.model.coef, ref.model.coef, rtol=rtol, atol=atol)
    assert_allclose_on(device, on.model.intercept, ref.model.intercept, rtol=rtol, atol=atol)


@pytest.mark.parametrize("loss", ["logistic", "linear", "hinge"])
def test_fused_adagrad_on_device_equals_cpu(loss, device):
    X, y = make_problem(40, 600, loss="linear" if loss == "linear" else "logistic", seed=1)
    ref, on = _pair(X, y, device, lambda: GLM(loss=loss, dtype="float64"),
                    lambda: ADAGrad(lr=0.1), n_passes=3)
    _close(device, ref, on)
    assert ref.optimizer.can_fuse(ref.model, next(iter(ref.datasource)), [])


def test_unfused_sgd_with_l1_l2_on_device_equals_cpu(device):
    X, y = make_problem(40, 600, seed=2)
    ref, on = _pair(X, y, device, lambda: GLM(loss="logistic", dtype="float64"),
                    lambda: SGD(lr=0.5), mixins=(lambda: L2Regularizer(1e-2),
                                                 lambda: L1Regularizer(1e-3)), n_passes=2)
    _close(device, ref, on)


def test_multilabel_adagrad_with_l2_on_device_equals_cpu(device):
    X, y = make_problem(30, 500, k=3, seed=4)
    ref, on = _pair(X, y, device, lambda: GLM(loss="logistic", n_outputs=3, dtype="float64"),
                    lambda: ADAGrad(lr=0.1), mixins=(lambda: L2Regularizer(1e-3),), n_passes=2)
    _close(device, ref, on)


def test_lbfgs_on_device_reaches_the_cpu_optimum(device):
    X, y = make_problem(30, 500, seed=3)
    ref, on = _pair(X, y, device, lambda: GLM(loss="logistic", dtype="float64"),
                    lambda: LBFGS(tol=1e-10, ftol=1e-16, max_iter=500),
                    mixins=(lambda: L2Regularizer(1e-2),))
    _close(device, ref, on, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(on.objective(), ref.objective(), rtol=1e-10)


def test_float32_adagrad_on_device_close_to_cpu(device):
    X, y = make_problem(40, 600, seed=5, dtype=np.float32)
    ref, on = _pair(X, y, device, lambda: GLM(loss="logistic", dtype="float32"),
                    lambda: ADAGrad(lr=0.1), n_passes=2)
    _close(device, ref, on, rtol=1e-4, atol=1e-5)


def test_device_option_moves_host_minibatches_and_returns_host_predictions(tmp_path, device):
    X, y = make_problem(40, 600, seed=6)
    ref, on = _pair(X, y, device, lambda: GLM(loss="logistic", dtype="float64"),
                    lambda: ADAGrad(lr=0.1), move_source=False, n_passes=2)
    _close(device, ref, on)
    test = MatSource(X, y, batch_size=100)
    p_on = on.predict(test)  # a host source: the predictions come back as numpy
    assert isinstance(p_on, np.ndarray)
    np.testing.assert_allclose(p_on, ref.predict(test), rtol=1e-9)
    np.testing.assert_allclose(on.evaluate(test)["loss"], ref.evaluate(test)["loss"],
                               rtol=1e-9)
    # a checkpoint of the learner on `device` resumes on the CPU with the same model and state
    path = tmp_path / "on.npz"
    on.save_checkpoint(path)
    back = Learner(MatSource(X, y, batch_size=64), GLM(loss="logistic", dtype="float64"),
                   ADAGrad(lr=0.1), progress=False)
    back.load_checkpoint(path)
    assert back.model.device == "cpu"
    np.testing.assert_array_equal(back.model.coef, gmat.to_device(on.model.coef, "cpu"))
    np.testing.assert_array_equal(back.optimizer.sumsq,
                                  gmat.to_device(on.optimizer.sumsq, "cpu"))
    # and a CPU checkpoint loads into a learner on `device`
    resumed = Learner(MatSource(X, y, batch_size=64), GLM(loss="logistic", dtype="float64"),
                      ADAGrad(lr=0.1), progress=False, device=device)
    resumed.load_checkpoint(path)
    assert resumed.model.device == device
    assert gmat.device_of(resumed.optimizer.sumsq) == device


def test_online_adagrad_runs_on_the_cpu_only(device):
    X, y = make_problem(40, 200, seed=7)
    src = MatSource(gmat.to_device(X, device), gmat.to_device(y, device), batch_size=64)
    learner = Learner(src, GLM(loss="logistic", dtype="float64"), ADAGrad(lr=0.1, online=True),
                      progress=False)
    if device == "gpu":
        with pytest.raises(TypeError, match="CPU only"):
            learner.train()
    else:
        learner.train()
        assert learner.model.device == "cpu" and np.abs(learner.model.coef).max() > 0


def test_train_result_repr_is_short():
    """The repr summarises the run; the trace appears as its length, not its rows."""
    from roofline.learners import TrainResult

    rows = [{"train_loss": 0.5 - i * 1e-4, "heldout_loss": 0.7 - i * 1e-5,
             "roofline_fraction": 0.25} for i in range(5000)]
    rows.append({"train_loss": math.nan, "heldout_loss": 0.65})  # a pass end after an eval
    res = TrainResult(trace=rows, n_passes=3, n_steps=900, n_examples=30000, seconds=1.5,
                      examples_per_s=20000.0, best_heldout_loss=0.64)
    text = repr(res)
    assert len(text) < 300
    assert "trace=[5001 rows]" in text and "n_passes=3" in text and "seconds=1.5" in text
    assert "train_loss=0.0001," in text  # the last finite one, not the pass end's NaN
    assert "heldout_loss=0.65," in text and "best_heldout_loss=0.64" in text
    assert "roofline_fraction=0.25" in text and "stopped_early" not in text
    empty = repr(TrainResult())
    assert empty == ("TrainResult(n_passes=0, n_steps=0, n_examples=0, seconds=0, "
                     "examples_per_s=0, train_loss=nan, trace=[0 rows])")
    assert "stopped_early=True" in repr(TrainResult(stopped_early=True))
