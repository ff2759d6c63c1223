"""``from_environment()``: the communicator for however this script was started, and ``run``
for interactive users."""

from __future__ import annotations

import logging
import os
import pickle
import subprocess
import sys
import tempfile
import time

from ._base import CommError, Communicator
from ._kylix import KylixCommunicator
from ._launch import (
    ENV_COORD,
    ENV_RANK,
    ENV_REPLICATION,
    ENV_SIZE,
    ENV_TIMEOUT,
    ENV_TOKEN,
    Coordinator,
)
from ._threads import QueueGroup, run_in_threads

__all__ = ["from_environment", "run"]

logger = logging.getLogger(__name__)

#: Variables that MPI process managers set in every rank (MPICH/Hydra, PMIx, Open MPI, SLURM's
#: PMI2 under srun with --mpi).
_MPI_VARS = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS")


def from_environment(*, timeout: float | None = None, degrees=None,
                     replication: int | None = None) -> Communicator:
    """The communicator of this process: under Roofline's launcher a TCP Kylix communicator,
    under ``mpiexec`` (or ``srun``) an MPI one, otherwise a group of one.

    One script therefore runs unchanged alone, under ``python -m roofline.comm.launch -n K``
    and under ``mpiexec -n K``.

    Parameters
    ----------
    timeout : float, optional
        Seconds a rank waits for a peer (default: the launcher's, else 600).
    degrees : sequence of int, optional
        Kylix layer degrees.
    replication : int, optional
        Under the launcher: replicas per logical node (default: the launcher's
        ``--replication``, else 1); see :class:`~roofline.comm.ReplicatedTransport`.

    Returns
    -------
    Communicator
        A TCP :class:`KylixCommunicator` under the launcher, an :class:`MPICommunicator` under
        MPI, else a :class:`KylixCommunicator` of one rank (``backend="single"``).

    Raises
    ------
    CommError
        The launcher's environment variables are incomplete or malformed.
    """
    env = os.environ
    if ENV_COORD in env:
        from ._tcp import tcp_communicator

        try:
            rank, size = int(env[ENV_RANK]), int(env[ENV_SIZE])
            host, port = env[ENV_COORD].rsplit(":", 1)
            token = bytes.fromhex(env[ENV_TOKEN])
        except (KeyError, ValueError) as e:
            raise CommError(f"the launcher's environment is incomplete or malformed ({e}); "
                            f"start workers with python -m roofline.comm.launch") from e
        t = float(env.get(ENV_TIMEOUT, 600.0)) if timeout is None else timeout
        r = int(env.get(ENV_REPLICATION, 1)) if replication is None else int(replication)
        comm = tcp_communicator(rank, size, (host, int(port)), token, degrees=degrees, timeout=t,
                                replication=r)
        logger.info("rank %d of %d over TCP (degrees %s, node %d of %d)", rank, size,
                    comm.degrees, comm.rank, comm.size)
        return comm
    if any(v in env for v in _MPI_VARS):
        from ._mpi import MPICommunicator

        comm = MPICommunicator(degrees=degrees, timeout=600.0 if timeout is None else timeout)
        logger.info("rank %d of %d over MPI", comm.rank, comm.size)
        return comm
    return KylixCommunicator(QueueGroup(1).transport(0), backend="single")


def _tcp_worker(rank, size, coord, token, timeout, fn, args, kwargs, result_path,
                replication=1):
    from ._tcp import tcp_communicator

    def save(out):
        with open(result_path + ".tmp", "wb") as f:
            pickle.dump(out, f)
        os.replace(result_path + ".tmp", result_path)  # complete, or absent

    saved = False
    try:
        with tcp_communicator(rank, size, coord, token, timeout=timeout,
                              replication=replication) as comm:
            # saved before the transport closes: with replication, the caller may retire the
            # slower replicas as soon as every node has a result
            save(("ok", fn(comm, *args, **kwargs)))
            saved = True
    except BaseException as e:  # noqa: BLE001 - sent back to the caller
        if not saved:
            save(("error", f"{type(e).__name__}: {e}"))


def run(fn, n: int, *, backend: str = "threads", args=(), kwargs=None,
        timeout: float = 120.0, client=None, replication: int = 1) -> list:
    """Run ``fn(comm, *args, **kwargs)`` on ``n`` ranks and return the results by rank.

    Parameters
    ----------
    fn : callable
        For ``"tcp"`` and ``"mpi"`` it runs in other processes: it must be importable (defined
        in a module, not in ``__main__`` of an interactive session), and its arguments and
        result picklable.
    n : int
        The number of ranks (>= 1).
    backend : {"threads", "tcp", "mpi", "disk", "dask"}
        ``"threads"``: threads of this process (Kylix over in-process queues); ``"tcp"``: ``n``
        local processes joined by Kylix over TCP; ``"mpi"``: ``mpiexec -n n`` (the one beside
        this Python, from the mpich wheel); ``"disk"``: a cluster simulated in this process,
        messages as files in a temporary spool directory (:class:`DiskCluster`); ``"dask"``:
        one rank per worker of ``client`` (:func:`run_on_dask`), or of a local cluster of
        ``n`` worker processes started for this call when ``client`` is None.
    args : tuple
        Further positional arguments of ``fn``.
    kwargs : dict, optional
        Keyword arguments of ``fn``.
    timeout : float
        Seconds a rank waits for a peer; the whole run is bounded by a few times this.
    client : distributed.Client, optional
        The Dask cluster of ``backend="dask"``.
    replication : int
        ``backend="tcp"`` only: the ``n`` processes form ``n / replication`` logical nodes of
        identical replicas (``fn`` sees the logical ``comm.rank`` and ``comm.size``); the run
        succeeds when every node has a replica that returns, and the results of replicas that
        died are ``None``.

    Returns
    -------
    list
        ``fn``'s result on each rank, by rank.

    Raises
    ------
    CommError
        When a rank fails: the message names the rank and its error.
    ValueError
        ``n < 1``, an unknown backend, or ``replication`` with a backend other than
        ``"tcp"``.
    """
    kwargs = kwargs or {}
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if replication != 1 and backend != "tcp":
        raise ValueError(f"replication is available with backend='tcp', not {backend!r}")
    if backend == "threads":
        group = QueueGroup(n, timeout=timeout)

        def one(r):
            with KylixCommunicator(group.transport(r), backend="threads") as comm:
                return fn(comm, *args, **kwargs)

        return run_in_threads(one, n, [group])
    if backend == "tcp":
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        coord = Coordinator(n, timeout=timeout)
        with tempfile.TemporaryDirectory(prefix="roofline-run-") as tmp:
            paths = [os.path.join(tmp, f"rank{r}.pkl") for r in range(n)]
            procs = [ctx.Process(target=_tcp_worker, daemon=True,
                                 args=(r, n, coord.address, coord.token, timeout, fn, args,
                                       kwargs, paths[r], replication)) for r in range(n)]
            try:
                for p in procs:
                    p.start()
                _wait(procs, paths, replication, timeout * 3)
            finally:
                for p in procs:
                    if p.is_alive():
                        p.kill()
                        p.join()
                coord.close()
            return _collect(paths, [p.exitcode for p in procs], replication)
    if backend == "mpi":
        return _run_mpi(fn, n, args, kwargs, timeout)
    if backend == "disk":
        from ._disk import DiskCluster

        with tempfile.TemporaryDirectory(prefix="roofline-spool-") as spool:
            return DiskCluster(n, spool, timeout=timeout).run(
                lambda comm: fn(comm, *args, **kwargs))
    if backend == "dask":
        from ._dask import run_on_dask

        if client is not None:
            return run_on_dask(client, fn, n=n, args=args, kwargs=kwargs, timeout=timeout)
        from distributed import Client, LocalCluster

        with LocalCluster(n_workers=n, threads_per_worker=2, processes=True,
                          dashboard_address=":0") as cluster, Client(cluster) as c:
            return run_on_dask(c, fn, n=n, args=args, kwargs=kwargs, timeout=timeout)
    raise ValueError(f"backend must be 'threads', 'tcp', 'mpi', 'disk' or 'dask', got "
                     f"{backend!r}")


def _wait(procs, paths, replication, limit):
    """Wait for the processes (at most ``limit`` seconds); with replication, stop as soon as
    every node has a replica whose result is saved, and retire (kill) the slower replicas."""
    deadline = time.monotonic() + limit
    ok = set()
    while time.monotonic() < deadline:
        if all(p.exitcode is not None for p in procs):
            return
        if replication > 1:
            ok.update(r for r in range(len(procs)) if r not in ok and _saved_ok(paths[r]))
        if replication > 1 and all(any(q in ok for q in range(a, a + replication))
                                   for a in range(0, len(procs), replication)):
            slow = [r for r, p in enumerate(procs) if p.is_alive() and r not in ok]
            if slow:
                logger.info("every node has a result: retiring the slower replicas %s", slow)
            for r in slow:
                procs[r].kill()
            for p in procs:
                p.join(max(deadline - time.monotonic(), 0.1))
            return
        time.sleep(0.02)


def _saved_ok(path):
    if not os.path.exists(path):
        return False
    with open(path, "rb") as f:
        return pickle.load(f)[0] == "ok"


def _collect(paths, codes, replication=1):
    """The results by rank, from the workers' result files; a ``CommError`` naming every failed
    rank, except (with replication) replicas whose node has a replica that succeeded."""
    results, failed = [], {}
    for r, path in enumerate(paths):
        try:
            with open(path, "rb") as f:
                status, value = pickle.load(f)
        except FileNotFoundError:
            status, value = "error", f"the process died (exit code {codes[r]})"
        results.append(value if status == "ok" else None)
        if status != "ok":
            failed[r] = f"rank {r}: {value}"
    fatal = [r for r in failed
             if replication == 1 or all(q in failed for q in
                                        range(r - r % replication, r - r % replication
                                              + replication))]
    if failed and not fatal:
        logger.warning("replicas failed; their nodes went on without them: %s",
                       "; ".join(failed.values()))
    if fatal:
        raise CommError("; ".join(failed[r] for r in fatal))
    return results


def mpiexec() -> str:
    """The ``mpiexec`` beside this Python (the mpich wheel's), else the one on ``PATH``."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.path.exists(here) else "mpiexec"


def _run_mpi(fn, n, args, kwargs, timeout):
    with tempfile.TemporaryDirectory(prefix="roofline-run-") as tmp:
        job = os.path.join(tmp, "job.pkl")
        with open(job, "wb") as f:
            pickle.dump((fn, args, kwargs, timeout), f)
        cmd = [mpiexec(), "-n", str(n), sys.executable, "-m", "roofline.comm._mpi_worker", job]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout * 3)
        except subprocess.TimeoutExpired as e:
            raise CommError(f"mpiexec -n {n} did not finish within {timeout * 3:g} s") from e
        paths = [os.path.join(tmp, f"rank{r}.pkl") for r in range(n)]
        try:
            return _collect(paths, [proc.returncode] * n)
        except CommError as e:
            raise CommError(f"{e}\nmpiexec output:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}") \
                from None
