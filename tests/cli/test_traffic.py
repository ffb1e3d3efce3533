"""`railplan traffic` and `railplan reproduce traffic` through the CLI."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

BASE = ("traffic", "--model", "gpt-1.7b", "--gpus", "32", "--global-batch", "64")
KEYS = {
    "bytes_by_kind",
    "hb_bytes",
    "nic_bytes",
    "nic_cross_rail_bytes",
    "pairs_with_traffic_fraction",
    "pairs_with_tp_fraction",
    "max_pair_bytes_hb",
    "max_pair_bytes_nic",
}


def test_traffic_json(cli: Any) -> None:
    r = cli.json(*BASE, "--tp", "4", "--pp", "2")
    assert set(r) >= KEYS
    assert set(r["bytes_by_kind"]) == {"tp", "pp", "dp", "ep", "cp"}
    assert r["bytes_by_kind"]["ep"] == 0
    assert r["hb_bytes"] + r["nic_bytes"] == pytest.approx(sum(r["bytes_by_kind"].values()))
    assert r["nic_cross_rail_bytes"] == 0
    assert r["placement"] == {"kind": "megatron", "order": ["tp", "dp", "pp"]}
    assert r["strategy"]["dp"] == 4


def test_traffic_order_and_rail_aligned(cli: Any) -> None:
    args: tuple[str, ...] = (
        "traffic",
        "--model",
        "gpt-1.7b",
        "--gpus",
        "16",
        "--global-batch",
        "16",
    )
    args += ("--tp", "2", "--pp", "4")
    megatron = cli.json(*args)
    assert megatron["nic_cross_rail_bytes"] > 0
    aligned = cli.json(*args, "--placement", "rail-aligned")
    assert aligned["nic_cross_rail_bytes"] == 0
    assert aligned["placement"]["order"] != ["tp", "dp", "pp"]
    custom = cli.json(*args, "--order", "pp,dp,tp")
    assert custom["placement"]["order"] == ["pp", "dp", "tp"]
    assert custom["nic_bytes_by_kind"]["tp"] > 0


def test_traffic_table(cli: Any) -> None:
    r = cli(*BASE, "--tp", "8")
    assert r.exit_code == 0, r.output
    assert "TP bytes" in r.output and "crossing rails" in r.output


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        (("--order", "tp,pp"), "order"),
        (("--placement", "spiral"), "placement"),
        (("--tp", "3"), "gpus"),
        (("--tp", "8", "--dp", "8"), "gpus"),
        (("--recompute", "most"), "recompute"),
        (("--grad-reduce-bytes", "3"), "grad_reduce_bytes"),
        (("--first-gpus", "0"), "first_gpus"),
        (("--dp", "99999999999999"), "dp"),
        (("--heatmap", "x.jpg"), "heatmap"),
        (("--export", "x.json"), "export"),
        (("--system", "dgx-nope"), "system"),
        (
            ("--tp", "2", "--pp", "2", "--placement", "rail-aligned", "--hb-domain", "3"),
            "placement",
        ),
    ],
)
def test_traffic_errors(cli: Any, extra: tuple[str, ...], field: str) -> None:
    r = cli(*BASE, *extra)
    assert r.exit_code == 2, r.output
    assert str(r.exception).startswith(f"{field}: ")
    assert "\n" not in str(r.exception)


def test_traffic_huge_gpus_is_one_line(cli: Any) -> None:
    """Found by benchmarks/fuzz.py: a GPU count beyond int64 sized the placement's arrays and
    overflowed; it is now bounded like every other command's."""
    r = cli(
        "traffic", "--model", "gpt-1.7b", "--gpus", "18446744073709551619", "--global-batch", "8"
    )
    assert r.exit_code == 2, r.output
    assert str(r.exception).startswith("gpus: must be an integer in [1, 1,000,000,000]")


def test_export_csv_and_parquet(cli: Any, tmp_path: Path) -> None:
    out = tmp_path / "t.csv"
    r = cli.json(*BASE, "--tp", "4", "--pp", "2", "--export", str(out))
    assert r["files"]["export"] == str(out)
    with out.open() as f:
        rows = list(csv.DictReader(f))
    assert set(rows[0]) == {"src", "dst", "kind", "bytes"}
    assert sum(float(x["bytes"]) for x in rows) == pytest.approx(sum(r["bytes_by_kind"].values()))
    pq = tmp_path / "t.parquet"
    res = cli(*BASE, "--export", str(pq))
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        assert res.exit_code == 2
        assert ".csv" in str(res.exception)
        assert not pq.exists()
    else:
        assert res.exit_code == 0 and pq.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_heatmap_and_bars(cli: Any, tmp_path: Path) -> None:
    hm, bars = tmp_path / "h.svg", tmp_path / "b.png"
    r = cli.json(
        *BASE, "--tp", "4", "--heatmap", str(hm), "--first-gpus", "16", "--bars", str(bars)
    )
    assert hm.read_text().lstrip().startswith("<?xml")
    assert bars.read_bytes()[:4] == b"\x89PNG"
    assert set(r["files"]) == {"heatmap", "bars"}


def test_missing_folder(cli: Any, tmp_path: Path) -> None:
    r = cli(*BASE, "--export", str(tmp_path / "nope" / "t.csv"))
    assert r.exit_code == 2 and str(r.exception).startswith("export: ")


def test_reproduce_traffic_json(cli: Any) -> None:
    r = cli.json("reproduce", "traffic")
    claims = {c["quantity"]: c for c in r["claims"]}
    assert claims["GPT-1T: TP share of bytes"]["holds"] is True
    assert claims["GPT-1T: NIC bytes crossing rails"]["ours"] == 0
    assert claims["GPT-1T GH200: NIC bytes crossing rails"]["holds"] is True
    dp_hb = claims["GPT-1T GH200: DP bytes inside HB domains"]["ours"]
    assert 97 < dp_hb < 99  # hierarchical: (x−1)/x of DP bytes in the HB domain, x = 32
    assert {c["figure"] for c in r["claims"]} == {"fig2", "fig3", "fig4"}


def test_reproduce_traffic_table_and_errors(cli: Any) -> None:
    r = cli("reproduce", "traffic")
    assert r.exit_code == 0 and "fig4" in r.output
    bad = cli("reproduce", "traffic", "--figures", "/nonexistent/folder")
    assert bad.exit_code == 2 and str(bad.exception).startswith("figures: ")


def test_traffic_moe_ep(cli: Any) -> None:
    args = ("traffic", "--model", "moe-1.3b", "--gpus", "16", "--global-batch", "32")
    r = cli.json(*args, "--ep", "8")
    assert r["bytes_by_kind"]["ep"] > 0
    dense = cli.json(*args)
    assert dense["bytes_by_kind"]["ep"] == 0
    bad = cli(*args, "--ep", "3")
    assert bad.exit_code == 2 and str(bad.exception).startswith("ep: ")


def test_traffic_takes_the_recompute_knobs_estimate_takes(cli: Any) -> None:
    """--recompute-modules and --recompute-num-layers reach the traffic matrix as they reach
    `estimate`: rerunning the MoE block repeats its TP and EP collectives; the library's
    matrix for the same strategy gives the same bytes."""
    from railplan.specs import Strategy, load_model, load_system
    from railplan.traffic.matrix import stats, traffic
    from railplan.traffic.placement import build_placement

    args = ("traffic", "--model", "mixtral-8x7b", "--system", "dgx-h100", "--gpus", "64")
    args += ("--tp", "2", "--pp", "2", "--ep", "8", "--global-batch", "64")
    args += ("--sequence-parallel", "--recompute", "selective")
    attn = cli.json(*args)["bytes_by_kind"]
    moe = cli.json(*args, "--recompute-modules", "moe")["bytes_by_kind"]
    assert moe["ep"] > attn["ep"] and moe["tp"] > attn["tp"]
    strat = Strategy(
        tp=2,
        pp=2,
        dp=16,
        ep=8,
        global_batch=64,
        sequence_parallel=True,
        recompute="selective",
        recompute_modules=("moe",),
        grad_reduce_bytes=4,
    )
    sy = load_system("dgx-h100")
    p = build_placement("megatron", 2, 2, 16, sy.hb_domain)
    lib = stats(traffic(load_model("mixtral-8x7b"), strat, p)).bytes_by_kind
    assert moe == pytest.approx(lib)
    full = ("--recompute", "full")
    some = cli.json(*args[:-2], *full, "--recompute-num-layers", "2")["bytes_by_kind"]
    every = cli.json(*args[:-2], *full)["bytes_by_kind"]
    assert some["tp"] < every["tp"]


def test_traffic_notes_deepep_shown_as_a_plain_all_to_all(cli: Any) -> None:
    """ep 16 on 72-GPU NVL72 domains: a group straddles two domains, 8 + 8, while the others lie
    in one; the matrix cannot lay DeepEP's dispatch out and says so (text and JSON). On 8-GPU
    servers every group holds 8 GPUs in each of 2 servers: no note."""
    base = ("traffic", "--model", "deepseek-v3", "--tp", "1", "--pp", "1", "--ep", "16")
    base += ("--ep-dispatch", "deepep")
    nvl72 = (*base, "--system", "gb200-nvl72", "--gpus", "144", "--global-batch", "144")
    notes = cli.json(*nvl72)["notes"]
    assert len(notes) == 1 and notes[0].startswith("ep: the expert-parallel groups")
    r = cli(*nvl72)
    assert r.exit_code == 0 and "note: ep: the expert-parallel groups" in r.output
    hgx = (*base, "--system", "hgx-h800", "--gpus", "128", "--global-batch", "128")
    assert cli.json(*hgx)["notes"] == []
