"""A disaggregated deployment under Poisson load: prefill instances, then the KV transfer,
then decode instances, every instance simulated.

`infer-search` sizes a disaggregated split (`search.disaggregated_choices`) from its two
rates alone, with a TTFT that holds no queueing: its prefill instances are balanced to run at
full utilization, where a queue of Poisson arrivals grows without bound. Here the same
deployment (`prefill_instances` of its tp·pp·ep instances prefill, the others decode) takes a
stream of requests, as an operator's load test would:

1. **Prefill.** Each arrival goes to the prefill rank with the fewest requests in flight
   (a router in front of disaggregated instances — NVIDIA Dynamo's, SGLang's — balances load
   so; `dispatch.least_busy`). A prefill rank is the step loop of `serving` on requests of one
   output token: each step takes the waiting prompts whole, as many as MAX_PREFILL_TOKENS
   holds (an idle one takes the next prompt however long), and yields their first tokens. A
   busy pipeline starts a step every period (`engine.step_time_s`); each prompt's first token
   comes out when its micro-batch has crossed every stage, the step's micro-batches entering
   a stage time apart (`engine.prompt_exits_s`, the aggregated engine's rule).
2. **KV transfer.** The prompt's KV cache then goes to a decode instance, with those of the
   other prompts of its prefill step, sharing the links (`search.kv_transfer_s` of the step's
   prompt tokens: NVLink inside an HB domain, else the NIC, on rail-only with the forwarding
   hop where the instances do not start at the same local rank).
3. **Decode.** The request joins the least busy decode rank at the next step boundary, if its
   batch has room (`dispatch._Replica._decode_step`: no prompt runs there), and makes its
   other O − 1 tokens there. TTFT = that admission − the arrival: the first token reaches the
   user from the decode side once the request holds a slot there with its KV cache (vLLM's,
   SGLang's and NVIDIA Dynamo's disaggregated serving stream the output from the decode
   instance), so a wait for a decode slot counts in TTFT; `infer-search`'s TTFT counts the
   transfer and no wait. TPOT = (finish − admission) / (O − 1). A one-token answer is done at
   its prefill.

Stability: the run kept up when both sides did (`dispatch.Run.stable`); output tokens/s is then
the offered load, else the smaller of what the two sides served. A decode instance that starts
from idle does not pay the pipeline fill (its steps are periods).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from railplan.errors import RailplanError
from railplan.inference.dispatch import FirstFn, Run, StepFn, least_busy
from railplan.inference.engine import Deployment
from railplan.inference.estimate import (
    InferenceResult,
    check_context,
    check_decoding,
    check_tokens,
    infer,
)
from railplan.inference.search import (
    choice_result,
    disaggregated_choices,
    kv_transfer_s,
)
from railplan.inference.serving import (
    MAX_PREFILL_TOKENS,
    MAX_SIMULATED_REQUESTS,
    Lengths,
    ServingResult,
    _check_simulation,
    _lengths,
    batch_limit,
    first_token_fn,
    lockstep_fn,
    period_fn,
    run_requests,
    speculation,
    step_budget,
    step_fn,
    summary,
)
from railplan.limits import check_int
from railplan.specs.arrays import FloatArray


@dataclass(frozen=True)
class DisaggregatedRun:
    """The two sides' runs and the requests' end-to-end times."""

    prefill: Run
    decode: Run
    ttft_s: FloatArray
    tpot_s: FloatArray
    kv_transfer_s: FloatArray  # per request


def prefill_step_fns(dep: Deployment) -> tuple[StepFn, FirstFn | None]:
    """A prefill instance's step (a pipeline period) and the time from a step's start to each
    of its prompts' first tokens (`serving.first_token_fn`, the aggregated engine's rule; None
    without pipelining: the step's end), both cached."""
    return period_fn(dep), first_token_fn(dep)


def check_split(dep: Deployment, prefill_instances: int) -> int:
    """`prefill_instances` as an int in [1, instances − 1]: a one-line error otherwise."""
    if dep.replicas < 2:
        raise RailplanError(
            "prefill_gpus",
            f"disaggregated serving needs two instances of tp·pp·ep = {dep.instance_gpus} "
            f"GPUs; {dep.gpus} GPUs hold {dep.replicas}",
        )
    return check_int("prefill_instances", prefill_instances, 1, dep.replicas - 1)


def prefill_instances_of(dep: Deployment, prefill_gpus: int) -> int:
    """The instances `prefill_gpus` GPUs make: a one-line error unless a whole number of
    tp·pp·ep instances that leaves one to decode."""
    check_split(dep, 1)
    per = dep.instance_gpus
    gpus = check_int("prefill_gpus", prefill_gpus, per, (dep.replicas - 1) * per)
    if gpus % per:
        raise RailplanError(
            "prefill_gpus",
            f"must be a multiple of tp·pp·ep = {per} (whole instances); got {gpus}",
        )
    return gpus // per


def infer_disaggregated(
    dep: Deployment,
    batch: int | None,
    input_tokens: int,
    output_tokens: int,
    prefill_instances: int,
) -> InferenceResult:
    """`infer`'s steady state for `dep` run disaggregated, `prefill_instances` of its
    instances prefilling (`search.disaggregated_choices` at the batch `infer` takes: the most
    that fits, or `batch`), as `infer-search` reports a disaggregated choice."""
    p = check_split(dep, prefill_instances)
    r = infer(dep, batch, input_tokens, output_tokens, prompts=False)
    (c,) = disaggregated_choices(dep, np.asarray([r.batch]), r.input_tokens, r.output_tokens, p)
    return choice_result(dep, c, r.input_tokens, r.output_tokens, r)


def simulate_disaggregated(
    dep: Deployment,
    prefill_instances: int,
    rate_per_s: float,
    requests: int,
    input_tokens: int,
    output_tokens: int,
    max_batch: int,
    seed: int = 0,
    lengths: Lengths | None = None,
) -> DisaggregatedRun:
    """Every request's TTFT and TPOT through `dep` run disaggregated (module docstring), at
    `rate_per_s` requests/s for the whole deployment, `requests` in all, `max_batch` sequences
    per decode rank."""
    p = check_split(dep, prefill_instances)
    pre_ranks, dec_ranks = p * dep.ep, (dep.replicas - p) * dep.ep
    _check_simulation(rate_per_s, -(-requests // dec_ranks), max_batch, MAX_PREFILL_TOKENS)
    if requests > MAX_SIMULATED_REQUESTS:
        raise RailplanError(
            "requests",
            f"{requests:,} simulated requests; at most {MAX_SIMULATED_REQUESTS:,} (use fewer)",
        )
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / rate_per_s, requests))
    prompt, output = _lengths(rng, requests, input_tokens, output_tokens, lengths)
    period, first = prefill_step_fns(dep)
    pre = least_busy(
        period,
        rate_per_s,
        arrivals,
        prompt,
        np.ones_like(output),  # a prefill instance yields the first token and is done
        pre_ranks,
        MAX_PREFILL_TOKENS,
        MAX_PREFILL_TOKENS,
        first_s=first,
        lockstep=dep.ep,
        lockstep_s=lockstep_fn(dep, period),
    )
    # each prompt's KV cache leaves once its first token is out, timed as sharing the links
    # with the rest of its step's prompts (the whole step's prompt tokens)
    assert pre.step_tokens is not None  # (least_busy records them)
    xfer = np.asarray(kv_transfer_s(dep, 1.0, pre.step_tokens))
    kv_at = arrivals + pre.ttft_s + xfer  # when each request's KV cache is on a decode GPU
    # the requests with more than one token go on to decode, in the order their KV arrives
    goes = np.flatnonzero(output > 1)
    order = goes[np.argsort(kv_at[goes], kind="stable")]
    spec = speculation(dep)
    if order.size == 0:  # (a data set of one-token answers: nothing decodes)
        raise RailplanError("lengths", "every request has one output token: nothing to decode")
    decode_s = step_fn(dep)
    dec = least_busy(
        decode_s,
        rate_per_s * order.size / requests,
        kv_at[order],
        prompt[order],
        output[order],
        dec_ranks,
        max_batch,
        step_budget(0, max_batch * spec.verified),
        spec,
        prefilled=True,
        lockstep=dep.ep,
        lockstep_s=lockstep_fn(dep, decode_s),
    )
    # the first token reaches the user once the request holds a decode slot with its KV cache
    # (the decode side streams the output); a one-token answer is done at its prefill
    ttft = np.array(pre.ttft_s, dtype=np.float64)
    ttft[order] = kv_at[order] + dec.ttft_s - arrivals[order]
    keep = output > 1  # TPOT of the requests that have a second token: from the slot on
    tpot = np.zeros(requests)
    tpot[order] = dec.tpot_s
    return DisaggregatedRun(pre, dec, ttft, tpot[keep], xfer)


def serve_disaggregated(
    dep: Deployment,
    prefill_instances: int,
    arrival_rate: float,
    input_tokens: int,
    output_tokens: int,
    batch: int | None = None,
    requests: int | None = None,
    seed: int = 0,
    lengths: Lengths | None = None,
    min_duration_s: float = 0.0,
) -> ServingResult:
    """`dep` run disaggregated under Poisson arrivals at `arrival_rate` requests/s (module
    docstring); `batch`: sequences per decode rank (None: the most the KV cache holds, at most
    DEFAULT_MAX_BATCH);
    `requests` per decode rank (None: `serving.run_requests`, with `min_duration_s` seconds
    of arrivals at least), within what one simulation takes in all."""
    input_tokens, output_tokens = check_tokens(input_tokens, output_tokens)
    check_decoding(output_tokens)
    check_context(dep.model, input_tokens, output_tokens)
    p = check_split(dep, prefill_instances)
    dec_ranks = (dep.replicas - p) * dep.ep
    limit = batch_limit(dep, input_tokens + output_tokens, batch)
    if requests is None:
        rate = arrival_rate / dec_ranks
        requests = run_requests(
            dep, rate, limit, input_tokens, output_tokens, dec_ranks, min_duration_s
        )
    requests = check_int("requests", requests, 1, MAX_SIMULATED_REQUESTS)
    total = requests * dec_ranks
    if total > MAX_SIMULATED_REQUESTS:
        raise RailplanError(
            "requests",
            f"must be in [1, {MAX_SIMULATED_REQUESTS // dec_ranks:,}] here ({dec_ranks:,} "
            f"decode ranks, at most {MAX_SIMULATED_REQUESTS:,} requests in all); got {requests:,}",
        )
    run = simulate_disaggregated(
        dep, p, arrival_rate, total, input_tokens, output_tokens, limit, seed, lengths
    )
    sides = (run.prefill.stable, run.decode.stable)
    stable = False if False in sides else (None if None in sides else True)
    mean_out = float(np.mean(lengths[1])) if lengths is not None else float(output_tokens)
    if stable:
        served = arrival_rate * mean_out
    else:
        # what each side served, in output tokens: a prefill rank makes a request's first
        # token, a decode rank the other O − 1
        def made(r: Run, per_token: float) -> float:
            return (r.full_tokens_per_s if r.stable is False else r.tokens_per_s) * per_token

        served = min(
            made(run.prefill, mean_out),
            made(run.decode, mean_out / max(mean_out - 1.0, 1e-9)),
        )
    out = summary(dep, arrival_rate, requests, run.decode, run.ttft_s, run.tpot_s, served, stable)
    return replace(
        out,
        step_budget_tokens=MAX_PREFILL_TOKENS,
        prefill_gpus=p * dep.instance_gpus,
        kv_transfer_s=float(np.mean(run.kv_transfer_s)),
    )
