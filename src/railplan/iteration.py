"""Time of one training iteration on the critical path, over arrays of strategies.

The schedule is Megatron-LM's: tensor parallelism inside each layer (communication exposed),
1F1B or interleaved pipeline (Narayanan et al. 2021), data-parallel gradient reduction at the
end of the iteration, overlapped with the last micro-batch's backward pass when `overlap_dp`,
then the optimizer step. Per micro-batch and stage:

    t_stage = layers/pp · (forward + backward + recompute + TP communication) + 2·v·t_p2p
              (+ ZeRO-2/3 per-micro-batch traffic beyond compute, + the gradient-accumulation
              pass when it is not fused)
    t_pipeline = m · (t_stage + t_logits) + (pp − 1)/v · (t_stage + t_logits/pp)

with m micro-batches and v virtual stages; the last stage also runs the vocabulary projection
and loss (t_logits). Stages may hold different numbers of layers (`strategies.stage_layers`):
the slowest stage sets the steady-state pace, m · max(t_first, t_middle, t_last + t_logits), and
the breakdown is that stage's. Context parallelism (cp) runs every GEMM and element-wise kernel
on s/cp tokens and adds the ring attention's K/V sends beyond what the attention compute hides.
Communication that crosses HB domains uses the network, timed for the slowest group of each kind
(`railplan.layout`): `rail-optimized` and `rail-only` carry rail-aligned traffic alike
(hierarchical collectives keep NIC bytes inside rails; SYSTEM.md claim 2), `rail-only` forwards
cross-rail bytes through the HB domain, `oversubscribed` divides the NIC bandwidth by its ratio,
and `ideal` puts every GPU in one HB domain.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace

import numpy as np

from railplan import collectives as coll
from railplan.compute import (
    flash_attention_time_s,
    fp8_peak_tflops,
    gemm_time_s,
    memory_time_s,
)
from railplan.layout import Shape, megatron_shapes
from railplan.specs import GPU, Model, Network, System
from railplan.strategies import (
    FLASH2,
    FP8,
    FULL,
    SELECTIVE,
    UNFUSED,
    BoolArray,
    FloatArray,
    IntArray,
    StrategyArrays,
    stage_layers,
)
from railplan.workload import comm, elementwise, routing
from railplan.workload.flops import hardware_flops, model_flops
from railplan.workload.gemms import (
    ATTENTION_INPUT_GEMMS,
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
# (flash attention fuses the softmax and attention dropout into its kernel: two fewer)
FP8_CAST_BYTES = 4.0  # TE cast-transpose: read 2 (bf16), write 1 (fp8) + 1 (fp8 transpose)


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
    # Per micro-batch: the first, fullest middle and last stage (with the logits) and the
    # perfectly balanced stage (layers/pp and logits/pp), a bound no split beats.
    stage_s: dict[str, FloatArray] = field(default_factory=dict)

    @property
    def memory_gib_per_gpu(self) -> FloatArray:
        return np.asarray(self.memory.total_bytes / GIB)


def local(gemms: list[Gemm], s: StrategyArrays) -> list[Gemm]:
    """The GEMMs on one context-parallel rank: every GEMM's rows (tokens, or attention queries)
    are the rank's s/cp; attention still runs over all s keys (the K/V ring), and causal load
    balancing (2·cp chunks) gives each rank an equal share of the masked work."""
    cp = s.cp.astype(float)
    return [replace(g, m=np.asarray(g.m / cp)) for g in gemms]


def linear_time_s(gpu: GPU, g: Gemm, s: StrategyArrays) -> FloatArray:
    """A linear layer's GEMM in the strategy's precision (BF16, or FP8 where `precision` is
    fp8); FP8 timing is only evaluated when some strategy asks for it."""
    bf16 = gemm_time_s(gpu, g)
    fp8 = s.precision == FP8
    if not bool(np.any(fp8)):
        return bf16
    return np.asarray(np.where(fp8, gemm_time_s(gpu, g, fp8=True), bf16))


def fp8_cast_times_s(gpu: GPU, gemms: list[Gemm], s: StrategyArrays) -> dict[str, FloatArray]:
    """Transformer Engine's FP8 casts around the linear GEMMs: forward, a fused cast-transpose
    of each GEMM input (read BF16, write FP8 and its FP8 transpose: 4 bytes per element);
    backward, the same for each output gradient; at the element-wise kernel efficiencies.
    Weights are cast once per step (TE caches them over micro-batches: not counted here)."""
    on = (s.precision == FP8).astype(np.float64)
    inputs = sum((g.batch * g.m * g.k for g in gemms), np.zeros(()))
    outputs = sum((g.batch * g.m * g.n for g in gemms), np.zeros(()))
    kernels = float(len(gemms))
    fwd = memory_time_s(gpu, FP8_CAST_BYTES * inputs, kernels, gpu.elementwise_forward_efficiency)
    bwd = memory_time_s(gpu, FP8_CAST_BYTES * outputs, kernels, gpu.elementwise_backward_efficiency)
    return {"forward": np.asarray(on * fwd), "backward": np.asarray(on * bwd)}


def layer_times(model: Model, system: System, s: StrategyArrays) -> dict[str, FloatArray]:
    """Per layer, per micro-batch, on one GPU: forward, backward and recompute compute time.

    Linear GEMMs run in the strategy's precision; the attention core stays BF16: unfused, the
    score and context GEMMs plus the softmax/dropout kernels on the s×s scores; flash, one fused
    kernel (compute.flash_attention_time_s) with no score traffic through HBM."""
    gpu = system.gpu
    b, t = s.micro_batch.astype(float), s.tp.astype(float)
    gemms = local(layer_gemms(model, b, t), s)
    linear = [g for g in gemms if not g.attention]
    core = [g for g in gemms if g.attention]
    flash = s.attention != UNFUSED  # a fused kernel (today's or FlashAttention-2's)

    def total(times: list[FloatArray]) -> FloatArray:
        return np.asarray(sum(times, np.zeros(())))

    wgrad = {g.name: linear_time_s(gpu, g.backward()[1], s) for g in linear}
    dgrad = {g.name: linear_time_s(gpu, g.backward()[0], s) for g in linear}
    fprop = {g.name: linear_time_s(gpu, g, s) for g in linear}
    lin_fwd = total(list(fprop.values()))
    lin_bwd = total(list(wgrad.values()) + list(dgrad.values()))
    casts = fp8_cast_times_s(gpu, linear, s)

    zero = np.zeros(())
    if bool(np.all(flash)):  # the search's usual case: only the fused kernel
        unfused_fwd = unfused_bwd = zero
    else:
        unfused_fwd = total([gemm_time_s(gpu, g) for g in core])
        unfused_bwd = total([gemm_time_s(gpu, h) for g in core for h in g.backward()])
    core_flops = total([g.flops for g in core])
    fused = flash_attention_time_s(gpu, core_flops)
    if bool(np.any(s.attention == FLASH2)):
        fa2 = flash_attention_time_s(gpu, core_flops, generation=2)
        fused = {k: np.where(s.attention == FLASH2, fa2[k], v) for k, v in fused.items()}
    attn_fwd = np.where(flash, fused["forward"], unfused_fwd)
    attn_bwd = np.where(flash, fused["backward"], unfused_bwd)

    # Element-wise kernels run well below streaming bandwidth: measured fused-kernel
    # efficiencies (GPU spec) on the bytes of workload/elementwise.py.
    fwd_eff, bwd_eff = gpu.elementwise_forward_efficiency, gpu.elementwise_backward_efficiency
    ew = {k: v / s.cp for k, v in elementwise.layer_bytes(model, s).items()}
    kernels = np.where(flash, ELEMENTWISE_KERNELS_PER_LAYER - 2.0, ELEMENTWISE_KERNELS_PER_LAYER)
    ew_fwd = memory_time_s(gpu, ew["forward"], kernels, fwd_eff)
    ew_bwd = memory_time_s(gpu, ew["backward"], kernels, bwd_eff)
    ew_scores = memory_time_s(gpu, ew["scores_forward"], 2.0 * (1.0 - flash), fwd_eff)

    forward = lin_fwd + attn_fwd + ew_fwd + casts["forward"]
    backward = lin_bwd + attn_bwd + ew_bwd + casts["backward"]
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
        "forward": np.asarray(forward),
        "backward": np.asarray(backward),
        "recompute": np.asarray(recompute),
        "wgrad_qkv": total([wgrad[n] for n in ATTENTION_INPUT_GEMMS if n in wgrad]),
        "wgrad_mlp_up": wgrad["mlp_up"],
        "dgrad_qkv": total([dgrad[n] for n in ATTENTION_INPUT_GEMMS if n in dgrad]),
        "dgrad_mlp_up": dgrad["mlp_up"],
        "fprop_qkv": total([fprop[n] for n in ATTENTION_INPUT_GEMMS if n in fprop]),
        "fprop_proj": fprop["proj"],
        "fprop_mlp_up": fprop["mlp_up"],
        "fprop_mlp_down": fprop["mlp_down"],
        "attention_forward": np.asarray(attn_fwd),
        "attention_backward": np.asarray(attn_bwd),
    }


def moe_mlp_delta(model: Model, system: System, s: StrategyArrays) -> dict[str, FloatArray]:
    """Extra compute of one MoE layer over a dense one: router + experts − dense MLP, with the
    activation-function traffic of the expert slots (experts in the strategy's precision,
    the router in BF16)."""
    gpu = system.gpu
    b, t, ep = s.micro_batch.astype(float), s.tp.astype(float), s.ep.astype(float)
    dense = local(mlp_gemms(model, b, t), s)
    experts = expert_gemms(model, b, t, ep)
    if model.shared_experts:
        # Shared experts: a dense MLP of shared·expert_ffn width on every token.
        experts += mlp_gemms(model, b, t, model.shared_experts * model.expert_ffn_)
    experts = local(experts, s)

    def fwd_bwd(gs: list[Gemm]) -> tuple[FloatArray, FloatArray]:
        f = sum((linear_time_s(gpu, g, s) for g in gs), np.zeros(()))
        bw = sum((linear_time_s(gpu, h, s) for g in gs for h in g.backward()), np.zeros(()))
        c = fp8_cast_times_s(gpu, gs, s)
        return np.asarray(f + c["forward"]), np.asarray(bw + c["backward"])

    (ef, eb), (df, db) = fwd_bwd(experts), fwd_bwd(dense)
    router = router_gemm(model, b)
    rf = gemm_time_s(gpu, router)
    rb = sum((gemm_time_s(gpu, h) for h in router.backward()), np.zeros(()))
    slots = b * model.seq * (model.top_k * routing.slot_factor(model, s.ep) + model.shared_experts)
    extra = elementwise.activation_function_bytes(
        model, (slots * model.expert_ffn_ - b * model.seq * model.ffn_) / t / s.cp
    )
    ew_f = memory_time_s(gpu, extra["forward"], 0.0, gpu.elementwise_forward_efficiency)
    ew_b = memory_time_s(gpu, extra["backward"], 0.0, gpu.elementwise_backward_efficiency)
    return {"forward": ef + rf - df + ew_f, "backward": eb + rb - db + ew_b}


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
    (g,) = local([logit_gemm(model, s.micro_batch.astype(float), s.tp.astype(float))], s)
    gemm = gemm_time_s(system.gpu, g) + sum(gemm_time_s(system.gpu, h) for h in g.backward())
    # softmax cross-entropy: write fp32 logits, read them for max/sum/grad, write the grad.
    loss_bytes = 16.0 * comm.local_tokens(model, s) * model.vocab / s.tp
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
    u = lk.comm_sm_fraction

    def overlapped(comm_s: FloatArray, compute_s: FloatArray) -> FloatArray:
        return np.asarray(np.where(hide, hidden_cost_s(comm_s, compute_s, u), comm_s))

    # The backward all-reduces hide behind the QKV and MLP-up weight-gradient GEMMs;
    # sequence parallelism keeps only the sharded input of QKV and MLP-up, so the backward pass
    # all-gathers it again, hidden behind the input-gradient GEMM (Korthikanti §4.2.2).
    backward = ops["backward"] / 2.0 * (
        overlapped(one_op, lt["wgrad_qkv"]) + overlapped(one_op, lt["wgrad_mlp_up"])
    ) + ops["sp_regather"] / 2.0 * (
        overlapped(gather, lt["dgrad_qkv"]) + overlapped(gather, lt["dgrad_mlp_up"])
    )
    # Userbuffers (TE, with sequence parallelism): each forward all-gather is pipelined with
    # the column-parallel GEMM it feeds (QKV, MLP up), each reduce-scatter with the
    # row-parallel GEMM whose output it reduces (projection, MLP down). The buffers are shared
    # over NVLink (CUDA IPC), so only a TP group inside one HB domain can use them.
    ub = (s.tp_comm_overlap * s.sequence_parallel).astype(bool) & (s.tp > 1) & shape.inside
    pipelined = sum((hidden_cost_s(gather, lt[k], u) for k in UB_FORWARD_GEMMS), np.zeros(()))
    forward = np.where(ub, ops["forward"] / 2.0 * pipelined, ops["forward"] * one_op)
    recompute = np.where(ub, ops["recompute"] / 2.0 * pipelined, ops["recompute"] * one_op)
    return {
        "forward": np.asarray(forward),
        "recompute": np.asarray(recompute),
        "backward": np.asarray(backward),
    }


# The forward GEMMs a TE userbuffers all-gather (QKV, MLP up) or reduce-scatter (projection,
# MLP down) is pipelined with.
UB_FORWARD_GEMMS = ("fprop_qkv", "fprop_proj", "fprop_mlp_up", "fprop_mlp_down")


def hidden_cost_s(comm_s: FloatArray, compute_s: FloatArray, u: float) -> FloatArray:
    """Extra time of compute with a collective hidden behind it: while the collective runs, its
    kernels hold a share u of the SMs and the compute runs at (1 − u) speed; what outlasts the
    compute is exposed."""
    return np.asarray(np.where(comm_s * (1.0 - u) >= compute_s, comm_s - compute_s, comm_s * u))


def cp_comm_time_s(
    model: Model, lk: Links, s: StrategyArrays, lt: dict[str, FloatArray], shape: Shape
) -> FloatArray:
    """Exposed ring-attention time per layer and micro-batch (0 when cp = 1).

    Each ring step sends the K/V block (backward: K/V and their gradients) to the successor
    while the attention kernel works on the block received before (Megatron-Core /
    TransformerEngine overlap the two); of the cp steps, cp − 1 have a send in flight, so a
    pass exposes what its sends take beyond (cp − 1)/cp of its attention compute."""
    one = p2p_s(lk, comm.cp_block_bytes(model, s), shape)
    steps = comm.cp_steps_per_layer(s)
    share = (s.cp - 1) / s.cp
    recompute_attn = np.where(s.recompute > 0, lt["attention_forward"], 0.0)
    passes = (
        (steps["forward"], lt["attention_forward"]),
        (steps["recompute"], recompute_attn),
        (steps["backward"], lt["attention_backward"]),
    )
    exposed = sum((np.maximum(n * one - share * attn, 0.0) for n, attn in passes), np.zeros(()))
    return np.asarray(np.where(s.cp > 1, exposed, 0.0))


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
    sched = comm.dp_schedule(s)
    out = {
        timing: np.asarray(np.where(on, sum(counts[k] * one_pass[k] for k in one_pass), 0.0))
        for timing, counts in sched.items()
    }
    # The weight all-gather at the end, which can hide behind the next step's forward pass.
    out["end_all_gather"] = np.asarray(
        np.where(on, sched["end"]["all_gather"] * one_pass["all_gather"], 0.0)
    )
    return out


# The strategy fields that per-layer kernel times depend on.
SHAPE_FIELDS = (
    "micro_batch",
    "tp",
    "sequence_parallel",
    "recompute",
    "ep",
    "cp",
    "attention",
    "precision",
)


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
    """Critical-path time of one iteration for every strategy in `s` (arrays broadcast).

    MFU and HFU are over the BF16 dense peak whatever the precision, and count the full s²
    attention term (Megatron's convention; a causal fused kernel does about half of it)."""
    if bool(np.any(s.precision == FP8)):
        fp8_peak_tflops(system.gpu)  # a one-line error for GPUs without FP8
    gpus = s.gpus.astype(float)
    lk = links(system, network, gpus)
    pp, dp = s.pp.astype(float), s.grad_ranks.astype(float)
    v, m = s.interleave.astype(float), s.micro_batches.astype(float)
    stages = stage_layers(model, s)
    layers_per_stage = stages["mean"]
    u = lk.comm_sm_fraction

    classes = shape_classes(s)
    lt = per_shape(lambda u: layer_times(model, system, u), s, classes)
    groups = megatron_shapes(s.tp, s.dp, s.pp, s.ep, lk.hb_domain, s.cp)

    tpc = tp_comm_times(model, lk, s, lt, groups["tp"])
    tp_layer = tpc["forward"] + tpc["recompute"] + tpc["backward"]
    ep_layer = (
        model.moe_layers / model.layers * ep_comm_time_s(model, lk, s, groups["ep"])
        if model.moe_layers
        else 0.0
    )
    cp_layer = cp_comm_time_s(model, lk, s, lt, groups["cp"])

    # Pipeline: activations (forward) and their gradients (backward) cross each boundary,
    # scattered over the tp ranks (Narayanan et al. 2021 §4.1) or already split by SP.
    p2p = np.where(pp > 1, p2p_s(lk, comm.pp_message_bytes(model, s), groups["pp"]), 0.0)

    t_layer = lt["forward"] + lt["backward"] + lt["recompute"] + tp_layer + ep_layer + cp_layer
    t_logits = per_shape(lambda u: {"t": logits_time_s(model, system, u)}, s, classes)["t"]

    # Data parallelism: gradients of this stage over the dp·cp ranks tp apart (ZeRO stages as
    # in dp_reduce_s); MoE expert gradients over the dp/ep expert-data-parallel ranks, tp·ep
    # apart.
    most = stages["max"]  # the fullest stage's layers (its weights and gradients)
    dense_params = dense_stage_params(model, s, True, most)
    expert_params = expert_stage_params(model, s, most)
    zero = s.zero_sharding
    dense = dp_reduce_s(
        lk,
        groups["dp"],
        comm.dp_gradient_bytes(model, s, True, most),
        comm.dp_weight_gather_bytes(model, s, True, most),
        s,
    )
    expert = dp_reduce_s(
        lk,
        groups["expert_dp"],
        comm.dp_expert_gradient_bytes(model, s, most),
        comm.dp_expert_weight_gather_bytes(model, s, most),
        s,
    )
    dp_time = dense["end"] + expert["end"]
    mb_forward = dense["micro_batch_forward"] + expert["micro_batch_forward"]
    mb_backward = dense["micro_batch_backward"] + expert["micro_batch_backward"]
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
            GRAD_TENSORS_PER_LAYER * stages["max"],
        ),
    )

    def stage_parts(n: FloatArray) -> dict[str, FloatArray]:
        """Per micro-batch, a stage of n layers: its compute and what it exposes."""
        # Blocking sends add to every micro-batch; overlapped ones only where they outlast
        # compute. ZeRO 2/3 communicate every micro-batch, prefetched / reduced behind that
        # pass's compute.
        p2p_exposed = np.where(
            s.overlap_p2p.astype(bool), np.maximum(2.0 * v * p2p - n * t_layer, 0.0), 2.0 * v * p2p
        )
        zero_mb = hidden_cost_s(mb_forward, n * lt["forward"], u) + hidden_cost_s(
            mb_backward, n * (lt["backward"] + lt["recompute"]), u
        )
        return {"layers": n * t_layer, "p2p": p2p_exposed, "zero": zero_mb}

    def stage_s(n: FloatArray) -> FloatArray:
        parts = stage_parts(n)
        return np.asarray(parts["layers"] + parts["p2p"] + parts["zero"] + grad_acc)

    t_first = stage_s(stages["first"])
    t_middle = np.where(pp > 2, stage_s(stages["middle"]), 0.0)
    t_last = stage_s(stages["last"]) + t_logits
    pace = np.maximum(np.maximum(t_first, t_middle), t_last)
    # The critical stage's layers, and whether it runs the logits (the last stage does).
    last_is_slowest = t_last >= np.maximum(t_first, t_middle)
    n_crit = np.where(
        last_is_slowest,
        stages["last"],
        np.where(t_first >= t_middle, stages["first"], stages["middle"]),
    )
    logits_crit = np.where(last_is_slowest, t_logits, 0.0)
    crit = stage_parts(n_crit)
    steady = m * pace
    bubble = (pp - 1.0) / v * (stage_s(layers_per_stage) + t_logits / pp)
    # Tied embeddings: first and last stage all-reduce the embedding gradient.
    embed_bytes = comm.embedding_gradient_bytes(model, s)
    embed_ar = np.where(
        embed_bytes > 0, group_collective_s(lk, groups["embedding"], embed_bytes), 0.0
    )
    # Overlapped (Megatron-Core --overlap-grad-reduce / --overlap-param-gather, NeMo's
    # distributed_fused_adam overlap_grad_sync / overlap_param_sync): the gradient reduction
    # runs bucket by bucket behind the last micro-batch's backward pass, the weight all-gather
    # behind the next step's first forward pass; both slow that compute by the SMs they hold.
    gather_end = dense["end_all_gather"] + expert["end_all_gather"]
    overlap = s.overlap_dp.astype(bool)
    dp_exposed = (
        np.where(
            overlap,
            hidden_cost_s(dp_time - gather_end, layers_per_stage * lt["backward"], u)
            + hidden_cost_s(gather_end, layers_per_stage * lt["forward"], u),
            dp_time,
        )
        + embed_ar
    )

    opt_params = dense_params / np.where(zero >= 1, dp, 1.0) + expert_params / np.where(
        zero >= 1, dp / s.ep, 1.0
    )
    optimizer = memory_time_s(system.gpu, opt_params * OPTIMIZER_STEP_BYTES, 4.0)

    total = steady + bubble + dp_exposed + optimizer
    mem = memory(model, s)
    mflops = model_flops(model, s.global_batch)
    hflops = hardware_flops(model, s.global_batch, s.recompute)
    peak = gpus * system.gpu.peak_tflops * 1e12
    breakdown = {
        "compute": m * (n_crit * (lt["forward"] + lt["backward"]) + logits_crit),
        "recompute": m * n_crit * lt["recompute"],
        "tp_comm": m * n_crit * tp_layer,
        "ep_comm": m * n_crit * ep_layer,
        "pp_comm": m * crit["p2p"],
        "zero_comm": m * crit["zero"],
        "grad_accumulation": m * grad_acc,
        "pipeline_bubble": bubble,
        "dp_comm_exposed": dp_exposed,
        "optimizer": optimizer,
        "cp_comm": m * n_crit * cp_layer,
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
        stage_s={
            "first": np.asarray(t_first),
            "middle": np.asarray(t_middle),
            "last": np.asarray(t_last),
            "balanced": np.asarray(stage_s(layers_per_stage) + t_logits / pp),
        },
    )
