"""The worker of ``roofline.comm.run(..., backend="mpi")``: ``mpiexec -n K python -m
roofline.comm._mpi_worker JOB`` runs the pickled function on every rank and writes its result
beside the job file."""

import os
import pickle
import sys


def main(job):
    from ._mpi_comm import MPICommunicator

    with open(job, "rb") as f:
        fn, args, kwargs, timeout = pickle.load(f)
    comm = MPICommunicator(timeout=timeout)
    try:
        out = ("ok", fn(comm, *args, **kwargs))
    except BaseException as e:  # noqa: BLE001 - sent back to the caller
        out = ("error", f"{type(e).__name__}: {e}")
    path = os.path.join(os.path.dirname(job), f"rank{comm.rank}.pkl")
    with open(path, "wb") as f:
        pickle.dump(out, f)
    comm.close()


if __name__ == "__main__":
    main(sys.argv[1])
