"""Fused GLM kernels: the ADAGrad step fused with the gradient ``A*S^T`` (BIDMach ``multUpdate``).

The unfused step computes the full ``k x n`` gradient ``G = D * S^T`` (writing all ``n`` feature
columns) and then sweeps the whole model, accumulator and gradient once more for the update.
Only the features that occur in the minibatch ("touched" columns) have a nonzero gradient, so the
fused step works on those alone:

1. :func:`glm_accumulate_touched` makes one pass over the minibatch's nonzeros (examples in
   order).  It numbers the touched features in order of first occurrence and accumulates their
   gradient columns into a *compact* ``n_touched x k`` buffer (summing over examples in
   increasing order, exactly as ``A*S^T`` does).  The ``k x n`` gradient is never built, and no
   ``n``-long marker array is needed: a touched feature is marked by storing ``-(t + 1)`` (its
   position) in its first ADAGrad accumulator ``sumsq[i, 0]``, which is always >= 0 otherwise;
   the saved value is kept in ``sval[t]``.  So the marker lookup touches the cache line that the
   update needs anyway.
2. :func:`adagrad_glm_update` applies the ADAGrad update (with optional L2 gradient and L1
   proximal terms) to the touched columns and restores the accumulators.

Dense layout as in :mod:`._csc`: a Fortran ``k x n`` matrix is passed as its C-contiguous
``n x k`` transpose.  Positions are stored as floats: exact while ``n_touched < 2^24`` (float32),
which the caller guarantees (``nnz < 2^24``).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

__all__ = ["adagrad_glm_update", "adagrad_glm_update_serial", "glm_accumulate_touched"]


@njit(cache=True, nogil=True, fastmath=True)
def glm_accumulate_touched(indptr, indices, data, DT, sumsqT, touched, sval, gbuf):
    """Accumulate the gradient columns of the touched features.

    Parameters
    ----------
    indptr, indices, data : CSC arrays of the minibatch (``n x m``)
    DT : array (m, k), C-contiguous
        Scaled derivatives of the examples: the gradient is ``D * S^T``.
    sumsqT : array (n, k), C-contiguous
        ADAGrad accumulators (all >= 0 on entry); ``sumsqT[i, 0]`` is set to ``-(t + 1)`` for
        the ``t``-th touched feature (restored by :func:`adagrad_glm_update`).
    touched : int64 array (>= nnz,)
        Out: the touched features in order of first occurrence.
    sval : array (>= nnz,)
        Out: the saved ``sumsqT[touched[t], 0]``.
    gbuf : array (>= nnz, k)
        Out: ``gbuf[t] = sum_j S[touched[t], j] * DT[j]``.

    Returns
    -------
    n_touched : int
    """
    m = indptr.shape[0] - 1
    k = DT.shape[1]
    nt = 0
    for j in range(m):
        for p in range(indptr[j], indptr[j + 1]):
            i = indices[p]
            v = sumsqT[i, 0]
            x = data[p]
            if v >= 0:
                t = nt
                nt += 1
                touched[t] = i
                sval[t] = v
                sumsqT[i, 0] = -(t + 1)
                for r in range(k):
                    gbuf[t, r] = DT[j, r] * x
            else:
                t = np.int64(-v) - 1
                for r in range(k):
                    gbuf[t, r] += DT[j, r] * x
    return nt


@njit(cache=True, nogil=True, fastmath=True, inline="always")
def _update_column(t, coefT, sumsqT, touched, sval, gbuf, lr, eps, l2, l1):
    k = coefT.shape[1]
    i = touched[t]
    for r in range(k):
        w = coefT[i, r]
        g = gbuf[t, r] + l2 * w
        sr = (sval[t] if r == 0 else sumsqT[i, r]) + g * g
        sumsqT[i, r] = sr
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
        coefT[i, r] = w


@njit(parallel=True, cache=True, nogil=True, fastmath=True)
def adagrad_glm_update(coefT, sumsqT, touched, sval, gbuf, nt, lr, eps, l2, l1):
    """ADAGrad step on the touched feature columns (parallel over them).

    For each touched feature ``i = touched[t]`` and output ``r``::

        g          = gbuf[t, r] + l2 * coef[i, r]
        sumsq      += g * g                  (sumsq[i, 0] taken from sval[t])
        step       = lr / (sqrt(sumsq) + eps)
        coef       -= step * g
        coef       = sign(coef) * max(|coef| - l1 * step, 0)      (when l1 > 0)

    Parameters
    ----------
    coefT, sumsqT : arrays (n, k), C-contiguous (updated in place; the marks are removed)
    touched, sval, gbuf, nt
        From :func:`glm_accumulate_touched`.
    lr, eps, l2, l1 : float
    """
    for t in prange(nt):
        _update_column(t, coefT, sumsqT, touched, sval, gbuf, lr, eps, l2, l1)


@njit(cache=True, nogil=True, fastmath=True)
def adagrad_glm_update_serial(coefT, sumsqT, touched, sval, gbuf, nt, lr, eps, l2, l1):
    """:func:`adagrad_glm_update` on the calling thread (for small updates, where waking the
    thread pool costs more than the work)."""
    for t in range(nt):
        _update_column(t, coefT, sumsqT, touched, sval, gbuf, lr, eps, l2, l1)
