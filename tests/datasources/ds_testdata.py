"""Random test data for the datasource tests (imported by conftest.py and the tests)."""

import numpy as np
import scipy.sparse as sp


def power_law_csc(n_features, n_examples, seed, dtype=np.float32, mean_nnz=8):
    """CSC (features x examples) with Zipf feature popularity and Zipf column lengths,
    including empty columns and rows."""
    rng = np.random.default_rng(seed)
    lens = np.minimum(rng.zipf(1.8, n_examples) - 1, n_features)  # many empty columns
    lens = np.minimum((lens * mean_nnz) // 2, n_features)
    indptr = np.zeros(n_examples + 1, dtype=np.int64)
    np.cumsum(lens, out=indptr[1:])
    indices = np.empty(indptr[-1], dtype=np.int32)
    for j in range(n_examples):
        k = lens[j]
        if k:
            cand = np.unique(rng.zipf(1.3, 3 * k) % n_features)
            if len(cand) < k:
                cand = np.union1d(cand, rng.choice(n_features, k, replace=False))
            indices[indptr[j] : indptr[j + 1]] = np.sort(rng.choice(cand, k, replace=False))
    data = rng.standard_normal(len(indices)).astype(dtype)
    return sp.csc_matrix((data, indices, indptr.astype(np.int32)), shape=(n_features, n_examples))
