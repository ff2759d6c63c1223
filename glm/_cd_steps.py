"""Coordinate-descent steps for generalized linear models: the gmat face of ``kernels/_cd.py``.

The CD solvers of :mod:`roofline.learners` call these functions, never the kernels.

Conventions
-----------
* A *coordinate matrix* ``A`` is a CPU CSC matrix whose columns are the coordinates.  The dual
  (coordinates = examples) uses the project layout ``X`` (``n_features x n_examples``) itself;
  the primal (coordinates = features) uses ``feature_major(X)``: ``X^T`` stored as CSC
  (``n_examples x n_features``), column ``j`` = the examples in which feature ``j`` occurs.
* ``loss`` is a code of :data:`roofline.glm.LOSS_CODES` (of a loss of ``CD_LOSSES``):
  ``0`` squared ``(z - y)^2 / 2``, ``1`` logistic ``log(1 + exp(-y z))``, ``2`` hinge
  ``max(0, 1 - y z)``; classifier labels are in ``{-1, +1}`` (the margin form:
  ``check_labels(y, loss, margin=True)``).
* Objectives are *sums*: ``sum_i loss(z_i, y_i) + lam_n * R(w)`` with ``lam_n = n * alpha``
  (``alpha`` the strength of the mean-loss objective, :mod:`roofline.glm`),
  ``R = ||w||^2 / 2`` (``l1=False``) or ``||w||_1`` (``l1=True``).
* ``sigma`` is CoCoA's subproblem scaling (1 for a single solver) and ``damp`` multiplies every
  step (TPA-SCD's damping).  When ``d`` is given it accumulates the caller's own raw changes
  (what a CoCoA worker sends to the others) while the shared vector receives ``sigma`` times
  them.
* State vectors (``w``, ``z``, the dual variables ``a``, ``v``, ``d``) are float64 numpy
  arrays updated in place; accumulations are float64 whatever the dtype of ``A``.

Validation costs O(1) per call (kinds, shapes, codes): the solvers call these functions once
per epoch or per block.  Index values (of ``A``, ``coords``, ``feats``) are trusted: validate
``X`` once with :func:`roofline.gmat.check_csc`.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from roofline import kernels
from roofline.gmat import as_dense, csc_from_arrays, device_of

from ._losses import CD_LOSSES, LOSS_CODES

__all__ = [
    "block_apply",
    "block_stats",
    "block_steps",
    "col_sqnorms",
    "conj_sum",
    "csc_from_dense",
    "dual_epoch",
    "dual_sweeps",
    "dual_tpa",
    "dual_tpa_split",
    "feature_counts",
    "feature_major",
    "free_parts",
    "grad",
    "greedy_pure_blocks",
    "intercept_step",
    "loss_sum",
    "matvec",
    "matvec_t",
    "primal_epoch",
    "primal_tpa",
    "reorder_features",
    "scaled_side_conj",
    "unit_columns",
]

# the codes of the losses the CD kernels implement
_CD_CODES = {LOSS_CODES[name]: name for name in CD_LOSSES}
_NO_TRACK = np.empty(0)  # the kernels' ``d`` when the caller's own changes are not tracked


# ---------------------------------------------------------------------------------------------
# O(1) argument checks


def _coords(A, name="A"):
    """``A`` if it is a CPU CSC matrix with a consistent ``indptr`` length."""
    if not (sp.issparse(A) and A.format == "csc"):
        if device_of(A) == "gpu":
            raise TypeError(f"{name} is on the GPU; the coordinate-descent steps run on the CPU")
        kind = f"{A.format.upper()} " if sp.issparse(A) else ""
        raise TypeError(
            f"{name} must be a scipy.sparse CSC matrix (one column = one coordinate), got "
            f"{kind}{type(A).__name__}"
        )
    if A.indptr.shape[0] != A.shape[1] + 1:
        raise ValueError(
            f"{name}.indptr has length {A.indptr.shape[0]}, expected {A.shape[1] + 1}"
        )
    return A


def _vector(x, n, name):
    """``x`` if it is a 1-D numpy array of length ``n`` (any length when ``n`` is None)."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy array, got {type(x).__name__}")
    if x.ndim != 1 or (n is not None and x.shape[0] != n):
        want = "(n,)" if n is None else f"({n},)"
        raise ValueError(f"{name} must have shape {want}, got {x.shape}")
    return x


def _indices(x, name):
    """``x`` if it is a 1-D numpy array of integers."""
    _vector(x, None, name)
    if x.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integers, got dtype {x.dtype}")
    return x


def _loss(loss):
    """``loss`` if it is the code of one of ``CD_LOSSES`` (names: ``glm.loss_code(name)``)."""
    if isinstance(loss, (bool, str)) or loss not in _CD_CODES:
        raise ValueError(
            f"loss must be a code 0 (squared), 1 (logistic) or 2 (hinge) (from "
            f"roofline.glm.loss_code), got {loss!r}"
        )
    return int(loss)


def _track(d, n, name="d"):
    """The kernels' ``(d, track)`` pair for an optional change accumulator."""
    if d is None:
        return _NO_TRACK, False
    return _vector(d, n, name), True


def _f64_vector(x, n, name, hint=""):
    """``x`` if it is a 1-D float64 numpy array of length ``n`` (the kernels write or read it
    as float64: another dtype would be a wrong answer, not a conversion)."""
    _vector(x, n, name)
    if x.dtype != np.float64:
        raise TypeError(f"{name} must have dtype float64{hint}, got {x.dtype}")
    return x


def _tpa_outputs(steps, prev, dconj, n, n_threads):
    """The TPA kernels' optional ``steps``, ``prev`` (length ``n``) and ``dconj`` (one entry
    per thread) outputs, empty where not asked for."""
    return [_NO_TRACK if x is None else _f64_vector(x, m, name)
            for x, m, name in ((steps, n, "steps"), (prev, n, "prev"),
                               (dconj, n_threads, "dconj"))]


def _threads(S, n, coords, bounds, name):
    """Checks of a TPA sub-epoch's shared rows ``S`` and thread ``bounds``."""
    _indices(bounds, "bounds")
    if bounds.shape[0] < 2 or int(bounds[-1]) > coords.shape[0]:
        raise ValueError(
            f"bounds must hold n_threads + 1 >= 2 offsets into coords (length "
            f"{coords.shape[0]}), got {bounds.shape[0]} ending at "
            f"{int(bounds[-1]) if bounds.shape[0] else None}"
        )
    n_threads = bounds.shape[0] - 1
    if not isinstance(S, np.ndarray) or S.ndim != 2 or S.shape[1] != n:
        raise ValueError(
            f"{name} must be a 2-D array with {n} columns, got "
            f"{getattr(S, 'shape', type(S).__name__)}"
        )
    if S.shape[0] not in (1, n_threads):
        raise ValueError(
            f"{name} must have 1 row (Hogwild) or {n_threads} rows (one replica per thread), "
            f"got {S.shape[0]}"
        )


# ---------------------------------------------------------------------------------------------
# layout and whole-vector maps


def feature_major(X):
    """The primal's coordinate matrix: ``X^T`` as CSC, one column per feature.

    Parameters
    ----------
    X : scipy.sparse CSC matrix, shape (n_features, n_examples)

    Returns
    -------
    A : CSC matrix of the class of ``X``, shape (n_examples, n_features)
        Column ``j`` lists the examples in which feature ``j`` occurs.  It holds exactly the
        (sorted) arrays of ``X.tocsr()``, with no further copy or index-dtype conversion.
    """
    _coords(X, "X")
    Xr = X.tocsr()
    return csc_from_arrays(type(X), Xr.data, Xr.indices, Xr.indptr, (X.shape[1], X.shape[0]))


def csc_from_dense(A):
    """The CSC matrix of a dense 2-D array (its nonzeros; rows sorted within each column).

    ``scipy.sparse.csc_matrix(A)`` gives the same matrix through ``nonzero`` and a COO
    matrix; this takes one pass to count and one to fill (breast cancer's 31 x 569, C order:
    ~0.10 ms against ~0.24 ms, which matters for the dual solvers' millisecond fits of small
    dense data).

    Parameters
    ----------
    A : ndarray of float32 or float64, shape (m, n)
        Any memory order (Fortran order, one column per example, reads contiguously).

    Returns
    -------
    scipy.sparse.csc_matrix of A's dtype, shape (m, n)
        int32 indices and pointers (int64 from 2^31 nonzeros), as scipy's own conversion.
    """
    A = as_dense(A, "A", ndim=(2,))
    if not isinstance(A, np.ndarray):
        raise TypeError(f"A must be a numpy array (CPU), got {type(A).__name__}")
    counts = kernels.cd_dense_counts(A, np.empty(A.shape[1], dtype=np.int64))
    nnz = int(counts.sum())
    idx = np.int32 if max(nnz, A.shape[0]) < 2**31 else np.int64
    indptr = np.zeros(A.shape[1] + 1, dtype=idx)
    np.cumsum(counts, out=indptr[1:])
    indices = np.empty(nnz, dtype=idx)
    data = np.empty(nnz, dtype=A.dtype)
    kernels.cd_dense_fill(A, indptr, indices, data)
    return csc_from_arrays(sp.csc_matrix, data, indices, indptr, A.shape)


def feature_counts(X):
    """How many examples hold each feature: ``counts[j]`` = the stored values of row ``j``.

    Parameters
    ----------
    X : scipy.sparse CSC matrix, shape (n_features, n_examples)

    Returns
    -------
    counts : ndarray of int32 (int64 from 2^31 stored values), shape (n_features,)
    """
    _coords(X, "X")
    dtype = np.int32 if X.nnz < 2**31 else np.int64  # int32: half the random writes' lines
    return kernels.cd_feature_counts(X.indices, np.zeros(X.shape[0], dtype=dtype))


def reorder_features(X, counts=None):
    """Renumber the features of ``X`` by decreasing frequency (number of examples holding them).

    On power-law data a few thousand features carry most nonzeros; numbered first, their entries
    of the dual's shared vector ``v`` pack into a few contiguous cache lines instead of one line
    each across the whole vector (the dual epoch runs ~1.2-1.4x faster at 1M Criteo-like
    examples), and :func:`dual_tpa_split` can tell a hot feature by its number alone.  The
    order of the nonzeros inside each column is kept, so every sum over a column runs in the
    same order: a solver gives bit-identical margins on the reordered matrix.

    Parameters
    ----------
    X : scipy.sparse CSC matrix, shape (n_features, n_examples)
    counts : ndarray of int, shape (n_features,), optional
        :func:`feature_counts` of ``X``, when the caller has them.

    Returns
    -------
    B : CSC matrix of the class of ``X``
        ``B[k, i] = X[order[k], i]``; it shares ``data`` and ``indptr`` with ``X`` and holds a new
        ``indices`` array (one more copy of the structure's indices).
    order : ndarray of int64, shape (n_features,)
        ``order[k]`` is the original number of new feature ``k`` (so a model ``w_B`` on ``B``
        is ``w[order] = w_B`` on ``X``).
    counts : ndarray of int64, shape (n_features,)
        The number of nonzeros of new feature ``k``, non-increasing.
    """
    _coords(X, "X")
    n = X.shape[0]
    if counts is None:
        counts = feature_counts(X)
    else:
        _vector(counts, n, "counts")
    order, counts = kernels.cd_frequency_order(counts)
    newid = np.empty(n, dtype=X.indices.dtype)
    newid[order] = np.arange(n, dtype=X.indices.dtype)
    indices = kernels.cd_remap_indices(X.indices, newid, np.empty_like(X.indices))
    B = csc_from_arrays(type(X), X.data, indices, X.indptr, X.shape)
    return B, order, counts


def col_sqnorms(A, out=None, *, parallel=True):
    """Squared norms of the coordinates: ``out[j] = ||A[:, j]||^2``.

    Parameters
    ----------
    A : CSC matrix, shape (m, n_coords)
    out : ndarray of float64, shape (n_coords,), optional
    parallel : bool
        Columns in parallel (the same sums), from 2^17 stored values (a parallel launch costs
        ~0.1 ms).  ``False`` runs on the calling thread, as for :func:`matvec`.

    Returns
    -------
    out : ndarray of float64, shape (n_coords,)
    """
    _coords(A)
    out = np.empty(A.shape[1]) if out is None else _vector(out, A.shape[1], "out")
    kernel = (kernels.cd_col_sqnorms if parallel and A.nnz >= _PARFOR_MIN_VALUES
              else kernels.cd_col_sqnorms_serial)
    return kernel(A.indptr, A.data, out)


def unit_columns(A, out=None):
    """Flags of the coordinates whose stored values are all exactly one.

    One-hot and hashed categorical data (Criteo-like) store ones almost everywhere; the dual
    sweeps (:func:`dual_epoch`, :func:`dual_tpa`, :func:`dual_tpa_split`) given these
    flags sum such an example's features without reading its values: the same result bit for
    bit, one memory stream fewer per step (dual sweeps ~1.2x faster at 1M Criteo-like examples).

    The flags are float64 so that they can sit in the per-example record array whose other
    columns are ``a``, ``y``, ``colsq`` and ``steps`` (pass ``out=rec[:, 4]``): a sweep then
    finds an example's flag in the cache line it fetches anyway (a separate flag array cost
    ~30% of a sweep at 1M examples, its random reads missing the cache).

    Parameters
    ----------
    A : CSC matrix, shape (m, n_coords)
    out : ndarray of float64, shape (n_coords,), optional
        May be strided.

    Returns
    -------
    out : ndarray of float64, shape (n_coords,)
        ``1.0`` where every stored value of the column is ``1.0`` (an empty column included),
        else ``0.0``.
    """
    _coords(A)
    out = np.empty(A.shape[1]) if out is None else _f64_vector(out, A.shape[1], "out")
    kernel = (kernels.cd_unit_columns if A.nnz >= _PARFOR_MIN_VALUES
              else kernels.cd_unit_columns_serial)
    kernel(A.indptr, A.data, out)
    return out


def _unit(unit, n):
    """The kernels' ``unit`` argument: the caller's flags (checked), or ``None``, for which
    the kernels are compiled without the flagged examples' loops: callers whose flags are
    all zero pass ``None`` (decided once, not scanned here at every call)."""
    if unit is None:
        return None
    return _f64_vector(unit, n, "unit", " (unit_columns)")


def matvec(A, x, out=None, offset=0.0, *, parallel=True, unit=None):
    """``out = A^T x + offset`` (the margins ``X^T w + b`` for the project layout).

    Parameters
    ----------
    A : CSC matrix, shape (m, n)
    x : ndarray, shape (m,)
    out : ndarray of float64, shape (n,), optional
        Overwritten.
    offset : float
        Added to every entry.
    parallel : bool
        Parallel over the columns, from 2^17 stored values (smaller matrices run serially: a
        launch costs ~0.1 ms).  ``False`` runs on the calling thread: callers that are
        threads themselves (CoCoA workers, a prefetching pipeline) must pass it, as numba's
        workqueue layer does not allow concurrent parallel launches.
    unit : ndarray of float64, shape (n,), optional
        :func:`unit_columns` of ``A``: the flagged columns' values (all ones) are not read
        (the same sums; hashed data: ~1.6x faster).

    Returns
    -------
    out : ndarray of float64, shape (n,)
    """
    _coords(A)
    _vector(x, A.shape[0], "x")
    out = np.empty(A.shape[1]) if out is None else _vector(out, A.shape[1], "out")
    # a parallel launch costs ~0.1 ms: worth it on large matrices only
    kernel = (kernels.cd_matvec if parallel and A.nnz >= _PARFOR_MIN_VALUES
              else kernels.cd_matvec_serial)
    return kernel(A.indptr, A.indices, A.data, _unit(unit, A.shape[1]), x, out, float(offset))


def matvec_t(A, a, out, *, unit=None):
    """``out += A a`` (``X a`` for the project layout); accumulates into ``out``.

    Parameters
    ----------
    A : CSC matrix, shape (m, n)
    a : ndarray, shape (n,)
    out : ndarray of float64, shape (m,)
    unit : ndarray of float64, shape (n,), optional
        As for :func:`matvec`.

    Returns
    -------
    out : ndarray of float64, shape (m,)
    """
    _coords(A)
    _vector(a, A.shape[1], "a")
    _vector(out, A.shape[0], "out")
    return kernels.cd_matvec_t(A.indptr, A.indices, A.data, _unit(unit, A.shape[1]), a, out)


def loss_sum(z, y, loss):
    """``sum_i loss(z_i, y_i)``.

    Parameters
    ----------
    z, y : ndarray of float64, shape (n,)
        Margins and labels.
    loss : {0, 1, 2}

    Returns
    -------
    float
    """
    _vector(y, _vector(z, None, "z").shape[0], "y")
    return kernels.cd_loss_sum(z, y, _loss(loss))


def free_parts(z, scale, shift, a, y, loss):
    """The per-example pass of a check of the dual with an unregularised intercept: the
    margins ``z = z * scale + shift`` in place, with the loss and conjugate sums and the
    balanced point's statistics (:func:`roofline.kernels.cd_free_parts`).

    Parameters
    ----------
    z : ndarray of float64, shape (n,)
        ``X^T v`` (rescaled in place to the margins).
    scale, shift : float
        ``z * scale + shift`` are the margins.
    a, y : ndarray of float64, shape (n,)
        Dual variables and labels (strided views allowed).
    loss : {0, 1, 2}

    Returns
    -------
    ndarray of float64, shape (12,)
        ``[sum loss(z_i, y_i), C_pos, C_neg, C_zero, sum a, sum of the positive a_i, sum of
        the negative a_i, min y_i a_i, T1_pos, T2_pos, T1_neg, T2_neg]``, ``C_*`` the sums of
        ``-loss*(-a_i; y_i)`` over the examples whose ``a_i`` is positive, negative, zero;
        ``T*`` (the logistic; NaN for the other losses) those of ``beta H'(beta)`` and
        ``beta / (1 - beta)``, ``beta = y_i a_i``, ``H`` the conjugate (the entropy).
    """
    n = _vector(z, None, "z").shape[0]
    _vector(a, n, "a")
    _vector(y, n, "y")
    return kernels.cd_free_parts(z, float(scale), float(shift), a, y, _loss(loss),
                                 np.empty(12))


def scaled_side_conj(a, y, loss, theta, sign, idx, idx_side, gathered):
    """``sum -loss*(-(1 - theta) a_i; y_i)`` over the examples with ``sign a_i > 0``, and
    ``gathered = a[idx]`` (:func:`roofline.kernels.cd_scaled_side_conj`).

    Parameters
    ----------
    a, y : ndarray of float64, shape (n,)
        Dual variables and labels (strided views allowed).
    loss : {0, 1, 2}
    theta : float
        The scaling of the side.
    sign : float
        +1 or -1, the sign of the side's ``a_i``.
    idx : ndarray of int
        Examples whose ``a_i`` are gathered.
    idx_side : bool
        Every example with ``sign a_i > 0`` is in ``idx`` (only ``idx`` is then read).
    gathered : ndarray of float64, shape (len(idx),)
        Receives ``a[idx]``.

    Returns
    -------
    float
    """
    n = _vector(a, None, "a").shape[0]
    _vector(y, n, "y")
    _indices(idx, "idx")
    _vector(gathered, idx.shape[0], "gathered")
    if sign not in (1.0, -1.0):
        raise ValueError(f"sign must be 1 or -1, got {sign!r}")
    return kernels.cd_scaled_side_conj(a, y, _loss(loss), float(theta), float(sign), idx,
                                       bool(idx_side), gathered)


def conj_sum(a, y, loss):
    """``sum_i -loss*(-a_i; y_i)``, the dual objective's loss part.

    Parameters
    ----------
    a, y : ndarray of float64, shape (n,)
        Dual variables and labels.
    loss : {0, 1, 2}

    Returns
    -------
    float
        ``-inf`` when some ``a_i`` lies outside the conjugate's domain.
    """
    _vector(y, _vector(a, None, "a").shape[0], "y")
    return kernels.cd_conj_sum(a, y, _loss(loss))


def grad(z, y, loss, out=None):
    """The dual point ``out_i = -loss'(z_i)`` of margins ``z``, and the intercept's gradient
    and curvature sums.

    Parameters
    ----------
    z, y : ndarray of float64, shape (n,)
    loss : {0, 1, 2}
        The hinge loss gives a subgradient and zero curvature.
    out : ndarray of float64, shape (n,), optional

    Returns
    -------
    out : ndarray of float64, shape (n,)
    g, h : float
        ``sum_i loss'(z_i)`` and ``sum_i loss''(z_i)``.
    """
    n = _vector(z, None, "z").shape[0]
    _vector(y, n, "y")
    out = np.empty(n) if out is None else _vector(out, n, "out")
    g, h = kernels.cd_grad(z, y, _loss(loss), out)
    return out, g, h


# ---------------------------------------------------------------------------------------------
# primal coordinate steps (coordinates = features)


def _lam2(lam2, l1):
    """The elastic net's L2 strength checked: a finite number ``>= 0``, only with ``l1``."""
    lam2 = float(lam2)
    if not (math.isfinite(lam2) and lam2 >= 0.0):
        raise ValueError(f"lam2 must be a finite number >= 0, got {lam2!r}")
    if lam2 and not l1:
        raise ValueError("lam2 (the elastic net's L2 part) needs l1=True (with l1=False, lam_n "
                         "is the L2 strength)")
    return lam2


def primal_epoch(A, y, w, z, coords, *, loss, l1, lam_n, colsq, sigma=1.0, damp=1.0,
                    d=None, lam2=0.0):
    """One sequential pass of primal coordinate descent over ``coords``, in that order.

    Each step minimises the objective in ``w[j]`` with the others fixed (squared loss: exactly;
    logistic: one Newton step, as Snap ML does; l1: the proximal step), and keeps the margins
    ``z = A w (+ intercept)`` in sync at the cost of the column's nonzeros.

    Parameters
    ----------
    A : CSC matrix, shape (n_examples, n_features)
        The feature-major coordinate matrix (:func:`feature_major`).
    y : ndarray of float64, shape (n_examples,)
    w : ndarray of float64, shape (n_features,)
        Updated in place.
    z : ndarray of float64, shape (n_examples,)
        Margins, updated in place (by ``sigma`` times each step).
    coords : ndarray of int, shape (n_steps,)
        The features to visit (repeats allowed).
    loss : {0, 1, 2}
    l1 : bool
    lam_n : float
    colsq : ndarray of float64, shape (n_features,)
        :func:`col_sqnorms` of ``A`` (used by the squared loss).
    sigma, damp : float
    d : ndarray of float64, shape (n_examples,), optional
        Accumulates the raw margin changes.
    lam2 : float, default 0
        With ``l1``: the elastic net's ``lam2 * ||w||^2 / 2`` added to ``lam_n * ||w||_1`` (the
        step is the closed-form prox ``soft(h w - g, lam_n) / (h + lam2)``).
    """
    _coords(A)
    n, m = A.shape
    _vector(y, n, "y")
    _vector(w, m, "w")
    _vector(z, n, "z")
    _indices(coords, "coords")
    _vector(colsq, m, "colsq")
    d, track = _track(d, n)
    kernels.cd_primal_epoch(A.indptr, A.indices, A.data, y, w, z, d, coords, _loss(loss),
                            bool(l1), float(lam_n), float(sigma), float(damp), colsq, track,
                            _lam2(lam2, l1))


def primal_tpa(A, y, w, Z, coords, bounds, *, loss, l1, lam_n, colsq, damp=1.0, lam2=0.0):
    """A TPA-SCD sub-epoch of the primal on CPU threads, without synchronisation.

    Thread ``t`` updates the features ``coords[bounds[t]:bounds[t + 1]]`` (disjoint sets).

    Parameters
    ----------
    A, y, w, coords, loss, l1, lam_n, colsq, damp, lam2
        As in :func:`primal_epoch` (``sigma = 1``).
    Z : ndarray of float64, shape (1, n_examples) or (n_threads, n_examples)
        One row: Hogwild, every thread adds into the one shared margin vector (updates may be
        lost where threads collide; re-synchronise after).  One row per thread: each thread
        works against its own replica; the caller merges them.
    bounds : ndarray of int64, shape (n_threads + 1,)
    """
    _coords(A)
    n, m = A.shape
    _vector(y, n, "y")
    _vector(w, m, "w")
    _indices(coords, "coords")
    _threads(Z, n, coords, bounds, "Z")
    _vector(colsq, m, "colsq")
    kernels.cd_primal_tpa(A.indptr, A.indices, A.data, y, w, Z, coords, bounds, _loss(loss),
                          bool(l1), float(lam_n), float(damp), colsq, _NO_TRACK,
                          _lam2(lam2, l1))


def intercept_step(y, z, b, *, loss, sigma=1.0, damp=1.0, d=None):
    """One Newton step (exact for the squared loss) on an unregularised intercept.

    Parameters
    ----------
    y, z : ndarray of float64, shape (n,)
        ``z`` is updated in place (by ``sigma`` times the step).
    b : float
        The current intercept.
    loss : {0, 1, 2}
    sigma, damp : float
    d : ndarray of float64, shape (n,), optional
        Accumulates the raw margin changes.

    Returns
    -------
    float
        The new intercept (``b`` unchanged where the curvature vanishes).
    """
    n = _vector(z, None, "z").shape[0]
    _vector(y, n, "y")
    d, track = _track(d, n)
    return kernels.cd_intercept_step(y, z, d, float(b), _loss(loss), float(sigma), float(damp),
                                     track)


# ---------------------------------------------------------------------------------------------
# dual coordinate steps (coordinates = examples, SDCA)


#: Stored values a dual pass must visit before :func:`dual_epoch` runs it as a parfor body:
#: the launch costs ~0.1 ms, more than a 569-example pass (measured 148 us a call against
#: ~20 us for the plain kernel on breast cancer's partial sweeps).
_PARFOR_MIN_VALUES = 1 << 17


def _dual_len(A, icpt):
    return A.shape[0] + (1 if float(icpt) != 0.0 else 0)


def _dual_checks(A, y, a, v, coords, colsq, icpt):
    """The argument checks shared by the dual sweeps; returns ``len(v)``."""
    _coords(A)
    n = A.shape[1]
    nv = _dual_len(A, icpt)
    _vector(y, n, "y")
    _vector(a, n, "a")
    _vector(v, nv, "v")
    _indices(coords, "coords")
    _vector(colsq, n, "colsq")
    return nv


def dual_epoch(A, y, a, v, coords, *, loss, lam_n, colsq, icpt=0.0, sigma=1.0,
                  damp=1.0, d=None, steps=None, unit=None, parallel=True, offset=0.0):
    """One sequential SDCA pass over the examples ``coords``, in that order.

    Each step maximises the dual in ``a[i]`` exactly (squared, hinge: closed form;
    logistic: safeguarded Newton in the log-odds) and keeps ``v = A a`` in sync; the primal
    point is ``w = v / lam_n``.

    Parameters
    ----------
    A : CSC matrix, shape (n_features, n_examples)
        The project layout ``X``.
    y : ndarray of float64, shape (n_examples,)
    a : ndarray of float64, shape (n_examples,)
        Dual variables, updated in place.
    v : ndarray of float64, shape (n_features,) or (n_features + 1,)
        ``A a``, with a trailing entry ``icpt * sum(a)`` when ``icpt != 0``; updated in
        place (by ``sigma`` times each step).
    coords : ndarray of int, shape (n_steps,)
        The examples to visit (repeats allowed).
    loss : {0, 1, 2}
    lam_n : float
    colsq : ndarray of float64, shape (n_examples,)
        :func:`col_sqnorms` of ``A``.
    icpt : float
        Value of the constant feature (0: none); its weight is regularised.
    sigma, damp : float
    d : ndarray of float64, shape of ``v``, optional
        Accumulates the raw changes of ``v``.
    steps : ndarray of float64, shape (n_examples,), optional
        ``steps[i]`` is set to ``|change of a[i]|`` at each visit of example ``i`` (what
        the solvers' active sweeps rank the examples by).
    unit : ndarray of float64, shape (n_examples,), optional
        :func:`unit_columns` of ``A``: flagged examples are summed without reading their
        values (which must then all be one: the flags are trusted, as ``colsq`` is).
    parallel : bool
        Run the pass as the body of a one-iteration numba parallel loop (still on one thread,
        the same iterates bit for bit): numba generates faster code for it (full sweep at 1M
        Criteo-like examples ~0.8x the time), when the pass visits at least 2^17 stored values
        (the launch costs ~0.1 ms; shorter passes run the plain kernel).  ``False`` makes no
        parallel launch: callers that are threads themselves (CoCoA workers, a prefetching
        pipeline) must pass it, as for :func:`matvec`.
    offset : float
        An unregularised intercept ``b``, held fixed during the pass: every margin is
        ``x_i^T w + b`` (the dual of the problem at that ``b``; 0: none).

    Notes
    -----
    ``a``, ``y``, ``colsq``, ``steps`` and ``unit`` may be strided views, best the columns
    of one cache-line-aligned ``(n_examples, 8)`` record array (:func:`roofline.gmat.empty`):
    a step then finds its example's whole state in one cache line (dual sweeps in random order
    ~1.25x faster at 1M examples than with five separate arrays).
    """
    nv = _dual_checks(A, y, a, v, coords, colsq, icpt)
    d, track = _track(d, nv)
    steps, record = _track(steps, A.shape[1], "steps")
    # the parfor body's better code pays for its launch (~0.1 ms) only on long passes
    long_pass = coords.shape[0] * A.nnz >= _PARFOR_MIN_VALUES * max(A.shape[1], 1)
    kernel = kernels.cd_dual_epoch_parfor if parallel and long_pass else kernels.cd_dual_epoch
    kernel(A.indptr, A.indices, A.data, y, a, v, d, coords, _loss(loss), float(lam_n),
           float(sigma), float(damp), colsq, float(icpt), track, steps, record,
           _unit(unit, A.shape[1]), float(offset))


def dual_sweeps(A, y, a, v, order, shrink, *, loss, lam_n, colsq, icpt=0.0, unit=None,
                max_sweeps, budget, seed, eps=0.1, shrinking=True, offset=0.0):
    """Sequential SDCA sweeps in one call (the sweeps of small problems, where a call per sweep
    would cost more than the sweep), each over a fresh random order of the active examples,
    with liblinear's shrinking for the hinge loss.

    Sweeps run until ``max_sweeps`` of them, or until they have read ``budget`` stored values
    (at least one sweep).  Each step is :func:`dual_epoch`'s (``sigma = damp = 1``), except that
    a hinge step whose projected gradient is zero is skipped, as liblinear does.

    Parameters
    ----------
    A, y, a, v, loss, lam_n, colsq, icpt, unit
        As in :func:`dual_epoch`; ``a`` and ``v`` are updated in place.
    order : ndarray of int64, shape (n_examples,)
        A permutation of the examples whose first ``shrink[0]`` are the active ones (hinge);
        reordered in place.  Start from ``np.arange(n_examples)``.
    shrink : ndarray of float64, shape (3,)
        ``[n_active, PGmax_old, PGmin_old]``, updated in place and passed to the next call.
        Start from ``[n_examples, inf, -inf]``.
    max_sweeps : int
        At least 1.
    budget : int
        Stored values to read before the call returns.
    seed : int
        Seed of the shuffles (``0 <= seed < 2**63``).
    eps : float
        For the hinge: a sweep whose projected gradients span at most ``eps`` brings the
        shrunk examples back, or, over all examples, ends the call (liblinear's stopping rule;
        its default is 0.1).
    shrinking : bool
        ``False`` keeps every example in the sweeps (the hinge's ``eps`` test still applies).
    offset : float
        As in :func:`dual_epoch`.

    Returns
    -------
    sweeps : int
        The sweeps made.
    met_eps : bool
        Whether the hinge sweeps met ``eps`` over all examples.
    """
    _dual_checks(A, y, a, v, order, colsq, icpt)
    n = A.shape[1]
    if order.shape[0] != n or order.dtype != np.int64:
        raise ValueError(f"order must be an int64 permutation of the {n} examples")
    _f64_vector(shrink, 3, "shrink")
    if not 0 <= shrink[0] <= n:
        raise ValueError(f"shrink[0] (active examples) must be in [0, {n}], got {shrink[0]}")
    if int(max_sweeps) < 1:
        raise ValueError(f"max_sweeps must be >= 1, got {max_sweeps}")
    if not 0 <= int(seed) < 1 << 63:
        raise ValueError(f"seed must be in [0, 2**63), got {seed}")
    sweeps, status = kernels.cd_dual_sweeps(
        A.indptr, A.indices, A.data, y, a, v, _loss(loss), float(lam_n), colsq, float(icpt),
        _unit(unit, n), order, shrink, int(max_sweeps), int(budget), int(seed), float(eps),
        bool(shrinking), float(offset))
    return int(sweeps), bool(status)


def dual_tpa(A, y, a, V, coords, bounds, *, loss, lam_n, colsq, icpt=0.0, damp=1.0,
                unit=None, steps=None, prev=None, dconj=None):
    """A TPA-SCD sub-epoch of the dual on CPU threads, without synchronisation.

    Thread ``t`` updates the examples ``coords[bounds[t]:bounds[t + 1]]`` (disjoint sets).

    Parameters
    ----------
    A, y, a, coords, loss, lam_n, colsq, icpt, damp, unit
        As in :func:`dual_epoch` (``sigma = 1``).
    V : ndarray of float64, shape (1, len(v)) or (n_threads, len(v))
        One shared row (Hogwild) or one replica per thread, as in :func:`primal_tpa`.
    bounds : ndarray of int64, shape (n_threads + 1,)
    steps : ndarray of float64, shape (n_examples,), optional
        ``steps[i]`` is set to ``|change of a[i]|`` at each visit of example ``i``.
    prev : ndarray of float64, shape (n_examples,), optional
        ``prev[i]`` is set to ``a[i]`` before each visit (``a[coords] = prev[coords]``
        then discards the sub-epoch's steps).
    dconj : ndarray of float64, shape (n_threads,), optional
        Accumulates thread ``t``'s change of ``conj_sum(a, y, loss)`` (the dual's
        conjugate term) in ``dconj[t]``: the sub-epoch's new dual objective without a pass over
        its examples.  ``steps`` and ``prev`` may be strided views (columns of the solver's
        per-example records): these numbers are written from the cache line the step already
        holds, where gathering them afterwards costs a cache miss per example.
    """
    _coords(A)
    n = A.shape[1]
    _vector(y, n, "y")
    _vector(a, n, "a")
    _indices(coords, "coords")
    _threads(V, _dual_len(A, icpt), coords, bounds, "V")
    _vector(colsq, n, "colsq")
    out = _tpa_outputs(steps, prev, dconj, n, bounds.shape[0] - 1)
    kernels.cd_dual_tpa(A.indptr, A.indices, A.data, y, a, V, coords, bounds, _loss(loss),
                        float(lam_n), float(damp), colsq, float(icpt), _NO_TRACK,
                        _unit(unit, n), *out)


def dual_tpa_split(A, y, a, v, coords, bounds, *, n_hot, loss, lam_n, colsq, icpt=0.0,
                      damp=1.0, publish_every=256, work=None, unit=None, steps=None, prev=None,
                      dconj=None):
    """A TPA-SCD sub-epoch of the dual whose threads never write the hot entries of ``v``.

    Thread ``t`` updates the examples ``coords[bounds[t]:bounds[t + 1]]`` against its own
    replica of ``v``.  The ``n_hot`` hot features (features ``0 .. n_hot - 1``: number them by
    frequency first, :func:`reorder_features`) and the constant feature are kept in sync:
    each thread refreshes its replica's hot entries with every thread's changes every
    ``publish_every`` of its steps; the cold ones see the other threads' changes at the end of
    the sub-epoch, when all changes are summed into ``v``.  No update is lost (afterwards
    ``v = A a`` up to rounding), and no cache line is written by two cores while the
    threads run.

    Parameters
    ----------
    A, y, a, coords, loss, lam_n, colsq, icpt, damp, unit
        As in :func:`dual_epoch` (``sigma = 1``).
    v : ndarray of float64, shape (len(v),)
        The shared vector (``A a`` with the constant feature's entry), updated in place.
    bounds : ndarray of int64, shape (n_threads + 1,)
    n_hot : int
        Number of hot features, ``0 <= n_hot <= A.shape[0]``.
    publish_every : int
        Steps between two refreshes of a thread's copy of the hot entries (the most its view of
        the others' hot changes lags).
    work : ndarray of float64, shape (n_threads, len(v) + 2 * n_hot + 2), optional
        Scratch: row ``t`` holds thread ``t``'s replica of ``v`` (overwritten), its published
        changes of the hot entries (zero on entry, left zero: reuse the array across calls)
        and their values at its last refresh (overwritten).
    steps, prev, dconj : ndarray of float64, optional
        As in :func:`dual_tpa`.

    Returns
    -------
    work : ndarray
        The scratch, for the next call.
    """
    _dual_checks(A, y, a, v, coords, colsq, icpt)
    _threads(v.reshape(1, -1), v.shape[0], coords, bounds, "v")
    n_threads = bounds.shape[0] - 1
    if isinstance(n_hot, bool) or int(n_hot) != n_hot or not 0 <= n_hot <= A.shape[0]:
        raise ValueError(f"n_hot must be an integer in [0, {A.shape[0]}], got {n_hot!r}")
    n_hot = int(n_hot)
    if isinstance(publish_every, bool) or int(publish_every) != publish_every or publish_every < 1:
        raise ValueError(f"publish_every must be a positive integer, got {publish_every!r}")
    shape = (n_threads, v.shape[0] + 2 * n_hot + 2)
    if work is None:
        work = np.zeros(shape)
    elif not isinstance(work, np.ndarray) or work.shape != shape or work.dtype != np.float64:
        raise ValueError(f"work must be a float64 array of shape {shape}, got "
                         f"{getattr(work, 'shape', type(work).__name__)}")
    out = _tpa_outputs(steps, prev, dconj, A.shape[1], n_threads)
    kernels.cd_dual_tpa_split(A.indptr, A.indices, A.data, y, a, v, n_hot, work, coords,
                              bounds, _loss(loss), float(lam_n), float(damp), colsq, float(icpt),
                              int(publish_every), _unit(unit, A.shape[1]), *out)
    return work


# ---------------------------------------------------------------------------------------------
# Google SCD: pure blocks


def block_stats(A, y, z, feats, g, h, *, loss):
    """Sufficient statistics of a block of features over one example shard (accumulated).

    ``g[k] += sum_i x_ij loss'(z_i)`` and ``h[k] += sum_i x_ij^2 loss''(z_i)`` for
    ``j = feats[k]``.

    Parameters
    ----------
    A : CSC matrix, shape (n_examples, n_features)
        The shard's feature-major coordinate matrix.
    y, z : ndarray of float64, shape (n_examples,)
    feats : ndarray of int, shape (m,)
    g, h : ndarray of float64, shape (m,)
    loss : {0, 1, 2}
        The hinge loss gives subgradients and zero curvature.
    """
    _coords(A)
    n = A.shape[0]
    _vector(y, n, "y")
    _vector(z, n, "z")
    m = _indices(feats, "feats").shape[0]
    _vector(g, m, "g")
    _vector(h, m, "h")
    kernels.cd_block_stats(A.indptr, A.indices, A.data, y, z, feats, _loss(loss), g, h)


def block_steps(w, feats, g, h, delta, *, l1, lam_n, lam2=0.0):
    """Newton steps (l1: proximal Newton steps) for the features of a pure block, from their
    summed statistics (:func:`block_stats`).

    Parameters
    ----------
    w : ndarray of float64, shape (n_features,)
        Updated in place.
    feats : ndarray of int, shape (m,)
    g, h : ndarray of float64, shape (m,)
    delta : ndarray of float64, shape (m,)
        Receives the step of feature ``feats[k]``.
    l1 : bool
    lam_n : float
    lam2 : float, default 0
        As in :func:`primal_epoch`.
    """
    _vector(w, None, "w")
    m = _indices(feats, "feats").shape[0]
    _vector(g, m, "g")
    _vector(h, m, "h")
    _vector(delta, m, "delta")
    kernels.cd_block_steps(w, feats, g, h, bool(l1), float(lam_n), delta, _lam2(lam2, l1))


def block_apply(A, z, feats, delta):
    """Apply a block's steps to one shard's margins: ``z += sum_k delta[k] * A[:, feats[k]]``.

    Parameters
    ----------
    A : CSC matrix, shape (n_examples, n_features)
    z : ndarray of float64, shape (n_examples,)
    feats : ndarray of int, shape (m,)
    delta : ndarray of float64, shape (m,)
    """
    _coords(A)
    _vector(z, A.shape[0], "z")
    m = _indices(feats, "feats").shape[0]
    _vector(delta, m, "delta")
    kernels.cd_block_apply(A.indptr, A.indices, A.data, z, feats, delta)


def greedy_pure_blocks(A, order, words):
    """Greedy pure-block assignment of the features.

    In ``order``, each feature joins the lowest block not yet used by any of its examples, so
    no example has two nonzeros in one block.

    Parameters
    ----------
    A : CSC matrix, shape (n_examples, n_features)
        The feature-major coordinate matrix (:func:`feature_major`).
    order : ndarray of int, shape (n_features,)
    words : int
        64-bit words of block flags per example: at most ``64 * words`` blocks.

    Returns
    -------
    blocks : ndarray of int64, shape (n_features,)
        The block of every feature.
    n_blocks : int
        Blocks used; ``-1`` when ``64 * words`` blocks do not suffice.
    """
    _coords(A)
    _indices(order, "order")
    if isinstance(words, bool) or not isinstance(words, (int, np.integer)) or words < 1:
        raise ValueError(f"words must be a positive integer, got {words!r}")
    blocks, n_blocks = kernels.cd_greedy_pure_blocks(A.indptr, A.indices, A.shape[0], order,
                                                     int(words))
    return blocks, int(n_blocks)
