"""The GLM-form loss over device arrays (kernels/_cuda_losses.py, behind
``roofline.glm.loss_deriv``) against the table's numba CPU kernel, for every loss.

``sim`` cases run under numba's CUDA simulator on numpy operands, in the subprocess of
``tests/kernels/test_cuda_primitives.py::test_under_simulator``; ``gpu`` cases on a real device
(marker ``gpu``; skipped without one) through the public ``roofline.glm.loss_deriv``.
"""

import os

import numpy as np
import pytest

from roofline import kernels

SIM = os.environ.get("NUMBA_ENABLE_CUDASIM", "") == "1"
CODES = [rec.code for rec in kernels.LOSS_TABLE]


def _operands(code, k, m, dtype, rng):
    eta = (rng.standard_normal((k, m)) * 3).astype(dtype, order="F")
    labels = kernels.LOSS_TABLE[code].labels
    y = {"real": rng.standard_normal((k, m)) * 2,
         "unit": rng.random((k, m)),
         "sign": (rng.random((k, m)) > 0.5).astype(float)}[labels].astype(dtype, order="F")
    w = (rng.random(m) * 2).astype(dtype)
    return eta, y, w


def _reference(code, eta, y, w):
    D = np.empty_like(eta)
    loss_sum = kernels.glm_loss_deriv_cols(code, eta, y, np.empty(0, eta.dtype) if w is None
                                           else w, D)
    return loss_sum, D


@pytest.mark.skipif(not SIM, reason="simulator cases run in test_under_simulator's subprocess")
@pytest.mark.parametrize("code", CODES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("weighted", [False, True])
def test_sim_matches_cpu(code, dtype, weighted):
    rng = np.random.default_rng(100 + code)
    eta, y, w = _operands(code, 2, 37, dtype, rng)
    w = w if weighted else None
    loss_sum, D_ref = _reference(code, eta, y, w)
    D = np.empty_like(eta)
    T = np.empty_like(eta)
    kernels.gpu_glm_loss_deriv(code, eta, y, w, D, T)
    rtol = 1e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(D, D_ref, rtol=rtol, atol=1e-30)
    assert float(T.sum(dtype=np.float64)) == pytest.approx(loss_sum, rel=rtol * 10)


@pytest.mark.skipif(not SIM, reason="simulator cases run in test_under_simulator's subprocess")
def test_sim_empty_and_in_place():
    """No examples: nothing launched; ``D`` may be ``eta`` itself."""
    empty = np.empty((1, 0))
    kernels.gpu_glm_loss_deriv(0, empty, empty, None, empty, empty)
    rng = np.random.default_rng(7)
    eta, y, _ = _operands(1, 1, 20, np.float64, rng)
    _, D_ref = _reference(1, eta, y, None)
    T = np.empty_like(eta)
    kernels.gpu_glm_loss_deriv(1, eta, y, None, eta, T)
    np.testing.assert_allclose(eta, D_ref, rtol=1e-13)


@pytest.mark.gpu
@pytest.mark.skipif(SIM, reason="a real device only")
@pytest.mark.parametrize("code", CODES)
def test_gpu_loss_deriv_matches_cpu(code):
    from roofline import glm, gmat

    if not gmat.gpu_available():
        pytest.skip("no CUDA device available")
    import cupy

    rng = np.random.default_rng(200 + code)
    eta, y, w = _operands(code, 3, 1000, np.float32, rng)
    ref = glm.loss_deriv(code, eta, y, w)
    got = glm.loss_deriv(code, cupy.asarray(eta, order="F"), cupy.asarray(y, order="F"),
                         cupy.asarray(w))
    assert got[0] == pytest.approx(ref[0], rel=1e-6)
    assert got[1] == pytest.approx(ref[1], rel=1e-6)
    np.testing.assert_allclose(cupy.asnumpy(got[2]), ref[2], rtol=1e-5, atol=1e-30)
