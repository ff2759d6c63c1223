"""The fused ADAGrad GLM step on the GPU (kernels/_cuda_glm.py through gmat) against the CPU step.

Skipped without a CUDA device.  The GPU sums with atomic adds (order varies), so results are
compared to the CPU kernels within rounding, not bit for bit.
"""

import numpy as np
import pytest

from roofline import glm, gmat
from roofline.glm import FusedWorkspace, adagrad_glm_step, glm_adagrad_step
from tests._helpers import zipf_csc

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not gmat.gpu_available(), reason="no CUDA device available"),
]

LOSSES = ["linear", "logistic", "hinge", "squared_hinge"]


def _labels(loss, k, m, dtype, rng):
    if loss == "linear":
        y = rng.normal(size=(k, m))
    else:
        y = (rng.random((k, m)) < 0.5).astype(float)
    y = y.astype(dtype)
    return y[0] if k == 1 else np.asfortranarray(y)


def _problem(seed, k, dtype, n=400, m=120):
    rng = np.random.default_rng(seed)
    X = zipf_csc(n, m, dtype, rng)
    X.indices = X.indices.astype(np.int32)
    X.indptr = X.indptr.astype(np.int32)
    coef = np.asfortranarray(rng.normal(scale=0.1, size=(k, n)).astype(dtype))
    sumsq = np.asfortranarray(rng.random((k, n)).astype(dtype) + 0.1)
    return rng, X, coef, sumsq


def _gpu(*arrays):
    return [None if a is None else gmat.to_device(a, "gpu") for a in arrays]


def _tol(dtype):
    return dict(rtol=2e-5, atol=2e-6) if dtype == np.float32 else dict(rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("variant", ["plain", "weights+intercept", "l1+l2"])
def test_glm_step_matches_cpu(loss, k, variant, dtype):
    import cupy

    rng, X, coef, sumsq = _problem(7 + k, k, dtype)
    m = X.shape[1]
    y = _labels(loss, k, m, dtype, rng)
    w = rng.random(m).astype(dtype) if variant == "weights+intercept" else None
    b = rng.normal(size=k).astype(dtype) if variant == "weights+intercept" else None
    s0 = np.full(k, 0.5, dtype) if b is not None else None
    l1, l2 = (1e-3, 1e-2) if variant == "l1+l2" else (0.0, 0.0)
    kw = dict(loss=loss, lr=0.3, eps=1e-8, l1=l1, l2=l2)
    g = _gpu(coef, sumsq, X, y, w, b, s0)
    cpu = glm_adagrad_step(coef, sumsq, X, y, w=w, intercept=b, sumsq0=s0,
                           workspace=FusedWorkspace(), **kw)
    ws = FusedWorkspace()
    gpu = glm_adagrad_step(g[0], g[1], g[2], g[3], w=g[4], intercept=g[5], sumsq0=g[6],
                           workspace=ws, **kw)
    tol = _tol(dtype)
    np.testing.assert_allclose(gpu[0], cpu[0], rtol=1e-5 if dtype == np.float32 else 1e-12)
    np.testing.assert_allclose(gpu[1], cpu[1], rtol=1e-6)
    assert gpu[2] == cpu[2]  # touched feature columns
    np.testing.assert_allclose(g[0].get(), coef, **tol)
    np.testing.assert_allclose(g[1].get(), sumsq, **tol)
    if b is not None:
        np.testing.assert_allclose(g[5].get(), b, **tol)
        np.testing.assert_allclose(g[6].get(), s0, **tol)
    # the workspace's scratch is all zero again (the next step starts clean)
    assert int(cupy.count_nonzero(ws.g_gbuf)) == 0
    assert int(cupy.count_nonzero(ws.g_mark)) == 0


@pytest.mark.parametrize("k", [1, 4])
def test_given_D_step_matches_cpu(k, dtype):
    rng, X, coef, sumsq = _problem(3, k, dtype)
    D = np.asfortranarray(rng.normal(size=(k, X.shape[1])).astype(dtype))
    g = _gpu(coef, sumsq, X, D)
    nt = adagrad_glm_step(coef, sumsq, X, D, lr=0.2, eps=1e-8, l2=1e-2, l1=1e-3,
                          workspace=FusedWorkspace())
    ntg = adagrad_glm_step(g[0], g[1], g[2], g[3], lr=0.2, eps=1e-8, l2=1e-2, l1=1e-3,
                           workspace=FusedWorkspace())
    assert ntg == nt
    np.testing.assert_allclose(g[0].get(), coef, **_tol(dtype))
    np.testing.assert_allclose(g[1].get(), sumsq, **_tol(dtype))


def test_many_steps_reuse_workspace():
    """Fifty steps over shifting minibatches with one workspace: the same model as the CPU."""
    rng, X, coef, sumsq = _problem(11, 1, np.float64, n=2000, m=600)
    y = _labels("logistic", 1, X.shape[1], np.float64, rng)
    gc, gs = _gpu(coef, sumsq)
    ws_c, ws_g = FusedWorkspace(), FusedWorkspace()
    for t in range(50):
        lo = (t * 37) % 500
        Xb = gmat.slice_columns(X, lo, lo + 100)
        yb = y[lo:lo + 100]
        glm_adagrad_step(coef, sumsq, Xb, yb, loss="logistic", lr=0.1, eps=1e-8, workspace=ws_c)
        glm_adagrad_step(gc, gs, gmat.to_device(Xb, "gpu"), gmat.to_device(yb, "gpu"),
                         loss="logistic", lr=0.1, eps=1e-8, workspace=ws_g)
    np.testing.assert_allclose(gc.get(), coef, rtol=1e-10, atol=1e-12)


def test_bad_labels_leave_the_model_unchanged():
    rng, X, coef, sumsq = _problem(5, 1, np.float64)
    y = _labels("logistic", 1, X.shape[1], np.float64, rng)
    y[3] = 2.0
    gc, gs, gX, gy = _gpu(coef, sumsq, X, y)
    ws = FusedWorkspace()
    with pytest.raises(ValueError, match=r"labels in \[0, 1\]"):
        glm_adagrad_step(gc, gs, gX, gy, loss="logistic", lr=0.1, eps=1e-8, workspace=ws)
    np.testing.assert_array_equal(gc.get(), coef)
    np.testing.assert_array_equal(gs.get(), sumsq)
    y[3] = 1.0
    glm_adagrad_step(gc, gs, gX, gmat.to_device(y, "gpu"), loss="logistic", lr=0.1, eps=1e-8,
                     workspace=ws)
    glm_adagrad_step(coef, sumsq, X, y, loss="logistic", lr=0.1, eps=1e-8,
                     workspace=FusedWorkspace())
    np.testing.assert_allclose(gc.get(), coef, rtol=1e-11, atol=1e-13)


def test_mixed_devices_and_online_step_are_refused():
    rng, X, coef, sumsq = _problem(5, 1, np.float64)
    y = _labels("logistic", 1, X.shape[1], np.float64, rng)
    gX, gy, gs = _gpu(X, y, sumsq)
    with pytest.raises(TypeError, match="coef is on the CPU"):
        glm_adagrad_step(coef, gs, gX, gy, loss="logistic", lr=0.1, eps=1e-8,
                         workspace=FusedWorkspace())
    gc = gmat.to_device(coef, "gpu")
    with pytest.raises(TypeError, match="CPU only"):
        glm.glm_adagrad_online_step(gc, gs, gX, gy, loss="logistic", lr=0.1, eps=1e-8,
                                     workspace=FusedWorkspace())


def test_to_device_keeps_the_validation_mark():
    rng, X, coef, sumsq = _problem(5, 1, np.float32)
    gmat.check_csc(X, "X")
    G = gmat.to_device(X, "gpu")
    assert getattr(G, "_roofline_checked", None) is not None
    back = gmat.to_device(G, "cpu")
    assert getattr(back, "_roofline_checked", None) is not None
    assert (back != X).nnz == 0
