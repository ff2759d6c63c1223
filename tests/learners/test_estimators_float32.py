"""float32 end to end (issue 34): with float32 input (or ``dtype="float32"``) the estimators
return what scikit-learn returns on the same call, dtypes and values.

scikit-learn's rules (checked here against the installed version, not assumed):
LogisticRegression, Ridge and LinearRegression keep float32 (``coef_``, ``intercept_``,
``predict_proba``, ``decision_function``, ``predict``); LinearSVC (liblinear) returns float64.

Values are compared with scikit-learn fitted on a float64 copy of the same float32 data (the
exact optimum of the very problem both fit): our solvers accumulate well enough to land within
float32 rounding of it (measured: 3e-7 for the logistic Newton fit, 2.5e-6 on coefficients of
~100 for LinearRegression), tighter than scikit-learn's own float32 fits (1e-4).
"""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn import linear_model as sklm
from sklearn import svm as sksvm
from sklearn.datasets import make_classification, make_regression

from roofline.datasources import make_criteo_like_matrix
from roofline.learners import LinearRegression, LinearSVC, LogisticRegression, Ridge

# float32 data: the optimum is the float64 one of the rounded data; our fits get within
# float32 rounding of it (relative to the largest coefficient)
RTOL32 = 2e-5


def _criteo(n=2000, n_bits=10, seed=0):
    """The Criteo-like problem (hashed one-hot features), rows as examples, float32 CSR."""
    Xc, y = make_criteo_like_matrix(n, seed=seed, n_bits=n_bits, dtype=np.float32)
    X = sp.csr_matrix(Xc.T)
    assert X.dtype == np.float32
    return X, y.astype(int)


def _close(ours, ref, rtol=RTOL32):
    ref = np.asarray(ref, dtype=np.float64)
    scale = max(np.abs(ref).max(), 1.0)
    np.testing.assert_allclose(np.asarray(ours, dtype=np.float64), ref, rtol=0,
                               atol=rtol * scale)


def _same_dtypes(ours, sk, X):
    """Every returned array has scikit-learn's dtype on the same ``X``."""
    assert ours.coef_.dtype == sk.coef_.dtype
    assert np.asarray(ours.intercept_).dtype == np.asarray(sk.intercept_).dtype
    assert type(ours.intercept_) is type(sk.intercept_)
    for method in ("predict_proba", "decision_function", "predict"):
        if hasattr(sk, method):
            a, b = getattr(ours, method)(X), getattr(sk, method)(X)
            assert a.dtype == b.dtype, method
            assert a.shape == b.shape, method


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("n_classes", [2, 4])
def test_logistic_regression_float32(n_classes, sparse):
    X, y = make_classification(400, 12, n_informative=8, n_classes=n_classes, random_state=3)
    X = X.astype(np.float32)
    sw = np.random.default_rng(0).uniform(0.5, 2, len(y))
    Xin = sp.csr_matrix(X) if sparse else X
    ours = LogisticRegression(C=0.5, tol=1e-8 if n_classes > 2 else 1e-10,
                              max_iter=1000).fit(Xin, y, sample_weight=sw)
    sk32 = sklm.LogisticRegression(C=0.5, tol=1e-12, max_iter=10_000).fit(Xin, y,
                                                                          sample_weight=sw)
    ref = sklm.LogisticRegression(C=0.5, tol=1e-12, max_iter=10_000).fit(
        X.astype(np.float64), y, sample_weight=sw)
    assert ours.coef_.dtype == np.float32
    _same_dtypes(ours, sk32, Xin)
    _close(ours.coef_, ref.coef_)
    _close(ours.intercept_, ref.intercept_)
    np.testing.assert_allclose(ours.predict_proba(Xin), ref.predict_proba(X), atol=1e-5)
    np.testing.assert_array_equal(ours.predict(Xin), ref.predict(X))


@pytest.mark.parametrize("solver", ["lbfgs", "scd"])
def test_logistic_regression_float32_other_solvers(solver):
    """The Learner's L-BFGS (float64 values inside) and the CD solvers on float32 data."""
    X, y = make_classification(300, 10, n_informative=5, random_state=0)
    X = X.astype(np.float32)
    ours = LogisticRegression(C=0.5, tol=1e-10, max_iter=3000, solver=solver,
                              random_state=0).fit(X, y)
    ref = sklm.LogisticRegression(C=0.5, tol=1e-12, max_iter=10_000).fit(X.astype(float), y)
    assert ours.coef_.dtype == np.float32 and ours.predict_proba(X).dtype == np.float32
    _close(ours.coef_, ref.coef_, rtol=1e-4 if solver == "scd" else RTOL32)


@pytest.mark.parametrize("sparse", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_criteo_like_float32_binary_and_multinomial(sparse):
    """The Criteo-like float32 problem (sparse, and densified): binary, and a 3-class label
    (the click plus whether one hashed column is set) for the multinomial fit; float32 out
    as scikit-learn's."""
    X, y = _criteo(n=2000 if sparse else 1000, n_bits=10 if sparse else 7)
    y3 = y + (X[:, 7].toarray().ravel() != 0)  # 0, 1, 2
    if not sparse:
        X = X.toarray()
    ref = sklm.LogisticRegression(C=0.1, tol=1e-12, max_iter=10_000).fit(
        X.astype(np.float64), y)
    ours = LogisticRegression(C=0.1, tol=1e-10, max_iter=1000).fit(X, y)
    sk32 = sklm.LogisticRegression(C=0.1, tol=1e-12, max_iter=10_000).fit(X, y)
    _same_dtypes(ours, sk32, X)
    _close(ours.coef_, ref.coef_)
    _close(ours.intercept_, ref.intercept_)
    np.testing.assert_allclose(ours.predict_proba(X), ref.predict_proba(X), atol=1e-5)

    assert len(np.unique(y3)) == 3
    ref = sklm.LogisticRegression(C=0.1, tol=1e-12, max_iter=10_000).fit(
        X.astype(np.float64), y3)
    ours = LogisticRegression(C=0.1, tol=1e-8, max_iter=1000).fit(X, y3)
    assert ours._multinomial
    _same_dtypes(ours, sk32.fit(X, y3), X)
    _close(ours.coef_, ref.coef_)
    np.testing.assert_allclose(ours.predict_proba(X), ref.predict_proba(X), atol=1e-5)


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("multi", [False, True])
@pytest.mark.parametrize("Est", [Ridge, LinearRegression])
def test_regressors_float32(Est, multi, sparse):
    X, y = make_regression(300, 8, n_targets=3 if multi else 1, noise=1.0, random_state=0)
    X = X.astype(np.float32)
    Xin = sp.csr_matrix(X) if sparse else X
    kw = {"alpha": 3.0} if Est is Ridge else {}
    ours = Est(tol=1e-10, max_iter=1000, **kw).fit(Xin, y)
    sk_est = getattr(sklm, Est.__name__)
    sk32 = sk_est(**kw).fit(Xin, y)
    ref = sk_est(**kw).fit(X.astype(np.float64), y)
    assert ours.coef_.dtype == np.float32 and ours.predict(Xin).dtype == np.float32
    _same_dtypes(ours, sk32, Xin)
    _close(ours.coef_, ref.coef_)
    _close(ours.intercept_, ref.intercept_, rtol=RTOL32 * np.abs(ref.coef_).max()
           / max(np.abs(ref.intercept_).max(), 1.0))
    _close(ours.predict(Xin), ref.predict(X))


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("n_classes", [2, 3])
def test_linear_svc_float32_returns_float64_as_liblinear(n_classes, sparse):
    """scikit-learn's LinearSVC returns float64 for float32 input: so does ours by default
    (the solvers still read the float32 data); ``dtype="float32"`` returns float32."""
    X, y = make_classification(300, 8, n_informative=5, n_classes=n_classes, random_state=1)
    X = X.astype(np.float32)
    Xin = sp.csr_matrix(X) if sparse else X
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sk = sksvm.LinearSVC(C=0.5, tol=1e-12, max_iter=200_000).fit(Xin, y)
    ours = LinearSVC(C=0.5, intercept_scaling=1.0, tol=1e-10, max_iter=2000).fit(Xin, y)
    _same_dtypes(ours, sk, Xin)
    assert ours.coef_.dtype == np.float64
    _close(ours.coef_, sk.coef_, rtol=1e-4)  # liblinear's dual CD: ~1e-5 from its optimum
    f32 = LinearSVC(C=0.5, intercept_scaling=1.0, tol=1e-10, max_iter=2000,
                    dtype="float32").fit(Xin, y)
    assert f32.coef_.dtype == np.float32 and f32.decision_function(Xin).dtype == np.float32
    _close(f32.coef_, ours.coef_)


def test_dtype_float32_converts_float64_input_and_bad_dtype_raises():
    X, y = make_classification(200, 6, random_state=2)
    est = LogisticRegression(dtype="float32", tol=1e-10).fit(X, y)
    assert est.coef_.dtype == np.float32 and est.predict_proba(X).dtype == np.float32
    ref = LogisticRegression(tol=1e-10).fit(X.astype(np.float32).astype(np.float64), y)
    assert ref.coef_.dtype == np.float64
    _close(est.coef_, ref.coef_)
    # float64 model, float32 data at predict: scikit-learn's X @ coef_.T is float64
    assert ref.decision_function(X.astype(np.float32)).dtype == np.float64
    with pytest.raises(ValueError, match="dtype must be None, 'float64' or 'float32'"):
        LogisticRegression(dtype="float16").fit(X, y)
    with pytest.raises(ValueError, match="dtype must be"):
        Ridge(dtype="int64").fit(X, y)


def test_int_input_is_float64():
    X, y = make_classification(200, 6, random_state=2)
    Xi = np.round(X * 10).astype(np.int64)
    assert LogisticRegression().fit(Xi, y).coef_.dtype == np.float64
    assert Ridge().fit(Xi, X[:, 0]).predict(Xi).dtype == np.float64
