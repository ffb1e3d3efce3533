"""Each pipeline stage with its own layers: the MoE layers among them (the model's leading dense
layers on the first stage, an MoE multi-token prediction layer on the last), its own vocabulary
matrices and its own activations, for time and memory alike."""

import pytest

from railplan.perf.iteration import iteration
from railplan.specs import Network, Strategy, load_model, load_system
from railplan.specs.arrays import from_strategies, moe_layers_before, stage_layers
from railplan.workload.memory import (
    OPTIMIZER_STATE_BYTES,
    WEIGHT_BYTES,
    layer_activation_bytes,
    logits_bytes,
    memory,
    stage_activation_bytes,
    without_recompute,
)

DEEPSEEK = load_model("deepseek-v3")  # 61 layers, the first 3 dense, one MTP layer
H100 = load_system("dgx-h100")


def _deepseek(**kw: object) -> Strategy:
    base = dict(
        tp=2, pp=8, dp=32, ep=64, expert_tp=1, global_batch=4096, sequence_parallel=True, zero=1
    )
    return Strategy(**(base | kw))  # type: ignore[arg-type]


def test_moe_layers_before_by_hand() -> None:
    # after 3 dense layers every layer is MoE: 0 among the first 3, 4 among the first 7
    assert [int(moe_layers_before(DEEPSEEK, n)) for n in (0, 3, 7, 61)] == [0, 0, 4, 58]
    every_other = DEEPSEEK.model_copy(update={"first_dense_layers": 1, "moe_layer_interval": 2})
    # layers 2, 4, 6, … (the 2nd, 4th, … after the dense one): 30 of 61
    assert every_other.moe_layers == 30
    assert [int(moe_layers_before(every_other, n)) for n in (1, 2, 3, 61)] == [0, 0, 1, 30]


@pytest.mark.parametrize(
    ("kw", "want"),
    [
        # 7 | 6×8 | 6 + MTP: the first stage holds the 3 dense layers, the last is all MoE
        (dict(first_stage_layers=7, last_stage_layers=6), (4, 8, 7)),
        # 3 | 14×4 | 2 + MTP (the dgxc 1,024-GPU recipe): the first stage is all dense
        (dict(pp=16, dp=16, first_stage_layers=3, last_stage_layers=2), (0, 4, 3)),
        # one stage: every MoE layer and the MTP layer
        (dict(pp=1, dp=256), (59, 0, 59)),
    ],
)
def test_moe_layers_of_each_stage(kw: dict[str, int], want: tuple[int, int, int]) -> None:
    st = stage_layers(DEEPSEEK, from_strategies(_deepseek(**kw)))
    got = tuple(int(st[k + "_moe"]) for k in ("first", "middle", "last"))
    assert got == want
    assert all(st[k + "_moe"] <= st[k] for k in ("first", "middle", "last"))


def test_an_all_moe_stage_costs_what_the_all_moe_model_gives_it() -> None:
    """The middle and last stages of DeepSeek-V3 on pp 8 hold MoE layers only: each takes, per
    micro-batch, what the same stage of a model whose every layer is an MoE layer takes (each
    per-layer cost is linear in the MoE share); the first stage, with the dense layers, less."""
    s = from_strategies(_deepseek(first_stage_layers=7, last_stage_layers=6))
    every = DEEPSEEK.model_copy(update={"first_dense_layers": 0})
    it, all_moe = (iteration(m, H100, Network(), s) for m in (DEEPSEEK, every))
    for k in ("middle", "last"):
        assert float(it.stage_s[k]) == pytest.approx(float(all_moe.stage_s[k]), rel=1e-9)
    assert float(it.stage_s["first"]) < float(all_moe.stage_s["first"])
    assert sum(float(x) for x in it.breakdown_s.values()) == pytest.approx(float(it.iteration_s))


def test_dense_model_stages_are_unchanged_by_the_moe_rule() -> None:
    """A dense model has no MoE excess: the stage times are the average layer's."""
    m = load_model("gpt-3-175b")
    s = from_strategies(Strategy(tp=8, pp=8, dp=2, global_batch=64, sequence_parallel=True))
    st = stage_layers(m, s)
    assert all(float(st[k + "_moe"]) == 0.0 for k in ("first", "middle", "last"))
    it = iteration(m, H100, Network(), s)
    assert sum(float(x) for x in it.breakdown_s.values()) == pytest.approx(float(it.iteration_s))


def test_memory_is_the_most_loaded_stage_with_its_own_parts() -> None:
    """Llama 3.1 405B on tp 8, pp 16 (ZeRO-1, no recompute): 126 layers give the first and the
    last stage 7 and the middle ones 8 (`stage_layer_counts`). Rank 1 peaks (8 layers × 15
    micro-batches in flight against the first stage's 7 × 16); its weights are its own 8
    layers, without any vocabulary matrix, and the reported parts sum to the total."""
    m = load_model("llama-3.1-405b")
    s = from_strategies(
        Strategy(tp=8, pp=16, dp=128, global_batch=2048, sequence_parallel=True, zero=1)
    )
    st = stage_layers(m, s)
    assert (int(st["first"]), int(st["middle"]), int(st["last"])) == (7, 8, 7)
    mem = memory(m, s)
    params = 8 * m.layer_params() / 8
    assert float(mem.weights_bytes) == pytest.approx(WEIGHT_BYTES * params)
    assert float(mem.optimizer_bytes) == pytest.approx(
        float(OPTIMIZER_STATE_BYTES[0]) * params / 128
    )
    acts = stage_activation_bytes(m, s)
    assert float(mem.activations_bytes) == pytest.approx(float(acts["middle"]))
    assert float(acts["middle"]) > float(acts["first"])
    parts = (
        mem.weights_bytes,
        mem.gradients_bytes,
        mem.optimizer_bytes,
        mem.activations_bytes,
        mem.reserved_bytes,
        mem.gathered_bytes,
    )
    assert float(sum(parts)) == pytest.approx(float(mem.total_bytes))


def test_the_head_stage_holds_logits_or_a_recomputed_layer_not_both() -> None:
    """pp = 1 with full recompute: the loss frees its logits before the first layer is
    recomputed, so the stage holds the larger of the two beside the layers' inputs."""
    m = load_model("llama-3.1-8b")
    full = from_strategies(Strategy(global_batch=8, dp=8, recompute="full"))
    inputs = m.layers * float(layer_activation_bytes(m, full))  # each layer's input
    one_layer = float(layer_activation_bytes(m, without_recompute(full)))
    logits = float(logits_bytes(m, full))
    acts = stage_activation_bytes(m, full)
    assert float(acts["first"]) == pytest.approx(inputs + max(logits, one_layer))
    assert float(acts["last"]) == float(acts["first"])  # one stage: both ends
