"""Sequential and TPA-SCD coordinate-descent solvers over one :class:`GLMProblem`.

:func:`scd_primal` (coordinates = features) and :func:`scd_dual` (SDCA, coordinates =
examples) run either one sequential sweep per iteration or Snap ML's TPA-SCD (``n_threads``
threads on disjoint coordinates, with adaptive damping, :func:`tpa_epoch`).  The objective and
the certificates are those of :mod:`._cd_problem`; the front door is
:func:`roofline.learners.fit_glm`.  Here ``alpha`` is the regularisation strength only; the
dual variables are ``a``.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from roofline import gmat
from roofline.kernels import HINGE, LOGISTIC, SQUARED

from . import cd
from ._problem import CheckSchedule, GLMProblem, progress_bar, vdot

__all__ = [
    "FreeIntercept",
    "TPA_DUAL_MAX_THREADS",
    "n_hot_features",
    "scd_dual",
    "scd_dual_gpu",
    "scd_primal",
    "sweep_coords",
    "tpa_epoch",
    "unorder",
    "warmup_factor",
]

logger = logging.getLogger(__name__)


# TPA-SCD's damping test tolerates a rise of the objective this small (relative): near the
# optimum the changes of a sub-epoch are below the rounding of the sums, and rejecting them on
# noise would halve the damping down to zero.
_NOISE = 1e-12


def tpa_epoch(perm, coef, shared, extra, f_cur, damp, *, sweep, resync, objective, finish=None,
               accepted=None, restore=None, n_threads, sub_epochs, tpa_mode, adaptive_damping):
    """One TPA-SCD epoch, shared by the primal and the dual solvers.

    ``perm`` is cut into ``sub_epochs`` sub-epochs; in each, ``n_threads`` threads update
    disjoint coordinates asynchronously, and Snap ML's adaptive damping judges the result: a
    sub-epoch that raises the objective is discarded and the damping halved.

    Parameters
    ----------
    perm : ndarray of int64
        This epoch's coordinates.
    coef : ndarray
        The coordinates' values (``w`` or ``a``), updated in place.
    shared : ndarray
        The shared vector (the margins ``z`` or ``v = X a``).
    extra : float or None
        A value the formulation carries alongside (the primal's intercept), restored with the
        others when a sub-epoch is discarded.
    f_cur : float
        The objective to *minimise* (``P``, or ``-D`` for the dual) at the start.
    damp : float
        The step multiplier at the start.
    sweep : callable
        ``sweep(part, bounds, S, damp)`` runs the TPA kernel over the coordinates ``part`` split
        at ``bounds`` against ``S`` (2-D: one shared row, or one replica per thread).
    resync : callable or None
        ``resync(shared, extra)``: the exact shared vector after a Hogwild sub-epoch, whose
        unsynchronised adds lose updates where threads collide; ``None`` when the sweep loses
        none that matter (the dual's split sweep: the exact vector is restored at every check).
    objective : callable
        ``objective(shared)``: the objective to minimise at the current iterate.
    accepted : callable, optional
        Called after each sub-epoch that is kept (lets ``objective`` keep running sums).
    finish : callable, optional
        ``finish(shared, extra, damp)``: the new ``extra`` after a sub-epoch's coordinate steps
        (the intercept step), updating ``shared`` in place.
    restore : callable, optional
        ``restore(part)`` puts back ``coef[part]`` as it was before the sub-epoch (the sweep
        saved it); without it ``coef[part]`` is copied before each sub-epoch.
    n_threads, sub_epochs, tpa_mode, adaptive_damping
        As in :func:`fit_glm`.

    Returns
    -------
    shared, extra, f_cur, damp : as above, at the end of the epoch
    n_rejected : int
        Sub-epochs discarded.
    """
    n_rejected = 0
    for part in np.array_split(perm, sub_epochs):
        # only the sub-epoch's own coordinates change: save those (unless the sweep does)
        coef0 = coef[part] if restore is None else None
        shared0, extra0 = shared.copy(), extra
        bounds = np.linspace(0, part.size, n_threads + 1).astype(np.int64)
        if tpa_mode == "hogwild":
            sweep(part, bounds, shared.reshape(1, -1), damp)
            if resync is not None:
                shared = resync(shared, extra)  # re-synchronise exactly before judging
        else:
            S = np.repeat(shared[None, :], n_threads, axis=0)
            sweep(part, bounds, S, damp)
            shared = shared0 + (S - shared0).sum(axis=0)
        if finish is not None:
            extra = finish(shared, extra, damp)
        with np.errstate(over="ignore", invalid="ignore"):
            f_new = objective(shared)
        if adaptive_damping and not f_new <= f_cur + _NOISE * abs(f_cur):
            if restore is None:  # discard, halve the damping
                coef[part] = coef0
            else:
                restore(part)
            shared, extra = shared0, extra0
            damp *= 0.5
            n_rejected += 1
            logger.debug("tpa-scd: sub-epoch rejected, damping -> %g", damp)
        else:
            f_cur = f_new
            if accepted is not None:
                accepted()
    return shared, extra, f_cur, damp, n_rejected


# Intercept Newton steps per full primal sweep.  One per sweep made the intercept the
# bottleneck (at 200k Criteo-like examples, relative gap 7e-2 after 40 sweeps; 7.6e-4 with 32 steps
# per sweep, each step costing one pass over the margins).
_INTERCEPT_STEPS = 16


def scd_primal(pb: GLMProblem, w, b, *, max_iter, check_every, rng, trace, verbose,
                n_threads=1, tpa_mode="hogwild", adaptive_damping=True, damping=1.0,
                sub_epochs=1, callback=None, active_fraction=1.0, full_every=1,
                shrinking=False):
    """Sequential (``n_threads == 1``) or TPA-SCD primal coordinate descent; each iteration
    sweeps the features of :func:`sweep_coords` (all, or the active fraction)."""
    A = pb.Xt
    # the penalty's step: l1, l2 or the elastic net's prox (GLMProblem.primal_step_kw)
    kw = dict(loss=pb.loss, colsq=pb.colsq_primal, **pb.primal_step_kw())
    # features that occur nowhere have their optimum at 0: set once, never visited
    feats = np.flatnonzero(np.diff(A.indptr)).astype(np.int64)
    if feats.size < pb.d:
        keep = w[feats]
        w[:] = 0.0
        w[feats] = keep
    z = pb.margins(w, b)
    conv = False
    it = 0
    status = None
    damp = float(damping)
    n_rejected = 0
    P_cur = pb.primal_obj(z, w) if n_threads > 1 else None
    checks = CheckSchedule(check_every, max_iter, feats.size)

    def sweep(part, bounds, Z, damp):
        cd.primal_tpa(A, pb.y, w, Z, part, bounds, damp=damp, **kw)

    def intercept(z, b, damp):
        return cd.intercept_step(pb.y, z, b, loss=pb.loss, damp=damp)

    tpa = dict(sweep=sweep, resync=lambda z, b: pb.margins(w, b, z),
               objective=lambda z: pb.primal_obj(z, w),
               finish=intercept if pb.fit_intercept else None, n_threads=n_threads,
               sub_epochs=sub_epochs, tpa_mode=tpa_mode, adaptive_damping=adaptive_damping)
    bar = progress_bar(max_iter, verbose, "scd")
    last_step = np.full(feats.size, np.inf)  # |change of w_j| at its last visit
    for it in range(1, max_iter + 1):
        trace.start()
        pos = sweep_coords(it, rng, last_step, active_fraction, full_every, shrinking)
        perm = feats[pos]
        before = w[perm]
        if n_threads == 1:
            # the intercept couples with every feature: a Newton step on it after each of up to
            # _INTERCEPT_STEPS chunks of a full sweep (fewer on partial ones), not once per sweep
            n_chunks = 1
            if pb.fit_intercept:
                # (no features occur anywhere: only the intercept moves, once per sweep)
                n_chunks = max(1, round(_INTERCEPT_STEPS * perm.size / max(feats.size, 1)))
            for chunk in np.array_split(perm, n_chunks):
                cd.primal_epoch(A, pb.y, w, z, chunk, **kw)
                if pb.fit_intercept:
                    b = cd.intercept_step(pb.y, z, b, loss=pb.loss)
        else:
            z, b, P_cur, damp, rejected = tpa_epoch(perm, w, z, b, P_cur, damp, **tpa)
            n_rejected += rejected
        last_step[pos] = np.abs(w[perm] - before)
        trace.stop()
        bar.update(1)
        if checks.due(it, perm.size):
            t0 = time.perf_counter()
            z = pb.margins(w, b, z)  # exact: drops the drift of the incremental updates
            with np.errstate(over="ignore", invalid="ignore"):  # divergence is reported below
                P, gap = pb.primal_gap(w, b, z)
            P_cur = P
            status = trace.end_check(it, P, gap, t0, callback, lambda b=b: (w, b))
            if status is not None:
                conv = status == "converged"
                break
    bar.close()
    return w, b, None, it, conv, {"damping": damp, "n_rejected": n_rejected,
                                  "stopped_by_callback": status == "stopped"}


def sweep_coords(it, rng, last_step, active_fraction, full_every, shrinking=False):
    """The coordinates (positions ``0 .. len(last_step) - 1``) of sweep ``it`` (from 1), in a
    fresh random order: all of them in sweep 1 and every ``full_every`` sweeps after it; in
    between, the ``active_fraction`` whose last step was largest (the ones still moving: on
    Criteo-like data a quarter of the examples holds ~90% of the dual's duality gap).

    ``shrinking``: the partial sweeps also leave out every coordinate whose last step was
    exactly zero (liblinear's shrinking: a hinge-loss dual variable held at a bound of its box,
    an L1 weight held at zero); the next full sweep visits it again, so nothing is lost.  When
    no coordinate moved, the sweep is a full one."""
    n = last_step.shape[0]
    k = int(np.ceil(active_fraction * n))
    if shrinking and k < n:
        k = min(k, int(np.count_nonzero(last_step)))
    if k >= n or k == 0 or (it - 1) % full_every == 0:
        return rng.permutation(n).astype(np.int64, copy=False)
    active = np.argpartition(last_step, n - k)[n - k:]
    return active[rng.permutation(k)].astype(np.int64, copy=False)


def scd_dual(pb: GLMProblem, a, *, max_iter, check_every, rng, trace, verbose, n_threads=1,
              tpa_mode="hogwild", adaptive_damping=True, damping=1.0, sub_epochs=1,
              callback=None, n_hot=0, active_fraction=1.0, full_every=1, warmup=False,
              shrinking=False, batch_sweeps=False, b0=None):
    """Sequential (``n_threads == 1``) or TPA-SCD dual coordinate ascent (SDCA).

    Each iteration is one sweep over :func:`sweep_coords` (all examples, or the active
    fraction between full sweeps).

    ``pb.X`` has its features numbered by frequency (:func:`cd.reorder_features`); the
    first ``n_hot`` are the ones whose entries of ``v`` the TPA threads keep in sync
    (:func:`cd.dual_tpa_split`).  ``warmup``: the first sweep, from ``a = 0``, runs
    at :func:`warmup_factor` times the regularisation.

    With ``pb.free_intercept`` (one thread only) the intercept ``b`` is unregularised, as in
    the primal: each sweep runs the dual of the problem at a fixed ``b`` (every margin
    shifted by ``b``), and :class:`FreeIntercept` moves ``b`` between sweeps, from ``b0``
    (``None``: :func:`null_intercept`).
    """
    if pb.free_intercept and n_threads > 1:
        raise ValueError("the dual's unregularised intercept runs on one thread; TPA-SCD "
                         "takes intercept_scaling (a regularised constant feature)")
    X = pb.X
    # the per-example state lives in one cache-line record per example (a, y, squared
    # norm, last step, unit-values flag): a coordinate step touches one line of it instead of
    # five scattered ones (the sweeps run in random order; measured at 1M examples, dual sweeps
    # ~1.25x faster than with separate arrays).  The kernels take the columns as strided views;
    # the iterates are bit-identical.  Examples whose stored values are all one (one-hot /
    # hashed categorical data) are swept without reading their values (~1.2x more).
    rec = gmat.empty((pb.n, 8), np.float64, order="C")
    rec[:, 0] = a
    rec[:, 1] = pb.y
    cd.col_sqnorms(X, rec[:, 2])
    rec[:, 3] = np.inf  # |change of a_i| at its last visit (inf: none yet)
    cd.unit_columns(X, rec[:, 4])
    rec[:, 5:] = 0.0  # 5: a before its last TPA step (to discard a sub-epoch); 6, 7 spare
    a, y, colsq, last_step, prev = rec[:, 0], rec[:, 1], rec[:, 2], rec[:, 3], rec[:, 5]
    # None where no example is flagged: the kernels then run without the flagged loops
    unit = rec[:, 4] if rec[:, 4].any() else None
    kw = dict(loss=pb.loss, colsq=colsq, icpt=pb.icpt, unit=unit)
    pb.unit = unit  # the checks' margins and exact v skip the all-ones values too
    # the regularisation the sweeps run at (lam_n_it, read by sweep() below): the problem's,
    # but raised for the first sweep from a cold start (see warmup_factor)
    lam_first = pb.lam_n
    if warmup and not a.any() and pb.n >= _WARMUP_MIN_EXAMPLES:
        lam_first = pb.lam_n * warmup_factor(colsq, pb.icpt, pb.lam_n)
    lam_n_it = pb.lam_n
    # X 0 = 0: no pass over the data for the usual start
    v = pb.dual_point(a) if a.any() else np.zeros(pb.d + (1 if pb.icpt else 0))
    # the unregularised intercept (pb.free_intercept): held fixed through a sweep, moved
    # between sweeps (FreeIntercept); None without one
    if pb.free_intercept and b0 is None:
        b0 = null_intercept(pb)
    icb = FreeIntercept(pb, colsq, b0) if pb.free_intercept else None
    conv = False
    it = 0
    status = None
    damp = float(damping)
    n_rejected = 0
    # TPA minimises -D; its damping test keeps the conjugate sum as a running total that the
    # sweep kernels update (dconj), and the kernels record each example's step and previous
    # value in its record: a sub-epoch's bookkeeping reads no example a second time (gathered
    # afterwards in random order, the same numbers cost a cache miss per example: the 2-thread
    # sweeps at 1M examples took ~1.5x the time of their kernels)
    state = {"work": None, "conj": None}
    negD_cur = None
    dconj = np.zeros(n_threads)
    if n_threads > 1:
        state["conj"] = cd.conj_sum(a, pb.y, pb.loss)
        negD_cur = -pb.dual_obj(a, v, conj=state["conj"])

    def sweep(part, bounds, V, damp):
        dconj[:] = 0.0
        out = dict(steps=last_step, prev=prev, dconj=dconj, lam_n=lam_n_it)
        if tpa_mode == "hogwild":
            # refresh the hot entries often enough that each thread sees the others' changes
            # ~8 times a sweep (small problems would otherwise run like replicas), at most
            # every _PUBLISH_EVERY steps (a refresh moves the hot change rows between the
            # cores: at 1M examples one every 1562 steps cost a 2-thread partial sweep ~30%)
            every = int(np.clip(part.size // (8 * (bounds.size - 1)), 1, _PUBLISH_EVERY))
            state["work"] = cd.dual_tpa_split(X, y, a, V[0], part, bounds, n_hot=n_hot,
                                                   damp=damp, work=state["work"],
                                                   publish_every=every, **out, **kw)
        else:
            cd.dual_tpa(X, y, a, V, part, bounds, damp=damp, **out, **kw)

    def objective(v):
        state["after"] = state["conj"] + float(dconj.sum())
        return -pb.dual_obj(a, v, conj=state["after"])

    def accepted():
        state["conj"] = state["after"]

    def restore(part):
        a[part] = prev[part]

    tpa = dict(sweep=sweep, resync=None, objective=objective, accepted=accepted, restore=restore,
               n_threads=n_threads, sub_epochs=sub_epochs, tpa_mode=tpa_mode,
               adaptive_damping=adaptive_damping)
    if batch_sweeps and n_threads == 1 and check_every == "auto" and _batched(pb):
        return _scd_dual_batched(pb, a, v, kw, lam_first, max_iter=max_iter, rng=rng,
                                 trace=trace, verbose=verbose, callback=callback,
                                 shrinking=shrinking, icb=icb)
    bar = progress_bar(max_iter, verbose, "sdca")
    checks = CheckSchedule(check_every, max_iter, pb.n)
    since_exact = 0  # checks since v was last recomputed exactly
    for it in range(1, max_iter + 1):
        trace.start()
        perm = sweep_coords(it, rng, last_step, active_fraction, full_every, shrinking)
        lam_n_it = lam_first if it == 1 else pb.lam_n
        if n_threads == 1:
            if icb is None:
                cd.dual_epoch(X, y, a, v, perm, steps=last_step, lam_n=lam_n_it, **kw)
            else:
                cd.dual_epoch(X, y, a, v, perm, steps=last_step, lam_n=lam_n_it,
                              offset=icb.b, **kw)
        else:
            v, _, negD_cur, damp, rejected = tpa_epoch(perm, a, v, None, negD_cur, damp,
                                                        **tpa)
            n_rejected += rejected
        trace.stop()
        bar.update(1)
        if checks.due(it, perm.size):
            t0 = time.perf_counter()
            v, since_exact, parts, P, gap = _dual_check(pb, a, v, it == max_iter, since_exact,
                                                        trace, icb)
            if n_threads > 1:
                state["conj"] = float(parts[1])  # the exact conjugate sum again
                with np.errstate(over="ignore", invalid="ignore"):
                    negD_cur = -pb.dual_obj(a, v, conj=state["conj"])
            status = trace.end_check(it, P, gap, t0, callback,
                                     lambda v=v: pb.dual_primal(v, _b(icb)))
            if status is not None:
                conv = status == "converged"
                break
            if icb is not None and it < max_iter:
                icb.at_check(a, v, parts, lam_n_it == pb.lam_n)
    bar.close()
    # v is exact unless a callback stopped the loop between exact checks; the point returned is
    # then the one the callback saw (v within ~1e-12 of X a)
    w, b = pb.dual_primal(v, _b(icb))
    info = {"damping": damp, "n_rejected": n_rejected, "stopped_by_callback": status == "stopped"}
    if icb is not None:
        info["intercept"] = "unregularised"
    return w.copy(), b, a.copy(), it, conv, info


def scd_dual_gpu(pb: GLMProblem, *, max_iter, check_every, rng, trace, verbose,
                 adaptive_damping=True, damping=1.0, callback=None, device_memory=None,
                 concurrency=None):
    """TPA-SCD of the dual on the GPU (Snap ML's twice-parallel asynchronous SCD,
    :class:`roofline.kernels.DeviceDual`): each epoch a block per example over a fresh
    permutation, asynchronously against the shared ``v`` (atomic adds), ``alpha`` and ``v``
    resident on the device; the data resident too, or streamed by chunks through a
    double-buffered pipeline when they exceed ``device_memory`` bytes.

    The checks are the CPU dual's (:func:`_dual_check` on the host copies of ``alpha`` and
    ``v``: the same duality gap, the same relative ``tol``, ``v`` recomputed exactly every
    few checks and before convergence is declared, the exact one copied back to the
    device).  With ``adaptive_damping``, an epoch run that lowered the dual objective since
    the last check (stale reads of ``v`` by concurrent blocks overshooting) is discarded and
    the damping halved, Snap ML's rule.  The solver time of the trace covers the epochs up to
    their completion on the device (synchronised), not the checks.

    Concurrent blocks read a stale ``v``: with ``tau`` blocks in flight (``concurrency``,
    default the device's resident blocks) the steps start from the norms of
    :func:`roofline.kernels.eso_colsq` at ``tau`` (mini-batch SDCA's safe steps, which weigh
    a feature by how many examples share it: the hot features of power-law data count up to
    ``tau`` times).  That bound is for ``tau`` steps from one ``v``; asynchronous blocks
    usually see fresher values, so with ``adaptive_damping`` the norms' ``tau`` is halved
    after every two accepted checks and doubled back (the epochs discarded) when the dual
    objective falls; the damping is halved only once ``tau`` is back at ``concurrency``.
    """
    from roofline.kernels import DeviceDual

    X = pb.X
    colsq = cd.col_sqnorms(X)
    seed = int(rng.integers(2**31))
    dev = DeviceDual(X.indptr, X.indices, X.data, np.ascontiguousarray(pb.y), colsq, pb.d,
                     icpt=pb.icpt, budget=device_memory, seed=seed, concurrency=concurrency)
    streak = 0  # accepted checks since the norms' tau last changed
    try:
        a = np.zeros(pb.n)
        v = np.zeros(pb.d + (1 if pb.icpt else 0))
        damp = float(damping)
        n_rejected = 0
        negD_cur = -pb.dual_obj(a, v)
        kept = (a, v)
        conv = False
        status = None
        it = 0
        since_exact = 0
        checks = CheckSchedule(check_every, max_iter, pb.n)
        bar = progress_bar(max_iter, verbose, "tpa-scd gpu")
        for it in range(1, max_iter + 1):
            trace.start()
            dev.epoch(pb.loss, pb.lam_n, damp)
            dev.synchronize()
            trace.stop()
            bar.update(1)
            if not checks.due(it, pb.n):
                continue
            t0 = time.perf_counter()
            a, v = dev.get()
            if adaptive_damping:
                with np.errstate(over="ignore", invalid="ignore"):
                    negD = -pb.dual_obj(a, v)
                if not negD <= negD_cur + _NOISE * abs(negD_cur):
                    a, v = kept  # discard the epochs since the last check
                    dev.set(a, v)
                    if dev.tau < dev.concurrency:
                        dev.set_tau(2 * dev.tau)  # back towards the safe steps
                    else:
                        damp *= 0.5
                    streak = 0
                    n_rejected += 1
                    logger.debug("tpa-scd gpu: epochs rejected, tau -> %d, damping -> %g",
                                 dev.tau, damp)
                else:
                    streak += 1
                    if streak >= 2 and dev.tau > 1:
                        dev.set_tau(dev.tau // 2)  # bolder steps while they pay
                        streak = 0
            v_dev = v
            v, since_exact, parts, P, gap = _dual_check(pb, a, v, it == max_iter, since_exact,
                                                        trace)
            if v is not v_dev:
                dev.set(v=v)  # the exact v = X a
            with np.errstate(over="ignore", invalid="ignore"):
                negD_cur = -pb.dual_obj(a, v, conj=float(parts[1]))
            kept = (a, v)
            status = trace.end_check(it, P, gap, t0, callback, lambda v=v: pb.dual_primal(v))
            if status is not None:
                conv = status == "converged"
                break
        bar.close()
        w, b = pb.dual_primal(v)
        info = {"damping": damp, "n_rejected": n_rejected,
                "stopped_by_callback": status == "stopped", "device": "gpu",
                "concurrency": dev.concurrency, "tau": dev.tau,
                "streamed": dev.streamed, "n_chunks": int(dev.chunk_bounds.size - 1),
                "bytes_streamed": int(dev.bytes_streamed)}
        return w.copy(), b, a.copy(), it, conv, info
    finally:
        dev.close()


#: A certificate this many times the best one so far sends the dual's free intercept back to
#: the best ``b`` seen (``FreeIntercept.at_check``).
_FREE_DIVERGED = 100.0


class FreeIntercept:
    """The unregularised intercept ``b`` of the dual (``GLMProblem.free_intercept``).

    For a fixed ``b`` the dual sweeps solve the dual of ``f(b) = min_w P(w, b)``: the same
    coordinate steps with every margin shifted by ``b`` (the conjugates shifted by
    ``-a_i b``).  ``f`` is convex and, at the dual optimum for ``b``, ``f'(b) = -sum_i a_i``:
    ``b`` is the multiplier of the constraint ``sum_i a_i = 0`` of the dual with an intercept.

    ``b`` moves only at a check, and only when the part of the certificate that the constraint
    accounts for (:meth:`GLMProblem.dual_certificate` minus
    :meth:`GLMProblem.fixed_intercept_gap`) exceeds the gap at the fixed ``b``: every move
    shifts every margin, which the sweeps must then fit again, and ``f`` is flat in ``b`` where
    frequent features move with it (Criteo-like data, whose one-hot fields each sum to a
    constant: ``f''`` ~ ``h / 1000``), so that from :func:`null_intercept` a fit to a relative
    1e-4 barely needs to move it.  Until ``S = sum_i a_i`` has taken both signs, a move is a
    secant step on ``-S``, ``b += S / c``, ``c`` the geometric mean of the last
    ``_FREE_SLOPES`` positive slopes of ``S`` between moves (before the first, the geometric
    mean of :meth:`_lower`'s bound of ``f''`` and Newton's curvature ``h = sum_i l''(z_i)``,
    an upper bound: ``beta (1 - beta)`` for the logistic with ``beta = y_i a_i``, 1 for the
    squared loss; for the hinge, ``h = lam_n / ||x_i||^2`` summed over the examples inside
    their box, alone), at most the trust radius, which
    grows by ``_FREE_GROW`` while ``S`` keeps its sign and is half the last step when it
    changes.  Once the root is bracketed, regula falsi with Illinois' rule inside the bracket
    (the hinge's ``S`` is piecewise constant in ``b``: secant steps alone cycled around the
    root).

    Parameters
    ----------
    pb : GLMProblem
    colsq : ndarray
        The examples' squared norms.
    b0 : float
        The starting intercept.
    """

    def __init__(self, pb, colsq, b0=0.0):
        self.pb, self.colsq = pb, colsq
        self.b = float(b0)
        self.prev = None  # (b, S) at the last move, for the secant
        self.slopes = []  # the last positive secant slopes of S
        self.radius = _FREE_RADIUS * (1.0 + abs(self.b))
        self.last_step = 0.0
        self.moves = 0
        self.lo = self.hi = None  # [b, S] with S > 0 (b below the root), S < 0 (above)
        self.last_side = None
        self.cert = None  # the last check's certificate (_dual_check)
        self.direction = None  # the last projected correction's (d, X d), sum d = 1
        self.best = None  # (b, certificate) of the best check so far
        self.settle, self.settle_checks = None, 0  # the fixed-b gap at the last move
        # checks since b last moved (_dual_check's projection waits; no move yet: any)
        self.since_move = _PROJECT_SETTLE_CHECKS
        self.x1sq = None  # ||X 1||^2 (_lower), computed at the first move

    def _upper(self, a):
        pb = self.pb
        if pb.loss == SQUARED:
            return float(pb.n_local)
        beta = a * pb.y
        if pb.loss == LOGISTIC:
            return vdot(beta, 1.0 - beta)
        inside = (beta > 0.0) & (beta < 1.0) & (self.colsq > 0.0)
        if not inside.any():
            inside = self.colsq > 0.0
        return float(pb.lam_n * np.sum(1.0 / self.colsq[inside])) if inside.any() else 0.0

    def _lower(self, a):
        """A lower bound of ``f''`` (in the units of :meth:`_upper`) for the smooth losses:
        ``f'' = 1^T M^{-1} 1`` with ``M = H + X^T X / lam_n`` the fixed-b dual's Hessian
        (``H`` the conjugates' curvature), at least ``n^2 / 1^T M 1`` (Cauchy-Schwarz);
        ``1^T M 1 = sum_i H_i + ||X 1||^2 / lam_n`` (``X 1``: one scatter, kept).  0 (no
        bound) for the hinge, whose conjugate is linear in its box."""
        pb = self.pb
        if pb.loss == HINGE:
            return 0.0
        if self.x1sq is None:
            x1 = pb.xdot(np.ones(pb.n_local))
            self.x1sq = vdot(x1, x1)
        if pb.loss == LOGISTIC:
            beta = np.clip(a * pb.y, _FREE_BETA, 1.0 - _FREE_BETA)
            hsum = float(np.sum(1.0 / (beta * (1.0 - beta))))
        else:
            hsum = float(pb.n_local)
        return float(pb.n_local) ** 2 / (hsum + self.x1sq / pb.lam_n)

    def curvature(self):
        """The secant estimate of ``f''``, the geometric mean of the last slopes (None before
        the first)."""
        if not self.slopes:
            return None
        return float(np.exp(np.mean(np.log(self.slopes))))

    def at_check(self, a, v, parts, secant=True):
        """After a check (``parts``: its :meth:`GLMProblem.dual_parts` at ``b``), move ``b``
        where the constraint's part of the certificate is the larger; ``secant=False``: the
        sweeps ran at another regularisation (the warm-up), no slope from them.  Returns
        whether ``b`` moved."""
        moved = self._at_check(a, v, parts, secant)
        self.since_move = 0 if moved else self.since_move + 1
        return moved

    def _at_check(self, a, v, parts, secant):
        pb = self.pb
        S = float(parts[2])
        fixed = pb.fixed_intercept_gap(parts, v, self.b)
        whole = pb.dual_certificate(parts, v, self.b)[1]
        if self.cert is not None:
            whole = min(whole, self.cert)
        smooth = pb.loss != HINGE  # the hinge's S is piecewise constant: its bracket alone
        if smooth and (self.best is None or whole < self.best[1]):
            self.best = (self.b, whole)
        elif smooth and whole > _FREE_DIVERGED * self.best[1]:
            # the moves made things worse by far (S from sweeps that had not settled at the
            # last few b): back to the best intercept seen, the secant's memory dropped and the
            # trust radius cut to a tenth of the distance travelled
            back = self.best[0]
            self.radius = max(0.1 * abs(self.b - back), 1e-12 * (1.0 + abs(back)))
            self.b, self.prev, self.slopes = back, None, []
            self.lo = self.hi = None
            self.last_step, self.moves = 0.0, self.moves + 1
            self.best = (back, self.best[1] * _FREE_DIVERGED)  # not reverted again at once
            logger.debug("dual intercept: back to b = %.6g (the certificate grew)", back)
            return True
        if S == 0.0 or not whole - fixed > fixed:
            return False
        if smooth and self.settle is not None and fixed > _FREE_SETTLE * self.settle:
            # the sweeps have not yet brought the fixed-b gap that the last move opened down to
            # _FREE_SETTLE of it: S is still moving, a secant through it would not be one
            self.settle = min(self.settle, fixed) if self.settle_checks < 1 else None
            self.settle_checks += 1
            return False
        if self.prev is not None and secant:
            db = self.b - self.prev[0]
            slope = (self.prev[1] - S) / db if db != 0.0 else 0.0
            if slope > 0.0:
                self.slopes = (self.slopes + [slope])[-_FREE_SLOPES:]
            if (S > 0.0) == (self.prev[1] > 0.0):
                self.radius *= _FREE_GROW
            else:
                self.radius = max(0.5 * abs(self.last_step), 1e-12 * (1.0 + abs(self.b)))
        # the bracket: S > 0 below the root (f' = -S < 0), S < 0 above it; an end that this
        # point contradicts (the sweeps had not settled there) is dropped
        if S > 0.0:
            if self.hi is not None and self.b >= self.hi[0]:
                self.hi = None
            self.lo, side = [self.b, S], 0
        else:
            if self.lo is not None and self.b <= self.lo[0]:
                self.lo = None
            self.hi, side = [self.b, S], 1
        self.prev = (self.b, S) if secant else None
        if self.lo is not None and self.hi is not None:
            # regula falsi in the bracket, Illinois' rule: the end not replaced twice in a
            # row has its S halved (else one end stays and the steps stall)
            if side == self.last_side:
                other = self.hi if side == 0 else self.lo
                other[1] *= 0.5
            self.last_side = side
            (b0, s0), (b1, s1) = self.lo, self.hi
            new = b0 + s0 * (b1 - b0) / (s0 - s1)
        else:
            self.last_side = side
            h = self._upper(a)
            c = self.curvature()
            if c is None:
                c = h
                low = self._lower(a) if _FREE_FIRST_BOUNDS and h > 0.0 else 0.0
                if low > 0.0:
                    c = float(np.sqrt(low * h))
            if h > 0.0:
                c = min(c, h)
            if not c > 0.0:
                return False
            new = self.b + float(np.clip(S / c, -self.radius, self.radius))
        if new == self.b:
            return False
        self.last_step = new - self.b
        self.b = new
        self.settle, self.settle_checks = fixed, 0
        self.moves += 1
        logger.debug("dual intercept: b -> %.6g (sum a = %.3g)", self.b, S)
        return True


def null_intercept(pb):
    """The intercept of the model without features (the dual's start): ``mean(y)`` for the
    squared loss, the log-odds of the positives for the logistic (within +-10), 0 for the
    hinge."""
    y = pb.y
    if pb.loss == SQUARED:
        return float(np.mean(y))
    if pb.loss == LOGISTIC:
        p = float(np.mean(y > 0))
        return float(np.clip(np.log(max(p, 1e-300)) - np.log(max(1.0 - p, 1e-300)), -10, 10))
    return 0.0


def _b(icb):
    """The intercept of a dual with an unregularised one (``icb``), else 0."""
    return 0.0 if icb is None else icb.b


def _dual_check(pb, a, v, last, since_exact, trace, icb=None):
    """A dual check's certificate: ``(v, since_exact, parts, P, gap)``.

    The exact ``v = X a`` (a full scatter over the data, as costly as the margins) is
    recomputed every ``_EXACT_EVERY`` checks, at the ``last`` iteration, and before convergence
    is declared; in between the sweeps' float64 increments stand (no sweep loses an update:
    TPA's threads' changes are all summed into ``v``; drift measured below 1e-12 of max |v|
    after 20 sequential sweeps and after 2 + 6 two-thread sweeps at 1M examples).

    ``icb``: the :class:`FreeIntercept` of a dual with an unregularised intercept (the
    certificate at its ``b``, :meth:`GLMProblem.dual_certificate`)."""
    exact = last or since_exact + 1 >= _EXACT_EVERY
    while True:
        if exact:
            v = pb.dual_point(a)
        since_exact = 0 if exact else since_exact + 1
        with np.errstate(over="ignore", invalid="ignore"):  # divergence: see record
            if icb is None:
                parts = pb.dual_parts(a, v)
                P, gap = pb.dual_certificate(parts, v)
            else:
                parts = pb.dual_parts(a, v, icb.b, icb.direction)
                P, gap = pb.dual_certificate(parts, v, icb.b)
                icb.cert = gap
                target = trace.tol * max(abs(P), 1e-300)
                if (gap > target and icb.since_move >= _PROJECT_SETTLE_CHECKS
                        and pb.fixed_intercept_gap(parts, v, icb.b) <= target):
                    # the scaled point's certificate is loose: a closer zero-sum point, on
                    # the exact v only
                    if not exact:
                        exact = True
                        continue
                    gap, icb.direction = pb.projected_dual_gap(
                        a, v, parts, target, _PROJECTED_STEPS, icb.direction)
                    icb.cert = gap
        if exact or not trace.converged(P, gap):
            return v, since_exact, parts, P, gap
        exact = True  # looks converged: confirm on the exact v


def _batched(pb):
    """Whether the sequential dual runs its sweeps :func:`_scd_dual_batched`: always for the
    hinge (liblinear's shrinking), and on problems of at most ``_BATCH_MAX_VALUES`` stored
    values, whose sweeps are short enough that a call per sweep costs time."""
    return pb.loss == HINGE or pb.X.nnz + pb.n <= _BATCH_MAX_VALUES


def _scd_dual_batched(pb, a, v, kw, lam_first, *, max_iter, rng, trace, verbose, callback,
                      shrinking, icb=None):
    """The sequential dual of :func:`scd_dual` with its sweeps run in batches by
    :func:`cd.dual_sweeps`: one call sweeps until it has read ``_BATCH_VALUES`` stored
    values (at least one sweep over all examples' worth), then the duality gap is checked.
    Hinge sweeps shrink (liblinear): the examples held at a bound of their box, whose
    projected gradient says they stay there, leave the sweeps until the remaining ones meet
    the projected-gradient tolerance ``eps``; then all come back.  A call whose sweeps meet
    ``eps`` over all examples ends early; if the gap check then fails, ``eps`` shrinks
    tenfold.  Iterations count sweeps (of the active examples).  ``icb``: the
    :class:`FreeIntercept` of an unregularised intercept, which may move after each check."""
    X = pb.X
    n = pb.n
    order = np.arange(n, dtype=np.int64)
    shrink = np.array([float(n), np.inf, -np.inf])
    budget = max(_BATCH_VALUES, X.nnz + n)
    eps = _SHRINK_EPS
    it = 0
    if lam_first != pb.lam_n:  # the warm-up sweep (see warmup_factor), a sweep of its own
        trace.start()
        cd.dual_epoch(X, pb.y, a, v, rng.permutation(n).astype(np.int64),
                      lam_n=lam_first, offset=_b(icb), **kw)
        trace.stop()
        it = 1
    conv = False
    status = None
    since_exact = 0
    bar = progress_bar(max_iter, verbose, "sdca")
    bar.update(it)
    while it < max_iter:
        trace.start()
        sweeps, met = cd.dual_sweeps(
            X, pb.y, a, v, order, shrink, lam_n=pb.lam_n, max_sweeps=max_iter - it,
            budget=budget, seed=int(rng.integers(1 << 63)), eps=eps, shrinking=shrinking,
            offset=_b(icb), **kw)
        trace.stop()
        it += sweeps
        bar.update(sweeps)
        t0 = time.perf_counter()
        v, since_exact, parts, P, gap = _dual_check(pb, a, v, it >= max_iter, since_exact,
                                                    trace, icb)
        if met and not trace.converged(P, gap):
            eps *= 0.1
        status = trace.end_check(it, P, gap, t0, callback,
                                 lambda v=v: pb.dual_primal(v, _b(icb)))
        if status is not None:
            conv = status == "converged"
            break
        if icb is not None and it < max_iter:
            icb.at_check(a, v, parts, True)
    bar.close()
    w, b = pb.dual_primal(v, _b(icb))
    info = {"damping": 1.0, "n_rejected": 0, "stopped_by_callback": status == "stopped",
            "batched": True}
    if icb is not None:
        info["intercept"] = "unregularised"
    return w.copy(), b, a.copy(), it, conv, info


# A free intercept's check whose gap at the fixed b meets the tolerance and whose certificate
# does not tries at most this many projected conjugate-gradient steps towards a closer
# zero-sum dual point (GLMProblem.projected_dual_gap; a scatter and a gather each).
_PROJECTED_STEPS = 10
# ... and only from this many checks after the last move of b: right after a move the sweeps
# have not yet settled ``a`` at the new b (sum a is still on its way), the projection's
# steps (each a scatter and a gather) could not certify and the next sweeps redo them.
# Measured at 200k Criteo-like x 2^18, C = 0.3 (benchmarks/intercept.py): 10 steps of
# 0.15-0.2 s on the loaded machine one sweep after a move, certifying 2.9e-5 for 2.65e-5
# asked; the next check, 5 sweeps on, certified with the scaled point.
_PROJECT_SETTLE_CHECKS = 1
# FreeIntercept's curvature is the geometric mean of this many last secant slopes ...
_FREE_SLOPES = 3
# ... its first trust radius this times 1 + |b0|, grown by _FREE_GROW while the sign of
# sum a persists.
_FREE_RADIUS = 0.1
_FREE_GROW = 1.5
# ... and after a move it waits (two checks at most) until the sweeps have brought the
# fixed-b gap that the move opened down to this fraction of it: S is still on its way before,
# and a secant through it is not one.  Measured (Criteo-like, tol 1e-4, sweeps per seed): at
# 200k, C = 0.3, 48 seeds: with 0.5, 1 seed in 16 of 0-15 moved at 0.495 of it with sum a at
# -9.6 (-4.4 settled), overshot b by 0.22 and took 31 sweeps for 25, and 6 of the 7 seeds that
# took 30-31 with 0.5 or 0.25 took 25 with 0.35; over all 48 seeds 0.35 took 30 sweeps in 2
# (25 in the rest), 0.25 in 5 (it waited a second check where 0.35 moved); C = 1, 3 seeds:
# 54 -> 49 in one; 100k, C = 0.3 and 3, 50k, C = 0.1 and 1, ridge at 100k: the same sweeps
# with 0.5, 0.35 and 0.25.
_FREE_SETTLE = 0.35
# ... and its first step, before any secant slope, takes for f'' the geometric mean of
# _lower's bound and Newton's h (_upper): f'' lies between them, h alone made that step
# negligible where frequent features move with b (Criteo-like, 200k x 2^18, C = 0.3: the
# settled slope of sum a is ~54 against h ~ 1.9e4 and a lower bound ~1.2, so b moved by 0.0015
# of the 0.5 it had to go and a check cycle, ~6 sweeps, was lost).  False: h.
_FREE_FIRST_BOUNDS = True
# (the logistic's dual variables y a are held in [_FREE_BETA, 1 - _FREE_BETA] for the bound)
_FREE_BETA = 1e-6

# The sequential dual runs its sweeps in batches (_scd_dual_batched) on problems of at most
# this many stored values (plus examples), and always for the hinge.
_BATCH_MAX_VALUES = 1 << 21
# A batch of sweeps reads at least this many stored values before the duality gap is checked.
_BATCH_VALUES = 1 << 18
# liblinear's stopping tolerance on the projected gradient (its default for the dual), the
# hinge sweeps' first eps.
_SHRINK_EPS = 0.1

# TPA-SCD's dual keeps in sync across its threads' replicas the features in at least 1 in
# _HOT_FRACTION examples (at least _HOT_MIN, at most _HOT_MAX of them): at 1M Criteo-like
# examples, 13k features holding 92% of the nonzeros; a thread sees the others' changes to the
# rarer ones at the end of the sub-epoch.
_HOT_FRACTION, _HOT_MIN, _HOT_MAX = 10_000, 2, 1 << 16
_PUBLISH_EVERY = 4096
# TPA-SCD's dual (hogwild mode) uses at most this many threads.  Measured on a 16-core Xeon at
# 1M Criteo-like examples: 2 threads converge like the sequential sweep (no sub-epoch rejected);
# 4, 8 and 16 threads had their first sub-epochs rejected until the damping fell to 1/32, and no
# fit reached 1e-3 in 30 sweeps (best held-out logloss 0.3185 after 87 sweeps on 8 threads).
# Each thread corrects the same hot-feature residual against its own replica before it sees the
# others' corrections, so T threads overshoot T-fold (2-fold is a reflection: the dual does not
# fall); neither a sequential first sweep, nor refreshing the hot entries T times more often,
# nor CoCoA+'s sigma' = T on the step curvature (cold features or all) fixed it there.
TPA_DUAL_MAX_THREADS = 2
# Dual checks recompute v = X a exactly at least every this many checks.
_EXACT_EVERY = 8
# The dual's first sweep from a = 0 (fit_glm(warmup=True)) runs at a regularisation
# raised until the mean curvature of a step, q = ||x_i||^2 / lam_n (how far one example's step
# moves its own margin per unit of its dual variable), is at most _WARMUP_Q, by at most
# _WARMUP_MAX.  From a = 0 every example in that sweep corrects its margin against a w
# that the examples after it will still move the same way (on the frequent features), and
# with a large q the sweep overshoots; sweeps at the problem's regularisation follow.  Measured
# (relative primal suboptimality, 3-4 seeds each, sweeps to 1e-3 / 1e-6): Criteo-like logistic
# 1M, C = 0.3 (q ~ 11): 18.5 -> 16 sweeps to 1e-3 (39 -> 35.5 to 1e-6); 100k, C = 1 / 0.3 /
# 0.1 / 0.03: 33.7 / 17.3 / 9.7 / 7 -> 29.3 / 15.3 / 9 / 7 (to 1e-6: 68.7 / 36.3 / 22 / 14 ->
# 63.7 / 34.3 / 21 / 14); ridge on the same data (C = 0.3): 82.7 -> 73.7; dense 20k x 100
# logistic, alpha = 1e-3: 59 -> 47, alpha = 1e-2 and 1e-1: no change.  A fixed factor hurt
# where q is small (x4 at C = 0.03: 7 -> 8 sweeps, 14 -> 15-18 to 1e-6): hence the cap on q,
# not a factor.  It also hurt on few examples (Criteo-like, 5000 examples, C = 0.3 / 1:
# 14 -> 16, 21-24 -> 25 sweeps; 20,000: level; duality-gap stops alike: 100k, C = 1: 36 -> 31,
# 200k: 39 -> 33, C = 0.3: 19-20 -> 18), so it applies from _WARMUP_MIN_EXAMPLES examples on.
_WARMUP_Q, _WARMUP_MAX = 2.0, 8.0
_WARMUP_MIN_EXAMPLES = 50_000


def warmup_factor(colsq, icpt, lam_n):
    """The factor of the regularisation of the dual's first sweep from ``a = 0``: the
    mean step curvature brought down to ``_WARMUP_Q`` (1 where it is below), at most
    ``_WARMUP_MAX``; ``colsq`` is not empty (the warm-up needs ``_WARMUP_MIN_EXAMPLES``)."""
    q = (float(np.mean(colsq)) + icpt * icpt) / lam_n
    return float(min(max(q / _WARMUP_Q, 1.0), _WARMUP_MAX))


def n_hot_features(counts, n_examples):
    """How many of the (frequency-ordered) features TPA-SCD's dual treats as hot."""
    threshold = max(_HOT_MIN, n_examples // _HOT_FRACTION)
    return int(min(_HOT_MAX, np.searchsorted(-counts, -threshold, side="right")))


def unorder(w, order):
    """``w`` of the frequency-ordered features back in the original numbering."""
    out = np.empty_like(w)
    out[order] = w
    return out
