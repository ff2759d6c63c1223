"""The disk-simulated cluster whose nodes live on disk (DiskNodeCluster, issue 35): states
through checksummed files, the memory bound, results bit for bit those of Kylix over TCP,
degrees from a given disk roofline, and bad input."""

import os

import numpy as np
import pytest

from roofline.comm import (
    CommError,
    DiskNodeCluster,
    KylixCommunicator,
    MessageError,
    MismatchError,
    NodeStore,
    QueueGroup,
    StateError,
    kylix_degrees,
    load_state,
    run,
    run_in_threads,
    save_state,
)
from roofline.kernels import DiskRoofline

#: A disk roofline given explicitly (no measurement): 50 us per small file written, 10 us
#: read, 2 GB/s written, 4 GB/s read: a corner of 60 us * 1.33 GB/s = 80 kB.
DISK = DiskRoofline(path="/given", write_latency=50e-6, read_latency=10e-6,
                    write_bandwidth=2e9, read_bandwidth=4e9, synced_write_latency=2e-3,
                    synced_write_bandwidth=1e9)

K, DEGREES = 4, (2, 2)
LAM = 0.5


def _sparse_data(K, seed=0):
    """Power-law index sets with duplicates, unsorted, and some nodes wanting other indices."""
    rng = np.random.default_rng(seed)
    idx = [((rng.zipf(1.3, size=600) - 1) % 4000).astype(np.int64) for _ in range(K)]
    vals = [rng.standard_normal(i.size) for i in idx]
    wants = [None if r % 2 == 0 else rng.integers(0, 4500, 200) for r in range(K)]
    return idx, vals, wants


def _glm_data(K, seed=1, n=240, d=5):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = (X @ rng.standard_normal(d) + 0.5 * rng.standard_normal(n) > 0).astype(float)
    parts = np.array_split(np.arange(n), K)
    return X, y, [(X[p], y[p]) for p in parts]


def _local(X, y, w):
    """The gradient and Hessian of the logistic loss of a shard, flattened for one reduce."""
    p = 1.0 / (1.0 + np.exp(-(X @ w)))
    g = X.T @ (p - y)
    H = (X * (p * (1 - p))[:, None]).T @ X
    return np.concatenate([g, H.ravel()])


def _newton_update(w, summed):
    """One Newton step of sum(logistic loss) + LAM/2 |w|^2 from the all-reduced gradient and
    Hessian (the same arithmetic on every node)."""
    d = w.size
    g = summed[:d] + LAM * w
    H = summed[d:].reshape(d, d) + LAM * np.eye(d)
    return w - np.linalg.solve(H, g)


N_NEWTON = 8


def _tcp_job(comm, degrees, sparse, glm):
    """One rank over TCP: the Kylix sparse all-reduce, then the distributed Newton loop."""
    c = KylixCommunicator(comm.transport, degrees, tag=7)
    idx, vals, wants = sparse
    r = c.rank
    s = c.sparse_allreduce(idx[r], vals[r], wants[r])
    X, y = glm[r]
    w = np.zeros(X.shape[1])
    for _ in range(N_NEWTON):
        w = _newton_update(w, c.allreduce(_local(X, y, w)))
    return s, w


def _sim_step(node, state, reduced):
    """The same job as a DiskNodeCluster step: round 0 the sparse all-reduce, then Newton."""
    if node.round == 0:
        return node.sparse_allreduce(state["idx"], state["vals"],
                                     state["want"] if state["has_want"] else None)
    if node.round == 1:
        state["sparse"] = reduced
    else:
        state["w"] = _newton_update(state["w"], reduced)
    if node.round == N_NEWTON + 1:
        return None
    return node.allreduce(_local(state["X"], state["y"], state["w"]))


def _init_sim(sparse, glm):
    idx, vals, wants = sparse

    def init(r):
        X, y = glm[r]
        return {"idx": idx[r], "vals": vals[r], "has_want": wants[r] is not None,
                "want": np.zeros(0, np.int64) if wants[r] is None else wants[r],
                "X": X, "y": y, "w": np.zeros(X.shape[1])}

    return init


@pytest.mark.multiprocess
def test_sparse_allreduce_and_a_newton_fit_bit_identical_to_tcp(tmp_path):
    sparse = _sparse_data(K)
    X, y, glm = _glm_data(K)
    tcp = run(_tcp_job, K, backend="tcp", args=(DEGREES, sparse, glm), timeout=60)
    cl = DiskNodeCluster(K, tmp_path, degrees=DEGREES, disk=DISK)
    cl.init(_init_sim(sparse, glm))
    stats = cl.run(_sim_step, N_NEWTON + 2)
    idx, vals, wants = sparse
    dense = np.zeros(4500)
    for i, v in zip(idx, vals, strict=True):
        np.add.at(dense, i, v)
    for r in range(K):
        st = cl.load(r)
        assert st["sparse"].tobytes() == tcp[r][0].tobytes()
        assert st["w"].tobytes() == tcp[r][1].tobytes()
        np.testing.assert_allclose(st["sparse"], dense[idx[r] if wants[r] is None else wants[r]],
                                   rtol=1e-12, atol=1e-12)
    # the fit is the optimum of the whole problem: scikit-learn's, C = 1 / LAM
    from sklearn.linear_model import LogisticRegression

    ref = LogisticRegression(C=1 / LAM, fit_intercept=False, tol=1e-12, max_iter=1000).fit(X, y)
    np.testing.assert_allclose(cl.load(0)["w"], ref.coef_[0], rtol=1e-6, atol=1e-7)
    assert [s["degrees"] for s in stats[:-1]] == [DEGREES] * (N_NEWTON + 1)
    assert stats[-1]["kind"] is None
    assert stats[0]["layers"][0]["down_bytes"] > 0 and stats[0]["predicted_io_seconds"] > 0


@pytest.mark.parametrize("n,degrees,tail,distinct,scale", [
    (1, (), (), False, 1), (6, (3, 2), (), False, 1), (8, (2, 2, 2), (3,), False, 1),
    (12, (4, 3), (), False, 1), (6, (3, 2), (), True, 1), (8, (2, 2, 2), (3,), True, 1),
    (6, (3, 2), (), False, 1 << 40), (8, (2, 2, 2), (3,), True, 1 << 40)])
def test_equal_to_kylix_over_queues_bit_for_bit(tmp_path, n, degrees, tail, distinct, scale):
    # distinct: every node's indices sorted and distinct (their own unique values: no sort);
    # scale: indices spread over 2^52 (the unions too sparse for a bitmap: sorted instead)
    rng = np.random.default_rng(n)
    idx = [rng.integers(0, 3000, rng.integers(0, 500)) * scale for _ in range(n)]
    if distinct:
        idx = [np.unique(i) for i in idx]
    vals = [rng.standard_normal((i.size, *tail)).astype(np.float32) for i in idx]
    xs = [rng.standard_normal((5, 7)) for _ in range(n)]
    group = QueueGroup(n)

    def one(r):
        c = KylixCommunicator(group.transport(r), degrees)
        return c.sparse_allreduce(idx[r], vals[r]), c.allreduce(xs[r], "max")

    ref = run_in_threads(one, n, [group])
    cl = DiskNodeCluster(n, tmp_path, degrees=degrees, packet_bytes=2048, resident=3)
    cl.init(lambda r: {"i": idx[r], "v": vals[r], "x": xs[r]})

    def step(node, state, reduced):
        if node.round == 0:
            return node.sparse_allreduce(state["i"], state["v"])
        if node.round == 1:
            state["s"] = reduced
            return node.allreduce(state["x"], "max")
        state["m"] = reduced
        return None

    cl.run(step, 3)
    for r in range(n):
        st = cl.load(r)
        assert st["s"].dtype == np.float32 and st["s"].shape == ref[r][0].shape
        assert st["s"].tobytes() == ref[r][0].tobytes()
        assert st["m"].tobytes() == ref[r][1].tobytes()
    assert not (tmp_path / "spool").exists()  # every packet removed at the end of the run


@pytest.mark.parametrize("sizes,top", [
    ((), 10), ((0, 0), 10), ((5,), 10), ((40, 0, 300, 7), 500), ((200, 300), 1 << 20),
    ((64, 64, 64), 64 * 4 * 192 + 1024 * 64 - 1), ((64, 64, 64), 64 * 4 * 192 + 1024 * 64 + 64),
    ((50, 80), (1 << 62) + 5)])
def test_the_unions_are_kylix_unions(sizes, top):
    # the compiled bitmap union (dense ranges) and the sort (sparse ones, beyond 4 words an
    # entry plus 1024) give Kylix's union and maps: the received lists sorted and distinct
    from roofline.comm import _disk_nodes, _kylix

    rng = np.random.default_rng(len(sizes) + top % 997)
    lists = [np.unique(np.concatenate(([0, top - 1] if k >= 2 else [top - 1] * k,
                                       rng.integers(0, top, max(k - 2, 0)))))[:k]
             for k in sizes]
    lists = [np.unique(a) for a in lists]
    union, maps, lens = _disk_nodes._union_maps(lists)
    ref, ref_maps = _kylix._union(lists)
    assert union.dtype == maps.dtype == np.int64
    assert union.tolist() == ref.tolist()
    assert lens.tolist() == [a.size for a in lists]
    assert maps.tolist() == (np.concatenate(ref_maps).tolist() if lists else [])


def test_state_round_trip_is_exact(tmp_path):
    state = {"w": np.arange(7, dtype=np.float32).reshape(7, 1), "empty": np.zeros((0, 3)),
             "F": np.asfortranarray(np.arange(6.0).reshape(2, 3)), "cursor": 12345678901234,
             "lr": 0.1, "neg0": -0.0, "nan": float("nan"), "name": "shard-3", "none": None,
             "flag": True, "seed": np.int64(-5), "bits": np.array([True, False]),
             "big": np.float64(1e308)}
    path = tmp_path / "s.rfs"
    save_state(path, state)
    got = load_state(path)
    assert set(got) == set(state)
    for k, v in state.items():
        if isinstance(v, np.ndarray):
            assert got[k].dtype == v.dtype and got[k].shape == v.shape
            np.testing.assert_array_equal(got[k], v)
        elif isinstance(v, np.generic):
            assert type(got[k]) is type(v) and got[k] == v
        elif isinstance(v, float) and np.isnan(v):
            assert np.isnan(got[k])
        else:
            assert type(got[k]) is type(v) and got[k] == v
    assert np.copysign(1.0, got["neg0"]) == -1.0
    with pytest.raises(TypeError, match=r"state\['obj'\]"):
        save_state(path, {"obj": [1, 2]})
    with pytest.raises(TypeError, match="dtype object"):
        save_state(path, {"o": np.array([None])})


def test_a_corrupted_or_truncated_state_file_names_the_node_and_file(tmp_path):
    cl = DiskNodeCluster(3, tmp_path, packet_bytes=4096)
    cl.init(lambda r: {"w": np.full(100, float(r))})
    path = cl.store.path(1)
    data = bytearray(open(path, "rb").read())
    data[-50] ^= 0x01  # one bit flipped in the array
    open(path, "wb").write(bytes(data))
    with pytest.raises(StateError, match=r"node 1: state file .*1/state\.rfs fails its CRC-32") \
            as e:
        cl.run(lambda node, state, reduced: node.allreduce(state["w"]), 1)
    assert e.value.node == 1 and e.value.path == path
    open(path, "wb").write(bytes(data[:-10]))
    with pytest.raises(StateError, match="truncated"):
        cl.load(1)
    os.unlink(path)
    with pytest.raises(StateError, match="node 1: its state file .* is missing"):
        cl.load(1)


# a byte of the first message of node 2's packet (to node 0) flipped: in its payload's
# values, in the stored CRC-32 of its header, in its array's own header (the length), in
# the header's fields (the sender, the phase: checked apart from the CRC-32)
@pytest.mark.parametrize("at, match", [
    (200, "from node 2 to node 0 fails its CRC-32"),
    (25, "from node 2 to node 0 fails its CRC-32"),
    (41, "from node 2 to node 0 fails its CRC-32"),
    (4, "not the message from node 2 to node 0 of phase 1 "),
    (12, "not the message from node 2 to node 0 of phase 1 "),
])
@pytest.mark.parametrize("native", [True, False])
def test_a_corrupted_packet_is_a_message_error(tmp_path, monkeypatch, at, match, native):
    # native: the compiled receive (preads and ISA-L's CRC-32s from numba); else zlib's
    # CRC-32 from Python
    import zlib

    from roofline.comm import _disk_nodes

    if native:
        pytest.importorskip("isal")
        assert _disk_nodes._jit().receive is not None
    else:
        monkeypatch.setattr(_disk_nodes, "_CRC32", zlib.crc32)
    cl = DiskNodeCluster(4, tmp_path, degrees=(4,), packet_bytes=1 << 20)
    cl.init(lambda r: {"w": np.full(1000, float(r))})
    real = _disk_nodes._Spool.send

    def corrupting(self, src, *args):
        sent = real(self, src, *args)
        if src == 2 and self.phase == 1:
            path = os.path.join(self.dir, "2-0.pkt")
            data = bytearray(open(path, "rb").read())
            data[at] ^= 0x10
            open(path, "wb").write(bytes(data))
        return sent

    monkeypatch.setattr(_disk_nodes._Spool, "send", corrupting)
    with pytest.raises(MessageError, match=r"2-0\.pkt.*" + match):
        cl.run(lambda node, state, reduced: node.allreduce(state["w"]), 1)


def test_the_compiled_receive_reads_what_python_reads(tmp_path, monkeypatch):
    # the receive's preads and payload CRC-32s in compiled loops (libc's pread and ISA-L's
    # CRC through ctypes) against the Python loop with zlib's CRC: the same arrays; a
    # truncated packet and a failed read are the same errors
    import zlib

    from roofline.comm import _disk_nodes

    pytest.importorskip("isal")
    jit = _disk_nodes._jit()
    assert jit.receive is not None and jit.preads is not None
    rng = np.random.default_rng(3)
    io = _disk_nodes._IO()
    spool = _disk_nodes._Spool(str(tmp_path / "sp"), 7, 3000, io)
    sent = {}
    for src in range(5):
        arrays = [rng.standard_normal(rng.integers(0, 300)) for _ in range(5)]
        spool.send(src, list(range(5)), arrays)
        sent[src] = arrays
    zlib_reads = []
    for crc in (None, zlib.crc32):
        monkeypatch.setattr(_disk_nodes, "_CRC32", crc)
        got = [spool.recv_arrays([4, 0, 3, 1, 2], dst) for dst in range(5)]
        for dst in range(5):
            for src, a in zip([4, 0, 3, 1, 2], got[dst], strict=True):
                assert a.dtype == np.float64 and a.tobytes() == sent[src][dst].tobytes()
        zlib_reads.append(io.bytes_read)
    assert zlib_reads[1] == 2 * zlib_reads[0] > 0  # every message's bytes counted both ways
    path, off, n = spool.index[(2, 3)]
    name = os.path.basename(path).replace(".", r"\.")
    spool.close()
    with open(path, "r+b") as f:
        f.truncate(off + n - 5)  # the message from 2 to 3 loses its last 5 bytes
    for crc in (None, zlib.crc32):
        monkeypatch.setattr(_disk_nodes, "_CRC32", crc)
        with pytest.raises(MessageError, match=name + r": the message from node 2 to node 3 "
                                               r"is truncated \(\d+ of \d+ bytes\)"):
            spool.recv_arrays([0, 1, 2], 3)
        spool.close()
    # a read that fails (a descriptor closed under the spool): its OSError, from Python
    real = _disk_nodes._Spool._open_all

    def closed(self, where, srcs, dst):
        entries = real(self, where, srcs, dst)
        os.close(entries[-1][0])
        return entries

    monkeypatch.setattr(_disk_nodes._Spool, "_open_all", closed)
    for crc in (None, zlib.crc32):
        monkeypatch.setattr(_disk_nodes, "_CRC32", crc)
        with pytest.raises(OSError, match="Bad file descriptor"):
            spool.recv_arrays([0, 1], 4)
        spool._fds.clear()  # (its descriptors closed above)


def test_the_compiled_header_check_finds_the_first_bad_message(tmp_path):
    # a receive's headers and CRC-32s checked by one compiled loop: all good, or the first
    # message whose header is not the expected one (1) or whose CRC-32 fails (2)
    import zlib

    from roofline.comm import _disk_nodes

    io = _disk_nodes._IO()
    spool = _disk_nodes._Spool(str(tmp_path / "sp"), 5, 1 << 20, io)
    arrays = [np.arange(k, dtype=np.float64) * (k + 1) for k in (3, 0, 9, 4)]
    spool.send(2, [0, 1, 3, 4], arrays)
    data = np.frombuffer(open(tmp_path / "sp" / "2-0.pkt", "rb").read(), np.uint8)
    ats = np.array([spool.index[(2, d)][1] for d in (0, 1, 3, 4)], np.int64)
    lens = np.array([spool.index[(2, d)][2] for d in (0, 1, 3, 4)], np.int64)
    jit = _disk_nodes._jit()
    table, check = jit.table, jit.check_heads
    assert _disk_nodes._jit().check_heads is check  # compiled once
    f8 = int.from_bytes(b"<f8 ", "little")

    def run(buf, got=lens, srcs=(2, 2, 2, 2), dst=3, phase=5, elems=None):
        pcrc = np.array([zlib.crc32(buf[a + 32:a + n].tobytes())
                         for a, n in zip(ats, got, strict=True)], np.int64)
        elems = np.full(4, -7, np.int64) if elems is None else elems
        return tuple(check(table, buf, ats, np.asarray(got, np.int64), lens,
                           np.array(srcs, np.int64), dst, phase, pcrc, elems))

    # each message checked as its own receiver's: all good, its array header's dtype code
    # and length read
    for i, d in enumerate((0, 1, 3, 4)):
        one = slice(i, i + 1)
        pcrc = np.array([zlib.crc32(data[ats[i] + 32:ats[i] + lens[i]].tobytes())], np.int64)
        elems = np.full(1, -7, np.int64)
        assert tuple(check(table, data, ats[one], lens[one], lens[one], np.array([2]), d, 5,
                           pcrc, elems)) == (-1, 0, f8)
        assert elems[0] == arrays[i].size
    assert run(data, dst=0) == (1, 1, -1)  # message 1 is not to node 0
    assert run(data, dst=0, phase=6) == (0, 1, -1)
    assert run(data, srcs=(3, 2, 2, 2), dst=0) == (0, 1, -1)
    assert run(data, got=lens - np.array([0, 0, 1, 0]), dst=0) == (1, 1, -1)
    for at, kind in ((5, 1), (13, 1), (17, 1), (25, 2), (1, 1)):
        bad = data.copy()
        bad[ats[0] + at] ^= 0x04
        assert run(bad, dst=0) == (0, kind, -1), at
    bad = data.copy()
    bad[ats[0] + 40] ^= 0x04  # the payload: its CRC-32 (computed from the bad bytes) fails
    assert run(bad, dst=0) == (0, 2, -1)
    # messages of different dtypes, or not 1-D: no common code (the general decoding)
    spool2 = _disk_nodes._Spool(str(tmp_path / "sp2"), 5, 1 << 20, io)
    spool2.send(2, [0, 1], [np.arange(3.0), np.arange(3, dtype=np.int32)])
    spool2.send(3, [0, 1], [np.arange(4.0), np.ones((2, 2))])
    assert [a.dtype for a in spool2.recv_arrays([2], 1)] == [np.int32]
    got = spool2.recv_arrays([2, 3], 0)
    assert [a.tolist() for a in got] == [[0.0, 1.0, 2.0], [0.0, 1.0, 2.0, 3.0]]
    got = spool2.recv_arrays([2, 3], 1)
    assert got[0].dtype == np.int32 and got[0].tolist() == [0, 1, 2]
    assert got[1].shape == (2, 2) and got[1].tolist() == [[1.0, 1.0], [1.0, 1.0]]
    spool2.remove()
    spool.remove()


def test_packets_hold_the_messages_in_their_wire_format(tmp_path, monkeypatch):
    # every message of a packet, as written by the batched send: the 32-byte header (magic,
    # sender, receiver, phase, payload length, the CRC-32 of the first 24 bytes continued
    # from the payload's) and the payload of _kylix._encode, the same array once per member
    import struct
    import zlib

    from roofline.comm import _disk_nodes
    from roofline.comm._kylix import _encode

    cl = DiskNodeCluster(4, tmp_path, degrees=(4,), packet_bytes=1 << 20)
    spool = _disk_nodes._Spool(str(tmp_path / "sp"), 7, 1 << 20, cl.io)
    same = np.arange(5, dtype=np.int32)
    arrays = [np.arange(3.0), same, np.zeros((2, 3), np.float32), same,
              _disk_nodes._Gathered([np.ones(2), np.full(3, 2.0)], np.float64, (5,)),
              np.arange(10.0)[::2]]
    dsts = [0, 1, 2, 3, 4, 5]
    sent = spool.send(1, dsts, arrays)
    data = open(tmp_path / "sp" / "1-0.pkt", "rb").read()
    off, total = 0, 0
    for dst, a in zip(dsts, arrays, strict=True):
        whole = np.concatenate(a.parts) if isinstance(a, _disk_nodes._Gathered) else a
        payload = b"".join(bytes(memoryview(b).cast("B")) for b in _encode(
            np.ascontiguousarray(whole)))
        pre = struct.pack("<4sIIIQ", b"RFLM", 1, dst, 7, len(payload))
        crc = zlib.crc32(pre, zlib.crc32(payload))
        assert data[off:off + 32] == pre + struct.pack("<I4x", crc)
        assert data[off + 32:off + 32 + len(payload)] == payload
        assert spool.index[(1, dst)] == (str(tmp_path / "sp" / "1-0.pkt"), off,
                                         32 + len(payload))
        total += len(payload) if dst != 1 else 0
        off += 32 + len(payload)
    assert off == len(data) and sent == total
    got = spool.recv_arrays([1], 2)
    np.testing.assert_array_equal(got[0], np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError):
        spool.send(1, [0, 1], arrays[:3])
    spool.remove()


def test_at_most_resident_nodes_are_in_memory(tmp_path):
    inside, seen = [0], []
    import threading
    import time

    lock = threading.Lock()

    def step(node, state, reduced):
        with lock:
            inside[0] += 1
            seen.append(inside[0])
        time.sleep(0.002)  # let the other turns start if they could
        with lock:
            inside[0] -= 1
        if node.round == 1:
            state["sum"] = reduced
            return None
        return node.allreduce(state["w"])

    for resident in (1, 3):
        seen.clear()
        cl = DiskNodeCluster(12, tmp_path / str(resident), resident=resident, degrees=(4, 3),
                             packet_bytes=4096)
        cl.init(lambda r: {"w": np.full(1000, float(r))})
        stats = cl.run(step, 2)
        assert max(seen) <= resident and all(s["max_resident"] <= resident for s in stats)
        assert max(s["max_resident"] for s in stats) == resident
        np.testing.assert_array_equal(cl.load(5)["sum"], np.full(1000, 66.0))


def test_the_memory_cap_bounds_the_bytes_held(tmp_path):
    n, size = 16, 20_000  # 160 kB of state per node, 2.6 MB in all
    cl = DiskNodeCluster(n, tmp_path, resident=4, memory_cap=1_000_000, degrees=(4, 4),
                         packet_bytes=8192)
    cl.init(lambda r: {"w": np.full(size, float(r))})

    def step(node, state, reduced):
        if reduced is not None:
            state["w"] = reduced / node.size
        return node.allreduce(state["w"])

    stats = cl.run(step, 2)
    total = n * size * 8
    for s in stats:
        assert 0 < s["peak_bytes"] <= 1_000_000 < total
    np.testing.assert_array_equal(cl.load(3)["w"], np.full(size, 7.5))
    small = DiskNodeCluster(n, tmp_path / "small", memory_cap=100_000, degrees=(4, 4),
                            packet_bytes=8192)
    small.init(lambda r: {"w": np.full(size, float(r))})
    with pytest.raises(CommError, match=r"node 0 held \d+ bytes in its turn, above memory_cap "
                                        "100000"):
        small.run(step, 1)


def test_degrees_and_packets_from_a_given_disk_roofline(tmp_path):
    corner = DISK.corner()
    assert corner == pytest.approx(60e-6 / (1 / 2e9 + 1 / 4e9))
    cl = DiskNodeCluster(64, tmp_path, disk=DISK)
    assert cl.packet_bytes == int(np.ceil(corner))
    # 64 nodes of 4 10^5 entries of 12 bytes: 4.8 MB per node, at most 60 messages of 80 kB
    deg = cl.choose_degrees(400_000, 12)
    assert deg == kylix_degrees(64, nnz=400_000, itemsize=12, min_packet=cl.packet_bytes)
    assert deg == (32, 2) and 400_000 * 12 / deg[0] >= corner
    # a synced disk has a far larger corner: fewer, larger messages (a flatter first layer)
    synced = DiskNodeCluster(64, tmp_path / "s", disk=DISK, fsync=True)
    assert synced.packet_bytes == int(np.ceil(DISK.corner(True))) > cl.packet_bytes
    assert synced.choose_degrees(400_000, 12) == (2, 2, 2, 2, 2, 2)
    # the prediction of a round's I/O: latency per file, bytes at the streaming rates
    assert DISK.io_time(10, 2e9, 100, 4e9) == pytest.approx(10 * 50e-6 + 1 + 100 * 10e-6 + 1)
    # packets: with a packet size of 80 kB, a node's 4 messages of 8 kB share one file
    cl = DiskNodeCluster(4, tmp_path / "p", disk=DISK, degrees=(4,))
    cl.init(lambda r: {"w": np.ones(4096)})
    st = cl.run(lambda node, state, reduced: node.allreduce(state["w"]), 1)[0]
    # 4 state saves + 4 contributions + 4 packets down + 4 up + 4 results
    assert st["files_written"] == 20


def test_nodes_that_disagree_are_a_mismatch(tmp_path):
    cl = DiskNodeCluster(3, tmp_path, packet_bytes=4096)
    cl.init(lambda r: {"w": np.ones(3 + (r == 2))})
    with pytest.raises(MismatchError, match="nodes 0 and 2 disagree"):
        cl.run(lambda node, state, reduced: node.allreduce(state["w"]), 1)


def test_bad_input_is_refused(tmp_path):
    with pytest.raises(ValueError, match="n_nodes must be >= 1"):
        DiskNodeCluster(0, tmp_path)
    with pytest.raises(TypeError, match="n_nodes must be an int"):
        DiskNodeCluster(2.5, tmp_path)
    with pytest.raises(ValueError, match="resident must be an int >= 1"):
        DiskNodeCluster(2, tmp_path, resident=0)
    with pytest.raises(ValueError, match="memory_cap must be a positive"):
        DiskNodeCluster(2, tmp_path, memory_cap=0)
    with pytest.raises(ValueError, match="degrees"):
        DiskNodeCluster(6, tmp_path, degrees=(4, 2))
    a_file = tmp_path / "file"
    a_file.write_text("x")
    for bad in (a_file, a_file / "sub"):  # a file, and a directory that cannot be made
        with pytest.raises(ValueError, match="root must be a writable directory"):
            DiskNodeCluster(2, bad)
    locked = tmp_path / "ro"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if not os.access(locked, os.W_OK):  # as root, permissions are not enforced
            with pytest.raises(ValueError, match="root must be a writable directory"):
                DiskNodeCluster(2, locked)
    finally:
        locked.chmod(0o700)
    cl = DiskNodeCluster(2, tmp_path / "ok", packet_bytes=4096)
    cl.init(lambda r: {"w": np.ones(2)})
    with pytest.raises(ValueError, match="n_rounds must be an int >= 0"):
        cl.run(lambda *a: None, -1)
    with pytest.raises(TypeError, match="step must return node.allreduce"):
        cl.run(lambda node, state, reduced: state["w"], 1)
    with pytest.raises(ValueError, match="rank must be in"):
        cl.load(2)
    with pytest.raises(ValueError, match="op must be one of"):
        cl.run(lambda node, state, reduced: node.allreduce(state["w"], "prod"), 1)


def test_the_store_names_the_node(tmp_path):
    store = NodeStore(tmp_path, 2)
    store.save(1, {"a": np.ones(3)}, "plan")
    assert store.load(1, "plan")["a"].tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(StateError, match="node 0: its plan file .* is missing"):
        store.load(0, "plan")


@pytest.mark.slow
def test_1024_nodes_larger_than_the_memory_cap(tmp_path):
    n, d = 1024, 4000  # 32 kB of state per node: 33 MB in all, against a cap of 8 MB
    cap = 8 << 20
    cl = DiskNodeCluster(n, tmp_path, memory_cap=cap, disk=DISK, packet_bytes=16384)

    def init(r):
        rng = np.random.default_rng(r)
        return {"w": rng.standard_normal(d),
                "idx": np.unique(((rng.random(600) ** 2) * 50_000).astype(np.int64))}

    cl.init(init)

    def step(node, state, reduced):
        if node.round == 1:
            state["s"] = reduced
            return None
        return node.sparse_allreduce(state["idx"], np.ones(state["idx"].size))

    stats = cl.run(step, 2)
    assert len(stats[0]["degrees"]) > 1 and np.prod(stats[0]["degrees"]) == n
    assert stats[0]["peak_bytes"] <= cap < n * d * 8
    counts = np.zeros(50_000)
    for r in range(n):
        np.add.at(counts, init(r)["idx"], 1.0)
    for r in (0, 511, 1023):
        np.testing.assert_array_equal(cl.load(r)["s"], counts[init(r)["idx"]])
    down = [lay["down_bytes"] for lay in stats[0]["layers"]]
    assert down[-1] < down[0]  # nested: colliding indices travel once per layer


def _open_fds():
    return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 0


def test_a_packet_is_opened_once_per_phase_and_the_model_counts_the_opens(tmp_path):
    # 4 nodes, one layer, 4 packets per phase (a node's 4 messages of 8 kB share one file)
    disk = DiskRoofline(path="/given", write_latency=50e-6, read_latency=10e-6,
                        write_bandwidth=2e9, read_bandwidth=4e9, synced_write_latency=2e-3,
                        synced_write_bandwidth=1e9, checksum_bandwidth=1e9)
    cl = DiskNodeCluster(4, tmp_path, disk=disk, degrees=(4,))
    cl.init(lambda r: {"w": np.full(4096, float(r))})
    before = _open_fds()
    st = cl.run(lambda node, state, reduced: node.allreduce(state["w"]), 1)[0]
    assert _open_fds() == before  # every packet closed with its phase
    np.testing.assert_array_equal(cl.result(2), np.full(4096, 6.0))
    # read: 4 states, 4 contributions, and per exchange 4 packets opened once, 16 messages
    assert st["slices_read"] == 4 + 4 + 16 + 16
    assert st["files_read"] == 4 + 4 + 4 + 4
    assert st["messages_read"] == 16 + 16 and st["packets_opened"] == 4 + 4
    # the prediction: those opens at the read latency, with the CRC-32 in use at its rate, and
    # each message read from an open packet beyond the first of each packet (whose read the
    # opening includes) one pread at the slice latency
    from roofline.comm import _disk_nodes

    used = _disk_nodes._checksum_roofline(disk)
    crc32 = _disk_nodes._crc32_fn()
    assert (used is disk) == (crc32 is __import__("zlib").crc32)
    pread = cl.slice_latency("wall")
    assert 0 < pread < 0.01
    assert st["predicted_io_seconds"] == pytest.approx(used.io_time(
        20, st["bytes_written"], 16, st["bytes_read"], checksummed=True) + 24 * pread)
    with pytest.raises(ValueError, match="clock"):
        cl.slice_latency("gpu")
    assert cl.predicted_seconds(st) == st["predicted_io_seconds"]
    assert cl.prediction_roofline().checksum_bandwidth == used.checksum_bandwidth
    assert cl.crc32 == crc32.__module__ in ("zlib", "isal.isal_zlib")


def test_packets_beyond_the_open_limit_are_closed_and_reopened(tmp_path, monkeypatch):
    from roofline.comm import _disk_nodes

    monkeypatch.setattr(_disk_nodes, "_MAX_OPEN", 2)
    idx, vals, wants = _sparse_data(8, seed=3)
    cl = DiskNodeCluster(8, tmp_path, degrees=(4, 2), packet_bytes=1)  # one packet a message

    def step(node, state, reduced):
        if reduced is not None:
            state["sum"] = reduced
            return None
        return node.sparse_allreduce(state["idx"], state["v"])

    cl.init(lambda r: {"idx": idx[r], "v": vals[r]})
    before = _open_fds()
    st = cl.run(step, 2)[0]
    assert _open_fds() == before
    assert st["files_read"] > 8 * 2  # packets reopened
    dense = np.zeros(4000)
    for i, v in zip(idx, vals, strict=True):
        np.add.at(dense, i, v)
    for r in range(8):
        np.testing.assert_allclose(cl.load(r)["sum"], dense[idx[r]], rtol=1e-12)


def test_a_missing_packet_is_a_message_error_and_closes_the_open_packets(tmp_path, monkeypatch):
    from roofline.comm import _disk_nodes

    cl = DiskNodeCluster(4, tmp_path, degrees=(4,), packet_bytes=1)
    cl.init(lambda r: {"w": np.full(1000, float(r))})
    real = _disk_nodes._Spool.send

    def losing(self, src, *args):
        sent = real(self, src, *args)
        if src == 3 and self.phase == 1:
            os.unlink(os.path.join(self.dir, "3-0.pkt"))  # its message to node 0
        return sent

    monkeypatch.setattr(_disk_nodes._Spool, "send", losing)
    before = _open_fds()
    with pytest.raises(MessageError, match=r"3-0\.pkt: the packet holding the message from "
                                           "node 3 to node 0 cannot be read"):
        cl.run(lambda node, state, reduced: node.allreduce(state["w"]), 1)
    assert _open_fds() == before


def test_the_fast_crc_writes_the_files_zlib_reads(tmp_path, monkeypatch):
    import zlib

    from roofline.comm import _disk_nodes

    pytest.importorskip("isal")
    assert _disk_nodes._crc32_fn() is not zlib.crc32  # ISA-L's, when installed
    state = {"w": np.random.default_rng(0).standard_normal(10_000), "n": 3}
    save_state(tmp_path / "fast.rfs", state)
    monkeypatch.setattr(_disk_nodes, "_CRC32", zlib.crc32)
    got = load_state(tmp_path / "fast.rfs")
    np.testing.assert_array_equal(got["w"], state["w"])
    save_state(tmp_path / "zlib.rfs", state)
    assert open(tmp_path / "zlib.rfs", "rb").read() == open(tmp_path / "fast.rfs", "rb").read()
    # the prediction's CRC rate is that of the CRC in use: zlib's is the disk's own figure
    disk = DiskRoofline(path="/given", write_latency=50e-6, read_latency=10e-6,
                        write_bandwidth=2e9, read_bandwidth=4e9, synced_write_latency=2e-3,
                        synced_write_bandwidth=1e9, checksum_bandwidth=1e9)
    assert _disk_nodes._checksum_roofline(disk) is disk
    monkeypatch.setattr(_disk_nodes, "_CRC32", None)
    fast = _disk_nodes._checksum_roofline(disk)
    assert fast.checksum_bandwidth == _disk_nodes._checksum_bandwidth("wall") > 0


def test_packet_files_are_reused_and_a_stale_packet_is_never_read_as_new(tmp_path,
                                                                         monkeypatch):
    # 4 nodes, one layer, a packet per message: 3 phases a round (the segments down, the
    # reduced segments back, the results saved: 16, 16 and no packets) alternating between
    # two spool directories, each phase overwriting in place the packets of the phase before
    # the last (the same names)
    disk = DiskRoofline(path="/given", write_latency=50e-6, read_latency=10e-6,
                        write_bandwidth=2e9, read_bandwidth=4e9, synced_write_latency=2e-3,
                        synced_write_bandwidth=1e9, checksum_bandwidth=1e9)
    cl = DiskNodeCluster(4, tmp_path, degrees=(4,), packet_bytes=1, disk=disk)
    cl.init(lambda r: {"w": np.arange(64.0) * (r + 1)})
    io = cl.io
    written, real = [], io.overwrite

    def spy(path, bufs, sizes, raw=True):
        if path.endswith(".pkt"):  # the packets (the nodes' transient files are tested below)
            written.append((path, os.path.exists(path)))
        return real(path, bufs, sizes, raw=raw)

    monkeypatch.setattr(io, "overwrite", spy)
    before = _open_fds()
    st = cl.run(lambda node, state, reduced: node.allreduce(state["w"]), 3)
    np.testing.assert_array_equal(cl.result(1), np.arange(64.0) * 10)
    # the model charges an overwritten file the overwrite's latency, a new file the disk's:
    # from round 1 on, the 32 packets and the nodes' 4 contributions and 4 results
    assert [s["files_overwritten"] for s in st] == [0, 40, 40]
    lat = cl.overwrite_latency("wall")
    assert 0 < lat < 0.1
    used = cl.prediction_roofline()
    assert st[1]["predicted_io_seconds"] == pytest.approx(used.io_time(
        st[1]["files_written"] - 40, st[1]["bytes_written"], st[1]["files_read"],
        st[1]["bytes_read"], checksummed=True) + 40 * lat)
    with pytest.raises(ValueError, match="clock"):
        cl.overwrite_latency("gpu")
    assert _open_fds() == before
    assert not (tmp_path / "spool").exists()  # removed at the end of the run
    reused = [p for p, existed in written if existed]
    # phases 1 and 2 create their packets, every later one overwrites its slot's files
    assert len(written) == 3 * 32 and len(reused) == 2 * 32
    # a packet write that does not happen leaves the file of two phases earlier: in the next
    # run (phases 10 to 15), phase 13's segments would overwrite phase 11's reduced segments
    # (the same names, offsets and sizes); the message found carries phase 11 and is refused,
    # naming the packet, the sender and the receiver
    calls = {"n": 0}

    def lost(path, bufs, sizes, raw=True):
        calls["n"] += path.endswith(".pkt")
        if calls["n"] == 16 + 16 + 4 + 2 and path.endswith(".pkt"):  # phase 13: node 1 to 1
            assert path.endswith(os.path.join("s1", "1-1.pkt"))
            return sum(memoryview(b).nbytes for b in bufs)  # "written", not written
        return real(path, bufs, sizes, raw=raw)

    monkeypatch.setattr(io, "overwrite", lost)
    with pytest.raises(MessageError, match=r"1-1\.pkt.*from node 1 to node 1 of phase 13 "
                                           r"\(a stale"):
        cl.run(lambda node, state, reduced: node.allreduce(state["w"]), 2)
    assert _open_fds() == before


def test_the_step_and_the_arithmetic_are_counted_for_the_prediction(tmp_path):
    disk = DiskRoofline(path="/given", write_latency=50e-6, read_latency=10e-6,
                        write_bandwidth=2e9, read_bandwidth=4e9, synced_write_latency=2e-3,
                        synced_write_bandwidth=1e9, checksum_bandwidth=1e9)
    n = 4096
    cl = DiskNodeCluster(4, tmp_path, disk=disk, degrees=(4,))
    cl.init(lambda r: {"w": np.full(n, float(r))})

    def step(node, state, reduced):
        t = __import__("time").thread_time()
        while __import__("time").thread_time() - t < 0.02:  # 20 ms of the user's CPU
            pass
        return node.allreduce(state["w"])

    st = cl.run(step, 1)[0]
    assert 4 * 0.02 <= st["step_cpu_seconds"] <= st["cpu_seconds"]
    assert st["step_seconds"] <= st["seconds"]
    # each node sums the 4 segments of n / 4 float64 it receives: 5 segments of traffic
    assert st["compute_bytes"] == 4 * 5 * (n // 4) * 8
    assert cl.predicted_seconds(st, memory_bandwidth=1e9) == pytest.approx(
        st["predicted_io_seconds"] + st["compute_bytes"] / 1e9)
    with pytest.raises(ValueError, match="memory_bandwidth"):
        cl.predicted_seconds(st, memory_bandwidth=0)
    # the sparse all-reduce counts its unions, scatter-adds and gathers
    sc = DiskNodeCluster(4, tmp_path / "s", disk=disk, degrees=(2, 2))
    sc.init(lambda r: {"i": np.arange(r, 100 + r), "v": np.ones(100)})
    ss = sc.run(lambda node, state, reduced: node.sparse_allreduce(state["i"], state["v"]),
                2)
    np.testing.assert_array_equal(sc.result(0)[:3], [1.0, 2.0, 3.0])
    assert ss[1]["compute_bytes"] > 4 * 100 * 16  # at least every node's indices and values


def _dense_step(node, state, reduced):
    if reduced is not None:
        state["got"] = reduced
    state["w"] = state["w"] + 1.0  # every round's contribution differs from the last
    return node.allreduce(state["w"])


def _sparse_step(node, state, reduced):
    if reduced is not None:
        state["got"] = reduced
    state["v"] = state["v"] + 1.0
    return node.sparse_allreduce(state["i"], state["v"], state["want"])


def _sparse_init(r):
    rng = np.random.default_rng(r)
    return {"i": (rng.zipf(1.5, 300) - 1) % 500, "v": rng.standard_normal(300),
            "want": rng.integers(0, 520, 80)}


@pytest.mark.parametrize("kind, name", [("dense", "contrib"), ("dense", "result"),
                                        ("sparse", "cidx"), ("sparse", "cacc"),
                                        ("sparse", "map0"), ("sparse", "final"),
                                        ("sparse", "result")])
def test_a_stale_transient_node_file_is_an_error_naming_it(tmp_path, monkeypatch, kind, name):
    # the nodes' transient files (contribution, the sparse plan's files, result) are
    # overwritten in place, round after round; node 1's write of one of them in round 1 is
    # lost, so the file left there is round 0's: reading it is an error naming the node and
    # the file, never round 0's data read as round 1's
    dense = kind == "dense"
    cl = DiskNodeCluster(4, tmp_path, degrees=(2, 2), packet_bytes=1)
    cl.init((lambda r: {"w": np.arange(64.0) * (r + 1)}) if dense else _sparse_init)
    step = _dense_step if dense else _sparse_step
    target = cl.store.path(1, name)
    io, real, seen = cl.io, cl.io.overwrite, []

    def spy(path, bufs, sizes, raw=True):
        seen.append(path)
        if path == target and seen.count(path) == 2:  # round 1's write: lost
            return 0
        return real(path, bufs, sizes, raw=raw)

    monkeypatch.setattr(io, "overwrite", spy)
    # (a lost round-1 result is read in round 2's compute)
    with pytest.raises(StateError, match=rf"node 1: its {name} file .*1/{name}\.rfs is "
                                         r"stale: it carries tag '[0-9a-f]+:0', this round's "
                                         r"is '[0-9a-f]+:1'") as e:
        cl.run(step, 3)
    assert e.value.node == 1 and e.value.path == target
    assert seen.count(target) == 2  # the file was written in place in round 0, then lost


def test_transient_files_are_overwritten_in_place_and_the_state_renamed(tmp_path, monkeypatch):
    # a sparse round writes per node its state (renamed into place: atomic) and its
    # contribution's indices and values, one map per layer, its final positions and its
    # result, each overwritten in place from round 1 on; no file is removed
    disk = DiskRoofline(path="/given", write_latency=50e-6, read_latency=10e-6,
                        write_bandwidth=2e9, read_bandwidth=4e9, synced_write_latency=2e-3,
                        synced_write_bandwidth=1e9, checksum_bandwidth=1e9)
    cl = DiskNodeCluster(4, tmp_path, degrees=(2, 2), packet_bytes=1, disk=disk)
    cl.init(_sparse_init)
    renamed, unlinked, real_replace, real_unlink = [], [], os.replace, os.unlink
    monkeypatch.setattr(os, "replace", lambda a, b, **k: (renamed.append(b),
                                                          real_replace(a, b, **k)))
    monkeypatch.setattr(os, "unlink", lambda p, **k: (unlinked.append(p), real_unlink(p, **k)))
    st = cl.run(_sparse_step, 3)
    transient = ["cidx", "cacc", "map0", "map1", "final", "result"]
    assert sorted(renamed) == sorted([cl.store.path(r, "state") for r in range(4)] * 3)
    assert not [p for p in unlinked if "nodes" in p]
    # every file of rounds 1 and 2 but the states (packets and transient files) is
    # overwritten in place; round 0 created the transient files
    for s in st[1:]:
        assert s["files_overwritten"] == s["files_written"] - 4
    assert st[0]["files_written"] == st[1]["files_written"] > st[0]["files_overwritten"]
    assert all(os.path.isfile(cl.store.path(r, n)) for r in range(4) for n in transient)
    # the results are Kylix's, whichever round they come from; a new cluster object on the
    # same root (another process) finds each node's result through its state file
    other = DiskNodeCluster(4, tmp_path, packet_bytes=1)
    for r in range(4):
        assert cl.result(r).shape == _sparse_init(r)["want"].shape
        np.testing.assert_array_equal(other.result(r), cl.result(r))
    # the prediction charges those overwrites the overwrite's latency
    assert st[1]["predicted_io_seconds"] == pytest.approx(cl.prediction_roofline().io_time(
        st[1]["files_written"] - st[1]["files_overwritten"], st[1]["bytes_written"],
        st[1]["files_read"], st[1]["bytes_read"], checksummed=True)
        + st[1]["files_overwritten"] * cl.overwrite_latency("wall"))
    # a round without a collective: the next has no result, and neither has result()
    other.run(lambda node, state, reduced: None, 1)
    assert other.result(0) is None
    other.run(lambda node, state, reduced: state.__setitem__("r", reduced is None), 1)
    assert other.load(2)["r"] is True
