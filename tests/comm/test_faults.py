"""Faults of the communication tier (issue 17): what users of LightGBM's, XGBoost's and VW's
distributed modes keep reporting, each with real sockets and real processes."""

import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import zlib

import numpy as np
import pytest

from roofline.comm import CommError, Coordinator, KylixCommunicator, MessageError, PeerError
from roofline.comm._framing import HEADER, KIND_DATA, KIND_HELLO, MAGIC, VERSION, pack_header
from roofline.comm._tcp import TCPTransport, listen, register

HERE = os.path.dirname(__file__)
SCRIPT = os.path.join(HERE, "scripts", "sum_script.py")


def _pair(timeout=5.0):
    """Two TCP transports of one job, in threads of this process (real sockets)."""
    coord = Coordinator(2, timeout=10)
    out = [None, None]

    def join(r):
        lst = listen()
        addrs = register(coord.address, coord.token, r, lst.getsockname(), 10)
        out[r] = TCPTransport(r, 2, coord.token, lst, addrs, timeout)

    ts = [threading.Thread(target=join, args=(r,)) for r in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(20)
    coord.close()
    return out


def _exchange(t0, t1):
    c0, c1 = KylixCommunicator(t0), KylixCommunicator(t1)
    res = [None, None]
    th = threading.Thread(target=lambda: res.__setitem__(1, c1.allreduce(np.arange(3.0))))
    th.start()
    res[0] = c0.allreduce(np.arange(3.0))
    th.join(10)
    return res


def test_a_rank_killed_mid_job_is_named_by_the_others_within_the_timeout():
    t = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "roofline.comm.launch", "-n", "3", "--timeout",
                        "5", SCRIPT, "--die-rank", "1"], capture_output=True, text=True,
                       timeout=60)
    elapsed = time.monotonic() - t
    assert p.returncode != 0
    assert "rank 1 exited with code -9" in p.stderr
    assert "rank 1 is gone" in p.stdout  # the survivors name the dead rank
    assert '"ok": true' not in p.stdout  # no partial result reported as a result
    assert elapsed < 30


def test_no_process_outlives_the_launcher():
    marker = f"roofline-orphan-check-{os.getpid()}"
    p = subprocess.run([sys.executable, "-m", "roofline.comm.launch", "-n", "3", "--timeout",
                        "3", SCRIPT, "--die-rank", "2", marker], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode != 0
    time.sleep(0.5)
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert marker not in ps


def test_foreign_bytes_and_a_wrong_token_are_refused_and_the_job_goes_on(caplog):
    t0, t1 = _pair()
    try:
        addr = t1._listener.getsockname()
        with socket.create_connection(addr) as s:  # foreign bytes
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + b"\0" * 64)
            time.sleep(0.2)
        with socket.create_connection(addr) as s:  # another job's handshake
            s.sendall(pack_header(KIND_HELLO, b"x" * 16, 0, 1, []))
            time.sleep(0.2)
        res = _exchange(t0, t1)
        np.testing.assert_array_equal(res[0], [0.0, 2.0, 4.0])
        np.testing.assert_array_equal(res[1], res[0])
        text = " ".join(r.getMessage() for r in caplog.records)
        assert "foreign bytes" in text and "wrong job token" in text
    finally:
        t0.close()
        t1.close()


def test_a_duplicate_rank_is_refused_and_the_first_one_wins():
    coord = Coordinator(2, timeout=10)
    lst = [listen() for _ in range(3)]
    errors, addrs = [], {}

    def reg(i, rank):
        try:
            addrs[i] = register(coord.address, coord.token, rank, lst[i].getsockname(), 10)
        except CommError as e:
            errors.append(str(e))

    first = threading.Thread(target=reg, args=(0, 0))
    first.start()
    time.sleep(0.3)
    reg(1, 0)  # the same rank again: refused at once
    reg(2, 1)
    first.join(10)
    names = [s.getsockname() for s in lst]
    for s in lst:
        s.close()
    assert len(errors) == 1 and "duplicate rank 0" in errors[0]
    assert addrs[0][0] == names[0] and 1 not in addrs  # the first registration of rank 0 won


def test_a_corrupted_message_is_an_error_never_a_wrong_sum():
    t0, t1 = _pair()
    try:
        payload = np.arange(4.0).tobytes()
        head = HEADER.pack(MAGIC, VERSION, KIND_DATA, 0, t0.token, 0, 7, len(payload),
                           zlib.crc32(payload) ^ 1)  # one bit off
        t0._socks[1].sendall(head + payload)
        with pytest.raises(MessageError, match="bad CRC-32"):
            t1.recv(0, 7)
    finally:
        t0.close()
        t1.close()


def test_a_silent_peer_times_out_naming_it():
    t0, t1 = _pair(timeout=0.5)
    try:
        with pytest.raises(PeerError, match="rank 1") as e:
            KylixCommunicator(t0).allreduce(np.ones(2))
        assert e.value.peer == 1
    finally:
        t0.close()
        t1.close()


def test_a_closed_peer_is_named():
    t0, t1 = _pair()
    t1.close()
    with pytest.raises(PeerError, match="rank 1"):
        t0.recv(1, 0)
    t0.close()


def test_ports_in_use_and_reused_right_after_a_job():
    busy = [listen() for _ in range(20)]  # ports held by someone else
    try:
        for _ in range(2):  # back to back: the second job starts as the first one's ports close
            p = subprocess.run([sys.executable, "-m", "roofline.comm.launch", "-n", "2",
                                "--timeout", "20", SCRIPT], capture_output=True, text=True,
                               timeout=60)
            assert p.returncode == 0, p.stdout + p.stderr
    finally:
        for s in busy:
            s.close()


def test_two_jobs_at_once_do_not_mix():
    cmd = [sys.executable, "-m", "roofline.comm.launch", "-n", "3", "--timeout", "20", SCRIPT]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=90) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, out + err
        assert '"ok": true' in out


def test_a_malformed_header_length_is_refused():
    t0, t1 = _pair()
    try:
        head = HEADER.pack(MAGIC, VERSION, KIND_DATA, 0, t0.token, 0, 3, 1 << 62, 0)
        t0._socks[1].sendall(head)
        with pytest.raises(MessageError, match="corrupt length"):
            t1.recv(0, 3)
    finally:
        t0.close()
        t1.close()


def test_launch_arguments():
    p = subprocess.run([sys.executable, "-m", "roofline.comm.launch", "-n", "0", SCRIPT],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "-n must be >= 1" in p.stderr
    assert struct.calcsize(HEADER.format) == 48 and signal.SIGKILL
