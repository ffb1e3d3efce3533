"""CLI commands of the network part: cost, topology, faults, tile, cost-plot, reproduce table2."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from railplan.cli.core import print_json
from railplan.cli.options import PriceBookOpt
from railplan.errors import RailplanError


def _int_list(field: str, text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise RailplanError(field, f"{text!r} is not a comma-separated list of integers") from None
    if not values:
        raise RailplanError(field, "give at least one integer, e.g. 512,1024")
    return values


def _m(usd: float | None) -> str:
    return "n/a" if usd is None else f"${usd / 1e6:,.1f}M"


def _mw(w: float | None) -> str:
    return "n/a" if w is None else f"{w / 1e6:,.2f} MW"


def _kw(w: float | None) -> str:
    return "n/a" if w is None else f"{w / 1e3:,.1f} kW"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _n(x: int | None) -> str:
    return "n/a" if x is None else f"{x:,}"


def _same_tiers_note(gpus: int, hb_domain: int, radix: int, nics_per_gpu: int, tiers: int) -> str:
    """Why rail-only saves nothing when a rail needs as many Clos tiers as the whole cluster."""
    from railplan.network.topology import folded_clos

    lo = radix  # a 1-tier Clos takes `radix` ports
    while folded_clos(lo * 2, radix).num_tiers < tiers:
        lo *= 2
    hi = 2 * lo - 1
    while lo < hi:  # the most NIC ports a Clos of one tier fewer takes
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if folded_clos(mid, radix).num_tiers < tiers else (lo, mid - 1)
    rail_ports = gpus // hb_domain * nics_per_gpu
    return (
        f"note: both designs need {tiers} tiers: each rail has {rail_ports:,} NIC ports, more "
        f"than the {lo:,} a {tiers - 1}-tier Clos of radix {radix} takes, so dropping the spine "
        f"saves nothing here; rail-only saves when every rail fits in fewer tiers (up to "
        f"{lo * hb_domain // nics_per_gpu:,} GPUs at K={hb_domain}), with a larger radix or K."
    )


def cost(
    gpus: Annotated[int, typer.Option(help="GPUs N")],
    radix: Annotated[int, typer.Option(help="switch radix (ports at the NIC speed)")],
    hb_domain: Annotated[int, typer.Option(help="HB-domain size K (divides N)")],
    nic_gbps: Annotated[int, typer.Option(help="NIC speed: 100, 200, 400 or 800")] = 400,
    nics_per_gpu: Annotated[int, typer.Option(help="NIC ports per GPU")] = 1,
    price_book: PriceBookOpt = None,
    spare_per_domain: Annotated[
        int, typer.Option(help="idle GPUs per HB domain (swap set) for rail-only+ocs")
    ] = 1,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Switches, transceivers, cost and power: rail-optimized Clos vs rail-only (paper §V-E),
    and rail-only+ocs (an OCS layer to swap in spare GPUs, §IV-C) when the price book has an
    OCS."""
    from railplan.limits import check_int
    from railplan.network.cost import compare, load_price_book

    check_int("spare_per_domain", spare_per_domain, 0, 1 << 20)
    book = load_price_book(price_book)
    data = compare(gpus, hb_domain, radix, nic_gbps, nics_per_gpu, book, spare_per_domain).to_dict()
    if as_json:
        print_json(data)
        return
    t = Table(title=f"N={gpus:,} K={hb_domain} radix={radix} {nic_gbps} Gbps ({book.name})")
    t.add_column("")
    t.add_column("rail-optimized", justify="right")
    t.add_column("rail-only", justify="right")
    a, b, o = data["rail_optimized"], data["rail_only"], data["rail_only_ocs"]
    if o is not None:
        t.add_column("rail-only+ocs", justify="right")
    for key, fmt in (
        ("tiers", _n),
        ("switches", _n),
        ("switch_ports", _n),
        ("links", _n),
        ("transceivers", _n),
        ("ocs_units", _n),
        ("ocs_ports", _n),
        ("ocs_cost_usd", _m),
        ("ocs_power_w", _kw),
        ("cost_usd", _m),
        ("power_w", _mw),
    ):
        if key.startswith("ocs"):
            if o is not None:
                t.add_row(key, "", "", fmt(o[key]))
            continue
        t.add_row(key, fmt(a[key]), fmt(b[key]), *([fmt(o[key])] if o is not None else []))
    t.add_row(
        "savings",
        "",
        f"cost {_pct(data['savings']['cost'])}, power {_pct(data['savings']['power'])}",
        *(
            [f"cost {_pct(o['savings']['cost'])}, power {_pct(o['savings']['power'])}"]
            if o is not None
            else []
        ),
    )
    Console(width=120).print(t)
    if o is not None:
        oc = o["ocs"]
        typer.echo(
            f"rail-only+ocs: {oc['units']:,} × {oc['model']} ({oc['ports_per_unit']} ports, "
            f"{oc['fibers_per_link']} per NIC link; {oc['ports_used']:,} of "
            f"{oc['ports_installed']:,} ports used), {oc['swap_set_gpus']} GPUs per swap set; "
            f"OCS adds {_pct(o['over_rail_only']['cost'])} cost, "
            f"{_pct(o['over_rail_only']['power'])} power to rail-only; "
            f"{oc['spare_gpus']:,} spare GPUs held idle ({oc['spare_per_swap_set']} per swap "
            "set). OCS price is an assumption (see the price book); GPUs it recovers: "
            "railplan faults."
        )
    if a["tiers"] == b["tiers"] > 1:
        typer.echo(_same_tiers_note(gpus, hb_domain, radix, nics_per_gpu, b["tiers"]))


def table2(as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """Paper Table II (K=256, 400 Gbps): our counts, cost and power beside the paper's."""
    from railplan.network.paper import HOTI24_RANGES, PaperRow, reproduce_table2

    rows = reproduce_table2()
    if as_json:
        print_json({"rows": [r.to_dict() for r in rows], "paper_ranges": HOTI24_RANGES})
        return
    t = Table(
        title=escape(
            "Table II: rail-optimized (SOTA) vs rail-only, K=256, 400 Gbps, "
            "$694/port $199/TR 18 W/port 9 W/TR — ours "
            "[paper HotNets'23 | paper HOTI'24]"
        )
    )
    for col in (
        "N",
        "radix",
        "#SW SOTA",
        "#SW rail-only",
        "#TR SOTA",
        "#TR rail-only",
        "cost SOTA",
        "cost rail-only",
        "cost saving",
        "power saving",
        "saving @HotNets prices",
    ):
        t.add_column(col, justify="right")
    for r in rows:
        o, h, p = r.ours, r.hotnets23, r.hoti24

        def cell(ours: str, hot: str | None, hoti: str | None) -> str:
            return escape(f"{ours} [{hot or '–'} | {hoti or '–'}]")

        def paper(row: PaperRow | None, attr: str, fmt: Callable[[Any], str]) -> str | None:
            value = getattr(row, attr) if row is not None else None
            return None if value is None else fmt(value)

        def musd(x: float) -> str:
            return f"${x}M"

        def pct(x: float) -> str:
            return f"{x:g}%"

        t.add_row(
            f"{r.gpus:,}",
            str(r.radix),
            *[
                cell(_n(o[key]), paper(h, key, _n), paper(p, key, _n))
                for key in (
                    "sota_switches",
                    "rail_only_switches",
                    "sota_transceivers",
                    "rail_only_transceivers",
                )
            ],
            cell(_m(o["sota_cost_usd"]), None, paper(p, "sota_cost_musd", musd)),
            cell(_m(o["rail_only_cost_usd"]), None, paper(p, "rail_only_cost_musd", musd)),
            cell(_pct(o["savings_cost"]), None, paper(p, "cost_reduction_pct", pct)),
            cell(_pct(o["savings_power"]), None, paper(p, "power_reduction_pct", pct)),
            cell(
                _pct(o["savings_cost_hotnets23_prices"]),
                paper(h, "cost_reduction_pct", pct),
                None,
            ),
        )
    Console(width=250).print(t)


def topology(
    arch: Annotated[
        str,
        typer.Option(help="rail-optimized, rail-only, oversubscribed, multi-plane or ideal"),
    ],
    gpus: Annotated[int, typer.Option(help="GPUs N")],
    hb_domain: Annotated[int, typer.Option(help="HB-domain size K")],
    radix: Annotated[int, typer.Option(help="switch radix")] = 64,
    nic_gbps: Annotated[int, typer.Option(help="NIC speed (Gbps)")] = 400,
    nics_per_gpu: Annotated[int, typer.Option(help="NIC ports per GPU")] = 1,
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
    export: Annotated[
        str | None, typer.Option(help="write the graph: FILE.graphml or FILE.json")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Counts of one architecture; with --export also its graph (GraphML or node-link JSON)."""
    from railplan.network.topology import build_counts

    if export:
        from railplan.network.graph import check_export

        check_export(export)  # before any work

    c = build_counts(
        arch,
        gpus,
        hb_domain,
        radix,
        nic_gbps,
        nics_per_gpu,
        oversubscription,
        oversubscribed_tier,
        planes,
    )
    data: dict[str, Any] = {"counts": c.to_dict()}
    if export:
        from railplan.network.graph import (
            build_graph,
            check_graph_size,
            export_graph,
            graph_summary,
        )

        check_graph_size(c)
        with Console(stderr=True).status(f"building and writing the graph of {gpus:,} GPUs"):
            g = build_graph(c)
            export_graph(g, export)
        data["graph"] = graph_summary(g) | {"file": export}
    if as_json:
        print_json(data)
        return
    t = Table(title=f"{arch}: N={gpus:,} K={hb_domain} radix={radix}")
    t.add_column("tier")
    t.add_column("switches", justify="right")
    t.add_column("links in", justify="right")
    for row in c.tier_detail():
        t.add_row(row["name"], _n(row["switches"]), _n(row["links_in"]))
    t.add_row("total", _n(c.switches), _n(c.links))
    Console().print(t)
    typer.echo(
        f"switch ports {c.switch_ports:,}, transceivers {c.transceivers:,}, fabrics {c.fabrics}"
    )
    if export:
        typer.echo(f"graph written to {export}: {data['graph']}")


def _single_failures_table(title: str, table: dict[str, Any]) -> Table:
    """`faults`: what one failure of each component costs, per architecture."""
    t = Table(title=title)
    t.add_column("component")
    variants = list(table["architectures"])
    for v in variants:
        t.add_column(v, justify="right")
    comps = [i["component"] for i in table["architectures"][variants[0]]["impacts"]]
    for ci, comp in enumerate(comps):
        cells = []
        for v in variants:
            imp = table["architectures"][v]["impacts"][ci]
            cells.append(
                "n/a"
                if not imp["applicable"]
                else f"{imp['gpus_cut_off']} / {imp['gpus_moved']} / "
                f"{imp['bandwidth_lost_gbps'] / 1000:g} Tbps"
            )
        t.add_row(comp, *cells)
    return t


def _monte_carlo_table(title: str, variants: dict[str, Any], gpu_hours: float) -> Table:
    """`faults`: the Monte Carlo's metrics per architecture, and the goodput."""
    m = Table(title=title)
    m.add_column("metric")
    for v in variants:
        m.add_column(v, justify="right")
    whole = ("switches", "spare_gpus_needed")  # counts: printed without decimals
    for key in next(iter(variants.values())):
        fmt = ",.0f" if key in whole else ",.1f"
        m.add_row(key, *[format(variants[v][key], fmt) for v in variants])
    m.add_row(
        "goodput (GPU-hours not idle)",
        *[f"{1 - variants[v]['expected_idle_gpu_hours'] / gpu_hours:.2%}" for v in variants],
    )
    return m


def faults(
    gpus: Annotated[int, typer.Option(help="GPUs in the job/cluster")] = 16384,
    hb_domain: Annotated[int, typer.Option(help="HB-domain size K")] = 8,
    radix: Annotated[int, typer.Option(help="switch radix")] = 64,
    nic_gbps: Annotated[int, typer.Option(help="NIC speed (Gbps)")] = 400,
    spare_per_domain: Annotated[int, typer.Option(help="idle GPUs per HB domain")] = 0,
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
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Failure impact per component and a Monte Carlo of a long job (paper §IV-C)."""
    from railplan.limits import check_int
    from railplan.network.faults import Policy, fault_table, monte_carlo

    check_int("spare_per_domain", spare_per_domain, 0, hb_domain)
    check_int("swap_group", swap_group, 1, 1 << 20)
    check_int("small_domain_max", small_domain_max, 1, 1 << 20)
    policy = Policy(spare_per_domain, False, small_domain_max, swap_group)
    table = fault_table(gpus, hb_domain, radix, nic_gbps, 1, policy)
    mc = monte_carlo(
        gpus,
        hb_domain,
        radix,
        days,
        trials,
        seed,
        None,
        policy,
        repair_hours,
        quantile,
        nic_gbps,
    )
    data = {"single_failures": table, "monte_carlo": mc.to_dict()}
    if as_json:
        print_json(data)
        return
    console = Console(width=160)
    title = (
        f"One failure: GPUs cut off / GPUs moved / NIC capacity lost "
        f"(N={gpus:,} K={hb_domain} radix={radix}, spares/domain={spare_per_domain})"
    )
    console.print(_single_failures_table(title, table))
    title = (
        f"Monte Carlo: {days:g} days, {trials} trials, seed {seed}, "
        f"repair {repair_hours:g} h, Llama 3 failure rates"
    )
    console.print(_monte_carlo_table(title, mc.variants, gpus * days * 24))
    console.print(
        "GPUs cut off: lose their network path; GPUs moved: whose work moves to spares or "
        "another HB domain while the part is repaired. expected_failures counts hardware "
        "failures (GPU, server, NIC link, switch); expected_interruptions adds the Llama 3 "
        "report's software and host interruptions, so it is the larger. Idle GPU-hours are "
        f"GPUs unusable while a part is out ({repair_hours:g} h each); restart time after an "
        "interruption is not counted in goodput."
    )


def tile(
    gpus: Annotated[int, typer.Option(help="GPUs N")],
    hb_domain: Annotated[int, typer.Option(help="HB-domain size K")],
    jobs: Annotated[str, typer.Option(help="job sizes in GPUs, e.g. 512,1024,4096")],
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Split a rail-only cluster into domain × rail rectangles, one per job."""
    from railplan.network.tiling import tile as do_tile

    result = do_tile(gpus, hb_domain, _int_list("jobs", jobs))
    if as_json:
        print_json(result.to_dict())
        return
    t = Table(title=f"Tiling N={gpus:,} ({result.domains} domains × {hb_domain} rails)")
    for col in ("job", "GPUs", "domains", "rails", "shape"):
        t.add_column(col, justify="right")
    for p in result.placements:
        d, r = p.shape
        t.add_row(
            str(p.job),
            _n(p.gpus),
            f"{p.domain_start}–{p.domain_end - 1}",
            f"{p.rail_start}–{p.rail_end - 1}",
            f"{d}×{r}",
        )
    Console().print(t)
    if result.unplaced:
        typer.echo("unplaced jobs: " + ", ".join(str(i) for i in result.unplaced))
    typer.echo(
        f"utilization {100 * result.utilization:.1f}%, free {result.free_gpus:,}, "
        f"largest free rectangle {result.largest_free_rectangle_gpus:,}, "
        f"fragmentation {100 * result.fragmentation:.1f}%"
    )


def cost_plot_cmd(
    out: Annotated[str, typer.Option(help="output FILE.png or FILE.svg")],
    hb_domain: Annotated[int, typer.Option(help="HB-domain size K")] = 256,
    radices: Annotated[str, typer.Option(help="comma-separated radices")] = "32,64,128,256",
    nic_gbps: Annotated[int, typer.Option(help="NIC speed (Gbps)")] = 400,
    price_book: PriceBookOpt = None,
) -> None:
    """Plot cost and power vs cluster size for both designs and several radices."""
    from railplan.limits import check_int
    from railplan.network.cost import load_price_book
    from railplan.network.plots import cost_plot
    from railplan.network.topology import check_radix

    check_int("hb_domain", hb_domain, 1, 1 << 20)
    rs = [check_radix(r) for r in _int_list("radices", radices)]
    path = cost_plot(out, None, rs, hb_domain, nic_gbps, load_price_book(price_book))
    typer.echo(f"wrote {path}")


def register(app: typer.Typer, reproduce_app: typer.Typer) -> None:
    """Add the network commands to the main app and the `reproduce` group."""
    app.command()(cost)
    reproduce_app.command("table2")(table2)
    app.command()(topology)
    app.command()(faults)
    app.command()(tile)
    app.command("cost-plot")(cost_plot_cmd)
