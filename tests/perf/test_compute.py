"""perf/compute.py on hand-computed examples: GEMM shape efficiency (waves, tile padding, L2),
the compute/HBM roofline, the sustained tensor fraction, fused attention per pass, FP8."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from railplan.errors import RailplanError
from railplan.perf.compute import (
    CAUSAL_WORK_FRACTION,
    FLASH_BACKWARD_FLOPS_RATIO,
    flash_attention_time_s,
    gemm_efficiency,
    gemm_time_s,
    memory_time_s,
)
from railplan.specs.hardware import GPU, AttentionCurve
from railplan.workload.gemms import Gemm
from tests.kernel_fixtures import GPU_T, one


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
    a, b = (
        flash_attention_time_s(slow, one(1e12), 2048),
        flash_attention_time_s(GPU_T, one(1e12), 2048),
    )
    assert float(a["backward"]) == pytest.approx(2 * float(b["backward"]))
    assert float(memory_time_s(slow, 1e9)) == float(memory_time_s(GPU_T, 1e9))


def test_flash_attention_per_pass_efficiencies() -> None:
    """Forward: the causal half at 0.5 of peak; backward: 2.5× that work at 0.25."""
    t = flash_attention_time_s(GPU_T, one(1e12), 2048)
    work = 1e12 * CAUSAL_WORK_FRACTION / 100e12
    assert float(t["forward"]) == pytest.approx(work / 0.5)
    assert float(t["backward"]) == pytest.approx(FLASH_BACKWARD_FLOPS_RATIO * work / 0.25)
    # FlashAttention-2's generation falls back to today's kernel where the GPU has no numbers.
    t2 = flash_attention_time_s(GPU_T, one(1e12), 2048, generation=2)
    assert float(t2["backward"]) == float(t["backward"])


@given(st.floats(1e6, 1e12), st.floats(0.1, 10.0))
def test_memory_time_is_linear_in_bytes(moved: float, k: float) -> None:
    assert float(memory_time_s(GPU_T, k * moved)) == pytest.approx(
        k * float(memory_time_s(GPU_T, moved))
    )


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


def test_memory_time_by_hand() -> None:
    """1 GB at 1 TB/s peak × 0.5 memory efficiency: 2 ms (no kernel overhead on the test GPU)."""
    assert float(memory_time_s(GPU_T, 1e9)) == pytest.approx(2e-3)


def test_gemm_time_vectorized_matches_scalar() -> None:
    """One call over an array of shapes gives each shape's scalar time (the search relies on it)."""
    ms = np.array([256.0, 2560.0, 4097.0])
    many = gemm_time_s(GPU_T, Gemm("x", np.ones(3), ms, np.full(3, 1280.0), np.full(3, 4096.0)))
    for i, m in enumerate(ms):
        single = gemm_time_s(GPU_T, Gemm("x", one(1), one(m), one(1280), one(4096)))
        assert float(many[i]) == pytest.approx(float(single))


@given(st.integers(1, 20_000), st.integers(1, 20_000), st.integers(1, 20_000))
def test_gemm_never_beats_the_peak(m: int, n: int, k: int) -> None:
    """No shape runs faster than MAMF × peak, and efficiency stays in (0, MAMF]."""
    g = Gemm("x", one(1), one(m), one(n), one(k))
    eff = float(gemm_efficiency(GPU_T, g))
    assert 0.0 < eff <= 0.8 + 1e-12
    assert float(gemm_time_s(GPU_T, g)) >= float(g.flops) / (100e12 * 0.8) * (1 - 1e-12)


def test_attention_curve_interpolates_in_log_sequence_and_clamps() -> None:
    """A measured curve replaces its generation's single values: at a measured length its
    TFLOP/s over the peak; halfway in log2 between two lengths the mean; beyond the last
    length the last value; other generations fall back to the next newer one's numbers."""
    curve = AttentionCurve(
        seq_tokens=[1024, 4096], forward_tflops=[40.0, 60.0], backward_tflops=[20.0, 30.0]
    )
    gpu = GPU_T.model_copy(update={"attention_curves": GPU_T.attention_curves | {"flash1": curve}})
    fwd, bwd = gpu.flash_efficiencies(1, np.array([512, 1024, 2048, 4096, 32768]))
    assert fwd.tolist() == pytest.approx([0.4, 0.4, 0.5, 0.6, 0.6])
    assert bwd.tolist() == pytest.approx([0.2, 0.2, 0.25, 0.3, 0.3])
    # generation 2 has no numbers of its own here: today's (0.5 / 0.25)
    fwd2, bwd2 = gpu.flash_efficiencies(2, 2048)
    assert (float(fwd2), float(bwd2)) == (0.5, 0.25)
    t = flash_attention_time_s(gpu, one(1e12), 2048, generation=1)
    work = 1e12 * CAUSAL_WORK_FRACTION / 100e12
    assert float(t["forward"]) == pytest.approx(work / 0.5)
    assert float(t["backward"]) == pytest.approx(FLASH_BACKWARD_FLOPS_RATIO * work / 0.25)


def test_attention_curve_blends_causal_and_unmasked_work() -> None:
    """A quarter of the work under the causal mask at 40 TFLOP/s, the rest without it at 80:
    time = work·(0.25/40 + 0.75/80); without non-causal numbers the causal ones serve both."""
    curve = AttentionCurve(
        seq_tokens=[2048],
        forward_tflops=[40.0],
        backward_tflops=[20.0],
        forward_noncausal_tflops=[80.0],
    )
    fwd, bwd = curve.tflops(2048, causal_share=0.25)
    assert float(fwd) == pytest.approx(1.0 / (0.25 / 40 + 0.75 / 80))
    assert float(bwd) == pytest.approx(20.0)
    assert float(curve.tflops(2048)[0]) == pytest.approx(40.0)  # all causal


def test_attention_curve_rejects_misaligned_points() -> None:
    with pytest.raises(RailplanError, match="one value each"):
        AttentionCurve.parse(
            {"seq_tokens": [1024, 2048], "forward_tflops": [1.0], "backward_tflops": [1.0, 2.0]}
        )
    with pytest.raises(RailplanError, match="one value each"):
        AttentionCurve.parse(
            {
                "seq_tokens": [1024, 2048],
                "forward_tflops": [1.0, 2.0],
                "backward_tflops": [1.0, 2.0],
                "backward_noncausal_tflops": [3.0],
            }
        )
    with pytest.raises(RailplanError, match="must increase"):
        AttentionCurve.parse(
            {"seq_tokens": [2048, 1024], "forward_tflops": [1, 2], "backward_tflops": [1, 2]}
        )


def test_attention_curve_above_the_peak_is_one_line() -> None:
    curve = {"seq_tokens": [2048], "forward_tflops": [150.0], "backward_tflops": [50.0]}
    data = GPU_T.model_dump() | {"attention_curves": {"flash": curve}}
    with pytest.raises(RailplanError, match="above the bf16 peak"):
        GPU.parse(data)
    with pytest.raises(RailplanError, match="flash"):
        GPU.parse(GPU_T.model_dump() | {"attention_curves": {"flash3": curve}})
