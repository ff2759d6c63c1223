"""``fit_glm(device="gpu")``: TPA-SCD of the dual on the GPU behind the front door.

The ``sim`` cases run under numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``, which must be
set before numba is imported), in the subprocess that :func:`test_under_simulator` starts;
there the blocks run one after the other (sequential SDCA), through the very launcher and
device arrays of a real GPU.  The ``gpu`` cases need a device (marker ``gpu``; skipped
without one).  The reference is the CPU dual SCD run to a far tighter gap: ``P`` is
``alpha``-strongly convex in ``(w, b / s)``, so a duality gap ``G`` bounds the distance to
the optimum by ``sqrt(2 G / alpha)``, the tolerance used on the coefficients.
"""

import numpy as np
import pytest
import scipy.sparse as sp

from roofline.glm import GLMSolverOptions, fit_glm
from roofline.kernels import cuda_ready
from tests._helpers import BACKENDS, SIM, not_under_simulator, run_under_simulator, sim_or_gpu

GPU_SOLVER = "tpa-scd"


@pytest.fixture(params=BACKENDS)
def backend(request):
    return sim_or_gpu(request.param, cuda_ready)


@pytest.mark.slow
@not_under_simulator
def test_under_simulator():
    """This file's ``sim`` cases under numba's CUDA simulator (a subprocess)."""
    run_under_simulator(__file__, timeout=900)


def _problem(loss, n_features=8, n_examples=60, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    D = rng.normal(size=(n_features, n_examples)) * (rng.random((n_features, n_examples)) < 0.4)
    D[:, 5] = 0.0  # an empty example
    D[2, :] = np.where(rng.random(n_examples) < 0.9, 1.0, 0.0)  # a hot feature
    X = sp.csc_matrix(D.astype(dtype))
    z = D.T @ rng.normal(size=n_features)
    if loss == "squared":
        y = z + 0.1 * rng.normal(size=n_examples)
    else:
        y = np.where(z + 0.3 * rng.normal(size=n_examples) >= 0, 1.0, -1.0)
    return X, y


def _close_to_optimum(res, ref, alpha, scaling=1.0):
    """``res`` within its own duality gap's bound of the reference optimum ``ref``."""
    assert res.converged and res.info["device"] == "gpu"
    assert res.gap <= 1e-8 * abs(res.objective[-1])
    rad = np.sqrt(2.0 * (res.gap + ref.gap) / alpha)
    dw = np.concatenate([res.coef - ref.coef, [(res.intercept - ref.intercept) / scaling]])
    assert np.linalg.norm(dw) <= rad + 1e-12, (np.linalg.norm(dw), rad)
    # the objective at the GPU's point is within its gap of the optimum
    assert res.objective[-1] - ref.objective[-1] <= res.gap + ref.gap + 1e-14


@pytest.mark.parametrize("loss", ["squared", "hinge", "logistic"])
def test_gpu_dual_reaches_the_cpu_optimum(backend, loss):
    X, y = _problem(loss)
    alpha = 0.05
    # the GPU dual's regularised constant feature (intercept_scaling=1; scd's own default
    # keeps the intercept unregularised)
    ref = fit_glm(X, y, loss=loss, alpha=alpha, solver="scd", dual=True, tol=1e-12,
                  max_iter=20000, intercept_scaling=1.0)
    res = fit_glm(X, y, loss=loss, alpha=alpha, solver=GPU_SOLVER, device="gpu", tol=1e-8,
                  max_iter=400, random_state=0)
    assert isinstance(res.coef, np.ndarray) and res.coef.dtype == np.float64
    assert isinstance(res.intercept, float) and res.dual
    assert res.n_iter == len(res.gap_history) and not res.info["streamed"]
    _close_to_optimum(res, ref, alpha)
    assert res.dual_coef.shape == (X.shape[1],)


def test_gpu_float32_data_without_intercept(backend):
    X, y = _problem("logistic", dtype=np.float32, seed=1)
    alpha = 0.1
    ref = fit_glm(X.astype(np.float64), y, loss="logistic", alpha=alpha, solver="scd",
                  dual=True, tol=1e-12, max_iter=20000, fit_intercept=False)
    res = fit_glm(X, y, loss="logistic", alpha=alpha, solver="auto", device="gpu", tol=1e-8,
                  fit_intercept=False, max_iter=400)
    assert res.solver == GPU_SOLVER and "device='gpu'" in res.info["auto_reason"]
    assert res.intercept == 0.0
    _close_to_optimum(res, ref, alpha)


@pytest.mark.parametrize("loss", ["logistic"])
def test_streamed_chunks_equal_the_resident_solve(backend, loss):
    """A device budget smaller than the data: the examples stream by chunks through the
    double-buffered pipeline every epoch, to the same optimum."""
    X, y = _problem(loss, seed=2)
    alpha = 0.05
    whole = fit_glm(X, y, loss=loss, alpha=alpha, solver=GPU_SOLVER, device="gpu", tol=1e-8,
                    max_iter=400, random_state=3)
    data_bytes = X.nnz * 12 + X.shape[1] * 32
    chunked = fit_glm(X, y, loss=loss, alpha=alpha, solver=GPU_SOLVER, device="gpu",
                      tol=1e-8, max_iter=400, random_state=3,
                      device_memory=8 * (X.shape[0] + X.shape[1] + 1) + data_bytes // 3)
    assert not whole.info["streamed"] and chunked.info["streamed"]
    assert chunked.info["n_chunks"] >= 4
    # every epoch streamed every chunk: at least the data once per epoch
    assert chunked.info["bytes_streamed"] >= chunked.n_iter * X.nnz * 12
    _close_to_optimum(chunked, whole, alpha)


def test_blocks_in_flight_take_safe_steps_then_bolder_ones(backend):
    """``gpu_blocks=8``: the steps start from mini-batch SDCA's norms for 8 concurrent steps;
    the dual keeps rising (the simulator's blocks run one after the other), so the rule relaxes
    them towards the plain norms, and the fit reaches the same optimum."""
    X, y = _problem("squared", seed=4)
    alpha = 0.05
    ref = fit_glm(X, y, loss="squared", alpha=alpha, solver="scd", dual=True, tol=1e-12,
                  max_iter=20000, intercept_scaling=1.0)
    res = fit_glm(X, y, loss="squared", alpha=alpha, solver=GPU_SOLVER, device="gpu",
                  tol=1e-8, max_iter=400, gpu_blocks=8, random_state=1)
    assert res.info["concurrency"] == 8 and res.info["tau"] < 8
    assert res.info["n_rejected"] == 0
    _close_to_optimum(res, ref, alpha)


def test_budget_too_small_names_device_memory(backend):
    X, y = _problem("squared")
    with pytest.raises(ValueError, match="device_memory"):
        fit_glm(X, y, loss="squared", alpha=0.1, solver=GPU_SOLVER, device="gpu",
                device_memory=100.0)


def test_gpu_options_are_checked():
    X, y = _problem("squared")
    with pytest.raises(ValueError, match="penalty='l2'"):
        fit_glm(X, y, loss="squared", alpha=0.1, penalty="l1", device="gpu")
    with pytest.raises(ValueError, match="dual=False"):
        fit_glm(X, y, loss="squared", alpha=0.1, device="gpu", dual=False)
    with pytest.raises(ValueError, match="does not run on the GPU"):
        fit_glm(X, y, loss="squared", alpha=0.1, solver="newton", device="gpu")
    with pytest.raises(ValueError, match="sample_weight"):
        fit_glm(X, y, loss="squared", alpha=0.1, device="gpu",
                sample_weight=np.arange(1.0, X.shape[1] + 1))
    with pytest.raises(ValueError, match="device"):
        fit_glm(X, y, loss="squared", alpha=0.1, device="tpu")
    with pytest.raises(ValueError, match="device_memory"):
        GLMSolverOptions(device="gpu", device_memory=-1.0)
    opts = GLMSolverOptions(device="gpu", device_memory=2e9)
    assert GLMSolverOptions(**opts.to_dict()) == opts


@pytest.mark.skipif(SIM, reason="the simulator stands in for a device")
def test_no_device_is_a_runtime_error_naming_it():
    if cuda_ready():
        pytest.skip("a CUDA device is present")
    X, y = _problem("squared")
    with pytest.raises(RuntimeError, match="CUDA device"):
        fit_glm(X, y, loss="squared", alpha=0.1, device="gpu")
