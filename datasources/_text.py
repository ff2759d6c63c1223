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

from roofline.kernels import find_line_starts

from ._base import DataSource, DataSourceOptions, _Rebatcher
from ._io import DEFAULT_CHUNK, display_name, iter_chunks
from ._prefetch import background

__all__ = ["TextOptions", "TextSource"]


@dataclass
class TextOptions(DataSourceOptions):
    """Options common to the text sources (see :class:`SVMLightSource`)."""

    dtype: str = "float32"
    on_error: str = "raise"
    n_threads: int = 2
    chunk_bytes: int = DEFAULT_CHUNK
    compression: str | None = "infer"
    readahead: bool = True

    def __post_init__(self):
        super().__post_init__()
        if np.dtype(self.dtype) not in (np.float32, np.float64):
            raise ValueError(f"dtype must be float32 or float64, got {self.dtype!r}")
        self.dtype = np.dtype(self.dtype).name
        if self.on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {self.on_error!r}")
        if not isinstance(self.n_threads, (int, np.integer)) or self.n_threads < 1:
            raise ValueError(f"n_threads must be a positive integer, got {self.n_threads!r}")
        if not isinstance(self.chunk_bytes, (int, np.integer)) or self.chunk_bytes < 1024:
            raise ValueError(f"chunk_bytes must be an integer >= 1024, got {self.chunk_bytes!r}")
        if not isinstance(self.readahead, bool):
            raise ValueError(f"readahead must be a bool, got {self.readahead!r}")


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

    def _batches(self):
        rb = _Rebatcher(self.opts.batch_size, self.opts.drop_last)
        for X, y in self._blocks():
            yield from rb.push(X, y)
        yield from rb.finish()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
