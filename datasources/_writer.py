"""ShardWriter and write_shards: convert examples (any DataSource) into CSC shard files.

Every shard carries the writer's conversion id; npz members are stored with their zip CRC-32,
HDF5 datasets with the fletcher32 filter; the manifest (``_shards.manifest_path``) is written
last, atomically, so that :class:`~roofline.datasources.FileSource` can refuse a missing,
stale or corrupt shard.  The formats themselves are in ``_shards.py``.
"""

from __future__ import annotations

import io
import logging
import os
import posixpath
import uuid

import numpy as np

from roofline import gmat

from ._base import DataSource, _Rebatcher
from ._io import is_url
from ._shards import (
    _MANIFEST_VERSION,
    _array_crcs,
    _check_pattern,
    _format_of,
    _shard_path,
    _write_local_atomic,
    _write_manifest,
    manifest_path,
)

__all__ = ["ShardWriter", "write_shards"]

logger = logging.getLogger(__name__)


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
