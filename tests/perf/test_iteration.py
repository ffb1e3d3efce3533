"""Iteration model: properties (monotone in bandwidth), scalar = vectorized, breakdown sums."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from railplan.perf.estimate import estimate
from railplan.perf.iteration import iteration
from railplan.specs import Network, Strategy, System, load_model, load_system
from railplan.specs.arrays import from_strategies, valid_mask
from tests.perf.batch_check import batch_equals_each_alone

MODEL = load_model("gpt-39b")


def _system(base: str = "dgx-a100", **over: float) -> System:
    return System.parse(load_system(base).model_dump() | over, "system")


strategies_ = st.builds(
    lambda tp, pp, dp, mb, rc, sp, z, ov: Strategy(
        tp=tp,
        pp=pp,
        dp=dp,
        micro_batch=mb,
        global_batch=dp * mb * 8,
        recompute=rc,
        sequence_parallel=sp,
        zero=z if pp == 1 else min(z, 1),
        overlap_dp=ov,
    ),
    st.sampled_from([1, 2, 4, 8, 16]),
    st.sampled_from([1, 2, 4, 8]),
    st.sampled_from([1, 2, 8, 32]),
    st.sampled_from([1, 2, 4]),
    st.sampled_from(["none", "selective", "full"]),
    st.booleans(),
    st.integers(0, 3),
    st.booleans(),
)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    strategies_,
    st.sampled_from(["hb_tbps", "nic_gbps", "nics_per_gpu"]),
    st.floats(1.01, 8.0),
    st.sampled_from(["rail-optimized", "rail-only", "oversubscribed"]),
)
def test_more_bandwidth_is_never_slower(
    strategy: Strategy, field: str, factor: float, arch: str
) -> None:
    base = load_system("dgx-a100")
    faster = _system(**{field: getattr(base, field) * factor})
    net = Network(architecture=arch, oversubscription=2.0 if arch == "oversubscribed" else 1.0)
    s = from_strategies(strategy)
    slow = iteration(MODEL, base, net, s).iteration_s
    fast = iteration(MODEL, faster, net, s).iteration_s
    assert float(fast) <= float(slow) * (1 + 1e-12)


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(strategies_)
def test_network_order_ideal_le_rail_optimized_le_oversubscribed(strategy: Strategy) -> None:
    s = from_strategies(strategy)
    sy = load_system("dgx-a100")
    t = {
        a: float(iteration(MODEL, sy, Network(architecture=a), s).iteration_s)
        for a in ("ideal", "rail-optimized", "rail-only")
    }
    over = float(
        iteration(
            MODEL, sy, Network(architecture="oversubscribed", oversubscription=4), s
        ).iteration_s
    )
    assert t["ideal"] <= t["rail-optimized"] * (1 + 1e-12)
    assert t["rail-optimized"] <= t["rail-only"] * (1 + 1e-12)
    assert t["rail-optimized"] <= over * (1 + 1e-12)


def test_vectorized_equals_scalar() -> None:
    rng = np.random.default_rng(7)
    items = []
    for _ in range(300):
        tp, pp = int(rng.choice([1, 2, 4, 8])), int(rng.choice([1, 2, 4, 8, 16]))
        dp, mb = int(rng.choice([1, 2, 4, 16])), int(rng.choice([1, 2, 4]))
        items.append(
            Strategy(
                tp=tp,
                pp=pp,
                dp=dp,
                micro_batch=mb,
                global_batch=dp * mb * 16,
                interleave=int(rng.choice([1, 2])) if pp > 1 else 1,
                recompute=str(rng.choice(["none", "selective", "full"])),
                sequence_parallel=bool(rng.integers(2)),
                zero=int(rng.integers(2)),
            )
        )
    assert batch_equals_each_alone(MODEL, items) > 100


def test_breakdown_sums_and_shares() -> None:
    e = estimate(
        "gpt-175b",
        "dgx-a100",
        Strategy(
            tp=8,
            pp=8,
            dp=4,
            interleave=3,
            global_batch=256,
            recompute="selective",
            sequence_parallel=True,
        ),
    )
    assert sum(e.breakdown_s.values()) == pytest.approx(e.iteration_s)
    assert e.fits
    # Bubble of the interleaved schedule: (p−1)/v of one stage pass vs m passes.
    b = e.breakdown_s
    steady = e.iteration_s - b["pipeline_bubble"] - b["dp_comm_exposed"] - b["optimizer"]
    m = 256 // 4
    assert b["pipeline_bubble"] / steady == pytest.approx((8 - 1) / 3 / m, rel=0.15)


def test_bigger_hb_domain_helps_cross_node_tensor_parallelism() -> None:
    strat = Strategy(
        tp=16, pp=1, dp=1, global_batch=4, recompute="selective", sequence_parallel=True
    )
    k8 = estimate(MODEL, "dgx-h100", strat)
    k16 = estimate(MODEL, _system("dgx-h100", hb_domain=16), strat)
    assert k16.iteration_s < k8.iteration_s
    # Hierarchical across 2 domains: rail phase D/16 over the NIC + 7/8·D over NVLink (formula 2)
    assert k16.breakdown_s["tp_comm"] < k8.breakdown_s["tp_comm"]


def test_korthikanti_22b_layer_within_fifteen_percent() -> None:
    # Guards the per-layer model against regressions; docs/validation.md explains the gap.
    from railplan.reproduce.validation import layer_rows

    for r in layer_rows():
        assert r["predicted_forward_ms"] == pytest.approx(r["measured_forward_ms"], rel=0.15)
        assert r["predicted_backward_ms"] == pytest.approx(r["measured_backward_ms"], rel=0.2)


def test_unfused_gradient_accumulation_costs_one_pass_per_micro_batch() -> None:
    # pp = 1 (no bubble): the difference is exactly m passes over the gradient buffer, each
    # reading the bf16 GEMM output and the fp32 main grad and writing the main grad (10 B per
    # parameter), plus 12 kernel launches per layer.
    from railplan.workload.memory import stage_params

    system = load_system("dgx-a100")
    gpu = system.gpu
    base = dict(tp=8, pp=1, dp=1, micro_batch=1, global_batch=6, grad_reduce_bytes=4)
    fused = estimate(MODEL, system, Strategy(**base))
    unfused = estimate(MODEL, system, Strategy(**base, grad_accumulation_fusion=False))
    params = float(stage_params(MODEL, from_strategies(Strategy(**base))))
    one_pass_s = params * (2 + 2 * 4) / (gpu.memory_tbps * 1e12 * gpu.memory_efficiency) + (
        12 * MODEL.layers * gpu.kernel_overhead_us * 1e-6
    )
    assert unfused.iteration_s - fused.iteration_s == pytest.approx(6 * one_pass_s, rel=1e-9)
    assert unfused.breakdown_s["grad_accumulation"] == pytest.approx(6 * one_pass_s, rel=1e-9)
    assert fused.breakdown_s["grad_accumulation"] == 0.0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(s=strategies_)
def test_unfused_gradient_accumulation_is_never_faster(s: Strategy) -> None:
    a = from_strategies(s)
    if not bool(valid_mask(MODEL, a)):
        return
    system = load_system("dgx-a100")
    fused = iteration(MODEL, system, Network(), a).iteration_s
    slow = s.model_copy(update={"grad_accumulation_fusion": False})
    unfused = iteration(MODEL, system, Network(), from_strategies(slow)).iteration_s
    assert float(unfused) > float(fused)


def test_dense_model_pays_no_expert_collective() -> None:
    # A dense model has no expert gradients: the data-parallel time is exactly one ring
    # all-reduce of the stage's gradients (8 ranks in one DGX, NCCL's base latency once), with
    # no phantom latency term.
    from railplan.perf import collectives as coll
    from railplan.workload import comm

    system = load_system("dgx-a100")
    s = from_strategies(Strategy(tp=1, pp=1, dp=8, global_batch=8, overlap_dp=False))
    it = iteration(MODEL, system, Network(), s)
    grad = comm.dp_gradient_bytes(MODEL, s)
    want = coll.NCCL_SIMPLE_BASE_US * 1e-6 + 2.0 * coll.hierarchical_all_gather_s(
        8,
        1,
        grad,
        system.hb_bytes_per_s,
        system.nic_bytes_per_s,
        system.hb_latency_us * 1e-6,
        system.nic_latency_us * 1e-6,
    )
    assert float(it.breakdown_s["dp_comm_exposed"]) == pytest.approx(float(want), rel=1e-12)


def test_optimizer_step_zeroes_the_whole_gradient_buffer() -> None:
    """Adam over this GPU's ZeRO-1 shard (34 B per parameter ÷ dp) plus `zero_grad_buffer` over
    the whole buffer (grad_reduce_bytes per parameter, not sharded below ZeRO-2), five kernels."""
    from railplan.perf.iteration import DataParallel, optimizer_s

    system = load_system("dgx-h100")
    gpu = system.gpu
    params = 1.0e9
    d = DataParallel(*(np.zeros(()) for _ in range(5)), np.asarray(params), np.zeros(()))
    bw = gpu.memory_tbps * 1e12 * gpu.memory_efficiency
    overhead = 5 * gpu.kernel_overhead_us * 1e-6
    for zero, grad_bytes, moved in ((1, 4, params / 8 * 34 + params * 4), (2, 2, params / 8 * 36)):
        s = from_strategies(Strategy(dp=8, zero=zero, global_batch=8, grad_reduce_bytes=grad_bytes))
        got = float(optimizer_s(system, s, d))
        assert got == pytest.approx(moved / bw + overhead)
