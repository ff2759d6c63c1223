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
"""

from __future__ import annotations

import numpy as np

from roofline import gmat

__all__ = ["ModelSync", "check_comm"]


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
