"""NMF (learners/_nmf.py): kernels against numpy, a planted low-rank factorization recovered,
scikit-learn's objective from the same init, minibatch against full batch, distributed fits,
bad input."""

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.decomposition import NMF as SKNMF
from sklearn.decomposition import MiniBatchNMF as SKMiniBatchNMF

from roofline.comm import run
from roofline.datasources import MatSource
from roofline.learners import Learner, ModelUpdate
from roofline.learners._nmf import (
    NMF,
    MiniBatchNMF,
    NMFModel,
    _auto_sweeps,
    _hals,
    _hals_csc,
    _hals_csc_kernel,
    _hals_csc_kernel_serial,
    _hals_kernel,
    _mu_codes_kernel,
    _transpose_plan,
    beta_divergence,
    nmf_init,
)


def _planted(n_samples=300, n_features=80, r=5, density=None, seed=0, dtype=np.float64):
    """``X = W H`` (rows = samples) with sparse non-negative factors: exactly rank ``r``."""
    rng = np.random.default_rng(seed)
    W = rng.uniform(0, 1, (n_samples, r)) * (rng.uniform(size=(n_samples, r)) < 0.5)
    H = rng.uniform(0, 1, (r, n_features)) * (rng.uniform(size=(r, n_features)) < 0.4)
    W[np.arange(n_samples), rng.integers(0, r, n_samples)] += 0.5  # no empty row
    X = W @ H
    return (sp.csr_matrix(X) if density else X).astype(dtype), W, H


def _sparse_data(m=600, n=150, seed=1, dtype=np.float64):
    rng = np.random.default_rng(seed)
    X = sp.random(m, n, density=0.05, random_state=seed, format="csr", dtype=np.float64)
    X.data = rng.uniform(0.5, 3, X.nnz)
    return X.astype(dtype)


def _custom(m, n, r, seed=3):
    rng = np.random.default_rng(seed)
    return np.abs(rng.normal(size=(m, r))) * 0.3, np.abs(rng.normal(size=(r, n))) * 0.3


# ---------------------------------------------------------------------------------------------
# kernels against numpy


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_hals_kernel_matches_the_row_by_row_numpy_sweep(dtype):
    rng = np.random.default_rng(0)
    r, p = 6, 40
    F = np.asfortranarray(np.abs(rng.normal(size=(r, p))).astype(dtype))
    F[0, :5] = 0
    A = rng.normal(size=(r, 3 * r))
    G = A @ A.T
    B = np.asfortranarray(rng.normal(size=(r, p)).astype(dtype))
    ref = F.astype(np.float64)
    viol_ref = 0.0
    for t in range(r):
        grad = G[t] @ ref + 0.1 * ref[t] - B[t] + 0.2
        pg = np.where(ref[t] == 0, np.minimum(grad, 0), grad)
        viol_ref += np.abs(pg).sum()
        ref[t] = np.maximum(ref[t] - grad / (G[t, t] + 0.1), 0)
    viol = np.empty(p)
    _hals_kernel(F.T, G, B.T, 0.2, 0.1, viol)
    viol = viol.sum()
    tol = 1e-4 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(F, ref, rtol=tol, atol=tol)
    assert viol == pytest.approx(viol_ref, rel=tol)


def _fused_case(dtype, p, seed=20):
    rng = np.random.default_rng(seed)
    n, r = 30, 6
    X = sp.random(n, p, density=0.2, random_state=seed, format="csc", dtype=np.float64)
    X.data = rng.uniform(0.5, 2, X.nnz)
    A = np.asfortranarray(rng.uniform(size=(r, n)).astype(dtype))
    F = np.asfortranarray(rng.uniform(size=(r, p)).astype(dtype))
    F[0, :3] = 0
    F[2, 1] = 5.0  # clipped to 0 by its first update
    G = A.astype(np.float64) @ A.T.astype(np.float64)
    B = np.asfortranarray(A.astype(np.float64) @ X.toarray())
    return X.astype(dtype), A, F, G, B


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("sparse", [True, False])
@pytest.mark.parametrize("p", [5, 203])
@pytest.mark.parametrize("sweeps", [1, 3])
def test_fused_hals_equals_the_product_then_the_sweeps(dtype, sparse, p, sweeps):
    X, A, F0, G, B = _fused_case(dtype, p)
    Xv = X if sparse else np.asfortranarray(X.toarray())
    ref = F0.astype(np.float64, order="F")
    viol_ref = _hals(ref, G, B, 0.2, 0.1)
    for _ in range(sweeps - 1):
        _hals(ref, G, B, 0.2, 0.1)
    tol = 1e-4 if dtype == np.float32 else 1e-12
    F = F0.copy(order="F")
    viol = _hals_csc(F, G, A, Xv, 0.2, 0.1, sweeps, 0.0)
    np.testing.assert_allclose(F, ref, rtol=tol, atol=tol)
    assert viol == pytest.approx(viol_ref, rel=tol)
    # both kernels, several tasks of 16 columns; the product gathered or given (dense data)
    empty = (np.zeros(1, X.indptr.dtype), np.zeros(0, X.indices.dtype), np.zeros(0, dtype))
    for kern in (_hals_csc_kernel, _hals_csc_kernel_serial):
        for csc, BT in (((X.indptr, X.indices, X.data), np.empty((0, 6))),
                        (empty, np.ascontiguousarray(B.T))):
            F = F0.copy(order="F")
            v = np.empty(p)
            cross = np.empty((p, 2))
            kern(F.T, G, A, *csc, 0.2, 0.1, sweeps, 0.0, 16, v, BT, cross,
                 np.empty((0, 6), dtype), 0.0, np.empty((0, 0, 6)))
            np.testing.assert_allclose(F, ref, rtol=tol, atol=tol)
            assert v.sum() == pytest.approx(viol_ref, rel=tol)
            # the objective's cross terms <F, A X> before and after, per column
            np.testing.assert_allclose(cross[:, 0], np.sum(F0 * B, axis=0), rtol=tol)
            np.testing.assert_allclose(cross[:, 1], np.sum(ref * B, axis=0), rtol=tol)


@pytest.mark.parametrize("p", [5, 203])
def test_fused_hals_extrapolates_and_scatters_the_other_sides_product(p):
    from numba import get_num_threads

    X, A, F0, G, B = _fused_case(np.float64, p)
    swept = F0.copy(order="F")
    _hals_csc(swept, G, A, X, 0.2, 0.1, 2, 0.0)
    prev0 = np.asfortranarray(np.random.default_rng(5).uniform(size=F0.shape))
    want = np.maximum(swept + 0.7 * (swept - prev0), 0)
    assert (want == 0).any() and (want != swept).any()
    F, prev = F0.copy(order="F"), prev0.copy(order="F")
    scat = np.zeros((get_num_threads(), X.shape[0], F.shape[0]))
    _hals_csc(F, G, A, X, 0.2, 0.1, 2, 0.0, prev=prev, beta=0.7, scatter=scat)
    np.testing.assert_allclose(F, want, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(prev, swept, rtol=1e-12)
    # the components' right-hand side (F X^T)^T of the written (extrapolated) F
    np.testing.assert_allclose(scat.sum(axis=0), X.toarray() @ want.T, rtol=1e-12)
    # the product given instead of the gather: the same sweep
    F2 = F0.copy(order="F")
    _hals_csc(F2, G, A, None, 0.2, 0.1, 2, 0.0, B=np.asfortranarray(B))
    np.testing.assert_allclose(F2, swept, rtol=1e-12, atol=1e-14)


def test_fused_hals_stops_its_sweeps_by_the_move_rule():
    X, A, F0, G, _ = _fused_case(np.float64, 203)
    runs = {}
    for sweeps, eps in ((2, 0.0), (10, np.inf), (10, 0.0)):
        F = F0.copy(order="F")
        _hals_csc(F, G, A, X, 0.0, 0.0, sweeps, eps)
        runs[sweeps, eps] = F
    # an infinite tolerance stops every block after its second sweep
    np.testing.assert_array_equal(runs[10, np.inf], runs[2, 0.0])
    assert np.abs(runs[10, 0.0] - runs[2, 0.0]).max() > 1e-6


def test_auto_sweeps_is_gillis_and_glineurs_rule():
    # rho = 1 + (nnz + n r) / (p r + p); sweeps = floor(1 + rho / 2)
    assert _auto_sweeps(800_000, 20_000, 50_000, 10, "auto") == 2  # rho 2.82
    assert _auto_sweeps(800_000, 50_000, 20_000, 10, "auto") == 4  # rho 6.91
    assert _auto_sweeps(10, 5, 10_000, 10, "auto") == 1
    assert _auto_sweeps(800_000, 20_000, 50_000, 10, 3) == 3


def test_mu_codes_kernel_matches_numpy():
    rng = np.random.default_rng(1)
    r, m = 5, 30
    H = np.asfortranarray(rng.uniform(size=(r, m)))
    N = np.asfortranarray(rng.uniform(size=(r, m)))
    A = rng.uniform(size=(r, r))
    G = A @ A.T
    ref = H * N / (G @ H + 0.1 + 0.3 * H)
    _mu_codes_kernel(H.T, N.T, G, np.empty(0), 0.1, 0.3, 1e-7)
    np.testing.assert_allclose(H, ref, rtol=1e-12)
    s = rng.uniform(size=r)
    ref = H * N / (s[:, None] + 0.0)
    _mu_codes_kernel(H.T, N.T, np.empty((0, 0)), s, 0.0, 0.0, 1e-7)
    np.testing.assert_allclose(H, ref, rtol=1e-12)


def test_transpose_plan():
    X = _sparse_data().T.tocsc()
    XT, perm = _transpose_plan(X)
    np.testing.assert_array_equal(XT.toarray(), X.toarray().T)
    np.testing.assert_array_equal(XT.data, X.data[perm])


@pytest.mark.parametrize("beta", [2, 1])
@pytest.mark.parametrize("sparse", [True, False])
def test_divergence_matches_the_definition(beta, sparse):
    Xr = _sparse_data(100, 40)
    X = Xr.T.tocsc() if sparse else Xr.toarray().T
    rng = np.random.default_rng(2)
    Wt = np.asfortranarray(rng.uniform(size=(4, 40)))
    H = np.asfortranarray(rng.uniform(size=(4, 100)))
    D = Xr.toarray().T
    V = Wt.T @ H
    if beta == 2:
        ref = 0.5 * ((D - V) ** 2).sum()
    else:
        nz = D > 0
        ref = (D[nz] * np.log(D[nz] / V[nz])).sum() - D.sum() + V.sum()
    assert beta_divergence(X, Wt, H, beta) == pytest.approx(ref, rel=1e-10)


# ---------------------------------------------------------------------------------------------
# planted structure


@pytest.mark.slow
@pytest.mark.parametrize("solver,beta", [("cd", "frobenius"), ("mu", "frobenius"),
                                         ("mu", "kullback-leibler")])
@pytest.mark.parametrize("sparse", [True, False])
def test_planted_low_rank_matrix_is_recovered(solver, beta, sparse):
    X, _, _ = _planted(density=sparse, seed=4)
    est = NMF(5, solver=solver, beta_loss=beta, init="nndsvda", tol=1e-6,
              max_iter=2000 if solver == "mu" else 500, random_state=0)
    W = est.fit_transform(X)
    Xd = X.toarray() if sparse else X
    rel = np.linalg.norm(Xd - W @ est.components_) / np.linalg.norm(Xd)
    assert rel < (0.03 if solver == "cd" else 0.06)
    assert np.all(W >= 0) and np.all(est.components_ >= 0)


# ---------------------------------------------------------------------------------------------
# against scikit-learn from the same init


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("solver,beta", [("cd", "frobenius"), ("mu", "frobenius"),
                                         ("mu", "kullback-leibler")])
@pytest.mark.parametrize("sparse", [True, False])
def test_objective_equals_scikit_learn_from_the_same_init(dtype, solver, beta, sparse):
    Xr = _sparse_data(dtype=dtype)
    X = Xr if sparse else Xr.toarray()
    W0, H0 = _custom(*X.shape, 6)
    kw = dict(init="custom", solver=solver, beta_loss=beta, tol=0, max_iter=60)
    ref = SKNMF(6, **kw)
    Wr = ref.fit_transform(X, W=W0.astype(dtype), H=H0.astype(dtype))
    ours = NMF(6, cd_sweeps=1, **kw)  # scikit-learn's algorithm
    Wo = ours.fit_transform(X, W=W0.astype(dtype), H=H0.astype(dtype))
    # the same updates in the same order: float64 agrees to rounding, float32 to its precision
    rtol = 1e-9 if dtype == np.float64 else 2e-3
    assert ours.reconstruction_err_ == pytest.approx(ref.reconstruction_err_, rel=rtol)
    np.testing.assert_allclose(ours.components_, ref.components_, rtol=100 * rtol,
                               atol=100 * rtol)
    np.testing.assert_allclose(Wo, Wr, rtol=100 * rtol, atol=100 * rtol)
    assert ours.n_iter_ == ref.n_iter_


@pytest.mark.parametrize("solver", ["cd", "mu"])
def test_stopping_rule_and_transform_as_scikit_learn(solver):
    Xr = _sparse_data(seed=5)
    W0, H0 = _custom(*Xr.shape, 4, seed=6)
    kw = dict(init="custom", solver=solver, tol=1e-3, max_iter=500)
    ref = SKNMF(4, **kw).fit(Xr, W=W0.copy(), H=H0.copy())  # it updates W in place
    ours = NMF(4, cd_sweeps=1, **kw).fit(Xr, W=W0, H=H0)
    assert ours.n_iter_ == ref.n_iter_
    assert ours.reconstruction_err_ == pytest.approx(ref.reconstruction_err_, rel=1e-9)
    np.testing.assert_allclose(ours.transform(Xr[:50]), ref.transform(Xr[:50]), rtol=1e-6,
                               atol=1e-8)
    np.testing.assert_allclose(ours.inverse_transform(ours.transform(Xr[:5])),
                               ref.inverse_transform(ref.transform(Xr[:5])), rtol=1e-6,
                               atol=1e-8)


def test_regularised_objective_equals_scikit_learn():
    Xr = _sparse_data(seed=7)
    W0, H0 = _custom(*Xr.shape, 4, seed=8)
    for solver in ("cd", "mu"):
        kw = dict(init="custom", solver=solver, tol=0, max_iter=40, alpha_W=0.01,
                  alpha_H=0.02, l1_ratio=0.3)
        ref = SKNMF(4, **kw).fit(Xr, W=W0.copy(), H=H0.copy())  # it updates W in place
        ours = NMF(4, cd_sweeps=1, **kw).fit(Xr, W=W0, H=H0)
        np.testing.assert_allclose(ours.components_, ref.components_, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("sweeps", [4, "auto"])
@pytest.mark.parametrize("sparse", [True, False])
def test_accelerated_hals_reaches_the_objective_in_fewer_iterations(sweeps, sparse):
    Xr = _sparse_data(2000, 300, seed=9)
    W0, H0 = _custom(*Xr.shape, 8, seed=10)
    ref = SKNMF(8, init="custom", solver="cd", tol=0, max_iter=60).fit(Xr, W=W0.copy(),
                                                                       H=H0.copy())
    model = NMFModel(n_components=8, solver="cd", dtype="float64", cd_sweeps=sweeps)
    model.set_parameters(H0)
    X = Xr.T.tocsc() if sparse else np.asfortranarray(Xr.T.toarray())
    res = model.fit(X, H=np.array(W0.T, order="F"), max_iter=20, tol=0)
    assert np.sqrt(2 * res.divergence) <= ref.reconstruction_err_ * (1 + 1e-3)
    # more progress per product than scikit-learn's single sweep (5 products each)
    out = {}
    for sw in (1, sweeps):
        m5 = NMFModel(n_components=8, solver="cd", dtype="float64", cd_sweeps=sw)
        m5.set_parameters(H0)
        out[sw] = m5.fit(X, H=np.array(W0.T, order="F"), max_iter=5, tol=0).divergence
    assert out[sweeps] < out[1] - 40  # 49458 against 49527


def _first_reaching(model, X, W0, H0, target, max_iter):
    """(first iteration whose objective is at most ``target`` (or None), the fit's result)."""
    hit = []

    def check(it, Wt, H):
        if np.sqrt(2 * beta_divergence(X, Wt, H, 2)) <= target:
            hit.append(it)
            return True
        return False

    res = model.fit(X, H=np.array(W0.T, order="F"), max_iter=max_iter, tol=0, callback=check)
    return (hit[0] if hit else None), res


@pytest.mark.parametrize("sparse", [True, False])
def test_extrapolated_hals_reaches_scikit_learns_objective_in_fewer_iterations(sparse):
    Xr = _sparse_data(2000, 300, seed=9)
    W0, H0 = _custom(*Xr.shape, 8, seed=10)
    ref = SKNMF(8, init="custom", solver="cd", tol=0, max_iter=60).fit(Xr, W=W0.copy(),
                                                                       H=H0.copy())
    target = ref.reconstruction_err_ * (1 + 1e-9)
    X = Xr.T.tocsc() if sparse else np.asfortranarray(Xr.T.toarray())
    its = {}
    for extrapolate in (False, True):
        model = NMFModel(n_components=8, solver="cd", dtype="float64", cd_sweeps=1,
                         cd_extrapolate=extrapolate)
        model.set_parameters(H0)
        its[extrapolate], res = _first_reaching(model, X, W0, H0, target, 80)
        # the divergence from the sweeps' cross terms and the Gram matrices: the returned
        # factors' own (no extra pass over X)
        assert res.divergence == pytest.approx(
            beta_divergence(X, model.components, res.codes, 2), rel=1e-10)
        assert res.trace[0] == pytest.approx(beta_divergence(
            X, np.asfortranarray(H0), np.asfortranarray(W0.T), 2), rel=1e-10)
    # scikit-learn's iterates without extrapolation (60, to rounding); far fewer with it
    assert its[False] is not None and abs(its[False] - 60) <= 1
    assert its[True] is not None and its[True] <= 0.6 * its[False]


def test_extrapolation_restarts_when_the_objective_rises(monkeypatch):
    import roofline.learners._nmf as nmf_mod

    Xr = _sparse_data(800, 200, seed=21)
    X = Xr.T.tocsc()
    W0, H0 = _custom(*Xr.shape, 6, seed=22)
    ref = SKNMF(6, init="custom", solver="cd", tol=0, max_iter=100).fit(Xr, W=W0.copy(),
                                                                        H=H0.copy())
    # an overshooting weight (beta 1.5, growing 30% a step): the steps must be undone
    monkeypatch.setattr(nmf_mod, "EXTRAPOLATION_BETA0", 1.5)
    monkeypatch.setattr(nmf_mod, "EXTRAPOLATION_GAMMA", 1.3)
    monkeypatch.setattr(nmf_mod, "EXTRAPOLATION_GAMMA_BAR", 1.3)
    model = NMFModel(n_components=6, solver="cd", dtype="float64", cd_sweeps=1,
                     cd_extrapolate=True)
    model.set_parameters(H0)
    divs = []
    res = model.fit(X, H=np.array(W0.T, order="F"), max_iter=100, tol=0,
                    callback=lambda it, Wt, H: divs.append(beta_divergence(X, Wt, H, 2)))
    assert np.isfinite(res.divergence)
    assert res.divergence == pytest.approx(divs[-1], rel=1e-10)
    assert np.sqrt(2 * res.divergence) <= ref.reconstruction_err_ * (1 + 1e-6)
    # without the restart rule these weights diverge: the objective rose at some step and
    # was brought back below its earlier best
    rises = [k for k in range(1, len(divs)) if divs[k] > divs[k - 1] * (1 + 1e-12)]
    assert rises and min(divs[rises[0]:]) < divs[rises[0] - 1]


@pytest.mark.parametrize("sparse", [True, False])
def test_nmf_estimator_default_reaches_scikit_learns_objective(sparse):
    X = _sparse_data(seed=15)
    X = X if sparse else X.toarray()
    W0, H0 = _custom(*X.shape, 6, seed=16)
    kw = dict(init="custom", solver="cd", tol=0, max_iter=40)
    ref = SKNMF(6, **kw).fit(X, W=W0.copy(), H=H0.copy())
    ours = NMF(6, **kw).fit(X, W=W0, H=H0)
    assert ours.cd_sweeps == "auto"
    assert ours.reconstruction_err_ <= ref.reconstruction_err_ * (1 + 1e-9)
    with pytest.raises(ValueError, match="cd_sweeps"):
        NMF(6, cd_sweeps=0).fit(X)
    with pytest.raises(ValueError, match="cd_sweeps"):
        NMFModel(n_components=3, cd_sweeps="fast")
    with pytest.raises(ValueError, match="cd_extrapolate"):
        NMFModel(n_components=3, cd_extrapolate="yes")


# ---------------------------------------------------------------------------------------------
# minibatch


@pytest.mark.parametrize("solver,beta", [("mu", "frobenius"), ("cd", "frobenius"),
                                         ("mu", "kullback-leibler")])
def test_minibatch_reaches_the_full_batch_objective(solver, beta):
    X, _, _ = _planted(n_samples=1200, n_features=60, r=4, density=True, seed=11)
    Xn = np.sqrt((X.data ** 2).sum())
    kw = dict(beta_loss=beta, batch_size=200, max_iter=30, tol=0, random_state=0)
    mb = MiniBatchNMF(4, solver=solver, transform_max_iter=30, **kw).fit(X)
    if solver == "cd":
        # online HALS on a planted exact factorization: near the full-batch fit (~0)
        full = NMF(4, solver="cd", init="nndsvda", tol=1e-5, max_iter=500,
                   random_state=0).fit(X)
        assert mb.reconstruction_err_ <= 2 * full.reconstruction_err_ + 0.01 * Xn
    else:
        # multiplicative updates converge slowly: within 3x of as many full-batch iterations
        # as passes (measured: 1.3x Frobenius, 2.8x KL), and at least scikit-learn's
        # MiniBatchNMF (measured: 0.62x and 0.66x of its error)
        full = NMF(4, solver="mu", beta_loss=beta, init="nndsvda", tol=0, max_iter=30,
                   random_state=0).fit(X)
        sk = SKMiniBatchNMF(4, **kw).fit(X)
        assert mb.reconstruction_err_ <= 3 * full.reconstruction_err_
        assert mb.reconstruction_err_ <= sk.reconstruction_err_
        assert mb.reconstruction_err_ <= 0.1 * Xn


@pytest.mark.parametrize("sparse", [False, True])
def test_kept_codes_follow_scikit_learns_minibatch_nmf(sparse):
    # keep_codes with one inner update per minibatch is scikit-learn's MiniBatchNMF
    # (fresh_restarts=False): the same codes and components after two passes
    X = _sparse_data(500, 70, seed=21)
    X = X if sparse else X.toarray()
    W0, H0 = _custom(*X.shape, 4, seed=22)
    sk = SKMiniBatchNMF(4, init="custom", batch_size=100, max_iter=2, tol=0,
                        max_no_improvement=None, forget_factor=0.7)
    W_sk = sk.fit_transform(X, W=W0.copy(), H=H0.copy())
    Xc = X.T.tocsc() if sparse else np.asfortranarray(X.T)
    model = NMFModel(n_components=4, dtype="float64", inner_iter=1, keep_codes=True,
                     rho=0.7 ** (100 / 500))
    model.set_parameters(H0)
    model.codes = np.asfortranarray(W0.T)
    learner = Learner(MatSource(Xc, batch_size=100), model, ModelUpdate(), n_passes=2,
                      progress=False)
    learner.train()
    assert sk.n_steps_ == model._n_steps == 10
    np.testing.assert_allclose(model.components, sk.components_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(model.codes, W_sk.T, rtol=1e-9, atol=1e-12)
    # without kept codes each minibatch starts afresh: a different run
    other = NMFModel(n_components=4, dtype="float64", inner_iter=1, rho=0.7 ** (100 / 500))
    other.set_parameters(H0)
    Learner(MatSource(Xc, batch_size=100), other, ModelUpdate(), n_passes=2,
            progress=False).train()
    assert other.codes is None
    assert not np.allclose(other.components, sk.components_, rtol=1e-3)


def test_kept_codes_grow_with_the_examples_seen():
    X = _sparse_data(250, 40, seed=23).T.tocsc()
    model = NMFModel(n_components=3, dtype="float64", inner_iter=2, keep_codes=True)
    learner = Learner(MatSource(X, batch_size=100), model, ModelUpdate(), n_passes=1,
                      progress=False)
    learner.train()
    assert model.codes.shape == (3, 250) and np.all(model.codes >= 0)
    first = beta_divergence(X, model.components, model.codes, 2)
    learner.train()  # the second pass starts from the kept codes: the objective falls
    assert model.codes.shape == (3, 250)
    assert beta_divergence(X, model.components, model.codes, 2) < first


def test_model_trains_in_a_learner_with_heldout_loss():
    X, _, _ = _planted(n_samples=1000, n_features=50, r=3, density=True, seed=12)
    Xc = X.T.tocsc()
    model = NMFModel(n_components=3, dtype="float64", inner_iter=30, rho=0.8)
    learner = Learner(MatSource(Xc[:, :800], batch_size=100), model, ModelUpdate(),
                      heldout=MatSource(sp.csc_matrix(Xc[:, 800:]), batch_size=100),
                      n_passes=5, eval_every=8, progress=False)
    res = learner.train()
    held = [r["heldout_loss"] for r in res.trace]
    assert held[-1] < 0.2 * held[0]
    est = MiniBatchNMF(3, batch_size=100, random_state=0)
    for s in range(0, 1000, 100):
        est.partial_fit(X[s:s + 100])
    assert est.n_steps_ == 10 and est.components_.shape == (3, 50)
    assert model.flops_per_step(type("B", (), {"X": Xc})()) == 4 * 3 * Xc.nnz
    cost = model.cost(type("B", (), {"X": Xc})())
    assert cost.flops == 4 * 3 * Xc.nnz and cost.bytes > Xc.nnz * 8


# ---------------------------------------------------------------------------------------------
# distributed


def _rank_nmf(comm, solver, beta):
    Xr = _sparse_data(400, 60, seed=13)
    W0, H0 = _custom(*Xr.shape, 4, seed=14)
    part = np.array_split(np.arange(400), comm.size)[comm.rank]
    est = NMF(4, init="custom", solver=solver, beta_loss=beta, tol=0, max_iter=30, comm=comm,
              cd_sweeps=1)
    W = est.fit_transform(Xr[part], W=W0[part], H=H0)
    return est.components_, W, est.reconstruction_err_


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("K", [2, 4])
def test_distributed_fit_equals_single_process(K):
    Xr = _sparse_data(400, 60, seed=13)
    W0, H0 = _custom(*Xr.shape, 4, seed=14)
    for solver, beta in (("cd", "frobenius"), ("mu", "kullback-leibler")):
        ref = NMF(4, init="custom", solver=solver, beta_loss=beta, tol=0, max_iter=30,
                  cd_sweeps=1)
        Wr = ref.fit_transform(Xr, W=W0.copy(), H=H0.copy())
        out = run(_rank_nmf, K, backend="tcp", args=(solver, beta), timeout=60)
        for C, _, err in out:
            np.testing.assert_array_equal(C, out[0][0])
            np.testing.assert_allclose(C, ref.components_, rtol=1e-8, atol=1e-10)
            assert err == pytest.approx(ref.reconstruction_err_, rel=1e-10)
        np.testing.assert_allclose(np.vstack([o[1] for o in out]), Wr, rtol=1e-8, atol=1e-10)


# ---------------------------------------------------------------------------------------------
# bad input


def test_bad_input_gets_clear_errors():
    X = _sparse_data(50, 20)
    neg = X.copy()
    neg.data[3] = -1.0
    with pytest.raises(ValueError, match="X has negative values"):
        NMF(3).fit(neg)
    with pytest.raises(ValueError, match="X has negative values"):
        NMF(3).fit(neg.toarray())
    with pytest.raises(ValueError, match="X has negative values"):
        MiniBatchNMF(3).fit(neg)
    with pytest.raises(ValueError, match="X has negative values"):
        NMF(3, random_state=0).fit(X).transform(neg)
    with pytest.raises(ValueError, match="H has negative"):
        NMF(3, init="custom").fit(X, W=np.ones((50, 3)), H=-np.ones((3, 20)))
    with pytest.raises(ValueError, match="W has shape"):
        NMF(3, init="custom").fit(X, W=np.ones((5, 3)), H=np.ones((3, 20)))
    with pytest.raises(ValueError, match="0 sample"):
        NMF(3).fit(np.empty((0, 4)))
    with pytest.raises(ValueError):
        NMF(3).fit(np.array([["a", "b"]]))
    with pytest.raises(ValueError, match="beta_loss"):
        NMF(3, beta_loss="itakura").fit(X)
    with pytest.raises(ValueError, match="cd"):
        NMF(3, solver="cd", beta_loss="kullback-leibler").fit(X)
    with pytest.raises(ValueError, match="n_components"):
        NMF(0).fit(X)
    with pytest.raises(ValueError, match="init"):
        NMF(3, init="svd").fit(X)
    with pytest.raises(ValueError, match="cd"):
        NMFModel(solver="cd", beta_loss="kullback-leibler")
    model = NMFModel(n_components=3, dtype="float32")
    model.set_parameters(np.ones((3, 20)))
    with pytest.raises(TypeError, match="dtype"):
        model.transform(X.T.tocsc())
    with pytest.raises(ValueError, match="features"):
        model.transform(np.ones((7, 3), np.float32))
    with pytest.raises(ValueError, match="components"):
        model.set_parameters(np.ones((2, 20)))
    with pytest.raises(RuntimeError, match="not initialised"):
        NMFModel().transform(np.ones((3, 3), np.float32))


def test_nndsvd_init_is_non_negative_and_close():
    X, _, _ = _planted(density=True, seed=15)
    Xc = X.T.tocsc()
    for init in ("nndsvd", "nndsvda", "random"):
        Wt, H = nmf_init(Xc, 5, init, rng=0)
        assert Wt.shape == (5, 80) and H.shape == (5, 300)
        assert Wt.min() >= 0 and H.min() >= 0
    Wt, H = nmf_init(Xc, 5, "nndsvd", rng=0)
    rel = np.sqrt(2 * beta_divergence(Xc, Wt, H, 2)) / np.sqrt((X.data ** 2).sum())
    assert rel < 0.6  # a rough start, much better than zero


@pytest.mark.slow
def test_scikit_learn_estimator_checks():
    from sklearn.utils.estimator_checks import check_estimator

    for est in (NMF(2, max_iter=1000, tol=1e-6, random_state=0),
                MiniBatchNMF(2, max_iter=3, batch_size=20, random_state=0)):
        res = check_estimator(est, on_fail=None)
        failed = [(r["check_name"], str(r["exception"])[:200]) for r in res
                  if r["status"] == "failed"]
        assert failed == [], failed
