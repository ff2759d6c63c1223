"""Shared parts of the CPU-only factor models (:class:`KMeansModel`, :class:`NMFModel`).

Each keeps one parameter array of shape ``(n_rows, n_features)`` in Fortran order and the
model dtype, under the attribute named by ``_array`` (``"centers"``, ``"components"``).
"""

from __future__ import annotations

import numpy as np

from roofline import gmat


class CPUFactorModelMixin:
    """Options, the parameter array's properties, the CPU-only device checks and the input
    checks of a factor model whose parameters are one ``(n_rows, n_features)`` array.

    A subclass sets ``_array`` (the attribute name), ``_options`` (its Options class) and
    ``_check_device`` (whether :meth:`_check_ready` refuses GPU inputs with a TypeError), and
    defines the property ``_n_rows``.
    """

    _array = ""
    _options = None
    _check_device = False

    def _setup(self, opts, kwargs):
        """``self.opts`` from ``opts`` with ``kwargs`` overriding its fields, the parameter
        array unset, the seeding state and the step count reset."""
        base = (opts or self._options()).to_dict()
        base.update(kwargs)
        self.opts = self._options.from_dict(base, type(self)._model_name())
        setattr(self, self._array, None)
        self._seeded = False
        self._rng = np.random.default_rng(self.opts.seed)
        self._n_steps = 0

    @classmethod
    def _model_name(cls):
        # the class that mixes this in first (KMeansModel, NMFModel), kept in messages for
        # subclasses too
        for c in cls.__mro__:
            if CPUFactorModelMixin in c.__bases__:
                return c.__name__
        return cls.__name__

    def _require_cpu(self, device):
        if device != "cpu":
            raise ValueError(f"{self._model_name()} runs on the CPU only, got device={device!r}")

    def _allocate(self, n_features):
        """Zero parameter array of ``n_features`` columns; unseeded."""
        setattr(self, self._array,
                np.zeros((self._n_rows, n_features), self.dtype, order="F"))
        self._seeded = False

    def _checked_array(self, values):
        """``values`` as an array, checked to be 2-D with ``_n_rows`` rows."""
        c = np.asarray(values)
        if c.ndim != 2 or c.shape[0] != self._n_rows:
            raise ValueError(f"{self._array} has shape {c.shape}, expected ({self._n_rows}, "
                             f"n_features)")
        return c

    def _store_array(self, c):
        """Copy ``c`` into the parameter array (model dtype, Fortran order); seeded."""
        setattr(self, self._array, np.array(c, dtype=self.dtype, order="F", copy=True))
        self._seeded = True

    @property
    def dtype(self) -> np.dtype:
        """numpy.dtype: the dtype of the model's parameter array."""
        return np.dtype(self.opts.dtype)

    @property
    def n_features(self) -> int | None:
        """int or None: columns of the parameter array (None before it is allocated)."""
        a = getattr(self, self._array)
        return None if a is None else int(a.shape[1])

    @property
    def initialized(self) -> bool:
        """bool: whether the parameter array is allocated."""
        return getattr(self, self._array) is not None

    def to_device(self, device: str) -> None:
        """Move the parameters to ``device`` (only ``"cpu"``).

        Parameters
        ----------
        device : {"cpu"}

        Raises
        ------
        ValueError
            ``device`` is not ``"cpu"``.
        """
        self._require_cpu(device)

    def _check_ready(self, X, name="X"):
        a = getattr(self, self._array)
        if a is None:
            raise RuntimeError(f"the model is not initialised: call init(n_features), "
                               f"set_parameters({self._array}) or train it")
        if self._check_device and gmat.device_of(X) != "cpu":
            raise TypeError(f"{name} is on the GPU but {self._model_name()} runs on the CPU")
        if X.ndim != 2 or X.shape[0] != a.shape[1]:
            raise ValueError(f"{name} has {X.shape[0]} features (rows) but the model has "
                             f"{a.shape[1]}")
        if X.dtype != self.dtype:
            raise TypeError(f"{name} has dtype {X.dtype} but the model has dtype {self.dtype}; "
                            f"convert the data or set {self._model_name()}(dtype='{X.dtype}')")
