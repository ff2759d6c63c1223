"""Small sharded data sets and configs for the command-line tests of issue 35 (a datasource
config run alone, under the launcher, under mpiexec and on Dask)."""

import os
import subprocess
import sys

import numpy as np

from roofline import datasources as ds

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
    """``python -m roofline.comm.launch -n N roofline ARGS``: the completed process."""
    return subprocess.run([sys.executable, "-m", "roofline.comm.launch", "-n", str(n),
                           "--timeout", "60", ROOFLINE, *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)
