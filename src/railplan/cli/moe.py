"""CLI commands of the MoE part: all-to-all on rail-optimized vs rail-only."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from railplan.cli.options import SystemOpt
from railplan.cli.output import print_json, quantity_table, table


def register(app: typer.Typer, reproduce_app: typer.Typer) -> None:
    """Add the MoE commands."""
    app.command()(alltoall)
    reproduce_app.command("fig5")(fig5)


def alltoall(
    system: SystemOpt = "dgx-a100",
    gpus: Annotated[int | None, typer.Option(help="GPUs in the all-to-all (default K²)")] = None,
    bytes_per_pair: Annotated[
        float, typer.Option(help="bytes each GPU sends each other GPU (1-1e15)")
    ] = 16 * 2**20,
    achievable: Annotated[
        bool, typer.Option("--achievable/--line-rate", help="measured bandwidths or line rates")
    ] = False,
    latency: Annotated[bool, typer.Option("--latency/--no-latency")] = False,
    hb_domain: Annotated[int | None, typer.Option(help="override K")] = None,
    hb_tbps: Annotated[float | None, typer.Option(help="override HB Tbps per direction")] = None,
    nic_gbps: Annotated[float | None, typer.Option(help="override NIC Gbps per direction")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """All-to-all time on rail-optimized (direct) vs rail-only (forwarding through the HB
    domain) and the slowdown (paper: 8.2 % DGX A100, 11.2 % DGX H100)."""
    from railplan.perf.alltoall import compare
    from railplan.specs.build import build_system

    sy = build_system(system, hb_domain, hb_tbps, nic_gbps, None)
    r = compare(sy, gpus, bytes_per_pair, achievable, latency)
    if as_json:
        print_json(r.to_dict())
        return
    title = (
        f"All-to-all on {r.gpus} GPUs of {r.system} ({r.domains} domains × "
        f"{r.hb_domain}), {r.pair_bytes:,.0f} B per pair, {r.bandwidth}"
    )
    rows = [
        ("rail-optimized (direct)", f"{r.rail_optimized_s * 1e3:.3f} ms"),
        ("rail-only (forwarding: rail phase, then HB)", f"{r.rail_only_s * 1e3:.3f} ms"),
        ("rail-only (HB aggregation, then rail)", f"{r.rail_only_hb_first_s * 1e3:.3f} ms"),
        (
            "latency if sequential: direct, x·y−1 rounds",
            f"{r.direct_pairwise_latency_s * 1e6:.0f} µs",
        ),
        (
            "latency if sequential: two-step, (x−1)+(y−1)",
            f"{r.two_step_latency_s * 1e6:.0f} µs",
        ),
        (
            "latency in the times above",
            "one per phase (--latency)" if latency else "none (--latency adds one per phase)",
        ),
        ("slowdown", f"{r.slowdown:.2%}"),
        ("C_S / C_F", f"{r.cs_over_cf:.2%}"),
        ("slowdown for many domains, (x−1)/x·C_S/C_F", f"{r.asymptotic_slowdown:.2%}"),
    ]
    Console().print(quantity_table(title, rows))


def fig5(
    heatmap: Annotated[str | None, typer.Option(help="write the heatmap (PNG or SVG)")] = None,
    first_gpus: Annotated[
        int | None, typer.Option(help="GPUs in the heatmap (default 64, at most 2,048)")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Fig 5: MoE-1.3B on 16 DGX A100: all-to-all share of traffic and the iteration-time
    cost of rail-only forwarding."""
    from railplan.cli.traffic import heatmap_gpus
    from railplan.reproduce.moe import fig5 as run

    r = run(heatmap, heatmap_gpus(first_gpus, heatmap))
    if as_json:
        print_json(r)
        return
    rows = [
        ("EP all-to-all share of bytes", "≈ 27 %", f"{r['share_by_kind']['ep']:.1%}"),
        ("DP share of bytes", "", f"{r['share_by_kind']['dp']:.1%}"),
        ("GPU pairs with traffic", "all (uniform)", f"{r['pairs_with_traffic_fraction']:.1%}"),
        *[
            (f"iteration time, {arch}", "", f"{sec:.3f} s")
            for arch, sec in r["iteration_s"].items()
        ],
        ("rail-only vs rail-optimized, iteration", "", f"+{r['rail_only_overhead']:.2%}"),
        (
            "rail-only vs rail-optimized, all-to-all",
            "≈ +8.2 %",
            f"+{r['rail_only_ep_comm_overhead']:.2%}",
        ),
    ]
    title = "Fig 5: MoE-1.3B (128 experts) on 16 DGX A100 — ours beside the paper's"
    Console().print(table(title, ("quantity", "paper", "ours"), rows, left=("quantity",)))
    Console().print(f"configuration: {r['setup']['source']}")
