"""Communicators: Kylix sparse allreduce over TCP, a disk-simulated cluster, MPI.

Not implemented yet.  The coordinate-descent solvers already talk through the small
``Communicator`` interface of :mod:`roofline.learners` (in-process implementation); the
transports of this package will implement it.
"""

__all__: list[str] = []
