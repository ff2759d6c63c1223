"""Option dataclasses (BIDMach's ``opts``): printable, validated, round-tripping to TOML.

The one options system of Roofline.  Every configurable component (a datasource and its stages,
a model, an optimizer, a mixin, a learner, a solver) has an options dataclass derived from
:class:`Options`.  Fields are declared with :func:`option`, which records a one-line doc string
and the accepted values (type, choices, bounds); they are checked on construction and by
:meth:`Options.validate`.  ``print(opts)`` shows BIDMach's "Option Name / Type / Value" table.

It lives in ``gmat`` because that is the lowest layer every other layer (datasources, comm,
learners) imports.  This module also holds the one TOML reader (:func:`load_toml`,
:func:`loads_toml`) and writer (:func:`to_toml`) of the project.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from dataclasses import dataclass, field

import numpy as np

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

__all__ = ["OptionTypeError", "Options", "load_toml", "loads_toml", "option", "to_toml"]


class OptionTypeError(TypeError, ValueError):
    """An option given a value of the wrong type.

    A :class:`TypeError`, and also a :class:`ValueError` so that callers which treat every bad
    option value alike (the datasources, the TOML config readers) catch it with the rest.
    """


def option(default, doc: str = "", *, kind=None, choices=None, low=None, high=None,
           low_open: bool = False, optional: bool = False, convert=None):
    """Declare an option field.

    Parameters
    ----------
    default
        Default value.
    doc : str
        One-line description (shown by ``print(opts)``).
    kind : type or tuple of types, optional
        Accepted Python type(s); inferred from ``default`` when omitted (``int`` accepts only
        integers, ``float`` accepts integers and floats, ``bool`` only booleans, ``list`` lists
        and tuples).
    choices : sequence, optional
        The allowed values.
    low, high : number, optional
        Inclusive bounds (``low`` exclusive with ``low_open=True``).
    low_open : bool
        Make ``low`` an exclusive bound (``value > low``).
    optional : bool
        ``None`` is also accepted (always so when ``default`` is ``None``).
    convert : callable, optional
        Applied to a value (not ``None``) before it is checked, e.g. ``np.dtype(v).name`` to
        accept ``np.float32`` for ``"float32"``; a ``TypeError``/``ValueError`` it raises is
        reported as a bad value of the option.

    Returns
    -------
    dataclasses.Field
        A dataclass field with this default (a copy per instance for a list or dict) whose
        metadata carry the description and the checks that :meth:`Options.validate` applies.
    """
    if kind is None:
        kind = type(default) if default is not None else str
    meta = dict(doc=doc, kind=kind, choices=None if choices is None else tuple(choices),
                low=low, high=high, low_open=low_open, optional=optional or default is None,
                convert=convert)
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda d=default: type(d)(d), metadata=meta)
    return field(default=default, metadata=meta)


def _kind_name(kind) -> str:
    if isinstance(kind, tuple):
        return "|".join(k.__name__ for k in kind)
    return kind.__name__


def _coerce(value, kind, name: str, where: str):
    """Check ``value`` against ``kind``; return it (ints accepted where floats are)."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, np.generic):
        value = value.item()
    for k in kinds:
        if k is bool:
            if isinstance(value, bool):
                return value
        elif k is int:
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        elif k is float:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
        elif k is list:
            if isinstance(value, (list, tuple)):
                return list(value)
        elif isinstance(value, k):
            return value
    raise OptionTypeError(
        f"{where}option {name!r} must be of type {_kind_name(kind)}, got {value!r} "
        f"({type(value).__name__})"
    )


@dataclass
class Options:
    """Base class of every options dataclass.

    Subclasses declare fields with :func:`option` and may add cross-field checks in
    :meth:`_check`.  Construction validates every field; :meth:`from_dict` additionally rejects
    unknown keys, naming the key and where it came from.  Bad values raise ``ValueError``, values
    of the wrong type :class:`OptionTypeError` (both a ``TypeError`` and a ``ValueError``).

    A subclass may name a field like a method of this class (``FileSourceOptions.validate``);
    the method is then reached as ``Options.validate(opts)``.
    """

    def __post_init__(self):
        Options.validate(self)

    # -- validation --------------------------------------------------------------------------
    def validate(self, where: str = "") -> Options:
        """Check (and normalise) every field; raise naming the option and ``where``.

        Each value is converted (``convert``), checked against its type (an int is accepted,
        and stored as a float, for a float option), finiteness, ``choices`` and bounds, then the
        subclass's cross-field checks (``_check``) run.

        Parameters
        ----------
        where : str
            Where the options came from (file and table), prefixed to error messages.

        Returns
        -------
        Options
            ``self``, its fields normalised in place.

        Raises
        ------
        OptionTypeError
            A value of the wrong type.
        ValueError
            A bad value: ``None`` for a required option, not finite, not among the choices,
            out of bounds, rejected by ``convert`` or by a cross-field check.
        """
        prefix = f"{where}: " if where else ""
        for f in dataclasses.fields(self):
            meta = f.metadata
            if not meta:
                continue
            value = getattr(self, f.name)
            if value is None:
                if not meta["optional"]:
                    raise ValueError(f"{prefix}option {f.name!r} must not be None")
                continue
            if meta.get("convert") is not None:
                try:
                    value = meta["convert"](value)
                except (TypeError, ValueError) as e:
                    raise ValueError(f"{prefix}option {f.name!r}: bad value {value!r}: {e}") \
                        from None
            value = _coerce(value, meta["kind"], f.name, prefix)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{prefix}option {f.name!r} must be finite, got {value!r}")
            if meta["choices"] is not None and value not in meta["choices"]:
                raise ValueError(
                    f"{prefix}option {f.name!r} must be one of {list(meta['choices'])}, "
                    f"got {value!r}"
                )
            low, high = meta["low"], meta["high"]
            if low is not None and (value <= low if meta["low_open"] else value < low):
                op = ">" if meta["low_open"] else ">="
                raise ValueError(f"{prefix}option {f.name!r} must be {op} {low}, got {value!r}")
            if high is not None and value > high:
                raise ValueError(f"{prefix}option {f.name!r} must be <= {high}, got {value!r}")
            object.__setattr__(self, f.name, value)
        self._check(prefix)
        return self

    def _check(self, prefix: str) -> None:
        """Cross-field checks of subclasses (raise ``ValueError`` with ``prefix``)."""

    # -- dict / TOML -------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """The options as a plain dict (``None`` values included).

        Returns
        -------
        dict
            Field name to value, in declaration order.
        """
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, d: dict | None, where: str = ""):
        """Build from a dict, rejecting unknown keys.

        Parameters
        ----------
        d : dict or None
            Option name to value; missing options take their defaults (``None``: all).
        where : str
            Where ``d`` came from (file and table), used in error messages.

        Returns
        -------
        Options
            An instance of ``cls``, validated.

        Raises
        ------
        ValueError
            An unknown key, a missing required one, or a bad value.
        OptionTypeError
            A value of the wrong type.
        """
        d = dict(d or {})
        names = [f.name for f in dataclasses.fields(cls)]
        prefix = f"{where}: " if where else ""
        for key in d:
            if key not in names:
                raise ValueError(
                    f"{prefix}unknown key {key!r} for {cls.__name__}; valid keys: "
                    f"{', '.join(names)}"
                )
        try:
            obj = cls.__new__(cls)
            for f in dataclasses.fields(cls):
                if f.name in d:
                    value = d[f.name]
                elif f.default is not dataclasses.MISSING:
                    value = f.default
                elif f.default_factory is not dataclasses.MISSING:
                    value = f.default_factory()
                else:
                    raise ValueError(f"{prefix}missing required key {f.name!r}")
                object.__setattr__(obj, f.name, value)
            Options.validate(obj, where)
        except TypeError as e:
            if where in str(e):
                raise
            err = OptionTypeError if isinstance(e, ValueError) else TypeError
            raise err(f"{prefix}{e}") from None
        return obj

    def to_toml(self, table: str | None = None) -> str:
        """TOML text of these options (under ``[table]`` when given).

        Parameters
        ----------
        table : str, optional
            The table to write the options under; at the top level when omitted.

        Returns
        -------
        str
            TOML text (``None`` values omitted) that :meth:`from_toml` reads back.
        """
        return to_toml({table: self.to_dict()} if table else self.to_dict())

    @classmethod
    def from_toml(cls, text: str, table: str | None = None, where: str = "<string>"):
        """Parse options from TOML text (from ``[table]`` when given).

        Parameters
        ----------
        text : str
            TOML text.
        table : str, optional
            The table holding the options (absent: all defaults); the top level when omitted.
        where : str
            Where the text came from, used in error messages.

        Returns
        -------
        Options
            An instance of ``cls``, validated.

        Raises
        ------
        ValueError
            Invalid TOML, an unknown key or a bad value (see :meth:`from_dict`).
        """
        d = loads_toml(text, where)
        if table:
            d = d.get(table, {})
            where = f"{where} [{table}]"
        return cls.from_dict(d, where)

    # -- printing ----------------------------------------------------------------------------
    def what(self) -> str:
        """BIDMach's option table: name, type, value and description of every option.

        Returns
        -------
        str
            The class name, then one aligned line per option (also what ``str(opts)`` gives).
        """
        rows = [("Option Name", "Type", "Value", "Description")]
        for f in dataclasses.fields(self):
            meta = f.metadata or {}
            kind = _kind_name(meta.get("kind", type(getattr(self, f.name))))
            rows.append((f.name, kind, repr(getattr(self, f.name)), meta.get("doc", "")))
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        lines = [type(self).__name__]
        for r in rows:
            lines.append("  " + "  ".join(r[i].ljust(widths[i]) for i in range(3)) + "  " + r[3])
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.what()


# -- the TOML writer (tomllib only reads) ----------------------------------------------------

def _toml_value(v, key):
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
        r = repr(v)
        return r if ("." in r or "e" in r or "n" in r) else r + ".0"
    if isinstance(v, str):
        esc = v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
        return f'"{esc}"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x, key) for x in v) + "]"
    raise TypeError(f"cannot write {key!r} = {v!r} ({type(v).__name__}) to TOML")


def _toml_key(k: str) -> str:
    if k and all(c.isalnum() or c in "-_" for c in k):
        return k
    return _toml_value(k, k)


def _is_table_array(v) -> bool:
    return isinstance(v, (list, tuple)) and len(v) > 0 and all(isinstance(x, dict) for x in v)


def to_toml(d: dict, _prefix: str = "") -> str:
    """Write a nested dict as TOML (``None`` values are omitted: TOML has no null).

    Scalars and arrays come first, then one ``[table]`` per nested dict and one ``[[table]]``
    per element of a non-empty list of dicts, so ``tomllib.loads`` of the result gives back
    ``d`` without its ``None`` entries.

    Parameters
    ----------
    d : dict
        String keys to booleans, ints, floats, strings, lists, nested dicts or lists of dicts.
    _prefix : str
        Internal: the dotted name of the table ``d`` is written under (recursion).

    Returns
    -------
    str
        The TOML text (empty for an empty dict).

    Raises
    ------
    TypeError
        A value TOML cannot hold.
    """
    lines, tables = [], []
    for k, v in d.items():
        if v is None:
            continue
        if isinstance(v, dict) or _is_table_array(v):
            tables.append((k, v))
        else:
            lines.append(f"{_toml_key(k)} = {_toml_value(v, k)}")
    out = "\n".join(lines)
    for k, v in tables:
        name = f"{_prefix}.{_toml_key(k)}" if _prefix else _toml_key(k)
        if isinstance(v, dict):
            blocks = [f"[{name}]\n{to_toml(v, name)}"]
        else:
            blocks = [f"[[{name}]]\n{to_toml(item, name)}" for item in v]
        for block in blocks:
            out = (out + "\n\n" if out else "") + block.rstrip("\n")
    return out + ("\n" if out and not out.endswith("\n") else "")


# -- the TOML reader -------------------------------------------------------------------------

def loads_toml(text: str, where: str = "<string>") -> dict:
    """Parse TOML text; syntax errors become ``ValueError`` naming ``where``.

    Parameters
    ----------
    text : str
        TOML text.
    where : str
        Where the text came from, used in the error message.

    Returns
    -------
    dict
        The parsed document (:func:`tomllib.loads`).

    Raises
    ------
    ValueError
        Invalid TOML.
    """
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{where}: invalid TOML: {e}") from None


def load_toml(path) -> dict:
    """Read a TOML file; syntax errors become ``ValueError`` naming the file.

    A missing file raises ``FileNotFoundError`` (an ``OSError``) as ``open`` does.

    Parameters
    ----------
    path : str or os.PathLike
        The file.

    Returns
    -------
    dict
        The parsed document (:func:`tomllib.load`).

    Raises
    ------
    ValueError
        Invalid TOML.
    OSError
        The file cannot be read.
    """
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path}: invalid TOML: {e}") from None
