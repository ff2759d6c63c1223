"""k-means (learners/_kmeans.py): kernels against numpy, planted clusters, scikit-learn's
inertia from the same init, minibatch against full batch, distributed Lloyd, bad input."""

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.cluster import KMeans as SKKMeans
from sklearn.metrics import adjusted_rand_score

from roofline.comm import run
from roofline.datasources import MatSource, Minibatch
from roofline.learners import Learner, ModelUpdate, _kmeans
from roofline.learners._kmeans import (
    KMeans,
    KMeansModel,
    MiniBatchKMeans,
    _assign,
    _cluster_order,
    _csc_assign_fused,
    _csc_assign_fused_serial,
    _csc_cluster_sums,
    _csc_label_dists,
    _csc_move_sums,
    _dense_cluster_sums,
    _lloyd_move,
    _minibatch_move,
    kmeans_plusplus,
)


def _blobs(n_per=100, k=5, d=20, sep=20.0, seed=0, sparse=False, dtype=np.float64):
    """Well-separated clusters (rows = samples); sparse: each cluster on its own features."""
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(k), n_per)
    if sparse:
        feats = rng.permutation(d * k).reshape(k, d)
        rows = np.repeat(np.arange(k * n_per), d)
        cols = feats[y].ravel()
        vals = rng.uniform(1.0, 2.0, rows.size)
        X = sp.csr_matrix((vals, (rows, cols)), shape=(k * n_per, d * k), dtype=dtype)
    else:
        centers = rng.normal(scale=sep, size=(k, d))
        X = (centers[y] + rng.normal(size=(k * n_per, d))).astype(dtype)
    perm = rng.permutation(len(y))
    return X[perm], y[perm]


def _powerlaw(m=2000, n=500, seed=0, dtype=np.float64):
    """Sparse rows with Zipf-distributed features and some empty rows."""
    rng = np.random.default_rng(seed)
    nnz_row = rng.integers(0, 30, m)
    rows = np.repeat(np.arange(m), nnz_row)
    cols = np.minimum(rng.zipf(1.5, rows.size) - 1, n - 1)
    X = sp.csr_matrix((rng.uniform(0.5, 2, rows.size), (rows, cols)), shape=(m, n))
    X.sum_duplicates()
    return X.astype(dtype)


# ---------------------------------------------------------------------------------------------
# kernels against numpy


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m,k", [(1, 1), (37, 3), (500, 17)])
def test_assign_kernel_matches_numpy(dtype, m, k):
    rng = np.random.default_rng(m + k)
    D = rng.normal(size=(k, m)).astype(dtype, order="F")
    cnorm = rng.uniform(size=k)
    xnorm = rng.uniform(5, 6, size=m)
    labels = np.empty(m, np.int32)
    mind = np.empty(m)
    _assign(D.T, cnorm, xnorm, labels, mind)
    full = cnorm[:, None] - 2.0 * D.astype(np.float64) + xnorm[None, :]
    np.testing.assert_array_equal(labels, np.argmin(full, axis=0))
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(mind, np.maximum(full.min(axis=0), 0), rtol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k", [1, 2, 9])
def test_fused_sparse_assign_matches_numpy(dtype, k):
    X = _powerlaw(400, 60, seed=k, dtype=dtype).T.tocsc()
    m = X.shape[1]
    rng = np.random.default_rng(k)
    C = np.asfortranarray(rng.uniform(0, 2, (k, X.shape[0])).astype(dtype))
    cnorm = np.einsum("ij,ij->i", C, C, dtype=np.float64)
    xnorm = np.asarray(X.multiply(X).sum(axis=0), np.float64).ravel()
    full = cnorm[:, None] + xnorm[None, :] - 2.0 * (C.astype(np.float64) @ X.toarray())
    cols = np.arange(0, m, 3, dtype=np.int64)  # a subset: the others stay untouched
    for kern in (_csc_assign_fused, _csc_assign_fused_serial):
        labels = np.full(m, -1, np.int32)
        mind, second = np.full(m, -1.0), np.full(m, -1.0)
        kern(X.indptr, X.indices, X.data, C, cnorm, xnorm, cols, labels, mind, second)
        np.testing.assert_array_equal(labels[cols], np.argmin(full[:, cols], axis=0))
        srt = np.sort(np.maximum(full[:, cols], 0), axis=0)
        np.testing.assert_allclose(mind[cols], srt[0], rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(second[cols], srt[1] if k > 1 else np.inf, rtol=1e-9,
                                   atol=1e-9)
        rest = np.setdiff1d(np.arange(m), cols)
        assert np.all(labels[rest] == -1) and np.all(mind[rest] == -1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_label_dists_equal_the_fused_mind_bit_for_bit(dtype):
    X = _powerlaw(400, 60, seed=3, dtype=dtype).T.tocsc()
    m, k = X.shape[1], 7
    rng = np.random.default_rng(3)
    C = np.asfortranarray(rng.uniform(0, 2, (k, X.shape[0])).astype(dtype))
    cnorm = np.einsum("ij,ij->i", C, C, dtype=np.float64)
    xnorm = np.asarray(X.multiply(X).sum(axis=0), np.float64).ravel()
    labels = np.empty(m, np.int32)
    mind, second = np.empty(m), np.empty(m)
    _csc_assign_fused(X.indptr, X.indices, X.data, C, cnorm, xnorm,
                      np.arange(m, dtype=np.int64), labels, mind, second)
    got = np.full(m, -1.0)
    _csc_label_dists(X.indptr, X.indices, X.data, C, cnorm, xnorm, labels, got)
    np.testing.assert_array_equal(got, mind)  # the nearest centers: the same bits
    other = ((labels + 1) % k).astype(np.int32)  # any labels: numpy's distances
    _csc_label_dists(X.indptr, X.indices, X.data, C, cnorm, xnorm, other, got)
    full = cnorm[:, None] + xnorm[None, :] - 2.0 * (C.astype(np.float64) @ X.toarray())
    np.testing.assert_allclose(got, np.maximum(full[other, np.arange(m)], 0), rtol=1e-9,
                               atol=1e-9)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_lloyd_move_equals_numpy(dtype):
    rng = np.random.default_rng(4)
    k, n = 5, 150  # more than one block of 64 features
    C = np.asfortranarray(rng.normal(size=(k, n)).astype(dtype))
    sums, wsum = rng.normal(size=(k, n)), rng.uniform(1, 3, k)
    old = C.astype(np.float64)
    new = sums / wsum[:, None]
    delta = np.empty(k)
    shift = _lloyd_move(C, sums, wsum, delta)
    np.testing.assert_array_equal(C, new.astype(dtype))
    assert shift == pytest.approx(((new - old) ** 2).sum(), rel=1e-13)
    moved = np.sqrt(((C.astype(np.float64) - old) ** 2).sum(axis=1))
    assert np.all(delta >= moved) and np.allclose(delta, moved, rtol=1e-12)


def test_move_sums_equals_fresh_sums():
    X = _powerlaw(300, 50, seed=4).T.tocsc()
    m, k = X.shape[1], 5
    rng = np.random.default_rng(2)
    old = rng.integers(0, k, m).astype(np.int32)
    new = old.copy()
    new[rng.choice(m, 40, replace=False)] = rng.integers(0, k, 40)
    w = rng.uniform(0.5, 2, m)

    def fresh(labels):
        order, starts = np.empty(m, np.int64), np.empty(k + 1, np.int64)
        _cluster_order(labels, k, starts, order)
        sums, wsum = np.zeros((k, X.shape[0])), np.zeros(k)
        _csc_cluster_sums(X.indptr, X.indices, X.data, w, labels, sums, wsum)
        return sums, wsum, np.diff(starts)

    sums, wsum, members = fresh(old)
    moved = _csc_move_sums(X.indptr, X.indices, X.data, w, new, old, sums, wsum, members)
    assert moved == np.count_nonzero(new != old)
    ref_sums, ref_wsum, ref_members = fresh(new)
    np.testing.assert_allclose(sums, ref_sums, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(wsum, ref_wsum, rtol=1e-12)
    np.testing.assert_array_equal(members, ref_members)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_minibatch_move_equals_the_numpy_update(dtype):
    rng = np.random.default_rng(5)
    k, n = 6, 40
    C = np.asfortranarray(rng.normal(size=(k, n)).astype(dtype))
    sums = np.asfortranarray(rng.normal(size=(k, n)))
    wsum = rng.uniform(0.5, 3, k)
    wsum[[1, 4]] = 0.0  # centers that received nothing stay put
    sums[[1, 4]] = 0.0
    counts = rng.uniform(0, 50, k)
    hit = wsum > 0
    ref = C.copy()
    ref[hit] = (np.asarray(C, np.float64)[hit] * counts[hit, None] + sums[hit]) / (
        counts[hit] + wsum[hit])[:, None]
    ref_counts = counts + wsum
    _minibatch_move(C, sums, wsum, counts)
    np.testing.assert_array_equal(C, ref)  # the same operations: the same rounding
    np.testing.assert_array_equal(counts, ref_counts)
    assert not sums.any()  # ready for the next minibatch


@pytest.mark.parametrize("sparse", [True, False])
def test_minibatch_steps_follow_the_running_means(sparse):
    Xr = _powerlaw(600, 60, seed=6) if sparse else _blobs(n_per=60, k=4, d=12, seed=6)[0]
    X = Xr.T.tocsc() if sparse else np.asfortranarray(Xr.T)
    k = 4
    rng = np.random.default_rng(0)
    w = rng.uniform(0.5, 2, X.shape[1])
    C = np.array(Xr[:k].toarray() if sparse else Xr[:k], np.float64)
    model = KMeansModel(n_clusters=k, dtype="float64", reassignment_ratio=0.0)
    model.set_parameters(C)
    counts = np.zeros(k)
    Xd = X.toarray() if sparse else X
    for s in range(0, X.shape[1], 100):  # consecutive steps reuse the model's sums buffer
        xb, wb = Xd[:, s:s + 100], w[s:s + 100]
        d = ((xb[None, :, :] - C[:, :, None]) ** 2).sum(axis=1)
        lab = d.argmin(axis=0)
        for c in range(k):
            sel = lab == c
            if sel.any():
                new = counts[c] + wb[sel].sum()
                C[c] = (C[c] * counts[c] + xb[:, sel] @ wb[sel]) / new
                counts[c] = new
        model.update(Minibatch(X[:, s:s + 100], None, wb))
    np.testing.assert_allclose(model.centers, C, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(model.counts, counts, rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cluster_sums_match_numpy(dtype):
    Xr = _powerlaw(300, 80, seed=3, dtype=dtype)
    X = Xr.T.tocsc()
    m, k = X.shape[1], 6
    rng = np.random.default_rng(1)
    labels = rng.integers(0, k - 1, m).astype(np.int32)  # cluster k-1 stays empty
    w = rng.uniform(0.5, 2, m)
    order, starts = np.empty(m, np.int64), np.empty(k + 1, np.int64)
    _cluster_order(labels, k, starts, order)
    assert np.all(np.diff(labels[order]) >= 0)
    onehot = np.zeros((k, m))
    onehot[labels, np.arange(m)] = w
    ref = onehot @ X.toarray().T.astype(np.float64)
    got = {}
    for sparse in (True, False):
        sums, wsum = np.zeros((k, X.shape[0])), np.zeros(k)
        got[sparse] = sums
        if sparse:
            _csc_cluster_sums(X.indptr, X.indices, X.data, w, labels, sums, wsum)
        else:
            _dense_cluster_sums(np.ascontiguousarray(X.toarray().T), w, order, starts, sums,
                                wsum)
        np.testing.assert_allclose(sums, ref, rtol=1e-6 if dtype == np.float32 else 1e-12)
        np.testing.assert_allclose(wsum, onehot.sum(axis=1), rtol=1e-12)
        assert wsum[-1] == 0
    # the column-order sparse pass and the per-cluster dense one add each center's examples
    # in the same (increasing) order: the same bits
    np.testing.assert_array_equal(got[True], got[False])


# ---------------------------------------------------------------------------------------------
# planted structure


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("est", ["lloyd", "minibatch"])
def test_well_separated_clusters_are_recovered(sparse, est):
    X, y = _blobs(sparse=sparse, seed=2)
    km = (KMeans(5, n_init=3, random_state=0) if est == "lloyd"
          else MiniBatchKMeans(5, batch_size=100, max_iter=20, random_state=0))
    labels = km.fit_predict(X)
    assert adjusted_rand_score(y, labels) == 1.0
    np.testing.assert_array_equal(km.predict(X), labels)


# ---------------------------------------------------------------------------------------------
# against scikit-learn from the same init


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", ["sparse", "dense"])
def test_inertia_equals_scikit_learn_from_the_same_init(dtype, kind):
    Xr = _powerlaw(1500, 300, seed=5, dtype=dtype)
    X = Xr if kind == "sparse" else Xr.toarray()
    init = np.asarray(Xr[np.arange(0, 1500, 150)].todense(), dtype=dtype) + 0.01
    ref = SKKMeans(10, init=init, n_init=1, tol=0, max_iter=300).fit(X)
    ours = KMeans(10, init=init, tol=0, max_iter=300).fit(X)
    rtol = 1e-6 if dtype == np.float64 else 1e-4
    assert abs(ours.inertia_ - ref.inertia_) <= rtol * ref.inertia_
    assert ours.n_iter_ == ref.n_iter_
    assert adjusted_rand_score(ref.labels_, ours.labels_) > (0.999 if dtype == np.float64
                                                            else 0.99)
    np.testing.assert_allclose(ours.cluster_centers_, ref.cluster_centers_, rtol=rtol,
                               atol=rtol)
    np.testing.assert_allclose(ours.transform(X[:20]), ref.transform(X[:20]), rtol=1e-3,
                               atol=1e-3)
    assert ours.score(X) == pytest.approx(-ours.inertia_, rel=1e-6)
    # Hamerly's bounds: the same iterations, the same result
    ham = KMeans(10, init=init, tol=0, max_iter=300, algorithm="hamerly").fit(X)
    assert abs(ham.inertia_ - ref.inertia_) <= rtol * ref.inertia_
    assert ham.n_iter_ == ref.n_iter_
    np.testing.assert_allclose(ham.cluster_centers_, ours.cluster_centers_, rtol=rtol,
                               atol=rtol)
    assert sum(ham._model_._recomputed) < ham.n_iter_ * X.shape[0]  # some were skipped


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k", [2, 12])
def test_elkan_gives_lloyds_labels_exactly_on_sparse_data(dtype, k):
    Xr = _powerlaw(3000, 400, seed=k, dtype=dtype)
    X = Xr.T.tocsc()
    init = np.asarray(Xr[np.arange(0, 3000, 3000 // k)[:k]].todense(), dtype=dtype) + 0.01
    model = KMeansModel(n_clusters=k, dtype=np.dtype(dtype).name)
    model.init(X.shape[0])
    model._trace_labels = []
    res = model.fit(X, init=init, tol=0, max_iter=300, algorithm="elkan")
    assert sum(model._recomputed) < res.n_iter * k * X.shape[1] / 2  # most were skipped
    # Lloyd step by step (its E-step is KMeansModel.assign): every iteration's labels agree
    lloyd = KMeansModel(n_clusters=k, dtype=np.dtype(dtype).name)
    lloyd.init(X.shape[0])
    lloyd.set_parameters(init)
    Xd = X.toarray().astype(np.float64)
    for it, elkan_labels in enumerate(model._trace_labels):
        labels, _ = lloyd.assign(X)
        np.testing.assert_array_equal(elkan_labels, labels, err_msg=f"iteration {it}")
        onehot = np.zeros((k, X.shape[1]))
        onehot[labels, np.arange(X.shape[1])] = 1.0
        lloyd.centers[...] = (onehot @ Xd.T) / onehot.sum(axis=1)[:, None]
    assert res.converged and len(model._trace_labels) == res.n_iter
    rtol = 1e-6 if dtype == np.float64 else 1e-4
    np.testing.assert_allclose(model.centers, lloyd.centers, rtol=rtol, atol=rtol)
    ref = SKKMeans(k, init=init, n_init=1, tol=0, max_iter=300).fit(Xr)
    assert res.n_iter == ref.n_iter_
    assert abs(res.inertia - ref.inertia_) <= rtol * ref.inertia_


def test_elkan_sparse_converged_fit_skips_the_final_full_pass(monkeypatch):
    Xr = _powerlaw(1500, 300, seed=9)
    init = np.asarray(Xr[np.arange(0, 1500, 150)].todense()) + 0.01
    lloyd = KMeans(10, init=init, tol=0, algorithm="lloyd").fit(Xr)

    def no_full_pass(*args, **kwargs):
        raise AssertionError("a full E-step after Elkan converged")

    monkeypatch.setattr(KMeansModel, "assign", no_full_pass)
    elkan = KMeans(10, init=init, tol=0, algorithm="elkan").fit(Xr)
    assert elkan.n_iter_ == lloyd.n_iter_ < 300  # converged: no label changed
    np.testing.assert_array_equal(elkan.labels_, lloyd.labels_)
    assert elkan.inertia_ == pytest.approx(lloyd.inertia_, rel=1e-12)


@pytest.mark.parametrize("sparse", [False, True])
def test_elkan_estimator_matches_scikit_learn(sparse):
    Xr = _powerlaw(1500, 300, seed=8)
    X = Xr if sparse else Xr.toarray()
    init = np.asarray(Xr[np.arange(0, 1500, 150)].todense()) + 0.01
    ref = SKKMeans(10, init=init, n_init=1, tol=1e-4).fit(X)
    ours = KMeans(10, init=init, tol=1e-4, algorithm="elkan").fit(X)
    assert ours.n_iter_ == ref.n_iter_
    assert abs(ours.inertia_ - ref.inertia_) <= 1e-6 * ref.inertia_
    np.testing.assert_allclose(ours.cluster_centers_, ref.cluster_centers_, rtol=1e-6,
                               atol=1e-6)
    np.testing.assert_array_equal(ours.labels_, ours.predict(X))


def test_auto_runs_elkan_when_the_bounds_fit_else_lloyd(monkeypatch):
    Xr = _powerlaw(1200, 200, seed=9)
    X = Xr.T.tocsc()
    init = np.asarray(Xr[np.arange(0, 1200, 150)].todense()) + 0.01
    assert _kmeans._auto_algorithm(X, 8, None) == "elkan"
    assert _kmeans._auto_algorithm(MatSource(X, batch_size=100), 8, None) == "lloyd"
    lloyd = KMeans(8, init=init, tol=1e-4, algorithm="lloyd").fit(Xr)
    auto = KMeans(8, init=init, tol=1e-4).fit(Xr)  # the default
    assert auto.algorithm == "auto"
    # Elkan's bounds skipped distances (Lloyd records none), with Lloyd's labels exactly
    assert sum(auto._model_._recomputed) < auto.n_iter_ * 8 * X.shape[1] / 2
    np.testing.assert_array_equal(auto.labels_, lloyd.labels_)
    assert auto.n_iter_ == lloyd.n_iter_
    assert auto.inertia_ == pytest.approx(lloyd.inertia_, rel=1e-12)
    # bounds larger than the budget: Lloyd
    monkeypatch.setattr(_kmeans, "ELKAN_MAX_BOUND_BYTES", 8 * X.shape[1] * 8 - 1)
    assert _kmeans._auto_algorithm(X, 8, None) == "lloyd"
    small = KMeans(8, init=init, tol=1e-4).fit(Xr)
    assert not hasattr(small._model_, "_recomputed")
    np.testing.assert_array_equal(small.labels_, lloyd.labels_)


@pytest.mark.parametrize("algorithm", ["lloyd", "elkan"])
def test_empty_cluster_is_relocated_as_scikit_learn_does(algorithm):
    X, _ = _blobs(n_per=40, k=3, d=4, seed=7)
    init = np.vstack([X[:2], [[1e3] * 4]])  # the third center attracts nobody
    ref = SKKMeans(3, init=init, n_init=1, tol=0).fit(X)
    ours = KMeans(3, init=init, tol=0, algorithm=algorithm).fit(X)
    assert abs(ours.inertia_ - ref.inertia_) <= 1e-9 * ref.inertia_
    assert len(np.unique(ours.labels_)) == 3


def test_kmeans_plusplus_spreads_the_centers():
    X, y = _blobs(n_per=50, k=6, d=5, seed=11)
    C, where = kmeans_plusplus(np.asfortranarray(X.T), 6, rng=np.random.default_rng(0))
    np.testing.assert_array_equal(C, X[where[:, 1]])
    assert len(set(y[where[:, 1]])) == 6  # one seed in each well-separated cluster


@pytest.mark.parametrize("algorithm", ["lloyd", "elkan"])
def test_sample_weight_equals_repeated_samples(algorithm):
    X, _ = _blobs(n_per=30, k=3, d=4, seed=4)
    init = X[:3]
    sw = np.random.default_rng(0).integers(1, 4, len(X))
    a = KMeans(3, init=init, tol=0, algorithm=algorithm).fit(X, sample_weight=sw)
    b = KMeans(3, init=init, tol=0).fit(np.repeat(X, sw, axis=0))
    np.testing.assert_allclose(a.cluster_centers_, b.cluster_centers_, rtol=1e-12)
    assert a.inertia_ == pytest.approx(b.inertia_, rel=1e-12)


def test_elkan_with_one_cluster_and_weighted_sparse_data():
    Xr = _powerlaw(600, 80, seed=9)
    sw = np.random.default_rng(1).uniform(0.5, 2, 600)
    one = KMeans(1, init=np.ones((1, 80)), tol=0, algorithm="elkan").fit(Xr)
    np.testing.assert_allclose(one.cluster_centers_[0], np.asarray(Xr.mean(axis=0)).ravel(),
                               rtol=1e-12, atol=1e-15)
    init = np.asarray(Xr[:6].todense()) + 0.01
    ref = SKKMeans(6, init=init, n_init=1, tol=0).fit(Xr, sample_weight=sw)
    ours = KMeans(6, init=init, tol=0, algorithm="elkan").fit(Xr, sample_weight=sw)
    assert ours.n_iter_ == ref.n_iter_
    assert abs(ours.inertia_ - ref.inertia_) <= 1e-9 * ref.inertia_


# ---------------------------------------------------------------------------------------------
# minibatch


@pytest.mark.slow
def test_minibatch_reaches_the_full_batch_inertia():
    Xr = _powerlaw(4000, 200, seed=8)
    full = KMeans(8, n_init=3, random_state=0).fit(Xr)
    mb = MiniBatchKMeans(8, batch_size=256, max_iter=10, random_state=0).fit(Xr)
    assert mb.inertia_ <= 1.10 * full.inertia_  # within 10% of Lloyd's local optimum


def test_model_trains_in_a_learner_with_heldout_inertia():
    Xr, y = _blobs(n_per=200, k=4, d=10, seed=9)
    X = np.asfortranarray(Xr.T)
    model = KMeansModel(n_clusters=4, dtype="float64", seed=1)
    learner = Learner(MatSource(X[:, :600], batch_size=100), model, ModelUpdate(),
                      heldout=MatSource(X[:, 600:], batch_size=100), n_passes=3,
                      eval_every=2, progress=False)
    res = learner.train()
    held = [r["heldout_loss"] for r in res.trace]
    assert held[-1] <= held[0]
    assert adjusted_rand_score(y, model.predict(X)) == 1.0
    # the held-out loss is the mean inertia per example (within-cluster variance ~ d)
    assert 0.5 * 10 < held[-1] < 2 * 10
    partial = MiniBatchKMeans(4, random_state=1)
    for s in range(0, 800, 100):
        partial.partial_fit(Xr[s:s + 100])
    assert adjusted_rand_score(y, partial.predict(Xr)) == 1.0


def test_learner_sparse_minibatches_float32():
    Xr = _powerlaw(3000, 300, seed=12, dtype=np.float32)
    X = Xr.T.tocsc()
    model = KMeansModel(n_clusters=5)
    Learner(MatSource(X, batch_size=500), model, ModelUpdate(), n_passes=2,
            progress=False).train()
    ref = KMeans(5, init=np.asarray(model.centers), tol=0).fit(Xr)
    _, mind = model.assign(X)
    assert mind.sum() <= 1.3 * ref.inertia_  # a minibatch model near Lloyd from there
    assert model.flops_per_step(type("B", (), {"X": X})()) > 2 * 5 * X.nnz
    cost = model.cost(type("B", (), {"X": X})())
    assert cost.bytes > X.nnz * 4 and cost.flops == model.flops_per_step(
        type("B", (), {"X": X})())


# ---------------------------------------------------------------------------------------------
# distributed Lloyd


def _data_for_ranks():
    Xr = _powerlaw(1200, 150, seed=21)
    return Xr.T.tocsc()


def _rank_lloyd(comm, seeded):
    X = _data_for_ranks()
    parts = np.array_split(np.arange(X.shape[1]), comm.size)
    mine = X[:, parts[comm.rank]].tocsc()
    model = KMeansModel(n_clusters=7, dtype="float64", seed=3)
    if seeded:
        model.seed_centers(mine, comm=comm)
        init = None
    else:
        init = X[:, :7].T.toarray() + 0.05
    res = model.fit(mine, max_iter=100, tol=0.0, comm=comm, init=init)
    return np.asarray(model.centers), res.labels, res.inertia, res.n_iter


def _single(seeded):
    X = _data_for_ranks()
    model = KMeansModel(n_clusters=7, dtype="float64", seed=3)
    if seeded:
        model.seed_centers(X)
        init = None
    else:
        init = X[:, :7].T.toarray() + 0.05
    res = model.fit(X, max_iter=100, tol=0.0, init=init)
    return np.asarray(model.centers), res.labels, res.inertia, res.n_iter


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("K", [2, 4])
def test_distributed_lloyd_equals_single_process(K):
    ref = _single(False)
    out = run(_rank_lloyd, K, backend="tcp", args=(False,), timeout=60)
    labels = np.concatenate([o[1] for o in out])
    for C, _, inertia, n_iter in out:
        np.testing.assert_array_equal(C, out[0][0])  # the same centers on every rank
        np.testing.assert_allclose(C, ref[0], rtol=1e-10, atol=1e-12)
        assert inertia == pytest.approx(ref[2], rel=1e-12)
        assert n_iter == ref[3]
    np.testing.assert_array_equal(labels, ref[1])


@pytest.mark.slow
@pytest.mark.multiprocess
def test_distributed_kmeans_plusplus_equals_single_process():
    ref = _single(True)
    out = run(_rank_lloyd, 2, backend="tcp", args=(True,), timeout=60)
    np.testing.assert_allclose(out[0][0], ref[0], rtol=1e-10, atol=1e-12)
    assert out[1][2] == pytest.approx(ref[2], rel=1e-12)


def test_estimator_with_an_in_process_comm_equals_single_process():
    Xr = _powerlaw(800, 100, seed=22)
    init = Xr[:6].toarray() + 0.1
    ref = KMeans(6, init=init, tol=0).fit(Xr)

    def work(comm):
        part = np.array_split(np.arange(800), comm.size)[comm.rank]
        km = KMeans(6, init=init, tol=0, comm=comm).fit(Xr[part])
        return km.cluster_centers_, km.inertia_, km.labels_

    out = run(work, 3, backend="threads", timeout=60)
    np.testing.assert_allclose(out[0][0], ref.cluster_centers_, rtol=1e-10, atol=1e-12)
    assert out[2][1] == pytest.approx(ref.inertia_, rel=1e-12)
    np.testing.assert_array_equal(np.concatenate([o[2] for o in out]), ref.labels_)


# ---------------------------------------------------------------------------------------------
# bad input


def test_bad_input_gets_clear_errors():
    X, _ = _blobs(n_per=3, k=2, d=3)
    with pytest.raises(ValueError, match="n_clusters"):
        KMeans(7).fit(X)
    with pytest.raises(ValueError, match="n_clusters"):
        MiniBatchKMeans(7).fit(X)
    with pytest.raises(ValueError, match="n_clusters"):
        kmeans_plusplus(np.asfortranarray(X.T), 7)
    with pytest.raises(ValueError, match="0 sample"):
        KMeans(2).fit(np.empty((0, 3)))
    with pytest.raises(ValueError):
        KMeans(2).fit(np.array([["a", "b"], ["c", "d"], ["e", "f"]]))
    with pytest.raises(ValueError, match="init"):
        KMeans(2, init=np.zeros((3, 3))).fit(X)
    with pytest.raises(ValueError, match="init"):
        KMeans(2, init="kmeans").fit(X)
    with pytest.raises(ValueError, match="n_clusters"):
        KMeans(0).fit(X)
    with pytest.raises(ValueError, match="algorithm"):
        KMeans(2, algorithm="elkans").fit(X)
    model = KMeansModel(n_clusters=2, dtype="float32")
    model.set_parameters(np.zeros((2, 3)))
    with pytest.raises(TypeError, match="dtype"):
        model.predict(np.zeros((3, 4)))
    with pytest.raises(ValueError, match="features"):
        model.predict(np.zeros((5, 4), np.float32))
    with pytest.raises(ValueError, match="centers"):
        model.set_parameters(np.zeros((3, 3)))
    with pytest.raises(RuntimeError, match="not initialised"):
        KMeansModel().predict(np.zeros((3, 4), np.float32))


@pytest.mark.slow
def test_scikit_learn_estimator_checks():
    from sklearn.utils.estimator_checks import check_estimator

    # sample-weight equivalence needs the same init from repeated and weighted data, which a
    # random init cannot give (scikit-learn's own KMeans marks these checks as expected to fail)
    expected = {"check_sample_weight_equivalence_on_dense_data": "random init",
                "check_sample_weight_equivalence_on_sparse_data": "random init"}
    for est in (KMeans(3, random_state=0, max_iter=20),
                MiniBatchKMeans(3, random_state=0, max_iter=3, batch_size=50)):
        res = check_estimator(est, on_fail=None, expected_failed_checks=expected)
        failed = [r["check_name"] for r in res if r["status"] == "failed"]
        assert failed == [], failed


@pytest.mark.parametrize("sparse", [False, True])
def test_elkan_relocates_only_when_a_cluster_is_empty(monkeypatch, sparse):
    """The member counts come from the labels (a sparse fit builds no cluster order): an
    empty cluster is relocated as scikit-learn does, and a fit without one runs no
    relocation (each would cost a full E-step and restart the bounds)."""
    rng = np.random.default_rng(7)
    Xd = rng.uniform(0, 5, (300, 30)) * (rng.uniform(size=(300, 30)) < 0.2)
    X = sp.csr_matrix(Xd) if sparse else Xd
    init = np.vstack([Xd[:2], np.full((1, 30), 1e3)])  # the third center attracts nobody
    ref = SKKMeans(3, init=init, n_init=1, tol=0).fit(X)
    ours = KMeans(3, init=init, tol=0, algorithm="elkan").fit(X)
    assert abs(ours.inertia_ - ref.inertia_) <= 1e-9 * ref.inertia_
    assert len(np.unique(ours.labels_)) == 3
    calls = []
    real = KMeansModel._reassign_relocate
    monkeypatch.setattr(KMeansModel, "_reassign_relocate",
                        lambda self, *a: calls.append(1) or real(self, *a))
    Xr = _powerlaw(3000, 400, seed=3)
    init = np.asarray(Xr[np.arange(0, 3000, 300)].todense()) + 0.01
    ours = KMeans(10, init=init, tol=0, algorithm="elkan").fit(Xr if sparse else Xr.toarray())
    ref = SKKMeans(10, init=init, n_init=1, tol=0).fit(Xr)
    assert ours.n_iter_ == ref.n_iter_ > 3
    assert abs(ours.inertia_ - ref.inertia_) <= 1e-9 * ref.inertia_
    assert calls == []
