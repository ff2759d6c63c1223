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
    assert len(glm.cd.__all__) == 24 and not any(n.startswith("cd_") for n in glm.cd.__all__)
    assert not any(n.startswith("cd_") or "glm" in n.lower() for n in dir(gmat)
                   if n not in ("cd", "glm")), "gmat's solver steps live in gmat.cd / gmat.glm only"
    for name in glm.__all__:
        assert getattr(glm, name) is not None


# ---------------------------------------------------------------------------------------------
# the one loss table (kernels/_losses.LOSS_TABLE) and what is derived from it


def test_every_loss_list_is_derived_from_the_table():
    from roofline.kernels import LOSS_TABLE

    assert glm.LOSSES == tuple(rec.name for rec in LOSS_TABLE)
    assert glm.LOSS_CODES == {rec.name: rec.code for rec in LOSS_TABLE}
    assert glm.LOSS_ALIASES == {"least_squares": "squared", "linear": "squared",
                                "log": "logistic", "log_loss": "logistic"}
    assert glm.CD_LOSSES == ("squared", "logistic", "hinge") == glm.losses_where(cd=True)
    assert glm.SMOOTH_LOSSES == ("squared", "logistic", "squared_hinge")
    assert glm.newton.SMOOTH_LOSSES == glm.SMOOTH_LOSSES == glm.losses_where(smooth=True)
    assert glm.losses_where(smooth=True, peer="vw") == ("squared", "logistic")
    assert glm.LOSS_LABELS == {"squared": "real", "logistic": "unit", "hinge": "sign",
                               "squared_hinge": "sign"}


def test_peer_loss_names():
    assert glm.loss_to_peer("sklearn", "log") == "log_loss"
    assert glm.loss_to_peer("vw", "linear") == "squared"
    assert glm.loss_to_peer("snapml", "hinge") == "hinge"
    assert glm.loss_from_peer("sklearn", "squared_error") == "squared"
    assert glm.loss_from_peer("vw", "logistic") == "logistic"
    with pytest.raises(ValueError, match="'squared_hinge' loss is not supported here"):
        glm.loss_to_peer("vw", "squared_hinge")
    with pytest.raises(ValueError, match="peer must be one of"):
        glm.loss_to_peer("liblinear", "hinge")
    with pytest.raises(ValueError, match="vw loss must be one of"):
        glm.loss_from_peer("vw", "quantile")


def test_glm_labels_follow_the_label_form():
    y = np.array([-1.0, 1.0, 1.0])
    np.testing.assert_array_equal(glm.glm_labels(y, "log"), [0.0, 1.0, 1.0])
    assert glm.glm_labels(y, "hinge") is y
    assert glm.glm_labels(y, "squared") is y


@pytest.mark.parametrize("loss", glm.GLM_LOSSES)
def test_array_glm_form_matches_the_scalar_one(loss, device):
    """``learners.GLM.loss_deriv`` over numpy / cupy arrays (``glm.loss_deriv``'s numba and
    numba-cuda kernels) against the table's scalar GLM form ``kernels.glm_loss_deriv`` called
    once per entry, for every loss of the table (weights, sums, the extreme margins)."""
    from roofline import kernels as L
    from roofline.learners import GLM

    rng = np.random.default_rng(7)
    m = 400
    eta = np.concatenate([rng.standard_normal(m - 5) * 3, [-700.0, 700.0, 0.0, 1.0, -1.0]])
    form = glm.LOSS_LABELS[loss]
    y = {"real": rng.standard_normal(m), "unit": rng.random(m),
         "sign": (rng.random(m) > 0.5).astype(float)}[form]
    w = rng.random(m) + 0.5
    code = glm.loss_code(loss)
    ref = np.array([L.glm_loss_deriv(code, e, t) for e, t in zip(eta, y, strict=True)])
    model = GLM(loss=loss, dtype="float64")
    xp = np
    if device == "gpu":
        import cupy as xp
    args = (xp.asfortranarray(xp.asarray(eta[None, :])), xp.asarray(y), xp.asarray(w))
    loss_sum, weight_sum, D = model.loss_deriv(*args)
    D = D.get() if device == "gpu" else D
    np.testing.assert_allclose(D[0], w * ref[:, 1], rtol=1e-12, atol=1e-14)
    assert loss_sum == pytest.approx(float(w @ ref[:, 0]), rel=1e-12)
    assert weight_sum == pytest.approx(w.sum(), rel=1e-15)


# library sources that may name losses by code or list them: the table's own file only
_TABLE_FILES = {"kernels/_losses.py"}


def _loss_list_sites(text):
    """The lines of ``text`` that compare a loss with a number, index ``LOSS_CODES`` by a
    literal name, or write two or more loss names in one tuple / list / set literal."""
    import re

    names = "|".join(sorted(set(glm.LOSSES) | set(glm.LOSS_ALIASES), key=len, reverse=True))
    name = rf"""["'](?:{names})["']"""
    patterns = [
        re.compile(r"\bloss\w*\s*(?:==|!=|<=|>=|<|>)\s*\d"),
        re.compile(r"\d\s*(?:==|!=)\s*\w*loss\w*\b"),
        re.compile(r"LOSS_CODES\[\s*[\"']"),
        re.compile(rf"[(\[{{]\s*{name}\s*,\s*{name}"),
    ]
    hits = []
    in_doc = False
    for i, line in enumerate(text.splitlines(), 1):
        code = line.split("#", 1)[0]
        if code.count('"""') % 2 == 1:
            in_doc = not in_doc
            continue
        if in_doc or code.lstrip().startswith(('"""', "``")):
            continue
        if any(p.search(code) for p in patterns):
            hits.append((i, line.strip()))
    return hits


def test_loss_lists_and_codes_only_in_the_table():
    """Every loss list and loss code of the library comes from the one table: no literal code
    comparison (``loss == 2``), no ``LOSS_CODES["hinge"]``, no literal tuple of loss names
    outside ``kernels/_losses.py`` (docstrings and comments aside)."""
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[2]
    found = {}
    for pkg in ("kernels", "gmat", "glm", "learners", "datasources", "comm", "dask_"):
        for path in sorted((root / pkg).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel in _TABLE_FILES:
                continue
            hits = _loss_list_sites(path.read_text())
            if hits:
                found[rel] = hits
    assert _loss_list_sites("if loss == 2:\nx = ('hinge', 'squared_hinge')\n") == [
        (1, "if loss == 2:"), (2, "x = ('hinge', 'squared_hinge')")]  # the scan can fail
    assert not found, f"loss lists or codes outside the loss table: {found}"


def test_loss_deriv_checks_its_arguments():
    eta = np.zeros((1, 3))
    with pytest.raises(ValueError, match="loss must be"):
        glm.loss_deriv(len(glm.LOSSES), eta, eta)
    with pytest.raises(ValueError, match="one shape"):
        glm.loss_deriv("squared", eta, np.zeros((1, 2)))
    with pytest.raises(ValueError, match=r"w has shape \(2,\)"):
        glm.loss_deriv("squared", eta, eta, np.ones(2))
    with pytest.raises(ValueError, match="out has shape"):
        glm.loss_deriv("squared", eta, eta, out=np.zeros((3, 1)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_loss_deriv_in_place_and_dtype(dtype):
    """``out=eta`` overwrites the predictors with the derivatives; the dtype is kept."""
    rng = np.random.default_rng(3)
    eta = np.asfortranarray(rng.standard_normal((2, 50)).astype(dtype))
    y = np.asfortranarray(rng.random((2, 50)).astype(dtype))
    e64, y64 = eta.astype(np.float64), y.astype(np.float64)
    s_ref, w_ref, D_ref = glm.loss_deriv("logistic", eta.copy(), y)
    s, w, D = glm.loss_deriv("logistic", eta, y, out=eta)
    assert D is eta and D.dtype == dtype
    np.testing.assert_array_equal(D, D_ref)
    assert (s, w) == (s_ref, w_ref) and w == 50.0
    rtol = 1e-6 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(D, 1 / (1 + np.exp(-e64)) - y64, rtol=rtol, atol=1e-7)
    assert s == pytest.approx(float((np.logaddexp(0, e64) - y64 * e64).sum()), rel=1e-12)
