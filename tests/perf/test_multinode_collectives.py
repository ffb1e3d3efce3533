"""All-reduces and gathers across HB domains with NCCL's tuning constants (tuning.cc at
NVIDIA/nccl 5067397): LL / LL128 rings on railplan's hierarchical schedule and NCCL's tree with
each protocol, by hand and as properties (monotone in size, never slower than the Simple ring,
uneven layouts by the domains they span, sizes that are not finite)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from railplan.perf import collectives as c
from railplan.perf.comm_time import group_collective_s, links
from railplan.perf.layout import Shape
from railplan.specs import Network
from railplan.specs.catalog import load_system

D = 16384.0  # bytes
SIMPLE = 1e-6  # the Simple ring's data time given to the functions (s)


def test_tree_by_hand() -> None:
    # 8 GPUs × 2 domains, Intel hosts. The ring's bus bandwidth 2·15/16·D / 1 µs = 30.72 GB/s;
    # the tree's 0.92 of it, LL ÷ 3.8 (below the 39 GB/s cap of two nodes); 16 KiB is
    # log2(16384/64) = 8: correction LL .7, LL128 .8, Simple .7
    bus = 2 * 15 / 16 * D / SIMPLE * 0.92
    ll = (6.8 + 2 * (7 * 0.6 + 1 * 5.0)) * 1e-6 + 2 * D / (bus / 3.8) / 0.7
    ll128 = (14.0 + 2 * (7 * 1.25 + 8.5)) * 1e-6 + 2 * D / (bus * 120 / 128) / 0.8
    simple = (8.4 + 2 * (7 * 4.0 + 14.0)) * 1e-6 + 2 * D / bus / 0.7
    got = float(c.nccl_tree_all_reduce_s(8, 2, D, SIMPLE, "intel"))
    assert got == pytest.approx(min(ll, ll128, simple))
    assert got == pytest.approx(ll)


def test_rings_across_domains_by_hand() -> None:
    # LL: 6.6 µs + 14 steps inside at the 1 µs post overhead (above the 0.6 µs NVLink step)
    # + 2 network steps of 2.7 µs; data at ½ the bus bandwidth (2 µs) or at the cap, the slower
    ll = (6.6 + 14 * 1.0 + 2 * 2.7) * 1e-6 + max(SIMPLE / 0.5, 2 * 15 / 16 * D / 39e9)
    ll128 = (14.0 + 14 * 1.9 + 2 * 4.0) * 1e-6 + SIMPLE / 0.92
    got = float(c.nccl_multinode_ring_s(8, 2, D, SIMPLE, "intel"))
    assert got == pytest.approx(min(ll, ll128))
    # AMD hosts: a 2 µs post overhead
    amd = (6.6 + 14 * 2.0 + 2 * 2.7) * 1e-6 + SIMPLE / 0.5
    assert float(c.nccl_multinode_ring_s(8, 2, D, SIMPLE, "amd")) == pytest.approx(amd)
    # one GPU per domain: the ring's network steps take the tree's latency (`ppn == 1`)
    one = (6.6 + 2 * 15 * 5.0) * 1e-6 + SIMPLE / 0.5
    assert float(c.nccl_multinode_ring_s(1, 16, D, SIMPLE, "intel")) == pytest.approx(one)
    # an all-gather: n − 1 steps, y − 1 across
    gather = (6.6 + 7 * 1.0 + 1 * 2.7) * 1e-6 + SIMPLE / 0.5
    assert float(c.nccl_multinode_ring_s(8, 2, D, SIMPLE, "intel", 1.0)) == pytest.approx(gather)
    # the fastest of both, for an all-reduce only
    assert float(c.nccl_multinode_s(8, 2, D, SIMPLE, "intel")) == pytest.approx(min(ll, ll128))
    assert float(c.nccl_multinode_s(8, 2, D, SIMPLE, "intel", 1.0)) == pytest.approx(gather)


def test_nothing_inside_one_domain() -> None:
    assert float(c.nccl_multinode_s(8, 1, D, SIMPLE, "intel")) == np.inf


def test_tree_correction_step_is_not_a_slower_bigger_message() -> None:
    # at 1 MiB the LL factor rises .4 → .5: a message just below it is not slower than 1 MiB
    below, step = 2.0**20 - 1.0, 2.0**20
    t = c.nccl_tree_all_reduce_s(4, 8, np.asarray([below, step]), np.asarray([1e-5, 1e-5]), "intel")
    assert float(t[0]) <= float(t[1])


def _shape(x: int, y: int) -> Shape:
    one = np.ones(1)
    return Shape(x=one * x, y=one * y, domains=one * y, cross_rail=np.zeros(1, dtype=bool))


def test_group_all_reduce_across_two_servers() -> None:
    # 16 H100 on two DGX H100 (Intel hosts): a 16 KiB all-reduce takes NCCL's LL ring, far
    # below the Simple hierarchical ring's 2·(14 + 7·3.4) + 8.4 µs
    h100 = load_system("dgx-h100")
    lk = links(h100, Network(architecture="rail-optimized"), np.asarray([16.0]))
    got = float(group_collective_s(lk, _shape(8, 2), np.asarray([D]))[0])
    simple = 2 * c.hierarchical_all_gather_s(8, 2, D, lk.hb_bw, lk.nic_bw, 0.0, 0.0)
    assert got == pytest.approx(float(c.nccl_multinode_s(8, 2, D, simple, "intel")))
    assert got < 0.5 * (8.4 + 2 * (14.0 + 7 * 3.4)) * 1e-6
    # a GPU without NCCL's tuning constants (MI300X, RCCL) keeps the Simple ring
    mi = load_system("mi300x")
    lk_mi = links(mi, Network(architecture="rail-optimized"), np.asarray([16.0]))
    ring = c.NCCL_SIMPLE_BASE_US * 1e-6 + float(
        c.hierarchical_all_reduce_s(
            8, 2, D, lk_mi.hb_bw, lk_mi.nic_bw, lk_mi.hb_lat_s, lk_mi.nic_lat_s
        )
    )
    assert float(group_collective_s(lk_mi, _shape(8, 2), np.asarray([D]))[0]) == pytest.approx(ring)


@given(
    st.integers(1, 16),
    st.integers(2, 512),
    st.floats(1.0, 1e10),
    st.floats(1.0, 1e10),
    st.floats(1e-11, 1e-9),
    st.sampled_from(["intel", "amd", "arm"]),
    st.booleans(),
)
def test_monotone_in_size_and_bandwidth(
    x: int, y: int, d1: float, d2: float, per_byte: float, cpu: str, gather: bool
) -> None:
    """A bigger message is never faster; a faster Simple ring never makes the others slower."""
    lo, hi = sorted((d1, d2))
    phases = 1.0 if gather else 2.0
    t = c.nccl_multinode_s
    assert float(t(x, y, lo, lo * per_byte, cpu, phases)) <= float(
        t(x, y, hi, hi * per_byte, cpu, phases)
    ) * (1 + 1e-12)
    assert float(t(x, y, hi, hi * per_byte / 2, cpu, phases)) <= float(
        t(x, y, hi, hi * per_byte, cpu, phases)
    ) * (1 + 1e-12)


def test_collective_cli_tree_and_ll_ring_across_domains(cli) -> None:  # type: ignore[no-untyped-def]
    import json

    out = cli(
        "collective", "--gpus", "16", "--algorithm", "tree,ring-ll", "--bytes", "16384", "--json"
    )
    assert out.exit_code == 0, out.output
    rows = {r["algorithm"]: r for r in json.loads(out.output)["sizes"][0]["algorithms"]}
    assert "NCCL's tree" in rows["tree"]["note"]
    assert "railplan's hierarchical schedule" in rows["ring-ll"]["note"]
    # the by-hand latencies above (25.2 and 26.0 µs) plus a few bytes' worth
    assert 25.2e-6 < rows["tree"]["time_s"] < 30e-6
    assert 26.0e-6 < rows["ring-ll"]["time_s"] < 30e-6


def test_uneven_layout_counts_the_domains_spanned() -> None:
    # tp 12 on 8-GPU domains: 4 members in the fewest-filled domain, 2 domains spanned, y = 3
    # effective. NCCL's node terms take the 2 domains: the two-node LL cap, one network step
    # each way on the ring, and the tree's 12/2 − 1 = 5 NVLink hops per node.
    ring = float(c.nccl_multinode_ring_s(4, 3, D, SIMPLE, "intel", 2.0, 2))
    assert ring == pytest.approx((6.6 + 6 * 1.0 + 2 * 2.7) * 1e-6 + SIMPLE / 0.5)
    bus = 2 * 11 / 12 * D / SIMPLE * 0.92
    tree = float(c.nccl_tree_all_reduce_s(4, 3, D, SIMPLE, "intel", 2))
    assert tree == pytest.approx((6.8 + 2 * (5 * 0.6 + 1 * 5.0)) * 1e-6 + 2 * D / (bus / 3.8) / 0.7)


def test_sizes_that_are_not_finite() -> None:
    got = c.nccl_tree_all_reduce_s(8, 2, np.asarray([np.inf, np.nan, 0.0]), np.ones(3), "amd")
    assert got[0] == np.inf
    assert np.isnan(got[1])
    assert got[2] == pytest.approx((6.8 + 2 * (7 * 0.6 + 5.0)) * 1e-6)
