"""CLI commands of the inference part: `infer` (one deployment, optionally under Poisson load or a
sweep of rates) and `infer-search` (the best serving configuration per network)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from railplan.cli.options import (
    HardwareOptions,
    JsonOpt,
    ModelOpt,
    SystemOpt,
    with_option_groups,
)
from railplan.cli.output import print_json, quantity_table, table
from railplan.errors import RailplanError
from railplan.units import fmt_bytes

if TYPE_CHECKING:
    from railplan.inference.engine import Deployment
    from railplan.inference.estimate import InferenceResult
    from railplan.inference.loaded import Loaded
    from railplan.inference.serving import ServingResult
    from railplan.specs.model import Model

PrecisionOpt = Annotated[str, typer.Option(help="bf16 | fp8 | fp4 (weights and GEMMs)")]
MinDurationOpt = Annotated[
    float | None,
    typer.Option(
        help="seconds of Poisson arrivals each load simulation of --max-rate / --under-load "
        "covers at least (default 600, MLPerf's Server runs); shorter is faster and sees less "
        "of a queue near capacity"
    ),
]
SpeculativeOpt = Annotated[
    int,
    typer.Option(
        help="draft tokens per step from the model's multi-token prediction module "
        "(speculative decoding; 0-16, 0 = off)"
    ),
]
AcceptanceOpt = Annotated[
    float | None,
    typer.Option(
        help="chance a draft token is accepted, given the ones before it (default 0.85, "
        "DeepSeek-V3's MTP: 0.85-0.90); needs --speculative-tokens"
    ),
]


def _speculation(speculative_tokens: int, acceptance: float | None) -> tuple[int, float]:
    """(draft tokens, acceptance); --acceptance alone is a one-line error, not ignored."""
    from railplan.inference.engine import DEFAULT_ACCEPTANCE

    if acceptance is not None and speculative_tokens == 0:
        raise RailplanError(
            "acceptance", "applies to draft tokens: give --speculative-tokens (1-16) too"
        )
    return speculative_tokens, DEFAULT_ACCEPTANCE if acceptance is None else acceptance


def _drafts(speculative_tokens: int) -> str:
    """ ", D draft tokens" for a title (nothing without drafts)."""
    if not speculative_tokens:
        return ""
    return f", {speculative_tokens} draft token{'s' if speculative_tokens > 1 else ''}"


InputOpt = Annotated[int, typer.Option(help="prompt tokens per request (1-1e7)")]
OutputOpt = Annotated[int, typer.Option(help="output tokens per request (2-1e7)")]
CustomAllReduceOpt = Annotated[
    bool,
    typer.Option(
        help="tensor-parallel all-reduces inside an HB domain may take the serving framework's "
        "own kernel (TensorRT-LLM / vLLM / SGLang custom all-reduce, where the system has its "
        "measurement); --no-custom-all-reduce: NCCL only"
    ),
]


def _floats(field: str, text: str) -> list[float]:
    from railplan.explore.sweep_spec import comma_list

    bad = "must be comma-separated numbers; got {text!r}"
    return comma_list(field, text, float, bad, "must list at least one number")


def register(app: typer.Typer, reproduce_app: typer.Typer) -> None:
    """Add the inference commands."""
    app.command()(infer)
    app.command("infer-search")(infer_search)


@with_option_groups
def infer(
    model: ModelOpt = "llama-2-70b",
    system: SystemOpt = "dgx-h100",
    gpus: Annotated[int, typer.Option(help="GPUs serving the model (replicas × tp·pp·ep)")] = 8,
    tp: Annotated[int, typer.Option(help="tensor-parallel degree")] = 1,
    pp: Annotated[int, typer.Option(help="pipeline stages")] = 1,
    ep: Annotated[int, typer.Option(help="expert-parallel degree (MoE)")] = 1,
    batch: Annotated[
        int | None, typer.Option(help="sequences per tp·pp group (default: most that fit)")
    ] = None,
    input_tokens: InputOpt = 1024,
    output_tokens: OutputOpt = 256,
    precision: PrecisionOpt = "fp8",
    two_batch_overlap: Annotated[
        bool,
        typer.Option(
            help="run each step as two micro-batches that hide each other's expert "
            "all-to-alls (DeepSeek's dual-batch overlap; MoE with ep > 1)"
        ),
    ] = False,
    speculative_tokens: SpeculativeOpt = 0,
    acceptance: AcceptanceOpt = None,
    custom_all_reduce: CustomAllReduceOpt = True,
    hardware: HardwareOptions = HardwareOptions(),
    chunked_prefill: Annotated[
        bool,
        typer.Option(
            "--chunked-prefill",
            help="run prompts in chunks of what the 8,192-token step budget leaves beside the "
            "running sequences' tokens (vLLM V1's scheduler); default: whole prompts, "
            "as TensorRT-LLM without chunked context and the validated MLPerf runs",
        ),
    ] = False,
    prefill_gpus: Annotated[
        int | None,
        typer.Option(
            help="disaggregated: GPUs (whole tp·pp·ep instances) that only prefill, the others "
            "only decode, each prompt's KV cache shipped between them (infer-search's P:D)"
        ),
    ] = None,
    arrival_rate: Annotated[
        str | None,
        typer.Option(help="requests/s (Poisson); a comma list sweeps the rates"),
    ] = None,
    requests: Annotated[
        int | None,
        typer.Option(
            help="with --arrival-rate or --max-rate: requests per rate and replica, or ep rank, "
            "simulated "
            "(at most 250000 ÷ the ranks simulated; default 2000 per replica, or four batches' "
            "worth per rank where the rate fills them, if more)"
        ),
    ] = None,
    dispatch: Annotated[
        str | None,
        typer.Option(
            help="split: one replica simulated on its random share of the stream (with ep > 1 "
            "its ranks in turn, SGLang's default) | least-busy: every replica (or rank), each "
            "request to the one with the fewest in flight (NVIDIA's MLPerf harness; always, "
            "with --prefill-gpus; aggregated, on lockstep ep ranks, it piles prompts on one "
            "rank: docs/inference.md); with --arrival-rate or --max-rate"
        ),
    ] = None,
    max_rate: Annotated[
        bool,
        typer.Option(
            "--max-rate",
            help="find the most requests/s whose load simulation keeps up with p99 TTFT and TPOT "
            "within --ttft-slo and --tpot-slo (MLPerf's server rule; bisection, 1/64 of the "
            "steady-state capacity)",
        ),
    ] = False,
    ttft_slo: Annotated[
        float | None, typer.Option(help="with --max-rate: p99 TTFT limit, s (default 6)")
    ] = None,
    tpot_slo: Annotated[
        float | None, typer.Option(help="with --max-rate: p99 TPOT limit, s (default 0.175)")
    ] = None,
    min_duration: MinDurationOpt = None,
    plot: Annotated[
        str | None, typer.Option(help="throughput-latency plot of the sweep (PNG or SVG)")
    ] = None,
    traffic: Annotated[
        bool, typer.Option("--traffic", help="bytes of one decode step: HB, NIC, cross-rail")
    ] = False,
    heatmap: Annotated[
        str | None,
        typer.Option(help="heatmap of one decode step's bytes, first 64 GPUs (PNG or SVG)"),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Serve a model: TTFT, TPOT, tokens/s per GPU, KV cache and the largest batch; under
    Poisson load with --arrival-rate (mean and p99, the inter-token latency's p99, a sweep
    with a plot)."""
    from railplan.inference import disaggregated
    from railplan.inference.engine import Deployment
    from railplan.inference.estimate import default_batch
    from railplan.inference.estimate import infer as run
    from railplan.inference.search import MLPERF_SERVER_TPOT_S, MLPERF_SERVER_TTFT_S, SLO
    from railplan.inference.serving import MAX_NUM_TOKENS, batch_limit, serve, step_budget
    from railplan.specs.build import choice
    from railplan.specs.catalog import load_model

    speculation = _speculation(speculative_tokens, acceptance)
    rates = _floats("arrival_rate", arrival_rate) if arrival_rate is not None else []
    for name, given in (("requests", requests), ("dispatch", dispatch)):
        if given is not None and not rates and not max_rate:
            raise RailplanError(
                name, "takes effect only with --arrival-rate or --max-rate (the load simulation)"
            )
    for name, limit in (
        ("ttft_slo", ttft_slo),
        ("tpot_slo", tpot_slo),
        ("min_duration", min_duration),
    ):
        if limit is not None and not max_rate:
            raise RailplanError(name, "takes effect only with --max-rate")
    from railplan.inference.loaded import min_duration as resolved_duration
    from railplan.inference.loaded import short_of

    min_s = resolved_duration(min_duration)
    if min_duration is not None and requests is not None:
        raise RailplanError(
            "min_duration", "takes no effect with --requests, which sets the run's length"
        )
    limits = (
        SLO.check("ttft_slo", MLPERF_SERVER_TTFT_S if ttft_slo is None else ttft_slo),
        SLO.check("tpot_slo", MLPERF_SERVER_TPOT_S if tpot_slo is None else tpot_slo),
    )
    split = prefill_gpus is not None
    dispatch = choice(
        "dispatch", dispatch or ("least-busy" if split else "split"), ("split", "least-busy")
    )
    if split and dispatch == "split":
        raise RailplanError(
            "dispatch",
            "a disaggregated run simulates every instance, each request sent to the least "
            "busy: least-busy only with --prefill-gpus",
        )
    _check_figures(plot, heatmap, rates)
    sy = hardware.system(system)  # refuses --nvls where the GPU has no NVLink SHARP
    if hardware.nvls is not None:
        raise RailplanError(
            "nvls",
            "serving takes NVLink SHARP wherever the GPU has it, as NCCL does by default: "
            f"--{'' if hardware.nvls else 'no-'}nvls changes nothing for infer",
        )
    m = load_model(model)
    hardware.check_fabric(sy, gpus)
    dep = Deployment(
        m,
        sy,
        hardware.network_spec(),
        gpus,
        tp,
        pp,
        ep,
        precision,
        two_batch_overlap,
        *speculation,
        custom_all_reduce,
    )
    if chunked_prefill and prefill_gpus is not None:
        raise RailplanError(
            "chunked_prefill",
            "applies to engines that run prompts beside decoding: not with --prefill-gpus "
            "(prefill instances take whole prompts up to 8,192 tokens a step)",
        )
    if prefill_gpus is not None:
        p = disaggregated.prefill_instances_of(dep, prefill_gpus)
        r = disaggregated.infer_disaggregated(dep, batch, input_tokens, output_tokens, p)

        def one_of(rate: float, n: int | None, min_s: float = 0.0) -> ServingResult:
            return disaggregated.serve_disaggregated(
                dep, p, rate, input_tokens, output_tokens, batch, n, min_duration_s=min_s
            )
    else:
        r = run(dep, batch, input_tokens, output_tokens, chunked_prefill)
        busy = dispatch == "least-busy"

        def one_of(rate: float, n: int | None, min_s: float = 0.0) -> ServingResult:
            return serve(
                dep,
                rate,
                input_tokens,
                output_tokens,
                batch,
                n,
                least_busy=busy,
                chunked=chunked_prefill,
                min_duration_s=min_s,
            )

    def one(rate: float) -> ServingResult:
        return one_of(rate, requests)

    sweep = _simulate(rates, one)
    highest = None
    if max_rate:
        from railplan.inference.loaded import most_requests, settled_run, sharing_ranks

        instances = r.prefill_gpus // dep.instance_gpus
        # the given requests; by default, longer runs where one cannot tell ("?")
        longer = settled_run(
            lambda rate, n: one_of(rate, n, min_s),
            most_requests(dep, instances, dispatch == "least-busy"),
            requests,
        )
        highest = _max_rate(r, gpus, output_tokens, longer, limits, sharing_ranks(dep, instances))
    out: dict[str, Any] = r.to_dict()
    notes = _context_notes(m, input_tokens, output_tokens)
    asked = batch if batch is not None else default_batch(r.max_batch)
    if chunked_prefill and r.batch < asked:
        notes.append(
            f"with chunked prefill the {MAX_NUM_TOKENS:,}-token step budget sustains "
            f"{r.batch:,} running sequences at these lengths (a step carries the prompts of "
            f"the sequences that start beside the running ones' tokens): the steady state runs "
            f"{r.batch:,}, not {asked:,}"
        )
    elif not r.prefill_gpus and r.batch < asked:
        budget = step_budget(input_tokens, r.batch * dep.verified_tokens)
        notes.append(
            f"the engine's {budget:,}-token step budget sustains {r.batch:,} running sequences "
            f"at these lengths (a step admits whole prompts, as many as fit beside the running "
            f"ones' tokens, and the steady state starts one for each that finishes): it runs "
            f"{r.batch:,}, not {asked:,} (--chunked-prefill splits prompts instead)"
        )
    budgets = {s.step_budget_tokens for s in sweep} - {MAX_NUM_TOKENS}
    if highest is not None:  # the --max-rate run's budget too
        budgets = (budgets | {highest.step_budget_tokens}) - {MAX_NUM_TOKENS}
    if budgets:
        notes.append(
            f"the load simulation's step budget is {max(budgets):,} tokens, not "
            f"{MAX_NUM_TOKENS:,}: a {input_tokens:,}-token prompt must fit beside the running "
            "batch's tokens (prompts are admitted whole, no chunked context)"
        )
    short = short_of(highest, min_s) if highest is not None and requests is None else None
    if short:
        notes.append(short)
    if notes:
        out["notes"] = notes
    if max_rate:
        out["max_rate"] = highest.to_dict() if highest is not None else None
        out["max_rate_limits_s"] = {"ttft_p99": limits[0], "tpot_p99": limits[1]}
    capped = (sweep or max_rate) and batch is not None and batch > r.max_batch
    if sweep:
        out["serving"] = [s.to_dict() for s in sweep]
    if sweep or max_rate:
        out["dispatch"] = dispatch
        # the simulated engine admits no more sequences than its KV cache holds
        out["serving_max_batch"] = batch_limit(dep, input_tokens + output_tokens, batch)
    if traffic or heatmap is not None:
        _decode_step(dep, r, out, traffic, heatmap)
    ratio = f"{r.prefill_gpus}:{gpus - r.prefill_gpus}" if r.prefill_gpus else ""
    if plot is not None:
        from railplan.inference.plots import rate_sweep_plot

        rate_sweep_plot(
            sweep,
            plot,
            f"{r.model} on {gpus}× {r.system} (tp{tp} pp{pp}"
            f"{', disaggregated ' + ratio if ratio else ''})",
        )
    if as_json:
        print_json(out)
        return
    _print_inference(
        f"{r.model} on {gpus} GPUs of {r.system} ({r.network}), tp {tp} pp {pp} ep {ep}"
        f"{', two-batch overlap' if two_batch_overlap else ''}"
        f"{_drafts(speculative_tokens)}"
        f"{', chunked prefill' if chunked_prefill else ''}"
        f"{', disaggregated ' + ratio + ' GPUs' if ratio else ''}, "
        f"{precision}, {input_tokens} in / {output_tokens} out",
        r,
        out.get("decode_step_traffic"),
        sweep,
    )
    if "kv_transfer_traffic" in out:
        for line in _traffic_lines({"kv_transfer_per_prompt": out["kv_transfer_traffic"]}):
            Console().print(line)
    if max_rate:
        Console().print(_max_rate_line(highest, limits), soft_wrap=True)
    for note in notes:
        Console().print(f"[yellow]note:[/yellow] {note}", soft_wrap=True)
    if capped:
        Console().print(
            f"under load the batch is the largest that fits, {r.max_batch:,} "
            f"(--batch {batch:,} does not fit in memory)"
        )
    for path in (heatmap, plot):
        if path is not None:
            Console().print(f"wrote {path}")


def _max_rate(
    r: InferenceResult,
    gpus: int,
    output_tokens: int,
    one: Callable[[float], ServingResult],
    limits: tuple[float, float],
    ranks: int,
) -> Loaded | None:
    """The most requests/s (`loaded.highest_rate`, on a grid of the steady state's capacity)
    whose run by `one` keeps up with p99 TTFT and TPOT within `limits`, saying on stderr which
    rate it is at."""
    from railplan.inference.loaded import rated

    capacity = r.tokens_per_s / output_tokens
    with Console(stderr=True).status("") as status:

        def told(rate: float) -> ServingResult:
            status.update(f"simulating {rate:.4g} requests/s (finding the highest within limits)")
            return one(rate)

        return rated(told, limits, capacity, gpus, output_tokens, ranks)[0]


def _max_rate_line(highest: Loaded | None, limits: tuple[float, float]) -> str:
    within_s = f"p99 TTFT ≤ {limits[0]:g} s and TPOT ≤ {limits[1] * 1e3:g} ms"
    if highest is None:
        return f"no rate down to 1/64 of the steady state's capacity keeps up with {within_s}"
    return (
        f"highest rate with {within_s}: {highest.arrival_rate:.4g} requests/s "
        f"({highest.capacity_share:.1%} of the steady state's capacity), "
        f"{highest.tokens_per_s_per_gpu:,.0f} tokens/s per GPU; there TTFT p99 "
        f"{highest.ttft_p99_s * 1e3:.0f} ms, TPOT p99 {highest.tpot_p99_s * 1e3:.1f} ms "
        f"({highest.simulations} rate{'s' * (highest.simulations != 1)} simulated; rerun: "
        f"--arrival-rate {highest.arrival_rate!r} --requests {highest.requests})"
    )


def _simulate(rates: list[float], one: Callable[[float], ServingResult]) -> list[ServingResult]:
    """`one` at each rate, in order, saying on stderr which rate it is at (a load simulation
    of many requests takes seconds to minutes)."""
    out: list[ServingResult] = []
    if not rates:
        return out
    with Console(stderr=True).status("") as status:
        for i, rate in enumerate(rates):
            status.update(f"simulating {rate:g} requests/s ({i + 1} of {len(rates)})")
            out.append(one(rate))
    return out


def _context_notes(m: Model, input_tokens: int, output_tokens: int) -> list[str]:
    """What the user should know about the context asked for: where the spec does not state
    the context the model serves (`context_tokens`, checked before any work), a prompt and
    answer longer than its `seq` (its training length) are computed all the same."""
    context = input_tokens + output_tokens
    if context <= m.seq or m.context_tokens is not None:
        return []
    return [
        f"{input_tokens:,} prompt + {output_tokens:,} output tokens exceed {m.name}'s "
        f"sequence length of {m.seq:,} (the spec's `seq`, its training length): costed all "
        "the same; whether the model serves that context the spec does not say"
    ]


def _check_figures(plot: str | None, heatmap: str | None, rates: list[float]) -> None:
    """Check the figure files `infer` will write before any work."""
    if plot is not None and not rates:
        raise RailplanError("plot", "needs --arrival-rate (a comma list of rates)")
    from railplan.cli.output import distinct_outputs

    distinct_outputs(plot=plot, heatmap=heatmap)
    for field, path in (("plot", plot), ("heatmap", heatmap)):
        if path is not None:
            from railplan.fileio import check_target
            from railplan.traffic.plots import FIGURE_SUFFIXES, check_suffix

            check_target(check_suffix(path, FIGURE_SUFFIXES, field), field)


def _decode_step(
    dep: Deployment, r: InferenceResult, out: dict[str, Any], traffic: bool, heatmap: str | None
) -> None:
    """Add one decode step's traffic summary to `out` (with --traffic) and draw its heatmap;
    disaggregated, the step of the decode instances, and one prompt's KV transfer."""
    from dataclasses import replace

    from railplan.inference.traffic import decode_step_traffic, prompt_kv_traffic

    step = decode_step_traffic(replace(dep, gpus=dep.gpus - r.prefill_gpus), r.batch)
    if traffic:
        out["decode_step_traffic"] = step.summary()
        if r.prefill_gpus:
            kv = prompt_kv_traffic(dep, r.input_tokens, r.prefill_gpus)
            out["kv_transfer_traffic"] = kv.summary()
    if heatmap is not None:
        from railplan.traffic.plots import heatmap as draw

        draw(
            step,
            heatmap,
            64,
            f"one decode step of {r.model}, batch {r.batch}",
            "bytes per decode step",
        )


def _print_inference(
    title: str,
    r: InferenceResult,
    step_traffic: dict[str, Any] | None,
    sweep: list[ServingResult],
) -> None:
    """The serving table, one decode step's bytes (if measured) and the rate sweep (if run)."""
    rows = [
        ("batch per tp·pp group (largest that fits)", f"{r.batch} ({r.max_batch})"),
        ("fits in memory", "yes" if r.fits else "NO"),
        ("TTFT (no queueing)", f"{r.ttft_s * 1e3:.1f} ms"),
        ("TPOT", f"{r.tpot_s * 1e3:.1f} ms"),
    ]
    if r.prefill_gpus:
        rows += [
            ("prefill:decode GPUs", f"{r.prefill_gpus}:{r.gpus - r.prefill_gpus}"),
            ("KV transfer (in TTFT)", f"{r.kv_transfer_s * 1e3:.2f} ms"),
        ]
    if r.speculative_tokens:
        rows += [
            (
                f"tokens per step ({r.speculative_tokens} draft"
                f"{'s' if r.speculative_tokens > 1 else ''} at {r.acceptance:g})",
                f"{r.tokens_per_step:.2f}",
            ),
            ("engine step", f"{r.step_s * 1e3:.1f} ms"),
        ]
    rows += [
        ("output tokens/s per GPU", f"{r.tokens_per_s_per_gpu:,.0f}"),
        ("output tokens/s, all GPUs", f"{r.tokens_per_s:,.0f}"),
        ("weights per GPU", f"{r.weights_gib_per_gpu:.1f} GiB"),
        (
            "KV cache per GPU (pool)",
            f"{r.kv_cache_gib_per_gpu:.1f} ({r.kv_capacity_gib_per_gpu:.1f}) GiB",
        ),
    ] + [(f"step: {k}", f"{v * 1e3:.2f} ms") for k, v in r.breakdown_s.items() if v > 0]
    Console().print(quantity_table(title, rows))
    if step_traffic is not None:
        names = ("total_bytes", "hb_bytes", "nic_bytes", "cross_rail_bytes")
        Console().print(
            quantity_table(
                f"one decode step, batch {r.batch} per tp·pp group (bytes each GPU pair must "
                "exchange, before any forwarding: the same on every network)",
                [(n.replace("_", " "), f"{step_traffic[n] / 1e6:,.1f} MB") for n in names],
            )
        )
    if sweep:
        Console().print(_sweep_table(sweep))


def _sweep_table(sweep: list[ServingResult]) -> Table:
    """Mean and p99 latencies per arrival rate."""
    stable = {True: "yes", False: "no (queue grows)", None: "? (more --requests)"}
    return table(
        "Poisson arrivals, continuous batching",
        (
            "req/s",
            "tok/s/GPU",
            "TTFT mean",
            "TTFT p99",
            "TPOT mean",
            "TPOT p99",
            "ITL p99",
            "stable",
        ),
        [
            (
                f"{s.arrival_rate:g}",
                f"{s.tokens_per_s_per_gpu:,.0f}",
                f"{s.ttft_mean_s * 1e3:.0f} ms",
                f"{s.ttft_p99_s * 1e3:.0f} ms",
                f"{s.tpot_mean_s * 1e3:.1f} ms",
                f"{s.tpot_p99_s * 1e3:.1f} ms",
                f"{s.itl_p99_s * 1e3:.1f} ms",
                stable[s.stable],
            )
            for s in sweep
        ],
    )


def infer_search(
    model: ModelOpt = "llama-3-405b",
    system: SystemOpt = "gb200-nvl72",
    gpus: Annotated[int, typer.Option(help="GPUs serving the model")] = 72,
    hb_domains: Annotated[
        str | None,
        typer.Option(help="comma list of K to compare with the same GPUs (e.g. 72,8)"),
    ] = None,
    input_tokens: InputOpt = 2048,  # search.EXAMPLE_INPUT_TOKENS
    output_tokens: OutputOpt = 256,  # search.EXAMPLE_OUTPUT_TOKENS
    precision: PrecisionOpt = "fp8",
    ttft_slo: Annotated[float, typer.Option(help="TTFT limit, s (MLPerf server: 6)")] = 6.0,
    tpot_slo: Annotated[float, typer.Option(help="TPOT limit, s (MLPerf server: 0.175)")] = 0.175,
    speculative_tokens: SpeculativeOpt = 0,
    acceptance: AcceptanceOpt = None,
    custom_all_reduce: CustomAllReduceOpt = True,
    traffic: Annotated[
        bool,
        typer.Option(
            "--traffic",
            help="the best's bytes: one decode step and, disaggregated, one prompt's KV cache "
            "from a prefill to a decode instance (HB, NIC, cross-rail)",
        ),
    ] = False,
    under_load: Annotated[
        bool,
        typer.Option(
            "--under-load",
            help="also simulate the best configurations under Poisson load: the most requests/s "
            "with p99 TTFT and TPOT within the limits (MLPerf's server rule), and the verdict "
            "on those (seconds to minutes)",
        ),
    ] = False,
    min_duration: MinDurationOpt = None,
    load_candidates: Annotated[
        int | None,
        typer.Option(
            help="with --under-load: the most choices (a configuration at a batch, and a "
            "prefill:decode split if disaggregated) simulated per network: the first 4 "
            "configurations at their steady-state best, then the others by capacity (default "
            "8; 0 = no limit); those that cannot beat the best found are never simulated"
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """The configuration (tp/pp/ep/batch, aggregated or disaggregated prefill/decode) with
    the most output tokens/s per GPU within the TTFT/TPOT limits, on each network; does
    serving need a spine? With --under-load, also under Poisson load."""
    from railplan.cli.network import _int_list
    from railplan.inference.search import (
        best_buildable,
        configuration_words,
        search,
        with_hb_domain,
    )
    from railplan.specs.catalog import load_model, load_system

    speculation = _speculation(speculative_tokens, acceptance)
    m, base = load_model(model), load_system(system)
    ks = _int_list("hb_domains", hb_domains) if hb_domains else [base.hb_domain]
    if min_duration is not None and not under_load:
        raise RailplanError("min_duration", "takes effect only with --under-load")
    if load_candidates is not None and not under_load:
        raise RailplanError("load_candidates", "takes effect only with --under-load")
    from railplan.inference.loaded import min_duration as resolved_duration
    from railplan.inference.loaded import short_of

    min_s = resolved_duration(min_duration)
    with Console(stderr=True).status("") as status:

        def told(k: int) -> Callable[[str], None]:
            return lambda what: status.update(f"K = {k}, simulating {what}")

        results = [
            search(
                m,
                with_hb_domain(base, k),
                gpus,
                precision,
                input_tokens,
                output_tokens,
                ttft_slo,
                tpot_slo,
                speculative=speculation,
                custom_all_reduce=custom_all_reduce,
                traffic=traffic,
                under_load=under_load,
                progress=told(k),
                min_duration_s=min_s,
                load_candidates=load_candidates,
            )
            for k in ks
        ]
    found = [r for r in results if r["best"]]
    best = best_buildable(
        found, lambda r: str(r["best"]["network"]), lambda r: r["best"]["tokens_per_s_per_gpu"]
    )
    top: dict[str, Any] | None = best["best"] | {"hb_domain": best["hb_domain"]} if best else None
    out: dict[str, Any] = {"best": top, "by_hb_domain": results}
    loaded_top = _best_under_load(results) if under_load else None
    if loaded_top is not None:
        loaded_top["load_check_command"] = _load_check_command(
            model, system, loaded_top, speculative_tokens, acceptance, custom_all_reduce
        )
        short = short_of(loaded_top["load"], min_s)
        if short:
            loaded_top["notes"] = [short]
    if under_load:
        out["best_under_load"] = loaded_top
    if top is not None:
        top["load_check_command"] = _load_check_command(
            model, system, top, speculative_tokens, acceptance, custom_all_reduce
        )
    notes = _context_notes(m, input_tokens, output_tokens)
    if notes:
        out["notes"] = notes
    if as_json:
        print_json(out)
        return
    title = (
        f"{m.name} on {gpus} GPUs of {base.name}, {precision}{_drafts(speculative_tokens)}, "
        f"{input_tokens} in / "
        f"{output_tokens} out, TTFT ≤ {ttft_slo:g} s, TPOT ≤ {tpot_slo * 1e3:g} ms"
    )
    Console(width=max(Console().width, 120)).print(_configurations_table(title, results))
    for r in results:
        Console().print(f"K = {r['hb_domain']}: {r['verdict']}")
    if best:
        Console().print(
            f"best: K = {best['hb_domain']}, {best['best']['network']}, "
            f"{configuration_words(best['best'])}, "
            f"{best['best']['tokens_per_s_per_gpu']:,.0f} tokens/s per GPU"
        )
        for line in _traffic_lines(top.get("traffic", {}) if top else {}):
            Console().print(line)
        if top is not None and not under_load:
            Console().print(
                "its TTFT holds no queueing; under Poisson load at 90 % of its capacity: "
                + top["load_check_command"],
                soft_wrap=True,
            )
            if top["mode"] == "aggregated" and top["ep"] > 1:
                Console().print(
                    "note: its ep ranks step together, and this capacity gives each the same "
                    "prompts per step; under Poisson arrivals the busiest rank sets the step, "
                    "so it serves less (docs/inference.md, 'Disaggregated, under load')",
                    soft_wrap=True,
                )
    if under_load:
        Console(width=max(Console().width, 136)).print(_loaded_table(results))
        for r in results:
            Console().print(f"K = {r['hb_domain']}: {r['under_load']['verdict']}")
            for line in _not_simulated_lines(r):
                Console().print(f"[yellow]note:[/yellow] {line}", soft_wrap=True)
        if loaded_top is not None:
            load = loaded_top["load"]
            Console().print(
                f"best under load: K = {loaded_top['hb_domain']}, {loaded_top['network']}, "
                f"{configuration_words(loaded_top)}, batch {loaded_top['batch']}, "
                f"{load['arrival_rate']:.4g} requests/s ({load['capacity_share']:.1%} of its "
                f"capacity), {load['tokens_per_s_per_gpu']:,.0f} tokens/s per GPU; its run: "
                + loaded_top["load_check_command"],
                soft_wrap=True,
            )
            for note in loaded_top.get("notes", []):
                Console().print(f"[yellow]note:[/yellow] {note}", soft_wrap=True)
    for note in notes:
        Console().print(f"[yellow]note:[/yellow] {note}", soft_wrap=True)


def _best_under_load(results: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The most tokens/s per GPU under load over the HB-domain sizes (buildable networks
    first), with its K."""
    from railplan.inference.search import best_buildable

    found = [(r["hb_domain"], b) for r in results if (b := r["under_load"]["best"]) is not None]
    top = best_buildable(
        found,
        lambda kb: str(kb[1]["network"]),
        lambda kb: kb[1]["load"]["tokens_per_s_per_gpu"],
    )
    return dict(top[1]) | {"hb_domain": top[0]} if top else None


def _loaded_table(results: list[dict[str, Any]]) -> Table:
    """Per HB-domain size and network, the configuration that serves the most under Poisson
    load with p99 TTFT and TPOT within the limits."""
    columns = ("K", "network", "mode", "tp", "pp", "ep", "TBO", "batch", "P:D GPUs")
    rows = []
    for r in results:
        ul = r["under_load"]
        for net, c in ul["by_network"].items():
            if c is None:
                what = "none meets the limits" if r["evaluated"] else "none fits in memory"
                rows.append((str(r["hb_domain"]), net, what, *[""] * 11))
                continue
            load = c["load"]
            rows.append(
                (
                    *_configuration_row(str(r["hb_domain"]), net, c)[:9],
                    f"{load['arrival_rate']:.4g}",
                    f"{load['capacity_share']:.0%}",
                    f"{load['ttft_p99_s']:.2f} s",
                    f"{load['tpot_p99_s'] * 1e3:.0f} ms",
                    f"{load['tokens_per_s_per_gpu']:,.0f}",
                )
            )
    proven = all(not any(r["under_load"]["not_simulated"].values()) for r in results)
    found = any(c is not None for r in results for c in r["under_load"]["by_network"].values())
    title = "under Poisson load: the most requests/s with p99 TTFT and TPOT within the limits" + (
        " (not proven: see the notes)"
        if not proven
        else " (proven over every steady-state choice)"
        if found
        else ""
    )
    extra = ("req/s", "of cap.", "TTFT p99", "TPOT p99", "tok/s/GPU")
    return table(title, (*columns, *extra), rows)


def _not_simulated_lines(r: dict[str, Any]) -> list[str]:
    """Per network of one HB-domain size whose search under load stopped at its limit, how many
    choices left could still serve more than its best (or meet the limits, where none did), and
    the option that simulates them; one line where every network is alike (the same runs
    inside one HB domain)."""
    from railplan.inference.loaded import MAX_LOAD_CANDIDATES

    ul = r["under_load"]
    left: dict[str, int] = ul["not_simulated"]
    found = {net: ul["by_network"].get(net) is not None for net in left}
    alike = len(left) > 1 and len(set(left.values())) == 1 and len(set(found.values())) == 1
    where = {"every network": next(iter(left))} if alike else {net: net for net in left}
    lines = []
    for label, net in where.items():
        n = left[net]
        if not n:
            continue
        could = (
            "could serve more than the best found (steady-state capacity above its rate)"
            if found[net]
            else "could meet the limits under load (none simulated did)"
        )
        more = ul["candidates"] + n
        # past the option's maximum only "no limit" can take them all
        option = (
            f"--load-candidates {more} (or 0)"
            if more <= MAX_LOAD_CANDIDATES
            else "--load-candidates 0 (no limit)"
        )
        lines.append(
            f"K = {r['hb_domain']}, {label}: {n:,} choice{'s' * (n != 1)} not simulated "
            f"{could}; {option} simulates them"
        )
    return lines


#: the share of a configuration's capacity `infer-search` proposes to check it under load at
LOAD_CHECK_SHARE = 0.9


def _load_check_command(
    model: str,
    system: str,
    best: dict[str, Any],
    speculative_tokens: int,
    acceptance: float | None,
    custom_all_reduce: bool,
) -> str:
    """The `railplan infer` command that simulates `best` under Poisson arrivals: at
    LOAD_CHECK_SHARE of the requests/s it can serve, or, for a best under load (`load`), at
    the rate found, over the requests that run took."""
    import shlex

    from railplan.specs.strategy import option_text

    load = best.get("load")
    rate = (
        load["arrival_rate"]
        if load
        else LOAD_CHECK_SHARE * best["tokens_per_s"] / best["output_tokens"]
    )
    args = [
        "railplan infer",
        f"--model {shlex.quote(model)}",
        f"--system {shlex.quote(system)}",
        f"--hb-domain {best['hb_domain']}",
        f"--network {best['network']}",
        f"--gpus {best['gpus']} --tp {best['tp']} --pp {best['pp']} --ep {best['ep']}",
        "--two-batch-overlap" if best["two_batch_overlap"] else "",
        f"--batch {best['batch']}",
        f"--precision {best['precision']}",
        f"--input-tokens {best['input_tokens']} --output-tokens {best['output_tokens']}",
        f"--prefill-gpus {best['prefill_gpus']}" if best["prefill_gpus"] else "",
        f"--speculative-tokens {speculative_tokens}" if speculative_tokens else "",
        f"--acceptance {option_text(acceptance)}" if acceptance is not None else "",
        "" if custom_all_reduce else "--no-custom-all-reduce",
        f"--arrival-rate {rate!r}" if load else f"--arrival-rate {rate:.4g}",
        f"--requests {load['requests']}" if load else "",
    ]
    return " ".join(a for a in args if a)


def _traffic_lines(t: dict[str, Any]) -> list[str]:
    """One line per traffic summary of `traffic.configuration_traffic`."""
    names = {"decode_step": "one decode step", "kv_transfer_per_prompt": "one prompt's KV cache"}
    return [
        f"{names[key]}: {fmt_bytes(s['total_bytes'])} ({fmt_bytes(s['hb_bytes'])} in HB "
        f"domains, {fmt_bytes(s['nic_bytes'])} over NICs, {fmt_bytes(s['cross_rail_bytes'])} "
        "cross-rail)"
        for key, s in t.items()
    ]


def _configurations_table(title: str, results: list[dict[str, Any]]) -> Table:
    """The best configuration per HB-domain size and network (or that none meets the limits)."""
    columns = ("K", "network", "mode", "tp", "pp", "ep", "TBO", "batch", "P:D GPUs", "TTFT", "TPOT")
    rows = [
        _configuration_row(str(r["hb_domain"]), net, c, fits=r["evaluated"] > 0)
        for r in results
        for net, c in r["by_network"].items()
    ]
    return table(title, (*columns, "tok/s/GPU"), rows)


def _configuration_row(
    k: str, net: str, c: dict[str, Any] | None, fits: bool = True
) -> tuple[str, ...]:
    """One row of `infer-search`'s table: the configuration chosen on one network (`fits`:
    some configuration fits in memory at all)."""
    if c is None:
        return (k, net, "none meets the limits" if fits else "none fits in memory", *[""] * 9)
    ratio = f"{c['prefill_gpus']}:{c['decode_gpus']}" if c["prefill_gpus"] else "-"
    return (
        k,
        net,
        c["mode"],
        str(c["tp"]),
        str(c["pp"]),
        str(c["ep"]),
        "yes" if c["two_batch_overlap"] else "-",
        str(c["batch"]),
        ratio,
        f"{c['ttft_s']:.2f} s",
        f"{c['tpot_s'] * 1e3:.0f} ms",
        f"{c['tokens_per_s_per_gpu']:,.0f}",
    )
