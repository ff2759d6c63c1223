"""The cluster cost model of issue 31 (``roofline.comm.ClusterModel``), fitted to real runs of
the distributed trust-region Newton and checked on an emulated network.

    python benchmarks/cluster_model.py                     # fit at K = 2, 4; predict to 1024
    python benchmarks/cluster_model.py --emulate 1000 100  # + the check on shaped links (root)

**Fit.**  ``fit_glm(X, y, solver="newton", comm=comm)`` runs on K = 2 and 4 TCP processes on
this machine (``roofline.comm.run(backend="tcp")``, each rank its contiguous shard of the
examples, one thread) and returns one record per iteration (``res.info["per_iter"]``: CG
steps, compute seconds, seconds inside collectives, collectives, bytes).  An iteration runs
``cg_steps`` Hessian-vector reduces (one column over the union of the features) and one
reduce (two columns) of the loss with the gradient per trial point; each collective follows
one pass over the local data (a *work unit*).  From these:

* the hosts' costs per step, message and byte (``ClusterModel.fit``) from the seconds inside
  collectives, against the steps ``kylix_steps`` gives for the run's degrees and the union
  sizes ``U(j)`` of the data (distinct features in ``j`` ranks' shards, counted from the data);
* a work unit's seconds ``serial + parallel / K`` (``ComputeScaling.fit``) from the compute
  seconds per collective at each K, scaled by ``cores / K`` where ranks outnumber this
  machine's cores (they then share them).

**Prediction.**  The K = 2 run's iterations (distributed Newton takes the same iterations at
every K) at K = 2 ... 1024 ranks, each holding ``n / K`` examples, on a 1 Gb/s and a 10 Gb/s
network (50 us latency): seconds per iteration and to the run's tolerance (the plan's
configuration included), with the communicator's default degrees and with the degrees the
model itself chooses (``model_degrees``).

**Check** (``--emulate RATE_MBIT ...``; root, ``ip`` and ``tc``): K ranks in network namespaces
of their own joined by veth pairs to a bridge in a namespace of its own (nothing is added to
this machine's own namespace), each link shaped both ways by ``tc``'s token bucket
(``tbf rate R burst 64kb latency 50ms``).  The coordinator runs in the bridge's namespace and
each rank is ``ip netns exec NS python this-script --worker ...`` (joining through the
launcher's environment variables, listening on its own address).  A run on unshaped links
fits the hosts' costs; the model then predicts the seconds per iteration at each rate, which
are measured.  ``--json`` writes the table for tests (``tests/comm/test_netem.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import replace

import numpy as np
import scipy.sparse as sp

#: Scalars the distributed Newton reduces after the features (``glm/_newton.py``'s tail).
TAIL = 4
KS = (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


# ---------------------------------------------------------------------------------------------
# the problem


def criteo(n, bits, seed=0):
    """Criteo-like hashed CTR data, features x examples (CSC)."""
    from roofline.datasources import make_criteo_like_matrix

    X, y = make_criteo_like_matrix(n, seed=seed, n_bits=bits, dtype=np.float64)
    return sp.csc_matrix(X), np.asarray(y, dtype=np.float64)


def save_shards(path, X, y, K):
    """Rank ``r``'s contiguous shard of the examples as ``shard{K}_{r}.npz``."""
    for r, cols in enumerate(np.array_split(np.arange(X.shape[1]), K)):
        Xk = X[:, cols]
        np.savez(os.path.join(path, f"shard{K}_{r}.npz"), data=Xk.data, indices=Xk.indices,
                 indptr=Xk.indptr, shape=np.array(Xk.shape), y=y[cols])


def coverage(X):
    """``F(m)``: the distinct features of the first ``m`` examples (a callable), from each
    feature's first example."""
    n = X.shape[1]
    col = np.repeat(np.arange(n), np.diff(X.indptr))
    first = np.full(X.shape[0], n, dtype=np.int64)
    np.minimum.at(first, X.indices, col)
    first = np.sort(first[first < n])
    return lambda m: int(np.searchsorted(first, m, side="left"))


def union_fn(F, n, K):
    """``U(j)`` at ``K`` ranks of ``n / K`` examples each: the distinct features of ``j``
    ranks' shards, plus the solver's scalar tail."""
    return lambda j: F(int(round(j * n / K))) + TAIL


# ---------------------------------------------------------------------------------------------
# one rank


def rank_work(comm, path, kw, repeat):
    """Fit on this rank's shard ``repeat`` times (after a warm-up); the records of each fit."""
    from roofline.glm import fit_glm

    with np.load(os.path.join(path, f"shard{comm.size}_{comm.rank}.npz")) as z:
        X = sp.csc_matrix((z["data"], z["indices"], z["indptr"]), shape=tuple(z["shape"]))
        y = z["y"]
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = min(300, X.shape[1])
        fit_glm(X[:, :m], y[:m], solver="newton", loss="logistic", comm=comm, n_jobs=1,
                **{**kw, "max_iter": 2})
        for _ in range(repeat):
            res = fit_glm(X, y, solver="newton", loss="logistic", comm=comm, n_jobs=1, **kw)
            out.append({"per_iter": res.info["per_iter"], "setup": res.info["setup"],
                        "n_union": res.info["n_union_features"], "n_iter": res.n_iter,
                        "degrees": tuple(comm.degrees), "time": res.time,
                        "reduce": res.info["reduce"]})
    return out


def worker_main(args):
    """A rank in a network namespace: the launcher's environment variables give its rank,
    the job's size, the coordinator and the token; it listens on its own address."""
    from roofline.comm import tcp_communicator

    rank, size = int(os.environ["ROOFLINE_COMM_RANK"]), int(os.environ["ROOFLINE_COMM_SIZE"])
    host, port = os.environ["ROOFLINE_COMM_COORD"].rsplit(":", 1)
    token = bytes.fromhex(os.environ["ROOFLINE_COMM_TOKEN"])
    kw = json.loads(args.kw)
    with tcp_communicator(rank, size, (host, int(port)), token, host=args.host,
                          timeout=float(os.environ.get("ROOFLINE_COMM_TIMEOUT", 60))) as comm:
        out = rank_work(comm, args.path, kw, args.repeat)
    with open(args.out, "wb") as f:
        pickle.dump(out, f)


def coordinator_main(args):
    """The job's coordinator in the bridge's namespace: prints its port, serves the job."""
    from roofline.comm import Coordinator

    c = Coordinator(args.size, token=bytes.fromhex(args.token), host=args.host,
                    timeout=args.timeout)
    print(c.address[1], flush=True)
    deadline = time.monotonic() + args.timeout
    while not c.complete and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # the replies are on their way
    c.close()


# ---------------------------------------------------------------------------------------------
# the model


def steps_at(K, degrees, U, d):
    """The collectives' steps at ``K`` ranks: Hessian-vector reduce, gradient reduce (with the
    loss), a scalar all-reduce, and the configuration's collectives (the feature occupancy
    all-reduce of ``d`` bytes and the index lists going down)."""
    from roofline.comm import kylix_steps

    L = len(degrees)
    config = (kylix_steps(degrees, d, itemsize=1)
              + kylix_steps(degrees, U)[:L] + kylix_steps(degrees, U(K))[:L])
    return {"hv": kylix_steps(degrees, U), "grad": kylix_steps(degrees, U, columns=2),
            "scalar": kylix_steps(degrees, 1), "config": config}


def iteration_collectives(rec, st):
    """``(count, steps)`` of one iteration record: its CG steps' products, and its objective
    evaluations (each a reduce of the loss with the gradient)."""
    cg = rec["cg_steps"]
    return [(cg, st["hv"]), (max(rec["collectives"] - cg, 0), st["grad"])]


def fit_model(runs, F, n, d, cores, network=None):
    """The hosts' costs and the compute scaling fitted to ``{K: [records of rank 0]}``."""
    from roofline.comm import ClusterModel, ComputeScaling

    samples, ks, units = [], [], []
    for K, fits in runs.items():
        U = union_fn(F, n, K)
        st = steps_at(K, fits[0]["degrees"], U, d)
        for fit in fits:
            for rec in fit["per_iter"]:
                steps = [s for c, ss in iteration_collectives(rec, st) for _ in range(c)
                         for s in ss]
                samples.append((steps, rec["comm_s"]))
                ks.append(K)
                units.append(rec["compute_s"] / rec["collectives"] * min(1.0, cores / K))
    model = ClusterModel.fit(samples, network)
    ks, units = np.asarray(ks), np.asarray(units)
    med = {K: float(np.median(units[ks == K])) for K in runs}
    compute = ComputeScaling.fit(list(med), list(med.values()))
    return model, compute, med


def predict(model, compute, fit, K, degrees, U, d):
    """Seconds per iteration (mean over the run's iterations) and to the run's tolerance."""
    st = steps_at(K, degrees, U, d)
    its = [model.iteration_time(r["collectives"], iteration_collectives(r, st), K, compute)
           for r in fit["per_iter"]]
    setup = fit["setup"]["seconds"] + model.collective_time(st["config"])
    return float(np.mean(its)), setup + float(np.sum(its))


def predicted_bytes(fit, K, degrees, U, d):
    """Bytes rank 0 sends per iteration (mean) by the model."""
    st = steps_at(K, degrees, U, d)
    per = [sum(c * sum(s.bytes_out for s in ss) for c, ss in iteration_collectives(r, st))
           for r in fit["per_iter"]]
    return float(np.mean(per))


# ---------------------------------------------------------------------------------------------
# the emulated network


class Netns:
    """``K`` network namespaces ``{prefix}0 ..`` on one bridge in ``{prefix}s``, addresses
    ``10.213.0.{2 + r}/24`` (the bridge ``10.213.0.1``): the namespaces are new, so nothing
    collides with this machine's own addresses.  :meth:`close` deletes every namespace (and
    with them the links)."""

    def __init__(self, prefix, K):
        self.prefix, self.K = prefix, K
        self.switch = f"{prefix}s"
        self.ns = [f"{prefix}{r}" for r in range(K)]
        self.ips = [f"10.213.0.{2 + r}" for r in range(K)]
        self.bridge_ip = "10.213.0.1"
        self.made = []
        try:
            self._make()
        except BaseException:
            self.close()
            raise

    def _ip(self, *a):
        subprocess.run(["ip", *a], check=True, capture_output=True, timeout=30)

    def _add(self, name):
        self._ip("netns", "add", name)
        self.made.append(name)

    def _make(self):
        sw = self.switch
        self._add(sw)
        self._ip("-n", sw, "link", "add", "br0", "type", "bridge")
        self._ip("-n", sw, "addr", "add", f"{self.bridge_ip}/24", "dev", "br0")
        self._ip("-n", sw, "link", "set", "br0", "up")
        self._ip("-n", sw, "link", "set", "lo", "up")
        for r, (ns, ip) in enumerate(zip(self.ns, self.ips, strict=True)):
            self._add(ns)
            port = f"{self.prefix}p{r}"
            self._ip("link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", port,
                     "netns", sw)
            self._ip("-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
            self._ip("-n", ns, "link", "set", "eth0", "up")
            self._ip("-n", ns, "link", "set", "lo", "up")
            self._ip("-n", sw, "link", "set", port, "master", "br0")
            self._ip("-n", sw, "link", "set", port, "up")

    def links(self):
        """``(namespace, device)`` of both ends of every rank's link."""
        return ([(ns, "eth0") for ns in self.ns]
                + [(self.switch, f"{self.prefix}p{r}") for r in range(self.K)])

    def shape(self, mbit):
        """Every link ``mbit`` Mb/s each way (``None``: unshaped)."""
        for ns, dev in self.links():
            subprocess.run(["tc", "-n", ns, "qdisc", "del", "dev", dev, "root"],
                           capture_output=True, timeout=30)
            if mbit is not None:
                subprocess.run(["tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf",
                                "rate", f"{mbit}mbit", "burst", "64kb", "latency", "50ms"],
                               check=True, capture_output=True, timeout=30)

    def run_job(self, path, kw, repeat, timeout=120.0):
        """One job of ``K`` ranks (``rank_work``) over the namespaces; rank 0's records."""
        token = os.urandom(16).hex()
        script = os.path.abspath(__file__)
        coord = subprocess.Popen(
            ["ip", "netns", "exec", self.switch, sys.executable, script, "--coordinator",
             "--size", str(self.K), "--token", token, "--host", self.bridge_ip,
             "--timeout", str(timeout)], stdout=subprocess.PIPE, text=True)
        procs = []
        try:
            port = int(coord.stdout.readline())
            outs = [os.path.join(path, f"out{r}.pkl") for r in range(self.K)]
            for r in range(self.K):
                env = {**os.environ, "ROOFLINE_COMM_RANK": str(r),
                       "ROOFLINE_COMM_SIZE": str(self.K),
                       "ROOFLINE_COMM_COORD": f"{self.bridge_ip}:{port}",
                       "ROOFLINE_COMM_TOKEN": token, "ROOFLINE_COMM_TIMEOUT": str(timeout),
                       "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
                procs.append(subprocess.Popen(
                    ["ip", "netns", "exec", self.ns[r], sys.executable, script, "--worker",
                     "--path", path, "--host", self.ips[r], "--out", outs[r],
                     "--kw", json.dumps(kw), "--repeat", str(repeat)], env=env))
            for p in procs:
                p.wait(timeout=timeout)
            bad = [r for r, p in enumerate(procs) if p.returncode != 0]
            if bad:
                raise RuntimeError(f"ranks {bad} failed in the emulated network")
            with open(outs[0], "rb") as f:
                return pickle.load(f)
        finally:
            for p in [*procs, coord]:
                if p.poll() is None:
                    p.kill()
                    p.wait()

    def close(self):
        for name in reversed(self.made):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
        self.made = []


def _per_iter_s(fit):
    """Mean seconds per iteration of one fit."""
    return float(np.mean([r["wall_s"] for r in fit["per_iter"]]))


def emulate(args, X, y, F, kw):
    """The model against the emulated network: rows of the check table."""
    from roofline.comm import Network

    n, d = X.shape[1], X.shape[0]
    cores = os.cpu_count() or 1
    rows = []
    with tempfile.TemporaryDirectory(prefix="roofline-netem-") as path:
        os.chmod(path, 0o755)
        for K in args.emulate_k:
            save_shards(path, X, y, K)
            net = Netns(f"{args.prefix}{K}x", K)
            try:
                net.shape(None)
                calib = net.run_job(path, kw, args.repeat)
                model, compute, _ = fit_model({K: calib}, F, n, d, cores)
                U = union_fn(F, n, K)
                deg = calib[0]["degrees"]
                base = min(calib, key=_per_iter_s)  # the least disturbed of the repeats
                for mbit in args.emulate:
                    net.shape(mbit)
                    fits = net.run_job(path, kw, args.repeat)
                    link = model.with_network(Network.ethernet(mbit * 1e6, latency=0.0))
                    pred, _ = predict(link, compute, base, K, deg, U, d)
                    low, _ = predict(replace(link, overlap=True), compute, base, K, deg, U, d)
                    meas = [_per_iter_s(f) for f in fits]
                    mb = float(np.mean([r["bytes_sent"] for r in fits[0]["per_iter"]]))
                    rows.append({"K": K, "mbit": mbit, "degrees": list(deg),
                                 "iters": fits[0]["n_iter"],
                                 "measured_s": min(meas), "measured_all": meas,
                                 "predicted_s": pred, "predicted_overlap_s": low,
                                 "unshaped_s": _per_iter_s(base),
                                 "bytes_measured": mb,
                                 "bytes_model": predicted_bytes(base, K, deg, U, d),
                                 "host": {"step_s": model.step_s,
                                          "message_s": model.message_s,
                                          "byte_s": model.byte_s}})
            finally:
                net.close()
    return rows


def print_check(rows):
    print("\nModel against the emulated network (seconds per iteration, rank 0, the fastest "
          "of the repeats; the model fitted on the unshaped links):")
    hdr = (f"{'K':>3} {'link':>10} {'degrees':>8} {'unshaped':>9} {'predicted':>10} "
           f"{'overlapped':>11} {'measured':>9} {'pred/meas':>10} "
           f"{'MB/it model':>12} {'MB/it meas':>11}")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        print(f"{r['K']:>3} {str(r['mbit']) + ' Mb/s':>10} {str(tuple(r['degrees'])):>8} "
              f"{r['unshaped_s']:>9.4f} {r['predicted_s']:>10.4f} "
              f"{r['predicted_overlap_s']:>11.4f} {r['measured_s']:>9.4f} "
              f"{r['predicted_s'] / r['measured_s']:>10.3f} {r['bytes_model'] / 1e6:>12.3f} "
              f"{r['bytes_measured'] / 1e6:>11.3f}")


# ---------------------------------------------------------------------------------------------


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20000, help="examples (Criteo-like)")
    ap.add_argument("--bits", type=int, default=16, help="hashed features: 2^bits")
    ap.add_argument("--alpha", type=float, default=1e-5)
    ap.add_argument("--tol", type=float, default=1e-6)
    ap.add_argument("--procs", type=int, nargs="+", default=[2, 4], help="K of the fit")
    ap.add_argument("--repeat", type=int, default=2, help="fits per job (medians)")
    ap.add_argument("--emulate", type=int, nargs="*", default=None, metavar="MBIT",
                    help="check the model on namespaces with links of these Mb/s (root)")
    ap.add_argument("--emulate-k", type=int, nargs="+", default=[2])
    ap.add_argument("--prefix", default=f"rfl{os.getpid() % 100000}",
                    help="name prefix of the namespaces (unique per run)")
    ap.add_argument("--json", help="write the check table here")
    ap.add_argument("--no-fit", action="store_true", help="only the emulated check")
    # internal: a rank or the coordinator inside a namespace
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--coordinator", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    ap.add_argument("--host", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--kw", help=argparse.SUPPRESS)
    ap.add_argument("--size", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--token", help=argparse.SUPPRESS)
    ap.add_argument("--timeout", type=float, default=120.0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker_main(args)
    if args.coordinator:
        return coordinator_main(args)

    from roofline.comm import Network, kylix_degrees, model_degrees, run

    X, y = criteo(args.n, args.bits)
    n, d = X.shape[1], X.shape[0]
    F = coverage(X)
    kw = {"alpha": args.alpha, "tol": args.tol, "max_iter": 200}
    cores = os.cpu_count() or 1
    print(f"Criteo-like: {d} features x {n} examples, {X.nnz} stored, {F(n)} features used; "
          f"L2 logistic, alpha={args.alpha:g}, tol={args.tol:g}; {cores} cores")
    if not args.no_fit:
        runs = {}
        with tempfile.TemporaryDirectory() as path:
            for K in args.procs:
                save_shards(path, X, y, K)
                runs[K] = run(rank_work, K, backend="tcp", args=(path, kw, args.repeat),
                              timeout=600)[0]
        model, compute, med = fit_model(runs, F, n, d, cores)
        print("\nFitted on loopback TCP, K = " + ", ".join(map(str, runs)) + ":")
        print(f"  hosts: {model.step_s * 1e6:.1f} us per step, {model.message_s * 1e6:.1f} us "
              f"per message, {model.byte_s * 1e9:.3f} ns per byte sent or received")
        print("  work unit (one pass per collective): "
              + ", ".join(f"K={K}: {v * 1e3:.3f} ms" for K, v in med.items())
              + f" -> {compute.serial_s * 1e3:.3f} ms + {compute.parallel_s * 1e3:.3f} ms / K")
        print("  check on loopback (s/iter, mean over the iterations; predicted vs measured):")
        for K, fits in runs.items():
            U = union_fn(F, n, K)
            p, _ = predict(model, compute, fits[0], K, fits[0]["degrees"], U, d)
            m = np.median([np.mean([r["wall_s"] for r in f["per_iter"]]) for f in fits])
            b = predicted_bytes(fits[0], K, fits[0]["degrees"], U, d)
            mb = np.mean([r["bytes_sent"] for r in fits[0]["per_iter"]])
            print(f"    K={K} degrees {fits[0]['degrees']}: {p:.4f} vs {m:.4f} "
                  f"(bytes/iter {b / 1e6:.3f} vs {mb / 1e6:.3f} MB)")
        base = runs[min(runs)][0]
        print(f"\nPredicted: the K={min(runs)} run's {base['n_iter']} iterations "
              f"(to tol {args.tol:g}) at K ranks of n/K examples; default degrees "
              "(kylix_degrees(K)) and the model's own (model_degrees)")
        nets = [Network.ethernet(1e9), Network.ethernet(1e10)]
        hdr = f"{'K':>5} {'degrees':>9}"
        for net in nets:
            hdr += (f" | {net.name + ' s/it':>13} {'s to tol':>9} {'model deg':>10} "
                    f"{'s/it':>8}")
        print(hdr)
        print("-" * len(hdr))
        for K in KS:
            U = union_fn(F, n, K)
            deg = kylix_degrees(K)
            line = f"{K:>5} {'x'.join(map(str, deg)):>9}"
            for net in nets:
                m = model.with_network(net)
                it, tot = predict(m, compute, base, K, deg, U, d)
                mdeg = model_degrees(K, U, m)
                it2, _ = predict(m, compute, base, K, mdeg, U, d)
                line += (f" | {it:>13.4f} {tot:>9.3f} {'x'.join(map(str, mdeg)):>10} "
                         f"{it2:>8.4f}")
            print(line)
    if args.emulate is not None:
        if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("tc"):
            print("\n--emulate: needs root, ip and tc; skipped")
            return 0
        rows = emulate(args, X, y, F, kw)
        print_check(rows)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
