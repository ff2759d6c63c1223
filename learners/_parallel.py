"""Data-parallel minibatch training: BIDMach's ParLearner over a :mod:`roofline.comm` group.

Every rank trains a replica of the model on its own minibatches; every ``sync_every`` minibatches
the replicas are combined (:class:`ModelSync`):

* **model averaging** (``elastic=1``, the default).  All ranks hold the same *centre* ``c`` (the
  model at the last sync).  Rank ``r`` sends the change ``w_r - c`` of the features it changed
  since then through one sparse all-reduce (Kylix); every rank adds the mean change (the sum
  over the ranks divided by the number of ranks whose replica moved) to the centre and copies
  the centre into its replica: the dense all-reduce of ``w_r - c`` computed sparsely.  The sums
  are bit-identical on every rank, so the replicas are bit-identical after every sync.
* **elastic averaging** (``0 < elastic < 1``, BIDMach's ``elastic_weight``): the centre moves
  the same way, but each replica moves only ``elastic`` of the way towards it
  (``w_r += elastic * (c - w_r)`` on the exchanged features) and keeps the rest of its own
  deviation, which it sends again at the next sync.  The replicas differ between syncs; at the
  end of training every replica is set to the centre.

The exchanged index set of a rank is the set of features where its replica differs from the
centre (computed exactly, so any optimizer or mixin is allowed).  The Kylix plan is configured
for the *cumulative* set (every feature the rank has exchanged so far) and reused while no rank
changes a feature outside its plan, which is the steady state from the second pass on; a
rebuild grows the plan and gathers the union of the ranks' sets (what every rank receives, so
that all replicas update the same features).  Dense minibatches (every feature changes) use the
dense all-reduce instead.  The intercept and a few flags (pass finished, replica moved, plan
outgrown, stop) travel in one small dense all-reduce per sync.

The power-law schedule (``block=b``, Kylix/BIDMach's point that rare features need rare
exchanges): the first pass counts every feature's occurrences; at its end the ranks add their
counts and rank the features (the same order everywhere).  From then on sync round ``s``
exchanges the features of tiers ``t`` with ``s % 2^t == 0``: tier 0 = the ``b`` most frequent,
tier 1 the next ``b``, tier 2 the next ``2b``, ... (capped at ``max_tier``); a feature's pending
change waits in its replica until its tier's turn.  Each level keeps its own Kylix plan.  The
last sync of a pass exchanges every tier, so the replicas are identical at pass ends (and
between, on the tiers just exchanged).

Optimizer state (ADAGrad's sums of squared gradients, momentum) stays local to each rank: it
is never averaged, so each rank's step sizes reflect the gradients it has seen.

The factor models (:class:`FactorSync`: k-means, NMF, LDA, matrix factorization) are combined
by a dense all-reduce of their arrays (:meth:`~roofline.learners.Model.parameters`, plus the
running statistics their minibatch step keeps), each by its own rule: k-means centers weighted
by the weight each replica's centers absorbed since the last sync (the counts summed, so the
per-center learning rates stay those of one process that saw every minibatch), NMF components
and their accumulated statistics averaged, LDA's ``lambda`` averaged (one online step on the
ranks' minibatches together) with the update counter ``n_batch_iter`` advanced by the steps a
replica took (``rho_t`` decays per averaged step) and ``documents_seen`` summed, the MF item
factors averaged and the global mean combined as a running mean over every rank's ratings.
"""

from __future__ import annotations

import numpy as np

from roofline import gmat

__all__ = ["FactorSync", "ModelSync", "check_comm"]


def check_comm(comm):
    """Check that ``comm`` looks like a :class:`roofline.comm.Communicator`.

    Parameters
    ----------
    comm : object
        The ``comm=`` argument of :class:`~roofline.learners.Learner`.

    Returns
    -------
    Communicator
        ``comm`` itself.

    Raises
    ------
    TypeError
        When it lacks one of the attributes the data-parallel learner uses.
    """
    need = ("rank", "size", "allreduce", "sparse_plan", "allgather", "broadcast")
    missing = [a for a in need if not hasattr(comm, a)]
    if missing:
        raise TypeError(f"comm must be a roofline.comm.Communicator (rank, size, allreduce, "
                        f"sparse_plan, allgather, broadcast), got {type(comm).__name__} "
                        f"without {', '.join(missing)}")
    return comm


def _host(a):
    return np.ascontiguousarray(gmat.to_device(a, "cpu"))


class ModelSync:
    """Synchronise the replicas of a GLM-like model (``coef`` of shape ``(k, n)``, ``intercept``
    of shape ``(k,)``) across the ranks of ``comm``.

    Parameters
    ----------
    comm : Communicator
    model : Model
        Initialised; its parameters are replaced by rank 0's on construction (collective).
    elastic : float
        1 for model averaging, ``0 < elastic < 1`` for elastic averaging.
    sparse : bool
        Sparse (Kylix) exchange of the changed features, else a dense all-reduce of the change.
    grow : bool
        Sparse sync: the Kylix plan covers every feature exchanged so far (reused once stable),
        else the features changed since the last sync.
    block : int
        The power-law schedule's block ``b`` (0: every changed feature at every sync).
    max_tier : int
        The schedule's last tier (exchanged every ``2^max_tier`` syncs at least).

    Attributes
    ----------
    stats : dict
        ``syncs``, ``plans`` (Kylix plans configured), ``plan_reuses``, ``features``
        (exchanged feature rows summed over syncs, this rank).
    """

    def __init__(self, comm, model, *, elastic: float = 1.0, sparse: bool = True,
                 grow: bool = True, block: int = 0, max_tier: int = 8):
        self.comm, self.model = comm, model
        self.alpha = float(elastic)
        self.sparse = bool(sparse)
        self.grow = bool(grow)
        coef = comm.broadcast(_host(model.coef), root=0)
        b = comm.broadcast(_host(model.intercept), root=0)
        model.set_parameters(gmat.to_device(coef, model.device), gmat.to_device(b, model.device))
        xp = gmat.get_array_module(model.coef)
        self.center = xp.array(model.coef, copy=True, order="F")
        self.center_b = _host(model.intercept).astype(np.float64)
        self.plan = None
        self.plan_idx = np.empty(0, np.int64)
        self.in_plan = np.zeros(model.coef.shape[1], bool)  # mask of plan_idx
        self.union = np.empty(0, np.int64)
        # the power-law schedule: feature counts of the first pass, then tiers
        self.block, self.max_tier = int(block), int(max_tier)
        self.counts = np.zeros(model.coef.shape[1], np.float64) if self.block else None
        self.tier = None
        self._round = 0
        self._level = -1
        self._slots = {}
        self.stats = {"syncs": 0, "plans": 0, "plan_reuses": 0, "features": 0,
                      "bytes_union": 0, "bytes_reduce": 0}

    def window(self, sync_every: int) -> int:
        """Training minibatches this rank takes before the next sync.

        Parameters
        ----------
        sync_every : int
            The learner's ``sync_every``.

        Returns
        -------
        int
            ``sync_every``.
        """
        return int(sync_every)

    def _changed(self):
        xp = gmat.get_array_module(self.model.coef)
        return _host(xp.flatnonzero(xp.any(self.model.coef != self.center, axis=0))).astype(
            np.int64)

    def observe(self, X) -> None:
        """Count the features of a training minibatch (the first pass, for the schedule).

        Parameters
        ----------
        X : CSC matrix, shape (n_features, n)
            The minibatch's examples (dense minibatches are not counted).
        """
        if self.counts is not None and self.tier is None and gmat.is_sparse(X):
            idx = _host(X.indices)
            self.counts += np.bincount(idx, minlength=self.counts.size)[: self.counts.size]

    def end_pass(self) -> None:
        """After a pass: once, rank the features by their count over all ranks and set each
        feature's tier (collective).  Tier 0: the ``block`` most frequent; tier ``t >= 1``:
        positions ``[block 2^(t-1), block 2^t)``, capped at ``max_tier``."""
        if self.counts is None or self.tier is not None or not self.sparse:
            return
        total = self.comm.allreduce(self.counts)
        order = np.argsort(-total, kind="stable")
        pos = np.empty(order.size, np.int64)
        pos[order] = np.arange(order.size)
        tier = np.zeros(order.size, np.int64)
        big = pos >= self.block
        tier[big] = np.floor(np.log2(pos[big] / self.block)).astype(np.int64) + 1
        self.tier = np.minimum(tier, self.max_tier).astype(np.int8)
        self.counts = None

    def _select(self, level):
        """Switch to the Kylix plan of schedule level ``level`` (one plan per level)."""
        if level == self._level:
            return
        self._slots[self._level] = (self.plan, self.plan_idx, self.in_plan, self.union)
        n = self.model.coef.shape[1]
        self.plan, self.plan_idx, self.in_plan, self.union = self._slots.get(level) or (
            None, np.empty(0, np.int64), np.zeros(n, bool), np.empty(0, np.int64))
        self._level = level

    def sync(self, *, done: bool = False, stop: bool = False,
             full: bool = False) -> tuple[bool, bool]:
        """One collective sync (every rank calls it, the same number of times).

        With the power-law schedule, sync round ``s`` exchanges the tiers ``t`` with
        ``s % 2^t == 0`` (all of them when ``full``, and in an extra full round once every rank
        is done).

        Parameters
        ----------
        done : bool
            This rank has finished its pass (it takes part with its pending change only).
        stop : bool
            This rank asks every rank to stop (early stopping).
        full : bool
            Exchange every tier of the schedule.

        Returns
        -------
        all_done : bool
            Every rank has finished its pass.
        any_stop : bool
            Some rank asked to stop.
        """
        m = self.model
        changed = self._changed() if self.sparse else None
        sched = self.sparse and self.tier is not None
        if sched:
            if full:
                level = self.max_tier
            else:
                self._round += 1
                r = self._round
                level = min((r & -r).bit_length() - 1, self.max_tier)
            changed = changed[self.tier[changed] <= level]
            self._select(level)
        db = _host(m.intercept).astype(np.float64) - self.center_b
        if self.sparse:
            moved = changed.size > 0 or bool(np.any(db != 0))
            outgrown = changed.size > 0 and (self.plan is None
                                             or not bool(self.in_plan[changed].all()))
            size = (self.plan_idx.size + int(np.count_nonzero(~self.in_plan[changed]))
                    if self.grow else changed.size)
        else:
            xp = gmat.get_array_module(m.coef)
            moved = bool(xp.any(m.coef != self.center)) or bool(np.any(db != 0))
            outgrown, size = False, 0
        head = np.concatenate([[float(done), float(moved), float(outgrown), float(stop),
                                float(size)], db])
        head = self.comm.allreduce(head)
        all_done = head[0] == self.comm.size
        n_moved, rebuild, any_stop, n_total = head[1], head[2] > 0, head[3] > 0, int(head[4])
        if sched and all_done and not full:  # the pass ends with every tier exchanged
            if n_moved:
                self._apply(head, changed, rebuild, n_moved, n_total)
            return self.sync(done=True, stop=bool(any_stop), full=True)
        if n_moved == 0:
            return bool(all_done), bool(any_stop)
        self._apply(head, changed, rebuild, n_moved, n_total)
        return bool(all_done), bool(any_stop)

    def _apply(self, head, changed, rebuild, n_moved, n_total):
        m = self.model
        self.stats["syncs"] += 1
        dt = m.dtype
        self.center_b = (self.center_b + head[5:] / n_moved).astype(dt).astype(np.float64)
        if self.sparse:
            self._sparse_step(changed, rebuild, n_moved, n_total)
        else:
            self._dense_step(n_moved)
        xp = gmat.get_array_module(m.intercept)
        cb = xp.asarray(self.center_b.astype(m.dtype))
        if self.alpha == 1.0:
            m.intercept[...] = cb
        else:
            m.intercept += m.dtype.type(self.alpha) * (cb - m.intercept)

    def _sparse_step(self, changed, rebuild, n_moved, n_total):
        m, xp = self.model, gmat.get_array_module(self.model.coef)
        sent = self.comm.stats["bytes_sent"]
        if rebuild:
            if not self.grow:
                self.in_plan[self.plan_idx] = False
            self.in_plan[changed] = True
            self.plan_idx = np.flatnonzero(self.in_plan)
            self.union = self._union(self.plan_idx, n_total)
            sent1 = self.comm.stats["bytes_sent"]
            self.stats["bytes_union"] += sent1 - sent
            self.plan = self.comm.sparse_plan(self.plan_idx, want=self.union)
            self.stats["plans"] += 1
            sent = sent1
        else:
            self.stats["plan_reuses"] += 1
        vals = np.zeros((self.plan_idx.size, m.coef.shape[0]), m.dtype)
        if changed.size:
            pos = np.searchsorted(self.plan_idx, changed)
            ci = xp.asarray(changed)
            vals[pos] = _host((m.coef[:, ci] - self.center[:, ci]).T)
        self.stats["features"] += int(self.plan_idx.size)
        s = self.plan.reduce(vals)
        self.stats["bytes_reduce"] += self.comm.stats["bytes_sent"] - sent
        u = xp.asarray(self.union)
        self.center[:, u] += xp.asarray(np.ascontiguousarray((s / m.dtype.type(n_moved)).T))
        if self.alpha == 1.0:
            m.coef[:, u] = self.center[:, u]
        else:
            m.coef[:, u] += m.dtype.type(self.alpha) * (self.center[:, u] - m.coef[:, u])

    def _union(self, idx, n_total):
        """The union of every rank's ``idx`` (sorted), gathered as int32 indices or as packed
        bitmaps of the ``n_features`` columns, whichever is smaller (``n_total``: the sum of
        the ranks' sizes, the same on every rank)."""
        n = self.model.coef.shape[1]
        if n_total * 4 > n // 8 + 1:
            bits = np.zeros(n, bool)
            bits[idx] = True
            got = self.comm.allgather(np.packbits(bits))
            acc = got[0].copy()
            for g in got[1:]:
                acc |= g
            return np.flatnonzero(np.unpackbits(acc, count=n)).astype(np.int64)
        it = np.int32 if n < 2**31 else np.int64
        got = self.comm.allgather(idx.astype(it))
        bits = np.zeros(n, bool)
        for g in got:
            bits[g] = True
        return np.flatnonzero(bits)

    def _dense_step(self, n_moved):
        m, xp = self.model, gmat.get_array_module(self.model.coef)
        d = _host(m.coef - self.center)
        s = self.comm.allreduce(d)
        self.stats["features"] += int(d.shape[1])
        self.center += xp.asarray((s / m.dtype.type(n_moved)).astype(m.dtype))
        if self.alpha == 1.0:
            m.coef[...] = self.center
        else:
            m.coef += m.dtype.type(self.alpha) * (self.center - m.coef)

    def finish(self) -> None:
        """After the last sync: every replica becomes the centre (bit-identical on all ranks;
        a no-op after model averaging)."""
        m = self.model
        m.coef[...] = self.center
        xp = gmat.get_array_module(m.intercept)
        m.intercept[...] = xp.asarray(self.center_b.astype(m.dtype))


def factor_kind(model) -> str | None:
    """Which :class:`FactorSync` rule combines ``model``'s replicas.

    Parameters
    ----------
    model : Model

    Returns
    -------
    str or None
        ``"kmeans"``, ``"nmf"``, ``"lda"`` or ``"mf"``; None for any other model.
    """
    kind = getattr(type(model), "_sync_rule", None)
    return kind if kind in _RULES else None


#: The arrays each rule exchanges, in message order, and how: ``"mean"`` (the mean change of
#: the replicas that moved), ``"sum"`` (counters: the changes summed over the ranks),
#: ``"steps"`` (a step counter: the mean change of the replicas that moved, rounded),
#: ``"weighted"`` (k-means' count-weighted centers, the counts summed) and ``"running"`` (MF's
#: global mean: a running mean over every rank's ratings, the rating count summed).
_RULES = {
    "kmeans": (("centers", "weighted"), ("counts", "sum")),
    "nmf": (("components", "mean"), ("A", "mean"), ("B", "mean")),
    "lda": (("components", "mean"), ("n_batch_iter", "steps"), ("documents_seen", "sum")),
    "mf": (("coef", "mean"), ("intercept", "running"), ("n_mean", "sum")),
}


class FactorSync:
    """Synchronise the replicas of a factor model across the ranks of ``comm`` by a dense
    all-reduce of its arrays (model averaging; the replicas are bit-identical after every
    sync).

    The rules (every rank started the window at the same *centre*, the model at the last sync,
    and ``K'`` is the number of ranks whose replica moved since):

    * :class:`~roofline.learners.KMeansModel`: with ``n_0``, ``c_0`` the centre's counts and
      centers and ``n_r``, ``c_r`` rank ``r``'s, ``n = n_0 + sum_r (n_r - n_0)`` and
      ``c = (n_0 c_0 + sum_r (n_r c_r - n_0 c_0)) / n`` per center: the running weighted mean
      of every example any rank absorbed, so the per-center learning rate ``w / n`` stays that
      of one process (a center no rank moved keeps ``c_0``).  Each replica's step counter (its
      reassignment clock) stays its own.
    * :class:`~roofline.learners.NMFModel`: the components and the minibatch step's
      accumulated statistics (``A``, ``B``: the decayed sums scikit-learn's ``MiniBatchNMF``
      keeps) move by the replicas' mean change; the statistics are dropped (the next step
      restarts them) when some rank has none.
    * :class:`~roofline.learners.LDA`: ``lambda`` moves by the mean change.  Each replica's
      step ``lambda <- (1 - rho) lambda + rho lambda_r`` from the same ``lambda``, averaged,
      is one online step on the ranks' minibatches together (sufficient statistics averaged,
      a minibatch ``K`` times larger), so ``n_batch_iter`` (the ``t`` of ``rho_t``) advances
      by the mean number of steps a replica took (rounded); ``documents_seen`` (SAME's
      annealing clock) becomes the centre's plus every rank's increment.
    * :class:`~roofline.learners.MFModel`: the item factors (``coef``) move by the mean
      change; the global mean ``mu`` is the running mean of every rank's ratings
      (``(n_0 mu_0 + sum_r (n_r mu_r - n_0 mu_0)) / n``, the rating counts summed).

    A model whose first minibatch seeds it from the data (k-means, NMF) is seeded once: rank
    0 takes one training minibatch alone (:meth:`window`), then every rank copies its model
    (the single process's seeding, on the same minibatch).

    Parameters
    ----------
    comm : Communicator
    model : Model
        A :class:`~roofline.learners.KMeansModel`, :class:`~roofline.learners.NMFModel`,
        :class:`~roofline.learners.LDA` or :class:`~roofline.learners.MFModel`, initialised;
        unless it waits for its seeding, its arrays are replaced by rank 0's on construction
        (collective).

    Attributes
    ----------
    kind : str
        The rule: ``"kmeans"``, ``"nmf"``, ``"lda"`` or ``"mf"``.
    stats : dict
        ``syncs`` (combining all-reduces), ``values`` (float64 values this rank sent in them).

    Raises
    ------
    TypeError
        ``model`` is not one of the factor models.
    """

    def __init__(self, comm, model):
        kind = factor_kind(model)
        if kind is None:
            raise TypeError(f"FactorSync averages KMeansModel, NMFModel, LDA and MFModel "
                            f"replicas, got {type(model).__name__}")
        self.comm, self.model, self.kind = comm, model, kind
        self.rules = _RULES[kind]
        self.stats = {"syncs": 0, "values": 0}
        self._attempt = 0
        # k-means and NMF seed themselves from their first minibatch
        self.seeding = not getattr(model, "_seeded", True)
        self.center = None
        if not self.seeding:
            state = comm.broadcast(self._get() if comm.rank == 0 else None, root=0)
            self._put(state)
            self.center = state

    # -- the model's arrays -------------------------------------------------------------------
    def _get(self) -> dict:
        """The replica's arrays, float64 on the host, by the rule's names (absent: None)."""
        m, f = self.model, (lambda a: np.array(_host(a), dtype=np.float64))
        if self.kind == "kmeans":
            return {"centers": f(m.centers), "counts": f(m.counts)}
        if self.kind == "nmf":
            A, B = getattr(m, "_A", None), getattr(m, "_B", None)
            return {"components": f(m.components),
                    "A": None if A is None else f(A), "B": None if B is None else f(B)}
        if self.kind == "lda":
            return {"components": f(m.components_),
                    "n_batch_iter": np.array([float(m.n_batch_iter)]),
                    "documents_seen": np.array([float(m.documents_seen)])}
        return {"coef": f(m.coef), "intercept": f(m.intercept),
                "n_mean": np.array([float(getattr(m, "_n_mean", 0.0))])}

    def _put(self, s: dict) -> None:
        """Set the replica's arrays from ``s`` (as :meth:`_get` returns them)."""
        m = self.model
        if self.kind == "kmeans":
            m.set_parameters(s["centers"].astype(m.dtype), s["counts"])
        elif self.kind == "nmf":
            m.set_parameters(s["components"].astype(m.dtype))  # drops A and B
            if s["A"] is not None and s["B"] is not None and hasattr(m, "_A"):
                m._A, m._B = s["A"].copy(), s["B"].copy()
        elif self.kind == "lda":
            m.set_parameters(gmat.to_device(s["components"].astype(m.dtype), m.device),
                             n_batch_iter=int(round(float(s["n_batch_iter"][0]))))
            m.documents_seen = int(round(float(s["documents_seen"][0])))
        else:  # in place: the optimizer's state is shaped after these arrays
            m.coef[...] = gmat.to_device(s["coef"].astype(m.dtype), m.device)
            m.intercept[...] = gmat.to_device(s["intercept"].astype(m.dtype), m.device)
            if hasattr(m, "_n_mean"):
                m._n_mean = float(s["n_mean"][0])

    # -- the schedule -------------------------------------------------------------------------
    def window(self, sync_every: int) -> int:
        """Training minibatches this rank takes before the next sync: ``sync_every``, or while
        the model waits for its seeding, one on rank 0 and none elsewhere (one on every rank
        when rank 0 had none to take).

        Parameters
        ----------
        sync_every : int
            The learner's ``sync_every``.

        Returns
        -------
        int
        """
        if self.seeding:
            return 1 if (self._attempt or self.comm.rank == 0) else 0
        return int(sync_every)

    def observe(self, X) -> None:
        """Nothing to count (the dense exchange has no schedule).

        Parameters
        ----------
        X : matrix
            A training minibatch's examples (unused).
        """

    def end_pass(self) -> None:
        """Nothing to do at a pass end (the last sync of the pass combined the replicas)."""

    def finish(self) -> None:
        """Nothing to do after the last sync: model averaging leaves the replicas identical."""

    # -- the sync -----------------------------------------------------------------------------
    def sync(self, *, done: bool = False, stop: bool = False,
             full: bool = False) -> tuple[bool, bool]:
        """One collective sync (every rank calls it, the same number of times).

        Parameters
        ----------
        done : bool
            This rank has finished its pass (it takes part with its pending change only).
        stop : bool
            This rank asks every rank to stop (early stopping).
        full : bool
            Unused (every array is exchanged at every sync).

        Returns
        -------
        all_done : bool
            Every rank has finished its pass.
        any_stop : bool
            Some rank asked to stop.
        """
        if self.seeding:
            return self._seed_sync(done, stop)
        state = self._get()
        c = self.center
        present = [float(state[n] is not None) for n, _ in self.rules]
        moved = any(state[n] is not None and (c.get(n) is None or not np.array_equal(state[n],
                                                                                       c[n]))
                    for n, _ in self.rules)
        head = self.comm.allreduce(np.array([float(done), float(stop), float(moved), *present]))
        size = self.comm.size
        all_done, any_stop, n_moved = head[0] == size, head[1] > 0, head[2]
        if n_moved == 0:
            return bool(all_done), bool(any_stop)
        # the arrays every rank has; a change from the centre where it has them, else values
        names = [(n, how) for (n, how), h in zip(self.rules, head[3:], strict=True)
                 if h == size]
        parts = []
        for n, how in names:
            v, v0 = state[n], c.get(n)
            if how == "weighted":
                n1, n0 = state["counts"], c["counts"]
                parts.append(v * n1[:, None] - v0 * n0[:, None])
            elif how == "running":
                n1, n0 = float(state["n_mean"][0]), float(c["n_mean"][0])
                parts.append(v * n1 - v0 * n0)
            else:
                parts.append(v if v0 is None else v - v0)
        flat = np.concatenate([p.ravel() for p in parts]) if parts else np.zeros(0)
        tot = self.comm.allreduce(flat)
        self.stats["syncs"] += 1
        self.stats["values"] += int(flat.size)
        new, o = {n: None for n, _ in self.rules}, 0
        sums = {}
        for (n, _), p in zip(names, parts, strict=True):
            sums[n] = tot[o:o + p.size].reshape(p.shape)
            o += p.size
        for n, how in names:  # the counters first: the weighted rules divide by them
            if how == "sum":
                new[n] = c[n] + sums[n]
            elif how == "steps":
                new[n] = c[n] + np.round(sums[n] / n_moved)
        for n, how in names:
            s, v0 = sums[n], c.get(n)
            if how == "mean":
                new[n] = s / size if v0 is None else v0 + s / n_moved
            elif how == "weighted":
                cnt = new["counts"]
                num = v0 * c["counts"][:, None] + s
                hit = cnt > 0
                out = v0.copy()
                out[hit] = num[hit] / cnt[hit, None]
                new[n] = out
            elif how == "running":
                cnt = float(new["n_mean"][0])
                new[n] = (v0 * float(c["n_mean"][0]) + s) / cnt if cnt > 0 else v0.copy()
        self._put(new)
        self.center = new
        return bool(all_done), bool(any_stop)

    def _seed_sync(self, done, stop):
        """The seeding sync: the lowest rank whose model is seeded sends it to every rank."""
        seeded = bool(getattr(self.model, "_seeded", True))
        head = self.comm.allreduce(np.array([float(done), float(stop)]))
        all_done, any_stop = head[0] == self.comm.size, head[1] > 0
        flags = self.comm.allgather(int(seeded))
        if not any(flags):
            self._attempt += 1
            return bool(all_done), bool(any_stop)
        root = flags.index(1)
        state = self.comm.broadcast(self._get() if self.comm.rank == root else None, root=root)
        self._put(state)
        self.center = state
        self.seeding = False
        self.stats["syncs"] += 1
        return bool(all_done), bool(any_stop)
