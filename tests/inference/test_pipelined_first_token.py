"""With pipelining, a prompt crosses every stage whole (engine.prompt_traversal_s): no TTFT,
steady or simulated, is below a lone prompt's; the load simulation reports what was served."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from railplan.inference.engine import Deployment, StepLoad, prompt_traversal_s, step_times
from railplan.inference.estimate import first_token_s, steady_times
from railplan.inference.serving import serve
from railplan.specs import Network
from railplan.specs.catalog import load_model, load_system


@cache
def _dep(tp: int, pp: int, gpus: int = 8) -> Deployment:
    return Deployment(
        load_model("llama-2-70b"), load_system("dgx-h100"), Network(), gpus, tp, pp, 1, "fp8"
    )


def test_without_pipelining_the_traversal_is_the_step() -> None:
    dep = _dep(2, 1)
    load = StepLoad(decode=100.0, context_tokens=40_000.0, prefill_tokens=2_000.0, prefill_seqs=2.0)
    assert float(prompt_traversal_s(dep, load)) == pytest.approx(float(step_times(dep, load)[0]))


def test_a_lone_prompt_crosses_every_stage_whole() -> None:
    # one prompt on an empty 8-stage pipeline: its traversal is the cold step (first_token_s),
    # 8 stage times of the whole prompt, not 8 stage times of an eighth of it
    dep = _dep(1, 8)
    lone = first_token_s(dep, 1024)
    one = StepLoad(prefill_tokens=1024.0, prefill_seqs=1.0)
    assert float(prompt_traversal_s(dep, one)) == pytest.approx(lone, rel=1e-9)
    assert float(step_times(dep, one)[0]) < 0.5 * lone  # the period spreads it over 8


@settings(max_examples=15, deadline=None)
@given(pp=st.sampled_from([2, 4, 8]), batch=st.integers(1, 256))
def test_steady_ttft_is_never_below_a_lone_prompt(pp: int, batch: int) -> None:
    dep = _dep(1, pp)
    ttft, _, _ = steady_times(dep, float(batch), 1024, 256)
    assert float(ttft) >= first_token_s(dep, 1024)


def test_simulated_ttft_at_light_load_is_a_lone_prompt() -> None:
    # 0.05 requests/s: nearly every request finds the engine idle, some find one running
    dep = _dep(1, 8)
    s = serve(dep, 0.05, 1024, 16, requests=300)
    assert s.ttft_mean_s >= 0.99 * first_token_s(dep, 1024)


def test_an_unsettled_or_overloaded_run_reports_what_was_served() -> None:
    # 100 requests/s against a capacity of ≈ 82 (tp 2, batch 896, 222 in / 290 out): too few
    # requests to settle; tokens/s is what came out, never the offered 29,000
    dep = _dep(2, 1)
    s = serve(dep, 100.0, 222, 290, 896, requests=1000, least_busy=True)
    assert s.stable is not True
    assert s.tokens_per_s < 0.95 * 100.0 * 290
    assert np.isfinite(s.ttft_mean_s)


def test_search_best_is_on_a_buildable_network_with_its_own_step() -> None:
    from railplan.inference.search import search

    r = search(
        load_model("llama-3-405b"), load_system("gb200-nvl72"), 72, "fp8", 2048, 256, 6.0, 0.175
    )
    best = r["best"]
    assert best["network"] in ("rail-optimized", "rail-only")
    assert best["mode"] == "disaggregated"
    # the breakdown is the decode instances' step, whose time the TPOT is
    assert sum(best["breakdown_s"].values()) == pytest.approx(best["tpot_s"], rel=1e-6)


def test_pipelined_tpot_is_never_negative() -> None:
    # a prompt whose micro-batch leaves the pipeline after its step's end is that much behind
    # for its later tokens too (two-token requests at 5 requests/s on 8 stages)
    s = serve(_dep(1, 8), 5.0, 1024, 2, requests=300)
    assert s.tpot_mean_s > 0 and s.tpot_p99_s > 0


@pytest.mark.parametrize(("rate", "stable"), [(90.0, True), (104.0, False)])
def test_a_slowly_growing_queue_is_not_stable(rate: float, stable: bool) -> None:
    # a constant 10 ms step, 10 sequences of 10 tokens, one 1,000-token prompt per step: 100
    # requests/s at most. At 104/s the queue grows by ≈ 4 a second, ≈ 770 by the end of 20,000
    # requests, under 5 % of them: the growth of the mean wait between the second and the last
    # quarter of the arrivals says so; at 90/s it stays level
    from railplan.inference.serving import simulate

    run = simulate(lambda load: 0.01, rate, 20_000, 1000, 10, 10, max_num_tokens=2000, seed=3)
    assert run.waiting_at_end < 1000
    assert run.stable is stable
