"""Mixins: terms and hooks added to every training step (BIDMach ``Mixin``).

A mixin may add a smooth term to the objective (:meth:`Mixin.penalty` and
:meth:`Mixin.add_gradient`), a non-smooth one through a proximal step (:meth:`Mixin.prox`), and
observe training through hooks (:meth:`Mixin.on_step`, :meth:`Mixin.on_eval`,
:meth:`Mixin.on_pass_end`).  :class:`MetricsRecorder` is a mixin that changes nothing in the
optimisation and only records per-pass metrics: the extension point is not only for
regularisers.
"""

from __future__ import annotations

import csv
import logging
import time
from dataclasses import dataclass

import numpy as np

from roofline.gmat import Options, option

__all__ = ["L1Regularizer", "L2Regularizer", "MetricsRecorder", "Mixin"]

logger = logging.getLogger(__name__)


class Mixin:
    """Base mixin: no objective term, no-op hooks.

    Attributes
    ----------
    smooth : bool
        False when the term needs a proximal step (optimizers without one refuse it).
    l1, l2 : float
        The L1 / L2 weights this mixin contributes (the fused ADAGrad kernel applies them on the
        touched columns).  Mixins with any other gradient term set ``fusable = False``.
    """

    smooth = True
    fusable = True
    l1 = 0.0
    l2 = 0.0
    opts: Options | None = None

    def init(self, learner) -> None:
        """Called once by the learner before training.

        Parameters
        ----------
        learner : Learner
            The learner; the base keeps its buffer cache (``learner.cache``) for temporaries.
        """
        self._cache = getattr(learner, "cache", None)

    def penalty(self, model) -> float:
        """The term's value at the current model.

        Parameters
        ----------
        model : Model
            The model (its ``coef``).

        Returns
        -------
        float
            The term, in the mean-loss scale (added to the reported objective); the base
            mixin's is 0.
        """
        return 0.0

    def add_gradient(self, model, G, g0) -> None:
        """Add the term's gradient into ``G`` (k x n, mean-loss scale) and ``g0`` (k,).

        Called by the optimizers after the loss gradient; the base mixin's is a no-op.

        Parameters
        ----------
        model : Model
            The model at which the gradient is taken.
        G : array, shape (k, n)
            Gradient of the coefficients, updated in place.
        g0 : array, shape (k,)
            Gradient of the intercept, updated in place.
        """

    def prox(self, model, step) -> None:
        """Apply the proximal operator with step size ``step`` (scalar or array like coef).

        Called after each update; the base mixin's is a no-op.

        Parameters
        ----------
        model : Model
            The model, whose ``coef`` is updated in place.
        step : float or array like ``model.coef``
            The step size of the update just applied (per coefficient for ADAGrad).
        """

    def on_step(self, learner, info: dict) -> None:
        """After each training minibatch (``info``: loss_sum, weight_sum, n_examples).

        Parameters
        ----------
        learner : Learner
            The learner.
        info : dict
            ``loss_sum`` (weighted loss of the minibatch before the step), ``weight_sum`` and
            ``n_examples``.
        """

    def on_eval(self, learner, record: dict) -> None:
        """After each held-out evaluation (``record``: one row of the trace).

        Parameters
        ----------
        learner : Learner
            The learner.
        record : dict
            The evaluation's row of the trace (``heldout_loss`` among others).
        """

    def on_pass_end(self, learner, info: dict) -> None:
        """At the end of each pass.

        Parameters
        ----------
        learner : Learner
            The learner.
        info : dict
            ``pass`` (the pass just ended, from 0) among others.
        """

    def state(self) -> dict:
        """What a checkpoint saves of this mixin.

        Returns
        -------
        dict
            Picklable state; empty for the stateless base.
        """
        return {}

    def __repr__(self):
        return f"{type(self).__name__}({self.opts!r})" if self.opts else type(self).__name__ + "()"


@dataclass
class L2Options(Options):
    """Options of :class:`L2Regularizer`."""

    reg2weight: float = option(1e-6, "alpha of the term alpha/2 ||W||_F^2 (mean-loss scale)",
                               low=0.0)


class L2Regularizer(Mixin):
    """``alpha/2 ||W||_F^2`` added to the mean loss (the intercept is not regularised).

    ``reg2weight`` is Roofline's ``alpha`` (:mod:`roofline.glm`: the vocabulary, and
    ``alpha_from_peer`` for scikit-learn's ``C``, snapml's ``regularizer``, VW's ``--l2``).

    Parameters
    ----------
    reg2weight : float, optional
        ``alpha`` (>= 0); overrides ``opts``.
    opts : L2Options, optional
        The options; defaults when omitted (``reg2weight=1e-6``).
    """

    def __init__(self, reg2weight: float | None = None, opts: L2Options | None = None):
        self.opts = opts or L2Options()
        if reg2weight is not None:
            self.opts = L2Options(reg2weight=reg2weight)

    @property
    def l2(self) -> float:
        """float: the L2 weight ``alpha`` (``opts.reg2weight``)."""
        return self.opts.reg2weight

    def penalty(self, model) -> float:
        c = model.coef
        return 0.5 * self.l2 * float(np.vdot(c, c).real) if self.l2 else 0.0

    def add_gradient(self, model, G, g0) -> None:
        if not self.l2:
            return
        c = model.coef
        cache = getattr(self, "_cache", None)
        tmp = (cache.empty(c.shape, c.dtype, tag="l2.tmp", order="F", like=c)
               if cache is not None else np.empty_like(c, order="F"))
        np.multiply(c, self.l2, out=tmp)
        G += tmp


@dataclass
class L1Options(Options):
    """Options of :class:`L1Regularizer`."""

    reg1weight: float = option(1e-6, "alpha of the term alpha ||W||_1 (mean-loss scale)",
                               low=0.0)


class L1Regularizer(Mixin):
    """``alpha ||W||_1`` (``reg1weight``, mean-loss scale) through the proximal
    (soft-threshold) step after each update.

    Parameters
    ----------
    reg1weight : float, optional
        ``alpha`` (>= 0); overrides ``opts``.
    opts : L1Options, optional
        The options; defaults when omitted (``reg1weight=1e-6``).
    """

    smooth = False

    def __init__(self, reg1weight: float | None = None, opts: L1Options | None = None):
        self.opts = opts or L1Options()
        if reg1weight is not None:
            self.opts = L1Options(reg1weight=reg1weight)

    @property
    def l1(self) -> float:
        """float: the L1 weight ``alpha`` (``opts.reg1weight``)."""
        return self.opts.reg1weight

    def penalty(self, model) -> float:
        return self.l1 * float(np.abs(model.coef).sum()) if self.l1 else 0.0

    def prox(self, model, step) -> None:
        if not self.l1:
            return
        c = model.coef
        cache = getattr(self, "_cache", None)
        tmp = (cache.empty(c.shape, c.dtype, tag="l1.tmp", order="F", like=c)
               if cache is not None else np.empty_like(c, order="F"))
        np.abs(c, out=tmp)
        if np.ndim(step) == 0:
            tmp -= self.l1 * float(step)
        else:
            # tmp -= l1 * step, without a temporary (step: an array on the model's device)
            tmp2 = (cache.empty(c.shape, c.dtype, tag="l1.tmp2", order="F", like=c)
                    if cache is not None else np.empty_like(c, order="F"))
            np.multiply(step, self.l1, out=tmp2)
            tmp -= tmp2
        np.maximum(tmp, 0, out=tmp)
        np.copysign(tmp, c, out=c)


@dataclass
class MetricsOptions(Options):
    """Options of :class:`MetricsRecorder`."""

    path: str | None = option(None, "CSV file rewritten at the end of every pass", kind=str)


class MetricsRecorder(Mixin):
    """Record per-pass metrics: training loss, latest held-out loss, throughput, model size.

    Parameters
    ----------
    path : str, optional
        A CSV file rewritten with every record at the end of each pass; ignored with ``opts``.
    opts : MetricsOptions, optional
        The options (``path``).

    Attributes
    ----------
    records : list of dict
        One row per pass: ``pass``, ``examples``, ``train_loss`` (weighted mean over the pass,
        before each step), ``heldout_loss`` (latest), ``seconds``, ``examples_per_s``,
        ``coef_norm``, ``coef_nnz``.
    """

    def __init__(self, path: str | None = None, opts: MetricsOptions | None = None):
        self.opts = opts or MetricsOptions(path=path)
        self.records: list[dict] = []

    def init(self, learner) -> None:
        super().init(learner)
        self._reset_pass()
        self._last_heldout = float("nan")

    def _reset_pass(self):
        self._loss = 0.0
        self._weight = 0.0
        self._examples = 0
        self._t0 = time.perf_counter()

    def on_step(self, learner, info: dict) -> None:
        self._loss += info["loss_sum"]
        self._weight += info["weight_sum"]
        self._examples += info["n_examples"]

    def on_eval(self, learner, record: dict) -> None:
        self._last_heldout = record.get("heldout_loss", float("nan"))

    def on_pass_end(self, learner, info: dict) -> None:
        dt = time.perf_counter() - self._t0
        c = learner.model.coef
        self.records.append({
            "pass": info["pass"],
            "examples": self._examples,
            "train_loss": self._loss / self._weight if self._weight else float("nan"),
            "heldout_loss": self._last_heldout,
            "seconds": dt,
            "examples_per_s": self._examples / dt if dt > 0 else float("nan"),
            "coef_norm": float(np.sqrt(np.vdot(c, c).real)),
            "coef_nnz": int(np.count_nonzero(c)),
        })
        if self.opts.path:
            with open(self.opts.path, "w", newline="") as f:
                wr = csv.DictWriter(f, fieldnames=list(self.records[0]))
                wr.writeheader()
                wr.writerows(self.records)
        self._reset_pass()
