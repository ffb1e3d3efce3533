"""Random deployments, valid and invalid: a one-line RailplanError or finite, non-negative
answers (never a traceback or NaN)."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from railplan.errors import RailplanError
from railplan.inference.engine import Deployment
from railplan.inference.estimate import infer
from railplan.inference.serving import serve
from railplan.specs import Model, Network, load_system

SYSTEMS = ["dgx-a100", "dgx-h100", "dgx-h200", "gb200-nvl72", "mi300x"]


@st.composite
def models(draw: st.DrawFn) -> Model:
    heads = draw(st.sampled_from([8, 16, 32, 64, 128]))
    head_dim = draw(st.sampled_from([64, 128]))
    experts = draw(st.sampled_from([1, 1, 8, 64]))
    return Model(
        hidden=heads * head_dim,
        heads=heads,
        layers=draw(st.integers(1, 160)),
        kv_heads=draw(st.sampled_from([heads, max(heads // 8, 1)])),
        gated_mlp=draw(st.booleans()),
        vocab=draw(st.sampled_from([32000, 128256])),
        experts=experts,
        top_k=min(experts, draw(st.sampled_from([1, 2, 8]))),
    )


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    models(),
    st.sampled_from(SYSTEMS),
    st.sampled_from(["rail-optimized", "rail-only", "ideal"]),
    st.integers(-1, 512),
    st.sampled_from([1, 2, 3, 4, 8, 16, 64]),
    st.sampled_from([1, 2, 3, 4, 8]),
    st.sampled_from([1, 2, 8]),
    st.sampled_from(["bf16", "fp8", "fp4", "int8"]),
    st.one_of(st.none(), st.integers(-1, 5000)),
    st.integers(-1, 40000),
    st.integers(-1, 5000),
)
def test_infer_answers_or_refuses(
    model: Model,
    system: str,
    network: str,
    gpus: int,
    tp: int,
    pp: int,
    ep: int,
    precision: str,
    batch: int | None,
    prompt: int,
    output: int,
) -> None:
    try:
        d = Deployment(
            model, load_system(system), Network(architecture=network), gpus, tp, pp, ep, precision
        )
        r = infer(d, batch, prompt, output)
    except RailplanError as err:
        assert "\n" not in str(err) and err.field
        return
    values = [r.ttft_s, r.tpot_s, r.tokens_per_s_per_gpu, r.kv_cache_gib_per_gpu]
    values += list(r.breakdown_s.values())
    assert all(math.isfinite(v) and v >= 0 for v in values), r
    assert r.tpot_s > 0 and r.max_batch >= 0


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.floats(0.01, 500.0), st.integers(1, 300), st.integers(1, 2048), st.integers(1, 300))
def test_serving_is_finite(rate: float, requests: int, prompt: int, output: int) -> None:
    d = Deployment(
        Model(hidden=4096, heads=32, kv_heads=8, layers=32, gated_mlp=True, vocab=128256),
        load_system("dgx-h100"),
        Network(),
        8,
        1,
    )
    r = serve(d, rate, prompt, output, requests=requests)
    for v in (
        r.ttft_mean_s,
        r.ttft_p99_s,
        r.tpot_mean_s,
        r.tpot_p99_s,
        r.itl_p99_s,
        r.tokens_per_s,
    ):
        assert math.isfinite(v) and v >= 0
