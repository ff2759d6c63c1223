"""``mpiexec -n 2 roofline train cfg.toml`` (issue 35): the ranks find their MPI communicator
through ``roofline.comm.from_environment()``; the model is the single-process run's, rank 0
alone prints and writes, and ``roofline predict`` under mpiexec gives the local predictions."""

import os
import subprocess

import numpy as np
import pytest

from roofline.learners._cli import main
from tests._helpers import MPIEXEC, needs_mpi
from tests.learners._cli_shards import ROOFLINE, assert_same_models, config, write_problem

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow, needs_mpi]

N = 1200


def _mpiexec(*args, cwd):
    return subprocess.run([MPIEXEC, "-n", "2", ROOFLINE, *args], cwd=cwd, capture_output=True,
                          text=True, timeout=240)


def test_mpiexec_two_ranks_fit_and_predict_as_one_process(tmp_path):
    d = str(tmp_path)
    X, _ = write_problem(d, n=N)
    cfg = config(d, '[solver]\nalpha = 1e-2\nsolver = "newton"\ntol = 1e-10\n', out="one")
    assert main(["train", cfg]) == 0
    p = _mpiexec("train", cfg, "-o", f"{d}/two", cwd=d)
    assert p.returncode == 0, p.stdout + p.stderr
    # rank 0 alone prints: each line once
    assert p.stdout.count("newton: ") == 1 and p.stdout.count("wrote ") == 1, p.stdout
    assert "(2 ranks)" in p.stdout
    assert sorted(os.listdir(f"{d}/two")) == ["config.toml", "model.npz", "trace.json"]
    _, two = assert_same_models(f"{d}/one", f"{d}/two")

    p = _mpiexec("predict", f"{d}/two/model.npz", f"{d}/test.toml", "-o", f"{d}/p2.npy", cwd=d)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("wrote ") == 1
    np.testing.assert_allclose(np.load(f"{d}/p2.npy"), two.predict(X[:, N:].tocsc()),
                               rtol=1e-12)
