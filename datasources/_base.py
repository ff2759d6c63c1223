"""The DataSource protocol and the in-memory source.

A DataSource is an iterator over minibatches (BIDMach: "an iterator over matrix blocks").
One full iteration is one pass; ``reset()`` starts a new pass (iterating again also does).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from roofline import gmat

__all__ = ["DataSource", "DataSourceOptions", "MatSource", "Minibatch"]


@dataclass
class Minibatch:
    """One block of examples, in gmat layout (one column = one example).

    Attributes
    ----------
    X : CSC matrix or dense array, shape (n_features, n)
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
        return int(self.X.shape[1])

    def __repr__(self) -> str:
        kind = "sparse" if gmat.is_sparse(self.X) else "dense"
        nnz = f", nnz={self.X.nnz}" if gmat.is_sparse(self.X) else ""
        return (
            f"Minibatch({kind} {self.X.shape[0]}x{self.X.shape[1]} {self.X.dtype}{nnz}, "
            f"start={self.start}, y={'None' if self.y is None else self.y.shape}, "
            f"w={'None' if self.w is None else self.w.shape})"
        )


@dataclass
class DataSourceOptions:
    """Options common to every DataSource.

    Attributes
    ----------
    batch_size : int
        Examples per minibatch (the last one of a pass may be smaller unless ``drop_last``).
    drop_last : bool
        Drop a final partial minibatch instead of yielding it.
    """

    batch_size: int = 10_000
    drop_last: bool = False

    def __post_init__(self):
        if not isinstance(self.batch_size, (int, np.integer)) or self.batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {self.batch_size!r}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


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
        return self.opts.batch_size


@dataclass
class MatSourceOptions(DataSourceOptions):
    pass


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

    def __len__(self) -> int:
        bs, m = self.opts.batch_size, self.n_examples
        return m // bs if self.opts.drop_last else -(-m // bs)

    def __repr__(self) -> str:
        return (
            f"MatSource({self.n_features} features x {self.n_examples} examples, "
            f"batch_size={self.opts.batch_size}, {len(self)} minibatches)"
        )
