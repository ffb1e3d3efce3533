"""One collective simulated flow by flow on the built topology: the `flow` algorithm.

The closed forms (collective/algorithms.py) give each phase its bottleneck bandwidth and assume
nothing else shares a link. Here the same schedule runs on the railplan-built graph
(network/graph.py) through the flow-level simulator (network/flowsim: max-min fair rates, ECMP
over equal-cost switch paths), so link sharing and path collisions count:

- all-reduce: the hierarchical schedule (reduce-scatter in the HB domain, then in the rail, then
  the all-gathers back; a ring inside the domain when the group lies in one);
- all-gather / reduce-scatter: its second / first half;
- all-to-all: direct pairs on rail-optimized and ideal networks, the rail phase then the HB
  phase (forwarding, NCCL PXN) on rail-only.

Links carry the bandwidths the closed forms and the lower bound use (collective/bound.py): HB
links the system's achievable HB bandwidth, NIC and fabric links their line rate scaled to the
achievable NIC bandwidth. Each step of a ring also pays one latency (the system's HB or NIC
latency, as the closed forms charge it), and a ring collective NCCL's base latency once: the
simulator itself moves bytes only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from railplan.collective.algorithms import Built, Group, Result, checked
from railplan.errors import RailplanError
from railplan.perf import collectives as coll
from railplan.units import bytes_per_s_to_gbps, gbps_to_bytes_per_s

if TYPE_CHECKING:
    from railplan.network.flowsim.fabric import FlowNetwork
    from railplan.network.flowsim.maxmin import Step

#: the largest group simulated; the all-to-all's N² flows per step bound it (fabric.py refuses
#: a step past its incidence limit in any case)
MAX_RANKS = 4096


def _steps(g: Group, op: str, size_bytes: float, arch: str) -> tuple[list[Step], str]:
    """The schedule's steps and the note naming it."""
    from railplan.network.flowsim import schedules

    if op == "all-to-all":
        pairs = schedules.uniform_pair_bytes(g.gpus, size_bytes / g.gpus)
        if arch == "rail-only" and g.y > 1:
            steps = schedules.alltoall_forwarding_steps(pairs, g.x)
            return steps, "rail phase then HB phase (forwarding), flow-level on the built graph"
        return schedules.alltoall_direct_steps(pairs), "direct pairs, flow-level on the built graph"
    steps = schedules.hierarchical_allreduce_steps(g.gpus, g.x, size_bytes)
    half = len(steps) // 2
    if op == "reduce-scatter":
        steps = steps[:half]
    elif op == "all-gather":
        steps = steps[half:]
    name = "hierarchical" if g.y > 1 else "ring in the HB domain"
    return steps, f"{name}, flow-level (max-min fair, ECMP) on the built graph"


def flow(g: Group, op: str, size_bytes: float, built: Built) -> Result:
    """Time, algbw and busbw of the collective's schedule simulated on the `built` network
    (its switch radix and NIC ports; `oversubscription`:1 above the leaves when oversubscribed).
    Multi-plane runs as `Built.one_plane` (the flow simulator routes a GPU through one leaf)."""
    from railplan.network.flowsim.maxmin import MAX_SIMULATED_PAIRS, simulate

    size_bytes = checked(op, size_bytes)
    if g.gpus > MAX_RANKS:
        raise RailplanError(
            "gpus", f"flow (the flow-level simulation) takes at most {MAX_RANKS} GPUs; got {g.gpus}"
        )
    lk = g.links
    built = built.one_plane()
    net = _network(g, built.arch, built.radix, built.nic_gbps, built.oversubscription)
    steps, note = _steps(g, op, size_bytes, built.arch)
    sim = simulate(net, steps, max_pairs=MAX_SIMULATED_PAIRS)
    latency_s = sum(
        s.repeat * (lk.hb_lat_s if s.name.startswith("HB") or g.y == 1 else lk.nic_lat_s)
        for s in sim.steps
    )
    if op != "all-to-all":  # a ring collective: NCCL's base latency, once
        latency_s += coll.NCCL_SIMPLE_BASE_US * 1e-6
    return Result.timed("flow", op, g, size_bytes, sim.time_s + latency_s, note)


def _network(
    g: Group, arch: str, radix: int, nic_gbps: int, oversubscription: float
) -> FlowNetwork:
    """The built graph as a flow network at the bandwidths the closed forms use (NIC and
    fabric links at the achievable share of their line rate)."""
    from railplan.network.flowsim.fabric import KIND_HB_DOWN, KIND_HB_UP, network_for

    lk = g.links
    over = oversubscription if arch == "oversubscribed" else None
    net = network_for(arch, g.gpus, g.x, radix, nic_gbps, bytes_per_s_to_gbps(lk.hb_bw), 1, over)
    hb = np.isin(net.link_kind, (KIND_HB_UP, KIND_HB_DOWN))
    nic_scale = lk.nic_bw / gbps_to_bytes_per_s(nic_gbps)  # achievable over line rate
    cap = np.where(hb, lk.hb_bw, net.capacity_bytes_per_s * nic_scale)
    return net.with_capacity(cap)
