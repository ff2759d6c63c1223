"""A buffer cache for minibatch loops: outputs are reused, keyed by shape/dtype/order/device/tag.

A steady-state training loop asks the cache for the same buffers every step and allocates
nothing after the first step; ``n_allocations`` counts real allocations so tests can check it.
"""

from __future__ import annotations

import logging
import threading

import numpy as np

from ._arrays import aligned_alloc, device_of

__all__ = ["BufferCache", "default_cache"]

logger = logging.getLogger(__name__)


class BufferCache:
    """Reusable output buffers.

    A buffer is identified by ``(tag, shape, dtype, order, device)``; asking twice for the same
    key returns the same array (its contents are whatever the last user left there).  Use
    distinct tags for buffers that must be alive at the same time.

    Parameters
    ----------
    max_bytes : int or None
        Soft limit on the cached bytes; when exceeded, the least recently used buffers are
        dropped (``None``: no limit).

    Examples
    --------
    >>> cache = BufferCache()
    >>> a = cache.empty((4, 3), np.float32, tag="pred")
    >>> b = cache.empty((4, 3), np.float32, tag="pred")
    >>> a is b, cache.n_allocations
    (True, 1)
    """

    def __init__(self, max_bytes: int | None = None):
        self.max_bytes = max_bytes
        self._buffers: dict = {}
        self._lock = threading.Lock()
        self.n_allocations = 0
        self.n_hits = 0

    def empty(self, shape, dtype, *, tag="", order="C", like=None):
        """Return a cached uninitialised buffer (allocated on first request).

        Parameters
        ----------
        shape : tuple of int
        dtype : dtype
        tag : hashable
            Distinguishes buffers of the same shape that are live at the same time.
        order : {"C", "F"}
        like : array, optional
            Allocate on the same device (numpy or cupy) as ``like``; CPU when omitted.
            Buffers start on a 64-byte cache-line boundary.

        Returns
        -------
        numpy.ndarray or cupy.ndarray
            The buffer for this (tag, shape, dtype, order, device): the same object as the
            previous request with that key while it is cached, with whatever it holds.
        """
        device = "cpu" if like is None else device_of(like)
        shape = tuple(int(s) for s in (shape if np.iterable(shape) else (shape,)))
        dtype = np.dtype(dtype)
        key = (tag, shape, dtype.str, order, device)
        with self._lock:
            buf = self._buffers.pop(key, None)
            if buf is not None:
                self._buffers[key] = buf  # move to most-recently-used position
                self.n_hits += 1
                return buf
            buf = aligned_alloc(shape, dtype, order=order, device=device)
            self.n_allocations += 1
            self._buffers[key] = buf
            logger.debug("BufferCache: allocated %s %s %s tag=%r", shape, dtype, order, tag)
            self._evict()
            return buf

    def zeros(self, shape, dtype, *, tag="", order="C", like=None):
        """Like :meth:`empty`, filled with zeros.

        Parameters
        ----------
        shape : tuple of int
        dtype : dtype
        tag : hashable
            Distinguishes buffers of the same shape that are live at the same time.
        order : {"C", "F"}
        like : array, optional
            Allocate on the same device (numpy or cupy) as ``like``; CPU when omitted.

        Returns
        -------
        numpy.ndarray or cupy.ndarray
            The cached buffer for this key, zero-filled on every call.
        """
        buf = self.empty(shape, dtype, tag=tag, order=order, like=like)
        buf.fill(0)
        return buf

    @property
    def nbytes(self) -> int:
        """Bytes currently held."""
        return sum(int(b.nbytes) for b in self._buffers.values())

    def _evict(self):
        if self.max_bytes is None:
            return
        while len(self._buffers) > 1 and self.nbytes > self.max_bytes:
            key = next(iter(self._buffers))
            del self._buffers[key]

    def clear(self):
        """Drop every buffer (counters are kept)."""
        with self._lock:
            self._buffers.clear()

    def __len__(self):
        return len(self._buffers)

    def __repr__(self):
        return (
            f"BufferCache({len(self)} buffers, {self.nbytes / 2**20:.1f} MiB, "
            f"allocations={self.n_allocations}, hits={self.n_hits})"
        )


_local = threading.local()


def default_cache() -> BufferCache:
    """The calling thread's cache, used when a primitive is called with ``cache=True``.

    One per thread (created on first use, dropped with the thread): two threads calling a
    primitive with ``cache=True`` and the same tag get different buffers, so concurrent
    minibatch loops never overwrite each other's results.  A :class:`BufferCache` passed
    explicitly is shared by whoever holds it (use distinct tags per thread).

    Returns
    -------
    BufferCache
        This thread's cache.
    """
    cache = getattr(_local, "cache", None)
    if cache is None:
        cache = _local.cache = BufferCache()
    return cache
