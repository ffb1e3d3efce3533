"""The console entry point: usage and domain errors exit 2 with one line, no traceback."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from railplan.cli import main

_ESTIMATE = ["estimate", "--model", "gpt-175b", "--gpus", "128", "--global-batch", "256"]
_ESTIMATE += ["--tp", "8", "--pp", "8"]

_TRAFFIC = ["traffic", "--model", "gpt-175b", "--gpus", "64", "--tp", "8", "--pp", "8"]
_TRAFFIC += ["--global-batch", "64"]
_INFER = ["infer", "--model", "llama-2-70b", "--system", "dgx-h100", "--gpus", "8", "--tp", "2"]

_FLOWSIM = ["flowsim", "--system", "dgx-a100", "--gpus", "64"]

BAD_INVOCATIONS = [
    (["estimate", "--model", "gpt-175b", "--gpus", "2.5"], "--gpus"),
    (["estimate", "--gpus", "8"], "--model"),
    (["estimate", "--model", "gpt-175b", "--gpus", "8", "--bogus", "1"], "--bogus"),
    (["nosuchcommand"], "nosuchcommand"),
    (["estimate", "--model", "gpt-175bb", "--gpus", "8", "--global-batch", "8"], "gpt-175b"),
    (
        ["estimate", "--model", "gpt-175b", "--gpus", "64", "--global-batch", "64", "--tp", "7"],
        "tp",
    ),
    (["cost", "--gpus", "-5", "--radix", "64", "--hb-domain", "8"], "gpus"),
    (["search", "--model", "gpt-22b", "--gpus", "8", "--global-batch", "x"], "--global-batch"),
    # a fixed dimension with no valid strategy is named, with the values that have one
    (["search", "--model", "gpt-22b", "--gpus", "64", "--global-batch", "64", "--tp", "5"], "tp:"),
    (["search", "--model", "gpt-22b", "--gpus", "64", "--global-batch", "64", "--pp", "3"], "pp:"),
    # options that would have no effect are refused, not silently echoed
    (["search", "--model", "gpt-22b", "--gpus", "64", "--global-batch", "64", "--ep", "2"], "ep:"),
    ([*_ESTIMATE, "--zero-shard", "2"], "zero_shard"),
    ([*_ESTIMATE, "--ep-dispatch", "deepep"], "ep_dispatch"),
    ([*_ESTIMATE, "--recompute-modules", "core_attn"], "recompute_modules"),
    ([*_TRAFFIC, "--first-gpus", "16"], "first_gpus"),  # no heatmap to size
    ([*_TRAFFIC, "--heatmap", "h.png", "--first-gpus", "16384"], "first_gpus"),  # bounded
    ([*_TRAFFIC, "--heatmap", "h.png", "--bars", "h.png"], "bars"),  # one file, two outputs
    ([*_INFER, "--requests", "7"], "requests"),  # no load simulation to size
    ([*_INFER, "--dispatch", "least-busy"], "dispatch"),
    ([*_INFER, "--arrival-rate", "5", "--plot", "s.png", "--heatmap", "s.png"], "heatmap"),
    ([*_ESTIMATE, "--zero-schedule", "step"], "zero_schedule"),  # no ZeRO-2/3 to schedule
    ([*_FLOWSIM, "--collective", "allreduce-ring", "--schedule", "forwarding"], "schedule"),
    ([*_FLOWSIM, "--seed", "5"], "seed"),  # no skew to seed
    (["cost-plot", "--radices", "64,64", "--out", "never.png"], "radices"),  # a choice twice
    (
        [
            "sweep",
            "--model",
            "gpt-175b",
            "--gpus",
            "128",
            "--global-batch",
            "256",
            "--vary",
            "hb_domain=8",
            "--ray-address",
            "ray://x:1",
            "--output",
            "never.csv",
        ],
        "ray_address",
    ),
]


@pytest.mark.parametrize(("argv", "named"), BAD_INVOCATIONS)
def test_main_exits_2_with_a_short_message(
    argv: list[str], named: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["railplan", *argv])
    with pytest.raises(SystemExit) as ex:
        main()
    assert ex.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert named in err, err


@pytest.mark.parametrize(
    "argv",
    [
        ["estimate", "--model", "gpt-175b", "--gpu", "128"],  # mistyped flag
        ["estimate", "--gpus", "8"],  # missing option
        ["nosuchcommand"],
        ["estimate", "--model", "gpt-175b", "--gpus", "12.5"],  # not an integer
    ],
)
def test_usage_errors_are_one_line(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["railplan", *argv])
    with pytest.raises(SystemExit) as ex:
        main()
    assert ex.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines


def test_running_out_of_memory_is_one_line_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import numpy as np

    import railplan.explore.search as search_module

    def too_big(*args: object, **kwargs: object) -> None:
        np.empty(1 << 62, dtype=np.uint8)  # numpy's _ArrayMemoryError, a MemoryError

    monkeypatch.setattr(search_module, "search", too_big)
    argv = ["search", "--model", "gpt-22b", "--gpus", "8", "--global-batch", "8"]
    monkeypatch.setattr(sys, "argv", ["railplan", *argv])
    with pytest.raises(SystemExit) as ex:
        main()
    assert ex.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "out of memory" in lines[0], lines


def test_main_success_exits_0(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["cost", "--gpus", "1024", "--radix", "64", "--hb-domain", "8", "--json"]
    monkeypatch.setattr(sys, "argv", ["railplan", *argv])
    main()  # returns normally: exit code 0
    assert json.loads(capsys.readouterr().out)["rail_optimized"]["switches"] == 48


@pytest.mark.skipif(shutil.which("railplan") is None, reason="console script not installed")
def test_console_script_usage_error_is_one_line() -> None:
    r = subprocess.run(
        ["railplan", "estimate", "--model", "gpt-175b", "--gpus", "2.5"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert "--gpus" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
