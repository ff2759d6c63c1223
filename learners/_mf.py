"""Matrix factorization: minibatch SGD/ADAGrad and alternating least squares (BIDMach's SFA/ALS).

Layout (BIDMach's): the ratings matrix ``S`` is ``n_items x n_users`` CSC, one column per user
(one example); the item factors are the model, a dense ``k x n_items`` Fortran array; the user
factors belong to the examples.  At the public boundary (:class:`MatrixFactorization`) the data
are a ``user_items`` matrix, ``n_users x n_items`` (CSR preferred: its arrays *are* ``S``'s CSC
arrays), the convention of ``implicit`` >= 0.5.

Explicit feedback (ratings), with ``r`` factors, user factors ``x_u``, item factors ``y_i``, user
and item biases ``b_u``, ``c_i`` and a global mean ``mu`` (``biases=True``; without biases all
three are 0)::

    F = sum_{(u,i) observed} (s_ui - mu - b_u - c_i - x_u.y_i)^2
        + lam * sum_u w_u (||x_u||^2 + b_u^2) + lam * sum_i w_i (||y_i||^2 + c_i^2)

with ``w_u``, ``w_i`` the numbers of ratings of ``u`` and ``i`` (``reg_weighting="counts"``,
ALS-WR, Spark MLlib's ALS) or 1 (``"none"``).  ``mu`` is the mean rating, not regularised.
With counts the objective is a sum over the ratings of ``e_ui^2 + lam (||z_u||^2 + ||z_i||^2)``,
which is what the minibatch model descends.

Implicit feedback (Hu, Koren and Volinsky 2008), confidence ``c_ui = 1 + alpha s_ui`` and
preference ``p_ui = 1`` at the nonzeros, ``c = 1``, ``p = 0`` elsewhere, no biases::

    F = sum_{all u, i} c_ui (p_ui - x_u.y_i)^2
        + lam * sum_u w_u ||x_u||^2 + lam * sum_i w_i ||y_i||^2

(``reg_weighting="none"`` by default here, ``implicit``'s convention; its ``alpha`` multiplies
the data *without* the 1, so ``implicit`` on ``1 + alpha s`` with its ``alpha=1`` is ours.)

ALS alternates exact minimisations over the users and the items (each a ridge system per row,
:mod:`roofline.kernels._als`: Cholesky, or for implicit feedback ``cg_steps`` warm-started
conjugate-gradient steps as ``implicit`` does, with the ``YtY`` trick).  The minibatch model
(:class:`MFModel`) solves a minibatch's user factors in closed form (one ridge system each, the
same kernel), evaluates the residuals at the observed entries with an SDDMM, and hands the item
factors' gradient ``2 [X;1] E^T`` (an ``A*S^T``) to an :class:`~roofline.learners.SGD` /
:class:`~roofline.learners.ADAGrad` step.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator

from roofline import gmat
from roofline.gmat import Options, option

from ._models import Model

__all__ = ["MFModel", "MFOptions", "MatrixFactorization", "als_objective"]

logger = logging.getLogger(__name__)


def _threads() -> int:
    """The threads numba's parallel kernels run on (idle OpenMP workers set to sleep first, as
    the kernels' own first call would)."""
    import numba

    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return numba.get_num_threads()


@contextlib.contextmanager
def _limit_threads(n):
    """Run the ALS kernels on at most ``n`` threads inside the block (None: unchanged)."""
    import numba

    prev = _threads()
    if n is None or n >= prev:
        yield
        return
    numba.set_num_threads(max(1, int(n)))
    try:
        yield
    finally:
        numba.set_num_threads(prev)


def _chunks(indptr, k):
    """Row chunks of about equal work for the ALS kernels (8 per thread)."""
    threads = _threads()
    n = indptr.shape[0] - 1
    n_chunks = max(1, min(n, 8 * threads))
    # a row's factorisation ~ k^3/6 flops, a nonzero's rank-1 update ~ k^2/2
    return gmat.als_row_chunks(indptr, k / 3.0 + 1.0, n_chunks)


def _csc(indptr, indices, data, shape):
    return sp.csc_matrix((data, indices, indptr), shape=shape)


def _residuals(S, Zi, Zu, mu, bias):
    """``pred - s`` at the nonzeros of ``S`` (items x users) by an SDDMM; float64."""
    k = Zi.shape[0]
    if bias:
        Ud = np.asfortranarray(Zu.copy())
        Ud[k - 1] = 1.0  # [x_u; 1] . [y_i; c_i] = x.y + c_i
        pred = gmat.sddmm(S, Zi, Ud, scale=False).data.astype(np.float64)
        cols = np.repeat(np.arange(S.shape[1]), np.diff(S.indptr))
        pred += mu + Zu[k - 1, cols]
    else:
        pred = gmat.sddmm(S, Zi, Zu, scale=False).data.astype(np.float64)
    return pred - S.data


def als_objective(S, item_factors, user_factors, *, regularization, implicit=False, alpha=1.0,
                  reg_weighting="counts", mu=0.0, biases=False):
    """The objective ``F`` of the module docstring (a sum, float64).

    Parameters
    ----------
    S : CSC matrix, shape (n_items, n_users)
        The data (ratings, or interaction strengths for implicit feedback).
    item_factors : array, shape (k, n_items)
        With ``biases``, the last row holds the item biases.
    user_factors : array, shape (k, n_users)
        With ``biases``, the last row holds the user biases.
    regularization : float
        ``lam``.
    implicit : bool
    alpha : float
    reg_weighting : {"counts", "none"}
    mu : float
    biases : bool

    Returns
    -------
    float
    """
    Zi = np.asfortranarray(item_factors)
    Zu = np.asfortranarray(user_factors)
    S = gmat.check_csc(S, "S")
    if S.dtype != Zi.dtype:
        S = S.astype(Zi.dtype)
    wu = np.diff(S.indptr).astype(np.float64) if reg_weighting == "counts" else 1.0
    wi = (np.bincount(S.indices, minlength=S.shape[0]).astype(np.float64)
          if reg_weighting == "counts" else 1.0)
    Zi64, Zu64 = Zi.astype(np.float64), Zu.astype(np.float64)
    reg = regularization * (float(np.sum(wu * np.sum(Zu64 * Zu64, axis=0)))
                            + float(np.sum(wi * np.sum(Zi64 * Zi64, axis=0))))
    if not implicit:
        e = _residuals(S, Zi, Zu, mu, biases)
        return float(e @ e) + reg
    pred = gmat.sddmm(S, Zi, Zu, scale=False).data.astype(np.float64)
    conf = 1.0 + alpha * S.data.astype(np.float64)
    obs = float(np.sum(conf * (1.0 - pred) ** 2 - pred * pred))
    every = float(np.sum((Zu64 @ Zu64.T) * (Zi64 @ Zi64.T)))  # sum over all (u, i) of pred^2
    return obs + every + reg


# -------------------------------------------------------------------------------------------
# the minibatch model


@dataclass
class MFOptions(Options):
    """Options of :class:`MFModel` (explicit feedback, ALS-WR regularisation)."""

    factors: int = option(32, "r: latent factors", low=1)
    biases: bool = option(True, "learn user and item biases and a global mean")
    regularization: float = option(0.05, "lam: per rating, lam (||z_u||^2 + ||z_i||^2)", low=0.0)
    dtype: str = option("float32", "value dtype", choices=("float32", "float64"))
    init_scale: float = option(0.1, "initial item factors ~ N(0, init_scale^2)", low=0.0)
    seed: int = option(0, "seed of the initialisation RNG", low=0)
    global_mean: float = option(0.0, "mu (with biases); fit_mean=True replaces it by the "
                                     "running mean of the training ratings")
    fit_mean: bool = option(True, "estimate mu as the running mean of the ratings trained on")
    fit_intercept: bool = option(False, "always False (the optimizers' intercept switch: mu is "
                                        "not a gradient parameter)")


class MFModel(Model):
    """Matrix factorization as a minibatch :class:`~roofline.learners.Model` (BIDMach's SFA).

    The examples are users: a minibatch is ``n_items x m`` CSC with the users' ratings.  The
    parameters are ``coef``, the item factors ``k x n_items`` (``k = r + 1`` with biases, the
    last row the item biases), and ``intercept`` = ``[mu]``.  Each step solves the minibatch's
    user factors in closed form (per-user ridge, the ALS kernel), takes the residuals at the
    ratings by an SDDMM and returns the item gradient ``2 [X; 1] E^T + 2 lam n_i^b z_i`` (an
    ``A*S^T``; ``n_i^b`` the item's ratings in the minibatch), the exact gradient of the
    minibatch's part of the ALS-WR objective with the user factors minimised out.  Train with
    :class:`~roofline.learners.SGD` or :class:`~roofline.learners.ADAGrad` (``fused=False``:
    the fused path is the GLM's).  The loss reported is ``sum e^2 + lam (sum_u n_u ||z_u||^2 +
    sum_i n_i^b ||z_i||^2)`` over the minibatch, per rating.

    Parameters
    ----------
    opts : MFOptions, optional
    **kwargs
        Override fields of ``opts``.
    """

    #: FactorSync's rule for Learner(comm=) (learners/_parallel.py)
    _sync_rule = "mf"

    def __init__(self, opts: MFOptions | None = None, **kwargs):
        base = (opts or MFOptions()).to_dict()
        base.update(kwargs)
        self.opts = MFOptions.from_dict(base, "MFModel")
        if self.opts.fit_intercept:
            raise ValueError("MFModel: fit_intercept must be False (mu is fit_mean's running "
                             "mean, not a gradient parameter)")
        self.coef = None
        self.intercept = None
        self._n_mean = 0.0

    @property
    def dtype(self) -> np.dtype:
        """numpy.dtype: the value dtype."""
        return np.dtype(self.opts.dtype)

    @property
    def k(self) -> int:
        """int: rows of ``coef`` (factors, plus one with biases)."""
        return self.opts.factors + int(self.opts.biases)

    @property
    def n_outputs(self) -> int:
        """int: ``k`` (the rows of the dense operand of the model's primitives)."""
        return self.k

    @property
    def n_features(self) -> int | None:
        """int or None: items (columns of ``coef``); None before :meth:`init`."""
        return None if self.coef is None else int(self.coef.shape[1])

    @property
    def initialized(self) -> bool:
        """bool: whether ``coef`` is allocated."""
        return self.coef is not None

    @property
    def mu(self) -> float:
        """float: the global mean (0 without biases)."""
        return float(self.intercept[0]) if self.opts.biases else 0.0

    def init(self, n_features: int, device: str = "cpu") -> None:
        """Allocate the item factors (``N(0, init_scale^2)``, zero biases) and ``mu``.

        Parameters
        ----------
        n_features : int
            Items.
        device : {"cpu"}
            Only the CPU (the ALS kernels are numba).
        """
        if device != "cpu":
            raise ValueError(f"MFModel runs on the CPU only, got device={device!r}")
        rng = np.random.default_rng(self.opts.seed)
        r = self.opts.factors
        coef = np.zeros((self.k, n_features), dtype=self.dtype, order="F")
        coef[:r] = rng.normal(0.0, self.opts.init_scale, (r, n_features))
        self.coef = coef
        self.intercept = np.array([self.opts.global_mean], dtype=self.dtype)
        self._n_mean = 0.0

    def parameters(self) -> dict:
        """The trained arrays.

        Returns
        -------
        dict
            ``coef`` (the item factors) and ``intercept`` (``[mu]``).
        """
        return {"coef": self.coef, "intercept": self.intercept}

    def set_parameters(self, coef, intercept) -> None:
        """Replace the parameters (from a checkpoint or another model).

        Parameters
        ----------
        coef : array, shape (k, n_items)
        intercept : array, shape (1,)
        """
        coef = np.asarray(coef)
        if coef.ndim != 2 or coef.shape[0] != self.k:
            raise ValueError(f"coef must have {self.k} rows, got shape {coef.shape}")
        self.coef = np.asfortranarray(coef, dtype=self.dtype)
        self.intercept = np.asarray(intercept, dtype=self.dtype).reshape(1).copy()

    def to_device(self, device: str) -> None:
        """Only ``"cpu"``.

        Parameters
        ----------
        device : {"cpu"}
        """
        if device != "cpu":
            raise ValueError(f"MFModel runs on the CPU only, got device={device!r}")

    def linear(self, X, cache=None):
        """Not a GLM: ADAGrad's fused path does not apply.

        Parameters
        ----------
        X : CSC matrix or array
            Unused.
        cache : BufferCache, optional
            Unused.

        Raises
        ------
        TypeError
            Always (use ``ADAGrad(fused=False)``).
        """
        raise TypeError("MFModel trains with ADAGrad(fused=False) or SGD (the fused ADAGrad "
                        "step is the GLM's)")

    # -- the minibatch computations ----------------------------------------------------------
    def _check_batch(self, X):
        if not gmat.is_sparse(X):
            raise TypeError(f"MFModel needs sparse minibatches (items x users CSC), got "
                            f"{type(X).__name__}")
        gmat.check_csc(X, "X")
        if X.shape[0] != self.n_features:
            raise ValueError(f"the minibatch has {X.shape[0]} items (rows) but the model has "
                             f"{self.n_features}")
        if X.dtype != self.dtype:
            raise TypeError(f"the minibatch has dtype {X.dtype} but the model {self.dtype}")

    def solve_users(self, X) -> np.ndarray:
        """The closed-form user factors (and biases) of the columns of ``X``.

        Parameters
        ----------
        X : CSC matrix, shape (n_items, m)

        Returns
        -------
        ndarray, shape (k, m), Fortran order
        """
        self._check_batch(X)
        U = np.empty((self.k, X.shape[1]), dtype=self.dtype, order="F")
        gmat.als_explicit(X.indptr, X.indices, X.data, self.coef, self.opts.biases, self.mu,
                             self.opts.regularization, True, _chunks(X.indptr, self.k), U)
        return U

    def _forward(self, X):
        U = self.solve_users(X)
        E = gmat.sddmm(X, self.coef, self._design(U), scale=False)
        e = E.data.astype(np.float64) if E.data.dtype != np.float64 else E.data
        if self.opts.biases:
            cols = np.repeat(np.arange(X.shape[1]), np.diff(X.indptr))
            e = e + self.mu + U[self.k - 1, cols]
        e = e - X.data
        cnt_u = np.diff(X.indptr).astype(np.float64)
        cnt_i = np.bincount(X.indices, minlength=X.shape[0]).astype(np.float64)
        lam = self.opts.regularization
        U64, C64 = U.astype(np.float64), self.coef.astype(np.float64)
        loss = float(e @ e) + lam * (float(cnt_u @ np.sum(U64 * U64, axis=0))
                                     + float(cnt_i @ np.sum(C64 * C64, axis=0)))
        return U, E, e, cnt_i, loss

    def _design(self, U):
        if not self.opts.biases:
            return U
        Ud = U.copy(order="F")
        Ud[self.k - 1] = 1.0
        return Ud

    def loss(self, batch, cache=None) -> tuple[float, float]:
        """The minibatch's objective (user factors solved) and its number of ratings.

        Parameters
        ----------
        batch : Minibatch
        cache : BufferCache, optional
            Unused.

        Returns
        -------
        loss_sum : float
        weight_sum : float
        """
        X = batch.X
        if X.nnz == 0:
            return 0.0, 0.0
        return self._forward(X)[4], float(X.nnz)

    def _track_mean(self, X):
        if self.opts.biases and self.opts.fit_mean and X.nnz:
            n = self._n_mean + X.nnz
            self.intercept[0] += (float(X.data.sum(dtype=np.float64)) - X.nnz * self.mu) / n
            self._n_mean = n

    def gradient(self, batch, cache=None):
        """Loss and gradient of the item factors for one minibatch of users.

        Parameters
        ----------
        batch : Minibatch
        cache : BufferCache, optional
            Unused.

        Returns
        -------
        tuple
            ``(loss_sum, weight_sum, G, g0, None)``: ``G`` ``(k, n_items)`` the summed gradient,
            ``g0`` ``(1,)`` zeros (``mu`` is not a gradient parameter).
        """
        X = batch.X
        self._check_batch(X)
        self._track_mean(X)
        g0 = np.zeros(1, dtype=self.dtype)
        if X.nnz == 0:
            return 0.0, 0.0, np.zeros_like(self.coef), g0, None
        U, E, e, cnt_i, loss = self._forward(X)
        E.data[:] = 2.0 * e
        G = gmat.mult_ast(self._design(U), E)  # 2 [X; 1] E^T
        G += (2.0 * self.opts.regularization) * cnt_i.astype(self.dtype) * self.coef
        return loss, float(X.nnz), G, g0, None

    def predict(self, X, cache=None):
        """Predicted ratings at the nonzeros of ``X`` (users folded in from ``X`` itself).

        Parameters
        ----------
        X : CSC matrix, shape (n_items, m)
        cache : BufferCache, optional
            Unused.

        Returns
        -------
        ndarray, shape (nnz,)
            In the order of ``X.data``.
        """
        _, _, e, _, _ = self._forward(X)
        return (e + X.data).astype(self.dtype)

    def flops_per_step(self, batch) -> float:
        """Flops of one step: the user systems (``nnz k^2 + m k^3 / 3``), the SDDMM and the
        ``A*S^T``.

        Parameters
        ----------
        batch : Minibatch

        Returns
        -------
        float
        """
        X, k = batch.X, self.k
        return float(X.nnz * k * k + X.shape[1] * k ** 3 / 3.0
                     + gmat.cost_sddmm(X, k, scale=False).flops
                     + gmat.cost_mult_ast(X, k).flops)

    def cost(self, batch) -> gmat.Cost:
        """Compulsory bytes and flops of one step, from the primitives' cost models: the SDDMM
        (:func:`~roofline.gmat.cost_sddmm`, unscaled) and the ``A*S^T``
        (:func:`~roofline.gmat.cost_mult_ast`) move the bytes; the flops are
        :meth:`flops_per_step`'s (the user systems work on the columns those read).  The
        :class:`~roofline.learners.Learner`'s roofline gauge reads it.

        Parameters
        ----------
        batch : Minibatch
            A sparse minibatch.

        Returns
        -------
        roofline.gmat.Cost
        """
        X, k = batch.X, self.k
        parts = [gmat.cost_sddmm(X, k, scale=False), gmat.cost_mult_ast(X, k)]
        return gmat.Cost("MF step", k, X.dtype, int(X.nnz), sum(p.bytes for p in parts),
                         int(round(self.flops_per_step(batch))), {"primitives": len(parts)})


# -------------------------------------------------------------------------------------------
# the estimator


def _as_user_items(X, name="X", dtype=np.float32):
    """``X`` as a CSR matrix ``n_users x n_items`` with sorted unique indices, checked."""
    if not sp.issparse(X):
        raise TypeError(f"{name} must be a scipy sparse matrix (users x items), got "
                        f"{type(X).__name__}")
    if X.ndim != 2:
        raise ValueError(f"{name} must be 2-D, got {X.ndim}-D")
    X = sp.csr_matrix(X, dtype=dtype, copy=False)
    if not X.has_canonical_format:
        X = X.copy()
        X.sum_duplicates()
        X.sort_indices()
    if X.nnz and not np.all(np.isfinite(X.data)):
        raise ValueError(f"{name} has non-finite values")
    return X


def _items_users(X):
    """The CSC ``n_items x n_users`` matrix with the arrays of the CSR ``X`` (no copy)."""
    return _csc(X.indptr, X.indices, X.data, (X.shape[1], X.shape[0]))


def _packed_reduce(comm, parts):
    """All-reduce (sum) of several float64 arrays in one message."""
    flat = np.concatenate([np.asarray(p, np.float64).ravel() for p in parts])
    out = np.asarray(comm.allreduce(flat), dtype=np.float64)
    res, o = [], 0
    for p in parts:
        res.append(out[o:o + p.size].reshape(p.shape))
        o += p.size
    return res


class MatrixFactorization(BaseEstimator):
    """Matrix factorization for ratings or implicit feedback (scikit-learn / ``implicit`` API).

    Fits the objective of :mod:`roofline.learners._mf` (module docstring) by alternating least
    squares (``solver="als"``) or minibatch SGD/ADAGrad through :class:`MFModel` and a
    :class:`~roofline.learners.Learner` (``solver="sgd"``/``"adagrad"``, explicit feedback).

    Data: ``X`` is ``user_items``, ``n_users x n_items`` sparse (CSR preferred, ``implicit``'s
    convention); its stored entries are the observed ratings (explicit) or the interaction
    strengths ``s_ui >= 0`` (implicit: confidence ``1 + alpha s_ui``).

    Parameters
    ----------
    factors : int, default 32
        ``r``.
    regularization : float, default 0.05
        ``lam``.
    implicit : bool, default False
        Implicit feedback (Hu, Koren and Volinsky).
    alpha : float, default 1.0
        Confidence slope of implicit feedback.
    biases : bool or "auto", default "auto"
        Global mean and user/item biases; "auto" = on for explicit, off for implicit (implicit
        feedback takes none).
    reg_weighting : {"auto", "counts", "none"}, default "auto"
        Scale ``lam`` by each row's count of ratings ("counts": ALS-WR, Spark's ALS) or not;
        "auto" = counts for explicit, none for implicit (``implicit``'s convention).
    solver : {"als", "sgd", "adagrad"}, default "als"
    iterations : int, default 15
        ALS iterations (one user and one item half-step each), or passes of the minibatch solvers.
    use_cg : bool or "auto", default "auto"
        ``cg_steps`` conjugate-gradient steps per row, warm-started from the previous factors,
        instead of an exact Cholesky solve; "auto" = CG for implicit feedback (``implicit``'s
        default), Cholesky for explicit (Spark's).
    cg_steps : int, default 3
    learning_rate : float, default 0.05
        Minibatch solvers' step size.
    batch_size : int, default 1000
        Users per minibatch.
    init_scale : float or None, default None
        Initial item factors ``~ N(0, init_scale^2)`` (absolute values for implicit feedback);
        None: ``1 / sqrt(factors)`` for explicit ALS (unit-norm factors, as Spark starts),
        ``0.01`` for implicit ALS (``implicit``'s scale), ``0.1`` for the minibatch solvers.
    dtype : {"float32", "float64"}, default "float32"
    random_state : int, default 0
    num_threads : int, default 0
        Threads of the ALS kernels (0: numba's setting).

    Attributes
    ----------
    user_factors_ : ndarray, shape (n_users, r)
    item_factors_ : ndarray, shape (n_items, r)
    user_bias_, item_bias_ : ndarray or None
    global_mean_ : float
    objective_ : float
        ``F`` at the end of :meth:`fit` (over every rank with ``comm``).
    n_iter_ : int
    iteration_seconds_ : list of float
        Time of each ALS iteration (the callback's time excluded).
    """

    def __init__(self, factors=32, regularization=0.05, implicit=False, alpha=1.0,
                 biases="auto", reg_weighting="auto", solver="als", iterations=15,
                 use_cg="auto", cg_steps=3, learning_rate=0.05, batch_size=1000, init_scale=None,
                 dtype="float32", random_state=0, num_threads=0):
        self.factors = factors
        self.regularization = regularization
        self.implicit = implicit
        self.alpha = alpha
        self.biases = biases
        self.reg_weighting = reg_weighting
        self.solver = solver
        self.iterations = iterations
        self.use_cg = use_cg
        self.cg_steps = cg_steps
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.init_scale = init_scale
        self.dtype = dtype
        self.random_state = random_state
        self.num_threads = num_threads

    # -- parameters ---------------------------------------------------------------------------
    def _resolved(self):
        def integer(name, low):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {v!r}")

        integer("factors", 1)
        integer("iterations", 1)
        integer("cg_steps", 1)
        integer("batch_size", 1)
        integer("num_threads", 0)
        for name in ("regularization", "alpha", "init_scale"):
            v = getattr(self, name)
            if v is None and name == "init_scale":
                continue
            if not isinstance(v, (int, float, np.floating, np.integer)) or not v >= 0 \
                    or not math.isfinite(v):
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate!r}")
        if self.solver not in ("als", "sgd", "adagrad"):
            raise ValueError(f"solver must be 'als', 'sgd' or 'adagrad', got {self.solver!r}")
        if self.dtype not in ("float32", "float64"):
            raise ValueError(f"dtype must be 'float32' or 'float64', got {self.dtype!r}")
        if self.biases not in ("auto", True, False):
            raise ValueError(f"biases must be True, False or 'auto', got {self.biases!r}")
        if self.reg_weighting not in ("auto", "counts", "none"):
            raise ValueError(f"reg_weighting must be 'auto', 'counts' or 'none', got "
                             f"{self.reg_weighting!r}")
        if self.use_cg not in ("auto", True, False):
            raise ValueError(f"use_cg must be True, False or 'auto', got {self.use_cg!r}")
        implicit = bool(self.implicit)
        biases = (not implicit) if self.biases == "auto" else bool(self.biases)
        if implicit and biases:
            raise ValueError("biases=True needs explicit feedback (implicit=False)")
        weighting = self.reg_weighting
        if weighting == "auto":
            weighting = "none" if implicit else "counts"
        if self.solver != "als":
            if implicit:
                raise ValueError(f"solver={self.solver!r} trains explicit feedback; implicit "
                                 f"feedback needs solver='als'")
            if weighting != "counts":
                raise ValueError(f"solver={self.solver!r} minimises the ALS-WR objective "
                                 f"(reg_weighting='counts'), got {weighting!r}")
        return implicit, biases, weighting

    @property
    def _k(self):
        return self.factors + int(self._biases)

    # -- fitted views -------------------------------------------------------------------------
    def _check_fitted(self):
        if getattr(self, "_Zi", None) is None:
            raise RuntimeError("this MatrixFactorization is not fitted: call fit() first")

    @property
    def item_factors_(self):
        """ndarray, shape (n_items, r): the item factors (a view)."""
        self._check_fitted()
        return self._Zi[:self.factors].T

    @property
    def user_factors_(self):
        """ndarray, shape (n_users, r): the user factors (a view)."""
        self._check_fitted()
        return self._Zu[:self.factors].T

    @property
    def item_bias_(self):
        """ndarray of shape (n_items,), or None without biases."""
        self._check_fitted()
        return self._Zi[self.factors] if self._biases else None

    @property
    def user_bias_(self):
        """ndarray of shape (n_users,), or None without biases."""
        self._check_fitted()
        return self._Zu[self.factors] if self._biases else None

    # -- fitting ------------------------------------------------------------------------------
    def fit(self, X, y=None, *, comm=None, callback=None):
        """Fit to ``X`` (``user_items``).

        Parameters
        ----------
        X : sparse matrix, shape (n_users, n_items)
            With ``comm``: this rank's users (every rank the same ``n_items``); the user factors
            are then this rank's and the item factors are replicated.
        y : None
            Ignored.
        comm : roofline.comm.Communicator, optional
            Fit ALS over the ranks of ``comm`` (collective): the item half-step sums the
            per-item normal equations over the ranks (one all-reduce per iteration).
        callback : callable, optional
            ``callback(iteration, seconds)`` after each ALS iteration (``seconds``: the
            cumulative fitting time without the callbacks); the fitted attributes hold the
            current factors.

        Returns
        -------
        self
        """
        implicit, biases, weighting = self._resolved()
        X = _as_user_items(X, "X", np.dtype(self.dtype))
        if implicit and X.nnz and X.data.min() < 0:
            raise ValueError("X has negative values: implicit feedback needs interaction "
                             "strengths >= 0")
        self._implicit, self._biases, self._weighting = implicit, biases, weighting
        self.n_users_, self.n_items_ = X.shape
        self.user_items_ = X
        self._comm = comm
        if self.solver != "als":
            if comm is not None:
                raise ValueError("fit(comm=) trains ALS (solver='als')")
            self._model = None
            self._Zi = None
            return self._fit_minibatch(X, reset=True)
        with _limit_threads(self.num_threads or None):
            self._fit_als(X, comm, callback)
        return self

    def _init_items(self, n_items):
        rng = np.random.default_rng(self.random_state)
        k, dt = self._k, np.dtype(self.dtype)
        Zi = np.zeros((k, n_items), dtype=dt, order="F")
        scale = self.init_scale
        if scale is None:
            scale = 0.01 if self._implicit else 1.0 / math.sqrt(self.factors)
        Zi[:self.factors] = rng.normal(0.0, scale, (self.factors, n_items))
        if self._implicit:  # implicit's start: U(0, 1) * 0.01, positive factors
            Zi[:self.factors] = np.abs(Zi[:self.factors])
        return Zi

    def _fit_als(self, X, comm, callback):
        n_users, n_items = X.shape
        if comm is not None:
            got = np.asarray(comm.allreduce(np.array([float(n_items), -float(n_items)]),
                                            op="max"))
            if got[0] != -got[1]:
                raise ValueError(f"X has {n_items} items on rank {comm.rank} but the ranks "
                                 f"disagree (between {-got[1]:.0f} and {got[0]:.0f})")
        S = _items_users(X)  # items x users
        St = X.T.tocsr()  # items x users CSR -> its arrays are users x items CSC
        St = _csc(St.indptr, St.indices, St.data, (n_users, n_items))
        S.has_sorted_indices = True
        dt = np.dtype(self.dtype)
        k = self._k
        mu = 0.0
        if self._biases:
            tot = np.array([float(X.data.sum(dtype=np.float64)), float(X.nnz)])
            if comm is not None:
                tot = np.asarray(comm.allreduce(tot))
            mu = tot[0] / tot[1] if tot[1] else 0.0
        self.global_mean_ = float(mu)
        self._Zi = self._init_items(n_items)
        self._Zu = np.zeros((k, n_users), dtype=dt, order="F")
        ub, ib = _chunks(S.indptr, k), _chunks(St.indptr, k)
        lam, weighted = float(self.regularization), self._weighting == "counts"
        use_cg = self._implicit if self.use_cg == "auto" else bool(self.use_cg)
        cg = self.cg_steps if use_cg else 0
        self.iteration_seconds_ = []
        self._warm_kernels(S, St, mu, lam, weighted, cg, comm)
        elapsed = 0.0
        for it in range(self.iterations):
            t0 = time.perf_counter()
            self._user_step(S, ub, mu, lam, weighted, cg)
            self._item_step(St, ib, mu, lam, weighted, cg, comm)
            dt_it = time.perf_counter() - t0
            elapsed += dt_it
            self.iteration_seconds_.append(dt_it)
            self.n_iter_ = it + 1
            if callback is not None:
                callback(it + 1, elapsed)
        self.objective_ = self.objective()

    def _warm_kernels(self, S, St, mu, lam, weighted, cg, comm):
        """Both half-steps on no rows (empty chunk bounds; the arguments' types those of the
        iterations): the first call of a kernel in a process loads it from numba's cache and
        starts the thread pool, about 30 ms for the implicit CG kernel on the 2-core test
        machine, which belongs to the set-up (as the transposes of ``X`` do), not to the
        first iteration's time.  Nothing is changed."""
        none = np.zeros(2, dtype=np.int64)
        self._user_step(S, none, mu, lam, weighted, cg)
        if comm is None:
            self._item_step(St, none, mu, lam, weighted, cg, None)

    def _user_step(self, S, bounds, mu, lam, weighted, cg):
        Zi, Zu = self._Zi, self._Zu
        if not self._implicit:
            if cg:
                gmat.als_explicit_cg(S.indptr, S.indices, S.data, Zi, self._biases, mu, lam,
                                     weighted, cg, bounds, Zu)
            else:
                gmat.als_explicit(S.indptr, S.indices, S.data, Zi, self._biases, mu, lam,
                                  weighted, bounds, Zu)
            return
        YtY = Zi @ Zi.T
        if cg:
            gmat.als_implicit_cg(S.indptr, S.indices, S.data, Zi, YtY, float(self.alpha),
                                    lam, weighted, cg, bounds, Zu)
        else:
            gmat.als_implicit_cholesky(S.indptr, S.indices, S.data, Zi, YtY,
                                          float(self.alpha), lam, weighted, bounds, Zu)

    def _item_step(self, St, bounds, mu, lam, weighted, cg, comm):
        Zi, Zu = self._Zi, self._Zu
        if comm is None:
            if not self._implicit:
                if cg:
                    gmat.als_explicit_cg(St.indptr, St.indices, St.data, Zu, self._biases, mu,
                                         lam, weighted, cg, bounds, Zi)
                else:
                    gmat.als_explicit(St.indptr, St.indices, St.data, Zu, self._biases, mu,
                                      lam, weighted, bounds, Zi)
                return
            XtX = Zu @ Zu.T
            if cg:
                gmat.als_implicit_cg(St.indptr, St.indices, St.data, Zu, XtX,
                                        float(self.alpha), lam, weighted, cg, bounds, Zi)
            else:
                gmat.als_implicit_cholesky(St.indptr, St.indices, St.data, Zu, XtX,
                                              float(self.alpha), lam, weighted, bounds, Zi)
            return
        # distributed: this rank's part of every item's normal equations, summed over ranks
        k, n_items = Zi.shape
        dt = Zi.dtype
        A = np.empty((n_items, k, k), dtype=dt)
        B = np.empty((n_items, k), dtype=dt)
        counts = np.empty(n_items, dtype=np.float64)
        gmat.als_normal_equations(St.indptr, St.indices, St.data, Zu, self._biases, mu,
                                     self._implicit, float(self.alpha), bounds, A, B, counts)
        parts = [A, B, counts]
        if self._implicit:
            parts.append(Zu.astype(np.float64) @ Zu.T.astype(np.float64))
        got = _packed_reduce(comm, parts)
        A, B, counts = got[0].astype(dt), got[1].astype(dt), got[2]
        base = got[3].astype(dt) if self._implicit else np.zeros((k, k), dtype=dt)
        chunks = gmat.als_row_chunks(np.arange(n_items + 1, dtype=np.int64) * k, 0.0,
                                        max(1, min(n_items, 8 * _threads())))
        gmat.als_solve_systems(A, B, counts, base, lam, weighted, cg, chunks, Zi)

    def _fit_minibatch(self, X, reset):
        from roofline.datasources import MatSource

        from ._learner import Learner
        from ._optimizers import SGD, ADAGrad

        S = _items_users(X)
        if reset or getattr(self, "_model", None) is None:
            mean = float(X.data.mean()) if (self._biases and X.nnz) else 0.0
            self._model = MFModel(factors=self.factors, biases=self._biases,
                                  regularization=float(self.regularization), dtype=self.dtype,
                                  init_scale=0.1 if self.init_scale is None
                                  else float(self.init_scale),
                                  seed=int(self.random_state), global_mean=mean,
                                  fit_mean=False)
            self._model.init(X.shape[1])
            if self.solver == "sgd":
                self._optimizer = SGD(lr=float(self.learning_rate), schedule="constant")
            else:
                self._optimizer = ADAGrad(lr=float(self.learning_rate), fused=False)
            self._optimizer.init(self._model)
        elif self._model.n_features != X.shape[1]:
            raise ValueError(f"X has {X.shape[1]} items but the model was fitted with "
                             f"{self._model.n_features}")
        learner = Learner(MatSource(S, batch_size=int(self.batch_size)), self._model,
                          self._optimizer, n_passes=self.iterations if reset else 1,
                          progress=False)
        learner._ready = True  # the optimizer state carries over between partial_fit calls
        with _limit_threads(self.num_threads or None):
            learner.train()
            self._Zi = self._model.coef
            self.global_mean_ = self._model.mu
            self._Zu = self._fold_in(S)
        self.n_iter_ = getattr(self, "n_iter_", 0) + (self.iterations if reset else 1)
        self.objective_ = self.objective()
        return self

    def partial_fit(self, X, y=None):
        """One pass of the minibatch solver over ``X`` (``solver="sgd"`` or ``"adagrad"``).

        The first call fixes the items (columns of ``X``) and the global mean.  The user
        factors are then those of ``X``'s users (folded in).

        Parameters
        ----------
        X : sparse matrix, shape (n_users, n_items)
        y : None
            Ignored.

        Returns
        -------
        self
        """
        implicit, biases, weighting = self._resolved()
        if self.solver == "als":
            raise ValueError("partial_fit trains the minibatch solvers (solver='sgd' or "
                             "'adagrad'), not ALS")
        X = _as_user_items(X, "X", np.dtype(self.dtype))
        first = getattr(self, "_model", None) is None
        self._implicit, self._biases, self._weighting = implicit, biases, weighting
        self.n_users_, self.n_items_ = X.shape
        self.user_items_ = X
        self._comm = None
        return self._fit_minibatch(X, reset=False) if not first else self._first_partial(X)

    def _first_partial(self, X):
        it = self.iterations
        try:
            self.iterations = 1
            self._fit_minibatch(X, reset=True)
        finally:
            self.iterations = it
        return self

    # -- using the model ----------------------------------------------------------------------
    def _fold_in(self, S):
        """User factors (k x m) for the columns of ``S`` (items x users) at the item factors."""
        Zi, k = self._Zi, self._k
        Zu = np.zeros((k, S.shape[1]), dtype=Zi.dtype, order="F")
        bounds = _chunks(S.indptr, k)
        lam, weighted = float(self.regularization), self._weighting == "counts"
        if self._implicit:
            gmat.als_implicit_cholesky(S.indptr, S.indices, S.data, Zi, Zi @ Zi.T,
                                          float(self.alpha), lam, weighted, bounds, Zu)
        else:
            gmat.als_explicit(S.indptr, S.indices, S.data, Zi, self._biases,
                                 self.global_mean_, lam, weighted, bounds, Zu)
        return Zu

    def _check_X_items(self, X, name="X"):
        X = _as_user_items(X, name, self._Zi.dtype)
        if X.shape[1] != self.n_items_:
            raise ValueError(f"{name} has {X.shape[1]} items (columns) but the model was "
                             f"fitted with {self.n_items_}")
        return X

    def transform(self, X):
        """User factors of the rows of ``X`` (folded in: one ridge system per user at the
        fitted item factors; Cholesky for implicit feedback).

        Parameters
        ----------
        X : sparse matrix, shape (m, n_items)

        Returns
        -------
        ndarray, shape (m, r)
        """
        self._check_fitted()
        X = self._check_X_items(X)
        if self._implicit and X.nnz and X.data.min() < 0:
            raise ValueError("X has negative values: implicit feedback needs interaction "
                             "strengths >= 0")
        return np.ascontiguousarray(self._fold_in(_items_users(X))[:self.factors].T)

    def objective(self, X=None) -> float:
        """``F`` at the fitted factors on the training data (``X=None``; over every rank with
        ``comm``, collective) or on ``X`` for the same users.

        Parameters
        ----------
        X : sparse matrix, shape (n_users, n_items), optional

        Returns
        -------
        float
        """
        self._check_fitted()
        X = self.user_items_ if X is None else self._check_X_items(X)
        if X.shape[0] != self.n_users_:
            raise ValueError(f"X has {X.shape[0]} users but the model has {self.n_users_}")
        S = _items_users(X)
        comm = getattr(self, "_comm", None)
        if comm is None:
            return als_objective(S, self._Zi, self._Zu, regularization=self.regularization,
                                 implicit=self._implicit, alpha=self.alpha,
                                 reg_weighting=self._weighting, mu=self.global_mean_,
                                 biases=self._biases)
        # the item terms are counted once: the sum of per-rank objectives counts the item
        # penalty size times (and, for implicit, the all-pairs term per rank is right)
        local = als_objective(S, self._Zi, self._Zu, regularization=self.regularization,
                              implicit=self._implicit, alpha=self.alpha,
                              reg_weighting=self._weighting, mu=self.global_mean_,
                              biases=self._biases)
        Zi64 = self._Zi.astype(np.float64)
        if self._weighting == "counts":
            wi = np.bincount(S.indices, minlength=S.shape[0]).astype(np.float64)
            item_pen = self.regularization * float(wi @ np.sum(Zi64 * Zi64, axis=0))
            total = float(np.asarray(comm.allreduce(np.array([local])))[0])
        else:
            item_pen = self.regularization * float(np.sum(Zi64 * Zi64))
            total = float(np.asarray(comm.allreduce(np.array([local - item_pen])))[0])
            total += item_pen
        return total

    def _check_ids(self, ids, n, what):
        a = np.asarray(ids)
        if a.dtype.kind not in "iu":
            raise TypeError(f"{what} ids must be integers, got dtype {a.dtype}")
        bad = (a < 0) | (a >= n)
        if np.any(bad):
            raise ValueError(f"{what} id {int(a[bad].ravel()[0])} was never seen in fit "
                             f"({what} ids are 0..{n - 1})")
        return a

    def predict(self, users, items):
        """Predicted scores ``mu + b_u + c_i + x_u.y_i`` (explicit) or ``x_u.y_i``.

        Parameters
        ----------
        users, items : int or array of int (broadcast together)

        Returns
        -------
        float or ndarray

        Raises
        ------
        ValueError
            An id never seen in :meth:`fit`.
        """
        self._check_fitted()
        u = self._check_ids(users, self.n_users_, "user")
        i = self._check_ids(items, self.n_items_, "item")
        u, i = np.broadcast_arrays(u, i)
        Zu = self._Zu.astype(np.float64)[:, u.ravel()]
        Zi = self._Zi.astype(np.float64)[:, i.ravel()]
        r = self.factors
        out = np.einsum("ij,ij->j", Zu[:r], Zi[:r])
        if self._biases:
            out += self.global_mean_ + Zu[r] + Zi[r]
        out = out.reshape(u.shape)
        return float(out) if out.ndim == 0 else out

    def recommend(self, userid, N=10, filter_seen=True):
        """The top ``N`` items of a user by predicted score.

        Parameters
        ----------
        userid : int
        N : int, default 10
        filter_seen : bool, default True
            Leave out the items the user has in the training data.

        Returns
        -------
        ids : ndarray of int, shape (<= N,)
            Best first.
        scores : ndarray of float, shape (<= N,)
        """
        self._check_fitted()
        if not isinstance(N, (int, np.integer)) or isinstance(N, bool) or N < 1:
            raise ValueError(f"N must be a positive integer, got {N!r}")
        u = int(self._check_ids(userid, self.n_users_, "user"))
        scores = self.predict(np.full(self.n_items_, u), np.arange(self.n_items_))
        if filter_seen:
            X = self.user_items_
            scores[X.indices[X.indptr[u]:X.indptr[u + 1]]] = -np.inf
        n = min(N, self.n_items_)
        top = np.argpartition(-scores, n - 1)[:n]
        top = top[np.argsort(-scores[top], kind="stable")]
        top = top[np.isfinite(scores[top])]
        return top, scores[top]

    def similar_items(self, itemid, N=10):
        """The ``N`` items with the most similar factors (cosine), the item itself first.

        Parameters
        ----------
        itemid : int
        N : int, default 10

        Returns
        -------
        ids : ndarray of int, shape (N,)
        scores : ndarray of float, shape (N,)
        """
        self._check_fitted()
        if not isinstance(N, (int, np.integer)) or isinstance(N, bool) or N < 1:
            raise ValueError(f"N must be a positive integer, got {N!r}")
        i = int(self._check_ids(itemid, self.n_items_, "item"))
        Y = self._Zi[:self.factors].astype(np.float64)
        norms = np.linalg.norm(Y, axis=0)
        norms[norms == 0] = 1.0
        sims = (Y[:, i] @ Y) / (norms * norms[i])
        n = min(N, self.n_items_)
        top = np.argpartition(-sims, n - 1)[:n]
        top = top[np.argsort(-sims[top], kind="stable")]
        return top, sims[top]

    def score(self, X, y=None, k=10):
        """Negative RMSE of the predictions at ``X``'s entries (explicit), or the mean
        precision at ``k`` of :meth:`recommend` against ``X``'s items (implicit).

        Parameters
        ----------
        X : sparse matrix, shape (n_users, n_items)
            Held-out entries of the fitted users.
        y : None
            Ignored.
        k : int, default 10
            Implicit feedback: the cut-off.

        Returns
        -------
        float
            Higher is better.
        """
        self._check_fitted()
        X = self._check_X_items(X)
        if X.shape[0] != self.n_users_:
            raise ValueError(f"X has {X.shape[0]} users but the model has {self.n_users_}")
        if X.nnz == 0:
            raise ValueError("X has no entries to score")
        if not self._implicit:
            rows = np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))
            e = self.predict(rows, X.indices) - X.data
            return -float(np.sqrt(np.mean(e * e)))
        hits, n = 0.0, 0
        for u in np.flatnonzero(np.diff(X.indptr)):
            ids, _ = self.recommend(int(u), N=k)
            held = X.indices[X.indptr[u]:X.indptr[u + 1]]
            hits += np.isin(ids, held).sum() / min(k, held.size)
            n += 1
        return hits / n
