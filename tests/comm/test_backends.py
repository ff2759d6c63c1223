"""The same script alone, under Roofline's launcher and under the mpich wheel's mpiexec; every
backend gives the same sums; run() from Python."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from roofline.comm import CommError, run
from tests._helpers import MPIEXEC, needs_mpi

HERE = os.path.dirname(__file__)
SCRIPT = os.path.join(HERE, "scripts", "sum_script.py")
def _launch(n, *args, timeout=60):
    return subprocess.run([sys.executable, "-m", "roofline.comm.launch", "-n", str(n),
                           "--timeout", "20", SCRIPT, *args], capture_output=True, text=True,
                          timeout=timeout)


def _result(stdout):
    line = [ln for ln in stdout.splitlines() if "{" in ln][-1]
    return json.loads(line[line.index("{"):])


def test_alone_is_a_group_of_one():
    p = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert _result(p.stdout) == {**_result(p.stdout), "backend": "single", "size": 1, "ok": True}


@pytest.mark.parametrize("n", [2, 3, 4])
def test_under_the_launcher(n):
    p = _launch(n)
    assert p.returncode == 0, p.stdout + p.stderr
    res = _result(p.stdout)
    assert res["backend"] == "tcp" and res["size"] == n and res["ok"]


@needs_mpi
@pytest.mark.parametrize("n", [2, 3])
def test_under_mpiexec(n):
    p = subprocess.run([MPIEXEC, "-n", str(n), sys.executable, SCRIPT], capture_output=True,
                       text=True, timeout=90)
    assert p.returncode == 0, p.stdout + p.stderr
    res = _result(p.stdout)
    assert res["backend"] == "mpi" and res["size"] == n and res["ok"]


@needs_mpi
def test_every_backend_gives_the_same_sums_bit_for_bit():
    """Kylix reduces in the same order over queues, TCP and MPI point-to-point."""
    digests = {"tcp": _result(_launch(4).stdout)["digest"]}
    p = subprocess.run([MPIEXEC, "-n", "4", sys.executable, SCRIPT], capture_output=True,
                       text=True, timeout=90)
    digests["mpi"] = _result(p.stdout)["digest"]
    digests["threads"] = float(np.sum(run(_sum_of_contributions, 4, backend="threads")[0]))
    assert len(set(digests.values())) == 1, digests


def _sum_of_contributions(comm):
    sys.path.insert(0, os.path.join(HERE, "scripts"))
    from sum_script import contribution

    idx, val = contribution(comm.rank)
    return comm.sparse_allreduce(idx, val)


def _rank_and_sum(comm, scale):
    return comm.rank, comm.allreduce(np.arange(4.0) * scale).tolist(), comm.backend


@pytest.mark.parametrize("backend", ["threads", "tcp", pytest.param("mpi", marks=needs_mpi)])
def test_run_returns_the_results_by_rank(backend):
    out = run(_rank_and_sum, 3, backend=backend, args=(2.0,), timeout=30)
    assert [o[0] for o in out] == [0, 1, 2]
    assert all(o[1] == [0.0, 6.0, 12.0, 18.0] and o[2] == backend for o in out)


def _fails_on_rank_1(comm):
    if comm.rank == 1:
        raise ValueError("bad shard on rank 1")
    return comm.allreduce(np.ones(2))


@pytest.mark.parametrize("backend", ["threads", "tcp"])
def test_run_names_the_failing_rank(backend):
    with pytest.raises((CommError, ValueError), match="rank 1"):
        run(_fails_on_rank_1, 3, backend=backend, timeout=5)


def test_a_rank_with_no_data():
    p = _launch(3, "--empty-rank", "1")
    assert p.returncode == 0, p.stdout + p.stderr
    assert _result(p.stdout)["ok"]


def test_two_runs_give_the_same_result_bit_for_bit():
    a, b = _result(_launch(4).stdout), _result(_launch(4).stdout)
    assert a["ok"] and a["digest"] == b["digest"]


def test_more_ranks_than_cores():
    n = max(8, 2 * (os.cpu_count() or 1))
    p = _launch(n, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert _result(p.stdout)["ok"]


def _process_facts(comm, name):
    return os.getppid(), os.environ.get(name), comm.rank


def test_tcp_ranks_fork_from_one_server_and_see_the_callers_environment(monkeypatch):
    """``run(backend="tcp")`` forks its ranks from a fork server that stays up between calls
    (its preloaded imports are paid once), and each rank sees the environment of the call,
    not the one the server started with."""
    name = "ROOFLINE_TEST_RUN_TCP_MARK"
    monkeypatch.setenv(name, "first")
    first = run(_process_facts, 2, backend="tcp", args=(name,), timeout=60)
    monkeypatch.setenv(name, "second")
    second = run(_process_facts, 2, backend="tcp", args=(name,), timeout=60)
    parents = {ppid for ppid, _, _ in first + second}
    assert len(parents) == 1 and os.getpid() not in parents
    assert [(env, r) for _, env, r in first] == [("first", 0), ("first", 1)]
    assert [(env, r) for _, env, r in second] == [("second", 0), ("second", 1)]
