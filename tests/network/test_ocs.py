"""The rail-only+ocs design's OCS layer (network/ocs.py): counts by hand, cost and power, spares,
bad input, and what `railplan cost` prints."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from railplan.errors import RailplanError
from railplan.network.cost import OcsPrices, compare, load_price_book
from railplan.network.ocs import ocs_layer
from railplan.network.topology import Cluster, rail_only
from tests.conftest import Cli

BOOK = load_price_book()  # rail-only-hoti2024
assert BOOK.ocs is not None
OCS: OcsPrices = BOOK.ocs


def test_shipped_books_carry_a_sourced_ocs() -> None:
    for name in ("rail-only-hoti2024", "public-web-estimates", "rail-only-hotnets23"):
        o = load_price_book(name).ocs
        assert o is not None and o.ports == 136 and o.fibers_per_link == 2
        assert "ASSUMPTION" in o.port_usd_source  # no public OCS price: said so, not silent
        assert "ASSUMPTION" in o.fibers_per_link_source
        assert "2208.10041" in o.ports_source
    assert OCS.unit_w == 108 and OCS.port_usd == 694


def test_counts_by_hand_1024_gpus_k8() -> None:
    # 1,024 GPUs, one 400G NIC each, 2 fibers per link: 16 OCS ports per 8-GPU domain, so a
    # 136-port OCS holds 8 domains (128 ports); 128 domains -> 16 OCS units
    layer = ocs_layer(rail_only(Cluster(1024, 8, 64)), OCS)
    assert (layer.links, layer.ports_used) == (1024, 2048)
    assert (layer.units, layer.ports_installed) == (16, 16 * 136)
    assert (layer.swap_set_gpus, layer.swap_sets, layer.spare_gpus) == (8, 128, 128)
    assert layer.cost_usd == 16 * 136 * 694 == 1_510_144
    assert layer.power_w == 16 * 108
    c = compare(Cluster(1024, 8, 64)).to_dict()
    o = c["rail_only_ocs"]
    rail_only_usd = 3072 * 694 + 4096 * 199  # switches and transceivers unchanged by the OCS
    assert c["rail_only"]["cost_usd"] == rail_only_usd
    assert o["cost_usd"] == rail_only_usd + 1_510_144
    assert o["transceivers"] == c["rail_only"]["transceivers"] == 4096
    assert o["power_w"] == c["rail_only"]["power_w"] + 1728


def test_large_domain_split_into_swap_sets() -> None:
    # K = 256 (Table II): 512 ports per domain > 136, so each domain is cut into swap sets of
    # 136 // 2 = 68 GPUs, ceil(256 / 68) = 4 OCS units per domain, 128 domains -> 512 units
    layer = ocs_layer(rail_only(Cluster(32768, 256, 64)), OCS, spare_per_swap_set=2)
    assert layer.swap_set_gpus == 68
    assert layer.units == 128 * 4 == layer.swap_sets
    assert layer.spare_gpus == 2 * 512
    assert layer.cost_usd == 512 * 136 * 694


def test_circulators_halve_the_ports(tmp_path: Path) -> None:
    one = OCS.model_copy(update={"fibers_per_link": 1})
    layer = ocs_layer(rail_only(Cluster(1024, 8, 64)), one)
    # 8 ports per domain: 17 domains per OCS, ceil(128 / 17) = 8 units
    assert (layer.ports_used, layer.units) == (1024, 8)


def test_spares_do_not_change_the_hardware_but_idle_gpus() -> None:
    c = rail_only(Cluster(4096, 8, 64))
    layers = [ocs_layer(c, OCS, s) for s in range(0, 8)]
    assert len({la.cost_usd for la in layers}) == 1  # every NIC link passes the OCS anyway
    idle = [la.spare_gpus for la in layers]
    assert idle == [s * 512 for s in range(8)]  # monotone: s per domain, 512 domains
    # a swap set of 8 GPUs keeps at least one working: 8 spares (all idle) are refused
    with pytest.raises(RailplanError, match=r"must be in \[0, 7\]"):
        ocs_layer(c, OCS, 8)
    with pytest.raises(RailplanError, match="≥ 0"):
        ocs_layer(c, OCS, -1)


def test_one_gpu_wider_than_the_ocs() -> None:
    tiny = OCS.model_copy(update={"ports": 3})
    with pytest.raises(RailplanError, match="one GPU needs 4"):
        ocs_layer(rail_only(Cluster(64, 8, 64, nics_per_gpu=2)), tiny)


def test_ocs_price_book_schema(tmp_path: Path) -> None:
    f = tmp_path / "pb.yaml"
    base = (
        "name: mine\nspeeds:\n  400:\n    switch_port_usd: 1\n    switch_port_usd_source: x1x\n"
        "    transceiver_usd: 1\n    transceiver_usd_source: y1y\n"
        "ocs:\n  name: t\n  ports: 16\n  ports_source: abc\n  fibers_per_link: 1\n"
        "  fibers_per_link_source: abc\n  port_usd: 10\n  port_usd_source: abc\n"
    )
    f.write_text(base + "  unit_w: 5\n")
    with pytest.raises(RailplanError, match="unit_w needs unit_w_source"):
        load_price_book(f)
    f.write_text(base)
    book = load_price_book(f)
    d = compare(Cluster(64, 8, 64), book=book).to_dict()["rail_only_ocs"]
    # 8 ports per domain, 2 domains per 16-port OCS, 8 domains -> 4 units x 16 ports x $10
    assert (d["ocs_units"], d["ocs_cost_usd"], d["ocs_power_w"]) == (4, 640, None)


@settings(max_examples=60, deadline=None)
@given(
    domains=st.integers(1, 300),
    k=st.sampled_from([2, 4, 8, 16, 72, 256]),
    f=st.integers(1, 8),
    ports=st.integers(8, 400),
)
def test_layer_properties(domains: int, k: int, f: int, ports: int) -> None:
    o = OCS.model_copy(update={"fibers_per_link": f, "ports": ports})
    c = rail_only(Cluster(domains * k, k, 64))
    la = ocs_layer(c, o, 0)
    assert la.ports_installed >= la.ports_used == c.gpus * f  # every link fits
    assert la.units >= math.ceil(la.ports_used / ports)  # at least the port lower bound
    assert la.swap_set_gpus <= k and la.swap_set_gpus * f <= ports
    # one more domain never needs fewer OCS units or dollars
    more = ocs_layer(rail_only(Cluster((domains + 1) * k, k, 64)), o, 0)
    assert more.units >= la.units and more.cost_usd >= la.cost_usd


def test_cli_cost_shows_the_ocs_column(cli: Cli) -> None:
    r = cli("cost", "--gpus", "1024", "--radix", "64", "--hb-domain", "8")
    assert r.exit_code == 0, r.output
    assert "rail-only+ocs" in r.stdout and "ocs_units" in r.stdout
    assert "$1.5M" in r.stdout and "$4.5M" in r.stdout and "1.7 kW" in r.stdout
    assert "16 × Palomar-class" in r.stdout and "128 spare GPUs" in r.stdout
    d = cli.json(
        "cost", "--gpus", "1024", "--radix", "64", "--hb-domain", "8", "--spare-per-domain", "3"
    )
    assert d["rail_only_ocs"]["spare_gpus"] == 3 * 128


@pytest.mark.parametrize("bad", ["9", "-1", "x"])
def test_cli_bad_spares_one_line_exit_2(cli: Cli, bad: str) -> None:
    r = cli(
        "cost", "--gpus", "1024", "--radix", "64", "--hb-domain", "8", "--spare-per-domain", bad
    )
    assert r.exit_code == 2
    if bad != "x":  # a RailplanError: railplan.cli.main prints it as one line
        msg = str(r.exception)
        assert "spare_per_domain" in msg and "\n" not in msg


def test_tradeoff_by_hand() -> None:
    """$6M of OCS that cuts 16,000 idle GPU-hours to 4,000 costs $500 per recovered hour."""
    from railplan.network.ocs import tradeoff

    cost = {
        "rail_only_ocs": {
            "ocs_cost_usd": 6e6,
            "ocs_power_w": 7e3,
            "over_rail_only": {"cost": 0.5, "power": 0.02},
            "spare_gpus": 512,
        }
    }
    mc = {
        "variants": {
            "rail-only": {"expected_idle_gpu_hours": 16_000.0},
            "rail-only+ocs": {"expected_idle_gpu_hours": 4_000.0},
        }
    }
    t = tradeoff(cost, mc)
    assert t is not None
    assert t["recovered_gpu_hours"] == 12_000.0
    assert t["ocs_usd_per_recovered_gpu_hour"] == pytest.approx(500.0)
    assert tradeoff({"rail_only_ocs": None}, mc) is None
    no_spares = {"variants": {k: {"expected_idle_gpu_hours": 9.0} for k in mc["variants"]}}
    got = tradeoff(cost, no_spares)
    assert got is not None and got["ocs_usd_per_recovered_gpu_hour"] is None


def test_cli_faults_prints_the_tradeoff(cli: Cli) -> None:
    import json

    args = ("faults", "--gpus", "1024", "--trials", "200", "--spare-per-domain", "1")
    r = cli(*args, "--json")
    assert r.exit_code == 0, r.output
    t = json.loads(r.output)["ocs_tradeoff"]
    assert t["spare_gpus"] == 128 and t["recovered_gpu_hours"] > 0
    text = cli(*args)
    assert "per GPU-hour recovered" in text.output
    bad = cli("faults", "--gpus", "1024", "--price-book", "nope")
    assert bad.exit_code == 2 and "price_book" in str(bad.exception)


def test_one_gpu_domains_have_no_ocs_layer() -> None:
    # K = 1: no GPU of the domain can take a failed one's place, so there is no OCS layer to
    # price (it was priced with no spare), and the default spare is none (cost and report run)
    from railplan.network.cost import compare, load_price_book
    from railplan.network.ocs import ocs_layer, spares_per_domain
    from railplan.network.topology import rail_only

    c = compare(Cluster(16, 1, 64), load_price_book())
    assert c.ocs is None and c.rail_only_ocs_cost_usd is None
    assert spares_per_domain(Cluster(16, 1, 64), None, None) == 0
    with pytest.raises(RailplanError, match=r"must be in \[0, 0\]"):
        ocs_layer(rail_only(Cluster(16, 1, 64)), load_price_book().ocs, 1)
