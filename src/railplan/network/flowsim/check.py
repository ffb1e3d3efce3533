"""One call: build the network, simulate a collective and compare it with its closed form
(docs/flow-check.md)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from railplan.errors import RailplanError, near_multiples
from railplan.network.flowsim import schedules
from railplan.network.flowsim.fabric import (
    FloatArray,
    FlowNetwork,
    network_for,
)
from railplan.network.flowsim.maxmin import MAX_SIMULATED_PAIRS, Step, StepResult, simulate
from railplan.records import Record


def oversubscribed_alltoall_bound_s(net: FlowNetwork, pair_bytes: FloatArray) -> float:
    """Cut bound of a direct all-to-all: max over the GPU NIC and HB links and over every leaf's
    uplinks (bytes leaving the leaf ÷ its uplink capacity). Equals the closed form
    max((x−1)D/C_F, x(y−1)D/C_S) without oversubscription; with o:1 leaves the leaf term is
    o × the cross-leaf bytes per GPU / C_S ("slowed by the ratio" for the traffic that leaves)."""
    m = np.asarray(pair_bytes, dtype=np.float64).copy()
    np.fill_diagonal(m, 0.0)
    n, k = net.gpus, net.hb_domain
    dom = np.arange(n) // k
    same = dom[:, None] == dom[None, :]
    cap = net.capacity_bytes_per_s
    hb_s = 0.0
    if k > 1:
        hb_s = float(np.max(np.where(same, m, 0).sum(axis=1) / cap[net.gpu_hb_up]))
        hb_s = max(hb_s, float(np.max(np.where(same, m, 0).sum(axis=0) / cap[net.gpu_hb_down])))
    nic = np.where(same, 0.0, m)
    nic_s = float(np.max(nic.sum(axis=1) / cap[net.gpu_up])) if nic.any() else 0.0
    nic_s = max(nic_s, float(np.max(nic.sum(axis=0) / cap[net.gpu_down])) if nic.any() else 0.0)
    leaf_s = 0.0
    for leaf in np.unique(net.gpu_leaf):
        inside = net.gpu_leaf == leaf
        out_bytes = float(nic[inside][:, ~inside].sum())
        up_cap = float(cap[net.fabric_links[net.fabric_u == leaf]].sum())
        if out_bytes > 0 and up_cap > 0:
            leaf_s = max(leaf_s, out_bytes / up_cap)
    return max(hb_s, nic_s, leaf_s)


def measure(fn: Any, *args: Any, **kw: Any) -> tuple[Any, float]:
    """``fn(*args, **kw)`` and its wall-clock seconds (for the CLI's ``elapsed_s``)."""
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    return out, time.perf_counter() - t0


COLLECTIVES: tuple[str, ...] = ("alltoall", "allreduce-ring", "allreduce-hierarchical")
SIM_ARCHS: tuple[str, ...] = ("rail-optimized", "rail-only", "oversubscribed")
SCHEDULES: tuple[str, ...] = ("auto", "direct", "forwarding")
#: the all-to-all holds an N×N traffic matrix: 8,192 GPUs take ~2 min and ~12 GB
MAX_ALLTOALL_GPUS = 8192
DEFAULT_OVERSUBSCRIPTION = 3.0


def parse_skew(text: str | None) -> float | None:
    """``zipf:S`` → S (the Zipf exponent); ``None``/``""``/``uniform`` → None."""
    if text is None or text in ("", "uniform", "none"):
        return None
    kind, _, val = text.partition(":")
    if kind != "zipf":
        raise RailplanError("skew", f"{text!r}: use zipf:S (e.g. zipf:1.2) or uniform")
    try:
        s = float(val)
    except ValueError:
        raise RailplanError("skew", f"{text!r}: the Zipf exponent must be a number") from None
    if not 0 <= s <= 10:
        raise RailplanError("skew", f"Zipf exponent must be in [0, 10]; got {s}")
    return s


@dataclass(frozen=True)
class FlowsimReport(Record):
    """Result of ``run``: simulated time beside the closed form (bandwidths are line rates)."""

    inputs: dict[str, Any]
    simulated_s: float
    closed_form_s: float | None
    closed_form: str
    closed_form_applies: bool
    relative_error: float | None
    link_bound_s: float
    cut_bound_s: float | None
    flows: int
    classes: int
    links: int
    steps: int
    aggregated: bool
    elapsed_s: float
    step_detail: tuple[StepResult, ...]


def closed_form_s(
    collective: str,
    schedule: str,
    x: int,
    y: int,
    nbytes: float,
    hb_bytes_per_s: float,
    nic_bytes_per_s: float,
    oversubscription: float = 1.0,
) -> tuple[float, str]:
    """The closed form of ``railplan.perf.collectives`` for a case, latency 0, and its name.

    ``nbytes`` is the per-pair D for all-to-all, the vector size for all-reduce. Oversubscription
    divides C_S as the iteration model does ("NIC bandwidth between HB domains ÷ ratio")."""
    from railplan.perf import collectives as col

    cf, cs = hb_bytes_per_s, nic_bytes_per_s / oversubscription
    if collective == "alltoall":
        if schedule == "forwarding":
            return float(col.all_to_all_rail_only_s(x, y, nbytes, cf, cs, 0, 0)), (
                "x(y-1)D/C_S + y(x-1)D/C_F"
            )
        return float(col.all_to_all_rail_optimized_s(x, y, nbytes, cf, cs, 0, 0)), (
            "max((x-1)D/C_F, x(y-1)D/C_S)"
        )
    if collective == "allreduce-ring":
        return float(col.ring_all_reduce_s(y, nbytes, cs, 0)), "2(y-1)/y D/C_S"
    if collective == "allreduce-hierarchical":
        return float(col.hierarchical_all_reduce_s(x, y, nbytes, cf, cs, 0, 0)), (
            "2[(y-1)D/(xyC_S) + (x-1)D/(xC_F)]"
        )
    raise RailplanError("collective", f"{collective!r}: choose one of {', '.join(COLLECTIVES)}")


def _check_inputs(
    gpus: int,
    arch: str,
    collective: str,
    pair_bytes: float | None,
    size_bytes: float | None,
    schedule: str,
    seed: int,
) -> tuple[float | None, float | None]:
    """Refuse bad ``run`` arguments (one line naming the field); the checked byte counts."""
    from railplan.limits import check_int
    from railplan.network.graph import MAX_GRAPH_GPUS
    from railplan.specs.base import BYTES

    if arch not in SIM_ARCHS:
        raise RailplanError("arch", f"{arch!r}: choose one of {', '.join(SIM_ARCHS)}")
    if collective not in COLLECTIVES:
        raise RailplanError("collective", f"{collective!r}: choose one of {', '.join(COLLECTIVES)}")
    if schedule not in SCHEDULES:
        raise RailplanError("schedule", f"{schedule!r}: choose one of {', '.join(SCHEDULES)}")
    if schedule != "auto" and collective != "alltoall":
        raise RailplanError(
            "schedule", f"chooses the all-to-all's schedule; {collective} has its own steps"
        )
    if pair_bytes is not None and size_bytes is not None:
        raise RailplanError("bytes", "give --bytes-per-pair or --bytes, not both")
    if pair_bytes is not None:
        pair_bytes = BYTES.check("bytes_per_pair", pair_bytes)
    if size_bytes is not None:
        size_bytes = BYTES.check("bytes", size_bytes)
    limit = MAX_ALLTOALL_GPUS if collective == "alltoall" else MAX_GRAPH_GPUS
    if not 1 <= gpus <= limit:
        why = "an N×N traffic matrix" if collective == "alltoall" else "the whole network graph"
        raise RailplanError(
            "gpus",
            f"must be in [1, {limit:,}] for {collective} (the flow simulator holds {why}); "
            f"got {gpus:,}; for larger clusters use the closed forms (railplan alltoall, estimate)",
        )
    check_int("seed", seed, 0, 2**63 - 1)
    return pair_bytes, size_bytes


@dataclass(frozen=True)
class _Plan:
    """The steps of one case, its schedule name, D (pair bytes or vector size), the cut bound."""

    steps: list[Step]
    schedule: str
    nbytes: float
    cut_bound_s: float | None


def _plan(
    net: FlowNetwork,
    arch: str,
    collective: str,
    schedule: str,
    pair_bytes: float | None,
    size_bytes: float | None,
    zipf: float | None,
    seed: int,
) -> _Plan:
    """The schedule's steps for a collective on ``net`` (defaults: 1 MiB per pair, 1 GiB)."""
    gpus, k = net.gpus, net.hb_domain
    if collective == "alltoall":
        if pair_bytes is None:
            pair_bytes = (size_bytes / gpus) if size_bytes is not None else float(2**20)
        auto = "forwarding" if arch == "rail-only" else "direct"
        sched = schedule if schedule != "auto" else auto
        b = (
            schedules.uniform_pair_bytes(gpus, pair_bytes)
            if zipf is None
            else schedules.zipf_pair_bytes(gpus, pair_bytes, zipf, seed)
        )
        if sched == "forwarding":
            return _Plan(schedules.alltoall_forwarding_steps(b, k), sched, float(pair_bytes), None)
        cut = oversubscribed_alltoall_bound_s(net, b)
        return _Plan(schedules.alltoall_direct_steps(b), sched, float(pair_bytes), cut)
    if pair_bytes is not None:
        raise RailplanError("bytes_per_pair", "is for alltoall; use --bytes for all-reduce")
    if zipf is not None:
        raise RailplanError("skew", "skewed traffic applies to alltoall only")
    nbytes = float(size_bytes) if size_bytes is not None else float(2**30)
    if collective == "allreduce-ring":
        return _Plan(schedules.ring_allreduce_steps(gpus, k, nbytes), "ring", nbytes, None)
    return _Plan(
        schedules.hierarchical_allreduce_steps(gpus, k, nbytes), "hierarchical", nbytes, None
    )


def _inputs(
    sysm: Any,
    system: str,
    gpus: int,
    arch: str,
    collective: str,
    plan: Any,
    radix: int,
    ratio: float,
    skew: str | None,
) -> dict[str, Any]:
    """The report's `inputs`: what was simulated, as the user named it."""
    return {
        "system": sysm.name if sysm.name != "custom" else system,
        "gpus": gpus,
        "hb_domain": int(sysm.hb_domain),
        "arch": arch,
        "collective": collective,
        "schedule": plan.schedule,
        "bytes_per_pair" if collective == "alltoall" else "bytes": plan.nbytes,
        "radix": radix,
        "oversubscription": ratio,
        "skew": skew or "uniform",
        "hb_gbps": sysm.hb_tbps * 1000,
        "nic_gbps": sysm.nic_gbps * sysm.nics_per_gpu,
    }


def run(
    system: str,
    gpus: int,
    arch: str = "rail-optimized",
    collective: str = "alltoall",
    pair_bytes: float | None = None,
    size_bytes: float | None = None,
    radix: int = 64,
    oversubscription: float | None = None,
    skew: str | None = None,
    schedule: str = "auto",
    aggregate: bool = True,
    seed: int = 0,
) -> FlowsimReport:
    """Simulate one collective on a catalog system and compare it with its closed form.

    All-to-all: ``pair_bytes`` per ordered pair (or ``size_bytes`` per GPU, split in N);
    all-reduce: ``size_bytes`` (the reduced vector). Line rates are used on both sides:
    C_S = nic_gbps × nics_per_gpu, C_F = hb_tbps (no efficiency factors).
    ``oversubscription`` is for arch ``oversubscribed`` only (default 3); with any other arch
    it is an error rather than a silently ignored option.
    """
    from railplan.specs import load_system

    t0 = time.perf_counter()
    pair_bytes, size_bytes = _check_inputs(
        gpus, arch, collective, pair_bytes, size_bytes, schedule, seed
    )
    if arch == "oversubscribed" and oversubscription is None:
        oversubscription = DEFAULT_OVERSUBSCRIPTION
    sysm = load_system(system)
    k = int(sysm.hb_domain)
    if gpus >= 1 and gpus % k:  # the system fixes K: the job's size is what to change
        raise RailplanError(
            "gpus",
            f"{gpus:,} is not a multiple of {sysm.name}'s HB domain of K={k} GPUs; "
            f"e.g. {near_multiples(gpus, k)}",
        )
    nics = int(sysm.nics_per_gpu)
    if nics != sysm.nics_per_gpu:
        raise RailplanError("system", "the simulator needs a whole number of NICs per GPU")
    net = network_for(
        arch, gpus, k, radix, int(sysm.nic_gbps), sysm.hb_tbps * 1000, nics, oversubscription
    )
    ratio = oversubscription or 1.0
    zipf = parse_skew(skew)
    plan = _plan(net, arch, collective, schedule, pair_bytes, size_bytes, zipf, seed)
    res = simulate(net, plan.steps, aggregate, MAX_SIMULATED_PAIRS)
    cf_s, cf_name = closed_form_s(
        collective,
        plan.schedule,
        k,
        gpus // k,
        plan.nbytes,
        sysm.hb_line_bytes_per_s,
        sysm.nic_line_bytes_per_s,
        ratio,
    )
    applies = zipf is None
    return FlowsimReport(
        inputs=_inputs(sysm, system, gpus, arch, collective, plan, radix, ratio, skew),
        simulated_s=res.time_s,
        closed_form_s=cf_s,
        closed_form=cf_name if applies else cf_name + " (uniform, same mean bytes)",
        closed_form_applies=applies,
        relative_error=res.time_s / cf_s - 1 if cf_s > 0 else None,
        link_bound_s=res.link_bound_s,
        cut_bound_s=plan.cut_bound_s,
        flows=res.flows,
        classes=sum(s.classes for s in res.steps),
        links=net.links,
        steps=res.step_count,
        aggregated=all(s.classes < s.flows for s in res.steps if s.flows > 1),
        elapsed_s=time.perf_counter() - t0,
        step_detail=res.steps,
    )
