"""``roofline train cfg.toml --dask SCHEDULER`` (issue 35) on a LocalCluster of two worker
processes: one rank per worker, each reading its own shards; the client writes rank 0's outputs
and prints its lines; the model is the single-process run's, and ``roofline predict --dask``
gives the local predictions in the data's order."""

import os

import numpy as np
import pytest

from roofline.learners._cli import build_from_config, main
from tests.learners._cli_shards import assert_same_models, config, write_problem

distributed = pytest.importorskip("distributed")

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

N = 1200


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as c:
        yield c


def test_train_and_predict_on_dask_as_in_one_process(cluster, tmp_path, capsys):
    d = str(tmp_path)
    X, _ = write_problem(d, n=N)
    cfg = config(d, '[solver]\nalpha = 1e-2\nsolver = "newton"\ntol = 1e-10\n', out="one")
    assert main(["train", cfg]) == 0
    capsys.readouterr()
    assert main(["train", cfg, "-o", f"{d}/dask", "--dask", cluster.scheduler_address]) == 0
    printed = capsys.readouterr().out
    assert printed.count("newton: ") == 1 and "(2 ranks)" in printed
    assert "held-out logistic loss" in printed
    assert sorted(os.listdir(f"{d}/dask")) == ["config.toml", "model.npz", "trace.json"]
    _, two = assert_same_models(f"{d}/one", f"{d}/dask")

    assert main(["predict", f"{d}/dask/model.npz", f"{d}/test.toml", "-o", f"{d}/p.npy",
                 "--dask", cluster.scheduler_address]) == 0
    np.testing.assert_allclose(np.load(f"{d}/p.npy"), two.predict(X[:, N:].tocsc()),
                               rtol=1e-12)


def test_a_comm_table_runs_on_dask_and_its_errors_name_the_file(cluster, tmp_path, capsys):
    d = str(tmp_path)
    write_problem(d, n=400, per_shard=100)
    table = f'\n[comm]\nbackend = "dask"\naddress = "{cluster.scheduler_address}"\nn_ranks = 2\n'
    cfg = config(d, '[solver]\nalpha = 1e-2\nsolver = "newton"\n' + table, out="run")
    assert main(["train", cfg]) == 0
    assert "(2 ranks)" in capsys.readouterr().out
    # the resolved config keeps the [comm] table, and it round-trips
    assert build_from_config(f"{d}/run/config.toml")[0]["comm"] == build_from_config(cfg)[0]["comm"]
    cfg = config(d, '[solver]\nalpha = 1e-2\nsolver = "newton"\n'
                 + table.replace("n_ranks = 2", "n_ranks = 3"), name="three.toml")
    assert main(["train", cfg]) == 2
    assert "3 ranks need 3 Dask workers" in capsys.readouterr().err
