"""CLI commands of the traffic part: `railplan traffic` and `railplan reproduce traffic`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from railplan.cli.options import (
    CpOpt,
    EpDispatchOpt,
    FirstStageLayersOpt,
    Fp8DispatchOpt,
    Fp8ParamGatherOpt,
    HbDomainOpt,
    JsonOpt,
    LastStageLayersOpt,
    PipelineScheduleOpt,
    PrecisionOpt,
    RecomputeModulesOpt,
    RecomputeNumLayersOpt,
    RouterDtypeOpt,
    TrainingOptions,
    ZeroScheduleOpt,
    modules_of,
    with_option_groups,
)
from railplan.cli.output import print_json, table
from railplan.errors import RailplanError
from railplan.units import fmt_bytes as _bytes

if TYPE_CHECKING:
    from railplan.specs import Strategy, System
    from railplan.traffic.matrix import Traffic, TrafficStats
    from railplan.traffic.placement import Placement


def stats_table(title: str, r: dict[str, Any]) -> Table:
    """Rich table of one `TrafficStats.to_dict()`."""
    from railplan.traffic.matrix import KINDS

    # CP rows only when the run has context parallelism (the other kinds always show)
    kinds = [k for k in KINDS if k != "cp" or r["bytes_by_kind"][k]]
    rows = [
        (
            f"{k.upper()} bytes",
            f"{_bytes(r['bytes_by_kind'][k])} ({r['share_by_kind'][k]:.2%})",
            _bytes(r["hb_bytes_by_kind"][k]),
            _bytes(r["nic_bytes_by_kind"][k]),
        )
        for k in kinds
    ]
    rows.append(
        ("all bytes", _bytes(r["total_bytes"]), _bytes(r["hb_bytes"]), _bytes(r["nic_bytes"]))
    )
    rows.append(("NIC bytes crossing rails", _bytes(r["nic_cross_rail_bytes"]), "", ""))
    pairs = f"{r['pairs_with_traffic']:,} of {r['pairs_total']:,}"
    rows.append(
        ("GPU pairs with traffic", f"{pairs} ({r['pairs_with_traffic_fraction']:.4%})", "", "")
    )
    for k in kinds:
        rows.append(
            (f"  pairs carrying {k.upper()}", f"{r['pairs_by_kind_fraction'][k]:.4%}", "", "")
        )
    for label, key in (
        ("largest pair (both directions)", "max_pair_bytes"),
        ("mean pair (HB: all pairs of a domain; NIC: pairs with traffic)", "mean_pair_bytes"),
    ):
        rows.append((label, "", _bytes(r[f"{key}_hb"]), _bytes(r[f"{key}_nic"])))
    columns = ("quantity", "value", "HB domain", "NIC domain")
    return table(title, columns, rows, left=("quantity",))


def register(app: typer.Typer, reproduce_app: typer.Typer) -> None:
    """Add the traffic commands to the main app and the `reproduce` group."""
    app.command("traffic")(traffic_cmd)
    reproduce_app.command("traffic")(reproduce_traffic)


@with_option_groups
def traffic_cmd(
    training: TrainingOptions,
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
    first_gpus: Annotated[
        int | None, typer.Option(help="GPUs shown in the heatmap (default 64, at most 2,048)")
    ] = None,
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
    pipeline_schedule: PipelineScheduleOpt = "1f1b",
    ep_dispatch: EpDispatchOpt = "alltoall",
    precision: PrecisionOpt = "bf16",
    fp8_param_gather: Fp8ParamGatherOpt = False,
    fp8_dispatch: Fp8DispatchOpt = False,
    router_dtype: RouterDtypeOpt = "bf16",
    recompute_modules: RecomputeModulesOpt = None,
    recompute_num_layers: RecomputeNumLayersOpt = 0,
) -> None:
    """Bytes every GPU pair exchanges in one iteration, by kind (TP, PP, DP, EP, CP)."""
    from railplan.specs import load_model
    from railplan.specs.build import build_system
    from railplan.traffic.matrix import stats, traffic
    from railplan.traffic.placement import build_placement

    t = training
    first_gpus = heatmap_gpus(first_gpus, heatmap)
    dp = _checked_dp(t.gpus, t.tp, t.pp, cp, t.dp, first_gpus, grad_reduce_bytes)
    _check_outputs(heatmap, bars, export)  # before the work, so a typo costs nothing
    m = load_model(t.model)
    sy = build_system(t.system, hb_domain, None, None, None)
    strat = _strategy(
        t.gpus,
        **t.strategy_fields(dp),
        grad_reduce_bytes=grad_reduce_bytes,
        cp=cp,
        first_stage_layers=first_stage_layers,
        last_stage_layers=last_stage_layers,
        zero_schedule=zero_schedule,
        pipeline_schedule=pipeline_schedule,
        ep_dispatch=ep_dispatch,
        precision=precision,
        fp8_param_gather=fp8_param_gather,
        fp8_dispatch=fp8_dispatch,
        router_dtype=router_dtype,
        recompute_modules=modules_of(recompute_modules, t.recompute),
        recompute_num_layers=recompute_num_layers,
    )
    # DualPipeV's V turns on the last rank: its pipeline pairs are 1F1B's (no wrap-around).
    wraps = 1 if strat.pipeline_schedule == "dualpipev" else t.interleave
    p = build_placement(
        placement, t.tp, t.pp, dp, sy.hb_domain, order, wraps, m.tied_embeddings, cp
    )
    # a spinner on stderr (terminals only): a million-GPU matrix takes tens of seconds
    with Console(stderr=True).status(f"traffic of {t.gpus:,} GPUs"):
        matrix = traffic(m, strat, p)
        r = stats(matrix)
        title = f"{m.name} on {t.gpus} GPUs, K={sy.hb_domain}, placement {','.join(p.order)}"
        files = _write_files(matrix, r, m.name, title, first_gpus, heatmap, bars, export)
    if as_json:
        head = _json_head(m.name, sy, strat, placement, p)
        print_json(head | r.to_dict() | {"files": files, "notes": list(matrix.notes)})
        return
    _print_stats(title, r, files, matrix.notes)


def _print_stats(
    title: str, r: TrafficStats, files: dict[str, str], notes: tuple[str, ...] = ()
) -> None:
    """The statistics table, the files written and the matrix's notes."""
    console = Console()
    console.print(stats_table(f"Traffic of one iteration: {title}", r.to_dict()))
    for kind, path in files.items():
        console.print(f"wrote {kind}: {path}")
    for note in notes:
        console.print(f"note: {note}", markup=False)


def _checked_dp(
    gpus: int, tp: int, pp: int, cp: int, dp: int | None, first_gpus: int, grad_reduce_bytes: int
) -> int:
    """The job's data-parallel degree, after checking the sizes `traffic` is given."""
    from railplan.cli.core import check_positive, job_dp

    check_positive(gpus=gpus, tp=tp, pp=pp, cp=cp, first_gpus=first_gpus)
    dp = job_dp(gpus, tp, pp, cp, dp)
    check_positive(dp=dp)
    if grad_reduce_bytes not in (2, 4):
        raise RailplanError("grad_reduce_bytes", "must be 2 or 4")
    return dp


def _strategy(gpus: int, **fields: Any) -> Strategy:
    """The strategy of `fields`, which must use exactly `gpus` GPUs."""
    from railplan.specs.build import build_strategy

    strat = build_strategy(**fields)
    if strat.gpus != gpus:
        raise RailplanError(
            "gpus",
            f"tp·cp·pp·dp = {strat.gpus} but gpus = {gpus}; tp·cp·pp·dp must equal gpus",
        )
    return strat


def _json_head(
    model: str, sy: System, strat: Strategy, placement: str, p: Placement
) -> dict[str, Any]:
    """What `traffic --json` prints before the statistics: the job and the pair convention."""
    return {
        "model": model,
        "system": sy.name,
        "hb_domain": sy.hb_domain,
        "strategy": strat.model_dump(),
        "placement": {"kind": placement, "order": list(p.order)},
        "pair_convention": "unordered pairs i<j of distinct GPUs, bytes of both directions",
    }


def heatmap_gpus(first_gpus: int | None, heatmap: str | None) -> int:
    """--first-gpus: 64 by default; refused without --heatmap (it would change nothing) and
    beyond the heatmap's bound (`plots.MAX_HEATMAP_GPUS`), before any work."""
    from railplan.limits import check_int
    from railplan.traffic.plots import DEFAULT_HEATMAP_GPUS, MAX_HEATMAP_GPUS

    if first_gpus is None:
        return DEFAULT_HEATMAP_GPUS
    if heatmap is None:
        raise RailplanError("first_gpus", "takes effect only with --heatmap FILE")
    return check_int("first_gpus", first_gpus, 2, MAX_HEATMAP_GPUS)


def _check_outputs(heatmap: str | None, bars: str | None, export: str | None) -> None:
    """Check the suffixes of the files `traffic` will write, and that they differ."""
    from railplan.cli.output import distinct_outputs
    from railplan.traffic.matrix import EXPORT_SUFFIXES
    from railplan.traffic.plots import FIGURE_SUFFIXES, check_suffix

    distinct_outputs(heatmap=heatmap, bars=bars, export=export)
    if heatmap:
        check_suffix(heatmap, FIGURE_SUFFIXES, "heatmap")
    if bars:
        check_suffix(bars, FIGURE_SUFFIXES, "bars")
    if export:
        check_suffix(export, EXPORT_SUFFIXES, "export")


def _write_files(
    t: Traffic,
    r: TrafficStats,
    model: str,
    title: str,
    first_gpus: int,
    heatmap: str | None,
    bars: str | None,
    export: str | None,
) -> dict[str, str]:
    """Draw the heatmap and bar charts and export the pairs, as asked; the files written."""
    from railplan.traffic.matrix import export as export_file
    from railplan.traffic.plots import heatmap as draw
    from railplan.traffic.plots import kind_bars

    files: dict[str, str] = {}
    if heatmap:
        files["heatmap"] = str(draw(t, heatmap, first_gpus, title))
    if bars:
        files["bars"] = str(kind_bars([r], [model], bars, title))
    if export:
        files["export"] = str(export_file(t, export))
    return files


def reproduce_traffic(
    as_json: JsonOpt = False,
    figures: Annotated[
        str | None, typer.Option(help="folder to write the Figs 2-4 charts and heatmaps")
    ] = None,
) -> None:
    """The paper's traffic figures (Figs 2-4): our numbers beside the paper's."""
    from railplan.reproduce.traffic import reproduce, write_figures

    if figures is not None and not Path(figures).is_dir():
        raise RailplanError("figures", f"folder {figures!r} does not exist")
    if figures is not None:  # a folder that takes new files (not read-only, not /proc)
        from railplan.fileio import check_target

        check_target(Path(figures) / "railplan-figure.png", "figures")
    result = reproduce()
    if figures is not None:
        result["files"] = [str(f) for f in write_figures(Path(figures))]
    if as_json:
        print_json(result)
        return
    holds = {True: "yes", False: "[red]no[/red]", None: "–"}
    rows = [
        (
            c["figure"],
            c["quantity"],
            c["paper"],
            f"{c['ours']:.4g} {c['unit']}" if c["unit"] else f"{c['ours']:.4g}",
            holds[c["holds"]],
        )
        for c in result["claims"]
    ]
    console = Console()
    console.print(
        table(
            "Rail-only paper, traffic figures: ours beside the paper's",
            ("figure", "quantity", "paper", "ours", "holds"),
            rows,
            left=("figure", "quantity", "paper"),
        )
    )
    for f in result.get("files", []):
        console.print(f"wrote {f}")
