"""The data sets behind the inference validation rows."""

from __future__ import annotations

import numpy as np
import pytest

from railplan.inference.validation import data_set_lengths


def test_mlperf_data_set_lengths() -> None:
    # 24,576 samples, mean prompt 222.3 tokens (the file's header, from its source); answers
    # scaled to a mean of 290 tokens (rounding moves the mean by < 0.5 token)
    prompts, outputs = data_set_lengths("mlperf_llama2_openorca_lengths.csv", 290)
    assert prompts.size == outputs.size == 24_576
    assert float(prompts.mean()) == pytest.approx(222.33, abs=0.01)
    assert float(outputs.mean()) == pytest.approx(290.0, abs=0.5)
    assert int(outputs.min()) >= 1 and np.issubdtype(outputs.dtype, np.integer)


def test_server_step_premium_by_hand() -> None:
    # NVIDIA's DGX-H100 (tp 2, 4 replicas): Server 74.42 samples/s, mean latency 44.955 s, TPOT
    # 154.96 ms, 21,605.79 tokens/s; Offline 24,524.9 tokens/s at batch 896.
    # N = 74.42 · 44.955 / 4 = 836.4; T_off = 896 · 4 / 24,524.9 = 146.14 ms;
    # premium in [154.96 / 146.14 − 1, 154.96 · 896 / (146.14 · 836.4) − 1] = [+6.0, +13.6] %
    from railplan.inference.validation import server_offline_rows

    row = next(
        r
        for r in server_offline_rows()
        if r["submitter"] == "NVIDIA" and r["system"].startswith("DGX-H100")
    )
    assert row["sequences"] == pytest.approx(836.4, abs=0.1)
    assert row["offline_step_s"] == pytest.approx(0.14614, abs=1e-5)
    low, high = row["premium_pct"]
    assert low == pytest.approx(6.04, abs=0.02) and high == pytest.approx(13.60, abs=0.02)


def test_server_rows_run_at_the_scheduled_rate() -> None:
    # loadgen's scheduled rate (queries ÷ the schedule's span) is what arrived; the completed
    # tokens/s ÷ output tokens divides by the time to the last completion, drain included, so
    # it is lower, by under 1 % on these 40-minute runs (H100: 75.10 vs 74.50 /s)
    from railplan.reproduce.validation import read_rows

    server = [r for r in read_rows("inference_mlperf.csv") if r["scenario"] == "server"]
    assert len(server) == 2
    for r in server:
        completed = float(r["tokens_per_s_per_gpu"]) * int(r["gpus"]) / int(r["output_tokens"])
        assert completed < float(r["arrival_per_s"]) < 1.01 * completed
        assert int(r["queries"]) % 24_576 == 0  # whole passes over the 24,576-sample set
        assert r["dispatch"] == "least-busy"


def _dep(model: str, system: str, tp: int):  # type: ignore[no-untyped-def]
    from railplan.inference.engine import Deployment
    from railplan.specs import Network
    from railplan.specs.catalog import load_model, load_system

    return Deployment(load_model(model), load_system(system), Network(), tp, tp, 1, 1, "fp8")


@pytest.mark.parametrize(
    ("lengths", "expected"),
    [
        # Llama 3.1 8B, FP8 weights as trtllm-bench estimates them (every parameter at 1 B:
        # W ≈ 8.03e9 B) and FP8 KV: 2 · 32 layers · 8 heads · 128 = 65,536 B per token; room
        # 0.90 · (80 GiB − W) = 0.90 · 77.87e9 B.
        # 128 + 2048: 0.90 · 77.87e9 / (65,536 · 2,176) = 491.4 requests → 128 · ⌈491.4/128⌉ =
        # 512; tokens 491.4 · (1 + 128/2048) = 522 → at least 2,048 (≥ 128 + 512)
        ((128, 2048), (512, 2048)),
        # 128 + 128: 4,177 requests, capped at 4,096 (a multiple of 256); tokens 4,096 · 2 =
        # 8,192 → 1,024 · 8
        ((128, 128), (4096, 8192)),
        # 20,000 + 2,000: 48.6 requests → at least 64; tokens 48.6 · 11 = 535 → 2,048, raised
        # to one whole prompt beside the batch (no chunked prefill): 20,000 + 64
        ((20000, 2000), (64, 20064)),
    ],
)
def test_trtllm_bench_settings_by_hand(lengths: tuple[int, int], expected: tuple[int, int]) -> None:
    from railplan.inference.validation import trtllm_bench_settings

    dep = _dep("llama-3.1-8b", "dgx-h100", 1)
    assert dep.model.params() == pytest.approx(8.03e9, rel=0.01)
    # what the engine holds is more: embedding and LM head (2 · 128,256 · 4,096) stay bf16
    assert dep.weight_bytes_per_gpu == pytest.approx(8.03e9 + 1.05e9, rel=0.01)
    assert trtllm_bench_settings(dep, *lengths) == expected


def test_trtllm_bench_settings_rounding_steps_and_kv_heads() -> None:
    from railplan.inference.validation import trtllm_bench_settings

    # Llama 3.1 405B on 8 H100 (tp 8: one KV head each; FP8 weights ≈ 405.9e9 B in all,
    # 50.7e9 per GPU): KV per token 2 · 126 · 8 · 128 = 258,048 B over the 8 GPUs; room
    # 0.90 · 8 · (85.90e9 − 50.7e9) = 253.2e9 B. 128 + 2048: 253.2e9 / (258,048 · 2,176) =
    # 450.9 requests → 128 · 4 = 512. 2,048 + 128: the same 450.9, tokens 450.9 · 17 = 7,665
    # → 512 · 15 = 7,680
    dep = _dep("llama-3.1-405b", "dgx-h100", 8)
    assert dep.model.params() == pytest.approx(405.9e9, rel=0.01)
    assert trtllm_bench_settings(dep, 128, 2048) == (512, 2048)
    assert trtllm_bench_settings(dep, 2048, 128) == (512, 7680)
    # on H200 (140 GiB = 150.3e9 B): 0.90 · 8 · 99.6e9 / 561.5e6 = 1,277 requests → 256 · 5;
    # tokens 1,357 → 2,048 (≥ 128 + 1,280)
    assert trtllm_bench_settings(_dep("llama-3.1-405b", "dgx-h200", 8), 128, 2048) == (1280, 2048)
    # Llama 3.1 8B on tp 16: each rank keeps one of the 8 KV heads, so the instance stores 16
    # heads' worth per token (2 · 32 · 16 · 128 = 131,072 B); room 0.90 · 16 · (85.90e9 −
    # 0.50e9) = 1,229.7e9 B; 20,000 + 2,000: 426.5 requests → 512 (853 → 896 without the
    # replicated heads); tokens 426.5 · 11 = 4,691 → 5,120, raised to 20,000 + 512
    assert trtllm_bench_settings(_dep("llama-3.1-8b", "dgx-h100", 16), 20000, 2000) == (
        512,
        20512,
    )
    # with chunked prefill the budget stays the heuristic's
    assert trtllm_bench_settings(dep, 2048, 128, chunked_prefill=True) == (512, 7680)
    assert trtllm_bench_settings(
        _dep("llama-3.1-8b", "dgx-h100", 1), 20000, 2000, chunked_prefill=True
    ) == (64, 2048)


def test_trtllm_rows_run_what_the_engine_holds() -> None:
    from railplan.inference.validation import TRTLLM, trtllm_rows
    from railplan.reproduce.validation import read_rows

    data = read_rows(TRTLLM)
    assert len(data) == len({r["id"] for r in data}) == 100
    ids = ("trtllm10-h100-8b-128-2048", "trtllm10-h100-8b-128-128", "trtllm10-h100-8b-2048-128")
    found = {r["id"]: r for r in trtllm_rows(ids)}
    assert set(found) == set(ids)
    # 128 + 2048: trtllm-bench would take 512, the KV cache holds 484 (0.90 · (85.90e9 −
    # 9.08e9) B, the engine's weights with its bf16 embedding and LM head, over 136 MiB
    # reserved per sequence, 2,176 tokens in 136 pages of 16): the engine runs 484
    assert (found[ids[0]]["bench_batch"], found[ids[0]]["batch"]) == (512, 484)
    # 128 + 128: the KV cache holds 4,177 but trtllm-bench caps the batch at 4,096
    assert (found[ids[1]]["bench_batch"], found[ids[1]]["batch"]) == (4096, 4096)
    for r in found.values():
        assert r["measured"] == next(float(d["tokens_per_s"]) for d in data if d["id"] == r["id"])
        assert np.isfinite(r["predicted"]) and r["predicted"] > 0
        # the finite run fills and drains: never above what the engine sustains by much
        assert r["predicted"] < 1.1 * r["steady"]
