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
and its seconds inside collectives (``colls``, ``/iter``: per Newton iteration; ``cpu s``: the
CPU seconds of the fit, the largest over the ranks, their transports' reader threads included:
the figure to compare on a machine whose other load makes wall seconds swing).

The ranks' times are the processes' own (process start and data loading excluded); on a
machine with fewer cores than ranks the processes share cores, and the loopback TCP costs
stand in for a network's.

Peers (issue 31), side by side on the same data and objective, each optional (skipped with a
line saying why where its package is missing; ``--peers`` picks them):

* ``spark``: Apache Spark MLlib ``LogisticRegression`` (L-BFGS) in ``local[K]`` mode,
  ``regParam = alpha`` (``= 1 / (C n)``), ``elasticNetParam=0``, ``standardization=False``,
  ``fitIntercept=True``: exactly our objective (``_peers.spark_reg_param``).  The data become
  a cached, counted DataFrame (libsvm ``SparseVector`` rows / Arrow ``DenseVector`` rows)
  before timing.  A first fit (``maxIter`` up to ``--spark-max-iter``) gives Spark's own
  objective history, hence the iterations ``i`` at which each target is met; the times are
  those of fits with ``maxIter=i`` (best of ``--repeat``), and the suboptimality reported is
  our objective evaluated at the coefficients those fits return.
* ``dask``: dask-ml ``LogisticRegression`` on a ``LocalCluster(n_workers=K,
  threads_per_worker=1)``, the data as dask arrays in K row chunks (pydata ``sparse`` chunks
  for sparse data), ``C = 1 / (alpha n)``, ``normalize=False``: dask-glm minimises the summed
  loss plus ``||beta||^2 / (2 C)`` with the intercept regularised (``_peers.dask_ml_C``), so its
  optimum sits a measured, negligible distance from ours (printed).  Solvers ``lbfgs``,
  ``newton`` (it ignores the regulariser: the unregularised problem; dense data only, it forms
  the d x d Hessian) and ``admm`` (each under a ``--peer-cap`` seconds cap: "did not reach"
  past it).  Their iterates are recorded as they run (L-BFGS's callback, Newton's margins,
  ADMM's consensus step); the seconds spent evaluating them are excluded.

For every peer run: seconds to 1e-3 and 1e-4 relative suboptimality (or the suboptimality it
reached), and ``peer s / roofline s``, Roofline's being distributed Newton at the same K.
Session / cluster start and data conversion are excluded from those times and printed apart.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
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
        cpu = time.process_time()
        res = fit_newton(X, y, comm=comm, n_jobs=1, **kw)
        cpu = time.process_time() - cpu
    info = res.info
    return (res, info["setup"]["seconds"], info["collectives"], info["bytes_sent"],
            info["comm_seconds"], cpu)


def _save_shards(path, X, y, K):
    for r, cols in enumerate(np.array_split(np.arange(X.shape[1]), K)):
        f = os.path.join(path, f"shard{K}_{r}.npz")
        if sp.issparse(X):
            Xk = X[:, cols]
            np.savez(f, data=Xk.data, indices=Xk.indices, indptr=Xk.indptr,
                     shape=np.array(Xk.shape), y=y[cols])
        else:
            np.savez(f, X=np.asfortranarray(X[:, cols]), y=y[cols])


def _best(runs, p_star):
    """The run of ``runs`` (``(label, res, setup, ...)`` rows) first to reach the last target."""
    def key(row):
        t = _first(row[1], p_star, row[2])[-1][1]
        return (t is None, t if t is not None else row[6])
    return min(runs, key=key)


def _run_ranks(backend, K, path, kw):
    """Rank 0's ``_rank`` output of a K-rank job on ``backend`` (``tcp``, ``mpi``: processes
    from :func:`roofline.comm.run`; ``dask``: a LocalCluster of K one-thread workers, started
    before and closed after, :func:`roofline.comm.run_on_dask`), its CPU seconds replaced by
    the largest of any rank's (the fit's, reader threads included)."""
    from roofline.comm import run

    if backend != "dask":
        out = run(_rank, K, backend=backend, args=(path, kw), timeout=600)
    else:
        import distributed

        from roofline.comm import run_on_dask

        with distributed.LocalCluster(n_workers=K, threads_per_worker=1, processes=True,
                                      dashboard_address=":0") as cluster, \
                distributed.Client(cluster) as client:
            out = run_on_dask(client, _rank, n=K, args=(path, kw), timeout=600)
    return (*out[0][:-1], max(o[-1] for o in out))


def bench(name, X, y, alpha, tol, procs, repeat=1, backends=("tcp",)):
    """Roofline's rows for one problem: ``(p_star, star, rows)``, best of ``repeat`` each."""
    from roofline.glm import fit_glm

    kw = dict(alpha=alpha, tol=tol, max_iter=500)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        star = fit_newton(X, y, alpha=alpha, tol=1e-13, max_iter=500)
        p_star = float(star.objective[-1])
        rows = []
        runs = []
        for _ in range(repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            res = fit_glm(X, y, loss="logistic", alpha=alpha, tol=tol, max_iter=5000)
            runs.append((f"default ({res.solver})", res, 0.0, None, None, None,
                         time.perf_counter() - t0, time.process_time() - c0))
        rows.append(_best(runs, p_star))
        runs = []
        for _ in range(repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            res = fit_newton(X, y, **kw)
            runs.append(("newton, 1 process", res, 0.0, None, None, None,
                         time.perf_counter() - t0, time.process_time() - c0))
        rows.append(_best(runs, p_star))
    with tempfile.TemporaryDirectory() as path:
        for K in procs:
            _save_shards(path, X, y, K)
            for backend in backends:
                runs = []
                for _ in range(repeat):
                    res, setup, coll, nbytes, cs, cpu = _run_ranks(backend, K, path, kw)
                    runs.append((f"newton, {backend} K={K}", res, setup, coll, nbytes, cs,
                                 res.time, cpu))
                rows.append(_best(runs, p_star))
    return p_star, star, rows


def print_table(name, X, alpha, p_star, rows):
    print(f"\n{name}: {X.shape[0]} features x {X.shape[1]} examples"
          + (f", {X.nnz} stored" if sp.issparse(X) else "")
          + f", alpha={alpha:g}, P*={p_star:.10g}")
    hdr = (f"{'method':<26}{'it@1e-3':>8}{'s@1e-3':>9}{'it@1e-4':>8}{'s@1e-4':>9}"
           f"{'iters':>6}{'CG':>5}{'total s':>9}{'cpu s':>7}{'colls':>7}{'/iter':>6}"
           f"{'MB sent':>9}{'comm s':>8}")
    print(hdr)
    print("-" * len(hdr))
    for label, res, setup, coll, nbytes, cs, total, cpu in rows:
        (i3, t3), (i4, t4) = _first(res, p_star, setup)
        per = None if coll is None else coll / max(res.n_iter, 1)
        print(f"{label:<26}{_f(i3, 'd'):>8}{_f(t3, '.3f'):>9}{_f(i4, 'd'):>8}{_f(t4, '.3f'):>9}"
              f"{res.n_iter:>6d}{res.info.get('cg_iter', 0):>5d}{total:>9.3f}{cpu:>7.3f}"
              f"{_f(coll, 'd'):>7}{_f(per, '.1f'):>6}"
              f"{_f(None if nbytes is None else nbytes / 1e6, '.2f'):>9}{_f(cs, '.3f'):>8}")


def _f(v, fmt):
    return format(v, fmt) if v is not None else "-"


# ---------------------------------------------------------------------------------------------
# peers


class Problem:
    """One problem of the run: data, reference optimum, Roofline's rows and the peers' rows."""

    def __init__(self, name, X, y, alpha):
        self.name, self.X, self.y, self.alpha = name, X, y, alpha
        self.n = X.shape[1]
        self.p_star = self.star = None
        self.rows = []   # Roofline's
        self.peer_rows = []  # (system, K, solver, [(it, s, rel) per target], reached, total, note)
        self.setup = []  # (system, K, what, seconds)
        self.checks = []  # (system, K, line)

    def rel(self, w, b):
        from _peers import l2_logistic_objective

        P = l2_logistic_objective(self.X, self.y, w, b, self.alpha)
        return (P - self.p_star) / abs(self.p_star), P

    def roofline_s(self, K):
        for label, res, setup, *_ in self.rows:
            if label == f"newton, tcp K={K}":
                return [t for _, t in _first(res, self.p_star, setup)]
        return [None] * len(TARGETS)


def _hits(rels):
    """Index of the first entry of ``rels`` at or below each target (``None``: never)."""
    out = []
    for t in TARGETS:
        h = np.flatnonzero(np.asarray(rels) <= t)
        out.append(int(h[0]) if h.size else None)
    return out


def spark_peer(problems, procs, repeat, max_iter, tmp):
    from _peers import spark_dataframe, spark_reg_param
    from pyspark.ml.classification import LogisticRegression
    from pyspark.sql import SparkSession

    def lr(pb, it, tol):
        return LogisticRegression(maxIter=it, tol=tol, regParam=spark_reg_param(pb.alpha),
                                  elasticNetParam=0.0, standardization=False,
                                  fitIntercept=True, family="binomial")

    for K in procs:
        t0 = time.perf_counter()
        spark = (SparkSession.builder.master(f"local[{K}]").appName("roofline-peers")
                 .config("spark.driver.memory", "4g").config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", str(K)).getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        start = time.perf_counter() - t0
        for pb in problems:
            pb.setup.append(("spark", K, "session start (JVM on first)", start))
            t0 = time.perf_counter()
            df = spark_dataframe(spark, pb.X, pb.y, K, tmp)
            pb.setup.append(("spark", K, "to a cached DataFrame", time.perf_counter() - t0))
            lr(pb, 3, 1e-12).fit(df)  # warm-up: the JIT and the first jobs
            t0 = time.perf_counter()
            m = lr(pb, max_iter, 1e-10).fit(df)
            t_trace = time.perf_counter() - t0
            hist = np.asarray(m.summary.objectiveHistory)
            w, b = m.coefficients.toArray(), float(m.intercept)
            rel_end, P_end = pb.rel(w, b)
            rels = (hist - pb.p_star) / abs(pb.p_star)
            pb.checks.append((
                "spark", K,
                f"{len(hist) - 1} iterations: Spark's own final objective {hist[-1]:.12g}, "
                f"ours at Spark's coefficients {P_end:.12g} (differ {abs(hist[-1] - P_end):.1e}); "
                f"relative suboptimality {rel_end:.2e}; ||w - w*|| / ||w*|| = "
                f"{np.linalg.norm(w - pb.star.coef) / np.linalg.norm(pb.star.coef):.1e}, "
                f"b - b* = {b - pb.star.intercept:.1e}"))
            out, seen = [], {}
            for i in _hits(rels):
                if i is None:
                    out.append((None, None, None))
                    continue
                if i not in seen:
                    best = None
                    for _ in range(repeat):
                        t0 = time.perf_counter()
                        mi = lr(pb, max(i, 1), 1e-12).fit(df)
                        dt = time.perf_counter() - t0
                        if best is None or dt < best[0]:
                            best = (dt, mi)
                    r, _ = pb.rel(best[1].coefficients.toArray(), float(best[1].intercept))
                    seen[i] = (i, best[0], r)
                out.append(seen[i])
            reached = float(np.min(rels))
            pb.peer_rows.append(("spark", K, "lbfgs", out, reached, t_trace, ""))
            df.unpersist()
        spark.stop()


class _Stop(Exception):
    pass


class _Tracer:
    """Records a solver's iterates as it runs, evaluates them with the clock stopped, and
    stops the run at the last target or past the cap."""

    def __init__(self, pb, cap):
        self.pb, self.cap = pb, cap
        self.t0 = time.perf_counter()
        self.paused = 0.0
        self.trace = []  # (seconds, rel)
        self.last = None

    def record(self, beta):
        t = time.perf_counter() - self.t0 - self.paused
        t1 = time.perf_counter()
        beta = np.asarray(beta, np.float64).ravel().copy()
        self.last = beta
        rel, _ = self.pb.rel(beta[:-1], beta[-1])
        self.trace.append((t, rel))
        self.paused += time.perf_counter() - t1
        if rel <= min(TARGETS):
            raise _Stop("target")
        if t > self.cap:
            raise _Stop("cap")

    def result(self):
        rels = [r for _, r in self.trace]
        out = []
        for i in _hits(rels):
            out.append((None, None, None) if i is None else (i, self.trace[i][0], rels[i]))
        reached = min(rels) if rels else float("nan")
        total = self.trace[-1][0] if self.trace else float("nan")
        return out, reached, total


def _dask_fit(pb, Xd, yd, solver, cap, client, max_iter):
    """One dask-ml fit under a tracer; ``(targets, reached, seconds, note)``."""
    import dask_glm.algorithms as A
    import dask_glm.regularizers as R
    from _peers import dask_ml_C
    from dask_ml.linear_model import LogisticRegression

    tr = _Tracer(pb, cap)
    note = ""
    saved = (A.fmin_l_bfgs_b, A.dot, R.L2.proximal_operator)
    lbfgs, dot, prox = saved

    if solver == "lbfgs":
        def patched(*a, **k):
            k["callback"] = tr.record
            return lbfgs(*a, **k)
        A.fmin_l_bfgs_b = patched
    elif solver == "newton":
        def patched(a, b):  # the margins of each new iterate
            if isinstance(b, np.ndarray) and b.ndim == 1:
                tr.record(b)
            return dot(a, b)
        A.dot = patched
    else:
        def patched(self, beta, t):
            z = prox(self, beta, t)
            tr.record(z)
            return z
        R.L2.proximal_operator = patched
    kw = {"normalize": False}
    if solver == "admm":
        kw.update(abstol=1e-12, reltol=1e-12)
    est = LogisticRegression(solver=solver, C=dask_ml_C(pb.alpha, pb.n), fit_intercept=False,
                             tol=1e-12, max_iter=max_iter, solver_kwargs=kw)
    watchdog = None
    if solver == "admm":  # one ADMM step can outlast the cap: the client is closed under it
        watchdog = threading.Timer(cap + 5, client.close)
        watchdog.start()
    tr.t0 = time.perf_counter()
    try:
        est.fit(Xd, yd)
        tr.record(est.coef_)
    except _Stop as e:
        note = "" if str(e) == "target" else f"cap {cap:g} s"
    except Exception as e:  # noqa: BLE001 - a peer's failure is a row, not the end of the run
        note = f"stopped: {type(e).__name__}" + ("" if client.status == "running"
                                                 else f" (cap {cap:g} s)")
    finally:
        A.fmin_l_bfgs_b, A.dot, R.L2.proximal_operator = saved
        if watchdog is not None:
            watchdog.cancel()
    out, reached, total = tr.result()
    return out, reached, total, note, tr.last


def dask_peer(problems, procs, cap, max_iter):
    import dask
    from _peers import dask_ml_arrays
    from distributed import Client, LocalCluster

    dask.config.set({"logging.distributed": "error"})
    warnings.filterwarnings("ignore", module="distributed")
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", message="Sending large graph")
    for K in procs:
        for pb in problems:
            solvers = ["lbfgs", "admm"] if sp.issparse(pb.X) else ["lbfgs", "newton", "admm"]
            for solver in solvers:
                t0 = time.perf_counter()
                cluster = LocalCluster(n_workers=K, threads_per_worker=1, processes=True,
                                       dashboard_address=None, silence_logs=50)
                client = Client(cluster)
                start = time.perf_counter() - t0
                t0 = time.perf_counter()
                Xd, yd = dask_ml_arrays(client, pb.X, pb.y, K)
                conv = time.perf_counter() - t0
                if solver == "lbfgs":
                    pb.setup.append(("dask", K, "cluster start", start))
                    pb.setup.append(("dask", K, "to persisted dask arrays", conv))
                    _dask_fit(pb, Xd, yd, "lbfgs", cap, client, 2)  # warm-up
                out, reached, total, note, last = _dask_fit(pb, Xd, yd, solver, cap, client,
                                                           max_iter)
                if solver == "newton":
                    note = (note + "; " if note else "") + "unregularised (dask-glm's newton)"
                if solver == "lbfgs" and last is not None and client.status == "running":
                    pb.checks.append(("dask", K, _dask_check(pb, Xd, yd, last)))
                pb.peer_rows.append(("dask-ml", K, solver, out, reached, total, note))
                try:
                    client.close()
                    cluster.close()
                except Exception:  # noqa: BLE001
                    pass


def _dask_check(pb, Xd, yd, beta):
    """dask-glm's objective and ours, each at the other's solution."""
    from _peers import dask_glm_objective, l2_logistic_objective

    beta = np.asarray(beta, np.float64)
    star = np.r_[pb.star.coef, pb.star.intercept]

    def regb(v):
        return l2_logistic_objective(pb.X, pb.y, v[:-1], v[-1], pb.alpha,
                                     regularize_intercept=True)

    return (f"dask-glm's own objective / n at Roofline's solution "
            f"{dask_glm_objective(Xd, yd, star, pb.alpha):.12g} = ours with the intercept "
            f"regularised {regb(star):.12g}; at dask-ml's solution "
            f"{dask_glm_objective(Xd, yd, beta, pb.alpha):.12g} vs {regb(beta):.12g}; ours "
            f"(intercept free) at dask-ml's {pb.rel(beta[:-1], beta[-1])[1]:.12g}, "
            f"P* {pb.p_star:.12g}")


def intercept_floor(pb):
    """Our objective at the optimum of the intercept-regularised problem (dask-glm's): the
    suboptimality below which dask-ml cannot go on ours."""
    X1 = (sp.vstack([pb.X, sp.csr_matrix(np.ones((1, pb.n)))], format="csc")
          if sp.issparse(pb.X) else np.vstack([pb.X, np.ones((1, pb.n))]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = fit_newton(X1, pb.y, alpha=pb.alpha, tol=1e-13, max_iter=500, fit_intercept=False)
    rel, _ = pb.rel(r.coef[:-1], r.coef[-1])
    return rel, float(r.objective[-1])


def print_peers(pb):
    print(f"\n{pb.name}: peers (seconds to each relative suboptimality; x = peer s / Roofline "
          f"distributed Newton s at the same K)")
    hdr = (f"{'system':<9}{'K':>3} {'solver':<8}{'it@1e-3':>8}{'s@1e-3':>9}{'x':>7}"
           f"{'it@1e-4':>8}{'s@1e-4':>9}{'x':>7}{'reached':>10}{'run s':>8}  note")
    print(hdr)
    print("-" * len(hdr))
    for K in sorted({r[1] for r in pb.peer_rows}):
        ref = pb.roofline_s(K)
        print(f"{'roofline':<9}{K:>3} {'newton':<8}" + "".join(
            f"{'':>8}{_f(t, '.3f'):>9}{'1':>7}" for t in ref))
        for system, k, solver, out, reached, total, note in pb.peer_rows:
            if k != K:
                continue
            cells = ""
            for (it, t, _), r in zip(out, ref, strict=True):
                x = t / r if t is not None and r else None
                cells += f"{_f(it, 'd'):>8}{_f(t, '.3f'):>9}{_f(x, '.1f'):>7}"
            print(f"{system:<9}{K:>3} {solver:<8}{cells}{reached:>10.1e}{total:>8.2f}  "
                  + (note or ("" if out[-1][0] is not None else "did not reach 1e-4")))
    for system, K, what, secs in pb.setup:
        print(f"  setup (not timed): {system} K={K} {what}: {secs:.2f} s")
    for system, K, line in pb.checks:
        print(f"  objective check, {system} K={K}: {line}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--criteo", type=int, default=200_000, help="Criteo-like examples (0: skip)")
    ap.add_argument("--bits", type=int, default=18, help="hash bits of the Criteo-like matrix")
    ap.add_argument("--dense", type=int, default=100_000, help="dense examples (0: skip)")
    ap.add_argument("--dense-features", type=int, default=100)
    ap.add_argument("--alpha", type=float, default=1e-5)
    ap.add_argument("--tol", type=float, default=1e-7, help="relative duality gap of each run")
    ap.add_argument("--procs", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--backends", nargs="+", default=["tcp"], choices=["tcp", "mpi", "dask"],
                    help="how Roofline's ranks run: processes over TCP (the launcher), "
                         "under mpiexec, or one per worker of a Dask LocalCluster")
    ap.add_argument("--peers", nargs="*", default=["spark", "dask"],
                    choices=["spark", "dask", "none"],
                    help="peers to run beside Roofline (none, or no name: Roofline alone)")
    ap.add_argument("--peer-procs", type=int, nargs="+", default=None,
                    help="K values for the peers (default: --procs)")
    ap.add_argument("--repeat", type=int, default=1, help="timed runs per row (best kept)")
    ap.add_argument("--spark-max-iter", type=int, default=200)
    ap.add_argument("--dask-max-iter", type=int, default=2000)
    ap.add_argument("--peer-cap", type=float, default=60.0,
                    help="seconds a dask-ml solver may run before it is stopped")
    a = ap.parse_args(argv)
    print(f"cores: {os.cpu_count()}; ranks one thread each")
    problems = []
    if a.criteo:
        X, y = criteo(a.criteo, a.bits)
        problems.append(Problem("criteo-like", X, y, a.alpha))
    if a.dense:
        X, y = dense(a.dense, a.dense_features)
        problems.append(Problem("dense", X, y, a.alpha))
    for pb in problems:
        pb.p_star, pb.star, pb.rows = bench(pb.name, pb.X, pb.y, pb.alpha, a.tol, a.procs,
                                            a.repeat, a.backends)
        print_table(pb.name, pb.X, pb.alpha, pb.p_star, pb.rows)
    peer_procs = a.peer_procs or a.procs
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _peers import why_no_dask_ml, why_no_pyspark

    ran = False
    if "spark" in a.peers:
        why = why_no_pyspark()
        if why:
            print(f"\npeer skipped: Spark MLlib: {why}")
        else:
            with tempfile.TemporaryDirectory() as tmp:
                spark_peer(problems, peer_procs, a.repeat, a.spark_max_iter, tmp)
            ran = True
    if "dask" in a.peers:
        why = why_no_dask_ml()
        if why:
            print(f"\npeer skipped: dask-ml: {why}")
        else:
            dask_peer(problems, peer_procs, a.peer_cap, a.dask_max_iter)
            for pb in problems:
                rel, P = intercept_floor(pb)
                pb.checks.append(("dask", "-", f"optimum with the intercept regularised "
                                  f"{P:.12g}; ours at its minimiser is {rel:.1e} above P*: "
                                  f"dask-ml's floor on our objective"))
            ran = True
    if ran:
        for pb in problems:
            print_peers(pb)


if __name__ == "__main__":
    main()
