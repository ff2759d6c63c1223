"""``roofline train`` runs every solver of ``fit_glm`` from a datasource config (issue 35): the
source materialised into one CSC matrix (within ``[data] memory_budget_mb``) or streamed every
pass by ``fit_glm_stream`` (``[solver] stream = true``); checked against the exact ridge
solution, the Python API on the same examples, and an in-memory dual solve."""

import numpy as np
import pytest

from roofline import glm
from roofline.glm import GLMSolverOptions, fit_glm
from roofline.learners import load_checkpoint
from roofline.learners._cli import main
from tests.learners._cli_shards import assert_close, config, model_of, shards_fixture

N = 1600  # training examples of write_problem

shards = shards_fixture("shards", N)


@pytest.mark.parametrize("solver", glm.solver_names(runner="fit_glm", loss="squared",
                                                    penalty="l2", auto=False))
def test_every_solver_from_a_datasource_config_reaches_the_ridge_solution(shards, solver,
                                                                          capsys):
    d, X, y = shards
    alpha = 1e-2
    cfg = config(d, f'[solver]\nalpha = {alpha}\nsolver = "{solver}"\ntol = 1e-10\n'
                    'max_iter = 3000\n', loss="squared", model="fit_intercept = false",
                 name=f"{solver}.toml", out=solver)
    assert main(["train", cfg]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"{solver}: ") and "held-out squared loss" in printed
    # the exact minimiser of mean (w^T x - y)^2 / 2 + alpha ||w||^2 / 2 on the training shards
    Xd = X[:, :N].toarray()
    w_star = np.linalg.solve(Xd @ Xd.T / N + alpha * np.eye(Xd.shape[0]), Xd @ y[:N] / N)
    coef, b = model_of(f"{d}/{solver}")
    assert b == 0.0
    assert np.linalg.norm(coef - w_star) <= 1e-4 * np.linalg.norm(w_star)


def test_the_config_path_fits_exactly_what_the_python_api_fits(shards):
    """The materialised shards are the training examples: the CLI's model is fit_glm's on
    them, bit for bit (Newton is deterministic)."""
    d, X, y = shards
    cfg = config(d, '[solver]\nalpha = 1e-3\nsolver = "newton"\ntol = 1e-9\n', name="api.toml",
                 out="api")
    assert main(["train", cfg]) == 0
    ref = fit_glm(X[:, :N].tocsc(), y[:N], loss="logistic", alpha=1e-3,
                  options=GLMSolverOptions(solver="newton", tol=1e-9), random_state=0)
    coef, b = model_of(f"{d}/api")
    np.testing.assert_array_equal(coef, ref.coef)
    assert b == ref.intercept


def test_newton_takes_the_squared_hinge_from_a_config(shards):
    d, X, y = shards
    cfg = config(d, '[solver]\nalpha = 1e-2\nsolver = "newton"\ntol = 1e-9\n',
                 loss="squared_hinge", name="sqh.toml", out="sqh")
    assert main(["train", cfg]) == 0
    ref = fit_glm(X[:, :N].tocsc(), y[:N], loss="squared_hinge", alpha=1e-2, solver="newton",
                  tol=1e-9)
    np.testing.assert_allclose(model_of(f"{d}/sqh")[0], ref.coef, rtol=1e-9, atol=1e-12)


def test_stream_true_trains_out_of_core_to_the_in_memory_optimum(shards, capsys):
    d, X, y = shards
    cfg = config(d, '[solver]\nalpha = 1e-2\nstream = true\ntol = 1e-9\nmax_iter = 200\n\n'
                    '[stream]\nshuffle = 2\ncache = "memory"\n', name="stream.toml",
                 out="stream")
    assert main(["train", cfg]) == 0
    assert "held-out logistic loss" in capsys.readouterr().out
    # the same problem in memory: the dual, the intercept a regularised constant feature
    ref = fit_glm(X[:, :N].tocsc(), y[:N], loss="logistic", alpha=1e-2, solver="scd",
                  dual=True, tol=1e-11, max_iter=5000, intercept_scaling=1.0)
    assert_close(model_of(f"{d}/stream"), (ref.coef, ref.intercept), 1e-3)


def test_predict_a_datasource_in_its_order(shards, tmp_path):
    d, X, y = shards
    cfg = config(d, '[solver]\nalpha = 1e-2\nsolver = "newton"\n', name="pred.toml", out="pred")
    assert main(["train", cfg]) == 0
    m = load_checkpoint(f"{d}/pred/model.npz").model
    assert main(["predict", f"{d}/pred/model.npz", f"{d}/test.toml", "-o",
                 str(tmp_path / "p.npy")]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "p.npy"), m.predict(X[:, N:].tocsc()),
                               rtol=1e-12)


@pytest.mark.parametrize("solver_lines,data,match", [
    ('[solver]\nalpha = 1e-2\n', "memory_budget_mb = 0.01",
     r"cfg_bad.toml \[data\]: materialising the training source .* more than "
     r"memory_budget_mb = 0.01"),
    ('[solver]\nalpha = 1e-2\nstream = true\nsolver = "newton"\n', "",
     r"cfg_bad.toml \[solver\]: stream = true .* needs solver = 'auto' \(got 'newton'\)"),
    ('[solver]\nalpha = 1e-2\n\n[stream]\nshuffle = 1\n', "",
     r"cfg_bad.toml \[stream\]: a \[stream\] table needs \[solver\] stream = true"),
    ('[solver]\nalpha = 1e-2\nstream = true\n\n[stream]\nshufle = 1\n', "",
     r"cfg_bad.toml \[stream\]: unknown key 'shufle' \(allowed: .*shuffle"),
    ('[solver]\nalpha = 1e-2\nstream = true\n\n[stream]\nshuffle = -1\n', "",
     r"cfg_bad.toml \[stream\]: shuffle must be"),
    ('[solver]\nalpha = 1e-2\n\n[comm]\nbackend = "dask"\n', "",
     r"cfg_bad.toml \[comm\]: backend 'dask' needs the key 'address'"),
    ('[solver]\nalpha = 1e-2\n\n[comm]\nbackend = "spark"\n', "",
     r"cfg_bad.toml \[comm\]: option 'backend' must be one of"),
    ('[solver]\nalpha = 1e-2\n\n[comm]\nranks = 2\n', "",
     r"cfg_bad.toml \[comm\]: unknown key 'ranks'"),
])
def test_bad_configs_name_the_file_and_the_key(shards, capsys, solver_lines, data, match):
    d, _, _ = shards
    cfg = config(d, solver_lines, data=data, name="cfg_bad.toml", out="bad")
    assert main(["train", cfg]) == 2
    err = capsys.readouterr().err
    assert err.startswith("roofline train: error: ")
    import re

    assert re.search(match, err), err


def test_the_example_config_runs_as_documented(tmp_path, capsys):
    """examples/scale_logistic.toml and its two datasource configs, over small shards written
    where its comment says (data/scale beside examples/): the model is fit_glm's."""
    import os
    import shutil

    from roofline import datasources as ds

    root = os.path.join(os.path.dirname(__file__), "..", "..", "examples")
    (tmp_path / "examples").mkdir()
    for name in ("scale_logistic.toml", "scale_train_shards.toml", "scale_test_shards.toml"):
        shutil.copy(os.path.join(root, name), tmp_path / "examples" / name)
    X, y = ds.make_criteo_like_matrix(1500, seed=2, n_bits=9)
    data = str(tmp_path / "data" / "scale")
    ds.write_shards(ds.MatSource(X[:, :1200].tocsc(), y[:1200]), "train-{i:03d}.npz",
                    dirs=[data], examples_per_shard=400)
    ds.write_shards(ds.MatSource(X[:, 1200:].tocsc(), y[1200:]), "test-{i:03d}.npz",
                    dirs=[data], examples_per_shard=150)
    out = tmp_path / "run"
    assert main(["train", str(tmp_path / "examples" / "scale_logistic.toml"), "-o",
                 str(out)]) == 0
    assert "held-out logistic loss" in capsys.readouterr().out
    ref = fit_glm(X[:, :1200].tocsc().astype(np.float64), y[:1200], loss="logistic",
                  alpha=1e-5, solver="newton", tol=1e-8)
    coef, b = model_of(str(out))
    np.testing.assert_allclose(coef, ref.coef, rtol=1e-9, atol=1e-12)
    assert abs(b - ref.intercept) <= 1e-9 * max(1.0, abs(ref.intercept))


def test_each_rank_reads_its_own_shards_and_a_config_cannot_set_them(shards, tmp_path):
    from roofline.learners._cli import _datasource

    d, _, _ = shards
    parts = [_datasource(f"{d}/train.toml", r, 3) for r in range(3)]
    assert [p.shard_ids for p in parts] == [[0, 3, 6], [1, 4, 7], [2, 5]]
    assert sum(p.n_examples for p in parts) == N
    bad = tmp_path / "ranked.toml"
    bad.write_text(open(f"{d}/train.toml").read().replace('dirs = ["."]', f'dirs = ["{d}"]')
                   + "rank = 1\nsize = 3\n")
    with pytest.raises(ValueError, match=r"ranked.toml: \[source\] sets 'rank'/'size', but this "
                                         r"run shards the source itself \(rank 0 of 2\)"):
        _datasource(str(bad), 0, 2)
