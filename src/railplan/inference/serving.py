"""Serving under load: continuous batching with Poisson arrivals, step by step.

One replica (tp × pp group) is simulated; `gpus / (tp·pp)` replicas share the arrivals evenly (a
Poisson stream split at random stays Poisson, at rate λ / replicas). With ep > 1 a replica is one
ep rank of an instance, and the instance's ep ranks are simulated together: each has its own
queue and batch, the arrivals go to them in turn, and they step together (`lockstep_fn`,
`engine.lockstep_step_s`). The engine runs
iteration-level scheduling (Orca, OSDI'22; vLLM; TensorRT-LLM in-flight batching): at every step
boundary the waiting requests that have arrived are admitted, first come first served, while the
batch has room (`max_batch`) and the step's token budget allows (`max_num_tokens`: TensorRT-LLM
counts every token of the step against it, one per running sequence plus the admitted prompts —
"Tuning Max Batch Size and Max Num Tokens" in its performance guide); prompts are admitted whole
(no chunked context: NVIDIA's MLPerf v4.1 harness sets none), and an empty engine always takes the
next one; with `chunked` prefill they run in chunks of what the budget leaves
(`dispatch._Replica._chunked_step`). Their prompts ride in that step together with one decode token
of every running sequence. A request's first token comes at the end of the step that carried its
prompt (TTFT = that time − arrival); each later step gives one more token (TPOT = (finish − first
token) / (output − 1)), or with speculative decoding `Deployment.tokens_per_step` on average (each
running sequence then counts its token and its drafts against the budget). When nothing runs, the
engine idles until the next arrival; the step that then starts it also waits for its prompts to
cross every pipeline stage (`serving.step_fn`).

The events are the engine steps themselves, so a plain loop over steps is the discrete-event
simulation (a process library would add nothing: there is one server and no other resource);
the running batch is held in numpy arrays. The loop, its admission rule and its `Run` are in
`dispatch` (`least_busy`), which `simulate` runs for one replica (or for several sharing one
stream, dispatched least-busy).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

import numpy as np

from railplan.errors import RailplanError
from railplan.inference.dispatch import FirstFn, LockstepFn, Run, Speculation, StepFn, least_busy
from railplan.inference.engine import (
    Deployment,
    StepLoad,
    cold_step_s,
    experts_s,
    lockstep_step_s,
    prompt_exits_s,
    step_time_s,
)
from railplan.records import Record
from railplan.specs.arrays import FloatArray, IntArray

#: tokens one step may carry (decode tokens and whole prompts, or chunks of them): TensorRT-LLM's
#: max_num_tokens default (8192), and vLLM's max_num_batched_tokens for its API server on GPUs of
#: 70 GiB or more other than the A100 (`EngineArgs.get_batch_defaults`)
MAX_NUM_TOKENS = 8192
#: the default ceiling of the batch when none is given: TensorRT-LLM's max_batch_size default
#: (2048, trtllm-build --max_batch_size) — the engines of NVIDIA's MLPerf runs set 806-2048
DEFAULT_MAX_BATCH = 2048
#: prompt tokens one prefill-only step carries (disaggregated prefill instances): the same budget
MAX_PREFILL_TOKENS = MAX_NUM_TOKENS
#: requests simulated per rate and replica by default: at least this many, and at least
#: BATCH_TURNOVERS batches' worth (`default_requests`)
DEFAULT_REQUESTS = 2000
#: an overloaded engine first fills its batch, then turns it over: a run this many batches long
#: reaches the full batch and stays there for `dispatch.FULL_TURNOVERS` lifetimes, over which
#: it measures what the engine serves (a batch larger than the run is never filled: a model
#: that fits 1,162 sequences, simulated on 2,000 requests at four times its capacity, "served"
#: 21 % less than it can)
BATCH_TURNOVERS = 4
MAX_REQUESTS = 200_000
#: most requests one simulation of several replicas takes in all (least-busy dispatch): the
#: MLPerf H200 server row's 245,760 queries; 128 replicas × 2,000 (256,000) take about 55 s
MAX_SIMULATED_REQUESTS = 250_000


@dataclass(frozen=True)
class ServingResult(Record):
    arrival_rate: float  # requests/s offered to the whole deployment
    requests: int  # simulated per replica (per ep rank with ep > 1)
    ttft_mean_s: float
    ttft_p99_s: float
    tpot_mean_s: float
    tpot_p99_s: float
    tokens_per_s: float  # output tokens/s of the whole deployment
    tokens_per_s_per_gpu: float
    stable: bool | None  # the queue kept up (Run.stable; None: too few requests to tell)
    step_budget_tokens: int = MAX_NUM_TOKENS  # tokens one step may carry (`step_budget`)
    # disaggregated (`disaggregated.serve_disaggregated`): the prefill instances' GPUs (0:
    # aggregated) and the KV transfer in each TTFT
    prefill_gpus: int = 0
    kv_transfer_s: float = 0.0
    # inter-token latency: the gaps between successive tokens of a sequence, one per step after
    # its first token (`dispatch.Run.itl_mean_s`); TPOT is a request's mean gap, which hides a
    # stall of one long step
    itl_mean_s: float = 0.0
    itl_p99_s: float = 0.0


#: a data set's prompt and output token counts, one pair per sample
Lengths = tuple[IntArray, IntArray]


# Arrival rates the simulation accepts: below one request in ~12 days the exponential gaps of
# a few thousand requests overflow the float range (1e-308 req/s gave inf arrival times and a
# NaN TTFT: fuzz find); above 1e9 req/s no engine step is short enough to matter.
MIN_RATE_PER_S = 1e-6
MAX_RATE_PER_S = 1e9


def _check_simulation(
    rate_per_s: float, requests: int, max_batch: int, max_num_tokens: int
) -> None:
    """One-line errors for a rate, request count, batch or token budget out of range."""
    if not MIN_RATE_PER_S <= rate_per_s < MAX_RATE_PER_S:
        raise RailplanError(
            "arrival_rate",
            f"must be in [{MIN_RATE_PER_S:g}, {MAX_RATE_PER_S:g}) requests/s; got {rate_per_s!r}",
        )
    if not 1 <= requests <= MAX_REQUESTS:
        raise RailplanError(
            "requests", f"must be an integer in [1, {MAX_REQUESTS}]; got {requests!r}"
        )
    if max_batch < 1:
        raise RailplanError("batch", "no sequence fits in the KV cache; use more GPUs or tp")
    if max_num_tokens < 1:
        raise RailplanError("max_num_tokens", f"must be a positive integer; got {max_num_tokens!r}")


def _lengths(
    rng: np.random.Generator,
    requests: int,
    input_tokens: int,
    output_tokens: int,
    lengths: Lengths | None,
) -> tuple[IntArray, IntArray]:
    """Prompt and output tokens of every request: the given ones, or (with `lengths`, a data
    set's samples) one sample drawn at random per request."""
    if lengths is None:
        return (
            np.full(requests, input_tokens, dtype=np.int64),
            np.full(requests, output_tokens, dtype=np.int64),
        )
    prompts, outputs = (np.asarray(a, dtype=np.int64) for a in lengths)
    if prompts.shape != outputs.shape or prompts.size == 0 or prompts.ndim != 1:
        raise RailplanError("lengths", "needs two equally long, non-empty lists of token counts")
    if min(int(prompts.min()), int(outputs.min())) < 1:
        raise RailplanError("lengths", "token counts must be positive")
    pick = rng.integers(0, prompts.size, requests)
    return prompts[pick], outputs[pick]


def simulate(
    step_s: StepFn,
    rate_per_s: float,
    requests: int,
    input_tokens: int,
    output_tokens: int,
    max_batch: int,
    max_num_tokens: int = MAX_NUM_TOKENS,
    seed: int = 0,
    lengths: Lengths | None = None,
    replicas: int = 1,
    spec: Speculation = Speculation(),
    first_s: FirstFn | None = None,
    chunked: bool = False,
    lockstep: int = 1,
    lockstep_s: LockstepFn | None = None,
    round_robin: bool = False,
) -> Run:
    """Every request's TTFT and TPOT on one engine whose step time is `step_s(load)`, and
    whether the queue kept up with the arrivals. Every request has `input_tokens` prompt and
    `output_tokens` output tokens, or, with `lengths` (a data set's prompt and output token
    counts), those of a sample drawn at random. With `replicas` > 1, that many engines share
    the stream, each arrival dispatched to the least busy (`dispatch.least_busy`), or with
    `round_robin` to each in turn; with `lockstep` > 1 they are the ep ranks of instances of
    that many, stepping together (`lockstep_s`). `chunked`: the engine runs chunked prefill
    (`dispatch._Replica._chunked_step`)."""
    if replicas < 1:
        raise RailplanError("replicas", f"must be a positive integer; got {replicas!r}")
    _check_simulation(rate_per_s, -(-requests // replicas), max_batch, max_num_tokens)
    if requests > MAX_SIMULATED_REQUESTS:
        most = MAX_SIMULATED_REQUESTS // replicas
        raise RailplanError(
            "requests",
            f"must be in [1, {most:,}] here ({replicas:,} ranks simulated, at most "
            f"{MAX_SIMULATED_REQUESTS:,} requests in all); got {-(-requests // replicas):,}",
        )
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / rate_per_s, requests))
    prompt, output = _lengths(rng, requests, input_tokens, output_tokens, lengths)
    return least_busy(
        step_s,
        rate_per_s,
        arrivals,
        prompt,
        output,
        replicas,
        max_batch,
        max_num_tokens,
        spec,
        first_s,
        chunked=chunked,
        lockstep=lockstep,
        lockstep_s=lockstep_s,
        round_robin=round_robin,
    )


def serve(
    dep: Deployment,
    arrival_rate: float,
    input_tokens: int,
    output_tokens: int,
    batch: int | None = None,
    requests: int | None = None,
    seed: int = 0,
    max_num_tokens: int | None = None,
    lengths: Lengths | None = None,
    least_busy: bool = False,
    chunked: bool = False,
    min_duration_s: float = 0.0,
) -> ServingResult:
    """Simulate `dep` under Poisson arrivals at `arrival_rate` requests/s (whole deployment),
    each step carrying at most `max_num_tokens` tokens (None: `step_budget`, or with `chunked`
    prefill MAX_NUM_TOKENS). With `lengths` (a data set's prompt and output token counts)
    each request draws one sample; `input_tokens` and `output_tokens` then only size the
    KV-cache limit of the batch (their sum reserved per sequence).

    By default one replica is simulated on its share of the stream (`requests` of them; with
    ep > 1 its ep ranks, stepping together, each arrival sent to the next rank in turn, as
    SGLang's data-parallel attention controller does by default, `load_balance_method`
    round_robin); with `least_busy` every replica is, each request dispatched to the rank with
    the fewest in flight (`simulate` with `replicas`; `requests` per rank, requests × ranks in
    all; None: `default_requests`, or with `min_duration_s` enough for that many seconds of
    arrivals if more, `duration_requests`)."""
    # `estimate` builds on this module: imported where used
    from railplan.inference.estimate import check_tokens

    input_tokens, output_tokens = check_tokens(input_tokens, output_tokens, dep.model)
    groups = replica_count(dep, arrival_rate)
    limit = batch_limit(dep, input_tokens + output_tokens, batch)
    # one instance (its ep ranks, stepping together), or every one
    replicas = groups if least_busy else dep.ep
    if max_num_tokens is None and chunked:
        # prompts get no room of their own: that is what chunking is for (a batch whose decode
        # tokens would fill the budget admits no more prompts: `estimate.chunked_batch_limit`)
        max_num_tokens = MAX_NUM_TOKENS
    elif max_num_tokens is None:
        longest = int(np.max(lengths[0])) if lengths is not None else input_tokens
        max_num_tokens = step_budget(longest, limit * dep.verified_tokens)
    if requests is None:
        requests = run_requests(
            dep, arrival_rate / groups, limit, input_tokens, output_tokens, replicas, min_duration_s
        )
    rank_s = period_fn(dep) if chunked else step_fn(dep)
    run = simulate(
        rank_s,
        arrival_rate * replicas / groups,
        requests * replicas,
        input_tokens,
        output_tokens,
        limit,
        max_num_tokens=max_num_tokens,
        seed=seed,
        lengths=lengths,
        replicas=replicas,
        spec=speculation(dep),
        first_s=first_token_fn(dep),
        chunked=chunked,
        lockstep=dep.ep,
        lockstep_s=lockstep_fn(dep, rank_s),
        round_robin=not least_busy,
    )
    out = result(dep, arrival_rate, requests, output_tokens, run, groups // replicas)
    return replace(out, step_budget_tokens=max_num_tokens)


def step_budget(longest_prompt: int, decode_tokens: int) -> int:
    """The engine's token budget per step: MAX_NUM_TOKENS (TensorRT-LLM's default), or room for
    the longest prompt beside a full batch's `decode_tokens` if that is more. Without chunked
    context a prompt is admitted whole (module docstring); a budget that cannot hold the
    longest prompt beside the running batch admits it only into an empty engine, which then
    serves one sequence at a time while `infer`'s steady state fuses the prompts into full
    steps. Raising the budget so is railplan's assumption: an engine configured for these
    prompts at this batch (chunked context splits a prompt over steps instead: `serve`'s
    `chunked`, whose budget stays MAX_NUM_TOKENS). It makes room for one prompt per step, not
    for the B·I/O prompt tokens per step of `infer`'s steady state, so a batch of long prompts
    may still turn over below its limit (`dispatch._full_from` counts it full once it does)."""
    return max(MAX_NUM_TOKENS, longest_prompt + decode_tokens)


def default_requests(
    max_batch: int, replicas: int = 1, ranks: int = 1, held: float | None = None
) -> int:
    """Requests per replica (per rank, with `ranks` ep ranks per instance) a load simulation
    takes by default: DEFAULT_REQUESTS per instance, or BATCH_TURNOVERS batches of `max_batch`
    per rank if more (an overloaded run must fill its batch to show what the engine serves),
    within what one simulation of `replicas` ranks in all takes. With several ranks, the
    batches only as full as the offered load keeps them (`held` sequences per rank,
    `in_flight`): ep ranks × four batches of a low-rate run would simulate hours of arrivals
    for nothing."""
    full = max_batch if held is None or ranks == 1 else min(max_batch, math.ceil(held))
    wanted = max(-(-DEFAULT_REQUESTS // ranks), BATCH_TURNOVERS * full)
    return min(wanted, requests_cap(replicas))


def requests_cap(replicas: int) -> int:
    """The most requests per rank one simulation of `replicas` ranks takes: MAX_REQUESTS, and
    MAX_SIMULATED_REQUESTS in all (at least one)."""
    return max(1, min(MAX_REQUESTS, MAX_SIMULATED_REQUESTS // max(replicas, 1)))


def run_requests(
    dep: Deployment,
    rate_per_rank: float,
    batch: int,
    input_tokens: int,
    output_tokens: int,
    replicas: int,
    min_duration_s: float = 0.0,
) -> int:
    """The requests per rank a run of `replicas` simulated ranks takes by default, each rank
    offered `rate_per_rank`: `default_requests` at what that rate keeps in flight
    (`in_flight`), or enough for `min_duration_s` of arrivals if more (`duration_requests`)."""
    held = in_flight(dep, rate_per_rank, batch, input_tokens, output_tokens)
    requests = default_requests(batch, replicas, dep.ep, held)
    return duration_requests(requests, min_duration_s, rate_per_rank, replicas)


def duration_requests(
    requests: int, min_duration_s: float, rate_per_rank: float, replicas: int = 1
) -> int:
    """`requests` per rank, or as many as `rate_per_rank` brings in `min_duration_s` seconds if
    more (MLPerf's Server runs last at least 600 s, loadgen's `min_duration`), within what one
    simulation of `replicas` ranks takes."""
    wanted = math.ceil(min_duration_s * rate_per_rank)
    return max(requests, min(wanted, requests_cap(replicas)))


def in_flight(
    dep: Deployment, rate_per_rank: float, batch: int, input_tokens: int, output_tokens: int
) -> float:
    """The sequences `rate_per_rank` requests/s keep in flight on a rank by Little's law: the
    rate times a request's lifetime, its output tokens at the step of a full batch of `batch`
    (no queue and no prompt stalls: a lower bound, up to the batch)."""
    context = float(batch) * (input_tokens + 0.5 * output_tokens)
    step = step_time_s(dep, StepLoad(decode=float(batch), context_tokens=context))[0]
    return rate_per_rank * output_tokens * step


def replica_count(dep: Deployment, arrival_rate: float) -> int:
    """The deployment's replicas × ep ranks (each with its own batch), after checking that
    each gets at least the least rate the simulation takes."""
    groups = dep.gpus // (dep.tp * dep.pp)
    low = MIN_RATE_PER_S * groups  # each replica simulated at arrival_rate / groups
    if not low <= arrival_rate < MAX_RATE_PER_S:
        raise RailplanError(
            "arrival_rate",
            f"must be in [{low:g}, {MAX_RATE_PER_S:g}) requests/s ({groups} replicas of "
            f"{MIN_RATE_PER_S:g} at least); got {arrival_rate!r}",
        )
    return groups


def batch_limit(dep: Deployment, tokens_per_sequence: int, batch: int | None) -> int:
    """The engine's max batch: what the KV cache holds at `tokens_per_sequence`, or `batch`
    if smaller; None: at most DEFAULT_MAX_BATCH, as `infer`'s steady state takes it."""
    most = dep.max_batch(tokens_per_sequence)
    return min(most, DEFAULT_MAX_BATCH) if batch is None else min(batch, most)


T = TypeVar("T")


def _cached(time_s: Callable[[StepLoad], T]) -> Callable[[StepLoad], T]:
    """`time_s` of a step load, computed once per running batch, prompt count, 16 prompt tokens,
    256 context tokens and 65,536 of the prompts' own and cached query-key pairs (Σ c², Σ c·o:
    the step time changes by < 0.5 % within them)."""
    cache: dict[tuple[int, int, int, int, int, int], T] = {}

    def cached(load: StepLoad) -> T:
        key = (
            int(load.decode),
            int(load.prefill_seqs),
            int(load.prefill_tokens) // 16,
            int(load.context_tokens) // 256,
            int(load.prefill_cross_tokens) // 65536,
            int(load.prefill_square_tokens) // 65536,
        )
        if key not in cache:
            cache[key] = time_s(load)
        return cache[key]

    return cached


def step_fn(dep: Deployment) -> StepFn:
    """The engine model's step time for a step load, cached: a pipeline period, and when no
    sequence runs (the pipeline is empty) the fill the step's prompts wait for too
    (`engine.cold_step_s`; 0 without pipelining)."""
    return _cached(lambda load: cold_step_s(dep, load))


def period_fn(dep: Deployment) -> StepFn:
    """The engine model's step as a pipeline period, cached, also when no sequence runs: a
    chunked prompt's or a prefill instance's step, after which the next micro-batch enters
    while this one's prompts cross the other stages (their first tokens: `first_token_fn`)."""
    return _cached(lambda load: step_time_s(dep, load)[0])


def lockstep_fn(dep: Deployment, rank_s: StepFn) -> LockstepFn | None:
    """With ep > 1, one step of an instance's ep ranks together (`engine.lockstep_step_s`),
    each rank's own time `rank_s` (`step_fn`, `period_fn`: cached), the expert GEMMs of each
    rank's load and of the ranks' mean (`engine.experts_s`) cached as the step time is, keyed
    by ep times the load (whole sequences and prompts for the mean too); None without expert
    parallelism (the ranks are the instances)."""
    if dep.ep == 1:
        return None
    ranks = float(dep.ep)
    # keyed by ep times the load: whole numbers of sequences and prompts for the ranks' mean as
    # for a rank's own load, and only what the expert GEMMs read (`engine.experts_s`)
    cache: dict[tuple[int, int, int], float] = {}

    def experts(load: StepLoad) -> float:
        key = (
            round(ranks * float(load.decode)),
            round(ranks * float(load.prefill_seqs)),
            round(ranks * float(load.prefill_tokens)) // 16,
        )
        if key not in cache:
            cache[key] = float(experts_s(dep, load))
        return cache[key]

    def step(loads: list[StepLoad]) -> float:
        times = [rank_s(ld) if float(ld.tokens) > 0 else 0.0 for ld in loads]
        return lockstep_step_s(dep, loads, times, experts)

    return step


def speculation(dep: Deployment) -> Speculation:
    """The step loop's view of `dep`'s speculative decoding (plain decoding without drafts)."""
    return Speculation(dep.verified_tokens, dep.tokens_per_step)


def first_token_fn(dep: Deployment) -> FirstFn | None:
    """With pipelining, the time from a step's start until each of its prompts' first tokens,
    in admission order (`engine.prompt_exits_s`: each prompt crosses every stage whole in one
    micro-batch, the step's micro-batches entering a stage time apart), cached as `step_fn` is;
    None without pipelining (the step's end). The one rule for aggregated engines, chunks and
    disaggregated prefill instances alike."""
    if dep.pp == 1:
        return None
    return _cached(lambda load: prompt_exits_s(dep, load))


def result(
    dep: Deployment, arrival_rate: float, requests: int, output_tokens: int, run: Run, scale: int
) -> ServingResult:
    """A run's ServingResult; `scale`: the replicas the run's tokens/s stands for."""
    ttft, tpot = run.ttft_s, run.tpot_s
    # stable: the offered load; a queue that grew: what the engine made from when its batch
    # was full (or from the middle arrival) until the last arrival or admission; a run that had
    # not settled: what it made from the middle arrival (never the offered load unserved)
    if run.stable:
        served = arrival_rate * output_tokens
    else:
        served = (run.full_tokens_per_s if run.stable is False else run.tokens_per_s) * scale
    return summary(dep, arrival_rate, requests, run, ttft, tpot, served, run.stable)


def summary(
    dep: Deployment,
    arrival_rate: float,
    requests: int,
    gaps: Run,
    ttft_s: FloatArray,
    tpot_s: FloatArray,
    tokens_per_s: float,
    stable: bool | None,
) -> ServingResult:
    """The ServingResult of per-request TTFTs and TPOTs (their means and 99th percentiles),
    with the inter-token latency of the run that made the tokens after the first (`gaps`)."""
    return ServingResult(
        arrival_rate=arrival_rate,
        requests=requests,
        ttft_mean_s=float(ttft_s.mean()),
        ttft_p99_s=float(np.quantile(ttft_s, 0.99)),
        tpot_mean_s=float(tpot_s.mean()),
        tpot_p99_s=float(np.quantile(tpot_s, 0.99)),
        tokens_per_s=tokens_per_s,
        tokens_per_s_per_gpu=tokens_per_s / dep.gpus,
        stable=stable,
        itl_mean_s=gaps.itl_mean_s,
        itl_p99_s=gaps.itl_p99_s,
    )
