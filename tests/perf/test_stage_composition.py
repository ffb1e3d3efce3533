"""Each pipeline stage with its own layers: the MoE layers among them (the model's leading dense
layers on the first stage, an MoE multi-token prediction layer on the last), its own vocabulary
matrices and its own activations, for time and memory alike."""

from dataclasses import replace

import numpy as np
import pytest

from railplan.perf.iteration import iteration
from railplan.specs import Network, Strategy, load_model, load_system
from railplan.specs.arrays import (
    from_strategies,
    moe_layers_before,
    moe_layers_by_stage,
    stage_layers,
)
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


def test_the_middle_stage_with_most_moe_layers_paces_and_peaks() -> None:
    """DeepSeek-V3 on pp 32 (1 | 2×29 | 1 | 1 + MTP): rank 1 holds layers 1–2, both dense;
    rank 2 two MoE layers. Memory reports rank 2 (its experts and its MoE activations), and
    on pp 16 with one layer at each end the pipeline's middle stage is rank 2's five MoE layers
    (rank 1: two dense and three MoE), as a model with every layer an MoE layer gives it."""
    s = from_strategies(_deepseek(pp=32, dp=16, ep=8, zero=0, recompute="selective"))
    st = stage_layers(DEEPSEEK, s)
    assert (float(st["middle_moe"]), float(st["heavy_moe"]), float(st["heavy_rank"])) == (0, 2, 2)
    mem, acts = memory(DEEPSEEK, s), stage_activation_bytes(DEEPSEEK, s)
    assert float(mem.activations_bytes) == pytest.approx(float(acts["heavy"]))
    assert float(mem.peak_rank) == 2.0
    assert not bool(mem.fits(H100.gpu))  # rank 1 alone would fit
    kw = dict(pp=16, dp=64, first_stage_layers=1, last_stage_layers=1, ep=8)
    s16 = from_strategies(_deepseek(**kw))
    st16 = stage_layers(DEEPSEEK, s16)
    assert (float(st16["middle_moe"]), float(st16["heavy_moe"])) == (3, 5)
    every = DEEPSEEK.model_copy(update={"first_dense_layers": 0})
    it, all_moe = (iteration(m, H100, Network(), s16) for m in (DEEPSEEK, every))
    assert float(it.stage_s["middle"]) == pytest.approx(float(all_moe.stage_s["middle"]))


def test_every_other_layer_moe_counts_by_rank() -> None:
    """MoE layers every second layer after one dense layer, pp 6: the ranks' counts alternate;
    the heavy stage is the middle rank with the most, and all of them add up to the model's."""
    model = DEEPSEEK.model_copy(update={"first_dense_layers": 1, "moe_layer_interval": 2})
    s = from_strategies(_deepseek(pp=6, dp=32, ep=8))
    counts = moe_layers_by_stage(model, s)
    assert sum(counts) == model.moe_layers + model.mtp_layers
    st = stage_layers(model, s)
    assert float(st["heavy_moe"]) == max(counts[1:-1])
    assert counts[int(st["heavy_rank"])] == max(counts[1:-1])


def test_many_strategies_at_once_match_one_at_a_time() -> None:
    """The table path of `stage_layers` (more than 64 strategies, one first/last stage rule)
    gives every schedule its own rank layout: an MoE model without MTP layers under DualPipeV
    and 1F1B alike, iteration time and memory as each strategy alone."""
    model = load_model("moe-1.3b")
    system = load_system("dgx-a100")
    strategies = [
        Strategy(
            pp=pp,
            dp=64 // pp,
            ep=8,
            micro_batch=mb,
            global_batch=512,
            interleave=2,
            pipeline_schedule=sched,
        )
        for pp in (2, 4, 8)
        for sched in ("dualpipev", "1f1b")
        for mb in (1, 2, 4, 8)
    ] * 3
    # one first/last stage rule for all (scalars), as the search builds its candidates
    many = replace(
        from_strategies(strategies),
        first_stage_layers=np.asarray(0),
        last_stage_layers=np.asarray(0),
    )
    together = iteration(model, system, Network(), many)
    assert len(strategies) > 64
    for i, one in enumerate(strategies[:24]):
        alone = iteration(model, system, Network(), from_strategies(one))
        assert float(together.iteration_s[i]) == pytest.approx(float(alone.iteration_s))
        assert float(together.memory.total_bytes[i]) == pytest.approx(
            float(alone.memory.total_bytes)
        )


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
    assert float(mem.peak_rank) == 1.0
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


def test_the_pace_is_the_slowest_middle_rank_when_moe_layers_cost_less(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """moe-1.3b (an MoE layer every second layer, no shared experts) with tp 8 and whole
    experts on every rank (ep 1, expert_tp 1): an MoE layer skips the dense MLP's tensor-parallel
    collectives and its recompute, so it costs less than a dense layer, and the slowest middle
    rank is one with the fewest MoE layers. The pipeline's middle stage is the slowest of every
    middle rank, each forced in turn as the one compared with rank 1."""
    import railplan.perf.iteration as it_mod
    from railplan.specs.arrays import layers_of_stage

    model = load_model("moe-1.3b").model_copy(update={"vocab": 8192})
    a100 = load_system("dgx-a100")
    strat = Strategy(
        tp=8,
        pp=9,
        dp=2,
        ep=1,
        expert_tp=1,
        micro_batch=128,
        global_batch=2048,
        first_stage_layers=1,
        last_stage_layers=2,
        recompute="selective",
        recompute_modules=("mlp",),
        sequence_parallel=True,
    )
    s = from_strategies(strat)
    got = float(iteration(model, a100, Network(), s).stage_s["middle"])
    counts = moe_layers_by_stage(model, s)
    real = it_mod.stage_layers
    forced = []
    for rank in range(1, 8):

        def one_rank(m: object, x: object, rank: int = rank) -> dict[str, object]:
            st = dict(real(m, x))  # type: ignore[arg-type]
            st["heavy"] = np.asarray(float(layers_of_stage(model, s, rank)))
            st["heavy_moe"] = np.asarray(float(counts[rank]))
            st["heavy_rank"] = np.asarray(float(rank))
            st["light"] = np.asarray(0.0)
            return st

        monkeypatch.setattr(it_mod, "stage_layers", one_rank)
        forced.append(float(iteration(model, a100, Network(), s).stage_s["middle"]))
        monkeypatch.setattr(it_mod, "stage_layers", real)
    assert len(set(counts[1:8])) > 1  # the middle ranks differ
    assert got == pytest.approx(max(forced))
    assert max(forced) > min(forced)


def test_interleaved_ranks_count_the_moe_layers_of_their_own_chunks() -> None:
    """moe-1.3b (24 layers, MoE every other one: layers 1, 3, 5, …), pp 4 with two chunks of 3
    layers per rank: rank 0 runs layers 0-2 and 12-14 (MoE 1 and 13), rank 1 layers 3-5 and
    15-17 (3, 5, 15, 17), as Megatron-Core's virtual stages lay them out (chunk j of rank r is
    virtual stage j·pp + r); counted as one run each rank would hold 3. The heavy and light
    middle stages follow, and the table path agrees."""
    model = load_model("moe-1.3b")

    def one(pp: int, v: int) -> Strategy:
        return Strategy(pp=pp, dp=8, ep=8, interleave=v, global_batch=64)

    s = from_strategies(one(4, 2))
    assert moe_layers_by_stage(model, s) == [2, 4, 2, 4]
    assert moe_layers_by_stage(model, from_strategies(one(4, 1))) == [3, 3, 3, 3]
    st = stage_layers(model, s)
    assert float(st["heavy_moe"]) == 4 and int(st["heavy_rank"]) == 1
    assert float(st["light_moe"]) == 2 and int(st["light_rank"]) == 2
    assert float(st["first_moe"]) == 2 and float(st["last_moe"]) == 4
    # five chunks of 12 layers per rank, the first two of 3 and three of 2: rank 0 runs 0-2,
    # 6-8, 12-13, 16-17, 20-21 (MoE 1, 7, 13, 17, 21), rank 1 the rest
    assert moe_layers_by_stage(model, from_strategies(one(2, 5))) == [5, 7]
    # the same through the table path (more than 64 strategies)
    many = from_strategies([one(4, 2), one(4, 1), one(2, 5)] * 30)
    table = stage_layers(model, many)
    assert [float(table["first_moe"][i]) for i in range(3)] == [2.0, 3.0, 5.0]
    assert [float(table["last_moe"][i]) for i in range(3)] == [4.0, 3.0, 7.0]
