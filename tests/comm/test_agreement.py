"""Issue 32, item 4: collectives validate their arguments and check that the ranks agree
(operation, dtype, shape, plan, sequence number) on every backend alike; the error names the
ranks that disagree, never a mixed vector or raw bits summed."""

import os
import sys

import numpy as np
import pytest

from roofline.comm import CommError, MismatchError, run

MPI = pytest.param("mpi", marks=pytest.mark.skipif(
    not os.path.exists(os.path.join(os.path.dirname(sys.executable), "mpiexec")),
    reason="no mpiexec"))
BACKENDS = ["threads", "tcp", "disk", MPI]


def _ops_differ(comm):
    return comm.allreduce(np.arange(4.0), op="max" if comm.rank == 1 else "sum")


def _dtypes_differ(comm):
    x = np.arange(4, dtype=np.int64 if comm.rank == 1 else np.float64)
    return comm.allreduce(x)


def _shapes_differ(comm):
    return comm.allreduce(np.arange(4.0 + comm.rank))


def _skipped(comm):
    if comm.rank != 1:
        comm.barrier()
    return comm.allreduce(np.ones(3))


def _nan_max(comm):
    x = np.array([1.0, np.nan, 3.0]) if comm.rank == 0 else np.array([np.nan, 2.0, 1.0])
    return comm.allreduce(x, op="max")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [_ops_differ, _dtypes_differ, _shapes_differ, _skipped])
def test_ranks_that_disagree_are_an_error_naming_them(backend, fn):
    with pytest.raises(CommError, match="rank 1") as e:
        run(fn, 2, backend=backend, timeout=10)
    assert "mismatch" in str(e.value) or "disagree" in str(e.value)


@pytest.mark.parametrize("backend", BACKENDS)
def test_max_with_nan_is_nan_on_every_backend(backend):
    for got in run(_nan_max, 2, backend=backend, timeout=10):
        np.testing.assert_array_equal(got, [np.nan, np.nan, 3.0])


def test_mismatch_is_a_mismatch_error_in_threads():
    with pytest.raises(CommError) as e:
        run(_ops_differ, 2, backend="threads", timeout=10)
    assert isinstance(e.value.__cause__ or e.value, (MismatchError, CommError))


@pytest.mark.parametrize("bad, err", [
    (np.array([1.5, 2.0]), TypeError), (np.array(["1", "2"]), TypeError),
    (np.array([2 ** 63 - 1], dtype=np.int64), ValueError),
    (np.array([2 ** 64 - 1], dtype=np.uint64), ValueError)])
def test_sparse_indices_are_validated(bad, err):
    def fn(comm):
        return comm.sparse_allreduce(bad, np.ones(bad.size))

    with pytest.raises((CommError, err)) as e:
        run(fn, 2, backend="threads", timeout=10)
    assert (err.__name__ in str(e.value) or isinstance(e.value, err)) and "indices" in str(
        e.value)
    if bad.dtype == np.uint64:
        assert str(2 ** 64 - 1) in str(e.value) and "-1" not in str(e.value)


def test_a_dense_allreduce_of_strings_is_refused():
    def fn(comm):
        return comm.allreduce(np.array(["a", "b"]))

    with pytest.raises((CommError, TypeError), match="x must be an array of numbers"):
        run(fn, 2, backend="threads", timeout=10)
