"""Traffic matrices: byte conservation against railplan.workload.comm, statistics."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from railplan.errors import RailplanError
from railplan.specs import Model, Strategy, load_model
from railplan.specs.arrays import FULL, from_strategies, layers_of_stage, valid_mask
from railplan.traffic.matrix import KINDS, stats, to_columns, traffic
from railplan.traffic.placement import place, rail_aligned
from railplan.workload import comm

TINY = Model(name="tiny", hidden=256, layers=12, heads=8, seq=128, vocab=1000)
UNTIED = Model(
    name="tiny-untied", hidden=256, layers=12, heads=8, seq=128, vocab=1000, tied_embeddings=False
)


def analytical(model: Model, strategy: Strategy) -> dict[str, float]:
    """Totals per kind: sizes and counts from comm × group sizes × number of groups.
    A ring or hierarchical all-reduce of D over n ranks moves 2(n−1)·D bytes in all, an
    all-gather or reduce-scatter (n−1)·D."""
    s = from_strategies(strategy)
    tp, pp, cp = strategy.tp, strategy.pp, strategy.cp
    dp = strategy.dp * cp  # gradients are reduced over the dp·cp ranks
    m = float(s.micro_batches)
    share = model.moe_layers / model.layers
    ops = comm.tp_ops_per_layer(s, share, 1.0, model.shared_experts)
    ar = float(ops["forward"] + ops["recompute"] + ops["backward"])
    ag = float(ops["sp_regather"])
    d_tp = float(comm.tp_message_bytes(model, s))
    tp_total = pp * dp * (model.layers / pp) * m * d_tp * (2 * ar + ag) * (tp - 1)
    # MoE: the routed experts' all-gather / reduce-scatter pairs in each group of etp ranks
    etp = int(s.etp)
    e_ops = comm.expert_tp_ops_per_moe_layer(s)
    e_ar = float(e_ops["forward"] + e_ops["recompute"] + e_ops["backward"])
    d_e = float(comm.expert_tp_message_bytes(model, s))
    tp_total += (tp * dp // etp) * model.moe_layers * m * d_e * 2 * e_ar * (etp - 1)
    pp_total = (
        tp
        * dp
        * m
        * float(comm.pp_message_bytes(model, s))
        * 2
        * float(comm.pp_boundaries_per_micro_batch(s))
    )

    # Passes of the gradient and weight buffers per iteration, by ZeRO stage: an all-reduce is
    # two passes, a reduce-scatter or all-gather one. ZeRO 2 reduce-scatters every micro-batch;
    # ZeRO 3 also gathers the weights for every forward and backward pass (a recomputed forward
    # runs under the backward's gather, as FSDP wraps checkpointed blocks).
    stage = strategy.zero
    if stage >= 2 and strategy.zero_schedule == "step":
        stage = 1  # once per step: ZeRO-2/3 communicate like ZeRO-1
    grad_passes, weight_passes = {
        0: (2.0, 0.0),
        1: (1.0, 1.0),
        2: (m, 1.0),
        3: (m, m * 2.0),
    }[stage]

    # every stage with its own layers; first and last stage hold the vocabulary matrix
    stage_layers = [int(layers_of_stage(model, s, i)) for i in range(pp)]
    assert sum(stage_layers) == model.layers

    def dp_one_group(embedding: bool, layers: int) -> float:
        n = np.asarray(float(layers))
        grad = float(comm.dp_gradient_bytes(model, s, embedding, n))
        weights = float(comm.dp_weight_gather_bytes(model, s, embedding, n))
        return (dp - 1) * (grad_passes * grad + weight_passes * weights)

    dp_stages = sum(dp_one_group(i in (0, pp - 1), n) for i, n in enumerate(stage_layers))
    embed = tp * dp * 2 * (2 - 1) * float(comm.embedding_gradient_bytes(model, s))
    ep = strategy.ep

    def edp_one(layers: int) -> float:
        n = np.asarray(float(layers))
        expert = float(comm.dp_expert_gradient_bytes(model, s, n))
        expert_weights = float(comm.dp_expert_weight_gather_bytes(model, s, n))
        return (edp - 1) * (grad_passes * expert + weight_passes * expert_weights)

    # the expert grid: etp × ep × edp fills the tp·dp·cp ranks of a stage
    edp = tp * dp // (int(s.etp) * ep)
    expert_dp = tp * dp // edp * sum(edp_one(n) for n in stage_layers)  # etp·ep groups a stage
    a2a = comm.ep_all_to_alls_per_moe_layer(s)
    per_layer = float(a2a["forward"] + a2a["recompute"] + a2a["backward"])
    ep_total = (
        tp
        * pp
        * (dp // ep)
        * ep
        * (ep - 1)  # ordered pairs of all EP groups
        * float(comm.ep_pair_bytes(model, s))
        * (model.moe_layers / pp)
        * m
        * per_layer
    )
    steps = comm.cp_steps_per_layer(s)
    sends = float(steps["forward"] + steps["recompute"] + steps["backward"])
    rings = tp * strategy.dp * pp  # cp ranks each, every one sending to its successor
    cp_total = rings * cp * (model.layers / pp) * m * sends * float(comm.cp_block_bytes(model, s))
    return {
        "tp": tp_total,
        "pp": pp_total,
        "dp": tp * dp_stages + embed + expert_dp,
        "ep": ep_total,
        "cp": cp_total if cp > 1 else 0.0,
    }


strategy_st: st.SearchStrategy[dict[str, Any]] = st.builds(
    dict,
    tp=st.sampled_from([1, 2, 4, 8]),
    pp=st.sampled_from([1, 2, 3, 4, 5, 7]),  # 5 and 7 do not divide the 12 layers
    dp=st.integers(1, 6),
    interleave=st.sampled_from([1, 2]),
    micro_batch=st.sampled_from([1, 2]),
    batch_per_replica=st.sampled_from([4, 8, 12]),
    recompute=st.sampled_from(["none", "selective", "full"]),
    sequence_parallel=st.booleans(),
    zero=st.sampled_from([0, 1, 2, 3]),
    grad_reduce_bytes=st.sampled_from([2, 4]),
    cp=st.sampled_from([1, 2, 4]),
    zero_schedule=st.sampled_from(["micro_batch", "step"]),
    first_stage_layers=st.sampled_from([0, 0, 1, 2, 5]),
    last_stage_layers=st.sampled_from([0, 0, 1, 3]),
)


@settings(max_examples=80, deadline=None)
@given(
    cfg=strategy_st,
    k=st.sampled_from([1, 2, 4, 8, 16]),
    order=st.permutations(["tp", "cp", "dp", "pp"]),
    tied=st.booleans(),
)
def test_conservation(cfg: dict[str, Any], k: int, order: list[str], tied: bool) -> None:
    """Every kind, with context parallelism, ZeRO-2/3 under pipelines and both ZeRO
    schedules, moves exactly the bytes comm's sizes and counts say."""
    model = TINY if tied else UNTIED
    per_replica = int(cfg.pop("batch_per_replica"))
    strategy = Strategy.model_validate(cfg | {"global_batch": per_replica * int(cfg["dp"])})
    assume(bool(valid_mask(model, from_strategies(strategy))))
    if strategy.cp == 1:
        order = [o for o in order if o != "cp"]
    p = place(strategy.tp, strategy.pp, strategy.dp, k, tuple(order), strategy.cp)
    t = traffic(model, strategy, p)
    st_ = stats(t)
    want = analytical(model, strategy)
    for kind in KINDS:
        assert st_.bytes_by_kind[kind] == pytest.approx(want[kind], rel=1e-9, abs=1e-6)
    assert st_.hb_bytes + st_.nic_bytes == pytest.approx(st_.total_bytes)
    assert np.all(t.src != t.dst)
    # the per-kind sparse matrices hold the same bytes
    assert t.matrix().sum() == pytest.approx(st_.total_bytes)
    assert t.matrix("tp").sum() == pytest.approx(want["tp"], abs=1e-6)
    # TP stays inside HB domains when tp divides K and TP is the fastest dimension
    if order[0] == "tp" and k % strategy.tp == 0:
        assert st_.nic_bytes_by_kind["tp"] == 0.0
    # Megatron-style alignment: no cross-rail bytes
    if (
        order in (["tp", "dp", "pp"], ["tp", "cp", "dp", "pp"])
        and k % strategy.tp == 0
        and (strategy.tp * strategy.cp * strategy.dp) % k == 0
        and (strategy.tp * strategy.cp) % k in (0, strategy.tp * strategy.cp)
        # the cp ring (tp apart) stays in a domain, or every send keeps its rail
        and (strategy.cp == 1 or strategy.tp * strategy.cp <= k or strategy.tp % k == 0)
    ):
        assert st_.nic_cross_rail_bytes == 0.0


MOE = Model(
    name="tiny-moe",
    hidden=128,
    layers=8,
    heads=4,
    seq=64,
    vocab=500,
    experts=8,
    moe_layer_interval=2,
)


@settings(max_examples=40, deadline=None)
@given(
    tp=st.sampled_from([1, 2]),
    pp=st.sampled_from([1, 2, 3]),
    ep_dp=st.sampled_from([(1, 2), (2, 2), (2, 4), (4, 4), (8, 8), (4, 8)]),
    recompute=st.sampled_from(["none", "full"]),
    zero=st.sampled_from([0, 1, 2, 3]),
    k=st.sampled_from([2, 4, 8]),
    etp=st.sampled_from([0, 1]),
)
def test_conservation_moe(
    tp: int, pp: int, ep_dp: tuple[int, int], recompute: str, zero: int, k: int, etp: int
) -> None:
    ep, dp = ep_dp
    strategy = Strategy(
        tp=tp,
        pp=pp,
        dp=dp,
        ep=ep,
        global_batch=2 * dp,
        recompute=recompute,
        zero=zero,
        sequence_parallel=tp > 1,  # MoE with tp > 1 runs it (Megatron-Core refuses otherwise)
        expert_tp=etp,
    )
    t = traffic(MOE, strategy, place(tp, pp, dp, k))
    r = stats(t)
    want = analytical(MOE, strategy)
    for kind in KINDS:
        assert r.bytes_by_kind[kind] == pytest.approx(want[kind], rel=1e-9, abs=1e-6)
    assert (r.bytes_by_kind["ep"] > 0) == (ep > 1)


def test_recompute_adds_two_all_reduces() -> None:
    base = {"tp": 4, "pp": 2, "dp": 2, "global_batch": 8}
    p = place(4, 2, 2, 8)
    none = stats(traffic(TINY, Strategy(**base), p)).bytes_by_kind["tp"]
    full = stats(traffic(TINY, Strategy(**base, recompute="full"), p)).bytes_by_kind["tp"]
    assert full == pytest.approx(none * 6 / 4)
    assert FULL == 2


def test_rail_aligned_has_no_cross_rail_bytes() -> None:
    s = Strategy(tp=2, pp=4, dp=2, global_batch=8)
    megatron = stats(traffic(TINY, s, place(2, 4, 2, 8)))
    aligned = stats(traffic(TINY, s, rail_aligned(2, 4, 2, 8)))
    assert megatron.nic_cross_rail_bytes > 0
    assert aligned.nic_cross_rail_bytes == 0.0
    assert aligned.total_bytes == pytest.approx(megatron.total_bytes)


def test_stats_small_case_by_hand() -> None:
    # tp=2 (ring of 2), dp=2 across two domains of K=2; no PP: 4 GPUs, 6 unordered pairs.
    s = Strategy(tp=2, pp=1, dp=2, global_batch=2)
    t = traffic(TINY, s, place(2, 1, 2, 2))
    r = stats(t)
    assert r.pairs_total == 6
    # TP pairs {0,1}, {2,3}; DP pairs {0,2}, {1,3}
    assert r.pairs_with_traffic == 4
    assert r.pairs_with_tp_fraction == pytest.approx(2 / 6)
    assert r.bytes_by_kind["pp"] == 0.0 and r.bytes_by_kind["ep"] == 0.0
    assert r.hb_bytes == pytest.approx(r.bytes_by_kind["tp"])
    assert r.nic_bytes == pytest.approx(r.bytes_by_kind["dp"])
    assert r.nic_cross_rail_bytes == 0.0
    # each TP pair: both directions, half the TP bytes of its group
    assert r.max_pair_bytes_hb == pytest.approx(r.bytes_by_kind["tp"] / 2)
    assert r.max_pair_bytes_nic == pytest.approx(r.bytes_by_kind["dp"] / 2)
    assert r.mean_pair_bytes_hb == pytest.approx(r.hb_bytes / 2)
    assert sum(r.share_by_kind.values()) == pytest.approx(1.0)


def test_dense_and_columns() -> None:
    s = Strategy(tp=2, pp=2, dp=2, global_batch=4)
    t = traffic(TINY, s, place(2, 2, 2, 4))
    d = t.dense(4)
    assert d.shape == (4, 4) and d[0, 1] > 0 and d[0, 2] > 0 and d[0, 3] == 0
    cols = to_columns(t)
    assert set(cols) == {"src", "dst", "kind", "bytes"}
    assert set(cols["kind"]) <= set(KINDS)
    with pytest.raises(RailplanError, match=r"^kind: "):
        t.matrix("zz")


def test_errors() -> None:
    s = Strategy(tp=2, pp=1, dp=2, global_batch=4)
    with pytest.raises(RailplanError, match=r"^gpus: "):
        traffic(TINY, s, place(2, 1, 4, 8))
    with pytest.raises(RailplanError, match=r"^tp: "):
        traffic(TINY, Strategy(tp=3, dp=1, global_batch=4), place(3, 1, 1, 8))
    with pytest.raises(RailplanError, match=r"^placement: "):
        traffic(TINY, s, place(1, 1, 4, 8))


def test_gpt_1t_megatron_fig3_shape() -> None:
    m = load_model("gpt-1t")
    s = Strategy(tp=8, pp=64, dp=6, global_batch=3072, recompute="full", grad_reduce_bytes=2)
    r = stats(traffic(m, s, place(8, 64, 6, 8)))
    assert r.nic_cross_rail_bytes == 0.0
    assert r.nic_bytes_by_kind["tp"] == 0.0
    assert r.hb_bytes_by_kind["pp"] == 0.0 and r.hb_bytes_by_kind["dp"] == 0.0
    assert r.share_by_kind["tp"] > 0.75
