"""Expert parallelism with context parallelism: the ep ranks are consecutive ranks of the dp·cp
data-parallel ones (Megatron-Core's expert rank grid folds them over cp and dp), and every rank
dispatches its b·s/cp tokens. With the same tokens per rank and the same consecutive ranks,
cp = c, dp = d moves exactly the expert bytes of cp = 1, dp = c·d on sequences c times
shorter."""

import numpy as np
import pytest

from railplan.errors import RailplanError
from railplan.explore.search import SearchSpace, candidate_rows
from railplan.perf.iteration import iteration
from railplan.specs import Network, Strategy, load_model, load_system
from railplan.traffic.matrix import KIND_CODE, traffic
from railplan.traffic.placement import expert_groups, place
from railplan.workload import comm
from railplan.workload.memory import expert_stage_params, memory
from tests.perf.batch_check import batch_equals_each_alone, checked

MOE = load_model("mixtral-8x7b")  # 8 experts, top 2, seq 4096 in the catalog
SHORT = MOE.model_copy(update={"seq": MOE.seq // 2})
SYSTEM = load_system("dgx-h100")


def _s(model=MOE, **fields):  # type: ignore[no-untyped-def]
    return checked(model, **fields)


def test_pair_bytes_by_hand() -> None:
    """tp 2, cp 2, ep 4: b·s/cp tokens × top-k slots, split over tp, h bf16 values, ÷ ep."""
    s = _s(tp=2, cp=2, dp=4, ep=4, global_batch=8, sequence_parallel=True)
    tokens = 1 * MOE.seq / 2
    want = tokens * MOE.top_k / 2 * MOE.hidden * 2 / 4
    assert float(comm.ep_pair_bytes(MOE, s)) == pytest.approx(want, rel=1e-3)


@pytest.mark.parametrize("net", ["rail-optimized", "rail-only"])
def test_same_expert_time_as_data_parallel_ranks_with_shorter_sequences(net: str) -> None:
    """cp 2 × dp 4 against dp 8 on half the sequence (the same m): ep_comm is equal."""
    a = _s(MOE, tp=2, cp=2, dp=4, ep=4, global_batch=16, sequence_parallel=True)
    b = _s(SHORT, tp=2, cp=1, dp=8, ep=4, global_batch=32, sequence_parallel=True)
    assert int(a.micro_batches) == int(b.micro_batches)
    ia = iteration(MOE, SYSTEM, Network(architecture=net), a)
    ib = iteration(SHORT, SYSTEM, Network(architecture=net), b)
    assert float(ia.breakdown_s["ep_comm"]) == pytest.approx(float(ib.breakdown_s["ep_comm"]))
    assert float(ia.breakdown_s["ep_comm"]) > 0


def test_traffic_is_the_same_pairs_and_bytes() -> None:
    sa = Strategy(tp=2, cp=2, dp=4, ep=4, global_batch=16, sequence_parallel=True)
    sb = Strategy(tp=2, cp=1, dp=8, ep=4, global_batch=32, sequence_parallel=True)
    ta = traffic(MOE, sa, place(2, 1, 4, 8, cp=2))
    tb = traffic(SHORT, sb, place(2, 1, 8, 8))
    code = KIND_CODE["ep"]

    def edges(t):  # type: ignore[no-untyped-def]
        keep = t.kind == code
        pairs = zip(t.src[keep].tolist(), t.dst[keep].tolist(), strict=True)
        return dict(zip(pairs, t.bytes[keep].tolist(), strict=True))

    ea, eb = edges(ta), edges(tb)
    assert ea.keys() == eb.keys() and len(ea) == 16 * 3  # 16 GPUs, 3 peers each
    assert all(ea[k] == pytest.approx(eb[k]) for k in ea)


def test_expert_groups_fold_over_cp() -> None:
    """tp 1, cp 2, dp 2, ep 4: one EP group of the four data-parallel ranks of the stage."""
    p = place(1, 1, 2, 8, cp=2)
    ep_groups, edp_groups, _ = expert_groups(p, 4)
    assert ep_groups.shape == (1, 4) and sorted(ep_groups[0].tolist()) == [0, 1, 2, 3]
    assert edp_groups.shape == (4, 1)
    with pytest.raises(RailplanError, match="must divide tp·cp·dp"):
        expert_groups(p, 3)


def test_expert_states_shard_over_dp_cp_over_ep() -> None:
    s = _s(tp=1, cp=2, dp=4, ep=4, global_batch=8, zero=1)
    experts = float(expert_stage_params(MOE, s))
    assert experts == pytest.approx(float(expert_stage_params(MOE, _s(dp=4, ep=4, global_batch=8))))
    no_zero = _s(tp=1, cp=2, dp=4, ep=4, global_batch=8)
    saved = float(memory(MOE, no_zero).optimizer_bytes) - float(memory(MOE, s).optimizer_bytes)
    dense = float(memory(MOE, no_zero).optimizer_bytes) / 12.0 - experts
    # ZeRO-1: 12 B of Adam state; dense over 8 ranks, experts over 8 / 4 = 2
    assert saved == pytest.approx(12.0 * (dense * (1 - 1 / 8) + experts * (1 - 1 / 2)))


def test_rule_and_search() -> None:
    with pytest.raises(RailplanError, match="ep must divide dp·cp"):
        _s(tp=1, cp=2, dp=2, ep=8, global_batch=8)
    rows = candidate_rows(MOE, 64, 64, SearchSpace(tp=(2,), pp=(1,)))
    both = (rows["cp"] > 1) & (rows["ep"] > 1)
    assert both.any()
    assert bool(np.all((rows["dp"] * rows["cp"]) % rows["ep"] == 0))
    # given the HB domain, ep > 1 pairs with cp > 1 only inside it, unless cp is fixed
    inside = candidate_rows(MOE, 64, 64, SearchSpace(tp=(2,), pp=(1,)), hb_domain=8)
    folded = (inside["cp"] > 1) & (inside["ep"] > 1)
    assert folded.any() and bool(np.all(inside["tp"][folded] * inside["cp"][folded] <= 8))
    assert set(inside["cp"][inside["ep"] == 1].tolist()) == set(rows["cp"].tolist())
    fixed = candidate_rows(MOE, 64, 64, SearchSpace(tp=(2,), pp=(1,), cp=(16,)), hb_domain=8)
    assert ((fixed["cp"] == 16) & (fixed["ep"] > 1)).any()


def test_mixed_batch_equals_each_alone() -> None:
    rng = np.random.default_rng(3)
    items = []
    for _ in range(60):
        cp = int(rng.choice([1, 2, 4]))
        dp = int(rng.choice([1, 2, 4]))
        ep = int(rng.choice([1, 2, 4, 8]))
        items.append(
            Strategy(
                tp=2,
                cp=cp,
                dp=dp,
                ep=ep,
                global_batch=dp * int(rng.integers(1, 3)),
                sequence_parallel=True,
                zero=int(rng.integers(0, 2)),
            )
        )
    assert batch_equals_each_alone(MOE, items) > 20


def test_oversubscription_slows_pipeline_sends_not_the_cp_ring() -> None:
    """Llama 3 70B, cp 16 over two servers' worth of ranks, pp 4 on 64 H100: an
    oversubscribed spine divides the pipeline's sends (spread traffic) but not the
    ring-attention sends, which go round the cp group's ring as a collective's ring does."""
    from railplan.perf.iteration import iteration
    from railplan.specs import Network, Strategy, load_model, load_system
    from railplan.specs.arrays import from_strategies

    m, sysm = load_model("llama-3-70b"), load_system("dgx-h100")
    s = from_strategies(Strategy(cp=16, pp=4, dp=1, global_batch=64, zero=1, recompute="full"))
    full = iteration(m, sysm, Network(), s).breakdown_s
    over = iteration(
        m, sysm, Network(architecture="oversubscribed", oversubscription=4.0), s
    ).breakdown_s
    assert float(over["cp_comm"]) == float(full["cp_comm"]) > 0.0
    assert float(over["pp_comm"]) > float(full["pp_comm"]) > 0.0
