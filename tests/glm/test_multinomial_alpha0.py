"""The unpenalised multinomial fit (``alpha = 0``, scikit-learn's ``penalty=None``): the softmax
loss is invariant to adding a common vector to every class's coefficients (and a constant to
the intercepts); fit_multinomial returns the centred representative (every feature's
coefficients and the intercepts summing to zero over the classes), the limit of the penalised
optima, with the objective of scikit-learn's unpenalised fit."""

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.linear_model import LogisticRegression

from roofline import glm


def _noisy_problem(rng, n=1500, d=6, K=4, sparse=False):
    A = rng.standard_normal((n, d))
    if sparse:
        A[rng.random((n, d)) < 0.6] = 0.0
    W = rng.standard_normal((K, d))
    y = np.argmax(A @ W.T + 1.5 * rng.gumbel(size=(n, K)), axis=1)  # not separable
    return (sp.csr_matrix(A) if sparse else A), y


def _mean_loss(A, y, W, b, s):
    Z = np.asarray(A @ W.T) + b
    m = Z.max(axis=1, keepdims=True)
    lse = (m + np.log(np.exp(Z - m).sum(axis=1, keepdims=True))).ravel()
    return float(s @ (lse - Z[np.arange(len(y)), y])) / s.sum()


@pytest.mark.parametrize("solver", glm.MULTINOMIAL_SOLVERS)
@pytest.mark.parametrize("sparse", [False, True])
def test_unpenalised_matches_sklearn_penalty_none(solver, sparse):
    rng = np.random.default_rng(11)
    A, y = _noisy_problem(rng, sparse=sparse)
    sw = rng.random(len(y)) + 0.5
    sk = LogisticRegression(penalty=None, tol=1e-12, max_iter=10_000).fit(A, y, sample_weight=sw)
    X = sp.csc_matrix(A.T) if sparse else np.ascontiguousarray(A.T)
    # L-BFGS stalls at the precision of the objective near a relative gradient of 1e-8
    tol = 1e-9 if solver == "newton" else 1e-7
    res = glm.fit_multinomial(X, y, alpha=0.0, sample_weight=sw, solver=solver, tol=tol,
                              max_iter=1000)
    assert res.converged and res.alpha == 0.0
    f_sk = _mean_loss(A, y, sk.coef_, sk.intercept_, sw)
    f = _mean_loss(A, y, res.coef, res.intercept, sw)
    assert res.objective == pytest.approx(f, rel=1e-12)
    assert f <= f_sk * (1 + 1e-10)
    assert f == pytest.approx(f_sk, rel=1e-8)
    # the centred representative
    np.testing.assert_allclose(res.coef.sum(axis=0), 0.0, atol=1e-9)
    assert abs(res.intercept.sum()) < 1e-10
    # scikit-learn's, centred the same way (the same model)
    atol = 1e-4 if solver == "newton" else 1e-3
    np.testing.assert_allclose(res.coef, sk.coef_ - sk.coef_.mean(axis=0), atol=atol)
    np.testing.assert_allclose(res.intercept, sk.intercept_ - sk.intercept_.mean(), atol=atol)


def test_unpenalised_is_the_limit_of_the_penalised_fits():
    """The penalised optima tend to the centred unpenalised one as ``alpha -> 0``."""
    rng = np.random.default_rng(4)
    A, y = _noisy_problem(rng, n=800, d=4, K=3)
    X = np.ascontiguousarray(A.T)
    ref = glm.fit_multinomial(X, y, alpha=0.0, tol=1e-9)
    errs = []
    for alpha in (1e-3, 1e-5, 1e-7):
        r = glm.fit_multinomial(X, y, alpha=alpha, tol=1e-9)
        errs.append(np.abs(r.coef - ref.coef).max())
    assert errs[0] > errs[1] > errs[2]
    assert errs[2] < 1e-5


def test_unpenalised_without_intercept_and_warm_start():
    """Without intercepts, from a warm start that is not centred (it is centred first: the
    same model), to the same optimum."""
    rng = np.random.default_rng(8)
    A, y = _noisy_problem(rng, n=900, d=5, K=3)
    X = np.ascontiguousarray(A.T)
    cold = glm.fit_multinomial(X, y, alpha=0.0, fit_intercept=False, tol=1e-9)
    assert cold.converged and np.all(cold.intercept == 0)
    shifted = cold.coef + rng.standard_normal(5)  # the same model, not centred
    warm = glm.fit_multinomial(X, y, alpha=0.0, fit_intercept=False, tol=1e-9,
                               coef_init=shifted)
    assert warm.n_iter <= 2
    np.testing.assert_allclose(warm.coef, cold.coef, atol=1e-8)
    sk = LogisticRegression(penalty=None, fit_intercept=False, tol=1e-12,
                            max_iter=10_000).fit(A, y)
    np.testing.assert_allclose(cold.coef, sk.coef_ - sk.coef_.mean(axis=0), atol=1e-4)


def test_negative_alpha_is_named():
    X = np.ones((2, 3))
    with pytest.raises(ValueError, match="alpha must be a non-negative"):
        glm.fit_multinomial(X, [0, 1, 0], alpha=-1e-3)
    with pytest.raises(ValueError, match="alpha must be a non-negative"):
        glm.fit_multinomial(X, [0, 1, 0], alpha=float("nan"))
