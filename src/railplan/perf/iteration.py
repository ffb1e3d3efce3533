"""Time of one training iteration on the critical path, over arrays of strategies.

Kernel times per layer come from `railplan.perf.layer_time`, the exposed time of each collective
from `railplan.perf.comm_time`; this module puts them on the critical path.

The schedule is Megatron-LM's: tensor parallelism inside each layer (communication exposed),
1F1B or interleaved pipeline (Narayanan et al. 2021), data-parallel gradient reduction at the
end of the iteration, overlapped with the last micro-batch's backward pass when `overlap_dp`,
then the optimizer step. Per micro-batch and stage:

    t_stage = layers/pp · (forward + backward + recompute + TP communication) + 2·v·t_p2p
              (+ ZeRO-2/3 per-micro-batch traffic beyond compute, + the gradient-accumulation
              pass when it is not fused)
    t_pipeline = m · (t_stage + t_logits) + (pp − 1)/v · (t_stage + t_logits/pp)
                 (+ 2·(v·pp − 1)·t_p2p when the sends are overlapped: the fill and the drain)

with m micro-batches and v virtual stages; the last stage also runs the vocabulary projection
and loss (t_logits). Sends overlap only in the interleaved schedule (`p2p_overlapped`).
With a deferred LM-head weight gradient (`defer_embedding_wgrad`) the last
stage runs k of the m micro-batches without that GEMM (t_w), and the flush grows by
max(0, k·t_w − (pp − 1)/v · a stage's backward pass) (`pipeline`).
Stages may hold different numbers of layers (`specs.arrays.stage_layers`):
the slowest stage sets the steady-state pace, m · max(t_first, t_middle, t_last + t_logits), and
the breakdown is that stage's. Context parallelism (cp) runs every GEMM and element-wise kernel
on s/cp tokens and adds the ring attention's K/V sends beyond what the attention compute hides.
Communication that crosses HB domains uses the network, timed for the slowest group of each kind
(`railplan.perf.layout`): `rail-optimized` and `rail-only` carry rail-aligned traffic alike
(hierarchical collectives keep NIC bytes inside rails; SYSTEM.md claim 2), `rail-only` forwards
cross-rail bytes through the HB domain, `oversubscribed` divides the NIC bandwidth of traffic
spread over many destinations (all-to-alls, pipeline sends) by its ratio (rings keep theirs:
`comm_time.links`), and `ideal` puts every GPU in one HB domain.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import numpy as np

from railplan.perf.comm_time import (
    Links,
    cp_comm_time_s,
    dp_reduce_s,
    ep_comm_time_s,
    expert_tp_comm_time_s,
    fp8_amax_reduction_s,
    group_collective_s,
    hidden_cost_s,
    links,
    p2p_s,
    tp_comm_times,
)
from railplan.perf.compute import fp8_peak_tflops, memory_time_s
from railplan.perf.layer_time import (
    SHARED_PIECES,
    layer_times,
    logits_times,
    per_shape,
    shape_classes,
)
from railplan.perf.layout import Shape, megatron_shapes
from railplan.specs import Model, Network, System
from railplan.specs.arrays import (
    FP8,
    STAGE_KEYS,
    BoolArray,
    FloatArray,
    IntArray,
    StrategyArrays,
    compared_stages,
    recomputed_share,
    stage_layers,
)
from railplan.workload import comm
from railplan.workload.flops import hardware_flops, model_flops
from railplan.workload.memory import (
    GIB,
    WEIGHT_BYTES,
    Memory,
    dense_stage_params,
    expert_stage_params,
    memory,
    zero_share,
)

# Adam step per parameter on this GPU: read fp32 grad twice (norm, update), read and write the
# fp32 master weight, m and v, write the bf16 weight: 4+4+12+12+2 bytes.
OPTIMIZER_STEP_BYTES = 34.0
GRAD_TENSORS_PER_LAYER = 12.0  # QKV, projection, MLP up/down weights and biases, 2 LayerNorms


@dataclass(frozen=True)
class Iteration:
    """Arrays over strategies: time, efficiency, memory, and the named time components."""

    iteration_s: FloatArray
    mfu: FloatArray
    hfu: FloatArray
    memory: Memory
    fits: BoolArray
    breakdown_s: dict[str, FloatArray]
    model_flops: FloatArray
    hardware_flops: FloatArray
    groups: dict[str, Shape]  # worst layout of each kind of rank group (railplan.perf.layout)
    # Per micro-batch: the first, fullest middle and last stage (with the logits) and the
    # perfectly balanced stage (layers/pp and logits/pp), a bound no split beats.
    stage_s: dict[str, FloatArray] = field(default_factory=dict)

    @property
    def memory_gib_per_gpu(self) -> FloatArray:
        return np.asarray(self.memory.total_bytes / GIB)


@dataclass(frozen=True)
class DataParallel:
    """Data-parallel traffic of the fullest stage (dense and MoE expert gradients), by when it
    runs (`comm.dp_schedule`), and the parameters it holds."""

    end_s: FloatArray  # once per iteration, all collectives
    end_gather_s: FloatArray  # the weight all-gather part of `end_s`
    micro_batch_forward_s: FloatArray  # ZeRO-3 gathers before every forward
    micro_batch_backward_s: FloatArray  # ZeRO-2/3 traffic after every backward
    micro_batch_backward_gather_s: FloatArray  # the ZeRO-3 weight all-gather part of it
    dense_params: FloatArray
    expert_params: FloatArray

    def params_per_gpu(self, s: StrategyArrays, zero_stage: int) -> FloatArray:
        """The stage's parameters one GPU holds of a state ZeRO shards from `zero_stage` on
        (`memory.zero_share`)."""
        return zero_share(s, zero_stage, self.dense_params, self.expert_params)


def data_parallel(
    model: Model, lk: Links, s: StrategyArrays, groups: dict[str, Shape], most: FloatArray
) -> DataParallel:
    """Gradients of the stage of `most` layers over the dp·cp ranks tp apart (ZeRO stages as in
    `comm_time.dp_reduce_s`); MoE expert gradients over the tp·cp·dp/(etp·ep)
    expert-data-parallel ranks, etp·ep apart. With hybrid sharding (`zero_shard`) each within
    its shard groups, then across the replicas (`layout.megatron_shapes`)."""
    dense_params = dense_stage_params(model, s, True, most)
    expert_params = expert_stage_params(model, s, most)
    hybrid = bool(np.any(s.replicas > 1))
    dense = dp_reduce_s(
        lk,
        groups["dp_shard"],
        comm.dp_gradient_bytes(model, s, True, most),
        comm.dp_weight_gather_bytes(model, s, True, most),
        s,
        comm.dp_collectives(s, dense_params, s.grad_ranks.astype(float), most),
        groups["dp_replica"] if hybrid else None,
        s.shard_ranks.astype(float),
    )
    expert = dp_reduce_s(
        lk,
        groups["expert_dp_shard"],
        comm.dp_expert_gradient_bytes(model, s, most),
        comm.dp_expert_weight_gather_bytes(model, s, most),
        s,
        comm.dp_collectives(s, expert_params, s.expert_grad_ranks.astype(float), most),
        groups["expert_dp_replica"] if hybrid else None,
        s.expert_shard_ranks.astype(float),
    )
    return DataParallel(
        end_s=dense["end"] + expert["end"],
        end_gather_s=dense["end_all_gather"] + expert["end_all_gather"],
        micro_batch_forward_s=dense["micro_batch_forward"] + expert["micro_batch_forward"],
        micro_batch_backward_s=dense["micro_batch_backward"] + expert["micro_batch_backward"],
        micro_batch_backward_gather_s=dense["micro_batch_backward_all_gather"]
        + expert["micro_batch_backward_all_gather"],
        dense_params=dense_params,
        expert_params=expert_params,
    )


def grad_accumulation_s(
    system: System, s: StrategyArrays, d: DataParallel, layers: FloatArray
) -> FloatArray:
    """Per micro-batch, without gradient-accumulation fusion: a read-modify-write of the stage's
    gradient buffer (read the bf16/fp16 GEMM output and the main grad, write the main grad;
    Megatron's param.main_grad.add_(param.grad)); 0 with the fusion."""
    rmw = memory_time_s(
        system.gpu,
        d.params_per_gpu(s, 2) * (WEIGHT_BYTES + 2.0 * s.grad_reduce_bytes),
        GRAD_TENSORS_PER_LAYER * layers,
    )
    return np.asarray(np.where(s.grad_accumulation_fusion.astype(bool), 0.0, rmw))


def dp_exposed_s(
    s: StrategyArrays, d: DataParallel, window: dict[str, FloatArray], u: float
) -> FloatArray:
    """What the end-of-iteration DP traffic exposes. Overlapped (Megatron-Core
    --overlap-grad-reduce / --overlap-param-gather, NeMo's distributed_fused_adam
    overlap_grad_sync / overlap_param_sync): the gradient reduction runs bucket by bucket behind
    the last micro-batch's backward pass, the weight all-gather behind the next step's first
    forward pass, both slowing that compute by the SMs they hold; else all of it."""
    hidden = hidden_cost_s(d.end_s - d.end_gather_s, window["backward"], u) + hidden_cost_s(
        d.end_gather_s, window["forward"], u
    )
    return np.asarray(np.where(s.overlap_dp.astype(bool), hidden, d.end_s))


def optimizer_s(system: System, s: StrategyArrays, d: DataParallel) -> FloatArray:
    """The Adam step over this GPU's share of the stage's parameters (÷ dp with ZeRO ≥ 1), and
    zeroing the gradient buffer for the next step (Megatron's `zero_grad_buffer`, called at
    the start of every iteration: `grad_data.zero_()` over the whole buffer of
    `grad_reduce_bytes` per element, ÷ dp with ZeRO ≥ 2)."""
    moved = (
        d.params_per_gpu(s, 1) * OPTIMIZER_STEP_BYTES + d.params_per_gpu(s, 2) * s.grad_reduce_bytes
    )
    return memory_time_s(system.gpu, moved, 5.0)


@dataclass(frozen=True)
class Pipeline:
    """The pipeline schedule: steady-state pace per micro-batch, the bubble (with the exposed
    part of a deferred LM-head weight gradient), the critical stage's layers and parts (per
    micro-batch, averaged over the micro-batches), and each stage's time per micro-batch."""

    steady_s: FloatArray
    bubble_s: FloatArray
    critical_layers: FloatArray
    critical_logits_s: FloatArray
    critical_parts: dict[str, FloatArray]
    stage_s: dict[str, FloatArray]
    #: MoE layers of the critical stage beyond its layers' average share (`moe_excess`)
    critical_moe_excess: FloatArray = field(default_factory=lambda: np.zeros(()))


def p2p_overlapped(s: StrategyArrays) -> BoolArray:
    """Whether the pipeline's sends run behind compute: asked for (`overlap_p2p`) and
    interleaved. Megatron-Core overlaps them only in the interleaved schedule (arguments.py sets
    overlap_p2p_comm False otherwise): 1F1B keeps one micro-batch in flight per stage, so
    there is no compute for a send to hide behind."""
    return np.asarray(s.overlap_p2p.astype(bool) & (s.interleave > 1))


def _stage_parts(
    s: StrategyArrays,
    overlapped: BoolArray,
    v: FloatArray,
    p2p: FloatArray,
    t_layer: FloatArray,
    lt: dict[str, FloatArray],
    d: DataParallel,
    u: float,
    n: FloatArray,
) -> dict[str, FloatArray]:
    """Per micro-batch, a pipeline stage of n layers: its compute and what it exposes.
    Blocking sends add to every micro-batch; overlapped ones only where they outlast compute.
    ZeRO 2/3 communicate every micro-batch, prefetched / reduced behind that pass's compute;
    without `overlap_backward_gather` (FSDP BACKWARD_POST) the backward's weight gathers are
    exposed and only its reduce-scatters hide."""
    p2p_exposed = np.where(overlapped, np.maximum(2.0 * v * p2p - n * t_layer, 0.0), 2.0 * v * p2p)
    exposed_gather = np.where(
        s.overlap_backward_gather.astype(bool), 0.0, d.micro_batch_backward_gather_s
    )
    zero_mb = (
        hidden_cost_s(d.micro_batch_forward_s, n * lt["forward"], u)
        + hidden_cost_s(
            d.micro_batch_backward_s - exposed_gather, n * (lt["backward"] + lt["recompute"]), u
        )
        + exposed_gather
    )
    return {"layers": n * t_layer, "p2p": p2p_exposed, "zero": zero_mb}


def pipeline(
    s: StrategyArrays,
    stages: dict[str, FloatArray],
    lt: dict[str, FloatArray],
    t_layer: FloatArray,
    logits: dict[str, FloatArray],
    p2p: FloatArray,
    d: DataParallel,
    extra_s: FloatArray,
    u: float,
    t_layer_backward: FloatArray,
    moe_excess: dict[str, FloatArray] | None = None,
    per_moe_layer_s: FloatArray | float = 0.0,
) -> Pipeline:
    """1F1B or interleaved schedule over stages of possibly different layer counts: the slowest
    stage sets the pace, the bubble is (pp − 1)/v balanced stages (DualPipeV: less by its
    split weight gradients, the LM head on rank 0). `extra_s`: what every stage
    pays per micro-batch besides its layers (unfused gradient accumulation, FP8 amax
    reductions). `t_layer` is the average layer's; a stage whose MoE layers are more (or
    fewer) than its layers' share of the model's (`moe_excess`, by `STAGE_KEYS`: the model's
    leading dense layers sit on the first) pays `per_moe_layer_s` more (or less) per excess
    layer; the middle stage is the slowest of rank 1 and the middle stages with the most and
    the fewest MoE layers (`stage_s["middle"]`).

    Deferred LM-head weight gradient (`defer_embedding_wgrad`, Megatron-Core
    `defer_embedding_wgrad_compute`): for the k deferred micro-batches the last stage runs
    without the output layer's weight-gradient GEMM (t_w), so those k micro-batches go at
    max(t_first, t_middle, t_last − t_w); the k GEMMs run after the stage's last backward pass,
    while the stages before it finish the cooldown: (pp − 1)/v backward passes of a stage's
    chunk. What does not fit in that idle time, max(0, k·t_w − idle), extends the flush."""
    pp, v = s.pp.astype(float), s.interleave.astype(float)
    t_logits = logits["t"]

    overlapped = p2p_overlapped(s)
    stage_parts = partial(_stage_parts, s, overlapped, v, p2p, t_layer, lt, d, u)

    zero_excess = np.zeros(())
    excess = moe_excess or {}
    ex = {k: np.asarray(excess.get(k, zero_excess)) for k in STAGE_KEYS}

    def stage_s(n: FloatArray, more: FloatArray = zero_excess) -> FloatArray:
        parts = stage_parts(n)
        moe = more * per_moe_layer_s
        return np.asarray(parts["layers"] + moe + parts["p2p"] + parts["zero"] + extra_s)

    # The LM head runs on the last rank, or on rank 0 with DualPipeV (its V's last stage).
    dualpipev = s.dualpipev
    any_dualpipev = bool(np.any(dualpipev))  # only then: 1F1B strategies pay nothing for it
    head_first = np.where(dualpipev, t_logits, 0.0) if any_dualpipev else 0.0
    t_first = stage_s(stages["first"], ex["first"]) + head_first
    t_middle = np.where(pp > 2, stage_s(stages["middle"], ex["middle"]), 0.0)
    n_middle, ex_middle = stages["middle"], ex["middle"]
    cheaper_moe = bool(np.any(np.asarray(per_moe_layer_s) < 0.0))
    for other in ("heavy", "light"):
        # the middle stages with the most and the fewest MoE layers, where slower than rank 1
        # (the fewest only where an MoE layer can cost less than a dense one)
        if other not in compared_stages(stages) or (other == "light" and not cheaper_moe):
            continue
        t_other = np.where((pp > 2) & (stages[other] > 0), stage_s(stages[other], ex[other]), 0.0)
        slower = t_other > t_middle
        t_middle = np.where(slower, t_other, t_middle)
        n_middle = np.where(slower, stages[other], n_middle)
        ex_middle = np.where(slower, ex[other], ex_middle)
    t_last = stage_s(stages["last"], ex["last"]) + (t_logits - head_first)
    others = np.maximum(t_first, t_middle)

    def critical(last_s: FloatArray, last_logits: FloatArray) -> tuple[FloatArray, ...]:
        """Pace, the critical stage's layers, logits time and MoE excess, when the last stage
        takes `last_s` per micro-batch (`last_logits` of it in the LM head)."""
        pace = np.maximum(others, last_s)
        last_is_slowest = last_s >= others
        first_over_middle = t_first >= t_middle
        n_crit = np.where(
            last_is_slowest,
            stages["last"],
            np.where(first_over_middle, stages["first"], n_middle),
        )
        ex_crit = np.where(
            last_is_slowest, ex["last"], np.where(first_over_middle, ex["first"], ex_middle)
        )
        crit_logits = np.where(last_is_slowest, last_logits, 0.0)
        if any_dualpipev:  # the head is rank 0's
            first_is_slowest = ~last_is_slowest & first_over_middle
            on_first = np.where(first_is_slowest, t_logits, 0.0)
            crit_logits = np.where(dualpipev, on_first, crit_logits)
        return pace, n_crit, crit_logits, ex_crit

    m = s.micro_batches.astype(float)
    pace, n_crit, crit_logits, ex_crit = critical(t_last, t_logits)
    parts = stage_parts(n_crit)
    balanced = stage_s(stages["mean"]) + t_logits / pp
    # Overlapped sends hide behind steady-state compute, not in the fill and the drain: the
    # first micro-batch's forward and the last one's backward each cross all v·pp − 1 chunk
    # boundaries in turn (blocking sends are in every stage time already). A micro-batch group
    # N > pp (`microbatch_group`) gives the first rank N − pp more chunks to run before a
    # micro-batch comes back round for its next chunk: when they outlast the round's pp sends,
    # only the first round's pp − 1 are exposed (the fill: the first group; the drain: the
    # last one, m mod N or N micro-batches).
    n_group = s.group_size.astype(float)
    first_group = np.minimum(n_group, m)
    last_group = np.where(m % n_group == 0, n_group, m % n_group)
    chunk_s = stages["mean"] / v
    # DualPipeV: 2·(pp − 1) GPU boundaries, the V's turn on the last rank.
    every_boundary = np.where(s.interleave > 1, v * pp - 1.0, 0.0)
    if any_dualpipev:
        every_boundary = np.where(dualpipev, 2.0 * (pp - 1.0), every_boundary)

    def crossed(group: FloatArray, pass_s: FloatArray) -> FloatArray:
        slack = (group - pp) * chunk_s * pass_s >= pp * p2p
        return np.asarray(np.where((group > pp) & slack, pp - 1.0, every_boundary))

    sends = crossed(first_group, lt["forward"]) + crossed(last_group, lt["backward"])
    fill_drain = np.where(overlapped, sends * p2p, 0.0)
    # DualPipeV (deepseek-ai/DualPipe README): (PP/2 − 1)·(F&B + B − 3W) over its 2·pp
    # chunk-stages, F&B a merged forward-backward pair of chunks, B a chunk's backward and W
    # its weight gradients (run apart, zero-bubble style): (pp − 1)/2 stage passes, each
    # shortened by B − 3W of the stage's layers.
    idle_stage = balanced
    if any_dualpipev:
        split = stages["mean"] * (t_layer_backward - 3.0 * lt["wgrad"])
        idle_stage = np.where(dualpipev, balanced + split, balanced)
    bubble = (pp - 1.0) / v * idle_stage + fill_drain
    steady = m * pace
    k = s.deferred_wgrad_micro_batches.astype(float)
    if bool(np.any(k > 0)):  # only then: the search without deferral pays nothing
        t_w = logits["wgrad"]
        pace_d, n_d, logits_d, ex_d = critical(t_last - t_w, t_logits - t_w)
        w = k / np.maximum(m, 1.0)  # share of micro-batches at the deferred pace
        steady = (m - k) * pace + k * pace_d
        parts_d = stage_parts(n_d)
        parts = {key: (1.0 - w) * parts[key] + w * parts_d[key] for key in parts}
        n_crit = (1.0 - w) * n_crit + w * n_d
        ex_crit = (1.0 - w) * ex_crit + w * ex_d
        crit_logits = (1.0 - w) * crit_logits + w * logits_d
        idle = (pp - 1.0) / v * stages["mean"] * t_layer_backward
        bubble = bubble + np.maximum(k * t_w - idle, 0.0)
    return Pipeline(
        steady_s=np.asarray(steady),
        bubble_s=np.asarray(bubble),
        critical_layers=np.asarray(n_crit),
        critical_logits_s=np.asarray(crit_logits),
        critical_parts=parts,
        critical_moe_excess=np.asarray(ex_crit),
        stage_s={
            "first": np.asarray(t_first),
            "middle": np.asarray(t_middle),
            "last": np.asarray(t_last),
            "balanced": np.asarray(balanced),
        },
    )


#: the parts of one layer's time per micro-batch (`LayerCosts.part`), as the breakdown names them
LAYER_PARTS = ("compute", "recompute", "tp_comm", "ep_comm", "cp_comm")


@dataclass(frozen=True)
class LayerCosts:
    """One average layer's times per micro-batch: its compute by pass (`layer_times`), the
    tensor-parallel collectives by pass (`tp_comm_times`), and what its tp (with the routed
    experts' expert-tp), ep and cp communication exposes; `t_layer` their sum."""

    lt: dict[str, FloatArray]
    tp: dict[str, FloatArray]
    tp_s: FloatArray
    ep_s: FloatArray | float
    cp_s: FloatArray
    t_layer: FloatArray

    def part(self, name: str) -> FloatArray:
        """The `LAYER_PARTS` share of `t_layer` called `name`."""
        lt = self.lt
        parts: dict[str, FloatArray | float] = {
            "compute": lt["forward"] + lt["backward"],
            "recompute": lt["recompute"],
            "tp_comm": self.tp_s,
            "ep_comm": self.ep_s,
            "cp_comm": self.cp_s,
        }
        return np.asarray(parts[name])


def layer_costs(
    model: Model,
    system: System,
    lk: Links,
    s: StrategyArrays,
    classes: tuple[StrategyArrays, IntArray] | None,
    groups: dict[str, Shape],
) -> LayerCosts:
    """`LayerCosts` of the model's average layer (a moe_layers/layers share of MoE layers)."""
    lt = per_shape(lambda c: layer_times(model, system, c), s, classes)
    rerun = recomputed_share(model, s)  # block recompute: the layers recomputed at all
    if bool(np.any(rerun != 1.0)):
        lt = lt | {k: np.asarray(lt[k] * rerun) for k in ("recompute", "moe_recompute")}
    tpc = tp_comm_times(model, lk, s, lt, groups["tp"])
    tp_layer = tpc["forward"] + tpc["recompute"] + tpc["backward"]
    if model.moe_layers and bool(np.any(s.etp > 1)):  # the routed experts' TP collectives
        moe_share = model.moe_layers / model.layers
        tp_layer = tp_layer + moe_share * expert_tp_comm_time_s(model, lk, s, groups["etp"])
    ep_layer = (
        model.moe_layers
        / model.layers
        * ep_comm_time_s(
            model,
            lk,
            s,
            groups["ep"],
            lt["forward"] + lt["backward"] + lt["recompute"],
            {k: lt[k] for k in SHARED_PIECES},
        )
        if model.moe_layers
        else 0.0
    )
    cp_layer = cp_comm_time_s(model, lk, s, lt, groups["cp"])
    t_layer = lt["forward"] + lt["backward"] + lt["recompute"] + tp_layer + ep_layer + cp_layer
    return LayerCosts(lt, tpc, np.asarray(tp_layer), ep_layer, cp_layer, np.asarray(t_layer))


def moe_layer_slopes(
    model: Model, lk: Links, s: StrategyArrays, costs: LayerCosts, groups: dict[str, Shape]
) -> dict[str, FloatArray | float]:
    """What one MoE layer costs over the average layer's share of one, by `LAYER_PARTS`: the
    slope in the MoE share σ of each part, (part at σ = 1 − part at the model's σ)/(1 − σ), as
    the model with every layer an MoE layer gives it. Compute and recompute are linear in σ
    (`layer_times`' slopes); the tensor-parallel collectives are timed again for that model
    (their count per layer follows σ), and the all-to-all where it hides behind an MoE layer's
    compute (its overlap is not linear in σ)."""
    share = model.moe_layers / model.layers
    lt = costs.lt
    compute = lt["moe_forward"] + lt["moe_backward"]
    recompute = lt["moe_recompute"]
    every = model.model_copy(update={"first_dense_layers": 0, "moe_layer_interval": 1})
    tp1 = tp_comm_times(every, lk, s, lt, groups["tp"])
    tp_moe = tp1["forward"] + tp1["recompute"] + tp1["backward"]
    if bool(np.any(s.etp > 1)):
        tp_moe = tp_moe + expert_tp_comm_time_s(model, lk, s, groups["etp"])
    moe_compute = (
        lt["forward"] + lt["backward"] + lt["recompute"] + (1.0 - share) * (compute + recompute)
    )
    shared = {k: lt[k] for k in SHARED_PIECES}
    ep_moe = ep_comm_time_s(model, lk, s, groups["ep"], moe_compute, shared)
    return {
        "compute": np.asarray(compute),
        "recompute": np.asarray(recompute),
        "tp_comm": np.asarray((tp_moe - costs.tp_s) / (1.0 - share)),
        "ep_comm": np.asarray((ep_moe - costs.ep_s) / (1.0 - share)),
        "cp_comm": 0.0,
    }


def iteration(model: Model, system: System, network: Network, s: StrategyArrays) -> Iteration:
    """Critical-path time of one iteration for every strategy in `s` (arrays broadcast).

    MFU and HFU are over the BF16 dense peak whatever the precision, and count the full s²
    attention term (Megatron's convention; a causal fused kernel does about half of it)."""
    if bool(np.any(s.precision == FP8)):
        fp8_peak_tflops(system.gpu)  # a one-line error for GPUs without FP8
    gpus = s.gpus.astype(float)
    lk = links(system, network, gpus)
    m = s.micro_batches.astype(float)
    stages = stage_layers(model, s)
    u = lk.comm_sm_fraction

    classes = shape_classes(s)
    groups = megatron_shapes(s.tp, s.dp, s.pp, s.ep, lk.hb_domain, s.cp, s.replicas, s.etp)
    costs = layer_costs(model, system, lk, s, classes, groups)
    lt, tpc, t_layer = costs.lt, costs.tp, costs.t_layer
    # Stages whose MoE layers are not their layers' share of the model's (the leading dense
    # layers of DeepSeek-V3 on the first stage; an MoE multi-token prediction layer on the
    # last): an MoE layer's costs over the average layer's, from the model with every layer
    # an MoE layer (each cost is linear in the MoE share but where the all-to-all hides
    # behind the layer's compute, taken there at an MoE layer's).
    share = model.moe_layers / model.layers
    excess = {k: stages[k + "_moe"] - share * stages[k] for k in STAGE_KEYS}
    per_moe: dict[str, FloatArray | float] = dict.fromkeys(LAYER_PARTS, 0.0)
    if 0.0 < share < 1.0 and any(bool(np.any(x != 0.0)) for x in excess.values()):
        per_moe = moe_layer_slopes(model, lk, s, costs, groups)
    per_moe_s = sum(per_moe.values(), np.zeros(()))
    # Pipeline: activations (forward) and their gradients (backward) cross each boundary, whole
    # from every tp rank (Megatron-Core), or split by SP or the 2021-22 scatter/gather
    # (Narayanan et al. 2021 §4.1): `comm.pp_message_bytes`.
    p2p = np.where(s.pp > 1, p2p_s(lk, comm.pp_message_bytes(model, s), groups["pp"]), 0.0)
    logits = per_shape(lambda c: logits_times(model, system, c), s, classes)
    # One layer's backward pass as the cooldown runs it (the idle a deferred wgrad fills).
    t_layer_backward = lt["backward"] + lt["recompute"] + tpc["backward"] + tpc["recompute"]

    d = data_parallel(model, lk, s, groups, stages["max"])
    grad_acc = grad_accumulation_s(system, s, d, stages["max"])
    amax = fp8_amax_reduction_s(lk, s)
    pipe = pipeline(
        s,
        stages,
        lt,
        t_layer,
        logits,
        p2p,
        d,
        grad_acc + amax,
        u,
        t_layer_backward,
        moe_excess=excess,
        per_moe_layer_s=per_moe_s,
    )
    # Tied embeddings: first and last stage all-reduce the embedding gradient.
    embed_bytes = comm.embedding_gradient_bytes(model, s)
    embed_ar = np.where(
        embed_bytes > 0, group_collective_s(lk, groups["embedding"], embed_bytes), 0.0
    )
    window = {k: stages["mean"] * lt[k] for k in ("forward", "backward")}
    dp_exposed = dp_exposed_s(s, d, window, u) + embed_ar
    optimizer = optimizer_s(system, s, d)

    total = pipe.steady_s + pipe.bubble_s + dp_exposed + optimizer
    mem = memory(model, s)
    mflops = model_flops(model, s.global_batch)
    rerun = recomputed_share(model, s)
    hflops = hardware_flops(model, s.global_batch, s.recompute, s.recompute_modules, rerun)
    peak = gpus * system.gpu.peak_tflops * 1e12
    n_crit, crit, x_crit = pipe.critical_layers, pipe.critical_parts, pipe.critical_moe_excess

    def on_critical(part: str) -> FloatArray:
        """A per-layer cost over the critical stage's layers, its MoE excess included."""
        return np.asarray(m * (n_crit * costs.part(part) + x_crit * per_moe[part]))

    breakdown = {
        "compute": on_critical("compute") + m * pipe.critical_logits_s,
        "recompute": on_critical("recompute"),
        "tp_comm": on_critical("tp_comm"),
        "ep_comm": on_critical("ep_comm"),
        "pp_comm": m * crit["p2p"],
        "zero_comm": m * crit["zero"],
        "grad_accumulation": m * grad_acc,
        "fp8_amax": m * amax,
        "pipeline_bubble": pipe.bubble_s,
        "dp_comm_exposed": dp_exposed,
        "optimizer": optimizer,
        "cp_comm": on_critical("cp_comm"),
    }
    return Iteration(
        iteration_s=np.asarray(total),
        mfu=np.asarray(mflops / (total * peak)),
        hfu=np.asarray(hflops / (total * peak)),
        memory=mem,
        fits=np.asarray(mem.fits(system.gpu)),
        breakdown_s={
            k: np.asarray(np.broadcast_to(x, np.shape(total))) for k, x in breakdown.items()
        },
        model_flops=np.asarray(mflops),
        hardware_flops=np.asarray(hflops),
        groups=groups,
        stage_s=pipe.stage_s,
    )
