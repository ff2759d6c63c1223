"""Every factor model against its peers, side by side in one run, in one table (issue 36).

Runs, in one process and one run:

* **MF** (:func:`factor_mf.bench`): Roofline's ALS against ``implicit``'s CPU ALS (implicit
  feedback, CG 3 steps) and Spark MLlib's ALS in ``local[2]`` (explicit ALS-WR), on synthetic
  power-law ratings at ``--size`` nonzeros and MovieLens 100k (from the ``recbole`` wheel);
  quality = the peer's final training objective (one evaluator, ``als_objective``).
* **LDA** (:func:`factor_lda.bench`): Roofline's online / batch VB against scikit-learn's online
  and batch ``LatentDirichletAllocation``, gensim's ``LdaModel`` / ``LdaMulticore`` and Spark
  MLlib's online LDA, on a synthetic corpus of about ``--size`` tokens (and, without
  ``--quick``, gensim's Wikipedia test passages); quality = the peer's held-out perplexity.
* **k-means and NMF**: ``benchmarks/factor_kmeans_nmf.py`` (scikit-learn's ``KMeans``,
  ``MiniBatchKMeans``, ``NMF``, ``MiniBatchNMF``, Spark's KMeans) run as a subprocess at about
  ``--size`` nonzeros, its closing table read back; quality = the peer's inertia / objective.

then prints one table: model, data, peer, the peer's time, its quality, Roofline's time to that
quality, the ratio (peer / Roofline), the fraction of the roofline Roofline's run reached
(MF: of the float32 FMA peak in the fastest iteration; LDA: the E-step primitives' roofline
time over online VB's training time; k-means / NMF: not reported by their script) and the
issue's target (5x scikit-learn and gensim, 2x ``implicit``, 10x Spark).

    python benchmarks/factor_models.py --quick                    # 1e5 nonzeros, ~4 min
    python benchmarks/factor_models.py --size 1e6
    python benchmarks/factor_models.py --size 1e7 --models mf lda --no-spark \
        --lda-peers sklearn-online gensim

Times are wall-clock seconds on whatever machine runs it: say how loaded it was next to any
figure recorded from it (``uptime`` is printed before and after).
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import factor_lda  # noqa: E402
import factor_mf  # noqa: E402

MODELS = ("mf", "lda", "kmeans", "nmf")
SIZES = {"1e5": 100_000, "1e6": 1_000_000, "1e7": 10_000_000}


def target_of(peer: str) -> float:
    """The issue's target ratio against ``peer``."""
    p = peer.lower()
    if "spark" in p:
        return 10.0
    if "implicit" in p:
        return 2.0
    return 5.0


def uptime() -> str:
    """The load averages (the machine may be shared)."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f}"


def run_mf(nnz: int, quick: bool, no_spark: bool = False) -> list[dict]:
    # quick: MovieLens 100k (1e5 ratings) only, no synthetic set
    args = factor_mf.parser().parse_args(["--sizes", "" if quick else str(nnz)]
                                         + (["--no-spark"] if no_spark else []))
    return factor_mf.bench(factor_mf.datasets(args), args)


def run_lda(nnz: int, quick: bool, peers=None) -> list[dict]:
    argv = ["--tokens", str(nnz)]
    if quick:
        argv += ["--no-real"]
    if peers is not None:
        argv += ["--peers", *peers]
    a = factor_lda.parser().parse_args(argv)
    return factor_lda.run_all(a)


def run_kmeans_nmf(nnz: int, which: set, quick: bool, no_spark: bool = False) -> list[dict]:
    """``factor_kmeans_nmf.py`` as a subprocess; its closing markdown table read back."""
    per = 20
    cmd = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                        "factor_kmeans_nmf.py"),
           "--examples", str(max(2000, nnz // per)), "--nnz-per-example", str(per)]
    if no_spark:
        cmd += ["--no-spark"]
    if which == {"kmeans"}:
        cmd += ["--only", "kmeans"]
    elif which == {"nmf"}:
        cmd += ["--only", "nmf"]
    print(f"\n# subprocess: {' '.join(cmd[1:])}", flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    print(proc.stdout, end="")
    if proc.returncode:
        print(f"factor_kmeans_nmf.py failed ({proc.returncode}): {proc.stderr[-2000:]}")
        return []
    return parse_kmeans_nmf(proc.stdout)


def parse_kmeans_nmf(text: str) -> list[dict]:
    """The rows of ``factor_kmeans_nmf.py``'s closing table (columns found by their header)."""
    lines = [ln for ln in text.splitlines() if ln.startswith("|")]
    head = next((i for i, ln in enumerate(lines) if "peer" in ln and "ratio" in ln), None)
    if head is None:
        return []
    cols = [c.strip() for c in lines[head].strip("|").split("|")]
    out = []
    for ln in lines[head + 2:]:
        cells = dict(zip(cols, (c.strip() for c in ln.strip("|").split("|")), strict=False))
        try:
            task = cells["task"]
            reached = cells.get("reached", "yes") == "yes"
            ours = float(cells["Roofline s"])
            out.append({"model": "k-means" if "means" in task.lower() else "NMF",
                        "data": cells["data"], "peer": cells["peer"],
                        "peer_s": float(cells["peer s"]),
                        "quality": float(cells["peer objective"]),
                        "ours_s": ours if reached else None, "how": task,
                        "ratio": float(cells["ratio"].rstrip("x")) if reached else math.nan,
                        "fraction": math.nan})
        except (KeyError, ValueError):
            continue
    return out


def table(rows: list[dict]) -> str:
    """The markdown table of every result."""
    lines = ["| model | data | peer | peer s | peer quality | Roofline s (run) | ratio | "
             "target | met | roofline fraction |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        tgt = target_of(r["peer"])
        ours = "not reached" if r["ours_s"] is None else f"{r['ours_s']:.3f} ({r['how']})"
        ratio = r["ratio"]
        met = "yes" if ratio == ratio and ratio >= tgt else "no"
        frac = "-" if r["fraction"] != r["fraction"] else f"{100 * r['fraction']:.1f}%"
        rs = "-" if ratio != ratio else f"{ratio:.2f}x"
        lines.append(f"| {r['model']} | {r['data']} | {r['peer']} | {r['peer_s']:.3f} | "
                     f"{r['quality']:.6g} | {ours} | {rs} | {tgt:g}x | {met} | {frac} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", choices=tuple(SIZES), default="1e5",
                    help="synthetic nonzeros (tokens for LDA)")
    ap.add_argument("--quick", action="store_true",
                    help="MF on MovieLens 100k only, LDA without the real corpus")
    ap.add_argument("--models", nargs="*", choices=MODELS, default=list(MODELS))
    ap.add_argument("--no-spark", action="store_true", help="leave Spark out (every model)")
    ap.add_argument("--lda-peers", nargs="*", choices=factor_lda.PEERS, default=None,
                    help="LDA's peers (default: all; e.g. leave sklearn-batch out at 1e7)")
    a = ap.parse_args(argv)
    lda_peers = a.lda_peers
    if a.no_spark:
        lda_peers = [p for p in (lda_peers or factor_lda.PEERS) if p != "spark"]
    nnz = SIZES[a.size]
    print(f"# factor models, {a.size} nonzeros{' (quick)' if a.quick else ''}; "
          f"{os.cpu_count()} cores; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
          f"{uptime()} at start")
    rows = []
    t0 = time.perf_counter()
    if "mf" in a.models:
        rows += run_mf(nnz, a.quick, a.no_spark)
    if "lda" in a.models:
        rows += run_lda(nnz, a.quick, lda_peers)
    which = {m for m in a.models if m in ("kmeans", "nmf")}
    if which:
        rows += run_kmeans_nmf(nnz, which, a.quick, a.no_spark)
    print(f"\n# {len(rows)} comparisons in {time.perf_counter() - t0:.0f} s; {uptime()} at "
          f"the end")
    print(table(rows))
    return rows


if __name__ == "__main__":
    main()
