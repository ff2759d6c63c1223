"""The TCP transport: a full mesh of sockets between the ranks of one job.

Each rank listens on a port the operating system chooses (port 0) and registers it with the
job's coordinator (:mod:`roofline.comm._launch`), which hands every rank the addresses of all
others.  Rank ``r`` connects to every lower rank and accepts the higher ones; the first message
on a connection is a handshake carrying the job token and the sender's rank.  A connection with
foreign bytes or another job's token is refused and logged, and the job goes on; a second
connection claiming a rank already connected is refused (the first one wins).

One reader thread per connection checks every frame (:mod:`roofline.comm._framing`) and queues
its payload by tag; ``recv`` (:class:`~roofline.comm._transport.PollingTransport`'s) waits on
that queue with the transport's timeout.  A peer whose connection ends (a dead process) makes
every receive from it raise :class:`~roofline.comm.PeerError` naming it; a corrupted frame
raises :class:`~roofline.comm.MessageError` and is never delivered.

This module is a transport only (it sits below Kylix): the communicator over it,
``tcp_communicator``, is made in :mod:`roofline.comm._factories`.
"""

from __future__ import annotations

import collections
import json
import logging
import socket
import threading
import time

from ._base import CommError, CommTimeoutError, MessageError, PeerError
from ._framing import (
    KIND_DATA,
    KIND_HELLO,
    NO_LAYER,
    pack_header,
    read_header,
    read_payload,
)
from ._transport import PollingTransport

__all__ = ["TCPTransport", "listen", "register"]

logger = logging.getLogger(__name__)

_SOCKBUF = 4 << 20
#: Seconds between the probes of a rank that registered but has not connected yet.
_PROBE_EVERY = 0.5


def _tune(sock):
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, opt, _SOCKBUF)
        except OSError:  # pragma: no cover - capped by the kernel
            pass


def listen(host: str = "127.0.0.1") -> socket.socket:
    """A listening socket on a port the OS chooses (``SO_REUSEADDR``: reusable at once)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, 0))
    s.listen(128)
    return s


def _connect_until(addr, deadline, refused_is_final=False):
    """A connection to ``addr``, retried (the listener may not be up yet) until the monotonic
    ``deadline``; past it, the last ``OSError``.  With ``refused_is_final`` (a peer's listener,
    open before it registered), a refused connection is raised at once: nothing listens there
    any more, the process is gone."""
    while True:
        try:
            return socket.create_connection(addr, timeout=max(deadline - time.monotonic(), 0.1))
        except ConnectionRefusedError:
            if refused_is_final or time.monotonic() > deadline:
                raise
            time.sleep(0.02)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _listening(addr) -> bool:
    """Whether a process still listens at ``addr`` (a connection opened and closed at once,
    without a byte: the peer's handshake takes it for a probe); False only when refused."""
    try:
        with socket.create_connection(addr, timeout=1.0):
            return True
    except ConnectionRefusedError:
        return False
    except OSError:  # unreachable for a moment, a full backlog: not known to be gone
        return True


def register(coord: tuple[str, int], token: bytes, rank: int, address, timeout: float):
    """Register ``rank`` listening at ``address`` with the coordinator; returns the addresses
    of every rank (a list of ``(host, port)``), once all have registered."""
    deadline = time.monotonic() + timeout
    try:
        c = _connect_until(coord, deadline)
    except OSError as e:
        raise CommTimeoutError(f"rank {rank}: cannot reach the coordinator at "
                               f"{coord[0]}:{coord[1]} ({e})") from e
    with c:
        c.settimeout(max(deadline - time.monotonic(), 0.1))
        msg = {"token": token.hex(), "rank": rank, "host": address[0], "port": address[1]}
        c.sendall((json.dumps(msg) + "\n").encode())
        try:
            line = c.makefile("rb").readline()
        except TimeoutError as e:
            raise CommTimeoutError(f"rank {rank}: the coordinator did not answer within "
                                   f"{timeout:g} s (did every rank start?)") from e
    if not line:
        raise CommError(f"rank {rank}: the coordinator at {coord[0]}:{coord[1]} closed the "
                        "connection")
    try:
        reply = json.loads(line)
        if not isinstance(reply, dict):
            raise ValueError(f"a JSON {type(reply).__name__}")
        if not reply.get("ok"):
            raise CommError(f"rank {rank}: refused by the coordinator: {reply.get('error')}")
        # None: a replica that never joined (the coordinator gave it up; its node goes on)
        addresses = [None if a is None else (str(a[0]), int(a[1])) for a in reply["addresses"]]
    except (ValueError, KeyError, TypeError, RecursionError) as e:
        raise CommError(f"rank {rank}: {coord[0]}:{coord[1]} did not answer as a Roofline "
                        f"coordinator ({type(e).__name__}: {e}); is another program listening "
                        "there?") from None
    return addresses


class TCPTransport(PollingTransport):
    """One rank's sockets to every other rank of a job.

    Parameters
    ----------
    rank, size : int
    token : bytes
        The 16-byte job token.
    listener : socket.socket
        This rank's listening socket (its address is ``addresses[rank]``).
    addresses : list of (host, port) or None
        Every rank's listening address; ``None`` for a rank that never joined the job (a
        replica the coordinator gave up): it counts as dead from the start (its
        :class:`~roofline.comm.PeerError` raised by a send to it or a receive from it, which
        :class:`~roofline.comm.ReplicatedTransport` skips).
    timeout : float
        Seconds a receive (and the connection set-up) waits.
    """

    backend = "tcp"
    shares_process = False

    def __init__(self, rank, size, token, listener, addresses, timeout=60.0):
        self.rank, self.size = int(rank), int(size)
        self.token = bytes(token)
        if len(self.token) != 16:
            raise ValueError("token must be 16 bytes")
        self.timeout = float(timeout)
        self._listener = listener
        self._socks = [None] * self.size
        self._send_locks = [threading.Lock() for _ in range(self.size)]
        self._cv = threading.Condition()
        self._queues = collections.defaultdict(collections.deque)
        self._arrivals = 0  # messages and deaths seen (wait_arrival)
        self._dead = {}  # peer -> exception
        self._closed = False
        self._threads = []
        self._accepter = threading.Thread(target=self._accept_loop, daemon=True,
                                          name=f"roofline-accept-{rank}")
        for peer, a in enumerate(addresses):
            if a is None and peer != self.rank:
                self._dead[peer] = PeerError(f"rank {self.rank}: rank {peer} never joined the "
                                             "job (gone before it registered)", peer)
        self._accepter.start()
        deadline = time.monotonic() + self.timeout
        for peer in range(self.rank):
            if peer not in self._dead:
                self._connect(peer, tuple(addresses[peer]), deadline)
        next_probe = time.monotonic() + _PROBE_EVERY
        while True:
            with self._cv:
                missing = [p for p in range(self.rank + 1, self.size)
                           if self._socks[p] is None and p not in self._dead]
                now = time.monotonic()
                if missing and now < min(deadline, next_probe):
                    self._cv.wait(min(deadline, next_probe) - now)
                    continue
            if not missing:
                break
            if now > deadline:
                self.close(linger=0)
                raise CommTimeoutError(f"rank {self.rank}: ranks {missing} did not connect "
                                       f"within {self.timeout:g} s", missing[0])
            for p in missing:  # a rank that died after it registered never connects
                if self._socks[p] is None and not _listening(tuple(addresses[p])):
                    self._gone(p, f"rank {self.rank}: rank {p} is gone: it registered, then "
                                  "ended before it connected (nothing listens at "
                                  f"{addresses[p][0]}:{addresses[p][1]})")
            next_probe = time.monotonic() + _PROBE_EVERY

    # -- connection set-up ----------------------------------------------------------------
    def _gone(self, peer, why):
        """``peer`` found dead while the mesh is connected: every send to it and receive from
        it raises :class:`~roofline.comm.PeerError` ``why`` (a replicated transport goes on
        with its node's other replicas)."""
        logger.warning("%s", why)
        with self._cv:
            self._dead.setdefault(peer, PeerError(why, peer))
            self._arrivals += 1
            self._cv.notify_all()

    def _connect(self, peer, addr, deadline):
        try:
            s = _connect_until(addr, deadline, refused_is_final=True)
        except ConnectionRefusedError:
            # it registered (so it listened), and nothing listens there now: it is gone
            self._gone(peer, f"rank {self.rank}: rank {peer} is gone: it registered, then "
                             f"ended before the mesh was connected (connection to "
                             f"{addr[0]}:{addr[1]} refused)")
            return
        except OSError as e:
            self.close(linger=0)
            raise CommTimeoutError(f"rank {self.rank}: cannot connect to rank {peer} at "
                                   f"{addr[0]}:{addr[1]} ({e})", peer) from e
        _tune(s)
        s.settimeout(None)
        hello = pack_header(KIND_HELLO, self.token, self.rank, peer, [])
        s.sendall(hello)
        self._attach(peer, s)

    def _accept_loop(self):
        while not self._closed:
            try:
                s, addr = self._listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._handshake, args=(s, addr), daemon=True).start()

    def _handshake(self, s, addr):
        try:
            s.settimeout(min(self.timeout, 10.0))
            if not s.recv(1, socket.MSG_PEEK):  # closed without a byte: a liveness probe
                s.close()
                return
            kind, sender, target, _, _, _ = read_header(s, self.token)
            if kind != KIND_HELLO or target != self.rank:
                raise MessageError(f"unexpected handshake (kind {kind}, for rank {target})")
            if not self.rank < sender < self.size:
                raise MessageError(f"a handshake from rank {sender}, outside "
                                   f"({self.rank}, {self.size})")
            with self._cv:
                if self._socks[sender] is not None:
                    raise MessageError(f"a second connection claiming rank {sender} (the first "
                                       "one is kept)")
            _tune(s)
            s.settimeout(None)
            self._attach(sender, s)
        except (MessageError, PeerError, OSError) as e:
            logger.warning("rank %d: refused a connection from %s:%s: %s", self.rank, addr[0],
                           addr[1], e)
            s.close()

    def _attach(self, peer, s):
        with self._cv:
            self._socks[peer] = s
            self._cv.notify_all()
        t = threading.Thread(target=self._reader, args=(peer, s), daemon=True,
                             name=f"roofline-recv-{self.rank}<-{peer}")
        self._threads.append(t)
        t.start()

    # -- the reader ---------------------------------------------------------------------------
    def _reader(self, peer, s):
        try:
            while True:
                kind, _, tag, length, crc, _ = read_header(s, self.token, peer, expect_sender=peer)
                payload = read_payload(s, length, crc, peer, tag)
                with self._cv:
                    self._queues[(peer, tag)].append(payload)
                    self._arrivals += 1
                    self._cv.notify_all()
        except (PeerError, OSError) as e:
            err = PeerError(f"rank {self.rank}: rank {peer} is gone (its connection ended: "
                            f"{e})", peer)
        except MessageError as e:
            err = MessageError(f"rank {self.rank}: {e}")
        if self._closed:
            return
        # a peer that finished and closed looks the same as a dead one until someone waits on
        # it: recv() raises then; a corrupted stream is worth a warning at once
        (logger.warning if isinstance(err, MessageError) else logger.debug)("%s", err)
        with self._cv:
            self._dead[peer] = err
            self._arrivals += 1
            self._cv.notify_all()

    # -- Transport --------------------------------------------------------------------------
    def send(self, peer, tag, payload, layer=NO_LAYER):
        bufs = list(payload) if isinstance(payload, (list, tuple)) else [payload]
        if peer == self.rank:
            with self._cv:
                self._queues[(peer, tag)].append(b"".join(bufs))
                self._arrivals += 1
                self._cv.notify_all()
            return
        s = self._socks[peer]
        if peer in self._dead:
            raise self._dead[peer]
        if s is None:
            raise PeerError(f"rank {self.rank}: no connection to rank {peer}", peer)
        bufs = [memoryview(b).cast("B") for b in bufs]
        head = pack_header(KIND_DATA, self.token, self.rank, tag, bufs, layer)
        try:
            with self._send_locks[peer]:
                _sendall(s, [head, *bufs])
        except OSError as e:
            raise PeerError(f"rank {self.rank}: sending to rank {peer} failed ({e}); is it "
                            "alive?", peer) from e

    def try_recv(self, peer, tag):
        with self._cv:
            q = self._queues.get((peer, tag))
            if q:
                return q.popleft()
            if peer in self._dead:
                raise self._dead[peer]
            if self._closed:
                raise CommError(f"rank {self.rank}: the transport is closed")
            return None

    def _arrival_state(self):
        return self._arrivals, self._closed

    def close(self, linger: float | None = None):
        """Close gracefully: end this rank's sending side at once (the peers see the end of
        the stream after every byte sent), keep reading until each peer has closed its side
        too or ``linger`` seconds (default ``min(timeout, 10)``) pass, then close the sockets.

        Closing a socket with unread bytes makes the kernel reset the connection, and a reset
        discards what the peer had received but not yet read: a rank that finishes first
        (a replica ahead of its slower twin) would otherwise destroy its own last messages."""
        if self._closed:
            return
        try:
            self._listener.close()
        except OSError:
            pass
        for s in self._socks:
            if s is not None:
                try:
                    s.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
        deadline = time.monotonic() + (min(self.timeout, 10.0) if linger is None else linger)
        for t in list(self._threads):
            # a reader is listed just before it starts: one a handshake is starting while a
            # failing rank closes cannot be joined yet (RuntimeError), and is a daemon
            if t is not threading.current_thread() and t.ident is not None:
                t.join(max(deadline - time.monotonic(), 0.0))
        self._closed = True
        for s in self._socks:
            if s is not None:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
        with self._cv:
            self._cv.notify_all()


def _sendall(sock, bufs):
    """``sendmsg`` of the buffers until all bytes are out (no concatenation copy)."""
    bufs = [b for b in bufs if memoryview(b).nbytes]
    while bufs:
        n = sock.sendmsg(bufs[:512])
        while n:
            m = memoryview(bufs[0]).nbytes
            if n >= m:
                n -= m
                bufs.pop(0)
            else:
                bufs[0] = memoryview(bufs[0])[n:]
                n = 0
