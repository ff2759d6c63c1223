"""The worker of ``roofline.comm.run(..., backend="mpi")``: ``mpiexec -n K python -m
roofline.comm._mpi_worker JOB`` runs the pickled function on every rank and writes its result
beside the job file."""

import os
import pickle
import sys


def main(job):
    from multiprocessing import spawn

    from ._mpi import NOTICES
    from ._mpi_comm import MPICommunicator

    with open(job, "rb") as f:
        prep, payload = pickle.load(f)
    spawn.prepare(prep)  # the caller's __main__, as __mp_main__
    fn, args, kwargs, timeout = pickle.loads(payload)
    comm = MPICommunicator(timeout=timeout)
    try:
        out = ("ok", fn(comm, *args, **kwargs))
    except BaseException as e:  # noqa: BLE001 - sent back to the caller
        out = ("error", f"{type(e).__name__}: {e}")
        NOTICES.post(comm.transport.MPI, "failed", why=out[1])
        NOTICES.dirty = True  # abort at exit: a survivor may be left in a collective
    path = os.path.join(os.path.dirname(job), f"rank{comm.rank}.pkl")
    with open(path + ".tmp", "wb") as f:
        pickle.dump(out, f)
    os.replace(path + ".tmp", path)
    if out[0] == "error":
        import time

        from ._mpi import ABORT_GRACE

        time.sleep(ABORT_GRACE)  # the others read the notice and save their own results
    comm.close()


if __name__ == "__main__":
    main(sys.argv[1])
