"""Hypothesis over the whole typer app, in-process: every command, valid-looking and hostile
values and files. Each run ends with output or a one-line error (never a traceback, a silent
non-zero exit, a run over the time limit, or inf/nan printed with exit 0).

The budget is fixed and small for CI; `benchmarks/fuzz.py` runs ≥ 10,000 invocations in
subprocesses with the FIFO and /dev/zero cases and memory measurement.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.cli.fuzz_cases import argv, commands, run_in_process


def test_every_command_is_fuzzed() -> None:
    names = {" ".join(c.path) for c in commands()}
    assert {"estimate", "search", "sweep", "cost", "faults", "report", "reproduce fig7"} <= names


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(seed=st.integers(0, 2**32 - 1))
def test_cli_fuzz(seed: int, tmp_path_factory: pytest.TempPathFactory) -> None:
    root: Path = tmp_path_factory.getbasetemp() / "fuzz"
    args = argv(random.Random(seed), root)
    outcome = run_in_process(args, timeout_s=60)
    assert not outcome.findings(), (args, outcome.findings(), outcome.traceback, outcome.stderr)


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["reproduce"],
        ["--version"],
        ["estimat"],
        ["estimate", "--gpu", "8"],
        ["estimate", "--model", "gpt-3.6b", "--gpus", "8", "--gpus", "16", "--global-batch", "8"],
        ["estimate", "--model", "gpt-3.6b", "--gpus", "abc", "--global-batch", "8"],
        ["search", "--model", "gpt-3.6b", "--gpus", "1000", "--global-batch", "7"],
        ["report", "--model", "gpt-3.6b", "--gpus", "7"],
    ],
)
def test_newcomer_mistakes_get_a_message(args: list[str]) -> None:
    o = run_in_process(args, timeout_s=60)
    assert o.traceback is None, o.traceback
    assert o.code is not None
    if args == ["--version"]:
        assert o.code == 0 and o.stdout.startswith("railplan ")
        return
    assert o.code == 2 and o.stderr.strip(), (o.code, o.stderr)


def test_repeated_flag_names_it() -> None:
    o = run_in_process(
        ["cost", "--gpus", "8", "--radix", "64", "--hb-domain", "8", "--gpus=16"], timeout_s=60
    )
    assert o.code == 2 and "--gpus" in o.stderr and "--gpus 8, --gpus=16" in o.stderr


def test_nearby_gpu_counts_are_suggested() -> None:
    o = run_in_process(
        ["search", "--model", "gpt-3.6b", "--gpus", "1000", "--global-batch", "7"], 60
    )
    assert "GPU counts near it that work" in o.stderr
    o = run_in_process(["cost", "--gpus", "8192", "--radix", "64", "--hb-domain", "72"], 60)
    assert "8,136 or 8,208" in o.stderr
