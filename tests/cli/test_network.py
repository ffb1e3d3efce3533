"""CLI via typer's CliRunner on railplan.cli.app: JSON keys, Table II, error paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import Cli


def test_cost_json(cli: Cli) -> None:
    d = cli.json("cost", "--gpus", "32768", "--radix", "64", "--hb-domain", "256")
    for arch in ("rail_optimized", "rail_only"):
        for key in ("switches", "transceivers", "switch_ports", "tiers", "cost_usd", "power_w"):
            assert key in d[arch]
    assert d["rail_optimized"]["switches"] == 2560 and d["rail_only"]["switches"] == 1536
    assert round(d["savings"]["cost"], 3) == 0.383
    assert d["savings"]["power"] == pytest.approx(0.375)


def test_cost_table(cli: Cli) -> None:
    r = cli("cost", "--gpus", "32768", "--radix", "128", "--hb-domain", "256")
    assert r.exit_code == 0 and "76.6%" in r.stdout and "75.0%" in r.stdout


@pytest.mark.parametrize(
    "args,field",
    [
        (["--radix", "0"], "radix"),
        (["--radix", "63"], "radix"),
        (["--hb-domain", "300"], "hb_domain"),
        (["--nic-gbps", "800"], "nic_gbps"),
        (["--nic-gbps", "300"], "nic_gbps"),
        (["--price-book", "missing.yaml"], "price_book"),
    ],
)
def test_cost_errors(cli: Cli, args: list[str], field: str) -> None:
    opts = {"--gpus": "32768", "--radix": "64", "--hb-domain": "256"}
    opts.update(zip(args[::2], args[1::2], strict=True))
    r = cli("cost", *[x for kv in opts.items() for x in kv])
    assert r.exit_code == 2
    assert str(r.exception).startswith(field)
    assert "\n" not in str(r.exception)


def test_reproduce_table2(cli: Cli) -> None:
    d = cli.json("reproduce", "table2")
    assert len(d["rows"]) == 8
    row = next(r for r in d["rows"] if r["gpus"] == 32768 and r["radix"] == 64)
    assert row["ours"]["sota_switches"] == row["paper_hoti24"]["sota_switches"] == 2560
    r = cli("reproduce", "table2")
    assert r.exit_code == 0 and "7,168 [7,168 | –]" in r.stdout


def test_topology_export(cli: Cli, tmp_path: Path) -> None:
    f = tmp_path / "g.json"
    d = cli.json(
        "topology",
        "--arch",
        "rail-only",
        "--gpus",
        "512",
        "--hb-domain",
        "8",
        "--radix",
        "32",
        "--export",
        str(f),
    )
    assert d["counts"]["switches"] == 48 and d["graph"]["components"] == 8
    data = json.loads(f.read_text())
    assert any(n["id"] == "gpu:0:0" for n in data["nodes"])
    g = tmp_path / "g.graphml"
    r = cli("topology", "--arch", "ideal", "--gpus", "64", "--hb-domain", "64", "--export", str(g))
    assert r.exit_code == 0 and g.exists()
    r = cli("topology", "--arch", "torus", "--gpus", "64", "--hb-domain", "8")
    assert r.exit_code == 2 and "arch" in str(r.exception)
    r = cli(
        "topology",
        "--arch",
        "rail-only",
        "--gpus",
        "64",
        "--hb-domain",
        "8",
        "--export",
        str(tmp_path / "g.txt"),
    )
    assert r.exit_code == 2


def test_faults_and_tile(cli: Cli) -> None:
    d = cli.json("faults", "--gpus", "1024", "--trials", "50", "--spare-per-domain", "1")
    assert set(d["monte_carlo"]["variants"]) == {"rail-optimized", "rail-only", "rail-only+ocs"}
    r = cli("faults", "--gpus", "1024", "--trials", "20")
    assert r.exit_code == 0 and "Monte Carlo" in r.stdout
    t = cli.json("tile", "--gpus", "4096", "--hb-domain", "8", "--jobs", "1024,512,100")
    assert t["unplaced"] == [] and t["used_gpus"] == 1636
    r = cli("tile", "--gpus", "4096", "--hb-domain", "8", "--jobs", "a,b")
    assert r.exit_code == 2 and str(r.exception).startswith("jobs")


def test_cost_plot(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "c.svg"
    r = cli("cost-plot", "--out", str(out), "--radices", "64,128")
    assert r.exit_code == 0 and out.stat().st_size > 1000
    r = cli("cost-plot", "--out", str(tmp_path / "c.gif"))
    assert r.exit_code == 2


def test_topology_planes(cli: Cli) -> None:
    base = ["topology", "--gpus", "4096", "--hb-domain", "8", "--radix", "64"]
    one = cli.json(*base, "--arch", "rail-optimized")["counts"]
    four = cli.json(*base, "--arch", "multi-plane", "--planes", "4")["counts"]
    assert four["fabrics"] == 4 and four["switches"] == 4 * one["switches"]
    assert four["nic_ports"] == 4 * one["nic_ports"]
    for arch in ("rail-optimized", "rail-only", "oversubscribed", "ideal"):
        r = cli(*base, "--arch", arch, "--planes", "4")
        assert r.exit_code == 2 and str(r.exception).startswith("planes: applies only")
    r = cli(*base, "--arch", "rail-only", "--oversubscription", "7")
    assert r.exit_code == 2 and str(r.exception).startswith("oversubscription: applies only")
    r = cli(*base, "--arch", "multi-plane", "--planes", "4", "--nics-per-gpu", "2")
    assert r.exit_code == 2 and str(r.exception).startswith("nics_per_gpu")


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "1e-9", "1e308"])
def test_topology_oversubscription_must_be_finite(cli: Cli, value: str) -> None:
    r = cli(
        "topology",
        "--arch",
        "oversubscribed",
        "--gpus",
        "4096",
        "--hb-domain",
        "8",
        "--oversubscription",
        value,
    )
    assert r.exit_code == 2 and str(r.exception).startswith("oversubscription: ")
