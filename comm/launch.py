"""``python -m roofline.comm.launch -n K [-l] [--timeout S] [--replication R] script.py ARGS``:
run a script as K ranks (K / R logical nodes of R replicas each with ``--replication``).

Each rank calls :func:`roofline.comm.from_environment` to get its communicator.  The ranks'
output is copied unprefixed, as ``mpiexec`` copies it (a script whose rank 0 prints one JSON
line prints it parseable); ``-l`` / ``--label`` prefixes every line with ``[rank r]``, as
``mpiexec -l`` does.  The exit code is non-zero if any rank fails (the launcher names the
rank on stderr; ``-l`` tells whose output shows why); no worker process outlives the launcher.
"""

from __future__ import annotations

import argparse
import math
import sys

from ._launch import launch


def _seconds(text):
    try:
        t = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(t) or t <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds > 0, got {text!r}")
    return t


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m roofline.comm.launch",
                                description="Run a script as K ranks of one Roofline job.")
    p.add_argument("-n", "--nprocs", type=int, required=True, help="number of ranks")
    p.add_argument("-l", "--label", action="store_true",
                   help="prefix each line of the ranks' output with [rank r] (as mpiexec -l)")
    p.add_argument("--timeout", type=_seconds, default=120.0,
                   help="seconds a rank waits for a peer (default 120)")
    p.add_argument("--replication", type=int, default=1,
                   help="replicas per logical node (Kylix replication; default 1): the job "
                        "survives the death of all but one replica of each node")
    p.add_argument("script", help="the Python script every rank runs")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    a = p.parse_args(argv)
    if a.nprocs < 1:
        p.error(f"-n must be >= 1, got {a.nprocs}")
    if a.replication < 1 or a.nprocs % a.replication:
        p.error(f"--replication must be >= 1 and divide -n {a.nprocs}, got {a.replication}")
    return launch(a.nprocs, [a.script, *a.args], timeout=a.timeout, replication=a.replication,
                  label=a.label)


if __name__ == "__main__":
    sys.exit(main())
