"""Atomic checkpoints of a model and its optimizer state.

A checkpoint is an ``.npz`` archive (arrays ``model.<name>``, ``opt.<name>`` and a JSON ``meta``
record).  It is written to a temporary file in the destination directory, flushed and fsynced,
then moved over the destination with :func:`os.replace` (atomic on POSIX): a crash mid-write
leaves the previous checkpoint intact, and a partial temporary file never loads (it raises a
``ValueError`` naming the file).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import zipfile
from dataclasses import dataclass, field

import numpy as np

from roofline import gmat

__all__ = ["Checkpoint", "load_checkpoint", "save_checkpoint"]

logger = logging.getLogger(__name__)

FORMAT = "roofline-checkpoint"
VERSION = 1


@dataclass
class Checkpoint:
    """A loaded checkpoint.

    Attributes
    ----------
    model : Model
        The rebuilt model (class from the registry, options and parameters restored).
    optimizer_state : dict
        Arrays and scalars of the optimizer (empty when none was saved).
    meta : dict
        ``model_class``, ``model_opts``, ``optimizer_class``, ``optimizer_opts``, ``extra``.
    """

    model: object
    optimizer_state: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)


def _model_classes():
    from ._models import GLM

    return {"GLM": GLM}


def _host(v):
    return np.asarray(gmat.to_device(v, "cpu"))


def save_checkpoint(path, model, optimizer=None, extra: dict | None = None) -> None:
    """Write ``model`` (and ``optimizer``'s state) to ``path`` atomically.

    Parameters
    ----------
    path : str or PathLike
    model : Model
    optimizer : Optimizer, optional
    extra : dict, optional
        JSON-serialisable information stored with it (pass number, step, ...).
    """
    path = os.fspath(path)
    meta = {
        "format": FORMAT,
        "version": VERSION,
        "model_class": type(model).__name__,
        "model_opts": model.opts.to_dict(),
        "optimizer_class": None if optimizer is None else type(optimizer).__name__,
        "optimizer_opts": None if optimizer is None else optimizer.opts.to_dict(),
        "extra": extra or {},
    }
    # host copies of the arrays, wherever the model lives (numpy or cupy)
    arrays = {f"model.{k}": _host(v) for k, v in model.parameters().items()}
    if optimizer is not None:
        arrays.update({f"opt.{k}": _host(v) for k, v in optimizer.state().items()})
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp",
                               dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:  # make the rename durable
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:  # pragma: no cover - platform-dependent
        pass
    logger.debug("checkpoint written to %s", path)


def load_checkpoint(path) -> Checkpoint:
    """Load a checkpoint written by :func:`save_checkpoint`.

    Raises
    ------
    FileNotFoundError
        No such file.
    ValueError
        The file is not a complete Roofline checkpoint (truncated, corrupt, other format).
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
        meta = json.loads(bytes(data.pop("meta")).decode())
    except (zipfile.BadZipFile, EOFError, OSError, KeyError, ValueError,
            UnicodeDecodeError) as e:
        raise ValueError(f"{path} is not a complete Roofline checkpoint ({e})") from None
    if meta.get("format") != FORMAT:
        raise ValueError(f"{path} is not a Roofline checkpoint (format={meta.get('format')!r})")
    classes = _model_classes()
    name = meta["model_class"]
    if name not in classes:
        raise ValueError(f"{path}: unknown model class {name!r}")
    model = classes[name](**meta["model_opts"])
    params = {k[6:]: v for k, v in data.items() if k.startswith("model.")}
    model.set_parameters(params["coef"], params.get("intercept"))
    opt_state = {k[4:]: v for k, v in data.items() if k.startswith("opt.")}
    return Checkpoint(model=model, optimizer_state=opt_state, meta=meta)
