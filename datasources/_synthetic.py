"""Criteo-like synthetic click logs: Zipf categories, log-normal counts, planted logistic labels.

No package ships Criteo data, so demos, tests and benchmarks generate it.  The generator draws
raw fields (13 integer, 26 categorical), then labels from a planted logistic model over the raw
field values: ``P(y=1) = sigmoid(bias + sum_f w_f[value_f] * scale / sqrt(39))`` with
``w ~ N(0, 1)`` per (field, category) and per (field, integer bucket).  The labels therefore do
not depend on any hashing parameter; a linear model on the hashed features can learn them
(up to collisions).

``make_criteo_like`` writes the TSV text (what :class:`CriteoSource` reads);
``make_criteo_like_matrix`` returns the same examples already hashed, as a CSC matrix
(features x examples) + labels, computed from the decoded fields without any text.  For the
same ``seed`` and generator parameters both describe exactly the same examples.
"""

from __future__ import annotations

import gzip
import os

import numpy as np

from roofline.kernels import (
    N_CAT,
    N_INT,
    criteo_format,
    criteo_hash_fields,
    log_bucket_thresholds,
)

from ._base import _csc, _index_dtype
from ._criteo import criteo_field_seeds
from ._text import stitch_csc

__all__ = ["CRITEO_LIKE_CARDINALITIES", "make_criteo_like", "make_criteo_like_matrix"]

#: Default number of categories of C1..C26 (orders of magnitude like the Criteo Kaggle data).
CRITEO_LIKE_CARDINALITIES = (
    1400, 550, 200_000, 120_000, 300, 22, 12_000, 600, 3, 40_000, 5_000, 180_000, 3_000,
    26, 11_000, 150_000, 10, 4_500, 2_000, 4, 170_000, 17, 15, 60_000, 80, 45_000,
)
_INT_MU = np.array([1.0, 3.0, 2.0, 1.5, 8.0, 4.0, 2.0, 2.0, 4.0, 0.5, 1.0, 0.3, 2.0])
_INT_SIGMA = np.array([1.2, 2.0, 1.5, 1.0, 2.0, 1.8, 1.5, 1.0, 1.5, 0.7, 1.0, 0.8, 1.3])
_CHUNK = 1 << 16  # rows generated per step (fixed: the random stream does not depend on it)


def _check_common(n_examples, seed, n_categories, zipf_a, missing_rate):
    if not isinstance(n_examples, (int, np.integer)) or n_examples < 0:
        raise ValueError(f"n_examples must be a non-negative integer, got {n_examples!r}")
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    if n_categories is None:
        card = np.array(CRITEO_LIKE_CARDINALITIES, dtype=np.int64)
    elif isinstance(n_categories, (int, np.integer)):
        card = np.full(N_CAT, int(n_categories), dtype=np.int64)
    else:
        card = np.asarray(n_categories, dtype=np.int64)
        if card.shape != (N_CAT,):
            raise ValueError(f"n_categories must be an int or {N_CAT} ints, got {card.shape}")
    if (card < 1).any():
        raise ValueError("n_categories must be >= 1")
    if not zipf_a > 0:
        raise ValueError(f"zipf_a must be > 0, got {zipf_a!r}")
    if not 0 <= missing_rate < 1:
        raise ValueError(f"missing_rate must be in [0, 1), got {missing_rate!r}")
    return card


class _Generator:
    """The shared random stream: fields and labels, chunk after chunk."""

    def __init__(self, seed, card, zipf_a, missing_rate, bias, scale):
        self.rng = np.random.default_rng(seed)
        rng = self.rng
        self.card = card
        self.cdf = []
        for k in card:
            p = 1.0 / np.arange(1, k + 1, dtype=np.float64) ** zipf_a
            c = np.cumsum(p)
            self.cdf.append(c / c[-1])
        self.cat_miss = np.clip(missing_rate * rng.uniform(0.0, 2.0, N_CAT), 0, 0.95)
        self.int_miss = np.clip(missing_rate * rng.uniform(0.0, 2.0, N_INT), 0, 0.95)
        self.w_cat = [rng.standard_normal(int(k)) for k in card]
        self.w_int = rng.standard_normal((N_INT, 2100))
        self.bias = float(bias)
        self.scale = float(scale) / np.sqrt(N_INT + N_CAT)

    def chunk(self, n):
        rng = self.rng
        ints = np.floor(np.exp(rng.normal(_INT_MU, _INT_SIGMA, size=(n, N_INT)))).astype(np.int64)
        ints[:, 1] -= (rng.random(n) < 0.05).astype(np.int64)  # I2 can be -1 / -2 like Criteo
        int_present = rng.random((n, N_INT)) >= self.int_miss
        cat_ids = np.empty((n, N_CAT), dtype=np.int64)
        for g in range(N_CAT):
            cat_ids[:, g] = np.searchsorted(self.cdf[g], rng.random(n), side="right")
        np.minimum(cat_ids, self.card - 1, out=cat_ids)
        cat_present = rng.random((n, N_CAT)) >= self.cat_miss
        # token of category c in field g: distinct per c (odd multiplier mod 2^32)
        cats = ((cat_ids * 0x9E3779B1 + (np.arange(N_CAT) + 1) * 0x7F4A7C15) & 0xFFFFFFFF).astype(
            np.uint32
        )
        logit = np.full(n, self.bias)
        for g in range(N_CAT):
            logit += np.where(cat_present[:, g], self.w_cat[g][cat_ids[:, g]], 0.0) * self.scale
        buckets = _buckets(ints)
        bidx = np.clip(buckets + 2, 0, self.w_int.shape[1] - 1)
        for f in range(N_INT):
            logit += np.where(int_present[:, f], self.w_int[f][bidx[:, f]], 0.0) * self.scale
        y = (rng.random(n) < 1.0 / (1.0 + np.exp(-logit))).astype(np.int64)
        return y, ints, int_present, cats, cat_present


def _buckets(ints):
    """Log buckets for the planted weights (the hashed features use the kernel's own)."""
    v = np.maximum(ints, 1).astype(np.float64)
    return np.where(ints <= 2, ints, 3 + np.floor(np.log(v) ** 2).astype(np.int64))


def _iter_chunks(n_examples, gen):
    done = 0
    while done < n_examples:
        n = min(_CHUNK, n_examples - done)
        yield gen.chunk(n)
        done += n


def make_criteo_like(n_examples, *, seed, path=None, n_categories=None, zipf_a=1.1,
                     missing_rate=0.1, bias=-1.8, scale=4.0):
    """Generate Criteo-like click-log TSV (``label \\t I1..I13 \\t C1..C26``).

    Parameters
    ----------
    n_examples : int
    seed : int
        The only source of randomness (``np.random.default_rng(seed)``).
    path : str or path-like, optional
        Write there (gzip when it ends with ``.gz``; missing parent folders are created) and
        return the path; without it, return the TSV as ``bytes``.
    n_categories : int or sequence of 26 ints, optional
        Cardinality of each categorical field (default :data:`CRITEO_LIKE_CARDINALITIES`).
    zipf_a : float
        Zipf exponent of category popularity (``P(rank k) ~ k^-a``).
    missing_rate : float
        Mean fraction of missing values per field (each field gets its own rate).
    bias, scale : float
        Planted logistic model: ``logit = bias + scale / sqrt(39) * sum of field weights``.

    Returns
    -------
    bytes or str
    """
    card = _check_common(n_examples, seed, n_categories, zipf_a, missing_rate)
    gen = _Generator(seed, card, zipf_a, missing_rate, bias, scale)
    if path is None:
        return b"".join(criteo_format(*c).tobytes() for c in _iter_chunks(n_examples, gen))
    path = os.fspath(path)
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)  # e.g. examples/data/ of the example configs
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wb") as f:
        for c in _iter_chunks(n_examples, gen):
            f.write(criteo_format(*c).tobytes())
    return path


def make_criteo_like_matrix(n_examples, *, seed, n_bits=20, layout="hashed", hash_seed=0,
                            dtype=np.float32, n_categories=None, zipf_a=1.1, missing_rate=0.1,
                            bias=-1.8, scale=4.0):
    """The examples of :func:`make_criteo_like` (same ``seed`` and generator parameters),
    hashed as :class:`CriteoSource` would hash them, without writing text.

    Parameters
    ----------
    n_examples : int
        Examples generated.
    seed : int
        The only source of randomness (as in :func:`make_criteo_like`).
    n_bits : int, default 20
        Hash width ``b`` (1 to 30): ``2^b`` columns (per field with ``"per_field"``).
    layout : {"hashed", "per_field"}
        ``"hashed"``: the fields share ``2^b`` columns; ``"per_field"``: one block of ``2^b``
        per field.
    hash_seed : int, default 0
        Field ``f`` hashes with seed ``(hash_seed + f) mod 2^32``.
    dtype : float32 or float64
        Dtype of the values and labels.
    n_categories : int or sequence of 26 ints, optional
        Cardinality of each categorical field (default :data:`CRITEO_LIKE_CARDINALITIES`).
    zipf_a : float
        Zipf exponent of category popularity.
    missing_rate : float
        Mean fraction of missing values per field.
    bias, scale : float
        Planted logistic model: ``logit = bias + scale / sqrt(39) * sum of field weights``.

    Returns
    -------
    X : scipy.sparse.csc_matrix, shape (n_features, n_examples)
        ``n_features = 2^n_bits`` (``"hashed"``) or ``39 * 2^n_bits`` (``"per_field"``).
    y : ndarray (n_examples,) of ``dtype``, values 0/1
        The click labels.

    Raises
    ------
    ValueError
        A bad ``layout``, ``n_bits`` or generator parameter.
    """
    card = _check_common(n_examples, seed, n_categories, zipf_a, missing_rate)
    if layout not in ("hashed", "per_field"):
        raise ValueError(f"layout must be 'hashed' or 'per_field', got {layout!r}")
    if not isinstance(n_bits, (int, np.integer)) or not 1 <= n_bits <= 30:
        raise ValueError(f"n_bits must be an integer in [1, 30], got {n_bits!r}")
    dtype = np.dtype(dtype)
    gen = _Generator(seed, card, zipf_a, missing_rate, bias, scale)
    seeds = criteo_field_seeds(hash_seed)
    n_features = (1 << n_bits) * ((N_INT + N_CAT) if layout == "per_field" else 1)
    ys, parts = [], []
    for y, ints, ip, cats, cp in _iter_chunks(n_examples, gen):
        parts.append(criteo_hash_fields(ints, ip, cats, cp, seeds, log_bucket_thresholds(),
                                        n_bits, layout == "per_field"))
        ys.append(y)
    indptr, indices, data = stitch_csc(parts)
    nnz = int(indptr[-1])
    idt = _index_dtype(n_features, nnz)
    X = _csc(data.astype(dtype), indices.astype(idt), indptr.astype(idt), (n_features, n_examples))
    y = np.concatenate(ys).astype(dtype) if ys else np.zeros(0, dtype)
    return X, y
