"""Alternating least squares: the per-row solves of matrix factorization (numba, CPU).

Every kernel solves, for each *self* row ``j`` (a column of the CSC matrix ``S`` of shape
``n_other x n_self``: its nonzeros are the other side's indices and the ratings), a ``k x k``
ridge system whose design vectors are columns of the fixed factor matrix ``D`` of the other
side (``k x n_other``, Fortran order: one column contiguous).  Rows run in parallel (``prange``
over chunks of rows of about equal work, :func:`als_row_chunks`); each chunk owns its ``k x k``
scratch, so the system of a row lives in L1/L2 while it is built and factored.

``bias = True`` (explicit feedback with biases): ``D`` has ``k`` rows, the first ``k - 1`` the
other side's factors and the last its biases; a row's design vector is ``[D[:k-1, i], 1]``, its
target ``s_ij - mu - D[k-1, i]``, and the unknown ``[x_j, b_j]`` (factors and bias).

Explicit feedback (:func:`als_explicit`)::

    (sum_i d_i d_i^T + lam_j I) z_j = sum_i t_ij d_i,     lam_j = lam * (n_j if weighted else 1)

by Cholesky; a row with fewer nonzeros ``n_j`` than unknowns solves the dual ``n_j x n_j``
system ``(D_j^T D_j + lam_j I) u = t_j`` and takes ``z_j = D_j u`` (the same solution, by the
push-through identity, in ``n_j^2 k + n_j^3 / 3`` flops); :func:`als_explicit_cg` takes a few
warm-started CG steps on the system instead, never forming it.

Implicit feedback (Hu, Koren and Volinsky; confidence ``c = 1 + alpha * s``, preference 1 at
the nonzeros, 0 elsewhere), with ``YtY = D D^T`` over *all* other rows::

    (YtY + sum_i (c_ij - 1) d_i d_i^T + lam_j I) x_j = sum_i c_ij d_i

solved exactly by Cholesky (:func:`als_implicit_cholesky`) or approximately by a few
conjugate-gradient steps warm-started from the previous ``x_j`` (:func:`als_implicit_cg`,
``implicit``'s solver).  :func:`als_normal_equations` accumulates the per-row systems (without
the regulariser and ``YtY``) for a distributed fit, where they are summed over the ranks before
:func:`als_solve_systems` solves them.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ._prefetch import prefetch_row
from ._threads import parallel_njit

#: Prefetch distance, in nonzeros, of the other side's factor columns (the first touch of a
#: column is a cache miss; later CG steps of the same row find it in L1/L2).
PREFETCH = 16

#: The implicit-feedback CG prefetches only when the other side's factors take more bytes than
#: this (about one core's L2): below it, the prefetches cost more than the misses they save
#: (measured on MovieLens 100k, k = 64; on 1e6 power-law ratings they save 12%).
PREFETCH_MIN_BYTES = 1 << 20

__all__ = [
    "als_explicit",
    "als_explicit_cg",
    "als_implicit_cg",
    "als_implicit_cholesky",
    "als_normal_equations",
    "als_row_chunks",
    "als_solve_systems",
]


@njit(cache=True, nogil=True)
def als_row_chunks(indptr, row_cost, n_chunks):
    """Boundaries of ``n_chunks`` runs of consecutive rows of about equal work.

    A row's work is its number of nonzeros plus ``row_cost`` (the factorisation, in units of
    one nonzero's work).

    Parameters
    ----------
    indptr : int array, shape (n + 1,)
    row_cost : float
    n_chunks : int

    Returns
    -------
    int64 array, shape (n_chunks + 1,)
        Chunk ``c`` is rows ``bounds[c]:bounds[c+1]`` (possibly empty).
    """
    n = indptr.shape[0] - 1
    bounds = np.empty(n_chunks + 1, dtype=np.int64)
    total = float(indptr[n] - indptr[0]) + row_cost * n
    bounds[0] = 0
    j = 0
    acc = 0.0
    for c in range(1, n_chunks):
        target = total * c / n_chunks
        while j < n and acc + (indptr[j + 1] - indptr[j]) + row_cost <= target:
            acc += (indptr[j + 1] - indptr[j]) + row_cost
            j += 1
        bounds[c] = j
    bounds[n_chunks] = n
    return bounds


@njit(cache=True, nogil=True, inline="always")
def _prefetch_col(DT, indices, q, nnz, col_bytes):
    """Prefetch every cache line of column ``indices[q]`` of ``D`` (``DT = D.T``, C order)."""
    if q < nnz:
        i = indices[q]
        for off in range(0, col_bytes, 64):
            prefetch_row(DT, i, off)


@njit(cache=True, nogil=True, fastmath=True)
def _cholesky_solve(A, b, out):
    """Solve ``A x = b`` for symmetric positive definite ``A`` (lower triangle used and
    overwritten by the Cholesky factor); ``x`` into ``out``.  A non-positive pivot (a singular
    system: no regularisation and too few nonzeros) is replaced by a tiny one."""
    k = A.shape[0]
    for j in range(k):
        s = A[j, j]
        for p in range(j):
            s -= A[j, p] * A[j, p]
        if s <= 1e-30:
            s = 1e-30
        d = np.sqrt(s)
        A[j, j] = d
        inv = 1.0 / d
        for i in range(j + 1, k):
            t = A[i, j]
            for p in range(j):
                t -= A[i, p] * A[j, p]
            A[i, j] = t * inv
    # forward: L y = b
    for i in range(k):
        t = b[i]
        for p in range(i):
            t -= A[i, p] * out[p]
        out[i] = t / A[i, i]
    # backward: L^T x = y
    for i in range(k - 1, -1, -1):
        t = out[i]
        for p in range(i + 1, k):
            t -= A[p, i] * out[p]
        out[i] = t / A[i, i]


@njit(cache=True, nogil=True, fastmath=True, inline="always")
def _cg_update(x, r, p, Ap, pAp, rsold, zero):
    """One conjugate-gradient update from ``Ap = A p`` and ``pAp = p . Ap``: ``x`` and the
    residual ``r`` step along ``p``, then ``p`` turns to the new residual.  Returns the new
    ``r . r`` (accumulated from ``zero``, which sets its type) and whether to stop
    (``pAp <= 0``: nothing updated; or the residual has vanished: ``p`` not updated)."""
    k = x.shape[0]
    if pAp <= 0.0:
        return rsold, True
    step = rsold / pAp
    rsnew = zero
    for a in range(k):
        x[a] += step * p[a]
        r[a] -= step * Ap[a]
        rsnew += r[a] * r[a]
    if rsnew < 1e-20:
        return rsnew, True
    beta = rsnew / rsold
    for a in range(k):
        p[a] = r[a] + beta * p[a]
    return rsnew, False


@njit(cache=True, nogil=True, fastmath=True)
def _gram_add(A, G, w, m, k):
    """``A[a, :a+1] += sum_q w[q] G[q, a] G[q, :a+1]`` for the ``m`` (<= 4) gathered design
    vectors ``G[:m]``: the lower triangle of a rank-``m`` update, four rows at once."""
    if m == 4:
        for a in range(k):
            g0 = w[0] * G[0, a]
            g1 = w[1] * G[1, a]
            g2 = w[2] * G[2, a]
            g3 = w[3] * G[3, a]
            for c in range(a + 1):
                A[a, c] += g0 * G[0, c] + g1 * G[1, c] + g2 * G[2, c] + g3 * G[3, c]
    else:
        for q in range(m):
            for a in range(k):
                ga = w[q] * G[q, a]
                for c in range(a + 1):
                    A[a, c] += ga * G[q, c]


@njit(cache=True, nogil=True, fastmath=True)
def _build_row(j, indptr, indices, data, D, bias, mu, implicit, alpha, A, b, G, w):
    """The system of self row ``j`` without regulariser and ``YtY``: lower triangle of ``A``
    and ``b`` (both zeroed first).  Returns the row's number of nonzeros."""
    k = A.shape[0]
    r = k - 1 if bias else k
    for a in range(k):
        b[a] = 0.0
        for c in range(a + 1):
            A[a, c] = 0.0
    s, e = indptr[j], indptr[j + 1]
    m = 0
    DT = D.T
    nnz = indices.shape[0]
    col_bytes = D.shape[0] * D.itemsize
    for p in range(s, e):
        _prefetch_col(DT, indices, p + PREFETCH, nnz, col_bytes)
        i = indices[p]
        v = data[p]
        for a in range(r):
            G[m, a] = D[a, i]
        if implicit:
            conf = 1.0 + alpha * v
            w[m] = conf - 1.0
            for a in range(r):
                b[a] += conf * G[m, a]
        else:
            t = v - mu
            if bias:
                G[m, r] = 1.0
                t -= D[r, i]
            w[m] = 1.0
            for a in range(k):
                b[a] += t * G[m, a]
        m += 1
        if m == 4:
            _gram_add(A, G, w, 4, k)
            m = 0
    if m > 0:
        _gram_add(A, G, w, m, k)
    return e - s


@parallel_njit(cache=True, nogil=True, fastmath=True)
def als_explicit(indptr, indices, data, D, bias, mu, lam, weighted, bounds, Z):
    """Explicit-feedback ALS half-step: ``Z[:, j]`` for every self row ``j`` (Cholesky).

    Parameters
    ----------
    indptr, indices, data : arrays of the CSC matrix ``S`` (n_other x n_self)
    D : array, shape (k, n_other), Fortran order
        The other side's factors (and biases, last row, with ``bias``).
    bias : bool
        Solve for a bias too (module docstring).
    mu : float
        Global mean subtracted from the ratings.
    lam : float
        Regularisation.
    weighted : bool
        Scale ``lam`` by the row's number of nonzeros (ALS-WR, Spark).
    bounds : int64 array
        Row chunks (:func:`als_row_chunks`).
    Z : array, shape (k, n_self), Fortran order
        Output; rows without nonzeros get zeros.
    """
    k = Z.shape[0]
    r = k - 1 if bias else k
    n_chunks = bounds.shape[0] - 1
    zero = Z.dtype.type(0)
    for c in prange(n_chunks):
        A = np.empty((k, k), dtype=Z.dtype)
        M = np.empty((k, k), dtype=Z.dtype)
        b = np.empty(k, dtype=Z.dtype)
        x = np.empty(k, dtype=Z.dtype)
        G = np.empty((4, k), dtype=Z.dtype)
        w = np.empty(4, dtype=Z.dtype)
        for j in range(bounds[c], bounds[c + 1]):
            s, e = indptr[j], indptr[j + 1]
            n = e - s
            if n == 0:
                for a in range(k):
                    Z[a, j] = 0.0
                continue
            reg = lam * n if weighted else lam
            if n < k:
                # fewer nonzeros than unknowns: the dual system (D_j^T D_j + reg I_n) u = t,
                # z = D_j u (the same solution, n^2 k + n^3 / 3 flops instead of n k^2 + k^3 / 3)
                for q in range(n):
                    i = indices[s + q]
                    t = data[s + q] - mu
                    for a in range(r):
                        A[q, a] = D[a, i]
                    if bias:
                        A[q, r] = 1.0
                        t -= D[r, i]
                    b[q] = t
                for q in range(n):
                    for q2 in range(q + 1):
                        dot = zero
                        for a in range(k):
                            dot += A[q, a] * A[q2, a]
                        M[q, q2] = dot
                    M[q, q] += reg
                _cholesky_solve(M[:n, :n], b[:n], x[:n])
                for a in range(k):
                    Z[a, j] = 0.0
                for q in range(n):
                    u = x[q]
                    for a in range(k):
                        Z[a, j] += u * A[q, a]
                continue
            _build_row(j, indptr, indices, data, D, bias, mu, False, 0.0, A, b, G, w)
            for a in range(k):
                A[a, a] += reg
            _cholesky_solve(A, b, x)
            for a in range(k):
                Z[a, j] = x[a]


@parallel_njit(cache=True, nogil=True, fastmath=True)
def als_implicit_cholesky(indptr, indices, data, D, YtY, alpha, lam, weighted, bounds, X):
    """Implicit-feedback ALS half-step solved exactly (Cholesky per row).

    Parameters
    ----------
    indptr, indices, data : arrays of the CSC matrix ``S`` (n_other x n_self)
        Nonnegative interaction strengths.
    D : array, shape (k, n_other), Fortran order
        The other side's factors.
    YtY : array, shape (k, k)
        ``D D^T``.
    alpha : float
        Confidence ``1 + alpha * s``.
    lam : float
    weighted : bool
        Scale ``lam`` by the row's number of nonzeros.
    bounds : int64 array
    X : array, shape (k, n_self), Fortran order
        Output.
    """
    k = X.shape[0]
    n_chunks = bounds.shape[0] - 1
    for c in prange(n_chunks):
        A = np.empty((k, k), dtype=X.dtype)
        b = np.empty(k, dtype=X.dtype)
        x = np.empty(k, dtype=X.dtype)
        G = np.empty((4, k), dtype=X.dtype)
        w = np.empty(4, dtype=X.dtype)
        for j in range(bounds[c], bounds[c + 1]):
            n = _build_row(j, indptr, indices, data, D, False, 0.0, True, alpha, A, b, G, w)
            reg = lam * n if weighted else lam
            for a in range(k):
                for cc in range(a + 1):
                    A[a, cc] += YtY[a, cc]
                A[a, a] += reg
            _cholesky_solve(A, b, x)
            for a in range(k):
                X[a, j] = x[a]


@njit(cache=True, nogil=True, fastmath=True, inline="always")
def _symv_reg(M, v, reg, out):
    """``out = M v + reg v`` for symmetric ``M``, as a sum of ``M``'s (contiguous) rows, four
    at a time: each pass over ``out`` adds four rows (the row-by-row sum stores ``out`` and
    loads it back ``k`` times, a store-to-load chain, and the dot-product form needs a
    horizontal sum per entry)."""
    k = v.shape[0]
    for a in range(k):
        out[a] = reg * v[a]
    c = 0
    while c + 4 <= k:
        v0 = v[c]
        v1 = v[c + 1]
        v2 = v[c + 2]
        v3 = v[c + 3]
        m0 = M[c]
        m1 = M[c + 1]
        m2 = M[c + 2]
        m3 = M[c + 3]
        for a in range(k):
            out[a] += v0 * m0[a] + v1 * m1[a] + v2 * m2[a] + v3 * m3[a]
        c += 4
    while c < k:
        v0 = v[c]
        m0 = M[c]
        for a in range(k):
            out[a] += v0 * m0[a]
        c += 1


@njit(cache=True, nogil=True, fastmath=True, inline="always")
def _implicit_pass(s, e, indices, data, DT, v, alpha, resid, out, prefetch):
    """``out += sum_q f_q d_q`` over the nonzeros ``q`` in ``s:e`` (``d_q = DT[indices[q]]``),
    with ``f_q = alpha s_q (d_q . v)`` (the sparse part of the CG matrix-vector product) or,
    with ``resid``, ``f_q = 1 + alpha s_q (1 - d_q . v)`` (of the residual ``b - A v``).

    Eight nonzeros at a time (then four, then one): their dot products run side by side
    (independent sums over one load of ``v``; one dot product at a time waits on its own
    horizontal sum before its column can be added), and one pass over ``out`` adds their
    columns (one load and store of ``out`` per eight columns).  ``prefetch``: prefetch the
    columns ``PREFETCH`` nonzeros ahead (the first pass over a row when ``D`` outgrows L2;
    later passes find the row's columns in L1/L2)."""
    k = v.shape[0]
    zero = out.dtype.type(0)
    one = out.dtype.type(1)
    nnz = indices.shape[0]
    col_bytes = k * DT.itemsize
    q = s
    while q + 8 <= e:
        if prefetch:
            for qq in range(q + PREFETCH, q + PREFETCH + 8):
                _prefetch_col(DT, indices, qq, nnz, col_bytes)
        d0 = DT[indices[q]]
        d1 = DT[indices[q + 1]]
        d2 = DT[indices[q + 2]]
        d3 = DT[indices[q + 3]]
        d4 = DT[indices[q + 4]]
        d5 = DT[indices[q + 5]]
        d6 = DT[indices[q + 6]]
        d7 = DT[indices[q + 7]]
        t0 = zero
        t1 = zero
        t2 = zero
        t3 = zero
        t4 = zero
        t5 = zero
        t6 = zero
        t7 = zero
        for a in range(k):
            va = v[a]
            t0 += d0[a] * va
            t1 += d1[a] * va
            t2 += d2[a] * va
            t3 += d3[a] * va
            t4 += d4[a] * va
            t5 += d5[a] * va
            t6 += d6[a] * va
            t7 += d7[a] * va
        if resid:
            f0 = one + alpha * data[q] * (one - t0)
            f1 = one + alpha * data[q + 1] * (one - t1)
            f2 = one + alpha * data[q + 2] * (one - t2)
            f3 = one + alpha * data[q + 3] * (one - t3)
            f4 = one + alpha * data[q + 4] * (one - t4)
            f5 = one + alpha * data[q + 5] * (one - t5)
            f6 = one + alpha * data[q + 6] * (one - t6)
            f7 = one + alpha * data[q + 7] * (one - t7)
        else:
            f0 = alpha * data[q] * t0
            f1 = alpha * data[q + 1] * t1
            f2 = alpha * data[q + 2] * t2
            f3 = alpha * data[q + 3] * t3
            f4 = alpha * data[q + 4] * t4
            f5 = alpha * data[q + 5] * t5
            f6 = alpha * data[q + 6] * t6
            f7 = alpha * data[q + 7] * t7
        for a in range(k):
            out[a] += (f0 * d0[a] + f1 * d1[a] + f2 * d2[a] + f3 * d3[a]
                       + f4 * d4[a] + f5 * d5[a] + f6 * d6[a] + f7 * d7[a])
        q += 8
    while q + 4 <= e:
        if prefetch:
            for qq in range(q + PREFETCH, q + PREFETCH + 4):
                _prefetch_col(DT, indices, qq, nnz, col_bytes)
        d0 = DT[indices[q]]
        d1 = DT[indices[q + 1]]
        d2 = DT[indices[q + 2]]
        d3 = DT[indices[q + 3]]
        t0 = zero
        t1 = zero
        t2 = zero
        t3 = zero
        for a in range(k):
            va = v[a]
            t0 += d0[a] * va
            t1 += d1[a] * va
            t2 += d2[a] * va
            t3 += d3[a] * va
        if resid:
            f0 = one + alpha * data[q] * (one - t0)
            f1 = one + alpha * data[q + 1] * (one - t1)
            f2 = one + alpha * data[q + 2] * (one - t2)
            f3 = one + alpha * data[q + 3] * (one - t3)
        else:
            f0 = alpha * data[q] * t0
            f1 = alpha * data[q + 1] * t1
            f2 = alpha * data[q + 2] * t2
            f3 = alpha * data[q + 3] * t3
        for a in range(k):
            out[a] += f0 * d0[a] + f1 * d1[a] + f2 * d2[a] + f3 * d3[a]
        q += 4
    while q < e:
        if prefetch:
            _prefetch_col(DT, indices, q + PREFETCH, nnz, col_bytes)
        d0 = DT[indices[q]]
        t0 = zero
        for a in range(k):
            t0 += d0[a] * v[a]
        if resid:
            f0 = one + alpha * data[q] * (one - t0)
        else:
            f0 = alpha * data[q] * t0
        for a in range(k):
            out[a] += f0 * d0[a]
        q += 1


@parallel_njit(cache=True, nogil=True, fastmath=True)
def als_implicit_cg(indptr, indices, data, D, YtY, alpha, lam, weighted, cg_steps, bounds, X):
    """Implicit-feedback ALS half-step by ``cg_steps`` conjugate-gradient steps per row,
    warm-started from ``X`` (``implicit``'s ``least_squares_cg``).

    Each step's product ``A p = (YtY + reg I) p + sum_i (c_ij - 1) (d_i . p) d_i`` is formed
    from ``YtY``'s rows four at a time and from the row's nonzeros four at a time
    (:func:`_symv_reg`, :func:`_implicit_pass`); the system is never formed.

    Parameters
    ----------
    indptr, indices, data, D, YtY, alpha, lam, weighted, bounds
        As :func:`als_implicit_cholesky` (``YtY`` C order: its rows contiguous).
    cg_steps : int
    X : array, shape (k, n_self), Fortran order
        The start, overwritten with the result.
    """
    k = X.shape[0]
    n_chunks = bounds.shape[0] - 1
    zero = X.dtype.type(0)
    alpha = X.dtype.type(alpha)
    lam = X.dtype.type(lam)
    DT = D.T
    XT = X.T
    prefetch = D.shape[1] * k * D.itemsize > PREFETCH_MIN_BYTES
    for c in prange(n_chunks):
        r = np.empty(k, dtype=X.dtype)
        p = np.empty(k, dtype=X.dtype)
        Ap = np.empty(k, dtype=X.dtype)
        for j in range(bounds[c], bounds[c + 1]):
            s, e = indptr[j], indptr[j + 1]
            reg = lam * X.dtype.type(e - s) if weighted else lam
            x = XT[j]  # the row's factors, updated in place
            # r = b - A x = -(YtY + reg) x + sum_i (c_ij - (c_ij - 1) d_i.x) d_i: one pass
            _symv_reg(YtY, x, reg, Ap)
            for a in range(k):
                r[a] = -Ap[a]
            _implicit_pass(s, e, indices, data, DT, x, alpha, True, r, prefetch)
            rsold = zero
            for a in range(k):
                p[a] = r[a]
                rsold += r[a] * r[a]
            if rsold > 1e-20:
                for _ in range(cg_steps):
                    _symv_reg(YtY, p, reg, Ap)
                    _implicit_pass(s, e, indices, data, DT, p, alpha, False, Ap, False)
                    pAp = zero
                    for a in range(k):
                        pAp += p[a] * Ap[a]
                    rsold, done = _cg_update(x, r, p, Ap, pAp, rsold, zero)
                    if done:
                        break


@parallel_njit(cache=True, nogil=True, fastmath=True)
def als_normal_equations(indptr, indices, data, D, bias, mu, implicit, alpha, bounds, A, B, counts):
    """Each self row's system without regulariser and ``YtY``, for summing over ranks.

    Parameters
    ----------
    indptr, indices, data, D, bias, mu
        As :func:`als_explicit` (``bias`` and ``mu`` ignored with ``implicit``).
    implicit : bool
        Implicit-feedback systems (confidence ``1 + alpha * s``).
    alpha : float
    bounds : int64 array
    A : array, shape (n_self, k, k)
        Output: the full (symmetric) matrices.
    B : array, shape (n_self, k)
        Output: the right-hand sides.
    counts : array, shape (n_self,)
        Output: the rows' numbers of nonzeros.
    """
    k = A.shape[1]
    n_chunks = bounds.shape[0] - 1
    for c in prange(n_chunks):
        Aj = np.empty((k, k), dtype=A.dtype)
        b = np.empty(k, dtype=A.dtype)
        G = np.empty((4, k), dtype=A.dtype)
        w = np.empty(4, dtype=A.dtype)
        for j in range(bounds[c], bounds[c + 1]):
            n = _build_row(j, indptr, indices, data, D, bias, mu, implicit, alpha, Aj, b, G, w)
            counts[j] = n
            for a in range(k):
                B[j, a] = b[a]
                for cc in range(a + 1):
                    A[j, a, cc] = Aj[a, cc]
                    A[j, cc, a] = Aj[a, cc]


@parallel_njit(cache=True, nogil=True, fastmath=True)
def als_solve_systems(A, B, counts, base, lam, weighted, cg_steps, bounds, X):
    """Solve summed systems ``(A_j + base + lam_j I) x_j = B_j`` (rows with a zero count and
    no ``base`` get zeros).

    Parameters
    ----------
    A : array, shape (n, k, k)
    B : array, shape (n, k)
    counts : array, shape (n,)
        Nonzeros of each row (over every rank), for ``weighted``.
    base : array, shape (k, k)
        Added to every system (``YtY`` for implicit feedback, zeros for explicit).
    lam : float
    weighted : bool
    cg_steps : int
        0: Cholesky; else that many conjugate-gradient steps warm-started from ``X``.
    bounds : int64 array
        Chunks of the ``n`` rows.
    X : array, shape (k, n), Fortran order
        Output (and the CG start).
    """
    k = A.shape[1]
    n_chunks = bounds.shape[0] - 1
    has_base = False
    for a in range(k):
        for cc in range(k):
            if base[a, cc] != 0.0:
                has_base = True
    for c in prange(n_chunks):
        M = np.empty((k, k), dtype=X.dtype)
        x = np.empty(k, dtype=X.dtype)
        r = np.empty(k, dtype=X.dtype)
        p = np.empty(k, dtype=X.dtype)
        Ap = np.empty(k, dtype=X.dtype)
        for j in range(bounds[c], bounds[c + 1]):
            n = counts[j]
            if n == 0 and not has_base:
                for a in range(k):
                    X[a, j] = 0.0
                continue
            reg = lam * n if weighted else lam
            for a in range(k):
                for cc in range(k):
                    M[a, cc] = A[j, a, cc] + base[a, cc]
                M[a, a] += reg
            if cg_steps == 0:
                for a in range(k):
                    r[a] = B[j, a]
                _cholesky_solve(M, r, x)
            else:
                for a in range(k):
                    x[a] = X[a, j]
                rsold = 0.0
                for a in range(k):
                    t = B[j, a]
                    for cc in range(k):
                        t -= M[a, cc] * x[cc]
                    r[a] = t
                    p[a] = t
                    rsold += t * t
                if rsold > 1e-20:
                    for _ in range(cg_steps):
                        pAp = 0.0
                        for a in range(k):
                            t = 0.0
                            for cc in range(k):
                                t += M[a, cc] * p[cc]
                            Ap[a] = t
                            pAp += p[a] * t
                        rsold, done = _cg_update(x, r, p, Ap, pAp, rsold, 0.0)
                        if done:
                            break
            for a in range(k):
                X[a, j] = x[a]


@parallel_njit(cache=True, nogil=True, fastmath=True)
def als_explicit_cg(indptr, indices, data, D, bias, mu, lam, weighted, cg_steps, bounds, Z):
    """Explicit-feedback ALS half-step by ``cg_steps`` conjugate-gradient steps per row,
    warm-started from ``Z``, on the system of :func:`als_explicit` (never formed: each step
    costs ``4 k`` per nonzero of the row instead of the Gram matrix's ``k^2`` and the
    factorisation's ``k^3 / 3``).

    Parameters
    ----------
    indptr, indices, data, D, bias, mu, lam, weighted, bounds
        As :func:`als_explicit`.
    cg_steps : int
    Z : array, shape (k, n_self), Fortran order
        The start, overwritten with the result; rows without nonzeros get zeros.
    """
    k = Z.shape[0]
    r = k - 1 if bias else k
    n_chunks = bounds.shape[0] - 1
    zero = Z.dtype.type(0)
    lam = Z.dtype.type(lam)
    mu = Z.dtype.type(mu)
    DT = D.T
    nnz = indices.shape[0]
    col_bytes = D.shape[0] * D.itemsize
    for c in prange(n_chunks):
        x = np.empty(k, dtype=Z.dtype)
        res = np.empty(k, dtype=Z.dtype)
        p = np.empty(k, dtype=Z.dtype)
        Ap = np.empty(k, dtype=Z.dtype)
        for j in range(bounds[c], bounds[c + 1]):
            s, e = indptr[j], indptr[j + 1]
            if e == s:
                for a in range(k):
                    Z[a, j] = 0.0
                continue
            reg = lam * Z.dtype.type(e - s) if weighted else lam
            for a in range(k):
                x[a] = Z[a, j]
                res[a] = -reg * x[a]
            # res = b - A x = sum_i (t_i - d_i.x) d_i - reg x
            for q in range(s, e):
                _prefetch_col(DT, indices, q + PREFETCH, nnz, col_bytes)
                i = indices[q]
                dot = x[r] if bias else zero
                t = data[q] - mu
                if bias:
                    t -= D[r, i]
                for a in range(r):
                    dot += D[a, i] * x[a]
                f = t - dot
                for a in range(r):
                    res[a] += f * D[a, i]
                if bias:
                    res[r] += f
            rsold = zero
            for a in range(k):
                p[a] = res[a]
                rsold += res[a] * res[a]
            if rsold > 1e-20:
                for _ in range(cg_steps):
                    for a in range(k):
                        Ap[a] = reg * p[a]
                    for q in range(s, e):
                        i = indices[q]
                        dot = p[r] if bias else zero
                        for a in range(r):
                            dot += D[a, i] * p[a]
                        for a in range(r):
                            Ap[a] += dot * D[a, i]
                        if bias:
                            Ap[r] += dot
                    pAp = zero
                    for a in range(k):
                        pAp += p[a] * Ap[a]
                    rsold, done = _cg_update(x, res, p, Ap, pAp, rsold, zero)
                    if done:
                        break
            for a in range(k):
                Z[a, j] = x[a]
