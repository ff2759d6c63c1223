"""numba kernels for the trust-region Newton (TRON) primal solver of smooth GLMs.

The structure is the project layout: ``X`` is ``n_features x n_examples`` CSC, one column per
example.  The Hessian of ``sum_i l(z_i) + lam_n ||w||^2 / 2`` with margins ``z = X^T w + b`` is
``X D X^T + lam_n I`` (``D = diag(l''(z))``); its product with a direction ``(s, s_b)`` is one
pass over the columns: each example's ``t_i = x_i^T s + s_b`` is scaled by ``D_i`` and scattered
back as ``t_i D_i x_i``, while the column is still in cache (:func:`newton_hess_vec`).
Examples with ``D_i = 0`` (the squared hinge's inactive ones) are skipped.

Losses are the codes of :data:`._losses.LOSS_CODES` in the margin form (``0`` squared, ``1``
logistic, ``3`` squared hinge, whose generalised second derivative is 2 on the active side).
Accumulations are float64 whatever the data dtype.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ._losses import margin_dloss, margin_loss, margin_neg_conj
from ._threads import parallel_njit

__all__ = [
    "newton_conj_sum",
    "newton_hess_diag",
    "newton_hess_vec",
    "newton_hess_vec_parallel",
    "newton_loss_derivs",
    "newton_loss_sum",
]

_FLAGS = dict(cache=True, nogil=True)


@njit(**_FLAGS)
def newton_loss_derivs(z, y, loss, sw, dl, D):
    """``dl_i = l'(z_i)``, ``D_i = s_i l''(z_i)``; returns ``(sum_i s_i l(z_i),
    sum_i s_i dl_i, sum_i D_i)``.  ``sw``: the example weights ``s_i``, or an empty array for
    ``s_i = 1``."""
    weighted = sw.shape[0] > 0
    L = 0.0
    g = 0.0
    h = 0.0
    for i in range(z.shape[0]):
        s = sw[i] if weighted else 1.0
        d1, d2 = margin_dloss(z[i], y[i], loss)
        dl[i] = d1
        D[i] = s * d2
        if s != 0.0:
            L += s * margin_loss(z[i], y[i], loss)
            g += s * d1
            h += s * d2
    return L, g, h


@njit(**_FLAGS)
def newton_loss_sum(z, y, loss, sw):
    """``sum_i s_i l(z_i; y_i)`` (``sw`` empty: ``s_i = 1``)."""
    weighted = sw.shape[0] > 0
    acc = 0.0
    for i in range(z.shape[0]):
        s = sw[i] if weighted else 1.0
        if s != 0.0:
            acc += s * margin_loss(z[i], y[i], loss)
    return acc


@njit(**_FLAGS)
def newton_conj_sum(a, y, loss, sw):
    """``sum_i -s_i l*(-a_i; y_i)`` (``-inf`` if some ``a_i`` of positive weight is
    infeasible; ``sw`` empty: ``s_i = 1``)."""
    weighted = sw.shape[0] > 0
    acc = 0.0
    for i in range(a.shape[0]):
        s = sw[i] if weighted else 1.0
        if s != 0.0:
            acc += s * margin_neg_conj(a[i], y[i], loss)
    return acc


@njit(inline="always")
def _hv_columns(lo, hi, indptr, indices, data, D, s, s_b, out):
    """Examples ``lo .. hi - 1`` of the Hessian-vector product, scattered into ``out``;
    returns their ``sum_i D_i t_i``."""
    hb = 0.0
    for i in range(lo, hi):
        Di = D[i]
        if Di == 0.0:
            continue
        t = s_b
        for p in range(indptr[i], indptr[i + 1]):
            t += data[p] * s[indices[p]]
        t *= Di
        hb += t
        for p in range(indptr[i], indptr[i + 1]):
            out[indices[p]] += t * data[p]
    return hb


@njit(**_FLAGS)
def newton_hess_vec(indptr, indices, data, D, s, s_b, out):
    """``out += X diag(D) (X^T s + s_b)`` in one pass over the columns (examples); returns
    ``sum_i D_i (x_i^T s + s_b)`` (the intercept's row)."""
    return _hv_columns(0, indptr.shape[0] - 1, indptr, indices, data, D, s, s_b, out)


@parallel_njit(**_FLAGS)
def newton_hess_vec_parallel(indptr, indices, data, D, s, s_b, out, work):
    """:func:`newton_hess_vec` over ``work.shape[0]`` chunks of examples in parallel, each
    scattering into its own row of ``work`` (``(n_chunks, n_features)`` float64, overwritten),
    the rows then summed into ``out``."""
    n = indptr.shape[0] - 1
    k = work.shape[0]
    m = work.shape[1]
    hbs = np.zeros(k)
    for c in prange(k):
        row = work[c]
        row[:] = 0.0
        hbs[c] = _hv_columns(c * n // k, (c + 1) * n // k, indptr, indices, data, D, s, s_b,
                             row)
    for j in prange(m):
        acc = 0.0
        for c in range(k):
            acc += work[c, j]
        out[j] += acc
    return hbs.sum()


@njit(**_FLAGS)
def newton_hess_diag(indptr, indices, data, D, out):
    """``out[j] += sum_i D_i x_ij^2`` (the diagonal of ``X D X^T``); returns ``sum_i D_i``."""
    h = 0.0
    for i in range(indptr.shape[0] - 1):
        Di = D[i]
        if Di == 0.0:
            continue
        h += Di
        for p in range(indptr[i], indptr[i + 1]):
            v = data[p]
            out[indices[p]] += Di * v * v
    return h
