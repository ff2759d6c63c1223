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
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import time
from dataclasses import dataclass

import numpy as np

from roofline import gmat
from roofline.gmat import Options, load_toml, option, to_toml

__all__ = ["main", "build_from_config"]

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


def _cd_losses():
    """``[model]`` loss names (canonical and aliases) -> fit_glm's loss, from the one registry
    (roofline.glm, and with it scikit-learn, is imported by the commands that fit, not by
    ``roofline --help``)."""
    from roofline import glm

    return {name: glm.resolve_loss(name) for name in (*glm.LOSSES, *glm.LOSS_ALIASES)
            if glm.resolve_loss(name) in glm.CD_LOSSES}


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
    return problem, opts


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


def _sources(d: DataOptions, where: str, base: str):
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
        train = ds.datasource_from_config(resolve(d.train))
        held = ds.datasource_from_config(resolve(d.heldout)) if d.heldout else None
        return train, held
    train = ds.MatSource(tr[0], tr[1], batch_size=d.batch_size)
    held = None if ho is None else ds.MatSource(ho[0], ho[1], batch_size=max(d.batch_size, 8192))
    return train, held


def build_from_config(path):
    """Parse and validate a training config; return ``(parts, resolved)``.

    ``parts`` holds the options objects (``data``, ``model``, ``optimizer`` (class, options),
    ``mixins`` (list of (class, options)), ``learner``, ``output``); ``resolved`` is the complete
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
    allowed = {"data", "model", "optimizer", "mixins", "learner", "output", "solver"}
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
                             f"solver; use one of {sorted(cd_losses)}")
        if data.type == "datasource":
            raise ValueError(f"{where}: needs in-memory data ([data] type 'criteo_like' or "
                             "'svmlight'), got type 'datasource'")
        solver = _solver_table(_table(doc, "solver", path), where, cd_losses[model.loss])
    resolved = {
        "data": data.to_dict(), "model": model.to_dict(),
        "optimizer": {"type": opt_type, **opt.to_dict()},
        "mixins": [{"type": t, **o.to_dict()} for t, o in mixins],
        "learner": learner.to_dict(), "output": output.to_dict(),
    }
    if solver is not None:
        resolved = {k: resolved[k] for k in ("data", "model", "output")}
        resolved["solver"] = {**solver[0].to_dict(), **solver[1].to_dict()}
    parts = dict(data=data, model=model, optimizer=(opt_cls, opt), mixins=mixins,
                 learner=learner, output=output, solver=solver,
                 base=os.path.dirname(os.path.abspath(path)))
    return parts, resolved


def _config_toml(resolved: dict) -> str:
    """TOML of a resolved config (mixins as an array of tables, ``[[mixins]]``)."""
    return to_toml({**resolved, "mixins": resolved.get("mixins") or None})


def _fmt(x):
    return "nan" if isinstance(x, float) and math.isnan(x) else f"{x:.5f}"


def cmd_train(args) -> int:
    from ._learner import Learner
    from ._models import GLM

    parts, resolved = build_from_config(args.config)
    if args.output:
        parts["output"] = OutputOptions(dir=args.output)
        resolved["output"] = parts["output"].to_dict()
    out = parts["output"].dir
    if os.path.exists(out) and not os.path.isdir(out):
        raise ValueError(f"output directory {out} exists and is not a directory")
    os.makedirs(out, exist_ok=True)
    if args.plot is not None:  # fail before training, not after it
        from roofline.gmat import require_matplotlib

        require_matplotlib("roofline train --plot")
    if parts["solver"] is not None:
        return _train_cd(parts, resolved, args.config, out, args)
    t0 = time.perf_counter()
    train, held = _sources(parts["data"], args.config, parts["base"])
    t_data = time.perf_counter() - t0
    mix_classes = _mixins()
    mixins = [mix_classes[t](opts=o) for t, o in parts["mixins"]]
    model = GLM(parts["model"])
    if parts["data"].type != "datasource" and model.opts.dtype != parts["data"].dtype:
        raise ValueError(f"{args.config}: [model] dtype {model.opts.dtype!r} differs from "
                         f"[data] dtype {parts['data'].dtype!r}")
    opt_cls, opt_opts = parts["optimizer"]
    lopts = parts["learner"]
    if lopts.checkpoint is None:
        lopts = type(lopts).from_dict({**lopts.to_dict(),
                                       "checkpoint": os.path.join(out, "model.npz")})
    learner = Learner(train, model, opt_cls(opt_opts), mixins=mixins, heldout=held, opts=lopts)
    with open(os.path.join(out, "config.toml"), "w") as f:
        f.write(_config_toml(resolved))
    print(f"data: {train!r} (built in {t_data:.1f} s)"
          + (f"\nheld out: {held!r}" if held is not None else ""))
    res = learner.train()
    learner.save_checkpoint(os.path.join(out, "model.npz"), extra={"final": True})
    learner.write_trace(os.path.join(out, "trace.csv"))
    learner.write_trace(os.path.join(out, "trace.json"))
    print(f"{'step':>8} {'examples':>10} {'train_loss':>11} {'heldout_loss':>13} "
          f"{'examples/s':>11}")
    for r in res.trace:
        print(f"{r['step']:>8} {r['examples']:>10} {_fmt(r['train_loss']):>11} "
              f"{_fmt(r['heldout_loss']):>13} {r['examples_per_s']:>11.0f}")
    print(f"trained on {res.n_examples} examples in {res.seconds:.2f} s: "
          f"{res.examples_per_s:,.0f} examples/s; best held-out loss "
          f"{_fmt(res.best_heldout_loss)}" + (" (stopped early)" if res.stopped_early else ""))
    wrote = "model.npz, trace.csv, trace.json, config.toml"
    png = _plot_path(args, out)
    if png is not None:
        from ._plot import plot_trace

        axes = plot_trace(res.trace, path=png, title=os.path.basename(out.rstrip("/")))
        _close(axes[0].figure)
        wrote += f"; plot: {png}"
    print(f"wrote {out}/{wrote}")
    return 0


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


def _train_cd(parts, resolved, config, out, args=None) -> int:
    """``roofline train`` with a ``[solver]`` table: one :func:`fit_glm` on the training
    split; writes ``model.npz`` (a GLM checkpoint ``roofline predict`` reads), ``config.toml``
    and ``trace.json`` (the solver's objective and duality gap at every check)."""
    import json

    from roofline.glm import fit_glm

    from ._checkpoint import save_checkpoint
    from ._models import GLM

    problem, opts = parts["solver"]
    mopts = parts["model"]
    if mopts.n_outputs != 1:
        raise ValueError(f"{config} [solver]: coordinate descent fits one output; [model] has "
                         f"n_outputs={mopts.n_outputs}")
    train, held = _sources(parts["data"], config, parts["base"])
    with open(os.path.join(out, "config.toml"), "w") as f:
        f.write(_config_toml(resolved))
    res = fit_glm(train.X, train.y, loss=_cd_losses()[mopts.loss], alpha=problem.alpha,
                     penalty=problem.penalty, fit_intercept=mopts.fit_intercept,
                     random_state=problem.seed, options=opts,
                     verbose=int(logging.getLogger().isEnabledFor(logging.INFO)))
    model = GLM(mopts)
    model.set_parameters(res.coef.reshape(1, -1), np.array([res.intercept]))
    save_checkpoint(os.path.join(out, "model.npz"), model,
                    extra={"final": True, "solver": res.solver, "n_iter": res.n_iter,
                           "converged": res.converged})
    trace = [{"check": i, "objective": float(P), "gap": float(G), "seconds": float(T)}
             for i, (P, G, T) in enumerate(zip(res.objective, res.gap_history, res.times,
                                                   strict=True))]
    with open(os.path.join(out, "trace.json"), "w") as f:
        json.dump(trace, f, indent=1)
    chosen = res.solver
    if opts.solver != res.solver:  # "auto": say what ran, and why
        chosen = f"{res.solver} (auto: {res.info.get('auto_reason', 'chosen from the data')})"
    print(f"{chosen}: {res.n_iter} iterations in {res.time:.2f} s, objective "
          f"{res.objective[-1]:.8g}, relative duality gap {res.relative_gap:.3e}"
          + ("" if res.converged else f" (did not reach tol={opts.tol:g})"))
    if held is not None:
        loss, weight = 0.0, 0.0
        for b in held:
            ls, ws = model.loss(b)
            loss, weight = loss + float(ls), weight + float(ws)
        print(f"held-out {mopts.loss} loss: {_fmt(loss / weight if weight else float('nan'))}")
    wrote = "model.npz, trace.json, config.toml"
    png = _plot_path(args, out)
    if png is not None:
        from ._plot import plot_cd_trace

        ax = plot_cd_trace(trace, path=png, title=f"{res.solver}")
        _close(ax.figure)
        wrote += f"; plot: {png}"
    print(f"wrote {out}/{wrote}")
    return 0


def cmd_predict(args) -> int:
    from roofline import datasources as ds

    from ._checkpoint import load_checkpoint

    ck = load_checkpoint(args.model)
    model = ck.model
    dt = model.opts.dtype
    if args.data.endswith(".toml"):
        doc = load_toml(args.data)
        if "data" in doc:  # a training config: predict its held-out split
            parts, _ = build_from_config(args.data)
            _, src = _sources(parts["data"], args.data, parts["base"])
            if src is None:
                raise ValueError(f"{args.data}: the config has no held-out data to predict")
        else:
            src = ds.datasource_from_config(args.data)
    else:
        X, y = ds.load_svmlight(args.data, n_features=model.n_features, dtype=dt)
        y = (y > 0).astype(dt) if set(np.unique(y)) <= {-1.0, 1.0} else y.astype(dt)
        src = ds.MatSource(X, y, batch_size=65536)
    if getattr(src, "n_features", model.n_features) != model.n_features:
        raise ValueError(f"{args.data} has {src.n_features} features, the model "
                         f"{args.model} has {model.n_features}")
    preds, loss, weight = [], 0.0, 0.0
    for b in src:
        preds.append(model.predict(b.X))
        if b.y is not None:
            ls, ws = model.loss(b)
            loss, weight = loss + ls, weight + ws
    P = np.concatenate(preds, axis=-1) if preds else np.zeros(0)
    if args.output:
        if args.output.endswith(".npy"):
            np.save(args.output, P)
        else:
            np.savetxt(args.output, np.atleast_2d(P).T, fmt="%.7g")
        print(f"wrote {P.shape[-1]} predictions to {args.output}")
    if weight:
        print(f"mean {model.opts.loss} loss on {args.data}: {loss / weight:.6f}")
    return 0


def cmd_info(args) -> int:

    report = getattr(gmat, "roofline_report", None)
    if report is None:
        print("this installation has no gmat.roofline_report(): the machine's roofline report "
              "is not available")
        return 1
    print(report(remeasure=args.remeasure))
    return 0


def _parser():
    p = argparse.ArgumentParser(prog="roofline",
                                description="Roofline: machine learning at the hardware limit")
    p.add_argument("-v", "--verbose", action="store_true", help="log progress (INFO)")
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train a model from a TOML config")
    t.add_argument("config", help="TOML config (see examples/logistic_criteo.toml)")
    t.add_argument("-o", "--output", help="output directory (overrides [output] dir)")
    t.add_argument("--plot", nargs="?", const="", default=None, metavar="PATH",
                   help="also draw the trace (loss and throughput against examples) to a PNG: "
                        "PATH, or trace.png in the output directory; needs matplotlib "
                        "(pip install 'roofline[plot]')")
    t.set_defaults(func=cmd_train)
    q = sub.add_parser("predict", help="predict with a trained model")
    q.add_argument("model", help="model.npz written by 'roofline train'")
    q.add_argument("data", help="svmlight file, datasource TOML, or a training config (its "
                                "held-out split)")
    q.add_argument("-o", "--output", help="write predictions (.npy, or text)")
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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

