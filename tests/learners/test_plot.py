"""TrainResult.plot() and ``roofline train --plot``: drawn headlessly (Agg), checked on the axes'
data and on the PNG written."""

import json
import sys

import matplotlib

matplotlib.use("Agg")

import matplotlib.image  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from roofline.datasources import MatSource, make_criteo_like_matrix  # noqa: E402
from roofline.learners import GLM, ADAGrad, Learner  # noqa: E402
from roofline.learners._cli import main  # noqa: E402
from roofline.learners._plot import current_rate, plot_trace  # noqa: E402
from tests.learners._configs import CD_CONFIG, TINY  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def result():
    X, y = make_criteo_like_matrix(3000, n_bits=10, seed=0)[:2]
    train = MatSource(X[:, :2400], y[:2400], batch_size=200)
    held = MatSource(X[:, 2400:], y[2400:], batch_size=600)
    learner = Learner(train, GLM(loss="logistic"), ADAGrad(lr=0.1), heldout=held,
                      n_passes=2, eval_every=3, progress=False)
    return learner.train()


def test_train_result_plot_axes(result, tmp_path):
    path = tmp_path / "trace.png"
    axes = result.plot(path=path)
    try:
        assert len(axes) == 2
        loss, speed = axes
        assert loss.get_xlabel() == "examples trained on" == speed.get_xlabel()
        assert loss.get_ylabel() == "loss" and "second" in speed.get_ylabel()
        lines = loss.get_lines()
        assert [ln.get_label() for ln in lines] == ["train loss", "held-out loss"]
        ex = np.array([r["examples"] for r in result.trace], float)
        held = np.array([r["heldout_loss"] for r in result.trace], float)
        hx, hy = lines[1].get_data()
        ok = np.isfinite(held)
        assert len(hx) == ok.sum() >= 5
        np.testing.assert_allclose(hx, ex[ok])
        np.testing.assert_allclose(hy, held[ok])
        # the held-out loss goes down over training (planted logistic labels)
        assert hy[-1] < hy[0]
        # the current rate between rows (from the second row on), then the cumulative one
        now, since = speed.get_lines()
        assert "warm-up left out" in now.get_label() and "since the start" in since.get_label()
        assert "current" in speed.get_ylabel()
        sx, sy = now.get_data()
        t = np.array([r["seconds"] for r in result.trace], float)
        keep = np.flatnonzero(np.diff(ex) > 0) + 1  # rows that trained since the last one
        prev = np.concatenate([[0], keep[:-1]])
        np.testing.assert_allclose(sx, ex[keep])
        np.testing.assert_allclose(sy, (ex[keep] - ex[prev]) / (t[keep] - t[prev]))
        np.testing.assert_allclose(since.get_data()[1],
                                   [r["examples_per_s"] for r in result.trace])
        assert speed.get_ylim()[0] == 0
    finally:
        plt.close(axes[0].figure)
    data = path.read_bytes()
    assert data[:8] == PNG
    img = matplotlib.image.imread(path)
    assert img.shape[1] > 1.5 * img.shape[0]  # two panels side by side
    rgb = img[..., :3]
    # the blue (C0) train loss and the green (C2) throughput line are drawn
    blue = (rgb[..., 2] > 0.6) & (rgb[..., 0] < 0.3)
    green = (rgb[..., 1] > 0.5) & (rgb[..., 0] < 0.3) & (rgb[..., 2] < 0.3)
    assert blue.sum() > 50 and green.sum() > 50
    # the green line lies in the right half, the loss lines' blue in the left
    w = rgb.shape[1]
    assert green[:, w // 2:].sum() > 0.9 * green.sum()
    assert blue[:, : w // 2].sum() > 0.5 * blue.sum()


def test_throughput_panel_is_the_current_rate_without_the_warm_up():
    """Issue 34: the panel drew examples/s since the start, compilation included; it draws the
    rate between rows, the first interval (warm-up) left out, a row that trained nothing since
    the last (a pass end after an evaluation) merged into the next interval."""
    ex = [100, 200, 300, 300, 400]
    sec = [10.0, 11.0, 12.0, 12.5, 13.5]  # 10 s of warm-up before the first row
    trace = [{"examples": e, "seconds": t, "examples_per_s": e / t, "train_loss": 0.5,
              "heldout_loss": float("nan")} for e, t in zip(ex, sec, strict=True)]
    x, rate = current_rate(trace)
    np.testing.assert_allclose(x, [200, 300, 400])
    np.testing.assert_allclose(rate, [100.0, 100.0, 100 / 1.5])
    axes = plot_trace(trace)
    try:
        np.testing.assert_allclose(axes[1].get_lines()[0].get_data()[1], rate)
    finally:
        plt.close(axes[0].figure)
    assert current_rate(trace[:1])[0].size == 0  # one row: no interval after the warm-up


def test_train_result_plot_on_given_axes(result):
    fig, axes = plt.subplots(2, 1)
    try:
        out = result.plot(axes=axes)
        assert out[0] is axes[0] and out[1] is axes[1]
        assert len(axes[0].get_lines()) == 2 and len(axes[1].get_lines()) == 2
    finally:
        plt.close(fig)


def test_empty_trace_is_an_error():
    from roofline.learners._learner import TrainResult

    with pytest.raises(ValueError, match="trace is empty"):
        TrainResult().plot()


def test_missing_matplotlib_names_the_extra(result, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match=r"roofline\[plot\]"):
        result.plot()


def test_cli_train_plot_default_path(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text(TINY)
    out = tmp_path / "run"
    assert main(["train", str(cfg), "-o", str(out), "--plot"]) == 0
    png = out / "trace.png"
    assert png.read_bytes()[:8] == PNG
    assert f"plot: {png}" in capsys.readouterr().out
    img = matplotlib.image.imread(png)
    assert img.shape[0] > 200 and (img[..., :3] < 0.5).any()
    trace = json.loads((out / "trace.json").read_text())
    assert len(trace) >= 2


def test_cli_train_plot_explicit_path_and_no_plot(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(TINY)
    out = tmp_path / "run"
    target = tmp_path / "pictures.png"
    assert main(["train", str(cfg), "-o", str(out), "--plot", str(target)]) == 0
    assert target.read_bytes()[:8] == PNG
    assert not (out / "trace.png").exists()
    out2 = tmp_path / "run2"
    assert main(["train", str(cfg), "-o", str(out2)]) == 0
    assert not (out2 / "trace.png").exists()


def test_cli_cd_solver_plot(tmp_path):
    cfg = tmp_path / "cd.toml"
    cfg.write_text(CD_CONFIG)
    out = tmp_path / "run"
    assert main(["train", str(cfg), "-o", str(out), "--plot"]) == 0
    png = out / "trace.png"
    assert png.read_bytes()[:8] == PNG
    trace = json.loads((out / "trace.json").read_text())
    assert len(trace) >= 2


def test_cli_plot_without_matplotlib_fails_before_training(tmp_path, monkeypatch, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text(TINY)
    out = tmp_path / "run"
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    assert main(["train", str(cfg), "-o", str(out), "--plot"]) == 2
    err = capsys.readouterr().err
    assert "roofline[plot]" in err
    assert not (out / "model.npz").exists()
