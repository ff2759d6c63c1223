"""The cluster cost model against an emulated network (issue 31): two ranks in network
namespaces of their own, joined through a bridge, each link shaped by ``tc``'s token bucket.

The namespaces are made here with names unique to this run (a bridge namespace and one per
rank; nothing is added to this machine's own namespace, traffic goes only to the new
addresses) and always deleted.  ``benchmarks/cluster_model.py --emulate`` does the work: it
fits the model on the unshaped links, then predicts and measures the distributed Newton's
seconds per iteration with the links at 1 Gb/s and 100 Mb/s.  Skipped unless root with ``ip``
and ``tc``.
"""

import json
import os
import shutil
import subprocess
import sys
import uuid

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "benchmarks", "cluster_model.py")


def _namespaces():
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30)
    return [line.split()[0] for line in out.stdout.splitlines() if line.strip()]


@pytest.fixture
def prefix():
    """A namespace name prefix unique to this test; every namespace under it deleted after."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        pytest.skip("network namespaces need root on Linux")
    if not shutil.which("ip") or not shutil.which("tc"):
        pytest.skip("needs iproute2's ip and tc")
    p = f"rfl{uuid.uuid4().hex[:6]}"
    probe = f"{p}q"
    if subprocess.run(["ip", "netns", "add", probe], capture_output=True,
                      timeout=30).returncode != 0:
        pytest.skip("cannot create network namespaces here")
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=30)
    try:
        yield p
    finally:
        for name in _namespaces():
            if name.startswith(p):
                subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
        assert not [n for n in _namespaces() if n.startswith(p)]


@pytest.mark.slow
@pytest.mark.multiprocess
def test_model_predicts_the_emulated_networks_time_per_iteration(prefix, tmp_path):
    out = tmp_path / "check.json"
    r = subprocess.run([sys.executable, SCRIPT, "--no-fit", "--n", "12000", "--bits", "15",
                        "--emulate", "100", "--emulate-k", "2", "--repeat", "1",
                        "--prefix", prefix, "--json", str(out)],
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = {row["mbit"]: row for row in json.loads(out.read_text())}
    assert set(rows) == {100}
    slow = rows[100]
    # the model's bytes (from the data's feature coverage) are what the ranks sent
    assert slow["bytes_model"] == pytest.approx(slow["bytes_measured"], rel=0.05)
    # the network dominates at 100 Mb/s, and the model sees it.  The target (25%) is
    # checked by `benchmarks/cluster_model.py --emulate` (docs/guide/distributed.rst); on a
    # 2-core machine shared with other jobs one run's seconds swing by more than that, so the
    # test asks for 50%, which a model without the network (or with it twice) fails
    assert slow["measured_s"] > 2 * slow["unshaped_s"], slow
    assert slow["predicted_s"] == pytest.approx(slow["measured_s"], rel=0.5), slow
