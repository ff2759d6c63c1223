"""Latent Dirichlet Allocation: online and batch variational Bayes, and BIDMach's SAME sampler.

Data layout: the documents matrix ``X`` is CSC, ``n_words x n_documents`` (one column = one
document = one example of a DataSource), word counts as values.  The model holds the topic-word
variational parameters ``lambda`` (``components_``, ``K x V``, Fortran order), as Hoffman, Blei
and Bach (2010) and scikit-learn's ``LatentDirichletAllocation`` do.

Variational Bayes (``method="vb"``)
-----------------------------------
With ``Elog_beta = psi(lambda) - psi(lambda 1)`` (per topic), ``B = exp(Elog_beta)`` (``K x V``)
and, for the documents of a minibatch, ``gamma`` (``K x m``), ``T = exp(psi(gamma) -
psi(1^T gamma))``, the E-step iterates, for every document still changing::

    N      = SDDMM(X, B, T) + eps                 # sum_k B[k, w] T[k, d] at the nonzeros
    gamma  = alpha + T .* (B * (X ./ N))          # the primitive A*S
    T      = exp(psi(gamma) - psi(1^T gamma))

until the mean absolute change of a document's ``gamma`` is below ``mean_change_tol`` (that
document then stops, as in scikit-learn) or ``max_doc_update_iter`` iterations; the sufficient
statistics are ``sstats = B .* (T * (X ./ N)^T)`` (the primitive A*S^T).  The M-step is, for a
minibatch of ``m`` of ``D`` documents (``rho_t = (learning_offset + t)^-learning_decay``,
``t = 1, 2, ...``)::

    online: lambda <- (1 - rho_t) lambda + rho_t (eta + D / m * sstats)
    batch:  lambda <- eta + sstats                # sstats over every document

The initial ``lambda`` and, in training, each E-step's initial ``gamma`` are drawn from
``Gamma(100, 0.01)`` (scikit-learn's choice); evaluation starts ``gamma`` at ones.

The bound and the held-out metric
---------------------------------
The evidence lower bound of documents ``X`` (scikit-learn's ``_approx_bound``)::

    L = sum_{w,d} X_wd log sum_k exp(Elog_theta_kd + Elog_beta_kw)
        + sum_d [ sum_k (alpha - gamma_kd) Elog_theta_kd + lgamma(gamma_kd) - lgamma(alpha)
                  + lgamma(K alpha) - lgamma(sum_k gamma_kd) ]                (document part)
        + sum_k [ sum_w (eta - lambda_kw) Elog_beta_kw + lgamma(lambda_kw) - lgamma(eta)
                  + lgamma(V eta) - lgamma(sum_w lambda_kw) ]                 (topic part)

and the perplexity ``exp(-L / sum_{w,d} X_wd)`` (:meth:`LDA.perplexity`, scikit-learn's
``perplexity``).  :meth:`LDA.loss`, the :class:`~roofline.learners.Learner`'s held-out metric,
returns ``(-(document part), word count)`` of a minibatch: the topic part belongs to the model,
not to a minibatch, so the Learner's mean held-out loss is the negative per-word document bound,
whose exponential is the held-out perplexity without the topic term (the topic term is added
once by :meth:`LDA.perplexity`).

SAME Gibbs sampling (``method="gibbs"``, BIDMach's ``LDAgibbs``)
----------------------------------------------------------------
Per minibatch, with ``phi = lambda`` normalised per topic and document-topic counts ``n_kd``
(started at the minibatch's average)::

    repeat doc_iter times:
        every nonzero (w, d) with count c draws `same` topics z ~ p(k) ∝ phi[k, w] (n_kd + alpha)
        (the SAME replication: m = `same` samples per token), each adding c / same
        n_kd <- the sampled counts of document d
    counts_kw = the last sweep's sampled counts of word w

then ``lambda <- (1 - rho_t) lambda + rho_t (eta + D / m * counts)``, the online update of the
variational model with the sampled counts as sufficient statistics (BIDMach's ``IncNorm``
updater in the form of the VB update).  The sampler draws from the model's own
``numpy.random.Generator``.  SAME's annealing (``same_max``): the samples per token grow
linearly with the passes over the data, ``m = same + floor((same_max - same) min(1, p /
same_passes))`` at ``p = documents seen / total_samples`` passes (:meth:`LDA.samples_per_token`):
few samples while the topics form, more (a colder posterior, nearer its mode) as they settle.
"""

from __future__ import annotations

import logging
import math
import numbers
import time
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from roofline import gmat
from roofline.gmat import Options, option

from ._models import Model

__all__ = ["LDA", "LDAOptions", "LDABatchResult", "LatentDirichletAllocation"]

logger = logging.getLogger(__name__)

#: Compact the E-step's working set (the documents still changing) when it falls below this
#: fraction of the columns being computed.
_COMPACT_BELOW = 0.5

#: The fused E-step runs on numba's threads from this much work (nonzeros x topics) on.
_PARALLEL_MIN_WORK = 1 << 15

#: The fused E-step deals the documents round-robin to this many parallel tasks.
_E_STEP_TASKS = 64


def _special(xp):
    """``(digamma, gammaln)`` for arrays of module ``xp`` (numpy or cupy)."""
    if xp is np:
        from scipy.special import gammaln, psi

        return psi, gammaln
    import cupyx.scipy.special as cs  # pragma: no cover - needs a GPU

    return cs.digamma, cs.gammaln  # pragma: no cover


def _elog_columns(a, psi):
    """``E[log theta]`` of Dirichlet parameters in the columns of ``a`` (``K x m``)."""
    return psi(a) - psi(a.sum(axis=0))[None, :]


def _elog_rows(a, psi):
    """``E[log beta]`` of Dirichlet parameters in the rows of ``a`` (``K x V``)."""
    return psi(a) - psi(a.sum(axis=1))[:, None]


def _dirichlet_ll(prior, distr, elog, size, gammaln, axis):
    """scikit-learn's ``_loglikelihood``: ``E[log p(x | prior) - log q(x | distr)]`` summed over
    the distributions along ``axis`` of ``distr`` (``axis=0``: columns)."""
    s = float(((prior - distr) * elog).sum())
    s += float((gammaln(distr) - gammaln(prior)).sum())
    s += float((gammaln(prior * size) - gammaln(distr.sum(axis=axis))).sum())
    return s


def check_counts(X, name="X"):
    """Raise a ValueError naming ``name`` for negative counts (NaN/inf are rejected by
    :func:`roofline.gmat.check_csc`)."""
    data = X.data[: int(X.indptr[-1])] if gmat.is_sparse(X) else X
    if data.size and float(data.min()) < 0:
        raise ValueError(f"{name} has negative counts (min {float(data.min())!r}): LDA needs "
                         f"non-negative word counts")


@dataclass
class LDAOptions(Options):
    """Options of :class:`LDA` (scikit-learn's ``LatentDirichletAllocation`` names)."""

    n_components: int = option(10, "K: the number of topics", low=1)
    doc_topic_prior: float | None = option(None, "alpha, the document-topic Dirichlet prior "
                                                 "(None: 1 / n_components)", kind=float,
                                           low=0.0, low_open=True)
    topic_word_prior: float | None = option(None, "eta, the topic-word Dirichlet prior "
                                                  "(None: 1 / n_components)", kind=float,
                                            low=0.0, low_open=True)
    method: str = option("vb", "the minibatch update: 'vb' (online variational Bayes) or "
                               "'gibbs' (BIDMach's SAME sampler)", choices=("vb", "gibbs"))
    learning_decay: float = option(0.7, "kappa: rho_t = (learning_offset + t)^-kappa",
                                   low=0.5, high=1.0)
    learning_offset: float = option(10.0, "tau0 of rho_t (> 1 down-weights early "
                                          "minibatches)", low=0.0)
    total_samples: int = option(1_000_000, "D: the documents the stream stands for (the "
                                           "online update scales a minibatch by D / m)", low=1)
    max_doc_update_iter: int = option(100, "E-step: at most this many iterations per "
                                           "document", low=1)
    mean_change_tol: float = option(1e-3, "E-step: a document stops when the mean absolute "
                                          "change of its gamma is below this", low=0.0)
    e_step: str = option("fused", "the E-step: 'fused' (one numba kernel, document by "
                                  "document, CPU) or 'primitives' (SDDMM and A*S per "
                                  "iteration over the minibatch)",
                         choices=("fused", "primitives"))
    same: int = option(10, "gibbs: samples per token (SAME's replication m; with same_max, "
                           "the first pass's)", low=1)
    same_max: int | None = option(None, "gibbs: SAME's annealing: the samples per token grow "
                                        "linearly from same to this over same_passes passes "
                                        "(None: fixed same)", kind=int, low=1)
    same_passes: float = option(4.0, "gibbs: passes over total_samples documents in which "
                                     "the samples per token reach same_max", low=0.0,
                                low_open=True)
    doc_iter: int = option(5, "gibbs: sampling sweeps over a minibatch's tokens", low=1)
    dtype: str = option("float32", "value dtype of the model and the data",
                        choices=("float32", "float64"))
    seed: int = option(0, "seed of the model's RNG (initial lambda, E-step starts, sampler)",
                       low=0)


@dataclass
class LDABatchResult:
    """What :meth:`LDA.fit_batch` returns.

    The parameters are also the attributes.

    Parameters
    ----------
    n_iter : int
        Full passes (E-step over every document, then the M-step).
    perplexities : list of float
        The training perplexity at each evaluation (``evaluate_every``), as scikit-learn's
        ``fit`` computes it.
    seconds : float
        Wall-clock seconds.
    """

    n_iter: int = 0
    perplexities: list = field(default_factory=list)
    seconds: float = 0.0


class LDA(Model):
    """Latent Dirichlet Allocation as a :class:`Model` (see the module docstring).

    Trains on a DataSource of documents (columns: word counts) with
    :class:`~roofline.learners.ModelUpdate` (``update``: one online step per minibatch), or
    on an in-memory matrix by batch variational Bayes (:meth:`fit_batch`, also over the ranks
    of a communicator).

    Parameters
    ----------
    opts : LDAOptions, optional
    **kwargs
        Override fields of ``opts`` (``LDA(n_components=20, method="gibbs")``).

    Attributes
    ----------
    components_ : ndarray, shape (K, V), Fortran order
        ``lambda``, the topic-word variational parameters (None before :meth:`init`).
    n_batch_iter : int
        Online updates done (``t`` of ``rho_t`` is ``n_batch_iter + 1``).
    rng : numpy.random.Generator
        The draws of the initial ``lambda``, the E-step starts and the sampler.  Assign a
        ``numpy.random.RandomState`` to draw exactly what scikit-learn draws with it.
    last_estep : dict
        Work of the last E-step: ``iterations``, ``nnz_work`` (nonzeros visited by the
        iterations' SDDMM and A*S), ``documents``.
    """

    #: FactorSync's rule for Learner(comm=) (learners/_parallel.py)
    _sync_rule = "lda"

    def __init__(self, opts: LDAOptions | None = None, **kwargs):
        base = (opts or LDAOptions()).to_dict()
        base.update(kwargs)
        self.opts = LDAOptions.from_dict(base, "LDA")
        self.components_ = None
        self.n_batch_iter = 0
        self.rng = np.random.default_rng(self.opts.seed)
        self.last_estep = {"iterations": 0, "nnz_work": 0, "documents": 0}
        self._exp_elog_beta = None
        self._elog_beta_cache = None
        self._last_ratios = None
        self._last_flops = 0
        self._last_visit_rate = 0.0
        self.documents_seen = 0
        if self.opts.same_max is not None and self.opts.same_max < self.opts.same:
            raise ValueError(f"same_max must be >= same ({self.opts.same}), got "
                             f"{self.opts.same_max}")

    # -- parameters ---------------------------------------------------------------------------
    @property
    def dtype(self) -> np.dtype:
        """numpy.dtype: the value dtype (``opts.dtype``)."""
        return np.dtype(self.opts.dtype)

    @property
    def n_components(self) -> int:
        """int: ``K``, the number of topics."""
        return self.opts.n_components

    #: The Learner's roofline gauge reads the rows of the dense operand of A*S as n_outputs.
    n_outputs = n_components

    @property
    def alpha(self) -> float:
        """float: the document-topic prior (``1 / K`` unless set)."""
        a = self.opts.doc_topic_prior
        return 1.0 / self.n_components if a is None else float(a)

    @property
    def eta(self) -> float:
        """float: the topic-word prior (``1 / K`` unless set)."""
        e = self.opts.topic_word_prior
        return 1.0 / self.n_components if e is None else float(e)

    @property
    def n_features(self) -> int | None:
        """int or None: ``V``, the vocabulary size (None before :meth:`init`)."""
        return None if self.components_ is None else int(self.components_.shape[1])

    @property
    def initialized(self) -> bool:
        """bool: whether ``components_`` is allocated."""
        return self.components_ is not None

    def init(self, n_features: int, device: str = "cpu") -> None:
        """Draw ``lambda`` from ``Gamma(100, 0.01)`` (``K x n_features``, from :attr:`rng`).

        Parameters
        ----------
        n_features : int
            ``V``, the vocabulary size (rows of the documents matrix).
        device : {"cpu", "gpu"}
            Where the model lives (drawn on the host).
        """
        if isinstance(n_features, bool) or not isinstance(n_features, numbers.Integral) \
                or n_features < 1:
            raise ValueError(f"n_features must be an int >= 1, got {n_features!r}")
        lam = self.rng.gamma(100.0, 0.01, (self.n_components, int(n_features)))
        self.n_batch_iter = 0
        self.documents_seen = 0
        self._set(gmat.to_device(np.asfortranarray(lam.astype(self.dtype)), device))

    def _set(self, lam):
        xp = gmat.get_array_module(lam)
        self.components_ = lam if lam.flags.f_contiguous else xp.asfortranarray(lam)
        psi, _ = _special(xp)
        self._elog_beta_cache = _elog_rows(self.components_, psi)
        self._exp_elog_beta = xp.asfortranarray(xp.exp(self._elog_beta_cache))

    def set_parameters(self, components, n_batch_iter=None) -> None:
        """Set ``lambda`` (copied, in the model dtype, Fortran order).

        Parameters
        ----------
        components : array, shape (K, V)
            Positive topic-word parameters.
        n_batch_iter : int or array of one int, optional
            Online updates already done (kept when omitted).

        Raises
        ------
        ValueError
            A shape other than ``(n_components, V)``, or non-positive values.
        """
        xp = gmat.get_array_module(components)
        lam = xp.array(components, dtype=self.dtype, order="F", copy=True)
        if lam.ndim != 2 or lam.shape[0] != self.n_components:
            raise ValueError(f"components has shape {lam.shape}, expected "
                             f"({self.n_components}, n_words)")
        if not bool(xp.all(lam > 0)):
            raise ValueError("components must be positive (Dirichlet parameters)")
        if n_batch_iter is not None:
            self.n_batch_iter = int(np.asarray(n_batch_iter).reshape(-1)[0])
        self._set(lam)

    def parameters(self) -> dict:
        """The model's arrays.

        Returns
        -------
        dict
            ``{"components": lambda, "n_batch_iter": array([t])}``.
        """
        return {"components": self.components_,
                "n_batch_iter": np.array([self.n_batch_iter], dtype=np.int64)}

    @property
    def device(self) -> str:
        """Where ``lambda`` lives: ``"cpu"`` or ``"gpu"`` (``"cpu"`` before :meth:`init`)."""
        return "cpu" if self.components_ is None else gmat.device_of(self.components_)

    def to_device(self, device: str) -> None:
        """Move ``lambda`` to ``device``.

        Parameters
        ----------
        device : {"cpu", "gpu"}
        """
        self._check_init()
        self._set(gmat.to_device(self.components_, device))

    def _check_init(self):
        if self.components_ is None:
            raise RuntimeError("the model is not initialised: call init(n_words) or train it")

    def _check_X(self, X, name="X"):
        self._check_init()
        if not gmat.is_sparse(X):
            raise TypeError(f"{name} must be a CSC matrix of word counts (n_words x n_documents), "
                            f"got {type(X).__name__}")
        gmat.check_csc(X, name)
        if gmat.device_of(X) != self.device:
            raise TypeError(f"{name} is on the {gmat.device_of(X).upper()} but the model is on "
                            f"the {self.device.upper()}")
        if X.shape[0] != self.n_features:
            raise ValueError(f"{name} has {X.shape[0]} words (rows) but the model has "
                             f"{self.n_features}")
        if X.dtype != self.dtype:
            raise TypeError(f"{name} has dtype {X.dtype} but the model has dtype {self.dtype}; "
                            f"convert the data or set LDA(dtype='{X.dtype}')")
        check_counts(X, name)

    # -- E-step -------------------------------------------------------------------------------
    def _initial_gamma(self, m, random_init):
        K, dt = self.n_components, self.dtype
        if random_init:
            # (m, K) as scikit-learn draws it, read as K x m in Fortran order
            g = self.rng.gamma(100.0, 0.01, (m, K)).astype(dt).T
        else:
            g = np.ones((K, m), dt, order="F")
        return gmat.to_device(g, self.device)

    def e_step(self, X, *, random_init=False, sstats=False, gamma=None):
        """The E-step over the documents (columns) of ``X``.

        Parameters
        ----------
        X : CSC matrix, shape (V, m)
            Word counts, of the model's dtype and device.
        random_init : bool
            Start ``gamma`` from ``Gamma(100, 0.01)`` draws of :attr:`rng` (training), else
            from ones (evaluation, as scikit-learn's ``transform``).
        sstats : bool
            Also return the sufficient statistics.
        gamma : array, shape (K, m), optional
            The starting ``gamma`` (overrides ``random_init``).

        Returns
        -------
        gamma : array, shape (K, m), Fortran order
            The documents' variational parameters (unnormalised topic weights).
        sstats : array, shape (K, V), or None
            ``B .* (T * (X ./ N)^T)`` (None unless asked).
        """
        self._check_X(X)
        return self._e_step(X, random_init, sstats, gamma)

    def _e_step(self, X, random_init, want_sstats, gamma=None):
        if self.opts.e_step == "fused" and self.device == "cpu":
            return self._e_step_fused(X, random_init, want_sstats, gamma)
        return self._e_step_primitives(X, random_init, want_sstats, gamma)

    def _e_step_fused(self, X, random_init, want_sstats, gamma=None):
        """The E-step through the fused per-document kernel (``gmat.lda_e_step``), then the
        sufficient statistics through ``A*S^T``."""
        K, m = self.n_components, X.shape[1]
        dt, B = self.dtype, self._exp_elog_beta
        nnz = int(X.indptr[-1])
        if gamma is None:
            gammaT = np.ascontiguousarray(self._initial_gamma(m, random_init).T)
        else:
            gammaT = np.array(np.asarray(gamma).T, dtype=dt, order="C", copy=True)
        TT = np.empty((m, K), dt)
        R = np.empty(nnz, dt)
        iters = np.zeros(m, np.int64)
        args = (B.T, X.indptr, X.indices, X.data, gammaT, TT, R, self.alpha,
                self.opts.max_doc_update_iter, self.opts.mean_change_tol,
                dt.type(np.finfo(dt).eps), iters)
        if nnz * K >= _PARALLEL_MIN_WORK and m > 1:
            faults = gmat.lda_e_step(*args, min(m, _E_STEP_TASKS))
        else:
            faults = gmat.lda_e_step_serial(*args)
        if faults:
            raise ValueError(f"X has {faults} documents with word indices outside "
                             f"[0, {self.n_features})")
        lengths = np.diff(X.indptr)
        self.last_estep = {"iterations": int(iters.max()) if m else 0,
                           "nnz_work": int(np.dot(iters, lengths)), "documents": m}
        gamma, T = gammaT.T, TT.T
        S = None
        if want_sstats:
            Rm = gmat.csc_from_arrays(type(X), R, X.indices[:nnz], X.indptr, X.shape)
            self._last_ratios = R
            S = gmat.mult_ast(T, Rm)
            S *= B
            self.last_estep["nnz_work"] += nnz
        return gamma, S

    def _e_step_primitives(self, X, random_init, want_sstats, gamma=None):
        """The E-step through the primitives: per iteration one SDDMM and one A*S over the
        documents still changing."""
        xp = gmat.get_array_module(self.components_)
        psi, _ = _special(xp)
        m = X.shape[1]
        dt, alpha, B = self.dtype, self.alpha, self._exp_elog_beta
        eps = float(np.finfo(dt).eps)
        tol, max_iter = self.opts.mean_change_tol, self.opts.max_doc_update_iter
        if gamma is None:
            gamma = self._initial_gamma(m, random_init)
        else:
            gamma = xp.array(gamma, dtype=dt, order="F", copy=True)
        T = xp.asfortranarray(xp.exp(_elog_columns(gamma, psi)))
        cur = np.arange(m)  # the documents in the working matrix
        Xc, live = X, np.ones(m, bool)  # live: of cur, those still changing
        iters = work = 0
        while m and iters < max_iter:
            if live.sum() < _COMPACT_BELOW * cur.size:
                cur, Xc = cur[live], _columns(X, cur[live])
                live = np.ones(cur.size, bool)
            Tc = T if cur.size == m else xp.asfortranarray(T[:, cur])
            R = _ratios(Xc, B, Tc, eps)
            new = gmat.mult_as(B, R)
            new *= Tc
            new += alpha
            gold = gamma if cur.size == m else gamma[:, cur]
            change = np.asarray(gmat.to_device(xp.abs(new - gold).mean(axis=0), "cpu"))
            upd = np.flatnonzero(live)
            if upd.size == cur.size and cur.size == m:
                gamma, T = new, xp.asfortranarray(xp.exp(_elog_columns(new, psi)))
            else:
                idx = cur[upd]
                nu = new[:, upd]
                gamma[:, idx] = nu
                T[:, idx] = xp.exp(_elog_columns(nu, psi))
            live[upd] = change[upd] >= tol
            iters += 1
            work += int(Xc.indptr[-1])
            if not live.any():
                break
        self.last_estep = {"iterations": iters, "nnz_work": work, "documents": m}
        S = None
        if want_sstats:
            R = _ratios(X, B, T, eps)
            self._last_ratios = R.data
            S = gmat.mult_ast(T, R)
            S *= B
            self.last_estep["nnz_work"] += 2 * int(X.indptr[-1])
        return gamma, S

    # -- bound --------------------------------------------------------------------------------
    def _elog_beta(self):
        """``E[log beta]`` of the current ``lambda`` (computed when ``lambda`` was set)."""
        return self._elog_beta_cache

    def _doc_bound(self, X, gamma, elog_beta=None, ratios=None):
        """The document part of the bound of ``X``'s columns at ``gamma`` (a float), summed in
        float64.  With the E-step's ``ratios`` (``X / N`` at the nonzeros, ``N`` at this
        ``gamma`` and eps included), the word part is ``sum X log N`` from them instead of an
        SDDMM over shifted exponentials (the online step's training loss)."""
        xp = gmat.get_array_module(gamma)
        psi, gammaln = _special(xp)
        K, m = gamma.shape
        if m == 0:
            return 0.0
        et = _elog_columns(gamma, psi)
        g64 = gamma.astype(np.float64)
        theta_part = _dirichlet_ll(self.alpha, g64, et.astype(np.float64), K, gammaln, axis=0)
        nnz = int(X.indptr[-1])
        if ratios is not None:
            c = X.data[:nnz].astype(np.float64)
            pos = c > 0
            # elementwise and a sum, not a BLAS dot: OpenBLAS's threads, woken after numba's
            # pool, made a 30k-value ddot take 16 ms here
            words = float((c[pos] * xp.log(c[pos] / ratios[:nnz][pos].astype(np.float64))).sum())
            return words + theta_part
        eb = self._elog_beta() if elog_beta is None else elog_beta
        # log sum_k exp(Elog_theta + Elog_beta) at the nonzeros, shifted against underflow
        cb, ct = eb.max(axis=0), et.max(axis=0)
        A = xp.asfortranarray(xp.exp(eb - cb[None, :]))
        Bm = xp.asfortranarray(xp.exp(et - ct[None, :]))
        norm = gmat.sddmm(X, A, Bm, scale=False).data[:nnz]
        lengths = xp.diff(X.indptr)
        lognorm = (xp.log(norm.astype(np.float64)) + cb[X.indices[:nnz]]
                   + xp.repeat(ct, lengths))
        return float((X.data[:nnz].astype(np.float64) * lognorm).sum()) + theta_part

    def _topic_bound(self):
        """The topic part of the bound (a float)."""
        xp = gmat.get_array_module(self.components_)
        _, gammaln = _special(xp)
        lam = self.components_.astype(np.float64)
        return _dirichlet_ll(self.eta, lam, self._elog_beta().astype(np.float64),
                             lam.shape[1], gammaln, axis=1)

    def score(self, X, sub_sampling=False, total_samples=None):
        """The variational bound of the documents ``X`` (scikit-learn's ``score``).

        Parameters
        ----------
        X : CSC matrix, shape (V, m)
        sub_sampling : bool
            Scale the document part by ``total_samples / m`` (scikit-learn's option).
        total_samples : int, optional
            ``D`` of ``sub_sampling`` (``opts.total_samples`` when omitted).

        Returns
        -------
        float
        """
        self._check_X(X)
        gamma, _ = self._e_step(X, False, False)
        d = self._doc_bound(X, gamma)
        if sub_sampling:
            D = self.opts.total_samples if total_samples is None else total_samples
            d *= D / max(1, X.shape[1])
        return d + self._topic_bound()

    def perplexity(self, X, sub_sampling=False, total_samples=None):
        """``exp(-bound / word count)`` of the documents ``X`` (scikit-learn's
        ``perplexity``).

        Parameters
        ----------
        X : CSC matrix, shape (V, m)
        sub_sampling : bool
            As scikit-learn: the document part and the word count scaled by
            ``total_samples / m``.
        total_samples : int, optional
            ``D`` of ``sub_sampling`` (``opts.total_samples`` when omitted).

        Returns
        -------
        float

        Raises
        ------
        ValueError
            ``X`` holds no words.
        """
        self._check_X(X)
        words = _word_count(X)
        if not words > 0:
            raise ValueError("X holds no words (every count is zero): perplexity is undefined")
        D = self.opts.total_samples if total_samples is None else total_samples
        if sub_sampling:
            words *= D / max(1, X.shape[1])
        return math.exp(-self.score(X, sub_sampling, D) / words)

    def loss(self, batch, cache=None):
        """The negative document part of the bound and the word count of a minibatch (the
        Learner's held-out metric: the mean is the negative per-word bound).

        Parameters
        ----------
        batch : Minibatch
            Documents as columns of ``batch.X``.
        cache : BufferCache, optional
            Not used.

        Returns
        -------
        loss_sum : float
        weight_sum : float
            The minibatch's word count.
        """
        X = batch.X
        self._check_X(X)
        gamma, _ = self._e_step(X, False, False)
        return -self._doc_bound(X, gamma), _word_count(X)

    # -- training -----------------------------------------------------------------------------
    def rho(self) -> float:
        """The next online step's weight.

        Returns
        -------
        float
            ``(learning_offset + t + 1)^-learning_decay``.
        """
        return (self.opts.learning_offset + self.n_batch_iter + 1) ** (-self.opts.learning_decay)

    def update(self, batch, cache=None):
        """One online step on the documents of a minibatch (``method`` vb or gibbs).

        Parameters
        ----------
        batch : Minibatch
            Documents as columns of ``batch.X``.
        cache : BufferCache, optional
            Not used.

        Returns
        -------
        loss_sum : float
            The negative document bound of the minibatch before the step (VB), or NaN-free
            bound at the sampler's counts (Gibbs: the VB bound with ones-started E-step is not
            computed; the sampled documents' bound is).
        weight_sum : float
            The minibatch's word count.
        """
        X = batch.X
        self._check_X(X)
        m = X.shape[1]
        if self.opts.method == "vb":
            gamma, S = self._e_step(X, True, True)
            loss = -self._doc_bound(X, gamma, ratios=self._last_ratios)
        else:
            gamma, S = self._gibbs(X)
            loss = -self._doc_bound(X, gamma)
        self._m_step(S, m, self.opts.total_samples)
        self.documents_seen += m
        self._last_flops = self._flops()
        self._last_visit_rate = self.last_estep["nnz_work"] / max(1, int(X.indptr[-1]))
        return loss, _word_count(X)

    def _m_step(self, S, m, total):
        rho = self.rho()
        lam = self.components_
        lam *= 1.0 - rho
        S *= rho * float(total) / max(1, m)
        lam += S
        lam += rho * self.eta
        self.n_batch_iter += 1
        self._set(lam)

    def _flops(self):
        K = self.n_components
        if self.opts.method == "gibbs":
            return int(self.last_estep["nnz_work"]) * K * (3 + self.last_estep["same"])
        return 4 * K * int(self.last_estep["nnz_work"])

    def flops_per_step(self, batch) -> int:
        """Flops of the last step's primitives: ``4 K`` per nonzero visited by the E-step's
        iterations (SDDMM and A*S) and the sufficient statistics (SDDMM and A*S^T).

        Parameters
        ----------
        batch : Minibatch
            The minibatch of the last step.

        Returns
        -------
        int
        """
        return self._last_flops

    def cost(self, batch) -> gmat.Cost:
        """Compulsory bytes and flops of one step (E-step and M-step) on ``batch``, from the
        primitives' cost models; the :class:`~roofline.learners.Learner`'s roofline gauge
        reads it.

        Bytes: one E-step pass over the minibatch, an SDDMM
        (:func:`~roofline.gmat.cost_sddmm`, the ratios ``X / N``) and an ``A*S``
        (:func:`~roofline.gmat.cost_mult_as`, the new ``gamma``) with ``K`` rows (a document's
        further fixed-point iterations run on the columns it has already read), the sufficient
        statistics' ``A*S^T`` (:func:`~roofline.gmat.cost_mult_ast`), and the M-step's pass
        over the ``K x V`` model (``lambda`` read and written, ``exp(E[log beta])`` and
        ``E[log beta]`` written).  Flops: ``4 K`` per nonzero visit (VB: the SDDMM's and the
        ``A*S``'s multiply-adds of every E-step iteration and of the statistics; Gibbs:
        ``K (3 + same)`` per visit of a sweep, as :meth:`flops_per_step`), with the visits per
        nonzero of the last :meth:`update` (one E-step iteration and the statistics before
        any), plus ``5`` per model entry for the M-step.  The digamma and exponential
        evaluations per document and iteration are left out.

        Parameters
        ----------
        batch : Minibatch
            Documents as the columns of a sparse ``batch.X`` (``V x m``).

        Returns
        -------
        roofline.gmat.Cost
        """
        X, K = batch.X, self.n_components
        nnz = int(X.indptr[-1])
        parts = [gmat.cost_sddmm(X, K), gmat.cost_mult_as(X, K), gmat.cost_mult_ast(X, K)]
        model_entries = K * X.shape[0]
        m_step_bytes = 4 * model_entries * np.dtype(self.dtype).itemsize
        rate = self._last_visit_rate
        if self.opts.method == "gibbs":
            rate = rate or float(self.opts.doc_iter)
            per_visit = K * (3 + self.samples_per_token())
        else:
            rate = rate or 2.0
            per_visit = 4 * K
        flops = int(round(per_visit * rate * nnz)) + 5 * model_entries
        return gmat.Cost("LDA step", K, np.dtype(self.dtype), nnz,
                         sum(p.bytes for p in parts) + m_step_bytes, flops,
                         {"primitives": sum(p.bytes for p in parts), "m_step": m_step_bytes})

    def fit_batch(self, X, max_iter=10, *, comm=None, evaluate_every=-1, perp_tol=0.1,
                  callback=None) -> LDABatchResult:
        """Batch variational Bayes on the documents ``X`` (scikit-learn's
        ``learning_method="batch"``): ``max_iter`` passes of the E-step over every document and
        ``lambda <- eta + sstats``.

        With ``comm``, every rank holds its own documents (``X`` has the same rows on every
        rank): the ranks start from the same ``lambda`` (the same seed), each E-step draws the
        starting ``gamma`` of every document of every rank and takes its own (so the run equals
        the single-process run on the ranks' documents side by side, in rank order), and the
        sufficient statistics are all-reduced.

        Parameters
        ----------
        X : CSC matrix, shape (V, m)
            This rank's documents.
        max_iter : int
            Passes.
        comm : roofline.comm.Communicator, optional
        evaluate_every : int
            Compute the training perplexity every this many passes (<= 0: never) and stop when
            it changes by less than ``perp_tol``.
        perp_tol : float
        callback : callable, optional
            ``callback(iteration, model)`` after every pass.

        Returns
        -------
        LDABatchResult
        """
        if isinstance(max_iter, bool) or not isinstance(max_iter, numbers.Integral) \
                or max_iter < 1:
            raise ValueError(f"max_iter must be an int >= 1, got {max_iter!r}")
        if not self.initialized:
            self.init(X.shape[0])
        self._check_X(X)
        t0 = time.perf_counter()
        m = X.shape[1]
        offset, total = 0, m
        if comm is not None and comm.size > 1:
            sizes = [int(s) for s in comm.allgather(int(m))]
            offset, total = sum(sizes[: comm.rank]), sum(sizes)
            if total == 0:
                raise ValueError("X: no documents on any rank")
        elif m == 0:
            raise ValueError("X has no documents (columns)")
        res = LDABatchResult()
        last = None
        for it in range(max_iter):
            g0 = None
            if comm is not None and comm.size > 1:
                full = self._initial_gamma(total, True)
                g0 = full[:, offset:offset + m]
            _, S = self._e_step(X, True, True, gamma=g0)
            if comm is not None and comm.size > 1:
                S = comm.allreduce(np.ascontiguousarray(S))
            lam = self.components_
            lam[...] = S
            lam += self.eta
            self._set(lam)
            self.n_batch_iter += 1  # counted as scikit-learn counts its batch EM steps
            res.n_iter = it + 1
            if callback is not None:
                callback(it + 1, self)
            if evaluate_every > 0 and (it + 1) % evaluate_every == 0:
                p = self._perplexity_comm(X, comm)
                res.perplexities.append(p)
                logger.info("LDA batch pass %d: perplexity %.4f", it + 1, p)
                if last is not None and abs(last - p) < perp_tol:
                    break
                last = p
        res.seconds = time.perf_counter() - t0
        return res

    def _perplexity_comm(self, X, comm):
        gamma, _ = self._e_step(X, False, False)
        local = np.array([self._doc_bound(X, gamma), _word_count(X)])
        if comm is not None and comm.size > 1:
            local = comm.allreduce(local)
        if not local[1] > 0:
            raise ValueError("X holds no words (every count is zero): perplexity is undefined")
        return math.exp(-(local[0] + self._topic_bound()) / local[1])

    # -- Gibbs (SAME) -------------------------------------------------------------------------
    def samples_per_token(self) -> int:
        """The SAME sampler's samples per token for the next minibatch: ``same``, or with
        ``same_max`` (annealing) ``same + floor((same_max - same) min(1, p / same_passes))`` at
        ``p = documents_seen / total_samples`` passes.

        Returns
        -------
        int
        """
        o = self.opts
        if o.same_max is None:
            return int(o.same)
        p = self.documents_seen / float(o.total_samples)
        return int(o.same + math.floor((o.same_max - o.same) * min(1.0, p / o.same_passes)))

    def _gibbs(self, X):
        """SAME sampling over a minibatch: ``(gamma, counts)`` with ``gamma = alpha + n_kd``
        and the last sweep's word-topic counts (``K x V``): ``doc_iter`` sweeps of the kernel
        ``gmat.lda_gibbs_sweep`` (uniforms from :attr:`rng`), then the counts by the primitive
        A*S^T of the nonzeros' sampled counts against the nonzeros' words."""
        if self.device != "cpu":
            raise NotImplementedError("method='gibbs' runs on the CPU only")
        K, (V, m) = self.n_components, X.shape
        dt = self.dtype
        nnz = int(X.indptr[-1])
        lengths = np.diff(X.indptr)
        lam = np.asarray(self.components_, dtype=np.float64)
        phiT = np.ascontiguousarray((lam / lam.sum(axis=1, keepdims=True)).T)
        doc_len = np.zeros(m)
        nz = lengths > 0
        if nnz:
            doc_len[nz] = np.add.reduceat(X.data[:nnz].astype(np.float64),
                                          X.indptr[:-1][nz])
        # random starting topic counts (a Dirichlet(1) share of each document's length) break
        # the topics' symmetry; equal shares leave the sampler in a collapsed mode
        nd = doc_len[:, None] * self.rng.dirichlet(np.ones(K), m)  # m x K
        nd_new = np.empty_like(nd)
        T = np.empty((nnz, K), dt)
        tasks = max(1, min(m, _E_STEP_TASKS))
        same = self.samples_per_token()
        for _ in range(self.opts.doc_iter):
            u = self.rng.random((nnz, same))
            faults = gmat.lda_gibbs_sweep(phiT, X.indptr, X.indices, X.data, nd, u,
                                          self.alpha, T, nd_new, tasks)
            if faults:
                raise ValueError(f"X has {faults} documents with word indices outside "
                                 f"[0, {self.n_features})")
            nd, nd_new = nd_new, nd
        # counts[:, w] = sum of T[p, :] over the nonzeros p of word w: A*S^T against the
        # V x nnz matrix with a one at (word of p, p)
        P = gmat.csc_from_arrays(type(X), np.ones(nnz, dt), X.indices[:nnz],
                                 np.arange(nnz + 1, dtype=X.indptr.dtype), (V, nnz))
        counts = gmat.mult_ast(T.T, P)
        self.last_estep = {"iterations": self.opts.doc_iter,
                           "nnz_work": nnz * self.opts.doc_iter, "documents": m, "same": same}
        gamma = np.asfortranarray((nd.T + self.alpha).astype(dt))
        return gamma, counts

    # -- outputs ------------------------------------------------------------------------------
    def transform(self, X, normalize=True):
        """The documents' topic distributions (E-step from ones, as scikit-learn).

        Parameters
        ----------
        X : CSC matrix, shape (V, m)
        normalize : bool
            Normalise every column to sum to one (else ``gamma``).

        Returns
        -------
        array, shape (K, m)
        """
        self._check_X(X)
        gamma, _ = self._e_step(X, False, False)
        if normalize:
            gamma = gamma / gamma.sum(axis=0, keepdims=True)
        return gamma

    def predict(self, X, cache=None):
        """The normalised topic distributions of the documents (see :meth:`transform`).

        Parameters
        ----------
        X : CSC matrix, shape (V, m)
        cache : BufferCache, optional
            Not used.

        Returns
        -------
        array, shape (K, m)
        """
        return self.transform(X)

    def topic_word(self):
        """The topics' word distributions ``lambda / (lambda 1)``.

        Returns
        -------
        ndarray, shape (K, V)
        """
        self._check_init()
        lam = np.asarray(gmat.to_device(self.components_, "cpu"), dtype=np.float64)
        return lam / lam.sum(axis=1, keepdims=True)

    def top_words(self, n=10, vocabulary=None):
        """The ``n`` most probable words of every topic.

        Parameters
        ----------
        n : int
            Words per topic.
        vocabulary : sequence of str, optional
            Word of each row; indices are returned without it.

        Returns
        -------
        list of list
            Per topic, word indices (or words) by decreasing probability.
        """
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
            raise ValueError(f"n must be an int >= 1, got {n!r}")
        tw = self.topic_word()
        if vocabulary is not None and len(vocabulary) != tw.shape[1]:
            raise ValueError(f"vocabulary has {len(vocabulary)} words but the model has "
                             f"{tw.shape[1]}")
        order = np.argsort(-tw, axis=1, kind="stable")[:, :n]
        if vocabulary is None:
            return [list(map(int, r)) for r in order]
        return [[vocabulary[i] for i in r] for r in order]

    def __repr__(self) -> str:
        shape = ("uninitialised" if self.components_ is None
                 else f"{self.n_components}x{self.n_features}")
        return f"LDA(method={self.opts.method!r}, {shape}, dtype={self.opts.dtype})"


def _word_count(X) -> float:
    return float(X.data[: int(X.indptr[-1])].sum(dtype=np.float64))


def _columns(X, idx):
    """Columns ``idx`` (sorted) of the CSC matrix ``X``, as a new canonical CSC matrix."""
    xp = gmat.get_array_module(X.data)
    lengths = X.indptr[1:][idx] - X.indptr[:-1][idx]
    indptr = xp.zeros(idx.size + 1, dtype=X.indptr.dtype)
    xp.cumsum(lengths, out=indptr[1:])
    starts = X.indptr[:-1][idx]
    take = (xp.repeat(starts - indptr[:-1], lengths) + xp.arange(int(indptr[-1]),
                                                                  dtype=X.indptr.dtype))
    return gmat.csc_from_arrays(type(X), X.data[take], X.indices[take], indptr,
                                (X.shape[0], idx.size))


def _ratios(X, B, T, eps):
    """``X ./ (SDDMM(X, B, T) + eps)`` with ``X``'s pattern (a new CSC matrix)."""
    nnz = int(X.indptr[-1])
    N = gmat.sddmm(X, B, T, scale=False).data[:nnz]
    N += eps
    np.divide(X.data[:nnz], N, out=N)
    return gmat.csc_from_arrays(type(X), N, X.indices[:nnz], X.indptr, X.shape)


# ---------------------------------------------------------------------------------------------
# the scikit-learn estimator

from sklearn.base import BaseEstimator, TransformerMixin  # noqa: E402
from sklearn.utils.validation import check_is_fitted, validate_data  # noqa: E402


def _rng_of(random_state):
    """``random_state`` as the model's RNG: a Generator (None, int, Generator) or, for a
    ``numpy.random.RandomState``, itself (its draws are scikit-learn's)."""
    if isinstance(random_state, np.random.RandomState):
        return random_state
    if random_state is None or isinstance(random_state, (np.random.Generator,
                                                         np.random.SeedSequence,
                                                         np.random.BitGenerator)):
        return np.random.default_rng(random_state)
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool) \
            and random_state >= 0:
        return np.random.default_rng(int(random_state))
    raise ValueError(f"random_state must be None, a non-negative int, a numpy Generator or a "
                     f"RandomState, got {random_state!r}")


class LatentDirichletAllocation(TransformerMixin, BaseEstimator):
    """Latent Dirichlet Allocation with online or batch variational Bayes (scikit-learn's
    ``LatentDirichletAllocation``, on Roofline's primitives), or BIDMach's SAME sampler.

    Input follows scikit-learn: ``X`` is ``n_documents x n_words`` (rows are documents), dense
    or any scipy.sparse matrix; it is converted at the boundary to the learners' CSC
    ``n_words x n_documents`` layout (a CSR ``X`` is read as the CSC matrix of its transpose,
    no copy of the values when the dtype is already right).  ``components_`` is ``n_components
    x n_words`` and :meth:`transform` returns ``n_documents x n_components``, as in
    scikit-learn.

    Parameters
    ----------
    n_components : int, default 10
    doc_topic_prior, topic_word_prior : float, optional
        alpha and eta (``1 / n_components`` when None).
    learning_method : {"batch", "online"}, default "batch"
    learning_decay : float, default 0.7
    learning_offset : float, default 10.0
    max_iter : int, default 10
        Passes over the data.
    batch_size : int, default 128
        Documents per online update.
    evaluate_every : int, default -1
        Batch fits: compute the perplexity every this many passes and stop when it changes by
        less than ``perp_tol``.
    total_samples : int, default 1e6
        ``partial_fit``'s ``D``.
    perp_tol : float, default 0.1
    mean_change_tol : float, default 1e-3
    max_doc_update_iter : int, default 100
    method : {"vb", "gibbs"}, default "vb"
        The online update: variational Bayes, or the SAME sampler (``learning_method`` must
        then be "online").
    same, doc_iter : int
        The sampler's samples per token and sweeps per minibatch.
    same_max : int, optional
        SAME's annealing: the samples per token grow linearly from ``same`` to ``same_max``
        over ``same_passes`` passes (None: fixed ``same``).
    same_passes : float, default 4.0
    dtype : {"float64", "float32"}, default "float64"
    random_state : None, int, numpy Generator or RandomState
        A ``RandomState`` is drawn from as is: ``np.random.RandomState(s)`` reproduces
        scikit-learn's ``random_state=s`` draws.

    Attributes
    ----------
    components_ : ndarray, shape (n_components, n_features)
    exp_dirichlet_component_ : ndarray, shape (n_components, n_features)
    n_batch_iter_, n_iter_ : int
    bound_ : float
        The training perplexity at the end of ``fit``.
    model_ : LDA
        The Roofline model.
    """

    def __init__(self, n_components=10, *, doc_topic_prior=None, topic_word_prior=None,
                 learning_method="batch", learning_decay=0.7, learning_offset=10.0,
                 max_iter=10, batch_size=128, evaluate_every=-1, total_samples=1_000_000,
                 perp_tol=0.1, mean_change_tol=1e-3, max_doc_update_iter=100, method="vb",
                 same=10, doc_iter=5, same_max=None, same_passes=4.0, dtype="float64",
                 random_state=None):
        self.n_components = n_components
        self.doc_topic_prior = doc_topic_prior
        self.topic_word_prior = topic_word_prior
        self.learning_method = learning_method
        self.learning_decay = learning_decay
        self.learning_offset = learning_offset
        self.max_iter = max_iter
        self.batch_size = batch_size
        self.evaluate_every = evaluate_every
        self.total_samples = total_samples
        self.perp_tol = perp_tol
        self.mean_change_tol = mean_change_tol
        self.max_doc_update_iter = max_doc_update_iter
        self.method = method
        self.same = same
        self.doc_iter = doc_iter
        self.same_max = same_max
        self.same_passes = same_passes
        self.dtype = dtype
        self.random_state = random_state

    def _opts(self, total):
        if self.learning_method not in ("batch", "online"):
            raise ValueError(f"learning_method must be 'batch' or 'online', got "
                             f"{self.learning_method!r}")
        if self.method == "gibbs" and self.learning_method != "online":
            raise ValueError("method='gibbs' is an online sampler: set learning_method='online'")
        for name in ("max_iter", "batch_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        return LDAOptions.from_dict(dict(
            n_components=self.n_components, doc_topic_prior=self.doc_topic_prior,
            topic_word_prior=self.topic_word_prior, method=self.method,
            learning_decay=self.learning_decay, learning_offset=self.learning_offset,
            total_samples=int(total), max_doc_update_iter=self.max_doc_update_iter,
            mean_change_tol=self.mean_change_tol, same=self.same, doc_iter=self.doc_iter,
            same_max=self.same_max, same_passes=self.same_passes,
            dtype=np.dtype(self.dtype).name, seed=0), "LatentDirichletAllocation")

    def _columns(self, X, reset):
        """Validated rows-as-documents ``X`` as CSC ``n_words x n_documents``."""
        if isinstance(self.dtype, str) and self.dtype not in ("float32", "float64"):
            raise ValueError(f"dtype must be 'float32' or 'float64', got {self.dtype!r}")
        dt = np.dtype(self.dtype)
        X = validate_data(self, X, accept_sparse=["csr", "csc", "coo"], dtype=dt, reset=reset)
        Xs = sp.csr_matrix(X) if not sp.issparse(X) else X.tocsr()
        Xs.sum_duplicates()
        Xs.sort_indices()
        Xc = gmat.csc_from_arrays(sp.csc_matrix, Xs.data, Xs.indices, Xs.indptr,
                                  (Xs.shape[1], Xs.shape[0]))
        check_counts(Xc, "X")
        return Xc

    def _new_model(self, Xc, total):
        model = LDA(self._opts(total))
        model.rng = _rng_of(self.random_state)
        model.init(Xc.shape[0])
        return model

    def _publish(self):
        m = self.model_
        self.components_ = np.asarray(m.components_)
        self.exp_dirichlet_component_ = np.asarray(m._exp_elog_beta)
        self.n_batch_iter_ = m.n_batch_iter + 1
        self.doc_topic_prior_ = m.alpha
        self.topic_word_prior_ = m.eta

    def _online_passes(self, Xc, passes):
        from roofline.datasources import MatSource

        from ._learner import Learner
        from ._optimizers import ModelUpdate

        Learner(MatSource(Xc, batch_size=self.batch_size), self.model_, ModelUpdate(),
                n_passes=passes, progress=False, roofline_gauge="off").train()

    def fit(self, X, y=None, *, comm=None):
        """Fit the model to the documents ``X``.

        Parameters
        ----------
        X : array or sparse matrix, shape (n_documents, n_words)
            Word counts.
        y : ignored
        comm : roofline.comm.Communicator, optional
            Batch VB over the ranks (each passes its own documents; see :meth:`LDA.fit_batch`).

        Returns
        -------
        self
        """
        Xc = self._columns(X, reset=True)
        if Xc.shape[1] == 0:
            raise ValueError("X has no documents (rows)")
        if comm is not None and self.learning_method != "batch":
            raise ValueError("fit(comm=...) runs batch variational Bayes: set "
                             "learning_method='batch'")
        self.model_ = self._new_model(Xc, Xc.shape[1])
        if self.learning_method == "batch":
            res = self.model_.fit_batch(Xc, self.max_iter, comm=comm,
                                        evaluate_every=self.evaluate_every,
                                        perp_tol=self.perp_tol)
            self.n_iter_ = res.n_iter
        else:
            self._online_passes(Xc, self.max_iter)
            self.n_iter_ = self.max_iter
        self.bound_ = self.model_._perplexity_comm(Xc, comm)
        self._publish()
        return self

    def partial_fit(self, X, y=None):
        """One online pass over ``X`` in minibatches of ``batch_size`` (``D`` is
        ``total_samples``).

        Parameters
        ----------
        X : array or sparse matrix, shape (n_documents, n_words)
        y : ignored

        Returns
        -------
        self
        """
        first = not hasattr(self, "model_")
        Xc = self._columns(X, reset=first)
        if first:
            if self.method != "gibbs" and self.learning_method not in ("batch", "online"):
                raise ValueError(f"learning_method must be 'batch' or 'online', got "
                                 f"{self.learning_method!r}")
            self.model_ = self._new_model(Xc, self.total_samples)
            self.n_iter_ = 0
        if Xc.shape[1]:
            self._online_passes(Xc, 1)
        self._publish()
        return self

    def transform(self, X, *, normalize=True):
        """Document-topic distributions.

        Parameters
        ----------
        X : array or sparse matrix, shape (n_documents, n_words)
        normalize : bool
            Rows summing to one (else the unnormalised ``gamma``).

        Returns
        -------
        ndarray, shape (n_documents, n_components)
        """
        check_is_fitted(self, "model_")
        Xc = self._columns(X, reset=False)
        return np.ascontiguousarray(self.model_.transform(Xc, normalize).T)

    def score(self, X, y=None):
        """The variational bound of ``X`` (scikit-learn's ``score``).

        Parameters
        ----------
        X : array or sparse matrix, shape (n_documents, n_words)
        y : ignored

        Returns
        -------
        float
        """
        check_is_fitted(self, "model_")
        return self.model_.score(self._columns(X, reset=False))

    def perplexity(self, X, sub_sampling=False):
        """``exp(-bound / word count)`` (scikit-learn's ``perplexity``).

        Parameters
        ----------
        X : array or sparse matrix, shape (n_documents, n_words)
        sub_sampling : bool

        Returns
        -------
        float
        """
        check_is_fitted(self, "model_")
        return self.model_.perplexity(self._columns(X, reset=False), sub_sampling,
                                      self.total_samples)

    def top_words(self, n=10, vocabulary=None):
        """The ``n`` most probable words of every topic (see :meth:`LDA.top_words`).

        Parameters
        ----------
        n : int
        vocabulary : sequence of str, optional

        Returns
        -------
        list of list
        """
        check_is_fitted(self, "model_")
        return self.model_.top_words(n, vocabulary)
