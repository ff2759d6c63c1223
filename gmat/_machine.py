"""Measure this machine's roofline: sustained memory bandwidth and the flops ceiling.

Both are measured on the thread count the kernels use (numba's), cached per machine in a small
JSON file so they are not redone on every import, and re-measured on request
(``machine_roofline(remeasure=True)``, or ``ROOFLINE_REMEASURE=1`` in the environment).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import platform
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from roofline import kernels

__all__ = ["MachineRoofline", "machine_roofline", "measure_machine"]

logger = logging.getLogger(__name__)

_CACHE_VERSION = 2


@dataclass(frozen=True)
class MachineRoofline:
    """Measured ceilings of this machine on ``threads`` threads.

    The parameters are also the (read-only) attributes.

    Parameters
    ----------
    bandwidth : float
        Sustained main-memory bandwidth in bytes/s used by the roofline: the best of the
        STREAM-like triad and a streaming read, over arrays far larger than the last-level cache
        (the highest sustained bandwidth measured, so roofline times are lower bounds).
    triad_bandwidth, read_bandwidth : float
        The two measurements (bytes/s; the triad counts 3 words per element, STREAM's rule).
    flops32, flops64 : float
        Flops ceiling (flop/s) of an FMA loop on register-resident data, per dtype.
    threads : int
        Threads used by the measurement (and by the kernels).
    cpu, host : str
        Identification of the machine.
    measured_at : float
        Unix time of the measurement.
    load : float
        One-minute load average when measured; a busy machine gives low ceilings, and then
        roofline fractions overstate how close a kernel is (see :attr:`busy`).
    """

    bandwidth: float
    triad_bandwidth: float
    read_bandwidth: float
    flops32: float
    flops64: float
    threads: int
    cpu: str = ""
    host: str = ""
    measured_at: float = 0.0
    load: float = 0.0

    @property
    def busy(self) -> bool:
        """True when other work competed for the cores during the measurement."""
        return self.load > 0.5 * max(self.threads, 1)

    def flops(self, dtype) -> float:
        """Flops ceiling for ``dtype`` (float32 or float64).

        Parameters
        ----------
        dtype : numpy.dtype or type
            float32, or anything else for the float64 ceiling.

        Returns
        -------
        float
            flop/s: ``flops32`` for float32, ``flops64`` otherwise.
        """
        return self.flops32 if np.dtype(dtype) == np.float32 else self.flops64

    def __str__(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.measured_at))
        return (
            f"Machine roofline ({self.cpu or 'unknown CPU'}, {self.threads} threads, "
            f"measured {when})\n"
            f"  memory bandwidth  {self.bandwidth / 1e9:7.1f} GB/s  "
            f"(triad {self.triad_bandwidth / 1e9:.1f}, read {self.read_bandwidth / 1e9:.1f})\n"
            f"  flops ceiling     {self.flops32 / 1e9:7.1f} gflop/s float32, "
            f"{self.flops64 / 1e9:.1f} gflop/s float64 (FMA loop)\n"
            f"  ridge point       {self.flops32 / self.bandwidth:7.2f} flop/byte float32"
            + (
                f"\n  WARNING: load average was {self.load:.1f} during the measurement: the "
                f"ceilings are probably low; re-measure on a quiet machine (--remeasure)"
                if self.busy
                else ""
            )
        )


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cache_path() -> Path:
    base = os.environ.get("ROOFLINE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "roofline"
    )
    return Path(base) / "machine.json"


def _key(threads: int) -> str:
    return f"v{_CACHE_VERSION}|{socket.gethostname()}|{_cpu_name()}|{os.cpu_count()}|{threads}"


def _best(fn, repeat):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _measure_bandwidth(n, blocks, repeat):
    """(triad, read) bandwidth in bytes/s over float64 arrays of ``n`` elements."""
    b = np.ones(n)
    c = np.full(n, 0.5)
    a = np.empty(n)
    kernels.stream_triad(a, b, c, 3.0, blocks)  # compile and first-touch
    kernels.stream_read(b, blocks)
    t_triad = _best(lambda: kernels.stream_triad(a, b, c, 3.0, blocks), repeat)
    t_read = _best(lambda: kernels.stream_read(b, blocks), repeat)
    return 3 * 8 * n / t_triad, 8 * n / t_read


def _load() -> float:
    try:
        return float(os.getloadavg()[0])
    except (OSError, AttributeError):  # pragma: no cover - platform without getloadavg
        return 0.0


def measure_machine(*, size_bytes: int = 256 * 2**20, repeat: int = 10) -> MachineRoofline:
    """Measure bandwidth and flops ceilings now (no cache).

    Parameters
    ----------
    size_bytes : int
        Size of each streamed array; keep it well above the last-level cache.
    repeat : int
        Repetitions; the best is kept (the machine may be shared).  The FMA loop runs in
        ``3 * repeat`` short bursts, so that one of them likely runs undisturbed.

    Returns
    -------
    MachineRoofline
        The measured ceilings, with the load average at the start of the measurement.
    """
    load = _load()
    threads = kernels.default_threads()
    blocks = threads * 4
    triad, read = _measure_bandwidth(size_bytes // 8, blocks, repeat)
    ceilings = {}
    for dt in (np.float32, np.float64):
        seed = np.ones(threads, dtype=dt)
        kernels.fma_loop(seed, 10)
        n_iter = 100_000
        best = float("inf")
        flops = 0
        for _ in range(3 * repeat):
            t0 = time.perf_counter()
            _, flops = kernels.fma_loop(seed, n_iter)
            best = min(best, time.perf_counter() - t0)
        ceilings[dt] = flops / best
    m = MachineRoofline(
        bandwidth=max(triad, read),
        triad_bandwidth=triad,
        read_bandwidth=read,
        flops32=ceilings[np.float32],
        flops64=ceilings[np.float64],
        threads=threads,
        cpu=_cpu_name(),
        host=socket.gethostname(),
        measured_at=time.time(),
        load=load,
    )
    logger.info("measured machine roofline: %s", m)
    return m


def machine_roofline(*, remeasure: bool = False) -> MachineRoofline:
    """This machine's roofline, from the per-machine cache or measured (then cached).

    Parameters
    ----------
    remeasure : bool
        Force a new measurement (also forced by the environment variable
        ``ROOFLINE_REMEASURE=1``).  The cache lives in ``$ROOFLINE_CACHE_DIR`` (default
        ``~/.cache/roofline/machine.json``), keyed by host, CPU model and thread count.

    Returns
    -------
    MachineRoofline
        The cached ceilings of this host, CPU and thread count, or a new measurement
        (:func:`measure_machine`, written to the cache; an unwritable cache is logged).
    """
    threads = kernels.default_threads()
    key = _key(threads)
    path = _cache_path()
    remeasure = remeasure or os.environ.get("ROOFLINE_REMEASURE", "") not in ("", "0")
    entries = {}
    if path.exists():
        try:
            entries = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            logger.warning("ignoring unreadable roofline cache %s: %s", path, exc)
            entries = {}
    if not remeasure and key in entries:
        try:
            return MachineRoofline(**entries[key])
        except TypeError:
            logger.warning("ignoring stale roofline cache entry in %s", path)
    m = measure_machine()
    entries[key] = dataclasses.asdict(m)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".machine-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(entries, f, indent=1)
        os.replace(tmp, path)
    except OSError as exc:
        logger.warning("could not write roofline cache %s: %s", path, exc)
    return m
