"""Resource bounds: counts past what the model holds are refused up front, naming the limit."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from railplan.errors import RailplanError
from railplan.limits import MAX_GLOBAL_BATCH, MAX_GPUS, MAX_TOP, check_int
from railplan.specs import Strategy
from railplan.strategies import from_strategies
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
