"""The ``Communicator`` interface, the transport interface under it, and the errors of the tier.

A :class:`Communicator` joins ``size`` ranks (threads, processes, MPI ranks or simulated nodes)
that call the same collective operations in the same order.  Every blocking operation has a
timeout and an error that names the peer it waited for; no operation returns a partial result.

Arrays
------
The collectives take numpy arrays and, where CuPy is installed, cupy arrays: a cupy input is
copied to the host, reduced, and the result returned as a cupy array on the same device.  The
result is always a new array (the input is never modified).

Transports
----------
The Kylix algorithm (:mod:`roofline.comm._kylix`) runs over any :class:`Transport`: a
point-to-point, tagged, ordered byte channel between the ranks of a group (in-process queues,
TCP sockets, MPI point-to-point messages).  Backends are transports plus, where the platform
offers a faster dense collective (MPI's ``Allreduce``), an override of :meth:`allreduce`.
"""

from __future__ import annotations

import abc

import numpy as np

__all__ = [
    "CommError",
    "CommTimeoutError",
    "Communicator",
    "MessageError",
    "MismatchError",
    "PeerError",
    "SparsePlan",
    "Transport",
    "as_host",
    "like_input",
]

#: The reduction operations every communicator supports.
OPS = ("sum", "max")


class CommError(RuntimeError):
    """A collective operation failed; nothing partial was returned."""


class PeerError(CommError):
    """A peer died, closed its connection or broke the group.

    Parameters
    ----------
    message : str
        What happened (naming the peer).
    peer : int, optional
        The rank of the peer at fault, when known.

    Attributes
    ----------
    peer : int or None
        The rank (in the communicator that raised) of the peer at fault, when known.
    """

    def __init__(self, message: str, peer: int | None = None):
        super().__init__(message)
        self.peer = peer


class CommTimeoutError(PeerError, TimeoutError):
    """A peer did not answer within the communicator's timeout (the message names it).

    Also a :class:`TimeoutError`.

    Parameters
    ----------
    message : str
        What timed out (naming the peer and the timeout).
    peer : int, optional
        The rank of the peer waited for, when known.
    """


class MessageError(CommError):
    """A message failed its checks: wrong magic number or job token, bad CRC-32, wrong layer or
    tag, truncated payload.  Never read as a valid message."""


class MismatchError(CommError, ValueError):
    """The ranks of a collective disagree on it (its operation, dtype, shape, plan, root or
    sequence number: one rank skipped or repeated a collective); the message names the ranks.

    Also a ``ValueError``: the ranks passed arguments that disagree (the in-process group's
    dense all-reduce raised ``ValueError`` for an op or shape mismatch before it checked the
    collective header, and callers catching that still do).

    Parameters
    ----------
    message : str
        What disagrees, naming the ranks.
    ranks : list of int
        The ranks found to disagree (with this one, or with the majority); kept as the
        attribute ``ranks``.
    """

    def __init__(self, message: str, ranks=()):
        super().__init__(message)
        self.ranks = list(ranks)


def check_reducible(x, op: str, name: str = "x"):
    """``TypeError`` naming ``name`` unless ``x`` (a host array) can be reduced by ``op``:
    integers and floats for both operations, complex numbers for ``"sum"``."""
    kinds = "iufc" if op == "sum" else "iuf"
    if x.dtype.kind not in kinds:
        raise TypeError(f"{name} must be an array of numbers for op={op!r}, got dtype "
                        f"{x.dtype}")


def as_host(x):
    """``(numpy array, back)``: ``x`` on the host, C-contiguous, and a function that returns an
    array of the input's kind (numpy or cupy on the input's device) for a host result."""
    mod = type(x).__module__.split(".")[0]
    if mod == "cupy":
        import cupy  # the input is a cupy array: cupy is importable

        device = x.device

        def back(y):
            with device:
                return cupy.asarray(y)

        return np.ascontiguousarray(cupy.asnumpy(x)), back
    return np.ascontiguousarray(x), lambda y: y


def like_input(x, y):
    """``y`` (a host array) as an array of ``x``'s kind (numpy, or cupy on ``x``'s device)."""
    return as_host(x)[1](y) if type(x).__module__.split(".")[0] == "cupy" else y


class Transport(abc.ABC):
    """Ordered, tagged point-to-point byte messages between the ranks of one group.

    Messages between one pair of ranks with the same ``tag`` arrive in the order sent.  A
    ``send`` may return before the peer receives (the transport buffers); ``recv`` blocks until
    the message from ``peer`` with ``tag`` arrives or the timeout passes
    (:class:`CommTimeoutError` naming the peer).  A peer that is known dead raises
    :class:`PeerError` naming it at once.

    Attributes
    ----------
    rank, size : int
    timeout : float
        Seconds a ``recv`` waits.
    shares_process : bool
        Whether all ranks are threads of one process.
    """

    rank: int
    size: int
    timeout: float
    shares_process: bool = False

    @abc.abstractmethod
    def send(self, peer: int, tag: int, payload, layer: int = 0xFFFF) -> None:
        """Send ``payload`` (bytes-like, or a list of bytes-like sent as their concatenation)
        to ``peer`` under ``tag``; ``layer`` (the Kylix layer, informational) may be carried in
        the message header.

        Parameters
        ----------
        peer : int
            The destination rank.
        tag : int
            The message tag; messages with one tag between two ranks arrive in order.
        payload : bytes-like or list of bytes-like
            The message.
        layer : int
            The Kylix layer that sends it (``0xFFFF``: none).

        Raises
        ------
        PeerError
            ``peer`` is known dead or its connection broke.
        """

    @abc.abstractmethod
    def recv(self, peer: int, tag: int) -> bytes | memoryview:
        """The next payload from ``peer`` under ``tag``.

        Parameters
        ----------
        peer : int
            The source rank.
        tag : int
            The message tag.

        Returns
        -------
        bytes or memoryview
            The payload.

        Raises
        ------
        CommTimeoutError
            Nothing arrived within the transport's ``timeout``.
        PeerError
            ``peer`` is known dead.
        MessageError
            The message failed its checks.
        """

    def close(self) -> None:  # noqa: B027 - optional for transports without resources
        """Release sockets, files or queues (idempotent)."""

    # -- polling (optional): what a replicated transport needs to take the first of r copies
    #: Transports that implement :meth:`try_recv` and :meth:`wait_arrival` set this.
    can_poll: bool = False

    def try_recv(self, peer: int, tag: int):
        """The next payload from ``peer`` under ``tag`` if one has arrived, else ``None``;
        :class:`PeerError` when nothing is queued and ``peer`` is known dead.

        Parameters
        ----------
        peer : int
            The source rank.
        tag : int
            The message tag.

        Returns
        -------
        bytes, memoryview or None
            The payload, or None when none has arrived.

        Raises
        ------
        PeerError
            Nothing is queued and ``peer`` is known dead.
        NotImplementedError
            The transport cannot poll (``can_poll`` is False).
        """
        raise NotImplementedError(f"{type(self).__name__} cannot poll")

    def wait_arrival(self, seen: int, timeout: float) -> int:
        """Block until the count of arrived messages differs from ``seen`` (or ``timeout``
        seconds pass) and return the count; ``seen=-1`` returns the count at once.

        Parameters
        ----------
        seen : int
            The count the caller saw last, or -1.
        timeout : float
            The most seconds to wait.

        Returns
        -------
        int
            The number of messages that have arrived at this rank so far.

        Raises
        ------
        NotImplementedError
            The transport cannot poll (``can_poll`` is False).
        """
        raise NotImplementedError(f"{type(self).__name__} cannot poll")


class SparsePlan(abc.ABC):
    """A sparse all-reduce configured once for fixed index sets (Kylix's configuration phase).

    Attributes
    ----------
    indices : ndarray of int64
        This rank's contributed indices, as given.
    want : ndarray of int64
        The indices whose sums this rank receives, as given.
    """

    indices: np.ndarray
    want: np.ndarray

    @abc.abstractmethod
    def reduce(self, values):
        """Sums over every rank at ``want``: ``values`` has ``len(indices)`` rows (1-D, or 2-D
        ``(len(indices), k)``), the result ``len(want)`` rows of the same trailing shape and
        dtype; indices no rank contributed sum to zero.  Collective: every rank of the plan's
        communicator calls it.

        Parameters
        ----------
        values : array, shape (len(indices),) or (len(indices), k)
            This rank's values at its ``indices`` (numpy, or cupy).

        Returns
        -------
        array, shape (len(want),) or (len(want), k)
            The sums, a new array of the input's kind and dtype.
        """


class Communicator(abc.ABC):
    """Collective operations over a group of ``size`` ranks.

    Every method is collective: all ranks call it, in the same order.  A communicator is a
    context manager (``close()`` on exit).

    Attributes
    ----------
    rank : int
        This rank's index, ``0 <= rank < size``.
    size : int
    backend : str
        ``"threads"``, ``"tcp"``, ``"mpi"`` or ``"disk"``.
    shares_process : bool
        Whether every rank is a thread of this process (then numba kernels inside a worker must
        not start their own thread pools: the ranks already use the cores).
    stats : dict
        Counted on this rank since creation: ``{"calls": int, "bytes_sent": int,
        "messages": int, "layers": [{"bytes_sent": int, "messages": int}, ...]}`` (one entry
        per Kylix layer; a group of one sends nothing).
    """

    rank: int
    size: int
    backend: str = "?"
    shares_process: bool = False

    @abc.abstractmethod
    def allreduce(self, x, op: str = "sum"):
        """Element-wise ``op`` (``"sum"`` or ``"max"``) of ``x`` over the group, as a new array,
        bit-identical on every rank.

        Parameters
        ----------
        x : array
            This rank's array (numpy, or cupy); the same shape and dtype on every rank.
        op : {"sum", "max"}
            The reduction.

        Returns
        -------
        array
            The reduction, a new array of the input's kind, shape and dtype.

        Raises
        ------
        ValueError
            An unknown ``op``.
        CommError
            A peer failed or timed out (:class:`PeerError`, :class:`CommTimeoutError`).
        """

    @abc.abstractmethod
    def sparse_plan(self, indices, want=None) -> SparsePlan:
        """Configure a sparse all-reduce for this rank's ``indices`` (int, any order, duplicates
        summed) and the indices it ``want``s back (default: ``indices``).

        Collective: the ranks exchange their index sets once, so that each
        :meth:`SparsePlan.reduce` moves only values.

        Parameters
        ----------
        indices : array-like of int
            The indices this rank contributes values at.
        want : array-like of int, optional
            The indices whose sums this rank receives (default: ``indices``).

        Returns
        -------
        SparsePlan
            The configured plan.
        """

    def sparse_allreduce(self, indices, values, want=None):
        """Each rank contributes ``values`` at ``indices``; returns the sums at ``want``
        (default: this rank's ``indices``).  One-shot form of :meth:`sparse_plan`.

        Parameters
        ----------
        indices : array-like of int
            The indices this rank contributes values at.
        values : array, shape (len(indices),) or (len(indices), k)
            The values at ``indices``.
        want : array-like of int, optional
            The indices whose sums this rank receives (default: ``indices``).

        Returns
        -------
        array, shape (len(want),) or (len(want), k)
            The sums over every rank (zero where no rank contributed).
        """
        return self.sparse_plan(indices, want).reduce(values)

    @abc.abstractmethod
    def broadcast(self, x, root: int = 0):
        """``x`` of rank ``root`` on every rank (an array, or any picklable object; the other
        ranks' ``x`` is ignored).

        Parameters
        ----------
        x : array or picklable object
            The value on ``root``; ignored elsewhere.
        root : int, default 0
            The rank that sends.

        Returns
        -------
        array or object
            ``root``'s ``x`` (a new array on every rank).
        """

    @abc.abstractmethod
    def gather(self, x, root: int = 0):
        """The list of every rank's ``x`` (arrays or picklable objects), by rank, on ``root``;
        ``None`` elsewhere.

        Parameters
        ----------
        x : array or picklable object
            This rank's value.
        root : int, default 0
            The rank that receives.

        Returns
        -------
        list or None
            ``size`` values, by rank, on ``root``; None on the other ranks.
        """

    @abc.abstractmethod
    def allgather(self, x) -> list:
        """The list of every rank's ``x``, by rank, on every rank.

        Parameters
        ----------
        x : array or picklable object
            This rank's value.

        Returns
        -------
        list
            ``size`` values, by rank.
        """

    @abc.abstractmethod
    def barrier(self) -> None:
        """Return once every rank has entered."""

    @abc.abstractmethod
    def split(self, color: int, key: int | None = None) -> Communicator:
        """A communicator of the ranks that gave the same ``color``, ordered by ``(key, rank)``
        (``key`` defaults to this rank).

        Parameters
        ----------
        color : int
            The group this rank joins.
        key : int, optional
            This rank's sort key within its new group (default: its rank).

        Returns
        -------
        Communicator
            The sub-communicator of this rank's color.
        """

    def dup(self) -> Communicator:
        """A communicator of the same ranks whose messages never mix with this one's (for a
        second thread of each rank).  Collective: every rank calls it, in the same order.

        Returns
        -------
        Communicator
            The duplicate.

        Raises
        ------
        NotImplementedError
            The backend cannot duplicate its communicators.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot be duplicated")

    def close(self) -> None:  # noqa: B027 - backends without resources need nothing
        """Release the backend's resources (idempotent)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self) -> str:
        return f"<{type(self).__name__} backend={self.backend!r} rank={self.rank} size={self.size}>"

    @staticmethod
    def _check_op(op):
        if op not in OPS:
            raise ValueError(f"op must be one of {OPS}, got {op!r}")
