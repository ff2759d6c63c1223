"""Issue 32, item 1: under mpiexec a rank that fails, skips a collective or returns early never
leaves the others in MPI's blocking collectives: each survivor raises an error naming it within
the timeout, and ``run(backend="mpi")`` names it."""

import os
import subprocess
import sys
import time

import pytest

from roofline.comm import CommError, run
from tests._helpers import MPIEXEC, needs_mpi

HERE = os.path.dirname(__file__)
SCRIPT = os.path.join(HERE, "scripts", "mpi_fault_script.py")
pytestmark = needs_mpi


def _mpiexec(n, *args, timeout=60):
    t = time.monotonic()
    try:
        p = subprocess.run([MPIEXEC, "-n", str(n), sys.executable, SCRIPT, *args],
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"mpiexec hung past {timeout} s: {e.stdout!r} {e.stderr!r}")
    return p, time.monotonic() - t


@pytest.mark.parametrize("mode", ["raise", "skip", "early"])
@pytest.mark.parametrize("where", ["allreduce", "sparse", "barrier"])
def test_a_failing_rank_is_named_by_the_survivors_within_the_timeout(mode, where):
    p, elapsed = _mpiexec(2, mode, where)
    out = p.stdout + p.stderr
    assert p.returncode != 0, out
    assert elapsed < 40, out
    assert "rank 1" in out, out
    if mode == "raise":
        assert "boom on purpose" in out
    # the survivor's own error, not only MPI's report of an abort
    assert "CommError" in out or "PeerError" in out or "CommTimeoutError" in out, out


@pytest.mark.parametrize("where", ["allreduce", "sparse"])
def test_a_rank_ending_without_closing_is_named_not_timed_out(where):
    """A rank whose process ends without closing its communicator says bye at exit: the
    survivor names it at once instead of timing out on a collective nobody will join."""
    p, elapsed = _mpiexec(2, "vanish", where)
    out = p.stdout + p.stderr
    assert p.returncode != 0, out
    assert "PeerError: rank 0: rank 1 ended" in out, out
    assert elapsed < 40, out


def _fails_on_rank_1(comm):
    import numpy as np

    comm.allreduce(np.ones(2))
    if comm.rank == 1:
        raise ValueError("rank one fails")
    return comm.allreduce(np.ones(2))


def test_run_mpi_names_the_failed_rank():
    t = time.monotonic()
    with pytest.raises(CommError, match="rank 1.*rank one fails"):
        run(_fails_on_rank_1, 2, backend="mpi", timeout=5)
    assert time.monotonic() - t < 40


@pytest.mark.parametrize("backend", ["tcp", "mpi"])
def test_run_takes_a_function_of_the_calling_script(backend):
    p = subprocess.run([sys.executable, os.path.join(HERE, "scripts", "run_main_fn.py"), backend],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.strip().splitlines()[-1] == "[3.0, 3.0]"
