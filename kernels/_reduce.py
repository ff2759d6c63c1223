"""The node-local loops of a sparse all-reduce (Kylix): add received values into a union at
precomputed positions, and gather values by position.

Both are single passes over their inputs that release the GIL (the ranks of the ``threads``
backend run them at once).  Positions within one call are distinct, so the order of the
additions is that of the callers' member loop, the same on every backend.
"""

from __future__ import annotations

from numba import njit

__all__ = ["reduce_gather", "reduce_scatter_add"]


@njit(cache=True, nogil=True)
def reduce_scatter_add(acc, pos, vals):
    """``acc[pos[i]] += vals[i]`` for every ``i`` (``pos`` distinct, 1-D arrays)."""
    for i in range(pos.shape[0]):
        acc[pos[i]] += vals[i]


@njit(cache=True, nogil=True)
def reduce_gather(src, pos, out):
    """``out[i] = src[pos[i]]`` for every ``i`` (1-D arrays)."""
    for i in range(pos.shape[0]):
        out[i] = src[pos[i]]
