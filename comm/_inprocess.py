"""The CD workers' in-process group: ranks are threads of this process.

:class:`InProcessGroup` / :class:`InProcessCommunicator`: a group whose dense all-reduce is
one shared-memory reduction in rank order computed by the last rank to arrive
(``O(size * len(x))`` in all, ``O(len(x))`` per rank); its other collectives go through Kylix
over a :class:`~roofline.comm.QueueGroup`.  The numba kernels release the GIL, so worker
threads really run in parallel.

Every collective of a rank, on either path, gets the collective header of Kylix
(:func:`~roofline.comm._kylix.header_fields`: operation, dtype, shape, plan, sequence number),
numbered in one sequence, and posts it on the group's board as it starts: a rank that finds
another at the same sequence number doing something else raises
:class:`~roofline.comm.MismatchError` naming both, and the others stop waiting with the same
error (issue 32), as the header checks of TCP, MPI and disk do.  Without the board a rank
skipping a collective would wait on the shared-memory barrier while its peer waits in Kylix,
until the timeout.
"""

from __future__ import annotations

import logging
import threading
import zlib

import numpy as np

from ._base import Communicator, MismatchError, PeerError, as_host, check_reducible
from ._kylix import KylixCommunicator, mismatch
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
        self._fields = [None] * self.size  # the header of each rank's dense all-reduce
        self._posted = [None] * self.size  # the header of each rank's current collective
        self._error = None  # the MismatchError that broke the group, once found
        self._seqs = [0] * self.size  # each rank's next sequence number (all its communicators)
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

    def abort(self, reason: str | None = None):
        """Break the group: every rank waiting in (or later entering) a collective of it, or of
        a group split from it, fails (``threading.BrokenBarrierError`` or
        :class:`~roofline.comm.PeerError`; :class:`~roofline.comm.MismatchError` when the
        ranks were found to disagree).

        Parameters
        ----------
        reason : str, optional
            Why, carried by the waiting ranks' :class:`~roofline.comm.PeerError`.
        """
        self._barrier.abort()
        self._done.abort()
        self._split_in.abort()
        self._split_out.abort()
        self.queues.abort(reason or f"{self.name} aborted")
        with self._lock:
            children = list(self.children.values())
        for c in children:
            c.abort(reason)

    def _fail(self, err: MismatchError):
        """Record ``err`` as what broke the group (the first such error wins), wake every
        waiting rank and raise it."""
        with self._lock:
            if self._error is None:
                self._error = err
            err = self._error
        logger.error("%s: %s", self.name, err)
        self.abort(str(err))
        raise MismatchError(str(err), err.ranks)

    def raise_error(self):
        """Raise the :class:`~roofline.comm.MismatchError` that broke the group, if one did
        (a rank woken by :meth:`abort` reports the cause, not its own broken wait)."""
        err = self._error
        if err is not None:
            raise MismatchError(str(err), err.ranks)

    def _next_seq(self, rank: int) -> int:
        """Rank ``rank``'s next collective sequence number, advanced (only that rank's threads
        call it, one at a time)."""
        seq = self._seqs[rank]
        self._seqs[rank] = seq + 1
        return seq

    def _announce(self, rank: int, fields):
        """Rank ``rank`` starts the collective with header ``fields``: it must agree with
        every rank posted at the same sequence number (``fields[3]``)."""
        with self._lock:
            bad = self._error
            if bad is None:
                self._posted[rank] = fields
                for peer, theirs in enumerate(self._posted):
                    if peer != rank and theirs is not None and theirs[3] == fields[3] \
                            and theirs != fields:
                        bad = mismatch(rank, fields, peer, theirs)
                        break
        if bad is not None:
            self._fail(bad)

    def _reduce(self):
        """The reduction of the deposited slots in rank order (run once per call)."""
        for r in range(1, self.size):  # the board found any disagreement already: a backstop
            if self._fields[r] != self._fields[0] or self._slots[r].shape != \
                    self._slots[0].shape:
                with self._lock:
                    if self._error is None:
                        self._error = mismatch(r, self._fields[r], 0, self._fields[0])
                raise self._error
        op = self._ops[0]
        out = self._slots[0].copy()
        for r in range(1, self.size):
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
        # one sequence of collective headers for both paths, each posted on the group's board
        self._kylix.next_seq = lambda: group._next_seq(self.rank)
        self._kylix.on_begin = lambda fields: group._announce(self.rank, fields)
        self.stats = {"calls": 0, "bytes": 0, "kylix": self._kylix.stats}
        self._n_splits = 0

    def _wait(self, barrier):
        """``barrier.wait()``; a broken wait raises the group's mismatch when one broke it."""
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            self.group.raise_error()
            raise

    def _kylix_call(self, fn, *args):
        """A Kylix collective; a wait broken by the group's abort raises the group's mismatch
        when one broke it."""
        try:
            return fn(*args)
        except PeerError:
            self.group.raise_error()
            raise

    def allreduce(self, x, op="sum"):
        self._check_op(op)
        x, back = as_host(x)
        check_reducible(x, op)
        g = self.group
        if g.size == 1:  # nothing crosses a link
            return back(x.copy())
        # the header Kylix's allreduce would send, posted on the board (may raise a mismatch)
        fields = self._kylix_call(self._kylix._begin, "allreduce", op, x.dtype.str, x.size,
                                  zlib.crc32(repr(x.shape).encode()))
        self.stats["calls"] += 1
        self.stats["bytes"] += x.nbytes
        if self.rank == 0:
            g.stats["calls"] += 1
            g.stats["bytes"] += x.nbytes * self.size
        g._slots[self.rank] = x
        g._ops[self.rank] = op
        g._fields[self.rank] = fields
        self._wait(g._barrier)  # the last rank to arrive reduces (InProcessGroup._reduce)
        out = g._result.copy()
        self._wait(g._done)  # nobody deposits the next call's slots before everyone has copied
        return back(out)

    def sparse_plan(self, indices, want=None):
        return self._kylix_call(self._kylix.sparse_plan, indices, want)

    def broadcast(self, x, root=0):
        return self._kylix_call(self._kylix.broadcast, x, root)

    def gather(self, x, root=0):
        return self._kylix_call(self._kylix.gather, x, root)

    def allgather(self, x):
        return self._kylix_call(self._kylix.allgather, x)

    def barrier(self):
        self._kylix_call(self._kylix.barrier)

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
        g = self.group
        if g.size > 1:
            self._kylix_call(self._kylix._begin, "split")  # its header, posted on the board
        self._n_splits += 1
        g._split_slots[self.rank] = (color, key)  # shared memory, as the dense all-reduce
        self._wait(g._split_in)
        members = list(g._split_slots)
        self._wait(g._split_out)  # nobody deposits the next split before everyone has read
        ranks = [r for _, r in sorted((k, r) for r, (c, k) in enumerate(members) if c == color)]
        with g._lock:
            sub = g.children.get((self._n_splits, color))
            if sub is None:
                sub = g.children[(self._n_splits, color)] = InProcessGroup(
                    len(ranks), timeout=g.timeout, name=f"{g.name}/{color}")
        return sub.communicator(ranks.index(self.rank))
