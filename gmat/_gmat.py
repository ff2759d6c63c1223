"""``GMat``: a thin wrapper giving BIDMach's operator syntax in the REPL.

The primitives are plain functions (:func:`mult_as`, :func:`mult_ast`, :func:`sddmm`) and that is
what library code calls.  At the IPython prompt, BIDMach's notation is quicker to type::

    >>> A, S = GMat(model), GMat(minibatch)
    >>> P = A * S          # mult_as
    >>> G = P * S.T        # mult_ast
    >>> A.sddmm(S, P)      # sddmm(S, A, P)

``*`` is the matrix product (as in BIDMach and Matlab), not numpy's elementwise product.  The
wrapper holds the array, never copies it, and unwraps with ``.value`` (or ``np.asarray``).
"""

from __future__ import annotations

import numpy as np

from ._arrays import as_dense, check_csc, device_of, is_sparse
from ._primitives import mult_as, mult_ast, sddmm

__all__ = ["GMat"]


class _Transposed:
    """The lazy transpose of a sparse GMat: only meaningful as the right operand of ``*``."""

    __array_priority__ = 1000

    def __init__(self, base: GMat):
        self.base = base

    @property
    def shape(self):
        return self.base.shape[::-1]

    @property
    def T(self):
        return self.base

    def __repr__(self):
        return f"{self.base!r}.T"


class GMat:
    """A dense array or CSC matrix with ``*`` meaning the rooflined matrix product.

    Parameters
    ----------
    value : numpy/cupy array (1-D or 2-D) or CSC matrix
        Validated once here (dtype float32/float64; CSC structure).

    Examples
    --------
    >>> import numpy as np
    >>> from roofline.gmat import GMat, powerlaw_csc
    >>> S = GMat(powerlaw_csc(1000, 50, 5, random_state=0))
    >>> A = GMat(np.ones((4, 1000), np.float32, order="F"))
    >>> (A * S).shape, (A * S * S.T).shape
    ((4, 50), (4, 1000))
    """

    __array_priority__ = 1000  # so that ndarray * GMat defers to GMat.__rmul__

    def __init__(self, value):
        if isinstance(value, GMat):
            value = value.value
        if is_sparse(value):
            check_csc(value, "value")
        else:
            as_dense(value, "value")
        self.value = value

    @property
    def shape(self):
        """tuple of int: the shape of the wrapped array or matrix."""
        return self.value.shape

    @property
    def dtype(self):
        """numpy.dtype: the value dtype (float32 or float64)."""
        return self.value.dtype

    @property
    def device(self) -> str:
        """{"cpu", "gpu"}: where the wrapped value lives."""
        return device_of(self.value)

    @property
    def is_sparse(self) -> bool:
        """bool: whether the wrapped value is a CSC matrix."""
        return is_sparse(self.value)

    @property
    def T(self):
        """The transpose: a lazy one for a sparse matrix (only usable as the right operand of
        ``*``, where ``A * S.T`` is :func:`mult_ast`), a ``GMat`` of the transposed view for
        a dense array."""
        if self.is_sparse:
            return _Transposed(self)
        return GMat(self.value.T)

    def __mul__(self, other):
        if np.isscalar(other):
            return GMat(self.value * other)
        if isinstance(other, _Transposed):
            if self.is_sparse or not other.base.is_sparse:
                return NotImplemented
            return GMat(mult_ast(self.value, other.base.value))
        other = other if isinstance(other, GMat) else GMat(other)
        if not self.is_sparse and other.is_sparse:
            return GMat(mult_as(self.value, other.value))
        if not self.is_sparse and not other.is_sparse:
            return GMat(self.value @ other.value)
        return NotImplemented

    def __rmul__(self, other):
        if np.isscalar(other):
            return GMat(other * self.value)
        return GMat(other).__mul__(self)

    def sddmm(self, S, B, *, scale: bool = True) -> GMat:
        """``SDDMM(S, self, B)``: ``dot(self[:, i], B[:, j]) (* S[i, j])`` at the nonzeros of S.

        Parameters
        ----------
        S : GMat or CSC matrix, shape (n, m)
            The sparsity pattern (and, with ``scale``, the factors).
        B : GMat or array, shape (k, m)
            The right dense operand; ``self`` is the left one, shape ``(k, n)``.
        scale : bool, default True
            Multiply each product by the value of ``S``.

        Returns
        -------
        GMat
            A CSC matrix with the pattern of ``S`` holding the products (see :func:`sddmm`).
        """
        S = S.value if isinstance(S, GMat) else S
        B = B.value if isinstance(B, GMat) else B
        return GMat(sddmm(S, self.value, B, scale=scale))

    def __array__(self, dtype=None, copy=None):
        v = self.value.toarray() if self.is_sparse else self.value
        if device_of(v) == "gpu":  # pragma: no cover - needs a GPU
            v = v.get()
        return np.asarray(v, dtype=dtype)

    def __repr__(self):
        kind = f"sparse CSC nnz={self.value.nnz}" if self.is_sparse else "dense"
        shape = "x".join(str(s) for s in self.shape)
        return f"GMat({shape} {np.dtype(self.dtype).name} {kind} on {self.device})"
