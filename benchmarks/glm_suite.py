"""L2-regularised GLMs over many problem classes: Roofline's solvers and the peers side by side.

One run prints one table: for every problem (data set x loss x ``C``), the seconds each solver
needs to reach a relative suboptimality ``(P - P*) / |P*|`` of 1e-3 and 1e-4, ``P*`` a tight
reference optimum (Roofline's Newton at a relative duality gap of 1e-12 for the smooth losses,
the dual SCD at 1e-10 for the hinge, and the lowest objective any run reached).

Solvers: Roofline ``newton`` (trust-region Newton-CG) and ``cholesky`` (ridge by its normal
equations), both as ``roofline.glm.fit_glm(solver=...)``,
``scd`` and ``tpa-scd`` (:func:`roofline.glm.fit_glm`, their default formulation:
the dual without an intercept), ``auto`` (the solver :func:`roofline.glm.choose_solver`
picks, timed as that solver's run plus the choice); scikit-learn ``lbfgs``
(``LogisticRegression``; ``Ridge(solver="auto")`` for the squared loss), ``liblinear`` primal
(TRON) and dual (CD) (``LogisticRegression``, ``LinearSVR`` with the squared loss,
``LinearSVC`` for the hinge), snapml when importable.

Protocol: every problem is fit without an intercept, a constant feature of value 1 appended
to ``X`` (so every solver, primal or dual, fits the same regularised intercept); every solver
gets the data in the same storage (dense problems as dense arrays, the others sparse; the
Roofline solvers in their ``n_features x n_examples`` layout, converting as they need); the
objective is mean loss + ``alpha ||w||^2 / 2``, ``alpha = 1 / (C n)`` (scikit-learn's ``C``).
Roofline's times come from one run's trace (setup + solver time to the first check at the
level + one check's cost, the checks excluded otherwise); the peers are timed over separate
runs of growing ``max_iter`` (1, 2, 4, ...), a time being that of the first run that reached
the level.  Each Roofline solver first runs one untimed iteration on the problem (numba
compiles a kernel at its first call with new argument types).  ``-`` means not reached within
the time cap; ``n/a``: the solver does not apply.

Problem classes: scikit-learn's breast cancer (standardised), digits (8 vs rest, raw pixel
scale 0-16), diabetes (ridge), the Criteo-like generator (hashed into 2^20 features), dense
correlated features (pairwise correlation 0.9), features on wildly different scales
(10^-3..10^3), 1% positives, text-like sparse data with n << d, hashed data with d > 2^20.
``heart_scale`` (Debian's ``liblinear-tools``) is used when found under ``/usr/share``.

Usage::

    python benchmarks/glm_suite.py --quick        # < 3 minutes
    python benchmarks/glm_suite.py                # every class at full size
    python benchmarks/glm_suite.py --criteo-1m    # adds the 1M-example Criteo-like problem
"""

from __future__ import annotations

import argparse
import glob
import json
import time
import warnings

import numpy as np
import scipy.sparse as sp

LEVELS = (1e-3, 1e-4)
# runs stop once this close to the reference optimum (below the last level: the optimum may
# still drop a little when a run goes lower than the reference)
_STOP = 2e-5
CS = (0.01, 1.0, 100.0)


# ---------------------------------------------------------------------------------------------
# data: each builder returns (A, y) in scikit-learn's layout (examples x features)


def _with_const(A):
    if sp.issparse(A):
        return sp.hstack([A, sp.csr_matrix(np.ones((A.shape[0], 1), dtype=A.dtype))]).tocsr()
    return np.hstack([A, np.ones((A.shape[0], 1), dtype=A.dtype)])


def breast_cancer(rng, size):
    from sklearn.datasets import load_breast_cancer
    from sklearn.preprocessing import StandardScaler

    A, y = load_breast_cancer(return_X_y=True)
    return StandardScaler().fit_transform(A), y


def digits(rng, size):
    from sklearn.datasets import load_digits

    A, y = load_digits(return_X_y=True)
    return A.astype(np.float64), (y == 8).astype(float)


def diabetes(rng, size):
    from sklearn.datasets import load_diabetes

    A, y = load_diabetes(return_X_y=True)
    return A, (y - y.mean()) / y.std()


def heart_scale(rng, size):
    from sklearn.datasets import load_svmlight_file

    paths = glob.glob("/usr/share/**/heart_scale", recursive=True)
    A, y = load_svmlight_file(paths[0])
    return A.toarray(), (y > 0).astype(float)


def criteo(rng, size):
    from roofline.datasources import make_criteo_like_matrix

    X, y = make_criteo_like_matrix(size, seed=int(rng.integers(2**31)), n_bits=20)
    return X.T.tocsr(), y.astype(np.float64)


def _logistic_labels(rng, z):
    return (rng.random(z.shape[0]) < 1 / (1 + np.exp(-z))).astype(float)


def dense_correlated(rng, size, d=100, rho=0.9):
    common = rng.standard_normal((size, 1))
    A = np.sqrt(rho) * common + np.sqrt(1 - rho) * rng.standard_normal((size, d))
    w = rng.standard_normal(d) / np.sqrt(d)
    return A, _logistic_labels(rng, 3 * A @ w)


def wild_scales(rng, size, d=50):
    scales = 10.0 ** rng.uniform(-3, 3, d)
    B = rng.standard_normal((size, d))
    w = rng.standard_normal(d) / np.sqrt(d)
    y = _logistic_labels(rng, 2 * B @ w)
    return B * scales, y


def rare_positives(rng, size, d=50):
    A = rng.standard_normal((size, d))
    w = rng.standard_normal(d) / np.sqrt(d)
    z = 2 * A @ w
    thr = np.quantile(z, 0.99)
    return A, (z + 0.5 * rng.standard_normal(size) > thr).astype(float)


def text_sparse(rng, size, d=50_000, per_row=60):
    cols = np.minimum(rng.zipf(1.3, size * per_row) - 1, d - 1)
    rows = np.repeat(np.arange(size), per_row)
    vals = rng.random(size * per_row) + 0.5
    A = sp.csr_matrix((vals, (rows, cols)), shape=(size, d))
    A.sum_duplicates()
    norms = np.sqrt(np.asarray(A.multiply(A).sum(axis=1)).ravel())
    A = sp.diags(1 / norms) @ A  # tf-idf-like unit rows
    w = rng.standard_normal(d)
    return A.tocsr(), _logistic_labels(rng, 4 * (A @ w) - 0.5)


def hashed_huge(rng, size, bits=22, per_row=30):
    d = 1 << bits
    cols = rng.integers(0, d, size * per_row)
    rows = np.repeat(np.arange(size), per_row)
    A = sp.csr_matrix((np.ones(size * per_row), (rows, cols)), shape=(size, d))
    A.sum_duplicates()
    A.data[:] = 1.0
    w = 0.5 * rng.standard_normal(d)
    return A, _logistic_labels(rng, A @ w - 1.0)


# name: (builder, full size, quick size or None (skipped), losses)
CLASSES = {
    "breast_cancer": (breast_cancer, None, 0, ("logistic", "hinge")),
    "digits_8vr": (digits, None, 0, ("logistic",)),
    "diabetes": (diabetes, None, 0, ("squared",)),
    "heart_scale": (heart_scale, None, None, ("logistic", "hinge")),
    "criteo_100k": (criteo, 100_000, 10_000, ("logistic",)),
    "criteo_1m": (criteo, 1_000_000, None, ("logistic",)),
    "dense_corr": (dense_correlated, 50_000, 3_000, ("logistic", "squared")),
    "wild_scales": (wild_scales, 50_000, 3_000, ("logistic",)),
    "rare_pos_1pct": (rare_positives, 100_000, 5_000, ("logistic",)),
    "text_n<<d": (text_sparse, 5_000, 1_000, ("logistic", "hinge")),
    "hashed_2^22": (hashed_huge, 100_000, None, ("logistic",)),
}


# ---------------------------------------------------------------------------------------------
# the objective (mean loss + alpha ||w||^2 / 2), the same formulas as glm/_problem.py


def objective(A, y01, w, loss, alpha):
    z = A @ w
    if loss == "squared":
        L = 0.5 * np.mean((z - y01) ** 2)
    else:
        s = np.where(y01 > 0, 1.0, -1.0)
        if loss == "logistic":
            L = np.mean(np.logaddexp(0.0, -s * z))
        else:
            L = np.mean(np.maximum(0.0, 1 - s * z))
    return float(L + 0.5 * alpha * (w @ w))


class Problem:
    def __init__(self, name, A, y, loss, C):
        self.name, self.loss, self.C = name, loss, C
        self.A = _with_const(A)
        self.Acsr = self.A.tocsr() if sp.issparse(self.A) else self.A
        self.y = np.asarray(y, np.float64)
        self.n, self.d = self.A.shape
        self.alpha = 1.0 / (C * self.n)
        if sp.issparse(self.A):
            self.X = self.A.T.tocsc()
            self.X.sort_indices()
        else:  # dense problems stay dense, as the peers get them
            self.X = np.ascontiguousarray(self.A.T)

    def P(self, w):
        return objective(self.Acsr, self.y, np.asarray(w, np.float64).ravel(), self.loss,
                         self.alpha)

    def features(self):
        """What :func:`choose_solver` sees."""
        return dict(n=self.n, d=self.d, nnz=self.X.nnz, loss=self.loss, alpha=self.alpha)


# ---------------------------------------------------------------------------------------------
# solvers: each returns [(seconds, objective), ...]


def run_roofline(pb, solver, time_cap, max_iter, pstar=None):
    from roofline.glm import fit_glm

    t0 = time.perf_counter()

    def cb(it, w, b):  # its time counts as check time, excluded from the solver's
        if pstar is not None and pb.P(w) - pstar <= _STOP * abs(pstar):
            return True
        return time.perf_counter() - t0 > time_cap

    if solver == "cholesky":  # one exact solve: its whole time, one point
        t0 = time.perf_counter()
        res = fit_glm(pb.X, pb.y, loss="squared", alpha=pb.alpha, fit_intercept=False,
                      solver="cholesky")
        return [(time.perf_counter() - t0 - res.check_time, pb.P(res.coef))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if solver == "newton":
            res = fit_glm(pb.X, pb.y, loss=pb.loss, alpha=pb.alpha, fit_intercept=False,
                          solver="newton", tol=1e-9, max_iter=max_iter, callback=cb)
        else:
            res = fit_glm(pb.X, pb.y, loss=pb.loss, alpha=pb.alpha, fit_intercept=False,
                             solver=solver, n_jobs=2, tol=1e-8, max_iter=max_iter,
                             random_state=0, callback=cb)
    setup = res.time - res.check_time - (res.times[-1] if len(res.times) else 0.0)
    check = res.check_time / max(len(res.times), 1)
    return [(setup + t + check, P) for t, P in zip(res.times, res.objective, strict=True)]


def _effort_runs(pb, fit, efforts, time_cap, pstar_hint):
    pts, total = [], 0.0
    for e in efforts:
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            w = fit(e)
        dt = time.perf_counter() - t0
        total += dt
        P = pb.P(w)
        pts.append((dt, P))
        if total > time_cap or (P - pstar_hint) <= _STOP * abs(pstar_hint):
            break
    return pts


ITS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]


def run_sklearn(pb, solver, time_cap, pstar_hint):
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.svm import LinearSVC, LinearSVR

    A, y, C = pb.Acsr, pb.y, pb.C
    if pb.loss == "logistic":
        def fit(it):
            kw = {"lbfgs": dict(solver="lbfgs"), "liblinear-primal": dict(solver="liblinear"),
                  "liblinear-dual": dict(solver="liblinear", dual=True)}[solver]
            return LogisticRegression(C=C, tol=1e-12, max_iter=it, fit_intercept=False,
                                      **kw).fit(A, y).coef_.ravel()
    elif pb.loss == "squared":
        if solver == "lbfgs":  # Ridge's own choice (Cholesky dense, sparse_cg sparse)
            t0 = time.perf_counter()
            w = Ridge(alpha=pb.alpha * pb.n, fit_intercept=False).fit(A, y).coef_
            return [(time.perf_counter() - t0, pb.P(w))]

        def fit(it):
            return LinearSVR(C=1.0 / (2 * pb.alpha * pb.n), epsilon=0.0,
                             loss="squared_epsilon_insensitive", fit_intercept=False, tol=1e-12,
                             dual=solver == "liblinear-dual", max_iter=it).fit(A, y).coef_
    else:
        if solver != "liblinear-dual":
            return None

        def fit(it):
            return LinearSVC(C=C, loss="hinge", dual=True, fit_intercept=False, tol=1e-12,
                             max_iter=it * 10).fit(A, y).coef_.ravel()
    return _effort_runs(pb, fit, ITS, time_cap, pstar_hint)


def run_snapml(pb, time_cap, pstar_hint):
    try:
        import snapml
    except ImportError:
        return None
    if pb.loss != "logistic":
        return None

    def fit(it):
        m = snapml.LogisticRegression(regularizer=1.0 / pb.C, dual=True, fit_intercept=False,
                                      tol=1e-15, max_iter=it, n_jobs=2)
        m.fit(pb.Acsr, pb.y)
        return np.asarray(m.coef_, np.float64).ravel()

    return _effort_runs(pb, fit, [1, 2, 4, 8, 16, 32, 64, 128, 256, 512], time_cap, pstar_hint)


def reference(pb):
    """A tight optimum: Newton at a 1e-12 relative gap (dual SCD at 1e-10 for the hinge)."""
    from roofline.glm import fit_glm

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if pb.loss == "hinge":
            r = fit_glm(pb.X, pb.y, loss="hinge", alpha=pb.alpha, fit_intercept=False,
                           tol=1e-10, max_iter=50_000, random_state=1)
            return min(pb.P(r.coef), float(r.objective.min()))
        r = fit_glm(pb.X, pb.y, loss=pb.loss, alpha=pb.alpha, fit_intercept=False,
                    solver="newton", tol=1e-12, max_iter=500)
        return pb.P(r.coef)


def first_time(pts, pstar, level):
    if pts is None:
        return None
    for t, P in pts:
        if np.isfinite(P) and (P - pstar) / abs(pstar) <= level:
            return t
    return None


def warmup():
    """Compile the numba kernels (cached on disk) outside the timed runs."""
    rng = np.random.default_rng(0)
    for loss in ("logistic", "squared", "hinge"):
        A = rng.standard_normal((300, 5))
        pb = Problem("warm", A, (rng.random(300) < 0.5).astype(float), loss, 1.0)
        for s in ("newton", "scd", "tpa-scd"):
            if not (s == "newton" and loss == "hinge"):
                run_roofline(pb, s, 5.0, 3)
        As = sp.random(600, 3000, density=0.01, random_state=1, format="csr")
        pb = Problem("warm", As, (rng.random(600) < 0.5).astype(float), loss, 1.0)
        if loss != "hinge":
            run_roofline(pb, "newton", 5.0, 3)


# ---------------------------------------------------------------------------------------------
# multinomial logistic regression (--multinomial): the softmax loss + alpha ||W||_F^2 / 2 with
# unpenalised intercepts, alpha = 1 / (C n): scikit-learn's objective divided by C n


def digits10(rng, size):
    from sklearn.datasets import load_digits

    A, y = load_digits(return_X_y=True)
    return A.astype(np.float64), y.astype(np.int64)


def _planted_softmax(rng, A, K, scale):
    """Labels drawn from a planted softmax model ``W`` on the rows of ``A`` (Gumbel-max)."""
    W = scale * rng.standard_normal((A.shape[1], K))
    Z = np.asarray(A @ W)
    Z -= Z.mean(axis=0, keepdims=True)  # balanced classes: no class dominates everywhere
    return np.argmax(Z + rng.gumbel(size=Z.shape), axis=1).astype(np.int64)


def _power_law_rows(rng, n, d, per_row, a=1.3):
    cols = np.minimum(rng.zipf(a, n * per_row) - 1, d - 1)
    # a random permutation: the frequent features are not the first ones
    cols = rng.permutation(d)[cols]
    rows = np.repeat(np.arange(n), per_row)
    vals = rng.random(n * per_row) + 0.5
    A = sp.csr_matrix((vals, (rows, cols)), shape=(n, d))
    A.sum_duplicates()
    norms = np.sqrt(np.asarray(A.multiply(A).sum(axis=1)).ravel())
    return (sp.diags(1 / norms) @ A).tocsr()


def text20(rng, size, d=20_000, per_row=40):
    """Text-like: power-law (Zipf 1.3) word frequencies, tf-idf-like unit rows, 20 classes."""
    A = _power_law_rows(rng, size, d, per_row)
    return A, _planted_softmax(rng, A, 20, 8.0)


def hashed100(rng, size, bits=16, per_row=25):
    """Hashed: power-law tokens hashed into 2^16 binary features, 100 classes."""
    d = 1 << bits
    A = _power_law_rows(rng, size, 4 * d, per_row, a=1.2)
    A = sp.csr_matrix((np.ones(A.nnz), A.indices % d, A.indptr), shape=(size, d))
    A.sum_duplicates()
    A.data[:] = 1.0
    return A, _planted_softmax(rng, A, 100, 1.0)


# name: (builder, full size, quick size)
MN_CLASSES = {
    "digits_10": (digits10, 0, 0),
    "text_20": (text20, 20_000, 4_000),
    "hashed_100": (hashed100, 20_000, 4_000),
}
MN_CS = (1.0, 100.0)
MN_OURS = ("newton", "lbfgs")
MN_PEERS = ("lbfgs", "newton-cg", "newton-cholesky", "saga")
#: scikit-learn's newton-cholesky forms the (d K) x (d K) Hessian: skipped above this size
MN_CHOLESKY_MAX = 4000
#: max_iter of the timed runs: a ~1.5x geometric grid (every solver the same)
MN_ITS = sorted({int(round(1.5 ** k)) for k in range(0, 24)})


def softmax_objective(A, y, W, b, alpha):
    """Mean softmax loss + ``alpha ||W||_F^2 / 2`` (``A`` examples x features, ``W`` K x d)."""
    Z = np.asarray(A @ W.T, dtype=np.float64) + b
    m = Z.max(axis=1, keepdims=True)
    lse = (m + np.log(np.exp(Z - m).sum(axis=1, keepdims=True))).ravel()
    loss = lse - Z[np.arange(len(y)), y]
    return float(loss.mean() + 0.5 * alpha * float((W * W).sum()))


class MNProblem:
    def __init__(self, name, A, y, C, dtype=np.float64):
        self.name, self.C = name, C
        self.A = A.astype(dtype) if sp.issparse(A) else np.ascontiguousarray(A, dtype=dtype)
        self.A64 = A.astype(np.float64)
        # classes without examples dropped (scikit-learn fits the classes present only)
        self.y = np.unique(np.asarray(y), return_inverse=True)[1].astype(np.int64)
        self.n, self.d = A.shape
        self.K = int(self.y.max()) + 1
        self.alpha = 1.0 / (C * self.n)
        if sp.issparse(self.A):
            self.X = self.A.T.tocsc()
            self.X.sort_indices()
        else:
            self.X = np.ascontiguousarray(self.A.T)

    def P(self, W, b):
        return softmax_objective(self.A64, self.y, np.asarray(W, np.float64),
                                 np.asarray(b, np.float64), self.alpha)


def mn_run_roofline(pb, solver, time_cap, pstar_hint):
    from roofline.glm import fit_multinomial

    def fit(it):
        r = fit_multinomial(pb.X, pb.y, alpha=pb.alpha, solver=solver, tol=1e-14, max_iter=it)
        return r.coef, r.intercept

    return _mn_effort_runs(pb, fit, time_cap, pstar_hint)


def mn_run_sklearn(pb, solver, time_cap, pstar_hint):
    from sklearn.linear_model import LogisticRegression

    if solver == "newton-cholesky" and pb.d * pb.K > MN_CHOLESKY_MAX:
        return None

    def fit(it):
        m = LogisticRegression(C=pb.C, solver=solver, tol=1e-14, max_iter=it).fit(pb.A, pb.y)
        return m.coef_, m.intercept_

    return _mn_effort_runs(pb, fit, time_cap, pstar_hint)


def mn_run_snapml(pb, time_cap, pstar_hint):
    try:
        import snapml
    except ImportError:
        return None

    def fit(it):
        m = snapml.LogisticRegression(regularizer=1.0 / pb.C, fit_intercept=True, tol=1e-15,
                                      max_iter=it, n_jobs=2)
        m.fit(pb.A, pb.y)
        return np.asarray(m.coef_, np.float64), np.asarray(m.intercept_, np.float64).ravel()

    return _mn_effort_runs(pb, fit, time_cap, pstar_hint)


def _mn_effort_runs(pb, fit, time_cap, pstar_hint):
    pts, total = [], 0.0
    for it in MN_ITS:
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            W, b = fit(it)
        dt = time.perf_counter() - t0
        total += dt
        P = pb.P(W, b)
        pts.append((dt, P))
        if total > time_cap or (P - pstar_hint) <= _STOP * abs(pstar_hint):
            break
    return pts


def mn_reference(pb):
    """A tight optimum: Roofline's Newton to a relative gradient of 1e-11."""
    from roofline.glm import fit_multinomial

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = fit_multinomial(pb.X, pb.y, alpha=pb.alpha, solver="newton", tol=1e-11,
                            max_iter=500)
    return pb.P(r.coef, r.intercept)


def mn_main(args):
    """The multinomial table: each row's peers and Roofline's solvers side by side."""
    from roofline.glm import fit_multinomial

    cap = args.time_cap or (5.0 if args.quick else 60.0)
    rng = np.random.default_rng(args.seed)
    # compile the kernels outside the timed runs
    for A in (rng.random((50, 8)), sp.random(50, 30, density=0.2, format="csr",
                                             random_state=0)):
        for dt in (np.float64, np.float32):
            Xw = A.T.astype(dt) if not sp.issparse(A) else A.T.tocsc().astype(dt)
            for s in MN_OURS:
                fit_multinomial(Xw, np.arange(50) % 3, alpha=1e-2, solver=s, max_iter=3)
    classes = dict(MN_CLASSES)
    if args.only:
        classes = {k: v for k, v in classes.items() if k in args.only.split(",")}
    names = tuple(f"rl-{s}" for s in MN_OURS) + MN_PEERS + ("snapml",)
    print(f"{'problem':<26} {'n':>6} {'d':>6} {'K':>4}  " + " ".join(f"{s:>17}" for s in names))
    records = []
    for cname, (build, full, quick) in classes.items():
        A, y = build(np.random.default_rng(rng.integers(2**31)), quick if args.quick else full)
        for C in MN_CS:
            for dtype in ((np.float64, np.float32) if args.float32 else (np.float64,)):
                pb = MNProblem(cname, A, y, C, dtype)
                pstar = mn_reference(pb)
                runs = {f"rl-{s}": mn_run_roofline(pb, s, cap, pstar) for s in MN_OURS}
                for s in MN_PEERS:
                    runs[s] = mn_run_sklearn(pb, s, cap, pstar)
                runs["snapml"] = mn_run_snapml(pb, cap, pstar)
                pstar = min([pstar] + [P for pts in runs.values() if pts for _, P in pts])
                times = {s: [first_time(pts, pstar, lv) for lv in LEVELS]
                         for s, pts in runs.items()}
                label = f"{cname} C={C:g}" + (" f32" if dtype == np.float32 else "")
                rec = dict(problem=label, n=pb.n, d=pb.d, K=pb.K, pstar=pstar, times=times,
                           ran={s: pts is not None for s, pts in runs.items()})
                records.append(rec)
                cells = ["n/a".rjust(17) if runs[s] is None else
                         f"{_f(times[s][0]):>8} {_f(times[s][1]):>8}" for s in names]
                print(f"{label:<26} {pb.n:>6} {pb.d:>6} {pb.K:>4}  " + " ".join(cells),
                      flush=True)
    print()
    print(mn_markdown(records))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(records, fh, indent=1)


def mn_markdown(records):
    """Seconds to 1e-4 per solver, the fastest peer and Roofline's best ratio to it."""
    ours = tuple(f"rl-{s}" for s in MN_OURS)
    peers = MN_PEERS + ("snapml",)
    head = ("| problem | n | d | K | " + " | ".join(ours + peers)
            + " | fastest peer | Roofline best / fastest peer |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    ratios = []
    for r in records:
        t = {s: r["times"][s][1] for s in ours + peers if r["ran"].get(s)}
        cells = [("n/a" if not r["ran"].get(s) else _f(t[s])) for s in ours + peers]
        pt = [(v, s) for s, v in t.items() if s in peers and v is not None]
        ot = [v for s, v in t.items() if s in ours and v is not None]
        if pt and ot:
            ratio = min(ot) / min(pt)[0]
            ratios.append(ratio)
        else:
            ratio = None
        lines.append(f"| {r['problem']} | {r['n']} | {r['d']} | {r['K']} | "
                     + " | ".join(cells)
                     + f" | {min(pt)[1] if pt else '-'} | "
                     + ("-" if ratio is None else f"{ratio:.2f}") + " |")
    if ratios:
        lines.append(f"\nmedian ratio {np.median(ratios):.2f}, max {max(ratios):.2f} "
                     f"over {len(ratios)} problems")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# L1 / elastic-net paths (--path): 20 values of C with warm starts, time to 1e-4 at every C


PATH_NC = 20
PATH_TOLS = (1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8)


def l1_objective(A, y01, w, alpha, l1_ratio=1.0):
    """Mean logistic loss + ``alpha (l1_ratio ||w||_1 + (1 - l1_ratio) ||w||^2 / 2)``."""
    s = np.where(y01 > 0, 1.0, -1.0)
    L = np.mean(np.logaddexp(0.0, -s * (A @ w)))
    return float(L + alpha * (l1_ratio * np.abs(w).sum() + 0.5 * (1 - l1_ratio) * (w @ w)))


def path_alphas(A, y01, n_values=PATH_NC, ratio=1e-3, l1_ratio=1.0):
    """``alpha_max`` (the smallest ``alpha`` whose optimum is 0) down to ``ratio`` of it."""
    g = np.abs(np.asarray(A.T @ (y01 - 0.5))).ravel().max() / A.shape[0]
    return g / l1_ratio * np.logspace(0, np.log10(ratio), n_values)


def path_roofline(A, X, y01, alphas, tol, penalty="l1", l1_ratio=1.0, solver="auto"):
    from roofline.glm import fit_glm

    w, out = None, []
    t0 = time.perf_counter()
    kw = {} if penalty == "l1" else {"l1_ratio": l1_ratio}
    for a in alphas:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = fit_glm(X, y01, loss="logistic", penalty=penalty, alpha=a, fit_intercept=False,
                        tol=tol, max_iter=10_000, coef_init=w, random_state=0, solver=solver,
                        **kw)
        w = np.asarray(r.coef, np.float64).ravel()
        out.append(w)
    return time.perf_counter() - t0, out


def path_sklearn(A, y01, alphas, tol, solver, l1_ratio=1.0):
    from sklearn.linear_model import LogisticRegression

    n = A.shape[0]
    kw = dict(penalty="l1") if l1_ratio == 1.0 else dict(penalty="elasticnet",
                                                         l1_ratio=l1_ratio)
    m = LogisticRegression(solver=solver, tol=tol, max_iter=100_000, fit_intercept=False,
                           warm_start=True, **kw)
    out = []
    t0 = time.perf_counter()
    for a in alphas:
        m.set_params(C=1.0 / (a * n))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m.fit(A, y01)
        out.append(m.coef_.ravel().astype(np.float64))
    return time.perf_counter() - t0, out


def path_main(args):
    """Per problem and solver: the path's total time at each tolerance, the largest relative
    suboptimality along it; time to 1e-4: the first tolerance whose path is within 1e-4 at
    every C.

    The printed ``(tol t)`` is that tolerance: the loosest of :data:`PATH_TOLS` given to the
    solver at which every point of its path is within a relative 1e-4 of the best objective
    found at that C (by any run: Roofline's path at tol 1e-10, every solver's tighter runs),
    measured on the objective itself, not on the solver's own stopping test.  A run whose
    ``tol=1e-2`` path is already within 1e-4 (Roofline's duality gap is a bound, often loose)
    is timed there.  The Roofline columns are ``scd`` and ``prox-newton`` run explicitly;
    the ratio column is ``auto``'s choice (named) over the fastest peer.
    """
    from roofline.glm import choose_solver, fit_glm

    cap = args.time_cap or (60.0 if args.quick else 300.0)
    rng = np.random.default_rng(args.seed)
    problems = {"breast_cancer": breast_cancer(rng, 0),
                "text_n<<d": text_sparse(np.random.default_rng(rng.integers(2**31)),
                                         1_000 if args.quick else 5_000)}
    landed = "l1_ratio" in (fit_glm.__doc__ or "")
    variants = [("l1", 1.0)] + ([("elasticnet", 0.5)] if landed else [])
    if not landed:
        print("fit_glm has no elastic net (l1_ratio) in this checkout: L1 paths only")
    records = []
    for name, (A, y) in problems.items():
        if args.only and name not in args.only.split(","):
            continue
        A = A.tocsr() if sp.issparse(A) else np.ascontiguousarray(A)
        X = A.T.tocsc() if sp.issparse(A) else np.ascontiguousarray(A.T)
        if sp.issparse(X):
            X.sum_duplicates()
            X.sort_indices()
        y01 = np.asarray(y, np.float64)
        for penalty, l1r in variants:
            alphas = path_alphas(A, y01, l1_ratio=l1r)
            # warm-up (numba compiles), then the reference: the tightest Roofline path
            for sv in ROOFLINE_PATH:
                path_roofline(A, X, y01, alphas[:2], 1e-3, penalty, l1r, sv)
            _, ref_w = path_roofline(A, X, y01, alphas, 1e-10, penalty, l1r)
            ref = [l1_objective(A, y01, w, a, l1r)
                   for w, a in zip(ref_w, alphas, strict=True)]
            auto = choose_solver(X, loss="logistic", penalty=penalty, alpha=alphas[-1],
                                 fit_intercept=False)[0]
            runs = {sv: ("roofline", sv) for sv in ROOFLINE_PATH}
            for s in ("saga", "liblinear") if l1r == 1.0 else ("saga",):
                runs[f"sk-{s}"] = ("sklearn", s)
            res = {}
            for sname, (kind, s) in runs.items():
                pts = []
                for tol in PATH_TOLS:
                    if kind == "roofline":
                        t, ws = path_roofline(A, X, y01, alphas, tol, penalty, l1r, s)
                    else:
                        t, ws = path_sklearn(A, y01, alphas, tol, s, l1r)
                    P = [l1_objective(A, y01, w, a, l1r) for w, a in zip(ws, alphas, strict=True)]
                    pts.append((tol, t, P))
                    ref = [min(r, p) for r, p in zip(ref, P, strict=True)]
                    if t > cap:
                        break
                res[sname] = pts
            times = {}
            for sname, pts in res.items():
                times[sname] = None
                for tol, t, P in pts:
                    worst = max((p - r) / abs(r) for p, r in zip(P, ref, strict=True))
                    if worst <= 1e-4:
                        times[sname] = (t, tol)
                        break
            label = f"{name} {penalty}" + ("" if l1r == 1.0 else f" l1_ratio={l1r:g}")
            records.append(dict(problem=label, n=A.shape[0], d=A.shape[1], times=times,
                                auto=auto))
            print(label, {k: (None if v is None else f"{v[0]:.3f}s (tol {v[1]:g})")
                          for k, v in times.items()}, f"auto: {auto}", flush=True)
    print()
    print(path_markdown(records))


#: The Roofline solvers of the path table (``auto`` picks one of them).
ROOFLINE_PATH = ("scd", "prox-newton")


def path_markdown(records):
    """The path table: one column per solver of any record ("n/a" where a solver does not
    solve that problem, "-" where it did not reach 1e-4 within the time cap), the ratio of
    ``auto``'s choice to the fastest peer."""
    cols = []
    for r in records:
        cols += [k for k in r["times"] if k not in cols]
    head = ("| path (20 C, warm starts; s to 1e-4) | n | d | " + " | ".join(cols)
            + " | auto | auto / fastest peer |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in records:
        t = r["times"]
        cells = ["n/a" if k not in t else "-" if t[k] is None else f"{t[k][0]:.3f}"
                 for k in cols]
        peers = [v[0] for k, v in t.items() if k not in ROOFLINE_PATH and v is not None]
        mine = t.get(r["auto"])
        ratio = "-" if not peers or mine is None else f"{mine[0] / min(peers):.2f}"
        lines.append(f"| {r['problem']} | {r['n']} | {r['d']} | " + " | ".join(cells)
                     + f" | {r['auto']} | {ratio} |")
    return "\n".join(lines)


ROOFLINE = ("newton", "cholesky", "scd", "tpa-scd")
PEERS = ("lbfgs", "liblinear-primal", "liblinear-dual")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes, < 3 minutes")
    p.add_argument("--criteo-1m", action="store_true", help="add the 1M-example Criteo-like set")
    p.add_argument("--only", default=None, help="comma-separated problem classes")
    p.add_argument("--time-cap", type=float, default=None, help="seconds per solver run")
    p.add_argument("--json", default=None, help="write the raw times here")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--multinomial", action="store_true",
                   help="the multinomial table (softmax loss) instead of the binary one")
    p.add_argument("--path", action="store_true",
                   help="the L1 (and elastic-net) path table: 20 C values, warm starts")
    p.add_argument("--float32", action="store_true",
                   help="with --multinomial: every problem in float32 too")
    p.add_argument("--markdown", default=None,
                   help="print the table of a --json file as Markdown (no runs)")
    args = p.parse_args(argv)
    if args.markdown:
        with open(args.markdown) as fh:
            records = json.load(fh)
        print(markdown(records))
        summary(records)
        return
    if args.multinomial:
        mn_main(args)
        return
    if args.path:
        path_main(args)
        return
    from roofline.glm import choose_solver

    cap = args.time_cap or (1.0 if args.quick else 30.0)
    # Roofline's iterations are capped as liblinear's dual hinge runs' largest max_iter (the
    # peers' runs go up to ITS[-1], x10 for LinearSVC): the time cap is what stops a slow run
    max_iter = 300 if args.quick else 10 * ITS[-1]
    rng = np.random.default_rng(args.seed)
    warmup()
    classes = dict(CLASSES)
    if not glob.glob("/usr/share/**/heart_scale", recursive=True):
        print("heart_scale: not found under /usr/share (Debian's liblinear-tools is not "
              "installed): skipped")
        classes.pop("heart_scale")
    if not args.criteo_1m:
        classes.pop("criteo_1m")
    if args.only:
        classes = {k: v for k, v in classes.items() if k in args.only.split(",")}
    names = ("auto",) + ROOFLINE + PEERS + ("snapml",)
    print(f"{'problem':<28} {'n':>7} {'d':>8}  " + " ".join(f"{s:>17}" for s in names))
    print(f"{'':<28} {'':>7} {'':>8}  " + " ".join(f"{'1e-3   1e-4':>17}" for _ in names))
    records = []
    t_all = time.perf_counter()
    for cname, (build, full, quick, losses) in classes.items():
        size = quick if args.quick else full
        if args.quick and quick is None:
            continue
        A, y = build(np.random.default_rng(rng.integers(2**31)), size)
        for loss in losses:
            for C in CS:
                pb = Problem(cname, A, y, loss, C)
                pstar = reference(pb)
                runs = {}
                for s in ROOFLINE:
                    if (s == "newton" and loss == "hinge") or (s == "cholesky"
                                                                 and loss != "squared"):
                        continue
                    # one untimed iteration first: numba compiles a kernel at its first call
                    # with new argument types (the disk cache is per source file: after an
                    # edit, a solver path warmup() did not take compiles inside its timed run)
                    run_roofline(pb, s, cap, 1, None)
                    runs[s] = run_roofline(pb, s, cap, max_iter, pstar)
                for s in PEERS:
                    runs[s] = run_sklearn(pb, s, cap, pstar)
                runs["snapml"] = run_snapml(pb, cap, pstar)
                best = min([P for pts in runs.values() if pts for _, P in pts] + [pstar])
                pstar = min(pstar, best)
                t0 = time.perf_counter()
                choice, _ = choose_solver(pb.X, loss=loss, penalty="l2", alpha=pb.alpha,
                                          fit_intercept=False, n_jobs=2)
                t_choice = time.perf_counter() - t0
                times = {s: [first_time(pts, pstar, lv) for lv in LEVELS]
                         for s, pts in runs.items()}
                times["auto"] = [None if t is None else t + t_choice
                                 for t in times.get(choice, [None, None])]
                nnz = pb.X.nnz if sp.issparse(pb.X) else int(np.count_nonzero(pb.X))
                rec = dict(problem=cname, loss=loss, C=C, n=pb.n, d=pb.d, nnz=nnz,
                           pstar=pstar, auto=choice, times=times,
                           ran={s: pts is not None for s, pts in runs.items()})
                records.append(rec)
                cells = []
                for s in names:
                    if s != "auto" and runs.get(s) is None:
                        cells.append(f"{'n/a':>17}")
                        continue
                    a, b = times.get(s, [None, None])
                    cells.append(f"{_f(a):>8} {_f(b):>8}")
                label = f"{cname} {loss[:4]} C={C:g}"
                print(f"{label:<28} {pb.n:>7} {pb.d:>8}  " + " ".join(cells)
                      + f"  auto={choice}", flush=True)
    print(f"\ntotal {time.perf_counter() - t_all:.0f} s")
    summary(records)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(records, fh, indent=1)


def _f(t):
    return "-" if t is None else f"{t:.3f}"


def markdown(records):
    """The records as a Markdown table: seconds to 1e-3 / 1e-4 per solver, the fastest peer's
    time at 1e-4 and auto's ratio to it."""
    names = ("auto",) + ROOFLINE + PEERS
    head = ("| problem | n | d | auto ran | " + " | ".join(names)
            + " | auto / fastest peer (1e-4) |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in records:
        cells = []
        for s in names:
            if s != "auto" and not r["ran"].get(s):
                cells.append("n/a")
                continue
            a, b = r["times"].get(s, [None, None])
            cells.append(f"{_f(a)} / {_f(b)}")
        peers = [r["times"][s][1] for s in PEERS + ("snapml",)
                 if r["ran"].get(s) and r["times"][s][1] is not None]
        a = r["times"]["auto"][1]
        ratio = "-" if not peers else ("inf" if a is None else f"{a / min(peers):.2f}")
        label = f"{r['problem']} {r['loss']} C={r['C']:g}"
        lines.append(f"| {label} | {r['n']} | {r['d']} | {r['auto']} | " + " | ".join(cells)
                     + f" | {ratio} |")
    return "\n".join(lines)


def summary(records):
    """auto against the fastest peer at 1e-4: the issue's targets.  Problems no peer solved
    within the cap are counted apart (auto solved them or not)."""
    ratios, alone, none = [], 0, 0
    for r in records:
        peers = [r["times"][s][1] for s in PEERS + ("snapml",)
                 if r["ran"].get(s) and r["times"][s][1] is not None]
        a = r["times"]["auto"][1]
        if not peers:
            alone += a is not None
            none += a is None
            continue
        ratios.append((np.inf if a is None else a / min(peers), r))
    if not ratios:
        return
    v = np.array([x for x, _ in ratios])
    worst = max(ratios, key=lambda x: x[0])
    print(f"auto / fastest peer at 1e-4 over {len(v)} problems: median {np.median(v):.2f}, "
          f"max {worst[0]:.2f} ({worst[1]['problem']} {worst[1]['loss']} C={worst[1]['C']:g});"
          f" auto <= 1.2x the fastest peer on {(v <= 1.2).mean():.0%} of the problems, "
          f"<= 0.5x on {(v <= 0.5).mean():.0%}; {alone} more solved by auto alone, {none} by "
          "no solver")


if __name__ == "__main__":
    main()
