"""Snap ML's streaming pipeline: host chunks to the device, double buffered.

Data larger than device memory is trained on chunk by chunk (Parnell et al., "Large-scale
stochastic learning using GPUs", 2017, and Snap ML's pipelining): while the device works on
chunk ``k``, chunk ``k + 1`` is copied by the host into a *pinned* (page-locked) staging
buffer and from there to the device on a second stream, so that the copy over the link hides
behind the computation.  :class:`DeviceChunkStream` is that pipeline, for any sequence of
chunks, each a tuple of host arrays (the CSC pieces of a block of examples and their
labels, a minibatch, ...):

* ``depth`` slots (2: double buffering), each a pinned host buffer and a device buffer per
  field of the chunk, allocated on first use and grown (never shrunk) when a chunk needs more;
* chunk ``k`` goes to slot ``k % depth``: host copy into the pinned buffer, then an
  asynchronous host-to-device copy on the copy stream, then an event recorded there;
* before chunk ``k`` is handed out the *compute* stream (the default stream, where the
  consumer's kernels and cupy's operations run unless told otherwise) waits on that event:
  the consumer's work on chunk ``k`` is queued after its copy, without the host waiting;
* when the consumer asks for chunk ``k + 1``, an event is recorded on the compute stream (the
  consumer's work on chunk ``k`` is queued by then) and the copy stream waits on it before
  it overwrites slot ``k % depth`` with chunk ``k + depth``.

The copy stream is a non-blocking cupy stream (wrapped for numba) where cupy is present, so
that it runs beside the legacy default stream; numba's own stream otherwise (still correct,
the copies then serialise with the default stream).  Under numba's CUDA simulator streams and
events exist and do nothing (execution is synchronous there), so the simulator tests run
exactly this code.

The device arrays handed out are views into a slot: valid for work queued on the compute
stream before the next-but-``depth - 1`` chunk is requested (with ``depth = 2``: before asking
for the chunk after next); copy them (``copy_to_host``, or a device copy) to keep them.
numba.cuda is imported on first use, never at import time.
"""

from __future__ import annotations

import logging

import numpy as np

from . import _cuda_primitives as _cp

__all__ = ["DeviceChunkStream"]

logger = logging.getLogger(__name__)


def _copy_stream(cuda):
    """``(numba stream, owner)``: a stream that does not synchronise with the legacy default
    stream (cupy's non-blocking stream, wrapped), or numba's own stream where cupy is absent
    or under the simulator; ``owner`` keeps the cupy stream alive."""
    if _cp._simulated():
        return cuda.stream(), None
    try:
        import cupy

        owner = cupy.cuda.Stream(non_blocking=True)
        return cuda.external_stream(owner.ptr), owner
    except Exception:  # pragma: no cover - GPU without cupy
        return cuda.stream(), None


def _event(cuda):
    """An event without timing (the simulator's takes no argument)."""
    return cuda.event() if _cp._simulated() else cuda.event(timing=False)


class DeviceChunkStream:
    """Double-buffered host-to-device copies of a sequence of chunks (see the module notes).

    Parameters
    ----------
    depth : int, default 2
        Slots in flight: 2 is double buffering (one chunk in use, the next being copied).

    Examples
    --------
    ::

        pipe = DeviceChunkStream()
        for k, (indptr, indices, data) in pipe.iterate(host_chunks):
            kernel[blocks, threads](indptr, indices, data, ...)   # default stream
        pipe.close()

    The same object may run several passes (an epoch each); its buffers are reused.
    """

    def __init__(self, depth: int = 2):
        if isinstance(depth, bool) or not isinstance(depth, (int, np.integer)) or depth < 1:
            raise ValueError(f"depth must be an int >= 1, got {depth!r}")
        self.depth = int(depth)
        self._cuda = None
        self._slots = [[] for _ in range(self.depth)]  # per slot: [(pinned, device), ...]
        self._copy = None
        self._owner = None
        self._copied = [None] * self.depth   # event: slot's copy done (on the copy stream)
        self._released = [None] * self.depth  # event: slot's consumer done (compute stream)
        #: bytes copied host -> device so far (every pass)
        self.bytes_copied = 0
        #: chunks handed out so far (every pass)
        self.chunks_done = 0

    # -- setup ------------------------------------------------------------------------------
    def _setup(self):
        if self._cuda is None:
            self._cuda = _cp._cuda()
            self._copy, self._owner = _copy_stream(self._cuda)
        return self._cuda

    def _buffers(self, slot, arrays):
        """The slot's ``(pinned, device)`` pairs, grown to hold ``arrays`` (1-D buffers of
        each field's dtype)."""
        cuda = self._cuda
        bufs = self._slots[slot]
        while len(bufs) < len(arrays):
            bufs.append(None)
        for f, a in enumerate(arrays):
            have = bufs[f]
            if have is not None and have[0].dtype == a.dtype and have[0].size >= a.size:
                continue
            # a buffer freed while queued work may still read it: wait for that work first
            if have is not None and self._released[slot] is not None:
                self._released[slot].synchronize()
            size = max(a.size, 1)
            if have is not None and have[0].dtype == a.dtype:
                size = max(size, int(1.25 * have[0].size))
            bufs[f] = (cuda.pinned_array(size, a.dtype),
                       cuda.device_array(size, a.dtype))
        return bufs

    # -- the pipeline -----------------------------------------------------------------------
    def _issue(self, slot, chunk):
        """Stage ``chunk`` (a tuple of host arrays) into ``slot``: pinned copy on the host,
        asynchronous device copy on the copy stream once the slot's last consumer is done."""
        cuda = self._cuda
        arrays = tuple(np.ascontiguousarray(a) for a in chunk)
        if self._released[slot] is not None:
            # the slot's previous chunk: its pinned buffers were read by a copy that has
            # finished (it was waited on before that chunk was handed out); its device buffers
            # may still be read by queued kernels, which the copy stream waits for
            self._released[slot].wait(self._copy)
        bufs = self._buffers(slot, arrays)
        views = []
        for (pinned, dev), a in zip(bufs[:len(arrays)], arrays, strict=True):
            n = a.size
            flat = a.reshape(-1)
            pinned[:n] = flat
            if n:
                dev[:n].copy_to_device(pinned[:n], stream=self._copy)
                self.bytes_copied += n * a.itemsize
            views.append(dev[:n].reshape(a.shape) if a.ndim != 1 else dev[:n])
        ev = self._copied[slot] or _event(cuda)
        ev.record(self._copy)
        self._copied[slot] = ev
        return tuple(views)

    def iterate(self, chunks):
        """Hand out the chunks on the device, in order, each as soon as its copy is queued
        ahead of the compute stream.

        Parameters
        ----------
        chunks : iterable of tuple of ndarray
            Host arrays (any shape, C-contiguous or not; copied into the pinned buffers).
            An iterable is consumed lazily, ``depth`` chunks ahead of the consumer.

        Yields
        ------
        index : int
            The chunk's position in ``chunks``.
        arrays : tuple of device arrays
            The chunk's arrays on the device (numba device arrays; ``cupy.asarray`` wraps
            them without a copy), valid as described in the module notes.
        """
        cuda = self._setup()
        compute = cuda.default_stream()
        it = iter(chunks)
        pending = {}  # slot -> (index, views)
        nxt = 0
        for k in range(self.depth):  # fill the pipeline
            try:
                c = next(it)
            except StopIteration:
                break
            pending[k % self.depth] = (nxt, self._issue(k % self.depth, c))
            nxt += 1
        k = 0
        while k % self.depth in pending:  # chunk k sits in slot k % depth
            slot = k % self.depth
            index, views = pending.pop(slot)
            self._copied[slot].wait(compute)  # the consumer's work queued after the copy
            self.chunks_done += 1
            yield index, views
            # the consumer's work on this chunk is queued: the slot is free once it has run
            ev = self._released[slot] or _event(cuda)
            ev.record(compute)
            self._released[slot] = ev
            try:
                c = next(it)
            except StopIteration:
                c = None
            if c is not None:
                # the pinned buffer of this slot was read by a copy the compute stream has
                # waited for; the host must know it finished before overwriting it
                self._copied[slot].synchronize()
                pending[slot] = (nxt, self._issue(slot, c))
                nxt += 1
            k += 1

    def synchronize(self):
        """Wait until every copy issued and all the default stream's work have finished."""
        if self._cuda is not None:
            self._copy.synchronize()
            self._cuda.default_stream().synchronize()

    def close(self):
        """Free the pinned and device buffers (after the queued work has finished)."""
        self.synchronize()
        self._slots = [[] for _ in range(self.depth)]
        self._copied = [None] * self.depth
        self._released = [None] * self.depth

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
