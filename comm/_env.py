"""``from_environment()``: the communicator for however this script was started, and ``run``
for interactive users.  Both choose their backend from the registry
(:mod:`roofline.comm._registry`)."""

from __future__ import annotations

import os

from ._base import Communicator
from ._factories import check_timeout, single_communicator
from ._registry import _BACKENDS, backends, detect_backend, one_of

__all__ = ["from_environment", "run"]


def from_environment(*, timeout: float | None = None, degrees=None,
                     replication: int | None = None) -> Communicator:
    """The communicator of this process: under Roofline's launcher a TCP Kylix communicator,
    under ``mpiexec`` (or ``srun``) an MPI one, otherwise a group of one.

    One script therefore runs unchanged alone, under ``python -m roofline.comm.launch -n K``
    and under ``mpiexec -n K``.  The backends are asked in registration order
    (:func:`~roofline.comm.backends`) whether the environment is theirs.

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
        A TCP :class:`KylixCommunicator` under the launcher, an ``MPICommunicator`` under
        MPI, else a :class:`KylixCommunicator` of one rank (``backend="single"``).

    Raises
    ------
    CommError
        The launcher's environment variables are incomplete or malformed.
    """
    env = os.environ
    if timeout is not None:
        timeout = check_timeout(timeout)
    b = detect_backend(env)
    if b is None:
        return single_communicator()
    return b.from_environment(env, timeout=timeout, degrees=degrees, replication=replication)


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
        local processes joined by Kylix over TCP (forked from multiprocessing's fork server,
        which imports numpy, scipy, numba and scikit-learn once and stays up for the next
        call; each process sees the caller's environment variables); ``"mpi"``:
        ``mpiexec -n n`` (the one beside this Python, from the mpich wheel); ``"disk"``: a
        cluster simulated in this process, messages as files in a temporary spool directory
        (:class:`DiskCluster`); ``"dask"``: one rank per worker of ``client``
        (:func:`run_on_dask`), or of a local cluster of ``n`` worker processes started for this
        call when ``client`` is None.  Or any backend added with
        :func:`~roofline.comm.register_backend`.
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
    if replication != 1 and backend not in backends(replication=True):
        names = [f"backend={b!r}" for b in backends(replication=True)]
        raise ValueError(f"replication is available with {' or '.join(names) or 'no backend'}, "
                         f"not {backend!r}")
    b = _BACKENDS.get(backend) if isinstance(backend, str) else None
    if b is None or b.run is None:
        raise ValueError(f"backend must be {one_of(backends(runnable=True))}, got {backend!r}")
    return b.run(fn, n, args=args, kwargs=kwargs, timeout=timeout, client=client,
                 replication=replication)
