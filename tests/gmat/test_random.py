"""The power-law test matrices of gmat/_random.py."""

import numpy as np
import pytest

from roofline import gmat


def test_powerlaw_csc_properties():
    S = gmat.powerlaw_csc(5000, 2000, 20, random_state=3)
    T = gmat.powerlaw_csc(5000, 2000, 20, random_state=3)
    assert (S != T).nnz == 0  # deterministic for a seed
    assert S.has_canonical_format
    assert S.dtype == np.float32 and S.indices.dtype == np.int32
    assert 14 < S.nnz / S.shape[1] <= 20  # mean close to the target (duplicates merged)
    counts = np.sort(np.bincount(S.indices, minlength=5000))[::-1]
    assert counts[0] > 20 * np.median(counts)  # hot features
    lengths = np.diff(S.indptr)
    assert lengths.max() > 5 * lengths.mean()  # heavy-tailed columns
    U = gmat.powerlaw_csc(100, 50, 5, random_state=1, dtype=np.float64, index_dtype=np.int64)
    assert U.dtype == np.float64 and U.indices.dtype == np.int64
    with pytest.raises(ValueError, match="length_exponent"):
        gmat.powerlaw_csc(10, 10, 2, length_exponent=2.0)
