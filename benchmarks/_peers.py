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
    "have_vw",
    "logloss",
    "logloss_of_margins",
    "run_vw",
    "sklearn_C",
    "snapml_regularizer",
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
