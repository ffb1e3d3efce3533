"""Expert tensor parallelism (`Strategy.expert_tp`, Megatron-Core --expert-tensor-parallel-size).

The stage's tp·cp·dp ranks form the expert grid etp × ep × expert-dp, etp fastest: ep ranks are
etp apart, expert weights are split over etp and data-parallel over tp·cp·dp/(etp·ep) ranks.
After the all-to-all the alltoall dispatcher all-gathers the dispatched slots over the etp
ranks and reduce-scatters the experts' output; at etp 1 there is none of that."""

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from railplan.errors import RailplanError
from railplan.explore.search import SearchSpace, candidate_rows, search
from railplan.perf.iteration import iteration
from railplan.perf.layout import megatron_shapes
from railplan.specs import Job, Network, Strategy, load_model, load_system
from railplan.specs.arrays import check, from_strategies
from railplan.traffic.matrix import KIND_CODE, traffic
from railplan.traffic.placement import expert_groups, place
from railplan.workload import comm
from railplan.workload.memory import expert_stage_params, layer_activation_bytes
from railplan.workload.routing import slot_factor
from tests.conftest import Cli
from tests.perf.batch_check import batch_equals_each_alone, checked
from tests.perf.properties import (
    ARCHS,
    BANDWIDTH_FIELDS,
    FACTORS,
    check_more_bandwidth_never_slower,
    check_network_order,
)

MOE = load_model("mixtral-8x7b")  # 8 experts, top 2, 32 layers, all MoE
DENSE = load_model("llama-3.1-8b")
SYSTEM = load_system("dgx-h100")


def _s(model=MOE, **fields):  # type: ignore[no-untyped-def]
    return checked(model, **fields)


def test_default_is_tp() -> None:
    """expert_tp 0 (the default) and expert_tp = tp are the same strategy, to the bit."""
    base = {"tp": 2, "dp": 8, "ep": 4, "global_batch": 32, "sequence_parallel": True, "zero": 1}
    a, b = _s(**base), _s(**base, expert_tp=2)
    ia = iteration(MOE, SYSTEM, Network(), a)
    ib = iteration(MOE, SYSTEM, Network(), b)
    assert float(ia.iteration_s) == float(ib.iteration_s)
    assert float(ia.memory.total_bytes) == float(ib.memory.total_bytes)
    assert Strategy(**base, expert_tp=2).label() == Strategy(**base).label()
    assert "etp=1" in Strategy(**base, expert_tp=1).label()


def test_grid_by_hand() -> None:
    """tp 2, dp 8 on 16 GPUs: etp 1, ep 8 takes the 8 consecutive GPUs of one server; the
    default etp 2 with ep 4 takes every other GPU of two servers (Megatron-Core's order)."""
    p = place(2, 1, 8, 8)
    ep_groups, edp_groups, etp_groups = expert_groups(p, 8, 1)
    assert sorted(ep_groups[0].tolist()) == list(range(8))
    assert edp_groups.shape == (8, 2) and sorted(edp_groups[0].tolist()) == [0, 8]
    assert etp_groups.shape == (16, 1)
    ep_groups, edp_groups, etp_groups = expert_groups(p, 4)
    assert sorted(ep_groups[0].tolist()) == [0, 2, 4, 6]
    assert edp_groups.shape == (8, 2) and sorted(edp_groups[0].tolist()) == [0, 8]
    assert sorted(etp_groups[0].tolist()) == [0, 1]
    shapes = megatron_shapes(2, 8, 1, 8, 8, etp=1)
    assert float(shapes["ep"].domains) == 1 and float(shapes["ep"].x) == 8
    assert float(megatron_shapes(2, 8, 1, 8, 8)["ep"].domains) == 2  # etp = tp: 16 GPUs apart


def test_rules() -> None:
    sp = {"sequence_parallel": True}
    with pytest.raises(RailplanError, match="expert_tp must divide tp"):
        _s(tp=4, dp=4, ep=2, global_batch=8, expert_tp=3, **sp)
    with pytest.raises(RailplanError, match="expert_tp must divide tp"):
        _s(tp=2, dp=4, ep=2, global_batch=8, expert_tp=4, **sp)
    with pytest.raises(RailplanError, match="needs an MoE model"):
        _s(DENSE, tp=2, dp=4, global_batch=8, expert_tp=1)
    # ep 8 with etp 2 needs 16 ranks per stage; with etp 1, 8 are enough
    with pytest.raises(RailplanError, match="ep·expert_tp must divide tp·cp·dp"):
        _s(tp=2, dp=4, ep=8, global_batch=8, **sp)
    _s(tp=2, dp=4, ep=8, global_batch=8, expert_tp=1, **sp)
    # Megatron-Core's MoE layer refuses tp > 1 without sequence parallelism in training
    with pytest.raises(RailplanError, match="sequence_parallel"):
        _s(tp=2, dp=4, ep=2, global_batch=8)
    _s(DENSE, tp=2, dp=4, global_batch=8)
    with pytest.raises(RailplanError, match="expert_tp"):
        expert_groups(place(4, 1, 2, 8), 2, 3)


def test_memory_by_hand() -> None:
    """Expert weights ÷ etp; the routed copies the first grouped GEMM keeps: etp/tp of the tp
    group's slots with sequence parallelism (2 bytes per hidden element, h wide)."""
    base = {"tp": 2, "dp": 4, "ep": 2, "global_batch": 8, "sequence_parallel": True}
    whole, split = _s(**base, expert_tp=1), _s(**base)
    assert float(expert_stage_params(MOE, whole)) == pytest.approx(
        2 * float(expert_stage_params(MOE, split))
    )
    want = MOE.experts / 2 * MOE.expert_params() * MOE.layers  # experts/ep whole, every layer
    assert float(expert_stage_params(MOE, whole)) == pytest.approx(want)
    slots = MOE.top_k * float(slot_factor(MOE, 2))
    sbh = MOE.seq * 1 * MOE.hidden
    # etp = tp keeps all of the tp group's slot copies, etp 1 half of them
    diff = float(layer_activation_bytes(MOE, split) - layer_activation_bytes(MOE, whole))
    assert diff == pytest.approx(slots * 2.0 * sbh * (1 - 1 / 2))


def test_expert_collectives_by_hand() -> None:
    """The dispatched slots' all-gather: top_k·slot_factor·etp/tp of the b·s/cp tokens, h bf16
    values; one pair per pass (forward, backward, and the recompute of the MoE block), none at
    etp 1; the MoE layer's tp group runs only attention's pair (Mixtral has no shared
    experts)."""
    s = _s(tp=4, dp=2, ep=2, global_batch=8, sequence_parallel=True, recompute="full")
    want = MOE.top_k * float(slot_factor(MOE, 2)) * MOE.seq * MOE.hidden * 2
    assert float(comm.expert_tp_message_bytes(MOE, s)) == pytest.approx(want)
    half = _s(tp=4, dp=2, ep=2, global_batch=8, sequence_parallel=True, expert_tp=2)
    assert float(comm.expert_tp_message_bytes(MOE, half)) == pytest.approx(want / 2)
    ops = comm.expert_tp_ops_per_moe_layer(s)
    assert [float(ops[k]) for k in ("forward", "recompute", "backward")] == [1, 1, 1]
    one = _s(tp=4, dp=2, ep=2, global_batch=8, sequence_parallel=True, expert_tp=1)
    assert all(float(v) == 0 for v in comm.expert_tp_ops_per_moe_layer(one).values())
    tp_ops = comm.tp_ops_per_layer(s, 1.0, 1.0, MOE.shared_experts)
    assert float(tp_ops["forward"]) == 1 and float(tp_ops["recompute"]) == 1
    dense = comm.tp_ops_per_layer(s)
    assert float(dense["forward"]) == 2 and float(dense["sp_regather"]) == 2
    shared = comm.tp_ops_per_layer(s, 1.0, 1.0, shared_experts=2)
    assert float(shared["forward"]) == 2


def test_traffic_equals_the_time_models_bytes() -> None:
    """tp-kind bytes with the default etp 2 minus those with etp 1 are exactly the expert
    pairs: per etp group, MoE layer and micro-batch, 2 ops × 2 gather passes × (2 − 1) × D."""
    base = {"tp": 2, "dp": 8, "ep": 2, "global_batch": 16, "sequence_parallel": True}
    p = place(2, 1, 8, 8)
    code = KIND_CODE["tp"]

    def tp_bytes(strategy: Strategy) -> float:
        t = traffic(MOE, strategy, p)
        return float(t.bytes[t.kind == code].sum())

    d = float(comm.expert_tp_message_bytes(MOE, _s(**base)))
    m = 16 // 8
    want = m * MOE.moe_layers * (16 // 2) * 2 * 2 * 1 * d
    got = tp_bytes(Strategy(**base)) - tp_bytes(Strategy(**base, expert_tp=1))
    assert got == pytest.approx(want, rel=1e-9)
    # etp 1, ep 8: the all-to-all stays inside each 8-GPU server
    t = traffic(MOE, Strategy(**base | {"ep": 8}, expert_tp=1), p)
    ep = t.kind == KIND_CODE["ep"]
    assert bool(np.all(t.src[ep] // 8 == t.dst[ep] // 8)) and bool(np.any(ep))


def test_whole_experts_in_one_server_beat_split_ones_across_two() -> None:
    """Mixtral on 16 H100, tp 2: ep 8 at etp 1 (one server, no slot all-gathers) is faster
    than ep 4 at etp 2 (two servers) on both networks, and rail-only loses nothing at etp 1."""
    base = {"tp": 2, "dp": 8, "global_batch": 16, "sequence_parallel": True, "zero": 1}
    for net in ("rail-optimized", "rail-only"):
        whole = iteration(MOE, SYSTEM, Network(architecture=net), _s(**base, ep=8, expert_tp=1))
        split = iteration(MOE, SYSTEM, Network(architecture=net), _s(**base, ep=4))
        assert float(whole.iteration_s) < float(split.iteration_s)
        assert float(whole.breakdown_s["tp_comm"]) < float(split.breakdown_s["tp_comm"])
    a = iteration(MOE, SYSTEM, Network(architecture="rail-only"), _s(**base, ep=8, expert_tp=1))
    b = iteration(MOE, SYSTEM, Network(), _s(**base, ep=8, expert_tp=1))
    assert float(a.iteration_s) == pytest.approx(float(b.iteration_s))


def test_search_tries_whole_experts() -> None:
    rows = candidate_rows(MOE, 8, 16, SearchSpace(tp=(2,), pp=(1,), cp=(1,)))
    pairs = set(zip(rows["expert_tp"].tolist(), rows["ep"].tolist(), strict=True))
    assert (1, 8) in pairs and (0, 4) in pairs and (0, 8) not in pairs and (2, 4) not in pairs
    plain = candidate_rows(MOE, 16, 16, SearchSpace(tp=(2,), pp=(1,), expert_tp=(0,)))
    assert set(plain["expert_tp"].tolist()) == {0}
    # a value equal to a row's tp is that row's default (0), kept once; rows it does not
    # divide are left out
    for asked, want in (((1,), {(1, 0), (2, 1), (4, 1)}), ((2,), {(2, 0), (4, 2)})):
        r = candidate_rows(MOE, 16, 16, SearchSpace(tp=(1, 2, 4), pp=(1,), expert_tp=asked))
        assert set(zip(r["tp"].tolist(), r["expert_tp"].tolist(), strict=True)) == want
    both = candidate_rows(MOE, 16, 16, SearchSpace(tp=(2,), pp=(1,), ep=(2,), expert_tp=(0, 2)))
    assert len(both["tp"]) == len(plain["tp"][plain["ep"] == 2])
    dense = candidate_rows(DENSE, 16, 16, SearchSpace(tp=(2,), pp=(1,)))
    assert set(dense["expert_tp"].tolist()) == {0}
    r = search(Job(MOE, SYSTEM, Network(), 16, 16), SearchSpace(tp=(2,), pp=(1,)), top=1)
    assert r.best is not None and r.best.strategy.expert_tp == 1
    with pytest.raises(RailplanError, match="expert_tp"):
        SearchSpace(expert_tp=())


def test_mixed_batches_equal_each_alone() -> None:
    items = [
        Strategy(tp=2, dp=8, ep=8, global_batch=16, sequence_parallel=True, expert_tp=1),
        Strategy(tp=2, dp=8, ep=4, global_batch=16, sequence_parallel=True),
        Strategy(tp=4, dp=4, ep=8, global_batch=16, sequence_parallel=True, expert_tp=2),
        Strategy(tp=4, dp=4, ep=8, global_batch=16, sequence_parallel=True, expert_tp=1),
    ]
    assert batch_equals_each_alone(MOE, items) == len(items)


@settings(max_examples=25, deadline=None)
@given(
    tp=st.sampled_from([2, 4]),
    etp=st.sampled_from([1, 2, 4]),
    ep=st.sampled_from([1, 2, 4, 8]),
    mb=st.sampled_from([1, 2]),
    field=BANDWIDTH_FIELDS,
    factor=FACTORS,
    arch=ARCHS,
)
def test_properties(
    tp: int, etp: int, ep: int, mb: int, field: str, factor: float, arch: str
) -> None:
    """Over expert_tp, tp and ep: more bandwidth is never slower, and ideal ≤ rail-optimized ≤
    rail-only."""
    assume(tp % etp == 0 and (32 * tp // 2) % (etp * ep) == 0)
    strategy = Strategy(
        tp=tp,
        dp=32 // tp,
        ep=ep,
        micro_batch=mb,
        global_batch=64,
        sequence_parallel=True,
        expert_tp=etp,
    )
    check(MOE, from_strategies(strategy))
    check_more_bandwidth_never_slower(MOE, SYSTEM, strategy, field, factor, arch)
    check_network_order(MOE, SYSTEM, strategy)


def test_cli(cli: Cli) -> None:
    args = ["--model", "mixtral-8x7b", "--system", "dgx-h100", "--gpus", "16", "--tp", "2"]
    args += ["--ep", "8", "--global-batch", "16", "--sequence-parallel"]
    out = cli.json("estimate", *args, "--expert-tp", "1")
    assert out["strategy"]["expert_tp"] == 1 and out["fits"] in (True, False)
    bad = cli("estimate", *args, "--expert-tp", "3")
    assert bad.exit_code == 2 and "expert_tp" in str(bad.exception)
    assert "\n" not in str(bad.exception)
    t = cli.json("traffic", *args, "--expert-tp", "1")
    assert t["strategy"]["expert_tp"] == 1
    fixed = ["--tp", "2", "--pp", "1", "--global-batch", "16", "--top", "1"]
    found = cli("search", *args[:6], *fixed, "--expert-tp", "0,1")
    assert found.exit_code == 0 and "etp=1" in found.output
    bad = cli("search", *args[:6], "--global-batch", "16", "--expert-tp", "x")
    assert bad.exit_code == 2 and "expert_tp" in str(bad.exception)
