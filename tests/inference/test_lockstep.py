"""Expert-parallel ranks step together: the instance's step by hand, the loop against steps by
hand, and what one rank's prompt costs the others under load."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from railplan.inference.dispatch import least_busy
from railplan.inference.engine import (
    Deployment,
    StepLoad,
    experts_s,
    lockstep_step_s,
    mean_load,
    step_time_s,
)
from railplan.inference.estimate import infer
from railplan.inference.serving import lockstep_fn, serve, step_fn
from railplan.specs import Network
from railplan.specs.catalog import load_model, load_system


@cache
def moe(ep: int = 8) -> Deployment:
    return Deployment(
        load_model("deepseek-v3"), load_system("hgx-h800"), Network(), ep, 1, 1, ep, "fp8"
    )


def test_equal_ranks_step_as_one() -> None:
    d = moe()
    load = StepLoad(decode=32, context_tokens=32 * 1024, prefill_tokens=512, prefill_seqs=1)
    alone = step_time_s(d, load)[0]
    assert lockstep_step_s(d, [load] * 8, [alone] * 8) == pytest.approx(alone)


def test_a_prompt_on_one_rank_by_hand() -> None:
    # seven ranks decode 32 sequences, one also runs a 2,048-token prompt: the step is that
    # rank's, with its experts at the ranks' mean load (32 sequences, 1/8 of the prompt: 1/8
    # of a step carrying it) instead of its own
    d = moe()
    dec = StepLoad(decode=32, context_tokens=32 * 1024)
    pre = StepLoad(decode=32, context_tokens=32 * 1024, prefill_tokens=2048, prefill_seqs=1)
    loads = [pre] + [dec] * 7
    own = [step_time_s(d, ld)[0] for ld in loads]
    mean = mean_load(loads)
    assert (float(mean.decode), float(mean.prefill_seqs)) == (32.0, 1 / 8)
    carrying = float(experts_s(d, pre))
    assert float(experts_s(d, mean)) == pytest.approx(
        carrying / 8 + 7 / 8 * float(experts_s(d, dec))
    )
    want = own[0] - carrying + float(experts_s(d, mean))
    assert lockstep_step_s(d, loads, own) == pytest.approx(want)
    assert want > own[1]  # the decoding ranks wait for the prompt
    assert want < own[0]  # and the prompt's tokens spread over every rank's experts


@settings(max_examples=25, deadline=None)
@given(
    decodes=st.lists(st.integers(0, 64), min_size=4, max_size=4),
    prompt=st.integers(1, 4096),
    at=st.integers(0, 3),
)
def test_more_work_on_a_rank_never_shortens_the_step(
    decodes: list[int], prompt: int, at: int
) -> None:
    d = moe(4)
    loads = [StepLoad(decode=float(n), context_tokens=512.0 * n) for n in decodes]
    if not any(decodes):
        loads[0] = StepLoad(decode=1.0, context_tokens=512.0)
    more = list(loads)
    more[at] = StepLoad(
        decode=loads[at].decode,
        context_tokens=loads[at].context_tokens,
        prefill_tokens=float(prompt),
        prefill_seqs=1.0,
    )

    def own(lds: list[StepLoad]) -> list[float]:
        return [step_time_s(d, ld)[0] if float(ld.tokens) > 0 else 0.0 for ld in lds]

    assert lockstep_step_s(d, more, own(more)) >= lockstep_step_s(d, loads, own(loads)) - 1e-12


def test_the_loop_steps_the_ranks_together_by_hand() -> None:
    # two ranks; a request of 3 tokens on each (round robin), the second's prompt 10× longer:
    # a step takes 0.01 s per prompt token / 100 and 0.01 per running sequence, and the pair
    # takes the longer rank's. Step 1 (t = 0): rank 0 prefills 100 tokens (0.01 s), rank 1
    # 1,000 (0.1 s): both take 0.1 s. Steps 2 and 3 decode one sequence each: 0.01 s.
    def rank(load: StepLoad) -> float:
        return 1e-4 * float(load.prefill_tokens) + 0.01 * float(load.decode)

    def pair(loads: list[StepLoad]) -> float:
        return max(rank(ld) for ld in loads)

    run = least_busy(
        rank,
        1.0,
        np.array([0.0, 0.0]),
        np.array([100, 1000]),
        np.array([3, 3]),
        2,
        8,
        4096,
        lockstep=2,
        lockstep_s=pair,
        round_robin=True,
    )
    assert run.ttft_s.tolist() == pytest.approx([0.1, 0.1])  # rank 0 waited for rank 1
    assert run.tpot_s.tolist() == pytest.approx([0.01, 0.01])


def test_an_idle_rank_waits_out_the_step() -> None:
    # rank 1 gets nothing: rank 0's requests run alone, and the idle rank never delays them
    def rank(load: StepLoad) -> float:
        return 0.01

    run = least_busy(
        rank,
        1.0,
        np.array([0.0, 0.5]),
        np.array([10, 10]),
        np.array([2, 2]),
        2,
        8,
        4096,
        lockstep=2,
        lockstep_s=lambda loads: max(rank(ld) for ld in loads if float(ld.tokens) > 0),
        round_robin=False,  # least busy: both go to rank 0 after the first finishes
    )
    assert run.ttft_s.tolist() == pytest.approx([0.01, 0.01])


def test_a_rank_with_nothing_to_run_keeps_the_instances_clock() -> None:
    # two ranks, round robin: requests 0 and 1 (2 and 8 tokens) at t = 0, request 2 at 35 ms
    # to rank 0, which has been idle since its request finished at 20 ms; steps of 10 ms. The
    # idle rank waits out the steps of the other, so request 2 starts at the instance's step
    # boundary (40 ms), not on its arrival: TTFT 15 ms
    run = least_busy(
        lambda load: 0.01,
        1.0,
        np.array([0.0, 0.0, 0.035]),
        np.full(3, 10),
        np.array([2, 8, 2]),
        2,
        8,
        4096,
        lockstep=2,
        lockstep_s=lambda loads: 0.01,
        round_robin=True,
    )
    assert run.ttft_s.tolist() == pytest.approx([0.01, 0.01, 0.015])


def test_prompts_on_other_ranks_stall_the_decoding_ones() -> None:
    # DeepSeek-V3 on 32 H800, ep 32: at 16 requests/s most steps carry some rank's prompt,
    # which every rank waits for; the steady state counts the same (1 − (1 − f)^32 of the
    # steps carry a prompt), and both are far above a decode step
    d = moe(32)
    loaded = serve(d, 16.0, 2048, 256, batch=64, requests=64, seed=1)
    steady = infer(d, 64, 2048, 256)
    decode_only = step_fn(d)(StepLoad(decode=2.0, context_tokens=2.0 * 2200))
    assert loaded.tpot_mean_s > 3 * decode_only
    assert steady.tpot_s > 3 * decode_only
    assert lockstep_fn(d, step_fn(d)) is not None
    dense = Deployment(load_model("llama-3.1-8b"), load_system("dgx-h100"), Network(), 8, 1)
    assert lockstep_fn(dense, step_fn(dense)) is None


def test_a_joining_prompt_on_one_rank_by_expectation() -> None:
    # the steady state's TTFT rides the request's prompt on one rank (1 + f prompts: its own and
    # the k + 1st in f of the steps) while the other seven carry the steady f each: the
    # traversal is the expectation, over which ranks carry one, of the lockstep step
    from dataclasses import replace
    from math import comb

    from railplan.inference.engine import prompt_traversal_s
    from railplan.inference.estimate import steady_load

    d = Deployment(
        load_model("deepseek-v3"), load_system("hgx-h800"), Network(), 16, 2, 1, 8, "fp8"
    )
    steady = steady_load(64.0, 2000, 500)
    f = float(steady.prefill_seqs)
    join = replace(steady_load(63.0, 2000, 500), prefill_tokens=2000 * (1 + f), prefill_seqs=1 + f)

    def rank(prompts: int) -> StepLoad:
        return replace(steady, prefill_tokens=2000.0 * prompts, prefill_seqs=float(prompts))

    want = 0.0
    for x in (0, 1):
        for y in range(8):
            p = (f if x else 1 - f) * comb(7, y) * f**y * (1 - f) ** (7 - y)
            loads = [replace(rank(1 + x), decode=63.0)] + [rank(1)] * y + [rank(0)] * (7 - y)
            own = [step_time_s(d, ld)[0] for ld in loads]
            want += p * lockstep_step_s(d, loads, own)
    assert float(prompt_traversal_s(d, join, steady)) == pytest.approx(want, rel=1e-3)
    # the rank's own step, were the others carrying what it does, is slower: the symmetric
    # steady state's rule does not time a prompt one rank carries alone
    assert float(prompt_traversal_s(d, join)) > 1.1 * want


def test_default_requests_follow_what_the_rate_keeps_in_flight() -> None:
    # 32 ranks of batch 128: 2,000 per instance where a low rate keeps few in flight (four
    # batches per rank were 16,384 requests, hours of simulated arrivals), four times the
    # sequences in flight where the rate keeps more, at most four batches
    from railplan.errors import RailplanError
    from railplan.inference.serving import default_requests, in_flight

    assert default_requests(128, 32, 32, held=2.0) == 63
    assert default_requests(128, 32, 32, held=100.0) == 400
    assert default_requests(128, 32, 32, held=1e6) == 512
    assert default_requests(1024, 1) == 4096  # one rank: four batches if more, as before
    d = moe(32)
    assert in_flight(d, 0.125, 128, 2048, 256) < 10 < in_flight(d, 5.0, 128, 2048, 256)
    with pytest.raises(RailplanError, match=r"requests: must be in \[1, 7,812\] here"):
        serve(d, 16.0, 2048, 256, batch=64, requests=10_000)


def test_least_busy_ranks_cluster_prompts_that_round_robin_spreads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # docs/inference.md, "Which rank of an instance takes an arrival": counting requests in
    # flight sends a rank whose requests just finished several arrivals together, so its
    # lockstep step carries several prompts, which every rank waits for
    import railplan.inference.dispatch as dispatch

    dep = Deployment(
        load_model("mixtral-8x7b"), load_system("dgx-h100"), Network(), 8, 1, 1, 8, "fp8", True
    )
    step = dispatch._lockstep
    busiest: list[float] = []

    def spy(ranks, step_s, lockstep_s, *a, **k):  # type: ignore[no-untyped-def]
        def seen(loads: list[StepLoad]) -> float:
            busiest.append(max(float(ld.prefill_seqs) for ld in loads))
            return lockstep_s(loads)

        return step(ranks, step_s, seen, *a, **k)

    monkeypatch.setattr(dispatch, "_lockstep", spy)
    runs, shares = {}, {}
    for rule in (False, True):
        busiest.clear()
        runs[rule] = serve(dep, 80.0, 2048, 128, 64, requests=600, least_busy=rule)
        shares[rule] = float(np.mean(np.array(busiest) >= 2))
    assert runs[False].stable is True and runs[True].stable is True
    assert shares[True] > 3 * shares[False]  # 0.18 against 0.03 when written
    assert runs[True].tpot_p99_s > runs[False].tpot_p99_s
    assert runs[True].ttft_p99_s > runs[False].ttft_p99_s
