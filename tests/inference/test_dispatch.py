"""Least-busy dispatch over replicas (railplan.inference.dispatch)."""

from __future__ import annotations

import numpy as np
import pytest

from railplan.inference.dispatch import (
    Speculation,
    _dispatch_until,
    _Replica,
    _Requests,
    least_busy,
)
from railplan.inference.engine import Deployment, StepLoad, step_time_s
from railplan.inference.serving import _lengths, serve, simulate
from railplan.specs import Network
from railplan.specs.catalog import load_model, load_system


def _step(load: StepLoad) -> float:
    return 0.01 + 1e-4 * load.decode + 2e-5 * load.prefill_tokens


def test_one_replica_steps_as_the_engine_by_hand() -> None:
    # simulate runs least_busy for one replica too, so this checks the loop against steps
    # worked out by hand (step = 10 ms + 0.1 ms per decode + 0.02 ms per prompt token):
    # request 0 alone (12 ms); request 1 (arrived at 5 ms) joins as 0 decodes (12.1 ms); two
    # decodes (10.2 ms) finish 0; one (10.1 ms) finishes 1; idle until 1 s, then request 2 alone
    arrivals = np.array([0.0, 0.005, 1.0])
    run = least_busy(_step, 1.0, arrivals, np.full(3, 100), np.full(3, 3), 1, 64, 512)
    assert run.ttft_s == pytest.approx([0.012, 0.0241 - 0.005, 0.012])
    assert run.tpot_s == pytest.approx([(0.0343 - 0.012) / 2, (0.0444 - 0.0241) / 2, 0.0101])
    same = simulate(_step, 20.0, 300, 100, 30, 64, max_num_tokens=512, seed=3)
    rng = np.random.default_rng(3)  # the stream simulate draws with seed 3
    drawn = np.cumsum(rng.exponential(1.0 / 20.0, 300))
    assert np.array_equal(
        same.ttft_s,
        least_busy(_step, 20.0, drawn, *_lengths(rng, 300, 100, 30, None), 1, 64, 512).ttft_s,
    )


def test_each_arrival_goes_to_the_replica_with_fewest_in_flight() -> None:
    # replica 0 holds two requests and finished one of them at 0.55 s; replica 1 holds one.
    # At 0.5 s: 2 vs 1 in flight -> replica 1. At 0.6 s: 1 vs 2 -> replica 0. At 0.7 s: 2 vs 2,
    # a tie -> the first (getLeastBusyIdx takes std::min_element's first).
    reqs = _Requests(
        np.array([0.1, 0.2, 0.3, 0.5, 0.6, 0.7]),
        np.full(6, 10, dtype=np.int64),
        np.full(6, 5, dtype=np.int64),
    )
    reps = [_Replica(6), _Replica(6)]
    for gid, rep in ((0, 0), (1, 0), (2, 1)):
        reps[rep].take(gid, 10)
    reps[0].done = [0.55]
    assert _dispatch_until(reps, reqs, 3, 0.65) == 5  # arrivals at 0.5 and 0.6, not 0.7
    assert _dispatch_until(reps, reqs, 5, 1.0) == 6
    assert list(reps[0].ids[: reps[0].n]) == [0, 1, 4, 5]
    assert list(reps[1].ids[: reps[1].n]) == [2, 3]
    assert reps[0].csum[4] == 40.0


def test_least_busy_serving_at_light_load() -> None:
    # Llama 2 70B on 8 H100 (4 tp-2 replicas) at 4 requests/s: nearly every request finds an
    # idle replica (a random split sometimes lands it behind a running one), so its TTFT is
    # about the lone prefill step; the load is all served, and the result counts requests per
    # replica as serve() does
    dep = Deployment(
        load_model("llama-2-70b"), load_system("dgx-h100"), Network(), 8, 2, 1, 1, "fp8"
    )
    lb = serve(dep, 4.0, 222, 20, requests=300, least_busy=True)
    rnd = serve(dep, 4.0, 222, 20, requests=300)
    assert lb.requests == 300 and lb.stable is True
    assert lb.tokens_per_s == pytest.approx(4.0 * 20)
    lone = step_time_s(
        dep, StepLoad(decode=0, context_tokens=0, prefill_tokens=222, prefill_seqs=1)
    )
    assert lb.ttft_mean_s == pytest.approx(lone[0], rel=0.05)
    assert lb.ttft_mean_s < rnd.ttft_mean_s


def test_a_replica_grows_past_its_even_share() -> None:
    # least_busy sizes each replica for an even share (not for every request: that was
    # replicas × requests memory); one given more grows
    rep = _Replica(1)
    for gid in range(5):
        rep.take(gid, 10 + gid)
    assert list(rep.ids[: rep.n]) == [0, 1, 2, 3, 4]
    assert list(rep.csum[: rep.n + 1]) == [0, 10, 21, 33, 46, 60]
    arrivals = np.array([0.0, 0.001, 0.002, 0.003])
    run = least_busy(_step, 1.0, arrivals, np.full(4, 100), np.full(4, 3), 2, 64, 512)
    assert np.isfinite(run.ttft_s).all() and np.isfinite(run.tpot_s).all()


def test_a_pipelined_prompt_is_in_flight_until_its_last_token_comes_out() -> None:
    # first tokens come 40 ms after a step's start, so a 10-20 ms step's new prompts lag its end
    # by 20-30 ms for all their tokens: the dispatcher counts them in flight until then, not
    # until their last step's end (checked against every request's own finish time)
    def first(load: StepLoad) -> float:
        return 0.04

    arrivals = np.arange(40) * 0.004
    reqs = _Requests(arrivals, np.full(40, 50, dtype=np.int64), np.full(40, 3, dtype=np.int64))
    rep = _Replica(40)
    for gid in range(40):
        rep.take(gid, 50)
    while not rep.idle():
        rep.step(_step, 8, 512, reqs, Speculation(), first)
    assert float(np.max(reqs.lag)) > 0.01
    ids = rep.ids[: rep.n]
    for at in np.linspace(0.0, rep.t + 0.03, 400):
        unfinished = int(np.count_nonzero(~(reqs.finish[ids] <= at)))
        assert rep.in_flight(float(at)) == unfinished
