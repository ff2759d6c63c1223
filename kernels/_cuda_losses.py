"""The loss table's GLM form over device arrays: a numba-cuda kernel calling the table's own
scalar function, :func:`._losses.glm_loss_deriv` (no loss is written again for the GPU).

One thread per entry of a ``(k, m)`` array of linear predictors: the weighted derivative into
``D`` and the weighted loss into ``T`` (the caller sums ``T``).  Runs on cupy arrays (through the
CUDA array interface) and, under numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``), on numpy
arrays.  numba.cuda is imported when the kernel is first compiled, never at import time.
"""

from __future__ import annotations

import numpy as np

from . import _cuda_primitives as _cp
from ._losses import glm_loss_deriv

__all__ = ["gpu_glm_loss_deriv"]

_THREADS = 256
_KERNEL: list = []

cuda = None  # numba.cuda, bound on first use (the simulator swaps it inside its kernels)


def _build():
    global cuda
    if _KERNEL:
        return _KERNEL[0]
    cuda = _cp._cuda()

    @cuda.jit
    def loss_deriv_kernel(loss, eta, y, w, has_w, D, T):  # pragma: no cover - device code
        t = cuda.grid(1)
        k = eta.shape[0]
        if t < k * eta.shape[1]:
            j = t // k
            r = t - j * k
            val, d = glm_loss_deriv(loss, np.float64(eta[r, j]), np.float64(y[r, j]))
            wj = np.float64(w[j]) if has_w else 1.0
            D[r, j] = wj * d
            T[r, j] = wj * val

    _KERNEL.append(loss_deriv_kernel)
    return loss_deriv_kernel


def gpu_glm_loss_deriv(loss, eta, y, w, D, T) -> None:
    """``D = w_j dl/deta`` and ``T = w_j l`` over ``(k, m)`` device arrays (the GPU twin of
    :func:`._glm.glm_loss_deriv_cols`).

    Parameters
    ----------
    loss : int
        A code of the loss table (``LOSS_CODES``).
    eta, y : device arrays, shape (k, m)
        Linear predictors and labels (``D`` may be ``eta``).
    w : device array, shape (m,), or None
        The examples' weights.
    D, T : device arrays, shape (k, m)
        Outputs: the weighted derivatives and the weighted losses.
    """
    k, m = eta.shape
    n = k * m
    if n == 0:
        return
    kern = _build()
    has_w = w is not None
    blocks = (n + _THREADS - 1) // _THREADS
    # without weights the kernel never reads w: any one-element vector stands in
    kern[blocks, _THREADS](int(loss), eta, y, w if has_w else D.ravel(order="K")[:1], has_w,
                           D, T)
