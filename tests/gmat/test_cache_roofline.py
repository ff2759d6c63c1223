"""The cache-aware roofline (Ilic, Pratas and Sousa): the level bandwidths, their cache, the
working set of each primitive and the level that holds it, the report's column and the plot.

The logic is tested on injected figures; the measurement itself runs once, on small traffic."""

import dataclasses
import json

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import scipy.sparse as sp  # noqa: E402

from roofline import gmat  # noqa: E402
from roofline.gmat import _machine  # noqa: E402
from roofline.gmat._report import PrimitiveTiming  # noqa: E402

KiB, MiB = 2**10, 2**20

# 2 threads; L1 32 KiB and L2 1 MiB per core, L3 32 MiB shared: capacities 64 KiB, 2 MiB, 32 MiB
LEVELLED = gmat.MachineRoofline(
    bandwidth=10e9, triad_bandwidth=10e9, read_bandwidth=9e9, flops32=200e9, flops64=100e9,
    threads=2, cpu="Test CPU", l1_bandwidth=400e9, l2_bandwidth=150e9, l3_bandwidth=60e9,
    l1_size=32 * KiB, l2_size=MiB, l3_size=32 * MiB)


def test_measure_machine_measures_every_level():
    """One real measurement on small traffic: every level measured, sized from the cache
    sizes, and the figures ordered or the disorder named."""
    sizes = gmat.cache_sizes()
    assert set(sizes) == {"L1", "L2", "L3"}
    assert 4 * KiB <= sizes["L1"] <= sizes["L2"] <= sizes["L3"]
    m = gmat.measure_machine(size_bytes=64 * MiB, repeat=3, level_traffic=4 * MiB,
                             fma_iterations=5_000)
    assert (m.l1_size, m.l2_size, m.l3_size) == (sizes["L1"], sizes["L2"], sizes["L3"])
    raw = [m.l1_bandwidth, m.l2_bandwidth, m.l3_bandwidth, m.bandwidth]
    assert all(1e8 < b < 1e14 for b in raw)
    # a working set in L1 is read several times faster than a stream from memory, load or not
    assert m.l1_bandwidth > 2 * m.read_bandwidth
    ceilings = [bw for _, _, bw in m.levels()]
    assert [n for n, _, _ in m.levels()] == ["L1", "L2", "L3", "DRAM"]
    assert ceilings == sorted(ceilings, reverse=True)
    ordered = all(a >= b for a, b in zip(raw[:-1], raw[1:], strict=True))
    assert (m.level_disorder() == "") == ordered
    if not ordered:
        assert "disturbed" in m.level_disorder() and "NOTE" in str(m)
    assert "L1  bandwidth" in str(m) and "L3  bandwidth" in str(m)


def test_levels_capacities_and_choice():
    levels = LEVELLED.levels()
    assert levels == [("L1", 64 * KiB, 400e9), ("L2", 2 * MiB, 150e9), ("L3", 32 * MiB, 60e9),
                      ("DRAM", float("inf"), 10e9)]
    assert LEVELLED.level_for(64 * KiB) == ("L1", 400e9)
    assert LEVELLED.level_for(64 * KiB + 1) == ("L2", 150e9)
    assert LEVELLED.level_for(2 * MiB + 1) == ("L3", 60e9)
    assert LEVELLED.level_for(32 * MiB + 1) == ("DRAM", 10e9)
    assert LEVELLED.level_disorder() == ""
    # a machine measured before the levels existed: everything is DRAM
    plain = dataclasses.replace(LEVELLED, l1_bandwidth=0.0, l2_bandwidth=0.0, l3_bandwidth=0.0)
    assert plain.levels() == [("DRAM", float("inf"), 10e9)]
    assert plain.level_for(1) == ("DRAM", 10e9)


def test_disordered_levels_are_named_and_lifted():
    m = dataclasses.replace(LEVELLED, l2_bandwidth=50e9, load=3.5)
    assert "L2 50.0 GB/s < L3 60.0 GB/s" in m.level_disorder()
    assert "load average 3.5" in m.level_disorder()
    assert dict((n, bw) for n, _, bw in m.levels())["L2"] == 60e9  # lifted to L3's
    assert "NOTE: L2 50.0 GB/s < L3" in str(m)


def test_cache_sizes_from_sysfs_lscpu_or_defaults(tmp_path, monkeypatch):
    for i, (level, kind, size) in enumerate([(1, "Data", "48K"), (1, "Instruction", "32K"),
                                             (2, "Unified", "2048K"), (3, "Unified", "96M")]):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    assert _machine._sysfs_caches(str(tmp_path)) == {"L1": 48 * KiB, "L2": 2 * MiB,
                                                     "L3": 96 * MiB}
    assert _machine._parse_size("32 MiB (1 instance)") == 32 * MiB
    assert _machine._parse_size("1.5 MiB") == 3 * MiB // 2
    assert _machine._parse_size("garbage") == 0

    class Done:
        stdout = ("L1d cache:  96 KiB (2 instances)\nL1i cache:  64 KiB (2 instances)\n"
                  "L2 cache:   4 MiB (2 instances)\nL3 cache:   260 MiB (1 instance)\n")

    import subprocess

    monkeypatch.setattr(subprocess, "run", lambda *a, **k: Done())
    assert _machine._lscpu_caches() == {"L1": 48 * KiB, "L2": 2 * MiB, "L3": 260 * MiB}
    monkeypatch.setattr(_machine, "_sysfs_caches", lambda: {})
    assert gmat.cache_sizes() == {"L1": 48 * KiB, "L2": 2 * MiB, "L3": 260 * MiB}
    monkeypatch.setattr(_machine, "_lscpu_caches", lambda: {"L2": 512 * KiB})
    assert gmat.cache_sizes() == {"L1": 32 * KiB, "L2": 512 * KiB, "L3": 32 * MiB}


@pytest.fixture
def S():
    """1000 features x 40 examples, float32, int32 indices: rows 0, 1, 15, 16, 999 and
    columns 0, 1, 17 hold the 6 stored values."""
    rows = np.array([0, 15, 1, 16, 999, 0])
    cols = np.array([0, 0, 1, 1, 17, 17])
    return sp.csc_matrix((np.arange(1.0, 7.0, dtype=np.float32), (rows, cols)),
                         shape=(1000, 40))


def test_working_sets_by_hand(S):
    assert S.indices.dtype == np.int32 and S.indptr.dtype == np.int32
    sparse = 41 * 4 + 6 * (4 + 4)
    # k = 1: 16 float32 columns per 64-byte line: rows {0, 1, 15} share line 0, 16 is line 1,
    # 999 line 62 -> 3 lines; the output 1 x 40
    c = gmat.cost_mult_as(S, 1)
    assert c.working_set == sparse + 3 * 64 + 40 * 4
    # k = 16: a column is one line: 5 distinct rows
    assert gmat.cost_mult_as(S, 16).working_set == sparse + 5 * 64 + 16 * 40 * 4
    # k = 32: two lines per column
    assert gmat.cost_mult_as(S, 32).working_set == sparse + 10 * 64 + 32 * 40 * 4
    # A*S^T: columns {0, 1, 17} of A at k = 1 -> lines 0 and 1; the output 1 x 1000
    assert gmat.cost_mult_ast(S, 1).working_set == sparse + 2 * 64 + 1000 * 4
    assert gmat.cost_mult_ast(S, 16).working_set == sparse + 3 * 64 + 16 * 1000 * 4
    # SDDMM: the lines of A's rows and of B's columns, nnz outputs; unscaled: no values read
    assert gmat.cost_sddmm(S, 16).working_set == sparse + 5 * 64 + 3 * 64 + 6 * 4
    assert gmat.cost_sddmm(S, 1, scale=False).working_set == sparse - 6 * 4 + 3 * 64 + 2 * 64 \
        + 6 * 4
    # float64, k = 1: 8 columns per line: rows {0, 1} line 0, {15} line 1, {16} line 2, 999
    # line 124 -> 4 lines
    S64 = S.astype(np.float64)
    assert gmat.cost_mult_as(S64, 1).working_set == 41 * 4 + 6 * 12 + 4 * 64 + 40 * 8


def test_level_choice_against_hand_sizes(S):
    # A*S at k = 16: 212 + 320 + 2560 = 3092 bytes; at k = 512 (16 * 512 * 4 bytes out and
    # 2 KiB columns): 212 + 5 * 2048 + 512 * 160 = 92 372 bytes
    small = gmat.cost_mult_as(S, 16)
    assert small.working_set == 3092
    big = gmat.cost_mult_as(S, 512)
    assert big.working_set == 212 + 5 * 2048 + 512 * 160
    m = dataclasses.replace(LEVELLED, l1_size=2 * KiB)  # L1 holds 4 KiB on the two threads
    assert small.level(m) == "L1" and big.level(m) == "L2"
    # L2 holding 80 KiB on the two threads: big goes to L3
    assert big.level(dataclasses.replace(m, l2_size=40 * KiB)) == "L3"
    assert big.level(dataclasses.replace(m, l2_size=40 * KiB, l3_size=64 * KiB)) == "DRAM"
    # the bound: the level's bandwidth for the compulsory bytes, or the flops ceiling
    assert small.level_time(m) == pytest.approx(max(small.bytes / 400e9, small.flops / 200e9))
    assert big.level_time(m) == pytest.approx(max(big.bytes / 150e9, big.flops / 200e9))
    assert small.level_time(m) <= small.roofline_time(m)
    assert small.level_fraction(1e-6, m) == pytest.approx(small.level_time(m) / 1e-6)
    # a hand-made cost without a working set falls back to its compulsory bytes
    bare = gmat.Cost("A*S", 1, np.dtype(np.float32), 1, 100 * KiB, 2)
    assert bare.footprint() == 100 * KiB and bare.level(m) == "L2"


def test_report_gives_the_level_beside_dram(S):
    cost = gmat.cost_mult_as(S, 16)
    t = 4 * cost.level_time(LEVELLED)
    row = PrimitiveTiming("A*S", 16, "float32", t, "scipy.sparse", 2 * t, cost, LEVELLED)
    assert row.level == "L1"
    assert row.level_fraction == pytest.approx(0.25)
    assert row.fraction == pytest.approx(cost.roofline_time(LEVELLED) / t)
    assert row.level_fraction < row.fraction
    report = gmat.RooflineReport(LEVELLED, [row], "hand data")
    text = str(report)
    assert "% level" in text and " L1 " in text and "25.0%" in text
    md = report.to_markdown()
    assert "| L1 | 25% |" in md
    assert md.splitlines()[0].count("|") == md.splitlines()[2].count("|")


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("ROOFLINE_REMEASURE", raising=False)
    calls = []

    def injected(**kw):  # the cache logic is under test, not the measurement
        calls.append(kw)
        return dataclasses.replace(LEVELLED, measured_at=float(len(calls)))

    monkeypatch.setattr(_machine, "measure_machine", injected)
    return tmp_path, calls


def test_old_cache_format_is_remeasured_not_misread(cache_dir):
    path, calls = cache_dir
    key = _machine._key(_machine.kernels.default_threads())
    assert key.startswith("v3|")
    old_key = "v2|" + key.split("|", 1)[1]
    old = {f: v for f, v in dataclasses.asdict(LEVELLED).items()
           if not f.startswith(("l1_", "l2_", "l3_"))}
    (path / "machine.json").write_text(json.dumps({old_key: old}))
    m = gmat.machine_roofline()
    assert len(calls) == 1 and m.l1_bandwidth == 400e9
    entries = json.loads((path / "machine.json").read_text())
    assert entries[key]["l3_size"] == 32 * MiB
    assert gmat.machine_roofline() == m and len(calls) == 1  # from the cache, all fields
    # an entry under the current key but without the levels (written by hand or by a build
    # between the two formats) is measured again too
    entries[key] = old
    (path / "machine.json").write_text(json.dumps(entries))
    gmat.machine_roofline()
    assert len(calls) == 2


def test_plot_draws_the_levels(S, tmp_path):
    rows = []
    for k, cost_fn in ((1, gmat.cost_mult_as), (16, gmat.cost_mult_ast)):
        cost = cost_fn(S, k)
        t = 2 * cost.level_time(LEVELLED)
        rows.append(PrimitiveTiming("A*S" if k == 1 else "A*S^T", k, "float32", t,
                                    "scipy.sparse", 3 * t, cost, LEVELLED))
    report = gmat.RooflineReport(LEVELLED, rows, "hand data")
    ax = report.plot(path=tmp_path / "levels.png")
    try:
        lines = ax.get_lines()
        assert len(lines) == 1 + 3 + 2 * len(rows)  # DRAM, L1-L3, a marker and a peer per row
        for line, (name, _cap, bw) in zip(lines[1:4], LEVELLED.levels()[:3], strict=True):
            x, y = line.get_data()
            np.testing.assert_allclose(y, np.minimum(bw * x, 200e9) / 1e9, rtol=1e-12)
            assert line.get_linestyle() != "-"
            assert line.get_label().startswith(f"{name}: {bw / 1e9:.1f} GB/s")
        x = lines[1].get_data()[0]
        assert x.min() < 200e9 / 400e9  # the L1 ridge is on the picture
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert any("50% of L1" in s or "50% of L2" in s for s in labels)
        assert "Cache-aware" in ax.get_title()
    finally:
        plt.close(ax.figure)
    assert (tmp_path / "levels.png").read_bytes()[:4] == b"\x89PNG"
