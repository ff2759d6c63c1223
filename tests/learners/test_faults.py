"""Faults of the learners, estimators, checkpoints and CLI (issue 22, items 3 and 4 and the
weaker ones), each run for real and checked on values.  The CD solvers' faults are in
``test_faults_cd.py``."""

import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import minimize
from scipy.special import expit
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression as SkLogisticRegression
from sklearn.linear_model import Ridge as SkRidge
from sklearn.multiclass import OneVsRestClassifier

from roofline.datasources import MatSource
from roofline.learners import (
    GLM,
    LBFGS,
    ADAGrad,
    L2Regularizer,
    Learner,
    LogisticRegression,
    Ridge,
    load_checkpoint,
    save_checkpoint,
)
from roofline.learners._cli import main
from tests._helpers import make_problem


def classification(n=1000, d=5, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    w = rng.standard_normal(d)
    y = (X @ w + 0.5 * rng.standard_normal(n) > 0).astype(int)
    return X, y


def logistic_objective(coef, b, X, y, C=1.0):
    """scikit-learn's ``C sum log(1 + exp(-s eta)) + ||w||^2 / 2`` (s = +-1)."""
    eta = X @ coef + b
    return C * np.logaddexp(0.0, -(2 * y - 1) * eta).sum() + 0.5 * coef @ coef


# -- item 3: badly scaled data ------------------------------------------------------------------
def test_logistic_with_a_feature_scaled_by_1e30_reaches_the_optimum():
    X, y = classification()
    K = 1e30
    Xs = X.copy()
    Xs[:, 0] *= K
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        warnings.simplefilter("error", RuntimeWarning)
        m = LogisticRegression().fit(Xs, y)
    # the reference: the same problem in w0' = K w0 on the unscaled data; its penalty on w0'
    # is (w0' / K)^2 / 2, i.e. none -- minimised here by scipy directly
    s = 2 * y - 1

    def f(v):
        w, b = v[:-1], v[-1]
        eta = X @ w + b
        r = -s * expit(-s * eta)
        pen = np.r_[0.0, w[1:]]
        return np.logaddexp(0, -s * eta).sum() + 0.5 * pen @ pen, np.r_[X.T @ r + pen, r.sum()]

    ref = minimize(f, np.zeros(X.shape[1] + 1), jac=True, method="L-BFGS-B",
                   options=dict(gtol=1e-10, ftol=1e-15, maxiter=1000)).x
    got = np.r_[m.coef_[0, 0] * K, m.coef_[0, 1:], m.intercept_[0]]
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    # as accurate as scikit-learn on the unscaled data (scikit-learn's lbfgs itself stops
    # ABNORMAL on the scaled data)
    acc_ref = SkLogisticRegression().fit(X, y).score(X, y)
    assert m.score(Xs, y) >= acc_ref - 0.01
    assert acc_ref > 0.85


@pytest.mark.parametrize("sparse", [False, True])
def test_one_vs_rest_with_a_feature_scaled_by_1e30_matches_sklearn(sparse):
    rng = np.random.default_rng(9)
    X = rng.standard_normal((600, 4))
    y = (X @ rng.standard_normal((4, 3)) + 0.3 * rng.standard_normal((600, 3))).argmax(1)
    Xs = X.copy()
    Xs[:, 2] *= 1e30
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        m = LogisticRegression(tol=1e-8, max_iter=1000, multi_class="ovr").fit(
            sp.csr_matrix(Xs) if sparse else Xs, y)
    # reference: scikit-learn's one-vs-rest with feature 2 scaled by 1e4 only (its penalty
    # 1e-8 times smaller: as good as unpenalised, as it is at 1e30)
    Xr = X.copy()
    Xr[:, 2] *= 1e4
    ref = OneVsRestClassifier(SkLogisticRegression(tol=1e-12, max_iter=5000)).fit(Xr, y)
    ref_coef = np.vstack([e.coef_[0] for e in ref.estimators_])
    ref_coef[:, 2] *= 1e4
    got = m.coef_.copy()
    got[:, 2] *= 1e30
    np.testing.assert_allclose(got, ref_coef, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(m.intercept_, [e.intercept_[0] for e in ref.estimators_],
                               rtol=1e-3, atol=1e-4)


def test_ridge_with_a_feature_scaled_by_1e30_matches_sklearn():
    X, _ = classification(500, 4, seed=1)
    y = X @ np.array([1.0, -2.0, 0.5, 3.0]) + 0.1 * np.random.default_rng(1).standard_normal(500)
    Xs = X.copy()
    Xs[:, 0] *= 1e30
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        m = Ridge().fit(Xs, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scikit-learn warns of the ill-conditioned system
        r2_sk = SkRidge().fit(Xs, y).score(Xs, y)
    assert r2_sk > 0.99
    assert m.score(Xs, y) == pytest.approx(r2_sk, abs=1e-6)
    np.testing.assert_allclose(m.coef_[0] * 1e30, 1.0, rtol=0.05)


def test_a_1e300_value_gives_a_correct_model_and_no_runtime_warnings():
    X, y = classification(600, 4, seed=2)
    X[7, 0] = 1e300
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        m = LogisticRegression().fit(X, y)
    assert np.isfinite(m.coef_).all() and np.isfinite(m.intercept_).all()
    # at least as good as the best model that ignores feature 0 (a feasible point) ...
    ref = SkLogisticRegression(tol=1e-10, max_iter=1000).fit(X[:, 1:], y)
    f_ref = logistic_objective(np.r_[0.0, ref.coef_[0]], ref.intercept_[0], X, y)
    f_got = logistic_objective(m.coef_[0], m.intercept_[0], X, y)
    assert f_got <= f_ref + 1e-6 * abs(f_ref)
    assert m.score(X, y) >= ref.score(X[:, 1:], y) - 0.005
    # ... and the feature is used the only way it can be: for the example holding 1e300
    assert abs(m.coef_[0, 0]) < 1e-295


def test_abnormal_lbfgs_stop_is_a_convergence_warning():
    X, y = classification(400, 3, seed=3)
    Xc = np.asfortranarray(X.T)
    Xc[0] *= 1e30
    L = Learner(MatSource(Xc, y.astype(float)), GLM(loss="logistic", dtype="float64"),
                LBFGS(precondition="off"), mixins=[L2Regularizer(1e-3)], progress=False)
    with pytest.warns(ConvergenceWarning, match="abnormally"):
        L.train()


# -- item 4: non-convergence is signalled; verbose reaches stderr ------------------------------
def test_max_iter_stop_is_a_convergence_warning():
    X, y = classification(300, 5, seed=4)
    with pytest.warns(ConvergenceWarning, match="max_iter=2"):
        m = LogisticRegression(max_iter=2).fit(X, y)
    assert m.n_iter_[0] == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        LogisticRegression(max_iter=500).fit(X, y)
    Xc, yc = make_problem(20, 300, seed=4)
    L = Learner(MatSource(Xc, yc), GLM(dtype="float64"), LBFGS(max_iter=3),
                mixins=[L2Regularizer(1e-4)], progress=False)
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        L.train()


@pytest.mark.parametrize("solver,pattern,first", [("lbfgs", r"step (\d+): train", 1),
                                                   ("auto", r": iter (\d+)  objective", 0)])
def test_verbose_logs_progress_to_stderr_without_a_terminal(solver, pattern, first):
    """One line per L-BFGS step; one per Newton iteration (the default ``auto`` runs Newton
    here), the start included."""
    code = textwrap.dedent(f"""
        import numpy as np
        from roofline.learners import LogisticRegression
        rng = np.random.default_rng(0)
        X = rng.standard_normal((200, 3))
        y = (X[:, 0] > 0).astype(int)
        m = LogisticRegression(verbose=1, solver={solver!r}).fit(X, y)
        print(m.solver_, int(m.n_iter_[0]))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    ran, n_iter = r.stdout.split()[-2:]
    assert ran == ("newton" if solver == "auto" else solver)
    steps = re.findall(pattern, r.stderr)
    assert [int(s) for s in steps] == list(range(first, int(n_iter) + 1))


# -- weaker items: the estimators' arguments and weights ---------------------------------------
def test_estimator_arguments_are_named_in_errors():
    X, y = classification(60, 3, seed=5)
    with pytest.raises(ValueError, match="C must be a real number, got '1'"):
        LogisticRegression(C="1").fit(X, y)
    with pytest.raises(ValueError, match="random_state must be"):
        LogisticRegression(random_state="x").fit(X, y)
    with pytest.raises(ValueError, match="random_state must be"):
        LogisticRegression(solver="scd", random_state="x").fit(X, y)
    with pytest.raises(ValueError, match="alpha must be"):
        Ridge(alpha="1").fit(X, y)
    with pytest.raises(ValueError, match="max_iter must be an int"):
        LogisticRegression(max_iter=0).fit(X, y)


def test_sample_weights_that_cannot_weigh_are_named():
    X, y = classification(60, 3, seed=6)
    half = np.r_[np.ones(30), -np.ones(30)]  # sums to zero
    with pytest.raises(ValueError, match=r"sample_weight must be non-negative.*\[30\]"):
        LogisticRegression().fit(X, y, sample_weight=half)
    with pytest.raises(ValueError, match="sample_weight must be non-negative"):
        Ridge().fit(X, y, sample_weight=-np.ones(60))
    # a Learner whose examples all weigh zero says so (not "no examples")
    Xc, yc = make_problem(10, 30, seed=6)
    for opt in (LBFGS(), ADAGrad()):
        L = Learner(MatSource(Xc, yc, np.zeros(30)), GLM(dtype="float64"), opt, progress=False)
        with pytest.raises(ValueError, match="total (example )?weight"):
            L.train()


def test_a_learner_on_an_empty_source_raises():
    Xc = sp.csc_matrix((10, 0))
    for opt in (ADAGrad(), LBFGS()):
        L = Learner(MatSource(Xc, np.zeros(0)), GLM(dtype="float64"), opt, progress=False)
        with pytest.raises(ValueError, match="no .*examples"):
            L.train()


# -- concurrency ------------------------------------------------------------------------------
class GatedSource(MatSource):
    """A MatSource whose first pass waits at its first minibatch until released."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.entered, self.release = threading.Event(), threading.Event()

    def _batches(self):
        if not self.entered.is_set():
            self.entered.set()
            self.release.wait(30)
        yield from super()._batches()


def test_concurrent_train_on_one_learner_is_refused():
    X, y = make_problem(10, 200, seed=7)
    L = Learner(GatedSource(X, y, batch_size=20), GLM(dtype="float64"), ADAGrad(),
                n_passes=2, progress=False)
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("res", L.train()))
    t.start()
    try:
        assert L.datasource.entered.wait(30)
        with pytest.raises(RuntimeError, match="already running"):
            L.train()
    finally:
        L.datasource.release.set()
        t.join(60)
    assert out["res"].n_examples == 400 and out["res"].n_steps == 20


# -- checkpoints ------------------------------------------------------------------------------
def _model(seed=8):
    X, y = make_problem(10, 100, seed=seed)
    L = Learner(MatSource(X, y), GLM(dtype="float64"), ADAGrad(), progress=False)
    L.train()
    return L


def test_temporaries_of_a_killed_writer_are_removed_by_the_next_save(tmp_path):
    target = tmp_path / "ck.npz"
    code = textwrap.dedent(f"""
        import os, signal
        import numpy as np
        from roofline.learners import GLM, save_checkpoint
        m = GLM(dtype="float64")
        m.init(5)
        os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)  # killed mid-save
        save_checkpoint({str(target)!r}, m)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == -signal.SIGKILL, r.stderr
    left = [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
    assert len(left) == 1 and not target.exists()
    L = _model()
    L.save_checkpoint(target)
    assert [p for p in os.listdir(tmp_path) if p.endswith(".tmp")] == []
    np.testing.assert_array_equal(load_checkpoint(target).model.coef, L.model.coef)


def test_checkpoint_honours_the_umask(tmp_path):
    L = _model()
    old = os.umask(0o022)
    try:
        L.save_checkpoint(tmp_path / "a.npz")
        os.umask(0o077)
        L.save_checkpoint(tmp_path / "b.npz")
    finally:
        os.umask(old)
    assert os.stat(tmp_path / "a.npz").st_mode & 0o777 == 0o644
    assert os.stat(tmp_path / "b.npz").st_mode & 0o777 == 0o600


def test_checkpoint_into_a_missing_directory_names_the_target(tmp_path):
    L = _model()
    target = tmp_path / "missing" / "ck.npz"
    with pytest.raises(FileNotFoundError, match=re.escape(str(target))):
        save_checkpoint(target, L.model)


# -- the CLI ----------------------------------------------------------------------------------
CONFIG = """
[data]
type = "criteo_like"
n_examples = 500
n_bits = 8
batch_size = 100
[learner]
progress = false
"""


def test_cli_reports_paths_that_are_the_wrong_kind_in_one_line(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG)
    existing = tmp_path / "a_file"
    existing.write_text("x")
    assert main(["train", str(cfg), "-o", str(existing)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "exists and is not a directory" in err and str(existing) in err
    assert main(["train", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a directory" in err
    data_dir = tmp_path / "data.svm"
    data_dir.mkdir()
    cfg2 = tmp_path / "d.toml"
    cfg2.write_text('[data]\ntype = "svmlight"\npath = "data.svm"\n')
    assert main(["train", str(cfg2), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "data.svm is a directory" in err
