"""The estimators' ``device`` parameter: ``device="gpu"`` fits by TPA-SCD of the dual on the GPU
(``roofline.glm.fit_glm(device="gpu")``).

The ``sim`` cases run under numba's CUDA simulator in the subprocess of
:func:`test_under_simulator`; the ``gpu`` cases need a device (marker ``gpu``).  The
reference is the same estimator on the CPU's dual coordinate descent, run to a far tighter
gap.  Tolerance: with ``tol = 1e-8`` (relative duality gap) and ``alpha = 1 / (C n)``, strong
convexity bounds the coefficients' distance to the optimum by
``sqrt(2 * 1e-8 * P / alpha)``, below 2e-3 on these problems (``P < 1``, ``n = 60``,
``C`` of 0.1 or 1, ridge's ``alpha = 10``: ``alpha`` at least ``1 / 60``).
"""

import numpy as np
import pytest
from sklearn.base import clone

from roofline.kernels import cuda_ready
from roofline.learners import LinearRegression, LinearSVC, LogisticRegression, Ridge
from tests._helpers import BACKENDS, SIM, not_under_simulator, run_under_simulator, sim_or_gpu

CPU_DUAL = "scd"
ATOL = 2e-3


@pytest.fixture(params=BACKENDS)
def backend(request):
    return sim_or_gpu(request.param, cuda_ready)


@pytest.mark.slow
@not_under_simulator
def test_under_simulator():
    """This file's ``sim`` cases under numba's CUDA simulator (a subprocess)."""
    run_under_simulator(__file__, timeout=900)


def _data(seed=0, n=60, d=8):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * (rng.random((n, d)) < 0.5)
    z = X @ rng.normal(size=d)
    return X, (z + 0.3 * rng.normal(size=n) > 0).astype(int), z + 0.1 * rng.normal(size=n)


def test_device_is_a_parameter_with_a_cpu_default():
    for est in (LogisticRegression(), LinearSVC(), Ridge(), LinearRegression()):
        assert est.get_params()["device"] == "cpu"
        gpu = clone(est.set_params(device="gpu"))
        assert gpu.get_params()["device"] == "gpu"


def test_bad_device_settings_name_the_parameter():
    X, yc, _ = _data()
    with pytest.raises(ValueError, match="device must be 'cpu' or 'gpu'"):
        LogisticRegression(device="tpu").fit(X, yc)
    with pytest.raises(ValueError, match="device='gpu' runs solver in"):
        LogisticRegression(device="gpu", solver="newton").fit(X, yc)
    with pytest.raises(ValueError, match="no solver runs loss='squared_hinge'"):
        LinearSVC(device="gpu").fit(X, yc)  # the default loss has no dual CD


@pytest.mark.skipif(SIM, reason="the simulator stands in for a device")
def test_no_device_is_a_runtime_error():
    if cuda_ready():
        pytest.skip("a CUDA device is present")
    X, yc, _ = _data()
    with pytest.raises(RuntimeError, match="CUDA device"):
        LogisticRegression(device="gpu").fit(X, yc)


def test_logistic_regression_on_the_gpu(backend):
    X, yc, _ = _data()
    gpu = LogisticRegression(device="gpu", fit_intercept=False, tol=1e-8, max_iter=400).fit(
        X, yc)
    cpu = LogisticRegression(solver=CPU_DUAL, fit_intercept=False, tol=1e-12,
                             max_iter=20000).fit(X, yc)
    assert gpu.solver_ != CPU_DUAL and isinstance(gpu.coef_, np.ndarray)
    np.testing.assert_allclose(gpu.coef_, cpu.coef_, atol=ATOL)
    assert np.mean(gpu.predict(X) == cpu.predict(X)) >= 0.95


def test_linear_svc_hinge_on_the_gpu(backend):
    X, yc, _ = _data(seed=1)
    gpu = LinearSVC(C=0.1, loss="hinge", device="gpu", tol=1e-8, max_iter=600).fit(X, yc)
    # the GPU dual regularises the intercept as a constant feature of value 1 (the CPU dual's
    # is unregularised unless intercept_scaling is set: issue 34)
    cpu = LinearSVC(C=0.1, loss="hinge", solver=CPU_DUAL, tol=1e-12, max_iter=20000,
                    intercept_scaling=1.0).fit(X, yc)
    np.testing.assert_allclose(gpu.coef_, cpu.coef_, atol=ATOL)
    np.testing.assert_allclose(gpu.intercept_, cpu.intercept_, atol=ATOL)


def test_ridge_on_the_gpu_and_linear_regression_refused(backend):
    X, _, yr = _data(seed=2)
    gpu = Ridge(alpha=10.0, device="gpu", fit_intercept=False, tol=1e-8, max_iter=400).fit(
        X, yr)
    Xd = X.astype(np.float64)
    exact = np.linalg.solve(Xd.T @ Xd + 10.0 * np.eye(X.shape[1]), Xd.T @ yr)  # sum-scaled ridge
    np.testing.assert_allclose(gpu.coef_, exact, atol=ATOL)
    with pytest.raises(ValueError, match="positive regularisation"):
        LinearRegression(device="gpu").fit(X, yr)
