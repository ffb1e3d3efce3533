"""The ocs-reconfigured architecture: GPUs' NICs on optical circuit switches, circuits set per job.

Modelled as TPU v4 (Jouppi et al., ISCA 2023, arXiv 2304.01433: 4×4×4 cubes joined by 48 OCSes
that set a torus per job slice and route around failed cubes) and TopoOpt (Wang et al.,
NSDI 2023: each job gets its own topology on patch panels / OCSes) do, over HB domains instead
of cubes (docs/network.md, "OCS-reconfigured"):

* hardware: every NIC port (GPUs × NICs per GPU) has one single-mode transceiver whose ``f``
  fibers end on an OCS (f/2 inputs and f/2 outputs, Tx on an input, Rx on an output); no
  electrical switch, no switch-side transceiver. The NICs of one rail and NIC index (a
  *fabric*: K × nics of them) sit on the same OCS, as a rail's NICs sit on its rail switch; a
  fabric of D domains takes D·f fiber ends of a unit's 2N. Small fabrics share a unit; a fabric
  larger than one unit is cut into *pods* of at most ⌊2N / f⌋ domains, one unit per fabric and
  pod.
* per job: each fabric's OCS sets circuits among the job's domains; a NIC sends to one NIC
  and receives from one, so each fabric realises one permutation of the job's domains, and a
  rail's logical topology is the union of ``nics`` permutations: a unidirectional ring with one
  NIC (rail-matched DP/PP ring), a bidirectional ring or unidirectional 2-D torus with two, a
  bidirectional 2-D torus with four. A job must fit in one pod.
* what it cannot do: a pair of domains without a circuit talks through other domains (GPU
  forwarding, as rail-only forwards across rails), so all-to-all across domains pays the ring's
  hop count; circuits stay fixed during a job; every job start and every failure swap (a spare
  domain's NICs take the failed domain's circuits) costs the reconfiguration time.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from railplan.errors import RailplanError
from railplan.network.topology import check_cluster, check_nic
from railplan.specs.base import Range
from railplan.units import gbps_to_bytes_per_s

if TYPE_CHECKING:
    from railplan.network.cost import PriceBook

ARCH = "ocs-reconfigured"
DEFAULT_RECONFIG_S = 1.0
"""Seconds per reconfiguration: our assumption, between MEMS mirror switching (milliseconds,
Mission Apollo arXiv 2208.10041) and link retraining plus the job's re-wiring (seconds)."""
#: seconds per reconfiguration a command accepts: up to a day
RECONFIG_S = Range(0.0, 86_400.0, "s", "seconds per circuit reconfiguration")


def check_reconfig_s(value: Any) -> float:
    """A reconfiguration time in [0, 1 day] seconds, else a one-line RailplanError (a bool or a
    string is not a number of seconds)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RailplanError("reconfig_s", f"must be a number of seconds; got {value!r}")
    return RECONFIG_S.check("reconfig_s", value)


@dataclass(frozen=True)
class OcsReconfigured:
    """Counts, cost and power of the ocs-reconfigured architecture on one cluster."""

    arch: str
    model: str
    gpus: int
    hb_domain: int
    domains: int
    nic_gbps: int
    nics_per_gpu: int
    ports_per_unit: int
    fibers_per_link: int
    links: int
    transceivers: int
    fabrics: int
    pods: int
    pod_domains: int
    max_job_gpus: int
    fabrics_per_unit: int
    units: int
    ports_used: int
    ports_installed: int
    reconfig_s: float
    swaps_per_day: float
    reconfig_gpu_hours_per_day: float
    """GPU-hours a day stalled by failure swaps when jobs of ``max_job_gpus`` fill the cluster
    (a swap stalls the one job it hits for ``reconfig_s``); job starts come on top."""
    ocs_cost_usd: float
    transceiver_cost_usd: float
    cost_usd: float
    ocs_power_w: float | None
    transceiver_power_w: float | None
    power_w: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def hardware_swaps_per_day(gpus: int, hb_domain: int, nics_per_gpu: int) -> float:
    """Failures per day that take a domain out of a job of ``gpus`` (GPU, server and NIC causes
    at the Llama 3 rates of `railplan faults`), each a swap that reconfigures the circuits."""
    from railplan.network.faults import LLAMA3_GPUS_PER_SERVER, FailureRates

    r = FailureRates.llama3()
    servers = gpus / LLAMA3_GPUS_PER_SERVER
    per_h = r.gpu_per_h * gpus + r.server_per_h * servers + r.nic_link_per_h * gpus * nics_per_gpu
    return 24.0 * per_h


def _units(domains: int, fabrics: int, ends_per_nic: int, ports: int) -> tuple[int, int, int]:
    """(pods, fabrics per unit, units): fabrics of ``domains`` NICs on OCSes of 2·ports ends."""
    cap = (2 * ports) // ends_per_nic  # domains one unit takes for one fabric
    if domains <= cap:
        per_unit = cap // domains
        return 1, per_unit, math.ceil(fabrics / per_unit)
    pods = math.ceil(domains / cap)
    return pods, 1, fabrics * pods


def ocs_reconfigured(
    gpus: int,
    hb_domain: int,
    book: PriceBook,
    nic_gbps: int = 400,
    nics_per_gpu: int = 1,
    reconfig_s: float = DEFAULT_RECONFIG_S,
) -> OcsReconfigured:
    """The ocs-reconfigured design of ``gpus`` GPUs in HB domains of ``hb_domain`` (module doc),
    priced with ``book``'s OCS entry and transceiver at ``nic_gbps``."""
    from railplan.limits import check_int
    from railplan.network.topology import MAX_NICS_PER_GPU

    check_cluster(gpus, hb_domain)
    check_nic(nic_gbps)
    check_int("nics_per_gpu", nics_per_gpu, 1, MAX_NICS_PER_GPU)
    reconfig_s = check_reconfig_s(reconfig_s)
    ocs = book.ocs
    if ocs is None:
        raise RailplanError("price_book", f"{book.name!r} has no ocs entry; {ARCH} needs one")
    if ocs.fibers_per_link > 2 * ocs.ports:
        raise RailplanError("ocs", f"{ocs.name}: one NIC's {ocs.fibers_per_link} fibers exceed it")
    p = book.at(nic_gbps)
    domains, fabrics, links = gpus // hb_domain, hb_domain * nics_per_gpu, gpus * nics_per_gpu
    pods, per_unit, units = _units(domains, fabrics, ocs.fibers_per_link, ocs.ports)
    pod_domains = math.ceil(domains / pods)
    swaps = hardware_swaps_per_day(gpus, hb_domain, nics_per_gpu)
    ocs_usd, tr_usd = units * ocs.ports * ocs.port_usd, links * p.transceiver_usd
    ocs_w = None if ocs.unit_w is None else units * ocs.unit_w
    tr_w = None if p.transceiver_w is None else links * p.transceiver_w
    return OcsReconfigured(
        arch=ARCH,
        model=ocs.name,
        gpus=gpus,
        hb_domain=hb_domain,
        domains=domains,
        nic_gbps=nic_gbps,
        nics_per_gpu=nics_per_gpu,
        ports_per_unit=ocs.ports,
        fibers_per_link=ocs.fibers_per_link,
        links=links,
        transceivers=links,
        fabrics=fabrics,
        pods=pods,
        pod_domains=pod_domains,
        max_job_gpus=pod_domains * hb_domain,
        fabrics_per_unit=per_unit,
        units=units,
        ports_used=math.ceil(links * ocs.fibers_per_link / 2),
        ports_installed=units * ocs.ports,
        reconfig_s=reconfig_s,
        swaps_per_day=swaps,
        reconfig_gpu_hours_per_day=swaps * reconfig_s * pod_domains * hb_domain / 3600.0,
        ocs_cost_usd=ocs_usd,
        transceiver_cost_usd=tr_usd,
        cost_usd=ocs_usd + tr_usd,
        ocs_power_w=ocs_w,
        transceiver_power_w=tr_w,
        power_w=None if ocs_w is None or tr_w is None else ocs_w + tr_w,
    )


def ring_all_to_all_s(domains: int, pair_bytes: float, bw: float) -> float:
    """All-to-all among ``domains`` NICs on a unidirectional ring of circuits, ``pair_bytes`` to
    each peer, forwarded hop by hop: each link carries pair_bytes·y(y−1)/2 (y = domains)."""
    return pair_bytes * domains * (domains - 1) / 2.0 / bw


def rail_collectives(c: OcsReconfigured, size_bytes: float = 1e9) -> dict[str, Any]:
    """Bandwidth terms (latency left out) of the rail phase of a job filling one pod: a DP ring
    all-reduce of ``size_bytes`` over its ``pod_domains`` domains and an all-to-all of
    ``size_bytes`` per GPU, on the circuits (``nics`` parallel unidirectional rings) and on
    rail-only's electrical rail (railplan.perf.collectives, one switch hop per step)."""
    from railplan.perf.collectives import all_to_all_rail_only_s, ring_all_reduce_s

    y = c.pod_domains
    bw = gbps_to_bytes_per_s(c.nics_per_gpu * c.nic_gbps)
    pair = size_bytes / y
    ar = float(ring_all_reduce_s(y, size_bytes, bw, 0.0))
    a2a_rail = float(all_to_all_rail_only_s(1, y, pair, 1.0, bw, 0.0, 0.0))
    a2a_ocs = ring_all_to_all_s(y, pair, bw)
    return {
        "domains": y,
        "size_bytes": size_bytes,
        "nic_bytes_per_s": bw,
        "all_reduce_s": {"ocs_reconfigured": ar, "rail_only": ar},
        "all_to_all_s": {"ocs_reconfigured": a2a_ocs, "rail_only": a2a_rail},
        "all_to_all_slowdown": a2a_ocs / a2a_rail if a2a_rail else 1.0,
    }
