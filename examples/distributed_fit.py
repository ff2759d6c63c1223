"""One training script for every way of running it.

    python examples/distributed_fit.py                                   # one process
    python -m roofline.comm.launch -n 4 examples/distributed_fit.py      # 4 local processes
    mpiexec -n 4 python examples/distributed_fit.py                      # MPI (roofline[mpi])
    python examples/distributed_fit.py --dask 4                          # 4 Dask workers

with the environment where Roofline is installed activated (``source .venv/bin/activate``):
``python`` must be a Python that imports ``roofline``, and ``mpiexec`` (MPICH's wheel, installed
by ``roofline[mpi]``) lives in that environment's ``bin``.  Without activating it, name both::

    .venv/bin/mpiexec -n 4 .venv/bin/python examples/distributed_fit.py

The launcher copies the ranks' output unprefixed, as ``mpiexec`` does (``-l`` labels each
line ``[rank r]``), so the output is one JSON line every way.

Every rank builds its own shard of the same synthetic hashed-feature logistic problem (the
examples ``i`` with ``i % size == rank``; a real job reads its shard, e.g. with
``FileSource(..., rank=comm.rank, size=comm.size)``), and CoCoA+ solves the problem to a
relative duality gap of ``--tol`` over all the ranks.  Rank 0 prints the objective, the gap
and a digest of the model as one JSON line: the same model to the tolerance however it ran.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import scipy.sparse as sp

N_EXAMPLES, N_FEATURES, NNZ = 20_000, 1 << 12, 20


def shard(rank: int, size: int, seed: int = 0):
    """This rank's examples of the problem: ``(X (features x examples, CSC), y in {-1, 1})``."""
    rng = np.random.default_rng(seed)
    w_true = rng.standard_normal(N_FEATURES)
    rows = (rng.zipf(1.3, (N_EXAMPLES, NNZ)) - 1) % N_FEATURES  # power-law feature ids
    p = 1 / (1 + np.exp(-w_true[rows].sum(1) / np.sqrt(NNZ)))
    y = np.where(rng.random(N_EXAMPLES) < p, 1.0, -1.0)
    mine = np.arange(rank, N_EXAMPLES, size)
    indptr = np.arange(0, (mine.size + 1) * NNZ, NNZ)
    X = sp.csc_matrix((np.ones(mine.size * NNZ), rows[mine].ravel(), indptr),
                      shape=(N_FEATURES, mine.size))
    X.sum_duplicates()
    return X, y[mine]


def fit(comm, tol: float = 1e-4):
    """Fit on this rank's shard; every rank returns the same model."""
    from roofline.glm import fit_glm

    X, y = shard(comm.rank, comm.size)
    res = fit_glm(X, y, loss="logistic", alpha=1e-3, solver="cocoa", dual=True,
                     fit_intercept=False, tol=tol, max_iter=2000, random_state=0, comm=comm)
    return {"size": comm.size, "backend": comm.backend, "objective": float(res.objective[-1]),
            "gap": float(res.gap), "converged": bool(res.converged),
            "coef_norm": float(np.linalg.norm(res.coef)), "coef_head": res.coef[:5].tolist()}


def _python_without_roofline() -> str | None:
    """What to run instead, when this Python cannot import Roofline (``mpiexec -n K python``
    picked the first ``python`` on ``PATH``, not the environment's), else None."""
    try:
        import roofline.comm  # noqa: F401
    except ModuleNotFoundError as e:
        if e.name is None or not e.name.startswith("roofline"):
            raise
        return (f"{sys.executable} cannot import roofline: run this script with the Python "
                f"of the environment where Roofline is installed (activate it, or name it: "
                f".venv/bin/mpiexec -n 4 .venv/bin/python examples/distributed_fit.py)")
    return None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tol", type=float, default=1e-4)
    p.add_argument("--dask", type=int, metavar="N", help="run on a local Dask cluster of N "
                   "worker processes (a real job passes its own distributed.Client)")
    a = p.parse_args(argv)
    problem = _python_without_roofline()
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    if a.dask:
        from roofline.comm import run

        out = run(fit, a.dask, backend="dask", kwargs={"tol": a.tol})[0]
    else:
        from roofline.comm import from_environment

        with from_environment() as comm:
            out = fit(comm, tol=a.tol)
            if comm.rank != 0:
                return 0
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
