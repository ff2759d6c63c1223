"""LDA (issue 36): Roofline's online variational Bayes against scikit-learn, gensim and Spark
MLlib, side by side in one run: time to each peer's held-out perplexity.

    python benchmarks/factor_lda.py                       # synthetic 1e5 and 1e6 tokens + real
    python benchmarks/factor_lda.py --tokens 100000 --no-real --peers sklearn-online gensim
    python benchmarks/factor_lda.py --estep --tokens 1000000   # the two E-steps side by side

Data (every corpus split 90% / 10% into training and held-out documents):

* ``synthetic``: documents drawn from the LDA generative model with ``--true-topics`` topics
  over a vocabulary of ``--vocab`` words whose base measure is Zipf (power-law word
  frequencies), document lengths Poisson(``--doc-length``), ``--tokens`` tokens in all.
* ``real``: the 500 Wikipedia articles that gensim ships as test data
  (``gensim/test/test_data/head500.noblanks.cor``, stemmed; inside the installed package, never
  downloaded), cut into passages of 200 tokens, words kept when seen in at least 3 passages and
  in at most half of them.

Quality: one evaluator for everyone, the held-out per-word perplexity ``exp(-L_docs / words)``
where ``L_docs`` is the document part of scikit-learn's bound (:meth:`LDA.loss`, the Learner's
held-out metric, float64; scikit-learn's ``perplexity`` adds the topic part, a constant of the
model that grows with ``K x V`` whatever the held-out size, which swamps small held-out sets),
computed from each model's topic-word variational parameters ``lambda`` (scikit-learn
``components_``, gensim ``state.get_lambda()``, Spark ``topicsMatrix()`` of its online
optimizer) with the same priors ``alpha = eta = 1 / K`` everywhere.

Peers (each optional: skipped with the reason when its package does not import; ``--peers``):

* ``sklearn-online`` / ``sklearn-batch``: ``LatentDirichletAllocation`` (``batch_size`` 128,
  its default; ``max_iter`` = ``--passes`` / ``--batch-passes``).
* ``gensim`` / ``gensim-multicore``: ``LdaModel`` / ``LdaMulticore(workers=1)`` (one worker and
  the master: the 2 cores) with their defaults (``chunksize`` 2000, ``iterations`` 50, decay 0.5,
  offset 1) and ``passes`` = ``--passes``; the corpus is ``Sparse2Corpus`` of the CSC matrix
  (streamed inside the timed fit, as gensim reads its corpora).
* ``spark``: MLlib ``LDA(optimizer="online")`` in ``local[2]``, ``subsamplingRate`` 0.05 and
  ``maxIter`` = 20 x ``--passes`` (the same passes over the data), ``optimizeDocConcentration``
  off; the DataFrame of ``SparseVector`` rows is built and cached before the clock starts;
  the JVM start is printed apart.

Roofline, three runs: online VB (:class:`~roofline.learners.LDA`, float32, minibatches of
``--batch-size`` documents (default: 1/16 of the documents within 128..2048: on a loaded machine
every minibatch pays for waking the thread pool, so larger minibatches than scikit-learn's 128),
``learning_offset`` 10, ``learning_decay`` 0.7, ``total_samples`` = the training documents,
fused E-step: scikit-learn's online algorithm), up to ``--max-passes`` passes, the held-out
perplexity evaluated every ``--eval-every`` minibatches with the clock stopped; and batch VB
(``LDA.fit_batch``, float32, ``--max-batch-passes`` passes, evaluated after each, clock
stopped); and online VB with Spark's schedule (``online-S``: ``learning_offset`` 1024,
``learning_decay`` 0.51, minibatches of 5% of the documents). A peer's "Roofline s" is the
earliest time at which one of the runs first reaches the peer's final perplexity (the run is
named). ``ratio`` = peer s / Roofline s ("not reached" when Roofline never gets there).
``roofline`` = online VB's roofline fraction: the sum over its steps of
:meth:`LDA.cost`'s roofline time (compulsory bytes of the E-step's SDDMM, A*S and A*S^T and
the M-step; ``4 K`` flops per nonzero visit of the E-step's iterations; on the measured
machine) over the steps' measured time.

Times are wall-clock seconds on whatever machine runs it; say how loaded it was next to any
figure recorded from it.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import warnings

import numpy as np
import scipy.sparse as sp

from roofline import gmat
from roofline.datasources import Minibatch
from roofline.learners import LDA  # exported by roofline.learners (issue 36)

PEERS = ("sklearn-online", "sklearn-batch", "gensim", "gensim-multicore", "spark")


# ---------------------------------------------------------------------------------------------
# data


def synthetic(tokens, vocab, true_topics, doc_length, seed=0):
    """Documents x words CSR (float64) drawn from LDA with a Zipf base measure."""
    rng = np.random.default_rng(seed)
    zipf = 1.0 / np.arange(1, vocab + 1)
    zipf /= zipf.sum()
    beta = np.stack([rng.dirichlet(zipf * vocab * 0.05 + 1e-3) for _ in range(true_topics)])
    n_docs = max(10, tokens // doc_length)
    theta = rng.dirichlet(np.full(true_topics, 0.2), n_docs)
    lengths = np.maximum(1, rng.poisson(doc_length, n_docs))
    indptr, indices, data = [0], [], []
    for d in range(n_docs):
        words = rng.choice(vocab, size=lengths[d], p=theta[d] @ beta)
        w, c = np.unique(words, return_counts=True)
        indices.append(w)
        data.append(c)
        indptr.append(indptr[-1] + w.size)
    return sp.csr_matrix((np.concatenate(data).astype(np.float64), np.concatenate(indices),
                          np.array(indptr)), shape=(n_docs, vocab))


def real_corpus(passage=200):
    """gensim's 500 Wikipedia test articles as passages x words CSR, or None (and the reason)."""
    try:
        from gensim.test.utils import datapath
    except ImportError as e:
        return None, f"gensim is not importable ({e})"
    path = datapath("head500.noblanks.cor")
    if not os.path.exists(path):
        return None, f"{path} is not in the installed gensim"
    docs = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            toks = line.split()
            docs += [toks[i:i + passage] for i in range(0, len(toks), passage)
                     if len(toks[i:i + passage]) >= passage // 4]
    vocab = {}
    df = {}
    for d in docs:
        for w in set(d):
            df[w] = df.get(w, 0) + 1
    keep = sorted(w for w, c in df.items() if 3 <= c <= len(docs) // 2)
    vocab = {w: i for i, w in enumerate(keep)}
    indptr, indices, data = [0], [], []
    for d in docs:
        ids = np.array([vocab[w] for w in d if w in vocab], dtype=np.int64)
        w, c = np.unique(ids, return_counts=True)
        indices.append(w)
        data.append(c)
        indptr.append(indptr[-1] + w.size)
    X = sp.csr_matrix((np.concatenate(data).astype(np.float64), np.concatenate(indices),
                       np.array(indptr)), shape=(len(docs), len(vocab)))
    return X[np.asarray(X.sum(axis=1)).ravel() > 0], None


def split(X, seed=0):
    rng = np.random.default_rng(seed)
    order = rng.permutation(X.shape[0])
    n_test = max(1, X.shape[0] // 10)
    return X[order[n_test:]], X[order[:n_test]]


def columns(X, dtype):
    """Documents x words CSR to CSC words x documents (the learners' layout)."""
    X = sp.csr_matrix(X, dtype=dtype)
    X.sort_indices()
    return gmat.csc_from_arrays(sp.csc_matrix, X.data, X.indices.astype(np.int32),
                                X.indptr.astype(np.int32), (X.shape[1], X.shape[0]))


class Evaluator:
    """Held-out per-word perplexity of a ``lambda``: ``exp(-(document part of the bound) /
    words)`` of the held-out documents (float64, E-step from ones), as the Learner's held-out
    metric (:meth:`LDA.loss`)."""

    def __init__(self, Xh, K):
        self.Xh = columns(Xh, np.float64)
        self.model = LDA(n_components=K, dtype="float64")

    def __call__(self, lam):
        lam = np.maximum(np.asarray(lam, np.float64), 1e-12)
        self.model.set_parameters(lam)
        loss, words = self.model.loss(Minibatch(self.Xh))
        return math.exp(loss / words)


# ---------------------------------------------------------------------------------------------
# peers


def run_sklearn(Xtr, K, passes, method):
    from sklearn.decomposition import LatentDirichletAllocation

    est = LatentDirichletAllocation(n_components=K, learning_method=method, max_iter=passes,
                                    doc_topic_prior=1.0 / K, topic_word_prior=1.0 / K,
                                    random_state=0)
    t = time.perf_counter()
    est.fit(Xtr)
    return time.perf_counter() - t, est.components_, ""


def run_gensim(Xtr, K, passes, multicore):
    from gensim.matutils import Sparse2Corpus
    from gensim.models import LdaModel, LdaMulticore

    corpus = Sparse2Corpus(columns(Xtr, np.float64), documents_columns=True)
    id2word = {i: str(i) for i in range(Xtr.shape[1])}
    kw = dict(corpus=corpus, num_topics=K, id2word=id2word, passes=passes, alpha=1.0 / K,
              eta=1.0 / K, random_state=0, eval_every=None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = time.perf_counter()
        if multicore:
            kw.pop("alpha")  # LdaMulticore takes 'symmetric' (= 1 / K) only
            model = LdaMulticore(workers=1, alpha="symmetric", **kw)
        else:
            model = LdaModel(**kw)
        dt = time.perf_counter() - t
    return dt, model.state.get_lambda(), ""


_SPARK = {}


def run_spark(Xtr, K, passes):
    from pyspark.ml.clustering import LDA as SparkLDA
    from pyspark.ml.linalg import Vectors
    from pyspark.sql import SparkSession

    note = ""
    if "session" not in _SPARK:
        t = time.perf_counter()
        _SPARK["session"] = (SparkSession.builder.master("local[2]").appName("roofline-lda")
                             .config("spark.driver.memory", "4g")
                             .config("spark.ui.enabled", "false")
                             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
        _SPARK["session"].sparkContext.setLogLevel("ERROR")
        note = f"session start {time.perf_counter() - t:.1f} s (excluded); "
    spark = _SPARK["session"]
    V = Xtr.shape[1]
    rows = [(Vectors.sparse(V, Xtr.indices[Xtr.indptr[i]:Xtr.indptr[i + 1]].tolist(),
                            Xtr.data[Xtr.indptr[i]:Xtr.indptr[i + 1]].tolist()),)
            for i in range(Xtr.shape[0])]
    t = time.perf_counter()
    df = spark.createDataFrame(rows, ["features"]).repartition(2).cache()
    df.count()
    note += f"DataFrame {time.perf_counter() - t:.1f} s (excluded)"
    lda = SparkLDA(k=K, optimizer="online", maxIter=20 * passes, subsamplingRate=0.05,
                   docConcentration=[1.0 / K], topicConcentration=1.0 / K,
                   optimizeDocConcentration=False, seed=0)
    t = time.perf_counter()
    model = lda.fit(df)
    lam = model.topicsMatrix().toArray().T  # V x K -> K x V
    dt = time.perf_counter() - t
    df.unpersist()
    return dt, lam, note


def run_peer(name, Xtr, K, a):
    if name == "sklearn-online":
        return run_sklearn(Xtr, K, a.passes, "online")
    if name == "sklearn-batch":
        return run_sklearn(Xtr, K, a.batch_passes, "batch")
    if name == "gensim":
        return run_gensim(Xtr, K, a.passes, False)
    if name == "gensim-multicore":
        return run_gensim(Xtr, K, a.passes, True)
    return run_spark(Xtr, K, a.passes)


def why_not(name):
    try:
        if name.startswith("sklearn"):
            import sklearn  # noqa: F401
        elif name.startswith("gensim"):
            import gensim  # noqa: F401
        else:
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            from _peers import why_no_pyspark

            return why_no_pyspark()
    except ImportError as e:
        return f"not importable ({e})"
    return None


# ---------------------------------------------------------------------------------------------
# Roofline


def run_roofline(Xtr, K, evaluate, a, offset=10.0, decay=0.7, batch_size=None):
    """Online VB; returns ``[(seconds, perplexity)]`` at every evaluation and the primitives'
    roofline fraction."""
    X = columns(Xtr, np.float32)
    m = X.shape[1]
    model = LDA(n_components=K, total_samples=m, learning_offset=offset, learning_decay=decay,
                dtype="float32", seed=0)
    model.init(X.shape[0])
    bs = batch_size or a.batch_size or int(np.clip(m // 16, 128, 2048))
    batches = [gmat.slice_columns(X, s, min(s + bs, m)) for s in range(0, m, bs)]
    # warm the kernels' compilation out of the clock
    warm = LDA(n_components=K, dtype="float32")
    warm.init(X.shape[0])
    warm.update(Minibatch(batches[0]))
    machine = gmat.machine_roofline()
    trace, spent, bound, steps = [], 0.0, 0.0, 0
    for _ in range(a.max_passes):
        for Xb in batches:
            t = time.perf_counter()
            model.update(Minibatch(Xb))
            spent += time.perf_counter() - t
            bound += model.cost(Minibatch(Xb)).roofline_time(machine)
            steps += 1
            if steps % a.eval_every == 0 or Xb is batches[-1]:
                trace.append((spent, evaluate(model.components_)))
    # the steps' roofline time (LDA.cost: compulsory bytes, the E-step's flops) over their time
    return trace, bound / spent


def run_roofline_batch(Xtr, K, evaluate, a):
    """Batch VB (``LDA.fit_batch``, float32); ``[(seconds, perplexity)]`` after every pass,
    the evaluations' time subtracted."""
    X = columns(Xtr, np.float32)
    warm = LDA(n_components=K, dtype="float32")
    warm.init(X.shape[0])
    warm.fit_batch(gmat.slice_columns(X, 0, min(X.shape[1], 256)), 1)
    model = LDA(n_components=K, dtype="float32", seed=0)
    model.init(X.shape[0])
    trace, paused = [], [0.0]
    t0 = time.perf_counter()

    def record(it, mdl):
        t = time.perf_counter()
        trace.append((t - t0 - paused[0], evaluate(mdl.components_)))
        paused[0] += time.perf_counter() - t

    model.fit_batch(X, a.max_batch_passes, callback=record)
    return trace


def first_reach(trace, target):
    for s, p in trace:
        if p <= target:
            return s
    return math.nan


# ---------------------------------------------------------------------------------------------


def bench(name, X, a, peers):
    """Every peer, then Roofline's three runs on ``X`` (documents x words), printed; returns one
    result dict per peer: ``model, data, peer, peer_s, quality`` (the peer's held-out
    perplexity), ``ours_s`` (Roofline's earliest time to it, None when not reached), ``how``
    (which run), ``ratio``, ``fraction`` (online VB's roofline fraction, :meth:`LDA.cost`)."""
    K = a.topics
    Xtr, Xh = split(X)
    tokens = int(X.sum())
    print(f"\n## {name}: {X.shape[0]} documents, {X.shape[1]} words, {int(X.nnz)} nonzeros, "
          f"{tokens} tokens; K = {K}; held out {Xh.shape[0]} documents")
    evaluate = Evaluator(Xh, K)
    rows = []
    for p in peers:
        why = why_not(p)
        if why:
            print(f"peer skipped: {p}: {why}")
            continue
        try:
            dt, lam, note = run_peer(p, Xtr, K, a)
        except Exception as e:  # a peer's failure is reported, not fatal
            print(f"peer failed: {p}: {type(e).__name__}: {e}")
            continue
        rows.append((p, dt, evaluate(lam), note))
    trace, frac = run_roofline(Xtr, K, evaluate, a)
    best = min(p for _, p in trace)
    print(f"Roofline online VB: {len(trace)} evaluations, best perplexity {best:.2f}, final "
          f"{trace[-1][1]:.2f} after {trace[-1][0]:.2f} s; roofline fraction (LDA.cost) "
          f"{100 * frac:.1f}%")
    strace, _ = run_roofline(Xtr, K, evaluate, a, offset=1024.0, decay=0.51,
                             batch_size=max(16, Xtr.shape[0] // 20))
    print(f"Roofline online VB, Spark's schedule: {len(strace)} evaluations, best perplexity "
          f"{min(p for _, p in strace):.2f}, final {strace[-1][1]:.2f} after "
          f"{strace[-1][0]:.2f} s")
    btrace = run_roofline_batch(Xtr, K, evaluate, a)
    print(f"Roofline batch VB: {len(btrace)} passes, best perplexity "
          f"{min(p for _, p in btrace):.2f}, final {btrace[-1][1]:.2f} after "
          f"{btrace[-1][0]:.2f} s")
    print(f"{'peer':<18} {'peer s':>9} {'perplexity':>11} {'Roofline s':>11} {'ratio':>8}  notes")
    results = []
    for p, dt, perp, note in rows:
        ours, how = min((first_reach(trace, perp), "online"),
                        (first_reach(strace, perp), "online-S"),
                        (first_reach(btrace, perp), "batch"),
                        key=lambda r: math.inf if math.isnan(r[0]) else r[0])
        ratio = "not reached" if math.isnan(ours) else f"{dt / ours:.1f}x"
        ours_s = "-" if math.isnan(ours) else f"{ours:.2f} {how}"
        print(f"{p:<18} {dt:>9.2f} {perp:>11.2f} {ours_s:>13} {ratio:>11}  {note}")
        results.append({"model": "LDA", "data": name, "peer": p, "peer_s": dt,
                        "quality": perp, "ours_s": None if math.isnan(ours) else ours,
                        "how": how, "ratio": math.nan if math.isnan(ours) else dt / ours,
                        "fraction": frac})
    return results


def estep_table(a):
    """The two E-steps side by side on one minibatch of the first synthetic corpus."""
    K = a.topics
    X = columns(synthetic(a.tokens[0], a.vocab, a.true_topics, a.doc_length), np.float32)
    m = min(X.shape[1], 2048)
    Xb = gmat.slice_columns(X, 0, m)
    machine = gmat.machine_roofline()
    print(f"\n## the E-step on one minibatch: {m} documents, {Xb.nnz} nonzeros, K = {K} "
          f"(lambda after one online step)")
    print(f"{'e_step':<12} {'best s':>8} {'iterations':>11} {'nnz visits':>11} "
          f"{'ns/visit':>9} {'roofline':>9}")
    base = LDA(n_components=K, total_samples=X.shape[1], dtype="float32", seed=0)
    base.init(X.shape[0])
    base.update(Minibatch(gmat.slice_columns(X, m, min(X.shape[1], 2 * m))))
    per_nnz = ((gmat.cost_sddmm(Xb, K, scale=False).roofline_time(machine)
                + gmat.cost_mult_as(Xb, K).roofline_time(machine)) / max(1, Xb.nnz))
    for how in ("fused", "primitives"):
        model = LDA(n_components=K, dtype="float32", e_step=how)
        model.set_parameters(base.components_)
        best = math.inf
        for _ in range(a.repeat):
            t = time.perf_counter()
            model.e_step(Xb, sstats=True)
            best = min(best, time.perf_counter() - t)
        v = model.last_estep["nnz_work"]
        print(f"{how:<12} {best:>8.3f} {model.last_estep['iterations']:>11} {v:>11} "
              f"{1e9 * best / v:>9.1f} {100 * per_nnz * v / best:>8.1f}%")


def parser():
    """The command line (also read by ``benchmarks/factor_models.py``)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, nargs="*", default=[100_000, 1_000_000])
    ap.add_argument("--vocab", type=int, default=10_000)
    ap.add_argument("--true-topics", type=int, default=20)
    ap.add_argument("--doc-length", type=int, default=100)
    ap.add_argument("--topics", type=int, default=20, help="K of every model")
    ap.add_argument("--passes", type=int, default=2, help="the online peers' passes")
    ap.add_argument("--batch-passes", type=int, default=10, help="scikit-learn batch's")
    ap.add_argument("--max-passes", type=int, default=6, help="Roofline online's at most")
    ap.add_argument("--max-batch-passes", type=int, default=15,
                    help="Roofline batch's passes")
    ap.add_argument("--batch-size", type=int, default=0,
                    help="Roofline's minibatch (0: documents / 16, within 128..2048)")
    ap.add_argument("--eval-every", type=int, default=2, help="Roofline's minibatches")
    ap.add_argument("--no-real", action="store_true", help="skip the real corpus")
    ap.add_argument("--peers", nargs="*", default=list(PEERS), choices=PEERS)
    ap.add_argument("--estep", action="store_true",
                    help="only the fused and the primitives' E-step side by side")
    ap.add_argument("--repeat", type=int, default=3, help="--estep: best of")
    return ap


def run_all(a):
    """The synthetic corpora of ``a.tokens`` and (unless ``a.no_real``) the real one; the
    result dicts of :func:`bench`; the Spark session (if any) stopped at the end."""
    results = []
    try:
        for n in a.tokens:
            X = synthetic(n, a.vocab, a.true_topics, a.doc_length)
            results += bench(f"synthetic power-law, {n:.0e} tokens", X, a, a.peers)
        if not a.no_real:
            X, why = real_corpus()
            if X is None:
                print(f"\nreal corpus skipped: {why}")
            else:
                results += bench("real: gensim's head500 Wikipedia passages", X, a, a.peers)
    finally:
        if "session" in _SPARK:
            _SPARK.pop("session").stop()
    return results


def main(argv=None):
    a = parser().parse_args(argv)
    print(f"# LDA: Roofline online VB vs peers; {os.cpu_count()} cores; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average "
          f"{os.getloadavg()[0]:.1f}")
    if a.estep:
        estep_table(a)
        return
    run_all(a)


if __name__ == "__main__":
    main()
