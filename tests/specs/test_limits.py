"""Resource bounds: counts past what the model holds are refused up front, naming the limit."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from railplan.errors import RailplanError
from railplan.limits import MAX_GLOBAL_BATCH, MAX_GPUS, MAX_TOP, check_int
from railplan.specs import Strategy
from railplan.specs.arrays import from_strategies
from tests.conftest import Cli

GPT = ["--model", "gpt-1t"]


@pytest.mark.parametrize(
    ("args", "field", "limit"),
    [
        (
            ["estimate", *GPT, "--gpus", "3072", "--global-batch", "18446744073709551619"],
            "global_batch",
            MAX_GLOBAL_BATCH,
        ),
        (
            ["search", *GPT, "--gpus", "18446744073709551619", "--global-batch", "1536"],
            "gpus",
            MAX_GPUS,
        ),
        (
            ["search", *GPT, "--gpus", "3072", "--global-batch", "9223372036854775807"],
            "global_batch",
            MAX_GLOBAL_BATCH,
        ),
        (
            ["search", *GPT, "--gpus", "3072", "--global-batch", "1536", "--top", "1000000"],
            "top",
            MAX_TOP,
        ),
        (
            [
                "estimate",
                *GPT,
                "--gpus",
                "3072",
                "--global-batch",
                "1536",
                "--tp",
                "100000",
                "--pp",
                "100000",
                "--dp",
                "1000000",
            ],
            "gpus",
            MAX_GPUS,
        ),
    ],
)
def test_counts_past_the_limits_are_one_line_errors(
    cli: Cli, args: list[str], field: str, limit: int
) -> None:
    r = cli(*args)
    assert r.exit_code == 2 and isinstance(r.exception, RailplanError)
    text = str(r.exception)
    assert text.startswith(f"{field}: must be an integer in [1, {limit:,}]") and "\n" not in text


@given(st.integers())
def test_check_int_accepts_exactly_the_range(value: int) -> None:
    if 1 <= value <= MAX_GPUS:
        assert check_int("gpus", value) == value
    else:
        with pytest.raises(RailplanError, match=r"^gpus: must be an integer in \[1, "):
            check_int("gpus", value)


@given(st.integers(1, 2 * MAX_GPUS), st.integers(1, 2 * MAX_GPUS), st.integers(1, 2 * MAX_GPUS))
def test_strategies_never_overflow_int64(tp: int, pp: int, dp: int) -> None:
    s = Strategy(tp=tp, pp=pp, dp=dp, global_batch=dp)
    if tp * pp * dp <= MAX_GPUS:
        arrays = from_strategies(s)
        assert int(arrays.gpus) == tp * pp * dp
    else:
        with pytest.raises(RailplanError, match=r"^(tp|pp|dp|gpus|global_batch): "):
            from_strategies(s)


def _one_line_error(cli: Cli, *args: str) -> str:
    r = cli(*args)
    assert r.exit_code == 2 and isinstance(r.exception, RailplanError), r.output
    text = str(r.exception)
    assert "\n" not in text
    return text


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--days", "3650", "--json"], "trial-hours is over the budget of 25,000,000"),
        (
            ["--radix", "32", "--swap-group", "1", "--days", "365", "--trials", "100000"],
            "trial-hours is over the budget of 25,000,000",
        ),
        (["--gpus", "1000000", "--days", "3650"], "over the budget"),
        (["--gpus", "1000000", "--days", "54"], "events is over the budget of 20,000,000"),
        (["--seed", "-1", "--quantile", "0.5"], "seed: must be an integer in [0, "),
    ],
)
def test_faults_monte_carlo_budget(cli: Cli, args: list[str], needle: str) -> None:
    assert needle in _one_line_error(cli, "faults", *args)


def test_faults_within_budget_runs(cli: Cli) -> None:
    from railplan.network.faults import MC_CELLS_BUDGET

    data = cli.json("faults", "--gpus", "1024", "--days", "365", "--trials", "20")
    assert data["monte_carlo"]["trials"] == 20
    assert MC_CELLS_BUDGET >= 20 * (365 * 24 + 25)


def test_alltoall_on_one_gpu_is_refused(cli: Cli) -> None:
    text = _one_line_error(cli, "alltoall", "--line-rate", "--hb-domain", "1")
    assert text.startswith("gpus: an all-to-all needs at least 2 GPUs")


def test_topology_export_checks_path_and_size_before_building(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import railplan.network.graph as graph

    def never(*args: object) -> None:
        raise AssertionError("the graph was built")

    monkeypatch.setattr(graph, "build_graph", never)
    big = ["topology", "--gpus", "65536", "--hb-domain", "8", "--radix", "64", "--arch"]
    text = _one_line_error(cli, *big, "rail-only", "--export", str(tmp_path / "no" / "g.graphml"))
    assert text.startswith("export: directory ")
    text = _one_line_error(
        cli, *big, "multi-plane", "--planes", "16", "--export", str(tmp_path / "g.json")
    )
    assert f"over the budget of {graph.MAX_GRAPH_ELEMENTS:,}" in text
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "args",
    [
        ["--gpus", "4096", "--schedule", "forwarding", "--no-aggregate"],
        ["--gpus", "1024", "--schedule", "direct", "--no-aggregate"],
    ],
)
def test_flowsim_flow_budget_on_every_schedule(cli: Cli, args: list[str]) -> None:
    from railplan.network.flowsim import MAX_INCIDENCE_NNZ

    text = _one_line_error(cli, "flowsim", "--system", "dgx-h100", *args)
    assert f"budget of {MAX_INCIDENCE_NNZ:,}" in text or "per-pair limit" in text


def test_incidence_budget_is_exact() -> None:
    from railplan.network.flowsim import MAX_INCIDENCE_NNZ, check_incidence

    check_incidence(MAX_INCIDENCE_NNZ, "x")
    with pytest.raises(RailplanError, match="budget of"):
        check_incidence(MAX_INCIDENCE_NNZ + 1, "x")


@pytest.mark.parametrize(
    "args",
    [
        ["infer", "--model", "gpt-1.7b", "--traffic"],  # fuzz find: OverflowError in the summary
        ["estimate", *GPT, "--gpus", "8", "--global-batch", "8"],
    ],
)
def test_hb_domain_past_the_limit_is_a_one_line_error(cli: Cli, args: list[str]) -> None:
    r = cli(*args, "--hb-domain", str(2**63 - 1))
    assert r.exit_code == 2 and isinstance(r.exception, RailplanError), r.output
    text = str(r.exception)
    assert text.startswith("system.hb_domain:") and f"{MAX_GPUS}" in text and "\n" not in text
