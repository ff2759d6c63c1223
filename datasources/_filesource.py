"""FileSource: minibatches streamed from a sequence of CSC shard files (npz or HDF5).

The shard formats, the per-shard reader and the manifest are in ``_shards.py``; the writer
(:class:`~roofline.datasources.ShardWriter`) in ``_writer.py``.  :class:`FileSource` takes the
shard count from the manifest and refuses a missing shard, a stale one (another conversion id)
or one that disagrees with its record; without a manifest (hand-made shards) it probes
``0, 1, ...`` and warns.
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from roofline.gmat import option

from ._base import DataSource, DataSourceOptions, _Rebatcher
from ._io import display_name
from ._shards import (
    _FORMATS,
    _alloc,
    _cached_layout,
    _check_pattern,
    _exists,
    _format_of,
    _load_manifest,
    _shard_header,
    _shard_path,
    manifest_path,
    read_shard,
)

__all__ = ["FileSource", "FileSourceOptions"]

logger = logging.getLogger(__name__)


@dataclass
class FileSourceOptions(DataSourceOptions):
    """Options of :class:`FileSource` (see its parameters)."""

    pattern: str = option("", "shard file name with an {i} field (a full path or URL without "
                              "dirs)")
    dirs: list = option([], "striping: shard i is dirs[i % len(dirs)] / pattern", kind=list)
    n_shards: int | None = option(None, "number of shards; None: 0, 1, ... while they exist",
                                  kind=int, low=1)
    format: str | None = option(None, "shard format; None: from the pattern's suffix",
                                choices=_FORMATS)
    order: str = option("sequential", "shard order within a pass ('random': permuted each "
                                      "pass with default_rng([seed, pass]))",
                        choices=("sequential", "random"))
    seed: int | None = option(None, "shard-order seed (required with order='random')", kind=int)
    n_readers: int = option(2, "threads reading shards in parallel", low=1)
    lookahead: int = option(2, "shards read ahead of the one being consumed", low=1)
    validate: bool = option(True, "full CSC check of every shard")
    rank: int = option(0, "this rank's shards: those with index % size == rank", low=0)
    size: int = option(1, "ranks sharing the shards (a distributed job's size)", low=1)

    def _check(self, prefix):
        try:
            _check_pattern(self.pattern)
        except ValueError as exc:
            raise ValueError(f"{prefix}option 'pattern': {exc}") from None
        for d in self.dirs:
            if not isinstance(d, str):
                raise ValueError(f"{prefix}option 'dirs' must hold strings, got {d!r}")
        if self.rank >= self.size:
            raise ValueError(f"{prefix}option 'rank' = {self.rank} must be below 'size' = "
                             f"{self.size}")
        if self.order == "random" and self.seed is None:
            raise ValueError(f"{prefix}option 'order' = 'random' needs an integer seed, got "
                             f"seed=None")


class FileSource(DataSource):
    """Minibatches streamed from CSC shard files (npz or HDF5), read ahead in parallel.

    Parameters
    ----------
    pattern : str
        Shard file name with an ``{i}`` field, e.g. ``"part-{i:05d}.npz"``; a full path (or
        URL) when ``dirs`` is not given.
    dirs : list of str, optional
        Striping: shard ``i`` is ``dirs[i % len(dirs)] / pattern.format(i=i)``.
    n_shards : int, optional
        Number of shards.  By default the manifest's count, or (no manifest: hand-made shards)
        shards ``0, 1, ...`` while they exist, with a warning giving the count found.  With a
        manifest, ``n_shards`` may select its first shards.
    format : {"npz", "h5"}, optional
        Inferred from the pattern's suffix.
    order : {"sequential", "random"}
        Shard order within a pass; ``"random"`` permutes the shards each pass with
        ``default_rng([seed, pass])``.
    seed : int, optional
        Required with ``order="random"``.
    n_readers : int
        Threads reading shards in parallel.
    lookahead : int
        Shards read ahead of the one being consumed (BIDMach's ``lookahead``).
    validate : bool
        Full CSC check of every shard (sorted in-range indices, finite values).
    rank, size : int
        One rank of a distributed job (``comm.rank``, ``comm.size`` of
        :mod:`roofline.comm`) reads only its shards: those whose index ``i`` has
        ``i % size == rank``.  Every shard is still checked against the manifest first.
    batch_size, drop_last
        See :class:`DataSourceOptions`.  Minibatches run across shard boundaries.

    Notes
    -----
    ``n_features`` and ``n_examples`` come from the shard headers at construction; a shard
    whose arrays disagree (with each other or with the first shard's feature count) raises
    ``ValueError`` naming the shard.  So does a corrupt shard (failed zip CRC-32, fletcher32 or
    manifest CRC-32), and, with a manifest (:func:`manifest_path`), a missing shard or one from
    another conversion.  Without a manifest, a gap (shard ``k`` missing, ``k + 1`` present)
    is an error.
    """

    def __init__(
        self,
        pattern,
        *,
        dirs=None,
        n_shards=None,
        format=None,
        order="sequential",
        seed=None,
        n_readers=2,
        lookahead=2,
        validate=True,
        rank=0,
        size=1,
        batch_size=10_000,
        drop_last=False,
    ):
        if isinstance(dirs, (str, os.PathLike)):
            dirs = [dirs]
        self.opts = FileSourceOptions(
            batch_size=batch_size,
            drop_last=drop_last,
            pattern=pattern,
            dirs=[os.fspath(d) if not isinstance(d, str) else d for d in (dirs or [])],
            n_shards=n_shards,
            format=format,
            order=order,
            seed=seed,
            n_readers=n_readers,
            lookahead=lookahead,
            validate=validate,
            rank=rank,
            size=size,
        )
        self.format = _format_of(pattern, format)
        o = self.opts
        self.manifest_path = manifest_path(pattern, o.dirs)
        self.manifest = _load_manifest(self.manifest_path)
        if self.manifest is not None:
            paths, heads = self._from_manifest()
        else:
            paths, heads = self._discover()
        self.n_features = heads[0][0]
        for p, (nf, _, _) in zip(paths, heads, strict=True):
            if nf != self.n_features:
                raise ValueError(
                    f"shard {display_name(p)}: has {nf} features (rows) but shard "
                    f"{display_name(paths[0])} has {self.n_features}"
                )
        #: The conversion's indices of the shards this rank reads (all of them by default).
        self.shard_ids = [i for i in range(len(paths)) if i % o.size == o.rank]
        self.paths = [paths[i] for i in self.shard_ids]
        self.shard_sizes = np.array([heads[i][1] for i in self.shard_ids], dtype=np.int64)
        self.n_examples = int(self.shard_sizes.sum())
        self._pass = 0
        self._pool = None

    def _from_manifest(self):
        """Shard paths and headers as the manifest lists them; a missing shard, one from
        another conversion or one that disagrees with its record is an error naming it."""
        o, m = self.opts, self.manifest
        mname = display_name(self.manifest_path)
        recs = m["shards"]
        if not recs:
            raise ValueError(f"manifest {mname} lists no shard (the conversion wrote no example)")
        if o.n_shards is not None and o.n_shards > len(recs):
            extra = _shard_path(o.pattern, o.dirs, len(recs))
            what = "is not part of that conversion" if _exists(extra) else "does not exist"
            raise ValueError(f"shard {display_name(extra)} {what} (n_shards={o.n_shards}, "
                             f"manifest {mname} lists {len(recs)} shards)")
        if o.n_shards is not None:
            recs = recs[: o.n_shards]  # a prefix of the conversion, each shard still checked
        if m.get("format") not in (None, self.format):
            raise ValueError(f"manifest {mname} lists {m['format']} shards, not {self.format}")
        paths = [_shard_path(o.pattern, o.dirs, i) for i in range(len(recs))]
        for i, (p, rec) in enumerate(zip(paths, recs, strict=True)):
            if rec["name"] != o.pattern.format(i=i):
                raise ValueError(f"manifest {mname}: shard {i} is {rec['name']!r}, the "
                                 f"pattern gives {o.pattern.format(i=i)!r}")
            if not _exists(p):
                raise ValueError(f"shard {display_name(p)} is missing: manifest {mname} lists "
                                 f"{len(recs)} shards")
        heads = [_shard_header(p, self.format) for p in paths]
        for p, (_, n, cid), rec in zip(paths, heads, recs, strict=True):
            if cid != rec["conversion_id"]:
                raise ValueError(
                    f"shard {display_name(p)}: stale: it belongs to conversion "
                    f"{cid or '(none)'}, manifest {mname} to conversion {rec['conversion_id']} "
                    "(left from an earlier conversion, or an interrupted one: convert again)"
                )
            if n != rec["n_examples"]:
                raise ValueError(f"shard {display_name(p)}: has {n} examples, manifest {mname} "
                                 f"says {rec['n_examples']}")
        return paths, heads

    def _discover(self):
        """Without a manifest: shards ``0, 1, ...`` while they exist (or ``n_shards``)."""
        o = self.opts
        if o.n_shards is None:
            paths = []
            while _exists(_shard_path(o.pattern, o.dirs, len(paths))):
                paths.append(_shard_path(o.pattern, o.dirs, len(paths)))
            if not paths:
                raise ValueError(
                    f"no shard found: {_shard_path(o.pattern, o.dirs, 0)} does not exist"
                )
            after = _shard_path(o.pattern, o.dirs, len(paths) + 1)
            if _exists(after):
                raise ValueError(
                    f"shard {display_name(_shard_path(o.pattern, o.dirs, len(paths)))} is "
                    f"missing but {display_name(after)} exists (no manifest "
                    f"{display_name(self.manifest_path)}; pass n_shards to read only the "
                    f"first {len(paths)})"
                )
            logger.warning(
                "no manifest %s: found %d shards (%s .. %s) by probing until %s did not exist; "
                "a missing or stale shard cannot be detected (write shards with ShardWriter)",
                display_name(self.manifest_path), len(paths), display_name(paths[0]),
                display_name(paths[-1]), display_name(_shard_path(o.pattern, o.dirs,
                                                                  len(paths))),
            )
        else:
            paths = [_shard_path(o.pattern, o.dirs, i) for i in range(o.n_shards)]
            for p in paths:
                if not _exists(p):
                    raise ValueError(f"shard {display_name(p)} does not exist "
                                     f"(n_shards={o.n_shards})")
        heads = [_shard_header(p, self.format) for p in paths]
        cids = {h[2] for h in heads} - {None}
        if cids:
            first = next(p for p, h in zip(paths, heads, strict=True) if h[2] is not None)
            for p, h in zip(paths, heads, strict=True):
                if h[2] != heads[0][2]:
                    raise ValueError(
                        f"shard {display_name(p)}: from conversion {h[2] or '(none)'}, but "
                        f"shard {display_name(paths[0])} is from {heads[0][2] or '(none)'}: "
                        f"shards of different conversions, and no manifest "
                        f"{display_name(self.manifest_path)} (the last conversion did not "
                        "finish?)"
                    )
            logger.warning("shards %s .. carry conversion id %s but its manifest %s is missing "
                           "(the conversion did not finish?)", display_name(first), heads[0][2],
                           display_name(self.manifest_path))
        return paths, heads

    def reset(self) -> None:
        self._pass += 1

    def shard_order(self, pass_index: int | None = None) -> np.ndarray:
        """Shard indices in reading order for a pass (the current one by default).

        Parameters
        ----------
        pass_index : int, optional
            The pass (0 for the first); the current pass when omitted.

        Returns
        -------
        numpy.ndarray of int
            A permutation of ``range(n_shards)``: drawn from
            ``default_rng([seed, pass_index])`` with ``order="random"``, the identity otherwise.
        """
        p = self._pass if pass_index is None else pass_index
        n = len(self.paths)
        if self.opts.order == "random":
            return np.random.default_rng([int(self.opts.seed), p]).permutation(n)
        return np.arange(n)

    def _read(self, i, prealloc=None):
        rec = self.manifest["shards"][self.shard_ids[i]] if self.manifest is not None else None
        return read_shard(self.paths[i], self.format, n_features=self.n_features,
                          validate=self.opts.validate, _prealloc=prealloc, _expect=rec)

    def _submit(self, i):
        # When the shard's layout is known (every pass after the first), its arrays are
        # allocated here, in the consumer's thread, and only filled by the reader thread:
        # memory freed by the consumer is then reused by the same malloc arena instead of
        # being trimmed and faulted in again by the reader threads' arenas (measured: ~1.5x).
        layout = _cached_layout(self.paths[i])
        prealloc = _alloc(layout) if layout is not None else None
        return self._pool.submit(self._read, i, prealloc)

    def _blocks(self):
        o = self.opts
        order = self.shard_order()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(o.n_readers, thread_name_prefix="filesource")
        ahead = max(o.lookahead, o.n_readers)
        futs = {}
        try:
            for k in range(len(order)):
                for kk in range(k, min(k + ahead + 1, len(order))):
                    if kk not in futs:
                        futs[kk] = self._submit(int(order[kk]))
                yield futs.pop(k).result()
        finally:
            for f in futs.values():
                f.cancel()

    def _batches(self):
        rb = _Rebatcher(self.opts.batch_size, self.opts.drop_last)
        for X, y, w in self._blocks():
            yield from rb.push(X, y, w)
        yield from rb.finish()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __repr__(self) -> str:
        return (
            f"FileSource({self.opts.pattern!r}, {len(self.paths)} {self.format} shards over "
            f"{max(1, len(self.opts.dirs))} dirs, {self.n_features} features x "
            f"{self.n_examples} examples, batch_size={self.opts.batch_size})"
        )
