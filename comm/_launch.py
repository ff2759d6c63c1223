"""Roofline's own launcher: a coordinator that hands out ranks, addresses and a job token, and
``python -m roofline.comm.launch -n K script.py ARGS`` to start K local worker processes.

The coordinator is a small TCP server (like Vowpal Wabbit's spanning-tree server): each worker
registers its rank and listening address with the job token; a registration with a wrong token
or a rank already taken is refused (the first one wins); once all ``K`` ranks have registered,
every worker receives the list of addresses.  With replication, a replica given up before the
job starts (:meth:`Coordinator.lost`: its process ended before it registered) is left out, its
address ``None``, as long as its node keeps a replica: the job starts without it.  Workers
find the coordinator through environment variables (:func:`roofline.comm.from_environment`).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time

__all__ = ["Coordinator", "launch"]

logger = logging.getLogger(__name__)

ENV_RANK = "ROOFLINE_COMM_RANK"
ENV_SIZE = "ROOFLINE_COMM_SIZE"
ENV_COORD = "ROOFLINE_COMM_COORD"
ENV_TOKEN = "ROOFLINE_COMM_TOKEN"
ENV_TIMEOUT = "ROOFLINE_COMM_TIMEOUT"
ENV_REPLICATION = "ROOFLINE_COMM_REPLICATION"


#: Seconds a connection to the coordinator has to send its whole registration.
REGISTRATION_DEADLINE = 5.0
#: The longest registration line accepted (bytes).
MAX_REGISTRATION = 4096


def _read_line(conn, seconds, limit):
    """One line from ``conn`` within ``seconds`` in all (not per byte: a peer trickling a byte
    at a time is cut off) and ``limit`` bytes."""
    deadline = time.monotonic() + seconds
    buf = bytearray()
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            raise ValueError(f"no complete registration within {seconds:g} s")
        conn.settimeout(left)
        try:
            chunk = conn.recv(limit + 1 - len(buf))
        except TimeoutError:
            raise ValueError(f"no complete registration within {seconds:g} s") from None
        if not chunk:
            raise ValueError("the connection closed before a complete registration")
        buf += chunk
        if len(buf) > limit:
            raise ValueError(f"a registration longer than {limit} bytes")
    return bytes(buf[:buf.index(b"\n")])


def parse_registration(line: bytes, token_hex: str, size: int) -> dict:
    """The checked registration ``{"token", "rank", "host", "port"}`` of one line; ValueError
    naming what is wrong."""
    try:
        msg = json.loads(line)
    except (ValueError, RecursionError) as e:
        raise ValueError(f"not a JSON registration ({type(e).__name__})") from None
    if not isinstance(msg, dict):
        raise ValueError(f"a registration must be a JSON object, got {type(msg).__name__}")
    if msg.get("token") != token_hex:
        raise ValueError("wrong job token")
    rank, host, port = msg.get("rank"), msg.get("host"), msg.get("port")
    if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < size:
        raise ValueError(f"rank {rank!r} outside [0, {size})")
    if not isinstance(host, str) or not host or len(host) > 255:
        raise ValueError(f"a malformed host {host!r}")
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        raise ValueError(f"a malformed port {port!r}")
    return {"token": token_hex, "rank": rank, "host": host, "port": port}


class Coordinator:
    """Hands out the addresses of ``size`` ranks of one job (a background thread).

    Parameters
    ----------
    size : int
    token : bytes, optional
        The job token (16 random bytes by default).
    host : str
    timeout : float
        Seconds to wait for all ranks.
    replication : int
        Replicas per logical node (ranks ``a*r .. a*r + r - 1`` form node ``a``): a replica
        given up before the job starts (:meth:`lost`) is left out while its node keeps one.

    Attributes
    ----------
    address : (str, int)
    token : bytes
    refused : list of str
        Why registrations were refused (foreign connections, duplicate ranks).
    gone : dict
        The ranks given up before the job started (:meth:`lost`), with why.
    """

    def __init__(self, size: int, token: bytes | None = None, host: str = "127.0.0.1",
                 timeout: float = 120.0, replication: int = 1):
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        if int(replication) < 1 or size % int(replication):
            raise ValueError(f"replication must be >= 1 and divide size={size}, got "
                             f"{replication}")
        self.size = int(size)
        self.replication = int(replication)
        self.gone = {}
        self.token = secrets.token_bytes(16) if token is None else bytes(token)
        self.timeout = float(timeout)
        self.refused = []
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, 0))
        self._sock.listen(256)
        self.address = self._sock.getsockname()
        self._clients = {}
        self._closed = False
        self._abort = None
        self._lock = threading.Lock()
        self._decided = False  # the job started or failed: the set of ranks is final
        self.complete = False
        self._thread = threading.Thread(target=self._serve, daemon=True,
                                        name="roofline-coordinator")
        self._thread.start()

    def env(self, rank: int, timeout: float | None = None) -> dict:
        """The environment variables of worker ``rank``.

        Parameters
        ----------
        rank : int
            The worker's rank.
        timeout : float, optional
            The worker's communication timeout (default: the coordinator's).

        Returns
        -------
        dict
            Variable name to value: rank, size, coordinator address, job token and timeout,
            which :func:`from_environment` reads.
        """
        return {ENV_RANK: str(rank), ENV_SIZE: str(self.size),
                ENV_COORD: f"{self.address[0]}:{self.address[1]}",
                ENV_TOKEN: self.token.hex(),
                ENV_TIMEOUT: str(self.timeout if timeout is None else timeout)}

    def _refuse(self, conn, why):
        self.refused.append(why)
        logger.warning("coordinator: refused a registration: %s", why)
        try:
            conn.sendall((json.dumps({"ok": False, "error": why}) + "\n").encode())
        except OSError:
            pass
        conn.close()

    def _serve(self):
        deadline = time.monotonic() + self.timeout
        self._sock.settimeout(0.2)
        while not self._closed and self._abort is None:
            with self._lock:
                if len(self._clients) + len(self.gone) == self.size:
                    break
            if time.monotonic() > deadline:
                logger.error("coordinator: only ranks %s registered within %g s",
                             sorted(self._clients), self.timeout)
                break
            try:
                conn, addr = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            # one thread per connection: a slow or silent one never holds the others up
            threading.Thread(target=self._register, args=(conn, addr), daemon=True,
                             name="roofline-coordinator-conn").start()
        with self._lock:
            self._decided = True
            clients = dict(self._clients)
            self.complete = (len(clients) + len(self.gone) == self.size
                             and self._abort is None)
        if self.complete:
            if self.gone:
                logger.warning("coordinator: the job starts without the replicas %s (%s); "
                               "their nodes go on with the others", sorted(self.gone),
                               "; ".join(self.gone.values()))
            addresses = [clients[r][1] if r in clients else None for r in range(self.size)]
            reply = {"ok": True, "addresses": addresses}
        else:
            reply = {"ok": False, "error": self._abort or (
                f"only ranks {sorted(clients)} of {self.size} registered within "
                f"{self.timeout:g} s")}
        data = (json.dumps(reply) + "\n").encode()
        for conn, _ in clients.values():
            try:
                conn.sendall(data)
            except OSError:
                pass
            conn.close()
        self._sock.close()

    def _register(self, conn, addr):
        """Read and check one registration (at most :data:`REGISTRATION_DEADLINE` seconds and
        :data:`MAX_REGISTRATION` bytes); anything else is refused and logged."""
        who = f"{addr[0]}:{addr[1]}"
        try:
            line = _read_line(conn, REGISTRATION_DEADLINE, MAX_REGISTRATION)
            msg = parse_registration(line, self.token.hex(), self.size)
            rank = msg["rank"]
            with self._lock:
                if rank in self.gone:
                    raise ValueError(f"rank {rank} was given up ({self.gone[rank]})")
                if self._decided:
                    raise ValueError(f"rank {rank} registered after the job "
                                     + ("started" if self.complete else "failed"))
                if rank in self._clients:
                    raise ValueError(f"duplicate rank {rank} (the first registration wins)")
                self._clients[rank] = (conn, (msg["host"], msg["port"]))
        except (ValueError, OSError) as e:
            self._refuse(conn, f"{e} (from {who})")
        except Exception as e:  # noqa: BLE001 - no foreign bytes may end the coordinator
            self._refuse(conn, f"a malformed registration from {who} ({type(e).__name__})")

    def lost(self, rank: int, reason: str) -> bool:
        """Give up ``rank`` before the job starts (its process ended before it joined).

        With replication, the job starts without it (its address ``None``) while a replica of
        its node remains; once every replica of a node is given up, the job is refused
        (:meth:`abort`) naming the node and its ranks.  Without replication any loss refuses
        the job.

        Parameters
        ----------
        rank : int
            The physical rank.
        reason : str
            Why (logged and reported to the other ranks if the job is refused).

        Returns
        -------
        bool
            False when it is too late: the job had already started (the rank's loss is then
            the transports' to find) or failed.
        """
        rank = int(rank)
        with self._lock:
            if self._decided:
                return False
            self.gone[rank] = f"rank {rank} {reason}"
            conn = self._clients.pop(rank, (None,))[0]  # registered, then died
            node = rank // self.replication
            ranks = list(range(node * self.replication, (node + 1) * self.replication))
            if self.replication == 1:
                self._abort = self._abort or self.gone[rank]
            elif all(q in self.gone for q in ranks):
                self._abort = self._abort or (
                    f"every replica of node {node} (ranks {ranks}) is gone before it joined "
                    f"the job: " + "; ".join(self.gone[q] for q in ranks))
        if conn is not None:
            conn.close()
        logger.warning("coordinator: %s", self.gone[rank])
        return True

    def abort(self, reason: str):
        """Refuse the job: the ranks registered (and those that register later) are told
        ``reason`` at once instead of waiting for the missing ones.

        Parameters
        ----------
        reason : str
            What the ranks are told (names the rank or the fault).
        """
        self._abort = str(reason)

    def close(self):
        """Stop accepting registrations and close the listening socket (idempotent)."""
        self._closed = True
        try:
            self._sock.close()
        except OSError:
            pass


class _Signalled(Exception):
    def __init__(self, sig):
        super().__init__(f"signal {sig}")
        self.sig = sig


def _pump(stream, rank, out, broken, label=False):
    """Copy a rank's output line by line (prefixed ``[rank r]`` with ``label``); once the
    launcher's own output is closed (``| head``), close the rank's pipe, so that the rank's next
    write fails as a plain script's would instead of blocking on a full pipe forever."""
    prefix = f"[rank {rank}] ".encode() if label else b""
    try:
        for line in iter(stream.readline, b""):
            if broken.is_set():
                break
            try:
                out.write(prefix + line)
                out.flush()
            except (BrokenPipeError, ValueError, OSError):
                broken.set()
                break
    finally:
        stream.close()


def _die_with_parent(parent):
    """In a rank before it runs (Linux): SIGKILL when the launcher dies, whatever kills it."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return
    if os.getppid() != parent:  # the launcher died before prctl
        os._exit(1)


def launch(n: int, argv: list[str], *, timeout: float = 120.0, python: str | None = None,
           env: dict | None = None, grace: float | None = None, replication: int = 1,
           label: bool = False) -> int:
    """Run ``python argv...`` as ``n`` ranks of one job; return the exit code.

    The workers' output (stdout and stderr) is copied line by line to this process's stdout,
    as ``mpiexec`` does: unprefixed, so that a script whose rank 0 prints one JSON line prints
    it parseable under the launcher too; ``label=True`` prefixes every line with ``[rank r]``
    (``mpiexec -l``).  If a rank fails (the launcher names it on stderr), the others get ``grace``
    seconds (default: their communication timeout) to fail on their own, then are killed; the
    exit code is the first failing rank's.  No worker outlives the launcher.

    With ``replication=r > 1`` the ranks form ``n / r`` nodes of ``r`` replicas (their
    :func:`~roofline.comm.from_environment` communicators are replicated): the job succeeds
    when every node has a replica that exits 0, and failed replicas are reported, not fatal.

    Parameters
    ----------
    n : int
        The number of ranks (worker processes).
    argv : list of str
        The script and its arguments, run by every worker as ``python argv...``.
    timeout : float
        Seconds the coordinator waits for the ranks to register, and the workers'
        communication timeout.
    python : str, optional
        The Python executable (default: this one, ``sys.executable``).
    env : dict, optional
        Extra environment variables of the workers.
    grace : float, optional
        Seconds the other ranks get to fail on their own after a rank fails (default:
        ``timeout``).
    replication : int
        Replicas per node; must divide ``n``.
    label : bool
        Prefix each line of a worker's output with ``[rank r]`` (``mpiexec -l``).

    Returns
    -------
    int
        0 when the job succeeded, else the exit code of the first failing rank.

    Raises
    ------
    ValueError
        ``replication`` is below 1 or does not divide ``n``.
    """
    r_ = int(replication)
    if r_ < 1 or n % r_:
        raise ValueError(f"replication must be >= 1 and divide n={n}, got {replication}")
    if r_ > 1:
        env = {**(env or {}), ENV_REPLICATION: str(r_)}
    coord = Coordinator(n, timeout=timeout, replication=r_)
    procs = []
    out = sys.stdout.buffer
    pumps = []
    broken = threading.Event()
    me = os.getpid()
    previous = {}
    signalled = None

    def on_signal(sig, frame):
        raise _Signalled(sig)

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            previous[sig] = signal.signal(sig, on_signal)
    preexec = (lambda: _die_with_parent(me)) if sys.platform.startswith("linux") else None
    try:
        for r in range(n):
            penv = {**os.environ, **(env or {}), **coord.env(r, timeout)}
            p = subprocess.Popen([python or sys.executable, *argv], env=penv,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 start_new_session=True, preexec_fn=preexec)
            procs.append(p)
            t = threading.Thread(target=_pump, args=(p.stdout, r, out, broken, label),
                                 daemon=True)
            t.start()
            pumps.append(t)
        failed = None
        reported = set()
        first_fail_time = None
        grace = timeout if grace is None else grace
        while True:
            codes = [p.poll() for p in procs]
            for r, c in enumerate(codes):
                if c == 0 and r_ > 1 and r not in reported and not coord.complete:
                    # a replica that ends without joining: its node goes on with its twins
                    reported.add(r)
                    if coord.lost(r, "exited with code 0 before it joined the job"):
                        sys.stderr.write(f"roofline.comm.launch: replica rank {r} exited "
                                         "before it joined the job; its node goes on\n")
                if c not in (None, 0) and r not in reported:
                    reported.add(r)
                    early = not coord.complete
                    sys.stderr.write(f"roofline.comm.launch: rank {r} exited with code {c}"
                                     + (" before it joined the job\n" if early else "\n"))
                    # the others would wait for it until the timeout: with replication its
                    # node starts without it (the coordinator refuses a node left with none)
                    if early and coord.lost(r, f"exited with code {c} before it joined the "
                                               "job") and (r_ == 1 or coord._abort):
                        grace = min(grace, 2.0)
                    if failed is None and not _node_survives(codes, r, r_, coord.gone):
                        failed = (r, c)
                        first_fail_time = time.monotonic()
            if failed is None and r_ > 1:  # a node whose every replica failed
                for r, c in enumerate(codes):
                    if c not in (None, 0) and not _node_survives(codes, r, r_, coord.gone):
                        failed = (r, c)
                        first_fail_time = time.monotonic()
                        break
            if all(c is not None for c in codes):
                break
            if failed is None and r_ > 1 and all(
                    any(codes[q] == 0 and q not in coord.gone for q in range(a, a + r_))
                    for a in range(0, n, r_)):
                slow = [r for r, c in enumerate(codes) if c is None]
                sys.stderr.write(f"roofline.comm.launch: every node has finished; retiring the "
                                 f"slower replicas {slow}\n")
                break  # the finally block kills them
            if failed is not None and time.monotonic() - first_fail_time > grace:
                sys.stderr.write("roofline.comm.launch: killing the remaining ranks\n")
                break
            time.sleep(0.05)
    except _Signalled as e:
        signalled = e.sig
        sys.stderr.write(f"roofline.comm.launch: signal {signal.Signals(e.sig).name}: ending "
                         "the ranks\n")
    finally:
        for sig, h in previous.items():
            signal.signal(sig, h)
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass
        for p in procs:
            p.wait()
        for t in pumps:
            t.join(timeout=5)
        coord.close()
        if broken.is_set():  # as Python's docs advise: no second error at exit
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
    if signalled is not None:
        return 128 + signalled
    if broken.is_set() and failed is None:
        return 1
    if failed is not None:
        return failed[1] if failed[1] > 0 else 1
    return 0


def _node_survives(codes, rank, replication, gone=()):
    """Whether a replica of ``rank``'s node is still running or exited 0 (a replica in
    ``gone``, which never joined the job, does not count)."""
    if replication == 1:
        return False
    node = rank // replication
    return any(codes[q] in (None, 0) and q not in gone
               for q in range(node * replication, (node + 1) * replication))
