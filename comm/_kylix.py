"""Kylix: a nested, heterogeneous-degree butterfly for sparse and dense all-reduce.

Zhao & Canny, "Kylix: A Sparse Allreduce for Commodity Clusters" (ICPP 2014); BIDMat's
``comm/{Machine,Layer,Groups}.java``.

The network
-----------
``size = k_1 * k_2 * ... * k_L`` nodes (the *degrees*, decreasing down the layers).  Rank ``r``
has the mixed-radix digits ``d_l(r) = (r // c_l) % k_l`` with ``c_l = k_1 ... k_{l-1}``; at layer
``l`` it exchanges with the ``k_l`` nodes that differ from it in digit ``l`` only (its *group*).
The index space is partitioned by ranges: every member of a layer-``l`` group holds indices of
the same range, which the layer splits into ``k_l`` near-equal sub-ranges, sub-range ``j``
going to member ``j``; after the last layer each node owns one contiguous range (BIDMat
partitions by ``(i / c_l) % k_l`` instead; ranges make every message a contiguous slice of a
sorted list, sent without a copy, and hashed feature ids spread evenly over them).  The stages
are *nested*: a node only forwards the union of what it received, so features that collide
(power-law data) travel once per layer, and the volume shrinks down the layers.

Phases
------
configuration (once per :class:`KylixPlan`)
    route each node's contributed index set and its wanted index set down the layers; every
    receiver takes the union of what arrives and keeps, per sender, the map of the sender's list
    into the union.
reduce-down
    values travel the same routes and are summed into the unions, in group-member order
    ``j = 0, 1, ..., k_l - 1`` (a fixed order: the result is bit-identical on every rank and on
    every backend with the same degrees; each sum is computed once, at the index's owner).
reduce-up
    the owners send back, layer by layer in reverse, only the values each node asked for.

Two nodes (one layer of two, :attr:`KylixCommunicator.direct`) skip the round trip: each sends
the other the values of its indices that the other wants and both add them in member order,
which is the owner's order above, so the sums have the butterfly's bits in one exchange (half
the messages and waits; for a sparse reduce, the sender's wanted indices instead of half of its
own plus half of the peer's).

The per-node work is vectorised numpy (``np.unique``, ``searchsorted``, fancy-index adds with
precomputed maps); ``plan.reduce`` does only gathers, scatter-adds and the messages.

Dense ``allreduce`` uses the same network with implicit indices (a contiguous range per
layer: reduce-scatter down, all-gather up).
"""

from __future__ import annotations

import logging
import math
import pickle
import struct
import threading
import zlib

import numpy as np

from . import _netmodel
from ._base import (
    CommError,
    Communicator,
    MessageError,
    MismatchError,
    SparsePlan,
    Transport,
    as_host,
    check_reducible,
)
from ._netmodel import model_degrees

__all__ = ["KylixCommunicator", "KylixPlan", "kylix_degrees"]

logger = logging.getLogger(__name__)

#: Smallest message worth sending on its own (bytes); BIDMat's rule keeps packets above it.
MIN_PACKET = 64 * 1024


# ---------------------------------------------------------------------------------------------
# degrees


def _factors(n):
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return out


def kylix_degrees(n_nodes: int, *, nnz: int | None = None, itemsize: int = 12,
                  min_packet: int = MIN_PACKET, model=None) -> tuple[int, ...]:
    """Layer degrees for ``n_nodes`` nodes: decreasing, product ``n_nodes``.

    BIDMat's rule (``Groups.getGroupSizes``): as few layers as keep every message above the
    minimum efficient packet size.  A node of ``nnz`` contributed entries (``itemsize`` bytes
    each: an index and a value) sends about ``nnz / k`` entries to each of the ``k`` members of
    its first group; the first degree is the largest divisor of ``n_nodes`` (made of its prime
    factors, largest first) that keeps ``nnz * itemsize / k >= min_packet``, and the remaining
    factors form the lower layers, again greedily, so that the degrees decrease.

    Parameters
    ----------
    n_nodes : int
    nnz : int, optional
        Entries per node.  Without it, or when even two-way splits make messages smaller
        than ``min_packet``, every node sends to every other in one layer when
        ``n_nodes <= 16``, else in layers of about ``sqrt(n_nodes)``.
    itemsize : int
        Bytes per entry on the wire.
    min_packet : int
        The smallest efficient message (bytes).
    model : ClusterModel, optional
        A cluster cost model (:class:`~roofline.comm.ClusterModel`): instead of the packet
        rule, the degrees whose reduce of ``nnz`` entries per node (1 without ``nnz``; the
        nodes' index sets taken as equal, the dense case) of ``itemsize`` bytes it predicts
        fastest on its network (:func:`~roofline.comm.model_degrees`).

    Returns
    -------
    tuple of int
        ``()`` for one node.
    """
    n_nodes = int(n_nodes)
    if n_nodes < 1:
        raise ValueError(f"n_nodes must be >= 1, got {n_nodes}")
    if n_nodes == 1:
        return ()
    if model is not None:
        return model_degrees(n_nodes, 1 if nnz is None else int(nnz), model,
                             itemsize=int(itemsize))
    primes = sorted(_factors(n_nodes), reverse=True)
    if nnz is None or int(nnz) * int(itemsize) < 2 * int(min_packet):
        # no size, or messages below the packet size whatever the split: latency dominates,
        # so few layers (one all-to-all for small groups, about sqrt(n) otherwise)
        max_k = n_nodes if n_nodes <= 16 else max(2, int(math.isqrt(n_nodes)))
    else:
        max_k = max(2, int(nnz) * int(itemsize) // max(int(min_packet), 1))
    degrees = []
    remaining = primes
    budget = max_k
    while remaining:
        # greedy: multiply primes (largest first) while the product stays within budget
        k, rest = 1, []
        for p in remaining:
            if k * p <= budget or k == 1:
                k *= p
            else:
                rest.append(p)
        degrees.append(k)
        remaining = rest
        budget = k  # lower layers no larger than the one above (degrees decrease)
    degrees.sort(reverse=True)
    return tuple(degrees)


def _check_degrees(degrees, size):
    degrees = tuple(int(k) for k in degrees)
    if any(k < 2 for k in degrees) or math.prod(degrees) != size:
        raise ValueError(f"degrees {degrees} must be integers >= 2 whose product is the "
                         f"number of ranks {size}")
    return degrees


# ---------------------------------------------------------------------------------------------
# wire encoding of arrays (a small header: dtype, shape)

_HDR = struct.Struct("<4sB3x")  # 8 bytes, and 8 per dimension: the data stays 8-byte aligned


def _encode(a: np.ndarray):
    """``[header, data]`` buffers of a C-contiguous array (no copy of the data)."""
    a = np.ascontiguousarray(a)
    head = _HDR.pack(a.dtype.str.encode().ljust(4), a.ndim) + struct.pack(
        f"<{a.ndim}q", *a.shape)
    return [head, memoryview(a.reshape(-1)).cast("B")]


def _decode(buf) -> np.ndarray:
    mv = memoryview(buf)
    if len(mv) < _HDR.size:
        raise MessageError(f"array message of {len(mv)} bytes is shorter than its header")
    code, ndim = _HDR.unpack_from(mv, 0)
    off = _HDR.size + 8 * ndim
    shape = struct.unpack_from(f"<{ndim}q", mv, _HDR.size)
    try:
        dtype = np.dtype(code.rstrip(b" ").decode())
    except (TypeError, UnicodeDecodeError) as e:
        raise MessageError(f"array message with an unknown dtype {code!r}") from e
    n = math.prod(shape) * dtype.itemsize
    if len(mv) - off != n:
        raise MessageError(f"array message of shape {shape} {dtype} carries {len(mv) - off} "
                           f"bytes, expected {n}")
    a = np.frombuffer(mv[off:], dtype=dtype).reshape(shape)
    # numpy's searches and fancy indexing slow down by orders of magnitude on misaligned data
    return a if a.flags.aligned else a.copy()


# ---------------------------------------------------------------------------------------------
# the collective header: every message of a collective carries what its sender is doing, and
# the receiver checks it against what it does itself (issue 32: ranks that disagree on the
# operation, dtype, shape, plan or sequence number are an error naming them, never a mixed sum)

_CMAGIC = b"RFLC"
#: magic, kind, op, dtype (4 bytes), sequence number, size, identity, degrees digest: 48 bytes,
#: so the payload after it stays 8-byte aligned
_CHDR = struct.Struct("<4sBB2x4sQQQQ4x")
KINDS = ("allreduce", "sparse_plan", "sparse_reduce", "broadcast", "gather", "allgather",
         "barrier", "split", "dup")
_OPCODES = ("", "sum", "max")


def header_fields(kind, seq, op="", dtype="", n=0, ident=0, degrees=()):
    """The collective header as a tuple of 7 non-negative ints (what MPI's agreement reduces
    and what every Kylix message carries)."""
    code = int.from_bytes(str(dtype).encode()[:4].ljust(4), "little")
    deg = zlib.crc32(repr(tuple(degrees)).encode())
    return (KINDS.index(kind), _OPCODES.index(op), code, int(seq), int(n),
            int(ident) & 0x7FFFFFFFFFFFFFFF, deg)


def describe(fields) -> str:
    """What a rank with collective header ``fields`` is doing, in words."""
    kind, op, code, seq, n, ident, _ = (int(f) for f in fields)
    name = KINDS[kind] if 0 <= kind < len(KINDS) else f"kind {kind}"
    dtype = code.to_bytes(4, "little").rstrip(b" \0").decode(errors="replace")
    if name == "allreduce":
        what = f"allreduce(op={_OPCODES[op] if op < len(_OPCODES) else op!r}, dtype {dtype}, "\
               f"{n} elements)"
    elif name == "sparse_reduce":
        what = f"a sparse reduce of the plan made by collective #{ident} (dtype {dtype}, " \
               f"{n} values per index)"
    elif name in ("broadcast", "gather"):
        what = f"{name}(root={n})"
    else:
        what = name
    return f"collective #{seq}: {what}"


def mismatch(rank, mine, peer, theirs) -> MismatchError:
    """The error of rank ``rank`` (doing ``mine``) on receiving ``theirs`` from ``peer``."""
    why = ""
    if mine[3] != theirs[3]:
        why = " (a rank skipped or repeated a collective)"
    elif mine[6] != theirs[6]:
        why = " (the ranks use different Kylix degrees: a shape mismatch of the butterfly)"
    elif mine[:2] == theirs[:2] and mine[2] == theirs[2] and mine[4:6] != theirs[4:6] \
            and mine[0] == KINDS.index("allreduce"):
        why = " (a shape mismatch)"
    return MismatchError(f"collective mismatch: ranks {min(rank, peer)} and {max(rank, peer)} "
                         f"disagree: rank {rank} "
                         f"is in {describe(mine)}, rank {peer} in {describe(theirs)}{why}",
                         [rank, peer])


# ---------------------------------------------------------------------------------------------
# the node-local steps (pure functions; no communication)


def _bounds(lo, hi, k):
    """``k + 1`` boundaries splitting the range ``[lo, hi)`` into ``k`` near-equal ranges."""
    return [lo + (hi - lo) * j // k for j in range(k + 1)]


def _split_sorted(idx, lo, hi, k):
    """The sorted ``idx`` (all in ``[lo, hi)``) split by the ``k`` ranges of ``_bounds``: the
    parts (views) and their slices."""
    cuts = np.searchsorted(idx, _bounds(lo, hi, k))
    sels = [slice(int(cuts[j]), int(cuts[j + 1])) for j in range(k)]
    return [idx[sl] for sl in sels], sels


def _unique(x, return_inverse=False):
    """``np.unique`` of int64 indices by a stable (radix) sort: numpy 2.4's ``np.unique`` took
    3.9 s on 2M indices that this sorts in 40 ms."""
    order = np.argsort(x, kind="stable") if return_inverse else None
    srt = x[order] if return_inverse else np.sort(x, kind="stable")
    keep = np.empty(srt.size, bool)
    keep[:1] = True
    np.not_equal(srt[1:], srt[:-1], out=keep[1:])
    uniq = srt[keep]
    if not return_inverse:
        return uniq
    inv = np.empty(x.size, np.int64)
    inv[order] = np.cumsum(keep) - 1
    return uniq, inv


def _members_of(a, b):
    """The positions in the sorted distinct ``a`` of its entries that occur in the sorted
    distinct ``b`` (increasing)."""
    if a.size == 0 or b.size == 0:
        return np.zeros(0, np.int64)
    pos = np.minimum(np.searchsorted(b, a), b.size - 1)
    return np.flatnonzero(b[pos] == a)


def _check_values(got, dtype, tail, layer, rank):
    """Every received block has the reduce's dtype and trailing shape."""
    for g in got:
        if g.dtype != dtype or g.shape[1:] != tail:
            raise CommError(f"sparse reduce mismatch at layer {layer}: rank {rank} has values "
                            f"{dtype}{tail}, a peer sent {g.dtype}{g.shape[1:]}")


def _is_sorted(a):
    """Strictly increasing (sorted and distinct)."""
    return a.size < 2 or bool(np.all(a[1:] > a[:-1]))


class _Kernels:
    """The numba loops of ``roofline.kernels``, imported on first use (``import roofline.comm``
    stays light for processes that never reduce)."""

    def __getattr__(self, name):
        from roofline import kernels

        return getattr(kernels, name)


_k = _Kernels()


def _scatter_add(acc, pos, vals):
    """``acc[pos] += vals`` (``pos`` distinct): one pass without the GIL for 1-D numbers."""
    if acc.ndim == 1 and acc.dtype.kind in "fiu" and pos.size > 256:
        _k.reduce_scatter_add(acc, pos, vals)
    else:
        acc[pos] += vals


def _gather(src, pos):
    """``src[pos]``: one pass without the GIL for 1-D numbers."""
    if src.ndim == 1 and src.dtype.kind in "fiu" and pos.size > 256:
        out = np.empty(pos.size, src.dtype)
        _k.reduce_gather(src, pos, out)
        return out
    return src[pos]


def _union(received):
    """The sorted union of the received index lists and each list's map into it."""
    allidx = np.concatenate(received) if received else np.zeros(0, np.int64)
    union = _unique(allidx)
    return union, [np.searchsorted(union, r) for r in received]


class _Layer:
    """The configured routes of one layer on one node."""

    __slots__ = ("k", "members", "sels", "maps", "n_union", "wsels", "wmaps", "n_wunion")

    def __init__(self, k, members):
        self.k, self.members = k, members


def _members(rank, cum, k):
    d = (rank // cum) % k
    return [rank + (j - d) * cum for j in range(k)]


# ---------------------------------------------------------------------------------------------
# the plan


#: Indices must be below this (the top index plus one must fit an int64).
INDEX_LIMIT = (1 << 63) - 1


def _as_indices(x, name):
    """``x`` as a flat int64 array of valid indices, or TypeError / ValueError naming ``name``:
    integers only (a float or string index is never truncated or parsed), in
    ``[0, INDEX_LIMIT)``, the offending value reported as given."""
    a = np.asarray(x)
    if a.size == 0:
        return np.zeros(0, np.int64)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name} must be integers, got dtype {a.dtype}")
    a = a.ravel()
    lo, hi = a.min(), a.max()
    if lo < 0:
        raise ValueError(f"{name} must be non-negative, got {int(lo)}")
    if int(hi) >= INDEX_LIMIT:
        raise ValueError(f"{name} must be below 2**63 - 1, got {int(hi)}")
    return a.astype(np.int64, copy=False)


class KylixPlan(SparsePlan):
    """A configured sparse all-reduce (see :meth:`KylixCommunicator.sparse_plan`).

    Construction is collective (the configuration phase exchanges the index sets).

    Parameters
    ----------
    comm : KylixCommunicator
        The communicator whose ranks share the plan.
    indices : array-like of int
        This rank's contributed indices (non-negative, any order, duplicates summed).
    want : array-like of int or None
        The indices whose sums this rank receives (None: ``indices``).

    Raises
    ------
    ValueError
        A negative index.

    Attributes
    ----------
    indices, want : ndarray of int64
    n_union : list of int
        Size of the union this node holds after each layer (the Kylix shape, per node).
    """

    def __init__(self, comm: KylixCommunicator, indices, want):
        self.comm = comm
        self.indices = _as_indices(indices, "indices")
        self.want = self.indices if want is None else _as_indices(want, "want")
        self._uidx, self._inv = _unique(self.indices, return_inverse=True)
        self._uwant, self._winv = _unique(self.want, return_inverse=True)
        # sorted distinct indices (the common case) need no permutation in or out
        self._inv = None if self._uidx.size == self.indices.size and _is_sorted(
            self.indices) else self._inv
        self._winv = None if self._uwant.size == self.want.size and _is_sorted(
            self.want) else self._winv
        self.layers = []
        self.n_union = []
        comm._configure(self)

    def reduce(self, values):
        values, back = as_host(values)
        if values.shape[:1] != self.indices.shape:
            raise ValueError(f"values has {values.shape[0] if values.ndim else 0} rows but the "
                             f"plan has {self.indices.shape[0]} indices")
        if values.dtype.kind not in "fiu":
            raise TypeError(f"values must be numeric, got dtype {values.dtype}")
        return back(self.comm._reduce(self, values))

    def __repr__(self):
        return (f"<KylixPlan rank={self.comm.rank} size={self.comm.size} "
                f"indices={self.indices.size} want={self.want.size} unions={self.n_union}>")


# ---------------------------------------------------------------------------------------------
# the communicator


class KylixCommunicator(Communicator):
    """A :class:`~roofline.comm.Communicator` over any :class:`~roofline.comm.Transport`,
    reducing through a Kylix butterfly.

    Parameters
    ----------
    transport : Transport
    degrees : sequence of int, optional
        Layer degrees (product ``transport.size``); default :func:`kylix_degrees`.
    backend : str
        Name reported as :attr:`backend` (default: the transport's ``backend`` attribute).
    tag : int
        Tag namespace of this communicator on the transport (split communicators get their own).
    """

    def __init__(self, transport: Transport, degrees=None, *, backend: str | None = None,
                 tag: int = 0):
        self.transport = transport
        self.rank = int(transport.rank)
        self.size = int(transport.size)
        self.backend = backend or getattr(transport, "backend", "kylix")
        self.shares_process = bool(getattr(transport, "shares_process", False))
        self.degrees = (kylix_degrees(self.size) if degrees is None
                        else _check_degrees(degrees, self.size))
        self._tag = int(tag)
        self._seq = 0
        #: ``on_begin(fields)``, called as each collective starts with its header fields (see
        #: :func:`header_fields`), or None: :class:`~roofline.comm.InProcessGroup` compares
        #: them across its ranks in shared memory
        self.on_begin = None
        #: ``next_seq()``, the sequence number of the collective starting now (advancing it),
        #: or None to count in this communicator: the communicators of one rank of an
        #: :class:`~roofline.comm.InProcessGroup` share one sequence
        self.next_seq = None
        self._fields = None
        self._hdr = b""
        self._splits = 0
        self._closed = False
        self._lock = threading.Lock()
        self.stats = {"calls": 0, "bytes_sent": 0, "messages": 0,
                      "layers": [{"bytes_sent": 0, "messages": 0} for _ in self.degrees]}

    # -- messaging ------------------------------------------------------------------------
    def _begin(self, kind, op="", dtype="", n=0, ident=0):
        """Start collective number ``self._seq``: its header goes on every message it sends
        and is checked on every message it receives."""
        if self.next_seq is not None:
            self._seq = int(self.next_seq())
        self._fields = header_fields(kind, self._seq, op, dtype, n, ident, self.degrees)
        self._hdr = _CHDR.pack(_CMAGIC, *self._fields[:2],
                               self._fields[2].to_bytes(4, "little"), *self._fields[3:])
        self._seq += 1
        if self.on_begin is not None:  # a group sharing memory checks its ranks agree early
            self.on_begin(self._fields)
        return self._fields

    def _send(self, peer, bufs, layer=None):
        n = sum(memoryview(b).nbytes for b in bufs)
        self.stats["bytes_sent"] += n
        self.stats["messages"] += 1
        if layer is not None:
            self.stats["layers"][layer]["bytes_sent"] += n
            self.stats["layers"][layer]["messages"] += 1
        self.transport.send(peer, self._tag, [self._hdr, *bufs],
                            0xFFFF if layer is None else layer)

    def _recv(self, peer):
        mv = memoryview(self.transport.recv(peer, self._tag)).cast("B")
        if len(mv) < _CHDR.size or bytes(mv[:4]) != _CMAGIC:
            raise MessageError(f"rank {self.rank}: a message from rank {peer} without a "
                               "collective header (foreign, or an older Roofline)")
        magic, kind, op, code, *rest = _CHDR.unpack_from(mv)
        theirs = (kind, op, int.from_bytes(code, "little"), *rest)
        if theirs != self._fields:
            raise mismatch(self.rank, self._fields, peer, theirs)
        return mv[_CHDR.size:]

    def _send_array(self, peer, a, layer=None):
        self._send(peer, _encode(a), layer)

    def _recv_array(self, peer):
        return _decode(self._recv(peer))

    def _exchange(self, layer, lay: _Layer, outgoing):
        """Send ``outgoing[j]`` to member ``j`` and return what each member sent (own part kept
        locally); staggered order as in BIDMat (send to ``(d + i) % k``, receive from
        ``(d - i) % k``) so no pair of nodes waits on each other."""
        k, me = lay.k, lay.members.index(self.rank)
        incoming = [None] * k
        incoming[me] = outgoing[me]
        for i in range(1, k):
            self._send_array(lay.members[(me + i) % k], outgoing[(me + i) % k], layer)
        for i in range(1, k):
            j = (me - i) % k
            incoming[j] = self._recv_array(lay.members[j])
        return incoming

    # -- sparse ---------------------------------------------------------------------------
    def sparse_plan(self, indices, want=None) -> KylixPlan:
        self._check_open()
        return KylixPlan(self, as_host(indices)[0], None if want is None else as_host(want)[0])

    @property
    def direct(self) -> bool:
        """Whether the collectives take one exchange instead of the butterfly's two (down and
        back up): a network of one layer of at most ``DIRECT_MAX_DEGREE`` nodes (two; in
        :mod:`._netmodel`, whose ``kylix_steps`` models it), where every node sends its values
        to every other and each sums them itself, in the same member order as the butterfly's
        owners, so the results are bit-identical to it."""
        return len(self.degrees) == 1 and self.degrees[0] <= _netmodel.DIRECT_MAX_DEGREE

    def _configure(self, plan: KylixPlan):
        self.stats["calls"] += 1
        plan._id = self._seq
        self._begin("sparse_plan")
        cur, wcur = plan._uidx, plan._uwant
        if self.direct:
            return self._configure_direct(plan, cur, wcur)
        top = max(int(cur[-1]) + 1 if cur.size else 0, int(wcur[-1]) + 1 if wcur.size else 0)
        hi = top if self.size == 1 else int(
            self._allreduce(np.array([top], dtype=np.int64), "max")[0])
        lo = 0
        cum = 1
        for layer, k in enumerate(self.degrees):
            lay = _Layer(k, _members(self.rank, cum, k))
            parts, lay.sels = _split_sorted(cur, lo, hi, k)
            wparts, lay.wsels = _split_sorted(wcur, lo, hi, k)
            # one message per member carries both lists: [len(part), part..., want part...]
            out = [np.concatenate(([p.size], p, w)).astype(np.int64)
                   for p, w in zip(parts, wparts, strict=True)]
            got = self._exchange(layer, lay, out)
            recv = [g[1:1 + int(g[0])] for g in got]
            wrecv = [g[1 + int(g[0]):] for g in got]
            cur, lay.maps = _union(recv)
            wcur, lay.wmaps = _union(wrecv)
            lay.n_union, lay.n_wunion = cur.size, wcur.size
            me = lay.members.index(self.rank)
            lo, hi = _bounds(lo, hi, k)[me:me + 2]
            plan.layers.append(lay)
            plan.n_union.append(int(cur.size))
            cum *= k
        # the bottom: wanted owner indices in the reduced union (absent ones are zero)
        pos = np.searchsorted(cur, wcur)
        pos = np.minimum(pos, max(cur.size - 1, 0))
        found = (cur[pos] == wcur) if cur.size else np.zeros(wcur.size, bool)
        found = None if found.all() else found
        if found is None and pos.size == cur.size and (pos.size == 0 or (
                pos[0] == 0 and pos[-1] == pos.size - 1)):
            pos = None  # sorted distinct positions spanning the union: the identity
        plan._final = (pos, found)
        plan._n_bottom = cur.size

    def _configure_direct(self, plan: KylixPlan, cur, wcur):
        """The configuration of the one-exchange reduce (:attr:`direct`): every node sends its
        contributed and wanted index lists to every other, and keeps, for each member, the
        positions of its own indices that member wants (what it sends) and the map of what
        that member sends into its own wanted list (where it adds it)."""
        # the butterfly's first collective, kept: where a transport checks its ranks agree on
        # each collective through its dense all-reduce (MPI), a rank still in another
        # collective is named here rather than found by a timeout
        top = max(int(cur[-1]) + 1 if cur.size else 0, int(wcur[-1]) + 1 if wcur.size else 0)
        self._allreduce(np.array([top], dtype=np.int64), "max")
        k = self.degrees[0]
        lay = _Layer(k, _members(self.rank, 1, k))
        msg = np.concatenate(([cur.size], cur, wcur)).astype(np.int64)
        got = self._exchange(0, lay, [msg] * k)
        lay.sels, lay.maps = [], []
        for g in got:
            their, theirw = g[1:1 + int(g[0])], g[1 + int(g[0]):]
            mine = _members_of(cur, theirw)  # my indices that member wants
            lay.sels.append(None if mine.size == cur.size else mine)
            sent = their[_members_of(their, wcur)]  # what it sends me, in its (sorted) order
            lay.maps.append(np.searchsorted(wcur, sent))
        lay.n_union = int(wcur.size)
        plan.layers.append(lay)
        plan.n_union.append(int(_unique(np.concatenate([wcur[m] for m in lay.maps])).size))
        plan._final = None
        plan._n_bottom = wcur.size

    def _reduce(self, plan: KylixPlan, values):
        self._check_open()
        self.stats["calls"] += 1
        tail = values.shape[1:]
        self._begin("sparse_reduce", "", values.dtype.str, math.prod(tail), plan._id)
        if plan._inv is None:  # sorted distinct indices: the values are the union's already
            acc = values
        else:
            acc = np.zeros((plan._uidx.size, *tail), values.dtype)
            if plan._uidx.size == plan.indices.size:  # no duplicates: a permutation
                acc[plan._inv] = values
            else:
                np.add.at(acc, plan._inv, values)  # duplicates of a rank summed, in order
        if plan._final is None:  # the one-exchange reduce (self.direct)
            res = self._reduce_direct(plan.layers[0], acc, values.dtype, tail)
            if plan._winv is not None:
                res = res[plan._winv]
            return res
        for layer, lay in enumerate(plan.layers):
            got = self._exchange(layer, lay, [acc[s] for s in lay.sels])
            _check_values(got, values.dtype, tail, layer, self.rank)
            acc = np.zeros((lay.n_union, *tail), values.dtype)
            # group-member order: the same on every rank and backend
            for m, g in zip(lay.maps, got, strict=True):
                _scatter_add(acc, m, g)
        pos, found = plan._final
        if pos is None:  # the wanted indices are the union itself (want=None, the usual case)
            res = acc
        elif found is None:  # every wanted index reached this node's range
            res = _gather(acc, pos)
        else:
            res = np.zeros((pos.size, *tail), values.dtype)
            if acc.shape[0]:
                res[found] = acc[pos[found]]
        for layer in range(len(plan.layers) - 1, -1, -1):
            lay = plan.layers[layer]
            got = self._exchange(layer, lay, [_gather(res, m) for m in lay.wmaps])
            prev = np.empty((lay.wsels[-1].stop, *tail), values.dtype)
            for s, g in zip(lay.wsels, got, strict=True):
                prev[s] = g
            res = prev
        if plan._winv is not None:
            res = res[plan._winv]
        elif res is values:
            res = values.copy()  # one rank, sorted distinct indices: never the caller's array
        return res

    def _reduce_direct(self, lay, acc, dtype, tail):
        """The one-exchange sparse reduce: each member's wanted values out, every member's
        values for this node's wanted indices summed in member order (the butterfly owner's
        order, so the same bits)."""
        got = self._exchange(0, lay, [acc if s is None else _gather(acc, s) for s in lay.sels])
        _check_values(got, dtype, tail, 0, self.rank)
        res = np.zeros((lay.n_union, *tail), dtype)
        for m, g in zip(lay.maps, got, strict=True):
            _scatter_add(res, m, g)
        return res

    # -- dense ----------------------------------------------------------------------------
    def allreduce(self, x, op="sum"):
        self._check_op(op)
        self._check_open()
        x, back = as_host(x)
        check_reducible(x, op)
        self.stats["calls"] += 1
        self._begin("allreduce", op, x.dtype.str, x.size, zlib.crc32(repr(x.shape).encode()))
        return back(self._allreduce(x, op).reshape(x.shape))

    def _allreduce(self, x, op):
        """The butterfly of :meth:`allreduce` (under the current collective header): a new
        flat array."""
        flat = x.reshape(-1).copy()
        if self.size == 1:
            return flat
        if self.direct:  # one exchange: every member sums every member's vector, in order
            k = self.degrees[0]
            lay = _Layer(k, _members(self.rank, 1, k))
            got = self._exchange(0, lay, [flat] * k)
            if any(g.shape != flat.shape for g in got):
                raise CommError(f"allreduce shape mismatch on rank {self.rank}")
            red = got[0].copy()
            for g in got[1:]:
                if op == "sum":
                    red += g
                else:
                    np.maximum(red, g, out=red)
            return red
        segs = [(0, flat.size)]  # the contiguous range this node reduces at each layer
        cum = 1
        for layer, k in enumerate(self.degrees):
            lay = _Layer(k, _members(self.rank, cum, k))
            b = _bounds(*segs[-1], k)
            got = self._exchange(layer, lay, [flat[b[j]:b[j + 1]] for j in range(k)])
            me = lay.members.index(self.rank)
            if any(g.shape != (b[me + 1] - b[me],) for g in got):
                raise CommError(f"allreduce shape mismatch at layer {layer} on rank {self.rank}")
            red = got[0].copy()
            for g in got[1:]:  # group-member order: the same on every rank and backend
                if op == "sum":
                    red += g
                else:
                    np.maximum(red, g, out=red)
            flat[b[me]:b[me + 1]] = red
            segs.append((b[me], b[me + 1]))
            cum *= k
        for layer in range(len(self.degrees) - 1, -1, -1):
            k = self.degrees[layer]
            cum //= k
            lay = _Layer(k, _members(self.rank, cum, k))
            b = _bounds(*segs[layer], k)
            me = lay.members.index(self.rank)
            got = self._exchange(layer, lay, [flat[b[me]:b[me + 1]]] * k)
            for j in range(k):
                if j != me:
                    flat[b[j]:b[j + 1]] = got[j]
        return flat

    # -- objects --------------------------------------------------------------------------
    def _pack_obj(self, x):
        if isinstance(x, np.ndarray):
            return [b"A" * 8, *_encode(x)]  # an 8-byte kind keeps the array aligned
        return [b"P" * 8, pickle.dumps(x, protocol=pickle.HIGHEST_PROTOCOL)]

    @staticmethod
    def _unpack_obj(buf):
        mv = memoryview(buf)
        kind = bytes(mv[:8])
        if kind == b"A" * 8:
            return _decode(mv[8:]).copy()
        if kind == b"P" * 8:
            return pickle.loads(mv[8:])
        raise MessageError(f"object message of unknown kind {kind!r}")

    def broadcast(self, x, root=0):
        self._check_open()
        self._check_root(root)
        self._begin("broadcast", n=int(root))
        return self._broadcast(x, int(root))

    def _broadcast(self, x, root):
        if self.rank == root:
            host, back = as_host(x) if _is_array(x) else (x, lambda y: y)
            for r in range(self.size):
                if r != root:
                    self._send(r, self._pack_obj(host))
            return back(host.copy()) if isinstance(host, np.ndarray) else x
        out = self._unpack_obj(self._recv(root))
        return _like(x, out)

    def gather(self, x, root=0):
        self._check_open()
        self._check_root(root)
        self._begin("gather", n=int(root))
        return self._gather(x, int(root))

    def _gather(self, x, root):
        host = as_host(x)[0] if _is_array(x) else x
        if self.rank != root:
            self._send(root, self._pack_obj(host))
            return None
        return [x if r == root else _like(x, self._unpack_obj(self._recv(r)))
                for r in range(self.size)]

    def allgather(self, x):
        self._check_open()
        self._begin("allgather")
        return self._broadcast(self._gather(x, 0), 0)

    def barrier(self):
        self._check_open()
        self._begin("barrier")
        self._broadcast(self._gather(None, 0), 0)

    def split(self, color, key=None):
        self._check_open()
        key = self.rank if key is None else key
        self._begin("split")
        everyone = self._broadcast(self._gather((int(color), key, self.rank), 0), 0)
        self._splits += 1
        members = [r for c, kk, r in sorted(everyone, key=lambda t: (t[1], t[2]))
                   if c == int(color)]
        sub = _SubTransport(self.transport, members)
        tag = hash((self._tag, self._splits, int(color))) & 0x7FFFFFFF
        return KylixCommunicator(sub, backend=self.backend, tag=tag)

    def dup(self):
        """The same ranks under a new tag namespace (no communication: every rank derives the
        same tag from the number of splits and duplicates made so far).

        Returns
        -------
        KylixCommunicator
            The duplicate, over the same transport.

        Raises
        ------
        CommError
            This communicator is closed.
        """
        self._check_open()
        self._seq += 1  # every rank calls dup in the same order: the sequence stays in step
        self._splits += 1
        tag = hash((self._tag, self._splits, -1)) & 0x7FFFFFFF  # ints: the same in every process
        return KylixCommunicator(_SubTransport(self.transport, range(self.size)), self.degrees,
                                 backend=self.backend, tag=tag)

    # -- lifecycle ------------------------------------------------------------------------
    def close(self):
        if not self._closed:
            self._closed = True
            if not isinstance(self.transport, _SubTransport):
                self.transport.close()

    def _check_open(self):
        if self._closed:
            raise CommError(f"{self!r} is closed")

    def _check_root(self, root):
        if not 0 <= int(root) < self.size:
            raise ValueError(f"root must be in [0, {self.size}), got {root}")


def _is_array(x):
    return isinstance(x, np.ndarray) or type(x).__module__.split(".")[0] == "cupy"


def _like(x, y):
    """``y`` as ``x``'s array kind when ``x`` is a cupy array (the receiving rank's kind)."""
    if isinstance(y, np.ndarray) and type(x).__module__.split(".")[0] == "cupy":
        return as_host(x)[1](y)
    return y


class _SubTransport(Transport):
    """The ranks ``members`` of a parent transport, renumbered ``0 .. len(members) - 1``."""

    def __init__(self, parent: Transport, members):
        self.parent = parent
        self.members = list(members)
        self.rank = self.members.index(parent.rank)
        self.size = len(self.members)
        self.timeout = parent.timeout
        self.shares_process = parent.shares_process
        self.backend = getattr(parent, "backend", "kylix")

    def send(self, peer, tag, payload, layer=0xFFFF):
        self.parent.send(self.members[peer], tag, payload, layer)

    def recv(self, peer, tag):
        return self.parent.recv(self.members[peer], tag)
