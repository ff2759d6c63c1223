"""The disk-simulated cluster whose nodes live on disk (``roofline.comm.DiskNodeCluster``,
issue 35) at 64 and 1024 nodes: bytes per Kylix layer against the seed's figures, and the time
per round against the disk roofline's prediction.

    python benchmarks/disk_cluster.py                      # 64 and 1024 nodes
    python benchmarks/disk_cluster.py --nodes 64 --quick   # small states, a few seconds

For each cluster size one fresh process (so that its peak resident memory is its own):

1. measures the disk roofline of the spool's file system now (``kernels.measure_disk``, side
   by side with the run on this loaded machine: small-file latency, streaming rates, CRC-32),
   by the wall clock and by this process's CPU time (the latter twice, keeping each figure's
   best), and the main memory's rate (the better of ``gmat.machine_roofline().bandwidth`` and
   an element-wise sum's now; ``--remeasure-machine`` measures the former again);
2. creates ``n`` nodes whose states (a model replica of ``--state-kib`` KiB of float64 and the
   node's feature set) sum to ``--cap-ratio`` times the memory cap the cluster may use;
3. **model averaging** (dense Kylix all-reduce of the replicas, disk-bound): rounds of "load
   the state and the last average, save, contribute the replica", then the reduce-scatter and
   all-gather through packet files; the seconds per round (rounds 1..R-1, every node loading
   its result) against ``DiskNodeCluster.predicted_seconds``: ``DiskRoofline.io_time`` of the
   new files written (the nodes' states, renamed into place), the files overwritten in place
   (the packets, and the nodes' contributions, plans and results: at
   ``DiskNodeCluster.overwrite_latency``), the files opened for reading (a packet once per
   phase), every further message read from an open packet (one ``pread`` each, at
   ``DiskNodeCluster.slice_latency``), the bytes, and a CRC-32 of every byte at the rate of
   the CRC the cluster computes (ISA-L's with ``isal``); by the wall clock and by CPU time,
   and the CPU time in the file calls alone against the prediction without the CRC.  **The
   headline column** is the round's CPU time without the user's step
   (``stats["step_cpu_seconds"]``, reported apart) against the CPU-time roofline's prediction
   of the round's I/O plus the collective's arithmetic (``stats["compute_bytes"]`` at the
   main memory's rate);
4. **sparse Kylix all-reduce** of power-law feature sets (Zipf indices over ``--features``
   hashed features, as Kylix's power-law graphs): configuration, reduce down and sums up per
   layer, bytes per layer and the later layers' share of the first (the seed: ~50%); its time
   per round from the steady rounds (round 0 also loads numba's cached loops and compiles
   the receive's, which call libc and ISA-L through ctypes and cannot be cached: about 0.9
   CPU s a process; reported apart).

Degrees come from the disk roofline (``DiskNodeCluster.choose_degrees``: messages of at least
``packet_bytes``).  ``--packet synced`` (default) takes the synced corner, the seed's design
point (a durable disk: millisecond latency, MB packets), while the files go through the page
cache (no ``fsync``: the prediction uses the page-cache figures); ``--packet cached`` takes the
page-cache corner.  Everything written is removed at the end.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np


def _rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _best(a, b):
    """The figure-by-figure best of two disk rooflines (lower latencies, higher rates)."""
    import dataclasses

    lat = ("write_latency", "read_latency", "synced_write_latency")
    rate = ("write_bandwidth", "read_bandwidth", "synced_write_bandwidth", "checksum_bandwidth")
    return dataclasses.replace(a, **{k: min(getattr(a, k), getattr(b, k)) for k in lat},
                               **{k: max(getattr(a, k), getattr(b, k)) for k in rate})


def _sum_bandwidth(nbytes=64 << 20, repeat=5):
    """Bytes/s of ``np.add(a, b, out=a)`` over arrays beyond the caches (2 read, 1 written),
    by the wall clock, the best of ``repeat``."""
    a = np.ones(nbytes // 8)
    b = np.ones(nbytes // 8)
    best = 0.0
    for _ in range(repeat):
        t0 = time.perf_counter()
        np.add(a, b, out=a)
        best = max(best, 3 * nbytes / max(time.perf_counter() - t0, 1e-9))
    return best


def _one(args):
    """One cluster size, in this process; prints one JSON line."""
    from roofline import kernels
    from roofline.comm import DiskNodeCluster

    n = args.nodes[0]
    root = tempfile.mkdtemp(prefix=f"disk-cluster-{n}-", dir=args.root)
    out = {"nodes": n}
    try:
        disk = kernels.measure_disk(root, size_bytes=32 << 20, n_small=300, n_synced=10,
                                    repeat=5)
        # the CPU-time roofline: the best of two measurements, figure by figure (the lowest
        # latencies, the highest rates: the ceiling; one measurement under load can miss it
        # by 4x, e.g. a read rate of 0.8 GB/s against 3.7 in the next)
        cpu_disk = _best(*(kernels.measure_disk(root, size_bytes=32 << 20, n_small=300,
                                                n_synced=3, repeat=5, clock="cpu")
                           for _ in range(2)))

        def cpu_predicted(cluster, s):  # the same traffic at the CPU-time roofline's rates
            return cluster.predicted_seconds(s, cpu_disk)

        def own_predicted(cluster, s):  # and the collective's arithmetic at DRAM bandwidth
            return cluster.predicted_seconds(s, cpu_disk, memory_bandwidth=mem_bw)

        def own(s):  # the round's CPU time without the user's step
            return s["cpu_seconds"] - s["step_cpu_seconds"]

        def files_predicted(cluster, s):  # its file calls alone (no CRC), vs io_cpu_seconds
            over = s.get("files_overwritten", 0)
            preads = max(0, s.get("messages_read", 0) - s.get("packets_opened", 0))
            return cpu_disk.io_time(s["files_written"] - over, s["bytes_written"],
                                    s["files_read"], s["bytes_read"]) + over * (
                cluster.overwrite_latency("cpu") if over else 0.0) + preads * (
                cluster.slice_latency("cpu") if preads else 0.0)

        out["disk"] = {k: getattr(disk, k) for k in (
            "write_latency", "read_latency", "write_bandwidth", "read_bandwidth",
            "synced_write_latency", "synced_write_bandwidth", "checksum_bandwidth", "load")}
        out["disk"]["corner"] = disk.corner()
        out["disk"]["synced_corner"] = disk.corner(True)
        out["cpu_disk"] = {k: getattr(cpu_disk, k) for k in (
            "write_latency", "read_latency", "write_bandwidth", "read_bandwidth",
            "checksum_bandwidth")}
        d = args.state_kib * 1024 // 8
        total = n * d * 8
        cap = int(total / args.cap_ratio)
        packet = int(math.ceil(disk.corner(args.packet == "synced")))
        base_rss = _rss_mib()
        rng = np.random.default_rng(0)
        cl = DiskNodeCluster(n, os.path.join(root, "dense"), memory_cap=cap, disk=disk,
                             packet_bytes=packet)
        # the CRC-32 the cluster computes (ISA-L's with the optional isal package, else
        # zlib's, which is what measure_disk times): the predictions use its rate
        out["crc"] = {"impl": cl.crc32,
                      "bandwidth": cl.prediction_roofline().checksum_bandwidth,
                      "cpu_bandwidth": cl.prediction_roofline(cpu_disk).checksum_bandwidth}

        def init(r):
            g = np.random.default_rng(r)
            return {"w": g.standard_normal(d), "cursor": 0}

        t0 = time.perf_counter()
        cl.init(init)
        out["init_s"] = time.perf_counter() - t0

        def average(node, state, reduced):
            if reduced is not None:
                state["w"] = reduced / node.size
            state["cursor"] += 1
            return node.allreduce(state["w"])

        stats = cl.run(average, args.rounds)
        check = cl.load(n - 1)["w"]
        ref = sum(init(r)["w"] for r in range(min(n, 4)))  # spot check: the first replicas
        assert check.shape == (d,) and np.isfinite(check).all() and ref.shape == (d,)
        steady = stats[1:] or stats
        out["dense"] = {
            "state_bytes_total": total, "memory_cap": cap, "packet_bytes": packet,
            "degrees": steady[0]["degrees"],
            "round_s": float(np.mean([s["seconds"] for s in steady])),
            "cpu_s": float(np.mean([s["cpu_seconds"] for s in steady])),
            "io_s": float(np.mean([s["io_seconds"] for s in steady])),
            "predicted_s": float(np.mean([s["predicted_io_seconds"] for s in steady])),
            "predicted_cpu_s": float(np.mean([cpu_predicted(cl, s) for s in steady])),
            "step_cpu_s": float(np.mean([s["step_cpu_seconds"] for s in steady])),
            "own_cpu_s": float(np.mean([own(s) for s in steady])),
            "compute_bytes": float(np.mean([s["compute_bytes"] for s in steady])),
            "io_cpu_s": float(np.mean([s["io_cpu_seconds"] for s in steady])),
            "predicted_files_cpu_s": float(np.mean([files_predicted(cl, s) for s in steady])),
            "bytes_written": steady[0]["bytes_written"], "files_written": steady[0][
                "files_written"], "bytes_read": steady[0]["bytes_read"],
            "files_read": steady[0]["files_read"], "slices_read": steady[0]["slices_read"],
            "peak_bytes": max(s["peak_bytes"] for s in stats),
            "layers": steady[0]["layers"]}
        out["latencies"] = {f"{what}_{clock}": getattr(cl, f"{what}_latency")(clock)
                            for what in ("overwrite", "slice") for clock in ("wall", "cpu")}
        cl.remove()
        # the sparse all-reduce of power-law feature sets
        nnz = args.nnz
        feats = [np.unique(((rng.zipf(args.zipf, size=nnz) - 1) * 2654435761) % args.features)
                 for _ in range(n)]
        sc = DiskNodeCluster(n, os.path.join(root, "sparse"), memory_cap=cap, disk=disk,
                             packet_bytes=packet)
        sc.init(lambda r: {"idx": feats[r], "g": rng.standard_normal(feats[r].size)})

        n_sparse = max(3, args.rounds)

        def sparse(node, state, reduced):
            if node.round == n_sparse - 1:
                state["sum"] = reduced
                return None
            return node.sparse_allreduce(state["idx"], state["g"])

        sstats = cl_stats = sc.run(sparse, n_sparse)
        # the steady rounds (round 0 also loads and compiles the numba loops of the reduce)
        ssteady = [s for s in sstats[1:] if s["kind"] == "sparse"]
        s0 = ssteady[0]
        counts = np.zeros(args.features)
        for r in range(min(n, 8)):
            counts[feats[r]] += 1
        out["sparse"] = {"nnz_mean": float(np.mean([f.size for f in feats])),
                         "degrees": s0["degrees"],
                         "round_s": float(np.mean([s["seconds"] for s in ssteady])),
                         "cpu_s": float(np.mean([s["cpu_seconds"] for s in ssteady])),
                         "io_s": float(np.mean([s["io_seconds"] for s in ssteady])),
                         "predicted_s": float(np.mean([s["predicted_io_seconds"]
                                                       for s in ssteady])),
                         "predicted_cpu_s": float(np.mean([cpu_predicted(sc, s)
                                                           for s in ssteady])),
                         "step_cpu_s": float(np.mean([s["step_cpu_seconds"]
                                                      for s in ssteady])),
                         "own_cpu_s": float(np.mean([own(s) for s in ssteady])),
                         "compute_bytes": float(np.mean([s["compute_bytes"]
                                                         for s in ssteady])),
                         "first_round_cpu_s": sstats[0]["cpu_seconds"],
                         "io_cpu_s": float(np.mean([s["io_cpu_seconds"] for s in ssteady])),
                         "predicted_files_cpu_s": float(np.mean([files_predicted(sc, s)
                                                                 for s in ssteady])),
                         "files_written": s0["files_written"], "files_read": s0["files_read"],
                         "slices_read": s0["slices_read"],
                         "layers": s0["layers"],
                         "peak_bytes": max(s["peak_bytes"] for s in cl_stats)}
        sc.remove()
        out["peak_rss_mib"] = _rss_mib()
        out["base_rss_mib"] = base_rss
        # the main memory's rate, after the jobs (its arrays are not the nodes' memory)
        from roofline import gmat

        machine = gmat.machine_roofline(remeasure=args.remeasure_machine)
        # the ceiling is the best rate known to be reached: the cached machine roofline's (a
        # figure measured under load is low) or one thread's element-wise sum now (the
        # reduce's own kernel, 2 read and 1 written), by the wall clock (this VM's CPU-time
        # accounting credits memory-bound loops with 40 GB/s: not a rate it reaches)
        mem_bw = max(machine.bandwidth, _sum_bandwidth())
        out["machine"] = {"bandwidth": mem_bw, "load": machine.load,
                          "threads": machine.threads, "cached": machine.bandwidth}
        for name, cluster, rounds in (("dense", cl, steady), ("sparse", sc, ssteady)):
            out[name]["predicted_own_cpu_s"] = float(np.mean([own_predicted(cluster, s)
                                                              for s in rounds]))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print("RESULT " + json.dumps(out))


def _table(res):
    n = res["nodes"]
    dk, dn, sp = res["disk"], res["dense"], res["sparse"]
    lines = [f"\n## {n} nodes\n",
             f"disk (measured in this run, load {dk['load']:.1f}): small file write "
             f"{dk['write_latency'] * 1e6:.0f} us / read {dk['read_latency'] * 1e6:.0f} us "
             f"(synced write {dk['synced_write_latency'] * 1e3:.1f} ms), streaming write "
             f"{dk['write_bandwidth'] / 1e9:.2f} GB/s / read {dk['read_bandwidth'] / 1e9:.2f} "
             f"GB/s, CRC-32 {dk['checksum_bandwidth'] / 1e9:.2f} GB/s; corner "
             f"{dk['corner'] / 1e3:.0f} kB (page cache), {dk['synced_corner'] / 1e6:.2f} MB "
             "(synced)",
             f"disk in CPU time (the same measurement timed by this process's CPU time: "
             f"the page cache's work without the other helpers' share of the cores): small file"
             f" write {res['cpu_disk']['write_latency'] * 1e6:.0f} us / read "
             f"{res['cpu_disk']['read_latency'] * 1e6:.0f} us, streaming write "
             f"{res['cpu_disk']['write_bandwidth'] / 1e9:.2f} GB/s / read "
             f"{res['cpu_disk']['read_bandwidth'] / 1e9:.2f} GB/s, CRC-32 "
             f"{res['cpu_disk']['checksum_bandwidth'] / 1e9:.2f} GB/s",
             f"the cluster's CRC-32 ({res['crc']['impl']}): {res['crc']['bandwidth'] / 1e9:.2f}"
             f" GB/s wall, {res['crc']['cpu_bandwidth'] / 1e9:.2f} GB/s CPU (the rate the "
             "predictions use)",
             "a file overwritten in place (packets, the nodes' transient files): "
             f"{res['latencies']['overwrite_wall'] * 1e6:.1f} us wall, "
             f"{res['latencies']['overwrite_cpu'] * 1e6:.1f} us CPU; a message's pread from an "
             f"open packet: {res['latencies']['slice_wall'] * 1e6:.1f} us wall, "
             f"{res['latencies']['slice_cpu'] * 1e6:.1f} us CPU",
             f"main memory: {res['machine']['bandwidth'] / 1e9:.2f} GB/s (the collective's "
             "arithmetic: compulsory bytes at this rate; the better of "
             "gmat.machine_roofline()'s, cached at load "
             f"{res['machine']['load']:.1f} with {res['machine']['threads']} threads: "
             f"{res['machine']['cached'] / 1e9:.2f} GB/s, and a sum's now, by the wall clock)",
             f"memory: node states {dn['state_bytes_total'] / 2**20:.0f} MiB in all, cap "
             f"{dn['memory_cap'] / 2**20:.0f} MiB (ratio "
             f"{dn['state_bytes_total'] / dn['memory_cap']:.1f}); most node data held at once "
             f"{max(dn['peak_bytes'], sp['peak_bytes']) / 2**20:.1f} MiB; process peak RSS "
             f"{res['peak_rss_mib']:.0f} MiB (of which {res['base_rss_mib']:.0f} MiB before "
             "the nodes: Python, numpy, numba)",
             "",
             "| job | degrees | packet | s/round (wall) | predicted (wall roofline) | wall / "
             "predicted | CPU s/round | predicted (CPU roofline) | CPU / predicted | file calls:"
             " CPU s, predicted, ratio | **round without the step: CPU s (step's), predicted"
             " (disk + arithmetic), ratio** |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in (("model averaging (dense)", dn), ("sparse Kylix (config + reduce)", sp)):
        lines.append(f"| {name} | {'x'.join(map(str, r['degrees']))} | "
                     f"{dn['packet_bytes'] / 1e6:.2f} MB | {r['round_s']:.2f} | "
                     f"{r['predicted_s']:.2f} | {r['round_s'] / r['predicted_s']:.2f} | "
                     f"{r['cpu_s']:.2f} | {r['predicted_cpu_s']:.2f} | "
                     f"{r['cpu_s'] / r['predicted_cpu_s']:.2f} | {r['io_cpu_s']:.2f}, "
                     f"{r['predicted_files_cpu_s']:.2f}, "
                     f"{r['io_cpu_s'] / r['predicted_files_cpu_s']:.2f} | "
                     f"{r['own_cpu_s']:.2f} ({r['step_cpu_s']:.2f}), "
                     f"{r['predicted_own_cpu_s']:.2f} (of which "
                     f"{r['compute_bytes'] / res['machine']['bandwidth']:.3f}), "
                     f"**{r['own_cpu_s'] / r['predicted_own_cpu_s']:.2f}** |")
    lines += ["", "files per round (dense, sparse): written "
              f"{dn['files_written']}, {sp['files_written']}; opened for reading "
              f"{dn['files_read']}, {sp['files_read']}; messages and states read "
              f"{dn['slices_read']}, {sp['slices_read']}; the sparse job's first round "
              f"(numba's loops loaded or compiled) {sp['first_round_cpu_s']:.2f} CPU s"]
    lines += ["", f"sparse: {sp['nnz_mean']:.0f} distinct features per node; bytes sent "
              "between distinct nodes per layer (the seed: later layers ~50% of the first):",
              "", "| layer | degree | config MB | reduce down MB | sums up MB | down / layer 0 |",
              "|---|---|---|---|---|---|"]
    first = sp["layers"][0]["down_bytes"] if sp["layers"] else 1
    for i, (k, lay) in enumerate(zip(sp["degrees"], sp["layers"], strict=True)):
        lines.append(f"| {i} | {k} | {lay['config_bytes'] / 1e6:.1f} | "
                     f"{lay['down_bytes'] / 1e6:.1f} | {lay['up_bytes'] / 1e6:.1f} | "
                     f"{lay['down_bytes'] / first:.2f} |")
    lines += ["", "dense per layer (reduce-scatter down, all-gather up), MB: " + ", ".join(
        f"{lay['down_bytes'] / 1e6:.1f}/{lay['up_bytes'] / 1e6:.1f}" for lay in dn["layers"])]
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, nargs="+", default=[64, 1024])
    p.add_argument("--state-kib", type=int, default=None,
                   help="KiB of model replica per node (default 4096 at 64 nodes, 512 at 1024)")
    p.add_argument("--cap-ratio", type=float, default=3.0,
                   help="the nodes' states over the memory cap")
    p.add_argument("--nnz", type=int, default=None,
                   help="features drawn per node (default 400k at 64 nodes, 40k at 1024)")
    p.add_argument("--features", type=int, default=1 << 22)
    p.add_argument("--zipf", type=float, default=1.3)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--packet", choices=("synced", "cached"), default="synced")
    p.add_argument("--root", default=None, help="where the nodes' files go (default: $TMPDIR)")
    p.add_argument("--quick", action="store_true", help="small states and feature sets")
    p.add_argument("--remeasure-machine", action="store_true",
                   help="measure the main-memory bandwidth now (gmat.machine_roofline("
                        "remeasure=True), cached) instead of reading the cache")
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args(argv)
    if args.one:
        return _one(args)
    results = []
    for n in args.nodes:
        state = args.state_kib or (64 if args.quick else 4096 if n <= 64 else 512)
        nnz = args.nnz or (4000 if args.quick else 400_000 if n <= 64 else 40_000)
        cmd = [sys.executable, __file__, "--one", "--nodes", str(n), "--state-kib", str(state),
               "--cap-ratio", str(args.cap_ratio), "--nnz", str(nnz), "--features",
               str(args.features), "--zipf", str(args.zipf), "--rounds", str(args.rounds),
               "--packet", args.packet] + (["--root", args.root] if args.root else []) + (
                   ["--remeasure-machine"] if args.remeasure_machine else [])
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode:
            sys.stderr.write(proc.stdout + proc.stderr)
            raise SystemExit(f"the {n}-node run failed")
        res = json.loads(next(line for line in proc.stdout.splitlines()
                              if line.startswith("RESULT "))[7:])
        res["wall_s"] = time.perf_counter() - t0
        results.append(res)
        print(_table(res), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
