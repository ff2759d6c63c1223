"""``random_state=None`` over ``comm=``: one seed per job, agreed by every process (replicas
included), so that a fit's iterates do not depend on which process computes them (issue 32)."""

import functools

import numpy as np
import pytest

from roofline.comm import run
from roofline.glm import fit_glm, pure_blocks

N, D = 600, 40


def _data():
    rng = np.random.default_rng(3)
    import scipy.sparse as sp

    X = sp.random(D, N, density=0.2, format="csc", random_state=4)
    y = np.where(X.T @ rng.standard_normal(D) > 0, 1.0, -1.0)
    return X, y


def _fit(comm, solver, random_state=None):
    X, y = _data()
    mine = np.array_split(np.arange(N), comm.size)[comm.rank]
    # a few rounds only: the order of the coordinates still shows in the iterate
    res = fit_glm(X[:, mine], y[mine], loss="logistic", alpha=1e-2, solver=solver, comm=comm,
                  dual=True, max_iter=2, tol=1e-12, random_state=random_state)
    return res.coef


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("solver", ["cocoa", "hcocoa"])
def test_no_random_state_is_one_seed_per_job(solver):
    work = functools.partial(_fit, solver=solver)
    first = run(work, 2, backend="threads", timeout=60)
    second = run(work, 2, backend="threads", timeout=60)
    np.testing.assert_array_equal(first[0], first[1])
    # two jobs on the same data agree too: the seed is the data's, not a process's draw
    np.testing.assert_array_equal(first[0], second[0])
    # and it is a real seed: another seed gives another iterate after two rounds
    other = run(functools.partial(_fit, solver=solver, random_state=12345), 2,
                backend="threads", timeout=60)
    assert not np.array_equal(first[0], other[0])


def _fit_shard(comm, solver, shards, dual=True, max_iter=2):
    X, y = _data()
    if dual or solver == "pure-block":
        mine = shards[comm.rank]
        Xr, yr = X[:, mine], y[mine]
    else:  # the primal shares out the features: every rank holds every example
        Xr, yr = X.tocsr()[shards[comm.rank]].tocsc(), y
    extra = {"blocks": pure_blocks(X)} if solver == "pure-block" else {}
    res = fit_glm(Xr, yr, loss="logistic", alpha=1e-2, solver=solver, comm=comm, dual=dual,
                  max_iter=max_iter, tol=1e-12, random_state=77,
                  penalty="l2" if dual or solver == "pure-block" else "l1", **extra)
    return res.coef, res.n_iter, shards[comm.rank]


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("solver, dual, K", [("cocoa", True, 2), ("cocoa", True, 3),
                                             ("hcocoa", True, 2), ("cocoa", False, 2),
                                             ("pure-block", False, 2)])
def test_same_random_state_same_iterates_in_process_and_over_comm(solver, dual, K):
    """``fit_glm(n_workers=K, random_state=s)`` in one process and the same fit over ``comm=``
    with K ranks, rank r holding ``worker_shards(...)[r]``, take the same steps (pure-block:
    given the same blocks; over comm= it otherwise takes rank 0's greedy blocks)."""
    from roofline.glm import worker_shards

    X, y = _data()
    penalty = "l2" if dual or solver == "pure-block" else "l1"
    local = fit_glm(X, y, loss="logistic", alpha=1e-2, solver=solver, n_workers=K, dual=dual,
                    max_iter=2, tol=1e-12, random_state=77, penalty=penalty,
                    **({"n_nodes": K} if solver == "hcocoa" else {}),
                    **({"blocks": pure_blocks(X)} if solver == "pure-block" else {}))
    by = "features" if not dual and solver != "pure-block" else "examples"
    shards = worker_shards(D if by == "features" else N, K, random_state=77)
    assert sorted(np.concatenate(shards).tolist()) == list(range(D if by == "features" else N))
    out = run(functools.partial(_fit_shard, solver=solver, shards=shards, dual=dual), K,
              backend="threads", timeout=60)
    coef = out[0][0]
    if by == "features":  # over comm=, the primal's coef stacks the ranks' features in order
        coef = np.empty_like(coef)
        coef[np.concatenate(shards)] = out[0][0]
    np.testing.assert_allclose(coef, local.coef, rtol=1e-10, atol=1e-13)
    assert out[0][1] == local.n_iter


def test_worker_shards_checks_its_arguments():
    from roofline.glm import worker_shards

    with pytest.raises(ValueError, match="n_workers"):
        worker_shards(10, 0)
    with pytest.raises(ValueError, match="n_workers"):
        worker_shards(3, 4)
    a = worker_shards(10, 3, random_state=5)
    b = worker_shards(10, 3, random_state=5)
    assert all(np.array_equal(p, q) for p, q in zip(a, b, strict=True))
    assert [len(p) for p in a] == [4, 3, 3]


@pytest.mark.multiprocess
@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_same_iterates_over_tcp_processes():
    from roofline.glm import worker_shards

    X, y = _data()
    local = fit_glm(X, y, loss="logistic", alpha=1e-2, solver="cocoa", n_workers=2, dual=True,
                    max_iter=2, tol=1e-12, random_state=77)
    shards = worker_shards(N, 2, random_state=77)
    out = run(functools.partial(_fit_shard, solver="cocoa", shards=shards), 2, backend="tcp",
              timeout=120)
    np.testing.assert_allclose(out[1][0], local.coef, rtol=1e-10, atol=1e-13)
