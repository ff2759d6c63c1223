"""Cost models of the primitives on their actual operands: compulsory bytes and flops.

Compulsory bytes are what any implementation must move between memory and the cores:
the sparse structure read once (``indptr``, ``indices``, values), each *distinct* dense column
that the sparse pattern touches read once (``k * itemsize`` bytes), and each output element
written once (the primitives overwrite their outputs, so nothing is accumulated in memory).
Flops count 2 per multiply-add.  The roofline time ``max(bytes / bandwidth, flops / ceiling)``
is a true lower bound on the run time, so a fraction above 100% means the model is wrong.

The cache-aware roofline (Ilic, Pratas and Sousa, 2014) adds each call's *working set*: the bytes
it touches, in whole cache lines (S's arrays, the 64-byte lines holding the touched columns of
the dense operands, the output).  When a call repeats on the same operands (a training loop's
epochs, a benchmark's repetitions) and the working set fits a cache level, the traffic comes from
that level: :meth:`Cost.level_time` bounds the time by the bandwidth of the fastest level that
holds the working set (:meth:`MachineRoofline.level_for`), beside the DRAM bound of
:meth:`Cost.roofline_time`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from roofline import kernels

from ._arrays import check_csc
from ._machine import MachineRoofline, machine_roofline

__all__ = ["Cost", "cost_mult_as", "cost_mult_ast", "cost_sddmm"]


@dataclass(frozen=True)
class Cost:
    """Compulsory traffic and arithmetic of one primitive call.

    The parameters are also the (read-only) attributes.

    Parameters
    ----------
    primitive : str
        Which primitive: ``"A*S"``, ``"A*S^T"`` or ``"SDDMM"``.
    k : int
        Rows of the dense operands.
    dtype : numpy.dtype
        Value dtype of the operands.
    nnz : int
        Stored entries of the sparse operand.
    bytes : int
        Compulsory bytes (sum of ``breakdown``).
    flops : int
        Floating-point operations (2 per multiply-add).
    breakdown : dict
        Bytes per component (``"sparse"``, ``"dense_in"``, ``"out"``).
    working_set : int
        Bytes the call touches, counted in whole 64-byte cache lines for the dense operands
        (a touched column of ``k * itemsize < 64`` bytes occupies its line); 0 (a hand-made
        cost) means ``bytes``.
    """

    primitive: str
    k: int
    dtype: np.dtype
    nnz: int
    bytes: int
    flops: int
    breakdown: dict = field(default_factory=dict)
    working_set: int = 0

    def footprint(self) -> int:
        """Bytes the call touches: :attr:`working_set`, or ``bytes`` where that is 0.

        Returns
        -------
        int
        """
        return int(self.working_set or self.bytes)

    def level(self, machine: MachineRoofline | None = None) -> str:
        """The fastest memory level that holds this call's working set.

        Parameters
        ----------
        machine : MachineRoofline, optional
            The machine's ceilings; this machine's (:func:`machine_roofline`) when omitted.

        Returns
        -------
        str
            ``"L1"``, ``"L2"``, ``"L3"`` or ``"DRAM"`` (:meth:`MachineRoofline.level_for`).
        """
        m = machine or machine_roofline()
        return m.level_for(self.footprint())[0]

    def level_time(self, machine: MachineRoofline | None = None) -> float:
        """The cache-aware bound: ``max(bytes / bandwidth of the level holding the working set,
        flops / flops ceiling)``, a lower bound on the time of a call whose operands are
        already in that level (a repeated call; a first call's are in DRAM).

        Parameters
        ----------
        machine : MachineRoofline, optional
            The machine's ceilings; this machine's (:func:`machine_roofline`) when omitted.

        Returns
        -------
        float
            Seconds; at most :meth:`roofline_time`.
        """
        m = machine or machine_roofline()
        bw = m.level_for(self.footprint())[1]
        return max(self.bytes / bw, self.flops / m.flops(self.dtype))

    def level_fraction(self, seconds: float, machine: MachineRoofline | None = None) -> float:
        """Fraction of the cache-aware roofline achieved by a call that took ``seconds``.

        Parameters
        ----------
        seconds : float
            Measured run time of the call.
        machine : MachineRoofline, optional
            The machine's ceilings; this machine's (:func:`machine_roofline`) when omitted.

        Returns
        -------
        float
            ``level_time(machine) / seconds``: at most :meth:`fraction`.
        """
        return self.level_time(machine) / seconds

    def roofline_time(self, machine: MachineRoofline | None = None) -> float:
        """Lower bound on the run time: ``max(bytes / bandwidth, flops / flops ceiling)``.

        Parameters
        ----------
        machine : MachineRoofline, optional
            The machine's ceilings; this machine's (:func:`machine_roofline`) when omitted.

        Returns
        -------
        float
            Seconds.
        """
        m = machine or machine_roofline()
        return max(self.bytes / m.bandwidth, self.flops / m.flops(self.dtype))

    def bidmach_time(self, machine: MachineRoofline | None = None) -> float:
        """BIDMach's main-memory figure: one dense word per multiply-add, i.e. a gflops
        "roofline" of ``bandwidth / itemsize``.  On power-law data with caches this is NOT a
        lower bound (hot columns are reused from cache); it is reported only to compare with
        the seed's published numbers.

        Parameters
        ----------
        machine : MachineRoofline, optional
            The machine's ceilings; this machine's (:func:`machine_roofline`) when omitted.

        Returns
        -------
        float
            Seconds: ``flops * itemsize / bandwidth``.
        """
        m = machine or machine_roofline()
        return self.flops / (m.bandwidth / np.dtype(self.dtype).itemsize)

    def fraction(self, seconds: float, machine: MachineRoofline | None = None) -> float:
        """Fraction of the roofline achieved by a call that took ``seconds``.

        Parameters
        ----------
        seconds : float
            Measured run time of the call.
        machine : MachineRoofline, optional
            The machine's ceilings; this machine's (:func:`machine_roofline`) when omitted.

        Returns
        -------
        float
            ``roofline_time(machine) / seconds``: 1.0 is the hardware limit.
        """
        return self.roofline_time(machine) / seconds

    def __str__(self) -> str:
        parts = ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in self.breakdown.items())
        return (
            f"{self.primitive} k={self.k} {np.dtype(self.dtype).name}: "
            f"{self.bytes / 1e6:.1f} MB compulsory ({parts}), {self.flops / 1e9:.3f} gflop"
        )


_LINE = 64  # bytes per cache line


def _line_bytes(ids, n_ids: int, col_bytes: int, sorted_ids: bool = False) -> int:
    """Bytes of the cache lines holding columns ``ids`` (``col_bytes`` each, columns packed
    from a line boundary, as :func:`empty` allocates them), each line counted once."""
    if len(ids) == 0:
        return 0
    if col_bytes >= _LINE:
        return int(n_ids) * -(-col_bytes // _LINE) * _LINE
    lines = np.asarray(ids, dtype=np.int64) * col_bytes // _LINE
    if sorted_ids:
        count = 1 + int(np.count_nonzero(np.diff(lines)))
    else:
        count = int(kernels.count_distinct_rows(lines, lines.shape[0], int(lines.max()) + 1))
    return count * _LINE


def _row_lines(S, n_rows: int, col_bytes: int) -> int:
    """Line bytes of the dense columns indexed by S's row indices (``n_rows`` distinct)."""
    nnz = int(S.indptr[-1])
    if col_bytes >= _LINE or nnz == 0:
        return _line_bytes(range(n_rows), n_rows, col_bytes)
    return _line_bytes(S.indices[:nnz], n_rows, col_bytes)


def _col_lines(S, col_bytes: int) -> int:
    """Line bytes of the dense columns indexed by S's non-empty columns."""
    cols = np.flatnonzero(np.diff(S.indptr))
    return _line_bytes(cols, len(cols), col_bytes, sorted_ids=True)


def _sparse_bytes(S) -> tuple[int, int]:
    nnz = int(S.indptr[-1])
    b = S.indptr.nbytes + nnz * (S.indices.itemsize + S.data.itemsize)
    return nnz, int(b)


def _distinct_rows(S) -> int:
    nnz = int(S.indptr[-1])
    return int(kernels.count_distinct_rows(S.indices, nnz, S.shape[0]))


def _nonempty_cols(S) -> int:
    return int(np.count_nonzero(np.diff(S.indptr)))


def cost_mult_as(S, k: int) -> Cost:
    """Cost of ``A * S`` for ``A`` of shape ``(k, n)`` (``out`` is ``k x m``).

    Parameters
    ----------
    S : CSC matrix, shape (n, m)
        The sparse operand (validated with :func:`check_csc`).
    k : int
        Rows of ``A``.

    Returns
    -------
    Cost
        Bytes: the sparse structure, each distinct row of ``S`` (a column of ``A``) read once,
        the output written once; flops ``2 * k * nnz``.  Working set: the sparse arrays,
        the cache lines of the touched columns of ``A``, the output.
    """
    check_csc(S, "S")
    isz = S.dtype.itemsize
    nnz, sb = _sparse_bytes(S)
    rows = _distinct_rows(S)
    dense = rows * k * isz
    out = k * S.shape[1] * isz
    ws = sb + _row_lines(S, rows, k * isz) + out
    return Cost("A*S", k, S.dtype, nnz, sb + dense + out, 2 * k * nnz,
                {"sparse": sb, "dense_in": dense, "out": out}, ws)


def cost_mult_ast(S, k: int) -> Cost:
    """Cost of ``A * S^T`` for ``A`` of shape ``(k, m)`` (``out`` is ``k x n``, all written).

    Parameters
    ----------
    S : CSC matrix, shape (n, m)
        The sparse operand (validated with :func:`check_csc`).
    k : int
        Rows of ``A``.

    Returns
    -------
    Cost
        Bytes: the sparse structure, each non-empty column of ``S`` (a column of ``A``) read
        once, the whole output written once; flops ``2 * k * nnz``.
    """
    check_csc(S, "S")
    isz = S.dtype.itemsize
    nnz, sb = _sparse_bytes(S)
    dense = _nonempty_cols(S) * k * isz
    out = k * S.shape[0] * isz
    ws = sb + _col_lines(S, k * isz) + out
    return Cost("A*S^T", k, S.dtype, nnz, sb + dense + out, 2 * k * nnz,
                {"sparse": sb, "dense_in": dense, "out": out}, ws)


def cost_sddmm(S, k: int, scale: bool = True) -> Cost:
    """Cost of ``SDDMM(S, A, B)`` for ``A`` ``(k, n)``, ``B`` ``(k, m)`` (``out``: nnz values).

    Without ``scale`` the values of ``S`` need not be read.

    Parameters
    ----------
    S : CSC matrix, shape (n, m)
        The sparse operand (validated with :func:`check_csc`).
    k : int
        Rows of ``A`` and ``B``.
    scale : bool, default True
        Whether the products are multiplied by the values of ``S``.

    Returns
    -------
    Cost
        Bytes: the sparse structure, the touched columns of ``A`` and ``B`` read once, ``nnz``
        values written; flops ``2 * k * nnz`` (plus ``nnz`` with ``scale``).
    """
    check_csc(S, "S")
    isz = S.dtype.itemsize
    nnz, sb = _sparse_bytes(S)
    if not scale:
        sb -= nnz * S.data.itemsize
    rows = _distinct_rows(S)
    dense = (rows + _nonempty_cols(S)) * k * isz
    out = nnz * isz
    ws = sb + _row_lines(S, rows, k * isz) + _col_lines(S, k * isz) + out
    return Cost("SDDMM", k, S.dtype, nnz, sb + dense + out, 2 * k * nnz + (nnz if scale else 0),
                {"sparse": sb, "dense_in": dense, "out": out}, ws)
