"""`infer-search --under-load` (`inference.loaded`): the bisection over rates, the limits at
p99, and the best under load against what `railplan infer --arrival-rate` simulates."""

from __future__ import annotations

import shlex
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from railplan.errors import RailplanError
from railplan.inference.loaded import LOAD_ITERATIONS, highest_rate, simulate, within
from railplan.inference.search import search
from railplan.inference.serving import ServingResult
from tests.conftest import Cli

STEPS = 2**LOAD_ITERATIONS


def _result(rate: float, stable: bool | None = True, ttft: float = 0.1) -> ServingResult:
    return ServingResult(rate, 100, ttft, ttft, 0.05, 0.05, 1.0, 1.0, stable)


def _runner(limit: float) -> tuple[list[float], object]:
    """A run that meets the limits up to `limit` requests/s, and the rates it was asked for."""
    asked: list[float] = []

    def run(rate: float) -> ServingResult:
        asked.append(rate)
        return _result(rate, stable=rate <= limit)

    return asked, run


@given(
    limit=st.floats(0.0, 3.0),
    floor=st.floats(0.0, 1.2),
    capacity=st.floats(0.5, 2.0),
)
def test_the_highest_rate_is_the_highest_grid_rate_above_the_floor_that_passes(
    limit: float, floor: float, capacity: float
) -> None:
    asked, run = _runner(limit)
    hit, runs = highest_rate(run, lambda r: r.stable is True, capacity, floor)  # type: ignore[arg-type]
    grid = [capacity * j / STEPS for j in range(1, STEPS)]
    passing = [g for g in grid if floor < g <= limit]
    assert runs == len(asked) <= LOAD_ITERATIONS + 2
    assert all(a < capacity for a in asked)  # the capacity itself is never run, nor claimed
    if passing:
        assert hit is not None and hit[0] == pytest.approx(max(passing), rel=1e-12)
        assert hit[1].arrival_rate == hit[0]
    else:
        assert hit is None


def test_a_floor_the_candidate_cannot_beat_costs_one_run_or_none() -> None:
    asked, run = _runner(0.5)
    assert highest_rate(run, lambda r: r.stable is True, 1.0, floor=0.6) == (None, 1)  # type: ignore[arg-type]
    assert highest_rate(run, lambda r: r.stable is True, 1.0, floor=1.0) == (None, 0)  # type: ignore[arg-type]
    assert len(asked) == 1 and 0.6 < asked[0] <= 0.6 + 1 / STEPS


def test_the_limits_are_p99_and_a_run_that_kept_up() -> None:
    assert within(_result(1.0), 0.2, 0.1)
    assert not within(_result(1.0, ttft=0.3), 0.2, 0.1)  # its TTFT p99 is 0.3 s
    assert not within(_result(1.0, stable=False), 0.2, 0.1)
    assert not within(_result(1.0, stable=None), 0.2, 0.1)  # too short to tell: not proven


ARGS = ("llama-2-70b", "dgx-h100", 8, "fp8", 512, 128, 2.0, 0.2)


#: seconds of arrivals per run in these tests (the default, MLPerf's 600 s, takes minutes here)
SHORT_S = 60.0


@pytest.fixture(scope="module")
def loaded_search() -> dict:
    return search(*ARGS, under_load=True, min_duration_s=SHORT_S)


def test_the_best_under_load_meets_the_limits_at_p99_below_its_capacity(
    loaded_search: dict,
) -> None:
    ul = loaded_search["under_load"]
    best = ul["best"]
    load = best["load"]
    assert load["ttft_p99_s"] <= 2.0 and load["tpot_p99_s"] <= 0.2
    # what it serves is a share of the steady state's capacity of the same configuration
    assert 0 < load["capacity_share"] < 1
    assert load["tokens_per_s_per_gpu"] == pytest.approx(
        load["capacity_share"] * best["tokens_per_s_per_gpu"], rel=1e-9
    )
    assert load["tokens_per_s_per_gpu"] == pytest.approx(load["arrival_rate"] * 128 / 8)
    # no configuration serves more under load than the steady state's best
    assert load["tokens_per_s_per_gpu"] <= loaded_search["best"]["tokens_per_s_per_gpu"]


def test_a_deployment_inside_one_hb_domain_is_simulated_once_for_every_network(
    loaded_search: dict,
) -> None:
    # 8 GPUs in one DGX H100: the network is never reached, and the three networks' answers
    # are the same runs, made once: as many as one network's search makes
    ul = loaded_search["under_load"]
    nets = ul["by_network"]
    assert nets["rail-optimized"]["load"] == nets["rail-only"]["load"] == nets["ideal"]["load"]
    told: list[str] = []
    one = search(
        *ARGS, networks="rail-only", under_load=True, progress=told.append, min_duration_s=SHORT_S
    )
    assert ul["simulations"] == one["under_load"]["simulations"] == len(told) > 0
    assert "no spine under load" in ul["verdict"]


def test_the_best_under_load_is_what_infer_simulates_at_its_rate(
    loaded_search: dict, cli: Cli
) -> None:
    best = loaded_search["under_load"]["best"]
    load = best["load"]
    args = f"infer --model llama-2-70b --system dgx-h100 --gpus 8 --tp {best['tp']} "
    args += f"--pp {best['pp']} --batch {best['batch']} --precision fp8 --input-tokens 512 "
    args += f"--output-tokens 128 --arrival-rate {load['arrival_rate']!r} "
    args += f"--requests {load['requests']}"
    if best["prefill_gpus"]:
        args += f" --prefill-gpus {best['prefill_gpus']}"
    out = cli.json(*shlex.split(args))["serving"][0]
    assert out["ttft_p99_s"] == pytest.approx(load["ttft_p99_s"], rel=1e-12)
    assert out["tpot_p99_s"] == pytest.approx(load["tpot_p99_s"], rel=1e-12)
    assert out["stable"] is True


# one H100 serving Llama 3.1 8B with a TTFT limit that binds below the capacity
TIGHT = ("llama-3.1-8b", "dgx-h100", 1, "fp8", 512, 128, 0.1, 0.05)


def test_one_grid_step_above_the_rate_found_breaks_a_limit() -> None:
    from railplan.inference.engine import Deployment
    from railplan.specs import Network
    from railplan.specs.catalog import load_model, load_system

    best = search(*TIGHT, under_load=True, min_duration_s=SHORT_S)["under_load"]["best"]
    load = best["load"]
    assert load["capacity_share"] < (STEPS - 1) / STEPS  # found inside the grid
    assert load["ttft_p99_s"] <= 0.1 and load["tpot_p99_s"] <= 0.05
    dep = Deployment(
        load_model("llama-3.1-8b"),
        load_system("dgx-h100"),
        Network(),
        1,
        best["tp"],
        best["pp"],
        best["ep"],
        "fp8",
        best["two_batch_overlap"],
    )
    capacity = load["arrival_rate"] / load["capacity_share"]
    rate = load["arrival_rate"]
    at = simulate(dep, rate, 512, 128, best["batch"], requests=load["requests"])
    assert (at.ttft_p99_s, at.tpot_p99_s) == (load["ttft_p99_s"], load["tpot_p99_s"])
    above = simulate(dep, rate + capacity / STEPS, 512, 128, best["batch"], min_duration_s=SHORT_S)
    assert within(at, 0.1, 0.05) and not within(above, 0.1, 0.05)


def test_infer_search_under_load_prints_and_returns_it(cli: Cli) -> None:
    args = ["infer-search", "--model", "llama-2-70b", "--system", "dgx-h100", "--gpus", "8"]
    args += ["--input-tokens", "512", "--output-tokens", "128", "--ttft-slo", "2"]
    args += ["--tpot-slo", "0.2", "--under-load", *SHORT]
    text = cli(*args)
    assert text.exit_code == 0, text.output
    assert "under Poisson load" in text.output and "best under load: K = 8" in text.output
    assert "under Poisson load at 90 %" not in text.output  # no load check to propose
    out = cli.json(*args)
    best = out["best_under_load"]
    assert best["hb_domain"] == 8 and best["load"]["ttft_p99_s"] <= 2.0
    # its own command reruns its run
    command = shlex.split(best["load_check_command"])
    assert command[:2] == ["railplan", "infer"] and "--requests" in command
    at = cli.json(*command[1:])["serving"][0]
    assert (at["ttft_p99_s"], at["tpot_p99_s"]) == (
        best["load"]["ttft_p99_s"],
        best["load"]["tpot_p99_s"],
    )
    assert at["stable"] is True
    plain = cli.json(*args[:-3])
    assert "best_under_load" not in plain and "under_load" not in plain["by_hb_domain"][0]


def test_branch_and_bound_over_the_candidates(monkeypatch: pytest.MonkeyPatch) -> None:
    # four candidates (steady-state capacities 100, 90, 95 and 80 requests/s) whose runs keep
    # up to 60, 70, 50 and 85 requests/s: the first is bisected, the second beats it above its
    # floor, the third fails just above the second's rate (one run), the fourth reaches the top
    # of its grid (63/64 of 80, never 80 itself)
    capacities, limits = (100.0, 90.0, 95.0, 80.0), {1: 60.0, 2: 70.0, 3: 50.0, 4: 85.0}
    out, asked = _fake_search(monkeypatch, _choices(capacities), limits)
    tried = out["tried"]["rail-optimized"]
    rates = [t["arrival_rate"] for t in tried]
    assert rates[0] == pytest.approx(100 * 38 / 64)  # 60.9 fails, 59.4 keeps up
    assert rates[1] == pytest.approx(90 * 49 / 64)  # the highest of 90's grid ≤ 70
    assert rates[2] is None and tried[2]["simulations"] == 1
    assert rates[3] == pytest.approx(80 * 63 / 64)
    assert [t["beats"] for t in tried] == [0.0, rates[0], rates[1], rates[1]]
    best = out["by_network"]["rail-optimized"]
    assert best["batch"] == 4 and best["load"]["arrival_rate"] == rates[3]
    assert all(rate < capacities[batch - 1] for batch, rate in asked)
    # the third candidate's one run is the lowest of its grid above the floor
    third = [rate for batch, rate in asked if batch == 3]
    assert third == [pytest.approx(95 * 47 / 64)] and third[0] > rates[1]
    assert out["not_simulated"] == {"rail-optimized": 0}


def _choices(capacities: tuple[float, ...]) -> list:
    from railplan.inference.search import Choice

    return [
        Choice("aggregated", 1, 1, 1, False, batch, 0, 8, 0.1, 0.01, cap * 128 / 8, 0.0)
        for batch, cap in enumerate(capacities, start=1)
    ]


def _fake_search(
    monkeypatch: pytest.MonkeyPatch, choices: list, keeps: dict[int, float], **kw: int
) -> tuple[dict, list[tuple[int, float]]]:
    """best_under_load over `choices` (one network's), each run of the choice of batch b keeping
    up to keeps[b] requests/s, and the (batch, rate) pairs it simulated."""
    import railplan.inference.loaded as loaded_mod
    from railplan.inference.engine import Deployment
    from railplan.specs import Network
    from railplan.specs.catalog import load_model, load_system

    dep = Deployment(
        load_model("llama-3.1-8b"), load_system("dgx-h100"), Network(), 8, 1, 1, 1, "fp8"
    )
    asked: list[tuple[int, float]] = []

    def fake(d, rate, i, o, batch, p=0, seed=0, requests=None, min_s=0.0):  # type: ignore[no-untyped-def]
        asked.append((batch, rate))
        return _result(rate, stable=rate <= keeps[batch])

    monkeypatch.setattr(loaded_mod, "simulate", fake)
    out = loaded_mod.best_under_load(
        {"rail-optimized": choices},
        lambda arch, c: dep,
        lambda arch, c: c.to_dict(),
        512,
        128,
        2.0,
        0.2,
        **kw,
    )
    return out, asked


def _bound_search(
    monkeypatch: pytest.MonkeyPatch, capacities: tuple[float, ...], keeps: float, **kw: int
) -> tuple[dict, list[tuple[int, float]]]:
    """`_fake_search` over choices of these capacities (most first, batches 1, 2, …), each run
    keeping up to `keeps` requests/s."""
    every = dict.fromkeys(range(1, len(capacities) + 1), keeps)
    return _fake_search(monkeypatch, _choices(capacities), every, **kw)


def test_the_bound_ends_the_list_where_no_later_choice_can_beat_the_best(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # every run keeps up to 70 requests/s: the first choice (capacity 100) finds 44/64 of it;
    # 80 reaches 70 itself, then 72 can still beat that (63/64 of 72 is 70.9) and fails there,
    # 71 cannot (69.9), and nothing after it is looked at, however many choices follow
    capacities = (100.0, 80.0, 72.0, 71.0, 70.0, *[50.0] * 200)
    out, asked = _bound_search(monkeypatch, capacities, 70.0)
    tried = out["tried"]["rail-optimized"]
    assert [t["configuration"]["batch"] for t in tried] == [1, 2, 3]
    assert {batch for batch, _ in asked} == {1, 2, 3}
    first = 100 * 44 / 64  # 68.75 keeps up, 70.3 does not
    assert tried[0]["arrival_rate"] == pytest.approx(first)
    # 80: the lowest of its grid above 68.75 is 56/64 (68.75 itself, at 55/64, is not above)
    assert tried[1]["arrival_rate"] == pytest.approx(80 * 56 / 64)
    assert tried[2]["arrival_rate"] is None and tried[2]["simulations"] == 1
    assert out["not_simulated"] == {"rail-optimized": 0}  # proven over all 205
    # the best is what the bound allows no other choice to beat
    best = out["by_network"]["rail-optimized"]["load"]["arrival_rate"]
    assert all(c * 63 / 64 <= best for c in capacities[3:])


def test_the_limit_stops_the_search_and_counts_what_could_still_beat_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    capacities = (100.0, 99.0, 98.0, 97.0, 60.0)
    out, asked = _bound_search(monkeypatch, capacities, 90.0, candidates=2)
    assert [t["configuration"]["batch"] for t in out["tried"]["rail-optimized"]] == [1, 2]
    assert {batch for batch, _ in asked} == {1, 2}
    # the best after two is below 63/64 of 98 and 97, not of 60
    assert out["not_simulated"] == {"rail-optimized": 2} and out["candidates"] == 2
    # without a limit they are simulated and the answer is proven
    out, asked = _bound_search(monkeypatch, capacities, 90.0, candidates=0)
    assert len(out["tried"]["rail-optimized"]) == 4
    assert out["not_simulated"] == {"rail-optimized": 0}


def test_infer_search_says_what_its_limit_left_unsimulated(cli: Cli) -> None:
    # one H100, Llama 3.1 8B, a TTFT limit that binds well below the best's capacity: the
    # smaller batches could still serve more by their capacity
    args = ["infer-search", "--model", "llama-3.1-8b", "--system", "dgx-h100", "--gpus", "1"]
    args += ["--input-tokens", "512", "--output-tokens", "128", "--ttft-slo", "0.1"]
    args += ["--tpot-slo", "0.05", "--under-load", *SHORT]
    text = cli(*args, "--load-candidates", "1")
    assert text.exit_code == 0, text.output
    assert "(not proven: see the notes)" in text.output
    assert "K = 8, every network: 6 choices not simulated could serve more" in text.output
    assert "--load-candidates 7 (or 0) simulates them" in text.output
    out = cli.json(*args, "--load-candidates", "1")["by_hb_domain"][0]["under_load"]
    assert out["not_simulated"] == {"rail-optimized": 6, "rail-only": 6, "ideal": 6}
    full = cli.json(*args)["by_hb_domain"][0]["under_load"]  # the default limit, 8
    assert full["not_simulated"] == {"rail-optimized": 0, "rail-only": 0, "ideal": 0}
    assert len(full["tried"]["rail-only"]) == 7
    assert full["best"]["load"] == out["best"]["load"]  # the first held: now proven
    assert "(proven over every steady-state choice)" in cli(*args).output
    for value in ("-1", "100001"):
        got = cli(*args, "--load-candidates", value)
        assert got.exit_code == 2, got.output
        assert str(got.exception).startswith("load_candidates: must be an integer in [0, 100,000]")
    got = cli(*args, "--load-candidates", "2.5")
    assert got.exit_code == 2 and "--load-candidates" in got.output
    got = cli(*args[:-3], "--load-candidates", "2")  # without --under-load
    assert got.exit_code == 2
    assert str(got.exception) == "load_candidates: takes effect only with --under-load"
    assert (
        cli.json(*args, "--load-candidates", "0")["by_hb_domain"][0]["under_load"]["candidates"]
        == 0
    )


@given(capacity=st.floats(0.5, 200.0), j=st.integers(1, STEPS - 1))
def test_could_beat_is_whether_the_grid_has_a_rate_above_the_floor(capacity: float, j: int) -> None:
    from railplan.inference.loaded import could_beat

    # a floor at a grid rate (as another choice of the same capacity found it): above it are
    # the grid's rates j + 1 … 63, none when j is the top (63/64: the capacity is never claimed)
    assert could_beat(capacity, capacity * j / STEPS) == (j < STEPS - 1)
    top = capacity * (STEPS - 1) / STEPS
    assert could_beat(capacity, top * (1 - 1e-6)) and not could_beat(capacity, top * (1 + 1e-6))
    assert could_beat(capacity, 0.0)


def test_the_first_configurations_are_simulated_before_other_batches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # configuration A at four batches of the grid (capacities 100, 99, 98, 97 requests/s, each
    # keeping up to 50), configuration B at its best (90, keeping up to 85): in capacity order
    # alone a limit of two would spend both on A; the first pass takes B's best before A's
    # other batches, as the search of the first configurations did
    import railplan.inference.loaded as loaded_mod
    from railplan.inference.search import Choice

    choices = [
        Choice("aggregated", tp, 1, 1, False, batch, 0, 8, 0.1, 0.01, cap * 128 / 8, 0.0)
        for tp, batch, cap in ((1, 4, 100.0), (1, 3, 99.0), (1, 2, 98.0), (1, 1, 97.0))
    ]
    choices.insert(3, Choice("aggregated", 2, 1, 1, False, 9, 0, 8, 0.1, 0.01, 90 * 16, 0.0))
    keeps = {4: 50.0, 3: 50.0, 2: 50.0, 1: 50.0, 9: 85.0}
    first, rest = loaded_mod.load_order(choices)
    assert [c.batch for c in first] == [4, 9] and [c.batch for c in rest] == [3, 2, 1]

    def under(candidates: int) -> dict:
        return _fake_search(monkeypatch, choices, keeps, candidates=candidates)[0]

    # a limit inside the first pass: B and A's other batches are left, all able to beat 50
    out = under(1)
    assert [t["configuration"]["tp"] for t in out["tried"]["rail-optimized"]] == [1]
    assert out["not_simulated"] == {"rail-optimized": 4}
    out = under(2)
    assert out["by_network"]["rail-optimized"]["tp"] == 2
    rate = out["by_network"]["rail-optimized"]["load"]["arrival_rate"]
    assert rate == pytest.approx(90 * 60 / 64)
    # A's other batches could still beat 84.4 by their capacity (63/64 of 97 is 95.5)
    assert out["not_simulated"] == {"rail-optimized": 3}
    # with room for them they are simulated (each fails at one run) and the answer is proven
    out = under(0)
    assert [t["simulations"] for t in out["tried"]["rail-optimized"]][2:] == [1, 1, 1]
    assert out["not_simulated"] == {"rail-optimized": 0}
    with pytest.raises(RailplanError, match=r"^load_candidates: must be an integer"):
        under(-1)


def test_search_passes_no_limit_through(monkeypatch: pytest.MonkeyPatch) -> None:
    import railplan.inference.loaded as loaded_mod

    asked: list[int] = []

    def spy(*a, candidates: int, **k):  # type: ignore[no-untyped-def]
        asked.append(candidates)
        return {"best": None, "by_network": {}, "verdict": "", "not_simulated": {}}

    monkeypatch.setattr(loaded_mod, "best_under_load", spy)
    for given_, want in ((0, 0), (None, loaded_mod.LOAD_CANDIDATES), (3, 3)):
        search(*TIGHT, under_load=True, load_candidates=given_)
        assert asked[-1] == want


@given(capacity=st.floats(0.5, 200.0), j=st.integers(1, STEPS - 2))
def test_a_floor_on_the_grid_is_never_run_again(capacity: float, j: int) -> None:
    # the best so far at another candidate's grid rate of the same capacity: the first run is
    # above it, not at it (float rounding once put j − 1 below the floor)
    floor = capacity * j / STEPS
    asked, run = _runner(floor)  # keeps up to the floor only
    hit, runs = highest_rate(run, lambda r: r.stable is True, capacity, floor)  # type: ignore[arg-type]
    assert hit is None and runs == 1 and asked[0] > floor


def test_a_run_that_cannot_tell_is_made_again_longer() -> None:
    from railplan.inference.loaded import SETTLE_FACTOR, SETTLE_TRIES, settled

    made: list[int | None] = []

    def run(n: int | None, settle_at: int) -> ServingResult:
        made.append(n)
        got = 100 if n is None else n
        return replace(_result(1.0, stable=True if got >= settle_at else None), requests=got)

    assert settled(lambda n: run(n, 100), 10**6).stable is True and made == [None]
    made.clear()
    r = settled(lambda n: run(n, 1600), 10**6)
    assert r.stable is True and r.requests == 1600 and made == [None, 400, 1600]
    made.clear()
    r = settled(lambda n: run(n, 10**9), 10**6)  # never settles: SETTLE_TRIES longer runs
    assert r.stable is None and len(made) == 1 + SETTLE_TRIES
    assert made[-1] == 100 * SETTLE_FACTOR**SETTLE_TRIES
    made.clear()
    settled(lambda n: run(n, 10**9), 250)  # no run beyond what one simulation takes
    assert made == [None, 250]


MAX_RATE = ["infer", "--model", "llama-3.1-8b", "--gpus", "1", "--batch", "512"]
MAX_RATE += ["--input-tokens", "512", "--output-tokens", "128"]
SHORT = ["--min-duration", str(SHORT_S)]


def test_infer_max_rate_is_the_rate_whose_run_meets_the_limits(cli: Cli) -> None:
    out = cli.json(*MAX_RATE, "--max-rate", "--ttft-slo", "0.1", "--tpot-slo", "0.05", *SHORT)
    best = out["max_rate"]
    assert out["max_rate_limits_s"] == {"ttft_p99": 0.1, "tpot_p99": 0.05}
    assert best["ttft_p99_s"] <= 0.1 and best["tpot_p99_s"] <= 0.05
    assert 0 < best["capacity_share"] < (STEPS - 1) / STEPS  # the TTFT limit binds
    assert best["tokens_per_s_per_gpu"] == pytest.approx(best["arrival_rate"] * 128)
    rate, n = repr(best["arrival_rate"]), str(best["requests"])
    at = cli.json(*MAX_RATE, "--arrival-rate", rate, "--requests", n)["serving"][0]
    assert at["ttft_p99_s"] == best["ttft_p99_s"] and at["stable"] is True
    # the same configuration as infer-search's best under these limits finds the same rate
    found = search(
        "llama-3.1-8b",
        "dgx-h100",
        1,
        "fp8",
        512,
        128,
        0.1,
        0.05,
        under_load=True,
        min_duration_s=SHORT_S,
    )["under_load"]["best"]
    assert (found["mode"], found["tp"], found["batch"]) == ("aggregated", 1, 512)
    assert found["load"]["arrival_rate"] == pytest.approx(best["arrival_rate"], rel=1e-12)


def test_infer_max_rate_text_and_limits_without_it(cli: Cli) -> None:
    text = cli(*MAX_RATE, "--max-rate", "--ttft-slo", "0.1", "--tpot-slo", "0.05", *SHORT)
    assert text.exit_code == 0, text.output
    assert "highest rate with p99 TTFT ≤ 0.1 s and TPOT ≤ 50 ms:" in text.output
    assert "rerun: --arrival-rate " in text.output and " --requests " in text.output
    for flag in ("--ttft-slo", "--tpot-slo"):
        bad = cli(*MAX_RATE, flag, "1")
        assert bad.exit_code == 2
        assert (
            str(bad.exception) == f"{flag[2:].replace('-', '_')}: takes effect only with --max-rate"
        )
    bad = cli(*MAX_RATE, "--max-rate", "--ttft-slo", "0")
    assert bad.exit_code == 2 and str(bad.exception).startswith("ttft_slo")
    # a limit no rate meets: one line says so, exit 0
    none = cli(*MAX_RATE, "--max-rate", "--ttft-slo", "0.001", *SHORT)
    assert none.exit_code == 0 and "no rate down to 1/64" in none.output
    assert cli.json(*MAX_RATE, "--max-rate", "--ttft-slo", "0.001", *SHORT)["max_rate"] is None
    bad = cli(*MAX_RATE, "--min-duration", "60")
    assert bad.exit_code == 2
    assert str(bad.exception) == "min_duration: takes effect only with --max-rate"
    bad = cli(*MAX_RATE, "--max-rate", "--min-duration", "-1")
    assert bad.exit_code == 2 and str(bad.exception).startswith("min_duration: must be")
    bad = cli(*MAX_RATE, "--max-rate", "--min-duration", "60", "--requests", "100")
    assert bad.exit_code == 2 and str(bad.exception).startswith("min_duration: takes no effect")


@pytest.mark.parametrize(
    ("case", "limits"),
    [
        # an MoE instance of 8 ep ranks stepping together, with the two-batch overlap
        ("--model mixtral-8x7b --gpus 8 --ep 8 --two-batch-overlap --batch 64", "0.5 0.05"),
        # disaggregated, one prefill and one decode GPU
        ("--model llama-3.1-8b --gpus 2 --prefill-gpus 1 --batch 128", "0.2 0.02"),
    ],
    ids=["moe-tbo", "disaggregated"],
)
def test_infer_reruns_the_max_rate_with_its_requests(cli: Cli, case: str, limits: str) -> None:
    args = ["infer", *case.split(), "--input-tokens", "512", "--output-tokens", "64"]
    ttft, tpot = limits.split()
    best = cli.json(*args, "--max-rate", "--ttft-slo", ttft, "--tpot-slo", tpot, *SHORT)["max_rate"]
    assert best is not None and 0 < best["capacity_share"] < 1
    rate, n = repr(best["arrival_rate"]), str(best["requests"])
    at = cli.json(*args, "--arrival-rate", rate, "--requests", n)["serving"][0]
    assert (at["ttft_p99_s"], at["tpot_p99_s"]) == (best["ttft_p99_s"], best["tpot_p99_s"])
    assert at["stable"] is True


def test_a_run_covers_the_minimum_duration_of_arrivals() -> None:
    import math

    from railplan.inference.engine import Deployment
    from railplan.inference.serving import MAX_REQUESTS, duration_requests, serve
    from railplan.specs import Network
    from railplan.specs.catalog import load_model, load_system

    assert duration_requests(2000, 600.0, 1.0) == 2000  # the default is longer
    assert duration_requests(2000, 600.0, 10.0) == 6000
    assert duration_requests(2000, 600.0, 1e6) == MAX_REQUESTS
    assert duration_requests(2000, 600.0, 1e6, replicas=100) == 2500  # 250,000 in all
    # two tp-4 replicas of Llama 2 70B at 20 requests/s: 600 s bring 6,000 to each
    dep = Deployment(
        load_model("llama-2-70b"), load_system("dgx-h100"), Network(), 8, 4, 1, 1, "fp8"
    )
    r = serve(dep, 20.0, 512, 64, 64, min_duration_s=600.0)
    assert r.requests == math.ceil(600.0 * 20.0 / 2) == 6000
    assert serve(dep, 20.0, 512, 64, 64).requests < 6000  # without it, the default


def test_the_ranks_a_run_shares_and_what_one_simulation_takes() -> None:
    from railplan.inference.engine import Deployment
    from railplan.inference.loaded import most_requests, sharing_ranks
    from railplan.inference.serving import MAX_REQUESTS, MAX_SIMULATED_REQUESTS
    from railplan.specs import Network
    from railplan.specs.catalog import load_model, load_system

    dense = Deployment(
        load_model("llama-3.1-8b"), load_system("dgx-h100"), Network(), 64, 2, 1, 1, "fp8"
    )
    moe = Deployment(
        load_model("mixtral-8x7b"), load_system("dgx-h100"), Network(), 64, 1, 1, 8, "fp8"
    )
    assert sharing_ranks(dense) == 32 and sharing_ranks(moe) == 64  # ep ranks count one each
    assert sharing_ranks(dense, 12) == 20 and sharing_ranks(moe, 3) == 40  # decode ranks
    assert most_requests(dense) == MAX_REQUESTS  # split: one replica simulated
    assert most_requests(moe) == MAX_SIMULATED_REQUESTS // 8  # one instance's 8 ranks
    assert most_requests(dense, least_busy=True) == MAX_SIMULATED_REQUESTS // 32
    assert most_requests(moe, 3) == MAX_SIMULATED_REQUESTS // 40


def test_a_run_cut_short_by_the_simulation_size_says_so(cli: Cli) -> None:
    from railplan.inference.loaded import short_of

    assert short_of({"arrivals_s": 600.0}, 600.0) is None
    assert "covered 38 s of arrivals, not 600 s" in str(short_of({"arrivals_s": 37.8}, 600.0))
    # 64 replicas, each request to the least busy: 250,000 requests in all are 38 s here
    args = ["infer", "--model", "llama-3.1-8b", "--gpus", "64", "--input-tokens", "512"]
    args += ["--output-tokens", "64", "--dispatch", "least-busy", "--max-rate"]
    out = cli.json(*args)
    load = out["max_rate"]
    assert load["arrivals_s"] < 600 and any("s of arrivals, not 600 s" in n for n in out["notes"])
    # the run it names covers that much: its requests per replica at the rate's share
    rate, n = repr(load["arrival_rate"]), str(load["requests"])
    at = cli.json(*args[:-1], "--arrival-rate", rate, "--requests", n)["serving"][0]
    assert at["requests"] * 64 / at["arrival_rate"] == pytest.approx(load["arrivals_s"])
    # a full-length run, or one of the given length, has no such note
    full = cli.json(*MAX_RATE, "--max-rate", *SHORT)
    assert full["max_rate"]["arrivals_s"] >= 60 and "notes" not in full
    given = cli.json(*MAX_RATE, "--max-rate", "--requests", "4000")  # 40 s: short, as asked
    assert given["max_rate"]["requests"] == 4000 and given["max_rate"]["arrivals_s"] < 600
    assert "notes" not in given


def test_max_rate_says_when_its_runs_raise_the_step_budget(cli: Cli) -> None:
    # 16k-token prompts beside 64 sequences: a whole prompt needs more than 8,192 tokens a step
    # (Llama 3.1 70B: the default Llama 2 70B serves 4,096 tokens)
    args = ["infer", "--model", "llama-3.1-70b", "--tp", "2", "--batch", "64"]
    args += ["--input-tokens", "16000"]
    out = cli.json(*args, "--output-tokens", "128", "--max-rate", "--min-duration", "30")
    assert out["max_rate"]["step_budget_tokens"] > 16000
    assert any("step budget is" in n for n in out["notes"])


def test_the_unsimulated_note_names_each_network_where_they_differ() -> None:
    from railplan.cli.infer import _not_simulated_lines

    best = {"load": {}}
    nets = {"rail-optimized": best, "rail-only": best, "ideal": best}
    r = {"hb_domain": 8, "under_load": {"candidates": 8, "not_simulated": {}, "by_network": nets}}
    r["under_load"]["not_simulated"] = {"rail-optimized": 2, "rail-only": 1, "ideal": 0}
    lines = _not_simulated_lines(r)
    assert len(lines) == 2
    assert lines[0].startswith("K = 8, rail-optimized: 2 choices not simulated could serve more")
    assert lines[0].endswith("--load-candidates 10 (or 0) simulates them")
    assert lines[1].startswith("K = 8, rail-only: 1 choice not simulated")
    r["under_load"]["not_simulated"] = {"rail-optimized": 0, "rail-only": 0, "ideal": 0}
    assert _not_simulated_lines(r) == []
    # where no choice simulated met the limits there is no best to beat
    r["under_load"]["not_simulated"] = {"rail-optimized": 5, "rail-only": 5, "ideal": 5}
    r["under_load"]["by_network"] = dict.fromkeys(nets)
    assert _not_simulated_lines(r) == [
        "K = 8, every network: 5 choices not simulated could meet the limits under load (none "
        "simulated did); --load-candidates 13 (or 0) simulates them"
    ]
    # alike counts but not alike answers: one line each
    r["under_load"]["by_network"] = nets | {"ideal": None}
    assert len(_not_simulated_lines(r)) == 3
    # more than the option takes (splits of thousands of instances): only "no limit" does
    from railplan.inference.loaded import MAX_LOAD_CANDIDATES

    r["under_load"]["by_network"] = nets
    r["under_load"]["not_simulated"] = dict.fromkeys(nets, MAX_LOAD_CANDIDATES - 8)
    assert _not_simulated_lines(r)[0].endswith("--load-candidates 100000 (or 0) simulates them")
    r["under_load"]["not_simulated"] = dict.fromkeys(nets, MAX_LOAD_CANDIDATES - 7)
    assert _not_simulated_lines(r)[0].endswith("--load-candidates 0 (no limit) simulates them")


def test_the_second_pass_merges_other_splits_by_capacity() -> None:
    # the second pass keeps its own order and merges each disaggregated choice's other
    # splits in by capacity when it is reached (the first pass's at the start), after
    # choices of equal capacity; nothing below the choice it stopped at is made
    from railplan.inference.loaded import widened
    from railplan.inference.search import Choice

    def choice(name: int, cap: float) -> Choice:
        return Choice("disaggregated", 1, 1, 1, False, name, 1, 1, 0.1, 0.01, cap, 0.0)

    kids = {1: [choice(11, 95.0), choice(12, 60.0)], 2: [choice(21, 70.0)], 4: [choice(41, 10.0)]}
    kids[11] = [choice(1, 100.0), choice(12, 60.0)]  # a split's splits: its choice's, not again
    made: list[int] = []

    def splits(c: Choice) -> list[Choice]:
        made.append(c.batch)
        return kids.get(c.batch, [])

    first, rest = [choice(1, 100.0)], [choice(2, 90.0), choice(3, 70.0), choice(4, 20.0)]
    order = widened(rest, first, splits, lambda c: c.tokens_per_s_per_gpu)
    got = [c.batch for c in order]
    assert got == [11, 2, 3, 21, 12, 4, 41]
    # a caller that stops at 12 (capacity 60) never makes 4's splits
    order = widened(rest, first, splits, lambda c: c.tokens_per_s_per_gpu)
    made.clear()
    for c in order:
        if c.batch == 12:
            break
    assert made == [1, 2, 3]  # the splits' own are never asked for


def test_an_unbalanced_split_that_serves_more_under_load_is_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a disaggregated choice whose balanced split keeps its limits only up to a third of its
    # capacity, and one more prefill instance that keeps them almost to its own (less)
    # capacity: the search simulates that split and answers with it, proven
    import numpy as np

    import railplan.inference.loaded as loaded_mod
    from railplan.inference.engine import Deployment
    from railplan.inference.search import disaggregated_choices, other_splits
    from railplan.specs import Network
    from railplan.specs.catalog import load_model, load_system

    dep = Deployment(
        load_model("llama-3.1-8b"), load_system("dgx-h100"), Network(), 8, 1, 1, 1, "fp8"
    )
    (c,) = disaggregated_choices(dep, np.asarray([64]), 512, 128)
    p0 = c.prefill_gpus
    others = {s.prefill_gpus: s for s in other_splits(dep, c, 512, 128)}
    assert set(others) == set(range(1, 8)) - {p0}
    more = others[p0 + 1] if p0 + 1 in others else others[p0 - 1]

    def cap(x: object) -> float:
        return x.tokens_per_s_per_gpu * 8 / 128  # type: ignore[attr-defined]

    assert cap(more) < cap(c)
    keeps = {p0: cap(c) / 3, more.prefill_gpus: 0.99 * cap(more)}
    asked: list[int] = []

    def fake(d, rate, i, o, batch, p=0, seed=0, requests=None, min_s=0.0):  # type: ignore[no-untyped-def]
        asked.append(p)
        return _result(rate, stable=rate <= keeps.get(p, 0.0))

    monkeypatch.setattr(loaded_mod, "simulate", fake)

    def under(candidates: int) -> dict:
        return loaded_mod.best_under_load(
            {"rail-optimized": [c]},
            lambda arch, x: dep,
            lambda arch, x: x.to_dict(),
            512,
            128,
            2.0,
            0.2,
            candidates=candidates,
        )

    out = under(0)
    best = out["by_network"]["rail-optimized"]
    assert best["prefill_gpus"] == more.prefill_gpus
    assert best["load"]["arrival_rate"] > cap(c) / 3
    assert best["load"]["arrival_rate"] < 0.99 * cap(more)
    assert out["not_simulated"] == {"rail-optimized": 0}
    # no split that could not beat the balanced split's rate was run
    found = cap(c) * 21 / 64  # the top of its grid at or below a third
    beat = {s.prefill_gpus for s in others.values() if loaded_mod.could_beat(cap(s), found)}
    assert set(asked) - {p0} <= beat
    # with a limit of one the balanced split alone is run: the others are counted
    out = under(1)
    left = len(beat)
    assert out["by_network"]["rail-optimized"]["prefill_gpus"] == p0
    assert out["not_simulated"] == {"rail-optimized": left} and left >= 1
    # where nothing meets the limits every split could, and the count is all of them but the
    # two simulated: the balanced split and its six others
    keeps.clear()
    out = under(2)
    assert out["by_network"]["rail-optimized"] is None
    assert len(out["tried"]["rail-optimized"]) == 2
    assert out["not_simulated"] == {"rail-optimized": 1 + len(others) - 2}
