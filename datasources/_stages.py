"""Composable stages: a stage is a DataSource that wraps another one.

``HeldOut`` splits off every k-th minibatch (BIDMach's ``evalStep``), ``Shuffle`` mixes examples
through a bounded buffer, ``ToDevice`` moves minibatches to the GPU through
:func:`roofline.gmat.to_device`.  Stages chain: ``src.shuffle(50_000, seed=0).prefetch(4)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from roofline import gmat
from roofline.gmat import Options, option

from ._base import (
    DataSource,
    Minibatch,
    _cat_opt,
    _hstack,
    _sl,
    _slice_cols,
    _take_cols,
    register_stage,
)

__all__ = [
    "HeldOut",
    "HeldOutOptions",
    "Shuffle",
    "ShuffleOptions",
    "Stage",
    "ToDevice",
    "ToDeviceOptions",
    "split_heldout",
]


class Stage(DataSource):
    """Base of the stages: forwards ``n_features``, ``batch_size``, ``close`` to ``source``.

    Parameters
    ----------
    source : DataSource
        The wrapped source.

    Raises
    ------
    TypeError
        ``source`` is not a :class:`DataSource`.
    """

    def __init__(self, source):
        if not isinstance(source, DataSource):
            raise TypeError(f"source must be a DataSource, got {type(source).__name__}")
        self.source = source
        self.n_features = source.n_features

    @property
    def batch_size(self) -> int:
        return self.source.batch_size

    @property
    def device(self) -> str:
        return self.source.device

    def close(self) -> None:
        self.source.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.source!r}, {self.opts!r})"


@dataclass
class HeldOutOptions(Options):
    """``every``: minibatch ``i`` is held out when ``i % every == every - 1``;
    ``part``: ``"train"`` keeps the others, ``"test"`` keeps only the held-out ones."""

    every: int = option(11, "minibatch i is held out when i % every == every - 1", low=2)
    part: str = option("train", "'train' keeps the others, 'test' only the held-out ones",
                       choices=("train", "test"))


@register_stage
class HeldOut(Stage):
    """Train or test side of a minibatch-level held-out split (BIDMach's ``evalStep``).

    Deterministic: the same minibatches are held out on every pass, so the two sides never
    share an example.  ``start`` of each minibatch keeps its position in the full stream.

    Parameters
    ----------
    source : DataSource
    every : int
        Minibatch ``i`` of a pass is held out when ``i % every == every - 1``.
    part : {"train", "test"}
    """

    def __init__(self, source, *, every=11, part="train"):
        super().__init__(source)
        self.opts = HeldOutOptions(every=every, part=part)
        n = source.n_examples
        self.n_examples = None
        if n is not None and not getattr(source.opts, "drop_last", False):
            bs = source.batch_size
            n_batches = -(-n // bs)
            test_idx = [i for i in range(every - 1, n_batches, every)]
            n_test = sum(min(bs, n - i * bs) for i in test_idx)
            self.n_examples = n_test if part == "test" else n - n_test

    def _batches(self):
        k, test = self.opts.every, self.opts.part == "test"
        for i, mb in enumerate(self.source):
            if (i % k == k - 1) == test:
                yield mb


def split_heldout(source, every: int = 11):
    """``(train, test)`` views of ``source`` (see :class:`HeldOut`).

    Parameters
    ----------
    source : DataSource
        The source to split.
    every : int, default 11
        Minibatch ``i`` of a pass is held out when ``i % every == every - 1``.

    Returns
    -------
    train, test : HeldOut
        The two sides; together they hold every minibatch once.
    """
    return HeldOut(source, every=every, part="train"), HeldOut(source, every=every, part="test")


@dataclass
class ShuffleOptions(Options):
    """``buffer_size`` examples are mixed at a time; ``seed`` makes every pass reproducible."""

    buffer_size: int = option(100_000, "examples mixed at a time (memory bound)", low=1)
    seed: int | None = option(None, "required: pass p uses default_rng([seed, p])", kind=int)

    def _check(self, prefix):
        if self.seed is None:
            raise ValueError(f"{prefix}option 'seed' must be an integer (shuffling is always "
                             f"explicitly seeded), got None")


@register_stage
class Shuffle(Stage):
    """Shuffle examples through a buffer of ``buffer_size`` examples.

    The buffer is filled from ``source``; when full it is permuted and half of it (whole
    minibatches) is emitted, the other half stays to be mixed with what comes next; at the end
    of the pass the rest is permuted and emitted.  Every example is emitted exactly once per
    pass.  Pass ``p`` uses ``np.random.default_rng([seed, p])``: reproducible for a seed, a new
    order each pass.  Output minibatches have the source's ``batch_size`` (the last one may be
    smaller, or dropped when the source has ``drop_last``).

    Parameters
    ----------
    source : DataSource
    buffer_size : int
        Examples held at once (memory bound).  ``>= n_examples`` gives a full shuffle.
    seed : int
        Required; there is no hidden global seeding.
    """

    def __init__(self, source, *, buffer_size=100_000, seed=None):
        super().__init__(source)
        self.opts = ShuffleOptions(buffer_size=buffer_size, seed=seed)
        self.n_examples = source.n_examples
        self._pass = 0

    def reset(self) -> None:
        self._pass += 1

    def _batches(self):
        rng = np.random.default_rng([int(self.opts.seed), self._pass])
        bs = self.source.batch_size
        drop_last = getattr(self.source.opts, "drop_last", False)
        cap = max(self.opts.buffer_size, bs)
        keep = cap // 2
        buf_X, buf_y, buf_w, n_buf = [], [], [], 0
        start = 0

        def emit(X, y, w, n_out):
            nonlocal start
            perm = rng.permutation(X.shape[1])
            X, y, w = _take_cols(X, perm), _take(y, perm), _take(w, perm)
            out = []
            for a in range(0, n_out, bs):
                b = min(a + bs, n_out)
                out.append(Minibatch(_slice_cols(X, a, b), _sl(y, a, b), _sl(w, a, b), start))
                start += b - a
            m = X.shape[1]
            rest = (_slice_cols(X, n_out, m), _sl(y, n_out, m), _sl(w, n_out, m))
            return out, rest

        for mb in self.source:
            buf_X.append(mb.X)
            buf_y.append(mb.y)
            buf_w.append(mb.w)
            n_buf += mb.n_examples
            if n_buf >= cap:
                X, y, w = _hstack(buf_X), _cat_opt(buf_y), _cat_opt(buf_w)
                n_out = ((n_buf - keep) // bs) * bs
                out, (rX, ry, rw) = emit(X, y, w, n_out)
                yield from out
                buf_X, buf_y, buf_w, n_buf = [rX], [ry], [rw], rX.shape[1]
        if n_buf:
            X, y, w = _hstack(buf_X), _cat_opt(buf_y), _cat_opt(buf_w)
            n_out = n_buf if not drop_last else (n_buf // bs) * bs
            out, _ = emit(X, y, w, n_out)
            yield from out


def _take(a, idx):
    return None if a is None else a[..., idx]


@dataclass
class ToDeviceOptions(Options):
    """``device``: ``"cpu"`` or ``"gpu"``."""

    device: str = option("gpu", "where the minibatches' arrays go", choices=("cpu", "gpu"))
    pipeline: bool = option(False, "device='gpu': copy through Snap ML's double-buffered "
                                   "pipeline (pinned buffers, a second stream) instead of "
                                   "one synchronous copy per array")


@register_stage
class ToDevice(Stage):
    """Move every minibatch (X, y, w) to ``device`` with :func:`roofline.gmat.to_device`.

    Put it after :class:`Prefetch`'s source (``src.to_device("gpu").prefetch(2)``) so that the
    host-to-device copy of the next minibatch overlaps work on the current one.

    Parameters
    ----------
    source : DataSource
        The wrapped source.
    device : {"gpu", "cpu"}
        Where the minibatches' arrays go.
    pipeline : bool, default False
        ``device="gpu"``: copy the host minibatches through
        :class:`roofline.kernels.DeviceChunkStream` (Snap ML's pipeline: each minibatch's arrays
        staged in pinned buffers and copied on a second stream while the consumer works on the
        previous one, double buffered), then into arrays of their own on the device (the
        pipeline's buffers are reused); the same minibatches as without it.  Minibatches
        already on the device pass through.

    Raises
    ------
    RuntimeError
        ``device="gpu"`` and no CUDA device is usable.
    """

    def __init__(self, source, *, device="gpu", pipeline=False):
        super().__init__(source)
        self.opts = ToDeviceOptions(device=device, pipeline=pipeline)
        self.n_examples = source.n_examples
        if device == "gpu" and not gmat.gpu_available():
            raise RuntimeError(
                "ToDevice(device='gpu'): no usable CUDA device (install roofline[gpu] on a "
                "machine with an NVIDIA GPU)"
            )

    @property
    def device(self) -> str:
        return self.opts.device

    def _batches(self):
        dev = self.opts.device
        if dev == "gpu" and self.opts.pipeline:
            yield from self._pipelined()
            return
        for mb in self.source:
            yield Minibatch(
                gmat.to_device(mb.X, dev),
                None if mb.y is None else gmat.to_device(mb.y, dev),
                None if mb.w is None else gmat.to_device(mb.w, dev),
                mb.start,
            )

    def _pipelined(self):
        """The minibatches through the double-buffered pipeline (see ``pipeline``)."""
        import cupy
        import cupyx.scipy.sparse as csp

        from roofline.kernels import DeviceChunkStream

        shapes = {}  # chunk number -> how to rebuild its minibatch
        passed = {}  # chunk number -> a minibatch already on the device

        def parts():
            for k, mb in enumerate(self.source):
                if gmat.device_of(mb.X) == "gpu":
                    passed[k] = mb
                    yield ()
                    continue
                X = mb.X
                if gmat.is_sparse(X):
                    X = X.tocsc()
                    arrays = [X.indptr, X.indices, X.data]
                    kind = ("csc", X.shape)
                else:
                    X = np.asarray(X)
                    fortran = X.ndim == 2 and X.flags.f_contiguous and not X.flags.c_contiguous
                    arrays = [X.T if fortran else X]
                    kind = ("dense_f" if fortran else "dense", X.shape)
                extra = [a for a in (mb.y, mb.w) if a is not None]
                shapes[k] = (kind, mb.y is not None, mb.w is not None, mb.start)
                yield tuple(arrays + [np.asarray(a) for a in extra])

        pipe = DeviceChunkStream(depth=2)
        try:
            for k, dev_arrays in pipe.iterate(parts()):
                if k in passed:
                    yield passed.pop(k)
                    continue
                (kind, shape), has_y, has_w, start = shapes.pop(k)
                own = [cupy.asarray(a).copy() for a in dev_arrays]  # the slots are reused
                if kind == "csc":
                    X = csp.csc_matrix((own[2], own[1], own[0]), shape=shape)
                    rest = own[3:]
                else:
                    X = own[0].T if kind == "dense_f" else own[0]
                    rest = own[1:]
                y = rest.pop(0) if has_y else None
                w = rest.pop(0) if has_w else None
                yield Minibatch(X, y, w, start)
        finally:
            pipe.close()
