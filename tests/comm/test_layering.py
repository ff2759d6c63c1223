"""The import graph of ``roofline.comm``, read from the source: acyclic (module-level and
function-level imports alike), and every transport below Kylix (ARCHITECTURE.md, the
communication tier)."""

import ast
import os

import pytest

import roofline.comm

COMM = os.path.dirname(roofline.comm.__file__)
PACKAGE = "roofline.comm"


def _imports(path):
    """The comm modules ``path`` imports anywhere in it (``__init__`` for the package)."""
    tree = ast.parse(open(path).read(), path)
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                base = node.module
            elif node.level == 0 and node.module and (node.module == PACKAGE
                                                      or node.module.startswith(PACKAGE + ".")):
                base = node.module[len(PACKAGE) + 1:] or None
            else:
                continue
            if base:
                out.add(base.split(".")[0])
            else:  # from . import x / from roofline.comm import x: a module, or the package
                mods = {a.name for a in node.names if os.path.exists(
                    os.path.join(COMM, a.name + ".py"))}
                out |= mods or {"__init__"}
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name == PACKAGE:
                    out.add("__init__")
                elif a.name.startswith(PACKAGE + "."):
                    out.add(a.name[len(PACKAGE) + 1:].split(".")[0])
    return out


def _transport_classes(path):
    """The classes of ``path`` that derive from a class whose name ends in ``Transport``."""
    tree = ast.parse(open(path).read(), path)
    return [n.name for n in tree.body if isinstance(n, ast.ClassDef) and any(
        (b.id if isinstance(b, ast.Name) else getattr(b, "attr", "")).endswith("Transport")
        for b in n.bases)]


MODULES = sorted(f[:-3] for f in os.listdir(COMM) if f.endswith(".py"))
GRAPH = {m: _imports(os.path.join(COMM, m + ".py")) for m in MODULES}
# the modules defining transports (Kylix's own _SubTransport, its view of a parent transport
# for split and dup, is part of Kylix)
TRANSPORTS = sorted(m for m in MODULES
                    if m != "_kylix" and _transport_classes(os.path.join(COMM, m + ".py")))


def _reach(m):
    seen, todo = set(), [m]
    while todo:
        for d in GRAPH.get(todo.pop(), ()):
            if d not in seen:
                seen.add(d)
                todo.append(d)
    return seen


def test_the_graph_is_read():
    assert {"_base", "_kylix", "_transport"} <= GRAPH["_tcp"] | GRAPH["_inprocess"]
    assert "_factories" in GRAPH["_dask"]  # a function-level import counts like the others
    assert GRAPH["_mpi_comm"] >= {"_kylix", "_mpi"}


def test_no_import_cycles():
    cycles = [m for m in MODULES if m in _reach(m)]
    assert not cycles, {m: sorted(GRAPH[m]) for m in cycles}


def test_only_the_package_imports_the_package():
    assert [m for m in MODULES if m != "__init__" and "__init__" in GRAPH[m]] == []


def test_the_transports_sit_below_kylix():
    assert {"_disk", "_mpi", "_replicate", "_tcp", "_threads", "_transport"} <= set(TRANSPORTS)
    below = [m for m in TRANSPORTS if "_kylix" in _reach(m)]
    assert below == [], "transport modules that import Kylix: " + ", ".join(below)


@pytest.mark.parametrize("module", ["_base", "_framing", "_transport"])
def test_the_bottom_imports_nothing_of_the_tier_above(module):
    assert _reach(module) <= {"_base"}
