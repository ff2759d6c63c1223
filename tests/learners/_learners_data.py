"""Small problems for the learners tests (imported by the test modules)."""

import numpy as np
import scipy.sparse as sp


def make_problem(n_features=30, n_examples=400, k=1, loss="logistic", dtype=np.float64,
                 density=0.2, seed=0):
    """Random sparse problem: X (n_features x n_examples CSC), y ((m,) or (k, m))."""
    rng = np.random.default_rng(seed)
    X = sp.random(n_features, n_examples, density=density, format="csc", dtype=dtype,
                  random_state=rng)
    X.data = rng.normal(size=X.nnz).astype(dtype)
    X.sort_indices()
    W = rng.normal(size=(k, n_features))
    eta = W @ X.toarray() + 0.3
    if loss == "linear":
        y = eta + 0.1 * rng.normal(size=eta.shape)
    else:
        y = (rng.random(eta.shape) < 1 / (1 + np.exp(-eta))).astype(float)
    y = y.astype(dtype)
    return X, (y[0] if k == 1 else y)
