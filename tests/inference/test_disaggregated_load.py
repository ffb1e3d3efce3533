"""A disaggregated deployment under Poisson load (`inference.disaggregated`): the prefill queue
against M/D/1, the decode side's tokens, the capacity an overloaded run serves, and the
steady state `infer --prefill-gpus` reports against `infer-search`'s choice."""

from __future__ import annotations

import numpy as np
import pytest

from railplan.errors import RailplanError
from railplan.inference.disaggregated import (
    infer_disaggregated,
    prefill_instances_of,
    serve_disaggregated,
    simulate_disaggregated,
)
from railplan.inference.engine import Deployment, StepLoad, step_time_s
from railplan.inference.search import disaggregated_choices, kv_transfer_s
from railplan.specs import Network
from railplan.specs.catalog import load_model, load_system

# two instances of tp 8 (one prefills, one decodes); 8,192-token prompts fill a prefill step
# alone (MAX_PREFILL_TOKENS), so the prefill instance is a single server with a constant service
TWO = Deployment(load_model("llama-2-70b"), load_system("dgx-h100"), Network(), 16, 8, 1, 1, "fp8")
LONG = 8192


def _prefill_s(dep: Deployment, prompt: int) -> float:
    return float(step_time_s(dep, StepLoad(prefill_tokens=prompt, prefill_seqs=1))[0])


@pytest.mark.parametrize("rho", [0.2, 0.5])
def test_the_prefill_queue_is_md1(rho: float) -> None:
    # Pollaczek-Khinchine: mean time in an M/D/1 system D + rho·D / (2·(1 − rho)); TTFT adds
    # the KV transfer of the prompt to the decode instance
    d = _prefill_s(TWO, LONG)
    xfer = kv_transfer_s(TWO, 1, LONG)
    run = simulate_disaggregated(TWO, 1, rho / d, 20_000, LONG, 4, max_batch=256, seed=5)
    closed = d + rho * d / (2.0 * (1.0 - rho)) + xfer
    assert float(np.mean(run.ttft_s)) == pytest.approx(closed, rel=0.03)
    assert run.prefill.stable is True


def test_at_low_load_a_request_meets_an_idle_engine_on_both_sides() -> None:
    # one request at a time: TTFT is one prompt's prefill step and its KV transfer, and each
    # later token one decode step of a batch of one
    run = simulate_disaggregated(TWO, 1, 0.01, 200, 1024, 16, max_batch=256, seed=6)
    d = _prefill_s(TWO, 1024) + kv_transfer_s(TWO, 1, 1024)
    assert float(np.median(run.ttft_s)) == pytest.approx(d, rel=0.01)
    one = float(step_time_s(TWO, StepLoad(decode=1.0, context_tokens=1032.0))[0])
    assert float(np.median(run.tpot_s)) == pytest.approx(one, rel=0.02)
    assert run.decode.ttft_s.max() == 0.0  # no wait for a decode slot


def test_every_request_gets_its_tokens() -> None:
    run = simulate_disaggregated(TWO, 1, 2.0, 600, 1024, 32, max_batch=64, seed=7)
    assert np.isfinite(run.ttft_s).all() and np.isfinite(run.tpot_s).all()
    assert (run.ttft_s > 0).all() and (run.tpot_s > 0).all()
    # the decode side made every token but the first of each request
    r = serve_disaggregated(TWO, 1, 2.0, 1024, 32, batch=64, requests=600)
    assert r.stable is True and r.tokens_per_s == pytest.approx(2.0 * 32)
    assert r.prefill_gpus == 8 and r.kv_transfer_s > 0


def test_an_overloaded_run_serves_the_capacity_of_its_slower_side() -> None:
    dep = Deployment(
        load_model("llama-2-70b"), load_system("dgx-h100"), Network(), 32, 2, 1, 1, "fp8"
    )
    (c,) = disaggregated_choices(dep, np.asarray([64]), 1024, 128)
    p = c.prefill_gpus // 2
    capacity = c.tokens_per_s_per_gpu * dep.gpus  # output tokens/s, the slower side's
    r = serve_disaggregated(dep, p, 2.0 * capacity / 128, 1024, 128, batch=64)
    assert r.stable is False
    assert r.tokens_per_s == pytest.approx(capacity, rel=0.08)
    light = serve_disaggregated(dep, p, 0.5 * capacity / 128, 1024, 128, batch=64)
    assert light.stable is True
    # half the load waits less for its first token than the full one
    assert light.ttft_mean_s < r.ttft_mean_s


def test_the_steady_state_by_hand() -> None:
    # 16 instances of tp 2, 5 prefilling: a prefill step takes 8 prompts of 1,024 tokens; TTFT
    # is half such a step of waiting, the step and the KV transfer of its 8 prompts; requests/s
    # the smaller of 5 prefill instances' and 11 decode instances' (64 slots, 127 tokens each)
    dep = Deployment(
        load_model("llama-2-70b"), load_system("dgx-h100"), Network(), 32, 2, 1, 1, "fp8"
    )
    r = infer_disaggregated(dep, 64, 1024, 128, 5)
    t_pre = float(step_time_s(dep, StepLoad(prefill_tokens=8 * 1024.0, prefill_seqs=8.0))[0])
    assert r.ttft_s == pytest.approx(1.5 * t_pre + kv_transfer_s(dep, 8, 1024))
    ctx = 64 * (1024 + 129 / 2)
    step = float(step_time_s(dep, StepLoad(decode=64.0, context_tokens=ctx))[0])
    assert r.tpot_s == pytest.approx(step) and r.step_s == pytest.approx(step)
    requests_per_s = min(5 * 8 / t_pre, 11 * 64 / (step * 127))
    assert r.tokens_per_s_per_gpu == pytest.approx(requests_per_s * 128 / 32)
    assert r.prefill_gpus == 10


@pytest.mark.parametrize(
    ("gpus", "field"),
    [(3, "prefill_gpus"), (16, "prefill_gpus"), (0, "prefill_gpus"), (10**30, "prefill_gpus")],
)
def test_a_prefill_share_that_is_not_whole_instances_is_refused(gpus: int, field: str) -> None:
    with pytest.raises(RailplanError) as e:
        prefill_instances_of(TWO, gpus)
    assert e.value.field == field and "\n" not in str(e.value)


def test_one_instance_cannot_be_split() -> None:
    one = Deployment(
        load_model("llama-2-70b"), load_system("dgx-h100"), Network(), 8, 8, 1, 1, "fp8"
    )
    with pytest.raises(RailplanError, match="two instances"):
        prefill_instances_of(one, 8)


def test_a_wait_for_a_decode_slot_delays_the_first_token() -> None:
    # two decode slots of 64-token answers serve about 2 requests/s; at 4/s the requests queue
    # for a slot, and the first token (from the decode side) waits with them; TPOT does not
    run = simulate_disaggregated(TWO, 1, 4.0, 400, 1024, 64, max_batch=2, seed=8)
    prefill_out = float(np.median(run.prefill.ttft_s))
    assert run.decode.stable is False
    assert float(np.mean(run.ttft_s)) > 10 * prefill_out
    one = float(step_time_s(TWO, StepLoad(decode=2.0, context_tokens=2 * 1056.0))[0])
    assert float(np.median(run.tpot_s)) == pytest.approx(one, rel=0.05)
