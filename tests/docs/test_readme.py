"""The README stays true to the repository: its links resolve, its Python compiles, and every
ratio of its headline table is one measured in the docs' tables (benchmarks.md, comm.md,
distributed_learners.md).  (The docs' own examples run as doctests in ``make docs``.)"""

import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as f:
        return f.read()


README = _read("README.md")


def test_links_resolve():
    links = re.findall(r"\]\(([^)#\s]+)\)", README)
    assert len(links) >= 5
    missing = [p for p in links if not p.startswith(("http://", "https://"))
               and not os.path.exists(os.path.join(ROOT, p))]
    assert not missing, f"README links to missing files: {missing}"


def test_python_blocks_compile():
    blocks = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    assert len(blocks) >= 2
    for b in blocks:
        compile(b, "README.md", "exec")


def test_headline_ratios_are_in_benchmarks_md():
    bench = "".join(_read("docs", f) for f in  # the measured tables
                    ("benchmarks.md", "comm.md", "distributed_learners.md"))
    table = README.split("## Measured", 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in table.splitlines() if ln.startswith("| ") and "---" not in ln][1:]
    assert len(rows) >= 5
    for row in rows:
        what, ratios, where = (c.strip() for c in row.strip("|").split("|"))
        assert re.search(r"\d{4}-\d\d-\d\d", where), f"no date in {row!r}"
        for num in re.findall(r"(\d+(?:\.\d+)?)x", ratios):
            assert num in bench, f"{num}x ({what}) is not in the docs' measured tables"


@pytest.mark.parametrize("target", ["demo:", "test:", "docs:"])
def test_makefile_targets(target):
    assert re.search(rf"^{target}", _read("Makefile"), flags=re.M)


def test_ci_builds_the_docs():
    ci = _read(".ci", "run")
    assert "make test" in ci and "make docs" in ci
