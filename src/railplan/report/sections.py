"""The report's sections as plain data: each function calls library functions and returns
JSON-ready dicts. Nothing here models anything itself; the numbers come from
`railplan.explore.search`, `railplan.network.cost`, `railplan.network.faults`,
`railplan.traffic.matrix` and `railplan.reproduce.validation`, the same functions the other
commands print.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass, field, replace
from importlib import resources
from typing import Any

from railplan.errors import RailplanError, near_multiples
from railplan.explore.pool import worker_pool
from railplan.explore.search import SearchResult, SearchSpace, search
from railplan.limits import MAX_GLOBAL_BATCH, MAX_GPUS, check_int
from railplan.network.cost import Comparison, PriceBook, compare
from railplan.network.faults import (
    FailureRates,
    Policy,
    check_monte_carlo,
    fault_table,
    monte_carlo,
)
from railplan.network.ocs import spares_per_domain, tradeoff
from railplan.network.topology import NIC_SPEEDS_GBPS, Cluster, check_radix
from railplan.specs import Job, Model, Network, Strategy, System
from railplan.traffic.matrix import stats, traffic
from railplan.traffic.placement import build_placement

NETWORKS: tuple[str, ...] = ("rail-optimized", "rail-only", "ideal")
SENSITIVITY_K: tuple[int, ...] = (8, 16, 32, 64, 128, 256)
HB_FACTORS: tuple[float, ...] = (1.0, 2.0, 4.0)
NIC_FACTORS: tuple[float, ...] = (0.25, 0.5, 1.0)
BATCH_FACTORS: tuple[float, ...] = (0.25, 0.5, 1.0)
SWEEP_NETWORKS: tuple[str, ...] = ("rail-optimized", "rail-only")
SEARCH_TOP = 3  # candidates kept per search (the performance section lists them)
HEATMAP_MAX_GPUS = 128  # heatmap of the first GPUs: enough for 16 DGX-sized HB domains
MC_DAYS = 54.0  # the Llama 3 observation window the failure rates come from
MC_TRIALS = 1000


@dataclass(frozen=True)
class ReportInputs:
    """What the architect asks about: a model on `gpus` GPUs of `system`, a global batch, the
    switch radix of the NIC domain and the price book for cost and power."""

    model: Model
    system: System
    gpus: int
    global_batch: int
    radix: int
    price_book: PriceBook
    space: SearchSpace = field(default_factory=SearchSpace)
    mc_trials: int = MC_TRIALS
    seed: int = 0
    # processes for the strategy searches (`prefetch_searches`): 1 runs them in this process
    # as the sections ask, 0 one per available core
    workers: int = 1
    # Searches already run, by (system, network, batch): the sections ask for the same one
    # several times (the system's own K, bandwidth factor 1, batch factor 1, ideal).
    searches: dict[tuple[str, str, int], SearchResult] = field(
        default_factory=dict, compare=False, repr=False
    )

    def describe(self) -> dict[str, Any]:
        return {
            "model": self.model.name,
            "system": self.system.name,
            "gpu": self.system.gpu.name,
            "gpus": self.gpus,
            "global_batch": self.global_batch,
            "hb_domain": self.system.hb_domain,
            "hb_tbps": self.system.hb_tbps,
            "nic_gbps": self.system.nic_gbps,
            "nics_per_gpu": self.system.nics_per_gpu,
            "radix": self.radix,
            "price_book": self.price_book.name,
        }


def check_inputs(inp: ReportInputs) -> None:
    """One-line errors for inputs no section could use."""
    check_int("gpus", inp.gpus, 2, MAX_GPUS)
    check_int("global_batch", inp.global_batch, 1, MAX_GLOBAL_BATCH)
    check_int("workers", inp.workers, 0, MAX_GPUS)
    k = inp.system.hb_domain
    if inp.gpus % k:
        raise RailplanError(
            "gpus",
            f"must be a multiple of the HB-domain size K={k} (whole domains for the network "
            f"counts); nearest: {near_multiples(inp.gpus, k)}",
        )
    if inp.system.nics_per_gpu != int(inp.system.nics_per_gpu):
        raise RailplanError(
            "nics-per-gpu",
            f"the report counts switches and transceivers, so it needs a whole number of NICs "
            f"per GPU (1-16); got {inp.system.nics_per_gpu:g}",
        )
    # what the network and failure sections would refuse, before the searches run
    check_radix(inp.radix)
    check_monte_carlo(_fault_cluster(inp), days=MC_DAYS, trials=inp.mc_trials, seed=inp.seed)


def _fault_cluster(inp: ReportInputs) -> Cluster:
    """The cluster the failure section counts and simulates: the system's NIC speed (the
    nearest one the counts know for an unusual one) and NICs per GPU, as the cost section has
    them."""
    speed = inp.system.nic_gbps
    nic = min(NIC_SPEEDS_GBPS, key=lambda s: (abs(s - speed), s))
    return Cluster(inp.gpus, inp.system.hb_domain, inp.radix, nic, int(inp.system.nics_per_gpu))


# ---------------------------------------------------------------------------------------------
# performance


def _best(r: SearchResult) -> dict[str, Any] | None:
    return r.best.to_dict() if r.best else None


def _search_key(system: System, arch: str, batch: int) -> tuple[str, str, int]:
    return (system.model_dump_json(), arch, batch)


def _run_search(inp: ReportInputs, system: System, arch: str, batch: int) -> SearchResult:
    job = Job(inp.model, system, Network(architecture=arch), inp.gpus, batch)
    return search(job, inp.space, top=SEARCH_TOP)


def best_search(inp: ReportInputs, system: System, arch: str, batch: int) -> SearchResult:
    """The library's strategy search for one network (fastest first), run once per question."""
    key = _search_key(system, arch, batch)
    if key not in inp.searches:
        inp.searches[key] = _run_search(inp, system, arch, batch)
    return inp.searches[key]


def prefetch_searches(
    inp: ReportInputs, on_search: Callable[[int, int], None] | None = None
) -> None:
    """Run every search the sections will ask for (`planned_searches`) on `inp.workers`
    processes (0: one per available core), so that the sections find them done;
    `on_search(done, total)` after each. Results are the same as run one by one (each search
    is deterministic); with `workers` 1 nothing runs here and the sections search as they go.
    It stops early, leaving the rest to the sections, when the rail-optimized search finds
    nothing that fits (the performance section then says so) or a worker dies (killed for
    memory, say: the sections then run what is missing in this process). Processes are
    spawned: a script calling this with workers ≠ 1 needs the `if __name__ == "__main__":`
    guard."""
    workers = inp.workers or available_cores()
    if workers <= 1:
        return
    todo: dict[tuple[str, str, int], tuple[System, str, int]] = {}
    for system, arch, batch in planned_searches(inp):
        key = _search_key(system, arch, batch)
        if key not in inp.searches:
            todo.setdefault(key, (system, arch, batch))
    if len(todo) <= 1:
        return
    first = _search_key(inp.system, NETWORKS[0], inp.global_batch)
    items = [(_without_searches(inp), key, args) for key, args in todo.items()]
    try:
        # spawn: no fork under the progress bar's thread
        with worker_pool(min(workers, len(todo)), "spawn") as pool:
            futures = [pool.submit(_search_item, item) for item in items]
            for done, f in enumerate(as_completed(futures), start=1):
                key, result = f.result()
                inp.searches[key] = result
                if on_search is not None:
                    on_search(done, len(todo))
                if key == first and result.best is None:
                    raise _NothingFits
    except (_NothingFits, BrokenProcessPool):
        return


class _NothingFits(Exception):
    """The rail-optimized search found no strategy: the other searches are not needed."""


def available_cores() -> int:
    """CPUs this process may run on (its affinity; all of them where that is unknown)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on every platform
        return os.cpu_count() or 1


def _search_item(
    item: tuple[ReportInputs, tuple[str, str, int], tuple[System, str, int]],
) -> tuple[tuple[str, str, int], SearchResult]:
    inp, key, (system, arch, batch) = item
    return key, _run_search(inp, system, arch, batch)


def _without_searches(inp: ReportInputs) -> ReportInputs:
    """The inputs a worker needs, without the results already held (not sent again)."""
    return replace(inp, searches={})


def pct_slower(t: float | None, ref: float | None) -> float | None:
    """How much longer `t` is than `ref`, as a fraction (None when either is missing)."""
    if t is None or ref is None or ref == 0:
        return None
    return t / ref - 1.0


def performance(inp: ReportInputs) -> dict[str, Any]:
    """Best strategy, iteration time and MFU on rail-optimized, rail-only and ideal."""
    results = {arch: best_search(inp, inp.system, arch, inp.global_batch) for arch in NETWORKS}
    results["rail-optimized"].require_best()
    nets = {
        arch: {
            "best": _best(r),
            "top": [c.to_dict() for c in r.top],
            "configurations_evaluated": r.configurations_evaluated,
            "feasible": r.feasible,
        }
        for arch, r in results.items()
    }

    def t(arch: str) -> float | None:
        b = results[arch].best
        return b.iteration_s if b else None

    return {
        "networks": nets,
        "rail_only_vs_rail_optimized": pct_slower(t("rail-only"), t("rail-optimized")),
        "rail_only_vs_ideal": pct_slower(t("rail-only"), t("ideal")),
        "rail_optimized_vs_ideal": pct_slower(t("rail-optimized"), t("ideal")),
    }


# ---------------------------------------------------------------------------------------------
# cost and power


def priced_speed(book: PriceBook, nic_gbps: float) -> int:
    """The NIC speed the cost is priced at: the system's if the price book has it, otherwise
    the book's nearest speed (the report says so beside the table)."""
    wanted = int(nic_gbps) if float(nic_gbps).is_integer() else -1
    if wanted in book.speeds:
        return wanted
    return min(book.speeds, key=lambda s: (abs(s - nic_gbps), s))


def _comparison(inp: ReportInputs) -> Comparison:
    """Rail-optimized, rail-only and rail-only+ocs counted and priced at the price book's speed
    (the cost section's, and the OCS layer the failure section weighs)."""
    speed = priced_speed(inp.price_book, inp.system.nic_gbps)
    cluster = Cluster(
        inp.gpus, inp.system.hb_domain, inp.radix, speed, int(inp.system.nics_per_gpu)
    )
    return compare(cluster, book=inp.price_book)


def cost(inp: ReportInputs) -> dict[str, Any]:
    """Switches, transceivers, dollars and watts of rail-optimized and rail-only."""
    speed = priced_speed(inp.price_book, inp.system.nic_gbps)
    c = _comparison(inp)
    note = ""
    if speed != inp.system.nic_gbps:
        note = (
            f"price book {inp.price_book.name!r} has no {inp.system.nic_gbps:g} Gbps prices; "
            f"the same switch and transceiver counts are priced at its {speed} Gbps figures "
            "(give --price-book FILE with your speed)"
        )
    return c.to_dict() | {
        "priced_at_gbps": speed,
        "system_nic_gbps": inp.system.nic_gbps,
        "note": note,
    }


# ---------------------------------------------------------------------------------------------
# traffic


def traffic_section(inp: ReportInputs, strategy: dict[str, Any]) -> dict[str, Any]:
    """Per-pair bytes of one iteration of the best rail-only strategy, placed rail-aligned
    (Megatron's order when no rail-aligned placement exists)."""
    s = Strategy.model_validate(strategy)
    k = inp.system.hb_domain
    placement = "rail-aligned"
    try:
        p = build_placement(
            "rail-aligned",
            s.tp,
            s.pp,
            s.dp,
            k,
            None,
            s.interleave,
            inp.model.tied_embeddings,
            s.cp,
        )
    except RailplanError:
        placement = "megatron"
        p = build_placement(
            "megatron", s.tp, s.pp, s.dp, k, None, s.interleave, inp.model.tied_embeddings, s.cp
        )
    t = traffic(inp.model, s, p)
    first = min(inp.gpus, HEATMAP_MAX_GPUS)
    return {
        "strategy": s.model_dump(),
        "placement": placement,
        "order": list(p.order),
        "stats": stats(t).to_dict(),
        "heatmap_gpus": first,
        "heatmap_bytes": t.dense(first).tolist(),
        "notes": list(t.notes),
    }


# ---------------------------------------------------------------------------------------------
# sensitivities


def override(system: System, **fields: Any) -> System:
    """The system with some fields replaced (validated again)."""
    return System.parse(system.model_dump() | fields, "system")


def _point(r: SearchResult, **fields: Any) -> dict[str, Any]:
    b = r.best
    return fields | {
        "network": r.job.network.architecture,
        "iteration_s": b.iteration_s if b else None,
        "mfu": b.mfu if b else None,
        "strategy": b.strategy.model_dump() if b else None,
    }


# One sweep point: the fields it reports, the system and network it searches on, the batch.
Point = tuple[dict[str, Any], System, str, int]


def hb_domain_points(inp: ReportInputs) -> list[Point]:
    """Every K in SENSITIVITY_K (and the system's own K) that divides the GPU count, on both
    networks."""
    ks = sorted({k for k in (*SENSITIVITY_K, inp.system.hb_domain) if inp.gpus % k == 0})
    return [
        ({"hb_domain": k}, override(inp.system, hb_domain=k), arch, inp.global_batch)
        for k in ks
        for arch in SWEEP_NETWORKS
    ]


def bandwidth_points(inp: ReportInputs, name: str, factors: tuple[float, ...]) -> list[Point]:
    """`name` (hb_tbps or nic_gbps) scaled by each factor, on both networks."""
    base, b = float(getattr(inp.system, name)), inp.global_batch
    return [
        ({"factor": f, name: base * f}, override(inp.system, **{name: base * f}), arch, b)
        for f in factors
        for arch in SWEEP_NETWORKS
    ]


def batch_points(inp: ReportInputs) -> list[Point]:
    """The global batch scaled by BATCH_FACTORS (whole numbers only), on both networks and,
    as the reference, ideal (its fields empty)."""
    out: list[Point] = []
    for f in BATCH_FACTORS:
        batch = inp.global_batch * f
        if not batch.is_integer() or batch < 1:
            continue
        b = int(batch)
        out.append(({}, inp.system, "ideal", b))
        out += [({"factor": f, "global_batch": b}, inp.system, a, b) for a in SWEEP_NETWORKS]
    return out


def planned_searches(inp: ReportInputs) -> list[tuple[System, str, int]]:
    """Every strategy search the performance and sensitivity sections ask for, in order."""
    points = [
        *hb_domain_points(inp),
        *bandwidth_points(inp, "hb_tbps", HB_FACTORS),
        *bandwidth_points(inp, "nic_gbps", NIC_FACTORS),
        *batch_points(inp),
    ]
    base = [(inp.system, arch, inp.global_batch) for arch in NETWORKS]
    return base + [(sy, arch, b) for _, sy, arch, b in points]


def sweep_hb_domain(inp: ReportInputs) -> list[dict[str, Any]]:
    """Best iteration time for every K in SENSITIVITY_K (and the system's own K) that divides
    the GPU count, on both networks."""
    return [_point(best_search(inp, sy, a, b), **f) for f, sy, a, b in hb_domain_points(inp)]


def sweep_bandwidth(
    inp: ReportInputs, name: str, factors: tuple[float, ...]
) -> list[dict[str, Any]]:
    """Best iteration time with `name` (hb_tbps or nic_gbps) scaled by each factor."""
    points = bandwidth_points(inp, name, factors)
    return [_point(best_search(inp, sy, a, b), **f) for f, sy, a, b in points]


def sweep_batch(inp: ReportInputs) -> list[dict[str, Any]]:
    """Best iteration time per global batch (the batch scaled by BATCH_FACTORS, whole numbers
    only), with ideal as the reference: performance relative to ideal = t_ideal / t."""
    out = []
    for fields, sy, arch, b in batch_points(inp):
        if arch == "ideal":
            ideal = best_search(inp, sy, arch, b).best
            continue
        p = _point(best_search(inp, sy, arch, b), **fields)
        t = p["iteration_s"]
        p["relative_to_ideal"] = ideal.iteration_s / t if (ideal and t) else None
        out.append(p)
    return out


def sensitivity(inp: ReportInputs) -> dict[str, Any]:
    """HB-domain size, HB bandwidth, NIC bandwidth and batch size sweeps (each a search)."""
    ideal = best_search(inp, inp.system, "ideal", inp.global_batch).best
    return {
        "hb_domain": sweep_hb_domain(inp),
        "hb_tbps": sweep_bandwidth(inp, "hb_tbps", HB_FACTORS),
        "nic_gbps": sweep_bandwidth(inp, "nic_gbps", NIC_FACTORS),
        "batch": sweep_batch(inp),
        "ideal_iteration_s": ideal.iteration_s if ideal else None,
    }


# ---------------------------------------------------------------------------------------------
# failures


def failures(inp: ReportInputs) -> dict[str, Any]:
    """Single-failure impact and a seeded Monte Carlo of a 54-day job (Llama 3 failure rates),
    holding the idle spare GPUs the cost section counts beside the OCS layer (one per swap set),
    so that rail-only+ocs is simulated with the spares it is priced with; and what the OCS
    layer costs per GPU-hour it recovers."""
    cluster = _fault_cluster(inp)
    c = _comparison(inp)
    spares = spares_per_domain(cluster, inp.price_book.ocs, None)  # one per swap set
    policy = Policy(spare_per_domain=spares)
    table = fault_table(cluster, policy)
    mc = monte_carlo(cluster, days=MC_DAYS, trials=inp.mc_trials, seed=inp.seed, policy=policy)
    return {
        "single": table,
        "monte_carlo": mc.to_dict(),
        "spare_per_domain": spares,
        "ocs_tradeoff": tradeoff(c.to_dict(), mc.to_dict()),
    }


# ---------------------------------------------------------------------------------------------
# assumptions


def _price_book_sources(book: PriceBook) -> list[dict[str, Any]]:
    rows = []
    for speed, p in sorted(book.speeds.items()):
        for key in ("switch_port_usd", "transceiver_usd", "switch_port_w", "transceiver_w"):
            value = getattr(p, key)
            if value is not None:
                rows.append(
                    {
                        "speed_gbps": speed,
                        "item": key,
                        "value": value,
                        "source": getattr(p, key + "_source"),
                    }
                )
    return rows


def model_constants() -> list[dict[str, Any]]:
    """The model-level constants the iteration model uses, read from the modules that own them."""
    from railplan.perf import compute, iteration, layer_time
    from railplan.reproduce import validation
    from railplan.workload import memory

    return [
        {
            "name": "OPTIMIZER_STEP_BYTES",
            "value": iteration.OPTIMIZER_STEP_BYTES,
            "where": "railplan.perf.iteration",
        },
        {
            "name": "ELEMENTWISE_KERNELS_PER_LAYER",
            "value": layer_time.ELEMENTWISE_KERNELS_PER_LAYER,
            "where": "railplan.perf.layer_time",
        },
        {"name": "WEIGHT_BYTES", "value": memory.WEIGHT_BYTES, "where": "railplan.workload.memory"},
        {
            "name": "OPTIMIZER_BYTES",
            "value": memory.OPTIMIZER_BYTES,
            "where": "railplan.workload.memory",
        },
        {
            "name": "RESERVED_BYTES (GiB)",
            "value": memory.RESERVED_BYTES / memory.GIB,
            "where": "railplan.workload.memory",
        },
        {
            "name": "GEMM tiles",
            "value": " ".join(f"{a}×{b}" for a, b in compute.TILES),
            "where": "railplan.perf.compute",
        },
        {
            "name": "validation goal (mean / max |error| %)",
            "value": f"{validation.GOAL_MEAN_PCT:g} / {validation.GOAL_MAX_PCT:g}",
            "where": "railplan.reproduce.validation",
        },
    ]


def validation_summary() -> dict[str, Any]:
    """`railplan.reproduce.validation.validate()` without the per-layer diagnostic: the 2021–22
    rows, and the summaries of the modern runs (per source) and of the held-out runs (per GPU
    and precision)."""
    from railplan.reproduce.moe_training_validation import rows as moe_rows
    from railplan.reproduce.validation import validate

    v = validate()
    m, h = v["modern_runs"], v["heldout_runs"]
    moe = [abs(r.error_pct) for r in moe_rows()]
    return {
        key: v[key]
        for key in ("korthikanti2022", "narayanan2021", "all", "goal", "calculon_korthikanti")
    } | {
        "rows": [
            {k: r[k] for k in ("source", "label", "metric", "measured", "predicted", "error_pct")}
            for r in v["rows"]
        ],
        "modern": {"by_source": m["by_source"], "all": m["all"], "goal": m["goal"]},
        "heldout": {"by_group": h["by_group"], "all": h["all"]},
        "moe_heldout": {
            "mean_abs_pct": sum(moe) / len(moe),
            "max_abs_pct": max(moe),
            "rows": len(moe),
        },
    }


def pricebook_file_header(name: str) -> str:
    """The comment block at the top of a shipped price book ('' for a user file)."""
    path = resources.files("railplan.catalog") / "pricebooks" / f"{name}.yaml"
    if not path.is_file():
        return ""
    lines = path.read_text(encoding="utf-8").splitlines()
    return " ".join(ln.lstrip("# ").strip() for ln in lines if ln.startswith("#"))


def assumptions(inp: ReportInputs) -> dict[str, Any]:
    """Every input spec with its source, the price book, failure rates, search space, model
    constants and the validation accuracy."""
    rates = FailureRates.llama3()
    space = asdict(inp.space)
    return {
        "model": inp.model.model_dump(),
        "system": inp.system.model_dump(exclude={"gpu"}),
        "gpu": inp.system.gpu.model_dump(),
        "price_book": {
            "name": inp.price_book.name,
            "description": inp.price_book.description,
            "header": pricebook_file_header(inp.price_book.name),
            "entries": _price_book_sources(inp.price_book),
        },
        "failure_rates": asdict(rates),
        "search_space": {k: list(v) if isinstance(v, tuple) else v for k, v in space.items()},
        "constants": model_constants(),
        "validation": validation_summary(),
    }


# ---------------------------------------------------------------------------------------------
# all sections in order


def _traffic_step(inp: ReportInputs, done: dict[str, Any]) -> dict[str, Any]:
    """Traffic of the best rail-only strategy (memory does not depend on the network, so it
    exists whenever the performance section found one on rail-optimized)."""
    best = done["performance"]["networks"]["rail-only"]["best"]
    return traffic_section(inp, best["strategy"])


def serving(inp: ReportInputs) -> dict[str, Any]:
    """Serving the model on the same GPUs (docs/inference.md): the best configuration on each
    network under MLPerf's server limits, for the example request (its prompt shortened to fit
    a model that serves a shorter context, `Model.context_tokens`); fp8 where the GPU has
    it."""
    from railplan.inference import search as inf

    precision = "fp8" if inp.system.gpu.fp8_tflops else "bf16"
    pool = min(inp.gpus, inf.MAX_SEARCH_GPUS)  # a serving fleet, not the data centre
    output = inf.EXAMPLE_OUTPUT_TOKENS
    prompt = inf.EXAMPLE_INPUT_TOKENS
    if inp.model.context_tokens is not None:
        output = min(output, max(2, inp.model.context_tokens - 1))
        prompt = max(1, min(prompt, inp.model.context_tokens - output))
    r = inf.search(
        inp.model,
        inp.system,
        pool,
        precision,
        prompt,
        output,
        inf.MLPERF_SERVER_TTFT_S,
        inf.MLPERF_SERVER_TPOT_S,
    )
    limits = {"ttft_s": inf.MLPERF_SERVER_TTFT_S, "tpot_s": inf.MLPERF_SERVER_TPOT_S}
    tokens = {"input": prompt, "output": output}
    return r | {"precision": precision, "limits": limits, "tokens": tokens}


Step = tuple[str, str, Callable[[ReportInputs, dict[str, Any]], dict[str, Any]]]

STEPS: tuple[Step, ...] = (
    ("performance", "best strategy on each network", lambda i, _: performance(i)),
    ("cost", "cost and power", lambda i, _: cost(i)),
    ("traffic", "traffic of the best rail-only strategy", lambda i, done: _traffic_step(i, done)),
    ("sensitivity", "sensitivities (HB domain, bandwidths, batch)", lambda i, _: sensitivity(i)),
    ("failures", "failure impact and Monte Carlo", lambda i, _: failures(i)),
    ("serving", "serving the model (inference)", lambda i, _: serving(i)),
    ("assumptions", "assumptions, sources and validation", lambda i, _: assumptions(i)),
)


def build(
    inp: ReportInputs,
    on_step: Callable[[str], None] | None = None,
    on_search: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Every section in order; `on_step(title)` is called after each one and, with
    `inp.workers` ≠ 1, `on_search(done, total)` after each search run ahead in processes
    (progress bars)."""
    check_inputs(inp)
    prefetch_searches(inp, on_search)
    out: dict[str, Any] = {"inputs": inp.describe()}
    for key, title, run in STEPS:
        out[key] = run(inp, out)
        if on_step is not None:
            on_step(title)
    return out
