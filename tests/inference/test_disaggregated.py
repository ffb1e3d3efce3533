"""Disaggregated serving in the search: the prefill:decode split balances the two rates, and a
decode instance generates O − 1 tokens per request (the prefill yields the first)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from railplan.inference.engine import Deployment, StepLoad, step_time_s, step_times
from railplan.inference.estimate import steady_load
from railplan.inference.search import disaggregated_choices
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
    p = int(np.clip(round(groups * dec / (pre + dec)), 1, groups - 1))
    assert c.prefill_gpus == p * 2 and c.decode_gpus == (groups - p) * 2
    requests = min(p * pre, (groups - p) * dec)
    assert c.tokens_per_s_per_gpu == pytest.approx(requests * out / DEP.gpus)


def test_one_output_token_needs_no_decoding() -> None:
    # the prefill yields the only token: all instances but one prefill
    (c,) = disaggregated_choices(DEP, np.asarray([64]), 1024, 1)
    pre, _ = _rates(64, 1024, 1)
    assert c.decode_gpus == 2 and c.prefill_gpus == 30
    assert c.tokens_per_s_per_gpu == pytest.approx(15 * pre / DEP.gpus)
