"""A disk-simulated cluster whose nodes live on disk (BIDMach's "simulating a cluster on a single
node"; issue 35).

:class:`DiskNodeCluster` simulates ``n_nodes`` nodes on one machine whose memory need not hold
them: every node's state (its model shard, data cursor, solver state: a dict of arrays and
scalars) is a checksummed file, and the nodes run *in turn*, at most ``resident`` of them in
memory at once (and, with ``memory_cap``, at most that many bytes of node data).  A round is

1. **compute**: each node in turn loads its state and the result of the previous round's
   collective, runs the user's ``step`` until its next collective (the step returns the
   collective's request: :meth:`Node.allreduce` or :meth:`Node.sparse_allreduce`), saves its
   state and its contribution, and leaves memory;
2. **the collective**, as Kylix layers of file exchanges: in each layer every node in turn
   loads what it holds, reads the messages its group sent it in the previous layer, reduces
   them, and writes its outgoing messages for the next layer, batched into *packets* of at
   least ``packet_bytes`` (one file each; by default the disk roofline's corner, so every
   file write is at least half bandwidth-bound); the configuration of a sparse all-reduce, the
   reduce going down and the sums coming back up are layers of the same kind;
3. each node's result is saved next to its state, for its next step.

The arithmetic is that of :class:`~roofline.comm.KylixCommunicator` step for step (the same
unions, scatter-adds in group-member order and reduce-scatter order), so with the same degrees
the results are those of the TCP, MPI or threads backends bit for bit.

Files
-----
A node's files (state, contribution, plan, result) use one format: a header with a magic
number, the lengths and a CRC-32 over a JSON description and the arrays' bytes, each array
64-byte aligned; a file that fails its checks is a :class:`StateError` naming the node and the
file, never read as valid.  Messages are slices of packet files, each with its own header
(magic, sender, receiver, phase, length, CRC-32), checked when read
(:class:`~roofline.comm.MessageError` naming the packet); a packet is opened once per phase,
its receivers sharing the descriptor.  A node's state file is written to a temporary name and
renamed into place (``fsync`` first when ``fsync=True``): a crash leaves the old state or the
new one.  The other files are transient and overwritten in place, round after round (a packet
phase after phase), because creating, renaming and removing a file costs the file system
10-100x an overwrite: a packet's messages carry their phase and a node's transient file
(contribution, plan, result) its round's tag, each checked with its CRC-32 on every read, so a
stale file (a write that was lost, a file left from an earlier round or run) is an error naming
it, never data; the state file names the tag of the result its node must read next.  The
CRC-32 is ISA-L's when the optional ``isal`` package is installed, else zlib's: the same
checksum, so the same files.

Time
----
The I/O of a round is counted (files and bytes written and read, the seconds spent in the
calls), and :meth:`~roofline.kernels.DiskRoofline.io_time` of the disk roofline predicts its
time, so a run says how close it came to the disk's ceiling.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import shutil
import struct
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ._base import CommError, MessageError, MismatchError, check_reducible
from ._kylix import (
    _as_indices,
    _bounds,
    _check_degrees,
    _decode,
    _encode,
    _gather,
    _is_sorted,
    _members,
    _scatter_add,
    _split_sorted,
    _unique,
    kylix_degrees,
)

__all__ = ["DiskNodeCluster", "Node", "NodeStore", "StateError", "load_state", "save_state"]

logger = logging.getLogger(__name__)

_SMAGIC = b"RFLS"
_SVERSION = 1
_SHEAD = struct.Struct("<4sIQQI4x")  # magic, version, JSON length, payload length, CRC-32
_ALIGN = 64
_MMAGIC = b"RFLM"
_MHEAD = struct.Struct("<4sIIIQI4x")  # magic, src, dst, phase, payload length, CRC-32: 32 bytes
_MPRE = struct.Struct("<4sIIIQ")  # the header's first 24 bytes, which its CRC-32 covers
_MCRC = struct.Struct("<I4x")


class StateError(CommError):
    """A node's file is missing, truncated or corrupted (it failed its checks).

    Parameters
    ----------
    message : str
        What is wrong (naming the node and the file).
    node : int, optional
        The node whose file it is.
    path : str, optional
        The file.
    """

    def __init__(self, message, node=None, path=None):
        super().__init__(message)
        self.node, self.path = node, path


# ---------------------------------------------------------------------------------------------
# the checksum: CRC-32 (zlib's polynomial), by ISA-L when installed


_CRC32 = None


def _crc32_fn():
    """The CRC-32 function in use: ``isal.isal_zlib.crc32`` when the optional ``isal`` package
    is installed (the same CRC-32 as ``zlib.crc32``, 6-15x faster by carry-less
    multiplication: the files are the same either way), else ``zlib.crc32``."""
    global _CRC32
    if _CRC32 is None:
        fn = zlib.crc32
        try:
            from isal import isal_zlib
        except ImportError:
            pass
        else:
            probe = bytes(range(256)) * 17
            if isal_zlib.crc32(probe, 7) == zlib.crc32(probe, 7):
                fn = isal_zlib.crc32
        _CRC32 = fn
    return _CRC32


_CRC_RATE = {}


def _checksum_bandwidth(clock="wall"):
    """Bytes/s of the CRC-32 in use over a buffer beyond the caches, measured once per clock as
    :func:`roofline.kernels.measure_disk` measures zlib's (``"wall"`` or ``"cpu"`` time)."""
    fn = _crc32_fn()
    if clock not in _CRC_RATE:
        now = time.perf_counter if clock == "wall" else time.process_time
        whole = np.tile(np.frombuffer(os.urandom(4 << 20), np.uint8), 8)
        ts = []
        for _ in range(5):
            t0 = now()
            fn(whole)
            ts.append(now() - t0)
        _CRC_RATE[clock] = whole.size / max(float(np.median(ts)), 1e-9)
    return _CRC_RATE[clock]


def _checksum_roofline(disk):
    """``disk`` with the checksum rate of the CRC-32 this module computes (a
    :class:`~roofline.kernels.DiskRoofline` measures ``zlib.crc32``'s; with ``isal`` installed
    the files are checksummed by ISA-L's, and a prediction must count that rate).

    Parameters
    ----------
    disk : DiskRoofline

    Returns
    -------
    DiskRoofline
        ``disk`` itself when the CRC is zlib's, else a copy with ``checksum_bandwidth``
        measured (once, on the same clock as ``disk``).
    """
    if _crc32_fn() is zlib.crc32 or not getattr(disk, "checksum_bandwidth", 0):
        return disk
    return dataclasses.replace(disk, checksum_bandwidth=_checksum_bandwidth(
        getattr(disk, "clock", "wall")))


_OVERWRITE = {}


def _overwrite_latency(root, clock, fsync=False, n=200):
    """Median seconds of overwriting a 4 KiB file in place under ``root`` (cached per file
    system, clock and ``fsync``)."""
    key = (os.stat(root).st_dev, clock, bool(fsync))
    if key not in _OVERWRITE:
        now = time.perf_counter if clock == "wall" else time.process_time
        d = os.path.join(root, f".roofline-overwrite-{os.getpid()}")
        os.makedirs(d, exist_ok=True)
        try:
            small = os.urandom(4096)
            paths = [os.path.join(d, f"s{i}") for i in range(n)]
            for p in paths:
                with open(p, "wb") as f:
                    f.write(small)
            ts = []
            for p in paths:
                t0 = now()
                fd = os.open(p, os.O_WRONLY | os.O_CREAT, 0o644)
                os.write(fd, small)
                if fsync:
                    os.fsync(fd)
                os.close(fd)
                ts.append(now() - t0)
        finally:
            shutil.rmtree(d, ignore_errors=True)
        _OVERWRITE[key] = float(np.median(ts))
    return _OVERWRITE[key]


_SLICE = {}


def _slice_latency(root, clock, n=200):
    """Median seconds of one ``pread`` of a 4 KiB slice from a file already open under
    ``root`` (in the page cache; cached per file system and clock)."""
    key = (os.stat(root).st_dev, clock)
    if key not in _SLICE:
        now = time.perf_counter if clock == "wall" else time.process_time
        path = os.path.join(root, f".roofline-slice-{os.getpid()}")
        try:
            with open(path, "wb") as f:
                f.write(os.urandom(n * 4096))
            buf = memoryview(np.empty(4096, np.uint8))
            fd = os.open(path, os.O_RDONLY)
            try:
                ts = []
                for i in range(n):
                    t0 = now()
                    os.preadv(fd, [buf], i * 4096)
                    ts.append(now() - t0)
            finally:
                os.close(fd)
        finally:
            try:
                os.unlink(path)
            except OSError:
                pass
        _SLICE[key] = float(np.median(ts))
    return _SLICE[key]


# ---------------------------------------------------------------------------------------------
# file I/O, counted


class _IO:
    """File writes and reads with their counts and seconds (thread-safe)."""

    def __init__(self, fsync=False):
        self.fsync = bool(fsync)
        self._lock = threading.Lock()
        self._local = threading.local()
        self.reset()

    def reset(self):
        self.files_written = self.bytes_written = self.files_read = self.bytes_read = 0
        self.slices_read = self.compute_bytes = self.files_overwritten = 0
        self.messages_read = self.files_opened = 0
        self.seconds = self.cpu_seconds = 0.0
        self.step_seconds = self.step_cpu_seconds = 0.0

    def work(self, nbytes):
        """Count ``nbytes`` of compulsory memory traffic of the collective's arithmetic (the
        inputs it must read and the outputs it must write once: sums, unions, gathers)."""
        with self._lock:
            self.compute_bytes += int(nbytes)

    def stepped(self, seconds, cpu):
        """Count a user's step (its wall and CPU seconds)."""
        with self._lock:
            self.step_seconds += seconds
            self.step_cpu_seconds += cpu

    def _count(self, written, nbytes, seconds, files=1, cpu=0.0, slices=1, messages=0):
        with self._lock:
            if written:
                self.files_written += files
                self.bytes_written += nbytes
            else:
                self.files_read += files
                self.bytes_read += nbytes
                self.slices_read += slices
                self.messages_read += messages
            self.seconds += seconds
            self.cpu_seconds += cpu
        self._local.held = getattr(self._local, "held", 0) + nbytes

    def turn_bytes(self, reset=False):
        """Bytes this thread read and wrote since the last reset (a turn's footprint)."""
        held = getattr(self._local, "held", 0)
        if reset:
            self._local.held = 0
        return held

    def write(self, path, bufs):
        t0, c0 = time.perf_counter(), time.thread_time()
        tmp = path + ".tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                n = _write_all(fd, bufs)
                if self.fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except OSError as e:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise CommError(f"writing {path} failed: {e}") from e
        self._count(True, n, time.perf_counter() - t0, cpu=time.thread_time() - c0)
        return n

    def overwrite(self, path, bufs, sizes, raw=True):
        """Write ``bufs`` over the file ``path`` in place (created when missing, truncated when
        not yet in ``sizes``; a longer previous content, its size in ``sizes``, is
        truncated): a spool's packet files and a node's transient files (contribution, plan,
        result) are reused, so a write is one ``open`` of an existing file and its ``writev``
        instead of a new file's creation, rename and later unlink.  Not atomic: a packet's
        message is only ever read through its header (phase, sender, receiver, length) and
        its CRC-32, a node's transient file through its tag (its round) and its CRC-32, so a
        stale or torn file is an error, never data.  ``raw``: every buffer is ``bytes`` or a
        1-D byte ``memoryview`` (see :func:`_write_all`)."""
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            flags = os.O_WRONLY | os.O_CREAT | (0 if path in sizes else os.O_TRUNC)
            fd = os.open(path, flags, 0o644)
            try:
                n = _write_all(fd, bufs, raw=raw)
                if sizes.get(path, 0) > n:
                    os.ftruncate(fd, n)
                if self.fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as e:
            sizes.pop(path, None)
            raise CommError(f"writing {path} failed: {e}") from e
        existed = path in sizes
        sizes[path] = n
        self._count(True, n, time.perf_counter() - t0, cpu=time.thread_time() - c0)
        if existed:
            with self._lock:
                self.files_overwritten += 1
        return n

    def read(self, path, offset=0, length=None):
        """The bytes of ``path`` from ``offset`` (all, or ``length``) in a new aligned buffer."""
        t0, c0 = time.perf_counter(), time.thread_time()
        fd = os.open(path, os.O_RDONLY)
        try:
            if length is None:
                length = os.fstat(fd).st_size - offset
            buf = _pread(fd, offset, length)
        finally:
            os.close(fd)
        self._count(False, buf.size, time.perf_counter() - t0, cpu=time.thread_time() - c0)
        return buf

    def open(self, path):
        """A file descriptor of ``path`` to read slices of (counted as one file read)."""
        t0, c0 = time.perf_counter(), time.thread_time()
        fd = os.open(path, os.O_RDONLY)
        with self._lock:
            self.files_read += 1
            self.files_opened += 1
            self.seconds += time.perf_counter() - t0
            self.cpu_seconds += time.thread_time() - c0
        return fd


def _pread(fd, offset, length):
    buf = np.empty(length, np.uint8)
    got = 0
    while got < length:
        k = os.preadv(fd, [buf[got:]], offset + got)
        if k == 0:
            break
        got += k
    return buf[:got]


#: At most this many buffers per ``writev`` (POSIX's IOV_MAX is at least 16; Linux's 1024).
_IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 16


def _write_all(fd, bufs, raw=False):
    """Write the concatenation of ``bufs`` to ``fd`` by ``writev`` (few system calls);
    ``raw``: every buffer is already ``bytes`` or a 1-D byte ``memoryview`` (its ``len`` its
    size), written as it is."""
    if raw:
        views = bufs
    else:
        views = []
        for b in bufs:  # bytes and byte views as they are (len is their size), others cast
            if type(b) is not bytes and not (type(b) is memoryview and b.format == "B"
                                             and b.ndim == 1):
                b = memoryview(b).cast("B")
            if len(b):
                views.append(b)
    total = 0
    while views:
        group = views[:_IOV_MAX]
        n = os.writev(fd, group)
        total += n
        if n == sum(map(len, group)):  # all of it (the usual case)
            views = views[len(group):]
            continue
        # drop what was written (a short write leaves the rest of a buffer)
        i = 0
        while i < len(group) and n >= len(group[i]):
            n -= len(group[i])
            i += 1
        views = views[i:]
        if n:
            views[0] = memoryview(views[0])[n:]
    return total


#: Segments of an all-gather are written from their own buffers when they average at least
#: this many bytes, else joined into one first.
_GATHER_MIN = 1 << 16


def _pad(n):
    return (-n) % _ALIGN


def _describe_state(state, what):
    """(JSON description, array buffers) of a state dict."""
    if not isinstance(state, dict):
        raise TypeError(f"{what} must be a dict of arrays and scalars, got "
                        f"{type(state).__name__}")
    arrays, scalars, bufs = [], {}, []
    off = 0
    for key, v in state.items():
        if not isinstance(key, str):
            raise TypeError(f"{what}: keys must be strings, got {key!r}")
        if isinstance(v, _Gathered):
            arrays.append([key, v.dtype.str, list(v.shape), off, v.nbytes, False])
            bufs.extend(p.view(np.uint8) for p in v.parts if p.size)
            bufs.append(b"\0" * _pad(v.nbytes))
            off += v.nbytes + _pad(v.nbytes)
        elif isinstance(v, (np.ndarray, np.generic)):
            a = np.asarray(v)
            if not a.flags.c_contiguous:
                a = np.ascontiguousarray(a)
            if a.dtype.hasobject or a.dtype.kind not in "biufcSUmM":
                raise TypeError(f"{what}[{key!r}]: arrays of dtype {a.dtype} cannot be saved "
                                "(numbers, booleans, fixed-width strings only)")
            arrays.append([key, a.dtype.str, list(a.shape), off, a.nbytes,
                           isinstance(v, np.generic)])
            bufs.append(a.reshape(-1).view(np.uint8) if a.size else b"")
            bufs.append(b"\0" * _pad(a.nbytes))
            off += a.nbytes + _pad(a.nbytes)
        elif v is None or isinstance(v, (bool, int, float, str)):
            scalars[key] = v
        else:
            raise TypeError(f"{what}[{key!r}] must be a numpy array or a scalar (int, float, "
                            f"bool, str, None), got {type(v).__name__}")
    return {"arrays": arrays, "scalars": scalars}, bufs, off


class _Gathered:
    """An array given as its consecutive parts in C order (an all-gather's received segments),
    written to packets and files from the parts themselves: no concatenation copy."""

    __slots__ = ("parts", "dtype", "shape", "nbytes")

    def __init__(self, parts, dtype, shape):
        self.parts = [np.ascontiguousarray(p).reshape(-1) for p in parts]
        self.dtype, self.shape = np.dtype(dtype), tuple(int(k) for k in shape)
        self.nbytes = sum(p.nbytes for p in self.parts)

    def wire(self):
        """The buffers of :func:`~roofline.comm._kylix._encode` of the whole array, and their
        length."""
        head = _AHEAD.pack(self.dtype.str.encode().ljust(4), len(self.shape)) + struct.pack(
            f"<{len(self.shape)}q", *self.shape)
        return [head, *(memoryview(p).cast("B") for p in self.parts)], len(head) + self.nbytes


def _state_bufs(state, what, tag=None, result=None):
    """The buffers of a node file of ``state``; ``tag`` (a transient file's round) and
    ``result`` (a state file's: the tag its node's result must carry) are recorded in its
    description, under its CRC-32."""
    desc, bufs, n = _describe_state(state, what)
    if tag is not None:
        desc["tag"] = tag
    if result is not None:
        desc["result"] = result
    js = json.dumps(desc, allow_nan=True).encode()
    js += b" " * _pad(_SHEAD.size + len(js))
    crc32 = _crc32_fn()
    crc = crc32(js)
    for b in bufs:
        crc = crc32(b, crc)
    head = _SHEAD.pack(_SMAGIC, _SVERSION, len(js), n, crc)
    return [head, js, *bufs]


def _parse_state(buf, path, node):
    """The state dict in ``buf`` (the file's bytes), or :class:`StateError`."""
    return _parse(buf, path, node)[0]


def _parse(buf, path, node):
    """The state dict in ``buf`` (the file's bytes) and the file's description (its ``tag``
    and ``result`` when recorded), or :class:`StateError`."""
    who = "" if node is None else f"node {node}: "
    if buf.size < _SHEAD.size:
        raise StateError(f"{who}state file {path} is truncated ({buf.size} bytes, shorter than "
                         "its header)", node, path)
    magic, version, njs, n, crc = _SHEAD.unpack_from(buf)
    if magic != _SMAGIC or version != _SVERSION:
        raise StateError(f"{who}{path} is not a Roofline state file (magic {magic!r}, version "
                         f"{version})", node, path)
    if buf.size != _SHEAD.size + njs + n:
        raise StateError(f"{who}state file {path} has {buf.size} bytes, its header says "
                         f"{_SHEAD.size + njs + n} (truncated)", node, path)
    body = buf[_SHEAD.size:]
    if _crc32_fn()(body) != crc:
        raise StateError(f"{who}state file {path} fails its CRC-32 (corrupted on disk)",
                         node, path)
    desc = json.loads(bytes(body[:njs]))
    data = body[njs:]
    out = {}
    for key, dt, shape, off, nbytes, scalar in desc["arrays"]:
        a = data[off:off + nbytes].view(np.dtype(dt)).reshape(shape)
        out[key] = a[()] if scalar else a
    out.update(desc["scalars"])
    return out, desc


def save_state(path, state, *, fsync=False):
    """Write ``state`` (a dict of numpy arrays and scalars) to the checksummed file ``path``.

    Arrays keep their dtype and shape (saved C-contiguous); numpy scalars keep their type;
    Python ``int``, ``float``, ``bool``, ``str`` and ``None`` are exact (floats round-trip bit
    for bit).

    Parameters
    ----------
    path : str
        The file (written to ``path + ".tmp"`` and renamed into place).
    state : dict
        String keys; numpy arrays (numbers, booleans, fixed-width strings) and scalars.
    fsync : bool
        ``fsync`` before the rename (durable).

    Returns
    -------
    int
        Bytes written.

    Raises
    ------
    TypeError
        A value that is not an array or a scalar, or a non-string key (the message names it).
    """
    return _IO(fsync).write(str(path), _state_bufs(state, "state"))


def load_state(path, *, node=None):
    """The state dict saved by :func:`save_state` in ``path``.

    Parameters
    ----------
    path : str
    node : int, optional
        The node the file belongs to (named in errors).

    Returns
    -------
    dict
        Arrays (writable views of one buffer read from the file) and scalars.

    Raises
    ------
    StateError
        The file is missing, truncated, not a state file, or fails its CRC-32 (the message
        names the node and the file).
    """
    try:
        buf = _IO().read(str(path))
    except FileNotFoundError:
        raise StateError(f"{'' if node is None else f'node {node}: '}state file {path} is "
                         "missing", node, str(path)) from None
    return _parse_state(buf, str(path), node)


class NodeStore:
    """The checksummed files of ``n_nodes`` simulated nodes: ``root/nodes/<rank>/<name>.rfs``.

    A file saved without a ``tag`` (a node's state) is written to a temporary name and renamed
    into place (atomic: a crash leaves the old file or the new one).  A file saved with a
    ``tag`` (a node's transient files: its contribution, its plan, its result, one per round)
    is overwritten in place, the tag recorded under its CRC-32, and loaded with the tag
    expected: a file that does not carry it (a write that was lost, a file left from an
    earlier round or run) is a :class:`StateError`, never read as data.

    Parameters
    ----------
    root : str
    n_nodes : int
    io : _IO, optional
        The counted I/O to use (the cluster's).
    """

    def __init__(self, root, n_nodes, io=None):
        self.root, self.n_nodes = str(root), int(n_nodes)
        self.io = _IO() if io is None else io
        self._made = set()
        self._sizes = {}  # file overwritten in place -> its size

    def path(self, node, name="state"):
        """The file of ``node``'s ``name``.

        Parameters
        ----------
        node : int
        name : str

        Returns
        -------
        str
        """
        return os.path.join(self.root, "nodes", str(int(node)), f"{name}.rfs")

    def save(self, node, state, name="state", *, tag=None):
        """Save ``state`` as ``node``'s ``name`` (see :func:`save_state`).

        Parameters
        ----------
        node : int
        state : dict
            Arrays and scalars.
        name : str
        tag : str, optional
            None: the file is written to a temporary name and renamed into place (atomic).
            A string (the round the file belongs to): the file is overwritten in place, the
            tag recorded under its CRC-32, for :meth:`load` with the same ``tag``.

        Returns
        -------
        int
            The bytes written.
        """
        return self._save(node, state, name, tag=tag)

    def _save(self, node, state, name, tag=None, result=None):
        if node not in self._made:
            os.makedirs(os.path.dirname(self.path(node, name)), exist_ok=True)
            self._made.add(node)
        path = self.path(node, name)
        bufs = _state_bufs(state, f"node {node}'s {name}", tag=tag, result=result)
        if tag is None:
            return self.io.write(path, bufs)
        return self.io.overwrite(path, bufs, self._sizes, raw=False)

    def load(self, node, name="state", *, tag=None):
        """``node``'s ``name`` (see :func:`load_state`).

        Parameters
        ----------
        node : int
        name : str
        tag : str, optional
            The tag the file must carry (that of :meth:`save`); None: any.

        Returns
        -------
        dict
            The state saved.

        Raises
        ------
        StateError
            The file is missing, fails its checks, or does not carry ``tag`` (a stale file:
            a write that was lost, or a file left from an earlier round); the message names
            the node and the file.
        """
        return self._load(node, name, tag)[0]

    def _load(self, node, name, tag=None):
        """(the dict, the file's description) of ``node``'s ``name``, checked for ``tag``."""
        path = self.path(node, name)
        try:
            buf = self.io.read(path)
        except FileNotFoundError:
            raise StateError(f"node {node}: its {name} file {path} is missing", node,
                             path) from None
        out, desc = _parse(buf, path, node)
        if tag is not None and desc.get("tag") != tag:
            raise StateError(f"node {node}: its {name} file {path} is stale: it carries tag "
                             f"{desc.get('tag')!r}, this round's is {tag!r} (a write was "
                             "lost, or the file is left from an earlier round)", node, path)
        return out, desc

    def exists(self, node, name="state"):
        """Whether ``node``'s ``name`` was saved.

        Parameters
        ----------
        node : int
        name : str

        Returns
        -------
        bool
        """
        return os.path.exists(self.path(node, name))

    def remove(self, node, name):
        """Delete ``node``'s ``name`` (nothing when it does not exist).

        Parameters
        ----------
        node : int
        name : str
        """
        path = self.path(node, name)
        self._sizes.pop(path, None)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


# ---------------------------------------------------------------------------------------------
# packets: a node's outgoing messages of one layer, batched into files of >= packet_bytes


_AHEAD = struct.Struct("<4sB3x")  # an array message's header (_kylix._encode): dtype, ndim
_DTYPES = {np.dtype(t).str.encode().ljust(4): np.dtype(t) for t in (
    "f8", "f4", "i8", "i4", "u8", "u4", "i2", "u2", "i1", "u1", "c16", "c8", "f2")}
#: The wire code of each of those dtypes (looked up once per message, not built from its str).
_CODES = {v: k for k, v in _DTYPES.items()}
#: Those dtypes by their wire code read as a little-endian 32-bit integer (:func:`_check_heads`).
_DTYPE_OF_CODE = {int.from_bytes(k, "little"): v for k, v in _DTYPES.items()}

def _decode_array(buf):
    """The array in a message's payload ``buf`` (a view of it when aligned), as
    :func:`~roofline.comm._kylix._decode` decodes it."""
    if buf.size >= _AHEAD.size:
        code, ndim = _AHEAD.unpack_from(buf)
        dtype = _DTYPES.get(code)
        off = _AHEAD.size + 8 * ndim
        if dtype is not None and buf.size >= off:
            shape = struct.unpack_from(f"<{ndim}q", buf, _AHEAD.size)
            if math.prod(shape) * dtype.itemsize == buf.size - off \
                    and not (off + buf.ctypes.data) % dtype.alignment:
                return buf[off:].view(dtype).reshape(shape)
    return _decode(buf)  # the general path (and its errors)


#: An array message's header with one dimension (``_AHEAD`` and the length).
_AHEAD1 = struct.Struct("<4sB3xq")


def _encode1(a):
    """``(bufs, nbytes)`` of the array message of ``a`` (the wire format of
    :func:`~roofline.comm._kylix._encode`), without its general path's overheads for a
    contiguous 1-D array of a plain dtype."""
    if a.ndim == 1 and a.flags.c_contiguous:
        code = _CODES.get(a.dtype)
        if code is not None:
            return [_AHEAD1.pack(code, 1, a.shape[0]), memoryview(a).cast("B")], \
                _AHEAD1.size + a.nbytes
    bufs = _encode(a)
    return bufs, len(bufs[0]) + bufs[1].nbytes


# ---------------------------------------------------------------------------------------------
# a receive's headers checked by a compiled loop (numba, on first use: ``import roofline.comm``
# does not import numba)


def _check_heads(table, buf, ats, got, lens, srcs, dst, phase, pcrcs, elems):
    """The first message (from ``srcs[i]``, at ``buf[ats[i]:]``, ``got[i]`` of ``lens[i]``
    bytes read) whose header is not the one expected (``1``: ``_MHEAD``'s magic, sender,
    receiver ``dst``, ``phase`` and payload length) or whose CRC-32 over its header's first 24
    bytes continued from its payload's (``pcrcs[i]``) fails (``2``), as ``(i, kind, -1)``;
    all good: ``(-1, 0, code)``, ``code`` the array messages' common dtype code (the first 4
    bytes of ``_AHEAD1``, little-endian) when every payload is a 1-D array message of that
    code (``elems[i]`` its length field, between 0 and its payload's bytes), else ``-1`` (the
    general decoding)."""
    code = np.int64(-1)
    uniform = True
    for i in range(ats.shape[0]):
        at = ats[i]
        n = lens[i]
        if got[i] != n:
            return i, 1, np.int64(-1)
        ok = buf[at] == 82 and buf[at + 1] == 70 and buf[at + 2] == 76 and buf[at + 3] == 77
        v = 0
        for j in range(4):
            v |= np.int64(buf[at + 4 + j]) << (8 * j)
        ok = ok and v == srcs[i]
        v = 0
        for j in range(4):
            v |= np.int64(buf[at + 8 + j]) << (8 * j)
        ok = ok and v == dst
        v = 0
        for j in range(4):
            v |= np.int64(buf[at + 12 + j]) << (8 * j)
        ok = ok and v == phase
        v = 0
        for j in range(8):
            v |= np.int64(buf[at + 16 + j]) << (8 * j)
        ok = ok and v == n - 32
        if not ok:
            return i, 1, np.int64(-1)
        v = 0
        for j in range(4):
            v |= np.int64(buf[at + 24 + j]) << (8 * j)
        c = pcrcs[i] ^ 0xFFFFFFFF  # zlib.crc32(buf[at:at + 24], pcrcs[i]), table-driven
        for j in range(at, at + 24):
            c = table[(c ^ buf[j]) & 0xFF] ^ (c >> 8)
        if c ^ 0xFFFFFFFF != v:
            return i, 2, np.int64(-1)
        # the payload's array header (_AHEAD1): dtype code, ndim 1, length
        if uniform:
            if n - 32 < 16 or buf[at + 36] != 1:
                uniform = False
                continue
            v = 0
            for j in range(4):
                v |= np.int64(buf[at + 32 + j]) << (8 * j)
            if i == 0:
                code = v
            elif v != code:
                uniform = False
                continue
            v = 0
            for j in range(8):
                v |= np.int64(buf[at + 40 + j]) << (8 * j)
            if v < 0 or v > n:
                uniform = False
                continue
            elems[i] = v
    return -1, 0, code if uniform else np.int64(-1)


def _union_bits(cat, union, maps, max_words):
    """The sorted distinct values of ``cat`` written to ``union[:c]`` and each entry's
    position in them to ``maps`` (``np.unique(cat, return_inverse=True)``), by a bitmap over
    ``[min(cat), max(cat)]``: one pass to set the bits, one over the words (a population count
    per word: the ranks) and one to look the entries up, linear in ``cat`` and the range's
    words; returns ``c``, or ``-1`` (nothing written) when the range needs more than
    ``max_words`` 64-bit words (the caller sorts instead)."""
    n = cat.shape[0]
    if n == 0:
        return 0
    lo = cat[0]
    hi = cat[0]
    for i in range(1, n):
        x = cat[i]
        if x < lo:
            lo = x
        elif x > hi:
            hi = x
    nw = ((hi - lo) >> 6) + 1
    if nw > max_words:
        return -1
    bits = np.zeros(nw, np.uint64)
    one = np.uint64(1)
    m1 = np.uint64(0x5555555555555555)
    m2 = np.uint64(0x3333333333333333)
    m4 = np.uint64(0x0F0F0F0F0F0F0F0F)
    h01 = np.uint64(0x0101010101010101)
    for i in range(n):
        d = cat[i] - lo
        bits[d >> 6] |= one << np.uint64(d & 63)
    ranks = np.empty(nw, np.int64)  # set bits in the words before each word
    c = 0
    for w in range(nw):
        ranks[w] = c
        b = bits[w]
        base = lo + (w << 6)
        while b:
            t = b & (~b + one)  # the lowest set bit; its index = popcount(t - 1)
            x = t - one
            x = x - ((x >> one) & m1)
            x = (x & m2) + ((x >> np.uint64(2)) & m2)
            x = (x + (x >> np.uint64(4))) & m4
            union[c] = base + np.int64((x * h01) >> np.uint64(56))
            c += 1
            b ^= t
    for i in range(n):
        d = cat[i] - lo
        x = bits[d >> 6] & ((one << np.uint64(d & 63)) - one)  # the set bits below d's
        x = x - ((x >> one) & m1)
        x = (x & m2) + ((x >> np.uint64(2)) & m2)
        x = (x + (x >> np.uint64(4))) & m4
        maps[i] = ranks[d >> 6] + np.int64((x * h01) >> np.uint64(56))
    return c


def _scatter_add_seq(acc, pos, vals):
    """``acc[pos[i]] += vals[i]`` for ``i`` in order (1-D; ``pos`` in bounds, checked by the
    caller): the group's received blocks summed in member order by one loop, each entry
    adding in the order the per-block scatter-adds of ``KylixCommunicator`` add."""
    for i in range(pos.shape[0]):
        acc[pos[i]] += vals[i]


def _gather_seq(src, pos, out):
    """``out[i] = src[pos[i]]`` (1-D; ``pos`` in bounds, checked by the caller)."""
    for i in range(pos.shape[0]):
        out[i] = src[pos[i]]


def _native_loops(pread, crc32, check_heads):
    """The receive's compiled loops over ctypes functions (numba treats a closure's ctypes
    functions as constants): ``preads`` and ``receive``, to be compiled by ``njit``.

    ``preads(fds, offs, buf, ats, lens, got)``: ``got[i]`` = the bytes read by ``pread`` of
    message ``i`` (``lens[i]`` bytes at ``offs[i]`` of the open file ``fds[i]``) into
    ``buf[ats[i]:]``, short reads continued; ``-1`` when a ``pread`` failed (the caller reads
    it again in Python, for its error).  ``receive(table, buf, ats, got, lens, srcs, dst,
    phase, elems)``: :func:`_check_heads` of the messages read, each payload's CRC-32
    computed by ``crc32`` (ISA-L's ``crc32_gzip_refl``) in the same compiled loop.
    """

    def preads(fds, offs, buf, ats, lens, got):
        base = buf.ctypes.data
        for i in range(ats.shape[0]):
            n = lens[i]
            k = 0
            while k < n:
                r = pread(fds[i], base + ats[i] + k, n - k, offs[i] + k)
                if r < 0:
                    k = -1
                    break
                if r == 0:
                    break
                k += r
            got[i] = k

    def receive(table, buf, ats, got, lens, srcs, dst, phase, elems):
        base = buf.ctypes.data
        m = ats.shape[0]
        pcrcs = np.zeros(m, np.int64)
        for i in range(m):
            if got[i] >= 32:
                pcrcs[i] = crc32(0, base + ats[i] + 32, got[i] - 32)
        return check_heads(table, buf, ats, got, lens, srcs, dst, phase, pcrcs, elems)

    return preads, receive


def _native():
    """``(pread, crc32)``: libc's ``pread`` and ISA-L's ``crc32_gzip_refl`` (the CRC-32 of
    ``zlib.crc32``, checked on a probe) as ctypes functions that numba calls, or None when
    either is missing (no ``isal`` package, a libc without the symbol)."""
    import ctypes

    try:
        from isal import isal_zlib

        lib = ctypes.CDLL(isal_zlib.__file__)
        crc = lib.crc32_gzip_refl
        libc = ctypes.CDLL(None, use_errno=True)
        pread = libc.pread
    except (ImportError, OSError, AttributeError):
        return None
    crc.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_uint64]
    crc.restype = ctypes.c_uint32
    pread.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int64]
    pread.restype = ctypes.c_ssize_t
    probe = bytes(range(256)) * 3
    if crc(7, probe, len(probe)) != zlib.crc32(probe, 7):
        return None
    return pread, crc


class _Kernels:
    """The compiled loops of this module (numba) and the CRC-32's table."""

    __slots__ = ("table", "check_heads", "union_bits", "scatter_add", "gather", "preads",
                 "receive")


_JIT = None
_JIT_LOCK = threading.Lock()


def _jit():
    """The CRC-32's table and the compiled :func:`_check_heads`, :func:`_union_bits`,
    :func:`_scatter_add_seq` and :func:`_gather_seq` (numba imported and the loops compiled,
    or loaded from their cache, on first use)."""
    global _JIT
    if _JIT is not None:
        return _JIT
    with _JIT_LOCK:
        if _JIT is not None:
            return _JIT
        from numba import njit

        table = np.zeros(256, np.int64)
        for b in range(256):
            c = b
            for _ in range(8):
                c = (c >> 1) ^ (0xEDB88320 if c & 1 else 0)
            table[b] = c
        k = _Kernels()
        k.table = table
        jit = njit(cache=True, nogil=True)
        k.check_heads = jit(_check_heads)
        k.union_bits = jit(_union_bits)
        k.scatter_add = jit(_scatter_add_seq)
        k.gather = jit(_gather_seq)
        k.preads = k.receive = None
        native = _native()
        if native is not None:  # closures over ctypes functions: compiled, not cached
            preads, receive = _native_loops(*native, k.check_heads)
            k.preads = njit(nogil=True)(preads)
            k.receive = njit(nogil=True)(receive)
        _JIT = k
        return _JIT


#: The most packet files a phase keeps open (a quarter of the process's file limit, <= 1024).
try:
    import resource as _resource

    _MAX_OPEN = max(16, min(1024, _resource.getrlimit(_resource.RLIMIT_NOFILE)[0] // 4))
except (ImportError, OSError, ValueError):  # pragma: no cover - platforms without resource
    _MAX_OPEN = 64


class _Spool:
    """The messages of one phase: packet files under ``dirpath`` and where each message is.

    The phases of a run alternate between two directories, and a phase's packet files
    overwrite, in place, those of the phase before the last (:meth:`_IO.overwrite`): each
    message's header carries its phase (unique in the cluster's life), sender, receiver and
    length, checked when read with its CRC-32, so a stale message left by an earlier phase is
    a :class:`~roofline.comm.MessageError`, never read as this phase's.  A packet is opened
    once in its phase, by the first node that reads from it, and kept open until the phase's
    spool is closed: its other receivers (the sender's group, in their turns) read their
    messages with one ``pread`` each.
    """

    def __init__(self, dirpath, phase, packet_bytes, io, sizes=None):
        self.dir, self.phase = dirpath, int(phase)
        self.packet_bytes = max(1, int(packet_bytes))
        self.io = io
        self.sizes = {} if sizes is None else sizes  # path -> bytes last written there
        self.index = {}  # (src, dst) -> (path, offset, length)
        self._fds = {}  # path -> the open file (the phase's readers share it)
        self._lock = threading.Lock()
        os.makedirs(dirpath, exist_ok=True)

    def send(self, src, dsts, arrays):
        """Write the array messages of node ``src``, ``arrays[j]`` to ``dsts[j]`` (a
        :class:`_Gathered` or a numpy array, in the wire format of
        :func:`~roofline.comm._kylix._encode`), as packets; returns the payload bytes sent to
        nodes other than ``src``.

        One array sent to several members (the same object) is encoded and its payload's
        CRC-32 computed once.  Encoding, checksumming and packing run in one loop over the
        messages (the per-message Python of a 1024-node round is most of its CPU beyond the
        file calls)."""
        crc32 = _crc32_fn()
        pack, mhead, mcrc = _MPRE.pack, _MHEAD.size, _MCRC.pack
        cur, where, size, npk, sent = [], [], 0, 0, 0
        found, cache = {}, {}
        phase, limit = self.phase, self.packet_bytes

        def flush():
            nonlocal cur, where, size, npk
            if not cur:
                return
            path = os.path.join(self.dir, f"{src}-{npk}.pkt")
            self.io.overwrite(path, cur, self.sizes)
            for dst, off, n in where:
                found[(src, dst)] = (path, off, n)
            cur, where, size = [], [], 0
            npk += 1

        for dst, a in zip(dsts, arrays, strict=True):
            key = id(a)
            enc = cache.get(key)
            if enc is None:
                bufs, n = a.wire() if isinstance(a, _Gathered) else _encode1(a)
                crc = 0
                for buf in bufs:
                    crc = crc32(buf, crc)
                enc = cache[key] = (bufs, n, crc)
            bufs, n, crc = enc
            if dst != src:
                sent += n
            pre = pack(_MMAGIC, src, dst, phase, n)
            n += mhead
            where.append((dst, size, n))
            cur += (pre + mcrc(crc32(pre, crc)), *bufs)
            size += n
            if size >= limit:
                flush()
        flush()
        with self._lock:
            self.index.update(found)
        return sent

    def _open(self, path, src, dst):
        """The open packet ``path`` (marked in use: :meth:`_done`), opened on first need; the
        least recently opened idle packets are closed beyond ``_MAX_OPEN``."""
        with self._lock:
            entry = self._fds.get(path)
            if entry is None:
                while len(self._fds) >= _MAX_OPEN:
                    idle = next((p for p, e in self._fds.items() if not e[1]), None)
                    if idle is None:
                        break
                    os.close(self._fds.pop(idle)[0])
                try:
                    entry = self._fds[path] = [self.io.open(path), 0]
                except OSError as e:
                    raise MessageError(f"{path}: the packet holding the message from node "
                                       f"{src} to node {dst} cannot be read: {e}") from e
            entry[1] += 1
            return entry

    def _done(self, entry):
        with self._lock:
            entry[1] -= 1

    def _open_all(self, where, srcs, dst):
        """:meth:`_open` of the packets of the messages ``where`` (from ``srcs`` to ``dst``),
        under one lock."""
        fds = self._fds
        with self._lock:
            entries = [fds.get(w[0]) for w in where]
            if all(entries):
                for e in entries:
                    e[1] += 1
                return entries
        out = []
        try:
            for w, src in zip(where, srcs, strict=True):
                out.append(self._open(w[0], src, dst))
        except BaseException:
            with self._lock:
                for e in out:
                    e[1] -= 1
            raise
        return out

    def recv_arrays(self, srcs, dst):
        """The arrays sent to ``dst`` by each of ``srcs`` (checked, in that order), read into
        one buffer (each message 64-byte aligned in it) with one ``pread`` each; one CRC-32
        per payload, then every header (magic, sender, receiver, phase, length) and its
        CRC-32 over the header continued from the payload's checked by one compiled loop
        (:func:`_check_heads`), the first bad message raising its error.  With ISA-L's CRC-32
        (the optional ``isal`` package) the ``pread`` calls and the payloads' CRC-32s are
        compiled loops too (:func:`_native`: libc's ``pread`` and ISA-L's
        ``crc32_gzip_refl`` called from numba), no Python per message."""
        index = self.index
        try:
            where = [index[(src, dst)] for src in srcs]
        except KeyError:
            src = next(s for s in srcs if (s, dst) not in index)
            raise MessageError(f"node {dst}: no message from node {src} in phase "
                               f"{self.phase}") from None
        m = len(where)
        if m == 0:
            return []
        lens = np.fromiter((w[2] for w in where), np.int64, m)
        ats = np.zeros(m, np.int64)
        if m > 1:
            ats[1:] = np.cumsum(lens + (-lens) % _ALIGN)[:-1]
        total = int(ats[-1] + lens[-1])
        buf = np.empty(total + _ALIGN, np.uint8)
        skew = (-buf.ctypes.data) % _ALIGN  # the messages 64-byte aligned in memory too
        buf = buf[skew:skew + total]
        jit = _jit()
        native = jit.receive is not None and _crc32_fn() is not zlib.crc32
        entries = []
        try:
            entries = self._open_all(where, srcs, dst)
            t0, c0 = time.perf_counter(), time.thread_time()
            if native:
                got = np.empty(m, np.int64)
                jit.preads(np.fromiter((e[0] for e in entries), np.int64, m),
                           np.fromiter((w[1] for w in where), np.int64, m), buf, ats, lens,
                           got)
                if (got < 0).any():  # a failed read: again in Python (its OSError)
                    i = int(np.flatnonzero(got < 0)[0])
                    got[i] = self._pread_into(entries[i][0], buf, int(ats[i]), where[i])
                nread = int(got.sum())
            else:
                got = [self._pread_into(e[0], buf, at, w)
                       for e, at, w in zip(entries, ats.tolist(), where, strict=True)]
                nread = sum(got)
            self.io._count(False, nread, time.perf_counter() - t0, files=0,
                           cpu=time.thread_time() - c0, slices=m, messages=m)
        finally:
            if entries:
                with self._lock:
                    for entry in entries:
                        entry[1] -= 1
        srcs = np.fromiter(srcs, np.int64, m)
        elems = np.empty(m, np.int64)
        mh = _MHEAD.size
        if native:
            i, kind, code = jit.receive(jit.table, buf, ats, got, lens, srcs, dst, self.phase,
                                        elems)
        else:
            crc32 = _crc32_fn()
            mv = memoryview(buf)  # (a memoryview's slices cost less than an array's)
            # one CRC-32 per payload in Python; every header, and its CRC-32 continued from
            # its payload's, checked by one compiled loop
            pcrc = np.array([crc32(mv[at + mh:at + n]) if n >= mh else 0
                             for at, n in zip(ats.tolist(), got, strict=True)], np.int64)
            got = np.array(got, np.int64)
            i, kind, code = jit.check_heads(jit.table, buf, ats, got, lens, srcs, dst,
                                            self.phase, pcrc, elems)
        if kind == 1:  # the first bad one, for its message
            path, off, n = where[i]
            self._check(buf[ats[i]:ats[i] + got[i]], int(srcs[i]), dst, path, off, n)
        if kind:
            raise MessageError(f"{where[i][0]}: the message from node {srcs[i]} to node {dst} "
                               "fails its CRC-32 (corrupted on disk)")
        dtype = _DTYPE_OF_CODE.get(code)
        if dtype is not None:  # 1-D arrays of one dtype (the common case): views of buf
            isz = dtype.itemsize
            beg = ats + (mh + _AHEAD1.size)  # 16-byte aligned: every dtype's alignment
            if bool((elems * isz == lens - (mh + _AHEAD1.size)).all()):
                whole = buf[:buf.size - buf.size % isz].view(dtype)
                beg //= isz
                return [whole[b:e] for b, e in zip(beg.tolist(), (beg + elems).tolist(),
                                                   strict=True)]
        # anything else (several dtypes, n-d arrays): each message by the general decoding
        return [_decode_array(buf[b:b + n]) for b, n in zip((ats + mh).tolist(),
                                                            (lens - mh).tolist(), strict=True)]

    @staticmethod
    def _pread_into(fd, buf, at, where):
        """Read the message ``where`` (path, offset, length) of the open packet ``fd`` into
        ``buf[at:]``; the bytes read (fewer at the file's end)."""
        _, off, n = where
        mv = memoryview(buf)[at:at + n]
        k = os.preadv(fd, [mv], off)
        while k < n:  # short reads (rare)
            r = os.preadv(fd, [mv[k:]], off + k)
            if r == 0:
                break
            k += r
        return k

    def _check(self, buf, src, dst, path, off, n):
        """The payload of the message read (``buf``), its header and CRC-32 checked."""
        if buf.size != n:
            raise MessageError(f"{path}: the message from node {src} to node {dst} is "
                               f"truncated ({buf.size} of {n} bytes)")
        head = buf[:_MHEAD.size]
        if _MPRE.unpack_from(head) != (_MMAGIC, src, dst, self.phase, n - _MHEAD.size):
            raise MessageError(f"{path}: at offset {off} not the message from node {src} to "
                               f"node {dst} of phase {self.phase} (a stale or misplaced "
                               "packet)")
        crc32 = _crc32_fn()
        body = buf[_MHEAD.size:]
        if crc32(head[:_MPRE.size], crc32(body)) != _MCRC.unpack_from(head, _MPRE.size)[0]:
            raise MessageError(f"{path}: the message from node {src} to node {dst} fails its "
                               "CRC-32 (corrupted on disk)")
        return body

    def close(self):
        """Close the packets opened for reading (the files stay, for a later phase to
        overwrite)."""
        with self._lock:
            fds, self._fds = list(self._fds.values()), {}
        for fd, _ in fds:
            os.close(fd)

    def remove(self):
        """Close the packets and delete them."""
        self.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        for path in [p for p in self.sizes if p.startswith(self.dir + os.sep)]:
            del self.sizes[path]


# ---------------------------------------------------------------------------------------------
# what a node's step asks for


class _Dense:
    def __init__(self, x, op):
        self.x, self.op = x, op


class _Sparse:
    def __init__(self, indices, values, want):
        self.indices, self.values, self.want = indices, values, want


class Node:
    """What a node's ``step`` sees of itself: its rank, the cluster's size, the round, and the
    collectives it may end its turn with.

    Parameters
    ----------
    rank, size : int
        The node's rank and the number of nodes.
    rnd : int
        The round being run (from 0), the attribute ``round``.
    """

    def __init__(self, rank, size, rnd):
        self.rank, self.size, self.round = rank, size, rnd

    @staticmethod
    def allreduce(x, op="sum"):
        """The request for a dense all-reduce of ``x`` (return it from the step): the next
        step receives the element-wise ``op`` (``"sum"`` or ``"max"``) over the nodes, the
        same array on every node (:meth:`~roofline.comm.Communicator.allreduce`).

        Parameters
        ----------
        x : numpy.ndarray
        op : {"sum", "max"}

        Returns
        -------
        object
            The request.
        """
        if op not in ("sum", "max"):
            raise ValueError(f"op must be one of ('sum', 'max'), got {op!r}")
        return _Dense(x, op)

    @staticmethod
    def sparse_allreduce(indices, values, want=None):
        """The request for a Kylix sparse all-reduce (return it from the step): the next step
        receives the sums over the nodes at ``want`` (default ``indices``), as
        :meth:`~roofline.comm.Communicator.sparse_allreduce`.

        Parameters
        ----------
        indices : array-like of int
        values : numpy.ndarray, shape (len(indices),) or (len(indices), k)
        want : array-like of int, optional

        Returns
        -------
        object
            The request.
        """
        return _Sparse(indices, values, want)


# ---------------------------------------------------------------------------------------------
# the cluster


class DiskNodeCluster:
    """``n_nodes`` simulated nodes whose states live in checksummed files under ``root``, run
    in turn through rounds of compute and Kylix collectives exchanged as packet files.

    Parameters
    ----------
    n_nodes : int
        Nodes (>= 1).
    root : str
        A writable directory (created if missing) for the nodes' files and the packets.
    resident : int
        The most nodes in memory at once (>= 1); with more than one, that many turns run in
        threads side by side.
    memory_cap : int, optional
        The most bytes of node data (the files a turn reads and writes: states, contributions,
        messages) held in memory at once: a turn is admitted only while the running turns and
        the largest turn of the phase so far fit under it (the first turn of a phase runs
        alone), and a single turn above it is a :class:`CommError`.
    degrees : sequence of int, optional
        Kylix layer degrees (product ``n_nodes``); by default chosen per collective by
        :func:`~roofline.comm.kylix_degrees` from the contributions' size so that every
        message is at least ``packet_bytes``.
    disk : DiskRoofline, optional
        The disk's roofline (:func:`roofline.kernels.disk_roofline`); by default that of
        ``root``'s file system, measured (and cached) on first need: for ``packet_bytes`` and
        the predicted I/O time of each round.
    packet_bytes : int, optional
        The smallest packet file (and message, for the default degrees); default the disk's
        corner (``disk.corner(fsync)``), the size at which a file reaches half its streaming
        rate.
    fsync : bool
        Durable files (``fsync`` before each rename; the synced figures of the roofline).

    Attributes
    ----------
    store : NodeStore
        The nodes' files.
    stats : list of dict
        One per round of the last :meth:`run`: ``kind``, ``degrees``, ``seconds``,
        ``cpu_seconds`` (this process's user and system time: on a file system served from
        the page cache, the round's time on an otherwise idle machine), ``io_seconds`` and
        ``io_cpu_seconds`` (the wall and CPU time in the file calls: opens, writes, reads,
        renames; not the CRC-32s), ``step_seconds`` and ``step_cpu_seconds`` (the time in
        the user's ``step`` calls, part of ``seconds``: the round's own time is the rest),
        ``compute_bytes`` (the collective arithmetic's compulsory memory traffic, for
        :meth:`predicted_seconds`), ``slices_read`` (messages and files read),
        ``messages_read`` (of those, the messages: one ``pread`` each), ``packets_opened``,
        ``files_written``, ``files_overwritten`` (of those, the files overwritten in place:
        packets and the nodes' transient files), ``bytes_written``, ``files_read`` (files
        opened for reading: a packet once per phase), ``bytes_read``, ``predicted_io_seconds``
        (:meth:`predicted_seconds`: the disk roofline's ``io_time`` of those files and bytes,
        with their CRC-32; None without a roofline), ``max_resident``,
        ``peak_bytes``, and ``layers``: per Kylix layer ``config_bytes``, ``down_bytes``,
        ``up_bytes`` and ``messages`` sent between distinct nodes (the payloads as the other
        backends count them in ``comm.stats``).

    Examples
    --------
    >>> import numpy as np, tempfile
    >>> from roofline.comm import DiskNodeCluster
    >>> def step(node, state, reduced):
    ...     if reduced is not None:
    ...         state["total"] = reduced
    ...         return None
    ...     return node.allreduce(state["x"])
    >>> with tempfile.TemporaryDirectory() as root:
    ...     c = DiskNodeCluster(4, root, packet_bytes=4096)
    ...     c.init(lambda r: {"x": np.full(3, float(r))})
    ...     _ = c.run(step, 2)
    ...     c.load(3)["total"].tolist()
    [6.0, 6.0, 6.0]
    """

    def __init__(self, n_nodes, root, *, resident=1, memory_cap=None, degrees=None, disk=None,
                 packet_bytes=None, fsync=False):
        if isinstance(n_nodes, bool) or not isinstance(n_nodes, (int, np.integer)):
            raise TypeError(f"n_nodes must be an int, got {type(n_nodes).__name__}")
        if n_nodes < 1:
            raise ValueError(f"n_nodes must be >= 1, got {n_nodes}")
        self.n_nodes = int(n_nodes)
        if isinstance(resident, bool) or not isinstance(resident, (int, np.integer)) \
                or resident < 1:
            raise ValueError(f"resident must be an int >= 1, got {resident!r}")
        self.resident = int(resident)
        if memory_cap is not None and not memory_cap > 0:
            raise ValueError(f"memory_cap must be a positive number of bytes, got "
                             f"{memory_cap!r}")
        self.memory_cap = None if memory_cap is None else int(memory_cap)
        self.root = os.path.realpath(str(root))
        try:
            os.makedirs(self.root, exist_ok=True)
            probe = os.path.join(self.root, f".roofline-probe-{os.getpid()}")
            with open(probe, "wb") as f:
                f.write(b"x")
            os.unlink(probe)
        except OSError as e:
            raise ValueError(f"root must be a writable directory, got {str(root)!r}: {e}") \
                from e
        self.degrees = None if degrees is None else _check_degrees(degrees, self.n_nodes)
        if packet_bytes is not None and not int(packet_bytes) >= 1:
            raise ValueError(f"packet_bytes must be >= 1, got {packet_bytes!r}")
        self._packet_bytes = None if packet_bytes is None else int(packet_bytes)
        self._disk = disk
        self.fsync = bool(fsync)
        self.io = _IO(self.fsync)
        self.store = NodeStore(self.root, self.n_nodes, self.io)
        self.stats = []
        self._phase = 0
        self._rounds = 0
        # the transient node files' tags: this object's nonce and the round (unique in the
        # root's life: a file left by another run or process never carries this run's tag)
        self._nonce = os.urandom(6).hex()
        self._tag = None
        self._sizes = {}  # packet file -> its size (the spool's files are reused)

    # -- configuration ------------------------------------------------------------------
    @property
    def disk(self):
        """The disk roofline in use (measured on ``root``'s file system on first need)."""
        if self._disk is None:
            from roofline import kernels  # numba: imported only when a figure is needed

            self._disk = kernels.disk_roofline(self.root)
        return self._disk

    @property
    def packet_bytes(self) -> int:
        """The smallest packet file: ``packet_bytes`` as given, else the disk's corner."""
        if self._packet_bytes is None:
            self._packet_bytes = max(4096, int(math.ceil(self.disk.corner(self.fsync))))
        return self._packet_bytes

    def choose_degrees(self, nnz, itemsize):
        """Kylix degrees for contributions of ``nnz`` entries of ``itemsize`` bytes per node:
        the given ``degrees``, else :func:`~roofline.comm.kylix_degrees` with every message at
        least :attr:`packet_bytes` (BIDMat's rule, the packet from the disk roofline).

        Parameters
        ----------
        nnz : int
        itemsize : int

        Returns
        -------
        tuple of int
        """
        if self.degrees is not None:
            return self.degrees
        return kylix_degrees(self.n_nodes, nnz=max(1, int(nnz)), itemsize=int(itemsize),
                             min_packet=self.packet_bytes)

    def predicted_seconds(self, stats, disk=None, memory_bandwidth=None):
        """The roofline's time for a round of the cluster (the user's step excluded): the
        disk roofline's time of its file traffic (every file written and opened for reading
        costs its latency: a new file the roofline's ``write_latency``, a file overwritten in
        place (a packet, a node's transient file) :meth:`overwrite_latency`; every message
        read from a packet beyond the one read its opening pays for, one ``pread`` from an
        open file, :meth:`slice_latency`; the bytes cost the streaming rates, and the CRC-32
        of every byte written and read the rate of the CRC in use: ISA-L's with ``isal``
        installed, else zlib's) and, with ``memory_bandwidth``, the collective's arithmetic
        as its compulsory memory traffic at that rate (``stats["compute_bytes"]``: the sums'
        inputs read and outputs written once, the unions' sorted lists, maps and results, the
        gathers' rows; a bound no sort reaches).

        Parameters
        ----------
        stats : dict
            A round's statistics (``files_written``, ``files_overwritten``,
            ``bytes_written``, ``files_read``, ``bytes_read``, ``messages_read``,
            ``packets_opened``, ``compute_bytes``), one of :attr:`stats`.
        disk : DiskRoofline, optional
            The roofline (default the cluster's; one measured by CPU time predicts the round's
            CPU time).
        memory_bandwidth : float, optional
            Main-memory bytes/s (``roofline.gmat.machine_roofline().bandwidth``); None: the
            disk term alone (``stats["predicted_io_seconds"]``).

        Returns
        -------
        float or None
            Seconds; None when no roofline was given or measured.

        Raises
        ------
        ValueError
            ``memory_bandwidth`` is not a positive number.
        """
        if memory_bandwidth is not None and not memory_bandwidth > 0:
            raise ValueError(f"memory_bandwidth must be a positive number of bytes/s, got "
                             f"{memory_bandwidth!r}")
        disk = self.prediction_roofline(disk)
        if disk is None:
            return None
        over = stats.get("files_overwritten", 0)
        t = disk.io_time(stats["files_written"] - over, stats["bytes_written"],
                         stats["files_read"], stats["bytes_read"], self.fsync,
                         checksummed=True)
        clock = getattr(disk, "clock", "wall")
        if over:
            t += over * self.overwrite_latency(clock)
        extra = stats.get("messages_read", 0) - stats.get("packets_opened", 0)
        if extra > 0:
            t += extra * self.slice_latency(clock)
        if memory_bandwidth is not None:
            t += stats.get("compute_bytes", 0) / memory_bandwidth
        return t

    def overwrite_latency(self, clock="wall"):
        """Seconds to overwrite a small existing file in place on ``root``'s file system (open,
        a 4 KiB write, close: what a reused packet or transient node file costs beyond its
        bytes), measured once
        per file system and clock as :func:`~roofline.kernels.measure_disk` measures a new
        file's life (the median of 200): the latency :meth:`predicted_seconds` charges each
        of a round's ``files_overwritten``, the others costing the roofline's
        ``write_latency``.

        Parameters
        ----------
        clock : {"wall", "cpu"}

        Returns
        -------
        float

        Raises
        ------
        ValueError
            ``clock`` is neither.
        """
        if clock not in ("wall", "cpu"):
            raise ValueError(f"clock must be 'wall' or 'cpu', got {clock!r}")
        return _overwrite_latency(self.root, clock, self.fsync)

    def slice_latency(self, clock="wall"):
        """Seconds of one ``pread`` of a 4 KiB slice from a file already open on ``root``'s
        file system (in the page cache), the median of 200, measured once per file system and
        clock: what :meth:`predicted_seconds` charges each message read from a packet beyond
        the first (whose read the packet's opening, at the roofline's ``read_latency``,
        includes), the design reading every message with its own ``pread``.

        Parameters
        ----------
        clock : {"wall", "cpu"}

        Returns
        -------
        float

        Raises
        ------
        ValueError
            ``clock`` is neither.
        """
        if clock not in ("wall", "cpu"):
            raise ValueError(f"clock must be 'wall' or 'cpu', got {clock!r}")
        return _slice_latency(self.root, clock)

    def prediction_roofline(self, disk=None):
        """The roofline :meth:`predicted_seconds` uses: ``disk`` with the checksum rate of the
        CRC-32 the cluster computes (:attr:`crc32`; a :class:`~roofline.kernels.DiskRoofline`
        measures zlib's, so with ISA-L's the rate is measured once, on ``disk``'s clock).

        Parameters
        ----------
        disk : DiskRoofline, optional
            Default the cluster's (None when none was given or measured).

        Returns
        -------
        DiskRoofline or None
        """
        disk = self._disk if disk is None else disk
        return None if disk is None else _checksum_roofline(disk)

    @property
    def crc32(self) -> str:
        """The module whose CRC-32 checksums the files and messages: ``"isal.isal_zlib"``
        (the optional ``isal`` package installed) or ``"zlib"``; the same CRC-32 either way."""
        return _crc32_fn().__module__

    # -- the nodes' states ----------------------------------------------------------------
    def init(self, fn):
        """Create every node's state: ``fn(rank)`` (a dict of arrays and scalars), saved node
        by node (one in memory at a time).

        Parameters
        ----------
        fn : callable
            ``fn(rank) -> dict``.
        """
        for r in range(self.n_nodes):
            self.store.save(r, fn(r))
            self.store.remove(r, "result")

    def load(self, rank):
        """Node ``rank``'s state (see :func:`load_state`).

        Parameters
        ----------
        rank : int

        Returns
        -------
        dict
        """
        return self.store.load(self._check_rank(rank))

    def result(self, rank):
        """Node ``rank``'s result of the last collective.

        Parameters
        ----------
        rank : int

        Returns
        -------
        numpy.ndarray or None
            None when the last round had no collective.
        """
        rank = self._check_rank(rank)
        tag = self.store._load(rank, "state")[1].get("result")
        if tag is None:
            return None
        return self.store.load(rank, "result", tag=tag)["reduced"]

    def _check_rank(self, rank):
        if not 0 <= int(rank) < self.n_nodes:
            raise ValueError(f"rank must be in [0, {self.n_nodes}), got {rank}")
        return int(rank)

    def remove(self):
        """Delete the nodes' files and packets (the directory ``root`` itself stays)."""
        shutil.rmtree(os.path.join(self.root, "nodes"), ignore_errors=True)
        self.store._sizes.clear()
        self.store._made.clear()
        self._clear_spool()

    # -- scheduling -----------------------------------------------------------------------
    def _turns(self, fn, track):
        """``fn(rank)`` for every node, at most ``resident`` at once (and within
        ``memory_cap``); ``track`` collects the most nodes and bytes in memory."""
        lock = threading.Condition()
        state = {"nodes": 0, "bytes": 0, "largest": 0}

        def turn(r):
            with lock:  # the first turn runs alone: its footprint is the others' estimate
                while state["nodes"] and self.memory_cap is not None and (
                        not state["largest"]
                        or state["bytes"] + state["largest"] > self.memory_cap):
                    lock.wait()
                est = state["largest"]
                state["nodes"] += 1
                state["bytes"] += est
                track["max_resident"] = max(track["max_resident"], state["nodes"])
            self.io.turn_bytes(reset=True)
            try:
                fn(r)
            finally:
                held = self.io.turn_bytes(reset=True)
                with lock:
                    state["nodes"] -= 1
                    state["bytes"] -= est
                    track["peak_bytes"] = max(track["peak_bytes"], state["bytes"] + held)
                    state["largest"] = max(state["largest"], held)
                    lock.notify_all()
            if self.memory_cap is not None and held > self.memory_cap:
                raise CommError(f"node {r} held {held} bytes in its turn, above memory_cap "
                                f"{self.memory_cap}: raise the cap or make the nodes' states "
                                "smaller (more nodes)")

        if self.resident == 1:
            for r in range(self.n_nodes):
                turn(r)
            return
        with ThreadPoolExecutor(self.resident, thread_name_prefix="disk-node") as pool:
            for f in [pool.submit(turn, r) for r in range(self.n_nodes)]:
                f.result()

    def _spool(self):
        """A new phase's spool: the phases alternate between two directories, each phase's
        packets overwriting those of the phase before the last (their headers carry the phase,
        unique in the cluster's life, so a stale one is never read as new)."""
        self._phase += 1
        return _Spool(os.path.join(self.root, "spool", f"s{self._phase % 2}"), self._phase,
                      self.packet_bytes, self.io, self._sizes)

    def _clear_spool(self):
        shutil.rmtree(os.path.join(self.root, "spool"), ignore_errors=True)
        self._sizes.clear()

    # -- rounds ---------------------------------------------------------------------------
    def run(self, step, n_rounds):
        """Run ``n_rounds`` rounds of ``step`` on every node.

        In round ``t`` every node in turn runs ``step(node, state, reduced)``: ``node`` is its
        :class:`Node` (rank, size, round), ``state`` its state dict (loaded from its file;
        changes made in place are saved after the step), ``reduced`` the result of round
        ``t - 1``'s collective at this node (None in round 0 or when that round had none).  The
        step returns ``node.allreduce(x, op)``, ``node.sparse_allreduce(indices, values,
        want)`` or None; every node returns the same kind of request in a round, and the
        collective runs once every node has made its request.  The last round's results are
        kept: :meth:`result`.

        Parameters
        ----------
        step : callable
        n_rounds : int

        Returns
        -------
        list of dict
            The rounds' statistics (also :attr:`stats`).

        Raises
        ------
        MismatchError
            The nodes asked for different collectives (or dtypes, shapes, operations) in one
            round; the message names two of them.
        StateError
            A node's file is missing or corrupted (naming the node and the file).
        """
        if isinstance(n_rounds, bool) or not isinstance(n_rounds, (int, np.integer)) \
                or n_rounds < 0:
            raise ValueError(f"n_rounds must be an int >= 0, got {n_rounds!r}")
        if not callable(step):
            raise TypeError(f"step must be callable, got {type(step).__name__}")
        self.stats = []
        self._clear_spool()  # nothing of an earlier run (or process) is overwritten in place
        for _ in range(int(n_rounds)):
            self.stats.append(self._round(step))
        self._clear_spool()
        return self.stats

    def _round(self, step):
        rnd = self._rounds
        self._rounds += 1
        self._tag = tag = f"{self._nonce}:{rnd}"
        self.io.reset()
        track = {"max_resident": 0, "peak_bytes": 0}
        t0, c0 = time.perf_counter(), time.process_time()
        meta = [None] * self.n_nodes

        def compute(r):
            # the state file (atomic) names the tag of the result its node must read next
            state, desc = self.store._load(r, "state")
            reduced = (None if desc.get("result") is None else
                       self.store.load(r, "result", tag=desc["result"])["reduced"])
            t, c = time.perf_counter(), time.thread_time()
            req = step(Node(r, self.n_nodes, rnd), state, reduced)
            self.io.stepped(time.perf_counter() - t, time.thread_time() - c)
            meta[r] = self._contribute(r, req)
            self.store._save(r, state, "state", result=None if req is None else tag)

        self._turns(compute, track)
        kinds = {m["kind"] for m in meta}
        out = {"round": rnd, "kind": meta[0]["kind"], "degrees": ()}
        first = meta[0]
        for r, m in enumerate(meta):
            if m["agree"] != first["agree"]:
                raise MismatchError(f"round {rnd}: nodes 0 and {r} disagree on the collective: "
                                    f"node 0 asks for {first['agree']}, node {r} for "
                                    f"{m['agree']}", [0, r])
        t_compute = time.perf_counter() - t0
        if kinds != {None}:
            if first["kind"] == "allreduce":
                degrees = self.choose_degrees(math.prod(first["shape"]),
                                              np.dtype(first["dtype"]).itemsize)
            else:
                nnz = sum(m["nnz"] for m in meta) / self.n_nodes
                degrees = self.choose_degrees(
                    nnz, 8 + np.dtype(first["dtype"]).itemsize * max(1, math.prod(
                        first["tail"])))
            degrees = _check_degrees(degrees, self.n_nodes) if degrees else ()
            out["degrees"] = degrees
            layers = [{"config_bytes": 0, "down_bytes": 0, "up_bytes": 0, "messages": 0}
                      for _ in degrees]
            if first["kind"] == "allreduce":
                _DenseRun(self, degrees, meta, layers, track).run()
            else:
                _SparseRun(self, degrees, meta, layers, track).run()
            out["layers"] = layers
        else:
            out["layers"] = []
        io = self.io
        out.update(seconds=time.perf_counter() - t0, cpu_seconds=time.process_time() - c0,
                   compute_phase_seconds=t_compute, step_seconds=io.step_seconds,
                   step_cpu_seconds=io.step_cpu_seconds, compute_bytes=io.compute_bytes,
                   io_seconds=io.seconds, io_cpu_seconds=io.cpu_seconds,
                   files_written=io.files_written, files_overwritten=io.files_overwritten,
                   bytes_written=io.bytes_written, files_read=io.files_read,
                   bytes_read=io.bytes_read, **track)
        out["slices_read"] = io.slices_read
        out["messages_read"] = io.messages_read
        out["packets_opened"] = io.files_opened
        out["predicted_io_seconds"] = self.predicted_seconds(out)
        logger.info("disk cluster round %d (%s, degrees %s): %.3f s, %d files / %d bytes "
                    "written, %d reads / %d bytes", rnd, out["kind"], out["degrees"],
                    out["seconds"], io.files_written, io.bytes_written, io.files_read,
                    io.bytes_read)
        return out

    def _contribute(self, r, req):
        """Save node ``r``'s contribution to its collective; what the others must agree on."""
        if req is None:
            return {"kind": None, "agree": ("none",)}
        if isinstance(req, _Dense):
            x = np.ascontiguousarray(req.x)
            check_reducible(x, req.op, "x")
            self.store.save(r, {"flat": x.reshape(-1)}, "contrib", tag=self._tag)
            return {"kind": "allreduce", "op": req.op, "shape": x.shape, "dtype": x.dtype.str,
                    "agree": ("allreduce", req.op, x.dtype.str, x.shape)}
        if not isinstance(req, _Sparse):
            raise TypeError(f"node {r}: step must return node.allreduce(...), "
                            f"node.sparse_allreduce(...) or None, got {type(req).__name__}")
        idx = _as_indices(req.indices, "indices")
        want = idx if req.want is None else _as_indices(req.want, "want")
        values = np.ascontiguousarray(req.values)
        if values.shape[:1] != idx.shape:
            raise ValueError(f"node {r}: values has {values.shape[0] if values.ndim else 0} "
                             f"rows but there are {idx.shape[0]} indices")
        if values.dtype.kind not in "fiu":
            raise TypeError(f"node {r}: values must be numeric, got dtype {values.dtype}")
        tail = values.shape[1:]
        # KylixPlan's first steps: the sorted distinct indices and the values summed into them
        # (indices already sorted and distinct are their own unique values: no sort)
        uidx, inv = (idx, None) if _is_sorted(idx) else _unique(idx, return_inverse=True)
        uwant, winv = ((uidx, inv) if want is idx else (want, None) if _is_sorted(want)
                       else _unique(want, return_inverse=True))
        inv = None if uidx.size == idx.size and _is_sorted(idx) else inv
        winv = None if uwant.size == want.size and _is_sorted(want) else winv
        if inv is None:
            acc = values
        else:
            acc = np.zeros((uidx.size, *tail), values.dtype)
            if uidx.size == idx.size:
                acc[inv] = values
            else:
                np.add.at(acc, inv, values)
        # the indices read, their distinct values written (and the values summed into them)
        self.io.work(idx.nbytes + uidx.nbytes + want.nbytes + uwant.nbytes + (
            0 if inv is None else values.nbytes + acc.nbytes))
        saved = {"uidx": uidx, "uwant": uwant}
        if winv is not None:
            saved["winv"] = winv
        self.store.save(r, saved, "cidx", tag=self._tag)
        self.store.save(r, {"acc": acc}, "cacc", tag=self._tag)
        top = max(int(uidx[-1]) + 1 if uidx.size else 0, int(uwant[-1]) + 1 if uwant.size else 0)
        return {"kind": "sparse", "dtype": values.dtype.str, "tail": tail, "nnz": idx.size,
                "top": top, "agree": ("sparse_allreduce", values.dtype.str, tail)}


def _union_maps(received):
    """:func:`~roofline.comm._kylix._union` of the received index lists, its maps
    concatenated, and the lists' lengths: the union and the maps by one compiled pass over a
    bitmap of the lists' range (:func:`_union_bits`: linear, where ``_union`` sorts and then
    binary-searches every list in the union and a stable sort of the concatenation is
    ``O(n log k)``; 3x less CPU than the latter on a 1024-node round's lists, measured), or,
    when the range is sparser than 256 values per entry, that sort (``_unique(...,
    return_inverse=True)``); the same integers either way, so the same files and sums."""
    lens = np.fromiter((a.size for a in received), np.int64, len(received))
    if not received:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), lens
    cat = np.concatenate(received).astype(np.int64, copy=False)
    union, maps = np.empty(cat.size, np.int64), np.empty(cat.size, np.int64)
    c = _jit().union_bits(cat, union, maps, 4 * cat.size + 1024)
    if c < 0:
        union, maps = _unique(cat, return_inverse=True)
        return union, maps, lens
    return union[:c], maps, lens


class _Run:
    """One collective over the cluster's nodes, layer by layer through packet files."""

    def __init__(self, cluster, degrees, meta, layers, track):
        self.c, self.degrees, self.meta = cluster, tuple(degrees), meta
        self.layers, self.track = layers, track
        self.L = len(self.degrees)
        self.tag = cluster._tag  # the round's: every transient node file carries it
        self.cum = [1]
        for k in self.degrees:
            self.cum.append(self.cum[-1] * k)
        self._lock = threading.Lock()

    def members(self, r, layer):
        return _members(r, self.cum[layer], self.degrees[layer])

    def send(self, spool, r, layer, out, field):
        """Node ``r`` sends ``out[j]`` (an array) to member ``j`` of its layer-``layer`` group
        (its own part to itself, kept on disk until its next turn)."""
        members = self.members(r, layer)
        nbytes = spool.send(r, members, out)
        with self._lock:
            self.layers[layer][field] += nbytes
            self.layers[layer]["messages"] += len(members) - 1

    def recv(self, spool, r, layer):
        """What the members of ``r``'s layer-``layer`` group sent it, in member order."""
        return spool.recv_arrays(self.members(r, layer), r)

    def phase(self, fn, prev):
        """One turn of every node (``fn(r, prev, new)``): reads ``prev``'s packets, writes a
        new spool's, and removes ``prev`` afterwards."""
        new = self.c._spool()
        try:
            self.c._turns(lambda r: fn(r, prev, new), self.track)
        except BaseException:
            if prev is not None:
                prev.close()  # the files stay (to look at), the descriptors do not
            raise
        if prev is not None:
            prev.close()  # its files stay: the next phase overwrites them
        return new

    def sweep(self, step, layers, spool):
        """One :meth:`phase` per layer of ``layers`` (in that order), each node's turn
        ``step(r, layer, prev, new)``; returns the last phase's spool."""
        for layer in layers:
            spool = self.phase(lambda r, prev, new, layer=layer: step(r, layer, prev, new), spool)
        return spool

    def down_up(self, spool):
        """The reduce down the layers (``self.down``) and back up (``self.up``) after
        ``spool``'s phase; removes the last spool."""
        spool = self.sweep(self.down, range(self.L + 1), spool)
        self.sweep(self.up, range(self.L - 1, -1, -1), spool).close()


class _DenseRun(_Run):
    """Kylix's dense all-reduce (``KylixCommunicator._allreduce``): reduce-scatter down,
    all-gather up, each node holding only its current segment between turns."""

    def run(self):
        m0 = self.meta[0]
        self.op, self.dtype, self.shape = m0["op"], np.dtype(m0["dtype"]), m0["shape"]
        n = math.prod(self.shape)
        # every node's segment at each depth (pure arithmetic on its digits)
        self.segs = []
        for r in range(self.c.n_nodes):
            segs = [(0, n)]
            for layer, k in enumerate(self.degrees):
                me = self.members(r, layer).index(r)
                segs.append(tuple(_bounds(*segs[-1], k)[me:me + 2]))
            self.segs.append(segs)
        self.down_up(None)

    def down(self, r, layer, prev, new):
        store = self.c.store
        if layer == 0:
            cur = store.load(r, "contrib", tag=self.tag)["flat"]
        else:
            got = self.recv(prev, r, layer - 1)
            lo, hi = self.segs[r][layer]
            for g in got:
                if g.shape != (hi - lo,) or g.dtype != self.dtype:
                    raise CommError(f"allreduce shape mismatch at layer {layer - 1} on node {r}")
            # summed into the first received buffer (this turn's own memory)
            cur = got[0] if got[0].flags.writeable else got[0].copy()
            for g in got[1:]:  # group-member order, as KylixCommunicator
                if self.op == "sum":
                    cur += g
                else:
                    np.maximum(cur, g, out=cur)
            self.c.io.work(cur.nbytes * (len(got) + 1))  # every input read, the sum written
        if layer < self.L:
            lo, hi = self.segs[r][layer]
            b = _bounds(lo, hi, self.degrees[layer])
            self.send(new, r, layer, [cur[b[j] - lo:b[j + 1] - lo]
                                      for j in range(self.degrees[layer])], "down_bytes")
        elif self.L == 0:
            store.save(r, {"reduced": cur.reshape(self.shape)}, "result", tag=self.tag)
        else:
            self.send(new, r, self.L - 1, [cur] * self.degrees[self.L - 1], "up_bytes")

    def up(self, r, layer, prev, new):
        got = self.recv(prev, r, layer)
        lo, hi = self.segs[r][layer]
        b = _bounds(lo, hi, self.degrees[layer])
        for j, g in enumerate(got):
            if g.shape != (b[j + 1] - b[j],) or g.dtype != self.dtype:
                raise CommError(f"allreduce shape mismatch at layer {layer} on node {r}")
        # the segments gathered are sent and saved from the buffers they arrived in (small
        # ones joined first: a copy costs less than a buffer's handling per message)
        if (hi - lo) * self.dtype.itemsize < _GATHER_MIN * len(got):
            got = [np.concatenate(got)]
        if layer > 0:
            cur = _Gathered(got, self.dtype, (hi - lo,))
            self.send(new, r, layer - 1, [cur] * self.degrees[layer - 1], "up_bytes")
        else:
            self.c.store.save(r, {"reduced": _Gathered(got, self.dtype, self.shape)}, "result",
                              tag=self.tag)


class _SparseRun(_Run):
    """Kylix's sparse all-reduce (``KylixCommunicator._configure`` and ``_reduce``): the
    configuration layers, the reduce down and the sums back up, each node's routes (the maps
    into its unions) kept in its files between turns."""

    def run(self):
        n = self.c.n_nodes
        m0 = self.meta[0]
        self.dtype, self.tail = np.dtype(m0["dtype"]), tuple(m0["tail"])
        hi = max(m["top"] for m in self.meta)
        self.range = [[(0, hi)] for _ in range(n)]  # each node's index range per depth
        self.cuts = [[None] * self.L for _ in range(n)]  # sels, wsels cut positions per layer
        self.n_union = [[0] * self.L for _ in range(n)]
        # the plan's files stay: the next sparse round overwrites them in place
        self.down_up(self.sweep(self.config, range(self.L + 1), None))

    @staticmethod
    def _slices(cuts):
        return [slice(int(cuts[j]), int(cuts[j + 1])) for j in range(len(cuts) - 1)]

    def config(self, r, layer, prev, new):
        store = self.c.store
        if layer == 0:
            c = store.load(r, "cidx", tag=self.tag)
            cur, wcur = c["uidx"], c["uwant"]
        else:
            got = self.recv(prev, r, layer - 1)
            recv = [g[1:1 + int(g[0])] for g in got]
            wrecv = [g[1 + int(g[0]):] for g in got]
            cur, maps, lens = _union_maps(recv)
            wcur, wmaps, wlens = _union_maps(wrecv)
            # the sorted lists read, their union and the maps into it written
            self.c.io.work(2 * sum(a.nbytes for a in recv) + cur.nbytes
                           + 2 * sum(a.nbytes for a in wrecv) + wcur.nbytes)
            self.n_union[r][layer - 1] = cur.size
            store.save(r, {"maps": maps, "lens": lens, "wmaps": wmaps, "wlens": wlens},
                       f"map{layer - 1}", tag=self.tag)
            me = self.members(r, layer - 1).index(r)
            lo, hi = self.range[r][layer - 1]
            self.range[r].append(tuple(_bounds(lo, hi, self.degrees[layer - 1])[me:me + 2]))
        if layer < self.L:
            k = self.degrees[layer]
            lo, hi = self.range[r][layer]
            parts, sels = _split_sorted(cur, lo, hi, k)
            wparts, wsels = _split_sorted(wcur, lo, hi, k)
            self.cuts[r][layer] = ([sels[0].start] + [s.stop for s in sels],
                                   [wsels[0].start] + [s.stop for s in wsels])
            out = [np.concatenate(([p.size], p, w)).astype(np.int64, copy=False)
                   for p, w in zip(parts, wparts, strict=True)]
            self.send(new, r, layer, out, "config_bytes")
        else:  # the bottom: wanted owner indices in the reduced union (as _configure)
            pos = np.searchsorted(cur, wcur)
            pos = np.minimum(pos, max(cur.size - 1, 0))
            found = (cur[pos] == wcur) if cur.size else np.zeros(wcur.size, bool)
            final = {"n_bottom": int(cur.size)}
            if not found.all():
                final["found"] = found
                final["pos"] = pos
            elif not (pos.size == cur.size and (pos.size == 0 or (
                    pos[0] == 0 and pos[-1] == pos.size - 1))):
                final["pos"] = pos
            store.save(r, final, "final", tag=self.tag)

    def _maps(self, r, layer, which):
        """Node ``r``'s maps of layer ``layer`` (``"maps"`` or ``"wmaps"``), concatenated in
        member order, and their lengths."""
        m = self.c.store.load(r, f"map{layer}", tag=self.tag)
        return m[which], m["lens" if which == "maps" else "wlens"]

    def _final(self, r, acc):
        f = self.c.store.load(r, "final", tag=self.tag)
        if "pos" not in f:
            return acc
        if "found" not in f:
            return _gather(acc, f["pos"])
        pos, found = f["pos"], f["found"]
        res = np.zeros((pos.size, *self.tail), self.dtype)
        if acc.shape[0]:
            res[found] = acc[pos[found]]
        return res

    def down(self, r, layer, prev, new):
        store = self.c.store
        if layer == 0:
            acc = store.load(r, "cacc", tag=self.tag)["acc"]
        else:
            got = self.recv(prev, r, layer - 1)
            for g in got:
                if g.dtype != self.dtype or g.shape[1:] != self.tail:
                    raise CommError(f"sparse reduce mismatch at layer {layer - 1}: node {r} "
                                    f"has values {self.dtype}{self.tail}, a peer sent "
                                    f"{g.dtype}{g.shape[1:]}")
            acc = np.zeros((self.n_union[r][layer - 1], *self.tail), self.dtype)
            maps, lens = self._maps(r, layer - 1, "maps")
            rows = np.fromiter((g.shape[0] for g in got), np.int64, len(got))
            if rows.shape != lens.shape or (rows != lens).any() or (
                    maps.size and (int(maps.min()) < 0 or int(maps.max()) >= acc.shape[0])):
                raise CommError(f"sparse reduce mismatch at layer {layer - 1}: node {r} "
                                f"expected blocks of {lens.tolist()} rows into a union of "
                                f"{acc.shape[0]}, got {rows.tolist()}")
            if acc.ndim == 1 and got:
                # one loop over the blocks in group-member order (as KylixCommunicator's
                # scatter-adds, block by block: the same additions in the same order)
                _jit().scatter_add(acc, maps, got[0] if len(got) == 1 else np.concatenate(got))
            else:
                cuts = np.concatenate(([0], np.cumsum(lens))).tolist()
                for j, g in enumerate(got):  # group-member order, as KylixCommunicator
                    _scatter_add(acc, maps[cuts[j]:cuts[j + 1]], g)
            # the values and their maps read, the sums written
            self.c.io.work(sum(g.nbytes for g in got) + maps.nbytes + acc.nbytes)
        if layer < self.L:
            sels = self._slices(self.cuts[r][layer][0])
            self.send(new, r, layer, [acc[s] for s in sels], "down_bytes")
            return
        res = self._final(r, acc)
        if self.L == 0:
            self._result(r, res)
        else:
            self.send(new, r, self.L - 1, self._gathered(res, self._maps(r, self.L - 1,
                                                                        "wmaps")), "up_bytes")

    def up(self, r, layer, prev, new):
        got = self.recv(prev, r, layer)
        wsels = self._slices(self.cuts[r][layer][1])
        res = np.empty((wsels[-1].stop, *self.tail), self.dtype)
        for s, g in zip(wsels, got, strict=True):
            res[s] = g
        if layer > 0:
            self.send(new, r, layer - 1,
                      self._gathered(res, self._maps(r, layer - 1, "wmaps")), "up_bytes")
        else:
            self._result(r, res)

    def _gathered(self, res, maps):
        """``res``'s rows at each of the maps ``maps`` (the concatenated maps and their
        lengths), gathered by one loop and split into views (the maps read, the rows read and
        written)."""
        maps, lens = maps
        if maps.size and (int(maps.min()) < 0 or int(maps.max()) >= res.shape[0]):
            raise CommError(f"sparse reduce: a map points outside the {res.shape[0]} rows "
                            "gathered from")
        if res.ndim == 1:
            out = np.empty(maps.size, res.dtype)
            _jit().gather(res, maps, out)
        else:
            out = res[maps]
        self.c.io.work(maps.nbytes + 2 * out.nbytes)
        cuts = np.concatenate(([0], np.cumsum(lens))).tolist()
        return [out[cuts[j]:cuts[j + 1]] for j in range(lens.size)]

    def _result(self, r, res):
        store = self.c.store
        c = store.load(r, "cidx", tag=self.tag)
        if "winv" in c:
            res = res[c["winv"]]
        store.save(r, {"reduced": res}, "result", tag=self.tag)
