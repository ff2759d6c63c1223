"""The one loss table, and the losses' scalar functions (numba; inlined into the CD, Newton and
fused-GLM kernels, and callable from ``numba.cuda.jit`` device code as they are).

:data:`LOSS_TABLE` holds one :class:`Loss` record per loss: its code (the kernels' ``loss``
argument: :data:`SQUARED`, :data:`LOGISTIC`, :data:`HINGE`, :data:`SQUARED_HINGE`), canonical
name and aliases, whether it is smooth (a generalised second derivative: Newton, L-BFGS), the
labels it takes, whether the coordinate-descent kernels implement it, and the peers' names for
it.  Every loss list of Roofline is derived from the table (:data:`LOSS_CODES` here; the names,
aliases and solver sets in ``roofline.glm``); the kernels compare ``loss`` with the named codes,
never with numbers.  ``ARCHITECTURE.md`` ("Adding a loss") lists the files a new loss touches.

The same losses are written in two label conventions, kept apart because each kernel family's
iterates depend on the exact floating-point formula it evaluates:

*Margin form* (the CD and Newton kernels; classifier labels ``y in {-1, +1}``, ``z`` the
margin)::

    squared         l(z) = (z - y)^2 / 2
    logistic        l(z) = log(1 + exp(-y z))
    hinge           l(z) = max(0, 1 - y z)
    squared_hinge   l(z) = max(0, 1 - y z)^2

:func:`margin_loss` (value), :func:`margin_dloss` (first and second derivative; the hinge's
subgradient and zero curvature), :func:`margin_derivs` (value, first and second derivative of
a smooth loss in one call: the dense Newton kernels' form) and :func:`margin_neg_conj`
(``-l*(-a)``, the dual objective's per-example term, ``-inf`` outside its domain).

*GLM form* (the fused ADAGrad kernels; labels ``y in [0, 1]`` for logistic, any sign for the
hinge losses, ``s = 1 if y > 0 else -1``)::

    squared         l = (eta - y)^2 / 2
    logistic        l = log(1 + exp(eta)) - y eta
    hinge           l = max(0, 1 - s eta)
    squared_hinge   l = max(0, 1 - s eta)^2

:func:`glm_loss_deriv` (value and derivative in float64) and :func:`glm_bad_label` (a label the
loss cannot take).  For ``y01 = (y + 1) / 2`` the two logistic forms are the same function.

Every function here is ``inline="always"``: numba inlines it into the calling kernel, which
compiles it with its own flags.  numba's on-disk cache does not notice a change of an inlined
function from another module: after editing this file, delete ``kernels/__pycache__/*.nbi``
(or touch the calling modules) so that the kernels recompile.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit

__all__ = [
    "HINGE",
    "LABEL_FORMS",
    "LABEL_HI",
    "LABEL_LO",
    "LOGISTIC",
    "LOSS_CODES",
    "LOSS_TABLE",
    "SQUARED",
    "SQUARED_HINGE",
    "Loss",
    "glm_bad_label",
    "glm_loss_deriv",
    "log1pexp",
    "margin_derivs",
    "margin_dloss",
    "margin_loss",
    "margin_neg_conj",
    "sigmoid",
]

SQUARED, LOGISTIC, HINGE, SQUARED_HINGE = 0, 1, 2, 3

#: The label forms of :attr:`Loss.labels`: the GLM form's accepted range of ``y`` (the margin
#: form maps the classifiers' binary labels, ``{0, 1}`` or ``{-1, 1}``, to ``{-1, +1}``).
LABEL_FORMS = {
    "real": (-np.inf, np.inf),  # any finite value (regression)
    "unit": (0.0, 1.0),         # a probability: {0, 1} or soft labels in [0, 1]
    "sign": (-1.0, 1.0),        # {0, 1} or {-1, 1}, the class being y > 0
}


class Loss(NamedTuple):
    """One loss of :data:`LOSS_TABLE`."""

    #: the kernels' ``loss`` argument (the index of the record in the table)
    code: int
    #: canonical name
    name: str
    #: accepted aliases of the name
    aliases: tuple
    #: a (generalised) second derivative: the Newton and L-BFGS solvers take it
    smooth: bool
    #: the labels it takes, a key of :data:`LABEL_FORMS`
    labels: str
    #: the coordinate-descent kernels implement it (a dual step in ``_cd.py``)
    cd: bool
    #: peer -> the peer's name for the loss (``sklearn``: ``SGDClassifier``/``SGDRegressor``'s
    #: ``loss``; ``snapml``: its ``loss``; ``vw``: ``--loss_function``); absent: no such loss
    peers: dict


#: The one loss table, in code order.
LOSS_TABLE = (
    Loss(SQUARED, "squared", ("least_squares", "linear"), smooth=True, labels="real", cd=True,
         peers={"sklearn": "squared_error", "snapml": "mse", "vw": "squared"}),
    Loss(LOGISTIC, "logistic", ("log", "log_loss"), smooth=True, labels="unit", cd=True,
         peers={"sklearn": "log_loss", "snapml": "logloss", "vw": "logistic"}),
    Loss(HINGE, "hinge", (), smooth=False, labels="sign", cd=True,
         peers={"sklearn": "hinge", "snapml": "hinge", "vw": "hinge"}),
    Loss(SQUARED_HINGE, "squared_hinge", (), smooth=True, labels="sign", cd=False,
         peers={"sklearn": "squared_hinge"}),
)

#: canonical name -> code, derived from :data:`LOSS_TABLE` (names and aliases:
#: ``roofline.glm``).
LOSS_CODES = {rec.name: rec.code for rec in LOSS_TABLE}


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
def margin_derivs(z, y, loss):
    """``(l, l', l'')`` of a smooth loss at the margin ``z`` (the logistic's from one ``exp`` and
    one ``log1p``; the dense Newton kernels' form)."""
    if loss == LOGISTIC:
        m = y * z
        e = math.exp(-abs(m))
        s = e / (1.0 + e) if m >= 0.0 else 1.0 / (1.0 + e)  # sigmoid(-m)
        return (-m if m < 0.0 else 0.0) + math.log1p(e), -y * s, s * (1.0 - s)
    if loss == SQUARED:
        r = z - y
        return 0.5 * r * r, r, 1.0
    m = 1.0 - y * z  # squared hinge
    if m > 0.0:
        return m * m, -2.0 * y * m, 2.0
    return 0.0, 0.0, 0.0


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
        # (math, not numpy: the same functions on the CPU, and numba-cuda lowers them too)
        if eta > 0.0:
            z = math.exp(-eta)
            return eta + math.log1p(z) - y * eta, 1.0 / (1.0 + z) - y
        z = math.exp(eta)
        return math.log1p(z) - y * eta, z / (1.0 + z) - y
    s = 1.0 if y > 0.0 else -1.0
    t = 1.0 - s * eta
    if t <= 0.0:
        return 0.0, 0.0
    if loss == HINGE:
        return t, -s
    return t * t, -2.0 * s * t


#: The GLM form's label range of each code (from :data:`LABEL_FORMS`), for the kernels.
LABEL_LO = np.array([LABEL_FORMS[rec.labels][0] for rec in LOSS_TABLE])
LABEL_HI = np.array([LABEL_FORMS[rec.labels][1] for rec in LOSS_TABLE])


@njit(inline="always")
def glm_bad_label(loss, y):
    """Whether the GLM form of ``loss`` cannot take the label ``y`` (NaN and infinities
    included): outside the range of its :data:`LABEL_FORMS` entry."""
    if not abs(y) <= 1.7976931348623157e308:
        return True
    return y < LABEL_LO[loss] or y > LABEL_HI[loss]
