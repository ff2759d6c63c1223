"""The ``roofline`` command, run for real (a subprocess for train; main() in-process elsewhere)."""

import csv
import os
import subprocess
import sys

import numpy as np
import pytest
from scipy.special import expit
from sklearn.datasets import dump_svmlight_file, make_classification

from roofline.datasources import make_criteo_like_matrix
from roofline.learners import load_checkpoint
from roofline.learners._cli import build_from_config, main
from tests.learners._configs import TINY


def test_train_subprocess_then_predict(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(TINY)
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "roofline.learners._cli", "train", str(cfg), "-o",
                        str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "examples/s" in r.stdout and "best held-out loss" in r.stdout
    rows = list(csv.DictReader(open(out / "trace.csv")))
    assert len(rows) >= 6
    ho = [float(x["heldout_loss"]) for x in rows]
    assert ho[-1] < ho[0] < np.log(2) + 0.05
    # the resolved config round-trips: parsing it gives the same complete config
    assert build_from_config(out / "config.toml")[1] == build_from_config(cfg)[1] | {
        "output": {"dir": str(out)}}
    # predict the held-out split and compare with the model applied by hand
    preds = tmp_path / "p.npy"
    assert main(["predict", str(out / "model.npz"), str(cfg), "-o", str(preds)]) == 0
    P = np.load(preds)
    X, y = make_criteo_like_matrix(4000, seed=3, n_bits=12)
    m = load_checkpoint(out / "model.npz").model
    ref = expit(X[:, 3000:].T @ m.coef[0].astype(np.float64) + m.intercept[0])
    np.testing.assert_allclose(P, ref, rtol=1e-4, atol=1e-6)
    assert P.shape == (1000,)
    assert abs(float(rows[-1]["heldout_loss"]) - np.mean(
        -y[3000:] * np.log(ref) - (1 - y[3000:]) * np.log(1 - ref))) < 1e-4


def test_train_svmlight_lbfgs(tmp_path, capsys):
    X, y = make_classification(400, 10, random_state=0)
    dump_svmlight_file(X, 2 * y - 1, str(tmp_path / "train.svm"))
    cfg = tmp_path / "svm.toml"
    cfg.write_text("""
[data]
type = "svmlight"
path = "train.svm"
heldout_fraction = 0.2
dtype = "float64"
[model]
dtype = "float64"
[optimizer]
type = "lbfgs"
max_iter = 30
[[mixins]]
type = "l2"
reg2weight = 0.01
[output]
dir = "%s"
""" % (tmp_path / "out"))
    assert main(["train", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "held out: MatSource(10 features x 80 examples" in out
    assert (tmp_path / "out" / "model.npz").exists()
    assert main(["predict", str(tmp_path / "out" / "model.npz"), str(tmp_path / "train.svm"),
                 "-o", str(tmp_path / "p.txt")]) == 0
    assert len(np.loadtxt(tmp_path / "p.txt")) == 400


@pytest.mark.parametrize("text,msg", [
    ("[data]\nn_exampels = 3\n", "c.toml [data]: unknown key 'n_exampels'"),
    (TINY.replace('lr = 0.1', 'lr = "fast"'), "c.toml [optimizer]: option 'lr' must be of type"),
    (TINY.replace('type = "adagrad"', 'type = "adam"'), "c.toml [optimizer]: key 'type'"),
    (TINY.replace('type = "metrics"', 'type = "dropout"'), "c.toml [[mixins]] #2: key 'type'"),
    (TINY.replace('[learner]', '[learner]\nn_pases = 3'), "c.toml [learner]: unknown key"),
    (TINY + "\n[extra]\na = 1\n", "c.toml: unknown top-level key 'extra'"),
    (TINY.replace('n_passes = 2', 'n_passes = 0'), "c.toml [learner]: option 'n_passes'"),
    ("[model]\nloss = 'logistic'\n", "c.toml: missing the [data] table"),
    ("[data\n", "c.toml: invalid TOML"),
])
def test_bad_configs_name_file_table_and_key(tmp_path, capsys, text, msg):
    cfg = tmp_path / "c.toml"
    cfg.write_text(text)
    assert main(["train", str(cfg), "-o", str(tmp_path / "o")]) == 2
    assert msg in capsys.readouterr().err


@pytest.mark.slow
def test_info_prints_the_roofline_report(capsys):
    assert main(["info"]) in (0, 1)
    out = capsys.readouterr().out
    assert "bandwidth" in out or "not available" in out


def test_example_config_is_valid():
    path = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "logistic_criteo.toml")
    parts, resolved = build_from_config(path)
    assert resolved["optimizer"]["type"] == "adagrad" and parts["model"].loss == "logistic"
