"""asv benchmarks of the fused ADAGrad GLM steps (issue 5), in roofline units and peer ratios.

``track_ns_per_nonzero`` is the time of one pass of whole-step fused ADAGrad (minibatches of
1024) or of online (per-example) ADAGrad over Criteo-like data, per nonzero;
``track_x_sgdclassifier`` is the throughput over scikit-learn's
``SGDClassifier(loss="log_loss")`` on the same rows, measured side by side in the same process
(the issue's target is 3x).  Data: 200k examples from
``make_criteo_like_matrix`` (hashed Zipf fields, 2^20 features, ~35 nnz per example).
"""

import warnings

import numpy as np

from roofline import glm, gmat
from roofline.datasources import make_criteo_like_matrix

N_EXAMPLES = 200_000


def _pass(X, y, batch, online):
    """One pass of the fused (or online) ADAGrad logistic step over ``X``, from zeros."""
    n, m = X.shape
    step = glm.glm_adagrad_online_step if online else glm.glm_adagrad_step
    batches = [(gmat.slice_columns(X, s, min(s + batch, m)), y[s:min(s + batch, m)])
               for s in range(0, m, batch)]

    def run():
        coef = np.zeros((1, n), X.dtype, order="F")
        sumsq = np.full((1, n), 1e-8, X.dtype, order="F")
        b, s0 = np.zeros(1, X.dtype), np.full(1, 1e-8, X.dtype)
        ws = glm.FusedWorkspace()
        for Xb, yb in batches:
            step(coef, sumsq, Xb, yb, loss="logistic", lr=0.1 if online else 0.2, eps=1e-8,
                 intercept=b, sumsq0=s0, workspace=ws)

    return run


class GLMSteps:
    params = ["fused", "online"]
    param_names = ["step"]
    timeout = 600

    def setup_cache(self):
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.linear_model import SGDClassifier

        X, y = make_criteo_like_matrix(N_EXAMPLES, seed=0, n_bits=20, dtype=np.float32)
        X = gmat.check_csc(X.tocsc(), "X")
        y = y.astype(np.float32)
        R = X.T.tocsr().astype(np.float64)
        out = {}
        for name, batch, online in (("fused", 1024, False), ("online", 8192, True)):
            out[name] = gmat.best_time(_pass(X, y, batch, online), 3)

        def sk():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                SGDClassifier(loss="log_loss", alpha=1e-4, max_iter=1, tol=None, shuffle=False,
                              random_state=0).fit(R, y)

        out["sgdclassifier"] = gmat.best_time(sk, 3)
        out["nnz"] = int(X.nnz)
        return out

    setup_cache.timeout = 900

    def track_ns_per_nonzero(self, res, step):
        return res[step] / res["nnz"] * 1e9

    track_ns_per_nonzero.unit = "ns/nonzero"

    def track_x_sgdclassifier(self, res, step):
        return res["sgdclassifier"] / res[step]

    track_x_sgdclassifier.unit = "x SGDClassifier"
