"""Learners with the model on the GPU (cupy) against the same learners on the CPU.

Skipped without a CUDA device.  Every optimizer path runs on both devices from the same data and
start; the GPU's atomic sums make the last bits differ, so models are compared within rounding.
"""

import numpy as np
import pytest
from _learners_data import make_problem

from roofline import gmat
from roofline.datasources import MatSource
from roofline.learners import (
    GLM,
    LBFGS,
    SGD,
    ADAGrad,
    L1Regularizer,
    L2Regularizer,
    Learner,
)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not gmat.gpu_available(), reason="no CUDA device available"),
]


def _pair(X, y, make_model, make_opt, mixins=(), device_opt="auto", gpu_source=True, **kw):
    """The same learner on the CPU and on the GPU; returns both after training."""
    cpu = Learner(MatSource(X, y, batch_size=64), make_model(), make_opt(),
                  mixins=[m() for m in mixins], progress=False, **kw)
    if gpu_source:
        src = MatSource(gmat.to_device(X, "gpu"), gmat.to_device(y, "gpu"), batch_size=64)
    else:
        src = MatSource(X, y, batch_size=64)
    gpu = Learner(src, make_model(), make_opt(), mixins=[m() for m in mixins], progress=False,
                  device=device_opt, **kw)
    cpu.train()
    gpu.train()
    return cpu, gpu


def _close(cpu, gpu, rtol=1e-9, atol=1e-11):
    assert gpu.model.device == "gpu"
    np.testing.assert_allclose(gpu.model.coef.get(), cpu.model.coef, rtol=rtol, atol=atol)
    np.testing.assert_allclose(gpu.model.intercept.get(), cpu.model.intercept, rtol=rtol,
                               atol=atol)


@pytest.mark.parametrize("loss", ["logistic", "linear", "hinge"])
def test_fused_adagrad_on_gpu_equals_cpu(loss):
    X, y = make_problem(40, 600, loss="linear" if loss == "linear" else "logistic", seed=1)
    cpu, gpu = _pair(X, y, lambda: GLM(loss=loss, dtype="float64"),
                     lambda: ADAGrad(lr=0.1), n_passes=3)
    _close(cpu, gpu)
    assert cpu.optimizer.can_fuse(cpu.model, next(iter(cpu.datasource)), [])


def test_unfused_sgd_with_l1_l2_on_gpu_equals_cpu():
    X, y = make_problem(40, 600, seed=2)
    cpu, gpu = _pair(X, y, lambda: GLM(loss="logistic", dtype="float64"),
                     lambda: SGD(lr=0.5), mixins=(lambda: L2Regularizer(1e-2),
                                                  lambda: L1Regularizer(1e-3)), n_passes=2)
    _close(cpu, gpu)


def test_multilabel_adagrad_with_l2_on_gpu_equals_cpu():
    X, y = make_problem(30, 500, k=3, seed=4)
    cpu, gpu = _pair(X, y, lambda: GLM(loss="logistic", n_outputs=3, dtype="float64"),
                     lambda: ADAGrad(lr=0.1), mixins=(lambda: L2Regularizer(1e-3),), n_passes=2)
    _close(cpu, gpu)


def test_lbfgs_on_gpu_reaches_the_cpu_optimum():
    X, y = make_problem(30, 500, seed=3)
    cpu, gpu = _pair(X, y, lambda: GLM(loss="logistic", dtype="float64"),
                     lambda: LBFGS(tol=1e-10, ftol=1e-16, max_iter=500),
                     mixins=(lambda: L2Regularizer(1e-2),))
    _close(cpu, gpu, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(gpu.objective(), cpu.objective(), rtol=1e-10)


def test_float32_adagrad_on_gpu_close_to_cpu():
    X, y = make_problem(40, 600, seed=5, dtype=np.float32)
    cpu, gpu = _pair(X, y, lambda: GLM(loss="logistic", dtype="float32"),
                     lambda: ADAGrad(lr=0.1), n_passes=2)
    _close(cpu, gpu, rtol=1e-4, atol=1e-5)


def test_device_option_moves_cpu_minibatches_and_returns_host_predictions(tmp_path):
    X, y = make_problem(40, 600, seed=6)
    cpu, gpu = _pair(X, y, lambda: GLM(loss="logistic", dtype="float64"),
                     lambda: ADAGrad(lr=0.1), device_opt="gpu", gpu_source=False, n_passes=2)
    _close(cpu, gpu)
    test = MatSource(X, y, batch_size=100)
    p_gpu = gpu.predict(test)  # a CPU source: the predictions come back as numpy
    assert isinstance(p_gpu, np.ndarray)
    np.testing.assert_allclose(p_gpu, cpu.predict(test), rtol=1e-9)
    np.testing.assert_allclose(gpu.evaluate(test)["loss"], cpu.evaluate(test)["loss"],
                               rtol=1e-9)
    # a checkpoint of the GPU learner resumes on the CPU with the same model and state
    path = tmp_path / "gpu.npz"
    gpu.save_checkpoint(path)
    back = Learner(MatSource(X, y, batch_size=64), GLM(loss="logistic", dtype="float64"),
                   ADAGrad(lr=0.1), progress=False)
    back.load_checkpoint(path)
    assert back.model.device == "cpu"
    np.testing.assert_array_equal(back.model.coef, gpu.model.coef.get())
    np.testing.assert_array_equal(back.optimizer.sumsq, gpu.optimizer.sumsq.get())
    # and a CPU checkpoint loads into a GPU learner
    resumed = Learner(MatSource(X, y, batch_size=64), GLM(loss="logistic", dtype="float64"),
                      ADAGrad(lr=0.1), progress=False, device="gpu")
    resumed.load_checkpoint(path)
    assert resumed.model.device == "gpu" and gmat.device_of(resumed.optimizer.sumsq) == "gpu"


def test_online_adagrad_on_gpu_is_refused_clearly():
    X, y = make_problem(40, 200, seed=7)
    src = MatSource(gmat.to_device(X, "gpu"), gmat.to_device(y, "gpu"), batch_size=64)
    learner = Learner(src, GLM(loss="logistic", dtype="float64"), ADAGrad(lr=0.1, online=True),
                      progress=False)
    with pytest.raises(TypeError, match="CPU only"):
        learner.train()
