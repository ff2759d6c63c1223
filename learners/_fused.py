"""Dispatch of the fused ADAGrad GLM step (gradient ``A*S^T`` and update in one kernel).

.. note::
   This module is a **deliberate, isolated exception** to the layering rule "learners never
   import kernels": the fused step has no gmat primitive yet.  Everything kernel-specific of the
   learners lives here, behind :func:`adagrad_glm_step`, so that the lead can move it behind
   ``roofline.gmat`` without touching the optimizers.
"""

from __future__ import annotations

import numpy as np

from roofline import (
    gmat,
    kernels,  # deliberate exception, see the module docstring
)

__all__ = ["FusedWorkspace", "adagrad_glm_step"]


class FusedWorkspace:
    """Persistent buffers of the fused step; they grow to the largest minibatch and are reused.

    ``mark`` (length ``n_features``) is ``-1`` everywhere between steps (the kernel restores it).
    """

    def __init__(self):
        self.mark = None
        self.capacity = 0
        self.n_allocations = 0
        self._val_dtype = None

    def ensure(self, n_features: int, nnz: int, dtype) -> None:
        if self.mark is None or self.mark.shape[0] != n_features:
            self.mark = np.full(n_features, -1, dtype=np.int32)
            self.n_allocations += 1
        if nnz > self.capacity or self._val_dtype != np.dtype(dtype):
            cap = max(16, 1 << int(np.ceil(np.log2(max(nnz, 1)))))
            self.touched = np.empty(cap, np.int64)
            self.offsets = np.empty(cap + 1, np.int64)
            self.ex = np.empty(cap, np.int32)
            self.tpos = np.empty(cap, np.int32)
            self.val = np.empty(cap, dtype)
            self.capacity, self._val_dtype = cap, np.dtype(dtype)
            self.n_allocations += 1


def adagrad_glm_step(coef, sumsq, X, D, *, lr, eps, l2=0.0, l1=0.0, workspace):
    """One fused ADAGrad step on the feature columns that ``X`` touches.

    Parameters
    ----------
    coef, sumsq : arrays (k, n), Fortran order
        Model and ADAGrad accumulator, updated in place.
    X : CSC matrix (n, m)
        The minibatch.
    D : array (k, m), Fortran order
        Scaled derivatives: the gradient is ``D * X^T`` (plus ``l2 * coef``).
    lr, eps, l2, l1 : float
    workspace : FusedWorkspace

    Returns
    -------
    n_touched : int
        The number of feature columns updated.
    """
    gmat.check_csc(X, "X")
    k, n = coef.shape
    nnz = int(X.indptr[-1])
    workspace.ensure(n, nnz, X.dtype)
    ws = workspace
    nt = kernels.glm_touched_transpose(
        X.indptr, X.indices, X.data, ws.mark, ws.touched, ws.offsets, ws.ex, ws.val,
        ws.tpos,
    )
    kernels.adagrad_glm_update(
        coef.T, sumsq.T, D.T, ws.mark, ws.touched, ws.offsets, ws.ex, ws.val, nt,
        float(lr), float(eps), float(l2), float(l1),
    )
    return int(nt)
