"""Issue 32, items 2 and 3: the launcher ends like a plain ``python job.py`` under a closed
pipe and a signal, no rank outlives it, and a rank that dies before joining fails the job at
once, named."""

import os
import signal
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(__file__)
PROBE = os.path.join(HERE, "scripts", "launch_probe.py")
LAUNCH = [sys.executable, "-m", "roofline.comm.launch"]


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is dead
        return f.read().split(") ")[1][0] != "Z"


def test_a_closed_output_pipe_ends_the_job():
    cmd = " ".join([*LAUNCH, "-n", "2", "--timeout", "10", PROBE, "spam", "|", "head", "-2"])
    t = time.monotonic()
    try:
        p = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=40)
    except subprocess.TimeoutExpired:
        pytest.fail("the launcher never ended after its reader closed the pipe")
    assert len(p.stdout.splitlines()) == 2
    assert time.monotonic() - t < 30


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGKILL])
def test_no_rank_outlives_the_launcher_whatever_the_signal(sig, tmp_path):
    p = subprocess.Popen([*LAUNCH, "-n", "2", "--timeout", "30", PROBE, "sleep", str(tmp_path)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pids = []
    try:
        deadline = time.monotonic() + 30
        while len(pids) < 2 and time.monotonic() < deadline:
            pids = [int(f.read_text()) for f in tmp_path.glob("*.pid") if f.read_text()]
            time.sleep(0.05)
        assert len(pids) == 2
        p.send_signal(sig)
        p.wait(20)
        deadline = time.monotonic() + 10
        while any(_alive(q) for q in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_alive(q) for q in pids), f"ranks outlived the launcher ({sig!r})"
        assert p.returncode != 0
    finally:
        p.kill()
        for q in pids:
            try:
                os.kill(q, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_rank_dying_before_it_joins_fails_the_job_at_once_naming_it():
    t = time.monotonic()
    p = subprocess.run([*LAUNCH, "-n", "2", "--timeout", "60", PROBE, "crash1"],
                       capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - t
    assert p.returncode != 0
    assert "rank 1" in p.stderr + p.stdout
    assert elapsed < 20, f"the launcher waited {elapsed:.0f} s for a rank that had died"


def test_a_rank_dying_after_it_registered_is_named_at_once():
    """Issue 32: without replication, a rank SIGKILLed after it registered (its address handed
    out, the mesh not yet connected) is named by the others within seconds, not after the
    script's 30 s timeout."""
    script = os.path.join(HERE, "scripts", "sum_script.py")
    t = time.monotonic()
    p = subprocess.run([*LAUNCH, "-n", "3", "--timeout", "15", script, "--after-register", "1"],
                       capture_output=True, text=True, timeout=90)
    out = p.stdout + p.stderr
    assert p.returncode != 0, out
    assert "rank 1 is gone" in out and "PeerError" in out, out
    assert time.monotonic() - t < 12, out
