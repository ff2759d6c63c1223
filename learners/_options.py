"""Compatibility alias: the options system lives in :mod:`roofline.gmat` (``gmat/_options.py``).

Import ``Options`` and ``option`` from ``roofline.gmat`` (or ``roofline.learners``); this module
only re-exports them for code written before the move.
"""

from roofline.gmat._options import (
    Options,
    OptionTypeError,
    load_toml,
    loads_toml,
    option,
    to_toml,
)

__all__ = ["OptionTypeError", "Options", "load_toml", "loads_toml", "option", "to_toml"]
