"""Cost models: compulsory bytes and flops, counted by hand on small matrices."""

import dataclasses

import numpy as np
import pytest
import scipy.sparse as sp

from roofline import gmat


@pytest.fixture
def small():
    # 5 features x 4 examples; rows 0 and 3 empty... rows used: 1, 2, 4; column 2 empty.
    dense = np.array(
        [
            [0, 0, 0, 0],
            [1, 0, 0, 2],
            [3, 4, 0, 0],
            [0, 0, 0, 0],
            [0, 5, 0, 6],
        ],
        dtype=np.float32,
    )
    return sp.csc_matrix(dense)


def test_cost_mult_as(small):
    c = gmat.cost_mult_as(small, 16)
    nnz = 6
    sparse = 5 * 4 + nnz * (4 + 4)  # indptr (m+1 int32) + indices + values
    assert c.breakdown == {"sparse": sparse, "dense_in": 3 * 16 * 4, "out": 16 * 4 * 4}
    assert c.bytes == sum(c.breakdown.values())
    assert c.flops == 2 * 16 * nnz and c.nnz == nnz and c.k == 16


def test_cost_mult_ast(small):
    c = gmat.cost_mult_ast(small, 2)
    assert c.breakdown["dense_in"] == 3 * 2 * 4  # three non-empty columns of A
    assert c.breakdown["out"] == 2 * 5 * 4  # every output element written, empty rows too
    assert c.flops == 2 * 2 * 6


def test_cost_sddmm(small):
    c = gmat.cost_sddmm(small, 8)
    assert c.breakdown["dense_in"] == (3 + 3) * 8 * 4
    assert c.breakdown["out"] == 6 * 4
    assert c.flops == 2 * 8 * 6 + 6
    c2 = gmat.cost_sddmm(small, 8, scale=False)
    assert c2.breakdown["sparse"] == c.breakdown["sparse"] - 6 * 4  # values not read
    assert c2.flops == 2 * 8 * 6


def test_float64_doubles_dense_bytes(small):
    c32 = gmat.cost_mult_as(small, 4)
    c64 = gmat.cost_mult_as(small.astype(np.float64), 4)
    assert c64.breakdown["dense_in"] == 2 * c32.breakdown["dense_in"]
    assert c64.breakdown["sparse"] == c32.breakdown["sparse"] + 6 * 4


def test_roofline_time_is_max_of_memory_and_compute(small):
    m = gmat.MachineRoofline(bandwidth=1e9, triad_bandwidth=1e9, read_bandwidth=8e8,
                             flops32=1e9, flops64=5e8, threads=1)
    c = gmat.cost_mult_as(small, 16)
    assert c.roofline_time(m) == pytest.approx(max(c.bytes / 1e9, c.flops / 1e9))
    big_k = gmat.cost_mult_as(small, 4096)
    assert big_k.roofline_time(m) == pytest.approx(big_k.bytes / 1e9)
    fast_mem = dataclasses.replace(m, bandwidth=1e15)
    assert c.roofline_time(fast_mem) == pytest.approx(c.flops / 1e9)
    assert c.fraction(2 * c.roofline_time(m), m) == pytest.approx(0.5)
    assert c.bidmach_time(m) == pytest.approx(c.flops / (1e9 / 4))
    assert "A*S k=16 float32" in str(c)


def test_distinct_rows_on_powerlaw(powerlaw):
    c = gmat.cost_mult_as(powerlaw, 1)
    distinct = len(np.unique(powerlaw.indices))
    assert c.breakdown["dense_in"] == distinct * powerlaw.dtype.itemsize
