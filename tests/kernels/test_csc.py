"""Work partitioning of the CSC kernels: nnz-balanced column chunks and row slabs."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roofline import gmat, kernels


@settings(max_examples=50, deadline=None)
@given(lengths=st.lists(st.integers(0, 50), min_size=1, max_size=60), n_chunks=st.integers(1, 9))
def test_nnz_chunks_cover_columns_in_order(lengths, n_chunks):
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    b = kernels.nnz_chunks(indptr, n_chunks)
    assert b[0] == 0 and b[-1] == len(lengths) and len(b) == n_chunks + 1
    assert np.all(np.diff(b) >= 0)
    # each chunk holds at most its share plus one column
    nnz = indptr[-1]
    per = indptr[b[1:]] - indptr[b[:-1]]
    assert per.sum() == nnz
    assert per.max() <= nnz / n_chunks + max(lengths) + 1


def test_nnz_chunks_balance_powerlaw_columns():
    S = gmat.powerlaw_csc(10_000, 5_000, 20, random_state=0)
    b = kernels.nnz_chunks(S.indptr, 16)
    per = S.indptr[b[1:]] - S.indptr[b[:-1]]
    assert per.max() < 1.5 * S.nnz / 16  # equal nnz, not equal column counts


@pytest.mark.parametrize("n_slabs", [1, 2, 3, 8])
def test_row_slabs_partition_rows(n_slabs):
    S = gmat.powerlaw_csc(10_000, 3_000, 20, permute_features=False, random_state=0)
    s = kernels.row_slabs(S.indices, S.nnz, S.shape[0], n_slabs)
    assert s[0] == 0 and s[-1] == S.shape[0] and np.all(np.diff(s) >= 0)
    if n_slabs > 1:
        counts = np.histogram(S.indices, bins=s)[0]
        # hot features at low indices: equal-row slabs would be very unbalanced
        assert counts.max() < 1.5 * S.nnz / n_slabs


def test_count_distinct_rows():
    idx = np.array([3, 1, 3, 0, 9, 1], dtype=np.int32)
    assert kernels.count_distinct_rows(idx, 6, 10) == 4
    assert kernels.count_distinct_rows(idx, 2, 10) == 2


def test_check_csc_structure_codes():
    indptr = np.array([0, 2, 3], dtype=np.int32)
    data = np.ones(3)
    assert kernels.check_csc_structure(indptr, np.array([0, 2, 1], np.int32), data, 3, True)[0] == 0
    assert kernels.check_csc_structure(indptr, np.array([2, 0, 1], np.int32), data, 3, True)[0] == 3
    assert kernels.check_csc_structure(indptr, np.array([0, 3, 1], np.int32), data, 3, True)[0] == 2
    bad = np.array([0, 2, 1], dtype=np.int32)
    assert kernels.check_csc_structure(bad, np.array([0, 1, 1], np.int32), data, 3, True)[0] == 1
    nan = np.array([1.0, np.nan, 1.0])
    code = kernels.check_csc_structure(indptr, np.array([0, 2, 1], np.int32), nan, 3, True)
    assert tuple(code) == (4, 0, 1)
    assert kernels.check_csc_structure(indptr, np.array([0, 2, 1], np.int32), nan, 3, False)[0] == 0


def test_fma_loop_and_stream_kernels_compute_the_right_thing():
    a = np.empty(1000)
    b = np.arange(1000.0)
    c = np.ones(1000)
    kernels.stream_triad(a, b, c, 2.0, 3)
    np.testing.assert_array_equal(a, b + 2.0)
    assert kernels.stream_read(b, 4) == pytest.approx(b.sum())
    out, flops = kernels.fma_loop(np.ones(2, np.float32), 10)
    assert flops == 2 * 8 * 64 * 10 * 2 and out.shape == (2,) and np.all(np.isfinite(out))


def test_limit_threads_restores_and_is_per_thread():
    import threading

    import numba

    from roofline import kernels

    before = numba.get_num_threads()
    with kernels.limit_threads(1) as n:
        assert n == 1 == numba.get_num_threads()
        seen = []
        t = threading.Thread(target=lambda: seen.append(numba.get_num_threads()))
        t.start()
        t.join()
        assert seen == [numba.config.NUMBA_NUM_THREADS]  # other threads keep their setting
    assert numba.get_num_threads() == before
    with pytest.raises(RuntimeError), kernels.limit_threads(1):
        raise RuntimeError("restored on the way out")
    assert numba.get_num_threads() == before
    with kernels.limit_threads(None) as n:  # None and limits above the current count: no-op
        assert n == before
    with kernels.limit_threads(before + 5) as n:
        assert n == before
