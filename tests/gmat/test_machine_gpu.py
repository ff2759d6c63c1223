"""The GPU roofline (gmat.machine_roofline(device='gpu')): a clear error without a device, and
plausible, cached ceilings on one (marker ``gpu``)."""

import pytest

from roofline import gmat


@pytest.mark.skipif(gmat.gpu_available(), reason="a CUDA device is present")
def test_gpu_roofline_without_a_device_names_it():
    with pytest.raises(RuntimeError, match="needs a CUDA device"):
        gmat.machine_roofline(device="gpu")


def test_bad_device_name():
    with pytest.raises(ValueError, match="device must be"):
        gmat.machine_roofline(device="tpu")


@pytest.mark.gpu
@pytest.mark.skipif(not gmat.gpu_available(), reason="no CUDA device available")
def test_gpu_roofline_measured_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(tmp_path))
    m = gmat.machine_roofline(device="gpu")
    assert m.device == "gpu"
    assert 1e11 < m.bandwidth < 2e13  # 100 GB/s .. 20 TB/s
    assert m.flops32 > m.flops64 / 4 > 0
    assert m.link_bandwidth > 1e9
    assert m.triad_bandwidth <= m.bandwidth and m.read_bandwidth <= m.bandwidth
    assert gmat.machine_roofline(device="gpu") == m  # from the cache
    assert "GPU roofline" in str(m)
