"""The implicit-feedback CG kernel (kernels/_als.py ``als_implicit_cg``), step for step: a few
conjugate-gradient steps are not a converged solve, so the kernel's iterate after 1 and 3 steps
is checked against the same steps written out in numpy (float64) and against ``implicit``'s own
``least_squares_cg`` (float32), on rows of every length modulo 8 (the kernel takes eight, then
four, then one nonzero at a time) and factor counts that are and are not multiples of 4."""

import numpy as np
import pytest
import scipy.sparse as sp

from roofline import kernels
from roofline.kernels import _als


def _rows_of_every_length(n_other, lengths, seed, dtype):
    """An ``n_other x len(lengths)`` CSC matrix whose column ``j`` has ``lengths[j]`` nonzeros
    (sorted distinct rows, strengths in 1..5)."""
    rng = np.random.default_rng(seed)
    cols = [np.sort(rng.choice(n_other, n, replace=False)) for n in lengths]
    indptr = np.r_[0, np.cumsum(lengths)].astype(np.int32)
    indices = np.concatenate(cols).astype(np.int32)
    data = rng.integers(1, 6, indptr[-1]).astype(dtype)
    return sp.csc_matrix((data, indices, indptr), shape=(n_other, len(lengths))), rng


def _cg_reference(S, D, x0, alpha, lam, weighted, steps):
    """``steps`` CG steps per row on ``(D D^T + sum_i alpha s_i d_i d_i^T + reg I) x =
    sum_i (1 + alpha s_i) d_i`` from ``x0`` (float64), stopping as ``implicit`` does."""
    D = D.astype(np.float64)
    YtY = D @ D.T
    X = x0.astype(np.float64).copy()
    for j in range(S.shape[1]):
        idx = S.indices[S.indptr[j]:S.indptr[j + 1]]
        s = S.data[S.indptr[j]:S.indptr[j + 1]].astype(np.float64)
        reg = lam * idx.size if weighted else lam
        Dj = D[:, idx]
        A = YtY + (Dj * (alpha * s)) @ Dj.T + reg * np.eye(D.shape[0])
        b = Dj @ (1.0 + alpha * s)
        x = X[:, j]
        r = b - A @ x
        p = r.copy()
        rs = r @ r
        if rs <= 1e-20:
            continue
        for _ in range(steps):
            Ap = A @ p
            pAp = p @ Ap
            if pAp <= 0:
                break
            step = rs / pAp
            x += step * p
            r -= step * Ap
            rs_new = r @ r
            if rs_new < 1e-20:
                break
            p = r + rs_new / rs * p
            rs = rs_new
    return X


LENGTHS = list(range(0, 41)) + [67, 130]  # every remainder mod 8, two long rows


@pytest.mark.parametrize("k", [13, 64])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("steps", [1, 3])
def test_implicit_cg_equals_the_numpy_steps(k, weighted, steps):
    S, rng = _rows_of_every_length(300, LENGTHS, seed=k + steps, dtype=np.float64)
    D = np.asfortranarray(rng.random((k, 300)) * 0.3)
    x0 = np.asfortranarray(rng.random((k, S.shape[1])) * 0.3)
    ref = _cg_reference(S, D, x0, 2.0, 0.5, weighted, steps)
    for n_chunks in (1, 5):
        X = x0.copy(order="F")
        kernels.als_implicit_cg(S.indptr, S.indices, S.data, D, D @ D.T, 2.0, 0.5, weighted,
                                steps, kernels.als_row_chunks(S.indptr, 1.0, n_chunks), X)
        np.testing.assert_allclose(X, ref, rtol=1e-9, atol=1e-11)


def test_implicit_cg_prefetching_path_equals_the_numpy_steps():
    # factors larger than PREFETCH_MIN_BYTES take the prefetching first pass
    k = 16
    n_other = _als.PREFETCH_MIN_BYTES // (k * 8) + 1000
    S, rng = _rows_of_every_length(n_other, LENGTHS, seed=3, dtype=np.float64)
    D = np.asfortranarray(rng.random((k, n_other)) * 0.05)
    assert D.nbytes > _als.PREFETCH_MIN_BYTES
    x0 = np.asfortranarray(rng.random((k, S.shape[1])) * 0.3)
    ref = _cg_reference(S, D, x0, 1.0, 0.1, False, 3)
    X = x0.copy(order="F")
    kernels.als_implicit_cg(S.indptr, S.indices, S.data, D, D @ D.T, 1.0, 0.1, False, 3,
                            kernels.als_row_chunks(S.indptr, 1.0, 4), X)
    np.testing.assert_allclose(X, ref, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("k", [13, 64])
def test_implicit_cg_equals_implicits_least_squares_cg(k):
    """Our half-step against ``implicit``'s (CG, 3 steps, float32) from the same start: its
    data is the confidence ``1 + alpha s``, its factors rows of C-order arrays."""
    implicit_als = pytest.importorskip("implicit.cpu._als")
    S, rng = _rows_of_every_length(200, LENGTHS, seed=k, dtype=np.float32)
    D = np.asfortranarray((rng.random((k, 200)) * 0.3).astype(np.float32))
    x0 = np.asfortranarray((rng.random((k, S.shape[1])) * 0.3).astype(np.float32))
    alpha, lam = 2.0, 0.5
    X = x0.copy(order="F")
    kernels.als_implicit_cg(S.indptr, S.indices, S.data, D, D @ D.T, alpha, lam, False, 3,
                            kernels.als_row_chunks(S.indptr, 1.0, 3), X)
    Cui = S.T.tocsr()  # self x other
    Cui.data = (1.0 + alpha * Cui.data).astype(np.float32)
    theirs = x0.T.copy()  # (a C-order copy: x0.T alone would be x0 itself)
    implicit_als.least_squares_cg(Cui, theirs, np.ascontiguousarray(D.T), lam, num_threads=1,
                                  cg_steps=3)
    ref = _cg_reference(S, D, x0, alpha, lam, False, 3)
    scale = np.abs(ref).max()
    # both float32 runs of the same three steps: as close to each other as to the float64 steps
    np.testing.assert_allclose(X, ref, atol=2e-3 * scale)
    # implicit sets a row without nonzeros to zero (the solve's limit); we take the 3 steps
    assert LENGTHS[0] == 0 and np.all(theirs[0] == 0)
    np.testing.assert_allclose(theirs.T[:, 1:], ref[:, 1:], atol=2e-3 * scale)
    np.testing.assert_allclose(X[:, 1:], theirs.T[:, 1:], atol=3e-3 * scale)
