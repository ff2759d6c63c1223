"""Every subpackage of the ``roofline`` namespace reports the installed distribution's version.

The namespace has no ``__init__.py`` (PEP 420), so the version lives on each subpackage and in
the distribution's metadata (``importlib.metadata.version("roofline")``).
"""

import importlib
from importlib.metadata import version

import pytest

SUBPACKAGES = ["comm", "dask", "datasources", "glm", "gmat", "kernels", "learners"]


@pytest.mark.parametrize("name", SUBPACKAGES)
def test_subpackage_version_is_the_distribution_version(name):
    mod = importlib.import_module(f"roofline.{name}")
    assert mod.__version__ == version("roofline")
    assert mod.__version__[0].isdigit()
