"""numba kernels for the Criteo click-log TSV layout: parse + hash into CSC, and format.

A line is ``label \\t I1 .. I13 \\t C1 .. C26`` (40 tab-separated fields; 39 without label).
Integer fields are decimal (possibly negative), categorical fields hexadecimal; empty = missing.

Feature hashing (stable, documented; the same definition is used by
``roofline.datasources.make_criteo_like``):

* field ``f`` (0-12 = I1-I13, 13-38 = C1-C26) uses seed ``seeds[f]``;
* integer value ``v`` -> bucket ``b = v`` if ``v <= 2`` else ``3 + floor(ln(v)^2)`` (in exact
  arithmetic: computed by counting the integer thresholds ``T_k = ceil(exp(sqrt(k)))`` that
  are ``<= v``, the thresholds being computed once with 40-digit decimals, so no libm rounding
  can move a value across a boundary), hashed as the int32 ``b`` (4 little-endian bytes):
  ``h = murmur3_32(b, seeds[f])``;
* categorical token (its bytes as written) -> ``h = murmur3_32(token, seeds[f])``;
* ``"hashed"`` layout: column ``h & (2^n_bits - 1)`` (collisions inside one example are summed);
  ``"per_field"`` layout: column ``f * 2^n_bits + (h & (2^n_bits - 1))``, so each field owns a
  pure block (at most one non-zero per example).
* every present field contributes the value 1.
"""

from __future__ import annotations

import decimal
import functools

import numpy as np
from numba import njit

from ._hash import murmur3_32, murmur3_32_int
from ._svmlight import append_triple

__all__ = [
    "log_bucket_thresholds",
    "criteo_parse",
    "criteo_int_bucket",
    "criteo_format",
    "criteo_hash_fields",
    "N_INT",
    "N_CAT",
]

N_INT = 13
N_CAT = 26
_INT_SAFE = (2**63 - 1) // 10  # v * 10 + d fits int64 when v < this (or == and d <= 7)


@functools.lru_cache(maxsize=1)
def log_bucket_thresholds() -> np.ndarray:
    """``T_k = ceil(exp(sqrt(k)))`` for ``k = 1, 2, ...`` while ``T_k < 2^63`` (int64).

    ``floor(ln(v)^2) = #{k >= 1 : T_k <= v}`` exactly for integers ``v >= 3`` (``exp(sqrt k)``
    is never an integer), so bucketing is exact and platform independent.
    """
    ctx = decimal.Context(prec=40)
    out = []
    k = 1
    while True:
        t = int(ctx.exp(ctx.sqrt(decimal.Decimal(k))).to_integral_value(
            rounding=decimal.ROUND_CEILING))
        if t >= 2**63:
            break
        out.append(t)
        k += 1
    return np.array(out, dtype=np.int64)


@njit(cache=True, nogil=True, inline="always")
def _append_one_hot_row(tmp, nt, indices, data, nnz):
    """Sort the ``nt`` (<= 39) hashed columns in ``tmp`` (insertion sort), merge duplicates
    (hash collisions) by summing their ones, append them at ``nnz``; return the new ``nnz``."""
    for a in range(1, nt):
        x = tmp[a]
        b = a - 1
        while b >= 0 and tmp[b] > x:
            tmp[b + 1] = tmp[b]
            b -= 1
        tmp[b + 1] = x
    start = nnz
    for a in range(nt):
        if nnz > start and indices[nnz - 1] == tmp[a]:
            data[nnz - 1] += 1.0
        else:
            indices[nnz] = tmp[a]
            data[nnz] = 1.0
            nnz += 1
    return nnz


@njit(cache=True, nogil=True)
def criteo_int_bucket(v, thresholds):
    """``v`` if ``v <= 2`` else ``3 + floor(ln(v)^2)`` (exact, via ``thresholds`` =
    :func:`log_bucket_thresholds`)."""
    if v <= 2:
        return v
    return 3 + np.int64(np.searchsorted(thresholds, v, side="right"))


@njit(cache=True, nogil=True)
def criteo_parse(buf, lo, hi, has_label, n_bits, per_field, seeds, thresholds,
                 skip_errors):
    """Parse and hash the whole lines in ``buf[lo:hi]``.

    Returns ``(labels float64 (n,), indptr int64 (n+1,), indices int64 (nnz,),
    data float64 (nnz,), info int64 (8,), skipped int64 (k, 3))`` with
    ``info = [err_code, err_line, err_byte, n_lines, 0, 0, 0, n_skipped]`` and codes
    1 bad label, 2 wrong number of fields, 3 bad integer, 4 bad categorical token,
    5 integer field overflows int64, 8 non-ASCII byte.
    """
    n_fields = N_INT + N_CAT
    n_nl = 0
    for p in range(lo, hi):  # branchless: vectorizes
        n_nl += np.int64(buf[p] == 10)
    max_rows = n_nl + 1
    labels = np.empty(max_rows, dtype=np.float64)
    indptr = np.empty(max_rows + 1, dtype=np.int64)
    indices = np.empty(max_rows * n_fields, dtype=np.int64)
    data = np.empty(max_rows * n_fields, dtype=np.float64)
    skipped = np.empty((16, 3), dtype=np.int64)
    info = np.zeros(8, dtype=np.int64)
    info[1] = -1
    info[2] = -1
    mask = (np.int64(1) << n_bits) - 1
    block = np.int64(1) << n_bits
    n_skipped = 0
    row = 0
    nnz = 0
    line = 0
    indptr[0] = 0
    tmp = np.empty(n_fields, dtype=np.int64)
    p = lo
    while p < hi:
        e = p
        while e < hi and buf[e] != 10:
            e += 1
        le = e
        if le > p and buf[le - 1] == 13:  # CRLF
            le -= 1
        ls = p
        code = 0
        bad = -1
        if le == p:
            # empty line: no example
            line += 1
            p = e + 1
            continue
        q = p
        if has_label:
            lab = 0
            nd = 0
            while q < le and buf[q] != 9:
                c = buf[q]
                if c >= 48 and c <= 57:
                    lab = lab * 10 + (c - 48)
                    nd += 1
                else:
                    nd = -100
                q += 1
            if nd != 1 or lab > 1:
                code = 1
                bad = p
            labels[row] = lab
            if code == 0:
                if q >= le:
                    code = 2
                    bad = q
                else:
                    q += 1  # the tab
        else:
            labels[row] = 0.0
        nt = 0
        f = 0
        while code == 0 and f < n_fields:
            s = q
            while q < le and buf[q] != 9:
                if buf[q] >= 128:
                    code = 8
                    bad = q
                    break
                q += 1
            if code != 0:
                break
            if q > s:
                if f < N_INT:
                    t = s
                    neg = False
                    if buf[t] == 45:
                        neg = True
                        t += 1
                    v = np.int64(0)
                    if t == q:
                        code = 3
                        bad = s
                        break
                    overflow = False
                    while t < q:
                        c = buf[t]
                        if c < 48 or c > 57:
                            code = 3
                            bad = s
                            break
                        d = c - 48
                        if v < _INT_SAFE or (v == _INT_SAFE and d <= 7):
                            v = v * 10 + d
                        else:
                            overflow = True
                        t += 1
                    if code == 0 and overflow:
                        code = 5
                        bad = s
                    if code != 0:
                        break
                    if neg:
                        v = -v
                    b = criteo_int_bucket(v, thresholds)
                    h = np.int64(murmur3_32_int(b, seeds[f]))
                else:
                    if q - s > 16:
                        code = 4
                        bad = s
                        break
                    for t in range(s, q):
                        c = buf[t] | 32
                        if not ((c >= 48 and c <= 57) or (c >= 97 and c <= 102)):
                            code = 4
                            bad = s
                            break
                    if code != 0:
                        break
                    h = np.int64(murmur3_32(buf, s, q, seeds[f]))
                col = h & mask
                if per_field:
                    col += f * block
                tmp[nt] = col
                nt += 1
            f += 1
            if f < n_fields:
                if q >= le:
                    code = 2
                    bad = q
                    break
                q += 1  # the tab
        if code == 0 and q != le:
            code = 2  # more fields than expected
            bad = q
        if code == 0:
            nnz = _append_one_hot_row(tmp, nt, indices, data, nnz)
            row += 1
            indptr[row] = nnz
        else:
            if not skip_errors:
                info[0] = code
                info[1] = line
                info[2] = bad - ls
                break
            skipped = append_triple(skipped, n_skipped, line, code, bad - ls)
            n_skipped += 1
        line += 1
        p = e + 1
    info[3] = line
    info[7] = n_skipped
    return labels[:row], indptr[: row + 1], indices[:nnz], data[:nnz], info, skipped[:n_skipped]


@njit(cache=True, nogil=True)
def _put_int(out, o, v):
    if v < 0:
        out[o] = 45
        o += 1
        v = -v
    if v == 0:
        out[o] = 48
        return o + 1
    n = 0
    t = v
    while t > 0:
        t //= 10
        n += 1
    for k in range(n - 1, -1, -1):
        out[o + k] = 48 + v % 10
        v //= 10
    return o + n


@njit(cache=True, nogil=True)
def criteo_format(labels, ints, int_present, cats, cat_present):
    """Format rows as Criteo TSV bytes (uint8 array).

    ``ints`` (n, 13) int64 with ``int_present`` (n, 13) bool; ``cats`` (n, 26) uint32 written as
    8 lowercase hex digits where ``cat_present``; ``labels`` (n,) int (0/1).
    """
    n = labels.shape[0]
    out = np.empty(n * (2 + N_INT * 21 + N_CAT * 9 + 1), dtype=np.uint8)
    o = 0
    for i in range(n):
        o = _put_int(out, o, labels[i])
        for f in range(N_INT):
            out[o] = 9
            o += 1
            if int_present[i, f]:
                o = _put_int(out, o, ints[i, f])
        for f in range(N_CAT):
            out[o] = 9
            o += 1
            if cat_present[i, f]:
                v = np.uint32(cats[i, f])
                for d in range(8):
                    nib = (v >> np.uint32(28 - 4 * d)) & np.uint32(15)
                    out[o + d] = nib + 48 if nib < 10 else nib + 87
                o += 8
        out[o] = 10
        o += 1
    return out[:o]


@njit(cache=True, nogil=True)
def criteo_hash_fields(ints, int_present, cats, cat_present, seeds, thresholds, n_bits,
                       per_field):
    """Hash already-decoded fields into CSC arrays (the same definition as :func:`criteo_parse`
    applied to :func:`criteo_format`'s text, computed without any text).

    Returns ``(indptr int64 (n+1,), indices int64, data float64)``.
    """
    n = ints.shape[0]
    n_fields = N_INT + N_CAT
    mask = (np.int64(1) << n_bits) - 1
    block = np.int64(1) << n_bits
    indptr = np.empty(n + 1, dtype=np.int64)
    indices = np.empty(n * n_fields, dtype=np.int64)
    data = np.empty(n * n_fields, dtype=np.float64)
    tmp = np.empty(n_fields, dtype=np.int64)
    hx = np.empty(8, dtype=np.uint8)
    indptr[0] = 0
    nnz = 0
    for i in range(n):
        nt = 0
        for f in range(N_INT):
            if int_present[i, f]:
                h = np.int64(murmur3_32_int(criteo_int_bucket(ints[i, f], thresholds), seeds[f]))
                tmp[nt] = (h & mask) + (f * block if per_field else 0)
                nt += 1
        for g in range(N_CAT):
            if cat_present[i, g]:
                v = np.uint32(cats[i, g])
                for d in range(8):
                    nib = (v >> np.uint32(28 - 4 * d)) & np.uint32(15)
                    hx[d] = nib + 48 if nib < 10 else nib + 87
                h = np.int64(murmur3_32(hx, 0, 8, seeds[N_INT + g]))
                tmp[nt] = (h & mask) + ((N_INT + g) * block if per_field else 0)
                nt += 1
        nnz = _append_one_hot_row(tmp, nt, indices, data, nnz)
        indptr[i + 1] = nnz
    return indptr, indices[:nnz], data[:nnz]
