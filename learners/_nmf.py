"""Non-negative matrix factorization on the primitives: :class:`NMFModel` (a Learner model,
online NMF) and the scikit-learn estimators :class:`NMF` and :class:`MiniBatchNMF`.

Layout (the gmat one: one column = one example): the data ``X`` (``n_features x m``,
non-negative, sparse CSC or dense) is approximated by ``W^T H`` with

* ``components`` = ``W`` of shape ``(r, n_features)``, Fortran order (the model, the dense
  operand of ``A*S``; scikit-learn's ``components_``), and
* ``codes`` = ``H`` of shape ``(r, m)``: one code column per example (scikit-learn's ``W``,
  transposed: what :meth:`NMF.transform` returns, as rows).

Objectives (scikit-learn's beta-divergences, sums over all entries)::

    frobenius            D(X, W^T H) = 1/2 ||X - W^T H||_F^2
    kullback-leibler     D(X, W^T H) = sum_ij X_ij log(X_ij / V_ij) - X_ij + V_ij,  V = W^T H

plus, with ``alpha_W``/``alpha_H``/``l1_ratio`` (scikit-learn's regularisation, scaled as
there: ``alpha_W`` on the codes times ``n_features``, ``alpha_H`` on the components times the
number of examples)::

    + a_W l1 ||H||_1 + a_W (1 - l1)/2 ||H||_F^2 + a_H l1 ||W||_1 + a_H (1 - l1)/2 ||W||_F^2

Algorithms (both alternate: the codes first, then the components, as scikit-learn)
--------------------------------------------------------------------------------
* ``mu``: Lee and Seung's multiplicative updates.  Frobenius: ``H *= (W X) / (W W^T H)`` and
  ``W *= (H X^T) / (H H^T W)``, the numerators one ``A*S`` and one ``A*S^T``.  KL: the ratio
  ``X / (W^T H)`` at the nonzeros of a sparse ``X`` is one SDDMM, then ``H *= (W R) / (W 1)``
  and ``W *= (H R^T) / (H 1)`` (``A*S`` and ``A*S^T`` of ``R``).
* ``cd``: coordinate descent (HALS, scikit-learn's ``cd`` solver): each row of ``H`` (then of
  ``W``) in turn, exactly minimised and clipped at zero, from the Gram matrix and one ``A*S``
  (``A*S^T``) product.  Frobenius only.  By default (``cd_sweeps="auto"``) Gillis and
  Glineur's accelerated HALS (several sweeps per product) with Ang and Gillis' extrapolation
  (2019: after each iteration both factors step on along their last move,
  ``F + beta (F - F_prev)`` clipped at zero, ``beta`` growing while the objective falls and
  shrinking, the step undone, when it rises); the objective comes from the Gram matrices and
  the sweeps' own products (``||X||^2 - 2 <W, H X^T> + <W W^T, H H^T>``), never another pass
  over ``X``.
* Minibatch (:meth:`NMFModel.update`, online NMF for streams): each minibatch's codes are
  solved with the components fixed (a few inner iterations), then the components move using
  statistics accumulated over the minibatches with a forgetting factor ``rho``: for ``mu``
  scikit-learn's ``MiniBatchNMF`` rule (``W = A / B`` with ``A <- rho A + W * (H X^T)``,
  ``B <- rho B + H H^T W``), for ``cd`` Mairal et al.'s online rule (``A <- rho A + H H^T``,
  ``B <- rho B + H X^T``, one HALS sweep of ``W`` on them).
* With ``comm=`` (full batch, :meth:`NMFModel.fit`) each rank holds its own examples (and
  codes): the components' statistics (``H X^T`` and ``H H^T``, or ``H R^T`` and ``H 1``) are
  all-reduced each iteration, so every rank has the single-process components.
"""

from __future__ import annotations

import logging
import math
import numbers
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from numba import get_num_threads, njit, prange
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from roofline import gmat
from roofline.datasources import MatSource, Minibatch
from roofline.gmat import Options, option

from ._factor import CPUFactorModelMixin
from ._models import Model

__all__ = ["MiniBatchNMF", "NMF", "NMFModel", "NMFOptions", "beta_divergence", "nmf_init"]

logger = logging.getLogger(__name__)

#: Floor of denominators and of ``W^T H`` at the nonzeros (scikit-learn's EPSILON).
EPSILON = float(np.finfo(np.float32).eps)
_EPS64 = float(np.finfo(np.float64).eps)

_BETA = {"frobenius": 2, "kullback-leibler": 1, 2: 2, 1: 1}


def _beta_of(beta_loss):
    try:
        return _BETA[beta_loss]
    except (KeyError, TypeError):
        raise ValueError(f"beta_loss must be 'frobenius' (2) or 'kullback-leibler' (1), got "
                         f"{beta_loss!r}") from None


def check_nonnegative(X, name="X"):
    """Raise ``ValueError`` naming ``name`` when ``X`` has a negative or non-finite value.

    Parameters
    ----------
    X : CSC matrix or dense array
    name : str

    Raises
    ------
    ValueError
    """
    vals = X.data if gmat.is_sparse(X) else X
    if vals.size and not np.all(np.isfinite(vals)):
        raise ValueError(f"{name} has non-finite values (NaN or inf); NMF needs finite "
                         f"non-negative data")
    if vals.size and vals.min() < 0:
        raise ValueError(f"Negative values in data passed to {name}: {name} has negative "
                         f"values (min {vals.min():g}); NMF needs non-negative data")


# ---------------------------------------------------------------------------------------------
# the products, one place for sparse (primitives) and dense (BLAS) data


def _wx(Wt, X, cache=None):
    """``W X`` (r x m): ``A*S`` for sparse ``X``."""
    if gmat.is_sparse(X):
        return gmat.mult_as(Wt, X, cache=cache, tag="nmf.wx")
    return Wt @ X


def _hxt(H, X, cache=None, tplan=None, values=None):
    """``H X^T`` (r x n): ``A*S^T`` for sparse ``X``; with ``tplan`` (:func:`_transpose_plan`
    of ``X``'s pattern) the same product as ``A*S`` over the transposed matrix (a gather, no
    scatter), its values ``values[perm]`` (``X``'s own when ``values`` is None)."""
    if gmat.is_sparse(X):
        H = np.asfortranarray(H)
        if tplan is not None:
            XT, perm = tplan
            if values is not None:
                np.take(values, perm, out=XT.data)
            return gmat.mult_as(H, XT, cache=cache, tag="nmf.hxt")
        return gmat.mult_ast(H, X, cache=cache, tag="nmf.hxt")
    return H @ X.T


def _transpose_plan(X):
    """``(XT, perm)``: ``X^T`` as CSC (``m x n``, one column per feature) and the permutation
    with ``XT.data == X.data[perm]``; built once per fit, O(nnz)."""
    n, m = X.shape
    nnz = int(X.indptr[-1])
    indptr = np.empty(n + 1, X.indptr.dtype)
    indices = np.empty(nnz, X.indices.dtype)
    perm = np.empty(nnz, np.int64)
    _transpose_kernel(X.indptr, X.indices, indptr, indices, perm)
    XT = sp.csc_matrix((X.data[perm], indices, indptr), shape=(m, n))
    return XT, perm


@njit(cache=True)
def _transpose_kernel(indptr, indices, out_indptr, out_indices, perm):
    """Counting sort of a CSC pattern by row: ``out_indptr``/``out_indices`` the transposed
    pattern (column ``i`` = row ``i``, its indices sorted), ``perm`` the source position of
    each transposed entry (one pass to count, one to place: O(nnz + n))."""
    n = out_indptr.shape[0] - 1
    m = indptr.shape[0] - 1
    out_indptr[:] = 0
    for k in range(indptr[m]):
        out_indptr[indices[k] + 1] += 1
    for i in range(n):
        out_indptr[i + 1] += out_indptr[i]
    nxt = out_indptr[:n].copy()
    for j in range(m):
        for k in range(indptr[j], indptr[j + 1]):
            i = indices[k]
            q = nxt[i]
            out_indices[q] = j
            perm[q] = k
            nxt[i] = q + 1


def _ratio(X, Wt, H, cache=None):
    """``R = X / max(W^T H, EPSILON)`` at the nonzeros of ``X`` (SDDMM) or everywhere (dense);
    also returns the clipped ``W^T H`` values."""
    if gmat.is_sparse(X):
        V = gmat.sddmm(X, Wt, np.asfortranarray(H), scale=False, cache=cache,
                       tag="nmf.wh")
        v = V.data
        np.maximum(v, EPSILON, out=v)
        R = gmat.csc_from_arrays(type(X), X.data / v, X.indices, X.indptr, X.shape)
        return R, v
    V = Wt.T @ H
    np.maximum(V, EPSILON, out=V)
    return X / V, V


def beta_divergence(X, Wt, H, beta, wx=None):
    """The beta-divergence ``D(X, W^T H)`` (1/2 squared Frobenius or generalised KL; see the
    module docstring), as scikit-learn's ``_beta_divergence``.

    Parameters
    ----------
    X : CSC matrix or dense array (n_features, m)
    Wt : array (r, n_features)
        The components.
    H : array (r, m)
        The codes.
    beta : {2, 1}
    wx : array (r, m), optional
        ``W X`` when already computed (Frobenius).

    Returns
    -------
    float
    """
    if beta == 2:
        xx = float(np.dot(X.data, X.data)) if gmat.is_sparse(X) else float(
            np.einsum("ij,ij->", X, X, dtype=np.float64))
        if wx is None:
            wx = _wx(Wt, X)
        cross = float(np.einsum("ij,ij->", wx, H, dtype=np.float64))
        G = Wt.astype(np.float64) @ Wt.T.astype(np.float64)
        HH = H.astype(np.float64) @ H.T.astype(np.float64)
        return max(0.5 * (xx - 2 * cross + float(np.sum(G * HH))), 0.0)
    if gmat.is_sparse(X):
        V = gmat.sddmm(X, Wt, np.asfortranarray(H), scale=False).data.astype(np.float64)
        x = X.data.astype(np.float64)
    else:
        V = (Wt.T @ H).astype(np.float64).ravel()
        x = X.astype(np.float64).ravel()
    keep = x > EPSILON
    x, V = x[keep], V[keep]
    np.maximum(V, EPSILON, out=V)
    s = float(np.dot(Wt.sum(axis=1, dtype=np.float64), H.sum(axis=1, dtype=np.float64)))
    return float(np.dot(x, np.log(x / V)) + s - x.sum())


# ---------------------------------------------------------------------------------------------
# the updates


@njit(cache=True, parallel=True)
def _hals_kernel(FT, G, BT, l1, l2, viol):
    """One HALS sweep over the columns of ``F`` (``FT``: p x r, C order, updated in place):
    for each column ``j`` (in parallel: columns are independent) and each row ``t`` in
    order, ``F[t, j] = max(0, F[t, j] - (G[t] . F[:, j] + l2 F[t, j] - B[t, j] + l1) /
    (G[t, t] + l2))``; scikit-learn's ``_update_cdnmf_fast``.  Returns the sum of the absolute
    projected gradients of column ``j`` in ``viol[j]``."""
    p, r = FT.shape
    for j in prange(p):
        vj = 0.0
        for t in range(r):
            grad = l1 - BT[j, t] + l2 * FT[j, t]
            for q in range(r):
                grad += G[t, q] * FT[j, q]
            v = FT[j, t]
            pg = min(grad, 0.0) if v == 0.0 else grad
            vj += abs(pg)
            h = G[t, t] + l2
            if h != 0.0:
                nv = v - grad / h
                FT[j, t] = nv if nv > 0.0 else 0.0
        viol[j] = vj


#: Columns that :func:`_hals_csc_kernel` sweeps together (SIMD across columns).
_BLOCK = 8


@njit(cache=True, parallel=True)
def _hals_csc_kernel(FT, G, At, indptr, indices, data, l1, l2, sweeps, eps, chunk, viol,
                     BT, cross, prev, bx, scat):
    """HALS of ``F`` (``FT``: p x r, C order, in place) fused with its right-hand side
    ``B = A X`` (``At``: r x n, Fortran order, the other factor; ``X``: n x p CSC as
    ``indptr``/``indices``/``data``).  Columns of ``F`` are independent given ``G``: in
    parallel (``chunk`` columns per task) and in blocks of :data:`_BLOCK` columns, each
    column's ``b`` gathered once (float64), then up to ``sweeps`` sweeps of the block (rows in
    order, each exactly minimised and clipped at 0: scikit-learn's ``_update_cdnmf_fast``, the
    gradient ``G[t] . f + l2 f[t] + l1 - b[t]`` from the current ``f``), stopping once a sweep
    moves the block by at most ``eps`` times its first sweep's move (Gillis and Glineur's
    rule, per block).  ``viol[j]``: the first sweep's projected-gradient sum of column ``j``.
    A non-empty ``BT`` (p x r, C order) is ``B^T`` already computed (dense data: one BLAS
    product), read instead of the gather.  ``cross[j]`` (p x 2): ``f . B[:, j]`` of column
    ``j`` before and after its sweeps (the cross term of the objective, so that it needs no
    other pass over ``X``).  A non-empty ``prev`` (p x r, C order) extrapolates on the way
    out (Ang and Gillis): ``F[:, j] = max(0, f + bx (f - prev[j]))`` and ``prev[j] = f``.  A
    non-empty ``scat`` (g x n x r, zeroed) receives the other side's product ``(F X^T)^T`` of
    the written ``F`` in ``g`` parts (a scatter of the column just swept, its nonzeros still
    in cache: one pass over ``X`` per iteration), part ``k`` from the ``k``-th of ``g`` runs
    of chunks, in parallel (the same sums whatever thread runs which)."""
    p, r = FT.shape
    nb = _BLOCK
    given = BT.shape[0] > 0
    extr = prev.shape[0] > 0
    scatter = scat.shape[0] > 0
    n_chunks = (p + chunk - 1) // chunk
    hinv = np.zeros(r)
    for t in range(r):
        if G[t, t] + l2 != 0.0:
            hinv[t] = 1.0 / (G[t, t] + l2)
    # with a scatter, slice g of it takes a fixed run of chunks (deterministic sums)
    n_groups = scat.shape[0] if scatter else n_chunks
    per_group = (n_chunks + n_groups - 1) // n_groups
    for g in prange(n_groups):
        ft = np.zeros((r, nb))  # the block's columns side by side: the sweep is SIMD over e
        bt = np.zeros((r, nb))
        b = np.empty(r)
        grad = np.empty(nb)
        vj = np.zeros(nb)
        for c in range(g * per_group, min(n_chunks, (g + 1) * per_group)):
            lo = c * chunk
            hi = min(lo + chunk, p)
            for j0 in range(lo, hi, nb):
                w = min(nb, hi - j0)
                for e in range(nb):
                    vj[e] = 0.0
                    if e >= w:  # padding: zero columns stay zero and move nothing
                        for t in range(r):
                            ft[t, e] = 0.0
                            bt[t, e] = 0.0
                        continue
                    j = j0 + e
                    if given:
                        for t in range(r):
                            b[t] = BT[j, t] - l1
                    else:
                        for t in range(r):
                            b[t] = -l1
                        for k in range(indptr[j], indptr[j + 1]):
                            i = indices[k]
                            v = data[k]
                            for t in range(r):
                                b[t] += v * At[t, i]
                    c0 = 0.0
                    for t in range(r):
                        ft[t, e] = FT[j, t]
                        bt[t, e] = b[t]
                        c0 += ft[t, e] * (b[t] + l1)
                    cross[j, 0] = c0
                first = 0.0
                for s in range(sweeps):
                    move = 0.0
                    for t in range(r):
                        for e in range(nb):
                            grad[e] = l2 * ft[t, e] - bt[t, e]
                        for q in range(r):
                            gtq = G[t, q]
                            for e in range(nb):
                                grad[e] += gtq * ft[q, e]
                        ht = hinv[t]
                        for e in range(nb):
                            v = ft[t, e]
                            gr = grad[e]
                            if s == 0:
                                vj[e] += abs(min(gr, 0.0) if v == 0.0 else gr)
                            nv = max(v - gr * ht, 0.0)
                            move += (nv - v) * (nv - v)
                            ft[t, e] = nv
                    if s == 0:
                        first = move
                    elif move <= eps * eps * first:
                        break
                for e in range(w):
                    j = j0 + e
                    viol[j] = vj[e]
                    c1 = 0.0
                    for t in range(r):
                        fn = ft[t, e]
                        c1 += fn * (bt[t, e] + l1)
                        if extr:
                            y = fn + bx * (fn - prev[j, t])
                            prev[j, t] = fn
                            FT[j, t] = y if y > 0.0 else 0.0
                        else:
                            FT[j, t] = fn
                        b[t] = FT[j, t]
                    cross[j, 1] = c1
                    if scatter:
                        sc = scat[g]
                        for k in range(indptr[j], indptr[j + 1]):
                            i = indices[k]
                            v = data[k]
                            for t in range(r):
                                sc[i, t] += v * b[t]


@njit(cache=True, parallel=True)
def _mu_codes_kernel(HT, NT, G, s, l1, l2, eps):
    """One multiplicative update of the codes (``HT``: m x r, C order, in place) from the
    numerator ``NT`` (m x r): Frobenius (``G`` the r x r Gram matrix: denominator ``G h``) when
    ``s`` is empty, else KL (denominator ``s``, the components' row sums)."""
    m, r = HT.shape
    frob = s.shape[0] == 0
    for j in prange(m):
        den = np.empty(r)
        for t in range(r):
            d = 0.0
            if frob:
                for q in range(r):
                    d += G[t, q] * HT[j, q]
            else:
                d = s[t]
            d += l1 + l2 * HT[j, t]
            den[t] = d if d != 0.0 else eps
        for t in range(r):
            HT[j, t] *= NT[j, t] / den[t]


#: Below this much work (multiply-adds) a kernel runs its serial twin on the calling thread.
PARALLEL_MIN_WORK = 1 << 18

#: Below this much work (multiply-adds) :func:`_hals_csc` runs its serial twin: a 2-thread
#: start costs more than a digits-sized sweep (1797 x 64, r = 10) on a busy machine.
FUSED_PARALLEL_MIN_WORK = 1 << 22

#: Dense products below this many multiply-adds run on one BLAS thread.
BLAS_THREADS_MIN_WORK = 1 << 26


def _blas_threads(X, r):
    """The BLAS threads for products with ``X``: one for sparse ``X`` (the dense products are
    then ``r x r``) and for small dense ones (a multi-threaded BLAS waiting for busy cores
    costs more than such a product: 50x measured on digits, 10 x 1797 x 64, on a loaded
    2-core machine); the library's own choice for large dense products."""
    import contextlib

    from ._kmeans import one_blas_thread

    if gmat.is_sparse(X) or r * int(np.prod(X.shape)) < BLAS_THREADS_MIN_WORK:
        return one_blas_thread()
    return contextlib.nullcontext()

_hals_kernel_serial = njit(cache=True)(_hals_kernel.py_func)
_mu_codes_kernel_serial = njit(cache=True)(_mu_codes_kernel.py_func)
_hals_csc_kernel_serial = njit(cache=True)(_hals_csc_kernel.py_func)


def _hals_csc(F, G, A, X, l1=0.0, l2=0.0, sweeps=1, eps=0.0, cross=None, prev=None,
              beta=0.0, scatter=None, B=None):
    """HALS of ``F`` (r x p, Fortran order, in place) against ``1/2 tr(F^T G F) - tr(F^T A X)``
    with the product ``A X`` (``A``: r x n Fortran; ``X``: n x p CSC) fused into the sweep
    (:func:`_hals_csc_kernel`: one gather per column, no ``r x p`` block), or for a dense ``X``
    (Fortran order) one BLAS product then the same blocked sweeps; up to ``sweeps`` sweeps per
    column, stopping a block of columns once a sweep moves it by at most ``eps`` times its
    first sweep's move.  Returns the first sweep's projected-gradient sum (as :func:`_hals`);
    a given ``cross`` (2 floats) receives ``<F, A X>`` before and after the sweeps.

    ``B`` (r x p, Fortran order): ``A X`` already computed (``X`` then unused).  ``prev``
    (r x p, Fortran order): extrapolate the written ``F`` by ``beta`` from it (and store the
    swept ``F`` in it).  ``scatter`` (an array of ``(g, n, r)``, zeroed; sparse ``X``):
    receives in ``g`` parts ``(F X^T)^T`` of the written ``F``; their sum is the other side's
    ``B^T`` (``g``: the threads that scatter)."""
    p = F.shape[1]
    viol = np.empty(p)
    if p == 0:
        if cross is not None:
            cross[:] = 0.0
        return 0.0
    r = F.shape[0]
    sparse = X is not None and gmat.is_sparse(X)
    if sparse:
        indptr, indices, data = X.indptr, X.indices, X.data
    else:
        indptr, indices, data = (np.zeros(1, np.int64), np.zeros(0, np.int32),
                                 np.zeros(0, F.dtype))
    nnz = int(indptr[-1])
    if B is not None:
        BT = np.asarray(B.T, np.float64, order="C")
    elif sparse:
        BT = np.empty((0, r))
    else:  # B^T = X^T A^T, p x r, C order
        BT = np.asarray(X.T @ A.T, np.float64, order="C")
    work = F.shape[0] * (nnz + F.size * int(sweeps))
    kern = _hals_csc_kernel if work >= FUSED_PARALLEL_MIN_WORK else _hals_csc_kernel_serial
    chunk = _BLOCK * max(1, min(32, p // (8 * _BLOCK * get_num_threads())))
    cr = np.empty((p, 2))
    prev = np.empty((0, r), F.dtype) if prev is None else prev.T
    scatter = np.empty((0, 0, r)) if scatter is None or not sparse else scatter
    kern(F.T, np.asarray(G, np.float64), A, indptr, indices, data, float(l1), float(l2),
         int(sweeps), float(eps), chunk, viol, BT, cr, prev, float(beta), scatter)
    if cross is not None:
        cross[:] = cr.sum(axis=0)
    return float(viol.sum())


def _hals_sweeps(F, G, B, l1, l2, sweeps, eps):
    """Up to ``sweeps`` HALS sweeps of ``F`` against a computed ``B`` (:func:`_hals`),
    stopping once a sweep moves ``F`` by at most ``eps`` times the first sweep's move (the
    Frobenius norm); returns the first sweep's projected-gradient sum."""
    if sweeps == 1:
        return _hals(F, G, B, l1, l2)
    prev = F.copy(order="A")
    viol = _hals(F, G, B, l1, l2)
    first = float(np.linalg.norm(F - prev))
    for _ in range(sweeps - 1):
        prev[...] = F
        _hals(F, G, B, l1, l2)
        if float(np.linalg.norm(F - prev)) <= eps * first:
            break
    return viol


#: Gillis and Glineur's accelerated HALS: ``alpha`` of the sweeps per product.
HALS_ALPHA = 0.5

#: Ang and Gillis' extrapolated HALS (2019): the first extrapolation weight ``beta_0``, its
#: decrease on a restart (``beta / eta``) and growth otherwise (``gamma``; its cap grows by
#: ``gamma_bar``).  ``beta_0`` 0.25 rather than the paper's 0.5: fewer iterations to
#: scikit-learn's objective from NNDSVDa on the benchmark's data (power-law 8e5 nonzeros 12
#: against 15, digits 17 against 18, power-law 8e6 nonzeros 22 both).
EXTRAPOLATION_BETA0 = 0.25
EXTRAPOLATION_ETA = 1.5
EXTRAPOLATION_GAMMA = 1.05
EXTRAPOLATION_GAMMA_BAR = 1.01


def _auto_sweeps(nnz, n_other, p, r, sweeps):
    """HALS sweeps per product of one side: ``sweeps`` when an int; for ``"auto"``, Gillis and
    Glineur's ``floor(1 + alpha rho)`` with ``rho = 1 + (nnz + n_other r) / (p r + p)`` (the
    product and Gram's cost over a sweep's, ``p`` the columns swept)."""
    if sweeps != "auto":
        return int(sweeps)
    rho = 1.0 + (nnz + n_other * r) / max(p * r + p, 1)
    return max(1, int(1 + HALS_ALPHA * rho))


def _mu_codes(X, Wt, H, beta, l1, l2, cache=None, wx=None, G=None):
    """One multiplicative update of the codes ``H`` (in place); returns ``W X`` (Frobenius,
    reusable while ``W`` is unchanged)."""
    if beta == 2:
        num = wx if wx is not None else _wx(Wt, X, cache)
        G = np.asarray(G if G is not None else Wt @ Wt.T, np.float64)
        s = np.empty(0)
    else:
        R, _ = _ratio(X, Wt, H, cache)
        num = _wx(Wt, R, cache) if gmat.is_sparse(R) else Wt @ R
        G = np.empty((0, 0))
        s = Wt.sum(axis=1, dtype=np.float64)
    if H.flags.f_contiguous and num.flags.f_contiguous:
        kern = (_mu_codes_kernel if H.size * H.shape[0] >= PARALLEL_MIN_WORK
                else _mu_codes_kernel_serial)
        kern(H.T, num.T, G, s, float(l1), float(l2), EPSILON)
    else:  # any layout: numpy
        den = G @ H if beta == 2 else np.broadcast_to(s[:, None], H.shape).copy()
        den = den + l1 + l2 * H
        den[den == 0] = EPSILON
        H *= num / den
    return wx if beta == 2 else None


def _mu_components_stats(X, Wt, H, beta, cache=None, tplan=None):
    """The numerator and denominator pieces of the components' update: Frobenius
    ``(H X^T, H H^T)``, KL ``(H R^T, H 1)``."""
    if beta == 2:
        return _hxt(H, X, cache, tplan), H @ H.T
    R, _ = _ratio(X, Wt, H, cache)
    if gmat.is_sparse(R):
        return _hxt(H, R, cache, tplan, None if tplan is None else R.data), H.sum(axis=1)
    return H @ R.T, H.sum(axis=1)


def _mu_components(Wt, num, aux, beta, l1, l2):
    """``W *= num / den`` (in place) from the statistics of :func:`_mu_components_stats`."""
    num = np.array(num, dtype=Wt.dtype, order="F")
    if beta == 2:
        den = aux.astype(Wt.dtype) @ Wt
    else:
        s = np.array(aux, dtype=Wt.dtype)
        s[s == 0] = 1.0
        den = np.broadcast_to(s[:, None], Wt.shape).copy()
    if l1 > 0:
        den += l1
    if l2 > 0:
        den += l2 * Wt
    den[den == 0] = EPSILON
    num /= den
    Wt *= num
    if beta <= 1:
        Wt[Wt < _EPS64] = 0


def _hals(F, G, B, l1=0.0, l2=0.0):
    """One HALS sweep (scikit-learn's ``_update_cdnmf_fast`` over all columns at once):
    minimise ``1/2 tr(F^T G F) - tr(F^T B)`` (+ l1, l2) row by row of ``F`` (in place), clipped
    at 0.  Returns the sum of the absolute projected gradients before each row's update."""
    G = np.asarray(G, np.float64)
    B = np.asarray(B)
    if F.flags.f_contiguous and B.flags.f_contiguous and B.dtype == F.dtype:
        viol = np.empty(F.shape[1])
        kern = _hals_kernel if F.size * F.shape[0] >= PARALLEL_MIN_WORK else _hals_kernel_serial
        kern(F.T, G, B.T, float(l1), float(l2), viol)
        return float(viol.sum())
    G = G.astype(F.dtype, copy=True)
    if l2 > 0:
        G.flat[:: G.shape[0] + 1] += l2
    B = np.asarray(B, dtype=F.dtype)
    if l1 > 0:
        B = B - l1
    violation = 0.0
    for t in range(F.shape[0]):
        grad = G[t] @ F - B[t]
        row = F[t]
        pg = np.where(row == 0, np.minimum(grad, 0), grad)
        violation += float(np.abs(pg).sum(dtype=np.float64))
        h = G[t, t]
        if h != 0:
            np.maximum(row - grad / h, 0, out=row)
    return violation


# ---------------------------------------------------------------------------------------------
# initialisation


def nmf_init(X, n_components, init="nndsvda", rng=None, eps=1e-6):
    """Initial components and codes (scikit-learn's ``random``, ``nndsvd`` and ``nndsvda``).

    Parameters
    ----------
    X : CSC matrix or dense array (n_features, m)
        Non-negative data.
    n_components : int
    init : {"random", "nndsvd", "nndsvda"}
        ``random``: ``|N(0, 1)| * sqrt(mean(X) / r)``; ``nndsvd``: Boutsidis and Gallopoulos'
        non-negative SVD; ``nndsvda``: its zeros filled with ``mean(X)``.
    rng : numpy.random.Generator or int, optional
    eps : float
        NNDSVD values below this are zeroed.

    Returns
    -------
    Wt : ndarray (r, n_features), Fortran order
    H : ndarray (r, m), Fortran order
    """
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    n, m = X.shape
    r = n_components
    total = float(X.data.sum()) if gmat.is_sparse(X) else float(X.sum(dtype=np.float64))
    mean = total / (n * m)
    dt = X.dtype
    if init == "random":
        avg = math.sqrt(mean / r)
        Wt = np.abs(avg * rng.standard_normal((r, n))).astype(dt)
        H = np.abs(avg * rng.standard_normal((r, m))).astype(dt)
        return np.asfortranarray(Wt), np.asfortranarray(H)
    if init not in ("nndsvd", "nndsvda"):
        raise ValueError(f"init must be 'random', 'nndsvd' or 'nndsvda', got {init!r}")
    from sklearn.utils.extmath import randomized_svd

    A = X.T if not gmat.is_sparse(X) else X.T.tocsr()  # rows = examples
    U, S, V = randomized_svd(A, r, random_state=int(rng.integers(2**31 - 1)))
    C = np.zeros((m, r))  # codes, rows
    D = np.zeros((r, n))  # components
    C[:, 0] = math.sqrt(S[0]) * np.abs(U[:, 0])
    D[0] = math.sqrt(S[0]) * np.abs(V[0])
    for j in range(1, r):
        x, y = U[:, j], V[j]
        xp, yp = np.maximum(x, 0), np.maximum(y, 0)
        xn, yn = np.abs(np.minimum(x, 0)), np.abs(np.minimum(y, 0))
        xpn, ypn = np.linalg.norm(xp), np.linalg.norm(yp)
        xnn, ynn = np.linalg.norm(xn), np.linalg.norm(yn)
        mp, mn = xpn * ypn, xnn * ynn
        if mp > mn:
            u, v, sigma = xp / xpn, yp / ypn, mp
        else:
            u, v, sigma = xn / xnn, yn / ynn, mn
        lbd = math.sqrt(S[j] * sigma)
        C[:, j] = lbd * u
        D[j] = lbd * v
    C[C < eps] = 0
    D[D < eps] = 0
    if init == "nndsvda":
        C[C == 0] = mean
        D[D == 0] = mean
    return np.asfortranarray(D.astype(dt)), np.asfortranarray(C.T.astype(dt))


# ---------------------------------------------------------------------------------------------
# the model


@dataclass
class NMFOptions(Options):
    """Options of :class:`NMFModel`."""

    n_components: int = option(10, "r: the rank of the factorization", low=1)
    beta_loss: str = option("frobenius", "the divergence",
                            choices=("frobenius", "kullback-leibler"))
    solver: str = option("mu", "multiplicative updates or coordinate descent (HALS; "
                               "frobenius only)", choices=("mu", "cd"))
    dtype: str = option("float32", "value dtype of the factors", choices=("float32", "float64"))
    init: str = option("nndsvda", "how the first minibatch seeds the components",
                       choices=("random", "nndsvd", "nndsvda"))
    seed: int = option(0, "seed of the initialisation RNG", low=0)
    inner_iter: int = option(10, "minibatch: iterations solving each minibatch's codes", low=1)
    inner_tol: float = option(1e-4, "minibatch: stop the codes' iterations when they change "
                                    "by less than this (relative)", low=0.0)
    rho: float = option(0.9, "minibatch: forgetting factor of the accumulated statistics per "
                             "minibatch", low=0.0, low_open=True, high=1.0)
    alpha_W: float = option(0.0, "regularisation of the codes (scikit-learn's alpha_W)",
                            low=0.0)
    alpha_H: float = option(0.0, "regularisation of the components (scikit-learn's alpha_H)",
                            low=0.0)
    l1_ratio: float = option(0.0, "L1 share of the regularisation", low=0.0, high=1.0)
    keep_codes: bool = option(False, "minibatch: keep each example's codes across passes "
                                     "(``codes``, by the minibatch's ``start``) and warm-start "
                                     "its next solve from them, as scikit-learn's "
                                     "MiniBatchNMF does; needs the examples in the same order "
                                     "every pass")
    cd_sweeps: object = option("auto", "cd: HALS sweeps over the codes (then the components) per "
                                  "product: 1 (scikit-learn's cd), an int > 1, or 'auto' "
                                  "(Gillis and Glineur's accelerated HALS: up to "
                                  "1 + alpha rho sweeps per side, alpha 0.5, rho the product's "
                                  "cost over a sweep's, stopped by cd_sweep_tol)",
                               kind=(int, str))
    cd_extrapolate: object = option("auto", "cd: Ang and Gillis' extrapolated HALS (a "
                                       "momentum step on both factors after each iteration, "
                                       "undone when the objective rises): True, False or "
                                       "'auto' (with cd_sweeps='auto')", kind=(bool, str))
    cd_sweep_tol: float = option(0.1, "cd with more than one sweep per product: stop a block "
                                      "of columns' sweeps once one moves it by at most this "
                                      "fraction of the first sweep's move (Gillis and "
                                      "Glineur's epsilon; 0: always cd_sweeps)", low=0.0)

    def _check(self, prefix):
        sw = self.cd_sweeps
        if sw != "auto" and (isinstance(sw, str) or sw < 1):
            raise ValueError(f"{prefix}option 'cd_sweeps' must be a positive integer or 'auto', "
                             f"got {sw!r}")
        if self.cd_extrapolate not in (True, False, "auto"):
            raise ValueError(f"{prefix}option 'cd_extrapolate' must be True, False or 'auto', "
                             f"got {self.cd_extrapolate!r}")
        if self.solver == "cd" and self.beta_loss != "frobenius":
            raise ValueError(f"{prefix}solver 'cd' needs beta_loss='frobenius' (use solver "
                             f"'mu' for kullback-leibler)")


class NMFModel(CPUFactorModelMixin, Model):
    """Non-negative matrix factorization ``X ~ W^T H``: the components ``W`` are the model,
    the codes ``H`` are per example (see the module docstring).

    Trained full batch by :meth:`fit` or by minibatches (:meth:`update`, inside a
    :class:`~roofline.learners.Learner` with :class:`~roofline.learners.ModelUpdate`).

    Parameters
    ----------
    opts : NMFOptions, optional
    **kwargs
        Override fields of ``opts``.

    Attributes
    ----------
    components : ndarray (r, n_features), Fortran order
    """

    #: FactorSync's rule for Learner(comm=) (learners/_parallel.py)
    _sync_rule = "nmf"

    _array = "components"
    _options = NMFOptions

    def __init__(self, opts: NMFOptions | None = None, **kwargs):
        self._setup(opts, kwargs)
        self._A = self._B = None
        #: ``opts.keep_codes``: the codes (r x examples seen, Fortran order) kept across
        #: passes; may be set before training (e.g. NNDSVD's codes).
        self.codes = None

    @property
    def _n_rows(self):
        return self.opts.n_components

    @property
    def beta(self) -> int:
        """int: 2 (Frobenius) or 1 (KL)."""
        return _beta_of(self.opts.beta_loss)

    @property
    def n_outputs(self) -> int:
        """int: ``r``, the rows of the dense operand of the products."""
        return self.opts.n_components

    def init(self, n_features: int, device: str = "cpu") -> None:
        """Allocate the components (zeros; the first minibatch seeds them).

        Parameters
        ----------
        n_features : int
        device : {"cpu"}

        Raises
        ------
        ValueError
            ``device`` is not ``"cpu"``.
        """
        self._require_cpu(device)
        self._allocate(n_features)

    def set_parameters(self, components) -> None:
        """Set the components (copied, Fortran order, model dtype).

        Parameters
        ----------
        components : array (r, n_features), non-negative

        Raises
        ------
        ValueError
            Wrong shape, or negative values.
        """
        c = self._checked_array(components)
        check_nonnegative(c, "components")
        self._store_array(c)
        self._A = self._B = None

    def parameters(self) -> dict:
        """The trained arrays.

        Returns
        -------
        dict
            ``{"components": components}``.
        """
        return {"components": self.components}

    def _regs(self, n_features, m):
        o = self.opts
        return (n_features * o.alpha_W * o.l1_ratio, n_features * o.alpha_W * (1 - o.l1_ratio),
                m * o.alpha_H * o.l1_ratio, m * o.alpha_H * (1 - o.l1_ratio))

    # -- codes --------------------------------------------------------------------------------
    def transform(self, X, cache=None, *, max_iter=None, tol=None, H=None):
        """Codes of the examples of ``X`` with the components fixed.

        Parameters
        ----------
        X : CSC matrix or dense array (n_features, m), non-negative
        cache : BufferCache, optional
        max_iter : int, optional
            Iterations (``opts.inner_iter`` by default).
        tol : float, optional
            Stop when ``||H - H_prev|| <= tol ||H||`` (``opts.inner_tol``).
        H : array (r, m), optional
            Starting codes (updated in place); ``sqrt(mean(X) / r)`` everywhere by default.

        Returns
        -------
        H : ndarray (r, m), Fortran order
        """
        with _blas_threads(X, self.opts.n_components):
            return self._transform(X, cache, max_iter, tol, H)[0]

    def _transform(self, X, cache, max_iter, tol, H):
        """:meth:`transform`'s work: ``(H, W X)`` (``W X`` at the fixed components, for the
        Frobenius loss after at least one iteration; else None)."""
        self._check_ready(X)
        check_nonnegative(X)
        o = self.opts
        max_iter = o.inner_iter if max_iter is None else max_iter
        tol = o.inner_tol if tol is None else tol
        r, m = o.n_components, X.shape[1]
        if H is None:
            nnz_sum = float(X.data.sum()) if gmat.is_sparse(X) else float(X.sum())
            avg = math.sqrt(nnz_sum / max(X.shape[0] * m, 1) / r)
            H = np.full((r, m), avg, self.dtype, order="F")
        if m == 0 or max_iter == 0:
            return H, None
        l1, l2, _, _ = self._regs(X.shape[0], m)
        Wt = self.components
        wx = _wx(Wt, X, cache).copy(order="F") if self.beta == 2 else None
        G = Wt @ Wt.T
        prev = H.copy() if tol > 0 and max_iter > 1 else None
        for it in range(max_iter):
            if o.solver == "cd":
                _hals(H, G, wx, l1, l2)
            else:
                _mu_codes(X, Wt, H, self.beta, l1, l2, cache, wx=wx, G=G)
            if prev is not None and it + 1 < max_iter:  # the last iteration stops anyway
                nh = float(np.linalg.norm(H))
                if nh == 0 or float(np.linalg.norm(H - prev)) <= tol * nh:
                    break
                prev[...] = H
        return H, wx

    # -- Model interface ----------------------------------------------------------------------
    def loss(self, batch, cache=None):
        """``(D(X, W^T H), n_examples)`` of a minibatch, its codes from :meth:`transform`.

        Parameters
        ----------
        batch : Minibatch
        cache : BufferCache, optional

        Returns
        -------
        loss_sum, weight_sum : float
        """
        H = self.transform(batch.X, cache)
        return beta_divergence(batch.X, self.components, H, self.beta), float(batch.n_examples)

    def predict(self, X, cache=None):
        """The codes (as :meth:`transform`).

        Parameters
        ----------
        X : CSC matrix or dense array (n_features, m)
        cache : BufferCache, optional

        Returns
        -------
        ndarray (r, m)
        """
        return self.transform(X, cache)

    def update(self, batch, cache=None):
        """One online NMF step (module docstring): solve the minibatch's codes, then move the
        components with the accumulated statistics.  The first call seeds the components from
        the minibatch (``opts.init``).

        Parameters
        ----------
        batch : Minibatch
        cache : BufferCache, optional

        Returns
        -------
        loss_sum : float
            The minibatch's divergence at its codes, before the components move.
        weight_sum : float
            The number of examples.
        """
        with _blas_threads(batch.X, self.opts.n_components):
            return self._update(batch, cache)

    def _update(self, batch, cache):
        X = batch.X
        if self.components is None:
            self.init(X.shape[0])
        if not self._seeded:
            if X.dtype != self.dtype:
                self._check_ready(X)
            check_nonnegative(X)
            init = self.opts.init
            if init != "random" and min(X.shape) < self.opts.n_components:
                init = "random"
            Wt, _ = nmf_init(X, self.opts.n_components, init, self._rng)
            self.set_parameters(Wt)
        H, wx = self._batch_codes(X, batch.start, cache)
        beta = self.beta
        Wt = self.components
        loss = beta_divergence(X, Wt, H, beta, wx=wx)
        _, _, l1, l2 = self._regs(X.shape[0], X.shape[1])
        rho = self.opts.rho
        if self.opts.solver == "cd":
            HH = H @ H.T
            HX = np.asarray(_hxt(H, X, cache), np.float64)
            if self._A is None:
                self._A, self._B = np.zeros_like(HH, np.float64), np.zeros_like(HX)
            self._A *= rho
            self._A += HH
            self._B *= rho
            self._B += HX
            _hals(Wt, self._A, self._B, l1, l2)
        else:
            num, aux = _mu_components_stats(X, Wt, H, beta, cache)
            if beta == 2:
                den = aux @ Wt
            else:
                s = np.array(aux)
                s[s == 0] = 1.0
                den = np.broadcast_to(s[:, None], Wt.shape).copy()
            if l1 > 0:
                den = den + l1
            if l2 > 0:
                den = den + l2 * Wt
            den[den == 0] = EPSILON
            num = np.asarray(num, np.float64) * Wt
            if self._A is None:  # scikit-learn's MiniBatchNMF start: A = W, B = 1
                self._A = np.array(Wt, np.float64)
                self._B = np.ones(Wt.shape)
            self._A *= rho
            self._A += num
            self._B *= rho
            self._B += den
            Wt[...] = self._A / self._B
            if beta <= 1:
                Wt[Wt < _EPS64] = 0
        self._n_steps += 1
        return loss, float(X.shape[1])

    def _batch_codes(self, X, start, cache):
        """The minibatch's codes and ``W X`` (:meth:`_transform`): solved afresh, or
        (``keep_codes``) warm-started from the kept ones and stored back."""
        if not self.opts.keep_codes:
            return self._transform(X, cache, None, None, None)
        r, m = self.opts.n_components, X.shape[1]
        end = start + m
        have = 0 if self.codes is None else self.codes.shape[1]
        if end > have:  # examples seen for the first time: room, and the default start
            grown = np.empty((r, end), self.dtype, order="F")
            if have:
                grown[:, :have] = self.codes
            fresh, _ = self._transform(X, cache, 0, None, None)
            grown[:, max(have, start):end] = fresh[:, max(have, start) - start:]
            self.codes = grown
        H = np.array(self.codes[:, start:end], self.dtype, order="F")
        H, wx = self._transform(X, cache, None, None, H)
        self.codes[:, start:end] = H
        return H, wx

    # -- full batch ---------------------------------------------------------------------------
    def fit(self, X, *, H=None, max_iter=200, tol=1e-4, comm=None, update_components=True,
            callback=None):
        """Full-batch NMF (``opts.solver``), scikit-learn's stopping rules: ``mu`` checks every
        10 iterations whether ``sqrt(2 D)`` fell by less than ``tol`` times its start value;
        ``cd`` stops when the projected gradient's norm falls to ``tol`` times its first.

        Parameters
        ----------
        X : CSC matrix or dense array (n_features, m), non-negative
            The examples (with ``comm``: this rank's).
        H : array (r, m), optional
            Starting codes (updated in place); from ``opts.init`` with the components when
            both are unset.
        max_iter : int
        tol : float
        comm : roofline.comm.Communicator, optional
            Each rank holds its examples; the components' statistics are all-reduced.
        update_components : bool
            False: solve the codes only (``transform`` to convergence).
        callback : callable, optional
            ``callback(iteration, components, codes)`` after each iteration; a true result
            stops the fit (e.g. once a target objective is reached).

        Returns
        -------
        NMFResult
            ``codes`` (r, m), ``n_iter``, ``divergence`` (over all ranks), ``trace``.
        """
        with _blas_threads(X, self.opts.n_components):
            return self._fit(X, H, max_iter, tol, comm, update_components, callback)

    def _fit(self, X, H, max_iter, tol, comm, update_components, callback):
        check_nonnegative(X)
        o = self.opts
        beta = self.beta
        if not self._seeded:
            if comm is not None and o.init != "random":
                raise ValueError("fit(comm=) needs init='random' or set components (NNDSVD "
                                 "needs every rank's data)")
            Wt0, H0 = nmf_init(X, o.n_components, o.init, self._rng)
            if comm is not None:  # rank 0's components on every rank
                Wt0 = comm.broadcast(Wt0)
            self.set_parameters(Wt0)
            H = H0 if H is None else H
        self._check_ready(X)
        r, m = o.n_components, X.shape[1]
        if H is None:
            H = (self.transform(X, max_iter=0) if o.solver == "mu"
                 else np.zeros((r, m), self.dtype, order="F"))
        H = np.asarray(H)
        if H.shape != (r, m):
            raise ValueError(f"H has shape {H.shape}, expected ({r}, {m})")
        H = H if (H.dtype == self.dtype and H.flags.f_contiguous) else np.array(
            H, self.dtype, order="F")

        def total(x):
            return x if comm is None else float(comm.allreduce(np.array([x]))[0])

        m_all = int(total(float(m)))
        n = X.shape[0]
        l1_c, l2_c, _, _ = self._regs(n, m)
        _, _, l1_w, l2_w = self._regs(n, m_all)
        Wt = self.components
        eps = o.cd_sweep_tol
        nnz = int(X.indptr[-1]) if gmat.is_sparse(X) else X.size
        sweeps_h = _auto_sweeps(nnz, n, m, r, o.cd_sweeps)
        sweeps_w = _auto_sweeps(nnz, m, n, r, o.cd_sweeps)
        fused = o.solver == "cd" and H.flags.f_contiguous and Wt.flags.f_contiguous
        if fused and comm is None:
            return self._fit_cd(X, Wt, H, max_iter, tol, update_components, callback,
                                (l1_c, l2_c, l1_w, l2_w), sweeps_h, sweeps_w)
        err0 = prev = math.sqrt(2 * total(beta_divergence(X, Wt, H, beta)))
        trace = [err0 ** 2 / 2]
        viol0 = None
        it = 0
        tplan = _transpose_plan(X) if gmat.is_sparse(X) and update_components else None
        Xv, XvT = X, None if tplan is None else tplan[0]
        if fused and not gmat.is_sparse(X):  # dense: one BLAS product, blocked sweeps
            Xv = np.asfortranarray(X)
            XvT = np.asfortranarray(X.T) if update_components else None
        for it in range(1, max_iter + 1):
            if o.solver == "cd":
                G = Wt @ Wt.T
                if fused:  # the product inside the sweep (one gather per column)
                    viol = _hals_csc(H, G, Wt, Xv, l1_c, l2_c, sweeps_h, eps)
                else:
                    viol = _hals_sweeps(H, G, _wx(Wt, X), l1_c, l2_c, sweeps_h, eps)
                if update_components and fused and comm is None:
                    viol += _hals_csc(Wt, H @ H.T, H, XvT, l1_w, l2_w, sweeps_w, eps)
                elif update_components:
                    HX, HH = _hxt(H, X, None, tplan), H @ H.T
                    if comm is not None:
                        HX, HH = self._sum_stats(comm, HX, HH)
                    viol += _hals_sweeps(Wt, HH, HX, l1_w, l2_w, sweeps_w, eps)
                viol = total(viol)
                if viol0 is None:
                    viol0 = viol
                if viol0 == 0 or viol / viol0 <= tol:
                    break
            else:
                _mu_codes(X, Wt, H, beta, l1_c, l2_c)
                if update_components:
                    num, aux = _mu_components_stats(X, Wt, H, beta, None, tplan)
                    if comm is not None:
                        num, aux = self._sum_stats(comm, num, aux)
                    _mu_components(Wt, num, aux, beta, l1_w, l2_w)
                if tol > 0 and it % 10 == 0:
                    err = math.sqrt(2 * total(beta_divergence(X, Wt, H, beta)))
                    trace.append(err ** 2 / 2)
                    if (prev - err) / err0 < tol:
                        break
                    prev = err
            if callback is not None and callback(it, Wt, H):
                break
        final = total(beta_divergence(X, Wt, H, beta))
        trace.append(final)
        logger.info("NMF (%s, %s): %d iterations, divergence %.6g", o.solver, o.beta_loss,
                    it, final)
        return NMFResult(codes=H, n_iter=it, divergence=final, trace=trace)

    def _fit_cd(self, X, Wt, H, max_iter, tol, update_components, callback, regs, sweeps_h,
                sweeps_w):
        """:meth:`fit`'s HALS on one process (the fused sweeps of :func:`_hals_csc`), the
        objective from the Gram matrices and the sweeps' cross terms
        (``D = 1/2 (||X||^2 - 2 <W^T, X H^T> + <W W^T, H H^T>)``: no pass over ``X`` beyond
        the sweeps' own), with Ang and Gillis' extrapolation when ``opts.cd_extrapolate``
        resolves to True (:meth:`_extrapolating`)."""
        o = self.opts
        l1_c, l2_c, l1_w, l2_w = regs
        eps = o.cd_sweep_tol
        sparse = gmat.is_sparse(X)
        if sparse:
            xx = float(np.dot(X.data[: int(X.indptr[-1])], X.data[: int(X.indptr[-1])]))
            Xv = X
            # the components' product H X^T scattered by the codes' sweep (per thread)
            scat = (np.empty((get_num_threads(), X.shape[0], H.shape[0]))
                    if update_components else None)
        else:
            xx = float(np.einsum("ij,ij->", X, X, dtype=np.float64))
            Xv = np.asfortranarray(X)
            XvT = np.asfortranarray(X.T) if update_components else None
            scat = None
        extrap = update_components and self._extrapolating()
        cross = np.empty(2)
        trace = []
        viol0 = None
        it = 0
        known = None  # the divergence of the current (Wt, H), when the sweeps gave it
        Hp = None
        b_e = 0.0
        if extrap:  # Ang and Gillis (2019): eta 1.5, gamma 1.05, gamma_bar 1.01; beta_0 0.25
            b_e, b_bar = EXTRAPOLATION_BETA0, 1.0
            Hp, Wp, Wy = H.copy(order="F"), Wt.copy(order="F"), Wt.copy(order="F")
            prev_e = math.inf
        else:
            Wy = Wt
        for it in range(1, max_iter + 1):
            G = Wy @ Wy.T
            HH0 = H @ H.T if it == 1 else None
            if scat is not None:
                scat[...] = 0.0
            # the codes' sweeps; with extrapolation H leaves as H_y = max(0, H + beta (H -
            # H_prev)) and Hp as the swept H
            viol = _hals_csc(H, G, Wy, Xv, l1_c, l2_c, sweeps_h, eps, cross, prev=Hp,
                             beta=b_e, scatter=scat)
            if it == 1:  # the start's divergence from the first sweep's terms
                trace.append(max(0.5 * (xx - 2 * cross[0] + float(np.sum(G * HH0))), 0.0))
            known = None
            if not update_components:
                known = max(0.5 * (xx - 2 * cross[1] + float(np.sum(G * (H @ H.T)))), 0.0)
            else:
                if extrap:
                    Wt[...] = Wy
                HH = H @ H.T
                if sparse:
                    viol += _hals_csc(Wt, HH, H, None, l1_w, l2_w, sweeps_w, eps, cross,
                                      B=scat.sum(axis=0).T)
                else:
                    viol += _hals_csc(Wt, HH, H, XvT, l1_w, l2_w, sweeps_w, eps, cross)
                known = max(0.5 * (xx - 2 * cross[1] + float(np.sum(
                    np.asarray(Wt @ Wt.T, np.float64) * HH))), 0.0)
                if extrap:
                    if known > prev_e:  # restart: drop the extrapolation, smaller beta
                        H[...] = Hp
                        Wy[...] = Wt
                        b_bar, b_e = b_e, b_e / EXTRAPOLATION_ETA
                        known = None
                    else:  # W_y = max(0, W + beta (W - W_prev)), then beta grows
                        np.subtract(Wt, Wp, out=Wy)
                        Wy *= b_e
                        Wy += Wt
                        np.maximum(Wy, 0, out=Wy)
                        b_e = min(b_bar, EXTRAPOLATION_GAMMA * b_e)
                        b_bar = min(1.0, EXTRAPOLATION_GAMMA_BAR * b_bar)
                        prev_e = known
                    Wp[...] = Wt
            if viol0 is None:
                viol0 = viol
            if viol0 == 0 or viol / viol0 <= tol:
                break
            if callback is not None and callback(it, Wt, H):
                break
        final = known if known is not None and it > 0 else beta_divergence(X, Wt, H, 2)
        if not trace:
            trace.append(final if it == 0 else math.nan)
        trace.append(final)
        logger.info("NMF (cd%s): %d iterations, divergence %.6g",
                    ", extrapolated" if extrap else "", it, final)
        return NMFResult(codes=H, n_iter=it, divergence=final, trace=trace)

    def _extrapolating(self):
        """bool: ``opts.cd_extrapolate`` resolved (``"auto"``: with ``cd_sweeps="auto"``)."""
        e = self.opts.cd_extrapolate
        return self.opts.cd_sweeps == "auto" if e == "auto" else bool(e)

    @staticmethod
    def _sum_stats(comm, a, b):
        a = np.asarray(a, np.float64)
        b = np.asarray(b, np.float64)
        flat = comm.allreduce(np.concatenate([a.ravel(), b.ravel()]))
        return (flat[: a.size].reshape(a.shape), flat[a.size:].reshape(b.shape))

    # -- cost model ---------------------------------------------------------------------------
    def flops_per_step(self, batch) -> int:
        """Flops of a minibatch step's primitives: ``A*S`` for the codes, ``A*S^T`` for the
        components (``2 r nnz`` each), and for KL one SDDMM per inner iteration and one more
        (``2 r nnz`` each) with an ``A*S`` per inner iteration.

        Parameters
        ----------
        batch : Minibatch

        Returns
        -------
        int
        """
        X = batch.X
        nnz = X.nnz if gmat.is_sparse(X) else X.size
        r = self.opts.n_components
        if self.beta == 2:
            return int(4 * r * nnz)
        return int(2 * r * nnz * (2 * self.opts.inner_iter + 2))

    def cost(self, batch) -> gmat.Cost:
        """Compulsory bytes and flops of a minibatch step from the primitives' cost models
        (:func:`~roofline.gmat.cost_mult_as`, :func:`~roofline.gmat.cost_mult_ast`,
        :func:`~roofline.gmat.cost_sddmm`; KL's inner iterations counted once each).

        Parameters
        ----------
        batch : Minibatch
            A sparse minibatch.

        Returns
        -------
        roofline.gmat.Cost
        """
        X = batch.X
        r = self.opts.n_components
        parts = [gmat.cost_mult_as(X, r), gmat.cost_mult_ast(X, r)]
        if self.beta == 1:
            it = self.opts.inner_iter
            parts = ([gmat.cost_mult_as(X, r)] * it + [gmat.cost_sddmm(X, r, False)] * (it + 1)
                     + [gmat.cost_mult_ast(X, r)])
        return gmat.Cost("NMF step", r, X.dtype, X.nnz, sum(p.bytes for p in parts),
                         sum(p.flops for p in parts), {"primitives": len(parts)})

    def __repr__(self):
        c = self.components
        shape = "uninitialised" if c is None else f"{c.shape[0]}x{c.shape[1]}"
        return f"NMFModel({shape}, {self.opts.beta_loss}, {self.opts.solver})"


@dataclass
class NMFResult:
    """What :meth:`NMFModel.fit` returns (the fields are the attributes)."""

    codes: np.ndarray
    n_iter: int
    divergence: float
    trace: list


# ---------------------------------------------------------------------------------------------
# scikit-learn estimators


def _to_columns(est, X, reset):
    X = validate_data(est, X, accept_sparse=("csr", "csc"), dtype=[np.float64, np.float32],
                      reset=reset)
    if sp.issparse(X):
        X = sp.csr_matrix(X)
        if not X.has_canonical_format:
            X = X.copy()
            X.sum_duplicates()
        Xc = sp.csc_matrix((X.data, X.indices, X.indptr), shape=(X.shape[1], X.shape[0]))
    else:
        Xc = X.T
    check_nonnegative(Xc, "X")
    return Xc


def _seed(random_state):
    if random_state is None:
        return int(np.random.default_rng().integers(2**31 - 1))
    if isinstance(random_state, numbers.Integral):
        return int(random_state)
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(2**31 - 1))
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(2**31 - 1))
    raise ValueError(f"random_state must be None, an int or a numpy Generator, got "
                     f"{random_state!r}")


class _NMFBase(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    def _check_params(self, n_samples, n_features):
        r = self.n_components
        if r is None or r == "auto":
            r = n_features
        if isinstance(r, bool) or not isinstance(r, numbers.Integral) or r < 1:
            raise ValueError(f"n_components must be a positive integer, got "
                             f"{self.n_components!r}")
        beta = _beta_of(self.beta_loss)
        solver = getattr(self, "solver", "mu")
        if solver not in ("mu", "cd"):
            raise ValueError(f"solver must be 'mu' or 'cd', got {solver!r}")
        if solver == "cd" and beta != 2:
            raise ValueError("solver='cd' needs beta_loss='frobenius'")
        if self.init not in (None, "random", "nndsvd", "nndsvda", "custom"):
            raise ValueError(f"init must be None, 'random', 'nndsvd', 'nndsvda' or 'custom', "
                             f"got {self.init!r}")
        for name in ("alpha_W", "l1_ratio"):
            v = getattr(self, name)
            if not isinstance(v, numbers.Real) or v < 0:
                raise ValueError(f"{name} must be a non-negative number, got {v!r}")
        if self.l1_ratio > 1:
            raise ValueError(f"l1_ratio must be in [0, 1], got {self.l1_ratio!r}")
        aH = self.alpha_W if self.alpha_H == "same" else self.alpha_H
        if not isinstance(aH, numbers.Real) or aH < 0:
            raise ValueError(f"alpha_H must be 'same' or a non-negative number, got "
                             f"{self.alpha_H!r}")
        init = self.init or ("nndsvda" if r <= min(n_samples, n_features) else "random")
        return int(r), beta, solver, init, float(aH)

    def _model(self, r, beta, solver, init, aH, dtype, **kw):
        return NMFModel(n_components=r, beta_loss="frobenius" if beta == 2 else
                        "kullback-leibler", solver=solver, dtype=np.dtype(dtype).name,
                        init="nndsvda" if init == "custom" else init,
                        seed=_seed(self.random_state), alpha_W=float(self.alpha_W),
                        alpha_H=aH, l1_ratio=float(self.l1_ratio), **kw)

    def _custom(self, W, H, Xc, r):
        if W is None or H is None:
            raise ValueError("init='custom' needs both W and H")
        W = np.asarray(W, dtype=Xc.dtype)
        H = np.asarray(H, dtype=Xc.dtype)
        if W.shape != (Xc.shape[1], r):
            raise ValueError(f"W has shape {W.shape}, expected ({Xc.shape[1]}, {r})")
        if H.shape != (r, Xc.shape[0]):
            raise ValueError(f"H has shape {H.shape}, expected ({r}, {Xc.shape[0]})")
        check_nonnegative(W, "W")
        check_nonnegative(H, "H")
        return np.asfortranarray(H), np.asfortranarray(W.T)

    def _store(self, model):
        self._model_ = model
        self.components_ = np.array(model.components, order="C")
        self.n_components_ = model.opts.n_components
        self._n_features_out = self.n_components_

    def _xc(self, X):
        check_is_fitted(self, "components_")
        Xc = _to_columns(self, X, reset=False)
        return Xc.astype(self._model_.dtype) if Xc.dtype != self._model_.dtype else Xc

    def inverse_transform(self, X):
        """``X W`` for codes ``X`` (n_samples, r): the data the codes approximate.

        Parameters
        ----------
        X : array (n_samples, n_components)

        Returns
        -------
        ndarray (n_samples, n_features)
        """
        check_is_fitted(self, "components_")
        return np.asarray(X) @ self.components_

    def score(self, X, y=None):
        """Minus the divergence of ``X`` from its reconstruction by :meth:`transform`'s codes.

        Parameters
        ----------
        X : array-like or sparse matrix (n_samples, n_features)
        y : ignored

        Returns
        -------
        float
        """
        Xc = self._xc(X)
        H = self._codes(Xc)
        return -beta_divergence(Xc, self._model_.components, H, self._model_.beta)

    def transform(self, X):
        """Codes of the samples of ``X`` (the components fixed).

        Parameters
        ----------
        X : array-like or sparse matrix (n_samples, n_features), non-negative

        Returns
        -------
        ndarray (n_samples, n_components)
        """
        Xc = self._xc(X)
        return self._codes(Xc).T

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.positive_only = True
        tags.requires_fit = True
        return tags


class NMF(_NMFBase):
    """Non-negative matrix factorization, full batch (scikit-learn's ``NMF`` API).

    ``X`` (n_samples, n_features) ~ ``W H`` with the codes ``W = transform(X)`` and
    ``H = components_``.

    Parameters
    ----------
    n_components : int, "auto" or None
    init : {None, "random", "nndsvd", "nndsvda", "custom"}
        None: ``nndsvda`` when ``n_components <= min(n_samples, n_features)``, else random.
    solver : {"cd", "mu"}, default="cd"
    beta_loss : {"frobenius", "kullback-leibler", 2, 1}
    tol : float, default=1e-4
    max_iter : int, default=200
    random_state : int, Generator or None
    alpha_W, alpha_H, l1_ratio : float
        Regularisation, scaled as scikit-learn's (module docstring).
    comm : roofline.comm.Communicator, optional
        Each rank fits on its own samples (``init="random"`` or ``"custom"``); the components
        are the same on every rank.
    cd_sweeps : int or "auto", default="auto"
        ``solver="cd"``: HALS sweeps per product (:class:`NMFOptions`): ``"auto"`` is Gillis
        and Glineur's accelerated HALS (fewer products to the same objective); 1 is
        scikit-learn's algorithm (the same iterates, ``n_iter_`` and result).
    cd_extrapolate : bool or "auto", default="auto"
        ``solver="cd"``: Ang and Gillis' extrapolated HALS (:class:`NMFOptions`); ``"auto"``
        extrapolates with ``cd_sweeps="auto"`` only (so ``cd_sweeps=1`` stays
        scikit-learn's algorithm).

    Attributes
    ----------
    components_ : ndarray (n_components, n_features)
    reconstruction_err_ : float
        ``sqrt(2 D)`` at the end of the fit (scikit-learn's).
    n_iter_ : int
    """

    def __init__(self, n_components="auto", *, init=None, solver="cd", beta_loss="frobenius",
                 tol=1e-4, max_iter=200, random_state=None, alpha_W=0.0, alpha_H="same",
                 l1_ratio=0.0, comm=None, cd_sweeps="auto", cd_extrapolate="auto"):
        self.n_components = n_components
        self.init = init
        self.solver = solver
        self.beta_loss = beta_loss
        self.tol = tol
        self.max_iter = max_iter
        self.random_state = random_state
        self.alpha_W = alpha_W
        self.alpha_H = alpha_H
        self.l1_ratio = l1_ratio
        self.comm = comm
        self.cd_sweeps = cd_sweeps
        self.cd_extrapolate = cd_extrapolate

    def fit_transform(self, X, y=None, W=None, H=None):
        """Fit and return the codes of ``X``.

        Parameters
        ----------
        X : array-like or sparse matrix (n_samples, n_features), non-negative
        y : ignored
        W : array (n_samples, n_components), optional
            Starting codes (``init="custom"``).
        H : array (n_components, n_features), optional
            Starting components (``init="custom"``).

        Returns
        -------
        ndarray (n_samples, n_components)
        """
        Xc = _to_columns(self, X, reset=True)
        r, beta, solver, init, aH = self._check_params(Xc.shape[1], Xc.shape[0])
        if isinstance(self.max_iter, bool) or not isinstance(self.max_iter, numbers.Integral) \
                or self.max_iter < 1:
            raise ValueError(f"max_iter must be a positive integer, got {self.max_iter!r}")
        if not isinstance(self.tol, numbers.Real) or self.tol < 0:
            raise ValueError(f"tol must be a non-negative number, got {self.tol!r}")
        model = self._model(r, beta, solver, init, aH, Xc.dtype, cd_sweeps=self.cd_sweeps,
                            cd_extrapolate=self.cd_extrapolate)
        if init == "custom":
            Wt, H0 = self._custom(W, H, Xc, r)
            model.set_parameters(Wt)
        else:
            if self.comm is not None and init != "random":
                raise ValueError("NMF(comm=) needs init='random' or 'custom'")
            Wt, H0 = nmf_init(Xc, r, init, np.random.default_rng(model.opts.seed))
            if self.comm is not None:  # the same components on every rank
                Wt = self.comm.broadcast(Wt)
            model.set_parameters(Wt)
        res = model.fit(Xc, H=H0, max_iter=int(self.max_iter), tol=float(self.tol),
                        comm=self.comm)
        self._store(model)
        self.n_iter_ = res.n_iter
        self.reconstruction_err_ = math.sqrt(2 * res.divergence)
        self._max_iter = int(self.max_iter)
        return np.ascontiguousarray(res.codes.T)

    def fit(self, X, y=None, **params):
        """Fit on ``X``.

        Parameters
        ----------
        X : array-like or sparse matrix (n_samples, n_features), non-negative
        y : ignored
        **params
            ``W``, ``H`` of :meth:`fit_transform`.

        Returns
        -------
        self
        """
        self.fit_transform(X, **params)
        return self

    def _codes(self, Xc):
        m = self._model_
        res = m.fit(Xc, H=None, max_iter=self._max_iter,
                    tol=float(self.tol), update_components=False)
        return res.codes


class MiniBatchNMF(_NMFBase):
    """Online NMF (minibatches through a :class:`~roofline.learners.Learner`; scikit-learn's
    ``MiniBatchNMF`` API, multiplicative updates or HALS).

    Parameters
    ----------
    n_components : int, "auto" or None
    init : {None, "random", "nndsvd", "nndsvda", "custom"}
        How the components start (from a sample of the data; ``custom``: ``H`` of
        :meth:`fit_transform`).
    batch_size : int, default=1024
    beta_loss : {"frobenius", "kullback-leibler"}
    solver : {"mu", "cd"}, default="mu"
    tol : float, default=1e-4
        Stop when a pass lowers the mean minibatch divergence by less than this fraction.
    max_iter : int, default=200
        Passes over the data.
    forget_factor : float, default=0.7
        The statistics decay by ``forget_factor ** (batch_size / n_samples)`` per minibatch.
    transform_max_iter : int, default=10
        Iterations solving each minibatch's codes.
    random_state, alpha_W, alpha_H, l1_ratio
        As :class:`NMF`.

    Attributes
    ----------
    components_, n_iter_ (passes), n_steps_, reconstruction_err_
    """

    def __init__(self, n_components="auto", *, init=None, batch_size=1024,
                 beta_loss="frobenius", solver="mu", tol=1e-4, max_iter=200,
                 forget_factor=0.7, transform_max_iter=10, random_state=None, alpha_W=0.0,
                 alpha_H="same", l1_ratio=0.0):
        self.n_components = n_components
        self.init = init
        self.batch_size = batch_size
        self.beta_loss = beta_loss
        self.solver = solver
        self.tol = tol
        self.max_iter = max_iter
        self.forget_factor = forget_factor
        self.transform_max_iter = transform_max_iter
        self.random_state = random_state
        self.alpha_W = alpha_W
        self.alpha_H = alpha_H
        self.l1_ratio = l1_ratio

    def _new_model(self, Xc, n_samples):
        r, beta, solver, init, aH = self._check_params(Xc.shape[1], Xc.shape[0])
        bs = self.batch_size
        if isinstance(bs, bool) or not isinstance(bs, numbers.Integral) or bs < 1:
            raise ValueError(f"batch_size must be a positive integer, got {bs!r}")
        if not 0 < self.forget_factor <= 1:
            raise ValueError(f"forget_factor must be in (0, 1], got {self.forget_factor!r}")
        rho = float(self.forget_factor) ** (min(bs, n_samples) / n_samples)
        tmi = self.transform_max_iter
        if isinstance(tmi, bool) or not isinstance(tmi, numbers.Integral) or tmi < 1:
            raise ValueError(f"transform_max_iter must be a positive integer, got {tmi!r}")
        model = self._model(r, beta, solver, init, aH, Xc.dtype, rho=rho, inner_iter=int(tmi))
        return model, init, r

    def fit_transform(self, X, y=None, W=None, H=None):
        """Fit by minibatch passes and return the codes of ``X``.

        Parameters
        ----------
        X : array-like or sparse matrix (n_samples, n_features), non-negative
        y : ignored
        W : ignored (the codes are solved per minibatch)
        H : array (n_components, n_features), optional
            Starting components (``init="custom"``).

        Returns
        -------
        ndarray (n_samples, n_components)
        """
        self.fit(X, H=H)
        return self.transform(X)

    def fit(self, X, y=None, H=None):
        """Fit by minibatch passes.

        Parameters
        ----------
        X : array-like or sparse matrix (n_samples, n_features), non-negative
        y : ignored
        H : array (n_components, n_features), optional
            Starting components (``init="custom"``).

        Returns
        -------
        self
        """
        from ._learner import Learner
        from ._optimizers import ModelUpdate

        Xc = _to_columns(self, X, reset=True)
        m = Xc.shape[1]
        model, init, r = self._new_model(Xc, m)
        passes = self.max_iter
        if isinstance(passes, bool) or not isinstance(passes, numbers.Integral) or passes < 1:
            raise ValueError(f"max_iter must be a positive integer, got {passes!r}")
        if init == "custom":
            if H is None:
                raise ValueError("init='custom' needs H")
            model.set_parameters(np.asarray(H, Xc.dtype))
        else:  # the components from a sample of the data (scikit-learn: the whole data)
            rng = np.random.default_rng(model.opts.seed)
            size = min(m, max(3 * int(self.batch_size), r))
            pick = np.sort(rng.choice(m, size=size, replace=False))
            Xs = Xc[:, pick]
            if sp.issparse(Xs):
                Xs = sp.csc_matrix(Xs)
            Wt, _ = nmf_init(Xs, r, init if min(Xs.shape) >= r else "random", rng)
            model.set_parameters(Wt)
        learner = Learner(MatSource(Xc, batch_size=int(self.batch_size)), model, ModelUpdate(),
                          progress=False, n_passes=1)
        prev = math.inf
        done = 0
        from ._kmeans import one_blas_thread

        for _ in range(passes):
            with one_blas_thread():
                res = learner.train()
            done += 1
            cur = res.trace[-1]["train_loss"]
            if self.tol and prev < math.inf and prev - cur < self.tol * abs(prev):
                break
            prev = cur
        self._store(model)
        self.n_iter_ = done
        self.n_steps_ = model._n_steps
        Hc = self._codes(Xc)
        self.reconstruction_err_ = math.sqrt(2 * beta_divergence(Xc, model.components, Hc,
                                                            model.beta))
        return self

    def partial_fit(self, X, y=None, W=None, H=None):
        """One online step on the samples of ``X``.

        Parameters
        ----------
        X : array-like or sparse matrix (n_samples, n_features), non-negative
        y : ignored
        W : ignored
        H : array (n_components, n_features), optional
            Starting components on the first call (``init="custom"``).

        Returns
        -------
        self
        """
        first = not hasattr(self, "_model_")
        Xc = _to_columns(self, X, reset=first)
        if first:
            model, init, _ = self._new_model(Xc, max(Xc.shape[1], int(self.batch_size)))
            model.init(Xc.shape[0])
            if init == "custom":
                if H is None:
                    raise ValueError("init='custom' needs H")
                model.set_parameters(np.asarray(H, Xc.dtype))
        else:
            model = self._model_
            Xc = Xc.astype(model.dtype) if Xc.dtype != model.dtype else Xc
        model.update(Minibatch(Xc))
        self._store(model)
        self.n_steps_ = model._n_steps
        return self

    def _codes(self, Xc):
        m = self._model_
        return m.transform(Xc, max_iter=max(m.opts.inner_iter, 50), tol=float(self.tol))
