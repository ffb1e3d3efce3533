"""DeepEP-style MoE dispatch (`ep_dispatch` deepep; DeepSeek-V3 report §3.2.2): a token crosses
to each HB domain holding one of its experts once, over its own rail, and is forwarded over
NVLink; group-limited routing (DeepSeek-V3: 4 of 8 groups, one per node) bounds the domains."""

from math import comb

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from railplan.errors import RailplanError
from railplan.explore.search import SearchSpace, enumerate_and_evaluate
from railplan.perf.comm_time import ep_comm_time_s, links
from railplan.perf.iteration import iteration
from railplan.perf.layout import megatron_shapes
from railplan.specs import (
    EP_DISPATCH_CODES,
    Job,
    Model,
    Network,
    Strategy,
    load_model,
    load_system,
)
from railplan.specs.arrays import check, from_strategies, valid_mask
from railplan.traffic.matrix import KIND_CODE, traffic
from railplan.traffic.placement import place
from railplan.workload import comm
from railplan.workload.routing import remote_domains, touched_domains, touched_ranks
from tests.conftest import Cli
from tests.perf.properties import (
    ARCHS,
    BANDWIDTH_FIELDS,
    FACTORS,
    check_more_bandwidth_never_slower,
    check_network_order,
)

V3 = load_model("deepseek-v3")
MOE = Model(
    name="moe-test",
    hidden=1024,
    layers=4,
    heads=8,
    experts=64,
    top_k=8,
    expert_ffn_hidden=512,
    drop_tokens=False,
    seq=1024,
    expert_groups=8,
    route_groups=4,
)
SYSTEM = load_system("dgx-h100")


def test_touched_domains_closed_forms() -> None:
    """Without a group limit: y·(1 − C(E − E/y, k)/C(E, k)); with one group per domain:
    g·(1 − C(g·E/G − E/y, k)/C(g·E/G, k)) (a chosen group's domain is missed only when none
    of the k experts drawn from the g groups is there)."""
    e, k = 256, 8
    for y in (2, 4, 8, 16):
        want = y * (1 - comb(e - e // y, k) / comb(e, k))
        assert touched_domains(e, k, 1, 0, y) == pytest.approx(want)
    assert touched_domains(e, k, 8, 4, 8) == pytest.approx(4 * (1 - comb(96, 8) / comb(128, 8)))
    assert touched_domains(e, k, 8, 4, 1) == 1.0


def test_touched_ranks() -> None:
    """One copy per GPU holding one of the token's experts: without a group limit
    ep·(1 − C(E − E/ep, k)/C(E, k)); DeepSeek-V3 at ep 8 (32 experts per GPU) 3.6 GPUs for
    its 8 experts, at ep 256 (one each) all 8; top_k where the experts do not split evenly."""
    flat = Model(name="f", hidden=64, layers=2, heads=4, experts=256, top_k=8)
    for ep in (1, 2, 8, 64):
        want = ep * (1 - comb(256 - 256 // ep, 8) / comb(256, 8))
        assert float(touched_ranks(flat, ep)) == pytest.approx(want)
    got = touched_ranks(V3, np.array([8, 256, 3]))
    assert 3.5 < float(got[0]) < 3.7 and float(got[1]) == pytest.approx(8.0)
    assert float(got[2]) == 8.0


@pytest.mark.parametrize("y", [2, 4, 8, 16, 32])
def test_touched_domains_against_sampling(y: int) -> None:
    """Group-limited routing drawn at random: pick 4 of 8 groups, then 8 of their experts."""
    rng = np.random.default_rng(y)
    e, k, groups, chosen = 256, 8, 8, 4
    per_group, per_domain = e // groups, e // y
    hits = 0
    draws = 20000
    for _ in range(draws):
        picked = rng.choice(groups, chosen, replace=False)
        pool = (picked[:, None] * per_group + np.arange(per_group)).ravel()
        experts = rng.choice(pool, k, replace=False)
        hits += np.unique(experts // per_domain).size
    assert touched_domains(e, k, groups, chosen, y) == pytest.approx(hits / draws, rel=0.02)


def test_one_all_to_all_by_hand() -> None:
    """ep 16 over two DGX (x = 8, y = 2), tp 1: max(R·T/C_S, n·(x−1)/x·T/C_F) + latencies, n the
    GPUs a token's experts lie on (DeepEP sends a token once to each)."""
    s = from_strategies(Strategy(dp=16, ep=16, global_batch=16, ep_dispatch="deepep"))
    check(MOE, s)
    lk = links(SYSTEM, Network(), np.asarray(16.0))
    shape = megatron_shapes(s.tp, s.dp, s.pp, s.ep, lk.hb_domain, s.cp)["ep"]
    assert float(shape.x) == 8 and float(shape.domains) == 2
    t = 1024 * 1024 * 2.0  # one micro-batch of 1,024 tokens, h bf16
    r = touched_domains(64, 8, 8, 4, 2) / 2
    gpus = touched_domains(64, 8, 8, 4, 16)  # one copy per GPU holding one of its experts
    assert 4 < gpus < 8
    one = max(r * t / lk.nic_bw, gpus * 7 / 8 * t / lk.hb_bw) + lk.nic_lat_s + lk.hb_lat_s
    assert float(comm.ep_token_bytes(MOE, s)) == t
    zero = np.zeros(())
    got = float(ep_comm_time_s(MOE, lk, s, shape, zero))
    assert got == pytest.approx(4 * one)  # dispatch + combine, forward and backward


def test_rail_only_costs_nothing_and_direct_does() -> None:
    """DeepSeek-V3 at ep 64 over eight HGX H800: DeepEP dispatch runs the same on both
    networks; the direct all-to-all pays rail-only's forwarding."""
    fields = dict(pp=16, interleave=2, dp=128, ep=64, global_batch=15360, precision="fp8", zero=1)
    fields |= dict(pipeline_schedule="dualpipev", overlap_ep=True)
    h800 = load_system("hgx-h800")
    times = {}
    for dispatch in ("alltoall", "deepep"):
        s = from_strategies(Strategy(ep_dispatch=dispatch, **fields))  # type: ignore[arg-type]
        for arch in ("rail-optimized", "rail-only"):
            it = iteration(V3, h800, Network(architecture=arch), s)
            times[dispatch, arch] = float(it.breakdown_s["ep_comm"])
    assert times["deepep", "rail-only"] == times["deepep", "rail-optimized"]
    assert times["alltoall", "rail-only"] > times["alltoall", "rail-optimized"]
    assert times["deepep", "rail-optimized"] < times["alltoall", "rail-optimized"]


def test_traffic_stays_on_the_rails_and_matches_the_time_model() -> None:
    strat = Strategy(dp=16, ep=16, global_batch=16, ep_dispatch="deepep")
    s = from_strategies(strat)
    t = traffic(MOE, strat, place(1, 1, 16, 8))
    keep = t.kind == KIND_CODE["ep"]
    src, dst, b = t.src[keep], t.dst[keep], t.bytes[keep]
    remote = (src // 8) != (dst // 8)
    assert bool(np.all(src[remote] % 8 == dst[remote] % 8))  # same rail
    m = float(s.micro_batches)
    count = 4.0  # all-to-alls per MoE layer and micro-batch (no recompute)
    per_gpu_nic = float(b[remote].sum()) / 16
    token = float(comm.ep_token_bytes(MOE, s))
    want = m * count * MOE.layers * token * float(remote_domains(MOE, np.asarray(2.0)))
    assert per_gpu_nic == pytest.approx(want)
    per_gpu_hb = float(b[~remote].sum()) / 16
    gpus = float(touched_ranks(MOE, 16))
    assert per_gpu_hb == pytest.approx(m * count * MOE.layers * token * gpus * 7 / 8)


def test_model_rules() -> None:
    base = dict(name="x", hidden=64, layers=2, heads=4, experts=8, top_k=2)
    with pytest.raises(ValueError, match="expert_groups"):
        Model(**base, expert_groups=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="route_groups"):
        Model(**base, expert_groups=4, route_groups=5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="top_k"):
        Model(**{**base, "top_k": 4}, expert_groups=8, route_groups=1)  # type: ignore[arg-type]


def test_cli_and_search(cli: Cli) -> None:
    args = ["estimate", "--model", "deepseek-v3", "--system", "hgx-h800", "--gpus", "2048"]
    args += ["--pp", "16", "--ep", "64", "--global-batch", "15360", "--precision", "fp8"]
    args += ["--zero", "1"]
    out = cli.json(*args, "--ep-dispatch", "deepep")
    assert out["strategy"]["ep_dispatch"] == "deepep"
    bad = cli(*args, "--ep-dispatch", "nccl")
    assert bad.exit_code == 2 and "ep_dispatch" in str(bad.exception)
    assert "\n" not in str(bad.exception)
    job = Job(MOE, SYSTEM, Network(), 16, 16)
    ev = enumerate_and_evaluate(job, SearchSpace(ep_dispatch="deepep", tp=(1,), pp=(1,)))
    assert bool(np.all(ev.strategies.ep_dispatch == EP_DISPATCH_CODES["deepep"]))
    with pytest.raises(RailplanError, match="ep_dispatch"):
        SearchSpace(ep_dispatch="nccl")


deepep_strategies = st.builds(
    lambda tp, dp, ep, mb, k, overlap: Strategy(
        tp=tp,
        dp=dp,
        ep=ep,
        micro_batch=mb,
        global_batch=dp * mb * k,
        sequence_parallel=tp > 1,
        ep_dispatch="deepep",
        overlap_ep=overlap,
    ),
    st.sampled_from([1, 2]),
    st.sampled_from([8, 16, 32, 64]),
    st.sampled_from([2, 4, 8, 16, 32, 64]),
    st.sampled_from([1, 2]),
    st.integers(1, 3),
    st.booleans(),
)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(deepep_strategies, BANDWIDTH_FIELDS, FACTORS, ARCHS)
def test_more_bandwidth_is_never_slower(
    strategy: Strategy, field: str, factor: float, arch: str
) -> None:
    if bool(valid_mask(MOE, from_strategies(strategy))):
        check_more_bandwidth_never_slower(MOE, SYSTEM, strategy, field, factor, arch)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(deepep_strategies)
def test_network_order_and_rail_only_free(strategy: Strategy) -> None:
    """ideal ≤ rail-optimized ≤ rail-only, and the all-to-alls cost rail-only nothing."""
    if not bool(valid_mask(MOE, from_strategies(strategy))):
        return
    its = check_network_order(MOE, SYSTEM, strategy)
    ep = {a: float(it.breakdown_s["ep_comm"]) for a, it in its.items()}
    assert ep["rail-only"] == ep["rail-optimized"]
