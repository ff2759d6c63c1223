"""The GLM estimators on Dask collections: Dask places the data, Kylix carries the all-reduce.

``DaskLogisticRegression(...).fit(X, y)`` with ``X`` a ``dask.array`` (rows = examples; numpy or
scipy.sparse chunks) or a ``dask.dataframe``: the row partitions are computed where Dask puts
them, every worker holding partitions becomes one rank (:func:`roofline.comm.run_on_dask`), and
each rank fits the corresponding :mod:`roofline.learners` estimator with ``comm=`` on its own
partitions (a distributed CoCoA solve; every rank ends with the same model).  The fitted
attributes are copied back to the estimator in the client; ``predict`` and friends map over the
partitions of a Dask input (or run locally on numpy/scipy input).
"""

from __future__ import annotations

import logging

import numpy as np
import scipy.sparse as sp

from roofline.comm import run_on_dask
from roofline.glm import check_solver, resolve_loss, solver_names
from roofline.learners import LinearSVC, LogisticRegression, Ridge

__all__ = ["DaskLinearSVC", "DaskLogisticRegression", "DaskRidge", "partitions_by_worker"]

logger = logging.getLogger(__name__)


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


def partitions_by_worker(client, X, y, sample_weight=None):
    """Compute the row partitions of ``(X, y[, sample_weight])`` on the cluster and group them by
    the worker that holds them.

    Parameters
    ----------
    client : distributed.Client
    X : dask array or dask DataFrame, shape (n_samples, n_features)
        Chunked along rows only (it is rechunked to one column block otherwise).
    y : dask array or dask Series, shape (n_samples,)
    sample_weight : dask array or dask Series, optional

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
    wait(parts)
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


class _DaskGLM:
    """Fit and predict of the Dask estimators (see the module's docstring): listed before the
    :mod:`roofline.learners` estimator among a Dask estimator's bases, so that its ``fit`` and
    ``predict`` run; ``_local`` is that estimator's class, fitted on every rank."""

    _local: type

    def _local_params(self):
        return {k: v for k, v in self.get_params().items() if k != "client"}

    def fit(self, X, y, sample_weight=None):
        """Fit on Dask collections ``X`` (n_samples x n_features) and ``y``.

        Parameters
        ----------
        X : dask array or dask DataFrame
            Numpy or scipy.sparse chunks, partitioned along rows.
        y : dask array or dask Series
        sample_weight : dask array or dask Series, optional

        Returns
        -------
        self
        """
        from distributed import default_client

        # the registry's check (the ranks would each raise it), before any work on the cluster
        check_solver(self.solver, loss=resolve_loss(self._loss), comm=True, runner=None)
        client = self.client or default_client()
        groups = partitions_by_worker(client, X, y, sample_weight)
        local = self._local(**self._local_params())
        logger.info("%s: %d ranks on the workers holding the %d partitions",
                    type(self).__name__, len(groups), sum(len(g) for g in groups))
        fitted = run_on_dask(client, _fit_rank, parts=groups, args=(local,))[0]
        for k, v in vars(fitted).items():
            # the fitted attributes, and the kind of model predict_proba reads
            if (k.endswith("_") and not k.startswith("__")) or k == "_multinomial":
                setattr(self, k, v)
        self.n_workers_ = len(groups)
        self.estimator_ = fitted
        return self

    def _apply(self, method, X, **meta):
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "estimator_")
        fn = getattr(self.estimator_, method)
        if hasattr(X, "to_dask_array"):
            X = X.to_dask_array(lengths=True)
        if hasattr(X, "map_blocks"):
            if X.numblocks[1] != 1:
                X = X.rechunk({1: X.shape[1]})
            return X.map_blocks(fn, **meta)
        return fn(X)

    def decision_function(self, X):
        """Margins of ``X`` (a dask array maps over its partitions).

        Parameters
        ----------
        X : dask array, dask DataFrame, ndarray or sparse matrix

        Returns
        -------
        dask array or ndarray
        """
        k = getattr(self, "classes_", np.zeros(2)).size
        if k <= 2:
            return self._apply("decision_function", X, dtype=np.float64, drop_axis=1)
        chunks = None if not hasattr(X, "chunks") else (X.chunks[0], (k,))
        return self._apply("decision_function", X, dtype=np.float64, chunks=chunks)

    def predict(self, X):
        """Predictions for ``X`` (a dask array maps over its partitions).

        Parameters
        ----------
        X : dask array, dask DataFrame, ndarray or sparse matrix

        Returns
        -------
        dask array or ndarray
        """
        dtype = getattr(self, "classes_", np.zeros(0)).dtype
        return self._apply("predict", X, dtype=dtype, drop_axis=1)


class DaskLogisticRegression(_DaskGLM, LogisticRegression):
    """L2-regularised logistic regression on Dask collections.

    :class:`roofline.learners.LogisticRegression` fitted on Dask collections: each worker
    holding partitions is one rank of a Kylix TCP job (:func:`roofline.comm.run_on_dask`).
    The parameters are those of :class:`~roofline.learners.LogisticRegression` except
    ``comm`` and ``device`` (the fit runs on the workers' CPUs), plus ``client``.

    Minimises ``C sum_i s_i log(1 + exp(-y_i eta_i)) + ||w||^2 / 2`` over all the partitions;
    with more than two classes, the multinomial model (as the local estimator's).

    Parameters
    ----------
    C : float, default=1.0
        Inverse regularisation strength (scikit-learn's).
    penalty : {"l2", "l1", "elasticnet", None}, default="l2"
        As :class:`roofline.learners.LogisticRegression`'s; the dual CD solvers that run over
        Dask have the L2 penalty (or none) only.
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
        A solver that runs over a communicator (see
        :class:`roofline.learners.LogisticRegression`); ``"auto"`` runs the distributed
        trust-region Newton (the same iterations and model at any number of workers; the
        multinomial Newton with more than two classes), ``"cocoa"`` the dual CD.
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
    dtype : {"float64", "float32"}, default="float64"
        Value dtype of the data and model.
    multi_class : {"auto", "multinomial", "ovr"}, default="auto"
        As :class:`roofline.learners.LogisticRegression`'s: more than two classes are fitted
        by the distributed multinomial model (:func:`roofline.glm.fit_multinomial` over the
        workers) where the solver allows, one-vs-rest otherwise.
    warm_start : bool, default=False
        As the local estimator's: the dual CD solvers (``cocoa``) start from zero whatever
        this says.
    client : distributed.Client or None, default=None
        The cluster; the current client (``distributed.default_client()``) when None.

    Attributes
    ----------
    coef_ : ndarray (1, n_features) or (n_classes, n_features)
    intercept_ : ndarray (1,) or (n_classes,)
    classes_ : ndarray
    n_iter_ : ndarray (1,)
    n_workers_ : int
        Ranks (workers holding partitions) of the fit.
    estimator_ : roofline.learners.LogisticRegression
        The fitted local estimator (rank 0's), used by ``predict`` and friends.
    """

    _local = LogisticRegression

    def __init__(self, C=1.0, *, penalty="l2", l1_ratio=None, fit_intercept=True,
                 intercept_scaling=None, class_weight=None, solver="auto", max_iter=200,
                 tol=1e-6, batch_size=256, learning_rate=0.1, n_jobs=None, random_state=None,
                 verbose=0, dtype="float64", multi_class="auto", warm_start=False,
                 client=None):
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
        self.client = client


class DaskLinearSVC(_DaskGLM, LinearSVC):
    """A linear support vector classifier on Dask collections.

    :class:`roofline.learners.LinearSVC` fitted on Dask collections: each worker holding
    partitions is one rank of a Kylix TCP job (:func:`roofline.comm.run_on_dask`).  The
    parameters are those of :class:`~roofline.learners.LinearSVC` except ``comm`` and
    ``device`` (the fit runs on the workers' CPUs), plus
    ``client``; ``solver`` defaults to ``"cocoa"`` and ``loss`` to ``"hinge"`` (the loss the
    distributed dual CD solves).

    Minimises ``C sum_i s_i l(y_i, eta_i) + ||w||^2 / 2`` over all the partitions;
    multi-class is one-vs-rest.

    Parameters
    ----------
    C : float, default=1.0
        Inverse regularisation strength (scikit-learn's).
    loss : {"hinge", "squared_hinge"}, default="hinge"
        The local estimator's default is ``"squared_hinge"``.
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
        A solver that runs over a communicator (see :class:`roofline.learners.LinearSVC`);
        ``"auto"`` chooses ``"cocoa"`` there.  The local estimator's default is ``"auto"``.
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
    dtype : {"float64", "float32"}, default="float64"
        Value dtype of the data and model.
    warm_start : bool, default=False
        As the local estimator's: the dual CD solvers (``cocoa``) start from zero whatever
        this says.
    client : distributed.Client or None, default=None
        The cluster; the current client (``distributed.default_client()``) when None.

    Attributes
    ----------
    coef_ : ndarray (1, n_features) or (n_classes, n_features)
    intercept_ : ndarray (1,) or (n_classes,)
    classes_ : ndarray
    n_workers_ : int
        Ranks (workers holding partitions) of the fit.
    estimator_ : roofline.learners.LinearSVC
        The fitted local estimator (rank 0's), used by ``predict`` and friends.
    """

    _local = LinearSVC

    def __init__(self, C=1.0, *, loss="hinge", fit_intercept=True, intercept_scaling=None,
                 class_weight=None, solver="cocoa", max_iter=200, tol=1e-6, batch_size=256,
                 learning_rate=0.1, n_jobs=None, random_state=None, verbose=0,
                 dtype="float64", warm_start=False, client=None):
        self.C = C
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
        self.client = client


class DaskRidge(_DaskGLM, Ridge):
    """Ridge regression on Dask collections.

    :class:`roofline.learners.Ridge` fitted on Dask collections: each worker holding
    partitions is one rank of a Kylix TCP job (:func:`roofline.comm.run_on_dask`).  The
    parameters are those of :class:`~roofline.learners.Ridge` except ``comm`` and ``device``
    (the fit runs on the workers' CPUs), plus
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
        A solver that runs over a communicator (see :class:`roofline.learners.Ridge`);
        ``"auto"`` runs the distributed trust-region Newton (the same iterations and model at
        any number of workers), ``"cocoa"`` the dual CD.
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
    dtype : {"float64", "float32"}, default="float64"
        Value dtype of the data and model.
    warm_start : bool, default=False
        As the local estimator's: the dual CD solvers (``cocoa``) start from zero whatever
        this says.
    client : distributed.Client or None, default=None
        The cluster; the current client (``distributed.default_client()``) when None.

    Attributes
    ----------
    coef_ : ndarray (n_features,) or (n_targets, n_features)
    intercept_ : float or ndarray (n_targets,)
    n_workers_ : int
        Ranks (workers holding partitions) of the fit.
    estimator_ : roofline.learners.Ridge
        The fitted local estimator (rank 0's), used by ``predict`` and friends.
    """

    _local = Ridge

    def __init__(self, alpha=1.0, *, fit_intercept=True, solver="auto", max_iter=200,
                 tol=1e-6, batch_size=256, learning_rate=0.1, n_jobs=None, random_state=None,
                 verbose=0, dtype="float64", warm_start=False, client=None):
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
        self.client = client


def _fill_solvers(cls, loss):
    """Write the registry's solvers that take ``comm=`` and ``loss`` into ``cls``' docstring
    (its ``{SOLVERS}``)."""
    names = solver_names(runner=None, comm=True, loss=loss, auto=False) + ("auto",)
    cls.__doc__ = cls.__doc__.replace("{SOLVERS}",
                                      "{" + ", ".join(f'"{n}"' for n in names) + "}")


_fill_solvers(DaskLogisticRegression, "logistic")
_fill_solvers(DaskLinearSVC, "hinge")
_fill_solvers(DaskRidge, "squared")
