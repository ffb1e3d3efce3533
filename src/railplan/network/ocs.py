"""The OCS layer of the rail-only+ocs design (Rail-only, HOTI 2024 §IV-C): counts, cost, power.

How `railplan.network.faults` uses the OCS: a failed GPU is replaced by an idle GPU of the *same*
HB domain, whose NIC then has to reach the failed GPU's rail switch port; in rail-only each GPU
of a domain sits on a different rail, so the domain's NIC links pass through an optical circuit
switch that can permute them. Hence the hardware model here:

* every NIC link (GPUs × NICs per GPU) passes through an OCS: its fibers enter on the GPU side
  and leave on the rail-switch side. A duplex link of ``f`` fibers uses ``f`` of an N×N OCS's N
  ports (f inputs and f outputs); with circulators (Google's Apollo) f = 1.
* a domain's links must share one OCS so a spare can take any rail of its domain; whole domains
  are packed into each OCS (⌊N / (K·nics·f)⌋ per unit). A domain larger than one OCS is split
  into swap sets of ⌊N / (nics·f)⌋ GPUs, one OCS each, and a spare must sit in every swap set.
* an OCS passes light: no extra transceivers, and no switch ports; the link gains the OCS's
  insertion loss (see docs/network.md for the optic this assumes).

Idle spares are GPUs of the domain (as in faults.py), so the OCS hardware does not grow with
spares; the spares' cost is the GPUs they hold idle (``spare_gpus``), reported beside it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from railplan.errors import RailplanError

if TYPE_CHECKING:  # cost.py imports this module inside compare()
    from railplan.network.cost import OcsPrices
    from railplan.network.topology import Cluster, NetworkCounts


@dataclass(frozen=True)
class OcsLayer:
    """OCS units, ports and what they cost on one rail-only network."""

    model: str
    ports_per_unit: int
    fibers_per_link: int
    links: int
    ports_used: int
    units: int
    ports_installed: int
    swap_set_gpus: int
    swap_sets: int
    spare_per_swap_set: int
    spare_gpus: int
    cost_usd: float
    power_w: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def ocs_layer(c: NetworkCounts, ocs: OcsPrices, spare_per_swap_set: int | None = 1) -> OcsLayer:
    """The OCS layer between the GPUs and rail switches of rail-only network ``c``.

    ``spare_per_swap_set`` idle GPUs are kept in every swap set (an HB domain, or a slice of a
    domain too large for one OCS); they are counted, not priced (GPU prices are not modelled).
    None: one spare, or none where a swap set is a single GPU (K = 1)."""
    if spare_per_swap_set is not None and spare_per_swap_set < 0:
        raise RailplanError("spare_per_domain", f"must be ≥ 0; got {spare_per_swap_set}")
    n, f, k, nics = ocs.ports, ocs.fibers_per_link, c.hb_domain, c.nics_per_gpu
    per_gpu = nics * f
    if per_gpu > n:
        raise RailplanError(
            "ocs",
            f"{ocs.name} has {n} ports; one GPU needs {per_gpu} ({nics} NIC links × {f} fibers)",
        )
    domain_ports = k * per_gpu
    if domain_ports <= n:
        per_unit = n // domain_ports
        units = math.ceil(c.domains / per_unit)
        swap_set, swap_sets = k, c.domains
        smallest = k
    else:
        swap_set = n // per_gpu
        per_domain = math.ceil(k / swap_set)
        units = c.domains * per_domain
        swap_sets = units
        smallest = k - (per_domain - 1) * swap_set  # the domain's last set holds the rest
    if spare_per_swap_set is None:
        spare_per_swap_set = min(1, smallest - 1)
    if spare_per_swap_set >= smallest:  # at least one GPU of every set must work
        raise RailplanError(
            "spare_per_domain",
            f"must be in [0, {smallest - 1}]: the smallest swap set has {smallest} GPUs "
            f"and at least one of them must work; got {spare_per_swap_set}",
        )
    links = c.gpus * nics
    return OcsLayer(
        model=ocs.name,
        ports_per_unit=n,
        fibers_per_link=f,
        links=links,
        ports_used=links * f,
        units=units,
        ports_installed=units * n,
        swap_set_gpus=min(swap_set, k),
        swap_sets=swap_sets,
        spare_per_swap_set=spare_per_swap_set,
        spare_gpus=spare_per_swap_set * swap_sets,
        cost_usd=units * n * ocs.port_usd,
        power_w=None if ocs.unit_w is None else units * ocs.unit_w,
    )


def ocs_applies(c: NetworkCounts) -> bool:
    """Whether an OCS layer has something to do on rail-only network `c`: it swaps a spare of
    the same HB domain into a failed GPU's rail links, so not where a domain is one GPU (no
    spare beside it) or where rail-only needs no switch at all."""
    return c.hb_domain > 1 and c.switches > 0


def spares_per_domain(
    cluster: Cluster, ocs: OcsPrices | None, spare_per_swap_set: int | None
) -> int:
    """Idle spare GPUs per HB domain that the failure simulation holds: the OCS layer's (one
    per swap set, `spare_per_swap_set` each; None: one, or none where a set is a single GPU),
    so that rail-only+ocs is simulated with the spares it is priced with. A domain too large
    for one OCS has several swap sets, each with its own spares. Without an OCS model, the
    same count for a domain (one swap set), as where an OCS has nothing to do (`ocs_applies`)."""
    from railplan.network.topology import rail_only

    counts = rail_only(cluster)
    if ocs is not None and ocs_applies(counts):
        layer = ocs_layer(counts, ocs, spare_per_swap_set)
        return layer.spare_gpus * cluster.hb_domain // cluster.gpus
    if spare_per_swap_set is None:
        return min(1, cluster.hb_domain - 1)
    return spare_per_swap_set


def tradeoff(cost: dict[str, Any], monte_carlo: dict[str, Any]) -> dict[str, Any] | None:
    """What the OCS layer costs beside the idle GPU-hours it recovers over a job: `cost` is
    `cost.compare(...).to_dict()`, `monte_carlo` is `faults.monte_carlo(...).to_dict()` for the
    same cluster and spares. None when the price book has no OCS model."""
    ocs = cost.get("rail_only_ocs")
    if ocs is None:
        return None
    variants = monte_carlo["variants"]
    idle_rail_only = float(variants["rail-only"]["expected_idle_gpu_hours"])
    idle_ocs = float(variants["rail-only+ocs"]["expected_idle_gpu_hours"])
    recovered = idle_rail_only - idle_ocs
    ocs_cost = ocs["ocs_cost_usd"]  # None where the price book prices no OCS
    return {
        "ocs_cost_usd": ocs_cost,
        "ocs_power_w": ocs["ocs_power_w"],
        "cost_over_rail_only": ocs["over_rail_only"]["cost"],
        "spare_gpus": int(ocs["spare_gpus"]),
        "idle_gpu_hours_rail_only": idle_rail_only,
        "idle_gpu_hours_ocs": idle_ocs,
        "recovered_gpu_hours": recovered,
        "ocs_usd_per_recovered_gpu_hour": (
            ocs_cost / recovered if ocs_cost is not None and recovered > 0 else None
        ),
    }
