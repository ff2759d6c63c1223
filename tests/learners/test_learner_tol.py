"""The minibatch learners' certified stop (``Learner(..., tol=)``, issue 31): the relative
duality gap of the training objective (``glm.primal_certificate``) checked at pass ends
(1, 2, 4, 8, ... by default, each with ``certify_passes="every"``), after each L-BFGS
iteration and every ``certify_every`` minibatches, over every rank's examples with
``comm``; a converged run is within ``tol`` of the optimum."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning

from roofline import comm as rcomm
from roofline import glm
from roofline.datasources import MatSource
from roofline.learners import (
    GLM,
    LBFGS,
    SGD,
    ADAGrad,
    L1Regularizer,
    L2Regularizer,
    Learner,
)


def _problems():
    rng = np.random.default_rng(5)
    # sparse (features x examples), 5 hot features in most examples
    d, n = 200, 1500
    hot = sp.csc_matrix((rng.random((5, n)) < 0.6).astype(np.float64))
    cold = sp.random(d - 5, n, density=0.02, format="csc", random_state=rng)
    Xs = sp.vstack([hot, cold]).tocsc()
    ms = Xs.T @ rng.standard_normal(d)
    # dense, correlated
    d2, n2 = 12, 1000
    L = rng.standard_normal((d2, d2)) / np.sqrt(d2)
    Xd = np.ascontiguousarray(L @ rng.standard_normal((d2, n2)))
    md = Xd.T @ rng.standard_normal(d2)
    out = {}
    for name, X, m in (("sparse-hot", Xs, ms), ("dense", Xd, md)):
        labels = (rng.random(X.shape[1]) < 1 / (1 + np.exp(-m))).astype(np.float64)
        target = m + 0.5 * rng.standard_normal(X.shape[1])
        out[name] = (X, labels, target)
    return out


PROBLEMS = _problems()
ALPHA = 1e-3


def _y(name, loss):
    """(GLM-form labels for the learner, margin-form labels for glm)."""
    _, labels, target = PROBLEMS[name]
    if loss == "squared":
        return target, target
    return labels, 2.0 * labels - 1.0


def _p_star(name, loss, alpha=ALPHA, fit_intercept=True):
    X = PROBLEMS[name][0]
    r = glm.fit_glm(X, _y(name, loss)[1], loss=loss, alpha=alpha, solver="newton", tol=1e-13,
                    max_iter=500, fit_intercept=fit_intercept)
    assert r.converged
    return float(r.objective[-1])


def _suboptimality(name, loss, model, alpha=ALPHA, fit_intercept=True):
    X = PROBLEMS[name][0]
    P, gap = glm.duality_gap(X, _y(name, loss)[1], model.coef[0].astype(np.float64),
                             float(model.intercept[0]), loss=loss, alpha=alpha,
                             fit_intercept=fit_intercept)
    P_star = _p_star(name, loss, alpha, fit_intercept)
    return (P - P_star) / abs(P_star), P, gap


def _learner(name, loss, opt, *, batch=None, alpha=ALPHA, dtype="float64", **kw):
    X, _, _ = PROBLEMS[name]
    y = _y(name, loss)[0]
    X, y = X.astype(dtype), y.astype(dtype)
    src = MatSource(X, y, batch_size=batch or X.shape[1])
    return Learner(src, GLM(loss=loss, dtype=dtype), opt, mixins=[L2Regularizer(alpha)],
                   progress=False, **kw)


@pytest.mark.parametrize("name", sorted(PROBLEMS))
@pytest.mark.parametrize("loss", ["logistic", "squared", "squared_hinge"])
def test_lbfgs_stops_on_the_certificate_within_tol(name, loss):
    """L-BFGS (its own tests off) stops at the first iteration whose certificate meets tol:
    within 1e-5 of the optimum, before max_iter, and the trace records the gap."""
    L = _learner(name, loss, LBFGS(max_iter=500, tol=0.0, ftol=0.0), tol=1e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        res = L.train()
    assert res.converged is True and res.certificate <= 1e-5
    assert res.n_steps < 500
    certs = [r["certificate"] for r in res.trace]
    assert certs[-1] == res.certificate and all(c > 1e-5 for c in certs[:-1])
    sub, P, gap = _suboptimality(name, loss, L.model)
    assert -1e-10 <= sub <= 1e-5, sub
    # the learner's certificate (from L-BFGS's own pass) is glm's for the same model
    assert abs(res.certificate - gap / P) <= 1e-8 * max(res.certificate, 1e-12)
    assert L.certificate() == pytest.approx((P, gap), rel=1e-9)


@pytest.mark.parametrize("schedule", ["every", "doubling"])
@pytest.mark.parametrize(("opt", "batch"), [(ADAGrad(lr=0.05), 100), (SGD(lr=0.5), 100)],
                         ids=["adagrad", "sgd"])
def test_minibatch_optimizers_stop_on_a_loose_tol(opt, batch, schedule):
    """ADAGrad / SGD: the pass-end certificate stops them once 1e-2 is met, in fewer passes
    than asked, within 1e-2 of the optimum (a well-conditioned problem, alpha = 1e-2); checked
    at every pass end, or (the default) at passes 1, 2, 4, 8, ... only."""
    alpha = 1e-2
    L = _learner("dense", "logistic", opt, batch=batch, alpha=alpha, n_passes=200, tol=1e-2,
                 certify_passes=schedule)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        res = L.train()
    assert res.converged and res.n_passes < 200
    assert not res.stopped_early  # that flag is the held-out rule's
    sub, _, _ = _suboptimality("dense", "logistic", L.model, alpha)
    assert -1e-10 <= sub <= 1e-2, sub
    rows = [r for r in res.trace if not np.isnan(r["certificate"])]
    assert rows[-1]["certificate"] <= 1e-2
    if schedule == "every":
        assert len(rows) == res.n_passes
    else:  # checked passes (1-based): the powers of two, so the stop is at one of them
        checked = [r["pass"] + 1 for r in rows]
        assert checked == [2 ** i for i in range(len(rows))], checked
        assert res.n_passes == checked[-1]


def test_doubling_checks_the_last_pass_too():
    """With the doubling schedule a run whose last pass is no power of two is still certified
    at its end: ``converged`` and ``certificate`` describe the final model."""
    L = _learner("dense", "logistic", ADAGrad(lr=0.05), batch=100, alpha=1e-2, n_passes=3,
                 tol=1e-14)
    with pytest.warns(ConvergenceWarning):
        res = L.train()
    assert res.n_passes == 3 and res.converged is False
    assert res.certificate == pytest.approx(L.certificate()[1] / abs(L.certificate()[0]))


def test_certify_every_stops_within_a_pass():
    """``certify_every`` checks between minibatches: the run stops mid-pass."""
    L = _learner("dense", "logistic", ADAGrad(lr=0.05), batch=50, alpha=1e-2, n_passes=50,
                 tol=1e-2, certify_every=7)
    res = L.train()
    assert res.converged
    assert res.n_steps % 7 == 0 and res.n_steps % 20 != 0  # 20 minibatches a pass
    assert res.trace[-1]["certificate"] <= 1e-2


def test_without_tol_nothing_changes():
    """The certificate only reads the model: the same iterates with a tol never met (it
    warns) as without tol; without tol, no certificate column and ``converged`` is None."""
    runs = {}
    for tol in (None, 1e-14):
        L = _learner("sparse-hot", "logistic", ADAGrad(lr=0.1), batch=200, n_passes=3,
                     dtype="float32", tol=tol)
        if tol is None:
            res = L.train()
        else:
            with pytest.warns(ConvergenceWarning, match="relative duality gap"):
                res = L.train()
        runs[tol] = (L.model.coef.copy(), L.model.intercept.copy(), res)
    np.testing.assert_array_equal(runs[None][0], runs[1e-14][0])
    np.testing.assert_array_equal(runs[None][1], runs[1e-14][1])
    plain, certified = runs[None][2], runs[1e-14][2]
    assert plain.converged is None and "certificate" not in plain.trace[0]
    assert certified.converged is False and certified.n_passes == plain.n_passes == 3
    assert len(certified.trace) == len(plain.trace)


def test_certificate_matches_glm_duality_gap_with_weights():
    """``Learner.certificate()`` is ``glm.duality_gap`` of the same model (weights, an
    intercept, held-out minibatches excluded)."""
    X, labels, _ = PROBLEMS["sparse-hot"]
    w = np.random.default_rng(1).uniform(0.2, 3.0, X.shape[1])
    L = Learner(MatSource(X, labels, w, batch_size=300), GLM(loss="logistic",
                dtype="float64"), ADAGrad(lr=0.1), mixins=[L2Regularizer(ALPHA)],
                n_passes=2, progress=False, holdout_every=5)
    L.train()
    P, gap = L.certificate()
    keep = np.concatenate([np.arange(s, min(s + 300, X.shape[1]))
                           for i, s in enumerate(range(0, X.shape[1], 300)) if i % 5 != 4])
    P2, gap2 = glm.duality_gap(X[:, keep], 2.0 * labels[keep] - 1.0, L.model.coef[0],
                               float(L.model.intercept[0]), loss="logistic", alpha=ALPHA,
                               sample_weight=w[keep])
    assert P == pytest.approx(P2, rel=1e-12) and gap == pytest.approx(gap2, rel=1e-8)


def test_over_comm_the_certificate_covers_every_rank():
    """Data-parallel (model averaging): every rank checks the same certificate, over every
    rank's examples (the single-process certificate of the final model), and stops together."""
    X, labels, _ = PROBLEMS["dense"]

    def fit(c):
        L = Learner(MatSource(X, labels, batch_size=50), GLM(loss="logistic", dtype="float64"),
                    ADAGrad(lr=0.05), mixins=[L2Regularizer(1e-2)], n_passes=200,
                    progress=False, comm=c, sync_every=2, tol=1e-2)
        res = L.train()
        return res, L.model.coef.copy(), L.model.intercept.copy()

    outs = rcomm.run(fit, 2, backend="threads")
    (r0, c0, b0), (r1, c1, b1) = outs
    np.testing.assert_array_equal(c0, c1)
    assert r0.converged and r1.converged and r0.n_passes == r1.n_passes < 200
    assert r0.certificate == r1.certificate <= 1e-2
    P, gap = glm.duality_gap(X, 2.0 * labels - 1.0, c0[0], float(b0[0]), loss="logistic",
                             alpha=1e-2)
    assert r0.certificate == pytest.approx(gap / P, rel=1e-8)


@pytest.mark.parametrize(("kw", "match"), [
    ({"mixins": [L1Regularizer(1e-3), L2Regularizer(1e-3)]}, "L2 objective only"),
    ({"mixins": []}, "L2Regularizer of positive weight"),
    ({"loss": "hinge"}, "smooth loss"),
    ({"soft": True}, "labels in"),
])
def test_no_certificate_is_a_clear_error(kw, match):
    X, labels, _ = PROBLEMS["dense"]
    y = np.full(X.shape[1], 0.3) if kw.get("soft") else labels
    L = Learner(MatSource(X, y, batch_size=200),
                GLM(loss=kw.get("loss", "logistic"), dtype="float64"),
                ADAGrad(), mixins=kw.get("mixins", [L2Regularizer(1e-3)]), progress=False,
                tol=1e-3)
    with pytest.raises(ValueError, match=match):
        L.train()


def test_tol_option_is_checked():
    X, labels, _ = PROBLEMS["dense"]
    with pytest.raises(ValueError, match="tol"):
        Learner(MatSource(X, labels), GLM(), ADAGrad(), tol=0.0)
    with pytest.raises(ValueError, match="certify_every"):
        Learner(MatSource(X, labels), GLM(), ADAGrad(), certify_every=-1)


def test_several_outputs_sum_their_certificates():
    """A k-output GLM's objective is the sum of k problems: its certificate is the sum of
    each output's gap (L-BFGS's pass takes the margins' route there)."""
    X, labels, _ = PROBLEMS["sparse-hot"]
    Y = np.vstack([labels, 1.0 - labels])
    L = Learner(MatSource(X, Y, batch_size=X.shape[1]),
                GLM(loss="logistic", n_outputs=2, dtype="float64"),
                LBFGS(max_iter=300, tol=0.0, ftol=0.0), mixins=[L2Regularizer(ALPHA)],
                progress=False, tol=1e-6)
    res = L.train()
    assert res.converged
    parts = [glm.duality_gap(X, 2.0 * Y[r] - 1.0, L.model.coef[r], float(L.model.intercept[r]),
                             loss="logistic", alpha=ALPHA) for r in range(2)]
    P, gap = (sum(p[0] for p in parts), sum(p[1] for p in parts))
    assert res.certificate == pytest.approx(gap / P, rel=1e-8) and res.certificate <= 1e-6
