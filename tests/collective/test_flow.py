"""The `flow` algorithm: a collective's schedule simulated flow by flow on the built graph."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from railplan.collective import algorithms as alg
from railplan.collective.algorithms import Built
from railplan.collective.bound import bound_s
from railplan.collective.flow import flow
from railplan.collective.sweep import sweep
from railplan.errors import RailplanError
from railplan.perf.collectives import NCCL_SIMPLE_BASE_US
from railplan.specs import Network, load_system

H100 = load_system("dgx-h100")
GB = 2**30


def _group(arch: str, gpus: int, over: float = 1.0) -> alg.Group:
    return alg.group(H100, Network(architecture=arch, oversubscription=over), gpus)


@pytest.mark.parametrize("arch", ["rail-optimized", "rail-only"])
def test_nonblocking_fabric_gives_the_closed_forms(arch: str) -> None:
    """On a full-bisection fabric nothing else shares a link, so the simulated hierarchical
    all-reduce and all-to-all take the closed forms' times (latencies included)."""
    g = _group(arch, 64)
    for op in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all"):
        closed = alg.time_s(g, op, "hierarchical", GB)[0]
        if arch == "rail-optimized" and op == "all-to-all":
            closed = alg.time_s(g, op, "ring", GB)[0]  # direct pairs
        sim = flow(g, op, GB, Built(arch, 16, 400))
        assert sim.time_s == pytest.approx(closed, rel=1e-6), op


def test_one_domain_is_the_hb_ring() -> None:
    g = _group("rail-only", 8)
    sim = flow(g, "all-reduce", GB, Built("rail-only", 64, 400))
    assert sim.time_s == pytest.approx(alg.time_s(g, "all-reduce", "ring", GB)[0], rel=1e-6)


def test_halves_make_the_all_reduce() -> None:
    g = _group("oversubscribed", 32, 3.0)
    parts = [
        flow(g, op, GB, Built("oversubscribed", 16, 400, 3.0)).time_s
        for op in ("all-gather", "reduce-scatter")
    ]
    whole = flow(g, "all-reduce", GB, Built("oversubscribed", 16, 400, 3.0)).time_s
    # the all-reduce is one NCCL collective: one base latency, not two
    base = NCCL_SIMPLE_BASE_US * 1e-6
    assert sum(t for t in parts if t is not None) == pytest.approx(whole + base, rel=1e-9)


def test_oversubscription_shows_where_the_closed_form_misses() -> None:
    """3:1 above the leaves (radix 16): the rail rings of a 512-GPU all-reduce cross the
    thinned spine, which the closed form (rings at the NIC rate) does not see; the simulated
    all-reduce is slower than on the full-bisection fabric and never beats the bound."""
    full = flow(_group("rail-optimized", 512), "all-reduce", GB, Built("rail-optimized", 16, 400))
    g = _group("oversubscribed", 512, 3.0)
    thin = flow(g, "all-reduce", GB, Built("oversubscribed", 16, 400, 3.0))
    closed = alg.time_s(g, "all-reduce", "hierarchical", GB)[0]
    assert full.time_s is not None and thin.time_s is not None and closed is not None
    assert thin.time_s > full.time_s * 1.05
    assert thin.time_s > closed
    assert thin.time_s >= bound_s(g, "all-reduce", GB, Built("oversubscribed", 16, 400, 3.0))


@settings(max_examples=12, deadline=None)
@given(
    st.sampled_from(["rail-optimized", "rail-only", "ideal"]),
    st.sampled_from([16, 32, 64]),
    st.sampled_from(["all-reduce", "all-gather", "reduce-scatter", "all-to-all"]),
    st.floats(1e3, 1e10),
)
def test_never_beats_the_bound(arch: str, gpus: int, op: str, size: float) -> None:
    g = _group(arch, gpus)
    sim = flow(g, op, size, Built(arch, 16, 400))
    assert sim.time_s is not None
    assert sim.time_s >= bound_s(g, op, size, Built(arch, 16, 400)) * (1 - 1e-9)


def test_too_many_pair_flows_is_a_clear_error() -> None:
    g = _group("oversubscribed", 512, 3.0)
    with pytest.raises(RailplanError, match="pair flows"):
        flow(g, "all-to-all", GB, Built("oversubscribed", 16, 400, 3.0))


def test_sweep_needs_the_built_network() -> None:
    g = _group("rail-only", 16)
    with pytest.raises(RailplanError, match="flow needs the built network"):
        sweep(g, "all-reduce", [GB], ("ring", "flow"))
    rows = sweep(g, "all-reduce", [GB], ("ring", "flow"), Built("rail-only", 64, 400))
    assert [r["algorithm"] for r in rows[0]["algorithms"]] == ["ring", "flow"]


def test_cli_flow_and_oversubscribed(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli(
        "collective", "--gpus", "64", "--radix", "16", "--network", "oversubscribed",
        "--oversubscription", "3", "--op", "all-to-all", "--algorithm", "ring,flow", "--json",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    algos = json.loads(r.output)["sizes"][0]["algorithms"]
    assert [a["algorithm"] for a in algos] == ["ring", "flow"]
    bad = cli("collective", "--network", "dragonfly")
    assert bad.exit_code == 2 and "choose one of" in str(bad.exception)
    big = cli(
        "collective", "--gpus", "512", "--radix", "16", "--network", "oversubscribed",
        "--oversubscription", "3", "--op", "all-to-all", "--algorithm", "flow",
    )  # fmt: skip
    assert big.exit_code == 2 and "pair flows" in str(big.exception)
