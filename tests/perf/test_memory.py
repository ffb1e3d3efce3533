"""Memory per GPU against Korthikanti et al. 2022 §4 and the 16-bytes-per-parameter rule."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from railplan.specs import Strategy, load_model
from railplan.specs.arrays import from_strategies
from railplan.workload.memory import (
    OPTIMIZER_BYTES,
    WEIGHT_BYTES,
    layer_activation_bytes,
    memory,
    stage_params,
)


def _layer(name: str, **kw: object) -> float:
    m = load_model(name)
    s = from_strategies(Strategy(global_batch=8, **({"attention": "unfused"} | kw)))
    return float(layer_activation_bytes(m, s))


@pytest.mark.parametrize("t", [1, 2, 8])
def test_activations_tp_only_formula(t: int) -> None:
    # s·b·h·(10 + 24/t + 5·a·s/(h·t)) (Korthikanti eq. 2)
    m = load_model("gpt-22b")
    s, b, h, a = m.seq, 2, m.hidden, m.heads
    expected = s * b * h * (10 + 24 / t + 5 * a * s / (h * t))
    assert _layer("gpt-22b", tp=t, micro_batch=b) == pytest.approx(expected)


def test_activations_without_dropout_keep_no_masks() -> None:
    # no dropout: s·b·h·(8 + 24/t + 2·a·s/(h·t)): two 1-byte masks and the score mask and
    # dropout output gone
    m = load_model("gpt-22b").model_copy(update={"dropout": False})
    s, b, h, a, t = m.seq, 2, m.hidden, m.heads, 8
    st = from_strategies(Strategy(global_batch=8, attention="unfused", tp=t, micro_batch=b))
    expected = s * b * h * (8 + 24 / t + 2 * a * s / (h * t))
    assert float(layer_activation_bytes(m, st)) == pytest.approx(expected)


def test_activations_sequence_parallel_selective() -> None:
    # 34·s·b·h/t (Korthikanti eq. 6 with selective recompute)
    m = load_model("gpt-175b")
    got = _layer("gpt-175b", tp=8, micro_batch=1, sequence_parallel=True, recompute="selective")
    assert got == pytest.approx(34 * m.seq * m.hidden / 8)


def test_activations_full_recompute_keeps_layer_input() -> None:
    m = load_model("gpt-175b")
    assert _layer("gpt-175b", tp=8, recompute="full") == pytest.approx(2 * m.seq * m.hidden)
    assert _layer("gpt-175b", tp=8, recompute="full", sequence_parallel=True) == pytest.approx(
        2 * m.seq * m.hidden / 8
    )


def test_sixteen_bytes_per_parameter_without_zero() -> None:
    m = load_model("gpt-1.7b")
    s = from_strategies(Strategy(global_batch=8, grad_reduce_bytes=2))
    mem = memory(m, s)
    p = float(stage_params(m, s))
    assert p == pytest.approx(m.params(), rel=2e-3)
    static = float(mem.weights_bytes + mem.gradients_bytes + mem.optimizer_bytes)
    assert static == pytest.approx(16 * p)


def test_zero_stages_shard() -> None:
    m = load_model("gpt-7.5b")
    base = dict(global_batch=64, dp=8)
    mems = [memory(m, from_strategies(Strategy(zero=z, **base))) for z in range(4)]
    p = float(stage_params(m, from_strategies(Strategy(**base))))
    assert float(mems[1].optimizer_bytes) == pytest.approx(p * OPTIMIZER_BYTES / 8)
    assert float(mems[3].weights_bytes) == pytest.approx(p * WEIGHT_BYTES / 8)
    totals = [float(x.total_bytes) for x in mems]
    assert totals == sorted(totals, reverse=True)


@pytest.mark.parametrize(
    ("state", "bytes_per_param"),
    [("fp32", 12.0), ("fp32-remainder", 10.0), ("bf16-moments", 8.0), ("bf16", 4.0)],
)
def test_optimizer_state_bytes_by_hand(state: str, bytes_per_param: float) -> None:
    # fp32: master 4 + m 4 + v 4; fp32-remainder: m 4 + v 4 + the 2-byte low half of the fp32
    # master (the bf16 weight is the high half); bf16-moments: master 4 + m 2 + v 2; bf16: m 2 +
    # v 2, the bf16 weight is the master.
    # ZeRO-1 over dp = 4 shards exactly that; weights (2) and gradients stay whole.
    m = load_model("gpt-7.5b")
    s = from_strategies(Strategy(global_batch=64, dp=4, zero=1, optimizer_state=state))
    p = float(stage_params(m, s))
    mem = memory(m, s)
    assert float(mem.optimizer_bytes) == pytest.approx(p * bytes_per_param / 4)
    assert float(mem.weights_bytes) == pytest.approx(p * WEIGHT_BYTES)
    assert float(mem.gradients_bytes) == pytest.approx(p * 4.0)


def test_optimizer_state_never_raises_memory_in_its_order() -> None:
    m = load_model("gpt-7.5b")
    totals = [
        float(memory(m, from_strategies(Strategy(global_batch=8, optimizer_state=o))).total_bytes)
        for o in ("fp32", "fp32-remainder", "bf16-moments", "bf16")
    ]
    assert totals == sorted(totals, reverse=True) and totals[0] > totals[-1]


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from([1, 2, 4, 8]),
    st.sampled_from([1, 2, 4]),
    st.integers(1, 4),
    st.integers(1, 64),
    st.integers(0, 3),
    st.sampled_from(["none", "selective", "full"]),
    st.booleans(),
)
def test_more_dp_at_fixed_per_replica_batch_never_raises_memory(
    tp: int, pp: int, mb: int, dp: int, zero: int, rc: str, sp: bool
) -> None:
    m = load_model("gpt-39b")
    if zero >= 2:
        pp = 1
    per_replica = 8 * mb

    def mk(d: int):  # type: ignore[no-untyped-def]
        return from_strategies(
            Strategy(
                tp=tp,
                pp=pp,
                dp=d,
                micro_batch=mb,
                global_batch=per_replica * d,
                zero=zero,
                recompute=rc,
                sequence_parallel=sp,
            )
        )

    small, big = memory(m, mk(dp)), memory(m, mk(dp * 2))
    assert float(big.total_bytes) <= float(small.total_bytes) * (1 + 1e-12)


def test_arrays_broadcast() -> None:
    m = load_model("gpt-22b")
    s = from_strategies([Strategy(global_batch=8, tp=t) for t in (1, 2, 4, 8)])
    acts = layer_activation_bytes(m, s)
    assert acts.shape == (4,)
    assert np.all(np.diff(acts) < 0)


@pytest.mark.parametrize(("precision", "input_bytes"), [("bf16", 2.0), ("fp8", 1.0)])
def test_moe_layer_activations_by_hand(precision: str, input_bytes: float) -> None:
    """moe-1.3b (every other layer MoE, top-1 of 128 experts, capacity 1.0, tp 1, flash):
    per token, the dense layers keep 10·h + 4h (Q and context) + 4h (K, V) + 4·ffn, the expert
    layers the same with each routed slot's 4·expert_ffn instead of the MLP's, plus the routed
    copy of the token the first grouped GEMM saves (input_bytes·h per slot); FP8 saves the
    GEMM inputs in 1 byte (docs/model.md), but not the router's: the BF16 gate keeps the MLP
    input in 2 bytes in an expert layer (1 byte more than the dense layer's FP8 slot)."""
    m = load_model("moe-1.3b")
    s = from_strategies(Strategy(global_batch=8, micro_batch=2, dp=8, ep=8, precision=precision))
    h, ffn, tokens = m.hidden, m.ffn_, m.seq * 2
    fp8 = 1.0 if precision == "fp8" else 0.0
    capacity = m.capacity_factor
    assert m.top_k == 1 and m.drop_tokens and m.moe_layers * 2 == m.layers
    common = (10 - 2 * fp8) * h + 2 * (h + h + h) + (2 - fp8) * h
    dense = common + (4 - fp8) * ffn
    router = fp8 * h  # the gate's BF16 input over the FP8 slot `common` counts
    expert = common + (4 - fp8) * m.expert_ffn_ * capacity + capacity * input_bytes * h + router
    softmax_stats = 4.0 * m.heads
    want = tokens * ((dense + expert) / 2 + softmax_stats)
    assert float(layer_activation_bytes(m, s)) == pytest.approx(want)
