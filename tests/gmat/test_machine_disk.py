"""The disk's roofline: measured (latency, streaming rates, the corner), cached per host and file
system like the machine roofline, and what it predicts."""

import json
import os

import pytest

from roofline import gmat


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(d))
    monkeypatch.delenv("ROOFLINE_REMEASURE", raising=False)
    return d


def test_measure_disk_gives_consistent_figures(tmp_path):
    from roofline.kernels import measure_disk

    m = measure_disk(tmp_path, size_bytes=8 << 20, n_small=30, n_synced=3, repeat=1)
    assert isinstance(m, gmat.DiskRoofline)
    assert m.path == os.path.realpath(tmp_path) and m.size_bytes == 8 << 20
    assert m.clock == "wall"
    for f in ("write_latency", "read_latency", "synced_write_latency", "write_bandwidth",
              "read_bandwidth", "synced_write_bandwidth"):
        assert 0 < getattr(m, f) < float("inf"), f
    # a durable write costs at least what a cached one does
    assert m.synced_write_latency > 0.5 * m.write_latency
    assert m.latency() == m.write_latency + m.read_latency
    assert m.latency(True) == m.synced_write_latency + m.read_latency
    b = 1 / (1 / m.write_bandwidth + 1 / m.read_bandwidth)
    assert m.bandwidth() == pytest.approx(b)
    assert m.corner() == pytest.approx(m.latency() * b)
    # at the corner a file takes twice its streaming time: half the bandwidth
    s = m.corner()
    assert s / m.io_time(1, s, 1, s) == pytest.approx(b / 2)
    # checksummed files add a CRC-32 over every byte
    assert m.checksum_bandwidth > 0
    assert m.io_time(1, s, 1, s, checksummed=True) == pytest.approx(
        m.io_time(1, s, 1, s) + 2 * s / m.checksum_bandwidth)
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".roofline-disk")]
    assert "corner" in str(m)


def test_cpu_clock_figures_and_a_bad_clock(tmp_path):
    from roofline.kernels import measure_disk

    m = measure_disk(tmp_path, size_bytes=4 << 20, n_small=10, n_synced=2, repeat=1,
                     clock="cpu")
    assert m.clock == "cpu" and m.write_bandwidth > 0 and m.checksum_bandwidth > 0
    with pytest.raises(ValueError, match="clock must be 'wall' or 'cpu'"):
        measure_disk(tmp_path, clock="gpu")


def test_disk_roofline_is_cached_per_file_system(tmp_path, cache_dir):
    first = gmat.disk_roofline(tmp_path)
    entries = json.loads((cache_dir / "disk.json").read_text())
    assert len(entries) == 1 and list(entries.values())[0]["path"] == first.path
    assert gmat.disk_roofline(tmp_path) == first  # from the cache
    assert gmat.machine_roofline(device="disk", path=tmp_path) == first
    again = gmat.disk_roofline(tmp_path, remeasure=True)
    assert again.measured_at > first.measured_at
    assert gmat.disk_roofline(tmp_path) == again


def test_bad_paths_and_devices(tmp_path, cache_dir):
    with pytest.raises(ValueError, match="path must be a writable directory"):
        gmat.disk_roofline(tmp_path / "missing")
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(ValueError, match="path must be a writable directory"):
        gmat.machine_roofline(device="disk", path=f)
    with pytest.raises(ValueError, match="'cpu', 'gpu' or 'disk'"):
        gmat.machine_roofline(device="tape")
