"""Comma lists, catalog-name suggestions and ZeRO stages: one-line errors on what users type."""

from __future__ import annotations

import pytest

from railplan.errors import RailplanError, unknown_name
from railplan.explore.sweep_spec import comma_list, parse_vary
from railplan.specs import Strategy


@pytest.mark.parametrize("text", ["10,,20", "10,20,", ",10"])
def test_empty_items_in_a_comma_list_are_an_error(text: str) -> None:
    with pytest.raises(RailplanError, match="arrival_rate"):
        comma_list("arrival_rate", text, float)
    assert comma_list("arrival_rate", " 10 , 20 ", float) == [10.0, 20.0]


def test_empty_items_in_a_vary_are_an_error() -> None:
    with pytest.raises(RailplanError, match="vary: 'gpus=512,,1024': an empty value"):
        parse_vary(["gpus=512,,1024"])


def test_suggestions_start_with_what_was_typed() -> None:
    known = ["gpt-3-175b", "gpt-3.6b", "gpt-310b", "gpt-39b", "llama-3-8b"]
    hint = str(unknown_name("model", "gpt3", known))
    # the names that begin with "gpt3" up to a separator come first, gpt-39b only after them
    assert hint.index("gpt-3-175b") < hint.index("gpt-39b")
    assert hint.index("gpt-3.6b") < hint.index("gpt-310b")


def test_zero_stages_and_their_error() -> None:
    assert Strategy(global_batch=8, zero="2").zero == 2  # as a YAML file may write it
    with pytest.raises(ValueError, match="0, 1, 2 or 3"):
        Strategy(global_batch=8, zero=4)
