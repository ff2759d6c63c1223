"""Sphinx configuration of the Roofline documentation (``make docs``).

The API reference is generated at build time from each public package's ``__all__``
(``docs/api/*.rst`` are written here, then autosummary writes one page per public name from its
docstring), so a name added to a package appears without editing the docs.  numpydoc validates
the docstrings it renders (``numpydoc_validation_checks``); with ``-W`` a failed check fails the
build.  ``sphinx-build -b doctest`` runs every ``>>>`` example of the guide and of the API
reference's docstrings.
"""

import importlib
import inspect
import os
import sys
from datetime import date

os.environ.setdefault("MPLBACKEND", "Agg")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.dirname(HERE))  # tests/ helpers, benchmarks: not needed by the API

project = "Roofline"
author = "the Roofline developers"
copyright = f"{date.today().year}, {author}"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.doctest",
    "sphinx.ext.intersphinx",
    "sphinx.ext.mathjax",
    "numpydoc",
    "myst_parser",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
templates_path = ["_templates"]
html_theme = "alabaster"
html_static_path = []
html_theme_options = {"description": "Machine learning at the hardware limit, in Python",
                      "fixed_sidebar": True}

# Public packages of the API reference: (module, title).
API = [
    ("roofline.gmat", "roofline.gmat: matrices, primitives, the machine roofline"),
    ("roofline.gmat.cd", "roofline.gmat.cd: coordinate-descent steps"),
    ("roofline.gmat.glm", "roofline.gmat.glm: losses, peer conversions, fused GLM steps"),
    ("roofline.datasources", "roofline.datasources: data sources and configs"),
    ("roofline.learners", "roofline.learners: learners, models, optimizers, solvers, estimators"),
    ("roofline.comm", "roofline.comm: communicators (Kylix, TCP, MPI)"),
    ("roofline.dask", "roofline.dask: the estimators on Dask collections"),
]


def _home(obj, homes):
    """The API module (of ``homes``) that defines ``obj``: the longest prefix of its module."""
    where = getattr(obj, "__module__", None) or ""
    best = None
    for h in homes:
        if (where == h or where.startswith(h + ".")) and (best is None or len(h) > len(best)):
            best = h
    return best


def _write_api_pages():
    """``docs/api/<module>.rst``: the module's docstring and an autosummary of its ``__all__``."""
    out = os.path.join(HERE, "api")
    os.makedirs(out, exist_ok=True)
    index = ["API reference", "=============", "",
             "Generated from the docstrings of each package's public names (``__all__``).", "",
             ".. toctree::", "   :maxdepth: 1", ""]
    homes = [mod for mod, _ in API]
    for mod, title in API:
        m = importlib.import_module(mod)
        own, also = [], []
        for n in sorted(getattr(m, "__all__", ())):
            obj = getattr(m, n)
            if inspect.ismodule(obj):
                continue  # a subpackage: its own page
            home = _home(obj, homes)
            (own if home in (None, mod) else also).append((n, home))
        lines = [title, "=" * len(title), "", f".. automodule:: {mod}", "   :no-members:", "",
                 f".. currentmodule:: {mod}", "", ".. autosummary::", "   :toctree: generated",
                 "   :nosignatures:", ""]
        lines += [f"   {n}" for n, _ in own]
        if also:
            lines += ["", "Also exported here (documented where they live): " + ", ".join(
                f":obj:`~{home}.{n}`" for n, home in also) + "."]
        text = "\n".join(lines) + "\n"
        path = os.path.join(out, f"{mod}.rst")
        if not os.path.exists(path) or open(path).read() != text:
            with open(path, "w") as f:
                f.write(text)
        index.append(f"   {mod}")
    text = "\n".join(index) + "\n"
    path = os.path.join(out, "index.rst")
    if not os.path.exists(path) or open(path).read() != text:
        with open(path, "w") as f:
            f.write(text)


_write_api_pages()


def _write_comm_toc():
    """docs/comm.md (the all-reduce tables of the comm tier's benchmark) joins the site's
    table of contents when it exists; ``guide/distributed.rst`` includes this file."""
    have = os.path.exists(os.path.join(HERE, "comm.md"))
    text = ".. toctree::\n   :hidden:\n\n   ../comm\n" if have else "\n"
    with open(os.path.join(HERE, "api", "comm_toc.inc"), "w") as f:
        f.write(text)


_write_comm_toc()

autosummary_generate = True
autosummary_imported_members = True
autodoc_typehints = "none"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
# Checked: every public function and class (what the packages' __all__ name) has a docstring
# (GL08).  Not yet checked (they fail today; see docs/contributing.rst): PR01 (a parameter not
# documented), RT01 (no Returns section), and the methods of classes.
numpydoc_validation_checks = {"GL08"}
numpydoc_validation_exclude = {
    r"\._[a-z]", r"\.__init__$", r"\.[A-Z]\w*\.\w+$",
    # learners/_estimators.py builds these docstrings by string concatenation, which Python
    # does not take as a docstring (__doc__ is None): fix there, then drop this line.
    r"^roofline\.learners\.(LinearRegression|LinearSVC|LogisticRegression|Ridge)$",
}

myst_heading_anchors = 3
suppress_warnings = ["myst.header", "myst.xref_missing"]

intersphinx_mapping = {}

# The docstrings' examples run with the public names in scope, as in an interactive session
# after ``from roofline.<package> import *``.
doctest_global_setup = """
import os
os.environ.setdefault("MPLBACKEND", "Agg")
import numpy as np
from roofline import comm, datasources, gmat, learners
from roofline.comm import *
from roofline.datasources import *
from roofline.gmat import *
from roofline.learners import *
"""


def _skip_member(app, what, name, obj, skip, options):
    """Class pages show the public methods and properties defined by Roofline: not the class
    attributes (option tables, constants), nor what scikit-learn adds to estimators
    (``set_*_request``), which its own documentation describes."""
    if what != "class" or skip:
        return skip
    target = obj.fget if isinstance(obj, property) else obj
    if not (inspect.isroutine(target) or isinstance(obj, property)):
        return True
    module = getattr(target, "__module__", "") or ""
    if not module.startswith("roofline."):
        return True
    return None


# Files whose public functions, classes and methods must be complete numpydoc now: a missing
# docstring, an undocumented parameter or a missing Returns section fails the build.  Add a file
# here once its docstrings are complete (see contributing.rst for what remains).
STRICT_FILES = {"gmat/_report.py", "learners/_plot.py", "gmat/_plot.py"}
STRICT_CHECKS = {"GL08", "PR01", "RT01"}


def _strict_docstrings(app, what, name, obj, options, lines):
    from numpydoc.validate import validate
    from sphinx.util import logging

    target = obj.fget if isinstance(obj, property) else obj
    try:
        path = inspect.getsourcefile(inspect.unwrap(target))
    except TypeError:
        return
    if not path or os.path.relpath(path, ROOT).replace(os.sep, "/") not in STRICT_FILES:
        return
    if name.rsplit(".", 1)[-1].startswith("_"):
        return
    errors = [(c, m) for c, m in validate(name)["errors"] if c in STRICT_CHECKS]
    if what == "property":
        errors = [(c, m) for c, m in errors if c != "RT01"]
    for code, msg in errors:
        logging.getLogger(__name__).warning(f"[strict docstrings] {name}: {code} {msg}")


def setup(app):
    app.connect("autodoc-skip-member", _skip_member)
    app.connect("autodoc-process-docstring", _strict_docstrings)
