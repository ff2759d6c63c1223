"""``random_state=None`` over ``comm=``: one seed per job, agreed by every process (replicas
included), so that a fit's iterates do not depend on which process computes them (issue 32)."""

import functools

import numpy as np
import pytest

from roofline.comm import run
from roofline.glm import fit_glm

N, D = 600, 40


def _data():
    rng = np.random.default_rng(3)
    import scipy.sparse as sp

    X = sp.random(D, N, density=0.2, format="csc", random_state=4)
    y = np.where(X.T @ rng.standard_normal(D) > 0, 1.0, -1.0)
    return X, y


def _fit(comm, solver, random_state=None):
    X, y = _data()
    mine = np.array_split(np.arange(N), comm.size)[comm.rank]
    # a few rounds only: the order of the coordinates still shows in the iterate
    res = fit_glm(X[:, mine], y[mine], loss="logistic", alpha=1e-2, solver=solver, comm=comm,
                  dual=True, max_iter=2, tol=1e-12, random_state=random_state)
    return res.coef


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("solver", ["cocoa", "hcocoa"])
def test_no_random_state_is_one_seed_per_job(solver):
    work = functools.partial(_fit, solver=solver)
    first = run(work, 2, backend="threads", timeout=60)
    second = run(work, 2, backend="threads", timeout=60)
    np.testing.assert_array_equal(first[0], first[1])
    # two jobs on the same data agree too: the seed is the data's, not a process's draw
    np.testing.assert_array_equal(first[0], second[0])
    # and it is a real seed: another seed gives another iterate after two rounds
    other = run(functools.partial(_fit, solver=solver, random_state=12345), 2,
                backend="threads", timeout=60)
    assert not np.array_equal(first[0], other[0])
