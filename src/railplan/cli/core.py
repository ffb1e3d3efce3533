"""CLI commands of the core performance model: estimate, validate, catalog."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from railplan.cli.options import (
    AttentionOpt,
    CpOpt,
    DpOpt,
    EpOpt,
    FirstStageLayersOpt,
    GlobalBatchOpt,
    GpuMemoryGibOpt,
    GpusOpt,
    GradAccFusionOpt,
    GradReduceBytesOpt,
    HbDomainOpt,
    HbTbpsOpt,
    InterleaveOpt,
    JsonOpt,
    LastStageLayersOpt,
    ModelOpt,
    NetworkOpt,
    NicGbpsOpt,
    NicsPerGpuOpt,
    OptimizerStateOpt,
    OverlapDpOpt,
    OverlapP2pOpt,
    OverlapTpOpt,
    OversubscriptionOpt,
    PrecisionOpt,
    RecomputeOpt,
    SequenceParallelOpt,
    SystemOpt,
    TpCommOverlapOpt,
    ZeroOpt,
    ZeroScheduleOpt,
)
from railplan.errors import RailplanError, near_multiples

if TYPE_CHECKING:
    pass


def print_json(data: Any) -> None:
    """Print `data` as JSON; a non-finite number (which JSON cannot hold) is an error naming its
    field, never `Infinity` or `NaN` in the output."""
    try:
        text = json.dumps(data, indent=2, default=float, allow_nan=False)
    except ValueError:
        field = _non_finite_field(data, "output") or "output"
        raise RailplanError(
            field, "is not a finite number (inf or nan); check the inputs that feed it"
        ) from None
    typer.echo(text)


def _non_finite_field(data: Any, path: str) -> str | None:
    """The dotted path of the first inf/nan number in `data`, or None."""
    if isinstance(data, dict):
        items: list[tuple[str, Any]] = [(f"{path}.{k}", v) for k, v in data.items()]
    elif isinstance(data, list | tuple):
        items = [(f"{path}[{i}]", v) for i, v in enumerate(data)]
    else:
        if isinstance(data, str | bool) or data is None:
            return None
        try:
            return None if math.isfinite(float(data)) else path
        except (TypeError, ValueError):
            return None
    for sub, value in items:
        found = _non_finite_field(value, sub)
        if found is not None:
            return found
    return None


def data_parallel(gpus: int, tp: int, cp: int, pp: int, dp: int | None) -> int:
    """dp as given, or the GPUs left after tp·cp·pp (which must divide them)."""
    if gpus <= 0:
        raise RailplanError("gpus", "must be a positive integer")
    for field, val in (("tp", tp), ("pp", pp), ("cp", cp)):
        if val <= 0:
            raise RailplanError(field, "must be a positive integer")
    if dp is None:
        if gpus % (tp * cp * pp):
            raise RailplanError("gpus", f"must be a multiple of tp·cp·pp = {tp * cp * pp}")
        dp = gpus // (tp * cp * pp)
    return dp


def _estimate_table(m: Any, sy: Any, net: Any, strat: Any, e: Any, gpus: int) -> Table:
    """The table `estimate` prints: time, MFU, memory and time breakdowns, layout warnings."""
    table = Table(
        title=f"{m.name} on {gpus} × {sy.gpu.name} ({sy.name}, K={sy.hb_domain}, "
        f"{net.architecture}; {strat.attention} attention, {strat.precision})"
    )
    table.add_column("quantity")
    table.add_column("value", justify="right")
    table.add_row("iteration time", f"{e.iteration_s:.3f} s")
    table.add_row("MFU / HFU", f"{e.mfu:.1%} / {e.hfu:.1%}")
    table.add_row("model TFLOP/s per GPU", f"{e.model_tflops_per_gpu:.1f}")
    table.add_row(
        "memory per GPU",
        f"{e.memory_gib_per_gpu:.1f} GiB of {sy.gpu.memory_gib:g}"
        + ("" if e.fits else "  [red]does not fit[/red]"),
    )
    for k, v in e.memory_breakdown_gib.items():
        if k == "zero3_gathered" and strat.zero < 3:
            continue  # only ZeRO-3 gathers layers
        table.add_row(f"  {k}", f"{v:.1f} GiB")
    for k, v in e.breakdown_s.items():
        table.add_row(f"time: {k}", f"{v:.3f} s ({v / e.iteration_s:.1%})")
    for kind in e.straddling_groups():
        g = e.group_layout[kind]
        table.add_row(
            f"[yellow]{kind} groups: uneven or cross-rail over HB domains[/yellow]",
            f"fewest {g['fewest_per_domain']} of {g['members']} in a domain, "
            f"up to {g['domains']} domains" + (", cross-rail" if g["cross_rail"] else ""),
        )
    if gpus % sy.hb_domain:
        table.add_row(
            "[yellow]partial HB domain[/yellow]",
            f"{gpus:,} is not a multiple of K={sy.hb_domain}; whole domains: "
            f"{near_multiples(gpus, sy.hb_domain)} GPUs",
        )
    return table


def estimate(
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
    overlap_dp: OverlapDpOpt = True,
    grad_accumulation_fusion: GradAccFusionOpt = True,
    network: NetworkOpt = "rail-optimized",
    oversubscription: OversubscriptionOpt = None,
    hb_domain: HbDomainOpt = None,
    hb_tbps: HbTbpsOpt = None,
    nic_gbps: NicGbpsOpt = None,
    nics_per_gpu: NicsPerGpuOpt = None,
    as_json: JsonOpt = False,
    cp: CpOpt = 1,
    first_stage_layers: FirstStageLayersOpt = 0,
    last_stage_layers: LastStageLayersOpt = 0,
    zero_schedule: ZeroScheduleOpt = "micro_batch",
    attention: AttentionOpt = "flash",
    precision: PrecisionOpt = "bf16",
    gpu_memory_gib: GpuMemoryGibOpt = None,
    grad_reduce_bytes: GradReduceBytesOpt = 4,
    optimizer_state: OptimizerStateOpt = "fp32",
    overlap_tp: OverlapTpOpt = True,
    tp_comm_overlap: TpCommOverlapOpt = True,
    overlap_p2p: OverlapP2pOpt = True,
) -> None:
    """Predict one training iteration: time, MFU/HFU, memory, and where the time goes."""
    from railplan.estimate import estimate as run
    from railplan.specs import load_model
    from railplan.specs.build import build_network, build_strategy, build_system

    dp = data_parallel(gpus, tp, cp, pp, dp)
    m = load_model(model)
    sy = build_system(system, hb_domain, hb_tbps, nic_gbps, nics_per_gpu, gpu_memory_gib)
    net = build_network(network, oversubscription)
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
        overlap_dp=overlap_dp,
        ep=ep,
        grad_accumulation_fusion=grad_accumulation_fusion,
        cp=cp,
        first_stage_layers=first_stage_layers,
        last_stage_layers=last_stage_layers,
        zero_schedule=zero_schedule,
        attention=attention,
        precision=precision,
        grad_reduce_bytes=grad_reduce_bytes,
        optimizer_state=optimizer_state,
        overlap_tp=overlap_tp,
        tp_comm_overlap=tp_comm_overlap,
        overlap_p2p=overlap_p2p,
    )
    e = run(m, sy, strat, net, gpus=gpus)
    if as_json:
        print_json(e.to_dict())
        return
    Console().print(_estimate_table(m, sy, net, strat, e, gpus))


def _table(title: str, columns: tuple[str, ...], rows: Any, left: int = 1) -> Table:
    """A rich table: the first `left` columns left-aligned, the others right-aligned."""
    table = Table(title=title)
    for n, col in enumerate(columns):
        table.add_column(col, justify="left" if n < left else "right")
    for row in rows:
        table.add_row(*row)
    return table


def _print_paper_rows(console: Console, v: dict[str, Any]) -> None:
    """The 2021-22 runs of `validate`: rows, the Korthikanti layer, summaries, same pipeline."""
    rows = (
        (
            r["source"],
            r["label"],
            r["metric"],
            f"{r['measured']:.2f}",
            f"{r['predicted']:.2f}",
            f"{r['error_pct']:+.1f} %",
        )
        for r in v["rows"]
    )
    cols: tuple[str, ...] = ("source", "run", "metric", "measured", "predicted", "error")
    console.print(_table("Validation against published runs (DGX A100)", cols, rows, left=3))
    layer = (
        (
            r["experiment"],
            f"{r['measured_forward_ms']:.1f} ms",
            f"{r['predicted_forward_ms']:.2f} ms",
            f"{r['measured_backward_ms']:.1f} ms",
            f"{r['predicted_backward_ms']:.2f} ms",
        )
        for r in v["layer_korthikanti2022_table4"]
    )
    title = "Diagnostic: one GPT-22B layer, tp 8, micro-batch 4 (Korthikanti Table 4)"
    cols = ("experiment", "fwd measured", "fwd predicted", "bwd measured", "bwd predicted")
    console.print(_table(title, cols, layer))
    g = v["goal"]
    for key, name in (
        ("korthikanti2022", "Korthikanti 2022 iteration time"),
        ("narayanan2021", "Narayanan 2021 TFLOP/s per GPU"),
        ("all", "all rows"),
    ):
        s = v[key]
        console.print(
            f"{name}: mean |error| {s['mean_abs_pct']:.2f} %, max "
            f"{s['max_abs_pct']:.2f} % over {s['rows']} rows "
            f"(goal: mean ≤ {g['mean_abs_pct']:g} %, max ≤ {g['max_abs_pct']:g} %)"
        )
    same = (
        (
            r["model"],
            f"{r['korthikanti2022_measured_s']:.2f}",
            f"{r['narayanan2021_implied_s']:.2f}",
            f"{r['measured_ratio']:.3f}",
            f"{r['korthikanti2022_predicted_s']:.2f}",
            f"{r['narayanan2021_predicted_s']:.2f}",
        )
        for r in v["same_pipeline_both_papers"]
    )
    title = "Same pipeline in both papers (only dp and the year differ): seconds per iteration"
    cols = ("model", "2022 measured", "2021 implied", "2021 / 2022", "ours 2022", "ours 2021")
    console.print(_table(title, cols, same))


def _print_modern_rows(console: Console, v: dict[str, Any]) -> None:
    """The 2023-24 runs of `validate`, their summaries by source, and Calculon's figures."""
    rows = (
        (
            r["id"],
            f"{r['measured_s']:.2f}",
            f"{r['predicted_s']:.2f}",
            f"{r['error_pct']:+.1f} %",
            f"{r['memory_gib_per_gpu']:.1f} GiB",
            "yes" if r["fits"] else "no",
        )
        for r in v["modern_runs"]["rows"]
    )
    title = (
        "Modern runs (2023-24 stacks, data/validation/modern_runs.csv): seconds per "
        "iteration; accuracy is not tuned here"
    )
    cols = ("run", "measured", "predicted", "error", "memory", "fits")
    console.print(_table(title, cols, rows))
    for src, s in v["modern_runs"]["by_source"].items():
        console.print(
            f"modern runs, {src}: mean |error| {s['mean_abs_pct']:.2f} %, max "
            f"{s['max_abs_pct']:.2f} % over {s['rows']} rows"
        )
    c = v["calculon_korthikanti"]
    console.print(
        f"Calculon on the Korthikanti rows: mean {c['mean_abs_pct']} %, max {c['max_abs_pct']} %"
    )


def validate(
    as_json: JsonOpt = False,
    commands: Annotated[
        bool,
        typer.Option(
            "--commands",
            help="print, per modern run, the railplan estimate command that predicts it "
            "(every software knob spelled out; model files under examples/modern)",
        ),
    ] = False,
) -> None:
    """Predict published runs (2021-22 Megatron-LM and 2023-24 stacks); print predicted vs
    measured and the errors."""
    from railplan.modern_validation import modern_commands
    from railplan.validation import validate as run

    if commands:
        rows = modern_commands()
        if as_json:
            print_json([{k: r[k] for k in ("id", "source", "command")} for r in rows])
            return
        for r in rows:
            print(f"# {r['id']} ({r['source']})\n{r['command']}")
        return

    v = run()
    if as_json:
        print_json(v)
        return
    console = Console()
    _print_paper_rows(console, v)
    _print_modern_rows(console, v)


def catalog(
    kind: Annotated[str, typer.Argument(help="models | gpus | systems")] = "models",
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """List the catalog's models, GPUs or systems with their sources."""
    from railplan.specs import names
    from railplan.specs.build import choice
    from railplan.specs.catalog import _catalog

    choice("kind", kind, ("models", "gpus", "systems"))
    entries = {n: _catalog(kind)[n] for n in names(kind)}
    if as_json:
        print_json(entries)
        return
    table = Table(title=f"railplan catalog: {kind}")
    table.add_column("name")
    table.add_column("spec")
    for n, e in entries.items():
        table.add_row(n, ", ".join(f"{k}={v}" for k, v in e.items() if k != "source"))
    Console().print(table)


def register(app: typer.Typer, reproduce_app: typer.Typer) -> None:
    """Add the core commands."""
    for command in (estimate, validate, catalog):
        app.command()(command)
