"""The coordinate-descent kernels (kernels/_cd.py) against numpy/scipy references."""

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import minimize_scalar

from roofline import kernels as K
from tests._helpers import powerlaw_matrix

LOSS = {"squared": 0, "logistic": 1, "hinge": 2}


def _powerlaw(n_rows, n_cols, dtype, seed):
    """Power-law CSC with signed values, the first two columns and the last row empty."""
    return powerlaw_matrix(n_rows, n_cols, 4, dtype=dtype, seed=seed, empty_examples=[0, 1],
                           empty_features=[n_rows - 1], signed=True)


def _loss_np(z, y, loss):
    if loss == 0:
        return 0.5 * (z - y) ** 2
    if loss == 1:
        return np.logaddexp(0, -y * z)
    return np.maximum(0, 1 - y * z)


@pytest.mark.parametrize("shape", [(1, 1), (7, 40), (50, 13)])
def test_matvecs_match_scipy(dtype, shape):
    X = _powerlaw(*shape, dtype, seed=sum(shape))
    rng = np.random.default_rng(0)
    w, a = rng.normal(size=shape[0]), rng.normal(size=shape[1])
    Xd = X.toarray().astype(np.float64)
    none = None  # no column flagged all-ones
    z = K.cd_matvec(X.indptr, X.indices, X.data, none, w, np.empty(shape[1]), 0.5)
    np.testing.assert_allclose(z, Xd.T @ w + 0.5, rtol=1e-12, atol=1e-12)
    zs = K.cd_matvec_serial(X.indptr, X.indices, X.data, none, w, np.empty(shape[1]), 0.5)
    np.testing.assert_array_equal(zs, z)
    u = K.cd_matvec_t(X.indptr, X.indices, X.data, none, a, np.ones(shape[0]))
    np.testing.assert_allclose(u, Xd @ a + 1.0, rtol=1e-12, atol=1e-12)
    cs = K.cd_col_sqnorms(X.indptr, X.data, np.empty(shape[1]))
    np.testing.assert_allclose(cs, (Xd**2).sum(0), rtol=1e-12)


@pytest.mark.parametrize("loss", [0, 1, 2])
def test_loss_grad_and_conjugate(loss):
    rng = np.random.default_rng(loss)
    n = 200
    y = rng.normal(size=n) if loss == 0 else np.where(rng.random(n) < 0.5, 1.0, -1.0)
    z = 3 * rng.normal(size=n)
    assert K.cd_loss_sum(z, y, loss) == pytest.approx(_loss_np(z, y, loss).sum(), rel=1e-12)
    a = np.empty(n)
    g, h = K.cd_grad(z, y, loss, a)
    if loss != 2:  # smooth: compare with finite differences
        eps = 1e-6
        fd = (_loss_np(z + eps, y, loss) - _loss_np(z - eps, y, loss)) / (2 * eps)
        np.testing.assert_allclose(-a, fd, rtol=1e-6, atol=1e-8)
        assert g == pytest.approx(fd.sum(), rel=1e-6, abs=1e-8)
        fd2 = (_loss_np(z + eps, y, loss) - 2 * _loss_np(z, y, loss)
               + _loss_np(z - eps, y, loss)) / eps**2
        assert h == pytest.approx(fd2.sum(), rel=1e-4)
    # Fenchel-Young: -l*(-a) = l(z) + a z at a = -l'(z) (equality), and <= elsewhere
    fy = _loss_np(z, y, loss) + a * z
    np.testing.assert_allclose(
        [K.cd_conj_sum(a[i : i + 1], y[i : i + 1], loss) for i in range(n)], fy, atol=1e-9
    )
    b = a + 0.01 * rng.normal(size=n) * (y if loss else 1)
    if loss:
        b = y * np.clip(b * y, 1e-3, 1 - 1e-3)
    lhs = np.array([K.cd_conj_sum(b[i : i + 1], y[i : i + 1], loss) for i in range(n)])
    assert np.all(lhs <= _loss_np(z, y, loss) + b * z + 1e-12)
    if loss:
        assert K.cd_conj_sum(np.array([-0.5 * y[0]]), y[:1], loss) == -np.inf


@pytest.mark.parametrize("loss", [0, 1])
@pytest.mark.parametrize("l1", [False, True])
def test_primal_coordinate_step(dtype, loss, l1):
    """One step on feature j: squared loss -> the exact 1-D minimiser; logistic -> the Newton
    step from the same gradient/curvature computed in numpy."""
    rng = np.random.default_rng(3)
    n, d, lam_n = 60, 5, 2.0
    Xf = _powerlaw(n, d, dtype, seed=9)  # feature-major: column j = feature j
    Xd = Xf.toarray().astype(np.float64)
    y = rng.normal(size=n) if loss == 0 else np.where(rng.random(n) < 0.5, 1.0, -1.0)
    w = rng.normal(size=d)
    j = int(np.argmax(np.diff(Xf.indptr)))
    z = Xd @ w
    dz = np.zeros(n)
    colsq = (Xd**2).sum(0)
    w2, z2 = w.copy(), z.copy()
    K.cd_primal_epoch(Xf.indptr, Xf.indices, Xf.data, y, w2, z2, dz, np.array([j]), loss, l1,
                      lam_n, 1.0, 1.0, colsq, True)
    x = Xd[:, j]

    def f(t):
        reg = abs(t) if l1 else 0.5 * t * t
        return _loss_np(z + (t - w[j]) * x, y, loss).sum() + lam_n * reg

    if loss == 0:
        ref = minimize_scalar(f, bounds=(w[j] - 50, w[j] + 50), method="bounded",
                              options={"xatol": 1e-12}).x
    else:
        s = 1 / (1 + np.exp(y * z))
        g, h = (x * -y * s).sum(), (x * x * s * (1 - s)).sum()
        if l1:
            t = h * w[j] - g
            ref = np.sign(t) * max(abs(t) - lam_n, 0) / h
        else:
            ref = w[j] - (g + lam_n * w[j]) / (h + lam_n)
    assert w2[j] == pytest.approx(ref, abs=1e-6)
    np.testing.assert_allclose(z2, Xd @ w2, atol=1e-10)
    np.testing.assert_allclose(dz, (w2[j] - w[j]) * x, atol=1e-12)


@pytest.mark.parametrize("loss", [0, 1, 2])
@pytest.mark.parametrize("icpt", [0.0, 1.5])
def test_dual_coordinate_step_maximises(loss, icpt):
    """One SDCA step equals the 1-D maximiser of the dual (scipy bounded search)."""
    rng = np.random.default_rng(5)
    d, n, lam_n = 8, 30, 3.0
    X = _powerlaw(d, n, np.float64, seed=2)
    Xd = X.toarray()
    if icpt:
        Xd = np.vstack([Xd, icpt * np.ones(n)])
    y = rng.normal(size=n) if loss == 0 else np.where(rng.random(n) < 0.5, 1.0, -1.0)
    alpha = np.zeros(n) if loss == 0 else y * rng.uniform(0.05, 0.95, size=n)
    i = int(np.argmax(np.diff(X.indptr)))
    v = Xd @ alpha
    colsq = (X.toarray() ** 2).sum(0)

    def dual(a_i):
        a = alpha.copy()
        a[i] = a_i
        vv = Xd @ a
        return K.cd_conj_sum(a, y, loss) - 0.5 * vv @ vv / lam_n

    a2, v2 = alpha.copy(), v.copy()
    K.cd_dual_epoch(X.indptr, X.indices, X.data, y, a2, v2, np.empty(0), np.array([i]), loss,
                    lam_n, 1.0, 1.0, colsq, icpt, False, np.empty(0), False, None)
    if loss == 0:
        lo, hi = -50, 50
    else:
        lo, hi = sorted([0.0, y[i]])
        lo, hi = lo + 1e-12, hi - 1e-12
    best = minimize_scalar(lambda t: -dual(t), bounds=(lo, hi), method="bounded",
                           options={"xatol": 1e-12})
    assert dual(a2[i]) >= -best.fun - 1e-9
    np.testing.assert_allclose(v2, Xd @ a2, atol=1e-10)


def test_block_stats_and_steps():
    rng = np.random.default_rng(1)
    n, d = 40, 6
    Xf = _powerlaw(n, d, np.float64, seed=4)
    Xd = Xf.toarray()
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    z = rng.normal(size=n)
    feats = np.array([1, 3, 4], dtype=np.int64)
    g, h = np.zeros(3), np.zeros(3)
    K.cd_block_stats(Xf.indptr, Xf.indices, Xf.data, y, z, feats, 1, g, h)
    s = 1 / (1 + np.exp(y * z))
    np.testing.assert_allclose(g, Xd[:, feats].T @ (-y * s), atol=1e-12)
    np.testing.assert_allclose(h, (Xd[:, feats] ** 2).T @ (s * (1 - s)), atol=1e-12)
    w = rng.normal(size=d)
    w0 = w.copy()
    delta = np.empty(3)
    K.cd_block_steps(w, feats, g, h, False, 2.0, delta)
    np.testing.assert_allclose(delta, -(g + 2.0 * w0[feats]) / (h + 2.0))
    z2 = z.copy()
    K.cd_block_apply(Xf.indptr, Xf.indices, Xf.data, z2, feats, delta)
    np.testing.assert_allclose(z2, z + Xd[:, feats] @ delta, atol=1e-12)


def test_greedy_pure_blocks():
    rng = np.random.default_rng(0)
    Xf = sp.random(200, 60, density=0.05, format="csc", random_state=rng)  # feature-major
    blocks, nb = K.cd_greedy_pure_blocks(Xf.indptr, Xf.indices, 200,
                                         np.arange(60, dtype=np.int64), 2)
    assert nb > 0
    assert blocks.max() == nb - 1
    B = np.zeros((nb, 60))
    B[blocks, np.arange(60)] = 1
    per_block = (Xf != 0).astype(float) @ B.T  # examples x blocks: nonzeros per block
    assert per_block.max() <= 1
    _, fail = K.cd_greedy_pure_blocks(Xf.indptr, Xf.indices, 200, np.arange(60, dtype=np.int64),
                                      0)
    assert fail == -1


def _logistic_step_reference(beta, ym, q):
    """The exact maximiser of the logistic dual's one-example problem
    ``H(b) - (b - beta) ym - q (b - beta)^2 / 2`` (``H`` the binary entropy): the root of its
    derivative in ``t = logit(b)``, decreasing in ``t``, bracketed by brentq."""
    from scipy.optimize import brentq
    from scipy.special import expit

    def g(t):
        return -t - ym - q * (expit(t) - beta)

    lo, hi = -ym - q * (1.0 - beta), -ym + q * beta
    if g(lo) <= 0:
        return float(expit(lo))
    if g(hi) >= 0:
        return float(expit(hi))
    return float(expit(brentq(g, lo, hi, xtol=1e-14, rtol=1e-15, maxiter=2000)))


def _logistic_step_objective(b, beta, ym, q):
    from scipy.special import entr

    return float(entr(b) + entr(1.0 - b)) - (b - beta) * ym - 0.5 * q * (b - beta) ** 2


@pytest.mark.parametrize("seed", [0, 1])
def test_logistic_dual_step_is_exact_under_weak_regularisation(seed):
    """One logistic dual step (a one-example, one-feature problem: ``q = 1 / lam_n``) reaches
    the one-dimensional optimum over curvatures ``q`` up to 1e6 (weak regularisation), cold
    (``beta = 0``) and warm starts.  Regression: plain bracketed Newton on the log-odds jumped
    between two points inside the bracket from the sigmoid's flat tails (beta = 0,
    ym = -2.876, q = 3100 gave b = 0.946 for 0.0028)."""
    rng = np.random.default_rng(seed)
    cases = [(0.0, -2.8758465719000825, 3100.0)]
    for _ in range(400):
        beta = [0.0, rng.random(), 1 - 10 ** rng.uniform(-12, -1),
                10 ** rng.uniform(-12, -1)][rng.integers(4)]
        cases.append((beta, rng.normal() * 10 ** rng.uniform(-1, 3), 10 ** rng.uniform(-2, 6)))
    indptr, indices, data = np.array([0, 1]), np.array([0], np.int32), np.array([1.0])
    for beta, ym, q in cases:
        y = rng.choice([-1.0, 1.0])
        lam_n = 1.0 / q
        a, v = np.array([y * beta]), np.array([ym * lam_n * y])  # x^T v / lam_n = y ym
        K.cd_dual_epoch(indptr, indices, data, np.array([y]), a, v, np.empty(0), np.array([0]),
                        LOSS["logistic"], lam_n, 1.0, 1.0, np.array([1.0]), 0.0, False,
                        np.empty(0), False, None)
        b, best = a[0] * y, _logistic_step_reference(beta, ym, q)
        opt = _logistic_step_objective(best, beta, ym, q)
        got = _logistic_step_objective(b, beta, ym, q)
        assert 0.0 <= b <= 1.0
        assert got >= opt - 1e-12 * (1.0 + abs(opt)), (beta, ym, q, b, best)


# -- session 8: the fused check of a dual with an unregularised intercept ---------------------


def _feasible_duals(loss, n, rng):
    """Labels and dual variables in the loss's domain (``y a in [0, 1]`` for the
    classification losses), some zero, of both signs, as strided views (the solver's
    per-example records)."""
    y = rng.normal(size=n) if loss == 0 else np.where(rng.random(n) < 0.3, 1.0, -1.0)
    a = rng.normal(size=n) if loss == 0 else y * rng.uniform(0.0, 1.0, n)
    a[rng.random(n) < 0.1] = 0.0
    rec = np.zeros((n, 8))
    rec[:, 0], rec[:, 1] = a, y
    return rec[:, 0], rec[:, 1]


@pytest.mark.parametrize("loss", [0, 1, 2])
def test_free_parts_is_the_sums_of_its_numpy_passes(loss):
    rng = np.random.default_rng(10 + loss)
    n = 301
    a, y = _feasible_duals(loss, n, rng)
    z0 = 2 * rng.normal(size=n)
    z = z0.copy()
    out = K.cd_free_parts(z, 0.7, -0.3, a, y, loss, np.empty(12))
    zm = z0 * 0.7 - 0.3
    np.testing.assert_allclose(z, zm, rtol=1e-15, atol=1e-15)
    c = np.array([K.cd_conj_sum(a[i : i + 1], y[i : i + 1], loss) for i in range(n)])
    want = [_loss_np(zm, y, loss).sum(), c[a > 0].sum(), c[a < 0].sum(), c[a == 0].sum(),
            a.sum(), a[a > 0].sum(), a[a < 0].sum(), (a * y).min()]
    np.testing.assert_allclose(out[:8], want, rtol=1e-12, atol=1e-12)
    assert out[1] + out[2] + out[3] == pytest.approx(K.cd_conj_sum(a, y, loss), rel=1e-12)
    if loss == 1:  # beta H'(beta) and beta / (1 - beta), by sign of a (H the entropy)
        beta = a * y
        t1 = np.where(beta > 0, beta * (np.log1p(-beta) - np.log(np.maximum(beta, 1e-300))), 0)
        t2 = beta / (1 - beta)
        np.testing.assert_allclose(out[8:], [t1[a > 0].sum(), t2[a > 0].sum(),
                                             t1[a < 0].sum(), t2[a < 0].sum()], rtol=1e-12)
    else:
        assert np.isnan(out[8:]).all()
    if loss:  # an infeasible a_i: -inf, as cd_conj_sum
        a[3] = -0.5 * y[3]
        out = K.cd_free_parts(z0.copy(), 1.0, 0.0, a, y, loss, np.empty(12))
        assert -np.inf in out[1:3] and out[7] < 0


@pytest.mark.parametrize("loss", [0, 1, 2])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_scaled_side_conj_scales_one_side(loss, sign):
    rng = np.random.default_rng(20 + loss)
    n = 257
    a, y = _feasible_duals(loss, n, rng)
    theta = 0.37
    side = a * sign > 0
    a2 = np.where(side, a - theta * a, a)
    want = sum(K.cd_conj_sum(a2[i : i + 1], y[i : i + 1], loss) for i in np.flatnonzero(side))
    idx = np.flatnonzero(rng.random(n) < 0.4)  # any examples: gathered only
    got = np.full(idx.size, np.nan)
    assert K.cd_scaled_side_conj(a, y, loss, theta, sign, idx, False, got) == pytest.approx(
        want, rel=1e-12, abs=1e-12)
    np.testing.assert_array_equal(got, a[idx])
    if loss:  # the side's class in idx (its a_i share the labels' sign): idx alone is read
        idx = np.flatnonzero(y * sign > 0)
        got = np.full(idx.size, np.nan)
        assert K.cd_scaled_side_conj(a, y, loss, theta, sign, idx, True, got) == pytest.approx(
            want, rel=1e-12, abs=1e-12)
        np.testing.assert_array_equal(got, a[idx])
