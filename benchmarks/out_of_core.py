"""Out-of-core SDCA (``fit_glm_stream``) at 1 / 6 / 30 chunks against the in-memory dual SCD.

One run prints one table per problem, every solver on the same data side by side (issue 35):

* in memory: ``fit_glm(solver="scd", dual=True)`` with full sweeps (``active_fraction=1``: a
  pass is a sweep over every example, as out of core), and with its defaults (the active set:
  an iteration is a full or a partial sweep, so only its time compares);
* out of core, the data cut into 1, 6 and 30 chunks: the first version's schedule
  (``shuffle=0``: the source's order, each chunk's examples permuted on their own) and the
  shuffle across chunks (``shuffle=4``: a random chunk order per pass, 4 chunks at a time in
  one joint permutation), the chunks cached on disk (``cache="disk"``) after the first pass.

For each: passes (checks) and solve time (the checks excluded, for both) to a relative
suboptimality ``(P - P*) / P*`` of 1e-3 and 1e-6, where ``P*`` is the in-memory solver's
objective at a relative duality gap of 1e-12; and the ratios to the in-memory full sweeps'.
The problems: Criteo-like hashed logistic regression (``--n-examples``, ``2^--n-bits``
features, ``C = 0.3``: ``alpha = 1 / (C n)``) and a dense Gaussian one (``--dense-n`` x 100,
``alpha = 1e-3``).

Usage::

    python benchmarks/out_of_core.py                       # both tables
    python benchmarks/out_of_core.py --n-examples 30000 --dense-n 10000 --max-passes 40
"""

from __future__ import annotations

import argparse
import os
import platform
import time
import warnings

import numpy as np
import scipy.sparse as sp

LEVELS = (1e-3, 1e-6)
CHUNKS = (1, 6, 30)


def criteo(n, n_bits, seed):
    from roofline.datasources import make_criteo_like_matrix

    X, y = make_criteo_like_matrix(n, seed=seed, n_bits=n_bits, dtype=np.float64)
    return X.tocsc(), y, 1.0 / (0.3 * n)


def dense(n, seed, d=100):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(d, n))
    w = rng.normal(size=d) / np.sqrt(d)
    y = (rng.random(n) < 1 / (1 + np.exp(-(w @ A) * 2))).astype(np.float64)
    return sp.csc_matrix(A), y, 1e-3


def reached(res, pstar):
    """``{level: (passes, seconds)}``: the first check within ``level`` of ``P*``."""
    sub = (np.asarray(res.objective) - pstar) / abs(pstar)
    out = {}
    for lv in LEVELS:
        hit = np.flatnonzero(sub <= lv)
        out[lv] = (int(hit[0]) + 1, float(res.times[hit[0]])) if hit.size else (None, None)
    return out


def run(name, X, y, alpha, max_passes, seed):
    from roofline.datasources import MatSource
    from roofline.glm import fit_glm, fit_glm_stream

    n = X.shape[1]
    t0 = time.perf_counter()
    ref = fit_glm(X, y, loss="logistic", alpha=alpha, dual=True, solver="scd", tol=1e-12,
                  max_iter=5000, random_state=seed)
    pstar = ref.objective[-1]
    print(f"\n{name}: {X.shape[0]} features x {n} examples, {X.nnz} stored values, "
          f"alpha={alpha:.3g}; P* = {pstar:.12g} (gap {ref.relative_gap:.1e}, "
          f"{time.perf_counter() - t0:.1f} s)")
    kw = dict(loss="logistic", alpha=alpha, tol=1e-14, max_iter=max_passes, random_state=seed)
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # max_iter: the runs go on past the levels on purpose
        # compile every kernel first (numba JIT), on a slice of the same data
        Xw, yw, kw_w = X[:, :600].tocsc(), y[:600], dict(kw, max_iter=2)
        fit_glm(Xw, yw, dual=True, solver="scd", check_every=1, active_fraction=1.0, **kw_w)
        fit_glm(Xw, yw, dual=True, solver="scd", check_every=1, **kw_w)
        fit_glm_stream(MatSource(Xw, yw, batch_size=100), cache="disk", **kw_w)
        mem = fit_glm(X, y, dual=True, solver="scd", check_every=1, active_fraction=1.0, **kw)
        rows.append(("in memory, full sweeps", reached(mem, pstar)))
        dflt = fit_glm(X, y, dual=True, solver="scd", check_every=1, **kw)
        rows.append(("in memory, defaults (active set)", reached(dflt, pstar)))
        for k in CHUNKS:
            for shuffle in (0, 4):
                src = MatSource(X, y, batch_size=-(-n // k))
                res = fit_glm_stream(src, shuffle=shuffle, cache="disk", **kw)
                label = (f"{k:2d} chunks, " + ("per-chunk permutation (shuffle=0)" if not shuffle
                                               else "shuffle across chunks (shuffle=4)"))
                rows.append((label, reached(res, pstar)))
    base = rows[0][1]
    head = f"{'solver':48s}" + "".join(
        f" | {'passes':>6s} {'x mem':>6s} {'time s':>7s} {'x mem':>6s}  @{lv:.0e}"
        for lv in LEVELS)
    print(head)
    print("-" * len(head))
    for label, r in rows:
        cells = []
        for lv in LEVELS:
            p, t = r[lv]
            p0, t0_ = base[lv]
            if p is None:
                cells.append(f" | {'>' + str(max_passes):>6s} {'-':>6s} {'-':>7s} {'-':>6s}       ")
                continue
            px = f"{p / p0:6.2f}" if p0 and "defaults" not in label else f"{'-':>6s}"
            pp = f"{p:6d}" if "defaults" not in label else f"{'(' + str(p) + ')':>6s}"
            cells.append(f" | {pp} {px} {t:7.2f} {t / t0_ if t0_ else float('nan'):6.2f}       ")
        print(f"{label:48s}" + "".join(cells))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n-examples", type=int, default=100_000)
    ap.add_argument("--n-bits", type=int, default=18)
    ap.add_argument("--dense-n", type=int, default=30_000)
    ap.add_argument("--max-passes", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"out-of-core SDCA vs in-memory dual SCD; {platform.node()} ({platform.machine()}, "
          f"{os.cpu_count()} CPUs), python {platform.python_version()}; {when}")
    print("passes = checks (one a pass); the in-memory defaults' iterations are partial sweeps "
          "too, so only their time compares (passes in parentheses)")
    X, y, alpha = criteo(args.n_examples, args.n_bits, args.seed)
    run("Criteo-like hashed", X, y, alpha, args.max_passes, args.seed)
    X, y, alpha = dense(args.dense_n, args.seed)
    run("dense Gaussian", X, y, alpha, args.max_passes, args.seed)


if __name__ == "__main__":
    main()
