"""Out-of-core CoCoA+ (``fit_glm_stream(comm=)``, issue 35): each rank streams its own examples;
the model equals the single-process stream's and the in-memory distributed fit's optimum."""

import os

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from roofline.comm import run
from roofline.datasources import FileSource, MatSource, write_shards
from roofline.glm import fit_glm, fit_glm_stream
from tests._helpers import make_data

KW = dict(alpha=1e-2, tol=1e-9, max_iter=1000, random_state=0)


def _data(task="classification"):
    X, _, y = make_data(n=400, d=20, density=0.3, seed=1, task=task)
    return X, y


def _mine(comm, n):
    return np.array_split(np.arange(n), comm.size)[comm.rank]


def _rank_fit(comm, loss, kw):
    X, y = _data("regression" if loss == "squared" else "classification")
    mine = _mine(comm, X.shape[1])
    res = fit_glm_stream(MatSource(X[:, mine], y[mine], batch_size=45), loss=loss, comm=comm,
                            **KW, **kw)
    return res.coef, res.intercept, res.converged, res.n_iter, res.objective[-1], res.info


def _references(loss, K):
    X, y = _data("regression" if loss == "squared" else "classification")
    single = fit_glm_stream(MatSource(X, y, batch_size=45), loss=loss, **KW)
    dist = fit_glm(X, y, loss=loss, solver="cocoa", dual=True, n_workers=K, **KW)
    assert single.converged and dist.converged
    return single, dist


def _check(out, single, dist):
    for coef, b, conv, n_iter, obj, _ in out:
        assert conv
        np.testing.assert_array_equal(coef, out[0][0])  # every rank: the same model
        assert b == out[0][1] and n_iter == out[0][3]
        for ref in (single, dist):
            assert abs(obj - ref.objective[-1]) <= 1e-7 * abs(ref.objective[-1])
            np.testing.assert_allclose(coef, ref.coef, rtol=1e-3, atol=1e-4)
            assert b == pytest.approx(ref.intercept, rel=1e-3, abs=1e-4)


@pytest.mark.slow  # ~30 s here: two fresh processes compile the kernels
@pytest.mark.multiprocess
def test_two_processes_over_tcp_reach_the_single_process_optimum():
    single, dist = _references("logistic", 2)
    out = run(_rank_fit, 2, backend="tcp", args=("logistic", {}), timeout=60)
    _check(out, single, dist)
    assert out[0][5]["n_ranks"] == 2
    assert out[0][5]["sparse_allreduce"]  # processes: the touched features only


def test_two_threads_reach_the_single_process_optimum_of_ridge():
    single, dist = _references("squared", 2)
    out = run(_rank_fit, 2, backend="threads", args=("squared", dict(cache="memory")),
              timeout=60)
    _check(out, single, dist)


def test_three_ranks_with_the_dual_state_on_disk(tmp_path):
    single, dist = _references("logistic", 3)
    out = run(_rank_fit, 3, backend="threads",
              args=("logistic", dict(dual_on_disk=True, workdir=str(tmp_path))), timeout=60)
    _check(out, single, dist)
    assert not out[0][5]["sparse_allreduce"]  # threads: the dense shared-memory sum
    for r in range(3):  # each rank its own directory of chunks and duals
        files = sorted(os.listdir(tmp_path / f"rank{r}"))
        assert "chunk_0.bin" in files and "dual_0.npy" in files


def _shard_fit(comm, directory):
    src = FileSource("part-{i}.npz", dirs=directory, rank=comm.rank, size=comm.size,
                     batch_size=45)
    res = fit_glm_stream(src, loss="logistic", comm=comm, **KW)
    return res.coef, res.intercept, res.converged, res.n_iter, res.objective[-1], res.info


def test_each_rank_streams_its_own_shards(tmp_path):
    """Shard files read with ``rank`` / ``size``: rank r reads shards r, r + K, ..."""
    X, y = _data()
    write_shards(MatSource(X, y, batch_size=100), "part-{i}.npz", dirs=str(tmp_path),
                 examples_per_shard=50)
    single, dist = _references("logistic", 3)
    out = run(_shard_fit, 3, backend="threads", args=(str(tmp_path),), timeout=60)
    _check(out, single, dist)
    assert [o[5]["n_chunks"] for o in out] == [4, 4, 3]  # 150, 150, 100 examples by 45


def test_ranks_agree_bit_for_bit_with_one_rank_of_one():
    """``comm=`` of one rank is the plain run."""
    X, y = _data()
    kw = dict(KW, max_iter=6)
    with pytest.warns(ConvergenceWarning):
        plain = fit_glm_stream(MatSource(X, y, batch_size=45), loss="hinge", **kw)
    with pytest.warns(ConvergenceWarning):
        one = run(lambda comm: fit_glm_stream(MatSource(X, y, batch_size=45), loss="hinge",
                                                 comm=comm, **kw), 1, backend="threads")[0]
    np.testing.assert_array_equal(one.coef, plain.coef)
    np.testing.assert_array_equal(one.objective, plain.objective)


def _bad_rank_fit(comm):
    X, y = _data()
    mine = _mine(comm, X.shape[1])
    Xk = X[:, mine]
    if comm.rank == 1:  # this rank's chunks have a feature too many
        Xk = Xk.tolil()
        Xk.resize(X.shape[0] + 1, Xk.shape[1])
        Xk = Xk.tocsc()
    src = MatSource(Xk, y[mine], batch_size=45)
    src.n_features = X.shape[0]
    return fit_glm_stream(src, loss="logistic", comm=comm, **KW)


def test_a_bad_chunk_on_one_rank_is_named_on_every_rank():
    errors = run(_catching, 2, backend="threads")
    assert "rank 1: chunk 0 of MatSource" in errors[1]
    assert "has 21 features, but the source declares n_features=20" in errors[1]
    assert "the input of rank 1 failed its checks" in errors[0]


def _catching(comm):
    try:
        _bad_rank_fit(comm)
    except ValueError as e:
        return str(e)
    return "no error"
