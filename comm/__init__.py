"""Communicators: the interface, Kylix sparse all-reduce, and its backends.

A :class:`Communicator` joins ``size`` ranks that call the same collectives in the same order:
dense :meth:`~Communicator.allreduce`, sparse :meth:`~Communicator.sparse_allreduce` and its
reusable :meth:`~Communicator.sparse_plan` (Kylix's configuration done once), ``broadcast``,
``gather``, ``allgather``, ``barrier`` and ``split``.  :class:`KylixCommunicator` implements all
of them over any point-to-point :class:`Transport`; the backends are transports:

* ``threads``: :class:`QueueGroup` (ranks are threads of one process); the CD workers'
  :class:`InProcessGroup` reduces dense vectors in shared memory.
* ``tcp``: ``TCPTransport`` (``roofline.comm._tcp``), a mesh of sockets set up through a
  :class:`Coordinator`; ``python -m roofline.comm.launch -n K script.py`` starts K ranks.
* ``disk``: :class:`DiskCluster`, a cluster simulated in one process whose messages are
  checksummed files in a spool directory (bit-identical to the other backends); and
  :class:`DiskNodeCluster`, whose nodes live on disk too (their states checksummed files, run
  in turn within a memory cap, the Kylix layers exchanged as packet files sized by the disk
  roofline), for simulated clusters larger than the machine's memory.
* ``dask``: :func:`run_on_dask`, one rank per worker of a Dask cluster, joined over TCP.
* ``mpi``: ``MPICommunicator`` (``roofline.comm._mpi_comm``, mpi4py imported lazily): MPI's
  own dense collectives, Kylix over MPI point-to-point for the sparse ones.

:func:`from_environment` returns the right one for how the script was started (alone: a group
of one), and :func:`run` runs a function on K ranks from Python or IPython.  Both choose the
backend from a registry (:func:`backends`, :func:`get_backend`, :func:`register_backend`):
one row per backend says how to run it, how to recognise it in the environment and what it
needs installed.

A cluster cost model (:class:`ClusterModel`, :class:`Network`, :func:`kylix_steps`) predicts
a collective's time on a stated network from Kylix's layer degrees and message sizes, and a
solver's time per iteration at any number of ranks; :func:`model_degrees` (and
``kylix_degrees(..., model=)``) picks the degrees it predicts fastest.

Example::

    from roofline.comm import KylixCommunicator, QueueGroup, run_in_threads

    group = QueueGroup(4)

    def work(rank):
        comm = KylixCommunicator(group.transport(rank))
        plan = comm.sparse_plan(indices[rank])       # configured once
        return plan.reduce(values[rank])             # sums over the 4 ranks at indices[rank]

    sums = run_in_threads(work, 4, [group])
"""

from importlib.metadata import version as _dist_version

from ._base import (
    CommError,
    CommTimeoutError,
    Communicator,
    MessageError,
    MismatchError,
    PeerError,
    SparsePlan,
    Transport,
)
from ._dask import run_on_dask
from ._disk import DiskTransport
from ._disk_cluster import DiskCluster
from ._disk_nodes import DiskNodeCluster, Node, NodeStore, StateError, load_state, save_state
from ._env import from_environment, run
from ._factories import tcp_communicator
from ._inprocess import InProcessCommunicator, InProcessGroup
from ._kylix import KylixCommunicator, KylixPlan, kylix_degrees
from ._launch import Coordinator, launch
from ._mpi_comm import MPICommunicator
from ._netmodel import ClusterModel, ComputeScaling, Network, Step, kylix_steps, model_degrees
from ._registry import backends, get_backend, register_backend
from ._replicate import ReplicatedTransport
from ._threads import QueueGroup, QueueTransport, run_in_threads

__version__ = _dist_version("roofline")  # the installed distribution's version

__all__ = [
    "ClusterModel",
    "CommError",
    "CommTimeoutError",
    "Communicator",
    "ComputeScaling",
    "Coordinator",
    "DiskCluster",
    "DiskNodeCluster",
    "DiskTransport",
    "InProcessCommunicator",
    "InProcessGroup",
    "KylixCommunicator",
    "KylixPlan",
    "MPICommunicator",
    "MessageError",
    "MismatchError",
    "Network",
    "Node",
    "NodeStore",
    "PeerError",
    "QueueGroup",
    "QueueTransport",
    "ReplicatedTransport",
    "SparsePlan",
    "StateError",
    "Step",
    "Transport",
    "backends",
    "from_environment",
    "get_backend",
    "kylix_degrees",
    "kylix_steps",
    "launch",
    "load_state",
    "model_degrees",
    "register_backend",
    "run",
    "run_in_threads",
    "run_on_dask",
    "save_state",
    "tcp_communicator",
]
