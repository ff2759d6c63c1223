import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from roofline.datasources import MatSource
from roofline.learners import GLM, ADAGrad, Learner, load_checkpoint, save_checkpoint
from tests._helpers import make_problem


def test_resume_from_checkpoint_equals_uninterrupted(tmp_path):
    X, y = make_problem(20, 400, loss="logistic", seed=1)
    ck = tmp_path / "ck.npz"

    def learner(**kw):
        return Learner(MatSource(X, y, batch_size=50), GLM(dtype="float64"),
                       ADAGrad(lr=0.3, schedule="invscaling"), progress=False, **kw)

    full = learner(n_passes=2)
    full.train()
    first = learner(n_passes=1, checkpoint=str(ck))
    first.train()
    resumed = learner(n_passes=1)
    meta = resumed.load_checkpoint(ck)
    assert meta["extra"]["pass"] == 1 and meta["optimizer_class"] == "ADAGrad"
    resumed.train()
    np.testing.assert_array_equal(resumed.model.coef, full.model.coef)
    np.testing.assert_array_equal(resumed.model.intercept, full.model.intercept)
    c = load_checkpoint(ck)
    assert c.model.opts == first.model.opts
    np.testing.assert_array_equal(c.model.coef, first.model.coef)
    assert int(c.optimizer_state["t"]) == 8


def test_bad_checkpoints_raise_clear_errors(tmp_path):
    p = tmp_path / "x.npz"
    with pytest.raises(FileNotFoundError, match="x.npz"):
        load_checkpoint(p)
    m = GLM()
    m.init(5)
    save_checkpoint(p, m)
    data = p.read_bytes()
    (tmp_path / "cut.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="cut.npz is not a complete Roofline checkpoint"):
        load_checkpoint(tmp_path / "cut.npz")
    np.savez(tmp_path / "other.npz", a=np.zeros(3))
    with pytest.raises(ValueError, match="other.npz is not a complete"):
        load_checkpoint(tmp_path / "other.npz")
    L = Learner(MatSource(*make_problem(5, 10)), GLM(loss="linear"), ADAGrad(), progress=False)
    with pytest.raises(ValueError, match="model options"):
        L.load_checkpoint(p)


WRITER = textwrap.dedent("""
    import sys
    import numpy as np
    from roofline.learners import ADAGrad, GLM, save_checkpoint
    m = GLM(n_outputs=8, dtype="float64")
    m.init(500_000)
    m.coef[...] = 7.0
    o = ADAGrad()
    o.init(m)
    print("ready", flush=True)
    while True:
        save_checkpoint(sys.argv[1], m, o)
""")


def test_crash_mid_write_leaves_old_checkpoint_loadable(tmp_path):
    """A real process killed (SIGKILL) while writing a large checkpoint: the old one survives."""
    path = tmp_path / "model.npz"
    old = GLM(n_outputs=8, dtype="float64")
    old.init(10)
    old.coef[...] = 3.0
    save_checkpoint(path, old)
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 60
        tmp = None
        while time.monotonic() < deadline:  # wait until a temporary file is being written
            tmps = [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]
            if tmps and os.path.getsize(tmp_path / tmps[0]) > 1_000_000:
                tmp = tmp_path / tmps[0]
                break
            time.sleep(0.001)
        assert tmp is not None, "the writer never started a checkpoint"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    ck = load_checkpoint(path)  # the previous, complete checkpoint (or a complete new one)
    assert ck.model.coef.shape in [(8, 10), (8, 500_000)]
    if ck.model.coef.shape == (8, 10):
        np.testing.assert_array_equal(ck.model.coef, 3.0)
    else:
        assert (ck.model.coef == 7.0).all()
    if tmp.exists():  # the half-written temporary never loads
        with pytest.raises(ValueError, match="not a complete"):
            load_checkpoint(tmp)


def _factor_cases():
    """Each factor model trained one pass by its Learner, on data it accepts."""
    import scipy.sparse as sp

    from roofline.learners import LDA, SGD, KMeansModel, MFModel, ModelUpdate, NMFModel

    rng = np.random.default_rng(0)
    counts = sp.random(60, 300, density=0.1, format="csc", random_state=1,
                       data_rvs=lambda k: rng.integers(1, 5, size=k).astype(float))
    ratings = sp.random(40, 200, density=0.15, format="csc", random_state=2,
                        data_rvs=lambda k: rng.integers(1, 6, size=k).astype(float))
    return [
        (KMeansModel(n_clusters=3, dtype="float64"), ModelUpdate(), counts),
        (NMFModel(n_components=2, dtype="float64"), ModelUpdate(), counts),
        (LDA(n_components=3, dtype="float64"), ModelUpdate(), counts),
        (MFModel(factors=2, dtype="float64"), SGD(lr=0.05), ratings),
    ]


@pytest.mark.parametrize("case", range(4), ids=["kmeans", "nmf", "lda", "mf"])
def test_factor_models_round_trip_through_a_checkpoint(tmp_path, case):
    """A factor model's checkpoint rebuilds it: the same class, options, arrays and loss."""
    model, opt, X = _factor_cases()[case]
    Learner(MatSource(X, batch_size=100), model, opt, progress=False).train()
    path = str(tmp_path / "m.npz")
    save_checkpoint(path, model, opt)
    back = load_checkpoint(path).model
    assert type(back) is type(model) and back.opts == model.opts
    for name, arr in model.parameters().items():
        np.testing.assert_array_equal(np.asarray(back.parameters()[name]), np.asarray(arr))
    batch = next(iter(MatSource(X, batch_size=X.shape[1])))
    assert back.loss(batch, None) == pytest.approx(model.loss(batch, None), rel=1e-12)


def test_a_factor_checkpoint_with_missing_arrays_is_refused(tmp_path):
    from roofline.learners import NMFModel

    model = NMFModel(n_components=2, dtype="float64")
    model.init(5)
    path = str(tmp_path / "m.npz")
    save_checkpoint(path, model)
    with np.load(path) as z:
        data = {k: z[k] for k in z.files if k != "model.components"}
    np.savez(path, **data)
    with pytest.raises(ValueError, match="NMFModel"):
        load_checkpoint(path)
