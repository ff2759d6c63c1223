"""Tests of glm/_losses.py (``roofline.glm``): the loss registry, the one label check and
the one conversion of regularisation strengths; and the public surfaces of gmat.cd / glm."""

import numpy as np
import pytest

from roofline import glm, gmat, kernels


def test_registry_names_aliases_and_codes():
    assert glm.LOSSES == ("squared", "logistic", "hinge", "squared_hinge")
    assert glm.LOSS_CODES is kernels.LOSS_CODES
    for alias, canon in (("linear", "squared"), ("least_squares", "squared"),
                         ("log", "logistic"), ("log_loss", "logistic")):
        assert glm.resolve_loss(alias) == canon
        assert glm.loss_code(alias) == glm.LOSS_CODES[canon]
    for name in glm.LOSSES:
        assert glm.resolve_loss(name) == name
    assert [glm.loss_code(n) for n in glm.LOSSES] == [0, 1, 2, 3]
    assert set(glm.CD_LOSSES) <= set(glm.GLM_LOSSES) == set(glm.LOSSES)


def test_resolve_loss_errors_name_the_argument_and_the_choices():
    with pytest.raises(ValueError, match=r"loss must be one of .*'linear'.*got 'cubic'"):
        glm.resolve_loss("cubic")
    with pytest.raises(ValueError, match=r"kind must be one of"):
        glm.resolve_loss(3, argname="kind")
    with pytest.raises(ValueError, match="'squared_hinge' loss is not supported here"):
        glm.resolve_loss("squared_hinge", allowed=glm.CD_LOSSES)
    assert glm.resolve_loss("linear", allowed=glm.CD_LOSSES) == "squared"


def test_check_labels_glm_form():
    y = np.array([0.0, 1.0, 0.25])
    assert glm.check_labels(y, "logistic") is y  # soft labels, returned as they are
    glm.check_labels(np.array([-1.0, 1.0]), "hinge")
    glm.check_labels(np.array([-7.5, 3.0]), "linear")
    with pytest.raises(ValueError, match=r"logistic loss needs labels in \[0, 1\]"):
        glm.check_labels(np.array([-1.0, 1.0]), "log_loss")
    with pytest.raises(ValueError, match="squared_hinge loss needs labels"):
        glm.check_labels(np.array([0.0, 2.0]), "squared_hinge")
    with pytest.raises(ValueError, match="yb has a non-finite value nan at position 1"):
        glm.check_labels(np.array([0.0, np.nan, 1.0]), "squared", "yb")
    glm.check_labels(np.empty(0), "logistic")


def test_check_labels_margin_form():
    out = glm.check_labels(np.array([0, 1, 1, 0]), "logistic", margin=True)
    np.testing.assert_array_equal(out, [-1.0, 1.0, 1.0, -1.0])
    assert out.dtype == np.float64
    out = glm.check_labels(np.array([[2.5, -1.0]]), "squared", margin=True)
    np.testing.assert_array_equal(out, [2.5, -1.0])
    with pytest.raises(ValueError, match="y must hold binary labels"):
        glm.check_labels(np.array([0.0, 0.5, 1.0]), "hinge", margin=True)
    with pytest.raises(ValueError, match="single class"):
        glm.check_labels(np.ones(3), "logistic", margin=True)
    np.testing.assert_array_equal(
        glm.check_labels(np.ones(3), "logistic", single_class_ok=True, margin=True), np.ones(3))
    with pytest.raises(TypeError, match="y must be numeric"):
        glm.check_labels(np.array(["a", "b"]), "squared", margin=True)
    with pytest.raises(ValueError, match="y has a non-finite value inf at position 0"):
        glm.check_labels(np.array([np.inf, 1.0]), "hinge", margin=True)


@pytest.mark.parametrize("peer, value, n, alpha", [
    ("C", 2.0, 50, 1.0 / 100.0),
    ("ridge", 3.0, 30, 0.1),
    ("lasso", 0.25, 10, 0.25),
    ("snapml", 4.0, 8, 0.5),
    ("vw", 1e-6, 1000, 1e-6),
])
def test_alpha_conversions(peer, value, n, alpha):
    assert glm.alpha_from_peer(peer, value, n) == pytest.approx(alpha, rel=1e-15)
    assert glm.alpha_to_peer(peer, alpha, n) == pytest.approx(value, rel=1e-15)


def test_alpha_conversion_errors():
    assert glm.PEERS == ("C", "lasso", "ridge", "snapml", "vw")
    with pytest.raises(ValueError, match="peer must be one of"):
        glm.alpha_from_peer("sklearn", 1.0, 10)
    with pytest.raises(ValueError, match="value must be positive"):
        glm.alpha_from_peer("C", 0.0, 10)
    with pytest.raises(ValueError, match="alpha must be positive"):
        glm.alpha_to_peer("C", -1.0, 10)


def test_public_surfaces():
    assert glm.cd.__all__ == sorted(glm.cd.__all__)
    assert len(glm.cd.__all__) == 22 and not any(n.startswith("cd_") for n in glm.cd.__all__)
    assert not any(n.startswith("cd_") or "glm" in n.lower() for n in dir(gmat)
                   if n not in ("cd", "glm")), "gmat's solver steps live in gmat.cd / gmat.glm only"
    for name in glm.__all__:
        assert getattr(glm, name) is not None
