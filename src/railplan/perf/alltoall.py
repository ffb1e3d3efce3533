"""All-to-all on a rail-optimized vs a rail-only network for one system (SYSTEM.md claim 3).

Every GPU of an all-to-all over `gpus` GPUs (x = K per HB domain, y = gpus/K domains) sends
`pair_bytes` to every other GPU. Rail-optimized sends directly (NVLink inside the domain, the
NIC across domains); rail-only forwards through the HB domain in two steps (rail phase with
shards of x·D, then the HB phase), as NCCL's PXN does.

The slowdown y·(x−1)·D/C_F ÷ x·(y−1)·D/C_S equals C_S/C_F exactly when y = x (e.g. 64 GPUs of
DGX A100/H100: 8.33 % and 11.1 %), and tends to (x−1)/x·C_S/C_F for large y.
"""

from __future__ import annotations

from dataclasses import dataclass

from railplan.errors import RailplanError
from railplan.perf import collectives as coll
from railplan.records import Record
from railplan.specs import System
from railplan.specs.base import BYTES


@dataclass(frozen=True)
class AllToAll(Record):
    system: str
    gpus: int
    hb_domain: int
    domains: int
    pair_bytes: float
    bandwidth: str  # "line-rate" or "achievable"
    hb_bytes_per_s: float
    nic_bytes_per_s: float
    rail_optimized_s: float
    rail_only_s: float
    rail_only_hb_first_s: float
    direct_pairwise_latency_s: float
    two_step_latency_s: float
    slowdown: float
    asymptotic_slowdown: float
    cs_over_cf: float


def compare(
    system: System,
    gpus: int | None = None,
    pair_bytes: float = 16 * 2**20,
    achievable: bool = False,
    with_latency: bool = False,
) -> AllToAll:
    """Time the all-to-all both ways. Default GPUs: K² (K domains of K GPUs)."""
    k = system.hb_domain
    n = gpus if gpus is not None else k * k
    if n <= 0 or n % k:
        raise RailplanError("gpus", f"must be a positive multiple of the HB-domain size {k}")
    if n < 2:
        raise RailplanError(
            "gpus", f"an all-to-all needs at least 2 GPUs; got {n} (K={k}: give --gpus ≥ 2)"
        )
    pair_bytes = BYTES.check("bytes_per_pair", pair_bytes)
    if achievable:
        cf, cs = system.hb_bytes_per_s, system.nic_bytes_per_s
    else:
        cf, cs = system.hb_line_bytes_per_s, system.nic_line_bytes_per_s
    hb_lat = system.hb_latency_us * 1e-6 if with_latency else 0.0
    nic_lat = system.nic_latency_us * 1e-6 if with_latency else 0.0
    x, y = float(k), float(n // k)
    ro = float(coll.all_to_all_rail_optimized_s(x, y, pair_bytes, cf, cs, hb_lat, nic_lat))
    rl = float(coll.all_to_all_rail_only_s(x, y, pair_bytes, cf, cs, hb_lat, nic_lat))
    # Reverse order: aggregate inside the HB domain first (each GPU collects what its rail
    # sends to every domain: y·D per local peer), then the rail phase: same bytes per link.
    hb_first = y * (x - 1) * pair_bytes / cf + x * (y - 1) * pair_bytes / cs
    hb_first += (hb_lat if x > 1 else 0.0) + (nic_lat if y > 1 else 0.0)
    # Message rounds: a pairwise direct exchange needs x·y − 1 rounds, x − 1 of them to the
    # GPUs of its own HB domain and x·(y − 1) over the NIC; the two-step schedules (x − 1) HB
    # rounds + (y − 1) rail rounds of aggregated messages.
    lat_f, lat_s = system.hb_latency_us * 1e-6, system.nic_latency_us * 1e-6
    return AllToAll(
        system=system.name,
        gpus=n,
        hb_domain=k,
        domains=n // k,
        pair_bytes=pair_bytes,
        bandwidth="achievable" if achievable else "line-rate",
        hb_bytes_per_s=cf,
        nic_bytes_per_s=cs,
        rail_optimized_s=ro,
        rail_only_s=rl,
        rail_only_hb_first_s=hb_first,
        direct_pairwise_latency_s=(x - 1) * lat_f + x * (y - 1) * lat_s,
        two_step_latency_s=(x - 1) * lat_f + (y - 1) * lat_s,
        slowdown=rl / ro - 1.0,
        asymptotic_slowdown=(x - 1) / x * cs / cf,
        cs_over_cf=cs / cf,
    )
