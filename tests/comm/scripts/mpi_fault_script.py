"""A rank of an MPI job misbehaves (issue 32): ``raise`` (an ordinary exception), ``skip`` (it
skips a collective), ``early`` (it returns before the others' last collectives), ``vanish``
(the same without closing its communicator).  Every other rank must raise an error naming it
within the communicator's timeout (5 s), never hang."""

import sys

import numpy as np

from roofline.comm import from_environment

MODE, WHERE, BAD = sys.argv[1], sys.argv[2], 1


def collective(comm, where):
    if where == "allreduce":
        return comm.allreduce(np.arange(4.0))
    if where == "sparse":
        return comm.sparse_allreduce(np.arange(5), np.ones(5))
    return comm.barrier()


def main():
    comm = from_environment(timeout=5)
    comm.allreduce(np.ones(3))  # every rank joined
    if comm.rank == BAD:
        if MODE == "raise":
            raise ValueError("boom on purpose")
        if MODE == "early":
            comm.close()
            return 0
        if MODE == "vanish":  # returns early without closing its communicator
            return 0
    if MODE != "skip" or comm.rank != BAD:
        collective(comm, WHERE)
    collective(comm, WHERE)
    comm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
