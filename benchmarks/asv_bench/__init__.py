"""asv suite of Roofline (run with ``make asv``: ``asv run --python=same``).

The suite shares ``benchmarks/_peers.py`` (peer conversions, losses, the VW harness) with the
scripts beside it.  asv imports this package by name without putting ``benchmarks/`` on
``sys.path``, so it is appended here (the scripts, run as ``python benchmarks/x.py``, have it
first already).
"""

import os
import sys

_BENCHMARKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _BENCHMARKS not in sys.path:
    sys.path.append(_BENCHMARKS)
