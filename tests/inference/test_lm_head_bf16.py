"""Quantized deployments keep the embedding and LM head in bf16 (ModelOpt's FP8 and NVFP4
recipes disable `*lm_head*`): the vocabulary GEMM's time and the weights a GPU holds."""

from __future__ import annotations

import pytest

from railplan.inference.engine import Deployment, StepLoad, logits_s
from railplan.inference.validation import trtllm_bench_param_count
from railplan.specs import Network
from railplan.specs.catalog import load_model, load_system


def _dep(precision: str, tp: int = 8, pp: int = 1, system: str = "dgx-b200") -> Deployment:
    return Deployment(
        load_model("llama-3.1-405b"), load_system(system), Network(), tp * pp, tp, pp, 1, precision
    )


@pytest.mark.parametrize("load", [StepLoad(decode=1.0), StepLoad(decode=512.0, prefill_seqs=3.0)])
def test_the_lm_head_takes_the_same_time_at_every_precision(load: StepLoad) -> None:
    times = [float(logits_s(_dep(p), load)) for p in ("bf16", "fp8", "fp4")]
    assert times == pytest.approx([times[0]] * 3, rel=1e-12)


@pytest.mark.parametrize(("tp", "pp"), [(8, 1), (4, 2)])
def test_weights_count_the_embedding_and_head_at_two_bytes(tp: int, pp: int) -> None:
    m = load_model("llama-3.1-405b")
    # untied: input embedding and LM head, 128,256 × 16,384 each; with pp > 1 a stage holds one
    embed = m.embedding_params() / (2 if pp > 1 else 1)
    bf16, fp8, fp4 = (_dep(p, tp, pp).weight_bytes_per_gpu for p in ("bf16", "fp8", "fp4"))
    # the rest scales with the bytes per weight (2, 1, 0.5625); the embedding stays at 2
    rest_bf16 = bf16 - 2.0 * embed / tp
    assert fp8 == pytest.approx(rest_bf16 / 2.0 + 2.0 * embed / tp, rel=1e-9)
    assert fp4 == pytest.approx(rest_bf16 * 0.5625 / 2.0 + 2.0 * embed / tp, rel=1e-9)


def test_trtllm_bench_counts_the_checkpoint_elements() -> None:
    m = load_model("llama-3.1-405b")
    embed = 2 * 128_256 * 16_384  # the bf16 embedding and LM head, one element each
    assert m.embedding_params() == embed
    # FP8: one element per weight; NVFP4: two values per uint8 element and an fp8 scale per 16
    assert trtllm_bench_param_count(m, "fp8") == pytest.approx(m.params())
    fp4 = trtllm_bench_param_count(m, "fp4")
    assert fp4 == pytest.approx((m.params() - embed) * (0.5 + 1 / 16) + embed)
    # by hand: (405.88e9 − 4.20e9) × 0.5625 + 4.20e9
    assert fp4 == pytest.approx(230.1e9, rel=0.005)
