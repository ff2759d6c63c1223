"""The GLM estimators on Dask collections: Dask places the data, Kylix carries the all-reduce.

``DaskLogisticRegression(...).fit(X, y)`` with ``X`` a ``dask.array`` (rows = examples; numpy or
scipy.sparse chunks) or a ``dask.dataframe``: the row partitions are computed where Dask puts
them, every worker holding partitions becomes one rank (:func:`roofline.comm.run_on_dask`), and
each rank fits the corresponding :mod:`roofline.learners` estimator with ``comm=`` on its own
partitions (a distributed solve; every rank ends with the same model).  The fitted attributes
are copied back to the estimator in the client.

As dask-ml's estimators: ``predict``, ``predict_proba``, ``predict_log_proba`` and
``decision_function`` of a Dask input are lazy dask arrays (one task per row block, the fitted
local estimator's method on it; in-memory input gives in-memory output), ``score`` is reduced
on the cluster, a dask DataFrame's columns are ``feature_names_in_`` (checked at predict as
scikit-learn does), ``timeout=`` bounds a fit (no limit by default), ``clone`` keeps the
``client`` and pickling drops it, and the ranks' errors and warnings are raised in the client.
"""

from __future__ import annotations

import copy
import logging
import math
import time

import numpy as np
import scipy.sparse as sp
from sklearn.base import is_classifier
from sklearn.utils.metaestimators import available_if

from roofline.comm import CommError, CommTimeoutError, run_on_dask
from roofline.glm import check_solver, resolve_loss, solver_names
from roofline.learners import LinearSVC, LogisticRegression, Ridge

__all__ = ["DaskLinearSVC", "DaskLogisticRegression", "DaskRidge", "partitions_by_worker"]

logger = logging.getLogger(__name__)


def _is_dask(a) -> bool:
    """Whether ``a`` is a Dask collection (array, DataFrame or Series)."""
    return hasattr(a, "dask") and hasattr(a, "__dask_graph__")


def _columns_of(X):
    """What scikit-learn's feature-name and feature-count checks read of ``X``: for a dask
    DataFrame its (empty) pandas meta, with its columns; ``X`` itself otherwise."""
    if _is_dask(X) and hasattr(X, "columns") and hasattr(X, "_meta"):
        return X._meta
    return X


def _as_dask_array(a, name, ndim):
    import dask.array as da

    if hasattr(a, "to_dask_array"):  # dask DataFrame / Series: known partition lengths
        a = a.to_dask_array(lengths=True)
    if not isinstance(a, da.Array):
        raise TypeError(f"{name} must be a dask array or dask dataframe, got "
                        f"{type(a).__name__} (for in-memory data use roofline.learners)")
    if a.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {a.shape}")
    if any(np.isnan(c).any() for c in a.chunks):
        raise ValueError(f"{name} has partitions of unknown length; compute them first "
                         "(e.g. to_dask_array(lengths=True))")
    return a


def _check_timeout(timeout):
    """``timeout`` as None or a finite number of seconds > 0, else ``ValueError`` naming it."""
    if timeout is None:
        return None
    try:
        t = float(timeout)
    except (TypeError, ValueError):
        raise ValueError(f"timeout must be None or a number of seconds, got {timeout!r}") \
            from None
    if not math.isfinite(t) or t <= 0:
        raise ValueError(f"timeout must be None or a finite number of seconds > 0, got "
                         f"{timeout!r}")
    return t


def partitions_by_worker(client, X, y, sample_weight=None, *, timeout=None):
    """Compute the row partitions of ``(X, y[, sample_weight])`` on the cluster and group them by
    the worker that holds them.

    Parameters
    ----------
    client : distributed.Client
        The cluster.
    X : dask array or dask DataFrame, shape (n_samples, n_features)
        Chunked along rows only (it is rechunked to one column block otherwise).
    y : dask array or dask Series, shape (n_samples,)
        The targets.
    sample_weight : dask array or dask Series, optional
        The samples' weights.
    timeout : float or None, default=None
        Seconds to wait for the partitions to be computed (None: no limit).

    Returns
    -------
    list of list of Future
        One list per worker holding data, each future a partition ``(X_block, y_block,
        w_block or None)``, in partition order.  Empty partitions are left out (they hold no
        examples: a worker holding only those is no rank).

    Raises
    ------
    ValueError
        ``X`` has no rows, or ``y`` (``sample_weight``) not as many as ``X``.
    TimeoutError
        The partitions were not computed within ``timeout`` seconds.
    """
    import dask
    from distributed import wait

    X = _as_dask_array(X, "X", 2)
    y = _as_dask_array(y, "y", 1)
    if X.shape[0] != y.shape[0]:
        raise ValueError(f"X has {X.shape[0]} rows but y has {y.shape[0]}")
    if X.numblocks[1] != 1:
        X = X.rechunk({1: X.shape[1]})
    y = y.rechunk((X.chunks[0],))
    xs, ys = X.to_delayed().ravel(), y.to_delayed().ravel()
    if sample_weight is not None:
        w = _as_dask_array(sample_weight, "sample_weight", 1).rechunk((X.chunks[0],))
        ws = w.to_delayed().ravel()
    else:
        ws = [None] * len(xs)
    rows = X.chunks[0]
    if not sum(rows):
        raise ValueError(f"X has no rows (shape {X.shape}): nothing to fit")
    parts = client.compute([dask.delayed(tuple)([a, b, c])
                            for a, b, c, m in zip(xs, ys, ws, rows, strict=True) if m])
    wait(parts, timeout=_check_timeout(timeout))
    holders = client.who_has(parts)
    by_worker = {}
    for f in parts:
        w = sorted(holders.get(f.key, ()))[0]
        by_worker.setdefault(w, []).append(f)
    return [by_worker[w] for w in sorted(by_worker)]


def _stack(parts):
    """One rank's partitions as ``(X, y, w)``."""
    xs = [p[0] for p in parts]
    X = (sp.vstack([sp.csr_matrix(x) for x in xs], format="csr")
         if any(sp.issparse(x) for x in xs) else np.concatenate([np.asarray(x) for x in xs]))
    y = np.concatenate([np.asarray(p[1]) for p in parts])
    w = None if parts[0][2] is None else np.concatenate([np.asarray(p[2]) for p in parts])
    return X, y, w


def _fit_rank(comm, parts, estimator):
    """Fit ``estimator`` (a roofline.learners estimator) with ``comm=`` on this rank's data."""
    X, y, w = _stack(parts)
    estimator.set_params(comm=comm)
    estimator.fit(X, y, sample_weight=w)
    estimator.set_params(comm=None)  # a communicator does not travel back
    return estimator


def _apply_block(block, *, estimator, method, tail, out_dtype):
    """``estimator.method(block)`` for one block of a Dask input (an empty block gives an empty
    output of the right shape: the local estimator refuses zero rows)."""
    if block.shape[0] == 0:
        return np.empty((0, *tail), dtype=out_dtype)
    return getattr(estimator, method)(block)


#: Seconds a rank waits for a peer's message (or for the ranks to register) in a Dask fit: a
#: dead worker ends the fit at once whatever this is (its sockets close, and the client sees
#: it leave), so it bounds only a rank that is alive but stuck.
_PEER_WAIT = 600.0


class _DaskGLM:
    """Fit and predict of the Dask estimators (see the module's docstring): listed before the
    :mod:`roofline.learners` estimator among a Dask estimator's bases, so that its ``fit`` and
    ``predict`` run; ``_local`` is that estimator's class, fitted on every rank."""

    _local: type

    def _local_params(self):
        return {k: v for k, v in self.get_params().items() if k not in ("client", "timeout")}

    # -- clone and pickle: the client is shared by clones and never pickled ----------------
    def __sklearn_clone__(self):
        """A clone (:func:`sklearn.base.clone`) that uses the same ``client``: the other
        parameters are cloned as scikit-learn does; a live ``distributed.Client`` cannot be
        copied, and the clone works on the same cluster.

        Returns
        -------
        estimator
            Unfitted, with the same parameters.
        """
        from sklearn.base import clone

        params = self.get_params(deep=False)
        client = params.pop("client")
        twin = type(self)(**{k: clone(v, safe=False) for k, v in params.items()},
                          client=client)
        for attr in ("_metadata_request", "_sklearn_output_config"):
            if hasattr(self, attr):
                setattr(twin, attr, copy.deepcopy(getattr(self, attr)))
        return twin

    def __getstate__(self):
        # a Client (sockets, an event loop) does not pickle: the unpickled estimator has
        # client=None and uses the current client (as LightGBM's and XGBoost's Dask models)
        state = dict(super().__getstate__())
        state["client"] = None
        return state

    # -- fit ----------------------------------------------------------------------------------
    def fit(self, X, y, sample_weight=None):
        """Fit on Dask collections ``X`` (n_samples x n_features) and ``y``.

        Parameters
        ----------
        X : dask array or dask DataFrame
            Numpy or scipy.sparse chunks, partitioned along rows; a DataFrame's columns are
            stored as ``feature_names_in_``.
        y : dask array or dask Series
            Class labels (targets for :class:`DaskRidge`).
        sample_weight : dask array or dask Series, optional
            The samples' weights.

        Returns
        -------
        self
            The fitted estimator.

        Raises
        ------
        TimeoutError
            The fit did not end within ``timeout`` seconds (a
            :class:`~roofline.comm.CommTimeoutError`, naming it).
        """
        from distributed import default_client
        from sklearn.utils.validation import validate_data

        timeout = _check_timeout(self.timeout)
        start = time.monotonic()
        # the registry's check (the ranks would each raise it), before any work on the cluster
        check_solver(self.solver, loss=resolve_loss(self._loss), penalty=self._penalty(),
                     comm=True, runner=None)
        if _is_dask(X):  # n_features_in_ and a DataFrame's feature_names_in_, in the client
            validate_data(self, _columns_of(X), reset=True, skip_check_array=True)
        client = self.client or default_client()
        try:
            groups = partitions_by_worker(client, X, y, sample_weight, timeout=timeout)
        except TimeoutError as e:
            raise CommTimeoutError(f"{type(self).__name__}.fit did not finish within "
                                   f"timeout={self.timeout!r} s (computing the partitions)") \
                from e
        local = self._local(**self._local_params())
        logger.info("%s: %d ranks on the workers holding the %d partitions",
                    type(self).__name__, len(groups), sum(len(g) for g in groups))
        left = None if timeout is None else max(timeout - (time.monotonic() - start), 1e-3)
        try:
            fitted = run_on_dask(client, _fit_rank, parts=groups, args=(local,),
                                 timeout=_PEER_WAIT if left is None else min(_PEER_WAIT, left),
                                 job_timeout=left)[0]
        except CommTimeoutError as e:
            raise CommTimeoutError(f"{type(self).__name__}.fit did not finish within "
                                   f"timeout={self.timeout!r} s: {e}") from e
        except CommError as e:
            err = _rank_error(e)
            if err is e:
                raise
            raise err from None
        names = getattr(self, "feature_names_in_", None)
        for k, v in vars(fitted).items():
            # the fitted attributes, and the kind of model predict_proba reads
            if (k.endswith("_") and not k.startswith("__")) or k == "_multinomial":
                setattr(self, k, v)
        if names is not None:
            self.feature_names_in_ = names
        self.n_workers_ = len(groups)
        self.estimator_ = fitted
        return self

    # -- predict and friends: lazy on Dask input ---------------------------------------------
    def _apply(self, method, X):
        """``estimator_.method`` over ``X``: a lazy dask array (one task per row block) for a
        Dask input, ``estimator_.method(X)`` for an in-memory one; the feature names and count
        are checked here, against this estimator (scikit-learn's errors and warnings)."""
        from sklearn.utils.validation import check_is_fitted, validate_data

        check_is_fitted(self, "estimator_")
        validate_data(self, _columns_of(X), reset=False, skip_check_array=True)
        fn = getattr(self.estimator_, method)
        if not _is_dask(X):
            if hasattr(X, "columns") and hasattr(X, "to_numpy"):  # pandas: names checked
                X = X.to_numpy()
            return fn(X)
        if hasattr(X, "to_dask_array"):  # lazy: the row blocks keep unknown lengths
            X = X.to_dask_array()
        if X.ndim != 2:
            raise ValueError(f"X must be 2-D, got shape {X.shape}")
        if X.numblocks[1] != 1:
            X = X.rechunk({1: X.shape[1]})
        # the output's dtype and columns, from one row of zeros in the client
        probe = np.asarray(fn(np.zeros((1, X.shape[1]), dtype=X.dtype)))
        tail = probe.shape[1:]
        kw = dict(estimator=self.estimator_, method=method, tail=tail, out_dtype=probe.dtype,
                  dtype=probe.dtype, meta=np.empty((0,) * probe.ndim, dtype=probe.dtype))
        if not tail:
            return X.map_blocks(_apply_block, drop_axis=1, chunks=(X.chunks[0],), **kw)
        return X.map_blocks(_apply_block, chunks=(X.chunks[0], tail), **kw)

    @available_if(lambda self: hasattr(self._local, "decision_function"))
    def decision_function(self, X):
        """Margins of ``X``.

        Parameters
        ----------
        X : dask array, dask DataFrame, ndarray, sparse matrix or DataFrame
            Shape (n_samples, n_features).

        Returns
        -------
        dask array or ndarray
            Shape (n_samples,) for two classes, (n_samples, n_classes) else: a lazy dask
            array (a task per row block of ``X``) for a Dask ``X``, an ndarray otherwise.
        """
        return self._apply("decision_function", X)

    def predict(self, X):
        """Predictions for ``X``.

        Parameters
        ----------
        X : dask array, dask DataFrame, ndarray, sparse matrix or DataFrame
            Shape (n_samples, n_features).

        Returns
        -------
        dask array or ndarray
            Class labels (targets for :class:`DaskRidge`): a lazy dask array (a task per row
            block of ``X``) for a Dask ``X``, an ndarray otherwise.
        """
        return self._apply("predict", X)

    @available_if(lambda self: hasattr(self._local, "predict_proba"))
    def predict_proba(self, X):
        """Class probabilities of ``X``.

        Parameters
        ----------
        X : dask array, dask DataFrame, ndarray, sparse matrix or DataFrame
            Shape (n_samples, n_features).

        Returns
        -------
        dask array or ndarray
            Shape (n_samples, n_classes), columns in the order of ``classes_``: a lazy dask
            array (a task per row block of ``X``) for a Dask ``X``, an ndarray otherwise.
        """
        return self._apply("predict_proba", X)

    @available_if(lambda self: hasattr(self._local, "predict_log_proba"))
    def predict_log_proba(self, X):
        """The logarithm of :meth:`predict_proba`.

        Parameters
        ----------
        X : dask array, dask DataFrame, ndarray, sparse matrix or DataFrame
            Shape (n_samples, n_features).

        Returns
        -------
        dask array or ndarray
            Shape (n_samples, n_classes): lazy for a Dask ``X``, as :meth:`predict_proba`.
        """
        return self._apply("predict_log_proba", X)

    def score(self, X, y, sample_weight=None):
        """Mean accuracy (:math:`R^2` for :class:`DaskRidge`) of the predictions of ``X``.

        Computed on the cluster for a Dask ``X`` (as dask-ml's ``score``), by scikit-learn's
        ``score`` otherwise.

        Parameters
        ----------
        X : dask array, dask DataFrame, ndarray, sparse matrix or DataFrame
            Shape (n_samples, n_features).
        y : dask array, dask Series or array-like
            True labels (targets), shape (n_samples,) (or (n_samples, n_targets)).
        sample_weight : dask array, dask Series or array-like, optional
            The samples' weights.

        Returns
        -------
        float
            The score (the uniform average over the targets of a multi-target
            :class:`DaskRidge`).
        """
        if not _is_dask(X):
            return super().score(X, y, sample_weight=sample_weight)
        pred = self.predict(X)
        yt = _lazy_like(y, "y", pred)
        w = None if sample_weight is None else _lazy_like(sample_weight, "sample_weight", pred)
        if yt is None or (sample_weight is not None and w is None):  # in-memory y, unknown rows
            return self._score_arrays(self._compute(pred), np.asarray(y), sample_weight)
        if is_classifier(self):
            hit = (pred == yt).astype(np.float64)
            value = hit.mean() if w is None else (hit * w).sum() / w.sum()
            return float(self._compute(value))
        yt = yt.astype(np.float64)
        if yt.ndim == 1:
            yt, pred = yt[:, None], pred[:, None]
        ww = 1.0 if w is None else w[:, None]
        total = float(yt.shape[0]) if w is None else w.sum()
        mean = (ww * yt).sum(axis=0) / total
        num, den = self._compute([(ww * (yt - pred) ** 2).sum(axis=0),
                                  (ww * (yt - mean) ** 2).sum(axis=0)])
        return _r2(np.asarray(num), np.asarray(den))

    def _score_arrays(self, pred, y, sample_weight):
        from sklearn.metrics import accuracy_score, r2_score

        sw = None if sample_weight is None else np.asarray(self._compute(sample_weight)
                                                           if _is_dask(sample_weight)
                                                           else sample_weight)
        if is_classifier(self):
            return float(accuracy_score(y, pred, sample_weight=sw))
        return float(r2_score(y, pred, sample_weight=sw))

    def _compute(self, expr):
        """``expr`` (a Dask collection, or a list of them) computed on this estimator's
        client (the current scheduler when ``client`` is None)."""
        import dask

        if isinstance(expr, list):
            return list(dask.compute(*expr, scheduler=self.client))
        return dask.compute(expr, scheduler=self.client)[0]


def _r2(num, den):
    """scikit-learn's :math:`R^2` from the per-target residual and total sums of squares
    (a constant target scores 1 when fitted exactly, 0 otherwise), averaged over targets."""
    with np.errstate(divide="ignore", invalid="ignore"):
        score = np.where(den != 0, 1.0 - num / np.where(den != 0, den, 1.0),
                         np.where(num == 0, 1.0, 0.0))
    return float(np.mean(score))


def _lazy_like(a, name, pred):
    """``a`` (the targets or weights of :meth:`_DaskGLM.score`) as a dask array with the row
    blocks of ``pred``; None for an in-memory ``a`` when ``pred``'s row lengths are unknown."""
    import dask.array as da

    rows = pred.chunks[0]
    if _is_dask(a):
        if hasattr(a, "to_dask_array"):
            a = a.to_dask_array(lengths=None if np.isnan(rows).any() else True)
        if not any(np.isnan(rows)) and not any(np.isnan(a.chunks[0])):
            if a.shape[0] != pred.shape[0]:
                raise ValueError(f"X has {pred.shape[0]} rows but {name} has {a.shape[0]}")
            a = a.rechunk({0: rows})
        elif a.numblocks[0] != len(rows):
            raise ValueError(f"{name} has {a.numblocks[0]} partitions but X has {len(rows)}: "
                             "pass them with the same partitions (or known lengths)")
        return a
    a = np.asarray(a)
    if any(np.isnan(rows)):
        return None
    if a.shape[0] != pred.shape[0]:
        raise ValueError(f"X has {pred.shape[0]} rows but {name} has {a.shape[0]}")
    return da.from_array(a, chunks=(rows, *a.shape[1:]))


def _rank_error(e):
    """The error of a failed Dask fit, raised in the client: the ranks' own exception (a
    ``ValueError`` of a bad parameter, say) when one caused the failure, with the ranks and
    workers that raised it in a note; the :class:`~roofline.comm.CommError` otherwise."""
    cause = e.__cause__
    if isinstance(cause, Exception) and not isinstance(cause, CommError):
        cause.add_note(f"(raised on the Dask workers: {e})")
        return cause
    return e


class DaskLogisticRegression(_DaskGLM, LogisticRegression):
    """L2-regularised logistic regression on Dask collections.

    :class:`roofline.learners.LogisticRegression` fitted on Dask collections: each worker
    holding partitions is one rank of a Kylix TCP job (:func:`roofline.comm.run_on_dask`).
    The parameters are those of :class:`~roofline.learners.LogisticRegression` except
    ``comm`` and ``device`` (the fit runs on the workers' CPUs), plus ``timeout`` and
    ``client``.

    Minimises ``C sum_i s_i log(1 + exp(-y_i eta_i)) + ||w||^2 / 2`` over all the partitions;
    with more than two classes, the multinomial model (as the local estimator's).

    Parameters
    ----------
    C : float, default=1.0
        Inverse regularisation strength (scikit-learn's).
    penalty : {"l2", "l1", "elasticnet", None}, default="l2"
        As :class:`roofline.learners.LogisticRegression`'s (``"elasticnet"`` with
        ``l1_ratio`` 0 or 1 is ``"l2"`` or ``"l1"``).  Over Dask, ``"l1"`` runs with
        ``solver="pure-block"`` only, and ``None`` (no penalty) with more than two classes
        only (the multinomial Newton); every other solver needs the L2 penalty.
    l1_ratio : float or None, default=None
        As :class:`roofline.learners.LogisticRegression`'s (0 or 1).
    fit_intercept : bool, default=True
        Learn an intercept (as for the :mod:`roofline.learners` estimator: carried by a
        constant feature, and so regularised, in the dual CD solvers).
    intercept_scaling : float or None, default=None
        As :class:`roofline.learners.LogisticRegression`'s (liblinear's synthetic intercept
        feature when a float).
    class_weight : dict, "balanced" or None, default=None
        As :class:`roofline.learners.LogisticRegression`'s (``"balanced"`` counts the classes
        over every partition).
    solver : {SOLVERS}, default="auto"
        The solvers that run over Dask (those of the registry that take ``comm=``; see
        :class:`roofline.learners.LogisticRegression`); ``"auto"`` runs the distributed
        trust-region Newton (the same iterations and model at any number of workers; the
        multinomial Newton with more than two classes), ``"cocoa"`` and ``"hcocoa"`` the dual
        CD, ``"pure-block"`` the primal block CD, ``"vw-hybrid"`` an online pass then
        L-BFGS.
    max_iter : int, default=200
        CD rounds (L-BFGS iterations of ``vw-hybrid``); a fit that stops on it before meeting
        ``tol`` warns with :class:`sklearn.exceptions.ConvergenceWarning`.
    tol : float, default=1e-6
        As the local estimator's (the relative duality gap of the ``fit_glm`` solvers and
        ``vw-hybrid``).
    batch_size : int, default=256
        Minibatch size of the online pass of ``vw-hybrid``.
    learning_rate : float, default=0.1
        Step size of the online pass of ``vw-hybrid``.
    n_jobs : int or None, default=None
        Threads of the CD solvers on each worker (scikit-learn's meaning: ``None`` is 1,
        ``-1`` every CPU of the worker).
    random_state : int or None, default=None
        Seed of the CD solvers' coordinate order.
    verbose : int, default=0
        Log progress (on the workers) to stderr.
    dtype : {None, "float64", "float32"}, default=None
        As the local estimator's: the dtype the ranks' solvers read (None: float32
        partitions stay float32, any other is converted to float64); ``predict`` and friends
        follow the local estimator's output dtype.
    multi_class : {"auto", "multinomial", "ovr"}, default="auto"
        As :class:`roofline.learners.LogisticRegression`'s: more than two classes are fitted
        by the distributed multinomial model (:func:`roofline.glm.fit_multinomial` over the
        workers) where the solver allows, one-vs-rest otherwise.
    warm_start : bool, default=False
        As the local estimator's: the dual CD solvers (``cocoa``) start from zero whatever
        this says.
    timeout : float or None, default=None
        Seconds the fit may take, from the partitions' computation to the model (a
        :class:`~roofline.comm.CommTimeoutError`, a ``TimeoutError`` naming it, after
        that); None: no limit.  A worker that dies ends the fit at once either way.
    client : distributed.Client or None, default=None
        The cluster; the current client (``distributed.default_client()``) when None.
        :func:`sklearn.base.clone` (so ``GridSearchCV``) gives the clone the same client;
        pickling leaves it out (the unpickled estimator has ``client=None``).

    Attributes
    ----------
    coef_ : ndarray (1, n_features) or (n_classes, n_features)
    intercept_ : ndarray (1,) or (n_classes,)
    classes_ : ndarray
    n_iter_ : ndarray (1,)
    n_features_in_ : int
        Number of features of ``X`` at fit.
    feature_names_in_ : ndarray of str
        The columns of a dask DataFrame ``X`` at fit (only then); ``predict`` and friends
        check them as scikit-learn does.
    n_workers_ : int
        Ranks (workers holding partitions) of the fit.
    estimator_ : roofline.learners.LogisticRegression
        The fitted local estimator (rank 0's), used by ``predict`` and friends.
    """

    _local = LogisticRegression

    def __init__(self, C=1.0, *, penalty="l2", l1_ratio=None, fit_intercept=True,
                 intercept_scaling=None, class_weight=None, solver="auto", max_iter=200,
                 tol=1e-6, batch_size=256, learning_rate=0.1, n_jobs=None, random_state=None,
                 verbose=0, dtype=None, multi_class="auto", warm_start=False,
                 timeout=None, client=None):
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
        self.multi_class = multi_class
        self.timeout = timeout
        self.client = client


class DaskLinearSVC(_DaskGLM, LinearSVC):
    """A linear support vector classifier on Dask collections.

    :class:`roofline.learners.LinearSVC` fitted on Dask collections: each worker holding
    partitions is one rank of a Kylix TCP job (:func:`roofline.comm.run_on_dask`).  The
    parameters are those of :class:`~roofline.learners.LinearSVC` except ``comm``,
    ``device`` (the fit runs on the workers' CPUs) and ``penalty`` (its ``"l1"`` fits in one
    process only), plus ``timeout`` and
    ``client``; ``solver`` defaults to ``"cocoa"`` and ``loss`` to ``"hinge"`` (the loss the
    distributed dual CD solves).

    Minimises ``C sum_i s_i l(y_i, eta_i) + ||w||^2 / 2`` over all the partitions;
    multi-class is one-vs-rest.

    Parameters
    ----------
    C : float, default=1.0
        Inverse regularisation strength (scikit-learn's).
    loss : {"hinge", "squared_hinge"}, default="hinge"
        The local estimator's default is ``"squared_hinge"`` (``solver="newton"`` here).
    dual : {"auto", True, False}, default="auto"
        As :class:`roofline.learners.LinearSVC`'s (scikit-learn's combinations:
        ``loss="hinge"`` needs True or ``"auto"``); what runs is the solver's formulation
        (the dual for ``cocoa`` / ``hcocoa``, the primal for ``newton``).
    fit_intercept : bool, default=True
        Learn an intercept (as for the :mod:`roofline.learners` estimator: carried by a
        constant feature, and so regularised, in the dual CD solvers).
    intercept_scaling : float or None, default=None
        As :class:`roofline.learners.LinearSVC`'s (liblinear's synthetic intercept
        feature when a float).
    class_weight : dict, "balanced" or None, default=None
        As :class:`roofline.learners.LinearSVC`'s (``"balanced"`` counts the classes
        over every partition).
    solver : {SOLVERS}, default="cocoa"
        The solvers that run over Dask (see :class:`roofline.learners.LinearSVC`): the dual
        CD (``"cocoa"``, ``"hcocoa"``) for ``loss="hinge"``, the trust-region Newton
        (``"newton"``) for ``loss="squared_hinge"``; ``"auto"`` chooses between them by the
        loss.  The local estimator's default is ``"auto"``.
    max_iter : int, default=200
        CD rounds; a fit that stops on it before meeting ``tol`` warns with
        :class:`sklearn.exceptions.ConvergenceWarning`.
    tol : float, default=1e-6
        CD relative duality gap.
    batch_size : int, default=256
        Minibatch size of the local estimator's ``adagrad``/``sgd`` (no solver over a
        communicator uses it for the hinge losses).
    learning_rate : float, default=0.1
        Step size of the local estimator's ``adagrad``/``sgd`` (unused here, as
        ``batch_size``).
    n_jobs : int or None, default=None
        Threads of the CD solvers on each worker (scikit-learn's meaning: ``None`` is 1,
        ``-1`` every CPU of the worker).
    random_state : int or None, default=None
        Seed of the CD solvers' coordinate order.
    verbose : int, default=0
        Log progress (on the workers) to stderr.
    dtype : {None, "float64", "float32"}, default=None
        As the local estimator's: the dtype the ranks' solvers read (None: float32
        partitions stay float32, any other is converted to float64); ``predict`` and friends
        follow the local estimator's output dtype.
    warm_start : bool, default=False
        As the local estimator's: the dual CD solvers (``cocoa``) start from zero whatever
        this says.
    timeout : float or None, default=None
        Seconds the fit may take, from the partitions' computation to the model (a
        :class:`~roofline.comm.CommTimeoutError`, a ``TimeoutError`` naming it, after
        that); None: no limit.  A worker that dies ends the fit at once either way.
    client : distributed.Client or None, default=None
        The cluster; the current client (``distributed.default_client()``) when None.
        :func:`sklearn.base.clone` (so ``GridSearchCV``) gives the clone the same client;
        pickling leaves it out (the unpickled estimator has ``client=None``).

    Attributes
    ----------
    coef_ : ndarray (1, n_features) or (n_classes, n_features)
    intercept_ : ndarray (1,) or (n_classes,)
    classes_ : ndarray
    n_features_in_ : int
        Number of features of ``X`` at fit.
    feature_names_in_ : ndarray of str
        The columns of a dask DataFrame ``X`` at fit (only then); ``predict`` and friends
        check them as scikit-learn does.
    n_workers_ : int
        Ranks (workers holding partitions) of the fit.
    estimator_ : roofline.learners.LinearSVC
        The fitted local estimator (rank 0's), used by ``predict`` and friends.
    """

    _local = LinearSVC

    def __init__(self, C=1.0, *, loss="hinge", dual="auto", fit_intercept=True,
                 intercept_scaling=None, class_weight=None, solver="cocoa", max_iter=200,
                 tol=1e-6, batch_size=256,
                 learning_rate=0.1, n_jobs=None, random_state=None, verbose=0,
                 dtype=None, warm_start=False, timeout=None, client=None):
        self.C = C
        self.intercept_scaling = intercept_scaling
        self.class_weight = class_weight
        self.warm_start = warm_start
        self.loss = loss
        self.dual = dual
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
        self.timeout = timeout
        self.client = client


class DaskRidge(_DaskGLM, Ridge):
    """Ridge regression on Dask collections.

    :class:`roofline.learners.Ridge` fitted on Dask collections: each worker holding
    partitions is one rank of a Kylix TCP job (:func:`roofline.comm.run_on_dask`).  The
    parameters are those of :class:`~roofline.learners.Ridge` except ``comm``, ``device``
    (the fit runs on the workers' CPUs) and ``positive`` (its bounded L-BFGS-B fits in one
    process only), plus ``timeout`` and
    ``client``.

    Minimises ``sum_i s_i (y_i - eta_i)^2 + alpha ||w||^2`` over all the partitions.

    Parameters
    ----------
    alpha : float, default=1.0
        L2 strength (scikit-learn's).
    fit_intercept : bool, default=True
        Learn an intercept (as for the :mod:`roofline.learners` estimator: carried by a
        constant feature, and so regularised, in the dual CD solvers).
    solver : {SOLVERS}, default="auto"
        The solvers that run over Dask (those of the registry that take ``comm=``; see
        :class:`roofline.learners.Ridge`); ``"auto"`` runs the distributed trust-region Newton
        (the same iterations and model at any number of workers), ``"cocoa"`` and
        ``"hcocoa"`` the dual CD, ``"pure-block"`` the primal block CD, ``"vw-hybrid"`` an
        online pass then L-BFGS.
    max_iter : int, default=200
        CD rounds (L-BFGS iterations of ``vw-hybrid``); a fit that stops on it before meeting
        ``tol`` warns with :class:`sklearn.exceptions.ConvergenceWarning`.
    tol : float, default=1e-6
        As the local estimator's (the relative duality gap of the ``fit_glm`` solvers and
        ``vw-hybrid``).
    batch_size : int, default=256
        Minibatch size of the online pass of ``vw-hybrid``.
    learning_rate : float, default=0.1
        Step size of the online pass of ``vw-hybrid``.
    n_jobs : int or None, default=None
        Threads of the CD solvers on each worker (scikit-learn's meaning: ``None`` is 1,
        ``-1`` every CPU of the worker).
    random_state : int or None, default=None
        Seed of the CD solvers' coordinate order.
    verbose : int, default=0
        Log progress (on the workers) to stderr.
    dtype : {None, "float64", "float32"}, default=None
        As the local estimator's: the dtype the ranks' solvers read (None: float32
        partitions stay float32, any other is converted to float64); ``predict`` and friends
        follow the local estimator's output dtype.
    warm_start : bool, default=False
        As the local estimator's: the dual CD solvers (``cocoa``) start from zero whatever
        this says.
    timeout : float or None, default=None
        Seconds the fit may take, from the partitions' computation to the model (a
        :class:`~roofline.comm.CommTimeoutError`, a ``TimeoutError`` naming it, after
        that); None: no limit.  A worker that dies ends the fit at once either way.
    client : distributed.Client or None, default=None
        The cluster; the current client (``distributed.default_client()``) when None.
        :func:`sklearn.base.clone` (so ``GridSearchCV``) gives the clone the same client;
        pickling leaves it out (the unpickled estimator has ``client=None``).

    Attributes
    ----------
    coef_ : ndarray (n_features,) or (n_targets, n_features)
    intercept_ : float or ndarray (n_targets,)
    n_features_in_ : int
        Number of features of ``X`` at fit.
    feature_names_in_ : ndarray of str
        The columns of a dask DataFrame ``X`` at fit (only then); ``predict`` and friends
        check them as scikit-learn does.
    n_workers_ : int
        Ranks (workers holding partitions) of the fit.
    estimator_ : roofline.learners.Ridge
        The fitted local estimator (rank 0's), used by ``predict`` and friends.
    """

    _local = Ridge

    def __init__(self, alpha=1.0, *, fit_intercept=True, solver="auto", max_iter=200,
                 tol=1e-6, batch_size=256, learning_rate=0.1, n_jobs=None, random_state=None,
                 verbose=0, dtype=None, warm_start=False, timeout=None, client=None):
        self.alpha = alpha
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
        self.timeout = timeout
        self.client = client


def _fill_solvers(cls, *losses):
    """Write the registry's solvers that take ``comm=`` and one of ``losses`` into ``cls``'
    docstring (its ``{SOLVERS}``), ``"auto"`` last."""
    names = tuple(dict.fromkeys(n for loss in losses for n in
                                solver_names(runner=None, comm=True, loss=loss, auto=False)))
    names += ("auto",)
    cls.__doc__ = cls.__doc__.replace("{SOLVERS}",
                                      "{" + ", ".join(f'"{n}"' for n in names) + "}")


_fill_solvers(DaskLogisticRegression, "logistic")
_fill_solvers(DaskLinearSVC, "hinge", "squared_hinge")
_fill_solvers(DaskRidge, "squared")
