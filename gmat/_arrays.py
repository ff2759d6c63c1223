"""Array kinds, devices, dtypes and boundary validation: the one dispatch point of Roofline.

Conventions
-----------
* Sparse matrices are CSC with **one column = one example** (BIDMach): ``S`` is
  ``n_features x n_examples``.  On the CPU they are :class:`scipy.sparse.csc_matrix` /
  ``csc_array``; on the GPU :class:`cupyx.scipy.sparse.csc_matrix`.
* Dense matrices are numpy (CPU) or cupy (GPU) arrays.  Model matrices ``A`` (``k x n``) are
  best stored in Fortran order so that one column (one feature) is contiguous; the primitives
  accept any layout and copy only when they must.
* float32 and float64 are the supported value dtypes; indices are int32 or int64.

cupy is imported lazily: importing :mod:`roofline.gmat` never imports it.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from roofline.kernels import check_csc_structure, csc_fingerprint

__all__ = [
    "SUPPORTED_DTYPES",
    "as_dense",
    "check_csc",
    "device_of",
    "empty",
    "gpu_available",
    "get_array_module",
    "is_sparse",
    "slice_columns",
    "to_device",
    "zeros",
]

CACHE_LINE = 64

SUPPORTED_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))

# Validation results are remembered on the sparse matrix object itself, so that a minibatch
# validated once (by a DataSource, or the first primitive call) is not re-scanned on every call.
# The mark holds the identity of the matrix's arrays, their lengths and the matrix shape, plus a
# fingerprint of the structure (nnz and a strided sample of indptr and indices, hashed by a
# numba kernel in well under a microsecond), re-taken on every use: replacing an array, or an
# in-place edit that the sample sees (``S.indices[:] = 2**30``, a new ``indptr[-1]``), makes the
# next use re-validate in full.  An edit the sample misses is caught by the primitives' kernels,
# which never read or write outside their arrays and report out-of-range indices instead.
_CHECKED_ATTR = "_roofline_checked"


def _identity(S):
    return (id(S.indptr), id(S.indices), id(S.data), S.indices.shape[0], S.data.shape[0],
            S.shape)


def _fingerprint(S):
    if device_of(S) == "gpu":  # a device-side sample would cost a synchronisation
        return None
    return csc_fingerprint(S.indptr, S.indices)


def _make_mark(S, allow_nonfinite):
    return (_identity(S), bool(allow_nonfinite), _fingerprint(S))


def _mark_holds(S, mark, allow_nonfinite):
    """True when ``mark`` (or None) still vouches for ``S`` under ``allow_nonfinite``."""
    if mark is None or (mark[1] and not allow_nonfinite) or mark[0] != _identity(S):
        return False
    return mark[2] == _fingerprint(S)


def gpu_available() -> bool:
    """Whether the GPU path can run here.

    Returns
    -------
    bool
        True when cupy is installed and a CUDA device is usable; never raises (a missing or
        broken driver reads as False).
    """
    try:
        import cupy
    except Exception:
        return False
    try:
        return bool(cupy.cuda.is_available())
    except Exception:  # pragma: no cover - driver-dependent
        return False


def _is_cupy_array(x) -> bool:
    mod = type(x).__module__
    return mod.startswith("cupy") and not mod.startswith("cupyx.scipy.sparse")


def _is_cupy_sparse(x) -> bool:
    return type(x).__module__.startswith("cupyx.scipy.sparse")


def is_sparse(x) -> bool:
    """Whether ``x`` is a sparse matrix or array, on either device.

    Parameters
    ----------
    x : object
        Any object.

    Returns
    -------
    bool
        True for scipy.sparse and cupyx.scipy.sparse matrices/arrays (any format).
    """
    return sp.issparse(x) or _is_cupy_sparse(x)


def device_of(x) -> str:
    """The device that holds ``x``.

    Parameters
    ----------
    x : object
        An array or sparse matrix (anything else reads as host data).

    Returns
    -------
    {"cpu", "gpu"}
        ``"gpu"`` for cupy arrays and cupyx sparse matrices, ``"cpu"`` otherwise.
    """
    if type(x) is np.ndarray:  # the common case, without the module-name tests
        return "cpu"
    return "gpu" if (_is_cupy_array(x) or _is_cupy_sparse(x)) else "cpu"


def get_array_module(x):
    """The array module (numpy or cupy) that operates on ``x``.

    Parameters
    ----------
    x : object
        An array or sparse matrix.

    Returns
    -------
    module
        :mod:`cupy` when ``x`` is on the GPU (see :func:`device_of`), :mod:`numpy` otherwise.
    """
    if device_of(x) == "gpu":
        import cupy

        return cupy
    return np


def to_device(x, device: str = "cpu"):
    """Move a dense or sparse matrix to ``device`` (``"cpu"`` or ``"gpu"``), copying only if needed.

    Parameters
    ----------
    x : ndarray, scipy.sparse matrix, cupy array or cupyx sparse matrix
    device : {"cpu", "gpu"}

    Returns
    -------
    The same kind of object on the requested device (CSC stays CSC).
    """
    if device not in ("cpu", "gpu"):
        raise ValueError(f"device must be 'cpu' or 'gpu', got {device!r}")
    if device_of(x) == device:
        return x
    checked = getattr(x, _CHECKED_ATTR, None) if is_sparse(x) else None
    if device == "cpu":
        return _carry_check(x.get(), x, checked)
    if not gpu_available():
        raise RuntimeError(
            "device='gpu' requested but no CUDA device is usable "
            "(install roofline[gpu] on a machine with an NVIDIA GPU)"
        )
    import cupy

    if sp.issparse(x):
        import cupyx.scipy.sparse as csp

        return _carry_check(csp.csc_matrix(sp.csc_matrix(x)), x, checked)
    return cupy.asarray(x)


def _carry_check(y, x, checked):
    """Mark the copy ``y`` of a validated CSC matrix ``x`` as validated too (same structure and
    values): a minibatch checked on the host is not re-scanned on the device."""
    if (checked is not None and _mark_holds(x, checked, checked[1]) and is_sparse(y)
            and y.format == "csc" and y.shape == x.shape and y.nnz == x.nnz):
        setattr(y, _CHECKED_ATTR, _make_mark(y, checked[1]))
    return y


def _check_value_dtype(dtype, name: str) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype not in SUPPORTED_DTYPES and not dtype.isnative:
        native = dtype.newbyteorder("=")
        if native in SUPPORTED_DTYPES:
            order = "big-endian" if dtype.byteorder == ">" else "little-endian"
            raise TypeError(
                f"{name} has {order} {native.name} ({dtype.str!r}) values, which are not "
                f"supported (byte order, not precision): convert with "
                f"{name}.astype({native.str!r})"
            )
    if dtype not in SUPPORTED_DTYPES:
        raise TypeError(
            f"{name} has dtype {dtype}; Roofline supports float32 and float64 "
            f"(convert with {name}.astype(np.float32))"
        )
    return dtype


def as_dense(A, name: str = "A", ndim=(1, 2)):
    """Validate a dense operand: an array of a supported float dtype and dimension.

    Does not copy and does not check finiteness (a pass over a large model per call would cost
    more than the primitive); learners check their inputs at their own boundary.

    Parameters
    ----------
    A : numpy.ndarray or cupy.ndarray
        The operand.
    name : str, default "A"
        Argument name used in error messages.
    ndim : tuple of int, default (1, 2)
        The accepted numbers of dimensions.

    Returns
    -------
    numpy.ndarray or cupy.ndarray
        ``A`` itself.

    Raises
    ------
    TypeError
        ``A`` is sparse, not a numpy/cupy array, or of a dtype other than float32/float64
        (non-native byte order included).
    ValueError
        ``A.ndim`` is not in ``ndim``.
    """
    if is_sparse(A):
        raise TypeError(f"{name} must be a dense array, got a sparse matrix ({type(A).__name__})")
    if not (isinstance(A, np.ndarray) or _is_cupy_array(A)):
        raise TypeError(f"{name} must be a numpy or cupy array, got {type(A).__name__}")
    if A.ndim not in ndim:
        raise ValueError(f"{name} must have ndim in {ndim}, got shape {A.shape}")
    _check_value_dtype(A.dtype, name)
    return A


def check_csc(S, name: str = "S", *, allow_nonfinite: bool = False, force: bool = False):
    """Validate a CSC operand and return it (never copied).

    Checks the format (CSC), value dtype (float32/float64), index dtype (int32/int64),
    ``indptr`` monotonicity and length, row indices in range and strictly increasing within each
    column (sorted, no duplicates) and, unless ``allow_nonfinite``, finite values.  The result is
    remembered on the matrix object with a fingerprint of its structure (array identities,
    lengths, nnz and a strided sample of ``indptr`` and ``indices``), so a second call costs
    well under a microsecond, and an edit the sample sees triggers a full re-check.

    Parameters
    ----------
    S : scipy.sparse CSC matrix or array (cupyx CSC on the GPU)
    name : str
        Argument name used in error messages.
    allow_nonfinite : bool
        Accept NaN/inf values.
    force : bool
        Re-check even if ``S`` was validated before (after an in-place edit of a few entries,
        which the sample may miss; the primitives' kernels still never read or write out of
        bounds, and report out-of-range indices as a ``ValueError``).

    Returns
    -------
    CSC matrix
        ``S`` itself, marked as validated.

    Raises
    ------
    TypeError
        Not a CSC matrix, or unsupported value/index dtype.
    ValueError
        Malformed structure, out-of-range or unsorted indices, non-finite values.
    """
    if not force and _mark_holds(S, getattr(S, _CHECKED_ATTR, None), allow_nonfinite):
        return S  # validated before, arrays, shape and fingerprint unchanged (the common case)
    if not is_sparse(S):
        raise TypeError(f"{name} must be a sparse CSC matrix, got {type(S).__name__}")
    if S.format != "csc":
        raise TypeError(
            f"{name} must be in CSC format (one column = one example), got {S.format.upper()}; "
            f"convert with {name}.tocsc()"
        )
    _check_value_dtype(S.dtype, name)
    for arr, what in ((S.indices, "indices"), (S.indptr, "indptr")):
        if np.dtype(arr.dtype) not in _INDEX_DTYPES:
            order = "" if arr.dtype.isnative else (
                f" (non-native byte order: convert with "
                f"{name}.{what}.astype({arr.dtype.newbyteorder('=').str!r}))")
            raise TypeError(f"{name}.{what} has dtype {arr.dtype}; expected int32 or int64"
                            + order)
    n_rows, n_cols = S.shape
    if S.indptr.shape != (n_cols + 1,):
        raise ValueError(f"{name}.indptr has length {S.indptr.shape[0]}, expected {n_cols + 1}")
    nnz = int(S.indptr[-1])
    if int(S.indptr[0]) != 0 or S.indices.shape[0] < nnz or S.data.shape[0] < nnz:
        raise ValueError(
            f"{name} is malformed: indptr[0]={int(S.indptr[0])}, indptr[-1]={nnz}, "
            f"len(indices)={S.indices.shape[0]}, len(data)={S.data.shape[0]}"
        )
    if device_of(S) == "gpu":  # pragma: no cover - needs a GPU
        _check_csc_gpu(S, name, allow_nonfinite)
    else:
        code, col, pos = check_csc_structure(
            S.indptr, S.indices, S.data, n_rows, not allow_nonfinite
        )
        if code == 1:
            raise ValueError(f"{name}.indptr is not non-decreasing at column {col}")
        if code == 2:
            raise ValueError(
                f"{name}.indices[{pos}] = {int(S.indices[pos])} is out of range "
                f"[0, {n_rows}) (column {col})"
            )
        if code == 3:
            raise ValueError(
                f"{name} has unsorted or duplicate row indices in column {col} (at position "
                f"{pos}); call {name}.sum_duplicates() or {name}.sort_indices() first"
            )
        if code == 4:
            raise ValueError(
                f"{name} has a non-finite value {S.data[pos]} at position {pos} (column {col})"
            )
    setattr(S, _CHECKED_ATTR, _make_mark(S, allow_nonfinite))
    return S


def _check_csc_gpu(S, name, allow_nonfinite):  # pragma: no cover - needs a GPU
    import cupy

    indptr, indices, data = S.indptr, S.indices, S.data[: int(S.indptr[-1])]
    if bool((cupy.diff(indptr) < 0).any()):
        raise ValueError(f"{name}.indptr is not non-decreasing")
    nnz = int(indptr[-1])
    idx = indices[:nnz]
    if nnz and (int(idx.min()) < 0 or int(idx.max()) >= S.shape[0]):
        raise ValueError(f"{name}.indices out of range [0, {S.shape[0]})")
    if nnz > 1:
        col_of = cupy.repeat(cupy.arange(S.shape[1]), cupy.diff(indptr).astype(cupy.int64))
        bad = (cupy.diff(idx) <= 0) & (col_of[1:] == col_of[:-1])
        if bool(bad.any()):
            raise ValueError(f"{name} has unsorted or duplicate row indices")
    if not allow_nonfinite and not bool(cupy.isfinite(data).all()):
        raise ValueError(f"{name} has non-finite values")


def csc_from_arrays(cls, data, indices, indptr, shape, template=None):
    """A CSC matrix of class ``cls`` holding exactly these arrays (no copies, no index
    downcasting: scipy's constructor would do both).  The caller guarantees a canonical
    structure (sorted, duplicate-free rows).

    With ``template`` (a matrix of class ``cls``) the result is a shallow copy of it with the
    arrays and shape replaced: about 5x cheaper than the constructor, which matters for
    minibatch loops (a 1024-example step is a few hundred microseconds).  When scipy's attribute
    layout does not allow that, the constructor is used.

    Parameters
    ----------
    cls : type
        The sparse class of the result: a scipy CSC matrix/array class or
        :class:`cupyx.scipy.sparse.csc_matrix` (whose constructor is used as is).
    data : numpy.ndarray or cupy.ndarray
        The values, length ``indptr[-1]`` or more.
    indices : numpy.ndarray or cupy.ndarray
        The row index of each value (int32 or int64, sorted within each column).
    indptr : numpy.ndarray or cupy.ndarray
        Column pointers, length ``shape[1] + 1``.
    shape : tuple of int
        ``(n_rows, n_columns)``.
    template : sparse matrix of class ``cls``, optional
        A matrix whose other attributes the result copies (the fast path).

    Returns
    -------
    sparse matrix of class ``cls``
        A CSC matrix whose ``data``, ``indices`` and ``indptr`` are the given arrays.
    """
    if cls.__module__.startswith("cupyx"):  # pragma: no cover - needs a GPU
        # cupyx's constructor takes the arrays as they are (no copy); newer cupy has a
        # constructor from checked parts that skips its index-dtype scan
        parts = getattr(cls, "_from_parts", None)
        if parts is not None and indices.dtype == indptr.dtype:
            return parts(data, indices, indptr, tuple(shape), has_canonical_format=True)
        return cls((data, indices, indptr), shape=tuple(shape))
    if template is not None and type(template) is cls and "_shape" in vars(template):
        C = cls.__new__(cls)  # a shallow copy without copy.copy's reduce protocol
        C.__dict__.update(template.__dict__)
        C.data, C.indices, C.indptr = data, indices, indptr
        C._shape = tuple(shape)
        C.has_sorted_indices = True
        if C.shape == tuple(shape) and C.nnz == int(indptr[-1]):
            return C
    C = cls(shape, dtype=data.dtype)
    C.data, C.indices, C.indptr = data, indices, indptr
    C.has_sorted_indices = True
    return C


def slice_columns(S, start: int, stop: int, name: str = "S"):
    """Columns ``start:stop`` of a CSC matrix without copying values or indices.

    The result's ``indices``/``data`` are views into ``S``'s arrays (only the small ``indptr`` is
    rebased into a new array), and a slice of a validated matrix is itself marked validated, so
    minibatches cut from a checked matrix are never re-scanned by the primitives.

    Parameters
    ----------
    S : CSC matrix, shape (n, m)
    start, stop : int
        Column range, ``0 <= start <= stop <= m``.
    name : str, default "S"
        Argument name used in error messages.

    Returns
    -------
    CSC matrix of the same class as ``S``, shape ``(n, stop - start)``
        The columns, validated.

    Raises
    ------
    TypeError, ValueError
        ``S`` fails :func:`check_csc`, or the range is outside ``[0, m]``.
    """
    check_csc(S, name)
    m = S.shape[1]
    start, stop = int(start), int(stop)
    if not 0 <= start <= stop <= m:
        raise ValueError(f"column range {start}:{stop} is outside [0, {m}] of {name}")
    if device_of(S) == "gpu":  # pragma: no cover - needs a GPU
        # bounds from a host copy of indptr (no device round trip per slice), one rebase kernel
        hp = _host_indptr(S)
        lo, hi = int(hp[start]), int(hp[stop])
        indptr = S.indptr[start : stop + 1] - S.indptr.dtype.type(lo)
    else:
        lo, hi = int(S.indptr[start]), int(S.indptr[stop])
        indptr = (S.indptr[start : stop + 1] - S.indptr[start]).astype(S.indices.dtype)
    C = csc_from_arrays(
        type(S), S.data[lo:hi], S.indices[lo:hi], indptr, (S.shape[0], stop - start),
        template=S,
    )
    setattr(C, _CHECKED_ATTR, _make_mark(C, getattr(S, _CHECKED_ATTR)[1]))
    return C


_HOST_INDPTR_ATTR = "_roofline_host_indptr"


def _host_indptr(S):  # pragma: no cover - needs a GPU
    """A host copy of a device matrix's ``indptr``, made once and kept on the matrix (replacing
    ``S.indptr`` is detected, as for the validation mark)."""
    cached = getattr(S, _HOST_INDPTR_ATTR, None)
    if cached is None or cached[0] != id(S.indptr):
        cached = (id(S.indptr), S.indptr.get())
        setattr(S, _HOST_INDPTR_ATTR, cached)
    return cached[1]


def empty(shape, dtype=np.float32, *, order="F", device="cpu"):
    """An uninitialised dense array whose data start on a 64-byte cache-line boundary.

    Model matrices are gathered one column at a time; with ``k * itemsize`` a multiple of 64, an
    aligned Fortran-ordered ``k x n`` matrix keeps every column inside whole cache lines (numpy's
    default 16-byte alignment makes a 64-byte column straddle two lines).

    Parameters
    ----------
    shape : int or tuple of int
    dtype : float32 or float64
    order : {"F", "C"}
        Fortran order (the default) keeps each column contiguous.
    device : {"cpu", "gpu"}

    Returns
    -------
    numpy.ndarray or cupy.ndarray
        The uninitialised array (cupy on the GPU, whose allocations are 256-byte aligned).

    Raises
    ------
    TypeError
        ``dtype`` is not float32 or float64.
    ValueError
        ``order`` or ``device`` is not one of the accepted values.
    RuntimeError
        ``device="gpu"`` and no CUDA device is usable.
    """
    return aligned_alloc(shape, _check_value_dtype(dtype, "dtype"), order=order, device=device)


def aligned_alloc(shape, dtype, *, order="C", device="cpu"):
    """Uninitialised array of any dtype starting on a cache-line boundary (no dtype policy:
    used by :func:`empty` and by the buffer cache, which also holds masks and index buffers)."""
    dtype = np.dtype(dtype)
    shape = tuple(int(s) for s in (shape if np.iterable(shape) else (shape,)))
    if order not in ("C", "F"):
        raise ValueError(f"order must be 'C' or 'F', got {order!r}")
    if device == "gpu":
        if not gpu_available():
            raise RuntimeError("device='gpu' requested but no CUDA device is usable")
        import cupy

        return cupy.empty(shape, dtype=dtype, order=order)  # cupy allocations are 256-aligned
    if device != "cpu":
        raise ValueError(f"device must be 'cpu' or 'gpu', got {device!r}")
    n = math.prod(shape)
    buf = np.empty(n * dtype.itemsize + CACHE_LINE, dtype=np.uint8)
    off = (-buf.ctypes.data) % CACHE_LINE
    flat = buf[off : off + n * dtype.itemsize].view(dtype)
    return flat.reshape(shape, order=order)


def zeros(shape, dtype=np.float32, *, order="F", device="cpu"):
    """Like :func:`empty`, filled with zeros.

    Parameters
    ----------
    shape : int or tuple of int
    dtype : float32 or float64
    order : {"F", "C"}
        Fortran order (the default) keeps each column contiguous.
    device : {"cpu", "gpu"}

    Returns
    -------
    numpy.ndarray or cupy.ndarray
        The zero-filled, cache-line-aligned array.

    Raises
    ------
    TypeError, ValueError, RuntimeError
        As :func:`empty`.
    """
    out = empty(shape, dtype, order=order, device=device)
    out.fill(0)
    return out
