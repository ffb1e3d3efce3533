"""Time of one training iteration on the critical path, over arrays of strategies.

The schedule is Megatron-LM's: tensor parallelism inside each layer (communication exposed),
1F1B or interleaved pipeline (Narayanan et al. 2021), data-parallel gradient reduction at the
end of the iteration, overlapped with the last micro-batch's backward pass when `overlap_dp`,
then the optimizer step. Per micro-batch and stage:

    t_stage = layers/pp · (forward + backward + recompute + TP communication) + 2·v·t_p2p
              (+ ZeRO-2/3 per-micro-batch traffic beyond compute, + the gradient-accumulation
              pass when it is not fused)
    t_pipeline = m · (t_stage + t_logits) + (pp − 1)/v · (t_stage + t_logits/pp)

with m micro-batches and v virtual stages; the last stage also runs the vocabulary projection and
loss (t_logits), so it sets the steady-state pace. Communication that crosses HB domains uses
the network, timed for the slowest group of each kind (`railplan.layout`): `rail-optimized` and
`rail-only` carry rail-aligned traffic alike (hierarchical collectives keep NIC bytes inside
rails; SYSTEM.md claim 2), `rail-only` forwards cross-rail bytes through the HB domain,
`oversubscribed` divides the NIC bandwidth by its ratio, and `ideal` puts every GPU in one HB
domain.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

import numpy as np

from railplan import collectives as coll
from railplan.compute import gemm_time_s, memory_time_s
from railplan.layout import Shape, megatron_shapes
from railplan.specs import Model, Network, System
from railplan.strategies import FULL, SELECTIVE, BoolArray, FloatArray, IntArray, StrategyArrays
from railplan.workload import comm, elementwise, routing
from railplan.workload.flops import hardware_flops, model_flops
from railplan.workload.gemms import (
    Gemm,
    expert_gemms,
    layer_gemms,
    logit_gemm,
    mlp_gemms,
    router_gemm,
)
from railplan.workload.memory import (
    GIB,
    WEIGHT_BYTES,
    Memory,
    dense_stage_params,
    expert_stage_params,
    memory,
)

# Adam step per parameter on this GPU: read fp32 grad twice (norm, update), read and write the
# fp32 master weight, m and v, write the bf16 weight: 4+4+12+12+2 bytes.
OPTIMIZER_STEP_BYTES = 34.0
GRAD_TENSORS_PER_LAYER = 12.0  # QKV, projection, MLP up/down weights and biases, 2 LayerNorms
ELEMENTWISE_KERNELS_PER_LAYER = 8.0  # 2 layer norms, 2 bias-dropout-adds, activation,
# softmax, attention dropout, embedding/misc: Megatron's fused kernels per layer forward


@dataclass(frozen=True)
class Links:
    """Bandwidths (bytes/s per GPU per direction) and step latencies one network offers.

    `nic_bw` serves ring-type collectives (rings, the rail phase of hierarchical ones): NCCL
    orders rings by topology, so a ring crosses each leaf's uplinks at most twice and an
    oversubscribed spine does not slow it. `nic_bw_spread` serves traffic spread over many
    leaves — all-to-all and pipeline sends — which the spine's ratio divides (the flow-level
    simulator confirms both, docs/flow-check.md)."""

    hb_domain: FloatArray
    hb_bw: float
    nic_bw: float
    nic_bw_spread: float
    hb_lat_s: float
    nic_lat_s: float
    rail_only: bool
    comm_sm_fraction: float
    nvls_bw: float = 0.0  # NVLink SHARP bandwidth, 0 = off (System.nvls)
    sharp: bool = False  # SHARP on the rail switches (Network.sharp)


def links(system: System, network: Network, gpus: FloatArray) -> Links:
    """What the network gives collectives: `ideal` makes the HB domain span every GPU."""
    k = np.asarray(gpus if network.architecture == "ideal" else system.hb_domain, dtype=float)
    return Links(
        hb_domain=k,
        hb_bw=system.hb_bytes_per_s,
        nic_bw=system.nic_bytes_per_s,
        nic_bw_spread=system.nic_bytes_per_s * network.nic_bandwidth_factor,
        hb_lat_s=system.hb_latency_us * 1e-6,
        nic_lat_s=system.nic_latency_us * 1e-6,
        rail_only=network.architecture == "rail-only",
        comm_sm_fraction=system.comm_sm_fraction,
        nvls_bw=coll.nvls_bytes_per_s(system.hb_tbps, system.hb_bytes_per_s)
        if system.nvls
        else 0.0,
        sharp=network.sharp,
    )


def group_collective_s(
    lk: Links, shape: Shape, size: FloatArray, gather_only: bool = False
) -> FloatArray:
    """All-reduce (or all-gather / reduce-scatter when `gather_only`) of the slowest group of a
    kind, laid out as `shape` (railplan.layout): hierarchical over x members per domain and y
    domains (SYSTEM.md formula 2), a plain HB ring when the group lies inside one domain."""
    phases = 1.0 if gather_only else 2.0
    t = phases * coll.hierarchical_all_gather_s(
        shape.x, shape.y, size, lk.hb_bw, lk.nic_bw, lk.hb_lat_s, lk.nic_lat_s
    )
    if not gather_only and (lk.nvls_bw > 0 or lk.sharp):
        t = coll.in_network_hierarchical_all_reduce_s(
            shape.x,
            shape.y,
            size,
            lk.hb_bw,
            lk.nic_bw,
            lk.hb_lat_s,
            lk.nic_lat_s,
            lk.nvls_bw,
            lk.sharp,
        )
    if lk.rail_only:
        # Forwarding: the NIC-phase bytes take one more HB hop to reach the right rail.
        hop = phases * (shape.y - 1) / shape.y * size / shape.x / lk.hb_bw
        t = t + np.where(shape.cross_rail, hop, 0.0)
    return np.asarray(t)


def p2p_s(lk: Links, size: FloatArray, shape: Shape) -> FloatArray:
    """Point-to-point send across the slowest boundary of a chain laid out as `shape`: NVLink
    when every chain lies in one HB domain, else the NIC (plus, on rail-only, an HB hop to the
    peer's rail when the boundary crosses rails)."""
    over_nic = size / lk.nic_bw_spread + lk.nic_lat_s
    if lk.rail_only:
        over_nic = over_nic + np.where(shape.cross_rail, size / lk.hb_bw, 0.0)
    return np.asarray(np.where(shape.inside, size / lk.hb_bw + lk.hb_lat_s, over_nic))


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
    groups: dict[str, Shape]  # worst layout of each kind of rank group (railplan.layout)

    @property
    def memory_gib_per_gpu(self) -> FloatArray:
        return np.asarray(self.memory.total_bytes / GIB)


def layer_times(model: Model, system: System, s: StrategyArrays) -> dict[str, FloatArray]:
    """Per layer, per micro-batch, on one GPU: forward, backward and recompute compute time."""
    gpu = system.gpu
    b, t = s.micro_batch.astype(float), s.tp.astype(float)
    gemms = layer_gemms(model, b, t)
    fwd = sum((gemm_time_s(gpu, g) for g in gemms), np.zeros(()))
    bwd = sum((gemm_time_s(gpu, h) for g in gemms for h in g.backward()), np.zeros(()))
    attn_fwd = sum((gemm_time_s(gpu, g) for g in gemms if g.attention), np.zeros(()))
    # Weight-gradient GEMMs of the two column-parallel linears (QKV, MLP-up): the backward
    # all-reduce of their input gradient runs while they compute (Korthikanti et al. 2022 §6.2).
    wgrad = {g.name: gemm_time_s(gpu, g.backward()[1]) for g in gemms}
    dgrad = {g.name: gemm_time_s(gpu, g.backward()[0]) for g in gemms}

    # Element-wise kernels run well below streaming bandwidth: measured fused-kernel
    # efficiencies (GPU spec) on the bytes of workload/elementwise.py.
    fwd_eff, bwd_eff = gpu.elementwise_forward_efficiency, gpu.elementwise_backward_efficiency
    ew = elementwise.layer_bytes(model, s)
    ew_fwd = memory_time_s(gpu, ew["forward"], ELEMENTWISE_KERNELS_PER_LAYER, fwd_eff)
    ew_bwd = memory_time_s(gpu, ew["backward"], ELEMENTWISE_KERNELS_PER_LAYER, bwd_eff)
    ew_scores = memory_time_s(gpu, ew["scores_forward"], 2.0, fwd_eff)

    forward = fwd + ew_fwd
    backward = bwd + ew_bwd
    if model.moe_layers:
        # Average layer: a moe_layers/layers share of layers swaps its dense MLP for experts.
        delta = moe_mlp_delta(model, system, s)
        share = model.moe_layers / model.layers
        forward = forward + share * delta["forward"]
        backward = backward + share * delta["backward"]
    recompute = np.where(
        s.recompute == FULL, forward, np.where(s.recompute == SELECTIVE, attn_fwd + ew_scores, 0.0)
    )
    return {
        "forward": forward,
        "backward": backward,
        "recompute": recompute,
        "wgrad_qkv": wgrad["qkv"],
        "wgrad_mlp_up": wgrad["mlp_up"],
        "dgrad_qkv": dgrad["qkv"],
        "dgrad_mlp_up": dgrad["mlp_up"],
    }


def moe_mlp_delta(model: Model, system: System, s: StrategyArrays) -> dict[str, FloatArray]:
    """Extra compute of one MoE layer over a dense one: router + experts − dense MLP, with the
    activation-function traffic of the expert slots."""
    gpu = system.gpu
    b, t, ep = s.micro_batch.astype(float), s.tp.astype(float), s.ep.astype(float)
    dense = mlp_gemms(model, b, t)
    experts = [*expert_gemms(model, b, t, ep), router_gemm(model, b)]

    def fwd_bwd(gs: list[Gemm]) -> tuple[FloatArray, FloatArray]:
        f = sum((gemm_time_s(gpu, g) for g in gs), np.zeros(()))
        bw = sum((gemm_time_s(gpu, h) for g in gs for h in g.backward()), np.zeros(()))
        return np.asarray(f), np.asarray(bw)

    (ef, eb), (df, db) = fwd_bwd(experts), fwd_bwd(dense)
    slots = b * model.seq * model.top_k * routing.slot_factor(model, s.ep)
    extra = elementwise.activation_function_bytes(
        model, (slots * model.expert_ffn_ - b * model.seq * model.ffn_) / t
    )
    ew_f = memory_time_s(gpu, extra["forward"], 0.0, gpu.elementwise_forward_efficiency)
    ew_b = memory_time_s(gpu, extra["backward"], 0.0, gpu.elementwise_backward_efficiency)
    return {"forward": ef - df + ew_f, "backward": eb - db + ew_b}


def ep_comm_time_s(model: Model, lk: Links, s: StrategyArrays, shape: Shape) -> FloatArray:
    """Exposed expert-parallel all-to-all time per MoE layer and micro-batch (all passes).

    The ep ranks are spaced tp apart: x of them share an HB domain, y domains. Rail-only runs
    the two-step all-to-all with forwarding (rail phase, then HB phase; SYSTEM.md formula 3);
    the other networks the direct one.
    """
    d = comm.ep_pair_bytes(model, s)
    fn = coll.all_to_all_rail_only_s if lk.rail_only else coll.all_to_all_rail_optimized_s
    one = fn(shape.x, shape.y, d, lk.hb_bw, lk.nic_bw_spread, lk.hb_lat_s, lk.nic_lat_s)
    ops = comm.ep_all_to_alls_per_moe_layer(s)
    return np.asarray((ops["forward"] + ops["recompute"] + ops["backward"]) * one)


def logits_time_s(model: Model, system: System, s: StrategyArrays) -> FloatArray:
    """Vocabulary projection forward + backward and the fp32 cross-entropy on the last stage."""
    g = logit_gemm(model, s.micro_batch.astype(float), s.tp.astype(float))
    gemm = gemm_time_s(system.gpu, g) + sum(gemm_time_s(system.gpu, h) for h in g.backward())
    # softmax cross-entropy: write fp32 logits, read them for max/sum/grad, write the grad.
    loss_bytes = 16.0 * model.seq * s.micro_batch * model.vocab / s.tp
    return np.asarray(
        gemm + memory_time_s(system.gpu, loss_bytes, 4.0, system.gpu.elementwise_forward_efficiency)
    )


def tp_comm_times(
    model: Model, lk: Links, s: StrategyArrays, lt: dict[str, FloatArray], shape: Shape
) -> dict[str, FloatArray]:
    """Exposed tensor-parallel communication per layer and micro-batch, by pass.

    Megatron: 2 all-reduces (or all-gather + reduce-scatter with sequence parallelism: the same
    bytes) in the forward pass and 2 more when full recompute reruns it, all exposed; 2 in the
    backward pass, each hidden behind its linear's weight-gradient GEMM (Korthikanti et al.
    2022 §6.2), which runs slower meanwhile because the collective's kernels hold
    `comm_sm_fraction` of the SMs. The group is tp consecutive ranks.
    """
    act = comm.tp_message_bytes(model, s)
    ops = comm.tp_ops_per_layer(s)
    gather = group_collective_s(lk, shape, act, gather_only=True)
    one_op = 2.0 * gather  # all-reduce = reduce-scatter + all-gather, with or without SP
    if lk.nvls_bw > 0 or lk.sharp:  # in-network aggregation serves the all-reduce (no SP)
        sp = s.sequence_parallel.astype(bool)
        one_op = np.asarray(np.where(sp, one_op, group_collective_s(lk, shape, act)))

    hide = s.overlap_tp.astype(bool)

    def overlapped(comm_s: FloatArray, compute_s: FloatArray) -> FloatArray:
        # Extra time of a GEMM with a collective hidden behind it: while the collective runs,
        # its kernels hold a share u of the SMs and the GEMM runs at (1 − u) speed. Without
        # overlap the collective is simply exposed.
        u = lk.comm_sm_fraction
        hidden = np.where(comm_s * (1.0 - u) >= compute_s, comm_s - compute_s, comm_s * u)
        return np.asarray(np.where(hide, hidden, comm_s))

    # The backward all-reduces hide behind the QKV and MLP-up weight-gradient GEMMs;
    # sequence parallelism keeps only the sharded input of QKV and MLP-up, so the backward pass
    # all-gathers it again, hidden behind the input-gradient GEMM (Korthikanti §4.2.2).
    backward = ops["backward"] / 2.0 * (
        overlapped(one_op, lt["wgrad_qkv"]) + overlapped(one_op, lt["wgrad_mlp_up"])
    ) + ops["sp_regather"] / 2.0 * (
        overlapped(gather, lt["dgrad_qkv"]) + overlapped(gather, lt["dgrad_mlp_up"])
    )
    return {
        "forward": ops["forward"] * one_op,
        "recompute": ops["recompute"] * one_op,
        "backward": np.asarray(backward),
    }


def dp_reduce_s(
    lk: Links,
    shape: Shape,
    grad_bytes: FloatArray,
    weight_bytes: FloatArray,
    s: StrategyArrays,
) -> dict[str, FloatArray]:
    """Data-parallel communication of the slowest group laid out as `shape`, by when it
    happens (`comm.dp_schedule`: ZeRO 0–3)."""
    on = (shape.x * shape.y > 1) & ((grad_bytes + weight_bytes) > 0)  # no phantom latency
    one_pass = {
        "all_reduce": group_collective_s(lk, shape, grad_bytes),
        "reduce_scatter": group_collective_s(lk, shape, grad_bytes, gather_only=True),
        "all_gather": group_collective_s(lk, shape, weight_bytes, gather_only=True),
    }
    return {
        timing: np.asarray(np.where(on, sum(counts[k] * one_pass[k] for k in one_pass), 0.0))
        for timing, counts in comm.dp_schedule(s).items()
    }


# The strategy fields that per-layer kernel times depend on.
SHAPE_FIELDS = ("micro_batch", "tp", "sequence_parallel", "recompute", "ep")


def shape_classes(s: StrategyArrays) -> tuple[StrategyArrays, IntArray] | None:
    """The distinct combinations of SHAPE_FIELDS (as 1-d strategies) and, per strategy, the
    index of its combination (shaped like the broadcast strategies); None when `s` is too small
    for this to pay."""
    shape = np.broadcast(*s.columns()).shape
    if int(np.prod(shape)) < 64:
        return None
    cols = [np.broadcast_to(getattr(s, f), shape).ravel().astype(np.int64) for f in SHAPE_FIELDS]
    key = np.zeros(cols[0].shape, dtype=np.int64)
    for c in cols:  # mixed-radix code of the combination
        key = key * (int(c.max()) + 1) + c
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    one = np.ones(first.size, dtype=np.int64)
    base = {f.name: one for f in fields(StrategyArrays)}
    u = StrategyArrays(**(base | {f: c[first] for f, c in zip(SHAPE_FIELDS, cols, strict=True)}))
    return u, np.asarray(inverse.reshape(shape), dtype=np.int64)


def per_shape(
    fn: Callable[[StrategyArrays], dict[str, FloatArray]],
    s: StrategyArrays,
    classes: tuple[StrategyArrays, IntArray] | None,
) -> dict[str, FloatArray]:
    """Evaluate `fn` (a function of the SHAPE_FIELDS only) once per distinct combination and
    spread the results back: a search holds a few dozen kernel shapes among hundreds of
    thousands of strategies."""
    if classes is None:
        return fn(s)
    u, inverse = classes
    out = fn(u)
    return {k: np.asarray(np.broadcast_to(v, (u.tp.size,))[inverse]) for k, v in out.items()}


def iteration(model: Model, system: System, network: Network, s: StrategyArrays) -> Iteration:
    """Critical-path time of one iteration for every strategy in `s` (arrays broadcast)."""
    gpus = s.gpus.astype(float)
    lk = links(system, network, gpus)
    pp, dp = s.pp.astype(float), s.dp.astype(float)
    v, m = s.interleave.astype(float), s.micro_batches.astype(float)
    layers_per_stage = model.layers / pp

    classes = shape_classes(s)
    lt = per_shape(lambda u: layer_times(model, system, u), s, classes)
    groups = megatron_shapes(s.tp, s.dp, s.pp, s.ep, lk.hb_domain)

    tpc = tp_comm_times(model, lk, s, lt, groups["tp"])
    tp_layer = tpc["forward"] + tpc["recompute"] + tpc["backward"]
    ep_layer = (
        model.moe_layers / model.layers * ep_comm_time_s(model, lk, s, groups["ep"])
        if model.moe_layers
        else 0.0
    )

    # Pipeline: activations (forward) and their gradients (backward) cross each boundary,
    # scattered over the tp ranks (Narayanan et al. 2021 §4.1) or already split by SP.
    p2p = np.where(pp > 1, p2p_s(lk, comm.pp_message_bytes(model, s), groups["pp"]), 0.0)

    t_layer = lt["forward"] + lt["backward"] + lt["recompute"] + tp_layer + ep_layer
    t_logits = per_shape(lambda u: {"t": logits_time_s(model, system, u)}, s, classes)["t"]
    # Blocking sends add to every micro-batch; overlapped ones only where they outlast compute.
    p2p_exposed = np.where(
        s.overlap_p2p.astype(bool),
        np.maximum(2.0 * v * p2p - layers_per_stage * t_layer, 0.0),
        2.0 * v * p2p,
    )
    t_stage_compute = layers_per_stage * t_layer + p2p_exposed

    # Data parallelism: gradients of this stage over dp ranks tp apart (ZeRO stages as in
    # dp_reduce_s); MoE expert gradients over the dp/ep expert-data-parallel ranks, tp·ep apart.
    dense_params, expert_params = dense_stage_params(model, s), expert_stage_params(model, s)
    params = dense_params + expert_params
    zero = s.zero
    dense = dp_reduce_s(
        lk, groups["dp"], comm.dp_gradient_bytes(model, s), comm.dp_weight_gather_bytes(model, s), s
    )
    expert = dp_reduce_s(
        lk,
        groups["expert_dp"],
        comm.dp_expert_gradient_bytes(model, s),
        comm.dp_expert_weight_gather_bytes(model, s),
        s,
    )
    dp_time = dense["end"] + expert["end"]
    # ZeRO 2/3 communicate every micro-batch, prefetched / reduced behind that pass's compute.
    zero_mb = np.maximum(
        dense["micro_batch_forward"]
        + expert["micro_batch_forward"]
        - layers_per_stage * lt["forward"],
        0.0,
    ) + np.maximum(
        dense["micro_batch_backward"]
        + expert["micro_batch_backward"]
        - layers_per_stage * (lt["backward"] + lt["recompute"]),
        0.0,
    )
    # Without gradient-accumulation fusion every micro-batch's backward pass ends with a
    # read-modify-write of the stage's gradient buffer: read the bf16/fp16 GEMM output and the
    # main grad, write the main grad (Megatron's param.main_grad.add_(param.grad)).
    grad_acc = np.where(
        s.grad_accumulation_fusion.astype(bool),
        0.0,
        memory_time_s(
            system.gpu,
            (
                dense_params / np.where(zero >= 2, dp, 1.0)
                + expert_params / np.where(zero >= 2, dp / s.ep, 1.0)
            )
            * (WEIGHT_BYTES + 2.0 * s.grad_reduce_bytes),
            GRAD_TENSORS_PER_LAYER * layers_per_stage,
        ),
    )
    t_stage = t_stage_compute + zero_mb + grad_acc
    steady = m * (t_stage + t_logits)
    bubble = (pp - 1.0) / v * (t_stage + t_logits / pp)
    # Tied embeddings: first and last stage all-reduce the embedding gradient.
    embed_bytes = comm.embedding_gradient_bytes(model, s)
    embed_ar = np.where(
        embed_bytes > 0, group_collective_s(lk, groups["embedding"], embed_bytes), 0.0
    )
    window = np.where(s.overlap_dp.astype(bool), layers_per_stage * lt["backward"], 0.0)
    dp_exposed = np.maximum(dp_time - window, 0.0) + embed_ar

    opt_params = params / np.where(zero >= 1, dp, 1.0)
    optimizer = memory_time_s(system.gpu, opt_params * OPTIMIZER_STEP_BYTES, 4.0)

    total = steady + bubble + dp_exposed + optimizer
    mem = memory(model, s)
    mflops = model_flops(model, s.global_batch)
    hflops = hardware_flops(model, s.global_batch, s.recompute)
    peak = gpus * system.gpu.peak_tflops * 1e12
    breakdown = {
        "compute": m * (layers_per_stage * (lt["forward"] + lt["backward"]) + t_logits),
        "recompute": m * layers_per_stage * lt["recompute"],
        "tp_comm": m * layers_per_stage * tp_layer,
        "ep_comm": m * layers_per_stage * ep_layer,
        "pp_comm": m * p2p_exposed,
        "zero_comm": m * zero_mb,
        "grad_accumulation": m * grad_acc,
        "pipeline_bubble": bubble,
        "dp_comm_exposed": dp_exposed,
        "optimizer": optimizer,
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
    )
