"""The solver registry (glm/_registry.py): one row per solver, every list and check derived
from it, and a solver added by one row."""

import ast
import collections
import io
import pathlib
import tokenize

import numpy as np
import pytest
import scipy.sparse as sp

from roofline import glm
from roofline.glm import (
    GLMResult,
    GLMSolverOptions,
    SolverSpec,
    check_solver,
    fit_glm,
    get_solver,
    register_solver,
    solver_names,
    solvers,
    unregister_solver,
)
from roofline.learners import LinearSVC, LogisticRegression, Ridge

ROOT = pathlib.Path(__file__).resolve().parents[2]
LIBRARY = ("kernels", "gmat", "glm", "learners", "dask_", "datasources", "comm")

#: Where a solver's name may be written as a string literal outside glm/_registry.py: where
#: the solver is implemented (it names itself in its result or branches on its variant), the
#: ``auto`` rule (which returns names), the minibatch optimizers' table of the estimators and
#: of the CLI's [optimizer] table, and a default argument.
ALLOWED = {
    "glm/_auto.py": {"scd", "newton", "cholesky", "cocoa", "lbfgs", "prox-newton"},  # answers
    "glm/_prox_newton.py": {"prox-newton"},
    "glm/_fit.py": {"scd", "tpa-scd", "cocoa", "hcocoa", "pure-block"},  # run_cd's variants
    "glm/_cocoa.py": {"cocoa", "hcocoa", "pure-block"},  # implemented there
    "glm/_scd.py": {"scd"},
    "glm/_newton.py": {"newton"},
    "glm/_direct.py": {"cholesky"},
    "glm/_multinomial.py": {"newton", "lbfgs"},  # its own two solvers, implemented there
    # pending: _problem.SOLVERS (unused since the registry) and GLMResult.solver's default,
    # in the distributed-Newton engineer's file
    "glm/_problem.py": {"scd", "tpa-scd", "cocoa", "hcocoa", "pure-block"},
    "glm/__init__.py": {"newton"},  # the submodule roofline.glm.newton
    "gmat/__init__.py": {"newton"},  # its deprecated alias
    "learners/_estimators.py": {"lbfgs", "adagrad"},  # the learner runner's optimizers
    "learners/_cli.py": {"lbfgs", "adagrad", "sgd"},  # the [optimizer] table's types
    "learners/_mf.py": {"adagrad", "sgd"},  # matrix factorization's minibatch optimizers
    "dask_/_estimators.py": {"cocoa"},  # the default solver=
}


def _literals():
    """``{file: Counter(name)}`` of the string literals equal to a solver's name."""
    names = set(solver_names(runner=None, auto=False))
    hits = collections.defaultdict(collections.Counter)
    for pkg in LIBRARY:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            rel = str(f.relative_to(ROOT))
            if rel == "glm/_registry.py":
                continue
            for tok in tokenize.generate_tokens(io.StringIO(f.read_text()).readline):
                if tok.type != tokenize.STRING:
                    continue
                try:
                    value = ast.literal_eval(tok.string)
                except (ValueError, SyntaxError):
                    continue
                if value in names:
                    hits[rel][value] += 1
    return hits


def test_solver_names_are_written_only_where_a_solver_is_implemented():
    hits = _literals()
    outside = {f: sorted(set(c) - ALLOWED.get(f, set())) for f, c in hits.items()}
    outside = {f: v for f, v in outside.items() if v}
    assert not outside, f"solver names listed outside the registry: {outside}"
    # no list of names anywhere: a file writes each allowed name a few times at most
    many = {f: {n: k for n, k in c.items() if k > 5} for f, c in hits.items()}
    assert not any(many.values()), many


def test_every_front_door_lists_the_registry():
    rows = list(glm._registry.SOLVERS)
    assert solver_names(runner=None) == (*rows, "auto")
    front = solver_names(runner="fit_glm")
    assert front == ("scd", "tpa-scd", "cocoa", "hcocoa", "pure-block", "prox-newton", "newton",
                     "cholesky", "auto")
    with pytest.raises(ValueError, match=r"option 'solver' must be one of \[.*'cholesky', "
                                         r"'auto'\]"):
        GLMSolverOptions(solver="lbfgs")
    with pytest.raises(ValueError, match="solver must be one of"):
        LogisticRegression(solver="nope").fit(np.ones((4, 2)), [0, 1, 0, 1])
    for est in (LogisticRegression, Ridge, LinearSVC):
        for name in solver_names(runner=None):
            assert f'"{name}"' in est.__doc__
    assert [s.name for s in solvers(partial_fit=True)] == ["adagrad", "sgd"]
    assert {s.name for s in solvers(comm=True)} == {"cocoa", "hcocoa", "pure-block",
                                                    "newton", "vw-hybrid"}
    assert [s.name for s in solvers(loss="hinge", runner="fit_glm")] == ["scd", "tpa-scd",
                                                                        "cocoa", "hcocoa"]
    assert [s.name for s in solvers(penalty="l1", runner="fit_glm", comm=False)] == [
        "scd", "tpa-scd", "prox-newton"]
    # the GPU runs TPA-SCD of the dual (fit_glm(device="gpu"), tests/glm/test_fit_gpu.py)
    assert [s.name for s in solvers() if "gpu" in s.devices] == ["tpa-scd"]
    for spec in solvers():
        assert spec.devices in (("cpu",), ("cpu", "gpu")) and spec.summary
        if spec.runner != "learner":
            assert callable(spec.load())
    assert get_solver("vw-hybrid").load().__name__ == "fit_vw_hybrid"  # lazily, from learners


@pytest.mark.parametrize("name,kw,match", [
    ("sag", {}, "solver must be one of"),
    ("newton", dict(loss="logistic", penalty="l1"), "solver='newton' needs penalty='l2'"),
    ("cholesky", dict(loss="logistic"), "solver='cholesky' solves ridge"),
    ("scd", dict(loss="squared_hinge"), "does not support the squared_hinge loss"),
    ("pure-block", dict(loss="logistic", dual=True), "primal only"),
    ("scd", dict(loss="squared", comm=True), "comm= runs cocoa, hcocoa, pure-block or newton"),
    ("scd", dict(loss="squared", weighted=True), "does not support non-uniform sample_weight"),
    ("auto", dict(loss="hinge", dual=False), "dual only"),
    ("auto", dict(loss="hinge", penalty="l1"), "not supported with loss='hinge'"),
])
def test_one_check_one_set_of_messages(name, kw, match):
    with pytest.raises(ValueError, match=match):
        check_solver(name, **kw)


def test_the_estimators_and_the_cli_use_the_registrys_messages(tmp_path):
    X = np.random.default_rng(0).standard_normal((40, 3))
    y = (X[:, 0] > 0).astype(int)
    with pytest.raises(ValueError, match="vw-hybrid.*logistic and squared"):
        LinearSVC(solver="vw-hybrid").fit(X, y)
    with pytest.raises(ValueError, match="comm= needs solver in"):
        LogisticRegression(solver="scd", comm=object()).fit(X, y)
    with pytest.raises(ValueError, match="solver='scd' does not support non-uniform"):
        Ridge(solver="scd").fit(X, X[:, 0], sample_weight=np.arange(1.0, 41.0))


def test_register_refuses_bad_rows():
    with pytest.raises(ValueError, match="already registered"):
        register_solver(get_solver("scd"))
    with pytest.raises(ValueError, match="other than 'auto'"):
        register_solver(SolverSpec("auto", print, ("squared",)))
    with pytest.raises(ValueError, match="losses must be"):
        register_solver(SolverSpec("x", print, ("poisson",)))
    with pytest.raises(ValueError, match="needs a fit"):
        register_solver(SolverSpec("x", None, ("squared",)))
    assert "x" not in solver_names()


def _toy_ridge(X, y, *, loss, alpha, penalty, fit_intercept, options, sample_weight=None,
               coef_init=None, callback=None, comm=None, verbose=0, random_state=None,
               blocks=None, comm_stats=None):
    """Ridge by a dense solve of its normal equations (mean loss + alpha ||w||^2 / 2)."""
    Xd = A = X.toarray() if sp.issparse(X) else np.asarray(X)
    d, n = A.shape
    if fit_intercept:
        A = np.vstack([A, np.ones(n)])
    H = A @ A.T / n
    H[np.arange(d), np.arange(d)] += alpha
    x = np.linalg.solve(H, A @ y / n)
    w, b = x[:d], (x[d] if fit_intercept else 0.0)
    r = w @ Xd + b - y
    P = 0.5 * np.mean(r**2) + 0.5 * alpha * w @ w
    return GLMResult(coef=w, intercept=float(b), n_iter=1, objective=np.array([P]),
                     gap_history=np.array([0.0]), times=np.array([0.0]), gap=0.0,
                     converged=True, time=0.0, solver=options.solver, loss=loss,
                     penalty=penalty, alpha=alpha)


@pytest.fixture
def toy():
    spec = register_solver(SolverSpec("toy-ridge", _toy_ridge, ("squared",),
                                      summary="a dense solve, for the test"))
    yield spec
    unregister_solver("toy-ridge")


def test_adding_a_solver_is_one_row(toy):
    rng = np.random.default_rng(3)
    A = rng.standard_normal((120, 5))
    y = A @ rng.standard_normal(5) + 0.1 * rng.standard_normal(120) + 2.0
    # fit_glm and its options take the new row
    assert "toy-ridge" in solver_names(runner="fit_glm")
    assert GLMSolverOptions(solver="toy-ridge").solver == "toy-ridge"
    res = fit_glm(A.T, y, loss="squared", alpha=1e-2, solver="toy-ridge")
    ref = fit_glm(A.T, y, loss="squared", alpha=1e-2, solver="cholesky", tol=1e-12)
    assert res.solver == "toy-ridge"
    np.testing.assert_allclose(res.coef, ref.coef, rtol=1e-9, atol=1e-12)
    assert res.intercept == pytest.approx(ref.intercept, rel=1e-9)
    # so do the estimators, with the registry's checks
    est = Ridge(alpha=1.2, solver="toy-ridge").fit(A, y)
    chol = Ridge(alpha=1.2, solver="cholesky", tol=1e-12).fit(A, y)
    assert est.solver_ == "toy-ridge"
    np.testing.assert_allclose(est.coef_, chol.coef_, rtol=1e-9, atol=1e-12)
    with pytest.raises(ValueError, match="solver='toy-ridge' supports the squared loss.*"
                                         "does not support the logistic loss"):
        LogisticRegression(solver="toy-ridge").fit(A, (y > 2).astype(int))
    with pytest.raises(ValueError, match="comm= runs"):
        fit_glm(A.T, y, loss="squared", alpha=1e-2, solver="toy-ridge", comm=object())


def test_a_removed_row_is_gone():
    assert "toy-ridge" not in solver_names()
    with pytest.raises(ValueError, match="option 'solver' must be one of"):
        GLMSolverOptions(solver="toy-ridge")


def test_fit_glm_takes_weights_where_the_row_does():
    rng = np.random.default_rng(4)
    A = rng.standard_normal((80, 4))
    y = A @ rng.standard_normal(4)
    sw = rng.uniform(0.5, 2.0, 80)
    res = fit_glm(A.T, y, loss="squared", alpha=1e-2, solver="newton", sample_weight=sw,
                  tol=1e-12)
    sw2 = np.where(np.arange(80) % 2 == 0, 2.0, 1.0)
    # integer weights = repeated examples
    a = fit_glm(A.T, y, loss="squared", alpha=1e-2, solver="cholesky", sample_weight=sw2)
    b = fit_glm(np.hstack([A.T, A.T[:, ::2]]), np.r_[y, y[::2]], loss="squared", alpha=1e-2,
                solver="cholesky")
    np.testing.assert_allclose(a.coef, b.coef, rtol=1e-9)
    assert res.converged and res.solver == "newton"
    # uniform weights are the unweighted problem, which every row takes
    u = fit_glm(A.T, y, loss="squared", alpha=1e-2, solver="scd", sample_weight=np.full(80, 3.0),
                random_state=0)
    v = fit_glm(A.T, y, loss="squared", alpha=1e-2, solver="scd", random_state=0)
    np.testing.assert_array_equal(u.coef, v.coef)
    with pytest.raises(ValueError, match="solver='scd' does not support non-uniform"):
        fit_glm(A.T, y, loss="squared", alpha=1e-2, solver="scd", sample_weight=sw)


def test_comm_dual_weights_row_field():
    """``comm_dual_weights``: a row whose dual takes non-uniform weights over ``comm=`` only
    (CoCoA's weighted SDCA), refused in its primal and without a communicator."""
    assert {s.name for s in solvers() if s.comm_dual_weights} == {"cocoa", "hcocoa"}
    assert check_solver("cocoa", loss="logistic", comm=True, weighted=True).name == "cocoa"
    assert check_solver("hcocoa", loss="hinge", dual=True, comm=True, weighted=True)
    with pytest.raises(ValueError, match="is its primal, which takes none"):
        check_solver("cocoa", loss="logistic", penalty="l1", comm=True, weighted=True)
    with pytest.raises(ValueError, match="is its primal, which takes none"):
        check_solver("cocoa", loss="logistic", dual=False, comm=True, weighted=True)
    with pytest.raises(ValueError, match="does not support non-uniform sample_weight"):
        check_solver("cocoa", loss="logistic", weighted=True)
    with pytest.raises(ValueError, match="does not support non-uniform sample_weight"):
        check_solver("pure-block", loss="logistic", comm=True, weighted=True)
