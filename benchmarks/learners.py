"""ADAGrad logistic regression throughput: Roofline vs scikit-learn SGDClassifier vs Vowpal Wabbit.

One run, same rows, same held-out split, printed side by side:

* Roofline: ``Learner(MatSource, GLM(logistic), ADAGrad)`` over in-memory Criteo-like data
  (``datasources.make_criteo_like_matrix``: hashed Zipf categorical fields, planted logistic
  labels), fused ADAGrad step (and the unfused reference path), on 1 and on all numba threads,
  and online (per-example, VW's algorithm) ADAGrad with ``--online-lr``;
* Roofline's fused ADAGrad on the GPU, when one is usable (the in-memory source then holds the
  data in device memory, copied there before timing), at the minibatch sizes ``--gpu-batch``
  with the learning rates ``--gpu-lr`` (larger minibatches: more examples/s, fewer steps);
* scikit-learn ``SGDClassifier(loss="log_loss")``, one epoch per pass (CSR rows, float64: the
  conversion is done before timing);
* Vowpal Wabbit (the ``vowpalwabbit`` Python package, if installed), reading a VW text file
  written beforehand (``-d file``, its native parser: parsing is part of VW's normal work), with
  its defaults (adaptive, normalised, invariant updates), ``-b`` bits equal to the data's.

The summary gives, per peer, the fastest Roofline row (CPU rows and GPU rows separately) whose
held-out logloss is equal or better than the peer's.

Throughput = training examples / training wall time (data generation and format conversion
excluded; VW's time includes its text parsing).  The held-out logloss is on the last
``--test`` examples, never trained on.

Usage::

    python benchmarks/learners.py --examples 500000 --test 100000 --bits 20
"""

from __future__ import annotations

import os

# numba's OpenMP pool spins after each parallel region by default; on a shared 2-core machine
# the spinning workers steal the core from the main thread (a 2-thread step measured 5x slower
# than a 1-thread one).  Passive waiting is set before numba starts (override from the shell).
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import argparse  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numba  # noqa: E402
import numpy as np  # noqa: E402
from _peers import have_vw, logloss, logloss_of_margins, run_vw, write_vw  # noqa: E402

from roofline import gmat  # noqa: E402
from roofline.datasources import MatSource, make_criteo_like_matrix  # noqa: E402
from roofline.learners import GLM, ADAGrad, L2Regularizer, Learner  # noqa: E402


def run_roofline(Xtr, ytr, Xte, yte, *, batch, lr, passes, threads, fused, l2, online=False,
                 device="cpu"):
    numba.set_num_threads(threads)
    model = GLM(loss="logistic", dtype=Xtr.dtype.name)
    mixins = [L2Regularizer(l2)] if l2 else []
    opt = dict(lr=lr, fused=fused, online=online)
    # on the GPU the in-memory source holds the data in device memory (copied there before
    # timing, as the CSR conversion for scikit-learn is done before timing)
    def on(a):
        return gmat.to_device(a, device)

    learner = Learner(MatSource(on(Xtr), on(ytr), batch_size=batch), model, ADAGrad(**opt),
                      mixins=mixins, n_passes=passes, progress=False)
    # warm the JIT on a few minibatches of a throw-away copy (compilation is not throughput)
    warm = Learner(MatSource(on(Xtr[:, : 4 * batch].tocsc()), on(ytr[: 4 * batch]),
                             batch_size=batch),
                   GLM(loss="logistic", dtype=Xtr.dtype.name), ADAGrad(**opt),
                   mixins=mixins, progress=False)
    warm.train()
    t = time.perf_counter()
    learner.train()
    dt = time.perf_counter() - t
    p = gmat.to_device(learner.predict(MatSource(on(Xte), on(yte), batch_size=65536)), "cpu")
    return dt, logloss(p, yte)


def run_sklearn(Rtr, ytr, Rte, yte, *, passes, alpha):
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import SGDClassifier

    clf = SGDClassifier(loss="log_loss", alpha=alpha, max_iter=passes, tol=None, shuffle=False,
                        random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        t = time.perf_counter()
        clf.fit(Rtr, ytr)
        dt = time.perf_counter() - t
    return dt, logloss(clf.predict_proba(Rte)[:, 1], yte)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=500_000, help="training examples")
    ap.add_argument("--test", type=int, default=100_000, help="held-out examples")
    ap.add_argument("--bits", type=int, default=20, help="2^bits hashed features")
    ap.add_argument("--batch", type=int, default=1024, help="Roofline minibatch size")
    ap.add_argument("--lr", type=float, default=0.2, help="Roofline ADAGrad learning rate")
    ap.add_argument("--online-lr", type=float, default=0.1,
                    help="learning rate of Roofline's online (per-example) ADAGrad")
    ap.add_argument("--online-batch", type=int, default=8192,
                    help="minibatch size of the online ADAGrad (only the unit of delivery: "
                         "its updates are per example whatever the size)")
    ap.add_argument("--l2", type=float, default=0.0, help="Roofline L2 weight (mean-loss scale)")
    ap.add_argument("--alpha", type=float, nargs="+", default=[1e-5, 1e-4, 1e-3],
                    help="SGDClassifier alphas (each is run; the table shows all)")
    ap.add_argument("--passes", type=int, nargs="+", default=[1], help="passes to run")
    ap.add_argument("--no-vw", action="store_true", help="skip Vowpal Wabbit")
    ap.add_argument("--gpu-batch", type=int, nargs="*", default=[1024, 8192],
                    help="minibatch sizes of the fused ADAGrad on the GPU (when one is usable)")
    ap.add_argument("--gpu-lr", type=float, nargs="*", default=[0.2, 0.5],
                    help="learning rates of the GPU runs, one per --gpu-batch")
    args = ap.parse_args(argv)

    n = args.examples + args.test
    t = time.perf_counter()
    X, y = make_criteo_like_matrix(n, seed=0, n_bits=args.bits, dtype=np.float32)
    gen = time.perf_counter() - t
    Xtr, ytr = X[:, : args.examples].tocsc(), y[: args.examples]
    Xte, yte = X[:, args.examples:].tocsc(), y[args.examples:]
    Rtr = Xtr.T.tocsr().astype(np.float64)
    Rte = Xte.T.tocsr().astype(np.float64)
    max_threads = numba.config.NUMBA_NUM_THREADS
    print(f"Criteo-like data: {args.examples} train + {args.test} held-out examples, "
          f"2^{args.bits} features, {X.nnz / n:.1f} nnz/example, positives {y.mean():.3f} "
          f"(generated in {gen:.1f} s); machine: {os.cpu_count()} cores, "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}")
    base = logloss(np.full(len(yte), ytr.mean()), yte)
    print(f"held-out logloss of the constant predictor: {base:.4f}")
    rows = []
    use_vw = not args.no_vw and have_vw()
    if not args.no_vw and not use_vw:
        print("vowpalwabbit is not installed: VW skipped")
    with tempfile.TemporaryDirectory() as tmp:
        if use_vw:  # VW reads text files written beforehand (its parsing is timed)
            vw_train, vw_test = os.path.join(tmp, "train.vw"), os.path.join(tmp, "test.vw")
            write_vw(vw_train, Xtr, ytr)
            write_vw(vw_test, Xte, yte)
        for passes in args.passes:
            for threads in sorted({1, max_threads}):
                for fused in (True, False):
                    dt, ll = run_roofline(Xtr, ytr, Xte, yte, batch=args.batch, lr=args.lr,
                                          passes=passes, threads=threads, fused=fused, l2=args.l2)
                    name = f"roofline ADAGrad {'fused' if fused else 'unfused'}, {threads} thr"
                    rows.append((name, passes, dt, args.examples * passes / dt, ll))
            if gmat.gpu_available():
                for gb, glr in zip(args.gpu_batch, args.gpu_lr, strict=True):
                    dt, ll = run_roofline(Xtr, ytr, Xte, yte, batch=gb, lr=glr, passes=passes,
                                          threads=max_threads, fused=True, l2=args.l2,
                                          device="gpu")
                    rows.append((f"roofline ADAGrad fused, GPU, batch {gb}, lr {glr:g}", passes,
                                 dt, args.examples * passes / dt, ll))
            # online ADAGrad (VW's algorithm) runs on the calling thread only
            numba.set_num_threads(1)
            dt, ll = run_roofline(Xtr, ytr, Xte, yte, batch=args.online_batch, lr=args.online_lr,
                                  passes=passes, threads=1, fused=True, l2=args.l2, online=True)
            rows.append(("roofline ADAGrad online (per example)", passes, dt,
                         args.examples * passes / dt, ll))
            numba.set_num_threads(max_threads)
            for alpha in args.alpha:
                dt, ll = run_sklearn(Rtr, ytr, Rte, yte, passes=passes, alpha=alpha)
                rows.append((f"sklearn SGDClassifier(log_loss, a={alpha:g})", passes, dt,
                             args.examples * passes / dt, ll))
            if use_vw:
                dt, z = run_vw(vw_train, vw_test, tmp, bits=args.bits, passes=passes)
                rows.append(("vowpalwabbit (text file, defaults)", passes, dt,
                             args.examples * passes / dt, logloss_of_margins(z, yte)))
    print()
    print(f"{'learner':<44} {'passes':>6} {'train s':>8} {'examples/s':>12} "
          f"{'held-out logloss':>17}")
    for name, p, dt, eps, ll in rows:
        print(f"{name:<44} {p:>6} {dt:>8.2f} {eps:>12,.0f} {ll:>17.4f}")
    # per peer: the fastest Roofline row at equal or better held-out logloss, on the CPU and on
    # the GPU separately (the peers run on the CPU: scikit-learn and VW on one core each)
    for p in args.passes:
        peers = [(name, eps, ll) for name, q, _, eps, ll in rows
                 if q == p and not name.startswith("roofline")]
        for where in ("CPU", "GPU"):
            ours = [(eps, ll, name) for name, q, _, eps, ll in rows
                    if q == p and name.startswith("roofline") and "unfused" not in name
                    and ("GPU" in name) == (where == "GPU")]
            if not ours:
                continue
            for name, eps, ll in peers:
                ok = [o for o in ours if o[1] <= ll]
                if not ok:
                    print(f"passes={p}, {where}: no Roofline row reaches {name}'s held-out "
                          f"logloss {ll:.4f}")
                    continue
                best = max(ok)
                print(f"passes={p}, {where}: {best[0] / eps:.2f}x {name} ({best[2]}: "
                      f"held-out logloss {best[1]:.4f} vs {ll:.4f})")


if __name__ == "__main__":
    main()
