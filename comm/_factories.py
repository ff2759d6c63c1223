"""Communicator factories: the transports of the tier joined into communicators.

Every function here sits above both Kylix and the transports (``_tcp``, ``_threads``,
``_disk``, ``_mpi``, ``_replicate``), which import neither Kylix nor this module.  The backend
registry (:mod:`roofline.comm._registry`) names these functions in its rows:

* *environment factories* ``(env, *, timeout, degrees, replication) -> Communicator``, used by
  :func:`~roofline.comm.from_environment` for the backend whose ``detect(env)`` holds;
* *runners* ``(fn, n, *, args, kwargs, timeout, client, replication) -> list``, used by
  :func:`~roofline.comm.run`.

Two adapters make a new transport a one-row affair: :func:`kylix_in_threads` (the ranks are
threads of this process over a group of transports) and :func:`kylix_from_transport` (one
transport per process, made from the environment).
"""

from __future__ import annotations

import logging
import math
import os
import pickle
import subprocess
import sys
import tempfile
import time

from ._base import CommError, Communicator
from ._disk_cluster import DiskCluster
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
from ._replicate import ReplicatedTransport
from ._tcp import TCPTransport, listen, register
from ._threads import QueueGroup, run_in_threads

__all__ = [
    "kylix_from_transport",
    "kylix_in_threads",
    "mpi_detect",
    "mpi_from_environment",
    "mpiexec",
    "run_disk",
    "run_mpi",
    "run_tcp",
    "single_communicator",
    "tcp_communicator",
    "tcp_detect",
    "tcp_from_environment",
]

logger = logging.getLogger(__name__)

#: Variables that MPI process managers set in every rank (MPICH/Hydra, PMIx, Open MPI, SLURM's
#: PMI2 under srun with --mpi).
_MPI_VARS = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS")


def check_timeout(value, name="timeout") -> float:
    """``value`` as a finite number of seconds > 0, else ``CommError`` naming ``name``."""
    try:
        t = float(value)
    except (TypeError, ValueError):
        raise CommError(f"{name} must be a number of seconds, got {value!r}") from None
    if not math.isfinite(t) or t <= 0:
        raise CommError(f"{name} must be a finite number of seconds > 0, got {value!r}")
    return t


# -- adapters: a transport's row in the registry ------------------------------------------------
def kylix_in_threads(make_group, backend: str):
    """A runner for a transport whose ranks are threads of this process.

    Parameters
    ----------
    make_group : callable
        ``make_group(n, timeout)``: an object with ``transport(rank)`` (rank ``rank``'s
        :class:`~roofline.comm.Transport`) and ``abort(reason)`` (wake every waiting rank;
        called when a rank fails), e.g. :class:`~roofline.comm.QueueGroup`.
    backend : str
        The communicators' ``backend``.

    Returns
    -------
    callable
        ``run(fn, n, *, args, kwargs, timeout, **_)``: ``fn(comm, *args, **kwargs)`` on ``n``
        :class:`~roofline.comm.KylixCommunicator` s over the group, one thread each; the
        results by rank.
    """

    def run(fn, n, *, args=(), kwargs=None, timeout=120.0, **_):
        kwargs = kwargs or {}
        group = make_group(n, timeout)

        def one(r):
            with KylixCommunicator(group.transport(r), backend=backend) as comm:
                return fn(comm, *args, **kwargs)

        return run_in_threads(one, n, [group])

    return run


def kylix_from_transport(make_transport, backend: str):
    """An environment factory for a transport with one rank per process.

    Parameters
    ----------
    make_transport : callable
        ``make_transport(env, timeout)``: this process's :class:`~roofline.comm.Transport`
        (``timeout`` may be None: the transport's default).
    backend : str
        The communicator's ``backend``.

    Returns
    -------
    callable
        ``from_environment(env, *, timeout, degrees, replication)``: a
        :class:`~roofline.comm.KylixCommunicator` over the transport (over a
        :class:`~roofline.comm.ReplicatedTransport` of it when ``replication > 1``).
    """

    def from_environment(env, *, timeout=None, degrees=None, replication=None):
        transport = make_transport(env, timeout)
        if replication is not None and int(replication) > 1:
            transport = _replicated(transport, replication)
        return KylixCommunicator(transport, degrees, backend=backend)

    return from_environment


def _replicated(transport, replication):
    try:
        return ReplicatedTransport(transport, replication)
    except ValueError:
        transport.close()
        raise


# -- alone ---------------------------------------------------------------------------------------
def single_communicator() -> KylixCommunicator:
    """A group of one (``backend="single"``): what a script started alone gets."""
    return KylixCommunicator(QueueGroup(1).transport(0), backend="single")


# -- TCP -------------------------------------------------------------------------------------------
def tcp_communicator(rank, size, coord, token, *, degrees=None, timeout=60.0,
                     host="127.0.0.1", replication=1) -> KylixCommunicator:
    """Join a TCP job: listen, register with the coordinator at ``coord = (host, port)``,
    connect to every peer, and return a :class:`~roofline.comm.KylixCommunicator`.

    With ``replication=r > 1`` the ``size`` ranks form ``size / r`` logical nodes of ``r``
    replicas each (:class:`~roofline.comm.ReplicatedTransport`): the communicator's ``rank``
    and ``size`` are the logical ones, and the job survives the death of all but one replica
    of every node.

    Parameters
    ----------
    rank, size : int
        This process's rank and the number of processes.
    coord : tuple of (str, int)
        The :class:`~roofline.comm.Coordinator`'s address.
    token : bytes
        The job token (16 bytes).
    degrees : sequence of int, optional
        Kylix layer degrees.
    timeout : float
        Seconds a rank waits for a peer (and for the set-up).
    host : str
        The address this rank listens on.
    replication : int
        Replicas per logical node.

    Returns
    -------
    KylixCommunicator
        ``backend="tcp"``.
    """
    lst = listen(host)
    try:
        addresses = register(tuple(coord), token, rank, lst.getsockname(), timeout)
    except BaseException:
        lst.close()
        raise
    transport = TCPTransport(rank, size, token, lst, addresses, timeout)
    if int(replication) > 1:
        transport = _replicated(transport, replication)
    return KylixCommunicator(transport, degrees, backend="tcp")


def tcp_detect(env) -> bool:
    """Whether this process was started by Roofline's launcher (or :func:`run_tcp`)."""
    return ENV_COORD in env


def tcp_from_environment(env, *, timeout=None, degrees=None, replication=None):
    """The TCP communicator of a rank started by the launcher, from its environment variables
    (``timeout`` and ``replication`` default to the launcher's).

    Raises
    ------
    CommError
        The launcher's environment variables are incomplete or malformed.
    """
    try:
        rank, size = int(env[ENV_RANK]), int(env[ENV_SIZE])
        host, port = env[ENV_COORD].rsplit(":", 1)
        token = bytes.fromhex(env[ENV_TOKEN])
    except (KeyError, ValueError) as e:
        raise CommError(f"the launcher's environment is incomplete or malformed ({e}); "
                        f"start workers with python -m roofline.comm.launch") from e
    t = (check_timeout(env.get(ENV_TIMEOUT, 600.0), ENV_TIMEOUT) if timeout is None
         else check_timeout(timeout))
    r = int(env.get(ENV_REPLICATION, 1)) if replication is None else int(replication)
    comm = tcp_communicator(rank, size, (host, int(port)), token, degrees=degrees, timeout=t,
                            replication=r)
    logger.info("rank %d of %d over TCP (degrees %s, node %d of %d)", rank, size,
                comm.degrees, comm.rank, comm.size)
    return comm


def _tcp_worker(rank, size, coord, token, timeout, fn, args, kwargs, result_path,
                replication=1, environ=None):
    if environ is not None:  # the caller's environment at the call, not the fork server's
        os.environ.clear()
        os.environ.update(environ)

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


#: Modules the fork server of :func:`run_tcp` imports once, so that its rank processes start
#: with them instead of importing them each (about 1.5 CPU s a process on this project's 2-vCPU
#: VM, most of it scikit-learn's): the project's required dependencies.
FORKSERVER_PRELOAD = ("numpy", "scipy.sparse", "numba", "sklearn.base", "roofline.comm")


def _process_context():
    """The multiprocessing context of :func:`run_tcp`'s rank processes: the fork server (a
    fresh interpreter that imported :data:`FORKSERVER_PRELOAD` and forks one process per rank;
    it stays up for the next call) where the platform has one, else spawn.  The rank processes
    find ``fn`` and the caller's ``__main__`` as spawned ones do."""
    import multiprocessing as mp

    if "forkserver" not in mp.get_all_start_methods():  # pragma: no cover - Windows
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(list(FORKSERVER_PRELOAD))
    return ctx


def run_tcp(fn, n, *, args=(), kwargs=None, timeout=120.0, replication=1, **_) -> list:
    """``fn(comm, *args, **kwargs)`` in ``n`` local processes joined by Kylix over TCP (forked
    by the fork server of :func:`_process_context`, with the caller's environment at the call,
    and a :class:`~roofline.comm.Coordinator` in this process); the results by rank.  The
    preloaded modules read their environment variables (``NUMBA_*``, BLAS threads) once, when
    the fork server starts."""
    kwargs = kwargs or {}
    ctx = _process_context()
    environ = dict(os.environ)
    coord = Coordinator(n, timeout=timeout, replication=replication)
    with tempfile.TemporaryDirectory(prefix="roofline-run-") as tmp:
        paths = [os.path.join(tmp, f"rank{r}.pkl") for r in range(n)]
        procs = [ctx.Process(target=_tcp_worker, daemon=True,
                             args=(r, n, coord.address, coord.token, timeout, fn, args,
                                   kwargs, paths[r], replication, environ)) for r in range(n)]
        try:
            for p in procs:
                p.start()
            _wait(procs, paths, replication, timeout * 3, coord)
        finally:
            for p in procs:
                if p.is_alive():
                    p.kill()
                    p.join()
            coord.close()
        return _collect(paths, [p.exitcode for p in procs], replication)


def _wait(procs, paths, replication, limit, coord=None):
    """Wait for the processes (at most ``limit`` seconds); with replication, stop as soon as
    every node has a replica whose result is saved, and retire (kill) the slower replicas.

    A process that ends before the job starts is given up at ``coord``
    (:meth:`~roofline.comm.Coordinator.lost`): with replication its node starts without it,
    else the job is refused at once instead of the others waiting for it."""
    deadline = time.monotonic() + limit
    ok = set()
    while time.monotonic() < deadline:
        if coord is not None and not coord.complete:
            for r, p in enumerate(procs):
                if p.exitcode is not None and r not in coord.gone:
                    coord.lost(r, f"exited with code {p.exitcode} before it joined the job")
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


# -- MPI -------------------------------------------------------------------------------------------
def mpi_detect(env) -> bool:
    """Whether an MPI process manager (``mpiexec``, ``srun --mpi``) started this process."""
    return any(v in env for v in _MPI_VARS)


def mpi_from_environment(env, *, timeout=None, degrees=None, replication=None) -> Communicator:
    """An ``MPICommunicator`` over ``MPI.COMM_WORLD`` (mpi4py imported now); ``replication``
    is ignored (MPICH cannot survive a dead rank)."""
    from ._mpi_comm import MPICommunicator

    comm = MPICommunicator(degrees=degrees, timeout=600.0 if timeout is None else timeout)
    logger.info("rank %d of %d over MPI", comm.rank, comm.size)
    return comm


def mpiexec() -> str:
    """The ``mpiexec`` beside this Python (the mpich wheel's), else the one on ``PATH``."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.path.exists(here) else "mpiexec"


def run_mpi(fn, n, *, args=(), kwargs=None, timeout=120.0, **_) -> list:
    """``fn(comm, *args, **kwargs)`` on ``mpiexec -n n`` ranks
    (:mod:`roofline.comm._mpi_worker`); the results by rank."""
    kwargs = kwargs or {}
    with tempfile.TemporaryDirectory(prefix="roofline-run-") as tmp:
        job = os.path.join(tmp, "job.pkl")
        from multiprocessing import spawn

        # how multiprocessing's spawn finds the caller's __main__ (a function defined in the
        # calling script): the worker imports that script as __mp_main__ before unpickling
        prep = spawn.get_preparation_data("roofline-mpi")
        prep.pop("authkey", None)  # not picklable, and not needed
        with open(job, "wb") as f:
            pickle.dump((prep, pickle.dumps((fn, args, kwargs, timeout))), f)
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


# -- disk ------------------------------------------------------------------------------------------
def run_disk(fn, n, *, args=(), kwargs=None, timeout=120.0, **_) -> list:
    """``fn(comm, *args, **kwargs)`` on a :class:`~roofline.comm.DiskCluster` of ``n`` nodes
    in a temporary spool directory; the results by node."""
    kwargs = kwargs or {}
    with tempfile.TemporaryDirectory(prefix="roofline-spool-") as spool:
        return DiskCluster(n, spool, timeout=timeout).run(
            lambda comm: fn(comm, *args, **kwargs))
