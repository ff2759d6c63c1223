"""Byte streams for the sources: local files or fsspec URLs, plain or gzip, read in chunks.

Remote files (``hdfs://``, ``http(s)://``, ``memory://``, ... any fsspec protocol) are opened
through :func:`fsspec.open` and read sequentially in ranges of ``block_size`` bytes: the whole
file is never downloaded first.
"""

from __future__ import annotations

import io
import logging
import os
import zlib

__all__ = [
    "TruncatedInputError",
    "display_name",
    "gzip_stream_error",
    "is_url",
    "iter_chunks",
    "open_binary",
]

logger = logging.getLogger(__name__)

_GZIP_MAGIC = b"\x1f\x8b"
DEFAULT_CHUNK = 8 << 20


class TruncatedInputError(ValueError):
    """A compressed stream ended before its end-of-stream marker (raised after its data)."""


class _ReadInto(io.RawIOBase):
    """A raw binary reader over a file object that has ``read``/``seek`` but no ``readinto``."""

    def __init__(self, f):
        self._f = f

    def readable(self):
        return True

    def seekable(self):
        return True

    def readinto(self, b):
        data = self._f.read(len(b))
        n = len(data)
        memoryview(b).cast("B")[:n] = data
        return n

    def seek(self, offset, whence=io.SEEK_SET):
        self._f.seek(offset, whence)
        return self._f.tell()

    def tell(self):
        return self._f.tell()

    def close(self):
        if not self.closed:
            self._f.close()
        super().close()


def is_url(path) -> bool:
    """True for ``protocol://...`` strings (handled by fsspec), except ``file://``."""
    return isinstance(path, str) and "://" in path and not path.startswith("file://")


def display_name(path) -> str:
    return str(path) if is_url(path) else os.fspath(path)


def _local(path) -> str:
    p = os.fspath(path)
    return p[len("file://") :] if p.startswith("file://") else p


def open_binary(path, block_size: int = DEFAULT_CHUNK):
    """Open ``path`` (local path or fsspec URL) for binary reading; the caller closes it.

    Remote files are random-access (range requests of ``block_size`` bytes), so they can be
    read sequentially or seeked (npz and HDF5 shards are read that way).
    """
    if is_url(path):
        try:
            import fsspec
        except ImportError as exc:  # pragma: no cover - remote extra is installed in dev
            raise ImportError(
                f"reading {path!r} needs fsspec: pip install 'roofline[remote]'"
            ) from exc
        fs, p = fsspec.core.url_to_fs(path)  # block_size is an open() option, not an fs one
        if "hdfs" in fs.protocol or "viewfs" in fs.protocol:
            # hdfs-native's reader has no readinto (its own block_size wrapper, h5py and
            # io.BufferedReader need it): adapt it, then buffer reads of block_size
            return io.BufferedReader(_ReadInto(fs.open(p, "rb")), buffer_size=block_size)
        return fs.open(p, "rb", block_size=block_size)
    return open(_local(path), "rb")


def _want_gzip(path, compression, head: bytes) -> bool:
    if compression not in ("infer", "gzip", "none", None):
        raise ValueError(
            f"compression must be 'infer', 'gzip' or None ('none'), got {compression!r}"
        )
    if compression is None or compression == "none":
        return False
    if compression == "gzip":
        if head[:2] != _GZIP_MAGIC and head:
            raise ValueError(f"{display_name(path)}: compression='gzip' but not a gzip stream")
        return True
    return head[:2] == _GZIP_MAGIC


def iter_chunks(path, chunk_bytes: int = DEFAULT_CHUNK, compression="infer"):
    """Yield the (decompressed) bytes of ``path`` in chunks of about ``chunk_bytes``.

    Gzip is detected from the magic bytes (``compression="infer"``); multi-member gzip files
    are supported.  A truncated or corrupt gzip stream raises :class:`TruncatedInputError` /
    ``ValueError`` naming the file, *after* every byte that could be decompressed was yielded.
    """
    name = display_name(path)
    raw_block = max(1 << 16, chunk_bytes // 4)
    with open_binary(path, block_size=max(chunk_bytes, 1 << 18)) as f:
        head = f.read(chunk_bytes)
        if not _want_gzip(path, compression, head):
            if head:
                yield head
            while True:
                b = f.read(chunk_bytes)
                if not b:
                    return
                yield b
        d = zlib.decompressobj(wbits=31)
        started = False  # whether the current member decompressor has been fed
        raw = head
        out = []
        n_out = 0
        while True:
            if not raw:
                raw = f.read(raw_block)
                if not raw:
                    break
            started = True
            try:
                piece = d.decompress(raw)
            except zlib.error as exc:
                if out:
                    yield b"".join(out)
                raise ValueError(f"{name}: corrupt gzip stream ({exc})") from exc
            raw = b""
            if d.eof:
                rest = d.unused_data
                d = zlib.decompressobj(wbits=31)
                started = False
                if rest:
                    if rest[:2] != _GZIP_MAGIC:
                        # trailing garbage after the last member: gzip(1) warns and ignores it
                        logger.warning("%s: %d bytes of trailing garbage ignored", name, len(rest))
                    else:
                        raw = rest
            if piece:
                out.append(piece)
                n_out += len(piece)
                if n_out >= chunk_bytes:
                    yield b"".join(out)
                    out, n_out = [], 0
        tail = d.flush()
        if tail:
            out.append(tail)
        if out:
            yield b"".join(out)
        # a fresh decompressor that saw no input is fine; one in the middle of a member is not
        if started and not d.eof:
            raise TruncatedInputError(
                f"{name}: gzip stream is truncated (the compressed file ended before the "
                "end-of-stream marker)"
            )


def gzip_stream_error(path, compression="infer"):
    """Check the whole gzip stream of ``path`` (every member's CRC-32 and length): return the
    ``ValueError`` that reading it raises (corrupt or truncated, naming the file), or ``None``
    when the stream is sound or ``path`` is not gzip.

    Used on error paths: a corrupt deflate stream can decompress into garbage that fails to
    parse before the member's CRC-32 at its end is reached; the parse error is then reported as
    what it is, a corrupt gzip stream.
    """
    try:
        with open_binary(path, block_size=1 << 16) as f:
            if not _want_gzip(path, compression, f.read(2)):
                return None
        for _ in iter_chunks(path, DEFAULT_CHUNK, compression):
            pass
    except ValueError as exc:  # TruncatedInputError included
        return exc
    except OSError:
        return None
    return None
