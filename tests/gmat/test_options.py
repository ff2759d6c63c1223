"""The options system and the TOML reader/writer (gmat/_options.py)."""

import math
import sys
from dataclasses import dataclass

import numpy as np
import pytest

from roofline.gmat import (
    Options,
    OptionTypeError,
    load_toml,
    loads_toml,
    option,
    to_toml,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def _dtype_name(v):
    return np.dtype(v).name


@dataclass
class _Opts(Options):
    n: int = option(3, "a count", low=1)
    rate: float = option(0.5, "a rate", low=0.0, low_open=True, high=1.0)
    mode: str = option("a", "a mode", choices=("a", "b"))
    flag: bool = option(True, "a flag")
    items: list = option([1, 2], "a list", kind=list)
    seed: int | None = option(None, "optional seed", kind=int)
    dtype: str = option("float32", "a dtype", choices=("float32", "float64"),
                        convert=_dtype_name)
    base: bool | str = option("auto", "bool or 'auto'", kind=(bool, str),
                              choices=(True, False, "auto"))

    def _check(self, prefix):
        if self.mode == "b" and self.seed is None:
            raise ValueError(f"{prefix}option 'mode' = 'b' needs a seed")


@dataclass
class _Shadow(Options):
    """A field named like the ``validate`` method (as ``FileSourceOptions`` has)."""

    validate: bool = option(True, "shadows Options.validate")
    k: int = option(1, "", low=0)


def test_defaults_types_and_normalisation():
    o = _Opts(n=np.int64(4), rate=1, dtype=np.float64, items=(3,))
    assert o.n == 4 and type(o.n) is int
    assert o.rate == 1.0 and type(o.rate) is float
    assert o.dtype == "float64" and o.items == [3]
    assert _Opts().items == [1, 2] and _Opts().items is not _Opts().items


@pytest.mark.parametrize(
    "kw,exc,match",
    [
        ({"n": 0}, ValueError, r"option 'n' must be >= 1, got 0"),
        ({"rate": 0.0}, ValueError, r"option 'rate' must be > 0.0, got 0.0"),
        ({"rate": 1.5}, ValueError, r"option 'rate' must be <= 1.0, got 1.5"),
        ({"rate": math.nan}, ValueError, r"option 'rate' must be finite"),
        ({"mode": "c"}, ValueError, r"option 'mode' must be one of \['a', 'b'\], got 'c'"),
        ({"n": 2.0}, OptionTypeError, r"option 'n' must be of type int, got 2.0 \(float\)"),
        ({"flag": 1}, OptionTypeError, r"option 'flag' must be of type bool"),
        ({"base": 1}, OptionTypeError, r"option 'base' must be of type bool\|str"),
        ({"base": "yes"}, ValueError, r"option 'base' must be one of"),
        ({"dtype": "int32"}, ValueError, r"option 'dtype' must be one of .*got 'int32'"),
        ({"dtype": "nonsense"}, ValueError, r"option 'dtype': bad value 'nonsense'"),
        ({"mode": None}, ValueError, r"option 'mode' must not be None"),
        ({"mode": "b"}, ValueError, r"option 'mode' = 'b' needs a seed"),
    ],
)
def test_bad_values_name_the_option(kw, exc, match):
    with pytest.raises(exc, match=match):
        _Opts(**kw)


def test_option_type_error_is_both_type_and_value_error():
    for cls in (TypeError, ValueError):
        with pytest.raises(cls, match="'n' must be of type int"):
            _Opts(n="3")


def test_from_dict_names_where_and_key():
    assert _Opts.from_dict({"n": 5, "mode": "b", "seed": 1}) == _Opts(n=5, mode="b", seed=1)
    with pytest.raises(ValueError, match=r"f\.toml \[t\]: unknown key 'm' for _Opts; valid keys"):
        _Opts.from_dict({"m": 1}, "f.toml [t]")
    with pytest.raises(OptionTypeError, match=r"^f\.toml \[t\]: option 'n' must be of type int"):
        _Opts.from_dict({"n": "x"}, "f.toml [t]")
    with pytest.raises(ValueError, match=r"^f\.toml \[t\]: option 'mode' = 'b' needs a seed"):
        _Opts.from_dict({"mode": "b"}, "f.toml [t]")


def test_toml_round_trip_and_table():
    o = _Opts(n=7, rate=0.25, mode="b", seed=3, items=[1, 2, 3], flag=False, base=False)
    assert _Opts.from_toml(o.to_toml()) == o
    assert _Opts.from_toml(o.to_toml("opts"), "opts") == o
    assert "seed" not in _Opts().to_toml()  # None is omitted (TOML has no null) ...
    assert _Opts.from_toml(_Opts().to_toml()) == _Opts()  # ... and comes back as the default
    with pytest.raises(ValueError, match=r"<string>: invalid TOML"):
        _Opts.from_toml("n = ")
    with pytest.raises(ValueError, match=r"<string> \[opts\]: option 'n' must be >= 1"):
        _Opts.from_toml("[opts]\nn = 0\n", "opts")


def test_print_table():
    lines = str(_Opts(n=9)).splitlines()
    assert lines[0] == "_Opts"
    assert lines[1].split() == ["Option", "Name", "Type", "Value", "Description"]
    row = next(ln for ln in lines if ln.split()[0] == "n")
    assert row.split() == ["n", "int", "9", "a", "count"]
    row = next(ln for ln in lines if ln.split()[0] == "base")
    assert row.split()[:3] == ["base", "bool|str", "'auto'"]


def test_field_shadowing_a_method():
    o = _Shadow(validate=False)
    assert o.validate is False and Options.validate(o) is o
    with pytest.raises(ValueError, match="'k' must be >= 0"):
        _Shadow(k=-1)
    with pytest.raises(OptionTypeError, match="'validate' must be of type bool"):
        _Shadow.from_dict({"validate": "no"})


def test_to_toml_nested_tables_arrays_of_tables_and_load(tmp_path):
    d = {
        "a": 1, "f": 1e-300, "g": 2.0, "inf": math.inf, "s": 'q"uo\\te\nline\t', "none": None,
        "empty": [], "xs": [1, 2], "odd key": True,
        "model": {"loss": "linear", "x": [1.5, -2.0], "sub": {"deep": "yes"}},
        "stages": [{"type": "shuffle", "seed": 0}, {"type": "prefetch", "opt": {"k": 1}}],
    }
    text = to_toml(d)
    want = {k: v for k, v in d.items() if k != "none"}
    assert tomllib.loads(text) == want
    p = tmp_path / "c.toml"
    p.write_text(text)
    assert load_toml(p) == want
    assert loads_toml(text, "x") == want
    # scalars first, then [table] / [[table]] blocks in order
    heads = [ln for ln in text.splitlines() if ln.startswith("[")]
    assert heads == ["[model]", "[model.sub]", "[[stages]]", "[[stages]]", "[stages.opt]"]
    assert to_toml({}) == "" and to_toml({"a": None}) == ""
    with pytest.raises(TypeError, match="cannot write 'bad'"):
        to_toml({"bad": object()})


def test_reader_errors_name_the_file(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text("a = [")
    with pytest.raises(ValueError, match=r"c\.toml: invalid TOML"):
        load_toml(p)
    with pytest.raises(ValueError, match=r"^cfg: invalid TOML"):
        loads_toml("a = [", "cfg")
    with pytest.raises(FileNotFoundError):
        load_toml(tmp_path / "missing.toml")
