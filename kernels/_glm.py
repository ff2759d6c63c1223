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

For a GLM the whole step is fused further: :func:`glm_forward_backward` (and its ``k = 1``
form :func:`glm_forward_backward_vec`) computes each example's ``eta = W x_j + b`` (the forward
``A*S``), its loss and derivative, and accumulates the example's gradient into the compact
buffer while its model and accumulator rows are still in cache -- one sweep over the
minibatch's nonzeros instead of three (forward, elementwise loss, ``A*S^T``), with the rows of
the nonzeros ``FB_PREFETCH_DISTANCE`` ahead prefetched.  Then :func:`adagrad_glm_update`.

Dense layout as in :mod:`._csc`: a Fortran ``k x n`` matrix is passed as its C-contiguous
``n x k`` transpose.  Positions are stored as floats: exact while ``n_touched < 2^24`` (float32),
which the caller guarantees (``nnz < 2^24``).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ._losses import glm_loss_deriv
from ._prefetch import prefetch_row
from ._threads import parallel_njit

__all__ = [
    "adagrad_glm_update",
    "adagrad_glm_update_serial",
    "glm_accumulate_touched",
    "glm_adagrad_online",
    "glm_adagrad_online_vec",
    "glm_forward_backward",
    "glm_forward_backward_vec",
    "glm_loss_deriv_cols",
]

# Nonzeros ahead whose model and accumulator rows are prefetched by glm_forward_backward (the
# forward gather and the marker pass are both random accesses into ``n x k`` arrays).
FB_PREFETCH_DISTANCE = 32


@njit(cache=True, nogil=True, fastmath=True, inline="always")
def _accumulate_example(s, e, indices, data, d, sumsqT, touched, sval, gbuf, nt):
    """Add ``d * x`` for the nonzeros ``[s, e)`` of one example into the compact gradient of
    the touched features, numbering first touches from ``nt`` (marks as in
    :func:`glm_accumulate_touched`); returns the new number of touched features."""
    k = d.shape[0]
    for p in range(s, e):
        i = np.uint64(indices[p])
        v = sumsqT[i, 0]
        x = data[p]
        if v >= 0:
            t = nt
            nt += 1
            touched[t] = i
            sval[t] = v
            sumsqT[i, 0] = -(t + 1)
            for r in range(k):
                gbuf[t, r] = d[r] * x
        else:
            t = np.int64(-v) - 1
            for r in range(k):
                gbuf[t, r] += d[r] * x
    return nt


@njit(cache=True, nogil=True, fastmath=True, inline="always")
def _accumulate_example_vec(s, e, indices, data, d, sumsq, touched, sval, gbuf, nt):
    """``k = 1`` form of :func:`_accumulate_example` (``d`` a scalar, ``sumsq`` and ``gbuf``
    1-D): the same marks, the same sums."""
    for p in range(s, e):
        i = np.uint64(indices[p])
        v = sumsq[i]
        x = data[p]
        if v >= 0:
            t = nt
            nt += 1
            touched[t] = i
            sval[t] = v
            sumsq[i] = -(t + 1)
            gbuf[t] = d * x
        else:
            gbuf[np.int64(-v) - 1] += d * x
    return nt


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
    nt = 0
    for j in range(m):
        nt = _accumulate_example(indptr[j], indptr[j + 1], indices, data, DT[j], sumsqT,
                                 touched, sval, gbuf, nt)
    return nt


@njit(cache=True, nogil=True, fastmath=True, inline="always")
def _adagrad_coord(w, g, s, lr, eps, l1):
    """One ADAGrad coordinate step with the L1 proximal term: returns ``(w', s')``."""
    s = s + g * g
    step = lr / (np.sqrt(s) + eps)
    w = w - step * g
    if l1 > 0.0:
        a = abs(w) - l1 * step
        if a <= 0.0:
            w = 0.0
        elif w < 0.0:
            w = -a
        else:
            w = a
    return w, s


@njit(cache=True, nogil=True, fastmath=True, inline="always")
def _update_column(t, coefT, sumsqT, touched, sval, gbuf, lr, eps, l2, l1):
    k = coefT.shape[1]
    i = touched[t]
    for r in range(k):
        w = coefT[i, r]
        coefT[i, r], sumsqT[i, r] = _adagrad_coord(
            w, gbuf[t, r] + l2 * w, sval[t] if r == 0 else sumsqT[i, r], lr, eps, l1)


@parallel_njit(cache=True, nogil=True, fastmath=True)
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
    thread pool costs more than the work), prefetching the rows ``FB_PREFETCH_DISTANCE``
    touched features ahead."""
    row_bytes = coefT.shape[1] * coefT.itemsize
    for t in range(nt):
        if t + FB_PREFETCH_DISTANCE < nt:
            q = np.uint64(touched[t + FB_PREFETCH_DISTANCE])
            for off in range(0, row_bytes, 64):
                prefetch_row(coefT, q, off)
                prefetch_row(sumsqT, q, off)
        _update_column(t, coefT, sumsqT, touched, sval, gbuf, lr, eps, l2, l1)


@njit(cache=True, nogil=True, fastmath=True, inline="always")
def _forward_rows(s, e, p_end, indices, data, coefT, sumsqT, b, eta):
    """``eta = b + sum_{p in [s, e)} data[p] * coefT[indices[p]]`` (the forward product of one
    example), prefetching the model and accumulator rows ``FB_PREFETCH_DISTANCE`` nonzeros
    ahead (while ``p < p_end``)."""
    k = coefT.shape[1]
    row_bytes = k * coefT.itemsize
    for r in range(k):
        eta[r] = b[r]
    for p in range(s, e):
        if p < p_end:
            q = np.uint64(indices[p + FB_PREFETCH_DISTANCE])
            for off in range(0, row_bytes, 64):
                prefetch_row(coefT, q, off)
                prefetch_row(sumsqT, q, off)
        i = np.uint64(indices[p])
        x = data[p]
        for r in range(k):
            eta[r] += x * coefT[i, r]


@njit(cache=True, nogil=True, fastmath=True, inline="always")
def _forward_vec(s, e, p_end, indices, data, coef, sumsq, eta):
    """``k = 1`` form of :func:`_forward_rows`: returns ``eta + sum data[p] * coef[indices[p]]``."""
    for p in range(s, e):
        if p < p_end:
            q = np.uint64(indices[p + FB_PREFETCH_DISTANCE])
            prefetch_row(coef, q, 0)
            prefetch_row(sumsq, q, 0)
        eta += data[p] * coef[np.uint64(indices[p])]
    return eta


@njit(cache=True, nogil=True, fastmath=True)
def glm_forward_backward(indptr, indices, data, coefT, b, yT, w, scale, loss, sumsqT, touched,
                         sval, gbuf, g0, eta):
    """Forward pass, loss, derivatives and compact gradient of a GLM minibatch in one sweep.

    For each example ``j`` (column of the minibatch, in order): ``eta = W x_j + b`` (gathering
    the model rows of its nonzeros, prefetched ``FB_PREFETCH_DISTANCE`` nonzeros ahead), the loss
    and its derivative ``d = w_j * scale * dl/deta`` per output, then -- while the example's
    model and accumulator rows are still in cache -- ``d * x_j`` is accumulated into the compact
    gradient of the touched features exactly as :func:`glm_accumulate_touched` does (touched
    features marked by ``-(t + 1)`` in ``sumsqT[i, 0]``).  The minibatch semantics are kept: the
    model is not changed here (:func:`adagrad_glm_update` applies the step afterwards).

    Parameters
    ----------
    indptr, indices, data : CSC arrays of the minibatch (``n x m``)
    coefT : array (n, k), C-contiguous
        The model ``W`` transposed (read only).
    b : array (k,)
        Intercept (zeros when the model has none).
    yT : array (m, k), C-contiguous
        Labels (``{0, 1}`` or ``{-1, 1}`` for the classifiers).
    w : array (m,) or (0,)
        Example weights; an empty array means all ones.
    scale : float
        Multiplies every derivative (``1 / sum_j w_j``: the gradient is the weighted mean).
    loss : int
        Loss code (``_losses.LOSS_CODES``, GLM form).
    sumsqT : array (n, k), C-contiguous
        ADAGrad accumulators (all >= 0 on entry), marked as in :func:`glm_accumulate_touched`.
    touched, sval, gbuf
        Outputs as in :func:`glm_accumulate_touched`.
    g0 : array (k,)
        Out: the intercept gradient ``sum_j d_j``.
    eta : array (k,)
        Scratch.

    Returns
    -------
    n_touched : int
    loss_sum : float
        ``sum_j w_j sum_r l(y_rj, eta_rj)`` (not scaled).
    """
    m = indptr.shape[0] - 1
    k = coefT.shape[1]
    p_end = indptr[m] - FB_PREFETCH_DISTANCE
    has_w = w.shape[0] > 0
    for r in range(k):
        g0[r] = 0
    loss_sum = 0.0
    nt = 0
    for j in range(m):
        s, e = indptr[j], indptr[j + 1]
        _forward_rows(s, e, p_end, indices, data, coefT, sumsqT, b, eta)
        wj = w[j] if has_w else 1.0
        for r in range(k):
            lj, dj = glm_loss_deriv(loss, np.float64(eta[r]), np.float64(yT[j, r]))
            loss_sum += wj * lj
            d = dj * (wj * scale)
            eta[r] = d  # eta now holds the example's scaled derivatives
            g0[r] += d
        nt = _accumulate_example(s, e, indices, data, eta, sumsqT, touched, sval, gbuf, nt)
    return nt, loss_sum


@njit(cache=True, nogil=True, fastmath=True)
def glm_forward_backward_vec(indptr, indices, data, coef, b, y, w, scale, loss, sumsq, touched,
                             sval, gbuf):
    """``k = 1`` case of :func:`glm_forward_backward` (scalars kept in registers).

    ``coef`` and ``sumsq`` are 1-D (``n``), ``b`` a scalar, ``y`` 1-D (``m``), ``gbuf`` 1-D.

    Returns
    -------
    n_touched : int
    loss_sum : float
    g0 : float
        The intercept gradient.
    """
    m = indptr.shape[0] - 1
    p_end = indptr[m] - FB_PREFETCH_DISTANCE
    has_w = w.shape[0] > 0
    g0 = 0.0
    loss_sum = 0.0
    nt = 0
    for j in range(m):
        s, e = indptr[j], indptr[j + 1]
        eta = _forward_vec(s, e, p_end, indices, data, coef, sumsq, coef.dtype.type(b))
        wj = w[j] if has_w else 1.0
        lj, dj = glm_loss_deriv(loss, np.float64(eta), np.float64(y[j]))
        loss_sum += wj * lj
        d = coef.dtype.type(dj * (wj * scale))
        g0 += d
        nt = _accumulate_example_vec(s, e, indices, data, d, sumsq, touched, sval, gbuf, nt)
    return nt, loss_sum, g0


@njit(cache=True, nogil=True, fastmath=True)
def glm_adagrad_online(indptr, indices, data, coefT, sumsqT, b, sumsq0, fit_intercept, yT, w,
                       loss, lr, eps, l2, l1, eta):
    """Online (per-example) ADAGrad over the examples of a minibatch, in order (VW's learner).

    For each example ``j``: ``eta = W x_j + b`` (model rows of the nonzeros
    ``FB_PREFETCH_DISTANCE`` ahead prefetched), ``d = w_j dl/deta``, then at once, on the rows
    just gathered: ``g = d x_ij + l2 W[r, i]``, ``sumsq += g^2``,
    ``W -= lr g / (sqrt(sumsq) + eps)`` (and the L1 proximal step), and the same for the
    intercept (without L2/L1).  Every example sees the model updated by the previous one.

    Parameters
    ----------
    indptr, indices, data : CSC arrays of the minibatch (``n x m``)
    coefT, sumsqT : arrays (n, k), C-contiguous
        Model and ADAGrad accumulator, updated in place.
    b, sumsq0 : arrays (k,)
        Intercept and its accumulator, updated in place when ``fit_intercept``.
    fit_intercept : bool
    yT : array (m, k), C-contiguous
        Labels.
    w : array (m,) or (0,)
        Example weights; empty means all ones.
    loss : int
        Loss code (``_losses.LOSS_CODES``, GLM form).
    lr, eps, l2, l1 : float
    eta : array (k,)
        Scratch.

    Returns
    -------
    loss_sum : float
        ``sum_j w_j sum_r l(y_rj, eta_rj)``, each example's loss taken before its own update
        (progressive validation loss, as VW reports).
    """
    m = indptr.shape[0] - 1
    k = coefT.shape[1]
    p_end = indptr[m] - FB_PREFETCH_DISTANCE
    has_w = w.shape[0] > 0
    loss_sum = 0.0
    for j in range(m):
        s, e = indptr[j], indptr[j + 1]
        _forward_rows(s, e, p_end, indices, data, coefT, sumsqT, b, eta)
        wj = w[j] if has_w else 1.0
        for r in range(k):
            lj, dj = glm_loss_deriv(loss, np.float64(eta[r]), np.float64(yT[j, r]))
            loss_sum += wj * lj
            eta[r] = dj * wj  # eta now holds the example's derivatives
            if fit_intercept:
                b[r], sumsq0[r] = _adagrad_coord(b[r], eta[r], sumsq0[r], lr, eps, 0.0)
        for p in range(s, e):
            i = np.uint64(indices[p])
            x = data[p]
            for r in range(k):
                c = coefT[i, r]
                coefT[i, r], sumsqT[i, r] = _adagrad_coord(c, eta[r] * x + l2 * c,
                                                           sumsqT[i, r], lr, eps, l1)
    return loss_sum


@njit(cache=True, nogil=True, fastmath=True)
def glm_adagrad_online_vec(indptr, indices, data, coef, sumsq, b, fit_intercept, y, w, loss,
                           lr, eps, l2, l1):
    """``k = 1`` case of :func:`glm_adagrad_online` (scalars in registers).

    ``coef``, ``sumsq`` and ``y`` are 1-D; ``b = [intercept, its accumulator]`` (a length-2
    array, updated in place when ``fit_intercept``).

    Returns
    -------
    loss_sum : float
    """
    m = indptr.shape[0] - 1
    p_end = indptr[m] - FB_PREFETCH_DISTANCE
    has_w = w.shape[0] > 0
    loss_sum = 0.0
    for j in range(m):
        s, e = indptr[j], indptr[j + 1]
        eta = _forward_vec(s, e, p_end, indices, data, coef, sumsq, b[0])
        wj = w[j] if has_w else 1.0
        lj, dj = glm_loss_deriv(loss, np.float64(eta), np.float64(y[j]))
        loss_sum += wj * lj
        d = coef.dtype.type(dj * wj)
        if fit_intercept:
            b[0], b[1] = _adagrad_coord(b[0], d, b[1], lr, eps, 0.0)
        for p in range(s, e):
            i = np.uint64(indices[p])
            c = coef[i]
            coef[i], sumsq[i] = _adagrad_coord(c, d * data[p] + l2 * c, sumsq[i], lr, eps, l1)
    return loss_sum


@njit(cache=True, nogil=True, fastmath=True)
def glm_loss_deriv_cols(loss, eta, y, w, D):  # pragma: no cover - compiled
    """The table's GLM form over a ``(k, m)`` array of linear predictors (one column per example).

    ``D[r, j] = w_j dl/deta(y[r, j], eta[r, j])`` in the dtype of ``D``, computed in float64
    through :func:`._losses.glm_loss_deriv` (so that no loss is written a second time); ``D``
    may be ``eta`` itself.  ``w`` is the examples' weights, or an empty array for none.
    Returns ``sum_j w_j sum_r l(y[r, j], eta[r, j])`` in float64.  Labels are not checked here
    (``roofline.glm.check_labels``).
    """
    k, m = eta.shape
    has_w = w.shape[0] > 0
    total = 0.0
    if k == 1:  # one output: a flat loop (the nested one does not vectorise)
        for j in range(m):
            val, d = glm_loss_deriv(loss, np.float64(eta[0, j]), np.float64(y[0, j]))
            wj = np.float64(w[j]) if has_w else 1.0
            D[0, j] = wj * d
            total += wj * val
        return total
    for j in range(m):
        wj = np.float64(w[j]) if has_w else 1.0
        lj = 0.0
        for r in range(k):
            val, d = glm_loss_deriv(loss, np.float64(eta[r, j]), np.float64(y[r, j]))
            D[r, j] = wj * d
            lj += val
        total += wj * lj
    return total
