"""numba kernels of Latent Dirichlet Allocation's variational E-step (one column = one document).

:func:`lda_e_step` runs the E-step's fixed-point iterations document by document, in parallel
over the documents: a document's word columns of ``exp(E[log beta])`` stay in the core's cache
for all its iterations, and a document stops as soon as its own ``gamma`` has converged (as in
scikit-learn's per-document loop), where the same iterations through the primitives (SDDMM,
then A*S, over the whole minibatch) pass over every document's nonzeros and wake the thread pool
twice per iteration.  It leaves the per-nonzero ratios ``X / N`` behind, so that the sufficient
statistics are one ``A*S^T`` primitive.

Layout as in :mod:`roofline.kernels._csc`: the dense ``K x n`` operands are passed transposed and
C-contiguous (``BT`` is ``V x K``, ``gammaT`` and ``TT`` are ``m x K``).  A document's columns of
``B`` are copied into a ``K x n_d`` block (``n_d`` rounded up to 16 with zero words), so that its
iterations run as SIMD passes along its words; the per-nonzero sums run in the storage dtype
(float32: twice the SIMD width), ``gamma`` and ``exp(psi(gamma))`` in float64, the latter
branch-free (:func:`_exp_digamma6`: no logarithm, one division for psi's recurrence).

:func:`lda_gibbs_sweep` is one sweep of BIDMach's SAME sampler (``LDAgibbs``), in parallel over
the documents, with the caller's uniform draws.

:func:`lda_digamma` is scikit-learn's ``psi`` (``sklearn/decomposition/_online_lda_fast.pyx``): the
recurrence up to 6, then the asymptotic series.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from ._threads import parallel_njit

__all__ = ["lda_digamma", "lda_e_step", "lda_e_step_serial", "lda_gibbs_sweep"]


@njit(cache=True, nogil=True, fastmath=True, inline="always")
def lda_digamma(x):
    """The digamma function of ``x > 0`` (scikit-learn's ``psi``)."""
    r = 0.0
    while x <= 6.0:
        r -= 1.0 / x
        x += 1.0
    f = 1.0 / (x * x)
    t = f * (-1.0 / 12.0 + f * (1.0 / 120.0 + f * (-1.0 / 252.0 + f * (1.0 / 240.0
                                                                       + f * (-1.0 / 132.0)))))
    return r + math.log(x) - 0.5 / x + t


@njit(cache=True, nogil=True, fastmath=True, inline="always")
def _exp_digamma6(x):
    """``exp(psi(x))`` for ``x > 0``, branch-free: ``psi(x) = psi(x + 6) - sum_{i<6} 1 / (x + i)``
    (the sum as one fraction), the asymptotic series at ``y = x + 6``, and
    ``exp(log y + c) = y exp(c)``.  From ``x = 1e6`` on, the series at ``x`` itself (its
    first two terms are exact there to double precision; the shift's product ``x^6`` would
    overflow above ``1e51``)."""
    if x >= 1e6:
        f = 1.0 / (x * x)
        return x * math.exp(f * (-1.0 / 12.0 + f * (1.0 / 120.0)) - 0.5 / x)
    x1 = x + 1.0
    x2 = x + 2.0
    x3 = x + 3.0
    x4 = x + 4.0
    x5 = x + 5.0
    p01 = x * x1
    p23 = x2 * x3
    p45 = x4 * x5
    # sum 1/(x+i) = (sum of the products of five) / (product of six), paired
    num = ((x + x1) * p23 + (x2 + x3) * p01) * p45 + (x4 + x5) * p01 * p23
    den = p01 * p23 * p45
    y = x + 6.0
    f = 1.0 / (y * y)
    t = f * (-1.0 / 12.0 + f * (1.0 / 120.0 + f * (-1.0 / 252.0 + f * (1.0 / 240.0
                                                                       + f * (-1.0 / 132.0)))))
    return y * math.exp(t - 0.5 / y - num / den)


@njit(cache=True, nogil=True, fastmath=True, inline="always")
def _exp_elog(g, t, K):
    """``t = exp(psi(g) - psi(sum g))``."""
    s = 0.0
    for k in range(K):
        s += g[k]
    ps = 1.0 / _exp_digamma6(s)
    for k in range(K):
        t[k] = _exp_digamma6(g[k]) * ps


@njit(cache=True, nogil=True, fastmath=True, inline="always")
def _document(j, BT, indptr, indices, data, gammaT, TT, R, alpha, max_iter, tol, eps,
              g, t, acc):
    """The E-step of document ``j``; returns its iterations, or -1 for an out-of-range word.

    The document's rows of ``BT`` are copied, transposed, into a local ``K x n_d`` block (read
    from L1 by every iteration): the normalisers ``N`` are then ``K`` SIMD passes over the
    document's words and the new ``gamma`` ``K`` SIMD dot products, no horizontal sum per
    word."""
    K = BT.shape[1]
    V = BT.shape[0]
    s, e = indptr[j], indptr[j + 1]
    nd = e - s
    for p in range(s, e):
        if np.uint64(indices[p]) >= np.uint64(V):
            return -1
    npad = (nd + 15) & ~15  # whole SIMD vectors: the padding words have count and B zero
    Bd = np.zeros((K, npad), BT.dtype)
    c = np.zeros(npad, BT.dtype)
    norm = np.empty(npad, BT.dtype)
    for q in range(nd):
        w = np.uint64(indices[s + q])
        c[q] = data[s + q]
        for k in range(K):
            Bd[k, q] = BT[w, k]
    for k in range(K):
        g[k] = gammaT[j, k]
    _exp_elog(g, t, K)
    it = 0
    while it < max_iter:
        it += 1
        _ratios(Bd, t, c, eps, norm, K, npad)
        for k in range(K):
            a = BT.dtype.type(0)
            for q in range(npad):
                a += norm[q] * Bd[k, q]
            acc[k] = a
        change = 0.0
        for k in range(K):
            v = alpha + t[k] * acc[k]
            change += abs(v - g[k])
            g[k] = v
        _exp_elog(g, t, K)
        if change / K < tol:
            break
    _ratios(Bd, t, c, eps, norm, K, npad)
    for q in range(nd):
        R[s + q] = norm[q]
    for k in range(K):
        gammaT[j, k] = g[k]
        TT[j, k] = t[k]
    return it


@njit(cache=True, nogil=True, fastmath=True, inline="always")
def _ratios(Bd, t, c, eps, out, K, nd):
    """``out[q] = c[q] / (sum_k t[k] Bd[k, q] + eps)``, ``K`` passes over the ``nd`` words."""
    t0 = t[0]
    for q in range(nd):
        out[q] = eps + t0 * Bd[0, q]
    for k in range(1, K):
        tk = t[k]
        for q in range(nd):
            out[q] += tk * Bd[k, q]
    for q in range(nd):
        out[q] = c[q] / out[q]


@njit(cache=True, nogil=True, fastmath=True, inline="always")
def _documents(start, step, BT, indptr, indices, data, gammaT, TT, R, alpha, max_iter, tol, eps,
               iters):
    """The E-step of documents ``start, start + step, ...`` (one task's share, with its own
    scratch); their iterations into ``iters``; returns how many had an out-of-range word."""
    K = BT.shape[1]
    g = np.empty(K)
    t = np.empty(K, BT.dtype)
    acc = np.empty(K, BT.dtype)
    bad = 0
    for j in range(start, gammaT.shape[0], step):
        it = _document(j, BT, indptr, indices, data, gammaT, TT, R, alpha, max_iter, tol, eps,
                       g, t, acc)
        iters[j] = it
        if it < 0:
            bad += 1
    return bad


@parallel_njit(cache=True, nogil=True, fastmath=True)
def lda_e_step(BT, indptr, indices, data, gammaT, TT, R, alpha, max_iter, tol, eps, iters,
               n_chunks):
    """The variational E-step of every document (column), in parallel over the documents.

    For document ``j`` (nonzeros ``p`` in ``indptr[j]:indptr[j+1]``, word ``indices[p]``, count
    ``data[p]``), from ``g = gammaT[j]`` and ``t = exp(psi(g) - psi(sum g))``, repeat at most
    ``max_iter`` times::

        N_p = sum_k t_k BT[w_p, k] + eps
        g_k = alpha + t_k sum_p (data[p] / N_p) BT[w_p, k];   t = exp(psi(g) - psi(sum g))

    stopping after the first iteration whose mean absolute change of ``g`` is below ``tol``
    (scikit-learn's ``_update_doc_distribution``).  Then ``R[p] = data[p] / N_p`` at the final
    ``t``.

    Parameters
    ----------
    BT : ndarray (V, K), C-contiguous
        ``exp(E[log beta])`` transposed.
    indptr, indices, data : ndarray
        The documents, CSC (``V x m``).
    gammaT : ndarray (m, K), C-contiguous
        In: the starting ``gamma``; out: the converged one.
    TT : ndarray (m, K)
        Out: ``exp(E[log theta])``.
    R : ndarray (nnz,)
        Out: the ratios ``data / N``.
    alpha, tol, eps : float
    max_iter : int
    iters : ndarray (m,) int64
        Out: each document's iterations (-1: a word index out of range; nothing written).
    n_chunks : int
        Documents are dealt round-robin to this many parallel tasks (balances power-law
        document lengths).

    Returns
    -------
    int
        The number of documents with an out-of-range word index (0 for valid input).
    """
    faults = 0
    for c in prange(n_chunks):
        faults += _documents(c, n_chunks, BT, indptr, indices, data, gammaT, TT, R, alpha,
                             max_iter, tol, eps, iters)
    return faults


@njit(cache=True, nogil=True, fastmath=True)
def lda_e_step_serial(BT, indptr, indices, data, gammaT, TT, R, alpha, max_iter, tol, eps,
                      iters):
    """:func:`lda_e_step` on the calling thread (small minibatches).

    Parameters
    ----------
    BT, indptr, indices, data, gammaT, TT, R, alpha, max_iter, tol, eps, iters
        As :func:`lda_e_step` (the same inputs and outputs).

    Returns
    -------
    int
        The number of documents with an out-of-range word index (0 for valid input).
    """
    return _documents(0, 1, BT, indptr, indices, data, gammaT, TT, R, alpha, max_iter, tol, eps,
                      iters)


@njit(cache=True, nogil=True, fastmath=True, inline="always")
def _gibbs_document(j, phiT, indptr, indices, data, nd, u, alpha, T, nd_new, cum):
    """One SAME sweep over document ``j``; returns -1 for an out-of-range word, else 0."""
    K = phiT.shape[1]
    V = phiT.shape[0]
    same = u.shape[1]
    s, e = indptr[j], indptr[j + 1]
    for p in range(s, e):
        if np.uint64(indices[p]) >= np.uint64(V):
            return -1
    for k in range(K):
        nd_new[j, k] = 0.0
    for p in range(s, e):
        w = np.uint64(indices[p])
        acc = 0.0
        for k in range(K):
            acc += phiT[w, k] * (nd[j, k] + alpha)
            cum[k] = acc
            T[p, k] = 0.0
        share = data[p] / same
        for r in range(same):
            x = u[p, r] * acc
            z = 0
            while z < K - 1 and cum[z] <= x:
                z += 1
            T[p, z] += share
            nd_new[j, z] += share
    return 0


@parallel_njit(cache=True, nogil=True, fastmath=True)
def lda_gibbs_sweep(phiT, indptr, indices, data, nd, u, alpha, T, nd_new, n_chunks):
    """One sweep of BIDMach's SAME sampler over every document, in parallel over documents.

    For every nonzero ``p`` (word ``w``, document ``j``, count ``c``) with
    ``p(k) ∝ phiT[w, k] (nd[j, k] + alpha)``, the ``same`` uniforms ``u[p, :]`` in [0, 1) pick
    ``same`` topics by inverse CDF, each adding ``c / same`` to ``T[p, z]`` and
    ``nd_new[j, z]``.

    Parameters
    ----------
    phiT : ndarray (V, K), C-contiguous
        The topics' word distributions, transposed.
    indptr, indices, data : ndarray
        The documents, CSC (``V x m``).
    nd : ndarray (m, K)
        The documents' topic counts of the previous sweep.
    u : ndarray (nnz, same)
        Uniform draws (the caller's RNG: the sweep is reproducible whatever the threads).
    alpha : float
    T : ndarray (nnz, K)
        Out: each nonzero's sampled topic counts.
    nd_new : ndarray (m, K)
        Out: each document's sampled topic counts.
    n_chunks : int
        Documents are dealt round-robin to this many parallel tasks.

    Returns
    -------
    int
        The number of documents with an out-of-range word index (0 for valid input).
    """
    m = nd.shape[0]
    K = phiT.shape[1]
    faults = 0
    for c in prange(n_chunks):
        cum = np.empty(K)
        bad = 0
        for j in range(c, m, n_chunks):
            if _gibbs_document(j, phiT, indptr, indices, data, nd, u, alpha, T, nd_new,
                               cum) < 0:
                bad += 1
        faults += bad
    return faults
