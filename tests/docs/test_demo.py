"""What ``make demo`` runs prints what a user wants: the machine's roofline and the primitives
against scipy, the picture written, and none of the project's own targets (those are in
``--verbose``, ``make bench``)."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMALL = ["--features", "4096", "--examples", "600", "--nnz", "8", "--k", "1", "4",
         "--repeat", "1"]


def _run(args, tmp_path):
    env = dict(os.environ, MPLBACKEND="Agg")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "primitives.py"),
                        *SMALL, *args], capture_output=True, text=True, timeout=300, env=env,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_demo_table_without_targets_and_with_the_picture(tmp_path):
    png = tmp_path / "out" / "roofline.png"
    out = _run(["--plot", str(png)], tmp_path)
    assert "Machine roofline" in out and "memory bandwidth" in out
    for prim in ("A*S ", "A*S^T", "SDDMM"):
        assert prim in out
    assert "scipy.sparse" in out
    assert "Targets" not in out and "(target" not in out and "NOT met" not in out
    assert f"wrote the roofline picture to {png}" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_verbose_shows_the_targets(tmp_path):
    out = _run(["--verbose", "--no-floor"], tmp_path)
    assert "Targets" in out and ("met" in out)
