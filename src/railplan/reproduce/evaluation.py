"""The paper's evaluation (Figs 7-10) and seed 002's NIC-count experiment, ours beside theirs.

Every point of Figs 8-10 is a full strategy search (`railplan.explore.search`) in the space Calculon
searches for Megatron-LM (the paper enumerates "all parallelization strategies" the way
Calculon does): tp, pp, dp, interleaving, micro-batch, recompute none/selective/full, sequence
parallelism, distributed optimizer (ZeRO-1) or not; the gradient reduction overlaps the backward
pass. Hardware: DGX GH200 parameters (H100-class GPU, 3.6 Tbps HB, 400 Gbps NIC per GPU) with
the HB-domain size K overridden; rail-only network; "ideal" is one HB domain of all N GPUs.

The paper's numbers are constants here for the comparison only; nothing is fitted to them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from railplan.errors import RailplanError
from railplan.explore.search import MEGATRON_SPACE, SearchResult, search
from railplan.reproduce import views
from railplan.specs import Job, Network, System, load_model, load_system

K_VALUES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
FIG8_CLUSTERS = (16384, 32768, 65536)
FIG8_MODELS = (("gpt-1t", 4096), ("gpt-146b", 1024))
FIG9_GPUS = 32768  # the paper does not state N for Fig 9; the middle cluster of Fig 8
FIG9_HB_TBPS = (2.4, 4.8, 7.2, 9.6)
FIG9_NIC_GBPS = (100.0, 200.0, 300.0, 400.0)
FIG9_K = (8, 256)
FIG10_GPUS = 32768
FIG10_BATCHES = (256, 512, 1024, 2048, 4096)
FIG10_K = (8, 16, 32, 64, 128, 256)

# Seed 002 (SK Telecom TITAN, DGX A100 80GB, 8x HDR 200 Gbps per node): a 175B model, iteration
# time with 8 / 4 / 2 / 1 NICs per node. The talk gives no strategy, GPU count or batch; it
# computes FLOPs for GPT-3 175B at batch 1024 and the cluster has 1,040 GPUs (130 nodes).
NIC_COUNT_GPUS = 1024  # 128 nodes: the largest power-of-two job on the 130-node cluster
NIC_COUNT_BATCH = 1024
NIC_COUNT_NICS = (8, 4, 2, 1)
NIC_COUNT_MEASURED_MS = (32209.0, 32492.0, 37105.0, 50368.0)

# The paper's statements (§V), for the comparison only.
PAPER_FIG7_ERROR_PCT: dict[str, float] = {"gpt-1t": 1.8, "gpt-22b": 10.8}
PAPER_FIG8_K256_VS_IDEAL_PCT: dict[str, float] = {"gpt-1t": 0.9, "gpt-146b": 4.1}
PAPER_FIG8_GPT146B_K1_TO_8_PCT = 43.3
PAPER_FIG8_GPT146B_K8_TO_256_PCT = 30.6
#: Fig 8's "K a→b cuts time" claims per model, checked at every cluster size: K from, K to, the
#: paper's percentage (None: the paper says it only in words) and a note on the claim.
FIG8_K_CUTS: dict[str, tuple[tuple[int, int, float | None, str], ...]] = {
    "gpt-146b": (
        (1, 8, PAPER_FIG8_GPT146B_K1_TO_8_PCT, ""),
        (8, 256, PAPER_FIG8_GPT146B_K8_TO_256_PCT, ""),
    ),
    "gpt-1t": ((32, 256, None, " (paper: flat past K≈32)"),),
}
PAPER_FIG9_HB_X4_GAIN_PCT: dict[int, float] = {8: 8.0, 256: 13.3}
PAPER_FIG9_NIC_X4_GAIN_PCT: dict[int, float] = {8: 35.9, 256: 8.0}
PAPER_FIG10_RELATIVE_PCT: dict[int, tuple[float, float]] = {256: (95.0, 99.0), 8: (65.0, 85.0)}


def gh200(hb_domain: int, hb_tbps: float | None = None, nic_gbps: float | None = None) -> System:
    """DGX GH200 parameters with K (and optionally the bandwidths) overridden."""
    base = load_system("dgx-gh200").model_dump()
    over: dict[str, Any] = {"hb_domain": hb_domain}
    if hb_tbps is not None:
        over["hb_tbps"] = hb_tbps
    if nic_gbps is not None:
        over["nic_gbps"] = nic_gbps
    return System.parse(base | over, "system")


RAIL_ONLY = Network(architecture="rail-only")
IDEAL = Network(architecture="ideal")


def best(job: Job) -> SearchResult:
    """The fastest strategy that fits (the paper's search space)."""
    return search(job, MEGATRON_SPACE, top=1)


def _point(job: Job, **fields: Any) -> dict[str, Any]:
    """A figure's point: the job's model, GPUs and batch, `fields`, then the best strategy's
    time, MFU and largest overhead (None when no strategy fits)."""
    b = best(job).best
    fields = {"model": job.model.name, "gpus": job.gpus, "batch": job.global_batch, **fields}
    if b is None:
        return {**fields, "iteration_s": None, "mfu": None, "strategy": None}
    dominant = max((k for k in b.breakdown_s if k != "compute"), key=lambda k: b.breakdown_s[k])
    return {
        **fields,
        "iteration_s": b.iteration_s,
        "mfu": b.mfu,
        "strategy": b.strategy.model_dump(),
        "breakdown_s": b.breakdown_s,
        "largest_overhead": dominant,
    }


def _pct_less(new: float, old: float) -> float:
    """How much shorter `new` is than `old`, in percent."""
    return 100.0 * (1.0 - new / old)


def _cmp(claim: str, paper: float | None, ours: float) -> dict[str, Any]:
    return {
        "claim": claim,
        "paper": paper,
        "ours": ours,
        "diff_points": None if paper is None else ours - paper,
    }


def _report(
    figure: str,
    setup: str,
    points: list[dict[str, Any]],
    comparisons: list[dict[str, Any]],
    **extra: Any,
) -> dict[str, Any]:
    """A figure's report: what was run, our points and the paper-vs-ours comparisons."""
    return {"figure": figure, "setup": setup, **extra, "points": points, "comparisons": comparisons}


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def fig7() -> dict[str, Any]:
    """HFU predicted vs measured for Korthikanti et al.'s selective-recompute runs."""
    from railplan.reproduce.validation import korthikanti_rows

    points, comparisons = [], []
    for r in korthikanti_rows():
        if "selective" not in r.label:
            continue
        # Korthikanti state HFU except for the 2240-GPU run; there it follows from the
        # measured time with the same FLOP count (HFU ∝ 1 / time).
        measured = r.paper_hfu if r.paper_hfu is not None else r.hfu * r.predicted / r.measured
        model, gpus = r.label.split()[0], int(r.label.split()[-2])
        err = 100.0 * (r.hfu - measured) / measured
        points.append(
            {
                "model": model,
                "gpus": gpus,
                "measured_hfu": measured,
                "predicted_hfu": r.hfu,
                "error_pct": err,
                "hfu_stated": r.paper_hfu is not None,
            }
        )
        if model in PAPER_FIG7_ERROR_PCT:
            comparisons.append(
                _cmp(f"{model} {gpus} GPUs: |HFU error| %", PAPER_FIG7_ERROR_PCT[model], abs(err))
            )
    return _report(
        "fig7",
        "Korthikanti et al. 2022 Table 5 runs, selective recompute + sequence "
        "parallelism, DGX A100 (their stated strategy, no search)",
        points,
        comparisons,
    )


def fig8() -> dict[str, Any]:
    """Best iteration time vs K, rail-only and ideal, GPT-1T and GPT-146B."""
    points: list[dict[str, Any]] = []
    t: dict[tuple[str, int, int | str], float] = {}
    for name, batch in FIG8_MODELS:
        model = load_model(name)
        for n in FIG8_CLUSTERS:
            for k in K_VALUES:
                p = _point(
                    Job(model, gh200(k), RAIL_ONLY, n, batch), hb_domain=k, network="rail-only"
                )
                points.append(p)
                t[name, n, k] = p["iteration_s"]
            p = _point(Job(model, gh200(256), IDEAL, n, batch), hb_domain=n, network="ideal")
            points.append(p)
            t[name, n, "ideal"] = p["iteration_s"]
    comparisons = []
    for name, _ in FIG8_MODELS:
        for n in FIG8_CLUSTERS:
            comparisons.append(
                _cmp(
                    f"{name} N={n}: K=256 slower than ideal, %",
                    PAPER_FIG8_K256_VS_IDEAL_PCT[name],
                    100.0 * (t[name, n, 256] / t[name, n, "ideal"] - 1.0),
                )
            )
    for name, cuts in FIG8_K_CUTS.items():
        for n in FIG8_CLUSTERS:
            for k_from, k_to, paper, note in cuts:
                label = f"{name} N={n}: K {k_from}→{k_to} cuts time, %{note}"
                cut = _pct_less(t[name, n, k_to], t[name, n, k_from])
                comparisons.append(_cmp(label, paper, cut))
    return _report(
        "fig8",
        "DGX GH200 parameters, K overridden, rail-only; ideal = one HB domain of N "
        "GPUs; GPT-1T batch 4096, GPT-146B batch 1024; best strategy per point",
        points,
        comparisons,
    )


def fig9() -> dict[str, Any]:
    """GPT-1T: HB bandwidth × NIC bandwidth at K = 8 and 256."""
    model = load_model("gpt-1t")
    points: list[dict[str, Any]] = []
    t: dict[tuple[int, float, float], float] = {}
    for k in FIG9_K:
        for hb in FIG9_HB_TBPS:
            for nic in FIG9_NIC_GBPS:
                job = Job(model, gh200(k, hb, nic), RAIL_ONLY, FIG9_GPUS, 4096)
                p = _point(job, hb_domain=k, hb_tbps=hb, nic_gbps=nic)
                points.append(p)
                t[k, hb, nic] = p["iteration_s"]
    lo_hb, hi_hb = FIG9_HB_TBPS[0], FIG9_HB_TBPS[-1]
    lo_nic, hi_nic = FIG9_NIC_GBPS[0], FIG9_NIC_GBPS[-1]
    comparisons = []
    for k in FIG9_K:
        hb_gain = _mean([_pct_less(t[k, hi_hb, nic], t[k, lo_hb, nic]) for nic in FIG9_NIC_GBPS])
        nic_gain = _mean([_pct_less(t[k, hb, hi_nic], t[k, hb, lo_nic]) for hb in FIG9_HB_TBPS])
        comparisons.append(
            _cmp(
                f"K={k}: HB ×4 (2.4→9.6 Tbps) gain, % (mean over NIC)",
                PAPER_FIG9_HB_X4_GAIN_PCT[k],
                hb_gain,
            )
        )
        comparisons.append(
            _cmp(
                f"K={k}: NIC ×4 (100→400 Gbps) gain, % (mean over HB)",
                PAPER_FIG9_NIC_X4_GAIN_PCT[k],
                nic_gain,
            )
        )
    return _report(
        "fig9",
        f"GPT-1T batch 4096 on {FIG9_GPUS} GPUs (N not stated in the paper), "
        "rail-only, GH200 parameters with HB and NIC bandwidth overridden",
        points,
        comparisons,
    )


def fig10() -> dict[str, Any]:
    """GPT-1T on 32768 GPUs: iteration time and performance relative to ideal vs batch."""
    model = load_model("gpt-1t")
    points: list[dict[str, Any]] = []
    t: dict[tuple[int | str, int], float] = {}
    for batch in FIG10_BATCHES:
        job = Job(model, gh200(256), IDEAL, FIG10_GPUS, batch)
        p = _point(job, hb_domain=FIG10_GPUS, network="ideal", relative_to_ideal=1.0)
        points.append(p)
        t["ideal", batch] = p["iteration_s"]
        for k in FIG10_K:
            job = Job(model, gh200(k), RAIL_ONLY, FIG10_GPUS, batch)
            p = _point(job, hb_domain=k, network="rail-only")
            p["relative_to_ideal"] = t["ideal", batch] / p["iteration_s"]
            points.append(p)
            t[k, batch] = p["iteration_s"]
    lo, hi = FIG10_BATCHES[0], FIG10_BATCHES[-1]
    comparisons = []
    for k in (256, 8):
        for batch, paper in zip((lo, hi), PAPER_FIG10_RELATIVE_PCT[k], strict=True):
            relative = 100.0 * t["ideal", batch] / t[k, batch]
            comparisons.append(_cmp(f"K={k}, batch {batch}: relative to ideal, %", paper, relative))
    return _report(
        "fig10",
        f"GPT-1T on {FIG10_GPUS} GPUs, GH200 parameters, rail-only vs ideal "
        f"(K = {FIG10_GPUS}), best strategy per point",
        points,
        comparisons,
    )


def nic_count() -> dict[str, Any]:
    """Seed 002: 175B on DGX A100 with 8/4/2/1 NICs per node (a sweep over nics_per_gpu)."""
    from railplan.perf.estimate import estimate

    model = load_model("gpt-175b")
    base = load_system("dgx-a100")
    systems = [
        System.parse(base.model_dump() | {"nics_per_gpu": nics / base.hb_domain}, "system")
        for nics in NIC_COUNT_NICS
    ]
    net = Network()
    searched = [best(Job(model, s, net, NIC_COUNT_GPUS, NIC_COUNT_BATCH)) for s in systems]
    t_search = [r.best.iteration_s if r.best else float("nan") for r in searched]
    # The measurement kept one strategy while unplugging NICs: the best one with 8 NICs.
    fixed = searched[0].best
    t_fixed = (
        [estimate(model, s, fixed.strategy, net).iteration_s for s in systems]
        if fixed
        else [float("nan")] * len(systems)
    )
    points: list[dict[str, Any]] = []
    for i, nics in enumerate(NIC_COUNT_NICS):
        r = searched[i]
        points.append(
            {
                "nics_per_node": nics,
                "nics_per_gpu": nics / base.hb_domain,
                "measured_ms": NIC_COUNT_MEASURED_MS[i],
                "measured_relative": NIC_COUNT_MEASURED_MS[i] / NIC_COUNT_MEASURED_MS[0],
                "fixed_strategy_s": t_fixed[i],
                "fixed_strategy_relative": t_fixed[i] / t_fixed[0],
                "searched_s": t_search[i],
                "searched_relative": t_search[i] / t_search[0],
                "searched_strategy": r.best.strategy.model_dump() if r.best else None,
            }
        )
    comparisons = [
        _cmp(
            f"{p['nics_per_node']} NICs/node, fixed strategy: relative time ×100",
            100.0 * p["measured_relative"],
            100.0 * p["fixed_strategy_relative"],
        )
        for p in points
    ]
    return _report(
        "nic-count",
        f"GPT-175B (seq 2048) on {NIC_COUNT_GPUS} A100 (DGX A100, rail-optimized "
        f"full-bisection HDR), batch {NIC_COUNT_BATCH}; fixed = the best strategy with 8 NICs "
        "kept for every NIC count; searched = best strategy per NIC count",
        points,
        comparisons,
        fixed_strategy=fixed.strategy.model_dump() if fixed else None,
    )


@dataclass(frozen=True)
class Figure:
    """One reproduction: how to compute it and how it looks (its command's help is
    `railplan.names.REPRODUCE_FIGURES`, importable without this module)."""

    run: Callable[[], dict[str, Any]]
    table: Callable[[dict[str, Any]], dict[str, Any]]
    draw: Callable[[list[dict[str, Any]]], Any]


FIGURES: dict[str, Figure] = {
    "fig7": Figure(fig7, views.fig7_table, views.fig7_draw),
    "fig8": Figure(fig8, views.search_table, views.fig8_draw),
    "fig9": Figure(fig9, views.search_table, views.fig9_draw),
    "fig10": Figure(fig10, views.search_table, views.fig10_draw),
    "nic-count": Figure(nic_count, views.nic_count_table, views.nic_count_draw),
}


def run(name: str) -> dict[str, Any]:
    """One figure's report: setup, points (ours), comparisons (paper vs ours)."""
    if name not in FIGURES:
        raise RailplanError("figure", f"{name!r} is not one of {', '.join(FIGURES)}")
    return FIGURES[name].run()


def tables(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows of strings for a human table: our points, then paper vs ours."""
    return [FIGURES[report["figure"]].table(report), views.comparison_table(report)]


check_plot_path = views.check_plot_path


def plot(report: dict[str, Any], path: Path) -> None:
    """Our curves (matplotlib, Agg) in the layout of the paper's figure, written all or
    nothing to `path` (.png, .svg or .pdf)."""
    views.save(FIGURES[report["figure"]].draw, report["points"], path)
