"""Issue 32, item 4: collectives validate their arguments and check that the ranks agree
(operation, dtype, shape, plan, sequence number) on every backend alike; the error names the
ranks that disagree, never a mixed vector or raw bits summed.

``"inprocess"`` is the CD workers' :class:`~roofline.comm.InProcessGroup` (threads, a
shared-memory dense all-reduce beside Kylix over queues): it checks the same header (issue 32,
item 1)."""

import os
import sys
import time

import numpy as np
import pytest

from roofline.comm import CommError, InProcessGroup, MismatchError, run, run_in_threads

MPI = pytest.param("mpi", marks=pytest.mark.skipif(
    not os.path.exists(os.path.join(os.path.dirname(sys.executable), "mpiexec")),
    reason="no mpiexec"))
BACKENDS = ["threads", "inprocess", "tcp", "disk", MPI]
THREADS = ["threads", "inprocess"]


def _run(fn, n, backend, timeout=10):
    """``run(fn, n, backend=)``, or ``fn`` on the ranks of an :class:`InProcessGroup` for
    ``backend="inprocess"``."""
    if backend != "inprocess":
        return run(fn, n, backend=backend, timeout=timeout)
    group = InProcessGroup(n, timeout=timeout, name="agreement")
    return run_in_threads(lambda r: fn(group.communicator(r)), n, [group])


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


def _skipped_allreduce(comm):
    if comm.rank != 1:
        comm.allreduce(np.ones(3))
    return comm.allreduce(np.ones(3), op="max")


def _skipped_split(comm):
    if comm.rank != 1:
        comm.split(0)
    return comm.allreduce(np.ones(3))


def _reshaped(comm):
    return comm.allreduce(np.zeros((2, 3)) if comm.rank == 0 else np.zeros((3, 2)))


def _sparse_after_dense(comm):
    if comm.rank != 1:
        comm.allreduce(np.ones(3))
    return comm.sparse_allreduce(np.arange(3), np.ones(3))


def _nan_max(comm):
    x = np.array([1.0, np.nan, 3.0]) if comm.rank == 0 else np.array([np.nan, 2.0, 1.0])
    return comm.allreduce(x, op="max")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [_ops_differ, _dtypes_differ, _shapes_differ, _skipped,
                                _skipped_allreduce, _skipped_split, _reshaped,
                                _sparse_after_dense])
def test_ranks_that_disagree_are_an_error_naming_them(backend, fn):
    t0 = time.monotonic()
    with pytest.raises(CommError, match="rank 1") as e:
        _run(fn, 2, backend, timeout=10)
    assert "mismatch" in str(e.value) or "disagree" in str(e.value)
    assert time.monotonic() - t0 < 8, "found by a timeout, not by the header check"


@pytest.mark.parametrize("backend", BACKENDS)
def test_max_with_nan_is_nan_on_every_backend(backend):
    for got in _run(_nan_max, 2, backend, timeout=10):
        np.testing.assert_array_equal(got, [np.nan, np.nan, 3.0])


@pytest.mark.parametrize("backend", THREADS)
@pytest.mark.parametrize("fn", [_ops_differ, _dtypes_differ, _skipped, _skipped_allreduce])
def test_mismatch_is_a_mismatch_error_in_threads(backend, fn):
    with pytest.raises(MismatchError, match=r"collective mismatch: ranks 0 and 1 disagree") as e:
        _run(fn, 2, backend, timeout=10)
    assert sorted(e.value.ranks) == [0, 1]


def test_inprocess_dtypes_of_the_same_size_are_a_mismatch():
    """int64 and float64 (8 bytes each) would sum silently in shared memory: the dtype is
    checked, and the message says which each rank sent."""
    with pytest.raises(MismatchError, match=r"rank 1 (is )?in collective #0: "
                                            r"allreduce\(op='sum', dtype <i8"):
        _run(_dtypes_differ, 2, "inprocess", timeout=10)


def test_inprocess_group_agrees_across_its_paths_and_splits():
    """Dense (shared memory), sparse and object collectives interleaved on an in-process group
    and its split sub-groups, in step on every rank: the header checks never misfire."""
    def fn(comm):
        out = [comm.allreduce(np.full(3, comm.rank + 1.0))]
        out.append(comm.sparse_allreduce(np.arange(comm.rank, comm.rank + 3), np.ones(3)))
        out.append(comm.allgather(comm.rank))
        sub = comm.split(comm.rank % 2)
        out.append(sub.allreduce(np.array([comm.rank], dtype=np.int64)))
        out.append(comm.allreduce(np.ones(2), op="max"))
        comm.barrier()
        return out

    got = _run(fn, 4, "inprocess", timeout=10)
    for r, out in enumerate(got):
        np.testing.assert_array_equal(out[0], [10.0, 10.0, 10.0])
        np.testing.assert_array_equal(out[1], [1, 2, 3, 3, 2, 1][r:r + 3])
        assert out[2] == [0, 1, 2, 3]
        np.testing.assert_array_equal(out[3], [2] if r % 2 == 0 else [4])
        np.testing.assert_array_equal(out[4], [1.0, 1.0])


@pytest.mark.parametrize("backend", THREADS)
@pytest.mark.parametrize("bad, err", [
    (np.array([1.5, 2.0]), TypeError), (np.array(["1", "2"]), TypeError),
    (np.array([2 ** 63 - 1], dtype=np.int64), ValueError),
    (np.array([2 ** 64 - 1], dtype=np.uint64), ValueError)])
def test_sparse_indices_are_validated(backend, bad, err):
    def fn(comm):
        return comm.sparse_allreduce(bad, np.ones(bad.size))

    with pytest.raises((CommError, err)) as e:
        _run(fn, 2, backend, timeout=10)
    assert (err.__name__ in str(e.value) or isinstance(e.value, err)) and "indices" in str(
        e.value)
    if bad.dtype == np.uint64:
        assert str(2 ** 64 - 1) in str(e.value) and "-1" not in str(e.value)


@pytest.mark.parametrize("backend", THREADS)
def test_a_dense_allreduce_of_strings_is_refused(backend):
    def fn(comm):
        return comm.allreduce(np.array(["a", "b"]))

    with pytest.raises((CommError, TypeError), match="x must be an array of numbers"):
        _run(fn, 2, backend, timeout=10)
