"""The estimators' scikit-learn parameters (issue 34): ``class_weight``, ``warm_start``,
``penalty`` / ``l1_ratio``, ``intercept_scaling``, ``n_jobs``, each against scikit-learn on the
same problem; and ``import roofline.learners`` without scikit-learn."""

import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn import linear_model as sklm
from sklearn import svm as sksvm
from sklearn.datasets import make_classification, make_regression

from roofline.learners import LinearRegression, LinearSVC, LogisticRegression, Ridge
from roofline.learners._estimators import _resolve_n_jobs

# Our fits stop at tol=1e-10 (gradient max-norm, mean-loss scale), scikit-learn's at 1e-12:
# both within ~1e-8 of the optimum on these well-conditioned problems (measured: 1e-7 at
# worst, coefficients of order 1), so 1e-6 absolute is the agreement of one optimum.
ATOL = 1e-6


def _imbalanced(n=400, seed=0):
    return make_classification(n, 8, weights=[0.85, 0.15], flip_y=0.05, random_state=seed)


def _weights(n, seed=1):
    return np.random.default_rng(seed).uniform(0.5, 2.0, n)


# ---------------------------------------------------------------------------------------------
# class_weight

CLASS_WEIGHTS = [None, "balanced", {0: 0.5, 1: 3.0}, {1: 4.0}]


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("class_weight", CLASS_WEIGHTS)
def test_logistic_regression_class_weight_matches_sklearn(class_weight, sparse):
    """Class weights times sample weights ("balanced": counts weighted by the sample weights,
    as scikit-learn's LogisticRegression)."""
    X, y = _imbalanced()
    sw = _weights(len(y))
    Xin = sp.csr_matrix(X) if sparse else X
    ours = LogisticRegression(C=0.5, class_weight=class_weight, tol=1e-10,
                              max_iter=1000).fit(Xin, y, sample_weight=sw)
    sk = sklm.LogisticRegression(C=0.5, class_weight=class_weight, tol=1e-12,
                                 max_iter=10_000).fit(X, y, sample_weight=sw)
    np.testing.assert_allclose(ours.coef_, sk.coef_, atol=ATOL)
    np.testing.assert_allclose(ours.intercept_, sk.intercept_, atol=ATOL)


def test_class_weight_changes_the_fit():
    """The comparison above can fail: the balanced fit is far from the unweighted one."""
    X, y = _imbalanced()
    a = LogisticRegression(C=0.5, tol=1e-10).fit(X, y)
    b = LogisticRegression(C=0.5, class_weight="balanced", tol=1e-10).fit(X, y)
    assert np.abs(a.intercept_ - b.intercept_).max() > 0.5


@pytest.mark.parametrize("class_weight", CLASS_WEIGHTS)
def test_linear_svc_class_weight_matches_liblinear(class_weight):
    """Binary LinearSVC: liblinear's per-class C (``"balanced"`` counting samples, not their
    weights), with liblinear's regularised intercept (``intercept_scaling=1``)."""
    X, y = _imbalanced()
    ours = LinearSVC(C=0.5, class_weight=class_weight, intercept_scaling=1.0, tol=1e-14,
                     max_iter=1000).fit(X, y)
    sk = sksvm.LinearSVC(C=0.5, class_weight=class_weight, tol=1e-12,
                         max_iter=200_000).fit(X, y)
    np.testing.assert_allclose(ours.coef_, sk.coef_, atol=ATOL)
    np.testing.assert_allclose(ours.intercept_, sk.intercept_, atol=ATOL)


def test_balanced_counts_weighted_samples_in_both_classifiers():
    """scikit-learn 1.9 counts the classes of ``"balanced"`` weighted by ``sample_weight`` in
    its LogisticRegression and its LinearSVC (``compute_class_weight(..., sample_weight=)``):
    so do ours (the weighted counts' dict gives the same fit, the unweighted one does not)."""
    X, y = _imbalanced()
    sw = np.where(y == 1, 3.0, 1.0)
    wc = np.bincount(y, weights=sw)
    by_weight = {0: wc.sum() / (2 * wc[0]), 1: wc.sum() / (2 * wc[1])}
    by_count = {0: len(y) / (2 * np.sum(y == 0)), 1: len(y) / (2 * np.sum(y == 1))}
    for make in (lambda cw: LinearSVC(C=0.5, class_weight=cw, tol=1e-10),
                 lambda cw: LogisticRegression(C=0.5, class_weight=cw, tol=1e-10)):
        a = make("balanced").fit(X, y, sample_weight=sw)
        b = make(by_weight).fit(X, y, sample_weight=sw)
        c = make(by_count).fit(X, y, sample_weight=sw)
        np.testing.assert_allclose(a.coef_, b.coef_, atol=1e-8)
        assert np.abs(a.coef_ - c.coef_).max() > 1e-2


def test_multinomial_class_weight_matches_sklearn():
    X, y = make_classification(500, 8, n_informative=5, n_classes=3, weights=[0.6, 0.3, 0.1],
                               random_state=2)
    ours = LogisticRegression(C=0.5, class_weight="balanced", tol=1e-10,
                              max_iter=1000).fit(X, y)
    sk = sklm.LogisticRegression(C=0.5, class_weight="balanced", tol=1e-12,
                                 max_iter=10_000).fit(X, y)
    np.testing.assert_allclose(ours.coef_, sk.coef_, atol=ATOL)
    np.testing.assert_allclose(ours.intercept_, sk.intercept_, atol=ATOL)


def test_class_weight_over_comm_counts_every_rank():
    """"balanced" over comm: the classes counted over every rank (one rank alone holds
    almost no positives), hence the one-process fit."""
    from roofline.comm import run

    X, y = _imbalanced(seed=4)
    order = np.argsort(y, kind="stable")  # rank 0: mostly class 0, rank 1: the rest
    X, y = X[order], y[order]
    ref = LogisticRegression(C=0.5, class_weight="balanced", tol=1e-10).fit(X, y)

    def work(c):
        mine = np.array_split(np.arange(len(y)), c.size)[c.rank]
        est = LogisticRegression(C=0.5, class_weight="balanced", tol=1e-10, comm=c)
        est.fit(X[mine], y[mine])
        return est.coef_.ravel(), float(est.intercept_[0])

    for coef, icpt in run(work, 2, backend="threads", timeout=120):
        np.testing.assert_allclose(coef, ref.coef_.ravel(), atol=1e-6)
        assert abs(icpt - ref.intercept_[0]) <= 1e-6


@pytest.mark.parametrize("class_weight, match", [
    ("balance", "class_weight must be None, 'balanced' or a dict"),
    ([1.0, 2.0], "class_weight must be None, 'balanced' or a dict"),
    ({0: 1.0, 7: 2.0}, "class_weight has labels that are not classes"),
    ({0: -1.0}, r"class_weight\[0\]"),
    ({0: 0.0, 1: 0.0}, "sums to zero"),
])
def test_bad_class_weight_raises(class_weight, match):
    X, y = _imbalanced(n=60)
    for est in (LogisticRegression(class_weight=class_weight),
                LinearSVC(class_weight=class_weight)):
        with pytest.raises(ValueError, match=match):
            est.fit(X, y)


def test_partial_fit_takes_a_class_weight_dict_not_balanced():
    X, y = _imbalanced(n=200)
    est = LogisticRegression(solver="adagrad", class_weight="balanced")
    with pytest.raises(ValueError, match="class_weight='balanced' is not supported by "
                                         "partial_fit"):
        est.partial_fit(X, y, classes=[0, 1])
    sw = np.where(y == 1, 5.0, 1.0)
    a = LogisticRegression(solver="adagrad", class_weight={1: 5.0}, random_state=0)
    b = LogisticRegression(solver="adagrad", random_state=0)
    a.partial_fit(X, y, classes=[0, 1])
    b.partial_fit(X, y, classes=[0, 1], sample_weight=sw)
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-12)


# ---------------------------------------------------------------------------------------------
# warm_start


def _warm_vs_cold(make, X, y, first, second):
    """Fit ``make(**first)``, refit it with ``second`` warm; a cold fit with ``second``."""
    warm = make(warm_start=True, **first).fit(X, y)
    warm.set_params(**second).fit(X, y)
    cold = make(**second).fit(X, y)
    return warm, cold


CLASSIFIERS = {
    "newton": lambda **kw: LogisticRegression(tol=1e-14, fit_intercept=False, **kw),
    "lbfgs": lambda **kw: LogisticRegression(solver="lbfgs", tol=1e-14, max_iter=500, **kw),
    "l1-scd": lambda **kw: LogisticRegression(penalty="l1", solver="scd", tol=1e-9,
                                              max_iter=2000, random_state=0, **kw),
    "svc-newton": lambda **kw: LinearSVC(tol=1e-14, fit_intercept=False, **kw),
}


@pytest.mark.parametrize("name", sorted(CLASSIFIERS))
def test_warm_start_takes_fewer_iterations_to_the_same_optimum(name):
    """A regularisation path's next point: from the previous optimum (C=1) to C=1.2, in
    fewer iterations than from zero, to the cold fit's optimum."""
    X, y = _imbalanced()
    warm, cold = _warm_vs_cold(CLASSIFIERS[name], X, y, {"C": 1.0}, {"C": 1.2})
    assert warm.n_iter_[0] < cold.n_iter_[0], (warm.n_iter_, cold.n_iter_)
    np.testing.assert_allclose(warm.coef_, cold.coef_, atol=1e-6)
    np.testing.assert_allclose(warm.intercept_, cold.intercept_, atol=1e-6)


def test_warm_start_passes_the_intercept_to_fit_glm():
    """fit_glm's rows start from the previous intercept too (``intercept_init``): a refit from
    the optimum is done at once (from the coefficients alone Newton took 5 iterations)."""
    X, y = _imbalanced()
    est = LogisticRegression(C=1.0, tol=1e-9, solver="newton", warm_start=True).fit(X, y)
    first = (est.coef_.copy(), est.intercept_.copy())
    est.fit(X, y)
    assert est.n_iter_[0] <= 1
    np.testing.assert_allclose(est.coef_, first[0], atol=1e-9)
    np.testing.assert_allclose(est.intercept_, first[1], atol=1e-9)


def test_warm_start_multinomial_and_ridge():
    X, y = make_classification(400, 8, n_informative=5, n_classes=3, random_state=5)
    make = lambda **kw: LogisticRegression(tol=1e-8, **kw)  # noqa: E731
    warm, cold = _warm_vs_cold(make, X, y, {"C": 1.0}, {"C": 1.2})
    assert warm.n_iter_[0] < cold.n_iter_[0]
    np.testing.assert_allclose(warm.coef_, cold.coef_, atol=1e-6)
    Xr, yr = make_regression(300, 10, noise=1.0, random_state=0)
    for solver in ("newton", "lbfgs"):
        make = lambda s=solver, **kw: Ridge(solver=s, tol=1e-9, max_iter=500, **kw)  # noqa: E731
        warm, cold = _warm_vs_cold(make, Xr, yr, {"alpha": 1.0}, {"alpha": 1.5})
        assert warm.n_iter_ < cold.n_iter_, (solver, warm.n_iter_, cold.n_iter_)
        np.testing.assert_allclose(warm.coef_, cold.coef_, rtol=1e-6, atol=1e-6)


def test_without_warm_start_a_refit_starts_from_zero():
    X, y = _imbalanced()
    est = LogisticRegression(solver="lbfgs", tol=1e-9).fit(X, y)
    n = est.n_iter_[0]
    assert est.fit(X, y).n_iter_[0] == n > 1
    assert est.set_params(warm_start=True).fit(X, y).n_iter_[0] < n


def test_warm_start_with_other_features_raises():
    X, y = _imbalanced()
    est = LogisticRegression(warm_start=True).fit(X, y)
    with pytest.raises(ValueError, match="warm_start=True: the previous fit's coef_"):
        est.fit(X[:, :5], y)
    with pytest.raises(ValueError, match="warm_start must be a bool"):
        LogisticRegression(warm_start="yes").fit(X, y)


# ---------------------------------------------------------------------------------------------
# penalty, l1_ratio


def test_penalty_none_matches_sklearn():
    X, y = _imbalanced(seed=3)  # flip_y: not separable
    for kw in ({"penalty": None}, {"C": np.inf}):
        ours = LogisticRegression(tol=1e-10, max_iter=1000, **kw).fit(X, y)
        sk = sklm.LogisticRegression(C=np.inf, solver="newton-cg", tol=1e-12,
                                     max_iter=10_000).fit(X, y)
        np.testing.assert_allclose(ours.coef_, sk.coef_, atol=1e-5)
        np.testing.assert_allclose(ours.intercept_, sk.intercept_, atol=1e-5)
    # and it is not the default C=1 fit
    assert np.abs(LogisticRegression().fit(X, y).coef_ - ours.coef_).max() > 1e-2


def test_penalty_none_multinomial_matches_sklearn():
    # no redundant features: with make_classification's default two (linear combinations of
    # the informative ones) the unpenalised optimum is not unique (a flat valley: scikit-learn's
    # lbfgs and the multinomial Newton fit then end 0.04 apart at the same loss, 1e-15)
    X, y = make_classification(500, 8, n_informative=5, n_redundant=0, n_classes=3,
                               flip_y=0.1, random_state=2)
    ours = LogisticRegression(penalty=None, tol=1e-10, max_iter=1000).fit(X, y)
    sk = sklm.LogisticRegression(C=np.inf, tol=1e-12, max_iter=10_000).fit(X, y)
    # fit_multinomial's alpha=0: the unpenalised (centred) optimum itself
    np.testing.assert_allclose(ours.coef_, sk.coef_, atol=1e-5)
    np.testing.assert_allclose(ours.intercept_, sk.intercept_, atol=1e-5)


@pytest.mark.parametrize("kw", [{"penalty": "l1"}, {"l1_ratio": 1.0},
                                {"penalty": "elasticnet", "l1_ratio": 1}])
def test_l1_penalty_matches_sklearn(kw):
    """``C sum_i l_i + ||w||_1`` (scikit-learn's saga, the same objective): the same
    coefficients and the same zeros."""
    X, y = _imbalanced()
    ours = LogisticRegression(C=0.1, tol=1e-10, max_iter=5000, random_state=0, **kw).fit(X, y)
    sk = sklm.LogisticRegression(l1_ratio=1.0, C=0.1, solver="saga", tol=1e-12,
                                 max_iter=100_000).fit(X, y)
    assert ours.solver_ == "prox-newton"  # auto: few features (glm/_auto.py)
    np.testing.assert_allclose(ours.coef_, sk.coef_, atol=1e-6)
    np.testing.assert_allclose(ours.intercept_, sk.intercept_, atol=1e-6)
    assert (ours.coef_ == 0).sum() == (sk.coef_ == 0).sum() > 0


def test_elasticnet_l1_ratio_zero_is_l2():
    X, y = _imbalanced()
    a = LogisticRegression(penalty="elasticnet", l1_ratio=0.0, tol=1e-10).fit(X, y)
    b = LogisticRegression(tol=1e-10).fit(X, y)
    np.testing.assert_allclose(a.coef_, b.coef_, atol=1e-12)


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("kw", [{"penalty": "elasticnet", "l1_ratio": 0.5}, {"l1_ratio": 0.3}])
def test_elasticnet_matches_sklearn(kw, sparse):
    """``C sum_i l_i + r ||w||_1 + (1 - r) ||w||^2 / 2`` (scikit-learn's saga, the same
    objective; ``l1_ratio`` alone names it as in scikit-learn >= 1.8): the same coefficients
    and the same zeros."""
    X, y = _imbalanced()
    Xf = sp.csr_matrix(X) if sparse else X
    r = kw["l1_ratio"]
    ours = LogisticRegression(C=0.1, tol=1e-12, max_iter=5000, random_state=0, **kw).fit(Xf, y)
    sk = sklm.LogisticRegression(l1_ratio=r, C=0.1, solver="saga", tol=1e-12,
                                 max_iter=100_000).fit(X, y)
    assert ours.solver_ == "prox-newton"  # auto: few features (glm/_auto.py)

    def objective(est):
        z = X @ est.coef_.ravel() + est.intercept_[0]
        w = est.coef_
        return (0.1 * np.logaddexp(0, -np.where(y == 1, 1, -1) * z).sum()
                + r * np.abs(w).sum() + (1 - r) / 2 * (w ** 2).sum())

    assert abs(objective(ours) - objective(sk)) <= 1e-10 * objective(sk)
    # the objective is (1 - r)-strongly convex in w: ||dw||^2 <= 2 dP / (1 - r) bounds the
    # coefficients' distance by ~1e-5 at these objectives' agreement
    np.testing.assert_allclose(ours.coef_, sk.coef_, atol=1e-5)
    np.testing.assert_allclose(ours.intercept_, sk.intercept_, atol=1e-5)
    assert (ours.coef_ == 0).sum() == (sk.coef_ == 0).sum() > 0
    # neither the L1 nor the L2 fit
    for r in (0.0, 1.0):
        other = LogisticRegression(C=0.1, tol=1e-10, l1_ratio=r).fit(X, y)
        assert np.abs(other.coef_ - ours.coef_).max() > 1e-3


@pytest.mark.parametrize("kw", [{"penalty": "l1"}, {"l1_ratio": 0.5},
                                {"penalty": "l1", "class_weight": "balanced"}])
def test_l1_and_elasticnet_refuse_weights_by_name(kw):
    X, y = _imbalanced(n=60)
    sw = None if "class_weight" in kw else np.linspace(0.5, 2.0, len(y))
    with pytest.raises(ValueError, match="with non-uniform sample weights .or class_weight."):
        LogisticRegression(**kw).fit(X, y, sample_weight=sw)


@pytest.mark.parametrize("kw, match", [
    ({"penalty": "elasticnet", "l1_ratio": 0.5, "solver": "newton"}, "newton"),
    ({"penalty": "elasticnet", "l1_ratio": 0.5, "solver": "lbfgs"}, "lbfgs"),
    ({"penalty": "elasticnet"}, "penalty='elasticnet' needs l1_ratio"),
    ({"penalty": "l3"}, "penalty must be one of"),
    ({"penalty": None, "l1_ratio": 1.0}, "contradicts penalty=None"),
    ({"penalty": "l1", "solver": "lbfgs"}, "lbfgs"),
    ({"penalty": "l1", "solver": "newton"}, "newton"),
    ({"l1_ratio": 2.0}, "l1_ratio"),
])
def test_unsupported_penalties_raise(kw, match):
    X, y = _imbalanced(n=60)
    with pytest.raises(ValueError, match=match):
        LogisticRegression(**kw).fit(X, y)


# ---------------------------------------------------------------------------------------------
# intercept_scaling, n_jobs


@pytest.mark.parametrize("scaling", [1.0, 10.0])
def test_intercept_scaling_matches_liblinear(scaling):
    """liblinear's synthetic feature: the intercept regularised as ``(b / s)^2 / 2``."""
    X, y = _imbalanced()
    X = X + 2.0  # an intercept far from zero, so that its penalty matters
    ours = LogisticRegression(C=0.5, intercept_scaling=scaling, tol=1e-10).fit(X, y)
    sk = sklm.LogisticRegression(C=0.5, solver="liblinear", intercept_scaling=scaling,
                                 tol=1e-12, max_iter=10_000).fit(X, y)
    np.testing.assert_allclose(ours.coef_, sk.coef_, atol=ATOL)
    np.testing.assert_allclose(ours.intercept_, sk.intercept_, atol=ATOL)
    svc = LinearSVC(C=0.5, intercept_scaling=scaling, tol=1e-14).fit(X, y)
    sksvc = sksvm.LinearSVC(C=0.5, intercept_scaling=scaling, tol=1e-12,
                            max_iter=200_000).fit(X, y)
    np.testing.assert_allclose(svc.coef_, sksvc.coef_, atol=ATOL)
    np.testing.assert_allclose(svc.intercept_, sksvc.intercept_, atol=ATOL)
    # the default (None) leaves the intercept unregularised: another optimum
    free = LogisticRegression(C=0.5, tol=1e-10).fit(X, y)
    assert abs(free.intercept_[0] - ours.intercept_[0]) > 1e-3


def test_intercept_scaling_with_sparse_input_and_warm_start():
    X, y = _imbalanced()
    dense = LinearSVC(C=0.5, intercept_scaling=2.0, tol=1e-10).fit(X, y)
    est = LinearSVC(C=0.5, intercept_scaling=2.0, tol=1e-10, warm_start=True)
    est.fit(sp.csr_matrix(X), y)
    np.testing.assert_allclose(est.coef_, dense.coef_, atol=1e-8)
    np.testing.assert_allclose(est.intercept_, dense.intercept_, atol=1e-8)
    est.fit(sp.csr_matrix(X), y)  # warm, from the same optimum
    np.testing.assert_allclose(est.intercept_, dense.intercept_, atol=1e-8)
    with pytest.raises(ValueError, match="intercept_scaling must be positive"):
        LinearSVC(intercept_scaling=0.0).fit(X, y)


def test_n_jobs_has_sklearn_meaning():
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert _resolve_n_jobs(None) == 1
    assert _resolve_n_jobs(3) == 3
    assert _resolve_n_jobs(-1) == cpus
    assert _resolve_n_jobs(-2) == max(cpus - 1, 1)
    assert _resolve_n_jobs(-10_000) == 1
    X, y = _imbalanced()
    Xr, yr = make_regression(200, 5, random_state=0)
    for est in (LogisticRegression(n_jobs=-1), LinearSVC(n_jobs=None),
                Ridge(n_jobs=-1), LinearRegression(n_jobs=-1)):
        est.fit(*((X, y) if hasattr(est, "C") else (Xr, yr)))
    a = LogisticRegression(solver="scd", n_jobs=-1, tol=1e-9, random_state=0).fit(X, y)
    b = LogisticRegression(solver="scd", n_jobs=None, tol=1e-9, random_state=0).fit(X, y)
    np.testing.assert_allclose(a.coef_, b.coef_, atol=1e-12)
    for bad in (0, 1.5, True, "all"):
        with pytest.raises(ValueError, match="n_jobs must be None or a non-zero int"):
            LogisticRegression(n_jobs=bad).fit(X, y)


# ---------------------------------------------------------------------------------------------
# importing roofline.learners without scikit-learn


def _imports(code):
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    return out.stdout.split()


def test_import_learners_does_not_import_sklearn():
    assert _imports("import sys, roofline.learners; print('sklearn' in sys.modules)") == \
        ["False"]
    # the CLI's module (what `roofline --help` loads) neither
    assert _imports("import sys, roofline.learners._cli as c; print('sklearn' in sys.modules)"
                    ) == ["False"]
    # the estimators still come from the package, and bring it
    assert _imports("import sys\nfrom roofline.learners import LogisticRegression\n"
                    "print('sklearn' in sys.modules, LogisticRegression.__module__)") == \
        ["True", "roofline.learners._estimators"]


def test_cli_help_imports_no_sklearn():
    """``roofline --help`` (the console script's module, run as a script): its help, and in
    its import trace (``-X importtime``) neither scikit-learn nor roofline.glm."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "roofline.learners._cli",
                          "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "train a model from a TOML config" in out.stdout
    imported = [line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines()
                if line.startswith("import time:")]
    assert "roofline.gmat" in imported  # the trace is there
    assert not [m for m in imported if m.split(".")[0] == "sklearn" or m == "roofline.glm"]
