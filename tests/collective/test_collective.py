"""Collective algorithms, the max-flow bound, and the `collective` command."""

from __future__ import annotations

import json

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from railplan.cli import app
from railplan.collective import algorithms as alg
from railplan.collective.algorithms import Built
from railplan.collective.bound import bound_s
from railplan.errors import RailplanError
from railplan.specs import Network, load_system

H100 = load_system("dgx-h100")


def _group(arch: str, gpus: int, system: str = "dgx-h100") -> alg.Group:
    return alg.group(load_system(system), Network(architecture=arch), gpus)


def test_nccl_tests_h100_ring_and_nvls() -> None:
    """8x H100: ring busbw 365-370 GB/s, NVLS about 480 GB/s (NVIDIA/nccl-tests#212)."""
    g = _group("rail-optimized", 8)
    ring = alg.run(g, "all-reduce", "ring", 2**33)
    nvls = alg.run(g, "all-reduce", "nvls", 2**33)
    assert ring.busbw_gb_per_s is not None and nvls.busbw_gb_per_s is not None
    assert 360 <= ring.busbw_gb_per_s <= 372
    assert nvls.busbw_gb_per_s == pytest.approx(480, rel=0.03)


def test_in_network_never_slower_at_large_sizes_faster_at_small() -> None:
    for gpus in (8, 64):
        g = _group("rail-only", gpus)
        ring_big = alg.time_s(g, "all-reduce", "ring", 2**32)[0]
        ring_small = alg.time_s(g, "all-reduce", "ring", 1024)[0]
        assert ring_big is not None and ring_small is not None
        for a in ("nvls", "sharp"):
            big, _ = alg.time_s(g, "all-reduce", a, 2**32)
            small, _ = alg.time_s(g, "all-reduce", a, 1024)
            if big is None or small is None:
                continue
            assert big <= ring_big
            # NCCL's model: one 25 µs NVLS latency against the Simple ring's 3.4 µs per step
            assert small < (0.6 if a == "nvls" and gpus == 8 else 0.5) * ring_small
    # inside one domain NCCL's LL ring beats NVLS for small messages (as NCCL's tuner picks)
    g = _group("rail-only", 8)
    ll, nvls = (alg.time_s(g, "all-reduce", a, 1024)[0] for a in ("ring-ll", "nvls"))
    assert ll is not None and nvls is not None and ll < nvls


def test_a100_has_no_nvls() -> None:
    g = _group("rail-optimized", 8, "dgx-a100")
    assert alg.time_s(g, "all-reduce", "nvls", 2**20)[0] is None


@settings(max_examples=40, deadline=None)
@given(
    arch=st.sampled_from(["rail-optimized", "rail-only", "ideal", "multi-plane", "oversubscribed"]),
    domains=st.integers(1, 6),
    op=st.sampled_from(alg.OPS),
    size=st.floats(1.0, 1e11),
    nic_gbps=st.sampled_from([100.0, 200.0, 400.0, 800.0]),
    hb_tbps=st.floats(0.5, 10.0),
    radix=st.sampled_from([8, 16, 64]),
    ratio=st.sampled_from([1.0, 3.0, 7.0]),  # integral down:up splits of every radix here
)
def test_bound_never_above_any_algorithm(
    arch: str,
    domains: int,
    op: str,
    size: float,
    nic_gbps: float,
    hb_tbps: float,
    radix: int,
    ratio: float,
) -> None:
    system = H100.model_copy(update={"nic_gbps": nic_gbps, "hb_tbps": hb_tbps})
    gpus = 8 * domains
    over = ratio if arch == "oversubscribed" else 1.0
    spec = "rail-optimized" if arch == "multi-plane" else arch
    g = alg.group(system, Network(architecture=spec, oversubscription=over), gpus)
    planes = 2 if arch == "multi-plane" else 1
    assume(arch != "multi-plane" or nic_gbps >= 200)  # 100G split in two: no 50G NIC speed
    assume(arch != "oversubscribed" or gpus > radix)  # one leaf has no uplinks to thin
    b = bound_s(g, op, size, Built(arch, radix, int(nic_gbps) // planes, over, planes))
    assert b > 0
    for a in alg.ALGORITHMS:
        t, _ = alg.time_s(g, op, a, size)
        if t is not None:
            assert b <= t * (1 + 1e-9), (a, b, t)


def test_bound_monotone_in_nic_bandwidth() -> None:
    times = []
    for gbps in (100.0, 200.0, 400.0):
        s = H100.model_copy(update={"nic_gbps": gbps})
        g = alg.group(s, Network(architecture="rail-only"), 32)
        times.append(bound_s(g, "all-gather", 2**30, Built("rail-only", 64, int(gbps))))
    assert times[0] > times[1] > times[2]


def test_bad_inputs_raise() -> None:
    g = _group("rail-optimized", 8)
    with pytest.raises(RailplanError, match="op"):
        alg.run(g, "broadcast", "ring", 1e6)
    with pytest.raises(RailplanError, match="algorithm"):
        alg.run(g, "all-reduce", "magic", 1e6)
    with pytest.raises(RailplanError, match="gpus"):
        _group("rail-optimized", 12)


def test_cli_json_and_errors() -> None:
    r = CliRunner().invoke(app, ["collective", "--gpus", "16", "--network", "rail-only", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    row = data["sizes"][0]
    assert row["bound_s"] > 0
    ring = next(a for a in row["algorithms"] if a["algorithm"] == "ring")
    assert ring["busbw_gb_per_s"] == pytest.approx(ring["algbw_gb_per_s"] * 2 * 15 / 16)


@pytest.mark.parametrize(
    "args",
    [
        ["--op", "bcast"],
        ["--algorithm", "x"],
        ["--gpus", "12"],
        ["--bytes", "abc"],
        ["--network", "mesh"],
        ["--network", "multi-plane", "--planes", "3"],
        ["--network", "multi-plane", "--planes", "1"],
        ["--network", "rail-only", "--planes", "2"],
        ["--network", "oversubscribed", "--oversubscription", "0.5"],
    ],
)
def test_cli_bad_input_one_line_exit_2(args: list[str]) -> None:
    import subprocess
    import sys

    cmd = [sys.executable, "-c", "from railplan.cli import main; main()", "collective", *args]
    p = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert p.returncode == 2
    assert len(p.stderr.strip().splitlines()) == 1
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize("op", alg.OPS)
@pytest.mark.parametrize("planes", [2, 4])
def test_multi_plane_bound_is_rail_optimized_at_the_same_bandwidth(op: str, planes: int) -> None:
    """Max flow on the multi-plane graph (planes ports of 400/planes Gbps per GPU, one Clos per
    plane) equals that on one rail-optimized Clos of 400G ports: splitting a GPU's bandwidth
    over identical planes changes no cut."""
    g = _group("rail-optimized", 64)
    multi = bound_s(g, op, 2**30, Built("multi-plane", 16, 400 // planes, 1.0, planes))
    assert multi == pytest.approx(bound_s(g, op, 2**30, Built("rail-optimized", 16, 400)), rel=1e-6)


def test_cli_multi_plane_runs_every_algorithm_above_the_bound() -> None:
    args = ["collective", "--gpus", "16", "--radix", "16", "--network", "multi-plane"]
    r = CliRunner().invoke(app, [*args, "--algorithm", "all,flow,optimal", "--json"])
    assert r.exit_code == 0, r.output
    row = json.loads(r.output)["sizes"][0]
    times = {a["algorithm"]: a["time_s"] for a in row["algorithms"]}
    assert set(times) == {*alg.ALGORITHMS, "flow", "optimal"}
    assert all(t is None or t >= row["bound_s"] * (1 - 1e-9) for t in times.values())


def test_lp_on_an_oversubscribed_fabric_beats_direct_and_respects_the_bound() -> None:
    """16 H100 under radix-8 leaves at 3:1: the direct all-to-all pays the thinned uplinks, the
    LP schedule may forward through the HB domain; neither beats the max-flow bound."""
    from railplan.collective.optimal import optimal

    g = alg.group(H100, Network(architecture="oversubscribed", oversubscription=3.0), 16)
    lp = optimal(g, "all-to-all", 2**30, Built("oversubscribed", 8, 400, 3.0, 1)).time_s
    ring = alg.time_s(g, "all-to-all", "ring", 2**30)[0]
    bound = bound_s(g, "all-to-all", 2**30, Built("oversubscribed", 8, 400, 3.0))
    assert lp is not None and ring is not None
    assert bound * (1 - 1e-9) <= lp < ring


def test_nvls_and_sharp_knobs_reach_the_iteration_model() -> None:
    """System.nvls and Network.sharp shorten DP/TP all-reduces; both off changes nothing."""
    from railplan.perf.iteration import iteration
    from railplan.specs import Strategy, load_model
    from railplan.specs.arrays import from_strategies

    model = load_model("gpt-22b")
    s = from_strategies(Strategy(tp=8, pp=1, dp=8, micro_batch=1, global_batch=64))
    base = H100
    times = {}
    for nvls in (False, True):
        for sharp in (False, True):
            sy = base.model_copy(update={"nvls": nvls})
            net = Network(architecture="rail-only", sharp=sharp)
            it = iteration(model, sy, net, s)
            times[(nvls, sharp)] = float(it.iteration_s)
    plain = float(iteration(model, base, Network(architecture="rail-only"), s).iteration_s)
    assert times[(False, False)] == plain
    assert times[(True, False)] < plain
    assert times[(False, True)] <= plain
    assert times[(True, True)] <= min(times[(True, False)], times[(False, True)]) * (1 + 1e-12)


def test_sweep_plot_written(tmp_path: pytest.TempPathFactory) -> None:
    from pathlib import Path

    out = Path(str(tmp_path)) / "sweep.png"
    r = CliRunner().invoke(
        app, ["collective", "--bytes", "1024,1048576,1073741824", "--plot", str(out), "--json"]
    )
    assert r.exit_code == 0, r.output
    assert out.stat().st_size > 1000
    assert len(json.loads(r.output)["sizes"]) == 3


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(min_value=3, max_value=9),
    caps=st.lists(st.floats(min_value=1e8, max_value=1e11), min_size=30, max_size=30),
    density=st.floats(min_value=0.2, max_value=0.9),
    seed=st.integers(min_value=0, max_value=10**6),
    m=st.integers(min_value=1, max_value=4),
)
def test_cut_capacities_match_networkx_max_flow(
    n: int, caps: list[float], density: float, seed: int, m: int
) -> None:
    # scipy's Dinic on capacities rounded up to 1 MB/s against networkx's exact max flow on a
    # random directed graph of ranks and one switch: never below it, and within the rounding.
    import random

    import networkx as nx

    from railplan.collective.bound import cut_capacities

    rng = random.Random(seed)
    dg = nx.DiGraph()
    nodes = [f"r{i}" for i in range(n)] + ["sw"]
    k = 0
    for a in nodes:
        for b in nodes:
            if a != b and rng.random() < density:
                dg.add_edge(a, b, capacity=caps[k % len(caps)])
                k += 1
    ranks = [v for v in nodes if v.startswith("r") and v in dg]
    if len(ranks) < 2:
        return
    inside = set(ranks[: min(m, len(ranks) - 1)])
    h = dg.copy()
    for r in ranks:
        h.add_edge(r, "_sink") if r in inside else h.add_edge("_source", r)
    exact = nx.maximum_flow_value(h, "_source", "_sink")
    (fast,) = cut_capacities(dg, [inside], ranks)
    assert exact - 1e-6 * exact <= fast <= exact + 1e6 * dg.number_of_edges()


def test_bound_refuses_graphs_past_the_graph_limit() -> None:
    from railplan.network.graph import MAX_GRAPH_GPUS

    g = alg.group(load_system("dgx-h100"), Network(architecture="ideal"), 2 * MAX_GRAPH_GPUS)
    with pytest.raises(RailplanError, match="up to 65,536 GPUs"):
        bound_s(g, "all-gather", 1e9, Built("ideal"))
