"""numba kernels for coordinate descent on generalized linear models.

Conventions shared by every kernel here (the solvers in ``roofline.learners`` build on them):

* A coordinate is one column of a CSC structure ``(indptr, indices, data)``.  For the *primal*
  (coordinates = features) that structure is ``X^T`` stored feature-major, whose column ``j``
  lists the examples in which feature ``j`` occurs; for the *dual* (coordinates = examples) it
  is the project layout ``X`` itself (``n_features x n_examples`` CSC).
* Losses are the codes of :data:`._losses.LOSS_CODES` in their margin form (``0`` squared,
  ``1`` logistic, ``2`` hinge; classifier labels ``y in {-1, 1}``): :mod:`._losses`.
* Everything is written in *sums*, not means: the solvers minimise
  ``sum_i l(z_i) + lam_n * R(w)`` with ``lam_n = n * lambda`` and ``R = ||w||^2 / 2`` (``l1=False``)
  or ``||w||_1`` (``l1=True``).  The primal kernels' trailing ``lam2`` (default 0) adds
  ``lam2 * ||w||^2 / 2`` to the ``l1=True`` objective: the elastic net, whose coordinate step is
  the closed-form prox ``soft(h w - g, lam_n) / (h + lam2)``.
* ``sigma`` is CoCoA's subproblem scaling ``sigma'`` (1 for a single solver): a worker sees the
  margins of the other workers frozen and its own changes amplified ``sigma`` times, which makes
  the sum of the workers' local objectives an upper bound of the global one.  The kernels then
  update both the *effective* shared vector (``+= sigma * delta * x``) and, when ``track`` is set,
  the worker's own raw change ``d`` (``+= delta * x``) that is sent to the other workers.
* ``damp`` multiplies every coordinate step (TPA-SCD's adaptive damping; 1 = plain steps).

Accumulations are in float64 whatever the data dtype.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from ._losses import HINGE, LOGISTIC, SQUARED, margin_dloss, margin_loss, margin_neg_conj, sigmoid
from ._prefetch import prefetch_row
from ._threads import parallel_njit

__all__ = [
    "cd_block_apply",
    "cd_block_stats",
    "cd_block_steps",
    "cd_col_sqnorms",
    "cd_col_sqnorms_serial",
    "cd_conj_sum",
    "cd_dual_epoch",
    "cd_dual_epoch_parfor",
    "cd_dual_sweeps",
    "cd_dual_tpa",
    "cd_dual_tpa_split",
    "cd_feature_counts",
    "cd_free_parts",
    "cd_frequency_order",
    "cd_grad",
    "cd_greedy_pure_blocks",
    "cd_intercept_step",
    "cd_loss_sum",
    "cd_matvec",
    "cd_matvec_serial",
    "cd_matvec_t",
    "cd_primal_epoch",
    "cd_primal_tpa",
    "cd_remap_indices",
    "cd_scaled_side_conj",
    "cd_unit_columns",
]

_FLAGS = dict(cache=True, nogil=True)

# Coordinate steps ahead whose shared-vector entries are prefetched (the structure of the
# coordinate twice as far ahead is prefetched first, so its indices are in cache by then).
CD_PREFETCH_AHEAD = 2
# Within a coordinate, entries this many nonzeros ahead are prefetched (long columns: the hot
# features of power-law data in the primal).
CD_PREFETCH_DISTANCE = 16
# The look-ahead prefetch of the next coordinates covers at most this many of their entries: all
# of an example's features in the dual (~40 on Criteo-like data; their cold, cache-missing
# features can sit anywhere in the column, and a cap of 16 made the dual epoch ~20% slower),
# the head of a feature's column in the primal (the in-column prefetch covers the rest).
CD_PREFETCH_COORD_CAP = 64


@njit(inline="always")
def _is_unit(unit, i):
    """Whether ``unit`` (:func:`cd_unit_columns`, or ``None``: none) flags coordinate ``i``.

    ``None`` is a type of its own: numba compiles the kernel for it with the flagged
    examples' loops pruned away (a sequential hinge sweep ~25% faster than with the flags'
    branch in the loop, never taken: a larger loop body whose state LLVM spills)."""
    if unit is None:
        return False
    return unit[i] != 0.0


@njit(inline="always")
def _prefetch_coords(coords, t, indptr, indices, data, vec, s1, s2, s3, unit):
    """Software pipeline of a sequential CD pass in a random coordinate order, where each step
    is bound by the latency of random gathers: for step ``t``, prefetch ``indptr`` of the
    coordinate ``3A`` ahead with its entries of the per-coordinate arrays ``s1, s2, s3``, the
    ``indices``/``data`` lines of the one ``2A`` ahead (not its ``data`` when ``unit`` flags it:
    its values are all one and never read), and the entries of ``vec`` (the shared vector) that
    the one ``A`` ahead will gather.

    ``unit`` is ``None`` or a per-coordinate array read at ``2A`` ahead: it should share a cache
    line with ``s1`` (a column of the same record array), which is then already in cache; a
    separate flag array cost ~30% of a dual sweep in measurements (its random reads missed).
    """
    n = coords.shape[0]
    a = CD_PREFETCH_AHEAD
    if t + 3 * a < n:
        c = coords[t + 3 * a]
        prefetch_row(indptr, np.uint64(c), 0)
        prefetch_row(s1, np.uint64(c), 0)
        prefetch_row(s2, np.uint64(c), 0)
        prefetch_row(s3, np.uint64(c), 0)
    if t + 2 * a < n:
        c = coords[t + 2 * a]
        lo, hi = indptr[c], indptr[c + 1]
        for off in range(0, (hi - lo) * indices.itemsize + 64, 64):
            prefetch_row(indices, np.uint64(lo), off)
        if not _is_unit(unit, c):
            for off in range(0, (hi - lo) * data.itemsize + 64, 64):
                prefetch_row(data, np.uint64(lo), off)
    if t + a < n:
        c = coords[t + a]
        lo = indptr[c]
        for p in range(lo, min(indptr[c + 1], lo + CD_PREFETCH_COORD_CAP)):
            prefetch_row(vec, np.uint64(indices[p]), 0)


# ---------------------------------------------------------------------------------------------
# whole-vector helpers


@njit(**_FLAGS)
def cd_loss_sum(z, y, loss):
    """``sum_i l(z_i; y_i)``."""
    acc = 0.0
    for i in range(z.shape[0]):
        acc += margin_loss(z[i], y[i], loss)
    return acc


@njit(**_FLAGS)
def cd_conj_sum(alpha, y, loss):
    """``sum_i -l*(-alpha_i; y_i)`` (``-inf`` if some ``alpha_i`` is infeasible)."""
    acc = 0.0
    for i in range(alpha.shape[0]):
        acc += margin_neg_conj(alpha[i], y[i], loss)
    return acc


@njit(**_FLAGS)
def cd_free_parts(z, scale, shift, alpha, y, loss, out):
    """One pass over the examples for the check of a dual with an unregularised intercept:
    ``z[i] = z[i] * scale + shift`` (the margins at the intercept, in place), and ``out[:8] =
    [sum l(z_i; y_i), C_pos, C_neg, C_zero, sum alpha_i, sum_{alpha_i > 0} alpha_i,
    sum_{alpha_i < 0} alpha_i, min_i y_i alpha_i]`` with ``C_pos, C_neg, C_zero`` the sums of
    ``-l*(-alpha_i; y_i)`` over the examples with ``alpha_i`` positive, negative and zero.
    For the logistic loss also ``out[8:12] = [T1_pos, T2_pos, T1_neg, T2_neg]``, the sums over
    those examples of ``beta H'(beta)`` and ``beta / (1 - beta)`` (``beta = y_i alpha_i``,
    ``H(beta) = -l*(-alpha_i)`` the entropy: a bound of the conjugates of ``(1 - theta)
    alpha``, see :func:`cd_scaled_side_conj`); NaN for the other losses.  Returns ``out``."""
    L = cp = cn = c0 = s = sp = sn = 0.0
    t1p = t2p = t1n = t2n = 0.0
    ymin = np.inf
    logistic = loss == LOGISTIC
    for i in range(z.shape[0]):
        zi = z[i] * scale + shift
        z[i] = zi
        ai, yi = alpha[i], y[i]
        L += margin_loss(zi, yi, loss)
        t1 = t2 = 0.0
        if logistic:
            b = yi * ai
            if b < 0.0 or b > 1.0:
                c = -np.inf
            elif b == 0.0:
                c = 0.0
            elif b == 1.0:
                c = 0.0
                t1 = -np.inf
                t2 = np.inf
            else:
                lb, l1b = math.log(b), math.log(1.0 - b)
                c = -(b * lb + (1.0 - b) * l1b)
                t1 = b * (l1b - lb)
                t2 = b / (1.0 - b)
        else:
            c = margin_neg_conj(ai, yi, loss)
        s += ai
        if ai > 0.0:
            cp += c
            sp += ai
            t1p += t1
            t2p += t2
        elif ai < 0.0:
            cn += c
            sn += ai
            t1n += t1
            t2n += t2
        else:
            c0 += c
        ymin = min(ymin, yi * ai)
    out[0], out[1], out[2], out[3] = L, cp, cn, c0
    out[4], out[5], out[6], out[7] = s, sp, sn, ymin
    if logistic:
        out[8], out[9], out[10], out[11] = t1p, t2p, t1n, t2n
    else:
        out[8] = out[9] = out[10] = out[11] = np.nan
    return out


@njit(**_FLAGS)
def cd_scaled_side_conj(alpha, y, loss, theta, sign, idx, idx_side, gathered):
    """``sum -l*(-(alpha_i - theta alpha_i); y_i)`` over the examples with ``sign alpha_i > 0``
    (the side that the balanced dual point scales by ``1 - theta``), and ``gathered[k] =
    alpha[idx[k]]``.  ``idx_side``: every example of that side is in ``idx`` (the smaller
    class, its examples' ``alpha`` of one sign), whose loop alone then runs."""
    acc = 0.0
    for k in range(idx.shape[0]):
        ai = alpha[idx[k]]
        gathered[k] = ai
        if idx_side and sign * ai > 0.0:
            acc += margin_neg_conj(ai - theta * ai, y[idx[k]], loss)
    if not idx_side:
        for i in range(alpha.shape[0]):
            ai = alpha[i]
            if sign * ai > 0.0:
                acc += margin_neg_conj(ai - theta * ai, y[i], loss)
    return acc


@njit(**_FLAGS)
def cd_grad(z, y, loss, out):
    """``out_i = -l'(z_i)`` (the dual point the primal iterate maps to); returns
    ``(sum_i l'(z_i), sum_i l''(z_i))``."""
    g = 0.0
    h = 0.0
    for i in range(z.shape[0]):
        d1, d2 = margin_dloss(z[i], y[i], loss)
        out[i] = -d1
        g += d1
        h += d2
    return g, h


@njit(inline="always")
def _matvec_col(j, indptr, indices, data, unit, x, out, offset):
    """Column ``j`` of :func:`cd_matvec` (the one body of its parallel and serial versions)."""
    out[j] = _dual_dot(indptr[j], indptr[j + 1], indices, data, x, _is_unit(unit, j), 0.0,
                       0) + offset


@parallel_njit(**_FLAGS)
def cd_matvec(indptr, indices, data, unit, x, out, offset):
    """``out[j] = offset + sum_p data[p] * x[indices[p]]`` over the nonzeros of column ``j``
    (``X^T w`` for the project layout), float64 accumulation, parallel over columns.  The
    columns flagged by ``unit`` (:func:`cd_unit_columns`, or ``None``: none) hold only ones and
    are summed without reading their values (the same sums bit for bit)."""
    for j in prange(indptr.shape[0] - 1):
        _matvec_col(j, indptr, indices, data, unit, x, out, offset)
    return out


@njit(**_FLAGS)
def cd_matvec_serial(indptr, indices, data, unit, x, out, offset):
    """:func:`cd_matvec` on the calling thread only (for callers that are threads themselves:
    numba's workqueue layer does not allow concurrent parallel launches).  A separate function,
    not a flag of :func:`cd_matvec`, so that the two compile (and cache) apart."""
    for j in range(indptr.shape[0] - 1):
        _matvec_col(j, indptr, indices, data, unit, x, out, offset)
    return out


@njit(**_FLAGS)
def cd_matvec_t(indptr, indices, data, unit, a, out):
    """``out[i] += sum_j data * a[j]`` over the nonzeros ``(i, j)``: ``X alpha`` (accumulates;
    ``unit`` as for :func:`cd_matvec`)."""
    for j in range(indptr.shape[0] - 1):
        aj = a[j]
        if aj != 0.0:
            _scatter_col(indptr[j], indptr[j + 1], indices, data, out, aj, _is_unit(unit, j))
    return out


@njit(**_FLAGS)
def cd_feature_counts(indices, counts):
    """``counts[j] += `` the number of entries of ``indices`` equal to ``j`` (the rows'
    nonzeros of a sparse structure; ``counts`` int32 or int64, zeroed by the caller)."""
    for p in range(indices.shape[0]):
        counts[indices[p]] += 1
    return counts


@njit(**_FLAGS)
def cd_dense_counts(A, counts):
    """``counts[j]`` = the nonzeros of column ``j`` of the dense 2-D array ``A``."""
    for j in range(A.shape[1]):
        c = 0
        for i in range(A.shape[0]):
            if A[i, j] != 0:
                c += 1
        counts[j] = c
    return counts


@njit(**_FLAGS)
def cd_dense_fill(A, indptr, indices, data):
    """The CSC structure of the dense ``A`` whose column pointers ``indptr`` are the
    cumulated :func:`cd_dense_counts`: each column's nonzeros, rows increasing."""
    for j in range(A.shape[1]):
        p = indptr[j]
        for i in range(A.shape[0]):
            x = A[i, j]
            if x != 0:
                indices[p] = i
                data[p] = x
                p += 1


@njit(**_FLAGS)
def cd_frequency_order(counts):
    """Rows by decreasing ``counts`` (:func:`cd_feature_counts`), ties in increasing row
    number: ``(order, counts[order])`` (int64) by a counting sort, O(n + max count)."""
    n = counts.shape[0]
    top = 0
    for j in range(n):
        if counts[j] > top:
            top = counts[j]
    start = np.zeros(top + 2, dtype=np.int64)  # start[c]: first slot of count c (descending)
    for j in range(n):
        start[top - counts[j] + 1] += 1
    for c in range(1, top + 2):
        start[c] += start[c - 1]
    order = np.empty(n, dtype=np.int64)
    sorted_counts = np.empty(n, dtype=np.int64)
    for j in range(n):
        c = counts[j]
        q = start[top - c]
        order[q] = j
        sorted_counts[q] = c
        start[top - c] = q + 1
    return order, sorted_counts


@parallel_njit(**_FLAGS)
def cd_remap_indices(indices, newid, out):
    """``out[p] = newid[indices[p]]`` (renumber the rows of a sparse structure), parallel."""
    for p in prange(indices.shape[0]):
        out[p] = newid[indices[p]]
    return out


@njit(inline="always")
def _unit_column(indptr, data, j):
    for p in range(indptr[j], indptr[j + 1]):
        if data[p] != 1.0:
            return 0.0
    return 1.0


@parallel_njit(**_FLAGS)
def cd_unit_columns(indptr, data, out):
    """``out[j] = 1.0`` when every stored value of column ``j`` is exactly one (an example of
    one-hot or hashed categorical features), else ``0.0``; the dual kernels then never read that
    column's values.  ``out`` may be a strided column of a record array."""
    for j in prange(out.shape[0]):
        out[j] = _unit_column(indptr, data, j)
    return out


@njit(**_FLAGS)
def cd_unit_columns_serial(indptr, data, out):
    """:func:`cd_unit_columns` on the calling thread (small matrices: no parallel launch)."""
    for j in range(out.shape[0]):
        out[j] = _unit_column(indptr, data, j)
    return out


@njit(inline="always")
def _col_sqnorm(indptr, data, j):
    acc = 0.0
    for p in range(indptr[j], indptr[j + 1]):
        x = np.float64(data[p])
        acc += x * x
    return acc


@parallel_njit(**_FLAGS)
def cd_col_sqnorms(indptr, data, out):
    """``out[j] = sum_p data[p]^2`` over column ``j`` (columns in parallel: each sum in the
    column's order, as sequentially)."""
    for j in prange(indptr.shape[0] - 1):
        out[j] = _col_sqnorm(indptr, data, j)
    return out


@njit(**_FLAGS)
def cd_col_sqnorms_serial(indptr, data, out):
    """:func:`cd_col_sqnorms` on the calling thread (for callers that are threads themselves:
    numba's workqueue layer does not allow concurrent parallel launches)."""
    for j in range(indptr.shape[0] - 1):
        out[j] = _col_sqnorm(indptr, data, j)
    return out


# ---------------------------------------------------------------------------------------------
# primal coordinate steps (coordinates = features)


@njit(inline="always")
def _primal_coord(j, indptr, indices, data, y, w, z, d, loss, l1, lam_n, sigma, damp, colsq,
                  track, lam2):
    lo = indptr[j]
    hi = indptr[j + 1]
    if lo == hi:
        # an empty feature: only the regulariser acts, its optimum is 0
        w[j] = w[j] * (1.0 - damp)
        return
    g = 0.0
    h = 0.0
    p_end = hi - CD_PREFETCH_DISTANCE
    if loss == SQUARED:
        for p in range(lo, hi):
            if p < p_end:
                q = np.uint64(indices[p + CD_PREFETCH_DISTANCE])
                prefetch_row(z, q, 0)
                prefetch_row(y, q, 0)
            g += data[p] * (z[indices[p]] - y[indices[p]])
        h = colsq[j]
    else:
        for p in range(lo, hi):
            if p < p_end:
                q = np.uint64(indices[p + CD_PREFETCH_DISTANCE])
                prefetch_row(z, q, 0)
                prefetch_row(y, q, 0)
            i = indices[p]
            d1, d2 = margin_dloss(z[i], y[i], loss)
            x = np.float64(data[p])
            g += x * d1
            h += x * x * d2
    h *= sigma
    wj = w[j]
    if l1:
        # the prox of lam_n |w| + lam2 w^2 / 2 (lam2 = 0: the lasso's soft-thresholding)
        h2 = h + lam2
        if h2 <= 0.0:
            return
        t = h * wj - g
        if t > lam_n:
            new = (t - lam_n) / h2
        elif t < -lam_n:
            new = (t + lam_n) / h2
        else:
            new = 0.0
        delta = new - wj
    else:
        delta = -(g + lam_n * wj) / (h + lam_n)
    delta *= damp
    if delta == 0.0:
        return
    w[j] = wj + delta
    sd = sigma * delta
    for p in range(lo, hi):
        z[indices[p]] += sd * data[p]
    if track:
        for p in range(lo, hi):
            d[indices[p]] += delta * data[p]


@njit(**_FLAGS)
def cd_primal_epoch(indptr, indices, data, y, w, z, d, coords, loss, l1, lam_n, sigma, damp,
                    colsq, track, lam2=0.0):
    """One sequential pass of primal coordinate descent over ``coords`` (in that order).

    Each step minimises (squared loss: exactly; logistic: one Newton step, as Snap ML does) the
    objective in ``w[j]`` with the others fixed, using the margins ``z = X^T w`` (+ intercept),
    and keeps ``z`` in sync at the cost of the nnz of the column.  ``colsq`` holds the column
    squared norms (used by the squared loss).  ``lam2`` (with ``l1``): the elastic net's L2
    part (module docstring).
    """
    for t in range(coords.shape[0]):
        _prefetch_coords(coords, t, indptr, indices, data, z, w, colsq, w, None)
        _primal_coord(coords[t], indptr, indices, data, y, w, z, d, loss, l1, lam_n, sigma,
                      damp, colsq, track, lam2)


@parallel_njit(**_FLAGS)
def cd_primal_tpa(indptr, indices, data, y, w, Z, coords, bounds, loss, l1, lam_n, damp,
                  colsq, dummy, lam2=0.0):
    """TPA-SCD sub-epoch on CPU threads: thread ``t`` updates the disjoint coordinates
    ``coords[bounds[t]:bounds[t+1]]`` with no synchronisation.

    ``Z`` has one row (Hogwild: every thread reads and writes the one shared margin vector, with
    unsynchronised adds) or one row per thread (replicas: each thread works against its own
    copy, merged by the caller).  ``dummy`` is a length-0 float64 array.  ``lam2``: as in
    :func:`cd_primal_epoch`.
    """
    n_threads = bounds.shape[0] - 1
    shared = Z.shape[0] == 1
    for t in prange(n_threads):
        row = np.int64(0) if shared else np.int64(t)
        z = Z[row]
        mine = coords[bounds[t]:bounds[t + 1]]
        for k in range(mine.shape[0]):
            _prefetch_coords(mine, k, indptr, indices, data, z, w, colsq, w, None)
            _primal_coord(mine[k], indptr, indices, data, y, w, z, dummy, loss, l1, lam_n,
                          1.0, damp, colsq, False, lam2)


@njit(**_FLAGS)
def cd_intercept_step(y, z, d, b, loss, sigma, damp, track):
    """One Newton step (exact for the squared loss) on an unregularised intercept ``b``;
    updates ``z`` (``+= sigma * delta``) and ``d``; returns the new ``b``."""
    n = z.shape[0]
    g = 0.0
    h = 0.0
    for i in range(n):
        d1, d2 = margin_dloss(z[i], y[i], loss)
        g += d1
        h += d2
    h *= sigma
    if h <= 0.0:
        return b
    delta = -damp * g / h
    for i in range(n):
        z[i] += sigma * delta
    if track:
        for i in range(n):
            d[i] += delta
    return b + delta


# ---------------------------------------------------------------------------------------------
# dual coordinate steps (coordinates = examples, SDCA)


# Iterations of the logistic dual step's safeguarded Newton (bisection alone needs ~40 for a
# bracket of width 1e6 down to the 1e-4 tolerance; the typical solve takes 2-7).
_LOGISTIC_DUAL_MAX_IT = 100


@njit(inline="always")
def _logistic_dual_beta(beta, ym, q):
    """Maximise ``H(b) - (b - beta) * ym - q (b - beta)^2 / 2`` over ``b in (0, 1)``
    (``H`` the binary entropy): safeguarded Newton on ``t = logit(b)`` (the root stays
    bracketed; a bisection replaces a Newton step that leaves the bracket or does not halve
    the step before the last, as in Numerical Recipes' ``rtsafe``).

    The solve cost ~35% of a logistic dual epoch (each Newton iteration one ``exp``; ~3.5 of
    them per example), now ~2 iterations and ~1.5 ``exp`` late in a fit: the first iteration
    starts from the current ``b`` (its sigmoid needs no ``exp``), and the solve stops as soon as
    a Newton step ``h`` falls below ``1e-4 (1 + |t|)``.  The accepted point's error is then at
    most ``|g''/2g'| h^2 <= h^2 / 2`` (quadratic convergence, ``|g''/2g'| <= |1 - 2s| / 2``), and
    ``b`` is the sigmoid linearised at the last evaluated point, as accurate, with no further
    ``exp``.  An error ``e`` in ``t`` costs the one-dimensional dual only
    ``O((q / 16 + 1 / 4) e^2)``, and ``v`` follows the ``b`` actually taken, so the iterates stay
    consistent.
    """
    if q <= 0.0:
        return sigmoid(-ym)
    # root of g(t) = -t - ym - q (sigmoid(t) - beta), decreasing in t, lies in [lo, hi]
    lo = -ym - q * (1.0 - beta)
    hi = -ym + q * beta
    # start from the current point, whose sigmoid is beta itself (no exp), or from the end of
    # the bracket nearest to it (fewer iterations than from the middle)
    s = -1.0
    t = 0.5 * (lo + hi)
    if beta > 0.0 and beta < 1.0:
        t0 = math.log(beta / (1.0 - beta))
        if t0 < lo:
            t = lo
        elif t0 > hi:
            t = hi
        else:
            t = t0
            s = beta
    dx_old = hi - lo
    dx = dx_old
    for _ in range(_LOGISTIC_DUAL_MAX_IT):
        if s < 0.0:
            s = sigmoid(t)
        g = -t - ym - q * (s - beta)
        if g > 0.0:
            lo = t
        else:
            hi = t
        ds = s * (1.0 - s)
        dg = -1.0 - q * ds
        step = -g / dg
        if abs(step) <= 1e-4 * (1.0 + abs(t)):
            # converged (tested before the bracket: at the root, t is an end of the bracket
            # and the Newton point t + step may round onto it)
            b = s + ds * step
            if b > 0.0 and b < 1.0:
                return b
            return sigmoid(t + step)
        tn = t + step
        # bisect where the Newton step leaves the bracket or does not halve the step before
        # the last one (rtsafe): with a large q, Newton from the sigmoid's flat tails can
        # jump between two points inside the bracket forever (beta = 0, ym = -2.88,
        # q = 3100 returned 0.946 for 0.0028: weakly regularised hashed data converged ~100x
        # slower per sweep)
        if tn <= lo or tn >= hi or abs(2.0 * g) > abs(dx_old * dg):
            tn = 0.5 * (lo + hi)
        dx_old = dx
        dx = tn - t
        t = tn
        s = -1.0
    return sigmoid(t)


@njit(inline="always")
def _hinge_beta(beta, g, lam_n, qs):
    """The hinge dual's exact step in liblinear's form: ``beta - G / Q_ii`` clipped to
    ``[0, 1]``, with ``G = y_i x_i^T w - 1`` and ``Q_ii = qs / lam_n`` (``qs`` the step's
    curvature times ``lam_n``; at ``qs = 0`` the end of the box that ``G`` points to)."""
    if qs > 0.0:
        nb = beta - g * lam_n / qs
    else:
        nb = 1.0 if g < 0.0 else 0.0
    if nb < 0.0:
        return 0.0
    if nb > 1.0:
        return 1.0
    return nb


@njit(inline="always")
def _dual_delta(acc, i, y, alpha, loss, lam_n, sigma, damp, colsq, icpt):
    """The (damped) step of ``alpha[i]`` given ``acc = x_i^T v`` (the constant feature's term
    included)."""
    m = acc / lam_n  # the margin x_i^T w, w = v / lam_n
    q = sigma * (colsq[i] + icpt * icpt) / lam_n
    a = alpha[i]
    yi = y[i]
    if loss == SQUARED:
        delta = (yi - m - a) / (1.0 + q)
    elif loss == HINGE:
        # liblinear's form, as :func:`_hinge_sweeps` computes it (the same step bit for bit):
        # beta - G / Q_ii with G = y_i x_i^T w - 1
        beta = a * yi
        g = yi * acc * (1.0 / lam_n) - 1.0
        delta = yi * (_hinge_beta(beta, g, lam_n, sigma * (colsq[i] + icpt * icpt)) - beta)
    else:
        beta = a * yi
        nb = _logistic_dual_beta(beta, yi * m, q)
        delta = yi * (nb - beta)
    return delta * damp


@njit(inline="always")
def _scatter_col(lo, hi, indices, data, out, scale, unit_i):
    """``out[indices[p]] += scale * data[p]`` for ``p`` in ``[lo, hi)``; the values are not read
    when ``unit_i`` (all one: the same result bit for bit, ``x * 1.0`` being exact)."""
    if unit_i:
        for p in range(np.uint64(lo), np.uint64(hi)):
            out[np.uint64(indices[p])] += scale
    else:
        for p in range(np.uint64(lo), np.uint64(hi)):
            out[np.uint64(indices[p])] += scale * data[p]


@njit(inline="always")
def _dual_move(lo, hi, indices, data, v, scale, unit_i, icpt, nf):
    """``v += scale * x_i`` for the example whose entries are ``[lo, hi)``, the constant
    feature's entry ``v[nf]`` included when ``icpt != 0``."""
    _scatter_col(lo, hi, indices, data, v, scale, unit_i)
    if icpt != 0.0:
        v[nf] += scale * icpt


@njit(inline="always")
def _dual_dot(lo, hi, indices, data, v, unit_i, icpt, nf):
    """``x_i^T v`` over the entries ``[lo, hi)`` of example ``i``, plus the constant feature's
    term.  An example whose values are all one (``unit_i``: one-hot / hashed categorical data)
    is summed without reading them: the same sum bit for bit (x * 1.0 is exact), one memory
    stream fewer."""
    # four partial sums: one chain of dependent adds costs ~4 cycles per value where v sits
    # in cache (breast cancer's 31 features: 540 hinge sweeps 0.77 -> 0.64 ms; no change
    # where the gathers miss the cache)
    a0 = 0.0
    a1 = 0.0
    a2 = 0.0
    a3 = 0.0
    p = np.uint64(lo)
    end = np.uint64(hi)
    four = np.uint64(4)
    one = np.uint64(1)
    if unit_i:
        while p + four <= end:
            a0 += v[np.uint64(indices[p])]
            a1 += v[np.uint64(indices[p + one])]
            a2 += v[np.uint64(indices[p + np.uint64(2)])]
            a3 += v[np.uint64(indices[p + np.uint64(3)])]
            p += four
        while p < end:
            a0 += v[np.uint64(indices[p])]
            p += one
    else:
        while p + four <= end:
            a0 += data[p] * v[np.uint64(indices[p])]
            a1 += data[p + one] * v[np.uint64(indices[p + one])]
            a2 += data[p + np.uint64(2)] * v[np.uint64(indices[p + np.uint64(2)])]
            a3 += data[p + np.uint64(3)] * v[np.uint64(indices[p + np.uint64(3)])]
            p += four
        while p < end:
            a0 += data[p] * v[np.uint64(indices[p])]
            p += one
    acc = (a0 + a1) + (a2 + a3)
    if icpt != 0.0:
        acc += icpt * v[nf]
    return acc


@njit(inline="always")
def _dual_coord(i, indptr, indices, data, y, alpha, v, d, loss, lam_n, sigma, damp, colsq,
                icpt, track, unit, off):
    """One dual coordinate step on example ``i``; ``off = b * lam_n`` shifts its margin by
    an unregularised intercept ``b`` held fixed (0: none)."""
    lo = indptr[i]
    hi = indptr[i + 1]
    nf = v.shape[0] - 1 if icpt != 0.0 else v.shape[0]
    unit_i = _is_unit(unit, i)
    acc = _dual_dot(lo, hi, indices, data, v, unit_i, icpt, nf) + off
    delta = _dual_delta(acc, i, y, alpha, loss, lam_n, sigma, damp, colsq, icpt)
    if delta == 0.0:
        return delta
    alpha[i] += delta
    _dual_move(lo, hi, indices, data, v, sigma * delta, unit_i, icpt, nf)
    if track:
        _dual_move(lo, hi, indices, data, d, delta, unit_i, icpt, nf)
    return delta


@njit(inline="always")
def _dual_epoch(indptr, indices, data, y, alpha, v, d, coords, loss, lam_n, sigma, damp, colsq,
                icpt, track, steps, record, unit, off):
    for t in range(coords.shape[0]):
        _prefetch_coords(coords, t, indptr, indices, data, v, alpha, y, colsq, unit)
        i = coords[t]
        delta = _dual_coord(i, indptr, indices, data, y, alpha, v, d, loss, lam_n, sigma, damp,
                            colsq, icpt, track, unit, off)
        if record:
            steps[i] = abs(delta)


@njit(**_FLAGS)
def cd_dual_epoch(indptr, indices, data, y, alpha, v, d, coords, loss, lam_n, sigma, damp,
                  colsq, icpt, track, steps, record, unit, offset=0.0):
    """One sequential SDCA pass over the examples ``coords`` (the shared-vector entries of the
    coming steps prefetched: :func:`_prefetch_coords`).

    ``v = X alpha`` (length ``n_features``, plus one trailing entry for the constant feature
    ``icpt`` when ``icpt != 0``); the primal point is ``w = v / lam_n``.  Each step maximises the
    dual in ``alpha[i]`` exactly (squared, hinge: closed form; logistic: safeguarded Newton to
    convergence in the log-odds).  When ``record`` is set, ``steps[i] = |change of alpha[i]|``.
    ``unit`` is :func:`cd_unit_columns` of the structure, or ``None`` (no example flagged).
    ``offset``: an unregularised intercept ``b`` held fixed, added to every margin (the dual
    at fixed ``b``, whose steps are the plain ones with the margin ``x_i^T w + b``).
    """
    _dual_epoch(indptr, indices, data, y, alpha, v, d, coords, loss, lam_n, sigma, damp, colsq,
                icpt, track, steps, record, unit, offset * lam_n)


@parallel_njit(**_FLAGS)
def cd_dual_epoch_parfor(indptr, indices, data, y, alpha, v, d, coords, loss, lam_n, sigma, damp,
                         colsq, icpt, track, steps, record, unit, offset=0.0):
    """:func:`cd_dual_epoch` compiled as the body of a one-iteration parallel loop, on one
    thread: the same iterates bit for bit, in ~0.8x the time (1M Criteo-like examples, full
    sweep 0.33-0.35 s vs 0.41-0.45 s in interleaved runs: numba generates better code for a
    parfor body).  A parallel launch, so call it only where no other thread may launch one at
    the same time (numba's workqueue layer aborts on concurrent launches)."""
    off = offset * lam_n
    for _ in prange(1):
        _dual_epoch(indptr, indices, data, y, alpha, v, d, coords, loss, lam_n, sigma, damp,
                    colsq, icpt, track, steps, record, unit, off)


@njit(inline="always")
def _splitmix64(s):
    """One step of splitmix64: the new state and a 64-bit random value (the sweeps' shuffles
    draw from a generator seeded by the caller, so a seeded run stays deterministic)."""
    s = s + np.uint64(0x9E3779B97F4A7C15)
    z = s
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return s, z ^ (z >> np.uint64(31))


@njit(**_FLAGS)
def cd_dual_sweeps(indptr, indices, data, y, alpha, v, loss, lam_n, colsq, icpt, unit, order,
                   shrink, max_sweeps, budget, seed, eps, shrinking, offset=0.0):
    """Sequential SDCA sweeps in one call, each over a fresh random order of the active
    examples, until ``max_sweeps`` sweeps or ``budget`` stored values visited (at least one
    sweep), with liblinear's shrinking for the hinge loss.

    ``order`` holds a permutation of the examples whose first ``shrink[0]`` are the active
    ones; ``shrink = [n_active, PGmax_old, PGmin_old]`` is the shrinking state, carried from one
    call to the next (start: ``[n, inf, -inf]``).  For the hinge, a step's projected gradient
    ``PG`` (of the dual in liblinear's form, ``G = y_i x_i^T w - 1``) at a bound of the box
    removes the example from the active set when ``G`` lies beyond the previous sweep's
    extreme ``PGmax_old`` / ``PGmin_old`` (it would not move); a sweep with
    ``max PG - min PG <= eps`` over a shrunk set brings every example back, and over the full
    set ends the call with status 1.  Other losses, and ``shrinking=False``, keep every example
    active.  ``offset``: as in :func:`cd_dual_epoch`.

    Returns
    -------
    (sweeps, status)
        The sweeps made and 1 if the hinge sweeps met ``eps`` on all examples, else 0.
    """
    if loss == HINGE:
        return _hinge_sweeps(indptr, indices, data, y, alpha, v, lam_n, colsq, icpt, unit, order,
                             shrink, max_sweeps, budget, seed, eps, shrinking, offset * lam_n)
    return _smooth_sweeps(indptr, indices, data, y, alpha, v, loss, lam_n, colsq, icpt, unit,
                          order, max_sweeps, budget, seed, offset * lam_n)


@njit(inline="always")
def _shuffle_head(order, n, s):
    """Shuffle ``order[:n]`` in place (Fisher-Yates, splitmix64 from state ``s``); returns the
    new state."""
    for j in range(n - 1, 0, -1):
        s, r = _splitmix64(s)
        k = np.int64(r % np.uint64(j + 1))
        tmp = order[j]
        order[j] = order[k]
        order[k] = tmp
    return s


@njit(**_FLAGS)
def _smooth_sweeps(indptr, indices, data, y, alpha, v, loss, lam_n, colsq, icpt, unit, order,
                   max_sweeps, budget, seed, off):
    """:func:`cd_dual_sweeps` for the losses other than the hinge (every example active)."""
    n = order.shape[0]
    nf = v.shape[0] - 1 if icpt != 0.0 else v.shape[0]
    s = np.uint64(seed)
    work = 0
    sweeps = 0
    while sweeps < max_sweeps and (sweeps == 0 or work < budget):
        s = _shuffle_head(order, n, s)
        for t in range(n):
            i = order[t]
            lo = indptr[i]
            hi = indptr[i + 1]
            unit_i = _is_unit(unit, i)
            acc = _dual_dot(lo, hi, indices, data, v, unit_i, icpt, nf) + off
            work += hi - lo + 1
            delta = _dual_delta(acc, i, y, alpha, loss, lam_n, 1.0, 1.0, colsq, icpt)
            if delta != 0.0:
                alpha[i] += delta
                _dual_move(lo, hi, indices, data, v, delta, unit_i, icpt, nf)
                work += hi - lo
        sweeps += 1
    return sweeps, 0


@njit(**_FLAGS)
def _hinge_sweeps(indptr, indices, data, y, alpha, v, lam_n, colsq, icpt, unit, order, shrink,
                  max_sweeps, budget, seed, eps, shrinking, off):
    """:func:`cd_dual_sweeps` for the hinge: liblinear's ``solve_l2r_l1l2_svc`` step (one
    division, ``beta - G / Q_ii`` clipped to ``[0, 1]``) with its shrinking.  A kernel of its
    own: inside the one kernel of all losses, the logistic's inlined solve spilled the hinge
    loop's state to the stack (~25% of a step)."""
    n = order.shape[0]
    nf = v.shape[0] - 1 if icpt != 0.0 else v.shape[0]
    inv_lam = 1.0 / lam_n
    i2 = icpt * icpt
    n_active = np.int64(shrink[0])
    pgmax_old = shrink[1]
    pgmin_old = shrink[2]
    s = np.uint64(seed)
    work = 0
    sweeps = 0
    status = 0
    while sweeps < max_sweeps and (sweeps == 0 or work < budget):
        s = _shuffle_head(order, n_active, s)
        pgmax_new = -np.inf
        pgmin_new = np.inf
        t = 0
        while t < n_active:
            i = order[t]
            lo = indptr[i]
            hi = indptr[i + 1]
            unit_i = _is_unit(unit, i)
            acc = _dual_dot(lo, hi, indices, data, v, unit_i, icpt, nf) + off
            work += hi - lo + 1
            yi = y[i]
            g = yi * acc * inv_lam - 1.0
            beta = alpha[i] * yi
            if shrinking and ((beta == 0.0 and g > pgmax_old)
                              or (beta == 1.0 and g < pgmin_old)):
                n_active -= 1
                order[t] = order[n_active]
                order[n_active] = i
                continue
            # the projected gradient: zero where the box holds the step back
            pg = g
            if (beta == 0.0 and g > 0.0) or (beta == 1.0 and g < 0.0):
                pg = 0.0
            if pg > pgmax_new:
                pgmax_new = pg
            if pg < pgmin_new:
                pgmin_new = pg
            t += 1
            if pg == 0.0:
                continue
            delta = yi * (_hinge_beta(beta, g, lam_n, colsq[i] + i2) - beta)
            if delta != 0.0:
                alpha[i] += delta
                _dual_move(lo, hi, indices, data, v, delta, unit_i, icpt, nf)
                work += hi - lo
        sweeps += 1
        if pgmax_new - pgmin_new <= eps:
            if n_active == n:
                status = 1
                break
            n_active = n
            pgmax_old = np.inf
            pgmin_old = -np.inf
            continue
        pgmax_old = pgmax_new if pgmax_new > 0.0 else np.inf
        pgmin_old = pgmin_new if pgmin_new < 0.0 else -np.inf
    shrink[0] = n_active
    shrink[1] = pgmax_old
    shrink[2] = pgmin_old
    return sweeps, status


@njit(inline="always")
def _tpa_note(i, a_old, a_new, y, loss, steps, prev, dconj):
    """A TPA step's bookkeeping, each part only where its array is non-empty:
    ``steps[i] = |change|``, ``prev[i]`` = the value before the step (to discard the
    sub-epoch); returns the change of the dual's conjugate term (0 when ``dconj`` is empty),
    which the thread sums in a register and adds to its ``dconj[t]`` at the end (the threads'
    entries share a cache line: one add per step made it bounce between the cores).  The
    example's record line is in cache: this costs no memory traffic, where the same numbers
    gathered afterwards in random order cost a miss per example."""
    if steps.shape[0] != 0:
        steps[i] = abs(a_new - a_old)
    if prev.shape[0] != 0:
        prev[i] = a_old
    if dconj.shape[0] != 0 and a_new != a_old:
        return margin_neg_conj(a_new, y[i], loss) - margin_neg_conj(a_old, y[i], loss)
    return 0.0


@parallel_njit(**_FLAGS)
def cd_dual_tpa(indptr, indices, data, y, alpha, V, coords, bounds, loss, lam_n, damp, colsq,
                icpt, dummy, unit, steps, prev, dconj):
    """TPA-SCD sub-epoch for the dual: thread ``t`` updates examples
    ``coords[bounds[t]:bounds[t+1]]``; ``V`` is one shared row (Hogwild) or one row per thread
    (replicas), as in :func:`cd_primal_tpa`.  ``steps``, ``prev``, ``dconj``: as in
    :func:`_tpa_note`."""
    n_threads = bounds.shape[0] - 1
    shared = V.shape[0] == 1
    for t in prange(n_threads):
        row = np.int64(0) if shared else np.int64(t)
        v = V[row]
        mine = coords[bounds[t]:bounds[t + 1]]
        dc = 0.0
        for k in range(mine.shape[0]):
            _prefetch_coords(mine, k, indptr, indices, data, v, alpha, y, colsq, unit)
            i = mine[k]
            a_old = alpha[i]
            _dual_coord(i, indptr, indices, data, y, alpha, v, dummy, loss, lam_n, 1.0,
                        damp, colsq, icpt, False, unit, 0.0)
            dc += _tpa_note(i, a_old, alpha[i], y, loss, steps, prev, dconj)
        if dconj.shape[0] != 0:
            dconj[t] += dc


@njit(inline="always")
def _hot_publish(v, work, t, nv, n_hot, nf, icpt, refresh):
    """Thread ``t`` adds the changes its replica's hot entries made since its last refresh to
    its change row and, when ``refresh``, brings them up to date: the base value (``v`` is not
    written during the sub-epoch) plus every thread's published changes."""
    rep = work[t]
    hot = n_hot + 1 if icpt != 0.0 else n_hot
    pub = nv
    snap = nv + n_hot + 1
    for s in range(hot):
        j = s if s < n_hot else nf
        work[t, pub + s] += rep[j] - work[t, snap + s]
    if not refresh:
        return
    for s in range(hot):
        j = s if s < n_hot else nf
        x = v[j]
        for r in range(work.shape[0]):
            x += work[r, pub + s]
        rep[j] = x
        work[t, snap + s] = x


@parallel_njit(**_FLAGS)
def cd_dual_tpa_split(indptr, indices, data, y, alpha, v, n_hot, work, coords, bounds,
                      loss, lam_n, damp, colsq, icpt, publish_every, unit, steps, prev, dconj):
    """TPA-SCD sub-epoch for the dual: per-thread replicas of ``v`` whose hot entries are
    kept in sync while the threads run.

    Thread ``t`` updates examples ``coords[bounds[t]:bounds[t+1]]`` against its own replica of
    ``v``, ``work[t, :nv]`` (``nv = len(v)``; filled from ``v`` on entry): a step reads and
    writes only the replica, as a sequential step does ``v``.  The features must be numbered
    hot first: entries ``j < n_hot`` are the hot ones (the features in many examples; the
    constant feature, ``icpt != 0``, counts as hot too).  Every ``publish_every`` of its steps a
    thread adds the changes of its replica's hot entries since its last refresh to its change
    row ``work[t, nv:nv + n_hot + 1]`` (which only it writes and the others read) and refreshes
    them from ``v`` plus every thread's changes (remembering the refreshed values in
    ``work[t, nv + n_hot + 1:]``).  So a thread sees the others' hot changes at most
    ``publish_every`` of its steps late, and their cold ones (features in few examples, ~8% of
    the nonzeros at 1M Criteo-like examples) at the end of the sub-epoch, when all changes are
    summed into ``v``: no update is lost (afterwards ``v = X alpha`` up to rounding).  The
    change rows are zero on entry and left zero.

    Measured at 1M Criteo-like examples, 2 threads, one full sweep: 0.18-0.25 s, against
    0.40-0.50 s for the sequential sweep and 0.25-0.33 s for threads that shared ``v`` (atomic
    adds to its cold entries, a private copy of the hot ones: the hot/cold branches
    mispredicted and the atomics fenced the gathers in flight) or that tracked their hot
    changes at each step (a second write per nonzero).  ``unit``: as in
    :func:`cd_dual_epoch`; ``steps``, ``prev``, ``dconj``: as in :func:`_tpa_note`.
    """
    n_threads = bounds.shape[0] - 1
    nv = v.shape[0]
    nf = nv - 1 if icpt != 0.0 else nv
    snap = nv + n_hot + 1
    hot = n_hot + 1 if icpt != 0.0 else n_hot
    for t in prange(n_threads):
        rep = work[t, :nv]
        for j in range(nv):
            rep[j] = v[j]
        for s in range(hot):  # the values at the "last refresh": the start
            work[t, snap + s] = rep[s if s < n_hot else nf]
        mine = coords[bounds[t]:bounds[t + 1]]
        dc = 0.0
        for k in range(mine.shape[0]):
            _prefetch_coords(mine, k, indptr, indices, data, rep, alpha, y, colsq, unit)
            i = mine[k]
            a_old = alpha[i]
            _dual_coord(i, indptr, indices, data, y, alpha, rep, rep, loss, lam_n, 1.0, damp,
                        colsq, icpt, False, unit, 0.0)
            dc += _tpa_note(i, a_old, alpha[i], y, loss, steps, prev, dconj)
            if (k + 1) % publish_every == 0:
                _hot_publish(v, work, t, nv, n_hot, nf, icpt, True)
        _hot_publish(v, work, t, nv, n_hot, nf, icpt, False)
        if dconj.shape[0] != 0:
            dconj[t] += dc
    # v += the sum of the threads' changes: the hot ones from the change rows, the cold ones
    # from the replicas (which hold v, their own cold changes and everybody's hot ones)
    for c in prange(n_threads):
        for j in range(c * nv // n_threads, (c + 1) * nv // n_threads):
            x = v[j]
            if j < n_hot or (j == nf and icpt != 0.0):
                s = j if j < n_hot else n_hot
                for r in range(n_threads):
                    x += work[r, nv + s]
                    work[r, nv + s] = 0.0
            else:
                base = x
                for r in range(n_threads):
                    x += work[r, j] - base
            v[j] = x


# ---------------------------------------------------------------------------------------------
# Google SCD: pure blocks


@njit(**_FLAGS)
def cd_block_stats(indptr, indices, data, y, z, feats, loss, g, h):
    """Sufficient statistics of the features ``feats`` over one example shard:
    ``g[k] = sum x l'(z)``, ``h[k] = sum x^2 l''(z)`` for feature ``feats[k]`` (accumulated)."""
    for k in range(feats.shape[0]):
        j = feats[k]
        gs = 0.0
        hs = 0.0
        for p in range(indptr[j], indptr[j + 1]):
            i = indices[p]
            d1, d2 = margin_dloss(z[i], y[i], loss)
            x = np.float64(data[p])
            gs += x * d1
            hs += x * x * d2
        g[k] += gs
        h[k] += hs


@njit(**_FLAGS)
def cd_block_steps(w, feats, g, h, l1, lam_n, delta, lam2=0.0):
    """Newton steps (L1: the proximal Newton step; ``lam2``: the elastic net's, as in
    :func:`cd_primal_epoch`) for all features of a pure block from their summed statistics:
    ``delta[k]`` for feature ``feats[k]``; ``w`` is updated in place."""
    for k in range(feats.shape[0]):
        j = feats[k]
        hk = h[k]
        wj = w[j]
        if l1:
            h2 = hk + lam2
            if h2 <= 0.0:
                delta[k] = 0.0
                continue
            t = hk * wj - g[k]
            if t > lam_n:
                new = (t - lam_n) / h2
            elif t < -lam_n:
                new = (t + lam_n) / h2
            else:
                new = 0.0
            delta[k] = new - wj
        else:
            delta[k] = -(g[k] + lam_n * wj) / (hk + lam_n)
        w[j] = wj + delta[k]


@njit(**_FLAGS)
def cd_block_apply(indptr, indices, data, z, feats, delta):
    """Apply a block's steps to one shard's margins: ``z += sum_k delta[k] * x_{feats[k]}``."""
    for k in range(feats.shape[0]):
        dk = delta[k]
        if dk == 0.0:
            continue
        j = feats[k]
        for p in range(indptr[j], indptr[j + 1]):
            z[indices[p]] += dk * data[p]


@njit(**_FLAGS)
def cd_greedy_pure_blocks(indptr, indices, n_examples, order, words):
    """Greedy pure-block assignment of features (feature-major CSC ``indptr``/``indices``):
    in ``order``, each feature joins the lowest block not yet used by any of its examples
    (one bit per block and example, ``64 * words`` blocks at most).

    Returns ``(blocks, n_blocks)``; ``n_blocks = -1`` when ``64 * words`` blocks do not suffice.
    """
    d = indptr.shape[0] - 1
    used = np.zeros((n_examples, words), dtype=np.uint64)
    blocks = np.zeros(d, dtype=np.int64)
    n_blocks = 0
    one = np.uint64(1)
    for t in range(order.shape[0]):
        j = order[t]
        found = -1
        for wd in range(words):
            acc = np.uint64(0)
            for p in range(indptr[j], indptr[j + 1]):
                acc |= used[indices[p], wd]
            if acc != ~np.uint64(0):
                bit = 0
                while (acc >> np.uint64(bit)) & one:
                    bit += 1
                found = wd * 64 + bit
                break
        if found < 0:
            return blocks, -1
        wd = found // 64
        mask = one << np.uint64(found % 64)
        for p in range(indptr[j], indptr[j + 1]):
            used[indices[p], wd] |= mask
        blocks[j] = found
        if found + 1 > n_blocks:
            n_blocks = found + 1
    return blocks, n_blocks
