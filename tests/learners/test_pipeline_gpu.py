"""The minibatch learners over Snap ML's streaming pipeline: ``ToDevice(source, device="gpu",
pipeline=True)`` hands the same minibatches to the device as the plain copy, and a Learner
trained on it reaches the same model.  Needs a CUDA device with cupy (marker ``gpu``; the
pipeline itself is checked under the simulator in tests/kernels/test_cuda_stream.py).
"""

import numpy as np
import pytest
import scipy.sparse as sp

from roofline import gmat
from roofline.datasources import MatSource, ToDevice


def test_pipeline_option_defaults_off_and_needs_a_device():
    src = MatSource(np.ones((3, 4)), np.zeros(4), batch_size=2)
    if gmat.gpu_available():
        assert ToDevice(src, device="gpu").opts.pipeline is False
    else:
        with pytest.raises(RuntimeError, match="CUDA device"):
            ToDevice(src, device="gpu", pipeline=True)


@pytest.mark.gpu
@pytest.mark.parametrize("sparse", [True, False])
def test_pipelined_minibatches_equal_the_plain_copies(sparse):
    if not gmat.gpu_available():
        pytest.skip("no CUDA device available")
    rng = np.random.default_rng(0)
    D = rng.normal(size=(20, 300)) * (rng.random((20, 300)) < 0.3)
    X = sp.csc_matrix(D.astype(np.float32)) if sparse else np.asfortranarray(D)
    y = (rng.random(300) < 0.5).astype(np.float32)
    w = rng.random(300).astype(np.float32)
    plain = list(ToDevice(MatSource(X, y, w, batch_size=64), device="gpu"))
    piped = list(ToDevice(MatSource(X, y, w, batch_size=64), device="gpu", pipeline=True))
    assert len(plain) == len(piped) == 5
    for a, b in zip(plain, piped, strict=True):
        assert a.start == b.start and gmat.device_of(b.X) == "gpu"
        Xa = a.X.toarray() if sparse else a.X
        Xb = b.X.toarray() if sparse else b.X
        assert (Xa.get() == Xb.get()).all()
        assert (a.y.get() == b.y.get()).all() and (a.w.get() == b.w.get()).all()
        if not sparse:
            assert b.X.flags.f_contiguous


def _same_gpu_model_with_and_without_the_pipeline(seed, train):
    """``train(X, y, model, pipeline)`` on a GPU, without and with the pipeline, reaches the
    same coefficients (skips without a device)."""
    if not gmat.gpu_available():
        pytest.skip("no CUDA device available")
    from roofline.learners import GLM

    rng = np.random.default_rng(seed)
    X = sp.random(50, 2000, density=0.1, format="csc", dtype=np.float32, random_state=seed)
    y = (rng.random(2000) < 0.5).astype(np.float32)
    coefs = []
    for pipeline in (False, True):
        model = GLM(loss="logistic")
        train(X, y, model, pipeline)
        coefs.append(gmat.to_device(model.coef, "cpu"))
    np.testing.assert_allclose(coefs[0], coefs[1], rtol=1e-5, atol=1e-6)


@pytest.mark.gpu
def test_learner_on_the_pipeline_learns_the_same_model():
    from roofline.learners import ADAGrad, Learner

    def train(X, y, model, pipeline):
        src = ToDevice(MatSource(X, y, batch_size=256), device="gpu", pipeline=pipeline)
        Learner(src, model, ADAGrad(lr=0.3), n_passes=2).train()

    _same_gpu_model_with_and_without_the_pipeline(1, train)


def test_learner_pipeline_option_is_a_no_op_on_the_cpu():
    """``Learner(pipeline=True)`` only changes how host minibatches reach a GPU model."""
    from roofline.learners import GLM, ADAGrad, Learner

    rng = np.random.default_rng(2)
    X = sp.random(30, 500, density=0.2, format="csc", dtype=np.float32, random_state=2)
    y = (rng.random(500) < 0.5).astype(np.float32)
    coefs = []
    for pipeline in (False, True):
        model = GLM(loss="logistic")
        learner = Learner(MatSource(X, y, batch_size=100), model, ADAGrad(lr=0.3), n_passes=2,
                          pipeline=pipeline, progress=False)
        assert learner.opts.pipeline is pipeline
        learner.train()
        coefs.append(np.array(model.coef))
    assert np.abs(coefs[0]).max() > 0
    np.testing.assert_array_equal(coefs[0], coefs[1])


@pytest.mark.gpu
def test_learner_pipeline_option_on_the_gpu():
    from roofline.learners import ADAGrad, Learner

    def train(X, y, model, pipeline):
        Learner(MatSource(X, y, batch_size=256), model, ADAGrad(lr=0.3), n_passes=2,
                device="gpu", pipeline=pipeline, progress=False).train()

    _same_gpu_model_with_and_without_the_pipeline(3, train)
