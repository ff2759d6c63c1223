"""Issue 34: the launcher copies the ranks' output as ``mpiexec`` does, unprefixed, so that a
script whose rank 0 prints one JSON line prints it parseable under the launcher too; ``-l`` /
``--label`` prefixes every line with ``[rank r]`` (``mpiexec -l``)."""

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.multiprocess

SCRIPT = """\
import json, os, sys
rank = int(os.environ["ROOFLINE_COMM_RANK"])
print(f"hello from {rank}", flush=True)
print(f"warning from {rank}", file=sys.stderr, flush=True)
if rank == 0:
    print(json.dumps({"rank": rank, "values": [1, 2]}), flush=True)
"""


def _launch(tmp_path, *opts):
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    return subprocess.run([sys.executable, "-m", "roofline.comm.launch", "-n", "2", *opts,
                           "--timeout", "20", str(script)],
                          capture_output=True, text=True, timeout=60)


def test_rank_output_is_unprefixed_so_one_json_line_parses(tmp_path):
    p = _launch(tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert sorted(lines) == sorted(["hello from 0", "hello from 1", "warning from 0",
                                    "warning from 1", '{"rank": 0, "values": [1, 2]}'])
    assert json.loads(next(ln for ln in lines if ln.startswith("{"))) == {
        "rank": 0, "values": [1, 2]}


@pytest.mark.parametrize("flag", ["-l", "--label"])
def test_label_prefixes_every_line_with_its_rank(tmp_path, flag):
    p = _launch(tmp_path, flag)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == 5
    for r in (0, 1):
        assert f"[rank {r}] hello from {r}" in lines
        assert f"[rank {r}] warning from {r}" in lines
    assert '[rank 0] {"rank": 0, "values": [1, 2]}' in lines
