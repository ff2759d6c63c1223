"""Kylix sparse all-reduce against MPI, side by side in one run, on power-law sparse vectors.

    python benchmarks/allreduce.py                       # K = 4 and 8 processes, loopback
    python benchmarks/allreduce.py --procs 4 --distinct 200000 --repeat 3   # a quick run

For each K the script starts ``mpiexec -n K`` (the mpich wheel's) on itself; every rank holds
a power-law sparse vector (``--distinct`` distinct features out of ``2^--bits``, the popular
features shared by every rank, ids scattered by a fixed odd multiplier as hashing does) and
times, median of ``--repeat``:

* ``kylix-tcp``: :class:`roofline.comm.KylixCommunicator` over TCP sockets, ``plan.reduce``
  (the configuration phase, done once per plan, timed apart);
* ``kylix-mpi``: the same plan over MPI point-to-point messages;
* ``mpi-dense``: MPI's ``Allreduce`` of the full dense vector (``2^bits`` float32);
* ``mpi-allgather``: ``Allgatherv`` of every rank's (index, value) pairs, summed locally;
* ``loopback``: the practical limit: every rank streams over a plain loopback socket to a
  partner the same number of bytes its Kylix reduce sent.

Then the Kylix shape: bytes per layer summed over the ranks, the ratio of the total to the
first layer, and a simulated 64-node cluster (threads over in-process queues, the same
butterfly) with its chosen degrees.  Targets (issue 17): kylix >= 2x mpi-dense, total bytes
<= 1.6x the first layer's, kylix-tcp within 2x of the loopback limit.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time

import numpy as np

MULT = 0x9E3779B1  # odd: a bijection of [0, 2^bits) (feature hashing scatters the hot ids)


def power_law_indices(rank, distinct, bits, seed=0):
    """``distinct`` distinct feature ids of rank ``rank``: density ~ x^(-2/3) over the ranks of
    popularity (the popular ones shared by every rank), scattered over ``[0, 2^bits)``."""
    rng = np.random.default_rng([seed, rank])
    space = 1 << bits
    out = np.zeros(0, np.int64)
    n = distinct
    while out.size < distinct:
        x = (rng.random(int(n * 1.5)) ** 3 * space).astype(np.int64)
        out = np.unique(np.concatenate([out, x]))
        n = distinct - out.size + 1000
    out = rng.permutation(out)[:distinct]
    return np.sort((out * MULT) % space)


def _median_time(fn, repeat, barrier):
    ts = []
    for _ in range(repeat):
        barrier()
        t = time.perf_counter()
        fn()
        barrier()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def _loopback(mpi, nbytes):
    """Every rank streams ``nbytes`` to a partner (rank ^ 1) over a fresh loopback socket,
    both directions at once; returns the seconds until this rank's streams are done."""
    rank, size = mpi.Get_rank(), mpi.Get_size()
    partner = rank ^ 1
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(1)
    ports = mpi.allgather(lst.getsockname()[1])
    peer_bytes = mpi.allgather(nbytes)
    if partner >= size:
        mpi.Barrier()
        mpi.Barrier()
        return 0.0
    if rank % 2 == 0:
        s, _ = lst.accept()
    else:
        s = socket.create_connection(("127.0.0.1", ports[partner]))
    lst.close()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    payload = memoryview(bytearray(min(nbytes, 64 << 20) or 1))
    buf = bytearray(4 << 20)
    mpi.Barrier()
    t = time.perf_counter()

    def send():
        left = nbytes
        while left > 0:
            k = min(left, len(payload))
            s.sendall(payload[:k])
            left -= k

    th = threading.Thread(target=send)
    th.start()
    got, want = 0, peer_bytes[partner]
    while got < want:
        k = s.recv_into(buf, min(len(buf), want - got))
        if k == 0:
            break
        got += k
    th.join()
    dt = time.perf_counter() - t
    mpi.Barrier()
    s.close()
    return dt


def worker(args):
    from mpi4py import MPI

    from roofline.comm import Coordinator, MPICommunicator, tcp_communicator

    mpi = MPI.COMM_WORLD
    rank, K = mpi.Get_rank(), mpi.Get_size()
    idx = power_law_indices(rank, args.distinct, args.bits)
    vals = np.random.default_rng(rank).random(idx.size, dtype=np.float32)
    space = 1 << args.bits
    res = {}

    # Kylix over TCP: rank 0's coordinator, its address handed out through MPI
    coord = Coordinator(K, timeout=120) if rank == 0 else None
    addr, token = mpi.bcast((coord.address, coord.token) if rank == 0 else None, root=0)
    tcp = tcp_communicator(rank, K, addr, token, timeout=300)
    kmpi = MPICommunicator(timeout=300)
    for name, comm in (("kylix-tcp", tcp), ("kylix-mpi", kmpi)):
        mpi.Barrier()
        t = time.perf_counter()
        plan = comm.sparse_plan(idx)
        res[f"{name}-config"] = time.perf_counter() - t
        before = [dict(x) for x in comm.stats["layers"]]
        out = plan.reduce(vals)
        res[f"{name}-layers"] = [a["bytes_sent"] - b["bytes_sent"] for a, b in
                                 zip(comm.stats["layers"], before, strict=True)]
        res[name] = _median_time(lambda p=plan: p.reduce(vals), args.repeat, mpi.Barrier)
        res[f"{name}-check"] = float(out.sum())
    res["degrees"] = list(tcp.degrees)

    dense = np.zeros(space, np.float32)
    dense[idx] = vals
    out = np.empty_like(dense)
    res["mpi-dense"] = _median_time(lambda: mpi.Allreduce(dense, out, op=MPI.SUM),
                                    args.repeat, mpi.Barrier)
    res["mpi-dense-check"] = float(out[idx].sum())

    def allgather_sparse():
        counts = np.array(mpi.allgather(idx.size))
        displ = np.concatenate([[0], np.cumsum(counts)[:-1]])
        all_i = np.empty(counts.sum(), np.int64)
        all_v = np.empty(counts.sum(), np.float32)
        mpi.Allgatherv(idx, [all_i, counts, displ, MPI.INT64_T])
        mpi.Allgatherv(vals, [all_v, counts, displ, MPI.FLOAT])
        acc = np.bincount(all_i, weights=all_v, minlength=space)
        return acc[idx]

    res["mpi-allgather"] = _median_time(allgather_sparse, args.repeat, mpi.Barrier)
    res["loopback"] = _loopback(mpi, int(sum(res["kylix-tcp-layers"])))
    tcp.close()
    kmpi.close()
    if coord is not None:
        coord.close()
    allres = mpi.gather(res, root=0)
    if rank == 0:
        print("RESULT " + json.dumps(allres))


def simulate(n_nodes, distinct, bits):
    """The butterfly of ``n_nodes`` nodes simulated in this process (threads over in-process
    queues, the same code and messages as over TCP): degrees and bytes per layer."""
    from roofline.comm import KylixCommunicator, QueueGroup, kylix_degrees, run_in_threads

    degrees = kylix_degrees(n_nodes, nnz=distinct)
    group = QueueGroup(n_nodes, timeout=600)

    def node(r):
        idx = power_law_indices(r, distinct, bits, seed=1)
        comm = KylixCommunicator(group.transport(r), degrees)
        plan = comm.sparse_plan(idx)
        before = [dict(x) for x in comm.stats["layers"]]
        plan.reduce(np.ones(idx.size, np.float32))
        return [a["bytes_sent"] - b["bytes_sent"] for a, b in
                zip(comm.stats["layers"], before, strict=True)]

    per = np.array(run_in_threads(node, n_nodes, [group]))
    return degrees, per.sum(axis=0)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--procs", type=int, nargs="+", default=[4, 8])
    p.add_argument("--distinct", type=int, default=1_000_000)
    p.add_argument("--bits", type=int, default=24)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--sim-nodes", type=int, default=64)
    p.add_argument("--sim-distinct", type=int, default=200_000)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return worker(args)
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    print(f"power-law sparse vectors: {args.distinct:,} distinct features per rank out of "
          f"2^{args.bits}, float32 values; loopback on {os.cpu_count()} cores (K > cores "
          "oversubscribes); median of", args.repeat)
    rows = []
    for K in args.procs:
        cmd = [mpiexec, "-n", str(K), sys.executable, os.path.abspath(__file__), "--worker",
               "--distinct", str(args.distinct), "--bits", str(args.bits), "--repeat",
               str(args.repeat)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
        line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        if proc.returncode or not line:
            print(proc.stdout[-3000:], proc.stderr[-3000:])
            raise SystemExit(f"mpiexec -n {K} failed")
        res = json.loads(line[0][7:])
        r0 = res[0]
        t = {k: max(r[k] for r in res) for k in ("kylix-tcp", "kylix-mpi", "mpi-dense",
                                                "mpi-allgather", "loopback")}
        layers = np.sum([r["kylix-tcp-layers"] for r in res], axis=0)
        assert abs(r0["kylix-tcp-check"] - r0["mpi-dense-check"]) <= 1e-3 * abs(
            r0["mpi-dense-check"]), "kylix and MPI disagree"
        rows.append((K, r0["degrees"], t, layers,
                     max(r["kylix-tcp-config"] for r in res)))
    print()
    print("| K | degrees | kylix-tcp ms | kylix-mpi ms | mpi-dense ms | mpi-allgather ms | "
          "loopback limit ms | dense / kylix | allgather / kylix | kylix / loopback | "
          "config ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for K, deg, t, _layers, cfg in rows:
        best = min(t["kylix-tcp"], t["kylix-mpi"])
        print(f"| {K} | {tuple(deg)} | {t['kylix-tcp'] * 1e3:.1f} | {t['kylix-mpi'] * 1e3:.1f} "
              f"| {t['mpi-dense'] * 1e3:.1f} | {t['mpi-allgather'] * 1e3:.1f} | "
              f"{t['loopback'] * 1e3:.1f} | {t['mpi-dense'] / best:.2f}x | "
              f"{t['mpi-allgather'] / best:.2f}x | {t['kylix-tcp'] / t['loopback']:.2f}x | "
              f"{cfg * 1e3:.0f} |")
    print()
    print("| K | bytes per layer (all ranks, reduce-down + reduce-up) | total / first layer |")
    print("|---|---|---|")
    for K, _, _, layers, _ in rows:
        print(f"| {K} | {', '.join(f'{b / 1e6:.1f} MB' for b in layers)} | "
              f"{layers.sum() / layers[0]:.2f} |")
    if args.sim_nodes < 2:  # --sim-nodes 0: no simulated cluster
        return 0
    deg, sim = simulate(args.sim_nodes, args.sim_distinct, 20)
    print()
    print(f"simulated {args.sim_nodes} nodes ({args.sim_distinct:,} distinct features each out "
          f"of 2^20): degrees {deg}; bytes per layer "
          f"{', '.join(f'{b / 1e6:.2f} MB' for b in sim)}; total / first layer "
          f"{sim.sum() / sim[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
