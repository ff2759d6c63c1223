"""Faults at the gmat boundary (issue 22): in-place edits after validation, threads sharing
``cache=True``, ``out=`` aliasing an input, read-only and byte-swapped operands.

Anything that crashed the interpreter before runs in a subprocess, so that a regression fails
one test instead of killing the run.
"""

import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
import scipy.sparse as sp

from roofline import gmat

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(code: str, timeout: float = 300):
    """Run ``code`` in a fresh interpreter (same environment and ``roofline``); returns
    ``(returncode, stdout + stderr)``."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
        timeout=timeout, cwd=ROOT, env=dict(os.environ),
    )
    return proc.returncode, proc.stdout + proc.stderr


_PRELUDE = """
import numpy as np
from roofline import gmat
S = gmat.powerlaw_csc(2000, 300, 12, random_state=0)
A1 = np.ones(2000, np.float32)
A4 = np.asfortranarray(np.ones((4, 2000), np.float32))
P1 = np.ones(300, np.float32)
P4 = np.asfortranarray(np.ones((4, 300), np.float32))
CALLS = {
    "mult_as k=1": lambda: gmat.mult_as(A1, S),
    "mult_as k=4": lambda: gmat.mult_as(A4, S),
    "mult_ast k=1": lambda: gmat.mult_ast(P1, S),
    "mult_ast k=4": lambda: gmat.mult_ast(P4, S),
    "mult_ast k=64": lambda: gmat.mult_ast(np.asfortranarray(np.ones((64, 300), np.float32)), S),
    "sddmm k=1": lambda: gmat.sddmm(S, A1, P1),
    "sddmm k=4": lambda: gmat.sddmm(S, A4, P4),
}
def report(edit):
    for name, call in CALLS.items():
        call()  # validates S and marks it
        saved = (S.indptr.copy(), S.indices.copy())
        edit()
        try:
            call()
            print(name, "NO ERROR")
        except ValueError as exc:
            print(name, "ValueError", str(exc).splitlines()[0][:120])
        S.indptr[:], S.indices[:] = saved
"""


def test_whole_indices_edit_after_validation_is_an_error_not_a_segfault():
    rc, out = _run(_PRELUDE + """
def edit():
    S.indices[:] = 2**30
report(edit)
""")
    assert rc == 0, out[-2000:]
    lines = [ln for ln in out.splitlines() if ln.startswith(("mult", "sddmm"))]
    assert len(lines) == 7, out[-2000:]
    for ln in lines:
        assert "ValueError" in ln and "out of range" in ln, ln


def test_partial_indices_edit_off_the_sample_is_an_error_not_a_crash():
    """A few entries changed between the fingerprint's sample points: the kernels see them."""
    rc, out = _run(_PRELUDE + """
nnz = S.nnz
step = max(1, nnz // 64)
pos = np.array([step // 2 + 1, nnz // 2 + step // 2 + 1, nnz - 2])
assert all(p % step for p in pos)
def edit():
    S.indices[pos] = [2**30, -7, 2000]
report(edit)
""")
    assert rc == 0, out[-2000:]
    lines = [ln for ln in out.splitlines() if ln.startswith(("mult", "sddmm"))]
    assert len(lines) == 7, out[-2000:]
    for ln in lines:
        assert "ValueError" in ln and "out of range" in ln, ln


def test_indptr_edits_after_validation_are_errors_not_crashes():
    rc, out = _run(_PRELUDE + """
def end():
    S.indptr[-1] = 2**30
def inner():
    S.indptr[150] = 2**30
def backwards():
    S.indptr[151] = 0
for edit in (end, inner, backwards):
    report(edit)
""")
    assert rc == 0, out[-2000:]
    lines = [ln for ln in out.splitlines() if ln.startswith(("mult", "sddmm"))]
    assert len(lines) == 21, out[-2000:]
    for ln in lines:
        assert "ValueError" in ln, ln


def test_valid_inplace_edit_is_revalidated_and_used(dtype):
    rng = np.random.default_rng(0)
    S = gmat.powerlaw_csc(500, 80, 6, dtype=dtype, random_state=1)
    A = np.asfortranarray(rng.standard_normal((3, 500)).astype(dtype))
    gmat.mult_as(A, S)
    # a new structure with the same arrays: every column's rows shifted down (still sorted)
    shift = 500 - int(S.indices.max()) - 1
    S.indices[:] += shift
    mark = S._roofline_checked
    np.testing.assert_allclose(gmat.mult_as(A, S), A @ S.toarray(), rtol=1e-4, atol=1e-4)
    assert S._roofline_checked != mark  # re-validated: a new fingerprint


def test_check_csc_sees_whole_array_edit_without_force():
    S = gmat.powerlaw_csc(300, 40, 5, random_state=2)
    gmat.check_csc(S)
    S.indices[:] = 300
    with pytest.raises(ValueError, match=r"S.indices\[0\] = 300 is out of range"):
        gmat.check_csc(S)


def _lockstep(barrier, fn):
    """Run ``fn(i)`` for i = 0, 1 on two threads in lockstep (the barrier orders them)."""
    errors = []

    def body(i):
        try:
            fn(i)
        except Exception as exc:  # reported by the main thread
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=body, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    if errors:
        raise errors[0]


def test_cache_true_buffers_are_per_thread():
    S = gmat.powerlaw_csc(400, 60, 5, random_state=3)
    A = [np.full((2, 400), v, np.float32, order="F") for v in (1.0, -3.0)]
    ref = [a @ S.toarray() for a in A]
    barrier = threading.Barrier(2, timeout=30)
    results = [None, None]

    def fn(i):
        if i == 0:
            results[0] = gmat.mult_as(A[0], S, cache=True, tag="faults")
            barrier.wait()  # thread 1 computes now
            barrier.wait()
        else:
            barrier.wait()
            results[1] = gmat.mult_as(A[1], S, cache=True, tag="faults")
            barrier.wait()

    _lockstep(barrier, fn)
    assert results[0] is not results[1]
    np.testing.assert_allclose(results[0], ref[0], rtol=1e-5)
    np.testing.assert_allclose(results[1], ref[1], rtol=1e-5)


def test_cache_true_many_threads_all_correct():
    S = gmat.powerlaw_csc(400, 60, 5, random_state=4)
    D = S.toarray()
    wrong = []

    def work(v):
        a = np.full((3, 400), v, np.float32, order="F")
        for _ in range(20):
            r = gmat.mult_as(a, S, cache=True, tag="faults-many")
            if not np.allclose(r, a @ D, rtol=1e-5):
                wrong.append(v)

    threads = [threading.Thread(target=work, args=(float(v),)) for v in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert wrong == []


def _square(dtype, seed=5):
    return gmat.powerlaw_csc(200, 200, 6, dtype=dtype, random_state=seed)


@pytest.mark.parametrize("k", [1, 4])
def test_out_aliasing_input_mult_as(dtype, k):
    rng = np.random.default_rng(k)
    S = _square(dtype)
    A = rng.standard_normal((k, 200)).astype(dtype)
    A = np.asfortranarray(A) if k > 1 else A.reshape(-1)
    ref = (A.reshape(k, -1) @ S.toarray()).reshape(A.shape)
    res = gmat.mult_as(A, S, out=A)
    assert res is A
    np.testing.assert_allclose(A, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("k", [1, 4])
def test_out_aliasing_input_mult_ast(dtype, k):
    rng = np.random.default_rng(k + 10)
    S = _square(dtype, seed=6)
    A = rng.standard_normal((k, 200)).astype(dtype)
    A = np.asfortranarray(A) if k > 1 else A.reshape(-1)
    ref = (A.reshape(k, -1) @ S.toarray().T).reshape(A.shape)
    res = gmat.mult_ast(A, S, out=A)
    assert res is A
    np.testing.assert_allclose(A, ref, rtol=1e-4, atol=1e-4)


def test_out_aliasing_input_sddmm(dtype):
    rng = np.random.default_rng(7)
    n = 300
    perm = rng.permutation(n)
    S = sp.csc_matrix((rng.standard_normal(n).astype(dtype), (perm, np.arange(n))), (n, n))
    a = rng.standard_normal(n).astype(dtype)
    b = rng.standard_normal(n).astype(dtype)
    ref = a[S.indices] * b * S.data  # one nonzero per column, in column order
    C = gmat.sddmm(S, a, b, out=a)
    assert C.data is a
    np.testing.assert_allclose(a, ref, rtol=1e-5)


def test_out_partially_overlapping_input():
    rng = np.random.default_rng(8)
    S = _square(np.float64, seed=9)
    buf = np.asfortranarray(rng.standard_normal((3, 400)))
    A = buf[:, :200]
    out = buf[:, 100:300]  # overlaps the second half of A
    ref = A @ S.toarray()
    gmat.mult_as(A, S, out=out)
    np.testing.assert_allclose(out, ref, rtol=1e-10)


@pytest.mark.parametrize("prim", ["mult_as", "mult_ast", "sddmm"])
def test_read_only_out_names_out(prim):
    S = _square(np.float32)
    A = np.ones((2, 200), np.float32, order="F")
    out = np.zeros(S.nnz if prim == "sddmm" else (2, 200), np.float32, order="F")
    out.flags.writeable = False
    call = {"mult_as": lambda: gmat.mult_as(A, S, out=out),
            "mult_ast": lambda: gmat.mult_ast(A, S, out=out),
            "sddmm": lambda: gmat.sddmm(S, A, A, out=out)}[prim]
    with pytest.raises(ValueError, match="out is read-only"):
        call()
    assert not out.any()


def test_big_endian_float32_names_the_byte_order():
    S = _square(np.float32)
    A = np.ones((2, 200), ">f4")
    with pytest.raises(TypeError, match=r"A has big-endian float32 \('>f4'\).*A\.astype\('<f4'\)"):
        gmat.mult_as(A, S)
    Sb = S.copy()
    Sb.data = Sb.data.astype(">f4")
    with pytest.raises(TypeError, match=r"S has big-endian float32.*byte order"):
        gmat.check_csc(Sb)
    Sb = S.copy()
    Sb.indices = Sb.indices.astype(">i4")
    with pytest.raises(TypeError, match=r"S.indices has dtype >i4.*byte order"):
        gmat.check_csc(Sb)
