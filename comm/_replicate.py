"""Kylix replication: every logical node runs as ``r`` identical replicas, and a job survives
the death of all but one replica of each node.

The scheme of the Kylix paper (Zhao and Canny, section on fault tolerance): the ``size``
physical ranks form ``size / r`` logical nodes, ranks ``a*r .. a*r + r - 1`` being the replicas
of node ``a``.  The replicas of a node hold the same data and run the same deterministic code,
so they send the same messages.  A message from node ``a`` to node ``b`` goes from every live
replica of ``a`` to every live replica of ``b``; a receiver takes the first complete copy and
discards the later ones.  Kylix above sees a group of ``size / r`` ranks and reduces exactly as
without replication (the same sums, bit for bit), at ``r`` times the messages.

A replica that dies (its connection ends) is skipped from then on; only when every replica of
a node is gone do the others raise :class:`~roofline.comm.PeerError` naming the node and its
ranks.  A slow replica (a straggler) delays nobody: its copies arrive late and are dropped.
"""

from __future__ import annotations

import collections
import logging

from ._base import CommTimeoutError, PeerError, Transport
from ._transport import poll_until

__all__ = ["ReplicatedTransport"]

logger = logging.getLogger(__name__)


class ReplicatedTransport(Transport):
    """A logical group of ``inner.size / replication`` nodes over ``inner``'s ranks.

    Parameters
    ----------
    inner : Transport
        A transport that can poll (``can_poll``: TCP, in-process queues).
    replication : int
        Replicas per logical node; ``inner.size`` must be a multiple.

    Attributes
    ----------
    rank, size : int
        This rank's logical node and the number of nodes.
    replica : int
        Which replica of its node this rank is (``inner.rank % replication``).
    dead : set of int
        Physical ranks found dead.
    """

    def __init__(self, inner: Transport, replication: int):
        r = int(replication)
        if r < 1:
            raise ValueError(f"replication must be >= 1, got {replication}")
        if inner.size % r:
            raise ValueError(f"{inner.size} ranks cannot form nodes of {r} replicas "
                             f"(the number of ranks must be a multiple of the replication)")
        if not getattr(inner, "can_poll", False):
            raise ValueError(f"replication needs a transport that can poll (TCP or threads), "
                             f"not {type(inner).__name__}")
        self.inner, self.replication = inner, r
        self.size = inner.size // r
        self.rank = inner.rank // r
        self.replica = inner.rank % r
        self.timeout = inner.timeout
        self.backend = getattr(inner, "backend", "kylix")
        self.shares_process = getattr(inner, "shares_process", False)
        self.dead = set()  # no longer sent to
        self._drained = set()  # dead, and every message they sent has been taken
        self._taken = collections.defaultdict(int)  # (physical rank, tag) -> copies consumed
        self._next = collections.defaultdict(int)  # (node, tag) -> number of the next message

    def replicas(self, node: int) -> range:
        """The physical ranks of logical node ``node``.

        Parameters
        ----------
        node : int
            A logical rank.

        Returns
        -------
        range
            Its ``replication`` consecutive physical ranks.
        """
        return range(node * self.replication, (node + 1) * self.replication)

    def _lost(self, q, err):
        if q not in self.dead:
            self.dead.add(q)
            logger.warning("rank %d: replica rank %d of node %d is gone (%s); its node goes on "
                           "with the other replicas", self.inner.rank, q, q // self.replication,
                           err)

    def _all_dead(self, node):
        ranks = list(self.replicas(node))
        return PeerError(f"rank {self.inner.rank}: every replica of node {node} (ranks {ranks}) "
                         f"is gone", ranks[0])

    def send(self, peer, tag, payload, layer=0xFFFF):
        bufs = list(payload) if isinstance(payload, (list, tuple)) else [payload]
        if peer == self.rank:
            self.inner.send(self.inner.rank, tag, bufs, layer)
            return
        for q in self.replicas(peer):
            if q in self.dead:
                continue
            try:
                self.inner.send(q, tag, bufs, layer)
            except PeerError as e:
                self._lost(q, e)
        # No live replica left is not an error here: replicas that finished the job ahead of
        # this one (a straggler) need nothing more from it, and crashed ones are found by
        # whoever waits on them (recv, once their queued copies are used up).

    def recv(self, peer, tag):
        if peer == self.rank:
            return self.inner.recv(self.inner.rank, tag)
        s = self._next[(peer, tag)]
        seen = -1

        def attempt():
            nonlocal seen
            seen = self.inner.wait_arrival(-1, 0.0)
            alive = False
            for q in self.replicas(peer):
                if q in self._drained:  # (a replica that is merely dead may have sent copies
                    continue            # that are still queued: they are read first)
                key = (q, tag)
                try:
                    while self._taken[key] <= s:
                        m = self.inner.try_recv(q, tag)
                        if m is None:
                            break
                        self._taken[key] += 1
                        if self._taken[key] == s + 1:  # copy number s: the one wanted
                            self._next[(peer, tag)] = s + 1
                            return m
                        # else a late copy of an earlier message: dropped
                    alive = True
                except PeerError as e:
                    self._lost(q, e)
                    self._drained.add(q)
            if not alive:
                raise self._all_dead(peer)
            return None

        return poll_until(
            attempt, lambda left: self.inner.wait_arrival(seen, min(left, 1.0)), self.timeout,
            lambda: CommTimeoutError(f"rank {self.inner.rank}: no message from any replica of "
                                     f"node {peer} (ranks {list(self.replicas(peer))}) within "
                                     f"{self.timeout:g} s", peer * self.replication))

    def close(self):
        self.inner.close()
