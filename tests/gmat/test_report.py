"""The side-by-side roofline report (timings are measured, not asserted)."""

import math

import numpy as np

from roofline import gmat

MACHINE = gmat.MachineRoofline(bandwidth=2e10, triad_bandwidth=2e10, read_bandwidth=1.5e10,
                               flops32=1e11, flops64=5e10, threads=2, cpu="test CPU")


def test_benchmark_primitives_rows_and_table():
    S = gmat.powerlaw_csc(2000, 300, 10, random_state=0)
    rows = gmat.benchmark_primitives(S, ks=(1, 4), repeat=1, machine=MACHINE)
    assert [(r.primitive, r.k) for r in rows] == [
        ("A*S", 1), ("A*S^T", 1), ("SDDMM", 1), ("A*S", 4), ("A*S^T", 4), ("SDDMM", 4)
    ]
    for r in rows:
        assert r.seconds > 0 and r.peer_seconds > 0
        assert math.isclose(r.fraction, r.cost.roofline_time(MACHINE) / r.seconds)
        assert math.isclose(r.peer_ratio, r.peer_seconds / r.seconds)
        assert r.gflops > 0 and r.gbytes > 0
    report = gmat.RooflineReport(MACHINE, rows, "test data")
    text = str(report)
    assert "test CPU" in text and "SDDMM" in text and "scipy.sparse" in text
    assert "NOT a bound" in text
    md = report.to_markdown()
    assert md.count("\n") == len(rows) + 1


def test_peers_compute_the_same_thing():
    """The numpy SDDMM formulations used as peers agree with the kernel."""
    S = gmat.powerlaw_csc(300, 50, 6, random_state=1, dtype=np.float64)
    rng = np.random.default_rng(0)
    A = np.asfortranarray(rng.standard_normal((5, 300)))
    B = np.asfortranarray(rng.standard_normal((5, 50)))
    ours = gmat.sddmm(S, A, B).data
    np.testing.assert_allclose(gmat._report._sddmm_numpy_gather(S, A, B), ours, rtol=1e-12)
    np.testing.assert_allclose(gmat._report._sddmm_numpy_rows(S, A, B), ours, rtol=1e-12)


def test_no_peers():
    S = gmat.powerlaw_csc(200, 30, 5, random_state=0)
    rows = gmat.benchmark_primitives(S, ks=(2,), primitives=("A*S",), repeat=1, peers=False,
                                     machine=MACHINE)
    assert len(rows) == 1 and math.isnan(rows[0].peer_seconds)


def test_best_time_warms_up_and_keeps_the_best():
    import time

    from roofline import gmat

    calls = []
    waits = iter([0.0, 0.02, 0.0, 0.02])  # warm-up, then three timed calls

    def fn():
        calls.append(1)
        time.sleep(next(waits))

    t = gmat.best_time(fn, 3)
    assert len(calls) == 4
    assert 0.0 <= t < 0.015  # the fastest timed call, not the slow ones
