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


def _result(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=ROOT, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    # the output is the one JSON line, parsed whole (the launcher adds no "[rank 0]" prefix)
    line = [ln for ln in p.stdout.splitlines() if '"objective"' in ln][-1]
    return json.loads(line)


def _without_the_venv():
    """The environment of a shell where the virtual environment is not activated: PATH
    without this Python's ``bin`` (so ``python`` and ``mpiexec`` are not the venv's)."""
    bindir = os.path.dirname(sys.executable)
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["PATH"] = os.pathsep.join(d for d in env.get("PATH", "").split(os.pathsep)
                                  if d and os.path.abspath(d) != os.path.abspath(bindir))
    return env


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


@pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None or not os.path.exists(MPIEXEC),
                    reason="mpi4py / the mpich wheel absent")
def test_under_mpiexec_without_activating_the_venv(alone):
    """The documented command for a shell where the venv is not activated: both programs
    named by path (``python`` on such a PATH is not the venv's, and cannot import roofline)."""
    res = _result([os.path.relpath(MPIEXEC, ROOT), "-n", "2",
                   os.path.relpath(sys.executable, ROOT), "examples/distributed_fit.py"],
                  env=_without_the_venv())
    assert (res["size"], res["backend"]) == (2, "mpi")
    _same_model(res, alone)


def test_a_python_without_roofline_is_told_what_to_run():
    """``mpiexec -n K python ...`` picking a ``python`` that cannot import roofline: a clear
    message naming the command, not a traceback."""
    code = ("import runpy, sys; sys.modules['roofline.comm'] = None; sys.argv = [sys.argv[1]]; "
            "sys.exit(runpy.run_path(sys.argv[0], run_name='__main__'))")
    p = subprocess.run([sys.executable, "-c", code, SCRIPT], capture_output=True, text=True,
                       timeout=120, cwd=ROOT)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "cannot import roofline" in p.stderr and ".venv/bin/python" in p.stderr
    assert "Traceback" not in p.stderr and p.stdout == ""


@pytest.mark.skipif(importlib.util.find_spec("distributed") is None,
                    reason="dask.distributed absent")
def test_on_dask_workers(alone):
    res = _result([sys.executable, SCRIPT, "--dask", "2"])
    assert (res["size"], res["backend"]) == (2, "tcp")
    _same_model(res, alone)
