"""Kylix's sparse and dense all-reduce against numpy, over the in-process queue transport
(the same butterfly, in the same order, as over TCP and MPI: see test_backends.py)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roofline.comm import (
    CommTimeoutError,
    KylixCommunicator,
    PeerError,
    QueueGroup,
    _netmodel,
    kylix_degrees,
    run_in_threads,
)

N_FEATURES = 4000


def _zipf_indices(rng, n, n_features=N_FEATURES, a=1.3):
    return ((rng.zipf(a, size=n) - 1) % n_features).astype(np.int64)


def _run(K, degrees, fn, timeout=20):
    group = QueueGroup(K, timeout=timeout)

    def one(r):
        return fn(KylixCommunicator(group.transport(r), degrees), r)

    return run_in_threads(one, K, [group])


def _reference(idx, vals, n_features=N_FEATURES):
    tail = vals[0].shape[1:]
    ref = np.zeros((n_features, *tail), np.float64)
    for i, v in zip(idx, vals, strict=True):
        np.add.at(ref, i, v.astype(np.float64))
    return ref


CASES = [(1, None), (2, None), (3, None), (4, None), (4, (2, 2)), (8, (8,)), (8, (4, 2)),
         (8, (2, 2, 2))]


@pytest.mark.parametrize("K,degrees", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sparse_allreduce_equals_the_numpy_sum(K, degrees, dtype):
    rng = np.random.default_rng(K)
    idx = [_zipf_indices(rng, int(rng.integers(0, 600))) for _ in range(K)]  # duplicates too
    if K > 2:
        idx[1] = idx[1][:0]  # a rank with nothing to contribute
    vals = [rng.normal(size=i.size).astype(dtype) for i in idx]
    want = [rng.integers(0, N_FEATURES + 50, size=70) for _ in range(K)]  # some never contributed
    ref = _reference(idx, vals, N_FEATURES + 50)

    def fn(comm, r):
        plan = comm.sparse_plan(idx[r], want[r])
        first, again = plan.reduce(vals[r]), plan.reduce(vals[r])
        own = comm.sparse_allreduce(idx[r], vals[r])
        return first, again, own

    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    for r, (first, again, own) in enumerate(_run(K, degrees, fn)):
        assert first.dtype == dtype and first.shape == (70,)
        np.testing.assert_allclose(first, ref[want[r]], **tol)
        np.testing.assert_array_equal(first, again)  # a plan is reusable
        np.testing.assert_allclose(own, ref[idx[r]], **tol)


@pytest.mark.parametrize("K,degrees", [(4, (2, 2)), (6, (3, 2))])
def test_two_dimensional_values_and_disjoint_or_identical_sets(K, degrees):
    rng = np.random.default_rng(7)
    disjoint = [np.arange(r, N_FEATURES, K, dtype=np.int64) for r in range(K)]
    same = [np.arange(0, N_FEATURES, 3, dtype=np.int64)] * K
    for idx in (disjoint, same):
        vals = [rng.normal(size=(i.size, 3)) for i in idx]
        ref = _reference(idx, vals)
        out = _run(K, degrees, lambda comm, r, idx=idx, vals=vals:
                   comm.sparse_allreduce(idx[r], vals[r]))
        for r in range(K):
            np.testing.assert_allclose(out[r], ref[idx[r]], rtol=1e-12)


def test_results_are_bit_identical_on_every_rank():
    K = 8
    rng = np.random.default_rng(3)
    idx = [_zipf_indices(rng, 3000) for _ in range(K)]
    vals = [rng.normal(size=i.size).astype(np.float32) for i in idx]
    shared = np.arange(0, 200, dtype=np.int64)
    out = _run(K, (4, 2), lambda comm, r: comm.sparse_plan(idx[r], shared).reduce(vals[r]))
    for r in range(1, K):
        np.testing.assert_array_equal(out[r], out[0])


@settings(max_examples=25, deadline=None)
@given(K=st.sampled_from([2, 3, 4]), n=st.integers(0, 40), n_features=st.integers(1, 60),
       seed=st.integers(0, 2**16))
def test_sparse_allreduce_hypothesis(K, n, n_features, seed):
    rng = np.random.default_rng(seed)
    idx = [rng.integers(0, n_features, size=int(rng.integers(0, n + 1))) for _ in range(K)]
    vals = [rng.normal(size=i.size) for i in idx]
    ref = _reference(idx, vals, n_features)
    out = _run(K, None, lambda comm, r: comm.sparse_allreduce(idx[r], vals[r]))
    for r in range(K):
        np.testing.assert_allclose(out[r], ref[idx[r]], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("K,degrees", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dense_allreduce_sum_and_max(K, degrees, dtype):
    rng = np.random.default_rng(K)
    xs = [rng.normal(size=(13, 7)).astype(dtype) for _ in range(K)]

    def fn(comm, r):
        return comm.allreduce(xs[r]), comm.allreduce(xs[r], op="max")

    out = _run(K, degrees, fn)
    for s, m in out:
        np.testing.assert_array_equal(s, out[0][0])  # bit-identical on every rank
        np.testing.assert_allclose(s, np.sum(xs, axis=0), rtol=1e-5 if dtype == np.float32
                                   else 1e-12)
        np.testing.assert_array_equal(m, np.max(xs, axis=0))
        assert s.dtype == dtype and s.shape == (13, 7)


def test_broadcast_gather_allgather_barrier_and_split():
    K = 6

    def fn(comm, r):
        b = comm.broadcast({"from": r, "arr": np.arange(3) * r}, root=2)
        g = comm.gather(r * 10, root=1)
        ag = comm.allgather(np.full(2, r))
        comm.barrier()
        sub = comm.split(color=r % 2, key=-r)  # reversed order inside each color
        return b, g, ag, sub.rank, sub.size, sub.allreduce(np.array([r]))

    for r, (b, g, ag, srank, ssize, ssum) in enumerate(_run(K, None, fn)):
        assert b["from"] == 2 and np.array_equal(b["arr"], [0, 2, 4])
        assert g == ([0, 10, 20, 30, 40, 50] if r == 1 else None)
        assert [int(a[0]) for a in ag] == list(range(K))
        same = [q for q in range(K) if q % 2 == r % 2]
        assert ssize == len(same) and srank == sorted(same, reverse=True).index(r)
        assert int(ssum[0]) == sum(same)


def test_a_mismatched_dtype_is_an_error_not_a_wrong_sum():
    def fn(comm, r):
        return comm.sparse_allreduce(np.arange(4), np.ones(4, np.float32 if r else np.float64))

    with pytest.raises(Exception, match="mismatch"):
        _run(2, None, fn)


def test_a_missing_peer_times_out_naming_it():
    group = QueueGroup(2, timeout=0.5)
    comm = KylixCommunicator(group.transport(0))
    with pytest.raises(CommTimeoutError, match="rank 1") as e:
        comm.allreduce(np.ones(3))
    assert e.value.peer == 1


def test_an_aborted_group_wakes_the_waiters():
    group = QueueGroup(3, timeout=30)

    def fn(r):
        if r == 2:
            raise RuntimeError("worker 2 failed")
        return KylixCommunicator(group.transport(r)).allreduce(np.ones(2))

    with pytest.raises(RuntimeError, match="worker 2 failed"):
        run_in_threads(fn, 3, [group])
    with pytest.raises(PeerError):
        group.transport(0).recv(1, tag=99)


def test_argument_errors():
    comm = KylixCommunicator(QueueGroup(1).transport(0))
    with pytest.raises(ValueError, match="op must be one of"):
        comm.allreduce(np.ones(2), op="min")
    with pytest.raises(ValueError, match="non-negative"):
        comm.sparse_plan(np.array([-1, 2]))
    with pytest.raises(ValueError, match="rows but the plan has 2"):
        comm.sparse_plan(np.array([1, 2])).reduce(np.ones(3))
    with pytest.raises(ValueError, match="product is the number of ranks"):
        KylixCommunicator(QueueGroup(4).transport(0), degrees=(3,))
    comm.close()
    with pytest.raises(Exception, match="closed"):
        comm.allreduce(np.ones(1))


@pytest.mark.parametrize("n", [1, 2, 6, 8, 12, 64, 256, 97])
def test_degrees_decrease_and_multiply_to_the_node_count(n):
    for nnz in (None, 10, 10**6):
        d = kylix_degrees(n, nnz=nnz)
        assert int(np.prod(d)) == n and list(d) == sorted(d, reverse=True)
        assert all(k >= 2 for k in d)
    assert kylix_degrees(64, nnz=100) == (8, 8)  # small packets: layers of about sqrt(n)
    assert kylix_degrees(64, nnz=10**7) == (64,)  # large packets: one all-to-all layer


def _two_ranks(monkeypatch, direct, fn):
    """``fn`` on two ranks, reducing in one exchange (``direct``) or through the butterfly."""
    monkeypatch.setattr(_netmodel, "DIRECT_MAX_DEGREE", 2 if direct else 1)

    def one(comm, r):
        assert comm.direct == direct
        before = (comm.stats["messages"], comm.stats["bytes_sent"])
        out = fn(comm, r)
        return out, comm.stats["messages"] - before[0], comm.stats["bytes_sent"] - before[1]

    return _run(2, (2,), one)


def test_two_ranks_reduce_in_one_exchange_bit_for_bit(monkeypatch):
    """Two ranks (one layer of two) reduce in one exchange: each sends the other the values of
    its indices that the other wants, and both add in member order, which is the butterfly
    owner's order, so every sum has the same bits as the butterfly's (sparse 1-D and 2-D,
    unsorted indices with duplicates, wanted sets that differ; dense sum and max) in half its
    messages."""
    rng = np.random.default_rng(11)
    idx = [_zipf_indices(rng, 900), rng.permutation(np.arange(0, N_FEATURES, 2))]
    vals = [rng.normal(size=(i.size, 3)) for i in idx]
    want = [np.arange(N_FEATURES), rng.integers(0, N_FEATURES + 20, size=300)]
    xs = [rng.normal(size=(17, 5)) for _ in range(2)]

    def fn(comm, r):
        plan = comm.sparse_plan(idx[r], want[r])
        before = comm.stats["messages"]
        out = (plan.reduce(vals[r]), plan.reduce(vals[r][:, 0].copy()),
               comm.allreduce(xs[r]), comm.allreduce(xs[r], op="max"))
        return out, comm.stats["messages"] - before

    direct = _two_ranks(monkeypatch, True, fn)
    butterfly = _two_ranks(monkeypatch, False, fn)
    ref = _reference(idx, vals, N_FEATURES + 20)
    for r in range(2):
        (got, msgs), _, _ = direct[r]
        (exp, bmsgs), _, _ = butterfly[r]
        for a, b in zip(got, exp, strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(got[0], ref[want[r]], rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(got[2], direct[0][0][0][2])  # the same on both ranks
        assert msgs == 4 and bmsgs == 8  # one message per collective instead of two


def test_two_ranks_send_no_more_than_the_butterfly(monkeypatch):
    """The Newton plan's case (every rank wants the whole union): one exchange sends each
    rank's own values, fewer bytes than the butterfly's half of its own plus half of the
    union; a dense vector costs the same bytes in one message instead of two."""
    rng = np.random.default_rng(5)
    idx = [np.unique(_zipf_indices(rng, 3000, a=1.1)) for _ in range(2)]
    union = np.union1d(*idx)

    def fn(comm, r):
        plan = comm.sparse_plan(idx[r], union)
        before = comm.stats["bytes_sent"]
        plan.reduce(np.ones(idx[r].size))
        sparse = comm.stats["bytes_sent"] - before
        before = comm.stats["bytes_sent"]
        comm.allreduce(np.ones(1000))
        return sparse, comm.stats["bytes_sent"] - before

    direct = _two_ranks(monkeypatch, True, fn)
    butterfly = _two_ranks(monkeypatch, False, fn)
    for r in range(2):
        (sparse, dense), _, _ = direct[r]
        (bsparse, bdense), _, _ = butterfly[r]
        assert sparse < bsparse
        assert 8 * idx[r].size <= sparse <= 8 * idx[r].size + 64  # its values and a header
        assert dense == pytest.approx(bdense, abs=64)


def test_colliding_power_law_indices_shrink_down_the_layers():
    """The Kylix shape: with heavily colliding features, each layer's unions are no larger than
    the data the layer above sent (the nested butterfly forwards each feature once)."""
    K = 8
    rng = np.random.default_rng(0)
    idx = [np.unique(_zipf_indices(rng, 20000, n_features=1 << 16, a=1.1)) for _ in range(K)]
    vals = [np.ones(i.size) for i in idx]

    def fn(comm, r):
        plan = comm.sparse_plan(idx[r])
        before = [dict(x) for x in comm.stats["layers"]]
        plan.reduce(vals[r])
        return [a["bytes_sent"] - b["bytes_sent"] for a, b in
                zip(comm.stats["layers"], before, strict=True)]

    per_rank = np.array(_run(K, (2, 2, 2), fn))
    per_layer = per_rank.sum(axis=0)
    assert per_layer[1] < per_layer[0] and per_layer[2] < per_layer[1]


def test_in_process_split_gives_shared_memory_subgroups():
    """``InProcessGroup``'s split: node and cross groups of a 2 x 3 hierarchy, each an
    in-process communicator whose all-reduce sums exactly its members (ordered by key)."""
    from roofline.comm import InProcessCommunicator, InProcessGroup

    world = InProcessGroup(6, timeout=30)

    def one(r):
        w = world.communicator(r)
        node = w.split(r // 3)
        cross = w.split(r % 3, key=-r)  # reversed order inside the cross groups
        return (type(node) is InProcessCommunicator, node.rank, node.size,
                float(node.allreduce(np.array([2.0 ** r]))[0]), cross.rank, cross.size,
                float(cross.allreduce(np.array([2.0 ** r]))[0]))

    out = run_in_threads(one, 6, [world])
    for r, (is_ip, nr, ns, nsum, cr, cs, csum) in enumerate(out):
        assert is_ip and (nr, ns) == (r % 3, 3) and (cr, cs) == (1 - r // 3, 2)
        assert nsum == sum(2.0 ** q for q in range(6) if q // 3 == r // 3)
        assert csum == sum(2.0 ** q for q in range(6) if q % 3 == r % 3)
    assert len(world.children) == 5 and all(g.stats["calls"] == 1
                                            for g in world.children.values())
