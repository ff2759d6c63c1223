"""The layout of roofline.datasources: sorted ``__all__`` in step with the ``__init__`` imports,
no re-exports of other packages' names."""

import ast
import importlib
import pathlib

import pytest

import roofline.datasources as pkg

ROOT = pathlib.Path(pkg.__file__).parent


def _init_imports():
    """``{module: [names]}`` of the ``from .module import ...`` statements of ``__init__.py``
    (the private ``importlib.metadata`` lookup of ``__version__`` aside)."""
    tree = ast.parse((ROOT / "__init__.py").read_text())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            if node.module == "importlib.metadata" and all(
                    (a.asname or a.name).startswith("_") for a in node.names):
                continue  # __version__'s private lookup, not a re-export
            assert node.level == 1, f"__init__ imports from {node.module} (not a private module)"
            out.setdefault(node.module, []).extend(a.asname or a.name for a in node.names)
    return out


def test_all_is_sorted_and_in_step_with_the_imports():
    imported = sorted(n for names in _init_imports().values() for n in names)
    assert pkg.__all__ == sorted(pkg.__all__)
    assert pkg.__all__ == imported


def test_no_foreign_reexports():
    for name in pkg.__all__:
        mod = getattr(getattr(pkg, name), "__module__", None)
        assert mod is None or mod.startswith("roofline.datasources."), (name, mod)


MODULES = sorted(p.stem for p in ROOT.glob("_*.py") if p.stem != "__init__")


@pytest.mark.parametrize("module", MODULES)
def test_module_all_sorted_and_covers_what_init_imports(module):
    mod = importlib.import_module(f"roofline.datasources.{module}")
    names = getattr(mod, "__all__", [])
    assert list(names) == sorted(names)
    assert set(_init_imports().get(module, ())) <= set(names)
    for n in names:
        assert hasattr(mod, n), n

