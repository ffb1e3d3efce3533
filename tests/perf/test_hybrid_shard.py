"""Hybrid sharding (`zero_shard` N: PyTorch FSDP HYBRID_SHARD, torchtitan's dp_shard ×
dp_replicate, Megatron-Core's `--num-distributed-optimizer-instances` dp·cp/N): ZeRO states are
sharded over groups of N consecutive data-parallel ranks and replicated dp·cp/N times; weights
are gathered within a shard group, gradients reduce-scattered within it and each shard then
all-reduced across the replicas."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from railplan.errors import RailplanError
from railplan.explore.search import SearchSpace, candidate_rows
from railplan.perf.collectives import NCCL_SIMPLE_BASE_US
from railplan.perf.comm_time import links
from railplan.perf.iteration import data_parallel, iteration
from railplan.perf.layout import megatron_shapes
from railplan.specs import Network, Strategy, load_model, load_system
from railplan.specs.arrays import check, from_strategies
from railplan.traffic.matrix import KIND_CODE, traffic
from railplan.traffic.placement import place
from railplan.workload import comm
from railplan.workload.memory import dense_stage_params, expert_stage_params, memory
from tests.conftest import Cli
from tests.perf.batch_check import batch_equals_each_alone
from tests.perf.properties import (
    ARCHS,
    BANDWIDTH_FIELDS,
    FACTORS,
    check_more_bandwidth_never_slower,
    check_network_order,
)

MODEL = load_model("llama-3.1-8b")
MOE = load_model("mixtral-8x7b")
SYSTEM = load_system("dgx-h100")  # K = 8


def _arrays(model=MODEL, **fields):  # type: ignore[no-untyped-def]
    s = from_strategies(Strategy(**fields))  # type: ignore[arg-type]
    check(model, s)
    return s


def test_states_are_sharded_over_the_shard_group_only() -> None:
    """Optimizer state (ZeRO-1), gradients (2) and weights (3) divide by N, not by dp."""
    for zero in (1, 2, 3):
        plain = memory(MODEL, _arrays(global_batch=64, dp=64, zero=zero))
        hybrid = memory(MODEL, _arrays(global_batch=64, dp=64, zero=zero, zero_shard=8))
        assert float(hybrid.optimizer_bytes) == pytest.approx(8.0 * float(plain.optimizer_bytes))
        grads, weights = (zero >= 2), (zero >= 3)
        assert float(hybrid.gradients_bytes) == pytest.approx(
            (8.0 if grads else 1.0) * float(plain.gradients_bytes)
        )
        assert float(hybrid.weights_bytes) == pytest.approx(
            (8.0 if weights else 1.0) * float(plain.weights_bytes)
        )
    # by hand: 12 B of Adam state per parameter over 8 ranks
    s = _arrays(global_batch=64, dp=64, zero=1, zero_shard=8)
    params = float(dense_stage_params(MODEL, s))
    assert float(memory(MODEL, s).optimizer_bytes) == pytest.approx(12.0 * params / 8)


def test_expert_states_divide_by_the_expert_ranks_over_the_replicas() -> None:
    """Mixtral, dp 32, ep 8: the expert data-parallel group of 4 ranks splits into replicas
    alike (dp·cp/N = 2 replicas of expert shard groups of 2)."""
    s = _arrays(MOE, global_batch=32, dp=32, ep=8, zero=1, zero_shard=16)
    assert int(s.replicas) == 2 and int(s.shard_ranks) == 16 and int(s.expert_shard_ranks) == 2
    dense, expert = float(dense_stage_params(MOE, s)), float(expert_stage_params(MOE, s))
    assert float(memory(MOE, s).optimizer_bytes) == pytest.approx(12.0 * (dense / 16 + expert / 2))


def test_shard_group_of_every_rank_is_plain_zero() -> None:
    """N = dp·cp: one replica, the same model as N = 0 (time, memory, traffic)."""
    net = Network()
    for zero in (1, 3):
        a = _arrays(global_batch=32, tp=2, dp=16, zero=zero)
        b = _arrays(global_batch=32, tp=2, dp=16, zero=zero, zero_shard=16)
        ia, ib = iteration(MODEL, SYSTEM, net, a), iteration(MODEL, SYSTEM, net, b)
        assert float(ia.iteration_s) == float(ib.iteration_s)
        assert float(ia.memory.total_bytes) == float(ib.memory.total_bytes)


def test_zero1_step_communication_by_hand() -> None:
    """tp 2, dp 16 on 8-GPU domains, ZeRO-1, N = 4: a shard group is 4 ranks 2 apart, inside
    one HB domain; its replicas are 4 ranks 8 apart, one per domain. Each bucket: ring
    reduce-scatter of G over NVLink, ring all-reduce of G/4 over the NICs, ring all-gather of
    the bf16 weights over NVLink."""
    s = _arrays(global_batch=32, tp=2, dp=16, zero=1, zero_shard=4)
    net = Network()
    lk = links(SYSTEM, net, np.asarray(float(s.gpus)))
    groups = megatron_shapes(s.tp, s.dp, s.pp, s.ep, lk.hb_domain, s.cp, s.replicas)
    assert float(groups["dp_shard"].domains) == 1.0 and float(groups["dp_shard"].x) == 4.0
    assert float(groups["dp_replica"].domains) == 4.0 and float(groups["dp_replica"].x) == 1.0
    most = np.asarray(32.0)
    d = data_parallel(MODEL, lk, s, groups, most)
    params = dense_stage_params(MODEL, s, True, most)
    n = float(comm.dp_collectives(s, params, s.grad_ranks.astype(float), most))
    g = float(comm.dp_gradient_bytes(MODEL, s, True, most)) / n
    w = float(comm.dp_weight_gather_bytes(MODEL, s, True, most)) / n
    hb, nic = lk.hb_bw, lk.nic_bw
    base = NCCL_SIMPLE_BASE_US * 1e-6  # NCCL's base latency, once per collective
    rs = base + 3 / 4 * g / hb + 3 * lk.hb_lat_s
    ar = base + 2 * (3 / 4 * (g / 4) / nic + 3 * lk.nic_lat_s)
    ag = base + 3 / 4 * w / hb + 3 * lk.hb_lat_s
    assert float(d.end_s) == pytest.approx(n * (rs + ar + ag))
    assert float(d.end_gather_s) == pytest.approx(n * ag)


def test_zero3_every_micro_batch_reduces_across_replicas() -> None:
    """ZeRO-3 (FSDP HYBRID_SHARD): each backward reduce-scatters in the shard group and
    all-reduces the shard across the replicas; the gathers stay in the shard group."""
    s = _arrays(global_batch=64, dp=64, zero=3, zero_shard=8)  # shard = one DGX
    lk = links(SYSTEM, Network(), np.asarray(64.0))
    groups = megatron_shapes(s.tp, s.dp, s.pp, s.ep, lk.hb_domain, s.cp, s.replicas)
    most = np.asarray(32.0)
    d = data_parallel(MODEL, lk, s, groups, most)
    layers = 32.0  # FSDP: one collective per transformer block
    g = float(comm.dp_gradient_bytes(MODEL, s, True, most)) / layers
    w = float(comm.dp_weight_gather_bytes(MODEL, s, True, most)) / layers
    base = NCCL_SIMPLE_BASE_US * 1e-6  # NCCL's base latency, once per collective
    gather = layers * (base + 7 / 8 * w / lk.hb_bw + 7 * lk.hb_lat_s)
    reduce = layers * (
        2 * base
        + 7 / 8 * g / lk.hb_bw
        + 7 * lk.hb_lat_s
        + 2 * (7 / 8 * (g / 8) / lk.nic_bw + 7 * lk.nic_lat_s)
    )
    assert float(d.micro_batch_forward_s) == pytest.approx(gather)
    assert float(d.micro_batch_backward_s) == pytest.approx(gather + reduce)
    assert float(d.end_s) == 0.0


def test_traffic_conserves_bytes_and_keeps_gathers_in_the_domain() -> None:
    """dp 16 (two DGX), ZeRO-3, N = 8: every weight gather and reduce-scatter is NVLink
    traffic; only the all-reduce of each rank's 1/8 of the gradients crosses the NICs. Bytes
    sent per GPU add up to the passes of `comm.dp_iteration_bytes`."""
    strat = Strategy(global_batch=16, dp=16, zero=3, zero_shard=8)
    s = from_strategies(strat)
    t = traffic(MODEL, strat, place(1, 1, 16, 8))
    dp_code = KIND_CODE["dp"]
    keep = t.kind == dp_code
    src, dst, b = t.src[keep], t.dst[keep], t.bytes[keep]
    cross = (src // 8) != (dst // 8)
    grad = comm.dp_gradient_bytes(MODEL, s, True, np.asarray(32.0))
    weights = comm.dp_weight_gather_bytes(MODEL, s, True, np.asarray(32.0))
    passes = comm.dp_iteration_bytes(s, grad, weights)
    # ring edges: each member sends (n−1)/n of a pass's buffer to its successor
    want_nic = 16 * 1 / 2 * float(passes["replica"])
    want_hb = 16 * 7 / 8 * float(passes["shard"])
    assert float(b[cross].sum()) == pytest.approx(want_nic)
    assert float(b[~cross].sum()) == pytest.approx(want_hb)
    # the replica all-reduce: twice the gradient shard (1/8) per micro-batch
    m = float(s.micro_batches)
    assert float(passes["replica"]) == pytest.approx(m * 2 * float(grad) / 8)


def test_less_memory_and_nic_traffic_move_with_the_shard_group() -> None:
    """A larger shard group holds less per GPU; without hybrid sharding no replica bytes."""
    mems = [
        float(memory(MODEL, _arrays(global_batch=64, dp=64, zero=3, zero_shard=n)).total_bytes)
        for n in (2, 4, 8, 16, 32, 64)
    ]
    assert mems == sorted(mems, reverse=True)
    s = _arrays(global_batch=64, dp=64, zero=3)
    passes = comm.dp_iteration_bytes(s, np.asarray(1.0), np.asarray(1.0))
    assert float(passes["replica"]) == 0.0


@pytest.mark.parametrize(
    ("fields", "model", "message"),
    [
        ({"dp": 16, "zero": 1, "zero_shard": 3}, MODEL, "zero_shard must divide"),
        ({"dp": 16, "zero": 1, "zero_shard": 32}, MODEL, "zero_shard must divide"),
        ({"dp": 16, "zero": 0, "zero_shard": 8}, MODEL, "needs zero ≥ 1"),
        ({"dp": 32, "ep": 8, "zero": 1, "zero_shard": 4}, MOE, "expert data-parallel"),
    ],
)
def test_invalid_shards_are_one_line_errors(
    fields: dict[str, int], model: object, message: str
) -> None:
    s = from_strategies(Strategy(global_batch=32, **fields))  # type: ignore[arg-type]
    with pytest.raises(RailplanError, match=message):
        check(model, s)  # type: ignore[arg-type]


def test_cli_flag_and_its_error(cli: Cli) -> None:
    base = ["estimate", "--model", "llama-3.1-8b", "--system", "dgx-h100", "--gpus", "64"]
    base += ["--global-batch", "64", "--zero", "3", "--json"]
    ok = cli(*base, "--zero-shard", "8")
    assert ok.exit_code == 0, ok.output
    assert '"zero_shard": 8' in ok.output
    bad = cli(*base, "--zero-shard", "5")
    assert bad.exit_code == 2
    text = str(bad.exception)
    assert text.startswith("zero_shard: zero_shard must divide") and "\n" not in text


def test_search_tries_each_shard_where_it_applies() -> None:
    """`zero_shard` values join the ZeRO candidates whose dp·cp they split; ZeRO-0 candidates
    keep 0; with (0,) the space is what it was."""
    space = SearchSpace(zero_shard=(8,), tp=(1,), pp=(1,), cp=(1,))
    rows = candidate_rows(MODEL, 64, 64, space)
    z, n = rows["zero"], rows["zero_shard"]
    assert set(n[z == 0].tolist()) == {0} and set(n[z > 0].tolist()) == {8}
    plain = candidate_rows(MODEL, 64, 64, SearchSpace(tp=(1,), pp=(1,), cp=(1,)))
    assert set(plain["zero_shard"].tolist()) == {0}
    both = candidate_rows(MODEL, 64, 64, SearchSpace(zero_shard=(0, 8), tp=(1,), pp=(1,)))
    alone = candidate_rows(MODEL, 64, 64, SearchSpace(tp=(1,), pp=(1,)))
    assert len(both["zero"]) > len(alone["zero"])


hybrids = st.builds(
    lambda tp, dp, pp, zero, shard, sched, k: Strategy(
        tp=tp,
        dp=dp,
        pp=pp,
        global_batch=dp * pp * k,
        zero=zero,
        zero_shard=shard if dp % shard == 0 and shard < dp else 0,
        zero_schedule=sched,
        sequence_parallel=tp > 1,
    ),
    st.sampled_from([1, 2, 8]),
    st.sampled_from([4, 8, 16, 32]),
    st.sampled_from([1, 2]),
    st.sampled_from([1, 2, 3]),
    st.sampled_from([1, 2, 4, 8, 16]),
    st.sampled_from(["micro_batch", "step"]),
    st.integers(1, 3),
)


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(hybrids, BANDWIDTH_FIELDS, FACTORS, ARCHS)
def test_more_bandwidth_is_never_slower(
    strategy: Strategy, field: str, factor: float, arch: str
) -> None:
    check_more_bandwidth_never_slower(MODEL, SYSTEM, strategy, field, factor, arch)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(hybrids)
def test_network_order(strategy: Strategy) -> None:
    check_network_order(MODEL, SYSTEM, strategy)


@pytest.mark.parametrize("model", [MODEL, MOE], ids=["dense", "moe"])
def test_mixed_batch_equals_each_alone(model) -> None:  # type: ignore[no-untyped-def]
    """Batches mixing hybrid and plain sharding (dense and MoE with ep) equal each alone."""
    rng = np.random.default_rng(5)
    items = []
    for _ in range(120):
        dp = int(rng.choice([4, 8, 16]))
        ep = int(rng.choice([1, 2, 4])) if model.experts > 1 else 1
        zero = int(rng.integers(0, 4))
        shard = int(rng.choice([0, 1, 2, 4, 8])) if zero else 0
        items.append(
            Strategy(
                tp=2,
                dp=dp,
                ep=ep,
                global_batch=dp * int(rng.integers(1, 3)),
                zero=zero,
                zero_shard=shard,
                sequence_parallel=True,
            )
        )
    assert batch_equals_each_alone(model, items) > 40
