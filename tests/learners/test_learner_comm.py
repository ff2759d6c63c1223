"""Data-parallel Learner (``Learner(..., comm=, sync_every=)``): BIDMach's ParLearner over Kylix."""

import numpy as np
import pytest
import scipy.sparse as sp

from roofline import comm as rcomm
from roofline.datasources import MatSource, make_criteo_like_matrix
from roofline.learners import GLM, LBFGS, ADAGrad, L2Regularizer, Learner, LearnerOptions


def _data(n=24_000, n_bits=12, seed=3):
    X, y = make_criteo_like_matrix(n, n_bits=n_bits, dtype=np.float32, seed=seed)
    X = sp.csc_matrix(X)
    m = n - n // 6
    return sp.csc_matrix(X[:, :m]), y[:m], sp.csc_matrix(X[:, m:]), y[m:]


DATA = {}


def data(n_bits=12):
    if n_bits not in DATA:
        DATA[n_bits] = _data(n_bits=n_bits)
    return DATA[n_bits]


def fit(comm=None, *, n_bits=12, lr=0.1, passes=2, batch=500, l2=0.0, **kw):
    Xtr, ytr, Xte, yte = data(n_bits)
    L = Learner(MatSource(Xtr, ytr, batch_size=batch), GLM(loss="logistic"), ADAGrad(lr=lr),
                mixins=[L2Regularizer(l2)] if l2 else [],
                heldout=MatSource(Xte, yte, batch_size=4000), n_passes=passes, progress=False,
                comm=comm, **kw)
    res = L.train()
    sent = 0 if comm is None else comm.stats["bytes_sent"]
    return {"loss": L.evaluate()["loss"], "coef": L.model.coef.copy(),
            "intercept": L.model.intercept.copy(), "bytes": sent, "n_examples": res.n_examples,
            "sync": None if L._sync is None else dict(L._sync.stats)}


def test_one_rank_equals_plain_learner():
    base = fit()
    (one,) = rcomm.run(lambda c: fit(c, sync_every=3), 1, backend="threads")
    np.testing.assert_array_equal(one["coef"], base["coef"])
    np.testing.assert_array_equal(one["intercept"], base["intercept"])
    assert one["loss"] == base["loss"]


@pytest.mark.parametrize("k", [2, 4])
@pytest.mark.parametrize("elastic", [1.0, 0.5])
def test_heldout_loss_close_to_single_process_and_replicas_identical(k, elastic):
    """An L2-regularised logistic problem (so that there is an optimum to approach): at equal
    passes, the data-parallel held-out loss is within 1% of the single process's."""
    kw = {"lr": 0.5, "passes": 8, "l2": 1e-3}
    base = fit(**kw)
    outs = rcomm.run(lambda c: fit(c, sync_every=2, elastic=elastic, **kw), k,
                     backend="threads")
    for o in outs[1:]:  # bit-identical replicas after training
        np.testing.assert_array_equal(o["coef"], outs[0]["coef"])
        np.testing.assert_array_equal(o["intercept"], outs[0]["intercept"])
    assert abs(outs[0]["loss"] - base["loss"]) < 0.01 * base["loss"], (outs[0]["loss"],
                                                                         base["loss"])
    # every example trained on exactly once per pass, over all ranks
    assert sum(o["n_examples"] for o in outs) == base["n_examples"]
    assert outs[0]["sync"]["syncs"] > 0


def test_sparse_sync_sends_fewer_bytes_than_dense_and_same_model():
    def both(c):
        return [fit(c, n_bits=18, sync_every=4, sync=s, passes=2) for s in ("sparse", "dense")]

    outs = rcomm.run(both, 2, backend="threads")
    sparse, dense = outs[0]
    sparse_bytes = outs[0][0]["bytes"]  # bytes counted before the dense run
    dense_bytes = outs[0][1]["bytes"] - sparse_bytes
    assert sparse_bytes < 0.6 * dense_bytes, (sparse_bytes, dense_bytes)
    np.testing.assert_allclose(sparse["coef"], dense["coef"], rtol=1e-4, atol=1e-6)
    assert sparse["sync"]["plan_reuses"] > 0  # the Kylix plan was reused
    assert dense["sync"]["plans"] == 0


def test_dense_data_uses_dense_sync():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((20, 2000)).astype(np.float32)
    y = (X[0] + 0.5 * X[1] > 0).astype(np.float32)

    def work(c):
        L = Learner(MatSource(X, y, batch_size=100), GLM(loss="logistic"), ADAGrad(lr=0.1),
                    n_passes=2, progress=False, comm=c, sync_every=2)
        L.train()
        return L.model.coef.copy(), L._sync.sparse

    outs = rcomm.run(work, 2, backend="threads")
    assert outs[0][1] is False
    np.testing.assert_array_equal(outs[0][0], outs[1][0])


@pytest.mark.slow
@pytest.mark.multiprocess
def test_tcp_processes_two_ranks():
    base = fit(lr=0.5, passes=8, l2=1e-3)
    outs = rcomm.run(_tcp_fit, 2, backend="tcp", timeout=60)
    np.testing.assert_array_equal(outs[0]["coef"], outs[1]["coef"])
    assert abs(outs[0]["loss"] - base["loss"]) < 0.01 * base["loss"]


def _tcp_fit(c):
    return fit(c, sync_every=2, lr=0.5, passes=8, l2=1e-3)


def test_bad_sync_every_and_comm():
    with pytest.raises(ValueError, match="sync_every"):
        LearnerOptions(sync_every=0)
    with pytest.raises(ValueError, match="elastic"):
        LearnerOptions(elastic=0.0)
    Xtr, ytr, _, _ = data()
    src = MatSource(Xtr, ytr, batch_size=500)
    with pytest.raises(ValueError, match="sync_every"):
        Learner(src, GLM(), ADAGrad(), comm=None, sync_every=-1)
    with pytest.raises(TypeError, match="Communicator"):
        Learner(src, GLM(), ADAGrad(), comm=object())

    def batch_opt(c):
        with pytest.raises(ValueError, match="batch optimizer"):
            Learner(src, GLM(), LBFGS(), comm=c, progress=False).train()
        return True

    assert rcomm.run(batch_opt, 2, backend="threads") == [True, True]


def test_presharded_source_early_stopping_and_checkpoints(tmp_path):
    """shard='none' (each rank passes its own part), early stopping decided together (no
    deadlock, same model), one checkpoint per rank."""
    Xtr, ytr, Xte, yte = data()
    ck = str(tmp_path / "ck.npz")

    def work(c):
        part = np.arange(Xtr.shape[1]) % c.size == c.rank
        L = Learner(MatSource(Xtr[:, part], ytr[part], batch_size=500), GLM(loss="logistic"),
                    ADAGrad(lr=0.5), heldout=MatSource(Xte, yte, batch_size=4000), n_passes=30,
                    progress=False, comm=c, sync_every=3, shard="none", early_stopping=True,
                    patience=1, eval_every=2, checkpoint=ck)
        res = L.train()
        return L.model.coef.copy(), res.stopped_early, res.n_passes

    outs = rcomm.run(work, 2, backend="threads")
    np.testing.assert_array_equal(outs[0][0], outs[1][0])
    assert outs[0][1] and outs[1][1]
    assert outs[0][2] == outs[1][2] < 30
    assert (tmp_path / "ck.npz.rank0").exists() and (tmp_path / "ck.npz.rank1").exists()


def test_sharded_file_source(tmp_path):
    from roofline.datasources import FileSource, ShardWriter

    Xtr, ytr, _, _ = data()
    pattern = str(tmp_path / "s-{i}.npz")
    with ShardWriter(pattern, examples_per_shard=5000) as w:
        w.write(Xtr, ytr)

    def work(c):
        src = FileSource(pattern, rank=1 - c.rank, size=2).prefetch(1)
        with pytest.raises(ValueError, match="sharded for rank"):
            Learner(src, GLM(), ADAGrad(), comm=c, progress=False).train()
        # the right shard, under a stage: not sharded again by minibatch
        L = Learner(FileSource(pattern, rank=c.rank, size=2).prefetch(1),
                    GLM(loss="logistic"), ADAGrad(lr=0.1), comm=c, progress=False)
        return L.train().n_examples

    n = rcomm.run(work, 2, backend="threads")
    assert sum(n) == Xtr.shape[1] and min(n) > 0


def test_power_law_schedule_sends_fewer_bytes_same_quality():
    """sync_schedule=b: from the second pass on, rare features are exchanged rarely; every
    feature at pass ends (replicas identical after training), held-out loss within 1%."""
    kw = {"lr": 0.5, "passes": 4, "l2": 1e-3, "n_bits": 16}

    def both(c):
        return [fit(c, sync_every=1, sync_schedule=b, **kw) for b in (0, 256)]

    outs = rcomm.run(both, 2, backend="threads")
    flat, sched = outs[0]
    flat_bytes = flat["bytes"]
    sched_bytes = sched["bytes"] - flat_bytes
    np.testing.assert_array_equal(outs[0][1]["coef"], outs[1][1]["coef"])
    assert sched_bytes < 0.8 * flat_bytes, (sched_bytes, flat_bytes)
    assert abs(sched["loss"] - flat["loss"]) < 0.01 * flat["loss"], (sched["loss"], flat["loss"])
