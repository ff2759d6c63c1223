"""RooflineReport.plot(): the machine's roofline and the primitives under it, drawn headlessly
(Agg) and checked on the axes' data and on the rendered pixels."""

import sys

import matplotlib

matplotlib.use("Agg")

import matplotlib.image  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from roofline import gmat  # noqa: E402
from roofline.gmat import MachineRoofline, RooflineReport  # noqa: E402
from roofline.gmat._report import PrimitiveTiming  # noqa: E402

BW, F32 = 20e9, 200e9  # 20 GB/s, 200 gflop/s: ridge at 10 flop/byte
MACHINE = MachineRoofline(bandwidth=BW, triad_bandwidth=BW, read_bandwidth=18e9, flops32=F32,
                          flops64=F32 / 2, threads=2, cpu="Test CPU")


def _report(S, ks=(1, 16)):
    rows = []
    for k in ks:
        for prim, cost_fn, peer in (("A*S", gmat.cost_mult_as, "scipy.sparse"),
                                    ("A*S^T", gmat.cost_mult_ast, "scipy.sparse"),
                                    ("SDDMM", gmat.cost_sddmm, "numpy")):
            cost = cost_fn(S, k)
            t = cost.roofline_time(MACHINE) * 4  # 25% of the roofline
            rows.append(PrimitiveTiming(prim, k, "float32", t, peer, 3 * t, cost, MACHINE))
    return RooflineReport(MACHINE, rows, "test data")


@pytest.fixture
def report():
    S = gmat.powerlaw_csc(5000, 1000, 10, dtype=np.float32, random_state=0)
    return _report(S)


def test_axes_hold_the_roofline_and_every_point(report):
    ax = report.plot()
    try:
        assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
        assert "intensity" in ax.get_xlabel() and "gflop/s" in ax.get_ylabel()
        assert "Test CPU" in ax.get_title()
        lines = ax.get_lines()
        # one roofline + a filled and a hollow marker per row
        assert len(lines) == 1 + 2 * len(report.rows)
        x, y = lines[0].get_data()
        # bandwidth slope below the ridge, the flops ceiling above it
        below = x < F32 / BW
        np.testing.assert_allclose(y[below], BW * x[below] / 1e9, rtol=1e-12)
        np.testing.assert_allclose(y[~below], F32 / 1e9, rtol=1e-12)
        assert x.min() < F32 / BW < x.max()
        for i, r in enumerate(report.rows):
            ours, peer = lines[1 + 2 * i], lines[2 + 2 * i]
            px, py = ours.get_data()
            np.testing.assert_allclose(px, [r.cost.flops / r.cost.bytes])
            np.testing.assert_allclose(py, [r.gflops])
            assert ours.get_markerfacecolor() != "none"
            qx, qy = peer.get_data()
            np.testing.assert_allclose(qx, px)
            np.testing.assert_allclose(qy, [r.gflops / 3])
            assert peer.get_markerfacecolor() == "none"
            # every point lies under the roofline (25% of it, by construction)
            bound = min(BW * px[0], F32) / 1e9
            assert py[0] <= bound * 1.0001
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert labels[0].startswith("roofline float32") and "A*S k=16 (25% of roofline)" in labels
    finally:
        plt.close(ax.figure)


def test_no_peers(report):
    ax = report.plot(peers=False)
    try:
        assert len(ax.get_lines()) == 1 + len(report.rows)
    finally:
        plt.close(ax.figure)


def test_rendered_pixels(report, tmp_path):
    """The line and the markers are drawn where the data say; the space above the roofline
    is background."""
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    try:
        report.plot(ax=ax)
        fig.canvas.draw()
        img = np.asarray(fig.canvas.buffer_rgba())[..., :3].astype(int)
        h = img.shape[0]

        def pixel(x, y):
            dx, dy = ax.transData.transform((x, y))
            return img[int(round(h - dy)), int(round(dx))]

        # the roofline is black on the slope and on the ceiling
        x_ceiling = 10 * F32 / BW
        assert pixel(x_ceiling, F32 / 1e9).max() < 80
        x_slope = F32 / BW / 3
        assert pixel(x_slope, BW * x_slope / 1e9).max() < 80
        # above the ceiling, between grid lines: background, white
        y_above = np.sqrt(F32 / 1e9 * ax.get_ylim()[1])
        assert F32 / 1e9 * 1.05 < y_above < ax.get_ylim()[1]
        assert (pixel(x_ceiling * 1.5, y_above) > 240).all()
        # the first row's filled marker: coloured, not white, not black
        r = report.rows[0]
        c = pixel(r.cost.flops / r.cost.bytes, r.gflops)
        assert c.max() - c.min() > 60, c
    finally:
        plt.close(fig)
    path = tmp_path / "roofline.png"
    ax = report.plot(path=path)
    plt.close(ax.figure)
    png = matplotlib.image.imread(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.shape[0] > 200 and png.shape[1] > 300
    assert (png[..., :3] < 0.3).any() and (png[..., :3] > 0.95).any()


def test_real_report_plots(tmp_path):
    """A measured report (tiny data, the test machine figures) plots one point per row."""
    S = gmat.powerlaw_csc(2000, 300, 8, dtype=np.float32, random_state=1)
    rows = gmat.benchmark_primitives(S, ks=(1, 4), repeat=1, machine=MACHINE)
    report = RooflineReport(MACHINE, rows)
    ax = report.plot(path=tmp_path / "r.png")
    try:
        assert len(ax.get_lines()) == 1 + 2 * 6
        assert (tmp_path / "r.png").stat().st_size > 10_000
    finally:
        plt.close(ax.figure)


def test_missing_matplotlib_names_the_extra(report, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match=r"pip install 'roofline\[plot\]'"):
        report.plot()
