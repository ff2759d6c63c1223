"""Build a source and its stages from a TOML file (or the equivalent dict).

.. code-block:: toml

    [source]
    type = "svmlight"            # "svmlight" | "criteo" | "files"
    paths = ["train.svm.gz"]     # relative paths are relative to the TOML file
    n_features = 47236
    zero_based = false
    batch_size = 4096

    [[stages]]                   # applied in order
    type = "shuffle"             # "heldout" | "shuffle" | "to_device" | "prefetch"
    buffer_size = 100000
    seed = 0

    [[stages]]
    type = "prefetch"
    depth = 4

Each table (less its ``type``, and the source's file argument ``paths`` or ``pattern``) is
the :class:`~roofline.gmat.Options` of its component (:class:`SVMLightOptions`,
:class:`ShuffleOptions`, ...), built with :meth:`~roofline.gmat.Options.from_dict`: an unknown
key, a missing required key or a bad value raises ``ValueError`` naming the file, the table and
the key.  The file is read and written with the one TOML reader/writer,
:func:`roofline.gmat.load_toml` / :func:`roofline.gmat.to_toml`.
"""

from __future__ import annotations

import dataclasses
import os

from roofline.gmat import load_toml, to_toml

from ._criteo import CriteoOptions, CriteoSource
from ._filesource import FileSource, FileSourceOptions
from ._io import is_url
from ._prefetch import Prefetch, PrefetchOptions
from ._stages import (
    HeldOut,
    HeldOutOptions,
    Shuffle,
    ShuffleOptions,
    Stage,
    ToDevice,
    ToDeviceOptions,
)
from ._svmlight import SVMLightOptions, SVMLightSource

__all__ = [
    "SOURCE_TYPES",
    "STAGE_TYPES",
    "config_to_toml",
    "datasource_from_config",
    "datasource_to_config",
]

SOURCE_TYPES = {"svmlight": SVMLightSource, "criteo": CriteoSource, "files": FileSource}
STAGE_TYPES = {"heldout": HeldOut, "shuffle": Shuffle, "to_device": ToDevice,
               "prefetch": Prefetch}
# the options class of each component: its table's keys (less "type")
_OPTIONS = {SVMLightSource: SVMLightOptions, CriteoSource: CriteoOptions,
            FileSource: FileSourceOptions, HeldOut: HeldOutOptions, Shuffle: ShuffleOptions,
            ToDevice: ToDeviceOptions, Prefetch: PrefetchOptions}
# a source's required positional argument: the files to read (an option of FileSource too)
_ARGS = {SVMLightSource: "paths", CriteoSource: "paths", FileSource: "pattern"}
# keys holding paths, resolved against the TOML file's directory
_PATH_KEYS = {"paths", "pattern", "dirs"}


def _resolve(v, base):
    if isinstance(v, list):
        return [_resolve(x, base) for x in v]
    if not isinstance(v, str) or is_url(v) or base is None or os.path.isabs(v):
        return v
    if v.startswith("file://"):
        return v
    return os.path.join(base, v)


def _build(cls, table: dict, where: str, base, wrapped=None):
    if not isinstance(table, dict):
        raise ValueError(f"{where} must be a table, got {type(table).__name__}")
    opts_cls, arg = _OPTIONS[cls], _ARGS.get(cls)
    fields = {f.name for f in dataclasses.fields(opts_cls)}
    names = fields if arg is None else fields | {arg}
    kw = {k: v for k, v in table.items() if k != "type"}
    unknown = sorted(set(kw) - names)
    if unknown:
        raise ValueError(
            f"{where}: unknown key{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(repr(k) for k in unknown)} for type {table.get('type')!r} "
            f"(allowed: {', '.join(sorted(names))})"
        )
    if arg is not None and arg not in kw:
        raise ValueError(f"{where}: missing required key(s) {arg!r}")
    for k in _PATH_KEYS & set(kw):
        if k == "pattern" and kw.get("dirs"):
            continue  # a bare file name inside each of the dirs
        kw[k] = _resolve(kw[k], base)
    # every key is checked (type, choices, bounds) by the component's Options, naming it
    opts = opts_cls.from_dict({k: v for k, v in kw.items() if k in fields}, where)
    args = [] if wrapped is None else [wrapped]
    if arg is not None:
        args.append(kw.pop(arg))
    kw = {k: getattr(opts, k) for k in kw}
    try:
        return cls(*args, **kw)
    except (ValueError, TypeError) as exc:
        msg = str(exc)
        named = [k for k in table if k != "type" and k in msg]
        hint = "" if named else f" (keys given: {', '.join(sorted(kw))})"
        raise ValueError(f"{where}: bad value: {msg}{hint}") from exc
    except (OSError, RuntimeError) as exc:
        raise ValueError(f"{where}: cannot build {cls.__name__}: {exc}") from exc


def datasource_from_config(config, *, base_dir=None, overrides=None):
    """Build a DataSource (and its stages) from a TOML file path or an equivalent dict.

    Parameters
    ----------
    config : str, path-like or dict
        A ``.toml`` file, or the parsed dict (``{"source": {...}, "stages": [{...}, ...]}``).
    base_dir : str, optional
        Directory for relative paths in a dict config (a file's own directory is used for a
        file).
    overrides : dict, optional
        Keys set over the ``[source]`` table's, checked like the table's own: e.g.
        ``{"rank": comm.rank, "size": comm.size}`` for one rank of a distributed job (a
        ``"files"`` source then reads its shards ``i % size == rank``).

    Returns
    -------
    DataSource
        The last stage (or the source when there are no stages).

    Raises
    ------
    ValueError
        Naming the file, the table (``[source]``, ``[[stages]] #2``) and the offending key.
    """
    if isinstance(config, dict):
        where, doc, base = "config", config, base_dir
    elif isinstance(config, (str, os.PathLike)):
        path = os.fspath(config)
        where = path
        try:
            doc = load_toml(path)  # invalid TOML: ValueError naming the file
        except FileNotFoundError as exc:
            raise ValueError(f"{path}: config file not found") from exc
        base = os.path.dirname(os.path.abspath(path)) if base_dir is None else base_dir
    else:
        raise TypeError(f"config must be a TOML file path or a dict, got {type(config).__name__}")
    unknown = sorted(set(doc) - {"source", "stages"})
    if unknown:
        raise ValueError(
            f"{where}: unknown top-level key(s) {', '.join(map(repr, unknown))} "
            "(allowed: 'source', 'stages')"
        )
    if "source" not in doc:
        raise ValueError(f"{where}: missing the [source] table")
    src_t = doc["source"]
    if not isinstance(src_t, dict):
        raise ValueError(f"{where}: [source] must be a table")
    if overrides:
        src_t = {**src_t, **overrides}
    typ = src_t.get("type")
    if typ not in SOURCE_TYPES:
        raise ValueError(
            f"{where}: [source] key 'type' must be one of {sorted(SOURCE_TYPES)}, got {typ!r}"
        )
    src = _build(SOURCE_TYPES[typ], src_t, f"{where}: [source]", base)
    stages = doc.get("stages", [])
    if not isinstance(stages, list):
        raise ValueError(f"{where}: 'stages' must be an array of tables ([[stages]])")
    for k, st in enumerate(stages, 1):
        w = f"{where}: [[stages]] #{k}"
        styp = st.get("type") if isinstance(st, dict) else None
        if styp not in STAGE_TYPES:
            raise ValueError(
                f"{w} key 'type' must be one of {sorted(STAGE_TYPES)}, got {styp!r}"
            )
        src = _build(STAGE_TYPES[styp], st, w, base, wrapped=src)
    return src


def _table(type_name, opts) -> dict:
    t = {"type": type_name}
    for k, v in opts.to_dict().items():
        if k == "compression" and v is None:
            v = "none"
        if v is not None:  # TOML has no null: None means "the default" for every option here
            t[k] = v
    return t


def datasource_to_config(source) -> dict:
    """The config dict that rebuilds ``source`` and its stages with
    :func:`datasource_from_config` (options round-trip; paths are written as given).

    Parameters
    ----------
    source : DataSource
        A file source (a type of ``SOURCE_TYPES``), possibly wrapped in stages.

    Returns
    -------
    dict
        ``{"source": {"type": ..., options..., "paths": [...]}, "stages": [...]}``, the
        stages innermost first.

    Raises
    ------
    TypeError
        The innermost source has no config type (in-memory data such as :class:`MatSource`).
    """
    stages = []
    s = source
    while isinstance(s, Stage):
        stages.append(s)
        s = s.source
    names = {v: k for k, v in SOURCE_TYPES.items()}
    if type(s) not in names:
        raise TypeError(
            f"{type(s).__name__} cannot be written as a config (only {sorted(SOURCE_TYPES)} "
            "sources: in-memory data has no file to point to)"
        )
    src = _table(names[type(s)], s.opts)
    if isinstance(s, (SVMLightSource, CriteoSource)):
        src["paths"] = [p if isinstance(p, str) else os.fspath(p) for p in s.paths]
    snames = {v: k for k, v in STAGE_TYPES.items()}
    return {"source": src,
            "stages": [_table(snames[type(st)], st.opts) for st in reversed(stages)]}


def config_to_toml(config: dict) -> str:
    """TOML text of a config dict (``{"source": {...}, "stages": [...]}``): ``[source]`` and
    one ``[[stages]]`` table per stage, written by :func:`roofline.gmat.to_toml`.

    Parameters
    ----------
    config : dict
        A config as :func:`datasource_to_config` returns it.

    Returns
    -------
    str
        TOML text that :func:`datasource_from_config` accepts once parsed (``tomllib``).
    """
    return to_toml({"source": config["source"], "stages": list(config.get("stages", [])) or None})
