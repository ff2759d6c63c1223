"""Power-law (Zipf) random sparse matrices: the data the primitives are rooflined on."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ._arrays import csc_from_arrays

__all__ = ["powerlaw_csc"]


def powerlaw_csc(
    n_features: int,
    n_examples: int,
    nnz_per_example: float = 40.0,
    *,
    feature_exponent: float = 1.0,
    length_exponent: float = 2.5,
    permute_features: bool = True,
    dtype=np.float32,
    index_dtype=np.int32,
    random_state=None,
) -> sp.csc_matrix:
    """A random ``n_features x n_examples`` CSC matrix with power-law rows and columns.

    Feature ``r`` (by popularity rank) appears with probability proportional to
    ``(r + 1) ** -feature_exponent`` (Zipf), and the number of nonzeros of each example follows a
    discrete Pareto law with tail exponent ``length_exponent`` scaled to the requested mean, as
    in click logs and text.  Duplicate features within an example are merged, so the realised
    mean is slightly below ``nnz_per_example``; column lengths are capped at
    ``50 * nnz_per_example``.

    Parameters
    ----------
    n_features, n_examples : int
    nnz_per_example : float
        Target mean nonzeros per column.
    feature_exponent : float
        Zipf exponent of feature popularity (0 gives uniform features).
    length_exponent : float
        Tail exponent (> 2) of the column-length distribution; ``inf`` gives fixed lengths.
    permute_features : bool
        Scatter the popularity ranks over the feature indices (as hashing does); ``False``
        leaves hot features at low indices.
    dtype, index_dtype : dtype
        Value and index dtypes.
    random_state : int, Generator or None
        Seed or generator (``np.random.default_rng`` semantics).

    Returns
    -------
    scipy.sparse.csc_matrix
        Canonical (sorted, duplicate-free) CSC with values drawn uniformly from ``[0.5, 1.5)``.
    """
    if n_features < 1 or n_examples < 0:
        raise ValueError(
            f"need n_features >= 1 and n_examples >= 0, got {n_features}, {n_examples}"
        )
    if nnz_per_example <= 0:
        raise ValueError(f"nnz_per_example must be positive, got {nnz_per_example}")
    if not length_exponent > 2:
        raise ValueError(f"length_exponent must be > 2 (finite mean), got {length_exponent}")
    rng = np.random.default_rng(random_state)
    # Column lengths: discrete Pareto with mean nnz_per_example, at least 1, at most n_features.
    if np.isinf(length_exponent):
        lengths = np.full(n_examples, int(round(nnz_per_example)), dtype=np.int64)
    else:
        b = length_exponent
        xmin = nnz_per_example * (b - 2) / (b - 1)
        u = rng.random(n_examples)
        lengths = np.floor(xmin * (1.0 - u) ** (-1.0 / (b - 1)) + 0.5).astype(np.int64)
    np.clip(lengths, 1, min(n_features, int(50 * nnz_per_example) + 1), out=lengths)
    total = int(lengths.sum())
    # Feature ranks by inverse CDF of the finite Zipf law.
    weights = (np.arange(1, n_features + 1, dtype=np.float64)) ** (-feature_exponent)
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    ranks = np.searchsorted(cdf, rng.random(total), side="right")
    np.minimum(ranks, n_features - 1, out=ranks)
    if permute_features:
        ranks = rng.permutation(n_features)[ranks]
    cols = np.repeat(np.arange(n_examples, dtype=np.int64), lengths)
    keys = np.unique(cols * n_features + ranks)
    rows = (keys % n_features).astype(index_dtype)
    counts = np.bincount(keys // n_features, minlength=n_examples)
    indptr = np.zeros(n_examples + 1, dtype=index_dtype)
    np.cumsum(counts, out=indptr[1:])
    data = rng.uniform(0.5, 1.5, size=rows.shape[0]).astype(dtype)
    return csc_from_arrays(sp.csc_matrix, data, rows, indptr, (n_features, n_examples))
