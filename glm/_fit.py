"""Coordinate-descent solvers for generalized linear models: the front door.

:func:`fit_glm` validates the problem, picks the formulation (primal or dual) and runs one
of the solvers of the chain (see :mod:`._cd_problem` for the objective, written once, and the
map of the modules): the sequential and TPA-SCD solvers of :mod:`._scd`, or CoCoA+ /
hierarchical CoCoA / pure-block SCD of :mod:`._cocoa`.  The solver's settings are one
:class:`GLMSolverOptions` (the ``[solver]`` table of ``roofline train``'s TOML), or the same
names as keyword arguments.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from roofline.comm import Communicator
from roofline.gmat import Options, option
from roofline.kernels import LOSS_TABLE, cuda_ready, limit_blas_threads

from . import _losses, cd
from ._auto import LBFGS_AUTO_SCALE, choose_solver, hot_mass_of_counts
from ._cocoa import fit_distributed, fit_on_comm
from ._direct import solve_ridge
from ._newton import NEWTON_LOSSES, fit_newton
from ._problem import (
    GLMProblem,
    GLMResult,
    StallMonitor,
    Trace,
    check_X,
    comm_weights,
    mean_one_weights,
    positive,
    verbose_logging,
    warn_not_converged,
)
from ._registry import AUTO, check_solver, get_solver, solver_names, solvers
from ._scd import (
    TPA_DUAL_MAX_THREADS,
    n_hot_features,
    scd_dual,
    scd_dual_gpu,
    scd_primal,
    unorder,
)

#: The one-thread dual renumbers the features by frequency
#: (:func:`roofline.glm.cd.reorder_features`) only where at least this share of the stored
#: values lies in hot features (``learners._auto.hot_mass``): Criteo-like data (69%), not
#: hashed data (2^22 buckets: 3%, where the renumbering cost ~90 ms, as much as two sweeps
#: over 100k examples, and sped a sweep up by ~10%).  TPA-SCD always renumbers.  The same
#: test gates the dual's warm-up sweep (``warmup``).
REORDER_MIN_HOT_MASS = 0.3
#: ... and only with more features than this: a shared vector ``v`` of at most 32 KB sits in
#: the L1 cache whatever the numbering (breast cancer, 31 features: the renumbering was
#: ~0.15 ms of a 1-3 ms fit).
REORDER_MIN_FEATURES = 4096

__all__ = [
    "GLMSolverOptions",
    "GLMResult",
    "fit_glm",
    "run_cd",
    "run_cholesky",
    "run_newton",
]

logger = logging.getLogger(__name__)


@dataclass
class GLMSolverOptions(Options):
    """The settings of :func:`fit_glm`'s solvers (``[solver]`` in a training config).

    The problem itself (``loss``, ``alpha``, ``penalty``, ``l1_ratio``, ``fit_intercept``) and
    run-time
    objects (``random_state``, ``callback``, ``coef_init``, ``blocks``, ``comm_stats``,
    ``verbose``) are arguments of :func:`fit_glm`, not options.  Every field is documented
    at length under the keyword argument of the same name of :func:`fit_glm`.
    """

    solver: str = option("auto", "solver: a row of the registry (glm/_registry.py) that "
                                "fit_glm runs, or 'auto' (chosen from the data)", kind=str)
    tol: float = option(1e-6, "stop when the duality gap is below tol * |P| (relative)",
                        low=0.0, low_open=True)
    max_iter: int = option(1000, "maximum epochs (scd, tpa-scd, pure-block) or global rounds "
                                 "(cocoa, hcocoa)", low=1)
    dual: bool | None = option(None, "solve the dual (SDCA) or the primal; None: the dual "
                                     "(scd: with an unregularised intercept too), the primal "
                                     "for L1 and for tpa-scd with an intercept", kind=bool)
    n_jobs: int = option(1, "tpa-scd threads; default n_workers of cocoa / hcocoa / "
                            "pure-block", low=1)
    check_every: int | str = option("auto", "duality gap every this many iterations, or "
                                            "'auto' (after each pass's worth of steps)",
                                    kind=(int, str))
    tpa_mode: str = option("hogwild", "tpa-scd: unsynchronised threads, or per-thread "
                                      "replicas added at the end (deterministic)",
                           choices=("hogwild", "replica"))
    adaptive_damping: bool = option(True, "tpa-scd: discard a sub-epoch that does not "
                                          "improve the objective and halve the damping")
    damping: float = option(1.0, "tpa-scd: initial step multiplier", low=0.0, low_open=True)
    sub_epochs: int = option(1, "tpa-scd: objective checks (damping decisions) per epoch",
                             low=1)
    active_fraction: float = option(0.2, "scd / tpa-scd: fraction of the coordinates swept "
                                         "between full sweeps", low=0.0, high=1.0,
                                    low_open=True)
    full_every: int = option(6, "scd / tpa-scd: every this many sweeps visits all "
                                "coordinates", low=1)
    warmup: bool = option(True, "scd / tpa-scd dual: first sweep at a raised "
                                "regularisation (from 50,000 examples on)")
    n_workers: int | None = option(None, "cocoa / hcocoa / pure-block workers (None: n_jobs)",
                                   kind=int, low=1)
    n_nodes: int | None = option(None, "hcocoa: nodes (None: n_workers, flat CoCoA+)",
                                 kind=int, low=1)
    inner_rounds: int = option(4, "hcocoa: node rounds per global round", low=1)
    local_epochs: float = option(1.0, "cocoa / hcocoa: local passes over a worker's data per "
                                      "round", low=0.0, low_open=True)
    intercept_scaling: float | None = option(None, "dual: value of the constant feature that "
                                                  "carries a regularised intercept (liblinear); "
                                                  "None: the intercept is unregularised (scd), "
                                                  "1.0 where a solver regularises it (tpa-scd, "
                                                  "cocoa, hcocoa, the GPU)", kind=float, low=0.0,
                                             low_open=True)
    shrinking: bool = option(True, "scd / tpa-scd: partial sweeps skip the coordinates whose "
                                   "last step was zero (held at a bound)")
    batch_sweeps: bool = option(True, "scd dual on one thread: run the sweeps of small "
                                      "problems and of the hinge in batches between checks, "
                                      "with liblinear's shrinking for the hinge")
    stall_switch: bool = option(True, "scd / tpa-scd, smooth loss, L2: hand a run whose "
                                      "duality gap falls too slowly to newton")
    gtol: float | None = option(None, "newton / cholesky: also stop when the gradient's "
                                      "max-norm is below gtol (scikit-learn's sense of tol; "
                                      "bounds no suboptimality)", kind=float,
                                low=0.0, low_open=True)
    device: str = option("cpu", "where the solver runs: 'gpu' runs TPA-SCD of the dual on the "
                                "GPU (a registry row with 'gpu' in its devices)",
                         choices=("cpu", "gpu"))
    device_memory: float | None = option(None, "device='gpu': device bytes for the data; "
                                               "larger data are streamed by chunks (None: 80% "
                                               "of the free device memory)", kind=float,
                                         low=0.0, low_open=True)
    gpu_blocks: int | None = option(None, "device='gpu': thread blocks in flight, each "
                                          "stepping one example against a possibly stale "
                                          "shared vector (None: as many as the device holds)",
                                    kind=int, low=1)

    def _check(self, prefix):
        # the registry's rows are checked live (a row registered later is a valid choice)
        names = solver_names(runner="fit_glm")
        if self.solver not in names:
            raise ValueError(f"{prefix}option 'solver' must be one of {list(names)}, got "
                             f"{self.solver!r}")
        if isinstance(self.check_every, str) and self.check_every != "auto":
            raise ValueError(f"{prefix}option 'check_every' must be a positive integer or "
                             f"'auto', got {self.check_every!r}")
        if isinstance(self.check_every, int) and self.check_every < 1:
            raise ValueError(f"{prefix}option 'check_every' must be a positive integer or "
                             f"'auto', got {self.check_every!r}")


_OPTION_NAMES = frozenset(GLMSolverOptions.__dataclass_fields__)


def _resolve_dual(dual, loss_code, l1, fit_intercept, solver, intercept_scaling=None):
    """Whether ``solver`` solves the dual (the problem already passed
    :func:`~roofline.glm._registry.check_solver`)."""
    formulations = get_solver(solver).formulations
    if "dual" not in formulations:
        return False
    if "primal" not in formulations or not LOSS_TABLE[loss_code].smooth:
        return True
    if l1:
        return False
    if dual is None:
        # the dual (SDCA, Snap ML's default) usually converges in fewer epochs; with an
        # intercept only where it stays unregularised (the one-thread dual's FreeIntercept):
        # elsewhere the primal keeps it so
        return not fit_intercept or _free_dual_intercept(solver, fit_intercept,
                                                         intercept_scaling)
    return bool(dual)


def _free_dual_intercept(solver, fit_intercept, intercept_scaling):
    """Whether ``solver``'s dual keeps an unregularised intercept (``scd`` on one thread, the
    CPU, without ``intercept_scaling``) rather than liblinear's regularised constant feature."""
    return bool(fit_intercept) and solver == "scd" and intercept_scaling is None


def _scaling(opts):
    """The constant feature's value for the solvers that regularise the intercept in the dual
    (``intercept_scaling``, 1 when unset)."""
    return 1.0 if opts.intercept_scaling is None else opts.intercept_scaling


def fit_glm(
    X,
    y,
    *,
    loss,
    alpha,
    penalty="l2",
    options=None,
    fit_intercept=True,
    random_state=None,
    verbose=0,
    blocks=None,
    comm_stats=None,
    coef_init=None,
    callback=None,
    comm=None,
    sample_weight=None,
    intercept_init=None,
    l1_ratio=None,
    **solver_options,
):
    """Fit a GLM by coordinate descent; see the module docstring for the exact objective.

    Parameters
    ----------
    X : CSC matrix or ndarray, shape (n_features, n_examples)
        Examples as columns (the project layout).  scikit-learn users: pass ``X_sk.T.tocsc()``
        (the learners' estimators do this for you).
    y : array, shape (n_examples,)
        Targets (``loss="squared"``) or binary labels in {-1, 1} or {0, 1}.
    loss : {"squared", "logistic", "hinge"}
    alpha : float
        Regularisation strength in *our* scaling (mean loss + ``alpha * R(w)``); convert
        scikit-learn's / snapml's parameters with :func:`roofline.glm.alpha_from_peer`.
    penalty : {"l2", "l1", "elasticnet"}
        ``"elasticnet"``: ``R(w) = l1_ratio * ||w||_1 + (1 - l1_ratio) * ||w||^2 / 2``
        (scikit-learn's parametrisation), solved by the primal coordinate descent of ``scd``
        and ``tpa-scd`` (``auto`` runs ``scd``; the other solvers raise), whose coordinate
        step is the closed-form prox ``soft(h w - g, lam1) / (h + lam2)``; its duality gap is
        exact (the penalty's conjugate ``sum_j soft(u_j, lam1)^2 / (2 lam2)`` is finite), so
        ``tol`` means the same relative suboptimality as for l1 and l2.
    options : GLMSolverOptions, optional
        The solver's settings: the arguments below that are fields of :class:`GLMSolverOptions`
        (all but ``fit_intercept``, ``random_state``, ``verbose``, ``blocks``, ``comm_stats``,
        ``coef_init`` and ``callback``).  Keyword arguments of the same names override its fields
        (``fit_glm(X, y, loss=..., alpha=..., options=opts, tol=1e-8)`` runs ``opts`` with
        ``tol=1e-8``); without ``options`` they override :class:`GLMSolverOptions`' defaults, which
        are the defaults shown here.  An unknown keyword raises ``TypeError``.
    solver : str
        A row of the solver registry that ``fit_glm`` runs (:mod:`roofline.glm._registry`:
        ``"scd"``, ``"tpa-scd"``, ``"cocoa"``, ``"hcocoa"``, ``"pure-block"``, ``"newton"``,
        ``"cholesky"``), or ``"auto"``.  ``scd``: sequential stochastic coordinate descent
        (deterministic for a seed).
        ``newton``: trust-region Newton-CG on the primal (TRON; smooth losses with the L2
        penalty, :func:`roofline.glm._newton.fit_newton`), insensitive to the features'
        scaling and correlation.  ``cholesky``: ridge (``loss="squared"``, L2) by its normal
        equations, exact, for at most 2048 features
        (:func:`roofline.glm._direct.fit_cholesky`; Newton refines the rare solution
        that rounding leaves short of ``tol``).  ``auto`` (the default): chosen from the data
        by the measured rule of ``glm/_auto.py`` (``cholesky`` for ridge with at most
        1024 features, ``newton`` for the other smooth L2 problems except large, sparse,
        strongly regularised ones, which go to the dual ``scd``; ``scd`` for L1 and the
        hinge; ``cocoa`` with ``comm``); the choice is logged and kept in
        ``result.info["auto_reason"]``, the solver run in ``result.solver``.
        ``tpa-scd``: ``n_jobs`` numba threads on disjoint coordinates, asynchronously against the
        shared vector, with adaptive damping.  ``cocoa``: CoCoA+ over ``n_workers`` simulated
        workers (threads, in-process communicator).  ``hcocoa``: hierarchical CoCoA over
        ``n_nodes`` nodes of ``n_workers / n_nodes`` workers, ``inner_rounds`` node rounds per
        global round.  ``pure-block``: Google's SCD over pure feature blocks, ``n_workers``
        example shards.
    n_jobs : int
        Threads (``tpa-scd``; its dual in the default ``hogwild`` mode uses at most 2, with a
        warning: more overshoot, see ``_cd_solvers.TPA_DUAL_MAX_THREADS``); default number of
        workers for ``cocoa``/``hcocoa``/``pure-block``.
    tol : float
        Stop when the duality gap is below ``tol * |P|`` (relative).
    max_iter : int
        Maximum epochs (``scd``, ``tpa-scd``, ``pure-block``) or global rounds (CoCoA).  A
        solver that stops there without meeting ``tol`` emits
        :class:`sklearn.exceptions.ConvergenceWarning` (not when ``callback`` stopped it).
    dual : bool or None
        Solve the dual (SDCA, coordinates = examples) or the primal (coordinates = features).
        ``None``: the dual, with or without an intercept (``scd``'s dual keeps the intercept
        unregularised, as the primal does); the primal for ``tpa-scd`` with an intercept; the
        hinge loss is dual only, the l1 penalty primal only.
    fit_intercept : bool
        Fit an unregularised intercept (every solver but the dual of ``tpa-scd``, ``cocoa``,
        ``hcocoa`` and the GPU, which regularise it as a constant feature: see
        ``intercept_scaling``).  ``scd``'s dual holds the intercept fixed through each sweep and
        moves it between them (:class:`roofline.glm._scd.FreeIntercept`); its certificate is
        the duality gap of the problem with the intercept at a dual point whose variables sum
        to zero (:meth:`roofline.glm._problem.GLMProblem.dual_certificate`).
    intercept_scaling : float or None
        liblinear's intercept in the dual: a constant feature of this value whose weight is
        regularised as the others (another problem: the intercept is shrunk towards 0).
        ``None`` (the default): ``scd``'s dual keeps the intercept unregularised; the other
        dual solvers use 1.
    l1_ratio : float, optional
        ``penalty="elasticnet"``'s mixing parameter in ``[0, 1]`` (required there, refused
        with the other penalties): 1 is the l1 problem, 0 the l2 one (both then still run
        the primal coordinate descent).
    random_state : None, int or numpy Generator
        Seeds the per-epoch coordinate permutations.
    check_every : int or "auto"
        Compute the duality gap every this many iterations.  ``"auto"`` (``scd``, ``tpa-scd``;
        ``1`` for the others): once the sweeps since the last check have made one step per
        coordinate, i.e. after every full sweep and every ``1 / active_fraction`` partial
        sweeps; a check costs about a pass over the data, as much as a few partial sweeps.
    verbose : int
        ``>= 1``: log every check (iteration, objective, gap, time) at level INFO; when logging
        is not configured the lines go to stderr (a terminal or not), and a progress bar is
        shown on a terminal.
    tpa_mode : {"hogwild", "replica"}
        ``hogwild``: the threads run without synchronisation (the primal's add into the one
        shared vector, which is re-synchronised exactly after each sub-epoch; the dual's work
        on per-thread replicas whose frequent features they refresh with the others' changes
        every few thousand steps, the rest merged at the end of the sub-epoch, so that no
        update is lost, see :func:`roofline.glm.cd.dual_tpa_split`);
        ``replica``: each thread works against its own copy, and the copies' changes are added
        at the end of the sub-epoch (deterministic).
    adaptive_damping : bool
        Snap ML's rule for TPA-SCD: a sub-epoch that does not improve the objective is discarded
        and the damping halved.
    damping : float
        Initial step multiplier for TPA-SCD.
    sub_epochs : int
        TPA-SCD checks the objective this many times per epoch.
    active_fraction : float in (0, 1]
        ``scd``/``tpa-scd``: between full sweeps over the coordinates (examples in the dual,
        features in the primal), sweep only this fraction of them, the ones whose last step was
        largest (the coordinates still moving; on Criteo-like data a quarter of the examples
        holds ~90% of the dual's duality gap), in a fresh random order.  Every step is still an
        exact (dual) or Newton (primal) coordinate step, and the full sweeps keep SDCA's
        convergence; on Criteo-like data this reaches a given objective ~1.3-1.8x sooner in the
        dual (1M examples) and ~2x in the primal (200k).  ``1`` sweeps all coordinates every
        time.
    full_every : int
        Every this many sweeps (from the first) visits all coordinates.  ``max_iter`` and
        ``check_every`` count sweeps, partial ones included.
    n_workers, n_nodes, inner_rounds, local_epochs
        CoCoA parameters (``local_epochs`` = local passes over a worker's data per round).
        ``n_workers`` (default ``n_jobs``) may not exceed what is partitioned over the
        workers: the examples (the dual, ``pure-block``) or the features (the primal).
    blocks : array of int, shape (n_features,), optional
        Pure-block assignment of each feature (``pure-block``); computed greedily when omitted.
    comm_stats : dict, optional
        Filled with communication counts (CoCoA, pure-block).
    coef_init : array, optional
        Warm start for the primal solvers.
    callback : callable, optional
        ``callback(iteration, coef, intercept)`` at every check of ``scd``/``tpa-scd`` (its
        time counts as check time, not solver time); ``coef`` is a live view, copy it to keep.
        Returning ``True`` stops the solver (``converged`` stays ``False``).
    comm : roofline.comm.Communicator, optional
        Run ``cocoa``, ``hcocoa`` or ``pure-block`` with this process as one rank of ``comm``
        (:func:`roofline.comm.from_environment`, or one rank of :func:`roofline.comm.run`).
        Each rank passes its own shard: examples (its columns of ``X`` and entries of ``y``)
        for the dual and ``pure-block``; for the primal, the ``r``-th block of features (rows
        of ``X``) with all of ``y``, the coefficients being the blocks in rank order.  The
        nodes of ``hcocoa`` are the ranks, each running ``n_workers / comm.size`` worker
        threads.  Every rank returns the same coefficients, trace and convergence;
        ``dual_coef`` holds the rank's own dual variables.
    warmup : bool
        ``scd``/``tpa-scd`` dual: run the first sweep (from ``alpha = 0``) at a larger
        regularisation, enough to bring the mean curvature of a coordinate step
        ``||x_i||^2 / (n * alpha)`` down to 2 (at most 8 times ``alpha``; no change where it is
        already below), from 50,000 examples on and where some features are hot
        (:data:`REORDER_MIN_HOT_MASS`): there the plain first sweep overshoots on the shared
        features.  The optimum is the same; on Criteo-like data (1M examples, C = 1) it
        reaches 1e-4 relative suboptimality ~10% sooner; on a few thousand examples it cost
        1-4 sweeps (hence the threshold), and on hashed data (no hot feature) it cost
        1.2-1.3x at C = 1 / 100.  ``info["warmup"]`` says whether it ran.
    shrinking : bool
        ``scd``/``tpa-scd``: the partial sweeps between full ones (``active_fraction < 1``)
        also skip every coordinate whose last step was exactly zero: hinge-loss dual
        variables held at a bound of their box, L1 weights held at zero (liblinear's
        shrinking, glmnet's active set).  The full sweeps visit them again.
    batch_sweeps : bool
        ``scd`` on the dual (one thread, ``check_every="auto"``), on problems of at most 2^21
        stored values and always for the hinge loss: the sweeps run in one kernel call until
        they have read 2^18 stored values (at least a sweep's worth), then the duality gap is
        checked (:func:`roofline.glm.cd.dual_sweeps`; a call per sweep costs ~50 us,
        the whole sweep on a few hundred examples).  Hinge sweeps shrink as liblinear's
        do: an example held at a bound of its box whose projected gradient says it stays
        there leaves the sweeps until the others meet the projected-gradient tolerance, then
        all come back (``shrinking=False`` keeps them all).  ``active_fraction`` and
        ``full_every`` do not apply there: every sweep visits all active examples.  Measured
        (scikit-learn's breast cancer, hinge, C = 1): 392 sweeps, 0.036 s to a relative
        suboptimality of 1e-4 without, 0.0055 s with.
    stall_switch : bool
        ``scd``/``tpa-scd`` on a smooth loss with the L2 penalty (and no regularised
        intercept in the dual): when the duality gap's recent rate predicts more than ~40
        further checks to ``tol`` (:class:`~roofline.glm._problem.StallMonitor`), the run stops and
        its primal point warm-starts the trust-region Newton solver, which finishes the fit.
        The result then has ``info["stall_switch"]`` (the iteration and the predicted checks),
        ``solver`` the CD solver, the trace of both runs, ``dual_coef=None`` and
        ``dual=False``.
    sample_weight : array, shape (n_examples,), optional
        Example weights (the weighted mean loss), for the solvers that take them (``newton``,
        ``cholesky``, and with ``comm`` the dual of ``cocoa`` / ``hcocoa``: weighted SDCA,
        ``dual=None`` then meaning the dual); all-equal weights are the unweighted problem,
        which every solver takes.  With ``comm``, each rank passes its examples' weights:
        they are scaled to mean one by the sum and the count over every rank, and are
        uniform only when equal on every rank (a rank's may all be zero).
    gtol : float, optional
        ``newton`` / ``cholesky``: also stop when the gradient's max-norm is below ``gtol``
        (scikit-learn's sense of ``tol``, which bounds no suboptimality; the estimators no
        longer pass it: their ``tol`` is the certified gap).
    device : {"cpu", "gpu"}
        ``"gpu"``: TPA-SCD of the dual on the GPU (Snap ML's twice-parallel asynchronous SCD:
        a thread block per example, the shared vector updated with atomic adds,
        :func:`~roofline.glm._scd.scd_dual_gpu`), for the registry's rows with ``"gpu"`` in
        their ``devices`` (``solver="auto"`` takes the first that solves the problem), the
        losses of coordinate descent, the L2 penalty, the dual (``dual=False`` is refused),
        without ``comm`` or non-uniform ``sample_weight``.  ``X`` and ``y`` stay on the host;
        they are copied to the device (or streamed, see ``device_memory``) and the result comes
        back as numpy.  Convergence is the CPU dual's: the same duality gap, the same relative
        ``tol``, checked on the host every ``check_every`` epochs (``"auto"``: every epoch);
        ``adaptive_damping`` discards epochs that lowered the dual objective and halves
        ``damping``; ``active_fraction``, ``shrinking``, ``warmup``, ``batch_sweeps`` and the
        stall switch do not apply.  ``result.info["device"]`` is ``"gpu"``.  Runs under numba's
        CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) as on a device; without either, a
        ``RuntimeError`` names the missing device.
    device_memory : float, optional
        ``device="gpu"``: device bytes the data may take beside the dual state (default: 80% of
        the free device memory).  Data that do not fit are cut into chunks of examples streamed
        every epoch through a double-buffered pipeline (pinned host buffers, copies on a second
        stream while the previous chunk trains: :class:`roofline.kernels.DeviceChunkStream`);
        the dual variables and the shared vector stay on the device.  ``result.info``:
        ``"streamed"``, ``"n_chunks"``, ``"bytes_streamed"``.
    gpu_blocks : int, optional
        ``device="gpu"``: thread blocks in flight (the launch's grid, striding over the
        examples; default: as many as the device holds at once).  Each reads the shared vector
        while up to ``gpu_blocks - 1`` others' steps are pending, so the steps use mini-batch
        SDCA's safe norms for that many (:func:`roofline.kernels.eso_colsq`: a feature counts
        as often as the examples sharing it allow, up to ``gpu_blocks`` times), which the
        adaptive rule relaxes while the dual objective keeps rising; fewer blocks take bolder
        steps on the frequent features, more blocks keep the device busier.
        ``result.info``: ``"concurrency"``, ``"tau"`` (the norms' final count).
    intercept_init : float, optional
        Warm start of the intercept (with ``fit_intercept``): the primal ``scd`` / ``tpa-scd``
        and ``newton`` start from it, ``scd``'s dual holds it through its first sweeps
        (default: the intercept of the model without features, ``mean(y)`` or the log-odds);
        the other solvers (the exact ``cholesky``, the duals with a constant feature) ignore
        it.
    **solver_options
        The :class:`GLMSolverOptions` fields listed above (``tol``, ``max_iter``,
        ``n_workers``, ...), given as keywords; they override ``options``.

    Returns
    -------
    GLMResult

    Raises
    ------
    ValueError, TypeError
        On bad input, naming the argument.
    """
    t_start = time.perf_counter()
    unknown = sorted(set(solver_options) - _OPTION_NAMES)
    if unknown:
        raise TypeError(f"fit_glm() got unexpected keyword argument(s) {unknown}; solver "
                        f"options are {sorted(_OPTION_NAMES)}")
    if options is not None and not isinstance(options, GLMSolverOptions):
        raise TypeError(f"options must be a GLMSolverOptions, got {type(options).__name__}")
    settings = {**(options or GLMSolverOptions()).to_dict(), **solver_options}
    loss = _losses.resolve_loss(loss, allowed=_losses.CD_LOSSES + _fit_glm_losses())
    if penalty not in ("l2", "l1", "elasticnet"):
        raise ValueError(f"penalty must be 'l2', 'l1' or 'elasticnet', got {penalty!r}")
    l1_ratio = _check_l1_ratio(l1_ratio, penalty)
    if settings["tpa_mode"] not in ("hogwild", "replica"):
        raise ValueError(f"tpa_mode must be 'hogwild' or 'replica', got "
                         f"{settings['tpa_mode']!r}")
    if comm is not None:
        check_solver(settings["solver"], loss=loss, penalty=penalty, dual=settings["dual"],
                     comm=True)  # the scope, before the first collective
        if not isinstance(comm, Communicator):
            raise TypeError(f"comm must be a roofline.comm.Communicator, got "
                            f"{type(comm).__name__}")
        # the scaling and the uniformity over every rank (collective): weights that differ
        # only between the ranks are not the unweighted problem, and a rank's may sum to zero
        sample_weight = comm_weights(comm, sample_weight, np.shape(y)[0])
    elif isinstance(sample_weight, np.ndarray) or sample_weight is not None:
        sw = mean_one_weights(sample_weight, np.shape(y)[0])
        if np.all(sw == sw[0]):
            sample_weight = None  # the unweighted problem
    weighted = sample_weight is not None
    settings["dual"] = _checked_dual(settings["solver"], loss=loss, penalty=penalty,
                                     dual=settings["dual"], comm=comm, weighted=weighted)
    alpha = positive(alpha, "alpha")
    opts = _check_options(settings)
    # dense X stays dense for the solvers with a dense path (newton, cholesky); the CD
    # solvers get CSC below
    X = check_X(X, allow_no_examples=comm is not None, keep_dense=True)
    y = _losses.check_labels(y, loss, margin=True, single_class_ok=comm is not None)
    if y.shape[0] != X.shape[1]:
        raise ValueError(
            f"y has {y.shape[0]} entries but X has {X.shape[1]} examples (columns); X must be "
            "(n_features, n_examples)"
        )
    if coef_init is not None:
        coef_init = np.asarray(coef_init, dtype=np.float64).ravel()
        if coef_init.shape[0] != X.shape[0]:
            raise ValueError(f"coef_init has {coef_init.shape[0]} entries but X has "
                             f"{X.shape[0]} features (rows)")
        if not np.isfinite(coef_init).all():
            raise ValueError("coef_init has non-finite entries")
    start = {}
    if intercept_init is not None:
        numeric = (isinstance(intercept_init, (int, float, np.integer, np.floating))
                   and not isinstance(intercept_init, bool))
        if not numeric or not np.isfinite(intercept_init):
            raise ValueError(f"intercept_init must be a finite number, got {intercept_init!r}")
        if fit_intercept:
            start["intercept_init"] = float(intercept_init)
    if l1_ratio is not None:
        start["l1_ratio"] = l1_ratio  # only scd / tpa-scd take it (check_solver)
    reason = None
    if opts.device == "gpu":
        opts, reason = _gpu_options(opts, loss=loss, penalty=penalty, comm=comm,
                                    weighted=weighted)
    if opts.solver == AUTO:
        chosen, reason = choose_solver(X, loss=loss, penalty=penalty, alpha=alpha,
                                       fit_intercept=bool(fit_intercept), n_jobs=opts.n_jobs,
                                       comm=comm, dual=opts.dual, sample_weight=sample_weight)
        logger.info("solver='auto' runs %r: %s", chosen, reason)
        dual = _checked_dual(chosen, loss=loss, penalty=penalty, dual=opts.dual, comm=comm,
                             weighted=weighted)
        opts = GLMSolverOptions(**{**opts.to_dict(), "solver": chosen, "dual": dual})
    res = get_solver(opts.solver).load()(
        X, y, loss=loss, alpha=alpha, penalty=penalty, fit_intercept=bool(fit_intercept),
        options=opts, sample_weight=sample_weight, coef_init=coef_init, callback=callback,
        comm=comm, verbose=verbose, random_state=random_state, blocks=blocks,
        comm_stats=comm_stats, **start)
    if reason is not None:
        res.info["auto_reason"] = reason
    res.time = time.perf_counter() - t_start
    return res


def _check_l1_ratio(l1_ratio, penalty):
    """``l1_ratio`` checked against ``penalty``: a float in ``[0, 1]`` with
    ``"elasticnet"`` (required there), None otherwise (ValueError naming the argument)."""
    if penalty != "elasticnet":
        if l1_ratio is not None:
            raise ValueError(f"l1_ratio is only used with penalty='elasticnet', got "
                             f"l1_ratio={l1_ratio!r} with penalty={penalty!r}")
        return None
    if l1_ratio is None:
        raise ValueError("penalty='elasticnet' needs l1_ratio (a number in [0, 1])")
    numeric = (isinstance(l1_ratio, (int, float, np.integer, np.floating))
               and not isinstance(l1_ratio, bool))
    if not numeric or not 0.0 <= float(l1_ratio) <= 1.0:  # NaN fails the comparison
        raise ValueError(f"l1_ratio must be a number in [0, 1], got {l1_ratio!r}")
    return float(l1_ratio)


def _gpu_solver_names(*, loss=None, penalty=None):
    """The registry's ``fit_glm`` rows that run on the GPU (``"gpu"`` in their ``devices``)
    for ``loss`` and ``penalty`` (None: any), in registration order."""
    return tuple(s.name for s in solvers(runner="fit_glm", loss=loss, penalty=penalty,
                                         formulation="dual") if "gpu" in s.devices)


def _gpu_options(opts, *, loss, penalty, comm, weighted):
    """``(options, reason)`` for ``device="gpu"``: the problem checked against what the GPU
    solver takes (ValueError naming the argument), ``solver="auto"`` resolved to the first GPU
    row, ``dual=True``; a RuntimeError naming the missing device where CUDA cannot run."""
    rows = _gpu_solver_names()
    if comm is not None:
        raise ValueError("device='gpu' runs in one process: comm= is not supported there")
    if weighted:
        raise ValueError("device='gpu' does not take non-uniform sample_weight")
    if penalty != "l2":
        raise ValueError(f"device='gpu' solves the dual, which needs penalty='l2', got "
                         f"{penalty!r}")
    if opts.dual is False:
        raise ValueError("device='gpu' solves the dual: dual=False is not supported there")
    ok = _gpu_solver_names(loss=loss, penalty=penalty)
    reason = None
    solver = opts.solver
    if solver == AUTO:
        if not ok:
            raise ValueError(f"device='gpu': no solver runs loss={loss!r} on the GPU (rows "
                             f"with 'gpu' in their devices: {list(rows)})")
        solver = ok[0]
        reason = f"device='gpu': the first registry row that runs on the GPU ({solver!r})"
        logger.info("solver='auto' with device='gpu' runs %r", solver)
    elif solver not in ok:
        raise ValueError(f"solver={solver!r} does not run on the GPU with loss={loss!r}; "
                         f"device='gpu' takes solver in {list(ok) + [AUTO]}")
    if not cuda_ready():
        raise RuntimeError(
            "device='gpu' needs a CUDA device, and none is usable here (numba.cuda finds no "
            "GPU); install 'roofline[gpu]' on a machine with an NVIDIA GPU, set "
            "NUMBA_ENABLE_CUDASIM=1 before numba is imported to run the simulator, or use "
            "device='cpu'")
    return GLMSolverOptions(**{**opts.to_dict(), "solver": solver, "dual": True}), reason


def _checked_dual(solver, *, loss, penalty, dual, comm, weighted):
    """``dual`` after :func:`check_solver`: True (instead of None) for non-uniform weights over
    ``comm=`` with a row whose dual alone takes them (``comm_dual_weights``) and L2."""
    if (weighted and comm is not None and dual is None and penalty == "l2" and solver != AUTO
            and get_solver(solver).comm_dual_weights):
        dual = True  # the dual takes the weights, the primal does not
    check_solver(solver, loss=loss, penalty=penalty, dual=dual, comm=comm is not None,
                 weighted=weighted)
    return dual


def _fit_glm_losses():
    """The losses of the solvers ``fit_glm`` runs (the registry's rows), beyond CD's."""
    from ._registry import solvers

    return tuple(sorted({x for s in solvers(runner="fit_glm") for x in s.losses}
                        - set(_losses.CD_LOSSES)))


def _check_options(settings):
    """The solver's settings (a dict of :class:`GLMSolverOptions` fields) checked, with the
    messages that name the argument; the :class:`GLMSolverOptions`."""
    settings = dict(settings)
    settings["tol"] = positive(settings["tol"], "tol")
    for name in ("max_iter", "n_jobs", "sub_epochs", "full_every", "inner_rounds"):
        settings[name] = positive(settings[name], name, integer=True)
    for name in ("n_workers", "n_nodes"):
        if settings[name] is not None:
            settings[name] = positive(settings[name], name, integer=True)
    check_every = settings["check_every"]
    if isinstance(check_every, str):
        if check_every != "auto":
            raise ValueError(f"check_every must be a positive integer or 'auto', got "
                             f"{check_every!r}")
    else:
        settings["check_every"] = positive(check_every, "check_every", integer=True)
    settings["active_fraction"] = positive(settings["active_fraction"], "active_fraction")
    if settings["active_fraction"] > 1:
        raise ValueError(f"active_fraction must be in (0, 1], got "
                         f"{settings['active_fraction']!r}")
    for name in ("damping", "local_epochs"):
        settings[name] = positive(settings[name], name)
    if settings["intercept_scaling"] is not None:
        settings["intercept_scaling"] = positive(settings["intercept_scaling"],
                                                 "intercept_scaling")
    if settings["gtol"] is not None:
        settings["gtol"] = positive(settings["gtol"], "gtol")
    return GLMSolverOptions(**settings)  # the remaining checks (types, dual)


def run_newton(X, y, *, loss, alpha, penalty, fit_intercept, options, sample_weight=None,
               coef_init=None, callback=None, comm=None, verbose=0, random_state=None,
               blocks=None, comm_stats=None, intercept_init=0.0):
    """The registry's ``newton`` row: :func:`roofline.glm._newton.fit_newton` (the front
    door's signature; see :mod:`roofline.glm._registry`).

    Returns
    -------
    GLMResult
    """
    kw = _weights(sample_weight, options)
    if comm is not None:  # a row with comm=True (the registry refuses comm= otherwise)
        kw["comm"] = comm
    return fit_newton(X, y, loss=loss, alpha=alpha, fit_intercept=fit_intercept,
                      tol=options.tol, max_iter=options.max_iter, coef_init=coef_init,
                      intercept_init=intercept_init, verbose=verbose, callback=callback,
                      n_jobs=options.n_jobs, **kw)  # fit_newton warns itself


def run_cholesky(X, y, *, loss, alpha, penalty, fit_intercept, options, sample_weight=None,
                 coef_init=None, callback=None, comm=None, verbose=0, random_state=None,
                 blocks=None, comm_stats=None, intercept_init=None):
    """The registry's ``cholesky`` row: :func:`roofline.glm._direct.solve_ridge` (the front
    door's signature).

    Returns
    -------
    GLMResult
    """
    return solve_ridge(X, y, alpha=alpha, fit_intercept=fit_intercept, tol=options.tol,
                       max_iter=options.max_iter, verbose=verbose, n_jobs=options.n_jobs,
                       **_weights(sample_weight, options))


def _weights(sample_weight, options):
    """The keywords ``sample_weight`` / ``gtol`` where given (the calls stay those of the
    unweighted, tol-only fits otherwise)."""
    kw = {}
    if sample_weight is not None:
        kw["sample_weight"] = sample_weight
    if options.gtol is not None:
        kw["gtol"] = options.gtol
    return kw


def run_cd(X, y, *, loss, alpha, penalty, fit_intercept, options, sample_weight=None,
           coef_init=None, callback=None, comm=None, verbose=0, random_state=None, blocks=None,
           comm_stats=None, intercept_init=None, l1_ratio=None):
    """The registry's coordinate-descent rows (``scd``, ``tpa-scd``, ``cocoa``, ``hcocoa``,
    ``pure-block``; the front door's signature): the chosen formulation, the stall switch to
    Newton, the :class:`ConvergenceWarning`.  ``l1_ratio``: ``penalty="elasticnet"``'s
    (``scd`` / ``tpa-scd``'s primal; checked by :func:`fit_glm`).

    Returns
    -------
    GLMResult
    """
    opts = options
    loss_code = _losses.LOSS_CODES[loss]
    elastic = penalty == "elasticnet"
    if elastic and (opts.solver not in ("scd", "tpa-scd") or comm is not None):
        raise ValueError(f"penalty='elasticnet' is solved by the primal of solver 'scd' or "
                         f"'tpa-scd' in one process, not solver={opts.solver!r}"
                         + (" over comm=" if comm is not None else ""))
    if elastic and l1_ratio is None:
        raise ValueError("penalty='elasticnet' needs l1_ratio (a number in [0, 1])")
    # l1: the primal only (the l1 penalty and the elastic net, whose l1_ratio = 1 is l1)
    l1 = penalty == "l1" or elastic
    if not sp.issparse(X):
        X = cd.csc_from_dense(X)
    monitor = None
    if (opts.stall_switch and opts.device == "cpu" and opts.solver in ("scd", "tpa-scd")
            and comm is None and not l1
            and loss in NEWTON_LOSSES
            and not (fit_intercept and _resolve_dual(opts.dual, loss_code, l1, fit_intercept,
                                                     opts.solver, opts.intercept_scaling)
                     and not _free_dual_intercept(opts.solver, fit_intercept,
                                                  opts.intercept_scaling))):
        monitor = StallMonitor(opts.tol)
    if comm is not None:
        _check_scale_on_comm(comm, X, opts.solver, opts.solver == "pure-block" or _resolve_dual(
            opts.dual, loss_code, l1, fit_intercept, opts.solver))
    with verbose_logging(verbose):
        res = _fit(X, y, loss_code, l1, alpha, penalty, fit_intercept, opts,
                   random_state=random_state, verbose=verbose, blocks=blocks,
                   comm_stats=comm_stats, coef_init=coef_init, callback=callback, comm=comm,
                   monitor=monitor, sample_weight=sample_weight if comm is not None else None,
                   intercept_init=intercept_init, l1_ratio=l1_ratio if elastic else None)
    if monitor is not None and monitor.fired_at is not None:
        res = _switch_to_newton(res, monitor, X, y, loss, alpha, fit_intercept, opts,
                                verbose, callback)
    if (not res.converged and not res.info.get("stopped_by_callback", False)
            and "stall_switch" not in res.info):  # fit_newton warned itself
        logger.info("%s did not reach tol=%g in %d iterations (gap %.3e)", opts.solver, opts.tol,
                    res.n_iter, res.gap)
        warn_not_converged(opts.solver, opts.tol, res.n_iter, res.gap,
                           float(res.objective[-1]) if res.objective.size else float("nan"),
                           stacklevel=4)  # fit_glm's caller
    return res


def _check_scale_on_comm(comm, X, solver, by_examples):
    """Refuse, on every rank alike, a feature whose largest ``|value|`` exceeds
    :data:`~roofline.glm.LBFGS_AUTO_SCALE` in a coordinate-descent fit over ``comm``.

    Such a feature (``1e30`` times a unit-scale one) is all but free of the penalty: the
    problem has a direction the regularisation does not bound, which dual coordinate descent
    cannot follow and where the duality gap means nothing, so CoCoA+ returned an all-zero
    model (chance accuracy, where the one-process L-BFGS fit reached 0.74).  Rescaling the feature
    would change the problem (the penalty is not scale-invariant), so the fit stops with a
    message naming the feature.  The distributed Newton solver (a smooth loss with the L2
    penalty, ``solver="auto"``'s choice there) copes, as L-BFGS does in one process.

    ``by_examples``: the ranks hold examples (the same features); else the ``r``-th block of
    features (the primal), numbered in rank order.  One ``allgather`` of three numbers.
    """
    nnz = int(X.indptr[-1])
    data = np.abs(X.data[:nnz])
    p = int(np.argmax(data)) if nnz else -1
    big = float(data[p]) if nnz else 0.0
    mine = (big, int(X.indices[p]) if nnz else -1, X.shape[0])
    every = comm.allgather(mine)
    r = max(range(len(every)), key=lambda k: every[k][0])
    big, feat = every[r][0], every[r][1]
    if not big > LBFGS_AUTO_SCALE:
        return
    if not by_examples:
        feat += sum(e[2] for e in every[:r])
    raise ValueError(
        f"X's feature {feat} has a value of {big:.3g} (above 2^20 = {LBFGS_AUTO_SCALE:.0f}): "
        f"{solver} over comm= cannot fit it (the penalty barely acts on such a feature, so "
        "coordinate descent does not converge and its duality gap means nothing; it would "
        "return a wrong model). Rescale the feature (e.g. divide it by its largest |value|, "
        "as scikit-learn's MaxAbsScaler does: the penalty then acts on it as on the others), "
        "or, for a smooth loss with penalty='l2', use solver='newton', which copes")


def _switch_to_newton(res, monitor, X, y, loss, alpha, fit_intercept, opts, verbose, callback):
    """Finish a stalled CD run ``res`` with the trust-region Newton solver from its primal
    point; the two runs' traces joined."""
    logger.info("%s: the duality gap falls too slowly (%.0f more checks predicted at iteration "
                "%d): handing over to newton", opts.solver, monitor.predicted, monitor.fired_at)
    nres = fit_newton(X, y, loss=loss, alpha=alpha, fit_intercept=fit_intercept, tol=opts.tol,
                      max_iter=opts.max_iter, coef_init=res.coef, intercept_init=res.intercept,
                      verbose=verbose, callback=callback, n_jobs=opts.n_jobs)
    info = dict(res.info)
    info["stopped_by_callback"] = nres.info["stopped_by_callback"]
    info["stall_switch"] = {"at_iter": int(monitor.fired_at),
                            "predicted_checks": float(monitor.predicted),
                            "newton_iter": int(nres.n_iter), "cg_iter": nres.info["cg_iter"]}
    # Newton's first trace entry is the CD's last point: not repeated
    t_end = res.times[-1] if res.times.size else 0.0
    return GLMResult(
        coef=nres.coef, intercept=nres.intercept, n_iter=res.n_iter + nres.n_iter,
        objective=np.concatenate([res.objective, nres.objective[1:]]),
        gap_history=np.concatenate([res.gap_history, nres.gap_history[1:]]),
        times=np.concatenate([res.times, t_end + nres.times[1:]]),
        gap=nres.gap, converged=nres.converged, time=0.0,
        check_time=res.check_time + nres.check_time, dual_coef=None, solver=res.solver,
        loss=res.loss, penalty=res.penalty, alpha=res.alpha, dual=False, info=info)


def _fit(X, y, loss_code, l1, alpha, penalty, fit_intercept, opts, *, random_state, verbose,
         blocks, comm_stats, coef_init, callback, comm=None, monitor=None, sample_weight=None,
         intercept_init=None, l1_ratio=None):
    """Run the solver of ``opts`` on validated inputs; :class:`GLMResult` without ``time``.
    ``sample_weight``: over ``comm`` only, scaled to mean one over every rank.  ``l1_ratio``
    (the elastic net, with ``l1=True``: the primal): the problem's ``l1`` is then
    ``l1_ratio == 1`` (``GLMProblem`` takes ``0 < l1_ratio < 1`` as the elastic net)."""
    solver = opts.solver
    use_dual = _resolve_dual(opts.dual, loss_code, l1, fit_intercept, solver,
                             opts.intercept_scaling)
    if comm is not None and random_state is None:
        random_state = _agreed_seed(comm, X, y)
    rng = np.random.default_rng(random_state)
    trace = Trace(opts.tol, verbose)
    trace.monitor = monitor
    if comm is not None:
        # one BLAS thread per rank (every rank's OpenBLAS pool spinning on shared cores costs
        # several times the fit: kernels/_threads.py)
        with limit_blas_threads(1):
            w, b, a, it, conv, info = _fit_on_comm(comm, X, y, loss_code, l1, alpha,
                                                   fit_intercept, use_dual, solver, opts, rng,
                                                   trace, blocks, sample_weight)
        if comm_stats is not None:
            comm_stats.update(info["comm"])
    elif solver in ("cocoa", "hcocoa", "pure-block"):
        K = opts.n_jobs if opts.n_workers is None else opts.n_workers
        w, b, a, it, conv, info = fit_distributed(
            X, y, loss_code, l1, alpha, fit_intercept, _scaling(opts), use_dual, solver,
            K=K, n_nodes=opts.n_nodes, inner_rounds=opts.inner_rounds,
            local_epochs=opts.local_epochs, blocks=blocks, max_iter=opts.max_iter,
            check_every=1 if opts.check_every == "auto" else opts.check_every, rng=rng,
            trace=trace, comm_stats=comm_stats,
        )
    elif opts.device == "gpu":
        pb = GLMProblem(X, y, loss_code, l1, alpha, fit_intercept, _scaling(opts),
                        primal=False)
        w, b, a, it, conv, info = scd_dual_gpu(
            pb, max_iter=opts.max_iter,
            check_every=1 if opts.check_every == "auto" else opts.check_every, rng=rng,
            trace=trace, verbose=verbose, adaptive_damping=opts.adaptive_damping,
            damping=opts.damping, callback=callback, device_memory=opts.device_memory,
            concurrency=opts.gpu_blocks)
    else:
        order = None
        n_hot = 0
        n_threads = opts.n_jobs if solver == "tpa-scd" else 1
        if use_dual:
            # features numbered by frequency: the hot entries of v share cache lines, and
            # TPA-SCD tells them by their number (results are unchanged: see
            # cd_reorder_features); on one thread only where some features are hot
            counts = cd.feature_counts(X)
            hot = hot_mass_of_counts(counts, X.shape[1]) >= REORDER_MIN_HOT_MASS
            if n_threads > 1 or (hot and X.shape[0] > REORDER_MIN_FEATURES):
                X, order, counts = cd.reorder_features(X, counts)
                n_hot = n_hot_features(counts, X.shape[1])
            if callback is not None and order is not None:
                user_callback = callback

                def callback(it, w, b):
                    return user_callback(it, unorder(w, order), b)
        # the dual's intercept: unregularised on one thread (FreeIntercept), else the
        # regularised constant feature of intercept_scaling (TPA-SCD's threads)
        free = use_dual and _free_dual_intercept(solver, fit_intercept, opts.intercept_scaling)
        pb_l1 = l1 if l1_ratio is None else l1_ratio == 1.0
        pb = GLMProblem(X, y, loss_code, pb_l1, alpha, fit_intercept,
                        None if free else _scaling(opts), primal=not use_dual,
                        l1_ratio=l1_ratio)
        if use_dual and opts.tpa_mode == "hogwild" and n_threads > TPA_DUAL_MAX_THREADS:
            logger.warning(
                "tpa-scd's dual runs at most %d threads (n_jobs=%d): with more, its threads' "
                "replicas overshoot on the frequent features and the fit stalls; use "
                "tpa_mode='replica' (deterministic, needs the damping) or solver='cocoa' for "
                "more", TPA_DUAL_MAX_THREADS, n_threads)
            n_threads = TPA_DUAL_MAX_THREADS
        kw = dict(max_iter=opts.max_iter, check_every=opts.check_every, rng=rng, trace=trace,
                  verbose=verbose, n_threads=n_threads, tpa_mode=opts.tpa_mode,
                  adaptive_damping=opts.adaptive_damping, damping=opts.damping,
                  sub_epochs=opts.sub_epochs, callback=callback,
                  active_fraction=opts.active_fraction, full_every=opts.full_every,
                  shrinking=opts.shrinking)
        if use_dual:
            # the warm-up sweep counters the overshoot of examples that share hot features
            # (no use on hashed data: 2^22 C = 1 / 100, 1e-4 in 0.27 / 0.32 s without it,
            # 0.35 / 0.38 s with it)
            warm = bool(opts.warmup) and hot
            w, b, a, it, conv, info = scd_dual(pb, np.zeros(pb.n), n_hot=n_hot, warmup=warm,
                                               batch_sweeps=bool(opts.batch_sweeps),
                                               b0=intercept_init, **kw)
            if order is not None:
                w = unorder(w, order)
            info["n_threads"] = n_threads
            info["reordered"] = order is not None
            info["warmup"] = warm
        else:
            w0 = np.zeros(pb.d)
            if coef_init is not None:
                w0[:] = coef_init
            b0 = 0.0 if intercept_init is None or not fit_intercept else intercept_init
            w, b, a, it, conv, info = scd_primal(pb, w0, b0, **kw)
    return GLMResult(
        coef=np.asarray(w, dtype=np.float64),
        intercept=float(b),
        n_iter=int(it),
        objective=np.asarray(trace.P),
        gap_history=np.asarray(trace.G),
        times=np.asarray(trace.T),
        gap=float(trace.G[-1]) if trace.G else float("nan"),
        converged=bool(conv),
        time=0.0,
        check_time=trace.check,
        dual_coef=a,
        solver=solver,
        loss=_losses.LOSSES[loss_code],
        penalty=penalty,
        alpha=alpha,
        dual=use_dual,
        info=info,
        l1_ratio=l1_ratio,
    )


def _agreed_seed(comm, X, y):
    """``random_state=None`` over ``comm=``: one seed for the whole job, the same on every
    process, replicas included (a replica holds its rank's data, so a hash of the ranks'
    summed data statistics is the same wherever it is computed; a seed drawn by each process
    would let the replicas of a rank diverge)."""
    import hashlib

    data = X.data if sp.issparse(X) else X
    local = np.array([X.shape[1], data.size, float(np.abs(data).sum()),
                      float(np.abs(np.asarray(y, dtype=np.float64)).sum())], dtype=np.float64)
    stats = np.asarray(comm.allreduce(local), dtype=np.float64)
    return int.from_bytes(hashlib.sha256(stats.tobytes()).digest()[:8], "little") >> 2


def _fit_on_comm(comm, X, y, loss_code, l1, alpha, fit_intercept, use_dual, solver, opts, rng,
                 trace, blocks, sample_weight=None):
    """:func:`fit_on_comm` with the options checked against the communicator; every rank
    leaves with rank 0's trace."""
    P = comm.size
    K = P if opts.n_workers is None else opts.n_workers
    if solver in ("cocoa", "pure-block") and K != P:
        raise ValueError(f"{solver} over a communicator runs one worker per rank: n_workers="
                         f"{K} differs from comm.size={P} (use hcocoa for threads per node)")
    if K % P:
        raise ValueError(f"n_workers={K} must be a multiple of comm.size={P} (the nodes)")
    if opts.n_nodes is not None and opts.n_nodes != P:
        raise ValueError(f"n_nodes={opts.n_nodes} differs from comm.size={P}: over a "
                         "communicator the nodes are its ranks")
    seed = int(comm.broadcast(int(rng.integers(2**62))))
    out = fit_on_comm(comm, X, y, loss_code, l1, alpha, fit_intercept, _scaling(opts),
                      use_dual, solver, threads=K // P, inner_rounds=opts.inner_rounds,
                      local_epochs=opts.local_epochs, blocks=blocks, max_iter=opts.max_iter,
                      check_every=1 if opts.check_every == "auto" else opts.check_every,
                      seed=seed, trace=trace, sample_weight=sample_weight)
    P_, G, T, check = comm.broadcast((trace.P, trace.G, trace.T, trace.check))
    trace.P, trace.G, trace.T, trace.check = list(P_), list(G), list(T), check
    return out
