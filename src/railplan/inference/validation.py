"""Published serving measurements against `railplan infer` (data/validation/inference_mlperf.csv).

Nothing is fitted to these rows: every constant of the model has its own source
(docs/inference.md). Offline rows compare the steady-state tokens/s per GPU, server rows the
TTFT of the continuous-batching simulation under the run's own load (Poisson arrivals at the
row's `arrival_per_s`, the rate loadgen issued, else tokens/s ÷ output tokens; the row's
`max_num_tokens` step budget; its `queries` split over the replicas, each to the least busy
replica where the row's `dispatch` says so; prompt and output lengths drawn from the row's
`lengths` data set, outputs scaled to its mean), static rows one static batch, first-token rows
a lone prefill.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from functools import cache
from typing import Any

import numpy as np

from railplan.inference import kvcache
from railplan.inference.engine import Deployment, ep_all_to_all_s
from railplan.inference.estimate import first_token_s, infer, static_batch_tokens_per_s_per_gpu
from railplan.inference.serving import (
    MAX_NUM_TOKENS,
    Lengths,
    ServingResult,
    first_token_fn,
    serve,
    simulate,
    speculation,
    step_fn,
)
from railplan.reproduce.validation import read_rows
from railplan.specs import Model, Network
from railplan.specs.catalog import load_model, load_system

DATA = "inference_mlperf.csv"


def _pct(predicted: float, measured: float) -> float:
    return 100.0 * (predicted - measured) / measured


@cache
def _data_set(name: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Prompt and answer token counts of a data set in data/validation (one row per sample)."""
    samples = read_rows(name)
    return (
        tuple(int(r["input_length"]) for r in samples),
        tuple(int(r["output_length"]) for r in samples),
    )


def data_set_lengths(name: str, output_tokens: int) -> Lengths:
    """The data set's prompt lengths, and its answer lengths scaled to a mean of
    `output_tokens` (rounded, at least 1)."""
    prompts, answers = (np.asarray(a, dtype=np.int64) for a in _data_set(name))
    scaled = np.rint(answers * (output_tokens / answers.mean())).astype(np.int64)
    return prompts, np.maximum(scaled, 1)


def _deployment(r: dict[str, str]) -> Deployment:
    """A row's deployment: its model, system, GPUs, tp, pp and precision (no ep)."""
    return Deployment(
        load_model(r["model"]),
        load_system(r["system"]),
        Network(),
        int(r["gpus"]),
        int(r["tp"]),
        int(r["pp"]),
        1,
        r["precision"],
    )


def _budget(r: dict[str, str]) -> int:
    """A row's engine step budget: its stated `max_num_tokens`, else MAX_NUM_TOKENS."""
    return int(r["max_num_tokens"]) if r.get("max_num_tokens") else MAX_NUM_TOKENS


def _server_run(
    r: dict[str, str], dep: Deployment, requests: int = 4000
) -> Callable[[float], ServingResult]:
    """A server row's load simulation at a given rate: its batch, lengths, step budget, its
    run's queries per replica (else `requests`) and dispatch."""
    b, i, o = int(r["batch"]), int(r["input_tokens"]), int(r["output_tokens"])
    budget = _budget(r)
    if r.get("queries"):  # the run's queries per replica
        requests = round(int(r["queries"]) / dep.replicas)
    lengths = data_set_lengths(r["lengths"], o) if r.get("lengths") else None
    least_busy = r.get("dispatch") == "least-busy"

    def run(rate: float) -> ServingResult:
        return serve(
            dep,
            rate,
            i,
            o,
            b,
            requests,
            max_num_tokens=budget,
            lengths=lengths,
            least_busy=least_busy,
        )

    return run


def rows(requests: int = 4000) -> list[dict[str, Any]]:
    """One dict per comparison: id, quantity, measured, predicted, error_pct, goal_pct
    (`requests`: per replica, for server rows without a duration)."""
    out: list[dict[str, Any]] = []
    for r in read_rows(DATA):
        dep = _deployment(r)
        b, i, o = int(r["batch"]), int(r["input_tokens"]), int(r["output_tokens"])
        goal = float(r["goal_pct"]) if r["goal_pct"] else None
        found: list[tuple[str, float, float, float | None]] = []
        if r["scenario"] == "offline":
            pred = infer(dep, b, i, o, max_num_tokens=_budget(r)).tokens_per_s_per_gpu
            found.append(("tokens/s per GPU", float(r["tokens_per_s_per_gpu"]), pred, goal))
        elif r["scenario"] == "server":
            rate = float(r["tokens_per_s_per_gpu"]) * dep.gpus / o
            if r.get("arrival_per_s"):  # what loadgen issued (its scheduled samples/s)
                rate = float(r["arrival_per_s"])
            s = _server_run(r, dep, requests)(rate)
            found.append(("TTFT mean (s)", float(r["ttft_mean_s"]), s.ttft_mean_s, goal))
            found.append(("TTFT p99 (s)", float(r["ttft_p99_s"]), s.ttft_p99_s, None))
        elif r["scenario"] == "static":
            pred = static_batch_tokens_per_s_per_gpu(dep, b, i, o)
            found.append(("tokens/s per GPU", float(r["tokens_per_s_per_gpu"]), pred, goal))
        elif r["scenario"] == "first-token":
            found.append(("TTFT batch 1 (s)", float(r["ttft_mean_s"]), first_token_s(dep, i), goal))
        for quantity, measured, predicted, g in found:
            out.append(
                {
                    "id": r["id"],
                    "scenario": r["scenario"],
                    "quantity": quantity,
                    "measured": measured,
                    "predicted": predicted,
                    "error_pct": _pct(predicted, measured),
                    "goal_pct": g,
                    "source": r["source"],
                }
            )
    return out


#: MLPerf Inference's Server limits for Llama 2 70B, at the 99th percentile (mlcommons/inference
#: `loadgen/mlperf.conf`: llama2-70b.Server.ttft_latency = 2000, tpot_latency = 200, in ms)
MLPERF_LLAMA2_TTFT_P99_S = 2.0
MLPERF_LLAMA2_TPOT_P99_S = 0.2


def server_rate_rows() -> list[dict[str, Any]]:
    """Per server row, held out: the highest Poisson rate at which the row's simulation (its
    batch, step budget, dispatch, data-set lengths and its run's queries per replica) keeps up
    with p99 TTFT and TPOT within MLPerf's Llama 2 70B limits (`loaded.highest_rate`, on 1/64
    of the steady state's capacity at the row's batch), against the rate loadgen issued in the
    run, which passed them (a lower bound of the system's own highest: submitters choose a rate
    that passes, with what margin they choose)."""
    from railplan.inference.loaded import highest_rate, within

    out: list[dict[str, Any]] = []
    for r in read_rows(DATA):
        if r["scenario"] != "server" or not r.get("arrival_per_s") or not r.get("queries"):
            continue  # the comparison needs the rate and the length of the run itself
        dep = _deployment(r)
        b, i, o = int(r["batch"]), int(r["input_tokens"]), int(r["output_tokens"])
        run = _server_run(r, dep)
        capacity = infer(dep, b, i, o, max_num_tokens=_budget(r)).tokens_per_s / o
        hit, runs = highest_rate(
            run,
            lambda s: within(s, MLPERF_LLAMA2_TTFT_P99_S, MLPERF_LLAMA2_TPOT_P99_S),
            capacity,
        )
        measured = float(r["arrival_per_s"])
        predicted = hit[0] if hit else 0.0
        out.append(
            {
                "id": r["id"],
                "quantity": "server rate (req/s)",
                "measured": measured,
                "predicted": predicted,
                "error_pct": _pct(predicted, measured),
                "capacity": capacity,
                "simulations": runs,
                "ttft_p99_s": hit[1].ttft_p99_s if hit else None,
                "tpot_p99_s": hit[1].tpot_p99_s if hit else None,
            }
        )
    return out


PAIRS = "mlperf41_llama2_server_offline.csv"


def server_offline_rows() -> list[dict[str, Any]]:
    """What MLPerf v4.1's Server and Offline runs of the same systems say about the engine step,
    without the model (data/validation/mlperf41_llama2_server_offline.csv).

    Per replica (gpus / tp): Little's law gives the sequences the Server run held, N = completed
    samples/s × mean latency / replicas, each advancing one token per step of TPOT seconds; the
    Offline run held its full batch B (the engine's max batch), so its step took
    T_off = B · replicas / offline tokens/s. If a step costs a + b·n for n sequences (a, b ≥ 0),
    the Offline engine would have stepped N sequences in between T_off and T_off · N / B, so the
    Server step's premium over an Offline step of the same batch lies between
    TPOT / T_off − 1 and TPOT · B / (T_off · N) − 1 (≈ offline ÷ server tokens/s − 1)."""
    out: list[dict[str, Any]] = []
    for r in read_rows(PAIRS):
        replicas = int(r["gpus"]) // int(r["tp"])
        n = float(r["server_samples_per_s"]) * float(r["server_mean_latency_s"]) / replicas
        b = int(r["offline_batch"])
        t_srv = float(r["server_tpot_mean_s"])
        t_off = b * replicas / float(r["offline_tokens_per_s"])
        bounds = sorted((t_srv / t_off - 1.0, t_srv * b / (t_off * n) - 1.0))
        out.append(
            {
                "submitter": r["submitter"],
                "system": r["system"],
                "gpu": r["gpu"],
                "sequences": n,
                "offline_batch": b,
                "server_step_s": t_srv,
                "offline_step_s": t_off,
                "load": float(r["server_tokens_per_s"]) / float(r["offline_tokens_per_s"]),
                "premium_pct": (100.0 * bounds[0], 100.0 * bounds[1]),
            }
        )
    return out


DEEPEP = "deepep_low_latency.csv"


def deepep_rows() -> list[dict[str, Any]]:
    """DeepEP's published low-latency dispatch and combine latencies (data/validation/
    deepep_low_latency.csv: DeepSeek-V3's shape on H800 with one 400 Gb/s NIC per GPU) against
    the decode step's all-to-all (`engine.ep_all_to_all_s`) for one MoE layer of deepseek-v3
    on hgx-h800, rail-optimized, fp8 (FP8 dispatch, BF16 combine). Held out: nothing was fitted
    to them."""
    out: list[dict[str, Any]] = []
    model, system = load_model("deepseek-v3"), load_system("hgx-h800")
    for r in read_rows(DEEPEP):
        ep = int(r["ep"])
        dep = Deployment(model, system, Network(), ep, 1, 1, ep, "fp8")
        a2a = ep_all_to_all_s(dep, float(r["tokens_per_rank"]))
        for name in ("dispatch", "combine"):
            measured = float(r[f"{name}_us"]) * 1e-6
            predicted = float(a2a[name])
            out.append(
                {
                    "ep": ep,
                    "pass": name,
                    "measured_s": measured,
                    "predicted_s": predicted,
                    "error_pct": _pct(predicted, measured),
                }
            )
    return out


TRTLLM = "trtllm_perf_overview.csv"
#: trtllm-bench's caps (tensorrt_llm/bench/build/tuning.py, finetune_setting): at most 4,096
#: sequences in all, then divided over the pipeline stages; at most 32,768 tokens per step; at
#: least 64 sequences and 2,048 tokens
TRTLLM_BENCH_MAX_REQUESTS = 4096
TRTLLM_BENCH_MAX_TOKENS = 32768
#: trtllm-bench's engine-size estimate per stored element (tuning.py `BYTES_PER_ELEM`: no
#: quantization 2, FP8 1, NVFP4 0.5), applied to the checkpoint's element count
TRTLLM_BENCH_BYTES_PER_ELEM: dict[str, float] = {"bf16": 2.0, "fp8": 1.0, "fp4": 0.5}
#: elements a quantized checkpoint stores per weight of its linear layers: FP8 one; NVFP4 two
#: 4-bit values per uint8 element plus one FP8 scale per 16 (ModelOpt's NVFP4 export); the
#: embedding and LM head stay bf16, one element each (the norms and biases, ≈ 1e-4 of the
#: weights, are counted with the linear layers)
TRTLLM_STORED_PER_WEIGHT: dict[str, float] = {"bf16": 1.0, "fp8": 1.0, "fp4": 0.5 + 1.0 / 16.0}


def trtllm_bench_param_count(model: Model, precision: str) -> float:
    """The parameter count trtllm-bench reads (tensorrt_llm/bench/build/dataclasses.py,
    `ModelConfig.get_param_count`: the sum of the checkpoint's safetensors element counts), for
    a checkpoint quantized to `precision` with its embedding and LM head left in bf16."""
    kept = model.embedding_params()
    return (model.params() - kept) * TRTLLM_STORED_PER_WEIGHT[precision] + kept


#: every request of a row arrives at once: a rate no engine step can tell from infinite
TRTLLM_BENCH_RATE_PER_S = 1e8


def _round_up(x: float, unit: int) -> int:
    return unit * math.ceil(x / unit)


def _stepped(
    x: float, floor: int, small: tuple[int, int], middle: tuple[int, int], unit: int
) -> int:
    """`x` rounded up to small[1] below small[0] (at least `floor`), to middle[1] below
    middle[0], else to `unit`: trtllm-bench's finetune_setting rounding."""
    if x < small[0]:
        return max(floor, _round_up(x, small[1]))
    if x < middle[0]:
        return _round_up(x, middle[1])
    return _round_up(x, unit)


def trtllm_bench_settings(
    dep: Deployment,
    input_tokens: int,
    output_tokens: int,
    kv_fraction: float = kvcache.KV_FREE_FRACTION,
    chunked_prefill: bool = False,
) -> tuple[int, int]:
    """(max batch, max tokens per step) that `trtllm-bench throughput` (PyTorch backend) runs
    when neither is given: its heuristic (tensorrt_llm/bench/build/tuning.py,
    calc_engine_setting and finetune_setting) takes the requests of input + output tokens whose
    KV cache fits in `kv_fraction` (its `--kv_cache_free_gpu_mem_fraction`, 0.90 by default) of
    what the weights leave on the instance's GPUs (`Deployment.kv_bytes_per_token` on each: every
    tp rank holding at least one KV head),
    at most 4,096, divided by the pipeline stages; rounded up to 32 below 256 (at least 64), to
    128 below 1,024, else to 256. Tokens: that batch × (1 + input/output), at most 32,768,
    rounded up to 256 below 4,096 (at least 2,048), to 512 below 8,192, else to 1,024; without
    chunked prefill (the default) at least one prompt plus the batch
    (tensorrt_llm/bench/benchmark/utils/general.py, get_settings). Memory is the catalog's;
    the weights are trtllm-bench's own estimate, the checkpoint's element count
    (`trtllm_bench_param_count`) at its `BYTES_PER_ELEM` for the quantization
    (`TRTLLM_BENCH_BYTES_PER_ELEM`), not what the engine then holds
    (`Deployment.weight_bytes_per_gpu`, which `trtllm_rows` caps the batch with)."""
    gpus = dep.tp * dep.pp
    kv_per_token = dep.kv_bytes_per_token * gpus  # the instance's (replicated KV heads too)
    count = trtllm_bench_param_count(dep.model, dep.precision)
    engine_bytes = count * TRTLLM_BENCH_BYTES_PER_ELEM[dep.precision]
    room = (dep.memory_bytes * gpus - engine_bytes) * kv_fraction
    requests = room / (kv_per_token * (input_tokens + output_tokens))
    raw_batch = min(requests, TRTLLM_BENCH_MAX_REQUESTS) / dep.pp
    raw_tokens = min(raw_batch * (1.0 + input_tokens / output_tokens), TRTLLM_BENCH_MAX_TOKENS)
    batch = _stepped(raw_batch, 64, (256, 32), (1024, 128), 256)
    tokens = _stepped(raw_tokens, 2048, (4096, 256), (8192, 512), 1024)
    if not chunked_prefill:
        tokens = max(tokens, input_tokens + batch)
    return batch, tokens


def trtllm_rows(ids: Collection[str] | None = None) -> list[dict[str, Any]]:
    """TensorRT-LLM's published offline throughput (data/validation/trtllm_perf_overview.csv),
    held out, against the run as `trtllm-bench throughput` makes it: the row's `requests`, all
    queued at once, each of the row's lengths, simulated step by step (`serving.simulate`:
    whole prompts, first come first served, within the token budget) on an engine of the batch
    it can run, the smaller of trtllm-bench's max batch (`trtllm_bench_settings`) and the
    sequences railplan's KV cache holds at TensorRT-LLM's default share (0.90,
    `kvcache.KV_FREE_FRACTION`), each reserving its whole length (the default
    GUARANTEED_NO_EVICT scheduler). Predicted: the instance's output tokens over the time to the
    last completion, as the page reports them (tp · pp GPUs); `steady`: `infer`'s steady state
    at the same batch, without the run's fill and drain. `ids`: only those rows."""
    out: list[dict[str, Any]] = []
    for r in read_rows(TRTLLM):
        if ids is not None and r["id"] not in ids:
            continue
        tp = int(r["tp"])
        dep = Deployment(
            load_model(r["model"]),
            load_system(r["system"]),
            Network(),
            tp,
            tp,
            1,
            1,
            r["precision"],
        )
        i, o, n = int(r["input_tokens"]), int(r["output_tokens"]), int(r["requests"])
        bench_batch, budget = trtllm_bench_settings(dep, i, o)
        batch = max(1, min(bench_batch, dep.max_batch(i + o)))
        run = simulate(
            step_fn(dep),
            TRTLLM_BENCH_RATE_PER_S,
            n,
            i,
            o,
            batch,
            max_num_tokens=budget,
            spec=speculation(dep),
            first_s=first_token_fn(dep),
        )
        last_s = float(np.max(run.ttft_s + run.tpot_s * (o - 1)))
        predicted = n * o / last_s
        measured = float(r["tokens_per_s"])
        steady = infer(dep, batch, i, o, max_num_tokens=budget).tokens_per_s_per_gpu * tp
        out.append(
            {
                "id": r["id"],
                "model": r["model"],
                "system": r["system"],
                "tp": tp,
                "precision": r["precision"],
                "input_tokens": i,
                "output_tokens": o,
                "requests": n,
                "batch": batch,
                "bench_batch": bench_batch,
                "max_num_tokens": budget,
                "measured": measured,
                "predicted": predicted,
                "error_pct": _pct(predicted, measured),
                "steady": steady,
                "steady_error_pct": _pct(steady, measured),
            }
        )
    return out
