"""The disk-simulated cluster: the same sums as the other backends bit for bit, checksummed
message files, and a full disk or a file-size limit as an error naming the path."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from roofline.comm import (
    CommError,
    DiskCluster,
    DiskTransport,
    KylixCommunicator,
    QueueGroup,
    run,
    run_in_threads,
)


def _vectors(K, seed=0, n_features=3000):
    rng = np.random.default_rng(seed)
    idx = [np.unique((rng.zipf(1.2, size=800) - 1) % n_features) for _ in range(K)]
    return idx, [rng.normal(size=i.size).astype(np.float32) for i in idx]


@pytest.mark.parametrize("K,degrees", [(4, (2, 2)), (8, (4, 2)), (6, (3, 2))])
def test_equals_the_threads_backend_bit_for_bit(tmp_path, K, degrees):
    idx, vals = _vectors(K)
    disk = DiskCluster(K, tmp_path, degrees)
    got = disk.sparse_allreduce(idx, vals)
    dense = disk.allreduce([np.full(11, r + 0.1, np.float32) for r in range(K)])
    group = QueueGroup(K)

    def one(r):
        c = KylixCommunicator(group.transport(r), degrees)
        return c.sparse_allreduce(idx[r], vals[r]), c.allreduce(np.full(11, r + 0.1, np.float32))

    ref = run_in_threads(one, K, [group])
    ref_sum = np.zeros(3000)
    for i, v in zip(idx, vals, strict=True):
        ref_sum[i] += v
    for r in range(K):
        np.testing.assert_array_equal(got[r], ref[r][0])
        np.testing.assert_array_equal(dense[r], ref[r][1])
        np.testing.assert_allclose(got[r], ref_sum[idx[r]], rtol=1e-5, atol=1e-5)
    assert not [f for _, _, fs in os.walk(tmp_path) for f in fs]  # every message consumed
    assert disk.stats["bytes_written"] > 0 and len(disk.stats["layers"]) == len(degrees)


def test_simulates_64_nodes_with_the_kylix_shape(tmp_path):
    K = 64
    rng = np.random.default_rng(1)
    idx = [np.unique(((rng.random(3000) ** 3) * (1 << 16)).astype(np.int64)) for _ in range(K)]
    disk = DiskCluster(K, tmp_path, (4, 4, 4))
    out = disk.sparse_allreduce(idx, [np.ones(i.size) for i in idx])
    counts = np.zeros(1 << 16)
    for i in idx:
        counts[i] += 1
    for r in (0, 17, 63):
        np.testing.assert_array_equal(out[r], counts[idx[r]])
    down = [lay["bytes_sent"] for lay in disk.stats["layers"]]
    assert down[2] < down[0]  # colliding features: the lower layers carry less


def test_run_with_the_disk_backend():
    out = run(_rank_sum, 3, backend="disk")
    assert [o.tolist() for o in out] == [[3.0, 6.0]] * 3


def _rank_sum(comm):
    return comm.allreduce(np.array([1.0, 2.0]) * comm.size / comm.size)


def test_a_corrupt_or_truncated_message_file_is_refused(tmp_path):
    t0 = DiskTransport(tmp_path, 0, 2)
    t1 = DiskTransport(tmp_path, 1, 2, timeout=2)
    t0.send(1, 5, [b"hello world"])
    path = os.path.join(tmp_path, "t5", "0-1", "0.msg")
    data = bytearray(open(path, "rb").read())
    data[-1] ^= 0xFF
    open(path, "wb").write(data)
    with pytest.raises(Exception, match="bad CRC-32"):
        t1.recv(0, 5)
    t0.send(1, 6, [b"x" * 100])
    path = os.path.join(tmp_path, "t6", "0-1", "0.msg")
    open(path, "r+b").truncate(50)
    with pytest.raises(Exception, match="truncated"):
        t1.recv(0, 6)


def test_a_file_size_limit_is_an_error_naming_the_path(tmp_path):
    """A real EFBIG from the kernel (RLIMIT_FSIZE), not a mock: no truncated message is read."""
    code = textwrap.dedent(f"""
        import resource, signal, numpy as np
        from roofline.comm import DiskCluster, CommError
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))
        try:
            DiskCluster(2, {str(tmp_path)!r}, timeout=5).allreduce(
                [np.ones(100000), np.ones(100000)])
        except CommError as e:
            print("ERROR", e)
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "ERROR" in p.stdout, p.stdout + p.stderr
    assert str(tmp_path) in p.stdout and "too large" in p.stdout
    leftovers = [f for _, _, fs in os.walk(tmp_path) for f in fs if f.endswith(".tmp")]
    assert not leftovers


def test_a_full_disk_is_an_error_naming_the_path(tmp_path):
    """A real ENOSPC from a tiny tmpfs (needs root and mount; skipped otherwise)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)],
                       capture_output=True)
    if r.returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        with pytest.raises(CommError, match="disk is full") as e:
            DiskCluster(2, mnt, timeout=5).allreduce([np.ones(50000), np.ones(50000)])
        assert str(mnt) in str(e.value)
    finally:
        subprocess.run(["umount", str(mnt)])


def test_two_jobs_on_one_spool_never_read_each_others_messages(tmp_path):
    """Issue 32, item 5: job-scoped names (the token) keep two jobs on one spool apart."""
    import threading

    import numpy as np

    from roofline.comm import DiskTransport, KylixCommunicator

    results = {}

    def node(job, r):
        t = DiskTransport(str(tmp_path), r, 2, timeout=20, token=f"job{job}")
        with KylixCommunicator(t, backend="disk") as c:
            results[job, r] = [c.allreduce(np.full(64, 10.0 ** job * (r + 1)))[0]
                               for _ in range(20)]

    ts = [threading.Thread(target=node, args=(j, r)) for j in range(2) for r in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    for j in range(2):
        for r in range(2):
            assert results[j, r] == [3.0 * 10.0 ** j] * 20


def test_a_disk_token_is_checked(tmp_path):
    import pytest

    from roofline.comm import DiskTransport

    with pytest.raises(ValueError, match="token"):
        DiskTransport(str(tmp_path), 0, 2, token="../x")


_UNTOKENED_JOB = textwrap.dedent("""
    # One job of two nodes (threads of this process) on a shared spool, without a token, run
    # REPS times; prints one JSON line per run: the sums, or the error.
    import json, sys, threading, time
    import numpy as np
    from roofline.comm import DiskTransport, KylixCommunicator

    spool, job, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    for rep in range(reps):
        comms, out, errors = [], [None, None], []
        try:
            for r in range(2):
                comms.append(KylixCommunicator(DiskTransport(spool, r, 2, timeout=3),
                                               backend="disk"))
        except Exception as e:
            errors.append(f"{type(e).__name__}: {e}")
            time.sleep(0.02)  # refused: the other job holds the spool; let it run
        if not errors:
            def node(r):
                try:
                    out[r] = [float(comms[r].allreduce(np.full(8, 10.0 ** job * (r + 1)))[0])
                              for _ in range(3)]
                except Exception as e:
                    errors.append(f"{type(e).__name__}: {e}")
            ts = [threading.Thread(target=node, args=(r,)) for r in range(2)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(30)
        for c in comms:
            c.close()
        print(json.dumps({"out": out, "errors": errors}), flush=True)
""")


@pytest.mark.multiprocess
def test_two_jobs_without_a_token_on_one_spool_never_mix(tmp_path):
    """Issue 32, item 2: two concurrent jobs (real processes) on one spool directory, neither
    with a token, 20 runs each: every run returns its own job's sums or a clear error naming
    the spool and saying to pass token= or use a fresh directory, never the other's data."""
    spool = tmp_path / "spool"
    spool.mkdir()
    reps = 20
    procs = [subprocess.Popen([sys.executable, "-c", _UNTOKENED_JOB, str(spool), str(job),
                               str(reps)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for job in range(2)]
    try:
        outs = [p.communicate(timeout=60) for p in procs]
    finally:
        for p in procs:
            p.kill()
    ok = 0
    for job, (stdout, stderr) in enumerate(outs):
        runs = [json.loads(line) for line in stdout.splitlines()]
        assert len(runs) == reps, stderr
        for run_ in runs:
            if run_["errors"]:
                for e in run_["errors"]:
                    assert str(spool) in e and "token=" in e and "fresh" in e, e
                assert all(o is None or o == [3.0 * 10.0 ** job] * 3 for o in run_["out"])
            else:
                assert run_["out"] == [[3.0 * 10.0 ** job] * 3] * 2, run_
                ok += 1
    assert ok > 0  # the spool changed hands: not every run was refused
    assert not os.path.exists(spool / ".roofline-disk-job")  # the last job let go of it


def test_a_spool_held_by_a_live_job_is_refused_and_freed_by_close(tmp_path):
    """Without a token a spool directory serves one job: a second holder of a rank is refused
    (naming the spool, saying what to do), the first job's waits then fail, and closing the
    first job frees the spool for the next, which never reads its leftovers."""
    t0 = DiskTransport(tmp_path, 0, 2, timeout=2)
    t1 = DiskTransport(tmp_path, 1, 2, timeout=2)
    t0.send(1, 0, [b"left behind"])  # never received: stale once the job is gone
    with pytest.raises(CommError, match="token=") as e:
        DiskTransport(tmp_path, 0, 2, timeout=2)
    assert str(tmp_path) in str(e.value) and "fresh" in str(e.value)
    with pytest.raises(CommError, match="token="):
        t0.recv(1, 0)  # the clash is everyone's error: no job runs on a shared spool
    t0.close()
    t1.close()
    a, b = DiskTransport(tmp_path, 0, 2, timeout=1), DiskTransport(tmp_path, 1, 2, timeout=1)
    with pytest.raises(CommError, match="no message"):
        b.recv(0, 0)  # the dead job's message was removed, not read as this job's
    a.send(1, 0, [b"fresh"])
    assert bytes(b.recv(0, 0)) == b"fresh"
    a.close()
    b.close()
    other = DiskTransport(tmp_path, 0, 2, token="other")  # a token: a namespace of its own
    assert other.token == "other"
    other.close()
