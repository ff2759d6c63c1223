"""Kernels that measure the machine: STREAM-like triad, streaming read, a repeated read of a
cache-sized working set per thread (the cache-aware roofline's level bandwidths), an FMA loop, a
row-gather stream (the random-access floor of the sparse primitives), and the disk's roofline
(:func:`disk_roofline`: small-file latency and streaming rates of plain file I/O).

They run on numba's threads (the same pool as the sparse kernels), so the measured ceilings are
those of the thread count the primitives use.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import tempfile
import time
import zlib
from dataclasses import dataclass

import numpy as np
from numba import njit, prange

from ._csc import _prefetch_rows
from ._threads import parallel_njit

__all__ = ["DiskRoofline", "disk_roofline", "fma_loop", "gather_rows", "measure_disk",
           "stream_read", "stream_read_repeat", "stream_triad"]

logger = logging.getLogger(__name__)


@parallel_njit(cache=True, fastmath=True, nogil=True)
def stream_triad(a, b, c, s, n_blocks):
    """``a = b + s * c`` (STREAM triad), blocked so each thread streams contiguous memory."""
    n = a.shape[0]
    step = (n + n_blocks - 1) // n_blocks
    for t in prange(n_blocks):
        lo = t * step
        hi = min(n, lo + step)
        for i in range(lo, hi):
            a[i] = b[i] + s * c[i]


@parallel_njit(cache=True, fastmath=True, nogil=True)
def stream_read(b, n_blocks):
    """Sum of ``b`` (a pure streaming read), blocked per thread; returns the sum."""
    n = b.shape[0]
    step = (n + n_blocks - 1) // n_blocks
    total = 0.0
    for t in prange(n_blocks):
        lo = t * step
        hi = min(n, lo + step)
        acc = b.dtype.type(0)
        for i in range(lo, hi):
            acc += b[i]
        total += acc
    return total


@parallel_njit(cache=True, fastmath=True, nogil=True)
def stream_read_repeat(buf, n_pass):
    """Each thread ``t`` reads its own row ``buf[t]`` ``n_pass`` times (a sum): the sustained
    read bandwidth of the cache level that holds a row (``buf`` C-contiguous, one row per
    thread, a row sized for the level).

    The accumulator carries over from pass to pass, so no pass can be skipped or hoisted; it
    is vectorised (``fastmath``).  Returns one sum per thread (keeps the reads observable).
    """
    n_threads = buf.shape[0]
    n = buf.shape[1]
    out = np.zeros(n_threads, dtype=buf.dtype)
    for t in prange(n_threads):
        row = buf[t]
        acc = buf.dtype.type(0)
        for _ in range(n_pass):
            for i in range(n):
                acc += row[i]
        out[t] = acc
    return out


@parallel_njit(cache=True, fastmath=True, nogil=True)
def gather_rows(AT, idx, distance, n_threads):
    """Sum the rows ``AT[idx[p]]`` for every ``p`` (each thread a contiguous share of ``idx``),
    prefetching the row ``distance`` positions ahead (``0``: no prefetch).

    This is the memory access stream of ``A*S`` and ``SDDMM`` (``idx = S.indices``: one model
    row per nonzero, in example order) with nothing else: no index arithmetic beyond the
    gather, no output.  Its time is a floor for any kernel that visits the nonzeros in that
    order, whatever its arithmetic.  Returns one checksum per thread.
    """
    n = idx.shape[0]
    k = AT.shape[1]
    row_bytes = k * AT.itemsize
    out = np.zeros(n_threads, dtype=AT.dtype)
    for t in prange(n_threads):
        p0 = n * t // n_threads
        p1 = n * (t + 1) // n_threads
        acc = np.zeros(k, dtype=AT.dtype)
        for p in range(p0, p1):
            if distance > 0 and p + distance < p1:
                _prefetch_rows(AT, idx, p + distance, row_bytes)
            a = AT[np.uint64(idx[p])]
            for kk in range(k):
                acc[kk] += a[kk]
        out[t] = acc.sum()
    return out


def _make_fma_loop(lanes):
    """An FMA loop over ``lanes`` independent chains (a compile-time constant, so LLVM unrolls
    the lane loop into vector FMAs on registers-resident accumulators)."""

    @njit(cache=True, fastmath=True, nogil=True)
    def _chains(acc, n_iter, m, c):
        # The lane loop is vectorised; eight dependent FMAs per load/store keep the loop
        # FMA-bound rather than store-bound.
        for _ in range(n_iter):
            for lane in range(lanes):
                x = acc[lane]
                x = x * m + c
                x = x * m + c
                x = x * m + c
                x = x * m + c
                x = x * m + c
                x = x * m + c
                x = x * m + c
                x = x * m + c
                acc[lane] = x

    @parallel_njit(cache=True, fastmath=True, nogil=True)
    def fma_loop(seed, n_iter, m, c):
        n_threads = seed.shape[0]
        out = np.zeros(n_threads, dtype=seed.dtype)
        for t in prange(n_threads):
            acc = np.empty(lanes, dtype=seed.dtype)
            for lane in range(lanes):
                acc[lane] = seed[t] + lane
            _chains(acc, n_iter, m, c)
            out[t] = acc.sum()
        return out

    return fma_loop


# 256 bytes of independent chains per thread (8 AVX2 registers: 64 float32 or 32 float64 lanes):
# enough to cover FMA latency times the FMA units, few enough that nothing spills.  Measured on
# this machine's Zen 3 cores these reach the nominal peak (2 FMA units x 8/4 lanes x 2 flops).
_FMA = {
    np.dtype(np.float32): (_make_fma_loop(64), 64),
    np.dtype(np.float64): (_make_fma_loop(32), 32),
}


def fma_loop(seed, n_iter):
    """Run ``n_iter`` iterations of independent FMA chains on ``len(seed)`` threads.

    Returns ``(checksums, flops)``: one checksum per thread (keeps the work observable) and the
    number of floating-point operations performed (2 per FMA).
    """
    fn, lanes = _FMA[np.dtype(seed.dtype)]
    dt = seed.dtype.type
    out = fn(seed, n_iter, dt(0.999999), dt(1e-6))
    return out, 2 * 8 * lanes * n_iter * seed.shape[0]


# ---------------------------------------------------------------------------------------------
# the disk's roofline (plain file I/O, no numba): what the disk-simulated cluster is designed
# against (roofline.comm.DiskNodeCluster), cached per host and file system


@dataclass(frozen=True)
class DiskRoofline:
    """Measured ceilings of the file system holding ``path``, as a program that writes and reads
    whole files sees them (through the page cache, and durably with ``fsync``).

    The parameters are also the (read-only) attributes; times in seconds, rates in bytes/s.

    Parameters
    ----------
    path : str
        The directory measured (its file system).
    write_latency, read_latency : float
        Median time to create, write, close, rename and (later) remove a 4 KiB file / to open,
        read and close one (no ``fsync``: the page cache's cost per file).
    write_bandwidth, read_bandwidth : float
        Streaming write of one large file in 4 MiB blocks (no ``fsync``), its removal included
        (the pages freed: every message file is removed once read, every state file replaced)
        / read of it into newly allocated memory, as a program loading its data does (the new
        memory's page faults included; the file was just written, so the page cache holds it
        when memory allows).
    synced_write_latency, synced_write_bandwidth : float
        The same writes with ``fsync`` before the close: the durable cost per file and the
        device's sustained write rate.
    checksum_bandwidth : float
        Bytes/s of the CRC-32 (``zlib.crc32``) that checksummed files compute over every byte
        written and read (0: not measured).
    size_bytes : int
        The size of the streamed file.
    host : str
    measured_at : float
        Unix time of the measurement.
    load : float
        One-minute load average when measured (a busy machine gives slow figures).
    clock : {"wall", "cpu"}
        What the times are: the wall clock, or this process's CPU time (see
        :func:`measure_disk`).
    """

    path: str
    write_latency: float
    read_latency: float
    write_bandwidth: float
    read_bandwidth: float
    synced_write_latency: float
    synced_write_bandwidth: float
    checksum_bandwidth: float = 0.0
    size_bytes: int = 0
    host: str = ""
    measured_at: float = 0.0
    load: float = 0.0
    clock: str = "wall"

    def latency(self, fsync: bool = False) -> float:
        """Seconds to write and then read back one small file (the per-message cost).

        Parameters
        ----------
        fsync : bool
            Durable writes (``fsync`` before close): the seed's "millisecond latency".

        Returns
        -------
        float
        """
        return (self.synced_write_latency if fsync else self.write_latency) + self.read_latency

    def bandwidth(self, fsync: bool = False) -> float:
        """Bytes/s of writing then reading a large file (the harmonic combination of both).

        Parameters
        ----------
        fsync : bool
            Durable writes.

        Returns
        -------
        float
        """
        w = self.synced_write_bandwidth if fsync else self.write_bandwidth
        return 1.0 / (1.0 / w + 1.0 / self.read_bandwidth)

    def corner(self, fsync: bool = False) -> float:
        """The file size (bytes) at which writing and reading one file reaches half of the
        streaming rate: ``latency * bandwidth`` (a file of ``s`` bytes takes
        ``latency + s / bandwidth``).  Messages smaller than this are latency-bound.

        Parameters
        ----------
        fsync : bool
            Durable writes.

        Returns
        -------
        float
        """
        return self.latency(fsync) * self.bandwidth(fsync)

    def io_time(self, files_written=0, bytes_written=0, files_read=0, bytes_read=0,
                fsync: bool = False, checksummed: bool = False) -> float:
        """Predicted seconds of the given file traffic (files written and read whole or in
        slices, each costing its latency, and the bytes at the streaming rates).

        Parameters
        ----------
        files_written, bytes_written, files_read, bytes_read : int
            The traffic.
        fsync : bool
            Durable writes.
        checksummed : bool
            Add a CRC-32 over every byte at ``checksum_bandwidth`` (when measured).

        Returns
        -------
        float
        """
        wl = self.synced_write_latency if fsync else self.write_latency
        wb = self.synced_write_bandwidth if fsync else self.write_bandwidth
        t = (files_written * wl + bytes_written / wb + files_read * self.read_latency
             + bytes_read / self.read_bandwidth)
        if checksummed and self.checksum_bandwidth > 0:
            t += (bytes_written + bytes_read) / self.checksum_bandwidth
        return t

    def __str__(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.measured_at))
        return (f"Disk roofline ({self.path}, measured {when}, load {self.load:.1f})\n"
                f"  small file     write {self.write_latency * 1e6:8.1f} us, read "
                f"{self.read_latency * 1e6:.1f} us; synced write "
                f"{self.synced_write_latency * 1e3:.2f} ms\n"
                f"  streaming      write {self.write_bandwidth / 1e9:6.2f} GB/s, read "
                f"{self.read_bandwidth / 1e9:.2f} GB/s; synced write "
                f"{self.synced_write_bandwidth / 1e9:.2f} GB/s; CRC-32 "
                f"{self.checksum_bandwidth / 1e9:.2f} GB/s\n"
                f"  corner         {self.corner() / 2**20:8.3f} MiB (page cache), "
                f"{self.corner(True) / 2**20:.3f} MiB (synced)")


def _write_file(path, bufs, fsync):
    """Write ``bufs`` to ``path`` as a checksummed-file writer does: a temporary name, one
    ``writev`` per group of buffers, ``fsync`` if asked, then a rename into place."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        views = [memoryview(b).cast("B") for b in bufs]
        while views:
            n = os.writev(fd, views[:1024])
            while views and n >= views[0].nbytes:
                n -= views[0].nbytes
                views.pop(0)
            if n:
                views[0] = views[0][n:]
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _read_file(path, nbytes):
    """``nbytes`` of ``path`` read into new memory (open, ``preadv``, close)."""
    buf = np.empty(nbytes, np.uint8)
    fd = os.open(path, os.O_RDONLY)
    try:
        got = 0
        while got < nbytes:
            k = os.preadv(fd, [buf[got:]], got)
            if not k:
                break
            got += k
    finally:
        os.close(fd)
    return buf


def _median_time(fn, n, clock=time.perf_counter):
    ts = []
    for i in range(n):
        t0 = clock()
        fn(i)
        ts.append(clock() - t0)
    return float(np.median(ts))


def measure_disk(path, *, size_bytes: int = 64 * 2**20, n_small: int = 200,
                 n_synced: int = 20, repeat: int = 3, clock: str = "wall") -> DiskRoofline:
    """Measure the disk roofline of the file system holding ``path`` now (no cache).

    Writes (and removes) about ``2 * size_bytes`` in a temporary directory under ``path``.

    Parameters
    ----------
    path : str
        An existing writable directory.
    size_bytes : int
        The streamed file's size.
    n_small, n_synced : int
        Small files timed without and with ``fsync`` (the medians are kept).
    repeat : int
        Streaming repetitions (the best is kept).
    clock : {"wall", "cpu"}
        ``"cpu"``: time by this process's CPU time (``time.process_time``, user and system)
        instead of the wall clock.  Served from the page cache, file I/O is work of the CPU
        (the kernel's copies), so CPU-time figures are those of an idle machine even on a
        loaded one, and predict a run's CPU time (the synced figures then omit the device's
        wait and are not meaningful).

    Returns
    -------
    DiskRoofline

    Raises
    ------
    ValueError
        ``path`` is not a writable directory (the message names it).
    """
    path = os.path.realpath(str(path))
    if not os.path.isdir(path) or not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"path must be a writable directory, got {path!r}")
    if clock not in ("wall", "cpu"):
        raise ValueError(f"clock must be 'wall' or 'cpu', got {clock!r}")
    now = time.perf_counter if clock == "wall" else time.process_time
    try:
        load = float(os.getloadavg()[0])
    except (OSError, AttributeError):  # pragma: no cover - platform without getloadavg
        load = 0.0
    d = tempfile.mkdtemp(prefix=".roofline-disk-", dir=path)
    try:
        small = os.urandom(4096)
        names = [os.path.join(d, f"s{i}") for i in range(max(n_small, n_synced))]
        extra = [p + "x" for p in names]
        for p in extra:
            _write_file(p, [small], False)

        def write_one(i, fsync=False):  # a file's life: written, and later removed
            _write_file(names[i], [small], fsync)
            os.unlink(extra[i])

        wl = _median_time(write_one, n_small, now)

        rl = _median_time(lambda i: _read_file(names[i], 4096), n_small, now)
        for i in range(n_synced):
            os.rename(names[i], extra[i])
        swl = _median_time(lambda i: write_one(i, True), n_synced, now)
        for p in names:
            if os.path.exists(p):
                os.unlink(p)
        block = np.frombuffer(os.urandom(4 * 2**20), np.uint8)
        n_blocks = max(1, int(size_bytes) // block.size)
        big = os.path.join(d, "stream")
        rates = {False: 0.0, True: 0.0}
        read = 0.0
        for _ in range(max(1, repeat)):
            for fsync in (True, False):
                t0 = now()
                _write_file(big, [block] * n_blocks, fsync)
                os.unlink(big)  # its pages freed, as every message file is, in the write cost
                rates[fsync] = max(rates[fsync], n_blocks * block.size / (now() - t0))
            _write_file(big, [block] * n_blocks, False)
            t0 = now()
            _read_file(big, n_blocks * block.size)  # into new memory, as a loader does
            read = max(read, n_blocks * block.size / (now() - t0))
            os.unlink(big)
        whole = np.tile(block, n_blocks)  # beyond the caches, as the streamed file
        crc = whole.size / _median_time(lambda i: zlib.crc32(whole), max(1, repeat), now)
    finally:
        import shutil

        shutil.rmtree(d, ignore_errors=True)
    return DiskRoofline(path=path, write_latency=wl, read_latency=rl,
                        write_bandwidth=rates[False], read_bandwidth=read,
                        synced_write_latency=swl, synced_write_bandwidth=rates[True],
                        checksum_bandwidth=crc, size_bytes=n_blocks * block.size,
                        host=socket.gethostname(), measured_at=time.time(), load=load,
                        clock=clock)


def _disk_cache_path() -> str:
    base = os.environ.get("ROOFLINE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "roofline")
    return os.path.join(base, "disk.json")


def disk_roofline(path=None, *, remeasure: bool = False) -> DiskRoofline:
    """The disk roofline of the file system holding ``path``, from the cache or measured.

    Cached like the machine roofline (``$ROOFLINE_CACHE_DIR``, default ``~/.cache/roofline``,
    file ``disk.json``), keyed by host and file system (device number) of ``path``;
    re-measured with ``remeasure=True`` or ``ROOFLINE_REMEASURE=1``.

    Parameters
    ----------
    path : str, optional
        A writable directory on the file system (default: the temporary directory).
    remeasure : bool
        Force a new measurement (:func:`measure_disk`, written to the cache).

    Returns
    -------
    DiskRoofline

    Raises
    ------
    ValueError
        ``path`` is not a writable directory.
    """
    path = os.path.realpath(str(tempfile.gettempdir() if path is None else path))
    if not os.path.isdir(path) or not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"path must be a writable directory, got {path!r}")
    key = f"disk|{socket.gethostname()}|{os.stat(path).st_dev}"
    cache = _disk_cache_path()
    remeasure = remeasure or os.environ.get("ROOFLINE_REMEASURE", "") not in ("", "0")
    entries = {}
    try:
        with open(cache) as f:
            entries = json.load(f)
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as exc:
        logger.warning("ignoring unreadable disk roofline cache %s: %s", cache, exc)
    if not remeasure and key in entries and entries[key].get("checksum_bandwidth"):
        try:
            return DiskRoofline(**entries[key])
        except TypeError:
            logger.warning("ignoring stale disk roofline cache entry in %s", cache)
    m = measure_disk(path)
    logger.info("measured %s", m)
    entries[key] = dataclasses.asdict(m)
    try:
        os.makedirs(os.path.dirname(cache), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(cache), prefix=".disk-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(entries, f, indent=1)
        os.replace(tmp, cache)
    except OSError as exc:
        logger.warning("could not write disk roofline cache %s: %s", cache, exc)
    return m
