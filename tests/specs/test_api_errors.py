"""The library's entry points fail as the CLI does: a one-line RailplanError naming the field,
not pydantic's report or an AttributeError deep inside."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from railplan import Network, Strategy, estimate, load_model, load_system
from railplan.errors import RailplanError

CASES: list[tuple[Callable[[], object], str]] = [
    (lambda: Strategy.parse({"tp": 0, "global_batch": 8}), "strategy.tp"),
    (lambda: Strategy.parse({"tpp": 2, "global_batch": 8}), "strategy.tpp"),
    (lambda: Network.parse({"architecture": "foo"}), "network.architecture"),
    (lambda: load_model(None), "model"),  # type: ignore[arg-type]
    (lambda: load_system(3.5), "system"),  # type: ignore[arg-type]
    (lambda: estimate("gpt-22b", "dgx-a100", None), "strategy"),  # type: ignore[arg-type]
    (
        lambda: estimate("gpt-22b", "dgx-a100", Strategy(global_batch=8), network=3),  # type: ignore[arg-type]
        "network",
    ),
]


@pytest.mark.parametrize(("call", "field"), CASES)
def test_bad_arguments_are_one_line_errors_naming_the_field(
    call: Callable[[], object], field: str
) -> None:
    with pytest.raises(RailplanError) as err:
        call()
    assert err.value.field == field
    assert "\n" not in str(err.value)


def test_estimate_takes_a_mapping_and_an_architecture_name() -> None:
    by_objects = estimate(
        "gpt-22b", "dgx-a100", Strategy(tp=8, global_batch=8), Network(architecture="rail-only")
    )
    by_plain = estimate("gpt-22b", "dgx-a100", {"tp": 8, "global_batch": 8}, "rail-only")
    assert by_plain.iteration_s == by_objects.iteration_s
