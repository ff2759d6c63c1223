"""The solver registry: one row per GLM solver, from which every front door dispatches.

A row (:class:`SolverSpec`) says what a solver solves (``losses``, ``penalties``, the
``formulations``: primal and/or dual), what it takes (``comm=``, non-uniform
``sample_weight``), where it runs (``devices``) and how to run it (``fit``: a callable, or a
lazy ``"module:function"`` path, imported on first use, for solvers that live above
:mod:`roofline.glm`, such as ``vw-hybrid`` in :mod:`roofline.learners._vw`).  Every list of
solver names (``fit_glm``'s and :class:`~roofline.glm.GLMSolverOptions`' ``solver``, the
estimators' ``solver``, the CLI's ``[solver]`` table, :mod:`roofline.dask`) and every "solver X
does not take Y" error (:func:`check_solver`) is derived from the rows; ``solver="auto"`` is
decided in one place, :func:`roofline.glm._auto.choose_solver` (the estimators' extra rules in
:func:`roofline.glm._auto.choose_estimator_solver`).

Three kinds of rows (``runner``):

``"fit_glm"``
    :func:`~roofline.glm.fit_glm` runs it: ``fit(X, y, *, loss, alpha, penalty,
    fit_intercept, options, sample_weight, coef_init, callback, comm, verbose, random_state,
    blocks, comm_stats) -> GLMResult`` on validated inputs (``X`` CSC or a dense ndarray,
    ``n_features x n_examples``; ``y`` in the margin form of
    :func:`~roofline.glm.check_labels`; ``options`` a :class:`~roofline.glm.GLMSolverOptions`
    whose ``solver`` is this row's name).  The estimators run it through ``fit_glm``.
``"estimator"``
    Only the estimators run it, calling ``fit(X, y, *, loss, alpha, comm, fit_intercept,
    max_iter, tol, verbose)`` (a result with ``coef``, ``intercept``, ``n_iter``).
``"learner"``
    The estimators run it as an optimizer of the minibatch
    :class:`~roofline.learners.Learner` (``fit`` is None).

Rows are kept in registration order, the order of every listing.  Adding a solver is one
module and one row (see ``ARCHITECTURE.md``, "Adding a solver")::

    register_solver(SolverSpec("my-cd", fit="roofline.glm._my_cd:run_my_cd",
                               losses=("squared", "logistic"), summary="..."))
"""

from __future__ import annotations

import dataclasses
import importlib
import types
from collections.abc import Callable, Sequence

from ._losses import CD_LOSSES, GLM_LOSSES, SMOOTH_LOSSES, losses_where

__all__ = [
    "AUTO",
    "SOLVERS",
    "SolverSpec",
    "check_solver",
    "get_solver",
    "register_solver",
    "solver_names",
    "solvers",
    "unregister_solver",
]

#: The name every front door accepts besides the rows': the solver is chosen from the data.
AUTO = "auto"

_RUNNERS = ("fit_glm", "estimator", "learner")
_FORMULATIONS = ("primal", "dual")
#: the penalties a row may take (``"elasticnet"``: ``l1_ratio`` mixes l1 and l2, scikit-learn's
#: parametrisation; the primal coordinate descent of ``scd`` / ``tpa-scd`` solves it)
PENALTIES = ("l2", "l1", "elasticnet")


@dataclasses.dataclass(frozen=True)
class SolverSpec:
    """One row of the registry.

    Parameters
    ----------
    name : str
        The name given to ``solver=``.
    fit : callable, str or None
        How to run it (see the module docstring for the signature of each ``runner``): a
        callable, or ``"module:function"`` imported on first use (:meth:`load`); None for
        the minibatch optimizers (``runner="learner"``).
    losses : tuple of str
        The canonical losses it solves (:data:`roofline.glm.LOSSES`; derived from the loss
        table: ``CD_LOSSES``, ``SMOOTH_LOSSES``, :func:`~roofline.glm.losses_where`).
    penalties : tuple of str
        Some of ``"l2"``, ``"l1"`` and ``"elasticnet"``.
    formulations : tuple of str
        ``"primal"`` and / or ``"dual"`` (``dual=`` of :func:`~roofline.glm.fit_glm`).
    comm : bool
        Whether it runs over a communicator (``comm=``: one rank per process).
    sample_weight : bool
        Whether it takes non-uniform sample weights.
    comm_dual_weights : bool
        Whether its dual takes non-uniform sample weights over ``comm=`` (weighted SDCA on
        each rank; penalty L2, ``dual`` True or None), though it takes none otherwise.
    intercept : str
        How it treats the intercept, for the docs.
    devices : tuple of str
        Where it runs.
    runner : {"fit_glm", "estimator", "learner"}
        Which front doors run it (module docstring).
    partial_fit : bool
        Whether the estimators offer ``partial_fit`` with it (the minibatch optimizers).
    problem : str
        What it solves, one phrase after ``"solver='name' "`` in its errors (default: the
        losses and penalties it supports).
    summary : str
        One line for listings and docs.
    """

    name: str
    fit: Callable | str | None
    losses: tuple
    penalties: tuple = ("l2",)
    formulations: tuple = ("primal",)
    comm: bool = False
    sample_weight: bool = False
    comm_dual_weights: bool = False
    intercept: str = "unregularised"
    devices: tuple = ("cpu",)
    runner: str = "fit_glm"
    partial_fit: bool = False
    problem: str = ""
    summary: str = ""

    def load(self) -> Callable:
        """The ``fit`` callable, importing ``"module:function"`` on first use.

        Returns
        -------
        callable

        Raises
        ------
        ValueError
            The row has no ``fit`` (a minibatch optimizer of the Learner).
        """
        if self.fit is None:
            raise ValueError(f"solver {self.name!r} has no fit function: the estimators run it "
                             "through the minibatch Learner")
        if callable(self.fit):
            return self.fit
        module, _, function = self.fit.partition(":")
        return getattr(importlib.import_module(module), function)

    def what(self) -> str:
        """The phrase of its errors: :attr:`problem`, or the losses and penalties it takes.

        Returns
        -------
        str
        """
        if self.problem:
            return self.problem
        s = "es" if len(self.losses) > 1 else ""
        return (f"supports the {_and(sorted(self.losses))} loss{s} with penalty "
                f"{_or([repr(p) for p in self.penalties])}")


_SOLVERS: dict[str, SolverSpec] = {}
#: name -> :class:`SolverSpec`, in registration order (a read-only live view).
SOLVERS = types.MappingProxyType(_SOLVERS)


def _and(names: Sequence[str], word: str = "and") -> str:
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} {word} {names[-1]}"


def _or(names: Sequence[str]) -> str:
    return _and(names, "or")


def register_solver(spec: SolverSpec, *, replace: bool = False) -> SolverSpec:
    """Add a row to the registry (after the others).

    Parameters
    ----------
    spec : SolverSpec
        The row.
    replace : bool
        Replace a row of the same name (kept at its place) instead of refusing it.

    Returns
    -------
    SolverSpec
        ``spec``.

    Raises
    ------
    ValueError
        A duplicate name (without ``replace``), the reserved name ``"auto"``, an unknown loss,
        penalty, formulation or runner, or a missing ``fit`` for a runner that needs one.
    """
    if not isinstance(spec, SolverSpec):
        raise TypeError(f"register_solver() takes a SolverSpec, got {type(spec).__name__}")
    name = spec.name
    if not isinstance(name, str) or not name or name == AUTO:
        raise ValueError(f"a solver needs a non-empty name other than {AUTO!r}, got {name!r}")
    if name in _SOLVERS and not replace:
        raise ValueError(f"solver {name!r} is already registered (replace=True replaces it)")
    for field, values, known in (("losses", spec.losses, GLM_LOSSES),
                                 ("penalties", spec.penalties, PENALTIES),
                                 ("formulations", spec.formulations, _FORMULATIONS)):
        bad = [v for v in values if v not in known]
        if not values or bad:
            raise ValueError(f"solver {name!r}: {field} must be a non-empty subset of "
                             f"{list(known)}, got {values!r}")
    if spec.runner not in _RUNNERS:
        raise ValueError(f"solver {name!r}: runner must be one of {list(_RUNNERS)}, got "
                         f"{spec.runner!r}")
    if (spec.fit is None) != (spec.runner == "learner"):
        raise ValueError(f"solver {name!r}: runner={spec.runner!r} "
                         + ("needs a fit" if spec.fit is None else "takes no fit"))
    _SOLVERS[name] = spec
    return spec


def unregister_solver(name: str) -> SolverSpec:
    """Remove a row (a test's toy solver).

    Parameters
    ----------
    name : str

    Returns
    -------
    SolverSpec
        The removed row.
    """
    return _SOLVERS.pop(name)


def get_solver(name: str) -> SolverSpec:
    """The row of ``name``.

    Parameters
    ----------
    name : str

    Returns
    -------
    SolverSpec

    Raises
    ------
    ValueError
        ``name`` is not a registered solver (the message lists them).
    """
    try:
        return _SOLVERS[name]
    except (KeyError, TypeError):
        raise ValueError(f"solver must be one of {list(_SOLVERS)}, got {name!r}") from None


def solvers(*, loss=None, penalty=None, comm=None, sample_weight=None, runner=None,
            formulation=None, partial_fit=None) -> tuple:
    """The rows matching every given condition, in registration order.

    Parameters
    ----------
    loss : str, optional
        A canonical loss the solver must support.
    penalty : {"l2", "l1", "elasticnet"}, optional
    comm : bool, optional
        Whether it must (True) or must not (False) run over a communicator.
    sample_weight : bool, optional
        Whether it must (True) or must not (False) take non-uniform weights.
    runner : str or sequence of str, optional
        The runners admitted (``"fit_glm"``: what :func:`~roofline.glm.fit_glm` runs).
    formulation : {"primal", "dual"}, optional
    partial_fit : bool, optional

    Returns
    -------
    tuple of SolverSpec
    """
    runners = (runner,) if isinstance(runner, str) else runner
    return tuple(
        s for s in _SOLVERS.values()
        if (loss is None or loss in s.losses)
        and (penalty is None or penalty in s.penalties)
        and (comm is None or s.comm == bool(comm))
        and (sample_weight is None or s.sample_weight == bool(sample_weight))
        and (runners is None or s.runner in runners)
        and (formulation is None or formulation in s.formulations)
        and (partial_fit is None or s.partial_fit == bool(partial_fit))
    )


def solver_names(*, auto: bool = True, **conditions) -> tuple:
    """The names of :func:`solvers` ``(**conditions)``, with ``"auto"`` last unless
    ``auto=False``.

    Parameters
    ----------
    auto : bool, default True
        Append ``"auto"``.
    **conditions
        The conditions of :func:`solvers` (``loss=``, ``comm=``, ``runner=``, ...).

    Returns
    -------
    tuple of str
    """
    return tuple(s.name for s in solvers(**conditions)) + ((AUTO,) if auto else ())


def check_solver(name, *, loss=None, penalty="l2", dual=None, comm=False, weighted=False,
                 runner=("fit_glm",)):
    """The one check of a solver against a problem; every message of the front doors.

    Parameters
    ----------
    name : str
        ``solver=`` (``"auto"`` passes: only the scope and ``comm`` are checked).
    loss : str, optional
        The canonical loss (None: not checked).
    penalty : {"l2", "l1", "elasticnet"}
    dual : bool or None
        ``dual=`` (None: the solver's choice).
    comm : bool
        Whether a communicator is given.
    weighted : bool
        Whether the sample weights are non-uniform.
    runner : str, sequence of str or None
        The runners of the calling front door (``fit_glm``: ``("fit_glm",)``; the estimators:
        None, all three).

    Returns
    -------
    SolverSpec or None
        The row (None for ``"auto"``).

    Raises
    ------
    ValueError
        Naming the solver and what it does not take (the problem's own rules first: the
        hinge loss has no primal coordinate descent, nor the L1 penalty a dual).
    """
    if loss == "hinge" and penalty == "l1":
        raise ValueError("penalty='l1' is not supported with loss='hinge'")
    if loss == "hinge" and dual is False:
        raise ValueError("loss='hinge' is solved in the dual only (dual=False unsupported)")
    if penalty == "elasticnet" and loss == "hinge":
        raise ValueError("penalty='elasticnet' is not supported with loss='hinge'")
    if penalty in ("l1", "elasticnet") and dual:
        raise ValueError(f"penalty={penalty!r} is solved in the primal only (dual=True not "
                         "supported)")
    names = solver_names(runner=runner)
    if not isinstance(name, str) or name not in names:
        raise ValueError(f"solver must be one of {list(names)}, got {name!r}")
    if comm:
        dist = solver_names(runner=runner, comm=True, auto=False)
        if name != AUTO and name not in dist:
            raise ValueError(f"comm= runs {_or(dist)}, not solver={name!r} (comm= needs solver "
                             f"in {list(dist + (AUTO,))})")
    if name == AUTO:
        return None
    spec = _SOLVERS[name]
    if loss is not None and loss not in spec.losses:
        raise ValueError(f"solver={name!r} {spec.what()}; it does not support the {loss} loss")
    if penalty not in spec.penalties:
        raise ValueError(f"solver={name!r} {spec.what()}; it does not support "
                         f"penalty={penalty!r}")
    if dual and "dual" not in spec.formulations:
        raise ValueError(f"solver={name!r} solves the primal only (dual=True is not supported)")
    if dual is False and "primal" not in spec.formulations:
        raise ValueError(f"solver={name!r} solves the dual only (dual=False is not supported)")
    if weighted and not spec.sample_weight and spec.comm_dual_weights and comm:
        if penalty != "l2" or dual is False:
            dual_ok = [n for n, s in _SOLVERS.items() if s.comm_dual_weights]
            ok = solver_names(sample_weight=True, comm=True, auto=False, runner=runner)
            raise ValueError(
                f"non-uniform sample_weight over comm= is taken by the dual of "
                f"{' / '.join(dual_ok)} (penalty='l2', dual=True) and by the rows that take "
                f"weights ({_or(ok)}); "
                f"solver={name!r} with penalty={penalty!r}, dual={dual!r} is its primal, "
                f"which takes none")
        return spec
    if weighted and not spec.sample_weight:
        ok = solver_names(sample_weight=True, auto=False, runner=runner)
        raise ValueError(f"solver={name!r} does not support non-uniform sample_weight; use "
                         f"{_or([repr(n) for n in ok])}")
    return spec


# ---------------------------------------------------------------------------------------------
# the rows

_CD = "roofline.glm._fit:run_cd"
_CD_INTERCEPT = "unregularised in the primal; a regularised constant feature in the dual"

register_solver(SolverSpec(
    "scd", _CD, CD_LOSSES, ("l2", "l1", "elasticnet"), ("primal", "dual"), intercept=_CD_INTERCEPT,
    summary="sequential stochastic coordinate descent (SDCA in the dual), deterministic for a "
            "seed"))
register_solver(SolverSpec(
    "tpa-scd", _CD, CD_LOSSES, ("l2", "l1", "elasticnet"), ("primal", "dual"),
    intercept=_CD_INTERCEPT,
    devices=("cpu", "gpu"),
    summary="n_jobs numba threads on disjoint coordinates against the shared vector, with "
            "adaptive damping"))
register_solver(SolverSpec(
    "cocoa", _CD, CD_LOSSES, ("l2", "l1"), ("primal", "dual"), comm=True,
    comm_dual_weights=True, intercept=_CD_INTERCEPT,
    summary="CoCoA+ over n_workers workers (threads, or the ranks of comm=)"))
register_solver(SolverSpec(
    "hcocoa", _CD, CD_LOSSES, ("l2", "l1"), ("primal", "dual"), comm=True,
    comm_dual_weights=True, intercept=_CD_INTERCEPT,
    summary="hierarchical CoCoA: n_nodes nodes of n_workers / n_nodes workers"))
register_solver(SolverSpec(
    "pure-block", _CD, losses_where(smooth=True, cd=True), ("l2", "l1"),
    comm=True,
    summary="Google's SCD over pure feature blocks, n_workers example shards (the primal)"))
register_solver(SolverSpec(
    "prox-newton", "roofline.glm._prox_newton:run_prox_newton",
    losses_where(smooth=True, cd=True),
    ("l1", "elasticnet"),
    problem="needs penalty='l1' or 'elasticnet' and the squared or logistic loss",
    summary="proximal Newton (newGLMNET, liblinear's L1 solver): coordinate descent on each "
            "second-order model, an Armijo line search, shrinking"))
register_solver(SolverSpec(
    "newton", "roofline.glm._fit:run_newton", SMOOTH_LOSSES, sample_weight=True, comm=True,
    problem=f"needs penalty='l2' and a smooth loss ({', '.join(SMOOTH_LOSSES)})",
    summary="trust-region Newton-CG on the primal (TRON), insensitive to the features' "
            "scaling"))
register_solver(SolverSpec(
    "cholesky", "roofline.glm._fit:run_cholesky", ("squared",), sample_weight=True,
    problem="solves ridge (loss='squared', penalty='l2', the primal)",
    summary="ridge by its normal equations, exact, for few features (Newton refines)"))
register_solver(SolverSpec(
    "vw-hybrid", "roofline.learners._vw:fit_vw_hybrid", losses_where(smooth=True, peer="vw"),
    comm=True,
    runner="estimator",
    summary="Vowpal Wabbit's AllReduce learner: an online ADAGrad pass, then L-BFGS"))
register_solver(SolverSpec(
    "lbfgs", None, GLM_LOSSES, sample_weight=True, runner="learner",
    summary="batch L-BFGS over full passes of the minibatch Learner"))
register_solver(SolverSpec(
    "adagrad", None, GLM_LOSSES, sample_weight=True, runner="learner", partial_fit=True,
    summary="ADAGrad over max_iter passes of minibatches of batch_size"))
register_solver(SolverSpec(
    "sgd", None, GLM_LOSSES, sample_weight=True, runner="learner", partial_fit=True,
    summary="SGD over max_iter passes of minibatches of batch_size"))
