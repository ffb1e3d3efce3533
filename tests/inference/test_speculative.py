"""Speculative decoding with the model's multi-token prediction module: tokens per step, the
step's verify and draft work, the step loop's token accounting, errors."""

from __future__ import annotations

import itertools
from functools import cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from railplan.errors import RailplanError
from railplan.inference.dispatch import Speculation, _Replica, _Requests, admit, least_busy
from railplan.inference.engine import (
    Deployment,
    StepLoad,
    draft_s,
    stage_parts,
    step_time_s,
)
from railplan.inference.estimate import infer, steady_load
from railplan.inference.search import candidates
from railplan.inference.traffic import decode_step_traffic
from railplan.specs import Network
from railplan.specs.catalog import load_model, load_system


@cache
def dep(d: int = 0, acceptance: float = 0.85, tbo: bool = False) -> Deployment:
    return Deployment(
        load_model("deepseek-v3"),
        load_system("hgx-h800"),
        Network(),
        32,
        1,
        1,
        32,
        "fp8",
        tbo,
        d,
        acceptance,
    )


def test_tokens_per_step_by_hand() -> None:
    assert dep(0).tokens_per_step == 1.0
    assert dep(1).tokens_per_step == pytest.approx(1.85)  # DeepSeek-V3 §5.4.3: "1.8 times"
    assert dep(3).tokens_per_step == pytest.approx(1 + 0.85 + 0.85**2 + 0.85**3)
    assert dep(2, 1.0).tokens_per_step == 3.0
    assert dep(2, 0.0).tokens_per_step == 1.0
    assert dep(3).verified_tokens == 4


def test_step_verifies_every_draft_and_drafts_on_the_side() -> None:
    # the layers carry 1 + D tokens per running sequence, reading each KV cache once; then D
    # passes of the prediction module over one token per sequence
    load = StepLoad(decode=64, context_tokens=64 * 2048)
    total, parts = step_time_s(dep(2), load)
    verify = stage_parts(dep(0), StepLoad(decode=64 * 3, context_tokens=64 * 2048))
    assert parts["gemm"] == pytest.approx(float(verify.parts["gemm"]))
    assert parts["ep_comm"] == pytest.approx(float(verify.parts["ep_comm"]))
    assert parts["draft"] == pytest.approx(2 * float(draft_s(dep(1), load)))
    assert total == pytest.approx(sum(parts.values()))
    # the KV cache is read once; only the attention FLOPs grow with the queries
    assert parts["attention"] <= 3 * float(stage_parts(dep(0), load).parts["attention"])


def test_small_batches_gain_and_large_ones_do_not() -> None:
    # a memory-bound step costs little more with two tokens per sequence: TPOT drops; a
    # compute-bound one costs twice as much and gains 1.85 tokens: tokens/s fall
    small = [infer(dep(d, tbo=True), 8, 1024, 256) for d in (0, 1)]
    assert small[1].tpot_s < 0.75 * small[0].tpot_s
    big = [infer(dep(d, tbo=True), 1020, 1024, 256) for d in (0, 1)]
    assert big[1].tokens_per_s_per_gpu < big[0].tokens_per_s_per_gpu


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 64), st.sampled_from([1.0, 1.5, 1.85, 2.572]), st.integers(2, 300))
def test_step_loop_conserves_tokens(requests: int, gain: float, output: int) -> None:
    # every request gets exactly its output tokens, finishes after its first token in
    # ceil((output − 1) / gain) steps of a constant-time engine, and the batch fills up to
    # its sequence limit (the drafts count against the token budget, not the batch)
    step = 0.01
    spec = Speculation(verified=4, gain=gain)
    reqs = _Requests(np.zeros(requests), np.full(requests, 100), np.full(requests, output))
    rep = _Replica(requests)
    for i in range(requests):
        rep.take(i, 100)
    most = 0
    while not rep.idle():
        rep.step(lambda load: step, requests, 10**6, reqs, spec)
        most = max(most, rep.run_id.size)
    assert sum(rep.tokens) == pytest.approx(requests * output)
    assert most == (requests if output > 1 else 0)
    steps = np.ceil((output - 1) / gain - 1e-9)
    tpot = (reqs.finish - reqs.first) / (output - 1)
    assert tpot == pytest.approx(steps * step / (output - 1))
    run = least_busy(
        lambda load: step,
        1000.0,
        np.arange(requests) * 1e-3,
        np.full(requests, 100),
        np.full(requests, output),
        1,
        requests,
        10**6,
        spec,
    )
    assert run.tpot_s == pytest.approx(steps * step / (output - 1))


def test_drafts_count_against_the_budget_not_the_batch() -> None:
    csum = np.arange(101, dtype=np.float64) * 100.0  # 100 waiting prompts of 100 tokens
    # 16 running with 4 tokens each: the batch of 64 has room for 48, the budget of 2,048
    # tokens for (2,048 − 64) / 100 = 19 prompts
    assert admit(csum, 100, 0, 16, 64, 2048, 16 * 4) == 19
    assert admit(csum, 100, 0, 16, 64, 10**6, 16 * 4) == 48
    assert admit(csum, 100, 0, 16, 64, 10**6) == 48


def test_the_drafter_takes_memory() -> None:
    # the MTP module's layer (attention, shared expert, router, 256/32 experts) and its 2h → h
    # projection in fp8, and its own KV layer: 62 layers' KV per token instead of 61
    m = load_model("deepseek-v3")
    shared = m.shared_experts * m.expert_params()
    module = m.layer_params() - m.mlp_params_dense() + shared + m.experts * m.expert_params() / 32
    router_bf16 = 2.0 * m.hidden * m.experts  # the gate stays bf16
    extra = dep(1).weight_bytes_per_gpu - dep(0).weight_bytes_per_gpu
    assert extra == pytest.approx(1.0 * (module + 2 * m.hidden**2) + router_bf16)
    assert dep(1).kv_bytes_per_token / dep(0).kv_bytes_per_token == pytest.approx(62 / 61)
    assert dep(1).max_batch(2048) < dep(0).max_batch(2048)


def test_traffic_carries_the_verified_and_drafted_tokens() -> None:
    plain = decode_step_traffic(dep(0), 64).summary()["total_bytes"]
    spec = decode_step_traffic(dep(1), 64).summary()["total_bytes"]
    m = load_model("deepseek-v3")
    # ep only (tp 1): 2 tokens through each MoE layer, plus one draft layer on the last stage
    assert spec / plain == pytest.approx((2 * m.moe_layers + 1) / m.moe_layers)


def test_search_and_errors(cli) -> None:  # type: ignore[no-untyped-def]
    m, sy = load_model("deepseek-v3"), load_system("hgx-h800")
    plain = candidates(m, sy, Network(), 32, "fp8", 1024, 256)
    spec = candidates(m, sy, Network(), 32, "fp8", 1024, 256, (1, 0.85))

    def key(c: object) -> tuple[object, ...]:
        return tuple(
            getattr(c, f) for f in ("mode", "tp", "pp", "ep", "two_batch_overlap", "batch")
        )

    by = {key(c): c for c in spec}
    both = [(c, by[key(c)]) for c in plain if key(c) in by]
    assert both and any(a.tpot_s > b.tpot_s for a, b in both)
    with pytest.raises(RailplanError) as e:
        Deployment(
            load_model("llama-2-70b"),
            load_system("dgx-h100"),
            Network(),
            8,
            2,
            speculative_tokens=1,
        )
    assert e.value.field == "speculative_tokens"
    served = ["infer", "--model", "deepseek-v3", "--system", "hgx-h800", "--gpus", "32"]
    served += ["--ep", "32"]
    for args, field in (
        (["infer", "--speculative-tokens", "1"], "speculative_tokens"),
        ([*served, "--speculative-tokens", "17"], "speculative_tokens"),
        ([*served, "--speculative-tokens", "1", "--acceptance", "1.5"], "acceptance"),
        ([*served, "--acceptance", "0.9"], "acceptance"),
    ):
        r = cli(*args)
        assert r.exit_code == 2, r.output
        assert str(r.exception).startswith(field + ":")
        assert "\n" not in str(r.exception)


@pytest.mark.parametrize("e", [1.0, 1.85, 3.0])
@pytest.mark.parametrize("output", [1, 4, 256])
def test_steady_state_admits_what_finishes(e: float, output: int) -> None:
    # a sequence lives 1 + d steps, d = (O − 1)/E decode steps but at least one when it decodes
    # at all (none for O = 1): B of them, B / that many start per step
    new = steady_load(64.0, 1024, output, e).prefill_seqs
    d = 0.0 if output == 1 else max(1.0, (output - 1) / e)
    assert new * (1 + d) == pytest.approx(64.0)


def test_tpot_never_rises_with_acceptance() -> None:
    # a sequence gains more per step, so a rank starts more prompts per step (B·gain/O); its
    # ep ranks step together, and a step lasts as long as one carrying a prompt wherever any
    # rank carries one, 1 − (1 − f)^ep of the steps, which per prompt, (1 − (1 − f)^ep) / f,
    # falls as f grows: TPOT never rises while each rank starts under one prompt per step
    for batch, d in ((32, 1), (64, 2), (96, 1)):
        assert batch * (1 + d) / 256 < 1
        tpots = [infer(dep(d, a, tbo=True), batch, 1024, 256).tpot_s for a in np.linspace(0, 1, 21)]
        assert all(b <= a * (1 + 1e-12) for a, b in itertools.pairwise(tpots))


def test_past_one_prompt_per_step_the_ranks_fall_out_of_balance() -> None:
    # 256 sequences of 256 tokens: without drafts every rank starts exactly one prompt per
    # step, all alike; a drafted token accepted 5 % of the time makes it 1.05, and in
    # 1 − 0.95^32 = 81 % of the steps some rank carries two, which the others wait for
    steady = infer(dep(1, 0.0, tbo=True), 256, 1024, 256)
    more = infer(dep(1, 0.05, tbo=True), 256, 1024, 256)
    assert more.step_s > 1.2 * steady.step_s
    assert more.tpot_s > steady.tpot_s


def test_the_batch_fills_while_drafts_run() -> None:
    # requests arrive over time, so prompts are admitted while sequences run: the batch limit
    # counts sequences (64), not sequences × (1 + D) tokens
    spec = Speculation(verified=4, gain=1.0)
    n = 200
    reqs = _Requests(np.arange(n) * 0.002, np.full(n, 10), np.full(n, 500))
    rep = _Replica(n)
    for i in range(n):
        rep.take(i, 10)
    most = 0
    while rep.run_id.size or rep.nxt == 0:
        rep.t = max(rep.t, float(reqs.arrivals[min(rep.nxt, n - 1)]))
        rep.step(lambda load: 0.01, 64, 10**6, reqs, spec)
        most = max(most, rep.run_id.size)
    assert most == 64
