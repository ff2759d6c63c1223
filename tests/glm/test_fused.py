"""The fused ADAGrad kernels (kernels/_glm.py) through glm.adagrad_glm_step, against numpy; and
the step on each ``device`` (kernels/_cuda_glm.py through gmat on the GPU) against the CPU step.

The GPU sums with atomic adds (order varies), so its results are compared to the CPU kernels
within rounding, not bit for bit; the GPU params skip without a CUDA device.
"""

import numpy as np
import pytest
import scipy.sparse as sp

from roofline import glm, gmat, kernels
from roofline.glm import (
    FusedWorkspace,
    adagrad_glm_step,
    glm_adagrad_online_step,
    glm_adagrad_step,
)
from tests._helpers import zipf_csc


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_accumulate_touched_matches_dense_gradient(k, seed, dtype):
    rng = np.random.default_rng(seed)
    n, m = int(rng.integers(5, 300)), int(rng.integers(1, 80))
    X = zipf_csc(n, m, dtype, rng)
    D = np.asfortranarray(rng.normal(size=(k, m)).astype(dtype))
    sumsq = np.asfortranarray(rng.random((k, n)).astype(dtype))
    s0 = sumsq.copy()
    cap = max(X.nnz, 1)
    touched, sval = np.empty(cap, np.int64), np.empty(cap, dtype)
    gbuf = np.empty((cap, k), dtype)
    nt = kernels.glm_accumulate_touched(X.indptr, X.indices, X.data, D.T, sumsq.T, touched,
                                        sval, gbuf)
    # touched = the nonzero rows, in order of first occurrence (examples in order)
    first = list(dict.fromkeys(X.indices.tolist()))
    assert touched[:nt].tolist() == first
    G = D.astype(np.float64) @ X.toarray().T.astype(np.float64)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(gbuf[:nt], G[:, first].T, rtol=tol, atol=tol)
    np.testing.assert_array_equal(sval[:nt], s0[0, first])
    assert (sumsq[0, first] < 0).all()  # marked
    coef = np.zeros((k, n), dtype, order="F")
    kernels.adagrad_glm_update(coef.T, sumsq.T, touched, sval, gbuf, nt, 0.5, 1e-8, 0.0, 0.0)
    untouched = np.setdiff1d(np.arange(n), first)
    np.testing.assert_array_equal(sumsq[:, untouched], s0[:, untouched])
    np.testing.assert_array_equal(coef[:, untouched], 0)
    ref_s = s0[:, first] + G[:, first] ** 2
    np.testing.assert_allclose(sumsq[:, first], ref_s, rtol=tol, atol=tol)
    np.testing.assert_allclose(coef[:, first], -0.5 * G[:, first] / (np.sqrt(ref_s) + 1e-8),
                               rtol=10 * tol, atol=10 * tol)


def test_empty_minibatch_and_workspace_reuse():
    X = sp.csc_matrix((10, 4), dtype=np.float64)
    coef = np.ones((1, 10), order="F")
    sumsq = np.ones((1, 10), order="F")
    ws = FusedWorkspace()
    assert adagrad_glm_step(coef, sumsq, X, np.zeros((1, 4), order="F"), lr=0.1, eps=1e-8,
                            workspace=ws) == 0
    np.testing.assert_array_equal(coef, 1)
    np.testing.assert_array_equal(sumsq, 1)
    Y = sp.random(10, 4, density=0.5, format="csc", random_state=0)
    n0 = ws.n_allocations
    adagrad_glm_step(coef, sumsq, Y, np.ones((1, 4), order="F"), lr=0.1, eps=1e-8, workspace=ws)
    adagrad_glm_step(coef, sumsq, Y, np.ones((1, 4), order="F"), lr=0.1, eps=1e-8, workspace=ws)
    assert ws.n_allocations == n0 + 1
    assert (sumsq > 0).all()


# -- the whole GLM step: forward, loss, gradient, update ----------------------------------------

def _loss_deriv_ref(loss, eta, y):
    """Per-output loss and dl/deta in float64 (the formulas of roofline.learners.GLM)."""
    if loss == "linear":
        return 0.5 * (eta - y) ** 2, eta - y
    if loss == "logistic":
        return np.logaddexp(0, eta) - y * eta, 1 / (1 + np.exp(-eta)) - y
    s = np.where(y > 0, 1.0, -1.0)
    t = np.maximum(1 - s * eta, 0)
    if loss == "hinge":
        return t, np.where(t > 0, -s, 0.0)
    return t * t, -2 * s * t


def _glm_step_ref(coef, sumsq, b, s0, X, y, w, loss, lr, eps, l2, l1):
    """numpy reference of glm_adagrad_step (float64); returns the new arrays and the loss."""
    coef, sumsq = coef.astype(np.float64), sumsq.astype(np.float64)
    k, m = coef.shape[0], X.shape[1]
    Xd = X.toarray().astype(np.float64)
    y = np.asarray(y, np.float64).reshape(k, m)
    eta = coef @ Xd + (0 if b is None else b.astype(np.float64)[:, None])
    lv, dv = _loss_deriv_ref(loss, eta, y)
    wv = np.ones(m) if w is None else w.astype(np.float64)
    D = dv * wv / wv.sum()
    G = D @ Xd.T
    touched = np.flatnonzero(np.diff(X.tocsr().indptr))
    g = G[:, touched] + l2 * coef[:, touched]
    sumsq[:, touched] += g * g
    step = lr / (np.sqrt(sumsq[:, touched]) + eps)
    c = coef[:, touched] - step * g
    if l1 > 0:
        c = np.sign(c) * np.maximum(np.abs(c) - l1 * step, 0)
    coef[:, touched] = c
    if b is not None:
        g0 = D.sum(axis=1)
        s0 = s0.astype(np.float64) + g0 * g0
        b = b.astype(np.float64) - lr * g0 / (np.sqrt(s0) + eps)
    return coef, sumsq, b, s0, float((lv * wv).sum()), float(wv.sum()), len(touched)


def _step_problem(loss, k, dtype, rng, *, n_max, m_max, one_d_y, with_b, with_w):
    """A random GLM step problem on power-law data (features recur across examples):
    ``(X, coef, sumsq, y, b, s0, w)``, ``b``/``s0``/``w`` None unless requested."""
    n, m = int(rng.integers(5, n_max)), int(rng.integers(1, m_max))
    X = zipf_csc(n, m, dtype, rng)
    coef = np.asfortranarray(rng.normal(0, 0.5, (k, n)).astype(dtype))
    sumsq = np.asfortranarray(rng.random((k, n)).astype(dtype) + 0.1)
    y = (rng.random((k, m)) < 0.4).astype(dtype)
    if loss == "linear":
        y = rng.normal(size=(k, m)).astype(dtype)
    if k == 1 and one_d_y:
        y = y[0]  # 1-D labels
    b = rng.normal(size=k).astype(dtype) if with_b else None
    s0 = rng.random(k).astype(dtype) + 0.1 if with_b else None
    w = rng.random(m).astype(dtype) + 0.5 if with_w else None
    return X, coef, sumsq, y, b, s0, w


def _check_step(ref, coef, sumsq, b, s0, loss_sum, tol):
    np.testing.assert_allclose(coef, ref[0], rtol=tol, atol=tol)
    np.testing.assert_allclose(sumsq, ref[1], rtol=tol, atol=tol)
    if b is not None:
        np.testing.assert_allclose(b, ref[2], rtol=tol, atol=tol)
        np.testing.assert_allclose(s0, ref[3], rtol=tol, atol=tol)
    assert loss_sum == pytest.approx(ref[4], rel=tol, abs=tol)


@pytest.mark.parametrize("loss", ["linear", "logistic", "hinge", "squared_hinge"])
@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("seed", [0, 1])
def test_glm_adagrad_step_matches_numpy(loss, k, seed, dtype):
    X, coef, sumsq, y, b, s0, w = _step_problem(
        loss, k, dtype, np.random.default_rng(seed), n_max=300, m_max=80, one_d_y=seed == 0,
        with_b=seed == 1, with_w=seed == 0)
    l2, l1 = (1e-2, 0.0) if seed == 0 else (0.0, 1e-3)
    ref = _glm_step_ref(coef, sumsq, b, s0, X, y, w, loss, 0.3, 1e-8, l2, l1)
    loss_sum, weight_sum, nt = glm_adagrad_step(
        coef, sumsq, X, y, loss=loss, lr=0.3, eps=1e-8, w=w, intercept=b, sumsq0=s0, l2=l2,
        l1=l1, workspace=FusedWorkspace())
    _check_step(ref, coef, sumsq, b, s0, loss_sum, 2e-4 if dtype == np.float32 else 1e-10)
    assert weight_sum == pytest.approx(ref[5], rel=1e-6)
    assert nt == ref[6]
    assert (sumsq > 0).all()  # every touched-feature mark was removed


@pytest.mark.parametrize("step", [glm_adagrad_step, glm_adagrad_online_step])
@pytest.mark.parametrize("alias, name", [("linear", "squared"), ("log_loss", "logistic")])
def test_loss_aliases_give_the_same_step(step, alias, name, dtype):
    runs = []
    for loss in (alias, name):
        X, coef, sumsq, y, b, s0, w = _step_problem(
            name if name != "squared" else "linear", 2, dtype, np.random.default_rng(5),
            n_max=200, m_max=60, one_d_y=False, with_b=True, with_w=True)
        out = step(coef, sumsq, X, y, loss=loss, lr=0.2, eps=1e-8, w=w, intercept=b, sumsq0=s0,
                   l2=1e-3, l1=1e-4, workspace=FusedWorkspace())
        runs.append((coef, sumsq, b, s0, out))
    for u, v in zip(*runs, strict=True):
        if isinstance(u, tuple):
            assert u == v
        else:
            np.testing.assert_array_equal(u, v)
    with pytest.raises(ValueError, match="loss must be one of"):
        step(coef, sumsq, X, y, loss="cubic", lr=0.2, eps=1e-8, workspace=FusedWorkspace())


def test_glm_adagrad_step_bad_input():
    rng = np.random.default_rng(3)
    X = zipf_csc(20, 6, np.float64, rng, empty_cols=False)
    coef, sumsq = np.zeros((1, 20), order="F"), np.ones((1, 20), order="F")
    y = np.array([0, 1, 0, 1, 1, 0], np.float64)
    ws = FusedWorkspace()

    def step(**kw):
        args = dict(loss="logistic", lr=0.1, eps=1e-8, workspace=ws)
        args.update(kw)
        return glm_adagrad_step(args.pop("coef", coef), args.pop("sumsq", sumsq),
                                args.pop("X", X), args.pop("y", y), **args)

    with pytest.raises(ValueError, match="loss must be one of"):
        step(loss="poisson")
    with pytest.raises(ValueError, match="y has shape"):
        step(y=y[:5])
    with pytest.raises(ValueError, match=r"labels in \[0, 1\]"):
        step(y=y * 2)
    with pytest.raises(ValueError, match="NaN or infinite"):
        step(y=np.where(y > 0, np.nan, 0))
    with pytest.raises(ValueError, match=r"hinge loss needs labels"):
        step(loss="hinge", y=y + 3)
    with pytest.raises(TypeError, match="share one dtype"):
        step(coef=coef.astype(np.float32))
    with pytest.raises(ValueError, match="Fortran"):
        step(coef=np.zeros((2, 20)), sumsq=np.ones((2, 20)), y=np.zeros((2, 6)))
    with pytest.raises(ValueError, match="together"):
        step(intercept=np.zeros(1))
    with pytest.raises(ValueError, match="w has shape"):
        step(w=np.ones(5))
    with pytest.raises(ValueError, match="rows"):
        step(X=zipf_csc(21, 6, np.float64, rng))
    # nothing was changed by the refused calls
    np.testing.assert_array_equal(coef, 0)
    np.testing.assert_array_equal(sumsq, 1)


def _online_ref(coef, sumsq, b, s0, X, y, w, loss, lr, eps, l2, l1):
    """numpy per-example reference of glm_adagrad_online_step (float64)."""
    coef, sumsq = coef.astype(np.float64), sumsq.astype(np.float64)
    k, m = coef.shape[0], X.shape[1]
    y = np.asarray(y, np.float64).reshape(k, m)
    b = None if b is None else b.astype(np.float64)
    s0 = None if s0 is None else s0.astype(np.float64)
    total = 0.0
    for j in range(m):
        rows = X.indices[X.indptr[j]:X.indptr[j + 1]]
        x = X.data[X.indptr[j]:X.indptr[j + 1]].astype(np.float64)
        eta = coef[:, rows] @ x + (0 if b is None else b)
        lv, dv = _loss_deriv_ref(loss, eta, y[:, j])
        wj = 1.0 if w is None else float(w[j])
        total += wj * lv.sum()
        d = wj * dv
        if b is not None:
            s0 += d * d
            b = b - lr * d / (np.sqrt(s0) + eps)
        g = np.outer(d, x) + l2 * coef[:, rows]
        sumsq[:, rows] += g * g
        step = lr / (np.sqrt(sumsq[:, rows]) + eps)
        c = coef[:, rows] - step * g
        if l1 > 0:
            c = np.sign(c) * np.maximum(np.abs(c) - l1 * step, 0)
        coef[:, rows] = c
    return coef, sumsq, b, s0, total


@pytest.mark.parametrize("loss", ["linear", "logistic", "hinge", "squared_hinge"])
@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("seed", [0, 1])
def test_glm_adagrad_online_step_matches_numpy(loss, k, seed, dtype):
    X, coef, sumsq, y, b, s0, w = _step_problem(
        loss, k, dtype, np.random.default_rng(10 + seed), n_max=200, m_max=60,
        one_d_y=seed == 1, with_b=seed == 0, with_w=seed == 1)
    l2, l1 = (1e-2, 0.0) if seed == 0 else (1e-3, 1e-3)
    ref = _online_ref(coef, sumsq, b, s0, X, y, w, loss, 0.2, 1e-8, l2, l1)
    loss_sum, weight_sum = glm_adagrad_online_step(
        coef, sumsq, X, y, loss=loss, lr=0.2, eps=1e-8, w=w, intercept=b, sumsq0=s0, l2=l2,
        l1=l1, workspace=FusedWorkspace())
    _check_step(ref, coef, sumsq, b, s0, loss_sum, 5e-4 if dtype == np.float32 else 1e-9)
    assert weight_sum == pytest.approx(y.shape[-1] if w is None else float(w.sum()), rel=1e-6)


# ---------------------------------------------------------------------------------------------
# the step on each device against the CPU step

DEVICE_LOSSES = ["linear", *glm.GLM_LOSSES[1:]]  # every loss of the table ("linear": an alias)


def _dev_labels(loss, k, m, dtype, rng):
    if glm.LOSS_LABELS[glm.resolve_loss(loss)] == "real":
        y = rng.normal(size=(k, m))
    else:
        y = (rng.random((k, m)) < 0.5).astype(float)
    y = y.astype(dtype)
    return y[0] if k == 1 else np.asfortranarray(y)


def _dev_problem(seed, k, dtype, n=400, m=120):
    rng = np.random.default_rng(seed)
    X = zipf_csc(n, m, dtype, rng)
    X.indices = X.indices.astype(np.int32)
    X.indptr = X.indptr.astype(np.int32)
    coef = np.asfortranarray(rng.normal(scale=0.1, size=(k, n)).astype(dtype))
    sumsq = np.asfortranarray(rng.random((k, n)).astype(dtype) + 0.1)
    return rng, X, coef, sumsq


def _on(device, *arrays):
    """Copies of ``arrays`` on ``device`` (the CPU reference keeps its own)."""
    return [None if a is None
            else gmat.to_device(a.copy() if sp.issparse(a) else a.copy(order="K"), device)
            for a in arrays]


def _host(a):
    return a.get() if hasattr(a, "get") and not sp.issparse(a) else a


def _dev_tol(dtype):
    return dict(rtol=2e-5, atol=2e-6) if dtype == np.float32 else dict(rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("loss", DEVICE_LOSSES)
@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("variant", ["plain", "weights+intercept", "l1+l2"])
def test_glm_step_on_device_matches_cpu(loss, k, variant, dtype, device):
    rng, X, coef, sumsq = _dev_problem(7 + k, k, dtype)
    m = X.shape[1]
    y = _dev_labels(loss, k, m, dtype, rng)
    w = rng.random(m).astype(dtype) if variant == "weights+intercept" else None
    b = rng.normal(size=k).astype(dtype) if variant == "weights+intercept" else None
    s0 = np.full(k, 0.5, dtype) if b is not None else None
    l1, l2 = (1e-3, 1e-2) if variant == "l1+l2" else (0.0, 0.0)
    kw = dict(loss=loss, lr=0.3, eps=1e-8, l1=l1, l2=l2)
    g = _on(device, coef, sumsq, X, y, w, b, s0)
    cpu = glm_adagrad_step(coef, sumsq, X, y, w=w, intercept=b, sumsq0=s0,
                           workspace=FusedWorkspace(), **kw)
    ws = FusedWorkspace()
    got = glm_adagrad_step(g[0], g[1], g[2], g[3], w=g[4], intercept=g[5], sumsq0=g[6],
                           workspace=ws, **kw)
    tol = _dev_tol(dtype)
    np.testing.assert_allclose(got[0], cpu[0], rtol=1e-5 if dtype == np.float32 else 1e-12)
    np.testing.assert_allclose(got[1], cpu[1], rtol=1e-6)
    assert got[2] == cpu[2]  # touched feature columns
    np.testing.assert_allclose(_host(g[0]), coef, **tol)
    np.testing.assert_allclose(_host(g[1]), sumsq, **tol)
    if b is not None:
        np.testing.assert_allclose(_host(g[5]), b, **tol)
        np.testing.assert_allclose(_host(g[6]), s0, **tol)
    if device == "gpu":
        import cupy

        # the workspace's scratch is all zero again (the next step starts clean)
        assert int(cupy.count_nonzero(ws.g_gbuf)) == 0
        assert int(cupy.count_nonzero(ws.g_mark)) == 0


@pytest.mark.parametrize("k", [1, 4])
def test_given_D_step_on_device_matches_cpu(k, dtype, device):
    rng, X, coef, sumsq = _dev_problem(3, k, dtype)
    D = np.asfortranarray(rng.normal(size=(k, X.shape[1])).astype(dtype))
    g = _on(device, coef, sumsq, X, D)
    nt = adagrad_glm_step(coef, sumsq, X, D, lr=0.2, eps=1e-8, l2=1e-2, l1=1e-3,
                          workspace=FusedWorkspace())
    ntg = adagrad_glm_step(g[0], g[1], g[2], g[3], lr=0.2, eps=1e-8, l2=1e-2, l1=1e-3,
                           workspace=FusedWorkspace())
    assert ntg == nt
    np.testing.assert_allclose(_host(g[0]), coef, **_dev_tol(dtype))
    np.testing.assert_allclose(_host(g[1]), sumsq, **_dev_tol(dtype))


def test_many_steps_on_device_reuse_workspace(device):
    """Fifty steps over shifting minibatches with one workspace: the same model as the CPU."""
    rng, X, coef, sumsq = _dev_problem(11, 1, np.float64, n=2000, m=600)
    y = _dev_labels("logistic", 1, X.shape[1], np.float64, rng)
    gc, gs = _on(device, coef, sumsq)
    ws_c, ws_g = FusedWorkspace(), FusedWorkspace()
    for t in range(50):
        lo = (t * 37) % 500
        Xb = gmat.slice_columns(X, lo, lo + 100)
        yb = y[lo:lo + 100]
        glm_adagrad_step(coef, sumsq, Xb, yb, loss="logistic", lr=0.1, eps=1e-8, workspace=ws_c)
        glm_adagrad_step(gc, gs, *_on(device, Xb, yb), loss="logistic", lr=0.1, eps=1e-8,
                         workspace=ws_g)
    np.testing.assert_allclose(_host(gc), coef, rtol=1e-10, atol=1e-12)


def test_bad_labels_on_device_leave_the_model_unchanged(device):
    rng, X, coef, sumsq = _dev_problem(5, 1, np.float64)
    y = _dev_labels("logistic", 1, X.shape[1], np.float64, rng)
    y[3] = 2.0
    gc, gs, gX, gy = _on(device, coef, sumsq, X, y)
    ws = FusedWorkspace()
    with pytest.raises(ValueError, match=r"labels in \[0, 1\]"):
        glm_adagrad_step(gc, gs, gX, gy, loss="logistic", lr=0.1, eps=1e-8, workspace=ws)
    np.testing.assert_array_equal(_host(gc), coef)
    np.testing.assert_array_equal(_host(gs), sumsq)
    y[3] = 1.0
    glm_adagrad_step(gc, gs, gX, *_on(device, y), loss="logistic", lr=0.1, eps=1e-8,
                     workspace=ws)
    glm_adagrad_step(coef, sumsq, X, y, loss="logistic", lr=0.1, eps=1e-8,
                     workspace=FusedWorkspace())
    np.testing.assert_allclose(_host(gc), coef, rtol=1e-11, atol=1e-13)


_GPU_ONLY = pytest.mark.parametrize("device", [pytest.param("gpu", marks=pytest.mark.gpu)],
                                    indirect=True)


@_GPU_ONLY
def test_mixed_devices_and_online_step_are_refused(device):
    rng, X, coef, sumsq = _dev_problem(5, 1, np.float64)
    y = _dev_labels("logistic", 1, X.shape[1], np.float64, rng)
    gX, gy, gs = _on(device, X, y, sumsq)
    with pytest.raises(TypeError, match="coef is on the CPU"):
        glm_adagrad_step(coef, gs, gX, gy, loss="logistic", lr=0.1, eps=1e-8,
                         workspace=FusedWorkspace())
    gc = gmat.to_device(coef, device)
    with pytest.raises(TypeError, match="CPU only"):
        glm.glm_adagrad_online_step(gc, gs, gX, gy, loss="logistic", lr=0.1, eps=1e-8,
                                     workspace=FusedWorkspace())


@_GPU_ONLY
def test_to_device_keeps_the_validation_mark(device):
    rng, X, coef, sumsq = _dev_problem(5, 1, np.float32)
    gmat.check_csc(X, "X")
    G = gmat.to_device(X, device)
    assert getattr(G, "_roofline_checked", None) is not None
    back = gmat.to_device(G, "cpu")
    assert getattr(back, "_roofline_checked", None) is not None
    assert (back != X).nnz == 0
