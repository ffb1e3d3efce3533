"""`railplan flowsim`: JSON keys, human table, error paths (exit 2)."""

from __future__ import annotations

from typing import Any

import pytest

KEYS = {"simulated_s", "closed_form_s", "relative_error", "flows", "links", "steps", "elapsed_s"}


@pytest.mark.parametrize(
    "args",
    [
        ["--arch", "rail-optimized"],
        ["--arch", "rail-only"],
        ["--arch", "rail-only", "--collective", "allreduce-ring", "--bytes", "1e8"],
        ["--collective", "allreduce-hierarchical", "--bytes", "1e8"],
    ],
)
def test_json_agrees(cli: Any, args: list[str]) -> None:
    data = cli.json("flowsim", "--system", "dgx-h100", "--gpus", "128", "--radix", "16", *args)
    assert set(data) >= KEYS
    assert abs(data["relative_error"]) < 0.02
    assert data["closed_form_applies"] is True
    assert data["flows"] > 0 and data["links"] > 0 and data["steps"] >= 1


def test_skew_and_oversubscription(cli: Any) -> None:
    data = cli.json(
        "flowsim",
        "--system",
        "dgx-a100",
        "--gpus",
        "64",
        "--arch",
        "rail-only",
        "--radix",
        "8",
        "--skew",
        "zipf:1.2",
        "--bytes-per-pair",
        "1e6",
    )
    assert data["closed_form_applies"] is False
    assert data["simulated_s"] > data["closed_form_s"]
    data = cli.json(
        "flowsim",
        "--system",
        "dgx-h100",
        "--gpus",
        "256",
        "--arch",
        "oversubscribed",
        "--oversubscription",
        "4",
        "--radix",
        "20",
    )
    assert data["cut_bound_s"] == pytest.approx(data["simulated_s"], rel=0.02)


def test_table(cli: Any) -> None:
    r = cli("flowsim", "--system", "dgx-h100", "--gpus", "64", "--radix", "8")
    assert r.exit_code == 0
    assert "simulated" in r.stdout and "closed form" in r.stdout and "relative error" in r.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--gpus", "100"], "hb_domain"),
        (["--gpus", "64", "--skew", "foo"], "skew"),
        (["--gpus", "64", "--arch", "mesh"], "arch"),
        (["--gpus", "64", "--collective", "gather"], "collective"),
        (
            ["--gpus", "64", "--arch", "rail-only", "--schedule", "direct", "--radix", "8"],
            "no network path",
        ),
        (
            ["--gpus", "64", "--collective", "allreduce-ring", "--bytes-per-pair", "5"],
            "bytes_per_pair",
        ),
        (["--gpus", "64", "--bytes", "1", "--bytes-per-pair", "1"], "bytes"),
        (
            [
                "--gpus",
                "64",
                "--arch",
                "oversubscribed",
                "--oversubscription",
                "5",
                "--radix",
                "16",
            ],
            "oversubscription",
        ),
    ],
)
def test_errors(cli: Any, args: list[str], needle: str) -> None:
    r = cli("flowsim", "--system", "dgx-h100", *args)
    assert r.exit_code == 2
    assert needle in str(r.exception)


def test_unknown_system(cli: Any) -> None:
    r = cli("flowsim", "--system", "dgx-z900", "--gpus", "64")
    assert r.exit_code == 2
