"""One rule per quantity: the bytes a GPU sends in the traffic matrix are the bytes the timing
model's collectives move for it. The timing functions are run with byte-counting collectives
(each returns what one GPU sends: (n − 1)/n of the buffer per gather pass, ring or hierarchical
alike; a send its bytes; an all-to-all its pair bytes to each other member) and nothing hidden,
and compared with the row sums of the placed matrix, per kind, for a GPU of a middle stage
(stage 1 of pp ≥ 3: it sends both ways)."""

from __future__ import annotations

import numpy as np
import pytest

from railplan.perf import comm_time as ct
from railplan.perf.layout import megatron_shapes
from railplan.specs import Network, Strategy, load_model, load_system
from railplan.specs.arrays import (
    from_strategies,
    layers_of_stage,
    moe_layers_by_stage,
    stage_layers,
)
from railplan.traffic.matrix import KIND_CODE, traffic
from railplan.traffic.placement import place
from railplan.workload import comm

LAYER_KEYS = (
    "wgrad_qkv",
    "wgrad_mlp_up",
    "dgrad_qkv",
    "dgrad_mlp_up",
    "fprop_qkv",
    "fprop_proj",
    "fprop_mlp_up",
    "fprop_mlp_down",
    "attention_forward",
    "attention_backward",
)


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> None:
    def members(shape):  # type: ignore[no-untyped-def]
        return np.asarray(shape.x * shape.y, dtype=float)

    def collective(lk, shape, size, gather_only=False):  # type: ignore[no-untyped-def]
        n = members(shape)
        passes = 1.0 if gather_only else 2.0
        return np.asarray(np.where(n > 1, passes * np.asarray(size) * (n - 1) / n, 0.0))

    monkeypatch.setattr(ct, "group_collective_s", collective)
    monkeypatch.setattr(
        ct, "p2p_s", lambda lk, size, shape, ring=False: np.asarray(size, dtype=float)
    )
    monkeypatch.setattr(
        ct, "direct_all_to_all_s", lambda lk, shape, pair: np.asarray(pair * (members(shape) - 1))
    )
    monkeypatch.setattr(ct, "hidden_cost_s", lambda comm_s, compute_s, u: np.asarray(comm_s))


CASES = {
    "bf16, SP, full recompute": (
        "gpt-3-175b",
        dict(tp=8, pp=8, dp=2, sequence_parallel=True, recompute="full"),
    ),
    "bf16, no SP": ("gpt-3-175b", dict(tp=8, pp=8, dp=2)),
    "fp8, SP, selective": (
        "gpt-3-175b",
        dict(tp=8, pp=8, dp=2, sequence_parallel=True, precision="fp8", recompute="selective"),
    ),
    "fp8, SP, interleaved": (
        "gpt-3-175b",
        dict(tp=8, pp=4, dp=4, interleave=2, sequence_parallel=True, precision="fp8"),
    ),
    "cp 2": ("gpt-3-175b", dict(tp=4, cp=2, pp=4, dp=2, sequence_parallel=True, recompute="full")),
    "MoE, ep 8, moe recompute": (
        "mixtral-8x7b",
        dict(
            tp=2,
            pp=4,
            dp=8,
            ep=8,
            sequence_parallel=True,
            recompute="selective",
            recompute_modules=("moe",),
        ),
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matrix_bytes_are_the_timing_models(counting: None, name: str) -> None:
    model_name, fields = CASES[name]
    model, system = load_model(model_name), load_system("dgx-h100")
    strat = Strategy(global_batch=int(fields.get("dp", 1)) * 8, **fields)  # type: ignore[arg-type]
    s = from_strategies(strat)
    lk = ct.links(system, Network(), s.gpus.astype(float))
    g = megatron_shapes(s.tp, s.dp, s.pp, s.ep, lk.hb_domain, s.cp, s.replicas, s.etp)
    lt = {k: np.zeros(()) for k in LAYER_KEYS}
    m = float(s.micro_batches)
    order = ("tp", "cp", "dp", "pp") if strat.cp > 1 else ("tp", "dp", "pp")
    p = place(strat.tp, strat.pp, strat.dp, system.hb_domain, order, strat.cp)
    gpu = int(p.gpu[1].flat[0])  # a GPU of stage 1
    layers = float(layers_of_stage(model, s, 1))
    t = traffic(model, strat, p)

    def row(kind: str) -> float:
        return float(t.bytes[(t.kind == KIND_CODE[kind]) & (t.src == gpu)].sum())

    tp = ct.tp_comm_times(model, lk, s, lt, g["tp"])
    tp_layer = float(tp["forward"] + tp["recompute"] + tp["backward"])
    ep_layer = 0.0
    if model.moe_layers:  # the routed experts' expert-tp collectives are `tp` in the matrix
        # stage 1's own MoE layers (`stage_layers`' middle_moe), as the pipeline times them
        share = float(stage_layers(model, s)["middle_moe"]) / layers
        ep_layer = share * float(ct.ep_comm_time_s(model, lk, s, g["ep"], np.zeros(())))
        if int(s.etp) > 1:
            tp_layer += share * float(ct.expert_tp_comm_time_s(model, lk, s, g["etp"]))
    cp_layer = float(ct.cp_comm_time_s(model, lk, s, lt, g["cp"]))
    sends = 2.0 * strat.interleave * float(comm.pp_message_bytes(model, s))
    assert row("tp") == pytest.approx(m * layers * tp_layer)
    assert row("ep") == pytest.approx(m * layers * ep_layer)
    assert row("cp") == pytest.approx(m * layers * cp_layer)
    assert row("pp") == pytest.approx(m * sends)


def test_each_stage_sends_its_own_moe_layers_all_to_alls(counting: None) -> None:
    """DeepSeek-V3 (three dense layers first) on tp 2, pp 4, ep 8: the first stage's GPUs send
    the all-to-alls of its 12 MoE layers (15 layers, 3 dense), the second stage's of its 16,
    as the time counts each stage's own MoE layers (`moe_layers_by_stage`)."""
    model, system = load_model("deepseek-v3"), load_system("dgx-h100")
    strat = Strategy(tp=2, pp=4, dp=8, ep=8, expert_tp=1, global_batch=64, sequence_parallel=True)
    s = from_strategies(strat)
    lk = ct.links(system, Network(), s.gpus.astype(float))
    g = megatron_shapes(s.tp, s.dp, s.pp, s.ep, lk.hb_domain, s.cp, s.replicas, s.etp)
    per_moe_layer = float(ct.ep_comm_time_s(model, lk, s, g["ep"], np.zeros(())))
    p = place(strat.tp, strat.pp, strat.dp, system.hb_domain, ("tp", "dp", "pp"))
    t = traffic(model, strat, p)
    counts = moe_layers_by_stage(model, s)
    assert counts[:2] == [12, 16] and sum(counts) == model.moe_layers + model.mtp_layers
    for stage in (0, 1):
        gpu = int(p.gpu[stage].flat[0])
        sent = float(t.bytes[(t.kind == KIND_CODE["ep"]) & (t.src == gpu)].sum())
        assert sent == pytest.approx(float(s.micro_batches) * counts[stage] * per_moe_layer)


def test_each_stage_runs_its_own_layers_tp_collectives(counting: None) -> None:
    """Mixtral 8x7B with three dense layers first (no shared experts: an MoE layer runs no MLP
    collectives on the tp group) on tp 2, pp 4, ep 4: each stage's tp bytes are its dense
    layers' and its MoE layers' collectives, as the time counts them."""
    base = load_model("mixtral-8x7b")
    model = base.model_copy(update={"first_dense_layers": 3})
    system = load_system("dgx-h100")
    strat = Strategy(tp=2, pp=4, dp=4, ep=4, expert_tp=1, global_batch=32, sequence_parallel=True)
    s = from_strategies(strat)
    lk = ct.links(system, Network(), s.gpus.astype(float))
    g = megatron_shapes(s.tp, s.dp, s.pp, s.ep, lk.hb_domain, s.cp, s.replicas, s.etp)
    lt = {k: np.zeros(()) for k in LAYER_KEYS}

    def per_layer(view: object) -> float:
        tp = ct.tp_comm_times(view, lk, s, lt, g["tp"])  # type: ignore[arg-type]
        return float(tp["forward"] + tp["recompute"] + tp["backward"])

    dense = per_layer(model.model_copy(update={"first_dense_layers": model.layers}))
    moe = per_layer(model.model_copy(update={"first_dense_layers": 0}))
    assert dense > moe
    p = place(strat.tp, strat.pp, strat.dp, system.hb_domain, ("tp", "dp", "pp"))
    t = traffic(model, strat, p)
    counts = moe_layers_by_stage(model, s)
    for stage in (0, 1):
        n = float(layers_of_stage(model, s, stage))
        gpu = int(p.gpu[stage].flat[0])
        sent = float(t.bytes[(t.kind == KIND_CODE["tp"]) & (t.src == gpu)].sum())
        want = float(s.micro_batches) * ((n - counts[stage]) * dense + counts[stage] * moe)
        assert sent == pytest.approx(want)
