"""The package layering of ARCHITECTURE.md, read from the source (module- and function-level
imports alike): who may import whom, no import cycle inside a package, and no test or benchmark
reaching into another package's private modules."""

import ast
import importlib
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

#: package -> its folder
FOLDERS = {
    "kernels": "kernels",
    "gmat": "gmat",
    "datasources": "datasources",
    "comm": "comm",
    "glm": "glm",
    "learners": "learners",
    "dask": "dask_",
}

#: package -> the Roofline packages it may import (ARCHITECTURE.md, "Packages and layers")
ALLOWED = {
    "kernels": set(),
    "gmat": {"kernels"},
    "datasources": {"gmat", "kernels"},
    "comm": {"kernels"},
    "glm": {"gmat", "kernels", "datasources", "comm"},
    "learners": {"gmat", "glm", "datasources", "comm"},
    "dask": {"learners", "glm", "gmat", "comm"},
}

#: The deprecated aliases roofline.gmat.cd / .glm / .newton (removed in the next release) are
#: the one place a package reaches above itself, and only when a user imports them.
DEPRECATED_SHIMS = {("gmat", "cd"), ("gmat", "glm"), ("gmat", "newton")}


def _imports(path, package):
    """``(target module, lineno)`` of every import of ``path`` (relative ones resolved)."""
    tree = ast.parse(path.read_text(), str(path))
    mod = path.stem
    parts = ["roofline", package] + ([] if mod == "__init__" else [mod])
    base = parts if mod == "__init__" else parts[:-1]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[: len(base) - (node.level - 1)]
                target = ".".join(anchor + ([node.module] if node.module else []))
            else:
                target = node.module
            out.append((target, node.lineno))
            # "from . import x" / "from roofline.glm import _x": submodules named in the list
            for a in node.names:
                out.append((f"{target}.{a.name}", node.lineno))
    return out


def _modules(package):
    folder = ROOT / FOLDERS[package]
    return sorted(folder.glob("*.py"))


def _package_of(target):
    if not target or not target.startswith("roofline."):
        return None
    return target.split(".")[1]


@pytest.mark.parametrize("package", sorted(FOLDERS))
def test_packages_import_only_the_layers_below(package):
    bad = []
    for path in _modules(package):
        if (package, path.stem) in DEPRECATED_SHIMS:
            continue
        for target, line in _imports(path, package):
            other = _package_of(target)
            if other and other != package and other not in ALLOWED[package]:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    assert not bad, "layering broken:\n" + "\n".join(bad)


@pytest.mark.parametrize("package", sorted(FOLDERS))
def test_no_import_cycle_inside_a_package(package):
    names = {p.stem for p in _modules(package)}
    graph = {}
    for path in _modules(package):
        if path.stem == "__init__":
            continue  # the package face imports everything by design
        deps = set()
        for target, _ in _imports(path, package):
            prefix = f"roofline.{package}."
            if target and target.startswith(prefix):
                head = target[len(prefix):].split(".")[0]
                if head in names and head not in ("__init__", path.stem):
                    deps.add(head)
        graph[path.stem] = deps
    state = {}

    def visit(node, stack):
        state[node] = "open"
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == "open":
                cycle = stack[stack.index(dep):] + [dep]
                raise AssertionError(f"import cycle in {package}: {' -> '.join(cycle)}")
            if dep not in state:
                visit(dep, stack + [dep])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])


@pytest.mark.parametrize("package", sorted(FOLDERS))
def test_packages_use_other_packages_public_names(package):
    """A package imports another one's public face only (``roofline.glm``, not
    ``roofline.glm._problem``): what it needs is exported there, so that a private module can
    be split or renamed by its own package alone."""
    bad = []
    for path in _modules(package):
        if (package, path.stem) in DEPRECATED_SHIMS:
            continue  # the deprecated aliases re-export the moved modules
        for target, line in _imports(path, package):
            other = _package_of(target)
            if other is None or other == package:
                continue
            if any(p.startswith("_") for p in target.split(".")[2:]):
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    assert not bad, "private modules of another package:\n" + "\n".join(bad)


#: Deliberate exceptions, each with its reason: (file, module it may reach into).
PRIVATE_OK = {
    # the CUDA simulator has no cupy, so these tests drive gmat's GPU entry points with
    # numba-cuda device arrays directly (and force its A*S^T method)
    ("tests/kernels/test_cuda_primitives.py", "roofline.gmat._primitives"),
    # the primitives benchmark times both sides of gmat's tuning knobs (PARALLEL_MIN_WORK,
    # GPU_AST_METHOD), which are module settings, not API
    ("benchmarks/primitives.py", "roofline.gmat._primitives"),
}


def _scripts():
    for folder in ("tests", "benchmarks", "examples"):
        yield from sorted((ROOT / folder).rglob("*.py"))


def test_tests_and_benchmarks_use_other_packages_public_names():
    """A test of package P may import P's private modules; nothing else may."""
    bad = []
    for path in _scripts():
        rel = path.relative_to(ROOT)
        own = rel.parts[1] if rel.parts[0] == "tests" and len(rel.parts) > 2 else None
        for target, line in _imports(path, "_script_"):
            other = _package_of(target)
            if other is None or other == own:
                continue
            private = [p for p in target.split(".")[2:] if p.startswith("_")]
            if private and (str(rel), ".".join(target.split(".")[:3])) not in PRIVATE_OK:
                bad.append(f"{rel}:{line} imports {target}")
    assert not bad, "private modules of another package:\n" + "\n".join(bad)


@pytest.mark.parametrize("package", sorted(FOLDERS))
def test_all_is_sorted_and_exported(package):
    mod = importlib.import_module(f"roofline.{package}")
    names = list(mod.__all__)
    key = sorted(names, key=lambda n: (0 if n.isupper() else 1 if n[0].isupper() else 2, n))
    assert names in (sorted(names), key), f"roofline.{package}.__all__ is not sorted"
    assert len(set(names)) == len(names)
    missing = [n for n in names if not hasattr(mod, n)]
    assert not missing, f"roofline.{package}.__all__ names what it does not define: {missing}"
    public = {n for n, v in vars(mod).items() if not n.startswith("_")
              and getattr(v, "__module__", "").startswith(f"roofline.{package}")}
    assert public <= set(names) | {"annotations"}, (
        f"roofline.{package} defines public names outside __all__: {sorted(public - set(names))}")
