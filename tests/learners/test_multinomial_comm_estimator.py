"""LogisticRegression(comm=) with more than two classes fits the multinomial model over every
rank's examples (glm.fit_multinomial(comm=)): the single-process model and probabilities."""

import numpy as np

from roofline import comm as rcomm
from roofline.learners import LogisticRegression


def _data(n=900, d=8, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = np.argmax(X[:, :3] + 0.7 * rng.standard_normal((n, 3)), axis=1)
    return X, y


def _rank(c, X, y, kw):
    rows = np.array_split(np.arange(y.size), c.size)[c.rank]
    clf = LogisticRegression(comm=c, **kw).fit(X[rows], y[rows])
    return clf.coef_, clf.intercept_, clf._multinomial, clf.predict_proba(X)


def test_comm_fit_is_the_multinomial_single_process_fit():
    X, y = _data()
    kw = dict(C=0.5, tol=1e-9, max_iter=500)
    ref = LogisticRegression(**kw).fit(X, y)
    assert ref._multinomial
    for W, b, multinomial, proba in rcomm.run(_rank, 2, backend="threads", args=(X, y, kw)):
        assert multinomial
        np.testing.assert_allclose(W, ref.coef_, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(b, ref.intercept_, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(proba, ref.predict_proba(X), atol=1e-7)
