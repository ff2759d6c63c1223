"""ModelUpdate: a model's own minibatch update inside a Learner."""

import numpy as np
import pytest

from roofline.datasources import MatSource
from roofline.learners import GLM, Learner, Model, ModelUpdate


class _RunningMean(Model):
    """Toy model: the mean of the examples, updated as a running average (a closed-form step)."""

    def __init__(self):
        self.mean = None
        self.count = 0.0

    def init(self, n_features, device="cpu"):
        self.mean = np.zeros(n_features)

    @property
    def initialized(self):
        return self.mean is not None

    @property
    def n_features(self):
        return None if self.mean is None else self.mean.shape[0]

    def parameters(self):
        return {"mean": self.mean}

    def loss(self, batch, cache=None):
        d = np.asarray(batch.X) - self.mean[:, None]
        return float((d * d).sum()), float(batch.n_examples)

    def update(self, batch, cache=None):
        ls, ws = self.loss(batch, cache)
        m = batch.n_examples
        self.mean += (np.asarray(batch.X).sum(axis=1) - m * self.mean) / (self.count + m)
        self.count += m
        return ls, ws

    def flops_per_step(self, batch):
        return 2 * batch.X.size


def test_model_update_trains_to_the_mean():
    rng = np.random.default_rng(0)
    X = rng.normal(loc=3.0, size=(5, 1000))
    model = _RunningMean()
    Learner(MatSource(X, batch_size=100), model, ModelUpdate(),
            opts=None).train()
    np.testing.assert_allclose(model.mean, X.mean(axis=1), rtol=1e-12)


def test_model_update_counts_steps():
    X = np.ones((2, 300))
    opt = ModelUpdate()
    Learner(MatSource(X, batch_size=100), _RunningMean(), opt).train()
    assert opt.t == 3


def test_model_update_needs_an_update_method():
    X = np.ones((2, 10))
    y = np.ones(10)
    with pytest.raises(TypeError, match="update"):
        Learner(MatSource(X, y, batch_size=5), GLM(), ModelUpdate()).train()


def test_model_update_takes_no_options():
    with pytest.raises((ValueError, TypeError)):
        ModelUpdate(lr=0.1)
