"""`railplan infer`: TTFT, TPOT, tokens/s per GPU and KV-cache capacity of one deployment at
steady state (the offline scenario: the engine always holds `batch` sequences).

At steady state with B running sequences of I prompt and O output tokens, every step decodes
B tokens over KV caches of I + (O + 1)/2 tokens on average, and B/O sequences finish — so B/O
new ones are admitted and their prompts (B·I/O tokens) are fused into the step. TPOT is that
step's time; tokens/s per GPU = B / TPOT / (tp·pp) (each ep rank runs its own B). With
speculative decoding a sequence gains E = `Deployment.tokens_per_step` tokens per step on
average and decodes for d = (O − 1)/E steps, at least one (`decode_steps`: the last step yields
what is left): B/(1 + d) sequences finish per step, each with O tokens, and TPOT is d steps over
its O − 1 decoded tokens (the step's time / E when O − 1 ≥ E).
TTFT without queueing: a new request waits on average half a step for the step boundary, then
its prompt rides in the next step. Queueing under Poisson load is `railplan.inference.serving`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from railplan.errors import RailplanError
from railplan.inference import kvcache
from railplan.inference.engine import (
    Deployment,
    Num,
    StepLoad,
    cold_step_s,
    prompt_traversal_s,
    step_time_s,
    step_times,
)
from railplan.inference.serving import DEFAULT_MAX_BATCH, MAX_NUM_TOKENS
from railplan.limits import MAX_GLOBAL_BATCH, MAX_TOKENS, check_int
from railplan.records import Record
from railplan.specs import Model
from railplan.specs.arrays import FloatArray


@dataclass(frozen=True)
class InferenceResult(Record):
    model: str
    system: str
    network: str
    gpus: int
    tp: int
    pp: int
    ep: int
    precision: str
    two_batch_overlap: bool
    speculative_tokens: int
    acceptance: float
    # the serving framework's all-reduce kernel applies (Deployment.framework_all_reduce)
    custom_all_reduce: bool
    tokens_per_step: float
    batch: int
    input_tokens: int
    output_tokens: int
    ttft_s: float
    tpot_s: float
    step_s: float  # one engine step of the steady state (TPOT × E when O − 1 ≥ E)
    tokens_per_s_per_gpu: float
    tokens_per_s: float
    weights_gib_per_gpu: float
    kv_cache_gib_per_gpu: float
    kv_capacity_gib_per_gpu: float
    max_batch: int
    fits: bool
    breakdown_s: dict[str, float]
    # disaggregated (`search.choice_result`): the GPUs of the prefill instances (0: aggregated)
    # and the KV transfer in the TTFT
    prefill_gpus: int = 0
    kv_transfer_s: float = 0.0
    chunked_prefill: bool = False  # prompts run in chunks (`steady_times`)


def decode_steps(output_tokens: int, tokens_per_step: float) -> float:
    """Steps a sequence decodes for after its prompt's step: (O − 1)/E on average, at least one
    (drafts cannot make a token in less than a step; the last step yields what is left); none
    when the prompt's step yields its only token (O = 1)."""
    if output_tokens <= 1:
        return 0.0
    return max(1.0, (output_tokens - 1) / tokens_per_step)


def steady_tokens_per_s(
    batch: Num, output_tokens: int, tokens_per_step: float, tpot_s: Num
) -> FloatArray:
    """Output tokens/s of B sequences at steady state: B/(1 + d) finish per step, each with O
    tokens; the step is TPOT·(O − 1)/d (B / TPOT without drafts)."""
    d = decode_steps(output_tokens, tokens_per_step)
    per_step = np.asarray(batch, dtype=np.float64) * output_tokens / (1.0 + d)
    return np.asarray(per_step * d / (np.asarray(tpot_s) * (output_tokens - 1)))


def chunks_per_prompt(input_tokens: int, chunk_tokens: Num | None) -> FloatArray:
    """Chunks a prompt runs in with chunked prefill of at most `chunk_tokens` per step (1:
    whole, also without chunking, None)."""
    if chunk_tokens is None:
        return np.asarray(1.0)
    return np.asarray(np.ceil(input_tokens / np.maximum(chunk_tokens, 1.0)))


def steady_load(
    batch: Num,
    input_tokens: int,
    output_tokens: int,
    tokens_per_step: float = 1.0,
    chunk_tokens: Num | None = None,
) -> StepLoad:
    """The load of one step of the offline steady state (module docstring); `batch` may be an
    array of batch sizes; `tokens_per_step` E: what a running sequence gains per step. A
    sequence lives 1 + d steps (its prompt's, which yields the first token, then `decode_steps`
    d = (O − 1)/E, at least one), so B/(1 + d) finish and as many start per step (B/O without
    drafts). With chunked prefill (`chunk_tokens`: the most prompt tokens a step runs) each
    prompt runs as n = ⌈I / chunk⌉ equal chunks of I/n tokens, the j-th after j·I/n of its
    tokens are cached: per prompt n chunks and (I/n)²·n(n − 1)/2 cached query-key pairs, so
    that its attention work is the whole prompt's."""
    new = batch / (1.0 + decode_steps(output_tokens, tokens_per_step))
    n = chunks_per_prompt(input_tokens, chunk_tokens)
    piece = input_tokens / n
    return StepLoad(
        decode=batch,
        context_tokens=batch * (input_tokens + (output_tokens + 1) / 2.0),
        prefill_tokens=new * input_tokens,
        prefill_seqs=new * n,
        prefill_cross_tokens=new * piece * piece * n * (n - 1.0) / 2.0,
    )


def chunk_budget(dep: Deployment, batch: Num) -> FloatArray:
    """Prompt tokens a step of `batch` running sequences has room for with chunked prefill:
    what MAX_NUM_TOKENS leaves beside their decode tokens (at least one: the batch is at most
    `chunked_batch_limit`)."""
    decode = np.asarray(batch, dtype=np.float64) * dep.verified_tokens
    return np.asarray(np.maximum(MAX_NUM_TOKENS - decode, 1.0))


def steady_times(
    dep: Deployment,
    batch: Num,
    input_tokens: int,
    output_tokens: int,
    chunked: bool = False,
) -> tuple[FloatArray, FloatArray, dict[str, FloatArray]]:
    """(TTFT without queueing, TPOT, the step by component) of the steady state, over `batch`
    (scalar or array): a new request waits half a step, then rides in a step with the
    batch − 1 others and the average number of newcomers, its prompt whole in one pipeline
    micro-batch that crosses every stage (`engine.prompt_traversal_s`; the step itself
    without pipelining). With `chunked` prefill its n chunks (`steady_load`, at the room
    `chunk_budget` leaves) ride in n such steps, the last of them crossing the stages."""
    e = dep.tokens_per_step
    chunk = chunk_budget(dep, batch) if chunked else None
    load = steady_load(batch, input_tokens, output_tokens, e, chunk)
    step, parts = step_times(dep, load)
    others = np.asarray(batch, dtype=np.float64) - 1.0
    d = decode_steps(output_tokens, e)
    newcomers = others / (1.0 + d)
    n = chunks_per_prompt(input_tokens, chunk)
    piece = input_tokens / n
    # a step carrying one of the request's chunks beside the others' average n·newcomers (with
    # chunking, as many of theirs as the room leaves)
    chunks = 1.0 + n * newcomers
    if chunk is not None:
        chunks = 1.0 + np.minimum(n * newcomers, np.maximum(chunk - piece, 0.0) / piece)
    join = replace(
        steady_load(others, input_tokens, output_tokens, e, chunk),
        prefill_tokens=piece * chunks,
        prefill_seqs=chunks,
        prefill_cross_tokens=piece * piece * (n - 1.0) / 2.0 * chunks,
    )
    # each of its n chunks crosses every stage before the next runs (one step each without
    # pipelining)
    # (with ep > 1 the other ranks carry the steady load: this rank, with the prompt, is the
    # slowest of the step, its experts at the ranks' mean)
    ttft = 0.5 * step + n * prompt_traversal_s(dep, join, load)
    return np.asarray(ttft), step * d / (output_tokens - 1), parts


def chunked_batch_limit(dep: Deployment, input_tokens: int, output_tokens: int) -> int:
    """The most running sequences a chunked-prefill step budget sustains at these lengths:
    each step carries the prompts of the B/(1 + d) sequences that start (`steady_load`) beside
    the B·v tokens of the running ones, within MAX_NUM_TOKENS (the chunked step budget; v:
    the tokens a running sequence puts through a step)."""
    d = decode_steps(output_tokens, dep.tokens_per_step)
    per_sequence = input_tokens / (1.0 + d) + dep.verified_tokens
    return max(1, int(MAX_NUM_TOKENS // per_sequence))


def whole_prompt_batch_limit(
    dep: Deployment,
    input_tokens: int,
    output_tokens: int,
    engine_batch: int,
    max_num_tokens: int | None = None,
) -> int:
    """The most running sequences, at most `engine_batch`, a step budget sustains when prompts
    run whole (no chunked prefill), as the load simulation's engine admits them
    (`dispatch.admit`): a step takes whole prompts only, k of them beside the B·v tokens of the
    running sequences where k·I + B·v ≤ T (v: the tokens a running sequence puts through a
    step), and the steady state starts B/(1 + d) a step (`steady_load`), so B ≤ k·(1 + d) for
    some such k. T is `max_num_tokens`; None: the simulation's default for an engine of B
    sequences (`serving.step_budget`: MAX_NUM_TOKENS, or room for one prompt beside the batch's
    tokens), under which one prompt a step (B ≤ 1 + d) always fits. Taking the budget of the
    batch it returns makes the rule its own fixed point: that batch given back runs as is (and
    a simulation of an engine of more sequences has at least that budget). Where no prompt fits
    beside a running sequence, the engine admits one only when empty: one sequence."""
    c = 1.0 + decode_steps(output_tokens, dep.tokens_per_step)  # steps a sequence lives
    v = dep.verified_tokens
    fixed = MAX_NUM_TOKENS if max_num_tokens is None else max_num_tokens
    most = 0.0
    if input_tokens <= fixed:  # the best k is next to where k·c meets (T − k·I)/v
        crossing = fixed / (input_tokens + c * v)
        for k in {max(1, math.floor(crossing)), max(1, math.ceil(crossing))}:
            if k * input_tokens <= fixed:
                most = max(most, min(math.floor(k * c), math.floor((fixed - k * input_tokens) / v)))
    if max_num_tokens is None:  # a budget raised for one prompt beside the batch
        most = max(most, math.floor(c))
    return int(max(1, min(engine_batch, most)))


def check_tokens(
    input_tokens: int, output_tokens: int, model: Model | None = None
) -> tuple[int, int]:
    """The prompt and output token counts as Python ints in [1, 10^7] and, with a `model` whose
    spec states its context (`Model.context_tokens`), within it (one-line errors)."""
    i = check_int("input_tokens", input_tokens, 1, MAX_TOKENS)
    o = check_int("output_tokens", output_tokens, 1, MAX_TOKENS)
    if model is not None:
        check_context(model, i, o)
    return i, o


def check_context(model: Model, i: int, o: int) -> None:
    """A one-line error where `i` prompt and `o` output tokens exceed the context the model
    serves (`Model.context_tokens`; nothing to check where the spec does not state it)."""
    if model.context_tokens is not None and i + o > model.context_tokens:
        room = model.context_tokens - o
        fix = (
            f"the prompt may be at most {room:,} tokens with {o:,} output"
            if room >= 1
            else f"the output alone needs fewer than {model.context_tokens:,} tokens"
        )
        raise RailplanError(
            "input_tokens",
            f"{i:,} prompt + {o:,} output tokens exceed {model.name}'s context of "
            f"{model.context_tokens:,} tokens (its `context_tokens`); {fix}",
        )


def check_decoding(output_tokens: int) -> None:
    """TPOT, the time between output tokens, needs two of them: a one-line error otherwise."""
    if output_tokens < 2:
        raise RailplanError(
            "output_tokens",
            "must be at least 2: with one output token there is no decode step, so no TPOT "
            "(the first token's time is TTFT at any output length)",
        )


def default_batch(max_batch: int) -> int:
    """The batch `infer` runs when none is given: the most that fits, at most DEFAULT_MAX_BATCH
    (and one sequence where none fits)."""
    return max(1, min(max_batch, DEFAULT_MAX_BATCH))


def infer(
    dep: Deployment,
    batch: int | None,
    input_tokens: int,
    output_tokens: int,
    chunked: bool = False,
    max_num_tokens: int | None = None,
    prompts: bool = True,
) -> InferenceResult:
    """Steady-state serving of `dep` with `batch` sequences per tp × pp group (None: the largest
    that fits, at most DEFAULT_MAX_BATCH), at most the batch the step budget sustains: with
    `chunked` prefill (`steady_times`) `chunked_batch_limit`, with prompts whole
    `whole_prompt_batch_limit` at the engine's `max_num_tokens` (None: the load simulation's
    default). `prompts` False: the batch of an engine that runs no prompts (a disaggregated
    deployment's decode instances), which no step budget bounds."""
    input_tokens, output_tokens = check_tokens(input_tokens, output_tokens)
    check_decoding(output_tokens)
    check_context(dep.model, input_tokens, output_tokens)
    seq = input_tokens + output_tokens
    most = dep.max_batch(seq)
    given = batch is not None
    batch = check_int("batch", batch, 1, MAX_GLOBAL_BATCH) if given else default_batch(most)
    fits = batch <= most  # the batch asked for (the budget may run fewer)
    # the step budget, not only the KV cache, bounds what runs
    if chunked:
        batch = min(batch, chunked_batch_limit(dep, input_tokens, output_tokens))
    elif prompts:
        batch = whole_prompt_batch_limit(dep, input_tokens, output_tokens, batch, max_num_tokens)
    ttft_a, tpot_a, parts_a = steady_times(dep, batch, input_tokens, output_tokens, chunked)
    ttft, tpot = float(ttft_a), float(tpot_a)
    parts = {k: float(v) for k, v in parts_a.items()}
    per_group = float(steady_tokens_per_s(batch, output_tokens, dep.tokens_per_step, tpot))
    kv = batch * kvcache.paged_tokens(seq) * dep.kv_bytes_per_token
    cap = kvcache.kv_capacity_bytes(dep.memory_bytes, dep.weight_bytes_per_gpu)
    return InferenceResult(
        model=dep.model.name,
        system=dep.system.name,
        network=dep.network.architecture,
        gpus=dep.gpus,
        tp=dep.tp,
        pp=dep.pp,
        ep=dep.ep,
        precision=dep.precision,
        two_batch_overlap=dep.two_batch_overlap,
        speculative_tokens=dep.speculative_tokens,
        acceptance=dep.acceptance,
        custom_all_reduce=dep.framework_all_reduce is not None,
        tokens_per_step=dep.tokens_per_step,
        batch=batch,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        ttft_s=ttft,
        tpot_s=tpot,
        step_s=tpot * (output_tokens - 1) / decode_steps(output_tokens, dep.tokens_per_step),
        tokens_per_s_per_gpu=per_group / (dep.tp * dep.pp),
        tokens_per_s=per_group * dep.gpus / (dep.tp * dep.pp),
        weights_gib_per_gpu=dep.weight_bytes_per_gpu / kvcache.GIB,
        kv_cache_gib_per_gpu=kv / kvcache.GIB,
        kv_capacity_gib_per_gpu=max(cap, 0.0) / kvcache.GIB,
        max_batch=most,
        fits=fits,
        breakdown_s=parts,
        chunked_prefill=chunked,
    )


def static_batch_tokens_per_s_per_gpu(
    dep: Deployment, batch: int, input_tokens: int, output_tokens: int
) -> float:
    """One static batch: all prompts in one step (which yields the first tokens), then
    `decode_steps` (output − 1)/E, at least one (E = `Deployment.tokens_per_step`, 1 without
    speculative decoding) over a context growing from I + 1 to I + O − 1 (the step time is
    linear in the context, so the mean context gives the sum)."""
    input_tokens, output_tokens = check_tokens(input_tokens, output_tokens, dep.model)
    prefill = cold_step_s(
        dep, StepLoad(prefill_tokens=batch * input_tokens, prefill_seqs=float(batch))
    )
    ctx = input_tokens + output_tokens / 2.0
    decode = step_time_s(dep, StepLoad(decode=batch, context_tokens=batch * ctx))[0]
    total = prefill + decode_steps(output_tokens, dep.tokens_per_step) * decode
    return batch * output_tokens / total / (dep.tp * dep.pp)


def first_token_s(dep: Deployment, input_tokens: int) -> float:
    """Time to first token of one request alone: its prompt through every pipeline stage
    (the step with its prompt on one of pp micro-batches, and the pp − 1 stages more it
    crosses in an empty pipeline)."""
    input_tokens, _ = check_tokens(input_tokens, 1, dep.model)
    return cold_step_s(dep, StepLoad(prefill_tokens=input_tokens, prefill_seqs=1.0))
