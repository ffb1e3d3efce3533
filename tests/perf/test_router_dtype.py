"""The FP32 router (`Strategy.router_dtype` fp32, Megatron-Core --moe-router-dtype fp32): the
activation bytes it adds by hand, with and without shared experts, the TF32 gating GEMM's time,
the stage memory of the DeepSeek-V3 validation row by hand, and its one-line errors."""

from __future__ import annotations

import numpy as np
import pytest

from railplan import Network, RailplanError, Strategy, estimate, load_model, load_system
from railplan.perf.compute import gemm_time_s
from railplan.perf.layer_time import layer_times
from railplan.specs.arrays import from_strategies
from railplan.workload.gemms import router_gemm
from railplan.workload.memory import GIB, layer_activation_bytes

V3 = load_model("deepseek-v3")  # 1 shared expert, 256 routed, MLA
MIXTRAL = load_model("mixtral-8x7b")  # no shared experts


def _bytes(model_name: str, **kw: object) -> float:
    base: dict[str, object] = {"global_batch": 8, "micro_batch": 2, "dp": 8, "ep": 8}
    s = from_strategies(Strategy(**(base | kw)))  # type: ignore[arg-type]
    return float(layer_activation_bytes(load_model(model_name), s))


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_fp32_copies_by_hand(precision: str) -> None:
    """Per MoE layer and micro-batch (tp 1): the FP32 input copy (4 bytes per hidden element of
    every token) and the FP32 weight copy (4 bytes per router weight), in place of the BF16
    router's saved input (the norm's output, 2 bytes) where nothing else keeps that: without
    shared experts, or with FP8 ones (which keep their own FP8 copy); BF16 shared experts keep
    the BF16 input themselves."""
    tokens = 2 * V3.seq
    v3_share = V3.moe_layers / V3.layers
    added = _bytes("deepseek-v3", router_dtype="fp32", precision=precision) - _bytes(
        "deepseek-v3", precision=precision
    )
    weight = 4.0 * V3.experts * V3.hidden
    freed = 2.0 if precision == "fp8" else 0.0
    assert added == pytest.approx(v3_share * (tokens * (4.0 - freed) * V3.hidden + weight))

    slot = 2.0  # the BF16 router's input, in FP8 runs too
    tokens = 2 * MIXTRAL.seq
    added = _bytes("mixtral-8x7b", router_dtype="fp32", precision=precision) - _bytes(
        "mixtral-8x7b", precision=precision
    )
    weight = 4.0 * MIXTRAL.experts * MIXTRAL.hidden
    assert added == pytest.approx(tokens * (4.0 - slot) * MIXTRAL.hidden + weight)


def test_recomputed_norm_does_not_free_the_copy() -> None:
    """Recomputing the norms frees their BF16 outputs, not the router's FP32 copy: without
    shared experts the freed MLP-input slot is then already gone, and the copy adds its full 4
    bytes; the whole MoE block recomputed keeps neither copy."""
    tokens = 2 * MIXTRAL.seq
    kw: dict[str, object] = {"recompute": "selective", "recompute_modules": ("layernorm",)}
    added = _bytes("mixtral-8x7b", router_dtype="fp32", **kw) - _bytes("mixtral-8x7b", **kw)
    weight = 4.0 * MIXTRAL.experts * MIXTRAL.hidden
    assert added == pytest.approx(tokens * 4.0 * MIXTRAL.hidden + weight)
    kw = {"recompute": "selective", "recompute_modules": ("moe",)}
    assert _bytes("mixtral-8x7b", router_dtype="fp32", **kw) == _bytes("mixtral-8x7b", **kw)


def test_sequence_parallel_splits_the_input_copy_not_the_weight() -> None:
    tokens = 2 * V3.seq
    share = V3.moe_layers / V3.layers
    kw: dict[str, object] = {"tp": 2, "dp": 4, "sequence_parallel": True}
    added = _bytes("deepseek-v3", router_dtype="fp32", **kw) - _bytes("deepseek-v3", **kw)
    weight = 4.0 * V3.experts * V3.hidden
    assert added == pytest.approx(share * (tokens * 4.0 * V3.hidden / 2 + weight))


def test_tf32_gating_gemm_is_slower_and_counted() -> None:
    """The gating GEMM's three passes in TF32 (half the BF16 peak, 4-byte operands) instead of
    BF16: the layer's forward and backward grow by exactly those differences, the average
    layer by the MoE share."""
    system = load_system("dgx-h100")
    base: dict[str, object] = {"global_batch": 8, "dp": 8, "ep": 8}
    bf16 = layer_times(V3, system, from_strategies(Strategy(**base)))  # type: ignore[arg-type]
    fp32 = layer_times(V3, system, from_strategies(Strategy(**base, router_dtype="fp32")))  # type: ignore[arg-type]
    g = router_gemm(V3, np.asarray(1.0))
    fwd = float(gemm_time_s(system.gpu, g, tf32=True) - gemm_time_s(system.gpu, g))
    bwd = sum(
        float(gemm_time_s(system.gpu, h, tf32=True) - gemm_time_s(system.gpu, h))
        for h in g.backward()
    )
    share = V3.moe_layers / V3.layers
    assert fwd > 0 and bwd > 0
    assert float(fp32["forward"] - bf16["forward"]) == pytest.approx(share * fwd)
    assert float(fp32["backward"] - bf16["backward"]) == pytest.approx(share * bwd)
    assert float(fp32["moe_forward"] - bf16["moe_forward"]) == pytest.approx(fwd)


def test_deepseek_row_memory_by_hand() -> None:
    """The dgxc DeepSeek-V3 row on 512 H100 (tp 2 with SP, pp 8, first stage 7 layers): its
    peak is rank 1, eight MoE layers with seven micro-batches in flight (1F1B warm-up 6, plus
    one); the FP32 router adds, per layer and micro-batch, the input copy of its 4,096/2
    tokens and the weight copy."""
    s = Strategy(
        tp=2, pp=8, dp=32, ep=64, expert_tp=1, global_batch=4096, first_stage_layers=7,
        last_stage_layers=6, sequence_parallel=True, zero=1, recompute="selective",
        recompute_modules=("mla_up_proj",),
    )  # fmt: skip
    base = estimate(V3, "dgx-h100", s, Network())
    fp32 = estimate(V3, "dgx-h100", s.model_copy(update={"router_dtype": "fp32"}), Network())
    assert base.memory_peak_rank == fp32.memory_peak_rank == 1
    per = 4.0 * V3.seq / 2 * V3.hidden + 4.0 * V3.experts * V3.hidden
    expected_gib = 8 * 7 * per / GIB
    assert fp32.memory_gib_per_gpu - base.memory_gib_per_gpu == pytest.approx(expected_gib)
    assert expected_gib == pytest.approx(3.44, abs=0.01)


def test_dense_model_refuses_fp32_router() -> None:
    with pytest.raises(RailplanError, match=r"^router_dtype: .*needs an MoE model"):
        estimate("gpt-22b", "dgx-a100", Strategy(dp=8, global_batch=16, router_dtype="fp32"))


def test_cli_router_dtype(cli) -> None:  # type: ignore[no-untyped-def]
    args = ("estimate", "--model", "moe-1.3b", "--gpus", "64", "--ep", "8")
    args += ("--global-batch", "128")
    d = cli.json(*args, "--router-dtype", "fp32")
    plain = cli.json(*args)
    assert d["strategy"]["router_dtype"] == "fp32" and plain["strategy"]["router_dtype"] == "bf16"
    assert d["memory_gib_per_gpu"] > plain["memory_gib_per_gpu"]
    assert d["iteration_s"] > plain["iteration_s"]
    dense = ("estimate", "--model", "gpt-22b", "--gpus", "64", "--global-batch", "128")
    for bad_args in ((*args, "--router-dtype", "fp16"), (*dense, "--router-dtype", "fp32")):
        bad = cli(*bad_args)
        assert bad.exit_code == 2, bad_args
        message = str(bad.exception)
        assert message.startswith("router_dtype:") and len(message.splitlines()) == 1
    found = cli(
        "search", "--model", "gpt-22b", "--gpus", "64", "--global-batch", "128",
        "--router-dtype", "fp32",
    )  # fmt: skip
    assert found.exit_code == 2 and str(found.exception).startswith("router_dtype:")


def test_fp32_router_reduce_scatters_the_combine_in_fp32() -> None:
    """Routed experts split over expert_tp = tp = 2: the dispatcher's combine reduce-scatter
    (and its gradient's all-gather) takes the router's dtype, so with an FP32 router those move
    twice the bytes; the dispatch's all-gather stays BF16. In the time and in the matrix."""
    from railplan.perf.comm_time import expert_tp_comm_time_s, group_collective_s, links
    from railplan.perf.layout import megatron_shapes
    from railplan.traffic.matrix import kind_volumes
    from railplan.workload import comm

    fields: dict[str, object] = {"tp": 2, "dp": 4, "ep": 4, "global_batch": 8}
    fields |= {"sequence_parallel": True}
    system = load_system("dgx-h100")
    lk = links(system, Network(), np.asarray(8.0))
    times, volumes = {}, {}
    for dtype in ("bf16", "fp32"):
        st = Strategy(**fields, router_dtype=dtype)  # type: ignore[arg-type]
        s = from_strategies(st)
        shape = megatron_shapes(s.tp, s.dp, s.pp, s.ep, lk.hb_domain, s.cp)["etp"]
        times[dtype] = float(expert_tp_comm_time_s(MIXTRAL, lk, s, shape))
        volumes[dtype] = kind_volumes(MIXTRAL, s)["etp"]
        message = comm.expert_tp_message_bytes(MIXTRAL, s)
        gather = float(group_collective_s(lk, shape, message, gather_only=True))
        scatter = float(group_collective_s(lk, shape, message * 2, gather_only=True))
    assert times["bf16"] == pytest.approx(2 * 2 * gather)  # forward and backward pairs
    assert times["fp32"] == pytest.approx(2 * (gather + scatter))
    assert volumes["fp32"] == pytest.approx(1.5 * volumes["bf16"]) and volumes["bf16"] > 0


def test_fp8_recomputed_moe_block_and_shared_experts_keep_the_bf16_input() -> None:
    """FP8, DeepSeek-V3 at tp 1 (per token of an MoE layer): the MoE block recomputed keeps
    only its checkpoint's input, the norm's BF16 output (2 bytes per hidden element), which a
    recomputed norm also frees (Megatron-Core's discard resizes that very storage); the shared
    experts recomputed drop their FP8 copy of it (1 byte) beside their activations."""
    tokens = 2 * V3.seq
    share = V3.moe_layers / V3.layers

    def per_token(*modules: str) -> float:
        kw = {"recompute": "selective", "recompute_modules": ("core_attn", *modules)}
        return _bytes("deepseek-v3", precision="fp8", **kw) / tokens

    norm = per_token() - per_token("layernorm")  # FP8: only the router's BF16 input
    assert norm == pytest.approx(share * 2.0 * V3.hidden)
    # with the block recomputed, the norm frees that input too
    block = per_token("moe") - per_token("moe", "layernorm")
    assert block == pytest.approx(share * 2.0 * V3.hidden)
    shared = per_token() - per_token("shared_experts")
    # their SwiGLU activations, 6 bytes per element less the FP8 input of the down projection
    activations = (6.0 - 1.0) * V3.shared_experts * V3.expert_ffn_
    assert shared == pytest.approx(share * (activations + 1.0 * V3.hidden))


def test_the_fp32_combine_is_the_alltoall_dispatchers_only() -> None:
    """The FP32 reduce-scatter is the alltoall dispatcher's (its `combine_preprocess`); no
    source states it for DeepEP's flex dispatcher, which keeps BF16 bytes."""
    from railplan.workload import comm

    base: dict[str, object] = {"tp": 2, "dp": 4, "ep": 4, "global_batch": 8}
    ratios = {
        (dispatch, dtype): float(
            comm.expert_tp_combine_byte_ratio(
                from_strategies(Strategy(**base, ep_dispatch=dispatch, router_dtype=dtype))  # type: ignore[arg-type]
            )
        )
        for dispatch in ("alltoall", "deepep")
        for dtype in ("bf16", "fp32")
    }
    assert ratios == {
        ("alltoall", "bf16"): 1.0,
        ("alltoall", "fp32"): 2.0,
        ("deepep", "bf16"): 1.0,
        ("deepep", "fp32"): 1.0,
    }
