"""Kylix replication (issue 19): r replicas per logical node; a job survives SIGKILLed
replicas, one per node, with the same result bit for bit as without the fault."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from roofline.comm import (
    CommError,
    KylixCommunicator,
    QueueGroup,
    ReplicatedTransport,
    run,
    run_in_threads,
)

HERE = os.path.dirname(__file__)
SCRIPT = os.path.join(HERE, "scripts", "sum_script.py")

pytestmark = pytest.mark.multiprocess


def _data(node, step):
    rng = np.random.default_rng([node, step])
    idx = np.unique(rng.zipf(1.3, 3000) % 20000).astype(np.int64)
    return idx, rng.standard_normal(idx.size)


def _job(comm, steps=8, die=(), die_at=3):
    """``steps`` sparse and dense all-reduces; the processes in ``die`` (physical ranks) are
    SIGKILLed before step ``die_at``."""
    phys = getattr(comm.transport, "inner", comm.transport).rank
    out = []
    for step in range(steps):
        if step == die_at and phys in die:
            os.kill(os.getpid(), signal.SIGKILL)
        idx, val = _data(comm.rank, step)
        out.append(comm.sparse_allreduce(idx, val))
        out.append(comm.allreduce(val[:5].copy()))
    return comm.rank, comm.size, np.concatenate(out)


def _plain(n_nodes):
    return run(_job, n_nodes, backend="threads")


def test_replicated_threads_equal_the_plain_group_bit_for_bit():
    group = QueueGroup(6, timeout=30)

    def one(p):
        with KylixCommunicator(ReplicatedTransport(group.transport(p), 2)) as comm:
            return _job(comm)

    got = run_in_threads(one, 6, [group])
    ref = _plain(3)
    for p, (node, size, vec) in enumerate(got):
        assert (node, size) == (p // 2, 3)
        np.testing.assert_array_equal(vec, ref[node][2])


def test_one_killed_replica_per_node_changes_nothing():
    t = time.monotonic()
    got = run(_job, 6, backend="tcp", replication=2, kwargs={"die": (1, 2, 5)}, timeout=20)
    assert time.monotonic() - t < 60
    ref = _plain(3)
    assert [g is None for g in got] == [False, True, True, False, False, True]
    for g in got:
        if g is not None:
            np.testing.assert_array_equal(g[2], ref[g[0]][2])


def test_a_node_with_every_replica_dead_is_an_error_naming_it():
    t = time.monotonic()
    with pytest.raises(CommError) as e:
        run(_job, 4, backend="tcp", replication=2, kwargs={"die": (2, 3)}, timeout=10)
    assert time.monotonic() - t < 60  # no hang: the survivors fail on their own
    assert "every replica of node 1 (ranks [2, 3]) is gone" in str(e.value)


def test_a_straggling_replica_delays_nobody_and_is_retired():
    """Speculative execution: every shard runs on two replicas; one is slowed down by 30 s.
    Its node's copies come from the other replica, and the job ends with the fast copies
    (the straggler is retired), with the same result."""
    t = time.monotonic()
    got = run(_slow_job, 4, backend="tcp", replication=2, timeout=60)
    took = time.monotonic() - t
    assert got[3] is None  # retired before it finished (so may be a slower twin elsewhere)
    assert got[2] is not None and (got[0] is not None or got[1] is not None)
    assert all(g[3] < 10 for g in got if g is not None)
    assert took < 20, took  # the job ends near the fast copies' time, not after the 30 s
    ref = _plain(2)
    for g in got:
        if g is not None:
            np.testing.assert_array_equal(g[2], ref[g[0]][2])


def _slow_job(comm):
    phys = comm.transport.inner.rank
    t = time.perf_counter()
    if phys == 3:
        time.sleep(30.0)  # far behind the others for the whole job
    node, size, vec = _job(comm)
    return node, size, vec, time.perf_counter() - t, phys


def test_bad_replication_is_refused():
    with pytest.raises(ValueError, match="multiple of the replication"):
        ReplicatedTransport(QueueGroup(5).transport(0), 2)
    with pytest.raises(ValueError, match="replication must be >= 1"):
        ReplicatedTransport(QueueGroup(4).transport(0), 0)
    with pytest.raises(ValueError, match="backend='tcp'"):
        run(_job, 4, backend="threads", replication=2)


def _launch(*args, timeout=90):
    return subprocess.run([sys.executable, "-m", "roofline.comm.launch", *args],
                          capture_output=True, text=True, timeout=timeout)


def test_the_launcher_with_replication_survives_a_killed_replica():
    p = _launch("-n", "4", "--replication", "2", "--timeout", "20", SCRIPT, "--die-process", "1")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "rank 1 exited with code -9" in p.stderr
    res = json.loads([ln for ln in p.stdout.splitlines() if "{" in ln][-1].split("] ", 1)[-1])
    assert res["ok"] and res["size"] == 2
    plain = _launch("-n", "2", "--timeout", "20", SCRIPT)
    ref = json.loads([ln for ln in plain.stdout.splitlines() if "{" in ln][-1].split("] ", 1)[-1])
    assert res["digest"] == ref["digest"]


def test_the_launcher_refuses_a_replication_that_does_not_divide():
    p = _launch("-n", "3", "--replication", "2", SCRIPT, timeout=30)
    assert p.returncode != 0 and "--replication must be >= 1 and divide -n 3" in p.stderr


def _result(p):
    return json.loads([ln for ln in p.stdout.splitlines() if "{" in ln][-1].split("] ", 1)[-1])


@pytest.mark.parametrize("gone", ["1:kill", "2:exit", "0:kill,3:kill"])
def test_replicas_lost_before_registration_do_not_sink_the_job(gone):
    """Issue 32, item 3: one replica per node may be gone before it registers (SIGKILLed, or
    a script that exits without joining): its twin carries the node, and the job ends soon
    (no wait for the missing registration) with the sums of the plain job."""
    t = time.monotonic()
    p = _launch("-n", "4", "--replication", "2", "--timeout", "15", SCRIPT, "--before-join",
                gone, timeout=60)
    took = time.monotonic() - t
    assert p.returncode == 0, p.stdout + p.stderr
    res = _result(p)
    assert res["ok"] and res["size"] == 2
    ref = _result(_launch("-n", "2", "--timeout", "15", SCRIPT))
    assert res["digest"] == ref["digest"]
    assert took < 12, took  # not the coordinator's 15 s timeout


def test_a_node_whose_replicas_are_all_lost_before_registration_fails_at_once():
    t = time.monotonic()
    p = _launch("-n", "4", "--replication", "2", "--timeout", "30", SCRIPT, "--before-join",
                "2:kill,3:kill", timeout=60)
    assert p.returncode != 0
    assert "every replica of node 1 (ranks [2, 3])" in p.stdout + p.stderr
    assert time.monotonic() - t < 20  # refused at once, not after the 30 s timeout


@pytest.mark.parametrize("dead", ["1", "2", "0,3"])
def test_replicas_dying_after_registration_do_not_sink_the_job(dead):
    """Issue 32: a replica SIGKILLed after it registered, before the mesh is connected (the
    others have its address and look for it), is found gone at once (its listener refuses):
    its twin carries the node, the sums are the plain job's, and nobody waits for the 30 s
    timeout."""
    t = time.monotonic()
    p = _launch("-n", "4", "--replication", "2", "--timeout", "15", SCRIPT, "--after-register",
                dead, timeout=90)
    took = time.monotonic() - t
    assert p.returncode == 0, p.stdout + p.stderr
    res = _result(p)
    assert res["ok"] and res["size"] == 2
    assert res["digest"] == _result(_launch("-n", "2", "--timeout", "15", SCRIPT))["digest"]
    assert took < 12, took


def test_a_node_whose_replicas_die_after_registration_is_named_at_once():
    t = time.monotonic()
    p = _launch("-n", "4", "--replication", "2", "--timeout", "15", SCRIPT, "--after-register",
                "2,3", timeout=90)
    assert p.returncode != 0
    assert "every replica of node 1 (ranks [2, 3]) is gone" in p.stdout + p.stderr
    assert time.monotonic() - t < 12  # not the 30 s timeout


def _job_killed_at(comm, delay, die):
    """``_job`` with 40 steps, the processes in ``die`` SIGKILLed ``delay`` s after they start
    it, wherever they are (inside a sparse or dense all-reduce, between two)."""
    if comm.transport.inner.rank in die:
        threading.Timer(delay, os.kill, (os.getpid(), signal.SIGKILL)).start()
    return _job(comm, steps=40)


@pytest.mark.parametrize("delay", [0.05, 0.2, 0.5])
def test_replicas_killed_mid_collective_change_nothing(delay):
    """Issue 32: a replica killed at any moment of the job (most often inside a collective,
    its copies half sent) changes neither the sums nor the time much: its node's messages come
    from the twin."""
    t = time.monotonic()
    got = run(_job_killed_at, 4, backend="tcp", replication=2, args=(delay, (1, 2)), timeout=20)
    assert time.monotonic() - t < 30
    ref = run(_job, 2, backend="threads", kwargs={"steps": 40})
    assert got[1] is None and got[2] is None
    for g in got:
        if g is not None:
            np.testing.assert_array_equal(g[2], ref[g[0]][2])
