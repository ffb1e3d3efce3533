"""Switch, link, port and transceiver counts of GPU-cluster networks (pure functions, any size).

Architectures (Wang, Ghobadi et al., "Rail-only", HOTI 2024 / arXiv 2307.12169, §II-B, §IV-A, §V-E):

* ``rail-optimized`` – the paper's baseline ("SOTA"): one minimal-tier full-bisection folded Clos
  over all N·nics NIC ports. Leaves are filled rail by rail, so a leaf holds GPUs of one rail
  whenever the rail size is a multiple of radix/2.
* ``rail-only`` – the proposal: K separate minimal-tier full-bisection Clos networks, one per rail
  (N/K GPUs each); rails with at most radix NIC ports share a single switch, ``radix // rail``
  rails per switch ("small rails may share a switch").
* ``oversubscribed`` – rail-optimized with ``oversubscription``:1 (down:up ports) at one tier.
* ``multi-plane`` – ``planes`` parallel rail-optimized Clos planes, each GPU has one NIC port in
  every plane (so ``nics_per_gpu`` is the number of planes).
* ``ideal`` – every GPU in one HB domain (K = N): no NIC network, zero switches.

Counting rule of one folded Clos (derived from, and checked against, every cell of the paper's
Table II; see docs/network.md): with radix R and H endpoints (NIC ports),

* tiers t = the smallest t with capacity(t) ≥ H, capacity(1) = R and
  capacity(t) = R · d_1 · … · d_{t-1}, where d_i = R/2 down ports per switch of a non-top tier
  (full bisection: 2·(R/2)^t, i.e. R, R²/2, R³/4, …);
* links entering tier 1 = H; links entering tier i+1 = ceil(links entering i · u_i / d_i)
  (= H for full bisection, u_i = R - d_i up ports);
* switches of a non-top tier i = ceil(links entering i / d_i); top tier = ceil(links entering / R);
* links = Σ links entering each tier (t·H for full bisection, GPU-to-leaf included);
* transceivers = 2 × links (one at each end of every link, GPU-to-leaf included);
* switch ports = R × switches (every port of every switch is bought, used or not).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from railplan.errors import RailplanError, near_multiples
from railplan.limits import MAX_GPUS, as_int, check_int

Architecture = Literal["rail-optimized", "rail-only", "oversubscribed", "multi-plane", "ideal"]
ARCHITECTURES: tuple[str, ...] = (
    "rail-optimized",
    "rail-only",
    "oversubscribed",
    "multi-plane",
    "ideal",
)
NIC_SPEEDS_GBPS: tuple[int, ...] = (100, 200, 400, 800, 1600)  # 1600: ConnectX-9 generation
TIER_NAMES: tuple[str, ...] = ("leaf", "spine", "core")
#: NIC ports per GPU (= planes of a multi-plane fabric), as railplan.specs.System allows
MAX_NICS_PER_GPU = 16


def tier_name(index: int) -> str:
    """Role of tier ``index`` (1-based): leaf, spine, core, then tier4, tier5, …"""
    return TIER_NAMES[index - 1] if index <= len(TIER_NAMES) else f"tier{index}"


@dataclass(frozen=True)
class Tier:
    """One switch tier of a folded Clos.

    ``down_ports``/``up_ports`` are the per-switch port budget (up_ports = 0 at the top tier);
    ``links_in`` is the number of links entering the tier from below (NIC links for the leaves).
    """

    index: int
    name: str
    switches: int
    down_ports: int
    up_ports: int
    links_in: int


@dataclass(frozen=True)
class Clos:
    """A minimal-tier folded Clos over ``endpoints`` NIC ports with switches of ``radix`` ports."""

    endpoints: int
    radix: int
    tiers: tuple[Tier, ...]

    @property
    def num_tiers(self) -> int:
        return len(self.tiers)

    @property
    def switches(self) -> int:
        return sum(t.switches for t in self.tiers)

    @property
    def links(self) -> int:
        return sum(t.links_in for t in self.tiers)

    @property
    def switch_ports_used(self) -> int:
        ins = sum(t.links_in for t in self.tiers)
        ups = sum(t.links_in for t in self.tiers[1:])
        return ins + ups


@dataclass(frozen=True)
class FabricGroup:
    """``count`` identical Clos fabrics (e.g. one per rail) and the rails each one carries."""

    count: int
    clos: Clos
    rails_per_fabric: int


@dataclass(frozen=True)
class Cluster:
    """The GPUs a network connects: ``gpus`` GPUs in HB domains of ``hb_domain``, each with
    ``nics_per_gpu`` NIC ports of ``nic_gbps``, on switches of ``radix`` ports. Checked where a
    network is built (``check_cluster``, ``check_radix``, ``check_nic``)."""

    gpus: int
    hb_domain: int
    radix: int
    nic_gbps: int = 400
    nics_per_gpu: int = 1

    def __post_init__(self) -> None:
        for name in ("gpus", "hb_domain", "radix", "nic_gbps", "nics_per_gpu"):
            n = as_int(getattr(self, name))  # numpy's integers too: counts stay Python ints
            if n is not None:
                object.__setattr__(self, name, n)


@dataclass(frozen=True)
class NetworkCounts:
    """Counts of one architecture for one cluster. Bandwidth in Gbps per direction."""

    arch: str
    gpus: int
    hb_domain: int
    radix: int
    nic_gbps: int
    nics_per_gpu: int
    oversubscription: float
    oversubscribed_tier: int
    groups: tuple[FabricGroup, ...] = field(repr=False)
    tiers: int
    switches_per_tier: tuple[int, ...]
    switches: int
    links: int
    switch_ports: int
    switch_ports_used: int
    transceivers: int
    nic_ports: int
    fabrics: int

    @property
    def domains(self) -> int:
        return self.gpus // self.hb_domain

    def tier_detail(self) -> list[dict[str, Any]]:
        """Per-tier totals: name, switches, links entering the tier."""
        out: list[dict[str, Any]] = []
        for i in range(self.tiers):
            sw = sum(
                g.count * g.clos.tiers[i].switches for g in self.groups if g.clos.num_tiers > i
            )
            li = sum(
                g.count * g.clos.tiers[i].links_in for g in self.groups if g.clos.num_tiers > i
            )
            out.append({"tier": i + 1, "name": tier_name(i + 1), "switches": sw, "links_in": li})
        return out

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data (the fabric template is summarized, not repeated)."""
        d = asdict(self)
        d.pop("groups")
        d["switches_per_tier"] = list(self.switches_per_tier)
        d["tier_detail"] = self.tier_detail()
        d["fabric_groups"] = [
            {
                "count": g.count,
                "rails_per_fabric": g.rails_per_fabric,
                "endpoints": g.clos.endpoints,
                "tiers": g.clos.num_tiers,
                "switches": g.clos.switches,
            }
            for g in self.groups
        ]
        return d


# ---------------------------------------------------------------------------------------------
# validation


#: the largest switch radix taken (today's largest switch ASICs have 512 ports at 200 Gb/s)
MAX_RADIX = 4096


def check_radix(radix: int) -> int:
    """Switch radix: an even integer in [4, MAX_RADIX] (a folded Clos splits ports half down,
    half up)."""
    n = as_int(radix)
    if n is None or n < 4 or n > MAX_RADIX or n % 2:
        raise RailplanError(
            "radix",
            f"must be an even integer from 4 to {MAX_RADIX:,} (e.g. 32, 64, 128, 256); "
            f"got {radix!r}",
        )
    return n


def check_oversubscribable(
    gpus: int, nics_per_gpu: float, oversubscription: float, radix: int, radix_option: bool = True
) -> None:
    """An oversubscribed network needs uplinks: the job's NIC ports must not fit one switch of
    `radix` ports (a 1-tier Clos has no uplinks), unless the ratio is 1. The timing model takes
    any ratio; the fabric builders (`folded_clos`) the ones that split the radix into whole
    ports. `radix_option`: the caller takes `--radix` (the error suggests a smaller one)."""
    radix = check_radix(radix)
    ports = max(1, round(gpus * nics_per_gpu))
    if ports <= radix and oversubscription != 1.0:
        raise RailplanError(
            "oversubscription",
            f"a 1-tier Clos ({ports} ports ≤ radix {radix}) has no uplinks to "
            "oversubscribe: 1, or more GPUs than one switch holds"
            + (" (or a smaller --radix)" if radix_option else ""),
        )


DEFAULT_RADIX = 64
"""The switch radix the fabric is taken with where none is given (`--radix`)."""


def check_cluster(gpus: int, hb_domain: int) -> None:
    """N ≥ 1, 1 ≤ K ≤ N and K divides N."""
    check_int("gpus", gpus)
    check_int("hb_domain", hb_domain, 1, gpus)
    if gpus % hb_domain:
        common = [k for k in (8, 16, 32, 64, 72, 128, 256) if gpus % k == 0 and k <= gpus]
        # else the divisors of gpus nearest K either side (1 and gpus divide it, but say
        # nothing): by trial division up to √gpus
        small = [k for k in range(2, math.isqrt(gpus) + 1) if gpus % k == 0]
        divisors = sorted({*small, *(gpus // k for k in small)} - {gpus})
        near = [max((k for k in divisors if k < hb_domain), default=0)]
        near.append(min((k for k in divisors if k > hb_domain), default=0))
        hint = ", ".join(map(str, common or [k for k in near if k]))
        raise RailplanError(
            "hb_domain",
            f"{hb_domain} does not divide gpus={gpus}; "
            + (f"use a divisor, e.g. {hint}, or " if hint else "use ")
            + f"{near_multiples(gpus, hb_domain)} GPUs",
        )


def check_nic(nic_gbps: int) -> int:
    if nic_gbps not in NIC_SPEEDS_GBPS:
        allowed = ", ".join(map(str, NIC_SPEEDS_GBPS))
        raise RailplanError("nic_gbps", f"{nic_gbps!r} is not allowed; choose one of {allowed}")
    return nic_gbps


def allowed_oversubscriptions(radix: int) -> list[int]:
    """Integer ratios o with an integral down:up split of ``radix`` ports (radix % (o+1) == 0)."""
    return [o for o in range(1, radix) if radix % (o + 1) == 0]


# ---------------------------------------------------------------------------------------------
# one Clos


def _split(radix: int, ratio: float) -> tuple[int, int]:
    """(down, up) ports per switch for a down:up ``ratio``."""
    if ratio == 1:
        return radix // 2, radix // 2
    up = radix / (ratio + 1) if math.isfinite(ratio) and ratio > 1 else 0.0
    if up != int(up) or up < 1:
        allowed = ", ".join(map(str, allowed_oversubscriptions(radix)))
        raise RailplanError(
            "oversubscription",
            f"{ratio!r} gives no integral down:up split of radix {radix}; allowed: {allowed}",
        )
    return radix - int(up), int(up)


def folded_clos(
    endpoints: int, radix: int, oversubscription: float = 1.0, oversubscribed_tier: int = 1
) -> Clos:
    """Minimal-tier folded Clos over ``endpoints`` NIC ports (see the module doc for the rule).

    ``oversubscription`` is the down:up port ratio of the switches of tier
    ``oversubscribed_tier`` (1 = leaves); every other non-top tier is full bisection.
    """
    check_int("endpoints", endpoints, 1, 64 * MAX_GPUS)
    check_radix(radix)
    over_split = _split(radix, oversubscription)

    def split(i: int) -> tuple[int, int]:
        return over_split if i == oversubscribed_tier else (radix // 2, radix // 2)

    tiers_needed = 1
    capacity = radix
    while capacity < endpoints:
        capacity *= split(tiers_needed)[0]
        tiers_needed += 1
    if oversubscription != 1 and tiers_needed == 1:
        raise RailplanError(
            "oversubscription",
            f"a 1-tier Clos ({endpoints} ports ≤ radix {radix}) has no uplinks to "
            "oversubscribe: 1, or more GPUs than one switch holds",
        )
    if oversubscription != 1 and oversubscribed_tier >= tiers_needed:
        raise RailplanError(
            "oversubscribed_tier",
            f"{oversubscribed_tier} has no uplinks in a {tiers_needed}-tier Clos of "
            f"{endpoints} ports at radix {radix}; allowed 1..{tiers_needed - 1}",
        )
    tiers: list[Tier] = []
    links_in = endpoints
    for i in range(1, tiers_needed + 1):
        if i < tiers_needed:
            down, up = split(i)
            sw = math.ceil(links_in / down)
            tiers.append(Tier(i, tier_name(i), sw, down, up, links_in))
            links_in = math.ceil(links_in * up / down)
        else:
            sw = math.ceil(links_in / radix)
            tiers.append(Tier(i, tier_name(i), sw, radix, 0, links_in))
    return Clos(endpoints, radix, tuple(tiers))


# ---------------------------------------------------------------------------------------------
# architectures


def _assemble(
    arch: str,
    c: Cluster,
    groups: tuple[FabricGroup, ...],
    oversubscription: float = 1.0,
    oversubscribed_tier: int = 0,
) -> NetworkCounts:
    tiers = max((g.clos.num_tiers for g in groups), default=0)
    per_tier = tuple(
        sum(g.count * g.clos.tiers[i].switches for g in groups if g.clos.num_tiers > i)
        for i in range(tiers)
    )
    switches = sum(per_tier)
    links = sum(g.count * g.clos.links for g in groups)
    return NetworkCounts(
        arch=arch,
        **asdict(c),
        oversubscription=oversubscription,
        oversubscribed_tier=oversubscribed_tier,
        groups=groups,
        tiers=tiers,
        switches_per_tier=per_tier,
        switches=switches,
        links=links,
        switch_ports=c.radix * switches,
        switch_ports_used=sum(g.count * g.clos.switch_ports_used for g in groups),
        transceivers=2 * links,
        nic_ports=sum(g.count * g.clos.endpoints for g in groups),
        fabrics=sum(g.count for g in groups),
    )


def _common(c: Cluster) -> None:
    check_cluster(c.gpus, c.hb_domain)
    check_radix(c.radix)
    check_nic(c.nic_gbps)
    check_int("nics_per_gpu", c.nics_per_gpu, 1, MAX_NICS_PER_GPU)


def rail_optimized(c: Cluster) -> NetworkCounts:
    """Baseline: one minimal-tier full-bisection Clos over all N·nics NIC ports (paper §V-E)."""
    _common(c)
    group = FabricGroup(1, folded_clos(c.gpus * c.nics_per_gpu, c.radix), c.hb_domain)
    return _assemble("rail-optimized", c, (group,))


def oversubscribed(
    c: Cluster, oversubscription: float = 3.0, oversubscribed_tier: int = 1
) -> NetworkCounts:
    """Rail-optimized Clos with ``oversubscription``:1 down:up ports at ``oversubscribed_tier``."""
    _common(c)
    check_int("oversubscribed_tier", oversubscribed_tier, 1, 16)
    clos = folded_clos(c.gpus * c.nics_per_gpu, c.radix, oversubscription, oversubscribed_tier)
    group = FabricGroup(1, clos, c.hb_domain)
    return _assemble("oversubscribed", c, (group,), oversubscription, oversubscribed_tier)


def rail_only(c: Cluster) -> NetworkCounts:
    """K separate minimal-tier full-bisection Clos networks, one per rail (paper §IV-A, §V-E).

    A rail has N/K·nics NIC ports. If that is at most the radix, ``radix // rail`` rails share
    one switch (the last switch may carry fewer). A rail of a single NIC port (N = K, one NIC)
    needs no network at all.
    """
    _common(c)
    rail_ports = (c.gpus // c.hb_domain) * c.nics_per_gpu
    groups: tuple[FabricGroup, ...]
    if rail_ports == 1:
        groups = ()
    elif rail_ports <= c.radix:
        per_switch = c.radix // rail_ports
        full, rest = divmod(c.hb_domain, per_switch)
        groups = (FabricGroup(full, folded_clos(per_switch * rail_ports, c.radix), per_switch),)
        if rest:
            groups += (FabricGroup(1, folded_clos(rest * rail_ports, c.radix), rest),)
        groups = tuple(g for g in groups if g.count)
    else:
        groups = (FabricGroup(c.hb_domain, folded_clos(rail_ports, c.radix), 1),)
    return _assemble("rail-only", c, groups)


def multi_plane(
    gpus: int, hb_domain: int, radix: int, planes: int = 2, nic_gbps: int = 400
) -> NetworkCounts:
    """``planes`` parallel rail-optimized full-bisection Clos planes, one NIC port per GPU each."""
    _common(Cluster(gpus, hb_domain, radix, nic_gbps))
    check_int("planes", planes, 1, MAX_NICS_PER_GPU)
    group = FabricGroup(planes, folded_clos(gpus, radix), hb_domain)
    return _assemble("multi-plane", Cluster(gpus, hb_domain, radix, nic_gbps, planes), (group,))


def ideal(gpus: int, radix: int = 64, nic_gbps: int = 400, nics_per_gpu: int = 1) -> NetworkCounts:
    """One HB domain of all N GPUs: no NIC network, zero switches, links and transceivers."""
    c = Cluster(gpus, gpus, radix, nic_gbps, nics_per_gpu)
    _common(c)
    return _assemble("ideal", c, ())


def build_counts(
    arch: str,
    c: Cluster,
    oversubscription: float | None = None,
    oversubscribed_tier: int | None = None,
    planes: int | None = None,
) -> NetworkCounts:
    """Dispatch on the architecture name (one of ``ARCHITECTURES``).

    ``oversubscription`` (default 3) and ``oversubscribed_tier`` (default 1) are for
    ``oversubscribed`` only; ``planes`` is for ``multi-plane`` only (default 2): there every GPU
    has one NIC port per plane, so ``nics_per_gpu`` must be 1 (the default) or equal ``planes``.
    An option the architecture would ignore is an error.
    """
    if arch not in ARCHITECTURES:
        allowed = ", ".join(ARCHITECTURES)
        raise RailplanError("arch", f"{arch!r} is not allowed; choose one of {allowed}")
    for name, value, owner in (
        ("oversubscription", oversubscription, "oversubscribed"),
        ("oversubscribed_tier", oversubscribed_tier, "oversubscribed"),
        ("planes", planes, "multi-plane"),
    ):
        if value is not None and arch != owner:
            raise RailplanError(name, f"applies only to arch {owner!r}, not {arch!r}")
    if arch == "oversubscribed":
        over = 3.0 if oversubscription is None else oversubscription
        tier = 1 if oversubscribed_tier is None else oversubscribed_tier
        return oversubscribed(c, over, tier)
    if arch == "multi-plane":
        planes = 2 if planes is None else planes
        if c.nics_per_gpu not in (1, planes):
            raise RailplanError(
                "nics_per_gpu",
                f"multi-plane has one NIC port per GPU in each plane; set the ports with "
                f"planes (got nics_per_gpu={c.nics_per_gpu}, planes={planes})",
            )
        return multi_plane(c.gpus, c.hb_domain, c.radix, planes, c.nic_gbps)
    if arch == "rail-optimized":
        return rail_optimized(c)
    if arch == "rail-only":
        return rail_only(c)
    return ideal(c.gpus, c.radix, c.nic_gbps, c.nics_per_gpu)
