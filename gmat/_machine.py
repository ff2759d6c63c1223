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

__all__ = ["DiskRoofline", "MachineRoofline", "disk_roofline", "machine_roofline", "measure_gpu",
           "measure_machine"]

#: The disk's roofline (small-file latency, streaming rates, the corner) lives with its
#: measurement in :mod:`roofline.kernels._machine` (the disk-simulated cluster of
#: :mod:`roofline.comm` uses it, below gmat); ``machine_roofline(device="disk")`` returns it.
DiskRoofline = kernels.DiskRoofline
disk_roofline = kernels.disk_roofline

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
    device : {"cpu", "gpu"}
        Whose ceilings these are.  On a GPU ``bandwidth`` is device memory (the best of a
        triad, a copy and a streaming read, numba-cuda kernels), ``flops*`` an FMA loop on
        registers, ``threads`` the resident threads of the FMA launch, ``cpu`` the device name.
    link_bandwidth : float
        GPU only: host-to-device copy bandwidth from pinned memory (bytes/s).
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
    device: str = "cpu"
    link_bandwidth: float = 0.0

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
        if self.device == "gpu":
            return (
                f"GPU roofline ({self.cpu}, measured {when})\n"
                f"  device memory     {self.bandwidth / 1e9:7.1f} GB/s  "
                f"(triad {self.triad_bandwidth / 1e9:.1f}, read {self.read_bandwidth / 1e9:.1f})\n"
                f"  flops ceiling     {self.flops32 / 1e12:7.2f} tflop/s float32, "
                f"{self.flops64 / 1e12:.2f} tflop/s float64 (FMA loop)\n"
                f"  host -> device    {self.link_bandwidth / 1e9:7.1f} GB/s (pinned)\n"
                f"  ridge point       {self.flops32 / self.bandwidth:7.2f} flop/byte float32"
            )
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


def _no_gpu_error():
    return RuntimeError(
        "machine_roofline(device='gpu') needs a CUDA device, and none is usable here "
        "(gmat.gpu_available() is False: no NVIDIA GPU/driver, or cupy / numba-cuda missing; "
        "install roofline[gpu] on a machine with a GPU)"
    )


def _gpu_key() -> str:
    import cupy

    dev = cupy.cuda.Device()
    props = cupy.cuda.runtime.getDeviceProperties(dev.id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return f"v{_CACHE_VERSION}|gpu|{socket.gethostname()}|{name}|{dev.pci_bus_id}", name


def _gpu_best(fn, repeat):
    """Best time in seconds of ``fn`` (device work) by CUDA events."""
    import cupy

    fn()  # warm-up (and compile)
    best = float("inf")
    for _ in range(repeat):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        best = min(best, cupy.cuda.get_elapsed_time(start, stop) / 1e3)
    return best


def measure_gpu(*, size_bytes: int = 512 * 2**20, repeat: int = 10) -> MachineRoofline:
    """Measure the current CUDA device's ceilings now (no cache).

    Device memory bandwidth: the best of a STREAM triad (3 words per element), a copy
    (2 words) and a streaming read, over float64 arrays of ``size_bytes`` (far above the L2
    cache); flops: :func:`roofline.kernels._cuda_primitives.gpu_fma` per dtype on all SMs;
    the link: a pinned host-to-device copy of ``size_bytes / 2``.

    Raises
    ------
    RuntimeError
        Without a usable CUDA device (the message names what is missing).
    """
    from ._arrays import gpu_available

    if not gpu_available():
        raise _no_gpu_error()
    import cupy

    from roofline import kernels as K

    _, name = _gpu_key()
    n = size_bytes // 8
    a = cupy.empty(n)
    b = cupy.ones(n)
    c = cupy.full(n, 0.5)
    acc = cupy.zeros(1)
    t_triad = _gpu_best(lambda: K.gpu_stream("triad", a, b, c), repeat)
    t_copy = _gpu_best(lambda: K.gpu_stream("copy", a, b), repeat)
    t_read = _gpu_best(lambda: K.gpu_stream("read", b, out=acc), repeat)
    triad, copy, read = 24 * n / t_triad, 16 * n / t_copy, 8 * n / t_read
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    blocks, threads, n_iter = sms * 16, 256, 4096
    ceilings = {}
    for dt in (np.float32, np.float64):
        seed = cupy.ones(threads, dtype=dt)
        out = cupy.empty(blocks * threads, dtype=dt)
        # the first launch compiles the kernel and says how many flops one launch does
        flops = K.gpu_fma(seed, n_iter, out, blocks=blocks, threads=threads)
        t = _gpu_best(lambda seed=seed, out=out: K.gpu_fma(seed, n_iter, out, blocks=blocks,
                                                            threads=threads), repeat)
        ceilings[dt] = flops / t
    host = cupy.cuda.alloc_pinned_memory(n * 4)
    h = np.frombuffer(host, np.float64, n // 2)
    h[:] = 1.0
    d = cupy.empty(n // 2)
    t_link = _gpu_best(lambda: d.set(h), max(3, repeat // 2))
    m = MachineRoofline(
        bandwidth=max(triad, copy, read),
        triad_bandwidth=triad,
        read_bandwidth=read,
        flops32=ceilings[np.float32],
        flops64=ceilings[np.float64],
        threads=blocks * threads,
        cpu=name,
        host=socket.gethostname(),
        measured_at=time.time(),
        load=0.0,
        device="gpu",
        link_bandwidth=8 * (n // 2) / t_link,
    )
    logger.info("measured GPU roofline: %s", m)
    return m


def machine_roofline(*, remeasure: bool = False, device: str = "cpu", path=None):
    """This machine's roofline, from the per-machine cache or measured (then cached).

    Parameters
    ----------
    device : {"cpu", "gpu", "disk"}
        ``"gpu"``: the current CUDA device's ceilings (:func:`measure_gpu`), cached per
        device (host, name, PCI bus); raises ``RuntimeError`` naming the missing device
        where none is usable.  ``"disk"``: the :class:`DiskRoofline` of the file system
        holding ``path`` (:func:`disk_roofline`: small-file latency, streaming write and read
        rates and the corner, cached per host and file system).
    path : str, optional
        ``device="disk"`` only: a writable directory (default: the temporary directory).
    remeasure : bool
        Force a new measurement (also forced by the environment variable
        ``ROOFLINE_REMEASURE=1``).  The cache lives in ``$ROOFLINE_CACHE_DIR`` (default
        ``~/.cache/roofline/machine.json``), keyed by host, CPU model and thread count.

    Returns
    -------
    MachineRoofline or DiskRoofline
        The cached ceilings of this host, CPU and thread count, or a new measurement
        (:func:`measure_machine`, written to the cache; an unwritable cache is logged); a
        :class:`DiskRoofline` for ``device="disk"``.
    """
    if device not in ("cpu", "gpu", "disk"):
        raise ValueError(f"device must be 'cpu', 'gpu' or 'disk', got {device!r}")
    if device == "disk":
        return disk_roofline(path, remeasure=remeasure)
    if device == "gpu":
        from ._arrays import gpu_available

        if not gpu_available():
            raise _no_gpu_error()
        key = _gpu_key()[0]
    else:
        key = _key(kernels.default_threads())
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
    m = measure_gpu() if device == "gpu" else measure_machine()
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
