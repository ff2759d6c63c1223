"""Test data and comparisons shared by the test modules (test modules never import each other).

Fixtures built on these live in ``tests/conftest.py``; modules that need the plain functions (for
several shapes or seeds in one test) import them: ``from tests._helpers import powerlaw_matrix``.
"""

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

from roofline import gmat

#: The mpich wheel's ``mpiexec`` beside this interpreter.
MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")
#: Skips a test unless mpi4py and the mpich wheel's ``mpiexec`` are installed.
needs_mpi = pytest.mark.skipif(
    importlib.util.find_spec("mpi4py") is None or not os.path.exists(MPIEXEC),
    reason="mpi4py / the mpich wheel absent")

#: Whether this interpreter runs under numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``, which
#: must be set before numba is imported: :func:`run_under_simulator` sets it in a subprocess).
SIM = os.environ.get("NUMBA_ENABLE_CUDASIM", "") == "1"
#: The params of a ``backend`` fixture: ``"sim"`` (numba's CUDA simulator) and ``"gpu"`` (a real
#: device, marker ``gpu``); the fixture returns :func:`sim_or_gpu` of its param.
BACKENDS = [pytest.param("sim"), pytest.param("gpu", marks=pytest.mark.gpu)]
#: Skips the test that starts the simulator's subprocess when already under the simulator.
not_under_simulator = pytest.mark.skipif(SIM, reason="already under the simulator")
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sim_or_gpu(backend, gpu_ready, runner="test_under_simulator's subprocess"):
    """``backend`` (``"sim"`` or ``"gpu"``), or a skip when it cannot run in this interpreter.

    ``"sim"`` runs only under the simulator (:data:`SIM`; the ordinary run reaches those cases
    through ``runner``), ``"gpu"`` only outside it and when ``gpu_ready()`` is true.
    """
    if backend == "sim" and not SIM:
        pytest.skip(f"simulator cases run in {runner}")
    if backend == "gpu" and (SIM or not gpu_ready()):
        pytest.skip("no CUDA device available")
    return backend


def run_under_simulator(*test_files, timeout=900):
    """Run the ``sim`` cases of ``test_files`` under numba's CUDA simulator in a subprocess
    (``-m "not gpu"``, the ``test_under_simulator`` tests left out, stopping at the first
    failure) and assert they passed; skips when numba-cuda is not installed.  Prints the
    subprocess's summary line (seen with ``pytest -rP``)."""
    if importlib.util.find_spec("numba_cuda") is None:
        pytest.skip("numba-cuda is not installed (pip install -e '.[dev]')")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-m", "not gpu",
         "-k", "not test_under_simulator", *test_files],
        env=env, capture_output=True, text=True, timeout=timeout, cwd=_ROOT)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert " passed" in proc.stdout, proc.stdout[-3000:]
    print(proc.stdout.strip().splitlines()[-1])


def powerlaw_matrix(n_features, n_examples, nnz_per_example=8.0, *, dtype=np.float64, seed=0,
                    empty_examples=(), empty_features=(), signed=False):
    """A power-law CSC matrix (features x examples) from :func:`roofline.gmat.powerlaw_csc`.

    Parameters
    ----------
    n_features, n_examples : int
    nnz_per_example : float
        Target mean nonzeros per column, capped at ``n_features``.
    dtype : dtype
    seed : int
        Seed of ``powerlaw_csc`` and of the choices made here.
    empty_examples : float or sequence of int
        Columns to empty: a fraction of the columns chosen at random, or their indices.
        (``powerlaw_csc`` gives every column at least one nonzero.)
    empty_features : sequence of int
        Rows to empty.
    signed : bool
        Replace the values (uniform in ``[0.5, 1.5)``) by standard normal ones.

    Returns
    -------
    scipy.sparse.csc_matrix
        Canonical CSC with int32 indices.
    """
    X = gmat.powerlaw_csc(n_features, n_examples, min(float(nnz_per_example), n_features),
                          dtype=dtype, random_state=seed)
    rng = np.random.default_rng([seed, 1])
    if np.isscalar(empty_examples):
        n_empty = int(round(float(empty_examples) * n_examples))
        empty_examples = rng.choice(n_examples, n_empty, replace=False)
    cols = np.repeat(np.arange(n_examples), np.diff(X.indptr))
    keep = ~np.isin(cols, np.asarray(empty_examples, dtype=np.int64))
    keep &= ~np.isin(X.indices, np.asarray(empty_features, dtype=np.int64))
    counts = np.bincount(cols[keep], minlength=n_examples)
    indptr = np.zeros(n_examples + 1, dtype=np.int32)
    np.cumsum(counts, out=indptr[1:])
    data = X.data[keep]
    if signed:
        data = rng.standard_normal(data.shape[0]).astype(dtype)
    return sp.csc_matrix((data, X.indices[keep], indptr), shape=X.shape)


def make_problem(n_features=30, n_examples=400, k=1, loss="logistic", dtype=np.float64,
                 density=0.2, seed=0):
    """Random sparse GLM problem for the learners: X (n_features x n_examples CSC), y ((m,) or
    (k, m))."""
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


def make_data(n=300, d=25, density=0.3, seed=0, dtype=np.float64, task="regression"):
    """A CD problem: (X as n_features x n_examples CSC, X_sk as examples x features, y)."""
    rng = np.random.default_rng(seed)
    A = sp.random(n, d, density=density, format="csr", random_state=rng, dtype=np.float64)
    A.data = rng.normal(size=A.nnz)
    w = rng.normal(size=d)
    eta = A @ w + 0.5
    if task == "regression":
        y = eta + 0.3 * rng.normal(size=n)
    else:
        y = (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(np.int64)
    A = A.astype(dtype)
    return A.T.tocsc(), A, y


def to_host(x):
    """``x`` as numpy (cupy arrays and sparse matrices are copied to the host)."""
    return gmat.to_device(x, "cpu")


def assert_allclose_on(device, actual, expected, rtol, atol=0.0):
    """``numpy.testing.assert_allclose`` of a result computed on ``device`` against a host
    reference (CuPy's ``numpy_cupy_allclose``): the result must live on ``device`` and is moved
    to the host before the comparison."""
    assert gmat.device_of(actual) == device, (
        f"result on {gmat.device_of(actual)}, expected on {device}"
    )
    actual = to_host(actual)
    expected = to_host(expected)
    if sp.issparse(actual):
        actual = actual.toarray()
    if sp.issparse(expected):
        expected = expected.toarray()
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)


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
