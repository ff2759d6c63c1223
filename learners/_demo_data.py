"""Criteo-like synthetic data for demos, tests and benchmarks (private).

Hashed one-hot categorical fields with Zipf-distributed categories and planted logistic labels.
Replace by ``roofline.datasources`` generator when it lands (issue 4).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["make_criteo_like"]


def make_criteo_like(n_examples: int, *, n_features: int = 2**20, n_fields: int = 39,
                     zipf_a: float = 1.3, vocab: int = 100_000, weight_scale: float = 0.5,
                     intercept: float = -1.5, dtype=np.float32, seed: int = 0):
    """Generate Criteo-shaped data: ``n_fields`` categorical fields hashed into ``n_features``.

    Each example has one category per field, drawn from a Zipf(``zipf_a``) law truncated to
    ``vocab`` values; ``(field, category)`` is hashed (a multiplicative 64-bit hash) into a
    column, so each example has ``n_fields`` nonzeros of value 1 (fewer when two fields collide;
    collided entries are summed).  Labels are Bernoulli(sigmoid(w*^T x + intercept)) with
    ``w*`` ~ N(0, weight_scale^2) per column.

    Returns
    -------
    X : scipy.sparse.csc_matrix, shape (n_features, n_examples)
        Examples are columns (sorted row indices, no duplicates).
    y : ndarray (n_examples,)
        Labels in {0, 1}, of ``dtype``.
    w_true : ndarray (n_features,)
        The planted weights.
    """
    rng = np.random.default_rng(seed)
    m, F = int(n_examples), int(n_fields)
    cats = rng.zipf(zipf_a, size=(m, F)).astype(np.uint64)
    np.minimum(cats, np.uint64(vocab), out=cats)
    fields = np.arange(F, dtype=np.uint64)[None, :]
    with np.errstate(over="ignore"):
        h = (cats * np.uint64(0x9E3779B97F4A7C15)) ^ (fields * np.uint64(0xC2B2AE3D27D4EB4F)
                                                      + np.uint64(0x165667B19E3779F9))
        h ^= h >> np.uint64(29)
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(32)
    rows = (h % np.uint64(n_features)).astype(np.int64).ravel()
    cols = np.repeat(np.arange(m, dtype=np.int64), F)
    X = sp.csc_matrix((np.ones(m * F, dtype=dtype), (rows, cols)), shape=(n_features, m))
    X.sum_duplicates()
    X.sort_indices()
    if X.indices.dtype != np.int32 and n_features < 2**31 and X.nnz < 2**31:
        X.indices = X.indices.astype(np.int32)
        X.indptr = X.indptr.astype(np.int32)
    w_true = rng.normal(0.0, weight_scale, n_features)
    eta = X.T @ w_true.astype(dtype) + intercept
    p = 1.0 / (1.0 + np.exp(-eta))
    y = (rng.random(m) < p).astype(dtype)
    return X, y, w_true
