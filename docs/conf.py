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
import re
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
    ("roofline.glm", "roofline.glm: generalized linear models, losses, solvers, fit_glm"),
    ("roofline.glm.cd", "roofline.glm.cd: coordinate-descent steps"),
    ("roofline.glm.newton", "roofline.glm.newton: second-order steps"),
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
# numpydoc's own check: every rendered public function and class has a docstring (GL08), in
# every file (those of STRICT_EXCLUDE below included).  The complete check (GL08, PR01, RT01 on
# functions, classes, methods and properties) is ``_strict_docstrings`` below.
numpydoc_validation_checks = {"GL08"}
numpydoc_validation_exclude = {
    r"\._[a-z]", r"\.__init__$", r"\.[A-Z]\w*\.\w+$",
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
from roofline import comm, datasources, glm, gmat, learners
from roofline.comm import *
from roofline.datasources import *
from roofline.glm import *
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


# Every public function and class of the packages, and every public method and property of those
# classes, must be complete numpydoc: a missing docstring (GL08), an undocumented parameter (PR01)
# or a missing Returns section (RT01, not asked of properties) fails the build.  A method that
# overrides a documented base-class method and has no docstring of its own shows the base's
# docstring (autodoc_inherit_docstrings): that inherited docstring is the one checked.
STRICT_CHECKS = {"GL08", "PR01", "RT01"}
# Files the check skips (none today): a file whose docstrings are being rewritten together
# with its code may be listed here for the time of that change.
STRICT_EXCLUDE: set[str] = set()


def _strict_file(obj):
    """Whether ``obj`` (a function, class or property) is defined in a file the strict check
    covers: a source file of the repository (not of a dependency) outside ``STRICT_EXCLUDE``."""
    target = obj.fget if isinstance(obj, property) else obj
    try:
        path = inspect.getsourcefile(inspect.unwrap(target))
    except TypeError:
        return False
    if not path:
        return False
    rel = os.path.relpath(os.path.realpath(path), os.path.realpath(ROOT)).replace(os.sep, "/")
    return not rel.startswith(("../", ".venv/", "docs/")) and rel not in STRICT_EXCLUDE


def _inherited_doc(cls, attr):
    """The docstring ``cls.attr`` shows when it has none of its own: the first one found along
    the method resolution order, or None."""
    for base in cls.__mro__[1:]:
        member = vars(base).get(attr)
        if member is None:
            continue
        member = getattr(member, "__func__", member)
        if not (inspect.isfunction(member) or isinstance(member, property)):
            continue  # a plain class attribute's __doc__ is its type's
        doc = member.__doc__
        if doc and doc.strip():
            return doc
    return None


def _strict_errors(obj, doc=None):
    """The ``STRICT_CHECKS`` errors of ``obj``'s docstring, or of ``doc`` in its place (an
    inherited docstring), as (code, message) pairs."""
    from numpydoc.validate import Validator, get_doc_object, validate

    class _WithDoc(Validator):
        def __init__(self, obj_name):
            super().__init__(get_doc_object(obj, doc=doc))
            if doc is not None:
                self.raw_doc = doc
                self.clean_doc = inspect.cleandoc(doc)

    errors = [(c, m) for c, m in validate(None, validator_cls=_WithDoc)["errors"]
              if c in STRICT_CHECKS]
    if isinstance(obj, property):
        errors = [(c, m) for c, m in errors if c != "RT01"]
    return errors


def _options_parameters(cls):
    """The numpydoc Parameters section of an options dataclass (a subclass of
    :class:`roofline.gmat.Options`), written from its fields: each field's type, default and the
    one-line description given to :func:`~roofline.gmat.option` (what ``print(opts)`` shows),
    so the reference and the option table never disagree.  Empty for other classes, and for a
    class whose docstring has its own Parameters section."""
    import dataclasses

    from roofline.gmat import Options

    if not (inspect.isclass(cls) and issubclass(cls, Options) and dataclasses.is_dataclass(cls)):
        return ""
    if "Parameters\n" in inspect.cleandoc(cls.__doc__ or "") or not dataclasses.fields(cls):
        return ""
    lines = ["Parameters", "----------"]
    for f in dataclasses.fields(cls):
        meta = f.metadata or {}
        kind = meta.get("kind", f.type)
        kinds = kind if isinstance(kind, tuple) else (kind,)
        kind = " or ".join(getattr(k, "__name__", str(k)) for k in kinds)
        if f.default is not dataclasses.MISSING:
            default = f"default {f.default!r}"
        elif f.default_factory is not dataclasses.MISSING:
            default = f"default {f.default_factory()!r}"
        else:
            default = "required"
        if meta.get("optional"):
            kind += " or None"
        desc = (meta.get("doc") or "").strip().rstrip(".")
        extra = []
        choices = meta.get("choices") or ()
        if choices and not all(str(c) in desc for c in choices):
            extra.append("one of " + ", ".join(f"``{c!r}``" for c in choices))
        if meta.get("low") is not None:
            extra.append(f"{'>' if meta.get('low_open') else '>='} {meta['low']}")
        if meta.get("high") is not None:
            extra.append(f"<= {meta['high']}")
        if extra:
            desc += (" " if desc else "") + "(" + "; ".join(extra) + ")"
        desc = re.sub(r"([\\|*`])", r"\\\1", desc[:1].upper() + desc[1:])  # plain text
        desc = re.sub(r"(?<=\w)_(?!\w)", r"\\_", desc)  # "name_" is no reference
        lines += [f"{f.name} : {kind}, {default}", f"    {desc}."]
    return "\n".join(lines)


def _class_doc(cls):
    """The docstring a class's page shows: its own, plus the generated Parameters section of an
    options dataclass (:func:`_options_parameters`)."""
    doc = inspect.cleandoc(cls.__doc__ or "")
    extra = _options_parameters(cls)
    return doc + "\n\n" + extra + "\n" if extra else None


def _options_docstring(app, what, name, obj, options, lines):
    """autodoc-process-docstring, before numpydoc: add the Parameters section of an options
    dataclass (:func:`_options_parameters`)."""
    if what == "class":
        extra = _options_parameters(obj)
        if extra:
            lines += [""] + extra.splitlines() + [""]


def strict_report(name, obj):
    """The strict check's errors for the public function or class ``obj`` named ``name`` and,
    for a class, for each public method and property it defines: a list of
    (name, code, message), empty when ``obj``'s file is not covered."""
    if not _strict_file(obj):
        return []
    if not inspect.isclass(obj):
        return [(name, c, m) for c, m in _strict_errors(obj)]
    out = [(name, c, m) for c, m in _strict_errors(obj, _class_doc(obj))]
    for attr, member in vars(obj).items():
        if attr.startswith("_"):
            continue
        member = getattr(member, "__func__", member)  # staticmethod, classmethod
        if not (inspect.isfunction(member) or isinstance(member, property)):
            continue
        if not _strict_file(member):
            continue
        own = member.__doc__
        doc = None if own and own.strip() else _inherited_doc(obj, attr)
        out += [(f"{name}.{attr}", c, m) for c, m in _strict_errors(member, doc)]
    return out


_reported = set()


def _strict_docstrings(app, what, name, obj, options, lines):
    """autodoc-process-docstring: warn (an error under ``-W``) for each failed strict check of a
    rendered public function or class, and of the methods and properties its class defines
    (checked here, with the class, so that a method without a docstring, which autodoc does not
    render, is checked too)."""
    from sphinx.util import logging

    if what not in ("function", "class", "exception") or name.rsplit(".", 1)[-1].startswith("_"):
        return
    if name in _reported:  # autosummary's table and the object's page both process it
        return
    _reported.add(name)
    for where, code, msg in strict_report(name, obj):
        logging.getLogger(__name__).warning(f"[strict docstrings] {where}: {code} {msg}")


def setup(app):
    app.connect("autodoc-skip-member", _skip_member)
    app.connect("autodoc-process-docstring", _options_docstring, priority=400)  # numpydoc: 500
    app.connect("autodoc-process-docstring", _strict_docstrings)
