"""The fused ADAGrad kernels (kernels/_glm.py) through gmat.adagrad_glm_step, against numpy."""

import numpy as np
import pytest
import scipy.sparse as sp

from roofline import kernels
from roofline.gmat import FusedWorkspace, adagrad_glm_step


def zipf_csc(n, m, dtype, rng, empty_cols=True):
    """Power-law rows, some empty examples (columns)."""
    nnz_per = rng.integers(0, 6, m) if empty_cols else rng.integers(1, 6, m)
    rows, cols = [], []
    for j, c in enumerate(nnz_per):
        r = np.unique(np.minimum(rng.zipf(1.5, c) - 1, n - 1))
        rows.append(r)
        cols.append(np.full(len(r), j))
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    X = sp.csc_matrix((rng.normal(size=len(rows)).astype(dtype), (rows, cols)), shape=(n, m))
    X.sort_indices()
    return X


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_accumulate_touched_matches_dense_gradient(k, seed, dtype):
    rng = np.random.default_rng(seed)
    n, m = int(rng.integers(5, 300)), int(rng.integers(1, 80))
    X = zipf_csc(n, m, dtype, rng)
    D = np.asfortranarray(rng.normal(size=(k, m)).astype(dtype))
    sumsq = np.asfortranarray(rng.random((k, n)).astype(dtype))
    s0 = sumsq.copy()
    cap = max(X.nnz, 1)
    touched, sval = np.empty(cap, np.int64), np.empty(cap, dtype)
    gbuf = np.empty((cap, k), dtype)
    nt = kernels.glm_accumulate_touched(X.indptr, X.indices, X.data, D.T, sumsq.T, touched,
                                        sval, gbuf)
    # touched = the nonzero rows, in order of first occurrence (examples in order)
    first = list(dict.fromkeys(X.indices.tolist()))
    assert touched[:nt].tolist() == first
    G = D.astype(np.float64) @ X.toarray().T.astype(np.float64)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(gbuf[:nt], G[:, first].T, rtol=tol, atol=tol)
    np.testing.assert_array_equal(sval[:nt], s0[0, first])
    assert (sumsq[0, first] < 0).all()  # marked
    coef = np.zeros((k, n), dtype, order="F")
    kernels.adagrad_glm_update(coef.T, sumsq.T, touched, sval, gbuf, nt, 0.5, 1e-8, 0.0, 0.0)
    untouched = np.setdiff1d(np.arange(n), first)
    np.testing.assert_array_equal(sumsq[:, untouched], s0[:, untouched])
    np.testing.assert_array_equal(coef[:, untouched], 0)
    ref_s = s0[:, first] + G[:, first] ** 2
    np.testing.assert_allclose(sumsq[:, first], ref_s, rtol=tol, atol=tol)
    np.testing.assert_allclose(coef[:, first], -0.5 * G[:, first] / (np.sqrt(ref_s) + 1e-8),
                               rtol=10 * tol, atol=10 * tol)


def test_empty_minibatch_and_workspace_reuse():
    X = sp.csc_matrix((10, 4), dtype=np.float64)
    coef = np.ones((1, 10), order="F")
    sumsq = np.ones((1, 10), order="F")
    ws = FusedWorkspace()
    assert adagrad_glm_step(coef, sumsq, X, np.zeros((1, 4), order="F"), lr=0.1, eps=1e-8,
                            workspace=ws) == 0
    np.testing.assert_array_equal(coef, 1)
    np.testing.assert_array_equal(sumsq, 1)
    Y = sp.random(10, 4, density=0.5, format="csc", random_state=0)
    n0 = ws.n_allocations
    adagrad_glm_step(coef, sumsq, Y, np.ones((1, 4), order="F"), lr=0.1, eps=1e-8, workspace=ws)
    adagrad_glm_step(coef, sumsq, Y, np.ones((1, 4), order="F"), lr=0.1, eps=1e-8, workspace=ws)
    assert ws.n_allocations == n0 + 1
    assert (sumsq > 0).all()
