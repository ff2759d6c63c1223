"""Machine roofline measurement and its per-machine cache (real measurements, small sizes)."""

import json

import pytest

from roofline import gmat


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("ROOFLINE_REMEASURE", raising=False)
    return tmp_path


@pytest.fixture
def fast_measure(monkeypatch):
    """Measure on small arrays so the test stays quick (still a real measurement)."""
    real = gmat._machine.measure_machine
    calls = []

    def small(**kw):
        calls.append(kw)
        return real(size_bytes=8 * 2**20, repeat=2)

    monkeypatch.setattr(gmat._machine, "measure_machine", small)
    return calls


def test_measure_machine_gives_plausible_ceilings():
    m = gmat.measure_machine(size_bytes=8 * 2**20, repeat=2)
    assert m.bandwidth == max(m.triad_bandwidth, m.read_bandwidth)
    assert 1e8 < m.bandwidth < 1e13  # between 0.1 GB/s and 10 TB/s
    assert 1e8 < m.flops64 < m.flops32 * 1.5  # float64 is no faster than float32
    assert m.threads >= 1
    assert m.flops(gmat.SUPPORTED_DTYPES[0]) == m.flops32
    assert "memory bandwidth" in str(m)


def test_machine_roofline_is_cached_and_remeasured_on_request(cache_dir, fast_measure,
                                                               monkeypatch):
    m1 = gmat.machine_roofline()
    assert len(fast_measure) == 1
    path = cache_dir / "machine.json"
    entries = json.loads(path.read_text())
    assert len(entries) == 1 and list(entries.values())[0]["bandwidth"] == m1.bandwidth
    m2 = gmat.machine_roofline()
    assert len(fast_measure) == 1 and m2 == m1  # from the cache
    gmat.machine_roofline(remeasure=True)
    assert len(fast_measure) == 2
    monkeypatch.setenv("ROOFLINE_REMEASURE", "1")
    gmat.machine_roofline()
    assert len(fast_measure) == 3


def test_unreadable_cache_is_replaced(cache_dir, fast_measure):
    (cache_dir / "machine.json").write_text("{not json")
    m = gmat.machine_roofline()
    assert len(fast_measure) == 1
    assert json.loads((cache_dir / "machine.json").read_text())
    assert m.bandwidth > 0


def test_busy_flag_and_warning():
    import dataclasses

    m = gmat.MachineRoofline(bandwidth=1e10, triad_bandwidth=1e10, read_bandwidth=1e10,
                             flops32=1e11, flops64=5e10, threads=2, load=0.2)
    assert not m.busy and "WARNING" not in str(m)
    busy = dataclasses.replace(m, load=3.0)
    assert busy.busy and "load average was 3.0" in str(busy)
