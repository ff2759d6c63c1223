"""Deprecated alias of :mod:`roofline.glm` (moved there; removed in the next release).

Import the new home instead: ``from roofline import glm``.
This module is the one place where gmat reaches above itself, and only when a user imports it.
"""

import sys
import warnings

warnings.warn("roofline.gmat.glm is deprecated and will be removed in the next release; "
              "use roofline.glm", DeprecationWarning, stacklevel=2)

import roofline.glm as _new  # noqa: E402

sys.modules[__name__] = _new
