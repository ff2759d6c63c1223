"""Pictures of a roofline report (matplotlib, imported only when a plot is drawn).

The roofline picture of Williams, Waterman and Patterson (2009), as in BIDMach's Fig. 1:
arithmetic intensity (flops per compulsory byte) on the x axis, achieved gflop/s on the y axis,
both logarithmic.  The machine's roofline is the bandwidth slope ``bandwidth * intensity`` up to
the ridge point and the flops ceiling after it; each primitive call is a point at its intensity
and its achieved gflop/s, and its peer (scipy.sparse or numpy) a hollow point at the same
intensity.  A point's distance below the roofline is the time it leaves on the table.

The cache levels of the cache-aware roofline (Ilic, Pratas and Sousa, 2014) are dashed ceilings
above the DRAM slope: the read bandwidth of a working set held by L1, L2 or L3, up to the same
flops ceiling.  A call whose working set one of them holds is bounded by that level's line when
it is repeated on the same operands.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["plot_roofline", "require_matplotlib"]

_MARKERS = {"A*S": "o", "A*S^T": "s", "SDDMM": "^"}
_LEVEL_STYLE = {"L1": ":", "L2": "-.", "L3": "--"}


def require_matplotlib(what: str):
    """Import matplotlib's pyplot, or raise an ImportError saying how to install it.

    Parameters
    ----------
    what : str
        The function that needs matplotlib, named in the error.

    Returns
    -------
    module
        ``matplotlib.pyplot``.

    Raises
    ------
    ImportError
        When matplotlib is not installed; the message names ``pip install roofline[plot]``.
    """
    try:
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError(
            f"{what} needs matplotlib, an optional dependency: pip install 'roofline[plot]' "
            f"(or pip install matplotlib)"
        ) from e
    return plt


def plot_roofline(report, ax=None, *, peers: bool = True, path=None):
    """Draw a :class:`~roofline.gmat.RooflineReport` as a roofline picture.

    Parameters
    ----------
    report : RooflineReport
        The machine's ceilings and the primitive timings to place under them.
    ax : matplotlib.axes.Axes, optional
        Axes to draw on; a new figure by default.
    peers : bool, default True
        Also place each row's peer (hollow marker at the same intensity).
    path : str or path-like, optional
        Save the figure there (PNG, SVG or PDF by the extension).

    Returns
    -------
    matplotlib.axes.Axes
        The axes drawn on (``ax.figure`` is the figure).
    """
    plt = require_matplotlib("RooflineReport.plot()")
    if ax is None:
        fig, ax = plt.subplots(figsize=(7, 5))
    m = report.machine
    rows = list(report.rows)
    dtypes = sorted({r.dtype for r in rows}) or ["float32"]
    intens = [r.cost.flops / r.cost.bytes for r in rows if r.cost.bytes > 0]
    ridge = min(m.flops(d) for d in dtypes) / m.bandwidth
    levels = [lv for lv in m.levels() if lv[0] != "DRAM"]
    fastest = max([m.bandwidth, *(bw for _, _, bw in levels)])
    lo = min([ridge / 100, min(m.flops(d) for d in dtypes) / fastest / 10,
              *(i / 3 for i in intens)])
    hi = max([ridge * 10, *(i * 3 for i in intens)])
    x = np.logspace(math.log10(lo), math.log10(hi), 256)
    for d in dtypes:
        ceiling = m.flops(d)
        y = np.minimum(m.bandwidth * x, ceiling) / 1e9
        ax.plot(x, y, "-", color="black", lw=2,
                label=f"roofline {d}: {m.bandwidth / 1e9:.1f} GB/s, {ceiling / 1e9:.0f} gflop/s")
    top = max(m.flops(d) for d in dtypes)
    for name, cap, bw in levels:
        ax.plot(x, np.minimum(bw * x, top) / 1e9, _LEVEL_STYLE.get(name, "--"), color="0.45",
                lw=1.2, label=f"{name}: {bw / 1e9:.1f} GB/s (holds {cap / 2**20:.3g} MiB)")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    ks = sorted({r.k for r in rows})
    for r in rows:
        inten = r.cost.flops / r.cost.bytes
        color = colors[ks.index(r.k) % len(colors)]
        marker = _MARKERS.get(r.primitive, "D")
        level = r.level
        extra = "" if level == "DRAM" else f", {r.level_fraction:.0%} of {level}"
        ax.plot([inten], [r.gflops], marker=marker, ls="none", color=color, ms=9,
                label=f"{r.primitive} k={r.k} ({r.fraction:.0%} of roofline{extra})")
        if peers and np.isfinite(r.peer_seconds) and r.peer_seconds > 0:
            ax.plot([inten], [r.cost.flops / r.peer_seconds / 1e9], marker=marker, ls="none",
                    mfc="none", color=color, ms=9,
                    label=f"  {r.peer} (Roofline {r.peer_ratio:.1f}x as fast)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (flop per compulsory byte)")
    ax.set_ylabel("achieved gflop/s")
    title = (f"{'Cache-aware roofline' if levels else 'Roofline'}: {m.cpu or 'this machine'}, "
             f"{m.threads} threads")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if path is not None:
        ax.figure.savefig(path, dpi=100, bbox_inches="tight")
    return ax
