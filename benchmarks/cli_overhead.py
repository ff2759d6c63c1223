"""The command line's overhead (issue 35): ``roofline train cfg.toml`` against the Python API
on the same problem, side by side in one run.

Usage::

    python benchmarks/cli_overhead.py                    # 200k examples, 2^18 features
    python benchmarks/cli_overhead.py --n 50000 --repeats 3

The problem: Criteo-like examples written as npz shards (a ``"files"`` datasource config), a
logistic regression with L2.  Two paths, each timed end to end (read the shards, fit, write the
model), alternated ``--repeats`` times, the best of each kept:

* ``config``: the ``roofline`` console script's function (``roofline train cfg.toml`` in this
  process: parse and check the config, build the datasource, materialise its minibatches into
  one CSC matrix, fit, write ``model.npz``, ``trace.json`` and ``config.toml``);
* ``api``: what a Python user writes: :func:`roofline.datasources.datasource_from_config`,
  the minibatches stacked by ``scipy.sparse.hstack``, :func:`roofline.glm.fit_glm`, and
  :func:`roofline.learners.save_checkpoint` of the GLM.

for two solvers: ``newton`` in memory, and the out-of-core ``fit_glm_stream``
(``[solver] stream = true``; the API path streams the same source).  Printed: each path's
seconds and the ratio config / api (target: <= 1.1); then each path's seconds outside the fit
(the fit is the same call on the same data in both), and the ratio with the same fit time in
both (the API's fit plus each path's own overhead), which the machine's load does not blur.
The interpreter's start and imports (``roofline`` as a new process) are printed apart: they
are the same for a script.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import scipy.sparse as sp

from roofline import datasources as ds
from roofline import glm
from roofline.glm import GLMSolverOptions
from roofline.learners import GLM, GLMOptions, save_checkpoint


def _roofline_command():
    """The function of the installed ``roofline`` console script (its entry point)."""
    from importlib.metadata import entry_points

    (ep,) = entry_points(group="console_scripts", name="roofline")
    return ep.load()


main = _roofline_command()

#: seconds spent inside the last fit (both paths call the solvers through roofline.glm)
FIT = {"s": 0.0}


def _timed(fn):
    @functools.wraps(fn)  # the CLI reads fit_glm_stream's signature
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        res = fn(*args, **kwargs)
        FIT["s"] = time.perf_counter() - t0
        FIT["n_iter"] = res.n_iter
        return res
    return wrapper


glm.fit_glm = _timed(glm.fit_glm)
glm.fit_glm_stream = _timed(glm.fit_glm_stream)


def make_problem(d, n, n_bits, per_shard):
    X, y = ds.make_criteo_like_matrix(n, seed=0, n_bits=n_bits, dtype=np.float64)
    ds.write_shards(ds.MatSource(X, y, batch_size=per_shard), "train-{i:03d}.npz", dirs=[d],
                    examples_per_shard=per_shard)
    with open(os.path.join(d, "train.toml"), "w") as f:
        f.write('[source]\ntype = "files"\npattern = "train-{i:03d}.npz"\ndirs = ["."]\n'
                "batch_size = 8192\n")
    return X.shape


SOLVERS = {
    "newton": ('[solver]\nalpha = 1e-5\nsolver = "newton"\ntol = 1e-6\n',
               dict(solver="newton", tol=1e-6)),
    "stream": ('[solver]\nalpha = 1e-4\nstream = true\ntol = 1e-4\nmax_iter = 20\n',
               dict(tol=1e-4, max_iter=20)),
}


def write_config(d, name):
    path = os.path.join(d, f"{name}.toml")
    with open(path, "w") as f:
        f.write(f'[data]\ntype = "datasource"\ntrain = "train.toml"\nmemory_budget_mb = 8192\n\n'
                f'[model]\nloss = "logistic"\ndtype = "float64"\n\n{SOLVERS[name][0]}\n'
                f'[output]\ndir = "{os.path.join(d, "out-" + name)}"\n')
    return path


def run_config(cfg):
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["train", cfg]) == 0
    return time.perf_counter() - t0, FIT["s"], FIT["n_iter"]


def run_api(d, name):
    t0 = time.perf_counter()
    src = ds.datasource_from_config(os.path.join(d, "train.toml"))
    if name == "stream":
        res = glm.fit_glm_stream(src, loss="logistic", alpha=1e-4, random_state=0,
                                 **SOLVERS[name][1])
    else:
        Xs, ys = [], []
        for mb in src:
            Xs.append(mb.X)
            ys.append(mb.y)
        X, y = sp.hstack(Xs, format="csc"), np.concatenate(ys)
        res = glm.fit_glm(X, y, loss="logistic", alpha=1e-5, random_state=0,
                          options=GLMSolverOptions(**SOLVERS[name][1]))
    model = GLM(GLMOptions(loss="logistic", dtype="float64"))
    model.set_parameters(res.coef.reshape(1, -1), np.array([res.intercept]))
    save_checkpoint(os.path.join(d, f"api-{name}.npz"), model)
    return time.perf_counter() - t0, FIT["s"], FIT["n_iter"]


def main_(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=200_000, help="examples")
    p.add_argument("--n-bits", type=int, default=18, help="2^n_bits features")
    p.add_argument("--per-shard", type=int, default=25_000, help="examples per shard")
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="roofline-cli-bench-") as d:
        shape = make_problem(d, a.n, a.n_bits, a.per_shard)
        print(f"problem: {shape[0]} features x {shape[1]} examples, logistic + L2, npz shards "
              f"of {a.per_shard}; best of {a.repeats}, config and api alternated")
        print(f"{'solver':<8} {'config s':>9} {'api s':>9} {'config/api':>11} "
              f"{'config - fit s':>15} {'api - fit s':>12} {'config/api but the fit':>23}")
        for name in SOLVERS:
            cfg = write_config(d, name)
            run_config(cfg), run_api(d, name)  # warm: numba caches, page cache
            tc, ta = [], []
            for _ in range(a.repeats):
                tc.append(run_config(cfg))
                ta.append(run_api(d, name))
            (c, _, ic), (p_, pf, ia) = min(tc), min(ta)
            assert ic == ia, f"{name}: the config's fit ran {ic} iterations, the API's {ia}"
            oc = min(t - f for t, f, _ in tc)
            oa = min(t - f for t, f, _ in ta)
            # the fit itself is the same call on the same data: the overhead is the time around
            # it; on a loaded machine the fit's own time varies more than the paths differ
            print(f"{name:<8} {c:>9.3f} {p_:>9.3f} {c / p_:>11.3f} {oc:>15.3f} {oa:>12.3f} "
                  f"{(pf + oc) / (pf + oa):>23.3f}   ({ic} iterations each)")
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import roofline.learners._cli, roofline.glm, "
                        "roofline.datasources"], check=True)
        print(f"a new process's start and imports (the same for a script): "
              f"{time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main_()
