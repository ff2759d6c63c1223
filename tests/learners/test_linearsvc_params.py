"""LinearSVC's scikit-learn parameters (issue 34): ``penalty="l1"`` (squared hinge, primal),
``dual`` ("auto" / True / False, scikit-learn's combinations), and liblinear's one-vs-rest
``class_weight`` with more than two classes; each against scikit-learn's LinearSVC on the same
call.

liblinear's L1 solver is run at ``tol=1e-8``: at 1e-12 it runs to ``max_iter`` and drifts
away from its own optimum (measured: objective 21.6492 against 21.6494 at 1e-8 with
``intercept_scaling=100``), while at 1e-8 it agrees with ours to 1e-8.
"""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn import svm as sksvm
from sklearn.base import clone
from sklearn.datasets import make_classification
from sklearn.utils.class_weight import compute_class_weight

from roofline.learners import LinearSVC

ATOL = 1e-6


def _sk(**kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sksvm.LinearSVC(**kw)


def _fit_sk(X, y, sw=None, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sksvm.LinearSVC(**kw).fit(X, y, sample_weight=sw)


# ---------------------------------------------------------------------------------------------
# penalty="l1"


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("fit_intercept", [False, True])
@pytest.mark.parametrize("n_classes", [2, 3])
def test_l1_squared_hinge_matches_liblinear(n_classes, fit_intercept, sparse):
    """liblinear's L1-regularised squared hinge (its intercept a constant feature, L1
    regularised too: ``intercept_scaling=1``), with sample weights; the same zeros."""
    X, y = make_classification(300, 12, n_informative=4, n_classes=n_classes,
                               random_state=n_classes)
    sw = np.random.default_rng(0).uniform(0.5, 2.0, len(y))
    Xin = sp.csr_matrix(X) if sparse else X
    ours = LinearSVC(C=0.1, penalty="l1", dual=False, fit_intercept=fit_intercept,
                     intercept_scaling=1.0 if fit_intercept else None, tol=1e-10,
                     max_iter=5000).fit(Xin, y, sample_weight=sw)
    sk = _fit_sk(X, y, sw, C=0.1, penalty="l1", dual=False, fit_intercept=fit_intercept,
                 tol=1e-8, max_iter=100_000)
    assert ours.solver_ == "lbfgs-b"
    assert (sk.coef_ == 0).sum() >= 2  # a sparse model: the zeros are tested
    np.testing.assert_array_equal(ours.coef_ == 0, sk.coef_ == 0)
    np.testing.assert_allclose(ours.coef_, sk.coef_, rtol=0, atol=ATOL)
    np.testing.assert_allclose(ours.intercept_, sk.intercept_, rtol=0, atol=ATOL)


@pytest.mark.parametrize("sparse", [False, True])
def test_l1_multiclass_class_weight_matches_liblinear(sparse):
    """L1 with liblinear's one-vs-rest class weights (here L-BFGS-B once stalled at a
    projected gradient of 0.04 on class 2, dense input: the restarts go on to the optimum)."""
    X, y = make_classification(300, 10, n_informative=4, n_classes=3, random_state=0)
    cw = {0: 0.5, 1: 3.0, 2: 1.5}
    Xin = sp.csr_matrix(X) if sparse else X
    ours = LinearSVC(C=0.1, penalty="l1", class_weight=cw, intercept_scaling=1.0, tol=1e-10,
                     max_iter=5000).fit(Xin, y)
    sk = _fit_sk(X, y, C=0.1, penalty="l1", dual=False, class_weight=cw, tol=1e-8,
                 max_iter=100_000)
    np.testing.assert_array_equal(ours.coef_ == 0, sk.coef_ == 0)
    np.testing.assert_allclose(ours.coef_, sk.coef_, rtol=0, atol=ATOL)
    np.testing.assert_allclose(ours.intercept_, sk.intercept_, rtol=0, atol=ATOL)


def test_l1_differs_from_l2_and_unregularised_intercept():
    """The L1 fit is not the L2 one (the test above can fail); without ``intercept_scaling``
    the intercept is free: a lower objective than liblinear's, whose intercept pays L1."""
    X, y = make_classification(300, 12, n_informative=4, random_state=2)
    ys = 2 * y - 1
    l1 = LinearSVC(C=0.1, penalty="l1", tol=1e-10, max_iter=5000).fit(X, y)
    l2 = LinearSVC(C=0.1, tol=1e-10, max_iter=5000).fit(X, y)
    assert (l1.coef_ == 0).sum() >= 2 and (l2.coef_ == 0).sum() == 0

    def objective(est):  # scikit-learn's, the intercept not regularised
        m = np.maximum(0.0, 1.0 - ys * (X @ est.coef_[0] + est.intercept_[0]))
        return np.abs(est.coef_).sum() + 0.1 * np.sum(m * m)

    sk = _fit_sk(X, y, C=0.1, penalty="l1", dual=False, tol=1e-8, max_iter=100_000)
    assert objective(l1) < objective(sk) - 1e-3


def test_l1_float32_and_warm_start():
    X, y = make_classification(300, 12, n_informative=4, random_state=2)
    X32 = X.astype(np.float32)
    a = LinearSVC(C=0.1, penalty="l1", tol=1e-10, max_iter=5000).fit(X32, y)
    b = LinearSVC(C=0.1, penalty="l1", tol=1e-10, max_iter=5000).fit(X32.astype(np.float64), y)
    assert a.coef_.dtype == np.float64  # as scikit-learn's LinearSVC
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=0, atol=1e-8)
    w = LinearSVC(C=0.1, penalty="l1", tol=1e-7, max_iter=5000, warm_start=True).fit(X, y)
    n_cold = w.n_iter_[0]
    w.set_params(C=0.11).fit(X, y)
    cold = LinearSVC(C=0.11, penalty="l1", tol=1e-7, max_iter=5000).fit(X, y)
    assert w.n_iter_[0] < n_cold
    np.testing.assert_allclose(w.coef_, cold.coef_, rtol=0, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# dual: scikit-learn's combinations


@pytest.mark.parametrize("penalty", ["l1", "l2"])
@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
@pytest.mark.parametrize("dual", ["auto", True, False])
def test_dual_combinations_are_sklearns(penalty, loss, dual):
    """Ours raises exactly where scikit-learn's does, and fits where it fits."""
    X, y = make_classification(80, 5, random_state=0)

    def raises(make):
        try:
            make().fit(X, y)
        except ValueError as e:
            return str(e)
        return None

    theirs = raises(lambda: _sk(penalty=penalty, loss=loss, dual=dual, max_iter=20))
    ours = raises(lambda: LinearSVC(penalty=penalty, loss=loss, dual=dual, max_iter=20,
                                    tol=1e-2))
    assert (ours is None) == (theirs is None), (ours, theirs)
    if ours is not None:
        assert "Unsupported set of arguments" in ours
        assert ("penalty='l1'" in ours) or ("loss='hinge'" in ours)


@pytest.mark.parametrize("dual", ["auto", True, False])
def test_dual_gives_the_same_optimum(dual):
    """Every ``dual`` reaches liblinear's optimum (its primal TRON fit: its dual CD stops
    ~1e-4 short of it for the squared hinge even at ``tol=1e-12``)."""
    X, y = make_classification(200, 6, random_state=1)
    ours = LinearSVC(C=0.5, dual=dual, intercept_scaling=1.0, tol=1e-10,
                     max_iter=2000).fit(X, y)
    sk = _fit_sk(X, y, C=0.5, dual=False, tol=1e-12, max_iter=200_000)
    np.testing.assert_allclose(ours.coef_, sk.coef_, rtol=0, atol=ATOL)
    np.testing.assert_allclose(ours.intercept_, sk.intercept_, rtol=0, atol=ATOL)


@pytest.mark.parametrize("kw, match", [
    ({"penalty": "l3"}, "penalty must be 'l2' or 'l1'"),
    ({"dual": "yes"}, "dual must be 'auto', True or False"),
    ({"dual": 1}, "dual must be 'auto', True or False"),
    ({"penalty": "l1", "solver": "scd"}, "penalty='l1' .* solver must be 'auto' or 'lbfgs'"),
    ({"penalty": "l1", "device": "gpu"}, "penalty='l1' fits in this process on the CPU"),
])
def test_bad_penalty_and_dual_raise(kw, match):
    X, y = make_classification(60, 4, random_state=0)
    with pytest.raises(ValueError, match=match):
        LinearSVC(**kw).fit(X, y)


def test_new_parameters_clone_and_get_params():
    est = LinearSVC(penalty="l1", dual=False, C=0.3)
    c = clone(est)
    assert c.get_params()["penalty"] == "l1" and c.get_params()["dual"] is False
    assert LinearSVC().get_params()["dual"] == "auto"


# ---------------------------------------------------------------------------------------------
# class_weight with more than two classes: liblinear's one-vs-rest weights


CLASS_WEIGHTS = [{0: 0.5, 1: 3.0, 2: 1.5}, {2: 4.0}, "balanced"]


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("class_weight", CLASS_WEIGHTS)
def test_multiclass_class_weight_matches_liblinear(class_weight, sparse):
    X, y = make_classification(300, 6, n_informative=4, n_classes=3, weights=[0.5, 0.3, 0.2],
                               random_state=0)
    sw = np.random.default_rng(0).uniform(0.5, 2.0, len(y))
    Xin = sp.csr_matrix(X) if sparse else X
    ours = LinearSVC(C=0.3, class_weight=class_weight, intercept_scaling=1.0, tol=1e-10,
                     max_iter=2000).fit(Xin, y, sample_weight=sw)
    sk = _fit_sk(X, y, sw, C=0.3, class_weight=class_weight, tol=1e-12, max_iter=200_000)
    np.testing.assert_allclose(ours.coef_, sk.coef_, rtol=0, atol=ATOL)
    np.testing.assert_allclose(ours.intercept_, sk.intercept_, rtol=0, atol=ATOL)


def test_multiclass_class_weight_is_not_every_sample_by_its_class():
    """What the estimator did before: each one-vs-rest problem weighing every sample by its
    own class's weight.  liblinear's fit is far from it (so the test above can fail)."""
    X, y = make_classification(300, 6, n_informative=4, n_classes=3, random_state=0)
    cw = {0: 0.5, 1: 3.0, 2: 1.5}
    ours = LinearSVC(C=0.3, class_weight=cw, intercept_scaling=1.0, tol=1e-10).fit(X, y)
    per_sample = np.array([cw[c] for c in y])
    old = LinearSVC(C=0.3, intercept_scaling=1.0, tol=1e-10).fit(X, y, sample_weight=per_sample)
    assert np.abs(ours.coef_ - old.coef_).max() > 0.03


def test_balanced_counts_weighted_samples_as_sklearn():
    """scikit-learn 1.9's LinearSVC counts the classes of ``"balanced"`` weighted by
    ``sample_weight`` (``compute_class_weight(..., sample_weight=)``); so does ours."""
    X, y = make_classification(400, 8, weights=[0.85, 0.15], flip_y=0.05, random_state=0)
    sw = np.where(y == 1, 3.0, 1.0)
    ours = LinearSVC(C=0.5, class_weight="balanced", intercept_scaling=1.0,
                     tol=1e-10).fit(X, y, sample_weight=sw)
    sk = _fit_sk(X, y, sw, C=0.5, class_weight="balanced", tol=1e-12, max_iter=200_000)
    np.testing.assert_allclose(ours.coef_, sk.coef_, rtol=0, atol=ATOL)
    unweighted = compute_class_weight("balanced", classes=np.array([0, 1]), y=y)
    by_count = LinearSVC(C=0.5, class_weight=dict(enumerate(unweighted)),
                         intercept_scaling=1.0, tol=1e-10).fit(X, y, sample_weight=sw)
    assert np.abs(by_count.coef_ - ours.coef_).max() > 1e-2


def test_partial_fit_multiclass_class_weight_raises():
    X, y = make_classification(100, 5, n_informative=3, n_classes=3, random_state=0)
    est = LinearSVC(solver="sgd", class_weight={0: 2.0})
    with pytest.raises(ValueError, match="partial_fit with more than two classes takes no "
                                         "class_weight"):
        est.partial_fit(X, y, classes=[0, 1, 2])
    LinearSVC(solver="sgd", class_weight={0: 2.0}).partial_fit(X, y % 2, classes=[0, 1])
