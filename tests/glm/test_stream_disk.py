"""The out-of-core SDCA's state on disk (glm/_stream.py, issue 35): the dual variables of each
chunk in a file of their own (``dual_on_disk``) and the chunk cache give the iterates of the
in-memory run bit for bit; the temporary directory is removed."""

import os
import tempfile

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from roofline.datasources import MatSource, make_criteo_like_matrix
from roofline.glm import fit_glm_stream


def _data(n=900):
    X, y = make_criteo_like_matrix(n, seed=3, n_bits=11, dtype=np.float64)
    return X.tocsc(), y


def _fit(X, y, **kw):
    with pytest.warns(ConvergenceWarning):  # max_iter: the iterates are compared, not the optimum
        return fit_glm_stream(MatSource(X, y, batch_size=100), loss="logistic", alpha=1e-3,
                                 max_iter=6, tol=1e-15, random_state=2, **kw)


@pytest.mark.parametrize("shuffle,cache", [(4, "disk"), (3, "memory"), (0, "disk")])
def test_the_dual_on_disk_gives_the_in_memory_iterates(tmp_path, shuffle, cache):
    X, y = _data()
    mem = _fit(X, y, shuffle=shuffle, cache=cache)
    disk = _fit(X, y, shuffle=shuffle, cache=cache, dual_on_disk=True, workdir=str(tmp_path))
    np.testing.assert_array_equal(disk.coef, mem.coef)
    assert disk.intercept == mem.intercept
    np.testing.assert_array_equal(disk.objective, mem.objective)
    np.testing.assert_array_equal(disk.gap_history, mem.gap_history)
    assert disk.dual_coef is None and disk.info["dual_on_disk"]
    # the files hold the duals, chunk after chunk in the source's order
    duals = np.concatenate([np.load(tmp_path / f"dual_{k}.npy") for k in range(9)])
    np.testing.assert_array_equal(duals, mem.dual_coef)
    assert not any(f.endswith(".tmp") or ".tmp" in f for f in os.listdir(tmp_path))


def test_the_converged_fit_is_the_same_from_disk():
    X, y = _data(600)
    kw = dict(loss="squared", alpha=1e-2, tol=1e-10, max_iter=300, random_state=0)
    yy = 2.0 * y - 1.0
    mem = fit_glm_stream(MatSource(X, yy, batch_size=50), cache="memory", **kw)
    disk = fit_glm_stream(MatSource(X, yy, batch_size=50), dual_on_disk=True, **kw)
    assert mem.converged and disk.converged
    np.testing.assert_array_equal(disk.coef, mem.coef)


def test_the_temporary_directory_is_removed(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    X, y = _data(300)
    seen = []
    _fit(X, y, dual_on_disk=True, on_chunk=lambda it, k: seen.append(os.listdir(tmp_path)))
    assert seen and all(len(s) == 1 for s in seen)  # the run's directory, while it ran
    assert os.listdir(tmp_path) == []
    # removed on an error too
    bad = y.copy()
    bad[:] = 1
    with pytest.raises(ValueError, match="single class"):
        fit_glm_stream(MatSource(X, bad, batch_size=100), loss="logistic", alpha=0.1,
                          dual_on_disk=True)
    assert os.listdir(tmp_path) == []


def test_a_given_workdir_keeps_the_chunks_and_duals(tmp_path):
    X, y = _data(300)
    res = _fit(X, y, dual_on_disk=True, workdir=str(tmp_path / "w"))
    files = sorted(os.listdir(tmp_path / "w"))
    assert files == sorted([f"chunk_{k}.bin" for k in range(3)]
                           + [f"dual_{k}.npy" for k in range(3)])
    assert res.info["n_chunks"] == 3
