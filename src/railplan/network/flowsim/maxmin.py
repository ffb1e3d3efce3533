"""The max-min fair solver (progressive filling, Bertsekas & Gallager §6.5.2) and the
event loop that runs steps of flows to completion."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from railplan.errors import RailplanError
from railplan.network.flowsim.fabric import BoolArray, FloatArray, FlowNetwork, IntArray
from railplan.network.flowsim.flows import FlowSet, flows_from_matrix, route_pairs
from railplan.records import Record

#: relative tolerance: links within it of saturation saturate together, flows within it of
#: finishing finish together
REL_TOL = 1e-9

#: pair flows of one step a command simulates one by one (when the step cannot be aggregated
#: into exact classes, or with --no-aggregate): the time grows with flows × rate events, about
#: 1 s at 128 GPUs' all-to-all (16,256 flows), from 11 s to over 10 minutes at 256 GPUs'
#: (65,280: oversubscribed radix 16, uniform vs Zipf-skewed) and minutes at 1,024 (measured)
MAX_SIMULATED_PAIRS = 20_000


def _filling_matrices(
    incidence: sp.csr_matrix, multiplicity: FloatArray
) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """(links × classes load per unit rate, classes × links 0/1 touch) of a step."""
    a = sp.csr_matrix(incidence)
    if np.any(np.diff(a.indptr) == 0):
        raise RailplanError("flows", "a flow crosses no link (unbounded rate)")
    wt = sp.csr_matrix(a.multiply(np.asarray(multiplicity, dtype=np.float64)[:, None]).T)
    touch = sp.csr_matrix(a, copy=True)
    touch.data = (touch.data > 0).astype(np.float64)
    return wt, touch


def _fill(
    wt: sp.csr_matrix, touch: sp.csr_matrix, capacity: FloatArray, active: BoolArray
) -> FloatArray:
    """Progressive filling over the ``active`` classes (the others have rate 0)."""
    f = touch.shape[0]
    rate = np.zeros(f)
    frozen = ~active
    resid = np.asarray(capacity, dtype=np.float64).copy()
    while not frozen.all():
        grow = wt @ (~frozen).astype(np.float64)
        pos = grow > 0
        ratio = np.full(len(resid), np.inf)
        ratio[pos] = np.maximum(resid[pos], 0.0) / grow[pos]
        delta = float(ratio.min())
        rate[~frozen] += delta
        resid -= delta * grow
        sat = pos & (ratio <= delta * (1 + REL_TOL) + 1e-300)
        frozen |= (touch @ sat.astype(np.float64)) > 0
    return rate


def max_min_rates(
    incidence: sp.csr_matrix, capacity: FloatArray, multiplicity: FloatArray | None = None
) -> FloatArray:
    """Max-min fair rate (bytes/s) of one flow of each class, by progressive filling.

    All unfrozen flows grow at the same speed; the first links to saturate (within ``REL_TOL``)
    freeze every class that crosses them; repeat until all are frozen. Each round is two sparse
    matrix-vector products (no loop over flows). A class of ``multiplicity`` m loads a link
    m × fraction × rate. Bertsekas & Gallager, *Data Networks*, §6.5.2.
    """
    f = incidence.shape[0]
    if f == 0:
        return np.zeros(0)
    mult = np.ones(f) if multiplicity is None else np.asarray(multiplicity, dtype=np.float64)
    wt, touch = _filling_matrices(incidence, mult)
    return _fill(wt, touch, capacity, np.ones(f, dtype=bool))


@dataclass(frozen=True, eq=False)
class Step:
    """One step of a collective: a dense N×N byte matrix or (src, dst, bytes) pair arrays,
    run ``repeat`` times in a row (identical steps of a ring are simulated once)."""

    name: str
    repeat: int = 1
    matrix: FloatArray | None = None
    src: IntArray | None = None
    dst: IntArray | None = None
    nbytes: FloatArray | None = None

    def flowset(
        self, net: FlowNetwork, aggregate: bool = True, max_pairs: int | None = None
    ) -> FlowSet:
        if self.matrix is not None:
            return flows_from_matrix(net, self.matrix, aggregate, max_pairs, self.name)
        assert self.src is not None and self.dst is not None and self.nbytes is not None
        return route_pairs(net, self.src, self.dst, self.nbytes)


@dataclass(frozen=True)
class StepResult(Record):
    """Outcome of one step (times for a single repetition)."""

    name: str
    repeat: int
    time_s: float
    flows: int
    classes: int
    events: int
    bytes: float
    sent_bytes: float
    max_link_utilization: float
    link_bound_s: float


def simulate_flowset(
    fs: FlowSet, capacity: FloatArray, name: str = "", repeat: int = 1
) -> StepResult:
    """Run one step: rates by max-min fairness, recomputed whenever flows finish."""
    cap = np.asarray(capacity, dtype=np.float64)
    remaining = fs.flow_bytes.astype(np.float64).copy()
    sent = np.zeros_like(remaining)
    active = remaining > 0
    a = fs.incidence
    t = 0.0
    events = 0
    util = 0.0
    if fs.classes:
        wt, touch = _filling_matrices(a, fs.multiplicity)
    while active.any():
        r = _fill(wt, touch, cap, active)
        util = max(util, float(np.max((wt @ r) / cap)))
        idx = np.flatnonzero(active)
        left = remaining[idx] / r[idx]
        dt = float(left.min())
        done = idx[left <= dt * (1 + REL_TOL)]
        t += dt
        sent[idx] += r[idx] * dt
        remaining[idx] -= r[idx] * dt
        remaining[done] = 0.0
        active[done] = False
        events += 1
    load_bytes = a.T @ (fs.multiplicity * fs.flow_bytes)
    bound = float(np.max(load_bytes / cap)) if len(load_bytes) else 0.0
    return StepResult(
        name=name,
        repeat=repeat,
        time_s=t,
        flows=fs.flows,
        classes=fs.classes,
        events=events,
        bytes=fs.total_bytes,
        sent_bytes=float(fs.multiplicity @ sent),
        max_link_utilization=util,
        link_bound_s=bound,
    )


@dataclass(frozen=True)
class SimResult:
    """A whole collective: the sum of its steps (each × its repeat)."""

    steps: tuple[StepResult, ...]

    @property
    def time_s(self) -> float:
        return sum(s.time_s * s.repeat for s in self.steps)

    @property
    def link_bound_s(self) -> float:
        return sum(s.link_bound_s * s.repeat for s in self.steps)

    @property
    def step_count(self) -> int:
        return sum(s.repeat for s in self.steps)

    @property
    def flows(self) -> int:
        return sum(s.flows * s.repeat for s in self.steps)


def simulate(
    net: FlowNetwork, steps: list[Step], aggregate: bool = True, max_pairs: int | None = None
) -> SimResult:
    """Run the steps one after another on ``net`` (commands pass ``max_pairs`` =
    `MAX_SIMULATED_PAIRS`: a step simulated pair by pair past it is a one-line error)."""
    out = []
    for st in steps:
        if st.repeat < 1:
            continue
        fs = st.flowset(net, aggregate, max_pairs)
        out.append(simulate_flowset(fs, net.capacity_bytes_per_s, st.name, st.repeat))
    return SimResult(tuple(out))
