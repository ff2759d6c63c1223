"""The coordinate-descent steps of gmat (glm/_cd_steps.py): references, argument mapping onto the
kernels, and O(1) validation at the boundary.

The kernels' numerics are tested against numpy references in tests/kernels/test_cd.py;
here the wrappers are checked to pass every argument to its kernel slot (bit-equal to a direct
kernel call with distinct ``sigma``/``damp``/tracking values) and to reject bad arguments by name.
"""

import numpy as np
import pytest
import scipy.sparse as sp

from roofline import glm, gmat, kernels
from roofline.gmat import csc_from_arrays


def _problem(X, rng, loss):
    """Labels for ``loss`` and a nonzero starting point for an ``X`` of shape (d, n)."""
    d, n = X.shape
    y = rng.normal(size=n) if loss == 0 else np.where(rng.random(n) < 0.5, 1.0, -1.0)
    return y, 0.1 * rng.normal(size=d)


def test_feature_major_holds_the_csr_arrays(powerlaw):
    X = powerlaw
    A = glm.cd.feature_major(X)
    Xr = X.tocsr()
    assert A.format == "csc" and A.shape == (X.shape[1], X.shape[0])
    for a, b in ((A.indptr, Xr.indptr), (A.indices, Xr.indices), (A.data, Xr.data)):
        np.testing.assert_array_equal(a, b)
        assert a.dtype == b.dtype
    np.testing.assert_array_equal(A.toarray(), X.T.toarray())
    # the very arrays of tocsr(): no copy and no index downcasting on the way (scipy's
    # constructor would turn these int64 indices into int32)
    Xr64 = Xr.copy()
    Xr64.indices, Xr64.indptr = Xr.indices.astype(np.int64), Xr.indptr.astype(np.int64)
    X2 = X.copy()
    X2.tocsr = lambda: Xr64
    A2 = glm.cd.feature_major(X2)
    assert A2.indices is Xr64.indices and A2.indptr is Xr64.indptr and A2.data is Xr64.data
    assert isinstance(glm.cd.feature_major(sp.csc_array(X)), sp.csc_array)


def test_maps_match_scipy(powerlaw, rng):
    X = powerlaw
    Xd = X.toarray().astype(np.float64)
    w, a = rng.normal(size=X.shape[0]), rng.normal(size=X.shape[1])
    z = glm.cd.matvec(X, w, offset=0.5)
    np.testing.assert_allclose(z, Xd.T @ w + 0.5, rtol=1e-12, atol=1e-12)
    out = np.empty(X.shape[1])
    assert glm.cd.matvec(X, w, out, 0.5, parallel=False) is out
    np.testing.assert_array_equal(out, z)  # same body, same order: bit-equal
    u = glm.cd.matvec_t(X, a, np.ones(X.shape[0]))
    np.testing.assert_allclose(u, Xd @ a + 1.0, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(glm.cd.col_sqnorms(X), (Xd**2).sum(0), rtol=1e-12)


@pytest.mark.parametrize("loss", [0, 1, 2])
def test_vector_sums_match_the_kernels(loss, rng):
    y, _ = _problem(sp.csc_matrix((1, 50)), rng, loss)
    z = 2 * rng.normal(size=50)
    assert glm.cd.loss_sum(z, y, loss) == kernels.cd_loss_sum(z, y, loss)
    a = 0.5 * y if loss else z
    assert glm.cd.conj_sum(a, y, loss) == kernels.cd_conj_sum(a, y, loss)
    ref = np.empty(50)
    g, h = kernels.cd_grad(z, y, loss, ref)
    out, g2, h2 = glm.cd.grad(z, y, loss)
    np.testing.assert_array_equal(out, ref)
    assert (g2, h2) == (g, h)


@pytest.mark.parametrize("loss,l1", [(0, False), (1, False), (1, True)])
def test_primal_steps_pass_every_argument(powerlaw, rng, loss, l1):
    X = powerlaw.astype(np.float64)
    A = glm.cd.feature_major(X)
    y, w0 = _problem(X, rng, loss)
    colsq = glm.cd.col_sqnorms(A)
    coords = rng.permutation(X.shape[0]).astype(np.int64)
    z0 = X.T @ w0
    # direct kernel calls
    w1, z1, d1 = w0.copy(), z0.copy(), np.zeros(X.shape[1])
    kernels.cd_primal_epoch(A.indptr, A.indices, A.data, y, w1, z1, d1, coords, loss, l1, 3.0,
                            2.0, 0.5, colsq, True)
    b1 = kernels.cd_intercept_step(y, z1, d1, 0.25, loss, 2.0, 0.5, True)
    # through gmat
    w2, z2, d2 = w0.copy(), z0.copy(), np.zeros(X.shape[1])
    glm.cd.primal_epoch(A, y, w2, z2, coords, loss=loss, l1=l1, lam_n=3.0, colsq=colsq,
                         sigma=2.0, damp=0.5, d=d2)
    b2 = glm.cd.intercept_step(y, z2, 0.25, loss=loss, sigma=2.0, damp=0.5, d=d2)
    np.testing.assert_array_equal(w2, w1)
    np.testing.assert_array_equal(z2, z1)
    np.testing.assert_array_equal(d2, d1)
    assert b2 == b1 and np.any(d2 != 0)
    # TPA replicas (deterministic) against the kernel
    bounds = np.array([0, 1000, coords.size], dtype=np.int64)
    w3, Z3 = w0.copy(), np.repeat(z0[None, :], 2, axis=0)
    kernels.cd_primal_tpa(A.indptr, A.indices, A.data, y, w3, Z3, coords, bounds, loss, l1, 3.0,
                          0.5, colsq, np.empty(0))
    w4, Z4 = w0.copy(), np.repeat(z0[None, :], 2, axis=0)
    glm.cd.primal_tpa(A, y, w4, Z4, coords, bounds, loss=loss, l1=l1, lam_n=3.0, colsq=colsq,
                       damp=0.5)
    np.testing.assert_array_equal(w4, w3)
    np.testing.assert_array_equal(Z4, Z3)


@pytest.mark.parametrize("loss", [0, 1, 2])
@pytest.mark.parametrize("icpt", [0.0, 1.5])
def test_dual_steps_pass_every_argument(powerlaw, rng, loss, icpt):
    X = powerlaw.astype(np.float64)
    y, _ = _problem(X, rng, loss)
    n = X.shape[1]
    colsq = glm.cd.col_sqnorms(X)
    coords = rng.permutation(n).astype(np.int64)
    nv = X.shape[0] + (1 if icpt else 0)
    a1, v1, d1 = np.zeros(n), np.zeros(nv), np.zeros(nv)
    s1 = np.full(n, -1.0)
    kernels.cd_dual_epoch(X.indptr, X.indices, X.data, y, a1, v1, d1, coords, loss, 40.0, 2.0,
                          0.5, colsq, icpt, True, s1, True, None)
    a2, v2, d2, s2 = np.zeros(n), np.zeros(nv), np.zeros(nv), np.full(n, -1.0)
    glm.cd.dual_epoch(X, y, a2, v2, coords, loss=loss, lam_n=40.0, colsq=colsq, icpt=icpt,
                       sigma=2.0, damp=0.5, d=d2, steps=s2)
    for got, ref in ((a2, a1), (v2, v1), (d2, d1), (s2, s1)):
        np.testing.assert_array_equal(got, ref)
    assert np.any(a2 != 0)
    # every example visited once from alpha = 0: its recorded step is its |alpha|
    np.testing.assert_array_equal(s2, np.abs(a2))
    bounds = np.array([0, n // 3, n], dtype=np.int64)
    a3, V3 = np.zeros(n), np.zeros((2, nv))
    kernels.cd_dual_tpa(X.indptr, X.indices, X.data, y, a3, V3, coords, bounds, loss, 40.0, 0.5,
                        colsq, icpt, np.empty(0), None, np.empty(0), np.empty(0),
                        np.empty(0))
    a4, V4 = np.zeros(n), np.zeros((2, nv))
    glm.cd.dual_tpa(X, y, a4, V4, coords, bounds, loss=loss, lam_n=40.0, colsq=colsq,
                     icpt=icpt, damp=0.5)
    np.testing.assert_array_equal(a4, a3)
    np.testing.assert_array_equal(V4, V3)


@pytest.mark.parametrize("l1", [False, True])
def test_block_steps_pass_every_argument(powerlaw, rng, l1):
    X = powerlaw.astype(np.float64)
    A = glm.cd.feature_major(X)
    y, w0 = _problem(X, rng, 1)
    z = X.T @ w0
    order = np.argsort(-np.diff(A.indptr), kind="stable").astype(np.int64)
    blocks, n_blocks = glm.cd.greedy_pure_blocks(A, order, 8)
    rb, rn = kernels.cd_greedy_pure_blocks(A.indptr, A.indices, A.shape[0], order, 8)
    np.testing.assert_array_equal(blocks, rb)
    assert n_blocks == rn > 0
    feats = np.flatnonzero(blocks == 0).astype(np.int64)
    m = feats.size
    g1, h1, g2, h2 = np.zeros(m), np.zeros(m), np.zeros(m), np.zeros(m)
    kernels.cd_block_stats(A.indptr, A.indices, A.data, y, z, feats, 1, g1, h1)
    glm.cd.block_stats(A, y, z, feats, g2, h2, loss=1)
    np.testing.assert_array_equal(g2, g1)
    np.testing.assert_array_equal(h2, h1)
    w1, w2, d1, d2 = w0.copy(), w0.copy(), np.empty(m), np.empty(m)
    kernels.cd_block_steps(w1, feats, g1, h1, l1, 30.0, d1)
    glm.cd.block_steps(w2, feats, g2, h2, d2, l1=l1, lam_n=30.0)
    np.testing.assert_array_equal(w2, w1)
    np.testing.assert_array_equal(d2, d1)
    z1, z2 = z.copy(), z.copy()
    kernels.cd_block_apply(A.indptr, A.indices, A.data, z1, feats, d1)
    glm.cd.block_apply(A, z2, feats, d2)
    np.testing.assert_array_equal(z2, z1)
    assert not np.array_equal(z2, z)


def test_bad_arguments_are_named(powerlaw, rng):
    X = powerlaw.astype(np.float64)
    A = glm.cd.feature_major(X)
    d, n = X.shape
    y, w = _problem(X, rng, 1)
    z, colsq = X.T @ w, glm.cd.col_sqnorms(A)
    coords = np.arange(d, dtype=np.int64)
    kw = dict(loss=1, l1=False, lam_n=1.0, colsq=colsq)
    with pytest.raises(TypeError, match="A must be a scipy.sparse CSC matrix.*CSR"):
        glm.cd.primal_epoch(X.T.tocsr(), y, w, z, coords, **kw)
    with pytest.raises(TypeError, match="A must be a scipy.sparse CSC matrix.*ndarray"):
        glm.cd.matvec(X.toarray(), w)
    with pytest.raises(TypeError, match="X must be a scipy.sparse CSC"):
        glm.cd.feature_major(X.tocsr())
    with pytest.raises(ValueError, match=rf"w must have shape \({d},\)"):
        glm.cd.primal_epoch(A, y, w[:-1], z, coords, **kw)
    with pytest.raises(ValueError, match=rf"z must have shape \({n},\)"):
        glm.cd.primal_epoch(A, y, w, z[:, None], coords, **kw)
    with pytest.raises(ValueError, match="d must have shape"):
        glm.cd.primal_epoch(A, y, w, z, coords, d=np.zeros(n + 1), **kw)
    with pytest.raises(TypeError, match="coords must hold integers"):
        glm.cd.primal_epoch(A, y, w, z, coords.astype(float), **kw)
    with pytest.raises(TypeError, match="y must be a numpy array"):
        glm.cd.loss_sum(z, list(y), 1)
    with pytest.raises(ValueError, match="loss must be a code"):
        glm.cd.loss_sum(z, y, 3)
    with pytest.raises(ValueError, match="loss must be a code"):
        glm.cd.grad(z, y, "logistic")
    with pytest.raises(ValueError, match="x must have shape"):
        glm.cd.matvec(X, w[:-1])
    with pytest.raises(ValueError, match="out must have shape"):
        glm.cd.matvec_t(X, np.zeros(n), np.zeros(d + 1))
    # TPA: the shared rows and the thread bounds
    bounds = np.array([0, 10, d], dtype=np.int64)
    with pytest.raises(ValueError, match=r"Z must have 1 row \(Hogwild\) or 2 rows"):
        glm.cd.primal_tpa(A, y, w, np.zeros((3, n)), coords, bounds, **kw)
    with pytest.raises(ValueError, match=f"Z must be a 2-D array with {n} columns"):
        glm.cd.primal_tpa(A, y, w, z, coords, bounds, **kw)
    with pytest.raises(ValueError, match="bounds must hold n_threads"):
        glm.cd.primal_tpa(A, y, w, z[None, :], coords, bounds + 1, **kw)
    # the dual vector has one more entry with a constant feature
    alpha = np.zeros(n)
    dkw = dict(loss=1, lam_n=1.0, colsq=glm.cd.col_sqnorms(X), icpt=1.0)
    with pytest.raises(ValueError, match=rf"v must have shape \({d + 1},\)"):
        glm.cd.dual_epoch(X, y, alpha, np.zeros(d), np.arange(n), **dkw)
    with pytest.raises(ValueError, match=rf"V must be a 2-D array with {d + 1} columns"):
        glm.cd.dual_tpa(X, y, alpha, np.zeros((1, d)), np.arange(n), bounds[:2], **dkw)
    with pytest.raises(ValueError, match="delta must have shape"):
        glm.cd.block_steps(w, coords[:3], np.zeros(3), np.zeros(3), np.zeros(2), l1=False,
                            lam_n=1.0)
    with pytest.raises(ValueError, match="words must be a positive integer"):
        glm.cd.greedy_pure_blocks(A, coords, 0)


def test_reorder_features_renumbers_by_frequency(powerlaw):
    X = powerlaw
    B, order, counts = glm.cd.reorder_features(X)
    assert B.shape == X.shape and B.data is X.data and B.indptr is X.indptr
    assert B.indices.dtype == X.indices.dtype
    np.testing.assert_array_equal(B.toarray(), X.toarray()[order])
    np.testing.assert_array_equal(counts, np.diff(X.tocsr().indptr)[order])
    assert np.all(np.diff(counts) <= 0) and counts[0] > counts[-1]
    np.testing.assert_array_equal(np.sort(order), np.arange(X.shape[0]))
    # the nonzeros keep their order inside each column (sums over a column run the same way)
    np.testing.assert_array_equal(order[B.indices], X.indices)
    X64 = csc_from_arrays(sp.csc_matrix, X.data, X.indices.astype(np.int64),
                          X.indptr.astype(np.int64), X.shape)  # scipy would downcast
    assert X64.indices.dtype == np.int64
    B64, order64, _ = glm.cd.reorder_features(X64)
    assert B64.indices.dtype == np.int64
    np.testing.assert_array_equal(order64, order)
    with pytest.raises(TypeError, match="X must be a scipy.sparse CSC"):
        glm.cd.reorder_features(X.tocsr())


def test_feature_counts_and_reorder_from_counts(powerlaw):
    X = powerlaw
    counts = glm.cd.feature_counts(X)
    assert counts.dtype == np.int32
    np.testing.assert_array_equal(counts, np.diff(X.tocsr().indptr))
    B, order, sorted_counts = glm.cd.reorder_features(X, counts)
    B2, order2, _ = glm.cd.reorder_features(X)
    np.testing.assert_array_equal(order, order2)
    np.testing.assert_array_equal(B.indices, B2.indices)
    np.testing.assert_array_equal(sorted_counts, counts[order])
    with pytest.raises(ValueError, match="counts must have shape"):
        glm.cd.reorder_features(X, counts[:-1])


def test_unit_matvecs_skip_the_ones_bit_for_bit(rng):
    """Examples flagged all-ones are summed without their values: the same sums bit for bit
    (1.0 * x == x); unflagged ones read their values; an empty example."""
    d, n = 300, 400
    X = sp.random(d, n, density=0.05, format="csc", random_state=rng)
    X.data[:] = 1.0
    X = X.tolil()
    X[:, 3] = 0.0
    X[5, 7] = 2.5  # example 7 is not all ones
    X[9, 11] = -1.0
    X = X.tocsc()
    X.eliminate_zeros()
    unit = glm.cd.unit_columns(X)
    assert unit[7] == 0.0 and unit[11] == 0.0 and unit.sum() > n // 2
    w = rng.standard_normal(d)
    a = rng.standard_normal(n)
    for parallel in (True, False):
        np.testing.assert_array_equal(glm.cd.matvec(X, w, offset=0.5, parallel=parallel,
                                                     unit=unit),
                                      glm.cd.matvec(X, w, offset=0.5, parallel=parallel))
    np.testing.assert_array_equal(glm.cd.matvec_t(X, a, np.zeros(d), unit=unit),
                                  glm.cd.matvec_t(X, a, np.zeros(d)))
    # a wrong flag would read ones where the values are not: the flags matter
    wrong = np.ones(n)
    assert not np.array_equal(glm.cd.matvec(X, w, unit=wrong), glm.cd.matvec(X, w))
    with pytest.raises(ValueError, match="unit must have shape"):
        glm.cd.matvec(X, w, unit=np.ones(n - 1))


def _split_setup(X, rng, loss, icpt):
    B, _, counts = glm.cd.reorder_features(X.astype(np.float64))
    y, _ = _problem(B, rng, loss)
    n = B.shape[1]
    nv = B.shape[0] + (1 if icpt else 0)
    kw = dict(loss=loss, lam_n=40.0, colsq=glm.cd.col_sqnorms(B), icpt=icpt)
    return B, y, n, nv, int((counts >= 3).sum()), kw


@pytest.mark.parametrize("loss", [0, 1, 2])
@pytest.mark.parametrize("icpt", [0.0, 1.5])
def test_dual_split_on_one_thread_is_the_sequential_epoch(powerlaw, rng, loss, icpt):
    B, y, n, nv, n_hot, kw = _split_setup(powerlaw, rng, loss, icpt)
    assert 0 < n_hot < B.shape[0]
    coords = rng.permutation(n).astype(np.int64)
    a1, v1 = np.zeros(n), np.zeros(nv)
    glm.cd.dual_epoch(B, y, a1, v1, coords, damp=0.5, **kw)
    a2, v2 = np.zeros(n), np.zeros(nv)
    work = glm.cd.dual_tpa_split(B, y, a2, v2, coords, np.array([0, n]), n_hot=n_hot,
                                  damp=0.5, publish_every=7, **kw)
    # the replica's hot entries are refreshed as base + changes: equal up to rounding, which
    # can change when the logistic Newton solve (to 1e-7 in the log-odds) stops
    tol = dict(rtol=1e-6, atol=1e-7) if loss == 1 else dict(rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(a2, a1, **tol)
    np.testing.assert_allclose(v2, v1, **tol)
    assert np.any(a2 != 0) and work.shape == (1, nv + 2 * n_hot + 2)
    assert not work[:, nv:nv + n_hot + 1].any()  # the change rows are left zero


@pytest.mark.parametrize("icpt", [0.0, 1.5])
@pytest.mark.parametrize("publish_every", [1, 5, 10_000])
def test_dual_split_loses_no_hot_update(powerlaw, rng, icpt, publish_every):
    """With every feature hot no thread writes v during the sweep: after it, v is exactly
    B alpha (plus the constant feature's entry) whatever the interleaving of 3 threads."""
    B, y, n, nv, _, kw = _split_setup(powerlaw, rng, 1, icpt)
    coords = rng.permutation(n).astype(np.int64)
    bounds = np.array([0, n // 3, 2 * n // 3, n], dtype=np.int64)
    alpha, v = np.zeros(n), np.zeros(nv)
    work = None
    for _ in range(3):
        work = glm.cd.dual_tpa_split(B, y, alpha, v, coords, bounds, n_hot=B.shape[0],
                                      publish_every=publish_every, work=work, **kw)
        exact = B @ alpha
        np.testing.assert_allclose(v[: B.shape[0]], exact, rtol=1e-10, atol=1e-12)
        if icpt:
            assert v[-1] == pytest.approx(icpt * alpha.sum(), rel=1e-10, abs=1e-12)
        assert not work[:, nv:nv + B.shape[0] + 1].any()  # the change rows: left zero
    assert np.any(alpha != 0)


@pytest.mark.parametrize("n_hot", [0, 3])
def test_dual_split_loses_no_cold_update(powerlaw, rng, n_hot):
    """Cold entries take atomic adds: with (almost) every feature cold, three threads that
    collide on the same entries all the time still leave v = B alpha (plain Hogwild adds lose
    some of them on a problem this small)."""
    B, y, n, nv, _, kw = _split_setup(powerlaw, rng, 1, 0.0)
    # disjoint examples per thread (TPA's contract: alpha has one writer per entry), each
    # visited 4 times, so that the threads keep adding to the same features for longer
    parts = np.array_split(rng.permutation(n), 3)
    coords = np.concatenate([np.tile(p, 4) for p in parts]).astype(np.int64)
    bounds = np.cumsum([0] + [4 * p.size for p in parts]).astype(np.int64)
    alpha, v = np.zeros(n), np.zeros(nv)
    work = None
    for _ in range(3):
        work = glm.cd.dual_tpa_split(B, y, alpha, v, coords, bounds, n_hot=n_hot, work=work,
                                      **kw)
        np.testing.assert_allclose(v, B @ alpha, rtol=1e-10, atol=1e-12)
    assert np.any(alpha != 0)


def test_dual_split_rejects_bad_arguments(powerlaw, rng):
    B, y, n, nv, n_hot, kw = _split_setup(powerlaw, rng, 1, 0.0)
    coords = np.arange(n, dtype=np.int64)
    bounds = np.array([0, n // 2, n], dtype=np.int64)
    a, v = np.zeros(n), np.zeros(nv)
    for bad in (-1, B.shape[0] + 1, 1.5, True):
        with pytest.raises(ValueError, match="n_hot must be an integer"):
            glm.cd.dual_tpa_split(B, y, a, v, coords, bounds, n_hot=bad, **kw)
    with pytest.raises(ValueError, match="publish_every must be a positive integer"):
        glm.cd.dual_tpa_split(B, y, a, v, coords, bounds, n_hot=n_hot, publish_every=0, **kw)
    with pytest.raises(ValueError, match=r"work must be a float64 array of shape \(2, "):
        glm.cd.dual_tpa_split(B, y, a, v, coords, bounds, n_hot=n_hot, work=np.zeros((2, 3)),
                               **kw)
    with pytest.raises(ValueError, match="v must"):
        glm.cd.dual_tpa_split(B, y, a, np.zeros(nv + 1), coords, bounds, n_hot=n_hot, **kw)
    assert not a.any() and not v.any()


def test_dual_epoch_steps_checked(powerlaw, rng):
    B, y, n, nv, _, kw = _split_setup(powerlaw, rng, 1, 0.0)
    a, v = np.zeros(n), np.zeros(nv)
    with pytest.raises(ValueError, match="steps"):
        glm.cd.dual_epoch(B, y, a, v, np.arange(n), steps=np.zeros(n + 1), **kw)
    assert not a.any()


def _mixed_units(X, rng):
    """``X`` with about half of its columns (examples) turned into all-ones columns, and one
    column emptied: the data of one-hot / hashed categorical features, mixed with real values."""
    X = X.astype(np.float64).tocsc(copy=True)
    n = X.shape[1]
    ones = rng.random(n) < 0.5
    col = np.repeat(np.arange(n), np.diff(X.indptr))
    X.data[ones[col]] = 1.0
    X = X.tolil()
    X[:, 5] = 0.0
    X = X.tocsc()
    X.sort_indices()
    return X


def test_unit_columns_flags_all_ones_columns(powerlaw, rng):
    X = _mixed_units(powerlaw, rng)
    unit = glm.cd.unit_columns(X)
    ref = np.array([np.all(X.data[X.indptr[j]:X.indptr[j + 1]] == 1.0)
                    for j in range(X.shape[1])])
    assert unit.dtype == np.float64
    np.testing.assert_array_equal(unit.astype(bool), ref)
    assert unit[5] == 1 and 0 < unit.sum() < X.shape[1]
    rec = np.full((X.shape[1], 8), 7.0)
    out = rec[:, 4]  # a strided column of a record array
    assert glm.cd.unit_columns(X, out) is out
    np.testing.assert_array_equal(out, unit)
    assert (rec[:, [0, 1, 2, 3, 5, 6, 7]] == 7.0).all()
    # the parallel kernel (from 2^17 values) and the serial one (below) agree
    from roofline import kernels

    par = kernels.cd_unit_columns(X.indptr, X.data, np.empty(X.shape[1]))
    ser = kernels.cd_unit_columns_serial(X.indptr, X.data, np.empty(X.shape[1]))
    np.testing.assert_array_equal(par, unit)
    np.testing.assert_array_equal(ser, unit)
    sq = kernels.cd_col_sqnorms(X.indptr, X.data, np.empty(X.shape[1]))
    np.testing.assert_array_equal(sq, glm.cd.col_sqnorms(X))
    with pytest.raises(TypeError, match="out must have dtype float64"):
        glm.cd.unit_columns(X, np.zeros(X.shape[1], np.uint8))
    with pytest.raises(ValueError, match="out must have shape"):
        glm.cd.unit_columns(X, np.zeros(X.shape[1] + 1))


@pytest.mark.parametrize("loss", [0, 1, 2])
@pytest.mark.parametrize("icpt", [0.0, 1.5])
def test_dual_sweeps_skip_unit_values_bit_for_bit(powerlaw, rng, loss, icpt):
    """Flagged examples are summed without their values: the same iterates bit for bit, in the
    sequential sweep (with tracking and recorded steps), the replica and the split TPA kernels;
    and the per-example arrays may be strided columns of one record array."""
    X = _mixed_units(powerlaw, rng)
    y, _ = _problem(X, rng, loss)
    n = X.shape[1]
    nv = X.shape[0] + (1 if icpt else 0)
    colsq = glm.cd.col_sqnorms(X)
    unit = glm.cd.unit_columns(X)
    coords = np.concatenate([rng.permutation(n), rng.permutation(n)]).astype(np.int64)
    kw = dict(loss=loss, lam_n=40.0, colsq=colsq, icpt=icpt)
    runs = []
    for u in (None, unit):
        a, v, d, st = np.zeros(n), np.zeros(nv), np.zeros(nv), np.zeros(n)
        glm.cd.dual_epoch(X, y, a, v, coords, sigma=2.0, damp=0.5, d=d, steps=st, unit=u, **kw)
        runs.append((a, v, d, st))
    rec = gmat.empty((n, 8), np.float64, order="C")  # alpha, y, colsq, steps, unit, spare
    rec[:] = 0.0
    rec[:, 1], rec[:, 2] = y, colsq
    glm.cd.unit_columns(X, rec[:, 4])
    a, v, d, st = rec[:, 0], np.zeros(nv), np.zeros(nv), rec[:, 3]
    glm.cd.dual_epoch(X, rec[:, 1], a, v, coords, sigma=2.0, damp=0.5, d=d, steps=st,
                       unit=rec[:, 4], **dict(kw, colsq=rec[:, 2]))
    runs.append((a, v, d, st))
    for got in runs[1:]:
        for g, r in zip(got, runs[0], strict=True):
            np.testing.assert_array_equal(g, r)
    assert np.any(runs[0][0] != 0)
    tpa = []
    for u in (None, unit):
        a, V = np.zeros(n), np.zeros((2, nv))
        glm.cd.dual_tpa(X, y, a, V, coords[:n], np.array([0, n // 3, n], dtype=np.int64),
                         damp=0.5, unit=u, **kw)
        b, w = np.zeros(n), np.zeros(nv)
        glm.cd.dual_tpa_split(X, y, b, w, coords, np.array([0, coords.size]), n_hot=40,
                               publish_every=7, unit=u, **kw)
        tpa.append((a, V, b, w))
    for g, r in zip(tpa[1], tpa[0], strict=True):
        np.testing.assert_array_equal(g, r)


def test_unit_flags_are_trusted(powerlaw, rng):
    """A flagged example's values are never read (which shows the fast path is taken): tripling
    the values of the flagged columns leaves a flagged sweep unchanged bit for bit, and changes
    an unflagged one (the flags must come from cd_unit_columns, as colsq from cd_col_sqnorms)."""
    X = _mixed_units(powerlaw, rng)
    y, _ = _problem(X, rng, 1)
    n = X.shape[1]
    unit = glm.cd.unit_columns(X)
    X3 = X.copy()
    col = np.repeat(np.arange(n), np.diff(X.indptr))
    X3.data[unit[col] == 1] = 3.0
    coords = rng.permutation(n).astype(np.int64)
    kw = dict(loss=1, lam_n=40.0, colsq=glm.cd.col_sqnorms(X))
    out = []
    for A, u in ((X, unit), (X3, unit), (X3, None)):
        a, v = np.zeros(n), np.zeros(X.shape[0])
        glm.cd.dual_epoch(A, y, a, v, coords, unit=u, **kw)
        out.append((a, v))
    np.testing.assert_array_equal(out[1][0], out[0][0])
    np.testing.assert_array_equal(out[1][1], out[0][1])
    assert not np.array_equal(out[2][1], out[0][1])


def test_unit_argument_checked(powerlaw, rng):
    X = _mixed_units(powerlaw, rng)
    y, _ = _problem(X, rng, 1)
    n = X.shape[1]
    a, v = np.zeros(n), np.zeros(X.shape[0])
    kw = dict(loss=1, lam_n=1.0, colsq=glm.cd.col_sqnorms(X))
    with pytest.raises(TypeError, match="unit must have dtype float64"):
        glm.cd.dual_epoch(X, y, a, v, np.arange(n), unit=np.ones(n, bool), **kw)
    with pytest.raises(ValueError, match="unit must have shape"):
        glm.cd.dual_epoch(X, y, a, v, np.arange(n), unit=np.ones(n + 1), **kw)
    assert not a.any() and not v.any()


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("loss", [0, 1, 2])
def test_dual_tpa_bookkeeping_outputs(powerlaw, rng, split, loss):
    """``steps``, ``prev`` and ``dconj`` of a TPA sub-epoch agree with the same numbers
    computed afterwards from alpha (what the solver used to gather at a cache miss each)."""
    B, y, n, nv, n_hot, kw = _split_setup(powerlaw, rng, loss, 1.5)
    a0 = np.zeros(n)
    glm.cd.dual_epoch(B, y, a0, np.zeros(nv), rng.permutation(n).astype(np.int64), **kw)
    v = np.zeros(nv)
    v[:-1] = B @ a0
    v[-1] = 1.5 * a0.sum()
    part = rng.permutation(n)[: 2 * n // 3].astype(np.int64)
    bounds = np.array([0, part.size // 3, part.size], dtype=np.int64)
    alpha = a0.copy()
    steps, prev, dconj = np.full(n, -1.0), np.full(n, -1.0), np.zeros(2)
    out = dict(steps=steps, prev=prev, dconj=dconj)
    if split:
        glm.cd.dual_tpa_split(B, y, alpha, v, part, bounds, n_hot=n_hot, **out, **kw)
    else:
        glm.cd.dual_tpa(B, y, alpha, np.repeat(v[None], 2, axis=0), part, bounds, **out, **kw)
    seen = np.zeros(n, dtype=bool)
    seen[part] = True
    assert np.any(alpha[part] != a0[part]) and np.all(alpha[~seen] == a0[~seen])
    np.testing.assert_array_equal(prev[part], a0[part])
    np.testing.assert_array_equal(steps[part], np.abs(alpha[part] - a0[part]))
    assert np.all(prev[~seen] == -1.0) and np.all(steps[~seen] == -1.0)
    change = glm.cd.conj_sum(alpha, y, loss) - glm.cd.conj_sum(a0, y, loss)
    assert dconj.sum() == pytest.approx(change, rel=1e-9, abs=1e-9)
    alpha[part] = prev[part]  # what the solver does to discard a sub-epoch
    np.testing.assert_array_equal(alpha, a0)


def test_dual_tpa_bookkeeping_rejects_bad_outputs(powerlaw, rng):
    B, y, n, nv, n_hot, kw = _split_setup(powerlaw, rng, 1, 0.0)
    coords = np.arange(n, dtype=np.int64)
    bounds = np.array([0, n // 2, n], dtype=np.int64)
    a, v = np.zeros(n), np.zeros(nv)
    with pytest.raises(TypeError, match="steps must have dtype float64"):
        glm.cd.dual_tpa_split(B, y, a, v, coords, bounds, n_hot=n_hot,
                               steps=np.zeros(n, dtype=np.float32), **kw)
    with pytest.raises(ValueError, match=r"dconj must have shape \(2,\)"):
        glm.cd.dual_tpa(B, y, a, np.zeros((1, nv)), coords, bounds, dconj=np.zeros(3), **kw)
    with pytest.raises(ValueError, match=r"prev must have shape"):
        glm.cd.dual_tpa(B, y, a, np.zeros((1, nv)), coords, bounds, prev=np.zeros(n - 1), **kw)
    assert not a.any() and not v.any()


@pytest.mark.parametrize("loss", [0, 1, 2])
@pytest.mark.parametrize("icpt", [0.0, 1.5])
def test_dual_epoch_parallel_launch_changes_nothing(powerlaw, rng, loss, icpt):
    """``parallel=True`` (the pass as a one-iteration parfor body, faster code) and ``False``
    (no parallel launch, for callers on threads) give the same iterates bit for bit."""
    X = powerlaw
    y, _ = _problem(X, rng, loss)
    n = X.shape[1]
    nv = X.shape[0] + (1 if icpt else 0)
    kw = dict(loss=loss, lam_n=40.0, colsq=glm.cd.col_sqnorms(X), icpt=icpt, sigma=2.0,
              damp=0.5, unit=glm.cd.unit_columns(X))
    coords = np.concatenate([rng.permutation(n), rng.integers(0, n, n)]).astype(np.int64)
    runs = []
    for parallel in (True, False):
        a, v, d, st = np.zeros(n), np.zeros(nv), np.zeros(nv), np.zeros(n)
        glm.cd.dual_epoch(X, y, a, v, coords, d=d, steps=st, parallel=parallel, **kw)
        runs.append((a, v, d, st))
    for g, r in zip(runs[0], runs[1], strict=True):
        np.testing.assert_array_equal(g, r)
    assert np.any(runs[0][0] != 0)


def test_col_sqnorms_serial_equals_parallel(powerlaw):
    X = powerlaw
    ref = np.asarray(X.multiply(X).sum(axis=0), dtype=np.float64).ravel()
    par = glm.cd.col_sqnorms(X)
    ser = glm.cd.col_sqnorms(X, np.full(X.shape[1], np.nan), parallel=False)
    np.testing.assert_array_equal(ser, par)
    np.testing.assert_allclose(par, ref, rtol=1e-6 if X.dtype == np.float32 else 1e-12)


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("shape", [(1, 1), (7, 40), (31, 569), (5, 0), (0, 3)])
def test_csc_from_dense_matches_scipy(dtype, order, shape):
    """The same structure, values and dtype as scipy's own conversion, for any memory order,
    with empty rows and columns and exact zeros among the values."""
    rng = np.random.default_rng(sum(shape))
    A = rng.standard_normal(shape).astype(dtype)
    A[rng.random(shape) < 0.4] = 0.0
    if shape[1] > 2:
        A[:, 1] = 0.0  # an empty column
    if shape[0] > 2:
        A[2, :] = 0.0  # an empty row
    A = np.asarray(A, order=order)
    got, ref = glm.cd.csc_from_dense(A), sp.csc_matrix(A)
    assert got.format == "csc" and got.dtype == A.dtype and got.shape == A.shape
    np.testing.assert_array_equal(got.indptr, ref.indptr)
    np.testing.assert_array_equal(got.indices, ref.indices)
    np.testing.assert_array_equal(got.data, ref.data)
    assert got.indices.dtype == np.int32 and got.indptr.dtype == np.int32
    gmat.check_csc(got, "got")


def test_csc_from_dense_rejects_bad_input():
    with pytest.raises(TypeError, match="A must be a dense array"):
        glm.cd.csc_from_dense(sp.csc_matrix(np.eye(3)))
    with pytest.raises(ValueError):
        glm.cd.csc_from_dense(np.ones(3))
    with pytest.raises(TypeError):
        glm.cd.csc_from_dense(np.ones((3, 3), dtype=np.int64))
