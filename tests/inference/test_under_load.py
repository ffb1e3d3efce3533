"""`infer-search --under-load` (`inference.loaded`): the bisection over rates, the limits at
p99, and the best under load against what `railplan infer --arrival-rate` simulates."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given
from hypothesis import strategies as st

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


@pytest.fixture(scope="module")
def loaded_search() -> dict:
    return search(*ARGS, under_load=True)


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
    # are the same runs (the first network's count, not three times it)
    ul = loaded_search["under_load"]
    nets = ul["by_network"]
    assert nets["rail-optimized"]["load"] == nets["rail-only"]["load"] == nets["ideal"]["load"]
    assert ul["simulations"] <= 4 * (LOAD_ITERATIONS + 2)
    assert "no spine under load" in ul["verdict"]


def test_the_best_under_load_is_what_infer_simulates_at_its_rate(
    loaded_search: dict, cli: Cli
) -> None:
    best = loaded_search["under_load"]["best"]
    load = best["load"]
    args = f"infer --model llama-2-70b --system dgx-h100 --gpus 8 --tp {best['tp']} "
    args += f"--pp {best['pp']} --batch {best['batch']} --precision fp8 --input-tokens 512 "
    args += f"--output-tokens 128 --arrival-rate {load['arrival_rate']!r}"
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

    best = search(*TIGHT, under_load=True)["under_load"]["best"]
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
    at = simulate(dep, load["arrival_rate"], 512, 128, best["batch"])
    above = simulate(dep, load["arrival_rate"] + capacity / STEPS, 512, 128, best["batch"])
    assert within(at, 0.1, 0.05) and not within(above, 0.1, 0.05)


def test_infer_search_under_load_prints_and_returns_it(cli: Cli) -> None:
    args = ["infer-search", "--model", "llama-2-70b", "--system", "dgx-h100", "--gpus", "8"]
    args += ["--input-tokens", "512", "--output-tokens", "128", "--ttft-slo", "2"]
    args += ["--tpot-slo", "0.2", "--under-load"]
    text = cli(*args)
    assert text.exit_code == 0, text.output
    assert "under Poisson load" in text.output and "best under load: K = 8" in text.output
    assert "under Poisson load at 90 %" not in text.output  # no load check to propose
    out = cli.json(*args)
    assert out["best_under_load"]["hb_domain"] == 8
    assert out["best_under_load"]["load"]["ttft_p99_s"] <= 2.0
    plain = cli.json(*args[:-1])
    assert "best_under_load" not in plain and "under_load" not in plain["by_hb_domain"][0]


def test_the_candidates_tried_come_in_the_steady_states_order(loaded_search: dict) -> None:
    ul = loaded_search["under_load"]
    tried = ul["tried"]["rail-optimized"]
    assert 1 <= len(tried) <= ul["candidates"]
    steady = [t["configuration"]["tokens_per_s_per_gpu"] for t in tried]
    assert steady == sorted(steady, reverse=True)
    assert steady[0] == loaded_search["by_network"]["rail-optimized"]["tokens_per_s_per_gpu"]
    assert tried[0]["beats"] == 0.0
    found = [t["arrival_rate"] for t in tried if t["arrival_rate"] is not None]
    # each found rate beats the one before it; the last is the best's
    assert found == sorted(found) and len(set(found)) == len(found)
    assert found[-1] == ul["by_network"]["rail-optimized"]["load"]["arrival_rate"]
