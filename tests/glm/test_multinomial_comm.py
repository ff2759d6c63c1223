"""fit_multinomial(comm=): the softmax objective over every rank's examples, the same iterates
as one process at any number of ranks (sparse Kylix plan or dense all-reduce), weights,
ranks without examples or without some classes, and clear errors."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from roofline import comm as rcomm
from roofline.glm import fit_multinomial


def _data(sparse, n=1200, d=30, K=4, seed=0):
    rng = np.random.default_rng(seed)
    if sparse:
        X = sp.random(d, n, density=0.15, format="csc", random_state=seed)
        X.data = rng.standard_normal(X.nnz)
        Xd = X.toarray()
    else:
        X = Xd = rng.standard_normal((d, n))
    y = np.argmax(rng.standard_normal((K, d)) @ Xd + 0.5 * rng.standard_normal((K, n)), axis=0)
    return X, y


def _shards(n, K, uneven):
    if not uneven:
        return np.array_split(np.arange(n), K)
    cuts = np.linspace(0, n, K + 1).astype(int)
    cuts[1] = 0  # rank 0 holds no example
    return [np.arange(cuts[r], cuts[r + 1]) for r in range(K)]


def _rank(c, X, y, cols, kw):
    kw = dict(kw)  # the ranks are threads sharing the arguments
    sw = kw.pop("sample_weight", None)
    Xl = X[:, cols[c.rank]]
    Xl = sp.csc_matrix(Xl) if sp.issparse(X) else np.ascontiguousarray(Xl)
    sl = None if sw is None else sw[cols[c.rank]]
    res = fit_multinomial(Xl, y[cols[c.rank]], comm=c, sample_weight=sl, **kw)
    return res.coef, res.intercept, res.n_iter, res.objective, res.info["collectives"]


@pytest.mark.parametrize("sparse", [True, False])
@pytest.mark.parametrize("solver", ["newton", "lbfgs"])
@pytest.mark.parametrize("K", [1, 3])
def test_comm_fit_equals_one_process(sparse, solver, K):
    X, y = _data(sparse)
    kw = dict(alpha=1e-3, solver=solver, tol=1e-8, max_iter=300)
    one = fit_multinomial(X, y, **kw)
    out = rcomm.run(_rank, K, backend="threads",
                    args=(X, y, _shards(X.shape[1], K, uneven=K > 1), kw))
    for W, b, it, P, colls in out:
        np.testing.assert_allclose(W, one.coef, rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(b, one.intercept, rtol=1e-6, atol=1e-8)
        assert P == pytest.approx(one.objective, rel=1e-12)
        assert colls > it  # every evaluation reduced
    its = {o[2] for o in out}
    assert len(its) == 1 and abs(its.pop() - one.n_iter) <= 1  # the same steps at any K


def test_comm_weights_and_a_rank_missing_classes():
    X, y = _data(True, seed=1)
    order = np.argsort(y, kind="stable")  # rank 0 sees classes 0-1 only, rank 1 the rest
    X, y = X[:, order], y[order]
    sw = np.random.default_rng(2).uniform(0.2, 3.0, y.size)
    kw = dict(alpha=1e-3, tol=1e-8, max_iter=300)
    one = fit_multinomial(X, y, sample_weight=sw, **kw)
    out = rcomm.run(_rank, 2, backend="threads",
                    args=(X, y, np.array_split(np.arange(y.size), 2),
                          dict(kw, sample_weight=sw)))
    for W, b, *_ in out:
        np.testing.assert_allclose(W, one.coef, rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(b, one.intercept, rtol=1e-6, atol=1e-8)


def _bad_alpha(c, X, y):
    cols = np.array_split(np.arange(y.size), c.size)[c.rank]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fit_multinomial(X[:, cols], y[cols], alpha=1e-3 * (1 + c.rank), comm=c)


def _bad_labels(c, X, y):
    cols = np.array_split(np.arange(y.size), c.size)[c.rank]
    yl = y[cols].astype(np.float64)
    if c.rank == 1:
        yl[0] = 0.5
    return fit_multinomial(X[:, cols], yl, alpha=1e-3, comm=c)


def test_comm_errors_name_the_problem_on_every_rank():
    X, y = _data(True, n=200)
    with pytest.raises(Exception, match="alpha differ between the ranks"):
        rcomm.run(_bad_alpha, 2, backend="threads", args=(X, y))
    with pytest.raises(Exception, match="class indices|input of rank 1 failed"):
        rcomm.run(_bad_labels, 2, backend="threads", args=(X, y))
    with pytest.raises(TypeError, match="Communicator"):
        fit_multinomial(X, y, alpha=1e-3, comm=object())
