"""Sweeps: grid from flags and YAML, resumable CSV log, local processes, Ray, CLI errors."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from railplan.errors import RailplanError
from railplan.sweep import SweepSpec, parse_vary, read_rows, run_sweep

BASE = {"model": "gpt-1.7b", "gpus": 16, "global_batch": 32, "system": "dgx-a100"}


def spec(**vary: list[object]) -> SweepSpec:
    return SweepSpec.build(base=BASE, vary=vary or {"hb_domain": [1, 2, 4, 8]})


def test_parse_vary_and_grid() -> None:
    v = parse_vary(["hb_domain=1,2", "nic_gbps=100,400", "network=rail-only,ideal"])
    assert v == {"hb_domain": [1, 2], "nic_gbps": [100.0, 400.0], "network": ["rail-only", "ideal"]}
    pts = SweepSpec.build(base=BASE, vary=v).points()
    assert len(pts) == 8
    assert {p["hb_domain"] for p in pts} == {1, 2} and all(p["gpus"] == 16 for p in pts)
    for bad in (["hb_domain"], ["colour=1"], ["hb_domain=x"], ["gpus="]):
        with pytest.raises(RailplanError):
            parse_vary(bad)
    with pytest.raises(RailplanError, match="model"):
        SweepSpec.build(base={"gpus": 8, "global_batch": 8}, vary={"hb_domain": [1]})
    with pytest.raises(RailplanError, match="vary"):
        SweepSpec.build(base=BASE, vary={})


def test_yaml_spec(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text(
        "model: gpt-1.7b\ngpus: 8\nglobal_batch: 16\nzero: [0, 1]\n"
        "vary:\n  nics_per_gpu: [1, 0.5]\n"
    )
    s = SweepSpec.build(base={"gpus": 16}, vary={}, spec_file=f)
    assert s.zero == (0, 1)
    assert [p["nics_per_gpu"] for p in s.points()] == [1.0, 0.5]
    assert all(p["gpus"] == 16 for p in s.points())  # the command line wins


def test_resume_after_kill(tmp_path: Path) -> None:
    out = tmp_path / "k.csv"
    first = run_sweep(spec(), out, workers=1, progress=False)
    assert first.computed == 4 and first.skipped == 0
    full = {r["key"]: r["iteration_s"] for r in first.rows}
    # Simulate a kill: the last point's line torn half-way, one point missing.
    lines = out.read_text().splitlines(keepends=True)
    out.write_text("".join(lines[:-2]) + lines[-1][: len(lines[-1]) // 2])
    assert len(read_rows(out)) == 2
    again = run_sweep(spec(), out, workers=1, progress=False)
    assert again.computed == 2 and again.skipped == 2
    assert {r["key"]: r["iteration_s"] for r in again.rows} == full
    third = run_sweep(spec(), out, workers=1, progress=False)
    assert third.computed == 0 and len(third.rows) == 4
    with out.open() as fh:
        assert len(list(csv.DictReader(fh))) == 4


def test_local_processes_match_in_process(tmp_path: Path) -> None:
    a = run_sweep(spec(), tmp_path / "a.csv", workers=1, progress=False)
    b = run_sweep(spec(), tmp_path / "b.csv", workers=2, progress=False)
    key = lambda r: r["key"]  # noqa: E731
    assert [r["iteration_s"] for r in sorted(a.rows, key=key)] == [
        r["iteration_s"] for r in sorted(b.rows, key=key)
    ]
    # rail-only time never grows with K for this model
    times = [r["iteration_s"] for r in sorted(a.rows, key=lambda r: r["hb_domain"])]
    assert times == sorted(times, reverse=True)


def test_bad_point_is_recorded_not_fatal(tmp_path: Path) -> None:
    s = SweepSpec.build(base=BASE, vary={"gpus": [16, 7]})
    r = run_sweep(s, tmp_path / "e.csv", workers=1, progress=False)
    rows = {row["gpus"]: row for row in r.rows}
    assert rows[16]["error"] is None and rows[16]["iteration_s"] > 0
    assert rows[7]["error"].startswith("no valid strategy (")  # 7 ∤ heads, batch 32
    assert rows[7]["iteration_s"] is None and rows[7]["configurations_evaluated"] == 0


def test_parquet_when_pyarrow(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    r = run_sweep(spec(), tmp_path / "p.csv", workers=1, progress=False)
    assert r.parquet_path is not None
    assert pq.read_table(r.parquet_path).num_rows == 4


def test_ray_backend(tmp_path: Path) -> None:
    ray = pytest.importorskip("ray")
    try:
        r = run_sweep(spec(), tmp_path / "r.csv", backend="ray", workers=2, progress=False)
    finally:
        ray.shutdown()
    local = run_sweep(spec(), tmp_path / "l.csv", workers=1, progress=False)
    assert sorted(x["iteration_s"] for x in r.rows) == sorted(x["iteration_s"] for x in local.rows)


def test_cli_sweep(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "c.csv"
    args = [
        "sweep",
        "--model",
        "gpt-1.7b",
        "--gpus",
        "16",
        "--global-batch",
        "32",
        "--vary",
        "hb_domain=2,8",
        "--vary",
        "nic_gbps=100,400",
        "--output",
        str(out),
        "--workers",
        "1",
    ]
    data = cli.json(*args)
    assert data["computed"] == 4 and len(data["rows"]) == 4
    again = cli.json(*args)
    assert again["computed"] == 0 and again["skipped"] == 4
    table = cli(*args)
    assert table.exit_code == 0 and "already in" in table.output


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        (["--vary", "colour=1"], "vary"),
        (["--backend", "slurm"], "backend"),
        (["--vary", "hb_domain=x"], "hb_domain"),
    ],
)
def test_cli_sweep_errors(cli, tmp_path: Path, extra: list[str], field: str) -> None:  # type: ignore[no-untyped-def]
    args = [
        "sweep",
        "--model",
        "gpt-1.7b",
        "--gpus",
        "16",
        "--global-batch",
        "32",
        "--output",
        str(tmp_path / "x.csv"),
        "--vary",
        "hb_domain=2",
        *extra,
    ]
    r = cli(*args)
    assert r.exit_code == 2
    assert str(r.exception).startswith(f"{field}:")


def test_cli_sweep_rejects_foreign_csv(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    f = tmp_path / "other.csv"
    f.write_text("a,b\n1,2\n")
    r = cli(
        "sweep",
        "--model",
        "gpt-1.7b",
        "--gpus",
        "16",
        "--global-batch",
        "32",
        "--vary",
        "hb_domain=2",
        "--output",
        str(f),
    )
    assert r.exit_code == 2 and str(r.exception).startswith("output:")
