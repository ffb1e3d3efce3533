"""Flow-level simulator: solver properties, agreement with the closed forms (≤ 2 %), aggregation
equals per-pair simulation, CLI and error paths. Small clusters only; no wall-clock checks."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from railplan.errors import RailplanError
from railplan.network import flowsim as fsm
from railplan.perf import collectives as col

CS = 400e9 / 8  # dgx-h100 C_S, bytes/s
CF = 3600e9 / 8  # dgx-h100 C_F
D = 1e6


def net(
    arch: str, gpus: int, k: int = 8, radix: int = 16, o: float | None = None
) -> fsm.FlowNetwork:
    return fsm.network_for(arch, gpus, k, radix, 400, 3600.0, oversubscription=o)


# --------------------------------------------------------------------------- max-min solver


def test_max_min_textbook_example() -> None:
    """Bertsekas & Gallager style: flows A (links 0,1), B (link 0), C (link 1), cap 1 and 2."""
    a = sp.csr_matrix(np.array([[1.0, 1.0], [1.0, 0.0], [0.0, 1.0]]))
    r = fsm.max_min_rates(a, np.array([1.0, 2.0]))
    np.testing.assert_allclose(r, [0.5, 0.5, 1.5])


def test_multiplicity_counts_flows() -> None:
    a = sp.csr_matrix(np.array([[1.0], [1.0]]))
    r = fsm.max_min_rates(a, np.array([6.0]), np.array([2.0, 1.0]))
    np.testing.assert_allclose(r, [2.0, 2.0])


def test_fractional_ecmp_rates() -> None:
    # one flow split half/half over two links of capacity 1, one flow on link 0 alone
    a = sp.csr_matrix(np.array([[0.5, 0.5], [1.0, 0.0]]))
    r = fsm.max_min_rates(a, np.array([1.0, 1.0]))
    np.testing.assert_allclose(r, [2 / 3, 2 / 3])


@settings(max_examples=40, deadline=None)
@given(
    flows=st.integers(1, 30),
    links=st.integers(1, 8),
    seed=st.integers(0, 10_000),
)
def test_random_step_properties(flows: int, links: int, seed: int) -> None:
    """Bytes conserved, no link above capacity, makespan ≥ link bound; more capacity is
    never slower (all capacities scaled up)."""
    rng = np.random.default_rng(seed)
    dense = rng.random((flows, links)) * (rng.random((flows, links)) < 0.5)
    dense[np.arange(flows), rng.integers(0, links, flows)] += 0.5
    inc = sp.csr_matrix(dense)
    cap = rng.uniform(1.0, 10.0, links)
    nbytes = rng.uniform(0.1, 10.0, flows)
    fs = fsm.FlowSet(inc, np.ones(flows), nbytes)
    res = fsm.simulate_flowset(fs, cap)
    assert res.sent_bytes == pytest.approx(nbytes.sum(), rel=1e-6)
    assert res.max_link_utilization <= 1 + 1e-9
    assert res.time_s >= res.link_bound_s * (1 - 1e-9)
    rates = fsm.max_min_rates(inc, cap)
    assert np.all(inc.T @ rates <= cap * (1 + 1e-9))
    # every flow is bottlenecked: it crosses a saturated link
    sat = inc.T @ rates >= cap * (1 - 1e-9)
    assert np.all((inc @ sat.astype(float)) > 0)
    faster = fsm.simulate_flowset(fs, cap * rng.uniform(1.0, 3.0))
    assert faster.time_s <= res.time_s * (1 + 1e-9)


# --------------------------------------------------------------------------- closed forms


@pytest.mark.parametrize(("gpus", "radix"), [(64, 8), (128, 16), (256, 16), (512, 64)])
def test_alltoall_rail_optimized_matches_formula3(gpus: int, radix: int) -> None:
    n = net("rail-optimized", gpus, radix=radix)
    res = fsm.simulate(n, fsm.alltoall_direct_steps(fsm.uniform_pair_bytes(gpus, D)))
    cf = float(col.all_to_all_rail_optimized_s(8, gpus // 8, D, CF, CS, 0, 0))
    assert res.time_s == pytest.approx(cf, rel=0.02)


@pytest.mark.parametrize(("gpus", "radix"), [(64, 8), (64, 64), (128, 16), (256, 16), (512, 64)])
def test_alltoall_rail_only_forwarding_matches_formula3(gpus: int, radix: int) -> None:
    n = net("rail-only", gpus, radix=radix)
    steps = fsm.alltoall_forwarding_steps(fsm.uniform_pair_bytes(gpus, D), 8)
    res = fsm.simulate(n, steps)
    cf = float(col.all_to_all_rail_only_s(8, gpus // 8, D, CF, CS, 0, 0))
    assert res.time_s == pytest.approx(cf, rel=0.02)
    assert res.step_count == 2


def test_rail_only_slowdown_is_about_cs_over_cf() -> None:
    """SYSTEM.md claim 3: rail-only/rail-optimized → 1 + (x−1)/x·C_S/C_F for large y."""
    g = 512
    b = fsm.uniform_pair_bytes(g, D)
    t_opt = fsm.simulate(net("rail-optimized", g, radix=64), fsm.alltoall_direct_steps(b)).time_s
    t_ro = fsm.simulate(net("rail-only", g, radix=64), fsm.alltoall_forwarding_steps(b, 8)).time_s
    x, y = 8, g // 8
    expect = 1 + y * (x - 1) * CS / (x * (y - 1) * CF)
    assert t_ro / t_opt == pytest.approx(expect, rel=1e-6)


@pytest.mark.parametrize("arch", ["rail-optimized", "rail-only"])
def test_ring_allreduce_in_rail_is_nic_bound(arch: str) -> None:
    g = 128
    res = fsm.simulate(net(arch, g), fsm.ring_allreduce_steps(g, 8, 1e9))
    cf = float(col.ring_all_reduce_s(g // 8, 1e9, CS, 0))
    assert res.time_s == pytest.approx(cf, rel=0.02)
    assert res.step_count == 2 * (g // 8 - 1)


@pytest.mark.parametrize("arch", ["rail-optimized", "rail-only"])
@pytest.mark.parametrize("gpus", [64, 256])
def test_hierarchical_allreduce_matches_formula2(arch: str, gpus: int) -> None:
    res = fsm.simulate(net(arch, gpus), fsm.hierarchical_allreduce_steps(gpus, 8, 1e9))
    cf = float(col.hierarchical_all_reduce_s(8, gpus // 8, 1e9, CF, CS, 0, 0))
    assert res.time_s == pytest.approx(cf, rel=0.02)


@pytest.mark.parametrize(("gpus", "radix", "o"), [(256, 20, 4.0), (192, 32, 3.0)])
def test_oversubscribed_alltoall_slowed_by_ratio(gpus: int, radix: int, o: float) -> None:
    """Leaves with o:1 down:up ports: the cross-leaf all-to-all is bound by the leaf uplinks,
    o × (cross-leaf bytes per GPU) / C_S, and the simulation meets that bound within 2 %."""
    n = net("oversubscribed", gpus, radix=radix, o=o)
    b = fsm.uniform_pair_bytes(gpus, D)
    res = fsm.simulate(n, fsm.alltoall_direct_steps(b))
    per_leaf = int(radix * o / (o + 1))
    leaf_gpus = per_leaf  # leaves filled rail by rail, every leaf full here
    # NIC bytes leaving the leaf: not to the GPU's own leaf (one rail, other domains), not to
    # its own domain (those 7 go over the HB domain)
    cross_per_gpu = (gpus - leaf_gpus - 7) * D
    by_ratio = o * cross_per_gpu / CS
    assert fsm.oversubscribed_alltoall_bound_s(n, b) == pytest.approx(by_ratio, rel=1e-9)
    assert res.time_s == pytest.approx(by_ratio, rel=0.02)
    # versus the full-bisection closed form x(y-1)D/C_S: slower by about the ratio
    full = float(col.all_to_all_rail_optimized_s(8, gpus // 8, D, CF, CS, 0, 0))
    assert res.time_s / full == pytest.approx(o * (gpus - leaf_gpus - 7) / (gpus - 8), rel=0.02)


def test_run_reports_closed_form_and_error() -> None:
    rep = fsm.run("dgx-h100", 128, "rail-only", "alltoall", pair_bytes=D, radix=16)
    assert rep.closed_form_applies
    assert rep.relative_error is not None and abs(rep.relative_error) < 0.02
    assert rep.steps == 2 and rep.flows == 128 * 15 + 128 * 7
    rep = fsm.run("dgx-a100", 64, "rail-optimized", "allreduce-hierarchical", size_bytes=1e8)
    assert rep.relative_error is not None and abs(rep.relative_error) < 0.02


# --------------------------------------------------------------------------- aggregation


@pytest.mark.parametrize(
    ("arch", "gpus", "radix", "forwarding"),
    [
        ("rail-optimized", 64, 8, False),
        ("rail-optimized", 128, 16, False),
        ("rail-only", 128, 16, True),
        ("rail-only", 64, 64, True),
        ("oversubscribed", 256, 20, False),
    ],
)
def test_aggregated_equals_per_pair(arch: str, gpus: int, radix: int, forwarding: bool) -> None:
    n = net(arch, gpus, radix=radix, o=4.0 if arch == "oversubscribed" else None)
    b = fsm.uniform_pair_bytes(gpus, D)
    steps = fsm.alltoall_forwarding_steps(b, 8) if forwarding else fsm.alltoall_direct_steps(b)
    agg = fsm.simulate(n, steps, aggregate=True)
    pairs = fsm.simulate(n, steps, aggregate=False)
    assert all(s.classes < s.flows for s in agg.steps)
    assert all(s.classes == s.flows for s in pairs.steps)
    assert agg.time_s == pytest.approx(pairs.time_s, rel=1e-9)
    for a, p in zip(agg.steps, pairs.steps, strict=True):
        assert a.flows == p.flows
        assert a.sent_bytes == pytest.approx(p.sent_bytes, rel=1e-9)


def test_aggregation_refuses_asymmetric_matrix() -> None:
    n = net("rail-optimized", 64, radix=8)
    z = fsm.zipf_pair_bytes(64, D, 1.2)
    assert fsm.aggregate_matrix(n, z) is None
    # a leaf where only one GPU sends is not symmetric either
    m = np.zeros((64, 64))
    m[0, 40] = D
    assert fsm.aggregate_matrix(n, m) is None


def test_zipf_keeps_mean_bytes_and_is_slower() -> None:
    g = 64
    z = fsm.zipf_pair_bytes(g, D, 1.2)
    w = 1.0 / (np.random.default_rng(0).permutation(g) + 1.0) ** 1.2
    np.testing.assert_allclose(z[1], np.where(np.arange(g) == 1, 0.0, g * D * w / w.sum()))
    n = net("rail-only", g, radix=8)
    uni = fsm.simulate(n, fsm.alltoall_forwarding_steps(fsm.uniform_pair_bytes(g, D), 8))
    skw = fsm.simulate(n, fsm.alltoall_forwarding_steps(z, 8))
    assert skw.time_s > uni.time_s
    assert skw.time_s >= skw.link_bound_s * (1 - 1e-9)
    for s in skw.steps:
        assert s.sent_bytes == pytest.approx(s.bytes, rel=1e-6)
        assert s.max_link_utilization <= 1 + 1e-9


def test_forwarding_conserves_bytes() -> None:
    g = 64
    z = fsm.zipf_pair_bytes(g, D, 1.0, seed=3)
    s1, s2 = fsm.alltoall_forwarding_steps(z, 8)
    assert s1.matrix is not None and s2.matrix is not None
    off = z.sum()
    # every byte crosses at most one NIC hop and one HB hop; bytes between different rails
    # and domains cross both
    k, y = 8, g // 8
    t = z.reshape(y, k, y, k)
    same_rail = sum(t[:, r, :, r].sum() for r in range(k))
    same_dom = sum(t[d, :, d, :].sum() for d in range(y))
    assert s1.matrix.sum() == pytest.approx(off - same_dom, rel=1e-12)
    assert s2.matrix.sum() == pytest.approx(off - same_rail, rel=1e-12)


@settings(max_examples=12, deadline=None)
@given(
    domains=st.sampled_from([2, 4, 8]),
    k=st.sampled_from([2, 4, 8]),
    nic_factor=st.floats(1.0, 4.0),
    hb_factor=st.floats(1.0, 4.0),
)
def test_more_bandwidth_never_slower(
    domains: int, k: int, nic_factor: float, hb_factor: float
) -> None:
    g = domains * k
    base = fsm.network_for("rail-only", g, k, 8, 400, 3600.0)
    fast = fsm.network_for("rail-only", g, k, 8, 400, 3600.0 * hb_factor)
    cap = fast.capacity_bytes_per_s.copy()
    nic = np.isin(fast.link_kind, [fsm.KIND_NIC_UP, fsm.KIND_NIC_DOWN])
    cap[nic] *= nic_factor
    fast = fast.with_capacity(cap)
    z = fsm.zipf_pair_bytes(g, D, 1.1)
    for steps in (fsm.alltoall_forwarding_steps(z, k), fsm.hierarchical_allreduce_steps(g, k, 1e8)):
        assert fsm.simulate(fast, steps).time_s <= fsm.simulate(base, steps).time_s * (1 + 1e-9)


# --------------------------------------------------------------------------- routing


def test_routes_are_ecmp_fractions() -> None:
    n = net("rail-optimized", 128, radix=16)  # 2 tiers: 16 leaves × 8 spines
    leaves = [i for i, s in enumerate(n.switch_names) if s.startswith("leaf")]
    r = fsm.switch_routes(n, np.array([leaves[0]]), np.array([leaves[1]]))
    # up fractions out of the source leaf sum to 1, as do the down fractions into the target
    row = r.getrow(0)
    ups = [
        v
        for c, v in zip(row.indices, row.data, strict=True)
        if n.link_src[c] == n.switch_names[leaves[0]]
    ]
    assert sum(ups) == pytest.approx(1.0)
    assert len(ups) == 8 and np.allclose(ups, 1 / 8)


def test_rail_only_cross_rail_direct_has_no_path() -> None:
    n = net("rail-only", 128, radix=16)
    with pytest.raises(RailplanError, match="no network path"):
        fsm.simulate(n, fsm.alltoall_direct_steps(fsm.uniform_pair_bytes(128, D)))


def test_small_rails_sharing_a_switch_allow_direct_all_to_all() -> None:
    """N=64, K=8, radix 64: all 8 rails (8 GPUs each) share one switch, so the direct
    all-to-all runs and meets the rail-optimized form, below rail-only's formula 3."""
    n = net("rail-only", 64, radix=64)
    b = fsm.uniform_pair_bytes(64, D)
    direct = fsm.simulate(n, fsm.alltoall_direct_steps(b)).time_s
    assert direct == pytest.approx(
        float(col.all_to_all_rail_optimized_s(8, 8, D, CF, CS, 0, 0)), rel=1e-9
    )
    assert direct < float(col.all_to_all_rail_only_s(8, 8, D, CF, CS, 0, 0))


def test_hb_links_added() -> None:
    n = net("rail-only", 64, radix=8)
    hb = np.isin(n.link_kind, [fsm.KIND_HB_UP, fsm.KIND_HB_DOWN])
    assert int(hb.sum()) == 2 * 64
    assert np.allclose(n.capacity_bytes_per_s[hb], CF)
    assert n.link_dst[int(n.gpu_hb_up[9])] == "hb:1"


# --------------------------------------------------------------------------- errors


def test_bad_inputs() -> None:
    with pytest.raises(RailplanError, match="skew"):
        fsm.parse_skew("pareto:1")
    with pytest.raises(RailplanError, match="skew"):
        fsm.parse_skew("zipf:x")
    with pytest.raises(RailplanError, match="collective"):
        fsm.run("dgx-h100", 64, collective="broadcast")
    with pytest.raises(RailplanError, match="arch"):
        fsm.run("dgx-h100", 64, arch="ideal")
    with pytest.raises(RailplanError, match="bytes"):
        fsm.run("dgx-h100", 64, pair_bytes=1.0, size_bytes=1.0)
    with pytest.raises(RailplanError, match="ring"):
        fsm.ring_allreduce_steps(8, 8, 1e6)
    with pytest.raises(RailplanError, match="itself"):
        fsm.route_pairs(
            net("rail-only", 64, radix=8), np.array([1]), np.array([1]), np.array([1.0])
        )
