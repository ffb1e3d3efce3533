"""MoE in the performance model and the all-to-all comparison (SYSTEM.md claim 3)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from railplan import Network, RailplanError, Strategy, estimate, load_model, load_system
from railplan.perf.alltoall import compare
from railplan.perf.estimate import Estimate
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
    # latency rounds: direct, 7 peers over NVLink and 8 over the NIC; two-step, 7 HB rounds
    # and 1 rail round of aggregated messages
    system = load_system("dgx-a100")
    hb, nic = system.hb_latency_us * 1e-6, system.nic_latency_us * 1e-6
    assert r.direct_pairwise_latency_s == pytest.approx(7 * hb + 8 * nic)
    assert r.two_step_latency_s == pytest.approx(7 * hb + 1 * nic)
    one_domain = compare(system, gpus=8, pair_bytes=1e6)
    assert one_domain.direct_pairwise_latency_s == pytest.approx(one_domain.two_step_latency_s)


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


def _ep_run(overlap: bool, gb: int, **kw: object) -> Estimate:
    strat = Strategy(tp=1, dp=128, ep=128, micro_batch=4, global_batch=gb, overlap_ep=overlap, **kw)
    return estimate(MOE, "dgx-a100", strat, Network(architecture="rail-only"))


@pytest.mark.parametrize("gb", [1024, 4096])
def test_overlap_ep_hides_all_to_alls_of_merged_passes_only(gb: int) -> None:
    """Without a pipeline the combined 1F1B merges m − 1 of the m micro-batches: each merged
    layer exposes `hidden_cost_s` of its all-to-alls (here the compute covers them: u·comm),
    the lone first forward and last backward all of it. Nothing else in the breakdown moves."""
    from railplan.perf.comm_time import hidden_cost_s

    off, on = _ep_run(False, gb), _ep_run(True, gb)
    m = gb // (128 * 4)
    per_mb = off.breakdown_s["ep_comm"] / m
    u = load_system("dgx-a100").comm_sm_fraction
    compute = off.breakdown_s["compute"] / m  # no logits-only stage here: pp = 1
    hidden = float(hidden_cost_s(np.asarray(per_mb), np.asarray(compute), u))
    assert hidden < per_mb
    want = per_mb + (m - 1) * hidden
    assert on.breakdown_s["ep_comm"] == pytest.approx(want, rel=0.02)
    assert on.iteration_s < off.iteration_s
    for k in off.breakdown_s:
        if k not in ("ep_comm", "dp_comm_exposed"):
            assert on.breakdown_s[k] == pytest.approx(off.breakdown_s[k])


def test_overlap_ep_memory_keeps_one_more_micro_batch() -> None:
    """pp = 1: two micro-batches alive at once; interleaved: one more warm-up chunk."""
    off, on = _ep_run(False, 1024), _ep_run(True, 1024)
    acts = "activations"
    assert on.memory_breakdown_gib[acts] > off.memory_breakdown_gib[acts]
    one = from_strategies(Strategy(dp=128, ep=128, micro_batch=4, global_batch=512))
    # m = 1: nothing to merge, nothing more kept, nothing hidden
    lone_off, lone_on = _ep_run(False, 512), _ep_run(True, 512)
    assert int(one.micro_batches) == 1
    assert lone_on.iteration_s == pytest.approx(lone_off.iteration_s)
    assert lone_on.memory_breakdown_gib[acts] == pytest.approx(lone_off.memory_breakdown_gib[acts])


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"ep": 1}, "overlap_ep needs ep > 1"),
        ({"pp": 2, "dp": 64, "ep": 64}, "needs interleave > 1"),
        ({"recompute": "full"}, "recompute none or selective"),
    ],
)
def test_overlap_ep_refuses_what_megatron_refuses(kw: dict[str, object], message: str) -> None:
    base: dict[str, object] = {"dp": 128, "ep": 128, "micro_batch": 4, "global_batch": 1024}
    strat = Strategy(**(base | kw), overlap_ep=True)  # type: ignore[arg-type]
    with pytest.raises(RailplanError, match=rf"^overlap_ep: .*{message}"):
        estimate(MOE, "dgx-a100", strat)


def test_overlap_ep_cli(cli) -> None:  # type: ignore[no-untyped-def]
    base = ("estimate", "--model", "moe-1.3b", "--system", "dgx-a100", "--gpus", "128")
    base += ("--micro-batch", "4", "--global-batch", "1024")
    args = (*base, "--ep", "128")
    on = cli.json(*args, "--overlap-ep")
    off = cli.json(*args)
    assert on["strategy"]["overlap_ep"] is True and off["strategy"]["overlap_ep"] is False
    assert on["breakdown_s"]["ep_comm"] < off["breakdown_s"]["ep_comm"]
    bad = cli(*base, "--overlap-ep")
    assert bad.exit_code == 2
    assert str(bad.exception).startswith("overlap_ep: overlap_ep needs ep > 1")


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from([(1, 1), (2, 2), (2, 3), (4, 2), (4, 3)]),
    st.integers(1, 8),
    st.sampled_from(["rail-only", "rail-optimized", "ideal"]),
)
def test_overlap_ep_never_slower(pp_v: tuple[int, int], groups: int, arch: str) -> None:
    """Hiding all-to-alls never costs time: the merged passes expose at most what they send."""
    pp, v = pp_v
    dp = 128 // pp
    gb = dp * 2 * pp * groups
    times = [
        estimate(
            MOE,
            "dgx-a100",
            Strategy(
                pp=pp, dp=dp, ep=dp, interleave=v, micro_batch=2, global_batch=gb, overlap_ep=o
            ),
            Network(architecture=arch),  # type: ignore[arg-type]
        ).iteration_s
        for o in (False, True)
    ]
    assert times[1] <= times[0] * (1 + 1e-12)
