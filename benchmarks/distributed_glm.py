"""Distributed trust-region Newton (``fit_newton(comm=)``, issue 31) against the
single-process default, in one table.

    python benchmarks/distributed_glm.py          # Criteo-like 200k x 2^18, dense 100k x 100
    python benchmarks/distributed_glm.py --criteo 50000 --dense 20000 --procs 1 2   # quick

For each problem: the optimum ``P*`` from a tight single-process Newton fit, then the
single-process default (``fit_glm``, ``solver="auto"``), single-process Newton, and Newton over
K = 1, 2, 4 TCP processes (``roofline.comm.run(backend="tcp")``; each rank holds its
contiguous shard of the examples, one thread).  Each run goes to a relative duality gap of
``--tol``; the table gives the iterations and the solver seconds (the configuration of the
sparse plan included) at which the relative suboptimality ``(P - P*) / |P*|`` first reaches
1e-3 and 1e-4, with, for the distributed runs, the collectives and the megabytes rank 0 sent
and its seconds inside collectives.

The ranks' times are the processes' own (process start and data loading excluded); on a
machine with fewer cores than ranks the processes share cores, and the loopback TCP costs
stand in for a network's.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import warnings

import numpy as np
import scipy.sparse as sp

TARGETS = (1e-3, 1e-4)


def criteo(n, bits, seed=0):
    from roofline.datasources import make_criteo_like_matrix

    X, y = make_criteo_like_matrix(n, seed=seed, n_bits=bits, dtype=np.float64)
    return sp.csc_matrix(X), np.asarray(y, dtype=np.float64)


def dense(n, d, seed=0):
    """Correlated, badly scaled dense features (the CD solvers' hard case)."""
    rng = np.random.default_rng(seed)
    L = rng.standard_normal((d, d)) / np.sqrt(d)
    A = (L @ rng.standard_normal((d, n)) + 0.5 * rng.standard_normal((d, n)))
    A *= np.exp(rng.uniform(-1.5, 1.5, (d, 1)))
    w = rng.standard_normal(d) / np.sqrt(d)
    y = (rng.random(n) < 1 / (1 + np.exp(-(w @ A) - 0.5))).astype(np.float64)
    return np.ascontiguousarray(A), y


def _first(res, p_star, setup=0.0):
    """``(iterations, seconds)`` at which each target is first met (``None``: never)."""
    rel = (np.asarray(res.objective) - p_star) / abs(p_star)
    T = np.asarray(res.times) + setup
    out = []
    for t in TARGETS:
        hit = np.flatnonzero(rel <= t)
        if hit.size == 0:
            out.append((None, None))
            continue
        i = int(hit[0])
        # the trace holds one entry per check: the iteration of entry i
        per = max(res.n_iter, 1) / max(len(rel) - 1, 1)
        out.append((int(round(i * per)), float(T[i])))
    return out


def fit_newton(X, y, **kw):
    """Trust-region Newton through the front door (``comm=`` for the distributed solver)."""
    from roofline.glm import fit_glm

    return fit_glm(X, y, solver="newton", **{"loss": "logistic", **kw})


def _rank(comm, path, kw):

    with np.load(os.path.join(path, f"shard{comm.size}_{comm.rank}.npz")) as z:
        if "data" in z:
            X = sp.csc_matrix((z["data"], z["indices"], z["indptr"]), shape=tuple(z["shape"]))
        else:
            X = np.asfortranarray(z["X"])
        y = z["y"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # warm-up on a slice (numba loads its kernels in this fresh process), then the run
        m = min(500, X.shape[1])
        fit_newton(X[:, :m], y[:m], comm=comm, n_jobs=1, **{**kw, "max_iter": 2})
        res = fit_newton(X, y, comm=comm, n_jobs=1, **kw)
    info = res.info
    return (res, info["setup"]["seconds"], info["collectives"], info["bytes_sent"],
            info["comm_seconds"])


def _save_shards(path, X, y, K):
    for r, cols in enumerate(np.array_split(np.arange(X.shape[1]), K)):
        f = os.path.join(path, f"shard{K}_{r}.npz")
        if sp.issparse(X):
            Xk = X[:, cols]
            np.savez(f, data=Xk.data, indices=Xk.indices, indptr=Xk.indptr,
                     shape=np.array(Xk.shape), y=y[cols])
        else:
            np.savez(f, X=np.asfortranarray(X[:, cols]), y=y[cols])


def bench(name, X, y, alpha, tol, procs):
    from roofline.comm import run
    from roofline.glm import fit_glm

    kw = dict(alpha=alpha, tol=tol, max_iter=500)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        star = fit_newton(X, y, alpha=alpha, tol=1e-13, max_iter=500)
        p_star = float(star.objective[-1])
        rows = []
        t0 = time.perf_counter()
        res = fit_glm(X, y, loss="logistic", alpha=alpha, tol=tol, max_iter=5000)
        wall = time.perf_counter() - t0
        rows.append((f"default ({res.solver})", res, 0.0, None, None, None, wall))
        t0 = time.perf_counter()
        res = fit_newton(X, y, **kw)
        rows.append(("newton, 1 process", res, 0.0, None, None, None,
                     time.perf_counter() - t0))
    with tempfile.TemporaryDirectory() as path:
        for K in procs:
            _save_shards(path, X, y, K)
            out = run(_rank, K, backend="tcp", args=(path, kw), timeout=600)
            res, setup, coll, nbytes, cs = out[0]
            rows.append((f"newton, tcp K={K}", res, setup, coll, nbytes, cs, res.time))
    print(f"\n{name}: {X.shape[0]} features x {X.shape[1]} examples"
          + (f", {X.nnz} stored" if sp.issparse(X) else "")
          + f", alpha={alpha:g}, P*={p_star:.10g}")
    hdr = (f"{'method':<26}{'it@1e-3':>8}{'s@1e-3':>9}{'it@1e-4':>8}{'s@1e-4':>9}"
           f"{'iters':>6}{'CG':>5}{'total s':>9}{'colls':>7}{'MB sent':>9}{'comm s':>8}")
    print(hdr)
    print("-" * len(hdr))
    for label, res, setup, coll, nbytes, cs, total in rows:
        (i3, t3), (i4, t4) = _first(res, p_star, setup)
        f = lambda v, fmt: (format(v, fmt) if v is not None else "-")  # noqa: E731
        print(f"{label:<26}{f(i3, 'd'):>8}{f(t3, '.3f'):>9}{f(i4, 'd'):>8}{f(t4, '.3f'):>9}"
              f"{res.n_iter:>6d}{res.info.get('cg_iter', 0):>5d}{total:>9.3f}{f(coll, 'd'):>7}"
              f"{f(None if nbytes is None else nbytes / 1e6, '.2f'):>9}{f(cs, '.3f'):>8}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--criteo", type=int, default=200_000, help="Criteo-like examples (0: skip)")
    ap.add_argument("--bits", type=int, default=18, help="hash bits of the Criteo-like matrix")
    ap.add_argument("--dense", type=int, default=100_000, help="dense examples (0: skip)")
    ap.add_argument("--dense-features", type=int, default=100)
    ap.add_argument("--alpha", type=float, default=1e-5)
    ap.add_argument("--tol", type=float, default=1e-7, help="relative duality gap of each run")
    ap.add_argument("--procs", type=int, nargs="+", default=[1, 2, 4])
    a = ap.parse_args(argv)
    print(f"cores: {os.cpu_count()}; ranks one thread each")
    if a.criteo:
        X, y = criteo(a.criteo, a.bits)
        bench("criteo-like", X, y, a.alpha, a.tol, a.procs)
    if a.dense:
        X, y = dense(a.dense, a.dense_features)
        bench("dense", X, y, a.alpha, a.tol, a.procs)


if __name__ == "__main__":
    main()
