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

Dense data (float64 ``d x n`` in Fortran order, each example a contiguous column) has two
fused kernels: :func:`newton_dense_eval` reads each example once for its margin, loss,
derivatives, the gradient's and the preconditioner's scatter and the certificate's terms (what
a Newton step needs at a point, four BLAS passes and four loops over ``n`` otherwise), and
:func:`newton_dense_hess_vec` is the Hessian-vector product in one pass.  Their dot products
and scatters may be reassociated (``fastmath`` ``reassoc``/``contract``: vectorised, as BLAS
is), so they agree with the two-pass BLAS forms to rounding, not bit for bit.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ._losses import margin_derivs, margin_dloss, margin_loss, margin_neg_conj
from ._threads import parallel_njit

__all__ = [
    "newton_conj_sum",
    "newton_dense_eval",
    "newton_dense_eval_parallel",
    "newton_dense_hess_vec",
    "newton_dense_hess_vec_parallel",
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


# ---------------------------------------------------------------------------------------------
# dense examples: X float64 (d, n), Fortran order

_FAST = dict(_FLAGS, fastmath={"reassoc", "contract"})


@njit(inline="always")
def _dense_eval_columns(lo, hi, X, w, b, y, loss, sw, z, dl, D, g, hd, sums):
    """Examples ``lo .. hi - 1`` of :func:`newton_dense_eval`: ``g`` and ``hd`` (zeroed here)
    get their scatter, ``sums`` their four sums."""
    d = X.shape[0]
    weighted = sw.shape[0] > 0
    g[:] = 0.0
    hd[:] = 0.0
    L = gb = hb = cj = 0.0
    for i in range(lo, hi):
        zi = b
        for j in range(d):
            zi += X[j, i] * w[j]
        z[i] = zi
        l, d1, d2 = margin_derivs(zi, y[i], loss)
        si = sw[i] if weighted else 1.0
        dl[i] = d1
        Di = si * d2
        D[i] = Di
        if si == 0.0 or (d1 == 0.0 and Di == 0.0):
            continue
        L += si * l
        cj += si * (l - zi * d1)  # -l*(-a) at a = -l'(z): Fenchel-Young's equality
        t = si * d1
        gb += t
        hb += Di
        for j in range(d):
            v = X[j, i]
            g[j] += t * v
            hd[j] += Di * v * v
    sums[0] = L
    sums[1] = gb
    sums[2] = hb
    sums[3] = cj


@njit(**_FAST)
def newton_dense_eval(X, w, b, y, loss, sw, z, dl, D, g, hd, sums):
    """Everything a Newton step needs at ``(w, b)``, in one pass over dense examples.

    Writes the margins ``z_i = x_i^T w + b``, ``dl_i = l'(z_i)``, ``D_i = s_i l''(z_i)``, the
    gradient's data term ``g = sum_i s_i l'(z_i) x_i``, the Hessian's diagonal
    ``hd = sum_i D_i x_i^2`` and ``sums = (sum_i s_i l(z_i), sum_i s_i l'(z_i), sum_i D_i,
    sum_i -s_i l*(l'(z_i)))`` (the loss, the intercept's gradient and curvature, the dual
    objective's conjugate sum at ``a = -l'(z)``).  ``sw``: the example weights ``s_i``, or an
    empty array for ``s_i = 1``.
    """
    _dense_eval_columns(0, X.shape[1], X, w, b, y, loss, sw, z, dl, D, g, hd, sums)


@parallel_njit(**_FAST)
def newton_dense_eval_parallel(X, w, b, y, loss, sw, z, dl, D, g, hd, sums, work, wsums):
    """:func:`newton_dense_eval` over ``work.shape[0]`` chunks of examples in parallel, each
    scattering into its own ``work[c, 0]`` (gradient) and ``work[c, 1]`` (diagonal) rows
    (``work``: ``(n_chunks, 2, d)``, ``wsums``: ``(n_chunks, 4)``, overwritten)."""
    n = X.shape[1]
    k = work.shape[0]
    for c in prange(k):
        _dense_eval_columns(c * n // k, (c + 1) * n // k, X, w, b, y, loss, sw, z, dl, D,
                            work[c, 0], work[c, 1], wsums[c])
    for j in prange(X.shape[0]):
        a = 0.0
        h = 0.0
        for c in range(k):
            a += work[c, 0, j]
            h += work[c, 1, j]
        g[j] = a
        hd[j] = h
    for q in range(4):
        a = 0.0
        for c in range(k):
            a += wsums[c, q]
        sums[q] = a


@njit(inline="always")
def _dense_hv_columns(lo, hi, X, D, s, s_b, out):
    """:func:`_hv_columns` on dense columns (``out`` zeroed here): the same loop over an
    example's ``d`` entries instead of its stored ones, which the ``fastmath`` flags of its
    callers vectorise."""
    d = X.shape[0]
    out[:] = 0.0
    hb = 0.0
    for i in range(lo, hi):
        Di = D[i]
        if Di == 0.0:
            continue
        t = s_b
        for j in range(d):
            t += X[j, i] * s[j]
        t *= Di
        hb += t
        for j in range(d):
            out[j] += t * X[j, i]
    return hb


@njit(**_FAST)
def newton_dense_hess_vec(X, D, s, s_b, out):
    """``out = X diag(D) (X^T s + s_b)`` over dense examples in one pass (``out``
    overwritten); returns ``sum_i D_i (x_i^T s + s_b)``."""
    return _dense_hv_columns(0, X.shape[1], X, D, s, s_b, out)


@parallel_njit(**_FAST)
def newton_dense_hess_vec_parallel(X, D, s, s_b, out, work):
    """:func:`newton_dense_hess_vec` over ``work.shape[0]`` chunks of examples in parallel
    (``work``: ``(n_chunks, d)``, overwritten)."""
    n = X.shape[1]
    k = work.shape[0]
    hbs = np.zeros(k)
    for c in prange(k):
        hbs[c] = _dense_hv_columns(c * n // k, (c + 1) * n // k, X, D, s, s_b, work[c])
    for j in prange(X.shape[0]):
        a = 0.0
        for c in range(k):
            a += work[c, j]
        out[j] = a
    return hbs.sum()
