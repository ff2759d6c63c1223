"""Small sharded data sets and configs for the command-line tests of issue 35 (a datasource
config run alone, under the launcher, under mpiexec and on Dask)."""

import os
import subprocess
import sys

import numpy as np
import pytest

from roofline import datasources as ds
from roofline.learners import load_checkpoint

ROOFLINE = os.path.join(os.path.dirname(sys.executable), "roofline")


def write_problem(d, *, n=1600, n_test=400, n_bits=8, seed=4, per_shard=200):
    """Criteo-like examples written as npz shards (``train-XX.npz``, ``test-XX.npz``) with
    their datasource configs (``train.toml``, ``test.toml``) in ``d``; returns
    ``(X, y)`` of all the examples (the first ``n`` the training ones)."""
    X, y = ds.make_criteo_like_matrix(n + n_test, seed=seed, n_bits=n_bits, dtype=np.float64)
    ds.write_shards(ds.MatSource(X[:, :n].tocsc(), y[:n], batch_size=per_shard),
                    "train-{i:02d}.npz", dirs=[d], examples_per_shard=per_shard)
    ds.write_shards(ds.MatSource(X[:, n:].tocsc(), y[n:], batch_size=per_shard),
                    "test-{i:02d}.npz", dirs=[d], examples_per_shard=per_shard // 2)
    for name in ("train", "test"):
        with open(os.path.join(d, f"{name}.toml"), "w") as f:
            f.write(f'[source]\ntype = "files"\npattern = "{name}-{{i:02d}}.npz"\n'
                    'dirs = ["."]\nbatch_size = 128\n')
    return X, y


def shards_fixture(prefix, n):
    """A module-scoped fixture: :func:`write_problem` (``n`` training examples) in a fresh
    folder named after ``prefix``; it gives ``(folder, X, y)``."""

    @pytest.fixture(scope="module")
    def shards(tmp_path_factory):
        d = tmp_path_factory.mktemp(prefix)
        X, y = write_problem(str(d), n=n)
        return str(d), X, y

    return shards


def model_of(out):
    """``(coef, intercept)`` of the GLM model ``out/model.npz`` (coef raveled, intercept a
    float)."""
    m = load_checkpoint(os.path.join(out, "model.npz")).model
    return m.coef.ravel(), float(np.asarray(m.intercept).ravel()[0])


def assert_close(a, b, rtol):
    """``a`` and ``b`` (``(coef, intercept)`` pairs) agree: the coefficients within ``rtol`` in
    norm, the intercepts within ``rtol`` (absolute below 1)."""
    assert np.linalg.norm(a[0] - b[0]) <= rtol * np.linalg.norm(b[0])
    assert abs(a[1] - b[1]) <= rtol * max(1.0, abs(b[1]))


def assert_same_models(one, two):
    """The models ``one/model.npz`` and ``two/model.npz`` agree within 1e-6; returns them."""
    one = load_checkpoint(f"{one}/model.npz").model
    two = load_checkpoint(f"{two}/model.npz").model
    assert np.linalg.norm(two.coef - one.coef) <= 1e-6 * np.linalg.norm(one.coef)
    np.testing.assert_allclose(two.intercept, one.intercept, rtol=1e-6, atol=1e-9)
    return one, two


def config(d, solver_lines, *, loss="logistic", name="cfg.toml", out="run", model="",
           data=""):
    """A training config over the shards of :func:`write_problem` (``solver_lines``: its
    ``[solver]`` or ``[optimizer]``... tables); returns its path."""
    path = os.path.join(d, name)
    with open(path, "w") as f:
        f.write(f'[data]\ntype = "datasource"\ntrain = "train.toml"\nheldout = "test.toml"\n'
                f'{data}\n[model]\nloss = "{loss}"\ndtype = "float64"\n{model}\n'
                f'{solver_lines}\n[output]\ndir = "{os.path.join(d, out)}"\n')
    return path


def launch(n, *args, cwd, timeout=240):
    """``python -m roofline.comm.launch -n N -l roofline ARGS``: the completed process (``-l``:
    each line prefixed with its rank, to check who printed it)."""
    return subprocess.run([sys.executable, "-m", "roofline.comm.launch", "-n", str(n), "-l",
                           "--timeout", "60", ROOFLINE, *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)
