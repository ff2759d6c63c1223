"""The fused ADAGrad GLM step: gradient ``A*S^T`` and update in one pass over the touched columns.

BIDMach's end-to-end rooflining: the ``k x n`` gradient is never materialised; the step gathers a
compact gradient for the feature columns the minibatch touches and updates only those.  The
unfused reference (``mult_ast`` then a dense ADAGrad update) is what it is tested against.
"""

from __future__ import annotations

import math

import numpy as np

from roofline import kernels
from roofline.gmat import check_csc, device_of

from ._losses import GLM_LOSSES, check_labels, loss_code, resolve_loss

__all__ = [
    "MAX_NNZ",
    "FusedWorkspace",
    "adagrad_glm_step",
    "glm_adagrad_online_step",
    "glm_adagrad_step",
]


class FusedWorkspace:
    """Buffers of the fused step (touched features, saved accumulators, compact gradient);
    they grow to the largest minibatch and are then reused."""

    def __init__(self):
        self.capacity = 0
        self.n_allocations = 0
        self._key = None

    def ensure(self, nnz: int, k: int, dtype) -> None:
        """Make the host buffers hold a step of ``nnz`` stored entries and ``k`` outputs.

        The per-entry buffers (``touched``, ``sval``, ``gbuf``) are reallocated, to the next
        power of two of at least 16, only when ``nnz`` exceeds the capacity or ``k`` or the
        dtype changes; the per-output ones (``eta``, ``g0``, ...) with them.

        Parameters
        ----------
        nnz : int
            Stored entries of the minibatch.
        k : int
            Outputs (rows of the model).
        dtype : numpy.dtype
            Value dtype of the model.
        """
        key = (int(k), np.dtype(dtype))
        if nnz > self.capacity or self._key != key:
            cap = max(16, 1 << int(np.ceil(np.log2(max(nnz, 1)))))
            self.touched = np.empty(cap, np.int64)
            self.sval = np.empty(cap, dtype)
            self.gbuf = np.empty((cap, k), dtype)
            self.capacity, self._key = cap, key
            self.n_allocations += 1
            self.eta = np.empty(k, dtype)
            self.g0 = np.empty(k, dtype)
            self.zero_b = np.zeros(k, dtype)
            self.b2 = np.zeros(2, dtype)
            self.no_w = np.empty(0, dtype)
            self.labels = np.empty((0, k), dtype)

    def ensure_gpu(self, n: int, m: int, k: int, dtype) -> None:
        """The GPU buffers: ``gbuf`` (``n * k``) and ``mark`` (``n``) all zero between steps
        (the update kernel clears what the scatter kernel set), ``D`` (``m * k``) and ``acc``.

        Reallocated when ``n``, ``k`` or the dtype change (``D`` also when ``m * k`` outgrows
        it); ``acc`` is zeroed on every call.

        Parameters
        ----------
        n : int
            Features (columns of the model).
        m : int
            Examples of the minibatch.
        k : int
            Outputs (rows of the model).
        dtype : numpy.dtype
            Value dtype of the model.
        """
        import cupy

        dtype = np.dtype(dtype)
        key = (int(n), int(k), dtype)
        if getattr(self, "_gpu_key", None) != key:
            self.g_gbuf = cupy.zeros(int(n) * int(k), dtype)
            self.g_mark = cupy.zeros(int(n), np.int32)
            self.g_acc = cupy.zeros(kernels.GPU_ACC_HEAD + int(k), np.float64)
            self.g_zero_b = cupy.zeros(int(k), dtype)
            self.g_D = cupy.empty(0, dtype)
            self._gpu_key = key
            self.n_allocations += 1
        if self.g_D.shape[0] < m * k:
            self.g_D = cupy.empty(max(int(m) * int(k), 2 * self.g_D.shape[0]), dtype)
            self.n_allocations += 1
        self.g_acc.fill(0)

    def labels_T(self, y, k: int, m: int, dtype):
        """``y`` (``(k, m)`` or ``(m,)``) as an ``(m, k)`` C-contiguous array of ``dtype``: a
        view when the layout allows, else a copy into a reused buffer.

        Parameters
        ----------
        y : numpy.ndarray, shape (k, m) or (m,)
            The labels.
        k : int
            Outputs.
        m : int
            Examples.
        dtype : numpy.dtype
            Value dtype of the result.

        Returns
        -------
        numpy.ndarray, shape (m, k)
            C-contiguous labels; a view of ``y`` or of the workspace's buffer (valid until the
            next call).
        """
        yT = y.reshape(m, 1) if y.ndim == 1 else y.T
        if yT.dtype == dtype and yT.flags.c_contiguous:
            return yT
        if self.labels.shape[0] < m:
            self.labels = np.empty((max(m, 2 * self.labels.shape[0]), k), dtype)
            self.n_allocations += 1
        out = self.labels[:m]
        np.copyto(out, yT, casting="unsafe")
        return out


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
    if device_of(X) == "gpu":
        return _adagrad_glm_step_gpu(coef, sumsq, X, D, lr, eps, l2, l1, workspace)
    nnz = int(X.indptr[-1])
    _check_nnz(nnz)
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


def _check_nnz(nnz: int) -> None:
    if nnz >= MAX_NNZ:
        raise ValueError(f"the fused step takes minibatches of fewer than {MAX_NNZ} nonzeros, "
                         f"got {nnz}: use a smaller batch_size")


def _check_step_args(coef, sumsq, X, loss, y=None, intercept=None, sumsq0=None):
    """The argument checks shared by the CPU and GPU steps (shapes, dtypes, layouts; ``loss``
    and ``y`` when given); returns ``(k, n, m)``."""
    k, n = coef.shape
    m = X.shape[1]
    if loss is not None:
        resolve_loss(loss, allowed=GLM_LOSSES)
    if X.shape[0] != n:
        raise ValueError(f"X has {X.shape[0]} rows (features) but coef has {n} columns")
    if X.dtype != coef.dtype or sumsq.dtype != coef.dtype:
        raise TypeError(f"X ({X.dtype}), coef ({coef.dtype}) and sumsq ({sumsq.dtype}) must "
                        f"share one dtype")
    if sumsq.shape != coef.shape:
        raise ValueError(f"sumsq has shape {sumsq.shape}, expected {coef.shape}")
    if not (coef.flags.f_contiguous and sumsq.flags.f_contiguous):
        raise ValueError("coef and sumsq must be Fortran-ordered (one feature column contiguous)")
    if (intercept is None) != (sumsq0 is None):
        raise ValueError("pass intercept and sumsq0 together (or neither)")
    if y is not None and y.shape not in ((k, m), (m,) if k == 1 else (k, m)):
        raise ValueError(f"y has shape {y.shape}, expected ({k}, {m})")
    return k, n, m


def _prepare_glm_step(coef, sumsq, X, y, loss, w, intercept, sumsq0, workspace):
    """Validate the arguments of a whole GLM step; returns ``(yT, w, weight_sum)``."""
    check_csc(X, "X")
    k, n, m = _check_step_args(coef, sumsq, X, loss, y, intercept, sumsq0)
    nnz = int(X.indptr[-1])
    _check_nnz(nnz)
    workspace.ensure(nnz, k, X.dtype)
    yT = workspace.labels_T(y, k, m, coef.dtype)
    check_labels(yT, loss)
    if w is None:
        return yT, workspace.no_w, float(m)
    if w.shape != (m,):
        raise ValueError(f"w has shape {w.shape}, expected ({m},)")
    wv = w if w.dtype == coef.dtype else w.astype(coef.dtype)
    return yT, wv, float(wv.sum())


def glm_adagrad_step(coef, sumsq, X, y, *, loss, lr, eps, w=None, intercept=None, sumsq0=None,
                     l2=0.0, l1=0.0, workspace):
    """One whole ADAGrad GLM step on a sparse minibatch: forward, loss, gradient and update.

    The forward product ``eta = W X + b`` (``A*S``), the loss and its derivatives, and the
    gradient ``D X^T`` (``A*S^T``) run in one sweep over the minibatch's nonzeros
    (the kernel ``glm_forward_backward``: each example's model rows are gathered once,
    prefetched, and reused from cache for its gradient); the update then touches only the
    feature columns that occur in the minibatch.  No ``k x m`` or ``k x n`` temporary is built.
    The gradient is the weighted *mean* over the minibatch (as the unfused
    ``Optimizer.step``), and L2/L1 act on the touched columns only (lazily, as BIDMach and VW).

    Parameters
    ----------
    coef, sumsq : arrays (k, n), Fortran order
        Model and its ADAGrad accumulator (all >= 0), updated in place.
    X : CSC matrix (n, m)
        The minibatch, fewer than ``FUSED_MAX_NNZ`` nonzeros, dtype of ``coef``.
    y : array (k, m), or (m,) when k == 1
        Labels (checked: see :func:`roofline.glm.check_labels`).
    loss : {"squared", "logistic", "hinge", "squared_hinge"}
        Or an alias (``"linear"`` for ``"squared"``: :data:`roofline.glm.LOSS_ALIASES`).
    lr, eps : float
        Step size and the ADAGrad epsilon (``lr / (sqrt(sumsq) + eps)``).
    w : array (m,), optional
        Example weights.
    intercept, sumsq0 : arrays (k,), optional
        Intercept and its accumulator, updated in place (both or neither).
    l2, l1 : float
        Regularisation weights (mean-loss scale).
    workspace : FusedWorkspace

    Returns
    -------
    loss_sum : float
        Weighted loss of the minibatch *before* the step (``sum_j w_j l_j``).
    weight_sum : float
        ``sum_j w_j`` (``m`` without weights).
    n_touched : int
        The number of feature columns updated.
    """
    if device_of(X) == "gpu":
        return _glm_adagrad_step_gpu(coef, sumsq, X, y, loss, lr, eps, w, intercept, sumsq0,
                                     l2, l1, workspace)
    yT, wv, weight_sum = _prepare_glm_step(coef, sumsq, X, y, loss, w, intercept, sumsq0,
                                           workspace)
    k = coef.shape[0]
    ws = workspace
    scale = 1.0 / weight_sum if weight_sum > 0 else 0.0
    b = ws.zero_b if intercept is None else intercept
    sT = sumsq.T
    code = loss_code(loss)
    if k == 1:
        nt, loss_sum, g0 = kernels.glm_forward_backward_vec(
            X.indptr, X.indices, X.data, coef[0], b[0], yT[:, 0], wv, scale, code, sumsq[0],
            ws.touched, ws.sval, ws.gbuf[:, 0])
        ws.g0[0] = g0
    else:
        nt, loss_sum = kernels.glm_forward_backward(
            X.indptr, X.indices, X.data, coef.T, b, yT, wv, scale, code, sT, ws.touched,
            ws.sval, ws.gbuf, ws.g0, ws.eta)
    if intercept is not None:
        if k == 1:  # scalar arithmetic: five ufunc calls on 1-element arrays cost more
            g = float(ws.g0[0])
            s0 = float(sumsq0[0]) + g * g
            sumsq0[0] = s0
            intercept[0] -= lr * g / (math.sqrt(s0) + eps)
        else:
            g0 = ws.g0
            sumsq0 += g0 * g0
            intercept -= lr * g0 / (np.sqrt(sumsq0) + eps)
    update = (kernels.adagrad_glm_update if nt * k >= PARALLEL_MIN_WORK
              else kernels.adagrad_glm_update_serial)
    update(coef.T, sT, ws.touched, ws.sval, ws.gbuf, nt, float(lr), float(eps), float(l2),
           float(l1))
    return float(loss_sum), weight_sum, int(nt)


def glm_adagrad_online_step(coef, sumsq, X, y, *, loss, lr, eps, w=None, intercept=None,
                            sumsq0=None, l2=0.0, l1=0.0, workspace):
    """Online ADAGrad over a sparse minibatch: one update per example, in order (VW's learner).

    Each example's prediction uses the model updated by the examples before it; its update
    touches only its own nonzero features (and the intercept), right after their rows were
    gathered for the prediction, so every model row is fetched from memory once per example.
    The gradient of example ``j`` is ``w_j dl/deta_j x_j`` (not divided by the minibatch's
    weight, unlike :func:`glm_adagrad_step`, so ``lr`` is a per-example step), plus
    ``l2 * coef`` on its features; L1 is a proximal step on them.

    Parameters
    ----------
    coef, sumsq, X, y, loss, lr, eps, w, intercept, sumsq0, l2, l1, workspace
        As in :func:`glm_adagrad_step`.

    Returns
    -------
    loss_sum : float
        ``sum_j w_j l_j``, each example's loss taken before its own update (VW's progressive
        validation loss).
    weight_sum : float
        ``sum_j w_j`` (``m`` without weights).
    """
    if device_of(X) == "gpu":
        raise TypeError("glm_adagrad_online_step runs on the CPU only (Vowpal Wabbit's "
                        "per-example updates are sequential); on the GPU use the minibatch "
                        "step, glm_adagrad_step (ADAGrad(online=False))")
    yT, wv, weight_sum = _prepare_glm_step(coef, sumsq, X, y, loss, w, intercept, sumsq0,
                                           workspace)
    k = coef.shape[0]
    ws = workspace
    code = loss_code(loss)
    fit = intercept is not None
    if k == 1:
        b2 = ws.b2
        if fit:
            b2[0], b2[1] = intercept[0], sumsq0[0]
        else:
            b2[:] = 0
        loss_sum = kernels.glm_adagrad_online_vec(
            X.indptr, X.indices, X.data, coef[0], sumsq[0], b2, fit, yT[:, 0], wv, code,
            float(lr), float(eps), float(l2), float(l1))
        if fit:
            intercept[0], sumsq0[0] = b2[0], b2[1]
    else:
        b = intercept if fit else ws.zero_b
        s0 = sumsq0 if fit else ws.g0
        loss_sum = kernels.glm_adagrad_online(
            X.indptr, X.indices, X.data, coef.T, sumsq.T, b, s0, fit, yT, wv, code, float(lr),
            float(eps), float(l2), float(l1), ws.eta)
    return float(loss_sum), weight_sum


# ---------------------------------------------------------------------------------------------
# the GPU step (CUDA kernels: roofline.kernels.gpu_glm_step)


def _on_gpu(arrays) -> None:
    for name, a in arrays:
        if a is not None and device_of(a) != "gpu":
            raise TypeError(f"{name} is on the CPU but the minibatch X is on the GPU: move the "
                            f"model and its state with the learner's device option, or the "
                            f"data with gmat.to_device")


def _gpu_vector(a, m, dtype, name):
    """``a`` as a contiguous cupy vector of ``dtype`` (a copy only when needed)."""
    if a.shape != (m,):
        raise ValueError(f"{name} has shape {a.shape}, expected ({m},)")
    if a.dtype != dtype or not a.flags.c_contiguous:
        import cupy

        a = cupy.ascontiguousarray(a, dtype=dtype)
    return a


def _gpu_indices(X) -> int:
    """Check a device minibatch's index dtype; returns its nonzeros' upper bound (the kernels
    stop at ``indptr[m]``; no device round trip)."""
    if X.indices.dtype != np.int32 or X.indptr.dtype != np.int32:
        raise TypeError(f"X must have int32 indices on the GPU, got {X.indices.dtype}")
    nnz = int(X.data.shape[0])
    _check_nnz(nnz)
    return nnz


def _glm_adagrad_step_gpu(coef, sumsq, X, y, loss, lr, eps, w, intercept, sumsq0, l2, l1,
                          workspace):
    """:func:`glm_adagrad_step` on a cupyx CSC minibatch: three CUDA launches and one
    device-to-host copy of the sums (the labels are checked inside the forward kernel; a bad
    label leaves the model unchanged and raises here)."""
    import cupy

    _on_gpu((("coef", coef), ("sumsq", sumsq), ("y", y), ("w", w), ("intercept", intercept),
             ("sumsq0", sumsq0)))
    k, n, m = _check_step_args(coef, sumsq, X, loss, y, intercept, sumsq0)
    nnz = _gpu_indices(X)
    dt = coef.dtype
    yk = y.reshape(k, m) if y.ndim == 1 else y
    if yk.dtype != dt or not yk.flags.f_contiguous:
        yk = cupy.asfortranarray(yk, dtype=dt)
    wv = None if w is None else _gpu_vector(w, m, dt, "w")
    workspace.ensure_gpu(n, m, k, dt)
    ws = workspace
    kernels.gpu_glm_step(X.indptr, X.indices, X.data, coef, intercept, yk, wv, m, k,
                         loss_code(loss), ws.g_D, ws.g_gbuf, ws.g_mark, ws.g_acc,
                         sumsq, sumsq0, float(lr), float(eps), float(l2), float(l1), nnz,
                         ws.g_zero_b)
    acc = ws.g_acc[: kernels.GPU_ACC_HEAD].get()
    if acc[2] != 0:
        check_labels(y, loss)  # raises with the range of the labels
        raise ValueError(f"y contains labels the {loss} loss cannot take")
    return float(acc[0]), float(acc[1]), int(acc[3])


def _adagrad_glm_step_gpu(coef, sumsq, X, D, lr, eps, l2, l1, workspace):
    """:func:`adagrad_glm_step` on a cupyx CSC minibatch (two CUDA launches)."""
    import cupy

    _on_gpu((("coef", coef), ("sumsq", sumsq), ("D", D)))
    k, n, m = _check_step_args(coef, sumsq, X, None)
    if D.shape != (k, m):
        raise ValueError(f"D has shape {D.shape}, expected ({k}, {m})")
    if D.dtype != coef.dtype or not D.flags.f_contiguous:
        D = cupy.asfortranarray(D, dtype=coef.dtype)
    nnz = _gpu_indices(X)
    workspace.ensure_gpu(n, 0, k, coef.dtype)
    ws = workspace
    kernels.gpu_glm_scatter_update(X.indptr, X.indices, X.data, D, m, k, ws.g_gbuf, ws.g_mark,
                                   ws.g_acc, coef, sumsq, float(lr), float(eps), float(l2),
                                   float(l1), nnz)
    return int(ws.g_acc[3].get())
