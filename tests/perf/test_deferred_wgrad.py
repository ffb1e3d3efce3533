"""Deferred LM-head weight gradient (Megatron-Core `defer_embedding_wgrad_compute`): a pipeline
worked by hand, the bounds it obeys, and the knob through the whole model."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from railplan.perf.estimate import estimate
from railplan.perf.iteration import DataParallel, iteration, pipeline
from railplan.perf.layer_time import logits_times
from railplan.specs import Network, Strategy, load_model, load_system
from railplan.specs.arrays import StrategyArrays, from_strategies
from railplan.workload.memory import (
    deferred_wgrad_bytes,
    layer_activation_bytes,
    logits_bytes,
    memory,
    stage_activation_bytes,
)
from tests.perf.pipeline_arrays import pipeline_arrays


def _arrays(pp: int, v: int, m: int, defer: bool, limit: int = 0) -> StrategyArrays:
    return pipeline_arrays(pp, v, m, defer_embedding_wgrad=int(defer), wgrad_deferral_limit=limit)


NO_DP = DataParallel(*(np.zeros(()) for _ in range(7)))


def _run(
    s: StrategyArrays,
    layers: tuple[float, float, float],
    t_logits: float,
    t_wgrad: float,
    t_backward: float = 2.0,
) -> float:
    """Steady state + bubble of `pipeline` for a stage of forward 1, backward 2 per layer (no
    communication): first, middle and last stage of `layers` layers."""
    first, middle, last = layers
    stages = {
        "first": np.asarray(first),
        "middle": np.asarray(middle),
        "last": np.asarray(last),
        "mean": np.asarray(2.0),
    }
    lt = {"forward": np.asarray(1.0), "backward": np.asarray(2.0), "recompute": np.asarray(0.0)}
    p = pipeline(
        s,
        stages,
        lt,
        np.asarray(3.0),
        {"t": np.asarray(t_logits), "wgrad": np.asarray(t_wgrad)},
        np.asarray(0.0),
        NO_DP,
        np.asarray(0.0),
        0.0,
        np.asarray(t_backward),
    )
    return float(p.steady_s + p.bubble_s)


def test_hand_computed_pipeline() -> None:
    """pp 4, 8 micro-batches, 2 layers per stage of 3 s each (forward 1 + backward 2), LM head
    4 s of which the weight gradient is 1.5 s.
    Off: stages 6, 6, 6 + 4 = 10 s: 8 · 10 + 3 · (6 + 4/4) = 101 s.
    Deferred, all 8: the last stage goes at 10 − 1.5 = 8.5 s, still the slowest: 8 · 8.5 = 68;
    the 8 · 1.5 = 12 s of deferred GEMMs fill the cooldown idle of 3 stage backward passes,
    3 · 2 layers · 2 s = 12 s, exactly: 68 + 21 = 89 s, 12 s = k · t_w saved.
    Limit 3: 5 · 10 + 3 · 8.5 + 21 = 96.5 s (4.5 s saved)."""
    layers = (2.0, 2.0, 2.0)
    off = _run(_arrays(4, 1, 8, False), layers, 4.0, 1.5)
    assert off == pytest.approx(101.0)
    assert _run(_arrays(4, 1, 8, True), layers, 4.0, 1.5) == pytest.approx(89.0)
    assert _run(_arrays(4, 1, 8, True, 3), layers, 4.0, 1.5) == pytest.approx(96.5)
    # Twice the weight gradient (3 s): 8 · max(6, 7) = 56 s, but 24 s of deferred GEMMs against
    # 12 s of idle: 12 s extend the flush: 56 + 21 + 12 = 89 s (off: 8 · 10 + 21 = 101 s).
    assert _run(_arrays(4, 1, 8, True), layers, 4.0, 3.0) == pytest.approx(89.0)
    # Interleaved (v = 2): the idle is (pp − 1)/v = 1.5 stage backward passes: 6 s; bubble
    # 1.5 · 7 = 10.5; steady 68; 12 − 6 = 6 s exposed: 84.5 s (off: 80 + 10.5 = 90.5).
    assert _run(_arrays(4, 2, 8, False), layers, 4.0, 1.5) == pytest.approx(90.5)
    assert _run(_arrays(4, 2, 8, True), layers, 4.0, 1.5) == pytest.approx(84.5)


def test_deferral_can_slow_a_pipeline_the_last_stage_does_not_pace() -> None:
    """First stage of 3 layers (9 s) paces; the last (1 layer + LM head: 7 s) waits anyway, so
    deferring saves nothing in the steady state, and 8 · 1.5 = 12 s of GEMMs meet 3 · 2 · 1 =
    6 s of idle (1 s backward passes): 6 s slower. Megatron-Core runs the deferred GEMMs only
    in the flush, never in the steady-state waits."""
    layers = (3.0, 2.0, 1.0)
    off = _run(_arrays(4, 1, 8, False), layers, 4.0, 1.5, t_backward=1.0)
    on = _run(_arrays(4, 1, 8, True), layers, 4.0, 1.5, t_backward=1.0)
    assert on - off == pytest.approx(6.0)


def test_no_effect_without_pipeline() -> None:
    layers = (2.0, 2.0, 2.0)
    assert _run(_arrays(1, 1, 8, True), layers, 4.0, 1.5) == _run(
        _arrays(1, 1, 8, False), layers, 4.0, 1.5
    )


@settings(max_examples=300, deadline=None)
@given(
    st.integers(2, 16),
    st.integers(1, 4),
    st.integers(1, 64),
    st.integers(0, 80),
    st.tuples(*(st.floats(0.0, 8.0) for _ in range(3))),
    st.floats(0.0, 10.0),
    st.floats(0.0, 1.0),
    st.floats(0.0, 4.0),
)
def test_deferral_bounds(
    pp: int,
    v: int,
    m: int,
    limit: int,
    layers: tuple[float, float, float],
    t_logits: float,
    wgrad_share: float,
    t_backward: float,
) -> None:
    """Deferral saves at most the k deferred GEMMs, costs at most what of them does not fit
    in the cooldown idle, and never slows a pipeline whose last stage paces even without
    them."""
    t_w = wgrad_share * t_logits
    off = _run(_arrays(pp, v, m, False), layers, t_logits, t_w, t_backward)
    on = _run(_arrays(pp, v, m, True, limit), layers, t_logits, t_w, t_backward)
    k = m if limit == 0 else min(limit, m)
    idle = (pp - 1) / v * 2.0 * t_backward
    eps = 1e-9 * max(1.0, off)
    assert on >= off - k * t_w - eps
    assert on <= off + max(0.0, k * t_w - idle) + eps
    last = 3.0 * layers[2] + t_logits
    others = max(3.0 * layers[0], 3.0 * layers[1] if pp > 2 else 0.0)
    if last - t_w >= others:
        assert on <= off + eps


MODEL = load_model("gpt-175b")


def test_through_the_model_saves_the_deferred_gemms() -> None:
    """GPT-175B on H100, pp 8, 4 micro-batches: the last stage (12 layers + LM head) paces by
    more than the LM head's weight gradient and the 4 deferred GEMMs fit in the cooldown, so
    the iteration is shorter by exactly 4 · t_w, and the breakdown still sums."""
    system = load_system("dgx-h100")
    base = Strategy(tp=8, pp=8, dp=1, global_batch=4, sequence_parallel=True)
    on = base.model_copy(update={"defer_embedding_wgrad": True})
    off_it = iteration(MODEL, system, Network(), from_strategies(base))
    on_it = iteration(MODEL, system, Network(), from_strategies(on))
    t_w = float(logits_times(MODEL, system, from_strategies(base))["wgrad"])
    stages = off_it.stage_s
    assert float(stages["last"]) - t_w >= max(float(stages["first"]), float(stages["middle"]))
    assert float(off_it.iteration_s - on_it.iteration_s) == pytest.approx(4 * t_w, rel=1e-9)
    assert sum(float(x) for x in on_it.breakdown_s.values()) == pytest.approx(
        float(on_it.iteration_s)
    )
    e = estimate(MODEL, system, on, Network(), gpus=64)
    assert e.iteration_s == pytest.approx(float(on_it.iteration_s))


def test_deferred_buffers_count_in_the_last_stage() -> None:
    """Each deferred micro-batch keeps the LM head's BF16 input (s·b·h/tp with SP) and output
    gradient (s·b·V/tp) until the flush, on top of the last stage's activations."""
    s = Strategy(tp=8, pp=8, dp=1, global_batch=16, sequence_parallel=True, last_stage_layers=5)
    per_mb = 2.0 * MODEL.seq * (MODEL.hidden + MODEL.vocab) / 8
    off = from_strategies(s)
    # the last stage's 5 layers hold one micro-batch each (1F1B), and its logits
    last_off = float(5 * layer_activation_bytes(MODEL, off) + logits_bytes(MODEL, off))
    assert float(stage_activation_bytes(MODEL, off)["last"]) == pytest.approx(last_off)
    for limit, k in ((0, 16), (5, 5), (40, 16)):
        on = s.model_copy(update={"defer_embedding_wgrad": True, "wgrad_deferral_limit": limit})
        arrays = from_strategies(on)
        assert float(deferred_wgrad_bytes(MODEL, arrays)) == pytest.approx(k * per_mb)
        last = float(stage_activation_bytes(MODEL, arrays)["last"])
        assert last == pytest.approx(last_off + k * per_mb)
        grown = float(memory(MODEL, arrays).total_bytes - memory(MODEL, off).total_bytes)
        assert 0.0 <= grown <= k * per_mb + 1.0
