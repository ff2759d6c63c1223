"""Roofline table of the sparse primitives, Roofline and its peers side by side in one run.

Usage::

    python benchmarks/primitives.py                      # the issue's data: 2^20 x 100k, ~40 nnz
    python benchmarks/primitives.py --examples 20000 --k 1 16 --repeat 3   # quick
    python benchmarks/primitives.py --markdown           # table for the README
    python benchmarks/primitives.py --small              # serial vs parallel on small calls
    python benchmarks/primitives.py --verbose            # + the project's targets, gather floor
    python benchmarks/primitives.py --plot roofline.png  # + the roofline picture (matplotlib)

Data: a Zipf (power-law) sparse matrix, features x examples, from a fixed seed.  For every
primitive and k it prints achieved gflop/s and GB/s, the fraction of this machine's measured
roofline (compulsory bytes / bandwidth vs flops / FMA ceiling: a true lower bound), BIDMach's
main-memory figure (not a bound on such data), and the speed ratio to scipy.sparse (numpy for
SDDMM); with ``--verbose``, also the project's targets and the gather stream (the access
stream of A*S alone, what bounds the kernels on this machine).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from roofline import gmat, kernels

# Targets of the foundation issue (float32, k >= 16): fraction of the roofline and x peer.
TARGETS = {"A*S": 0.40, "A*S^T": 0.30, "SDDMM": 0.40}
PEER_TARGET = 3.0


def check_targets(rows) -> list[str]:
    """One line per (primitive, k): the targets and whether the measurement meets them."""
    lines = []
    for r in rows:
        if r.k >= 16 and r.dtype == "float32":
            ok_rl = r.fraction >= TARGETS[r.primitive]
            ok_peer = r.peer_ratio >= PEER_TARGET
            lines.append(
                f"{r.primitive:<6} k={r.k:<4} roofline {r.fraction:6.1%} (target "
                f"{TARGETS[r.primitive]:.0%}: {'met' if ok_rl else 'NOT met'}), "
                f"x{r.peer_ratio:.2f} {r.peer} (target x{PEER_TARGET:g}: "
                f"{'met' if ok_peer else 'NOT met'})"
            )
        elif r.k == 1:
            ok = r.peer_ratio >= 1.0
            lines.append(
                f"{r.primitive:<6} k=1    x{r.peer_ratio:.2f} {r.peer} (target: at least the "
                f"peer's speed: {'met' if ok else 'NOT met'})"
            )
    return lines


def gather_floor(S, ks, repeat, rounds=3) -> list[str]:
    """Time the bare access stream of A*S and SDDMM (one k-wide model row gathered per
    nonzero, in example order: ``kernels.gather_rows`` over ``S.indices``, best of a few
    prefetch distances) against the two kernels, interleaved in ``rounds`` so that a change in
    the machine's load hits all three alike.  A kernel that visits the nonzeros in this order
    does this and more, so the stream's time is what such a kernel can hope for."""
    rng = np.random.default_rng(0)
    n, m = S.shape
    threads = kernels.default_threads()
    machine = gmat.machine_roofline()
    lines = ["Gather stream (the access stream of A*S / SDDMM alone: one model row per nonzero, "
             "example order, no arithmetic, no output), interleaved with the kernels:"]
    for k in sorted({k for k in ks if k >= 16}):
        A = gmat.empty((k, n), S.dtype)
        A[...] = rng.standard_normal((k, n))
        B = gmat.empty((k, m), S.dtype)
        B[...] = rng.standard_normal((k, m))
        out_as = gmat.empty((k, m), S.dtype)
        out_sd = np.empty(S.nnz, S.dtype)
        fns = {
            "gather": [lambda d=d, A=A: kernels.gather_rows(A.T, S.indices, d, threads)
                       for d in (0, 16, 64)],
            "A*S": [lambda A=A, o=out_as: gmat.mult_as(A, S, out=o)],
            "SDDMM": [lambda A=A, B=B, o=out_sd: gmat.sddmm(S, A, B, out=o)],
        }
        best = {name: float("inf") for name in fns}
        for _ in range(rounds):
            for name, fs in fns.items():
                best[name] = min(best[name], *(gmat.best_time(f, repeat) for f in fs))
        per_nnz = best["gather"] / max(S.nnz, 1) * threads * 1e9
        lines.append(f"  k={k:<4} gather stream {best['gather'] * 1e3:7.2f} ms ({per_nnz:.1f} ns "
                     f"per nonzero per thread)")
        for name, cost in (("A*S", gmat.cost_mult_as(S, k)), ("SDDMM", gmat.cost_sddmm(S, k))):
            bound = cost.roofline_time(machine)
            lines.append(
                f"    {name:<6} kernel {best[name] * 1e3:7.2f} ms = {bound / best[name]:5.1%} of "
                f"the roofline; the stream alone would be {bound / best['gather']:5.1%}")
    return lines


def small_calls(args) -> int:
    """Time each primitive on small problems on the calling thread and on numba's pool, to
    check ``PARALLEL_MIN_WORK`` (the size below which gmat runs a call on the calling thread)."""
    import scipy.sparse as sp

    import roofline.gmat._primitives as prim

    limit = prim.PARALLEL_MIN_WORK
    rng = np.random.default_rng(args.seed)
    n = 1 << 16
    print(f"threads {kernels.default_threads()}, PARALLEL_MIN_WORK = {limit}; times in us "
          f"(best of {max(args.repeat, 20)}), S: 2^16 features, Zipf, ~40 nnz per example")
    print(f"{'primitive':<8} {'k':>4} {'examples':>9} {'work':>10} {'serial':>9} "
          f"{'parallel':>9} {'scipy':>9}  policy")
    for m in (250, 1000, 4000, 16000):
        S = gmat.powerlaw_csc(n, m, args.nnz, dtype=np.dtype(args.dtype), random_state=args.seed)
        St = sp.csr_matrix(S.T)
        for k in args.k:
            A = np.asfortranarray(rng.random((k, n)).astype(S.dtype))
            D = np.asfortranarray(rng.random((k, m)).astype(S.dtype))
            cases = [("A*S", S.nnz * k, lambda A=A, S=S: gmat.mult_as(A, S),
                      lambda A=A, St=St: (St @ A.T).T),
                     ("A*S^T", (S.nnz + n) * k, lambda D=D, S=S: gmat.mult_ast(D, S),
                      lambda D=D, S=S: (S @ D.T).T)]
            for name, work, f, peer in cases:
                times = []
                for forced in (1 << 62, 0):
                    prim.PARALLEL_MIN_WORK = forced
                    times.append(gmat.best_time(f, max(args.repeat, 20)))
                prim.PARALLEL_MIN_WORK = limit
                tp = gmat.best_time(peer, max(args.repeat, 20))
                chosen = "serial" if work < limit else "parallel"
                better = "serial" if times[0] <= times[1] else "parallel"
                print(f"{name:<8} {k:>4} {m:>9} {work:>10} {times[0] * 1e6:>9.0f} "
                      f"{times[1] * 1e6:>9.0f} {tp * 1e6:>9.0f}  {chosen}"
                      f"{'' if chosen == better else ' (faster: ' + better + ')'}")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--features", type=int, default=2**20)
    p.add_argument("--examples", type=int, default=100_000)
    p.add_argument("--nnz", type=float, default=50.0,
                   help="target nnz per example before merging duplicates (50 gives ~40)")
    p.add_argument("--k", type=int, nargs="+", default=[1, 16, 128])
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--remeasure", action="store_true", help="re-measure the machine roofline")
    p.add_argument("--markdown", action="store_true", help="also print a markdown table")
    p.add_argument("--no-floor", action="store_true",
                   help="with --verbose: skip the gather stream (the access stream of A*S alone)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="also check the project's targets and time the gather stream")
    p.add_argument("--plot", metavar="PATH",
                   help="also draw the roofline picture to PATH (needs matplotlib)")
    p.add_argument("--small", action="store_true",
                   help="serial vs parallel on small calls (checks gmat's PARALLEL_MIN_WORK)")
    args = p.parse_args(argv)
    if args.small:
        return small_calls(args)

    t0 = time.perf_counter()
    S = gmat.powerlaw_csc(args.features, args.examples, args.nnz, dtype=np.dtype(args.dtype),
                          random_state=args.seed)
    gen = time.perf_counter() - t0
    report = gmat.roofline_report(S, args.k, remeasure=args.remeasure, repeat=args.repeat)
    print(report)
    distinct = kernels.count_distinct_rows(S.indices, S.nnz, S.shape[0])
    print(f"(threads: {kernels.default_threads()}; data generated in {gen:.1f} s; "
          f"distinct features touched: {distinct})")
    if args.verbose:
        print()
        print("Targets (float32, k >= 16: A*S and SDDMM >= 40%, A*S^T >= 30% of the roofline, "
              ">= 3x peer; k = 1: >= peer):")
        for line in check_targets(report.rows):
            print("  " + line)
        if not args.no_floor:
            print()
            for line in gather_floor(S, args.k, args.repeat):
                print(line)
    if args.plot:
        import os

        os.makedirs(os.path.dirname(os.path.abspath(args.plot)), exist_ok=True)
        ax = report.plot(path=args.plot)
        import matplotlib.pyplot as plt

        plt.close(ax.figure)
        print(f"\nwrote the roofline picture to {args.plot}")
    if args.markdown:
        print()
        print(report.to_markdown())
    return 0


if __name__ == "__main__":
    sys.exit(main())
