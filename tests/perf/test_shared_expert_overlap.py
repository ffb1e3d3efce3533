"""Shared experts beside the all-to-alls (`Strategy.shared_expert_overlap`, Megatron-Core
--moe-shared-expert-overlap): the gathered input their first GEMM keeps, by hand; the
all-to-alls they hide, by hand and as bounds; the refusals as one-line errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from railplan import Network, RailplanError, Strategy, estimate, load_model, load_system
from railplan.perf.comm_time import ep_comm_time_s, hidden_cost_s, links, one_all_to_all_s
from railplan.perf.layer_time import layer_times
from railplan.perf.layout import megatron_shapes
from railplan.specs.arrays import from_strategies
from railplan.workload.memory import layer_activation_bytes

V3 = load_model("deepseek-v3")  # one shared expert
H100 = load_system("dgx-h100")
BASE: dict[str, object] = {"global_batch": 64, "micro_batch": 1, "dp": 32, "ep": 32}


def _strategy(**kw: object) -> Strategy:
    return Strategy(**(BASE | kw))  # type: ignore[arg-type]


def _bytes(**kw: object) -> float:
    return float(layer_activation_bytes(V3, from_strategies(_strategy(**kw))))


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
@pytest.mark.parametrize("router", ["bf16", "fp32"])
def test_gathered_input_by_hand(precision: str, router: str) -> None:
    """tp 2 with sequence parallelism: the shared experts' first GEMM keeps the whole
    sequence's input (2 bytes per hidden element, its FP8 cast 1) instead of the shard it kept
    (2/tp, 1/tp): unless a BF16 router keeps that BF16 shard as its own input anyway, the
    shard's bytes are freed."""
    kw: dict[str, object] = {"tp": 2, "dp": 16, "ep": 16, "sequence_parallel": True}
    kw |= {"precision": precision, "router_dtype": router}
    added = _bytes(shared_expert_overlap=True, **kw) - _bytes(**kw)
    width = 1.0 if precision == "fp8" else 2.0
    router_keeps_it = router == "bf16" and precision == "bf16"
    shard = 0.0 if router_keeps_it else width / 2
    share = V3.moe_layers / V3.layers
    assert added == pytest.approx(share * V3.seq * V3.hidden * (width - shard))


@pytest.mark.parametrize("kw", [{"tp": 1}, {"tp": 2, "dp": 16, "ep": 16}])
def test_nothing_gathered_without_sequence_parallelism(kw: dict[str, object]) -> None:
    """tp 1, or no sequence parallelism: the shared experts' input is the layer's own (the
    copy into the tensor-parallel region is the identity forward)."""
    if kw["tp"] == 2:  # an MoE layer with tp > 1 needs SP (Megatron-Core); memory alone here
        s = from_strategies(_strategy(**kw))
        with_overlap = from_strategies(_strategy(shared_expert_overlap=True, **kw))
        assert float(layer_activation_bytes(V3, with_overlap)) == float(
            layer_activation_bytes(V3, s)
        )
    else:
        assert _bytes(shared_expert_overlap=True, **kw) == _bytes(**kw)


PIECES = (
    "moe_shared_up_forward",
    "moe_shared_down_forward",
    "moe_shared_up_backward",
    "moe_shared_down_backward",
)


def _ep_case(**kw: object) -> tuple[float, float, float, dict[str, float]]:
    s = from_strategies(_strategy(**kw))
    lk = links(H100, Network(), np.asarray(32.0))
    shape = megatron_shapes(s.tp, s.dp, s.pp, s.ep, lk.hb_domain, s.cp)["ep"]
    lt = layer_times(V3, H100, s)
    pieces = {k: lt[k] for k in PIECES}
    zero = np.zeros(())
    plain = float(ep_comm_time_s(V3, lk, s, shape, zero))
    beside = float(ep_comm_time_s(V3, lk, s, shape, zero, pieces))
    one = float(one_all_to_all_s(V3, lk, s, shape, 1.0))
    return plain, beside, one, {k: float(v) for k, v in pieces.items()}


def test_all_to_alls_hidden_by_hand() -> None:
    """ep 32 over four H100 servers: the dispatch exposes what outlasts the shared experts' up
    projection and activation, or the SM share u it takes from them; the combine likewise
    with the down projection; in the backward each gradient's all-to-all beside the same
    piece's gradient (Megatron-Core's MoE README: both passes overlap)."""
    plain, beside, one, p = _ep_case(shared_expert_overlap=True)
    assert plain == pytest.approx(4 * one)
    u = H100.comm_sm_fraction
    expected = sum(float(hidden_cost_s(np.asarray(one), np.asarray(p[k]), u)) for k in PIECES)
    assert beside == pytest.approx(expected)
    assert all(0 < p[k] < one for k in PIECES)  # here the all-to-all outlasts every piece
    assert beside == pytest.approx(4 * one - sum(p.values()))
    # the backward pieces: the GEMMs' two gradients each, more than their forward
    assert p["moe_shared_up_backward"] > p["moe_shared_up_forward"]
    assert p["moe_shared_down_backward"] > p["moe_shared_down_forward"]
    off, unchanged, _, _ = _ep_case()
    assert unchanged == off == plain


def test_a_rerun_moe_block_hides_its_all_to_alls_again() -> None:
    kw: dict[str, object] = {"recompute": "selective", "recompute_modules": ("core_attn", "moe")}
    plain, beside, one, p = _ep_case(shared_expert_overlap=True, **kw)
    assert plain == pytest.approx(6 * one)
    forward = p["moe_shared_up_forward"] + p["moe_shared_down_forward"]
    backward = p["moe_shared_up_backward"] + p["moe_shared_down_backward"]
    assert beside == pytest.approx(6 * one - 2 * forward - backward)


@settings(max_examples=25, deadline=None)
@given(pieces=st.lists(st.floats(0.0, 1e-2), min_size=4, max_size=4))
def test_hiding_is_bounded(pieces: list[float]) -> None:
    """Whatever the shared experts take, the exposed all-to-all time is at most the plain one
    and at least the SM share u of it."""
    s = from_strategies(_strategy(shared_expert_overlap=True))
    lk = links(H100, Network(), np.asarray(32.0))
    shape = megatron_shapes(s.tp, s.dp, s.pp, s.ep, lk.hb_domain, s.cp)["ep"]
    zero = np.zeros(())
    one = float(one_all_to_all_s(V3, lk, s, shape, 1.0))
    given = {k: np.asarray(v) for k, v in zip(PIECES, pieces, strict=True)}
    got = float(ep_comm_time_s(V3, lk, s, shape, zero, given))
    u = H100.comm_sm_fraction
    assert 4 * u * one - 1e-12 <= got <= 4 * one + 1e-12


def test_the_deepseek_row_by_hand() -> None:
    """The dgxc DeepSeek-V3 row on 512 H100 with its recipe's FP32 router: the overlap adds,
    per MoE layer and micro-batch on rank 1 (8 layers, 7 micro-batches in flight), the whole
    sequence's BF16 input less the shard the FP32 router leaves unkept; and it is faster."""
    s = Strategy(
        tp=2, pp=8, dp=32, ep=64, expert_tp=1, global_batch=4096, first_stage_layers=7,
        last_stage_layers=6, sequence_parallel=True, zero=1, recompute="selective",
        recompute_modules=("mla_up_proj",), router_dtype="fp32",
    )  # fmt: skip
    off = estimate(V3, "dgx-h100", s, Network())
    on = estimate(V3, "dgx-h100", s.model_copy(update={"shared_expert_overlap": True}), Network())
    per = V3.seq * V3.hidden * (2.0 - 2.0 / 2)
    assert on.memory_peak_rank == 1
    assert on.memory_gib_per_gpu - off.memory_gib_per_gpu == pytest.approx(8 * 7 * per / 2**30)
    assert on.breakdown_s["ep_comm"] < off.breakdown_s["ep_comm"]
    assert on.iteration_s < off.iteration_s


@pytest.mark.parametrize(
    ("model", "kw", "message"),
    [
        ("mixtral-8x7b", {"ep": 8}, "needs a model with shared experts"),
        ("deepseek-v3", {"ep_dispatch": "deepep"}, "needs ep_dispatch alltoall"),
        ("deepseek-v3", {"overlap_ep": True}, "cannot run with overlap_ep"),
        (
            "deepseek-v3",
            {"recompute": "selective", "recompute_modules": ("moe", "shared_experts")},
            "shared_experts recompute module",
        ),
    ],
)
def test_refusals_are_one_line(model: str, kw: dict[str, object], message: str) -> None:
    s = Strategy(**(BASE | kw | {"shared_expert_overlap": True}))  # type: ignore[arg-type]
    with pytest.raises(RailplanError, match=rf"^shared_expert_overlap: .*{message}") as err:
        estimate(model, "dgx-h100", s, Network())
    assert len(str(err.value).splitlines()) == 1


def test_cli_shared_expert_overlap(cli) -> None:  # type: ignore[no-untyped-def]
    args = ("--model", "deepseek-v3", "--gpus", "2048", "--tp", "2", "--pp", "16", "--ep", "64")
    args += ("--global-batch", "1024", "--sequence-parallel", "--zero", "1")
    d = cli.json("estimate", *args, "--shared-expert-overlap")
    plain = cli.json("estimate", *args)
    assert d["strategy"]["shared_expert_overlap"] is True
    assert plain["strategy"]["shared_expert_overlap"] is False
    assert d["breakdown_s"]["ep_comm"] < plain["breakdown_s"]["ep_comm"]
    assert d["memory_gib_per_gpu"] > plain["memory_gib_per_gpu"]
    dense = ("--model", "mixtral-8x7b", "--gpus", "64", "--ep", "8", "--global-batch", "128")
    for command in ("estimate", "search"):
        bad = cli(command, *dense, "--shared-expert-overlap")
        assert bad.exit_code == 2, command
        message = str(bad.exception)
        assert message.startswith("shared_expert_overlap:") and len(message.splitlines()) == 1


def test_refused_where_it_changes_nothing_and_searched_where_it_does(cli) -> None:  # type: ignore[no-untyped-def]
    """With ep 1 and no sequence-parallel tp > 1 there is no all-to-all to run beside and no
    input to gather: estimate refuses the flag there; search applies it where it changes
    anything (its best strategy is what estimate gives)."""
    s = Strategy(**(BASE | {"ep": 1, "shared_expert_overlap": True}))  # type: ignore[arg-type]
    with pytest.raises(RailplanError, match=r"^shared_expert_overlap: .*changes nothing"):
        estimate(V3, "dgx-h100", s, Network())
    args = ("--model", "deepseek-v3", "--gpus", "2048", "--global-batch", "4096")
    args += ("--tp", "2", "--pp", "16", "--shared-expert-overlap", "--top", "1")
    found = cli.json("search", *args)
    best = found["best"]["strategy"]
    assert best["shared_expert_overlap"] is (best["ep"] > 1 or best["sequence_parallel"])
    command = [
        "estimate", "--model", "deepseek-v3", "--gpus", "2048",
        "--global-batch", "4096", "--tp", str(best["tp"]), "--pp", str(best["pp"]),
        "--ep", str(best["ep"]), "--dp", str(best["dp"]), "--cp", str(best["cp"]),
        "--micro-batch", str(best["micro_batch"]), "--interleave", str(best["interleave"]),
        "--recompute", best["recompute"], "--zero", str(best["zero"]),
        "--first-stage-layers", str(best["first_stage_layers"]),
        "--last-stage-layers", str(best["last_stage_layers"]),
        "--sequence-parallel" if best["sequence_parallel"] else "--no-sequence-parallel",
        "--expert-tp", str(best["expert_tp"]),
    ]  # fmt: skip
    if best["shared_expert_overlap"]:
        command.append("--shared-expert-overlap")
    again = cli.json(*command)
    assert again["iteration_s"] == pytest.approx(found["best"]["iteration_s"], rel=1e-12)
