"""The receive-with-deadline loop of the pollable transports, written once.

A pollable transport queues what arrives in this process under one condition variable (the
TCP transport's reader threads, the in-process queues) and offers
:meth:`~roofline.comm.Transport.try_recv` (the next payload if one has arrived) and
:meth:`~roofline.comm.Transport.wait_arrival` (sleep until something arrives).
:class:`PollingTransport` builds the blocking :meth:`~roofline.comm.Transport.recv` on them;
:func:`poll_until` is the deadline loop itself, shared with
:class:`~roofline.comm.ReplicatedTransport`, which polls the replicas of a node in turn.
"""

from __future__ import annotations

import abc
import threading
import time

from ._base import CommTimeoutError, Transport

__all__ = ["PollingTransport", "poll_until"]


def poll_until(attempt, wait, timeout: float, expired):
    """Call ``attempt()`` until it returns something other than None, sleeping in
    ``wait(left)`` between tries; past ``timeout`` seconds, raise ``expired()``.

    Parameters
    ----------
    attempt : callable
        ``attempt()``: the result, or None when there is none yet (it may raise).
    wait : callable
        ``wait(left)``: block until something may have changed, at most ``left`` seconds
        (the time left before the deadline, > 0).
    timeout : float
        Seconds from now to the deadline.
    expired : callable
        ``expired()``: the exception raised once the deadline has passed.

    Returns
    -------
    object
        The first result of ``attempt`` that is not None.
    """
    deadline = time.monotonic() + timeout
    while True:
        out = attempt()
        if out is not None:
            return out
        left = deadline - time.monotonic()
        if left <= 0:
            raise expired()
        wait(left)


class PollingTransport(Transport):
    """A :class:`~roofline.comm.Transport` whose arrivals are queued in this process under one
    condition variable: ``recv`` and ``wait_arrival`` written once over the subclass's
    ``try_recv``.

    A subclass sets ``_cv`` (a :class:`threading.Condition` over a re-entrant lock, notified
    at every arrival and when the transport closes or its group aborts) and implements
    :meth:`try_recv` (which takes ``_cv`` itself) and :meth:`_arrival_state`.

    Attributes
    ----------
    can_poll : bool
        True: a :class:`~roofline.comm.ReplicatedTransport` may run over it.
    """

    can_poll = True
    _cv: threading.Condition

    @abc.abstractmethod
    def try_recv(self, peer, tag):
        """The next payload from ``peer`` under ``tag`` if one has arrived, else None.

        Parameters
        ----------
        peer : int
            The source rank.
        tag : int
            The message tag.

        Returns
        -------
        bytes, memoryview or None
            The payload, or None when none has arrived.

        Raises
        ------
        PeerError
            Nothing is queued and ``peer`` is known dead (or the group was aborted).
        """

    @abc.abstractmethod
    def _arrival_state(self) -> tuple[int, bool]:
        """``(arrivals, stopped)``, read with ``_cv`` held: the number of messages (and
        deaths) seen so far, and whether nothing more will arrive (closed, aborted), so that
        waiting is pointless."""

    def wait_arrival(self, seen, timeout):
        with self._cv:
            arrivals, stopped = self._arrival_state()
            if arrivals == seen and not stopped:
                self._cv.wait(timeout)
            return self._arrival_state()[0]

    def recv(self, peer, tag):
        with self._cv:  # re-entrant: try_recv takes it again
            return poll_until(
                lambda: self.try_recv(peer, tag), self._cv.wait, self.timeout,
                lambda: CommTimeoutError(f"rank {self.rank}: no message from rank {peer} "
                                         f"within {self.timeout:g} s", peer))
