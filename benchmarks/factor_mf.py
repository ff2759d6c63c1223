"""Matrix factorization by ALS: Roofline against ``implicit``'s CPU ALS and Spark MLlib's ALS,
side by side in one run (issue 36).

Two comparisons per data set, each at the same factors, regularisation and iterations, every
objective evaluated by one function (``roofline.learners._mf.als_objective``) at each
library's own factors after each iteration:

* implicit feedback (Hu, Koren and Volinsky, confidence ``1 + alpha s``, conjugate gradient with
  3 steps per row) against ``implicit.cpu.als.AlternatingLeastSquares`` (given the data
  ``1 + alpha s`` and its ``alpha = 1``: the same objective), both on ``--threads`` threads
  (BLAS on one, as ``implicit`` asks);
* explicit ratings (ALS-WR: ``lam * n_u``, ``lam * n_i`` regularisation, no biases) against
  Spark MLlib's ``ALS`` in ``local[--threads]`` mode.

Reported per library: seconds per iteration (the iterations' own time: the set-up, for
``implicit`` its transpose of the data, for Spark the DataFrame and the first job, for Roofline
its transposes and, in the first fit of a process, loading its kernels from numba's cache and
starting the thread pool (about 30 ms), is shown apart), the final training objective, and
Roofline's time to reach the peer's final objective (``ratio`` = peer's time for its iterations
/ ours to the same objective). Explicit feedback runs twice on our side: exact Cholesky solves
(Spark's algorithm) and 3 warm-started CG steps per row. Our iteration's GFLOP/s (Cholesky:
``2 nnz k (k + 1)`` for the Gram updates of both sides and ``n k^3 / 3`` for the factorisations; CG:
``4 (cg_steps + 1)`` passes of ``2 k`` flops over each nonzero, plus ``2 k^2`` per row and pass
for implicit feedback's ``YtY``) is given with its fraction of the machine's measured float32
FMA peak (``gmat.machine_roofline().flops32``): these solves are latency- and
loop-overhead-bound at ``k = 64``, far from the FMA ceiling.

Data: synthetic power-law (Zipf 0.8 over users and items) ratings ``3 + u.v + noise`` at
``--sizes`` nonzeros, and MovieLens 100k as shipped inside the ``recbole`` wheel
(``recbole/dataset_example/ml-100k/ml-100k.inter``; ``pip install --no-deps recbole``; never
downloaded here).  Run::

    python benchmarks/factor_mf.py --sizes 1e5,1e6 --factors 64 --iters 10
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import platform
import sys
import time

import numpy as np
import scipy.sparse as sp

from roofline import gmat
from roofline.learners import MatrixFactorization, als_objective


def powerlaw_ratings(nnz, seed=0, rank=8):
    """Users x items CSR with ~``nnz`` ratings at Zipf(0.8) users and items."""
    rng = np.random.default_rng(seed)
    n_users = max(100, int(nnz / 20))
    n_items = max(50, int(np.sqrt(nnz) * 20))
    pu = 1.0 / np.arange(1, n_users + 1) ** 0.8
    pi = 1.0 / np.arange(1, n_items + 1) ** 0.8
    u = rng.choice(n_users, nnz, p=pu / pu.sum()).astype(np.int64)
    i = rng.choice(n_items, nnz, p=pi / pi.sum()).astype(np.int64)
    key = np.unique(u * n_items + i)
    u, i = key // n_items, key % n_items
    U = rng.normal(size=(n_users, rank)) / np.sqrt(rank)
    V = rng.normal(size=(n_items, rank))
    r = 3.0 + np.einsum("ij,ij->i", U[u], V[i]) + 0.3 * rng.normal(size=u.size)
    X = sp.csr_matrix((r.astype(np.float32), (u, i)), shape=(n_users, n_items))
    return f"power-law {X.nnz:.1e} nnz ({n_users} x {n_items})", X


def movielens_100k():
    """MovieLens 100k from the recbole wheel, or None when it is not installed."""
    spec = importlib.util.find_spec("recbole")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(spec.submodule_search_locations[0],
                        "dataset_example", "ml-100k", "ml-100k.inter")
    if not os.path.exists(path):
        return None
    a = np.loadtxt(path, skiprows=1, usecols=(0, 1, 2))
    _, u = np.unique(a[:, 0], return_inverse=True)
    _, i = np.unique(a[:, 1], return_inverse=True)
    X = sp.csr_matrix((a[:, 2].astype(np.float32), (u, i)))
    return f"MovieLens 100k ({X.shape[0]} x {X.shape[1]}, {X.nnz} ratings)", X


def _items_users(X):
    return sp.csc_matrix((X.data, X.indices, X.indptr), shape=X.shape[::-1])


def _reach(times, objs, target):
    """Cumulative seconds at the first objective <= target (None when never)."""
    for t, f in zip(np.cumsum(times), objs, strict=True):
        if f <= target * (1 + 1e-6):
            return float(t)
    return None


def _flops_iter(X, k, cg_steps=None, implicit=False):
    nnz = X.nnz
    n = X.shape[0] + X.shape[1]
    if cg_steps is None:  # Cholesky: Gram updates (both sides) and factorisations
        return 2 * nnz * k * (k + 1) + n * k ** 3 / 3
    # CG: (cg_steps + 1) matvecs per row, each 2 flops x 2 k per nonzero (dot and axpy), plus
    # the YtY product (2 k^2) for implicit feedback; both sides
    return (cg_steps + 1) * (4 * k * 2 * nnz + (2 * k * k * n if implicit else 0))


def ours(X, k, lam, iters, *, implicit, alpha, threads, max_iters, use_cg="auto"):
    """Our fit with one snapshot objective per iteration; returns the iterations' times, the
    objectives, the fit's wall time without the callbacks (set-up included: the transposes and,
    in the first fit of a process, loading the kernels from numba's cache) and the model."""
    times, objs = [], []
    m = MatrixFactorization(factors=k, regularization=lam, implicit=implicit, alpha=alpha,
                            biases=False, iterations=max_iters, num_threads=threads,
                            random_state=0, use_cg=use_cg)
    last = [0.0]
    in_cb = [0.0]

    def cb(it, seconds):
        t = time.perf_counter()
        times.append(seconds - last[0])
        last[0] = seconds
        objs.append(m.objective())
        in_cb[0] += time.perf_counter() - t

    t0 = time.perf_counter()
    m.fit(X, callback=cb)
    wall = time.perf_counter() - t0 - in_cb[0]
    return np.array(times), np.array(objs), wall, m


def implicit_peer(X, k, lam, iters, alpha, threads):
    from implicit.cpu.als import AlternatingLeastSquares
    from threadpoolctl import threadpool_limits

    C = X.copy()
    C.data = (1.0 + alpha * C.data).astype(np.float32)
    S = _items_users(X)
    times, snaps = [], []
    with threadpool_limits(1, "blas"):
        m = AlternatingLeastSquares(factors=k, regularization=lam, alpha=1.0, iterations=iters,
                                    random_state=0, num_threads=threads,
                                    calculate_training_loss=False)

        def cb(it, seconds, loss):
            times.append(seconds)
            snaps.append((m.user_factors.copy(), m.item_factors.copy()))

        t0 = time.perf_counter()
        m.fit(C, show_progress=False, callback=cb)
        wall = time.perf_counter() - t0
    objs = [als_objective(S, it.T.astype(np.float64), uf.T.astype(np.float64),
                          regularization=lam, implicit=True, alpha=alpha, reg_weighting="none")
            for uf, it in snaps]
    return np.array(times), np.array(objs), wall


def spark_session(threads):
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(f"local[{threads}]").appName("roofline-mf")
             .config("spark.driver.memory", "4g").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", str(threads)).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def spark_peer(spark, X, k, lam, iters, threads):
    import pandas as pd

    coo = X.tocoo()
    t0 = time.perf_counter()
    spark.conf.set("spark.sql.execution.arrow.pyspark.enabled", "true")
    pdf = pd.DataFrame({"user": coo.row.astype(np.int32), "item": coo.col.astype(np.int32),
                        "rating": coo.data.astype(np.float32)})
    df = spark.createDataFrame(pdf).repartition(threads).cache()
    df.count()
    try:
        return _spark_fits(df, X, k, lam, iters, threads, t0)
    finally:
        df.unpersist()


def _spark_fits(df, X, k, lam, iters, threads, t0):
    from pyspark.ml.recommendation import ALS

    setup = time.perf_counter() - t0

    def fit(n):
        als = ALS(rank=k, maxIter=n, regParam=lam, implicitPrefs=False, userCol="user",
                  itemCol="item", ratingCol="rating", seed=0, numUserBlocks=threads,
                  numItemBlocks=threads)
        t = time.perf_counter()
        model = als.fit(df)
        uf = model.userFactors.toPandas()
        itf = model.itemFactors.toPandas()
        return time.perf_counter() - t, uf, itf

    if X.nnz <= 200_000:
        fit(1)  # warm-up on the small data sets (the first one warms the JVM's JIT)
    t1, _, _ = fit(1)
    tn, uf, itf = fit(iters)
    U = np.zeros((k, X.shape[0]))
    V = np.zeros((k, X.shape[1]))
    U[:, uf["id"].to_numpy()] = np.stack(uf["features"].to_numpy()).T
    V[:, itf["id"].to_numpy()] = np.stack(itf["features"].to_numpy()).T
    f = als_objective(_items_users(X), V, U, regularization=lam, reg_weighting="counts")
    return {"per_iter": (tn - t1) / max(1, iters - 1), "total": tn, "one": t1, "setup": setup,
            "objective": f}


def parser():
    """The command line (also read by ``benchmarks/factor_models.py``)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1e5,1e6", help="synthetic nonzeros, comma-separated")
    ap.add_argument("--factors", type=int, default=64)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--lam", type=float, default=0.05, help="regularization (both problems)")
    ap.add_argument("--alpha", type=float, default=1.0, help="implicit confidence slope")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--spark-max-nnz", type=float, default=2e6,
                    help="run Spark on data sets up to this many nonzeros")
    ap.add_argument("--no-spark", action="store_true")
    ap.add_argument("--no-movielens", action="store_true")
    ap.add_argument("--our-iters", type=int, default=4,
                    help="Roofline runs up to this many times --iters iterations to reach the "
                         "peer's final objective (ALS from another random start may need more "
                         "iterations than the peer's)")
    return ap


def datasets(args):
    """``[(name, users x items CSR)]``: the synthetic sizes and MovieLens 100k."""
    data = [powerlaw_ratings(int(float(s)), seed=1) for s in args.sizes.split(",") if s]
    if not args.no_movielens:
        ml = movielens_100k()
        if ml is None:
            print("MovieLens 100k: recbole not installed (pip install --no-deps recbole)")
        else:
            data.append(ml)
    return data


def _result(model, data, peer, peer_s, quality, ours_s, how, fraction):
    return {"model": model, "data": data, "peer": peer, "peer_s": peer_s, "quality": quality,
            "ours_s": ours_s, "how": how,
            "ratio": peer_s / ours_s if ours_s else math.nan, "fraction": fraction}


def bench(data, args):
    """Both comparisons on every data set, printed; returns one result dict per (data, peer):
    ``model, data, peer, peer_s, quality`` (the peer's final objective), ``ours_s`` (our time to
    it, None when not reached), ``how``, ``ratio``, ``fraction`` (of the float32 FMA peak)."""
    k, lam, iters, th = args.factors, args.lam, args.iters, args.threads
    mach = gmat.machine_roofline()
    print(f"# {platform.node()} {mach.cpu}, {os.cpu_count()} cores, {th} threads; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; k={k} lam={lam} "
          f"iters={iters}; FMA peak {mach.flops32 / 1e9:.0f} GFLOP/s (float32)")
    print("# per-iteration times: the fastest iteration of each run (the machine is shared)")
    results = []

    # 1. implicit feedback against implicit (before any JVM exists)
    for name, X in data:
        print(f"\n## {name}: implicit feedback (|rating| as strength), CG 3 steps")
        Xi = X.copy()
        Xi.data = np.abs(Xi.data)
        pt, pobj, pwall = implicit_peer(Xi, k, lam, iters, args.alpha, th)
        ot, oobj, owall, m = ours(Xi, k, lam, iters, implicit=True, alpha=args.alpha,
                                  threads=th, max_iters=args.our_iters * iters)
        reach = _reach(ot, oobj, pobj[-1])
        gf = _flops_iter(Xi, k, 3, implicit=True) / ot.min() / 1e9
        print(f"  implicit ALS : {pt.min():8.3f} s/iter  final objective {pobj[-1]:.6e} "
              f"({pt.sum():.2f} s for {iters} iterations, fit {pwall:.2f} s)")
        print(f"  Roofline ALS : {ot.min():8.3f} s/iter  objective after {iters}: "
              f"{oobj[iters - 1]:.6e}  ({gf:.1f} GFLOP/s, {gf * 1e9 / mach.flops32:.1%} of "
              f"peak; set-up {owall - ot.sum():.3f} s)")
        print(f"    per-iteration ratio {pt.min() / ot.min():.2f}x; "
              + (f"time to implicit's final objective {reach:.2f} s: ratio "
                 f"{pt.sum() / reach:.2f}x" if reach else
                 f"implicit's final objective not reached in {args.our_iters * iters} iterations "
                 f"(best {oobj.min():.6e})"))
        results.append(_result("MF implicit ALS", name, "implicit ALS", float(pt.sum()),
                               float(pobj[-1]), reach, "CG 3", gf * 1e9 / mach.flops32))

    # 2. Spark on every data set, then its session stopped, 3. ours on the same problems
    spark_runs = []
    if not args.no_spark:
        try:
            spark = spark_session(th)
        except Exception as e:  # noqa: BLE001 - report and go on without the peer
            print(f"spark: not available ({e})")
        else:
            for name, X in data:
                if X.nnz <= args.spark_max_nnz:
                    spark_runs.append((name, X, spark_peer(spark, X, k, lam, iters, th)))
                else:
                    print(f"\n## {name}: Spark skipped above {args.spark_max_nnz:.0e} nonzeros")
            spark.stop()
    for name, X, sp_res in spark_runs:
        print(f"\n## {name}: explicit ALS-WR")
        print(f"  Spark local[{th}]     : {sp_res['per_iter']:8.3f} s/iter  final objective "
              f"{sp_res['objective']:.6e} (fit of {iters} iterations {sp_res['total']:.2f} s, of "
              f"1 iteration {sp_res['one']:.2f} s; DataFrame {sp_res['setup']:.2f} s)")
        best = None
        for label, use_cg in (("Cholesky", False), ("CG 3 steps", True)):
            ot, oobj, owall, m = ours(X, k, lam, iters, implicit=False, alpha=0.0, threads=th,
                                      max_iters=args.our_iters * iters, use_cg=use_cg)
            reach = _reach(ot, oobj, sp_res["objective"])
            gf = _flops_iter(X, k, 3 if use_cg else None) / ot.min() / 1e9
            print(f"  Roofline {label:<10} : {ot.min():8.3f} s/iter  objective after {iters}: "
                  f"{oobj[iters - 1]:.6e}  ({gf:.1f} GFLOP/s, {gf * 1e9 / mach.flops32:.1%} of "
                  f"peak)")
            print(f"    per-iteration ratio {sp_res['per_iter'] / ot.min():.1f}x; "
                  + (f"time to Spark's final objective {reach:.3f} s: ratio "
                     f"{sp_res['total'] / reach:.1f}x (Spark's whole fit)" if reach else
                     f"Spark's final objective not reached in {args.our_iters * iters} iterations "
                     f"(best {oobj.min():.6e})"))
            if reach and (best is None or reach < best[0]):
                best = (reach, label, gf * 1e9 / mach.flops32)
        results.append(_result("MF explicit ALS-WR", name, f"Spark ALS local[{th}]",
                               sp_res["total"], sp_res["objective"],
                               best[0] if best else None, best[1] if best else "",
                               best[2] if best else math.nan))
    return results


def main(argv=None):
    args = parser().parse_args(argv)
    print(f"# command: python {' '.join(sys.argv)}")
    bench(datasets(args), args)


if __name__ == "__main__":
    main()
