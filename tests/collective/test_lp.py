"""The LP schedule synthesizer (collective/lp.py): small cases by hand, TE-CCL's published
schedules, and the cut bound it can never beat."""

from __future__ import annotations

import csv
import json
from importlib import resources

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from railplan.cli import app
from railplan.collective import algorithms as alg
from railplan.collective import chassis, lp
from railplan.collective.algorithms import Built
from railplan.collective.bound import bound_s
from railplan.collective.optimal import optimal
from railplan.errors import RailplanError
from railplan.specs import Network, load_system

B = 10e9  # bytes/s


def _pair() -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_edge("a", "b", capacity=B)
    g.add_edge("b", "a", capacity=B)
    return g


def test_two_ranks_one_link_each_way() -> None:
    # each rank sends its half of D over its own link: D/(2B), one epoch
    for op in lp.LP_OPS:
        r = lp.synthesize(_pair(), ["a", "b"], op, 1e6)
        assert r.epochs == 1 and r.optimal
        assert r.time_s == pytest.approx(1e6 / 2 / B)


def test_chain_of_three_needs_two_hops() -> None:
    # 0 - 1 - 2, one chunk per link and epoch: rank 0's chunk reaches 2 in the second epoch
    g = nx.DiGraph()
    for u, v in (("0", "1"), ("1", "2")):
        g.add_edge(u, v, capacity=B)
        g.add_edge(v, u, capacity=B)
    r = lp.synthesize(g, ["0", "1", "2"], "all-gather", 3e6)
    assert r.epochs == 2 and r.optimal
    assert r.time_s == pytest.approx(2 * 1e6 / B)
    # all-to-all: 1 relays two blocks each way over links of one block per epoch: 0->2 and 2->0
    # cannot both finish in two epochs with the direct blocks too (each link carries 2 blocks)
    r2 = lp.synthesize(g, ["0", "1", "2"], "all-to-all", 3e6)
    assert r2.epochs == 2
    assert r2.time_s == pytest.approx(2 * 1e6 / B)


def test_latency_adds_whole_epochs() -> None:
    g = _pair()
    for _, _, d in g.edges(data=True):
        d["latency_s"] = 3.5e-5  # 0.7 epochs of 50 us: one more epoch (TE-CCL rounds up)
    r = lp.synthesize(g, ["a", "b"], "all-gather", 1e6)
    assert r.epochs == 2
    assert r.time_s == pytest.approx(2 * 5e-5)


def _teccl(topology: str, chassis_count: int, op: str, kind: str, size: int) -> dict[str, str]:
    text = resources.files("railplan.data.validation").joinpath("teccl_schedules.csv").read_text()
    rows = csv.DictReader(line for line in text.splitlines() if not line.startswith("#"))
    for r in rows:
        key = (r["topology"], int(r["chassis"]), r["op"], r["epoch_type"], int(r["size_bytes"]))
        if key == (topology, chassis_count, op, kind, size):
            return r
    raise KeyError(size)


@pytest.mark.parametrize(
    ("topology", "size"), [("dgx2", 1_000_000), ("dgx2", 64_000_000), ("ndv2", 1_000_000)]
)
def test_matches_teccl_published_all_gather(topology: str, size: int) -> None:
    g, ranks = chassis.dgx2(2) if topology == "dgx2" else chassis.ndv2(2)
    ref = _teccl(topology, 2, "all-gather", "slow", size)
    r = lp.synthesize(g, ranks, "all-gather", size, "slow")
    assert r.epoch_s == pytest.approx(float(ref["epoch_s"]))
    assert r.epochs == int(ref["epochs"])
    assert r.algbw_gb_per_s == pytest.approx(float(ref["algbw_gb_per_s"]), rel=1e-3)


def test_chassis_shapes() -> None:
    g2, r2 = chassis.dgx2(2)
    assert len(r2) == 32 and g2.number_of_edges() == 2 * 32 + 16  # NVSwitch links, 8 IB each way
    g4, r4 = chassis.ndv2(4)
    assert len(r4) == 32 and g4.has_edge("gpu:8", "ibswitch") and g4.has_edge("ibswitch", "gpu:9")


@settings(max_examples=12, deadline=None)
@given(
    system=st.sampled_from(["dgx-a100", "dgx-h100"]),
    gpus=st.sampled_from([2, 4, 8, 16]),
    arch=st.sampled_from(["rail-optimized", "rail-only"]),
    op=st.sampled_from(alg.OPS),
    size=st.sampled_from([2.0**10, 2.0**20, 2.0**30]),
)
def test_never_beats_the_cut_bound(system: str, gpus: int, arch: str, op: str, size: float) -> None:
    sysm = load_system(system)
    g = alg.group(sysm, Network(architecture=arch), gpus)
    nic = int(sysm.nic_gbps)
    r = optimal(g, op, size, Built(arch, 64, nic))
    assert r.time_s is not None
    assert r.time_s >= bound_s(g, op, size, Built(arch, 64, nic)) * (1 - 1e-9)


def test_bad_inputs() -> None:
    with pytest.raises(RailplanError, match="op"):
        lp.synthesize(_pair(), ["a", "b"], "broadcast", 1e6)
    with pytest.raises(RailplanError, match="bytes"):
        lp.synthesize(_pair(), ["a", "b"], "all-gather", float("inf"))
    with pytest.raises(RailplanError, match="epochs"):
        lp.synthesize(_pair(), ["a", "b"], "all-gather", 1e6, "medium")
    g = _pair()
    g.add_edge("c", "a", capacity=B)  # c can send but never receive
    with pytest.raises(RailplanError, match="cannot be reached"):
        lp.synthesize(g, ["a", "b", "c"], "all-gather", 1e6)


def test_cli_optimal() -> None:
    runner = CliRunner()
    out = runner.invoke(
        app,
        [
            "collective",
            "--gpus",
            "16",
            "--network",
            "rail-only",
            "--op",
            "all-gather",
            "--algorithm",
            "ring,optimal",
            "--bytes",
            "1073741824",
            "--json",
        ],
    )
    assert out.exit_code == 0, out.output
    rows = json.loads(out.stdout)["sizes"][0]["algorithms"]
    assert [r["algorithm"] for r in rows] == ["ring", "optimal"]
    assert rows[1]["time_s"] <= rows[0]["time_s"] * 1.01  # discretisation: within an epoch

    import subprocess
    import sys

    cmd = [
        sys.executable,
        "-c",
        "from railplan.cli import main; main()",
        "collective",
        "--gpus",
        "128",
        "--algorithm",
        "optimal",
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert p.returncode == 2 and "at most 64" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
