"""Matrix factorization (learners/_mf.py) and its ALS kernels (kernels/_als.py): against dense
numpy solves of the same normal equations, ``implicit``'s ALS, planted low-rank data, the
minibatch solvers, and the distributed fit."""

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone

from roofline import comm as rcomm
from roofline import gmat as kernels  # the ALS kernels, re-exported by gmat
from roofline.datasources import MatSource
from roofline.learners import SGD, ADAGrad, Learner
from roofline.learners._mf import MatrixFactorization, MFModel, als_objective

TOL = {np.float64: 1e-9, np.float32: 2e-3}


def planted(n_users=1500, n_items=400, rank=4, nnz=40_000, noise=0.1, seed=0, min_user=3):
    """Ratings ``3 + b_u + c_i + u.v + noise`` at power-law (Zipf 0.8) users and items, every
    user with at least ``min_user`` ratings and every item with at least 3; returns the users x
    items CSR."""
    rng = np.random.default_rng(seed)
    pu = 1.0 / np.arange(1, n_users + 1) ** 0.8
    pi = 1.0 / np.arange(1, n_items + 1) ** 0.8
    u = np.concatenate([rng.choice(n_users, nnz, p=pu / pu.sum()),
                        np.repeat(np.arange(n_users), min_user)])
    i = np.concatenate([rng.choice(n_items, nnz, p=pi / pi.sum()),
                        rng.integers(0, n_items, min_user * n_users)])
    i[:n_items * 3] = np.repeat(np.arange(n_items), 3)  # every item at least 3 times
    key = np.unique(u * n_items + i)
    u, i = key // n_items, key % n_items
    U = rng.normal(size=(n_users, rank)) / np.sqrt(rank)
    V = rng.normal(size=(n_items, rank))
    bu, bi = 0.3 * rng.normal(size=n_users), 0.3 * rng.normal(size=n_items)
    r = 3.0 + bu[u] + bi[i] + np.einsum("ij,ij->i", U[u], V[i]) + noise * rng.normal(size=u.size)
    return sp.csr_matrix((r, (u, i)), shape=(n_users, n_items)), rng


def split(X, frac, rng):
    """Train/test CSR matrices: ``frac`` of the entries held out (none of a user's last 2)."""
    coo = X.tocoo()
    test = rng.random(coo.nnz) < frac
    cnt = np.bincount(coo.row[~test], minlength=X.shape[0])
    test &= cnt[coo.row] >= 2
    mk = lambda m: sp.csr_matrix((coo.data[m], (coo.row[m], coo.col[m])), shape=X.shape)  # noqa
    return mk(~test), mk(test)


def small(seed=1, n_users=30, n_items=20, density=0.3, implicit=False):
    rng = np.random.default_rng(seed)
    M = sp.random(n_users, n_items, density=density, random_state=seed, format="csr")
    M.data = (rng.integers(1, 6, M.nnz) if not implicit else rng.integers(1, 4, M.nnz)) * 1.0
    return M


# ---------------------------------------------------------------------------------------------
# kernels against dense numpy solves


def _kernel_problem(seed, n_other, n_self, density, high, k, n_chunks, scale=1.0,
                    dtype=np.float64):
    """A random CSC matrix ``S`` (``n_other x n_self``, integer values in ``[1, high)``), the
    other side's factors ``D`` (``k x n_other``, Fortran order), row chunks, and the generator
    (for further draws)."""
    rng = np.random.default_rng(seed)
    S = sp.random(n_other, n_self, density=density, random_state=seed + 1, format="csc",
                  dtype=dtype)
    S.data[:] = rng.integers(1, high, S.nnz)
    D = np.asfortranarray(rng.normal(scale=scale, size=(k, n_other)).astype(dtype))
    return rng, S, D, kernels.als_row_chunks(S.indptr, 1.0, n_chunks)


def _ref_rows(S, D, bias, mu, lam, weighted, implicit=False, alpha=1.0):
    """Row solves of the kernels' systems by numpy (S: other x self CSC, D: k x n_other)."""
    k, n_self = D.shape[0], S.shape[1]
    Z = np.zeros((k, n_self))
    YtY = D @ D.T if implicit else None
    for j in range(n_self):
        idx = S.indices[S.indptr[j]:S.indptr[j + 1]]
        val = S.data[S.indptr[j]:S.indptr[j + 1]].astype(np.float64)
        n = idx.size
        reg = lam * n if weighted else lam
        if implicit:
            Dj = D[:, idx]
            c = 1.0 + alpha * val
            A = YtY + (Dj * (c - 1.0)) @ Dj.T + reg * np.eye(k)
            Z[:, j] = np.linalg.solve(A, Dj @ c)
            continue
        if n == 0:
            continue
        if bias:
            Dj = np.vstack([D[:-1, idx], np.ones(n)])
            t = val - mu - D[-1, idx]
        else:
            Dj, t = D[:, idx], val - mu
        Z[:, j] = np.linalg.solve(Dj @ Dj.T + reg * np.eye(k), Dj @ t)
    return Z


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("bias,weighted", [(True, True), (False, True), (False, False)])
def test_explicit_kernel_matches_numpy(dtype, bias, weighted):
    k = 5
    _, S, D, bounds = _kernel_problem(2, 25, 40, 0.25, 6, k, 3, dtype=dtype)
    Z = np.full((k, 40), np.nan, dtype=dtype, order="F")
    kernels.als_explicit(S.indptr, S.indices, S.data, D, bias, 2.5, 0.3, weighted, bounds, Z)
    ref = _ref_rows(S, D.astype(np.float64), bias, 2.5, 0.3, weighted)
    np.testing.assert_allclose(Z, ref, rtol=TOL[dtype], atol=TOL[dtype])
    assert np.all(Z[:, np.diff(S.indptr) == 0] == 0)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("bias", [True, False])
def test_explicit_kernel_rows_shorter_than_k(dtype, bias):
    # rows of 1..12 nonzeros with k = 8 unknowns: the dual (n x n) solve for n < k
    rng = np.random.default_rng(14)
    n_other, n_self, k = 30, 24, 8
    cols = [np.sort(rng.choice(n_other, j % 12 + 1, replace=False)) for j in range(n_self)]
    indptr = np.r_[0, np.cumsum([c.size for c in cols])]
    S = sp.csc_matrix((rng.integers(1, 6, indptr[-1]).astype(dtype), np.concatenate(cols),
                       indptr), shape=(n_other, n_self))
    D = np.asfortranarray(rng.normal(size=(k, n_other)).astype(dtype))
    Z = np.full((k, n_self), np.nan, dtype=dtype, order="F")
    kernels.als_explicit(S.indptr, S.indices, S.data, D, bias, 3.0, 0.2, True,
                         kernels.als_row_chunks(S.indptr, 1.0, 3), Z)
    ref = _ref_rows(S, D.astype(np.float64), bias, 3.0, 0.2, True)
    np.testing.assert_allclose(Z, ref, rtol=10 * TOL[dtype], atol=10 * TOL[dtype])


@pytest.mark.parametrize("bias", [True, False])
def test_explicit_cg_kernel_converges_to_the_solve(bias):
    k = 5
    rng, S, D, bounds = _kernel_problem(12, 25, 40, 0.3, 6, k, 3)
    ref = _ref_rows(S, D, bias, 2.5, 0.3, True)
    Z = np.asfortranarray(rng.normal(size=(k, 40)))
    kernels.als_explicit_cg(S.indptr, S.indices, S.data, D, bias, 2.5, 0.3, True, 3 * k, bounds,
                            Z)
    np.testing.assert_allclose(Z, ref, rtol=1e-7, atol=1e-8)
    # three steps from the solution stay there
    kernels.als_explicit_cg(S.indptr, S.indices, S.data, D, bias, 2.5, 0.3, True, 3, bounds, Z)
    np.testing.assert_allclose(Z, ref, rtol=1e-7, atol=1e-8)


def test_explicit_als_with_cg_reaches_the_cholesky_objective():
    X, _ = planted(n_users=600, n_items=200, nnz=15_000, seed=2)
    chol = MatrixFactorization(factors=4, regularization=0.05, iterations=15,
                               dtype="float64").fit(X)
    cg = MatrixFactorization(factors=4, regularization=0.05, iterations=15, use_cg=True,
                             dtype="float64").fit(X)
    assert cg.objective_ <= 1.01 * chol.objective_, (cg.objective_, chol.objective_)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_implicit_kernels_match_numpy(dtype):
    k = 6
    rng, S, D, bounds = _kernel_problem(4, 30, 50, 0.2, 4, k, 4, scale=0.5, dtype=dtype)
    YtY = D @ D.T
    ref = _ref_rows(S, D.astype(np.float64), False, 0.0, 0.2, False, True, 2.0)
    X = np.zeros((k, 50), dtype=dtype, order="F")
    kernels.als_implicit_cholesky(S.indptr, S.indices, S.data, D, YtY, 2.0, 0.2, False, bounds, X)
    np.testing.assert_allclose(X, ref, rtol=10 * TOL[dtype], atol=10 * TOL[dtype])
    # CG with as many steps as unknowns is exact (up to rounding), from any start
    X = np.asfortranarray(rng.normal(size=(k, 50)).astype(dtype))
    kernels.als_implicit_cg(S.indptr, S.indices, S.data, D, YtY, 2.0, 0.2, False, 3 * k, bounds,
                            X)
    np.testing.assert_allclose(X, ref, rtol=1e-6 if dtype == np.float64 else 1e-2,
                               atol=1e-6 if dtype == np.float64 else 1e-2)


@pytest.mark.parametrize("implicit", [False, True])
def test_normal_equations_then_solve_equals_fused(implicit):
    k = 5
    _, S, D, bounds = _kernel_problem(6, 30, 45, 0.2, 5, k, 4)
    A = np.empty((45, k, k))
    B = np.empty((45, k))
    counts = np.empty(45)
    bias = not implicit
    kernels.als_normal_equations(S.indptr, S.indices, S.data, D, bias, 1.5, implicit, 1.0,
                                 bounds, A, B, counts)
    np.testing.assert_array_equal(counts, np.diff(S.indptr))
    base = D @ D.T if implicit else np.zeros((k, k))
    X = np.zeros((k, 45), order="F")
    kernels.als_solve_systems(A, B, counts, base, 0.4, True, 0, bounds, X)
    ref = np.zeros((k, 45), order="F")
    if implicit:
        kernels.als_implicit_cholesky(S.indptr, S.indices, S.data, D, base, 1.0, 0.4, True,
                                      bounds, ref)
    else:
        kernels.als_explicit(S.indptr, S.indices, S.data, D, True, 1.5, 0.4, True, bounds, ref)
    np.testing.assert_allclose(X, ref, rtol=1e-10, atol=1e-12)


def test_row_chunks_cover_rows_in_order():
    indptr = np.cumsum(np.r_[0, np.random.default_rng(0).zipf(1.5, 200).clip(0, 500)])
    b = kernels.als_row_chunks(indptr, 3.0, 7)
    assert b[0] == 0 and b[-1] == 200 and np.all(np.diff(b) >= 0)


# ---------------------------------------------------------------------------------------------
# ALS against a numpy ALS (the documented start, the same normal equations)


def _numpy_als(X, k, lam, iters, *, implicit, alpha=1.0, weighted, biases, seed, scale):
    """Dense-solve ALS of the module docstring's objective (users first)."""
    S = sp.csc_matrix((X.data, X.indices, X.indptr), shape=(X.shape[1], X.shape[0]))
    St = X.tocsc()  # users x items
    rng = np.random.default_rng(seed)
    kk = k + int(biases)
    Zi = np.zeros((kk, X.shape[1]))
    Zi[:k] = rng.normal(0.0, scale, (k, X.shape[1]))
    if implicit:
        Zi[:k] = np.abs(Zi[:k])
    mu = X.data.mean() if biases else 0.0
    for _ in range(iters):
        Zu = _ref_rows(S, Zi, biases, mu, lam, weighted, implicit, alpha)
        Zi = _ref_rows(St, Zu, biases, mu, lam, weighted, implicit, alpha)
    return Zi, Zu, mu


@pytest.mark.parametrize("implicit", [False, True])
def test_als_equals_dense_reference(implicit):
    X = small(implicit=implicit)
    kw = dict(factors=3, regularization=0.2, iterations=4, dtype="float64", random_state=5,
              init_scale=0.3, implicit=implicit, alpha=2.0, use_cg=False)
    m = MatrixFactorization(**kw).fit(X)
    Zi, Zu, mu = _numpy_als(X, 3, 0.2, 4, implicit=implicit, alpha=2.0,
                            weighted=not implicit, biases=not implicit, seed=5, scale=0.3)
    np.testing.assert_allclose(m._Zi, Zi, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(m._Zu, Zu, rtol=1e-8, atol=1e-10)
    ref = als_objective(sp.csc_matrix((X.data, X.indices, X.indptr), shape=X.shape[::-1]), Zi,
                        Zu, regularization=0.2, implicit=implicit, alpha=2.0,
                        reg_weighting="none" if implicit else "counts", mu=mu,
                        biases=not implicit)
    assert abs(m.objective_ - ref) <= 1e-8 * abs(ref)


@pytest.mark.parametrize("implicit,use_cg", [(True, True), (True, False), (False, True),
                                             (False, False)])
def test_kernels_are_loaded_before_the_timed_iterations(monkeypatch, implicit, use_cg):
    """fit calls each half-step's kernel once on no rows (empty chunk bounds), with the
    iterations' argument types, before the first timed iteration (numba's cache load and the
    thread pool's start are set-up), and that call changes nothing."""
    import roofline.learners._mf as mf

    names = {(True, True): "als_implicit_cg", (True, False): "als_implicit_cholesky",
             (False, True): "als_explicit_cg", (False, False): "als_explicit"}
    name = names[(implicit, use_cg)]
    real = getattr(mf.gmat, name)
    calls = []

    def recorder(*args):
        bounds, out = args[-2], args[-1]
        calls.append((bounds[-1] - bounds[0], out.shape[1], out.copy()))
        return real(*args)

    monkeypatch.setattr(mf.gmat, name, recorder)
    X = small(implicit=implicit)
    kw = dict(factors=3, regularization=0.2, iterations=2, dtype="float64", random_state=5,
              init_scale=0.3, implicit=implicit, use_cg=use_cg)
    m = MatrixFactorization(**kw).fit(X)
    # two warm calls (users, items: no rows each), then two half-steps per iteration
    assert [c[0] for c in calls] == [0, 0, 30, 20, 30, 20]
    assert [c[1] for c in calls] == [30, 20, 30, 20, 30, 20]
    assert np.all(calls[0][2] == 0) and np.all(calls[2][2] == 0)  # users untouched till then
    np.testing.assert_array_equal(calls[1][2], calls[3][2])  # items: the start, unchanged
    monkeypatch.undo()
    np.testing.assert_array_equal(m._Zi, MatrixFactorization(**kw).fit(X)._Zi)


@pytest.mark.parametrize("implicit", [False, True])
def test_objective_equals_dense_formula(implicit):
    X = small(seed=3, implicit=implicit)
    m = MatrixFactorization(factors=3, regularization=0.3, iterations=2, dtype="float64",
                            implicit=implicit, alpha=1.5).fit(X)
    R = X.toarray()
    P = m.user_factors_ @ m.item_factors_.T
    nu, ni = np.diff(X.indptr), np.diff(X.tocsc().indptr)
    if implicit:
        C = 1.0 + 1.5 * R
        ref = np.sum(C * ((R > 0) - P) ** 2) + 0.3 * (np.sum(m.user_factors_ ** 2)
                                                     + np.sum(m.item_factors_ ** 2))
    else:
        P = P + m.global_mean_ + m.user_bias_[:, None] + m.item_bias_[None, :]
        ref = np.sum(((R - P) * (R != 0)) ** 2) + 0.3 * (
            nu @ (np.sum(m.user_factors_ ** 2, axis=1) + m.user_bias_ ** 2)
            + ni @ (np.sum(m.item_factors_ ** 2, axis=1) + m.item_bias_ ** 2))
    assert abs(m.objective() - ref) <= 1e-10 * abs(ref)


def test_als_objective_decreases_monotonically():
    X, _ = planted(n_users=300, n_items=100, nnz=6000)
    seen = []
    m = MatrixFactorization(factors=4, regularization=0.05, iterations=8, dtype="float64")
    m.fit(X, callback=lambda it, s: seen.append(m.objective()))
    assert all(b <= a * (1 + 1e-12) for a, b in zip(seen, seen[1:], strict=False))


# ---------------------------------------------------------------------------------------------
# planted structure and peers


def test_planted_low_rank_recovered():
    X, rng = planted(nnz=60_000, min_user=12)
    tr, te = split(X, 0.1, rng)
    m = MatrixFactorization(factors=4, regularization=0.005, iterations=15, dtype="float64")
    m.fit(tr)
    rmse = -m.score(te)
    # noise 0.1: the held-out RMSE is within 25% of the noise level (users have 14 to 390
    # training ratings for 5 unknowns each; a model with biases only scores ~1.0 here)
    assert rmse < 0.125, rmse
    bias_only = MatrixFactorization(factors=1, regularization=1e3, iterations=5,
                                    dtype="float64").fit(tr)
    assert -bias_only.score(te) > 3 * rmse


def test_implicit_objective_matches_implicit_library():
    pytest.importorskip("implicit")
    from implicit.cpu.als import AlternatingLeastSquares
    from threadpoolctl import threadpool_limits

    X, _ = planted(n_users=800, n_items=300, nnz=15_000, seed=4)
    X.data = np.ceil(np.abs(X.data))  # interaction counts
    lam, alpha, k, iters = 0.1, 2.0, 8, 15
    ours = MatrixFactorization(factors=k, regularization=lam, implicit=True, alpha=alpha,
                               iterations=iters, dtype="float64").fit(X)
    C = X.copy()
    C.data = 1.0 + alpha * C.data  # implicit's confidence is its data times its alpha
    with threadpool_limits(1, "blas"):
        peer = AlternatingLeastSquares(factors=k, regularization=lam, alpha=1.0,
                                       iterations=iters, random_state=0, dtype=np.float64)
        peer.fit(C.astype(np.float32), show_progress=False)
    S = sp.csc_matrix((X.data, X.indices, X.indptr), shape=X.shape[::-1])
    f_peer = als_objective(S, np.asarray(peer.item_factors).T, np.asarray(peer.user_factors).T,
                           regularization=lam, implicit=True, alpha=alpha,
                           reg_weighting="none")
    # two local minima from different random starts, after the same 15 CG iterations
    assert abs(ours.objective_ - f_peer) <= 0.01 * f_peer, (ours.objective_, f_peer)


@pytest.mark.parametrize("solver,lr", [("adagrad", 0.1), ("sgd", 4.0)])
def test_minibatch_reaches_als_objective(solver, lr):
    X, _ = planted(n_users=600, n_items=200, nnz=15_000, seed=2)
    als = MatrixFactorization(factors=4, regularization=0.05, iterations=15,
                              dtype="float64").fit(X)
    mb = MatrixFactorization(factors=4, regularization=0.05, solver=solver, learning_rate=lr,
                             iterations=30, batch_size=50, dtype="float64").fit(X)
    # stated: within 10% of ALS's objective (the user factors folded in at the end)
    assert mb.objective_ <= 1.10 * als.objective_, (mb.objective_, als.objective_)


def test_partial_fit_improves():
    X, _ = planted(n_users=400, n_items=150, nnz=8000, seed=3)
    m = MatrixFactorization(factors=4, regularization=0.05, solver="adagrad",
                            learning_rate=0.1, batch_size=50, dtype="float64")
    f = [m.partial_fit(X).objective_ for _ in range(4)]
    assert f[-1] < 0.8 * f[0]
    assert m.n_iter_ == 4
    with pytest.raises(ValueError, match="items"):
        m.partial_fit(X[:, :100])


def test_mfmodel_gradient_is_the_derivative_of_the_loss():
    X, _ = planted(n_users=40, n_items=30, nnz=400, seed=5)
    S = sp.csc_matrix((X.data, X.indices, X.indptr), shape=X.shape[::-1])
    model = MFModel(factors=3, regularization=0.1, dtype="float64", global_mean=3.0,
                    fit_mean=False)
    model.init(30)
    model.coef[3] = np.random.default_rng(0).normal(scale=0.1, size=30)
    batch = next(iter(MatSource(S, batch_size=40)))
    loss, w, G, g0, _ = model.gradient(batch)
    assert w == S.nnz and g0.shape == (1,) and not g0.any()
    assert abs(loss - model.loss(batch)[0]) < 1e-10 * loss
    rng = np.random.default_rng(1)
    for _ in range(5):
        a, i = rng.integers(0, 4), rng.integers(0, 30)
        h = 1e-6
        model.coef[a, i] += h
        up = model.loss(batch)[0]
        model.coef[a, i] -= 2 * h
        down = model.loss(batch)[0]
        model.coef[a, i] += h
        assert abs((up - down) / (2 * h) - G[a, i]) <= 1e-5 * (1 + abs(G[a, i]))


def test_mfmodel_trains_in_a_learner():
    X, _ = planted(n_users=500, n_items=150, nnz=10_000, seed=6)
    S = sp.csc_matrix((X.data, X.indices, X.indptr), shape=X.shape[::-1])
    model = MFModel(factors=4, regularization=0.05, dtype="float64")
    L = Learner(MatSource(S, batch_size=50), model, ADAGrad(lr=0.1, fused=False), n_passes=5,
                progress=False, holdout_every=5)
    L.train()
    # mu: the running mean of the training minibatches' ratings (every 5th one held out)
    trained = np.concatenate([X[s:s + 50].data for s in range(0, 500, 50) if s // 50 % 5 != 4])
    assert abs(model.mu - trained.mean()) < 1e-9 * trained.mean()
    start = MFModel(factors=4, regularization=0.05, dtype="float64", global_mean=model.mu)
    start.init(150)
    held = [b for i, b in enumerate(MatSource(S, batch_size=50)) if i % 5 == 4]
    before = sum(start.loss(b)[0] for b in held) / sum(b.X.nnz for b in held)
    first, last = L.trace[0]["heldout_loss"], L.trace[-1]["heldout_loss"]
    assert last < first < before
    assert last < 0.6 * before, (before, first, last)
    with pytest.raises(TypeError, match="fused=False"):
        Learner(MatSource(S, batch_size=50), MFModel(factors=2), ADAGrad(), progress=False,
                ).train()
    assert isinstance(SGD(), SGD)


# ---------------------------------------------------------------------------------------------
# using the model


def test_predict_recommend_similar():
    X, _ = planted(n_users=200, n_items=80, nnz=3000, seed=7)
    m = MatrixFactorization(factors=4, regularization=0.05, iterations=5, dtype="float64").fit(X)
    full = m.user_factors_ @ m.item_factors_.T + m.global_mean_ + m.user_bias_[:, None] \
        + m.item_bias_[None, :]
    np.testing.assert_allclose(m.predict(np.arange(200)[:, None], np.arange(80)[None, :]), full,
                               rtol=1e-12)
    assert m.predict(3, 5) == pytest.approx(full[3, 5], rel=1e-12)
    ids, scores = m.recommend(7, N=5)
    seen = set(X[7].indices)
    cand = [i for i in np.argsort(-full[7], kind="stable") if i not in seen][:5]
    np.testing.assert_array_equal(ids, cand)
    np.testing.assert_allclose(scores, full[7, cand], rtol=1e-12)
    ids_all, _ = m.recommend(7, N=80, filter_seen=False)
    assert len(ids_all) == 80 and set(ids_all) >= seen
    sim, s = m.similar_items(4, N=3)
    assert sim[0] == 4 and s[0] == pytest.approx(1.0)
    Y = m.item_factors_
    cos = Y @ Y[4] / (np.linalg.norm(Y, axis=1) * np.linalg.norm(Y[4]))
    np.testing.assert_array_equal(sim, np.argsort(-cos, kind="stable")[:3])
    # transform: the fitted users folded in again give the fitted user factors at the fixed
    # point (one more user half-step)
    T = m.transform(X)
    assert T.shape == (200, 4)
    one_more = MatrixFactorization(factors=4, regularization=0.05, iterations=5,
                                   dtype="float64").fit(X)
    Zi = one_more._Zi
    S = sp.csc_matrix((X.data, X.indices, X.indptr), shape=X.shape[::-1])
    ref = np.zeros((5, 200), order="F")
    kernels.als_explicit(S.indptr, S.indices, S.data, Zi, True, m.global_mean_, 0.05, True,
                         kernels.als_row_chunks(S.indptr, 1.0, 2), ref)
    np.testing.assert_allclose(T, ref[:4].T, rtol=1e-12)


def test_implicit_score_is_precision_at_k():
    # 6 groups of users, each interacting mostly with its own sixth of the items (power-law
    # popularity within and across the groups)
    rng = np.random.default_rng(8)
    n_users, n_items, groups = 600, 120, 6
    g_u = rng.integers(0, groups, n_users)
    pop = 1.0 / np.arange(1, n_items + 1) ** 0.7
    rows, cols = [], []
    for u in range(n_users):
        w = pop * np.where(np.arange(n_items) % groups == g_u[u], 20.0, 1.0)
        items = rng.choice(n_items, 15, replace=False, p=w / w.sum())
        rows += [u] * 15
        cols += list(items)
    X = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(n_users, n_items))
    tr, te = split(X, 0.2, rng)
    m = MatrixFactorization(factors=8, regularization=0.1, implicit=True, alpha=5.0,
                            iterations=10, dtype="float64").fit(tr)
    p = m.score(te)
    pop = np.asarray(tr.sum(axis=0)).ravel()
    assert 0.0 <= p <= 1.0
    # better than recommending the most popular unseen items
    hits, n = 0.0, 0
    for u in np.flatnonzero(np.diff(te.indptr)):
        cand = [i for i in np.argsort(-pop, kind="stable") if i not in set(tr[u].indices)][:10]
        held = te[u].indices
        hits += np.isin(cand, held).sum() / min(10, held.size)
        n += 1
    assert p > hits / n


def test_params_round_trip_and_clone():
    m = MatrixFactorization(factors=7, regularization=0.3, implicit=True, alpha=4.0,
                            solver="als", iterations=3, use_cg=False, cg_steps=5)
    p = m.get_params()
    m2 = MatrixFactorization().set_params(**p)
    assert m2.get_params() == p
    assert clone(m).get_params() == p


def test_bad_input_errors():
    X = small()
    m = MatrixFactorization(factors=2, iterations=2).fit(X)
    with pytest.raises(ValueError, match="user id 30 was never seen"):
        m.predict(30, 0)
    with pytest.raises(ValueError, match="item id -1 was never seen"):
        m.predict(0, -1)
    with pytest.raises(ValueError, match="user id 99 was never seen"):
        m.recommend(99)
    with pytest.raises(ValueError, match="items"):
        m.transform(X[:, :5])
    with pytest.raises(TypeError, match="sparse"):
        MatrixFactorization().fit(X.toarray())
    neg = X.copy()
    neg.data[0] = -1.0
    with pytest.raises(ValueError, match="negative"):
        MatrixFactorization(implicit=True).fit(neg)
    with pytest.raises(ValueError, match="factors"):
        MatrixFactorization(factors=0).fit(X)
    with pytest.raises(ValueError, match="implicit"):
        MatrixFactorization(implicit=True, solver="sgd").fit(X)
    with pytest.raises(ValueError, match="biases"):
        MatrixFactorization(implicit=True, biases=True).fit(X)
    with pytest.raises(ValueError, match="solver"):
        MatrixFactorization(solver="newton").fit(X)
    with pytest.raises(ValueError, match="partial_fit"):
        MatrixFactorization().partial_fit(X)
    with pytest.raises(RuntimeError, match="not fitted"):
        MatrixFactorization().predict(0, 0)
    nan = X.copy()
    nan.data[0] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        MatrixFactorization().fit(nan)
    with pytest.raises(ValueError, match="N must"):
        m.recommend(0, N=0)


# ---------------------------------------------------------------------------------------------
# distributed ALS


def _dist_data():
    X, _ = planted(n_users=400, n_items=120, nnz=8000, seed=9)
    Xi = X.copy()
    Xi.data = np.ceil(np.abs(Xi.data))
    return X, Xi


def _dist_fit(c, implicit):
    X, Xi = _dist_data()
    data = Xi if implicit else X
    rows = np.array_split(np.arange(data.shape[0]), c.size)[c.rank]
    m = MatrixFactorization(factors=4, regularization=0.1, iterations=5, dtype="float64",
                            implicit=implicit, use_cg=False)
    m.fit(data[rows], comm=c)
    return m._Zi.copy(), m._Zu.copy(), m.objective()


def _dist_both(c):
    return _dist_fit(c, False), _dist_fit(c, True)


def _check_dist(outs):
    X, Xi = _dist_data()
    for implicit, data in ((False, X), (True, Xi)):
        m = MatrixFactorization(factors=4, regularization=0.1, iterations=5, dtype="float64",
                                implicit=implicit, use_cg=False).fit(data)
        Zu = np.hstack([o[implicit][1] for o in outs])
        for o in outs:
            np.testing.assert_allclose(o[implicit][0], m._Zi, rtol=1e-8, atol=1e-10)
            assert abs(o[implicit][2] - m.objective_) <= 1e-9 * m.objective_
        np.testing.assert_allclose(Zu, m._Zu, rtol=1e-8, atol=1e-10)


def test_distributed_threads_equals_single():
    _check_dist(rcomm.run(_dist_both, 3, backend="threads", timeout=60))


@pytest.mark.slow
@pytest.mark.multiprocess
def test_distributed_tcp_two_processes_equals_single():
    _check_dist(rcomm.run(_dist_both, 2, backend="tcp", timeout=60))


@pytest.mark.slow
@pytest.mark.multiprocess
def test_distributed_tcp_four_processes_equals_single():
    _check_dist(rcomm.run(_dist_both, 4, backend="tcp", timeout=90))


def test_distributed_rejects_minibatch_solver():
    with pytest.raises(ValueError, match="ALS"):
        MatrixFactorization(solver="sgd").fit(small(), comm=object())


def _mf_learner_fit(c):
    X, _ = planted(n_users=500, n_items=150, nnz=10_000, seed=6)
    S = sp.csc_matrix((X.data, X.indices, X.indptr), shape=X.shape[::-1])
    model = MFModel(factors=4, regularization=0.05, dtype="float64",
                    global_mean=float(X.data.mean()), fit_mean=False)
    L = Learner(MatSource(S, batch_size=50), model, ADAGrad(lr=0.1, fused=False), n_passes=12,
                progress=False, comm=c, sync_every=2)
    L.train()
    return model.coef.copy(), L.objective()


def test_mfmodel_data_parallel_learner():
    single = _mf_learner_fit(None)[1]
    outs = rcomm.run(_mf_learner_fit, 2, backend="threads", timeout=120)
    np.testing.assert_array_equal(outs[0][0], outs[1][0])  # model averaging: one model
    # each rank takes half the steps between averages: stated, within 25% of one process's
    # per-rating objective after the same passes
    assert outs[0][1] <= 1.25 * single, (outs[0][1], single)
