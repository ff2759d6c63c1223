"""The :class:`Learner`: drives passes of a DataSource through a model, mixins and an optimizer.

BIDMach's shape (``Learner(datasource, model, mixins, updater, opts)``) in Python::

    learner = Learner(MatSource(X, y, batch_size=10_000), GLM(loss="logistic"),
                      ADAGrad(lr=0.2), mixins=[L2Regularizer(1e-6)],
                      heldout=MatSource(Xv, yv), n_passes=2, eval_every=50)
    result = learner.train()
    learner.evaluate(test_source)

Held-out evaluation (BIDMach's cross-validated loss) comes from either

* a separate held-out DataSource (``heldout=``), evaluated every ``eval_every`` training
  minibatches and at the end of each pass, or
* ``holdout_every=N``: every N-th minibatch of the training source (positions ``N-1, 2N-1, ...``
  of each pass) is held out.  Those minibatches are *never* given to the optimizer (one generator,
  :meth:`Learner.training_batches`, decides for every optimizer); they are evaluated with the
  current model when they arrive and their mean loss is recorded every ``eval_every`` steps.

The model and the optimizer state live on the device of the training source's minibatches
(``datasource.device``), or where ``device=`` says (``"cpu"`` or ``"gpu"``); minibatches are
moved there, and :meth:`Learner.predict` returns predictions on the device of the source's data.

Data-parallel training (BIDMach's ParLearner over Kylix): ``Learner(..., comm=comm,
sync_every=N)`` trains one replica per rank of ``comm`` on that rank's minibatches (minibatch
``i`` of the source goes to rank ``i % size``, unless the source is sharded itself, e.g.
``FileSource(..., rank=, size=)``) and every N minibatches combines the replicas' changes with
a sparse all-reduce (:mod:`roofline.learners._parallel`): model averaging, replicas
bit-identical after every sync, or elastic averaging (``elastic < 1``).  Every rank ends with
the same model; optimizer state (ADAGrad's sums) stays local.  With one rank the learner is
exactly the single-process one.  The factor models (:class:`~roofline.learners.KMeansModel`,
:class:`~roofline.learners.NMFModel`, :class:`~roofline.learners.LDA`,
:class:`~roofline.learners.MFModel`) are averaged by a dense all-reduce with each model's own
rule (:class:`~roofline.learners._parallel.FactorSync`: k-means centers weighted by their
counts, LDA's step counter kept right, ...); a model that seeds itself from its first
minibatch is seeded on rank 0 and copied to every rank.

The trace (one row per evaluation) records the training and held-out loss, examples/s, the
primitives' gflop/s and the fraction of the machine's roofline a step achieves (the model's own
cost model, ``model.cost(batch)``, where it has one; ``roofline_gauge``); ``early_stopping``
stops after ``patience`` evaluations without improvement.

Certified stop (``tol``): for a GLM with a smooth loss and an :class:`L2Regularizer` of
positive weight, ``Learner(..., tol=1e-4)`` computes the duality gap of the training objective
(:func:`roofline.glm.primal_certificate`, from the sums of one gradient pass over the training
examples, every rank's with ``comm``) at the end of passes 1, 2, 4, 8, ... and of the last
(``certify_passes="every"``: of each pass; a check costs one pass over the training source),
after each L-BFGS iteration (from the iteration's own pass, at no extra pass) and every
``certify_every`` minibatches, and stops once
``gap / |P| <= tol``: the model is then within ``tol`` (relative) of the optimum, the meaning
``tol`` has in every :func:`~roofline.glm.fit_glm` solver.  The trace's ``certificate``
column records each check; a run that ends above ``tol`` warns
(:class:`~sklearn.exceptions.ConvergenceWarning`) and reports ``converged=False``.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import os
import threading
import time
import warnings
from dataclasses import dataclass, field

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from tqdm.auto import tqdm

from roofline import glm, gmat
from roofline.datasources import ToDevice
from roofline.gmat import Options, option

from ._checkpoint import load_checkpoint, save_checkpoint
from ._mixins import L1Regularizer, L2Regularizer, Mixin
from ._parallel import FactorSync, ModelSync, check_comm, factor_kind

__all__ = ["Learner", "LearnerOptions", "TrainResult"]

logger = logging.getLogger(__name__)


@dataclass
class LearnerOptions(Options):
    """Options of :class:`Learner` (BIDMach ``Learner.Opts``)."""

    n_passes: int = option(1, "passes over the training source (minibatch optimizers)", low=1)
    eval_every: int = option(0, "record the held-out loss every N training minibatches "
                                "(0: at the end of each pass only)", low=0)
    holdout_every: int = option(0, "hold out every N-th minibatch of the training source "
                                   "(0: none; needs N >= 2)", low=0)
    heldout_batches: int = option(0, "minibatches of the held-out source per evaluation "
                                     "(0: all)", low=0)
    early_stopping: bool = option(False, "stop when the held-out loss stops improving")
    patience: int = option(3, "evaluations without improvement before stopping", low=1)
    min_delta: float = option(0.0, "improvement smaller than this does not count", low=0.0)
    progress: bool = option(True, "show a tqdm bar (only on a terminal)")
    checkpoint: str | None = option(None, "checkpoint file written at pass ends (data-parallel "
                                          "training: one per rank, '<file>.rank<r>')", kind=str)
    checkpoint_every: int = option(1, "passes between checkpoints", low=1)
    device: str = option("auto", "where the model and the optimizer state live: 'auto' = the "
                                 "device of the training source's minibatches "
                                 "(datasource.device), 'cpu' or 'gpu'; every minibatch is moved "
                                 "there", choices=("auto", "cpu", "gpu"))
    pipeline: bool = option(False, "model on the GPU, training minibatches on the host: copy "
                                   "them through Snap ML's double-buffered pipeline "
                                   "(datasources.ToDevice(pipeline=True)) instead of one "
                                   "synchronous copy per array")
    roofline_gauge: str = option("auto", "the fraction of the machine's roofline a step "
                                         "achieves, in the trace (roofline_fraction) and the "
                                         "progress bar: the model's own cost model "
                                         "(model.cost(batch): k-means, NMF, MF, LDA), else a GLM "
                                         "step's A*S and A*S^T; for sparse minibatches on the "
                                         "host.  'auto' and 'on': computed, with or without a "
                                         "progress bar (the machine's ceilings are measured "
                                         "once, then cached by gmat.machine_roofline); 'off': "
                                         "NaN", choices=("auto", "on", "off"))

    sync_every: int = option(10, "data-parallel training (comm=): combine the replicas every N "
                                 "training minibatches of each rank", low=1)
    elastic: float = option(1.0, "data-parallel training: 1 = model averaging (replicas "
                                 "bit-identical after each sync); below 1, BIDMach's elastic "
                                 "averaging: each replica moves this fraction of the way to the "
                                 "average", low=0.0, low_open=True, high=1.0)
    sync: str = option("auto", "data-parallel training: exchange the changed features with a "
                               "sparse all-reduce (Kylix) or the whole model with a dense one; "
                               "'auto' = sparse for sparse minibatches",
                       choices=("auto", "sparse", "dense"))
    sync_plan: str = option("grow", "data-parallel training, sparse sync: the Kylix plan "
                                    "covers every feature the rank has exchanged so far "
                                    "('grow': reused once the set is stable, e.g. from the "
                                    "second pass on) or the features changed since the last "
                                    "sync ('window': smaller messages, a new plan whenever a "
                                    "rank leaves its plan)", choices=("grow", "window"))
    sync_schedule: int = option(0, "data-parallel training, sparse sync: the power-law "
                                   "schedule's block b (0: off).  From the second pass on, the b "
                                   "most frequent features (counted in the first pass) are "
                                   "exchanged every sync, the next b every 2nd, the next 2b "
                                   "every 4th, ...; every feature at pass ends", low=0)
    tol: float | None = option(None, "certified stop: stop when the relative duality gap of "
                                     "the training objective (glm.primal_certificate, over "
                                     "every rank's training examples) is at most tol, checked "
                                     "at pass ends (L-BFGS: every iteration) and every "
                                     "certify_every minibatches; None: no certificate",
                               kind=float, low=0.0, low_open=True)
    certify_every: int = option(0, "with tol, minibatch optimizers in one process: also check "
                                   "the certificate every N training minibatches (0: at pass "
                                   "ends only); each check is one pass over the training "
                                   "source", low=0)
    certify_passes: str = option("doubling", "with tol, minibatch optimizers: which pass ends "
                                             "check the certificate (one extra pass over the "
                                             "training source each): 'doubling' = passes 1, 2, "
                                             "4, 8, ... and the last (at most log2(passes) + 2 "
                                             "checks, a stop at most one doubling late); "
                                             "'every' = each pass end.  L-BFGS checks every "
                                             "iteration from its own pass either way",
                                 choices=("doubling", "every"))
    shard: str = option("auto", "data-parallel training: 'batches' = rank r trains on "
                                "minibatches i % size == r of the source; 'none' = the source "
                                "already holds this rank's part; 'auto' = 'none' for a source "
                                "sharded itself (opts.size > 1), else 'batches'",
                        choices=("auto", "batches", "none"))

    def _check(self, prefix):
        if self.holdout_every == 1:
            raise ValueError(f"{prefix}option 'holdout_every' must be 0 or >= 2 (1 would hold "
                             f"out every minibatch)")


@dataclass
class TrainResult:
    """What :meth:`Learner.train` returns.

    Parameters
    ----------
    trace : list of dict
        One row per evaluation (see :class:`Learner`).
    n_passes : int
        Passes over the training data started.
    n_steps : int
        Optimizer steps (minibatches, or L-BFGS iterations).
    n_examples : int
        Examples trained on (counted once per pass).
    seconds : float
        Wall-clock seconds of the training loop.
    examples_per_s : float
        ``n_examples / seconds``.
    stopped_early : bool
        Whether the held-out loss stopped the run before ``n_passes``.
    best_heldout_loss : float
        The lowest held-out loss of the trace (NaN without held-out data).
    converged : bool or None
        With the ``tol`` option: whether the last certificate met it (the run stopped on it,
        or L-BFGS's own test stopped at a point that meets it); ``None`` without ``tol``.
    certificate : float
        With ``tol``: the last relative duality gap ``gap / |P|`` of the training objective
        (:meth:`Learner.certificate`), a bound on the model's relative suboptimality; NaN
        without ``tol``.
    """

    trace: list = field(default_factory=list)
    n_passes: int = 0
    n_steps: int = 0
    n_examples: int = 0
    seconds: float = 0.0
    examples_per_s: float = 0.0
    stopped_early: bool = False
    best_heldout_loss: float = math.nan
    converged: bool | None = None
    certificate: float = math.nan

    def _last(self, key) -> float:
        """The last finite ``key`` of the trace (a pass-end row right after an evaluation has
        no training loss of its own), NaN when none is."""
        for r in reversed(self.trace):
            v = r.get(key, math.nan)
            if isinstance(v, (int, float)) and math.isfinite(v):
                return float(v)
        return math.nan

    def __repr__(self) -> str:
        # the trace can hold thousands of rows: its length, not its rows (result.trace has them)
        parts = [f"n_passes={self.n_passes}", f"n_steps={self.n_steps}",
                 f"n_examples={self.n_examples}", f"seconds={self.seconds:.3g}",
                 f"examples_per_s={self.examples_per_s:.3g}",
                 f"train_loss={self._last('train_loss'):.6g}"]
        held = self._last("heldout_loss")
        if not math.isnan(held):
            parts += [f"heldout_loss={held:.6g}", f"best_heldout_loss={self.best_heldout_loss:.6g}"]
        frac = self._last("roofline_fraction")
        if not math.isnan(frac):
            parts.append(f"roofline_fraction={frac:.3g}")
        if self.stopped_early:
            parts.append("stopped_early=True")
        if self.converged is not None:
            parts += [f"converged={self.converged}", f"certificate={self.certificate:.3g}"]
        parts.append(f"trace=[{len(self.trace)} rows]")
        return f"TrainResult({', '.join(parts)})"

    def plot(self, axes=None, *, path=None):
        """Plot the train and held-out loss and the throughput against examples trained on.

        Needs matplotlib (``pip install 'roofline[plot]'``); see
        :func:`roofline.learners._plot.plot_trace`.

        Parameters
        ----------
        axes : sequence of two matplotlib.axes.Axes, optional
            Where to draw; a new figure with two panels by default.
        path : str or path-like, optional
            Also save the figure there.

        Returns
        -------
        numpy.ndarray of matplotlib.axes.Axes
            The loss panel and the throughput panel.
        """
        from ._plot import plot_trace

        return plot_trace(self.trace, axes, path=path)


def _source_shard(ds) -> tuple[int, int]:
    """``(rank, size)`` of the first source in a chain of stages (``.source``) whose options
    have them (a ``FileSource(..., rank=, size=)`` under ``Prefetch`` or ``HeldOut``);
    ``(0, 1)`` when none does."""
    seen = 0
    while ds is not None and seen < 100:
        o = getattr(ds, "opts", None)
        if hasattr(o, "size") and hasattr(o, "rank"):
            return int(o.rank), int(o.size)
        ds, seen = getattr(ds, "source", None), seen + 1
    return 0, 1


class Learner:
    """Train a model on a DataSource with an optimizer and mixins.

    Parameters
    ----------
    datasource : DataSource
        Training minibatches (examples are columns).
    model : Model
        Initialised from ``datasource.n_features`` on the first :meth:`train` if needed.
    optimizer : Optimizer
    mixins : sequence of Mixin
    heldout : DataSource, optional
        Held-out source for the online held-out loss.
    opts : LearnerOptions, optional
    cache : gmat.BufferCache, optional
        Buffers of the steady-state loop (a new cache by default).
    comm : roofline.comm.Communicator, optional
        Train data-parallel on the ranks of ``comm`` (every rank builds the same learner and
        calls :meth:`train`); see ``sync_every``, ``elastic``, ``sync`` and ``shard`` in
        :class:`LearnerOptions`.  A group of one trains exactly as without ``comm``.  A GLM
        or one of the factor models (k-means, NMF, LDA, MF: model averaging by a dense
        all-reduce, ``elastic=1``); any other model is a TypeError at :meth:`train`.
    **kwargs
        Override fields of ``opts``.
    """

    def __init__(self, datasource, model, optimizer, mixins=(), heldout=None, opts=None,
                 cache=None, comm=None, **kwargs):
        base = (opts or LearnerOptions()).to_dict()
        base.update(kwargs)
        self.opts = LearnerOptions.from_dict(base, "Learner")
        self.datasource = datasource
        self.model = model
        self.optimizer = optimizer
        self.mixins = list(mixins)
        self.heldout = heldout
        self.cache = cache if cache is not None else gmat.BufferCache()
        self.comm = None if comm is None else check_comm(comm)
        self._sync = None
        self.trace: list[dict] = []
        self._ready = False
        self._examples = 0
        self._steps = 0
        self._pass = 0
        self._pbar = None
        self._training = threading.Lock()

    # -- setup --------------------------------------------------------------------------------
    @property
    def device(self) -> str:
        """Where the model lives (``opts.device``, ``"auto"`` resolved from the datasource)."""
        dev = self.opts.device
        return getattr(self.datasource, "device", "cpu") if dev == "auto" else dev

    def _setup(self):
        n = int(self.datasource.n_features)
        dev = self.device
        if dev == "gpu" and not gmat.gpu_available():
            raise RuntimeError("Learner(device='gpu'): no usable CUDA device (install "
                               "roofline[gpu] on a machine with an NVIDIA GPU)")
        if not self.model.initialized:
            self.model.init(n, device=dev)
        elif self.model.n_features != n:
            raise ValueError(
                f"the model has {self.model.n_features} features but the datasource has {n}"
            )
        elif self.model.device != dev:
            if self._ready:
                raise RuntimeError(f"the model was moved to the {self.model.device.upper()} "
                                   f"after training started on the {dev.upper()}")
            self.model.to_device(dev)
        if not self._ready:
            self._setup_comm()
            self.optimizer.init(self.model, self.cache)
            for m in self.mixins:
                m.init(self)
            self._ready = True

    @property
    def parallel(self) -> bool:
        """Whether this learner trains data-parallel (``comm`` of more than one rank)."""
        return self.comm is not None and self.comm.size > 1

    def _setup_comm(self):
        if not self.parallel:
            return
        if self.optimizer.batch:
            raise ValueError(f"Learner(comm=...) trains minibatch optimizers data-parallel; "
                             f"{type(self.optimizer).__name__} is a batch optimizer (use the "
                             f"estimators' distributed solvers for full-batch methods)")
        o = self.opts
        kind = factor_kind(self.model)
        if kind is None and not (hasattr(self.model, "coef") and hasattr(self.model, "intercept")):
            raise TypeError(f"Learner(comm=...) averages a GLM (a model with coef and intercept) "
                            f"or a factor model (KMeansModel, NMFModel, LDA, MFModel); "
                            f"{type(self.model).__name__} cannot be averaged")
        if kind is not None:
            for name, bad in (("elastic", o.elastic != 1.0), ("sync", o.sync == "sparse"),
                              ("sync_schedule", o.sync_schedule != 0)):
                if bad:
                    raise ValueError(f"Learner(comm=...) averages {type(self.model).__name__} "
                                     f"replicas by a dense all-reduce (model averaging): the "
                                     f"option {name!r} must keep its default, got "
                                     f"{getattr(o, name)!r}")
        ds_rank, ds_size = _source_shard(self.datasource)
        if ds_size > 1 and (ds_size, ds_rank) != (self.comm.size, self.comm.rank):
            raise ValueError(f"the training source is sharded for rank {ds_rank} of {ds_size} "
                             f"but comm is rank {self.comm.rank} of {self.comm.size}")
        self._shard = o.shard == "batches" or (o.shard == "auto" and ds_size == 1)
        if kind is not None:
            self._sync = FactorSync(self.comm, self.model)
            return
        sparse = o.sync == "sparse"
        if o.sync == "auto":
            X = getattr(self.datasource, "X", None)
            if X is None:  # peek at the first minibatch
                gen = iter(self.datasource)
                first = next(gen, None)
                getattr(gen, "close", lambda: None)()
                X = None if first is None else first.X
            local = X is not None and gmat.is_sparse(X)
            # every rank must take the same branch: sparse only if every rank's data are
            sparse = bool(self.comm.allreduce(np.array([float(not local)]))[0] == 0)
        self._sync = ModelSync(self.comm, self.model, elastic=o.elastic, sparse=sparse,
                               grow=o.sync_plan == "grow", block=o.sync_schedule)

    def _is_heldout(self, i: int) -> bool:
        h = self.opts.holdout_every
        return h > 0 and i % h == h - 1

    def _on_model_device(self, batch):
        """``batch`` with its arrays on the model's device (itself when they are there)."""
        dev = self.model.device
        if gmat.device_of(batch.X) == dev:
            return batch
        return type(batch)(gmat.to_device(batch.X, dev),
                           None if batch.y is None else gmat.to_device(batch.y, dev),
                           None if batch.w is None else gmat.to_device(batch.w, dev),
                           batch.start)

    def _batches(self, source):
        for batch in source:
            yield self._on_model_device(batch)

    def training_batches(self):
        """One pass over the training minibatches (held-out minibatches excluded), on the
        model's device."""
        source = self.datasource
        if (self.opts.pipeline and self.model.device == "gpu"
                and getattr(source, "device", "cpu") != "gpu"):
            source = ToDevice(source, device="gpu", pipeline=True)
        for i, batch in enumerate(source):
            if not self._is_heldout(i):
                yield self._on_model_device(batch)

    def heldout_batches(self):
        """One pass over the held-out minibatches: the held-out source, or the held-out
        positions of the training source."""
        if self.heldout is not None:
            for i, batch in enumerate(self.heldout):
                if self.opts.heldout_batches and i >= self.opts.heldout_batches:
                    break
                yield self._on_model_device(batch)
        elif self.opts.holdout_every:
            for i, batch in enumerate(self.datasource):
                if self._is_heldout(i):
                    yield self._on_model_device(batch)

    @property
    def has_heldout(self) -> bool:
        """Whether the learner evaluates on held-out data (a ``heldout`` source, or every
        ``holdout_every``-th minibatch held out).

        Returns
        -------
        bool
        """
        return self.heldout is not None or self.opts.holdout_every > 0

    def _count_examples(self, batch):
        self._examples += batch.n_examples
        if self._pbar is not None:
            self._pbar.update(batch.n_examples)

    # -- training -----------------------------------------------------------------------------
    def train(self) -> TrainResult:
        """Run the optimizer (``n_passes`` passes, or L-BFGS until convergence).

        Returns
        -------
        TrainResult

        Raises
        ------
        RuntimeError
            When this learner is already training (in another thread): one learner runs one
            training at a time.
        ValueError
            When the training source yields no training examples, or only zero weights.
        """
        if not self._training.acquire(blocking=False):
            raise RuntimeError("Learner.train() is already running on this learner (in another "
                               "thread); a Learner trains one run at a time: give each thread "
                               "its own Learner, model and optimizer")
        try:
            return self._train()
        finally:
            self._training.release()

    def _train(self) -> TrainResult:
        self._setup()
        o = self.opts
        # the gauge does not depend on the bar (issue 34: trace.csv had NaN without a terminal)
        self._gauge = o.roofline_gauge != "off" and not self.optimizer.batch
        self._machine = None
        X = getattr(self.datasource, "X", None)
        if self._gauge and self.model.device == "cpu" and (X is None or gmat.is_sparse(X)):
            # before the clock starts: a first measurement of the machine is not training time
            self._machine = gmat.machine_roofline()
        self._t0 = time.perf_counter()
        self._examples = 0
        self._steps = 0
        self._best = math.inf
        self._bad = 0
        self._stop = False
        self._step_time = 0.0
        self._flops = 0
        self._win = [0.0, 0.0]  # training loss, weight since last record
        self._gauge_t = [0.0, 0]  # step time, steps since last record (roofline gauge)
        self._last_batch = None
        self._ho = [0.0, 0.0]  # held-out loss, weight since last record (holdout_every)
        # the certified stop (opts.tol): the L2 strength, the last relative gap and its step
        self._alpha = self._cert_alpha() if o.tol is not None else None
        self._cert_last = math.nan
        self._cert_step = -1
        self._cert_stop = False
        n_ex = getattr(self.datasource, "n_examples", None)
        total = n_ex * o.n_passes if (n_ex and not self.optimizer.batch) else None
        disable = None if o.progress else True
        self._pbar = tqdm(total=total, unit="ex", unit_scale=True, disable=disable,
                          desc=f"{type(self.optimizer).__name__}")
        passes = 0
        try:
            if self.optimizer.batch:
                self.optimizer.run(self)
                passes = getattr(self.optimizer, "n_passes", 0)
            else:
                for p in range(o.n_passes):
                    self._pass = p
                    passes += 1
                    seen = self._examples
                    if self.parallel:
                        got = self._run_pass_comm()
                    else:
                        self._run_pass()
                        got = self._examples - seen
                    if got == 0:
                        if self._total_examples() == 0:
                            raise ValueError(f"the training source {self.datasource!r} yielded "
                                             f"no training examples in pass {p + 1}")
                        logger.warning("pass %d: the training source yielded no examples "
                                       "(it was exhausted?); stopping", p + 1)
                        break
                    weight = float(self._pass_weight)
                    if not weight > 0:
                        raise ValueError(f"the training examples of pass {p + 1} have total "
                                         f"weight {weight!r}: example weights must be "
                                         f"non-negative and not all zero")
                    # a pass cut short by early stopping (or the certificate) was recorded
                    # when it stopped
                    cut = self._stop and bool(self.trace)
                    cert = None
                    if o.tol is not None and not cut:
                        if self._cert_step == self._steps:  # free: from the step's own pass
                            cert = self._cert_last
                        elif o.certify_passes == "every" or (p + 1) & p == 0:
                            cert = self._certify()  # one more pass over the training source
                    rec = (self.trace[-1] if cut
                           else self._record(force_heldout=True, certificate=cert))
                    if cert is not None and cert <= o.tol:
                        self._stop = self._cert_stop = True
                    if self.parallel:  # the ranks stop together
                        self._stop = self._any_rank(self._stop)
                    info = {"pass": p, **rec}
                    for m in self.mixins:
                        m.on_pass_end(self, info)
                    if o.checkpoint and (p + 1) % o.checkpoint_every == 0:
                        self.save_checkpoint(self._checkpoint_path(), extra={"pass": p + 1})
                    if self._stop:
                        break
            if self._sync is not None:
                self._sync.finish()
            converged = None
            if o.tol is not None:
                if self._cert_step != self._steps:  # the model moved since the last check
                    self._certify()
                converged = bool(self._cert_last <= o.tol)
        finally:
            self._pbar.close()
            self._pbar = None
        dt = time.perf_counter() - self._t0
        if converged is False:
            warnings.warn(f"the training stopped with a relative duality gap of "
                          f"{self._cert_last:.3g} > tol={o.tol:g} after {passes} passes "
                          f"({self._steps} steps); raise n_passes (the optimizer's limits) or "
                          f"tol", ConvergenceWarning, stacklevel=3)
        best = min((r["heldout_loss"] for r in self.trace
                    if not math.isnan(r["heldout_loss"])), default=math.nan)
        return TrainResult(
            trace=list(self.trace), n_passes=passes, n_steps=self._steps,
            n_examples=self._examples, seconds=dt,
            examples_per_s=self._examples / dt if dt > 0 else math.nan,
            stopped_early=self._stop and not self._cert_stop, best_heldout_loss=best,
            converged=converged,
            certificate=self._cert_last if o.tol is not None else math.nan,
        )

    def _checkpoint_path(self) -> str:
        """``opts.checkpoint``; in data-parallel training ``<path>.rank<r>`` (each rank's
        optimizer state is its own)."""
        path = os.fspath(self.opts.checkpoint)
        return f"{path}.rank{self.comm.rank}" if self.parallel else path

    def _total_examples(self) -> int:
        if not self.parallel:
            return self._examples
        return int(self.comm.allreduce(np.array([float(self._examples)]))[0])

    def _any_rank(self, flag: bool) -> bool:
        return bool(self.comm.allreduce(np.array([float(bool(flag))]))[0] > 0)

    # -- the certified stop (opts.tol) ---------------------------------------------------------
    def _cert_alpha(self) -> float:
        """The L2 strength ``alpha`` of the training objective ``mean loss + alpha/2 ||W||^2``
        that the certificate bounds; a ValueError naming ``tol`` where there is no
        certificate (not a GLM, a non-smooth loss or penalty, no L2 term)."""
        model = self.model
        if not all(hasattr(model, a) for a in ("coef", "intercept", "loss_name")):
            raise ValueError(f"Learner(tol=...) certifies GLMs (a model with coef, intercept "
                             f"and loss_name), got {type(model).__name__}")
        loss = model.loss_name
        if loss not in glm.SMOOTH_LOSSES:
            raise ValueError(f"Learner(tol=...): the duality-gap certificate needs a smooth "
                             f"loss {glm.SMOOTH_LOSSES}, got loss={loss!r} (use the "
                             f"optimizer's own stopping rule, or a fit_glm solver)")
        alpha = 0.0
        for m in self.mixins:
            if isinstance(m, L2Regularizer):
                alpha += float(m.l2)
            elif isinstance(m, L1Regularizer) and float(m.l1) == 0.0:
                continue
            elif not getattr(m, "smooth", True) or type(m).penalty is not Mixin.penalty:
                raise ValueError(f"Learner(tol=...): the certificate covers the L2 objective "
                                 f"only; the mixin {m!r} adds another term (fit L1 / elastic "
                                 f"net with fit_glm, whose tol is the same certificate)")
        if not alpha > 0:
            raise ValueError("Learner(tol=...) needs an L2Regularizer of positive weight: the "
                             "duality gap bounds the suboptimality through the L2 term "
                             "(without one, use the optimizer's own stopping rule)")
        if self.parallel and self.opts.elastic < 1:
            raise ValueError(f"Learner(tol=..., comm=...) needs elastic=1 (model averaging: "
                             f"one model to certify), got elastic={self.opts.elastic}")
        if self.parallel and self.opts.certify_every:
            raise ValueError("Learner(comm=...) checks tol at pass ends only: certify_every "
                             f"must be 0, got {self.opts.certify_every}")
        return alpha

    def _own_training_batches(self):
        """This rank's training minibatches (held-out ones and, data-parallel, the other
        ranks' excluded), on the model's device; not counted as trained examples."""
        size, rank = (self.comm.size, self.comm.rank) if self.parallel else (1, 0)
        shard = self.parallel and getattr(self, "_shard", True)
        for i, batch in enumerate(self.datasource):
            if self._is_heldout(i) or (shard and i % size != rank):
                continue
            yield self._on_model_device(batch)

    def _cert_sums(self):
        """A new accumulator of the certificate's sums at the current model
        (:class:`_CertSums`: ``add(batch)`` for each training minibatch)."""
        return _CertSums(self.model)

    def certificate(self) -> tuple[float, float]:
        """The training objective and its certified duality gap at the current model.

        ``P = mean loss + alpha/2 ||W||^2`` over the training minibatches (held-out ones
        excluded; with ``comm``, over every rank's, collectively) and ``gap`` with ``P - P* <=
        gap`` (:func:`roofline.glm.primal_certificate`, summed over the outputs): the quantity
        ``tol`` bounds, ``gap / |P|``.  One pass over the training source.

        Returns
        -------
        P, gap : float

        Raises
        ------
        ValueError
            Where the objective has no certificate: a model that is not a GLM, a non-smooth
            loss (the hinge), a mixin other than :class:`L2Regularizer` adding a term (L1),
            no L2 term, or, with ``comm``, ``elastic < 1``.
        """
        self._setup()
        return self._certificate(self._cert_alpha())

    def _certificate(self, alpha, sums=None):
        """``(P, gap)`` from ``sums`` (a :class:`_CertSums` of this rank's training
        examples at the current model; computed by a pass when None), reduced over the
        ranks."""
        if sums is None:
            sums = self._cert_sums()
            for batch in self._own_training_batches():
                sums.add(batch)
        U, S, W = sums.U, sums.S, sums.W
        if self.parallel:
            tot = self.comm.allreduce(np.concatenate([U.ravel(), S.ravel(), [W]]))
            U = tot[:U.size].reshape(U.shape)
            S = tot[U.size:-1].reshape(S.shape)
            W = float(tot[-1])
        if not W > 0:
            raise ValueError(f"the certificate needs training examples of positive total "
                             f"weight, got {W!r}")
        model = self.model
        coef = np.asarray(gmat.to_device(model.coef, "cpu"), dtype=np.float64)
        fit_b = bool(model.opts.fit_intercept)
        b = np.asarray(gmat.to_device(model.intercept, "cpu"), dtype=np.float64)
        P = gap = 0.0
        for r in range(coef.shape[0]):
            p, g = glm.primal_certificate(S[r, 0], S[r, 1], S[r, 2], S[r, 3],
                                          float(np.square(U[r]).sum()), coef[r],
                                          float(b[r]) if fit_b else 0.0, n=W, alpha=alpha,
                                          fit_intercept=fit_b)
            P += p
            gap += g
        return float(P), float(gap)

    def _certify(self, sums=None) -> float:
        """Check the certificate at the current model: the relative gap ``gap / |P|``
        (recorded as the last certificate)."""
        P, gap = self._certificate(self._alpha, sums)
        rel = gap / abs(P) if P != 0 else (0.0 if gap == 0 else math.inf)
        self._cert_last = float(rel)
        self._cert_step = self._steps
        logger.info("step %d: objective %.8g, relative duality gap %.3e (tol %g)", self._steps,
                    P, rel, self.opts.tol)
        return self._cert_last

    def _run_pass(self):
        self._pass_weight = 0.0
        for i, batch in enumerate(self.datasource):
            if self._one_batch(i, batch):
                return

    def _run_pass_comm(self) -> int:
        """One data-parallel pass: this rank's minibatches, a sync every ``sync_every`` steps
        and, once every rank has finished its pass, a last one.  Returns the pass's examples
        over all ranks (and sets ``_pass_weight`` to the ranks' total weight)."""
        o, comm = self.opts, self.comm
        self._pass_weight = 0.0
        seen = self._examples
        it = enumerate(self.datasource)
        done = stopped = False
        while True:
            n = self._steps
            window = self._sync.window(o.sync_every)
            while not done and self._steps - n < window:
                nxt = next(it, None)
                if nxt is None:
                    done = True
                    break
                i, batch = nxt
                if self._shard and i % comm.size != comm.rank:
                    continue
                if not self._is_heldout(i):
                    self._sync.observe(batch.X)
                if self._one_batch(i, batch):
                    done = stopped = True
            all_done, stop = self._sync.sync(done=done, stop=stopped)
            if all_done:
                break
        self._sync.end_pass()
        tot = comm.allreduce(np.array([float(self._examples - seen), self._pass_weight,
                                       float(stop)]))
        self._pass_weight = float(tot[1])
        self._stop = self._stop or bool(tot[2] > 0)
        return int(tot[0])

    def _one_batch(self, i, batch) -> bool:
        """Evaluate (held out) or train on minibatch ``i``; True when training should stop."""
        o = self.opts
        batch = self._on_model_device(batch)
        if self._is_heldout(i):
            ls, ws = self.model.loss(batch, self.cache)
            self._ho[0] += ls
            self._ho[1] += ws
            return False
        ts = time.perf_counter()
        ls, ws = self.optimizer.step(self.model, batch, self.mixins, self.cache)
        dt = time.perf_counter() - ts
        self._step_time += dt
        self._gauge_t[0] += dt
        self._gauge_t[1] += 1
        self._last_batch = batch
        self._flops += self.model.flops_per_step(batch)
        self._steps += 1
        self._win[0] += ls
        self._win[1] += ws
        self._pass_weight += ws
        self._count_examples(batch)
        if self.mixins:
            info = {"loss_sum": ls, "weight_sum": ws, "n_examples": batch.n_examples}
            for m in self.mixins:
                m.on_step(self, info)
        cert = None
        if o.tol is not None and o.certify_every and self._steps % o.certify_every == 0:
            cert = self._certify()
        if (o.eval_every and self._steps % o.eval_every == 0) or cert is not None:
            self._record(certificate=cert)
            if cert is not None and cert <= o.tol:
                self._stop = self._cert_stop = True
            if self._stop:
                return True
        return False

    def _after_batch_iteration(self, iteration: int, objective: float, cert_sums=None) -> bool:
        """Called by batch optimizers after each iteration; returns True to stop.

        ``cert_sums``: the certificate's sums (:meth:`_cert_sums`) of the iteration's own
        pass, when the optimizer computed them at this iterate (with ``tol``; else a pass
        computes them)."""
        self._steps = iteration
        cert = None if self.opts.tol is None else self._certify(cert_sums)
        rec = self._record(force_heldout=True, objective=objective, certificate=cert)
        if cert is not None and cert <= self.opts.tol:
            self._stop = self._cert_stop = True
        info = {"pass": iteration - 1, **rec}
        for m in self.mixins:
            m.on_pass_end(self, info)
        if self.opts.checkpoint and iteration % self.opts.checkpoint_every == 0:
            self.save_checkpoint(self.opts.checkpoint, extra={"iteration": iteration})
        return self._stop

    def _record(self, force_heldout=False, objective=None, certificate=None) -> dict:
        """Append one row to the trace (held-out loss, throughput, with ``tol`` the
        ``certificate``: NaN where none was computed) and check early stopping."""
        heldout = math.nan
        if self.heldout is not None or (self.optimizer.batch and self.opts.holdout_every):
            if force_heldout or self.heldout is not None:
                heldout = self._evaluate_batches(self.heldout_batches())["loss"]
        elif self.opts.holdout_every and self._ho[1] > 0:
            heldout = self._ho[0] / self._ho[1]
            self._ho = [0.0, 0.0]
        now = time.perf_counter() - self._t0
        train = self._win[0] / self._win[1] if self._win[1] else math.nan
        if objective is not None:
            train = objective
        self._win = [0.0, 0.0]
        rec = {
            "pass": self._pass,
            "step": self._steps,
            "examples": self._examples,
            "seconds": now,
            "train_loss": train,
            "heldout_loss": heldout,
            "examples_per_s": self._examples / now if now > 0 else math.nan,
            "gflops": self._flops / self._step_time / 1e9 if self._step_time > 0 else math.nan,
            "roofline_fraction": self._roofline_fraction(),
        }
        if self.opts.tol is not None:
            rec["certificate"] = math.nan if certificate is None else float(certificate)
        self.trace.append(rec)
        if self._pbar is not None and not self._pbar.disable:
            post = {"heldout": f"{heldout:.4f}", "gflops": f"{rec['gflops']:.2f}"}
            if not math.isnan(rec["roofline_fraction"]):
                post["roofline"] = f"{100 * rec['roofline_fraction']:.1f}%"
            self._pbar.set_postfix(post, refresh=False)
        logger.info("step %d: train %.5f heldout %.5f, %.0f ex/s", self._steps, train, heldout,
                    rec["examples_per_s"])
        for m in self.mixins:
            m.on_eval(self, rec)
        if self.opts.early_stopping and not math.isnan(heldout):
            if heldout < self._best - self.opts.min_delta:
                self._best, self._bad = heldout, 0
            else:
                self._bad += 1
                if self._bad >= self.opts.patience:
                    logger.info("early stopping at step %d (held-out loss %.5f, best %.5f)",
                                self._steps, heldout, self._best)
                    self._stop = True
        return rec

    def _roofline_fraction(self) -> float:
        """Roofline time of a step on the last minibatch (:meth:`step_roofline_time`, on the
        measured machine) over the mean measured step time since the last record.  The step
        also does work that the cost model leaves out (elementwise updates), so this is the
        fraction of the whole step's time that the lower bound accounts for; NaN with
        ``roofline_gauge="off"``, for batch optimizers and for dense or device minibatches."""
        t, n = self._gauge_t
        self._gauge_t = [0.0, 0]
        b = getattr(self, "_last_batch", None)
        if not getattr(self, "_gauge", False) or n == 0 or b is None or not gmat.is_sparse(b.X):
            return math.nan
        if gmat.device_of(b.X) != "cpu":  # the measured roofline is the host's
            return math.nan
        if getattr(self, "_machine", None) is None:  # the cache read (or measured) once a run
            self._machine = gmat.machine_roofline()
        return self.step_roofline_time(b, self._machine) / (t / n)

    def step_roofline_time(self, batch, machine=None) -> float:
        """Lower bound on the time of one training step on ``batch``.

        The model's own cost model when it has one (``model.cost(batch)``, a
        :class:`~roofline.gmat.Cost`: :class:`~roofline.learners.KMeansModel`,
        :class:`~roofline.learners.NMFModel`, :class:`~roofline.learners.MFModel`,
        :class:`~roofline.learners.LDA`), else a
        GLM step's primitives: ``A*S`` and ``A*S^T`` with ``model.n_outputs`` rows
        (:func:`~roofline.gmat.cost_mult_as`, :func:`~roofline.gmat.cost_mult_ast`).

        Parameters
        ----------
        batch : Minibatch
            A minibatch with a sparse (CSC) ``X``.
        machine : MachineRoofline, optional
            The ceilings (default: this machine's, :func:`~roofline.gmat.machine_roofline`).

        Returns
        -------
        float
            Seconds: ``max(bytes / bandwidth, flops / flops ceiling)`` of the step's cost.
        """
        machine = machine if machine is not None else gmat.machine_roofline()
        cost = getattr(self.model, "cost", None)
        if callable(cost):
            return float(cost(batch).roofline_time(machine))
        k = self.model.n_outputs
        return (gmat.cost_mult_as(batch.X, k).roofline_time(machine)
                + gmat.cost_mult_ast(batch.X, k).roofline_time(machine))

    # -- evaluation ---------------------------------------------------------------------------
    def _evaluate_batches(self, batches) -> dict:
        loss, weight, n = 0.0, 0.0, 0
        for batch in batches:
            ls, ws = self.model.loss(batch, self.cache)
            loss += ls
            weight += ws
            n += batch.n_examples
        return {"loss": loss / weight if weight else math.nan, "weight": weight, "n_examples": n}

    def evaluate(self, datasource=None) -> dict:
        """Mean loss of the model on ``datasource`` (default: the held-out minibatches).

        Parameters
        ----------
        datasource : DataSource, optional
            The examples to evaluate on.

        Returns
        -------
        dict
            ``loss`` (weighted mean loss), ``objective`` (loss plus the mixins' penalties),
            ``weight``, ``n_examples``.
        """
        self._check_model()
        batches = self.heldout_batches() if datasource is None else self._batches(datasource)
        out = self._evaluate_batches(batches)
        out["objective"] = out["loss"] + sum(m.penalty(self.model) for m in self.mixins)
        return out

    def objective(self) -> float:
        """Training objective (mean loss over the training minibatches plus penalties).

        Returns
        -------
        float
        """
        self._check_model()
        return self._evaluate_batches(self.training_batches())["loss"] + sum(
            m.penalty(self.model) for m in self.mixins)

    def predict(self, datasource=None):
        """Predictions (probabilities for logistic models) for every example of ``datasource``.

        Parameters
        ----------
        datasource : DataSource, optional
            The examples to predict (default: the training source).

        Returns
        -------
        array, shape (k, m), or (m,) for a single-output model
        """
        self._check_model()
        ds = self.datasource if datasource is None else datasource
        # computed on the model's device, returned where the source's data live
        parts = [gmat.to_device(self.model.predict(self._on_model_device(b).X),
                                gmat.device_of(b.X)) for b in ds]
        if not parts:
            k = self.model.n_outputs
            return np.empty((0,) if k == 1 else (k, 0), dtype=self.model.dtype)
        return gmat.get_array_module(parts[0]).concatenate(parts, axis=-1)

    def _check_model(self):
        if not self.model.initialized:
            raise RuntimeError("the model is not initialised: train() the learner first")

    # -- checkpoints and traces ---------------------------------------------------------------
    def save_checkpoint(self, path, extra: dict | None = None) -> None:
        """Atomically write the model and the optimizer state to ``path``.

        Parameters
        ----------
        path : str or os.PathLike
            The checkpoint file.
        extra : dict, optional
            More metadata stored beside the step count.
        """
        save_checkpoint(path, self.model, self.optimizer,
                        extra={"steps": getattr(self, "_steps", 0), **(extra or {})})

    def load_checkpoint(self, path) -> dict:
        """Restore the model parameters and optimizer state from ``path``.

        Parameters
        ----------
        path : str or os.PathLike
            A checkpoint written by :meth:`save_checkpoint`.

        Returns
        -------
        dict
            The checkpoint's metadata.

        Raises
        ------
        ValueError
            When the checkpoint's model options or optimizer class differ from this learner's.
        """
        ck = load_checkpoint(path)
        if ck.meta["model_opts"] != self.model.opts.to_dict():
            raise ValueError(
                f"{path}: checkpoint model options {ck.meta['model_opts']} differ from this "
                f"learner's {self.model.opts.to_dict()}"
            )
        p = ck.model.parameters()
        self.model.set_parameters(**p)
        self._setup()
        if ck.optimizer_state:
            if ck.meta["optimizer_class"] != type(self.optimizer).__name__:
                raise ValueError(f"{path}: saved by {ck.meta['optimizer_class']}, not "
                                 f"{type(self.optimizer).__name__}")
            self.optimizer.set_state(ck.optimizer_state)
        return ck.meta

    def write_trace(self, path) -> None:
        """Write the trace as CSV (``.csv``) or JSON (any other extension).

        Parameters
        ----------
        path : str or os.PathLike
        """
        path = os.fspath(path)
        if path.endswith(".csv"):
            with open(path, "w", newline="") as f:
                if self.trace:
                    wr = csv.DictWriter(f, fieldnames=list(self.trace[0]))
                    wr.writeheader()
                    wr.writerows(self.trace)
        else:
            with open(path, "w") as f:
                json.dump(self.trace, f, indent=1, default=float)

    def what(self) -> str:
        """Every component's option table (BIDMach's ``opts.what``): learner, model, optimizer,
        mixins and, when it has dataclass options, the datasource.

        Returns
        -------
        str
        """
        import dataclasses

        parts = [self.opts.what(), self.model.opts.what(), self.optimizer.opts.what()]
        parts += [m.opts.what() for m in self.mixins if m.opts is not None]
        ds_opts = getattr(self.datasource, "opts", None)
        if dataclasses.is_dataclass(ds_opts):
            rows = [f"  {k:<20} {v!r}" for k, v in dataclasses.asdict(ds_opts).items()]
            parts.append("\n".join([type(ds_opts).__name__, *rows]))
        return "\n\n".join(parts)

    def __repr__(self):
        return (f"Learner({self.datasource!r}, {self.model!r}, {self.optimizer!r}, "
                f"mixins={self.mixins!r})")


class _CertSums:
    """The sums :func:`roofline.glm.primal_certificate` takes, over minibatches, at the
    current model (host float64): per output ``r`` the loss sum, the conjugate sum of the dual
    point ``a = -loss'(z)``, ``g_b = sum s loss'``, ``h_b = sum s loss''`` (``S[r]``), the
    loss part of the gradient ``U[r] = X S loss'(z)`` and the total weight ``W`` (the
    weighted mean loss is ``L / W``: the certificate's ``n`` is ``W``)."""

    def __init__(self, model):
        k, d = model.coef.shape
        self.model = model
        self.loss = model.loss_name
        self.code = glm.loss_code(self.loss)
        self.U = np.zeros((k, d))
        self.S = np.zeros((k, 4))
        self.W = 0.0

    def _labels(self, y):
        """Margin-form labels ((k, m) float64) from the GLM form."""
        if self.loss == "squared":
            return y
        if self.loss == "logistic" and not np.all((y == 0) | (y == 1)):
            raise ValueError("Learner(tol=...): the logistic certificate needs labels in "
                             "{0, 1} (soft labels have none here)")
        return np.where(y > 0, 1.0, -1.0)

    def add_pass(self, batch, loss_sum, G, D):
        """Add a minibatch from the gradient pass an optimizer made at the current model
        (:meth:`GLM.gradient`'s loss sum, summed gradient ``G`` and weighted derivatives
        ``D``): with one output and a float64 model, no second product (``U`` is ``G``, the
        curvature and the conjugates follow from the derivatives); else :meth:`add`."""
        m = batch.n_examples
        if m == 0:
            return
        if self.U.shape[0] != 1 or self.model.dtype != np.float64:
            self.add(batch)
            return
        Dh = np.asarray(gmat.to_device(D, "cpu"), dtype=np.float64).reshape(m)
        w = (None if batch.w is None
             else np.ascontiguousarray(gmat.to_device(batch.w, "cpu"), dtype=np.float64))
        dl = Dh if w is None else np.divide(Dh, w, out=np.zeros(m), where=w > 0)
        y = np.ascontiguousarray(self._labels(np.asarray(gmat.to_device(batch.y, "cpu"),
                                                         dtype=np.float64).reshape(1, m))[0])
        C = glm.newton.conj_sum(-dl, y, self.code, sw=w)
        if self.loss == "squared":
            curv = np.ones(m)
        elif self.loss == "logistic":  # l'' = p (1 - p), |l'| = p
            a = np.abs(dl)
            curv = a * (1.0 - a)
        else:  # the squared hinge: 2 where the margin is active
            curv = 2.0 * (dl != 0.0)
        self.U[0] += np.asarray(gmat.to_device(G, "cpu"), dtype=np.float64).ravel()
        self.S[0] += (float(loss_sum), C, float(Dh.sum()),
                      float(curv.sum()) if w is None else float(w @ curv))
        self.W += float(m) if w is None else float(w.sum())

    def add(self, batch):
        """Add one minibatch (on the model's device) at the current model."""
        m = batch.n_examples
        if m == 0:
            return
        k = self.U.shape[0]
        z = np.asarray(gmat.to_device(self.model.linear(batch.X), "cpu"),
                       dtype=np.float64).reshape(k, m)
        y = self._labels(np.asarray(gmat.to_device(batch.y, "cpu"),
                                    dtype=np.float64).reshape(k, m))
        w = (None if batch.w is None
             else np.ascontiguousarray(gmat.to_device(batch.w, "cpu"), dtype=np.float64))
        X = gmat.to_device(batch.X, "cpu")
        for r in range(k):
            L, g, h, dl, _ = glm.newton.loss_derivs(np.ascontiguousarray(z[r]),
                                                    np.ascontiguousarray(y[r]), self.code,
                                                    sw=w)
            C = glm.newton.conj_sum(-dl, np.ascontiguousarray(y[r]), self.code, sw=w)
            self.U[r] += np.asarray(X @ (dl if w is None else dl * w)).ravel()
            self.S[r] += (L, C, g, h)
        self.W += float(m) if w is None else float(w.sum())
