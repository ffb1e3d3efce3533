"""Inter-token latency: the gaps between a sequence's successive tokens, by hand, conserved
against every request's decode time, and what chunked prefill does to its tail."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from railplan.inference.disaggregated import serve_disaggregated
from railplan.inference.dispatch import least_busy
from railplan.inference.engine import Deployment, StepLoad
from railplan.inference.serving import serve, simulate
from railplan.specs import Network
from railplan.specs.catalog import load_model, load_system


def test_gaps_by_hand() -> None:
    # two requests at t = 0: one step carries both prompts (0.1 s), then decode steps of
    # 0.01 s per running sequence. Request 0 has 3 tokens, request 1 has 2: the second step
    # (two sequences, 0.02 s) gives both a second token, the third (one sequence, 0.01 s)
    # request 0 its third. Gaps: 0.02, 0.02, 0.01; mean 0.05 / 3, p99 0.02.
    def step(load: StepLoad) -> float:
        return 0.1 if load.prefill_seqs else 0.01 * float(load.decode)

    run = least_busy(step, 1.0, np.array([0.0, 0.0]), np.array([5, 5]), np.array([3, 2]), 1, 8, 100)
    assert run.itl_mean_s == pytest.approx(0.05 / 3)
    assert run.itl_p99_s == pytest.approx(0.02)


def test_one_token_answers_have_no_gaps() -> None:
    run = simulate(lambda load: 0.01, 5.0, 200, 10, 1, max_batch=4, seed=1)
    assert (run.itl_mean_s, run.itl_p99_s) == (0.0, 0.0)


@settings(max_examples=30, deadline=None)
@given(
    rate=st.floats(1.0, 200.0),
    out=st.integers(2, 40),
    chunked=st.booleans(),
    pipelined=st.sampled_from(["no", "late", "early"]),
    prompt=st.integers(1, 3000),
    seed=st.integers(0, 10),
)
def test_gaps_add_up_to_every_requests_decode_time(
    rate: float, out: int, chunked: bool, pipelined: str, prompt: int, seed: int
) -> None:
    # each gap is a step after a sequence's first token and before its last: over all tokens
    # after the first, the gaps sum to Σ (finish − first token) = Σ TPOT · (O − 1), also when
    # a pipelined prompt's first token comes out after its step's end (its later ones lag too)
    # or before it (its second waits for the next step: that first gap is longer)
    def step(load: StepLoad) -> float:
        return 0.005 + 1e-4 * float(load.decode) + 1e-6 * float(load.prefill_tokens)

    def first(load: StepLoad) -> np.ndarray:
        n = max(round(float(load.prefill_seqs)), 1)
        by = 2.5 if pipelined == "late" else 0.3
        return step(load) * (by + 0.1 * np.arange(n))

    run = simulate(
        step,
        rate,
        300,
        prompt,
        out,
        max_batch=32,
        max_num_tokens=2048,
        seed=seed,
        chunked=chunked,
        first_s=None if pipelined == "no" else first,
    )
    decode_s = float(np.sum(run.tpot_s * (out - 1)))
    assert run.itl_mean_s * 300 * (out - 1) == pytest.approx(decode_s, rel=1e-9)
    assert run.itl_p99_s >= float(np.min(run.tpot_s)) - 1e-12
    assert run.itl_p99_s <= float(np.max(run.tpot_s * (out - 1))) + 1e-12


def test_chunked_prefill_bounds_the_stall_a_long_prompt_makes() -> None:
    # 16k-token prompts beside a running batch: admitted whole, each stalls every running
    # sequence for a 16k-token step; in 8,192-token chunks for at most one chunk's step. (At
    # one request/s the prompt steps hold more than 1 % of the gaps: the p99 is a stall; at
    # 0.5 /s whole prompts stall fewer than 1 % of the gaps, the two chunks of each twice as
    # many, and the p99 shows the chunks', not the whole prompts', stalls.)
    dep = Deployment(load_model("llama-3.1-70b"), load_system("dgx-h100"), Network(), 8, 8)
    whole = serve(dep, 1.0, 16384, 256, batch=64, requests=400, seed=3)
    chunked = serve(dep, 1.0, 16384, 256, batch=64, requests=400, seed=3, chunked=True)
    assert chunked.itl_p99_s < 0.7 * whole.itl_p99_s
    # TPOT is a request's mean gap: a few long stalls among 255 gaps barely move it
    assert whole.itl_p99_s > 5 * whole.tpot_mean_s


def test_disaggregated_decode_has_no_prompt_stalls() -> None:
    # prompts run on the prefill instances: a decode rank's gaps are decode steps only, so
    # its inter-token p99 stays near its TPOT where the aggregated engine's does not
    dep = Deployment(load_model("llama-3.1-70b"), load_system("dgx-h100"), Network(), 16, 8)
    split = serve_disaggregated(dep, 1, 0.5, 16384, 256, batch=64, requests=300, seed=3)
    assert split.itl_p99_s < 1.5 * split.tpot_p99_s
    assert split.itl_mean_s > 0
