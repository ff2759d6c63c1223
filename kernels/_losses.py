"""Scalar losses of the GLM kernels (numba, inlined into the CD and fused-GLM kernels).

One code table, :data:`LOSS_CODES` (``SQUARED = 0``, ``LOGISTIC = 1``, ``HINGE = 2``,
``SQUARED_HINGE = 3``), shared by the coordinate-descent kernels (``_cd.py``), the fused GLM
kernels (``_glm.py``) and the CUDA twin (``_cuda_glm.py``, which gets the codes as ``#define``s).

The same losses are written in two label conventions, kept apart because each kernel family's
iterates depend on the exact floating-point formula it evaluates:

*Margin form* (the CD kernels; classifier labels ``y in {-1, +1}``, ``z`` the margin)::

    squared         l(z) = (z - y)^2 / 2
    logistic        l(z) = log(1 + exp(-y z))
    hinge           l(z) = max(0, 1 - y z)
    squared_hinge   l(z) = max(0, 1 - y z)^2

:func:`margin_loss` (value), :func:`margin_dloss` (first and second derivative; the hinge's
subgradient and zero curvature) and :func:`margin_neg_conj` (``-l*(-a)``, the dual objective's
per-example term, ``-inf`` outside its domain).

*GLM form* (the fused ADAGrad kernels; labels ``y in [0, 1]`` for logistic, any sign for the
hinge losses, ``s = 1 if y > 0 else -1``)::

    squared         l = (eta - y)^2 / 2
    logistic        l = log(1 + exp(eta)) - y eta
    hinge           l = max(0, 1 - s eta)
    squared_hinge   l = max(0, 1 - s eta)^2

:func:`glm_loss_deriv` (value and derivative in float64).  For ``y01 = (y + 1) / 2`` the two
logistic forms are the same function.

Every function here is ``inline="always"``: numba inlines it into the calling kernel, which
compiles it with its own flags.  numba's on-disk cache does not notice a change of an inlined
function from another module: after editing this file, delete ``kernels/__pycache__/*.nbi``
(or touch the calling modules) so that the kernels recompile.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = [
    "HINGE",
    "LOGISTIC",
    "LOSS_CODES",
    "SQUARED",
    "SQUARED_HINGE",
    "glm_loss_deriv",
    "log1pexp",
    "margin_dloss",
    "margin_loss",
    "margin_neg_conj",
    "sigmoid",
]

SQUARED, LOGISTIC, HINGE, SQUARED_HINGE = 0, 1, 2, 3

#: The one loss code table: canonical name -> code (names and aliases: ``roofline.glm``).
LOSS_CODES = {"squared": SQUARED, "logistic": LOGISTIC, "hinge": HINGE,
              "squared_hinge": SQUARED_HINGE}


@njit(inline="always")
def sigmoid(t):
    """``1 / (1 + exp(-t))`` without overflow."""
    if t >= 0:
        return 1.0 / (1.0 + math.exp(-t))
    e = math.exp(t)
    return e / (1.0 + e)


@njit(inline="always")
def log1pexp(t):
    """``log(1 + exp(t))`` without overflow."""
    if t > 0:
        return t + math.log1p(math.exp(-t))
    return math.log1p(math.exp(t))


# ---------------------------------------------------------------------------------------------
# margin form (labels in {-1, +1}; the coordinate-descent kernels)


@njit(inline="always")
def margin_loss(z, y, loss):
    """``l(z; y)`` in the margin form."""
    if loss == SQUARED:
        r = z - y
        return 0.5 * r * r
    if loss == LOGISTIC:
        return log1pexp(-y * z)
    m = 1.0 - y * z
    if loss == SQUARED_HINGE:
        return m * m if m > 0.0 else 0.0
    return m if m > 0.0 else 0.0


@njit(inline="always")
def margin_dloss(z, y, loss):
    """First and second derivative of the loss at ``z`` (hinge: a subgradient and 0)."""
    if loss == SQUARED:
        return z - y, 1.0
    if loss == LOGISTIC:
        s = sigmoid(-y * z)
        return -y * s, s * (1.0 - s)
    if loss == SQUARED_HINGE:
        m = 1.0 - y * z
        return (-2.0 * y * m, 2.0) if m > 0.0 else (0.0, 0.0)
    return (-y if y * z < 1.0 else 0.0), 0.0


@njit(inline="always")
def margin_neg_conj(a, y, loss):
    """``-l*(-a)``: the dual objective's per-example term (``-inf`` outside its domain)."""
    if loss == SQUARED:
        return a * y - 0.5 * a * a
    b = a * y
    if loss == LOGISTIC:
        if b < 0.0 or b > 1.0:
            return -np.inf
        h = 0.0
        if b > 0.0:
            h -= b * math.log(b)
        if b < 1.0:
            h -= (1.0 - b) * math.log(1.0 - b)
        return h
    if loss == SQUARED_HINGE:
        if b < -1e-12:
            return -np.inf
        return b - 0.25 * b * b
    if b < -1e-12 or b > 1.0 + 1e-12:
        return -np.inf
    return b


# ---------------------------------------------------------------------------------------------
# GLM form (labels in [0, 1] for logistic; the fused ADAGrad kernels)


@njit(cache=True, nogil=True, fastmath=True, inline="always")
def glm_loss_deriv(loss, eta, y):
    """``(l(y, eta), dl/deta)`` in float64 in the GLM form (codes of :data:`LOSS_CODES`)."""
    if loss == SQUARED:
        r = eta - y
        return 0.5 * r * r, r
    if loss == LOGISTIC:
        # log(1 + exp(eta)) - y * eta and sigmoid(eta) - y, without overflow
        if eta > 0.0:
            z = np.exp(-eta)
            return eta + np.log1p(z) - y * eta, 1.0 / (1.0 + z) - y
        z = np.exp(eta)
        return np.log1p(z) - y * eta, z / (1.0 + z) - y
    s = 1.0 if y > 0.0 else -1.0
    t = 1.0 - s * eta
    if t <= 0.0:
        return 0.0, 0.0
    if loss == HINGE:
        return t, -s
    return t * t, -2.0 * s * t
