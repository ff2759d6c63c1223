"""The MPI transport (``pip install roofline[mpi]``: mpi4py and the mpich wheel, whose
``mpiexec`` is the one to use).

:class:`MPITransport` carries Kylix's messages over MPI point-to-point (``Isend``/``Iprobe``),
so the same algorithm, in the same order, runs on a cluster's MPI as over TCP.  This module is
the transport only (it sits below Kylix); the communicator that adds MPI's own dense
collectives, ``MPICommunicator``, is in :mod:`roofline.comm._mpi_comm`.

MPICH cannot survive a dead rank: its process manager ends the job.  A receive that waits
longer than the timeout raises :class:`~roofline.comm.CommTimeoutError` naming the peer.
mpi4py is imported only when an MPI communicator is made.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from ._base import CommTimeoutError, Transport

__all__ = ["MPITransport"]

logger = logging.getLogger(__name__)

#: MPI guarantees tags up to 32767; Roofline's tag namespaces are folded into that range.
_TAG_RANGE = 32749


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
        deadline = time.monotonic() + self.timeout
        sleep = 0.0
        while not self.mpi_comm.Iprobe(source=peer, tag=t, status=status):
            if time.monotonic() > deadline:
                raise CommTimeoutError(f"rank {self.rank}: no MPI message from rank {peer} "
                                       f"within {self.timeout:g} s", peer)
            self._reap()
            time.sleep(sleep)
            sleep = min(sleep * 2 + 1e-5, 1e-3)
        buf = bytearray(status.Get_count(self.MPI.BYTE))
        self.mpi_comm.Recv([buf, self.MPI.BYTE], source=peer, tag=t)
        return buf

    def close(self):
        for req, _ in self._pending:
            req.Wait()
        self._pending = []
