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

import inspect
import logging

import numpy as np
import scipy.sparse as sp

from roofline.comm import run_on_dask
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
        w_block or None)``, in partition order.
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
    parts = client.compute([dask.delayed(tuple)([a, b, c]) for a, b, c in zip(xs, ys, ws,
                                                                               strict=True)])
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
    """Fit and predict of the Dask estimators (see the module's docstring)."""

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

        client = self.client or default_client()
        groups = partitions_by_worker(client, X, y, sample_weight)
        local = self._local(**self._local_params())
        logger.info("%s: %d ranks on the workers holding the %d partitions",
                    type(self).__name__, len(groups), sum(len(g) for g in groups))
        fitted = run_on_dask(client, _fit_rank, parts=groups, args=(local,))[0]
        for k, v in vars(fitted).items():
            if k.endswith("_") and not k.startswith("__"):
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


def _parameter_docs(doc):
    """The entries of the numpydoc Parameters section of ``doc`` (None or a docstring), as
    ``{name: [header line, description lines...]}``, dedented (each name of a ``a, b : type``
    entry gets the whole entry)."""
    lines = inspect.cleandoc(doc or "").splitlines()
    out, current, i = {}, None, 0
    while i < len(lines) and not (lines[i].strip() == "Parameters" and i + 1 < len(lines)
                                  and set(lines[i + 1].strip()) == {"-"}):
        i += 1
    for j in range(i + 2, len(lines)):
        line = lines[j]
        if j + 1 < len(lines) and line.strip() and set(lines[j + 1].strip()) == {"-"}:
            break  # the next section's title
        if line and not line[0].isspace():
            current = [line.rstrip()]
            for n in line.split(" : ")[0].split(","):
                out[n.strip()] = current
        elif current is not None and line.strip():
            current.append(line.rstrip())
    return out


def _dask_class(local, name, summary, **defaults_):
    """A Dask estimator class: ``local``'s parameters (without ``comm``) plus ``client``, with
    ``solver="cocoa"`` by default (a solver that runs over a communicator) and the other
    ``defaults_`` changed."""
    sig = inspect.signature(local.__init__)
    new_defaults = {"solver": "cocoa", **defaults_}
    params = [p.replace(default=new_defaults[p.name]) if p.name in new_defaults else p
              for p in sig.parameters.values() if p.name != "comm"]
    params.append(inspect.Parameter("client", inspect.Parameter.KEYWORD_ONLY, default=None))
    names = [p.name for p in params[1:]]
    defaults = {p.name: p.default for p in params[1:]}

    def __init__(self, *args, **kwargs):
        positional = [p.name for p in params[1:]
                      if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
        if len(args) > len(positional):
            raise TypeError(f"{name} takes at most {len(positional)} positional arguments")
        kwargs.update(zip(positional, args, strict=False))
        unknown = set(kwargs) - set(names)
        if unknown:
            raise TypeError(f"{name} got unexpected parameters {sorted(unknown)}")
        for k in names:
            setattr(self, k, kwargs.get(k, defaults[k]))

    __init__.__signature__ = sig.replace(parameters=params)
    local_docs = _parameter_docs(local.__doc__)
    entries = []
    for k in names:
        if k == "client":
            entries += ["client : distributed.Client, optional",
                        "    The cluster (default: the current client)."]
            continue
        default = "optional" if defaults[k] is None else f"default={defaults[k]!r}"
        entries += local_docs.get(k) or [
            f"{k} : {default}", f"    As for :class:`roofline.learners.{local.__name__}`."]
        if k in new_defaults:
            entries.append(f"    Here the default is ``{new_defaults[k]!r}``.")
    doc = (f"{summary}\n\n    {local.__name__} (roofline.learners) fitted on Dask collections: "
           f"each worker holding partitions is one rank of a Kylix TCP job "
           f"(:func:`roofline.comm.run_on_dask`).  The parameters are those of "
           f":class:`roofline.learners.{local.__name__}` except ``comm``, plus ``client``; "
           f"``solver`` defaults to ``'cocoa'`` (a solver that runs over a communicator)."
           f"\n\n    Parameters\n    ----------\n"
           + "".join(f"    {line}\n" for line in entries))
    return type(name, (_DaskGLM, local), {"__init__": __init__, "_local": local,
                                          "__doc__": doc, "__module__": __name__})


DaskLogisticRegression = _dask_class(LogisticRegression, "DaskLogisticRegression",
                                     "L2-regularised logistic regression on Dask collections.")
DaskLinearSVC = _dask_class(LinearSVC, "DaskLinearSVC",
                            "A linear support vector classifier on Dask collections.",
                            loss="hinge")  # the loss the distributed dual CD solves
DaskRidge = _dask_class(Ridge, "DaskRidge", "Ridge regression on Dask collections.")
