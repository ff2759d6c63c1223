"""numba parser for svmlight / libsvm text, straight into CSC (one line = one example = one column).

The kernel parses a byte range ``buf[lo:hi]`` made of whole lines (the caller cuts the stream at
newlines) and returns the CSC arrays of the examples it contains.  It allocates its outputs
itself after a first counting pass (``':'`` bounds the nnz, ``'\\n'`` the rows), so nothing is
reallocated while parsing.

Grammar of a line (the same as :func:`sklearn.datasets.load_svmlight_file`)::

    line    := ws* [label (ws+ [qid ws+] feature (ws+ feature)*)] ws* ['#' comment]
    label   := float
    qid     := 'qid:' <non-blank>          (ignored, counted)
    feature := index ':' float             (indices strictly increasing)

Whitespace is space, tab, CR, VT and FF.  Lines that are empty or only a comment are no example.

Decimal to binary conversion: a number with at most 18 significant digits and a decimal exponent
in [-22, 22] is converted exactly (one correctly rounded IEEE multiply or divide of two exactly
representable doubles, Clinger's fast path).  Any other number is *not* approximated: its byte
range is returned in ``slow`` and the caller converts it with Python's ``float`` (correctly
rounded), so results are bit-identical to ``strtod``.

Error codes (``err_code``; the caller turns them into messages naming file and line):

====  ===========================================================
1     label is not a number
2     a feature index is not an integer
3     index 0 in one-based data, or a negative index
4     feature indices not strictly increasing
5     index out of range (>= n_features)
6     a feature value is not a number
7     a feature has no ``':'``
8     bytes that are not valid UTF-8 (data must be ASCII)
9     non-finite value (inf/nan, or overflow)
10    missing label (the line starts with a feature)
11    a feature index overflows int64 (> 9223372036854775807)
====  ===========================================================
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["svmlight_parse", "find_line_starts"]

_P10 = np.array([10.0**i for i in range(23)], dtype=np.float64)
_TWO53 = 1 << 53
_IDX_SAFE = (2**63 - 1) // 10  # idx * 10 + d fits int64 when idx < this (or == and d <= 7)


@njit(cache=True, nogil=True, inline="always")
def append_triple(rows, n, a, b, c):
    """Store ``(a, b, c)`` at row ``n`` of the int64 ``(capacity, 3)`` array ``rows``, doubling
    it when full; returns the (possibly new) array.  Used for skipped lines ``(line, code,
    column)`` and for values left to the slow exact path."""
    if n == rows.shape[0]:
        grown = np.empty((2 * n, 3), dtype=np.int64)
        grown[:n] = rows
        rows = grown
    rows[n, 0] = a
    rows[n, 1] = b
    rows[n, 2] = c
    return rows


@njit(cache=True, nogil=True, inline="always")
def _is_ws(c):
    return c == 32 or c == 9 or c == 13 or c == 11 or c == 12


@njit(cache=True, nogil=True)
def _parse_float(buf, p, e):
    """Parse a decimal float at ``buf[p:e]``; stops at the first byte that cannot continue it.

    Returns ``(value, q, status)`` with ``q`` the stop position and status 0 = exact,
    1 = valid but needs the correctly rounded slow path, 2 = not a number, 3 = inf/nan/overflow.
    """
    neg = False
    if p < e and (buf[p] == 43 or buf[p] == 45):
        neg = buf[p] == 45
        p += 1
    mant = 0
    nd = 0
    exp10 = 0
    any_digit = False
    inexact = False
    while p < e and buf[p] >= 48 and buf[p] <= 57:
        d = buf[p] - 48
        any_digit = True
        if nd < 18:
            if mant != 0 or d != 0:
                mant = mant * 10 + d
                nd += 1
        else:
            exp10 += 1
            if d != 0:
                inexact = True
        p += 1
    if p < e and buf[p] == 46:
        p += 1
        while p < e and buf[p] >= 48 and buf[p] <= 57:
            d = buf[p] - 48
            any_digit = True
            if nd < 18:
                if mant != 0 or d != 0:
                    mant = mant * 10 + d
                    nd += 1
                exp10 -= 1
            elif d != 0:
                inexact = True
            p += 1
    if not any_digit:
        # inf / nan / infinity (any case) are rejected as non-finite, anything else is garbage
        c = buf[p] | 32 if p < e else 0
        if c == 105 or c == 110:  # 'i' or 'n'
            q = p
            while q < e and ((buf[q] | 32) >= 97 and (buf[q] | 32) <= 122):
                q += 1
            return 0.0, q, 3
        return 0.0, p, 2
    if p < e and (buf[p] == 101 or buf[p] == 69):
        q = p + 1
        eneg = False
        if q < e and (buf[q] == 43 or buf[q] == 45):
            eneg = buf[q] == 45
            q += 1
        if not (q < e and buf[q] >= 48 and buf[q] <= 57):
            return 0.0, q, 2
        ev = 0
        while q < e and buf[q] >= 48 and buf[q] <= 57:
            if ev < 100000:
                ev = ev * 10 + (buf[q] - 48)
            q += 1
        p = q
        exp10 += -ev if eneg else ev
    if mant == 0:
        v = 0.0
    else:
        # magnitude check (overflow -> non-finite) on the decimal exponent of the leading digit
        lead = exp10 + nd - 1
        if lead > 308:
            return 0.0, p, 3
        if lead < -400:
            v = 0.0
            return (-v if neg else v), p, 0
        if inexact or mant > _TWO53 or exp10 > 22 or exp10 < -22:
            # the slow path may still round to inf near 1.8e308: the caller re-checks
            return 0.0, p, 1
        if exp10 >= 0:
            v = float(mant) * _P10[exp10]
        else:
            v = float(mant) / _P10[-exp10]
    return (-v if neg else v), p, 0


@njit(cache=True, nogil=True)
def _utf8_ok(buf, p, e):
    """True when ``buf[p:e]`` is valid UTF-8 (structure check: lead byte + continuations)."""
    while p < e:
        c = buf[p]
        if c < 0x80:
            p += 1
            continue
        if c >= 0xC2 and c <= 0xDF:
            n = 1
        elif c >= 0xE0 and c <= 0xEF:
            n = 2
        elif c >= 0xF0 and c <= 0xF4:
            n = 3
        else:
            return False
        if p + n >= e:
            return False
        for k in range(1, n + 1):
            if (buf[p + k] & 0xC0) != 0x80:
                return False
        p += n + 1
    return True


@njit(cache=True, nogil=True)
def find_line_starts(buf, lo, hi, n_parts):
    """Cut ``buf[lo:hi]`` (whole lines) into ``n_parts`` ranges at newlines; returns the bounds."""
    bounds = np.empty(n_parts + 1, dtype=np.int64)
    bounds[0] = lo
    for k in range(1, n_parts):
        t = lo + ((hi - lo) * k) // n_parts
        if t < bounds[k - 1]:
            t = bounds[k - 1]
        while t > lo and t < hi and buf[t - 1] != 10:
            t += 1
        bounds[k] = t
    bounds[n_parts] = hi
    return bounds


@njit(cache=True, nogil=True)
def svmlight_parse(buf, lo, hi, zero_based, n_features, skip_errors, proto_idx, proto_val,
                   max_abs):
    """Parse the whole lines in ``buf[lo:hi]`` (uint8) into CSC arrays.

    Parameters
    ----------
    buf : uint8 array
    lo, hi : int
        Byte range; ``hi`` is a line end (or the end of the stream).
    zero_based : bool
        Indices start at 0 (else at 1 and are shifted down by one).
    n_features : int
        Indices (after the shift) must be ``< n_features``; pass a negative value for no bound.
    skip_errors : bool
        Skip malformed lines (recorded in ``skipped``) instead of stopping at the first one.
    proto_idx, proto_val : arrays
        Empty arrays whose dtypes are those of the outputs (indices and indptr; data and
        labels), e.g. int32 and float32: the kernel writes the final dtypes directly.
    max_abs : float
        Largest magnitude representable in the value dtype; a larger value is error 9.

    Returns
    -------
    labels : (n_rows,) of proto_val's dtype
    indptr : (n_rows + 1,) of proto_idx's dtype
    indices : (nnz,) of proto_idx's dtype
    data : (nnz,) of proto_val's dtype
    slow : int64 (n_slow, 3)
        ``(start, stop, target)`` byte ranges to convert with Python's ``float``; ``target >= 0``
        is a position in ``data``, ``target < 0`` the label of row ``-target - 1``.
    info : int64 (8,)
        ``[err_code, err_line, err_byte, n_lines, n_qid, min_index, max_index, n_skipped]``
        (line numbers are 0-based within the range; ``err_byte`` is the column in the line;
        indices are reported as written in the file).
    skipped : int64 (n_skipped, 3)
        ``(line, code, byte)`` of every skipped line.
    """
    n_colon = 0
    n_nl = 0
    for p in range(lo, hi):  # branchless: vectorizes (4x faster than if/elif)
        c = buf[p]
        n_colon += np.int64(c == 58)
        n_nl += np.int64(c == 10)
    max_rows = n_nl + 1
    labels = np.empty(max_rows, proto_val.dtype)
    indptr = np.empty(max_rows + 1, proto_idx.dtype)
    indices = np.empty(n_colon, proto_idx.dtype)
    data = np.empty(n_colon, proto_val.dtype)
    slow = np.empty((64, 3), dtype=np.int64)
    skipped = np.empty((16, 3), dtype=np.int64)
    info = np.zeros(8, dtype=np.int64)
    info[1] = -1
    info[2] = -1
    min_idx = np.int64(1) << 62
    max_idx = np.int64(-1)
    n_slow = 0
    n_skipped = 0
    n_qid = 0
    base = 0 if zero_based else 1
    row = 0
    nnz = 0
    line = 0
    indptr[0] = 0
    p = lo
    while p < hi:
        # one scan: line end, and the end of the data part (first '#')
        e = p
        d_end = -1
        while e < hi:
            c = buf[e]
            if c == 10:
                break
            if c == 35 and d_end < 0:
                d_end = e
            e += 1
        if d_end < 0:
            d_end = e
        ls = p
        code = 0
        bad = -1
        if d_end < e and not _utf8_ok(buf, d_end, e):
            code = 8
            bad = d_end
        q = p
        while q < d_end and _is_ws(buf[q]):
            q += 1
        slow_mark = n_slow
        if code == 0 and q < d_end:
            # label
            v, r, st = _parse_float(buf, q, d_end)
            if (st == 0 or st == 1) and abs(v) > max_abs:
                code = 9
                bad = q
            elif st == 0 or st == 1:
                if r < d_end and buf[r] == 58:
                    code = 10
                    bad = q
                elif r < d_end and not _is_ws(buf[r]):
                    code = 1 if buf[r] < 128 else 8
                    bad = r
                elif st == 1:
                    slow = append_triple(slow, n_slow, q, r, -row - 1)
                    n_slow += 1
            elif st == 3:
                code = 9
                bad = q
            else:
                code = 1 if (r >= d_end or buf[r] < 128) else 8
                bad = q if r >= d_end or buf[r] < 128 else r
            labels[row] = v
            q = r
            prev = np.int64(-1)
            first = True
            while code == 0:
                while q < d_end and _is_ws(buf[q]):
                    q += 1
                if q >= d_end:
                    break
                # qid:... as the first feature is ignored
                if (
                    first
                    and q + 3 < d_end
                    and buf[q] == 113
                    and buf[q + 1] == 105
                    and buf[q + 2] == 100
                    and buf[q + 3] == 58
                ):
                    n_qid += 1
                    q += 4
                    while q < d_end and not _is_ws(buf[q]):
                        if buf[q] >= 128:
                            code = 8
                            bad = q
                        q += 1
                    first = False
                    continue
                first = False
                t = q
                if t < d_end and buf[t] == 43:
                    t += 1
                neg = False
                if t < d_end and buf[t] == 45 and t == q:
                    neg = True
                    t += 1
                idx = np.int64(0)
                ndig = 0
                overflow = False
                while t < d_end and buf[t] >= 48 and buf[t] <= 57:
                    d = buf[t] - 48
                    if idx < _IDX_SAFE or (idx == _IDX_SAFE and d <= 7):
                        idx = idx * 10 + d
                    else:
                        overflow = True
                    ndig += 1
                    t += 1
                if ndig == 0 or (t < d_end and buf[t] != 58 and not _is_ws(buf[t])):
                    code = 2 if (t >= d_end or buf[t] < 128) else 8
                    bad = q if code == 2 else t
                    break
                if overflow:
                    code = 11
                    bad = q
                    break
                if t >= d_end or buf[t] != 58:
                    code = 7
                    bad = q
                    break
                if neg or idx < base:
                    code = 3
                    bad = q
                    break
                if idx <= prev:
                    code = 4
                    bad = q
                    break
                if n_features >= 0 and idx - base >= n_features:
                    code = 5
                    bad = q
                    break
                prev = idx
                t += 1
                v, r, st = _parse_float(buf, t, d_end)
                if st == 2 or (r < d_end and not _is_ws(buf[r])):
                    if r < d_end and buf[r] >= 128:
                        code = 8
                        bad = r
                    else:
                        code = 6
                        bad = t
                    break
                if st == 3 or abs(v) > max_abs:
                    code = 9
                    bad = t
                    break
                if st == 1:
                    slow = append_triple(slow, n_slow, t, r, nnz)
                    n_slow += 1
                indices[nnz] = idx - base
                data[nnz] = v
                nnz += 1
                if idx < min_idx:
                    min_idx = idx
                if idx > max_idx:
                    max_idx = idx
                q = r
            if code == 0:
                row += 1
                indptr[row] = nnz
        if code != 0:
            if not skip_errors:
                info[0] = code
                info[1] = line
                info[2] = bad - ls
                break
            nnz = indptr[row]
            n_slow = slow_mark
            skipped = append_triple(skipped, n_skipped, line, code, bad - ls)
            n_skipped += 1
        line += 1
        p = e + 1
    info[3] = line
    info[4] = n_qid
    info[5] = min_idx if max_idx >= 0 else -1
    info[6] = max_idx
    info[7] = n_skipped
    return (
        labels[:row],
        indptr[: row + 1],
        indices[:nnz],
        data[:nnz],
        slow[:n_slow],
        info,
        skipped[:n_skipped],
    )
