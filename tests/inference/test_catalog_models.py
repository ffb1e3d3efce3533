"""Every catalog model is served and trained without a crash: `infer`, the serving search, one
decode step's traffic and the training search each give an answer or a one-line refusal
(`infer --model deepseek-v3` and its report section once raised KeyError on MLA models, which
no test covered)."""

from __future__ import annotations

import pytest

from railplan.errors import RailplanError
from railplan.explore.search import SearchSpace
from railplan.explore.search import search as train_search
from railplan.inference.engine import Deployment
from railplan.inference.estimate import infer
from railplan.inference.search import search as serve_search
from railplan.inference.traffic import decode_step_traffic
from railplan.specs import Job, Network
from railplan.specs.catalog import load_model, load_system, names

SYSTEM = load_system("dgx-h100")


@pytest.mark.parametrize("name", names("models"))
def test_every_model_is_served_and_trained(name: str) -> None:
    model = load_model(name)
    ep = 8 if model.experts % 8 == 0 and model.experts > 1 else 1
    dep = Deployment(model, SYSTEM, Network(), 64, 8 // ep, 1, ep, "fp8")
    r = infer(dep, None, 1024, 256)
    assert r.tpot_s > 0 and r.ttft_s > 0 and r.tokens_per_s_per_gpu > 0
    t = decode_step_traffic(dep, 8)
    assert float(t.bytes.sum()) >= 0
    try:
        best = serve_search(model, SYSTEM, 64, "fp8", 1024, 256, 6.0, 0.175)
        assert best is not None
    except RailplanError as err:
        assert "\n" not in str(err)
    found = train_search(Job(model, SYSTEM, Network(), 256, 256), SearchSpace(), top=1)
    assert found.configurations_evaluated > 0
