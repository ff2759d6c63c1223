"""``roofline train`` with a ``[solver]`` table: a coordinate-descent fit (fit_glm with a
GLMSolverOptions built from the table) instead of the minibatch learner."""

import json

import numpy as np
import pytest

from roofline import datasources as ds
from roofline.glm import GLMSolverOptions, fit_glm
from roofline.learners import load_checkpoint
from roofline.learners._cli import build_from_config, main
from tests.learners._configs import CD_CONFIG


def _write(tmp_path, text, name="cd.toml"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_train_with_a_solver_table_fits_by_coordinate_descent(tmp_path, capsys):
    cfg = _write(tmp_path, CD_CONFIG)
    parts, resolved = build_from_config(cfg)
    problem, opts = parts["solver"]
    assert isinstance(opts, GLMSolverOptions)
    assert (opts.solver, opts.n_workers, opts.tol, opts.max_iter, opts.dual) == \
        ("cocoa", 3, 1e-4, 200, True)
    assert (problem.alpha, problem.penalty, problem.seed) == (1e-2, "l2", 5)
    assert "optimizer" not in resolved and resolved["solver"]["solver"] == "cocoa"

    out = tmp_path / "run"
    assert main(["train", cfg, "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "cocoa:" in printed and "held-out logistic loss" in printed

    # the checkpoint holds exactly fit_glm's solution on the training split
    X, y = ds.make_criteo_like_matrix(3000, seed=3, n_bits=10, dtype=np.float64)
    ref = fit_glm(X[:, :2400].tocsc(), y[:2400], loss="logistic", alpha=1e-2,
                     random_state=5, options=opts)
    assert ref.converged
    ck = load_checkpoint(out / "model.npz")
    np.testing.assert_array_equal(ck.model.coef.ravel(), ref.coef)
    np.testing.assert_array_equal(ck.model.intercept, [ref.intercept])
    trace = json.loads((out / "trace.json").read_text())
    assert [t["objective"] for t in trace] == ref.objective.tolist()

    # the resolved config round-trips to the same options
    parts2, _ = build_from_config(out / "config.toml")
    assert parts2["solver"][1] == opts and parts2["solver"][0] == problem


@pytest.mark.parametrize("old,new,match", [
    ('solver = "cocoa"', 'solver = "cocoa"\nnope = 1', "unknown key 'nope'"),
    ("max_iter = 200", "max_iter = 0", "option 'max_iter' must be >= 1"),
    ('solver = "cocoa"', 'solver = "lbfgs"', "option 'solver' must be one of"),
    ("alpha = 1e-2", "alpha = 0.0", "option 'alpha' must be > 0"),
])
def test_solver_table_errors_name_the_key_and_file(tmp_path, old, new, match):
    cfg = _write(tmp_path, CD_CONFIG.replace(old, new))
    with pytest.raises((ValueError, TypeError), match=match) as e:
        build_from_config(cfg)
    assert "cd.toml [solver]" in str(e.value)


def test_solver_table_excludes_the_minibatch_tables(tmp_path):
    cfg = _write(tmp_path, CD_CONFIG + "\n[optimizer]\ntype = \"sgd\"\n")
    with pytest.raises(ValueError, match=r"\[solver\]: .*no \[optimizer\] table"):
        build_from_config(cfg)
    cfg = _write(tmp_path, CD_CONFIG.replace('loss = "logistic"', 'loss = "squared_hinge"'))
    # the registry's check, naming the file and the table: cocoa has no squared hinge (newton
    # has: tests/learners/test_cli_datasource.py)
    with pytest.raises(ValueError, match=r"cd.toml \[solver\]: .*does not support the "
                                         "squared_hinge loss"):
        build_from_config(cfg)


def test_auto_says_which_solver_ran(tmp_path, capsys):
    """``solver = "auto"``: the printed line and the checkpoint name the solver that ran and
    the rule's reason, not "auto"."""
    cfg = _write(tmp_path, CD_CONFIG.replace('solver = "cocoa"', 'solver = "auto"')
                 .replace("n_workers = 3", "n_workers = 1"))
    out = tmp_path / "run"
    assert main(["train", cfg, "-o", str(out)]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "iterations in" in ln)
    ran = line.split(" ")[0]
    assert ran != "auto" and "(auto: " in line
    ck = load_checkpoint(out / "model.npz")
    assert ck.meta["extra"]["solver"] == ran
