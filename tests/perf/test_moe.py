"""MoE in the performance model and the all-to-all comparison (SYSTEM.md claim 3)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from railplan import Network, RailplanError, Strategy, estimate, load_model, load_system
from railplan.perf.alltoall import compare
from railplan.specs.arrays import from_strategies
from railplan.workload import comm
from railplan.workload.flops import model_flops
from railplan.workload.memory import expert_stage_params, stage_params

MOE = load_model("moe-1.3b")


@pytest.mark.parametrize(
    ("system", "paper_pct", "ours_pct"), [("dgx-a100", 8.2, 8.33), ("dgx-h100", 11.2, 11.11)]
)
def test_alltoall_slowdown_matches_paper(system: str, paper_pct: float, ours_pct: float) -> None:
    r = compare(load_system(system))
    assert r.gpus == 64
    assert 100 * r.slowdown == pytest.approx(ours_pct, abs=0.01)
    assert abs(100 * r.slowdown - paper_pct) < 0.15


def test_alltoall_hand_values() -> None:
    # DGX A100, 2 domains, D = 1 MB: rail-optimized max(7·D/300e9, 8·1·D/25e9);
    # rail-only 8·1·D/25e9 + 2·7·D/300e9.
    r = compare(load_system("dgx-a100"), gpus=16, pair_bytes=1e6)
    assert r.rail_optimized_s == pytest.approx(8e6 / 25e9)
    assert r.rail_only_s == pytest.approx(8e6 / 25e9 + 14e6 / 300e9)


def test_alltoall_errors() -> None:
    with pytest.raises(RailplanError, match="gpus"):
        compare(load_system("dgx-a100"), gpus=12)
    with pytest.raises(RailplanError, match="bytes_per_pair"):
        compare(load_system("dgx-a100"), pair_bytes=0)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0, 0.0, 1e-9, 1e308])
def test_alltoall_bytes_must_be_finite_and_sane(value: float) -> None:
    with pytest.raises(RailplanError, match=r"^bytes_per_pair: .*\[1, 1e\+15\] bytes"):
        compare(load_system("dgx-a100"), pair_bytes=value)


@pytest.mark.parametrize(
    ("flag", "value", "field"),
    [
        ("--bytes-per-pair", "nan", "bytes_per_pair"),
        ("--bytes-per-pair", "-inf", "bytes_per_pair"),
        ("--hb-tbps", "inf", "system.hb_tbps"),
        ("--nic-gbps", "1e-9", "system.nic_gbps"),
    ],
)
def test_alltoall_cli_rejects_non_finite(cli, flag: str, value: str, field: str) -> None:  # type: ignore[no-untyped-def]
    r = cli("alltoall", flag, value)
    assert r.exit_code == 2
    assert str(r.exception).startswith(f"{field}: must be a finite number in [")


def test_alltoall_cli(cli) -> None:  # type: ignore[no-untyped-def]
    out = cli.json("alltoall", "--system", "dgx-h100")
    assert {"rail_optimized_s", "rail_only_s", "slowdown"} <= set(out)
    assert out["rail_only_s"] > out["rail_optimized_s"]
    r = cli("alltoall", "--gpus", "12")
    assert r.exit_code == 2


def test_moe_parameters_shard_over_ep() -> None:
    one = from_strategies(Strategy(global_batch=128, dp=128, ep=1))
    full = from_strategies(Strategy(global_batch=128, dp=128, ep=128))
    assert float(stage_params(MOE, one)) == pytest.approx(MOE.params(), rel=1e-6)
    assert float(expert_stage_params(MOE, full)) == pytest.approx(
        float(expert_stage_params(MOE, one)) / 128
    )


def test_moe_flops_count_top_k_experts_only() -> None:
    dense = load_model("moe-1.3b").model_copy(update={"experts": 1, "moe_layer_interval": 1})
    # top-1 routing: an expert MLP costs what the dense MLP costs; the router adds 2·s·h·E.
    extra = 3 * MOE.moe_layers * 2 * MOE.seq * MOE.hidden * MOE.experts
    assert float(model_flops(MOE, 1)) == pytest.approx(float(model_flops(dense, 1)) + extra)


def test_ep_pair_bytes_hand() -> None:
    s = from_strategies(Strategy(global_batch=512, dp=128, ep=16, micro_batch=4))
    # 4 sequences × 2048 tokens × top-1 × capacity 1 × 2048 hidden × 2 B / 16 ranks
    assert float(comm.ep_pair_bytes(MOE, s)) == 4 * 2048 * 2048 * 2 / 16


def test_rail_only_costs_moe_a_little_and_only_in_ep() -> None:
    strat = Strategy(tp=1, pp=1, dp=128, ep=128, micro_batch=4, global_batch=512)
    ro = estimate(MOE, "dgx-a100", strat, Network(architecture="rail-optimized"))
    rl = estimate(MOE, "dgx-a100", strat, Network(architecture="rail-only"))
    ideal = estimate(MOE, "dgx-a100", strat, Network(architecture="ideal"))
    assert ideal.iteration_s < ro.iteration_s < rl.iteration_s
    diff = {k: rl.breakdown_s[k] - ro.breakdown_s[k] for k in ro.breakdown_s}
    assert diff["ep_comm"] > 0
    assert all(abs(v) < 1e-12 for k, v in diff.items() if k != "ep_comm")
    assert rl.iteration_s / ro.iteration_s - 1 < 0.05


def test_invalid_ep_is_a_clear_error() -> None:
    with pytest.raises(RailplanError, match=r"^ep: "):
        estimate("gpt-22b", "dgx-a100", Strategy(dp=8, ep=2, global_batch=8))
    with pytest.raises(RailplanError, match=r"^ep: .*divide dp"):
        estimate(MOE, "dgx-a100", Strategy(dp=8, ep=16, global_batch=8))


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128]), st.sampled_from([1, 2, 4]), st.floats(1.0, 2.0)
)
def test_more_ep_never_more_expert_memory(ep: int, mb: int, cf: float) -> None:
    m = MOE.model_copy(update={"capacity_factor": cf})
    small = from_strategies(Strategy(dp=128, ep=ep, micro_batch=mb, global_batch=128 * mb * 2))
    assert np.all(np.isfinite(comm.ep_pair_bytes(m, small)))
    if ep < 128:
        big = from_strategies(
            Strategy(dp=128, ep=ep * 2, micro_batch=mb, global_batch=128 * mb * 2)
        )
        assert float(expert_stage_params(m, big)) < float(expert_stage_params(m, small))


def test_reproduce_fig5(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = cli.json("reproduce", "fig5", "--heatmap", str(tmp_path / "fig5.png"))
    ep = out["share_by_kind"]["ep"]
    assert 0.2 < ep < 0.4  # paper ≈ 27 %
    assert out["pairs_with_traffic_fraction"] == 1.0  # uniform all-to-all reaches every pair
    assert out["iteration_s"]["ideal"] < out["iteration_s"]["rail-optimized"]
    assert 0 < out["rail_only_overhead"] < 0.05
    assert (tmp_path / "fig5.png").stat().st_size > 0


def test_routing_skew_only_slows_dropless_moe() -> None:
    from railplan.workload import routing

    uniform = MOE.model_copy(update={"drop_tokens": False})
    skewed = MOE.model_copy(update={"drop_tokens": False, "routing_zipf": 1.0})
    assert routing.max_rank_load(uniform, 16) == pytest.approx(1.0)

    # Zipf(1) over 128 experts, 16 ranks of 8 contiguous experts: the first block holds
    # H(8)/H(128) of the tokens.
    def h(n: int) -> float:
        return sum(1 / i for i in range(1, n + 1))

    assert routing.max_rank_load(skewed, 16) == pytest.approx(16 * h(8) / h(128))
    strat = Strategy(dp=128, ep=16, micro_batch=4, global_batch=512)
    t_uniform = estimate(uniform, "dgx-a100", strat).iteration_s
    t_skewed = estimate(skewed, "dgx-a100", strat).iteration_s
    assert t_skewed > t_uniform
    # capacity-based routing pads to capacity: skew drops tokens instead of adding time
    capped = MOE.model_copy(update={"routing_zipf": 1.0})
    assert estimate(capped, "dgx-a100", strat).iteration_s == pytest.approx(
        estimate(MOE, "dgx-a100", strat).iteration_s
    )
    assert routing.dropped_fraction(capped) > 0.3
    assert routing.dropped_fraction(MOE) == 0.0
