"""Cost and power figures keep their precision at every cluster size, one unit per row."""

from __future__ import annotations

from railplan.units import fmt_usd, fmt_watts


def test_small_amounts_are_not_rounded_to_zero() -> None:
    assert fmt_usd(47_600) == "$47.6k"
    assert fmt_usd(0) == "$0"
    assert fmt_usd(164_000) == "$0.16M"
    assert fmt_usd(12_345_678) == "$12.3M"
    assert fmt_watts(1_300) == "1.3 kW"
    assert fmt_watts(2_360_000) == "2.36 MW"


def test_a_row_keeps_the_unit_of_its_largest_value() -> None:
    assert fmt_usd(69_900, like=164_000) == "$0.07M"
    assert fmt_watts(160_000, like=2_360_000) == "0.16 MW"
