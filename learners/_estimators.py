"""scikit-learn estimators over the Roofline learners.

``LogisticRegression``, ``Ridge``, ``LinearRegression`` and ``LinearSVC`` take rows-as-examples
input (numpy arrays or any scipy.sparse matrix), as scikit-learn expects, and convert it at the
boundary to the column-example layout of the learners *without densifying*: a sparse ``X``
(``n_samples x n_features``) becomes the CSC matrix ``X.tocsr().T`` (the same arrays, read as
``n_features x n_samples``); a dense ``X`` becomes the view ``X.T``.

Regularisation conventions (converted exactly, here and only here)
-----------------------------------------------------------------
The learners minimise ``(1 / sum_i s_i) sum_i s_i l(y_i, eta_i) + lambda/2 ||W||^2`` (``s_i`` the
sample weights, the intercept not regularised).  scikit-learn's objectives convert as:

* ``LogisticRegression(C)`` and ``LinearSVC(C)``: ``C sum_i s_i l_i + ||w||^2 / 2``, hence
  ``lambda = 1 / (C sum_i s_i)``.  (scikit-learn's LinearSVC, through liblinear, also
  regularises the intercept; the lbfgs/adagrad/sgd/newton solvers and the primal CD do not, nor
  does the one-process dual of ``scd`` (it moves a free intercept between sweeps).  The other
  duals (``tpa-scd``, ``cocoa``, ``hcocoa``, the GPU) regularise it, through a constant feature,
  as liblinear and snapml do.)
* ``Ridge(alpha)``: ``sum_i s_i (y_i - eta_i)^2 + alpha ||w||^2``, i.e. with our squared loss
  ``l = r^2 / 2`` the same minimiser as ``lambda = alpha / sum_i s_i``.
* ``LinearRegression``: ``lambda = 0``.

Multi-class: ``LogisticRegression`` fits the multinomial model by default (scikit-learn's), by
:func:`roofline.glm.fit_multinomial`; otherwise (``multi_class="ovr"``, ``LinearSVC``, solvers
without a multinomial fit) one-vs-rest: one output per class in a single ``k x n`` model (the
multi-label GLM), ``predict_proba`` normalising the ``k`` sigmoids as scikit-learn's OvR does.
``LinearSVC`` with ``class_weight`` and more than two classes fits each class on its own
(liblinear weighs each one-vs-rest problem differently).

dtype: float32 input stays float32 (``dtype=None``), and what the estimators return follows the
data as scikit-learn's do (``LinearSVC``: float64, as liblinear); the solvers may accumulate in
float64.

Estimator-side solvers: three problems no row of the registry solves are fitted here by
L-BFGS-B under bounds (scipy), in float64: ``Ridge(positive=True)`` /
``LinearRegression(positive=True)`` (non-negative least squares, scikit-learn's ``"lbfgs"``)
and ``LinearSVC(penalty="l1")`` (the squared hinge with L1, over the split ``w = u - v``);
``solver_`` is then ``"lbfgs-b"``.

Solvers: every row of the solver registry (:func:`roofline.glm.solvers`, listed under
``solver`` below), and ``"auto"`` (the default: chosen from the data by
:func:`roofline.glm.choose_solver`).  The rows that :func:`roofline.glm.fit_glm` runs (the
coordinate-descent, Newton and Cholesky solvers; same objective scaling, ``alpha = lambda``)
are fitted through it, one output at a time; ``vw-hybrid`` through its own function; the
minibatch optimizers (``lbfgs``, ``adagrad``, ``sgd``) through the
:class:`~roofline.learners.Learner` (``adagrad`` and ``sgd`` also provide ``partial_fit``).
"""

from __future__ import annotations

import logging
import numbers
import os
import textwrap
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data

from roofline import glm
from roofline.datasources import MatSource
from roofline.glm import check_solver, choose_solver, get_solver, solver_names

from ._learner import Learner
from ._mixins import L2Regularizer
from ._models import GLM
from ._optimizers import LBFGS, SGD, ADAGrad

__all__ = ["LinearRegression", "LinearSVC", "LogisticRegression", "Ridge"]

logger = logging.getLogger(__name__)

#: The registry's runners the estimators run (every row: ``fit_glm``'s through it, the
#: others themselves).
RUNNERS = ("fit_glm", "estimator", "learner")


def _has_partial_fit(solver):
    """Whether the registry's row ``solver`` offers ``partial_fit`` (the minibatch ones)."""
    return solver in solver_names(partial_fit=True, auto=False)


def to_column_layout(X, dtype):
    """Rows-as-examples ``X`` (validated) to the learners' ``n_features x n_samples`` layout.

    Sparse input is converted to canonical CSR (sorted, no duplicates; copied only when it is
    not already) and reinterpreted as CSC of the transpose: no densification, no extra copy of
    the values.  Dense input becomes the transposed view.
    """
    if sp.issparse(X):
        X = X.tocsr()
        if X.dtype != dtype:
            X = X.astype(dtype)
        if not X.has_canonical_format:
            X = X.copy()
            X.sum_duplicates()
        Xc = sp.csc_matrix((X.data, X.indices, X.indptr), shape=(X.shape[1], X.shape[0]))
        return Xc
    X = np.asarray(X, dtype=dtype)
    return X.T


def _max_abs(Xc):
    """The largest ``|value|`` of a (dense or sparse) matrix, 0 when it has none."""
    data = Xc.data if sp.issparse(Xc) else Xc
    return float(max(data.max(initial=0.0), -data.min(initial=0.0)))  # no |X| copy


def _nonuniform(sw, comm=None):
    """``sw`` when the sample weights differ, ``None`` when they are all equal (the
    unweighted problem: the solvers' ``lambda`` already carries their sum).  With ``comm``,
    over every rank's weights (collective: the same answer on every rank; weights uniform
    within each rank but differing between the ranks are not uniform)."""
    if comm is None:
        return None if np.all(sw == sw[0]) else sw
    hi, lo = (float(sw.max()), float(sw.min())) if sw.size else (-np.inf, np.inf)
    ext = comm.allreduce(np.array([hi, -lo]), op="max")
    return None if ext[0] == -ext[1] else sw


def _check_number(name, value, *, low, low_open):
    """``value`` as a float, or a ValueError naming the parameter ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {value!r} "
                         f"({type(value).__name__})")
    v = float(value)
    if not (v > low if low_open else v >= low) or not np.isfinite(v):
        what = "positive" if (low, low_open) == (0.0, True) else \
            f"{'>' if low_open else '>='} {low:g}"
        raise ValueError(f"{name} must be {what} and finite, got {value!r}")
    return v


def _cpu_count():
    """The CPUs this process may run on (its affinity where the OS tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _resolve_n_jobs(n_jobs):
    """scikit-learn's ``n_jobs`` as a thread count: ``None`` is 1, a negative ``n_jobs`` is
    ``n_cpus + 1 + n_jobs`` (``-1``: every CPU, ``-2``: all but one; at least 1), or a
    ValueError naming it (``0``, a non-integer)."""
    if n_jobs is None:
        return 1
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, numbers.Integral) or n_jobs == 0:
        raise ValueError(f"n_jobs must be None or a non-zero int (-1: every CPU), got "
                         f"{n_jobs!r}")
    return int(n_jobs) if n_jobs > 0 else max(_cpu_count() + 1 + int(n_jobs), 1)


def _class_weights(class_weight, classes, y_idx, sw=None, comm=None):
    """One weight per class of ``classes`` (scikit-learn's
    :func:`~sklearn.utils.class_weight.compute_class_weight`).

    ``"balanced"``: ``sum(counts) / (n_classes * counts)``, the counts of the labels
    ``classes[y_idx]`` weighted by ``sw`` when given (scikit-learn 1.9's LogisticRegression and
    LinearSVC) and unweighted otherwise, summed over every rank of ``comm`` (collective).
    A dict: ``{label: weight}``, 1 for the classes it omits; a label that is not a class, or a
    weight that is negative or not finite, is a ValueError naming ``class_weight``.
    """
    k = len(classes)
    if isinstance(class_weight, str):
        if class_weight != "balanced":
            raise ValueError(f"class_weight must be None, 'balanced' or a dict, got "
                             f"{class_weight!r}")
        counts = np.bincount(y_idx, weights=sw, minlength=k).astype(np.float64)
        if comm is not None:
            counts = np.asarray(comm.allreduce(counts), dtype=np.float64)
        if not (counts > 0).all():
            raise ValueError(f"class_weight='balanced' needs a positive weight in every class; "
                             f"classes {classes[counts <= 0].tolist()} have none")
        return counts.sum() / (k * counts)
    if not isinstance(class_weight, dict):
        raise ValueError(f"class_weight must be None, 'balanced' or a dict, got "
                         f"{class_weight!r} ({type(class_weight).__name__})")
    known = set(classes.tolist())
    unknown = [c for c in class_weight if c not in known]
    if unknown:
        raise ValueError(f"class_weight has labels that are not classes: {unknown} "
                         f"(classes: {classes.tolist()})")
    w = np.ones(k)
    for i, c in enumerate(classes.tolist()):
        if c in class_weight:
            w[i] = _check_number(f"class_weight[{c!r}]", class_weight[c], low=0.0,
                                 low_open=False)
    return w


def _append_constant_row(Xc, value):
    """Column-layout ``Xc`` (``d x n``) with a ``(d + 1)``-th feature equal to ``value`` in
    every example (liblinear's synthetic intercept feature; a copy)."""
    d, n = Xc.shape
    if sp.issparse(Xc):
        ones = sp.csc_matrix(np.full((1, n), value, dtype=Xc.dtype))
        return sp.vstack([Xc, ones], format="csc", dtype=Xc.dtype)
    Xa = np.empty((d + 1, n), dtype=Xc.dtype, order="F" if Xc.flags.f_contiguous else "C")
    Xa[:d] = Xc
    Xa[d] = value
    return Xa


def _float64_values(Xc):
    """Column-layout ``Xc`` with float64 values (sparse: the index arrays shared)."""
    if sp.issparse(Xc):
        return sp.csc_matrix((Xc.data.astype(np.float64), Xc.indices, Xc.indptr),
                             shape=Xc.shape)
    return Xc.astype(np.float64, order="K")


def _check_dtype(dtype):
    """What :func:`~sklearn.utils.validation.validate_data` takes for the estimators' ``dtype``:
    ``None`` keeps float32 input and converts any other to float64 (scikit-learn's rule for
    its linear models), ``"float32"`` / ``"float64"`` (or the numpy types) convert to that one;
    anything else is a ValueError naming ``dtype``."""
    if dtype is None:
        return [np.float64, np.float32]
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if isinstance(dtype, bool) or dt not in (np.dtype(np.float64), np.dtype(np.float32)):
        raise ValueError(f"dtype must be None, 'float64' or 'float32', got {dtype!r}")
    return dt.type


def _check_random_state(random_state):
    """``random_state`` as what :func:`numpy.random.default_rng` takes, or a ValueError naming
    it (a legacy ``RandomState`` gives a seed drawn from it)."""
    if random_state is None or isinstance(random_state, (np.random.Generator,
                                                         np.random.SeedSequence,
                                                         np.random.BitGenerator)):
        return random_state
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(np.iinfo(np.int32).max))
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool) \
            and random_state >= 0:
        return int(random_state)
    raise ValueError(f"random_state must be None, a non-negative int or a numpy Generator, "
                     f"got {random_state!r} ({type(random_state).__name__})")


def _check_sample_weights(sample_weight, X, comm=None):
    """Validated float64 sample weights (scikit-learn's shape check, then the one check of
    :func:`roofline.glm.check_sample_weight`).

    With ``comm`` (collective) a rank's weights may sum to zero (the sum over every rank is
    checked by :meth:`_GLMEstimator._total_weight`), and every rank raises when one rank's
    weights fail, so that no rank waits for a peer that gave up."""
    if comm is None:
        sw = _check_sample_weight(sample_weight, X, dtype=np.float64)
        return glm.check_sample_weight(sw, sw.shape[0])
    def check():
        n = X.shape[0]
        if sample_weight is None or np.ndim(sample_weight) == 0:  # scikit-learn's forms
            sw = np.full(n, 1.0 if sample_weight is None else float(sample_weight))
        else:  # (scikit-learn's own check refuses weights that sum to zero)
            sw = np.asarray(sample_weight, dtype=np.float64)
            if sw.ndim != 1:
                raise ValueError(f"sample_weight must be 1-D, got shape {sw.shape}")
        return glm.check_sample_weight(sw, n, positive_sum=False)

    return glm.check_on_every_rank(comm, check, "sample_weight")


class _GLMEstimator(BaseEstimator):
    """Shared fit/predict machinery (not public)."""

    _loss = "linear"

    # -- conversions --------------------------------------------------------------------------
    def _lambda(self, total_weight: float) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def _total_weight(self, sw) -> float:
        """The sum of the sample weights, over every rank of ``comm``."""
        comm = getattr(self, "comm", None)
        if comm is None:
            return float(sw.sum())
        total = float(comm.allreduce(np.array([sw.sum()], dtype=np.float64))[0])
        if not total > 0:
            raise ValueError("sample_weight sums to zero over every rank: at least one sample "
                             "needs a positive weight")
        return total

    def _validate_X(self, X, reset):
        return validate_data(self, X, accept_sparse=["csr", "csc", "coo"],
                             dtype=_check_dtype(self.dtype), reset=reset)

    def _out_dtype(self, X_dtype):
        """The dtype of ``coef_`` and ``intercept_`` after a fit on data of ``X_dtype`` (the
        data's: scikit-learn's LogisticRegression, Ridge and LinearRegression preserve
        float32)."""
        return np.dtype(X_dtype)

    def _penalty(self):
        """The solvers' penalty, ``"l2"``, ``"l1"`` or ``"elasticnet"`` (``"l2"`` with a zero
        ``lambda`` when unpenalised); only :class:`LogisticRegression` has another than
        ``"l2"``."""
        return "l2"

    def _l1_ratio(self):
        """``fit_glm``'s ``l1_ratio`` for the elastic net, else ``None``."""
        return None

    def _check_params(self):
        """Errors that name the parameter, before any work (the solver's: the registry's
        :func:`~roofline.glm.check_solver`)."""
        solver = self._solver_name()
        self._check_solver_row(solver)
        for name in ("max_iter", "batch_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        _resolve_n_jobs(self.n_jobs)
        if self.device not in ("cpu", "gpu"):
            raise ValueError(f"device must be 'cpu' or 'gpu', got {self.device!r}")
        if self.device == "gpu" and solver != "auto" and solver not in _gpu_rows():
            raise ValueError(f"device='gpu' runs solver in {[*_gpu_rows(), 'auto']}, got "
                             f"solver={self.solver!r}")
        _check_number("tol", self.tol, low=0.0, low_open=False)
        _check_dtype(self.dtype)
        _check_number("learning_rate", self.learning_rate, low=0.0, low_open=True)
        _check_random_state(self.random_state)
        if not isinstance(getattr(self, "warm_start", False), (bool, np.bool_)):
            raise ValueError(f"warm_start must be a bool, got {self.warm_start!r}")
        if getattr(self, "intercept_scaling", None) is not None:
            _check_number("intercept_scaling", self.intercept_scaling, low=0.0, low_open=True)

    def _warm_init(self, k, n_features):
        """The previous fit's ``{"coef": (k, d), "intercept": (k,)}`` when ``warm_start`` is set
        and there is one, else ``None``; a ValueError naming ``warm_start`` when its shape is
        not this fit's (``k`` outputs, ``n_features`` features)."""
        if not getattr(self, "warm_start", False) or not hasattr(self, "coef_"):
            return None
        coef = np.atleast_2d(np.asarray(self.coef_, dtype=np.float64))
        if coef.shape != (k, n_features):
            raise ValueError(f"warm_start=True: the previous fit's coef_ has shape {coef.shape}, "
                             f"this fit needs {(k, n_features)} (set warm_start=False to refit "
                             f"from zero)")
        b = np.atleast_1d(np.asarray(self.intercept_, dtype=np.float64))
        return {"coef": coef.copy(), "intercept": b.copy() if self.fit_intercept
                else np.zeros(k)}

    def _fit_scaled(self, fit, Xc, warm):
        """``fit(Xc, warm, fit_intercept)`` (a ``(coef, intercept, n_iter, state)``), with
        liblinear's ``intercept_scaling`` where it is set: ``Xc`` gains a constant feature
        of that value, regularised as the others, and ``intercept_ = intercept_scaling *``
        its weight (the solver then fits no intercept of its own)."""
        s = getattr(self, "intercept_scaling", None)
        if s is None or not self.fit_intercept:
            return fit(Xc, warm, self.fit_intercept)
        s = float(s)
        if warm is not None:
            warm = {"coef": np.hstack([warm["coef"], warm["intercept"][:, None] / s]),
                    "intercept": np.zeros_like(warm["intercept"])}
        coef, _, n_iter, state = fit(_append_constant_row(Xc, s), warm, False)
        coef = np.atleast_2d(coef)
        return coef[:, :-1].copy(), s * coef[:, -1], n_iter, state

    def _check_solver_row(self, solver):
        """The registry's check of ``solver`` for this loss and penalty
        (:func:`~roofline.glm.check_solver`)."""
        check_solver(solver, loss=glm.resolve_loss(self._loss), penalty=self._penalty(),
                     comm=getattr(self, "comm", None) is not None, runner=RUNNERS)

    def _solver_name(self, n_features=None):
        """The registry's row that ``solver`` names (:class:`Ridge` also takes scikit-learn's
        names, mapped to a row; ``n_features`` where the row depends on it)."""
        return self.solver

    def _resolve_solver(self, Xc, sw, lam, fit_intercept):
        """The solver to run and, for ``solver="auto"``, why (``glm/_auto.py``)."""
        solver = self._solver_name(Xc.shape[0])
        if solver != "auto":
            if solver != self.solver:
                logger.info("%s(solver=%r) runs Roofline's %r (the same optimum)",
                            type(self).__name__, self.solver, solver)
            return solver, None
        if self.device == "gpu":
            rows = _gpu_rows(loss=glm.resolve_loss(self._loss), penalty=self._penalty())
            if not rows:
                raise ValueError(f"device='gpu': no solver runs loss={self._loss!r} with "
                                 f"penalty={self._penalty()!r} on the GPU (rows: "
                                 f"{list(_gpu_rows())})")
            return rows[0], "device='gpu': the first registry row that runs on the GPU"
        return choose_solver(Xc, loss=glm.resolve_loss(self._loss), penalty=self._penalty(),
                             alpha=lam, fit_intercept=fit_intercept,
                             n_jobs=_resolve_n_jobs(self.n_jobs),
                             comm=getattr(self, "comm", None), sample_weight=sw,
                             runner=RUNNERS)

    def _make_optimizer(self, s, certified=False):
        """The minibatch optimizer of the row ``s``; L-BFGS with ``certified`` stops on the
        learner's certificate only (its own gradient and decrease tests off)."""
        if s == "lbfgs":
            if certified:
                return LBFGS(max_iter=self.max_iter, tol=0.0, ftol=0.0)
            return LBFGS(max_iter=self.max_iter, tol=self.tol, ftol=min(1e-12, self.tol * 1e-3))
        if s == "adagrad":
            return ADAGrad(lr=self.learning_rate)
        return SGD(lr=self.learning_rate)

    def _fit_targets(self, Xc, Y, sw, lam, warm=None, passes=None, fit_intercept=None):
        """Train the k-output GLM on column-layout ``Xc`` and targets ``Y`` ((n,) or (k, n)),
        from ``warm`` (``{"coef", "intercept"}`` and, for ``partial_fit``, ``"opt"``) when
        given."""
        fi = self.fit_intercept if fit_intercept is None else fit_intercept
        k = 1 if Y.ndim == 1 else Y.shape[0]
        dt = Xc.dtype
        solver, reason = self._resolve_solver(Xc, sw, lam, fi)
        self.solver_ = solver
        if reason is not None:
            logger.info("%s(solver='auto') runs %r: %s", type(self).__name__, solver, reason)
        spec = get_solver(solver)
        if spec.runner == "fit_glm":
            return self._fit_glm(Xc, Y, sw, lam, spec, fi, warm)
        if spec.runner == "estimator":
            return self._fit_row(Xc, Y, sw, lam, spec, fi)
        if solver == "lbfgs" and dt == np.float32:
            # L-BFGS's line search needs the objective to more digits than float32 sums give
            # (it stops early, ~1e-6 relative from the optimum): it reads float64 values
            # (sparse: a copy of the values only, the indices shared)
            Xc, dt = _float64_values(Xc), np.dtype(np.float64)
        model = GLM(loss=self._loss, n_outputs=k, fit_intercept=fi, dtype=dt.name)
        n = Xc.shape[1]
        # tol is the certified relative duality gap wherever the objective has one (an L2
        # term and a smooth loss) and float64 can evaluate it: with feature values beyond
        # LBFGS_AUTO_SCALE (L-BFGS's rescaled regime) the dual point's products X a would
        # have to cancel to far below their rounding, so tol is L-BFGS's gradient test
        # there; partial_fit's single passes check nothing
        certified = (passes is None and lam > 0
                     and glm.resolve_loss(self._loss) in glm.SMOOTH_LOSSES
                     and _max_abs(Xc) <= glm.LBFGS_AUTO_SCALE)
        opt = self._make_optimizer(solver, certified)
        batch = max(n, 1) if solver == "lbfgs" else self.batch_size
        src = MatSource(Xc, Y.astype(dt, copy=False), sw.astype(dt, copy=False),
                        batch_size=batch)
        mixins = [L2Regularizer(lam)] if lam > 0 else []
        learner = Learner(src, model, opt, mixins=mixins, progress=bool(self.verbose),
                          n_passes=passes or self.max_iter,
                          tol=self.tol if certified and self.tol > 0 else None)
        if warm is not None:
            model.set_parameters(warm["coef"], warm["intercept"])
            learner._setup()
            if warm.get("opt") is not None:
                opt.set_state(warm["opt"])
        with glm.verbose_logging(self.verbose):
            result = learner.train()
        if solver == "lbfgs":
            n_iter = int(opt.result.nit) if opt.result is not None else opt.t
        else:
            n_iter = result.n_passes
        return (np.array(model.coef, dtype=np.float64), np.array(model.intercept, np.float64),
                max(n_iter, 1), opt.state() if spec.partial_fit else None)

    def _per_output(self, spec, Y, sw, lam, fit_one):
        """Check the row ``spec`` against the weights (the registry's
        :func:`~roofline.glm.check_solver`) and the regularisation, then ``fit_one(r, y_row)``
        (a result with ``coef``, ``intercept``, ``n_iter``) for each output row ``r`` of
        ``Y``; the stacked ``(coef, intercept, n_iter, None)``."""
        weighted = _nonuniform(sw, self.comm) is not None
        # over comm, fit_glm's rows check the weights themselves, on every rank alike (the
        # dual of cocoa / hcocoa takes them there)
        check_solver(spec.name, loss=glm.resolve_loss(self._loss), penalty=self._penalty(),
                     comm=self.comm is not None,
                     weighted=weighted and not (self.comm is not None
                                                and spec.runner == "fit_glm"),
                     runner=RUNNERS)
        if lam <= 0:
            raise ValueError(f"solver={spec.name!r} needs a positive regularisation")
        Ys = Y.reshape(1, -1) if Y.ndim == 1 else Y
        res = [fit_one(r, Ys[r]) for r in range(Ys.shape[0])]
        return (np.vstack([np.asarray(r.coef, dtype=np.float64) for r in res]),
                np.array([float(r.intercept) for r in res]),
                max(max(int(r.n_iter) for r in res), 1), None)

    def _fit_glm(self, Xc, Y, sw, lam, spec, fit_intercept, warm=None):
        """A row that :func:`roofline.glm.fit_glm` runs, per output, over ``comm`` when given
        (each rank holds examples: the dual where the row has one); ``tol`` is its relative
        duality gap, whatever the row.  ``warm`` starts the primal
        solvers from its coefficients and intercept (``coef_init``, ``intercept_init``: the
        primal CD and ``newton`` start from both, ``scd``'s dual holds the intercept through
        its first sweeps, the other duals start from zero)."""
        dual = True if self.comm is not None and "dual" in spec.formulations else None
        return self._per_output(spec, Y, sw, lam, lambda r, y: glm.fit_glm(
            Xc, y, loss=glm.resolve_loss(self._loss), alpha=lam, penalty=self._penalty(),
            l1_ratio=self._l1_ratio(),
            solver=spec.name, n_jobs=_resolve_n_jobs(self.n_jobs), tol=self.tol,
            max_iter=self.max_iter, fit_intercept=fit_intercept,
            random_state=_check_random_state(self.random_state), verbose=self.verbose,
            comm=self.comm, dual=dual, coef_init=None if warm is None else warm["coef"][r],
            intercept_init=None if warm is None or not fit_intercept
            else float(warm["intercept"][r]),
            sample_weight=sw if self.comm is not None else _nonuniform(sw),
            device=self.device))

    def _fit_row(self, Xc, Y, sw, lam, spec, fit_intercept):
        """A row the estimators run themselves (``runner="estimator"``: ``vw-hybrid``,
        :func:`~roofline.learners.fit_vw_hybrid`) per output, over ``comm`` when given."""
        fit = spec.load()

        def one(r, y):
            with glm.verbose_logging(self.verbose):
                return fit(Xc, y, loss=glm.resolve_loss(self._loss), alpha=lam, comm=self.comm,
                           fit_intercept=fit_intercept, max_iter=self.max_iter,
                           tol=self.tol, verbose=self.verbose)

        return self._per_output(spec, Y, sw, lam, one)

    def _decision(self, X):
        check_is_fitted(self, "coef_")
        X = self._validate_X(X, reset=False)
        coef = np.atleast_2d(self.coef_)
        dt = np.result_type(X.dtype, coef.dtype)  # scikit-learn's X @ coef_.T
        Xc = to_column_layout(X, dt)
        model = GLM(loss=self._loss, n_outputs=coef.shape[0], fit_intercept=self.fit_intercept,
                    dtype=dt.name)
        model.set_parameters(coef, np.atleast_1d(self.intercept_))
        eta = model.linear(Xc)
        return eta.T  # (n_samples, k)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags


def _gpu_rows(**conditions):
    """The registry's ``fit_glm`` rows that run on the GPU (``"gpu"`` in their ``devices``),
    for the conditions of :func:`roofline.glm.solvers` (``loss=``, ``penalty=``)."""
    return tuple(r.name for r in glm.solvers(runner="fit_glm", formulation="dual",
                                             **conditions) if "gpu" in r.devices)


def _solver_set(runner, **conditions):
    """``"a", "b", ..., "auto"``: the registry's names, for a docstring's ``{...}``."""
    names = solver_names(runner=runner, **conditions)
    return ", ".join(f'"{n}"' for n in names)


def _common_doc(extra=""):
    return f"""
    fit_intercept : bool, default=True
        Learn an intercept (unregularised, except in the duals of ``tpa-scd``, ``cocoa``,
        ``hcocoa`` and the GPU; see the module docstring).
    solver : {{{_solver_set(RUNNERS)}}}
        The rows of the solver registry (:func:`roofline.glm.solvers`), see the module
        docstring.  ``adagrad``/``sgd`` provide ``partial_fit``.  ``newton`` is
        trust-region Newton-CG on the primal (smooth losses, any sample weights).
        ``cholesky``: ridge by its normal equations (exact; up to 2048 features).  ``auto``
        (the default) chooses from the data by the measured rule of ``glm/_auto.py``:
        ``cholesky`` for ridge with at most 1024 features, ``newton`` for the other smooth
        problems, the dual ``scd``
        for large sparse strongly regularised ones and for the hinge, ``lbfgs`` without
        regularisation, with feature values beyond ``2^20`` (it rescales them) or with
        non-uniform weights and the hinge, ``cocoa`` with ``comm``; the choice is logged and
        stored in ``solver_``.  ``vw-hybrid``
        is Vowpal Wabbit's AllReduce learner (an online pass, then L-BFGS; logistic and
        squared losses; :func:`~roofline.learners.fit_vw_hybrid`).
    max_iter : int, default=200
        L-BFGS or Newton iterations, passes (``adagrad``/``sgd``) or CD epochs/rounds.  A fit
        that stops on it (or whose line search fails) before meeting ``tol`` warns with
        :class:`sklearn.exceptions.ConvergenceWarning`.
    tol : float, default=1e-6
        The certified relative suboptimality, the same for every solver: the fit stops once
        the duality gap of its objective ``P`` (:func:`roofline.glm.duality_gap`, which
        bounds ``P - P*``) is at most ``tol * |P|``.  That is the test of every
        :func:`roofline.glm.fit_glm` row (``newton`` and ``cholesky`` included), of
        ``vw-hybrid``, and of ``lbfgs``, ``adagrad`` and ``sgd`` where the objective has a
        certificate (a smooth loss and ``lambda > 0``; ``adagrad``/``sgd`` check it at the end
        of each pass, one more pass over the data, and stop early when it is met).
        Elsewhere: unregularised ``lbfgs`` (``LinearRegression``), ``lbfgs`` with the hinge or
        with feature values beyond ``2^20`` (``glm.LBFGS_AUTO_SCALE``: float64 cannot evaluate
        the certificate there) and the estimator-side L-BFGS-B without an L2 term
        (``positive=True`` with ``alpha=0``, ``LinearSVC(penalty="l1")``) stop on the
        projected gradient's max-norm (mean-loss scale), with no bound on the suboptimality;
        ``adagrad``/``sgd`` there run ``max_iter`` passes; ``Ridge(positive=True)`` with
        ``alpha > 0`` stops on a certified bound (see ``positive``); the multinomial fit on
        the relative gradient norm (see ``multi_class``).  Each solver's meaning: the user
        guide, "What tol means".
    batch_size : int, default=256
        Minibatch size of ``adagrad``/``sgd``.
    learning_rate : float, default=0.1
        Step size of ``adagrad``/``sgd``.
    n_jobs : int or None, default=None
        Threads of the CD and Newton solvers, scikit-learn's meaning: ``None`` is 1, ``-1``
        every CPU this process may use, ``-2`` all but one, ...
    random_state : int or None
        Seed of the CD solvers' coordinate order.
    verbose : int, default=0
        Log progress (one line per L-BFGS iteration, minibatch pass or CD check) to stderr,
        terminal or not, unless logging is configured; a progress bar on a terminal.
    comm : roofline.comm.Communicator or None
        Fit with this process as one rank of ``comm`` (``solver`` in
        {{{_solver_set(RUNNERS, comm=True)}}}: the registry's rows that take ``comm=``): each
        rank passes its own rows (examples) of ``X`` and ``y``; the classes, the total sample
        weight and the model are global, the same on every rank.
    warm_start : bool, default=False
        Start ``fit`` from the previous fit's ``coef_`` and ``intercept_`` (scikit-learn's
        meaning; their shape must be this fit's).  The L-BFGS and multinomial fits start from
        both; the primal CD and Newton fits of :func:`roofline.glm.fit_glm` from both
        (``coef_init``, ``intercept_init``), ``scd``'s dual from the intercept; the other dual
        CD fits, ``cholesky`` and ``vw-hybrid`` start from zero whatever this says.
        ``partial_fit`` always continues.
    device : {{"cpu", "gpu"}}, default="cpu"
        ``"gpu"``: fit by TPA-SCD of the dual on the GPU (:func:`roofline.glm.fit_glm`'s
        ``device="gpu"``; ``solver`` ``"auto"`` or a registry row with ``"gpu"`` in its
        ``devices``; the L2 penalty, a positive regularisation, uniform sample weights, no
        ``comm``).  The data are copied from the host (streamed by chunks when larger than
        the device memory); ``coef_`` and ``intercept_`` are numpy arrays as on the CPU, and
        ``tol`` is the same relative duality gap.  A ``RuntimeError`` names the missing device
        where no GPU (nor numba's CUDA simulator) is usable.{extra}
    """


def _dtype_doc(outputs, svc=False):
    """The ``dtype`` parameter's entry (``outputs``: the methods whose values follow it)."""
    rule = ("``None`` keeps float32 input (dense or sparse) in float32 for the solvers (no "
            "upcast copy) but, as scikit-learn's liblinear-based LinearSVC, returns float64 "
            "``coef_``, ``intercept_`` and " + outputs + "; ``\"float32\"`` returns float32 "
            "ones") if svc else (
            "``None`` (scikit-learn's rule) keeps float32 input (dense or sparse) in float32 "
            "and converts any other to float64; ``coef_``, ``intercept_`` and " + outputs +
            " then have the data's dtype")
    text = (f"The dtype of the data the solvers read: {rule}.  ``\"float64\"`` / "
            f"``\"float32\"`` convert the input to that dtype.  The solvers may accumulate "
            f"in float64 whatever this says.")
    return ('dtype : {None, "float64", "float32"}, default=None\n'
            + textwrap.fill(text, 92, initial_indent=" " * 8, subsequent_indent=" " * 8))


#: The classifiers' parameters ``class_weight`` and ``intercept_scaling`` (for _common_doc).
_CLASSIFIER_DOC = """
    class_weight : dict, "balanced" or None, default=None
        Multiply each sample's weight by its class's (scikit-learn's meaning): a dict
        ``{{label: weight}}`` (1 for the classes it omits), or ``"balanced"``,
        ``n_samples / (n_classes * count(class))`` with the counts {counts} (over every
        rank with ``comm``).  The regularisation is then ``1 / (C * sum(weights))``, as in
        scikit-learn.  ``partial_fit`` takes a dict only.{ovr}
    intercept_scaling : float or None, default=None
        ``None``: the intercept is a parameter of its own, not regularised (scikit-learn's
        lbfgs / newton-cg meaning; the duals of ``tpa-scd``, ``cocoa``, ``hcocoa`` and the GPU
        regularise it, see the module docstring).  A positive float: liblinear's meaning, as
        scikit-learn's {liblinear}: every example gains a constant feature of this value,
        whose weight ``w_c`` is regularised with the others, and ``intercept_ =
        intercept_scaling * w_c`` (``fit`` only; a copy of ``X`` with one more feature)."""


class _Classifier(ClassifierMixin, _GLMEstimator):
    #: ``class_weight="balanced"`` counts the classes by sample weight (scikit-learn 1.9's
    #: LogisticRegression and LinearSVC) or by samples (False)
    _balanced_by_weight = True

    def _lambda(self, total_weight):  # C sum_i s_i l_i + ||w||^2 / 2
        _check_number("C", self.C, low=0.0, low_open=True)
        return glm.alpha_from_peer("C", self.C, total_weight)

    def _is_multinomial(self, n_classes):
        """Whether this fit is a multinomial one (only :class:`LogisticRegression`)."""
        return False

    def _per_output_weights(self, y, sw):
        """The sample weights of each one-vs-rest problem where they differ between the
        problems (:class:`LinearSVC`'s ``class_weight`` with more than two classes), else
        ``None`` (every problem takes ``_with_class_weight``'s)."""
        return None

    def _encode(self, y, classes):
        if len(classes) < 2:
            raise ValueError(
                f"{type(self).__name__} needs samples of at least 2 classes in the data, but "
                f"the data contains only one class: {classes[0]!r}"
            )
        if len(classes) == 2:
            return (y == classes[1]).astype(np.float64)
        return (y[None, :] == classes[:, None]).astype(np.float64)  # (k, n), one-vs-rest

    def _with_class_weight(self, y, sw):
        """``sw`` times the weight of each sample's class (``class_weight``; scikit-learn's
        meaning, see :func:`_class_weights`)."""
        cw = getattr(self, "class_weight", None)
        if cw is None:
            return sw
        y_idx = np.searchsorted(self.classes_, y)
        per_class = _class_weights(cw, self.classes_, y_idx,
                                   sw if self._balanced_by_weight else None, self.comm)
        sw = sw * per_class[y_idx]
        if self.comm is None and not sw.sum() > 0:
            raise ValueError("class_weight times sample_weight sums to zero: at least one "
                             "sample needs a positive weight")
        return sw

    def fit(self, X, y, sample_weight=None):
        """Fit on ``X`` (n_samples x n_features, dense or sparse) and class labels ``y``.

        Parameters
        ----------
        X : array-like or sparse matrix, shape (n_samples, n_features)
            The examples (float32 kept as float32 with ``dtype=None``).
        y : array-like, shape (n_samples,)
            The class labels.
        sample_weight : array-like (n_samples,) or None
            The samples' weights (multiplied by ``class_weight``'s).

        Returns
        -------
        self
            The fitted estimator.
        """
        self._check_params()
        X, y = validate_data(self, X, y, accept_sparse=["csr", "csc", "coo"],
                             dtype=_check_dtype(self.dtype))
        check_classification_targets(y)
        self.classes_ = np.unique(y)
        if self.comm is not None:  # every rank's classes
            self.classes_ = np.unique(np.concatenate(self.comm.allgather(self.classes_)))
        multinomial = self._multinomial = self._is_multinomial(len(self.classes_))
        k = 1 if len(self.classes_) == 2 else len(self.classes_)
        warm = self._warm_init(k, X.shape[1])
        Y = None if multinomial else self._encode(y, self.classes_)
        sw = _check_sample_weights(sample_weight, X, self.comm)
        per_output = None if multinomial else self._per_output_weights(y, sw)
        if per_output is None:
            sw = self._with_class_weight(y, sw)
        Xc = to_column_layout(X, X.dtype)
        lam = self._lambda(self._total_weight(sw))
        if per_output is not None:  # one problem per class, each with its own weights
            fits = []
            for r, sw_r in enumerate(per_output):
                lam_r = self._lambda(self._total_weight(sw_r))
                warm_r = None if warm is None else {"coef": warm["coef"][r:r + 1],
                                                    "intercept": warm["intercept"][r:r + 1]}
                fits.append(self._fit_scaled(
                    lambda Xs, w, fi, r=r, sw_r=sw_r, lam_r=lam_r: self._fit_targets(
                        Xs, Y[r], sw_r, lam_r, warm=w, fit_intercept=fi), Xc, warm_r))
            coef = np.vstack([np.atleast_2d(f[0]) for f in fits])
            b = np.concatenate([np.atleast_1d(f[1]) for f in fits])
            n_iter, state = max(f[2] for f in fits), None
        elif multinomial:
            y_idx = np.searchsorted(self.classes_, y)
            coef, b, n_iter, state = self._fit_scaled(
                lambda Xs, w, fi: self._fit_multinomial(Xs, y_idx, sw, lam, w, fi), Xc, warm)
        else:
            coef, b, n_iter, state = self._fit_scaled(
                lambda Xs, w, fi: self._fit_targets(Xs, Y, sw, lam, warm=w, fit_intercept=fi),
                Xc, warm)
        out = self._out_dtype(X.dtype)
        self.coef_ = np.atleast_2d(coef).astype(out)
        self.intercept_ = np.atleast_1d(b).astype(out)
        self.n_iter_ = np.array([n_iter])
        self._opt_state = state
        return self

    @available_if(lambda self: _has_partial_fit(self.solver))
    def partial_fit(self, X, y, classes=None, sample_weight=None):
        """One pass of the minibatch solver over ``(X, y)``, continuing from the current model
        and optimizer state (``classes`` is required on the first call).  The L2 weight of this
        call is ``1 / (C * sum(sample_weight))`` of this call's data.

        Parameters
        ----------
        X : array-like or sparse matrix, shape (n_samples, n_features)
            The examples (float32 kept as float32 with ``dtype=None``).
        y : array-like, shape (n_samples,)
            The class labels, all in ``classes``.
        classes : array-like or None
            Every class label (the first call only; later calls may repeat it).
        sample_weight : array-like (n_samples,) or None
            The samples' weights.

        Returns
        -------
        self
            The updated estimator.
        """
        self._check_params()
        first = not hasattr(self, "classes_")
        if first:
            if classes is None:
                raise ValueError("classes must be passed on the first call to partial_fit")
            self.classes_ = np.unique(classes)
        elif classes is not None and not np.array_equal(np.unique(classes), self.classes_):
            raise ValueError(f"classes={classes!r} differs from the first call's "
                             f"{self.classes_!r}")
        X, y = validate_data(self, X, y, accept_sparse=["csr", "csc", "coo"],
                             dtype=_check_dtype(self.dtype), reset=first)
        check_classification_targets(y)
        if not np.isin(y, self.classes_).all():
            raise ValueError("y contains labels that are not in classes")
        Y = self._encode(y, self.classes_)
        self._multinomial = False  # the minibatch solvers fit one-vs-rest
        if isinstance(getattr(self, "class_weight", None), str):
            raise ValueError("class_weight='balanced' is not supported by partial_fit (the "
                             "class counts of one call are not the data's): pass a dict, e.g. "
                             "from sklearn.utils.class_weight.compute_class_weight on all of y")
        sw = self._with_class_weight(y, _check_sample_weights(sample_weight, X, self.comm))
        Xc = to_column_layout(X, X.dtype)
        warm = None if first else {"coef": self.coef_, "intercept": self.intercept_,
                                   "opt": self._opt_state}
        coef, b, _, state = self._fit_targets(Xc, Y, sw, self._lambda(self._total_weight(sw)),
                                              warm=warm, passes=1)
        out = self._out_dtype(X.dtype)
        self.coef_ = np.atleast_2d(coef).astype(out)
        self.intercept_ = np.atleast_1d(b).astype(out)
        self.n_iter_ = np.array([getattr(self, "n_iter_", np.array([0]))[0] + 1])
        self._opt_state = state
        return self

    def decision_function(self, X):
        """Margins ``eta = X w + b``.

        Parameters
        ----------
        X : array-like or sparse matrix, shape (n_samples, n_features)
            The examples (float32 kept as float32 with ``dtype=None``).

        Returns
        -------
        ndarray, shape (n_samples,) for two classes, (n_samples, n_classes) else
            In the dtype of ``X @ coef_.T`` (scikit-learn's).
        """
        d = self._decision(X)
        return d[:, 0].copy() if d.shape[1] == 1 else np.ascontiguousarray(d)

    def predict(self, X):
        """The predicted class of each example.

        Parameters
        ----------
        X : array-like or sparse matrix, shape (n_samples, n_features)
            The examples (float32 kept as float32 with ``dtype=None``).

        Returns
        -------
        ndarray, shape (n_samples,)
            Labels from ``classes_``.
        """
        d = self.decision_function(X)
        idx = (d > 0).astype(int) if d.ndim == 1 else d.argmax(axis=1)
        return self.classes_[idx]


class LogisticRegression(_Classifier):
    __doc__ = """Regularised logistic regression (scikit-learn's objective and ``C``).

    Minimises ``C sum_i s_i log(1 + exp(-y_i eta_i)) + ||w||^2 / 2`` (``lambda = 1 / (C sum s)``
    in the learners' scaling), or with ``||w||_1`` for ``penalty="l1"``, or with
    ``l1_ratio ||w||_1 + (1 - l1_ratio) ||w||^2 / 2`` for ``penalty="elasticnet"``, or the
    loss alone for ``penalty=None`` (or ``C=np.inf``).  With more than two classes the fit is
    multinomial (the softmax loss ``C sum_i s_i (logsumexp(eta_i) - eta_i[y_i]) + ||W||^2 / 2``,
    scikit-learn's default, by :func:`roofline.glm.fit_multinomial`, over every rank's
    examples with ``comm``) when ``solver`` is ``"auto"``, ``"newton"`` or ``"lbfgs"``;
    otherwise one-vs-rest.

    Parameters
    ----------
    C : float, default=1.0
        Inverse regularisation strength (scikit-learn's); ``np.inf``: no penalty.
    penalty : {"l2", "l1", "elasticnet", None}, default="l2"
        scikit-learn's.  ``"l1"``: ``C sum_i s_i l_i + ||w||_1``, fitted by the primal
        coordinate-descent solvers (``solver`` ``"auto"``, ``"scd"``, ``"tpa-scd"``,
        ``"cocoa"``, ``"hcocoa"``, ``"pure-block"``; more than two classes one-vs-rest).
        ``None``: the unpenalised fit (``lambda = 0``; ``solver="auto"`` runs L-BFGS, or the
        multinomial fit with more than two classes), on data that is not separable.
        ``"elasticnet"``: L1 and L2 mixed by ``l1_ratio``, fitted by the primal coordinate
        descent (``solver`` ``"auto"``, ``"scd"``, ``"tpa-scd"``; in one process, uniform
        sample weights; more than two classes one-vs-rest, where scikit-learn's saga fits
        the multinomial model).
    l1_ratio : float or None, default=None
        scikit-learn's elastic-net mixing in ``[0, 1]``: ``0`` is ``"l2"``, ``1`` is ``"l1"``
        (with ``penalty`` ``"l2"``, the default, or ``"elasticnet"``; scikit-learn >= 1.8
        names the penalty by ``l1_ratio`` alone).
    """ + _common_doc(_CLASSIFIER_DOC.format(counts="weighted by ``sample_weight``", ovr="",
                                     liblinear="``LogisticRegression(solver='liblinear')``")) \
        + """
    """ + _dtype_doc("``predict_proba``, ``decision_function``") + """
    multi_class : {"auto", "multinomial", "ovr"}, default="auto"
        More than two classes: ``"auto"`` fits the multinomial model where the solver allows
        (see above) and one-vs-rest otherwise; ``"multinomial"`` requires it (an error with
        another solver); ``"ovr"``: one binary problem per class.  For
        ``"multinomial"`` fits, ``solver="auto"`` and ``"newton"`` run trust-region Newton-CG
        and ``"lbfgs"`` L-BFGS, and ``tol`` bounds the gradient's max-norm relative to its
        value at zero (:func:`roofline.glm.fit_multinomial`'s test: not a certified
        suboptimality).

    Attributes
    ----------
    coef_ : ndarray (1, n_features) or (n_classes, n_features)
    intercept_ : ndarray (1,) or (n_classes,)
    classes_ : ndarray
    n_iter_ : ndarray (1,)
    """

    _loss = "logistic"

    def __init__(self, C=1.0, *, penalty="l2", l1_ratio=None, fit_intercept=True,
                 intercept_scaling=None, class_weight=None, solver="auto", max_iter=200,
                 tol=1e-6, batch_size=256, learning_rate=0.1, n_jobs=None, random_state=None,
                 verbose=0, dtype=None, comm=None, multi_class="auto", warm_start=False,
                 device="cpu"):
        self.C = C
        self.penalty = penalty
        self.l1_ratio = l1_ratio
        self.intercept_scaling = intercept_scaling
        self.class_weight = class_weight
        self.warm_start = warm_start
        self.fit_intercept = fit_intercept
        self.solver = solver
        self.max_iter = max_iter
        self.tol = tol
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose
        self.dtype = dtype
        self.comm = comm
        self.device = device
        self.multi_class = multi_class

    _MULTINOMIAL_SOLVERS = ("auto", *glm.MULTINOMIAL_SOLVERS)
    _PENALTIES = ("l2", "l1", "elasticnet", None)

    def _effective_penalty(self):
        """``"l2"``, ``"l1"``, ``"elasticnet"`` or ``None`` from ``penalty``, ``l1_ratio`` and
        ``C`` (see the class docstring), or a ValueError naming the parameter."""
        if self.penalty not in self._PENALTIES:
            raise ValueError(f"penalty must be one of {list(self._PENALTIES)}, got "
                             f"{self.penalty!r}")
        r = self.l1_ratio
        if r is not None:
            r = _check_number("l1_ratio", r, low=0.0, low_open=False)
            if r > 1.0:
                raise ValueError(f"l1_ratio must be in [0, 1], got {self.l1_ratio!r}")
        if self.penalty == "elasticnet" or (self.penalty == "l2" and r is not None):
            # scikit-learn >= 1.8: l1_ratio alone names the penalty
            if r is None:
                raise ValueError("penalty='elasticnet' needs l1_ratio (a float in [0, 1])")
            penalty = "l1" if r == 1.0 else "l2" if r == 0.0 else "elasticnet"
        else:
            if r is not None and (self.penalty is None or r != 1.0):
                raise ValueError(f"l1_ratio={self.l1_ratio!r} contradicts "
                                 f"penalty={self.penalty!r}")
            penalty = self.penalty
        if isinstance(self.C, numbers.Real) and not isinstance(self.C, bool) \
                and self.C == np.inf:
            return None
        return penalty

    def _penalty(self):
        p = self._effective_penalty()
        return "l2" if p is None else p

    def _l1_ratio(self):
        return float(self.l1_ratio) if self._penalty() == "elasticnet" else None

    def _lambda(self, total_weight):  # C sum_i s_i l_i + R(w)
        if self._effective_penalty() is None:
            return 0.0
        return super()._lambda(total_weight)

    def _is_multinomial(self, n_classes):
        if self.multi_class not in ("auto", "multinomial", "ovr"):
            raise ValueError(f"multi_class must be 'auto', 'multinomial' or 'ovr', got "
                             f"{self.multi_class!r}")
        possible = (self.solver in self._MULTINOMIAL_SOLVERS and self._penalty() == "l2"
                    and self.device == "cpu")  # the GPU fits one-vs-rest
        if self.multi_class == "multinomial" and not possible:
            raise ValueError(f"multi_class='multinomial' needs solver in "
                             f"{list(self._MULTINOMIAL_SOLVERS)} and the L2 penalty (or none), "
                             f"got solver={self.solver!r}"
                             + ("" if self._penalty() == "l2"
                                else f" with penalty={self._penalty()!r}"))
        return n_classes > 2 and self.multi_class != "ovr" and possible

    def _fit_multinomial(self, Xc, y_idx, sw, lam, warm=None, fit_intercept=True):
        """The multinomial fit (:func:`roofline.glm.fit_multinomial`), from ``warm`` when
        given."""
        # "auto": fit_multinomial's default, the first of its solvers
        solver = self.solver if self.solver in glm.MULTINOMIAL_SOLVERS else \
            glm.MULTINOMIAL_SOLVERS[0]
        self.solver_ = solver
        with glm.verbose_logging(self.verbose):
            res = glm.fit_multinomial(
                Xc, y_idx, alpha=lam,  # 0: unpenalised (the centred optimum)
                n_classes=len(self.classes_),
                sample_weight=_nonuniform(sw, self.comm), comm=self.comm,
                fit_intercept=fit_intercept, solver=solver, tol=self.tol,
                max_iter=self.max_iter, verbose=self.verbose,
                coef_init=None if warm is None else warm["coef"],
                intercept_init=None if warm is None or not fit_intercept
                else warm["intercept"])
        return res.coef, res.intercept, res.n_iter, None

    def predict_proba(self, X):
        """Class probabilities (the softmax of the decision values for a multinomial fit;
        one-vs-rest sigmoids, normalised, otherwise).

        Parameters
        ----------
        X : array-like or sparse matrix, shape (n_samples, n_features)

        Returns
        -------
        ndarray, shape (n_samples, n_classes)
            Columns in the order of ``classes_``.
        """
        from scipy.special import expit, softmax

        d = self._decision(X)  # in the dtype of coef_ (and X): float32 stays float32
        if getattr(self, "_multinomial", False):
            return softmax(d, axis=1)
        p = expit(d)
        if p.shape[1] == 1:
            return np.hstack([1 - p, p])
        return p / p.sum(axis=1, keepdims=True)

    def predict_log_proba(self, X):
        """The logarithm of :meth:`predict_proba`.

        Parameters
        ----------
        X : array-like or sparse matrix, shape (n_samples, n_features)

        Returns
        -------
        ndarray, shape (n_samples, n_classes)
        """
        return np.log(self.predict_proba(X))


class LinearSVC(_Classifier):
    __doc__ = """Linear support vector classifier (hinge or squared hinge loss), one-vs-rest.

    Minimises ``C sum_i s_i l(y_i, eta_i) + ||w||^2 / 2`` (or ``+ ||w||_1`` for
    ``penalty="l1"``); unlike scikit-learn's liblinear-based LinearSVC, the intercept is not
    regularised unless ``intercept_scaling`` is set (the duals with a constant feature, see the
    module docstring, do regularise it).

    Parameters
    ----------
    C : float, default=1.0
        Inverse regularisation strength (scikit-learn's).
    penalty : {"l2", "l1"}, default="l2"
        scikit-learn's.  ``"l1"`` (with the squared hinge only, as liblinear): ``C sum_i s_i
        max(0, 1 - y_i eta_i)^2 + ||w||_1``, fitted by L-BFGS-B over the split ``w = u - v``,
        ``u, v >= 0`` (the objective is then smooth; exact zeros where a bound is active) in
        float64, one problem per class; ``solver`` ``"auto"`` or ``"lbfgs"``, no ``comm`` nor
        GPU.  No coordinate-descent row of :mod:`roofline.glm` has the squared hinge
        (``glm.CD_LOSSES``) and Newton has no L1 penalty, hence this estimator-side solver
        (``solver_`` is ``"lbfgs-b"``).
    loss : {"squared_hinge", "hinge"}, default="squared_hinge"
    dual : {"auto", True, False}, default="auto"
        scikit-learn's combinations: ``penalty="l1"`` needs ``dual`` False or ``"auto"`` (the
        primal), ``loss="hinge"`` with ``"l2"`` needs True or ``"auto"``, and ``"l1"`` with
        the hinge does not exist; the others are ValueErrors naming the parameters, as in
        scikit-learn.  What runs is the solver's formulation of the same optimum: the hinge
        fits in the dual (the CD rows) or the primal (``lbfgs`` / ``adagrad`` / ``sgd``), the
        squared hinge in the primal (no Roofline solver has its dual: ``dual=True`` then
        gives liblinear's optimum by another route), ``"l1"`` in the primal.
    """ + _common_doc(_CLASSIFIER_DOC.format(
        counts="weighted by ``sample_weight`` (as scikit-learn 1.9's LinearSVC, whose "
               "``compute_class_weight`` takes them)",
        ovr="  With more than two classes, liblinear's one-vs-rest weighting: the problem of "
            "class ``c`` weighs the samples of ``c`` by ``class_weight[c]`` and every other "
            "sample by 1 (times ``sample_weight``), so each class is its own fit; "
            "``partial_fit`` then refuses a ``class_weight``.",
        liblinear="``LinearSVC``'s (liblinear)")) + """
    """ + _dtype_doc("``decision_function``", svc=True) + """
    """

    def __init__(self, C=1.0, *, penalty="l2", loss="squared_hinge", dual="auto",
                 fit_intercept=True, intercept_scaling=None, class_weight=None, solver="auto",
                 max_iter=200, tol=1e-6, batch_size=256, learning_rate=0.1, n_jobs=None,
                 random_state=None, verbose=0, dtype=None, comm=None, warm_start=False,
                 device="cpu"):
        self.C = C
        self.penalty = penalty
        self.dual = dual
        self.intercept_scaling = intercept_scaling
        self.class_weight = class_weight
        self.warm_start = warm_start
        self.loss = loss
        self.fit_intercept = fit_intercept
        self.solver = solver
        self.max_iter = max_iter
        self.tol = tol
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose
        self.dtype = dtype
        self.comm = comm
        self.device = device

    def _out_dtype(self, X_dtype):
        """float64 unless ``dtype="float32"``: scikit-learn's LinearSVC (liblinear) returns
        float64 ``coef_`` for float32 input."""
        return np.dtype(np.float32 if self.dtype is not None
                        and _check_dtype(self.dtype) is np.float32 else np.float64)

    def _check_params(self):
        """scikit-learn's checks of ``penalty``, ``loss`` and ``dual`` (its combinations),
        then the shared ones; ``penalty="l1"``'s own solver's conditions."""
        if self.penalty not in ("l2", "l1"):
            raise ValueError(f"penalty must be 'l2' or 'l1', got {self.penalty!r}")
        if not (isinstance(self.dual, (bool, np.bool_))
                or (isinstance(self.dual, str) and self.dual == "auto")):
            raise ValueError(f"dual must be 'auto', True or False, got {self.dual!r}")
        loss = self._loss
        if self.penalty == "l1" and loss == "hinge":
            raise ValueError("Unsupported set of arguments: penalty='l1' with loss='hinge' is "
                             "not supported (as in scikit-learn): use loss='squared_hinge'")
        if self.penalty == "l1" and self.dual is True:
            raise ValueError("Unsupported set of arguments: penalty='l1' is fitted in the "
                             "primal only (as in scikit-learn): dual must be False or 'auto', "
                             "got dual=True")
        if self.penalty == "l2" and loss == "hinge" and self.dual is False:
            raise ValueError("Unsupported set of arguments: loss='hinge' with penalty='l2' "
                             "has no primal in scikit-learn's LinearSVC: dual must be True or "
                             "'auto', got dual=False")
        super()._check_params()
        if self.penalty == "l1":
            if self.solver not in _BOUNDED_SOLVERS:
                raise ValueError(f"penalty='l1' (squared hinge) is fitted by L-BFGS-B: solver "
                                 f"must be 'auto' or 'lbfgs', got solver={self.solver!r}")
            if self.comm is not None or self.device != "cpu":
                raise ValueError("penalty='l1' fits in this process on the CPU: comm must be "
                                 "None and device 'cpu'")

    def _check_solver_row(self, solver):
        if self.penalty != "l1":  # l1: the estimator's own L-BFGS-B (see penalty)
            super()._check_solver_row(solver)

    def _per_output_weights(self, y, sw):
        """liblinear's one-vs-rest weights: the problem of class ``c`` weighs the samples of
        ``c`` by ``class_weight[c]``, the others by 1 (times ``sw``)."""
        if self.class_weight is None or len(self.classes_) <= 2:
            return None
        y_idx = np.searchsorted(self.classes_, y)
        cw = _class_weights(self.class_weight, self.classes_, y_idx, sw, self.comm)
        out = [sw * np.where(y_idx == r, cw[r], 1.0) for r in range(len(self.classes_))]
        if self.comm is None and not all(w.sum() > 0 for w in out):
            raise ValueError("class_weight times sample_weight sums to zero in a one-vs-rest "
                             "problem: at least one sample needs a positive weight")
        return out

    def _with_class_weight(self, y, sw):
        if self.class_weight is not None and len(self.classes_) > 2:
            # only partial_fit comes here with more than two classes (fit weighs per class)
            raise ValueError("LinearSVC.partial_fit with more than two classes takes no "
                             "class_weight: liblinear weighs each one-vs-rest problem "
                             "differently, the minibatch optimizer fits them together (use "
                             "fit, or sample_weight)")
        return super()._with_class_weight(y, sw)

    def _fit_targets(self, Xc, Y, sw, lam, warm=None, passes=None, fit_intercept=None):
        if self.penalty != "l1":
            return super()._fit_targets(Xc, Y, sw, lam, warm=warm, passes=passes,
                                        fit_intercept=fit_intercept)
        fi = self.fit_intercept if fit_intercept is None else fit_intercept
        self.solver_ = "lbfgs-b"
        rows = Y.reshape(1, -1) if Y.ndim == 1 else Y
        X64 = _float64_values(Xc) if Xc.dtype != np.float64 else Xc
        fits = [_l1_squared_hinge(X64, 2.0 * rows[r] - 1.0, sw, lam, fi, tol=self.tol,
                                  max_iter=self.max_iter,
                                  coef_init=None if warm is None else warm["coef"][r],
                                  intercept_init=None if warm is None or not fi
                                  else warm["intercept"][r])
                for r in range(rows.shape[0])]
        return (np.vstack([f[0] for f in fits]), np.array([f[1] for f in fits]),
                max(f[2] for f in fits), None)

    @property
    def _loss(self):
        if self.loss not in glm.losses_where(labels="sign"):
            raise ValueError(f"loss must be one of {glm.losses_where(labels='sign')}, "
                             f"got {self.loss!r}")
        return self.loss


class _Regressor(RegressorMixin, _GLMEstimator):
    _loss = "linear"

    def _prepare(self, X, y, sample_weight, reset=True):
        X, y = validate_data(self, X, y, accept_sparse=["csr", "csc", "coo"],
                             dtype=_check_dtype(self.dtype), multi_output=True, y_numeric=True,
                             reset=reset)
        sw = _check_sample_weights(sample_weight, X, getattr(self, "comm", None))
        y = np.asarray(y, dtype=np.float64)
        Y = y if y.ndim == 1 else np.asfortranarray(y.T)
        return to_column_layout(X, X.dtype), y, Y, sw

    def _lambdas(self, total_weight, n_targets):
        """The learners' ``lambda`` of each of the ``n_targets`` targets."""
        return np.full(n_targets, self._lambda(total_weight))

    def _check_params(self):
        super()._check_params()
        if not isinstance(self.positive, (bool, np.bool_)):
            raise ValueError(f"positive must be a bool, got {self.positive!r}")
        if self.positive:
            if self.solver not in _BOUNDED_SOLVERS:
                raise ValueError(f"positive=True needs solver 'auto' or 'lbfgs' (bounded "
                                 f"L-BFGS-B, as scikit-learn), got solver={self.solver!r}")
            if self.comm is not None or self.device != "cpu":
                raise ValueError("positive=True fits in this process on the CPU: comm must be "
                                 "None and device 'cpu'")

    def _fit_positive(self, Xc, Y, sw, lams, warm):
        """``positive=True``: each target by :func:`_nonnegative_ridge` (float64)."""
        self.solver_ = "lbfgs-b"
        Ys = Y.reshape(1, -1) if Y.ndim == 1 else Y
        X64 = _float64_values(Xc) if Xc.dtype != np.float64 else Xc
        fits = [_nonnegative_ridge(X64, Ys[r], sw, lams[r], self.fit_intercept, tol=self.tol,
                                   max_iter=self.max_iter,
                                   coef_init=None if warm is None else warm["coef"][r],
                                   intercept_init=None if warm is None
                                   else warm["intercept"][r])
                for r in range(Ys.shape[0])]
        return (np.vstack([f[0] for f in fits]), np.array([f[1] for f in fits]),
                max(f[2] for f in fits), None)

    def _store(self, y, coef, b, X_dtype):
        """``coef_`` and ``intercept_`` in the dtype of the data (scikit-learn's: a float32
        ``X`` gives float32 ones, a scalar ``intercept_`` of that type for a 1-D ``y``)."""
        out = self._out_dtype(X_dtype)
        coef, b = np.asarray(coef, dtype=out), np.asarray(b, dtype=out)
        if y.ndim == 1:
            self.coef_, self.intercept_ = coef[0], out.type(b[0])
        else:
            self.coef_, self.intercept_ = coef, b

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags

    def fit(self, X, y, sample_weight=None):
        """Fit on ``X`` (n_samples x n_features, dense or sparse) and targets ``y``.

        Parameters
        ----------
        X : array-like or sparse matrix, shape (n_samples, n_features)
            The examples (float32 kept as float32 with ``dtype=None``).
        y : array-like, shape (n_samples,) or (n_samples, n_targets)
            The targets.
        sample_weight : array-like (n_samples,) or None
            The samples' weights.

        Returns
        -------
        self
            The fitted estimator.
        """
        self._check_params()
        Xc, y, Y, sw = self._prepare(X, y, sample_weight)
        k = 1 if y.ndim == 1 else y.shape[1]
        warm = self._warm_init(k, Xc.shape[0])
        lams = self._lambdas(self._total_weight(sw), k)
        if getattr(self, "positive", False):
            coef, b, n_iter, state = self._fit_positive(Xc, Y, sw, lams, warm)
        elif np.all(lams == lams[0]):
            coef, b, n_iter, state = self._fit_targets(Xc, Y, sw, lams[0], warm=warm)
        else:  # a strength per target: one fit per target
            Ys = Y.reshape(1, -1) if Y.ndim == 1 else Y
            fits = [self._fit_targets(Xc, Ys[r], sw, lams[r], warm=None if warm is None else
                                      {"coef": warm["coef"][r:r + 1],
                                       "intercept": warm["intercept"][r:r + 1]})
                    for r in range(k)]
            coef = np.vstack([np.atleast_2d(f[0]) for f in fits])
            b = np.concatenate([np.atleast_1d(f[1]) for f in fits])
            n_iter, state = max(f[2] for f in fits), None
        self._store(y, coef, b, Xc.dtype)
        self.n_iter_ = n_iter
        self._opt_state = state
        return self

    @available_if(lambda self: _has_partial_fit(self.solver))
    def partial_fit(self, X, y, sample_weight=None):
        """One pass of the minibatch solver over ``(X, y)``, continuing from the current state.

        Parameters
        ----------
        X : array-like or sparse matrix, shape (n_samples, n_features)
            The examples (float32 kept as float32 with ``dtype=None``).
        y : array-like, shape (n_samples,) or (n_samples, n_targets)
            The targets.
        sample_weight : array-like (n_samples,) or None
            The samples' weights.

        Returns
        -------
        self
            The updated estimator.
        """
        self._check_params()
        first = not hasattr(self, "coef_")
        Xc, y, Y, sw = self._prepare(X, y, sample_weight, reset=first)
        lams = self._lambdas(self._total_weight(sw), 1 if y.ndim == 1 else y.shape[1])
        if not np.all(lams == lams[0]):
            raise ValueError("partial_fit needs one alpha for every target (the minibatch "
                             "optimizer's state is shared by the targets), got "
                             f"alpha={self.alpha!r}")
        warm = None if first else {"coef": np.atleast_2d(self.coef_),
                                   "intercept": np.atleast_1d(self.intercept_),
                                   "opt": self._opt_state}
        coef, b, _, state = self._fit_targets(Xc, Y, sw, lams[0], warm=warm, passes=1)
        self._store(y, coef, b, Xc.dtype)
        self.n_iter_ = getattr(self, "n_iter_", 0) + 1
        self._opt_state = state
        return self

    def predict(self, X):
        """The predicted targets ``X w + b``.

        Parameters
        ----------
        X : array-like or sparse matrix, shape (n_samples, n_features)
            The examples (float32 kept as float32 with ``dtype=None``).

        Returns
        -------
        ndarray, shape (n_samples,) or (n_samples, n_targets)
            In the dtype of ``X @ coef_.T`` (float32 for a float32 fit, as scikit-learn's).
        """
        d = self._decision(X)
        return d[:, 0].copy() if np.ndim(self.coef_) == 1 else np.ascontiguousarray(d)


#: The most features the registry's direct ridge row takes (``glm/_direct.py``'s
#: ``CHOLESKY_MAX_FEATURES``, not a public name of :mod:`roofline.glm`; a test fits one more).
_CHOLESKY_MAX_FEATURES = 2048

#: scikit-learn's Ridge solver names and the role of the registry row each runs (the same
#: optimum; see :class:`Ridge`): ``"direct"`` the exact normal equations (the Krylov row
#: beyond ``_CHOLESKY_MAX_FEATURES`` features), ``"krylov"`` Newton-CG, ``"auto"`` the
#: measured choice.  scikit-learn's ``"cholesky"``, ``"lbfgs"`` and ``"auto"`` are also rows'
#: names (the direct row, the Learner's L-BFGS, the choice): they run as such.
SKLEARN_RIDGE_SOLVERS = {"svd": "direct", "lsqr": "krylov", "sparse_cg": "krylov",
                         "sag": "auto", "saga": "auto"}


def _ridge_row(role):
    """The registry's row for a role of :data:`SKLEARN_RIDGE_SOLVERS`, found by its attributes
    (solver names are written only in the registry): ``"direct"`` the ``fit_glm`` row that
    solves the squared loss alone; ``"krylov"`` the primal ``fit_glm`` row for the squared loss
    that takes sample weights and ``comm`` (Newton-CG); the first such row."""
    if role == "auto":
        return role
    rows = glm.solvers(runner="fit_glm", loss="squared", penalty="l2", formulation="primal")
    if role == "direct":
        found = [r.name for r in rows if tuple(r.losses) == ("squared",)]
    else:
        found = [r.name for r in rows if r.sample_weight and r.comm]
    if not found:  # pragma: no cover - a registry change
        raise RuntimeError(f"the solver registry has no row for Ridge's {role!r} solver")
    return found[0]  # the built-in row (rows registered later come after it)


class Ridge(_Regressor):
    __doc__ = """Ridge regression: ``sum_i s_i (y_i - eta_i)^2 + alpha ||w||^2`` (scikit-learn's).

    Parameters
    ----------
    alpha : float or array-like (n_targets,), default=1.0
        L2 strength (scikit-learn's); ``lambda = alpha / sum(sample_weight)`` in the learners.
        An array: one strength per target of a 2-D ``y`` (scikit-learn's meaning: its length
        is the number of targets, or 1; each target is then fitted on its own).
    positive : bool, default=False
        Constrain the coefficients to be non-negative (the intercept is free), scikit-learn's
        meaning.  Fitted by L-BFGS-B with bounds on the same objective (scikit-learn's
        ``"lbfgs"``), in float64, to the certified relative suboptimality ``tol``: with
        ``P`` the objective in the learners' scaling, ``P - P* <= g_b^2 / 2 + ||pg||^2 /
        (2 lambda)`` (``g_b`` the intercept's gradient, ``pg`` the minimal-norm subgradient
        on ``w >= 0`` of the intercept-profiled objective, which is ``lambda``-strongly
        convex); with ``alpha=0`` the projected gradient's max-norm; ``solver`` must be
        ``"auto"`` or ``"lbfgs"`` (as in scikit-learn, so there is no ``partial_fit``), and
        ``comm`` and ``device="gpu"`` are not supported.
    """ + _common_doc() + """
    """ + _dtype_doc("``predict``") + """

    Attributes
    ----------
    coef_ : ndarray (n_features,) or (n_targets, n_features)
    intercept_ : float or ndarray (n_targets,)
    solver_ : str
        The registry's row that ran (``"lbfgs-b"`` for ``positive=True``).

    Notes
    -----
    ``solver`` also takes scikit-learn's names, each mapped to a row of the registry with the
    same optimum (the choice is logged and stored in ``solver_``):

    ================  ==============================================================
    scikit-learn      Roofline
    ================  ==============================================================
    ``"auto"``        ``"auto"`` (the measured choice of ``glm/_auto.py``)
    ``"svd"``         ``"cholesky"`` (exact normal equations; ``"newton"`` beyond
    ``"cholesky"``    2048 features, where Roofline's Cholesky row stops)
    ``"lsqr"``        ``"newton"`` (Newton-CG: on a quadratic, conjugate gradients on
    ``"sparse_cg"``   the normal equations, as ``sparse_cg``)
    ``"sag"``         ``"auto"`` (stochastic solvers of the same optimum; Roofline's
    ``"saga"``        stochastic one, ``"scd"``, is what ``"auto"`` picks where it wins)
    ``"lbfgs"``       ``positive=True``: bounded L-BFGS-B, as scikit-learn; otherwise
                      Roofline's ``"lbfgs"`` row (scikit-learn refuses it there)
    ================  ==============================================================

    A name neither scikit-learn nor the registry knows is a ValueError naming ``solver``.
    """

    def __init__(self, alpha=1.0, *, fit_intercept=True, solver="auto", positive=False,
                 max_iter=200, tol=1e-6, batch_size=256, learning_rate=0.1, n_jobs=None,
                 random_state=None, verbose=0, dtype=None, comm=None, warm_start=False,
                 device="cpu"):
        self.alpha = alpha
        self.positive = positive
        self.warm_start = warm_start
        self.fit_intercept = fit_intercept
        self.solver = solver
        self.max_iter = max_iter
        self.tol = tol
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose
        self.dtype = dtype
        self.comm = comm
        self.device = device

    def _solver_name(self, n_features=None):
        s = self.solver
        if not isinstance(s, str):
            return s  # the registry's check names it
        direct = _ridge_row("direct")
        if s in SKLEARN_RIDGE_SOLVERS or s == direct:
            row = direct if s == direct else _ridge_row(SKLEARN_RIDGE_SOLVERS[s])
            if row == direct and n_features is not None and n_features > _CHOLESKY_MAX_FEATURES:
                row = _ridge_row("krylov")
            return row
        if s not in solver_names(runner=RUNNERS):
            raise ValueError(f"solver must be one of scikit-learn's "
                             f"{[*SKLEARN_RIDGE_SOLVERS, direct]} or the registry's "
                             f"{list(solver_names(runner=RUNNERS))}, got {s!r}")
        return s

    def _check_params(self):
        super()._check_params()
        self._alphas(None)

    def _alphas(self, n_targets):
        """``alpha`` as an array of non-negative floats (``n_targets`` of them when given), or
        a ValueError naming it."""
        a = self.alpha
        if np.ndim(a) == 0:
            return np.full(n_targets or 1, _check_number("alpha", a, low=0.0, low_open=False))
        try:
            arr = np.asarray(a, dtype=np.float64).ravel()
        except (TypeError, ValueError):
            raise ValueError(f"alpha must be a float or an array of floats, got {a!r}") \
                from None
        if arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr < 0):
            raise ValueError(f"alpha must hold non-negative finite floats, got {a!r}")
        if n_targets is None:
            return arr
        if arr.size not in (1, n_targets):
            raise ValueError(f"alpha has {arr.size} values for {n_targets} targets: the "
                             f"number of targets and of penalties must correspond (or one "
                             f"alpha for all)")
        return np.broadcast_to(arr, (n_targets,)).copy()

    def _lambda(self, total_weight):
        (a,) = self._alphas(1)
        return glm.alpha_from_peer("ridge", a, total_weight) if a else 0.0

    def _lambdas(self, total_weight, n_targets):
        return np.array([glm.alpha_from_peer("ridge", a, total_weight) if a else 0.0
                         for a in self._alphas(n_targets)])


#: The ``solver`` values under which the estimator-side bounded L-BFGS-B fits run
#: (``positive=True``, ``LinearSVC(penalty="l1")``): scikit-learn's for ``positive``.
_BOUNDED_SOLVERS = ("auto", "lbfgs")


def _bounded_lbfgs(f, x0, bounds, free, *, tol, max_iter, what, bound=None):
    """``scipy.optimize.minimize(method="L-BFGS-B")`` of ``f`` (value and gradient) from
    ``x0`` within ``bounds``, restarted from its result while the stopping test fails and a
    restart still lowers ``f`` (L-BFGS-B can stall on a step that gains nothing in float64,
    its memory then misleading: a fresh start goes on; measured on a one-vs-rest L1
    squared-hinge problem that stopped at a projected gradient of 0.04).

    The stopping test: with ``bound`` (``bound(x, value, g)``, a certified bound on ``f(x) -
    min f``), ``bound <= tol * |f(x)|``, the relative suboptimality that ``tol`` means in every
    solver (checked after each iteration, from that iteration's own evaluation; scipy's own
    tests off); without, the projected gradient's max-norm ``<= tol`` (scipy's ``gtol``).
    ``free``: the variables without a lower bound at 0.  A
    :class:`~sklearn.exceptions.ConvergenceWarning` naming ``what`` when ``max_iter``
    iterations end above ``tol``, or the fit ends far above it (the gradient test: ``1e-6``
    of the starting projected gradient, float64 rounding bounds how small it can get).
    Returns ``(x, n_iter)``."""
    from scipy.optimize import minimize

    last = [None, None, None]  # the last evaluation: x, value, gradient

    def fg(x):
        value, g = f(x)
        last[:] = [np.array(x, copy=True), value, g]
        return value, g

    def test(x, value=None, g=None):
        """``(value, the test's measure, its threshold)`` at ``x``."""
        if value is None:
            value, g = f(x)
        if bound is not None:
            return value, float(bound(x, value, g)), tol * abs(value)
        pg = np.where((x <= 0.0) & (g > 0.0) & ~free, 0.0, g)
        return value, (float(np.abs(pg).max()) if pg.size else 0.0), tol

    def callback(intermediate_result):
        x = intermediate_result.x
        if last[0] is not None and np.array_equal(last[0], x):
            _, m, limit = test(x, last[1], last[2])
        else:
            _, m, limit = test(x)
        if m <= limit:
            raise StopIteration

    f_best, m0, limit = test(x0)
    x, m_best, n_iter, message = x0, m0, 0, "no iteration"
    while m_best > limit and n_iter < max_iter:
        res = minimize(fg, x, jac=True, method="L-BFGS-B", bounds=bounds,
                       callback=callback if bound is not None else None,
                       options={"maxiter": max_iter - n_iter,
                                "gtol": 0.0 if bound is not None else tol, "ftol": 0.0,
                                "maxcor": 20})
        n_iter += max(int(res.nit), 1)
        value, m, lim = test(res.x)
        if not value < f_best and n_iter > 1:  # no progress: rounding's floor
            if value <= f_best:
                x, m_best, limit = res.x, m, lim
            break
        x, f_best, m_best, limit, message = res.x, value, m, lim, res.message
    if m_best > limit and (n_iter >= max_iter or bound is not None or m_best > 1e-6 * m0):
        test_name = ("certified relative suboptimality" if bound is not None
                     else "projected gradient")
        shown = m_best / abs(f_best) if bound is not None and f_best else m_best
        warnings.warn(f"{what}: L-BFGS-B stopped after {n_iter} iterations ({message}) with "
                      f"{test_name} {shown:.3g} > tol={tol:g}; raise max_iter or tol",
                      ConvergenceWarning, stacklevel=5)
    return x, max(n_iter, 1)


def _l1_squared_hinge(Xc, y, sw, lam, fit_intercept, *, tol, max_iter, coef_init=None,
                      intercept_init=None):
    """L1-regularised squared hinge (liblinear's ``LinearSVC(penalty="l1")``) by L-BFGS-B.

    Minimises ``(1 / S) sum_i s_i max(0, 1 - y_i (x_i w + b))^2 + lam ||w||_1`` (``S = sum_i
    s_i``; scikit-learn's ``C sum_i s_i l_i + ||w||_1`` with ``lam = 1 / (C S)``) over the
    split ``w = u - v``, ``u, v >= 0``: a smooth objective under bounds, whose minimiser has
    ``min(u_j, v_j) = 0`` and hence exact zeros in ``w``.

    Parameters
    ----------
    Xc : CSC matrix or ndarray, shape (n_features, n_samples), float64
        The examples as columns.
    y : ndarray (n_samples,)
        Labels in ``{-1, +1}``.
    sw : ndarray (n_samples,)
        The sample weights.
    lam : float
        The L1 strength (``> 0``).
    fit_intercept : bool
        Fit ``b`` (unregularised; else 0).
    tol : float
        L-BFGS-B's projected-gradient tolerance (``gtol``, mean-loss scale): the L1 problem
        is not strongly convex, so this bounds no suboptimality.
    max_iter : int
        L-BFGS-B iterations.
    coef_init, intercept_init : ndarray (n_features,) and float, optional
        A start; zero by default.

    Returns
    -------
    coef : ndarray (n_features,)
    intercept : float
    n_iter : int
    """
    d = Xc.shape[0]
    s = np.asarray(sw, dtype=np.float64) / float(np.sum(sw))
    XT = Xc.T

    def f(x):
        w = x[:d] - x[d:2 * d]
        m = 1.0 - y * (XT @ w + x[2 * d])
        h = np.maximum(m, 0.0)
        geta = -2.0 * s * y * h  # d loss / d eta
        gw = Xc @ geta
        g = np.empty_like(x)
        g[:d], g[d:2 * d] = lam + gw, lam - gw
        g[2 * d] = geta.sum() if fit_intercept else 0.0
        return float(s @ (h * h)) + lam * float(x[:2 * d].sum()), g

    x0 = np.zeros(2 * d + 1)
    if coef_init is not None:
        w0 = np.asarray(coef_init, dtype=np.float64)
        x0[:d], x0[d:2 * d] = np.maximum(w0, 0.0), np.maximum(-w0, 0.0)
    if intercept_init is not None and fit_intercept:
        x0[2 * d] = float(intercept_init)
    bounds = [(0.0, None)] * (2 * d) + [(None, None) if fit_intercept else (0.0, 0.0)]
    free = np.zeros(2 * d + 1, dtype=bool)
    free[2 * d] = True
    x, n_iter = _bounded_lbfgs(f, x0, bounds, free, tol=tol, max_iter=max_iter,
                               what="LinearSVC(penalty='l1')")
    return x[:d] - x[d:2 * d], float(x[2 * d]), n_iter


def _nonnegative_ridge(Xc, y, sw, lam, fit_intercept, *, tol, max_iter, coef_init=None,
                       intercept_init=None):
    """Ridge with ``w >= 0`` by L-BFGS-B (scikit-learn's ``Ridge(positive=True)`` solver).

    Minimises the learners' scaling of ridge, ``(1 / S) sum_i s_i (x_i w + b - y_i)^2 / 2 +
    lam / 2 ||w||^2`` (``S = sum_i s_i``; the same minimiser as scikit-learn's ``sum_i s_i
    r_i^2 + alpha ||w||^2`` with ``lam = alpha / S``) subject to ``w >= 0``, the intercept ``b``
    free.

    Parameters
    ----------
    Xc : CSC matrix or ndarray, shape (n_features, n_samples), float64
        The examples as columns.
    y : ndarray (n_samples,)
        The targets.
    sw : ndarray (n_samples,)
        The sample weights.
    lam : float
        The L2 strength (``>= 0``).
    fit_intercept : bool
        Fit ``b`` (else 0).
    tol : float
        With ``lam > 0``: the certified relative suboptimality, ``bound <= tol * P`` with
        ``P(w, b) - P* <= g_b^2 / 2 + ||pg||^2 / (2 lam)`` (``g_b`` the intercept's gradient,
        ``pg`` the minimal-norm subgradient on ``w >= 0`` of ``F(w) = min_b P(w, b)``, whose
        gradient is ``g_w - g_b * mean_s(x)``: ``F`` is ``lam``-strongly convex and ``P`` has
        curvature 1 in ``b``).  With ``lam = 0`` (no certificate): L-BFGS-B's
        projected-gradient tolerance (``gtol``, mean-loss scale).
    max_iter : int
        L-BFGS-B iterations.
    coef_init, intercept_init : ndarray (n_features,) and float, optional
        A start (clipped to the bounds); zero by default.

    Returns
    -------
    coef : ndarray (n_features,)
    intercept : float
    n_iter : int
    """
    d = Xc.shape[0]
    y = np.asarray(y, dtype=np.float64)
    s = np.asarray(sw, dtype=np.float64) / float(np.sum(sw))
    XT = Xc.T  # rows as examples: eta = XT w

    def f(x):
        w, b = x[:d], x[d]
        r = XT @ w + b - y
        sr = s * r
        g = np.empty_like(x)
        g[:d] = Xc @ sr + lam * w
        g[d] = sr.sum() if fit_intercept else 0.0
        return 0.5 * float(sr @ r) + 0.5 * lam * float(w @ w), g

    x0 = np.zeros(d + 1)
    if coef_init is not None:
        x0[:d] = np.maximum(np.asarray(coef_init, dtype=np.float64), 0.0)
    if intercept_init is not None and fit_intercept:
        x0[d] = float(intercept_init)
    bounds = [(0.0, None)] * d + [(None, None) if fit_intercept else (0.0, 0.0)]
    free = np.zeros(d + 1, dtype=bool)
    free[d] = True
    c = np.asarray(Xc @ s).ravel() if fit_intercept else None  # weighted feature means

    def bound(x, value, g):
        # P(w, b) - P* <= g_b^2 / 2 + ||pg||^2 / (2 lam): b is quadratic of curvature 1
        # (P(w, b) - min_b P = g_b^2 / 2), and F(w) = min_b P(w, b) is lam-strongly convex
        # with gradient g_w - c g_b, pg its minimal-norm subgradient on w >= 0
        gw = g[:d] - c * g[d] if fit_intercept else g[:d]
        pg = np.where(x[:d] > 0.0, gw, np.minimum(gw, 0.0))
        gb = g[d] if fit_intercept else 0.0
        return 0.5 * gb * gb + float(pg @ pg) / (2.0 * lam)

    x, n_iter = _bounded_lbfgs(f, x0, bounds, free, tol=tol, max_iter=max_iter,
                               what="Ridge(positive=True)", bound=bound if lam > 0 else None)
    return x[:d].copy(), float(x[d]), n_iter


class LinearRegression(_Regressor):
    __doc__ = """Ordinary least squares (``Ridge`` with ``alpha = 0``).

    Parameters
    ----------""" + _common_doc() + """
    """ + _dtype_doc("``predict``") + """
    positive : bool, default=False
        Constrain the coefficients to be non-negative (scikit-learn's meaning; it solves
        NNLS exactly, we by bounded L-BFGS-B in float64 to the projected-gradient ``tol``, as
        :class:`Ridge` with ``alpha=0``: no strong convexity, hence no certified bound);
        ``solver`` ``"auto"`` or ``"lbfgs"``, no ``comm`` nor GPU.
    """

    def __init__(self, *, fit_intercept=True, positive=False, solver="auto", max_iter=200,
                 tol=1e-6, batch_size=256, learning_rate=0.1, n_jobs=None, random_state=None,
                 verbose=0, dtype=None, comm=None, warm_start=False, device="cpu"):
        self.fit_intercept = fit_intercept
        self.positive = positive
        self.warm_start = warm_start
        self.solver = solver
        self.max_iter = max_iter
        self.tol = tol
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose
        self.dtype = dtype
        self.comm = comm
        self.device = device

    def _lambda(self, total_weight):
        return 0.0
