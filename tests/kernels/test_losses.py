"""Tests of kernels/_losses.py: the scalar losses against numpy references, their derivatives
against finite differences, their conjugates against a numerical minimisation and the
Fenchel-Young identity, and the two label forms against each other."""

import numpy as np
import pytest

from roofline.kernels import _losses as L

CODES = [rec.code for rec in L.LOSS_TABLE]  # every loss of the table


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
    assert (L.SQUARED, L.LOGISTIC, L.HINGE, L.SQUARED_HINGE) == (0, 1, 2, 3)


def test_loss_table_records_are_consistent():
    """A record per loss, its code its index; names and aliases unique; label forms known."""
    names = [rec.name for rec in L.LOSS_TABLE]
    aliases = [a for rec in L.LOSS_TABLE for a in rec.aliases]
    assert [rec.code for rec in L.LOSS_TABLE] == list(range(len(L.LOSS_TABLE)))
    assert len(set(names + aliases)) == len(names) + len(aliases)
    for rec in L.LOSS_TABLE:
        assert getattr(L, rec.name.upper()) == rec.code  # the named code constant
        assert rec.labels in L.LABEL_FORMS
        assert isinstance(rec.smooth, bool) and isinstance(rec.cd, bool)
        assert set(rec.peers) <= {"sklearn", "snapml", "vw"}
        lo, hi = L.LABEL_FORMS[rec.labels]
        assert (L.LABEL_LO[rec.code], L.LABEL_HI[rec.code]) == (lo, hi)
    assert [r.name for r in L.LOSS_TABLE if r.smooth] == ["squared", "logistic", "squared_hinge"]
    assert [r.name for r in L.LOSS_TABLE if r.cd] == ["squared", "logistic", "hinge"]


@pytest.mark.parametrize("code", CODES)
def test_glm_bad_label_follows_the_label_form(code):
    lo, hi = L.LABEL_FORMS[L.LOSS_TABLE[code].labels]
    for y in (-2.0, -1.0, -0.5, 0.0, 0.25, 1.0, 1.5, 1e300, -1e300):
        assert L.glm_bad_label(code, y) == (not lo <= y <= hi)
    for y in (np.nan, np.inf, -np.inf):
        assert L.glm_bad_label(code, y)


@pytest.mark.parametrize("code", [rec.code for rec in L.LOSS_TABLE if rec.smooth])
def test_margin_derivs_match_value_and_derivatives(code):
    """The dense Newton's one-call form against :func:`margin_loss` / :func:`margin_dloss`."""
    rng = np.random.default_rng(50 + code)
    z = np.concatenate([rng.standard_normal(200) * 3, [-700.0, 700.0, 0.0]])
    y = _labels(rng, code, z.shape[0])
    for zi, yi in zip(z, y, strict=True):
        val, d1, d2 = L.margin_derivs(zi, yi, code)
        assert val == pytest.approx(L.margin_loss(zi, yi, code), rel=1e-13, abs=1e-300)
        assert (d1, d2) == pytest.approx(L.margin_dloss(zi, yi, code), rel=1e-13, abs=1e-300)


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


def _gpu():
    from roofline import gmat

    if not gmat.gpu_available():
        pytest.skip("no CUDA device available")


def _glm_points(rng, code, n=300):
    eta = np.concatenate([rng.standard_normal(n) * 3, [-700.0, 700.0, 0.0, 1.0, -1.0]])
    y01 = (rng.random(eta.shape[0]) > 0.5).astype(float)
    lo, hi = L.LABEL_FORMS[L.LOSS_TABLE[code].labels]
    y = {"real": rng.standard_normal(eta.shape[0]) * 2, "unit": rng.random(eta.shape[0]),
         "sign": 2.0 * y01 - 1.0}[L.LOSS_TABLE[code].labels]
    y[:4] = [np.nan, 2.0, -2.0, 0.5]  # labels some losses cannot take
    return eta, y


@pytest.mark.gpu
@pytest.mark.parametrize("code", CODES)
def test_cuda_c_loss_matches_numba(code):
    """The CUDA C source's ``loss_deriv`` / ``bad_label`` (kernels/_cuda_glm.py) against the
    numba GLM form of the table, for every loss."""
    _gpu()
    import cupy

    from roofline.kernels._cuda_glm import gpu_loss_eval

    eta, y = _glm_points(np.random.default_rng(60 + code), code)
    l, d, bad = (cupy.asnumpy(a) for a in gpu_loss_eval(code, cupy.asarray(eta), cupy.asarray(y)))
    ok = ~np.isnan(y)
    ref = np.array([L.glm_loss_deriv(code, e, t) for e, t in zip(eta[ok], y[ok], strict=True)])
    np.testing.assert_allclose(l[ok], ref[:, 0], rtol=1e-14, atol=1e-300)
    np.testing.assert_allclose(d[ok], ref[:, 1], rtol=1e-14, atol=1e-300)
    np.testing.assert_array_equal(bad, [L.glm_bad_label(code, t) for t in y])


@pytest.mark.gpu
@pytest.mark.parametrize("code", CODES)
def test_numba_scalar_losses_run_in_cuda_device_code(code):
    """The same ``@njit`` scalar functions called from a ``numba.cuda.jit`` kernel give the CPU's
    values (to the last bits of the device's ``exp`` / ``log1p``)."""
    _gpu()
    from numba import cuda

    @cuda.jit
    def evaluate(code, z, y, out):
        i = cuda.grid(1)
        if i < z.shape[0]:
            out[i, 0], out[i, 1] = L.glm_loss_deriv(code, z[i], y[i])
            out[i, 2] = L.margin_loss(z[i], y[i], code)
            out[i, 3], out[i, 4] = L.margin_dloss(z[i], y[i], code)
            out[i, 5] = L.margin_neg_conj(-out[i, 3], y[i], code)
            out[i, 6] = 1.0 if L.glm_bad_label(code, y[i]) else 0.0

    rng = np.random.default_rng(70 + code)
    z = np.concatenate([rng.standard_normal(300) * 3, [-700.0, 700.0, 0.0]])
    y = _labels(rng, code, z.shape[0])
    out = np.zeros((z.shape[0], 7))
    d_out = cuda.to_device(out)
    evaluate[(z.shape[0] + 127) // 128, 128](code, cuda.to_device(z), cuda.to_device(y), d_out)
    got = d_out.copy_to_host()
    ref = np.array([[*L.glm_loss_deriv(code, a, b), L.margin_loss(a, b, code),
                     *L.margin_dloss(a, b, code),
                     L.margin_neg_conj(-L.margin_dloss(a, b, code)[0], b, code),
                     float(L.glm_bad_label(code, b))] for a, b in zip(z, y, strict=True)])
    np.testing.assert_allclose(got, ref, rtol=1e-13, atol=1e-15)
