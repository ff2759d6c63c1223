"""Roofline on Dask: the GLM estimators fitted on ``dask.array`` / ``dask.dataframe`` data.

Dask places the workers and the data; Roofline's Kylix TCP network carries the all-reduce
(the pattern of LightGBM's and XGBoost's Dask interfaces).  Needs the ``[dask]`` extra
(``dask[distributed]``), imported when a model is fitted.

Example::

    import dask.array as da
    from distributed import Client, LocalCluster
    from roofline.dask import DaskLogisticRegression

    client = Client(LocalCluster(n_workers=4, threads_per_worker=2))
    X = da.from_array(X_np, chunks=(100_000, -1))     # rows = examples, any number of chunks
    y = da.from_array(y_np, chunks=100_000)
    clf = DaskLogisticRegression(C=1.0, tol=1e-6).fit(X, y)   # one rank per worker with data
    clf.predict(X).compute()

(The source folder is ``dask_/``, so that it never shadows the ``dask`` package itself.)
"""

from importlib.metadata import version as _dist_version

from ._estimators import DaskLinearSVC, DaskLogisticRegression, DaskRidge, partitions_by_worker

__version__ = _dist_version("roofline")  # the installed distribution's version

__all__ = ["DaskLinearSVC", "DaskLogisticRegression", "DaskRidge", "partitions_by_worker"]
