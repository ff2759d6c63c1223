"""Measure this machine's roofline: sustained memory bandwidth and the flops ceiling, and the
read bandwidth of every cache level (the cache-aware roofline of Ilic, Pratas and Sousa, 2014).

All are measured on the thread count the kernels use (numba's), cached per machine in a small
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

__all__ = ["LEVELS", "DiskRoofline", "MachineRoofline", "cache_sizes", "disk_roofline",
           "machine_roofline", "measure_gpu", "measure_machine"]

#: The disk's roofline (small-file latency, streaming rates, the corner) lives with its
#: measurement in :mod:`roofline.kernels._machine` (the disk-simulated cluster of
#: :mod:`roofline.comm` uses it, below gmat); ``machine_roofline(device="disk")`` returns it.
DiskRoofline = kernels.DiskRoofline
disk_roofline = kernels.disk_roofline

logger = logging.getLogger(__name__)

# 3: the cache levels' sizes and bandwidths (a version-2 entry lacks them: remeasured)
_CACHE_VERSION = 3

#: The memory levels of the cache-aware roofline, fastest first.
LEVELS = ("L1", "L2", "L3", "DRAM")

# Cache sizes assumed where the system does not say (a common x86 server core: 32 KiB L1d,
# 1 MiB L2 per core, 32 MiB shared L3).
_DEFAULT_CACHES = {"L1": 32 * 2**10, "L2": 2**20, "L3": 32 * 2**20}


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
    l1_bandwidth, l2_bandwidth, l3_bandwidth : float
        CPU only: sustained read bandwidth (bytes/s, all ``threads`` together) of a working set
        held by the level: each thread reads its own buffer of half the level's size
        (:func:`roofline.kernels.stream_read_repeat`); for the L3, its L2's size plus its share
        of half the shared L3.  0: not measured (the level is then left out of :meth:`levels`).
    l1_size, l2_size, l3_size : int
        The levels' sizes in bytes, per core for the private L1 (data) and L2, the whole of the
        last-level cache for L3 (:func:`cache_sizes`).
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
    l1_bandwidth: float = 0.0
    l2_bandwidth: float = 0.0
    l3_bandwidth: float = 0.0
    l1_size: int = 0
    l2_size: int = 0
    l3_size: int = 0

    def levels(self) -> list:
        """The ceilings of the cache-aware roofline, fastest level first.

        A level's ceiling is the highest bandwidth measured at it or at any slower level (data
        a slower level can deliver at some rate, a faster one holding it can deliver at least
        as fast; a lower raw figure is a disturbed measurement, see :meth:`level_disorder`).
        A level's capacity is what the measuring threads hold together: a private level's
        size times ``threads`` (each thread's share in its own core's cache), the shared L3's
        size once, DRAM unbounded.

        Returns
        -------
        list of (str, float, float)
            ``(name, capacity_bytes, bandwidth)`` for each measured level in :data:`LEVELS`
            order, ending with ``("DRAM", inf, bandwidth)``.
        """
        raw = [("L1", self.l1_size * max(self.threads, 1), self.l1_bandwidth),
               ("L2", self.l2_size * max(self.threads, 1), self.l2_bandwidth),
               ("L3", self.l3_size, self.l3_bandwidth)]
        out = [("DRAM", float("inf"), self.bandwidth)]
        for name, cap, bw in reversed(raw):
            if bw > 0 and cap > 0:
                out.append((name, float(cap), max(bw, out[-1][2])))
        return out[::-1]

    def level_for(self, working_set: float) -> tuple:
        """The fastest level whose capacity holds ``working_set`` bytes, and its ceiling.

        Parameters
        ----------
        working_set : float
            Bytes a call touches (:attr:`Cost.working_set <roofline.gmat.Cost>`).

        Returns
        -------
        (str, float)
            The level's name (``"L1"``, ``"L2"``, ``"L3"`` or ``"DRAM"``) and its bandwidth in
            bytes/s.  Without measured cache levels: ``("DRAM", bandwidth)``.
        """
        for name, cap, bw in self.levels():
            if working_set <= cap:
                return name, bw
        return "DRAM", self.bandwidth  # pragma: no cover - DRAM's capacity is unbounded

    def level_disorder(self) -> str:
        """Why the raw level bandwidths are not ordered L1 >= L2 >= L3 >= DRAM, or ``""``.

        Returns
        -------
        str
            Empty when the measured figures are ordered (or no level was measured); otherwise
            which level measured slower than the one behind it, with the load average (a
            shared machine's neighbours evict the caches and take the cores mid-measurement).
        """
        raw = [(n, b) for n, b in (("L1", self.l1_bandwidth), ("L2", self.l2_bandwidth),
                                   ("L3", self.l3_bandwidth), ("DRAM", self.bandwidth)) if b > 0]
        bad = [f"{a} {ba / 1e9:.1f} GB/s < {b} {bb / 1e9:.1f} GB/s"
               for (a, ba), (b, bb) in zip(raw[:-1], raw[1:], strict=True) if ba < bb]
        if not bad:
            return ""
        return (f"{'; '.join(bad)}: a disturbed measurement (load average {self.load:.1f} on "
                f"{self.threads} threads; other work evicts the caches and takes the cores); "
                f"the ceilings use the faster figure")

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
        levels = "".join(
            f"  {name:<3} bandwidth     {bw / 1e9:7.1f} GB/s  (holds {cap / 2**20:.2f} MiB"
            f"{' on all threads' if name in ('L1', 'L2') else ''})\n"
            for name, cap, bw in self.levels() if name != "DRAM")
        disorder = self.level_disorder()
        return (
            f"Machine roofline ({self.cpu or 'unknown CPU'}, {self.threads} threads, "
            f"measured {when})\n"
            + levels
            + f"  memory bandwidth  {self.bandwidth / 1e9:7.1f} GB/s  "
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
            + (f"\n  NOTE: {disorder}" if disorder else "")
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


def _parse_size(text: str) -> int:
    """``"32K"``, ``"1024 KiB"``, ``"32 MiB (1 instance)"``, ``"1M"`` -> bytes (0 if unreadable)."""
    text = text.strip().split("(")[0].strip().replace(" ", "")
    units = {"": 1, "B": 1, "K": 2**10, "KB": 2**10, "KIB": 2**10, "M": 2**20, "MB": 2**20,
             "MIB": 2**20, "G": 2**30, "GB": 2**30, "GIB": 2**30}
    num = text.rstrip("KMGiBkmgb")
    try:
        return int(float(num) * units[text[len(num):].upper()])
    except (ValueError, KeyError):
        return 0


def _sysfs_caches(root="/sys/devices/system/cpu/cpu0/cache") -> dict:
    sizes = {}
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        return sizes
    for e in entries:
        if not e.startswith("index"):
            continue
        try:
            with open(os.path.join(root, e, "level")) as f:
                level = int(f.read())
            with open(os.path.join(root, e, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(root, e, "size")) as f:
                size = _parse_size(f.read())
        except (OSError, ValueError):
            continue
        if kind != "Instruction" and 1 <= level <= 3 and size > 0:
            sizes[f"L{level}"] = size
    return sizes


def _lscpu_caches() -> dict:
    """Per-instance sizes from ``lscpu`` (its totals divided by the instance count)."""
    import subprocess

    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    sizes = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        level = {"L1d cache": "L1", "L2 cache": "L2", "L3 cache": "L3"}.get(name.strip())
        if level is None:
            continue
        total = _parse_size(value)
        inst = 1
        if "instance" in value:
            try:
                inst = max(1, int(value.split("(")[1].split()[0]))
            except (IndexError, ValueError):
                inst = 1
        if total > 0:
            sizes[level] = total // inst if level != "L3" else total
    return sizes


def cache_sizes() -> dict:
    """This machine's data-cache sizes in bytes: ``{"L1": ..., "L2": ..., "L3": ...}``.

    From ``/sys/devices/system/cpu/cpu0/cache`` (Linux), else ``lscpu``, else a common x86
    server core's (32 KiB, 1 MiB, 32 MiB; logged); L1 and L2 are per core, L3 the last-level
    cache as one core sees it.  A level the system does not report takes the default.

    Returns
    -------
    dict
        Level name to size in bytes.
    """
    found = _sysfs_caches() or _lscpu_caches()
    if len(found) < 3:
        logger.info("cache sizes not all reported (%s); assuming %s for the rest", found,
                    _DEFAULT_CACHES)
    return {lvl: int(found.get(lvl) or _DEFAULT_CACHES[lvl]) for lvl in ("L1", "L2", "L3")}


def _measure_levels(sizes, threads, repeat, traffic=64 * 2**20):
    """Read bandwidth (bytes/s, all threads) of a working set held by each cache level.

    Each thread re-reads its own float64 buffer: half the private L1 / L2, or for L3 its L2's
    size plus its share of half the shared L3 (so the buffer spills out of the L2 even where
    the L3's share per core is smaller than the L2, as on Xeons with a non-inclusive L3);
    passes are chosen so each call reads about ``traffic`` bytes per thread (at least one
    pass).
    """
    out = {}
    for level in ("L1", "L2", "L3"):
        per_thread = (sizes[level] // 2 if level != "L3"
                      else sizes["L2"] + sizes[level] // (2 * threads))
        n = max(64, per_thread // 8)
        buf = np.ones((threads, n))
        n_pass = max(1, traffic // (8 * n))
        kernels.stream_read_repeat(buf, 1)  # compile and first-touch
        t = _best(lambda buf=buf, n_pass=n_pass: kernels.stream_read_repeat(buf, n_pass), repeat)
        out[level] = threads * 8 * n * n_pass / t
    return out


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


def measure_machine(*, size_bytes: int = 256 * 2**20, repeat: int = 10,
                    level_traffic: int = 64 * 2**20, caches: dict | None = None,
                    fma_iterations: int = 100_000) -> MachineRoofline:
    """Measure bandwidth and flops ceilings now (no cache).

    Parameters
    ----------
    size_bytes : int
        Size of each streamed array; keep it well above the last-level cache.
    repeat : int
        Repetitions; the best is kept (the machine may be shared).  The FMA loop runs in
        ``3 * repeat`` short bursts, so that one of them likely runs undisturbed.
    level_traffic : int
        Bytes each thread reads per timed call of a cache level's measurement.
    caches : dict, optional
        ``{"L1": bytes, "L2": bytes, "L3": bytes}``: the cache sizes to size the level
        measurements by (default :func:`cache_sizes`).
    fma_iterations : int
        Iterations of each burst of the FMA loop.

    Returns
    -------
    MachineRoofline
        The measured ceilings, with the load average at the start of the measurement.
    """
    load = _load()
    threads = kernels.default_threads()
    blocks = threads * 4
    triad, read = _measure_bandwidth(size_bytes // 8, blocks, repeat)
    sizes = dict(caches) if caches is not None else cache_sizes()
    level_bw = _measure_levels(sizes, threads, repeat, level_traffic)
    ceilings = {}
    for dt in (np.float32, np.float64):
        seed = np.ones(threads, dtype=dt)
        kernels.fma_loop(seed, 10)
        n_iter = max(1, int(fma_iterations))
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
        l1_bandwidth=level_bw["L1"],
        l2_bandwidth=level_bw["L2"],
        l3_bandwidth=level_bw["L3"],
        l1_size=int(sizes["L1"]),
        l2_size=int(sizes["L2"]),
        l3_size=int(sizes["L3"]),
    )
    logger.info("measured machine roofline: %s", m)
    if m.level_disorder():
        logger.warning("cache levels out of order: %s", m.level_disorder())
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
        ``~/.cache/roofline/machine.json``), keyed by the cache format's version, host, CPU
        model and thread count: an entry of an older format (without the cache levels) is
        never read, the machine is measured again.

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
        entry = entries[key]
        if device == "cpu" and not entry.get("l1_bandwidth"):
            # written by a version without the cache levels under this key: measure again
            logger.warning("roofline cache entry in %s lacks the cache levels; remeasuring", path)
        else:
            try:
                return MachineRoofline(**entry)
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
