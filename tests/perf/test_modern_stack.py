"""Today's stacks: fused attention, FP8, ZeRO-3 gathered layers, expert sharding, modern runs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from railplan.errors import RailplanError
from railplan.perf.estimate import estimate
from railplan.perf.iteration import iteration
from railplan.reproduce.modern_validation import modern_rows
from railplan.specs import Model, Network, Strategy, load_model, load_system
from railplan.specs.arrays import from_strategies
from railplan.workload.memory import GIB, WEIGHT_BYTES, layer_activation_bytes, memory


def test_fp8_refused_without_fp8_tensor_cores() -> None:
    strat = Strategy(tp=8, global_batch=8, precision="fp8")
    with pytest.raises(RailplanError) as err:
        estimate("gpt-22b", "dgx-a100", strat, gpus=8)
    assert str(err.value) == "precision: fp8 needs a GPU with fp8 tensor cores (a100-80gb has none)"


def test_fp8_cli_is_one_line_exit_2(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli(
        "estimate",
        "--model",
        "gpt-22b",
        "--gpus",
        "8",
        "--tp",
        "8",
        "--global-batch",
        "8",
        "--precision",
        "fp8",
    )
    assert r.exit_code == 2
    assert "a100-80gb has none" in str(r.exception)
    r = cli(
        "estimate", "--model", "gpt-22b", "--gpus", "8", "--global-batch", "8", "--attention", "x"
    )
    assert r.exit_code == 2
    assert (
        str(r.exception)
        == "attention: 'x' is not allowed; choose one of flash, unfused, flash2, flash1"
    )


def test_fp8_faster_than_bf16_and_keeps_fp8_weight_copies() -> None:
    base = dict(tp=8, pp=8, dp=4, interleave=12, global_batch=256, sequence_parallel=True, zero=1)
    bf16 = estimate("gpt-175b", "dgx-h100", Strategy(**base), gpus=256)
    fp8 = estimate(
        "gpt-175b",
        "dgx-h100",
        Strategy(**base, precision="fp8"),
        gpus=256,
    )
    assert fp8.iteration_s < bf16.iteration_s
    # FP8 runs the GEMMs at twice the peak but casts, attention, logits and communication stay:
    # the gain is well under 2x.
    assert bf16.iteration_s / fp8.iteration_s < 1.9
    assert fp8.memory_breakdown_gib["weights"] > bf16.memory_breakdown_gib["weights"]
    assert fp8.memory_breakdown_gib["activations"] < bf16.memory_breakdown_gib["activations"]


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from([1, 2, 4, 8]),
    st.integers(1, 4),
    st.sampled_from([1024, 2048, 4096, 8192]),
    st.sampled_from(["none", "selective"]),
    st.booleans(),
)
def test_flash_activations_below_unfused(
    tp: int, mb: int, seq: int, recompute: str, sp: bool
) -> None:
    m = Model(hidden=4096, layers=8, heads=32, seq=seq)

    def acts(attention: str) -> float:
        s = Strategy(
            tp=tp,
            micro_batch=mb,
            global_batch=mb,
            recompute=recompute,
            sequence_parallel=sp,
            attention=attention,
        )
        return float(layer_activation_bytes(m, from_strategies(s)))

    if recompute == "selective":  # the attention core is recomputed either way: nothing kept
        assert acts("flash") == acts("unfused")
    else:
        assert acts("flash") < acts("unfused")


def test_flash_keeps_no_score_matrix() -> None:
    # Korthikanti eq. 2 without the 5·a·s²·b score term, plus the fp32 log-sum-exp (4·a·s·b).
    m = load_model("gpt-22b")
    s, b, h, a, t = m.seq, 2, m.hidden, m.heads, 8
    got = layer_activation_bytes(m, from_strategies(Strategy(tp=t, micro_batch=b, global_batch=2)))
    assert float(got) == pytest.approx(s * b * h * (10 + 24 / t) + 4 * a * s * b / t)


def test_expert_states_shard_over_dp_over_ep_by_hand() -> None:
    # 2 MoE layers, 8 experts, h 1024, ffn 4096, vocab 1000 (tied): counted by hand.
    # expert: 2·1024·4096 weights + 4096 + 1024 biases = 8,393,728; 2 layers × 8/ep=2 local
    # experts → 33,574,912. Non-expert per layer: attention 4,198,400 + 2 norms 4,096 + router
    # 8,192 = 4,210,688; ×2 layers + embedding 1,024,000 = 9,445,376.
    m = Model(hidden=1024, layers=2, heads=8, vocab=1000, seq=128, experts=8, top_k=2)
    s = from_strategies(Strategy(dp=8, ep=4, zero=1, global_batch=8))
    mem = memory(m, s)
    dense, expert = 9_445_376, 33_574_912
    assert float(mem.optimizer_bytes) == pytest.approx(dense * 12 / 8 + expert * 12 / 2)
    assert float(mem.optimizer_bytes) == pytest.approx(215_617_536)
    z3 = memory(m, from_strategies(Strategy(dp=8, ep=4, zero=3, global_batch=8)))
    assert float(z3.weights_bytes) == pytest.approx(dense * 2 / 8 + expert * 2 / 2)
    assert float(z3.gradients_bytes) == pytest.approx(dense * 4 / 8 + expert * 4 / 2)


GPT_10T = Model(name="gpt-10t", hidden=65536, layers=192, heads=512)


def test_zero3_gpt10t_on_100k_gpus_does_not_fit() -> None:
    strat = Strategy(dp=100_000, zero=3, global_batch=100_000)
    e = estimate(GPT_10T, "dgx-h100", strat, gpus=100_000)
    one_layer = GPT_10T.layer_params() * WEIGHT_BYTES / GIB
    assert e.memory_breakdown_gib["zero3_gathered"] >= 2 * one_layer
    assert not e.fits


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from([1, 2, 4, 8]),
    st.sampled_from([1, 8, 64, 1024, 100_000]),
    st.sampled_from([1024, 4096, 16384]),
    st.integers(1, 64),
)
def test_zero3_memory_never_below_one_gathered_layer(tp: int, dp: int, h: int, layers: int) -> None:
    m = Model(hidden=h, layers=layers, heads=64)
    s = from_strategies(Strategy(tp=tp, dp=dp, zero=3, global_batch=dp))
    mem = memory(m, s)
    one_layer = m.layer_params() / tp * WEIGHT_BYTES
    assert float(mem.total_bytes) >= one_layer
    assert float(mem.gathered_bytes) >= one_layer


def test_gpu_memory_override(cli) -> None:  # type: ignore[no-untyped-def]
    args = ("estimate", "--model", "gpt-22b", "--gpus", "8", "--tp", "8", "--global-batch", "8")
    small = cli.json(*args, "--gpu-memory-gib", "1")
    assert small["fits"] is False
    big = cli.json(*args, "--gpu-memory-gib", "1000")
    assert big["fits"] is True
    assert big["iteration_s"] == small["iteration_s"]


def test_flash_attention_time_is_the_causal_half_at_the_catalog_efficiency() -> None:
    # One layer's attention core, flash vs the same work timed as unfused GEMMs: flash skips
    # the masked half and moves no scores through HBM, so it is never slower here.
    sy = load_system("dgx-h100")
    m = load_model("gpt-22b")
    times = {}
    for att in ("flash", "unfused"):
        s = from_strategies(Strategy(tp=8, global_batch=1, attention=att))
        times[att] = float(iteration(m, sy, Network(), s).iteration_s)
    assert times["flash"] < times["unfused"]


def test_modern_rows_enter_and_fit() -> None:
    rows = modern_rows()
    assert len(rows) == 32
    for r in rows:
        assert np.isfinite(r.estimate.iteration_s)
        assert r.estimate.fits, r.id


@pytest.mark.parametrize(
    ("name", "published_b"),
    [
        ("deepseek-v3", 671.0),  # DeepSeek-V3 report: 671B total (MTP module excluded)
        ("mixtral-8x7b", 46.7),  # Mixtral paper: 47B total
        ("mixtral-8x22b", 141.0),  # Mistral: 141B total
        ("llama-3.1-405b", 405.0),
        ("mpt-7b", 6.658859008),  # llm-foundry benchmark table NumParams
        ("mpt-30b", 29.97521408),
        ("mpt-70b", 64.862437376),
    ],
)
def test_catalog_parameter_counts(name: str, published_b: float) -> None:
    assert load_model(name).params() / 1e9 == pytest.approx(published_b, rel=0.01)


def test_mla_and_shared_experts_enter_gemms_flops_and_memory() -> None:
    v3 = load_model("deepseek-v3")
    assert v3.moe_layers == 58  # 61 layers, the first 3 dense
    no_shared = v3.model_copy(update={"shared_experts": 0})
    s = from_strategies(Strategy(dp=64, ep=64, zero=1, global_batch=64))
    assert float(memory(v3, s).weights_bytes) > float(memory(no_shared, s).weights_bytes)
    from railplan.workload.flops import model_flops

    assert float(model_flops(v3, 1)) > float(model_flops(no_shared, 1))
    # MLA's score products use the 192-wide (128 nope + 64 rope) heads, context the 128-wide V.
    from railplan.workload.gemms import attention_gemms

    g = {x.name: x for x in attention_gemms(v3, 1.0, 1.0)}
    assert float(g["score"].k) == 192 and float(g["context"].n) == 128
    assert {"q_down", "q_up", "kv_down", "kv_up", "proj"} <= set(g)


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from([1, 2, 4, 8]),
    st.sampled_from([1, 2, 4]),
    st.sampled_from([1024, 4096, 8192]),
    st.sampled_from(["none", "selective", "full"]),
)
def test_fp8_never_beats_twice_bf16(tp: int, mb: int, h: int, recompute: str) -> None:
    # FP8 doubles only the GEMM peak: an iteration can never run more than 2x faster.
    m = Model(hidden=h, layers=4, heads=32, seq=2048)
    sy = load_system("dgx-h100")

    def time_s(precision: str) -> float:
        s = Strategy(
            tp=tp,
            micro_batch=mb,
            global_batch=mb,
            recompute=recompute,
            precision=precision,
        )
        return float(iteration(m, sy, Network(), from_strategies(s)).iteration_s)

    assert time_s("fp8") >= 0.5 * time_s("bf16")


def test_partial_mla_spec_is_a_one_line_error() -> None:
    with pytest.raises(RailplanError) as err:
        load_model({"hidden": 1024, "layers": 2, "heads": 8, "kv_lora_rank": 512})
    assert "MLA needs kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim and v_head_dim" in str(
        err.value
    )
    assert "\n" not in str(err.value)


def test_search_takes_the_gpu_memory_override(cli) -> None:  # type: ignore[no-untyped-def]
    args = ["search", "--model", "gpt-175b", "--gpus", "64", "--global-batch", "64"]
    args += ["--system", "dgx-h100", "--top", "1"]
    assert cli.json(*args)["best"] is not None
    r = cli(*args, "--gpu-memory-gib", "40")
    assert r.exit_code == 2
    assert "fits in 40 GiB per GPU" in str(r.exception)


def test_attention_generations_by_hand() -> None:
    # The fused kernel's time per pass is the causal half of the forward FLOPs over the
    # efficiency of its generation at the kernel's sequence length: the FlashAttention-2 paper's
    # A100 measurements (Figs. 5(d)/6(d): today's kernel is FlashAttention-2's, the first
    # generation the 2022 Triton kernel; at 2,048 tokens forward 187 / 126, backward 145 / 58
    # TFLOP/s) and the FlashAttention-3 paper's H100 ones (cuDNN forward 518 causal at 4k,
    # backward 499; FlashAttention-2's 319 / 310), the first generation on H100 falling back to
    # FlashAttention-2's.
    from railplan.perf.compute import flash_attention_time_s

    flops = np.asarray(1e15)
    a100 = load_system("dgx-a100").gpu
    t1 = flash_attention_time_s(a100, flops, 2048, generation=1)
    t3 = flash_attention_time_s(a100, flops, 2048)
    overhead = a100.kernel_overhead_us * 1e-6
    assert float(t1["forward"]) == pytest.approx(0.5e15 / 126e12 + overhead)
    assert float(t3["forward"]) == pytest.approx(0.5e15 / 187e12 + overhead)
    assert float(t1["backward"]) == pytest.approx(2.5 * 0.5e15 / 58e12 + overhead)
    assert float(t3["backward"]) == pytest.approx(2.5 * 0.5e15 / 145e12 + overhead)
    # 32k tokens, beyond the measured 16k: the 16k values (Triton forward 148, backward 67)
    t32 = flash_attention_time_s(a100, flops, 32768, generation=1)
    assert float(t32["backward"]) == pytest.approx(2.5 * 0.5e15 / 67e12 + overhead)
    h100 = load_system("dgx-h100").gpu
    for generation, tflops in ((1, (319, 310)), (2, (319, 310)), (3, (518, 499))):
        fwd, bwd = h100.flash_efficiencies(generation, 4096)
        assert (float(fwd), float(bwd)) == pytest.approx((tflops[0] / 989, tflops[1] / 989))
    # Context parallelism 2 at 8k: half the work under the causal mask (518 TFLOP/s at 4k),
    # half without it (609): the work-weighted harmonic mean.
    fwd, _ = h100.flash_efficiencies(3, 4096, causal_share=0.5)
    assert float(fwd) * 989 == pytest.approx(1.0 / (0.5 / 518 + 0.5 / 609))


def test_older_attention_never_faster() -> None:
    m = load_model("gpt-22b")
    for system in ("dgx-a100", "dgx-h100"):
        sy = load_system(system)
        times = []
        for att in ("flash", "flash2", "flash1"):
            s = from_strategies(Strategy(tp=8, global_batch=1, attention=att))
            times.append(float(iteration(m, sy, Network(), s).iteration_s))
        assert times[0] <= times[1] <= times[2], (system, times)


def test_backward_post_exposes_the_backward_gather_of_zero3_only() -> None:
    """FSDP BACKWARD_POST (`overlap_backward_gather` off): the backward's weight all-gather
    starts after the previous unit's gradients, so it adds to every micro-batch what it took
    beyond its SM-sharing cost when hidden, (1 − u)·gather while compute outlasts it; ZeRO-1
    gathers nothing per micro-batch and does not move."""
    sy, m = load_system("dgx-h100"), load_model("gpt-22b")
    for zero, slower in ((3, True), (1, False)):
        on, off = (
            Strategy(dp=64, zero=zero, global_batch=256, micro_batch=2, overlap_backward_gather=o)
            for o in (True, False)
        )
        t_on, t_off = (estimate(m, sy, s, gpus=64).iteration_s for s in (on, off))
        assert (t_off > t_on) is slower
        if not slower:
            assert t_off == pytest.approx(t_on)


def test_backward_gather_flag_in_cli_json(cli) -> None:  # type: ignore[no-untyped-def]
    args = ("estimate", "--model", "gpt-22b", "--gpus", "64", "--zero", "3", "--global-batch", "64")
    on = cli.json(*args)
    off = cli.json(*args, "--no-overlap-backward-gather")
    assert off["strategy"]["overlap_backward_gather"] is False
    assert off["breakdown_s"]["zero_comm"] > on["breakdown_s"]["zero_comm"]


def test_cross_entropy_kernels_by_hand() -> None:
    """The loss per micro-batch on the last stage: bytes per logit element (unfused 52, fused
    28, xentropy 8, te 10; workload/elementwise.py) over s·b·V/t elements at the streaming
    bandwidth, plus one launch per kernel (8, 4, 2, 3); what it keeps for the backward, fp32
    softmax or the bf16 logits."""
    from railplan.perf.layer_time import logits_times
    from railplan.workload.memory import logits_bytes

    m, sy = load_model("gpt-22b"), load_system("dgx-h100")
    gpu = sy.gpu
    elements = m.seq * 2 * m.vocab / 4  # micro-batch 2, tp 4
    bw = gpu.memory_tbps * 1e12 * gpu.memory_efficiency
    overhead = gpu.kernel_overhead_us * 1e-6
    t, kept = {}, {}
    for ce in ("fused", "unfused", "xentropy", "te"):
        s = from_strategies(Strategy(tp=4, micro_batch=2, global_batch=2, cross_entropy=ce))
        t[ce] = float(logits_times(m, sy, s)["t"])
        kept[ce] = float(logits_bytes(m, s))
    assert t["unfused"] - t["fused"] == pytest.approx(24 * elements / bw + 4 * overhead)
    assert t["fused"] - t["xentropy"] == pytest.approx(20 * elements / bw + 2 * overhead)
    assert t["te"] - t["xentropy"] == pytest.approx(2 * elements / bw + 1 * overhead)
    assert (
        kept["fused"] == kept["unfused"] == 2 * kept["xentropy"] == 2 * kept["te"] == 4 * elements
    )


def test_cross_entropy_flag_in_cli(cli) -> None:  # type: ignore[no-untyped-def]
    args = ("estimate", "--model", "gpt-22b", "--gpus", "8", "--tp", "8", "--global-batch", "8")
    fused = cli.json(*args)
    unfused = cli.json(*args, "--cross-entropy", "unfused")
    assert fused["strategy"]["cross_entropy"] == "fused"
    assert unfused["strategy"]["cross_entropy"] == "unfused"
    assert unfused["iteration_s"] > fused["iteration_s"]
    bad = cli(*args, "--cross-entropy", "liger")
    assert bad.exit_code == 2
    assert str(bad.exception) == (
        "cross_entropy: 'liger' is not allowed; choose one of fused, unfused, xentropy, te"
    )


def test_fp8_amax_reductions_by_hand() -> None:
    """NCCL's tree/LL latency for a tiny all-reduce (tuning.cc: 6.8 µs + 2·((x − 1)·0.6 +
    ⌊log2 y⌋·5.0) µs), twice per model chunk and micro-batch, over the tp·cp·dp ranks of a stage:
    GPT-3 175B tp 4, dp 64 on DGX H100 is 256 ranks on 32 nodes, 65.2 µs each; BF16 pays none."""
    from railplan.perf import collectives as coll
    from railplan.perf.comm_time import fp8_amax_reduction_s, links

    assert float(coll.small_all_reduce_s(8, 32)) == pytest.approx(65.2e-6)
    assert float(coll.small_all_reduce_s(8, 2)) == pytest.approx(25.2e-6)
    assert float(coll.small_all_reduce_s(1, 1)) == 0.0
    sy = load_system("dgx-h100")
    lk = links(sy, Network(), 2048.0)
    for precision, expected in (("fp8", 2 * 12 * 65.2e-6), ("bf16", 0.0)):
        s = from_strategies(
            Strategy(tp=4, pp=8, dp=64, interleave=12, global_batch=4096, precision=precision)
        )
        assert float(fp8_amax_reduction_s(lk, s)) == pytest.approx(expected)
    e = estimate(
        "gpt-3-175b",
        "dgx-h100",
        Strategy(tp=4, pp=8, dp=64, interleave=12, global_batch=4096, precision="fp8"),
    )
    assert e.breakdown_s["fp8_amax"] == pytest.approx(64 * 2 * 12 * 65.2e-6)
