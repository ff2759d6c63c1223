"""One script, three ways: alone, under ``python -m roofline.comm.launch -n K`` and under
``mpiexec -n K``.  Each rank contributes a power-law sparse vector; rank 0 prints the check of
the sparse all-reduce against the numpy sum of every rank's vector as JSON on one line."""

import json
import os
import signal
import sys

import numpy as np

from roofline.comm import from_environment

EMPTY = int(sys.argv[sys.argv.index("--empty-rank") + 1]) if "--empty-rank" in sys.argv else -1
DIE = int(sys.argv[sys.argv.index("--die-rank") + 1]) if "--die-rank" in sys.argv else -1
# with the launcher's --replication: the physical rank (one replica) that dies
DIE_PROCESS = (int(sys.argv[sys.argv.index("--die-process") + 1])
               if "--die-process" in sys.argv else -1)
# physical ranks that are gone before they register with the coordinator: "kill" (SIGKILL) or
# "exit" (code 0, a script that never joins), e.g. --before-join 1:kill,2:exit
BEFORE_JOIN = dict(
    (int(rank), how) for rank, how in (
        item.split(":") for item in sys.argv[sys.argv.index("--before-join") + 1].split(",")))\
    if "--before-join" in sys.argv else {}
# physical ranks SIGKILLed right after they registered, before the mesh is connected, e.g. 1,2
AFTER_REGISTER = ({int(r) for r in sys.argv[sys.argv.index("--after-register") + 1].split(",")}
                  if "--after-register" in sys.argv else set())


def contribution(rank, n_features=5000, seed=0):
    rng = np.random.default_rng(seed + rank)
    idx = np.unique((rng.zipf(1.2, size=2000) - 1) % n_features)
    if rank == EMPTY:  # a rank with no data
        idx = idx[:0]
    return idx.astype(np.int64), rng.normal(size=idx.size)


def main():
    how = BEFORE_JOIN.get(int(os.environ.get("ROOFLINE_COMM_RANK", -2)))
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "exit":
        return 0
    if int(os.environ.get("ROOFLINE_COMM_RANK", -2)) in AFTER_REGISTER:
        import roofline.comm._factories as factories

        register = factories.register

        def register_then_die(*args, **kwargs):
            addresses = register(*args, **kwargs)
            os.kill(os.getpid(), signal.SIGKILL)  # registered: the others will look for it
            return addresses

        factories.register = register_then_die
    comm = from_environment(timeout=30)
    with comm:
        idx, val = contribution(comm.rank)
        got = comm.sparse_allreduce(idx, val)
        if comm.rank == DIE or int(os.environ.get("ROOFLINE_COMM_RANK", -2)) == DIE_PROCESS:
            os.kill(os.getpid(), signal.SIGKILL)  # between two collectives, as a crash would
        dense = comm.allreduce(np.arange(10.0) * (comm.rank + 1))
        ref = np.zeros(5000)
        for r in range(comm.size):
            i, v = contribution(r)
            np.add.at(ref, i, v)
        ok = bool(np.allclose(got, ref[idx], rtol=1e-12, atol=1e-12))
        ok_dense = bool(np.allclose(dense, np.arange(10.0) * comm.size * (comm.size + 1) / 2))
        oks = comm.gather([ok, ok_dense])
        if comm.rank == 0:
            print(json.dumps({"backend": comm.backend, "size": comm.size,
                              "ok": all(all(o) for o in oks), "digest": float(got.sum())}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
