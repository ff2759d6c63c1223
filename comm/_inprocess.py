"""The CD workers' in-process group: ranks are threads of this process.

:class:`InProcessGroup` / :class:`InProcessCommunicator`: a group whose dense all-reduce is
one shared-memory reduction in rank order computed by the last rank to arrive
(``O(size * len(x))`` in all, ``O(len(x))`` per rank); its other collectives go through Kylix
over a :class:`~roofline.comm.QueueGroup`.  The numba kernels release the GIL, so worker
threads really run in parallel.
"""

from __future__ import annotations

import logging
import threading

import numpy as np

from ._base import Communicator, as_host
from ._kylix import KylixCommunicator
from ._threads import QueueGroup

__all__ = ["InProcessCommunicator", "InProcessGroup"]

logger = logging.getLogger(__name__)


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
