"""SVMLightSource: stream svmlight / libsvm text (plain or gzip, local or remote) as CSC blocks."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from roofline.gmat import option
from roofline.kernels import svmlight_parse

from ._base import _csc, _index_dtype
from ._io import DEFAULT_CHUNK, TruncatedInputError, display_name
from ._text import TextOptions, TextSource, stitch_csc

__all__ = ["SVMLightOptions", "SVMLightSource", "load_svmlight"]

logger = logging.getLogger(__name__)

_MESSAGES = {
    1: "the label is not a number",
    2: "a feature index is not an integer",
    3: "invalid feature index (0 in one-based data, or negative)",
    4: "feature indices are not strictly increasing (they must be sorted and unique)",
    5: "feature index out of range",
    6: "a feature value is not a number",
    7: "a feature has no ':' (expected index:value)",
    8: "bytes that are not valid UTF-8 / not ASCII",
    9: "non-finite value (inf, nan, or too large for the dtype)",
    10: "missing label (the line starts with a feature)",
    11: "a feature index overflows int64 (it is above 9223372036854775807)",
}
_MAX_LOGGED = 10


@dataclass
class SVMLightOptions(TextOptions):
    """Options of :class:`SVMLightSource` (see its parameters)."""

    n_features: int | None = option(None, "number of features (rows of X); None: scanned from "
                                          "the files", kind=int, low=0)
    zero_based: bool | str = option("auto", "index base; 'auto': one-based unless an index 0 "
                                            "occurs", kind=(bool, str),
                                    choices=(True, False, "auto"))


class _ParseState:
    """Per-pass bookkeeping: line numbers, skipped lines, qid count."""

    def __init__(self):
        self.line = 0  # lines consumed before the current chunk
        self.n_skipped = 0
        self.n_qid = 0
        self.n_rows = 0
        self.min_idx = -1
        self.max_idx = -1


class SVMLightSource(TextSource):
    """Minibatches streamed from svmlight / libsvm files, parsed by a numba kernel.

    The file is read in chunks of ``chunk_bytes`` (decompressed), each chunk is cut at newlines
    into ``n_threads`` ranges parsed in parallel (the kernel releases the GIL), and the parsed
    CSC blocks are cut into minibatches of ``batch_size`` examples.  Memory is bounded by a few
    chunks whatever the file size.

    Parameters
    ----------
    paths : str, path-like, or list of them
        Local paths or fsspec URLs (``http://``, ``hdfs://``, ``memory://``...), plain or gzip
        (detected from the magic bytes).  Several files are read in order as one stream.
    n_features : int, optional
        Number of features (rows of X).  When ``None`` (or with ``zero_based="auto"``) the
        files are scanned once at construction (a full parse) to find the largest index, the
        index base and the number of examples; give both to stream in a single pass.
    zero_based : bool or "auto"
        Index base.  ``"auto"`` is scikit-learn's rule: one-based unless an index 0 occurs.
    dtype : {"float32", "float64"}
        Dtype of X values and labels.
    on_error : {"raise", "skip"}
        ``"raise"``: a malformed line raises ``ValueError`` naming the file and line.
        ``"skip"``: malformed lines are skipped, logged (the first few, with line numbers) and
        counted; the count is logged at the end of each pass and kept in ``n_skipped``.
    n_threads : int
        Parser threads.
    chunk_bytes : int
        Bytes parsed per step.
    compression : {"infer", "gzip", None}
    readahead : bool
        Read (and decompress) the next chunk on a background thread while the current one is
        parsed: overlaps network or disk reads, and gzip, with parsing.
    batch_size, drop_last
        See :class:`DataSourceOptions`.

    Notes
    -----
    ``qid:`` tokens are ignored (with an INFO log line giving their count).  Explicit zeros
    (``3:0``) are stored, as scikit-learn does.  Values are parsed exactly like ``strtod``
    (correctly rounded), then cast to ``dtype``.  inf/nan values are rejected.
    """

    _thread_prefix = "svmlight"

    def __init__(
        self,
        paths,
        *,
        n_features=None,
        zero_based="auto",
        dtype="float32",
        batch_size=10_000,
        drop_last=False,
        on_error="raise",
        n_threads=2,
        chunk_bytes=DEFAULT_CHUNK,
        compression="infer",
        readahead=True,
    ):
        self.opts = SVMLightOptions(
            batch_size=batch_size,
            drop_last=drop_last,
            n_features=n_features,
            zero_based=zero_based,
            dtype=dtype,
            on_error=on_error,
            n_threads=n_threads,
            chunk_bytes=chunk_bytes,
            compression=compression,
            readahead=readahead,
        )
        self._init_paths(paths, "svmlight")
        self.n_examples = None
        self._warned_empty = set()  # files without an example, warned about once
        if n_features is None or zero_based == "auto":
            self._scan()
        else:
            self.n_features = int(n_features)
            self._zero_based = bool(zero_based)

    # -- scanning -----------------------------------------------------------------------------

    def _scan(self):
        """One parse of all files: example count, index range, index base."""
        o = self.opts
        n_rows, lo, hi = 0, -1, -1
        states = []
        for path in self.paths:
            st = _ParseState()
            for _ in self._parse_file(path, True, -1, st, log=False):
                pass
            states.append(st)
            n_rows += st.n_rows
            if st.max_idx >= 0:
                lo = st.min_idx if lo < 0 else min(lo, st.min_idx)
                hi = max(hi, st.max_idx)
        self._check_examples(states)
        if o.zero_based == "auto":
            self._zero_based = hi >= 0 and lo == 0
        else:
            self._zero_based = bool(o.zero_based)
        base = 0 if self._zero_based else 1
        if not self._zero_based and lo == 0:
            where = display_name(self.paths[0]) if len(self.paths) == 1 else "the input files"
            raise ValueError(f"{where}: zero_based=False but feature index 0 occurs")
        n_f = max(hi - base + 1, 0)
        if n_f > np.iinfo(np.int64).max:
            raise ValueError(
                f"feature index {hi} with zero-based indices makes {n_f} features, more than "
                "int64 can count"
            )
        if o.n_features is None:
            self.n_features = n_f
        else:
            if o.n_features < n_f:
                raise ValueError(
                    f"n_features={o.n_features} but the input contains feature index {hi} "
                    f"({n_f} features with {'zero' if self._zero_based else 'one'}-based indices)"
                )
            self.n_features = int(o.n_features)
        self.n_examples = n_rows

    # -- parsing ------------------------------------------------------------------------------

    def _protos(self, n_features):
        dt = np.dtype(self.opts.dtype)
        # per-chunk nnz always fits int32 (chunks are < 8 GB); the feature range decides
        idt = np.dtype(np.int64) if n_features < 0 else _index_dtype(n_features, 0)
        return np.zeros(0, idt), np.zeros(0, dt), float(np.finfo(dt).max)

    def _parse_range(self, arr, lo, hi, zero_based, n_features, skip):
        """Parse ``arr[lo:hi]`` (whole lines), in parallel; return per-part results in order."""
        return self._parse_parts(svmlight_parse, arr, lo, hi, zero_based, n_features, skip,
                                 *self._protos(n_features))

    def _fail(self, path, line, code, byte, n_features, base, arr=None, cut=0, line_in_arr=-1):
        msg = _MESSAGES.get(int(code), f"parse error {code}")
        if code == 5:
            msg += f" (n_features={n_features}, {'zero' if base == 0 else 'one'}-based)"
        msg += f" (at byte {byte} of the line)"
        if arr is None:
            return ValueError(f"{display_name(path)}, line {line}: {msg}")
        return self._line_error(path, arr, cut, line_in_arr, line, msg)

    def _parse_file(self, path, zero_based, n_features, st, log=True):
        """Yield ``(labels, indptr, indices, data)`` blocks of one file (one per chunk)."""
        skip = self.opts.on_error == "skip"
        base = 0 if zero_based else 1
        try:
            for arr, cut in self._line_blocks(path):
                parts = self._parse_range(arr, 0, cut, zero_based, n_features, skip)
                try:
                    block = self._combine(path, arr, cut, parts, st, n_features, base, log)
                except ValueError as exc:
                    err = self._gzip_or(path, exc)
                    if err is exc:
                        raise
                    raise err from exc
                yield block
        except TruncatedInputError as exc:
            raise ValueError(
                f"{exc} (at line {st.line + 1}, after {st.n_rows} complete examples)"
            ) from exc

    def _combine(self, path, arr, cut, parts, st, n_features, base, log):
        line0 = st.line
        out_l, out_csc = [], []
        for labels, indptr, indices, data, slow, info, skipped in parts:
            if len(slow):
                self._slow_values(path, arr, slow, labels, data, st.line)
            if info[0] != 0:
                raise self._fail(path, line0 + int(info[1]) + 1, info[0], info[2],
                                 n_features, base, arr, cut, line0 - st.line + int(info[1]))
            for ln, code, byte in skipped:
                if log and st.n_skipped < _MAX_LOGGED:
                    logger.warning("skipped: %s", self._fail(path, line0 + int(ln) + 1, code,
                                                             byte, n_features, base))
                st.n_skipped += 1
            st.n_qid += int(info[4])
            if info[6] >= 0:
                st.min_idx = int(info[5]) if st.min_idx < 0 else min(st.min_idx, int(info[5]))
                st.max_idx = max(st.max_idx, int(info[6]))
            line0 += int(info[3])
            out_l.append(labels)
            out_csc.append((indptr, indices, data))
        st.line = line0
        labels = np.concatenate(out_l) if len(out_l) > 1 else out_l[0]
        st.n_rows += len(labels)
        indptr, indices, data = stitch_csc(out_csc)
        return labels, indptr, indices, data

    def _slow_values(self, path, arr, slow, labels, data, line0):
        mx = float(np.finfo(data.dtype).max)
        for s, e, t in slow:
            v = float(arr[s:e].tobytes())
            if not abs(v) <= mx:
                # numbers near the dtype's maximum that the kernel could not decide
                line = line0 + int(np.count_nonzero(arr[:s] == 10)) + 1
                raise ValueError(
                    f"{display_name(path)}, line {line}: non-finite value (overflow of "
                    f"{data.dtype}) {arr[s:e].tobytes().decode()!r}"
                )
            if t >= 0:
                data[t] = v
            else:
                labels[-t - 1] = v

    # -- DataSource -----------------------------------------------------------------------------

    def _blocks(self):
        """Yield ``(X, y)`` CSC blocks (one per parsed chunk) of one pass."""
        dt = np.dtype(self.opts.dtype)
        n_f = self.n_features
        total_skipped = total_rows = 0
        states = []
        for path in self.paths:
            st = _ParseState()
            states.append(st)
            for labels, indptr, indices, data in self._parse_file(
                path, self._zero_based, n_f, st
            ):
                nnz = len(data)
                idt = _index_dtype(n_f, nnz)
                X = _csc(
                    data.astype(dt, copy=False),
                    indices.astype(idt, copy=False),
                    indptr.astype(idt, copy=False),
                    (n_f, len(labels)),
                )
                yield X, labels.astype(dt, copy=False)
            if st.n_qid:
                logger.info("%s: ignored qid on %d lines", display_name(path), st.n_qid)
            if st.n_skipped:
                logger.warning(
                    "%s: skipped %d malformed lines (on_error='skip')",
                    display_name(path),
                    st.n_skipped,
                )
            total_skipped += st.n_skipped
            total_rows += st.n_rows
        self._check_examples(states)
        self.n_skipped = total_skipped
        if self.n_examples is None:
            self.n_examples = total_rows  # known after one full pass

    def _check_examples(self, states):
        """After a full pass (``states``: one :class:`_ParseState` per file): a file without
        any line of data (empty, blank, or only ``#`` comments) is an error naming it when no
        file has an example, else a warning naming it (once per file: an empty part file among
        others, as Spark writes them).  Files whose lines were all skipped as malformed
        (``on_error="skip"``) are reported by the skip count instead."""
        empty = [p for p, st in zip(self.paths, states, strict=True)
                 if st.n_rows == 0 and st.n_skipped == 0]
        if not empty:
            return
        why = "the file is empty or holds only comments and blank lines"
        if len(empty) == len(self.paths):
            names = ", ".join(display_name(p) for p in empty[:3])
            more = f" (+{len(empty) - 3} more)" if len(empty) > 3 else ""
            if len(empty) > 1:
                why = "the files are empty or hold only comments and blank lines"
            raise ValueError(f"{names}{more}: no example ({why})")
        for p in empty:
            if p not in self._warned_empty:
                self._warned_empty.add(p)
                logger.warning("%s: no example (%s); read as nothing", display_name(p), why)

    def __repr__(self) -> str:
        files = display_name(self.paths[0]) + (f" +{len(self.paths) - 1}" if len(self.paths) > 1
                                               else "")
        return (
            f"SVMLightSource({files}, {self.n_features} features, "
            f"{self.n_examples if self.n_examples is not None else '?'} examples, "
            f"batch_size={self.opts.batch_size})"
        )


def load_svmlight(path, **kwargs):
    """Read a whole svmlight file into memory: ``(X, y)`` with X ``n_features x n_examples`` CSC.

    A convenience over :class:`SVMLightSource` (same parameters, except ``batch_size``);
    useful to build a :class:`MatSource` or for comparisons.

    Parameters
    ----------
    path : str, path-like, or list of them
        The file(s), as ``paths`` of :class:`SVMLightSource`.
    **kwargs
        The other parameters of :class:`SVMLightSource` (``n_features``, ``zero_based``,
        ``dtype``, ``on_error``, ...).

    Returns
    -------
    X : scipy.sparse.csc_matrix, shape (n_features, n_examples)
        The examples as columns.
    y : numpy.ndarray, shape (n_examples,)
        The labels, of the options' ``dtype``.

    Raises
    ------
    ValueError
        A malformed line (with ``on_error="raise"``) or a bad option.
    """
    from ._base import _hstack

    src = SVMLightSource(path, **kwargs)
    try:
        blocks = list(src._blocks())
    finally:
        src.close()
    if not blocks:
        dt = np.dtype(src.opts.dtype)
        return (
            _csc(np.zeros(0, dt), np.zeros(0, np.int32), np.zeros(1, np.int32),
                 (src.n_features, 0)),
            np.zeros(0, dt),
        )
    return _hstack([b[0] for b in blocks]), np.concatenate([b[1] for b in blocks])
