"""Shared machinery of the line-oriented text sources (svmlight, Criteo TSV).

Chunked reading (optionally one chunk ahead on a background thread), cutting the stream at
newlines, and parsing each chunk's line ranges on a thread pool with a numba kernel that
releases the GIL.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from roofline.gmat import option
from roofline.kernels import find_line_starts

from ._base import DataSource, DataSourceOptions, _Rebatcher
from ._io import DEFAULT_CHUNK, display_name, gzip_stream_error, iter_chunks
from ._prefetch import background

__all__ = ["TextOptions", "TextSource"]


def stitch_csc(parts):
    """One CSC block from consecutive blocks of examples.

    Parameters
    ----------
    parts : iterable of ``(indptr, indices, data)``
        Each block's ``indptr`` starts at 0; blocks are appended column-wise (the examples of
        the second after those of the first...), as the text parsers produce them per thread
        and per chunk.

    Returns
    -------
    indptr, indices, data
        ``indptr`` has the first block's dtype (int64 when there is no block); a single block's
        ``indices`` and ``data`` are returned as they are (no copy).
    """
    ptrs, idxs, vals = [], [], []
    off = 0
    for indptr, indices, data in parts:
        ptrs.append(indptr[1:] + off)
        idxs.append(indices)
        vals.append(data)
        off += len(data)
    if not ptrs:
        return np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float64)
    indptr = np.concatenate([np.zeros(1, ptrs[0].dtype)] + ptrs)
    indices = np.concatenate(idxs) if len(idxs) > 1 else idxs[0]
    data = np.concatenate(vals) if len(vals) > 1 else vals[0]
    return indptr, indices, data


def bare_cr_column(arr, cut, line):
    """Column of the first carriage return of line ``line`` (0-based) of ``arr[:cut]`` that does
    not end the line (a CR-only line ending, which the parsers do not split at), or -1."""
    nl = np.flatnonzero(arr[:cut] == 10)
    start = int(nl[line - 1]) + 1 if 0 < line <= len(nl) else (0 if line == 0 else -1)
    if start < 0:
        return -1
    stop = int(nl[line]) if line < len(nl) else cut
    text = arr[start:stop].tobytes().rstrip(b"\r")
    return text.find(b"\r")


def _dtype_name(v) -> str:
    """``np.float32``, ``np.dtype("f4")``, ``"float32"`` -> ``"float32"``."""
    return np.dtype(v).name


@dataclass
class TextOptions(DataSourceOptions):
    """Options common to the text sources (see :class:`SVMLightSource`)."""

    dtype: str = option("float32", "dtype of X values and labels",
                        choices=("float32", "float64"), convert=_dtype_name)
    on_error: str = option("raise", "malformed lines: 'raise' (naming file and line) or 'skip' "
                                    "(logged and counted)", choices=("raise", "skip"))
    n_threads: int = option(2, "parser threads", low=1)
    chunk_bytes: int = option(DEFAULT_CHUNK, "bytes parsed per step", low=1024)
    compression: str | None = option("infer", "'infer' (gzip magic bytes), 'gzip', or "
                                              "'none'/None", choices=("infer", "gzip", "none"),
                                      optional=True)
    readahead: bool = option(True, "read the next chunk on a background thread")


class TextSource(DataSource):
    """Base of the text sources: ``opts`` is a :class:`TextOptions`; subclasses call
    :meth:`_init_paths`, use :meth:`_line_blocks` and :meth:`_parse_parts`, and implement
    ``_blocks()`` (parsed ``(X, y)`` blocks of any size, cut here into exact minibatches)."""

    _thread_prefix = "parser"

    def _init_paths(self, paths, what):
        self.paths = list(paths) if isinstance(paths, (list, tuple)) else [paths]
        if not self.paths:
            raise ValueError(f"paths is empty: give at least one {what} file")
        for p in self.paths:
            if not isinstance(p, (str, os.PathLike)):
                raise TypeError(f"paths must be file paths or URLs, got {p!r}")
        self.n_skipped = 0
        self._pool = None
        self._parallel_min = 1 << 16  # bytes; smaller ranges are parsed on one thread

    def _line_blocks(self, path):
        """Yield ``(arr, cut)``: ``arr[:cut]`` (uint8) holds whole lines of ``path``, in order.

        A :class:`~roofline.datasources._io.TruncatedInputError` propagates after the complete
        lines before the truncation were yielded (an incomplete last line is not).
        """
        o = self.opts
        if o.readahead:
            chunks = background(lambda: iter_chunks(path, o.chunk_bytes, o.compression), 2,
                                display_name(path), "chunk")
        else:
            chunks = iter_chunks(path, o.chunk_bytes, o.compression)
        try:
            pending = b""
            for chunk in chunks:
                buf = pending + chunk if pending else chunk
                cut = buf.rfind(b"\n") + 1
                if cut == 0:  # no newline yet: a line longer than the chunk
                    pending = buf
                    continue
                pending = buf[cut:]
                yield np.frombuffer(buf, dtype=np.uint8), cut
            if pending:  # the last line has no newline
                yield np.frombuffer(pending, dtype=np.uint8), len(pending)
        finally:
            chunks.close()

    def _parse_parts(self, kernel, arr, lo, hi, *args):
        """``kernel(arr, a, b, *args)`` over ``n_threads`` line ranges of ``arr[lo:hi]``
        (results in order)."""
        nt = self.opts.n_threads
        if nt > 1 and hi - lo > self._parallel_min:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(nt, thread_name_prefix=self._thread_prefix)
            bounds = find_line_starts(arr, lo, hi, nt)
            futs = [self._pool.submit(kernel, arr, bounds[k], bounds[k + 1], *args)
                    for k in range(nt)]
            return [f.result() for f in futs]
        return [kernel(arr, lo, hi, *args)]

    def _line_error(self, path, arr, cut, line, line_no, msg):
        """The ``ValueError`` for a malformed line: ``line`` is its index in ``arr[:cut]``,
        ``line_no`` its 1-based number in the file.  A line holding a bare carriage return is
        reported as a file with CR-only line endings (not supported: the line is then the rest
        of the file)."""
        name = display_name(path)
        col = bare_cr_column(arr, cut, line)
        if col >= 0:
            return ValueError(
                f"{name}, line {line_no}: the file uses CR-only line endings (a carriage return "
                f"not followed by a newline at byte {col} of the line); convert them to \\n "
                f"(e.g. tr '\\r' '\\n') [parser: {msg}]"
            )
        return ValueError(f"{name}, line {line_no}: {msg}")

    def _gzip_or(self, path, exc):
        """``exc`` (a parse error in ``path``), or the corrupt/truncated gzip stream that caused
        it: garbage decompressed from a corrupt member fails to parse before the member's
        CRC-32 (at its end) is checked, so on a parse error the whole stream is checked."""
        err = gzip_stream_error(path, self.opts.compression)
        if err is None:
            return exc
        return ValueError(f"{err} [the garbage it decompressed to failed to parse: {exc}]")

    def _batches(self):
        rb = _Rebatcher(self.opts.batch_size, self.opts.drop_last)
        for X, y in self._blocks():
            yield from rb.push(X, y)
        yield from rb.finish()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
