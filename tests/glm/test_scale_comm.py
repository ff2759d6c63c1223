"""Issue 32, item 3: a feature scaled by 1e30 over ``comm=``.  In one process the estimators'
``auto`` runs L-BFGS over power-of-two rescaled coefficients; over ``comm=`` a non-smooth loss
or L1 ran CoCoA+, which returned an all-zero model with only a ConvergenceWarning.  Now the
coordinate-descent solvers over ``comm=`` refuse such a feature on every rank, naming it and
saying what to do, and ``auto``'s distributed Newton (smooth loss, L2) gives the one-process
fit."""

import warnings

import numpy as np
import pytest
from sklearn.datasets import make_classification

from roofline.comm import run
from roofline.glm import fit_glm
from roofline.learners import LinearSVC, LogisticRegression

BIG = 2


def _data():
    X, y = make_classification(400, 6, n_informative=4, random_state=0)
    X[:, BIG] *= 1e30
    return X, y


def _fit_glm(comm, loss, penalty, by_examples):
    X, y = _data()
    Xc = np.ascontiguousarray(X.T)
    if by_examples:
        mine = np.array_split(np.arange(len(y)), comm.size)[comm.rank]
        Xk, yk = Xc[:, mine], y[mine]
    else:  # the primal: rank r holds the r-th block of features, all the examples
        Xk, yk = Xc[[3, 4, 5] if comm.rank == 0 else [0, 1, 2]], y
    try:
        fit_glm(Xk, yk, loss=loss, alpha=1 / len(y), penalty=penalty, comm=comm,
                max_iter=50)
    except ValueError as e:
        return str(e)
    return None


@pytest.mark.parametrize("loss,penalty,by_examples,named", [
    ("hinge", "l2", True, BIG),  # auto: CoCoA+'s dual
    ("logistic", "l1", False, 3 + BIG),  # auto: CoCoA+'s primal; the feature on rank 1
])
def test_cd_over_comm_refuses_a_huge_feature_on_every_rank(loss, penalty, by_examples, named):
    out = run(_fit_glm, 2, backend="threads", args=(loss, penalty, by_examples), timeout=60)
    for msg in out:
        assert msg is not None, "a wrong model came back silently"
        assert f"feature {named} has a value of 3.75e+30" in msg and "Rescale" in msg, msg


def _est(comm, make):
    X, y = _data()
    mine = np.array_split(np.arange(len(y)), comm.size)[comm.rank]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Newton's gap means nothing at this scale
        try:
            est = make(comm).fit(X[mine], y[mine])
        except ValueError as e:
            return str(e)
    return est.solver_, est.coef_.ravel(), float(est.intercept_[0]), est.score(X, y)


def test_logistic_regression_over_comm_copes():
    """auto -> distributed Newton: the one-process (L-BFGS, rescaled) model."""
    X, y = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = LogisticRegression().fit(X, y)
    out = run(_est, 2, backend="threads", args=(lambda c: LogisticRegression(comm=c),),
              timeout=60)
    scale = np.ones(X.shape[1])
    scale[BIG] = 1e30
    for solver, coef, icpt, score in out:
        assert solver == "newton"
        np.testing.assert_allclose(coef * scale, ref.coef_.ravel() * scale, rtol=1e-3,
                                   atol=1e-4)
        assert abs(icpt - ref.intercept_[0]) <= 1e-4
        assert score == pytest.approx(ref.score(X, y), abs=0.01)


def test_linear_svc_over_comm_names_the_feature():
    out = run(_est, 2, backend="threads",
              args=(lambda c: LinearSVC(loss="hinge", comm=c),), timeout=60)
    for msg in out:
        assert isinstance(msg, str) and f"feature {BIG}" in msg, msg
