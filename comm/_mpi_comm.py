"""The MPI communicator: MPI's own dense all-reduce (``Iallreduce``), Kylix over
:class:`~roofline.comm._mpi.MPITransport` for everything else.

Every collective first agrees on its header (operation, dtype, shape, plan, sequence number:
:func:`~roofline.comm._kylix.header_fields`) by one small ``Iallreduce`` (the maximum of the
header and of its negation: equal on every rank exactly when every rank sent the same), and on
a disagreement gathers the headers to name the ranks that differ
(:class:`~roofline.comm.MismatchError`).  Every MPI request is polled against the timeout and
the other ranks' notices (:func:`~roofline.comm._mpi.wait_request`): a rank that failed,
skipped a collective or returned early is named by the others, never waited for forever.

mpi4py is imported only when an MPI communicator is made.
"""

from __future__ import annotations

import zlib
from collections import Counter

import numpy as np

from ._base import MismatchError, as_host, check_reducible
from ._kylix import KylixCommunicator, describe
from ._mpi import NOTICES, MPITransport, wait_request

__all__ = ["MPICommunicator"]


class MPICommunicator(KylixCommunicator):
    """A Kylix communicator over MPI: the dense all-reduce by MPI, the rest by Kylix.

    Parameters
    ----------
    mpi_comm : mpi4py communicator, optional
        Default ``MPI.COMM_WORLD``.
    degrees : sequence of int, optional
        Kylix layer degrees for the sparse all-reduce.
    timeout : float
        Seconds any wait (a receive, a collective) lasts before it raises.
    """

    def __init__(self, mpi_comm=None, degrees=None, timeout: float = 600.0):
        super().__init__(MPITransport(mpi_comm, timeout), degrees, backend="mpi")
        self.mpi_comm = self.transport.mpi_comm

    def _begin(self, *args, **kwargs):
        super()._begin(*args, **kwargs)
        self.transport.seq = self._seq - 1

    def _wait(self, req, what):
        wait_request(self.transport.MPI, req, self.rank, self.transport.timeout,
                     f"MPI {what} ({describe(self._fields)})",
                     self._seq - 1 if self.transport.world else None)

    def _agree(self, nan=False):
        """Check that every rank is in the same collective (one small ``Iallreduce``); returns
        whether any rank passed ``nan=True``."""
        MPI = self.transport.MPI
        h = np.array(self._fields, dtype=np.int64)
        v = np.concatenate([h, -h, [int(bool(nan))]])
        out = np.empty_like(v)
        self._wait(self.mpi_comm.Iallreduce(v, out, op=MPI.MAX), "header agreement")
        k = h.size
        if np.array_equal(out[:k], -out[k:2 * k]):
            return bool(out[-1])
        rows = np.empty((self.size, k), dtype=np.int64)
        self._wait(self.mpi_comm.Iallgather(h, rows), "header exchange")
        common, _ = Counter(map(tuple, rows.tolist())).most_common(1)[0]
        odd = [r for r in range(self.size) if tuple(rows[r]) != common]
        ranks = [r for r in range(self.size) if tuple(rows[r]) == common][:1] + odd
        NOTICES.dirty = True
        raise MismatchError("collective mismatch: the ranks disagree: " + "; ".join(
            f"rank {r} is in {describe(rows[r])}" for r in ranks) + (
            " (a rank skipped or repeated a collective)"
            if len({int(rows[r][3]) for r in ranks}) > 1 else ""), odd)

    def allreduce(self, x, op="sum"):
        self._check_op(op)
        self._check_open()
        x, back = as_host(x)
        check_reducible(x, op)
        self.stats["calls"] += 1
        self.stats["bytes_sent"] += x.nbytes
        self._begin("allreduce", op, x.dtype.str, x.size, zlib.crc32(repr(x.shape).encode()))
        return back(self._allreduce(x, op).reshape(x.shape))

    def _allreduce(self, x, op):
        MPI = self.transport.MPI
        x = np.ascontiguousarray(x).reshape(-1)
        nan = op == "max" and x.dtype.kind in "fc" and bool(np.isnan(x).any())
        any_nan = self._agree(nan)
        out = np.empty_like(x)
        self._wait(self.mpi_comm.Iallreduce(x, out, op=MPI.SUM if op == "sum" else MPI.MAX),
                   "Iallreduce")
        if any_nan:  # MPI's MAX drops NaN; np.maximum (and Kylix) propagate it
            mask = np.isnan(x).astype(np.uint8)
            seen = np.empty_like(mask)
            self._wait(self.mpi_comm.Iallreduce(mask, seen, op=MPI.MAX), "NaN mask")
            out[seen.astype(bool)] = np.nan
        return out

    def barrier(self):
        self._check_open()
        self._begin("barrier")
        self._agree()

    def split(self, color, key=None):
        self._check_open()
        self._begin("split")
        self._agree()
        sub = self.mpi_comm.Split(int(color), self.rank if key is None else int(key))
        return MPICommunicator(sub, timeout=self.transport.timeout)

    def dup(self):
        self._check_open()
        self._begin("dup")
        self._agree()
        return MPICommunicator(self.mpi_comm.Dup(), self.degrees, timeout=self.transport.timeout)

    def close(self):
        if not self._closed:
            self._closed = True
            self.transport.close(self._seq)
