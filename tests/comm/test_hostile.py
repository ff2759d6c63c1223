"""Issue 32, item 6: foreign or hostile bytes on the coordinator port and on a rank's
connection, and malformed settings, are refused with errors naming what is wrong; the
coordinator and the job go on."""

import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from roofline.comm import CommError, Coordinator, MessageError, PeerError
from roofline.comm._framing import HEADER, KIND_DATA, MAGIC, VERSION, read_header, read_payload
from roofline.comm._launch import parse_registration
from roofline.comm._tcp import listen, register

TOKEN = b"t" * 16


def _send(addr, data, wait=0.5):
    with socket.create_connection(addr, timeout=5) as s:
        s.sendall(data)
        s.settimeout(wait)
        try:
            return s.recv(4096)
        except OSError:
            return b""


def _join(coord, rank, out):
    lst = listen()
    out[rank] = register(coord.address, coord.token, rank, lst.getsockname(), 20)
    lst.close()


@pytest.mark.parametrize("junk", [b"[]\n", b"1\n", b"null\n", b"\"x\"\n", b"[" * 100000 + b"\n",
                                  b"{\"token\": 1}\n", b"\xff\xfe\n"])
def test_foreign_json_on_the_coordinator_is_refused_and_the_job_goes_on(junk):
    coord = Coordinator(2, timeout=20)
    try:
        reply = _send(coord.address, junk)
        assert b'"ok": false' in reply
        out = [None, None]
        ts = [threading.Thread(target=_join, args=(coord, r, out)) for r in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(20)
        assert all(o is not None and len(o) == 2 for o in out)
        assert coord.refused
    finally:
        coord.close()


def test_a_trickling_connection_blocks_no_registration():
    coord = Coordinator(2, timeout=30)
    stop = threading.Event()

    def trickle():
        with socket.create_connection(coord.address) as s:
            while not stop.is_set():
                try:
                    s.sendall(b" ")
                except OSError:
                    return
                stop.wait(2)

    threading.Thread(target=trickle, daemon=True).start()
    time.sleep(0.2)
    try:
        t0 = time.monotonic()
        out = [None, None]
        ts = [threading.Thread(target=_join, args=(coord, r, out)) for r in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(30)
        assert all(out) and time.monotonic() - t0 < 3
    finally:
        stop.set()
        coord.close()


def test_a_coordinator_address_held_by_another_program_is_a_clear_error():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def answer():
        c, _ = srv.accept()
        c.recv(4096)
        c.sendall(b"HTTP/1.0 400 Bad Request\n")
        c.close()

    threading.Thread(target=answer, daemon=True).start()
    with pytest.raises(CommError, match="another program"):
        register(srv.getsockname(), TOKEN, 0, ("127.0.0.1", 1), 5)
    srv.close()


def test_a_frame_announcing_too_many_bytes_is_refused_naming_the_peer():
    a, b = socket.socketpair()
    a.sendall(HEADER.pack(MAGIC, VERSION, KIND_DATA, 0, TOKEN, 3, 0, 1 << 38, 0))
    with pytest.raises(MessageError, match="rank 3"):
        read_header(b, TOKEN, 3, expect_sender=3)
    a.close()
    b.close()


@pytest.mark.parametrize("value", ["inf", "nan", "0", "-1", "abc"])
def test_a_bad_timeout_is_refused(value):
    p = subprocess.run([sys.executable, "-m", "roofline.comm.launch", "-n", "1", "--timeout",
                        value, "-c"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "--timeout" in p.stderr


def test_a_malformed_timeout_variable_is_named():
    env = {**os.environ, "ROOFLINE_COMM_COORD": "127.0.0.1:1", "ROOFLINE_COMM_RANK": "0",
           "ROOFLINE_COMM_SIZE": "1", "ROOFLINE_COMM_TOKEN": "00" * 16,
           "ROOFLINE_COMM_TIMEOUT": "abc"}
    p = subprocess.run([sys.executable, "-c", "from roofline.comm import from_environment; "
                        "from_environment()"], env=env, capture_output=True, text=True,
                       timeout=30)
    assert p.returncode != 0 and "ROOFLINE_COMM_TIMEOUT" in p.stderr, p.stderr


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(st.binary(max_size=300), st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=4),
    max_leaves=20).map(lambda v: json.dumps(v).encode())))
def test_fuzz_registration_parser_only_refuses(data):
    try:
        msg = parse_registration(data, TOKEN.hex(), 4)
    except ValueError:
        return
    assert 0 <= msg["rank"] < 4


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.booleans())
def test_fuzz_frame_reader_only_refuses(data, good_start):
    if good_start:
        data = MAGIC + bytes([VERSION]) + data
    a, b = socket.socketpair()
    b.settimeout(1)
    try:
        a.sendall(data)
        a.shutdown(socket.SHUT_WR)
        try:
            kind, sender, tag, length, crc, layer = read_header(b, TOKEN, 1)
            read_payload(b, length, crc, 1, tag)
        except (MessageError, PeerError):
            pass
        except struct.error:
            pytest.fail("struct.error escaped")
    finally:
        a.close()
        b.close()
