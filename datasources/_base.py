"""The DataSource protocol and the in-memory source.

A DataSource is an iterator over minibatches (BIDMach: "an iterator over matrix blocks").
One full iteration is one pass; ``reset()`` starts a new pass (iterating again also does).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from roofline import gmat
from roofline.gmat import Options, option

__all__ = ["DataSource", "DataSourceOptions", "MatSource", "MatSourceOptions", "Minibatch"]


@dataclass
class Minibatch:
    """One block of examples, in gmat layout (one column = one example).

    The parameters are also the attributes.

    Parameters
    ----------
    X : CSC matrix or dense array, shape (n_features, n)
        The examples, one per column.
    y : array, shape (n,) or (k, n), or None
        Labels (one column per example for multi-label targets).
    w : array, shape (n,), or None
        Example weights.
    start : int
        Index of the first example of this block within the pass.
    """

    X: Any
    y: Any = None
    w: Any = None
    start: int = 0

    @property
    def n_examples(self) -> int:
        """int: the number of examples (columns of ``X``)."""
        return int(self.X.shape[1])

    def __repr__(self) -> str:
        kind = "sparse" if gmat.is_sparse(self.X) else "dense"
        nnz = f", nnz={self.X.nnz}" if gmat.is_sparse(self.X) else ""
        return (
            f"Minibatch({kind} {self.X.shape[0]}x{self.X.shape[1]} {self.X.dtype}{nnz}, "
            f"start={self.start}, y={'None' if self.y is None else self.y.shape}, "
            f"w={'None' if self.w is None else self.w.shape})"
        )


#: The stages that :class:`DataSource`'s chaining methods (``heldout``, ``shuffle``,
#: ``to_device``, ``prefetch``) build, by class name.  The modules that define them
#: (``_stages.py``, ``_prefetch.py``, both imported by the package) register them with
#: :func:`register_stage`, so that the base class never imports the modules that subclass it.
_STAGES: dict[str, type] = {}


def register_stage(cls):
    """Class decorator: make ``cls`` the stage :class:`DataSource` builds under its name."""
    _STAGES[cls.__name__] = cls
    return cls


@dataclass
class DataSourceOptions(Options):
    """Options common to every DataSource (an :class:`~roofline.gmat.Options`: validated on
    construction, printable, round-tripping to TOML).

    Parameters
    ----------
    batch_size : int
        Examples per minibatch (the last one of a pass may be smaller unless ``drop_last``).
    drop_last : bool
        Drop a final partial minibatch instead of yielding it.
    """

    batch_size: int = option(10_000, "examples per minibatch", low=1)
    drop_last: bool = option(False, "drop a final partial minibatch instead of yielding it")


class DataSource:
    """Base class: iterate to get :class:`Minibatch` objects; one iteration is one pass.

    Subclasses implement :meth:`_batches` (a generator over one pass) and set
    ``n_features`` (and ``n_examples`` when known, else ``None``).
    """

    n_features: int
    n_examples: int | None = None
    opts: DataSourceOptions

    def __iter__(self):
        self.reset()
        return iter(self._batches())

    def _batches(self):  # pragma: no cover - abstract
        raise NotImplementedError

    def reset(self) -> None:
        """Prepare a new pass (called by ``iter``)."""

    def close(self) -> None:
        """Release files, threads and other resources."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def batch_size(self) -> int:
        """int: examples per minibatch (``opts.batch_size``; the last one of a pass may be
        smaller)."""
        return self.opts.batch_size

    @property
    def device(self) -> str:
        """Where the minibatches' arrays live: ``"cpu"`` (numpy/scipy) or ``"gpu"`` (cupy)."""
        return "cpu"

    # -- composition: each returns a new source wrapping this one (see ``_stages.py``) --------

    def heldout(self, every: int = 11, *, part: str = "train") -> DataSource:
        """Keep (``part="train"``) or take only (``part="test"``) every ``every``-th minibatch.

        BIDMach's ``evalStep``: minibatch ``i`` of a pass is held out when
        ``i % every == every - 1``.  See :class:`HeldOut`.

        Parameters
        ----------
        every : int, default 11
            The held-out period (>= 2).
        part : {"train", "test"}
            ``"train"`` keeps the other minibatches, ``"test"`` only the held-out ones.

        Returns
        -------
        HeldOut
            A source wrapping this one.
        """
        return _STAGES["HeldOut"](self, every=every, part=part)

    def shuffle(self, buffer_size: int, *, seed) -> DataSource:
        """Shuffle examples through a buffer of ``buffer_size`` examples (see :class:`Shuffle`).

        Parameters
        ----------
        buffer_size : int
            Examples mixed at a time (the memory bound).
        seed : int
            Pass ``p`` uses ``np.random.default_rng([seed, p])``.

        Returns
        -------
        Shuffle
            A source wrapping this one.
        """
        return _STAGES["Shuffle"](self, buffer_size=buffer_size, seed=seed)

    def to_device(self, device: str = "gpu") -> DataSource:
        """Move every minibatch to ``device`` (see :class:`ToDevice`).

        Parameters
        ----------
        device : {"cpu", "gpu"}
            Where the minibatches' arrays go.

        Returns
        -------
        ToDevice
            A source wrapping this one.

        Raises
        ------
        RuntimeError
            ``device="gpu"`` and no CUDA device is usable.
        """
        return _STAGES["ToDevice"](self, device=device)

    def prefetch(self, depth: int = 2) -> DataSource:
        """Produce minibatches on a background thread, ``depth`` ahead (see :class:`Prefetch`).

        Parameters
        ----------
        depth : int, default 2
            Minibatches produced ahead of the consumer (the queue bound).

        Returns
        -------
        Prefetch
            A source wrapping this one.
        """
        return _STAGES["Prefetch"](self, depth=depth)


# -- CSC block helpers (no validation: callers build valid structures) -------------------------


def _check_weights(w, name):
    """Raise ``ValueError`` naming ``name`` and the first bad entry unless every example
    weight is finite and non-negative (numpy or cupy)."""
    bad = ~((w >= 0) & (w < float("inf")))  # negative, NaN or inf
    if bool(bad.any()):
        j = int(bad.nonzero()[0][0])
        raise ValueError(
            f"{name} must hold finite non-negative example weights, got {name}[{j}] = "
            f"{float(w[j])!r} ({int(bad.sum())} bad entries)"
        )


def _index_dtype(n_rows: int, nnz: int) -> np.dtype:
    """int32 when both the row count and the nnz fit, else int64 (gmat convention)."""
    lim = np.iinfo(np.int32).max
    return np.dtype(np.int32) if (n_rows <= lim and nnz <= lim) else np.dtype(np.int64)


_TEMPLATES: dict = {}


def _csc(data, indices, indptr, shape, cls=sp.csc_matrix):
    """A CSC matrix over the given arrays, without scipy's copies, casts or format checks.

    The caller guarantees a valid structure (sorted unique row indices in range, matching
    index dtypes); this is the zero-copy constructor used by streaming sources.  It shallow-
    copies an empty matrix of the same class, shape and dtype (7 us instead of scipy's 45 us
    constructor: it matters at hundreds of minibatches per second), then sets the arrays.
    """
    if cls.__module__.startswith("cupyx"):  # pragma: no cover - needs a GPU
        return gmat.csc_from_arrays(cls, data, indices, indptr, shape)
    key = (cls, int(shape[0]), int(shape[1]), data.dtype)
    tmpl = _TEMPLATES.get(key)
    if tmpl is None:
        tmpl = cls((int(shape[0]), int(shape[1])), dtype=data.dtype)
        if len(_TEMPLATES) >= 256:
            _TEMPLATES.clear()
        _TEMPLATES[key] = tmpl
    X = copy.copy(tmpl)
    X.data, X.indices, X.indptr = data, indices, indptr
    X.has_sorted_indices = True
    return X


def _slice_cols(X, start: int, stop: int):
    """Columns ``start:stop`` of a CSC or dense block; sparse data/indices are views."""
    if not gmat.is_sparse(X):
        return X[:, start:stop]
    lo, hi = int(X.indptr[start]), int(X.indptr[stop])
    indptr = X.indptr[start : stop + 1] - X.indptr[start]
    return _csc(X.data[lo:hi], X.indices[lo:hi], indptr, (X.shape[0], stop - start), type(X))


def _hstack(blocks):
    """Concatenate CSC (or dense) blocks along the example axis."""
    if len(blocks) == 1:
        return blocks[0]
    if not gmat.is_sparse(blocks[0]):
        return np.concatenate(blocks, axis=1)
    n_rows = blocks[0].shape[0]
    nnz = sum(int(b.indptr[-1]) for b in blocks)
    m = sum(b.shape[1] for b in blocks)
    idt = _index_dtype(n_rows, nnz)
    data = np.empty(nnz, dtype=blocks[0].dtype)
    indices = np.empty(nnz, dtype=idt)
    indptr = np.empty(m + 1, dtype=idt)
    indptr[0] = 0
    p = j = 0
    for b in blocks:
        k, mb = int(b.indptr[-1]), b.shape[1]
        data[p : p + k] = b.data[:k]
        indices[p : p + k] = b.indices[:k]
        indptr[j + 1 : j + mb + 1] = b.indptr[1:] + p
        p += k
        j += mb
    return _csc(data, indices, indptr, (n_rows, m), type(blocks[0]))


def _take_cols(X, cols):
    """Columns ``cols`` (an index array) of a CSC or dense block, as a new block."""
    if not gmat.is_sparse(X):
        return X[:, cols]
    cols = np.asarray(cols, dtype=np.int64)
    starts = X.indptr[cols].astype(np.int64)
    lens = X.indptr[cols + 1].astype(np.int64) - starts
    nnz = int(lens.sum())
    idt = _index_dtype(X.shape[0], nnz)
    indptr = np.zeros(len(cols) + 1, dtype=idt)
    np.cumsum(lens, out=indptr[1:])
    # gather positions: for each output nonzero, its source position
    src = np.repeat(starts - indptr[:-1], lens) + np.arange(nnz, dtype=np.int64)
    return _csc(X.data[src], X.indices[src].astype(idt, copy=False), indptr,
                (X.shape[0], len(cols)), type(X))


def _cat_opt(parts):
    """Concatenate optional per-example arrays (labels, weights) along their last axis."""
    if any(p is None for p in parts):
        if all(p is None for p in parts):
            return None
        raise ValueError("some blocks carry labels/weights and others do not")
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=-1)


def _sl(a, start, stop):
    return None if a is None else a[..., start:stop]


class _Rebatcher:
    """Cut a stream of example blocks (any sizes) into minibatches of exactly ``batch_size``.

    Blocks are pushed in order; full minibatches are zero-copy slices of a block except the
    ones that straddle two blocks (those are concatenated).  ``finish`` yields the final
    partial minibatch unless ``drop_last``.
    """

    def __init__(self, batch_size: int, drop_last: bool = False):
        self.bs = int(batch_size)
        self.drop_last = drop_last
        self.pending = []  # list of (X, y, w)
        self.n_pending = 0
        self.start = 0

    def _emit(self, X, y, w):
        mb = Minibatch(X, y, w, self.start)
        self.start += X.shape[1]
        return mb

    def push(self, X, y=None, w=None):
        m = X.shape[1]
        pos = 0
        if self.n_pending:
            need = self.bs - self.n_pending
            if m < need:
                self.pending.append((X, y, w))
                self.n_pending += m
                return
            self.pending.append((_slice_cols(X, 0, need), _sl(y, 0, need), _sl(w, 0, need)))
            Xs, ys, ws = zip(*self.pending, strict=False)
            self.pending, self.n_pending = [], 0
            yield self._emit(_hstack(list(Xs)), _cat_opt(ys), _cat_opt(ws))
            pos = need
        while m - pos >= self.bs:
            stop = pos + self.bs
            yield self._emit(_slice_cols(X, pos, stop), _sl(y, pos, stop), _sl(w, pos, stop))
            pos = stop
        if pos < m:
            self.pending.append((_slice_cols(X, pos, m), _sl(y, pos, m), _sl(w, pos, m)))
            self.n_pending += m - pos

    def finish(self):
        if self.n_pending and not self.drop_last:
            Xs, ys, ws = zip(*self.pending, strict=False)
            yield self._emit(_hstack(list(Xs)), _cat_opt(ys), _cat_opt(ws))
        self.pending, self.n_pending = [], 0


@dataclass
class MatSourceOptions(DataSourceOptions):
    """Options of :class:`MatSource`."""


class MatSource(DataSource):
    """Minibatches cut from in-memory matrices (BIDMach's MatSource).

    Parameters
    ----------
    X : CSC matrix or dense array, shape (n_features, n_examples)
        Examples as columns.  Sparse input is validated once; minibatches are zero-copy column
        slices of it.
    y : array, shape (n_examples,) or (k, n_examples), optional
    w : array, shape (n_examples,), optional
    batch_size, drop_last
        See :class:`DataSourceOptions`.
    """

    def __init__(self, X, y=None, w=None, *, batch_size=10_000, drop_last=False):
        self.opts = MatSourceOptions(batch_size=batch_size, drop_last=drop_last)
        if gmat.is_sparse(X):
            gmat.check_csc(X, "X")
        else:
            gmat.as_dense(X, "X", ndim=(2,))
        m = X.shape[1]
        for arr, name in ((y, "y"), (w, "w")):
            if arr is not None and arr.shape[-1] != m:
                raise ValueError(
                    f"{name} has {arr.shape[-1]} entries along its last axis but X has {m} "
                    f"examples (columns)"
                )
        if w is not None and w.ndim != 1:
            raise ValueError(f"w must be 1-D, got shape {w.shape}")
        if w is not None:
            _check_weights(w, "w")
        self.X, self.y, self.w = X, y, w
        self.n_features, self.n_examples = int(X.shape[0]), int(m)

    def _batches(self):
        bs, m = self.opts.batch_size, self.n_examples
        for start in range(0, m, bs):
            stop = min(start + bs, m)
            if stop - start < bs and self.opts.drop_last:
                return
            if gmat.is_sparse(self.X):
                X = gmat.slice_columns(self.X, start, stop, "X")
            else:
                X = self.X[:, start:stop]
            y = None if self.y is None else self.y[..., start:stop]
            w = None if self.w is None else self.w[start:stop]
            yield Minibatch(X, y, w, start)

    @property
    def device(self) -> str:
        return gmat.device_of(self.X)

    def __len__(self) -> int:
        bs, m = self.opts.batch_size, self.n_examples
        return m // bs if self.opts.drop_last else -(-m // bs)

    def __repr__(self) -> str:
        return (
            f"MatSource({self.n_features} features x {self.n_examples} examples, "
            f"batch_size={self.opts.batch_size}, {len(self)} minibatches)"
        )
