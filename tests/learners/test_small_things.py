"""Issue 34, "the small things a person notices", and issue 36, the roofline gauge of the factor
models: ``roofline --version``; the solver ``auto`` ran, recorded; the trace's
``roofline_fraction`` with or without a progress bar; a factor model's gauge from its own cost
model."""

import csv
import json
import math
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

import roofline.learners
from roofline import gmat
from roofline.datasources import MatSource, make_criteo_like_matrix
from roofline.learners import (
    GLM,
    ADAGrad,
    KMeansModel,
    Learner,
    MFModel,
    ModelUpdate,
    NMFModel,
    load_checkpoint,
)
from roofline.learners._cli import main
from tests.learners._configs import CD_CONFIG, TINY

# -- roofline --version ----------------------------------------------------------------------


def test_version_prints_the_installed_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out == f"roofline {roofline.learners.__version__}\n"


def test_version_imports_no_more_than_help():
    """``roofline --version`` is as fast as ``--help``: neither the solvers, the learner,
    scikit-learn nor matplotlib are imported (a fresh interpreter, as the console script)."""
    heavy = ["sklearn", "matplotlib", "roofline.glm", "roofline.datasources",
             "roofline.learners._learner", "roofline.learners._estimators", "tqdm"]
    code = ("import json, sys\nfrom roofline.learners._cli import main\n"
            "try:\n    main(['--version'])\nexcept SystemExit as e:\n    code = e.code\n"
            f"print(json.dumps([code, sorted(m for m in {heavy!r} if m in sys.modules)]))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    version, result = p.stdout.splitlines()
    assert version == f"roofline {roofline.learners.__version__}"
    assert json.loads(result) == [0, []]


# -- solver = "auto": which solver ran, printed and recorded ----------------------------------


def _cd_config(tmp_path, solver):
    p = tmp_path / f"{solver}.toml"
    p.write_text(CD_CONFIG.replace('solver = "cocoa"', f'solver = "{solver}"')
                 .replace("n_workers = 3", "n_workers = 1"))
    return str(p)


def test_auto_records_the_solver_it_ran_and_why(tmp_path, capsys):
    out = tmp_path / "auto"
    assert main(["train", _cd_config(tmp_path, "auto"), "-o", str(out)]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "iterations in" in ln)
    extra = load_checkpoint(out / "model.npz").meta["extra"]
    ran, reason = extra["solver"], extra["auto_reason"]
    assert extra["solver_requested"] == "auto" and ran != "auto" and reason
    assert line.startswith(f"{ran} (auto: {reason}): ")
    # a named solver: recorded as asked, no reason
    out = tmp_path / "named"
    assert main(["train", _cd_config(tmp_path, "cocoa"), "-o", str(out)]) == 0
    extra = load_checkpoint(out / "model.npz").meta["extra"]
    assert extra["solver"] == extra["solver_requested"] == "cocoa"
    assert "auto_reason" not in extra
    assert "(auto: " not in capsys.readouterr().out


# -- the roofline gauge without a progress bar -------------------------------------------------


def _fractions(trace):
    """The fractions of the rows with steps since the previous row (a pass end right after an
    evaluation has none: NaN)."""
    return [r["roofline_fraction"] for i, r in enumerate(trace)
            if i == 0 or r["step"] > trace[i - 1]["step"]]


def test_trace_has_the_roofline_fraction_without_a_progress_bar(tmp_path):
    """Issue 34: ``roofline_fraction`` was NaN in every row unless a terminal bar was shown."""
    X, y = make_criteo_like_matrix(6000, n_bits=14, dtype=np.float32, seed=4)[:2]
    learner = Learner(MatSource(X, y, batch_size=1000), GLM(), ADAGrad(), eval_every=2,
                      n_passes=2, progress=False)
    res = learner.train()
    assert learner._pbar is None or learner._pbar.disable  # no bar
    fr = _fractions(res.trace)
    assert len(fr) >= 4 and all(0 < f <= 1 for f in fr), fr
    learner.write_trace(tmp_path / "trace.csv")
    with open(tmp_path / "trace.csv") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["roofline_fraction"]) for r in rows if r["roofline_fraction"] != "nan"] \
        == pytest.approx([f for f in (r["roofline_fraction"] for r in res.trace)
                          if not math.isnan(f)])


def test_cli_trace_csv_has_the_roofline_fraction(tmp_path):
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY)
    assert main(["train", str(cfg), "-o", str(tmp_path / "run")]) == 0
    with open(tmp_path / "run" / "trace.csv") as f:
        rows = list(csv.DictReader(f))
    fr = [float(r["roofline_fraction"]) for r in rows]
    assert sum(0 < f <= 1 for f in fr) >= len(fr) - 2, fr  # pass ends after an eval: NaN


# -- issue 36: a factor model's gauge is its own cost model ------------------------------------


def _spy_cost(model):
    """Count the calls of ``model.cost`` (the instance attribute shadows the method)."""
    calls = []
    cost = model.cost

    def spy(batch):
        calls.append(batch.X.shape[1])
        return cost(batch)

    model.cost = spy
    return calls


def _check_gauge(learner, model, calls):
    res = learner.train()
    fr = _fractions(res.trace)
    assert len(fr) >= 3 and all(0 < f <= 1 for f in fr), fr
    assert len(calls) == sum(1 for r in res.trace if not math.isnan(r["roofline_fraction"]))
    # the step's bound is the model's cost (called once per row above), not a GLM step's
    batch = next(iter(learner.datasource))
    machine = gmat.machine_roofline()
    assert learner.step_roofline_time(batch, machine) == model.cost(batch).roofline_time(machine)


def test_kmeans_in_a_learner_reports_its_roofline_fraction():
    X = gmat.powerlaw_csc(2000, 3000, 30, dtype=np.float32, random_state=3)
    model = KMeansModel(n_clusters=6, seed=0)
    calls = _spy_cost(model)
    learner = Learner(MatSource(X, batch_size=500), model, ModelUpdate(), n_passes=2,
                      eval_every=2, progress=False)
    _check_gauge(learner, model, calls)


def test_mf_in_a_learner_reports_its_roofline_fraction():
    rng = np.random.default_rng(6)
    S = sp.random(150, 500, density=0.12, format="csc", random_state=rng)
    S.data = rng.integers(1, 6, S.nnz).astype(np.float64)
    model = MFModel(factors=4, regularization=0.05, dtype="float64")
    calls = _spy_cost(model)
    learner = Learner(MatSource(S, batch_size=50), model, ADAGrad(lr=0.1, fused=False),
                      n_passes=2, eval_every=3, progress=False)
    _check_gauge(learner, model, calls)
    # MF's cost: the SDDMM's and A*S^T's bytes, flops_per_step's flops
    b = next(iter(learner.datasource))
    c = model.cost(b)
    k = model.k
    assert c.bytes == (gmat.cost_sddmm(b.X, k, scale=False).bytes
                       + gmat.cost_mult_ast(b.X, k).bytes)
    assert c.flops == round(model.flops_per_step(b)) and c.nnz == b.X.nnz


def test_nmf_in_a_learner_reports_its_roofline_fraction():
    X = gmat.powerlaw_csc(800, 1500, 25, dtype=np.float32, random_state=5)
    X.data = np.abs(X.data) + 0.1  # non-negative
    model = NMFModel(n_components=4, seed=0)
    calls = _spy_cost(model)
    learner = Learner(MatSource(X, batch_size=300), model, ModelUpdate(), n_passes=2,
                      eval_every=2, progress=False)
    _check_gauge(learner, model, calls)


def test_gauge_off_and_dense_data_give_nan():
    X = gmat.powerlaw_csc(500, 1200, 20, dtype=np.float32, random_state=4)
    model = KMeansModel(n_clusters=3, seed=0)
    calls = _spy_cost(model)
    res = Learner(MatSource(X, batch_size=300), model, ModelUpdate(), eval_every=2,
                  progress=False, roofline_gauge="off").train()
    assert calls == [] and all(math.isnan(r["roofline_fraction"]) for r in res.trace)
    dense = KMeansModel(n_clusters=3, seed=0)
    calls = _spy_cost(dense)
    res = Learner(MatSource(np.asfortranarray(X.toarray()), batch_size=300), dense,
                  ModelUpdate(), eval_every=2, progress=False).train()
    assert calls == [] and all(math.isnan(r["roofline_fraction"]) for r in res.trace)
