"""The fused ADAGrad GLM step: gradient ``A*S^T`` and update in one pass over the touched columns.

BIDMach's end-to-end rooflining: the ``k x n`` gradient is never materialised; the step gathers a
compact gradient for the feature columns the minibatch touches and updates only those.  The
unfused reference (``mult_ast`` then a dense ADAGrad update) is what it is tested against.
"""

from __future__ import annotations

import numpy as np

from roofline import kernels

from ._arrays import check_csc

__all__ = ["FusedWorkspace", "adagrad_glm_step"]


class FusedWorkspace:
    """Buffers of the fused step (touched features, saved accumulators, compact gradient);
    they grow to the largest minibatch and are then reused."""

    def __init__(self):
        self.capacity = 0
        self.n_allocations = 0
        self._key = None

    def ensure(self, nnz: int, k: int, dtype) -> None:
        key = (int(k), np.dtype(dtype))
        if nnz > self.capacity or self._key != key:
            cap = max(16, 1 << int(np.ceil(np.log2(max(nnz, 1)))))
            self.touched = np.empty(cap, np.int64)
            self.sval = np.empty(cap, dtype)
            self.gbuf = np.empty((cap, k), dtype)
            self.capacity, self._key = cap, key
            self.n_allocations += 1


MAX_NNZ = 1 << 24  # touched positions are stored as floats in the accumulator (exact below)
# Below this many updated coefficients the update runs on the calling thread: waking numba's
# pool costs more than the work (measured: a 10k-column update took 4x longer on 2 threads of a
# loaded 2-core machine than on one).
PARALLEL_MIN_WORK = 1 << 18


def adagrad_glm_step(coef, sumsq, X, D, *, lr, eps, l2=0.0, l1=0.0, workspace):
    """One fused ADAGrad step on the feature columns that ``X`` touches.

    Parameters
    ----------
    coef, sumsq : arrays (k, n), Fortran order
        Model and ADAGrad accumulator (all >= 0), updated in place.
    X : CSC matrix (n, m)
        The minibatch, with fewer than ``MAX_NNZ`` (2^24) nonzeros.
    D : array (k, m), Fortran order
        Scaled derivatives: the gradient is ``D * X^T`` (plus ``l2 * coef``).
    lr, eps, l2, l1 : float
    workspace : FusedWorkspace

    Returns
    -------
    n_touched : int
        The number of feature columns updated.
    """
    check_csc(X, "X")
    k, n = coef.shape
    nnz = int(X.indptr[-1])
    if nnz >= MAX_NNZ:
        raise ValueError(f"the fused step takes minibatches of fewer than {MAX_NNZ} nonzeros, "
                         f"got {nnz}: use a smaller batch_size")
    workspace.ensure(nnz, k, X.dtype)
    ws = workspace
    sT = sumsq.T
    nt = kernels.glm_accumulate_touched(X.indptr, X.indices, X.data, D.T, sT, ws.touched,
                                        ws.sval, ws.gbuf)
    update = (kernels.adagrad_glm_update if nt * k >= PARALLEL_MIN_WORK
              else kernels.adagrad_glm_update_serial)
    update(coef.T, sT, ws.touched, ws.sval, ws.gbuf, nt, float(lr), float(eps), float(l2),
           float(l1))
    return int(nt)
