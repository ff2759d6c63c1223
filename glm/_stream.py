"""Out-of-core coordinate descent (Snap ML's streaming pipeline) over a DataSource.

The data never need to fit in memory: only the dual variables (one float per example) and the
shared vector ``v = X a`` (one float per feature) do.  Each pass streams the chunks of the
source; while SDCA runs over chunk ``k`` (a fresh permutation of its examples per pass), the
source's prefetch thread is already producing chunk ``k + 1`` (``Prefetch(depth=1)``: one chunk
ready, the next in production), so I/O and parsing hide behind the coordinate steps.

Objective and scaling: exactly those of :func:`roofline.learners.fit_glm` with ``dual=True``
(l2 penalty; with ``fit_intercept`` the intercept is a regularised constant feature).
"""

from __future__ import annotations

import logging
import time

import numpy as np

from roofline import gmat

from . import _losses, cd
from ._problem import (
    GLMResult,
    Trace,
    positive,
    verbose_logging,
    warn_not_converged,
)

__all__ = ["fit_glm_stream"]

logger = logging.getLogger(__name__)


def _chunks(source, depth, loss_code):
    """Validated ``(X, y, start)`` chunks of one pass, prefetched ``depth`` ahead."""
    src = source.prefetch(depth) if depth else source
    for i, mb in enumerate(src):
        X = mb.X
        if not gmat.is_sparse(X):
            raise TypeError(f"minibatch {i} of {source!r}: X must be CSC, got a dense array")
        gmat.check_csc(X, f"minibatch {i} X")
        if mb.y is None:
            raise ValueError(f"minibatch {i} of {source!r} has no labels (y is None)")
        y = _losses.check_labels(mb.y, _losses.LOSSES[loss_code], name=f"minibatch {i} y",
                                   single_class_ok=True, margin=True)
        yield i, X, y, int(mb.start)


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
    verbose=0,
    on_chunk=None,
):
    """Train an l2-regularised GLM by SDCA, chunk by chunk, from a streaming DataSource.

    Parameters
    ----------
    source : DataSource
        Yields minibatches (``X``: ``n_features x n`` CSC, ``y``, ``start``) in the same order
        every pass; ``start`` indexes the examples' dual variables.
    loss : {"squared", "logistic", "hinge"}
    alpha : float
        As in :func:`fit_glm` (mean loss + ``alpha ||w||^2 / 2``).
    fit_intercept, intercept_scaling, tol, max_iter, check_every, random_state, verbose
        As in :func:`fit_glm`; ``max_iter`` counts training passes, and every
        ``check_every``-th pass is followed by a streamed certificate pass.
    prefetch_depth : int
        Chunks produced ahead of training (1: double buffering; 0: no prefetch thread).
    on_chunk : callable, optional
        ``on_chunk(pass_index, chunk_index)``, called before training on each chunk.

    Returns
    -------
    GLMResult
        ``dual_coef`` holds the dual variables of all examples.
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
    d = int(source.n_features)
    n = source.n_examples
    if n is None:  # one counting pass
        n = 0
        for _, X, _, start in _chunks(source, prefetch_depth, loss_code):
            n = max(n, start + X.shape[1])
        logger.info("counted %d examples in %r", n, source)
    n = int(n)
    if n == 0 or d == 0:
        raise ValueError(f"source {source!r} is empty ({d} features, {n} examples)")
    lam_n = alpha * n
    icpt = float(intercept_scaling) if fit_intercept else 0.0
    rng = np.random.default_rng(random_state)
    dual = np.zeros(n)
    v = np.zeros(d + (1 if icpt else 0))
    y_all = np.zeros(n)  # labels, kept for the dual objective (one float per example)
    seen = np.zeros(n, dtype=bool)
    trace = Trace(tol, verbose)
    conv = False
    it = 0
    with verbose_logging(verbose):
        for it in range(1, max_iter + 1):
            trace.start()
            for ci, X, y, start in _chunks(source, prefetch_depth, loss_code):
                stop = start + X.shape[1]
                if X.shape[0] != d or stop > n:
                    raise ValueError(
                        f"chunk {ci} (examples {start}:{stop}, {X.shape[0]} features) does not fit "
                        f"the source's {d} features x {n} examples"
                    )
                if on_chunk is not None:
                    on_chunk(it, ci)
                if it == 1:
                    y_all[start:stop] = y
                    seen[start:stop] = True
                a = dual[start:stop]  # a view: the kernel updates it in place
                # serial: the prefetch thread may be running numba parallel kernels of the source
                colsq = cd.col_sqnorms(X, parallel=False)
                perm = rng.permutation(X.shape[1]).astype(np.int64)
                cd.dual_epoch(X, y, a, v, perm, loss=loss_code, lam_n=lam_n, colsq=colsq,
                                   icpt=icpt, parallel=False)
            trace.stop()
            if it == 1:
                if not seen.all():
                    raise ValueError(f"the first pass of {source!r} covered {int(seen.sum())} of "
                                     f"{n} examples")
                if _losses.LOSS_LABELS[loss] != "real" and np.unique(y_all).size < 2:
                    raise ValueError("y holds a single class; a classifier needs both classes")
            if it % check_every == 0 or it == max_iter:
                t0 = time.perf_counter()
                P, gap, v = _certificate(source, prefetch_depth, loss_code, dual, y_all, v, lam_n,
                                         icpt, n, d)
                if trace.record(it, P, gap, time.perf_counter() - t0):
                    conv = True
                    break
    if not conv:
        warn_not_converged("scd-stream", tol, it, trace.G[-1], trace.P[-1])
    wf = v / lam_n
    return GLMResult(
        coef=wf[:d].copy(),
        intercept=float(icpt * wf[d]) if icpt else 0.0,
        n_iter=it,
        objective=np.asarray(trace.P),
        gap_history=np.asarray(trace.G),
        times=np.asarray(trace.T),
        gap=float(trace.G[-1]),
        converged=conv,
        time=time.perf_counter() - t_start,
        check_time=trace.check,
        dual_coef=dual,
        solver="scd-stream",
        loss=loss,
        penalty="l2",
        alpha=alpha,
        dual=True,
    )


def _certificate(source, depth, loss_code, dual, y_all, v, lam_n, icpt, n, d):
    """One streamed pass: ``P(w)`` at ``w = v / lam_n`` and the duality gap, and the exact
    ``X a`` (returned, to replace ``v`` and drop the drift of the incremental updates)."""
    wf = v / lam_n
    b = icpt * wf[d] if icpt else 0.0
    v_new = np.zeros_like(v)
    L = 0.0
    for _, X, y, start in _chunks(source, depth, loss_code):
        # serial: the prefetch thread may be running numba parallel kernels of the source
        z = cd.matvec(X, wf[:d], None, b, parallel=False)
        L += cd.loss_sum(z, y, loss_code)
        cd.matvec_t(X, dual[start : start + X.shape[1]], v_new[:d])
    if icpt:
        v_new[d] = icpt * dual.sum()
    q = 0.5 * float(v @ v) / lam_n
    P = (L + q) / n
    D = (cd.conj_sum(dual, y_all, loss_code) - q) / n
    return P, max(P - D, 0.0), v_new
