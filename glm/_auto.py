"""``solver="auto"``: which GLM solver to run on a problem, by a rule measured on
``benchmarks/glm_suite.py``.

The rule (:func:`choose_solver`)
--------------------------------
1. ``penalty="l1"`` or ``"elasticnet"`` with the squared or logistic loss, in one process, on
   data with at most :data:`PROX_NEWTON_AUTO_FEATURES` (256) features and no more features
   than examples, and ``penalty="l1"`` with the logistic loss on data with more features than
   examples: ``prox-newton`` (newGLMNET; on the Gram matrix where the features are few);
   otherwise ``scd`` (primal coordinate descent).  ``glm_suite.py --path --quick`` (20-value
   paths with warm starts, seconds to 1e-4; 2-core VM shared with other jobs, load ~4-5,
   2026-11-27): breast cancer (569 x 30, unscaled) L1 ``prox-newton`` 0.05-0.06 s, ``scd``
   1.2-1.3 s, liblinear 0.08-0.16 s; its elastic net 0.03-0.08 s against ``scd``'s
   0.09-0.17 s; text-like 1,000 x 50,000 L1 0.12-0.14 s against ``scd``'s 0.22-0.24 s (its
   elastic net was mixed, 0.13-0.14 s against 0.12-0.24 s: left to ``scd``).
2. ``loss="hinge"`` (not differentiable): ``scd`` (the dual, SDCA, with an unregularised
   intercept where one is fitted).
3. ``loss="squared"`` with the L2 penalty and at most :data:`CHOLESKY_AUTO_FEATURES`
   features: ``cholesky`` (the normal equations, exact; one pass and a ``d x d``
   factorisation).
4. A smooth loss (``squared``, ``logistic``, ``squared_hinge``) with the L2 penalty:
   ``newton`` (trust-region Newton-CG), except on large sparse data that is strongly
   regularised, or whose examples share few features, where the dual coordinate descent
   ``scd`` is used, with or without an intercept (the dual keeps it unregularised, at about
   the cost of a fit without: ``benchmarks/intercept.py``; see :data:`DUAL_MIN_EXAMPLES`,
   :data:`DUAL_MAX_NNZ_PER_EXAMPLE`, :data:`DUAL_MAX_DENSITY`, :data:`DUAL_MAX_C`,
   :data:`DUAL_MAX_HOT_MASS`).

What the rule rests on: ``python benchmarks/glm_suite.py --criteo-1m --time-cap 20``,
2-core VM, 2026-11-25, seconds to a relative suboptimality of 1e-4; re-run on 2026-11-26
(Newton's fused dense kernels, the dual's cheaper setup), where the solver the rule picks was
again the fastest Roofline solver on every problem (within 5%).  The table is in
``docs/benchmarks.md`` ("GLM suite"); the figures below are the first run's.

* ``newton`` was the fastest Roofline solver on the small and dense problems: breast
  cancer, digits, dense correlated, wild scales and 1% positives.  The dual ``scd`` took
  2-10x longer on them, or needed the stall switch.
* Wild scales: ``newton`` took 0.04-0.06 s; scikit-learn's lbfgs took 25-57 s or did not
  reach 1e-4.
* ``cholesky`` solved ridge with 11 and 101 features in 0.2-0.6x Newton's time.
* On the Criteo-like and hashed data (sparse, ~40 values per example) the dual ``scd`` beat
  ``newton`` 2-6x at ``C <= 1``.  With batched sweeps the dual also matched Newton on the
  text-like 5,000 x 50,001 set at ``C = 0.01`` (two runs: 0.006-0.011 s against 0.007-0.009
  s, within the noise of such short runs) and beat it at ``C = 1`` (0.008-0.013 s against
  0.017 s), hence ``DUAL_MIN_EXAMPLES = 5,000``.
* At ``C = 100`` the dual failed on Criteo-like 100k (13.7 s against Newton's 4.2 s) and
  text-like data (0.052 s against 0.043 s), but took 0.88 s against Newton's 4.96 s on hashed
  2^22 data, whose examples share almost no feature (:func:`hot_mass` 3% against 69% and
  77%): hence :data:`DUAL_MAX_HOT_MASS`.
* ``tpa-scd``, ``cocoa``, ``hcocoa`` and ``pure-block`` were never the fastest on this 2-core
  machine.  ``auto`` does not pick them; they remain for many cores and for distributed fits
  (``comm=``).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from . import _losses, _prox_newton, _registry, cd

__all__ = [
    "CHOLESKY_AUTO_FEATURES",
    "DUAL_MAX_C",
    "DUAL_MAX_DENSITY",
    "DUAL_MAX_HOT_MASS",
    "DUAL_MAX_NNZ_PER_EXAMPLE",
    "DUAL_MIN_EXAMPLES",
    "HOT_FEATURE_FRACTION",
    "LBFGS_AUTO_SCALE",
    "PROX_NEWTON_AUTO_FEATURES",
    "PROX_NEWTON_LOSSES",
    "choose_solver",
    "hot_mass",
    "hot_mass_of_counts",
    "max_abs",
]

#: The dual ``scd`` is chosen for a smooth loss only from this many examples on (its sweeps
#: over fewer examples run batched, see ``fit_glm(batch_sweeps=)``: text-like 5,000 x
#: 50,001 at ``C <= 1``, the dual level with Newton or up to 2x faster) ...
DUAL_MIN_EXAMPLES = 5_000
#: ... with at most this many stored values per example (sparse, one-hot / hashed data) ...
DUAL_MAX_NNZ_PER_EXAMPLE = 100
#: ... filling at most this fraction of ``X`` (dense data with few features, such as the
#: suite's "wild scales" 50k x 51 and "1% positives" 100k x 51, are Newton's: the dual took
#: 10x longer there) ...
DUAL_MAX_DENSITY = 0.01
#: ... and at most this ``C = 1 / (alpha n)`` (scikit-learn's scaling): strong regularisation;
#: or at any ``C`` when the examples share few features (:data:`DUAL_MAX_HOT_MASS`).
DUAL_MAX_C = 1.0
#: The dual at any ``C`` (with the other conditions of :data:`DUAL_MIN_EXAMPLES`) when at most
#: this fraction of the stored values lies in "hot" features, those occurring in at least
#: :data:`HOT_FEATURE_FRACTION` of the examples.  A dual coordinate step moves the margins of
#: the other examples only through the features they share: on uniformly hashed data
#: (the suite's 2^22 set, ~0.7 examples per feature: 3% of the values hot, all of them the
#: constant feature's) the dual needs few sweeps at any ``C``, while on power-law data
#: (Criteo-like: ~90% hot; text-like Zipf) weak regularisation makes it crawl.
DUAL_MAX_HOT_MASS = 0.1
#: A feature occurring in at least this fraction of the examples is "hot".
HOT_FEATURE_FRACTION = 0.01

#: ``cholesky`` is chosen for ridge problems with at most this many features: its Gram
#: matrix costs ``n d^2`` multiply-adds in BLAS, Newton ~20 Hessian-vector passes of ``n d``
#: memory-bound ones; on the suite's dense problems (d = 11 and 101) it was 5-10x faster.
CHOLESKY_AUTO_FEATURES = 1024

#: The estimators' ``auto`` runs ``lbfgs`` when a feature value exceeds this (the minibatch
#: ``LBFGS`` optimizer's ``AUTO_SCALE``, from which it rescales the coefficients by powers of
#: two).
LBFGS_AUTO_SCALE = 2.0 ** 20

_SMOOTH = _losses.SMOOTH_LOSSES
_SCD = "scd"

#: The losses of ``prox-newton``, which ``auto`` runs for L1 and the elastic net on problems
#: with few features (at most :data:`roofline.glm._prox_newton.GRAM_MAX_FEATURES`, no more
#: than examples): ``python benchmarks/glm_suite.py --path`` (breast cancer's L1 path, see
#: the module docstring).
PROX_NEWTON_LOSSES = _losses.losses_where(smooth=True, cd=True)
#: ``auto`` runs ``prox-newton`` with at most this many features: its Gram matrix costs
#: ``n d^2`` multiply-adds (BLAS) per Newton iteration, ``d`` times a coordinate sweep's
#: memory-bound ``n d``; measured at d = 30 (breast cancer) and on the tests' 8-20 features,
#: not beyond (between this and ``GRAM_MAX_FEATURES`` it is an explicit ``solver=``).
PROX_NEWTON_AUTO_FEATURES = 256


def hot_mass(X):
    """The fraction of the stored values of sparse ``X`` (features x examples, CSC) that lie
    in features occurring in at least :data:`HOT_FEATURE_FRACTION` of the examples (one pass
    over the row indices).

    Parameters
    ----------
    X : scipy.sparse matrix or ndarray, shape (n_features, n_examples)
        (an array counts its nonzero entries).

    Returns
    -------
    float
        In ``[0, 1]``; 0 for a matrix without stored values.
    """
    if sp.issparse(X):
        X = X.tocsc()
        counts = cd.feature_counts(X)
    else:
        counts = np.count_nonzero(X, axis=1)
    return hot_mass_of_counts(counts, X.shape[1])


def hot_mass_of_counts(counts, n_examples):
    """:func:`hot_mass` from the features' counts of examples (:func:`cd.feature_counts`)."""
    total = int(counts.sum(dtype=np.int64))
    if total == 0:
        return 0.0
    hot = counts >= max(1.0, HOT_FEATURE_FRACTION * n_examples)
    return float(counts[hot].sum(dtype=np.int64)) / float(total)


def choose_solver(X, y=None, *, loss, penalty="l2", alpha, fit_intercept=True, n_jobs=1,
                  device=None, comm=None, dual=None, sample_weight=None,
                  runner=("fit_glm",)):
    """The solver ``solver="auto"`` runs on this problem, and why: the one place ``auto`` is
    decided, for :func:`~roofline.glm.fit_glm` and the estimators.

    Parameters
    ----------
    X : CSC matrix or ndarray, shape (n_features, n_examples)
        The training data in the project layout (its shape and number of stored values are
        read, and for a large sparse weakly regularised problem the features' frequencies:
        :func:`hot_mass`).
    y : array, optional
        Unused (the rule does not depend on the labels); accepted for a uniform signature.
    loss : {"squared", "logistic", "hinge", "squared_hinge"}
    penalty : {"l2", "l1", "elasticnet"}
    alpha : float
        The regularisation strength of the mean-loss objective.
    fit_intercept : bool
        An unregularised intercept (read by no rule now: ``scd``'s dual keeps it
        unregularised, as its primal and ``newton`` do).
    n_jobs : int
        Threads available (not used by the current rule: the threaded solvers were never the
        fastest in the measurements).
    device : str, optional
        Unused (every solver here runs on the CPU).
    comm : roofline.comm.Communicator, optional
        A distributed fit (each rank holding examples): ``"cocoa"``.
    dual : bool or None
        ``dual=True`` (without ``comm``) asks for the dual: ``"scd"`` (SDCA).
    sample_weight : array, optional
        The sample weights: non-uniform ones rule out the solvers that do not take them
        (read only by a caller that can run the minibatch solvers; with an L1 or elastic-net
        penalty, which no weighted solver fits, a ValueError).
    runner : sequence of str
        The runners of the registry the caller can run (:mod:`roofline.glm._registry`):
        ``("fit_glm",)`` for :func:`~roofline.glm.fit_glm`; the estimators, which also run the
        minibatch Learner (``"learner"``), get ``"lbfgs"`` without regularisation
        (``alpha <= 0``), with feature values beyond :data:`LBFGS_AUTO_SCALE` (L-BFGS rescales
        them; Newton's and the CD solvers' duality gap is meaningless there) and, with
        non-uniform weights, where the rule's choice does not take them and the loss is not
        smooth (``"newton"`` when it is).

    Returns
    -------
    solver : str
        ``"newton"``, ``"cholesky"`` or ``"scd"`` (``"cocoa"`` with ``comm``); for the
        estimators also ``"lbfgs"``.
    reason : str
        One sentence, for the log line and ``solver_``'s documentation.
    """
    if dual and comm is None:
        return _SCD, "dual=True: dual coordinate descent (SDCA)"
    if dual and comm is not None:
        return "cocoa", "dual=True with comm=: CoCoA+ over the ranks' examples (the dual)"
    if "learner" in runner and comm is None:
        if alpha <= 0:
            return "lbfgs", "no regularisation: L-BFGS"
        big = max_abs(X)
        if big > LBFGS_AUTO_SCALE:
            return "lbfgs", (f"a feature value of {big:.3g} (above 2^20): L-BFGS over "
                             "power-of-two rescaled coefficients (Newton's and the CD "
                             "solvers' duality gap is meaningless at such scales)")
    chosen, reason = _rule(X, loss, penalty, alpha, fit_intercept, comm)
    if (comm is None and "learner" in runner and sample_weight is not None
            and not np.all(sample_weight == sample_weight[0])
            and not _registry.get_solver(chosen).sample_weight):
        if penalty != "l2":  # the fallbacks below (Newton, L-BFGS) are L2 solvers
            raise ValueError(f"penalty={penalty!r} with non-uniform sample weights (or "
                             f"class_weight): the primal coordinate descent that fits it takes "
                             f"uniform weights only; use penalty='l2' or equal weights")
        if loss in _SMOOTH:
            return "newton", ("non-uniform sample_weight with a smooth loss: trust-region "
                              "Newton-CG (the coordinate-descent solvers take uniform "
                              "weights)")
        return "lbfgs", (f"non-uniform sample_weight with loss={loss!r}: L-BFGS (the "
                         "coordinate-descent solvers take uniform weights)")
    return chosen, reason


def max_abs(X):
    """The largest ``|value|`` of dense or sparse ``X`` (0 when empty)."""
    data = X.data if sp.issparse(X) else X
    return float(np.abs(data).max()) if data.size else 0.0


def _rule(X, loss, penalty, alpha, fit_intercept, comm):
    """The measured rule of the module docstring (the solvers of :func:`fit_glm`)."""
    if penalty not in ("l2", "l1", "elasticnet"):
        raise ValueError(f"penalty must be 'l2', 'l1' or 'elasticnet', got {penalty!r}")
    if loss not in _losses.LOSSES:
        raise ValueError(f"loss must be one of {_losses.LOSSES}, got {loss!r}")
    if (penalty in ("l1", "elasticnet") and comm is None and loss in PROX_NEWTON_LOSSES
            and X.shape[0] <= PROX_NEWTON_AUTO_FEATURES and X.shape[0] <= X.shape[1]
            and (X.shape[0] + 1) * X.shape[1] <= _prox_newton.GRAM_MAX_VALUES):
        d, n = X.shape
        return "prox-newton", (f"penalty={penalty!r} with {d} features and {n} examples: "
                               "proximal Newton on the Gram matrix (newGLMNET), insensitive "
                               "to the features' scaling and correlation")
    if penalty == "l1" and comm is None and loss == "logistic" and X.shape[0] > X.shape[1]:
        d, n = X.shape
        return "prox-newton", (f"penalty='l1' with the logistic loss and more features ({d}) "
                               f"than examples ({n}): proximal Newton (newGLMNET, liblinear's "
                               "L1 solver), coordinate descent over the features' columns")
    if penalty == "elasticnet":
        if comm is not None:
            raise ValueError("penalty='elasticnet' is solved in one process (solver 'scd' or "
                             "'tpa-scd'): comm= is not supported with it")
        return _SCD, ("penalty='elasticnet': primal coordinate descent (the prox of the "
                       "elastic net in each coordinate step)")
    if comm is not None:
        if penalty == "l2" and loss in _SMOOTH:
            # TRON's iterates do not depend on the number of ranks (every sum all-reduced),
            # where CoCoA+'s rounds grow with it on data with hot features (issue 31's table:
            # K = 2 needed over 500 rounds where K = 1 needed 12)
            return "newton", ("comm= with a smooth loss and L2: distributed trust-region "
                              "Newton, the same iterations at any number of ranks")
        return "cocoa", ("comm= with a non-smooth loss or L1: CoCoA+ over the ranks' "
                         "examples")
    if penalty == "l1":
        return _SCD, "penalty='l1': primal coordinate descent is the L1 solver"
    if loss == "hinge":
        return _SCD, "loss='hinge' is not differentiable: dual coordinate descent (SDCA)"
    d, n = X.shape
    if loss == "squared" and d <= CHOLESKY_AUTO_FEATURES:
        return "cholesky", (f"ridge with {d} features (at most {CHOLESKY_AUTO_FEATURES}): the "
                            "normal equations, solved exactly by one Cholesky factorisation")
    nnz = X.nnz if sp.issparse(X) else int(np.count_nonzero(X))
    per_example = nnz / max(n, 1)
    C = 1.0 / (float(alpha) * max(n, 1))
    # with an intercept too: the one-thread dual keeps it unregularised (glm/_scd.py
    # FreeIntercept; benchmarks/intercept.py)
    if (n >= DUAL_MIN_EXAMPLES and per_example <= DUAL_MAX_NNZ_PER_EXAMPLE
            and per_example <= DUAL_MAX_DENSITY * d and loss != "squared_hinge"):
        if C <= DUAL_MAX_C:
            return _SCD, (f"{n} sparse examples ({per_example:.0f} values each) with strong "
                           f"regularisation (C={C:.3g}): dual coordinate descent needs few "
                           "sweeps")
        hot = hot_mass(X)
        if hot <= DUAL_MAX_HOT_MASS:
            return _SCD, (f"{n} sparse examples ({per_example:.0f} values each) sharing few "
                           f"features ({hot:.1%} of the values in features of at least "
                           f"{HOT_FEATURE_FRACTION:.0%} of the examples): dual coordinate "
                           f"descent needs few sweeps even at C={C:.3g}")
    return "newton", (f"smooth loss with an L2 penalty ({n} examples, {d} features, C={C:.3g}): "
                      "trust-region Newton-CG is insensitive to the features' scaling and "
                      "correlation")
