"""The disk-simulated cluster: :class:`DiskCluster` runs ``n_nodes`` Kylix nodes as threads of
this process over :class:`~roofline.comm.DiskTransport` (every message a checksummed file in
a spool directory; see :mod:`roofline.comm._disk`).

Its nodes' states stay in memory (every node is a live thread).  For a cluster larger than
the machine's memory, whose nodes run in turn and keep their states in checksummed files, see
:class:`~roofline.comm.DiskNodeCluster` (:mod:`roofline.comm._disk_nodes`).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading

from ._disk import DiskTransport
from ._kylix import MIN_PACKET, KylixCommunicator, kylix_degrees
from ._threads import QueueGroup, run_in_threads

__all__ = ["DiskCluster"]

logger = logging.getLogger(__name__)


class DiskCluster:
    """``n_nodes`` simulated nodes exchanging Kylix messages through ``spool_dir``.

    Parameters
    ----------
    n_nodes : int
    spool_dir : str
        Created if missing; each message lives there from its send to its receive.
    degrees : sequence of int, optional
        Kylix layer degrees; default :func:`~roofline.comm.kylix_degrees` for ``nnz`` entries
        per node and packets of at least ``packet_bytes``.
    nnz : int, optional
        Entries per node, for the default degrees.
    packet_bytes : int
        The smallest efficient message, for the default degrees.
    timeout : float
    fsync : bool

    Examples
    --------
    >>> import numpy as np, tempfile
    >>> from roofline.comm import DiskCluster
    >>> with tempfile.TemporaryDirectory() as spool:
    ...     sums = DiskCluster(4, spool).sparse_allreduce(
    ...         [np.array([0, 5]), np.array([5]), np.array([], int), np.array([7])],
    ...         [np.array([1.0, 2.0]), np.array([3.0]), np.array([]), np.array([4.0])])
    >>> [s.tolist() for s in sums]
    [[1.0, 5.0], [5.0], [], [4.0]]
    """

    def __init__(self, n_nodes, spool_dir, degrees=None, *, nnz=None, packet_bytes=MIN_PACKET,
                 timeout=120.0, fsync=False):
        self.n_nodes = int(n_nodes)
        if self.n_nodes < 1:
            raise ValueError(f"n_nodes must be >= 1, got {n_nodes}")
        self.spool_dir = str(spool_dir)
        os.makedirs(self.spool_dir, exist_ok=True)
        self.degrees = (kylix_degrees(self.n_nodes, nnz=nnz, min_packet=packet_bytes)
                        if degrees is None else tuple(degrees))
        self.timeout, self.fsync = float(timeout), bool(fsync)
        self.stats = None

    def run(self, fn, args=()):
        """``fn(comm, *args)`` on every simulated node; the results by node.

        The messages go through a fresh subdirectory of ``spool_dir``, removed after a
        successful run and kept (for inspection) after a failed one.

        Parameters
        ----------
        fn : callable
            ``fn(comm, *args)``, run by one thread per node with that node's
            :class:`KylixCommunicator`.
        args : tuple
            The further arguments of ``fn``.

        Returns
        -------
        list
            ``fn``'s result on each node, by node.  ``self.stats`` then holds the run's bytes
            and messages per Kylix layer and the bytes written to disk.

        Raises
        ------
        Exception
            The first failure of a node (the others are woken and fail with
            :class:`PeerError`).
        """
        spool = tempfile.mkdtemp(prefix="run-", dir=self.spool_dir)
        abort = QueueGroup(1)  # its abort flag wakes the nodes waiting on files

        class _Abort:
            def __init__(self, flag):
                self.flag = flag

            def abort(self):
                self.flag.abort("a node failed")

        wake = [threading.Condition() for _ in range(self.n_nodes)]
        comms = [KylixCommunicator(DiskTransport(spool, r, self.n_nodes, self.timeout,
                                                 self.fsync, abort, wake), self.degrees,
                                   backend="disk") for r in range(self.n_nodes)]
        try:
            out = run_in_threads(lambda r: fn(comms[r], *args), self.n_nodes, [_Abort(abort)])
        except BaseException:
            logger.info("disk cluster run failed; its messages are kept in %s", spool)
            raise
        finally:
            for c in comms:  # the run's job lets go of its spool (DiskTransport.close)
                c.close()
        shutil.rmtree(spool, ignore_errors=True)
        layers = [{"bytes_sent": sum(c.stats["layers"][i]["bytes_sent"] for c in comms),
                   "messages": sum(c.stats["layers"][i]["messages"] for c in comms)}
                  for i in range(len(self.degrees))]
        self.stats = {"layers": layers,
                      "bytes_written": sum(c.transport.bytes_written for c in comms)}
        return out

    def sparse_allreduce(self, indices, values, wants=None):
        """Every node's sums at ``wants[r]`` (default its ``indices[r]``).

        Parameters
        ----------
        indices : sequence of array-like of int
            Node ``r`` contributes at ``indices[r]``.
        values : sequence of arrays
            Node ``r``'s values at ``indices[r]``.
        wants : sequence of array-like of int, optional
            Node ``r`` receives the sums at ``wants[r]``.

        Returns
        -------
        list of numpy.ndarray
            Node ``r``'s sums, by node.
        """
        wants = [None] * self.n_nodes if wants is None else wants
        return self.run(lambda c: c.sparse_allreduce(indices[c.rank], values[c.rank],
                                                     wants[c.rank]))

    def allreduce(self, arrays, op="sum"):
        """Every node's dense all-reduce of ``arrays[r]``.

        Parameters
        ----------
        arrays : sequence of arrays
            Node ``r``'s array (one shape and dtype).
        op : {"sum", "max"}
            The reduction.

        Returns
        -------
        list of numpy.ndarray
            The reduction as each node received it, by node.
        """
        return self.run(lambda c: c.allreduce(arrays[c.rank], op))
