"""The MPI transport (``pip install roofline[mpi]``: mpi4py and the mpich wheel, whose
``mpiexec`` is the one to use).

:class:`MPITransport` carries Kylix's messages over MPI point-to-point (``Isend``/``Iprobe``),
so the same algorithm, in the same order, runs on a cluster's MPI as over TCP.  This module is
the transport only (it sits below Kylix); the communicator that adds MPI's own dense
collectives, ``MPICommunicator``, is in :mod:`roofline.comm._mpi_comm`.

MPICH cannot survive a dead rank: its process manager ends the job.  A receive that waits
longer than the timeout raises :class:`~roofline.comm.CommTimeoutError` naming the peer.
mpi4py is imported only when an MPI communicator is made.

Notices (issue 32): a rank that fails (an uncaught exception: :func:`install_hooks`), or closes
its world communicator, sends a small *notice* to every other rank on ``COMM_WORLD`` under a
reserved tag.  Every wait of the tier (:meth:`MPITransport.recv`, :func:`wait_request` for the
nonblocking collectives) reads the notices and raises :class:`~roofline.comm.PeerError` naming
the rank that failed, or that left before the collective this one waits in.  A process that
failed (or whose collective was left pending) ends with ``MPI_Abort`` instead of
``MPI_Finalize``, as ``python -m mpi4py`` does, so that no rank is left in a collective.
"""

from __future__ import annotations

import atexit
import logging
import pickle
import sys
import time

import numpy as np

from ._base import CommTimeoutError, PeerError, Transport

__all__ = ["MPITransport"]

logger = logging.getLogger(__name__)

#: MPI guarantees tags up to 32767; Roofline's tag namespaces are folded into that range.
_TAG_RANGE = 32749
#: The tag of notices (outside the folded range).
NOTICE_TAG = 32766
#: Seconds a failing process lets the others read its notice before it aborts the job.
ABORT_GRACE = 1.0
#: Seconds a wait goes on after a notice that a rank left, for its last messages in flight.
LEFT_GRACE = 0.5


class _Notices:
    """This process's view of the other ranks' notices (one per process)."""

    def __init__(self):
        self.failed = {}  # world rank -> why
        self.left = {}  # world rank -> collectives it had begun on its world communicator
        self.sent = []
        self.dirty = False  # a collective left pending, or a failure: abort at exit
        self.hooked = False

    def post(self, MPI, kind, count=0, why=""):
        world = MPI.COMM_WORLD
        data = np.frombuffer(pickle.dumps((kind, int(count), str(why)[:2000])), np.uint8)
        for r in range(world.Get_size()):
            if r != world.Get_rank():
                self.sent.append((world.Isend([data, MPI.BYTE], dest=r, tag=NOTICE_TAG), data))

    def poll(self, MPI):
        world = MPI.COMM_WORLD
        status = MPI.Status()
        while world.Iprobe(source=MPI.ANY_SOURCE, tag=NOTICE_TAG, status=status):
            buf = bytearray(status.Get_count(MPI.BYTE))
            world.Recv([buf, MPI.BYTE], source=status.Get_source(), tag=NOTICE_TAG)
            try:
                kind, count, why = pickle.loads(buf)
            except Exception:  # noqa: BLE001 - a foreign message under our tag
                logger.warning("a malformed notice from rank %d ignored", status.Get_source())
                continue
            (self.failed if kind == "failed" else self.left)[status.Get_source()] = (
                why if kind == "failed" else count)

    def check(self, MPI, me, seq=None, since=None):
        """Raise :class:`PeerError` if a rank failed, or (``seq``: the index of the world
        collective this rank waits in) left before it; ``since``: when the wait began."""
        self.poll(MPI)
        if self.failed:
            r, why = next(iter(self.failed.items()))
            self.dirty = True
            raise PeerError(f"rank {me}: rank {r} failed ({why}); the job cannot go on", r)
        if seq is not None:
            for r, count in self.left.items():
                if seq >= count and (since is None or time.monotonic() - since > LEFT_GRACE):
                    self.dirty = True
                    raise PeerError(f"rank {me}: rank {r} left the job (closed its communicator "
                                    f"after {count} collectives) while this rank waits in "
                                    f"collective #{seq}", r)


NOTICES = _Notices()


def wait_request(MPI, req, rank, timeout, what, seq=None):
    """Wait for the MPI request ``req`` (a nonblocking collective), at most ``timeout``
    seconds, reading the notices: :class:`PeerError` naming a rank that failed or left,
    :class:`~roofline.comm.CommTimeoutError` past the timeout."""
    start = time.monotonic()
    deadline = start + timeout
    sleep = 0.0
    while not req.Test():
        try:
            NOTICES.check(MPI, rank, seq, start)
        except PeerError:
            NOTICES.dirty = True
            raise
        if time.monotonic() > deadline:
            NOTICES.dirty = True
            raise CommTimeoutError(f"rank {rank}: {what} did not complete within {timeout:g} s: "
                                   "a rank has not joined it (it hangs, skipped it or returned "
                                   "early)")
        time.sleep(sleep)
        sleep = min(sleep * 2 + 1e-5, 1e-3)


def install_hooks(MPI):
    """Once per process: an uncaught exception sends a notice naming it to every other rank,
    then aborts the job after :data:`ABORT_GRACE` seconds; a process whose collective was left
    pending aborts at exit instead of finalizing (which would wait for it forever)."""
    if NOTICES.hooked:
        return
    NOTICES.hooked = True
    previous = sys.excepthook

    def hook(tp, e, tb):
        previous(tp, e, tb)
        try:
            NOTICES.post(MPI, "failed", why=f"{tp.__name__}: {e}")
            sys.stdout.flush()
            sys.stderr.flush()
            time.sleep(ABORT_GRACE)
        finally:
            MPI.COMM_WORLD.Abort(1)

    def at_exit():
        if NOTICES.dirty and MPI.Is_initialized() and not MPI.Is_finalized():
            sys.stdout.flush()
            sys.stderr.flush()
            MPI.COMM_WORLD.Abort(1)

    sys.excepthook = hook
    atexit.register(at_exit)


def _mpi():
    try:
        from mpi4py import MPI
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("the MPI backend needs mpi4py and an MPI library: "
                          "pip install 'roofline[mpi]' (mpi4py + mpich)") from e
    return MPI


class MPITransport(Transport):
    """Point-to-point byte messages over an mpi4py communicator.

    Sends are non-blocking (``Isend`` of the payload, kept alive until it completes), so the
    butterfly's send-all-then-receive exchanges never deadlock; receives poll ``Iprobe`` until
    the timeout.
    """

    backend = "mpi"
    shares_process = False

    def __init__(self, mpi_comm=None, timeout: float = 600.0):
        MPI = _mpi()
        self.MPI = MPI
        self.mpi_comm = MPI.COMM_WORLD if mpi_comm is None else mpi_comm
        self.rank = self.mpi_comm.Get_rank()
        self.size = self.mpi_comm.Get_size()
        self.timeout = float(timeout)
        self._pending = []
        self.world = self.mpi_comm == MPI.COMM_WORLD or (
            MPI.Comm.Compare(self.mpi_comm, MPI.COMM_WORLD) != MPI.UNEQUAL)
        #: the index of the world collective under way (set by the communicator), or None
        self.seq = None
        install_hooks(MPI)

    def _tag(self, tag):
        return int(tag) % _TAG_RANGE

    def send(self, peer, tag, payload, layer=0xFFFF):
        bufs = payload if isinstance(payload, (list, tuple)) else [payload]
        data = np.frombuffer(b"".join(bufs), dtype=np.uint8)
        req = self.mpi_comm.Isend([data, self.MPI.BYTE], dest=peer, tag=self._tag(tag))
        self._pending.append((req, data))
        if len(self._pending) > 64:
            self._reap()

    def _reap(self):
        self._pending = [(r, d) for r, d in self._pending if not r.Test()]

    def recv(self, peer, tag):
        status = self.MPI.Status()
        t = self._tag(tag)
        start = time.monotonic()
        deadline = start + self.timeout
        sleep = 0.0
        while not self.mpi_comm.Iprobe(source=peer, tag=t, status=status):
            NOTICES.check(self.MPI, self.rank, self.seq if self.world else None, start)
            if time.monotonic() > deadline:
                NOTICES.dirty = True
                raise CommTimeoutError(f"rank {self.rank}: no MPI message from rank {peer} "
                                       f"within {self.timeout:g} s", peer)
            self._reap()
            time.sleep(sleep)
            sleep = min(sleep * 2 + 1e-5, 1e-3)
        buf = bytearray(status.Get_count(self.MPI.BYTE))
        self.mpi_comm.Recv([buf, self.MPI.BYTE], source=peer, tag=t)
        return buf

    def close(self, seq=None):
        """Complete the pending sends (at most the timeout), and with ``seq`` (a world
        communicator's count of collectives) tell the other ranks that this one left."""
        deadline = time.monotonic() + self.timeout
        while self._pending and time.monotonic() < deadline:
            self._reap()
            time.sleep(1e-4)
        if self._pending:
            NOTICES.dirty = True
            logger.warning("rank %d: %d sends never completed", self.rank, len(self._pending))
        self._pending = []
        if seq is not None and self.world:
            NOTICES.post(self.MPI, "left", count=seq)
