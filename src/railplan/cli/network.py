"""CLI commands of the network part: cost, topology, faults, tile, cost-plot, reproduce table2."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from railplan.cli.options import (
    ClusterGpusOpt,
    HbDomainSizeOpt,
    JsonOpt,
    NicPortsOpt,
    NicSpeedOpt,
    PriceBookOpt,
    RadixOpt,
)
from railplan.cli.output import count, kw, musd, mw, pct, print_json, table

if TYPE_CHECKING:
    from railplan.network.faults import MonteCarloResult
    from railplan.network.topology import NetworkCounts
    from railplan.reproduce.table2 import PaperRow, Table2Row


def _int_list(field: str, text: str, unique: bool = True, example: str = "64,128") -> list[int]:
    """A comma list of integers (each once unless not `unique`), or a one-line error."""
    from railplan.explore.sweep_spec import comma_list

    empty = f"give at least one integer, e.g. {example}"
    return comma_list(field, text, int, empty=empty, unique=unique)


def _same_tiers_note(
    gpus: int,
    hb_domain: int,
    radix: int,
    nics_per_gpu: int,
    tiers: int,
    more: tuple[int, int] | None = None,
) -> str:
    """Why rail-only saves nothing when a rail needs as many Clos tiers as the whole cluster;
    `more`: (rail-only, rail-optimized) switches where rail-only needs more."""
    from railplan.network.topology import folded_clos

    lo = radix  # a 1-tier Clos takes `radix` ports
    while folded_clos(lo * 2, radix).num_tiers < tiers:
        lo *= 2
    hi = 2 * lo - 1
    while lo < hi:  # the most NIC ports a Clos of one tier fewer takes
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if folded_clos(mid, radix).num_tiers < tiers else (lo, mid - 1)
    rail_ports = gpus // hb_domain * nics_per_gpu
    outcome = (
        "saves nothing here"
        if more is None
        else f"saves nothing, and each rail's Clos rounds its switches up on its own: rail-only "
        f"needs {more[0]:,} switches to rail-optimized's {more[1]:,}"
    )
    return (
        f"note: both designs need {tiers} tiers: each rail has {rail_ports:,} NIC ports, more "
        f"than the {lo:,} a {tiers - 1}-tier Clos of radix {radix} takes, so dropping the spine "
        f"{outcome}; rail-only saves when every rail fits in fewer tiers (up to "
        f"{lo * hb_domain // nics_per_gpu:,} GPUs at K={hb_domain}), with a larger radix or K."
    )


def register(app: typer.Typer, reproduce_app: typer.Typer) -> None:
    """Add the network commands to the main app and the `reproduce` group."""
    app.command()(cost)
    reproduce_app.command("table2")(table2)
    app.command()(topology)
    app.command()(faults)
    app.command()(tile)
    app.command("cost-plot")(cost_plot_cmd)


def cost(
    gpus: ClusterGpusOpt,
    radix: Annotated[int, typer.Option(help="switch radix (ports at the NIC speed)")],
    hb_domain: Annotated[int, typer.Option(help="HB-domain size K (divides N)")],
    nic_gbps: Annotated[
        int,
        typer.Option(
            help="NIC speed, Gbps: one the price book prices (400 in the default book; "
            "public-web-estimates also 800)"
        ),
    ] = 400,
    nics_per_gpu: NicPortsOpt = 1,
    price_book: PriceBookOpt = None,
    spare_per_domain: Annotated[
        int | None,
        typer.Option(help="idle GPUs per HB domain (swap set) for rail-only+ocs [1; 0 if K=1]"),
    ] = None,
    ocs_reconfigured: Annotated[
        bool,
        typer.Option(
            "--ocs-reconfigured",
            help="add the ocs-reconfigured design (NICs on OCSes, circuits set per job)",
        ),
    ] = False,
    reconfig_s: Annotated[
        float | None,
        typer.Option(help="seconds per OCS reconfiguration; only with --ocs-reconfigured [1]"),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Switches, transceivers, cost and power: rail-optimized Clos vs rail-only (paper §V-E),
    and rail-only+ocs (an OCS layer to swap in spare GPUs, §IV-C) when the price book has an
    OCS; with --ocs-reconfigured also NICs on OCSes with circuits per job (TPU v4, TopoOpt)."""
    from railplan.errors import RailplanError
    from railplan.limits import check_int
    from railplan.network.cost import compare, load_price_book
    from railplan.network.ocs_reconfig import check_reconfig_s
    from railplan.network.topology import Cluster

    if spare_per_domain is not None:
        check_int("spare_per_domain", spare_per_domain, 0, 1 << 20)
    if reconfig_s is not None:
        check_reconfig_s(reconfig_s)
        if not ocs_reconfigured:
            raise RailplanError("reconfig_s", "applies only with --ocs-reconfigured")
    book = load_price_book(price_book)
    if spare_per_domain is not None and book.ocs is None:
        raise RailplanError(
            "spare_per_domain",
            f"counts the spares beside the OCS layer, and price book {book.name!r} has no "
            "ocs entry (rail-only+ocs is not priced)",
        )
    cluster = Cluster(gpus, hb_domain, radix, nic_gbps, nics_per_gpu)
    data = compare(cluster, book, spare_per_domain).to_dict()
    if spare_per_domain is not None and data.get("rail_only_ocs") is None:
        raise RailplanError(
            "spare_per_domain",
            "no OCS layer here to hold spares beside: a domain of one GPU has no other GPU to "
            "swap in, and a rail-only network of one domain has no switch",
        )
    if ocs_reconfigured:
        from railplan.cli.network_ocs import design

        base = data["rail_optimized"]
        r = design(gpus, hb_domain, book, nic_gbps, nics_per_gpu, reconfig_s, base)
        data["ocs_reconfigured"] = r
    if as_json:
        print_json(data)
        return
    a, b, o = data["rail_optimized"], data["rail_only"], data["rail_only_ocs"]
    title = f"N={gpus:,} K={hb_domain} radix={radix} {nic_gbps} Gbps ({book.name})"
    extra = (
        *(("rail-only+ocs",) if o else ()),
        *(("ocs-reconfigured",) if ocs_reconfigured else ()),
    )
    columns = ("", "rail-optimized", "rail-only", *extra)
    Console(width=120).print(table(title, columns, _cost_rows(data), left=("",)))
    if o is not None:
        from railplan.cli.network_ocs import rail_only_ocs_note

        typer.echo(rail_only_ocs_note(o))
    if ocs_reconfigured:
        from railplan.cli.network_ocs import note

        typer.echo(note(data["ocs_reconfigured"]))
    if a["tiers"] == b["tiers"] > 1:
        more = (b["switches"], a["switches"]) if b["switches"] > a["switches"] else None
        typer.echo(_same_tiers_note(gpus, hb_domain, radix, nics_per_gpu, b["tiers"], more))


def _cost_rows(data: dict[str, Any]) -> list[tuple[str, ...]]:
    """The rows of `railplan cost`: counts, cost and power per design, the OCS layer's own rows
    (only its column) when the price book has an OCS, and the savings."""
    a, b, o = data["rail_optimized"], data["rail_only"], data["rail_only_ocs"]
    ocs_designs = [d for d in (o, data.get("ocs_reconfigured")) if d]
    designs = [a, b, *ocs_designs]
    counts = ("tiers", "switches", "switch_ports", "links", "transceivers")
    formats: list[tuple[str, Callable[[Any], str]]] = [(key, count) for key in counts]
    ocs: list[tuple[str, Callable[[Any], str]]] = [("ocs_units", count), ("ocs_ports", count)]
    ocs += [("ocs_cost_usd", musd), ("ocs_power_w", kw)]
    rows = [(key, *(fmt(d[key]) for d in designs)) for key, fmt in formats]
    rows += [(key, "", "", *(fmt(d[key]) for d in ocs_designs)) for key, fmt in ocs if o]
    for key, fmt in (("cost_usd", musd), ("power_w", mw)):  # one unit per row: its largest's
        largest = max((abs(d[key]) for d in designs if d[key] is not None), default=None)
        rows.append((key, *(fmt(d[key], largest) for d in designs)))
    rows.append(
        (
            "savings",
            "",
            *(
                f"cost {pct(d['savings']['cost'])}, power {pct(d['savings']['power'])}"
                for d in (data, *ocs_designs)
            ),
        )
    )
    return rows


def table2(as_json: JsonOpt = False) -> None:
    """Paper Table II (K=256, 400 Gbps): our counts, cost and power beside the paper's."""
    from railplan.reproduce.table2 import HOTI24_RANGES, reproduce_table2

    rows = reproduce_table2()
    if as_json:
        print_json({"rows": [r.to_dict() for r in rows], "paper_ranges": HOTI24_RANGES})
        return
    title = escape(
        "Table II: rail-optimized (SOTA) vs rail-only, K=256, 400 Gbps, "
        "$694/port $199/TR 18 W/port 9 W/TR — ours "
        "[paper HotNets'23 | paper HOTI'24]"
    )
    counts = [f"#{part} {design}" for part in ("SW", "TR") for design in ("SOTA", "rail-only")]
    money = ["cost SOTA", "cost rail-only", "cost saving", "power saving", "saving @HotNets prices"]
    cells = [_table2_row(r) for r in rows]
    Console(width=250).print(table(title, ["N", "radix", *counts, *money], cells))


def _table2_row(r: Table2Row) -> tuple[str, ...]:
    """One row of Table II: each of our numbers with the papers' [HotNets'23 | HOTI'24]."""
    o, h, p = r.ours, r.hotnets23, r.hoti24
    counts = ("sota_switches", "rail_only_switches", "sota_transceivers", "rail_only_transceivers")
    return (
        f"{r.gpus:,}",
        str(r.radix),
        *[_cell(count(o[key]), _paper(h, key, count), _paper(p, key, count)) for key in counts],
        _cell(musd(o["sota_cost_usd"]), None, _paper(p, "sota_cost_musd", _musd)),
        _cell(musd(o["rail_only_cost_usd"]), None, _paper(p, "rail_only_cost_musd", _musd)),
        _cell(pct(o["savings_cost"]), None, _paper(p, "cost_reduction_pct", _paper_pct)),
        _cell(pct(o["savings_power"]), None, _paper(p, "power_reduction_pct", _paper_pct)),
        _cell(
            pct(o["savings_cost_hotnets23_prices"]),
            _paper(h, "cost_reduction_pct", _paper_pct),
            None,
        ),
    )


def _cell(ours: str, hot: str | None, hoti: str | None) -> str:
    return escape(f"{ours} [{hot or '–'} | {hoti or '–'}]")


def _paper(row: PaperRow | None, attr: str, fmt: Callable[[Any], str]) -> str | None:
    value = getattr(row, attr) if row is not None else None
    return None if value is None else fmt(value)


def _musd(x: float) -> str:
    return f"${x}M"


def _paper_pct(x: float) -> str:
    return f"{x:g}%"


def topology(
    arch: Annotated[
        str,
        typer.Option(
            "--arch",
            "--network",
            help="rail-optimized, rail-only, oversubscribed, multi-plane, ideal or "
            "ocs-reconfigured (--network, as the other commands call it, is the same option)",
        ),
    ],
    gpus: ClusterGpusOpt,
    hb_domain: HbDomainSizeOpt,
    radix: Annotated[
        int | None, typer.Option(help="switch radix; not with ocs-reconfigured [64]")
    ] = None,
    nic_gbps: NicSpeedOpt = 400,
    nics_per_gpu: NicPortsOpt = 1,
    oversubscription: Annotated[
        float | None, typer.Option(help="down:up ratio; only with --arch oversubscribed [3]")
    ] = None,
    oversubscribed_tier: Annotated[
        int | None, typer.Option(help="1 = leaves; only with --arch oversubscribed [1]")
    ] = None,
    planes: Annotated[
        int | None,
        typer.Option(help="Clos planes, one NIC port per GPU each; only with multi-plane [2]"),
    ] = None,
    reconfig_s: Annotated[
        float | None,
        typer.Option(help="seconds per OCS reconfiguration; only with ocs-reconfigured [1]"),
    ] = None,
    price_book: Annotated[
        str | None, typer.Option(help="price book (its ocs entry); only with ocs-reconfigured")
    ] = None,
    export: Annotated[
        str | None, typer.Option(help="write the graph: FILE.graphml or FILE.json")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Counts of one architecture; with --export also its graph (GraphML or node-link JSON)."""
    from railplan.cli.network_ocs import check_arch, topology_ocs
    from railplan.network.topology import Cluster, build_counts

    check_arch(
        arch,
        radix=radix,
        oversubscription=oversubscription,
        oversubscribed_tier=oversubscribed_tier,
        planes=planes,
        reconfig_s=reconfig_s,
        price_book=price_book,
    )
    if arch == "ocs-reconfigured":
        args = (nic_gbps, nics_per_gpu, price_book, reconfig_s, export, as_json)
        topology_ocs(gpus, hb_domain, *args)
        return
    radix = 64 if radix is None else radix
    if export:
        from railplan.network.graph import check_export

        check_export(export)  # before any work

    cluster = Cluster(gpus, hb_domain, radix, nic_gbps, nics_per_gpu)
    c = build_counts(arch, cluster, oversubscription, oversubscribed_tier, planes)
    _print_topology(c, export, as_json)
    if arch == "ideal" and hb_domain != gpus and not as_json:
        typer.echo(
            f"ideal puts all {gpus:,} GPUs in one HB domain (no switches): --hb-domain "
            f"{hb_domain} describes the other architectures, not this one"
        )


def _print_topology(c: NetworkCounts, export: str | None, as_json: bool) -> None:
    """`railplan topology` of an electrical architecture: tiers, totals, and the graph file."""
    data: dict[str, Any] = {"counts": c.to_dict()}
    if export:
        from railplan.network.graph import (
            build_graph,
            check_graph_size,
            export_graph,
            graph_summary,
        )

        check_graph_size(c)
        with Console(stderr=True).status(f"building and writing the graph of {c.gpus:,} GPUs"):
            g = build_graph(c)
            export_graph(g, export)
        data["graph"] = graph_summary(g) | {"file": export}
    if as_json:
        print_json(data)
        return
    rows = [
        (row["name"], count(row["switches"]), count(row["links_in"])) for row in c.tier_detail()
    ]
    rows.append(("total", count(c.switches), count(c.links)))
    title = f"{c.arch}: N={c.gpus:,} K={c.hb_domain} radix={c.radix}"
    Console().print(table(title, ("tier", "switches", "links in"), rows, left=("tier",)))
    typer.echo(
        f"switch ports {c.switch_ports:,}, transceivers {c.transceivers:,}, fabrics {c.fabrics}"
    )
    if export:
        typer.echo(f"graph written to {export}: {data['graph']}")


def faults(
    gpus: Annotated[int, typer.Option(help="GPUs in the job/cluster")] = 16384,
    hb_domain: HbDomainSizeOpt = 8,
    radix: RadixOpt = 64,
    nic_gbps: NicSpeedOpt = 400,
    spare_per_domain: Annotated[
        int,
        typer.Option(
            help="idle GPUs per HB domain, or per OCS swap set where one OCS cannot hold a "
            "whole domain (the spares rail-only+ocs is priced with)"
        ),
    ] = 0,
    small_domain_max: Annotated[
        int, typer.Option(help="K up to which a domain migrates whole")
    ] = 8,
    swap_group: Annotated[int, typer.Option(help="GPUs swapped per failure, large K")] = 8,
    days: Annotated[float, typer.Option(help="job length (days)")] = 54.0,
    trials: Annotated[int, typer.Option(help="Monte Carlo trials")] = 2000,
    seed: Annotated[int, typer.Option(help="RNG seed")] = 0,
    repair_hours: Annotated[
        float, typer.Option(help="hours a failed part stays out (assumption)")
    ] = 24.0,
    quantile: Annotated[float, typer.Option(help="target probability for spares")] = 0.99,
    price_book: PriceBookOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Failure impact per component and a Monte Carlo of a long job (paper §IV-C), and what the
    rail-only+ocs layer costs beside the idle GPU-hours it recovers."""
    from railplan.limits import MAX_GPUS, check_int
    from railplan.network.cost import load_price_book
    from railplan.network.faults import Policy, fault_table, monte_carlo
    from railplan.network.ocs import spares_per_domain
    from railplan.network.topology import Cluster

    check_int("hb_domain", hb_domain, 1, MAX_GPUS)
    check_int("spare_per_domain", spare_per_domain, 0, hb_domain - 1)  # one GPU must work
    book = load_price_book(price_book)
    check_int("swap_group", swap_group, 1, 1 << 20)
    check_int("small_domain_max", small_domain_max, 1, 1 << 20)
    cluster = Cluster(gpus, hb_domain, radix, nic_gbps)
    # the spares the OCS layer is priced with: per swap set, several in a domain too large
    # for one OCS (network.ocs.spares_per_domain)
    held = spares_per_domain(cluster, book.ocs, spare_per_domain)
    policy = Policy(held, False, small_domain_max, swap_group)
    table = fault_table(cluster, policy)
    mc = monte_carlo(cluster, days, trials, seed, None, policy, repair_hours, quantile)
    data: dict[str, Any] = {
        "single_failures": table,
        "monte_carlo": mc.to_dict(),
        "spare_per_domain": held,
    }
    from railplan.cli.network_ocs import ocs_tradeoff, ocs_tradeoff_note

    # prices only the trade-off line needs: a NIC speed the price book lacks leaves it out
    priced = nic_gbps in book.speeds
    data["ocs_tradeoff"] = ocs_tradeoff(cluster, spare_per_domain, book, data) if priced else None
    if as_json:
        print_json(data)
        return
    console = Console(width=160)
    console.print(_single_failures_table(table, gpus, hb_domain, radix, held))
    console.print(_monte_carlo_table(mc, gpus, days, trials, seed, repair_hours))
    console.print(
        "GPUs cut off: lose their network path; GPUs moved: whose work moves to spares or "
        "another HB domain while the part is repaired. expected_failures counts hardware "
        "failures (GPU, server, NIC link, switch); expected_interruptions adds the Llama 3 "
        "report's software and host interruptions, so it is the larger. Idle GPU-hours are "
        f"GPUs unusable while a part is out ({repair_hours:g} h each); restart time after an "
        "interruption is not counted in goodput."
    )
    if data["ocs_tradeoff"] is not None:
        console.print(ocs_tradeoff_note(data["ocs_tradeoff"], days))
    elif not priced and book.ocs is not None:
        console.print(
            f"rail-only+ocs: price book {book.name!r} has no {nic_gbps} Gbps prices, so the OCS "
            "layer's cost is not shown (give --price-book FILE with that speed)"
        )


def _single_failures_table(
    single: dict[str, Any], gpus: int, hb_domain: int, radix: int, spare_per_domain: int
) -> Table:
    """Per component and architecture: GPUs cut off / moved / NIC capacity lost by one failure."""
    archs = single["architectures"]
    variants = list(archs)
    comps = [i["component"] for i in archs[variants[0]]["impacts"]]
    rows = [
        (comp, *[_impact(archs[v]["impacts"][ci]) for v in variants])
        for ci, comp in enumerate(comps)
    ]
    return table(
        f"One failure: GPUs cut off / GPUs moved / NIC capacity lost "
        f"(N={gpus:,} K={hb_domain} radix={radix}, spares/domain={spare_per_domain})",
        ("component", *variants),
        rows,
        left=("component",),
    )


def _impact(imp: dict[str, Any]) -> str:
    if not imp["applicable"]:
        return "n/a"
    return (
        f"{imp['gpus_cut_off']} / {imp['gpus_moved']} / {imp['bandwidth_lost_gbps'] / 1000:g} Tbps"
    )


def _monte_carlo_table(
    mc: MonteCarloResult, gpus: int, days: float, trials: int, seed: int, repair_hours: float
) -> Table:
    """The Monte Carlo's metrics per architecture variant, with the goodput."""
    whole = ("switches", "spare_gpus_needed")  # counts: printed without decimals
    rows = [
        (
            key,
            *[format(mc.variants[v][key], ",.0f" if key in whole else ",.1f") for v in mc.variants],
        )
        for key in next(iter(mc.variants.values()))
    ]
    gpu_hours = gpus * days * 24
    goodput = [f"{1 - r['expected_idle_gpu_hours'] / gpu_hours:.2%}" for r in mc.variants.values()]
    rows.append(("goodput (GPU-hours not idle)", *goodput))
    return table(
        f"Monte Carlo: {days:g} days, {trials} trials, seed {seed}, "
        f"repair {repair_hours:g} h, Llama 3 failure rates",
        ("metric", *mc.variants),
        rows,
        left=("metric",),
    )


def tile(
    gpus: ClusterGpusOpt,
    hb_domain: HbDomainSizeOpt,
    jobs: Annotated[str, typer.Option(help="job sizes in GPUs, e.g. 512,1024,4096")],
    as_json: JsonOpt = False,
) -> None:
    """Split a rail-only cluster into domain × rail rectangles, one per job."""
    from railplan.network.tiling import tile as do_tile

    result = do_tile(gpus, hb_domain, _int_list("jobs", jobs, unique=False, example="512,1024"))
    if as_json:
        print_json(result.to_dict())
        return
    rows = [
        (
            str(p.job),
            count(p.gpus),
            f"{p.domain_start}–{p.domain_end - 1}",
            f"{p.rail_start}–{p.rail_end - 1}",
            f"{p.shape[0]}×{p.shape[1]}",
        )
        for p in result.placements
    ]
    title = f"Tiling N={gpus:,} ({result.domains} domains × {hb_domain} rails)"
    Console().print(table(title, ("job", "GPUs", "domains", "rails", "shape"), rows))
    if result.unplaced:
        typer.echo("unplaced jobs: " + ", ".join(str(i) for i in result.unplaced))
    typer.echo(
        f"utilization {100 * result.utilization:.1f}%, free {result.free_gpus:,}, "
        f"largest free rectangle {result.largest_free_rectangle_gpus:,}, "
        f"fragmentation {100 * result.fragmentation:.1f}%"
    )


def cost_plot_cmd(
    out: Annotated[str, typer.Option(help="output FILE.png or FILE.svg")],
    hb_domain: HbDomainSizeOpt = 256,
    radices: Annotated[str, typer.Option(help="comma-separated radices")] = "32,64,128,256",
    nic_gbps: NicSpeedOpt = 400,
    price_book: PriceBookOpt = None,
) -> None:
    """Plot cost and power vs cluster size for both designs and several radices."""
    from railplan.limits import check_int
    from railplan.network.cost import load_price_book
    from railplan.network.plots import cost_plot
    from railplan.network.topology import check_radix

    check_int("hb_domain", hb_domain, 1, 1 << 20)
    rs = [check_radix(r) for r in _int_list("radices", radices, example="32,64,128")]
    path = cost_plot(out, None, rs, hb_domain, nic_gbps, load_price_book(price_book))
    typer.echo(f"wrote {path}")
