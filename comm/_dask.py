"""Ranks on a Dask cluster: one long-running task per worker, joined by Kylix over TCP.

The pattern of LightGBM's and XGBoost's Dask modes: Dask places the data and runs one task per
rank, each pinned to its own worker; the tasks exchange addresses through a
:class:`~roofline.comm.Coordinator` in the client's process and then talk over their own
sockets (the scheduler never carries the all-reduce traffic).  Roofline starts no cluster of
its own: bring a ``distributed.Client`` (a ``LocalCluster``, ``dask-jobqueue``, Kubernetes ...).

Warnings a rank raises in its worker (a ``ConvergenceWarning`` of a fit, say) are recorded
there and re-emitted in the client, with their category and message, once per distinct
warning whatever the number of ranks that raised it.

``dask.distributed`` is imported only when a function here is called.
"""

from __future__ import annotations

import logging
import math
import pickle
import socket
import time
import warnings
from urllib.parse import urlparse

from ._base import CommError, CommTimeoutError, PeerError
from ._factories import tcp_communicator
from ._launch import Coordinator

__all__ = ["run_dask", "run_on_dask"]

logger = logging.getLogger(__name__)


def _host_of(address: str) -> str:
    host = urlparse(address).hostname
    if host is None:
        raise CommError(f"cannot read a host from the Dask address {address!r}")
    return host


def _reachable_ip(towards: str) -> str:
    """The address of this machine on the route to ``towards`` (loopback for a local host)."""
    if towards in ("127.0.0.1", "localhost", "::1"):
        return "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((towards, 9))  # no packet is sent: this only picks the route
        return s.getsockname()[0]


def _portable(category):
    """``category`` if it pickles by reference (the client can import it), else
    ``RuntimeWarning``."""
    try:
        pickle.loads(pickle.dumps(category))
    except Exception:  # noqa: BLE001 - any failure: a category the client may not know
        return RuntimeWarning
    return category


def _rank_task(rank, size, coord, token, timeout, degrees, fn, args, kwargs, *part):
    """One rank, run by a Dask worker: join the TCP job from this worker's host and run ``fn``;
    ``(result, warnings)``, the warnings as ``(category, message)`` pairs, in order."""
    from distributed import get_worker

    host = _host_of(get_worker().address)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # every one recorded; the client's filters decide
        with tcp_communicator(rank, size, coord, token, degrees=degrees, timeout=timeout,
                              host=host) as comm:
            out = fn(comm, *part, *args, **kwargs)
    seen = [(_portable(w.category), str(w.message)) for w in caught]
    return out, seen


def _reemit(results):
    """The ranks' results of ``_rank_task``, their recorded warnings re-emitted here (once per
    distinct category and message)."""
    done = set()
    for _, seen in results:
        for category, message in seen:
            if (category, message) not in done:
                done.add((category, message))
                warnings.warn(message, category, stacklevel=3)
    return [out for out, _ in results]


def run_on_dask(client, fn, *, n=None, parts=None, args=(), kwargs=None, timeout=120.0,
                job_timeout=None, degrees=None, coordinator_host=None) -> list:
    """Run ``fn(comm, [part,] *args, **kwargs)`` as one rank per Dask worker.

    Parameters
    ----------
    client : distributed.Client
        The cluster.
    fn : callable
        Importable and picklable (defined in a module, as for any Dask task); its result must
        be picklable.
    n : int, optional
        Number of ranks (default: one per worker, or ``len(parts)``); at most the number of
        workers, since every rank needs its own worker to run at the same time as the others.
    parts : list, optional
        One item per rank, passed as ``fn``'s second argument: typically a Dask future (or a
        list of futures) of that rank's data, which Dask moves to or finds on the rank's
        worker.  Rank ``r`` is placed on a worker that already holds ``parts[r]`` (its first
        future) when Dask knows one.
    args, kwargs
        Further arguments of ``fn``, the same on every rank.
    timeout : float
        Seconds a rank waits for a peer's message (and for the ranks to register).
    job_timeout : float or None, default=None
        Seconds the job as a whole may run; None: no limit (a rank whose worker dies still
        ends the job at once, and a rank waiting longer than ``timeout`` for a peer fails).
    degrees : sequence of int, optional
        Kylix layer degrees.
    coordinator_host : str, optional
        The address of this (the client's) machine that the workers can reach; by default the
        one on the route to the scheduler (loopback for a local cluster).

    Returns
    -------
    list
        ``fn``'s results by rank.

    Raises
    ------
    CommError
        Too few workers, or a rank failed: the first failure ends the job and names every
        failed rank with its worker; a rank whose worker died (or left the cluster) is named
        as soon as the scheduler knows it, alone or not.  When a rank's own exception (not a
        communication error) caused the failure, it is this error's ``__cause__``.
    CommTimeoutError
        The job did not finish within ``job_timeout`` seconds (its ranks' tasks are
        cancelled; Dask cannot stop a task already running: such a rank runs on until ``fn``
        returns or a peer wait fails).
    """
    if job_timeout is not None:
        job_timeout = float(job_timeout)
        if not job_timeout > 0:
            raise ValueError(f"job_timeout must be None or a number of seconds > 0, got "
                             f"{job_timeout!r}")
    kwargs = kwargs or {}
    workers = sorted(client.scheduler_info()["workers"])
    if parts is not None:
        parts = list(parts)
        if n is not None and n != len(parts):
            raise ValueError(f"n={n} but parts has {len(parts)} items (one per rank)")
        n = len(parts)
    n = len(workers) if n is None else int(n)
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if n > len(workers):
        raise CommError(f"{n} ranks need {n} Dask workers running at once; the cluster has "
                        f"{len(workers)}")
    placement = _place(client, workers, parts, n)
    host = coordinator_host or _reachable_ip(_host_of(client.scheduler.address))
    coord = Coordinator(n, host=host, timeout=timeout)
    logger.info("%d ranks on Dask workers %s; coordinator at %s:%d", n, placement,
                *coord.address)
    try:
        futures = [client.submit(_rank_task, r, n, coord.address, coord.token, timeout,
                                 degrees, fn, args, kwargs,
                                 *(() if parts is None else (parts[r],)),
                                 workers=[placement[r]], allow_other_workers=False, pure=False,
                                 key=f"roofline-rank-{r}-{coord.token.hex()[:8]}")
                   for r in range(n)]
        try:
            _watch(client, futures, placement, timeout, job_timeout)
        except CommError as e:
            coord.abort(str(e))  # ranks waiting for the others to register are told at once
            raise
        return _reemit([f.result() for f in futures])
    finally:
        coord.close()


#: Seconds between two looks at the ranks' tasks and workers while a Dask job runs.
_WATCH_EVERY = 0.5


def _watch(client, futures, placement, timeout, job_timeout=None):
    """Wait for the ranks' tasks: return once all finished; raise :class:`CommError` at the
    first failure, naming every failed rank with its worker (its ``__cause__`` the first
    rank's own exception, when one is the root cause).

    A rank whose worker died (or left the cluster) is named as soon as the scheduler knows it
    (checked every :data:`_WATCH_EVERY` s): its task would otherwise wait for that worker
    forever, since it may run nowhere else.  The job as a whole gets ``job_timeout`` s
    (:class:`CommTimeoutError` then; None: no limit)."""
    from distributed import wait

    rank_of = {f.key: r for r, f in enumerate(futures)}
    deadline = math.inf if job_timeout is None else time.monotonic() + job_timeout
    pending = list(futures)
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            client.cancel(futures)
            raise CommTimeoutError(
                f"the Dask job of {len(futures)} ranks did not finish within "
                f"job_timeout={job_timeout:g} s; ranks "
                f"{sorted(rank_of[f.key] for f in pending)} were still running (cancelled)")
        try:
            wait(pending, timeout=min(_WATCH_EVERY, left), return_when="FIRST_COMPLETED")
        except TimeoutError:
            pass
        failed = [f for f in futures if f.status in ("error", "cancelled", "lost")]
        alive = set(client.scheduler_info()["workers"])
        gone = [f for f in futures if f.status == "pending"
                and placement[rank_of[f.key]] not in alive]
        if failed or gone:
            if failed and not gone:
                # the others fail soon after (naming the lost rank): collect them briefly so
                # the root cause comes first
                try:
                    wait(futures, timeout=min(timeout, 5.0))
                except TimeoutError:
                    pass
                alive = set(client.scheduler_info()["workers"])
            why, cause = _failures(futures, rank_of, placement, alive)
            client.cancel(futures)
            raise CommError(why) from cause
        pending = [f for f in futures if f.status != "finished"]


def _failures(futures, rank_of, placement, alive):
    """One message naming every rank that failed, with its worker: the ranks whose worker
    died first, then the others' errors (a peer's loss last: it follows from the rest); and
    the root cause's exception (the first rank's own error, when none died), else None."""
    errors = []
    for g in futures:
        r = rank_of[g.key]
        w = placement[r]
        if g.status == "finished":
            continue
        if g.status == "error":
            why = g.exception()
            errors.append((1 + isinstance(why, PeerError), r,
                           f"rank {r} (worker {w}) failed: {type(why).__name__}: {why}", why))
        elif w not in alive:
            errors.append((0, r, f"rank {r} (worker {w}): its worker died or left the cluster "
                                 "while it ran", None))
        else:
            errors.append((3, r, f"rank {r} (worker {w}) had not finished ({g.status}; "
                                 "cancelled)", None))
    errors.sort(key=lambda e: e[:2])
    return "; ".join(e[2] for e in errors), errors[0][3] if errors else None


def run_dask(fn, n, *, args=(), kwargs=None, timeout=120.0, client=None, **_) -> list:
    """The runner of ``run(..., backend="dask")``: :func:`run_on_dask` on ``client``, or on a
    local cluster of ``n`` worker processes started for this call when ``client`` is None.

    Parameters
    ----------
    fn : callable
        ``fn(comm, *args, **kwargs)``, importable and picklable.
    n : int
        The number of ranks.
    args, kwargs
        Further arguments of ``fn``.
    timeout : float
        Seconds a rank waits for a peer.
    client : distributed.Client, optional
        The Dask cluster.

    Returns
    -------
    list
        ``fn``'s results by rank.
    """
    kwargs = kwargs or {}
    if client is not None:
        return run_on_dask(client, fn, n=n, args=args, kwargs=kwargs, timeout=timeout)
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=n, threads_per_worker=2, processes=True,
                      dashboard_address=":0") as cluster, Client(cluster) as c:
        return run_on_dask(c, fn, n=n, args=args, kwargs=kwargs, timeout=timeout)


def _place(client, workers, parts, n):
    """A distinct worker per rank, preferring one that already holds the rank's part."""
    from distributed import Future

    placement = [None] * n
    if parts is not None:
        # a part is a future, or a list/tuple of futures (placed by its first one)
        firsts = [p[0] if isinstance(p, (list, tuple)) and p else p for p in parts]
        futures = [p for p in firsts if isinstance(p, Future)]
        holders = client.who_has(futures) if futures else {}
        taken = set()
        for r, p in enumerate(firsts):
            for w in sorted(holders.get(p.key, ()) if isinstance(p, Future) else ()):
                if w in workers and w not in taken:
                    placement[r] = w
                    taken.add(w)
                    break
    free = iter(w for w in workers if w not in set(placement))
    return [p if p is not None else next(free) for p in placement]
