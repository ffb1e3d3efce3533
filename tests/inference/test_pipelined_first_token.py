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


def test_a_steps_prompts_leave_the_pipeline_a_stage_time_apart() -> None:
    # four 2,000-token prompts start an empty 4-stage pipeline: one micro-batch each, entering
    # a stage time (the period / 4) apart; the first comes out after its traversal, the last
    # when the cold step (the period and the fill) ends
    from railplan.inference.engine import cold_step_s, prompt_exits_s, step_time_s

    dep = _dep(2, 4)
    four = StepLoad(prefill_tokens=8000.0, prefill_seqs=4.0)
    exits = prompt_exits_s(dep, four)
    stage = step_time_s(dep, four)[0] / 4
    assert exits[0] == pytest.approx(float(prompt_traversal_s(dep, four)))
    assert np.diff(exits) == pytest.approx([stage] * 3)
    assert exits[-1] == pytest.approx(cold_step_s(dep, four), rel=1e-9)
    # beside running sequences the step's micro-batches are pp, whatever the prompts: two
    # prompts take the first two
    busy = StepLoad(
        decode=64.0, context_tokens=64 * 1000.0, prefill_tokens=4000.0, prefill_seqs=2.0
    )
    exits = prompt_exits_s(dep, busy)
    assert exits[1] - exits[0] == pytest.approx(step_time_s(dep, busy)[0] / 4)


def test_aggregated_and_disaggregated_prompts_leave_by_one_rule() -> None:
    # a lone burst of four prompts into an idle aggregated engine and into a prefill instance
    # of the same shape: the same first tokens (the aggregated step then waits for the last
    # one before decoding; the prefill instance's next step need not)
    from railplan.inference.disaggregated import prefill_step_fns
    from railplan.inference.dispatch import least_busy
    from railplan.inference.engine import prompt_exits_s
    from railplan.inference.serving import first_token_fn, step_fn

    dep = _dep(2, 4, 16)
    args = (1.0, np.zeros(4), np.full(4, 2000), np.full(4, 1), 1, 64, 8192)
    period, first = prefill_step_fns(dep)
    pre = least_busy(period, *args, first_s=first)
    agg = least_busy(step_fn(dep), *args, first_s=first_token_fn(dep))
    want = prompt_exits_s(dep, StepLoad(prefill_tokens=8000.0, prefill_seqs=4.0))
    assert pre.ttft_s == pytest.approx(want)
    assert agg.ttft_s == pytest.approx(want)
