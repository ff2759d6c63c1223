"""Pictures of a training run (matplotlib, imported only when a plot is drawn)."""

from __future__ import annotations

import math

import numpy as np

from roofline.gmat import require_matplotlib

__all__ = ["current_rate", "plot_cd_trace", "plot_trace"]


def _column(trace, key):
    return np.array([float(r.get(key, math.nan)) for r in trace], dtype=float)


def current_rate(trace):
    """The throughput between consecutive trace rows: ``(examples, examples per second)``.

    Each rate is the examples trained between two rows over the wall-clock seconds between
    them (held-out evaluations included); the interval from the start to the first row (numba
    compilation, the first minibatches) is left out, and a row that trained nothing since the
    previous one (a pass end right after an evaluation) adds its seconds to the next interval.

    Parameters
    ----------
    trace : list of dict
        Rows with ``examples`` and ``seconds``.

    Returns
    -------
    tuple of two numpy.ndarray
        The examples trained at the end of each interval, and the interval's rate.
    """
    ex, t = _column(trace, "examples"), _column(trace, "seconds")
    xs, rates = [], []
    j = 0
    for i in range(1, len(trace)):
        if not (ex[i] > ex[j] and t[i] > t[j]):
            continue
        xs.append(ex[i])
        rates.append((ex[i] - ex[j]) / (t[i] - t[j]))
        j = i
    return np.array(xs, dtype=float), np.array(rates, dtype=float)


def plot_trace(trace, axes=None, *, path=None, title=None):
    """Plot a :class:`~roofline.learners.Learner` trace against examples trained on.

    Left: the training loss (mean over the minibatches since the last evaluation) and the
    held-out loss.  Right: the current throughput, examples per second between consecutive
    rows (:func:`current_rate`: the warm-up before the first row, numba compilation included,
    left out), and dashed, the trace's ``examples_per_s`` (since the start, warm-up included).

    Parameters
    ----------
    trace : list of dict
        Rows with ``examples``, ``train_loss``, ``heldout_loss`` and ``examples_per_s``
        (:attr:`TrainResult.trace`, or ``trace.json`` written by ``roofline train``).
    axes : sequence of two matplotlib.axes.Axes, optional
        Where to draw; a new figure with two panels by default.
    path : str or path-like, optional
        Also save the figure there (format from the extension).
    title : str, optional
        Figure title.

    Returns
    -------
    numpy.ndarray of matplotlib.axes.Axes
        The two panels (loss, throughput).

    Raises
    ------
    ValueError
        When the trace is empty.
    """
    if not trace:
        raise ValueError("the trace is empty: train first (or evaluate with eval_every > 0)")
    plt = require_matplotlib("TrainResult.plot()")
    if axes is None:
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    axes = np.asarray(axes).ravel()
    ex = _column(trace, "examples")
    for key, label, style in (("train_loss", "train loss", "-o"),
                              ("heldout_loss", "held-out loss", "-s")):
        y = _column(trace, key)
        ok = np.isfinite(y)
        if ok.any():
            axes[0].plot(ex[ok], y[ok], style, ms=3, label=label)
    axes[0].set_xlabel("examples trained on")
    axes[0].set_ylabel("loss")
    axes[0].grid(True, alpha=0.3)
    axes[0].legend()
    rx, rate = current_rate(trace)
    axes[1].plot(rx, rate, "-o", ms=3, color="C2",
                 label="between evaluations (warm-up left out)")
    y = _column(trace, "examples_per_s")
    ok = np.isfinite(y)
    axes[1].plot(ex[ok], y[ok], "--", color="C2", alpha=0.5,
                 label="since the start (warm-up included)")
    axes[1].set_xlabel("examples trained on")
    axes[1].set_ylabel("examples per second (current)")
    axes[1].set_ylim(bottom=0)
    axes[1].legend()
    axes[1].grid(True, alpha=0.3)
    if title:
        axes[0].figure.suptitle(title)
    axes[0].figure.tight_layout()
    if path is not None:
        axes[0].figure.savefig(path, dpi=100)
    return axes


def plot_cd_trace(trace, ax=None, *, path=None, title=None):
    """Plot a coordinate-descent solver's duality gap against time (log y).

    Parameters
    ----------
    trace : list of dict
        Rows with ``seconds`` and ``gap`` (``trace.json`` of ``roofline train`` with a
        ``[solver]`` table).
    ax : matplotlib.axes.Axes, optional
        Where to draw; a new figure by default.
    path : str or path-like, optional
        Also save the figure there.
    title : str, optional
        Axes title.

    Returns
    -------
    matplotlib.axes.Axes

    Raises
    ------
    ValueError
        When the trace is empty.
    """
    if not trace:
        raise ValueError("the trace is empty")
    plt = require_matplotlib("plot_cd_trace()")
    if ax is None:
        fig, ax = plt.subplots(figsize=(6, 4))
    t = _column(trace, "seconds")
    g = _column(trace, "gap")
    ok = np.isfinite(g) & (g > 0)
    ax.plot(t[ok], g[ok], "-o", ms=3, label="duality gap")
    ax.set_yscale("log")
    ax.set_xlabel("seconds")
    ax.set_ylabel("duality gap")
    ax.grid(True, which="both", alpha=0.3)
    if title:
        ax.set_title(title)
    if path is not None:
        ax.figure.savefig(path, dpi=100, bbox_inches="tight")
    return ax
