"""The cost of an intercept: ``fit_glm``'s default call with and without one, side by side.

Issue 34: with ``fit_intercept=True`` (the estimators' default) ``solver="auto"`` used to run
Newton, because the dual (SDCA) could not keep an unregularised intercept; the dual now keeps
one (``roofline.glm._scd.FreeIntercept``).  This script fits the Criteo-like problem
(:func:`roofline.datasources.make_criteo_like_matrix`, ``2^bits`` hashed features, logistic
loss, scikit-learn's ``C``) with ``fit_intercept`` True and False, each to its own tight
reference optimum, and prints for every row: whether it fits an intercept, the solver that
ran (for ``auto``, the one it chose), the seconds, the relative suboptimality reached
``(P - P*) / P*`` and the ratio of the intercept row's time to the row without (target:
at most 1.2).

Rows: ``fit_glm(solver="auto")`` at ``tol`` (the certified relative duality gap, so the
suboptimality is at most ``tol``), the same call forced to ``newton`` (the old choice with an
intercept) and to the dual ``scd`` with liblinear's regularised constant feature
(``intercept_scaling=1``, another problem: its suboptimality is against that problem's
optimum); Roofline's ``LogisticRegression`` estimator (its ``tol``, a gradient test, is
tightened until it reaches the same suboptimality); scikit-learn's ``LogisticRegression``
(``lbfgs``, with an intercept) for reference.  References: Newton at a relative gap of 1e-12
(with and without an intercept).  Each Roofline call first runs once on a small problem
(numba compiles its kernels at the first call).  Times are wall seconds of one call on a
machine that may be loaded (the rows with and without an intercept whose ratio is printed run
``--repeat`` times interleaved: their median, and the worst suboptimality of the calls):
compare the ratios of one run, not runs.

Usage::

    python benchmarks/intercept.py              # the issue's size: 200k x 2^18, C = 0.3
    python benchmarks/intercept.py --n 50000    # quick
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

import numpy as np


def _objective(X, y, coef, b, C):
    """The mean logistic loss + alpha ||w||^2 / 2 (alpha = 1 / (C n)) of ``(coef, b)``; X is
    n_features x n_examples."""
    n = X.shape[1]
    z = X.T @ coef + b
    return float(np.mean(np.logaddexp(0.0, -y * z)) + 0.5 / (C * n) * coef @ coef)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=200_000, help="examples (default 200000)")
    ap.add_argument("--bits", type=int, default=18, help="hashed features 2^bits (default 18)")
    ap.add_argument("--C", type=float, default=0.3, help="scikit-learn's C (default 0.3)")
    ap.add_argument("--tol", type=float, default=1e-4, help="relative suboptimality target")
    ap.add_argument("--no-sklearn", action="store_true", help="skip scikit-learn's row")
    ap.add_argument("--repeat", type=int, default=3,
                    help="calls of each row with and without an intercept, interleaved; the "
                         "median is printed (default 3)")
    args = ap.parse_args(argv)

    from roofline import glm
    from roofline.datasources import make_criteo_like_matrix
    from roofline.learners import LogisticRegression

    X, y01 = make_criteo_like_matrix(args.n, seed=0, n_bits=args.bits)
    X = X.astype(np.float64).tocsc()
    y = np.where(y01 > 0, 1.0, -1.0)
    n, C = X.shape[1], args.C
    alpha = 1.0 / (C * n)
    Xs = X.T.tocsr()  # scikit-learn's layout
    print(f"Criteo-like: {n} examples x 2^{args.bits} features, {X.nnz / n:.1f} values per "
          f"example, logistic, C = {C} (alpha = {alpha:.3g}), target relative suboptimality "
          f"{args.tol:g}")

    # numba compiles at the first call: run every path once, small
    Xw, yw = make_criteo_like_matrix(6000, seed=1, n_bits=12)
    yw = np.where(yw > 0, 1.0, -1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (not converged in 3 iterations)
        for fi in (False, True):
            glm.fit_glm(Xw, yw, loss="logistic", alpha=1e-3, fit_intercept=fi, max_iter=3)
            LogisticRegression(C=1.0, fit_intercept=fi, max_iter=3).fit(Xw.T.tocsr(), yw)

    ref = {}
    for fi in (False, True):
        r = glm.fit_glm(X, y, loss="logistic", alpha=alpha, fit_intercept=fi, solver="newton",
                        tol=1e-12, max_iter=500)
        ref[fi] = float(r.objective[-1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = glm.fit_glm(X, y, loss="logistic", alpha=alpha, fit_intercept=True, dual=True,
                        solver="scd", intercept_scaling=1.0, tol=1e-10, max_iter=2000)
    ref["reg"] = float(r.objective[-1])

    rows = []
    load = [" ".join(f"{x:.2f}" for x in os.getloadavg())]

    def timed(fn):
        t = time.perf_counter()
        solver, coef, b = fn()
        return time.perf_counter() - t, solver, coef, b

    def record(name, fi, sec, solver, coef, b, key=None):
        P = _objective(X, y, coef, b, C)
        if key == "reg":  # the regularised constant feature's own objective
            P += 0.5 * alpha * b * b
        P_star = ref[fi if key is None else key]
        rows.append((name, fi, solver, sec, (P - P_star) / abs(P_star)))

    def run(name, fi, fn, key=None):
        record(name, fi, *timed(fn), key=key)

    def pair(name, make):
        """The row without and with an intercept, ``args.repeat`` times interleaved (the
        load drifts): the median seconds, the worst suboptimality."""
        got = {False: [], True: []}
        for _ in range(max(args.repeat, 1)):
            for fi in (False, True):
                got[fi].append(timed(make(fi)))
        for fi in (False, True):
            sec = float(np.median([g[0] for g in got[fi]]))
            subs = []
            for _, solver, coef, b in got[fi]:
                record(name, fi, sec, solver, coef, b)
                subs.append(rows.pop())
            rows.append(max(subs, key=lambda r: r[4]))

    def fit_glm_row(fi, **kw):
        def fn():
            r = glm.fit_glm(X, y, loss="logistic", alpha=alpha, fit_intercept=fi, tol=args.tol,
                            **kw)
            return r.solver + ("/dual" if r.dual else "/primal"), r.coef, r.intercept
        return fn

    def est(fi):
        def fn():
            # the estimator's tol is a gradient test: tightened until the target is met
            for tol in (1e-4, 1e-5, 1e-6, 1e-7):
                m = LogisticRegression(C=C, fit_intercept=fi, tol=tol, max_iter=1000).fit(Xs, y)
                coef, b = m.coef_[0].astype(np.float64), float(m.intercept_[0])
                if (_objective(X, y, coef, b, C) - ref[fi]) / abs(ref[fi]) <= args.tol:
                    break
            return f"{m.solver_} (tol={tol:g})", coef, b
        return fn

    pair("fit_glm auto", fit_glm_row)
    run("fit_glm newton", True, fit_glm_row(True, solver="newton"))
    run("fit_glm scd, intercept_scaling=1", True,
        fit_glm_row(True, solver="scd", dual=True, intercept_scaling=1.0), key="reg")
    pair("LogisticRegression (roofline)", est)

    if not args.no_sklearn:
        from sklearn.linear_model import LogisticRegression as SkLR

        def sk():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                m = SkLR(C=C, solver="lbfgs", tol=1e-6, max_iter=2000).fit(Xs, y)
            return "scikit-learn lbfgs (tol=1e-6)", m.coef_[0], float(m.intercept_[0])
        run("LogisticRegression (scikit-learn)", True, sk)

    load.append(" ".join(f"{x:.2f}" for x in os.getloadavg()))
    base = {name: sec for name, fi, _, sec, _ in rows if not fi}
    print(f"\n{'row':36s} {'intercept':9s} {'solver run':34s} {'seconds':>8s} "
          f"{'rel. subopt.':>12s} {'vs no intercept':>15s}")
    for name, fi, solver, sec, sub in rows:
        ratio = f"{sec / base[name]:.2f}x" if fi and name in base else ""
        print(f"{name:36s} {'yes' if fi else 'no':9s} {solver:34s} {sec:8.2f} {sub:12.2e} "
              f"{ratio:>15s}")
    print("\nintercept_scaling=1: liblinear's regularised constant feature (another problem; "
          "suboptimality against its own optimum).  Wall seconds of one call (the median of "
          f"{max(args.repeat, 1)} interleaved calls for the rows with a ratio, and their worst "
          "suboptimality); the machine may be loaded: load average (1, 5, 15 min) "
          f"{load[0]} before the timed rows, {load[1]} after.")


if __name__ == "__main__":
    main()
