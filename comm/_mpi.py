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
its world communicator, sends a small *notice* to every other rank.  Every wait of the tier
(:meth:`MPITransport.recv`, :func:`wait_request` for the nonblocking collectives) reads the
notices and raises :class:`~roofline.comm.PeerError` naming the rank that failed, or that left
before the collective this one waits in.  A process that failed (or whose collective was left
pending) ends with ``MPI_Abort`` instead of ``MPI_Finalize``, as ``python -m mpi4py`` does, so
that no rank is left in a collective.

The notices travel on a private duplicate of ``COMM_WORLD`` (made once per process, by every
rank, with the first MPI communicator), and a process that ends cleanly first takes every notice
sent to it: it says *bye* to every other rank and reads notices until each has said bye
(:meth:`_Notices.finish`, at exit or in ``MPI_Finalize``).  A bye is a rank's last notice and
MPI keeps one sender's messages in order, so nothing is left unread.  Without this, a notice
that arrived after a rank's last wait stayed unmatched, MPICH's ``MPI_Finalize`` failed on it
("Communicator being freed has 1 unmatched message(s)"), and its process manager killed the
whole job (exit code 9), or reported success for a job whose other ranks it had just killed.
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
    """This process's view of the other ranks' notices (one per process).

    Notices travel on ``comm``, a private duplicate of ``COMM_WORLD`` (world ranks), under
    :data:`NOTICE_TAG`: ``("failed", 0, why)`` from a rank's excepthook, ``("left", count, "")``
    when a rank closes a world communicator after ``count`` collectives, ``("bye", 0, "")`` as a
    process's last notice (:meth:`finish`).
    """

    def __init__(self):
        self.failed = {}  # world rank -> why
        self.left = {}  # world rank -> collectives it had begun on its world communicator
        self.bye = set()  # world ranks that said bye (their process ends)
        self.sent = []
        self.dirty = False  # a collective left pending, or a failure: abort at exit
        self.hooked = False
        self.comm = None  # the notices' communicator (a duplicate of COMM_WORLD)
        self.timeout = 600.0
        self.finished = False

    def post(self, MPI, kind, count=0, why=""):
        if self.comm is None or self.finished:
            return
        data = np.frombuffer(pickle.dumps((kind, int(count), str(why)[:2000])), np.uint8)
        for r in range(self.comm.Get_size()):
            if r != self.comm.Get_rank():
                self.sent.append((self.comm.Isend([data, MPI.BYTE], dest=r, tag=NOTICE_TAG),
                                  data))

    def poll(self, MPI):
        if self.comm is None or self.finished:
            return
        status = MPI.Status()
        while self.comm.Iprobe(source=MPI.ANY_SOURCE, tag=NOTICE_TAG, status=status):
            buf = bytearray(status.Get_count(MPI.BYTE))
            src = status.Get_source()
            self.comm.Recv([buf, MPI.BYTE], source=src, tag=NOTICE_TAG)
            try:
                kind, count, why = pickle.loads(buf)
            except Exception:  # noqa: BLE001 - cannot happen on a private communicator
                logger.warning("a malformed notice from rank %d ignored", src)
                continue
            if kind == "failed":
                self.failed[src] = why
            elif kind == "left":
                self.left[src] = count
            elif kind == "bye":
                self.bye.add(src)

    def check(self, MPI, me, seq=None, since=None):
        """Raise :class:`PeerError` if a rank failed, or (``seq``: the index of the world
        collective this rank waits in) left before it; ``since``: when the wait began."""
        self.poll(MPI)
        if self.failed:
            r, why = next(iter(self.failed.items()))
            self.dirty = True
            raise PeerError(f"rank {me}: rank {r} failed ({why}); the job cannot go on", r)
        if seq is not None:
            late = since is None or time.monotonic() - since > LEFT_GRACE
            for r, count in self.left.items():
                if seq >= count and late:
                    self.dirty = True
                    raise PeerError(f"rank {me}: rank {r} left the job (closed its communicator "
                                    f"after {count} collectives) while this rank waits in "
                                    f"collective #{seq}", r)
            for r in sorted(self.bye - set(self.left)):
                if late:
                    self.dirty = True
                    raise PeerError(f"rank {me}: rank {r} ended (its process exits without "
                                    f"having closed its communicator) while this rank waits in "
                                    f"collective #{seq}", r)

    def open(self, MPI, timeout):
        """Make the notices' communicator (once per process: a nonblocking duplicate of
        ``COMM_WORLD``, which every rank makes with its first MPI communicator), waiting at most
        ``timeout`` seconds for the other ranks."""
        self.timeout = float(timeout)
        world = MPI.COMM_WORLD
        comm, req = world.Idup()
        deadline = time.monotonic() + timeout
        sleep = 0.0
        while not req.Test():
            if time.monotonic() > deadline:
                self.dirty = True
                raise CommTimeoutError(
                    f"rank {world.Get_rank()}: not every rank of COMM_WORLD made its first MPI "
                    f"communicator within {timeout:g} s (each process's first one must be made "
                    "by every rank, as from_environment() does; did a rank fail before?)")
            time.sleep(sleep)
            sleep = min(sleep * 2 + 1e-5, 1e-3)
        self.comm = comm

    def finish(self, MPI):
        """A clean end of this process's part in the job (idempotent): say bye to every other
        rank, read notices until each has said bye (a rank that failed instead: abort), and
        complete this rank's own notices; then no notice is left unmatched for
        ``MPI_Finalize``.  ``MPI_Finalize`` waits for every rank in any case; past the timeout
        a warning names the ranks still awaited."""
        if self.comm is None or self.finished or self.dirty:
            return
        if not MPI.Is_initialized() or MPI.Is_finalized():
            return
        me, size = self.comm.Get_rank(), self.comm.Get_size()
        self.post(MPI, "bye")
        start = time.monotonic()
        warned = False
        sleep = 0.0
        while True:
            self.poll(MPI)
            if self.failed:
                r, why = next(iter(self.failed.items()))
                self.dirty = True
                logger.error("rank %d: rank %d failed (%s); aborting the job", me, r, why)
                return
            waiting = [r for r in range(size) if r != me and r not in self.bye]
            if not waiting:
                break
            if not warned and time.monotonic() - start > self.timeout:
                warned = True
                logger.warning("rank %d: at exit, still waiting after %g s for ranks %s to "
                               "end (MPI_Finalize waits for every rank)", me, self.timeout,
                               waiting)
            time.sleep(sleep)
            sleep = min(sleep * 2 + 1e-5, 1e-2)
        # every other rank is reading notices until it has this rank's bye: ours complete
        deadline = time.monotonic() + self.timeout
        while not MPI.Request.Testall([r for r, _ in self.sent]):
            if time.monotonic() > deadline:
                logger.warning("rank %d: %d notices never completed", me, len(self.sent))
                break
            time.sleep(1e-4)
        self.finished = True
        self.sent = []
        self.comm.Free()
        self.comm = None


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


def install_hooks(MPI, timeout=600.0):
    """Once per process: make the notices' communicator (:meth:`_Notices.open`); an uncaught
    exception sends a notice naming it to every other rank, then aborts the job after
    :data:`ABORT_GRACE` seconds; a process whose collective was left pending aborts at exit
    instead of finalizing (which would wait for it forever); a process that ends cleanly reads
    every notice sent to it first (:meth:`_Notices.finish`: at exit, or in ``MPI_Finalize``
    when the script calls it itself)."""
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

    # MPI_Finalize first deletes COMM_SELF's attributes: a script calling MPI.Finalize() itself
    # finishes the notices there (at exit the attribute is deleted before mpi4py finalizes)
    def finish(comm, key, value):
        try:
            NOTICES.finish(MPI)
        except Exception:  # noqa: BLE001 - inside MPI_Finalize: abort at exit instead
            NOTICES.dirty = True
            logger.exception("the notices could not be finished")

    keyval = MPI.Comm.Create_keyval(delete_fn=finish)
    MPI.COMM_SELF.Set_attr(keyval, True)

    def at_exit():
        if not MPI.Is_initialized() or MPI.Is_finalized():
            return
        if not NOTICES.dirty:
            MPI.COMM_SELF.Delete_attr(keyval)  # NOTICES.finish
        if NOTICES.dirty:
            sys.stdout.flush()
            sys.stderr.flush()
            MPI.COMM_WORLD.Abort(1)

    sys.excepthook = hook
    atexit.register(at_exit)
    NOTICES.open(MPI, timeout)


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
        install_hooks(MPI, self.timeout)

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
