"""Ranks of an MPI job that end cleanly in different orders (issue 32: the flaky
``test_under_mpiexec[3]``).  Every rank does a few collectives, then, by ``ORDER``:

* ``lingers``: rank 0 stays busy (no communication) while the others close and exit, then
  closes;
* ``others-linger``: every rank but 0 stays busy while rank 0 closes and exits;
* ``no-close``: no rank closes its communicator (the process just ends);
* ``finalize``: every rank closes, then calls ``MPI.Finalize()`` itself;
* ``dup``: every rank also makes, uses and closes a duplicate of its communicator.

After closing, each rank works on for a moment (no communication), then prints
``rank R done`` last; the job must end with code 0 (MPICH's process manager
kills the whole job, code 9, when a rank's ``MPI_Finalize`` fails)."""

import os
import sys
import time

import numpy as np

from roofline.comm import from_environment

ORDER = sys.argv[1]


def main():
    comm = from_environment(timeout=20)
    for _ in range(3):
        comm.allreduce(np.arange(4.0))
    comm.sparse_allreduce(np.arange(3) + comm.rank, np.ones(3))
    if ORDER == "dup":
        with comm.dup() as d:
            d.allreduce(np.ones(2))
    if (ORDER == "lingers" and comm.rank == 0) or (ORDER == "others-linger" and comm.rank != 0):
        time.sleep(1.0)  # busy elsewhere: the others close and exit meanwhile
    if ORDER != "no-close":
        comm.close()
    from mpi4py import MPI

    time.sleep(0.3)  # other work after closing: the others' last messages arrive meanwhile
    MPI.COMM_WORLD.Iprobe(source=MPI.ANY_SOURCE, tag=7)  # the script's own use of MPI
    if ORDER == "finalize":
        MPI.Finalize()
    os.write(1, f"rank {comm.rank} done\n".encode())  # one write: lines never interleave
    return 0


if __name__ == "__main__":
    sys.exit(main())
