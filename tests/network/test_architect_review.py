"""What a network architect's review of the network commands found wrong, held as tests: the
failure simulation never counts more GPUs out than the cluster has, `faults` simulates the
spares the OCS layer is priced with, and the commands refuse what they cannot do in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from railplan.collective import sweep as collective_sweep
from railplan.collective.lp import NoSchedule
from railplan.network.faults import Policy, monte_carlo
from railplan.network.ocs import spares_per_domain
from railplan.network.topology import Cluster
from tests.conftest import Cli


@pytest.mark.parametrize(("gpus", "k"), [(16384, 256), (2048, 1024), (4096, 4096)])
def test_never_more_gpus_out_than_the_cluster_has(gpus: int, k: int) -> None:
    # rail-only moves whole domains; two failures in one domain within a repair time are one
    # outage of it, not two (the sum put 19,456 of 16,384 GPUs out at K = 256)
    mc = monte_carlo(Cluster(gpus, k, 64), trials=200, seed=1)
    for v in mc.variants.values():
        assert v["expected_peak_unusable_gpus"] <= gpus
        assert v["spare_gpus_needed"] <= gpus
        assert v["expected_idle_gpus"] <= gpus


def test_small_outages_still_add_up() -> None:
    # at K = 8 overlaps are rare: the expected union is within 1 % of the plain sum
    c = Cluster(16384, 8, 64)
    mc = monte_carlo(c, trials=400, seed=2, policy=Policy())
    idle = mc.variants["rail-optimized"]["expected_idle_gpus"]
    assert 40 < idle < 60  # 50.3 GPUs out on average (the plain sum, seed 0: 50.3)


def test_faults_simulates_the_spares_its_ocs_line_prices(cli: Cli) -> None:
    # K = 256 is more than one 136-port OCS holds: four swap sets per domain, a spare each
    d = cli.json(
        "faults",
        "--gpus",
        "32768",
        "--hb-domain",
        "256",
        "--spare-per-domain",
        "1",
        "--trials",
        "50",
    )
    assert d["spare_per_domain"] == 4
    assert d["ocs_tradeoff"]["spare_gpus"] == 4 * 32768 // 256
    from railplan.network.cost import load_price_book

    book = load_price_book(None)
    assert spares_per_domain(Cluster(32768, 256, 64), book.ocs, 1) == 4
    assert spares_per_domain(Cluster(32768, 256, 64), None, 1) == 1


def test_faults_needs_no_prices_for_its_counts(cli: Cli) -> None:
    # the default price book has no 800 Gbps prices: only the OCS cost line needs them
    d = cli.json("faults", "--nic-gbps", "800", "--trials", "50")
    assert d["ocs_tradeoff"] is None and d["monte_carlo"]["variants"]


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["cost-plot", "--out", "x.png", "--hb-domain", "262144"], "hb_domain"),  # traceback
        (["cost", "--gpus", "64", "--radix", "1000000000000", "--hb-domain", "8"], "radix"),
        (["collective", "--gpus", "8", "--radix", "7"], "radix"),  # was ignored inside a domain
        (
            [
                "collective",
                "--network",
                "oversubscribed",
                "--oversubscription",
                "3",
                "--gpus",
                "64",
            ],
            "oversubscription",  # named an option collective does not have
        ),
    ],
)
def test_refused_in_one_line(cli: Cli, args: list[str], field: str, tmp_path: Path) -> None:
    r = cli(*[a.replace("x.png", str(tmp_path / "x.png")) for a in args])
    assert r.exit_code == 2, r.output
    assert str(r.exception).startswith(field)


def test_spares_without_an_ocs_price_are_refused(cli: Cli, tmp_path: Path) -> None:
    from railplan.catalog import __file__ as catalog_init

    text = (Path(catalog_init).parent / "pricebooks" / "rail-only-hoti2024.yaml").read_text()
    book = tmp_path / "no-ocs.yaml"
    book.write_text(text.split("\nocs:")[0] + "\n")
    r = cli(
        "cost",
        "--gpus",
        "1024",
        "--radix",
        "64",
        "--hb-domain",
        "8",
        "--price-book",
        str(book),
        "--spare-per-domain",
        "3",
    )
    assert r.exit_code == 2 and str(r.exception).startswith("spare_per_domain")


def test_no_ocs_layer_where_it_cannot_swap(cli: Cli) -> None:
    # K = 1: no other GPU in the domain to swap in; 8 GPUs in one domain: rail-only has no switch
    for gpus, k in ((36864, 1), (8, 8)):
        d = cli.json("cost", "--gpus", str(gpus), "--radix", "64", "--hb-domain", str(k))
        assert d.get("rail_only_ocs") is None


def test_an_lp_that_finds_no_schedule_is_a_row(monkeypatch: pytest.MonkeyPatch) -> None:
    # the solver running out of time used to end the sweep and lose the other algorithms
    from railplan.collective import algorithms as alg
    from railplan.collective import optimal as opt
    from railplan.collective.algorithms import Built
    from railplan.specs import Network, load_system

    def no_schedule(*args: object) -> object:
        raise NoSchedule("gpus", "no all-to-all schedule for 64 ranks found")

    monkeypatch.setattr(opt, "optimal", no_schedule)
    g = alg.group(load_system("dgx-h100"), Network(architecture="rail-only"), 64)
    built = Built("rail-only", 64, 400)
    (row,) = collective_sweep.sweep(g, "all-to-all", [2.0**20], ("hierarchical", "optimal"), built)
    times = {r["algorithm"]: r["time_s"] for r in row["algorithms"]}
    assert times["optimal"] is None and times["hierarchical"] > 0
    assert "no all-to-all schedule" in row["algorithms"][1]["note"]


def test_a_tiny_saving_is_not_minus_zero() -> None:
    from railplan.cli.output import pct

    assert pct(-0.0002) == "-0.02%" and pct(0.383) == "38.3%" and pct(0.0) == "0.0%"


def test_spares_fit_the_smallest_swap_set(cli: Cli) -> None:
    # K = 72 over 136-port OCSes: a set of 68 GPUs and one of 4; 67 spares per set put 134 in a
    # 72-GPU domain
    r = cli("faults", "--gpus", "720", "--hb-domain", "72", "--spare-per-domain", "67")
    assert r.exit_code == 2 and "smallest swap set has 4 GPUs" in str(r.exception)
    d = cli.json(
        "faults", "--gpus", "720", "--hb-domain", "72", "--spare-per-domain", "3", "--trials", "50"
    )
    assert d["spare_per_domain"] == 6 <= 71


def test_no_spares_where_no_ocs_layer_holds_them(cli: Cli) -> None:
    for gpus, k in (("64", "1"), ("8", "8")):
        r = cli(
            "cost", "--gpus", gpus, "--hb-domain", k, "--radix", "64", "--spare-per-domain", "0"
        )
        assert r.exit_code == 2 and str(r.exception).startswith("spare_per_domain")


def test_peaks_and_spares_count_whole_outages() -> None:
    # K = 8 without spares: every outage moves whole 8-GPU domains, so the GPUs a job needs in
    # reserve come in eights (the expected union gave 358 and 15)
    for gpus in (64, 16384):
        mc = monte_carlo(Cluster(gpus, 8, 64), trials=200, seed=3)
        for v in mc.variants.values():
            assert v["spare_gpus_needed"] % 8 == 0
