"""Collective times against hand-computed values and the paper's formulas (SYSTEM.md 2, 3)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from railplan.perf import collectives as c


def test_ring_all_reduce_hand() -> None:
    # 4 ranks, 8 GB at 100 GB/s, 1 µs: 2·3/4·8e9/1e11 + 6e-6 = 0.12 + 6e-6
    assert float(c.ring_all_reduce_s(4, 8e9, 1e11, 1e-6)) == pytest.approx(0.12 + 6e-6)


def test_tree_and_in_network() -> None:
    assert float(c.tree_all_reduce_s(8, 1e9, 1e10, 1e-6)) == pytest.approx(0.2 + 6e-6)
    assert float(c.in_network_all_reduce_s(8, 1e9, 1e10, 1e-6)) == pytest.approx(0.1 + 2e-6)


def test_hierarchical_all_gather_formula_2() -> None:
    # x=8 per domain, y=4 domains, D=1 GB, C_S=50 GB/s, C_F=450 GB/s, no latency:
    # (y−1)·D/(x·y·C_S) + (x−1)·D/(x·C_F)
    t = c.hierarchical_all_gather_s(8, 4, 1e9, 450e9, 50e9, 0, 0)
    assert float(t) == pytest.approx(3 * 1e9 / (32 * 50e9) + 7 * 1e9 / (8 * 450e9))
    ar = c.hierarchical_all_reduce_s(8, 4, 1e9, 450e9, 50e9, 0, 0)
    assert float(ar) == pytest.approx(2 * float(t))


def test_hierarchical_reduces_to_rings() -> None:
    assert float(c.hierarchical_all_gather_s(8, 1, 1e9, 1e11, 1e9, 1e-6, 5e-6)) == pytest.approx(
        float(c.ring_all_gather_s(8, 1e9, 1e11, 1e-6))
    )
    assert float(c.hierarchical_all_gather_s(1, 16, 1e9, 1e11, 1e9, 1e-6, 5e-6)) == pytest.approx(
        float(c.ring_all_gather_s(16, 1e9, 1e9, 5e-6))
    )


@pytest.mark.parametrize(("cf_tbps", "cs_gbps", "paper_pct"), [(2.4, 200, 8.2), (3.6, 400, 11.2)])
def test_all_to_all_forwarding_slowdown_formula_3(
    cf_tbps: float, cs_gbps: float, paper_pct: float
) -> None:
    # Rail-only/rail-optimized − 1 = y(x−1)D/C_F / (x(y−1)D/C_S) ≈ C_S/C_F for large y.
    x, y, d = 8.0, 1024.0, 1e6
    cf, cs = cf_tbps * 1e12 / 8, cs_gbps * 1e9 / 8
    ro = c.all_to_all_rail_optimized_s(x, y, d, cf, cs, 0, 0)
    rl = c.all_to_all_rail_only_s(x, y, d, cf, cs, 0, 0)
    slowdown = 100 * (float(rl) / float(ro) - 1)
    assert float(ro) == pytest.approx(x * (y - 1) * d / cs)
    assert slowdown == pytest.approx(100 * (y * (x - 1) / cf) / (x * (y - 1) / cs))
    # Large y: slowdown → (x−1)/x · C_S/C_F; the paper quotes ≈ C_S/C_F (8.2 %, 11.2 %), the
    # same ratio without the (x−1)/x factor: the HB phase carries x−1 of x shards.
    assert slowdown == pytest.approx(100 * (x - 1) / x * cs / cf, rel=1e-3)
    assert abs(slowdown / ((x - 1) / x) - paper_pct) < 0.3


def test_group_shape() -> None:
    x, y = c.group_shape(np.array([8, 8, 64, 4]), np.array([1, 8, 8, 2]), 8)
    assert list(x) == [8, 1, 1, 4]
    assert list(y) == [1, 8, 64, 1]


pos = st.floats(1e3, 1e12)
bw = st.floats(1e8, 1e13)


@given(st.integers(2, 512), st.integers(1, 256), pos, bw, bw, st.floats(1.0, 4.0))
def test_more_bandwidth_never_slower(
    x: int, y: int, size: float, hb: float, nic: float, factor: float
) -> None:
    base = c.hierarchical_all_reduce_s(x, y, size, hb, nic, 1e-6, 5e-6)
    assert float(c.hierarchical_all_reduce_s(x, y, size, hb * factor, nic, 1e-6, 5e-6)) <= float(
        base
    )
    assert float(c.hierarchical_all_reduce_s(x, y, size, hb, nic * factor, 1e-6, 5e-6)) <= float(
        base
    )
    a2a = c.all_to_all_rail_only_s(x, y, size, hb, nic, 1e-6, 5e-6)
    assert float(c.all_to_all_rail_only_s(x, y, size, hb * factor, nic, 1e-6, 5e-6)) <= float(a2a)
    assert float(c.all_to_all_rail_optimized_s(x, y, size, hb, nic, 1e-6, 5e-6)) <= float(a2a)
