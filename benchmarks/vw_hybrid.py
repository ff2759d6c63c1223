"""Vowpal Wabbit's hybrid learner (online pass + all-reduced L-BFGS) on K processes, side by
side with L-BFGS from zero, on Criteo-like hashed data.

    python benchmarks/vw_hybrid.py                         # 200k examples, K = 1, 2, 4
    python benchmarks/vw_hybrid.py --examples 50000 --procs 1 2

For each K the examples are split over K processes (Roofline's TCP launcher through
``roofline.comm.run``); every rank fits ``fit_vw_hybrid`` on its shard, with one online pass
(``online``) and without (``cold``: L-BFGS from zero).  Printed: L-BFGS iterations, all-reduces
(one per objective evaluation), seconds (rank 0, the fit only), the final objective and its
relative distance to the best objective of the table.  The L2 strength is scikit-learn's
``C`` converted (``--C``).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def _fit(comm, n_examples, bits, C, passes, tol):
    from roofline.datasources import make_criteo_like_matrix
    from roofline.glm import alpha_from_peer
    from roofline.learners import fit_vw_hybrid

    X, y = make_criteo_like_matrix(n_examples, seed=0, n_bits=bits, dtype=np.float64)
    mine = np.arange(comm.rank, n_examples, comm.size)
    Xr, yr = X[:, mine], y[mine]
    comm.barrier()
    t = time.perf_counter()
    res = fit_vw_hybrid(Xr, yr, alpha=alpha_from_peer("C", C, n_examples), comm=comm,
                        online_passes=passes, tol=tol, max_iter=1000)
    return (time.perf_counter() - t, res.n_iter, res.n_evals, float(res.objective[-1]),
            res.online_time, comm.stats.get("bytes_sent", 0))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--examples", type=int, default=200_000)
    p.add_argument("--bits", type=int, default=18)
    p.add_argument("--C", type=float, default=0.3)
    p.add_argument("--tol", type=float, default=1e-6)
    p.add_argument("--procs", type=int, nargs="+", default=[1, 2, 4])
    a = p.parse_args(argv)
    from roofline.comm import run

    rows = []
    for K in a.procs:
        for name, passes in (("online", 1), ("cold", 0)):
            out = run(_fit, K, backend="tcp", args=(a.examples, a.bits, a.C, passes, a.tol),
                      timeout=600)
            rows.append((K, name, *out[0]))
    best = min(r[5] for r in rows)
    print(f"Criteo-like, {a.examples:,} examples, 2^{a.bits} hashed features, C = {a.C}, "
          f"tol = {a.tol:g}; fit_vw_hybrid on K TCP processes")
    print()
    print("| K | start | L-BFGS iterations | all-reduces | seconds | of which online | "
          "objective | rel. to best |")
    print("|---|---|---|---|---|---|---|---|")
    for K, name, sec, it, ev, obj, onl, _ in rows:
        print(f"| {K} | {name} | {it} | {ev} | {sec:.2f} | {onl:.2f} | {obj:.8f} | "
              f"{(obj - best) / abs(best):.1e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
