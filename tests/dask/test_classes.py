"""The Dask estimators are ordinary classes written in source: their signatures are those of
the roofline.learners estimators (less ``comm``, plus ``timeout`` and ``client``),
get_params / clone / pickle work whatever the client, and roofline.dask's ``__all__`` is
sorted and re-exports nothing of another package."""

import ast
import inspect
import pathlib
import pickle
import threading

import pytest
from sklearn.base import clone

import roofline.dask as pkg
from roofline.dask import DaskLinearSVC, DaskLogisticRegression, DaskRidge
from roofline.learners import LinearSVC, LogisticRegression, Ridge

P = inspect.Parameter
TAIL = [P("timeout", P.KEYWORD_ONLY, default=None), P("client", P.KEYWORD_ONLY, default=None)]
CASES = [
    (DaskLogisticRegression, LogisticRegression, {}),
    (DaskLinearSVC, LinearSVC, {"solver": "cocoa", "loss": "hinge"}),
    (DaskRidge, Ridge, {}),
]
#: Local parameters with no Dask counterpart: besides ``comm`` and ``device``, those of a fit
#: that runs in one process only (``Ridge(positive=True)``'s bounded L-BFGS-B and
#: ``LinearSVC(penalty="l1")``'s refuse ``comm=``).
LOCAL_ONLY = {LogisticRegression: set(), LinearSVC: {"penalty"}, Ridge: {"positive"}}
IDS = [c[0].__name__ for c in CASES]


@pytest.mark.parametrize(("cls", "local", "changed"), CASES, ids=IDS)
def test_signature_is_the_local_one_less_comm_plus_timeout_and_client(cls, local, changed):
    """Less ``comm`` (the workers' ranks), ``device`` (a Dask fit runs over ranks, and the
    GPU solver takes no ``comm=``) and the single-process options (``LOCAL_ONLY``), plus
    ``timeout`` and ``client``."""
    want = [p.replace(default=changed.get(p.name, p.default))
            for p in inspect.signature(local.__init__).parameters.values()
            if p.name not in {"comm", "device", *LOCAL_ONLY[local]}]
    want += TAIL
    got = list(inspect.signature(cls.__init__).parameters.values())
    assert got == want
    for name, value in changed.items():  # the Dask defaults really differ from the local ones
        assert inspect.signature(local.__init__).parameters[name].default != value


@pytest.mark.parametrize(("cls", "local", "changed"), CASES, ids=IDS)
def test_defined_in_source_as_a_subclass(cls, local, changed):
    src = inspect.getsource(cls)
    assert src.startswith(f"class {cls.__name__}(")
    assert "def __init__(self" in inspect.getsource(cls.__init__)
    assert cls.__module__ == "roofline.dask._estimators"
    assert issubclass(cls, local) and cls._local is local
    doc = inspect.getdoc(cls)
    for name in inspect.signature(cls.__init__).parameters:
        if name != "self":
            assert f"\n{name} : " in doc, f"{cls.__name__}'s docstring lacks {name}"


@pytest.mark.parametrize(("cls", "local", "changed"), CASES, ids=IDS)
def test_get_params_and_clone(cls, local, changed):
    first = next(iter(inspect.signature(local.__init__).parameters.values()))
    assert first.name == "self"
    est = cls(0.5, tol=1e-3, n_jobs=3, client="c")
    params = est.get_params()
    assert params["tol"] == 1e-3 and params["n_jobs"] == 3 and params["client"] == "c"
    assert params["C" if "C" in params else "alpha"] == 0.5
    assert "comm" not in params and params["solver"] == changed.get("solver", "auto")
    twin = clone(est)
    assert type(twin) is cls and twin.get_params() == params
    assert est._local_params() == {k: v for k, v in params.items()
                                   if k not in ("client", "timeout")}
    local_est = local(**est._local_params())
    assert local_est.get_params()["comm"] is None
    with pytest.raises(TypeError):
        cls(comm=None)
    with pytest.raises(TypeError):
        cls(1.0, 2.0)


def test_all_is_sorted_in_step_with_init_and_local():
    tree = ast.parse((pathlib.Path(pkg.__file__).parent / "__init__.py").read_text())
    imported = sorted(a.asname or a.name for node in tree.body
                      if isinstance(node, ast.ImportFrom) for a in node.names
                      if not (a.asname or a.name).startswith("_"))  # _dist_version
    assert pkg.__all__ == sorted(pkg.__all__) == imported
    for name in pkg.__all__:
        assert getattr(pkg, name).__module__ == "roofline.dask._estimators", name
    from roofline.dask import _estimators

    assert _estimators.__all__ == pkg.__all__


@pytest.mark.parametrize(("cls", "local", "changed"), CASES, ids=IDS)
def test_a_client_that_cannot_be_copied_is_shared_by_clones_and_left_out_of_pickles(
        cls, local, changed):
    """A live ``distributed.Client`` neither deep-copies nor pickles (sockets, an event loop):
    a lock stands in for it.  ``clone`` (so ``GridSearchCV``) gives the clone the same client;
    pickling drops it (``client=None``: the current client), the original keeps it."""
    lock = threading.Lock()
    est = cls(0.5, tol=1e-3, timeout=30.0, client=lock)
    twin = clone(est)
    assert twin.client is lock and twin.timeout == 30.0 and twin.tol == 1e-3
    back = pickle.loads(pickle.dumps(est))
    assert back.client is None and est.client is lock
    assert back.get_params() == {**est.get_params(), "client": None}


@pytest.mark.parametrize("bad", [0, -2.0, float("nan"), float("inf"), "1 min"])
def test_a_bad_timeout_is_named_before_any_work(bad):
    import numpy as np

    with pytest.raises(ValueError, match="timeout must be None or"):
        DaskRidge(timeout=bad).fit(np.zeros((3, 2)), np.zeros(3))
