"""Deprecated alias of :mod:`roofline.glm.newton` (moved there; removed in the next release).

Import the new home instead: ``from roofline.glm import newton``.
This module is the one place where gmat reaches above itself, and only when a user imports it.
"""

import sys
import warnings

warnings.warn("roofline.gmat.newton is deprecated and will be removed in the next release; "
              "use roofline.glm.newton", DeprecationWarning, stacklevel=2)

import roofline.glm.newton as _new  # noqa: E402

sys.modules[__name__] = _new
