"""Out-of-core coordinate descent (Snap ML's streaming pipeline) over a DataSource.

The data never need to fit in memory: only the shared vector ``v = X a`` (one float per
feature), a bounded number of chunks and, unless ``dual_on_disk``, the dual variables (one
float per example) do.

Why the order of the steps matters
----------------------------------
The first version visited the chunks in the source's order every pass, each chunk's examples
in a fresh permutation of their own.  Measured on 30k Criteo-like examples (logistic,
``C = 0.3``), with the sweeps simulated in memory so that only the order differs: after 40
passes the relative suboptimality was 3e-9 with one chunk (a full permutation), 2.1e-3 with 6
chunks and 7.1e-3 with 30, and a plain cyclic order (no permutation) 1.2e-2.  The steps, ``v``
(exact after every chunk) and the number of steps per pass were the same: only the order
differed.  Two defects, each measured on its own:

* *a fixed chunk order is cyclic coordinate descent over the chunks*.  The hot features (and
  the intercept, a feature of every example) couple all the dual variables strongly (a step's
  curvature ``||x_i||^2 / lam_n`` was ~12 there); cyclic coordinate descent is known to be
  slow on such strongly coupled directions, where a random permutation is not.  A sliding
  buffer that mixes each chunk's examples with the next few chunks' (the source's order kept)
  still left 4.9e-3 at 30 chunks (buffer of 2) and 1.2e-4 (buffer of 8) after 40 passes;
* *fixed blocks stay fixed*: visiting the chunks in a random order per pass, each one's
  examples on their own, still left 2.9e-4 at 30 chunks after 40 passes (not monotone: 4e-3
  after 10 passes, 5e-3 after 20): the examples of one chunk always move together, as one
  coordinate of a coupled system, and the redistribution of dual mass between chunks is left to
  the weak part of the curvature.

A random chunk order *and* chunks regrouped at random each pass fix both: with the examples of
``shuffle = B`` chunks, drawn at random, swept in one joint permutation, the same 30 chunks
reached 1.6e-11 (``B = 2``) and 2e-12 (``B = 5``) after 40 passes, as one chunk does.  That is
the schedule here: the first pass streams the source in its order (each chunk's examples
permuted) and keeps the validated chunks in a cache (``cache="disk"``: one raw file a chunk in
``workdir``; ``"memory"``); each later pass draws a permutation of the chunks and sweeps them
``B`` at a time, reading the next group from the cache on a background thread while the
current one trains.  ``shuffle=0`` is the first version's schedule (the source re-read every
pass, no cache).

Dual state on disk and several ranks
------------------------------------
``dual_on_disk=True`` keeps each chunk's dual variables in a file of their own (an ``.npy``,
replaced atomically after each visit), so that only the resident groups' duals are in memory.

``comm=``: each rank streams its own DataSource (its shards: ``rank`` / ``size`` of the
shard and config sources) and the ranks run CoCoA+ (the round loop of
:func:`roofline.glm._cocoa.cocoa_rounds`): a round is one local pass of the schedule above
against ``v`` frozen at the round's start with the rank's own steps amplified
``sigma' = K`` times, and the ranks' changes to ``v`` are added (``gamma = 1``).  One process
is the case ``K = 1`` of the same loop.  Over processes the changes, and the checks' ``X a``,
are all-reduced at the features the rank's examples touch only (a Kylix sparse plan made after
the first pass, as in-memory CoCoA does); each feature's entry of ``v`` is then current on the
ranks that touch it, and ``||v||^2`` sums each entry once, on the lowest of them (its owner).
The model returned is the owners' entries, all-reduced once at the end: the same on every rank.

Objective and scaling: exactly those of :func:`roofline.glm.fit_glm` with ``dual=True``
(l2 penalty; with ``fit_intercept`` the intercept is a regularised constant feature).
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import tempfile
import time

import numpy as np
import scipy.sparse as sp

from roofline import gmat
from roofline.comm import InProcessGroup

from . import _losses, cd
from ._cocoa import WorkerConfig, cocoa_rounds
from ._problem import (
    GLMResult,
    Trace,
    check_on_every_rank,
    positive,
    verbose_logging,
    warn_not_converged,
)

__all__ = ["fit_glm_stream"]

logger = logging.getLogger(__name__)

#: Where the first pass keeps the chunks for the shuffled passes (``cache=``).
_CACHES = ("disk", "memory")

_NAME = "scd-stream"


def _chunks(source, depth, loss_code, d):
    """Validated ``(k, X, y)`` chunks of one pass, prefetched ``depth`` ahead."""
    src = source.prefetch(depth) if depth else source
    for i, mb in enumerate(src):
        X = mb.X
        if not gmat.is_sparse(X):
            raise TypeError(f"chunk {i} of {source!r}: X must be CSC, got a dense array")
        gmat.check_csc(X, f"chunk {i} X")
        if X.shape[0] != d:
            raise ValueError(f"chunk {i} of {source!r} has {X.shape[0]} features, but the "
                             f"source declares n_features={d}")
        if mb.y is None:
            raise ValueError(f"chunk {i} of {source!r} has no labels (y is None)")
        if mb.w is not None and np.any(np.asarray(mb.w) != 1):
            raise ValueError(f"chunk {i} of {source!r} has example weights (w), which "
                             "fit_glm_stream does not take: use fit_glm(sample_weight=) in "
                             "memory, or a source without weights")
        y = _losses.check_labels(mb.y, _losses.LOSSES[loss_code], name=f"chunk {i} y",
                                   single_class_ok=True, margin=True)
        yield i, X, y


# ---------------------------------------------------------------------------------------------
# where the chunks and the dual variables live


def _save_atomic(path, save):
    """``save(f)`` into a temporary file beside ``path``, then renamed onto it: a reader never
    sees a half-written file."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        save(f)
    os.replace(tmp, path)


class _MemoryChunks:
    """The chunks ``(X, y, colsq)`` kept as they came (``cache="memory"``)."""

    def __init__(self):
        self.parts = []

    def put(self, k, X, y, colsq):
        self.parts.append((X, y, colsq))

    def get(self, k):
        return self.parts[k]


class _DiskChunks:
    """One ``chunk_<k>.bin`` a chunk in ``directory``: its CSC arrays, labels and squared norms
    back to back (each padded to 8 bytes), read back in one call; the layout stays in memory.

    (A ``.npz`` a chunk read ~4 ms per 1000 Criteo-like examples, most of it the zip layer's
    CRC, and the training waited on it; one raw read is what the disk gives.)"""

    def __init__(self, directory):
        self.dir = directory
        self.layout = []  # per chunk: shape, nbytes, [(dtype, count, offset)] * 5

    def _path(self, k):
        return os.path.join(self.dir, f"chunk_{k}.bin")

    def put(self, k, X, y, colsq):
        nnz = int(X.indptr[-1])
        arrays = [np.ascontiguousarray(a) for a in
                  (X.data[:nnz], X.indices[:nnz], X.indptr, y, colsq)]
        fields, off = [], 0
        for a in arrays:
            fields.append((a.dtype, a.size, off))
            off += -(-a.nbytes // 8) * 8

        def save(f):
            for a, (_, _, o) in zip(arrays, fields, strict=True):
                f.seek(o)
                f.write(a.tobytes())
            f.truncate(off)

        _save_atomic(self._path(k), save)
        self.layout.append((X.shape, off, fields))

    def get(self, k):
        shape, nbytes, fields = self.layout[k]
        buf = np.empty(nbytes, np.uint8)
        with open(self._path(k), "rb") as f:
            got = f.readinto(buf)
        if got != nbytes:
            raise OSError(f"{self._path(k)}: read {got} of its {nbytes} bytes (the chunk cache "
                          "changed under the run)")
        data, indices, indptr, y, colsq = (np.frombuffer(buf, dt, n, o) for dt, n, o in fields)
        return gmat.csc_from_arrays(sp.csc_matrix, data, indices, indptr, shape), y, colsq


class _MemoryDuals:
    """The dual variables of every example in one array; chunk ``k``'s are a slice (views
    updated in place)."""

    def __init__(self, n):
        self.a = np.zeros(n)
        self.cuts = [0]

    def add(self, k, m):
        stop = self.cuts[-1] + m
        if stop > self.a.size:
            raise ValueError(f"chunk {k} ends at example {stop}, past the source's n_examples="
                             f"{self.a.size}")
        self.cuts.append(stop)

    def get(self, k):
        return self.a[self.cuts[k]:self.cuts[k + 1]]

    def put(self, k, a):
        view = self.get(k)
        if a is not view:
            view[:] = a

    def all(self):
        return self.a[:self.cuts[-1]]


class _DiskDuals:
    """Chunk ``k``'s dual variables in ``dual_<k>.npy`` of ``directory`` (read when its chunk
    trains, replaced atomically after)."""

    def __init__(self, directory):
        self.dir = directory
        self.sizes = []

    def _path(self, k):
        return os.path.join(self.dir, f"dual_{k}.npy")

    def add(self, k, m):
        self.sizes.append(m)
        self.put(k, np.zeros(m))

    def get(self, k):
        return np.load(self._path(k))

    def put(self, k, a):
        _save_atomic(self._path(k), lambda f: np.save(f, np.asarray(a, dtype=np.float64)))

    def all(self):
        return None


def _join(parts):
    """One CSC matrix (and labels, squared norms) of the chunks ``parts`` side by side."""
    if len(parts) == 1:
        return parts[0]
    Xs = [p[0] for p in parts]
    nnz = np.cumsum([0] + [X.indptr[-1] for X in Xs])
    big = nnz[-1] >= np.iinfo(np.int32).max
    idx_t = np.int64 if big else np.result_type(*[X.indices.dtype for X in Xs])
    indptr = np.concatenate([Xs[0].indptr[:1].astype(np.int64)]
                            + [X.indptr[1:].astype(np.int64) + off
                               for X, off in zip(Xs, nnz[:-1], strict=True)]).astype(
                                   np.int64 if big else idx_t)
    indices = np.concatenate([X.indices[:X.indptr[-1]] for X in Xs]).astype(idx_t, copy=False)
    data = np.concatenate([X.data[:X.indptr[-1]] for X in Xs])
    X = gmat.csc_from_arrays(sp.csc_matrix, data, indices, indptr,
                             (Xs[0].shape[0], sum(X.shape[1] for X in Xs)))
    return X, np.concatenate([p[1] for p in parts]), np.concatenate([p[2] for p in parts])


# ---------------------------------------------------------------------------------------------
# the solver


def fit_glm_stream(
    source,
    *,
    loss,
    alpha,
    fit_intercept=True,
    intercept_scaling=1.0,
    tol=1e-6,
    max_iter=100,
    check_every=1,
    random_state=None,
    prefetch_depth=1,
    shuffle=4,
    cache="disk",
    workdir=None,
    dual_on_disk=False,
    comm=None,
    verbose=0,
    on_chunk=None,
):
    """Train an l2-regularised GLM by SDCA, chunk by chunk, from a streaming DataSource.

    Parameters
    ----------
    source : DataSource
        Yields minibatches (``X``: ``n_features x n`` CSC, ``y``) of the same examples in the
        same order every pass (the chunks); with ``comm=``, this rank's examples (its shards).
    loss : {"squared", "logistic", "hinge"}
    alpha : float
        As in :func:`fit_glm` (mean loss + ``alpha ||w||^2 / 2``, the mean over every rank's
        examples).
    fit_intercept, intercept_scaling, tol, max_iter, check_every, random_state, verbose
        As in :func:`fit_glm`; ``max_iter`` counts training passes, and every
        ``check_every``-th pass is followed by a streamed certificate pass.
    prefetch_depth : int
        Chunks produced ahead of training on the first pass (1: double buffering; 0: no
        prefetch thread); on the shuffled passes over a disk cache, any positive value reads
        the next group of chunks while the current one trains.
    shuffle : int, default 4
        ``B >= 1``: after the first pass, each pass visits the chunks in a fresh random order,
        ``B`` at a time, the examples of each group of ``B`` in one joint random permutation
        (a shuffle across chunks; at most ``B`` chunks, ``2 B`` with the read-ahead, are in
        memory).  ``0``: the source's order every pass, each chunk's examples permuted on their
        own (no cache; converges more slowly the more chunks there are: see the module's
        notes).
    cache : {"disk", "memory"}
        Where the first pass keeps the chunks for the shuffled passes: ``"disk"``, a file a
        chunk (``chunk_<k>.bin``) in ``workdir``; ``"memory"``, the chunks as the source gave
        them (data that fit).  Unused with ``shuffle=0``.
    workdir : str, optional
        The directory of the disk cache and of the dual files (``dual_<k>.npy``, left there
        when given); ``None``: a temporary directory, removed when the fit returns.  Over
        ``comm=`` each rank uses its subdirectory ``rank<r>``.
    dual_on_disk : bool
        Keep chunk ``k``'s dual variables in ``workdir/dual_<k>.npy`` instead of in memory;
        the iterates are the same bit for bit.
    comm : roofline.comm.Communicator, optional
        Run as one rank of ``comm`` (out-of-core CoCoA+, every rank calls with its own
        ``source``); every rank returns the same model.
    on_chunk : callable, optional
        ``on_chunk(pass_index, chunk_index)``, called before training on each chunk.

    Returns
    -------
    GLMResult
        ``dual_coef`` holds this rank's dual variables, chunk after chunk in the source's order
        (``None`` with ``dual_on_disk``); ``info`` has ``n_chunks``, ``shuffle``, ``cache``,
        ``dual_on_disk``, ``n_ranks`` and ``sparse_allreduce`` (over processes, ``v`` is
        all-reduced at the features each rank's examples touch).

    Raises
    ------
    ValueError, TypeError
        A bad argument, or a chunk that does not fit (too many or too few features, no or bad
        labels, a different size than in the first pass: the chunk is named).
    """
    t_start = time.perf_counter()
    loss = _losses.resolve_loss(loss, allowed=_losses.CD_LOSSES)
    loss_code = _losses.LOSS_CODES[loss]
    alpha = positive(alpha, "alpha")
    tol = positive(tol, "tol")
    max_iter = positive(max_iter, "max_iter", integer=True)
    check_every = positive(check_every, "check_every", integer=True)
    if not isinstance(prefetch_depth, (int, np.integer)) or prefetch_depth < 0:
        raise ValueError(f"prefetch_depth must be a non-negative integer, got {prefetch_depth!r}")
    if isinstance(shuffle, bool) or not isinstance(shuffle, (int, np.integer)) or shuffle < 0:
        raise ValueError(f"shuffle must be a non-negative integer (chunks mixed per group), got "
                         f"{shuffle!r}")
    if cache not in _CACHES:
        raise ValueError(f"cache must be one of {_CACHES}, got {cache!r}")
    world = comm if comm is not None else InProcessGroup(1, name="stream").communicator(0)
    K = world.size
    tmp = None
    if workdir is None and ((shuffle and cache == "disk") or dual_on_disk):
        tmp = tempfile.TemporaryDirectory(prefix="roofline-stream-")
    try:
        base = tmp.name if tmp is not None else workdir
        if base is not None and K > 1:
            base = os.path.join(base, f"rank{world.rank}")
        if base is not None:
            os.makedirs(base, exist_ok=True)
        run = _StreamRun(source, world, loss, loss_code, alpha, fit_intercept, intercept_scaling,
                         tol, max_iter, check_every, random_state, prefetch_depth, int(shuffle),
                         cache, base, dual_on_disk, verbose, on_chunk)
        return run.fit(t_start)
    finally:
        if tmp is not None:
            tmp.cleanup()


class _StreamRun:
    """One rank's state of :func:`fit_glm_stream` and its passes."""

    def __init__(self, source, world, loss, loss_code, alpha, fit_intercept, intercept_scaling,
                 tol, max_iter, check_every, random_state, depth, shuffle, cache, base,
                 dual_on_disk, verbose, on_chunk):
        self.source, self.world = source, world
        self.loss, self.code, self.alpha = loss, loss_code, alpha
        self.fit_intercept = fit_intercept
        # None (GLMSolverOptions' default since issue 34): the constant feature of value 1,
        # the streamed dual's regularised intercept as before
        scaling = 1.0 if intercept_scaling is None else intercept_scaling
        self.icpt = float(scaling) if fit_intercept else 0.0
        self.tol, self.max_iter, self.check_every = tol, max_iter, check_every
        self.depth, self.shuffle, self.cache = depth, shuffle, cache
        self.dual_on_disk, self.verbose, self.on_chunk = dual_on_disk, verbose, on_chunk
        self.base = base
        self.d = int(source.n_features)
        rng = np.random.default_rng(random_state)
        if world.size > 1:  # one seed for the job, a stream per rank
            seed = world.broadcast(int(rng.integers(2**62)))
            rng = np.random.default_rng([seed, world.rank])
        self.rng = rng
        self.chunks = None
        if shuffle:
            self.chunks = _DiskChunks(base) if cache == "disk" else _MemoryChunks()
        self.sizes = []  # the chunks' example counts (from the first pass)
        self.n_pass = 0
        # over processes, the rounds' changes of v and the checks' X a are all-reduced at the
        # features this rank's examples touch (a Kylix sparse plan, made after pass 1), as
        # in-memory CoCoA does; in-process groups keep the dense shared-memory sum
        self.sparse = world.size > 1 and not getattr(world, "shares_process", True)
        self.touched = np.zeros(self.d, bool) if self.sparse else None
        self.plan = None

    # -- the passes ----------------------------------------------------------------------------

    def _count(self):
        """This rank's examples: the source's count, or one counting pass."""
        n = self.source.n_examples
        if n is None:
            n = sum(X.shape[1] for _, X, _ in _chunks(self.source, self.depth, self.code, self.d))
            logger.info("counted %d examples in %r", n, self.source)
        return int(n)

    def _step(self, X, y, a, colsq, v, sigma, d_k):
        perm = self.rng.permutation(X.shape[1]).astype(np.int64)
        # serial: the prefetch thread may be running numba parallel kernels of the source
        cd.dual_epoch(X, y, a, v, perm, loss=self.code, lam_n=self.lam_n, colsq=colsq,
                      icpt=self.icpt, sigma=sigma, d=d_k, parallel=False)

    def _first_pass(self, v, sigma, d_k):
        """Stream the source: validate and keep the chunks, train each in its turn."""
        classes = np.zeros(2)
        for k, X, y in _chunks(self.source, self.depth, self.code, self.d):
            m = X.shape[1]
            self.duals.add(k, m)
            self.sizes.append(m)
            if self.on_chunk is not None:
                self.on_chunk(self.n_pass, k)
            colsq = cd.col_sqnorms(X, parallel=False)
            if self.chunks is not None:
                self.chunks.put(k, X, y, colsq)
            if self.touched is not None:
                self.touched[X.indices[:X.indptr[-1]]] = True
            classes += (np.count_nonzero(y > 0), np.count_nonzero(y <= 0))
            a = self.duals.get(k)
            self._step(X, y, a, colsq, v, sigma, d_k)
            self.duals.put(k, a)
        n_seen = sum(self.sizes)
        if n_seen != self.n_local:
            raise ValueError(f"the first pass of {self.source!r} covered {n_seen} examples, but "
                             f"the source declares n_examples={self.n_local}")
        return classes

    def _source_pass(self, v, sigma, d_k):
        """``shuffle=0``: the source's order, each chunk on its own."""
        n_chunks = 0
        for k, X, y in _chunks(self.source, self.depth, self.code, self.d):
            self._check_size(k, X, f"pass {self.n_pass}")
            if self.on_chunk is not None:
                self.on_chunk(self.n_pass, k)
            a = self.duals.get(k)
            self._step(X, y, a, cd.col_sqnorms(X, parallel=False), v, sigma, d_k)
            self.duals.put(k, a)
            n_chunks += 1
        self._check_count(n_chunks, f"pass {self.n_pass}")

    def _check_size(self, k, X, what):
        if k >= len(self.sizes) or X.shape[1] != self.sizes[k]:
            first = self.sizes[k] if k < len(self.sizes) else "no"
            raise ValueError(f"chunk {k} of {self.source!r} has {X.shape[1]} examples in {what} "
                             f"but {first} in the first pass: the source must give the same "
                             "chunks every pass")

    def _check_count(self, n_chunks, what):
        if n_chunks != len(self.sizes):
            raise ValueError(f"{what} of {self.source!r} gave {n_chunks} chunks, the first pass "
                             f"{len(self.sizes)}")

    def _load(self, group):
        return [self.chunks.get(k) + (self.duals.get(k),) for k in group]

    def _groups(self, groups):
        """The loaded groups, the next one read on a thread while the current one trains."""
        if not (self.depth and self.cache == "disk") or len(groups) < 2:
            for g in groups:
                yield g, self._load(g)
            return
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="stream-read") as ex:
            nxt = ex.submit(self._load, groups[0])
            for i, g in enumerate(groups):
                parts = nxt.result()
                if i + 1 < len(groups):
                    nxt = ex.submit(self._load, groups[i + 1])
                yield g, parts

    def _shuffled_pass(self, v, sigma, d_k):
        """A random chunk order, ``shuffle`` chunks at a time in one joint permutation."""
        order = self.rng.permutation(len(self.sizes))
        B = self.shuffle
        groups = [order[i:i + B] for i in range(0, order.size, B)]
        for g, parts in self._groups(groups):
            if self.on_chunk is not None:
                for k in g:
                    self.on_chunk(self.n_pass, int(k))
            X, y, colsq = _join([p[:3] for p in parts])
            a = parts[0][3] if len(parts) == 1 else np.concatenate([p[3] for p in parts])
            self._step(X, y, a, colsq, v, sigma, d_k)
            cut = 0
            for k, p in zip(g, parts, strict=True):
                m = p[3].size
                self.duals.put(int(k), a[cut:cut + m])
                cut += m

    def _local_solve(self, v_local, sigma, d_k):
        """One local pass (CoCoA+'s local solver): ``d_k`` gets this rank's change of ``v``."""
        self.n_pass += 1
        single = self.world.size == 1
        v0 = v_local.copy() if single else None
        dk = None if single else d_k  # one process: v_local is v itself
        if self.n_pass == 1:
            classes = self._every_rank(lambda: self._first_pass(v_local, sigma, dk))
            classes = self.world.allreduce(classes)
            if _losses.LOSS_LABELS[self.loss] != "real" and classes.min() == 0:
                raise ValueError("y holds a single class; a classifier needs both classes")
        elif self.shuffle:
            self._shuffled_pass(v_local, sigma, dk)
        else:
            self._every_rank(lambda: self._source_pass(v_local, sigma, dk))
        if single:
            np.subtract(v_local, v0, out=d_k)

    def _sparse_setup(self, size):
        """The sparse plan over this rank's touched features (and the intercept slot), and
        the entries of ``v`` this rank owns (the lowest rank touching each feature), whose
        squares sum to ``||v||^2`` over the ranks: the untouched entries of a rank's ``v``
        are stale between checks, never read by its steps.  Collective, once."""
        d, rank = self.d, self.world.rank
        self.idx = np.concatenate([np.flatnonzero(self.touched),
                                   np.arange(d, size)]).astype(np.int64)
        self.plan = self.world.sparse_plan(self.idx)
        first = np.where(self.touched, rank, self.world.size).astype(np.float64)
        owner = -self.world.allreduce(-first, op="max")
        self.own = np.flatnonzero(owner == rank)
        if size > d and rank == 0:
            self.own = np.concatenate([self.own, np.arange(d, size)])

    def _cross_reduce(self, dv):
        """cocoa_rounds' sum of the ranks' changes, at this rank's touched entries."""
        if self.plan is None:
            self._sparse_setup(dv.size)
        out = np.zeros_like(dv)
        out[self.idx] = self.plan.reduce(dv[self.idx])
        return out

    def _own_sq(self, v):
        return float(v[self.own] @ v[self.own])

    def _certificate(self, v):
        """One streamed pass: ``P(w)`` at ``w = v / lam_n``, the duality gap, and the exact
        ``X a`` (returned, to replace ``v`` and drop the drift of the incremental updates)."""
        d, icpt = self.d, self.icpt
        wf = v / self.lam_n
        b = icpt * wf[d] if icpt else 0.0
        acc = np.zeros(v.size + 2)  # [X a, icpt sum a, loss sum, conjugate sum]
        v_new = acc[:v.size]
        what = f"the check after pass {self.n_pass}"
        if self.shuffle:  # from the cache, the next chunk (and its duals) read ahead
            parts = ((p[0][0], p[0][1], p[0][3])
                     for _, p in self._groups([[k] for k in range(len(self.sizes))]))
        else:
            parts = ((X, y, None) for _, X, y in _chunks(self.source, self.depth, self.code, d))
        n_chunks = 0
        for k, (X, y, a) in enumerate(parts):
            self._check_size(k, X, what)
            n_chunks += 1
            if a is None:
                a = self.duals.get(k)
            # serial: the prefetch thread may be running numba parallel kernels of the source
            z = cd.matvec(X, wf[:d], None, b, parallel=False)
            acc[-2] += cd.loss_sum(z, y, self.code)
            acc[-1] += cd.conj_sum(a, y, self.code)
            cd.matvec_t(X, a, v_new[:d])
            if icpt:
                v_new[d] += icpt * a.sum()
        self._check_count(n_chunks, what)
        if self.sparse:
            if self.plan is None:  # (cocoa_rounds reduces before it checks: a safeguard)
                self._sparse_setup(v.size)
            x = self.plan.reduce(v_new[self.idx])
            v_new = v.copy()
            v_new[self.idx] = x
            L, conj, vv, ww = self.world.allreduce(
                np.array([acc[-2], acc[-1], self._own_sq(v), self._own_sq(v_new)]))
        else:
            acc = self.world.allreduce(acc)
            v_new, L, conj = acc[:v.size], acc[-2], acc[-1]
            vv, ww = float(v @ v), float(v_new @ v_new)
        n = self.n
        P = (L + 0.5 * vv / self.lam_n) / n
        D = (conj - 0.5 * ww / self.lam_n) / n
        return v_new, P, max(P - D, 0.0)

    def fit(self, t_start):
        world = self.world
        self.n_local = self._every_rank(self._count)
        self.n = int(world.allreduce(np.array([self.n_local], dtype=np.int64))[0])
        if self.n == 0 or self.d == 0:
            raise ValueError(f"source {self.source!r} is empty ({self.d} features, {self.n} "
                             "examples)")
        self.lam_n = self.alpha * self.n
        self.duals = _DiskDuals(self.base) if self.dual_on_disk else _MemoryDuals(self.n_local)
        trace = Trace(self.tol, self.verbose)
        ctx = WorkerConfig(self.code, False, self.alpha, self.fit_intercept, self.icpt, self.n,
                           self.max_iter, self.check_every, trace, world.size, 1, 1, 1.0)
        node = InProcessGroup(1, name="node").communicator(0)
        v0 = np.zeros(self.d + (1 if self.icpt else 0))
        with verbose_logging(self.verbose):
            v, it, conv = cocoa_rounds(ctx, (world, node, world), v0, self._local_solve,
                                       self._certificate,
                                       self._cross_reduce if self.sparse else None)
        if self.sparse:  # every entry of v, the same on every rank: the owners' sum
            mine = np.zeros_like(v)
            mine[self.own] = v[self.own]
            v = world.allreduce(mine)
        if world.size > 1:  # rank 0 recorded the trace
            trace.P, trace.G, trace.T, trace.check = world.broadcast(
                (trace.P, trace.G, trace.T, trace.check))
        if not conv:
            warn_not_converged(_NAME, self.tol, it, trace.G[-1], trace.P[-1], stacklevel=4)
        wf = v / self.lam_n
        return GLMResult(
            coef=wf[:self.d].copy(),
            intercept=float(self.icpt * wf[self.d]) if self.icpt else 0.0,
            n_iter=it,
            objective=np.asarray(trace.P),
            gap_history=np.asarray(trace.G),
            times=np.asarray(trace.T),
            gap=float(trace.G[-1]),
            converged=conv,
            time=time.perf_counter() - t_start,
            check_time=trace.check,
            dual_coef=self.duals.all(),
            solver=_NAME,
            loss=self.loss,
            penalty="l2",
            alpha=self.alpha,
            dual=True,
            info={"n_chunks": len(self.sizes), "shuffle": self.shuffle,
                  "cache": self.cache if self.shuffle else None,
                  "dual_on_disk": bool(self.dual_on_disk), "n_ranks": world.size,
                  "sparse_allreduce": self.sparse},
        )

    def _every_rank(self, fn):
        """``fn()``, its error raised on every rank over a communicator of several."""
        if self.world.size == 1:
            return fn()
        return check_on_every_rank(self.world, fn, "fit_glm_stream(comm=)")
