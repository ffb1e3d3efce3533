"""The ocs-reconfigured architecture in `railplan topology` and `railplan cost --ocs-reconfigured`
(railplan.network.ocs_reconfig; docs/network.md "OCS-reconfigured")."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console

from railplan.cli.output import kw, musd, pct, print_json, table
from railplan.errors import RailplanError

if TYPE_CHECKING:
    from railplan.network.cost import PriceBook
    from railplan.network.topology import Cluster


def check_arch(arch: str, **only_others: Any) -> None:
    """``arch`` is a known architecture; options of the electrical ones are refused with
    ocs-reconfigured, and its own (``reconfig_s``, ``price_book``) with the others."""
    from railplan.network.ocs_reconfig import ARCH
    from railplan.network.topology import ARCHITECTURES

    if arch not in (*ARCHITECTURES, ARCH):
        allowed = ", ".join((*ARCHITECTURES, ARCH))
        raise RailplanError("arch", f"{arch!r} is not allowed; choose one of {allowed}")
    for name, value in only_others.items():
        if value is None:
            continue
        if arch == ARCH and name not in ("reconfig_s", "price_book"):
            raise RailplanError(name, f"does not apply to arch {ARCH!r} (no electrical switches)")
        if arch != ARCH and name in ("reconfig_s", "price_book"):
            raise RailplanError(name, f"applies only to arch {ARCH!r}, not {arch!r}")


def design(
    gpus: int,
    hb_domain: int,
    book: PriceBook,
    nic_gbps: int,
    nics_per_gpu: int,
    reconfig_s: float | None,
    base: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ocs-reconfigured design as `railplan cost` columns (rows keyed as the other designs),
    its counts, and its savings against the rail-optimized ``base`` (a cost JSON design)."""
    from railplan.network.cost import saving
    from railplan.network.ocs_reconfig import (
        DEFAULT_RECONFIG_S,
        ocs_reconfigured,
        rail_collectives,
    )

    s = DEFAULT_RECONFIG_S if reconfig_s is None else reconfig_s
    c = ocs_reconfigured(gpus, hb_domain, book, nic_gbps, nics_per_gpu, s)
    out = {
        "tiers": 0,
        "switches": 0,
        "switch_ports": 0,
        "links": c.links,
        "transceivers": c.transceivers,
        "ocs_units": c.units,
        "ocs_ports": c.ports_installed,
        "ocs_cost_usd": c.ocs_cost_usd,
        "ocs_power_w": c.ocs_power_w,
        "cost_usd": c.cost_usd,
        "power_w": c.power_w,
        "counts": c.to_dict(),
        "rail_collectives": rail_collectives(c),
    }
    if base is not None:
        out["savings"] = {
            "cost": saving(base["cost_usd"], c.cost_usd),
            "power": saving(base["power_w"], c.power_w),
        }
    return out


def rail_only_ocs_note(o: dict[str, Any]) -> str:
    """The line under `railplan cost` that says what the OCS layer is and what it adds."""
    oc = o["ocs"]
    return (
        f"rail-only+ocs: {oc['units']:,} × {oc['model']} ({oc['ports_per_unit']} ports, "
        f"{oc['fibers_per_link']} per NIC link; {oc['ports_used']:,} of "
        f"{oc['ports_installed']:,} ports used), {oc['swap_set_gpus']} GPUs per swap set; "
        f"OCS adds {pct(o['over_rail_only']['cost'])} cost, "
        f"{pct(o['over_rail_only']['power'])} power to rail-only; "
        f"{oc['spare_gpus']:,} spare GPUs held idle ({oc['spare_per_swap_set']} per swap "
        "set). OCS price is an assumption (see the price book); GPUs it recovers: "
        "railplan faults."
    )


def note(r: dict[str, Any]) -> str:
    """One line under the table: what the design is and what it cannot do."""
    c, coll = r["counts"], r["rail_collectives"]
    return (
        f"ocs-reconfigured: {c['units']:,} × {c['model']} ({c['fabrics']} rail×NIC fabrics, "
        f"≤ {c['fabrics_per_unit']} per unit, in {c['pods']} pod(s) of ≤ {c['pod_domains']} "
        "domains), circuits set per job: a job fits one pod "
        f"(≤ {c['max_job_gpus']:,} GPUs), a DP ring all-reduce over a rail is as fast as "
        f"rail-only's, an all-to-all across its {coll['domains']} domains "
        f"{coll['all_to_all_slowdown']:g}× slower (hop-by-hop forwarding); "
        f"reconfiguration {c['reconfig_s']:g} s per job start and per failure swap "
        f"(≈{c['swaps_per_day']:.3g} swaps/day at Llama 3 rates, "
        f"{c['reconfig_gpu_hours_per_day']:.3g} GPU-h/day). OCS price is an assumption."
    )


def topology_ocs(
    gpus: int,
    hb_domain: int,
    nic_gbps: int,
    nics_per_gpu: int,
    price_book: str | None,
    reconfig_s: float | None,
    export: str | None,
    as_json: bool,
) -> None:
    """`railplan topology --arch ocs-reconfigured`: OCS counts; no graph (circuits are per job)."""
    from railplan.network.cost import load_price_book
    from railplan.network.ocs_reconfig import ARCH, check_reconfig_s

    if reconfig_s is not None:
        check_reconfig_s(reconfig_s)
    if export:
        raise RailplanError(
            "export",
            f"{ARCH} has no fixed graph (its circuits are set per job); --json gives its counts",
        )
    book = load_price_book(price_book)
    r = design(gpus, hb_domain, book, nic_gbps, nics_per_gpu, reconfig_s)
    c = r["counts"]
    if as_json:
        print_json({"counts": c, "rail_collectives": r["rail_collectives"]})
        return
    keys = ("units", "ports_installed", "ports_used", "links", "transceivers", "fabrics", "pods")
    rows = [(k, f"{c[k]:,}") for k in (*keys, "pod_domains", "max_job_gpus")]
    rows.append(("switches", "0"))
    title = f"{ARCH}: N={gpus:,} K={hb_domain}"
    Console(width=120).print(table(title, ("", "count"), rows, left=("",)))
    typer.echo(note(r))


def ocs_tradeoff(
    cluster: Cluster, spare_per_domain: int, book: PriceBook, data: dict[str, Any]
) -> dict[str, Any] | None:
    """The OCS layer's cost (railplan cost's rail-only+ocs) beside the GPU-hours it recovers."""
    from railplan.network.cost import compare
    from railplan.network.ocs import tradeoff

    cost = compare(cluster, book, spare_per_domain).to_dict()
    out = tradeoff(cost, data["monte_carlo"])
    return None if out is None else {"price_book": book.name, **out}


def ocs_tradeoff_note(t: dict[str, Any], days: float) -> str:
    """One paragraph: the OCS layer's price and power beside the idle GPU-hours it saves."""

    head = (
        f"rail-only+ocs ({t['price_book']}): the OCS layer costs {musd(t['ocs_cost_usd'])} "
        f"({pct(t['cost_over_rail_only'])} over rail-only's network; an assumption, see the "
        f"price book), power {kw(t['ocs_power_w'])}; "
    )
    if t["spare_gpus"] == 0:
        return head + "with no spare GPUs (--spare-per-domain) it recovers no idle GPU-hours."
    if t["recovered_gpu_hours"] <= 0:
        return head + f"its {t['spare_gpus']:,} spare GPUs recover no idle GPU-hours here."
    per_hour = t["ocs_usd_per_recovered_gpu_hour"]
    value = "" if per_hour is None else f": ${per_hour:,.0f} of OCS per GPU-hour recovered"
    return head + (
        f"with {t['spare_gpus']:,} spare GPUs idle it cuts the job's idle GPU-hours over "
        f"{days:g} days from {t['idle_gpu_hours_rail_only']:,.0f} to "
        f"{t['idle_gpu_hours_ocs']:,.0f}{value}."
    )
