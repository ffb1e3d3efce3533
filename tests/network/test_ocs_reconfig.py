"""The ocs-reconfigured architecture (network/ocs_reconfig.py): counts by hand, cost and power,
monotonicity in GPUs, the rail collectives, bad input, and what `topology` and `cost` print."""

from __future__ import annotations

import math

import pytest

from railplan.errors import RailplanError
from railplan.network.cost import load_price_book
from railplan.network.ocs_reconfig import (
    ocs_reconfigured,
    rail_collectives,
    ring_all_to_all_s,
)
from tests.conftest import Cli

BOOK = load_price_book()  # rail-only-hoti2024: 136-port OCS at $694 a port, 108 W; $199, 9 W


def test_counts_by_hand_64_gpus_k8() -> None:
    # 8 domains × 8 rails, one NIC each: 8 rail fabrics of 8 NICs; a NIC's 2 fibers take one
    # input and one output (1 port), so a 136-port unit takes 136 // 8 = 17 fabrics: 1 unit
    c = ocs_reconfigured(64, 8, BOOK)
    assert (c.domains, c.fabrics, c.links, c.transceivers) == (8, 8, 64, 64)
    assert (c.pods, c.pod_domains, c.max_job_gpus) == (1, 8, 64)
    assert (c.fabrics_per_unit, c.units, c.ports_used, c.ports_installed) == (17, 1, 64, 136)
    assert c.ocs_cost_usd == 136 * 694 and c.transceiver_cost_usd == 64 * 199
    assert c.cost_usd == 107_120
    assert c.power_w == 108 + 64 * 9 == 684


def test_pods_when_a_rail_outgrows_one_ocs() -> None:
    # 16,384 GPUs K=8: 2,048 domains per rail > 136, so ceil(2048 / 136) = 16 pods of 128
    # domains; one unit per rail and pod: 8 × 16 = 128 units; a job fits one pod (1,024 GPUs)
    c = ocs_reconfigured(16384, 8, BOOK)
    assert (c.pods, c.pod_domains, c.units, c.max_job_gpus) == (16, 128, 128, 1024)
    assert c.ports_installed == 128 * 136 and c.transceivers == 16384
    # K = 256 (Table II): 128 domains fit one unit per rail: 256 units, any job fits
    big = ocs_reconfigured(32768, 256, BOOK)
    assert (big.pods, big.units, big.max_job_gpus) == (1, 256, 32768)


def test_nics_and_circulators() -> None:
    two = ocs_reconfigured(1024, 8, BOOK, nics_per_gpu=2)  # 16 rail×NIC fabrics of 128 domains
    assert (two.fabrics, two.units, two.transceivers, two.ports_used) == (16, 16, 2048, 2048)
    assert BOOK.ocs is not None
    circ = BOOK.model_copy(update={"ocs": BOOK.ocs.model_copy(update={"fibers_per_link": 1})})
    c = ocs_reconfigured(16384, 8, circ)  # 272 NICs per unit: 8 pods of 256 domains
    assert (c.pods, c.pod_domains, c.units, c.ports_used) == (8, 256, 64, 8192)


def test_tpu_v4_pod_takes_48_ocses() -> None:
    # TPU v4 (Jouppi et al., ISCA 2023): 64 cubes, 96 optical link ends each (6 faces × 16),
    # i.e. 48 fabrics (face position) × 2 ends per cube: as K = 48 "rails" × 2 NICs, 64 domains;
    # 64-end fabrics, 2 per 136-port unit -> 48 OCS units, the paper's 48 OCSes
    c = ocs_reconfigured(64 * 48, 48, BOOK, nics_per_gpu=2)
    assert (c.units, c.fabrics_per_unit, c.pods) == (48, 2, 1)


@pytest.mark.parametrize("k", [4, 8, 72, 256])
def test_cost_and_power_monotone_in_gpus(k: int) -> None:
    prev_cost = prev_power = 0.0
    for domains in range(1, 700):
        c = ocs_reconfigured(domains * k, k, BOOK)
        assert c.power_w is not None
        assert c.cost_usd >= prev_cost and c.power_w >= prev_power, domains
        assert c.ports_used <= c.ports_installed
        prev_cost, prev_power = c.cost_usd, c.power_w


def test_no_switches_fewer_transceivers_than_rail_only() -> None:
    from railplan.network.topology import Cluster, rail_only

    for gpus, k in ((1024, 8), (16384, 8), (32768, 256)):
        assert (
            ocs_reconfigured(gpus, k, BOOK).transceivers * 2
            <= rail_only(Cluster(gpus, k, 64)).transceivers
        )


def test_reconfiguration_time_scales_the_stall() -> None:
    a = ocs_reconfigured(16384, 8, BOOK, reconfig_s=1.0)
    b = ocs_reconfigured(16384, 8, BOOK, reconfig_s=10.0)
    assert a.cost_usd == b.cost_usd  # hardware does not depend on it
    assert b.reconfig_gpu_hours_per_day == pytest.approx(10 * a.reconfig_gpu_hours_per_day)
    # Llama 3 hardware causes (GPU 268, host 46, NIC 7 in 54 days at 16,384 GPUs)
    assert a.swaps_per_day == pytest.approx((268 + 46 + 7) / 54)
    assert a.reconfig_gpu_hours_per_day == pytest.approx(a.swaps_per_day * 1024 / 3600)


@pytest.mark.parametrize("bad", [-1, -1e-9, math.nan, math.inf, 86_401, True, "1"])
def test_bad_reconfig_s(bad: object) -> None:
    with pytest.raises(RailplanError, match="reconfig_s"):
        ocs_reconfigured(64, 8, BOOK, reconfig_s=bad)  # type: ignore[arg-type]


def test_book_without_ocs() -> None:
    with pytest.raises(RailplanError, match="no ocs entry"):
        ocs_reconfigured(64, 8, BOOK.model_copy(update={"ocs": None}))


def test_rail_collectives_closed_forms() -> None:
    c = ocs_reconfigured(1024, 8, BOOK)  # one pod of 128 domains, 50 GB/s per NIC
    r = rail_collectives(c, 1e9)
    ar = r["all_reduce_s"]
    assert ar["ocs_reconfigured"] == ar["rail_only"] == pytest.approx(2 * 127 / 128 * 1e9 / 50e9)
    a2a = r["all_to_all_s"]
    assert a2a["rail_only"] == pytest.approx(127 / 128 * 1e9 / 50e9)
    assert a2a["ocs_reconfigured"] == pytest.approx(127 / 2 * 1e9 / 50e9)
    assert r["all_to_all_slowdown"] == pytest.approx(64)  # y / 2 hops on average
    assert ring_all_to_all_s(2, 1.0, 1.0) == 1.0  # two domains: one hop, no forwarding


def test_cost_default_output_has_no_ocs_reconfigured(cli: Cli) -> None:
    args = ("cost", "--gpus", "1024", "--radix", "64", "--hb-domain", "8")
    assert "ocs_reconfigured" not in cli.json(*args)
    assert "ocs-reconfigured" not in cli(*args).stdout
    d = cli.json(*args, "--ocs-reconfigured", "--reconfig-s", "5")
    r = d["ocs_reconfigured"]
    assert (r["switches"], r["ocs_units"], r["transceivers"]) == (0, 8, 1024)
    assert r["counts"]["reconfig_s"] == 5.0
    assert r["savings"]["cost"] == pytest.approx(
        1 - r["cost_usd"] / d["rail_optimized"]["cost_usd"]
    )
    out = cli(*args, "--ocs-reconfigured").stdout
    assert "ocs-reconfigured" in out and "a job fits one pod (≤ 1,024 GPUs)" in out


def test_topology_ocs_reconfigured(cli: Cli) -> None:
    d = cli.json("topology", "--arch", "ocs-reconfigured", "--gpus", "64", "--hb-domain", "8")
    assert (d["counts"]["units"], d["counts"]["transceivers"]) == (1, 64)
    r = cli("topology", "--arch", "ocs-reconfigured", "--gpus", "64", "--hb-domain", "8")
    assert r.exit_code == 0 and "max_job_gpus" in r.stdout


@pytest.mark.parametrize(
    "args,field",
    [
        (["cost", "--ocs-reconfigured", "--reconfig-s", "-1"], "reconfig_s"),
        (["cost", "--reconfig-s", "2"], "reconfig_s"),
        (["cost", "--ocs-reconfigured", "--reconfig-s", "nan"], "reconfig_s"),
        (["topology", "--arch", "ocs-reconfigured", "--reconfig-s", "-1"], "reconfig_s"),
        (["topology", "--arch", "ocs-reconfigured", "--radix", "64"], "radix"),
        (["topology", "--arch", "ocs-reconfigured", "--planes", "2"], "planes"),
        (["topology", "--arch", "ocs-reconfigured", "--export", "g.json"], "export"),
        (["topology", "--arch", "rail-only", "--reconfig-s", "1"], "reconfig_s"),
        (["topology", "--arch", "rail-only", "--price-book", "rail-only-hoti2024"], "price_book"),
        (["topology", "--arch", "torus"], "arch"),
    ],
)
def test_bad_input_one_line_exit_2(cli: Cli, args: list[str], field: str) -> None:
    cluster = ["--gpus", "64", "--hb-domain", "8"]
    extra = ["--radix", "64"] if args[0] == "cost" else []
    r = cli(*args, *cluster, *extra)
    assert r.exit_code == 2, r.output
    assert str(r.exception).startswith(field) and "\n" not in str(r.exception)
