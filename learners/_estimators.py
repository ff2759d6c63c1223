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
  regularises the intercept; the lbfgs/adagrad/sgd solvers do not.  The dual coordinate-descent
  fits (``solver`` "scd"/"tpa-scd"/"cocoa"/"hcocoa" with ``dual=True``, and any hinge-loss CD
  fit) do regularise it, through a constant feature, as liblinear and snapml do.)
* ``Ridge(alpha)``: ``sum_i s_i (y_i - eta_i)^2 + alpha ||w||^2``, i.e. with our squared loss
  ``l = r^2 / 2`` the same minimiser as ``lambda = alpha / sum_i s_i``.
* ``LinearRegression``: ``lambda = 0``.

Multi-class classification is one-vs-rest: one output per class in a single ``k x n`` model (the
multi-label GLM), ``predict_proba`` normalising the ``k`` sigmoids as scikit-learn's OvR does.

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

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
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
        return validate_data(self, X, accept_sparse=["csr", "csc", "coo"], dtype=self.dtype,
                             reset=reset)

    def _check_params(self):
        """Errors that name the parameter, before any work (the solver's: the registry's
        :func:`~roofline.glm.check_solver`)."""
        check_solver(self.solver, loss=glm.resolve_loss(self._loss),
                     comm=getattr(self, "comm", None) is not None, runner=RUNNERS)
        for name in ("max_iter", "batch_size", "n_jobs"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        _check_number("tol", self.tol, low=0.0, low_open=False)
        _check_number("learning_rate", self.learning_rate, low=0.0, low_open=True)
        _check_random_state(self.random_state)

    def _resolve_solver(self, Xc, sw, lam):
        """The solver to run and, for ``solver="auto"``, why (``glm/_auto.py``)."""
        if self.solver != "auto":
            return self.solver, None
        return choose_solver(Xc, loss=glm.resolve_loss(self._loss), penalty="l2", alpha=lam,
                             fit_intercept=self.fit_intercept, n_jobs=self.n_jobs,
                             comm=getattr(self, "comm", None), sample_weight=sw,
                             runner=RUNNERS)

    def _make_optimizer(self, s):
        if s == "lbfgs":
            return LBFGS(max_iter=self.max_iter, tol=self.tol, ftol=min(1e-12, self.tol * 1e-3))
        if s == "adagrad":
            return ADAGrad(lr=self.learning_rate)
        return SGD(lr=self.learning_rate)

    def _fit_targets(self, Xc, Y, sw, lam, warm=None, passes=None):
        """Train the k-output GLM on column-layout ``Xc`` and targets ``Y`` ((n,) or (k, n))."""
        k = 1 if Y.ndim == 1 else Y.shape[0]
        dt = Xc.dtype
        solver, reason = self._resolve_solver(Xc, sw, lam)
        self.solver_ = solver
        if reason is not None:
            logger.info("%s(solver='auto') runs %r: %s", type(self).__name__, solver, reason)
        spec = get_solver(solver)
        if spec.runner == "fit_glm":
            return self._fit_glm(Xc, Y, sw, lam, spec)
        if spec.runner == "estimator":
            return self._fit_row(Xc, Y, sw, lam, spec)
        model = GLM(loss=self._loss, n_outputs=k, fit_intercept=self.fit_intercept,
                    dtype=dt.name)
        n = Xc.shape[1]
        opt = self._make_optimizer(solver)
        batch = max(n, 1) if solver == "lbfgs" else self.batch_size
        src = MatSource(Xc, Y.astype(dt, copy=False), sw.astype(dt, copy=False),
                        batch_size=batch)
        mixins = [L2Regularizer(lam)] if lam > 0 else []
        learner = Learner(src, model, opt, mixins=mixins, progress=bool(self.verbose),
                          n_passes=passes or self.max_iter)
        if warm is not None:
            model.set_parameters(warm["coef"], warm["intercept"])
            learner._setup()
            if warm.get("opt") is not None:
                opt.set_state(warm["opt"])
        with glm.verbose_logging(self.verbose):
            learner.train()
        if solver == "lbfgs":
            n_iter = int(opt.result.nit) if opt.result is not None else opt.t
        else:
            n_iter = passes or self.max_iter
        return (np.array(model.coef, dtype=np.float64), np.array(model.intercept, np.float64),
                max(n_iter, 1), opt.state() if spec.partial_fit else None)

    def _per_output(self, spec, Y, sw, lam, fit_one):
        """Check the row ``spec`` against the weights (the registry's
        :func:`~roofline.glm.check_solver`) and the regularisation, then ``fit_one(y_row)``
        (a result with ``coef``, ``intercept``, ``n_iter``) for each output row of ``Y``; the
        stacked ``(coef, intercept, n_iter, None)``."""
        weighted = _nonuniform(sw, self.comm) is not None
        # over comm, fit_glm's rows check the weights themselves, on every rank alike (the
        # dual of cocoa / hcocoa takes them there)
        check_solver(spec.name, loss=glm.resolve_loss(self._loss), comm=self.comm is not None,
                     weighted=weighted and not (self.comm is not None
                                                and spec.runner == "fit_glm"),
                     runner=RUNNERS)
        if lam <= 0:
            raise ValueError(f"solver={spec.name!r} needs a positive regularisation")
        Ys = Y.reshape(1, -1) if Y.ndim == 1 else Y
        res = [fit_one(Ys[r]) for r in range(Ys.shape[0])]
        return (np.vstack([np.asarray(r.coef, dtype=np.float64) for r in res]),
                np.array([float(r.intercept) for r in res]),
                max(max(int(r.n_iter) for r in res), 1), None)

    def _fit_glm(self, Xc, Y, sw, lam, spec):
        """A row that :func:`roofline.glm.fit_glm` runs, per output, over ``comm`` when given
        (each rank holds examples: the dual where the row has one); ``tol`` is also the
        gradient test of ``newton`` / ``cholesky`` (``gtol``)."""
        dual = True if self.comm is not None and "dual" in spec.formulations else None
        return self._per_output(spec, Y, sw, lam, lambda y: glm.fit_glm(
            Xc, y, loss=glm.resolve_loss(self._loss), alpha=lam, solver=spec.name,
            n_jobs=self.n_jobs, tol=self.tol, max_iter=self.max_iter,
            fit_intercept=self.fit_intercept,
            random_state=_check_random_state(self.random_state), verbose=self.verbose,
            comm=self.comm, dual=dual,
            sample_weight=sw if self.comm is not None else _nonuniform(sw), gtol=self.tol))

    def _fit_row(self, Xc, Y, sw, lam, spec):
        """A row the estimators run themselves (``runner="estimator"``: ``vw-hybrid``,
        :func:`~roofline.learners.fit_vw_hybrid`) per output, over ``comm`` when given."""
        fit = spec.load()

        def one(y):
            with glm.verbose_logging(self.verbose):
                return fit(Xc, y, loss=glm.resolve_loss(self._loss), alpha=lam, comm=self.comm,
                           fit_intercept=self.fit_intercept, max_iter=self.max_iter,
                           tol=self.tol, verbose=self.verbose)

        return self._per_output(spec, Y, sw, lam, one)

    def _decision(self, X):
        check_is_fitted(self, "coef_")
        X = self._validate_X(X, reset=False)
        Xc = to_column_layout(X, X.dtype)
        coef = np.atleast_2d(self.coef_)
        model = GLM(loss=self._loss, n_outputs=coef.shape[0], fit_intercept=self.fit_intercept,
                    dtype=Xc.dtype.name)
        model.set_parameters(coef, np.atleast_1d(self.intercept_))
        eta = model.linear(Xc)
        return eta.T  # (n_samples, k)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags


def _solver_set(runner, **conditions):
    """``"a", "b", ..., "auto"``: the registry's names, for a docstring's ``{...}``."""
    names = solver_names(runner=runner, **conditions)
    return ", ".join(f'"{n}"' for n in names)


def _common_doc(extra=""):
    return f"""
    fit_intercept : bool, default=True
        Learn an intercept (unregularised, except in dual coordinate-descent fits; see the
        module docstring).
    solver : {{{_solver_set(RUNNERS)}}}
        The rows of the solver registry (:func:`roofline.glm.solvers`), see the module
        docstring.  ``adagrad``/``sgd`` provide ``partial_fit``.  ``newton`` is
        trust-region Newton-CG on the primal (smooth losses, any sample weights; ``tol`` is
        then a bound on the gradient's max-norm, as for ``lbfgs``).  ``cholesky``: ridge by
        its normal equations (exact; up to 2048 features).  ``auto`` (the default) chooses
        from the data by the measured rule of ``glm/_auto.py``: ``cholesky`` for ridge
        with at most 1024 features, ``newton`` for the other smooth problems, the dual ``scd``
        for large sparse strongly regularised ones and for the hinge, ``lbfgs`` without
        regularisation, with feature values beyond ``2^20`` (it rescales them) or with
        non-uniform weights and the hinge, ``cocoa`` with ``comm``; the choice is logged and
        stored in ``solver_``.  ``vw-hybrid``
        is Vowpal Wabbit's AllReduce learner (an online pass, then L-BFGS; logistic and
        squared losses; :func:`~roofline.learners.fit_vw_hybrid`).
    max_iter : int, default=200
        L-BFGS iterations, passes (``adagrad``/``sgd``) or CD epochs/rounds.  An L-BFGS or CD
        fit that stops on it (or whose line search fails) before meeting ``tol`` warns with
        :class:`sklearn.exceptions.ConvergenceWarning`; ``adagrad``/``sgd`` always run
        ``max_iter`` passes (no convergence test).
    tol : float, default=1e-6
        L-BFGS projected-gradient tolerance (mean-loss scale); CD relative duality gap.
    batch_size : int, default=256
        Minibatch size of ``adagrad``/``sgd``.
    learning_rate : float, default=0.1
        Step size of ``adagrad``/``sgd``.
    n_jobs : int, default=1
        Threads of the CD solvers.
    random_state : int or None
        Seed of the CD solvers' coordinate order.
    verbose : int, default=0
        Log progress (one line per L-BFGS iteration, minibatch pass or CD check) to stderr,
        terminal or not, unless logging is configured; a progress bar on a terminal.
    comm : roofline.comm.Communicator or None
        Fit with this process as one rank of ``comm`` (``solver`` in
        {{{_solver_set(RUNNERS, comm=True)}}}: the registry's rows that take ``comm=``): each
        rank passes its own rows (examples) of ``X`` and ``y``; the classes, the total sample
        weight and the model are global, the same on every rank.{extra}
    """


class _Classifier(ClassifierMixin, _GLMEstimator):
    def _lambda(self, total_weight):  # C sum_i s_i l_i + ||w||^2 / 2
        _check_number("C", self.C, low=0.0, low_open=True)
        return glm.alpha_from_peer("C", self.C, total_weight)

    def _is_multinomial(self, n_classes):
        """Whether this fit is a multinomial one (only :class:`LogisticRegression`)."""
        return False

    def _encode(self, y, classes):
        if len(classes) < 2:
            raise ValueError(
                f"{type(self).__name__} needs samples of at least 2 classes in the data, but "
                f"the data contains only one class: {classes[0]!r}"
            )
        if len(classes) == 2:
            return (y == classes[1]).astype(np.float64)
        return (y[None, :] == classes[:, None]).astype(np.float64)  # (k, n), one-vs-rest

    def fit(self, X, y, sample_weight=None):
        """Fit on ``X`` (n_samples x n_features, dense or sparse) and class labels ``y``."""
        self._check_params()
        X, y = validate_data(self, X, y, accept_sparse=["csr", "csc", "coo"], dtype=self.dtype)
        check_classification_targets(y)
        self.classes_ = np.unique(y)
        if self.comm is not None:  # every rank's classes
            self.classes_ = np.unique(np.concatenate(self.comm.allgather(self.classes_)))
        multinomial = self._multinomial = self._is_multinomial(len(self.classes_))
        Y = None if multinomial else self._encode(y, self.classes_)
        sw = _check_sample_weights(sample_weight, X, self.comm)
        Xc = to_column_layout(X, X.dtype)
        lam = self._lambda(self._total_weight(sw))
        if multinomial:
            coef, b, n_iter, state = self._fit_multinomial(
                Xc, np.searchsorted(self.classes_, y), sw, lam)
        else:
            coef, b, n_iter, state = self._fit_targets(Xc, Y, sw, lam)
        self.coef_, self.intercept_ = np.atleast_2d(coef), np.atleast_1d(b)
        self.n_iter_ = np.array([n_iter])
        self._opt_state = state
        return self

    @available_if(lambda self: _has_partial_fit(self.solver))
    def partial_fit(self, X, y, classes=None, sample_weight=None):
        """One pass of the minibatch solver over ``(X, y)``, continuing from the current model
        and optimizer state (``classes`` is required on the first call).  The L2 weight of this
        call is ``1 / (C * sum(sample_weight))`` of this call's data."""
        self._check_params()
        first = not hasattr(self, "classes_")
        if first:
            if classes is None:
                raise ValueError("classes must be passed on the first call to partial_fit")
            self.classes_ = np.unique(classes)
        elif classes is not None and not np.array_equal(np.unique(classes), self.classes_):
            raise ValueError(f"classes={classes!r} differs from the first call's "
                             f"{self.classes_!r}")
        X, y = validate_data(self, X, y, accept_sparse=["csr", "csc", "coo"], dtype=self.dtype,
                             reset=first)
        check_classification_targets(y)
        if not np.isin(y, self.classes_).all():
            raise ValueError("y contains labels that are not in classes")
        Y = self._encode(y, self.classes_)
        self._multinomial = False  # the minibatch solvers fit one-vs-rest
        sw = _check_sample_weights(sample_weight, X, self.comm)
        Xc = to_column_layout(X, X.dtype)
        warm = None if first else {"coef": self.coef_, "intercept": self.intercept_,
                                   "opt": self._opt_state}
        coef, b, _, state = self._fit_targets(Xc, Y, sw, self._lambda(self._total_weight(sw)),
                                              warm=warm, passes=1)
        self.coef_, self.intercept_ = np.atleast_2d(coef), np.atleast_1d(b)
        self.n_iter_ = np.array([getattr(self, "n_iter_", np.array([0]))[0] + 1])
        self._opt_state = state
        return self

    def decision_function(self, X):
        """Margins ``eta``: shape (n_samples,) for two classes, (n_samples, n_classes) else."""
        d = self._decision(X)
        return d[:, 0].copy() if d.shape[1] == 1 else np.ascontiguousarray(d)

    def predict(self, X):
        d = self.decision_function(X)
        idx = (d > 0).astype(int) if d.ndim == 1 else d.argmax(axis=1)
        return self.classes_[idx]


class LogisticRegression(_Classifier):
    __doc__ = """L2-regularised logistic regression (scikit-learn's objective and ``C``).

    Minimises ``C sum_i s_i log(1 + exp(-y_i eta_i)) + ||w||^2 / 2`` (``lambda = 1 / (C sum s)``
    in the learners' scaling).  With more than two classes the fit is multinomial (the softmax
    loss ``C sum_i s_i (logsumexp(eta_i) - eta_i[y_i]) + ||W||^2 / 2``, scikit-learn's
    default, by :func:`roofline.glm.fit_multinomial`) when ``solver`` is ``"auto"``,
    ``"newton"`` or ``"lbfgs"`` and there is no ``comm``; otherwise one-vs-rest.

    Parameters
    ----------
    C : float, default=1.0
        Inverse regularisation strength (scikit-learn's).
    """ + _common_doc() + """
    dtype : {"float64", "float32"}, default="float64"
        Value dtype of the data and model.
    multi_class : {"auto", "multinomial", "ovr"}, default="auto"
        More than two classes: ``"auto"`` fits the multinomial model where the solver allows
        (see above) and one-vs-rest otherwise; ``"multinomial"`` requires it (an error with
        another solver or with ``comm``); ``"ovr"``: one binary problem per class.  For
        ``"multinomial"`` fits, ``solver="auto"`` and ``"newton"`` run trust-region Newton-CG
        and ``"lbfgs"`` L-BFGS, and ``tol`` bounds the gradient's max-norm relative to its
        value at zero.

    Attributes
    ----------
    coef_ : ndarray (1, n_features) or (n_classes, n_features)
    intercept_ : ndarray (1,) or (n_classes,)
    classes_ : ndarray
    n_iter_ : ndarray (1,)
    """

    _loss = "logistic"

    def __init__(self, C=1.0, *, fit_intercept=True, solver="auto", max_iter=200, tol=1e-6,
                 batch_size=256, learning_rate=0.1, n_jobs=1, random_state=None, verbose=0,
                 dtype="float64", comm=None, multi_class="auto"):
        self.C = C
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
        self.multi_class = multi_class

    _MULTINOMIAL_SOLVERS = ("auto", *glm.MULTINOMIAL_SOLVERS)

    def _is_multinomial(self, n_classes):
        if self.multi_class not in ("auto", "multinomial", "ovr"):
            raise ValueError(f"multi_class must be 'auto', 'multinomial' or 'ovr', got "
                             f"{self.multi_class!r}")
        possible = self.solver in self._MULTINOMIAL_SOLVERS and self.comm is None
        if self.multi_class == "multinomial" and not possible:
            raise ValueError(f"multi_class='multinomial' needs solver in "
                             f"{list(self._MULTINOMIAL_SOLVERS)} and no comm, got "
                             f"solver={self.solver!r}"
                             + ("" if self.comm is None else " with comm"))
        return n_classes > 2 and self.multi_class != "ovr" and possible

    def _fit_multinomial(self, Xc, y_idx, sw, lam):
        """The multinomial fit (:func:`roofline.glm.fit_multinomial`)."""
        # "auto": fit_multinomial's default, the first of its solvers
        solver = self.solver if self.solver in glm.MULTINOMIAL_SOLVERS else \
            glm.MULTINOMIAL_SOLVERS[0]
        self.solver_ = solver
        with glm.verbose_logging(self.verbose):
            res = glm.fit_multinomial(
                Xc, y_idx, alpha=lam, n_classes=len(self.classes_),
                sample_weight=_nonuniform(sw),
                fit_intercept=self.fit_intercept, solver=solver, tol=self.tol,
                max_iter=self.max_iter, verbose=self.verbose)
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
        d = self._decision(X)
        if getattr(self, "_multinomial", False):
            return glm.softmax_loss(d.T, np.zeros(d.shape[0], dtype=np.intp))[1].T
        p = 1.0 / (1.0 + np.exp(-d.astype(np.float64)))
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

    Minimises ``C sum_i s_i l(y_i, eta_i) + ||w||^2 / 2``; unlike scikit-learn's liblinear-based
    LinearSVC, the lbfgs solver does not regularise the intercept (the dual CD solvers do).

    Parameters
    ----------
    C : float, default=1.0
    loss : {"squared_hinge", "hinge"}, default="squared_hinge"
    """ + _common_doc() + """
    dtype : {"float64", "float32"}, default="float64"
    """

    def __init__(self, C=1.0, *, loss="squared_hinge", fit_intercept=True, solver="auto",
                 max_iter=200, tol=1e-6, batch_size=256, learning_rate=0.1, n_jobs=1,
                 random_state=None, verbose=0, dtype="float64", comm=None):
        self.C = C
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

    @property
    def _loss(self):
        if self.loss not in glm.losses_where(labels="sign"):
            raise ValueError(f"loss must be one of {glm.losses_where(labels='sign')}, "
                             f"got {self.loss!r}")
        return self.loss


class _Regressor(RegressorMixin, _GLMEstimator):
    _loss = "linear"

    def _prepare(self, X, y, sample_weight, reset=True):
        X, y = validate_data(self, X, y, accept_sparse=["csr", "csc", "coo"], dtype=self.dtype,
                             multi_output=True, y_numeric=True, reset=reset)
        sw = _check_sample_weights(sample_weight, X, getattr(self, "comm", None))
        y = np.asarray(y, dtype=np.float64)
        Y = y if y.ndim == 1 else np.asfortranarray(y.T)
        return to_column_layout(X, X.dtype), y, Y, sw

    def _store(self, y, coef, b):
        if y.ndim == 1:
            self.coef_, self.intercept_ = coef[0], float(b[0])
        else:
            self.coef_, self.intercept_ = coef, b

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags

    def fit(self, X, y, sample_weight=None):
        """Fit on ``X`` (n_samples x n_features, dense or sparse) and targets ``y`` ((n,) or
        (n, n_targets))."""
        self._check_params()
        Xc, y, Y, sw = self._prepare(X, y, sample_weight)
        coef, b, n_iter, state = self._fit_targets(Xc, Y, sw, self._lambda(self._total_weight(sw)))
        self._store(y, coef, b)
        self.n_iter_ = n_iter
        self._opt_state = state
        return self

    @available_if(lambda self: _has_partial_fit(self.solver))
    def partial_fit(self, X, y, sample_weight=None):
        """One pass of the minibatch solver over ``(X, y)``, continuing from the current state."""
        self._check_params()
        first = not hasattr(self, "coef_")
        Xc, y, Y, sw = self._prepare(X, y, sample_weight, reset=first)
        warm = None if first else {"coef": np.atleast_2d(self.coef_),
                                   "intercept": np.atleast_1d(self.intercept_),
                                   "opt": self._opt_state}
        coef, b, _, state = self._fit_targets(Xc, Y, sw, self._lambda(self._total_weight(sw)),
                                              warm=warm, passes=1)
        self._store(y, coef, b)
        self.n_iter_ = getattr(self, "n_iter_", 0) + 1
        self._opt_state = state
        return self

    def predict(self, X):
        d = self._decision(X)
        return d[:, 0].copy() if np.ndim(self.coef_) == 1 else np.ascontiguousarray(d)


class Ridge(_Regressor):
    __doc__ = """Ridge regression: ``sum_i s_i (y_i - eta_i)^2 + alpha ||w||^2`` (scikit-learn's).

    Parameters
    ----------
    alpha : float, default=1.0
        L2 strength (scikit-learn's); ``lambda = alpha / sum(sample_weight)`` in the learners.
    """ + _common_doc() + """
    dtype : {"float64", "float32"}, default="float64"

    Attributes
    ----------
    coef_ : ndarray (n_features,) or (n_targets, n_features)
    intercept_ : float or ndarray (n_targets,)
    """

    def __init__(self, alpha=1.0, *, fit_intercept=True, solver="auto", max_iter=200,
                 tol=1e-6, batch_size=256, learning_rate=0.1, n_jobs=1, random_state=None,
                 verbose=0, dtype="float64", comm=None):
        self.alpha = alpha
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

    def _lambda(self, total_weight):
        _check_number("alpha", self.alpha, low=0.0, low_open=False)
        return glm.alpha_from_peer("ridge", self.alpha, total_weight) if self.alpha else 0.0


class LinearRegression(_Regressor):
    __doc__ = """Ordinary least squares (``Ridge`` with ``alpha = 0``).

    Parameters
    ----------""" + _common_doc() + """
    dtype : {"float64", "float32"}, default="float64"
    """

    def __init__(self, *, fit_intercept=True, solver="auto", max_iter=200, tol=1e-6,
                 batch_size=256, learning_rate=0.1, n_jobs=1, random_state=None, verbose=0,
                 dtype="float64", comm=None):
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

    def _lambda(self, total_weight):
        return 0.0
