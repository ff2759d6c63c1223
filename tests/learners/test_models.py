import numpy as np
import pytest
from scipy.special import expit

from roofline import gmat
from roofline.datasources import Minibatch
from roofline.learners import GLM
from tests._helpers import make_problem


def ref_loss_deriv(loss, eta, y):
    if loss == "linear":
        return 0.5 * (eta - y) ** 2, eta - y
    if loss == "logistic":
        return np.logaddexp(0, eta) - y * eta, expit(eta) - y
    s = np.where(y > 0, 1.0, -1.0)
    h = np.maximum(0, 1 - s * eta)
    if loss == "hinge":
        return h, np.where(h > 0, -s, 0.0)
    return h**2, -2 * s * h


@pytest.mark.parametrize("loss", ["linear", "logistic", "hinge", "squared_hinge"])
@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("weighted", [False, True])
def test_gradient_matches_dense_reference(loss, k, weighted, dtype):
    X, y = make_problem(20, 50, k=k, loss="linear" if loss == "linear" else "logistic",
                        dtype=dtype, seed=k)
    rng = np.random.default_rng(1)
    w = rng.random(50).astype(dtype) if weighted else None
    m = GLM(loss=loss, n_outputs=k, dtype=dtype.name)
    m.init(20)
    m.set_parameters(rng.normal(size=(k, 20)), rng.normal(size=k))
    cache = gmat.BufferCache()
    ls, ws, G, g0, _ = m.gradient(Minibatch(X, y, w), cache)
    Xd = X.toarray().astype(np.float64)
    eta = m.coef.astype(np.float64) @ Xd + m.intercept.astype(np.float64)[:, None]
    l, d = ref_loss_deriv(loss, eta, np.atleast_2d(y).astype(np.float64))
    ww = np.ones(50) if w is None else w.astype(np.float64)
    tol = dict(rtol=2e-4, atol=2e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(ls, (l * ww).sum(), **tol)
    assert ws == pytest.approx(ww.sum(), rel=1e-6)
    np.testing.assert_allclose(G, (d * ww) @ Xd.T, **tol)
    np.testing.assert_allclose(g0, (d * ww).sum(axis=1), **tol)
    assert G.flags.f_contiguous and G.shape == (k, 20)


def test_dense_and_sparse_minibatches_agree():
    X, y = make_problem(15, 40, loss="logistic")
    m = GLM(dtype="float64")
    m.init(15)
    m.set_parameters(np.linspace(-1, 1, 15), 0.2)
    a = m.gradient(Minibatch(X, y))
    b = m.gradient(Minibatch(np.asfortranarray(X.toarray()), y))
    assert a[0] == pytest.approx(b[0], rel=1e-12)
    np.testing.assert_allclose(a[2], b[2], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(m.predict(X), expit(m.coef[0] @ X.toarray() + 0.2), rtol=1e-12)


def test_bad_labels_and_shapes_are_rejected():
    X, y = make_problem(10, 20)
    m = GLM(dtype="float64")
    m.init(10)
    with pytest.raises(ValueError, match=r"labels in \[0, 1\]"):
        m.gradient(Minibatch(X, y * 3))
    with pytest.raises(ValueError, match="NaN"):
        m.gradient(Minibatch(X, np.full(20, np.nan)))
    with pytest.raises(ValueError, match="y has shape"):
        m.gradient(Minibatch(X, np.zeros((2, 20))))
    with pytest.raises(ValueError, match="features"):
        m.gradient(Minibatch(X[:5], y))
    with pytest.raises(TypeError, match="dtype"):
        m.gradient(Minibatch(X.astype(np.float32), y))
    with pytest.raises(ValueError, match="hinge loss needs labels"):
        h = GLM(loss="hinge", dtype="float64")
        h.init(10)
        h.gradient(Minibatch(X, y + 1))
