"""examples/distributed_fit.py runs unchanged alone, under the launcher, under mpiexec and on
Dask workers, and every way gives the same model to the solver's tolerance."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "examples", "distributed_fit.py")
MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")
TOL = 1e-4  # the script's default relative duality gap

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]


def _result(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    line = [ln for ln in p.stdout.splitlines() if '"objective"' in ln][-1]
    return json.loads(line[line.index("{"):])


@pytest.fixture(scope="module")
def alone():
    res = _result([sys.executable, SCRIPT])
    assert res["size"] == 1 and res["converged"]
    return res


def _same_model(res, ref):
    assert res["converged"]
    # both objectives are within TOL * |P| of the optimum
    assert abs(res["objective"] - ref["objective"]) <= 2 * TOL * abs(ref["objective"])
    assert res["coef_norm"] == pytest.approx(ref["coef_norm"], rel=2e-3)


def test_under_the_launcher(alone):
    res = _result([sys.executable, "-m", "roofline.comm.launch", "-n", "3", SCRIPT])
    assert (res["size"], res["backend"]) == (3, "tcp")
    _same_model(res, alone)


@pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None or not os.path.exists(MPIEXEC),
                    reason="mpi4py / the mpich wheel absent")
def test_under_mpiexec(alone):
    res = _result([MPIEXEC, "-n", "2", sys.executable, SCRIPT])
    assert (res["size"], res["backend"]) == (2, "mpi")
    _same_model(res, alone)


@pytest.mark.skipif(importlib.util.find_spec("distributed") is None,
                    reason="dask.distributed absent")
def test_on_dask_workers(alone):
    res = _result([sys.executable, SCRIPT, "--dask", "2"])
    assert (res["size"], res["backend"]) == (2, "tcp")
    _same_model(res, alone)
