"""The in-process backend: ranks are threads of this process.

Two pieces:

* :class:`QueueGroup` / :class:`QueueTransport`: a :class:`~roofline.comm.Transport` whose
  messages are byte copies put on per-(sender, receiver, tag) queues.  A
  :class:`~roofline.comm.KylixCommunicator` over it runs the same butterfly, in the same
  order, as over TCP or MPI, so its results are bit-identical to theirs.
* :class:`InProcessGroup` / :class:`InProcessCommunicator`: the CD workers' group, whose dense
  all-reduce is one shared-memory reduction in rank order computed by the last rank to arrive
  (``O(size * len(x))`` in all, ``O(len(x))`` per rank); its other collectives go through
  Kylix over a :class:`QueueGroup`.

The numba kernels release the GIL, so worker threads really run in parallel.
"""

from __future__ import annotations

import collections
import logging
import threading
import time

import numpy as np

from ._base import CommTimeoutError, Communicator, PeerError, Transport, as_host
from ._kylix import KylixCommunicator

__all__ = [
    "InProcessCommunicator",
    "InProcessGroup",
    "QueueGroup",
    "QueueTransport",
    "run_in_threads",
]

logger = logging.getLogger(__name__)


class QueueGroup:
    """``size`` in-process ranks exchanging byte messages (one :class:`QueueTransport` each).

    Parameters
    ----------
    size : int
    timeout : float
        Seconds a receive waits before :class:`~roofline.comm.CommTimeoutError`.
    """

    def __init__(self, size: int, timeout: float = 600.0):
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        self.size = int(size)
        self.timeout = float(timeout)
        self._cv = threading.Condition()
        self._queues = collections.defaultdict(collections.deque)
        self._aborted = None
        self._arrivals = 0

    def transport(self, rank: int) -> QueueTransport:
        """The transport of rank ``rank``.

        Parameters
        ----------
        rank : int
            ``0 <= rank < size``.

        Returns
        -------
        QueueTransport
            A new transport of that rank over the group's queues.
        """
        return QueueTransport(self, rank)

    def abort(self, reason: str = "aborted", peer: int | None = None):
        """Wake every waiting rank with a :class:`~roofline.comm.PeerError`.

        Every later receive of the group fails the same way.

        Parameters
        ----------
        reason : str
            The error's message.
        peer : int, optional
            The rank at fault, carried by the error, when known.
        """
        with self._cv:
            self._aborted = (reason, peer)
            self._arrivals += 1
            self._cv.notify_all()


class QueueTransport(Transport):
    """One rank of a :class:`QueueGroup`.

    Parameters
    ----------
    group : QueueGroup
        The group.
    rank : int
        This transport's rank, ``0 <= rank < group.size``.

    Raises
    ------
    ValueError
        ``rank`` outside the group.
    """

    backend = "threads"
    shares_process = True

    def __init__(self, group: QueueGroup, rank: int):
        if not 0 <= rank < group.size:
            raise ValueError(f"rank {rank} outside [0, {group.size})")
        self.group, self.rank, self.size = group, int(rank), group.size
        self.timeout = group.timeout

    def send(self, peer, tag, payload, layer=0xFFFF):
        bufs = payload if isinstance(payload, (list, tuple)) else [payload]
        data = b"".join(bufs)
        g = self.group
        with g._cv:
            g._queues[(self.rank, peer, tag)].append(data)
            g._arrivals += 1
            g._cv.notify_all()

    can_poll = True

    def try_recv(self, peer, tag):
        g = self.group
        with g._cv:
            q = g._queues.get((peer, self.rank, tag))
            if q:
                return q.popleft()
            if g._aborted is not None:
                reason, who = g._aborted
                raise PeerError(f"rank {self.rank}: the group was aborted ({reason}) while "
                                f"waiting for rank {peer}", peer if who is None else who)
            return None

    def wait_arrival(self, seen, timeout):
        g = self.group
        with g._cv:
            if g._arrivals == seen and g._aborted is None:
                g._cv.wait(timeout)
            return g._arrivals

    def recv(self, peer, tag):
        g = self.group
        deadline = time.monotonic() + self.timeout
        with g._cv:  # re-entrant: try_recv takes it again
            while True:
                m = self.try_recv(peer, tag)
                if m is not None:
                    return m
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CommTimeoutError(f"rank {self.rank}: no message from rank {peer} "
                                           f"within {self.timeout:g} s", peer)
                g._cv.wait(left)


class InProcessGroup:
    """A group of ``size`` threads of this process (the CD workers' group).

    Parameters
    ----------
    size : int
    timeout : float
        Seconds a rank waits for the others before the group is declared broken
        (``threading.BrokenBarrierError``): a failed worker never hangs the others.
    name : str

    Attributes
    ----------
    stats : dict
        ``calls`` (dense all-reduces), ``bytes`` (bytes every rank contributed to them) and
        ``adds`` (arrays folded into a result: ``size - 1`` per call, since the last rank to
        arrive reduces once for the group).
    """

    def __init__(self, size: int, timeout: float = 600.0, name: str = "group"):
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        self.size = int(size)
        self.name = name
        self.timeout = float(timeout)
        self.children = {}  # (split number, color) -> InProcessGroup, made by split()
        self._lock = threading.Lock()
        self._barrier = threading.Barrier(self.size, action=self._reduce, timeout=timeout)
        self._done = threading.Barrier(self.size, timeout=timeout)
        self._split_slots = [None] * self.size
        self._split_in = threading.Barrier(self.size, timeout=timeout)
        self._split_out = threading.Barrier(self.size, timeout=timeout)
        self._slots = [None] * self.size
        self._ops = [None] * self.size
        self._result = None
        self.queues = QueueGroup(self.size, timeout=timeout)
        self.stats = {"calls": 0, "bytes": 0, "adds": 0}

    def communicator(self, rank: int) -> InProcessCommunicator:
        """The communicator of rank ``rank``.

        Parameters
        ----------
        rank : int
            ``0 <= rank < size``.

        Returns
        -------
        InProcessCommunicator
            A new communicator of that rank.
        """
        return InProcessCommunicator(self, rank)

    def abort(self):
        """Break the group: every rank waiting in (or later entering) a collective of it, or of
        a group split from it, fails (``threading.BrokenBarrierError`` or
        :class:`~roofline.comm.PeerError`)."""
        self._barrier.abort()
        self._done.abort()
        self._split_in.abort()
        self._split_out.abort()
        self.queues.abort(f"{self.name} aborted")
        with self._lock:
            children = list(self.children.values())
        for c in children:
            c.abort()

    def _reduce(self):
        """The reduction of the deposited slots in rank order (run once per call)."""
        op = self._ops[0]
        out = self._slots[0].copy()
        for r in range(1, self.size):
            if self._ops[r] != op:
                raise ValueError(f"allreduce op mismatch in {self.name}: rank 0 asked "
                                 f"{op!r}, rank {r} {self._ops[r]!r}")
            if self._slots[r].shape != out.shape:
                raise ValueError(
                    f"allreduce shape mismatch in {self.name}: rank 0 sent {out.shape}, "
                    f"rank {r} sent {self._slots[r].shape}"
                )
            if op == "sum":
                out += self._slots[r]
            else:
                np.maximum(out, self._slots[r], out=out)
        self.stats["adds"] += self.size - 1
        self._result = out


class InProcessCommunicator(Communicator):
    """One rank of an :class:`InProcessGroup`: dense all-reduce in shared memory (rank order),
    the other collectives through Kylix over the group's queues.

    ``stats`` keeps the CD workers' counters ``calls`` and ``bytes`` (bytes this rank
    contributed to dense all-reduces) beside Kylix's per-layer counters.

    Parameters
    ----------
    group : InProcessGroup
        The group.
    rank : int
        This communicator's rank, ``0 <= rank < group.size``.

    Raises
    ------
    ValueError
        ``rank`` outside the group.
    """

    backend = "threads"
    shares_process = True

    def __init__(self, group: InProcessGroup, rank: int):
        if not 0 <= rank < group.size:
            raise ValueError(f"rank {rank} outside [0, {group.size})")
        self.group = group
        self.rank = int(rank)
        self.size = group.size
        self._kylix = KylixCommunicator(group.queues.transport(rank), backend="threads")
        self.stats = {"calls": 0, "bytes": 0, "kylix": self._kylix.stats}
        self._n_splits = 0

    def allreduce(self, x, op="sum"):
        self._check_op(op)
        x, back = as_host(x)
        g = self.group
        if g.size == 1:  # nothing crosses a link
            return back(x.copy())
        self.stats["calls"] += 1
        self.stats["bytes"] += x.nbytes
        if self.rank == 0:
            g.stats["calls"] += 1
            g.stats["bytes"] += x.nbytes * self.size
        g._slots[self.rank] = x
        g._ops[self.rank] = op
        g._barrier.wait()  # the last rank to arrive reduces (InProcessGroup._reduce)
        out = g._result.copy()
        g._done.wait()  # nobody deposits the next call's slots before everyone has copied
        return back(out)

    def sparse_plan(self, indices, want=None):
        return self._kylix.sparse_plan(indices, want)

    def broadcast(self, x, root=0):
        return self._kylix.broadcast(x, root)

    def gather(self, x, root=0):
        return self._kylix.gather(x, root)

    def allgather(self, x):
        return self._kylix.allgather(x)

    def barrier(self):
        self._kylix.barrier()

    def split(self, color, key=None):
        """Sub-groups of the ranks with the same ``color`` (any hashable value), ordered by
        ``key`` (default: rank): in-process communicators with the shared-memory all-reduce,
        kept in ``group.children`` (their ``stats`` stay readable after the run).

        Parameters
        ----------
        color : hashable
            The sub-group this rank joins.
        key : optional
            This rank's sort key within its sub-group (default: its rank).

        Returns
        -------
        InProcessCommunicator
            This rank's communicator in its sub-group.
        """
        key = self.rank if key is None else key
        self._n_splits += 1
        g = self.group
        g._split_slots[self.rank] = (color, key)  # shared memory, as the dense all-reduce
        g._split_in.wait()
        members = list(g._split_slots)
        g._split_out.wait()  # nobody deposits the next split before everyone has read
        ranks = [r for _, r in sorted((k, r) for r, (c, k) in enumerate(members) if c == color)]
        with g._lock:
            sub = g.children.get((self._n_splits, color))
            if sub is None:
                sub = g.children[(self._n_splits, color)] = InProcessGroup(
                    len(ranks), timeout=g.timeout, name=f"{g.name}/{color}")
        return sub.communicator(ranks.index(self.rank))


def run_in_threads(fn, size, groups=()):
    """Run ``fn(rank)`` for ``rank in range(size)`` in threads; return the results by rank.

    The first exception of any rank aborts ``groups`` (so the others stop waiting) and is
    re-raised here.

    Parameters
    ----------
    fn : callable
        ``fn(rank)``, run by one thread per rank (by this thread when ``size == 1``).
    size : int
        The number of ranks.
    groups : sequence
        Objects with an ``abort()`` method (:class:`QueueGroup`, :class:`InProcessGroup`)
        aborted when a rank fails.

    Returns
    -------
    list
        ``fn``'s result on each rank, by rank.

    Raises
    ------
    BaseException
        The first root-cause exception of a rank (in preference to the
        ``BrokenBarrierError``/:class:`PeerError` of the ranks that lost it).
    """
    results = [None] * size
    errors = [None] * size

    def target(r):
        try:
            results[r] = fn(r)
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            errors[r] = e
            for g in groups:
                g.abort()

    if size == 1:
        target(0)
    else:
        threads = [threading.Thread(target=target, args=(r,), daemon=True) for r in range(size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    secondary = (threading.BrokenBarrierError, PeerError)
    first = [e for e in errors if e is not None and not isinstance(e, secondary)]
    if first:
        raise first[0]
    if any(e is not None for e in errors):
        raise errors[[e is not None for e in errors].index(True)]
    return results
