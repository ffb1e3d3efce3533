"""A serving configuration under Poisson load: the highest arrival rate at which it keeps its
p99 TTFT and p99 TPOT within limits, as MLPerf Inference's server scenario rates a system (the
query rate a submitter may claim is one whose 99th-percentile latencies meet the scenario's
limits).

The steady state (`estimate`, `search`) takes a full batch turning over evenly: no queue, and
every step alike. Under Poisson arrivals requests wait, steps carrying several prompts stall
the batch, and an instance's ep ranks step as the busiest one does. `highest_rate` finds the
rate by bisection over load simulations (`serving.serve`, `disaggregated.serve_disaggregated`),
between a floor that must be met and the configuration's steady-state capacity, which bounds
it to within a few percent: the engine never holds more than its batch, and the steady state is
that batch full. Each run covers at least MIN_DURATION_S of arrivals, MLPerf's own minimum, and
is made longer where it cannot tell whether its queue stays level (`settled`): near capacity a
short run decides by its length, not by the configuration.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from railplan.inference.disaggregated import serve_disaggregated
from railplan.inference.engine import Deployment
from railplan.inference.search import (
    Choice,
    best_buildable,
    configuration_key,
    configuration_words,
    each_configuration,
    other_splits,
    split_tokens,
    verdict,
)
from railplan.inference.serving import (
    MAX_REQUESTS,
    MAX_SIMULATED_REQUESTS,
    ServingResult,
    requests_cap,
    serve,
)
from railplan.limits import check_int
from railplan.records import Record
from railplan.specs.arrays import BoolArray, FloatArray
from railplan.specs.base import Range

#: bisection steps: the rate to 1/64 (1.6 %) of the steady-state capacity, at most 63/64 of it
LOAD_ITERATIONS = 6
#: the most steady-state choices (a configuration at a batch of the grid, disaggregated at any
#: prefill:decode split) per network `search` simulates under load; those the bound prunes are
#: not counted (0: no limit)
LOAD_CANDIDATES = 8
#: `--load-candidates` at most (0 is no limit)
MAX_LOAD_CANDIDATES = 100_000
#: configurations first simulated at their steady-state best, in the steady state's order,
#: before every other choice in order of capacity: the answer is never worse than theirs
LOAD_CONFIGURATIONS = 4
#: seconds of arrivals a load simulation covers at least: MLPerf's Server runs last at least
#: 600 s (mlcommons/inference loadgen `mlperf.conf`: *.Server.min_duration = 600000 ms); near
#: capacity a shorter run can neither show a level queue nor a p99 that a long one would see
MIN_DURATION_S = 600.0
#: the durations a caller may ask for: up to a day of arrivals (a run is bounded by what one
#: simulation takes anyway, `serving.duration_requests`)
DURATION = Range(0.0, 86_400.0, "s")
#: a run too short to tell whether its queue stays level ("?": `ServingResult.stable` None) is
#: made again on SETTLE_FACTOR times its requests, up to SETTLE_TRIES times, within what one
#: simulation takes (`most_requests`); one that still cannot tell counts as not keeping up
SETTLE_FACTOR = 4
SETTLE_TRIES = 2


@dataclass(frozen=True)
class Loaded(Record):
    """What a configuration serves under Poisson load within the limits (`highest_rate`)."""

    arrival_rate: float  # requests/s offered to the whole deployment
    tokens_per_s_per_gpu: float  # output tokens/s per GPU served at that rate
    ttft_mean_s: float
    ttft_p99_s: float
    tpot_mean_s: float
    tpot_p99_s: float
    itl_p99_s: float
    capacity_share: float  # the rate over the steady-state capacity's requests/s
    simulations: int  # rates the bisection simulated
    requests: int  # the run's requests per simulated rank (`--requests` reruns it)
    # seconds of arrivals the run covered: MIN_DURATION_S (or the caller's) at least, unless
    # what one simulation takes cut it short (`most_requests`), which `short_of` tells
    arrivals_s: float = 0.0
    step_budget_tokens: int = 0  # the run's token budget per step (`ServingResult`)


def simulate(
    dep: Deployment,
    rate: float,
    input_tokens: int,
    output_tokens: int,
    batch: int,
    prefill_instances: int = 0,
    seed: int = 0,
    requests: int | None = None,
    min_duration_s: float = MIN_DURATION_S,
) -> ServingResult:
    """`dep` at `rate` requests/s as `railplan infer --arrival-rate` runs it: aggregated, one
    instance on its share of the stream (`serving.serve`); with `prefill_instances`, every
    instance, each request sent to the least busy (`serve_disaggregated`); `batch` sequences
    per (decode) rank at most; `requests` per simulated rank (None: the default, or enough
    for `min_duration_s` of arrivals if more)."""
    if prefill_instances:
        return serve_disaggregated(
            dep,
            prefill_instances,
            rate,
            input_tokens,
            output_tokens,
            batch,
            requests,
            seed,
            min_duration_s=min_duration_s,
        )
    return serve(
        dep, rate, input_tokens, output_tokens, batch, requests, seed, min_duration_s=min_duration_s
    )


def sharing_ranks(dep: Deployment, prefill_instances: int = 0) -> int:
    """The ranks the arrivals are shared over, each with its own batch: every tp·pp group (ep
    ranks count one each), or with `prefill_instances` every decode rank."""
    if prefill_instances:
        return (dep.replicas - prefill_instances) * dep.ep
    return dep.gpus // (dep.tp * dep.pp)


def most_requests(dep: Deployment, prefill_instances: int = 0, least_busy: bool = False) -> int:
    """The most requests per simulated rank one simulation of `dep` takes: MAX_REQUESTS, and
    MAX_SIMULATED_REQUESTS over the ranks it simulates (one instance's ep ranks; every
    replica with `least_busy`; every decode rank with `prefill_instances`)."""
    every = prefill_instances or least_busy
    return requests_cap(sharing_ranks(dep, prefill_instances) if every else dep.ep)


def short_of(load: Loaded | dict[str, Any], min_duration_s: float) -> str | None:
    """A note when the run behind `load` covered less than `min_duration_s` of arrivals (one
    simulation takes at most MAX_REQUESTS per rank, MAX_SIMULATED_REQUESTS in all): a short run
    cannot show a level queue, so the rate found may be below what a full-length run keeps."""
    got = load["arrivals_s"] if isinstance(load, dict) else load.arrivals_s
    if got >= 0.999 * min_duration_s:
        return None
    return (
        f"its run covered {got:,.0f} s of arrivals, not {min_duration_s:g} s: one simulation "
        f"takes at most {MAX_REQUESTS:,} requests per rank and {MAX_SIMULATED_REQUESTS:,} in "
        "all, so near capacity the rate found may be lower than a full-length run keeps"
    )


def settled(run: Callable[[int | None], ServingResult], most: int) -> ServingResult:
    """`run(None)` (its default requests), then, while it cannot tell whether the queue stays
    level (`stable` None), `run` on SETTLE_FACTOR times the requests, up to SETTLE_TRIES times
    and `most`: near capacity a batch takes long to settle, and a run of the default length
    says "?" where a longer one shows a level queue."""
    r = run(None)
    for _ in range(SETTLE_TRIES):
        if r.stable is not None or r.requests >= most:
            break
        r = run(min(most, r.requests * SETTLE_FACTOR))
    return r


def settled_run(
    one: Callable[[float, int | None], ServingResult], most: int, requests: int | None = None
) -> Callable[[float], ServingResult]:
    """Rate → run: `one(rate, requests)` where the length is given, else `settled` (the
    default length, longer where it cannot tell, up to `most` per rank)."""

    def run(rate: float) -> ServingResult:
        if requests is not None:
            return one(rate, requests)
        return settled(lambda n: one(rate, n), most)

    return run


def rated(
    run: Callable[[float], ServingResult],
    limits_s: tuple[float, float],
    capacity: float,
    gpus: int,
    output_tokens: int,
    ranks: int,
    floor: float = 0.0,
) -> tuple[Loaded | None, int]:
    """`highest_rate` of `run` above `floor` within the p99 TTFT and TPOT `limits_s`
    (`within`), as `Loaded` (None: none), and the rates run."""
    hit, runs = highest_rate(run, lambda r: within(r, *limits_s), capacity, floor)
    if hit is None:
        return None, runs
    return loaded(hit[0], hit[1], gpus, output_tokens, capacity, runs, ranks), runs


def within(r: ServingResult, ttft_slo_s: float, tpot_slo_s: float) -> bool:
    """The run kept up (`ServingResult.stable`: True, not a run too short to tell) and its p99
    TTFT and p99 TPOT are within the limits."""
    return r.stable is True and r.ttft_p99_s <= ttft_slo_s and r.tpot_p99_s <= tpot_slo_s


def highest_rate(
    run: Callable[[float], ServingResult],
    ok: Callable[[ServingResult], bool],
    capacity: float,
    floor: float = 0.0,
    iterations: int = LOAD_ITERATIONS,
) -> tuple[tuple[float, ServingResult] | None, int]:
    """The highest rate above `floor` (requests/s) of capacity · j / 2**iterations, j = 1 …
    2**iterations − 1, whose run is `ok`, with its run; and the runs made. With a floor its
    first run is at the lowest of those rates above it, and ends the search if not ok; then
    bisection over j. The capacity itself is never claimed: a Poisson queue offered exactly
    what its server takes has no steady state (it grows with the run's length), so a finite
    run there proves nothing. None when no rate above the floor is ok. Assumes `ok` holds
    below any rate where it holds (latencies grow with the load)."""
    steps = 1 << iterations
    if not could_beat(capacity, floor, iterations):
        return None, 0
    lo = _floor_index(capacity, floor, steps)

    def rate(j: int) -> float:
        return capacity * j / steps

    runs = 0
    best: tuple[float, ServingResult] | None = None
    if floor > 0.0:
        r = run(rate(lo + 1))
        runs += 1
        if not ok(r):
            return None, runs
        lo, best = lo + 1, (rate(lo + 1), r)
    hi = steps  # j = lo is ok (or at most the floor), j = hi is not (or the capacity)
    j = steps - 1
    while j > lo:
        r = run(rate(j))
        runs += 1
        if ok(r):
            lo, best = j, (rate(j), r)
        else:
            hi = j
        j = (lo + hi) // 2
    return best, runs


def _grid_index(capacity: float | FloatArray, floor: float, steps: int) -> FloatArray:
    """The grid index j ≤ which capacity · j / steps is at or below `floor` (a floor on this
    grid, up to rounding, is at its own j), of each capacity."""
    return np.asarray(np.floor(floor * steps / np.asarray(capacity) + 1e-9))


def _floor_index(capacity: float, floor: float, steps: int) -> int:
    """`_grid_index` of one capacity."""
    return int(_grid_index(capacity, floor, steps))


def beats(capacities: FloatArray, floor: float, iterations: int = LOAD_ITERATIONS) -> BoolArray:
    """Whether each of these steady-state `capacities` (requests/s) has a rate on its grid
    above `floor` (`highest_rate` never claims more than (2**iterations − 1)/2**iterations of
    it): the bound that lets the search skip the rest of a list ordered by capacity."""
    steps = 1 << iterations
    return np.asarray(_grid_index(capacities, floor, steps) < steps - 1)


def could_beat(capacity: float, floor: float, iterations: int = LOAD_ITERATIONS) -> bool:
    """`beats` of one capacity."""
    return bool(beats(np.asarray(capacity, dtype=np.float64), floor, iterations))


def loaded(
    rate: float,
    r: ServingResult,
    gpus: int,
    output_tokens: int,
    capacity: float,
    runs: int,
    ranks: int = 1,
) -> Loaded:
    """`Loaded` from the run that met the limits at `rate` (every request served: the rate's
    output tokens), its `r.requests` per rank of the `ranks` sharing the arrivals."""
    return Loaded(
        arrival_rate=rate,
        tokens_per_s_per_gpu=rate * output_tokens / gpus,
        ttft_mean_s=r.ttft_mean_s,
        ttft_p99_s=r.ttft_p99_s,
        tpot_mean_s=r.tpot_mean_s,
        tpot_p99_s=r.tpot_p99_s,
        itl_p99_s=r.itl_p99_s,
        capacity_share=rate / capacity,
        simulations=runs,
        requests=r.requests,
        arrivals_s=r.requests * ranks / rate,
        step_budget_tokens=r.step_budget_tokens,
    )


def min_duration(seconds: float | None) -> float:
    """The seconds of arrivals a load simulation covers at least: `seconds` checked
    (`DURATION`), or MIN_DURATION_S when None."""
    return DURATION.check("min_duration", MIN_DURATION_S if seconds is None else seconds)


def check_load_candidates(candidates: Any) -> int:
    """`candidates` as the limit of choices simulated per network (0: none), else a one-line
    error naming `load_candidates`."""
    return check_int("load_candidates", candidates, 0, MAX_LOAD_CANDIDATES)


def load_order(choices: list[Choice]) -> tuple[list[Choice], list[Choice]]:
    """`best_under_load`'s two passes over a network's choices (`search.meeting`: most tokens/s
    per GPU first): the steady-state best of each of the first LOAD_CONFIGURATIONS
    configurations (mode, tp, pp, ep, two-batch overlap), then every other choice; each pass
    in order of capacity."""
    first = each_configuration(choices)[:LOAD_CONFIGURATIONS]
    chosen = {id(c) for c in first}
    return first, [c for c in choices if id(c) not in chosen]


def widened(
    rest: list[Choice],
    first: list[Choice],
    splits: Callable[[Choice], list[Choice]],
    capacity: Callable[[Choice], float],
) -> Iterator[Choice]:
    """`best_under_load`'s second pass: `rest` in its order (most capacity first) with every
    other prefill:decode split of each disaggregated choice (`splits`, those that could still
    beat the best) merged in by capacity, after the choices of `rest` of equal capacity, each
    once. A choice's other splits, never more capacity than it, join when it is reached, those
    of `first` (the first pass) at the start: a caller that stops where the capacity can no longer
    beat its best never makes the splits of what lies beyond."""
    heap: list[tuple[float, int, Choice]] = []
    order = itertools.count()

    def join(c: Choice) -> None:
        for s in splits(c):
            heapq.heappush(heap, (-capacity(s), next(order), s))

    for c in first:
        join(c)
    i = 0
    while i < len(rest) or heap:
        if heap and (i == len(rest) or -heap[0][0] > capacity(rest[i])):
            yield heapq.heappop(heap)[2]  # a split's own other splits are its choice's
        else:
            c, i = rest[i], i + 1
            yield c
            join(c)


def best_under_load(
    ranked: dict[str, list[Choice]],
    deployment: Callable[[str, Choice], Deployment],
    full: Callable[[str, Choice], dict[str, Any] | None],
    input_tokens: int,
    output_tokens: int,
    ttft_slo_s: float,
    tpot_slo_s: float,
    progress: Callable[[str], None] | None = None,
    candidates: int = LOAD_CANDIDATES,
    min_duration_s: float = MIN_DURATION_S,
) -> dict[str, Any]:
    """Per network, of the steady state's choices that meet the limits (`ranked`: every
    configuration at every batch of the grid, a disaggregated one at its balanced
    prefill:decode split, most tokens/s per GPU first, so most capacity first:
    `search.meeting`; and a disaggregated one at every other split, `search.other_splits`,
    which meets the same limits with less capacity), the one that serves the most requests/s
    under Poisson load with p99 TTFT and TPOT within the limits (`highest_rate`, each run at
    least `min_duration_s` of arrivals long and longer where it cannot tell, `settled`), with
    `full`'s keys and `load` (`Loaded`); the best of the buildable networks and the spine
    verdict on those figures.

    Branch and bound, in two passes (`load_order`): the first configurations at their steady
    best, then every other choice, each pass in order of capacity (the second with every other
    split of a disaggregated choice, `widened`). A choice is simulated above
    the best rate so far only if it meets the limits there, and a pass ends at the first
    choice whose grid has no rate above it (`could_beat`: no later one has either), so after
    the second pass the answer is the best of every choice. At most `candidates` choices are
    simulated per network (`check_load_candidates`; 0: no limit), the first pass's included;
    `not_simulated` counts, per network, the choices left that could still beat its best, or
    meet the limits where none did (0: the answer is proven over every choice). The first
    choice takes up to LOAD_ITERATIONS + 1 rates, a later one that fails just above the best
    one, one that beats it up to LOAD_ITERATIONS + 1 too (each rate one run, or up to
    SETTLE_TRIES more where it cannot tell). `tried` lists, per network, each choice
    simulated with the highest rate found for it above the best before it (`beats`;
    `arrival_rate` None: none above it met the limits)."""
    candidates = check_load_candidates(candidates)
    by_net: dict[str, dict[str, Any] | None] = {}
    runs: dict[tuple[Any, ...], ServingResult] = {}
    tried: dict[str, list[dict[str, Any]]] = {}
    left: dict[str, int] = {}
    for arch, choices in ranked.items():
        floor, found = 0.0, None
        tried[arch] = []
        # one deployment serves every choice of a network: the same GPUs
        gpus = deployment(arch, choices[0]).gpus if choices else 0

        def capacity(c: Choice, gpus: int = gpus) -> float:
            return c.tokens_per_s_per_gpu * gpus / output_tokens

        def can_beat(tokens: FloatArray, gpus: int = gpus) -> BoolArray:
            """Which splits of these tokens/s per GPU could still beat the best found so far
            (it only rises: one that cannot now never can)."""
            # the best so far, read when called: this network's, within its own iteration
            return beats(tokens * gpus / output_tokens, floor)  # noqa: B023

        def splits(c: Choice, arch: str = arch) -> list[Choice]:
            """`c`'s other prefill:decode splits that could still beat the best found so far
            (only those are made)."""
            if c.mode != "disaggregated":
                return []
            return other_splits(deployment(arch, c), c, input_tokens, output_tokens, can_beat)

        def splits_left(c: Choice, arch: str = arch) -> int:
            """How many of `c`'s other splits could still beat the best and were not
            simulated (counted, not made)."""
            if c.mode != "disaggregated":
                return 0
            dep = deployment(arch, c)
            p, tokens = split_tokens(dep, c, input_tokens, output_tokens)
            ran = [
                s.prefill_gpus
                for s in done  # noqa: B023 (this network's, read within its iteration)
                if s.batch == c.batch and configuration_key(s) == configuration_key(c)
            ]
            left = can_beat(tokens) & ~np.isin(p * dep.instance_gpus, ran)
            return int(np.sum(left))

        first, rest = load_order(choices)
        done: set[Choice] = set()  # the choices simulated
        for order in (first, widened(rest, first, splits, capacity)):
            for c in order:
                if not could_beat(capacity(c), floor):
                    break  # most capacity first: no later choice of this pass can beat it
                if candidates and len(tried[arch]) >= candidates:
                    break
                done.add(c)
                dep = deployment(arch, c)
                p = c.prefill_gpus // dep.instance_gpus

                def one(
                    rate: float, n: int | None, dep: Deployment = dep, c: Choice = c, p: int = p
                ) -> ServingResult:
                    return simulate(
                        dep, rate, input_tokens, output_tokens, c.batch, p, 0, n, min_duration_s
                    )

                sim = settled_run(one, most_requests(dep, p))
                what = f"{arch}: {configuration_words(c.to_dict())}, batch {c.batch}"
                told = _told(sim, progress, what)
                # inside one HB domain the network is never reached: the same runs on every one
                where = "hb" if gpus <= dep.system.hb_domain else arch
                run = _cached(runs, (where, c), told)
                got, made = rated(
                    run,
                    (ttft_slo_s, tpot_slo_s),
                    capacity(c),
                    gpus,
                    output_tokens,
                    sharing_ranks(dep, p),
                    floor,
                )
                tried[arch].append(
                    {
                        "configuration": c.to_dict(),  # with its steady-state figures
                        "arrival_rate": got.arrival_rate if got else None,
                        "beats": floor,
                        "simulations": made,
                    }
                )
                if got is not None:
                    floor = got.arrival_rate
                    found = (c, got)
        # what the limit left that could still beat the best (a choice the bound passed over
        # cannot: the best only rises)
        left[arch] = sum(
            (c not in done) + splits_left(c) for c in choices if could_beat(capacity(c), floor)
        )
        entry = full(arch, found[0]) if found else None
        if entry is not None and found is not None:
            entry["load"] = found[1].to_dict()
        by_net[arch] = entry
    rates = {
        k: (float(v["load"]["tokens_per_s_per_gpu"]) if v else None) for k, v in by_net.items()
    }
    found_nets = [(k, v) for k, v in by_net.items() if v is not None]
    top = best_buildable(
        found_nets, lambda kv: kv[0], lambda kv: kv[1]["load"]["tokens_per_s_per_gpu"]
    )
    return {
        "best": top[1] if top else None,
        "by_network": by_net,
        "verdict": verdict(rates, under_load=True),
        "candidates": candidates,
        "not_simulated": left,
        "simulations": len(runs),
        "tried": tried,
    }


def _cached(
    runs: dict[tuple[Any, ...], ServingResult],
    key: tuple[Any, ...],
    run: Callable[[float], ServingResult],
) -> Callable[[float], ServingResult]:
    """`run`, each rate's result kept in `runs` under `key` + the rate."""

    def cached(rate: float) -> ServingResult:
        if (*key, rate) not in runs:
            runs[(*key, rate)] = run(rate)
        return runs[(*key, rate)]

    return cached


def _told(
    run: Callable[[float], ServingResult], progress: Callable[[str], None] | None, what: str
) -> Callable[[float], ServingResult]:
    """`run`, telling `progress` (if any) what it runs first."""

    def told(rate: float) -> ServingResult:
        if progress is not None:
            progress(f"{what}, at {rate:.4g} requests/s")
        return run(rate)

    return told
