"""k-means clustering on the primitives: :class:`KMeansModel` (a Learner model) and the
scikit-learn estimators :class:`KMeans` (Lloyd) and :class:`MiniBatchKMeans`.

Objective (the inertia), for examples ``x_j`` (columns of ``X``), weights ``w_j`` (1 when
absent) and centers ``c_1..c_k``::

    I(C) = sum_j w_j min_c ||x_j - c||^2

The squared distances of a minibatch come from one ``A*S`` product (BIDMach's k-means)::

    ||x_j - c||^2 = ||x_j||^2 - 2 c^T x_j + ||c||^2,     C^T X = gmat.mult_as(centers, X)

with ``centers`` the dense ``k x n_features`` matrix in Fortran order (each feature's ``k``
values contiguous, the layout ``A*S`` gathers fastest).  The assignment (the argmin over the
``k`` distances of each column) and the per-cluster sums of the M-step are single passes
(numba kernels of this module: the sums cost ``nnz`` multiply-adds, not the ``k nnz`` of the
one-hot product ``A*S^T``).

Algorithms
----------
* Lloyd (full batch, :meth:`KMeansModel.fit`): passes over a matrix or any DataSource; each
  pass assigns every example and replaces each center by the (weighted) mean of its examples.
  Empty clusters are moved to the examples farthest from their centers (scikit-learn's rule).
  With ``comm=`` each rank holds its own examples: the per-cluster sums, weights and the
  inertia are all-reduced after each pass (exact: every rank gets the single-process centers up
  to the order of the floating-point sums).
* Minibatch (:meth:`KMeansModel.update`, run by :class:`~roofline.learners.ModelUpdate` in a
  :class:`~roofline.learners.Learner`): scikit-learn's ``MiniBatchKMeans`` step, each center
  moving to the running mean of every example ever assigned to it (per-center learning rate
  ``w_batch / w_total``), with the random reassignment of centers that receive too little
  weight.
* k-means++ (:func:`kmeans_plusplus`): greedy k-means++ (``2 + log k`` candidates per center,
  the one that lowers the potential most wins), the candidates' distances through ``A*S``;
  with ``comm=`` it draws over every rank's examples.
"""

from __future__ import annotations

import logging
import math
import numbers
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from numba import njit, prange
from sklearn.base import (
    BaseEstimator,
    ClassNamePrefixFeaturesOutMixin,
    ClusterMixin,
    TransformerMixin,
)
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data

from roofline import gmat
from roofline.datasources import MatSource, Minibatch
from roofline.gmat import Options, option

from ._factor import CPUFactorModelMixin
from ._models import Model

__all__ = ["KMeans", "KMeansModel", "KMeansOptions", "MiniBatchKMeans", "kmeans_plusplus"]

logger = logging.getLogger(__name__)

#: Columns per chunk of a Lloyd pass over an in-memory matrix: the ``k x chunk`` distance
#: block stays at most this many values.
_CHUNK_VALUES = 1 << 22


# ---------------------------------------------------------------------------------------------
# kernels (raw arrays in, output buffers out; checked against numpy in the tests)


@njit(cache=True, parallel=True)
def _assign(DT, cnorm, xnorm, labels, mind):
    """``labels[j] = argmin_c cnorm[c] - 2 DT[j, c]`` and ``mind[j]`` the squared distance
    ``xnorm[j] + cnorm[c] - 2 DT[j, c]`` (clipped at 0) for each row ``j`` of ``DT`` (m x k,
    the transposed ``C^T X``); the first minimum wins ties."""
    m, k = DT.shape
    for j in prange(m):
        best = cnorm[0] - 2.0 * DT[j, 0]
        bi = 0
        for c in range(1, k):
            v = cnorm[c] - 2.0 * DT[j, c]
            if v < best:
                best = v
                bi = c
        labels[j] = bi
        d = best + xnorm[j]
        mind[j] = d if d > 0.0 else 0.0


@njit(cache=True, inline="always")
def _center_dots(indptr, indices, data, C, j, acc):
    """``acc[c] = c^T x_j`` for every center ``c``: one gather of each of the example's
    features' ``k`` center values, accumulated in float64 in the order every E-step here uses
    (so their keys compare bit for bit)."""
    acc[:] = 0.0
    for p in range(indptr[j], indptr[j + 1]):
        v = np.float64(data[p])
        i = indices[p]
        for c in range(C.shape[0]):
            acc[c] += v * C[c, i]


@njit(cache=True, parallel=True)
def _csc_assign_fused(indptr, indices, data, C, cnorm, xnorm, cols, labels, mind, second):
    """The sparse E-step fused with its ``A*S``: for each column ``j`` in ``cols`` (CSC
    ``indptr, indices, data``), the ``k`` products ``c^T x_j`` accumulate in float64 from
    ``C`` (k x n, each feature's ``k`` values contiguous), then ``labels[j]`` is the nearest
    center (the first minimum wins), ``mind[j]`` its squared distance and ``second[j]`` the
    squared distance to the second nearest (``inf`` when ``k == 1``), both clipped at 0.  No
    ``k x m`` block is written; the results land at the columns' own positions."""
    s = cols.shape[0]
    k = C.shape[0]
    nblk = (s + 255) // 256
    for b in prange(nblk):
        acc = np.empty(k, np.float64)
        for q in range(b * 256, min(s, (b + 1) * 256)):
            j = cols[q]
            _center_dots(indptr, indices, data, C, j, acc)
            best = np.inf
            sec = np.inf
            bi = 0
            for c in range(k):
                d = cnorm[c] - 2.0 * acc[c]
                if d < best:
                    sec = best
                    best = d
                    bi = c
                elif d < sec:
                    sec = d
            labels[j] = bi
            d = best + xnorm[j]
            mind[j] = d if d > 0.0 else 0.0
            d = sec + xnorm[j]
            second[j] = d if d > 0.0 else 0.0


@njit(cache=True)
def _dot_col(indptr, indices, data, C, j, c):
    """``c^T x_j`` in float64, accumulated in the order of :func:`_csc_assign_fused` (the
    same rounding: its keys and these compare bit for bit)."""
    acc = 0.0
    for p in range(indptr[j], indptr[j + 1]):
        acc += np.float64(data[p]) * C[c, indices[p]]
    return acc


@njit(cache=True, inline="always")
def _dot_col2(indptr, indices, data, C, j, a, c):
    """``(a^T x_j, c^T x_j)`` in one pass over the column: two independent sums (twice the
    throughput of two :func:`_dot_col` calls, whose latency-bound chains they are, in the
    same order: the same bits)."""
    sa = 0.0
    sc = 0.0
    for p in range(indptr[j], indptr[j + 1]):
        v = np.float64(data[p])
        i = indices[p]
        sa += v * C[a, i]
        sc += v * C[c, i]
    return sa, sc


@njit(cache=True)
def _csc_label_dists(indptr, indices, data, C, cnorm, xnorm, labels, mind):
    """``mind[j]`` the squared distance of column ``j`` to its center ``labels[j]`` (clipped
    at 0), one sparse dot product per column: the same operations in the same order as
    :func:`_csc_assign_fused`'s ``mind`` for that center (bit for bit), at ``nnz``
    multiply-adds instead of ``k nnz``."""
    for j in range(labels.shape[0]):
        e = cnorm[labels[j]] - 2.0 * _dot_col(indptr, indices, data, C, j, labels[j])
        d = e + xnorm[j]
        mind[j] = d if d > 0.0 else 0.0


@njit(cache=True, inline="always")
def _elkan_all(indptr, indices, data, C, cnorm, xn, cum, j, acc, labels, U, L, Lmin):
    """Every distance of example ``j`` at once (one gather of each of its features' ``k``
    center values into ``acc``): its label by Lloyd's keys, and its bounds ``L[j]``, ``U[j]``,
    ``Lmin[j]`` stored relative to ``cum`` (see :func:`_elkan_estep`)."""
    k = C.shape[0]
    _center_dots(indptr, indices, data, C, j, acc)
    best = np.inf
    bi = 0
    for c in range(k):
        e = cnorm[c] - 2.0 * acc[c]
        d = e + xn
        L[j, c] = math.sqrt(d if d > 0.0 else 0.0) + cum[c]
        if e < best:
            best = e
            bi = c
    labels[j] = bi
    U[j] = L[j, bi] - 2.0 * cum[bi]
    lm = np.inf
    for c in range(k):
        if c != bi and L[j, c] < lm:
            lm = L[j, c]
    Lmin[j] = lm


@njit(cache=True, parallel=True)
def _elkan_estep(indptr, indices, data, C, cnorm, xnorm, cum, halfcc, s, margin, first,
                 labels, U, L, counts, Lmin, cummax):
    """One E-step of Elkan's k-means (Elkan 2003) over CSC columns, with lazily moved bounds.

    The bounds are stored relative to ``cum`` (each center's cumulative drift): the upper
    bound on ``||x_j - c_{labels_j}||`` is ``U[j] + cum[labels_j]`` and the lower bound on
    ``||x_j - c||`` is ``L[j, c] - cum[c]``, so moving the centers costs ``O(k)``, not
    ``O(m k)``.  A center ``c`` is examined only when neither its lower bound nor half the
    distance ``halfcc[a, c]`` between the centers exceeds the upper bound by the example's
    rounding ``margin[j]``; an examined pair costs one sparse dot product, and an example
    with more than one candidate gets all ``k`` products at once (one gather of each
    feature's ``k`` center values costs about what a single product does).  The keys compared
    are Lloyd's (``cnorm[c] - 2 c^T x_j``, the first minimum wins), so ``labels`` equal the
    fused Lloyd E-step's bit for bit.  ``first``: compute every distance (the bounds' start).
    ``counts[b]``: dot products computed by block ``b`` (``k`` per example when first).
    ``Lmin[j]``: the smallest stored ``L[j, c]`` over the other centers, so that
    ``Lmin[j] - cummax`` (``cummax`` the largest drift) bounds every other distance at once
    (Hamerly's bound): an example it settles costs no scan of its ``k`` bounds."""
    m = labels.shape[0]
    k = C.shape[0]
    nblk = (m + 255) // 256
    for b in prange(nblk):
        acc = np.empty(k, np.float64)
        cnt = 0
        for j in range(b * 256, min(m, (b + 1) * 256)):
            xn = xnorm[j]
            if first:
                _elkan_all(indptr, indices, data, C, cnorm, xn, cum, j, acc, labels, U, L,
                           Lmin)
                cnt += k
                continue
            a = labels[j]
            mg = margin[j]
            u = U[j] + cum[a]
            if u + mg < s[a] or u + mg < Lmin[j] - cummax:
                continue
            n_cand = 0
            cand = 0
            for c in range(k):
                if c != a and u + mg >= L[j, c] - cum[c] and u + mg >= halfcc[a, c]:
                    n_cand += 1
                    cand = c
            if n_cand == 0:
                continue
            if n_cand > 1:  # every distance at once: k values per gathered feature
                _elkan_all(indptr, indices, data, C, cnorm, xn, cum, j, acc, labels, U, L,
                           Lmin)
                cnt += k
                continue
            # one candidate: its product and the own center's (which tightens the upper
            # bound) in one pass, two independent sums (each in _dot_col's order: the same
            # bits); the candidate's is used only if the tightened bound still overlaps
            c = cand
            lc = L[j, c] - cum[c]
            da, dcand = _dot_col2(indptr, indices, data, C, j, a, c)
            ea = cnorm[a] - 2.0 * da
            d = ea + xn
            u = math.sqrt(d if d > 0.0 else 0.0)
            L[j, a] = u + cum[a]
            cnt += 1
            if not (u + mg < lc or u + mg < halfcc[a, c]):
                ec = cnorm[c] - 2.0 * dcand
                cnt += 1
                d = ec + xn
                dc = math.sqrt(d if d > 0.0 else 0.0)
                L[j, c] = dc + cum[c]
                if ec < ea or (ec == ea and c < a):
                    a = c
                    ea = ec
                    u = dc
            for c2 in range(c + 1, k):  # the rest of the scan, with the tight bound
                if c2 == a:
                    continue
                lc = L[j, c2] - cum[c2]
                if u + mg < lc or u + mg < halfcc[a, c2]:
                    continue
                ec = cnorm[c2] - 2.0 * _dot_col(indptr, indices, data, C, j, c2)
                cnt += 1
                d = ec + xn
                dc = math.sqrt(d if d > 0.0 else 0.0)
                L[j, c2] = dc + cum[c2]
                if ec < ea or (ec == ea and c2 < a):
                    a = c2
                    ea = ec
                    u = dc
            labels[j] = a
            U[j] = u - cum[a]
            lm = np.inf
            for c in range(k):
                if c != a and L[j, c] < lm:
                    lm = L[j, c]
            Lmin[j] = lm
        counts[b] = cnt


@njit(cache=True)
def _elkan_half(cc_exact, cum, cum_at, halfcc, s_half):
    """The centers' half distances lowered by their drift since ``cc_exact`` was computed
    (``halfcc[a, c] = max(cc_exact[a, c] - (moved[a] + moved[c]) / 2, 0)``, ``moved = cum -
    cum_at``) and ``s_half[a]`` the smallest over ``c != a`` (``inf`` for ``k == 1``): one
    call instead of six numpy passes per Elkan iteration (the same operations)."""
    k = cum.shape[0]
    for a in range(k):
        ma = cum[a] - cum_at[a]
        s = np.inf
        for c in range(k):
            v = cc_exact[a, c] - 0.5 * (ma + (cum[c] - cum_at[c]))
            v = v if v > 0.0 else 0.0
            halfcc[a, c] = v
            if c != a and v < s:
                s = v
        s_half[a] = s


@njit(cache=True)
def _csc_move_sums(indptr, indices, data, w, labels, labels_old, sums, wsum, members):
    """Move the examples whose label changed (``labels_old[j] -> labels[j]``) between the
    clusters' sums, weights and member counts; returns how many moved."""
    moved = 0
    for j in range(labels.shape[0]):
        a = labels[j]
        b = labels_old[j]
        if a == b:
            continue
        moved += 1
        wj = w[j]
        for p in range(indptr[j], indptr[j + 1]):
            v = wj * data[p]
            sums[a, indices[p]] += v
            sums[b, indices[p]] -= v
        wsum[a] += wj
        wsum[b] -= wj
        members[a] += 1
        members[b] -= 1
    return moved


@njit(cache=True)
def _cluster_order(labels, k, starts, order):
    """Counting sort of ``labels``: ``order[starts[c]:starts[c+1]]`` are the examples of
    cluster ``c`` in increasing order."""
    m = labels.shape[0]
    starts[:] = 0
    for j in range(m):
        starts[labels[j] + 1] += 1
    for c in range(k):
        starts[c + 1] += starts[c]
    fill = starts[:k].copy()
    for j in range(m):
        c = labels[j]
        order[fill[c]] = j
        fill[c] += 1


@njit(cache=True)
def _csc_cluster_sums(indptr, indices, data, w, labels, sums, wsum):
    """``sums[c, :] += sum_{j in c} w[j] x_j`` and ``wsum[c] += sum_{j in c} w[j]`` over CSC
    columns (``c = labels[j]``), one serial pass in column order: the data stream in (a pass
    in cluster order, one cluster per thread, jumped between the columns and measured
    1.25-1.5x slower on one thread, 1.5x with two), and each ``sums[c, i]`` still adds its
    examples in increasing ``j`` (the same results as per cluster)."""
    k = wsum.shape[0]
    acc = np.zeros(k, np.float64)
    for j in range(labels.shape[0]):
        c = labels[j]
        wj = w[j]
        acc[c] += wj
        for p in range(indptr[j], indptr[j + 1]):
            sums[c, indices[p]] += wj * data[p]
    for c in range(k):
        wsum[c] += acc[c]


@njit(cache=True, parallel=True)
def _dense_cluster_sums(XT, w, order, starts, sums, wsum):
    """``sums[c, :] += sum_{j in c} w[j] x_j`` and ``wsum[c] += sum_{j in c} w[j]`` over the
    rows of ``XT`` (m x n, one example per row; ``order[starts[c]:starts[c+1]]`` the examples
    of cluster ``c``, see :func:`_cluster_order`), one cluster per thread (no write conflicts;
    deterministic order)."""
    k = starts.shape[0] - 1
    n = XT.shape[1]
    for c in prange(k):
        acc = 0.0
        for q in range(starts[c], starts[c + 1]):
            j = order[q]
            wj = w[j]
            acc += wj
            for i in range(n):
                sums[c, i] += wj * XT[j, i]
        wsum[c] += acc


@njit(cache=True)
def _minibatch_move(C, sums, wsum, counts):
    """The minibatch step's center update in one pass over ``C`` (k x n, Fortran order):
    each center ``c`` with ``wsum[c] > 0`` becomes ``(C[c] * counts[c] + sums[c]) /
    (counts[c] + wsum[c])`` (the same float64 operations as the numpy expression, so the
    same rounding) and ``counts[c]`` grows by ``wsum[c]``; every entry of ``sums`` read is
    zeroed, so the buffer is ready for the next minibatch (no ``k x n`` allocation, no
    fancy-indexed copies)."""
    k, n = C.shape
    old = np.empty(k, np.float64)
    new = np.empty(k, np.float64)
    for c in range(k):
        old[c] = counts[c]
        new[c] = counts[c] + wsum[c]
    for i in range(n):
        for c in range(k):
            if wsum[c] > 0.0:
                C[c, i] = (np.float64(C[c, i]) * old[c] + sums[c, i]) / new[c]
                sums[c, i] = 0.0
    for c in range(k):
        if wsum[c] > 0.0:
            counts[c] = new[c]


@njit(cache=True)
def _lloyd_move(C, sums, wsum, delta):
    """The full-batch M-step in one pass over ``C`` (k x n, Fortran order): each center
    becomes ``sums[c] / wsum[c]`` (stored in ``C``'s dtype); ``delta[c]`` is how far the
    stored center moved (rounded up by ``(n + 4)`` units of float64 rounding, so that bounds
    moved by it stay valid); returns ``sum_c ||sums[c] / wsum[c] - c_old||^2`` (the shift
    compared with ``tol``)."""
    k, n = C.shape
    sh = np.zeros(k, np.float64)
    dl = np.zeros(k, np.float64)
    # blocks of 64 features: ``sums`` is C order and ``C`` Fortran order, so a block's rows of
    # both stay in L1 while each center's row is read contiguously (every sum still runs
    # over i in increasing order: the same results as one loop over i)
    for i0 in range(0, n, 64):
        i1 = min(i0 + 64, n)
        for c in range(k):
            # scalar accumulators: summing into ``sh[c]`` / ``dl[c]`` made every step wait
            # on a store and a load of the array (the same additions in the same order)
            wc = wsum[c]
            a_sh = sh[c]
            a_dl = dl[c]
            for i in range(i0, i1):
                old = np.float64(C[c, i])
                new = sums[c, i] / wc
                d = new - old
                a_sh += d * d
                C[c, i] = new
                d = np.float64(C[c, i]) - old
                a_dl += d * d
            sh[c] = a_sh
            dl[c] = a_dl
    grow = 1.0 + (n + 4) * 2.220446049250313e-16
    shift = 0.0
    for c in range(k):
        delta[c] = math.sqrt(dl[c]) * grow
        shift += sh[c]
    return shift


@njit(cache=True, parallel=True)
def _csc_sqnorms(indptr, data, out):
    """``out[j] = ||x_j||^2`` of each CSC column."""
    m = indptr.shape[0] - 1
    for j in prange(m):
        s = 0.0
        for p in range(indptr[j], indptr[j + 1]):
            s += data[p] * data[p]
        out[j] = s


#: Below this much work (multiply-adds) a kernel runs its serial twin on the calling thread:
#: waking the parallel workers costs more than it saves (a loaded machine: milliseconds).
PARALLEL_MIN_WORK = 1 << 18

_assign_serial = njit(cache=True)(_assign.py_func)
_dense_cluster_sums_serial = njit(cache=True)(_dense_cluster_sums.py_func)
_csc_sqnorms_serial = njit(cache=True)(_csc_sqnorms.py_func)
_csc_assign_fused_serial = njit(cache=True)(_csc_assign_fused.py_func)
_elkan_estep_serial = njit(cache=True)(_elkan_estep.py_func)


@njit(cache=True)
def _center_sqnorms(C, out):
    """``out[c] = ||C[c]||^2`` in float64 for the rows of ``C`` (k x n, Fortran order: the
    features outer, each feature's ``k`` values contiguous), each row summed in increasing
    feature order (for ``k >= 2`` the same bits as numpy's ``einsum("ij,ij->i", C, C,
    dtype=float64)``, whose strided loop adds in that order)."""
    k, n = C.shape
    out[:] = 0.0
    for i in range(n):
        for c in range(k):
            v = np.float64(C[c, i])
            out[c] += v * v


#: Statuses of :func:`_elkan_iterations` (why it handed back to Python).
_EL_MAXITER, _EL_STRICT, _EL_TOL, _EL_NEED_CC, _EL_EMPTY, _EL_ESTEP = 0, 1, 2, 3, 4, 5
#: Fields of its ``state`` array: the next iteration, flags, where the exact centers' half
#: distances were computed, the labels moved by the last E-step, the phase to resume at.
_ST_IT, _ST_FIRST, _ST_FRESH, _ST_HAVE_OLD, _ST_CC_AT, _ST_MOVED, _ST_PHASE = range(7)
#: Phases: an iteration from its start, from its M-step's sums, from its centers' move.
_PH_START, _PH_SUMS, _PH_MOVE = 0, 1, 2


@njit(cache=True)
def _elkan_iterations(indptr, indices, data, XT, dense, w, xnorm, mbase, C, cn, labels,
                      labels_old, U, L, Lmin, cum, cum_at, cc_exact, halfcc, s_half, margin,
                      counts, sums, wsum, members, delta, order, starts, recomputed, state,
                      shift_out, eps, tol, max_iter, min_work, trace):
    """Elkan's iterations (:meth:`KMeansModel._fit_elkan`) in one compiled loop: per
    iteration the centers' norms, their half distances moved by the drift
    (:func:`_elkan_half`), the rounding margins, the E-step (:func:`_elkan_estep`, parallel
    from ``min_work`` multiply-adds), the M-step's sums (afresh, or moved for the examples
    whose label changed: :func:`_csc_move_sums`), the centers' move (:func:`_lloyd_move`)
    and the stopping tests.  The kernels and their order are the step-by-step loop's, so the
    iterates are the same bit for bit.

    It hands back to Python (returning a status, ``state`` saying where to resume) when the
    exact half distances are due (``_EL_NEED_CC``: every 8 iterations, a BLAS product; ``cn``
    holds the centers' norms), when a cluster is empty (``_EL_EMPTY``: relocation needs a
    full E-step), after each E-step when ``trace`` (``_EL_ESTEP``: the tests' record), or
    when it stops (``_EL_STRICT``: no label changed; ``_EL_TOL``: ``shift_out[0] <= tol``;
    ``_EL_MAXITER``).  ``recomputed[it]``: dot products of iteration ``it``."""
    k = C.shape[0]
    m = labels.shape[0]
    nnz_per = data.size / max(m, 1)
    it = state[_ST_IT]
    phase = state[_ST_PHASE]
    while it < max_iter:
        first = state[_ST_FIRST] != 0
        if phase == _PH_START:
            _center_sqnorms(C, cn)
            if not first:
                if state[_ST_CC_AT] < 0 or it - state[_ST_CC_AT] >= 8:
                    state[_ST_IT] = it
                    return _EL_NEED_CC
                _elkan_half(cc_exact, cum, cum_at, halfcc, s_half)
            cnmax = -np.inf
            cummax = -np.inf
            for c in range(k):
                cnmax = max(cnmax, cn[c])
                cummax = max(cummax, cum[c])
            rc = math.sqrt(cnmax)
            add = 2 * math.sqrt(64 * eps) * rc + 64 * eps * (cummax + rc)
            for j in range(m):
                margin[j] = mbase[j] + add
            counts[:] = 0
            work = k * data.size if first else m * k + recomputed[it - 1] * nnz_per
            if work >= min_work:
                _elkan_estep(indptr, indices, data, C, cn, xnorm, cum, halfcc, s_half, margin,
                             first, labels, U, L, counts, Lmin, cummax)
            else:
                _elkan_estep_serial(indptr, indices, data, C, cn, xnorm, cum, halfcc, s_half,
                                    margin, first, labels, U, L, counts, Lmin, cummax)
            recomputed[it] = counts.sum()
            state[_ST_FIRST] = 0
            phase = _PH_SUMS
            if trace:
                state[_ST_IT] = it
                state[_ST_PHASE] = phase
                return _EL_ESTEP
        if phase == _PH_SUMS:
            # the M-step's sums: moved when few labels changed, else afresh (see _fit_elkan)
            n_moved = m
            if state[_ST_HAVE_OLD] != 0:
                n_moved = 0
                for j in range(m):
                    if labels[j] != labels_old[j]:
                        n_moved += 1
            state[_ST_MOVED] = n_moved
            if state[_ST_FRESH] != 0 or 4 * n_moved > m or it % 16 == 0:
                state[_ST_FRESH] = 0
                sums[:] = 0.0
                wsum[:] = 0.0
                if dense:
                    _cluster_order(labels, k, starts, order)
                    if XT.size >= min_work:
                        _dense_cluster_sums(XT, w, order, starts, sums, wsum)
                    else:
                        _dense_cluster_sums_serial(XT, w, order, starts, sums, wsum)
                else:
                    _csc_cluster_sums(indptr, indices, data, w, labels, sums, wsum)
                members[:] = 0
                for j in range(m):
                    members[labels[j]] += 1
            elif n_moved:
                _csc_move_sums(indptr, indices, data, w, labels, labels_old, sums, wsum,
                               members)
            for c in range(k):
                if members[c] == 0:
                    state[_ST_IT] = it
                    state[_ST_PHASE] = _PH_MOVE
                    return _EL_EMPTY
        # the centers, how far each moved and the shift, in one pass
        shift = _lloyd_move(C, sums, wsum, delta)
        shift_out[0] = shift
        for c in range(k):
            cum[c] += delta[c]
        it += 1
        phase = _PH_START
        state[_ST_IT] = it
        state[_ST_PHASE] = phase
        if state[_ST_HAVE_OLD] != 0 and state[_ST_MOVED] == 0:
            return _EL_STRICT
        if shift <= tol:
            return _EL_TOL
        labels_old[:] = labels
        state[_ST_HAVE_OLD] = 1
    return _EL_MAXITER


def _pick(parallel, serial, work):
    return parallel if work >= PARALLEL_MIN_WORK else serial


_CONTROLLER = []  # the ThreadpoolController, made on first use (microseconds per limit)


def one_blas_thread():
    """A context in which numpy's BLAS runs on one thread (scikit-learn's k-means does the
    same): the products of one minibatch are small, and a multi-threaded BLAS waiting for
    busy cores costs more than the product itself (measured: 50x on a loaded 2-core machine
    for NMF's ``10 x 1797 x 64`` products).  Entering it costs microseconds (one
    ``threadpoolctl`` controller, made on first use)."""
    if not _CONTROLLER:
        from threadpoolctl import ThreadpoolController

        _CONTROLLER.append(ThreadpoolController())
    return _CONTROLLER[0].limit(limits=1, user_api="blas")


# ---------------------------------------------------------------------------------------------
# helpers


def _sqnorms(X):
    """Squared norms of the columns of ``X`` (float64)."""
    if gmat.is_sparse(X):
        out = np.empty(X.shape[1], np.float64)
        if X.shape[1]:
            _pick(_csc_sqnorms, _csc_sqnorms_serial, X.nnz)(X.indptr, X.data, out)
        return out
    return np.einsum("ij,ij->j", X, X, dtype=np.float64)


def _weights(w, m):
    return np.ones(m, np.float64) if w is None else np.asarray(w, np.float64)


def _column(X, j):
    """Column ``j`` of ``X`` as a dense float64 vector."""
    if gmat.is_sparse(X):
        v = np.zeros(X.shape[0], np.float64)
        a, b = X.indptr[j], X.indptr[j + 1]
        v[X.indices[a:b]] = X.data[a:b]
        return v
    return np.asarray(X[:, j], np.float64)


def _chunks(X, w, chunk=None):
    """``(X_part, w_part)`` column blocks of ``X`` (a matrix or a DataSource)."""
    if not (gmat.is_sparse(X) or isinstance(X, np.ndarray)):  # a DataSource
        for b in X:
            yield b.X, b.w
        return
    m = X.shape[1]
    chunk = chunk or m
    if chunk >= m:  # the whole matrix: no copy
        yield X, w
        return
    for s in range(0, m, chunk):
        e = min(s + chunk, m)
        Xp = gmat.slice_columns(X, s, e, "X") if gmat.is_sparse(X) else X[:, s:e]
        yield Xp, (None if w is None else w[s:e])


#: ``algorithm="auto"`` runs Elkan only when its ``m x k`` float64 lower bounds take at most
#: this many bytes (else Lloyd, which keeps no per-example state).
ELKAN_MAX_BOUND_BYTES = 1 << 30


def _auto_algorithm(X, k, comm):
    """``"elkan"`` for a matrix in one process whose bounds fit
    ``ELKAN_MAX_BOUND_BYTES`` (1 GiB), else ``"lloyd"``."""
    is_matrix = gmat.is_sparse(X) or isinstance(X, np.ndarray)
    if is_matrix and comm is None and 8 * X.shape[1] * k <= ELKAN_MAX_BOUND_BYTES:
        return "elkan"
    return "lloyd"


def _check_comm(comm):
    if comm is None:
        return None
    for name in ("allreduce", "allgather", "rank", "size"):
        if not hasattr(comm, name):
            raise TypeError(f"comm must be a roofline.comm Communicator, got "
                            f"{type(comm).__name__}")
    return comm


# ---------------------------------------------------------------------------------------------
# k-means++


def _candidate_distances(X, P, xnorm):
    """Squared distances ``(t, m)`` from the rows of ``P`` (t x n, float64) to the columns of
    ``X``, through ``A*S`` (sparse) or a dense product."""
    Pc = np.asfortranarray(P.astype(X.dtype, copy=False))
    D = gmat.mult_as(Pc, X) if gmat.is_sparse(X) else Pc @ X
    pn = np.einsum("ij,ij->i", Pc, Pc, dtype=np.float64)
    out = xnorm[None, :] + pn[:, None] - 2.0 * D
    np.maximum(out, 0.0, out=out)
    return out


def kmeans_plusplus(X, n_clusters, *, sample_weight=None, rng=None, n_local_trials=None,
                    comm=None):
    """Greedy k-means++ seeding (Arthur and Vassilvitskii; scikit-learn's greedy variant).

    Parameters
    ----------
    X : CSC matrix or dense array, shape (n_features, m)
        The examples (columns); with ``comm``, this rank's examples.
    n_clusters : int
        The number of centers.
    sample_weight : array, shape (m,), optional
        Example weights (the draw is proportional to ``w_j D(x_j)^2``).
    rng : numpy.random.Generator or int, optional
        The random generator (``np.random.default_rng(rng)`` for an int or None).  With
        ``comm`` every rank must pass the same seed.
    n_local_trials : int, optional
        Candidates per center (``2 + int(log k)`` by default).
    comm : roofline.comm.Communicator, optional
        Draw over the examples of every rank (the same centers on every rank).

    Returns
    -------
    centers : ndarray, shape (n_clusters, n_features), float64
    indices : ndarray, shape (n_clusters, 2), int64
        ``(rank, column)`` of the example each center was taken from.

    Raises
    ------
    ValueError
        ``n_clusters`` exceeds the number of examples (of all ranks).
    """
    comm = _check_comm(comm)
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    n, m = X.shape
    w = _weights(sample_weight, m)
    total_m = m if comm is None else int(comm.allreduce(np.array([float(m)]))[0])
    if n_clusters > total_m:
        raise ValueError(f"n_clusters={n_clusters} exceeds the number of examples ({total_m})")
    trials = n_local_trials or 2 + int(math.log(n_clusters))
    xnorm = _sqnorms(X)
    centers = np.empty((n_clusters, n), np.float64)
    where = np.empty((n_clusters, 2), np.int64)

    def gsum(values):  # sums over the ranks
        values = np.asarray(values, np.float64)
        return values if comm is None else comm.allreduce(values)

    def pick(targets, weights):
        """Global (rank, column) of each target in the cumulative sum of ``weights`` over the
        ranks in rank order, and the points (dense rows)."""
        cum = np.cumsum(weights)
        local_total = cum[-1] if m else 0.0
        if comm is None:
            offsets, rank = np.array([0.0, local_total]), 0
        else:
            offsets = np.concatenate([[0.0], np.cumsum(comm.allgather(float(local_total)))])
            rank = comm.rank
        owner = np.clip(np.searchsorted(offsets[1:], targets, side="right"), 0,
                        len(offsets) - 2)
        if comm is not None:  # a rank without examples owns nothing: its nearest one below
            sizes = comm.allgather(m)
            holders = [r for r, s in enumerate(sizes) if s > 0]
            for i, o in enumerate(owner):
                below = [r for r in holders if r <= o]
                owner[i] = below[-1] if below else holders[0]
        mine = []
        for i, (t, o) in enumerate(zip(targets, owner, strict=True)):
            if o == rank:
                j = int(min(np.searchsorted(cum, t - offsets[rank], side="right"), m - 1))
                mine.append((i, j, _column(X, j)))
        got = mine if comm is None else [x for part in comm.allgather(mine) for x in part]
        got.sort(key=lambda e: e[0])
        idx = np.array([[owner[i], j] for i, j, _ in got], np.int64).reshape(-1, 2)
        pts = np.array([v for _, _, v in got], np.float64).reshape(-1, n)
        return idx, pts

    # first center: drawn with probability proportional to the weights
    tot_w = float(gsum([w.sum()])[0])
    idx, pts = pick(np.array([rng.uniform() * tot_w]), w)
    centers[0], where[0] = pts[0], idx[0]
    closest = _candidate_distances(X, pts, xnorm)[0]
    pot = float(gsum([closest @ w])[0])
    for c in range(1, n_clusters):
        targets = rng.uniform(size=trials) * pot
        idx, pts = pick(targets, w * closest)
        dist = _candidate_distances(X, pts, xnorm)
        np.minimum(closest[None, :], dist, out=dist)
        pots = gsum(dist @ w)
        best = int(np.argmin(pots))
        pot = float(pots[best])
        closest = dist[best]
        centers[c], where[c] = pts[best], idx[best]
    return centers, where


# ---------------------------------------------------------------------------------------------
# the model


@dataclass
class KMeansOptions(Options):
    """Options of :class:`KMeansModel`."""

    n_clusters: int = option(8, "k: the number of clusters", low=1)
    dtype: str = option("float32", "value dtype of the centers", choices=("float32", "float64"))
    init: str = option("k-means++", "how the first minibatch seeds the centers (minibatch "
                                    "training)", choices=("k-means++", "random"))
    seed: int = option(0, "seed of the initialisation and reassignment RNG", low=0)
    reassignment_ratio: float = option(0.01, "minibatch: centers with less than this fraction "
                                             "of the largest center's weight are moved to "
                                             "random examples (0: never)", low=0.0)


class KMeansModel(CPUFactorModelMixin, Model):
    """k-means model: ``k`` centers, trained by Lloyd passes (:meth:`fit`) or minibatch updates
    (:meth:`update`, inside a :class:`~roofline.learners.Learner` with
    :class:`~roofline.learners.ModelUpdate`).

    Parameters
    ----------
    opts : KMeansOptions, optional
    **kwargs
        Override fields of ``opts`` (``KMeansModel(n_clusters=10, dtype="float64")``).

    Attributes
    ----------
    centers : ndarray, shape (k, n_features), Fortran order
        The centers (rows), in the model dtype.
    counts : ndarray, shape (k,), float64
        The weight each center has absorbed (the minibatch step's per-center learning rates:
        a center moves by ``w_batch / counts`` towards its minibatch mean).
    """

    #: FactorSync's rule for Learner(comm=) (learners/_parallel.py)
    _sync_rule = "kmeans"

    _array = "centers"
    _options = KMeansOptions
    _check_device = True

    def __init__(self, opts: KMeansOptions | None = None, **kwargs):
        self._setup(opts, kwargs)
        self.counts = None
        self._last_reassign = 0
        self._mb_sums = None  # the minibatch step's k x n sums, zeroed after each use

    # -- parameters ---------------------------------------------------------------------------
    @property
    def _n_rows(self):
        return self.opts.n_clusters

    @property
    def n_clusters(self) -> int:
        """int: ``k``."""
        return self.opts.n_clusters

    @property
    def n_outputs(self) -> int:
        """int: ``k``, the rows of the dense operand of ``A*S`` (the Learner's roofline gauge)."""
        return self.opts.n_clusters

    def init(self, n_features: int, device: str = "cpu") -> None:
        """Allocate zero centers; the first minibatch of :meth:`update` seeds them.

        Parameters
        ----------
        n_features : int
            Columns of ``centers`` (rows of the data).
        device : {"cpu"}
            Where the centers live (the CPU only, for now).

        Raises
        ------
        ValueError
            ``device`` is not ``"cpu"``.
        """
        self._require_cpu(device)
        self._allocate(n_features)
        self.counts = np.zeros(self.opts.n_clusters, np.float64)

    def set_parameters(self, centers, counts=None) -> None:
        """Set the centers (copied into a Fortran-ordered array of the model dtype).

        Parameters
        ----------
        centers : array, shape (k, n_features)
        counts : array, shape (k,), optional
            The weights absorbed so far (zeros when omitted).

        Raises
        ------
        ValueError
            ``centers`` is not ``(n_clusters, n_features)`` or not finite.
        """
        c = self._checked_array(centers)
        if not np.all(np.isfinite(c)):
            raise ValueError("centers has non-finite values")
        self._store_array(c)
        self.counts = (np.zeros(self.opts.n_clusters) if counts is None
                       else np.array(counts, np.float64))

    def parameters(self) -> dict:
        """The trained arrays.

        Returns
        -------
        dict
            ``{"centers": centers, "counts": counts}``.
        """
        return {"centers": self.centers, "counts": self.counts}

    # -- assignment ---------------------------------------------------------------------------
    def _cnorm(self):
        out = np.empty(self.opts.n_clusters, np.float64)
        _center_sqnorms(self.centers, out)
        return out

    def assign(self, X, cache=None, cnorm=None, xnorm=None):
        """Nearest center and squared distance of each example.

        Parameters
        ----------
        X : CSC matrix or dense array, shape (n_features, m)
            The examples, of the model's dtype.
        cache : BufferCache, optional
            Where to take the ``k x m`` distance block from.
        cnorm, xnorm : ndarray, optional
            ``||c||^2`` of the centers and ``||x_j||^2`` of the examples, when known.

        Returns
        -------
        labels : ndarray, shape (m,), int32
        mind : ndarray, shape (m,), float64
            ``||x_j - c_{labels_j}||^2``.
        """
        self._check_ready(X)
        k, m = self.opts.n_clusters, X.shape[1]
        labels = np.empty(m, np.int32)
        mind = np.empty(m, np.float64)
        if m == 0:
            return labels, mind
        if cnorm is None:
            cnorm = self._cnorm()
        if xnorm is None:
            xnorm = _sqnorms(X)
        if gmat.is_sparse(X):  # A*S fused with the argmin: no k x m block
            self._assign_columns(X, np.arange(m, dtype=np.int64), labels, mind,
                                 np.empty(m, np.float64), cnorm, xnorm)
            return labels, mind
        else:
            D = (cache.empty((k, m), self.dtype, tag="kmeans.dist", order="F", like=X)
                 if cache is not None else np.empty((k, m), self.dtype, order="F"))
            np.matmul(self.centers, X, out=D)
        _pick(_assign, _assign_serial, k * m)(D.T, cnorm, xnorm, labels, mind)
        return labels, mind

    def _assign_columns(self, X, cols, labels, mind, second, cnorm, xnorm):
        """The fused sparse E-step (:func:`_csc_assign_fused`) over the columns ``cols``."""
        work = self.opts.n_clusters * (int(X.nnz) if cols.size == X.shape[1]
                                       else int(X.nnz * cols.size / max(X.shape[1], 1)))
        _pick(_csc_assign_fused, _csc_assign_fused_serial, work)(
            X.indptr, X.indices, X.data, self.centers, cnorm, xnorm, cols, labels, mind,
            second)

    def _sums_into(self, X, w, labels, sums, wsum, order=None, starts=None):
        if gmat.is_sparse(X):  # one pass in column order: no cluster order needed
            _csc_cluster_sums(X.indptr, X.indices, X.data, w, labels, sums, wsum)
        else:  # one cluster per thread over the examples in cluster order
            k, m = self.opts.n_clusters, X.shape[1]
            if order is None:
                order = np.empty(m, np.int64)
                starts = np.empty(k + 1, np.int64)
            _cluster_order(labels, k, starts, order)
            XT = X.T if X.T.flags.c_contiguous else np.ascontiguousarray(X.T)
            _pick(_dense_cluster_sums, _dense_cluster_sums_serial, XT.size)(
                XT, w, order, starts, sums, wsum)

    # -- Model interface ----------------------------------------------------------------------
    def loss(self, batch, cache=None):
        """``(sum_j w_j min_c ||x_j - c||^2, sum_j w_j)`` of a minibatch.

        Parameters
        ----------
        batch : Minibatch
        cache : BufferCache, optional

        Returns
        -------
        loss_sum, weight_sum : float
        """
        _, mind = self.assign(batch.X, cache)
        w = _weights(batch.w, batch.n_examples)
        return float(mind @ w), float(w.sum())

    def predict(self, X, cache=None):
        """The nearest center of each example.

        Parameters
        ----------
        X : CSC matrix or dense array, shape (n_features, m)
        cache : BufferCache, optional

        Returns
        -------
        ndarray, shape (m,), int32
        """
        return self.assign(X, cache)[0]

    def transform(self, X, cache=None):
        """Euclidean distances to every center.

        Parameters
        ----------
        X : CSC matrix or dense array, shape (n_features, m)
        cache : BufferCache, optional

        Returns
        -------
        ndarray, shape (k, m), float64
        """
        self._check_ready(X)
        D = (gmat.mult_as(self.centers, X, cache=cache, tag="kmeans.dist")
             if gmat.is_sparse(X) else self.centers @ X)
        out = self._cnorm()[:, None] + _sqnorms(X)[None, :] - 2.0 * D
        np.maximum(out, 0.0, out=out)
        return np.sqrt(out, out=out)

    def seed_centers(self, X, w=None, comm=None) -> None:
        """Seed the centers from examples (``opts.init``: k-means++ or distinct random
        examples), with the model's RNG.

        Parameters
        ----------
        X : CSC matrix or dense array, shape (n_features, m)
            The examples (with ``comm``, this rank's).
        w : array, shape (m,), optional
        comm : roofline.comm.Communicator, optional

        Raises
        ------
        ValueError
            Fewer examples than ``n_clusters``.
        """
        k = self.opts.n_clusters
        if self.opts.init == "k-means++":
            with one_blas_thread():
                C, _ = kmeans_plusplus(X, k, sample_weight=w, rng=self._rng, comm=comm)
        else:
            C = _random_centers(X, k, self._rng, comm)
        if self.centers is None:
            self.init(X.shape[0])
        self.set_parameters(C)

    def update(self, batch, cache=None):
        """One minibatch step (scikit-learn's ``MiniBatchKMeans``): assign the examples, move
        each center to the running weighted mean of all examples it has received, reassign
        starved centers.  The first call seeds the centers from the minibatch.

        Parameters
        ----------
        batch : Minibatch
        cache : BufferCache, optional

        Returns
        -------
        loss_sum : float
            The minibatch's inertia at the centers *before* the step.
        weight_sum : float
        """
        with one_blas_thread():
            return self._update(batch, cache)

    def _update(self, batch, cache):
        X, m = batch.X, batch.n_examples
        if self.centers is None:
            self.init(X.shape[0])
        w = _weights(batch.w, m)
        if not self._seeded:
            self.seed_centers(X, batch.w)
        labels, mind = self.assign(X, cache)
        k = self.opts.n_clusters
        sums = self._mb_sums
        if sums is None or sums.shape != (k, X.shape[0]):  # kept zeroed between steps
            sums = self._mb_sums = np.zeros((k, X.shape[0]), np.float64, order="F")
        wsum = np.zeros(k, np.float64)
        self._sums_into(X, w, labels, sums, wsum)
        _minibatch_move(self.centers, sums, wsum, self.counts)
        self._n_steps += 1
        self._maybe_reassign(X, w)
        return float(mind @ w), float(w.sum())

    def _maybe_reassign(self, X, w):
        """scikit-learn's random reassignment: every ``10 + min count`` steps, centers with
        less than ``reassignment_ratio`` of the largest count move to random examples."""
        ratio = self.opts.reassignment_ratio
        if ratio <= 0 or X.shape[1] == 0:
            return
        if self._n_steps - self._last_reassign < 10 + self.counts.min():
            return
        self._last_reassign = self._n_steps
        starved = self.counts < ratio * self.counts.max()
        n_re = int(starved.sum())
        if n_re == 0:
            return
        if n_re > 0.5 * X.shape[1]:
            starved[np.argsort(self.counts)[int(0.5 * X.shape[1]):]] = False
            n_re = int(starved.sum())
        picks = self._rng.choice(X.shape[1], size=n_re, replace=False, p=w / w.sum())
        for c, j in zip(np.flatnonzero(starved), picks, strict=True):
            self.centers[c] = _column(X, j)
        self.counts[starved] = self.counts[~starved].min() if (~starved).any() else 0.0
        logger.debug("k-means: reassigned %d starved centers", n_re)

    # -- Lloyd --------------------------------------------------------------------------------
    def fit(self, X, *, sample_weight=None, max_iter=300, tol=0.0, comm=None, init=None,
            algorithm="lloyd"):
        """Lloyd's algorithm: passes until the labels stop changing, the squared center shift
        falls to ``tol`` or ``max_iter`` passes.

        Parameters
        ----------
        X : CSC matrix, dense array (n_features, m), or DataSource
            The examples (with ``comm``: this rank's).  A DataSource is read once per pass.
        sample_weight : array, shape (m,), optional
            Example weights (matrices only; a DataSource carries its own).
        max_iter : int
            The most passes.
        tol : float
            Absolute tolerance on ``sum_c ||c_new - c_old||^2``.
        comm : roofline.comm.Communicator, optional
            Each rank holds its own examples; sums are all-reduced after each pass.
        init : array (k, n_features), optional
            Starting centers; by default the current ones when set, else seeded from ``X``
            (a matrix) with ``opts.init``.
        algorithm : {"lloyd", "hamerly", "elkan", "auto"}
            ``"auto"``: ``"elkan"`` for a matrix in one process whose ``m x k`` float64
            bounds take at most ``ELKAN_MAX_BOUND_BYTES`` (1 GiB), else ``"lloyd"`` (Elkan was
            the fastest exact choice on every data set measured: sparse power-law and dense
            digits, ``benchmarks/factor_kmeans_nmf.py``).
            ``"hamerly"`` (a matrix, single process): the same iterations, but each example
            keeps an upper bound on its distance to its center and a lower bound on the
            others (Hamerly 2010, moved by the centers' drift); only the examples whose bounds
            overlap get their ``k`` distances recomputed (``A*S`` over those columns).
            ``"elkan"`` (a matrix, single process): the same iterations with Elkan's ``k``
            lower bounds per example (Elkan 2003) and the centers' half distances; only the
            (example, center) pairs whose bounds overlap cost a sparse dot product (the best
            choice for sparse high-dimensional data, where Hamerly's single bound is weak).
            With either, the labels are Lloyd's (the bounds carry a rounding margin; the
            sparse keys compare bit for bit with Lloyd's), and ``inertia_trace`` holds only
            the final inertia.

        Returns
        -------
        KMeansResult
            ``labels`` (this rank's examples; None for a DataSource), ``inertia``,
            ``n_iter``, ``converged``, ``inertia_trace``.
        """
        if algorithm not in ("lloyd", "hamerly", "elkan", "auto"):
            raise ValueError(f"algorithm must be 'lloyd', 'hamerly', 'elkan' or 'auto', got "
                             f"{algorithm!r}")
        if algorithm == "auto":
            algorithm = _auto_algorithm(X, self.opts.n_clusters, _check_comm(comm))
        with one_blas_thread():
            return self._fit(X, sample_weight, max_iter, tol, comm, init, algorithm)

    def _fit(self, X, sample_weight, max_iter, tol, comm, init, algorithm="lloyd"):
        comm = _check_comm(comm)
        is_matrix = gmat.is_sparse(X) or isinstance(X, np.ndarray)
        n = int(X.shape[0]) if is_matrix else int(X.n_features)
        if init is not None:
            if self.centers is None:
                self.init(n)
            self.set_parameters(init)
        elif not self._seeded:
            if not is_matrix:
                raise ValueError("fit on a DataSource needs init= or seeded centers "
                                 "(set_parameters or seed_centers)")
            self.seed_centers(X, sample_weight, comm)
        if is_matrix:
            self._check_ready(X)
            w_all = _weights(sample_weight, X.shape[1])
            # the sparse E-step writes no k x m block: one chunk
            chunk = (X.shape[1] if gmat.is_sparse(X)
                     else max(256, _CHUNK_VALUES // self.opts.n_clusters))
            xnorm_all = _sqnorms(X)
            m_local = X.shape[1]
        else:
            w_all = xnorm_all = None
            chunk = None
            m_local = None
        k = self.opts.n_clusters
        if algorithm == "hamerly" and is_matrix and comm is None:
            return self._fit_hamerly(X, w_all, xnorm_all, max_iter, tol)
        if algorithm == "elkan" and is_matrix and comm is None:
            return self._fit_elkan(X, w_all, xnorm_all, max_iter, tol)
        if algorithm != "lloyd":
            logger.info("k-means: algorithm=%r bounds need one process's examples in memory; "
                        "running Lloyd's iterations (the same labels) %s", algorithm,
                        "over comm=" if is_matrix else "over the DataSource")
        labels_old = None
        trace = []
        converged = strict = False
        n_iter = 0
        labels = None
        for it in range(max_iter):
            sums = np.zeros((k, n), np.float64)
            wsum = np.zeros(k, np.float64)
            labels, mind, inertia = self._lloyd_pass(X, w_all, xnorm_all, chunk, sums, wsum,
                                                     m_local)
            if comm is not None:
                flat = comm.allreduce(np.concatenate([sums.ravel(), wsum, [inertia]]))
                sums = flat[: k * n].reshape(k, n)
                wsum = flat[k * n: k * n + k].copy()
                inertia = float(flat[-1])
            trace.append(inertia)
            if np.any(wsum == 0):
                if not is_matrix:
                    raise RuntimeError("k-means on a DataSource produced an empty cluster; "
                                       "seed the centers differently")
                self._relocate_empty(X, w_all, labels, mind, sums, wsum, comm)
            shift = _lloyd_move(self.centers, sums, wsum, np.empty(k))
            self.counts = wsum
            n_iter = it + 1
            same = labels_old is not None and labels is not None and np.array_equal(
                labels, labels_old)
            if comm is not None:
                same = bool(comm.allreduce(np.array([0.0 if same else 1.0]))[0] == 0)
            if same:
                converged = strict = True
                break
            if shift <= tol:
                converged = True
                break
            labels_old = labels
        final = trace[-1] if trace else math.nan
        if not strict and n_iter:  # the labels and inertia of the final centers
            labels, _, final = self._lloyd_pass(X, w_all, xnorm_all, chunk, None, None,
                                                m_local)
            if comm is not None:
                final = float(comm.allreduce(np.array([final]))[0])
        logger.info("k-means Lloyd: %d passes, inertia %.6g, converged %s", n_iter, final,
                    converged)
        return KMeansResult(labels=labels, inertia=final, n_iter=n_iter, converged=converged,
                            inertia_trace=trace)

    def _distances_of(self, X, idx, xnorm):
        """Squared distances (k x s, float64) of the columns ``idx`` of ``X`` to every center."""
        Xs = X[:, idx]
        if gmat.is_sparse(Xs):
            Xs = sp.csc_matrix(Xs)
            D = gmat.mult_as(self.centers, Xs)
        else:
            D = self.centers @ Xs
        full = self._cnorm()[:, None] - 2.0 * D + xnorm[idx][None, :]
        np.maximum(full, 0.0, out=full)
        return full

    def _fit_hamerly(self, X, w, xnorm, max_iter, tol):
        """Lloyd's iterations with Hamerly's bounds (see :meth:`fit`)."""
        k, m = self.opts.n_clusters, X.shape[1]
        n = X.shape[0]
        eps = float(np.finfo(self.dtype).eps)
        labels = np.zeros(m, np.int32)
        upper = np.zeros(m)
        lower = np.zeros(m)
        margin = np.zeros(m)
        order = np.empty(m, np.int64)
        starts = np.empty(k + 1, np.int64)
        labels_old = None
        converged = False
        n_iter = 0
        need = np.arange(m)
        sparse = gmat.is_sparse(X)
        d_up = np.empty(m)
        d_low = np.empty(m)
        self._recomputed = []
        for it in range(max_iter):
            if need.size and sparse:  # the fused kernel over the overlapping columns
                self._assign_columns(X, need.astype(np.int64, copy=False), labels, d_up,
                                     d_low, self._cnorm(), xnorm)
                upper[need] = np.sqrt(d_up[need])
                lower[need] = np.sqrt(d_low[need])
            elif need.size:
                for s0 in range(0, need.size, max(256, _CHUNK_VALUES // k)):
                    idx = need[s0: s0 + max(256, _CHUNK_VALUES // k)]
                    full = self._distances_of(X, idx, xnorm)
                    lab = np.argmin(full, axis=0)
                    if k > 1:
                        two = np.partition(full, 1, axis=0)[:2]
                    else:
                        two = np.vstack([full[0], np.full(idx.size, np.inf)])
                    labels[idx] = lab
                    upper[idx] = np.sqrt(two[0])
                    lower[idx] = np.sqrt(two[1])
            # rounding margin of the distances: |sqrt(a) - sqrt(b)| <= sqrt(|a - b|)
            cn = self._cnorm()
            np.sqrt(64 * eps * (xnorm + cn.max()), out=margin)
            sums = np.zeros((k, n))
            wsum = np.zeros(k)
            self._sums_into(X, w, labels, sums, wsum, order, starts)
            if np.any(wsum == 0):  # relocation needs exact distances: a full E-step
                self._reassign_relocate(X, w, labels, sums, wsum, order, starts)
                need = np.arange(m)  # the bounds are stale
                relocated = True
            else:
                relocated = False
            new = sums / wsum[:, None]
            C_old = np.asarray(self.centers, np.float64)
            delta = np.sqrt(((new - C_old) ** 2).sum(axis=1))
            shift = float((delta ** 2).sum())
            self.centers[...] = new
            self.counts = wsum
            n_iter = it + 1
            self._recomputed.append(int(need.size))
            if labels_old is not None and np.array_equal(labels, labels_old):
                converged = True
                break
            if shift <= tol:
                converged = True
                break
            labels_old = labels.copy()
            if relocated:
                continue
            # move the bounds by the drift, then recompute where they overlap
            top = np.argsort(delta)[::-1]
            d1 = delta[top[0]]
            d2 = delta[top[1]] if k > 1 else 0.0
            upper += delta[labels]
            lower -= np.where(labels == top[0], d2, d1)
            need = np.flatnonzero(upper + margin >= lower - margin)
        labels, mind = self.assign(X)  # the final labels and inertia (an extra pass)
        final = float(mind @ w)
        logger.info("k-means Hamerly: %d passes, inertia %.6g, converged %s", n_iter, final,
                    converged)
        return KMeansResult(labels=labels, inertia=final, n_iter=n_iter, converged=converged,
                            inertia_trace=[final])

    def _fit_elkan(self, X, w, xnorm, max_iter, tol):
        """Lloyd's iterations with Elkan's bounds (see :meth:`fit`), run by the compiled
        loop :func:`_elkan_iterations`; this method allocates its state and does what the
        loop hands back: the exact half distances between the centers every 8 iterations
        (a BLAS product), the relocation of empty clusters, the tests' record of the labels
        (``self._trace_labels``) and the final labels and inertia."""
        k, m = self.opts.n_clusters, X.shape[1]
        n = X.shape[0]
        dense = not gmat.is_sparse(X)
        if dense:  # a dense matrix as CSC arrays, and its rows for the fresh sums
            Xf = np.asfortranarray(X)
            data = Xf.ravel(order="F")
            indices = np.tile(np.arange(n, dtype=np.int32), m)
            nz = data != 0
            n_nz = int(np.count_nonzero(nz))
            if n_nz <= 0.8 * data.size:
                # without its zeros (a copy): a zero's products add +-0 to sums that are
                # never -0, so every dot product and sum keeps its bits (digits: half the
                # pixels are 0, half the E-step's multiply-adds)
                data, indices = data[nz], indices[nz]
                indptr = np.zeros(m + 1, np.int64)
                np.cumsum(np.count_nonzero(nz.reshape(m, n), axis=1), out=indptr[1:])
            else:  # no copy of the values
                indptr = np.arange(0, n * m + 1, n, dtype=np.int64)
            XT = X.T if X.T.flags.c_contiguous else np.ascontiguousarray(X.T)
        else:
            indptr, indices, data = X.indptr, X.indices, X.data
            XT = np.empty((0, 0), data.dtype)
        eps = float(np.finfo(self.dtype).eps)
        labels = np.zeros(m, np.int32)
        labels_old = np.zeros(m, np.int32)
        U = np.zeros(m)
        L = np.zeros((m, k))
        Lmin = np.zeros(m)
        cum = np.zeros(k)
        cum_at = np.zeros(k)
        cc_exact = np.zeros((k, k))
        halfcc = np.zeros((k, k))
        s_half = np.zeros(k)
        margin = np.zeros(m)
        mbase = np.sqrt(xnorm) * (math.sqrt(64 * eps) + 64 * eps)  # the margins' own part
        counts = np.zeros(max((m + 255) // 256, 1), np.int64)
        order = np.empty(m, np.int64)
        starts = np.zeros(k + 1, np.int64)
        sums = np.zeros((k, n))
        wsum = np.zeros(k)
        members = np.zeros(k, np.int64)
        delta = np.zeros(k)
        cn = np.zeros(k)
        recomputed = np.zeros(max_iter, np.int64)
        shift = np.zeros(1)
        state = np.zeros(7, np.int64)
        state[_ST_FIRST] = state[_ST_FRESH] = 1
        state[_ST_CC_AT] = -1
        trace = getattr(self, "_trace_labels", None)  # the tests' record of each E-step
        while True:
            status = _elkan_iterations(
                indptr, indices, data, XT, dense, w, xnorm, mbase, self.centers, cn, labels,
                labels_old, U, L, Lmin, cum, cum_at, cc_exact, halfcc, s_half, margin, counts,
                sums, wsum, members, delta, order, starts, recomputed, state, shift, eps,
                float(tol), int(max_iter), PARALLEL_MIN_WORK, trace is not None)
            if status == _EL_NEED_CC:
                # the centers' half distances, exact (a k x k x n product) every 8 passes; in
                # between, lower bounds moved by the drift since (valid for the skips)
                C64 = np.asarray(self.centers, np.float64)
                np.subtract(cn[:, None] + cn[None, :], 2.0 * (C64 @ C64.T), out=cc_exact)
                np.maximum(cc_exact, 0.0, out=cc_exact)
                np.sqrt(cc_exact, out=cc_exact)
                cc_exact *= 0.5
                state[_ST_CC_AT] = state[_ST_IT]
                cum_at[:] = cum
            elif status == _EL_ESTEP:
                trace.append(labels.copy())
            elif status == _EL_EMPTY:  # relocation needs exact distances: a full E-step
                self._reassign_relocate(X, w, labels, sums, wsum, order, starts)
                state[_ST_FRESH] = 1  # the next sums afresh (the relocated examples moved)
                state[_ST_FIRST] = 1  # the bounds restart from the new centers
            else:
                break
        n_iter = int(state[_ST_IT])
        strict = status == _EL_STRICT
        converged = strict or status == _EL_TOL
        self.counts = wsum.copy()
        self._recomputed = [int(r) for r in recomputed[:n_iter]]
        if strict and not dense:
            # no label changed: these are Lloyd's final labels (Lloyd returns its last pass's),
            # and the inertia needs only each example's own center (nnz multiply-adds, not
            # the k nnz of a full pass; the same keys as Lloyd's, bit for bit)
            mind = np.empty(m, np.float64)
            _csc_label_dists(indptr, indices, data, self.centers, self._cnorm(), xnorm,
                             labels, mind)
        else:
            labels, mind = self.assign(X)  # the final labels and inertia (an extra pass)
        final = float(mind @ w)
        logger.info("k-means Elkan: %d passes, inertia %.6g, converged %s", n_iter, final,
                    converged)
        return KMeansResult(labels=labels, inertia=final, n_iter=n_iter, converged=converged,
                            inertia_trace=[final])

    def _lloyd_pass(self, X, w_all, xnorm_all, chunk, sums, wsum, m_local):
        """One E-step (and the M-step's sums when ``sums`` is given) over ``X``."""
        cnorm = self._cnorm()
        inertia = 0.0
        is_matrix = m_local is not None
        labels = np.empty(m_local, np.int32) if is_matrix else None
        mind_all = np.empty(m_local, np.float64) if is_matrix else None
        s = 0
        for Xp, wp in _chunks(X, w_all, chunk):
            mp = Xp.shape[1]
            if is_matrix:
                xn = xnorm_all[s: s + mp]
                w = w_all[s: s + mp]
            else:
                self._check_ready(Xp)
                xn, w = None, _weights(wp, mp)
            lab, mind = self.assign(Xp, None, cnorm=cnorm, xnorm=xn)
            inertia += float(mind @ w)
            if sums is not None:
                self._sums_into(Xp, w, lab, sums, wsum)
            if is_matrix:
                labels[s: s + mp] = lab
                mind_all[s: s + mp] = mind
            s += mp
        return labels, mind_all, inertia

    def _reassign_relocate(self, X, w, labels, sums, wsum, order, starts):
        """The bounded algorithms' way out of an empty cluster (relocation needs exact
        distances): a full E-step into ``labels``, the sums afresh, then
        :meth:`_relocate_empty` (one process)."""
        labs, mind = self.assign(X)
        labels[:] = labs
        sums[...] = 0
        wsum[...] = 0
        self._sums_into(X, w, labels, sums, wsum, order, starts)
        self._relocate_empty(X, w, labels, mind, sums, wsum, None)

    def _relocate_empty(self, X, w, labels, mind, sums, wsum, comm):
        """scikit-learn's rule: each empty cluster takes the example farthest from its center
        (the farthest first), moved out of its old cluster's sums."""
        empty = np.flatnonzero(wsum == 0)
        e = len(empty)
        far = np.argsort(-mind, kind="stable")[:e]
        cand = [(float(mind[j]), -1 if comm is None else comm.rank, int(j), _column(X, j),
                 float(w[j]), int(labels[j])) for j in far]
        if comm is not None:
            cand = [c for part in comm.allgather(cand) for c in part]
        cand.sort(key=lambda c: (-c[0], c[1], c[2]))
        for new_c, (_, _, _, x, wj, old_c) in zip(empty, cand[:e], strict=False):
            sums[old_c] -= wj * x
            wsum[old_c] -= wj
            sums[new_c] = wj * x
            wsum[new_c] = wj
        logger.debug("k-means: relocated %d empty clusters", e)

    # -- cost model ---------------------------------------------------------------------------
    def flops_per_step(self, batch) -> int:
        """Flops of a step: ``A*S`` (``2 k nnz``), the cluster sums (``2 nnz``) and the
        assignment (``2 k m``).

        Parameters
        ----------
        batch : Minibatch

        Returns
        -------
        int
        """
        X = batch.X
        nnz = X.nnz if gmat.is_sparse(X) else X.size
        k, m = self.opts.n_clusters, X.shape[1]
        return int(2 * k * nnz + 2 * nnz + 2 * k * m)

    def cost(self, batch) -> gmat.Cost:
        """Compulsory bytes and flops of a step, from the primitives' cost models: ``A*S``
        (:func:`roofline.gmat.cost_mult_as` with ``k`` rows) plus the cluster sums (the sparse
        structure read again and the ``k x n`` sums written once).

        Parameters
        ----------
        batch : Minibatch
            A sparse minibatch.

        Returns
        -------
        roofline.gmat.Cost
        """
        X = batch.X
        k = self.opts.n_clusters
        c = gmat.cost_mult_as(X, k)
        sums_bytes = c.breakdown["sparse"] + k * X.shape[0] * 8
        return gmat.Cost("k-means step", k, X.dtype, c.nnz, c.bytes + sums_bytes,
                         self.flops_per_step(batch),
                         {**c.breakdown, "sums": sums_bytes})

    def __repr__(self) -> str:
        c = self.centers
        shape = "uninitialised" if c is None else f"{c.shape[0]}x{c.shape[1]}"
        return f"KMeansModel({shape}, dtype={self.opts.dtype})"


@dataclass
class KMeansResult:
    """What :meth:`KMeansModel.fit` returns (the fields are the attributes)."""

    labels: np.ndarray | None
    inertia: float
    n_iter: int
    converged: bool
    inertia_trace: list


def _random_centers(X, k, rng, comm=None):
    """``k`` distinct examples drawn uniformly (over every rank's with ``comm``)."""
    m = X.shape[1]
    sizes = [m] if comm is None else comm.allgather(m)
    total = sum(sizes)
    if k > total:
        raise ValueError(f"n_clusters={k} exceeds the number of examples ({total})")
    picks = np.sort(rng.choice(total, size=k, replace=False))
    off = 0 if comm is None else sum(sizes[: comm.rank])
    mine = [(i, _column(X, int(p - off))) for i, p in enumerate(picks) if off <= p < off + m]
    if comm is not None:
        mine = [x for part in comm.allgather(mine) for x in part]
    mine.sort(key=lambda e: e[0])
    return np.array([v for _, v in mine], np.float64)


# ---------------------------------------------------------------------------------------------
# scikit-learn estimators


def _check_int(name, value, low):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def _to_columns(est, X, reset):
    """Validated rows-as-examples ``X`` to the column layout (CSC or an F-ordered dense view)
    of dtype float32 (kept) or float64."""
    X = validate_data(est, X, accept_sparse=("csr", "csc"), dtype=[np.float64, np.float32],
                      reset=reset, order="C")
    if sp.issparse(X):
        X = sp.csr_matrix(X)
        if not X.has_canonical_format:
            X = X.copy()
            X.sum_duplicates()
        return sp.csc_matrix((X.data, X.indices, X.indptr), shape=(X.shape[1], X.shape[0])), X
    return X.T, X


def _tolerance(Xr, tol):
    """scikit-learn's tolerance: ``tol`` times the mean variance of the features."""
    if tol == 0:
        return 0.0
    if sp.issparse(Xr):
        from sklearn.utils.sparsefuncs import mean_variance_axis

        _, var = mean_variance_axis(Xr, axis=0)
    else:
        var = np.var(Xr, axis=0)
    return float(np.mean(var) * tol)


def _rng_of(random_state):
    if random_state is None or isinstance(random_state, numbers.Integral):
        return np.random.default_rng(random_state)
    if isinstance(random_state, np.random.Generator):
        return random_state
    if isinstance(random_state, np.random.RandomState):
        return np.random.default_rng(random_state.randint(0, 2**31 - 1))
    raise ValueError(f"random_state must be None, an int or a numpy Generator, got "
                     f"{random_state!r}")


class _KMeansBase(ClassNamePrefixFeaturesOutMixin, TransformerMixin, ClusterMixin,
                  BaseEstimator):
    def _check_common(self, n_examples):
        k = _check_int("n_clusters", self.n_clusters, 1)
        if n_examples < k:
            raise ValueError(f"n_samples={n_examples} should be >= n_clusters={k}")
        if isinstance(self.init, str):
            if self.init not in ("k-means++", "random"):
                raise ValueError(f"init must be 'k-means++', 'random' or an array of shape "
                                 f"(n_clusters, n_features), got {self.init!r}")
        return k

    def _init_array(self, n_features, dtype):
        init = np.asarray(self.init, dtype=np.float64)
        if init.shape != (self.n_clusters, n_features):
            raise ValueError(f"init has shape {init.shape}, expected ({self.n_clusters}, "
                             f"{n_features})")
        return init

    def _model(self, dtype, rng, init_mode=None):
        seed = int(rng.integers(2**31 - 1))
        return KMeansModel(n_clusters=self.n_clusters, dtype=np.dtype(dtype).name,
                           init=init_mode or (self.init if isinstance(self.init, str)
                                              else "k-means++"), seed=seed,
                           **self._model_kwargs())

    def _model_kwargs(self):
        return {}

    def _store(self, model):
        self._model_ = model
        self.cluster_centers_ = np.asarray(model.centers, dtype=model.dtype).copy(order="C")
        self._n_features_out = self.n_clusters

    def _xc(self, X):
        check_is_fitted(self, "cluster_centers_")
        Xc, _ = _to_columns(self, X, reset=False)
        if Xc.dtype != self._model_.dtype:
            Xc = Xc.astype(self._model_.dtype)
        return Xc

    def predict(self, X):
        """The nearest center of each sample.

        Parameters
        ----------
        X : array-like or sparse matrix, shape (n_samples, n_features)

        Returns
        -------
        ndarray, shape (n_samples,), int32
        """
        Xc = self._xc(X)
        return self._model_.predict(Xc)

    def transform(self, X):
        """Euclidean distances of each sample to each center.

        Parameters
        ----------
        X : array-like or sparse matrix, shape (n_samples, n_features)

        Returns
        -------
        ndarray, shape (n_samples, n_clusters)
        """
        Xc = self._xc(X)
        return self._model_.transform(Xc).T

    def fit_predict(self, X, y=None, sample_weight=None):
        """Fit, then the labels of the training samples.

        Parameters
        ----------
        X : array-like or sparse matrix, shape (n_samples, n_features)
        y : ignored
        sample_weight : array-like, shape (n_samples,), optional

        Returns
        -------
        ndarray, shape (n_samples,)
        """
        return self.fit(X, sample_weight=sample_weight).labels_

    def score(self, X, y=None, sample_weight=None):
        """Minus the inertia of ``X`` at the centers.

        Parameters
        ----------
        X : array-like or sparse matrix, shape (n_samples, n_features)
        y : ignored
        sample_weight : array-like, shape (n_samples,), optional

        Returns
        -------
        float
        """
        Xc = self._xc(X)
        _, mind = self._model_.assign(Xc)
        sw = _check_sample_weight(sample_weight, Xc.T, dtype=np.float64)
        return -float(mind @ sw)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags


class KMeans(_KMeansBase):
    """k-means by Lloyd's algorithm on the primitives (scikit-learn's ``KMeans`` API).

    Parameters
    ----------
    n_clusters : int, default=8
    init : {"k-means++", "random"} or array of shape (n_clusters, n_features)
    n_init : "auto" or int, default="auto"
        Runs from different seeds, the lowest inertia kept (``"auto"``: 1 for k-means++ or an
        array, 10 for random, as scikit-learn).
    max_iter : int, default=300
        Lloyd passes per run.
    tol : float, default=1e-4
        Relative tolerance on the squared center shift (times the mean feature variance, as
        scikit-learn); the run also stops when no label changes.
    random_state : int, numpy Generator or None
    comm : roofline.comm.Communicator, optional
        Distributed Lloyd: each rank passes its own samples to :meth:`fit`; the centers are the
        same on every rank.
    algorithm : {"auto", "lloyd", "hamerly", "elkan"}, default="auto"
        ``"auto"``: Elkan's bounds for one process's samples whose ``n_samples x
        n_clusters`` float64 bounds fit in ``ELKAN_MAX_BOUND_BYTES`` (1 GiB), else Lloyd
        (see :meth:`KMeansModel.fit`).
        ``"hamerly"`` / ``"elkan"``: the same iterations with Hamerly's or Elkan's distance
        bounds, computing only the distances that may change an assignment (single process;
        see :meth:`KMeansModel.fit`).

    Attributes
    ----------
    cluster_centers_ : ndarray (n_clusters, n_features)
    labels_ : ndarray (n_samples,)
        This rank's samples' labels.
    inertia_ : float
        Over every rank's samples.
    n_iter_ : int
    """

    def __init__(self, n_clusters=8, *, init="k-means++", n_init="auto", max_iter=300,
                 tol=1e-4, random_state=None, comm=None, algorithm="auto"):
        self.algorithm = algorithm
        self.n_clusters = n_clusters
        self.init = init
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state
        self.comm = comm

    def fit(self, X, y=None, sample_weight=None):
        """Compute the clustering.

        Parameters
        ----------
        X : array-like or sparse matrix, shape (n_samples, n_features)
        y : ignored
        sample_weight : array-like, shape (n_samples,), optional

        Returns
        -------
        self
        """
        Xc, Xr = _to_columns(self, X, reset=True)
        comm = _check_comm(self.comm)
        m = Xc.shape[1]
        m_tot = m if comm is None else int(comm.allreduce(np.array([float(m)]))[0])
        self._check_common(m_tot)
        max_iter = _check_int("max_iter", self.max_iter, 1)
        if not isinstance(self.tol, numbers.Real) or not self.tol >= 0:
            raise ValueError(f"tol must be a non-negative number, got {self.tol!r}")
        if self.n_init == "auto":
            n_init = 10 if isinstance(self.init, str) and self.init == "random" else 1
        else:
            n_init = _check_int("n_init", self.n_init, 1)
        sw = _check_sample_weight(sample_weight, Xr, dtype=np.float64)
        if np.any(sw < 0):
            raise ValueError("sample_weight has negative values")
        tol = _tolerance(Xr, self.tol)
        if comm is not None:  # the mean variance over the ranks, roughly: average
            tol = float(comm.allreduce(np.array([tol]))[0]) / comm.size
        rng = _rng_of(self.random_state)
        init = None if isinstance(self.init, str) else self._init_array(Xc.shape[0], Xc.dtype)
        if init is not None:
            n_init = 1
        best = None
        for _ in range(n_init):
            model = self._model(Xc.dtype, rng)
            if init is None:
                model.seed_centers(Xc, sw, comm)
            res = model.fit(Xc, sample_weight=sw, max_iter=max_iter, tol=tol, comm=comm,
                            init=init, algorithm=self.algorithm)
            if best is None or res.inertia < best[1].inertia:
                best = (model, res)
        model, res = best
        self._store(model)
        self.labels_ = res.labels
        self.inertia_ = res.inertia
        self.n_iter_ = res.n_iter
        return self


class MiniBatchKMeans(_KMeansBase):
    """Minibatch k-means (scikit-learn's ``MiniBatchKMeans`` step) through a
    :class:`~roofline.learners.Learner`.

    Parameters
    ----------
    n_clusters : int, default=8
    init : {"k-means++", "random"} or array of shape (n_clusters, n_features)
        The first minibatch seeds the centers (or the array).
    max_iter : int, default=100
        Passes over the data.
    batch_size : int, default=1024
    tol : float, default=0.0
        Stop when a pass lowers the mean minibatch inertia by less than this fraction.
    reassignment_ratio : float, default=0.01
    random_state : int, numpy Generator or None

    Attributes
    ----------
    cluster_centers_, labels_, inertia_, n_iter_ (passes), n_steps_
    """

    def __init__(self, n_clusters=8, *, init="k-means++", max_iter=100, batch_size=1024,
                 tol=0.0, reassignment_ratio=0.01, random_state=None):
        self.n_clusters = n_clusters
        self.init = init
        self.max_iter = max_iter
        self.batch_size = batch_size
        self.tol = tol
        self.reassignment_ratio = reassignment_ratio
        self.random_state = random_state

    def _model_kwargs(self):
        return {"reassignment_ratio": float(self.reassignment_ratio)}

    def _new_model(self, Xc, rng):
        """A model with allocated centers, set to ``init`` when it is an array."""
        model = self._model(Xc.dtype, rng)
        model.init(Xc.shape[0])
        if not isinstance(self.init, str):
            model.set_parameters(self._init_array(Xc.shape[0], Xc.dtype))
        return model

    def _train(self, Xc, sw, model, passes):
        from ._learner import Learner
        from ._optimizers import ModelUpdate

        bs = _check_int("batch_size", self.batch_size, 1)
        learner = Learner(MatSource(Xc, w=sw, batch_size=bs), model, ModelUpdate(),
                          progress=False, n_passes=1)
        prev = math.inf
        done = 0
        for _ in range(passes):
            with one_blas_thread():
                res = learner.train()
            done += 1
            cur = res.trace[-1]["train_loss"] if res.trace else math.nan
            if self.tol and prev < math.inf and prev - cur < self.tol * abs(prev):
                break
            prev = cur
        return done

    def fit(self, X, y=None, sample_weight=None):
        """Compute the clustering by minibatch passes.

        Parameters
        ----------
        X : array-like or sparse matrix, shape (n_samples, n_features)
        y : ignored
        sample_weight : array-like, shape (n_samples,), optional

        Returns
        -------
        self
        """
        Xc, Xr = _to_columns(self, X, reset=True)
        self._check_common(Xc.shape[1])
        passes = _check_int("max_iter", self.max_iter, 1)
        sw = _check_sample_weight(sample_weight, Xr, dtype=np.float64)
        rng = _rng_of(self.random_state)
        model = self._new_model(Xc, rng)
        # seed from a random sample of the data (scikit-learn: init_size = 3 * batch_size)
        size = min(Xc.shape[1], max(3 * int(self.batch_size), self.n_clusters))
        if isinstance(self.init, str):
            pick = np.sort(rng.choice(Xc.shape[1], size=size, replace=False))
            Xs = Xc[:, pick]
            if sp.issparse(Xs):
                Xs = sp.csc_matrix(Xs)
            model.seed_centers(Xs, sw[pick])
        self.n_iter_ = self._train(Xc, sw, model, passes)
        self.n_steps_ = model._n_steps
        self._store(model)
        self.labels_, mind = model.assign(Xc)
        self.inertia_ = float(mind @ sw)
        return self

    def partial_fit(self, X, y=None, sample_weight=None):
        """One minibatch step on ``X`` (the first call seeds the centers from it).

        Parameters
        ----------
        X : array-like or sparse matrix, shape (n_samples, n_features)
        y : ignored
        sample_weight : array-like, shape (n_samples,), optional

        Returns
        -------
        self
        """
        first = not hasattr(self, "_model_")
        Xc, Xr = _to_columns(self, X, reset=first)
        sw = _check_sample_weight(sample_weight, Xr, dtype=np.float64)
        if first:
            self._check_common(Xc.shape[1])
            model = self._new_model(Xc, _rng_of(self.random_state))
        else:
            model = self._model_
            if Xc.dtype != model.dtype:
                Xc = Xc.astype(model.dtype)
        model.update(Minibatch(Xc, None, sw))
        self._store(model)
        self.n_steps_ = model._n_steps
        return self
