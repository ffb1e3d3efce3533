"""Exposed time of the communication inside one iteration, over arrays of strategies.

What the network gives collectives (`Links`), the collective of the slowest group of each kind
laid out on HB domains (`railplan.perf.layout`), and, per kind, what a collective exposes beyond the
compute it overlaps: tensor parallelism (backward behind the weight/input-gradient GEMMs,
forward pipelined with its GEMMs through TE userbuffers), context parallelism (the ring
attention's K/V sends), expert parallelism (all-to-alls), pipeline sends and data parallelism
(by ZeRO stage). One rule for every overlapped collective: what outlasts the compute is
exposed, and the compute runs at (1 − u) speed while the collective holds a share u of the SMs
(`hidden_cost_s`). `rail-optimized` and `rail-only` carry rail-aligned traffic alike
(hierarchical collectives keep NIC bytes inside rails; SYSTEM.md claim 2), `rail-only` forwards
cross-rail bytes through the HB domain, `oversubscribed` divides the NIC bandwidth spread over
many leaves by its ratio, and `ideal` puts every GPU in one HB domain.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from railplan.perf import collectives as coll
from railplan.perf.layout import Shape, worst_shape
from railplan.specs import Model, Network, System
from railplan.specs.arrays import (
    EP_DEEPEP,
    FP8,
    FloatArray,
    IntArray,
    StrategyArrays,
    recomputed_share,
    recomputes,
)
from railplan.specs.hardware import HostCpu
from railplan.workload import comm
from railplan.workload.routing import remote_domains, slot_factor, touched_ranks


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
    ll_max_bw: float = 0.0  # NCCL's LL bus-bandwidth cap; 0 = no LL/LL128 (GPU.nccl_ll_max_…)
    host_cpu: HostCpu = "intel"  # System.host_cpu: NCCL's LL cap, post overhead across domains


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
        ll_max_bw=system.gpu.nccl_ll_max_bus_bytes_per_s or 0.0,
        host_cpu=system.host_cpu,
    )


def group_collective_s(
    lk: Links, shape: Shape, size: FloatArray, gather_only: bool = False
) -> FloatArray:
    """All-reduce (or all-gather / reduce-scatter when `gather_only`) of the slowest group of a
    kind, laid out as `shape` (railplan.perf.layout): hierarchical over x members per domain and y
    domains (SYSTEM.md formula 2), a plain HB ring when the group lies inside one domain, plus
    NCCL's Simple-protocol base latency (`collectives.NCCL_SIMPLE_BASE_US`). An all-reduce
    takes what NCCL's tuner would: the fastest of that ring, the in-network algorithm
    when NVLS or SHARP is on, inside one domain the LL / LL128 rings
    (`collectives.nccl_low_latency_ring_s`), which win for small messages, and across domains
    the LL / LL128 rings and NCCL's tree with each protocol (`collectives.nccl_multinode_s`);
    all-gathers and reduce-scatters take the faster of their Simple and LL / LL128 rings."""
    phases = 1.0 if gather_only else 2.0
    base = np.where(shape.x * shape.y > 1, coll.NCCL_SIMPLE_BASE_US * 1e-6, 0.0)
    t = base + phases * coll.hierarchical_all_gather_s(
        shape.x, shape.y, size, lk.hb_bw, lk.nic_bw, lk.hb_lat_s, lk.nic_lat_s
    )
    if not gather_only and (lk.nvls_bw > 0 or lk.sharp):
        # NCCL's tuner takes the in-network algorithm only where its model predicts it faster;
        # NVLS needs two members in a domain, SHARP two domains (else nothing aggregates)
        applies = ((lk.nvls_bw > 0) & (shape.x > 1)) | (lk.sharp & (shape.y > 1))
        innet = coll.in_network_hierarchical_all_reduce_s(
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
        t = np.where(applies, np.minimum(t, innet), t)
    if lk.ll_max_bw > 0:
        low = coll.nccl_low_latency_ring_s(shape.x, size, lk.hb_bw, lk.ll_max_bw, phases)
        t = np.where(shape.inside, np.minimum(t, low), t)
        across = ~shape.inside & (shape.y > 1)
        if bool(np.any(across)):
            simple = coll.hierarchical_data_s(shape.x, shape.y, size, lk.hb_bw, lk.nic_bw, phases)
            multi = coll.nccl_multinode_s(
                shape.x, shape.y, size, simple, lk.host_cpu, phases, shape.domains
            )
            t = np.where(across, np.minimum(t, multi), t)
    if lk.rail_only:
        # Forwarding: the NIC-phase bytes take one more HB hop to reach the right rail.
        hop = phases * (shape.y - 1) / shape.y * size / shape.x / lk.hb_bw
        t = t + np.where(shape.cross_rail, hop, 0.0)
    return np.asarray(t)


def fp8_amax_reduction_s(lk: Links, s: StrategyArrays) -> FloatArray:
    """Per micro-batch and pipeline stage, FP8 only: Transformer Engine's delayed scaling
    all-reduces the amax history of every FP8 tensor at the exit of each `fp8_autocast` region
    (forward) and in the backward of its first module, synchronously (`async_op=False`,
    `FP8GlobalStateManager.reduce_tensor_across_group_op_max`), over Megatron-Core's amax
    reduction group, the tp·cp·dp consecutive ranks of a stage
    (`parallel_state.get_amax_reduction_group(with_context_parallel=True)`); Megatron-Core opens
    one region per model chunk's transformer block, so 2·v tiny all-reduces at NCCL's
    small-message latency (`collectives.small_all_reduce_s`), over the nodes the group's layout
    spans (`layout.worst_shape`). 0 in BF16, and not computed when no strategy runs FP8 (the
    search's default)."""
    fp8 = s.precision == FP8
    if not bool(np.any(fp8)):
        return np.zeros(())
    stage = s.tp * s.cp * s.dp
    group = worst_shape(stage, 1, stage, 1, s.pp, lk.hb_domain)
    per_chunk = 2.0 * coll.small_all_reduce_s(group.x, group.domains)
    return np.asarray(np.where(fp8, s.interleave * per_chunk, 0.0))


def p2p_s(lk: Links, size: FloatArray, shape: Shape, ring: bool = False) -> FloatArray:
    """Point-to-point send across the slowest boundary of a chain laid out as `shape`: NVLink
    when every chain lies in one HB domain, else the NIC (plus, on rail-only, an HB hop to the
    peer's rail when the boundary crosses rails). Pipeline sends are spread traffic (every
    stage sends to a GPU tp·cp·dp ranks on, all at once: the spine's ratio divides them);
    a `ring`'s sends go to the next rank of the group, crossing each leaf's uplinks at most
    twice, as a collective's ring does (`Links`)."""
    over_nic = size / (lk.nic_bw if ring else lk.nic_bw_spread) + lk.nic_lat_s
    if lk.rail_only:
        over_nic = over_nic + np.where(shape.cross_rail, size / lk.hb_bw, 0.0)
    return np.asarray(np.where(shape.inside, size / lk.hb_bw + lk.hb_lat_s, over_nic))


def ep_comm_time_s(
    model: Model,
    lk: Links,
    s: StrategyArrays,
    shape: Shape,
    layer_compute_s: FloatArray,
    shared_s: dict[str, FloatArray] | None = None,
) -> FloatArray:
    """Exposed expert-parallel all-to-all time per MoE layer and micro-batch (all passes).

    The ep ranks are spaced etp apart (tp by default): x of them share an HB domain, y domains.
    Rail-only runs the two-step all-to-all with forwarding (rail phase, then HB phase; SYSTEM.md
    formula 3); the other networks the direct one. Every all-to-all is exposed, unless
    `overlap_ep`: then a micro-batch's forward is merged layer by layer with the previous one's
    backward, and the layer's all-to-alls run behind that pair's compute (`layer_compute_s`,
    one layer's forward, backward and recompute) at the SM share collectives hold
    (`hidden_cost_s`). Only the merged passes hide them: the warm-up forwards and the cooldown
    backwards run alone (`ep_merged_share`).
    With `shared_expert_overlap` the shared experts run on a side stream beside the
    all-to-alls (Megatron-Core's MoE README: "both the forward and the backward pass can
    overlap", PyTorch ≥ 2.2; autograd runs each backward op on its forward's stream, and
    `set_tensor_grad_fn_sequence_sr` puts the all-to-alls' gradients first): `shared_s`
    (`layer_time.SHARED_PIECES`) gives the pieces, the up projection with the activation beside
    the dispatch (and in the backward its gradient beside the dispatch's gradient), the down
    projection beside the combine (and its gradient beside the combine's), each piece hiding
    its all-to-all by the same rule (`hidden_cost_s`): the all-to-all costs what outlasts the
    piece, or the SM share it takes from it; a rerun MoE block's forward hides its own again.
    The shared experts' own tensor-parallel gather and reduce-scatter, which Megatron-Core
    overlaps with the permutations, stay where `tp_comm_times` counts them.
    """
    ratio = comm.ep_dispatch_byte_ratio(s)
    one = one_all_to_all_s(model, lk, s, shape, 1.0)
    if bool(np.any(ratio != 1.0)):
        # half the all-to-alls carry the tokens to the experts, in FP8 (`fp8_dispatch`)
        one = np.asarray(0.5 * (one + one_all_to_all_s(model, lk, s, shape, ratio)))
    ops = comm.ep_all_to_alls_per_moe_layer(s, recomputed_share(model, s))
    exposed = (ops["forward"] + ops["recompute"] + ops["backward"]) * one
    beside = (s.shared_expert_overlap > 0) & (s.ep > 1)
    if shared_s is not None and bool(np.any(beside)):
        u = lk.comm_sm_fraction

        def pair(up: str, down: str) -> FloatArray:
            """One pass's two all-to-alls beside the shared experts' two pieces."""
            return hidden_cost_s(one, shared_s[up], u) + hidden_cost_s(one, shared_s[down], u)

        forward = pair("moe_shared_up_forward", "moe_shared_down_forward")
        backward = pair("moe_shared_up_backward", "moe_shared_down_backward")
        passes = (ops["forward"] + ops["recompute"]) / 2.0
        hid = passes * forward + ops["backward"] / 2.0 * backward
        exposed = np.asarray(np.where(beside, hid, exposed))
    merged = ep_merged_share(s)
    hidden = hidden_cost_s(exposed, layer_compute_s, lk.comm_sm_fraction)
    return np.asarray((1.0 - merged) * exposed + merged * hidden)


def one_all_to_all_s(
    model: Model, lk: Links, s: StrategyArrays, shape: Shape, byte_ratio: FloatArray | float
) -> FloatArray:
    """One MoE all-to-all of the ep group, its bytes × `byte_ratio` (1: BF16): the direct one
    on rail-optimized and ideal networks, the two-step one with forwarding on rail-only
    (SYSTEM.md formula 3), DeepEP's deduplicated one with `ep_dispatch` deepep."""
    one = direct_all_to_all_s(lk, shape, comm.ep_pair_bytes(model, s) * byte_ratio)
    deepep = (s.ep_dispatch == EP_DEEPEP) & (s.ep > 1)
    if bool(np.any(deepep)):
        # The busiest rank (dropless routing, `slot_factor`) moves sf times the even share.
        sf = slot_factor(model, s.ep)
        token_bytes = comm.ep_token_bytes(model, s) * sf * byte_ratio
        dedup = deduplicated_all_to_all_s(model, lk, shape, token_bytes, s.ep)
        one = np.asarray(np.where(deepep, dedup, one))
    return np.asarray(one)


def direct_all_to_all_s(lk: Links, shape: Shape, pair_bytes: FloatArray | float) -> FloatArray:
    """An all-to-all in which every member sends `pair_bytes` to every other one: direct on
    rail-optimized and ideal networks, the two-step one with forwarding on rail-only, whose
    rails do not reach each other (SYSTEM.md formula 3)."""
    fn = coll.all_to_all_rail_only_s if lk.rail_only else coll.all_to_all_rail_optimized_s
    return np.asarray(
        fn(shape.x, shape.y, pair_bytes, lk.hb_bw, lk.nic_bw_spread, lk.hb_lat_s, lk.nic_lat_s)
    )


def deduplicated_all_to_all_s(
    model: Model, lk: Links, shape: Shape, token_bytes: FloatArray | float, ep: IntArray | int
) -> FloatArray:
    """DeepEP's all-to-all of `token_bytes` of tokens per member of an ep group: each token once
    over its own rail to every other HB domain holding one of its experts
    (`routing.remote_domains`), then over NVLink to each GPU holding one
    (`routing.touched_ranks`). Rail-aligned: no forwarding on rail-only, no spine on any
    network (`coll.all_to_all_deduplicated_s`)."""
    return coll.all_to_all_deduplicated_s(
        shape.x,
        shape.y,
        token_bytes,
        remote_domains(model, shape.domains),
        touched_ranks(model, ep),
        lk.hb_bw,
        lk.nic_bw,
        lk.hb_lat_s,
        lk.nic_lat_s,
    )


def ep_merged_share(s: StrategyArrays) -> FloatArray:
    """Of a first-stage rank's m·v chunk passes of each kind, the share that `overlap_ep` merges
    into forward-backward pairs (0 without it): all but the warm-up forwards
    (`StrategyArrays.warmup_chunks`) and as many cooldown backwards, which Megatron-Core's
    combined 1F1B runs alone."""
    total = s.micro_batches.astype(float) * s.interleave.astype(float)
    on = (s.overlap_ep > 0) & (s.ep > 1)
    # DualPipeV: rank 0 (the fewest) merges 2·(m − 2·pp + 1) pairs in its main step and
    # pp − 1 more after it (`dualpipev.py` steps 4-5), 3·pp − 1 of its 2·m forwards alone.
    alone = np.where(s.dualpipev, 3.0 * s.pp.astype(float) - 1.0, s.warmup_chunks(0))
    return np.asarray(np.where(on, (total - alone) / total, 0.0))


def tp_comm_times(
    model: Model, lk: Links, s: StrategyArrays, lt: dict[str, FloatArray], shape: Shape
) -> dict[str, FloatArray]:
    """Exposed tensor-parallel communication per layer and micro-batch, by pass.

    Megatron: 2 all-reduces (or all-gather + reduce-scatter with sequence parallelism: the same
    bytes, but for Transformer Engine's FP8 all-gathers) in the forward pass and 2 more when
    full recompute reruns it (1 when selective recompute reruns the MLP or the MoE block),
    exposed unless Transformer Engine's userbuffers pipeline them with their GEMMs
    (`tp_comm_overlap` with sequence parallelism, inside one HB domain: below); 2 in the
    backward pass, each hidden behind its linear's weight-gradient GEMM (Korthikanti et al.
    2022 §6.2), which runs slower meanwhile because the collective's kernels hold
    `comm_sm_fraction` of the SMs. The group is tp consecutive ranks. An MoE layer runs the
    MLP's pair only for its shared experts (`comm.tp_ops_per_layer`); its routed experts'
    collectives are `expert_tp_comm_time_s`.
    """
    act = comm.tp_message_bytes(model, s)
    ops = comm.tp_ops_per_layer(
        s, model.moe_layers / model.layers, recomputed_share(model, s), model.shared_experts
    )
    on, mlp = (s.tp > 1).astype(float), ops["mlp"]
    # sequence parallelism: a reduce-scatter and an all-gather (two collectives; in FP8 the
    # gather moves 1 byte per element: `comm.tp_gather_byte_ratio`); without it one all-reduce
    # of the BF16 bytes (NCCL's algorithm and protocol: `group_collective_s`)
    scatter = group_collective_s(lk, shape, act, gather_only=True)
    ratio = comm.tp_gather_byte_ratio(s)
    gather = (  # timed apart only where some strategy gathers FP8
        scatter
        if bool(np.all(ratio == 1.0))
        else group_collective_s(lk, shape, act * ratio, gather_only=True)
    )
    sp = s.sequence_parallel.astype(bool)
    one_op = np.asarray(np.where(sp, gather + scatter, group_collective_s(lk, shape, act)))

    hide = s.overlap_tp.astype(bool)
    u = lk.comm_sm_fraction

    def overlapped(comm_s: FloatArray, compute_s: FloatArray) -> FloatArray:
        return np.asarray(np.where(hide, hidden_cost_s(comm_s, compute_s, u), comm_s))

    # The backward all-reduces hide behind the QKV and MLP-up weight-gradient GEMMs;
    # sequence parallelism keeps only the sharded input of QKV and MLP-up, so the backward pass
    # all-gathers it again, hidden behind the input-gradient GEMM (Korthikanti §4.2.2).
    sp = s.sequence_parallel.astype(float)
    wgrads = overlapped(one_op, lt["wgrad_qkv"]) + mlp * overlapped(one_op, lt["wgrad_mlp_up"])
    dgrads = overlapped(gather, lt["dgrad_qkv"]) + mlp * overlapped(gather, lt["dgrad_mlp_up"])
    backward = on * wgrads + on * sp * dgrads
    # Userbuffers (TE, with sequence parallelism): each forward all-gather is pipelined with
    # the column-parallel GEMM it feeds (QKV, MLP up), each reduce-scatter with the
    # row-parallel GEMM whose output it reduces (projection, MLP down). The buffers are shared
    # over NVLink (CUDA IPC), so only a TP group inside one HB domain can use them.
    ub = (s.tp_comm_overlap * s.sequence_parallel).astype(bool) & (s.tp > 1) & shape.inside
    # one layer's forward, each op at its own GEMMs (the MLP's `mlp` times)
    one = np.ones(())
    weights: tuple[FloatArray, ...] = (one, one, mlp, mlp)
    pipelined: FloatArray = np.zeros(())
    for w, k, op in zip(weights, UB_FORWARD_GEMMS, UB_FORWARD_OPS, strict=True):
        pipelined = pipelined + w * hidden_cost_s(gather if op == "gather" else scatter, lt[k], u)
    per_op = pipelined / np.maximum(1.0 + mlp, 1.0)
    forward = np.where(ub, on * pipelined, ops["forward"] * one_op)
    recompute = np.where(ub, ops["recompute"] * per_op, ops["recompute"] * one_op)
    return {
        "forward": np.asarray(forward),
        "recompute": np.asarray(recompute),
        "backward": np.asarray(backward),
    }


# The forward GEMMs a TE userbuffers all-gather (QKV, MLP up) or reduce-scatter (projection,
# MLP down) is pipelined with.
UB_FORWARD_GEMMS = ("fprop_qkv", "fprop_proj", "fprop_mlp_up", "fprop_mlp_down")
UB_FORWARD_OPS = ("gather", "scatter", "gather", "scatter")


def expert_tp_comm_time_s(model: Model, lk: Links, s: StrategyArrays, shape: Shape) -> FloatArray:
    """Exposed routed-expert tensor-parallel time per MoE layer and micro-batch (0 when
    expert_tp = 1): the alltoall dispatcher all-gathers the dispatched token slots over the
    expert_tp ranks and reduce-scatters the experts' output (`comm.expert_tp_message_bytes`),
    in every pass (`comm.expert_tp_ops_per_moe_layer`). They run on the compute stream
    between the all-to-all and the grouped GEMMs (`dispatch_postprocess`,
    `combine_preprocess`), which need their result, so none of them is hidden. The group is
    expert_tp consecutive ranks (`layout.megatron_shapes` `etp`)."""
    message = comm.expert_tp_message_bytes(model, s)
    gather = group_collective_s(lk, shape, message, gather_only=True)
    # the combine's reduce-scatter, in FP32 with an FP32 router
    ratio = comm.expert_tp_combine_byte_ratio(s)
    scatter = group_collective_s(lk, shape, message * ratio, gather_only=True)
    ops = comm.expert_tp_ops_per_moe_layer(s, recomputed_share(model, s))
    return np.asarray((ops["forward"] + ops["recompute"] + ops["backward"]) * (gather + scatter))


def hidden_cost_s(comm_s: FloatArray, compute_s: FloatArray, u: FloatArray | float) -> FloatArray:
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
    pass exposes what its sends take beyond (cp − 1)/cp of its attention compute. The sends
    go round the cp group's ring (`p2p_s`'s `ring`: an oversubscribed spine does not slow
    them, as it does not slow the data-parallel rings)."""
    one = p2p_s(lk, comm.cp_block_bytes(model, s), shape, ring=True)
    steps = comm.cp_steps_per_layer(s, recomputed_share(model, s))
    share = (s.cp - 1) / s.cp
    recompute_attn = np.where(recomputes(s, "core_attn"), lt["attention_forward"], 0.0)
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
    collectives: FloatArray | float = 1.0,
    replica: Shape | None = None,
    shard_ranks: FloatArray | float = 1.0,
) -> dict[str, FloatArray]:
    """Data-parallel communication of the slowest group laid out as `shape`, by when it
    happens (`comm.dp_schedule`: ZeRO 0–3), each pass split into `collectives` equal ones
    (`comm.dp_collectives`: buckets), each paying the group's latency. With hybrid sharding,
    `shape` is the shard group of `shard_ranks` ranks and `replica` the group of the ranks
    holding the same shard: each bucket's reduce-scatter is followed by the all-reduce of the
    rank's 1/`shard_ranks` of it across the replicas (`replica_all_reduce`)."""
    total = grad_bytes + weight_bytes
    on = (shape.x * shape.y > 1) & (total > 0)  # no phantom latency
    n = np.asarray(collectives, dtype=np.float64)
    one_pass = {
        "all_reduce": n * group_collective_s(lk, shape, grad_bytes / n),
        "reduce_scatter": n * group_collective_s(lk, shape, grad_bytes / n, gather_only=True),
        "all_gather": n * group_collective_s(lk, shape, weight_bytes / n, gather_only=True),
    }
    sched = comm.dp_schedule(s)
    out = {
        timing: np.asarray(np.where(on, sum(counts[k] * one_pass[k] for k in one_pass), 0.0))
        for timing, counts in sched.items()
    }
    if replica is not None:
        on_replica = (replica.x * replica.y > 1) & (total > 0)
        shard_bytes = grad_bytes / n / np.asarray(shard_ranks, dtype=np.float64)
        across = n * group_collective_s(lk, replica, shard_bytes)
        for timing, counts in sched.items():
            extra = np.where(on_replica, counts["replica_all_reduce"] * across, 0.0)
            out[timing] = np.asarray(out[timing] + extra)
    # The weight all-gathers at the end (which can hide behind the next step's forward pass)
    # and before each backward pass (exposed where they are not prefetched).
    for timing in ("end", "micro_batch_backward"):
        out[f"{timing}_all_gather"] = np.asarray(
            np.where(on, sched[timing]["all_gather"] * one_pass["all_gather"], 0.0)
        )
    return out
