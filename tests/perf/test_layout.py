"""Worst group layouts (railplan.perf.layout) against a brute force over the concrete placement."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from railplan.perf.iteration import iteration
from railplan.perf.layout import megatron_shapes, worst_layout
from railplan.specs import Network, Strategy, load_model, load_system
from railplan.specs.arrays import from_strategies
from railplan.traffic.placement import expert_groups, place


def brute(groups: np.ndarray, k: int) -> tuple[float, float, bool]:
    """Fewest members in a spanned domain, most domains spanned, any spanned group whose domains
    differ in member count or in their first member's local rank."""
    x_min, domains, cross = float(groups.shape[1]), 1.0, False
    for row in groups:
        dom = row // k
        ids, counts = np.unique(dom, return_counts=True)
        if ids.size == 1:
            continue
        domains = max(domains, float(ids.size))
        x_min = min(x_min, float(counts.min()))
        first_local = [int(row[dom == i].min() % k) for i in ids]
        cross |= len(set(first_local)) > 1 or len(set(counts.tolist())) > 1
    return (x_min if domains > 1 else float(groups.shape[1])), domains, cross


def test_hand_computed_layouts() -> None:
    # tp = 16 on a 72-GPU NVL72 domain: the group at GPUs 64..79 splits 8 + 8 across rails.
    assert worst_layout(16, 1, 16, 1, 100, 72) == (8.0, 2.0, True)
    # dp = 16 ranks 8 apart from base 64: 1 + 9 + 6 members in three domains.
    assert worst_layout(16, 8, 128, 8, 10, 72) == (1.0, 3.0, True)
    # Aligned: tp = 8 on DGX (K = 8) stays inside; dp = 64 at stride 8 is one per domain, one rail.
    # A pipeline of stages of 4 GPUs on K = 8 (tp 2, dp 2): the send 4 -> 8 changes rail.
    assert bool(megatron_shapes(2, 2, 4, 1, 8)["pp"].cross_rail)
    assert not bool(megatron_shapes(8, 1, 4, 1, 8)["pp"].cross_rail)
    assert worst_layout(8, 1, 8, 1, 100, 8) == (8.0, 1.0, False)
    assert worst_layout(64, 8, 512, 8, 4, 8) == (1.0, 64.0, False)
    # tp = 16 on K = 8: two full domains, same rails (the paper's hierarchical case).
    assert worst_layout(16, 1, 16, 1, 4, 8) == (8.0, 2.0, False)


@settings(max_examples=150, deadline=None)
@given(
    tp=st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16]),
    dp=st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16, 24]),
    pp=st.sampled_from([1, 2, 3, 4, 5, 8]),
    ep_pick=st.integers(0, 4),
    k=st.sampled_from([2, 4, 6, 8, 9, 12, 16, 18, 36, 64, 72, 256]),
)
def test_layout_matches_the_placement(tp: int, dp: int, pp: int, ep_pick: int, k: int) -> None:
    divisors = [e for e in range(1, dp + 1) if dp % e == 0]
    ep = divisors[ep_pick % len(divisors)]
    p = place(tp, pp, dp, k)
    ep_groups, edp_groups, _ = expert_groups(p, ep)
    oracle = {
        "tp": p.groups("tp"),
        "dp": p.groups("dp"),
        "pp": p.groups("pp"),
        "ep": ep_groups,
        "expert_dp": edp_groups,
        "embedding": p.groups("embedding") if pp > 1 else p.groups("pp")[:, :1],
    }
    shapes = megatron_shapes(tp, dp, pp, ep, k)
    for kind, groups in oracle.items():
        x, domains, cross = brute(groups, k)
        if kind == "pp":  # a send changes rail between neighbouring stages in two domains
            a, b = groups[:, :-1], groups[:, 1:]
            cross = bool(np.any((a // k != b // k) & (a % k != b % k)))
        sh = shapes[kind]
        assert (float(sh.x), float(sh.domains), bool(sh.cross_rail)) == (x, domains, cross), kind
        n = groups.shape[1]
        assert float(sh.x) * float(sh.y) == n  # y = n / x: the bottleneck domain's share


def test_vectorized_equals_scalar() -> None:
    tp = np.array([8, 16, 8, 4])
    dp = np.array([16, 4, 18, 24])
    pp = np.array([4, 2, 8, 6])
    ep = np.ones(4, dtype=np.int64)
    shapes = megatron_shapes(tp, dp, pp, ep, 72)
    for i in range(4):
        one = megatron_shapes(int(tp[i]), int(dp[i]), int(pp[i]), 1, 72)
        for kind, sh in shapes.items():
            assert sh.x[i] == one[kind].x and sh.cross_rail[i] == one[kind].cross_rail


def _time(net: str, gpus: int, pp: int) -> float:
    model, system = load_model("gpt-175b"), load_system("gb200-nvl72")
    s = Strategy(tp=8, pp=pp, dp=gpus // (8 * pp), global_batch=gpus, micro_batch=1)
    return float(
        iteration(model, system, Network(architecture=net), from_strategies(s)).iteration_s
    )


def test_straddling_data_parallel_groups_cost_more() -> None:
    # 1,152 GPUs on NVL72: pp = 8 gives dp = 18 at stride 8 (144 GPUs = two whole domains);
    # pp = 6 gives dp = 24 over 192 GPUs, which straddles domain edges: the worst group has
    # 3 members in one of its 4 domains (e.g. GPUs 192 + t … spread 3 + 9 + 9 + 3).
    s = from_strategies(Strategy(tp=8, pp=6, dp=24, global_batch=1152, micro_batch=1))
    shapes = megatron_shapes(s.tp, s.dp, s.pp, s.ep, 72)
    assert float(shapes["dp"].x) == 3.0 and float(shapes["dp"].domains) == 4.0
    assert bool(shapes["dp"].cross_rail)
    aligned = megatron_shapes(8, 18, 8, 1, 72)["dp"]
    assert float(aligned.x) == 9.0 and not bool(aligned.cross_rail)
    # rail-only forwards the straddling group's NIC bytes: slower than rail-optimized.
    assert _time("rail-only", 1152, 6) > _time("rail-optimized", 1152, 6)
    assert _time("rail-only", 1152, 8) == _time("rail-optimized", 1152, 8)


def test_estimate_reports_the_group_layout(cli) -> None:  # type: ignore[no-untyped-def]
    base = ["estimate", "--model", "gpt-175b", "--system", "gb200-nvl72", "--gpus", "1152"]
    base += ["--tp", "8", "--global-batch", "1152", "--network", "rail-only"]
    aligned = cli.json(*base, "--pp", "8")["group_layout"]
    assert aligned["dp"] == {
        "members": 18,
        "fewest_per_domain": 9,
        "domains": 2,
        "cross_rail": False,
    }
    assert "ep" not in aligned and "expert_dp" not in aligned  # dense model: no such groups
    uneven = cli.json(*base, "--pp", "6")["group_layout"]
    assert uneven["dp"] == {"members": 24, "fewest_per_domain": 3, "domains": 4, "cross_rail": True}
    table = cli(*base, "--pp", "6").stdout
    assert "dp groups: uneven or cross-rail" in table
    assert "dp groups: uneven" not in cli(*base, "--pp", "8").stdout
