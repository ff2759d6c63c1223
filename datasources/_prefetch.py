"""Background prefetch: a worker thread fills a bounded queue with the next minibatches.

The sources' heavy work (numba parsing, hashing, decompression, file reads) releases the GIL, so
one worker thread overlaps it with the consumer's training step.
"""

from __future__ import annotations

import logging
import queue
import sys
import threading
from dataclasses import dataclass

from roofline.gmat import Options, option

from ._base import register_stage
from ._stages import Stage

__all__ = ["Prefetch", "PrefetchOptions", "background"]

logger = logging.getLogger(__name__)

_ITEM, _END, _ERR = 0, 1, 2
_POLL = 0.05


def background(make_iter, depth, what, item="item", active=None):
    """Run the iterator ``make_iter()`` on a worker thread, ``depth`` items ahead; yield its
    items in order.

    An exception in the worker is re-raised here (the same object, with a note naming
    ``item`` number and ``what``).  Closing this generator stops and joins the worker.
    ``active`` (a list) receives ``(thread, stop_event)`` while the worker runs.
    """
    q = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(x):
        while not stop.is_set():
            try:
                q.put(x, timeout=_POLL)
                return True
            except queue.Full:
                continue
        return False

    def work():
        i = 0
        it = None
        try:
            it = make_iter()
            for x in it:
                if not put((_ITEM, x)):
                    return
                i += 1
            put((_END, None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            put((_ERR, (exc, i)))
        finally:
            if it is not None and hasattr(it, "close"):
                it.close()

    t = threading.Thread(target=work, name="roofline-prefetch", daemon=True)
    if active is not None:
        active.append((t, stop))
    t.start()
    try:
        while True:
            try:
                kind, payload = q.get(timeout=_POLL)
            except queue.Empty:
                if not t.is_alive() and q.empty():
                    raise RuntimeError(
                        f"prefetch worker of {what} ended without a result"
                    ) from None
                continue
            if kind == _END:
                return
            if kind == _ERR:
                exc, i = payload
                if sys.version_info >= (3, 11):
                    exc.add_note(f"(raised in the prefetch thread while producing {item} {i} of "
                                 f"{what})")
                raise exc
            yield payload
    finally:
        stop.set()
        while True:  # unblock a worker waiting on a full queue
            try:
                q.get_nowait()
            except queue.Empty:
                break
        t.join(timeout=30)
        if t.is_alive():  # pragma: no cover - a source stuck in I/O
            logger.warning("prefetch worker still running 30 s after stop (blocked in I/O?)")
        if active is not None and (t, stop) in active:
            active.remove((t, stop))


@dataclass
class PrefetchOptions(Options):
    """``depth``: minibatches produced ahead of the consumer (the queue bound)."""

    depth: int = option(2, "minibatches produced ahead of the consumer (the queue bound)", low=1)


@register_stage
class Prefetch(Stage):
    """Produce the minibatches of ``source`` on a background thread, ``depth`` ahead.

    * Order is preserved (one producer, FIFO queue): the stream equals the unprefetched one.
    * An exception in the worker is re-raised in the consumer: the *same* exception object
      (same type and message, its traceback showing where the worker raised), with a note
      saying which minibatch was being produced.
    * Stopping early (``break``, closing the iterator, :meth:`close`) stops and joins the
      worker; nothing blocks forever (all queue operations poll a stop flag).

    Parameters
    ----------
    source : DataSource
    depth : int
        Queue bound: at most ``depth`` minibatches wait, plus one being produced.
    """

    def __init__(self, source, *, depth=2):
        super().__init__(source)
        self.opts = PrefetchOptions(depth=depth)
        self.n_examples = source.n_examples
        self._active = []  # (thread, stop event) of running passes

    def _batches(self):
        source = self.source
        yield from background(lambda: iter(source), self.opts.depth, repr(source), "minibatch",
                              self._active)

    def close(self) -> None:
        for t, stop in list(self._active):
            stop.set()
            t.join(timeout=30)
        self._active.clear()
        super().close()
