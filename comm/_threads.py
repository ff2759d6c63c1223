"""The in-process transport: ranks are threads of this process.

:class:`QueueGroup` / :class:`QueueTransport`: a :class:`~roofline.comm.Transport` whose
messages are byte copies put on per-(sender, receiver, tag) queues.  A
:class:`~roofline.comm.KylixCommunicator` over it runs the same butterfly, in the same order,
as over TCP or MPI, so its results are bit-identical to theirs.  :func:`run_in_threads` runs
one function per rank in threads and aborts the groups when one fails.

This module is a transport only (it sits below Kylix); the CD workers' shared-memory group
(:class:`~roofline.comm.InProcessGroup`) is in :mod:`roofline.comm._inprocess`.  The numba
kernels release the GIL, so worker threads really run in parallel.
"""

from __future__ import annotations

import collections
import logging
import threading

from ._base import PeerError
from ._transport import PollingTransport

__all__ = ["QueueGroup", "QueueTransport", "run_in_threads"]

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


class QueueTransport(PollingTransport):
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
        self._cv = group._cv

    def send(self, peer, tag, payload, layer=0xFFFF):
        bufs = payload if isinstance(payload, (list, tuple)) else [payload]
        data = b"".join(bufs)
        g = self.group
        with g._cv:
            g._queues[(self.rank, peer, tag)].append(data)
            g._arrivals += 1
            g._cv.notify_all()

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

    def _arrival_state(self):
        return self.group._arrivals, self.group._aborted is not None


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
