"""kernels/_threads.py: parallel kernels make idle OpenMP workers sleep, unless the user chose,
set before numba starts its pool (checked in fresh interpreters)."""

import os
import subprocess
import sys

import pytest

_SCRIPT = """
import os
import numpy as np
import scipy.sparse as sp
from roofline import glm, gmat, kernels
imported = os.environ.get("OMP_WAIT_POLICY")
X = sp.random(300, 2000, density=0.3, format="csc", random_state=0)
glm.cd.matvec(X, np.ones(300))  # 2^17+ values: the parallel kernel
import numba
print(imported, os.environ.get("OMP_WAIT_POLICY"), numba.threading_layer())
"""


@pytest.mark.parametrize("user", [None, "ACTIVE"])
def test_parallel_kernels_quiet_openmp_unless_the_user_chose(user):
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if user is not None:
        env["OMP_WAIT_POLICY"] = user
    out = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True,
                         text=True, timeout=300, check=True).stdout.split()
    imported, after, layer = out
    if user is None:
        assert imported == "None", "importing roofline changes no environment"
        assert after == "PASSIVE"
    else:
        assert imported == after == user
    assert layer in ("omp", "tbb", "workqueue")


def test_a_parallel_kernel_keeps_the_dispatcher_surface():
    from roofline import kernels

    k = kernels.cd_matvec
    assert k.__name__ == "cd_matvec" and "parallel over columns" in k.__doc__
    assert k.py_func is k._dispatcher.py_func and "parallel kernel cd_matvec" in repr(k)


def _blas_threads():
    from threadpoolctl import threadpool_info

    return sorted({p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"})


def test_limit_blas_threads_caps_the_pool_and_restores_it():
    import numpy as np  # noqa: F401  (loads the BLAS threadpoolctl reports)
    from threadpoolctl import threadpool_limits

    from roofline.kernels import limit_blas_threads

    with threadpool_limits(limits=2, user_api="blas"):  # a known start, whatever the machine
        assert _blas_threads() == [2]
        with limit_blas_threads(1):
            assert _blas_threads() == [1]
            with limit_blas_threads(2):  # nested: the first block's limit holds
                assert _blas_threads() == [1]
            assert _blas_threads() == [1]
        assert _blas_threads() == [2]
        with limit_blas_threads(None):
            assert _blas_threads() == [2]


def test_limit_blas_threads_from_threads_restores_when_the_last_block_ends():
    """Blocks entered and left in crossed order by two threads (the ranks of an in-process
    communicator) leave the pools as they found them."""
    import threading

    from roofline.kernels import limit_blas_threads

    before = _blas_threads()
    inside, release = threading.Barrier(3), [threading.Event(), threading.Event()]
    done = []

    def rank(i):
        with limit_blas_threads(1):
            inside.wait(timeout=30)
            release[i].wait(timeout=30)
        done.append(i)

    ts = [threading.Thread(target=rank, args=(i,)) for i in range(2)]
    for t in ts:
        t.start()
    inside.wait(timeout=30)
    release[0].set()  # the first block to start ends first
    ts[0].join(timeout=30)
    release[1].set()
    ts[1].join(timeout=30)
    assert done == [0, 1]
    assert _blas_threads() == before
