"""Optimizers (BIDMach ``Updater``): SGD with step schedules, ADAGrad (fused with the gradient on
sparse minibatches) and batch L-BFGS over full passes.

Minibatch optimizers implement :meth:`Optimizer.step`: gradient from the model (through the
gmat primitives), smooth mixin terms, the update, then the mixins' proximal steps.  The gradient
of a minibatch is its weighted *mean* (``G / sum_j w_j``), so step sizes do not depend on the
batch size.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from roofline import glm, gmat
from roofline.gmat import Options, option

from ._models import GLM

__all__ = [
    "ADAGrad",
    "ADAGradOptions",
    "LBFGS",
    "LBFGSOptions",
    "ModelUpdate",
    "ModelUpdateOptions",
    "Optimizer",
    "SGD",
    "SGDOptions",
]

logger = logging.getLogger(__name__)


def _buffer(cache, shape, dtype, tag, like):
    if cache is None:
        return gmat.get_array_module(like).empty(shape, dtype=dtype, order="F")
    return cache.empty(shape, dtype, tag=tag, order="F", like=like)


class Optimizer:
    """Base class.  ``batch = True`` for optimizers that drive whole passes themselves.

    Parameters
    ----------
    opts : Options, optional
        The options, an instance of the class's ``options_class`` (defaults when omitted).
    **kwargs
        Override fields of ``opts`` (``SGD(lr=0.05)``).

    Raises
    ------
    ValueError, OptionTypeError
        An unknown option or a bad value.
    """

    batch = False
    opts: Options

    def __init__(self, opts=None, **kwargs):
        cls = self.options_class
        base = (opts or cls()).to_dict()
        base.update(kwargs)
        self.opts = cls.from_dict(base, type(self).__name__)
        self.t = 0

    options_class = Options

    def init(self, model, cache=None) -> None:
        """Allocate state for ``model`` (called by the learner before training).

        Resets the step counter ``t``; subclasses allocate their accumulators next to the
        model's parameters (numpy or cupy).

        Parameters
        ----------
        model : Model
            The initialised model.
        cache : BufferCache, optional
            The learner's buffer cache.
        """
        self.t = 0

    def state(self) -> dict:
        """Arrays and scalars to checkpoint (``t`` and accumulators).

        Returns
        -------
        dict
            Name to numpy/cupy array or numpy scalar; :meth:`set_state` takes it back.
        """
        return {"t": np.int64(self.t)}

    def set_state(self, state: dict) -> None:
        """Restore what :meth:`state` returned (from a checkpoint).

        Parameters
        ----------
        state : dict
            The saved state; arrays go to the device of the current accumulators.
        """
        self.t = int(state["t"])

    # -- minibatch step -----------------------------------------------------------------------
    def step(self, model, batch, mixins=(), cache=None):
        """One update from one minibatch; returns ``(loss_sum, weight_sum)`` before the step.

        The model's summed gradient is divided by the minibatch's weight, the mixins add their
        gradient terms, :meth:`apply` updates the model, and the mixins' proximal steps follow.

        Parameters
        ----------
        model : Model
            The model, updated in place.
        batch : Minibatch
            The examples, labels and weights.
        mixins : sequence of Mixin
            The terms added to the objective.
        cache : BufferCache, optional
            Where to take the temporaries from.

        Returns
        -------
        loss_sum : float
            The weighted loss of the minibatch at the model before the step.
        weight_sum : float
            The minibatch's total weight.
        """
        loss_sum, weight_sum, G, g0, _ = model.gradient(batch, cache)
        if weight_sum > 0:
            inv = 1.0 / weight_sum
            G *= inv
            g0 *= inv
        for m in mixins:
            m.add_gradient(model, G, g0)
        step = self.apply(model, G, g0, cache)
        for m in mixins:
            m.prox(model, step)
        self.t += 1
        return loss_sum, weight_sum

    def apply(self, model, G, g0, cache):  # pragma: no cover - abstract
        """Apply the update from the mean gradient; return the step size(s) for prox.

        Parameters
        ----------
        model : Model
            The model, updated in place.
        G : array, shape (k, n)
            Mean gradient of the coefficients (the mixins' terms included); may be overwritten.
        g0 : array, shape (k,)
            Mean gradient of the intercept.
        cache : BufferCache or None
            Where to take the temporaries from.

        Returns
        -------
        float or array like ``G``
            The step size, or the per-coefficient step sizes, given to the mixins' ``prox``.
        """
        raise NotImplementedError

    def __repr__(self):
        return f"{type(self).__name__}({self.opts!r})"


@dataclass
class ModelUpdateOptions(Options):
    """Options of :class:`ModelUpdate` (none: the model's own update carries its options)."""


class ModelUpdate(Optimizer):
    """The model's own minibatch update (BIDMach's models with an ``mupdate`` and no updater).

    Factor models whose step is not a gradient step (k-means' centroid averages, NMF's
    multiplicative updates, online variational Bayes, alternating least squares) implement
    ``Model.update(batch, cache) -> (loss_sum, weight_sum)``; this optimizer calls it once per
    minibatch, so that such a model runs in a :class:`~roofline.learners.Learner` with any
    DataSource, held-out evaluation, checkpoints and the progress bar like a GLM.  Mixins are
    not applied (the model's options carry its regularisation).

    Parameters
    ----------
    opts : ModelUpdateOptions, optional
        The options (none).
    **kwargs
        Fields of ``opts`` (there are none: any keyword is an error).

    Raises
    ------
    TypeError
        At :meth:`init`, for a model without an ``update`` method.
    """

    options_class = ModelUpdateOptions

    def init(self, model, cache=None) -> None:
        if not callable(getattr(model, "update", None)):
            raise TypeError(f"ModelUpdate needs a model with an update(batch, cache) method, "
                            f"got {type(model).__name__}")
        super().init(model, cache)

    def step(self, model, batch, mixins=(), cache=None):
        loss_sum, weight_sum = model.update(batch, cache)
        self.t += 1
        return float(loss_sum), float(weight_sum)


def _lr_at(opts, t: int) -> float:
    if opts.schedule == "constant" or opts.texp == 0:
        return opts.lr
    return opts.lr * (1.0 + t / opts.t0) ** (-opts.texp)


@dataclass
class SGDOptions(Options):
    """Options of :class:`SGD` (step ``lr_t = lr * (1 + t / t0)^-texp`` with ``invscaling``)."""

    lr: float = option(0.1, "learning rate", low=0.0, low_open=True)
    schedule: str = option("invscaling", "step schedule", choices=("constant", "invscaling"))
    texp: float = option(0.5, "decay exponent of the invscaling schedule", low=0.0)
    t0: float = option(10.0, "decay time scale (minibatches) of invscaling", low=0.0,
                       low_open=True)


class SGD(Optimizer):
    """Minibatch stochastic gradient descent: ``W -= lr_t * mean gradient``.

    Parameters
    ----------
    opts : SGDOptions, optional
        The options (defaults when omitted).
    **kwargs
        Override fields of ``opts`` (``SGD(lr=0.05)``).
    """

    options_class = SGDOptions

    def apply(self, model, G, g0, cache):
        lr = _lr_at(self.opts, self.t)
        G *= lr
        model.coef -= G
        if model.opts.fit_intercept:
            model.intercept -= lr * g0
        return lr


@dataclass
class ADAGradOptions(Options):
    """Options of :class:`ADAGrad` (BIDMach ``ADAGrad.Opts``)."""

    lr: float = option(0.1, "learning rate", low=0.0, low_open=True)
    epsilon: float = option(1e-8, "added to sqrt(sumsq) in the denominator", low=0.0)
    initsumsq: float = option(1e-8, "initial value of the squared-gradient sums", low=0.0)
    schedule: str = option("constant", "extra decay on top of ADAGrad's",
                           choices=("constant", "invscaling"))
    texp: float = option(0.5, "decay exponent of the invscaling schedule", low=0.0)
    t0: float = option(10.0, "decay time scale (minibatches) of invscaling", low=0.0,
                       low_open=True)
    fused: bool = option(True, "fuse gradient and update on sparse minibatches (touched "
                               "columns only)")
    online: bool = option(False, "update after every example (Vowpal Wabbit's online "
                                 "ADAGrad; lr is then a per-example step) instead of once per "
                                 "minibatch; needs a GLM, sparse CPU minibatches and fused=True")


class ADAGrad(Optimizer):
    """ADAGrad: per-coordinate steps ``lr / (sqrt(sum g^2) + epsilon)``.

    With ``fused=True`` and a sparse minibatch, the gradient ``A*S^T`` and the update run in one
    kernel over the touched feature columns (the gradient matrix is never built).  The
    regularisers are then applied *lazily*, on the touched columns only (as BIDMach and VW do):
    without regularisation the fused step equals the unfused one exactly (the untouched columns
    have a zero gradient and an unchanged accumulator); with L1/L2 they differ by design on
    untouched columns.  Mixins other than :class:`L1Regularizer`/:class:`L2Regularizer` that add
    gradient terms make the step fall back to the unfused path.

    For a :class:`GLM` the whole step -- forward product, loss, gradient and update -- is one
    gmat call (:func:`roofline.glm.glm_adagrad_step`), one sweep over the minibatch.

    With ``online=True`` the model is updated after every example of the minibatch, in order
    (:func:`roofline.glm.glm_adagrad_online_step`): Vowpal Wabbit's online ADAGrad, with each
    example's gradient taken at the model its predecessors left.  The minibatch is then only
    the unit of data delivery and bookkeeping; ``lr`` is a per-example step (the gradient is not
    averaged over the minibatch), and the training loss reported is VW's progressive validation
    loss (each example's loss before its own update).

    Parameters
    ----------
    opts : ADAGradOptions, optional
        The options (defaults when omitted).
    **kwargs
        Override fields of ``opts`` (``ADAGrad(lr=0.5, fused=False)``).
    """

    options_class = ADAGradOptions

    def init(self, model, cache=None) -> None:
        super().init(model, cache)
        # the accumulators live with the model (numpy or cupy)
        xp = gmat.get_array_module(model.coef)
        self.sumsq = xp.full(model.coef.shape, self.opts.initsumsq, dtype=model.dtype, order="F")
        self.sumsq0 = xp.full(model.coef.shape[0], self.opts.initsumsq, dtype=model.dtype)
        self.workspace = glm.FusedWorkspace()

    def state(self) -> dict:
        return {**super().state(), "sumsq": self.sumsq, "sumsq0": self.sumsq0}

    def set_state(self, state: dict) -> None:
        super().set_state(state)
        # on the device of the accumulators that init() made for the model (host otherwise)
        like = getattr(self, "sumsq", None)
        dev = "cpu" if like is None else gmat.device_of(like)
        xp = gmat.get_array_module(like) if like is not None else np
        self.sumsq = xp.array(gmat.to_device(state["sumsq"], dev), order="F")
        self.sumsq0 = xp.array(gmat.to_device(state["sumsq0"], dev))

    def _step_intercept(self, model, g0, lr):
        if model.opts.fit_intercept:
            self.sumsq0 += g0 * g0
            model.intercept -= lr * g0 / (gmat.get_array_module(g0).sqrt(self.sumsq0)
                                          + self.opts.epsilon)

    def apply(self, model, G, g0, cache):
        lr = _lr_at(self.opts, self.t)
        tmp = _buffer(cache, G.shape, G.dtype, "adagrad.tmp", G)
        np.multiply(G, G, out=tmp)
        self.sumsq += tmp
        np.sqrt(self.sumsq, out=tmp)
        tmp += self.opts.epsilon
        np.divide(lr, tmp, out=tmp)  # per-coordinate step
        G *= tmp
        model.coef -= G
        self._step_intercept(model, g0, lr)
        return tmp

    def can_fuse(self, model, batch, mixins) -> bool:
        """Whether :meth:`step` takes the fused path for this minibatch.

        Parameters
        ----------
        model : Model
            The model.
        batch : Minibatch
            The minibatch.
        mixins : sequence of Mixin
            The terms added to the objective.

        Returns
        -------
        bool
            True with ``fused=True``, a sparse minibatch of fewer than
            :data:`roofline.glm.MAX_NNZ` nonzeros, and only fusable (L1/L2) mixins.
        """
        return (
            self.opts.fused
            and gmat.is_sparse(batch.X)
            and batch.X.nnz < glm.MAX_NNZ
            and all(m.fusable for m in mixins)
        )

    def step(self, model, batch, mixins=(), cache=None):
        """One update from one minibatch; returns ``(loss_sum, weight_sum)`` before the step.

        Fused when :meth:`can_fuse` says so (one gmat call for a :class:`GLM`, the fused update
        over the touched columns otherwise), else the generic step of :class:`Optimizer`.

        Parameters
        ----------
        model : Model
            The model, updated in place.
        batch : Minibatch
            The examples, labels and weights.
        mixins : sequence of Mixin
            The terms added to the objective.
        cache : BufferCache, optional
            Where to take the temporaries from.

        Returns
        -------
        loss_sum : float
            The weighted loss of the minibatch before the step (with ``online=True``, each
            example's loss before its own update).
        weight_sum : float
            The minibatch's total weight.

        Raises
        ------
        ValueError
            ``online=True`` on a minibatch or model the online step cannot take.
        """
        if not self.can_fuse(model, batch, mixins):
            if self.opts.online:
                raise ValueError(
                    "ADAGrad(online=True) needs fused=True, sparse minibatches of fewer than "
                    f"{glm.MAX_NNZ} nonzeros and only L1/L2 regularizer mixins "
                    f"(got fused={self.opts.fused}, a {type(batch.X).__name__} minibatch, "
                    f"mixins {[type(m).__name__ for m in mixins]})")
            return super().step(model, batch, mixins, cache)
        X = batch.X
        lr = _lr_at(self.opts, self.t)
        l1 = float(sum(m.l1 for m in mixins))
        l2 = float(sum(m.l2 for m in mixins))
        if type(model) is GLM:
            # a GLM: forward, loss, gradient and update in one gmat call
            model._check_ready(X)
            y = model._labels(batch.y, X.shape[1])  # values are checked by the step
            fit = model.opts.fit_intercept
            step = glm.glm_adagrad_online_step if self.opts.online else glm.glm_adagrad_step
            loss_sum, weight_sum = step(
                model.coef, self.sumsq, X, y, loss=model.opts.loss, lr=lr,
                eps=self.opts.epsilon, w=batch.w, intercept=model.intercept if fit else None,
                sumsq0=self.sumsq0 if fit else None, l2=l2, l1=l1,
                workspace=self.workspace)[:2]
            self.t += 1
            return loss_sum, weight_sum
        if self.opts.online:
            raise ValueError("ADAGrad(online=True) needs a GLM model (got "
                             f"{type(model).__name__})")
        eta = model.linear(X, cache=cache)
        loss_sum, weight_sum, D = model.loss_deriv(eta, batch.y, batch.w, cache)
        if weight_sum > 0:
            D *= 1.0 / weight_sum
        if model.opts.fit_intercept:
            g0 = cache.empty((D.shape[0],), D.dtype, tag="adagrad.g0", like=D) if cache \
                else gmat.get_array_module(D).empty(D.shape[0], D.dtype)
            np.sum(D, axis=1, out=g0)
            self._step_intercept(model, g0, lr)
        glm.adagrad_glm_step(model.coef, self.sumsq, X, D, lr=lr, eps=self.opts.epsilon,
                              l2=l2, l1=l1, workspace=self.workspace)
        self.t += 1
        return loss_sum, weight_sum


@dataclass
class LBFGSOptions(Options):
    """Options of :class:`LBFGS` (scipy's L-BFGS-B over full passes)."""

    max_iter: int = option(100, "maximum L-BFGS iterations", low=1)
    max_passes: int = option(0, "maximum function evaluations = passes (0: 2 * max_iter + 20)",
                             low=0)
    tol: float = option(1e-6, "projected-gradient tolerance (scipy gtol)", low=0.0)
    ftol: float = option(1e-12, "relative objective decrease tolerance", low=0.0)
    memory: int = option(10, "number of stored correction pairs", low=1)
    precondition: str = option(
        "auto", "minimise over rescaled coefficients u_j = sigma_j w_j, sigma_j the power of "
                "two just below feature j's largest |value| (features above 1 only): 'auto' = "
                "when some feature's largest |value| exceeds 2^20, 'on', 'off'",
        choices=("auto", "on", "off"))


class LBFGS(Optimizer):
    """Batch L-BFGS: each objective/gradient evaluation is one full pass over the training
    minibatches (the gradient of each minibatch through ``A*S^T``), plus the mixins' terms.

    Badly scaled features are handled by preconditioning (option ``precondition``): the first
    pass also records each feature's largest ``|value|`` ``s_j``; when one exceeds ``2^20``
    (``"auto"``) L-BFGS-B minimises over ``u_j = sigma_j w_j``, ``sigma_j`` the power of two in
    ``(s_j / 2, s_j]`` for ``s_j > 1`` (else 1), the intercept unscaled.  This is a change of
    variables (same minimiser; powers of two make it exact), so a feature scaled by ``1e30``
    or holding a ``1e300`` converges like a unit-scaled one instead of defeating the line search.
    With no such feature the iterates are those of plain L-BFGS-B.

    A stop on ``max_iter``/``max_passes`` or an abnormal line-search stop is reported with a
    :class:`sklearn.exceptions.ConvergenceWarning` (``self.result`` holds scipy's result);
    non-finite objective values raise ``FloatingPointError``.

    Non-smooth mixins (L1) are refused: use SGD/ADAGrad (proximal steps) or a CD solver.

    Parameters
    ----------
    opts : LBFGSOptions, optional
        The options (defaults when omitted).
    **kwargs
        Override fields of ``opts`` (``LBFGS(max_iter=50)``).
    """

    batch = True
    options_class = LBFGSOptions
    #: largest |value| of a feature above which ``precondition="auto"`` rescales (the same
    #: bound sends the estimators' ``solver="auto"`` to L-BFGS: ``glm.LBFGS_AUTO_SCALE``)
    AUTO_SCALE = glm.LBFGS_AUTO_SCALE

    def init(self, model, cache=None) -> None:
        super().init(model, cache)
        self.n_passes = 0
        self.result = None
        self.scale = None

    def objective(self, learner, with_grad=True, feature_scale=None, cert=None):
        """Objective (and gradient as ``(G, g0)``) of the current model over one training pass.

        ``feature_scale`` (host float64 array of ``n_features``), when given, is updated in
        place to the running maximum of each feature's ``|value|`` over the pass.

        Parameters
        ----------
        learner : Learner
            The learner: its model, mixins, cache and training minibatches.
        with_grad : bool, default True
            Also compute the gradient.
        feature_scale : numpy.ndarray of float64, shape (n_features,), optional
            Updated in place as above.
        cert : object, optional
            An accumulator of the certificate's sums (the learner's ``_cert_sums()``, with
            the learner's ``tol``): each minibatch of the pass is also added to it.

        Returns
        -------
        float or tuple
            The objective ``mean loss + mixins' penalties``; with ``with_grad``,
            ``(f, G, g0)`` with the mean gradient as host arrays (``G`` ``(k, n)``, ``g0``
            ``(k,)``).

        Raises
        ------
        ValueError
            The pass yielded no examples, or the total example weight is not positive.
        """
        model, cache = learner.model, learner.cache
        k, n = model.coef.shape
        xp = gmat.get_array_module(model.coef)  # sums on the model's device, float64
        Gs = xp.zeros((k, n), dtype=np.float64, order="F") if with_grad else None
        g0s = xp.zeros(k, dtype=np.float64)
        loss, weight, examples = 0.0, 0.0, 0
        for batch in learner.training_batches():
            if with_grad:
                ls, ws, G, g0, D = model.gradient(batch, cache)
                Gs += G
                g0s += g0
                if cert is not None:  # from this pass's sums (before G's buffer is reused)
                    cert.add_pass(batch, ls, G, D)
            else:
                ls, ws = model.loss(batch, cache)
                if cert is not None:
                    cert.add(batch)
            if feature_scale is not None:
                _max_abs_rows(batch.X, feature_scale)
            loss += ls
            weight += ws
            examples += batch.n_examples
            learner._count_examples(batch)
        self.n_passes += 1
        if examples == 0:
            raise ValueError("the training data has no examples (the training source "
                             f"{learner.datasource!r} yielded none)")
        if not weight > 0:
            raise ValueError(
                f"the total example weight of the {examples} training examples is {weight!r}: "
                "example weights must be non-negative and not all zero")
        f = loss / weight + sum(m.penalty(model) for m in learner.mixins)
        if not with_grad:
            return f
        Gs /= weight
        g0s /= weight
        for m in learner.mixins:
            m.add_gradient(model, Gs, g0s)
        return f, gmat.to_device(Gs, "cpu"), gmat.to_device(g0s, "cpu")

    def _sigma(self, s):
        """Per-feature power-of-two scales from the largest ``|value|`` ``s`` (None: none)."""
        mode = self.opts.precondition
        big = np.isfinite(s) & (s > 1.0)
        if mode == "off" or not big.any():
            return None
        if mode == "auto" and not (s[big] > self.AUTO_SCALE).any():
            return None
        e = np.frexp(np.where(big, s, 1.0))[1]
        return np.where(big, np.ldexp(1.0, e - 1), 1.0)

    def run(self, learner) -> None:
        """Minimise the objective with scipy's L-BFGS-B; one pass per evaluation.

        The model ends at scipy's final iterate; ``self.result`` holds scipy's result.  The
        learner may stop the run after any iteration (its stopping rules).

        Parameters
        ----------
        learner : Learner
            The learner whose model is trained.

        Raises
        ------
        ValueError
            A non-smooth mixin.
        FloatingPointError
            A non-finite objective value.

        Warns
        -----
        sklearn.exceptions.ConvergenceWarning
            A stop on ``max_iter``/``max_passes``, or an abnormal line-search stop.
        """
        from scipy.optimize import minimize

        bad = [m for m in learner.mixins if not m.smooth]
        if bad:
            raise ValueError(
                f"the L-BFGS optimizer needs a smooth objective but {bad[0]!r} is non-smooth "
                f"(L1): use SGD/ADAGrad (proximal steps) or a coordinate-descent solver"
            )
        model = learner.model
        k, n = model.coef.shape
        fit_b = model.opts.fit_intercept
        dev = model.device
        sigma = None  # per-coordinate scales of the iterate x = sigma * (coef, intercept)

        def unpack(x):  # scipy's host iterate into the model (wherever it lives)
            if sigma is not None:
                x = x / sigma
            model.coef[...] = gmat.to_device(
                np.asfortranarray(x[: k * n].reshape(k, n, order="F"), dtype=model.dtype), dev)
            if fit_b:
                model.intercept[...] = gmat.to_device(x[k * n:].astype(model.dtype), dev)

        def flat(G, g0):
            return np.concatenate([G.ravel(order="F"), g0]) if fit_b else G.ravel(order="F")

        def checked(f, x):
            if not np.isfinite(f):
                raise FloatingPointError(
                    f"the L-BFGS objective is {f} at iteration {self.t} (largest |coef| "
                    f"{np.max(np.abs(x), initial=0.0):.3g}): the data or the regularisation "
                    f"overflow the {model.dtype} model")
            return f

        x0 = gmat.to_device(model.coef, "cpu").astype(np.float64).ravel(order="F")
        if fit_b:
            x0 = np.concatenate([x0, gmat.to_device(model.intercept, "cpu").astype(np.float64)])
        # with the learner's tol, each evaluation's pass also sums the certificate's terms
        # at its point (``cert_at``: the point, the sums), for the iteration that ends there
        certify = getattr(learner.opts, "tol", None) is not None
        cert_at = [None, None]
        # first evaluation at x0 here: it also measures the features' scales
        s = np.zeros(n, dtype=np.float64)
        sums = learner._cert_sums() if certify else None
        f0, G, g0 = self.objective(learner, feature_scale=s, cert=sums)
        first = [(f0, flat(G, g0))]
        sig = self._sigma(s)
        if sig is not None:
            sigma = np.concatenate([np.repeat(sig, k), np.ones(k)]) if fit_b else np.repeat(sig, k)
            logger.info("L-BFGS: preconditioning %d features (largest |value| %.3g)",
                        int((sig > 1).sum()), float(s.max()))
        if certify:
            cert_at[:] = [x0 if sigma is None else x0 * sigma, sums]
        self.scale = sig
        if not np.isfinite(f0) or not np.isfinite(first[0][1]).all():
            checked(f0 if not np.isfinite(f0) else np.inf, x0)

        def fun(x):
            if first:  # scipy's first call is at x0: the evaluation made above
                f, grad = first.pop()
            else:
                unpack(x)
                sums = learner._cert_sums() if certify else None
                f, G, g0 = self.objective(learner, cert=sums)
                grad = flat(G, g0)
                if certify:
                    cert_at[:] = [np.array(x, copy=True), sums]
            checked(f, x)
            return f, (grad if sigma is None else grad / sigma)

        def callback(intermediate_result):
            unpack(intermediate_result.x)
            self.t += 1
            at = cert_at[1] if (cert_at[0] is not None
                                and np.array_equal(cert_at[0], intermediate_result.x)) else None
            if learner._after_batch_iteration(self.t, float(intermediate_result.fun),
                                              cert_sums=at):
                raise StopIteration

        max_fun = self.opts.max_passes or (2 * self.opts.max_iter + 20)
        res = minimize(
            fun, x0 if sigma is None else x0 * sigma, jac=True, method="L-BFGS-B",
            callback=callback,
            options=dict(maxiter=self.opts.max_iter, maxfun=max_fun, gtol=self.opts.tol,
                         ftol=self.opts.ftol, maxcor=self.opts.memory),
        )
        unpack(res.x)
        self.result = res
        if res.success or res.status == 99:  # converged, or stopped by the learner
            return
        logger.info("L-BFGS stopped: %s", res.message)
        pg = float(np.max(np.abs(res.jac), initial=0.0)) if res.jac is not None else np.nan
        if res.status == 1:
            warnings.warn(
                f"L-BFGS did not converge: it stopped on its limits (max_iter="
                f"{self.opts.max_iter}, {max_fun} passes) after {res.nit} iterations and "
                f"{res.nfev} passes with projected gradient {pg:.3g} > tol={self.opts.tol:g}; "
                f"increase max_iter (or max_passes)", ConvergenceWarning, stacklevel=4)
        else:
            if pg <= 1e-6 * max(1.0, abs(float(res.fun))):
                why = ("the objective is flat to floating-point precision here: tol may be "
                       "below what the data allow")
            else:
                why = ("the features may be badly scaled: rescale them or use "
                       "precondition='on'") + ("" if res.nit else
                                               "; the model is still the initial one")
            warnings.warn(
                f"L-BFGS stopped abnormally after {res.nit} iterations ({res.message}) with "
                f"projected gradient {pg:.3g} > tol={self.opts.tol:g}: the line search found no "
                f"decrease; {why}", ConvergenceWarning, stacklevel=4)


def _max_abs_rows(X, out):
    """``out = max(out, max_j |X[i, j]|)`` per row ``i`` of a (features x examples) minibatch
    (numpy/cupy, dense or sparse); ``out`` is a host float64 array."""
    if X.shape[1] == 0 or X.shape[0] == 0:
        return
    if gmat.is_sparse(X):
        if X.nnz == 0:
            return
        X = gmat.to_device(X, "cpu")  # scipy's row reduction (once per L-BFGS run)
        m = abs(X).max(axis=1).toarray().ravel()
    else:
        m = gmat.get_array_module(X).abs(X).max(axis=1)
    np.maximum(out, np.asarray(gmat.to_device(m, "cpu"), dtype=np.float64), out=out)
