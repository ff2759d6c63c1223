"""CUDA kernels of the fused ADAGrad GLM step (cupy ``RawModule``), the GPU twin of
:func:`._glm.glm_forward_backward` + :func:`._glm.adagrad_glm_update`.

A step is three launches over a CSC minibatch (``n x m``, ``k`` outputs; the model ``coef`` is
``k x n`` in Fortran order, so a feature's ``k`` coefficients are contiguous):

1. ``glm_forward`` -- one thread per (example, output): ``eta = b + W x_j``, the loss and its
   derivative ``w_j dl/deta`` (kept in ``D``), the sums of the weighted losses, of the weights and
   of the derivatives (the intercept's gradient) in float64, and a flag for labels the loss
   cannot take;
2. ``glm_scatter`` -- one thread per nonzero: ``gbuf[f] += scale * D[j] * x`` (atomic adds into a
   dense, all-zero ``n x k`` buffer) and a mark on the feature; block 0 also steps the intercept;
3. ``glm_update`` -- one thread per nonzero: the one thread that takes a feature's mark (atomic
   exchange) applies the ADAGrad step (L2 on the touched column, L1 proximal) to the feature's
   ``k`` coefficients and clears its ``gbuf`` entries, so the buffers are all zero again.

The gradient is the weighted *mean* (``scale = 1 / sum_j w_j``, computed on the device), L1/L2
act on the touched columns only, as on the CPU.  With a label flag raised the scatter and update
kernels return at once: the model is left unchanged and the caller raises.  Atomic float adds make
the summation order, and so the last bits of the result, vary from run to run.

cupy is imported when a kernel is first compiled, never at import time.
"""

from __future__ import annotations

import numpy as np

from ._losses import LABEL_HI, LABEL_LO, LOSS_TABLE

__all__ = ["GPU_ACC_HEAD", "gpu_glm_scatter_update", "gpu_glm_step", "gpu_loss_eval"]

#: ``acc`` holds ``[loss_sum, weight_sum, bad_label_flag, n_touched]`` then the ``k`` intercept
#: gradient sums (all float64).
GPU_ACC_HEAD = 4

_THREADS = 256


def _c_double(v) -> str:
    # an infinite bound as +-DBL_MAX (the non-finite labels are rejected before the range test)
    return repr(float(np.clip(v, -np.finfo(np.float64).max, np.finfo(np.float64).max)))


# the loss codes and label ranges of the one table, for the CUDA source
_LOSS_DEFINES = (
    "".join(f"#define {rec.name.upper()} {rec.code}\n" for rec in LOSS_TABLE)
    + "__constant__ double LABEL_LO[] = {" + ", ".join(map(_c_double, LABEL_LO)) + "};\n"
    + "__constant__ double LABEL_HI[] = {" + ", ".join(map(_c_double, LABEL_HI)) + "};\n"
)

_SRC = r"""
typedef REAL real;

__device__ __forceinline__ double warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}

// loss and derivative in double: the GLM form of _losses.glm_loss_deriv (codes LOSS_CODES)
__device__ __forceinline__ double loss_deriv(int loss, double eta, double y, double* d) {
    if (loss == SQUARED) { double r = eta - y; *d = r; return 0.5 * r * r; }
    if (loss == LOGISTIC) {
        if (eta > 0.0) { double z = exp(-eta); *d = 1.0 / (1.0 + z) - y;
                         return eta + log1p(z) - y * eta; }
        double z = exp(eta); *d = z / (1.0 + z) - y; return log1p(z) - y * eta;
    }
    double s = y > 0.0 ? 1.0 : -1.0;
    double t = 1.0 - s * eta;
    if (t <= 0.0) { *d = 0.0; return 0.0; }
    if (loss == HINGE) { *d = -s; return t; }
    *d = -2.0 * s * t; return t * t;
}

// _losses.glm_bad_label: outside the loss's label range (the table's LABEL_LO / LABEL_HI)
__device__ __forceinline__ bool bad_label(int loss, double y) {
    if (!(fabs(y) <= 1.7976931348623157e308)) return true;  // NaN or infinite
    return y < LABEL_LO[loss] || y > LABEL_HI[loss];
}

// the loss functions over arrays: their test against _losses.glm_loss_deriv / glm_bad_label
extern "C" __global__ void glm_loss_eval(int loss, int n, const double* eta, const double* y,
                                         double* l, double* d, int* bad)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    l[i] = loss_deriv(loss, eta[i], y[i], d + i);
    bad[i] = bad_label(loss, y[i]) ? 1 : 0;
}

// the example (column) holding nonzero p: the last j with indptr[j] <= p
__device__ __forceinline__ int column_of(const int* indptr, int m, int p) {
    int lo = 0, hi = m;  // indptr[lo] <= p < indptr[hi]
    while (hi - lo > 1) {
        int mid = (lo + hi) >> 1;
        if (indptr[mid] <= p) lo = mid; else hi = mid;
    }
    return lo;
}

extern "C" __global__ void glm_forward(
    const int* indptr, const int* indices, const real* data, const real* coef, const real* b,
    const real* y, const real* w, int has_w, int m, int k, int loss, real* D, double* acc)
{
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    double lw = 0.0, ww = 0.0, dd = 0.0;
    int r = 0;
    if (t < (long long)m * k) {
        int j = (int)(t / k);
        r = (int)(t - (long long)j * k);
        double eta = (double)b[r];
        for (int p = indptr[j]; p < indptr[j + 1]; ++p)
            eta += (double)data[p] * (double)coef[(long long)indices[p] * k + r];
        double yj = (double)y[t];
        if (bad_label(loss, yj)) atomicAdd(acc + 2, 1.0);
        double wj = has_w ? (double)w[j] : 1.0;
        double d;
        double l = loss_deriv(loss, eta, yj, &d);
        lw = wj * l;
        dd = wj * d;
        if (r == 0) ww = wj;
        D[t] = (real)dd;
    }
    lw = warp_sum(lw);
    ww = warp_sum(ww);
    if ((threadIdx.x & 31) == 0) { atomicAdd(acc, lw); atomicAdd(acc + 1, ww); }
    if (k == 1) {
        dd = warp_sum(dd);
        if ((threadIdx.x & 31) == 0) atomicAdd(acc + 4, dd);
    } else if (t < (long long)m * k) {
        atomicAdd(acc + 4 + r, dd);
    }
}

// scale < 0: 1 / acc[1] (the weight sum); intercept steps when b != 0 (block 0)
extern "C" __global__ void glm_scatter(
    const int* indptr, const int* indices, const real* data, const real* D, int m, int k,
    double scale, real* gbuf, int* mark, double* acc, real* b, real* sumsq0, double lr,
    double eps)
{
    if (acc[2] != 0.0) return;  // bad labels: leave everything unchanged
    double sc = scale;
    if (sc < 0.0) sc = acc[1] > 0.0 ? 1.0 / acc[1] : 0.0;
    if (b != 0 && blockIdx.x == 0) {
        for (int r = threadIdx.x; r < k; r += blockDim.x) {
            double g = acc[4 + r] * sc;
            double s = (double)sumsq0[r] + g * g;
            sumsq0[r] = (real)s;
            b[r] = (real)((double)b[r] - lr * g / (sqrt(s) + eps));
        }
    }
    int nnz = indptr[m];
    int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= nnz) return;
    int j = column_of(indptr, m, p);
    long long f = indices[p];
    double x = (double)data[p] * sc;
    for (int r = 0; r < k; ++r)
        atomicAdd(gbuf + f * k + r, (real)(x * (double)D[(long long)j * k + r]));
    mark[f] = 1;
}

extern "C" __global__ void glm_update(
    const int* indptr, const int* indices, int m, int k, real* coef, real* sumsq, real* gbuf,
    int* mark, double* acc, double lr, double eps, double l2, double l1)
{
    if (acc[2] != 0.0) return;  // uniform over the grid
    int nnz = indptr[m];
    int p = blockIdx.x * blockDim.x + threadIdx.x;
    long long f = p < nnz ? indices[p] : 0;
    // the one nonzero of the feature that takes its mark owns the feature's update
    bool own = p < nnz && atomicExch(mark + f, 0) == 1;
    unsigned int owners = __ballot_sync(0xffffffffu, own);
    if ((threadIdx.x & 31) == 0 && owners) atomicAdd(acc + 3, (double)__popc(owners));
    if (!own) return;
    for (int r = 0; r < k; ++r) {
        long long q = f * k + r;
        double wv = (double)coef[q];
        double g = (double)gbuf[q] + l2 * wv;
        gbuf[q] = (real)0;
        double s = (double)sumsq[q] + g * g;
        double step = lr / (sqrt(s) + eps);
        wv -= step * g;
        if (l1 > 0.0) {
            double a = fabs(wv) - l1 * step;
            wv = a <= 0.0 ? 0.0 : (wv < 0.0 ? -a : a);
        }
        coef[q] = (real)wv;
        sumsq[q] = (real)s;
    }
}
"""

_MODULES: dict = {}


def _kernels(dtype):
    """``(glm_forward, glm_scatter, glm_update)`` for ``dtype``, compiled on first use (the
    function handles are kept: looking them up costs ~3 us a launch)."""
    import cupy

    key = np.dtype(dtype).char
    fns = _MODULES.get(key)
    if fns is None:
        real = {"f": "float", "d": "double"}[key]
        mod = cupy.RawModule(code=_LOSS_DEFINES + _SRC.replace("REAL", real))
        fns = tuple(mod.get_function(f) for f in ("glm_forward", "glm_scatter", "glm_update"))
        _MODULES[key] = fns
    return fns


def gpu_loss_eval(loss, eta, y):
    """``(l, dl/deta, bad_label)`` of the CUDA source's loss functions over float64 cupy
    arrays ``eta``, ``y`` (the test of the CUDA C form against :func:`._losses.glm_loss_deriv`
    and :func:`._losses.glm_bad_label`)."""
    import cupy

    eta = cupy.ascontiguousarray(eta, dtype=cupy.float64)
    y = cupy.ascontiguousarray(y, dtype=cupy.float64)
    n = eta.size
    l, d = cupy.empty(n), cupy.empty(n)
    bad = cupy.empty(n, dtype=cupy.int32)
    _loss_eval_kernel()(_blocks(max(n, 1)), (_THREADS,),
                        (np.int32(loss), np.int32(n), eta, y, l, d, bad))
    return l, d, bad.astype(bool)


def _loss_eval_kernel():
    fn = _MODULES.get("loss_eval")
    if fn is None:
        import cupy

        mod = cupy.RawModule(code=_LOSS_DEFINES + _SRC.replace("REAL", "double"))
        fn = _MODULES["loss_eval"] = mod.get_function("glm_loss_eval")
    return fn


def _blocks(n: int) -> tuple:
    return (max(1, -(-int(n) // _THREADS)),)


_NULL = np.uint64(0)


def gpu_glm_step(indptr, indices, data, coef, b, y, w, m, k, loss, D, gbuf, mark, acc,
                 sumsq, sumsq0, lr, eps, l2, l1, nnz, zero_b):
    """Launch the three kernels of one fused step.

    All arrays are cupy arrays, checked and laid out by the caller: ``coef``/``sumsq``
    ``k x n`` Fortran; ``y`` ``k x m`` Fortran (or ``(m,)``) of the model dtype; ``D`` scratch of
    ``m * k``; ``gbuf`` (``n * k``) and ``mark`` (``n``, int32) all zero (and left all zero);
    ``acc`` zeroed, ``GPU_ACC_HEAD + k`` float64 (see :data:`GPU_ACC_HEAD`).  ``b``/``sumsq0``
    ``None``: no intercept (``zero_b``, ``k`` zeros, is read instead).  ``w`` ``None``: unit
    weights.  ``nnz``: the minibatch's nonzeros (a host int).
    """
    forward = _kernels(data.dtype)[0]
    m, k = int(m), int(k)
    has_w = w is not None
    forward(
        _blocks(m * k), (_THREADS,),
        (indptr, indices, data, coef, zero_b if b is None else b, y, w if has_w else data,
         np.int32(has_w), np.int32(m), np.int32(k), np.int32(loss), D, acc))
    # the derivatives are scaled by 1 / (the weight sum the forward kernel left in acc)
    gpu_glm_scatter_update(indptr, indices, data, D, m, k, gbuf, mark, acc, coef, sumsq, lr,
                           eps, l2, l1, nnz, scale=-1.0, b=b, sumsq0=sumsq0)


def gpu_glm_scatter_update(indptr, indices, data, D, m, k, gbuf, mark, acc, coef, sumsq, lr,
                           eps, l2, l1, nnz, *, scale=1.0, b=None, sumsq0=None):
    """The scatter and update kernels for derivatives ``D`` (``k x m`` Fortran), multiplied by
    ``scale`` (``-1``: by ``1 / acc[1]``, the weight sum of :func:`gpu_glm_step`'s forward
    kernel), with an intercept step when ``b``/``sumsq0`` are given: the GPU form of
    :func:`roofline.kernels.glm_accumulate_touched` + :func:`roofline.kernels.adagrad_glm_update`.
    Other arguments as in :func:`gpu_glm_step`."""
    _, scatter, update = _kernels(data.dtype)
    m, k = int(m), int(k)
    scatter(
        _blocks(max(nnz, 1)), (_THREADS,),
        (indptr, indices, data, D, np.int32(m), np.int32(k), np.float64(scale), gbuf, mark, acc,
         _NULL if b is None else b, _NULL if sumsq0 is None else sumsq0, np.float64(lr),
         np.float64(eps)))
    update(
        _blocks(max(nnz, 1)), (_THREADS,),
        (indptr, indices, np.int32(m), np.int32(k), coef, sumsq, gbuf, mark, acc,
         np.float64(lr), np.float64(eps), np.float64(l2), np.float64(l1)))
