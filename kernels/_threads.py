"""How numba's OpenMP workers wait between the parallel kernels.

GNU OpenMP's workers spin for a while after each parallel region (``OMP_WAIT_POLICY``
unset), and on a machine with few cores they take the core that the main thread's next
OpenBLAS call or serial kernel needs: measured on a 2-core VM, a parallel ``cd.matvec`` of
0.24 ms followed by a 50,000-entry ``v @ v`` took 8 ms instead of 0.33 ms, and a dual SCD fit
of a 5,000 x 50,001 text-like problem 0.088 s instead of 0.020 s.  :func:`parallel_njit`
compiles a kernel as ``numba.njit(parallel=True)`` whose first call from Python (before numba
starts its OpenMP pool) sets ``OMP_WAIT_POLICY=PASSIVE`` in this process's environment unless
the user has set it: idle workers then sleep (waking one costs microseconds; the parallel
kernels run only on work of 2^17 values and more).  A user's own setting, ``ACTIVE``
included, wins; an OpenMP runtime already started keeps its policy.

OpenBLAS's threads spin the same way after each call, and a distributed fit runs one process
per rank: two ranks on a 2-core VM, each calling a two-thread ``ddot`` on 50,000 values in
every conjugate-gradient step, took 2.7 s for a Newton fit that takes 0.58 s with one BLAS
thread per rank.  :func:`limit_blas_threads` caps the BLAS pools (threadpoolctl) for the span
of such a fit.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading

from numba import njit

__all__ = ["limit_blas_threads", "parallel_njit", "quiet_openmp"]

_quieted = False


def quiet_openmp():
    """Set ``OMP_WAIT_POLICY=PASSIVE`` unless it is set (once; call before numba's OpenMP pool
    starts: before the first parallel kernel and ``numba.get_num_threads``)."""
    global _quieted
    if not _quieted:
        _quieted = True
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


class _ParallelKernel:
    """A numba parallel dispatcher whose calls first run :func:`quiet_openmp`; every other
    attribute is the dispatcher's."""

    def __init__(self, dispatcher):
        self._dispatcher = dispatcher
        functools.update_wrapper(self, dispatcher.py_func)

    def __call__(self, *args):
        if not _quieted:
            quiet_openmp()
        return self._dispatcher(*args)

    def __getattr__(self, name):
        return getattr(self._dispatcher, name)

    def __repr__(self):
        return f"<parallel kernel {self.__name__}>"


def parallel_njit(**flags):
    """``numba.njit(parallel=True, **flags)`` behind :func:`quiet_openmp` (module docstring).

    Returns
    -------
    callable
        A decorator; the kernel it makes is called from Python only (not from other kernels).
    """

    def decorate(fn):
        return _ParallelKernel(njit(parallel=True, **flags)(fn))

    return decorate


_blas_lock = threading.Lock()
_blas_state = {"depth": 0, "limiter": None}


@contextlib.contextmanager
def limit_blas_threads(n: int | None):
    """Run the BLAS calls (numpy's and scipy's OpenBLAS / MKL) inside the block on at most
    ``n`` threads.

    The BLAS pools are process-wide: nested or concurrent blocks (the ranks of an in-process
    communicator are threads of one process) share the first block's limit, and the original
    settings come back when the last block ends.  ``None`` changes nothing.
    """
    if n is None:
        yield
        return
    from threadpoolctl import ThreadpoolController

    with _blas_lock:
        if _blas_state["depth"] == 0:
            _blas_state["limiter"] = ThreadpoolController().limit(
                limits=max(1, int(n)), user_api="blas")
        _blas_state["depth"] += 1
    try:
        yield
    finally:
        with _blas_lock:
            _blas_state["depth"] -= 1
            if _blas_state["depth"] == 0:
                _blas_state["limiter"].restore_original_limits()
                _blas_state["limiter"] = None
