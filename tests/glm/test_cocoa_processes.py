"""CoCoA, hierarchical CoCoA and pure-block across real processes (issue 17): each rank holds
its own shard and talks through roofline.comm; the result equals the in-process run's."""

import numpy as np
import pytest

from roofline.comm import run
from roofline.glm import fit_glm
from tests._helpers import make_data, needs_mpi

TOL = 1e-9  # both runs go to a relative duality gap of 1e-9: coefficients agree to ~1e-4
KW = dict(alpha=1e-2, tol=TOL, max_iter=2000, random_state=0)


def _data(task="classification"):
    X, _, y = make_data(n=400, d=20, density=0.3, seed=1, task=task)
    return X, y


def _rank_fit(comm, solver, dual, loss, n_workers, blocks=None):
    X, y = _data("regression" if loss == "squared" else "classification")
    K = comm.size
    if dual or solver == "pure-block":  # this rank's examples
        mine = np.array_split(np.arange(X.shape[1]), K)[comm.rank]
        Xk, yk = X[:, mine], y[mine]
    else:  # this rank's block of features
        mine = np.array_split(np.arange(X.shape[0]), K)[comm.rank]
        Xk, yk = X[mine], y
    res = fit_glm(Xk, yk, loss=loss, solver=solver, dual=dual, comm=comm,
                     n_workers=n_workers, blocks=blocks, **KW)
    return res.coef, res.intercept, res.converged, res.n_iter, res.objective[-1]


CASES = [
    ("cocoa", True, "logistic", None),
    ("cocoa", False, "squared", None),
    ("hcocoa", True, "logistic", 2),  # 2 threads on each of the K processes
    ("pure-block", False, "logistic", None),
]


@pytest.mark.parametrize("backend,K", [("tcp", 2), ("tcp", 4), ("threads", 3),
                                       pytest.param("mpi", 2, marks=needs_mpi)])
@pytest.mark.parametrize("solver,dual,loss,per_node", CASES)
def test_across_ranks_equals_the_in_process_run(backend, K, solver, dual, loss, per_node):
    X, y = _data("regression" if loss == "squared" else "classification")
    blocks = np.arange(X.shape[0]) if solver == "pure-block" else None  # one feature a block
    n_workers = None if per_node is None else K * per_node
    ref = fit_glm(X, y, loss=loss, solver=solver, dual=dual, blocks=blocks,
                     n_workers=K if n_workers is None else n_workers,
                     n_nodes=K if solver == "hcocoa" else None, **KW)
    assert ref.converged
    out = run(_rank_fit, K, backend=backend, args=(solver, dual, loss, n_workers, blocks),
              timeout=60)
    for coef, b, conv, n_iter, obj in out:
        assert conv
        np.testing.assert_array_equal(coef, out[0][0])  # every rank: the same model
        assert b == out[0][1] and n_iter == out[0][3]
        assert abs(obj - ref.objective[-1]) <= 1e-7 * abs(ref.objective[-1])
        np.testing.assert_allclose(coef, ref.coef, rtol=1e-3, atol=1e-4)
        assert b == pytest.approx(ref.intercept, rel=1e-3, abs=1e-4)


def test_the_same_result_bit_for_bit_in_two_runs():
    a = run(_rank_fit, 2, backend="tcp", args=("hcocoa", True, "logistic", 4), timeout=60)
    b = run(_rank_fit, 2, backend="tcp", args=("hcocoa", True, "logistic", 4), timeout=60)
    np.testing.assert_array_equal(a[0][0], b[0][0])
    assert a[0][3] == b[0][3]


def _empty_rank_fit(comm):
    X, y = _data()
    mine = np.arange(0)  # rank 0 holds no examples
    if comm.rank:
        mine = np.array_split(np.arange(X.shape[1]), comm.size - 1)[comm.rank - 1]
    res = fit_glm(X[:, mine], y[mine], loss="logistic", solver="cocoa", dual=True, comm=comm,
                     **KW)
    return res.coef, res.converged


def test_a_rank_with_no_examples():
    X, y = _data()
    # CoCoA's dual regularises the intercept (a constant feature): so does the reference
    ref = fit_glm(X, y, loss="logistic", solver="scd", dual=True, intercept_scaling=1.0, **KW)
    out = run(_empty_rank_fit, 3, backend="tcp", timeout=60)
    for coef, conv in out:
        assert conv
        np.testing.assert_allclose(coef, ref.coef, rtol=1e-3, atol=1e-4)


def test_comm_is_refused_by_the_single_process_solvers():
    X, y = _data()
    with pytest.raises(ValueError, match="comm= runs cocoa, hcocoa, pure-block or newton"):
        fit_glm(X, y, loss="logistic", alpha=1e-2, solver="scd", comm=object())


def _estimator_fit(comm, solver):
    from roofline.learners import LogisticRegression

    X, _, y = make_data(n=400, d=20, density=0.3, seed=1, task="classification")
    mine = np.array_split(np.arange(X.shape[1]), comm.size)[comm.rank]
    Xs = X.T.tocsr()[mine]
    est = LogisticRegression(C=0.5, solver=solver, tol=1e-9, max_iter=2000, random_state=0,
                             comm=comm).fit(Xs, y[mine])
    return est.coef_, est.intercept_, est.classes_


def test_estimators_take_comm():
    from roofline.learners import LogisticRegression

    X, _, y = make_data(n=400, d=20, density=0.3, seed=1, task="classification")
    ref = fit_glm(X, y, loss="logistic", alpha=1 / (0.5 * 400), solver="scd", dual=True,
                     tol=1e-9, max_iter=2000, intercept_scaling=1.0)
    out = run(_estimator_fit, 2, backend="tcp", args=("cocoa",), timeout=60)
    for coef, b, classes in out:
        np.testing.assert_allclose(coef.ravel(), ref.coef, rtol=1e-3, atol=1e-4)
        assert b[0] == pytest.approx(ref.intercept, rel=1e-3, abs=1e-4)
        np.testing.assert_array_equal(classes, [0, 1])
    with pytest.raises(ValueError, match="comm= needs solver in"):
        LogisticRegression(solver="lbfgs", comm=object()).fit(X.T.tocsr(), y)


def _primal_with_example_shards(comm):
    X, y = _data()
    mine = np.array_split(np.arange(X.shape[1]), comm.size)[comm.rank]
    return fit_glm(X[:, mine], y[mine], loss="logistic", solver="cocoa", dual=False,
                      comm=comm, **KW)


def test_the_primal_given_example_shards_is_an_error_not_a_wrong_model():
    """The primal shards features; example shards would train a wrong model silently."""
    with pytest.raises(ValueError, match="every rank must hold all the examples.*dual=True"):
        run(_primal_with_example_shards, 2, backend="threads", timeout=30)
