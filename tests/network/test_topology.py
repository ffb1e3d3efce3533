"""Counts against hand-computed values, the paper's Table II, and hypothesis properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from railplan.errors import RailplanError
from railplan.network.topology import (
    Cluster,
    build_counts,
    folded_clos,
    ideal,
    multi_plane,
    oversubscribed,
    rail_only,
    rail_optimized,
)
from railplan.reproduce.table2 import HOTI24_TABLE2, HOTNETS23_TABLE2


def test_two_tier_clos_by_hand() -> None:
    # radix 64, 2048 ports: 64 leaves (32 down/32 up) + 32 spines, 2 × 2048 links
    c = folded_clos(2048, 64)
    assert [t.switches for t in c.tiers] == [64, 32]
    assert c.links == 4096
    assert c.switch_ports_used == 2048 + 2 * 2048 == 96 * 64


def test_tier_thresholds() -> None:
    assert folded_clos(64, 64).num_tiers == 1
    assert folded_clos(65, 64).num_tiers == 2
    assert folded_clos(2048, 64).num_tiers == 2  # R²/2
    assert folded_clos(2049, 64).num_tiers == 3
    assert folded_clos(65536, 64).num_tiers == 3  # R³/4
    assert folded_clos(65537, 64).num_tiers == 4


@pytest.mark.parametrize("row", HOTNETS23_TABLE2, ids=lambda r: f"{r.gpus}-{r.radix}")
def test_table2_counts_hotnets(row) -> None:  # type: ignore[no-untyped-def]
    a = rail_optimized(Cluster(row.gpus, 256, row.radix))
    b = rail_only(Cluster(row.gpus, 256, row.radix))
    assert (a.switches, b.switches) == (row.sota_switches, row.rail_only_switches)
    assert (a.transceivers, b.transceivers) == (row.sota_transceivers, row.rail_only_transceivers)


@pytest.mark.parametrize("row", HOTI24_TABLE2, ids=lambda r: f"{r.gpus}-{r.radix}")
def test_table2_counts_hoti(row) -> None:  # type: ignore[no-untyped-def]
    a = rail_optimized(Cluster(row.gpus, 256, row.radix))
    b = rail_only(Cluster(row.gpus, 256, row.radix))
    assert (a.switches, b.switches) == (row.sota_switches, row.rail_only_switches)
    if row.sota_transceivers is not None:
        assert a.transceivers == row.sota_transceivers
        assert b.transceivers == row.rail_only_transceivers


def test_table2_65536_radix32_by_hand() -> None:
    # 4-tier SOTA: 3 tiers × 65536/16 + 65536/32; rail-only 2-tier per 256-GPU rail: 16 + 8
    assert rail_optimized(Cluster(65536, 256, 32)).switches == 3 * 4096 + 2048
    assert rail_only(Cluster(65536, 256, 32)).switches == 256 * 24
    assert rail_optimized(Cluster(65536, 256, 32)).transceivers == 2 * 4 * 65536


def test_rails_share_switch() -> None:
    c = rail_only(Cluster(32768, 256, 256))  # 128-GPU rails, 2 per radix-256 switch
    assert c.switches == 128 and c.tiers == 1 and c.fabrics == 128
    c = rail_only(Cluster(125 * 256, 256, 256))  # 125-GPU rails: still 2 per switch
    assert c.switches == 128
    odd = rail_only(Cluster(3 * 100, 3, 256))  # 3 rails of 100 ports, 2 per switch → 2 switches
    assert odd.switches == 2 and odd.links == 300


def test_ideal_and_single_domain() -> None:
    c = ideal(4096)
    assert (c.switches, c.links, c.transceivers, c.tiers) == (0, 0, 0, 0)
    assert rail_only(Cluster(256, 256, 64)).switches == 0  # one domain: rails of one GPU


def test_multi_plane_and_oversubscribed() -> None:
    mp = multi_plane(4096, 8, 64, planes=4)
    one = rail_optimized(Cluster(4096, 8, 64))
    assert mp.switches == 4 * one.switches and mp.transceivers == 4 * one.transceivers
    # 3:1 at the leaves: 48 down / 16 up; 3072 ports fit two tiers at radix 64
    ov = oversubscribed(Cluster(3072, 8, 64), 3.0, 1)
    assert ov.switches_per_tier == (64, 16)
    assert ov.links == 3072 + 1024


def test_planes_change_multi_plane_counts_and_only_multi_plane() -> None:
    one = rail_optimized(Cluster(4096, 8, 64))
    for planes in (1, 2, 3):
        c = build_counts("multi-plane", Cluster(4096, 8, 64), planes=planes)
        assert (c.fabrics, c.nics_per_gpu, c.nic_ports) == (planes, planes, planes * 4096)
        assert c.switches == planes * one.switches
    assert build_counts("multi-plane", Cluster(4096, 8, 64)).fabrics == 2  # default
    assert build_counts("multi-plane", Cluster(4096, 8, 64, nics_per_gpu=4), planes=4).fabrics == 4
    with pytest.raises(RailplanError, match=r"^nics_per_gpu: multi-plane has one NIC port"):
        build_counts("multi-plane", Cluster(4096, 8, 64, nics_per_gpu=2), planes=4)
    for arch in ("rail-optimized", "rail-only", "oversubscribed", "ideal"):
        with pytest.raises(RailplanError, match=r"^planes: applies only to arch 'multi-plane'"):
            build_counts(arch, Cluster(4096, 8, 64), planes=2)
    with pytest.raises(RailplanError, match=r"^planes: must be an integer in \[1, 16\]"):
        build_counts("multi-plane", Cluster(4096, 8, 64), planes=17)


def test_oversubscription_only_with_oversubscribed() -> None:
    assert build_counts("oversubscribed", Cluster(3072, 8, 64)).oversubscription == 3.0
    for arch in ("rail-optimized", "rail-only", "multi-plane", "ideal"):
        with pytest.raises(RailplanError, match=r"^oversubscription: applies only"):
            build_counts(arch, Cluster(4096, 8, 64), oversubscription=3.0)
        with pytest.raises(RailplanError, match=r"^oversubscribed_tier: applies only"):
            build_counts(arch, Cluster(4096, 8, 64), oversubscribed_tier=1)
    for bad in (float("nan"), float("inf"), float("-inf"), -1.0, 0.5, 1e308):
        with pytest.raises(RailplanError, match=r"^oversubscription: .* no integral down:up"):
            oversubscribed(Cluster(4096, 8, 64), bad)


def test_bad_inputs() -> None:
    for radix in (0, 3, 63, -2):
        with pytest.raises(RailplanError, match="radix"):
            rail_only(Cluster(4096, 8, radix))
    with pytest.raises(RailplanError, match="hb_domain"):
        rail_only(Cluster(4096, 3, 64))
    with pytest.raises(RailplanError, match="nic_gbps"):
        rail_only(Cluster(4096, 8, 64, nic_gbps=300))
    with pytest.raises(RailplanError, match="oversubscription"):
        oversubscribed(Cluster(4096, 8, 64), 2.0)
    with pytest.raises(RailplanError, match="arch"):
        build_counts("fat-tree", Cluster(4096, 8, 64))


def test_to_dict_is_json() -> None:
    import json

    d = rail_only(Cluster(4096, 8, 64)).to_dict()
    # 8 rails of 512 ports, 2 tiers each: 16 leaves + 8 spines per rail
    assert json.loads(json.dumps(d))["switches"] == 8 * (16 + 8)


radices = st.sampled_from([4, 8, 16, 32, 64, 128, 256])
domains = st.sampled_from([1, 2, 4, 8, 16, 72, 256])


@settings(max_examples=150, deadline=None)
@given(d=st.integers(1, 4096), k=domains, radix=radices, nics=st.integers(1, 4))
def test_properties(d: int, k: int, radix: int, nics: int) -> None:
    n = d * k
    ro = rail_optimized(Cluster(n, k, radix, nics_per_gpu=nics))
    rl = rail_only(Cluster(n, k, radix, nics_per_gpu=nics))
    for c in (ro, rl):
        assert c.transceivers == 2 * c.links
        assert c.switch_ports == radix * c.switches
        assert c.switch_ports_used <= c.switch_ports
    ports = n * nics
    assert ro.switches_per_tier[0] >= math.ceil(ports / radix)
    if ro.tiers > 1:
        assert ro.switches_per_tier[0] >= math.ceil(ports / (radix // 2))
    assert ro.links == ro.tiers * ports
    if rl.tiers:
        assert rl.links >= ports
    assert rl.tiers <= ro.tiers
    rail_ports = d * nics
    if rail_ports <= radix or rail_ports % radix == 0:
        # aligned rails; otherwise per-rail ceilings can cost a few switches (docs/network.md)
        assert rl.switches <= ro.switches


def test_rail_only_can_exceed_when_rails_misaligned() -> None:
    # hypothesis found it: 2 rails of 12 ports at radix 8 → 2 × (3 leaves + 2 spines) = 10,
    # one Clos over 24 ports → 6 leaves + 3 spines = 9 (per-rail ceiling waste)
    assert rail_only(Cluster(24, 2, 8)).switches == 10
    assert rail_optimized(Cluster(24, 2, 8)).switches == 9


@settings(max_examples=100, deadline=None)
@given(d=st.integers(1, 2000), extra=st.integers(1, 2000), k=domains, radix=radices)
def test_monotone_in_n(d: int, extra: int, k: int, radix: int) -> None:
    small, big = d * k, (d + extra) * k
    for f in (rail_optimized, rail_only):
        a, b = f(Cluster(small, k, radix)), f(Cluster(big, k, radix))
        assert b.switches >= a.switches
        assert b.transceivers >= a.transceivers
