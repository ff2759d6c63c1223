"""Shard files: the npz / HDF5 formats, reading one shard, and the manifest of a conversion.

A shard holds a block of examples as CSC arrays (``data``, ``indices``, ``indptr``, ``shape``)
and optional per-example ``y`` (``(n,)`` or ``(k, n)``) and ``w``.  Shards are named by a
pattern with an ``{i}`` field (``"part-{i:05d}.npz"``) and may be striped over several
directories (disks): shard ``i`` lives in ``dirs[i % len(dirs)]`` (BIDMach's FileSource
with its file-name functions).  Directories may be fsspec URLs.

Integrity: :class:`~roofline.datasources.ShardWriter` (``_writer.py``) stamps a conversion id
into every shard (an npz member, an HDF5 attribute), writes npz members with their zip CRC-32
(checked here on every read from the bytes read) and HDF5 datasets with the fletcher32 filter
(checked by HDF5), and after the last shard writes a JSON manifest (:func:`manifest_path`:
conversion id, format, ``n_features``, and per shard its name, examples, nnz, bytes and the
CRC-32 of each array), atomically (temp file, fsync, rename).
:class:`~roofline.datasources.FileSource` (``_filesource.py``) takes the shard count from the
manifest and, through :func:`read_shard` and the helpers here, refuses a missing shard, a stale
one (another conversion id) or one that disagrees with its record.
"""

from __future__ import annotations

import json
import os
import re
import struct
import threading
import zipfile
import zlib

import numpy as np

from roofline import gmat

from ._base import _check_weights, _csc
from ._io import display_name, is_url, open_binary

__all__ = ["manifest_path", "read_shard"]

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
