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
        (["--gpus", "100"], "gpus: 100 is not a multiple"),
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


@pytest.mark.parametrize("arch", ["rail-optimized", "rail-only"])
def test_oversubscription_needs_the_oversubscribed_arch(cli: Any, arch: str) -> None:
    r = cli(
        "flowsim", "--system", "dgx-h100", "--gpus", "64", "--arch", arch, "--oversubscription", "4"
    )
    assert r.exit_code == 2
    assert str(r.exception).startswith("oversubscription: applies only to arch 'oversubscribed'")


def test_oversubscription_default_and_value_reach_the_report(cli: Any) -> None:
    args = ["flowsim", "--system", "dgx-h100", "--gpus", "64", "--radix", "16"]
    assert cli.json(*args)["inputs"]["oversubscription"] == 1.0
    over = cli.json(*args, "--arch", "oversubscribed")
    assert over["inputs"]["oversubscription"] == 3.0
    assert (
        cli.json(*args, "--arch", "oversubscribed", "--oversubscription", "7")["inputs"][
            "oversubscription"
        ]
        == 7.0
    )


@pytest.mark.parametrize(
    ("args", "start"),
    [
        (["--bytes", "0"], "bytes: must be a finite number in [1, 1e+15] bytes; got 0.0"),
        (["--bytes", "-5"], "bytes: must be a finite number"),
        (["--bytes", "nan", "--collective", "allreduce-ring"], "bytes: must be a finite number"),
        (["--bytes-per-pair", "inf"], "bytes_per_pair: must be a finite number"),
        (["--bytes-per-pair", "1e-9"], "bytes_per_pair: must be a finite number"),
        (["--arch", "oversubscribed", "--oversubscription", "nan"], "oversubscription: nan"),
        (["--arch", "oversubscribed", "--oversubscription", "-1"], "oversubscription: -1.0"),
        (["--skew", "zipf:1", "--seed", "-1"], "seed: must be an integer"),
    ],
)
def test_bad_numbers_name_their_field(cli: Any, args: list[str], start: str) -> None:
    r = cli("flowsim", "--system", "dgx-h100", "--gpus", "64", *args)
    assert r.exit_code == 2
    assert str(r.exception).startswith(start), str(r.exception)


@pytest.mark.parametrize(
    ("collective", "limit"), [("alltoall", "8,192"), ("allreduce-ring", "65,536")]
)
def test_huge_gpus_names_the_simulator_limit(cli: Any, collective: str, limit: str) -> None:
    r = cli("flowsim", "--system", "dgx-h100", "--gpus", "100000000", "--collective", collective)
    assert r.exit_code == 2
    msg = str(r.exception)
    assert msg.startswith(f"gpus: must be in [1, {limit}] for {collective}")
    assert "graph export" not in msg and "closed forms" in msg


def test_flowsim_refuses_long_pair_by_pair_runs(cli) -> None:  # type: ignore[no-untyped-def]
    """An all-to-all that cannot be aggregated into classes is simulated pair by pair; past
    MAX_SIMULATED_PAIRS (128 GPUs) it is refused before any work (the fuzz found 1,024 MI300X on
    an oversubscribed fabric running past two minutes)."""
    from railplan.network.flowsim.maxmin import MAX_SIMULATED_PAIRS

    args = ("flowsim", "--system", "mi300x", "--arch", "oversubscribed", "--bytes-per-pair", "400")
    r = cli(*args, "--gpus", "1024")
    assert r.exit_code == 2 and "per-pair limit" in str(r.exception)
    assert f"{MAX_SIMULATED_PAIRS:,}" in str(r.exception)
    ok = cli(*args, "--gpus", "128")
    assert ok.exit_code == 0, ok.output


@pytest.mark.parametrize(
    ("system", "gpus", "says"),
    [
        ("dgx-h100", "4", "4 is not a multiple of dgx-h100's HB domain of K=8 GPUs; e.g. 8"),
        ("dgx-h100", "60", "e.g. 56 or 64"),
        ("dgx-gh200", "128", "K=256 GPUs; e.g. 256"),
    ],
)
def test_a_job_that_is_not_whole_domains_names_gpus(
    cli: Any, system: str, gpus: str, says: str
) -> None:
    """flowsim takes K from the system (no --hb-domain): the error names the job's size, the
    one thing the user can change, with sizes that work."""
    r = cli("flowsim", "--system", system, "--gpus", gpus)
    assert r.exit_code == 2
    assert str(r.exception).startswith("gpus: ") and says in str(r.exception)


def test_a_k_that_does_not_divide_suggests_divisors_that_exist() -> None:
    from railplan.errors import RailplanError
    from railplan.network.topology import check_cluster

    with pytest.raises(RailplanError, match=r"use a divisor, e\.g\. 6, 10, or 56 or 64 GPUs"):
        check_cluster(60, 8)
    with pytest.raises(RailplanError, match=r"8 does not divide gpus=61; use 56 or 64 GPUs"):
        check_cluster(61, 8)  # a prime: no divisor but 1 and itself


def test_the_divisor_hint_for_a_large_k_on_a_prime_size() -> None:
    from railplan.errors import RailplanError
    from railplan.network.topology import check_cluster

    # a prime number of GPUs has no divisor to suggest (the hint ran over every integer to K·64)
    with pytest.raises(RailplanError, match=r"use 980,000,000 or 1,000,000,000 GPUs"):
        check_cluster(999_999_937, 20_000_000)
