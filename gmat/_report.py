"""Side-by-side measurement of the primitives against their peers, in roofline units.

For each primitive and ``k`` this times Roofline's kernel and the peer (scipy.sparse for ``A*S``
and ``A*S^T``; the best of two numpy formulations for SDDMM, which scipy lacks) on the same data
in the same process, and reports achieved gflop/s and GB/s (compulsory bytes / time), the fraction
of this machine's measured (DRAM) roofline, the fraction of the cache-aware roofline of the level
that holds the call's working set, BIDMach's main-memory figure (labelled: not a bound on
power-law data) and the speed ratio to the peer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._arrays import empty
from ._cost import Cost, cost_mult_as, cost_mult_ast, cost_sddmm
from ._machine import MachineRoofline, _best, machine_roofline
from ._primitives import mult_as, mult_ast, sddmm

__all__ = [
    "PrimitiveTiming",
    "RooflineReport",
    "benchmark_primitives",
    "best_time",
    "roofline_report",
]

PRIMITIVES = ("A*S", "A*S^T", "SDDMM")


@dataclass(frozen=True)
class PrimitiveTiming:
    """One row of a roofline report: a primitive and its peer timed on the same data.

    Parameters
    ----------
    primitive : {"A*S", "A*S^T", "SDDMM"}
        The primitive timed.
    k : int
        Rows of the dense operands.
    dtype : str
        Value dtype name (``"float32"`` or ``"float64"``).
    seconds : float
        Best wall time of Roofline's call.
    peer : str
        The peer's name (``"scipy.sparse"`` or ``"numpy"``).
    peer_seconds : float
        Best wall time of the peer (NaN when not timed).
    cost : Cost
        Compulsory bytes and flops of the call.
    machine : MachineRoofline
        The ceilings the fractions are taken against.
    """

    primitive: str
    k: int
    dtype: str
    seconds: float
    peer: str
    peer_seconds: float
    cost: Cost
    machine: MachineRoofline

    @property
    def gflops(self) -> float:
        """Achieved gflop/s of Roofline's call."""
        return self.cost.flops / self.seconds / 1e9

    @property
    def gbytes(self) -> float:
        """Compulsory bytes per second of Roofline's call, in GB/s."""
        return self.cost.bytes / self.seconds / 1e9

    @property
    def fraction(self) -> float:
        """Fraction of the true roofline (a lower bound on time): at most 1."""
        return self.cost.fraction(self.seconds, self.machine)

    @property
    def level(self) -> str:
        """The memory level that holds the call's working set (``"L1"`` ... ``"DRAM"``)."""
        return self.cost.level(self.machine)

    @property
    def level_fraction(self) -> float:
        """Fraction of the cache-aware roofline: the bound of the level holding the working
        set (:meth:`Cost.level_time`); at most :attr:`fraction`."""
        return self.cost.level_fraction(self.seconds, self.machine)

    @property
    def bidmach_fraction(self) -> float:
        """BIDMach's main-memory figure (NOT a bound on power-law data; may exceed 1)."""
        return self.cost.bidmach_time(self.machine) / self.seconds

    @property
    def peer_ratio(self) -> float:
        """How many times faster than the peer."""
        return self.peer_seconds / self.seconds

    @property
    def peer_fraction(self) -> float:
        """Fraction of the true roofline the peer achieves."""
        return self.cost.fraction(self.peer_seconds, self.machine)


@dataclass
class RooflineReport:
    """A machine roofline and a table of primitive timings; ``str()`` prints both.

    Parameters
    ----------
    machine : MachineRoofline
        This machine's measured ceilings.
    rows : list of PrimitiveTiming
        One row per primitive and ``k`` (empty for a machine-only report).
    data : str
        A description of the data the rows were timed on.

    Examples
    --------
    >>> from roofline import gmat
    >>> S = gmat.powerlaw_csc(4096, 2000, 10, random_state=0)
    >>> report = gmat.roofline_report(S, ks=(1,), repeat=1)
    >>> [r.primitive for r in report.rows]
    ['A*S', 'A*S^T', 'SDDMM']
    """

    machine: MachineRoofline
    rows: list
    data: str = ""

    def plot(self, ax=None, *, peers: bool = True, path=None):
        """Draw the machine's roofline with each primitive under it (BIDMach's Fig. 1), and
        the cache levels as further ceilings (the cache-aware roofline).

        Log-log axes: arithmetic intensity (flops per compulsory byte) against achieved
        gflop/s.  The black line is the DRAM roofline (the bandwidth slope, then the flops
        ceiling); each measured cache level (L1, L2, L3) is a dashed slope of its bandwidth
        up to the same flops ceiling; each row is a filled marker at its intensity and
        gflop/s, its peer a hollow one.  Needs matplotlib (``pip install 'roofline[plot]'``).

        Parameters
        ----------
        ax : matplotlib.axes.Axes, optional
            Axes to draw on; a new figure by default.
        peers : bool, default True
            Also place the peers (scipy.sparse / numpy).
        path : str or path-like, optional
            Also save the figure there (format from the extension).

        Returns
        -------
        matplotlib.axes.Axes

        Raises
        ------
        ImportError
            When matplotlib is not installed.
        """
        from ._plot import plot_roofline

        return plot_roofline(self, ax, peers=peers, path=path)

    def __str__(self) -> str:
        lines = [str(self.machine)]
        if self.data:
            lines.append(f"Data: {self.data}")
        if self.rows:
            head = (
                f"{'primitive':<7} {'k':>4} {'dtype':<7} {'ms':>8} {'gflop/s':>8} {'GB/s':>6} "
                f"{'roofline':>8} {'level':>5} {'% level':>8} {'BIDMach*':>8} {'peer':<12} "
                f"{'peer ms':>8} {'peer %rl':>8} {'x peer':>6}"
            )
            lines += [head, "-" * len(head)]
            for r in self.rows:
                lines.append(
                    f"{r.primitive:<7} {r.k:>4} {r.dtype:<7} {r.seconds * 1e3:8.2f} "
                    f"{r.gflops:8.2f} {r.gbytes:6.1f} {r.fraction:8.1%} {r.level:>5} "
                    f"{r.level_fraction:8.1%} {r.bidmach_fraction:8.1%} {r.peer:<12} "
                    f"{r.peer_seconds * 1e3:8.2f} {r.peer_fraction:8.1%} "
                    f"{r.peer_ratio:6.2f}"
                )
            lines.append(
                "roofline = max(compulsory bytes / bandwidth, flops / FMA ceiling) / time (a true "
                "bound on DRAM); % level = the same against the bandwidth of the cache level "
                "holding the call's working set (the cache-aware roofline, a bound for repeated "
                "calls); *BIDMach's main-memory figure (one word per multiply-add) is NOT a bound "
                "on power-law data."
            )
        return "\n".join(lines)

    def to_markdown(self) -> str:
        """The table as GitHub markdown.

        Returns
        -------
        str
            A header, a separator and one line per row.
        """
        out = [
            "| primitive | k | dtype | ms | gflop/s | GB/s | % roofline | level | % level "
            "| BIDMach fig.* | peer | peer ms | x peer |",
            "|---|---:|---|---:|---:|---:|---:|---|---:|---:|---|---:|---:|",
        ]
        for r in self.rows:
            out.append(
                f"| {r.primitive} | {r.k} | {r.dtype} | {r.seconds * 1e3:.2f} | {r.gflops:.2f} "
                f"| {r.gbytes:.1f} | {r.fraction:.0%} | {r.level} | {r.level_fraction:.0%} "
                f"| {r.bidmach_fraction:.0%} | {r.peer} "
                f"| {r.peer_seconds * 1e3:.2f} | {r.peer_ratio:.2f} |"
            )
        return "\n".join(out)


def best_time(fn, repeat: int = 5) -> float:
    """Best wall time in seconds of ``repeat`` calls of ``fn()``, after one warm-up call
    (JIT compilation, first touch of the output) that is not timed.

    Parameters
    ----------
    fn : callable
        Called with no arguments.
    repeat : int, default 5
        Timed calls.

    Returns
    -------
    float
        The shortest of the timed calls, in seconds.
    """
    fn()
    return _best(fn, repeat)


def _dense(rng, k, n, dtype):
    """A dense operand as gmat allocates one (:func:`empty`: Fortran order, first column on a
    cache-line boundary, so a 64-byte column is one cache line; numpy's 16-byte alignment
    would split every such column over two lines, for the peer as for us)."""
    shape = (n,) if k == 1 else (k, n)
    out = empty(shape, dtype)
    out[...] = rng.standard_normal(shape)
    return out


def _sddmm_numpy_gather(S, A, B):
    rows = S.indices
    cols = np.repeat(np.arange(S.shape[1]), np.diff(S.indptr))
    if A.ndim == 1:
        return A[rows] * B[cols] * S.data
    return np.einsum("ij,ij->j", A[:, rows], B[:, cols]) * S.data


def _sddmm_numpy_rows(S, A, B):
    rows = S.indices
    cols = np.repeat(np.arange(S.shape[1]), np.diff(S.indptr))
    if A.ndim == 1:
        return A[rows] * B[cols] * S.data
    return (A.T[rows] * B.T[cols]).sum(axis=1) * S.data


def benchmark_primitives(
    S,
    ks=(1, 16, 128),
    *,
    primitives=PRIMITIVES,
    repeat: int = 5,
    peers: bool = True,
    machine: MachineRoofline | None = None,
    random_state=0,
) -> list:
    """Time the primitives and their peers on ``S`` for each ``k``.

    Parameters
    ----------
    S : CSC matrix (n_features x n_examples)
    ks : iterable of int
    primitives : iterable of {"A*S", "A*S^T", "SDDMM"}
    repeat : int
        Timed repetitions after a warm-up; the best is kept.
    peers : bool
        Also time the peer (scipy.sparse / numpy); otherwise ``peer_seconds`` is NaN.
    machine : MachineRoofline, optional
        Defaults to :func:`machine_roofline`.
    random_state : int or numpy.random.Generator, default 0
        Seeds the dense operands.

    Returns
    -------
    list of PrimitiveTiming
    """
    machine = machine or machine_roofline()
    rng = np.random.default_rng(random_state)
    n, m = S.shape
    dtype = S.dtype
    ST = S.T  # CSR view of S^T (no copy): scipy's own fastest route for A*S
    rows = []
    nan = float("nan")
    for k in ks:
        for prim in primitives:
            if prim == "A*S":
                A = _dense(rng, k, n, dtype)
                out = empty((m,) if k == 1 else (k, m), dtype)
                t = best_time(lambda A=A, out=out: mult_as(A, S, out), repeat)
                # scipy's best layout: (S^T @ A^T) with A^T C-contiguous (free for F-ordered A)
                peer_t = best_time(lambda A=A: ST @ A.T, repeat) if peers else nan
                cost, peer = cost_mult_as(S, k), "scipy.sparse"
            elif prim == "A*S^T":
                A = _dense(rng, k, m, dtype)
                out = empty((n,) if k == 1 else (k, n), dtype)
                t = best_time(lambda A=A, out=out: mult_ast(A, S, out), repeat)
                peer_t = best_time(lambda A=A: S @ A.T, repeat) if peers else nan
                cost, peer = cost_mult_ast(S, k), "scipy.sparse"
            elif prim == "SDDMM":
                A = _dense(rng, k, n, dtype)
                B = _dense(rng, k, m, dtype)
                out = np.empty(S.nnz, dtype)
                t = best_time(lambda A=A, B=B, out=out: sddmm(S, A, B, out), repeat)
                if peers:
                    peer_t = min(
                        best_time(lambda A=A, B=B: _sddmm_numpy_gather(S, A, B), repeat),
                        best_time(lambda A=A, B=B: _sddmm_numpy_rows(S, A, B), repeat),
                    )
                else:
                    peer_t = nan
                cost, peer = cost_sddmm(S, k), "numpy"
            else:
                raise ValueError(f"unknown primitive {prim!r}; expected one of {PRIMITIVES}")
            rows.append(PrimitiveTiming(prim, k, np.dtype(dtype).name, t, peer, peer_t, cost,
                                        machine))
    return rows


def roofline_report(
    S=None,
    ks=(),
    *,
    remeasure: bool = False,
    repeat: int = 5,
    peers: bool = True,
) -> RooflineReport:
    """This machine's roofline and, if ``S`` is given, the primitive table on ``S``.

    Parameters
    ----------
    S : CSC matrix, optional
        Data to time the primitives on (e.g. :func:`powerlaw_csc`).
    ks : iterable of int
        Dense row counts to time.
    remeasure : bool
        Re-measure the machine instead of using the cached figures.
    repeat : int, default 5
        Timed repetitions per primitive; the best is kept.
    peers : bool, default True
        Also time the peers (scipy.sparse, numpy).

    Returns
    -------
    RooflineReport
        ``print()`` it for the table, ``.plot()`` it for the picture, ``.to_markdown()``.

    Examples
    --------
    >>> from roofline import gmat
    >>> report = gmat.roofline_report()          # the machine only (cached after the first)
    >>> report.machine.bandwidth > 0
    True
    """
    machine = machine_roofline(remeasure=remeasure)
    rows = []
    desc = ""
    if S is not None:
        rows = benchmark_primitives(S, ks, repeat=repeat, peers=peers, machine=machine)
        desc = (
            f"{S.shape[0]} features x {S.shape[1]} examples, nnz {S.nnz} "
            f"({S.nnz / max(S.shape[1], 1):.1f} per example), {S.dtype}"
        )
    return RooflineReport(machine, rows, desc)
