"""The backend registry: one row per backend, from which :func:`~roofline.comm.run` and
:func:`~roofline.comm.from_environment` choose (as ``distributed.comm.registry`` does for
Dask's transports).

A row (:class:`Backend`) says how to run a function on ``n`` ranks (``run``), how to recognise
and join the backend from a process's environment (``detect`` and ``from_environment``), which
Python packages it needs (``requires``, checked without importing them) and whether it can
replicate nodes.  Every list of backends, every check and every error message of
:func:`~roofline.comm.run` and :func:`~roofline.comm.from_environment` is derived from the
rows; heavy dependencies (mpi4py, dask.distributed) are imported only inside the factories
the rows name (:mod:`roofline.comm._factories`, :mod:`roofline.comm._dask`).

Rows are kept in registration order, which is also the order in which
:func:`~roofline.comm.from_environment` asks them to ``detect`` the environment (the launcher
before MPI: a launcher run inside ``mpiexec`` is a TCP job).

Example: a transport whose ranks are threads of one process takes one row::

    register_backend("pipes", run=kylix_in_threads(PipeGroup, "pipes"),
                     summary="ranks are threads of this process, messages through os.pipe")
"""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Callable

from ._dask import run_dask
from ._factories import (
    kylix_in_threads,
    mpi_detect,
    mpi_from_environment,
    run_disk,
    run_mpi,
    run_tcp,
    tcp_detect,
    tcp_from_environment,
)
from ._threads import QueueGroup

__all__ = ["Backend", "backends", "get_backend", "register_backend"]


@dataclasses.dataclass(frozen=True)
class Backend:
    """One row of the registry.

    Attributes
    ----------
    name : str
        The name given to ``run(..., backend=name)``.
    run : callable or None
        ``run(fn, n, *, args, kwargs, timeout, client, replication) -> list``: ``fn(comm,
        *args, **kwargs)`` on ``n`` ranks, the results by rank (None: not runnable from
        Python).
    detect : callable or None
        ``detect(env) -> bool``: whether the process environment ``env`` (a mapping) says this
        process is a rank of this backend.
    from_environment : callable or None
        ``from_environment(env, *, timeout, degrees, replication) -> Communicator``: this
        process's communicator when ``detect(env)`` holds (``timeout``, ``replication`` None:
        the backend's defaults).
    requires : tuple of str
        Python packages the backend imports (lazily).
    replication : bool
        Whether ``run`` takes ``replication > 1``.
    summary : str
        One line for listings.
    """

    name: str
    run: Callable | None = None
    detect: Callable | None = None
    from_environment: Callable | None = None
    requires: tuple = ()
    replication: bool = False
    summary: str = ""

    def available(self) -> bool:
        """Whether every package in ``requires`` can be imported (none is imported here).

        Returns
        -------
        bool
        """
        return all(importlib.util.find_spec(m) is not None for m in self.requires)


_BACKENDS: dict[str, Backend] = {}


def register_backend(name: str, *, run=None, detect=None, from_environment=None, requires=(),
                     replication: bool = False, summary: str = "",
                     replace: bool = False) -> Backend:
    """Add a backend to the registry (after the others: last in detection order).

    Parameters
    ----------
    name : str
        The backend's name (``run(..., backend=name)``, ``comm.backend``).
    run : callable, optional
        The runner, ``run(fn, n, *, args, kwargs, timeout, client, replication) -> list``;
        for a transport whose ranks are threads of one process,
        ``roofline.comm._factories.kylix_in_threads(make_group, name)``.
    detect, from_environment : callable, optional
        Given together: ``detect(env) -> bool`` and ``from_environment(env, *, timeout,
        degrees, replication) -> Communicator``, for processes started by this backend's own
        launcher (``roofline.comm._factories.kylix_from_transport`` makes the second from a
        transport).
    requires : sequence of str
        Python packages the backend needs (for :meth:`Backend.available`).
    replication : bool
        Whether ``run`` supports ``replication > 1``.
    summary : str
        One line describing the backend.
    replace : bool
        Replace a row of the same name (kept at its place) instead of refusing it.

    Returns
    -------
    Backend
        The new row.

    Raises
    ------
    ValueError
        ``name`` is empty or already registered (without ``replace``), neither ``run`` nor
        ``from_environment`` is given, or only one of ``detect`` and ``from_environment``.
    TypeError
        A factory is not callable.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"a backend needs a non-empty name, got {name!r}")
    if name in _BACKENDS and not replace:
        raise ValueError(f"backend {name!r} is already registered (replace=True replaces it)")
    if run is None and from_environment is None:
        raise ValueError(f"backend {name!r} needs run= or from_environment=")
    if (detect is None) != (from_environment is None):
        raise ValueError(f"backend {name!r}: detect= and from_environment= go together")
    for what, f in (("run", run), ("detect", detect), ("from_environment", from_environment)):
        if f is not None and not callable(f):
            raise TypeError(f"backend {name!r}: {what}= must be callable, got {f!r}")
    row = Backend(name, run, detect, from_environment, tuple(requires), bool(replication),
                  summary)
    _BACKENDS[name] = row
    return row


def get_backend(name: str) -> Backend:
    """The registry's row for ``name``.

    Parameters
    ----------
    name : str
        A registered backend's name.

    Returns
    -------
    Backend
        Its row.

    Raises
    ------
    ValueError
        ``name`` is not registered (the message lists those that are).
    """
    try:
        return _BACKENDS[name]
    except (KeyError, TypeError):
        raise ValueError(f"backend must be {one_of(backends())}, got {name!r}") from None


def backends(*, available: bool = False, runnable: bool = False,
             replication: bool = False) -> tuple[str, ...]:
    """The registered backends' names, in registration order.

    Parameters
    ----------
    available : bool
        Only those whose required packages are importable.
    runnable : bool
        Only those :func:`~roofline.comm.run` can start (with a ``run`` factory).
    replication : bool
        Only those whose ``run`` supports ``replication > 1``.

    Returns
    -------
    tuple of str
    """
    return tuple(b.name for b in _BACKENDS.values()
                 if (not available or b.available()) and (not runnable or b.run is not None)
                 and (not replication or b.replication))


def detect_backend(env) -> Backend | None:
    """The first row (in registration order) whose ``detect(env)`` holds, or None."""
    for b in _BACKENDS.values():
        if b.detect is not None and b.detect(env):
            return b
    return None


def one_of(names) -> str:
    """``"'a', 'b' or 'c'"``: names for an error message."""
    names = [repr(n) for n in names]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


# -- the rows ------------------------------------------------------------------------------------
register_backend("threads", run=kylix_in_threads(
    lambda n, timeout: QueueGroup(n, timeout=timeout), "threads"),
    summary="threads of this process, Kylix over in-process queues (QueueGroup)")
register_backend("tcp", run=run_tcp, detect=tcp_detect, from_environment=tcp_from_environment,
                 replication=True,
                 summary="local processes (or python -m roofline.comm.launch), Kylix over a "
                         "socket mesh")
register_backend("mpi", run=run_mpi, detect=mpi_detect, from_environment=mpi_from_environment,
                 requires=("mpi4py",),
                 summary="mpiexec -n K: MPI's dense collectives, Kylix over Isend/Iprobe")
register_backend("disk", run=run_disk,
                 summary="a cluster simulated in this process, messages as checksummed files "
                         "(DiskCluster)")
register_backend("dask", run=run_dask, requires=("distributed",),
                 summary="one rank per Dask worker, joined over TCP (run_on_dask)")
