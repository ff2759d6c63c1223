"""Models: the :class:`Model` interface and generalised linear models (:class:`GLM`).

A GLM holds a dense ``k x n`` coefficient matrix ``coef`` (Fortran order, one feature column
contiguous) and an intercept of length ``k``; ``k > 1`` trains ``k`` outputs at once
(multi-label), which is where ``A*S`` with ``k > 1`` earns its keep.

Objective (mean loss plus regularisation), for a DataSource with examples ``x_j`` (columns),
labels ``y_j`` (length ``k``) and weights ``w_j`` (1 when absent)::

    F(W, b) = (1 / sum_j w_j) * sum_j w_j * sum_r l(y_rj, eta_rj)   [+ mixin terms]
    eta_j   = W x_j + b

with, per output (labels ``y`` in {0, 1} for the classifiers, ``s = 2y - 1``)::

    squared         l = (eta - y)^2 / 2       (alias "linear")
    logistic        l = log(1 + exp(eta)) - y * eta
    hinge           l = max(0, 1 - s * eta)
    squared_hinge   l = max(0, 1 - s * eta)^2

Loss names and aliases are those of :mod:`roofline.glm` (``loss="linear"`` is the squared
loss).  The regularisers are mixins (``L2Regularizer``: ``alpha/2 ||W||_F^2``,
``L1Regularizer``: ``alpha ||W||_1``); the intercept is never regularised.  The conversions to
the peers' conventions live in one place, :func:`roofline.glm.alpha_from_peer`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from roofline import glm, gmat
from roofline.gmat import Options, option

__all__ = ["GLM", "GLMOptions", "LOSSES", "Model"]

logger = logging.getLogger(__name__)

#: Canonical loss names of :class:`GLM` (``glm.GLM_LOSSES``).
LOSSES = glm.GLM_LOSSES
# the names GLMOptions accepts: the canonical ones and their aliases
_LOSS_NAMES = LOSSES + tuple(a for a, c in sorted(glm.LOSS_ALIASES.items()) if c in LOSSES)


def _fortran(a):
    """``a`` in Fortran order (a copy only when it is not), on its own device."""
    return a if a.flags.f_contiguous else gmat.get_array_module(a).asfortranarray(a)


class Model:
    """Base class of models: parameters plus the per-minibatch gradient.

    Subclasses implement :meth:`init`, :meth:`gradient`, :meth:`loss`, :meth:`predict` and
    :meth:`parameters` (name -> array, the arrays optimizers update in place).  A model whose
    minibatch step is not a gradient step (a factor model's closed-form or multiplicative
    update) implements ``update(batch, cache) -> (loss_sum, weight_sum)`` instead of
    :meth:`gradient` and trains with :class:`~roofline.learners.ModelUpdate`.
    """

    opts: Options

    def init(self, n_features: int) -> None:  # pragma: no cover - abstract
        """Allocate the parameters for ``n_features`` features.

        Parameters
        ----------
        n_features : int
            Rows of the data (features).
        """
        raise NotImplementedError

    @property
    def initialized(self) -> bool:  # pragma: no cover - abstract
        """bool: whether :meth:`init` (or a load) has allocated the parameters."""
        raise NotImplementedError

    def parameters(self) -> dict:  # pragma: no cover - abstract
        """The trainable arrays, which optimizers update in place.

        Returns
        -------
        dict
            Name to array (numpy or cupy).
        """
        raise NotImplementedError

    def gradient(self, batch, cache):  # pragma: no cover - abstract
        """Loss and gradient of a minibatch at the current parameters.

        Parameters
        ----------
        batch : Minibatch
            The examples (columns of ``batch.X``), labels and weights.
        cache : BufferCache or None
            Where to take the temporaries and outputs from (fresh arrays when None).

        Returns
        -------
        tuple
            ``(loss_sum, weight_sum, ...)`` followed by the gradients of the parameters; see
            :meth:`GLM.gradient`.
        """
        raise NotImplementedError

    def loss(self, batch, cache) -> tuple[float, float]:  # pragma: no cover - abstract
        """The loss of a minibatch at the current parameters.

        Parameters
        ----------
        batch : Minibatch
            The examples, labels and weights.
        cache : BufferCache or None
            Where to take the temporaries from (fresh arrays when None).

        Returns
        -------
        loss_sum : float
            The weighted sum of the examples' losses.
        weight_sum : float
            The sum of the weights (the number of examples without weights).
        """
        raise NotImplementedError

    def predict(self, X, cache=None):  # pragma: no cover - abstract
        """Predictions for the examples (columns) of ``X``.

        Parameters
        ----------
        X : CSC matrix or dense array, shape (n_features, m)
            The examples.
        cache : BufferCache, optional
            Where to take temporaries from.

        Returns
        -------
        array
            One prediction per example (and output).
        """
        raise NotImplementedError

    @property
    def device(self) -> str:
        """Where the parameters live: ``"cpu"`` or ``"gpu"`` (``"cpu"`` before :meth:`init`)."""
        params = self.parameters() if self.initialized else {}
        return gmat.device_of(next(iter(params.values()))) if params else "cpu"

    def to_device(self, device: str) -> None:  # pragma: no cover - abstract
        """Move the parameters to ``device`` (``"cpu"`` or ``"gpu"``).

        Parameters
        ----------
        device : {"cpu", "gpu"}
            Where the parameters go.
        """
        raise NotImplementedError


@dataclass
class GLMOptions(Options):
    """Options of :class:`GLM` (BIDMach ``GLM.Opts``)."""

    loss: str = option("logistic", "loss (link) of every output (linear = squared)",
                       choices=_LOSS_NAMES)
    n_outputs: int = option(1, "k: outputs trained at once (rows of the k x n model)", low=1)
    fit_intercept: bool = option(True, "learn an (unregularised) intercept per output")
    dtype: str = option("float32", "value dtype of the model", choices=("float32", "float64"))
    init_scale: float = option(0.0, "initial coefficients ~ N(0, init_scale^2)", low=0.0)
    seed: int = option(0, "seed of the initialisation RNG", low=0)


class GLM(Model):
    """Generalised linear model with ``k`` outputs sharing one loss.

    Parameters
    ----------
    opts : GLMOptions, optional
    **kwargs
        Override fields of ``opts`` (``GLM(loss="linear", n_outputs=3)``).

    Attributes
    ----------
    coef : ndarray, shape (k, n_features), Fortran order
    intercept : ndarray, shape (k,)
    """

    def __init__(self, opts: GLMOptions | None = None, **kwargs):
        base = (opts or GLMOptions()).to_dict()
        base.update(kwargs)
        self.opts = GLMOptions.from_dict(base, "GLM")
        self.coef = None
        self.intercept = None

    @property
    def loss_name(self) -> str:
        """The canonical name of ``opts.loss`` (``"squared"`` for ``"linear"``)."""
        return glm.resolve_loss(self.opts.loss)

    # -- parameters ---------------------------------------------------------------------------
    @property
    def dtype(self) -> np.dtype:
        """numpy.dtype: the value dtype of the model (``opts.dtype``)."""
        return np.dtype(self.opts.dtype)

    @property
    def n_outputs(self) -> int:
        """int: ``k``, the outputs trained at once (``opts.n_outputs``)."""
        return self.opts.n_outputs

    @property
    def n_features(self) -> int | None:
        """int or None: columns of ``coef``; None before :meth:`init`."""
        return None if self.coef is None else int(self.coef.shape[1])

    @property
    def initialized(self) -> bool:
        """bool: whether ``coef`` is allocated."""
        return self.coef is not None

    def init(self, n_features: int, device: str = "cpu") -> None:
        """Allocate ``coef`` (zeros, or ``N(0, init_scale^2)``) and a zero intercept on
        ``device`` (``"cpu"`` or ``"gpu"``; the random start is drawn on the host, so it is the
        same on both).

        Parameters
        ----------
        n_features : int
            Columns of ``coef`` (rows of the data).
        device : {"cpu", "gpu"}
            Where the parameters are allocated.
        """
        k, dt = self.opts.n_outputs, self.dtype
        if self.opts.init_scale > 0:
            rng = np.random.default_rng(self.opts.seed)
            coef = np.asfortranarray(
                rng.normal(0.0, self.opts.init_scale, (k, n_features)).astype(dt)
            )
            self.coef = _fortran(gmat.to_device(coef, device))
        else:
            self.coef = gmat.zeros((k, n_features), dt, order="F", device=device)
        self.intercept = gmat.zeros(k, dt, device=device)

    def to_device(self, device: str) -> None:
        """Move ``coef`` and ``intercept`` to ``device`` (no copy when already there).

        Parameters
        ----------
        device : {"cpu", "gpu"}
            Where the parameters go.

        Raises
        ------
        RuntimeError
            The model is not initialised.
        """
        self._check_init()
        self.coef = _fortran(gmat.to_device(self.coef, device))
        self.intercept = gmat.to_device(self.intercept, device)

    def _check_init(self):
        if self.coef is None:
            raise RuntimeError("the model is not initialised: call init(n_features) or train it")

    def set_parameters(self, coef, intercept=None) -> None:
        """Set the model from arrays (copied into Fortran-ordered arrays of the model dtype, on
        the device of ``coef``: numpy or cupy).

        Parameters
        ----------
        coef : array, shape (k, n_features) or (n_features,) when k == 1
            The coefficients.
        intercept : float or array of shape (k,), optional
            The intercepts (broadcast to ``k``); zeros when omitted.

        Raises
        ------
        ValueError
            ``coef`` has a number of rows other than ``n_outputs``.
        """
        xp = gmat.get_array_module(coef)
        coef = xp.asarray(coef, dtype=self.dtype)
        if coef.ndim == 1:
            coef = coef.reshape(1, -1)
        if coef.shape[0] != self.opts.n_outputs:
            raise ValueError(
                f"coef has {coef.shape[0]} rows but the model has n_outputs="
                f"{self.opts.n_outputs}"
            )
        self.coef = xp.array(coef, order="F", copy=True)
        k = coef.shape[0]
        if intercept is None:
            self.intercept = xp.zeros(k, self.dtype)
        else:
            b = gmat.to_device(intercept, gmat.device_of(coef))
            self.intercept = xp.array(xp.broadcast_to(xp.asarray(b, self.dtype), (k,)))

    def parameters(self) -> dict:
        """The trainable arrays, which optimizers update in place.

        Returns
        -------
        dict
            ``{"coef": coef, "intercept": intercept}`` (None before :meth:`init`).
        """
        return {"coef": self.coef, "intercept": self.intercept}

    def _check_ready(self, X):
        self._check_init()
        if gmat.device_of(X) != gmat.device_of(self.coef):
            raise TypeError(
                f"X is on the {gmat.device_of(X).upper()} but the model is on the "
                f"{gmat.device_of(self.coef).upper()}: move one of them (model.to_device, "
                f"gmat.to_device, or the Learner's device option)"
            )
        if X.shape[0] != self.coef.shape[1]:
            raise ValueError(
                f"X has {X.shape[0]} features (rows) but the model has {self.coef.shape[1]}"
            )
        if X.dtype != self.dtype:
            raise TypeError(
                f"X has dtype {X.dtype} but the model has dtype {self.dtype}; convert the data "
                f"or set GLM(dtype='{X.dtype}')"
            )

    # -- forward ------------------------------------------------------------------------------
    def linear(self, X, cache=None, tag="glm.eta"):
        """``eta = W X + b``, shape ``(k, m)`` (Fortran order).

        Parameters
        ----------
        X : CSC matrix or dense array, shape (n_features, m)
            The examples, on the model's device and of its dtype.
        cache : BufferCache, optional
            Where to take the result from (a new array when omitted).
        tag : str
            The result's tag in ``cache``.

        Returns
        -------
        array, shape (k, m), Fortran order
            The margins; a buffer of ``cache`` when given (overwritten by the next call with
            the same tag).

        Raises
        ------
        RuntimeError
            The model is not initialised.
        TypeError
            ``X`` is on another device or of another dtype than the model.
        ValueError
            ``X`` has a number of rows other than ``n_features``.
        """
        self._check_ready(X)
        k, m = self.coef.shape[0], X.shape[1]
        if gmat.is_sparse(X):
            eta = gmat.mult_as(self.coef, X, cache=cache, tag=tag)
        else:
            gmat.as_dense(X, "X", ndim=(2,))
            xp = gmat.get_array_module(X)
            eta = (
                cache.empty((k, m), self.dtype, tag=tag, order="F", like=X)
                if cache is not None else xp.empty((k, m), self.dtype, order="F")
            )
            xp.matmul(self.coef, X, out=eta)
        if self.opts.fit_intercept:
            if k <= 64:  # row by row: broadcasting into the F-ordered eta would buffer
                for r in range(k):
                    eta[r] += self.intercept[r]
            else:
                eta += self.intercept[:, None]
        return eta

    def predict(self, X, cache=None):
        """Mean prediction: probabilities for a loss of labels in [0, 1] (``logistic``),
        ``eta`` otherwise.

        Parameters
        ----------
        X : CSC matrix or dense array, shape (n_features, m)
            The examples, on the model's device and of its dtype.
        cache : BufferCache, optional
            Not used: the result is always a new array.

        Returns
        -------
        array, shape (k, m) or (m,) when k == 1
            A new array.

        Raises
        ------
        RuntimeError, TypeError, ValueError
            As :meth:`linear`.
        """
        eta = self.linear(X, cache=None)
        if glm.LOSS_LABELS[self.loss_name] == "unit":
            gmat.expit(eta, out=eta)
        return eta[0].copy() if eta.shape[0] == 1 else eta

    def decision_function(self, X):
        """``eta = W X + b`` as a new array, ``(k, m)`` or ``(m,)`` when ``k == 1``.

        Parameters
        ----------
        X : CSC matrix or dense array, shape (n_features, m)
            The examples, on the model's device and of its dtype.

        Returns
        -------
        array, shape (k, m) or (m,) when k == 1
            The margins.

        Raises
        ------
        RuntimeError, TypeError, ValueError
            As :meth:`linear`.
        """
        eta = self.linear(X, cache=None)
        return eta[0].copy() if eta.shape[0] == 1 else eta

    # -- loss and gradient --------------------------------------------------------------------
    def _labels(self, y, m):
        k = self.opts.n_outputs
        if y is None:
            raise ValueError("the minibatch has no labels (y is None)")
        if y.ndim == 1:
            if k != 1:
                raise ValueError(f"y is 1-D but the model has n_outputs={k}; y must be ({k}, m)")
            y = y.reshape(1, -1)
        if y.shape != (k, m):
            raise ValueError(f"y has shape {y.shape}, expected ({k}, {m}) (one column per example)")
        return y

    def check_labels(self, y) -> None:
        """Raise ``ValueError`` for labels the loss cannot take (NaN; outside [0, 1] for
        logistic; anything but {0, 1} (or {-1, 1}) for the hinge losses).

        Parameters
        ----------
        y : array
            Labels, any shape.

        Raises
        ------
        ValueError
            Labels the loss cannot take (see :func:`roofline.glm.check_labels`).
        """
        glm.check_labels(y, self.loss_name)

    def loss_deriv(self, eta, y, w, cache=None, D=None):
        """Per-example losses and derivatives ``dl/deta`` (weighted, not normalised).

        Parameters
        ----------
        eta : array (k, m)
            Overwritten only when ``D`` is ``eta`` itself.
        y : array (k, m) or (m,)
        w : array (m,) or None
        cache : BufferCache, optional
        D : array (k, m), optional
            Output buffer of the derivatives (taken from ``cache`` when omitted).

        Returns
        -------
        loss_sum : float
            ``sum_j w_j sum_r l(y_rj, eta_rj)``.
        weight_sum : float
            ``sum_j w_j`` (``m`` without weights).
        D : array (k, m), Fortran order
            ``w_j * dl/deta_rj``.

        Notes
        -----
        The table's GLM form over the arrays, on their device (:func:`roofline.glm.loss_deriv`:
        the table's own scalar function in a numba or numba-cuda kernel, in float64).
        """
        k, m = eta.shape
        y = self._labels(y, m)
        dt = eta.dtype

        def buf(tag, dtype=dt):
            if cache is None:
                return gmat.get_array_module(eta).empty((k, m), dtype=dtype, order="F")
            return cache.empty((k, m), dtype, tag=tag, order="F", like=eta)

        self.check_labels(y)

        if D is None:
            D = buf("glm.deriv")
        work = buf("glm.loss") if gmat.device_of(eta) == "gpu" else None
        return glm.loss_deriv(self.loss_name, eta, y, w, out=D, work=work)

    def loss(self, batch, cache=None):
        """``(loss_sum, weight_sum)`` of a minibatch (see :meth:`loss_deriv`).

        Parameters
        ----------
        batch : Minibatch
            The examples, labels (``(k, m)`` or ``(m,)``) and weights.
        cache : BufferCache, optional
            Where to take the temporaries from.

        Returns
        -------
        loss_sum : float
            ``sum_j w_j sum_r l(y_rj, eta_rj)``.
        weight_sum : float
            ``sum_j w_j`` (``m`` without weights).
        """
        eta = self.linear(batch.X, cache=cache, tag="glm.eval_eta")
        loss_sum, weight_sum, _ = self.loss_deriv(eta, batch.y, batch.w, cache, D=None)
        return loss_sum, weight_sum

    def gradient(self, batch, cache=None):
        """Loss and *summed* gradient of a minibatch.

        Parameters
        ----------
        batch : Minibatch
            The examples, labels (``(k, m)`` or ``(m,)``) and weights.
        cache : BufferCache, optional
            Where to take the outputs and temporaries from (new arrays when omitted).

        Returns
        -------
        loss_sum, weight_sum : float
        G : array (k, n), Fortran order
            ``sum_j w_j dl/deta_j x_j^T`` (the primitive ``A*S^T``), not normalised.
        g0 : array (k,)
            The intercept gradient (zeros when ``fit_intercept`` is off).
        D : array (k, m)
            The weighted derivatives (``w_j dl/deta_j``).
        """
        X = batch.X
        eta = self.linear(X, cache=cache)
        loss_sum, weight_sum, D = self.loss_deriv(eta, batch.y, batch.w, cache)
        k, n = self.coef.shape
        if gmat.is_sparse(X):
            G = gmat.mult_ast(D, X, cache=cache, tag="glm.grad")
        else:
            xp = gmat.get_array_module(X)
            G = (
                cache.empty((k, n), self.dtype, tag="glm.grad", order="F", like=X)
                if cache is not None else xp.empty((k, n), self.dtype, order="F")
            )
            xp.matmul(D, X.T, out=G)
        g0 = (
            cache.empty((k,), self.dtype, tag="glm.g0", like=X)
            if cache is not None else gmat.get_array_module(X).empty(k, self.dtype)
        )
        if self.opts.fit_intercept:
            np.sum(D, axis=1, out=g0)
        else:
            g0.fill(0)
        return loss_sum, weight_sum, G, g0, D

    def flops_per_step(self, batch) -> int:
        """Multiply-add flops of the step's primitives (``A*S`` and ``A*S^T``): ``4 nnz k``.

        Parameters
        ----------
        batch : Minibatch
            The minibatch (its ``X``; a dense one counts every entry).

        Returns
        -------
        int
            ``4 * nnz * k``.
        """
        nnz = batch.X.nnz if gmat.is_sparse(batch.X) else batch.X.size
        return 4 * int(nnz) * self.opts.n_outputs

    def __repr__(self) -> str:
        c = self.coef
        shape = "uninitialised" if c is None else f"{c.shape[0]}x{c.shape[1]}"
        return f"GLM(loss={self.opts.loss!r}, {shape}, dtype={self.opts.dtype})"
