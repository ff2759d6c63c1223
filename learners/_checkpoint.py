"""Atomic checkpoints of a model and its optimizer state.

A checkpoint is an ``.npz`` archive (arrays ``model.<name>``, ``opt.<name>`` and a JSON ``meta``
record).  It is written to a temporary file in the destination directory, flushed and fsynced,
then moved over the destination with :func:`os.replace` (atomic on POSIX): a crash mid-write
leaves the previous checkpoint intact, and a partial temporary file never loads (it raises a
``ValueError`` naming the file).  The temporary file (``.<name>.<host>.<pid>.<random>.tmp``) is
created with mode ``0o666`` less the umask, as ``open`` would; temporary files that a killed
writer on this host left behind (their process is gone) are removed by the next save.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import socket
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

    The parameters are also the attributes.

    Parameters
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


def _model_class(name):
    """The model class a checkpoint names: a :class:`Model` among ``roofline.learners``' public
    names (resolved through the package's lazy loader, as pickle resolves a class by its name,
    so that this module imports none of the models' modules), or None."""
    from roofline import learners

    from ._models import Model

    cls = getattr(learners, name) if name in learners.__all__ else None
    return cls if isinstance(cls, type) and issubclass(cls, Model) else None


def _host(v):
    return np.asarray(gmat.to_device(v, "cpu"))


def _host_tag() -> str:
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname()) or "host"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists (someone else's)
        return True
    return True


def _remove_stale_temporaries(directory: str, base: str) -> None:
    """Remove ``.<base>.<host>.<pid>.<random>.tmp`` files of this host whose writer is dead."""
    pat = re.compile(rf"^\.{re.escape(base)}\.{re.escape(_host_tag())}\.(\d+)\.[0-9a-f]+\.tmp$")
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        m = pat.match(name)
        if m is None or _pid_alive(int(m.group(1))):
            continue
        try:
            os.unlink(os.path.join(directory, name))
            logger.info("removed %s, left by a killed checkpoint writer",
                        os.path.join(directory, name))
        except OSError:  # another saver removed it first, or no permission
            pass


def _create_temporary(directory: str, base: str):
    """``(fd, name)`` of a new temporary file beside the target (mode 0o666 less the umask)."""
    prefix = os.path.join(directory, f".{base}.{_host_tag()}.{os.getpid()}.")
    for _ in range(100):
        tmp = f"{prefix}{secrets.token_hex(4)}.tmp"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0),
                           0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary file name {prefix}*.tmp")  # pragma: no cover


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
    base = os.path.basename(path)
    if not base:
        raise ValueError(f"checkpoint path {path!r} names a directory, not a file")
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"cannot write checkpoint {path}: directory {directory} does "
                                f"not exist")
    if os.path.isdir(path):
        raise IsADirectoryError(f"cannot write checkpoint {path}: it is a directory")
    _remove_stale_temporaries(directory, base)
    try:
        fd, tmp = _create_temporary(directory, base)
    except OSError as e:
        raise OSError(e.errno, f"cannot write checkpoint {path}: {e.strerror}", path) from e
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

    Parameters
    ----------
    path : str or PathLike
        The checkpoint file.

    Returns
    -------
    Checkpoint
        The rebuilt model (on the host), the optimizer's saved state and the metadata.

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
    name = meta["model_class"]
    cls = _model_class(name)
    if cls is None:
        raise ValueError(f"{path}: unknown model class {name!r}")
    model = cls(**meta["model_opts"])
    params = {k[6:]: v for k, v in data.items() if k.startswith("model.")}
    try:
        if name == "GLM":
            model.set_parameters(params["coef"], params.get("intercept"))
        else:  # the factor models take back the arrays of their parameters() by name
            model.set_parameters(**params)
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{path}: the {name} arrays do not rebuild the model ({e})") from None
    opt_state = {k[4:]: v for k, v in data.items() if k.startswith("opt.")}
    return Checkpoint(model=model, optimizer_state=opt_state, meta=meta)
