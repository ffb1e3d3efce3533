"""CLI commands of the inference part: `infer` (one deployment, optionally under Poisson load or a
sweep of rates) and `infer-search` (the best serving configuration per network)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from railplan.cli.options import (
    HbDomainOpt,
    HbTbpsOpt,
    JsonOpt,
    NetworkOpt,
    NicGbpsOpt,
    NicsPerGpuOpt,
    OversubscriptionOpt,
)
from railplan.errors import RailplanError

PrecisionOpt = Annotated[str, typer.Option(help="bf16 | fp8 | fp4 (weights and GEMMs)")]
InputOpt = Annotated[int, typer.Option(help="prompt tokens per request (1-1e7)")]
OutputOpt = Annotated[int, typer.Option(help="output tokens per request (1-1e7)")]


def _floats(field: str, text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise RailplanError(field, f"must be comma-separated numbers; got {text!r}") from None
    if not values:
        raise RailplanError(field, "must list at least one number")
    return values


def _table(title: str, rows: list[tuple[str, str]]) -> None:
    t = Table(title=title)
    t.add_column("quantity")
    t.add_column("value", justify="right")
    for k, v in rows:
        t.add_row(k, v)
    Console().print(t)


def _check_figures(**paths: str | None) -> None:
    """Refuse, before any work, a figure path with a wrong suffix or an unwritable target."""
    from railplan.fileio import check_target
    from railplan.traffic_plots import FIGURE_SUFFIXES, check_suffix

    for field, path in paths.items():
        if path is not None:
            check_target(check_suffix(path, FIGURE_SUFFIXES, field), field)


def _decode_traffic(
    dep: Any, r: Any, out: dict[str, Any], traffic: bool, heatmap: str | None
) -> None:
    """One decode step's traffic: its summary into `out`, its heatmap to `heatmap`."""
    from railplan.inference.traffic import decode_step_traffic

    step = decode_step_traffic(dep, r.batch)
    if traffic:
        out["decode_step_traffic"] = step.summary()
    if heatmap is not None:
        from railplan.traffic_plots import heatmap as draw

        draw(
            step,
            heatmap,
            64,
            f"one decode step of {r.model}, batch {r.batch}",
            "bytes per decode step",
        )


def _print_infer(r: Any, out: dict[str, Any], how: str, traffic: bool) -> None:
    """The steady-state table of `infer` and, with --traffic, the decode step's bytes."""
    _table(
        f"{r.model} on {r.gpus} GPUs of {r.system} ({r.network}), {how}, "
        f"{r.input_tokens} in / {r.output_tokens} out",
        [
            ("batch per tp·pp group (largest that fits)", f"{r.batch} ({r.max_batch})"),
            ("fits in memory", "yes" if r.fits else "NO"),
            ("TTFT (no queueing)", f"{r.ttft_s * 1e3:.1f} ms"),
            ("TPOT", f"{r.tpot_s * 1e3:.1f} ms"),
            ("output tokens/s per GPU", f"{r.tokens_per_s_per_gpu:,.0f}"),
            ("output tokens/s, all GPUs", f"{r.tokens_per_s:,.0f}"),
            ("weights per GPU", f"{r.weights_gib_per_gpu:.1f} GiB"),
            (
                "KV cache per GPU (pool)",
                f"{r.kv_cache_gib_per_gpu:.1f} ({r.kv_capacity_gib_per_gpu:.1f}) GiB",
            ),
        ]
        + [(f"step: {k}", f"{v * 1e3:.2f} ms") for k, v in r.breakdown_s.items() if v > 0],
    )
    if traffic:
        tr = out["decode_step_traffic"]
        _table(
            f"one decode step, batch {r.batch} per tp·pp group",
            [
                (name.replace("_", " "), f"{tr[name] / 1e6:,.1f} MB")
                for name in ("total_bytes", "hb_bytes", "nic_bytes", "cross_rail_bytes")
            ],
        )


def _print_sweep(sweep: list[Any]) -> None:
    """The rate sweep of `infer --arrival-rate`."""
    t = Table(title="Poisson arrivals, continuous batching (one replica simulated)")
    for col in (
        "req/s",
        "tokens/s/GPU",
        "TTFT mean",
        "TTFT p99",
        "TPOT mean",
        "TPOT p99",
        "stable",
    ):
        t.add_column(col, justify="right")
    for s in sweep:
        t.add_row(
            f"{s.arrival_rate:g}",
            f"{s.tokens_per_s_per_gpu:,.0f}",
            f"{s.ttft_mean_s * 1e3:.0f} ms",
            f"{s.ttft_p99_s * 1e3:.0f} ms",
            f"{s.tpot_mean_s * 1e3:.1f} ms",
            f"{s.tpot_p99_s * 1e3:.1f} ms",
            {True: "yes", False: "no (queue grows)", None: "? (more --requests)"}[s.stable],
        )
    Console().print(t)


def infer(
    model: Annotated[str, typer.Option(help="catalog name or YAML file")] = "llama-2-70b",
    system: Annotated[str, typer.Option(help="catalog name or YAML file")] = "dgx-h100",
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
    network: NetworkOpt = "rail-optimized",
    oversubscription: OversubscriptionOpt = None,
    hb_domain: HbDomainOpt = None,
    hb_tbps: HbTbpsOpt = None,
    nic_gbps: NicGbpsOpt = None,
    nics_per_gpu: NicsPerGpuOpt = None,
    arrival_rate: Annotated[
        str | None,
        typer.Option(help="requests/s (Poisson); a comma list sweeps the rates"),
    ] = None,
    requests: Annotated[
        int, typer.Option(help="requests simulated per rate, on one replica (1-200000)")
    ] = 2000,
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
    Poisson load with --arrival-rate (mean and p99, a sweep with a plot)."""
    from railplan.cli.core import print_json
    from railplan.inference.engine import Deployment
    from railplan.inference.estimate import infer as run
    from railplan.inference.serving import rate_sweep
    from railplan.specs.build import build_network, build_system
    from railplan.specs.catalog import load_model

    rates = _floats("arrival_rate", arrival_rate) if arrival_rate is not None else []
    if plot is not None and not rates:
        raise RailplanError("plot", "needs --arrival-rate (a comma list of rates)")
    _check_figures(plot=plot, heatmap=heatmap)
    sy = build_system(system, hb_domain, hb_tbps, nic_gbps, nics_per_gpu)
    net = build_network(network, oversubscription)
    dep = Deployment(load_model(model), sy, net, gpus, tp, pp, ep, precision)
    r = run(dep, batch, input_tokens, output_tokens)
    out: dict[str, Any] = r.to_dict()
    sweep = rate_sweep(dep, rates, input_tokens, output_tokens, batch, requests) if rates else []
    if sweep:
        out["serving"] = [s.to_dict() for s in sweep]
    if traffic or heatmap is not None:
        _decode_traffic(dep, r, out, traffic, heatmap)
    if plot is not None:
        from railplan.inference.plots import rate_sweep_plot

        rate_sweep_plot(sweep, plot, f"{r.model} on {gpus}× {r.system} (tp{tp} pp{pp})")
    if as_json:
        print_json(out)
        return
    _print_infer(r, out, f"tp {tp} pp {pp} ep {ep}, {precision}", traffic)
    if sweep:
        _print_sweep(sweep)
    if plot is not None:
        Console().print(f"wrote {plot}")


def _print_infer_search(
    title: str, results: list[dict[str, Any]], best: dict[str, Any] | None
) -> None:
    """`infer-search`'s table (per K and network), the spine verdicts and the best."""
    t = Table(title=title)
    for col in (
        "K",
        "network",
        "mode",
        "tp",
        "pp",
        "ep",
        "batch",
        "P:D GPUs",
        "TTFT",
        "TPOT",
        "tok/s/GPU",
    ):
        t.add_column(col, justify="right")
    for r in results:
        for net, c in r["by_network"].items():
            if c is None:
                t.add_row(str(r["hb_domain"]), net, "none meets the limits", *[""] * 8)
                continue
            ratio = f"{c['prefill_gpus']}:{c['decode_gpus']}" if c["prefill_gpus"] else "-"
            t.add_row(
                str(r["hb_domain"]),
                net,
                c["mode"],
                str(c["tp"]),
                str(c["pp"]),
                str(c["ep"]),
                str(c["batch"]),
                ratio,
                f"{c['ttft_s']:.2f} s",
                f"{c['tpot_s'] * 1e3:.0f} ms",
                f"{c['tokens_per_s_per_gpu']:,.0f}",
            )
    Console(width=max(Console().width, 120)).print(t)
    for r in results:
        Console().print(f"K = {r['hb_domain']}: {r['verdict']}")
    if best:
        Console().print(
            f"best: K = {best['hb_domain']}, {best['best']['mode']} tp {best['best']['tp']} "
            f"pp {best['best']['pp']}, {best['best']['tokens_per_s_per_gpu']:,.0f} tokens/s "
            "per GPU"
        )


def infer_search(
    model: Annotated[str, typer.Option(help="catalog name or YAML file")] = "llama-3-405b",
    system: Annotated[str, typer.Option(help="catalog name or YAML file")] = "gb200-nvl72",
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
    as_json: JsonOpt = False,
) -> None:
    """The configuration (tp/pp/ep/batch, aggregated or disaggregated prefill/decode) with
    the most output tokens/s per GPU within the TTFT/TPOT limits, on each network; does
    serving need a spine?"""
    from railplan.cli.core import print_json
    from railplan.cli.network import _int_list
    from railplan.inference.search import search, with_hb_domain
    from railplan.specs.catalog import load_model, load_system

    m, base = load_model(model), load_system(system)
    ks = _int_list("hb_domains", hb_domains) if hb_domains else [base.hb_domain]
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
        )
        for k in ks
    ]
    found = [r for r in results if r["best"]]
    best = max(found, key=lambda r: r["best"]["tokens_per_s_per_gpu"]) if found else None
    out = {
        "best": best["best"] | {"hb_domain": best["hb_domain"]} if best else None,
        "by_hb_domain": results,
    }
    if as_json:
        print_json(out)
        return
    title = (
        f"{m.name} on {gpus} GPUs of {base.name}, {precision}, {input_tokens} in / "
        f"{output_tokens} out, TTFT ≤ {ttft_slo:g} s, TPOT ≤ {tpot_slo * 1e3:g} ms"
    )
    _print_infer_search(title, results, best)


def register(app: typer.Typer, reproduce_app: typer.Typer) -> None:
    """Add the inference commands."""
    app.command()(infer)
    app.command("infer-search")(infer_search)
