"""``solver="auto"``: which GLM solver to run on a problem, by a rule measured on
``benchmarks/glm_suite.py``.

The rule (:func:`choose_solver`)
--------------------------------
1. ``penalty="l1"``: ``scd`` (primal coordinate descent, the only L1 solver).
2. ``loss="hinge"`` (not differentiable): ``scd`` (the dual, SDCA; with an intercept its
   primal).
3. ``loss="squared"`` with the L2 penalty and at most :data:`CHOLESKY_AUTO_FEATURES`
   features: ``cholesky`` (the normal equations, exact; one pass and a ``d x d``
   factorisation).
4. A smooth loss (``squared``, ``logistic``, ``squared_hinge``) with the L2 penalty:
   ``newton`` (trust-region Newton-CG), except on large sparse data that is strongly
   regularised, where the dual coordinate descent ``scd`` is used (see
   :data:`DUAL_MIN_EXAMPLES`, :data:`DUAL_MAX_NNZ_PER_EXAMPLE`, :data:`DUAL_MAX_DENSITY`,
   :data:`DUAL_MAX_C`).

What the rule rests on: ``python benchmarks/glm_suite.py --criteo-1m``, 2-core VM,
2026-11-25, seconds to a relative suboptimality of 1e-4.  The table is in
``docs/benchmarks.md`` ("GLM suite").

* ``newton`` was the fastest Roofline solver on the small and dense problems: breast
  cancer, digits, dense correlated, wild scales, 1% positives and text-like n << d.  The
  dual ``scd`` took 2-10x longer on them, or needed the stall switch.
* Wild scales: ``newton`` took 0.04-0.07 s; no scikit-learn solver reached 1e-4 within 20 s.
* ``cholesky`` solved ridge with 11 and 101 features in 0.2-0.6x Newton's time.
* On the Criteo-like and hashed data (sparse, ~40 values per example) the dual ``scd`` beat
  ``newton`` 2-4x from 100,000 examples at ``C <= 1``.  At 10,000 examples the two were even.
  At ``C = 100`` the dual failed on Criteo-like 100k (Newton 3.0 s) but was the faster on
  hashed 2^22 data: the rule keeps ``C <= 1``.
* ``tpa-scd``, ``cocoa``, ``hcocoa`` and ``pure-block`` were never the fastest on this 2-core
  machine.  ``auto`` does not pick them; they remain for many cores and for distributed fits
  (``comm=``).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = [
    "CHOLESKY_AUTO_FEATURES",
    "DUAL_MAX_C",
    "DUAL_MAX_DENSITY",
    "DUAL_MAX_NNZ_PER_EXAMPLE",
    "DUAL_MIN_EXAMPLES",
    "choose_solver",
]

#: The dual ``scd`` is chosen for a smooth loss only from this many examples on ...
DUAL_MIN_EXAMPLES = 50_000
#: ... with at most this many stored values per example (sparse, one-hot / hashed data) ...
DUAL_MAX_NNZ_PER_EXAMPLE = 100
#: ... filling at most this fraction of ``X`` (dense data with few features, such as the
#: suite's "wild scales" 50k x 51 and "1% positives" 100k x 51, are Newton's: the dual took
#: 10x longer there) ...
DUAL_MAX_DENSITY = 0.01
#: ... and at most this ``C = 1 / (alpha n)`` (scikit-learn's scaling): strong regularisation.
DUAL_MAX_C = 1.0

#: ``cholesky`` is chosen for ridge problems with at most this many features: its Gram
#: matrix costs ``n d^2`` multiply-adds in BLAS, Newton ~20 Hessian-vector passes of ``n d``
#: memory-bound ones; on the suite's dense problems (d = 11 and 101) it was 5-10x faster.
CHOLESKY_AUTO_FEATURES = 1024

_SMOOTH = ("squared", "logistic", "squared_hinge")


def choose_solver(X, y=None, *, loss, penalty="l2", alpha, fit_intercept=True, n_jobs=1,
                  device=None, comm=None):
    """The solver ``solver="auto"`` runs on this problem, and why.

    Parameters
    ----------
    X : CSC matrix or ndarray, shape (n_features, n_examples)
        The training data in the project layout (only its shape and number of stored values
        are read).
    y : array, optional
        Unused (the rule does not depend on the labels); accepted for a uniform signature.
    loss : {"squared", "logistic", "hinge", "squared_hinge"}
    penalty : {"l2", "l1"}
    alpha : float
        The regularisation strength of the mean-loss objective.
    fit_intercept : bool
        An unregularised intercept (the dual cannot keep one: with it, ``scd`` runs its primal,
        which the rule avoids for smooth losses).
    n_jobs : int
        Threads available (not used by the current rule: the threaded solvers were never the
        fastest in the measurements).
    device : str, optional
        Unused (every solver here runs on the CPU).
    comm : roofline.comm.Communicator, optional
        A distributed fit (each rank holding examples): ``"cocoa"``.

    Returns
    -------
    solver : str
        ``"newton"``, ``"cholesky"`` or ``"scd"`` (``"cocoa"`` with ``comm``).
    reason : str
        One sentence, for the log line and ``solver_``'s documentation.
    """
    if penalty not in ("l2", "l1"):
        raise ValueError(f"penalty must be 'l2' or 'l1', got {penalty!r}")
    if loss not in _SMOOTH + ("hinge",):
        raise ValueError(f"loss must be one of {_SMOOTH + ('hinge',)}, got {loss!r}")
    if comm is not None:
        return "cocoa", "comm= is given: CoCoA+ over the ranks' examples"
    if penalty == "l1":
        return "scd", "penalty='l1': primal coordinate descent is the L1 solver"
    if loss == "hinge":
        return "scd", "loss='hinge' is not differentiable: dual coordinate descent (SDCA)"
    d, n = X.shape
    if loss == "squared" and d <= CHOLESKY_AUTO_FEATURES:
        return "cholesky", (f"ridge with {d} features (at most {CHOLESKY_AUTO_FEATURES}): the "
                            "normal equations, solved exactly by one Cholesky factorisation")
    nnz = X.nnz if sp.issparse(X) else int(np.count_nonzero(X))
    per_example = nnz / max(n, 1)
    C = 1.0 / (float(alpha) * max(n, 1))
    if (not fit_intercept and n >= DUAL_MIN_EXAMPLES and per_example <= DUAL_MAX_NNZ_PER_EXAMPLE
            and per_example <= DUAL_MAX_DENSITY * d and C <= DUAL_MAX_C
            and loss != "squared_hinge"):
        return "scd", (f"{n} sparse examples ({per_example:.0f} values each) with strong "
                       f"regularisation (C={C:.3g}): dual coordinate descent needs few sweeps")
    return "newton", (f"smooth loss with an L2 penalty ({n} examples, {d} features, C={C:.3g}): "
                      "trust-region Newton-CG is insensitive to the features' scaling and "
                      "correlation")
