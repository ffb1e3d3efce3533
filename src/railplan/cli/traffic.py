"""CLI commands of the traffic part: `railplan traffic` and `railplan reproduce traffic`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from railplan.cli.options import (
    CpOpt,
    DpOpt,
    EpOpt,
    FirstStageLayersOpt,
    GlobalBatchOpt,
    GpusOpt,
    HbDomainOpt,
    InterleaveOpt,
    JsonOpt,
    LastStageLayersOpt,
    ModelOpt,
    RecomputeOpt,
    SequenceParallelOpt,
    SystemOpt,
    ZeroOpt,
    ZeroScheduleOpt,
)
from railplan.errors import RailplanError
from railplan.units import fmt_bytes as _bytes


def _positive(field: str, value: int) -> None:
    if value <= 0:
        raise RailplanError(field, "must be a positive integer")


def stats_table(title: str, r: dict[str, Any]) -> Table:
    """Rich table of one `TrafficStats.to_dict()`."""
    from railplan.traffic import KINDS

    table = Table(title=title)
    table.add_column("quantity")
    table.add_column("value", justify="right")
    table.add_column("HB domain", justify="right")
    table.add_column("NIC domain", justify="right")
    # CP rows only when the run has context parallelism (the other kinds always show)
    kinds = [k for k in KINDS if k != "cp" or r["bytes_by_kind"][k]]
    for k in kinds:
        table.add_row(
            f"{k.upper()} bytes",
            f"{_bytes(r['bytes_by_kind'][k])} ({r['share_by_kind'][k]:.2%})",
            _bytes(r["hb_bytes_by_kind"][k]),
            _bytes(r["nic_bytes_by_kind"][k]),
        )
    table.add_row(
        "all bytes", _bytes(r["total_bytes"]), _bytes(r["hb_bytes"]), _bytes(r["nic_bytes"])
    )
    table.add_row("NIC bytes crossing rails", _bytes(r["nic_cross_rail_bytes"]), "", "")
    table.add_row(
        "GPU pairs with traffic",
        f"{r['pairs_with_traffic']:,} of {r['pairs_total']:,} "
        f"({r['pairs_with_traffic_fraction']:.4%})",
        "",
        "",
    )
    for k in kinds:
        table.add_row(
            f"  pairs carrying {k.upper()}", f"{r['pairs_by_kind_fraction'][k]:.4%}", "", ""
        )
    table.add_row(
        "largest pair (both directions)",
        "",
        _bytes(r["max_pair_bytes_hb"]),
        _bytes(r["max_pair_bytes_nic"]),
    )
    table.add_row(
        "mean pair (HB: all pairs of a domain; NIC: pairs with traffic)",
        "",
        _bytes(r["mean_pair_bytes_hb"]),
        _bytes(r["mean_pair_bytes_nic"]),
    )
    return table


# over 80 lines only by its 39 typer options (the body is under 60)
def traffic_cmd(
    model: ModelOpt,
    gpus: GpusOpt,
    global_batch: GlobalBatchOpt,
    system: SystemOpt = "dgx-a100",
    tp: int = 1,
    pp: int = 1,
    dp: DpOpt = None,
    interleave: InterleaveOpt = 1,
    micro_batch: int = 1,
    recompute: RecomputeOpt = "none",
    sequence_parallel: SequenceParallelOpt = False,
    zero: ZeroOpt = 0,
    ep: EpOpt = 1,
    grad_reduce_bytes: Annotated[
        int, typer.Option(help="bytes per reduced gradient element: 2 | 4")
    ] = 4,
    hb_domain: HbDomainOpt = None,
    placement: Annotated[str, typer.Option(help="megatron | rail-aligned")] = "megatron",
    order: Annotated[
        str | None,
        typer.Option(help="rank order, fastest first, e.g. tp,dp,pp (Megatron) or pp,dp,tp"),
    ] = None,
    heatmap: Annotated[
        str | None, typer.Option(help="write a heatmap FILE.png or FILE.svg")
    ] = None,
    first_gpus: Annotated[int, typer.Option(help="GPUs shown in the heatmap")] = 64,
    bars: Annotated[
        str | None, typer.Option(help="write per-kind bar charts FILE.png or FILE.svg")
    ] = None,
    export: Annotated[
        str | None, typer.Option(help="write src,dst,kind,bytes to FILE.csv or FILE.parquet")
    ] = None,
    as_json: JsonOpt = False,
    cp: CpOpt = 1,
    first_stage_layers: FirstStageLayersOpt = 0,
    last_stage_layers: LastStageLayersOpt = 0,
    zero_schedule: ZeroScheduleOpt = "micro_batch",
) -> None:
    """Bytes every GPU pair exchanges in one iteration, by kind (TP, PP, DP, EP, CP)."""
    from railplan.cli.core import data_parallel
    from railplan.placement import build_placement
    from railplan.specs import load_model
    from railplan.specs.build import build_strategy, build_system
    from railplan.traffic import EXPORT_SUFFIXES, stats, traffic
    from railplan.traffic_plots import FIGURE_SUFFIXES, check_suffix

    dp = data_parallel(gpus, tp, cp, pp, dp)
    _positive("first_gpus", first_gpus)
    _positive("dp", dp)
    if grad_reduce_bytes not in (2, 4):
        raise RailplanError("grad_reduce_bytes", "must be 2 or 4")
    # check output paths before the work, so a typo costs nothing
    for field, path, suffixes in (
        ("heatmap", heatmap, FIGURE_SUFFIXES),
        ("bars", bars, FIGURE_SUFFIXES),
        ("export", export, EXPORT_SUFFIXES),
    ):
        if path:
            check_suffix(path, suffixes, field)
    m = load_model(model)
    sy = build_system(system, hb_domain, None, None, None)
    strat = build_strategy(
        tp=tp,
        pp=pp,
        dp=dp,
        interleave=interleave,
        micro_batch=micro_batch,
        global_batch=global_batch,
        recompute=recompute,
        sequence_parallel=sequence_parallel,
        zero=zero,
        ep=ep,
        grad_reduce_bytes=grad_reduce_bytes,
        cp=cp,
        first_stage_layers=first_stage_layers,
        last_stage_layers=last_stage_layers,
        zero_schedule=zero_schedule,
    )
    if strat.gpus != gpus:
        raise RailplanError(
            "gpus",
            f"tp·cp·pp·dp = {strat.gpus} but gpus = {gpus}; tp·cp·pp·dp must equal gpus",
        )
    p = build_placement(
        placement, tp, pp, dp, sy.hb_domain, order, interleave, m.tied_embeddings, cp
    )
    t = traffic(m, strat, p)
    r = stats(t)
    title = f"{m.name} on {gpus} GPUs, K={sy.hb_domain}, placement {','.join(p.order)}"
    files = _write_files(t, r, m.name, title, first_gpus, heatmap, bars, export)
    strategy = {
        "strategy": strat.model_dump(),
        "placement": {"kind": placement, "order": list(p.order)},
    }
    _print_traffic(m.name, sy, strategy, r.to_dict(), files, title, as_json)


def _write_files(
    t: Any,
    r: Any,
    model: str,
    title: str,
    first_gpus: int,
    heatmap: str | None,
    bars: str | None,
    export: str | None,
) -> dict[str, str]:
    """The heatmap, kind bars and matrix export asked for: {kind: path written}."""
    from railplan.traffic import export as export_file
    from railplan.traffic_plots import heatmap as draw
    from railplan.traffic_plots import kind_bars

    files: dict[str, str] = {}
    if heatmap:
        files["heatmap"] = str(draw(t, heatmap, first_gpus, title))
    if bars:
        files["bars"] = str(kind_bars([r], [model], bars, title))
    if export:
        files["export"] = str(export_file(t, export))
    return files


def _print_traffic(
    model: str,
    sy: Any,
    strategy: dict[str, Any],
    stats_dict: dict[str, Any],
    files: dict[str, str],
    title: str,
    as_json: bool,
) -> None:
    """`traffic`'s output: JSON, or the statistics table and the files written."""
    from railplan.cli.core import print_json

    if as_json:
        out: dict[str, Any] = {"model": model, "system": sy.name, "hb_domain": sy.hb_domain}
        out |= strategy | {
            "pair_convention": "unordered pairs i<j of distinct GPUs, bytes of both directions",
        }
        print_json(out | stats_dict | {"files": files})
        return
    console = Console()
    console.print(stats_table(f"Traffic of one iteration: {title}", stats_dict))
    for kind, path in files.items():
        console.print(f"wrote {kind}: {path}")


def reproduce_traffic(
    as_json: JsonOpt = False,
    figures: Annotated[
        str | None, typer.Option(help="folder to write the Figs 2-4 charts and heatmaps")
    ] = None,
) -> None:
    """The paper's traffic figures (Figs 2-4): our numbers beside the paper's."""
    from railplan.cli.core import print_json
    from railplan.reproduce.traffic import reproduce, write_figures

    if figures is not None and not Path(figures).is_dir():
        raise RailplanError("figures", f"folder {figures!r} does not exist")
    result = reproduce()
    if figures is not None:
        result["files"] = [str(f) for f in write_figures(Path(figures))]
    if as_json:
        print_json(result)
        return
    table = Table(title="Rail-only paper, traffic figures: ours beside the paper's")
    for col in ("figure", "quantity", "paper", "ours", "holds"):
        table.add_column(col, justify="right" if col in ("ours", "holds") else "left")
    for c in result["claims"]:
        ours = f"{c['ours']:.4g} {c['unit']}" if c["unit"] else f"{c['ours']:.4g}"
        holds = {True: "yes", False: "[red]no[/red]", None: "–"}[c["holds"]]
        table.add_row(c["figure"], c["quantity"], c["paper"], ours, holds)
    console = Console()
    console.print(table)
    for f in result.get("files", []):
        console.print(f"wrote {f}")


def register(app: typer.Typer, reproduce_app: typer.Typer) -> None:
    """Add the traffic commands to the main app and the `reproduce` group."""
    app.command("traffic")(traffic_cmd)
    reproduce_app.command("traffic")(reproduce_traffic)
