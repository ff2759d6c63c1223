"""CriteoSource: the Criteo click-log TSV layout, hashed into 2^b columns by a numba kernel."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from roofline.gmat import option
from roofline.kernels import (
    N_CAT,
    N_INT,
    criteo_parse,
    log_bucket_thresholds,
)

from ._base import _csc, _index_dtype
from ._io import DEFAULT_CHUNK, TruncatedInputError, display_name
from ._text import TextOptions, TextSource, stitch_csc

__all__ = ["CRITEO_FIELDS", "CriteoOptions", "CriteoSource", "criteo_field_seeds"]

logger = logging.getLogger(__name__)

CRITEO_FIELDS = tuple([f"I{k}" for k in range(1, N_INT + 1)] +
                      [f"C{k}" for k in range(1, N_CAT + 1)])

_MESSAGES = {
    1: "the label is not 0 or 1",
    2: f"wrong number of tab-separated fields (expected label + {N_INT} integer + {N_CAT} "
       "categorical)",
    3: "an integer field is not a decimal integer",
    4: "a categorical field is not a hexadecimal token (at most 16 hex digits)",
    5: "an integer field overflows int64 (its magnitude is above 9223372036854775807)",
    8: "bytes that are not ASCII (the Criteo layout is ASCII)",
}
_MAX_LOGGED = 10


def criteo_field_seeds(hash_seed: int = 0) -> np.ndarray:
    """Per-field MurmurHash3 seeds: field ``f`` (0-12 = I1-I13, 13-38 = C1-C26) uses
    ``(hash_seed + f) mod 2^32``.

    Parameters
    ----------
    hash_seed : int, default 0
        The seed of field 0.

    Returns
    -------
    numpy.ndarray of int64, shape (39,)
        The seed of each field.
    """
    return (np.int64(hash_seed) + np.arange(N_INT + N_CAT, dtype=np.int64)) & 0xFFFFFFFF


@dataclass
class CriteoOptions(TextOptions):
    """Options of :class:`CriteoSource` (see its parameters)."""

    n_bits: int = option(20, "hash width b: 2^b columns (per field with 'per_field')",
                         low=1, high=30)
    layout: str = option("hashed", "'hashed': fields share 2^b columns; 'per_field': one "
                                   "block of 2^b per field", choices=("hashed", "per_field"))
    hash_seed: int = option(0, "field f hashes with seed (hash_seed + f) mod 2^32")
    has_label: bool = option(True, "False for the unlabeled test layout (39 fields)")


class CriteoSource(TextSource):
    """Minibatches from Criteo click-log TSV files, with the hashing trick.

    Line layout: ``label \\t I1..I13 \\t C1..C26`` (integer fields decimal, categorical
    fields hexadecimal, empty = missing).  Each present field becomes one non-zero of value 1:

    * integer ``v`` -> bucket ``v`` if ``v <= 2`` else ``3 + floor(ln(v)^2)`` (log buckets,
      computed exactly: see ``roofline.kernels.log_bucket_thresholds``),
      hashed as an int32 with MurmurHash3 x86_32 and the field's seed;
    * categorical token -> MurmurHash3 x86_32 of its bytes with the field's seed;
    * field ``f`` has seed ``(hash_seed + f) mod 2^32`` (:func:`criteo_field_seeds`).

    Parameters
    ----------
    paths : str, path-like, or list of them
        Local paths or fsspec URLs, plain or gzip.
    n_bits : int
        Hash width ``b``.
    layout : {"hashed", "per_field"}
        ``"hashed"``: all fields share ``2^b`` columns (collisions inside an example are
        summed).  ``"per_field"``: field ``f`` owns columns ``[f 2^b, (f+1) 2^b)``; every
        example has at most one non-zero per field block (pure blocks, as SCD needs);
        ``n_features = 39 * 2^b``, see :meth:`feature_blocks`.
    hash_seed : int
    has_label : bool
        ``False`` for the unlabeled test layout (39 fields); ``y`` is then ``None``.
    dtype, on_error, n_threads, chunk_bytes, compression, readahead, batch_size, drop_last
        As for :class:`SVMLightSource`.
    """

    _thread_prefix = "criteo"

    def __init__(self, paths, *, n_bits=20, layout="hashed", hash_seed=0, has_label=True,
                 dtype="float32", batch_size=10_000, drop_last=False, on_error="raise",
                 n_threads=2, chunk_bytes=DEFAULT_CHUNK, compression="infer", readahead=True):
        self.opts = CriteoOptions(
            batch_size=batch_size, drop_last=drop_last, n_bits=n_bits, layout=layout,
            hash_seed=hash_seed, has_label=has_label, dtype=dtype, on_error=on_error,
            n_threads=n_threads, chunk_bytes=chunk_bytes, compression=compression,
            readahead=readahead,
        )
        self._init_paths(paths, "Criteo TSV")
        block = 1 << n_bits
        self.n_features = block * (N_INT + N_CAT) if layout == "per_field" else block
        self.n_examples = None
        self.seeds = criteo_field_seeds(hash_seed)

    def feature_blocks(self):
        """``[(start, stop), ...]`` column range of each field (39 pure blocks) in the
        ``"per_field"`` layout, ordered I1..I13, C1..C26.

        Returns
        -------
        list of tuple of int
            39 half-open ``(start, stop)`` row ranges of ``2^n_bits`` columns each.

        Raises
        ------
        ValueError
            The source's layout is not ``"per_field"``.
        """
        if self.opts.layout != "per_field":
            raise ValueError("feature_blocks() needs layout='per_field'")
        b = 1 << self.opts.n_bits
        return [(f * b, (f + 1) * b) for f in range(N_INT + N_CAT)]

    def _parse(self, arr, lo, hi):
        o = self.opts
        return self._parse_parts(criteo_parse, arr, lo, hi, o.has_label, o.n_bits,
                                 o.layout == "per_field", self.seeds, log_bucket_thresholds(),
                                 o.on_error == "skip")

    def _blocks(self):
        o = self.opts
        dt = np.dtype(o.dtype)
        total_skipped = total_rows = 0
        for path in self.paths:
            name = display_name(path)
            line0, n_rows, n_skipped = 0, 0, 0
            try:
                for arr, cut in self._line_blocks(path):
                    parts = self._parse(arr, 0, cut)
                    ls, csc = [], []
                    line_arr = line0  # line number of arr's first line, minus one
                    for labels, indptr, indices, data, info, skipped in parts:
                        if info[0]:
                            msg = (f"{_MESSAGES.get(int(info[0]), 'parse error')} "
                                   f"(at byte {int(info[2])} of the line)")
                            exc = self._line_error(path, arr, cut, line0 - line_arr + int(info[1]),
                                                   line0 + int(info[1]) + 1, msg)
                            raise self._gzip_or(path, exc)
                        for ln, code, byte in skipped:
                            if n_skipped < _MAX_LOGGED:
                                logger.warning("skipped: %s, line %d: %s (at byte %d)", name,
                                               line0 + int(ln) + 1, _MESSAGES.get(int(code)), byte)
                            n_skipped += 1
                        line0 += int(info[3])
                        ls.append(labels)
                        csc.append((indptr, indices, data))
                    labels = np.concatenate(ls)
                    if not len(labels):
                        continue
                    n_rows += len(labels)
                    indptr, indices, data = stitch_csc(csc)
                    nnz = int(indptr[-1])
                    idt = _index_dtype(self.n_features, nnz)
                    X = _csc(data.astype(dt, copy=False), indices.astype(idt, copy=False),
                             indptr.astype(idt, copy=False), (self.n_features, len(labels)))
                    yield X, (labels.astype(dt) if o.has_label else None)
            except TruncatedInputError as exc:
                raise ValueError(f"{exc} (at line {line0 + 1})") from exc
            if n_skipped:
                logger.warning("%s: skipped %d malformed lines (on_error='skip')", name,
                               n_skipped)
            total_skipped += n_skipped
            total_rows += n_rows
        self.n_skipped = total_skipped
        if self.n_examples is None:
            self.n_examples = total_rows  # known after one full pass

    def __repr__(self) -> str:
        return (
            f"CriteoSource({display_name(self.paths[0])}"
            f"{f' +{len(self.paths) - 1}' if len(self.paths) > 1 else ''}, "
            f"{self.opts.layout}, n_bits={self.opts.n_bits}, {self.n_features} features, "
            f"batch_size={self.opts.batch_size})"
        )
