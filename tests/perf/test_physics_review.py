"""Hand-checked volumes a review of the training model found wrong: MLA's ring attention sends
the up-projected K and V of every head, and the router sees only its rank's tokens."""

from __future__ import annotations

import pytest

from railplan import Strategy, load_model
from railplan.specs.arrays import from_strategies
from railplan.workload.comm import cp_block_bytes


def test_mla_ring_attention_sends_the_up_projected_k_and_v() -> None:
    # DeepSeek-V3, cp 2, tp 1, micro-batch 1: 4,096 / 2 tokens × 128 heads × (192 + 128) × 2 B
    # = 167.8 MB per ring step (the latent width 7,168 gave 58.7 MB)
    m = load_model("deepseek-v3")
    s = from_strategies(Strategy(tp=1, cp=2, pp=1, dp=1, global_batch=1))
    assert float(cp_block_bytes(m, s)) == pytest.approx(2048 * 128 * (192 + 128) * 2)
    # GQA is unchanged: K and V of its kv_heads (Llama 3 70B: 8 × 128 each), split by tp
    llama = load_model("llama-3-70b")
    s8 = from_strategies(Strategy(tp=8, cp=2, pp=1, dp=1, global_batch=1))
    assert float(cp_block_bytes(llama, s8)) == pytest.approx(8192 / 2 * 2 * 8 * 128 * 2 / 8)


@pytest.mark.parametrize(("tp", "cp"), [(1, 1), (8, 1), (1, 8), (4, 2)])
def test_the_router_sees_its_ranks_tokens(
    tp: int, cp: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the router GEMM (h → experts) of a tp-8 sequence-parallel rank, or of a cp-8 rank, runs on
    # an eighth of the micro-batch's tokens; before, every rank routed all of them
    from railplan.perf import layer_time
    from railplan.specs import load_system

    seen: list[float] = []
    real = layer_time.gemm_time_s

    def spy(gpu, g, *args, **kw):  # type: ignore[no-untyped-def]
        if g.name == "router":
            seen.append(float(g.m))
        return real(gpu, g, *args, **kw)

    monkeypatch.setattr(layer_time, "gemm_time_s", spy)
    m = load_model("deepseek-v3")
    st = Strategy(tp=tp, cp=cp, pp=1, dp=1, ep=1, sequence_parallel=tp > 1, global_batch=1)
    layer_time.moe_mlp_delta(m, load_system("hgx-h800"), from_strategies(st))
    assert seen and seen[0] == pytest.approx(m.seq / (tp * cp))


@pytest.mark.parametrize(
    ("sp", "scatter", "split"), [(False, False, False), (True, False, True), (False, True, True)]
)
def test_pipeline_sends_without_sequence_parallelism_carry_the_whole_activation(
    sp: bool, scatter: bool, split: bool
) -> None:
    # Megatron-Core's get_tensor_shapes divides the sequence by tp only with sequence
    # parallelism; Megatron-LM 2021-22 scattered the send over the tp ranks
    from railplan.workload.comm import pp_message_bytes

    m = load_model("llama-3-70b")
    st = Strategy(
        tp=8, pp=4, dp=1, sequence_parallel=sp, p2p_scatter_gather=scatter, global_batch=4
    )
    whole = m.seq * m.hidden * 2  # one micro-batch's [s, b, h] in bf16
    expected = whole / 8 if split else whole
    assert float(pp_message_bytes(m, from_strategies(st))) == pytest.approx(expected)
