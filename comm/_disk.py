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

This module is the transport only (it sits below Kylix); the simulated cluster over it,
:class:`~roofline.comm.DiskCluster`, is in :mod:`roofline.comm._disk_cluster`.
"""

from __future__ import annotations

import errno
import logging
import os
import struct
import time
import zlib

from ._base import CommError, CommTimeoutError, MessageError, PeerError, Transport

__all__ = ["DiskTransport"]

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
        A :class:`~roofline.comm.QueueGroup` whose abort wakes this node's waits (read
        through its ``_aborted`` attribute).
    token : str or bytes, optional
        The job's token: its messages live under ``spool/job-<token>/``, so two jobs sharing
        one spool directory never read each other's files (each ignores the other's).  Every
        node of a job passes the same token; without one, the spool must hold one job only.
    wake : list of threading.Condition, optional
        One per node, shared by the nodes of one process: a send notifies the receiver's, so a
        receive sleeps until a message lands instead of polling (without it, receives poll
        the directory, e.g. for nodes in different processes).
    """

    backend = "disk"
    shares_process = True

    def __init__(self, spool, rank, size, timeout=60.0, fsync=False, abort=None, wake=None,
                 token=None):
        self.spool, self.rank, self.size = str(spool), int(rank), int(size)
        if token is not None:
            token = token.hex() if isinstance(token, (bytes, bytearray)) else str(token)
            if not token or not all(c.isalnum() or c in "-_" for c in token):
                raise ValueError(f"token must be letters, digits, '-' or '_', got {token!r}")
            self.spool = os.path.join(self.spool, f"job-{token}")
        self.token = token
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
