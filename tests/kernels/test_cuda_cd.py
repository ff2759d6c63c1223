"""TPA-SCD on the GPU (kernels/_cuda_cd.py) against the CPU optimum on tiny problems.

The ``sim`` cases run under numba's CUDA simulator, in the subprocess that
``tests/kernels/test_cuda_primitives.py::test_under_simulator`` starts (the simulator runs
the blocks one after the other: sequential SDCA); the ``gpu`` cases on a real device
(marker ``gpu``; skipped without one), where the blocks run asynchronously.
"""

import numpy as np
import pytest
import scipy.sparse as sp

from roofline import gmat
from tests._helpers import BACKENDS, SIM, sim_or_gpu


@pytest.fixture(params=BACKENDS)
def backend(request):
    return sim_or_gpu(request.param, gmat.gpu_available,
                      "test_cuda_primitives.py::test_under_simulator")


def _problem(loss, dtype, n=6, m=24, seed=0):
    rng = np.random.default_rng(seed)
    D = rng.normal(size=(n, m)) * (rng.random((n, m)) < 0.5)
    D[:, 3] = 0.0  # an empty example
    X = sp.csc_matrix(D.astype(dtype))
    w_true = rng.normal(size=n)
    z = X.T.toarray().astype(np.float64) @ w_true
    y = z + 0.1 * rng.normal(size=m) if loss == "squared" else np.where(z >= 0, 1.0, -1.0)
    return X, y.astype(dtype)


def _objectives(X, y, alpha, v, loss, lam_n):
    """Primal and dual objectives (sums) at ``w = v / lam_n`` and ``alpha``."""
    w = v / lam_n
    z = X.T.toarray().astype(np.float64) @ w
    yy = y.astype(np.float64)
    if loss == "squared":
        primal = 0.5 * np.sum((z - yy) ** 2)
        conj = np.sum(alpha * yy - 0.5 * alpha**2)
    elif loss == "hinge":
        primal = np.sum(np.maximum(0.0, 1.0 - yy * z))
        conj = np.sum(alpha * yy)
    else:
        primal = np.sum(np.logaddexp(0.0, -yy * z))
        b = np.clip(alpha * yy, 0.0, 1.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            h = -np.nan_to_num(b * np.log(b)) - np.nan_to_num((1 - b) * np.log(1 - b))
        conj = np.sum(h)
    primal += 0.5 * lam_n * w @ w
    dual = conj - 0.5 * (v @ v) / lam_n
    return primal, dual


@pytest.fixture(autouse=True)
def _small_blocks(monkeypatch):
    """Blocks of 4 threads on the simulator (each simulated thread is a Python thread)."""
    if SIM:
        from roofline.kernels import _cuda_cd

        monkeypatch.setattr(_cuda_cd, "CD_THREADS", 4)


def _reference_epochs(X, y, loss, lam_n, epochs, seed):
    """Sequential SDCA in the kernel's order (numpy): the simulator's single block runs the
    coordinates one after the other, so its iterates must match these."""
    from scipy.optimize import brentq

    Xd = X.toarray().astype(np.float64)
    yy = y.astype(np.float64)
    n, m = Xd.shape
    alpha, v = np.zeros(m), np.zeros(n)
    rs = np.random.RandomState(seed)
    for _ in range(epochs):
        for i in rs.permutation(m):
            x = Xd[:, i]
            q = x @ x / lam_n
            mg = x @ v / lam_n
            a, yi = alpha[i], yy[i]
            if loss == "squared":
                d = (yi - mg - a) / (1.0 + q)
            elif loss == "hinge":
                beta = a * yi
                nb = beta - (yi * mg - 1.0) / q if q > 0 else (1.0 if yi * mg < 1 else 0.0)
                d = yi * (min(max(nb, 0.0), 1.0) - beta)
            else:
                beta = a * yi
                if q > 0:
                    def f(t, ym=yi * mg, q=q, beta=beta):
                        return -t - ym - q * (1 / (1 + np.exp(-t)) - beta)

                    t = brentq(f, -yi * mg - q * (1 - beta) - 1, -yi * mg + q * beta + 1,
                               xtol=1e-14)
                    nb = 1 / (1 + np.exp(-t))
                else:
                    nb = 1 / (1 + np.exp(yi * mg))
                d = yi * (nb - beta)
            alpha[i] += d
            v += d * x
    return alpha, v


@pytest.mark.parametrize("loss", ["squared", "hinge", "logistic"])
def test_dual_tpa_matches_sequential_sdca(backend, loss):
    """One block striding over the coordinates = sequential SDCA, iterate for iterate."""
    from roofline.kernels import LOSS_CODES
    from roofline.kernels._cuda_cd import gpu_dual_tpa

    X, y = _problem(loss, np.float64, n=5, m=8)
    lam_n = 0.4
    alpha, v = np.zeros(8), np.zeros(5)
    colsq = np.asarray(X.multiply(X).sum(axis=0)).ravel().astype(np.float64)
    arrays = [X.indptr, X.indices, X.data, y, alpha, v, colsq]
    if backend == "gpu":
        import cupy

        arrays = [cupy.asarray(a) for a in arrays]
        # cupy draws other permutations than numpy: compare with the optimum test instead
        pytest.skip("the GPU's permutations come from cupy's generator")
    gpu_dual_tpa(*arrays, LOSS_CODES[loss], lam_n, epochs=2, seed=3, blocks=1)
    ra, rv = _reference_epochs(X, y, loss, lam_n, 2, 3)
    np.testing.assert_allclose(alpha, ra, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(v, rv, rtol=1e-8, atol=1e-10)


@pytest.mark.gpu
@pytest.mark.parametrize("loss", ["squared", "hinge", "logistic"])
def test_dual_tpa_reaches_the_optimum(backend, dtype, loss):
    """Asynchronous blocks on a real device reach the optimum (duality gap, ridge closed
    form)."""
    from roofline.kernels import LOSS_CODES
    from roofline.kernels._cuda_cd import gpu_dual_tpa

    if backend == "sim":
        pytest.skip("too slow under the simulator: see test_dual_tpa_matches_sequential_sdca")
    X, y = _problem(loss, dtype)
    n, m = X.shape
    lam_n = 0.5 * m * 0.05
    colsq = np.asarray(X.multiply(X).sum(axis=0)).ravel().astype(np.float64)
    import cupy

    arrays = [cupy.asarray(a) for a in (X.indptr, X.indices, X.data, y, np.zeros(m),
                                        np.zeros(n), colsq)]
    gpu_dual_tpa(*arrays, LOSS_CODES[loss], lam_n, epochs=300, seed=1)
    alpha, v = arrays[4].get(), arrays[5].get()
    # v = X alpha is kept in sync by the atomic adds
    np.testing.assert_allclose(v, X.toarray().astype(np.float64) @ alpha, rtol=1e-6, atol=1e-6)
    primal, dual = _objectives(X, y, alpha, v, loss, lam_n)
    assert primal - dual <= 1e-6 * max(1.0, abs(primal)), (primal, dual)
    if loss == "squared":  # the ridge optimum in closed form
        Xd = X.toarray().astype(np.float64)
        w_opt = np.linalg.solve(Xd @ Xd.T + lam_n * np.eye(n), Xd @ y.astype(np.float64))
        np.testing.assert_allclose(v / lam_n, w_opt, rtol=1e-5, atol=1e-6)
