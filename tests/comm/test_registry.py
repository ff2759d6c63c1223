"""The backend registry (comm/_registry.py): run() and from_environment() choose from it, its
error messages list its rows, and a new transport takes one file and one row."""

import collections
import threading

import numpy as np
import pytest

from roofline.comm import (
    CommTimeoutError,
    KylixCommunicator,
    PeerError,
    backends,
    from_environment,
    get_backend,
    register_backend,
    run,
)
from roofline.comm._factories import kylix_from_transport, kylix_in_threads
from roofline.comm._registry import _BACKENDS
from roofline.comm._transport import PollingTransport

BUILT_IN = ("threads", "tcp", "mpi", "disk", "dask")


@pytest.fixture
def registry():
    """The registry, restored after the test."""
    saved = dict(_BACKENDS)
    yield _BACKENDS
    _BACKENDS.clear()
    _BACKENDS.update(saved)


# -- a transport in one file: what a new backend takes -----------------------------------------
class DictGroup:
    """``size`` ranks of this process exchanging messages through one dict of deques."""

    def __init__(self, size, timeout=5.0):
        self.size, self.timeout = size, timeout
        self.cv = threading.Condition()
        self.boxes = collections.defaultdict(collections.deque)
        self.arrivals, self.aborted = 0, None

    def transport(self, rank):
        return DictTransport(self, rank)

    def abort(self, reason="aborted"):
        with self.cv:
            self.aborted = reason
            self.arrivals += 1
            self.cv.notify_all()


class DictTransport(PollingTransport):
    def __init__(self, group, rank):
        self.group, self.rank, self.size, self.timeout = group, rank, group.size, group.timeout
        self._cv = group.cv

    def send(self, peer, tag, payload, layer=0xFFFF):
        bufs = payload if isinstance(payload, (list, tuple)) else [payload]
        with self._cv:
            self.group.boxes[(self.rank, peer, tag)].append(b"".join(bufs))
            self.group.arrivals += 1
            self._cv.notify_all()

    def try_recv(self, peer, tag):
        with self._cv:
            box = self.group.boxes.get((peer, self.rank, tag))
            if box:
                return box.popleft()
            if self.group.aborted is not None:
                raise PeerError(f"rank {self.rank}: {self.group.aborted}", peer)
            return None

    def _arrival_state(self):
        return self.group.arrivals, self.group.aborted is not None


def _sparse_sums(comm):
    rng = np.random.default_rng(comm.rank)
    idx = np.unique(rng.zipf(1.3, 400) % 3000).astype(np.int64)
    return comm.backend, comm.sparse_allreduce(idx, rng.normal(size=idx.size)), \
        comm.allreduce(np.arange(5.0) * (comm.rank + 1))


def test_the_built_in_rows():
    assert backends() == BUILT_IN
    assert backends(runnable=True) == BUILT_IN
    assert backends(replication=True) == ("tcp",)
    assert get_backend("mpi").requires == ("mpi4py",)
    assert get_backend("dask").requires == ("distributed",)
    assert get_backend("threads").available() and get_backend("tcp").detect is not None


def test_errors_list_the_rows(registry):
    with pytest.raises(ValueError, match="backend must be 'threads', 'tcp', 'mpi', 'disk' or "
                                         "'dask', got 'nope'"):
        run(_sparse_sums, 2, backend="nope")
    with pytest.raises(ValueError, match="replication is available with backend='tcp', not "
                                         "'threads'"):
        run(_sparse_sums, 2, backend="threads", replication=2)
    register_backend("dicts", run=kylix_in_threads(DictGroup, "dicts"))
    with pytest.raises(ValueError, match="'disk', 'dask' or 'dicts', got 'nope'"):
        run(_sparse_sums, 2, backend="nope")
    with pytest.raises(ValueError, match="'dask' or 'dicts', got 'nope'"):
        get_backend("nope")


def test_a_new_transport_is_one_file_and_one_row(registry):
    register_backend("dicts", run=kylix_in_threads(DictGroup, "dicts"), summary="dicts")
    assert backends()[-1] == "dicts"
    got = run(_sparse_sums, 4, backend="dicts", timeout=10)
    want = run(_sparse_sums, 4, backend="threads", timeout=10)
    assert [g[0] for g in got] == ["dicts"] * 4
    for (_, s, d), (_, s2, d2) in zip(got, want, strict=True):
        assert s.tobytes() == s2.tobytes() and d.tobytes() == d2.tobytes()  # bit for bit


def _fails_on_rank_2(comm):
    if comm.rank == 2:
        raise ValueError("rank 2 fails")
    return comm.allreduce(np.ones(3))


def test_a_new_transport_aborts_and_times_out_like_the_others(registry):
    register_backend("dicts", run=kylix_in_threads(DictGroup, "dicts"))
    with pytest.raises(ValueError, match="rank 2 fails"):
        run(_fails_on_rank_2, 3, backend="dicts", timeout=10)
    t = DictGroup(2, timeout=0.2).transport(0)
    with pytest.raises(CommTimeoutError, match="no message from rank 1 within 0.2 s") as e:
        t.recv(1, 7)
    assert e.value.peer == 1


def test_from_environment_asks_the_rows_in_order(registry, monkeypatch):
    groups = {}

    def transport(env, timeout):
        g = groups.setdefault("g", DictGroup(2, timeout=timeout or 5.0))
        return g.transport(int(env["DICTS_RANK"]))

    register_backend("dicts", detect=lambda env: "DICTS_RANK" in env,
                     from_environment=kylix_from_transport(transport, "dicts"))
    for var in ("ROOFLINE_COORD", "PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE",
                "MPI_LOCALNRANKS"):
        monkeypatch.delenv(var, raising=False)
    assert from_environment().backend == "single"
    monkeypatch.setenv("DICTS_RANK", "0")
    comm = from_environment(timeout=1.0)
    assert isinstance(comm, KylixCommunicator)
    assert (comm.backend, comm.rank, comm.size) == ("dicts", 0, 2)
    monkeypatch.setenv("DICTS_RANK", "1")
    groups.clear()
    replicated = from_environment(timeout=1.0, replication=2)
    assert (replicated.rank, replicated.size) == (0, 1)  # ranks 0 and 1: one node
    assert get_backend("dicts").run is None and "dicts" not in backends(runnable=True)


def test_availability_is_checked_without_importing(registry):
    row = register_backend("absent", run=kylix_in_threads(DictGroup, "absent"),
                           requires=("roofline_no_such_package",))
    assert not row.available()
    assert "absent" in backends() and "absent" not in backends(available=True)


def test_register_backend_checks_its_row(registry):
    runner = kylix_in_threads(DictGroup, "dicts")
    with pytest.raises(ValueError, match="already registered"):
        register_backend("threads", run=runner)
    with pytest.raises(ValueError, match="needs run= or from_environment="):
        register_backend("dicts")
    with pytest.raises(ValueError, match="go together"):
        register_backend("dicts", run=runner, detect=lambda env: False)
    with pytest.raises(TypeError, match="must be callable"):
        register_backend("dicts", run="not a function")
    with pytest.raises(ValueError, match="non-empty name"):
        register_backend("", run=runner)
    row = register_backend("threads", run=runner, replace=True)
    assert backends()[0] == "threads" and get_backend("threads") is row
