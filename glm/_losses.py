"""The loss and regularisation vocabulary: loss names and aliases, the one label check, the one
conversion of regularisation strengths to and from the peers' conventions.

Every loss list here is derived from the one loss table, ``roofline.kernels.LOSS_TABLE``
(a record per loss: code, name, aliases, smooth or not, label form, CD support, peers' names).

Documented in :mod:`roofline.glm` (which re-exports this module).
"""

from __future__ import annotations

import numpy as np

from roofline import kernels
from roofline.gmat import device_of, get_array_module
from roofline.kernels import LABEL_FORMS, LOSS_CODES, LOSS_TABLE

__all__ = [
    "CD_LOSSES",
    "GLM_LOSSES",
    "LOSSES",
    "LOSS_ALIASES",
    "LOSS_CODES",
    "LOSS_LABELS",
    "LOSS_PEERS",
    "PEERS",
    "SMOOTH_LOSSES",
    "alpha_from_peer",
    "alpha_to_peer",
    "check_labels",
    "glm_labels",
    "loss_code",
    "loss_deriv",
    "loss_from_peer",
    "loss_to_peer",
    "losses_where",
    "resolve_loss",
]

#: Canonical loss names (the keys of ``LOSS_CODES``, in code order).
LOSSES = tuple(rec.name for rec in LOSS_TABLE)
#: Accepted aliases -> canonical name.
LOSS_ALIASES = {alias: rec.name for rec in LOSS_TABLE for alias in rec.aliases}
#: Losses of the fused ADAGrad GLM step and of the minibatch learners.
GLM_LOSSES = LOSSES
#: Losses of the coordinate-descent steps and solvers.
CD_LOSSES = tuple(rec.name for rec in LOSS_TABLE if rec.cd)
#: Losses with a (generalised) second derivative: the Newton and L-BFGS solvers' losses.
SMOOTH_LOSSES = tuple(rec.name for rec in LOSS_TABLE if rec.smooth)
#: peer -> {canonical name: the peer's name} (``sklearn``, ``snapml``, ``vw``).
LOSS_PEERS = {peer: {rec.name: rec.peers[peer] for rec in LOSS_TABLE if peer in rec.peers}
              for peer in sorted({p for rec in LOSS_TABLE for p in rec.peers})}
#: canonical name -> its label form (``"real"``, ``"unit"``: a probability in [0, 1],
#: ``"sign"``: a class, y > 0 or not).
LOSS_LABELS = {rec.name: rec.labels for rec in LOSS_TABLE}
_LABELS = LOSS_LABELS


def losses_where(**fields) -> tuple:
    """The canonical names of the losses whose table fields equal ``fields``, in code order.

    ``losses_where(smooth=True, cd=True)``; ``peer="vw"`` keeps the losses the peer has.

    Parameters
    ----------
    **fields
        Field values of the loss table's records (``smooth``, ``cd``, ``labels``, ...), and
        ``peer`` (a peer's name).

    Returns
    -------
    tuple of str
    """
    peer = fields.pop("peer", None)
    return tuple(rec.name for rec in LOSS_TABLE
                 if all(getattr(rec, k) == v for k, v in fields.items())
                 and (peer is None or peer in rec.peers))


def _peer_names(peer):
    """``{canonical loss: the peer's name}`` of ``peer``; a ValueError for an unknown peer."""
    if peer not in LOSS_PEERS:
        raise ValueError(f"peer must be one of {sorted(LOSS_PEERS)}, got {peer!r}")
    return LOSS_PEERS[peer]


def loss_to_peer(peer: str, loss) -> str:
    """The peer's name of a loss (``loss_to_peer("vw", "log")`` is ``"logistic"``).

    Parameters
    ----------
    peer : str
        A peer of the loss table (``"sklearn"``, ``"snapml"``, ``"vw"``, ...).
    loss : str
        A loss name or alias.

    Returns
    -------
    str

    Raises
    ------
    ValueError
        For an unknown peer, or a loss the peer does not have.
    """
    names = _peer_names(peer)
    return names[resolve_loss(loss, allowed=tuple(names))]


def loss_from_peer(peer: str, name: str) -> str:
    """The canonical name of the peer's loss ``name`` (inverse of :func:`loss_to_peer`).

    Parameters
    ----------
    peer : str
        A peer of the loss table.
    name : str
        The peer's name of the loss.

    Returns
    -------
    str

    Raises
    ------
    ValueError
        For an unknown peer, or a name the peer does not use.
    """
    back = {v: k for k, v in _peer_names(peer).items()}
    if name not in back:
        raise ValueError(f"{peer} loss must be one of {sorted(back)}, got {name!r}")
    return back[name]


def resolve_loss(name, *, allowed=None, argname: str = "loss") -> str:
    """The canonical name of a loss given by its name or an alias.

    Parameters
    ----------
    name : str
        A canonical name (``LOSSES``) or an alias (``LOSS_ALIASES``).
    allowed : sequence of str, optional
        Canonical names the caller supports (default: all).
    argname : str
        The argument named in the error message.

    Returns
    -------
    str

    Raises
    ------
    ValueError
        For an unknown name, or a loss outside ``allowed``; the message lists the accepted
        names and aliases.
    """
    allowed = LOSSES if allowed is None else tuple(allowed)
    canon = LOSS_ALIASES.get(name, name) if isinstance(name, str) else None
    if canon not in allowed:
        names = sorted(allowed) + sorted(a for a, c in LOSS_ALIASES.items() if c in allowed)
        extra = f" (the {canon!r} loss is not supported here)" if canon in LOSSES else ""
        raise ValueError(f"{argname} must be one of {names}, got {name!r}{extra}")
    return canon


def loss_code(name, *, allowed=None, argname: str = "loss") -> int:
    """The kernels' code of a loss name or alias (:func:`resolve_loss`, then ``LOSS_CODES``).

    Parameters
    ----------
    name : str
        A canonical loss name (``LOSSES``) or an alias (``LOSS_ALIASES``).
    allowed : sequence of str, optional
        Canonical names the caller supports (default: all).
    argname : str
        The argument named in the error message.

    Returns
    -------
    int
        The integer the numba and CUDA kernels take for this loss.

    Raises
    ------
    ValueError
        For an unknown name, or a loss outside ``allowed``.
    """
    return LOSS_CODES[resolve_loss(name, allowed=allowed, argname=argname)]


def loss_deriv(loss, eta, y, w=None, *, out=None, work=None):
    """The loss table's GLM form over arrays: weighted losses and derivatives of ``(k, m)``
    linear predictors (one column per example), on the arrays' device.

    Evaluates the table's own scalar function (``roofline.kernels.glm_loss_deriv``, in float64)
    in a numba kernel on the CPU and a numba-cuda kernel on the GPU, so that no loss is written
    a second time.  Labels are not checked here (:func:`check_labels`).

    Parameters
    ----------
    loss : str or int
        A loss name or alias, or its code (``LOSS_CODES``).
    eta : array, shape (k, m)
        Linear predictors (numpy or cupy).
    y : array, shape (k, m)
        Labels in the GLM form (:func:`glm_labels`).
    w : array, shape (m,), optional
        The examples' weights.
    out : array, shape (k, m), optional
        Where the derivatives go (may be ``eta`` itself); a new array of ``eta``'s dtype when
        omitted.
    work : array, shape (k, m), optional
        A scratch array of ``eta``'s dtype (GPU only: the per-entry losses before their sum).

    Returns
    -------
    loss_sum : float
        ``sum_j w_j sum_r l(y_rj, eta_rj)``.
    weight_sum : float
        ``sum_j w_j`` (``m`` without weights).
    D : array, shape (k, m)
        ``w_j * dl/deta_rj`` (``out`` when given).

    Examples
    --------
    >>> import numpy as np
    >>> from roofline import glm
    >>> glm.loss_deriv("squared", np.array([[1.0, 3.0]]), np.array([[0.0, 1.0]]))
    (2.5, 2.0, array([[1., 2.]]))
    """
    code = loss_code(loss) if isinstance(loss, str) else int(loss)
    if not 0 <= code < len(LOSS_TABLE):
        raise ValueError(f"loss must be a name or a code of the loss table, got {loss!r}")
    if eta.ndim != 2 or y.shape != eta.shape:
        raise ValueError(f"eta and y must be (k, m) arrays of one shape, got {eta.shape} "
                         f"and {y.shape}")
    k, m = eta.shape
    if w is not None and w.shape != (m,):
        raise ValueError(f"w has shape {w.shape}, expected ({m},)")
    xp = get_array_module(eta)
    D = xp.empty_like(eta) if out is None else out
    if D.shape != eta.shape:
        raise ValueError(f"out has shape {D.shape}, expected {eta.shape}")
    if device_of(eta) == "gpu":
        T = xp.empty_like(eta) if work is None else work
        kernels.gpu_glm_loss_deriv(code, eta, y, w, D, T)
        loss_sum = float(T.sum(dtype=np.float64))
    else:
        wk = np.empty(0, eta.dtype) if w is None else w
        loss_sum = float(kernels.glm_loss_deriv_cols(code, eta, y, wk, D))
    weight_sum = float(m) if w is None else float(w.sum(dtype=np.float64))
    return loss_sum, weight_sum, D


def _non_finite(y, name, xp):
    flat = y.ravel()
    bad = int(xp.flatnonzero(~xp.isfinite(flat))[0])
    raise ValueError(f"{name} has a non-finite value {float(flat[bad])} at position {bad} "
                     f"(NaN or infinite labels)")


def check_labels(y, loss, name: str = "y", single_class_ok: bool = False, *,
                 margin: bool = False):
    """Check labels for a loss; with ``margin``, convert them to the margin form.

    Parameters
    ----------
    y : array (numpy or cupy)
        Labels, any shape.
    loss : str
        A loss name or alias.
    name : str
        The argument named in error messages.
    single_class_ok : bool
        With ``margin``: accept classifier labels of one class only (a minibatch of a stream).
    margin : bool
        ``False`` (the GLM form of the minibatch learners and the fused step): NaN or infinite
        labels are rejected, ``logistic`` takes values in ``[0, 1]`` (soft labels included),
        ``hinge`` and ``squared_hinge`` values in ``[-1, 1]`` (``{0, 1}`` or ``{-1, 1}``);
        ``y`` is returned as it is (the check costs a min and a max).
        ``True`` (the margin form of the coordinate-descent solvers): ``y`` must be numeric
        and finite; the classifiers need binary labels, ``{0, 1}`` or ``{-1, 1}``, of both
        classes (unless ``single_class_ok``).  Returns float64 labels, raveled, the
        classifiers' mapped to ``{-1, +1}``.

    Returns
    -------
    array
    """
    loss = resolve_loss(loss)
    if margin:
        return _margin_labels(y, loss, name, single_class_ok)
    if y.size == 0:
        return y
    xp = get_array_module(y)
    lo, hi = float(y.min()), float(y.max())
    if not (np.isfinite(lo) and np.isfinite(hi)):
        _non_finite(y, name, xp)
    form = _LABELS[loss]
    low, high = LABEL_FORMS[form]
    if lo < low or hi > high:
        need = "in [0, 1]" if form == "unit" else "in {0, 1} (or {-1, 1})"
        raise ValueError(f"{name}: {loss} loss needs labels {need}, got values in [{lo}, {hi}]")
    return y


def glm_labels(y, loss):
    """Margin-form labels (:func:`check_labels` with ``margin=True``) in the GLM form of
    ``loss``: ``{0, 1}`` for a probability's labels (``logistic``), else as they are.

    Parameters
    ----------
    y : ndarray of float64
        Margin-form labels (``{-1, +1}`` for the classifiers).
    loss : str
        A loss name or alias.

    Returns
    -------
    ndarray
    """
    if _LABELS[resolve_loss(loss)] == "unit":
        return (y > 0).astype(np.float64)
    return y


def _margin_labels(y, loss, name, single_class_ok):
    y = np.asarray(y)
    if y.dtype.kind not in "biuf":
        raise TypeError(f"{name} must be numeric, got dtype {y.dtype}")
    y = y.astype(np.float64).ravel()
    if not np.isfinite(y).all():
        _non_finite(y, name, np)
    if _LABELS[loss] == "real":
        return y
    vals = np.unique(y)
    if vals.size > 2 or not (set(vals.tolist()) <= {-1.0, 1.0} or set(vals.tolist()) <= {0.0, 1.0}):
        raise ValueError(
            f"{name} must hold binary labels in {{-1, 1}} or {{0, 1}} for loss={loss!r}; found "
            f"values {vals[:5].tolist()}{' ...' if vals.size > 5 else ''}"
        )
    if vals.size < 2 and not single_class_ok:
        raise ValueError(
            f"{name} holds a single class ({vals[0]:g}); a classifier needs both classes"
        )
    return np.where(y > 0, 1.0, -1.0)


# ---------------------------------------------------------------------------------------------
# regularisation strength: the one place where peers' conventions are translated

#: peer -> (peer's value -> alpha, alpha -> peer's value), ``n`` the number of examples (or
#: the sum of the example weights).
_PEERS = {
    "C": (lambda c, n: 1.0 / (c * n), lambda al, n: 1.0 / (al * n)),
    "lasso": (lambda a, n: a, lambda al, n: al),
    "ridge": (lambda a, n: a / n, lambda al, n: al * n),
    "snapml": (lambda r, n: r / n, lambda al, n: al * n),
    "vw": (lambda l2, n: l2, lambda al, n: al),
}
#: The peers :func:`alpha_from_peer` converts from.
PEERS = tuple(sorted(_PEERS))


def _peer(peer):
    if peer not in _PEERS:
        raise ValueError(f"peer must be one of {list(PEERS)}, got {peer!r}")
    return _PEERS[peer]


def alpha_from_peer(peer: str, value: float, n_examples) -> float:
    """Roofline's ``alpha`` for a peer's regularisation parameter on ``n_examples`` examples.

    ``alpha`` weighs the regulariser against the *mean* loss: ``mean_i l_i + alpha R(w)``
    (see :mod:`roofline.glm`).

    Parameters
    ----------
    peer : {"C", "lasso", "ridge", "snapml", "vw"}
        ``"C"``: scikit-learn ``LogisticRegression(C=value)`` / ``LinearSVC(C=value)`` /
        liblinear, ``alpha = 1 / (C n)``; ``"lasso"``: ``Lasso(alpha=value)``, ``alpha = value``;
        ``"ridge"``: ``Ridge(alpha=value)``, ``alpha = value / n``; ``"snapml"``: snapml's
        ``regularizer=value``, ``alpha = value / n``; ``"vw"``: Vowpal Wabbit's ``--l2 value``
        (its online learners add ``l2 * w`` to every example's gradient),
        ``alpha = value``.
    value : float
        Positive.
    n_examples : int or float
        The number of examples (the sum of the example weights for weighted fits).

    Returns
    -------
    float
    """
    to_alpha = _peer(peer)[0]
    if not value > 0:
        raise ValueError(f"value must be positive, got {value!r}")
    return float(to_alpha(float(value), float(n_examples)))


def alpha_to_peer(peer: str, alpha: float, n_examples) -> float:
    """Inverse of :func:`alpha_from_peer`: the peer's parameter for Roofline's ``alpha``.

    Parameters
    ----------
    peer : {"C", "lasso", "ridge", "snapml", "vw"}
        The peer convention (see :func:`alpha_from_peer`).
    alpha : float
        Roofline's regularisation strength (against the mean loss); positive.
    n_examples : int or float
        The number of examples (the sum of the example weights for weighted fits).

    Returns
    -------
    float
        The peer's value: ``C = 1 / (alpha n)``, ``Lasso`` ``alpha``, ``Ridge``
        ``alpha * n``, snapml ``regularizer = alpha * n`` or VW ``--l2 alpha``.

    Raises
    ------
    ValueError
        ``peer`` is unknown or ``alpha`` is not positive.
    """
    from_alpha = _peer(peer)[1]
    if not alpha > 0:
        raise ValueError(f"alpha must be positive, got {alpha!r}")
    return float(from_alpha(float(alpha), float(n_examples)))
