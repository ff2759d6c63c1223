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

Jobs on one spool directory never mix: with a ``token`` a job's files live under
``spool/job-<token>/``; without one, a job holds the spool directory itself, by an exclusive
``flock`` on ``spool/.roofline-disk-job`` taken by the first node of the process (the nodes of
one process are one job, as a :class:`~roofline.comm.DiskCluster`).  A node of another process,
or a second node of the same rank in this process, is refused with a
:class:`~roofline.comm.CommError` naming the spool and saying to pass ``token=`` or use a fresh
directory (and the clash fails the waits of the job already there, so no node runs on a shared
spool).  The lock goes with the last node's :meth:`DiskTransport.close` (or its process), and
the next job to take the spool removes the message files a job that is gone left behind, never
reading them as its own.

The results are those of the TCP backend bit for bit (same butterfly, same summation order),
so the simulator shows the Kylix shape of clusters larger than the machine (64-256 nodes) and
helps choose degrees, with every byte that would cross the network on disk to inspect.

This module is the transport only (it sits below Kylix); the simulated cluster over it,
:class:`~roofline.comm.DiskCluster`, is in :mod:`roofline.comm._disk_cluster`.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import re
import socket
import struct
import threading
import time
import weakref
import zlib

from ._base import CommError, CommTimeoutError, MessageError, PeerError, Transport

__all__ = ["DiskTransport"]

logger = logging.getLogger(__name__)

_MAGIC = b"RFLD"
_HEAD = struct.Struct("<4sIIIQQI")  # magic, src, dst, tag, seq, payload length, CRC-32
_HEAD_NO_CRC = struct.Struct("<4sIIIQQ")
_CLAIM = ".roofline-disk-job"  # the lock file of the job holding an untokened spool
_LEFTOVER = (re.compile(r"t\d+"), re.compile(r"\d+-\d+"), re.compile(r"\d+\.msg(\.tmp)?"))


class _Claim:
    """This process's hold on an untokened spool directory: the locked file's descriptor, the
    ranks of the live nodes holding it, their size, and the clash that broke it (if any)."""

    def __init__(self, spool, fd):
        self.spool, self.fd = spool, fd
        self.ranks = set()
        self.size = None
        self.conflict = None


_claims = {}  # (pid, real spool path) -> _Claim; the pid keeps a forked child off its parent's
_claims_lock = threading.Lock()


def _refusal(spool, why):
    return (f"the spool directory {spool} holds the live files of another job ({why}): pass "
            "the same token= to every node of a job (DiskTransport(..., token=...)) or use a "
            "fresh spool directory")


def _lock_spool(spool):
    """The descriptor of ``spool/.roofline-disk-job``, exclusively locked by this process; a
    :class:`CommError` when another process holds it."""
    path = os.path.join(spool, _CLAIM)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            try:
                owner = os.read(fd, 200).decode(errors="replace").strip() or "unknown owner"
            finally:
                os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise CommError(_refusal(spool, owner)) from None
            raise CommError(f"cannot lock {path}: {e}") from e
        try:
            here = os.stat(path)
        except FileNotFoundError:
            here = None
        mine = os.fstat(fd)
        if here is not None and (here.st_ino, here.st_dev) == (mine.st_ino, mine.st_dev):
            os.ftruncate(fd, 0)
            os.write(fd, f"process {os.getpid()} on {socket.gethostname()}".encode())
            return fd
        os.close(fd)  # the previous holder removed the file as we locked it: lock the new one


def _remove_leftovers(spool):
    """Remove the message files under ``spool/t<tag>/<src>-<dst>/`` (a job that is gone left
    them; read by the next job they would pass for its own)."""
    n = 0
    for tdir in os.listdir(spool):
        if not _LEFTOVER[0].fullmatch(tdir) or not os.path.isdir(os.path.join(spool, tdir)):
            continue
        for pair in os.listdir(os.path.join(spool, tdir)):
            d = os.path.join(spool, tdir, pair)
            if not _LEFTOVER[1].fullmatch(pair) or not os.path.isdir(d):
                continue
            for f in os.listdir(d):
                if _LEFTOVER[2].fullmatch(f):
                    try:
                        os.unlink(os.path.join(d, f))
                        n += 1
                    except FileNotFoundError:
                        pass
    if n:
        logger.warning("%s: removed %d message file(s) left by a job that is gone", spool, n)


def _claim(spool, rank, size) -> _Claim:
    """Hold the untokened ``spool`` for node ``rank`` of a job of ``size`` nodes."""
    real = os.path.realpath(spool)
    key = (os.getpid(), real)
    with _claims_lock:
        c = _claims.get(key)
        if c is None:
            try:
                os.makedirs(real, exist_ok=True)
            except OSError as e:
                raise CommError(f"cannot create the spool directory {real}: {e}") from e
            c = _Claim(real, _lock_spool(real))
            _claims[key] = c
            _remove_leftovers(real)
        if rank in c.ranks or (c.size is not None and c.size != size):
            held = (f"node {rank} is held already by a live DiskTransport of this process"
                    if rank in c.ranks else f"its nodes are a job of {c.size}, not {size}")
            c.conflict = _refusal(real, held)
            raise CommError(c.conflict)
        c.ranks.add(rank)
        c.size = size
        return c


def _release(key, claim, rank):
    """Node ``rank`` lets go of ``claim``; the last one unlocks (and removes) the lock file."""
    with _claims_lock:
        claim.ranks.discard(rank)
        if claim.ranks or _claims.get(key) is not claim:
            return
        del _claims[key]
        try:  # removed while locked: a process that opened it before notices (_lock_spool)
            os.unlink(os.path.join(claim.spool, _CLAIM))
        except OSError:
            pass
        os.close(claim.fd)


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
        node of a job passes the same token.  Without one, the nodes of this process hold
        the spool directory as one job until the last :meth:`close`: a node of another
        process (a job of nodes in several processes needs a token), or a second node of a rank
        held here, is refused.
    wake : list of threading.Condition, optional
        One per node, shared by the nodes of one process: a send notifies the receiver's, so a
        receive sleeps until a message lands instead of polling (without it, receives poll
        the directory, e.g. for nodes in different processes).

    Raises
    ------
    CommError
        Without ``token``: the spool directory is held by a live job of another process, or
        this process holds ``rank`` there already, or a job of another size (the message names
        the spool and says to pass ``token=`` or use a fresh directory).
    ValueError
        A token other than letters, digits, ``-`` and ``_``.
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
        self._claim = None
        self._release = None
        if token is None:  # no namespace of its own: this process's job holds the spool
            self._claim = _claim(self.spool, self.rank, self.size)
            self._release = weakref.finalize(self, _release,
                                             (os.getpid(), self._claim.spool), self._claim,
                                             self.rank)

    def close(self):
        """Let go of the spool directory (idempotent; also when the transport is collected):
        the last node of an untokened job unlocks it for the next job."""
        if self._release is not None:
            self._release()

    def _check_claim(self):
        if self._claim is not None and self._claim.conflict is not None:
            raise CommError(f"node {self.rank}: {self._claim.conflict}")

    def _dir(self, src, dst, tag):
        return os.path.join(self.spool, f"t{tag}", f"{src}-{dst}")

    def send(self, peer, tag, payload, layer=0xFFFF):
        self._check_claim()
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
            self._check_claim()
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
        self._check_claim()
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
