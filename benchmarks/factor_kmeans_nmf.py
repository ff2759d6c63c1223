"""k-means and NMF: Roofline against scikit-learn and Spark MLlib, side by side in one run.

For each data set (synthetic power-law sparse data, and scikit-learn's bundled ``digits``:
1797 x 64 dense, non-negative, shipped inside the scikit-learn wheel, never downloaded) and each
peer, the peer runs first with its defaults from a shared start (the same k-means++ centers,
the same NNDSVDa factors); its time and final objective (inertia; ``sqrt(2 D)`` of NMF) are
recorded; then Roofline runs from the same start until its objective is at most the peer's.
The ratio is the peer's time over Roofline's.  Objective evaluations that only the stopping
check needs (minibatch passes, NMF iterations) are excluded from Roofline's time.

Peers: scikit-learn ``KMeans`` (Lloyd and Elkan), ``MiniBatchKMeans``, ``NMF`` (``cd``;
``mu`` with the KL loss), ``MiniBatchNMF``; Spark MLlib ``KMeans`` (RDD API, ``initialModel``
= the shared centers, ``local[2]``; data cached and counted before timing; the JVM start is
not timed).

Roofline's full-batch k-means runs as Lloyd, with Hamerly's and with Elkan's bounds (the same
iterations and labels); these five runs are interleaved ``--repeats`` times and the medians
compared.  Online NMF runs twice: codes solved afresh per minibatch (10 inner iterations),
and ``keep_codes=True`` (scikit-learn's algorithm: each example's codes kept across passes,
one update per minibatch), the latter raced in minibatch steps.

Run::

    python benchmarks/factor_kmeans_nmf.py                       # ~1e6 nonzeros
    python benchmarks/factor_kmeans_nmf.py --examples 200000 --nnz-per-example 50   # 1e7
    python benchmarks/factor_kmeans_nmf.py --no-spark
    python benchmarks/factor_kmeans_nmf.py --no-spark --only kmeans --repeats 3

The machine and its load matter: say which and how loaded next to any figure.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
import warnings

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from roofline import gmat  # noqa: E402
from roofline.datasources import MatSource, Minibatch  # noqa: E402
from roofline.learners import (  # noqa: E402
    KMeans,
    KMeansModel,
    Learner,
    ModelUpdate,
    NMFModel,
    beta_divergence,
    kmeans_plusplus,
    nmf_init,
)

ROWS = []


def row(data, task, peer, t_peer, obj_peer, t_ours, obj_ours, note=""):
    ratio = t_peer / t_ours if t_ours > 0 else math.nan
    ok = obj_ours <= obj_peer * (1 + 1e-6)
    ROWS.append((data, task, peer, t_peer, obj_peer, t_ours, obj_ours, ratio, ok, note))
    print(f"  {task:<22} {peer:<28} peer {t_peer:8.3f}s obj {obj_peer:.6g} | roofline "
          f"{t_ours:8.3f}s obj {obj_ours:.6g} | {ratio:6.2f}x {'' if ok else '(NOT reached)'} "
          f"{note}", flush=True)


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def race(fns, repeats):
    """Each of ``fns`` (name -> callable) run ``repeats`` times, interleaved (A, B, ..., A,
    B, ...); ``{name: (last result, median seconds)}``."""
    times = {name: [] for name in fns}
    out = {}
    for _ in range(max(1, repeats)):
        for name, fn in fns.items():
            out[name], t = timed(fn)
            times[name].append(t)
    return {name: (out[name], float(np.median(times[name]))) for name in fns}


# ---------------------------------------------------------------------------------------------
# k-means


def _passes(model, Xc, n, stop=None):
    """Up to ``n`` minibatch passes (batch 1024) of ``model`` over ``Xc``, stopping after the
    first pass at which ``stop(model)`` holds; (passes run, model).  Without ``stop`` (the
    timed run) one ``Learner.train()`` runs the ``n`` passes, as a user would."""
    if stop is None:
        Learner(MatSource(Xc, batch_size=1024), model, ModelUpdate(), n_passes=n,
                progress=False).train()
        return n, model
    learner = Learner(MatSource(Xc, batch_size=1024), model, ModelUpdate(), n_passes=1,
                      progress=False)
    for p in range(n):
        learner.train()
        if stop is not None and stop(model):
            return p + 1, model
    return n, model


def kmeans_suite(name, Xc, k, a, spark=None):
    """``Xc``: n_features x m (CSC or F-ordered dense), float64."""
    from sklearn.cluster import KMeans as SKKMeans
    from sklearn.cluster import MiniBatchKMeans as SKMiniBatchKMeans
    from sklearn.cluster import kmeans_plusplus as sk_kmeans_plusplus

    Xr = Xc.T.tocsr() if sp.issparse(Xc) else np.ascontiguousarray(Xc.T)
    m = Xr.shape[0]
    print(f"\n{name}: k-means, {m} samples x {Xr.shape[1]} features, "
          f"{Xc.nnz if sp.issparse(Xc) else Xc.size} stored values, k={k}")
    # seeding: both greedy k-means++; potentials differ by chance (not an equal-quality race)
    (_, _), t_sk_pp = timed(lambda: sk_kmeans_plusplus(Xr, k, random_state=0))
    (C0, _), t_pp = timed(lambda: kmeans_plusplus(Xc, k, rng=0))
    print(f"  k-means++ seeding: scikit-learn {t_sk_pp:.3f}s, roofline {t_pp:.3f}s "
          f"({t_sk_pp / t_pp:.2f}x)")
    # Lloyd from the same centers, scikit-learn's tol: the same iterations on both sides;
    # ours also with Hamerly's and Elkan's bounds (the same iterations and labels), against
    # scikit-learn's Lloyd and Elkan; interleaved, median of --repeats runs each
    runs = race({
        "sk": lambda: SKKMeans(k, init=C0, n_init=1, tol=1e-4).fit(Xr),
        "lloyd": lambda: KMeans(k, init=C0, tol=1e-4, algorithm="lloyd").fit(Xr),
        "sk elkan": lambda: SKKMeans(k, init=C0, n_init=1, tol=1e-4,
                                     algorithm="elkan").fit(Xr),
        "hamerly": lambda: KMeans(k, init=C0, tol=1e-4, algorithm="hamerly").fit(Xr),
        "elkan": lambda: KMeans(k, init=C0, tol=1e-4, algorithm="elkan").fit(Xr),
    }, a.repeats)
    (sk, t_sk), (ske, t_ske) = runs["sk"], runs["sk elkan"]
    for alg, task in (("lloyd", "k-means Lloyd"), ("hamerly", "k-means Hamerly"),
                      ("elkan", "k-means Elkan")):
        ours, t_o = runs[alg]
        row(name, task, "sklearn KMeans", t_sk, sk.inertia_, t_o, ours.inertia_,
            f"{sk.n_iter_} / {ours.n_iter_} iterations")
    ours, t_o = runs["elkan"]
    row(name, "k-means Elkan", "sklearn KMeans elkan", t_ske, ske.inertia_, t_o,
        ours.inertia_, f"{ske.n_iter_} / {ours.n_iter_} iterations")
    # minibatch: scikit-learn's defaults (batch 1024, its early stopping) from the same centers
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        skm, t_skm = timed(lambda: SKMiniBatchKMeans(k, init=C0, n_init=1, random_state=0,
                                                     batch_size=1024).fit(Xr))
    target = -skm.score(Xr)

    def km_passes(n, stop=None):
        model = KMeansModel(n_clusters=k, dtype="float64", seed=0)
        model.set_parameters(C0)
        return _passes(model, Xc, n, stop)

    # untimed: the first pass count that reaches the peer's inertia; then timed
    n, _ = km_passes(a.max_passes, lambda mdl: float(mdl.assign(Xc)[1].sum()) <= target)
    (_, model), t_train = timed(lambda: km_passes(n))
    inertia = float(model.assign(Xc)[1].sum())
    row(name, "k-means minibatch", "sklearn MiniBatchKMeans", t_skm, target, t_train, inertia,
        f"{n} passes of batch 1024")
    if spark is not None:
        spark_kmeans(name, Xr, Xc, C0, k, sk.n_iter_, spark)


def spark_kmeans(name, Xr, Xc, C0, k, n_iter, spark):
    from pyspark.mllib.clustering import KMeans as SparkKMeans
    from pyspark.mllib.clustering import KMeansModel as SparkKMeansModel
    from pyspark.mllib.linalg import SparseVector, Vectors

    sc = spark.sparkContext
    n = Xr.shape[1]
    if sp.issparse(Xr):
        vecs = [SparseVector(n, Xr.indices[Xr.indptr[i]:Xr.indptr[i + 1]].tolist(),
                             Xr.data[Xr.indptr[i]:Xr.indptr[i + 1]].tolist())
                for i in range(Xr.shape[0])]
    else:
        vecs = [Vectors.dense(r) for r in Xr]
    rdd = sc.parallelize(vecs, 2).cache()
    rdd.count()
    init = SparkKMeansModel([Vectors.dense(c) for c in C0])
    # n_iter Lloyd iterations from the same centers (epsilon 0: no early stop)
    model, t_sp = timed(lambda: SparkKMeans.train(rdd, k, maxIterations=n_iter,
                                                  initialModel=init, epsilon=0.0))
    cost = float(model.computeCost(rdd))
    # ours: the estimator's default (algorithm="auto": Elkan here), the same iterations
    ours, t_o = timed(lambda: KMeans(k, init=C0, tol=0, max_iter=n_iter).fit(Xr))
    row(name, "k-means auto (Elkan)", "Spark MLlib KMeans local[2]", t_sp, cost, t_o,
        ours.inertia_, f"{n_iter} iterations each")
    rdd.unpersist()


# ---------------------------------------------------------------------------------------------
# NMF


def _nmf_race(Xc, Wt0, H0, target, solver, beta, sweeps, max_iter):
    """Roofline's NMF from (Wt0, H0): an untimed run finds the first iteration N whose
    ``sqrt(2 D)`` is at most ``target`` (to 1e-9 relative: the same iterates as the peer's,
    one sweep per product, differ by rounding); a second run of N iterations is timed.
    Returns (seconds, objective, N)."""

    def fit(n, callback=None):
        model = NMFModel(n_components=Wt0.shape[0], solver=solver, beta_loss=beta,
                         dtype=Xc.dtype.name, cd_sweeps=sweeps)
        model.set_parameters(Wt0)
        return model.fit(Xc, H=np.array(H0, order="F"), max_iter=n, tol=0, callback=callback)

    reached = [max_iter]

    def check(it, Wt, Hc):
        if math.sqrt(2 * beta_divergence(Xc, Wt, Hc, _BETAS[beta])) <= target * (1 + 1e-9):
            reached[0] = it
            return True
        return False

    fit(max_iter, check)
    res, dt = timed(lambda: fit(reached[0]))
    return dt, math.sqrt(2 * res.divergence), reached[0]


_BETAS = {"frobenius": 2, "kullback-leibler": 1}


def nmf_suite(name, Xc, r, a):
    from sklearn.decomposition import NMF as SKNMF
    from sklearn.decomposition import MiniBatchNMF as SKMiniBatchNMF

    Xr = Xc.T.tocsr() if sp.issparse(Xc) else np.ascontiguousarray(Xc.T)
    print(f"\n{name}: NMF, {Xr.shape[0]} samples x {Xr.shape[1]} features, r={r}")
    Wt0, H0 = nmf_init(Xc, r, "nndsvda", rng=0)
    W_sk, H_sk = np.ascontiguousarray(H0.T), np.ascontiguousarray(Wt0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for solver, beta in (("cd", "frobenius"), ("mu", "kullback-leibler")):
            sk, t_sk = timed(lambda s=solver, b=beta: SKNMF(
                r, init="custom", solver=s, beta_loss=b, tol=1e-4, max_iter=200).fit(
                Xr, W=W_sk.copy(), H=H_sk.copy()))
            target = sk.reconstruction_err_
            peer = f"sklearn NMF {solver} {'KL' if beta != 'frobenius' else 'Frob'}"
            # cd: one HALS sweep per product (scikit-learn's iterates) and the default,
            # Gillis and Glineur's accelerated HALS ("auto")
            for sweeps in ((1, "auto") if solver == "cd" else (1,)):
                t_o, obj, n_it = _nmf_race(Xc, Wt0, H0, target, solver, beta, sweeps,
                                           4 * sk.n_iter_ + 10)
                note = f"{sk.n_iter_} / {n_it} iterations" + (
                    f", HALS sweeps {sweeps}" if solver == "cd" else "")
                row(name, f"NMF {solver}", peer, t_sk, target, t_o, obj, note)
        skm, t_skm = timed(lambda: SKMiniBatchNMF(r, init="custom", batch_size=1024,
                                                  random_state=0).fit(
            Xr, W=W_sk.copy(), H=H_sk.copy()))
    target = skm.reconstruction_err_

    def err_of(model):
        H = model.transform(Xc, max_iter=50, tol=1e-4)
        return math.sqrt(2 * beta_divergence(Xc, model.components, H, 2))

    def nmf_passes(n, stop=None):
        model = NMFModel(n_components=r, dtype=Xc.dtype.name, inner_iter=10,
                         rho=0.7 ** (min(1024, Xc.shape[1]) / Xc.shape[1]))
        model.set_parameters(Wt0)
        return _passes(model, Xc, n, stop)

    n, _ = nmf_passes(a.max_passes, lambda mdl: err_of(mdl) <= target)
    (_, model), t_train = timed(lambda: nmf_passes(n))
    row(name, "NMF minibatch", "sklearn MiniBatchNMF", t_skm, target, t_train, err_of(model),
        f"{n} passes of batch 1024 (objective: codes by transform)")

    # kept codes (keep_codes=True, one update per minibatch: scikit-learn's algorithm, its
    # start W = the NNDSVDa codes), raced in minibatch steps: the first step count (checked
    # every nb / 8 steps) whose objective reaches the peer's, then timed
    m, bs = Xc.shape[1], 1024
    nb = -(-m // bs)

    def kept_steps(n_steps, stop=None, every=1):
        model = NMFModel(n_components=r, dtype=Xc.dtype.name, inner_iter=1, keep_codes=True,
                         rho=0.7 ** (min(bs, m) / m))
        model.set_parameters(Wt0)
        model.codes = np.array(H0, order="F")
        for step in range(n_steps):
            s0 = (step % nb) * bs
            Xb = (gmat.slice_columns(Xc, s0, min(s0 + bs, m), "X") if sp.issparse(Xc)
                  else Xc[:, s0:s0 + bs])
            model.update(Minibatch(Xb, start=s0))
            if stop is not None and (step + 1) % every == 0 and stop(model):
                return step + 1, model
        return n_steps, model

    n, _ = kept_steps(a.max_passes * 10 * nb, lambda mdl: err_of(mdl) <= target,
                      max(1, nb // 8))
    (_, model), t_train = timed(lambda: kept_steps(n))
    row(name, "NMF minibatch kept codes", "sklearn MiniBatchNMF", t_skm, target, t_train,
        err_of(model), f"{skm.n_steps_} / {n} steps of batch 1024 (ours: codes by transform)")


# ---------------------------------------------------------------------------------------------


def start_spark():
    from _peers import why_no_pyspark

    why = why_no_pyspark()
    if why:
        print(f"Spark skipped: {why}")
        return None
    from pyspark.sql import SparkSession

    t = time.perf_counter()
    spark = (SparkSession.builder.master("local[2]").appName("roofline-kmeans")
             .config("spark.driver.memory", "4g").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    print(f"Spark local[2] started in {time.perf_counter() - t:.1f}s (not timed)")
    return spark


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--examples", type=int, default=50_000)
    ap.add_argument("--features", type=int, default=20_000)
    ap.add_argument("--nnz-per-example", type=float, default=20.0)
    ap.add_argument("--k", type=int, default=20, help="k-means clusters")
    ap.add_argument("--rank", type=int, default=10, help="NMF components")
    ap.add_argument("--max-passes", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=1,
                    help="full-batch k-means: interleaved runs per contender (median)")
    ap.add_argument("--no-spark", action="store_true")
    ap.add_argument("--only", choices=("kmeans", "nmf"), default=None)
    a = ap.parse_args()

    now = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"{platform.node()}: {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f} at start; {now}")
    X = gmat.powerlaw_csc(a.features, a.examples, a.nnz_per_example, dtype=np.float64,
                          random_state=0)
    X.data = np.abs(X.data) + 0.1  # non-negative values for NMF
    from sklearn.datasets import load_digits

    digits = np.asfortranarray(load_digits().data.T.astype(np.float64))
    data = [(f"power-law {X.nnz:.2g} nnz", X), ("digits (sklearn)", digits)]
    # warm the numba kernels (compiled or loaded from the cache) outside the timings
    small = X[:, :2000].tocsc()
    for Xs in (small.T.tocsr(), digits.T.copy()):  # sparse and dense, every algorithm
        init = Xs[:3].toarray() if sp.issparse(Xs) else Xs[:3]
        for alg in ("lloyd", "hamerly", "elkan"):
            for cols in (Xs, Xs[:200]):  # the parallel and the serial kernels
                KMeans(3, init=init, max_iter=3, algorithm=alg).fit(cols)
    NMFModel(n_components=2, dtype="float64", solver="cd").fit(small, max_iter=2)
    NMFModel(n_components=2, dtype="float64", beta_loss="kullback-leibler").fit(small,
                                                                                max_iter=2)
    spark = None if (a.no_spark or a.only == "nmf") else start_spark()
    try:
        for name, Xc in data:
            if a.only != "nmf":
                kmeans_suite(name, Xc, a.k if Xc.shape[0] > 64 else 10, a, spark)
            if a.only != "kmeans":
                nmf_suite(name, Xc, a.rank, a)
    finally:
        if spark is not None:
            spark.stop()
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")
    print("\n| data | task | peer | peer s | peer objective | Roofline s | Roofline objective |"
          " ratio | reached | note |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for d, task, peer, tp, op, to, oo, ratio, ok, note in ROWS:
        print(f"| {d} | {task} | {peer} | {tp:.3f} | {op:.6g} | {to:.3f} | {oo:.6g} | "
              f"{ratio:.2f}x | {'yes' if ok else 'no'} | {note} |")


if __name__ == "__main__":
    main()
