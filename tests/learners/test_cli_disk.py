"""One config on a disk-simulated cluster (issue 35): ``roofline train cfg.toml --simulate N``
(``[comm] backend = "disk"``) runs the job on N nodes in this process, their messages
checksummed files, and gives the model of the single-process run; ``roofline predict
--simulate N`` the local predictions in the data's order."""

import os

import numpy as np
import pytest

from roofline.learners import load_checkpoint
from roofline.learners._cli import main
from tests.learners._cli_shards import assert_close, config, model_of, shards_fixture

shards = shards_fixture("disk", 1600)


def test_simulated_nodes_fit_the_single_process_model(shards, capsys, monkeypatch):
    d, X, y = shards
    monkeypatch.chdir(d)
    cfg = config(d, '[solver]\nalpha = 1e-2\nsolver = "newton"\ntol = 1e-10\n', name="n.toml",
                 out="n-1")
    assert main(["train", cfg]) == 0
    capsys.readouterr()
    assert main(["train", cfg, "--simulate", "3", "-o", f"{d}/n-3"]) == 0
    out = capsys.readouterr().out
    assert "(3 ranks)" in out, out
    assert sorted(os.listdir(f"{d}/n-3")) == ["config.toml", "model.npz", "trace.json"]
    assert load_checkpoint(f"{d}/n-3/model.npz").meta["extra"]["ranks"] == 3
    w1, b1 = model_of(f"{d}/n-1")
    assert_close(model_of(f"{d}/n-3"), (w1, b1), 1e-6)
    # the [comm] table says the same
    cfg2 = config(d, '[solver]\nalpha = 1e-2\nsolver = "newton"\ntol = 1e-10\n'
                     '[comm]\nbackend = "disk"\nn_ranks = 2\n', name="n2.toml", out="n-2")
    assert main(["train", cfg2]) == 0
    assert "(2 ranks)" in capsys.readouterr().out
    assert np.linalg.norm(model_of(f"{d}/n-2")[0] - w1) <= 1e-6 * np.linalg.norm(w1)
    # predict on simulated nodes: the local predictions, in the data's order
    local, sim = f"{d}/p1.npy", f"{d}/p3.npy"
    assert main(["predict", f"{d}/n-1/model.npz", f"{d}/test.toml", "-o", local]) == 0
    assert main(["predict", f"{d}/n-1/model.npz", f"{d}/test.toml", "-o", sim,
                 "--simulate", "3"]) == 0
    np.testing.assert_allclose(np.load(sim), np.load(local), rtol=1e-12)


def test_disk_backend_needs_its_nodes(shards, monkeypatch, capsys):
    d, X, y = shards
    monkeypatch.chdir(d)
    cfg = config(d, '[solver]\nalpha = 1e-2\nsolver = "newton"\n[comm]\nbackend = "disk"\n',
                 name="bad.toml", out="bad")
    assert main(["train", cfg]) == 2
    err = capsys.readouterr().err
    assert "bad.toml" in err and "[comm]" in err and "n_ranks" in err, err
    with pytest.raises(SystemExit):
        main(["train", cfg, "--simulate", "0"])
    assert "positive integer" in capsys.readouterr().err
    assert not os.path.exists(f"{d}/bad")
