"""Disaggregated serving in the search: the prefill:decode split balances the two rates, and a
decode instance generates O − 1 tokens per request (the prefill yields the first)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from railplan.inference.engine import Deployment, StepLoad, step_time_s, step_times
from railplan.inference.estimate import steady_load
from railplan.inference.search import Split, balanced_prefill_instances, disaggregated_choices
from railplan.inference.serving import MAX_PREFILL_TOKENS
from railplan.specs import Network
from railplan.specs.catalog import load_model, load_system

DEP = Deployment(load_model("llama-2-70b"), load_system("dgx-h100"), Network(), 32, 2, 1, 1, "fp8")


def _rates(batch: int, prompt: int, out: int) -> tuple[float, float]:
    """(prefill, decode) requests/s of one instance, by hand."""
    chunk = max(1, MAX_PREFILL_TOKENS // prompt)
    t_pre = float(step_time_s(DEP, StepLoad(prefill_tokens=chunk * prompt, prefill_seqs=chunk))[0])
    steady = steady_load(np.asarray([float(batch)]), prompt, out)
    step = float(step_times(DEP, replace(steady, prefill_tokens=0.0, prefill_seqs=0.0))[0][0])
    return chunk / t_pre, batch / (step * max(out - 1, 1))


@pytest.mark.parametrize("out", [2, 16, 256])
def test_decode_holds_a_request_for_o_minus_one_tokens(out: int) -> None:
    batch, prompt = 64, 1024
    (c,) = disaggregated_choices(DEP, np.asarray([batch]), prompt, out)
    pre, dec = _rates(batch, prompt, out)
    groups = DEP.replicas  # 16 instances of tp 2
    # the split that takes the most requests/s, by trying every one
    requests, p = max((min(q * pre, (groups - q) * dec), q) for q in range(1, groups))
    assert c.prefill_gpus == p * 2 and c.decode_gpus == (groups - p) * 2
    assert c.tokens_per_s_per_gpu == pytest.approx(requests * out / DEP.gpus)


def test_one_output_token_needs_no_decoding() -> None:
    # the prefill yields the only token: all instances but one prefill
    (c,) = disaggregated_choices(DEP, np.asarray([64]), 1024, 1)
    pre, _ = _rates(64, 1024, 1)
    assert c.decode_gpus == 2 and c.prefill_gpus == 30
    assert c.tokens_per_s_per_gpu == pytest.approx(15 * pre / DEP.gpus)


@given(
    groups=st.integers(2, 200),
    pre=st.floats(1e-3, 1e4),
    dec=st.lists(st.floats(1e-3, 1e4), min_size=1, max_size=8),
)
def test_the_split_takes_the_most_requests_of_every_split(
    groups: int, pre: float, dec: list[float]
) -> None:
    # the whole number nearest the balance point is not always the best: with a prefill
    # instance ten times as fast as a decode one and 16 instances the point is 1.45, and 2
    # prefill instances take 14 decode instances' rate where 1 takes one prefill instance's
    from types import SimpleNamespace

    rates = np.asarray(dec)
    split = Split(rates, pre, rates, 1, 1.0, 0.0, 1)
    got = balanced_prefill_instances(SimpleNamespace(replicas=groups), split)  # type: ignore[arg-type]
    q = np.arange(1, groups)[:, None]
    every = np.minimum(q * pre, (groups - q) * rates)
    assert np.all((got >= 1) & (got <= groups - 1))
    took = np.minimum(got * pre, (groups - got) * rates)
    assert np.all(took >= every.max(axis=0) * (1 - 1e-12))


def test_the_nearest_whole_split_is_not_always_the_best() -> None:
    from types import SimpleNamespace

    split = Split(np.asarray([1.0]), 10.0, np.asarray([1.0]), 1, 1.0, 0.0, 1)
    # balance at 16 · 1 / 11 = 1.45: one prefill instance takes 10 requests/s, two take 14
    (p,) = balanced_prefill_instances(SimpleNamespace(replicas=16), split)  # type: ignore[arg-type]
    assert p == 2
