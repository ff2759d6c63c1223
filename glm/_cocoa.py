"""Distributed coordinate descent: CoCoA+, hierarchical CoCoA and Google's pure-block SCD.

Workers talk only through a :class:`Communicator` (``allreduce`` of numpy arrays).  Here the
workers are threads of one process joined by :class:`InProcessGroup` (the numba kernels release
the GIL, so the threads really run in parallel); ``roofline.comm`` implements the same
interface over real transports, and the worker functions (:func:`dual_worker`,
:func:`primal_worker`, :func:`pure_block_worker`) run unchanged in one process per rank.

CoCoA+ (Smith et al., "CoCoA: A General Framework for Communication-Efficient Distributed
Optimization"): the data are partitioned over ``K`` workers (by examples for the dual, by
features for the primal); each round every worker improves its local subproblem for ``H``
coordinate steps against the shared vector frozen at the round's start, seeing its own changes
amplified ``sigma' = K`` times, and the changes are *added* (``gamma = 1``).

Hierarchical CoCoA (Snap ML): ``K = N * M`` workers in ``N`` nodes of ``M``.  The node-level
subproblem (``sigma'_out = N``) is itself solved by CoCoA among the node's ``M`` workers
(``sigma'_in = M``, so a worker's own steps are amplified ``N * M`` times and the node's
accumulated change ``N`` times), with ``inner_rounds`` cheap intra-node aggregations per
expensive inter-node one.  ``N = K, M = 1, inner_rounds = 1`` is flat CoCoA+.

Pure-block SCD (Rendle et al., KDD'16): the features are partitioned into *pure* blocks (every
example has at most one non-zero in a block, as one-hot fields give), the examples into
``K`` shards.  For each block, each shard computes the per-feature sufficient statistics
``sum x loss'(z)`` and ``sum x^2 loss''(z)``; these are all-reduced and every shard takes the
same Newton steps.  Inside a pure block the coordinate steps do not interact, so the iterates
are those of sequential block coordinate descent whatever ``K`` is.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from roofline.comm import InProcessGroup, run_in_threads

from . import cd
from ._problem import GLMProblem

__all__ = [
    "WorkerConfig",
    "check_pure_blocks",
    "dual_worker",
    "fit_distributed",
    "fit_on_comm",
    "primal_worker",
    "pure_block_worker",
    "pure_blocks",
    "worker_shards",
]

logger = logging.getLogger(__name__)


class _Hierarchy:
    """``n_nodes`` nodes of ``per_node`` worker threads: one world group, and each worker's
    node and cross-node groups split from it (``world.split``).

    Rank ``r`` lives on node ``r // per_node`` with local rank ``r % per_node``; its cross-node
    group joins the workers of the same local rank on every node (a two-level all-reduce).
    """

    def __init__(self, n_nodes, per_node):
        self.n_nodes, self.per_node = n_nodes, per_node
        self.size = n_nodes * per_node
        self.world = InProcessGroup(self.size, name="world")

    @property
    def groups(self):
        return [self.world]  # aborting the world aborts the groups split from it

    def comms(self, rank):
        """``(world, node, cross)`` communicators of worker ``rank`` (collective: every worker
        calls it, in its own thread)."""
        world = self.world.communicator(rank)
        node, local = divmod(rank, self.per_node)
        return (world, world.split(("node", node)), world.split(("cross", local)))

    def stats(self):
        kids = self.world.children.items()
        agg = lambda kind: {k: sum(g.stats[k] for (_, c), g in kids if c[0] == kind)  # noqa: E731
                            for k in ("calls", "bytes", "adds")}
        return {"world": dict(self.world.stats), "inner": agg("node"), "outer": agg("cross")}


# ---------------------------------------------------------------------------------------------
# shared worker pieces


class WorkerConfig:
    """What every CD worker of one run shares: the problem's constants, the trace and the
    stopping rule (the same on every rank).

    Parameters
    ----------
    loss : int
        The loss code (``roofline.glm.LOSS_CODES``).
    l1 : bool
        L1 penalty (else L2).
    alpha : float
        Regularisation strength of the mean-loss objective.
    fit_intercept : bool
    intercept_scaling : float
    n : int
        The number of examples over all ranks.
    max_iter, check_every : int
        Rounds, and rounds between duality-gap checks.
    trace : Trace
        Recorded by global rank 0.
    sigma_out, sigma_in : float
        CoCoA+'s subproblem scalings: the number of nodes, and of workers per node.
    inner_rounds : int
        Node rounds per global round (hierarchical CoCoA).
    local_epochs : float
        Passes of a local solve over the worker's coordinates.
    """

    def __init__(self, loss, l1, alpha, fit_intercept, intercept_scaling, n, max_iter,
                 check_every, trace, sigma_out, sigma_in, inner_rounds, local_epochs):
        self.loss, self.l1, self.alpha = loss, l1, alpha
        self.fit_intercept, self.intercept_scaling = fit_intercept, intercept_scaling
        self.n, self.max_iter, self.check_every = n, max_iter, check_every
        self.trace = trace
        self.sigma_out, self.sigma_in = float(sigma_out), float(sigma_in)
        self.inner_rounds, self.local_epochs = int(inner_rounds), float(local_epochs)

    def problem(self, X, y, primal, n_total=None, sample_weight=None):
        return GLMProblem(X, y, self.loss, self.l1, self.alpha, self.fit_intercept,
                          self.intercept_scaling, primal=primal, n_total=n_total, serial=True,
                          sample_weight=sample_weight)

    def done(self, rank, it, P, gap, t_check):
        """Identical on every rank (same all-reduced inputs); rank 0 records the trace."""
        if rank == 0:
            return self.trace.record(it, P, gap, t_check)
        if not np.isfinite(P):
            raise FloatingPointError(f"the objective became {P} at iteration {it}")
        return gap <= self.trace.tol * max(abs(P), 1e-300)

    def local_coords(self, rng, m):
        """The coordinates of one local solve: ``local_epochs`` passes (fractions allowed)."""
        if m == 0:  # a worker with no coordinates (a rank with no examples) idles
            return np.zeros(0, np.int64)
        H = max(1, int(round(self.local_epochs * m)))
        reps = -(-H // m)
        return np.concatenate([rng.permutation(m) for _ in range(reps)])[:H].astype(np.int64)


def _timed(ctx, rank, start):
    if rank == 0:
        (ctx.trace.start if start else ctx.trace.stop)()


# ---------------------------------------------------------------------------------------------
# workers


def cocoa_rounds(ctx, comms, shared, local_solve, exact_check, cross_reduce=None):
    """The round loop that :func:`dual_worker` and :func:`primal_worker` share.

    Each global round runs ``ctx.inner_rounds`` node rounds: the worker solves its local
    subproblem against ``shared`` plus ``sigma'_out`` times the node's change so far
    (``local_solve(shared_local, sigma, d_k)`` adds its change to the zeroed ``d_k``), and the
    node all-reduces the changes; the nodes' changes are then added across nodes.  Every
    ``ctx.check_every`` rounds (and at the last) ``exact_check(shared)`` returns the exact
    shared vector (dropping the incremental updates' drift) with the all-reduced ``(P, gap)``.

    Parameters
    ----------
    ctx : WorkerConfig
    comms : (world, node, cross) communicators
    shared : ndarray
        The shared vector at the start (``v = X a`` for the dual, the margins for the primal).
    local_solve, exact_check : callable
    cross_reduce : callable, optional
        The sum of the nodes' changes (default ``cross.allreduce``); the dual worker passes a
        sparse all-reduce of the features its shard touches when the nodes are processes.

    Returns
    -------
    shared : ndarray
    n_rounds : int
    converged : bool
    """
    world, node, cross = comms
    rank = world.rank
    sigma = ctx.sigma_out * ctx.sigma_in
    conv = False
    it = 0
    for it in range(1, ctx.max_iter + 1):
        _timed(ctx, rank, True)
        d_node = np.zeros_like(shared)
        for _ in range(ctx.inner_rounds):
            local = shared + ctx.sigma_out * d_node
            d_k = np.zeros_like(shared)
            local_solve(local, sigma, d_k)
            d_node += node.allreduce(d_k)
        shared = shared + (cross.allreduce(d_node) if cross_reduce is None
                           else cross_reduce(d_node))
        _timed(ctx, rank, False)
        if it % ctx.check_every == 0 or it == ctx.max_iter:
            t0 = time.perf_counter()
            shared, P, gap = exact_check(shared)
            if ctx.done(rank, it, P, gap, time.perf_counter() - t0):
                conv = True
                break
    return shared, it, conv


def dual_worker(ctx, comms, X_k, y_k, seed, sample_weight=None):
    """A CoCoA / hierarchical-CoCoA worker for the dual: owns examples ``X_k`` (CSC columns).

    Parameters
    ----------
    ctx : WorkerConfig
    comms : (world, node, cross) communicators
    X_k : CSC matrix (n_features, n_k)
    y_k : array (n_k,)
    seed : int
        This worker's permutation stream.
    sample_weight : array (n_k,), optional
        The examples' weights, scaled to mean one over every worker's examples (weighted
        SDCA: :meth:`GLMProblem.weight_levels`); a local solve visits the examples of one
        weight at a time, the weights in a random order.

    Returns
    -------
    (a_k, v, n_rounds, converged)
        ``a_k``: the dual variables of the worker's examples; ``v = [X a; icpt * sum(a)]``.
    """
    world = comms[0]
    pb = ctx.problem(X_k, y_k, primal=False, n_total=ctx.n, sample_weight=sample_weight)
    rng = np.random.default_rng(seed)
    size = pb.d + (1 if pb.icpt else 0)  # v = [X a; icpt sum a]
    cross_reduce = _touched_reduce(comms[2], X_k, size)
    root = _feature_sigma_root(ctx, comms[2], X_k, pb, size, cross_reduce)
    if root is None:
        X_s, icpt_s = X_k, pb.icpt
    else:  # the local problem in the scaled features sqrt(sigma_j) x_ij (see feature_sigma)
        X_s = X_k.copy()
        X_s.data = X_s.data * root[X_s.indices[:X_s.indptr[-1]]]
        icpt_s = pb.icpt * float(root[-1]) if pb.icpt else 0.0
    colsq = cd.col_sqnorms(X_s, parallel=False)
    a = np.zeros(pb.n_local)  # weighted: b = a / s, the kernel's variables

    def epoch(v_local, coords, sigma, d_k, c=1.0):
        if root is None:
            cd.dual_epoch(X_k, y_k, a, v_local, coords, loss=pb.loss, lam_n=pb.lam_n / c,
                          colsq=colsq, icpt=pb.icpt, sigma=sigma, d=d_k,
                          parallel=False)  # a worker thread
            return
        # v~ = v / sqrt(sigma), x~ = sqrt(sigma) x: the steps' margins x~.v~ = x.v, curvature
        # sum_j sigma_j x_j^2, v += sigma_j delta x_j; d_k gets the raw change d~ / sqrt(sigma)
        v_s = v_local / root
        d_s = np.zeros_like(d_k)
        cd.dual_epoch(X_s, y_k, a, v_s, coords, loss=pb.loss, lam_n=pb.lam_n / c,
                      colsq=colsq, icpt=icpt_s, sigma=1.0, d=d_s, parallel=False)
        np.multiply(v_s, root, out=v_local)
        d_k += d_s / root

    if pb.levels is None:
        def local_solve(v_local, sigma, d_k):
            epoch(v_local, ctx.local_coords(rng, pb.n_local), sigma, d_k)

        def true_a():
            return a
    else:
        level_of = np.full(pb.n_local, -1, np.int64)
        for k, (_, idx, _) in enumerate(pb.levels):
            level_of[idx] = k
        n_levels = len(pb.levels)
        if n_levels * (pb.d + 1) > 4 * (X_k.nnz + pb.n_local):
            logger.warning(
                "cocoa: %d distinct sample weights on a worker of %d examples: its local solve "
                "rescales the shared vector (%d entries) once per weight, which costs more "
                "than the steps; few distinct weights (or solver='newton' for a smooth loss) "
                "run faster", n_levels, pb.n_local, pb.d + 1)

        def local_solve(v_local, sigma, d_k):
            coords = ctx.local_coords(rng, pb.n_local)
            coords = coords[level_of[coords] >= 0]
            lv = level_of[coords]
            order = np.argsort(lv, kind="stable")  # each weight's examples in random order
            coords, lv = coords[order], lv[order]
            cuts = np.searchsorted(lv, np.arange(n_levels + 1))
            for k in rng.permutation(n_levels):
                if cuts[k + 1] == cuts[k]:
                    continue
                c = pb.levels[k][0]
                v_local *= 1.0 / c  # the unweighted step against v / s with lam_n / s
                d_k *= 1.0 / c
                epoch(v_local, coords[cuts[k]:cuts[k + 1]], sigma, d_k, c)
                v_local *= c
                d_k *= c

        def true_a():
            return pb.sw * a

    def exact_check(v):
        v = world.allreduce(pb.dual_point(true_a()))  # exact, drops incremental drift
        P, gap = pb.dual_certificate(world.allreduce(pb.dual_parts(a, v)), v)
        return v, P, gap

    v = world.allreduce(pb.dual_point(true_a()))
    v, it, conv = cocoa_rounds(ctx, comms, v, local_solve, exact_check, cross_reduce)
    return true_a(), v, it, conv


#: Feature-wise sigma' in the flat CoCoA+ dual (see :func:`_feature_sigma_root`).
FEATURE_SIGMA = True


def _feature_sigma_root(ctx, cross, X_k, pb, size, cross_reduce):
    """``sqrt(sigma_j)`` per entry of ``v = [X a; icpt sum a]`` for the flat CoCoA+ dual, or
    None (one worker, the hierarchy's two levels, or :data:`FEATURE_SIGMA` off).

    CoCoA+ adds the K workers' changes and keeps the sum safe with ``sigma' = K``: its local
    subproblems bound ``||sum_k X_k da_k||^2`` by ``sigma' sum_k ||X_k da_k||^2``.  Feature by
    feature, Cauchy-Schwarz gives the tighter bound ``(sum_k u_kj)^2 <= c_j sum_k u_kj^2`` with
    ``c_j`` the number of workers whose examples touch feature ``j`` (every worker the
    intercept slot), so ``sigma_j = c_j`` is safe too: a feature held by one worker is stepped
    on as in one process, and only the features the workers share are damped ``c_j``-fold
    (on power-law data most features are rare).  The local solve runs the unchanged kernel on
    the scaled features ``sqrt(sigma_j) x_ij``.
    """
    if not FEATURE_SIGMA or ctx.sigma_in != 1.0 or ctx.inner_rounds != 1 or ctx.sigma_out <= 1:
        return None
    mine = np.zeros(size)
    mine[X_k.indices[:X_k.indptr[-1]]] = 1.0
    if pb.icpt and X_k.shape[1]:
        mine[-1] = 1.0
    counts = cross.allreduce(mine) if cross_reduce is None else cross_reduce(mine)
    counts = np.maximum(counts, 1.0)
    if counts.min() >= ctx.sigma_out:  # every feature on every worker: CoCoA+'s own sigma'
        return None
    return np.sqrt(counts)


def _touched_reduce(cross, X_k, size):
    """Over a network, the nodes' changes to ``v = [X a; icpt sum a]`` are non-zero only at the
    features their examples touch (and the intercept slot): a Kylix sparse all-reduce of those,
    configured once, instead of a dense vector of every feature.  Entries of ``v`` at features
    a worker does not touch are never read between the exact checks, which recompute ``v``
    densely; in-process groups keep the dense shared-memory reduction."""
    if cross.shares_process or cross.size == 1:
        return None
    d = X_k.shape[0]
    touched = np.flatnonzero(np.bincount(X_k.indices[:X_k.indptr[-1]], minlength=d))
    touched = np.concatenate([touched, np.arange(d, size)]).astype(np.int64)  # + intercept
    plan = cross.sparse_plan(touched)

    def reduce(d):
        out = np.zeros_like(d)
        out[touched] = plan.reduce(d[touched])
        return out

    return reduce


def primal_worker(ctx, comms, X_k, y, seed):
    """A CoCoA / hierarchical-CoCoA worker for the primal: owns a block of features.

    ``X_k`` is the worker's rows of ``X`` (its features) as a CSC matrix of shape
    ``(n_k, n_examples)``.  Rank 0 also owns the intercept.

    Returns
    -------
    (w_k, b, n_rounds, converged)
    """
    world = comms[0]
    rank = world.rank
    pb = ctx.problem(X_k, y, primal=True)
    rng = np.random.default_rng(seed)
    w = np.zeros(pb.d)
    own_b = pb.fit_intercept and rank == 0
    state = {"b": 0.0}

    def local_solve(z_local, sigma, d_k):
        if pb.d:
            cd.primal_epoch(pb.Xt, y, w, z_local, ctx.local_coords(rng, pb.d),
                                 loss=pb.loss, l1=pb.l1, lam_n=pb.lam_n,
                                 colsq=pb.colsq_primal, sigma=sigma, d=d_k)
        if own_b:
            state["b"] = cd.intercept_step(y, z_local, state["b"], loss=pb.loss,
                                                sigma=sigma, d=d_k)

    def exact_check(z):
        b = state["b"]
        b_all = float(world.allreduce(np.array([b if rank == 0 else 0.0]))[0])
        z = world.allreduce(pb.margins(w, 0.0)) + b_all  # exact margins
        cand = pb.dual_candidate(z)
        u = pb.xdot(cand[0])
        u_inf = float(world.allreduce(np.array([np.abs(u).max() if u.size else 0.0]),
                                      op="max")[0])
        s = pb.dual_scale(u_inf)
        reg, u_sq = world.allreduce(np.array([pb.reg(w), float(u @ u)]))
        P, gap = pb.certificate(pb.grad_parts(z, cand, b_all, s), reg, u_sq, b_all)
        return z, P, gap

    _, it, conv = cocoa_rounds(ctx, comms, np.zeros(pb.n), local_solve, exact_check)
    return w, state["b"], it, conv


def pure_block_worker(ctx, world, X_k, y_k, block_feats, block_order_seed):
    """A Google-SCD worker: owns the example shard ``X_k``; ``block_feats`` lists the features
    of every pure block.  Every rank draws the same block order from ``block_order_seed``.

    Returns
    -------
    (w, b, n_epochs, converged)
    """
    rank = world.rank
    pb = ctx.problem(X_k, y_k, primal=True, n_total=ctx.n)
    rng = np.random.default_rng(block_order_seed)
    w = np.zeros(pb.d)
    b = 0.0
    z = np.zeros(pb.n_local)
    conv = False
    it = 0
    for it in range(1, ctx.max_iter + 1):
        _timed(ctx, rank, True)
        for bi in rng.permutation(len(block_feats)):
            feats = block_feats[bi]
            m = feats.size
            stats = np.zeros(2 * m)
            cd.block_stats(pb.Xt, y_k, z, feats, stats[:m], stats[m:], loss=pb.loss)
            stats = world.allreduce(stats)
            delta = np.empty(m)
            cd.block_steps(w, feats, stats[:m], stats[m:], delta, l1=pb.l1, lam_n=pb.lam_n)
            cd.block_apply(pb.Xt, z, feats, delta)
        if pb.fit_intercept:
            gh = world.allreduce(np.array(pb.dual_candidate(z)[1:]))
            if gh[1] > 0:
                step = -gh[0] / gh[1]
                b += step
                z += step
        _timed(ctx, rank, False)
        if it % ctx.check_every == 0 or it == ctx.max_iter:
            t0 = time.perf_counter()
            z = pb.margins(w, b, z)
            cand = pb.dual_candidate(z)
            u = world.allreduce(pb.xdot(cand[0]))
            s = pb.dual_scale(float(np.abs(u).max()))
            parts = world.allreduce(pb.grad_parts(z, cand, b, s))
            P, gap = pb.certificate(parts, pb.reg(w), float(u @ u), b)
            if ctx.done(rank, it, P, gap, time.perf_counter() - t0):
                conv = True
                break
    return w, b, it, conv


# ---------------------------------------------------------------------------------------------
# pure blocks


def pure_blocks(X, max_blocks=512):
    """Greedy partition of the features of ``X`` (``n_features x n_examples`` CSC) into pure
    blocks: each feature (most frequent first) joins the first block in which none of its
    examples is taken yet.

    Parameters
    ----------
    X : CSC matrix, shape (n_features, n_examples)
        The examples.
    max_blocks : int, default 512
        The most blocks allowed.

    Returns
    -------
    blocks : ndarray of int64, shape (n_features,)
        The block of every feature.

    Raises
    ------
    ValueError
        More than ``max_blocks`` blocks would be needed.
    """
    A = cd.feature_major(X)
    nnz = np.diff(A.indptr)
    order = np.argsort(-nnz, kind="stable").astype(np.int64)
    words = -(-max_blocks // 64)
    blocks, n_used = cd.greedy_pure_blocks(A, order, words)
    if n_used < 0:
        raise ValueError(
            f"X needs more than max_blocks={max_blocks} pure blocks; pass blocks= explicitly "
            "(e.g. one block per categorical field) or raise max_blocks"
        )
    return blocks


def check_pure_blocks(X, blocks):
    """Raise ``ValueError`` unless ``blocks`` (one id per feature) partitions the features of
    ``X`` into pure blocks (no example with two non-zeros in one block).

    Parameters
    ----------
    X : CSC matrix, shape (n_features, n_examples)
        The examples.
    blocks : array-like of int, shape (n_features,)
        A non-negative block id per feature.

    Returns
    -------
    ndarray of int64, shape (n_features,)
        ``blocks``, as int64.

    Raises
    ------
    ValueError
        A bad shape or id, or an example with two non-zeros in one block (named in the
        message).
    """
    blocks = np.asarray(blocks)
    if blocks.shape != (X.shape[0],):
        raise ValueError(f"blocks must have shape ({X.shape[0]},) (one id per feature), got "
                         f"{blocks.shape}")
    if blocks.dtype.kind not in "iu" or (blocks.size and blocks.min() < 0):
        raise ValueError("blocks must hold non-negative integer block ids")
    cols = np.repeat(np.arange(X.shape[1], dtype=np.int64), np.diff(X.indptr))
    key = cols * (int(blocks.max()) + 1) + blocks[X.indices[: X.indptr[-1]]]
    uniq, counts = np.unique(key, return_counts=True)
    if uniq.size != key.size:
        bad = uniq[np.argmax(counts > 1)]
        ex, blk = divmod(int(bad), int(blocks.max()) + 1)
        raise ValueError(f"blocks are not pure: example {ex} has several non-zeros in block {blk}")
    return blocks.astype(np.int64)


# ---------------------------------------------------------------------------------------------
# driver


def _split(rng, m, K):
    """A seeded random partition of ``range(m)`` into ``K`` sorted index sets."""
    return [np.sort(p) for p in np.array_split(rng.permutation(m), K)]


#: The tag of the partition's random stream (a third word: never a worker's ``[seed, r]``).
_SHARD_STREAM = 0x5EED5


def _worker_seed(seed: int, worker: int) -> int:
    """Worker ``worker``'s seed from the job's seed: the same in one process (``n_workers=K``)
    and over ``comm=`` (rank ``p``'s thread ``m`` is worker ``p * M + m``)."""
    return int(np.random.default_rng([int(seed), int(worker)]).integers(2**62))


def _shards_of_seed(seed: int, m: int, K: int):
    return _split(np.random.default_rng([int(seed), int(K), _SHARD_STREAM]), m, K)


def worker_shards(n, n_workers, random_state=None):
    """The index sets that ``fit_glm(n_workers=K, random_state=...)`` gives its workers.

    The CoCoA family in one process shares out the examples (the dual, ``pure-block``) or the
    features (the primal) at random; giving rank ``r`` of a ``comm=`` job the shard
    ``worker_shards(n, K, random_state)[r]`` (and the same ``random_state``) runs the same
    iterates over K processes as in one.

    Parameters
    ----------
    n : int
        What is shared out: the examples (the dual and ``pure-block``) or the features (the
        primal's ``penalty="l1"`` / ``dual=False``).
    n_workers : int
        The workers (``n_workers`` of ``fit_glm``; the ranks over ``comm=``).
    random_state : int, Generator or None
        ``fit_glm``'s ``random_state``.

    Returns
    -------
    list of ndarray
        ``n_workers`` sorted int64 index arrays, a partition of ``range(n)`` (sizes as
        ``np.array_split``'s).

    Raises
    ------
    ValueError
        ``n_workers`` below 1 or above ``n``.

    Examples
    --------
    >>> from roofline.glm import worker_shards
    >>> [len(s) for s in worker_shards(10, 3, random_state=0)]
    [4, 3, 3]
    """
    n, K = int(n), int(n_workers)
    if not 1 <= K <= max(n, 1):
        raise ValueError(f"n_workers must be between 1 and n={n}, got {n_workers!r}")
    seed = int(np.random.default_rng(random_state).integers(2**62))
    return _shards_of_seed(seed, n, K)


def fit_distributed(X, y, loss, l1, alpha, fit_intercept, intercept_scaling, dual, solver, *,
                    K, n_nodes, inner_rounds, local_epochs, blocks, max_iter, check_every, rng,
                    trace, comm_stats):
    """Run ``solver`` (``"cocoa"``, ``"hcocoa"`` or ``"pure-block"``) over ``K`` workers.

    The arguments are those of :func:`roofline.learners.fit_glm`, validated (``loss`` as
    its code, ``l1`` for the penalty, ``dual`` resolved).

    Returns
    -------
    (w, b, a, n_iter, converged, info)
        ``a``: the dual variables of all examples (the dual), else ``None``.

    Raises
    ------
    ValueError
        When ``n_workers`` exceeds what there is to share out: the examples (the dual and
        ``pure-block`` partition the examples) or the features (the primal partitions them).
    """
    d, n = X.shape
    shared_out = "features" if (solver != "pure-block" and not dual) else "examples"
    available = d if shared_out == "features" else n
    if K > available:
        raise ValueError(
            f"n_workers={K} exceeds the {available} {shared_out} that {solver} "
            f"{'(primal) ' if shared_out == 'features' else ''}partitions over its workers; use "
            f"at most n_workers={available}"
        )
    if solver == "hcocoa":
        N = K if n_nodes is None else int(n_nodes)
        if N < 1 or K % N:
            raise ValueError(f"n_workers={K} must be a multiple of n_nodes={n_nodes}")
        M, R = K // N, int(inner_rounds)
        if R < 1:
            raise ValueError(f"inner_rounds must be >= 1, got {inner_rounds}")
    else:
        N, M, R = K, 1, 1
    if not local_epochs > 0:
        raise ValueError(f"local_epochs must be positive, got {local_epochs!r}")
    ctx = WorkerConfig(loss, l1, alpha, fit_intercept, intercept_scaling, n, max_iter, check_every,
               trace, N, M, R, local_epochs)
    # the job's seed is the draw fit_on_comm broadcasts: the same shards, worker seeds and
    # block order as K ranks over comm= holding worker_shards(...) (one iterate, however run)
    seed = int(rng.integers(2**62))
    seeds = [_worker_seed(seed, r) for r in range(K)]
    info = {"n_workers": K}
    if solver == "pure-block":
        blocks = pure_blocks(X) if blocks is None else check_pure_blocks(X, blocks)
        order = np.argsort(blocks, kind="stable")
        cuts = np.flatnonzero(np.diff(blocks[order])) + 1
        block_feats = [f.astype(np.int64) for f in np.split(order, cuts)]
        shards = _shards_of_seed(seed, n, K)
        group = InProcessGroup(K, name="world")
        order_seed = seed
        out = run_in_threads(
            lambda r: pure_block_worker(ctx, group.communicator(r), X[:, shards[r]],
                                        y[shards[r]], block_feats, order_seed),
            K, [group])
        w, b, it, conv = out[0]
        info.update(n_blocks=len(block_feats), comm={"world": dict(group.stats)})
        a = None
    else:
        hier = _Hierarchy(N, M)
        if dual:
            parts = _shards_of_seed(seed, n, K)
            out = run_in_threads(
                lambda r: dual_worker(ctx, hier.comms(r), X[:, parts[r]], y[parts[r]],
                                      int(seeds[r])), K, hier.groups)
            a = np.empty(n)
            for r in range(K):
                a[parts[r]] = out[r][0]
            v = out[0][1]
            pb = GLMProblem(X, y, loss, l1, alpha, fit_intercept, intercept_scaling, primal=False)
            w, b = pb.dual_primal(v)
            w = w.copy()
            it, conv = out[0][2], out[0][3]
        else:
            parts = _shards_of_seed(seed, d, K)
            Xr = X.tocsr()
            out = run_in_threads(
                lambda r: primal_worker(ctx, hier.comms(r), Xr[parts[r]].tocsc(), y,
                                        int(seeds[r])), K, hier.groups)
            w = np.empty(d)
            for r in range(K):
                w[parts[r]] = out[r][0]
            b, it, conv = out[0][1], out[0][2], out[0][3]
            a = None
        info.update(n_nodes=N, per_node=M, inner_rounds=R, comm=hier.stats())
    if comm_stats is not None:
        comm_stats.update(info["comm"])
    return w, b, a, it, conv, info


# ---------------------------------------------------------------------------------------------
# across processes: every rank holds its own shard


#: Why the primal solvers over ``comm=`` refuse non-uniform weights (their kernels' coordinate
#: steps sum every example's loss unweighted); fit_glm raises it before any work.
_PRIMAL_WEIGHTS = (
    "non-uniform sample_weight over comm= is taken by the dual of cocoa / hcocoa (penalty='l2', "
    "dual=True) and by solver='newton' (a smooth loss with penalty='l2'); the primal "
    "coordinate descent (penalty='l1', dual=False, pure-block) takes none")


class _TwoLevel:
    """The world of ``node`` (threads of this process) times ``cross`` (the processes): a
    worker's global rank and its all-reduce over every worker of every process (bit-identical
    everywhere: the node's sum, then the same cross sum on every process)."""

    shares_process = False

    def __init__(self, node, cross):
        self.node, self.cross = node, cross
        self.rank = cross.rank * node.size + node.rank
        self.size = cross.size * node.size

    def allreduce(self, x, op="sum"):
        return self.cross.allreduce(self.node.allreduce(x, op), op)


def _global_blocks(comm, X, blocks):
    """Pure blocks valid on every rank's shard: given, or rank 0's greedy blocks, checked."""
    if blocks is None:
        blocks = comm.broadcast(pure_blocks(X) if comm.rank == 0 else None)
    try:
        blocks = check_pure_blocks(X, blocks)
        bad = ""
    except ValueError as e:
        bad = f"rank {comm.rank}: {e}"
    errors = [b for b in comm.allgather(bad) if b]
    if errors:
        raise ValueError("pure-block over a communicator needs blocks that are pure on every "
                         "shard (pass blocks=, e.g. one block per categorical field): "
                         + "; ".join(errors))
    return blocks


def _check_same_examples(comm, y):
    """The primal shards features: every rank must hold the same examples (the same ``y``).
    Example shards given to it would train a wrong model silently."""
    yv = np.asarray(y, dtype=np.float64)
    sig = np.array([yv.size, yv.sum(), yv @ np.cos(np.arange(yv.size))])
    lo, hi = comm.allreduce(-sig, op="max"), comm.allreduce(sig, op="max")
    if not np.array_equal(-lo, hi):
        raise ValueError(
            f"the primal solver over comm= shards features: every rank must hold all the "
            f"examples (the same y), but the ranks' y differ (rank {comm.rank}: {yv.size} "
            f"labels); to give each rank its own examples, use dual=True (or "
            f"solver='pure-block')")


def fit_on_comm(comm, X, y, loss, l1, alpha, fit_intercept, intercept_scaling, dual, solver, *,
                threads, inner_rounds, local_epochs, blocks, max_iter, check_every, seed,
                trace, sample_weight=None):
    """Run ``solver`` with this process as one rank of ``comm``, holding its own shard.

    Shards: examples (columns of ``X``, entries of ``y``) for the dual and ``pure-block``; for
    the primal, features: rank ``r`` holds the ``r``-th block of rows of ``X`` (and all of
    ``y``), and the coefficients are those blocks concatenated in rank order.  Hierarchical
    CoCoA maps onto the real hierarchy: nodes are the ranks of ``comm``, the ``threads``
    workers inside a node are threads over an in-process group (Snap ML's layout).

    ``sample_weight`` (this rank's weights, scaled to mean one over every rank's examples by
    :func:`~roofline.glm._problem.comm_weights`) is taken by the dual only (weighted SDCA,
    :func:`dual_worker`); the primal and ``pure-block`` refuse it.

    Returns
    -------
    (w, b, a, n_iter, converged, info)
        ``w`` the full coefficients and ``b`` the intercept on every rank; ``a`` this rank's
        dual variables (the dual), else ``None``.
    """
    P = comm.size
    d, n_local = X.shape
    if sample_weight is not None and (solver == "pure-block" or not dual):
        raise ValueError(_PRIMAL_WEIGHTS)
    if solver == "pure-block":
        n = int(comm.allreduce(np.array([n_local], dtype=np.int64))[0])
        blocks = _global_blocks(comm, X, blocks)
        order = np.argsort(blocks, kind="stable")
        cuts = np.flatnonzero(np.diff(blocks[order])) + 1
        block_feats = [f.astype(np.int64) for f in np.split(order, cuts)]
        ctx = WorkerConfig(loss, l1, alpha, fit_intercept, intercept_scaling, n, max_iter,
                           check_every, trace, P, 1, 1, local_epochs)
        order_seed = int(comm.broadcast(int(seed)))
        w, b, it, conv = pure_block_worker(ctx, comm, X, y, block_feats, order_seed)
        info = {"n_workers": P, "n_blocks": len(block_feats), "comm": dict(comm.stats)}
        return w, b, None, it, conv, info
    M = 1 if solver == "cocoa" else int(threads)
    R = 1 if solver == "cocoa" else int(inner_rounds)
    n = int(comm.allreduce(np.array([n_local], dtype=np.int64))[0]) if dual else n_local
    if not dual:
        _check_same_examples(comm, y)
    share = n_local if dual else d
    if M > max(share, 1):
        raise ValueError(f"{M} workers per node exceed the {share} "
                         f"{'examples' if dual else 'features'} of rank {comm.rank}'s shard")
    ctx = WorkerConfig(loss, l1, alpha, fit_intercept, intercept_scaling, n, max_iter,
                       check_every, trace, P, M, R, local_epochs)
    node = InProcessGroup(M, name=f"node{comm.rank}")
    crosses = [comm] + [comm.dup() for _ in range(M - 1)]  # one cross-node channel per thread
    parts = np.array_split(np.arange(share), M)
    seeds = [_worker_seed(seed, comm.rank * M + m) for m in range(M)]

    def one(m):
        world = _TwoLevel(node.communicator(m), crosses[m]) if M > 1 else comm
        comms = (world, node.communicator(m), crosses[m])
        if dual:
            sw = None if sample_weight is None else sample_weight[parts[m]]
            return dual_worker(ctx, comms, X[:, parts[m]], y[parts[m]], seeds[m], sw)
        return primal_worker(ctx, comms, X[parts[m]], y, seeds[m])

    out = run_in_threads(one, M, [node])
    it, conv = out[0][2], out[0][3]
    if dual:
        a = np.concatenate([o[0] for o in out]) if M > 1 else out[0][0]
        pb = GLMProblem(X, y, loss, l1, alpha, fit_intercept, intercept_scaling, primal=False,
                        n_total=n)
        w, b = pb.dual_primal(out[0][1])
        w = np.array(w)
    else:
        a = None
        mine = np.concatenate([o[0] for o in out])
        w = np.concatenate(comm.allgather(mine))
        b = float(comm.broadcast(out[0][1]))
    info = {"n_workers": P * M, "n_nodes": P, "per_node": M, "inner_rounds": R,
            "comm": dict(comm.stats)}
    return w, b, a, it, conv, info
