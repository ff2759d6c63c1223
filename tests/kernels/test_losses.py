"""Tests of kernels/_losses.py: the scalar losses against numpy references, their derivatives
against finite differences, their conjugates against a numerical minimisation and the
Fenchel-Young identity, and the two label forms against each other."""

import numpy as np
import pytest

from roofline.kernels import _losses as L

CODES = [L.SQUARED, L.LOGISTIC, L.HINGE, L.SQUARED_HINGE]


def _margin_np(z, y, code):
    """numpy reference of the margin form."""
    if code == L.SQUARED:
        return 0.5 * (z - y) ** 2
    if code == L.LOGISTIC:
        return np.logaddexp(0.0, -y * z)
    m = np.maximum(0.0, 1.0 - y * z)
    return m if code == L.HINGE else m * m


def _glm_np(eta, y, code):
    """numpy reference of the GLM form (labels {0, 1}; logistic any y in [0, 1])."""
    if code == L.SQUARED:
        return 0.5 * (eta - y) ** 2
    if code == L.LOGISTIC:
        return np.logaddexp(0.0, eta) - y * eta
    s = np.where(y > 0, 1.0, -1.0)
    m = np.maximum(0.0, 1.0 - s * eta)
    return m if code == L.HINGE else m * m


def _labels(rng, code, n):
    if code == L.SQUARED:
        return rng.standard_normal(n)
    return np.where(rng.random(n) > 0.5, 1.0, -1.0)


def test_code_table():
    assert L.LOSS_CODES == {"squared": 0, "logistic": 1, "hinge": 2, "squared_hinge": 3}
    assert sorted(L.LOSS_CODES.values()) == list(range(len(L.LOSS_CODES)))


@pytest.mark.parametrize("code", CODES)
def test_margin_value_matches_numpy(code):
    rng = np.random.default_rng(code)
    z = np.concatenate([rng.standard_normal(200) * 3, [-800.0, 800.0, 0.0, 1.0, -1.0]])
    y = _labels(rng, code, z.shape[0])
    got = np.array([L.margin_loss(a, b, code) for a, b in zip(z, y, strict=True)])
    np.testing.assert_allclose(got, _margin_np(z, y, code), rtol=1e-13, atol=1e-300)
    assert np.all(np.isfinite(got))


@pytest.mark.parametrize("code", CODES)
def test_margin_derivatives_match_finite_differences(code):
    rng = np.random.default_rng(10 + code)
    z = rng.standard_normal(100) * 2
    y = _labels(rng, code, 100)
    if code in (L.HINGE, L.SQUARED_HINGE):  # away from the kink y z = 1
        keep = np.abs(1.0 - y * z) > 1e-3
        z, y = z[keep], y[keep]
    h = 1e-6
    for zi, yi in zip(z, y, strict=True):
        d1, d2 = L.margin_dloss(zi, yi, code)
        fd1 = (L.margin_loss(zi + h, yi, code) - L.margin_loss(zi - h, yi, code)) / (2 * h)
        fd2 = (L.margin_dloss(zi + h, yi, code)[0] - L.margin_dloss(zi - h, yi, code)[0]) / (2 * h)
        assert d1 == pytest.approx(fd1, rel=1e-6, abs=1e-8)
        if code != L.HINGE:  # the hinge's curvature is 0 by convention (and so is its FD)
            assert d2 == pytest.approx(fd2, rel=1e-5, abs=1e-7)
        else:
            assert d2 == 0.0


@pytest.mark.parametrize("code", CODES)
def test_fenchel_young_identity_at_the_dual_point(code):
    """``-l*(-a) = l(z) + a z`` at ``a = -l'(z)`` (equality in Fenchel-Young)."""
    rng = np.random.default_rng(20 + code)
    z = rng.standard_normal(100) * 2
    y = _labels(rng, code, 100)
    for zi, yi in zip(z, y, strict=True):
        a = -L.margin_dloss(zi, yi, code)[0]
        lhs = L.margin_neg_conj(a, yi, code)
        rhs = L.margin_loss(zi, yi, code) + a * zi
        assert lhs == pytest.approx(rhs, rel=1e-10, abs=1e-10)


@pytest.mark.parametrize("code", CODES)
def test_conjugate_matches_numerical_minimisation(code):
    """``-l*(-a) = min_z l(z) + a z`` (so ``<=`` at every ``z``: Fenchel's inequality), over a
    fine grid of ``z``, for feasible ``a``; ``-inf`` outside the domain."""
    rng = np.random.default_rng(30 + code)
    zs = np.linspace(-40.0, 40.0, 400_001)
    for _ in range(8):
        y = float(_labels(rng, code, 1)[0])
        if code == L.SQUARED:
            a = float(rng.standard_normal())
        elif code == L.SQUARED_HINGE:
            a = y * float(rng.uniform(0.0, 3.0))
        else:
            a = y * float(rng.uniform(0.02, 0.98))
        vals = _margin_np(zs, y, code) + a * zs
        got = L.margin_neg_conj(a, y, code)
        assert got <= vals.min() + 1e-12
        assert got == pytest.approx(vals.min(), abs=1e-6)
    if code != L.SQUARED:
        assert L.margin_neg_conj(-0.5, 1.0, code) == -np.inf
    if code in (L.LOGISTIC, L.HINGE):
        assert L.margin_neg_conj(1.5, 1.0, code) == -np.inf


@pytest.mark.parametrize("code", CODES)
def test_glm_form_matches_numpy_and_the_margin_form(code):
    rng = np.random.default_rng(40 + code)
    eta = np.concatenate([rng.standard_normal(200) * 3, [-700.0, 700.0, 0.0]])
    y01 = (rng.random(eta.shape[0]) > 0.5).astype(float)
    y = rng.standard_normal(eta.shape[0]) if code == L.SQUARED else y01
    out = np.array([L.glm_loss_deriv(code, e, t) for e, t in zip(eta, y, strict=True)])
    # the GLM logistic form cancels (log1p(e^eta) - y eta): absolute accuracy ~1e-16 |eta|
    np.testing.assert_allclose(out[:, 0], _glm_np(eta, y, code), rtol=1e-12, atol=1e-12)
    # the same loss as the margin form with labels 2 y - 1 (the squared loss: the same y)
    ym = y if code == L.SQUARED else 2.0 * y01 - 1.0
    marg = np.array([[L.margin_loss(e, t, code), L.margin_dloss(e, t, code)[0]]
                     for e, t in zip(eta, ym, strict=True)])
    np.testing.assert_allclose(out, marg, rtol=1e-10, atol=1e-12)


def test_glm_logistic_takes_soft_labels():
    for y in (0.0, 0.25, 0.5, 1.0):
        for eta in (-3.0, 0.0, 2.0):
            val, d = L.glm_loss_deriv(L.LOGISTIC, eta, y)
            assert val == pytest.approx(np.logaddexp(0.0, eta) - y * eta, rel=1e-13)
            assert d == pytest.approx(1.0 / (1.0 + np.exp(-eta)) - y, rel=1e-13, abs=1e-15)


def test_sigmoid_and_log1pexp_do_not_overflow():
    for t in (-1000.0, -30.0, 0.0, 30.0, 1000.0):
        assert L.sigmoid(t) == pytest.approx(0.5 * (1.0 + np.tanh(t / 2)), abs=1e-15)
        assert L.log1pexp(t) == pytest.approx(np.logaddexp(0.0, t), rel=1e-15)
