"""A cluster cost model: the time of a Kylix collective on a stated network, and of a
distributed solver's iteration at any number of ranks (issue 31).

The network
-----------
Every node has one full-duplex link of ``bandwidth`` bytes per second of TCP payload each way
and a one-way ``latency`` per message step (wire, switch, kernel).  The hosts add their own
costs, fitted from runs (:meth:`ClusterModel.fit`): ``step_s`` per layer step (waking up,
waiting for the slowest peer), ``message_s`` per message sent (a send call, framing) and
``byte_s`` per byte sent or received (copies, checksums, the scatter-adds of the sums).

One collective
--------------
A Kylix collective is a sequence of *steps* (:class:`Step`), one per layer going down and one
per layer coming back up; in a step a node sends ``messages`` messages to the other members of
its group, ``bytes_out`` bytes in all, and receives ``bytes_in``.  A step takes ::

    latency + bytes_wire / bandwidth + step_s + messages * message_s
            + (bytes_out + bytes_in) * byte_s

with ``bytes_wire = max(bytes_out, bytes_in) + messages * header`` (the node's outgoing
messages share its uplink, the incoming ones its downlink), and the collective the sum of its
steps.  With ``overlap=True`` the hosts' work proceeds while the bytes are on the wire and a
step takes ``latency`` plus the larger of the wire's and the hosts' times (a lower bound
where the additive form is an upper one).  :func:`kylix_steps` gives the steps of a reduce
over degrees ``k_1 ... k_L`` (see
:mod:`roofline.comm._kylix`): with ``U(j)`` the number of distinct indices in the
contributions of ``j`` nodes and ``c_l = k_1 ... k_{l-1}``, a node enters layer ``l`` going
down holding ``U(c_l) / c_l`` indices of its range and sends ``(k_l - 1) / k_l`` of them, one
message to each other member; going up it holds ``U(K) / c_{l+1}`` sums and sends all of them
to each other member (every node wants the whole union, as the distributed Newton does).
Dense data are ``U(j) = d``, which gives the dense all-reduce's reduce-scatter and
all-gather.  Features that collide (power-law data) make ``U(c_l) / c_l`` shrink down the
layers, which is why several layers can beat one all-to-all.

One iteration
-------------
A rank's local work is divided by the number of ranks except for a serial part (the vector
algebra over the union of the features does not shrink with ``K``): a *work unit* (one pass of
the solver, e.g. one Hessian-vector product) takes ``serial_s + parallel_s / K`` seconds
(:class:`ComputeScaling`).  An iteration is its work units and its collectives, so its time
at ``K`` ranks is the units' time plus the collectives' (:meth:`ClusterModel.iteration_time`);
a solver whose iterates do not depend on ``K`` (distributed Newton) takes the same iterations
at every ``K``, so the time to a tolerance is the sum over the iterations of a run at any
``K``.
"""

from __future__ import annotations

import itertools
import logging
import math
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

__all__ = ["ClusterModel", "ComputeScaling", "Network", "Step", "kylix_steps", "model_degrees"]

logger = logging.getLogger(__name__)

#: Bytes on the wire per message beyond the payload Kylix counts in ``comm.stats``: the
#: collective header (48) and the transport's frame header (48).
HEADER_BYTES = 96
#: TCP payload per byte of an Ethernet frame as ``tc``'s token bucket counts it (MSS 1448 of
#: a 1514-byte frame with TCP timestamps).
TCP_EFFICIENCY = 1448 / 1514


@dataclass(frozen=True)
class Network:
    """A cluster's network: one full-duplex link per node.

    Parameters
    ----------
    bandwidth : float
        TCP payload bytes per second each way on a node's link (``inf``: no limit).
    latency : float
        Seconds added to every message step (one way).
    name : str
        For tables.
    """

    bandwidth: float = math.inf
    latency: float = 0.0
    name: str = ""

    def __post_init__(self):
        if not self.bandwidth > 0:
            raise ValueError(f"bandwidth must be > 0 bytes/s, got {self.bandwidth}")
        if not (self.latency >= 0 and math.isfinite(self.latency)):
            raise ValueError(f"latency must be a finite number of seconds >= 0, "
                             f"got {self.latency}")

    @classmethod
    def ethernet(cls, bits_per_s: float, latency: float = 50e-6, name: str | None = None):
        """A link of ``bits_per_s`` bits per second carrying TCP (payload
        :data:`TCP_EFFICIENCY` of the frames' bytes).

        Parameters
        ----------
        bits_per_s : float
            The line rate (``1e9`` for 1 Gb/s).
        latency : float
            Seconds per message step (default 50 us: a switched LAN).
        name : str, optional
            Default ``"1 Gb/s"``-style.

        Returns
        -------
        Network
        """
        if name is None:
            name = (f"{bits_per_s / 1e9:g} Gb/s" if bits_per_s >= 1e9
                    else f"{bits_per_s / 1e6:g} Mb/s")
        return cls(bits_per_s / 8 * TCP_EFFICIENCY, latency, name)


class Step(NamedTuple):
    """One layer step of a collective, on the busiest node.

    Parameters
    ----------
    messages : int
        Messages the node sends.
    bytes_out : float
        Bytes it sends (payload as ``comm.stats`` counts it).
    bytes_in : float
        Bytes it receives.
    """

    messages: int
    bytes_out: float
    bytes_in: float


#: A Kylix network of one layer of at most this many nodes reduces in one exchange
#: (:attr:`~roofline.comm.KylixCommunicator.direct`): with two nodes it sends no more than the
#: butterfly's two exchanges (the same bytes for a dense vector; for a sparse one, the sender's
#: indices the peer wants instead of its own in the peer's range plus the peer's wanted ones in
#: its own) and waits on the network once.
DIRECT_MAX_DEGREE = 2


def _union_fn(union):
    if callable(union):
        return union
    u = float(union)
    return lambda j: u


def kylix_steps(degrees, union, *, columns: int = 1, itemsize: int = 8) -> list[Step]:
    """The steps of a Kylix reduce in which every node wants the sums over the whole union.

    Parameters
    ----------
    degrees : sequence of int
        The layer degrees (product: the number of nodes ``K``); ``()`` for one node.
    union : int or callable
        ``U(j)``, the distinct indices in the contributions of ``j`` nodes merged
        (``j = 1 ... K``; the nodes hold their shares of the data); an int ``d`` for dense
        vectors (every node holds all ``d``).
    columns : int
        Values per index (the distributed Newton's gradient reduces two).
    itemsize : int
        Bytes per value.

    Returns
    -------
    list of Step
        Down the layers, then back up: ``2 L`` steps (none for one node); one step where
        Kylix reduces in one exchange (:attr:`KylixCommunicator.direct`: one layer of two
        nodes), each node sending the other its own ``U(1)`` values.
    """
    U = _union_fn(union)
    degrees = [int(k) for k in degrees]
    K = math.prod(degrees)
    head = 8 + 8 * (1 if columns == 1 else 2)  # the array header of each message
    row = columns * itemsize
    if len(degrees) == 1 and 2 <= degrees[0] <= DIRECT_MAX_DEGREE:
        b = (K - 1) * (U(1) * row + head)
        return [Step(K - 1, b, b)]
    down, up = [], []
    c = 1
    for k in degrees:
        held = U(c) / c
        b = held * (k - 1) / k * row + (k - 1) * head
        down.append(Step(k - 1, b, b))
        c *= k
        b = (k - 1) * (U(K) / c * row + head)
        up.append(Step(k - 1, b, b))
    return down + up[::-1]


@dataclass(frozen=True)
class ComputeScaling:
    """A work unit's seconds on each of ``K`` ranks: ``serial_s + parallel_s / K``.

    Parameters
    ----------
    serial_s : float
        The part that every rank does whatever ``K`` (e.g. vector algebra over the union of
        the features).
    parallel_s : float
        The part divided among the ranks (one rank's share at ``K = 1``).
    """

    serial_s: float
    parallel_s: float

    def unit_s(self, K: int) -> float:
        """Seconds of one work unit at ``K`` ranks.

        Parameters
        ----------
        K : int
            The number of ranks.

        Returns
        -------
        float
        """
        return self.serial_s + self.parallel_s / int(K)

    @classmethod
    def fit(cls, ranks, unit_s):
        """Least squares of ``unit_s = serial_s + parallel_s / K`` over measured
        ``(K, unit_s)`` pairs, both constants kept non-negative.

        Parameters
        ----------
        ranks : sequence of int
            The ``K`` of each measurement.
        unit_s : sequence of float
            Seconds per work unit measured at that ``K``.

        Returns
        -------
        ComputeScaling
            One measurement (or all at one ``K``): all of it parallel.
        """
        K = np.asarray(ranks, dtype=np.float64)
        t = np.asarray(unit_s, dtype=np.float64)
        if K.size == 0:
            raise ValueError("no measurements")
        A = np.column_stack([np.ones_like(K), 1.0 / K])
        s, p = _nonneg_lstsq(A, t) if np.unique(K).size > 1 else (0.0, float(np.mean(t * K)))
        return cls(float(s), float(p))


def _nonneg_lstsq(A, b):
    """``argmin ||A x - b||`` over ``x >= 0`` for a few columns (every active set tried)."""
    n = A.shape[1]
    best, best_r = np.zeros(n), float(np.sum(b * b))
    for m in range(1, n + 1):
        for cols in itertools.combinations(range(n), m):
            x, *_ = np.linalg.lstsq(A[:, cols], b, rcond=None)
            if (x < 0).any():
                continue
            full = np.zeros(n)
            full[list(cols)] = x
            r = float(np.sum((A @ full - b) ** 2))
            if r < best_r:
                best, best_r = full, r
    return best


@dataclass(frozen=True)
class ClusterModel:
    """A network and the hosts' fitted costs (see the module's docstring).

    Parameters
    ----------
    network : Network
    step_s : float
        Host seconds per layer step.
    message_s : float
        Host seconds per message sent.
    byte_s : float
        Host seconds per byte sent or received.
    header : int
        Wire bytes per message beyond the counted payload.
    overlap : bool
        The hosts' work overlaps the wire's (a step takes the larger of the two), instead of
        adding to it.
    """

    network: Network = Network()
    step_s: float = 0.0
    message_s: float = 0.0
    byte_s: float = 0.0
    header: int = HEADER_BYTES
    overlap: bool = False

    def with_network(self, network: Network) -> ClusterModel:
        """The same hosts on another network.

        Parameters
        ----------
        network : Network

        Returns
        -------
        ClusterModel
        """
        return replace(self, network=network)

    def step_time(self, step: Step) -> float:
        """Seconds of one step.

        Parameters
        ----------
        step : Step

        Returns
        -------
        float
        """
        m, bo, bi = step
        net = self.network
        wire = (max(bo, bi) + m * self.header) / net.bandwidth
        host = self.step_s + m * self.message_s + (bo + bi) * self.byte_s
        return net.latency + (max(wire, host) if self.overlap else wire + host)

    def collective_time(self, steps) -> float:
        """Seconds of one collective: the sum of its steps' times.

        Parameters
        ----------
        steps : sequence of Step
            E.g. :func:`kylix_steps`.

        Returns
        -------
        float
        """
        return float(sum(self.step_time(s) for s in steps))

    def iteration_time(self, units: float, collectives, K: int,
                       compute: ComputeScaling) -> float:
        """Seconds of one iteration at ``K`` ranks.

        Parameters
        ----------
        units : float
            Its work units (passes over the local data).
        collectives : sequence of (count, steps)
            How many collectives of each shape it runs, with their steps at ``K``.
        K : int
            The number of ranks.
        compute : ComputeScaling
            A work unit's time.

        Returns
        -------
        float
        """
        return units * compute.unit_s(K) + sum(c * self.collective_time(s)
                                               for c, s in collectives)

    @classmethod
    def fit(cls, samples, network: Network | None = None) -> ClusterModel:
        """The hosts' constants fitted to measured collectives on ``network`` (default: an
        unlimited one, e.g. loopback or an unshaped link).

        Parameters
        ----------
        samples : sequence of (steps, seconds)
            Measured seconds inside collectives and the steps they ran (one sample may sum
            several collectives: the concatenation of their steps).
        network : Network, optional
            The network the samples ran on; its own time is subtracted first.

        Returns
        -------
        ClusterModel
            On ``network``; non-negative least-squares ``step_s``, ``message_s`` and
            ``byte_s``.
        """
        base = cls(network or Network())  # additive: the network's time subtracted
        rows, t = [], []
        for steps, seconds in samples:
            steps = list(steps)
            wire = base.collective_time(steps)  # the network's part alone
            rows.append([len(steps), sum(s.messages for s in steps),
                         sum(s.bytes_out + s.bytes_in for s in steps)])
            t.append(float(seconds) - wire)
        if not rows:
            raise ValueError("no samples")
        A, b = np.asarray(rows, dtype=np.float64), np.asarray(t)
        scale = np.maximum(np.abs(A).max(axis=0), 1e-300)  # bytes and counts: comparable
        x = _nonneg_lstsq(A / scale, b) / scale
        logger.info("cluster model fit: %.3g s/step, %.3g s/message, %.3g s/byte over %d "
                    "samples", *x, len(rows))
        return replace(base, step_s=float(x[0]), message_s=float(x[1]), byte_s=float(x[2]))


def _factorizations(n, largest):
    """Every decreasing tuple of integers >= 2 with product ``n`` and first factor at most
    ``largest``."""
    if n == 1:
        yield ()
        return
    for k in range(min(n, largest), 1, -1):
        if n % k == 0:
            for rest in _factorizations(n // k, k):
                yield (k, *rest)


def model_degrees(n_nodes: int, union, model: ClusterModel, *, columns: int = 1,
                  itemsize: int = 8, max_candidates: int = 10000) -> tuple[int, ...]:
    """The layer degrees whose reduce ``model`` predicts to be fastest.

    Parameters
    ----------
    n_nodes : int
    union : int or callable
        As :func:`kylix_steps`: ``U(j)``, or the indices of a dense vector.
    model : ClusterModel
    columns, itemsize : int
        As :func:`kylix_steps`.
    max_candidates : int
        The most factorizations tried (in order of decreasing first degree).

    Returns
    -------
    tuple of int
        Decreasing degrees, product ``n_nodes`` (``()`` for one node); ties go to fewer
        layers.
    """
    n_nodes = int(n_nodes)
    if n_nodes < 1:
        raise ValueError(f"n_nodes must be >= 1, got {n_nodes}")
    best, best_t = (), math.inf
    for deg in itertools.islice(_factorizations(n_nodes, n_nodes), max_candidates):
        t = model.collective_time(kylix_steps(deg, union, columns=columns, itemsize=itemsize))
        if t < best_t * (1 - 1e-12) or (t <= best_t and len(deg) < len(best)):
            best, best_t = deg, t
    return best
