"""Transformer Engine's FP8 data flow (v1.11 `layernorm_linear.py`, `linear.py`,
`base.py: grad_output_preprocess`): a fused norm writes its GEMM's input in FP8, the
sequence-parallel all-gathers move FP8, a gathered output gradient is cast on its shard."""

from __future__ import annotations

import pytest

from railplan.perf import layer_time
from railplan.perf.compute import memory_time_s
from railplan.perf.estimate import estimate
from railplan.specs import Strategy, load_model, load_system
from railplan.specs.arrays import from_strategies
from railplan.traffic.matrix import kind_volumes
from railplan.workload.gemms import layer_gemms

MODEL = load_model("gpt-22b")  # h 6,144, 64 heads (no GQA), MLP 4h, 2,048 tokens
GPU = load_system("dgx-h100").gpu


def _casts(sp: bool, precision: str = "fp8") -> dict[str, float]:
    s = from_strategies(Strategy(tp=4, global_batch=8, sequence_parallel=sp, precision=precision))
    gemms = [g for g in layer_gemms(MODEL, 1.0, 4.0) if not g.attention]
    return {k: float(v) for k, v in layer_time.fp8_cast_times_s(GPU, gemms, s).items()}


def _by_hand(
    forward_bytes: float, backward_bytes: float, forward_kernels: float, backward_kernels: float
) -> dict[str, float]:
    fwd_eff, bwd_eff = GPU.elementwise_forward_efficiency, GPU.elementwise_backward_efficiency
    return {
        "forward": float(memory_time_s(GPU, forward_bytes, forward_kernels, fwd_eff)),
        "backward": float(memory_time_s(GPU, backward_bytes, backward_kernels, bwd_eff)),
    }


def test_fp8_casts_by_hand_with_sequence_parallelism() -> None:
    """tp 4, SP: QKV and MLP-up take the fused norm's FP8 output (1 byte fewer per element of
    the s/4 shard each) and transpose the gathered input in the backward (2 bytes per
    element); the projection and MLP-down inputs are cast-transposed (4); the output
    gradients of QKV and MLP-up are cast-transposed, those of the projection and MLP-down
    cast on their shard (3 bytes) and transposed after the FP8 gather (2)."""
    t, h = 2048.0, 6144.0
    forward = -2 * (t * h / 4) + 4 * (t * h / 4) + 4 * (t * h)
    backward = (
        (2 * t * h + 4 * t * 3 * h / 4)  # QKV: input transpose, output gradient
        + (2 * t * h + 4 * t * h)  # MLP up
        + 2 * (3 * t * h / 4 + 2 * t * h)  # projection and MLP down
    )
    # kernels: forward the two cast-transposes; backward four output-gradient casts, two input
    # transposes and the two transposes after the gathers
    assert _casts(sp=True) == pytest.approx(_by_hand(forward, backward, 2.0, 8.0))


def test_fp8_casts_by_hand_without_sequence_parallelism() -> None:
    """Without SP nothing is gathered: the norms' whole outputs are written in FP8 and every
    output gradient gets one fused cast-transpose."""
    t, h = 2048.0, 6144.0
    forward = -2 * (t * h) + 4 * (t * h / 4) + 4 * (t * h)
    backward = (2 * t * h + 4 * t * 3 * h / 4) + (2 * t * h + 4 * t * h) + 2 * (4 * t * h)
    assert _casts(sp=False) == pytest.approx(_by_hand(forward, backward, 2.0, 6.0))
    assert _casts(sp=False, precision="bf16") == {"forward": 0.0, "backward": 0.0}


def test_fp8_tp_all_gathers_carry_one_byte_per_element() -> None:
    """In the traffic matrix: with SP each all-reduce equivalent is a BF16 reduce-scatter and
    an all-gather, which FP8 halves, and the backward re-gathers are FP8 too: forward 2 and
    backward 2 pairs plus 2 re-gathers per layer carry (6·1 + 4·2)/(6·2 + 4·2) = 0.7 of the
    BF16 bytes. Without SP the all-reduces run on the BF16 outputs."""

    def tp_bytes(precision: str, sp: bool) -> float:
        s = from_strategies(
            Strategy(tp=8, global_batch=8, sequence_parallel=sp, precision=precision)
        )
        return kind_volumes(MODEL, s)["tp"]

    assert tp_bytes("fp8", True) == pytest.approx(0.7 * tp_bytes("bf16", True))
    assert tp_bytes("fp8", False) == pytest.approx(tp_bytes("bf16", False))


def test_fp8_exposed_tp_time_below_bf16() -> None:
    """With no TP overlap at all, FP8's exposed TP communication is below BF16's with SP (its
    all-gathers move half the bytes) and the same without SP."""

    def tp_s(precision: str, sp: bool) -> float:
        strat = Strategy(
            tp=8,
            global_batch=8,
            sequence_parallel=sp,
            precision=precision,
            overlap_tp=False,
            tp_comm_overlap=False,
        )
        return estimate("gpt-3-175b", "dgx-h100", strat, gpus=8).breakdown_s["tp_comm"]

    bf16, fp8 = tp_s("bf16", True), tp_s("fp8", True)
    assert 0.7 * bf16 <= fp8 < 0.8 * bf16
    assert tp_s("fp8", False) == pytest.approx(tp_s("bf16", False))


def test_fp8_column_parallel_input_without_a_fused_norm_is_cast_on_its_shard() -> None:
    """A shared expert's up projection (TEColumnParallelLinear) under SP: its input cast on the
    shard (3 bytes per element, ÷tp), gathered in FP8 and transposed in the backward (2); its
    output gradient cast-transposed (4). Without SP one fused cast-transpose (4)."""
    from railplan.workload.gemms import mlp_gemms

    up, _ = mlp_gemms(MODEL, 1.0, 4.0, MODEL.ffn_)
    assert up.column_parallel and not up.norm_input
    t, h, f = 2048.0, 6144.0, float(MODEL.ffn_)

    def casts(sp: bool) -> dict[str, float]:
        s = from_strategies(Strategy(tp=4, global_batch=8, sequence_parallel=sp, precision="fp8"))
        return {k: float(v) for k, v in layer_time.fp8_cast_times_s(GPU, [up], s).items()}

    out = 4 * t * f / 4
    assert casts(True) == pytest.approx(_by_hand(3 * t * h / 4, 2 * t * h + out, 1.0, 2.0))
    assert casts(False) == pytest.approx(_by_hand(4 * t * h, out, 1.0, 1.0))


def test_fp8_moe_delta_casts_experts_from_their_own_norm(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The dense MLP's up projection is norm-fed; an MoE layer's experts and shared experts take
    their input from a norm of their own: moe_mlp_delta casts them without the fused norm and
    takes off the dense MLP's casts with it."""
    from railplan.workload.gemms import mlp_gemms

    dense_up, dense_down = mlp_gemms(MODEL, 1.0, 1.0)
    shared_up, shared_down = mlp_gemms(MODEL, 1.0, 1.0, MODEL.ffn_)
    assert dense_up.norm_input and not shared_up.norm_input
    assert dense_down.row_parallel and shared_down.row_parallel
    seen: list[list[tuple[str, bool]]] = []
    real = layer_time.fp8_cast_times_s

    def spy(gpu, gemms, s):  # type: ignore[no-untyped-def]
        seen.append([(g.name, g.norm_input) for g in gemms])
        return real(gpu, gemms, s)

    monkeypatch.setattr(layer_time, "fp8_cast_times_s", spy)
    v3 = load_model("deepseek-v3")
    s = from_strategies(Strategy(tp=1, ep=8, global_batch=64, precision="fp8"))
    layer_time.moe_mlp_delta(v3, load_system("dgx-h100"), s)
    experts, dense = seen
    assert not any(norm for _, norm in experts)  # routed and shared experts
    assert dense == [("mlp_up", True), ("mlp_down", False)]


def test_mla_latent_norms_are_timed() -> None:
    """MLA's latent norms (q_lora_rank + kv_lora_rank per token) move the layer-norm bytes: 4
    forward, 6 backward per latent element, ÷tp with SP; a model without MLA has none."""
    from railplan.workload import elementwise

    v3 = load_model("deepseek-v3")
    latents = float(v3.q_lora_rank + v3.kv_lora_rank)
    for sp, share in ((True, 0.5), (False, 1.0)):
        s = from_strategies(Strategy(tp=2, ep=8, global_batch=64, sequence_parallel=sp))
        assert float(elementwise.latent_elements(v3, s)) == pytest.approx(v3.seq * latents * share)
    assert elementwise.latent_norms(v3) == 2
    assert (
        float(elementwise.latent_elements(MODEL, from_strategies(Strategy(tp=1, global_batch=8))))
        == 0.0
    )
    with_mla = elementwise.layer_bytes(v3, s)
    no_latents = elementwise.layer_bytes(
        v3.model_copy(update={"kv_lora_rank": 0, "q_lora_rank": 0}), s
    )
    extra = v3.seq * latents
    assert float(with_mla["forward"] - no_latents["forward"]) == pytest.approx(4 * extra)
    assert float(with_mla["backward"] - no_latents["backward"]) == pytest.approx(6 * extra)


def test_mla_down_projections_run_on_the_sequence_parallel_shard() -> None:
    """Megatron-Core's duplicated TELinear (core_v0.14.0) runs MLA's down projections on each
    rank's s/tp tokens under sequence parallelism; without it (and in serving) on every token.
    A model without q_lora_rank has one latent norm, on the key-value latent."""
    from railplan.workload import elementwise
    from railplan.workload.gemms import attention_gemms

    v3 = load_model("deepseek-v3")
    for sp, rows in ((1.0, v3.seq / 4), (0.0, float(v3.seq))):
        g = {x.name: x for x in attention_gemms(v3, 1.0, 4.0, sp)}
        assert float(g["q_down"].m) == float(g["kv_down"].m) == rows
        assert not g["q_down"].column_parallel and g["q_up"].norm_input
    lite = v3.model_copy(update={"q_lora_rank": None})
    assert elementwise.latent_norms(lite) == 1
    s = from_strategies(Strategy(tp=1, ep=8, global_batch=64))
    assert float(elementwise.latent_elements(lite, s)) == v3.seq * v3.kv_lora_rank


def test_fp8_mtp_projection_pays_its_casts(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """DeepSeek-V3's MTP projection (eh_proj, TEColumnParallelLinear fed by two separate norms)
    pays its FP8 casts in the head's time: without them the head is faster by exactly the
    casts of that one GEMM per MTP layer."""
    from railplan.workload.gemms import mtp_projection_gemm

    v3 = load_model("deepseek-v3")
    sy = load_system("hgx-h800")
    s = from_strategies(
        Strategy(tp=2, pp=8, ep=8, global_batch=64, sequence_parallel=True, precision="fp8")
    )
    proj = layer_time.local([mtp_projection_gemm(v3, 1.0, 2.0)], s)
    assert proj[0].column_parallel and not proj[0].norm_input
    casts = layer_time.fp8_cast_times_s(sy.gpu, proj, s)
    with_casts = float(layer_time.logits_times(v3, sy, s)["t"])
    zero = {"forward": 0.0, "backward": 0.0}
    monkeypatch.setattr(layer_time, "fp8_cast_times_s", lambda gpu, gemms, s: zero)
    without = float(layer_time.logits_times(v3, sy, s)["t"])
    expected = v3.mtp_layers * float(casts["forward"] + casts["backward"])
    assert expected > 0.0
    assert with_casts - without == pytest.approx(expected)
