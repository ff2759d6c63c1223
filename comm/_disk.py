"""A disk-simulated cluster (BIDMach's "simulating a cluster on a single node").

One process simulates ``n_nodes`` nodes: each node is a thread running the same Kylix code as
over TCP or MPI, and every message is a file in a spool directory.  A message is written to a
temporary name and renamed into place once complete (so a reader never sees a partial file),
with a header carrying a magic number, its sender, receiver, tag and sequence number, the
payload length and a CRC-32 over header and payload; a file that fails those checks (truncated,
corrupted, or not the message expected at that place) raises
:class:`~roofline.comm.MessageError` and is never read as valid.  Each :meth:`DiskCluster.run`
uses a fresh subdirectory of the spool, so messages left by a failed run are never read by a
later one.  A full
disk (``ENOSPC``, or ``EFBIG`` past a file-size limit) is a :class:`~roofline.comm.CommError`
naming the path, and the partial temporary file is removed.

The results are those of the TCP backend bit for bit (same butterfly, same summation order),
so the simulator shows the Kylix shape of clusters larger than the machine (64-256 nodes) and
helps choose degrees, with every byte that would cross the network on disk to inspect.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import struct
import tempfile
import threading
import time
import zlib

from ._base import CommError, CommTimeoutError, MessageError, PeerError, Transport
from ._kylix import MIN_PACKET, KylixCommunicator, kylix_degrees
from ._threads import QueueGroup, run_in_threads

__all__ = ["DiskCluster", "DiskTransport"]

logger = logging.getLogger(__name__)

_MAGIC = b"RFLD"
_HEAD = struct.Struct("<4sIIIQQI")  # magic, src, dst, tag, seq, payload length, CRC-32
_HEAD_NO_CRC = struct.Struct("<4sIIIQQ")


class DiskTransport(Transport):
    """Messages as files ``spool/t<tag>/<src>-<dst>/<seq>.msg`` (one node of a
    :class:`DiskCluster`).

    Parameters
    ----------
    spool : str
        The spool directory (shared by the cluster's nodes).
    rank, size : int
    timeout : float
        Seconds a receive waits for its file.
    fsync : bool
        ``fsync`` every message before it is renamed into place (durable, slower).
    abort : object, optional
        A :class:`~roofline.comm.QueueGroup` whose abort wakes this node's waits.
    wake : list of threading.Condition, optional
        One per node, shared by the nodes of one process: a send notifies the receiver's, so a
        receive sleeps until a message lands instead of polling (without it, receives poll
        the directory, e.g. for nodes in different processes).
    """

    backend = "disk"
    shares_process = True

    def __init__(self, spool, rank, size, timeout=60.0, fsync=False, abort=None, wake=None):
        self.spool, self.rank, self.size = str(spool), int(rank), int(size)
        self.timeout, self.fsync = float(timeout), bool(fsync)
        self._sent = {}
        self._got = {}
        self._abort = abort
        self._wake = wake
        self.bytes_written = 0

    def _dir(self, src, dst, tag):
        return os.path.join(self.spool, f"t{tag}", f"{src}-{dst}")

    def send(self, peer, tag, payload, layer=0xFFFF):
        bufs = payload if isinstance(payload, (list, tuple)) else [payload]
        n = sum(memoryview(b).nbytes for b in bufs)
        key = (peer, tag)
        seq = self._sent.get(key, 0)
        self._sent[key] = seq + 1
        crc = zlib.crc32(_HEAD_NO_CRC.pack(_MAGIC, self.rank, peer, tag, seq, n))
        for b in bufs:
            crc = zlib.crc32(b, crc)
        d = self._dir(self.rank, peer, tag)
        path = os.path.join(d, f"{seq}.msg")
        tmp = path + ".tmp"
        try:
            os.makedirs(d, exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(_HEAD.pack(_MAGIC, self.rank, peer, tag, seq, n, crc))
                for b in bufs:
                    f.write(b)
                f.flush()
                if self.fsync:
                    os.fsync(f.fileno())
            os.replace(tmp, path)
            if self._wake is not None:
                with self._wake[peer]:
                    self._wake[peer].notify_all()
        except OSError as e:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            why = {errno.ENOSPC: "the disk is full", errno.EFBIG: "the file is too large "
                   "(a file-size limit)"}.get(e.errno, e.strerror)
            raise CommError(f"node {self.rank}: writing the message to node {peer} at {path} "
                            f"failed: {why} ({e})") from e
        self.bytes_written += _HEAD.size + n

    def recv(self, peer, tag):
        key = (peer, tag)
        seq = self._got.get(key, 0)
        path = os.path.join(self._dir(peer, self.rank, tag), f"{seq}.msg")
        deadline = time.monotonic() + self.timeout
        sleep = 0.0
        wake = None if self._wake is None else self._wake[self.rank]
        while not os.path.exists(path):
            if self._abort is not None and self._abort._aborted is not None:
                raise PeerError(f"node {self.rank}: another node failed while this one "
                                f"waited for {path}", peer)
            if time.monotonic() > deadline:
                raise CommTimeoutError(f"node {self.rank}: no message from node {peer} "
                                       f"({path}) within {self.timeout:g} s", peer)
            if wake is None:
                time.sleep(sleep)
                sleep = min(sleep * 2 + 1e-4, 0.01)
            else:
                with wake:  # the send notifies after its rename: re-check under the lock
                    if not os.path.exists(path):
                        wake.wait(0.05)
        with open(path, "rb") as f:
            data = f.read()
        if len(data) < _HEAD.size:
            raise MessageError(f"{path}: {len(data)} bytes, shorter than a message header")
        magic, src, dst, mtag, mseq, n, crc = _HEAD.unpack_from(data)
        payload = memoryview(data)[_HEAD.size:]
        if magic != _MAGIC:
            raise MessageError(f"{path}: not a Roofline message (magic {magic!r})")
        if len(payload) != n:
            raise MessageError(f"{path}: {len(payload)} payload bytes, the header says {n} "
                               "(truncated)")
        if zlib.crc32(payload, zlib.crc32(data[:_HEAD_NO_CRC.size])) != crc:
            raise MessageError(f"{path}: bad CRC-32 (corrupted on disk)")
        if (src, dst, mtag, mseq) != (peer, self.rank, tag, seq):
            raise MessageError(f"{path}: the message from node {src} to node {dst} (tag {mtag}, "
                               f"number {mseq}), not the one expected here")
        os.unlink(path)
        self._got[key] = seq + 1
        return payload


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
