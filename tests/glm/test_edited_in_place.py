"""Issue 32, item 4: a matrix that an earlier fit validated and that was then edited in place
(an index or a column pointer the validation's fingerprint sample does not see) is validated
again by the next fit: a ``ValueError`` naming ``X``, never a segmentation fault.  Each solver
runs in a fresh interpreter, so that a crash fails the test instead of killing pytest."""

import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = """
import numpy as np, scipy.sparse as sp
from roofline.glm import fit_glm

rng = np.random.default_rng(0)
d, n = 20, 3000  # nnz ~ 30,000: the fingerprint samples every ~470th index
A = rng.standard_normal((d, n)) * (rng.random((d, n)) < 0.5)
y = np.where(A[0] + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0)
loss = "squared" if {solver!r} == "cholesky" else "logistic"
kw = dict(loss=loss, alpha=1e-2, solver={solver!r}, max_iter=5, tol=1e-3, **{kw!r})

def edit_index(X):
    X.indices[1] = 10**9  # off the fingerprint's sample (positions 0, 470, ...)

def edit_indptr(X):
    X.indptr[1] = X.indptr[3] + 5  # not non-decreasing; off the sample too

import warnings
warnings.simplefilter("ignore")
for edit in (edit_index, edit_indptr):
    X = sp.csc_matrix(A)
    fit_glm(X, y, **kw)  # validates X (and remembers it)
    edit(X)
    try:
        fit_glm(X, y, **kw)
    except ValueError as e:
        assert "X" in str(e), str(e)
        print(edit.__name__, "ValueError:", e)
    else:
        raise SystemExit(f"{{edit.__name__}}: no error")
"""

SOLVERS = [
    ("scd", {"dual": True}),
    ("scd", {"dual": False}),
    ("tpa-scd", {"n_jobs": 2, "tpa_mode": "replica"}),
    ("cocoa", {"n_workers": 2, "dual": True}),
    ("hcocoa", {"n_workers": 2, "n_nodes": 1, "dual": True}),
    ("pure-block", {"n_workers": 2, "blocks": list(range(20))}),
    ("newton", {}),
    ("cholesky", {}),
]


@pytest.mark.parametrize("solver,kw", SOLVERS, ids=[f"{s}-{i}" for i, (s, _) in
                                                     enumerate(SOLVERS)])
def test_an_edit_after_a_fit_is_a_value_error_not_a_crash(solver, kw):
    code = textwrap.dedent(SCRIPT.format(solver=solver, kw=kw))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert r.returncode == 0, (f"exit {r.returncode} (negative: killed by a signal)\n"
                               f"{r.stdout}\n{r.stderr[-3000:]}")
    assert r.stdout.count("ValueError") == 2, r.stdout
