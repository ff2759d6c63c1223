"""Roofline's own launcher: a coordinator that hands out ranks, addresses and a job token, and
``python -m roofline.comm.launch -n K script.py ARGS`` to start K local worker processes.

The coordinator is a small TCP server (like Vowpal Wabbit's spanning-tree server): each worker
registers its rank and listening address with the job token; a registration with a wrong token
or a rank already taken is refused (the first one wins); once all ``K`` ranks have registered,
every worker receives the list of addresses.  Workers find the coordinator through environment
variables (:func:`roofline.comm.from_environment`).
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

    Attributes
    ----------
    address : (str, int)
    token : bytes
    refused : list of str
        Why registrations were refused (foreign connections, duplicate ranks).
    """

    def __init__(self, size: int, token: bytes | None = None, host: str = "127.0.0.1",
                 timeout: float = 120.0):
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        self.size = int(size)
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
        while len(self._clients) < self.size and not self._closed:
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
            try:
                conn.settimeout(5.0)
                line = conn.makefile("rb").readline(4096)
                msg = json.loads(line)
                if msg.get("token") != self.token.hex():
                    self._refuse(conn, f"wrong job token from {addr[0]}:{addr[1]}")
                    continue
                rank = int(msg["rank"])
                if not 0 <= rank < self.size:
                    self._refuse(conn, f"rank {rank} outside [0, {self.size})")
                    continue
                if rank in self._clients:
                    self._refuse(conn, f"duplicate rank {rank} (the first registration wins)")
                    continue
                self._clients[rank] = (conn, (msg["host"], int(msg["port"])))
            except (ValueError, KeyError, TypeError, OSError) as e:
                self._refuse(conn, f"a malformed registration from {addr[0]}:{addr[1]} ({e})")
        if len(self._clients) == self.size:
            addresses = [self._clients[r][1] for r in range(self.size)]
            reply = (json.dumps({"ok": True, "addresses": addresses}) + "\n").encode()
            for conn, _ in self._clients.values():
                try:
                    conn.sendall(reply)
                except OSError:
                    pass
        for conn, _ in self._clients.values():
            conn.close()
        self._sock.close()

    def close(self):
        """Stop accepting registrations and close the listening socket (idempotent)."""
        self._closed = True
        try:
            self._sock.close()
        except OSError:
            pass


def _pump(stream, rank, out):
    for line in iter(stream.readline, b""):
        out.write(f"[rank {rank}] ".encode() + line)
        out.flush()
    stream.close()


def launch(n: int, argv: list[str], *, timeout: float = 120.0, python: str | None = None,
           env: dict | None = None, grace: float | None = None, replication: int = 1) -> int:
    """Run ``python argv...`` as ``n`` ranks of one job; return the exit code.

    Each worker's output is prefixed with its rank.  If a rank fails, the others get ``grace``
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
    coord = Coordinator(n, timeout=timeout)
    procs = []
    out = sys.stdout.buffer
    pumps = []
    try:
        for r in range(n):
            penv = {**os.environ, **(env or {}), **coord.env(r, timeout)}
            p = subprocess.Popen([python or sys.executable, *argv], env=penv,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 start_new_session=True)
            procs.append(p)
            t = threading.Thread(target=_pump, args=(p.stdout, r, out), daemon=True)
            t.start()
            pumps.append(t)
        failed = None
        reported = set()
        first_fail_time = None
        grace = timeout if grace is None else grace
        while True:
            codes = [p.poll() for p in procs]
            for r, c in enumerate(codes):
                if c not in (None, 0) and r not in reported:
                    reported.add(r)
                    sys.stderr.write(f"roofline.comm.launch: rank {r} exited with code {c}\n")
                    if failed is None and not _node_survives(codes, r, r_):
                        failed = (r, c)
                        first_fail_time = time.monotonic()
            if failed is None and r_ > 1:  # a node whose every replica failed
                for r, c in enumerate(codes):
                    if c not in (None, 0) and not _node_survives(codes, r, r_):
                        failed = (r, c)
                        first_fail_time = time.monotonic()
                        break
            if all(c is not None for c in codes):
                break
            if failed is None and r_ > 1 and all(
                    0 in codes[a:a + r_] for a in range(0, n, r_)):
                slow = [r for r, c in enumerate(codes) if c is None]
                sys.stderr.write(f"roofline.comm.launch: every node has finished; retiring the "
                                 f"slower replicas {slow}\n")
                break  # the finally block kills them
            if failed is not None and time.monotonic() - first_fail_time > grace:
                sys.stderr.write("roofline.comm.launch: killing the remaining ranks\n")
                break
            time.sleep(0.05)
    finally:
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
    if failed is not None:
        return failed[1] if failed[1] > 0 else 1
    return 0


def _node_survives(codes, rank, replication):
    """Whether a replica of ``rank``'s node is still running or exited 0."""
    if replication == 1:
        return False
    node = rank // replication
    return any(codes[q] in (None, 0)
               for q in range(node * replication, (node + 1) * replication))
