"""roofline.dask on a real LocalCluster of worker processes: the Dask estimators give the
single-process model, on dense, sparse and dataframe input; a failure names its rank."""

import numpy as np
import pytest
import scipy.sparse as sp

distributed = pytest.importorskip("distributed")
da = pytest.importorskip("dask.array")

from roofline.comm import from_environment  # noqa: E402
from roofline.dask import (  # noqa: E402
    DaskLinearSVC,
    DaskLogisticRegression,
    DaskRidge,
    partitions_by_worker,
)
from roofline.learners import LinearSVC, LogisticRegression, Ridge  # noqa: E402

pytestmark = pytest.mark.multiprocess

KW = dict(tol=1e-8, max_iter=2000, random_state=0)


def _alone(cls, **params):
    """The same estimator fitted in this one process: over a communicator of one rank it
    solves the same (dual) problem as the distributed fit, the intercept carried by a
    constant feature as liblinear does."""
    return cls(solver="cocoa", comm=from_environment(), **params, **KW)


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=2, processes=True,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as c:
        yield c


def _data(n=1200, d=15, seed=0, classes=2):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    w = rng.standard_normal((d, classes))
    y = (X @ w + 0.5 * rng.standard_normal((n, classes))).argmax(1)
    return X, y


def _spread(client, X, y, chunks=150):
    """Dask arrays whose partitions sit on both workers."""
    Xd, yd = da.from_array(X, chunks=(chunks, -1)), da.from_array(y, chunks=chunks)
    return client.persist(Xd), client.persist(yd)


def test_partitions_are_grouped_by_their_worker(client):
    X, y = _data()
    Xd, yd = _spread(client, X, y)
    groups = partitions_by_worker(client, Xd, yd)
    assert sum(len(g) for g in groups) == 8 and 1 <= len(groups) <= 2
    got = np.concatenate([f.result()[1] for g in groups for f in g])
    assert sorted(got.tolist()) == sorted(y.tolist())


@pytest.mark.parametrize("sparse", [False, True])
def test_logistic_regression_equals_the_single_process_fit(client, sparse):
    X, y = _data()
    Xd, yd = _spread(client, X, y)
    if sparse:
        Xd = Xd.map_blocks(sp.csr_matrix, dtype=X.dtype)
    clf = DaskLogisticRegression(C=0.5, **KW).fit(Xd, yd)
    # the default (distributed Newton, the intercept unregularised) is the local default's
    # problem
    ref = LogisticRegression(C=0.5, **KW).fit(X, y)
    assert clf.n_workers_ == 2 and clf.solver_ == "newton"
    np.testing.assert_allclose(clf.coef_, ref.coef_, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(clf.intercept_, ref.intercept_, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(clf.classes_, ref.classes_)
    pred = clf.predict(Xd)
    assert isinstance(pred, da.Array)
    np.testing.assert_array_equal(pred.compute(), ref.predict(X))
    np.testing.assert_allclose(clf.decision_function(X), ref.decision_function(X),
                               rtol=1e-3, atol=1e-3)


@pytest.mark.slow  # the hinge-loss CoCoA to tol=1e-8: 2000 rounds over processes
def test_multiclass_svc_and_ridge(client):
    X, y = _data(classes=3)
    Xd, yd = _spread(client, X, y)
    svc = DaskLinearSVC(C=0.1, **KW).fit(Xd, yd)
    ref = _alone(LinearSVC, C=0.1, loss="hinge").fit(X, y)
    # the hinge loss is not smooth: the dual gap bounds ||w - w*||^2 only through 1/lambda,
    # so the coefficients of two fits to the same gap agree more loosely than for logistic
    np.testing.assert_allclose(svc.coef_, ref.coef_, rtol=2e-2, atol=3e-3)
    assert svc.decision_function(Xd).compute().shape == (X.shape[0], 3)
    assert np.mean(svc.predict(Xd).compute() == ref.predict(X)) >= 0.99
    t = X[:, 0] * 2.0 + y
    td = client.persist(da.from_array(t, chunks=150))
    rid = DaskRidge(alpha=3.0, **KW).fit(Xd, td)
    rref = Ridge(alpha=3.0, **KW).fit(X, t)
    np.testing.assert_allclose(rid.coef_, rref.coef_, rtol=1e-5, atol=1e-6)
    cocoa = DaskRidge(alpha=3.0, solver="cocoa", **KW).fit(Xd, td)
    np.testing.assert_allclose(cocoa.coef_, _alone(Ridge, alpha=3.0).fit(X, t).coef_,
                               rtol=1e-3, atol=1e-4)


def test_multiclass_logistic_regression_is_the_multinomial_model(client):
    X, y = _data(classes=3)
    Xd, yd = _spread(client, X, y)
    clf = DaskLogisticRegression(C=0.5, **KW).fit(Xd, yd)
    ref = LogisticRegression(C=0.5, **KW).fit(X, y)  # multinomial, as scikit-learn's
    assert clf.estimator_._multinomial and ref._multinomial
    np.testing.assert_allclose(clf.coef_, ref.coef_, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(clf.intercept_, ref.intercept_, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(clf.predict_proba(X), ref.predict_proba(X), atol=1e-6)


def test_dataframe_input(client):
    dd = pytest.importorskip("dask.dataframe")
    pd = pytest.importorskip("pandas")
    X, y = _data()
    df = dd.from_pandas(pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])]),
                        npartitions=4)
    ys = dd.from_pandas(pd.Series(y), npartitions=4)
    clf = DaskLogisticRegression(C=0.5, **KW).fit(df, ys)
    ref = LogisticRegression(C=0.5, **KW).fit(X, y)
    np.testing.assert_allclose(clf.coef_, ref.coef_, rtol=1e-3, atol=1e-4)


def test_bad_input_is_named(client):
    X, y = _data()
    with pytest.raises(TypeError, match="X must be a dask array"):
        DaskLogisticRegression(client=client).fit(X, y)
    Xd, yd = _spread(client, X, y)
    with pytest.raises(ValueError, match="X has 1200 rows but y has 600"):
        DaskLogisticRegression(client=client).fit(Xd, yd[:600])
    with pytest.raises(TypeError, match="unexpected keyword argument 'comm'"):
        DaskLogisticRegression(comm=None)


def test_a_failing_rank_is_an_error_naming_it(client):
    """The estimator's own check fails on every rank (in the workers' processes), never a
    silent model: the client raises the ranks' error itself (as Dask re-raises a task's),
    its note naming the ranks and workers (here: a non-positive C)."""
    X, y = _data()
    Xd, yd = _spread(client, X, y)
    with pytest.raises(ValueError, match="C must be") as info:
        DaskLogisticRegression(C=-1.0).fit(Xd, yd)
    assert "raised on the Dask workers: rank 0 (worker tcp://" in info.value.__notes__[0]


def test_a_convergence_warning_on_the_workers_reaches_the_client(client):
    """Issue 32, item 4a: a fit that stops on max_iter warns on every rank (in the workers'
    processes); the client sees the warning once, same category and message."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    X, y = _data()
    Xd, yd = _spread(client, X, y)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        DaskLogisticRegression(C=0.5, tol=1e-12, max_iter=2, random_state=0).fit(Xd, yd)
    ours = [w for w in caught if issubclass(w.category, ConvergenceWarning)]
    assert len(ours) == 1, [str(w.message) for w in caught]
    with warnings.catch_warnings(record=True) as local:
        warnings.simplefilter("always")
        LogisticRegression(C=0.5, **KW).set_params(tol=1e-12, max_iter=2).fit(X, y)
    want = [w for w in local if issubclass(w.category, ConvergenceWarning)]
    assert ours[0].category is want[0].category
    assert str(ours[0].message).split()[:4] == str(want[0].message).split()[:4]


def _with_empty(client, X, y, sizes):
    """Dask arrays of the row partitions ``sizes`` (zeros: empty partitions)."""
    Xd = da.from_array(X, chunks=(tuple(sizes), -1))
    yd = da.from_array(y, chunks=(tuple(sizes),))
    return client.persist(Xd), client.persist(yd)


@pytest.mark.parametrize("sizes", [(300, 0, 300, 600), (0, 1200)])
def test_empty_partitions_fit(client, sizes):
    """Issue 32, item 4b: an empty partition (or a worker holding only empty ones) contributes
    nothing: the model is the one of the data without it."""
    X, y = _data()
    Xd, yd = _with_empty(client, X, y, sizes)
    clf = DaskLogisticRegression(C=0.5, **KW).fit(Xd, yd)
    ref = LogisticRegression(C=0.5, **KW).fit(X, y)
    np.testing.assert_allclose(clf.coef_, ref.coef_, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(clf.intercept_, ref.intercept_, rtol=1e-3, atol=1e-4)


def test_an_empty_dataframe_partition_fits(client):
    dd = pytest.importorskip("dask.dataframe")
    pd = pytest.importorskip("pandas")
    X, y = _data()
    df = dd.from_pandas(pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])]),
                        npartitions=4)
    ys = dd.from_pandas(pd.Series(y), npartitions=4)
    keep = df.index.map_partitions(lambda i: i >= 300, meta=("k", bool))
    df, ys = df[keep], ys[keep]  # the first partition (rows 0-299) is now empty
    clf = DaskLogisticRegression(C=0.5, **KW).fit(df, ys)
    ref = LogisticRegression(C=0.5, **KW).fit(X[300:], y[300:])
    np.testing.assert_allclose(clf.coef_, ref.coef_, rtol=1e-3, atol=1e-4)
