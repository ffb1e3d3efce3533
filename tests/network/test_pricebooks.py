"""Shipped price books: every number positive, finite and sourced; the public-web-estimates book
prices an 800 Gbps `railplan cost` run to the dollar."""

from __future__ import annotations

import math

import pytest

from railplan.network.cost import SpeedPrices, builtin_price_books, load_price_book
from tests.conftest import Cli

NUMBERS = [k for k in SpeedPrices.model_fields if not k.endswith("_source")]


def test_catalog_has_the_public_book() -> None:
    names = builtin_price_books()
    assert {"rail-only-hoti2024", "rail-only-hotnets23", "public-web-estimates"} <= set(names)


@pytest.mark.parametrize("name", builtin_price_books())
def test_every_number_positive_finite_and_sourced(name: str) -> None:
    book = load_price_book(name)
    assert book.name == name  # the report finds the file's header comment by this name
    assert book.speeds
    for speed, prices in book.speeds.items():
        assert speed > 0
        for key in NUMBERS:
            value = getattr(prices, key)
            if value is None:
                continue
            assert math.isfinite(value) and value > 0, (name, speed, key, value)
            source = getattr(prices, key + "_source")
            assert isinstance(source, str) and source.strip(), (name, speed, key)


def test_public_book_speeds() -> None:
    book = load_price_book("public-web-estimates")
    assert sorted(book.speeds) == [400, 800]  # no sourced 200 Gbps prices were found
    p800 = book.at(800)
    assert (p800.switch_port_usd, p800.transceiver_usd) == (3125, 1250)
    assert not p800.has_power  # no datasheet switch power at 800 Gbps
    p400 = book.at(400)
    assert (p400.switch_port_usd, p400.transceiver_usd) == (562.5, 700)
    assert (p400.switch_port_w, p400.transceiver_w) == (18, 9)


def test_cost_800_with_public_book(cli: Cli) -> None:
    args = ["cost", "--gpus", "4096", "--radix", "64", "--hb-domain", "8", "--nic-gbps", "800"]
    d = cli.json(*args, "--price-book", "public-web-estimates")
    assert d["inputs"]["nic_gbps"] == 800
    assert d["inputs"]["price_book"] == "public-web-estimates"
    opt, only = d["rail_optimized"], d["rail_only"]
    # counts the command prints: 3-tier rail-optimized Clos vs 8 two-tier rail Clos networks
    assert (opt["switches"], opt["switch_ports"], opt["transceivers"]) == (320, 20480, 24576)
    assert (only["switches"], only["switch_ports"], only["transceivers"]) == (192, 12288, 16384)
    # $3,125 per 800G switch port, $1,250 per 800G transceiver
    assert opt["switch_cost_usd"] == 20480 * 3125 == 64_000_000
    assert opt["transceiver_cost_usd"] == 24576 * 1250 == 30_720_000
    assert opt["cost_usd"] == 94_720_000
    assert only["cost_usd"] == 12288 * 3125 + 16384 * 1250 == 58_880_000
    assert d["savings"]["cost"] == pytest.approx(1 - 58_880_000 / 94_720_000)
    assert opt["power_w"] is None and only["power_w"] is None
    assert d["savings"]["power"] is None


def test_cost_800_table_from_the_brief(cli: Cli) -> None:
    r = cli(
        "cost",
        *("--gpus", "1024", "--radix", "64", "--hb-domain", "8", "--nic-gbps", "800"),
        *("--price-book", "public-web-estimates"),
    )
    assert r.exit_code == 0, r.output
    # 3,072 switch ports x $3,125 + 4,096 transceivers x $1,250 = $14.72M in both designs
    assert "3,072" in r.stdout and "4,096" in r.stdout
    assert r.stdout.count("$14.7M") == 2


def test_cost_400_with_public_book_has_power(cli: Cli) -> None:
    d = cli.json(
        *("cost", "--gpus", "1024", "--radix", "64", "--hb-domain", "8"),
        *("--price-book", "public-web-estimates"),
    )
    opt = d["rail_optimized"]
    assert (opt["switch_ports"], opt["transceivers"]) == (3072, 4096)
    assert opt["cost_usd"] == 3072 * 562.5 + 4096 * 700 == 4_595_200
    assert opt["power_w"] == 3072 * 18 + 4096 * 9 == 92_160


def test_200_is_not_priced(cli: Cli) -> None:
    r = cli(
        *("cost", "--gpus", "1024", "--radix", "64", "--hb-domain", "8", "--nic-gbps", "200"),
        *("--price-book", "public-web-estimates"),
    )
    assert r.exit_code == 2
    assert str(r.exception).startswith("nic_gbps")
    assert "400, 800" in str(r.exception)
