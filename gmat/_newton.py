"""Second-order steps for smooth GLMs: the gmat face of ``kernels/_newton.py``.

The trust-region Newton solver of :mod:`roofline.learners` (``solver="newton"``) calls these
functions, never the kernels.  ``X`` is the project layout (``n_features x n_examples`` CPU
CSC, one column per example); state vectors are float64 numpy arrays; ``loss`` is a code of
:data:`roofline.gmat.glm.LOSS_CODES` of a smooth loss (``0`` squared, ``1`` logistic, ``3``
squared hinge).  Objectives are sums, ``sum_i l(z_i) + lam_n ||w||^2 / 2``, as in
:mod:`roofline.gmat.cd`.
"""

from __future__ import annotations

import numpy as np

from roofline import kernels

from ._cd import _coords, _f64_vector, _vector
from ._losses import LOSS_CODES

__all__ = [
    "SMOOTH_LOSSES",
    "conj_sum",
    "hess_diag",
    "hess_vec",
    "hess_vec_workspace",
    "loss_derivs",
    "loss_sum",
]

#: The losses with a (generalised) second derivative the Newton solver can use.
SMOOTH_LOSSES = ("squared", "logistic", "squared_hinge")
_SMOOTH_CODES = {LOSS_CODES[name] for name in SMOOTH_LOSSES}


def _smooth(loss):
    if isinstance(loss, (bool, str)) or loss not in _SMOOTH_CODES:
        raise ValueError(f"loss must be the code of a smooth loss {SMOOTH_LOSSES} "
                         f"(roofline.gmat.glm.loss_code), got {loss!r}")
    return int(loss)


_NO_WEIGHTS = np.empty(0)


def _weights(sw, n):
    """The weights as the kernels take them: float64 of length ``n``, or empty for none."""
    if sw is None:
        return _NO_WEIGHTS
    return _f64_vector(sw, n, "sw")


def loss_derivs(z, y, loss, dl=None, D=None, sw=None):
    """The loss, its first and second derivatives at the margins ``z``.

    Parameters
    ----------
    z, y : ndarray of float64, shape (n,)
        Margins and (margin-form) labels.
    loss : {0, 1, 3}
    dl, D : ndarray of float64, shape (n,), optional
        Overwritten with ``l'(z_i)`` and ``s_i l''(z_i)``.
    sw : ndarray of float64, shape (n,), optional
        Example weights ``s_i`` (default 1).  The sums are weighted; ``D`` carries the weight
        (it is the Hessian's diagonal scaling), ``dl`` does not (the dual point is
        ``a = -dl``).

    Returns
    -------
    L : float
        ``sum_i s_i l(z_i)``.
    g, h : float
        ``sum_i s_i l'(z_i)`` and ``sum_i s_i l''(z_i)`` (the intercept's gradient and
        curvature).
    dl, D : ndarray of float64, shape (n,)
    """
    n = _vector(z, None, "z").shape[0]
    _vector(y, n, "y")
    dl = np.empty(n) if dl is None else _f64_vector(dl, n, "dl")
    D = np.empty(n) if D is None else _f64_vector(D, n, "D")
    L, g, h = kernels.newton_loss_derivs(z, y, _smooth(loss), _weights(sw, n), dl, D)
    return L, g, h, dl, D


def loss_sum(z, y, loss, sw=None):
    """``sum_i s_i l(z_i; y_i)`` for a smooth loss (``sw``: weights ``s_i``, default 1)."""
    n = _vector(z, None, "z").shape[0]
    _vector(y, n, "y")
    return kernels.newton_loss_sum(z, y, _smooth(loss), _weights(sw, n))


def conj_sum(a, y, loss, sw=None):
    """``sum_i -s_i l*(-a_i; y_i)`` for a smooth loss (``-inf`` if some ``a_i`` of positive
    weight is infeasible; ``sw``: weights ``s_i``, default 1)."""
    n = _vector(a, None, "a").shape[0]
    _vector(y, n, "y")
    return kernels.newton_conj_sum(a, y, _smooth(loss), _weights(sw, n))


def hess_vec_workspace(X, n_threads=None):
    """The scratch rows of a parallel :func:`hess_vec`, or ``None`` when the serial pass is
    the faster one.

    Each thread scatters into its own ``n_features`` row, zeroed and summed at every product:
    that costs ``n_threads * n_features`` against ``nnz`` for the scatter itself, so the
    parallel pass is used only where ``4 * n_threads * n_features <= nnz``.
    """
    _coords(X, "X")
    k = kernels.default_threads() if n_threads is None else int(n_threads)
    if k < 2 or 4 * k * X.shape[0] > X.nnz:
        return None
    return np.empty((k, X.shape[0]))


def hess_vec(X, D, s, s_b=0.0, out=None, *, work=None):
    """``out = X diag(D) (X^T s + s_b)``, one fused pass over the examples.

    Parameters
    ----------
    X : CSC matrix, shape (n_features, n_examples)
    D : ndarray of float64, shape (n_examples,)
        The curvature of each example (:func:`loss_derivs`); examples with ``D_i = 0`` are
        skipped.
    s : ndarray of float64, shape (n_features,)
    s_b : float
        The intercept's component of the direction.
    out : ndarray of float64, shape (n_features,), optional
        Overwritten.
    work : ndarray of float64, shape (n_threads, n_features), optional
        From :func:`hess_vec_workspace`: run in parallel over ``n_threads`` chunks of examples.

    Returns
    -------
    out : ndarray of float64, shape (n_features,)
    hb : float
        ``sum_i D_i (x_i^T s + s_b)``, the intercept's component of the product.
    """
    _coords(X, "X")
    d, n = X.shape
    _f64_vector(D, n, "D")
    _vector(s, d, "s")
    out = np.zeros(d) if out is None else _f64_vector(out, d, "out")
    out[:] = 0.0
    if work is None:
        hb = kernels.newton_hess_vec(X.indptr, X.indices, X.data, D, s, float(s_b), out)
    else:
        if work.ndim != 2 or work.shape[1] != d or work.dtype != np.float64:
            raise ValueError(f"work must be float64 of shape (n_threads, {d})")
        hb = kernels.newton_hess_vec_parallel(X.indptr, X.indices, X.data, D, s, float(s_b),
                                              out, work)
    return out, float(hb)


def hess_diag(X, D, out=None):
    """``out_j = sum_i D_i x_ij^2``, the diagonal of ``X diag(D) X^T``.

    Returns
    -------
    out : ndarray of float64, shape (n_features,)
    h : float
        ``sum_i D_i`` (the intercept's diagonal entry).
    """
    _coords(X, "X")
    d, n = X.shape
    _f64_vector(D, n, "D")
    out = np.zeros(d) if out is None else _f64_vector(out, d, "out")
    out[:] = 0.0
    h = kernels.newton_hess_diag(X.indptr, X.indices, X.data, D, out)
    return out, float(h)
