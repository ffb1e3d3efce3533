"""`railplan infer-search`: the serving configuration with the most output tokens/s per GPU
that meets a TTFT and a TPOT limit, on each network, and whether serving needs a spine.

Candidates, for every tp × pp (× ep for MoE, each with and without the two-batch overlap of
the expert all-to-alls) that divides the GPUs, tp splitting the attention heads as serving
frameworks do (`engine.tp_splits_heads`), and batches in
quarter-octave steps (1, 2, 3, … 8, 10, 11, 13, …) up to the largest that fits:
- aggregated: every group runs prefill and decode in the same steps (`estimate.infer`);
- disaggregated: P instances only prefill (prompts in chunks of MAX_PREFILL_TOKENS) and D
  instances only decode, P + D = gpus / (tp·pp·ep), split where the two rates balance (the
  prefill:decode GPU ratio, the whole P that takes the most requests/s); the KV cache of each
  prompt goes from its prefill GPUs to the decode GPUs of the same rank: over NVLink when all
  GPUs share one HB domain, else over the NIC — and on rail-only, when the instances do not
  start at the same local rank (tp·pp·ep not a multiple of K), through one more HB hop to the
  peer's rail (forwarding).
TTFT here is the steady-state estimate without queueing (half a step of waiting plus the step
carrying the prompt, plus the KV transfer; a disaggregated chunk also fills the prefill
pipeline, `engine.pipeline_fill_s`); `serving.serve` gives the loaded values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import numpy as np

from railplan.errors import RailplanError
from railplan.inference.engine import (
    DEFAULT_ACCEPTANCE,
    Deployment,
    Num,
    StepLoad,
    pipeline_fill_s,
    step_time_s,
    step_times,
    tp_splits_heads,
)
from railplan.inference.estimate import (
    InferenceResult,
    check_context,
    check_decoding,
    check_tokens,
    decode_steps,
    infer,
    steady_load,
    steady_times,
    steady_tokens_per_s,
    whole_prompt_batch_limit,
)
from railplan.inference.serving import DEFAULT_MAX_BATCH, MAX_PREFILL_TOKENS
from railplan.inference.traffic import configuration_traffic
from railplan.limits import check_int
from railplan.records import Record
from railplan.specs import Model, Network, System, load_model, load_network, load_system
from railplan.specs.arrays import FloatArray, IntArray
from railplan.specs.base import Range

SLO = Range(1e-4, 3600.0, "s")
#: MLPerf Inference server-scenario limits of Llama 3.1 405B (v5.0): TTFT 6 s, TPOT 175 ms
MLPERF_SERVER_TTFT_S = 6.0
MLPERF_SERVER_TPOT_S = 0.175
#: the example request of docs/inference.md and the report (not a data set's mean lengths)
EXAMPLE_INPUT_TOKENS = 2048
EXAMPLE_OUTPUT_TOKENS = 256
NETWORKS: tuple[str, ...] = ("rail-optimized", "rail-only", "ideal")
#: "needs a spine" when rail-only serves this much less than rail-optimized
SPINE_THRESHOLD = 0.01


@dataclass(frozen=True)
class Choice(Record):
    mode: str  # aggregated | disaggregated
    tp: int
    pp: int
    ep: int
    two_batch_overlap: bool
    batch: int
    prefill_gpus: int
    decode_gpus: int
    ttft_s: float
    tpot_s: float
    tokens_per_s_per_gpu: float
    kv_transfer_s: float


#: GPUs one search covers: a serving deployment, not a data-centre (keeps the divisor loops short)
MAX_SEARCH_GPUS = 65_536


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def batches(most: int) -> IntArray:
    """Batch sizes tried: quarter-octave steps 1, 2, 3, 4, 5, 6, 7, 8, 10, … up to the largest
    that fits (at most DEFAULT_MAX_BATCH), which is always included."""
    top = min(most, DEFAULT_MAX_BATCH)
    if top < 1:
        return np.zeros(0, dtype=np.int64)
    steps = np.round(2.0 ** (np.arange(int(4 * math.log2(top)) + 1) / 4.0)).astype(np.int64)
    return np.unique(np.append(steps[steps <= top], top))


def kv_transfer_s(dep: Deployment, prompts: Num, input_tokens: Num) -> Num:
    """Time to ship the KV cache of `prompts` prompts of `input_tokens` tokens each from
    prefill to decode GPUs (module doc); arrays give arrays."""
    lk = dep.links
    size = prompts * np.asarray(input_tokens, dtype=np.float64) * dep.kv_bytes_per_token
    k = float(np.max(lk.hb_domain))
    if dep.gpus <= k:
        return size / lk.hb_bw + lk.hb_lat_s
    t = size / lk.nic_bw_spread + lk.nic_lat_s
    if lk.rail_only and dep.instance_gpus % int(k):
        t += size / lk.hb_bw + lk.hb_lat_s
    return t


T = TypeVar("T")


def best_buildable(
    items: list[T], network: Callable[[T], str], value: Callable[[T], float]
) -> T | None:
    """The item of most `value` among those on a network one can build, or among all of them
    where none is (`ideal`, one HB domain for every GPU, is a bound, not a design); None
    without items."""
    buildable = [i for i in items if network(i) != "ideal"] or items
    return max(buildable, key=value) if buildable else None


def configuration_words(c: Mapping[str, Any]) -> str:
    """A configuration (a `Choice`'s keys) in words: 'aggregated tp 1 pp 2 ep 16, two-batch
    overlap' or 'disaggregated 16:16 tp 1 …'."""
    split = f" {c['prefill_gpus']}:{c['decode_gpus']}" if c["prefill_gpus"] else ""
    tbo = ", two-batch overlap" if c["two_batch_overlap"] else ""
    return f"{c['mode']}{split} tp {c['tp']} pp {c['pp']} ep {c['ep']}{tbo}"


def decode_load(
    batch: Num, input_tokens: int, output_tokens: int, tokens_per_step: float
) -> StepLoad:
    """A disaggregated decode instance's step: the steady state's running sequences, no prompts."""
    steady = steady_load(batch, input_tokens, output_tokens, tokens_per_step)
    return replace(steady, prefill_tokens=0.0, prefill_seqs=0.0)


def _aggregated(
    dep: Deployment, b: IntArray, input_tokens: int, output_tokens: int
) -> list[Choice]:
    ttft, tpot, _ = steady_times(dep, b.astype(np.float64), input_tokens, output_tokens)
    e = dep.tokens_per_step
    tokens = steady_tokens_per_s(b.astype(np.float64), output_tokens, e, tpot) / (dep.tp * dep.pp)
    return [
        Choice(
            "aggregated",
            dep.tp,
            dep.pp,
            dep.ep,
            dep.two_batch_overlap,
            int(bi),
            0,
            dep.gpus,
            float(f),
            float(t),
            float(x),
            0.0,
        )
        for bi, f, t, x in zip(b, ttft, tpot, tokens, strict=True)
    ]


@dataclass(frozen=True)
class Split:
    """A disaggregated deployment's rates at batch `b` (arrays over the batches): its decode
    instances' TPOT, the requests/s one prefill instance (`pre_rate`, prompts in chunks of
    `chunk`, each chunk a step of `prefill_step_s`) and one decode instance (`dec_rate`) can
    take, and one chunk's KV transfer (`kv_transfer_s`)."""

    tpot_s: FloatArray
    pre_rate: float
    dec_rate: FloatArray
    chunk: int
    prefill_step_s: float
    kv_transfer_s: float
    decoded: int  # output tokens a decode instance makes per request (O − 1)


def prefill_chunk(input_tokens: int) -> int:
    """Prompts one prefill-only step carries: as many whole ones as MAX_PREFILL_TOKENS holds,
    at least one."""
    return max(1, MAX_PREFILL_TOKENS // input_tokens)


def split_rates(dep: Deployment, b: Num, input_tokens: int, output_tokens: int) -> Split:
    """The rates of `dep` run disaggregated with `b` sequences per decode rank (`Split`)."""
    decode = decode_load(
        np.asarray(b, dtype=np.float64), input_tokens, output_tokens, dep.tokens_per_step
    )
    step = step_times(dep, decode)[0]
    # a request holds a decode slot for d steps and makes O − 1 tokens there
    tpot = step * decode_steps(output_tokens, dep.tokens_per_step) / max(output_tokens - 1, 1)
    chunk = prefill_chunk(input_tokens)
    t_pre = step_time_s(dep, StepLoad(prefill_tokens=chunk * input_tokens, prefill_seqs=chunk))[0]
    # requests/s per instance: the prefill yields a request's first token, so a decode slot
    # holds it for the other O − 1 (none when O = 1: the decode side then needs one instance)
    decoded = output_tokens - 1
    dec_rate = dep.ep * b / (tpot * decoded) if decoded else np.full_like(tpot, np.inf)
    return Split(
        np.asarray(tpot),
        dep.ep * chunk / t_pre,
        np.asarray(dec_rate),
        chunk,
        t_pre,
        float(kv_transfer_s(dep, chunk, input_tokens)),
        decoded,
    )


def balanced_prefill_instances(dep: Deployment, split: Split) -> IntArray:
    """Prefill instances of `dep.replicas` that take the most requests/s, min(p · prefill rate,
    (replicas − p) · decode rate), at least one of each: the whole number nearest the point
    where the two rates balance, or the one on its other side where that takes strictly more
    (the nearest is not always the better: 16 instances, a prefill instance ten times as fast
    as a decode one, balance at 1.45; one prefill instance takes 10 decode instances' rate, two
    take 14)."""
    g, pre = dep.replicas, split.pre_rate
    dec = np.asarray(split.dec_rate, dtype=np.float64)
    if not split.decoded:  # no decode work: one decode instance
        return np.full(dec.shape, g - 1, dtype=np.int64)
    point = g * dec / (pre + dec)
    near = np.clip(np.round(point), 1, g - 1)
    other = np.clip(np.where(near > point, near - 1, near + 1), 1, g - 1)
    better = split_requests_per_s(split, g, other) > split_requests_per_s(split, g, near)
    return np.asarray(np.where(better, other, near), dtype=np.int64)


def split_requests_per_s(split: Split, instances: int, prefill: Num | IntArray) -> FloatArray:
    """Requests/s `instances` instances take split `prefill` : `instances − prefill` (`split`'s
    rates per instance; arrays broadcast): the smaller of the two sides' rates, the prefill
    side's alone when nothing is decoded (one output token)."""
    p = np.asarray(prefill, dtype=np.float64)
    rate = p * split.pre_rate
    if split.decoded:
        rate = np.minimum(rate, (instances - p) * split.dec_rate)
    return np.asarray(rate)


def disaggregated_choices(
    dep: Deployment,
    b: IntArray,
    input_tokens: int,
    output_tokens: int,
    prefill_instances: int | IntArray | None = None,
) -> list[Choice]:
    """`dep` run disaggregated at each batch of `b`: `prefill_instances` of its tp·pp·ep
    instances prefill and the others decode (one for every batch, or one per batch; None:
    `balanced_prefill_instances`). TTFT is the
    steady-state estimate without queueing (half a chunk's step of waiting, the step, the
    pipeline fill and the KV transfer; `serving.serve_disaggregated` gives the loaded
    values); requests/s the smaller of what the two sides take."""
    groups = dep.replicas  # instances of tp·pp·ep GPUs; each of the ep ranks runs a batch
    if groups < 2:
        return []
    sp = split_rates(dep, b.astype(np.float64), input_tokens, output_tokens)
    if prefill_instances is None:
        p = balanced_prefill_instances(dep, sp)
    else:
        p = np.broadcast_to(np.asarray(prefill_instances, dtype=np.int64), b.shape)
    requests_per_s = split_requests_per_s(sp, groups, p)
    t_pre, xfer = sp.prefill_step_s, sp.kv_transfer_s
    ttft = 1.5 * t_pre + float(pipeline_fill_s(dep, t_pre, sp.chunk)) + xfer
    per = dep.instance_gpus
    tokens = requests_per_s * output_tokens / dep.gpus
    return [
        Choice(
            "disaggregated",
            dep.tp,
            dep.pp,
            dep.ep,
            dep.two_batch_overlap,
            int(bi),
            int(pi) * per,
            (groups - int(pi)) * per,
            ttft,
            float(t),
            float(x),
            xfer,
        )
        for bi, pi, t, x in zip(b, p, sp.tpot_s, tokens, strict=True)
    ]


def split_tokens(
    dep: Deployment, c: Choice, input_tokens: int, output_tokens: int
) -> tuple[IntArray, FloatArray]:
    """Disaggregated choice `c`'s (of `dep`) other prefill:decode splits: the prefill instances
    of each (1 … replicas − 1 but its own) and its tokens/s per GPU, as `disaggregated_choices`
    counts them (the smaller of the two sides' rates); none for an aggregated choice."""
    if c.mode != "disaggregated":
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    g, own = dep.replicas, c.prefill_gpus // dep.instance_gpus
    p = np.arange(1, g, dtype=np.int64)
    p = p[p != own]
    sp = split_rates(dep, np.asarray([float(c.batch)]), input_tokens, output_tokens)
    return p, split_requests_per_s(sp, g, p) * output_tokens / dep.gpus


def other_splits(
    dep: Deployment,
    c: Choice,
    input_tokens: int,
    output_tokens: int,
    keep: Callable[[FloatArray], Any] | None = None,
) -> list[Choice]:
    """Disaggregated choice `c` (of `dep`) at every other prefill:decode split (`split_tokens`)
    whose tokens/s per GPU `keep` passes (a mask over them; None: all), at its batch, most
    tokens/s per GPU first (none for an aggregated choice). Each has `c`'s TTFT and TPOT
    (neither depends on the split) and less capacity; under load one with more prefill
    instances queues prompts less, one with more decode instances runs smaller batches, and
    either may keep the limits at a higher rate."""
    p, tokens = split_tokens(dep, c, input_tokens, output_tokens)
    if keep is not None:
        p = p[np.asarray(keep(tokens), dtype=bool)]
    if not p.size:
        return []
    b = np.full(p.shape, c.batch, dtype=np.int64)
    out = disaggregated_choices(dep, b, input_tokens, output_tokens, p)
    out.sort(key=lambda x: -x.tokens_per_s_per_gpu)
    return out


def deployments(
    model: Model,
    system: System,
    network: Network,
    gpus: int,
    precision: str,
    speculative: tuple[int, float] = (0, DEFAULT_ACCEPTANCE),
    custom_all_reduce: bool = True,
) -> list[Deployment]:
    """Every tp × pp (× ep for MoE, with and without the two-batch overlap) that divides the
    GPUs, tp splitting the heads as serving frameworks do (`tp_splits_heads`); `speculative`:
    draft tokens per step and their acceptance, and `custom_all_reduce` (`Deployment`), for all
    of them."""
    eps = [e for e in _divisors(model.experts) if gpus % e == 0] if model.experts > 1 else [1]
    return [
        Deployment(
            model,
            system,
            network,
            gpus,
            tp,
            pp,
            ep,
            precision,
            tbo,
            *speculative,
            custom_all_reduce,
        )
        for ep in eps
        for tp in _divisors(gpus // ep)
        if tp_splits_heads(model, tp)
        for pp in _divisors(gpus // (ep * tp))
        if pp <= model.layers
        for tbo in ((False, True) if ep > 1 else (False,))
    ]


def candidates(
    model: Model,
    system: System,
    network: Network,
    gpus: int,
    precision: str,
    input_tokens: int,
    output_tokens: int,
    speculative: tuple[int, float] = (0, DEFAULT_ACCEPTANCE),
    custom_all_reduce: bool = True,
) -> list[Choice]:
    """Every configuration evaluated (see the module docstring)."""
    model = load_model(model)
    input_tokens, output_tokens = check_tokens(input_tokens, output_tokens)
    check_decoding(output_tokens)  # TPOT needs a decoded token
    check_context(model, input_tokens, output_tokens)
    out: list[Choice] = []
    for dep in deployments(model, system, network, gpus, precision, speculative, custom_all_reduce):
        b = batches(dep.max_batch(input_tokens + output_tokens))
        if b.size:
            # an aggregated engine of batch b runs what its step budget sustains (prompts whole):
            # at most a batch the limit finds whatever the engine (its fixed point)
            cap = whole_prompt_batch_limit(dep, input_tokens, output_tokens, int(b[-1]))
            run = np.unique(np.minimum(b, cap))
            out += _aggregated(dep, run, input_tokens, output_tokens)
            out += disaggregated_choices(dep, b, input_tokens, output_tokens)
    return out


def meeting(choices: list[Choice], ttft_slo_s: float, tpot_slo_s: float) -> list[Choice]:
    """The choices (configuration, batch, prefill:decode split) whose steady state meets the
    limits, most tokens/s per GPU first."""
    ok = [c for c in choices if c.ttft_s <= ttft_slo_s and c.tpot_s <= tpot_slo_s]
    ok.sort(key=lambda c: -c.tokens_per_s_per_gpu)
    return ok


def configuration_key(c: Choice) -> tuple[Any, ...]:
    """A choice's configuration: mode, tp, pp, ep and the two-batch overlap (not its batch or
    prefill:decode split)."""
    return (c.mode, c.tp, c.pp, c.ep, c.two_batch_overlap)


def each_configuration(choices: list[Choice]) -> list[Choice]:
    """The first of `choices` of each configuration (mode, tp, pp, ep, two-batch overlap), in
    their order: of choices most tokens/s per GPU first, each configuration at its best batch
    (and prefill:decode split)."""
    seen: set[tuple[Any, ...]] = set()
    out: list[Choice] = []
    for c in choices:
        key = configuration_key(c)
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


def ranked(choices: list[Choice], ttft_slo_s: float, tpot_slo_s: float) -> list[Choice]:
    """The configurations (mode, tp, pp, ep, two-batch overlap) that meet the limits, each at
    its batch (and prefill:decode split) with the most tokens/s per GPU, most first."""
    return each_configuration(meeting(choices, ttft_slo_s, tpot_slo_s))


def best(choices: list[Choice], ttft_slo_s: float, tpot_slo_s: float) -> Choice | None:
    first = ranked(choices, ttft_slo_s, tpot_slo_s)[:1]
    return first[0] if first else None


def search(
    model: Model,
    system: System,
    gpus: int,
    precision: str,
    input_tokens: int,
    output_tokens: int,
    ttft_slo_s: float,
    tpot_slo_s: float,
    networks: tuple[str, ...] | str = NETWORKS,
    speculative: tuple[int, float] = (0, DEFAULT_ACCEPTANCE),
    custom_all_reduce: bool = True,
    traffic: bool = False,
    under_load: bool = False,
    progress: Callable[[str], None] | None = None,
    min_duration_s: float | None = None,
    load_candidates: int | None = None,
) -> dict[str, Any]:
    """The best configuration on each network, the overall best and the spine verdict;
    `speculative`: draft tokens per step and their acceptance, `custom_all_reduce`: the serving
    framework's all-reduce kernel where measured (`Deployment`); `traffic`: each best's bytes
    too (`traffic.configuration_traffic`, key `traffic`); `under_load`: also the best under
    Poisson load within the limits at p99 (`loaded.best_under_load`, key `under_load`, over
    every choice that meets the limits in the steady state, at most `load_candidates` of them
    simulated per network, None: `loaded.LOAD_CANDIDATES`, 0: no limit; each run at least
    `min_duration_s` of arrivals long, None: `loaded.MIN_DURATION_S`), telling `progress`
    what it simulates."""
    model = load_model(model)
    input_tokens, output_tokens = check_tokens(input_tokens, output_tokens)
    check_decoding(output_tokens)
    check_context(model, input_tokens, output_tokens)
    ttft_slo_s = SLO.check("ttft_slo", ttft_slo_s)
    tpot_slo_s = SLO.check("tpot_slo", tpot_slo_s)
    gpus = check_int("gpus", gpus, 1, MAX_SEARCH_GPUS)
    if load_candidates is not None:
        # `loaded` builds on this module: imported where used
        from railplan.inference.loaded import check_load_candidates

        load_candidates = check_load_candidates(load_candidates)
    system = load_system(system)
    if isinstance(networks, str):  # one architecture name
        networks = (networks,)
    nets = {arch: load_network(arch) for arch in networks}  # one-line errors for a bad name
    by_net: dict[str, Choice | None] = {}
    meet: dict[str, list[Choice]] = {}
    evaluated = 0
    for arch, network in nets.items():
        cs = candidates(
            model,
            system,
            network,
            gpus,
            precision,
            input_tokens,
            output_tokens,
            speculative,
            custom_all_reduce,
        )
        evaluated += len(cs)
        meet[arch] = meeting(cs, ttft_slo_s, tpot_slo_s)
        by_net[arch] = meet[arch][0] if meet[arch] else None
    found = [(k, c) for k, c in by_net.items() if c is not None]
    top = best_buildable(found, lambda kc: kc[0], lambda kc: kc[1].tokens_per_s_per_gpu)

    def deployment(arch: str, c: Choice) -> Deployment:
        return Deployment(
            model,
            system,
            nets[arch],
            gpus,
            c.tp,
            c.pp,
            c.ep,
            precision,
            c.two_batch_overlap,
            *speculative,
            custom_all_reduce,
        )

    def full(arch: str, c: Choice | None) -> dict[str, Any] | None:
        """The choice with the keys of `railplan infer` for its tp/pp/ep/batch; the choice's own
        TTFT, TPOT and tokens/s win (they include the disaggregated split); `breakdown_s` is
        the step of the choice's batch: for a disaggregated choice the decode instances' step
        (no prompts), whose time the TPOT is."""
        if c is None:
            return None
        dep = deployment(arch, c)
        res = choice_result(dep, c, input_tokens, output_tokens).to_dict() | c.to_dict()
        if traffic:
            res["traffic"] = configuration_traffic(dep, c.batch, input_tokens, c.prefill_gpus)
        return res

    out: dict[str, Any] = {
        "system": system.name,
        "hb_domain": system.hb_domain,
        "gpus": gpus,
        "evaluated": evaluated,
        "best": full(*top) if top else None,
        "by_network": {k: full(k, v) for k, v in by_net.items()},
        "verdict": (
            verdict({k: c.tokens_per_s_per_gpu if c else None for k, c in by_net.items()})
            if evaluated
            else f"no configuration fits in memory on {gpus:,} GPU{'s' * (gpus != 1)} of "
            f"{system.name} "
            f"({model.name}, {precision}): use more GPUs or a lower precision"
        ),
    }
    if under_load:
        # `loaded` builds on this module (its simulations import `disaggregated`, which does)
        from railplan.inference.loaded import LOAD_CANDIDATES, best_under_load, min_duration

        out["under_load"] = best_under_load(
            meet,
            deployment,
            full,
            input_tokens,
            output_tokens,
            ttft_slo_s,
            tpot_slo_s,
            progress,
            candidates=LOAD_CANDIDATES if load_candidates is None else load_candidates,
            min_duration_s=min_duration(min_duration_s),
        )
        if not evaluated:  # nothing fits: say that, not that nothing meets the limits
            out["under_load"]["verdict"] = out["verdict"]
    return out


def choice_result(
    dep: Deployment,
    c: Choice,
    input_tokens: int,
    output_tokens: int,
    steady: InferenceResult | None = None,
) -> InferenceResult:
    """`infer`'s result for a choice evaluated on `dep` (`steady`, if already computed at the
    choice's batch): the choice's TTFT, TPOT and tokens/s win (they include the disaggregated
    split); for a disaggregated choice the step and its breakdown are the decode instances'
    (no prompts), whose time the TPOT is."""
    r = replace(
        steady
        if steady is not None
        else infer(dep, c.batch, input_tokens, output_tokens, prompts=c.mode != "disaggregated"),
        ttft_s=c.ttft_s,
        tpot_s=c.tpot_s,
        tokens_per_s_per_gpu=c.tokens_per_s_per_gpu,
        tokens_per_s=c.tokens_per_s_per_gpu * dep.gpus,
        prefill_gpus=c.prefill_gpus,
        kv_transfer_s=c.kv_transfer_s,
    )
    if c.mode != "disaggregated":
        return r
    decode = decode_load(float(c.batch), input_tokens, output_tokens, dep.tokens_per_step)
    step, parts = step_time_s(dep, decode)
    return replace(r, step_s=step, breakdown_s=parts)


def verdict(tokens_per_s_per_gpu: dict[str, float | None], under_load: bool = False) -> str:
    """Whether serving needs a spine: what each network's best serves per GPU (None: nothing
    meets the limits), rail-only against rail-optimized; `under_load`: figures of
    `loaded.best_under_load`."""
    ro, rl = tokens_per_s_per_gpu.get("rail-optimized"), tokens_per_s_per_gpu.get("rail-only")
    if ro is None or rl is None:
        return (
            "no configuration meets the limits "
            + "under load " * under_load
            + "on "
            + ("rail-optimized" if ro is None else "rail-only")
        )
    loss = 1.0 - rl / ro
    where = " under load" if under_load else ""
    if loss > SPINE_THRESHOLD:
        return f"serving needs a spine{where}: rail-only serves {loss:.1%} fewer tokens/s per GPU"
    return (
        f"serving needs no spine{where}: rail-only is within {max(loss, 0.0):.1%} of rail-optimized"
    )


def with_hb_domain(system: System, k: int) -> System:
    """`system` with K GPUs per HB domain (e.g. an NVL72 rack's GPUs as NVL8 servers)."""
    if k < 1:
        raise RailplanError("hb_domain", f"must be a positive integer; got {k}")
    data = system.model_dump() | {"hb_domain": k, "name": f"{system.name} (K={k})"}
    return System.parse(data, "system")
