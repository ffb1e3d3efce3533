"""Sweeps: grid from flags and YAML, resumable CSV log, local processes, Ray, CLI errors."""

from __future__ import annotations

import csv
import errno
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from railplan.errors import RailplanError
from railplan.explore.sweep import run_sweep
from railplan.explore.sweep_log import read_rows
from railplan.explore.sweep_spec import SweepSpec, parse_vary
from tests.conftest import Cli

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


def test_in_network_fields_vary_and_keep_old_keys() -> None:
    from railplan.explore.sweep import point_key

    v = parse_vary(["sharp=false,TRUE", "nvls=on"])
    assert v == {"sharp": [False, True], "nvls": [True]}
    with pytest.raises(RailplanError, match="sharp: 'maybe' is not true or false"):
        parse_vary(["sharp=maybe"])
    p = SweepSpec.build(base=BASE, vary={"hb_domain": [8]}).points()[0]
    key = json.loads(point_key(p, (1,)))
    assert "nvls" not in key and "sharp" not in key  # sweeps begun before these fields resume
    assert json.loads(point_key(p | {"sharp": True}, (1,)))["sharp"] is True


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
    s = SweepSpec.build(base=BASE, vary={"gpus": [16, 29]})
    r = run_sweep(s, tmp_path / "e.csv", workers=1, progress=False)
    rows = {row["gpus"]: row for row in r.rows}
    assert rows[16]["error"] is None and rows[16]["iteration_s"] > 0
    assert rows[29]["error"].startswith("no valid strategy (")  # 29 ∤ heads, > layers
    assert rows[29]["iteration_s"] is None and rows[29]["configurations_evaluated"] == 0


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


def test_ray_backend_without_ray_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(RailplanError) as err:
        run_sweep(spec(), tmp_path / "r.csv", backend="ray", progress=False)
    assert err.value.field == "backend"
    assert list(tmp_path.iterdir()) == []


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
        (["--vary", "nic_gbps=x"], "nic_gbps"),
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


# ---- bad input fails up front, with one line naming the field ------------------------------

SWEEP = ["sweep", "--model", "gpt-1.7b", "--gpus", "16", "--global-batch", "32", "--workers", "1"]


def run_main(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    """The console entry point: exit code and stderr."""
    from railplan.cli import main

    monkeypatch.setattr(sys, "argv", ["railplan", *argv])
    with pytest.raises(SystemExit) as ex:
        main()
    return int(ex.value.code or 0), capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        (["--gpus", "0", "--vary", "hb_domain=2"], "gpus"),
        (["--global-batch", "0", "--vary", "hb_domain=2"], "global_batch"),
        (["--zero", "7", "--vary", "hb_domain=2"], "zero"),
        (["--network", "foo", "--vary", "hb_domain=2"], "network"),
        (["--vary", "hb_domain=8,0"], "hb_domain"),
        (["--vary", "nic_gbps=400,-1"], "nic_gbps"),
        (["--vary", "gpus=16,0"], "gpus"),
        (["--vary", "model=gpt-1.7b,gpt-nope"], "model"),
        (["--vary", "oversubscription=2"], "network"),
        (["--vary", "hb_domain=2", "--vary", "hb_domain=4"], "vary"),
        (["--vary", "precision=bf16,fp16"], "precision"),  # the search's settings too
        (["--vary", "router_dtype=fp32"], "router_dtype"),
        (["--vary", "fp8_param_gather=true"], "fp8_param_gather"),
        (["--vary", "ep=1,8"], "ep"),
    ],
)
def test_cli_sweep_validates_before_computing(
    extra: list[str],
    field: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import railplan.explore.sweep

    def never(*args: object) -> None:
        raise AssertionError("a point was computed")

    monkeypatch.setattr(railplan.explore.sweep, "evaluate_point", never)
    out = tmp_path / "v.csv"
    given = {a for a in extra if a.startswith("--")}
    base = [a for i, a in enumerate(SWEEP) if a not in given and SWEEP[i - 1] not in given]
    code, err = run_main([*base, "--output", str(out), *extra], monkeypatch, capsys)
    assert code == 2
    assert err.startswith("error: ") and err.count("\n") == 1, err
    named = err.split(": ")[1]  # the field, e.g. system.hb_domain for a varied hb_domain
    assert named == field or named.endswith(f".{field}"), err
    assert not out.exists()


def test_repeated_vary_is_an_error() -> None:
    with pytest.raises(RailplanError, match="hb_domain given twice"):
        parse_vary(["hb_domain=1,2", "nic_gbps=100", "hb_domain=4"])


def test_duplicate_values_give_one_point() -> None:
    assert len(SweepSpec.build(base=BASE, vary={"hb_domain": [2, 2, 4]}).points()) == 2


@pytest.mark.parametrize(
    ("text", "field", "names"),
    [
        ("model: [gpt\n", "spec", "malformed YAML"),
        ("- gpus\n- 8\n", "spec", "mapping"),
        ("vary: [hb_domain]\n", "vary", "mapping"),
        ("vary:\n  hb_domain: 4\n", "vary.hb_domain", "list"),
        ("vary:\n  colour: [1]\n", "vary", "hb_domain"),
        ("colour: red\nvary:\n  hb_domain: [2]\n", "spec", "colour"),
        ("gpus: 8.5\nvary:\n  hb_domain: [2]\n", "gpus", "integer"),
        ("gpus: true\nvary:\n  hb_domain: [2]\n", "gpus", "integer"),
        ("model: 7\nvary:\n  hb_domain: [2]\n", "model", "name"),
        ("vary:\n  hb_tbps: [.inf]\n", "hb_tbps", "number"),
        ("vary:\n  hb_domain: [x]\n", "hb_domain", "integer"),
        ("zero: 1\nvary:\n  hb_domain: [2]\n", "zero", "list"),
        ("zero: [0, 7]\nvary:\n  hb_domain: [2]\n", "zero", "0, 1, 2, 3"),
    ],
)
def test_bad_spec_file(
    text: str,
    field: str,
    names: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    f = tmp_path / "s.yaml"
    f.write_text(text)
    with pytest.raises(RailplanError) as ex:
        SweepSpec.build(base=BASE, vary={}, spec_file=f)
    assert ex.value.field == field and names in ex.value.problem, str(ex.value)
    argv = [*SWEEP, "--spec", str(f), "--output", str(tmp_path / "o.csv")]
    code, err = run_main(argv, monkeypatch, capsys)
    assert code == 2 and err.startswith(f"error: {field}:") and "Traceback" not in err, err


def test_missing_spec_file(tmp_path: Path) -> None:
    with pytest.raises(RailplanError, match=r"^spec: cannot read"):
        SweepSpec.build(base=BASE, vary={}, spec_file=tmp_path / "none.yaml")


def test_zero_from_the_command_line_wins_over_the_spec_file(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("zero: [0, 1]\nvary:\n  hb_domain: [2]\n")
    assert SweepSpec.build(base=BASE, vary={}, spec_file=f, zero=(3,)).zero == (3,)
    assert SweepSpec.build(base=BASE, vary={}, spec_file=f).zero == (0, 1)
    assert SweepSpec.build(base=BASE, vary={"hb_domain": [2]}).zero == (0, 1, 2, 3)


# ---- resuming: answers are kept, errors are computed again ---------------------------------


def test_error_rows_are_retried_on_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import railplan.explore.search

    real = railplan.explore.search.search

    def flaky(*args: Any, **kwargs: Any) -> Any:
        if args[0].system.hb_domain == 2 and args[0].gpus == 16:
            raise RailplanError("gpus", "simulated failure")
        return real(*args, **kwargs)

    out = tmp_path / "f.csv"
    s = SweepSpec.build(base=BASE, vary={"hb_domain": [1, 2, 4], "gpus": [16, 29]})
    monkeypatch.setattr(railplan.explore.search, "search", flaky)
    first = run_sweep(s, out, workers=1, progress=False)
    assert first.computed == 6 and first.failed == 1
    failed = [r for r in first.rows if r["configurations_evaluated"] is None]
    assert [(r["hb_domain"], r["gpus"]) for r in failed] == [(2, 16)]
    assert failed[0]["error"] == "gpus: simulated failure"
    monkeypatch.setattr(railplan.explore.search, "search", real)
    again = run_sweep(s, out, workers=1, progress=False)
    # the failed point is computed again; gpus=29 (no valid strategy) is an answer and is kept
    assert again.computed == 1 and again.skipped == 5 and again.failed == 0
    assert len(again.rows) == 6 and len({r["key"] for r in again.rows}) == 6
    assert len(read_rows(out)) == 6
    no_strategy = [r for r in again.rows if r["gpus"] == 29]
    assert len(no_strategy) == 3 and all(r["error"].startswith("no valid") for r in no_strategy)


def test_cli_sweep_exits_1_when_points_failed(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import railplan.explore.search

    def failing(*args: Any, **kwargs: Any) -> Any:
        raise RailplanError("gpus", "simulated failure")

    monkeypatch.setattr(railplan.explore.search, "search", failing)
    out = tmp_path / "x.csv"
    r = cli(*SWEEP, "--vary", "hb_domain=2,4", "--output", str(out))
    assert r.exit_code == 1 and "2 points failed" in r.output
    assert "simulated failure" in r.output  # shown in the table's strategy column
    # the console script's exit code too (run() outside click's standalone mode)
    from railplan.cli import run

    assert run([*SWEEP, "--vary", "hb_domain=2,4", "--output", str(tmp_path / "y.csv")]) == 1


# ---- files: directories are not created, OS errors are one line, writes are atomic --------


def test_cli_sweep_missing_directory(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "runs" / "k.csv"
    r = cli(*SWEEP, "--vary", "hb_domain=2", "--output", str(out))
    assert r.exit_code == 2
    assert str(r.exception) == f"output: directory {str(out.parent)!r} does not exist"
    assert not out.parent.exists()


def test_cli_sweep_output_is_a_directory(cli: Cli, tmp_path: Path) -> None:
    r = cli(*SWEEP, "--vary", "hb_domain=2", "--output", str(tmp_path))
    assert r.exit_code == 2 and "is a directory" in str(r.exception)
    assert str(r.exception).startswith("output:")


def test_log_that_cannot_be_opened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "o.csv"
    real_open = os.open

    def no_append(path: Any, flags: int, *args: Any) -> int:
        if Path(path) == out and flags & os.O_APPEND:
            raise PermissionError(errno.EACCES, "Permission denied")
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", no_append)
    with pytest.raises(RailplanError, match=r"^output: cannot append to .*Permission denied"):
        run_sweep(spec(), out, workers=1, progress=False)


def test_disk_full_mid_sweep_keeps_finished_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "full.csv"
    real_write = os.write
    lines = 0

    def fill_up(fd: int, data: bytes) -> int:
        nonlocal lines
        if b"gpt-1.7b" in data:
            lines += 1
            if lines > 2:
                raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", fill_up)
    with pytest.raises(RailplanError, match=r"^output: .*No space left on device"):
        run_sweep(spec(), out, workers=1, progress=False)
    monkeypatch.setattr(os, "write", real_write)
    assert len(read_rows(out)) == 2
    assert run_sweep(spec(), out, workers=1, progress=False).computed == 2


def test_torn_line_repair_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "t.csv"
    run_sweep(spec(), out, workers=1, progress=False)
    torn = out.read_text()[:-10]
    out.write_text(torn)

    def broken(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(RailplanError, match=r"^output: cannot write"):
        run_sweep(spec(), out, workers=1, progress=False)
    assert out.read_text() == torn
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv", "t.parquet"]


def test_parquet_write_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "p.csv"
    run_sweep(spec(), out, workers=1, progress=False)
    old = (tmp_path / "p.parquet").read_bytes()

    def half_then_fail(table: Any, where: str, **kwargs: Any) -> None:
        Path(where).write_bytes(b"PAR1 half")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pq, "write_table", half_then_fail)
    s = SweepSpec.build(base=BASE, vary={"hb_domain": [1, 2, 4, 8, 16]})
    with pytest.raises(RailplanError, match=r"^output: cannot write .*p.parquet"):
        run_sweep(s, out, workers=1, progress=False)
    assert (tmp_path / "p.parquet").read_bytes() == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.csv", "p.parquet"]
    assert len(read_rows(out)) == 5  # the CSV got the new point all the same


# ---- one sweep per output, workers die with the sweep, a raising point fails alone ---------

RAILPLAN = str(Path(sys.executable).with_name("railplan"))
SLOW_ARGS = ["--model", "gpt-1t", "--gpus", "3072", "--global-batch", "1536", "--zero", "0,1,2,3"]


def test_a_second_sweep_on_a_locked_output_names_the_holder(tmp_path: Path) -> None:
    from railplan.explore.sweep_log import output_lock

    out = tmp_path / "l.csv"
    with output_lock(out) as lock_path:
        assert lock_path == tmp_path / "l.csv.lock"
        with pytest.raises(RailplanError) as err:
            run_sweep(spec(), out, workers=1, progress=False)
        text = str(err.value)
        assert text.startswith("output: ") and "\n" not in text
        assert f"pid {os.getpid()} on " in text and "--wait" in text
        assert not out.exists()  # nothing was written
    done = run_sweep(spec(), out, workers=1, progress=False)  # released: it runs
    assert done.computed == 4


def _sweep_cmd(out: Path, *extra: str) -> list[str]:
    return [
        RAILPLAN,
        *SWEEP,  # one worker, gpt-1.7b on 16 GPUs
        "--vary",
        "hb_domain=1,2,4,8",
        "--vary",
        "nic_gbps=100,200,400",
        "--output",
        str(out),
        "--json",
        *extra,
    ]


def test_two_concurrent_sweeps_are_serialized_without_duplicates(tmp_path: Path) -> None:
    import subprocess

    out = tmp_path / "c.csv"
    procs = [
        subprocess.Popen(_sweep_cmd(out, "--wait"), stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    results = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    computed = sorted(json.loads(r)["computed"] for r in results)
    assert computed == [0, 12]  # the second waited, then found every point done
    keys = [r["key"] for r in read_rows(out)]
    assert len(keys) == 12 and len(set(keys)) == 12


def test_a_concurrent_sweep_without_wait_is_refused(tmp_path: Path) -> None:
    import subprocess

    out = tmp_path / "c.csv"
    first = subprocess.Popen(_sweep_cmd(out), stdout=subprocess.PIPE, text=True)
    lock = tmp_path / "c.csv.lock"
    _until(lambda: lock.exists() and f"pid {first.pid}" in lock.read_text(), first)
    second = subprocess.run(_sweep_cmd(out), capture_output=True, text=True, timeout=120)
    first.communicate(timeout=300)
    assert first.returncode == 0
    if second.returncode == 0:  # the first finished before the second started: no overlap
        assert json.loads(second.stdout)["computed"] == 0
    else:
        assert second.returncode == 2
        assert second.stderr.count("\n") == 1 and f"pid {first.pid} on " in second.stderr
    keys = [r["key"] for r in read_rows(out)]
    assert len(keys) == 12 and len(set(keys)) == 12


def _children(pid: int) -> set[int]:
    """Pids of the live processes whose parent is `pid` (from /proc)."""
    out = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            out.add(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rfind(")") + 2] != "Z"


def _until(check: Any, proc: Any, limit: int = 1200) -> None:
    import time

    for _ in range(limit):
        if check():
            return
        assert proc.poll() is None, "the sweep ended before the check held"
        time.sleep(0.1)
    raise AssertionError("condition never held")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_kill_9_of_a_sweep_leaves_no_worker_behind(tmp_path: Path) -> None:
    import signal
    import subprocess
    import time

    out = tmp_path / "k.csv"
    cmd = [
        RAILPLAN,
        "sweep",
        *SLOW_ARGS,
        "--vary",
        "hb_domain=1,2,4,8,16,32,64,128,256",
        "--vary",
        "nic_gbps=100,200,400,800",
        "--vary",
        "hb_tbps=3.6,7.2",
        "--workers",
        "2",
        "--output",
        str(out),
        "--json",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _until(lambda: len(_children(proc.pid)) >= 2, proc)
    workers = _children(proc.pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    for _ in range(300):  # workers poll their parent every PARENT_POLL_S
        if not any(_alive(w) for w in workers):
            break
        time.sleep(0.1)
    assert [w for w in workers if _alive(w)] == []
    # and the lock died with them: a new sweep on the output runs
    from railplan.explore.sweep_log import output_lock

    with output_lock(out):
        pass


def test_a_point_that_raises_fails_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import railplan.explore.search

    real = railplan.explore.search.search

    def typeerror(*args: Any, **kwargs: Any) -> Any:
        if args[0].system.hb_domain == 2:
            raise TypeError("'float' object cannot be interpreted as an integer")
        return real(*args, **kwargs)

    monkeypatch.setattr(railplan.explore.search, "search", typeerror)
    for workers in (1, 2):  # in-process and in forked workers (which see the patch)
        r = run_sweep(spec(), tmp_path / f"t{workers}.csv", workers=workers, progress=False)
        assert r.computed == 4 and r.failed == 1
        bad = [row for row in r.rows if row["hb_domain"] == 2]
        assert bad[0]["error"].startswith("TypeError: 'float' object")
        assert all(row["iteration_s"] for row in r.rows if row["hb_domain"] != 2)


def test_rows_come_back_in_grid_order(tmp_path: Path) -> None:
    s = spec(hb_domain=[8, 1, 4, 2], nic_gbps=[400, 100])
    r = run_sweep(s, tmp_path / "o.csv", workers=2, progress=False)
    assert [(row["hb_domain"], row["nic_gbps"]) for row in r.rows] == [
        (h, n) for h in (8, 1, 4, 2) for n in (400.0, 100.0)
    ]


def test_parquet_output_name_logs_to_a_csv_beside_it(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "x.parquet"
    first = run_sweep(spec(), out, workers=1, progress=False)
    assert first.csv_path == tmp_path / "x.csv" and first.parquet_path == out
    assert pq.read_table(out).num_rows == 4
    again = run_sweep(spec(), out, workers=1, progress=False)  # resumes: the log is intact
    assert again.computed == 0 and again.skipped == 4


def test_without_pyarrow_the_output_says_so(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.csv", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    out = tmp_path / "n.csv"
    r = cli(*SWEEP, "--vary", "hb_domain=2,8", "--vary", "nic_gbps=100,400", "--output", str(out))
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())  # rich wraps at the terminal width
    assert "no Parquet copy: pyarrow is not installed (pip install 'railplan[parquet]')" in text
    assert "100.0" not in r.output and "400.0" not in r.output  # integral values as ints
    assert not (tmp_path / "n.parquet").exists()


def test_grid_size_is_bounded() -> None:
    from railplan.explore.sweep_spec import MAX_POINTS

    with pytest.raises(RailplanError, match=f"at most {MAX_POINTS:,} per sweep"):
        SweepSpec.build(
            base=BASE, vary={"hb_domain": list(range(1, 1001)), "nic_gbps": list(range(1, 1001))}
        )


def test_a_binary_output_is_not_a_sweep_log(tmp_path: Path) -> None:
    out = tmp_path / "x.csv"
    out.write_bytes(b"PAR1\xff\xfe\x00binary")
    with pytest.raises(RailplanError, match="not a railplan sweep CSV"):
        run_sweep(spec(), out, workers=1, progress=False)
    assert out.read_bytes() == b"PAR1\xff\xfe\x00binary"


def test_editing_a_model_file_recomputes_its_points(tmp_path: Path) -> None:
    f = tmp_path / "mine.yaml"
    f.write_text("name: mine\nhidden: 2048\nlayers: 24\nheads: 16\nseq: 2048\nvocab: 50000\n")
    s = SweepSpec.build(base={"model": str(f), "global_batch": 64}, vary={"gpus": [16]})
    first = run_sweep(s, tmp_path / "m.csv", workers=1, progress=False)
    f.write_text(f.read_text().replace("layers: 24", "layers: 96"))
    second = run_sweep(s, tmp_path / "m.csv", workers=1, progress=False)
    assert second.computed == 1  # the point's key holds the file's digest
    assert second.rows[0]["iteration_s"] > first.rows[0]["iteration_s"]


def test_a_command_line_value_that_is_also_varied_is_refused() -> None:
    with pytest.raises(RailplanError, match="given as --gpus and varied"):
        SweepSpec.build(base={"gpus": 256}, vary={"gpus": [64, 128]}, fixed_wins=True)


def test_strategy_columns_account_for_every_gpu(tmp_path: Path) -> None:
    """The numeric strategy columns of a row multiply to the sweep's GPUs (cp and ep included:
    Llama 3 70B's best on 64 H100 takes cp 2), and a log with another version's columns is
    named as such."""
    out = tmp_path / "cp.csv"
    base = {"model": "llama-3-70b", "gpus": 64, "global_batch": 128, "system": "dgx-h100"}
    run_sweep(SweepSpec.build(base=base, vary={"hb_domain": [8]}), out, workers=1, progress=False)
    (row,) = read_rows(out)
    dims = [int(row[c]) for c in ("tp", "pp", "dp", "cp")]
    assert dims[0] * dims[1] * dims[2] * dims[3] == 64
    assert f"cp={row['cp']}" in row["strategy"] or row["cp"] == "1"
    assert int(row["ep"]) == 1
    old = tmp_path / "old.csv"
    old.write_text("key,model\nabc,gpt-1.7b\n")
    with pytest.raises(RailplanError, match="was written with other columns"):
        run_sweep(spec(), old, workers=1, progress=False)


# ---- the search's settings as sweep fields -------------------------------------------------


def test_search_fields_fix_and_vary_the_search(tmp_path: Path) -> None:
    """precision and tp as grid fields: each point's best is what `search` finds with the same
    settings; the fixed tp is the best's tp (one column)."""
    from railplan.explore.search import SearchSpace, search
    from railplan.specs import Job, load_model
    from railplan.specs.build import build_network, build_system

    base = {"model": "llama-3-8b", "gpus": 16, "global_batch": 32, "system": "dgx-h100"}
    sw = SweepSpec.build(base=base, vary={"precision": ["bf16", "fp8"], "tp": [1, 2]})
    result = run_sweep(sw, tmp_path / "p.csv", workers=1, progress=False)
    assert [(r["precision"], r["tp"]) for r in result.rows] == [
        ("bf16", 1),
        ("bf16", 2),
        ("fp8", 1),
        ("fp8", 2),
    ]
    system = build_system("dgx-h100", None, None, None, None)
    job = Job(load_model("llama-3-8b"), system, build_network("rail-optimized", None), 16, 32)
    for row in result.rows:
        space = SearchSpace(precision=(row["precision"],), tp=(row["tp"],))
        best = search(job, space, top=1).best
        assert best is not None
        assert row["iteration_s"] == pytest.approx(best.iteration_s, rel=1e-12)
        assert best.strategy.tp == row["tp"]
        assert ("FP8" in row["strategy"]) == (row["precision"] == "fp8")
    fp8 = {r["tp"]: r["iteration_s"] for r in result.rows if r["precision"] == "fp8"}
    bf16 = {r["tp"]: r["iteration_s"] for r in result.rows if r["precision"] == "bf16"}
    assert all(fp8[tp] < bf16[tp] for tp in (1, 2))  # H100's FP8 GEMMs


def test_search_fields_in_a_spec_file_and_in_the_key(tmp_path: Path) -> None:
    """A spec file fixes search settings at its top level (YAML types); a point that sets one
    is keyed by it, one that does not keeps the key it had before these fields existed."""
    from railplan.explore.sweep import point_key

    f = tmp_path / "s.yaml"
    f.write_text(
        "model: mixtral-8x7b\ngpus: 64\nglobal_batch: 256\nsystem: dgx-h100\n"
        "ep_dispatch: deepep\noverlap_dp: false\nvary:\n  network: [rail-optimized, rail-only]\n"
    )
    pts = SweepSpec.build(base={}, vary={}, spec_file=f).points()
    assert [(p["ep_dispatch"], p["overlap_dp"]) for p in pts] == [("deepep", False)] * 2
    key = json.loads(point_key(pts[0], (1,)))
    assert key["ep_dispatch"] == "deepep" and key["overlap_dp"] is False
    plain = json.loads(
        point_key(SweepSpec.build(base=BASE, vary={"hb_domain": [8]}).points()[0], (1,))
    )
    assert not set(plain) & {"precision", "tp", "ep_dispatch", "overlap_dp"}


@pytest.mark.parametrize(
    ("vary", "says"),
    [
        ("precision=bf16,fp16", "^precision: must be one of bf16, fp8"),
        ("router_dtype=fp32", "^router_dtype: .*needs an MoE model"),
        ("fp8_param_gather=true", "^fp8_param_gather: needs precision fp8"),
        ("ep=1,8", "^ep: ep > 1 needs an MoE model"),
        ("tp=0", "^tp: give positive integers"),
        ("pipeline_schedule=zb", "^pipeline_schedule: must be one of 1f1b, dualpipev"),
        ("overlap_ep=maybe", "^overlap_ep: 'maybe' is not true or false"),
    ],
)
def test_bad_search_fields_say_what_is_wrong(vary: str, says: str) -> None:
    """Each refused before any point runs (the CLI path: `test_cli_sweep_validates_before_
    computing`), one line naming the field and why."""
    with pytest.raises(RailplanError, match=says):
        SweepSpec.build(base=BASE, vary=parse_vary([vary]))


def test_a_log_of_the_previous_version_is_resumed(tmp_path: Path) -> None:
    """A log written before the search fields existed (its header without them) keeps its
    finished rows: they are reused, and the file is rewritten with today's columns."""
    from railplan.explore.sweep_log import COLUMNS, PREVIOUS_HEADER

    out = tmp_path / "old.csv"
    first = run_sweep(spec(hb_domain=[2, 8]), out, workers=1, progress=False)
    rows = read_rows(out)
    with out.open("w", newline="") as fh:  # the same rows under the previous header
        writer = csv.DictWriter(
            fh, PREVIOUS_HEADER.split(","), extrasaction="ignore", lineterminator="\n"
        )
        writer.writeheader()
        writer.writerows(rows)
    again = run_sweep(spec(hb_domain=[2, 8, 4]), out, workers=1, progress=False)
    assert (again.computed, again.skipped) == (1, 2)
    assert out.read_text().partition("\n")[0] == ",".join(COLUMNS)
    assert [r["iteration_s"] for r in again.rows if r["hb_domain"] != 4] == [
        r["iteration_s"] for r in first.rows
    ]


def test_each_row_names_the_estimate_that_gives_it(tmp_path: Path, cli: Cli) -> None:
    """A row's `estimate_command` predicts its best: the same time and memory (an ideal
    network's command leaves out the NIC options it refuses; overrides and switches carried)."""
    import shlex

    base = {"model": "llama-3-8b", "gpus": 16, "global_batch": 32, "system": "dgx-h100"}
    vary = {
        "network": ["rail-only", "ideal"],
        "nic_gbps": [200.0],
        "hb_domain": [4],
        "nvls": [True],
        "precision": ["fp8"],
    }
    rows = run_sweep(
        SweepSpec.build(base=base, vary=vary), tmp_path / "e.csv", workers=1, progress=False
    ).rows
    over = base | {"network": "oversubscribed", "oversubscription": 2.0}
    with pytest.raises(RailplanError, match="oversubscription: a 1-tier Clos"):  # as search
        SweepSpec.build(base=over, vary={"nic_gbps": [100.0]})
    over |= {"gpus": 128, "global_batch": 256}
    result = run_sweep(
        SweepSpec.build(base=over, vary={"nic_gbps": [100.0]}),
        tmp_path / "o.csv",
        workers=1,
        progress=False,
    )
    result.rows[:0] = rows
    assert [r["network"] for r in result.rows] == ["rail-only", "ideal", "oversubscribed"]
    for row in result.rows:
        args = shlex.split(row["estimate_command"])
        assert args[:2] == ["railplan", "estimate"] and args.count("--global-batch") == 1
        assert ("--nic-gbps" in args) == (row["network"] != "ideal")
        assert ("--nvls" in args) == (row["network"] != "oversubscribed")
        e = cli.json(*args[1:])
        assert e["iteration_s"] == pytest.approx(row["iteration_s"], rel=1e-9)
        assert e["memory_gib_per_gpu"] == pytest.approx(row["memory_gib_per_gpu"], rel=1e-9)
    assert "--oversubscription 2 " in result.rows[2]["estimate_command"]


def test_nvls_on_a_gpu_without_it_fails_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(RailplanError, match="nvls"):
        run_sweep(
            SweepSpec.build(base=BASE, vary={"nvls": [True]}),
            tmp_path / "n.csv",
            workers=1,
            progress=False,
        )
    assert not (tmp_path / "n.csv").exists()


def test_nvls_off_on_a_system_that_has_it_on_is_in_the_command(tmp_path: Path, cli: Cli) -> None:
    """A system file with NVLink SHARP on, swept with nvls=false: the row's estimate command
    turns it off (`--no-nvls`; without it estimate kept the system's NVLS and another time)."""
    import shlex

    import yaml

    from railplan.specs import load_system

    system = tmp_path / "nvls.yaml"
    data = load_system("dgx-h100").model_dump(mode="json", exclude_none=True) | {"nvls": True}
    data["name"] = "dgx-h100-nvls"
    system.write_text(yaml.safe_dump(data))
    base = {"model": "gpt-1.7b", "gpus": 8, "global_batch": 32, "system": str(system)}
    sw = SweepSpec.build(base=base, vary={"nvls": [False, True], "tp": [1], "pp": [1]}, zero=(0,))
    rows = run_sweep(sw, tmp_path / "v.csv", workers=1, progress=False).rows
    off, on = rows
    assert off["iteration_s"] != on["iteration_s"]  # the DP all-reduce with and without NVLS
    for row, flag in ((off, "--no-nvls"), (on, "--nvls")):
        args = shlex.split(row["estimate_command"])
        assert flag in args
        assert cli.json(*args[1:])["iteration_s"] == pytest.approx(row["iteration_s"], rel=1e-9)


def test_fp8_on_a_gpu_without_it_fails_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(RailplanError, match="precision: fp8 needs a GPU with fp8 tensor cores"):
        SweepSpec.build(base=BASE, vary={"precision": ["bf16", "fp8"]})  # dgx-a100


def test_fp8_settings_make_no_points_at_another_precision() -> None:
    """fp8_param_gather true/false × bf16/fp8: the bf16 point once (the setting means nothing
    there, and is left empty), the fp8 point with each value."""
    base = {"model": "llama-3-8b", "gpus": 16, "global_batch": 32, "system": "dgx-h100"}
    vary = {"precision": ["bf16", "fp8"], "fp8_param_gather": [False, True]}
    pts = SweepSpec.build(base=base, vary=vary).points()
    assert [(p["precision"], p["fp8_param_gather"]) for p in pts] == [
        ("bf16", None),
        ("fp8", False),
        ("fp8", True),
    ]
    with pytest.raises(RailplanError, match=r"^fp8_param_gather: needs precision fp8"):
        SweepSpec.build(base=base | {"fp8_param_gather": True}, vary={"precision": ["bf16"]})


def test_a_degree_no_strategy_takes_is_named_in_its_row(tmp_path: Path) -> None:
    """ep 3 on Mixtral (8 experts): the point is an answer, as one with no valid strategy is,
    and its error names ep and the values that work, as search's refusal does (it named
    tp·cp·pp·dp = gpus and the heads, not the experts)."""
    base = {"model": "mixtral-8x7b", "gpus": 64, "global_batch": 256, "system": "dgx-h100"}
    sw = SweepSpec.build(base=base, vary={"ep": [3]})
    (row,) = run_sweep(sw, tmp_path / "e.csv", workers=1, progress=False).rows
    assert row["configurations_evaluated"] == 0 and row["strategy"] is None
    assert row["error"] == (
        "ep: 3 gives no valid strategy for 64 GPUs and global batch 256; allowed values: 1, 2, 4, 8"
    )
