"""CLI commands of the core performance model: estimate, validate, catalog."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from railplan.cli.options import (
    AttentionOpt,
    CpOpt,
    CrossEntropyOpt,
    DeferEmbeddingWgradOpt,
    EpDispatchOpt,
    FirstStageLayersOpt,
    Fp8DispatchOpt,
    Fp8ParamGatherOpt,
    GpuMemoryGibOpt,
    GradAccFusionOpt,
    GradReduceBytesOpt,
    HardwareOptions,
    JsonOpt,
    LastStageLayersOpt,
    MicrobatchGroupOpt,
    OptimizerStateOpt,
    OverlapBackwardGatherOpt,
    OverlapDpOpt,
    OverlapEpOpt,
    OverlapP2pOpt,
    OverlapTpOpt,
    PipelineScheduleOpt,
    PrecisionOpt,
    RecomputeModulesOpt,
    RecomputeNumLayersOpt,
    RouterDtypeOpt,
    SharedExpertOverlapOpt,
    TpCommOverlapOpt,
    TrainingOptions,
    WgradDeferralLimitOpt,
    ZeroScheduleOpt,
    modules_of,
    with_option_groups,
)
from railplan.cli.output import print_json, quantity_table, table
from railplan.errors import RailplanError, near_multiples
from railplan.limits import MAX_GPUS, check_int

if TYPE_CHECKING:
    from railplan.perf.estimate import Estimate
    from railplan.specs import Model, Network, Strategy, System


def register(app: typer.Typer, reproduce_app: typer.Typer) -> None:
    """Add the core commands."""
    app.command()(estimate)
    app.command()(validate)
    app.command()(catalog)


def check_positive(**values: int) -> None:
    """Raise a RailplanError naming the first of `values` (GPU counts and parallel degrees)
    that is not an integer in [1, MAX_GPUS]: an absurd size is a one-line error before any
    array is sized by it."""
    for field, value in values.items():
        check_int(field, value, 1, MAX_GPUS)


def job_dp(gpus: int, tp: int, pp: int, cp: int, dp: int | None) -> int:
    """The data-parallel degree of a job: `dp` if given, else gpus / (tp·cp·pp), which must be
    whole."""
    if dp is None:
        if gpus % (tp * cp * pp):
            raise RailplanError("gpus", f"must be a multiple of tp·cp·pp = {tp * cp * pp}")
        dp = gpus // (tp * cp * pp)
    return dp


@with_option_groups
def estimate(
    training: TrainingOptions,
    overlap_dp: OverlapDpOpt = True,
    grad_accumulation_fusion: GradAccFusionOpt = True,
    hardware: HardwareOptions = HardwareOptions(),
    as_json: JsonOpt = False,
    cp: CpOpt = 1,
    first_stage_layers: FirstStageLayersOpt = 0,
    last_stage_layers: LastStageLayersOpt = 0,
    zero_schedule: ZeroScheduleOpt = "micro_batch",
    overlap_backward_gather: OverlapBackwardGatherOpt = True,
    overlap_ep: OverlapEpOpt = False,
    ep_dispatch: EpDispatchOpt = "alltoall",
    pipeline_schedule: PipelineScheduleOpt = "1f1b",
    microbatch_group: MicrobatchGroupOpt = 0,
    recompute_modules: RecomputeModulesOpt = None,
    recompute_num_layers: RecomputeNumLayersOpt = 0,
    attention: AttentionOpt = "flash",
    cross_entropy: CrossEntropyOpt = "fused",
    precision: PrecisionOpt = "bf16",
    fp8_param_gather: Fp8ParamGatherOpt = False,
    fp8_dispatch: Fp8DispatchOpt = False,
    router_dtype: RouterDtypeOpt = "bf16",
    shared_expert_overlap: SharedExpertOverlapOpt = False,
    gpu_memory_gib: GpuMemoryGibOpt = None,
    grad_reduce_bytes: GradReduceBytesOpt = 4,
    optimizer_state: OptimizerStateOpt = "fp32",
    overlap_tp: OverlapTpOpt = True,
    tp_comm_overlap: TpCommOverlapOpt = True,
    overlap_p2p: OverlapP2pOpt = True,
    defer_embedding_wgrad: DeferEmbeddingWgradOpt = False,
    wgrad_deferral_limit: WgradDeferralLimitOpt = 0,
) -> None:
    """Predict one training iteration: time, MFU/HFU, memory, and where the time goes."""
    from railplan.perf.estimate import estimate as run
    from railplan.specs import load_model
    from railplan.specs.build import build_strategy

    t = training
    check_positive(gpus=t.gpus, tp=t.tp, pp=t.pp, cp=cp)
    dp = job_dp(t.gpus, t.tp, t.pp, cp, t.dp)
    m = load_model(t.model)
    sy = hardware.system(t.system, gpu_memory_gib)
    net = hardware.network_spec()
    hardware.check_fabric(sy, t.gpus)
    strat = build_strategy(
        **t.strategy_fields(dp),
        overlap_dp=overlap_dp,
        grad_accumulation_fusion=grad_accumulation_fusion,
        cp=cp,
        first_stage_layers=first_stage_layers,
        last_stage_layers=last_stage_layers,
        zero_schedule=zero_schedule,
        overlap_backward_gather=overlap_backward_gather,
        overlap_ep=overlap_ep,
        ep_dispatch=ep_dispatch,
        pipeline_schedule=pipeline_schedule,
        microbatch_group=microbatch_group,
        recompute_modules=modules_of(recompute_modules, t.recompute),
        recompute_num_layers=recompute_num_layers,
        attention=attention,
        cross_entropy=cross_entropy,
        precision=precision,
        fp8_param_gather=fp8_param_gather,
        fp8_dispatch=fp8_dispatch,
        router_dtype=router_dtype,
        shared_expert_overlap=shared_expert_overlap,
        grad_reduce_bytes=grad_reduce_bytes,
        optimizer_state=optimizer_state,
        overlap_tp=overlap_tp,
        tp_comm_overlap=tp_comm_overlap,
        overlap_p2p=overlap_p2p,
        defer_embedding_wgrad=defer_embedding_wgrad,
        wgrad_deferral_limit=wgrad_deferral_limit,
    )
    e = run(m, sy, strat, net, gpus=t.gpus)
    if as_json:
        warnings = [{"warning": w, "text": text} for w, text in _warnings(e, sy, strat, t.gpus)]
        print_json(e.to_dict() | {"warnings": warnings})
        return
    Console().print(_estimate_table(e, m, sy, net, strat, t.gpus))


def _warnings(e: Estimate, sy: System, strat: Strategy, gpus: int) -> list[tuple[str, str]]:
    """What the estimate's table warns about, and `--json` lists under `warnings`: groups that
    straddle HB domains, an MFU beyond the published runs of its GPU or above 100 %, a partial
    HB domain."""
    from railplan.reproduce.modern_validation import extrapolation

    out = []
    for kind in e.straddling_groups():
        g = e.group_layout[kind]
        out.append(
            (
                f"{kind} groups: uneven or cross-rail over HB domains",
                f"fewest {g['fewest_per_domain']} of {g['members']} in a domain, "
                f"up to {g['domains']} domains" + (", cross-rail" if g["cross_rail"] else ""),
            )
        )
    beyond = extrapolation(sy.gpu.name, strat.precision, e.mfu)
    if beyond:
        out.append(("beyond published runs", beyond))
    if e.mfu > 1.0:
        out.append(
            (
                "MFU above 100 %",
                "MFU counts the full s² attention products (Megatron's convention), which a "
                "causal kernel does half of: at long sequences the count exceeds what ran",
            )
        )
    if gpus % sy.hb_domain:
        out.append(
            (
                "partial HB domain",
                f"{gpus:,} is not a multiple of K={sy.hb_domain}; whole domains: "
                f"{near_multiples(gpus, sy.hb_domain)} GPUs, or --hb-domain N for N GPUs of "
                "each domain" + (" (NeMo's GB200 jobs: 64 of 72)" if sy.hb_domain == 72 else ""),
            )
        )
    return out


def _estimate_table(
    e: Estimate, m: Model, sy: System, net: Network, strat: Strategy, gpus: int
) -> Table:
    """The table `railplan estimate` prints: time, MFU/HFU, memory, the time's breakdown and
    its warnings (`_warnings`)."""

    rows = [
        ("iteration time", f"{e.iteration_s:.3f} s"),
        ("MFU / HFU", f"{e.mfu:.1%} / {e.hfu:.1%}"),
        ("model TFLOP/s per GPU", f"{e.model_tflops_per_gpu:.1f}"),
        (
            "memory per GPU",
            f"{e.memory_gib_per_gpu:.1f} GiB of {sy.gpu.memory_gib:g}"
            + ("" if e.fits else "  [red]does not fit[/red]"),
        ),
    ]
    if strat.pp > 1:
        rows.append(("  peak on pipeline rank", f"{e.memory_peak_rank} (ranks 0–{strat.pp - 1})"))
    for k, v in e.memory_breakdown_gib.items():
        if k == "zero3_gathered" and strat.zero < 3:
            continue  # only ZeRO-3 gathers layers
        rows.append((f"  {k}", f"{v:.1f} GiB"))
    rows += [
        (f"time: {k}", f"{v:.3f} s ({v / e.iteration_s:.1%})") for k, v in e.breakdown_s.items()
    ]
    rows += [(f"[yellow]{w}[/yellow]", text) for w, text in _warnings(e, sy, strat, gpus)]
    return quantity_table(
        f"{m.name} on {gpus} × {sy.gpu.name} ({sy.name}, K={sy.hb_domain}, "
        f"{net.architecture}; {strat.attention} attention, {strat.precision})",
        rows,
    )


def validate(
    as_json: JsonOpt = False,
    commands: Annotated[
        bool,
        typer.Option(
            "--commands",
            help="print, per modern and held-out run (MoE ones too), the railplan estimate "
            "command that "
            "predicts it (every software knob spelled out; the model files are shipped with "
            "railplan, the paths work from any directory)",
        ),
    ] = False,
) -> None:
    """Predict published runs (2021-22 Megatron-LM, 2023-24 stacks, and held out: 2025 stacks
    and MoE training); print predicted vs measured and the errors."""
    from railplan.reproduce.modern_validation import HELDOUT_FILE, modern_commands
    from railplan.reproduce.moe_training_validation import moe_commands
    from railplan.reproduce.validation import validate as run

    if commands:
        rows = modern_commands() + modern_commands(HELDOUT_FILE) + moe_commands()
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
    console.print(_rows_table(v, _VALIDATION))
    console.print(_rows_table(v, _LAYER))
    g = v["goal"]
    for key, title in (
        ("korthikanti2022", "Korthikanti 2022 iteration time"),
        ("narayanan2021", "Narayanan 2021 TFLOP/s per GPU"),
        ("all", "all rows"),
    ):
        s = v[key]
        console.print(
            f"{title}: mean |error| {s['mean_abs_pct']:.2f} %, max "
            f"{s['max_abs_pct']:.2f} % over {s['rows']} rows "
            f"(goal: mean ≤ {g['mean_abs_pct']:g} %, max ≤ {g['max_abs_pct']:g} %)"
        )
    console.print(_rows_table(v, _SAME_PIPELINE))
    console.print(_rows_table(v, _MODERN))
    m, h = v["modern_runs"], v["heldout_runs"]
    _error_lines(console, "modern runs", [*m["by_source"].items(), ("all", m["all"])])
    console.print(_rows_table(v, _HELDOUT))
    _error_lines(console, "held out", [*h["by_group"].items(), ("all", h["all"])])
    console.print(_rows_table(v, _MOE))
    moe = v["moe_runs"]
    _error_lines(console, "held out MoE", [*moe["by_group"].items(), ("all", moe["all"])])
    c = v["calculon_korthikanti"]
    console.print(
        f"Calculon on the Korthikanti rows: mean {c['mean_abs_pct']} %, max {c['max_abs_pct']} %"
    )


def _error_lines(console: Console, label: str, groups: list[tuple[str, dict[str, Any]]]) -> None:
    """One line per group of a validation set: mean and max |error| over its rows."""
    for name, s in groups:
        console.print(
            f"{label}, {name}: mean |error| {s['mean_abs_pct']:.2f} %, max "
            f"{s['max_abs_pct']:.2f} % over {s['rows']} rows"
        )


#: a validation table: title, the key of its rows in `validate()`'s dict, its columns as
#: (header, template over the row's keys), and how many leading columns are text
_ValidationTable = tuple[str, tuple[str, ...], tuple[tuple[str, str], ...], int]

_VALIDATION = (
    "Validation against published runs (DGX A100)",
    ("rows",),
    (
        ("source", "{source}"),
        ("run", "{label}"),
        ("metric", "{metric}"),
        ("measured", "{measured:.2f}"),
        ("predicted", "{predicted:.2f}"),
        ("error", "{error_pct:+.1f} %"),
    ),
    3,
)
_LAYER = (
    "Diagnostic: one GPT-22B layer, tp 8, micro-batch 4 (Korthikanti Table 4)",
    ("layer_korthikanti2022_table4",),
    (
        ("experiment", "{experiment}"),
        ("fwd measured", "{measured_forward_ms:.1f} ms"),
        ("fwd predicted", "{predicted_forward_ms:.2f} ms"),
        ("bwd measured", "{measured_backward_ms:.1f} ms"),
        ("bwd predicted", "{predicted_backward_ms:.2f} ms"),
    ),
    1,
)
_SAME_PIPELINE = (
    "Same pipeline in both papers (only dp and the year differ): seconds per iteration",
    ("same_pipeline_both_papers",),
    (
        ("model", "{model}"),
        ("2022 measured", "{korthikanti2022_measured_s:.2f}"),
        ("2021 implied", "{narayanan2021_implied_s:.2f}"),
        ("2021 / 2022", "{measured_ratio:.3f}"),
        ("ours 2022", "{korthikanti2022_predicted_s:.2f}"),
        ("ours 2021", "{narayanan2021_predicted_s:.2f}"),
    ),
    1,
)
_MODERN = (
    "Modern runs (2023-24 stacks, data/validation/modern_runs.csv): seconds per "
    "iteration; accuracy is not tuned here",
    ("modern_runs", "rows"),
    (
        ("run", "{id}"),
        ("measured", "{measured_s:.2f}"),
        ("predicted", "{predicted_s:.2f}"),
        ("error", "{error_pct:+.1f} %"),
        ("memory", "{memory_gib_per_gpu:.1f} GiB"),
        ("fits", "{fits_text}"),
    ),
    1,
)

_HELDOUT = (
    "Held out (2025 stacks: dgxc-benchmarking's NeMo 2 Llama 3.1 and Nemotron-4 runs on H100 "
    "and GB200, "
    "data/validation/dgxc2025_runs.csv): seconds per iteration; never fitted",
    ("heldout_runs", "rows"),
    _MODERN[2],
    1,
)


_MOE = (
    "Held out (MoE training: dgxc-benchmarking's NeMo 25.04.01 DeepSeek-V3 runs on H100 and "
    "GB200, data/validation/moe_training_runs.csv): seconds per iteration; never fitted",
    ("moe_runs", "rows"),
    _MODERN[2],
    1,
)


def _rows_table(v: dict[str, Any], spec: _ValidationTable) -> Table:
    """One of `validate`'s tables: each row of `v` at the spec's key, through its templates."""
    title, key, columns, text = spec
    rows: Any = v
    for k in key:
        rows = rows[k]
    headers = tuple(h for h, _ in columns)
    cells = [
        tuple(t.format(**r, fits_text="yes" if r.get("fits") else "no") for _, t in columns)
        for r in rows
    ]
    return table(title, headers, cells, left=headers[:text])


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

    def shown(k: str, v: Any) -> str:
        # nested tables (measured curves) are long: named here, in full with --json
        return f"{k}=({len(v)} entries: --json)" if isinstance(v, dict) else f"{k}={v}"

    rows = [
        (
            n,
            ", ".join(shown(k, v) for k, v in e.items() if k != "source"),
            str(e.get("source", "")),
        )
        for n, e in entries.items()
    ]
    Console().print(
        table(
            f"railplan catalog: {kind}",
            ("name", "spec", "source"),
            rows,
            left=("name", "spec", "source"),
        )
    )
