"""numba kernels of the softmax (multinomial logistic) loss: objective, gradient, Hessian-vector
products and the Hessian's diagonal, fused per example.

The layout is the project's: ``X`` is ``n_features x n_examples``, CSC (one column per
example) for the per-example passes, and its CSR copy (one row per feature) for the scatters
back to the features, which then run in parallel over features without write conflicts.  The
per-class arrays are example-major: ``P``, ``T``, ``Z`` and ``U`` are ``(n_examples, K)``
C-ordered, the coefficients are given transposed, ``Wt`` ``(n_features, K)``, so that one
stored value ``x_ij`` touches ``K`` contiguous values on either side.

One pass over the stored values per product:

* :func:`softmax_csc_eval`: ``z_j = W x_j + b``, the probabilities ``p_j = softmax(z_j)``,
  the examples' losses ``logsumexp(z_j) - z_j[y_j]`` and the gradient's example
  factors ``T_j = c_j (p_j - e_{y_j})``, while the column is in cache;
* :func:`softmax_csc_hess`: ``u_j = V x_j + v_b``, ``T_j = c_j p_j * (u_j - p_j . u_j)`` (the
  Hessian's example factors along ``V``);
* :func:`softmax_rows_times`: the scatter ``G = X T`` (``G[i] = sum_j x_ij T_j``) over the
  CSR copy, parallel over features: the gradient ``T X^T`` of the mean loss, the Hessian's
  product, and with the squared values and ``c p (1 - p)`` the Hessian's diagonal.

Dense data use BLAS for the products (``Z = X^T W^T``) and :func:`softmax_dense_eval` /
:func:`softmax_dense_hess` for the per-example work.  Accumulators are float64 whatever the
data dtype (float32 values are widened as they are read).  The parallel loops run over chunks
of equal stored values (``bounds``, from :func:`roofline.kernels.nnz_chunks`): one chunk runs
serially in the calling thread's loop.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from ._threads import parallel_njit

__all__ = [
    "softmax_csc_eval",
    "softmax_csc_hess",
    "softmax_dense_eval",
    "softmax_dense_hess",
    "softmax_rows_times",
]

_FLAGS = dict(cache=True, nogil=True, fastmath={"reassoc", "contract"})


@njit(inline="always")
def _softmax_row(z, yj, cj, prow, trow):
    """``prow = softmax(z)``, ``trow = cj (prow - e_yj)``; returns ``logsumexp(z) - z[yj]``.

    Accurate for confident examples: with ``m = z[km]`` the largest, ``s = 1 + s1``
    (``s1`` the other classes' ``exp(z_k - m)``), the loss is ``(m - z[yj]) + log1p(s1)`` and
    ``p_y - 1 = -s1 / s`` when ``yj = km``, without the cancellations of ``log(s)`` and
    ``p_y - 1``."""
    K = z.shape[0]
    m = z[0]
    km = 0
    for k in range(1, K):
        if z[k] > m:
            m = z[k]
            km = k
    s1 = 0.0
    for k in range(K):
        e = math.exp(z[k] - m)
        prow[k] = e
        if k != km:
            s1 += e
    ey = prow[yj]
    inv = 1.0 / (1.0 + s1)
    for k in range(K):
        p = prow[k] * inv
        prow[k] = p
        trow[k] = cj * p
    trow[yj] = -cj * (s1 if yj == km else 1.0 + s1 - ey) * inv
    return (m - z[yj]) + math.log1p(s1)


@parallel_njit(**_FLAGS)
def softmax_csc_eval(indptr, indices, data, Wt, b, y, c, P, T, loss, bounds):
    """The softmax loss at ``(W, b)`` over a CSC ``X`` (``n_features x n_examples``).

    Parameters
    ----------
    indptr, indices, data : ndarray
        ``X``'s CSC arrays (float32 or float64 values).
    Wt : ndarray, float64, shape (n_features, K)
        The coefficients, transposed, C-ordered.
    b : ndarray, float64, shape (K,)
        The intercepts.
    y : ndarray, int64, shape (n_examples,)
        Class indices.
    c : ndarray, float64, shape (n_examples,)
        The examples' weights in the loss.
    P, T : ndarray, float64, shape (n_examples, K)
        Overwritten: the probabilities and ``c_j (p_j - e_{y_j})``.
    loss : ndarray, float64, shape (n_examples,)
        Overwritten: the examples' losses ``logsumexp(z_j) - z_j[y_j]`` (unweighted).
    bounds : ndarray, int64
        Chunk boundaries over the examples (``bounds[0] = 0``, ``bounds[-1] = n_examples``).

    """
    K = Wt.shape[1]
    nc = bounds.shape[0] - 1
    for ch in prange(nc):
        z = np.empty(K)
        for j in range(bounds[ch], bounds[ch + 1]):
            for k in range(K):
                z[k] = b[k]
            for p in range(indptr[j], indptr[j + 1]):
                v = np.float64(data[p])
                row = indices[p]
                for k in range(K):
                    z[k] += v * Wt[row, k]
            loss[j] = _softmax_row(z, y[j], c[j], P[j], T[j])


@parallel_njit(**_FLAGS)
def softmax_csc_hess(indptr, indices, data, Vt, vb, P, c, T, bounds):
    """The Hessian's example factors along ``(V, v_b)`` over a CSC ``X``: ``u_j = V x_j +
    v_b``, ``T_j = c_j p_j * (u_j - p_j . u_j)`` (``T`` overwritten; the Hessian-vector
    product is then ``(X T + alpha V, sum_j T_j)``).  Arguments as in
    :func:`softmax_csc_eval` (``Vt`` the direction, transposed)."""
    K = Vt.shape[1]
    nc = bounds.shape[0] - 1
    for ch in prange(nc):
        u = np.empty(K)
        for j in range(bounds[ch], bounds[ch + 1]):
            for k in range(K):
                u[k] = vb[k]
            for p in range(indptr[j], indptr[j + 1]):
                v = np.float64(data[p])
                row = indices[p]
                for k in range(K):
                    u[k] += v * Vt[row, k]
            _hess_row(u, P[j], c[j], T[j])


@njit(inline="always")
def _hess_row(u, prow, cj, trow):
    K = u.shape[0]
    pu = 0.0
    for k in range(K):
        pu += prow[k] * u[k]
    for k in range(K):
        trow[k] = cj * prow[k] * (u[k] - pu)


@parallel_njit(**_FLAGS)
def softmax_dense_eval(Z, y, c, P, T, loss, bounds):
    """:func:`softmax_csc_eval` from the linear predictors ``Z`` (``(n_examples, K)``, e.g. a
    BLAS product ``X^T W^T + b``): ``P``, ``T`` and ``loss`` overwritten."""
    K = Z.shape[1]
    nc = bounds.shape[0] - 1
    for ch in prange(nc):
        z = np.empty(K)
        for j in range(bounds[ch], bounds[ch + 1]):
            for k in range(K):
                z[k] = Z[j, k]
            loss[j] = _softmax_row(z, y[j], c[j], P[j], T[j])


@parallel_njit(**_FLAGS)
def softmax_dense_hess(U, P, c, T, bounds):
    """:func:`softmax_csc_hess` from ``U = X^T V^T + v_b`` (``(n_examples, K)``): ``T``
    overwritten."""
    K = U.shape[1]
    nc = bounds.shape[0] - 1
    for ch in prange(nc):
        u = np.empty(K)
        for j in range(bounds[ch], bounds[ch + 1]):
            for k in range(K):
                u[k] = U[j, k]
            _hess_row(u, P[j], c[j], T[j])


@parallel_njit(**_FLAGS)
def softmax_rows_times(indptr, indices, data, T, G, bounds):
    """``G[i] = sum_p data[p] T[indices[p]]`` over the rows of a CSR matrix (``X``'s features,
    ``indices`` the examples): ``G = X T`` (``(n_features, K)`` float64, overwritten), in
    parallel over chunks of rows (``bounds`` over the rows)."""
    K = T.shape[1]
    nc = bounds.shape[0] - 1
    for ch in prange(nc):
        for i in range(bounds[ch], bounds[ch + 1]):
            for k in range(K):
                G[i, k] = 0.0
            for p in range(indptr[i], indptr[i + 1]):
                v = np.float64(data[p])
                j = indices[p]
                for k in range(K):
                    G[i, k] += v * T[j, k]
