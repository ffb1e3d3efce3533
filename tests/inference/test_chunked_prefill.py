"""Chunked prefill: the step loop against steps by hand, every prompt token run once within the
budget, the attention work of a chunked prompt that of the whole one, and the steady state."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from railplan.inference.dispatch import least_busy
from railplan.inference.engine import Deployment, StepLoad, stage_parts, step_time_s
from railplan.inference.estimate import (
    chunked_batch_limit,
    infer,
    steady_load,
    whole_prompt_batch_limit,
)
from railplan.inference.serving import serve, simulate
from railplan.specs import Network
from railplan.specs.catalog import load_model, load_system


def _recorder() -> tuple[list[StepLoad], Callable[[StepLoad], float]]:
    loads: list[StepLoad] = []

    def step(load: StepLoad) -> float:
        loads.append(load)
        return 0.01 + 1e-4 * float(load.decode) + 2e-5 * float(load.prefill_tokens)

    return loads, step


def test_a_long_prompt_runs_in_budget_sized_chunks() -> None:
    # a 250-token prompt alone with a 100-token budget: chunks of 100 (nothing cached), 100
    # (100 cached) and 50 (200 cached); its first token at the end of the third step
    loads, step = _recorder()
    args = (np.array([0.0]), np.array([250]), np.array([3]), 1, 8, 100)
    run = least_busy(step, 1.0, *args, chunked=True)
    prefill = [(ld.prefill_tokens, ld.prefill_cross_tokens) for ld in loads[:3]]
    assert prefill == [(100.0, 0.0), (100.0, 100.0 * 100), (50.0, 50.0 * 200)]
    assert run.ttft_s[0] == pytest.approx(3 * 0.01 + 2e-5 * 250)
    assert [ld.decode for ld in loads[3:]] == [1.0, 1.0]  # then two decode steps


def test_decode_tokens_come_first_and_a_new_prompt_takes_what_is_left() -> None:
    # request 0 (prompt 60) runs alone; request 1 (prompt 80) arrives during its step: the next
    # step carries 0's decode token and 79 of 1's prompt tokens, 1's last token the step after
    loads, step = _recorder()
    args = (np.array([0.0, 0.001]), np.array([60, 80]), np.array([4, 2]), 1, 8, 80)
    least_busy(step, 1.0, *args, chunked=True)
    assert (loads[0].decode, loads[0].prefill_tokens) == (0.0, 60.0)
    assert (loads[1].decode, loads[1].prefill_tokens, loads[1].prefill_seqs) == (1.0, 79.0, 1.0)
    assert (loads[2].prefill_tokens, loads[2].prefill_cross_tokens) == (1.0, 79.0)


@settings(max_examples=40, deadline=None)
@given(
    prompts=st.lists(st.integers(1, 3000), min_size=1, max_size=40),
    budget=st.integers(16, 2048),
    batch=st.integers(1, 16),
    rate=st.floats(0.5, 200.0),
)
def test_every_prompt_token_runs_once_within_the_budget(
    prompts: list[int], budget: int, batch: int, rate: float
) -> None:
    loads, step = _recorder()
    n = len(prompts)
    arrivals = np.cumsum(np.random.default_rng(1).exponential(1.0 / rate, n))
    p = np.asarray(prompts)
    run = least_busy(step, rate, arrivals, p, np.full(n, 3), 1, batch, budget, chunked=True)
    assert np.isfinite(run.ttft_s).all() and np.isfinite(run.tpot_s).all()
    assert sum(ld.prefill_tokens for ld in loads) == p.sum()
    # the cached pairs of a prompt's chunks: each chunk times the tokens before it
    assert sum(ld.prefill_cross_tokens for ld in loads) == pytest.approx(_cross(p, loads))
    for ld in loads:
        assert ld.decode + ld.prefill_tokens <= budget
        # the running sequences and the prompts the step runs (done or in progress) fit the batch
        assert ld.decode + ld.prefill_seqs <= batch


def _cross(prompts: np.ndarray, loads: list[StepLoad]) -> float:
    """Σ over prompts of Σ chunk × tokens before it, from the prompt tokens the steps ran:
    prompts run first come first served, so the steps' tokens are one stream, prompt after
    prompt, and a prompt's share of a step is one chunk."""
    total = 0.0
    k, done = 0, 0.0
    for tokens in (float(ld.prefill_tokens) for ld in loads):
        left = tokens
        while left > 0:
            rest = prompts[k] - done
            c = min(rest, left)
            total += c * done
            done += c
            left -= c
            if done == prompts[k]:
                k, done = k + 1, 0.0
    return total


def test_attention_work_of_a_chunked_prompt_is_the_whole_ones() -> None:
    # MI300X has no fused-attention curve: its kernel runs at the GEMM efficiency, so kernel
    # time is FLOPs over a constant rate plus the launch overhead
    dep = Deployment(load_model("llama-3.1-8b"), load_system("mi300x"), Network(), 1, 1)
    whole = stage_parts(dep, StepLoad(prefill_tokens=4096.0, prefill_seqs=1.0)).parts
    n, c = 4, 1024.0
    chunks = [
        stage_parts(
            dep, StepLoad(prefill_tokens=c, prefill_seqs=1.0, prefill_cross_tokens=c * c * j)
        ).parts
        for j in range(n)
    ]
    overhead = dep.model.layers * dep.system.gpu.kernel_overhead_us * 1e-6
    assert sum(float(x["attention"]) - overhead for x in chunks) == pytest.approx(
        float(whole["attention"]) - overhead, rel=1e-9
    )
    # and a steady-state load with chunks carries the same attention work as whole prompts
    load = steady_load(64.0, 4096, 256, 1.0, chunk_tokens=1024.0)
    assert float(load.prefill_seqs) == pytest.approx(4 * 64 / 256)
    per_prompt = float(load.prefill_cross_tokens) / (64 / 256)
    assert per_prompt == pytest.approx(sum(c * c * j for j in range(n)))


def test_short_prompts_are_not_chunked_in_the_steady_state() -> None:
    # Llama 3.1 70B (Llama 2 70B's shape but its vocabulary; it serves 16k-token prompts)
    dep = Deployment(load_model("llama-3.1-70b"), load_system("dgx-h100"), Network(), 8, 2)
    a, b = infer(dep, 64, 1024, 256), infer(dep, 64, 1024, 256, chunked=True)
    assert (a.ttft_s, a.tpot_s) == (b.ttft_s, b.tpot_s) and b.chunked_prefill
    # a 16k prompt runs in two chunks of 8,000 beside the 63 other sequences, one step each:
    # its first token comes after both steps, at least (plus half a step of waiting)
    long = infer(dep, 64, 16_000, 256, chunked=True)
    ctx = 63 * (16_000 + 257 / 2)
    own = [
        step_time_s(
            dep,
            StepLoad(63.0, ctx, 8000.0, 1.0, prefill_cross_tokens=8000.0 * 8000.0 * j),
        )[0]
        for j in (0, 1)
    ]
    assert long.ttft_s >= 0.5 * long.step_s + sum(own)
    assert long.ttft_s < 0.5 * long.step_s + 1.2 * sum(own)  # the room holds little else


def test_the_budget_caps_the_steady_batch() -> None:
    # a step carries the prompts of the B/(1 + d) sequences that start beside the B running
    # ones' tokens: 1,024 / 256 tokens (d = 255) fit 8,192 / (1,024/256 + 1) = 1,638 sequences
    dep = Deployment(load_model("llama-3-8b"), load_system("dgx-h100"), Network(), 1, 1)
    assert chunked_batch_limit(dep, 1024, 256) == 1638
    assert infer(dep, 9000, 1024, 256, chunked=True).batch == 1638
    # whole prompts: with the budget of the batch it runs (`serving.step_budget`: 8,192 tokens,
    # or 1,024 + B for one prompt beside B sequences), six whole prompts a step leave room for
    # 8,192 − 6,144 = 2,048 running sequences, and start 6 × 256 = 1,536 of them; seven leave
    # room for 1,024. More than 1,536 would need the budget of a larger engine, which one
    # prompt a step (B ≤ 256) does not use.
    assert whole_prompt_batch_limit(dep, 1024, 256, 9000) == 1536
    assert infer(dep, 9000, 1024, 256).batch == 1536
    assert not infer(dep, 9000, 1024, 256).fits  # the batch asked for does not fit
    assert infer(dep, 1536, 1024, 256).batch == 1536  # given back, it runs as is
    # a fixed budget that holds no prompt beside a running sequence: one at a time
    assert whole_prompt_batch_limit(dep, 1024, 256, 9000, max_num_tokens=1024) == 1
    # the closed form against every k, huge batches included (it was an array of k's)
    for i, o, b in ((1, 2, 10**9), (700, 3, 50_000), (8_000, 64, 300), (9_000, 9, 7)):
        c = 1 + (o - 1)
        brute = max(
            [min(k * c, (8192 - k * i) // 1) for k in range(1, 8192 // i + 1)] + [c], default=c
        )
        assert whole_prompt_batch_limit(dep, i, o, b) == max(1, min(b, brute))
    assert infer(dep, 1000, 1024, 256).batch == 1000  # within the budget: the batch asked for


def test_prompts_of_different_lengths_cost_their_own_attention() -> None:
    # two prompts of 100 and 16,000 tokens against two of 8,050: the same tokens, but
    # 100² + 16,000² against 2 · 8,050² query-key pairs
    dep = Deployment(load_model("llama-3.1-8b"), load_system("mi300x"), Network(), 1, 1)
    uneven = StepLoad(
        prefill_tokens=16_100.0, prefill_seqs=2.0, prefill_square_tokens=100.0**2 + 16_000.0**2
    )
    even = StepLoad(prefill_tokens=16_100.0, prefill_seqs=2.0)
    t_uneven = float(stage_parts(dep, uneven).parts["attention"])
    t_even = float(stage_parts(dep, even).parts["attention"])
    overhead = dep.model.layers * dep.system.gpu.kernel_overhead_us * 1e-6
    ratio = (100.0**2 + 16_000.0**2) / (2 * 8050.0**2)
    assert (t_uneven - overhead) / (t_even - overhead) == pytest.approx(ratio, rel=1e-9)


def test_a_chunked_load_simulation_keeps_its_budget() -> None:
    dep = Deployment(load_model("llama-3.1-8b"), load_system("dgx-h100"), Network(), 1, 1)
    r = serve(dep, 0.3, 32_000, 200, requests=200, chunked=True)
    assert r.step_budget_tokens == 8192 and r.stable is not False
    whole = serve(dep, 0.3, 32_000, 200, requests=200)
    assert whole.step_budget_tokens > 32_000  # whole prompts need room for one


def test_simulate_takes_chunked() -> None:
    run = simulate(
        lambda load: 0.01, 5.0, 300, 500, 5, max_batch=8, max_num_tokens=128, chunked=True
    )
    assert np.isfinite(run.ttft_s).all()
    assert run.ttft_s.min() >= 4 * 0.01 - 1e-12  # 500 tokens take four 128-token steps at least


def test_with_pipelining_each_chunk_crosses_every_stage_before_the_next() -> None:
    # a 32k prompt on tp 2 × pp 4 beside one decoding sequence: four chunks of about 8,191
    # tokens, each through all four stages before the next is scheduled (a request rides in
    # one micro-batch at a time), so its first token comes after four traversals at least
    from railplan.inference.engine import prompt_traversal_s
    from railplan.inference.serving import first_token_fn, step_fn

    dep = Deployment(load_model("llama-3-70b"), load_system("dgx-h100"), Network(), 8, 2, 4)
    arrivals = np.array([0.0, 0.001])
    run = least_busy(
        step_fn(dep),
        1.0,
        arrivals,
        np.array([100, 32_000]),
        np.array([2000, 2]),
        1,
        8,
        8192,
        first_s=first_token_fn(dep),
        chunked=True,
    )
    chunk = StepLoad(1.0, 200.0, 8191.0, 1.0)
    assert run.ttft_s[1] >= 3 * float(prompt_traversal_s(dep, chunk))


def test_a_short_prompt_does_not_wait_behind_a_long_one_in_an_empty_pipeline() -> None:
    # a 32k prompt alone on tp 2 × pp 4, then a 100-token one 50 ms later: while the long
    # prompt's chunk crosses the stages the pipeline takes the short one (steps are pipeline
    # periods), so its first token comes in a fraction of a second, not after the long prompt
    from railplan.inference.serving import first_token_fn, period_fn

    dep = Deployment(load_model("llama-3-70b"), load_system("dgx-h100"), Network(), 8, 2, 4)
    run = least_busy(
        period_fn(dep),
        1.0,
        np.array([0.0, 0.05]),
        np.array([32_000, 100]),
        np.array([2, 2]),
        1,
        8,
        8192,
        first_s=first_token_fn(dep),
        chunked=True,
    )
    assert run.ttft_s[1] < 0.5
    assert run.ttft_s[0] > 4 * 0.9 * 0.762  # four chunks, each crossing the stages (≈ 0.76 s)


def test_short_prompts_beside_a_long_chunk_neither_speed_it_up_nor_wait_for_it() -> None:
    # each chunk crosses the stages in a micro-batch of its own: adding 1-token prompts at the
    # same time cannot make the 32k prompt's first token sooner, and theirs come out with the
    # step (a pipeline period, ≈ 0.19 s beside an 8k chunk), not after the mean prompt's
    # crossing (≈ 0.39 s) or the long chunk's (≈ 0.76 s)
    from railplan.inference.serving import first_token_fn, period_fn

    dep = Deployment(load_model("llama-3-70b"), load_system("dgx-h100"), Network(), 8, 2, 4)

    def ttft(prompts: list[int]) -> np.ndarray:
        n = len(prompts)
        run = least_busy(
            period_fn(dep),
            1.0,
            np.zeros(n),
            np.asarray(prompts),
            np.full(n, 2),
            1,
            16,
            8192,
            first_s=first_token_fn(dep),
            chunked=True,
        )
        return run.ttft_s

    alone = ttft([32_000])[0]
    crowded = ttft([1] * 7 + [32_000])
    assert crowded[-1] >= alone * 0.999
    assert crowded[:7].max() < 0.25


def test_the_steady_state_is_what_the_load_simulation_sustains() -> None:
    """Whole prompts of 2,048 tokens beside a batch of 128-token answers: the 8,192-token step
    budget holds three whole prompts beside 384 sequences, short of the 484 the KV cache holds.
    The steady state runs that batch, and the load simulation, overloaded, serves what it says
    (the steady state claimed the KV cache's batch, which no engine with that budget reaches;
    a user pass found infer-search's printed load check overloaded at 90 % of its capacity)."""
    from railplan.inference.estimate import default_batch
    from railplan.inference.serving import serve

    dep = Deployment(load_model("llama-3-8b"), load_system("dgx-h100"), Network(), 1, 1)
    r = infer(dep, None, 2048, 128)
    assert r.batch == 384 < r.max_batch == 484
    assert r.batch == whole_prompt_batch_limit(dep, 2048, 128, default_batch(r.max_batch))
    over = serve(dep, 1.2 * r.tokens_per_s / 128, 2048, 128, requests=4000)
    assert over.tokens_per_s_per_gpu == pytest.approx(r.tokens_per_s_per_gpu, rel=0.03)
