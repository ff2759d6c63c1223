"""FileSource: minibatches from a sequence of CSC shard files (npz or HDF5), plus the writer.

A shard holds a block of examples as CSC arrays (``data``, ``indices``, ``indptr``, ``shape``)
and optional per-example ``y`` (``(n,)`` or ``(k, n)``) and ``w``.  Shards are named by a
pattern with an ``{i}`` field (``"part-{i:05d}.npz"``) and may be striped over several
directories (disks): shard ``i`` lives in ``dirs[i % len(dirs)]`` (BIDMach's FileSource
with its file-name functions).  Directories may be fsspec URLs.

Integrity: :class:`ShardWriter` stamps a conversion id into every shard (an npz member, an HDF5
attribute), writes npz members with their zip CRC-32 (checked on every read from the bytes
read) and HDF5 datasets with the fletcher32 filter (checked by HDF5), and after the last shard
writes a JSON manifest (:func:`manifest_path`: conversion id, format, ``n_features``, and per
shard its name, examples, nnz, bytes and the CRC-32 of each array), atomically (temp file,
fsync, rename).  :class:`FileSource` takes the shard count from the manifest and refuses a
missing shard, a stale one (another conversion id) or one that disagrees with its record.
"""

from __future__ import annotations

import io
import json
import logging
import os
import posixpath
import re
import struct
import threading
import uuid
import zipfile
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from roofline import gmat
from roofline.gmat import option

from ._base import DataSource, DataSourceOptions, _check_weights, _csc, _Rebatcher
from ._io import display_name, is_url, open_binary

__all__ = ["FileSource", "FileSourceOptions", "ShardWriter", "write_shards", "read_shard"]

logger = logging.getLogger(__name__)

_FORMATS = ("npz", "h5")


def _format_of(pattern: str, fmt) -> str:
    if fmt is not None:
        if fmt not in _FORMATS:
            raise ValueError(f"format must be one of {_FORMATS}, got {fmt!r}")
        return fmt
    low = pattern.lower()
    if low.endswith(".npz"):
        return "npz"
    if low.endswith((".h5", ".hdf5")):
        return "h5"
    raise ValueError(
        f"cannot infer the shard format from pattern {pattern!r}: end it with .npz, .h5 or "
        ".hdf5, or pass format='npz'/'h5'"
    )


def _check_pattern(pattern):
    if not isinstance(pattern, str) or "{i" not in pattern:
        raise ValueError(f"pattern must be a string with an {{i}} field, got {pattern!r}")
    try:
        pattern.format(i=0)
    except (KeyError, IndexError, ValueError) as exc:
        raise ValueError(f"pattern {pattern!r} is not a valid format string: {exc}") from exc


def _join(d, name):
    if d is None:
        return name
    if is_url(d):
        return d.rstrip("/") + "/" + name
    return os.path.join(os.fspath(d), name)


def _shard_path(pattern, dirs, i):
    name = pattern.format(i=i)
    if not dirs:
        return name
    return _join(dirs[i % len(dirs)], name)


def _exists(path) -> bool:
    if is_url(path):
        import fsspec

        fs, p = fsspec.core.url_to_fs(path)
        try:  # info() is a HEAD / stat; fsspec's http exists() would GET the whole file
            fs.info(p)
        except FileNotFoundError:
            return False
        return True
    return os.path.exists(path)


# -- the manifest ----------------------------------------------------------------------------------
# ShardWriter writes it last, atomically: JSON with the conversion id (also stamped into every
# shard), the shard names, example counts, nnz and CRC-32s.  FileSource trusts it for the shard
# count and refuses a shard that is missing, from another conversion, or does not match it.

_MANIFEST_VERSION = 1
_I_FIELD = re.compile(r"\{i(?:[!:][^{}]*)?\}")


def manifest_path(pattern, dirs=None):
    """Where the manifest of the shards ``pattern`` (striped over ``dirs``) lives: the pattern
    with its ``{i}`` field replaced by ``manifest`` and ``.json`` appended, in the first
    directory (``part-{i:05d}.npz`` -> ``part-manifest.npz.json``)."""
    if isinstance(dirs, (str, os.PathLike)):
        dirs = [dirs]
    name = _I_FIELD.sub("manifest", pattern) + ".json"
    return _join(dirs[0], name) if dirs else name


def _load_manifest(path):
    """The manifest at ``path`` (validated), or None when there is none."""
    if not _exists(path):
        return None
    name = display_name(path)
    try:
        with open_binary(path, block_size=1 << 20) as f:
            m = json.loads(f.read().decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"manifest {name}: cannot read it ({exc})") from exc
    try:
        if m.get("version") != _MANIFEST_VERSION:
            raise ValueError(f"unknown version {m.get('version')!r}")
        cid = m["conversion_id"]
        shards = m["shards"]
        for rec in shards:
            if not (isinstance(rec["name"], str) and int(rec["n_examples"]) >= 0
                    and int(rec["nnz"]) >= 0):
                raise ValueError(f"bad shard record {rec!r}")
            rec["conversion_id"] = cid
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"manifest {name}: not a shard manifest ({exc})") from exc
    return m


def _write_manifest(path, manifest):
    """Write ``manifest`` at ``path``: local files atomically (temp file, fsync, os.replace)."""
    text = json.dumps(manifest, indent=1).encode("utf-8")
    if is_url(path):
        import fsspec

        with fsspec.open(path, "wb") as f:
            f.write(text)
        return
    _write_local_atomic(path, lambda f: f.write(text))


def _write_local_atomic(path, dump):
    """``dump(f)`` into ``path + ".tmp"``, fsync, rename over ``path``, fsync the directory."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        dump(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)  # never leave a half-written file under the final name
    try:
        fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


# -- reading ---------------------------------------------------------------------------------------


def _bytes_of(arr):
    """The bytes of a contiguous array as a flat uint8 view (any dtype, C or Fortran order)."""
    return arr.reshape(-1, order="A").view(np.uint8)


# numpy parses a .npy header with ast.literal_eval, and CPython 3.11's AST constructor keeps its
# recursion counter per interpreter, not per thread: reader threads parsing headers at the same
# time can fail with "SystemError: AST constructor recursion depth mismatch" (CPython issue
# gh-106905; seen here in a test run, reproduced with 8 threads).  Every header parse of this
# module holds this lock (the headers are tiny; np.load's fallback path for compressed shards
# holds it for the whole read).
_HEADER_LOCK = threading.Lock()
_CRC_PIECE = 1 << 20  # bytes read per call when checksumming: the CRC reads them from cache


def _readinto_exact(f, arr, name, what, crc=None):
    """Fill ``arr`` (contiguous) from the current position of the binary file ``f``; with an
    initial ``crc``, return the CRC-32 of the bytes read continued from it."""
    mv = memoryview(_bytes_of(arr))
    got = 0
    n = len(mv)
    step = n if crc is None else _CRC_PIECE
    while got < n:
        k = f.readinto(mv[got : got + step])
        if not k:
            raise ValueError(f"shard {name}: {what} is truncated ({got} of {n} bytes)")
        if crc is not None:
            crc = zlib.crc32(mv[got : got + k], crc)
        got += k
    return crc


def _npz_layout(f, name):
    """Where each array of an uncompressed npz lies: ``{key: (offset, dtype, shape, fortran,
    header_crc, member_crc)}``; ``None`` when a member is compressed or unusual (then
    ``np.load`` reads it).  ``header_crc`` is the CRC-32 of the member's ``.npy`` header, so the
    member's zip CRC-32 is checked from the array bytes alone: ``crc32(array, header_crc)``."""
    with zipfile.ZipFile(f) as z:
        infos = z.infolist()
    if any(i.compress_type != zipfile.ZIP_STORED or not i.filename.endswith(".npy")
           for i in infos):
        return None
    layout = {}
    for i in infos:
        f.seek(i.header_offset)
        h = f.read(30)
        if len(h) != 30 or h[:4] != b"PK\x03\x04":
            raise ValueError(f"shard {name}: corrupt zip member {i.filename}")
        n, m = struct.unpack("<HH", h[26:30])
        start = i.header_offset + 30 + n + m
        f.seek(start)
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            with _HEADER_LOCK:
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        elif version == (2, 0):
            with _HEADER_LOCK:
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        else:
            return None
        if dtype.hasobject:
            raise ValueError(f"shard {name}: {i.filename} holds Python objects")
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if f.tell() - start + nbytes != i.file_size:
            raise ValueError(
                f"shard {name}: {i.filename} has {i.file_size} bytes, its header says "
                f"{f.tell() - start + nbytes}"
            )
        data_off = f.tell()
        f.seek(start)
        head = f.read(data_off - start)
        layout[i.filename[:-4]] = (data_off, dtype, shape, fortran, zlib.crc32(head), i.CRC)
    return layout


def _h5_layout(path, name):
    """Where each contiguous, unfiltered dataset of an HDF5 shard lies (h5py parses only the
    metadata), plus its ``shape`` attribute; ``None`` when a dataset is chunked/filtered."""
    import h5py

    with h5py.File(path, "r") as h:
        missing = {"data", "indices", "indptr"} - set(h.keys())
        if missing or "shape" not in h.attrs:
            raise ValueError(
                f"shard {name}: missing datasets {sorted(missing)} or the 'shape' attribute"
            )
        layout = {"shape": np.asarray(h.attrs["shape"])}
        for k in ("data", "indices", "indptr", "y", "w"):
            if k not in h:
                continue
            ds = h[k]
            off = ds.id.get_offset()
            if ds.chunks is not None or ds.compression is not None or not ds.dtype.isnative or (
                off is None and ds.size
            ):
                return None
            layout[k] = (off or 0, ds.dtype, ds.shape, False, None, None)
        if "conversion_id" in h.attrs:
            layout["conversion_id"] = h.attrs["conversion_id"]
    return layout


# Array layouts of local shards, keyed by path and validated by (mtime, size): after the first
# pass a shard is read with plain reads at known offsets (no zip/HDF5 parsing per pass).
_LAYOUTS: dict = {}
_MAX_LAYOUTS = 100_000


def _cached_layout(path):
    """The cached layout of a local shard if still valid (same mtime and size), else None."""
    if is_url(path):
        return None
    ent = _LAYOUTS.get(path)
    if ent is None or ent[1] is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return ent[1] if ent[0] == (st.st_mtime_ns, st.st_size) else None


def _alloc(layout):
    """Empty arrays for a shard layout (allocated by the caller's thread: see FileSource)."""
    return {k: np.empty(v[2], dtype=v[1], order="F" if v[3] else "C")
            for k, v in layout.items() if isinstance(v, tuple)}


def _read_local(path, fmt, name, prealloc=None):
    st = os.stat(path)
    key = (st.st_mtime_ns, st.st_size)
    ent = _LAYOUTS.get(path)
    if ent is not None and ent[0] == key:
        layout = ent[1]
    else:
        if fmt == "npz":
            with open(path, "rb", buffering=0) as f:
                layout = _npz_layout(f, name)
        else:
            layout = _h5_layout(path, name)
        if len(_LAYOUTS) >= _MAX_LAYOUTS:
            _LAYOUTS.clear()
        _LAYOUTS[path] = (key, layout)
    if layout is None:  # compressed or unusual: the libraries read it
        return _read_npz(path, name) if fmt == "npz" else _read_h5(path, name)
    out = {"y": None, "w": None}
    with open(path, "rb", buffering=0) as f:
        for k, v in layout.items():
            if not isinstance(v, tuple):
                out[k] = v
                continue
            off, dt, shp, fortran, head_crc, crc = v
            arr = prealloc.get(k) if prealloc else None
            if arr is None or arr.shape != tuple(shp) or arr.dtype != dt:
                arr = np.empty(shp, dtype=dt, order="F" if fortran else "C")
            got = head_crc
            if arr.nbytes:
                f.seek(off)
                got = _readinto_exact(f, arr, name, k, head_crc)
            if crc is not None:
                if got != crc:
                    raise ValueError(
                        f"shard {name}: corrupt: zip member {k}.npy fails its CRC-32 check "
                        f"(stored {crc:08x}, computed {got:08x})"
                    )
            out[k] = arr
    missing = {"data", "indices", "indptr", "shape"} - set(out)
    if missing:
        raise ValueError(f"shard {name}: missing arrays {sorted(missing)} (has {sorted(out)})")
    return out


def _read_npz(f, name):
    with _HEADER_LOCK, np.load(f, allow_pickle=False) as z:
        keys = set(z.files)
        missing = {"data", "indices", "indptr", "shape"} - keys
        if missing:
            raise ValueError(f"shard {name}: missing arrays {sorted(missing)} (has {sorted(keys)})")
        out = {k: z[k] for k in ("data", "indices", "indptr", "shape")}
        out["y"] = z["y"] if "y" in keys else None
        out["w"] = z["w"] if "w" in keys else None
        if "conversion_id" in keys:
            out["conversion_id"] = z["conversion_id"]
    return out


def _read_h5(f, name):
    import h5py

    with h5py.File(f, "r") as h:
        missing = {"data", "indices", "indptr"} - set(h.keys())
        if missing or "shape" not in h.attrs:
            raise ValueError(
                f"shard {name}: missing datasets {sorted(missing)} or the 'shape' attribute"
            )
        out = {k: h[k][()] for k in ("data", "indices", "indptr")}
        out["shape"] = np.asarray(h.attrs["shape"])
        out["y"] = h["y"][()] if "y" in h else None
        out["w"] = h["w"][()] if "w" in h else None
        # datasets HDF5 verified with their fletcher32 checksums as it read them
        out["checked"] = {k for k in ("data", "indices", "indptr", "y", "w")
                          if k in h and h[k].fletcher32}
        if "conversion_id" in h.attrs:
            out["conversion_id"] = h.attrs["conversion_id"]
    return out


def _cid(v):
    """The conversion id stamped into a shard (uint8 array in npz, str attribute in HDF5)."""
    if v is None:
        return None
    if isinstance(v, np.ndarray):
        v = v.tobytes()
    if isinstance(v, bytes):
        return v.decode("ascii", "replace")
    return str(v)


def _array_crcs(arrays):
    """CRC-32 of the bytes of each array (what the manifest records)."""
    return {k: zlib.crc32(_bytes_of(np.ascontiguousarray(v))) for k, v in arrays.items()
            if k in ("data", "indices", "indptr", "y", "w")}


def read_shard(path, fmt=None, *, n_features=None, validate=True, _prealloc=None, _expect=None):
    """Read one shard: ``(X, y, w)`` with X a CSC matrix ``n_features x n``.

    Raises ``ValueError`` naming the shard when the file is corrupt (an npz member fails its
    zip CRC-32, an HDF5 dataset its fletcher32 checksum), when its arrays disagree in shape or
    dtype, or, with ``validate``, when the CSC structure is invalid (unsorted or out-of-range
    indices, non-finite values) or a weight is negative or not finite.

    Parameters
    ----------
    path : str or path-like
        A local path or an fsspec URL.
    fmt : {"npz", "h5"}, optional
        The shard format; from the file name's suffix when omitted.
    n_features : int, optional
        The expected number of rows (features), e.g. that of the first shard of a set.
    validate : bool, default True
        Run the full CSC check (:func:`roofline.gmat.check_csc`) and the weights' check.
    _prealloc : optional
        Internal (:class:`FileSource`): arrays of a known layout to read a local shard into.
    _expect : dict, optional
        Internal (:class:`FileSource`): the shard's manifest record, checked against the file
        (conversion id, example count, nnz, array checksums).

    Returns
    -------
    X : scipy.sparse.csc_matrix, shape (n_features, n)
        The examples as columns.
    y : numpy.ndarray or None
        Labels, last axis of length ``n``.
    w : numpy.ndarray, shape (n,), or None
        Example weights.

    Raises
    ------
    ValueError
        As above, the message naming the shard.
    """
    name = display_name(path)
    fmt = _format_of(name, fmt)
    try:
        if is_url(path):
            with open_binary(path) as f:
                a = _read_npz(f, name) if fmt == "npz" else _read_h5(f, name)
        else:
            a = _read_local(path, fmt, name, _prealloc)
    except (OSError, EOFError, zipfile.BadZipFile) as exc:
        raise ValueError(f"shard {name}: cannot read it, corrupt or truncated ({exc})") from exc
    except ValueError as exc:
        if str(exc).startswith(f"shard {name}"):
            raise
        raise ValueError(f"shard {name}: cannot read it ({exc})") from exc
    if _expect is not None:
        _check_expected(name, fmt, a, _expect)
    shape = a["shape"]
    if shape.shape != (2,) or shape.dtype.kind not in "iu":
        raise ValueError(f"shard {name}: 'shape' must be 2 integers, got {shape!r}")
    n_rows, n_cols = int(shape[0]), int(shape[1])
    data, indices, indptr, y, w = a["data"], a["indices"], a["indptr"], a["y"], a["w"]
    if n_features is not None and n_rows != n_features:
        raise ValueError(
            f"shard {name}: has {n_rows} features (rows) but the first shard has {n_features}"
        )
    if indptr.ndim != 1 or indptr.shape[0] != n_cols + 1:
        raise ValueError(
            f"shard {name}: indptr has shape {indptr.shape}, expected ({n_cols + 1},) for "
            f"{n_cols} examples"
        )
    nnz = int(indptr[-1]) if len(indptr) else 0
    if data.shape != (nnz,) or indices.shape != (nnz,):
        raise ValueError(
            f"shard {name}: data {data.shape} and indices {indices.shape} must both have "
            f"indptr[-1] = {nnz} entries"
        )
    if data.dtype not in gmat.SUPPORTED_DTYPES:
        raise ValueError(f"shard {name}: data has dtype {data.dtype}, expected float32/float64")
    if indices.dtype.kind != "i" or indptr.dtype.kind != "i":
        raise ValueError(f"shard {name}: indices/indptr must be signed integers")
    if indices.dtype != indptr.dtype:
        big = np.promote_types(indices.dtype, indptr.dtype)
        indices, indptr = indices.astype(big), indptr.astype(big)
    for arr, what in ((y, "y"), (w, "w")):
        if arr is not None and (arr.ndim == 0 or arr.shape[-1] != n_cols):
            raise ValueError(
                f"shard {name}: {what} has shape {arr.shape} but the shard has {n_cols} "
                "examples (last axis must match)"
            )
    if w is not None and w.ndim != 1:
        raise ValueError(f"shard {name}: w must be 1-D, got shape {w.shape}")
    X = _csc(data, indices, indptr, (n_rows, n_cols))
    if validate:
        try:
            gmat.check_csc(X, "X")
            if w is not None:
                _check_weights(w, "w")
        except (ValueError, TypeError) as exc:
            raise ValueError(f"shard {name}: {exc}") from exc
    return X, y, w


def _check_expected(name, fmt, a, rec):
    """Check a shard's arrays against its manifest record ``rec`` (conversion id, example count,
    nnz; for HDF5 also the CRC-32 of every array that has no fletcher32 filter: npz members
    carry their own zip CRC-32, checked on reading)."""
    cid = _cid(a.get("conversion_id"))
    if cid != rec["conversion_id"]:
        raise ValueError(
            f"shard {name}: stale: it belongs to conversion {cid or '(none)'}, the manifest "
            f"to conversion {rec['conversion_id']} (left from an earlier conversion, or "
            "overwritten since: convert again)"
        )
    shape = np.asarray(a["shape"]).reshape(-1)
    n = int(shape[1]) if shape.shape == (2,) else -1
    nnz = int(a["indptr"][-1]) if len(a["indptr"]) else 0
    if n != rec["n_examples"] or nnz != rec["nnz"]:
        raise ValueError(
            f"shard {name}: has {n} examples and {nnz} non-zeros, its manifest says "
            f"{rec['n_examples']} and {rec['nnz']}"
        )
    if fmt == "h5":
        for k, want in rec.get("crc32", {}).items():
            if k in a.get("checked", ()):
                continue
            arr = a.get(k)
            got = None if arr is None else zlib.crc32(_bytes_of(np.ascontiguousarray(arr)))
            if got != want:
                raise ValueError(
                    f"shard {name}: corrupt: array {k!r} fails the manifest's CRC-32 check "
                    f"(recorded {want:08x}, computed {'missing' if got is None else f'{got:08x}'})"
                )


def _shard_header(path, fmt):
    """``(n_features, n_examples, conversion_id)`` of a shard without reading its arrays
    (``conversion_id`` is None in shards not written by :class:`ShardWriter`)."""
    name = display_name(path)
    try:
        f = open_binary(path) if is_url(path) else path
        try:
            if fmt == "npz":
                with _HEADER_LOCK, np.load(f, allow_pickle=False) as z:
                    if "shape" not in z.files:
                        raise ValueError(f"shard {name}: no 'shape' array")
                    s = z["shape"]
                    cid = _cid(z["conversion_id"]) if "conversion_id" in z.files else None
            else:
                import h5py

                with h5py.File(f, "r") as h:
                    if "shape" not in h.attrs:
                        raise ValueError(f"shard {name}: no 'shape' attribute")
                    s = np.asarray(h.attrs["shape"])
                    cid = _cid(h.attrs.get("conversion_id"))
        finally:
            if f is not path:
                f.close()
    except (OSError, EOFError, zipfile.BadZipFile) as exc:
        raise ValueError(f"shard {name}: cannot read it ({exc})") from exc
    if np.shape(s) != (2,):
        raise ValueError(f"shard {name}: 'shape' must be 2 integers, got {s!r}")
    return int(s[0]), int(s[1]), cid


@dataclass
class FileSourceOptions(DataSourceOptions):
    """Options of :class:`FileSource` (see its parameters)."""

    pattern: str = option("", "shard file name with an {i} field (a full path or URL without "
                              "dirs)")
    dirs: list = option([], "striping: shard i is dirs[i % len(dirs)] / pattern", kind=list)
    n_shards: int | None = option(None, "number of shards; None: 0, 1, ... while they exist",
                                  kind=int, low=1)
    format: str | None = option(None, "shard format; None: from the pattern's suffix",
                                choices=_FORMATS)
    order: str = option("sequential", "shard order within a pass ('random': permuted each "
                                      "pass with default_rng([seed, pass]))",
                        choices=("sequential", "random"))
    seed: int | None = option(None, "shard-order seed (required with order='random')", kind=int)
    n_readers: int = option(2, "threads reading shards in parallel", low=1)
    lookahead: int = option(2, "shards read ahead of the one being consumed", low=1)
    validate: bool = option(True, "full CSC check of every shard")
    rank: int = option(0, "this rank's shards: those with index % size == rank", low=0)
    size: int = option(1, "ranks sharing the shards (a distributed job's size)", low=1)

    def _check(self, prefix):
        try:
            _check_pattern(self.pattern)
        except ValueError as exc:
            raise ValueError(f"{prefix}option 'pattern': {exc}") from None
        for d in self.dirs:
            if not isinstance(d, str):
                raise ValueError(f"{prefix}option 'dirs' must hold strings, got {d!r}")
        if self.rank >= self.size:
            raise ValueError(f"{prefix}option 'rank' = {self.rank} must be below 'size' = "
                             f"{self.size}")
        if self.order == "random" and self.seed is None:
            raise ValueError(f"{prefix}option 'order' = 'random' needs an integer seed, got "
                             f"seed=None")


class FileSource(DataSource):
    """Minibatches streamed from CSC shard files (npz or HDF5), read ahead in parallel.

    Parameters
    ----------
    pattern : str
        Shard file name with an ``{i}`` field, e.g. ``"part-{i:05d}.npz"``; a full path (or
        URL) when ``dirs`` is not given.
    dirs : list of str, optional
        Striping: shard ``i`` is ``dirs[i % len(dirs)] / pattern.format(i=i)``.
    n_shards : int, optional
        Number of shards.  By default the manifest's count, or (no manifest: hand-made shards)
        shards ``0, 1, ...`` while they exist, with a warning giving the count found.  With a
        manifest, ``n_shards`` may select its first shards.
    format : {"npz", "h5"}, optional
        Inferred from the pattern's suffix.
    order : {"sequential", "random"}
        Shard order within a pass; ``"random"`` permutes the shards each pass with
        ``default_rng([seed, pass])``.
    seed : int, optional
        Required with ``order="random"``.
    n_readers : int
        Threads reading shards in parallel.
    lookahead : int
        Shards read ahead of the one being consumed (BIDMach's ``lookahead``).
    validate : bool
        Full CSC check of every shard (sorted in-range indices, finite values).
    rank, size : int
        One rank of a distributed job (``comm.rank``, ``comm.size`` of
        :mod:`roofline.comm`) reads only its shards: those whose index ``i`` has
        ``i % size == rank``.  Every shard is still checked against the manifest first.
    batch_size, drop_last
        See :class:`DataSourceOptions`.  Minibatches run across shard boundaries.

    Notes
    -----
    ``n_features`` and ``n_examples`` come from the shard headers at construction; a shard
    whose arrays disagree (with each other or with the first shard's feature count) raises
    ``ValueError`` naming the shard.  So does a corrupt shard (failed zip CRC-32, fletcher32 or
    manifest CRC-32), and, with a manifest (:func:`manifest_path`), a missing shard or one from
    another conversion.  Without a manifest, a gap (shard ``k`` missing, ``k + 1`` present)
    is an error.
    """

    def __init__(
        self,
        pattern,
        *,
        dirs=None,
        n_shards=None,
        format=None,
        order="sequential",
        seed=None,
        n_readers=2,
        lookahead=2,
        validate=True,
        rank=0,
        size=1,
        batch_size=10_000,
        drop_last=False,
    ):
        if isinstance(dirs, (str, os.PathLike)):
            dirs = [dirs]
        self.opts = FileSourceOptions(
            batch_size=batch_size,
            drop_last=drop_last,
            pattern=pattern,
            dirs=[os.fspath(d) if not isinstance(d, str) else d for d in (dirs or [])],
            n_shards=n_shards,
            format=format,
            order=order,
            seed=seed,
            n_readers=n_readers,
            lookahead=lookahead,
            validate=validate,
            rank=rank,
            size=size,
        )
        self.format = _format_of(pattern, format)
        o = self.opts
        self.manifest_path = manifest_path(pattern, o.dirs)
        self.manifest = _load_manifest(self.manifest_path)
        if self.manifest is not None:
            paths, heads = self._from_manifest()
        else:
            paths, heads = self._discover()
        self.n_features = heads[0][0]
        for p, (nf, _, _) in zip(paths, heads, strict=True):
            if nf != self.n_features:
                raise ValueError(
                    f"shard {display_name(p)}: has {nf} features (rows) but shard "
                    f"{display_name(paths[0])} has {self.n_features}"
                )
        #: The conversion's indices of the shards this rank reads (all of them by default).
        self.shard_ids = [i for i in range(len(paths)) if i % o.size == o.rank]
        self.paths = [paths[i] for i in self.shard_ids]
        self.shard_sizes = np.array([heads[i][1] for i in self.shard_ids], dtype=np.int64)
        self.n_examples = int(self.shard_sizes.sum())
        self._pass = 0
        self._pool = None

    def _from_manifest(self):
        """Shard paths and headers as the manifest lists them; a missing shard, one from
        another conversion or one that disagrees with its record is an error naming it."""
        o, m = self.opts, self.manifest
        mname = display_name(self.manifest_path)
        recs = m["shards"]
        if not recs:
            raise ValueError(f"manifest {mname} lists no shard (the conversion wrote no example)")
        if o.n_shards is not None and o.n_shards > len(recs):
            extra = _shard_path(o.pattern, o.dirs, len(recs))
            what = "is not part of that conversion" if _exists(extra) else "does not exist"
            raise ValueError(f"shard {display_name(extra)} {what} (n_shards={o.n_shards}, "
                             f"manifest {mname} lists {len(recs)} shards)")
        if o.n_shards is not None:
            recs = recs[: o.n_shards]  # a prefix of the conversion, each shard still checked
        if m.get("format") not in (None, self.format):
            raise ValueError(f"manifest {mname} lists {m['format']} shards, not {self.format}")
        paths = [_shard_path(o.pattern, o.dirs, i) for i in range(len(recs))]
        for i, (p, rec) in enumerate(zip(paths, recs, strict=True)):
            if rec["name"] != o.pattern.format(i=i):
                raise ValueError(f"manifest {mname}: shard {i} is {rec['name']!r}, the "
                                 f"pattern gives {o.pattern.format(i=i)!r}")
            if not _exists(p):
                raise ValueError(f"shard {display_name(p)} is missing: manifest {mname} lists "
                                 f"{len(recs)} shards")
        heads = [_shard_header(p, self.format) for p in paths]
        for p, (_, n, cid), rec in zip(paths, heads, recs, strict=True):
            if cid != rec["conversion_id"]:
                raise ValueError(
                    f"shard {display_name(p)}: stale: it belongs to conversion "
                    f"{cid or '(none)'}, manifest {mname} to conversion {rec['conversion_id']} "
                    "(left from an earlier conversion, or an interrupted one: convert again)"
                )
            if n != rec["n_examples"]:
                raise ValueError(f"shard {display_name(p)}: has {n} examples, manifest {mname} "
                                 f"says {rec['n_examples']}")
        return paths, heads

    def _discover(self):
        """Without a manifest: shards ``0, 1, ...`` while they exist (or ``n_shards``)."""
        o = self.opts
        if o.n_shards is None:
            paths = []
            while _exists(_shard_path(o.pattern, o.dirs, len(paths))):
                paths.append(_shard_path(o.pattern, o.dirs, len(paths)))
            if not paths:
                raise ValueError(
                    f"no shard found: {_shard_path(o.pattern, o.dirs, 0)} does not exist"
                )
            after = _shard_path(o.pattern, o.dirs, len(paths) + 1)
            if _exists(after):
                raise ValueError(
                    f"shard {display_name(_shard_path(o.pattern, o.dirs, len(paths)))} is "
                    f"missing but {display_name(after)} exists (no manifest "
                    f"{display_name(self.manifest_path)}; pass n_shards to read only the "
                    f"first {len(paths)})"
                )
            logger.warning(
                "no manifest %s: found %d shards (%s .. %s) by probing until %s did not exist; "
                "a missing or stale shard cannot be detected (write shards with ShardWriter)",
                display_name(self.manifest_path), len(paths), display_name(paths[0]),
                display_name(paths[-1]), display_name(_shard_path(o.pattern, o.dirs,
                                                                  len(paths))),
            )
        else:
            paths = [_shard_path(o.pattern, o.dirs, i) for i in range(o.n_shards)]
            for p in paths:
                if not _exists(p):
                    raise ValueError(f"shard {display_name(p)} does not exist "
                                     f"(n_shards={o.n_shards})")
        heads = [_shard_header(p, self.format) for p in paths]
        cids = {h[2] for h in heads} - {None}
        if cids:
            first = next(p for p, h in zip(paths, heads, strict=True) if h[2] is not None)
            for p, h in zip(paths, heads, strict=True):
                if h[2] != heads[0][2]:
                    raise ValueError(
                        f"shard {display_name(p)}: from conversion {h[2] or '(none)'}, but "
                        f"shard {display_name(paths[0])} is from {heads[0][2] or '(none)'}: "
                        f"shards of different conversions, and no manifest "
                        f"{display_name(self.manifest_path)} (the last conversion did not "
                        "finish?)"
                    )
            logger.warning("shards %s .. carry conversion id %s but its manifest %s is missing "
                           "(the conversion did not finish?)", display_name(first), heads[0][2],
                           display_name(self.manifest_path))
        return paths, heads

    def reset(self) -> None:
        self._pass += 1

    def shard_order(self, pass_index: int | None = None) -> np.ndarray:
        """Shard indices in reading order for a pass (the current one by default).

        Parameters
        ----------
        pass_index : int, optional
            The pass (0 for the first); the current pass when omitted.

        Returns
        -------
        numpy.ndarray of int
            A permutation of ``range(n_shards)``: drawn from
            ``default_rng([seed, pass_index])`` with ``order="random"``, the identity otherwise.
        """
        p = self._pass if pass_index is None else pass_index
        n = len(self.paths)
        if self.opts.order == "random":
            return np.random.default_rng([int(self.opts.seed), p]).permutation(n)
        return np.arange(n)

    def _read(self, i, prealloc=None):
        rec = self.manifest["shards"][self.shard_ids[i]] if self.manifest is not None else None
        return read_shard(self.paths[i], self.format, n_features=self.n_features,
                          validate=self.opts.validate, _prealloc=prealloc, _expect=rec)

    def _submit(self, i):
        # When the shard's layout is known (every pass after the first), its arrays are
        # allocated here, in the consumer's thread, and only filled by the reader thread:
        # memory freed by the consumer is then reused by the same malloc arena instead of
        # being trimmed and faulted in again by the reader threads' arenas (measured: ~1.5x).
        layout = _cached_layout(self.paths[i])
        prealloc = _alloc(layout) if layout is not None else None
        return self._pool.submit(self._read, i, prealloc)

    def _blocks(self):
        o = self.opts
        order = self.shard_order()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(o.n_readers, thread_name_prefix="filesource")
        ahead = max(o.lookahead, o.n_readers)
        futs = {}
        try:
            for k in range(len(order)):
                for kk in range(k, min(k + ahead + 1, len(order))):
                    if kk not in futs:
                        futs[kk] = self._submit(int(order[kk]))
                yield futs.pop(k).result()
        finally:
            for f in futs.values():
                f.cancel()

    def _batches(self):
        rb = _Rebatcher(self.opts.batch_size, self.opts.drop_last)
        for X, y, w in self._blocks():
            yield from rb.push(X, y, w)
        yield from rb.finish()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __repr__(self) -> str:
        return (
            f"FileSource({self.opts.pattern!r}, {len(self.paths)} {self.format} shards over "
            f"{max(1, len(self.opts.dirs))} dirs, {self.n_features} features x "
            f"{self.n_examples} examples, batch_size={self.opts.batch_size})"
        )


# -- writing ---------------------------------------------------------------------------------------


def _makedirs(d):
    if d is None:
        return
    if is_url(d):
        import fsspec

        fs, p = fsspec.core.url_to_fs(d)
        fs.makedirs(p, exist_ok=True)
    else:
        os.makedirs(d, exist_ok=True)


def _h5_chunks(v, chunk_bytes=1 << 24):
    """HDF5 chunk shape of about ``chunk_bytes`` along the example (last) axis."""
    n = v.shape[-1]
    per = max(1, chunk_bytes // max(1, v.itemsize * (v.size // max(n, 1))))
    return v.shape[:-1] + (min(n, per),)


class ShardWriter:
    """Write examples into shards of ``examples_per_shard`` examples (the last may be smaller).

    Use as a context manager; :meth:`write` appends a CSC block (features x examples) with
    optional ``y``/``w``; ``close`` flushes the last shard, then writes the manifest (not
    written when the ``with`` block raises: the conversion is then incomplete, and a reader
    refuses its shards against an earlier manifest).  ``paths`` lists what was written.

    Parameters
    ----------
    pattern : str
        File name with an ``{i}`` field (suffix ``.npz``, ``.h5`` or ``.hdf5``).
    dirs : list of str, optional
        Stripe shards over these directories (created if needed).
    examples_per_shard : int
    format : {"npz", "h5"}, optional
    compress : bool
        Compressed npz / gzip HDF5 datasets (smaller, slower to read).

    Notes
    -----
    Every shard carries ``conversion_id`` (a fresh uuid4 per writer); npz shards are written
    uncompressed-stored with their zip CRC-32s, HDF5 datasets chunked (about 16 MB chunks) with
    the fletcher32 filter.  Local files are written to ``name.tmp``, fsynced and renamed.
    """

    def __init__(self, pattern, *, dirs=None, examples_per_shard=100_000, format=None,
                 compress=False):
        _check_pattern(pattern)
        if isinstance(dirs, (str, os.PathLike)):
            dirs = [dirs]
        self.pattern = pattern
        self.dirs = [d if isinstance(d, str) else os.fspath(d) for d in (dirs or [])]
        if not isinstance(examples_per_shard, (int, np.integer)) or examples_per_shard < 1:
            raise ValueError(
                f"examples_per_shard must be a positive integer, got {examples_per_shard!r}"
            )
        self.format = _format_of(pattern, format)
        self.compress = bool(compress)
        self._rb = _Rebatcher(examples_per_shard)
        self.paths = []
        self.n_features = None
        self.conversion_id = uuid.uuid4().hex
        self._closed = False
        self.manifest_path = manifest_path(pattern, self.dirs)
        self._records = []
        for d in self.dirs:
            _makedirs(d)
        if not self.dirs:
            parent = posixpath.dirname(pattern) if is_url(pattern) else os.path.dirname(pattern)
            if parent:
                _makedirs(parent)

    def write(self, X, y=None, w=None):
        """Append examples (columns of the CSC matrix ``X``).

        Every ``examples_per_shard`` examples accumulated are written as one shard.

        Parameters
        ----------
        X : CSC matrix, shape (n_features, n)
            The examples; ``n_features`` must be that of the earlier blocks.
        y : array, last axis of length n, optional
            Labels.
        w : array, shape (n,), optional
            Example weights.

        Raises
        ------
        ValueError, TypeError
            ``X`` is not a valid CSC matrix, or its rows or the lengths of ``y``/``w`` do not
            match.
        """
        gmat.check_csc(X, "X")
        if self.n_features is None:
            self.n_features = X.shape[0]
        elif X.shape[0] != self.n_features:
            raise ValueError(f"X has {X.shape[0]} features, earlier blocks had {self.n_features}")
        for arr, name in ((y, "y"), (w, "w")):
            if arr is not None and arr.shape[-1] != X.shape[1]:
                raise ValueError(f"{name} has {arr.shape[-1]} entries, X has {X.shape[1]} columns")
        for mb in self._rb.push(X, None if y is None else np.asarray(y),
                                None if w is None else np.asarray(w)):
            self._write_shard(mb)

    def _write_shard(self, mb):
        i = len(self.paths)
        path = _shard_path(self.pattern, self.dirs, i)
        X = mb.X
        nnz = int(X.indptr[-1])
        arrays = {
            "data": np.ascontiguousarray(X.data[:nnz]),
            "indices": np.ascontiguousarray(X.indices[:nnz]),
            "indptr": np.ascontiguousarray(X.indptr),
            "shape": np.array(X.shape, dtype=np.int64),
        }
        if mb.y is not None:
            arrays["y"] = np.ascontiguousarray(mb.y)
        if mb.w is not None:
            arrays["w"] = np.ascontiguousarray(mb.w)
        crcs = _array_crcs(arrays)
        if self.format == "npz":
            arrays["conversion_id"] = np.frombuffer(self.conversion_id.encode(), np.uint8)
        if is_url(path):
            import fsspec

            # remote writers may not seek (HDFS), which HDF5 needs: build the shard in memory
            buf = io.BytesIO()
            self._dump(buf, arrays)
            with fsspec.open(path, "wb") as f:
                f.write(buf.getbuffer())
            size = buf.getbuffer().nbytes
        else:
            _write_local_atomic(path, lambda f: self._dump(f, arrays))
            size = os.path.getsize(path)
        self._records.append({"name": self.pattern.format(i=i), "n_examples": int(X.shape[1]),
                              "nnz": nnz, "bytes": int(size), "crc32": crcs})
        self.paths.append(path)
        logger.debug("wrote shard %s (%d examples)", path, X.shape[1])

    def _dump(self, f, arrays):
        if self.format == "npz":
            (np.savez_compressed if self.compress else np.savez)(f, **arrays)
            return
        import h5py

        with h5py.File(f, "w") as h:
            h.attrs["conversion_id"] = self.conversion_id
            for k, v in arrays.items():
                if k == "shape":
                    h.attrs["shape"] = v
                elif v.size:  # fletcher32: HDF5 checks every chunk when it reads it
                    h.create_dataset(k, data=v, chunks=_h5_chunks(v), fletcher32=True,
                                     compression="gzip" if self.compress else None)
                else:  # no chunk to checksum
                    h.create_dataset(k, data=v)

    def close(self):
        """Write the last shard, then the manifest (atomically, after every shard is on disk);
        returns the shard paths.

        A second call does nothing and returns the same list.

        Returns
        -------
        list of str
            The paths of the shards written, in order.
        """
        if self._closed:
            return self.paths
        for mb in self._rb.finish():
            self._write_shard(mb)
        manifest = {
            "version": _MANIFEST_VERSION,
            "conversion_id": self.conversion_id,
            "format": self.format,
            "pattern": self.pattern,
            "n_dirs": len(self.dirs),
            "n_features": self.n_features,
            "n_examples": sum(r["n_examples"] for r in self._records),
            "nnz": sum(r["nnz"] for r in self._records),
            "shards": self._records,
        }
        _write_manifest(self.manifest_path, manifest)
        self._closed = True
        logger.debug("wrote manifest %s (%d shards, conversion %s)", self.manifest_path,
                     len(self._records), self.conversion_id)
        return self.paths

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        if exc_type is None:
            self.close()


def write_shards(source, pattern, *, dirs=None, examples_per_shard=100_000, format=None,
                 compress=False):
    """Convert any DataSource (svmlight, Criteo, in-memory...) into shard files.

    Returns the list of shard paths (read them back with ``FileSource(pattern, dirs=dirs)``);
    the manifest is written last, at :func:`manifest_path` ``(pattern, dirs)``.

    Parameters
    ----------
    source : DataSource
        A source yielding CSC minibatches; one pass is written.
    pattern : str
        Shard file name with an ``{i}`` field (suffix ``.npz``, ``.h5`` or ``.hdf5``).
    dirs : list of str, optional
        Stripe the shards over these directories.
    examples_per_shard : int, default 100000
        Examples per shard (the last one may hold fewer).
    format : {"npz", "h5"}, optional
        The shard format; from ``pattern``'s suffix when omitted.
    compress : bool, default False
        Compressed npz / gzip HDF5 datasets.

    Returns
    -------
    list of str
        The paths of the shards written.

    Raises
    ------
    TypeError
        ``source`` is not a DataSource, or it yields dense minibatches.
    """
    if not isinstance(source, DataSource):
        raise TypeError(
            f"source must be a DataSource (wrap arrays in MatSource), got {type(source).__name__}"
        )
    with ShardWriter(pattern, dirs=dirs, examples_per_shard=examples_per_shard, format=format,
                     compress=compress) as wr:
        for mb in source:
            X = mb.X if gmat.is_sparse(mb.X) else None
            if X is None:
                raise TypeError("write_shards writes CSC shards; the source yields dense X")
            wr.write(X, mb.y, mb.w)
    return wr.paths
