"""Data-parallel Learner throughput: K = 1, 2, 4 processes over TCP, sparse vs dense sync.

One run, one table: ``Learner(MatSource, GLM(logistic), ADAGrad, comm=comm, sync_every=N)``
(BIDMach's ParLearner over Kylix, :mod:`roofline.learners._parallel`) on K processes joined by
``roofline.comm.run(..., backend="tcp")`` on this machine, for each sync mode:

* ``sparse``: the changed features' changes through a Kylix sparse all-reduce (plan reused
  while no rank outgrows it);
* ``sparse/sched<b>``: the same with the power-law schedule (``sync_schedule=b``: from the
  second pass on, the b most frequent features every sync, the next b every 2nd, the next 2b
  every 4th, ...);
* ``dense``: the whole model's change through the dense all-reduce.

Data: ``datasources.make_criteo_like_matrix`` (hashed Zipf categorical fields, planted logistic
labels), generated in every process from the same seed before timing; rank ``r`` trains on the
minibatches ``i % K == r``.  Each process runs numba on ``cores // K`` threads (at least 1).

Columns: examples/s = training examples of all ranks / the slowest rank's training wall time;
bytes/example = bytes sent by all ranks during training (``comm.stats``) / training examples;
syncs and Kylix plans configured (rank 0); held-out logloss of the final (identical) model on
the last ``--test`` examples.

Usage::

    python benchmarks/parallel_learner.py --examples 200000 --bits 20 --sync-every 8
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # see benchmarks/learners.py

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from roofline import comm as rcomm  # noqa: E402


def _work(comm, args, sync, plan, block=0):
    import numba

    from roofline.datasources import MatSource, make_criteo_like_matrix
    from roofline.learners import GLM, ADAGrad, Learner

    numba.set_num_threads(max(1, min(numba.config.NUMBA_NUM_THREADS,
                                     (os.cpu_count() or 1) // comm.size)))
    n = args.examples + args.test
    X, y = make_criteo_like_matrix(n, seed=0, n_bits=args.bits, dtype=np.float32)
    Xtr, ytr = X[:, : args.examples].tocsc(), y[: args.examples]
    Xte, yte = X[:, args.examples:].tocsc(), y[args.examples:]
    L = Learner(MatSource(Xtr, ytr, batch_size=args.batch), GLM(loss="logistic"),
                ADAGrad(lr=args.lr), n_passes=args.passes, progress=False, comm=comm,
                sync_every=args.sync_every, sync=sync, sync_plan=plan, sync_schedule=block)
    comm.barrier()
    b0 = comm.stats["bytes_sent"]
    t = time.perf_counter()
    res = L.train()
    dt = time.perf_counter() - t
    sent = comm.stats["bytes_sent"] - b0
    ll = L.evaluate(MatSource(Xte, yte, batch_size=50_000))["loss"] if comm.rank == 0 else None
    st = L._sync.stats if L._sync is not None else {"syncs": 0, "plans": 0, "bytes_union": 0}
    return {"seconds": dt, "bytes": sent, "examples": res.n_examples, "logloss": ll,
            "syncs": st["syncs"], "plans": st["plans"], "union": st["bytes_union"],
            "digest": float(np.abs(L.model.coef).sum())}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=200_000, help="training examples")
    ap.add_argument("--test", type=int, default=50_000, help="held-out examples")
    ap.add_argument("--bits", type=int, default=20, help="2^bits hashed features")
    ap.add_argument("--batch", type=int, default=1024, help="minibatch size (per rank)")
    ap.add_argument("--lr", type=float, default=0.2, help="ADAGrad learning rate")
    ap.add_argument("--passes", type=int, default=1, help="passes over the training data")
    ap.add_argument("--sync-every", type=int, default=8, help="minibatches between syncs")
    ap.add_argument("--schedule-block", type=int, default=4096,
                    help="block b of the power-law schedule row (sync_schedule)")
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4], help="process counts")
    args = ap.parse_args(argv)
    print(f"Criteo-like data: {args.examples} train + {args.test} held-out examples, "
          f"2^{args.bits} features, minibatch {args.batch}, sync every {args.sync_every}, "
          f"{args.passes} pass(es); machine: {os.cpu_count()} cores")
    rows = []
    for k in args.ranks:
        for sync, plan, block in (("sparse", "grow", 0), ("sparse", "window", 0),
                                  ("sparse", "grow", args.schedule_block), ("dense", "grow", 0)):
            if k == 1 and (sync, plan, block) != ("sparse", "grow", 0):
                continue  # one rank never syncs
            outs = rcomm.run(_work, k, backend="tcp", args=(args, sync, plan, block),
                             timeout=600)
            name = (f"sparse/sched{block}" if block else f"{sync}/{plan}" if sync == "sparse"
                    else sync)
            if len({o["digest"] for o in outs}) != 1:
                raise AssertionError(f"K={k} {sync}: the ranks' models differ")
            dt = max(o["seconds"] for o in outs)
            ex = sum(o["examples"] for o in outs)
            by = sum(o["bytes"] for o in outs)
            un = sum(o["union"] for o in outs)
            rows.append((k, name if k > 1 else "-", dt, ex / dt, by / ex, un / ex,
                         outs[0]["syncs"], outs[0]["plans"], outs[0]["logloss"]))
            print(f"  K={k} {name}: {dt:.2f} s", flush=True)
    print()
    print(f"{'K':>2} {'sync':>13} {'train s':>8} {'examples/s':>11} {'bytes/example':>14} "
          f"{'of which union':>15} {'syncs':>6} {'plans':>6} {'held-out logloss':>17}")
    for k, sync, dt, eps, bpe, upe, ns, npl, ll in rows:
        print(f"{k:>2} {sync:>13} {dt:>8.2f} {eps:>11,.0f} {bpe:>14,.1f} {upe:>15,.1f} "
              f"{ns:>6} {npl:>6} {ll:>17.4f}")


if __name__ == "__main__":
    main()
