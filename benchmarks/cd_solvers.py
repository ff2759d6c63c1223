"""L2 logistic regression by coordinate descent vs peers, on Criteo-like hashed data.

One run prints one table, Roofline's CD solvers and the peers side by side:

* Roofline: ``scd`` primal and dual (1 thread), ``tpa-scd`` primal and dual (``--threads``);
* scikit-learn ``liblinear`` (dual CD) and ``saga``;
* ``snapml`` dual and primal with the same thread count, and Vowpal Wabbit (1 and 3 passes), when
  they are importable (they are optional: ``pip install snapml vowpalwabbit``; never project
  dependencies).

Protocol (issue 6):

1. Criteo-like data (``roofline.datasources.make_criteo_like_matrix``: 39 hashed fields in
   ``2^20`` features), the last 20% held out; a constant feature is appended so every solver
   fits the same (regularised) intercept the same way.
2. ``alpha`` (our scaling: mean logloss + ``alpha ||w||^2 / 2``; sklearn ``C = 1 / (alpha n)``,
   snapml ``regularizer = alpha n``) chosen on the held-out logloss over a grid of ``C``.
3. ``P*``: the lowest objective any solver reached (our dual SCD run to a ``1e-11`` relative gap
   first).  For each solver: time to a training objective within ``1e-3`` and ``1e-6``
   (relative) of ``P*``, held-out logloss / AUC at the ``1e-3`` point, and the best held-out
   logloss with the time it was first reached.  Peers are timed over separate runs of growing
   effort (``max_iter`` 1, 2, 4, ...; at most about twice ``--time-cap`` seconds each); a
   time is that of the first run that reached the target.
   Roofline's times are setup + epochs + the cost of one duality-gap check (what a run stopped
   at that epoch pays for its last iteration), *excluding* the other checks and the held-out
   evaluations done for this table (the checks' total is reported in the footer).  VW has only
   its own implicit regularisation: it is compared on held-out logloss only.

Usage::

    python benchmarks/cd_solvers.py --n-examples 200000          # the table
    python benchmarks/cd_solvers.py --link-cost                  # hierarchical vs flat CoCoA
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np
import scipy.sparse as sp
from _peers import (
    alpha_of_sklearn_C,
    auc,
    have_vw,
    logloss_of_margins,
    run_vw,
    sklearn_C,
    snapml_regularizer,
    write_vw,
)

LEVELS = (1e-3, 1e-6)


# ---------------------------------------------------------------------------------------------
# data and metrics


def load(n_examples, seed, n_bits=20):
    from roofline.datasources import make_criteo_like_matrix

    n_test = max(1, n_examples // 4)
    X, y = make_criteo_like_matrix(n_examples + n_test, seed=seed, n_bits=n_bits)
    X = sp.vstack([X, sp.csr_matrix(np.ones((1, X.shape[1]), dtype=X.dtype))]).tocsc()
    X.sort_indices()
    Xtr, Xte = X[:, :n_examples].tocsc(), X[:, n_examples:].tocsc()
    return Xtr, y[:n_examples].astype(np.float64), Xte, y[n_examples:].astype(np.float64)


class Problem:
    def __init__(self, Xtr, ytr, Xte, yte):
        self.Xtr, self.ytr, self.Xte, self.yte = Xtr, ytr, Xte, yte
        self.Atr = Xtr.T.tocsr()  # scikit-learn layout: examples x features
        self.Ate = Xte.T.tocsr()
        self.n = Xtr.shape[1]

    def objective(self, w, alpha):
        return logloss_of_margins(self.Atr @ w, self.ytr) + 0.5 * alpha * float(w @ w)

    def heldout(self, w):
        z = self.Ate @ w
        return logloss_of_margins(z, self.yte), auc(z, self.yte)


# ---------------------------------------------------------------------------------------------
# solvers: each returns a list of points (seconds, objective, heldout logloss, auc)


def run_roofline(pb, alpha, *, dual, solver, threads, max_iter, time_cap, pstar):
    from roofline.glm import fit_glm

    hold = []
    t0 = time.perf_counter()
    cb_s = [0.0]

    def cb(it, w, b):
        t = time.perf_counter()
        hold.append(pb.heldout(w))
        # stop past the time cap, or once certainly within 1e-7 of the reference optimum
        stop = (time.perf_counter() - t0 > time_cap
                or pb.objective(w, alpha) - pstar <= 1e-7 * abs(pstar))
        cb_s[0] += time.perf_counter() - t
        return stop

    res = fit_glm(pb.Xtr, pb.ytr, loss="logistic", alpha=alpha, dual=dual, solver=solver,
                     n_jobs=threads, fit_intercept=False, tol=1e-7, max_iter=max_iter,
                     random_state=0, callback=cb, check_every=1)  # a point per sweep
    setup = res.time - res.check_time - res.times[-1]
    # one duality-gap check is added to every point: a run stopped at that epoch (as the
    # peers' runs of growing max_iter are) pays the check of its last iteration
    check = (res.check_time - cb_s[0]) / max(len(res.times), 1)
    pts = [(setup + t + check, P, h[0], h[1]) for t, P, h in zip(res.times, res.objective, hold,
                                                                         strict=True)]
    return pts, {"check_s": res.check_time - cb_s[0], "epochs": res.n_iter,
                 "threads": res.info.get("n_threads", threads)}


def _effort_runs(fit, efforts, time_cap):
    """Fit with growing effort until the cumulative time passes ``time_cap``."""
    pts, total = [], 0.0
    for e in efforts:
        t0 = time.perf_counter()
        w = fit(e)
        dt = time.perf_counter() - t0
        total += dt
        pts.append((dt, w))
        if total > time_cap:
            break
    return pts


def run_sklearn(pb, alpha, *, solver, time_cap):
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    C = sklearn_C(alpha, pb.n)

    def fit(iters):
        kw = dict(dual=True) if solver == "liblinear" else {}
        m = LogisticRegression(C=C, solver=solver, tol=1e-12, max_iter=iters,
                               fit_intercept=False, **kw)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            m.fit(pb.Atr, pb.ytr)
        return m.coef_.ravel()

    its = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
    return [(t, pb.objective(w, alpha), *pb.heldout(w))
            for t, w in _effort_runs(fit, its, time_cap)], {}


def run_snapml(pb, alpha, *, dual, threads, time_cap):
    from snapml import LogisticRegression

    A = pb.Atr if dual else pb.Atr.tocsc()

    def fit(iters):
        m = LogisticRegression(regularizer=snapml_regularizer(alpha, pb.n), dual=dual,
                               n_jobs=threads, fit_intercept=False, tol=1e-15, max_iter=iters)
        m.fit(A, pb.ytr)
        return np.asarray(m.coef_, dtype=np.float64).ravel()

    its = [1, 2, 3, 5, 8, 12, 20, 30, 50, 80, 120, 200, 400]
    return [(t, pb.objective(w, alpha), *pb.heldout(w))
            for t, w in _effort_runs(fit, its, time_cap)], {}


def run_vw_peer(pb, passes, tmp):
    """VW (its own implicit regularisation: compared on held-out logloss only)."""
    train, test = os.path.join(tmp, "train.vw"), os.path.join(tmp, "test.vw")
    if not os.path.exists(train):
        write_vw(train, pb.Xtr, pb.ytr)
        write_vw(test, pb.Xte, pb.yte)
    dt, z = run_vw(train, test, tmp, bits=20, passes=passes)
    return [(dt, np.nan, logloss_of_margins(z, pb.yte), auc(z, pb.yte))], {}


# ---------------------------------------------------------------------------------------------
# the table


def select_alpha(pb, Cs):
    from roofline.glm import fit_glm

    rows = []
    for C in Cs:
        alpha = alpha_of_sklearn_C(C, pb.n)
        r = fit_glm(pb.Xtr, pb.ytr, loss="logistic", alpha=alpha, dual=True,
                       fit_intercept=False, tol=1e-6, max_iter=200, random_state=0)
        rows.append((C, alpha, *pb.heldout(r.coef)))
        print(f"  C={C:<8g} alpha={alpha:.3e}  held-out logloss {rows[-1][2]:.5f}  "
              f"AUC {rows[-1][3]:.4f}", flush=True)
    best = min(rows, key=lambda r: r[2])
    return best[0], best[1]


def first_time(pts, pstar, level):
    for t, P, *_ in pts:
        if np.isfinite(P) and (P - pstar) / abs(pstar) <= level:
            return t
    return None


def at_level(pts, pstar, level):
    for _, P, ll, a in pts:
        if np.isfinite(P) and (P - pstar) / abs(pstar) <= level:
            return ll, a
    return None, None


def fmt(v, f="{:.2f}"):
    return "-" if v is None else f.format(v)


def warmup(threads):
    """Compile the numba kernels (cached on disk) outside the timed runs."""
    from roofline.glm import fit_glm

    rng = np.random.default_rng(0)
    X = sp.random(50, 200, density=0.1, format="csc", random_state=rng, dtype=np.float32)
    y = (rng.random(200) < 0.5).astype(float)
    for dual in (False, True):
        for solver in ("scd", "tpa-scd"):
            fit_glm(X, y, loss="logistic", alpha=0.1, dual=dual, solver=solver,
                       n_jobs=threads, fit_intercept=False, max_iter=2)


def table(args):
    import numba

    numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
    t0 = time.perf_counter()
    Xtr, ytr, Xte, yte = load(args.n_examples, args.seed)
    pb = Problem(Xtr, ytr, Xte, yte)
    print(f"data: {Xtr.shape[0]} features x {Xtr.shape[1]} train examples "
          f"({Xtr.nnz / Xtr.shape[1]:.1f} nnz/example incl. the constant), {Xte.shape[1]} "
          f"held out, CTR {ytr.mean():.3f}; built in {time.perf_counter() - t0:.1f} s", flush=True)
    warmup(args.threads)
    print("choosing C by held-out logloss:", flush=True)
    C, alpha = select_alpha(pb, args.C)
    print(f"chosen C = {C:g} (alpha = {alpha:.3e})", flush=True)

    from roofline.glm import fit_glm

    ref = fit_glm(pb.Xtr, pb.ytr, loss="logistic", alpha=alpha, dual=True,
                     fit_intercept=False, tol=1e-11, max_iter=1000, random_state=1)
    pref = float(ref.objective[-1])
    print(f"reference optimum: dual SCD, relative gap {ref.relative_gap:.1e} after {ref.n_iter} "
          "epochs", flush=True)
    runs = {}
    th = args.threads
    skip = set(args.skip)
    for dual in (False, True):
        if not dual and "primal" in skip:
            continue
        form = "dual" if dual else "primal"
        for solver, threads in (("scd", 1), ("tpa-scd", th)):
            pts, extra = run_roofline(pb, alpha, dual=dual, solver=solver, threads=threads,
                                      max_iter=args.max_epochs, time_cap=args.time_cap,
                                      pstar=pref)
            # the threads the solver used (tpa-scd's dual runs at most 2)
            runs[f"roofline {solver} {form}"] = (extra["threads"], pts, extra)
    try:
        import snapml  # noqa: F401

        have_snap = "snapml" not in skip
    except ImportError:
        have_snap = False
        print("snapml not importable: skipped (pip install snapml)")
    if have_snap:
        for dual in (True, False):
            if not dual and "primal" in skip:
                continue
            name = f"snapml {'dual' if dual else 'primal'}"
            print(f"running {name} ...", flush=True)
            runs[name] = (th, *run_snapml(pb, alpha, dual=dual, threads=th,
                                          time_cap=args.time_cap))
    for solver in ("liblinear", "saga"):
        if solver in skip:
            continue
        print(f"running sklearn {solver} ...", flush=True)
        runs[f"sklearn {solver}"] = (1, *run_sklearn(pb, alpha, solver=solver,
                                                     time_cap=args.time_cap))
    use_vw = "vw" not in skip and have_vw()
    if "vw" not in skip and not use_vw:
        print("vowpalwabbit not importable: skipped (pip install vowpalwabbit)")
    if use_vw:
        with tempfile.TemporaryDirectory() as tmp:
            for passes in (1, 3):
                print(f"running vw {passes} pass(es) ...", flush=True)
                name = f"vw {passes} pass{'es' if passes > 1 else ''}"
                runs[name] = (1, *run_vw_peer(pb, passes, tmp))
    pstar = min([ref.objective[-1]] + [P for _, pts, _ in runs.values() for _, P, *_ in pts
                                       if np.isfinite(P)])
    print()
    print(f"L2 logistic regression, {pb.n} train examples, {Xtr.shape[0]} features, C = {C:g}; "
          f"P* = {pstar:.10f}; times in seconds")
    hdr = (f"{'solver':<26}{'thr':>4}{'t(1e-3)':>9}{'t(1e-6)':>9}{'logloss@1e-3':>14}"
           f"{'AUC@1e-3':>10}{'best logloss':>14}{'t(best)':>9}")
    print(hdr)
    print("-" * len(hdr))
    for name, (thr, pts, _) in runs.items():
        t3, t6 = (first_time(pts, pstar, lv) for lv in LEVELS)
        ll3, a3 = at_level(pts, pstar, 1e-3)
        bi = int(np.argmin([p[2] for p in pts]))
        print(f"{name:<26}{thr:>4}{fmt(t3):>9}{fmt(t6):>9}{fmt(ll3, '{:.5f}'):>14}"
              f"{fmt(a3, '{:.4f}'):>10}{pts[bi][2]:>14.5f}{pts[bi][0]:>9.2f}")
    print()
    for name, (_, _, extra) in runs.items():
        if extra:
            print(f"  {name}: {extra['epochs']} epochs, {extra['check_s']:.2f} s of gap checks "
                  f"in all (one check counted per point) and the held-out evaluations not "
                  f"counted")
    sp_ = {k: first_time(v[1], pstar, 1e-3) for k, v in runs.items()}
    best_ours = min((v for k, v in sp_.items() if k.startswith("roofline") and v), default=None)
    for peer in ("snapml dual", "snapml primal", "sklearn liblinear", "sklearn saga"):
        if best_ours and sp_.get(peer):
            print(f"  speed-up to 1e-3 vs {peer}: {sp_[peer] / best_ours:.1f}x")


# ---------------------------------------------------------------------------------------------
# hierarchical vs flat CoCoA under a link-cost model


def link_cost(args):
    from roofline.glm import fit_glm

    Xtr, ytr, _, _ = load(args.link_examples, args.seed, n_bits=args.link_bits)
    n, d = Xtr.shape[1], Xtr.shape[0]
    alpha = alpha_of_sklearn_C(0.1, n)
    K, N = 8, 2
    vec_bytes = 8 * (d + 1)
    # link model: (latency s, bandwidth B/s) per all-reduce of the shared vector
    inner = (5e-6, 10e9)  # within a node (shared memory / NVLink-class)
    outer = (50e-6, 1.25e8)  # across nodes (1 GbE)
    c_in = inner[0] + 2 * vec_bytes / inner[1]
    c_out = outer[0] + 2 * vec_bytes / outer[1]
    print(f"link-cost model: {K} workers = {N} nodes x {K // N}; all-reduce of "
          f"{vec_bytes / 1e6:.2f} MB costs {c_in * 1e3:.3f} ms inside a node, "
          f"{c_out * 1e3:.3f} ms across nodes")
    print(f"data: {d} features x {n} examples, dual CoCoA, C = 0.1")
    targets = (1e-3, 1e-5)
    hdr = (f"{'method':<24}" + "".join(f"{'outer@' + format(t, 'g'):>14}" for t in targets)
           + "".join(f"{'comm s@' + format(t, 'g'):>14}" for t in targets)
           + f"{'compute s':>11}")
    print(hdr)
    print("-" * len(hdr))
    configs = [("flat CoCoA+ (K=8)", "cocoa", 1)] + [
        (f"hier. CoCoA R={r}", "hcocoa", r) for r in args.inner_rounds]
    for name, solver, R in configs:
        res = fit_glm(Xtr, ytr, loss="logistic", alpha=alpha, dual=True, solver=solver,
                         n_workers=K, n_nodes=N, inner_rounds=R, tol=min(targets), max_iter=500,
                         fit_intercept=False, random_state=0)
        rel = res.gap_history / np.abs(res.objective)
        outs, comms = [], []
        for t in targets:
            hit = np.flatnonzero(rel <= t)
            r = int(hit[0]) + 1 if hit.size else None
            outs.append(r)
            per_round = c_out if solver == "cocoa" else R * c_in + c_out
            comms.append(None if r is None else r * per_round)
        print(f"{name:<24}" + "".join(f"{fmt(o, '{:d}'):>14}" for o in outs)
              + "".join(f"{fmt(c, '{:.3f}'):>14}" for c in comms) + f"{res.times[-1]:>11.2f}")
    print("outer@g: global (inter-node) rounds to a relative duality gap g; comm s: modelled "
          "link time; compute s: measured, all workers simulated as threads on this machine")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n-examples", type=int, default=1_000_000)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--C", type=float, nargs="+", default=[1.0, 0.3, 0.1, 0.03, 0.01])
    p.add_argument("--max-epochs", type=int, default=300)
    p.add_argument("--time-cap", type=float, default=120.0,
                   help="seconds of growing-effort runs per peer solver")
    p.add_argument("--skip", nargs="*", default=[],
                   help="peers to skip: snapml liblinear saga vw, and primal (Roofline's "
                        "primal solvers and snapml primal)")
    p.add_argument("--link-cost", action="store_true",
                   help="run the hierarchical vs flat CoCoA link-cost benchmark instead")
    p.add_argument("--link-examples", type=int, default=50_000)
    p.add_argument("--link-bits", type=int, default=16)
    p.add_argument("--inner-rounds", type=int, nargs="+", default=[2, 4, 8])
    args = p.parse_args(argv)
    if args.link_cost:
        link_cost(args)
    else:
        table(args)


if __name__ == "__main__":
    sys.exit(main())
