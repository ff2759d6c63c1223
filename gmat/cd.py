"""Deprecated alias of :mod:`roofline.glm.cd` (moved there; removed in the next release).

Import the new home instead: ``from roofline.glm import cd``.
This module is the one place where gmat reaches above itself, and only when a user imports it.
"""

import sys
import warnings

warnings.warn("roofline.gmat.cd is deprecated and will be removed in the next release; "
              "use roofline.glm.cd", DeprecationWarning, stacklevel=2)

import roofline.glm.cd as _new  # noqa: E402

sys.modules[__name__] = _new
