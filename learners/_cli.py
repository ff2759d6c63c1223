"""The ``roofline`` command: ``train``, ``predict`` and ``info``.

``roofline train CONFIG.toml`` builds a datasource, a model, an optimizer, mixins and a learner
from one TOML file, trains with held-out evaluation and writes to the output directory:

* ``model.npz``: the checkpoint (model and optimizer state; atomic);
* ``trace.csv`` and ``trace.json``: the held-out loss trace (one row per evaluation);
* ``config.toml``: the complete configuration with every default filled in (it round-trips).

Config layout (every table optional except ``[data]``; unknown keys and bad values raise an
error naming the key and the file)::

    [data]                       # built-in Criteo-like data ...
    type = "criteo_like"         # "criteo_like" | "svmlight" | "datasource"
    n_examples = 200000
    n_bits = 18
    seed = 0
    heldout_fraction = 0.1       # the last 10% of examples: held out, never trained on
    batch_size = 4096
    # type = "svmlight": path = "train.svm", heldout_path = "test.svm" (or heldout_fraction)
    # type = "datasource": train = "ds.toml", heldout = "ds_test.toml" (datasource_from_config)

    [model]                      # GLMOptions: loss, n_outputs, fit_intercept, dtype, ...
    [optimizer]                  # type = "adagrad" | "sgd" | "lbfgs" | "model", then its options
    [[mixins]]                   # type = "l2" | "l1" | "metrics", then its options
    [learner]                    # LearnerOptions: n_passes, eval_every, early_stopping, ...
    [solver]                     # instead of [optimizer]/[mixins]/[learner]: fit by coordinate
    alpha = 1e-6                 # descent (fit_glm), mean loss + alpha * R(w); penalty =
    solver = "auto"              # "l2" | "l1", seed; the other keys are GLMSolverOptions (tol, ...)
                                 # (solver: one of roofline.glm.solver_names(runner="fit_glm"))
    [output]
    dir = "runs/demo"            # relative to the current directory
    [comm]                       # how a distributed run's ranks meet (optional)
    backend = "env"              # "env": roofline.comm.from_environment() (the launcher,
                                 # mpiexec, or one process) | "dask": one rank per worker of
    address = "tcp://host:8786"  # the Dask scheduler at address (--dask SCHEDULER overrides)
                                 # | "disk": n_ranks simulated nodes (--simulate N)

The ``[solver]`` table runs every solver of :func:`roofline.glm.fit_glm` on any ``[data]``: a
``type = "datasource"`` source is materialised into one CSC matrix (refused, naming ``[data]
memory_budget_mb``, beyond that budget), or streamed every pass by
:func:`roofline.glm.fit_glm_stream` with ``[solver] stream = true``.

One config runs at every scale: alone, under ``python -m roofline.comm.launch -n K $(which
roofline) train cfg.toml``, under ``mpiexec -n K roofline train cfg.toml`` and with ``roofline
train cfg.toml --dask SCHEDULER``.  Each rank reads its own part of the training data (a
``"files"`` source its shards ``i % size == rank``; any other source its minibatches ``i %
size == rank``), the fit runs over the ranks' communicator (``fit_glm(comm=)``,
``Learner(comm=)``), and rank 0 alone prints and writes the outputs (under Dask the client
writes them, from rank 0's result).  ``roofline predict`` runs the same ways; rank 0 writes one
prediction file in the data's order.  ``roofline train cfg.toml --simulate N`` (``[comm]
backend = "disk"``, ``n_ranks = N``) runs the same job on N nodes of a disk-simulated cluster
in this process, their messages checksummed files.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass

import numpy as np

from roofline import gmat
from roofline.gmat import Options, load_toml, option, to_toml

__all__ = ["main", "build_from_config"]

#: The ``[data] memory_budget_mb`` default: the most the materialised training matrix of an
#: in-memory ``[solver]`` fit may take in one process.
MEMORY_BUDGET_MB = 2048.0

logger = logging.getLogger(__name__)

DATA_TYPES = ("criteo_like", "svmlight", "datasource")


@dataclass
class DataOptions(Options):
    """The ``[data]`` table of a training config."""

    type: str = option("criteo_like", "where the examples come from", choices=DATA_TYPES)
    batch_size: int = option(4096, "examples per minibatch", low=1)
    heldout_fraction: float = option(0.1, "last fraction of the examples held out (never "
                                          "trained on)", low=0.0, high=0.9)
    # criteo_like
    n_examples: int = option(100_000, "criteo_like: examples to generate", low=1)
    n_bits: int = option(18, "criteo_like: 2^n_bits hashed features", low=1, high=30)
    seed: int = option(0, "criteo_like: generator seed", low=0)
    dtype: str = option("float32", "value dtype of the data", choices=("float32", "float64"))
    # svmlight
    path: str | None = option(None, "svmlight: training file", kind=str)
    heldout_path: str | None = option(None, "svmlight: held-out file (else heldout_fraction)",
                                      kind=str)
    n_features: int = option(0, "svmlight: number of features (0: from the data)", low=0)
    # datasource
    train: str | None = option(None, "datasource: TOML of the training source", kind=str)
    heldout: str | None = option(None, "datasource: TOML of the held-out source", kind=str)
    memory_budget_mb: float = option(MEMORY_BUDGET_MB, "datasource with an in-memory [solver]: "
                                     "the most memory (MB) this process's training examples may "
                                     "take materialised as one CSC matrix (else: [solver] "
                                     "stream = true)", low=0.0, low_open=True)

    def _check(self, prefix):
        if self.type == "svmlight" and not self.path:
            raise ValueError(f"{prefix}type 'svmlight' needs the key 'path'")
        if self.type == "datasource" and not self.train:
            raise ValueError(f"{prefix}type 'datasource' needs the key 'train'")


@dataclass
class SolverProblemOptions(Options):
    """The keys of the ``[solver]`` table that define the problem, not the solver (the others
    are :class:`roofline.learners.GLMSolverOptions`); the loss and ``fit_intercept`` come from
    ``[model]``."""

    alpha: float = option(1e-6, "regularisation: mean loss + alpha * R(w)", low=0.0,
                          low_open=True)
    penalty: str = option("l2", "R(w): ||w||^2 / 2 (l2) or ||w||_1 (l1)", choices=("l2", "l1"))
    seed: int = option(0, "seed of the coordinate permutations", low=0)
    stream: bool = option(False, "train out of core: roofline.glm.fit_glm_stream streams the "
                                 "[data] source every pass (penalty l2, the dual), instead of "
                                 "fit_glm on the materialised matrix")


@dataclass
class CommOptions(Options):
    """The ``[comm]`` table: how the ranks of a distributed run find each other."""

    backend: str = option("env", "env: roofline.comm.from_environment() (the launcher, mpiexec, "
                                 "or one process); dask: one rank per worker of the scheduler "
                                 "at address; disk: n_ranks simulated nodes in this process, "
                                 "their messages checksummed files",
                          choices=("env", "dask", "disk"))
    address: str | None = option(None, "dask: the scheduler's address (tcp://host:8786)",
                                 kind=str)
    n_ranks: int = option(0, "dask: number of ranks (0: one per worker); disk: the simulated "
                             "nodes", low=0)
    timeout: float = option(120.0, "dask: seconds a rank waits for a peer", low=0.0,
                            low_open=True)

    def _check(self, prefix):
        if self.backend == "dask" and not self.address:
            raise ValueError(f"{prefix}backend 'dask' needs the key 'address' (the scheduler's, "
                             "or roofline train --dask SCHEDULER)")
        if self.backend == "disk" and self.n_ranks < 1:
            raise ValueError(f"{prefix}backend 'disk' needs the key 'n_ranks' (the simulated "
                             "nodes, >= 1; or roofline train --simulate N)")


def _cd_losses():
    """``[model]`` loss names (canonical and aliases) -> fit_glm's loss, for the losses that a
    solver of :func:`roofline.glm.fit_glm` takes, from the one registry (roofline.glm, and with
    it scikit-learn, is imported by the commands that fit, not by ``roofline --help``)."""
    from roofline import glm

    fit = {loss for spec in glm.solvers(runner="fit_glm") for loss in spec.losses}
    return {name: glm.resolve_loss(name) for name in (*glm.LOSSES, *glm.LOSS_ALIASES)
            if glm.resolve_loss(name) in fit}


def _solver_table(t: dict, where: str, loss: str):
    """``(SolverProblemOptions, GLMSolverOptions)`` of a ``[solver]`` table, the solver checked
    against the problem by the registry (:func:`roofline.glm.check_solver`, the messages of
    :func:`~roofline.glm.fit_glm`)."""
    from roofline.glm import GLMSolverOptions, check_solver

    problem_keys = set(SolverProblemOptions.__dataclass_fields__)
    problem = SolverProblemOptions.from_dict({k: v for k, v in t.items() if k in problem_keys},
                                             where)
    opts = GLMSolverOptions.from_dict({k: v for k, v in t.items() if k not in problem_keys}, where)
    try:
        check_solver(opts.solver, loss=loss, penalty=problem.penalty, dual=opts.dual)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    if problem.stream:
        from roofline.glm import CD_LOSSES

        if opts.solver != "auto" or problem.penalty != "l2" or opts.dual is False \
                or loss not in CD_LOSSES:
            raise ValueError(
                f"{where}: stream = true runs the out-of-core dual coordinate descent of "
                f"roofline.glm.fit_glm_stream: it needs solver = 'auto' (got {opts.solver!r}), "
                f"penalty = 'l2' (got {problem.penalty!r}), dual unset or true and a loss in "
                f"{list(CD_LOSSES)} (got {loss!r})")
    return problem, opts


#: fit_glm_stream's arguments that the CLI sets itself (from [model], [solver] and the ranks)
_STREAM_SET = {"source", "loss", "alpha", "fit_intercept", "random_state", "comm", "verbose",
               "on_chunk", "tol", "max_iter", "intercept_scaling", "check_every"}


def _stream_table(t: dict, where: str, streaming: bool) -> dict:
    """The ``[stream]`` table: further keyword arguments of :func:`roofline.glm.fit_glm_stream`
    (``shuffle``, ``cache``, ``workdir``, ...: those of its signature that no other table sets),
    checked by name here and by value when it runs."""
    import inspect

    from roofline.glm import fit_glm_stream

    if not streaming:
        raise ValueError(f"{where}: a [stream] table needs [solver] stream = true")
    allowed = sorted(set(inspect.signature(fit_glm_stream).parameters) - _STREAM_SET)
    for k in t:
        if k not in allowed:
            raise ValueError(f"{where}: unknown key {k!r} (allowed: {', '.join(allowed)}; "
                             "tol, max_iter, check_every and intercept_scaling go in [solver])")
    return dict(t)


@dataclass
class OutputOptions(Options):
    """The ``[output]`` table."""

    dir: str = option("roofline-run", "output directory (model, trace, resolved config)")


def _optimizers():
    from ._optimizers import LBFGS, SGD, ADAGrad, ModelUpdate

    return {"adagrad": ADAGrad, "sgd": SGD, "lbfgs": LBFGS, "model": ModelUpdate}


def _mixins():
    from ._mixins import L1Regularizer, L2Regularizer, MetricsRecorder

    return {"l2": L2Regularizer, "l1": L1Regularizer, "metrics": MetricsRecorder}


_MIXIN_OPTS = {"l2": "L2Options", "l1": "L1Options", "metrics": "MetricsOptions"}


def _table(doc, key, where, kind=dict):
    v = doc.get(key, {} if kind is dict else [])
    if not isinstance(v, kind):
        what = "table" if kind is dict else "list of tables"
        raise ValueError(f"{where}: '{key}' must be a {what}")
    return v


def _split(X, y, frac):
    m = X.shape[1]
    n_ho = int(round(m * frac))
    if n_ho == 0:
        return (X, y), None
    cut = m - n_ho
    return (X[:, :cut].tocsc(), y[:cut]), (X[:, cut:].tocsc(), y[cut:])


def _datasource(path: str, rank: int = 0, size: int = 1, *, for_predict: bool = False):
    """The DataSource of a datasource TOML; one rank's shards of a ``"files"`` source
    (``rank``/``size`` set over the file's: ``i % size == rank``).  For prediction a ``"files"``
    source is read in file order (``order = "sequential"``) and sharded only when its stages keep
    the order (prefetch, to_device): predictions then come back in the data's order."""
    from roofline import datasources as ds

    over = {}
    if size > 1 or for_predict:
        doc = load_toml(path)  # invalid TOML: a ValueError naming the file
        src = doc.get("source") if isinstance(doc.get("source"), dict) else {}
        stages = doc.get("stages") if isinstance(doc.get("stages"), list) else []
        if src.get("type") == "files":
            keeps_order = all(isinstance(t, dict) and t.get("type") in ("prefetch", "to_device")
                              for t in stages)
            if for_predict:
                over["order"] = "sequential"
            if size > 1 and (keeps_order or not for_predict):
                if "rank" in src or "size" in src:
                    raise ValueError(
                        f"{path}: [source] sets 'rank'/'size', but this run shards the source "
                        f"itself (rank {rank} of {size}): leave the keys out")
                over.update(rank=rank, size=size)
    return ds.datasource_from_config(path, overrides=over or None)


def _sources(d: DataOptions, where: str, base: str, rank: int = 0, size: int = 1,
             heldout: bool = True):
    """``(train, held)`` DataSources of the ``[data]`` table: ``train`` sharded for one rank of
    ``size`` when the source can be (a ``"files"`` datasource), ``held`` None without held-out
    data or with ``heldout=False``."""
    from roofline import datasources as ds

    def resolve(p):
        full = p if os.path.isabs(p) else os.path.join(base, p)
        if os.path.isdir(full):
            raise ValueError(f"{where} [data]: {full} is a directory, not a data file")
        return full

    if d.type == "criteo_like":
        X, y = ds.make_criteo_like_matrix(d.n_examples, seed=d.seed, n_bits=d.n_bits,
                                          dtype=d.dtype)
        tr, ho = _split(X, y, d.heldout_fraction)
    elif d.type == "svmlight":
        kw = {"dtype": d.dtype}
        if d.n_features:
            kw["n_features"] = d.n_features
        X, y = ds.load_svmlight(resolve(d.path), **kw)
        y = (y > 0).astype(d.dtype) if set(np.unique(y)) <= {-1.0, 1.0} else y.astype(d.dtype)
        if d.heldout_path:
            kw["n_features"] = X.shape[0]
            Xh, yh = ds.load_svmlight(resolve(d.heldout_path), **kw)
            yh = (yh > 0).astype(d.dtype) if set(np.unique(yh)) <= {-1.0, 1.0} else yh
            tr, ho = (X, y), (Xh, yh.astype(d.dtype))
        else:
            tr, ho = _split(X, y, d.heldout_fraction)
    else:
        train = _datasource(resolve(d.train), rank, size)
        held = _datasource(resolve(d.heldout)) if d.heldout and heldout else None
        return train, held
    train = ds.MatSource(tr[0], tr[1], batch_size=d.batch_size)
    held = None if ho is None or not heldout else ds.MatSource(
        ho[0], ho[1], batch_size=max(d.batch_size, 8192))
    return train, held


def build_from_config(path):
    """Parse and validate a training config; return ``(parts, resolved)``.

    ``parts`` holds the options objects (``data``, ``model``, ``optimizer`` (class, options),
    ``mixins`` (list of (class, options)), ``learner``, ``output``, ``solver``, ``comm``);
    ``resolved`` is the complete
    config dict with every default filled in.

    Raises
    ------
    ValueError, TypeError
        Naming the file, the table and the key.
    """
    from ._learner import LearnerOptions
    from ._models import GLMOptions

    path = os.fspath(path)
    if not os.path.exists(path):
        raise ValueError(f"{path}: config file not found")
    if os.path.isdir(path):
        raise ValueError(f"{path}: is a directory, not a TOML config file")
    doc = load_toml(path)
    allowed = {"data", "model", "optimizer", "mixins", "learner", "output", "solver", "comm",
               "stream"}
    for key in doc:
        if key not in allowed:
            raise ValueError(f"{path}: unknown top-level key {key!r}; allowed: "
                             f"{', '.join(sorted(allowed))}")
    if "data" not in doc:
        raise ValueError(f"{path}: missing the [data] table")
    data = DataOptions.from_dict(_table(doc, "data", path), f"{path} [data]")
    model = GLMOptions.from_dict(_table(doc, "model", path), f"{path} [model]")
    opt_t = dict(_table(doc, "optimizer", path))
    opt_type = opt_t.pop("type", "adagrad")
    optimizers = _optimizers()
    if opt_type not in optimizers:
        raise ValueError(f"{path} [optimizer]: key 'type' must be one of "
                         f"{sorted(optimizers)}, got {opt_type!r}")
    opt_cls = optimizers[opt_type]
    opt = opt_cls.options_class.from_dict(opt_t, f"{path} [optimizer]")
    mixins = []
    from . import _mixins as mx

    for i, t in enumerate(_table(doc, "mixins", path, list), 1):
        if not isinstance(t, dict):
            raise ValueError(f"{path}: [[mixins]] #{i} must be a table")
        t = dict(t)
        typ = t.pop("type", None)
        if typ not in _MIXIN_OPTS:
            raise ValueError(f"{path} [[mixins]] #{i}: key 'type' must be one of "
                             f"{sorted(_MIXIN_OPTS)}, got {typ!r}")
        o = getattr(mx, _MIXIN_OPTS[typ]).from_dict(t, f"{path} [[mixins]] #{i}")
        mixins.append((typ, o))
    learner = LearnerOptions.from_dict(_table(doc, "learner", path), f"{path} [learner]")
    output = OutputOptions.from_dict(_table(doc, "output", path), f"{path} [output]")
    comm = CommOptions.from_dict(_table(doc, "comm", path), f"{path} [comm]")
    solver = None
    if "solver" in doc:
        where = f"{path} [solver]"
        for key in ("optimizer", "mixins", "learner"):
            if key in doc:
                raise ValueError(f"{where}: a coordinate-descent fit takes no [{key}] table "
                                 "(the [solver] table replaces [optimizer], [[mixins]] and "
                                 "[learner])")
        cd_losses = _cd_losses()
        if model.loss not in cd_losses:
            raise ValueError(f"{where}: [model] loss {model.loss!r} has no coordinate-descent "
                             f"or Newton solver; use one of {sorted(cd_losses)}")
        solver = _solver_table(_table(doc, "solver", path), where, cd_losses[model.loss])
    stream = _stream_table(_table(doc, "stream", path), f"{path} [stream]",
                           solver is not None and solver[0].stream) if "stream" in doc else {}
    resolved = {
        "data": data.to_dict(), "model": model.to_dict(),
        "optimizer": {"type": opt_type, **opt.to_dict()},
        "mixins": [{"type": t, **o.to_dict()} for t, o in mixins],
        "learner": learner.to_dict(), "output": output.to_dict(),
    }
    if solver is not None:
        resolved = {k: resolved[k] for k in ("data", "model", "output")}
        resolved["solver"] = {**solver[0].to_dict(), **solver[1].to_dict()}
    if "comm" in doc:
        resolved["comm"] = comm.to_dict()
    if stream:
        resolved["stream"] = dict(stream)
    parts = dict(data=data, model=model, optimizer=(opt_cls, opt), mixins=mixins,
                 learner=learner, output=output, solver=solver, comm=comm, stream=stream,
                 base=os.path.dirname(os.path.abspath(path)))
    return parts, resolved


def _config_toml(resolved: dict) -> str:
    """TOML of a resolved config (mixins as an array of tables, ``[[mixins]]``)."""
    return to_toml({**resolved, "mixins": resolved.get("mixins") or None})


def _fmt(x):
    return "nan" if isinstance(x, float) and math.isnan(x) else f"{x:.5f}"


class _Job:
    """One rank's part in a run: its communicator (None alone or in a group of one), its rank
    and size, and where the lead's (rank 0's) lines go: printed, or kept in ``lines`` (a Dask
    worker's, printed by the client).  The other ranks print nothing."""

    def __init__(self, comm=None, lines=None):
        self.rank = 0 if comm is None else int(comm.rank)
        self.size = 1 if comm is None else int(comm.size)
        self.comm = comm if self.size > 1 else None
        self.lead = self.rank == 0
        self.lines = lines

    def say(self, text: str) -> None:
        if not self.lead:
            return
        if self.lines is None:
            print(text, flush=True)
        else:
            self.lines.append(text)


@contextlib.contextmanager
def _quiet(job):
    """The ranks other than 0 raise no warnings (rank 0 shows the job's).  Ranks that are
    threads of one process (``backend = "disk"``) keep the filters: they are the process's."""
    if job.lead or threading.current_thread() is not threading.main_thread():
        yield
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@contextlib.contextmanager
def _environment_comm():
    """The communicator of however this process was started
    (:func:`roofline.comm.from_environment`: the launcher's, MPI's, or a group of one)."""
    from roofline.comm import from_environment

    comm = from_environment()
    try:
        yield comm
    finally:
        comm.close()


def _comm_options(copts, args):
    """The ``[comm]`` options, ``--dask SCHEDULER`` or ``--simulate N`` over them."""
    address = getattr(args, "dask", None)
    nodes = getattr(args, "simulate", None)
    base = copts or CommOptions()
    if address and nodes:
        raise ValueError("--dask and --simulate exclude each other")
    if nodes is not None:
        return CommOptions(backend="disk", n_ranks=nodes, timeout=base.timeout)
    if not address:
        return base
    return CommOptions(backend="dask", address=address, n_ranks=base.n_ranks,
                       timeout=base.timeout)


def _on_disk(copts, fn, args):
    """``fn(comm, *args)`` on ``copts.n_ranks`` nodes of a disk-simulated cluster in this
    process (``roofline.comm.run(backend="disk")``: Kylix over checksummed message files);
    rank 0's result."""
    from roofline.comm import run

    return run(fn, copts.n_ranks, backend="disk", args=args, timeout=copts.timeout)[0]


def _on_dask(copts, fn, args):
    """``fn(comm, *args)`` on one rank per worker of the Dask scheduler at ``copts.address``;
    rank 0's result."""
    try:
        import distributed
    except ImportError as e:
        raise ImportError("running on Dask (--dask, [comm] backend = 'dask') needs "
                          "dask.distributed (pip install 'roofline[dask]')") from e
    from roofline.comm import run_on_dask

    with distributed.Client(copts.address, timeout=copts.timeout) as client:
        results = run_on_dask(client, fn, n=copts.n_ranks or None, args=args,
                              timeout=copts.timeout)
    return results[0]


#: The ``[comm]`` backends whose ranks this command starts itself (rank 0's result back).
_RUNNERS = {"dask": _on_dask, "disk": _on_disk}


def _innermost(src):
    """The first source of a chain of stages (``.source``)."""
    seen = 0
    while getattr(src, "source", None) is not None and seen < 100:
        src, seen = src.source, seen + 1
    return src


def _glm_form(y, dtype):
    """Labels in the GLM form of the minibatch models ({-1, 1} -> {0, 1})."""
    y = np.asarray(y)
    return (y > 0).astype(dtype) if set(np.unique(y)) <= {-1.0, 1.0} else y.astype(dtype)


def _for_model(b, model):
    """Minibatch ``b`` for ``model`` (a GLM): its values in the model's dtype and a classifier's
    labels in the GLM form (the solvers take any float data and {-1, 1} labels; the GLM
    evaluates its own)."""
    from roofline.glm import LOSS_LABELS, resolve_loss

    dtype = model.opts.dtype
    if b.X.dtype != np.dtype(dtype):
        b.X = b.X.astype(dtype)
    if b.y is not None:
        real = LOSS_LABELS[resolve_loss(model.opts.loss)] == "real"
        b.y = np.asarray(b.y).astype(dtype) if real else _glm_form(b.y, dtype)
    return b


def _materialise(job, src, d: DataOptions, config: str):
    """``(X, y, w)``: this rank's training examples as one CSC matrix (a sharded source: its
    shards; otherwise minibatches ``i % size == rank``), refused beyond ``[data]
    memory_budget_mb``."""
    import scipy.sparse as sp

    from roofline.datasources import MatSource

    from ._learner import _source_shard

    stripe = job.size > 1 and _source_shard(src)[1] == 1
    if isinstance(src, MatSource) and not stripe:
        return src.X, src.y, src.w
    budget = d.memory_budget_mb * 2.0 ** 20
    data, indices, counts, ys, ws = [], [], [], [], []
    nbytes, n, weighted = 0, 0, False
    for i, mb in enumerate(src):
        if stripe and i % job.size != job.rank:
            continue
        X = mb.X if gmat.is_sparse(mb.X) else sp.csc_matrix(np.asarray(mb.X))
        if mb.y is None:
            raise ValueError(f"{config} [data]: minibatch {i} of {src!r} has no labels")
        X = X.tocsc()
        w = None if mb.w is None else np.asarray(mb.w, dtype=np.float64)
        weighted = weighted or w is not None
        data.append(X.data)
        indices.append(X.indices)
        counts.append(np.diff(X.indptr))
        ys.append(np.asarray(mb.y))
        ws.append(w)
        n += X.shape[1]
        nbytes += (X.data.nbytes + X.indices.nbytes + 8 * X.shape[1] + ys[-1].nbytes
                   + (0 if w is None else w.nbytes))
        if nbytes > budget:
            raise ValueError(
                f"{config} [data]: materialising the training source {src!r} for the in-memory "
                f"[solver] takes more than memory_budget_mb = {d.memory_budget_mb:g} "
                f"({nbytes / 2.0 ** 20:.1f} MB at {n} examples); raise [data] memory_budget_mb, "
                "or set [solver] stream = true to train out of core")
    nf = int(src.n_features)
    if not data:
        X = sp.csc_matrix((nf, 0), dtype=np.float64)
        return X, np.zeros(0), None
    nnz = sum(len(a) for a in data)
    itype = np.int32 if nnz < 2 ** 31 else np.int64
    indptr = np.zeros(n + 1, dtype=itype)
    np.cumsum(np.concatenate(counts), out=indptr[1:])
    X = sp.csc_matrix((np.concatenate(data), np.concatenate(indices).astype(itype, copy=False),
                       indptr), shape=(nf, n))
    y = np.concatenate(ys, axis=-1)
    w = None
    if weighted:
        w = np.concatenate([np.ones(len(yy)) if ww is None else ww
                            for yy, ww in zip(ys, ws, strict=True)])
    return X, y, w


def _fit_stream(job, train, loss, problem, opts, mopts, stream, where, verbose):
    """:func:`roofline.glm.fit_glm_stream` over ``train`` (with ``comm=`` over the ranks, each
    streaming its own shards), the ``[solver]`` options it takes and the ``[stream]`` table
    passed on."""
    import inspect

    from roofline.glm import fit_glm_stream

    from ._learner import _source_shard

    kw = dict(tol=opts.tol, max_iter=opts.max_iter, intercept_scaling=opts.intercept_scaling)
    if opts.check_every != "auto":
        kw["check_every"] = opts.check_every
    if job.comm is not None:
        if "comm" not in inspect.signature(fit_glm_stream).parameters:
            raise ValueError(f"{where}: stream = true runs in one process here "
                             "(roofline.glm.fit_glm_stream takes no comm=); run it without a "
                             "launcher, or set stream = false")
        if _source_shard(train)[1] != job.size:
            raise ValueError(f"{where}: stream = true on {job.size} ranks needs a [data] "
                             "datasource of type 'files' (each rank streams its own shards)")
        kw["comm"] = job.comm
    try:
        return fit_glm_stream(train, loss=loss, alpha=problem.alpha,
                              fit_intercept=mopts.fit_intercept, random_state=problem.seed,
                              verbose=verbose, **kw, **stream)
    except (ValueError, TypeError) as e:
        bad = [k for k in stream if k in str(e)]
        if not bad:
            raise
        raise type(e)(f"{where.replace('[solver]', '[stream]')}: {e}") from None


def _train(job, parts, config, workdir):
    """Build and fit on this rank; on rank 0 write the outputs to ``workdir`` and return
    ``{"files", "trace", "plot", "title"}`` (None on the other ranks)."""
    if parts["solver"] is not None:
        return _train_solver(job, parts, config, workdir)
    return _train_learner(job, parts, config, workdir)


def _train_learner(job, parts, config, workdir):
    from ._learner import Learner
    from ._models import GLM

    t0 = time.perf_counter()
    train, held = _sources(parts["data"], config, parts["base"], job.rank, job.size)
    t_data = time.perf_counter() - t0
    mix_classes = _mixins()
    mixins = [mix_classes[t](opts=o) for t, o in parts["mixins"]]
    model = GLM(parts["model"])
    if parts["data"].type != "datasource" and model.opts.dtype != parts["data"].dtype:
        raise ValueError(f"{config}: [model] dtype {model.opts.dtype!r} differs from "
                         f"[data] dtype {parts['data'].dtype!r}")
    opt_cls, opt_opts = parts["optimizer"]
    lopts = parts["learner"]
    if lopts.checkpoint is None and job.comm is None and workdir is not None:
        # pass-end checkpoints of a run in one process (a data-parallel run's would be one
        # file per rank, written where [learner] checkpoint says)
        lopts = type(lopts).from_dict({**lopts.to_dict(),
                                       "checkpoint": os.path.join(workdir, "model.npz")})
    learner = Learner(train, model, opt_cls(opt_opts), mixins=mixins, heldout=held, opts=lopts,
                      comm=job.comm)
    job.say(f"data: {train!r} (built in {t_data:.1f} s)"
            + (f"\nheld out: {held!r}" if held is not None else "")
            + (f"\nranks: {job.size} (this is rank 0)" if job.comm is not None else ""))
    res = learner.train()
    if not job.lead:
        return None
    learner.save_checkpoint(os.path.join(workdir, "model.npz"), extra={"final": True})
    learner.write_trace(os.path.join(workdir, "trace.csv"))
    learner.write_trace(os.path.join(workdir, "trace.json"))
    job.say(f"{'step':>8} {'examples':>10} {'train_loss':>11} {'heldout_loss':>13} "
            f"{'examples/s':>11}")
    for r in res.trace:
        job.say(f"{r['step']:>8} {r['examples']:>10} {_fmt(r['train_loss']):>11} "
                f"{_fmt(r['heldout_loss']):>13} {r['examples_per_s']:>11.0f}")
    job.say(f"trained on {res.n_examples} examples in {res.seconds:.2f} s: "
            f"{res.examples_per_s:,.0f} examples/s; best held-out loss "
            f"{_fmt(res.best_heldout_loss)}" + (" (stopped early)" if res.stopped_early else ""))
    return {"files": ["model.npz", "trace.csv", "trace.json"], "trace": res.trace,
            "plot": "learner", "title": None}


def _train_solver(job, parts, config, workdir):
    """``roofline train`` with a ``[solver]`` table: one :func:`fit_glm` (over the ranks'
    communicator when there are several) on this rank's training examples, materialised, or
    :func:`fit_glm_stream` over the source (``stream = true``); rank 0 writes ``model.npz`` (a
    GLM checkpoint ``roofline predict`` reads) and ``trace.json`` (the solver's objective and
    duality gap at every check)."""
    import json

    from roofline.glm import check_solver, fit_glm, get_solver

    from ._checkpoint import save_checkpoint
    from ._models import GLM

    problem, opts = parts["solver"]
    mopts = parts["model"]
    where = f"{config} [solver]"
    if mopts.n_outputs != 1:
        raise ValueError(f"{where}: coordinate descent fits one output; [model] has "
                         f"n_outputs={mopts.n_outputs}")
    loss = _cd_losses()[mopts.loss]
    if job.comm is not None and not problem.stream and opts.dual is None \
            and problem.penalty == "l2" and (opts.solver == "auto"
                                             or "dual" in get_solver(opts.solver).formulations):
        # each rank holds its own examples: coordinate descent over the ranks is the dual's
        # (CoCoA+); its primal would shard the features of examples that every rank holds
        logger.info("%d ranks, each with its own examples: solving the dual (set [solver] "
                    "dual = true for the same problem in one process)", job.size)
        opts = type(opts).from_dict({**opts.to_dict(), "dual": True}, where)
    if job.comm is not None and not problem.stream:
        try:
            check_solver(opts.solver, loss=loss, penalty=problem.penalty, dual=opts.dual,
                         comm=True)
        except ValueError as e:
            raise ValueError(f"{where}: on {job.size} ranks: {e}") from None
    train, held = _sources(parts["data"], config, parts["base"], job.rank, job.size,
                           heldout=job.lead)
    verbose = int(logging.getLogger().isEnabledFor(logging.INFO))
    if problem.stream:
        res = _fit_stream(job, train, loss, problem, opts, mopts, parts["stream"], where,
                          verbose)
    else:
        X, y, w = _materialise(job, train, parts["data"], config)
        res = fit_glm(X, y, loss=loss, alpha=problem.alpha, penalty=problem.penalty,
                      fit_intercept=mopts.fit_intercept, random_state=problem.seed,
                      options=opts, verbose=verbose, comm=job.comm, sample_weight=w)
    if not job.lead:
        return None
    model = GLM(mopts)
    model.set_parameters(np.asarray(res.coef).reshape(1, -1), np.array([res.intercept]))
    auto = opts.solver == "auto"  # say what ran, and why (printed and in the checkpoint)
    reason = res.info.get("auto_reason") or ("the out-of-core solver ([solver] stream = true)"
                                             if problem.stream else "chosen from the data")
    save_checkpoint(os.path.join(workdir, "model.npz"), model,
                    extra={"final": True, "solver": res.solver, "n_iter": res.n_iter,
                           "converged": res.converged, "ranks": job.size,
                           "solver_requested": opts.solver,
                           **({"auto_reason": reason} if auto else {})})
    trace = [{"check": i, "objective": float(P), "gap": float(G), "seconds": float(T)}
             for i, (P, G, T) in enumerate(zip(res.objective, res.gap_history, res.times,
                                                   strict=True))]
    with open(os.path.join(workdir, "trace.json"), "w") as f:
        json.dump(trace, f, indent=1)
    chosen = f"{res.solver} (auto: {reason})" if auto else res.solver
    job.say(f"{chosen}: {res.n_iter} iterations in {res.time:.2f} s, objective "
            f"{res.objective[-1]:.8g}, relative duality gap {res.relative_gap:.3e}"
            + ("" if res.converged else f" (did not reach tol={opts.tol:g})")
            + (f" ({job.size} ranks)" if job.comm is not None else ""))
    if held is not None:
        tot, weight = 0.0, 0.0
        for b in held:
            ls, ws = model.loss(_for_model(b, model))
            tot, weight = tot + float(ls), weight + float(ws)
        job.say(f"held-out {mopts.loss} loss: {_fmt(tot / weight if weight else float('nan'))}")
    return {"files": ["model.npz", "trace.json"], "trace": trace, "plot": "solver",
            "title": res.solver}


def _train_rank(comm, parts, config):
    """One rank of ``roofline train --dask``: rank 0 returns its outputs' bytes and lines."""
    job = _Job(comm, lines=[])
    with tempfile.TemporaryDirectory(prefix="roofline-train-") as tmp, _quiet(job):
        rep = _train(job, parts, config, tmp if job.lead else None)
        if rep is None:
            return None
        rep["blobs"] = {}
        for name in rep["files"]:
            with open(os.path.join(tmp, name), "rb") as f:
                rep["blobs"][name] = f.read()
    rep["lines"] = job.lines
    return rep


def _write_config(out, resolved):
    with open(os.path.join(out, "config.toml"), "w") as f:
        f.write(_config_toml(resolved))


def _finish_train(rep, out, args):
    """Rank 0's (or the Dask client's) last step: the files a Dask rank sent, its lines, the
    plot, and what was written."""
    for name, blob in rep.get("blobs", {}).items():
        tmp = os.path.join(out, f".{name}.tmp")
        with open(tmp, "wb") as f:
            f.write(blob)
        os.replace(tmp, os.path.join(out, name))
    for line in rep.get("lines", ()):
        print(line)
    wrote = ", ".join([*rep["files"], "config.toml"])
    png = _plot_path(args, out)
    if png is not None:
        if rep["plot"] == "learner":
            from ._plot import plot_trace

            axes = plot_trace(rep["trace"], path=png, title=os.path.basename(out.rstrip("/")))
            _close(axes[0].figure)
        else:
            from ._plot import plot_cd_trace

            ax = plot_cd_trace(rep["trace"], path=png, title=f"{rep['title']}")
            _close(ax.figure)
        wrote += f"; plot: {png}"
    print(f"wrote {out}/{wrote}")
    return 0


def cmd_train(args) -> int:
    parts, resolved = build_from_config(args.config)
    if args.output:
        parts["output"] = OutputOptions(dir=args.output)
        resolved["output"] = parts["output"].to_dict()
    copts = _comm_options(parts["comm"], args)
    out = parts["output"].dir
    if os.path.exists(out) and not os.path.isdir(out):
        raise ValueError(f"output directory {out} exists and is not a directory")
    if args.plot is not None:  # fail before training, not after it
        from roofline.gmat import require_matplotlib

        require_matplotlib("roofline train --plot")
    if copts.backend in _RUNNERS:
        rep = _RUNNERS[copts.backend](copts, _train_rank, (parts, os.path.abspath(args.config)))
        os.makedirs(out, exist_ok=True)
        _write_config(out, resolved)
        return _finish_train(rep, out, args)
    with _environment_comm() as comm:
        job = _Job(comm)
        with _quiet(job):
            if job.lead:
                os.makedirs(out, exist_ok=True)
                _write_config(out, resolved)
            rep = _train(job, parts, args.config, out if job.lead else None)
        if not job.lead:
            return 0
    return _finish_train(rep, out, args)


def _plot_path(args, out):
    """The PNG path of ``--plot [PATH]`` (``OUT/trace.png`` without a path), or None."""
    p = getattr(args, "plot", None)
    if p is None:
        return None
    if p == "":
        return os.path.join(out, "trace.png")
    return p


def _close(fig):
    import matplotlib.pyplot as plt

    plt.close(fig)


def _predict(job, model_path, data):
    """This rank's predictions (a sharded source: its shards; otherwise its minibatches ``i %
    size == rank``) and loss sums; on rank 0 ``(P, loss, weight)``, all ranks' predictions in
    the data's order (None on the other ranks)."""
    from roofline import datasources as ds

    from ._checkpoint import load_checkpoint
    from ._learner import _source_shard

    ck = load_checkpoint(model_path)
    model = ck.model
    dt = model.opts.dtype
    if data.endswith(".toml"):
        doc = load_toml(data)
        if "data" in doc:  # a training config: predict its held-out split
            parts, _ = build_from_config(data)
            _, src = _sources(parts["data"], data, parts["base"])
            if src is None:
                raise ValueError(f"{data}: the config has no held-out data to predict")
        else:
            src = _datasource(data, job.rank, job.size, for_predict=True)
    else:
        X, y = ds.load_svmlight(data, n_features=model.n_features, dtype=dt)
        src = ds.MatSource(X, y, batch_size=65536)  # labels: _for_model
    if getattr(src, "n_features", model.n_features) != model.n_features:
        raise ValueError(f"{data} has {src.n_features} features, the model "
                         f"{model_path} has {model.n_features}")
    sharded = _source_shard(src)[1] > 1
    pieces, mine = {}, []
    loss, weight = 0.0, 0.0
    for i, b in enumerate(src):
        if not sharded and i % job.size != job.rank:
            continue
        b = _for_model(b, model)
        p = np.asarray(model.predict(b.X))
        if sharded:
            mine.append(p)
        else:
            pieces[i] = p
        if b.y is not None:
            ls, ws = model.loss(b)
            loss, weight = loss + float(ls), weight + float(ws)
    if sharded:  # this rank's shards, in file order: one piece per shard, keyed by its index
        fs = _innermost(src)
        P = np.concatenate(mine, axis=-1) if mine else np.zeros(0)
        cuts = np.cumsum(fs.shard_sizes)[:-1]
        pieces = dict(zip(fs.shard_ids, np.split(P, cuts, axis=-1), strict=True))
    if job.comm is not None:
        loss, weight = (float(v) for v in job.comm.allreduce(np.array([loss, weight])))
        gathered = job.comm.gather(pieces)
    else:
        gathered = [pieces]
    if not job.lead:
        return None
    merged = {k: v for part in gathered for k, v in part.items()}
    P = (np.concatenate([merged[k] for k in sorted(merged)], axis=-1) if merged
         else np.zeros(0))
    return P, loss, weight, model.opts.loss


def _predict_rank(comm, model_path, data):
    """One rank of ``roofline predict --dask``."""
    job = _Job(comm, lines=[])
    with _quiet(job):
        return _predict(job, model_path, data)


def cmd_predict(args) -> int:
    copts = _comm_options(None, args)
    if copts.backend in _RUNNERS:
        rep = _RUNNERS[copts.backend](copts, _predict_rank,
                                      (os.path.abspath(args.model), os.path.abspath(args.data)))
    else:
        with _environment_comm() as comm:
            job = _Job(comm)
            with _quiet(job):
                rep = _predict(job, args.model, args.data)
            if not job.lead:
                return 0
    P, loss, weight, loss_name = rep
    if args.output:
        if args.output.endswith(".npy"):
            np.save(args.output, P)
        else:
            np.savetxt(args.output, np.atleast_2d(P).T, fmt="%.7g")
        print(f"wrote {P.shape[-1]} predictions to {args.output}")
    if weight:
        print(f"mean {loss_name} loss on {args.data}: {loss / weight:.6f}")
    return 0


def cmd_info(args) -> int:

    report = getattr(gmat, "roofline_report", None)
    if report is None:
        print("this installation has no gmat.roofline_report(): the machine's roofline report "
              "is not available")
        return 1
    print(report(remeasure=args.remeasure))
    return 0


def _positive_int(text):
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return n


def _version() -> str:
    """The installed distribution's version (``roofline.learners.__version__``), read from its
    metadata: ``roofline --version`` imports nothing more than ``--help`` does."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("roofline")
    except PackageNotFoundError:  # pragma: no cover - running from an uninstalled tree
        return "unknown (not installed)"


def _parser():
    p = argparse.ArgumentParser(prog="roofline",
                                description="Roofline: machine learning at the hardware limit")
    p.add_argument("--version", action="version", version=f"roofline {_version()}",
                   help="print the installed version and exit")
    p.add_argument("-v", "--verbose", action="store_true", help="log progress (INFO)")
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train a model from a TOML config")
    t.add_argument("config", help="TOML config (see examples/logistic_criteo.toml)")
    t.add_argument("-o", "--output", help="output directory (overrides [output] dir)")
    t.add_argument("--plot", nargs="?", const="", default=None, metavar="PATH",
                   help="also draw the trace (loss and throughput against examples) to a PNG: "
                        "PATH, or trace.png in the output directory; needs matplotlib "
                        "(pip install 'roofline[plot]')")
    t.add_argument("--dask", metavar="SCHEDULER",
                   help="run on the Dask cluster of this scheduler (tcp://host:8786), one rank "
                        "per worker (overrides the [comm] table); the data paths must be "
                        "readable by the workers")
    t.add_argument("--simulate", type=_positive_int, metavar="N",
                   help="run on N simulated nodes of a disk cluster in this process (Kylix over "
                        "checksummed message files; overrides the [comm] table)")
    t.set_defaults(func=cmd_train)
    q = sub.add_parser("predict", help="predict with a trained model")
    q.add_argument("model", help="model.npz written by 'roofline train'")
    q.add_argument("data", help="svmlight file, datasource TOML, or a training config (its "
                                "held-out split)")
    q.add_argument("-o", "--output", help="write predictions (.npy, or text)")
    q.add_argument("--dask", metavar="SCHEDULER",
                   help="predict on the Dask cluster of this scheduler, one rank per worker")
    q.add_argument("--simulate", type=_positive_int, metavar="N",
                   help="predict on N simulated nodes of a disk cluster in this process")
    q.set_defaults(func=cmd_predict)
    i = sub.add_parser("info", help="print this machine's roofline report")
    i.add_argument("--remeasure", action="store_true", help="re-measure instead of the cache")
    i.set_defaults(func=cmd_info)
    return p


def main(argv=None) -> int:
    """Entry point of the ``roofline`` console script."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except (ValueError, TypeError, OSError, ImportError) as e:  # OSError: names the file
        print(f"roofline {args.command}: error: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:  # a distributed run's CommError names the failed rank
        from roofline.comm import CommError

        if not isinstance(e, CommError):
            raise
        print(f"roofline {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

