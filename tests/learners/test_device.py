"""Device placement of learners, checked without a GPU (the GPU runs: the ``device`` tests of
test_learner.py)."""

import numpy as np
import pytest
from scipy.special import expit

from roofline import gmat
from roofline.datasources import MatSource
from roofline.learners import GLM, ADAGrad, Learner, LearnerOptions
from tests._helpers import make_problem


def test_model_and_state_follow_a_cpu_source():
    X, y = make_problem(20, 200, seed=1)
    src = MatSource(X, y, batch_size=50)
    assert src.device == "cpu" and src.shuffle(100, seed=0).prefetch(2).device == "cpu"
    model = GLM(loss="logistic", dtype="float64")
    assert model.device == "cpu"  # before init
    learner = Learner(src, model, ADAGrad(lr=0.1), progress=False)
    assert learner.device == "cpu"
    learner.train()
    assert model.device == "cpu" and isinstance(model.coef, np.ndarray)
    assert isinstance(learner.optimizer.sumsq, np.ndarray) and model.coef.flags.f_contiguous
    model.to_device("cpu")  # already there: the same arrays
    assert isinstance(learner.predict(src), np.ndarray)


def test_device_option_is_validated_and_round_trips():
    with pytest.raises(ValueError, match="device"):
        LearnerOptions(device="tpu")
    opts = LearnerOptions(device="cpu")
    assert LearnerOptions.from_dict(opts.to_dict(), "Learner").device == "cpu"


@pytest.mark.skipif(gmat.gpu_available(), reason="checks the error raised without a GPU")
def test_gpu_learner_without_a_gpu_says_so():
    X, y = make_problem(20, 100, seed=2)
    learner = Learner(MatSource(X, y, batch_size=50), GLM(loss="logistic", dtype="float64"),
                      ADAGrad(lr=0.1), progress=False, device="gpu")
    with pytest.raises(RuntimeError, match="no usable CUDA device"):
        learner.train()
    assert not learner.model.initialized  # nothing was allocated


def test_uninitialised_model_cannot_move():
    with pytest.raises(RuntimeError, match="not initialised"):
        GLM(loss="logistic").to_device("cpu")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gmat_expit_is_scipys(dtype):
    x = np.random.default_rng(0).normal(scale=30, size=(3, 50)).astype(dtype)
    out = np.empty_like(x)
    assert gmat.expit(x, out=out) is out
    np.testing.assert_array_equal(out, expit(x))
    np.testing.assert_array_equal(gmat.expit(x), expit(x))
    with pytest.raises(ValueError, match="out has shape"):
        gmat.expit(x, out=np.empty((2, 2), dtype))
