"""CLI commands of the search part: search, sweep, reproduce fig7-fig10 and nic-count."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from railplan.cli.options import (
    CrossEntropyOpt,
    DeferEmbeddingWgradOpt,
    EpDispatchOpt,
    Fp8DispatchOpt,
    Fp8ParamGatherOpt,
    GlobalBatchOpt,
    GpuMemoryGibOpt,
    GpusOpt,
    GradReduceBytesOpt,
    HardwareOptions,
    JsonOpt,
    ModelOpt,
    OptimizerStateOpt,
    OverlapDpOpt,
    RecomputeModulesOpt,
    RouterDtypeOpt,
    SharedExpertOverlapOpt,
    SystemOpt,
    WgradDeferralLimitOpt,
    modules_of,
    with_option_groups,
)
from railplan.cli.output import print_json, table
from railplan.errors import near_multiples
from railplan.names import ARCHITECTURES, REPRODUCE_FIGURES

if TYPE_CHECKING:
    from railplan.explore.search import SearchResult
    from railplan.explore.sweep import SweepResult


def _candidates_table(title: str, rows: list[dict[str, Any]]) -> Table:
    from rich.markup import escape

    from railplan.specs.strategy import strategy_label  # pydantic: loaded when a command runs

    return table(
        title,
        ("#", "strategy", "iteration", "MFU", "HFU", "memory/GPU"),
        [
            (
                str(i),
                escape(strategy_label(c["strategy"])),  # "selective[mlp]" is not markup
                f"{c['iteration_s']:.3f} s",
                f"{c['mfu']:.1%}",
                f"{c['hfu']:.1%}",
                f"{c['memory_gib_per_gpu']:.1f} GiB",
            )
            for i, c in enumerate(rows, 1)
        ],
        left=("strategy",),
    )


def _fmt(x: float | None, spec: str) -> str:
    return "—" if x is None else format(x, spec)


def _cell(v: Any) -> str:
    """A varied value as typed: 400 for a whole number, not 400.0."""
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


def _sweep_table(keys: list[str], result: SweepResult) -> None:
    """The varied fields, time, MFU and strategy (or why there is none) of every point, in
    grid order."""
    from rich.markup import escape

    partial = sorted(
        {
            (int(r["gpus"]), int(r["hb_domain"]))
            for r in result.rows
            if r.get("gpus") and r.get("hb_domain") and int(r["gpus"]) % int(r["hb_domain"])
        }
    )
    rows = [
        (
            *[_cell(row[k]) for k in keys],
            _fmt(row["iteration_s"], ".4f"),
            _fmt(row["mfu"], ".1%"),
            escape(str(row["strategy"] or row["error"])),  # labels and errors hold "[…]"
        )
        for row in result.rows  # grid order (run_sweep's), not completion order
    ]
    console = Console()
    title = f"sweep: {len(result.rows)} points → {result.csv_path}"
    console.print(table(title, [*keys, "iteration_s", "mfu", "strategy"], rows, left=("strategy",)))
    for gpus, k in partial:
        console.print(
            f"note: K={k} does not divide {gpus:,} GPUs: one HB domain is partial and groups "
            f"straddle domains, which slows those points; whole domains: "
            f"{near_multiples(gpus, k)} GPUs"
        )
    console.print(  # paths and notes are text, not rich markup ("railplan[parquet]")
        f"{result.computed} points computed, {result.skipped} already in {result.csv_path}"
        + (f"; parquet: {result.parquet_path}" if result.parquet_path else f"; {result.note}"),
        markup=False,
    )


def register(app: typer.Typer, reproduce_app: typer.Typer) -> None:
    """Add the search commands to the main app and the `reproduce` group."""
    app.command()(search)
    app.command()(sweep)
    for name, help_text in REPRODUCE_FIGURES.items():  # one `reproduce NAME` per figure
        reproduce_app.command(name, help=help_text)(_command(name))


@with_option_groups
def search(
    model: ModelOpt,
    gpus: GpusOpt,
    global_batch: GlobalBatchOpt,
    system: SystemOpt = "dgx-a100",
    hardware: HardwareOptions = HardwareOptions(),
    zero: Annotated[
        str, typer.Option(help="ZeRO stages to try, comma-separated (e.g. 0,1)")
    ] = "0,1,2,3",
    overlap_dp: OverlapDpOpt = True,
    top: Annotated[int, typer.Option(help="how many of the fastest to list")] = 5,
    as_json: JsonOpt = False,
    tp: Annotated[str | None, typer.Option(help="fix tp (values, comma-separated)")] = None,
    pp: Annotated[str | None, typer.Option(help="fix pp (values, comma-separated)")] = None,
    dp: Annotated[str | None, typer.Option(help="fix dp (values, comma-separated)")] = None,
    cp: Annotated[str | None, typer.Option(help="fix cp (values, comma-separated)")] = None,
    ep: Annotated[str | None, typer.Option(help="fix ep (values, comma-separated)")] = None,
    gpu_memory_gib: GpuMemoryGibOpt = None,
    precision: Annotated[
        str,
        typer.Option(help="precisions to search: bf16 (default), fp8, or bf16,fp8 (both)"),
    ] = "bf16",
    fp8_param_gather: Fp8ParamGatherOpt = False,
    fp8_dispatch: Fp8DispatchOpt = False,
    router_dtype: RouterDtypeOpt = "bf16",
    shared_expert_overlap: SharedExpertOverlapOpt = False,
    ep_dispatch: EpDispatchOpt = "alltoall",
    attention: Annotated[
        str, typer.Option(help="attention kernel: flash (default) | unfused")
    ] = "flash",
    cross_entropy: CrossEntropyOpt = "fused",
    grad_reduce_bytes: GradReduceBytesOpt = 4,
    optimizer_state: OptimizerStateOpt = "fp32",
    defer_embedding_wgrad: DeferEmbeddingWgradOpt = False,
    wgrad_deferral_limit: WgradDeferralLimitOpt = 0,
    overlap_ep: Annotated[
        bool,
        typer.Option(
            "--overlap-ep/--no-overlap-ep",
            help="MoE: hide the expert-parallel all-to-alls behind the adjacent micro-batch "
            "(Megatron-Core --overlap-moe-expert-parallel-comm) on every strategy that allows it "
            "(ep > 1, interleaved when pp > 1, no full recompute)",
        ),
    ] = False,
    recompute_modules: RecomputeModulesOpt = None,
    recompute_num_layers: Annotated[
        str,
        typer.Option(
            help="full-recompute candidates: 0 (every layer; default) and/or N, the first N "
            "layers of each model chunk (Megatron --recompute-method block), comma-separated",
        ),
    ] = "0",
    microbatch_groups: Annotated[
        bool,
        typer.Option(
            "--microbatch-groups/--no-microbatch-groups",
            help="interleaved candidates whose micro-batches are not a multiple of pp take the "
            "smallest micro-batch group Megatron-Core accepts (off: left out)",
        ),
    ] = True,
    zero_shard: Annotated[
        str,
        typer.Option(
            help="hybrid sharding (HSDP) to try on the ZeRO candidates: 0 (shard over every "
            "dp·cp rank; default) and/or N, shard groups of N ranks replicated dp·cp/N times, "
            "comma-separated (e.g. 0,8)",
        ),
    ] = "0",
    lighter_head_stage: Annotated[
        bool | None,
        typer.Option(
            "--lighter-head-stage/--even-stages",
            help="also try pipelines whose stage with the LM head holds fewer layers (the "
            "others equal; DualPipeV: rank 0); default: only for models with multi-token "
            "prediction layers",
        ),
    ] = None,
    expert_tp: Annotated[
        str,
        typer.Option(
            help="MoE: the routed experts' tensor-parallel degrees to try, comma-separated: 0 "
            "(= tp, Megatron-Core's default) and/or N dividing tp (1: whole experts on one "
            "GPU); default 0,1",
        ),
    ] = "0,1",
    pipeline_schedule: Annotated[
        str,
        typer.Option(
            help="1f1b (Megatron's schedules; default) | dualpipev (DeepSeek's DualPipeV on "
            "every strategy it can run: two chunks per rank, ≥ 2·pp micro-batches)",
        ),
    ] = "1f1b",
) -> None:
    """Find the fastest parallelization that fits in memory (and the time/memory Pareto set)."""
    from railplan.explore.search import SearchSpace
    from railplan.explore.search import search as run
    from railplan.explore.sweep_spec import int_list
    from railplan.specs import Job, load_model
    from railplan.specs.build import HARDWARE_OPTIONS, estimate_command

    m = load_model(model)
    sy = hardware.system(system, gpu_memory_gib)
    net = hardware.network_spec()
    hardware.check_fabric(sy, gpus)

    space = SearchSpace(
        zero=tuple(int_list("zero", zero)),
        overlap_dp=overlap_dp,
        tp=_fixed("tp", tp),
        pp=_fixed("pp", pp),
        dp=_fixed("dp", dp),
        cp=_fixed("cp", cp),
        ep=_fixed("ep", ep),
        precision=tuple(p.strip() for p in precision.split(",") if p.strip()),
        fp8_param_gather=fp8_param_gather,
        fp8_dispatch=fp8_dispatch,
        router_dtype=router_dtype,
        shared_expert_overlap=shared_expert_overlap,
        ep_dispatch=ep_dispatch,
        attention=attention,
        cross_entropy=cross_entropy,
        grad_reduce_bytes=grad_reduce_bytes,
        optimizer_state=optimizer_state,
        defer_embedding_wgrad=defer_embedding_wgrad,
        wgrad_deferral_limit=wgrad_deferral_limit,
        overlap_ep=overlap_ep,
        pipeline_schedule=pipeline_schedule,
        recompute_modules=modules_of(recompute_modules),
        recompute_num_layers=tuple(int_list("recompute_num_layers", recompute_num_layers)),
        zero_shard=tuple(int_list("zero_shard", zero_shard)),
        expert_tp=tuple(int_list("expert_tp", expert_tp)),
        lighter_head_stage=lighter_head_stage,
        microbatch_groups=microbatch_groups,
    )
    with search_progress() as on_progress:
        r = run(Job(m, sy, net, gpus, global_batch), space, top=top, on_progress=on_progress)
    # the best as the `estimate` command that shows it in full (breakdown, memory, layout)
    best = r.require_best().strategy
    given = {k: getattr(hardware, k) for k in HARDWARE_OPTIONS if hasattr(hardware, k)}
    command = estimate_command(model, system, gpus, best, **given, gpu_memory_gib=gpu_memory_gib)
    if as_json:
        print_json(r.to_dict() | {"estimate_command": command})
        return
    _print_search(r)
    Console().print(f"the best in full: {command}", markup=False, soft_wrap=True)


# Searches of more configurations than this (about 2 s) show a progress bar on a terminal.
PROGRESS_MIN_CONFIGURATIONS = 2_000_000


@contextmanager
def search_progress() -> Iterator[Callable[[int, int], None]]:
    """A progress callback for `explore.search.search`: a bar on stderr once a search is large
    enough to wait for, and only when stderr is a terminal (pipes and `--json` stay clean)."""
    console = Console(stderr=True)
    if not console.is_terminal:
        yield lambda done, total: None
        return
    from rich.progress import Progress

    with Progress(console=console, transient=True) as bar:
        task: list[Any] = []

        def advance(done: int, total: int) -> None:
            if total < PROGRESS_MIN_CONFIGURATIONS:
                return
            if not task:
                task.append(bar.add_task(f"search: {total:,} configurations", total=total))
            bar.update(task[0], completed=done)

        yield advance


def _fixed(name: str, text: str | None) -> tuple[int, ...] | None:
    """The values a `search` option fixes (None: the option was not given)."""
    from railplan.explore.sweep_spec import int_list

    return None if text is None else tuple(int_list(name, text))


def _print_search(r: SearchResult) -> None:
    """The fastest candidates, the time/memory Pareto set and what was evaluated."""
    job = r.job
    m, sy, gpus = job.model, job.system, job.gpus
    pp_rule = "stages differing by at most one layer" if r.space.uneven_pp else "and divides them"
    console = Console()
    console.print(
        _candidates_table(
            f"{m.name} on {gpus} × {sy.gpu.name} (K={sy.hb_domain}, {job.network.architecture}), "
            f"batch {job.global_batch}: fastest",
            [c.to_dict() for c in r.top],
        )
    )
    console.print(_candidates_table("Pareto set: time vs memory", [c.to_dict() for c in r.pareto]))
    console.print(
        f"{r.configurations_evaluated:,} valid configurations evaluated, {r.feasible:,} fit, "
        f"in {r.elapsed_s:.3f} s ({r.configurations_per_s:,.0f} per second). Valid means "
        f"tp divides the {m.heads} heads and the KV heads, cp splits each sequence into "
        f"2·cp chunks, pp is at most the {m.layers} layers ({pp_rule}), "
        f"dp = gpus/(tp·cp·pp) divides the batch of {job.global_batch:,}, and the "
        f"micro-batch the per-replica batch."
    )
    from railplan.reproduce.modern_validation import extrapolation

    best = r.best
    beyond = best and extrapolation(sy.gpu.name, best.strategy.precision, best.mfu)
    if beyond:
        console.print(f"note: the best's {beyond}.")
    if gpus % sy.hb_domain:
        console.print(
            f"note: {gpus:,} GPUs is not a multiple of K={sy.hb_domain}, so one HB domain "
            f"is partial; cost and report need whole domains: "
            f"{near_multiples(gpus, sy.hb_domain)} GPUs."
        )


def sweep(
    model: Annotated[str | None, typer.Option(help="catalog name or YAML file")] = None,
    gpus: Annotated[int | None, typer.Option(help="GPUs in the job")] = None,
    global_batch: Annotated[int | None, typer.Option(help="sequences per iteration")] = None,
    system: Annotated[str | None, typer.Option(help="catalog name or YAML file")] = None,
    network: Annotated[str | None, typer.Option(help=" | ".join(ARCHITECTURES))] = None,
    vary: Annotated[
        list[str] | None,
        typer.Option(
            help="FIELD=v1,v2,...; repeat with other fields for a grid (e.g. hb_domain=8,256);"
            " a field given twice is an error. Fields: the spec's (model, system, network,"
            " gpus, global_batch, hb_domain, nic_gbps, ...) and the search's settings, one per"
            " point (precision, ep_dispatch, pipeline_schedule, tp, ep, ...: docs/search.md)"
        ),
    ] = None,
    spec: Annotated[
        Path | None, typer.Option(help="YAML sweep file (base fields + vary mapping)")
    ] = None,
    output: Annotated[
        Path,
        typer.Option(
            help="CSV results, appended as points finish; its directory must exist"
            " (a .parquet beside it when pyarrow exists; x.parquet logs to x.csv)"
        ),
    ] = Path("sweep.csv"),
    backend: Annotated[str, typer.Option(help="local | ray")] = "local",
    workers: Annotated[int, typer.Option(help="processes (local) / tasks in flight")] = 0,
    ray_address: Annotated[
        str | None, typer.Option(help="Ray cluster address (default: start a local one)")
    ] = None,
    zero: Annotated[
        str | None, typer.Option(help="ZeRO stages to try (default: the spec's, else 0,1,2,3)")
    ] = None,
    as_json: JsonOpt = False,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait", help="if another sweep is writing the same output, wait for it to end"
        ),
    ] = False,
) -> None:
    """Search the best strategy at every point of a grid over spec fields and search settings;
    resumable.

    Every value is checked before anything runs; exits 1 if points failed with an error.
    Run the same command again to compute the missing and failed points."""
    from railplan.explore.sweep import run_sweep
    from railplan.explore.sweep_spec import SweepSpec, int_list, parse_vary

    base: dict[str, Any] = {
        k: v
        for k, v in {
            "model": model,
            "gpus": gpus,
            "global_batch": global_batch,
            "system": system,
            "network": network,
        }.items()
        if v is not None
    }
    sw = SweepSpec.build(
        base=base,
        vary=parse_vary(vary or []),
        spec_file=spec,
        zero=None if zero is None else tuple(int_list("zero", zero)),
        fixed_wins=True,
    )
    result = run_sweep(
        sw,
        output,
        backend=backend,
        workers=workers,
        address=ray_address,
        progress=True,  # on stderr, and only on a terminal: --json's stdout stays clean
        wait=wait,
    )
    if as_json:
        print_json(result.to_dict())
    else:
        _sweep_table(keys=list(sw.vary), result=result)
    if result.failed:
        _exit_failed(result)


def _exit_failed(result: SweepResult) -> NoReturn:
    """Say how many points of a sweep failed and exit 1."""
    typer.echo(
        f"{result.failed} points failed (see the error column of {result.csv_path}); "
        "run the same command again to retry them",
        err=True,
    )
    raise typer.Exit(1)


def _reproduce(name: str, as_json: bool, plot: Path | None) -> None:
    from railplan.reproduce import evaluation as ev

    if plot is not None:
        ev.check_plot_path(plot)  # before the evaluation runs, not after
    report = ev.run(name)
    if plot is not None:
        ev.plot(report, plot)
    if as_json:
        print_json(report)
        return
    console = Console(width=max(Console().width, 160))
    for t in ev.tables(report):
        console.print(table(t["title"], t["columns"], t["rows"]))
    for note in report.get("notes", []):
        console.print(note)
    if plot is not None:
        console.print(f"plot written to {plot}")


def _command(name: str) -> Callable[..., None]:
    def command(
        as_json: Annotated[bool, typer.Option("--json")] = False,
        plot: Annotated[Path | None, typer.Option(help="write a PNG/SVG/PDF plot")] = None,
    ) -> None:
        _reproduce(name, as_json, plot)

    return command
