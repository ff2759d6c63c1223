"""The small set of dense elementwise operations a GLM step needs, with ``out=`` buffers.

Each works on numpy (CPU) or cupy (GPU) arrays through the array module of its input, so learner
code calls one function whatever the device.  With ``out=``, :func:`sigmoid` allocates nothing
(it composes in-place ufunc calls); :func:`log1pexp` and :func:`axpy` with ``alpha != 1`` use
one temporary.
"""

from __future__ import annotations

import numpy as np

from ._arrays import as_dense, get_array_module

__all__ = ["axpy", "expit", "log1pexp", "sigmoid"]


def _out(x, out, name="out"):
    if out is None:
        return get_array_module(x).empty_like(x)
    if out.shape != x.shape or out.dtype != x.dtype:
        raise ValueError(
            f"{name} has shape {out.shape} and dtype {out.dtype}; expected {x.shape} {x.dtype}"
        )
    return out


def sigmoid(x, out=None):
    """Numerically stable logistic function ``1 / (1 + exp(-x))``.

    Computed as ``0.5 * (1 + tanh(x / 2))``, which never overflows (no ``exp`` of a large
    argument) and needs no branch on the sign of ``x``.

    Parameters
    ----------
    x : array (float32/float64)
    out : array like ``x``, optional (may be ``x`` itself)

    Returns
    -------
    array like ``x``
        ``out`` (a new array when omitted) holding the logistic function of ``x``.

    Raises
    ------
    TypeError, ValueError
        ``x`` is not a float32/float64 array, or ``out`` differs from it in shape or dtype.
    """
    as_dense(x, "x", ndim=(0, 1, 2))
    xp = get_array_module(x)
    out = _out(x, out)
    xp.multiply(x, 0.5, out=out)
    xp.tanh(out, out=out)
    xp.add(out, 1.0, out=out)
    xp.multiply(out, 0.5, out=out)
    return out


def expit(x, out=None):
    """The logistic function by the array's own library: :func:`scipy.special.expit` on the
    CPU, :func:`cupyx.scipy.special.expit` on the GPU (both exact to the last bit, where
    :func:`sigmoid`'s ``tanh`` form rounds differently).

    Parameters
    ----------
    x : array (float32/float64)
    out : array like ``x``, optional (may be ``x`` itself)

    Returns
    -------
    array like ``x``
        ``out`` (a new array when omitted) holding the logistic function of ``x``.

    Raises
    ------
    TypeError, ValueError
        ``x`` is not a float32/float64 array, or ``out`` differs from it in shape or dtype.
    """
    as_dense(x, "x", ndim=(0, 1, 2))
    out = _out(x, out)
    if get_array_module(x) is np:
        from scipy.special import expit as f
    else:  # pragma: no cover - needs a GPU
        from cupyx.scipy.special import expit as f
    return f(x, out=out)


def log1pexp(x, out=None):
    """Stable softplus ``log(1 + exp(x))``: ``max(x, 0) + log1p(exp(-|x|))``.

    The logistic loss of margin ``z`` is ``log1pexp(-z)``.

    Parameters
    ----------
    x : array (float32/float64)
    out : array like ``x``, optional (must not be ``x``)

    Returns
    -------
    array like ``x``
        ``out`` (a new array when omitted) holding ``log(1 + exp(x))``.

    Raises
    ------
    TypeError, ValueError
        ``x`` is not a float32/float64 array, ``out`` differs from it in shape or dtype, or
        ``out`` is ``x``.
    """
    as_dense(x, "x", ndim=(0, 1, 2))
    xp = get_array_module(x)
    out = _out(x, out)
    if out is x:
        raise ValueError("log1pexp cannot work in place: out must not be x")
    xp.abs(x, out=out)
    xp.negative(out, out=out)
    xp.exp(out, out=out)
    xp.log1p(out, out=out)
    out += xp.maximum(x, 0)  # one temporary; acceptable for a loss evaluation
    return out


def axpy(alpha, x, y):
    """``y += alpha * x`` in place (BLAS axpy); returns ``y``.

    Parameters
    ----------
    alpha : float
        The scale of ``x``.
    x : array (float32/float64)
        Added, scaled; not modified.
    y : array like ``x``
        Updated in place.

    Returns
    -------
    array
        ``y``.

    Raises
    ------
    ValueError
        ``x`` and ``y`` differ in shape.
    TypeError
        ``x`` and ``y`` differ in dtype, or one is not a float32/float64 array.
    """
    as_dense(x, "x", ndim=(0, 1, 2))
    as_dense(y, "y", ndim=(0, 1, 2))
    if x.shape != y.shape:
        raise ValueError(f"x has shape {x.shape} but y has shape {y.shape}")
    if x.dtype != y.dtype:
        raise TypeError(f"x has dtype {x.dtype} but y has dtype {y.dtype}")
    xp = get_array_module(y)
    if alpha == 1:
        xp.add(y, x, out=y)
    else:
        y += alpha * x
    return y
