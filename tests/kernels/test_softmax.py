"""The fused softmax kernels (kernels/_softmax.py) against numpy references: random shapes,
float32 and float64 values, empty examples (columns) and features (rows), one chunk and many."""

import numpy as np
import pytest
import scipy.sparse as sp

from roofline.kernels import nnz_chunks
from roofline.kernels._softmax import (
    softmax_csc_eval,
    softmax_csc_hess,
    softmax_dense_eval,
    softmax_dense_hess,
    softmax_rows_times,
)


def _reference(Z, y, c):
    """``(loss, P, T)`` by numpy: ``Z`` (n, K)."""
    m = Z.max(axis=1, keepdims=True)
    E = np.exp(Z - m)
    P = E / E.sum(axis=1, keepdims=True)
    loss = (m.ravel() + np.log(E.sum(axis=1))) - Z[np.arange(len(y)), y]
    T = P.copy()
    T[np.arange(len(y)), y] -= 1.0
    return loss, P, T * c[:, None]


def _problem(rng, d, n, K, dtype, density=0.2):
    X = sp.random(d, n, density=density, format="csc", random_state=rng, dtype=np.float64)
    X.data = rng.standard_normal(X.nnz)
    if n > 2:
        X = X.tolil()
        X[:, 1] = 0.0  # an empty example
        X[0, :] = 0.0  # an empty feature
        X = X.tocsc()
    X.sort_indices()
    X = X.astype(dtype)
    W = rng.standard_normal((K, d))
    b = rng.standard_normal(K)
    y = rng.integers(0, K, n)
    c = rng.random(n)
    return X, W, b, y, c


def _bounds(indptr, k):
    m = len(indptr) - 1
    k = max(1, min(k, m))
    return nnz_chunks(np.asarray(indptr, np.int64), k) if k > 1 else np.array([0, m])


SHAPES = [(1, 1, 2), (7, 13, 3), (40, 200, 10), (300, 90, 25)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("chunks", [1, 5])
def test_csc_eval_and_scatter_match_numpy(dtype, shape, chunks):
    rng = np.random.default_rng(sum(shape) + chunks)
    d, n, K = shape
    X, W, b, y, c = _problem(rng, d, n, K, dtype)
    X64 = X.astype(np.float64)
    Z = np.asarray(X64.T @ W.T) + b
    loss_ref, P_ref, T_ref = _reference(Z, y, c)
    P, T, loss = np.empty((n, K)), np.empty((n, K)), np.empty(n)
    softmax_csc_eval(X.indptr, X.indices, X.data, np.ascontiguousarray(W.T), b, y, c, P, T,
                     loss, _bounds(X.indptr, chunks))
    tol = 1e-12
    np.testing.assert_allclose(loss, loss_ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(P, P_ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(T, T_ref, rtol=tol, atol=tol)
    Xr = X.tocsr()
    G = np.full((d, K), np.nan)
    softmax_rows_times(Xr.indptr, Xr.indices, Xr.data, T, G, _bounds(Xr.indptr, chunks))
    np.testing.assert_allclose(G, X64 @ T_ref, rtol=1e-10, atol=1e-12)
    if d > 2:
        assert np.all(G[0] == 0.0)  # the empty feature


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("chunks", [1, 4])
def test_csc_hess_matches_numpy(dtype, shape, chunks):
    rng = np.random.default_rng(3 * sum(shape) + chunks)
    d, n, K = shape
    X, W, b, y, c = _problem(rng, d, n, K, dtype)
    X64 = X.astype(np.float64)
    _, P, _ = _reference(np.asarray(X64.T @ W.T) + b, y, c)
    V = rng.standard_normal((K, d))
    vb = rng.standard_normal(K)
    U = np.asarray(X64.T @ V.T) + vb
    T_ref = c[:, None] * P * (U - (P * U).sum(axis=1, keepdims=True))
    T = np.full((n, K), np.nan)
    softmax_csc_hess(X.indptr, X.indices, X.data, np.ascontiguousarray(V.T), vb, P, c, T,
                     _bounds(X.indptr, chunks))
    np.testing.assert_allclose(T, T_ref, rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("shape", [(1, 2), (50, 3), (333, 17)])
@pytest.mark.parametrize("chunks", [1, 3])
def test_dense_eval_and_hess_match_numpy(shape, chunks):
    rng = np.random.default_rng(shape[0] + chunks)
    n, K = shape
    Z = rng.standard_normal((n, K)) * 5
    y = rng.integers(0, K, n)
    c = rng.random(n)
    bounds = _bounds(np.arange(n + 1), chunks)
    loss_ref, P_ref, T_ref = _reference(Z, y, c)
    P, T, loss = np.empty((n, K)), np.empty((n, K)), np.empty(n)
    softmax_dense_eval(Z, y, c, P, T, loss, bounds)
    np.testing.assert_allclose(loss, loss_ref, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(P, P_ref, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(T, T_ref, rtol=1e-12, atol=1e-14)
    U = rng.standard_normal((n, K))
    softmax_dense_hess(U, P, c, T, bounds)
    np.testing.assert_allclose(
        T, c[:, None] * P * (U - (P * U).sum(axis=1, keepdims=True)), rtol=1e-11, atol=1e-14)


def test_confident_examples_keep_their_precision():
    """A margin of 40: the loss ``~exp(-40)`` and ``p_y - 1`` are computed without the
    cancellation of ``log(1 + tiny)`` and ``(1 - tiny) - 1`` (numpy's naive forms give 0),
    and a margin of 1000 does not overflow."""
    Z = np.array([[40.0, 0.0, 0.0], [0.0, 1000.0, -1000.0]])
    y = np.array([0, 2])
    c = np.ones(2)
    P, T, loss = np.empty((2, 3)), np.empty((2, 3)), np.empty(2)
    softmax_dense_eval(Z, y, c, P, T, loss, np.array([0, 2]))
    tiny = 2 * np.exp(-40.0)
    assert loss[0] == pytest.approx(np.log1p(tiny), rel=1e-14)
    assert T[0, 0] == pytest.approx(-tiny / (1 + tiny), rel=1e-14)
    assert loss[1] == pytest.approx(2000.0, rel=1e-15)
    assert np.all(np.isfinite(P)) and np.all(np.isfinite(T))
    np.testing.assert_allclose(T.sum(axis=1), 0.0, atol=1e-15)
