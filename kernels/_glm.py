"""Fused GLM kernels: the ADAGrad step fused with the gradient ``A*S^T`` (BIDMach ``multUpdate``).

The unfused step computes the full ``k x n`` gradient ``G = D * S^T`` (zeroing and writing all
``n`` feature columns) and then sweeps the whole model, accumulator and gradient once more for the
update.  Only the features that occur in the minibatch ("touched" columns) have a nonzero
gradient, so the fused step:

1. :func:`glm_touched_transpose` lists the touched features (in order of first occurrence) and,
   for each, the examples where it occurs with their values: a transposed (CSR-like) view of the
   minibatch, built in ``O(nnz)`` with a persistent ``mark`` array of length ``n`` that is ``-1``
   everywhere between calls;
2. :func:`adagrad_glm_update` computes, per touched feature, the ``k`` gradient entries from that
   list (summing over examples in increasing order, as ``A*S^T`` does) and applies the ADAGrad
   update (with optional L2 gradient and L1 proximal terms on the touched columns) in registers:
   the gradient matrix is never materialised.  It then restores ``mark`` to ``-1``.

Dense layout as in :mod:`._csc`: a Fortran ``k x n`` matrix is passed as its C-contiguous
``n x k`` transpose.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

__all__ = ["adagrad_glm_update", "glm_touched_transpose"]


@njit(cache=True, nogil=True)
def glm_touched_transpose(indptr, indices, data, mark, touched, offsets, ex, val, tpos):
    """Transpose the minibatch onto its touched features.

    Parameters
    ----------
    indptr, indices, data : CSC arrays of the minibatch (``n x m``)
    mark : int32 array (n,)
        ``-1`` everywhere on entry; on exit ``mark[i]`` is the position of feature ``i`` in
        ``touched`` (restored by :func:`adagrad_glm_update`).
    touched : int64 array (>= nnz,)
        Out: the touched features, in order of first occurrence.
    offsets : int64 array (>= nnz + 1,)
        Out: ``ex[offsets[t]:offsets[t+1]]`` are the examples of feature ``touched[t]``.
    ex : int32 array (>= nnz,), val : array (>= nnz,)
        Out: example indices (increasing within a feature) and values.
    tpos : int32 array (>= nnz,)
        Scratch: the touched position of each nonzero (saves a second random ``mark`` lookup).

    Returns
    -------
    n_touched : int
    """
    m = indptr.shape[0] - 1
    nt = 0
    for j in range(m):
        for p in range(indptr[j], indptr[j + 1]):
            i = indices[p]
            t = mark[i]
            if t < 0:
                t = nt
                mark[i] = nt
                touched[nt] = i
                offsets[nt + 1] = 0
                nt += 1
            offsets[t + 1] += 1
            tpos[p - indptr[0]] = t
    offsets[0] = 0
    for t in range(nt):
        offsets[t + 1] += offsets[t]
    # fill, using offsets[t] as a cursor (shifted back afterwards)
    for j in range(m):
        for p in range(indptr[j], indptr[j + 1]):
            t = tpos[p - indptr[0]]
            q = offsets[t]
            ex[q] = j
            val[q] = data[p]
            offsets[t] = q + 1
    for t in range(nt, 0, -1):
        offsets[t] = offsets[t - 1]
    offsets[0] = 0
    return nt


@njit(parallel=True, cache=True, nogil=True, fastmath=True)
def adagrad_glm_update(coefT, sumsqT, DT, mark, touched, offsets, ex, val, nt, lr, eps, l2, l1):
    """ADAGrad step on the touched feature columns, gradient computed on the fly.

    For each touched feature ``i`` and output ``r``::

        g          = sum_{(i, j) in S} DT[j, r] * S[i, j]  + l2 * coefT[i, r]
        sumsq      += g * g
        step       = lr / (sqrt(sumsq) + eps)
        coef       -= step * g
        coef       = sign(coef) * max(|coef| - l1 * step, 0)      (when l1 > 0)

    Parameters
    ----------
    coefT, sumsqT : arrays (n, k), C-contiguous (updated in place)
    DT : array (m, k), C-contiguous
        Derivatives ``dl/deta`` of the minibatch's examples, already scaled (e.g. by
        ``w_j / sum w``).
    mark, touched, offsets, ex, val, nt
        From :func:`glm_touched_transpose`; ``mark`` is reset to ``-1`` on the touched features.
    lr, eps, l2, l1 : float
    """
    k = coefT.shape[1]
    for t in prange(nt):
        i = touched[t]
        lo = offsets[t]
        hi = offsets[t + 1]
        c = coefT[i]
        s = sumsqT[i]
        for r in range(k):
            g = 0.0
            for q in range(lo, hi):
                g += DT[ex[q], r] * val[q]
            w = c[r]
            g += l2 * w
            sr = s[r] + g * g
            s[r] = sr
            step = lr / (np.sqrt(sr) + eps)
            w -= step * g
            if l1 > 0.0:
                a = abs(w) - l1 * step
                if a <= 0.0:
                    w = 0.0
                elif w < 0.0:
                    w = -a
                else:
                    w = a
            c[r] = w
        mark[i] = -1
