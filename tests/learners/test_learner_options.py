import numpy as np
import pytest

from roofline.learners import (
    ADAGradOptions,
    GLMOptions,
    L2Regularizer,
    LBFGSOptions,
    LearnerOptions,
    SGDOptions,
)
from roofline.learners._mixins import L1Options, MetricsOptions

ALL = [ADAGradOptions, GLMOptions, LBFGSOptions, LearnerOptions, SGDOptions, L1Options,
       MetricsOptions]


@pytest.mark.parametrize("cls", ALL)
def test_defaults_round_trip_toml(cls):
    o = cls()
    assert cls.from_toml(o.to_toml("t"), "t") == o


def test_non_default_round_trip_and_types():
    o = ADAGradOptions(lr=2, epsilon=1e-6, fused=False, schedule="invscaling")
    assert isinstance(o.lr, float) and o.lr == 2.0
    back = ADAGradOptions.from_toml(o.to_toml())
    assert back == o
    lo = LearnerOptions(checkpoint="a b/\"x\".npz", n_passes=3)
    assert LearnerOptions.from_toml(lo.to_toml()) == lo


def test_print_table_lists_every_option():
    text = str(GLMOptions(loss="hinge", n_outputs=3))
    assert text.splitlines()[0] == "GLMOptions"
    for name, value in [("loss", "'hinge'"), ("n_outputs", "3"), ("dtype", "'float32'")]:
        line = next(ln for ln in text.splitlines() if ln.split()[0] == name)
        assert value in line


def test_validation_errors_name_option_and_place():
    with pytest.raises(ValueError, match="'lr' must be > 0"):
        SGDOptions(lr=0)
    with pytest.raises(ValueError, match="'loss' must be one of"):
        GLMOptions(loss="poisson")
    with pytest.raises(TypeError, match="'n_outputs' must be of type int"):
        GLMOptions(n_outputs=2.5)
    with pytest.raises(TypeError, match="'fused' must be of type bool"):
        ADAGradOptions(fused=1)
    with pytest.raises(ValueError, match=r"cfg.toml \[model\]: unknown key 'los'"):
        GLMOptions.from_dict({"los": "linear"}, "cfg.toml [model]")
    with pytest.raises(ValueError, match="holdout_every"):
        LearnerOptions(holdout_every=1)
    with pytest.raises(ValueError, match="finite"):
        SGDOptions(lr=float("inf"))


def test_numpy_scalars_accepted():
    assert GLMOptions(n_outputs=np.int64(2)).n_outputs == 2
    assert L2Regularizer(np.float32(0.5)).l2 == 0.5


def test_one_options_system():
    """Learners and datasources share gmat's Options; there is no second options module."""
    import importlib.util

    from roofline import gmat
    from roofline.datasources import ShuffleOptions
    from roofline.gmat import Options

    assert Options is gmat.Options
    assert importlib.util.find_spec("roofline.learners._options") is None
    assert issubclass(GLMOptions, gmat.Options) and issubclass(ShuffleOptions, gmat.Options)


def test_learner_what_prints_every_component():
    import scipy.sparse as sp

    from roofline.datasources import MatSource
    from roofline.learners import GLM, ADAGrad, Learner, MetricsRecorder

    X = sp.random(5, 10, density=0.5, format="csc", random_state=0)
    L = Learner(MatSource(X, np.zeros(10), batch_size=4), GLM(loss="linear", dtype="float64"),
                ADAGrad(lr=0.7), mixins=[L2Regularizer(0.25), MetricsRecorder()], n_passes=3)
    text = L.what()
    for title in ["LearnerOptions", "GLMOptions", "ADAGradOptions", "L2Options",
                  "MetricsOptions", "MatSourceOptions"]:
        assert title in text.splitlines()
    lines = text.splitlines()
    assert any(ln.split()[:3] == ["n_passes", "int", "3"] for ln in lines)
    assert any(ln.split()[:3] == ["lr", "float", "0.7"] for ln in lines)
    assert any(ln.split()[:3] == ["reg2weight", "float", "0.25"] for ln in lines)
    assert any(ln.split()[:2] == ["batch_size", "4"] for ln in lines)
