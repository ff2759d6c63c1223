"""MurmurHash3 x86_32 (Austin Appleby's public-domain reference, ``MurmurHash3_x86_32``) in numba.

The hash of a byte string ``key`` with a 32-bit ``seed``: 4-byte little-endian blocks mixed with
``c1 = 0xcc9e2d51``, ``c2 = 0x1b873593``, rotations 15 and 13, ``h = h*5 + 0xe6546b64``; the
1-3 tail bytes mixed the same way without the ``h`` step; then ``h ^= len`` and the ``fmix32``
finalizer (``0x85ebca6b``, ``0xc2b2ae35``, shifts 16/13/16).  Results are unsigned 32-bit.

Integer keys are hashed as their 4 little-endian bytes (as scikit-learn's ``murmurhash3_32``
does for int32 keys).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["murmur3_32", "murmur3_32_int", "murmur3_32_hex8"]

_M32 = np.uint32(0xFFFFFFFF)


@njit(cache=True, nogil=True, inline="always")
def _rotl(x, r):
    return ((x << np.uint32(r)) | (x >> np.uint32(32 - r))) & np.uint32(0xFFFFFFFF)


@njit(cache=True, nogil=True, inline="always")
def _mix_k(k):
    k = (k * np.uint32(0xCC9E2D51)) & np.uint32(0xFFFFFFFF)
    k = _rotl(k, 15)
    return (k * np.uint32(0x1B873593)) & np.uint32(0xFFFFFFFF)


@njit(cache=True, nogil=True, inline="always")
def _fmix(h):
    h ^= h >> np.uint32(16)
    h = (h * np.uint32(0x85EBCA6B)) & np.uint32(0xFFFFFFFF)
    h ^= h >> np.uint32(13)
    h = (h * np.uint32(0xC2B2AE35)) & np.uint32(0xFFFFFFFF)
    h ^= h >> np.uint32(16)
    return h


@njit(cache=True, nogil=True)
def murmur3_32(buf, lo, hi, seed):
    """MurmurHash3_x86_32 of the bytes ``buf[lo:hi]`` (uint8 array) with ``seed``; uint32."""
    h = np.uint32(seed & 0xFFFFFFFF)
    n = hi - lo
    nblocks = n // 4
    p = lo
    for _ in range(nblocks):
        k = (
            np.uint32(buf[p])
            | (np.uint32(buf[p + 1]) << np.uint32(8))
            | (np.uint32(buf[p + 2]) << np.uint32(16))
            | (np.uint32(buf[p + 3]) << np.uint32(24))
        )
        h ^= _mix_k(k)
        h = _rotl(h, 13)
        h = (h * np.uint32(5) + np.uint32(0xE6546B64)) & np.uint32(0xFFFFFFFF)
        p += 4
    rem = n & 3
    if rem:
        k = np.uint32(0)
        if rem == 3:
            k ^= np.uint32(buf[p + 2]) << np.uint32(16)
        if rem >= 2:
            k ^= np.uint32(buf[p + 1]) << np.uint32(8)
        k ^= np.uint32(buf[p])
        h ^= _mix_k(k)
    h ^= np.uint32(n)
    return _fmix(h)


@njit(cache=True, nogil=True)
def murmur3_32_int(key, seed):
    """MurmurHash3_x86_32 of the 4 little-endian bytes of the int32 ``key``; uint32."""
    k = np.uint32(np.int64(key) & 0xFFFFFFFF)
    h = np.uint32(seed & 0xFFFFFFFF)
    h ^= _mix_k(k)
    h = _rotl(h, 13)
    h = (h * np.uint32(5) + np.uint32(0xE6546B64)) & np.uint32(0xFFFFFFFF)
    h ^= np.uint32(4)
    return _fmix(h)


@njit(cache=True, nogil=True)
def murmur3_32_hex8(values, seed, out):
    """``out[i]`` = MurmurHash3_x86_32 of the 8 lowercase hex digits of the uint32 ``values[i]``
    (the Criteo categorical token ``"%08x" % values[i]``)."""
    buf = np.empty(8, dtype=np.uint8)
    for i in range(values.shape[0]):
        v = np.uint32(values[i])
        for d in range(8):
            nib = (v >> np.uint32(28 - 4 * d)) & np.uint32(15)
            buf[d] = nib + 48 if nib < 10 else nib + 87
        out[i] = murmur3_32(buf, 0, 8, seed)
