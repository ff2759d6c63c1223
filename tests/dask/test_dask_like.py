"""Issue 34: the Dask estimators behave like dask-ml's.

Lazy outputs (a dask array per method, one task per row block, computed only when asked),
``score`` computed on the cluster, ``feature_names_in_`` from a dask DataFrame with
scikit-learn's checks at predict, ``timeout=`` (no limit by default), ``clone`` /
``GridSearchCV`` / pickle with a live ``client``, the ranks' errors raised in the client, and
docstrings that list only the solvers that run.  One in-process LocalCluster (two workers)
for the module."""

import pickle
import re
import threading
import time
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

distributed = pytest.importorskip("distributed")
da = pytest.importorskip("dask.array")
dd = pytest.importorskip("dask.dataframe")
pd = pytest.importorskip("pandas")

from sklearn.base import clone  # noqa: E402
from sklearn.metrics import accuracy_score, r2_score  # noqa: E402
from sklearn.model_selection import GridSearchCV  # noqa: E402

from roofline.comm import CommTimeoutError, run_on_dask  # noqa: E402
from roofline.dask import DaskLinearSVC, DaskLogisticRegression, DaskRidge  # noqa: E402

KW = dict(tol=1e-8, max_iter=500, random_state=0)
COLS = [f"f{i}" for i in range(6)]


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=2, processes=False,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as c:
        yield c


def _data(n=600, d=6, seed=0, classes=2):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    w = rng.standard_normal((d, classes))
    y = (X @ w + 0.5 * rng.standard_normal((n, classes))).argmax(1)
    return X, y


def _dask(client, X, y, chunks=100):
    return (client.persist(da.from_array(X, chunks=(chunks, -1))),
            client.persist(da.from_array(y, chunks=chunks)))


def _frames(X, y, npartitions=3):
    return (dd.from_pandas(pd.DataFrame(X, columns=COLS), npartitions=npartitions),
            dd.from_pandas(pd.Series(y, name="y"), npartitions=npartitions))


@pytest.fixture(scope="module")
def fitted(client):
    X, y = _data(classes=3)
    Xd, yd = _dask(client, X, y)
    return DaskLogisticRegression(C=0.5, **KW).fit(Xd, yd), X, y


# -- lazy outputs ------------------------------------------------------------------------------
_CALLS = []


def _counted(block):
    """An identity on a block that records that it ran (the cluster is in this process)."""
    _CALLS.append(block.shape[0])
    return block


@pytest.mark.parametrize("method", ["predict", "predict_proba", "predict_log_proba",
                                    "decision_function"])
def test_methods_return_lazy_dask_arrays(fitted, method):
    """dask-ml's contract: a dask array whose blocks are the local estimator's output on the
    blocks of X; nothing of X is computed before ``compute()``."""
    clf, X, _ = fitted
    ref = getattr(clf.estimator_, method)(X)
    Xd = da.from_array(X, chunks=(150, -1)).map_blocks(_counted, dtype=X.dtype)
    _CALLS.clear()
    out = getattr(clf, method)(Xd)
    assert isinstance(out, da.Array) and _CALLS == []  # lazy
    assert out.dtype == ref.dtype and out.shape == ref.shape
    assert out.chunks[0] == (150,) * 4 and out.numblocks[1:] == (1,) * (ref.ndim - 1)
    assert type(out._meta) is np.ndarray and out._meta.ndim == ref.ndim
    got = out.compute()
    assert sorted(_CALLS) == [150] * 4
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
    # in-memory input: the in-memory output, as before
    assert isinstance(getattr(clf, method)(X), np.ndarray)


def test_a_dataframe_is_mapped_lazily(fitted):
    """A dask DataFrame gives a dask array of unknown block lengths, without a pass over the
    data (the partitions' lengths are not computed)."""
    clf, X, _ = fitted
    df = dd.from_pandas(pd.DataFrame(X), npartitions=3)
    df = df.map_partitions(_counted, meta=df._meta)
    _CALLS.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # fitted without feature names
        proba = clf.predict_proba(df)
    assert isinstance(proba, da.Array) and _CALLS == []
    assert np.isnan(proba.shape[0]) and proba.shape[1] == 3
    np.testing.assert_allclose(proba.compute(), clf.estimator_.predict_proba(X), atol=1e-12)


def test_sparse_and_empty_blocks(fitted):
    clf, X, _ = fitted
    Xs = da.from_array(X, chunks=(200, -1)).map_blocks(sp.csr_matrix, dtype=X.dtype)
    np.testing.assert_allclose(clf.decision_function(Xs).compute(),
                               clf.estimator_.decision_function(X), atol=1e-12)
    Xe = da.from_array(X, chunks=((300, 0, 300), (6,)))  # an empty row block
    pred = clf.predict(Xe)
    assert pred.chunks == ((300, 0, 300),)
    np.testing.assert_array_equal(pred.compute(), clf.estimator_.predict(X))


def _no_array(self, *args, **kwargs):
    raise AssertionError("a dask array was brought into the client as a whole")


def test_score_is_computed_on_the_cluster(client, fitted, monkeypatch):
    """dask-ml's ``score``: reduced on the cluster (the predictions never come to the client
    as an array: ``np.asarray`` of a dask array fails here), the value scikit-learn's."""
    monkeypatch.setattr(da.Array, "__array__", _no_array)
    clf, X, y = fitted
    Xd, yd = _dask(client, X, y)
    w = np.random.default_rng(1).uniform(0.1, 2.0, X.shape[0])
    pred = clf.estimator_.predict(X)
    s = clf.score(Xd, yd)
    assert isinstance(s, float) and s == pytest.approx(accuracy_score(y, pred), abs=1e-12)
    assert clf.score(Xd, y) == pytest.approx(s, abs=1e-12)  # an in-memory y
    sw = clf.score(Xd, yd, sample_weight=da.from_array(w, chunks=50))
    assert sw == pytest.approx(accuracy_score(y, pred, sample_weight=w), abs=1e-12)
    assert sw != pytest.approx(s, abs=1e-6)  # the weights counted
    df, ys = _frames(X, y)
    clf_df = DaskLogisticRegression(C=0.5, **KW).fit(df, ys)
    assert clf_df.score(df, ys) == pytest.approx(
        accuracy_score(y, clf_df.estimator_.predict(X)), abs=1e-12)
    # the regressor's R^2, with weights
    t = X @ np.arange(6.0) + np.random.default_rng(2).standard_normal(X.shape[0])
    td = da.from_array(t, chunks=100)
    rid = DaskRidge(alpha=2.0, **KW).fit(Xd, td)
    p = rid.estimator_.predict(X)
    assert rid.score(Xd, td) == pytest.approx(r2_score(t, p), abs=1e-12)
    assert rid.score(Xd, td, sample_weight=w) == pytest.approx(
        r2_score(t, p, sample_weight=w), abs=1e-12)


# -- feature names ------------------------------------------------------------------------------
def test_feature_names_of_a_dask_dataframe(client):
    X, y = _data()
    df, ys = _frames(X, y)
    clf = DaskLogisticRegression(C=0.5, **KW).fit(df, ys)
    np.testing.assert_array_equal(clf.feature_names_in_, COLS)
    assert clf.n_features_in_ == 6
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same columns: no warning at all
        got = clf.predict(df).compute()
        clf.predict(pd.DataFrame(X, columns=COLS))
        clf.predict_proba(df)
    np.testing.assert_array_equal(got, clf.estimator_.predict(X))
    # scikit-learn's semantics, naming this estimator
    with pytest.warns(UserWarning, match="X does not have valid feature names, but "
                                         "DaskLogisticRegression was fitted with feature names"):
        clf.predict(da.from_array(X, chunks=(200, -1)))
    with pytest.raises(ValueError, match="feature names should match"):
        clf.predict(df[COLS[::-1]])
    with pytest.raises(ValueError, match="X has 5 features, but DaskLogisticRegression is "
                                         "expecting 6 features"), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # its names are missing too
        clf.predict(da.from_array(X[:, :5], chunks=(200, -1)))
    # a refit on a dask array forgets the names
    Xd, yd = _dask(client, X, y)
    clf.fit(Xd, yd)
    assert not hasattr(clf, "feature_names_in_")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        clf.predict(Xd)


# -- timeout ------------------------------------------------------------------------------------
def _sleep(comm, seconds):
    time.sleep(seconds)
    return comm.rank


def test_no_job_limit_by_default(client):
    """A job longer than 3 x the peer wait runs to its end (it was cut at 3 x timeout)."""
    assert DaskLogisticRegression().timeout is None
    assert run_on_dask(client, _sleep, n=2, args=(2.5,), timeout=0.8) == [0, 1]


def test_a_finite_job_timeout_ends_the_job(client):
    t0 = time.monotonic()
    with pytest.raises(CommTimeoutError, match=r"job_timeout=0\.5 s; ranks \[0, 1\]"):
        run_on_dask(client, _sleep, n=2, args=(2.0,), timeout=30, job_timeout=0.5)
    assert time.monotonic() - t0 < 1.9  # the ranks' own 2 s not waited for


def test_the_estimators_timeout_is_named(client):
    X, y = _data()
    Xd, yd = _dask(client, X, y)
    with pytest.raises(TimeoutError, match=r"DaskLogisticRegression\.fit did not finish "
                                           r"within timeout=1e-06 s"):
        DaskLogisticRegression(timeout=1e-6, **KW).fit(Xd, yd)
    for bad in (0, -1.0, float("inf"), "soon"):
        with pytest.raises(ValueError, match="timeout must be None or"):
            DaskRidge(timeout=bad).fit(Xd, yd)
    assert DaskLogisticRegression(timeout=60, **KW).fit(Xd, yd).n_workers_ == 2


# -- clone, GridSearchCV, pickle -----------------------------------------------------------------
def test_clone_keeps_the_client_and_pickle_drops_it(client, fitted):
    clf = fitted[0]
    est = DaskLogisticRegression(C=0.25, client=client)
    twin = clone(est)
    assert twin.client is client and twin.get_params()["C"] == 0.25
    fit_twin = clone(clf.set_params(client=client))
    assert fit_twin.client is client and not hasattr(fit_twin, "coef_")
    back = pickle.loads(pickle.dumps(clf))
    assert back.client is None and clf.client is client  # the original keeps its client
    np.testing.assert_array_equal(back.coef_, clf.coef_)
    X = fitted[1]
    np.testing.assert_array_equal(back.predict(X), clf.predict(X))
    clf.set_params(client=None)
    # a stand-in for any client that does not pickle or copy
    lock = threading.Lock()
    odd = DaskRidge(alpha=3.0, client=lock)
    assert clone(odd).client is lock and pickle.loads(pickle.dumps(odd)).client is None


def test_grid_search_with_a_client(client):
    from roofline.learners import LogisticRegression

    X, y = _data()
    Xd, yd = _dask(client, X, y)
    grid = {"C": [0.001, 1.0]}
    gs = GridSearchCV(DaskLogisticRegression(client=client, **KW), grid, cv=2,
                      error_score="raise").fit(Xd, yd)
    ref = GridSearchCV(LogisticRegression(**KW), grid, cv=2).fit(X, y)
    assert gs.best_params_ == ref.best_params_
    assert gs.best_estimator_.client is client
    # the same folds, the same models (up to the solver's tolerance): at most one test
    # sample of 300 scored differently
    np.testing.assert_allclose(gs.cv_results_["mean_test_score"],
                               ref.cv_results_["mean_test_score"], atol=1 / 300 + 1e-12)
    np.testing.assert_allclose(gs.best_estimator_.coef_, ref.best_estimator_.coef_,
                               rtol=1e-4, atol=1e-5)


# -- errors and warnings in the client ----------------------------------------------------------
def test_a_ranks_error_is_raised_in_the_client_as_itself(client):
    X, y = _data()
    Xd, yd = _dask(client, X, y)
    with pytest.raises(ValueError, match="C must be positive") as info:
        DaskLogisticRegression(C=-1.0).fit(Xd, yd)
    assert re.search(r"raised on the Dask workers: rank \d \(worker ", str(info.value.__notes__))
    with pytest.raises(ValueError, match="penalty"):  # the registry's check, in the client
        DaskLogisticRegression(penalty="l1", solver="newton").fit(Xd, yd)


# -- the docstrings list what runs --------------------------------------------------------------
def _listed(cls):
    line = re.search(r"\n    solver : \{([^}]*)\}", cls.__doc__).group(1)
    return [s.strip().strip('"') for s in line.split(",")]


CASES = [(DaskLogisticRegression, s, {}) for s in _listed(DaskLogisticRegression)]
CASES += [(DaskLinearSVC, s, {"loss": "squared_hinge"} if s == "newton" else {})
          for s in _listed(DaskLinearSVC)]
CASES += [(DaskRidge, s, {}) for s in _listed(DaskRidge)]


@pytest.mark.slow
@pytest.mark.parametrize(("cls", "solver", "params"), CASES,
                         ids=[f"{c.__name__}-{s}" for c, s, _ in CASES])
def test_every_listed_solver_runs(client, cls, solver, params):
    X, y = _data(n=300)
    target = X @ np.arange(6.0) if cls is DaskRidge else y
    Xd, yd = _dask(client, X, target)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a ConvergenceWarning of the short runs
        est = cls(solver=solver, max_iter=20, **params).fit(Xd, yd)
    assert est.n_workers_ == 2 and np.all(np.isfinite(est.coef_))
    if solver != "auto":
        assert est.solver_ == solver
    score = est.score(Xd, yd)
    assert score > (0.9 if cls is DaskRidge else 0.8)


def test_the_lists_leave_out_the_solvers_that_do_not_run(client):
    from roofline.glm import solver_names

    X, y = _data(n=200)
    Xd, yd = _dask(client, X, y)
    for cls in (DaskLogisticRegression, DaskRidge):
        for name in set(solver_names(auto=False)) - set(_listed(cls)):
            with pytest.raises(ValueError, match=f"not solver='{name}'"):
                cls(solver=name).fit(Xd, yd)
