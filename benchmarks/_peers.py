"""What the benchmarks share about their peers: losses and metrics, the regularisation
conversions, and the Vowpal Wabbit harness.

Imported as ``_peers`` by the scripts in ``benchmarks/`` (run as ``python benchmarks/x.py``) and
by the asv suite in ``benchmarks/asv_bench/`` (asv puts ``benchmarks/`` on ``sys.path``).
"""

from __future__ import annotations

import os
import time

import numpy as np

# The one place that converts regularisations (see their docstrings for each peer's scaling).
from roofline.glm import alpha_from_peer, alpha_to_peer

__all__ = [
    "alpha_of_sklearn_C",
    "auc",
    "dask_glm_objective",
    "dask_ml_C",
    "dask_ml_arrays",
    "have_vw",
    "l2_logistic_objective",
    "logloss",
    "logloss_of_margins",
    "run_vw",
    "sklearn_C",
    "snapml_regularizer",
    "spark_dataframe",
    "spark_reg_param",
    "why_no_dask_ml",
    "why_no_pyspark",
    "write_vw",
]


# ---------------------------------------------------------------------------------------------
# losses and metrics


def logloss(p, y):
    """Mean logistic loss of probabilities ``p`` for labels ``y`` in {0, 1} (clipped at 1e-15)."""
    p = np.clip(np.asarray(p, np.float64), 1e-15, 1 - 1e-15)
    return float(np.mean(-(y * np.log(p) + (1 - y) * np.log1p(-p))))


def logloss_of_margins(z, y):
    """Mean logistic loss ``log(1 + exp(-y z))`` of margins ``z``; labels in {0, 1} or {-1, 1}."""
    ys = np.where(np.asarray(y) > 0, 1.0, -1.0)
    return float(np.logaddexp(0.0, -ys * np.asarray(z, np.float64)).mean())


def auc(z, y):
    """Area under the ROC curve of scores ``z`` (scikit-learn's ``roc_auc_score``)."""
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, z))


# ---------------------------------------------------------------------------------------------
# regularisation: our alpha (mean loss + alpha ||w||^2 / 2) and the peers' parameters


def sklearn_C(alpha, n_examples):
    """scikit-learn's ``C`` (``LogisticRegression``, liblinear) for our ``alpha``."""
    return alpha_to_peer("C", alpha, n_examples)


def alpha_of_sklearn_C(C, n_examples):
    """Our ``alpha`` for scikit-learn's ``C``."""
    return alpha_from_peer("C", C, n_examples)


def snapml_regularizer(alpha, n_examples):
    """snapml's ``regularizer`` for our ``alpha``."""
    return alpha_to_peer("snapml", alpha, n_examples)


# ---------------------------------------------------------------------------------------------
# Vowpal Wabbit (the optional ``vowpalwabbit`` package: never a project dependency)


def have_vw():
    """Whether the ``vowpalwabbit`` package is importable."""
    try:
        import vowpalwabbit  # noqa: F401
    except ImportError:
        return False
    return True


def write_vw(path, X, y):
    """Write examples as VW text: ``label |f idx:val ...`` (labels -1/1; integer feature names
    hash to themselves).

    Parameters
    ----------
    path : str
    X : CSC matrix, shape (n_features, n_examples)
        Examples as columns (the project layout; a CSR matrix of examples as rows has the same
        arrays and works too).
    y : array, shape (n_examples,)
        Labels in {0, 1} or {-1, 1}.
    """
    ip, ix, v = X.indptr, X.indices, X.data
    with open(path, "w") as f:
        lines = []
        for j in range(len(ip) - 1):
            s, e = ip[j], ip[j + 1]
            feats = " ".join(f"{i}:{x:g}" for i, x in zip(ix[s:e], v[s:e], strict=True))
            lines.append(f"{1 if y[j] > 0 else -1} |f {feats}\n")
            if len(lines) >= 50_000:
                f.writelines(lines)
                lines = []
        f.writelines(lines)


def run_vw(train, test, tmp, *, bits, passes):
    """Train VW's logistic regression on the VW file ``train``, predict the VW file ``test``.

    Parameters
    ----------
    train, test : str
        Files written by :func:`write_vw`.
    tmp : str
        Directory for the model, the cache (``passes > 1``) and the predictions.
    bits : int
        Hash bits (``-b``).
    passes : int
        Passes over the training file (``--passes``, from a cache, no hold-out).

    Returns
    -------
    (seconds, margins) : (float, ndarray)
        Training time (VW's own parsing of the text included: it is part of its normal work) and
        the raw predictions (margins) on ``test``.
    """
    from vowpalwabbit import Workspace

    model = os.path.join(tmp, f"model-{passes}.vw")
    preds = os.path.join(tmp, f"preds-{passes}.txt")
    extra = (f" --passes {passes} -c -k --cache_file {os.path.join(tmp, 'train.cache')} "
             "--holdout_off" if passes > 1 else "")
    t = time.perf_counter()
    ws = Workspace(f"-d {train} --loss_function logistic -b {bits} --quiet -f {model}{extra}")
    ws.finish()  # the parser (training) ran in the constructor: -d is given
    dt = time.perf_counter() - t
    ws = Workspace(f"-t -i {model} -d {test} --quiet -p {preds}")
    ws.finish()
    return dt, np.atleast_1d(np.loadtxt(preds))


# ---------------------------------------------------------------------------------------------
# Apache Spark MLlib and dask-ml (optional packages: never project dependencies)


def l2_logistic_objective(X, y, w, b, alpha, *, regularize_intercept=False):
    """``mean_i log(1 + exp(-y_i (x_i^T w + b))) + alpha (||w||^2 [+ b^2]) / 2``.

    Roofline's objective (``roofline.glm``: the intercept unregularised), or, with
    ``regularize_intercept``, dask-glm's (the intercept a regularised column of ones).

    Parameters
    ----------
    X : CSC matrix or ndarray, shape (n_features, n_examples)
        Examples as columns (the project layout).
    y : array, shape (n_examples,)
        Labels in {0, 1} or {-1, 1}.
    w : array, shape (n_features,)
    b : float
    alpha : float
    regularize_intercept : bool
    """
    ys = np.where(np.asarray(y) > 0, 1.0, -1.0)
    z = np.asarray(X.T @ np.asarray(w, np.float64)).ravel() + float(b)
    reg = float(np.dot(w, w)) + (float(b) ** 2 if regularize_intercept else 0.0)
    return float(np.logaddexp(0.0, -ys * z).mean() + 0.5 * alpha * reg)


def why_no_pyspark():
    """``None`` where pyspark and a Java runtime are usable, else the reason (a sentence)."""
    import shutil

    try:
        import pyspark  # noqa: F401
    except ImportError as e:
        return f"pyspark is not importable ({e}); pip install pyspark"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "no Java runtime (java not on PATH, JAVA_HOME unset)"
    return None


def why_no_dask_ml():
    """``None`` where dask-ml (with dask-glm and distributed) imports, else the reason."""
    try:
        import dask_glm  # noqa: F401
        import dask_ml.linear_model  # noqa: F401
        import distributed  # noqa: F401
    except ImportError as e:
        return f"dask-ml is not importable ({e}); pip install dask-ml 'dask[distributed]'"
    return None


def spark_reg_param(alpha):
    """Spark MLlib ``LogisticRegression(regParam=)`` for our ``alpha``.

    With ``elasticNetParam=0`` and ``standardization=False`` Spark minimises
    ``(1/n) sum_i l_i + regParam ||w||^2 / 2`` with the intercept unregularised: our objective
    with ``regParam = alpha`` (``= 1 / (C n)`` for scikit-learn's ``C``).  With
    ``standardization=True`` (Spark's default) the penalty falls on the standardised
    coefficients: a different problem.
    """
    return float(alpha)


def dask_ml_C(alpha, n_examples):
    """dask-ml ``LogisticRegression(C=)`` for our ``alpha`` (same formula as scikit-learn's).

    dask-ml passes ``lamduh = 1 / C`` to dask-glm, whose ``lbfgs``, ``admm`` and
    ``proximal_grad`` minimise the *summed* loss ``sum_i l_i + lamduh ||beta||^2 / 2``
    (``dask_glm.families.Logistic.loglike`` sums, ``regularizers.L2.f`` is ``||beta||^2 / 2``),
    so ``C = 1 / (alpha n)``.  Two differences remain: ``beta`` includes the intercept (the
    column of ones that ``fit_intercept`` appends is regularised like any feature), and by
    default (``solver_kwargs={"normalize": True}``) dask-glm standardises the columns first,
    so the penalty falls on the standardised coefficients; pass ``normalize=False`` for the
    problem written here.  Its ``newton`` and ``gradient_descent`` solvers drop the
    regulariser altogether (they solve the unregularised problem).
    """
    return alpha_to_peer("C", alpha, n_examples)


def dask_glm_objective(Xd, yd, beta, alpha):
    """dask-glm's own objective (``Logistic.pointwise_loss + lamduh * L2.f``, ``lamduh = 1 / C``
    with ``C = dask_ml_C(alpha, n)``) at ``beta``, divided by ``n``: for checking the mapping.

    ``Xd``: dask array, examples as rows, the column of ones last; ``beta`` its coefficients.
    """
    from dask_glm.families import Logistic
    from dask_glm.regularizers import L2

    n = Xd.shape[0]
    lamduh = 1.0 / dask_ml_C(alpha, n)
    f = L2().add_reg_f(Logistic.pointwise_loss, lamduh)
    return float(np.asarray(f(np.asarray(beta, np.float64), Xd, yd).compute())) / n


def dask_ml_arrays(client, X, y, n_chunks):
    """``(Xd, yd)`` for dask-ml: examples as rows in ``n_chunks`` row chunks, a column of ones
    appended (dask-ml's ``fit_intercept`` cannot append it to sparse chunks), persisted on the
    client's workers.  Sparse data become ``sparse.COO`` chunks (dask-glm's dot products need
    pydata ``sparse``; scipy.sparse chunks fail in ``tensordot``).

    Parameters
    ----------
    client : distributed.Client
    X : CSC matrix or ndarray, shape (n_features, n_examples)
    y : array, shape (n_examples,)
    n_chunks : int
    """
    import dask.array as da
    import scipy.sparse as sp

    d, n = X.shape
    rows = -(-n // n_chunks)
    if sp.issparse(X):
        import sparse

        Xr = sp.hstack([X.T.tocsr(), sp.csr_matrix(np.ones((n, 1)))], format="csr")
        Xd = da.from_array(sparse.COO.from_scipy_sparse(Xr), chunks=(rows, d + 1),
                           asarray=False)
    else:
        Xd = da.from_array(np.hstack([np.asarray(X).T, np.ones((n, 1))]), chunks=(rows, d + 1))
    yd = da.from_array(np.asarray(y, np.float64), chunks=(rows,))
    Xd, yd = client.persist([Xd, yd])
    from distributed import wait

    wait([Xd, yd])
    return Xd, yd


def spark_dataframe(spark, X, y, n_partitions, tmp):
    """A cached Spark DataFrame (``label``, ``features``) of the examples, counted.

    Sparse data go through a libsvm file (``SparseVector`` rows), dense data through Arrow
    (``DenseVector`` rows).

    Parameters
    ----------
    spark : pyspark.sql.SparkSession
    X : CSC matrix or ndarray, shape (n_features, n_examples)
    y : array, shape (n_examples,)
    n_partitions : int
    tmp : str
        Directory for the libsvm file.
    """
    import scipy.sparse as sp

    d, n = X.shape
    if sp.issparse(X):
        from sklearn.datasets import dump_svmlight_file

        path = os.path.join(tmp, f"spark-{d}x{n}.svm")
        if not os.path.exists(path):
            dump_svmlight_file(X.T.tocsr(), np.asarray(y), path, zero_based=False)
        df = spark.read.format("libsvm").option("numFeatures", d).load(path)
    else:
        import pandas as pd
        from pyspark.ml.functions import array_to_vector

        spark.conf.set("spark.sql.execution.arrow.pyspark.enabled", "true")
        pdf = pd.DataFrame({"label": np.asarray(y, np.float64), "a": list(np.asarray(X).T)})
        df = spark.createDataFrame(pdf).select("label", array_to_vector("a").alias("features"))
    df = df.repartition(n_partitions).cache()
    df.count()
    return df
