"""The cluster cost model's arithmetic (comm/_netmodel.py): step and collective times by hand,
Kylix's bytes per layer against the bytes a real reduce sends, the fits recovering planted
constants, and the degrees it chooses."""

import math

import numpy as np
import pytest

from roofline.comm import (
    ClusterModel,
    ComputeScaling,
    KylixCommunicator,
    Network,
    QueueGroup,
    Step,
    kylix_degrees,
    kylix_steps,
    model_degrees,
    run_in_threads,
)


def test_step_and_collective_time_by_hand():
    net = Network(bandwidth=1e6, latency=1e-3)
    m = ClusterModel(net, step_s=2e-3, message_s=1e-4, byte_s=1e-9, header=100)
    s = Step(messages=3, bytes_out=30_000, bytes_in=20_000)
    # latency + (max(out, in) + 3 headers) / bandwidth + step + 3 messages + bytes both ways
    want = 1e-3 + (30_000 + 300) / 1e6 + 2e-3 + 3e-4 + 50_000 * 1e-9
    assert m.step_time(s) == pytest.approx(want, rel=1e-12)
    assert m.collective_time([s, s]) == pytest.approx(2 * want, rel=1e-12)
    assert m.with_network(Network()).step_time(s) == pytest.approx(want - 1e-3 - 0.0303)
    # overlapped: latency + the larger of the wire (30.3 ms) and the hosts (2.35 ms)
    over = ClusterModel(net, step_s=2e-3, message_s=1e-4, byte_s=1e-9, header=100, overlap=True)
    assert over.step_time(s) == pytest.approx(1e-3 + 0.0303, rel=1e-12)
    assert over.with_network(Network()).step_time(s) == pytest.approx(2.35e-3, rel=1e-12)


def test_ethernet_is_tcp_payload_of_the_line_rate():
    n = Network.ethernet(1e9)
    assert n.bandwidth == pytest.approx(125e6 * 1448 / 1514)
    assert n.name == "1 Gb/s" and Network.ethernet(1e8).name == "100 Mb/s"
    with pytest.raises(ValueError, match="bandwidth"):
        Network(bandwidth=0)
    with pytest.raises(ValueError, match="latency"):
        Network(latency=-1)


def test_dense_steps_are_reduce_scatter_then_all_gather():
    d = 3 * 5 * 64
    steps = kylix_steps((5, 3), d)
    head = 16
    assert [s.messages for s in steps] == [4, 2, 2, 4]
    assert steps[0].bytes_out == pytest.approx(d * 4 / 5 * 8 + 4 * head)
    assert steps[1].bytes_out == pytest.approx(d / 5 * 2 / 3 * 8 + 2 * head)
    assert steps[2].bytes_out == pytest.approx(2 * (d / 15 * 8 + head))
    assert steps[3].bytes_out == pytest.approx(4 * (d / 5 * 8 + head))
    assert kylix_steps((), d) == []
    # two columns: twice the data, a larger array header
    two = kylix_steps((5, 3), d, columns=2)
    assert two[0].bytes_out == pytest.approx(d * 4 / 5 * 16 + 4 * 24)


def _measured_bytes(K, degrees, fn):
    group = QueueGroup(K)

    def one(r):
        comm = KylixCommunicator(group.transport(r), degrees)
        return fn(comm, r)

    return run_in_threads(one, K, [group])


@pytest.mark.parametrize("K,degrees", [(4, (4,)), (4, (2, 2)), (6, (3, 2)), (8, (2, 2, 2))])
def test_dense_bytes_equal_the_allreduce_bytes(K, degrees):
    d = 2 * 3 * 4 * 100

    def fn(comm, r):
        before = comm.stats["bytes_sent"]
        comm.allreduce(np.ones(d))
        return comm.stats["bytes_sent"] - before

    sent = _measured_bytes(K, degrees, fn)
    model = sum(s.bytes_out for s in kylix_steps(degrees, d))
    assert np.allclose(sent, model, rtol=1e-12), (sent, model)


@pytest.mark.parametrize("K,degrees", [(4, (4,)), (4, (2, 2)), (8, (2, 2, 2)), (8, (4, 2))])
def test_sparse_bytes_follow_the_union_of_the_merged_nodes(K, degrees):
    """Power-law index sets (hot indices shared by every node) hashed over the index space: the
    model's bytes, from the exact unions U(j) of j consecutive nodes, are what the reduce
    sends per node within 3% on average."""
    rng = np.random.default_rng(1)
    n_feat = 1 << 16
    perm = rng.permutation(n_feat)  # hashing: popularity independent of the index
    sets = []
    for _ in range(K):
        z = np.minimum(rng.zipf(1.3, 6000), n_feat) - 1
        sets.append(np.unique(perm[z]))

    def U(j):
        return np.unique(np.concatenate(sets[:j])).size

    def fn(comm, r):
        plan = comm.sparse_plan(sets[r], want=np.unique(np.concatenate(sets)))
        before = comm.stats["bytes_sent"]
        plan.reduce(np.ones(sets[r].size))
        return comm.stats["bytes_sent"] - before

    sent = np.mean(_measured_bytes(K, degrees, fn))
    model = sum(s.bytes_out for s in kylix_steps(degrees, U))
    assert model == pytest.approx(sent, rel=0.03)
    # and the unions matter: taking the nodes as disjoint (U(j) = j U(1)) overestimates
    disjoint = sum(s.bytes_out for s in kylix_steps(degrees, lambda j: j * U(1)))
    assert disjoint > 1.1 * sent


def test_compute_scaling_fit_recovers_planted_constants():
    c = ComputeScaling(0.002, 0.05)
    K = [1, 2, 4, 8]
    fit = ComputeScaling.fit(K, [c.unit_s(k) for k in K])
    assert fit.serial_s == pytest.approx(0.002, rel=1e-9)
    assert fit.parallel_s == pytest.approx(0.05, rel=1e-9)
    assert fit.unit_s(1024) == pytest.approx(0.002 + 0.05 / 1024)
    # one K: all parallel; a negative serial part is clipped to 0
    assert ComputeScaling.fit([2, 2], [0.01, 0.03]) == ComputeScaling(0.0, 0.04)
    neg = ComputeScaling.fit([1, 2], [0.1, 0.04])  # exactly: serial -0.02, parallel 0.12
    assert neg.serial_s == 0.0 and neg.parallel_s == pytest.approx(0.12 / 1.25)


def test_cluster_model_fit_recovers_planted_host_costs():
    truth = ClusterModel(Network(), step_s=3e-4, message_s=5e-5, byte_s=2e-9)
    rng = np.random.default_rng(0)
    samples = []
    for _ in range(30):
        k = int(rng.integers(2, 9))
        steps = kylix_steps((k,), float(rng.integers(1000, 200_000)))
        samples.append((steps, truth.collective_time(steps)))
    fit = ClusterModel.fit(samples)
    assert fit.step_s == pytest.approx(3e-4, rel=1e-6)
    assert fit.message_s == pytest.approx(5e-5, rel=1e-6)
    assert fit.byte_s == pytest.approx(2e-9, rel=1e-6)
    # on a stated network, the network's own time is taken out before the fit
    net = Network(bandwidth=1e7, latency=1e-4)
    on = [(s, truth.with_network(net).collective_time(s)) for s, _ in samples]
    assert ClusterModel.fit(on, net).byte_s == pytest.approx(2e-9, rel=1e-6)


def test_iteration_time_is_units_plus_collectives():
    m = ClusterModel(Network(bandwidth=1e8, latency=1e-4), step_s=1e-4)
    c = ComputeScaling(0.001, 0.02)
    hv = kylix_steps((4,), 10_000)
    t = m.iteration_time(12, [(10, hv), (2, kylix_steps((4,), 1))], 4, c)
    assert t == pytest.approx(12 * (0.001 + 0.005) + 10 * m.collective_time(hv)
                              + 2 * m.collective_time(kylix_steps((4,), 1)))


def test_model_degrees_trade_latency_against_messages():
    # a fixed cost per step and nothing per message: one all-to-all layer
    per_step = ClusterModel(Network(latency=1e-3))
    assert model_degrees(64, 1, per_step) == (64,)
    # a cost per message only: as many layers as possible (binary)
    per_msg = ClusterModel(Network(), message_s=1e-4)
    assert model_degrees(16, 1, per_msg) == (2, 2, 2, 2)
    # both: layers of a few messages
    both = ClusterModel(Network(latency=3e-4), message_s=1e-4)
    deg = model_degrees(64, 1, both)
    assert 1 < len(deg) < 6 and math.prod(deg) == 64
    t = {d: both.collective_time(kylix_steps(d, 1)) for d in [(64,), (2,) * 6, deg]}
    assert t[deg] <= min(t.values())
    # through kylix_degrees, and one node
    assert kylix_degrees(64, model=both) == deg
    assert kylix_degrees(1, model=both) == () and model_degrees(1, 1, both) == ()
    assert kylix_degrees(97, model=both) == (97,)


def test_disjoint_data_send_more_bytes_through_more_layers():
    """Without collisions (U(j) = j U(1)) every layer forwards a node's whole share again, so
    deeper networks send more bytes; with identical sets (U constant: the dense case) the bytes
    are the same at any degrees up to the array headers.  Bandwidth alone: one layer."""
    def disjoint(j):
        return j * 10_000

    def sent(d, U):
        return sum(s.bytes_out for s in kylix_steps(d, U))

    b = {d: sent(d, disjoint) for d in [(16,), (4, 4), (2, 2, 2, 2)]}
    assert b[(16,)] < b[(4, 4)] < b[(2, 2, 2, 2)]
    same = [sent(d, 10_000) for d in [(16,), (4, 4), (2, 2, 2, 2)]]
    assert max(same) - min(same) < 16 * 2 * 16  # headers only
    assert model_degrees(16, disjoint, ClusterModel(Network(bandwidth=1e6))) == (16,)
