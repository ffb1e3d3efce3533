"""Direct tests of the kernel-level pieces: GEMM shapes and FLOPs (workload/gemms.py), GEMM and
fused-attention time (compute.py), expert routing (workload/routing.py) and element-wise bytes
(workload/elementwise.py), on hand-computed examples. The GPU here is built in the test with
explicit numbers, so catalog changes do not move these expectations."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from railplan.perf.compute import (
    CAUSAL_WORK_FRACTION,
    FLASH_BACKWARD_FLOPS_RATIO,
    flash_attention_time_s,
    gemm_efficiency,
    gemm_time_s,
    memory_time_s,
)
from railplan.specs import GPU, Model, Strategy
from railplan.specs.arrays import from_strategies
from railplan.workload import elementwise, routing
from railplan.workload.gemms import Gemm, layer_gemms, logit_gemm, mlp_gemms

GPU_T = GPU(
    name="test",
    peak_tflops=100.0,
    memory_gib=80,
    memory_tbps=1.0,
    sm_count=100,
    matmul_efficiency=0.8,
    l2_flops_per_byte=10.0,
    memory_efficiency=0.5,
    kernel_overhead_us=0.0,
    flash_attention_efficiency=0.5,
    flash_backward_efficiency=0.25,
)
MODEL = Model(name="m", hidden=1024, layers=4, heads=8, seq=512, vocab=1000)


def one(x: float) -> np.ndarray:
    return np.asarray(float(x))


def test_gemm_flops_and_backward_shapes() -> None:
    g = Gemm("x", one(2), one(3), one(5), one(7))
    assert float(g.flops) == 2 * 2 * 3 * 5 * 7
    dgrad, wgrad = g.backward()
    assert (float(dgrad.m), float(dgrad.n), float(dgrad.k)) == (3, 7, 5)
    assert (float(wgrad.m), float(wgrad.n), float(wgrad.k)) == (7, 5, 3)
    assert float(dgrad.flops) == float(wgrad.flops) == float(g.flops)


def test_layer_gemm_flops_are_24bsh2_plus_attention() -> None:
    """A dense GPT layer (4h MLP): 24·b·s·h² linear FLOPs + 4·b·s²·h attention FLOPs forward,
    divided by tp."""
    b, t = 2, 4
    s, h = MODEL.seq, MODEL.hidden
    gemms = layer_gemms(MODEL, b, t)
    linear = sum(float(g.flops) for g in gemms if not g.attention)
    core = sum(float(g.flops) for g in gemms if g.attention)
    assert linear == pytest.approx(24 * b * s * h * h / t)
    assert core == pytest.approx(4 * b * s * s * h / t)
    up, down = mlp_gemms(MODEL, b, t)
    assert float(up.n) == 4 * h / t and float(down.k) == 4 * h / t
    assert float(logit_gemm(MODEL, b, t).n) == MODEL.vocab / t


def test_gemm_efficiency_full_waves_and_padding() -> None:
    """100 SMs, one 256×128 tile each: M=2560, N=1280 is 10×10 = 100 tiles, one full wave with
    no padding, so only the L2 factor (tile intensity 85.3 FLOP/B ≥ 10) and MAMF remain."""
    full = Gemm("x", one(1), one(2560), one(1280), one(4096))
    assert float(gemm_efficiency(GPU_T, full)) == pytest.approx(0.8)
    # 101 tiles of the best shape need two waves: fill drops, and no tile shape does better
    # than 0.8 × the best fill it can reach.
    ragged = Gemm("x", one(1), one(2560 + 1), one(1280), one(4096))
    assert float(gemm_efficiency(GPU_T, ragged)) < 0.8


def test_gemm_time_is_max_of_compute_and_roofline() -> None:
    big = Gemm("x", one(1), one(2560), one(1280), one(4096))
    compute_s = float(big.flops) / (100e12 * 0.8)
    assert float(gemm_time_s(GPU_T, big)) == pytest.approx(compute_s)
    # A GEMV-like shape is HBM-bound: operands read once, result written once, at 0.5 TB/s.
    thin = Gemm("x", one(1), one(1), one(4096), one(4096))
    moved = 2.0 * (4096 + 4096 * 4096 + 4096)
    assert float(gemm_time_s(GPU_T, thin)) == pytest.approx(moved / 0.5e12)


def test_sustained_fraction_divides_tensor_work_only() -> None:
    slow = GPU_T.model_copy(update={"sustained_tensor_fraction": 0.5})
    big = Gemm("x", one(1), one(2560), one(1280), one(4096))
    assert float(gemm_time_s(slow, big)) == pytest.approx(2 * float(gemm_time_s(GPU_T, big)))
    a, b = flash_attention_time_s(slow, one(1e12)), flash_attention_time_s(GPU_T, one(1e12))
    assert float(a["backward"]) == pytest.approx(2 * float(b["backward"]))
    assert float(memory_time_s(slow, 1e9)) == float(memory_time_s(GPU_T, 1e9))


def test_flash_attention_per_pass_efficiencies() -> None:
    """Forward: the causal half at 0.5 of peak; backward: 2.5× that work at 0.25."""
    t = flash_attention_time_s(GPU_T, one(1e12))
    work = 1e12 * CAUSAL_WORK_FRACTION / 100e12
    assert float(t["forward"]) == pytest.approx(work / 0.5)
    assert float(t["backward"]) == pytest.approx(FLASH_BACKWARD_FLOPS_RATIO * work / 0.25)
    # FlashAttention-2's generation falls back to today's kernel where the GPU has no numbers.
    t2 = flash_attention_time_s(GPU_T, one(1e12), generation=2)
    assert float(t2["backward"]) == float(t["backward"])


@given(st.floats(1e6, 1e12), st.floats(0.1, 10.0))
def test_memory_time_is_linear_in_bytes(moved: float, k: float) -> None:
    assert float(memory_time_s(GPU_T, k * moved)) == pytest.approx(
        k * float(memory_time_s(GPU_T, moved))
    )


def test_routing_uniform_and_skewed() -> None:
    uniform = Model(name="u", hidden=64, layers=2, heads=4, experts=8, top_k=2, drop_tokens=False)
    assert routing.expert_shares(uniform).sum() == pytest.approx(1.0)
    assert routing.max_rank_load(uniform, 4) == pytest.approx(1.0)
    skewed = uniform.model_copy(update={"routing_zipf": 1.0})
    # Zipf z=1 over 8 experts, 2 per rank: the first rank holds (1 + 1/2) / H_8 of the tokens.
    h8 = sum(1 / i for i in range(1, 9))
    assert routing.max_rank_load(skewed, 4) == pytest.approx(4 * 1.5 / h8)
    capped = uniform.model_copy(update={"drop_tokens": True, "capacity_factor": 1.25})
    assert float(routing.slot_factor(capped, 4)) == 1.25
    assert routing.dropped_fraction(capped) == 0.0


def test_elementwise_bytes_by_hand() -> None:
    """tp 1, micro-batch 1, flash: forward 22·sbh + activation (4·s·4h) + permute 4·sbh."""
    s = from_strategies(Strategy(global_batch=1))
    sbh = MODEL.seq * MODEL.hidden
    got = elementwise.layer_bytes(MODEL, s)
    assert float(got["forward"]) == pytest.approx(22 * sbh + 4 * 4 * sbh + 4 * sbh)
    assert float(got["scores_forward"]) == 0.0
    unfused = from_strategies(Strategy(global_batch=1, attention="unfused"))
    scores = elementwise.layer_bytes(MODEL, unfused)["scores_forward"]
    assert float(scores) == pytest.approx(9 * MODEL.heads * MODEL.seq**2)


def test_fp8_gemm_runs_at_the_fp8_mamf_fraction() -> None:
    """An FP8 GEMM runs at fp8_tflops × fp8_matmul_efficiency × shape efficiency; without an FP8
    MAMF in the catalog it falls back to the BF16 fraction. Hand-computed on the test GPU
    (100 SMs): a 2,560 × 2,560 output is 400 tiles of 128×128, 4 full waves, no padding, tile
    intensity 64 above the L2 intensity 10: shape efficiency 1; compute-bound (1.1 ms against
    0.12 ms of HBM traffic)."""
    g = Gemm("x", one(1), one(2560), one(2560), one(10240))
    gpu = GPU_T.model_copy(update={"fp8_tflops": 200.0, "fp8_matmul_efficiency": 0.6})
    assert float(gemm_efficiency(gpu, g)) == pytest.approx(0.8)
    assert float(gemm_efficiency(gpu, g, fp8=True)) == pytest.approx(0.6)
    flops = 2 * 2560 * 2560 * 10240
    assert float(gemm_time_s(gpu, g, fp8=True)) == pytest.approx(flops / (200e12 * 0.6))
    no_fp8_mamf = gpu.model_copy(update={"fp8_matmul_efficiency": None})
    assert float(gemm_time_s(no_fp8_mamf, g, fp8=True)) == pytest.approx(flops / (200e12 * 0.8))
