"""Elkan's compiled loop (learners/_kmeans.py: ``_elkan_iterations``, with its E-step's
one-candidate pair of products and dense data without zeros) against the step-by-step loop
and E-step it replaced (kept here as the reference): the same labels, centers, inertia,
iteration count and skipped distances, bit for bit, on dense and sparse data with empty
clusters, sample weights and both dtypes; the centers' norms against numpy's."""

import math

import numpy as np
import pytest
import scipy.sparse as sp
from numba import njit

from roofline import gmat
from roofline.learners._kmeans import (
    KMeansModel,
    KMeansResult,
    _center_sqnorms,
    _csc_label_dists,
    _csc_move_sums,
    _dot_col,
    _elkan_all,
    _elkan_half,
    _lloyd_move,
    _sqnorms,
)


@njit
def _reference_estep(indptr, indices, data, C, cnorm, xnorm, cum, halfcc, s, margin, first,
                     labels, U, L, counts, Lmin, cummax):
    """``_elkan_estep`` as it was before the one-candidate pair of products (serial)."""
    m = labels.shape[0]
    k = C.shape[0]
    nblk = (m + 255) // 256
    for b in range(nblk):
        acc = np.empty(k, np.float64)
        cnt = 0
        for j in range(b * 256, min(m, (b + 1) * 256)):
            xn = xnorm[j]
            if first:
                _elkan_all(indptr, indices, data, C, cnorm, xn, cum, j, acc, labels, U, L,
                           Lmin)
                cnt += k
                continue
            a = labels[j]
            mg = margin[j]
            u = U[j] + cum[a]
            if u + mg < s[a] or u + mg < Lmin[j] - cummax:
                continue
            n_cand = 0
            for c in range(k):
                if c != a and u + mg >= L[j, c] - cum[c] and u + mg >= halfcc[a, c]:
                    n_cand += 1
            if n_cand == 0:
                continue
            if n_cand > 1:  # every distance at once: k values per gathered feature
                _elkan_all(indptr, indices, data, C, cnorm, xn, cum, j, acc, labels, U, L,
                           Lmin)
                cnt += k
                continue
            tight = False
            ea = 0.0
            for c in range(k):
                if c == a:
                    continue
                lc = L[j, c] - cum[c]
                if u + mg < lc or u + mg < halfcc[a, c]:
                    continue
                if not tight:
                    ea = cnorm[a] - 2.0 * _dot_col(indptr, indices, data, C, j, a)
                    d = ea + xn
                    u = math.sqrt(d if d > 0.0 else 0.0)
                    L[j, a] = u + cum[a]
                    tight = True
                    cnt += 1
                    if u + mg < lc or u + mg < halfcc[a, c]:
                        continue
                ec = cnorm[c] - 2.0 * _dot_col(indptr, indices, data, C, j, c)
                cnt += 1
                d = ec + xn
                dc = math.sqrt(d if d > 0.0 else 0.0)
                L[j, c] = dc + cum[c]
                if ec < ea or (ec == ea and c < a):
                    a = c
                    ea = ec
                    u = dc
            labels[j] = a
            U[j] = u - cum[a]
            lm = np.inf
            for c in range(k):
                if c != a and L[j, c] < lm:
                    lm = L[j, c]
            Lmin[j] = lm
        counts[b] = cnt


def _einsum_cnorm(model):
    return np.einsum("ij,ij->i", model.centers, model.centers, dtype=np.float64)


def _reference_fit_elkan(model, X, w, xnorm, max_iter, tol):
    """The step-by-step Elkan loop (one Python iteration per pass, numpy's ``einsum`` for the
    centers' norms, the E-step above, the dense data with its zeros), as
    ``KMeansModel._fit_elkan`` was before the compiled loop."""
    k, m = model.opts.n_clusters, X.shape[1]
    n = X.shape[0]
    if gmat.is_sparse(X):
        indptr, indices, data = X.indptr, X.indices, X.data
    else:
        Xf = np.asfortranarray(X)
        indptr = np.arange(0, n * m + 1, n, dtype=np.int64)
        indices = np.tile(np.arange(n, dtype=np.int32), m)
        data = Xf.ravel(order="F")
    eps = float(np.finfo(model.dtype).eps)
    labels = np.zeros(m, np.int32)
    U, L, Lmin = np.zeros(m), np.zeros((m, k)), np.zeros(m)
    cum, halfcc, s_half, margin = np.zeros(k), np.zeros((k, k)), np.zeros(k), np.zeros(m)
    mbase = np.sqrt(xnorm) * (math.sqrt(64 * eps) + 64 * eps)
    counts = np.zeros(max((m + 255) // 256, 1), np.int64)
    order, starts = np.empty(m, np.int64), np.empty(k + 1, np.int64)
    labels_old = None
    converged = strict = False
    n_iter = 0
    first = fresh = True
    cc_exact, cc_at, cum_at = None, 0, cum.copy()
    delta = np.zeros(k)
    recomputed = []
    for it in range(max_iter):
        cn = _einsum_cnorm(model)
        if not first:
            if it - cc_at >= 8 or cc_exact is None:
                C64 = np.asarray(model.centers, np.float64)
                cc_exact = cn[:, None] + cn[None, :] - 2.0 * (C64 @ C64.T)
                np.maximum(cc_exact, 0.0, out=cc_exact)
                np.sqrt(cc_exact, out=cc_exact)
                cc_exact *= 0.5
                cc_at, cum_at = it, cum.copy()
            _elkan_half(cc_exact, cum, cum_at, halfcc, s_half)
        rc = math.sqrt(float(cn.max()))
        np.add(mbase, 2 * math.sqrt(64 * eps) * rc + 64 * eps * (float(cum.max()) + rc),
               out=margin)
        counts[:] = 0
        _reference_estep(indptr, indices, data, model.centers, cn, xnorm, cum, halfcc, s_half,
                         margin, first, labels, U, L, counts, Lmin, float(cum.max()))
        recomputed.append(int(counts.sum()))
        first = False
        n_moved = m if labels_old is None else int(np.count_nonzero(labels != labels_old))
        if fresh or 4 * n_moved > m or it % 16 == 0:
            fresh = False
            sums, wsum = np.zeros((k, n)), np.zeros(k)
            model._sums_into(X, w, labels, sums, wsum, order, starts)
            members = np.bincount(labels, minlength=k)
        elif n_moved:
            _csc_move_sums(indptr, indices, data, w, labels, labels_old, sums, wsum, members)
        if np.any(members == 0):
            model._reassign_relocate(X, w, labels, sums, wsum, order, starts)
            fresh = first = True
        shift = _lloyd_move(model.centers, sums, wsum, delta)
        model.counts = wsum.copy()
        cum += delta
        n_iter = it + 1
        if labels_old is not None and n_moved == 0:
            converged = strict = True
            break
        if shift <= tol:
            converged = True
            break
        labels_old = labels.copy()
    if strict and gmat.is_sparse(X):
        mind = np.empty(m, np.float64)
        _csc_label_dists(indptr, indices, data, model.centers, _einsum_cnorm(model), xnorm,
                         labels, mind)
    else:
        labels, mind = model.assign(X)
    model._recomputed = recomputed
    return KMeansResult(labels=labels, inertia=float(mind @ w), n_iter=n_iter,
                        converged=converged, inertia_trace=[])


def _problem(seed, sparse, dtype):
    """Power-law-ish columns (some empty), random centers from the data, one of them far
    away on odd seeds (an empty cluster), uneven sample weights on seeds divisible by 3."""
    rng = np.random.default_rng(seed)
    m, n, k = int(rng.integers(300, 1500)), int(rng.integers(10, 200)), int(rng.integers(2, 16))
    X = sp.random(n, m, density=float(rng.uniform(0.02, 0.3)), random_state=seed,
                  format="csc")
    X.data = rng.uniform(0.1, 3.0, X.nnz)
    C = X[:, rng.choice(m, k, replace=False)].T.toarray() + 0.01
    if seed % 2:
        C[-1] = 100.0  # attracts nobody: relocated
    w = rng.uniform(0.5, 2.0, m) if seed % 3 == 0 else np.ones(m)
    X = X.astype(dtype)
    if not sparse:
        X = np.asfortranarray(X.toarray())
    return X, C.astype(dtype), w


def _fit(X, C, w, tol, max_iter, reference, trace=False):
    model = KMeansModel(n_clusters=C.shape[0], dtype=X.dtype.name)
    model.init(X.shape[0])
    model.set_parameters(C)
    if trace:
        model._trace_labels = []
    fit = _reference_fit_elkan if reference else KMeansModel._fit_elkan
    return fit(model, X, w, _sqnorms(X), max_iter, tol), model


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_compiled_loop_equals_the_step_by_step_loop(seed, sparse, dtype):
    X, C, w = _problem(seed, sparse, dtype)
    tol = 0.0 if seed % 2 else 1e-4 * float(np.mean(_sqnorms(X))) / X.shape[0]
    for max_iter in (300, 3):  # to convergence, and stopped by max_iter
        ref, mref = _fit(X, C, w, tol, max_iter, reference=True)
        new, mnew = _fit(X, C, w, tol, max_iter, reference=False, trace=seed == 0)
        assert new.n_iter == ref.n_iter and new.converged == ref.converged
        np.testing.assert_array_equal(new.labels, ref.labels)
        np.testing.assert_array_equal(mnew.centers, mref.centers)
        np.testing.assert_array_equal(mnew.counts, mref.counts)
        assert new.inertia == ref.inertia
        assert mnew._recomputed == mref._recomputed  # the same bounds skipped the same pairs
        if seed == 0:
            assert len(mnew._trace_labels) == new.n_iter


def test_compiled_loop_relocates_like_the_step_by_step_loop():
    """Several empty clusters at once, on the first pass and after it."""
    rng = np.random.default_rng(5)
    Xd = rng.uniform(0, 5, (400, 12)) * (rng.uniform(size=(400, 12)) < 0.5)
    C = np.vstack([Xd[:3], np.full((3, 12), 1e3)])
    for X in (np.asfortranarray(Xd.T), sp.csc_matrix(Xd.T)):
        ref, mref = _fit(X, C, np.ones(400), 0.0, 300, reference=True)
        new, mnew = _fit(X, C, np.ones(400), 0.0, 300, reference=False)
        assert len(np.unique(new.labels)) == 6
        np.testing.assert_array_equal(new.labels, ref.labels)
        np.testing.assert_array_equal(mnew.centers, mref.centers)
        assert new.inertia == ref.inertia and new.n_iter == ref.n_iter


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k,n", [(1, 7), (1, 3000), (2, 1), (5, 333), (20, 5000)])
def test_center_sqnorms_match_numpy(dtype, k, n):
    C = np.asfortranarray(np.random.default_rng(k * n).normal(size=(k, n)).astype(dtype))
    out = np.empty(k)
    _center_sqnorms(C, out)
    C64 = C.astype(np.float64)
    np.testing.assert_allclose(out, (C64 * C64).sum(axis=1), rtol=1e-13)
    if k >= 2:  # numpy's strided einsum adds in the same order: the same bits
        np.testing.assert_array_equal(out, np.einsum("ij,ij->i", C, C, dtype=np.float64))


@pytest.mark.parametrize("sparse", [False, True])
def test_compiled_loop_equals_the_step_by_step_loop_on_digits(sparse):
    """A longer run: scikit-learn's bundled digits (1797 x 64, k = 10 from k-means++), its
    nonzero pixels jittered so that sums round (moved sums then differ from fresh ones in the
    last bits); 20-odd passes, the exact half distances refreshed several times."""
    from sklearn.datasets import load_digits

    from roofline.learners import kmeans_plusplus

    X = np.asfortranarray(load_digits().data.T.astype(np.float64))
    X[X > 0] += np.random.default_rng(2).uniform(0, 1, int(np.count_nonzero(X)))
    C, _ = kmeans_plusplus(X, 10, rng=0)
    if sparse:
        X = sp.csc_matrix(X)
    ref, mref = _fit(X, C, np.ones(X.shape[1]), 0.0, 300, reference=True)
    new, mnew = _fit(X, C, np.ones(X.shape[1]), 0.0, 300, reference=False)
    assert new.n_iter == ref.n_iter > 16 and new.converged
    np.testing.assert_array_equal(new.labels, ref.labels)
    np.testing.assert_array_equal(mnew.centers, mref.centers)
    assert new.inertia == ref.inertia
    assert mnew._recomputed == mref._recomputed


@pytest.mark.parametrize("zeros", [0.0, 0.5, 0.9])
def test_dense_zeros_skipped_keep_the_bits(zeros):
    """Dense data with signed values and a fraction of exact zeros (the compiled loop drops
    them when they are at least a fifth of the values): the same fit bit for bit."""
    rng = np.random.default_rng(int(10 * zeros))
    Xd = rng.normal(size=(900, 40)) * (rng.uniform(size=(900, 40)) >= zeros)
    X = np.asfortranarray(Xd.T)
    C = Xd[rng.choice(900, 8, replace=False)] + 0.01
    ref, mref = _fit(X, C, np.ones(900), 0.0, 300, reference=True)
    new, mnew = _fit(X, C, np.ones(900), 0.0, 300, reference=False)
    assert new.n_iter == ref.n_iter > 3
    np.testing.assert_array_equal(new.labels, ref.labels)
    np.testing.assert_array_equal(mnew.centers, mref.centers)
    assert new.inertia == ref.inertia
    assert mnew._recomputed == mref._recomputed
