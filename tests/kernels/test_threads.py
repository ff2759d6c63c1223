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
