"""Probes of the launcher (issue 32): ``spam`` prints lines forever, ``sleep`` writes its pid
to the folder given and sleeps, ``crash1`` makes rank 1 exit before it joins the job."""

import os
import sys
import time

MODE = sys.argv[1]
RANK = int(os.environ.get("ROOFLINE_COMM_RANK", 0))

if MODE == "spam":
    while True:
        print(f"line from rank {RANK}", flush=True)
elif MODE == "sleep":
    with open(os.path.join(sys.argv[2], f"{RANK}.pid"), "w") as f:
        f.write(str(os.getpid()))
    time.sleep(600)
elif MODE == "crash1":
    if RANK == 1:
        sys.exit(3)
    from roofline.comm import from_environment

    from_environment(timeout=60).close()
