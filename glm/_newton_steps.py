"""Second-order steps for smooth GLMs: the gmat face of ``kernels/_newton.py``.

The trust-region Newton solver of :mod:`roofline.learners` (``solver="newton"``) calls these
functions, never the kernels.  ``X`` is the project layout (``n_features x n_examples`` CPU
CSC, one column per example); state vectors are float64 numpy arrays; ``loss`` is a code of
:data:`roofline.glm.LOSS_CODES` of a smooth loss (``0`` squared, ``1`` logistic, ``3``
squared hinge).  Objectives are sums, ``sum_i l(z_i) + lam_n ||w||^2 / 2``, as in
:mod:`roofline.glm.cd`.
"""

from __future__ import annotations

import numpy as np

from roofline import kernels

from ._cd_steps import _coords, _f64_vector, _vector
from ._losses import LOSS_CODES, SMOOTH_LOSSES

__all__ = [
    "DENSE_PARALLEL_MIN_VALUES",
    "SMOOTH_LOSSES",
    "conj_sum",
    "dense_eval",
    "dense_hess_vec",
    "dense_threads",
    "hess_diag",
    "hess_vec",
    "hess_vec_workspace",
    "loss_derivs",
    "loss_sum",
]

_SMOOTH_CODES = {LOSS_CODES[name] for name in SMOOTH_LOSSES}


def _smooth(loss):
    if isinstance(loss, (bool, str)) or loss not in _SMOOTH_CODES:
        raise ValueError(f"loss must be the code of a smooth loss {SMOOTH_LOSSES} "
                         f"(roofline.glm.loss_code), got {loss!r}")
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


# ---------------------------------------------------------------------------------------------
# dense examples

#: Dense data of at least this many values runs the fused kernels on all threads (below it a
#: parallel region's start costs more than it saves).
DENSE_PARALLEL_MIN_VALUES = 1 << 16


def _dense(X):
    if (not isinstance(X, np.ndarray) or X.ndim != 2 or X.dtype != np.float64
            or not X.flags.f_contiguous):
        raise ValueError("X must be a float64 (n_features, n_examples) array in Fortran order "
                         "(each example a contiguous column), got "
                         f"{getattr(X, 'dtype', type(X).__name__)} "
                         f"{getattr(X, 'shape', '')}")
    return X


def dense_threads(X, n_threads=None):
    """The chunks :func:`dense_eval` and :func:`dense_hess_vec` split dense ``X`` into: 1
    (serial) below :data:`DENSE_PARALLEL_MIN_VALUES` values or with one thread, else the
    thread count (``n_threads``, default numba's)."""
    k = kernels.default_threads() if n_threads is None else int(n_threads)
    if k < 2 or X.size < DENSE_PARALLEL_MIN_VALUES or X.shape[1] < 2 * k:
        return 1
    return k


def dense_eval(X, w, b, y, loss, sw=None, *, z=None, dl=None, D=None, n_chunks=1):
    """A smooth GLM's margins, loss, derivatives, gradient and Hessian diagonal at ``(w, b)``
    in one pass over dense examples.

    Parameters
    ----------
    X : ndarray of float64, shape (n_features, n_examples), Fortran order
    w : ndarray of float64, shape (n_features,)
    b : float
        The intercept.
    y : ndarray of float64, shape (n_examples,)
        Margin-form labels.
    loss : {0, 1, 3}
    sw : ndarray of float64, shape (n_examples,), optional
        Example weights ``s_i`` (default 1).
    z, dl, D : ndarray of float64, shape (n_examples,), optional
        Overwritten with the margins, ``l'(z_i)`` and ``s_i l''(z_i)``.
    n_chunks : int
        Chunks of examples run in parallel (:func:`dense_threads`); 1: serial.

    Returns
    -------
    g : ndarray of float64, shape (n_features,)
        ``sum_i s_i l'(z_i) x_i``.
    hd : ndarray of float64, shape (n_features,)
        ``sum_i D_i x_i^2``, the diagonal of ``X diag(D) X^T``.
    sums : ndarray of float64, shape (4,)
        ``sum_i s_i l(z_i)``, ``sum_i s_i l'(z_i)``, ``sum_i D_i`` and
        ``sum_i -s_i l*(l'(z_i))`` (:func:`conj_sum` at ``a = -l'(z)``).
    z, dl, D : ndarray of float64, shape (n_examples,)
    """
    X = _dense(X)
    d, n = X.shape
    loss = _smooth(loss)
    w = _f64_vector(w, d, "w")
    y = _vector(y, n, "y")
    z = np.empty(n) if z is None else _f64_vector(z, n, "z")
    dl = np.empty(n) if dl is None else _f64_vector(dl, n, "dl")
    D = np.empty(n) if D is None else _f64_vector(D, n, "D")
    g, hd, sums = np.empty(d), np.empty(d), np.empty(4)
    sw = _weights(sw, n)
    if n_chunks > 1:
        kernels.newton_dense_eval_parallel(X, w, float(b), y, loss, sw, z, dl, D, g, hd, sums,
                                           np.empty((n_chunks, 2, d)), np.empty((n_chunks, 4)))
    else:
        kernels.newton_dense_eval(X, w, float(b), y, loss, sw, z, dl, D, g, hd, sums)
    return g, hd, sums, z, dl, D


def dense_hess_vec(X, D, s, s_b=0.0, out=None, *, n_chunks=1):
    """``out = X diag(D) (X^T s + s_b)`` over dense examples in one pass (:func:`hess_vec`'s
    dense form; ``X`` as in :func:`dense_eval`).

    Returns
    -------
    out : ndarray of float64, shape (n_features,)
    hb : float
        ``sum_i D_i (x_i^T s + s_b)``.
    """
    X = _dense(X)
    d, n = X.shape
    _f64_vector(D, n, "D")
    s = _f64_vector(s, d, "s")
    out = np.empty(d) if out is None else _f64_vector(out, d, "out")
    if n_chunks > 1:
        hb = kernels.newton_dense_hess_vec_parallel(X, D, s, float(s_b), out,
                                                    np.empty((n_chunks, d)))
    else:
        hb = kernels.newton_dense_hess_vec(X, D, s, float(s_b), out)
    return out, float(hb)
