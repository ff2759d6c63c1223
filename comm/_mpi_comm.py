"""The MPI communicator: MPI's own dense collectives (``Allreduce``, ``Bcast``, ``Barrier``,
``gather``), Kylix over :class:`~roofline.comm._mpi.MPITransport` for the sparse ones.

mpi4py is imported only when an MPI communicator is made.
"""

from __future__ import annotations

import numpy as np

from ._base import as_host
from ._kylix import KylixCommunicator
from ._mpi import MPITransport

__all__ = ["MPICommunicator"]


class MPICommunicator(KylixCommunicator):
    """A Kylix communicator over MPI: dense collectives by MPI, sparse ones by Kylix.

    Parameters
    ----------
    mpi_comm : mpi4py communicator, optional
        Default ``MPI.COMM_WORLD``.
    degrees : sequence of int, optional
        Kylix layer degrees for the sparse all-reduce.
    timeout : float
        Seconds a point-to-point receive waits.
    """

    def __init__(self, mpi_comm=None, degrees=None, timeout: float = 600.0):
        super().__init__(MPITransport(mpi_comm, timeout), degrees, backend="mpi")
        self.mpi_comm = self.transport.mpi_comm

    def allreduce(self, x, op="sum"):
        self._check_op(op)
        self._check_open()
        x, back = as_host(x)
        MPI = self.transport.MPI
        out = np.empty_like(x)
        self.stats["calls"] += 1
        self.stats["bytes_sent"] += x.nbytes
        self.mpi_comm.Allreduce(x, out, op=MPI.SUM if op == "sum" else MPI.MAX)
        return back(out)

    def broadcast(self, x, root=0):
        self._check_open()
        self._check_root(root)
        host = as_host(x)[0] if _is_arr(x) else x
        out = self.mpi_comm.bcast(host if self.rank == root else None, root=root)
        return as_host(x)[1](out) if _is_arr(x) and isinstance(out, np.ndarray) else out

    def gather(self, x, root=0):
        self._check_open()
        self._check_root(root)
        return self.mpi_comm.gather(as_host(x)[0] if _is_arr(x) else x, root=root)

    def allgather(self, x):
        self._check_open()
        return self.mpi_comm.allgather(as_host(x)[0] if _is_arr(x) else x)

    def barrier(self):
        self._check_open()
        self.mpi_comm.Barrier()

    def split(self, color, key=None):
        self._check_open()
        sub = self.mpi_comm.Split(int(color), self.rank if key is None else int(key))
        return MPICommunicator(sub, timeout=self.transport.timeout)

    def dup(self):
        self._check_open()
        return MPICommunicator(self.mpi_comm.Dup(), self.degrees, timeout=self.transport.timeout)

    def close(self):
        if not self._closed:
            self._closed = True
            self.transport.close()


def _is_arr(x):
    return isinstance(x, np.ndarray) or type(x).__module__.split(".")[0] == "cupy"
