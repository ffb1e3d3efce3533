"""What one iteration communicates (sizes and counts, no time): the single source for both the
iteration-time model and the traffic matrices.

Megatron-LM's pattern (Shoeybi 2019, Narayanan 2021, Korthikanti 2022):
- TP: per layer and micro-batch, 2 all-reduces of the activation (b·s·h bf16) in the forward
  pass, 2 in the backward pass, 2 more when full recompute reruns the forward; with sequence
  parallelism each all-reduce becomes a reduce-scatter + all-gather of the same buffer, and the
  backward pass all-gathers the sharded inputs of QKV and MLP-up once more (2 all-gathers).
- PP: per micro-batch and stage boundary, the activation forward and its gradient backward:
  each GPU sends its peer b·s·h bf16, or b·s·h/t when sequence parallelism splits it or the
  2021-22 scatter/gather does (`pp_message_bytes`); v× more boundaries with the interleaved
  schedule.
- DP: the gradients of the GPU's stage, by ZeRO stage as `dp_schedule` lists (ZeRO 0: one
  all-reduce; 1: reduce-scatter of gradients then all-gather of the bf16 weights; 2: gradients
  reduce-scattered every micro-batch; 3: weights also gathered every pass); with tied embeddings
  and pp > 1 (or multi-token prediction layers on the last stage), first and last stage
  all-reduce the embedding gradient. MoE: expert gradients are reduced over the
  tp·cp·dp/(etp·ep) expert-data-parallel ranks only. Hybrid sharding (`zero_shard`): all of
  it within each shard group, and every gradient shard all-reduced across the replicas.
- EP (MoE): per MoE layer and micro-batch, all-to-all dispatch and combine forward, their
  gradients backward (DeepSpeed-MoE, GShard), among ep ranks spaced etp apart (tp by
  default); with etp > 1 an all-gather of the dispatched slots and a reduce-scatter of the
  experts' output over the etp ranks (`expert_tp_ops_per_moe_layer`).
- CP (context parallelism, Megatron-Core ring attention): each GPU holds s/cp tokens of every
  sequence; per layer and micro-batch the K/V block of its chunk goes around the cp ring
  (cp − 1 sends forward; backward sends K/V again and the K/V gradients, 2·(cp − 1); a
  recomputed attention runs the forward ring again). Activation messages of TP, PP and EP
  carry s/cp tokens; gradients are reduced over the dp·cp ranks.
"""

from __future__ import annotations

import numpy as np

from railplan.specs import Model
from railplan.specs.arrays import (
    EP_DEEPEP,
    FP8,
    FULL,
    ROUTER_FP32,
    FloatArray,
    StrategyArrays,
    recomputes,
)
from railplan.workload.memory import (
    dense_stage_params,
    expert_stage_params,
    gathered_weight_bytes,
)
from railplan.workload.routing import slot_factor

ACT_BYTES = 2.0  # bf16 activations
FP8_ACT_BYTES = 1.0  # an FP8 activation (Transformer Engine: one scale per tensor, not counted)
#: bytes per hidden element of an MoE token dispatch in FP8: FP8 values with one fp32 scale per
#: 128 (DeepSeek-V3/R1's setting, "FP8 dispatching and BF16 combining", as DeepEP benchmarks
#: both its training and its decode kernels, docs/legacy.md; deep_ep
#: `low_latency_dispatch(use_fp8=True)`); MXFP8's one 8-bit scale per 32 values is the same
FP8_DISPATCH_BYTES = 1.0 + 4.0 / 128.0


def local_tokens(model: Model, s: StrategyArrays) -> FloatArray:
    """Tokens of one micro-batch on one GPU: b·s/cp (context parallelism splits the sequence)."""
    return np.asarray(model.seq * s.micro_batch.astype(float) / s.cp)


def tp_message_bytes(model: Model, s: StrategyArrays) -> FloatArray:
    """The buffer of one TP all-reduce (or all-gather result): b·s·h activations (s/cp)."""
    return np.asarray(ACT_BYTES * local_tokens(model, s) * model.hidden)


def tp_gather_byte_ratio(s: StrategyArrays) -> FloatArray:
    """Bytes of a TP all-gather over its BF16 bytes: in FP8 with sequence parallelism,
    Transformer Engine gathers FP8 copies (the fused norm's FP8 output before QKV and MLP-up,
    again in the backward; the output gradient of the projection and MLP-down, cast on its
    shard: `layernorm_linear.py`, `linear.py`, `base.py: grad_output_preprocess`, v1.11), so 1
    byte per element; the reduce-scatters stay BF16 (TE's `fp8_buf` userbuffers option, which
    reduce-scatters FP8 GEMM outputs, is not modelled)."""
    fp8_sp = (s.precision == FP8) & (s.sequence_parallel > 0)
    return np.asarray(np.where(fp8_sp, FP8_ACT_BYTES / ACT_BYTES, 1.0))


def cp_block_bytes(model: Model, s: StrategyArrays) -> FloatArray:
    """Bytes one GPU sends to its ring successor per cp step: K and V of its b·s/cp tokens, for
    its share of the heads (`Model.attention_widths`: GQA's kv_heads shrink the block; MLA
    sends the up-projected K and V of every head, 192 + 128 wide per head for DeepSeek-V3, as
    Megatron-Core's MLA hands them to Transformer Engine's ring attention)."""
    _, k, v, _ = model.attention_widths
    return np.asarray(ACT_BYTES * local_tokens(model, s) * (k + v) / s.tp)


def cp_steps_per_layer(s: StrategyArrays, rerun: FloatArray | float = 1.0) -> dict[str, FloatArray]:
    """Ring sends per layer and micro-batch, by pass (0 when cp = 1): forward cp − 1 K/V
    blocks; backward cp − 1 K/V blocks and cp − 1 K/V-gradient blocks (the forward's blocks are
    not kept: Megatron-Core docs, context_parallel.rst); recomputed attention (full, or
    selective with `core_attn`) reruns the forward ring, in the `rerun` share of the layers
    recomputed at all (`recomputed_share`)."""
    steps = (s.cp - 1).astype(float)
    return {
        "forward": steps,
        "recompute": np.where(recomputes(s, "core_attn"), steps, 0.0) * rerun,
        "backward": 2.0 * steps,
    }


def tp_ops_per_layer(
    s: StrategyArrays,
    moe_share: float = 0.0,
    rerun: FloatArray | float = 1.0,
    shared_experts: int = 0,
) -> dict[str, FloatArray]:
    """TP collectives on the tp group per layer and micro-batch, in all-reduce equivalents by
    pass, the extra all-gathers of sequence parallelism in the backward pass, and `mlp`: the
    MLP's share of them beside the attention's one. A dense layer runs one for attention and
    one for its MLP; an MoE layer (`moe_share` of the layers) one for attention and one for its
    shared experts if it has any (`shared_experts`; Megatron-Core's SharedExpertMLP gathers and
    reduce-scatters over tp): its routed experts' collectives run on the expert_tp group
    (`expert_tp_ops_per_moe_layer`). Full recompute reruns all of the forward's; selective
    recompute of the dense MLP (`mlp`), of the MoE block (`moe`) or of the shared experts
    (`shared_experts`) reruns the MLP's; either in the `rerun` share of the layers recomputed
    at all (`recomputed_share`)."""
    tp_on = (s.tp > 1).astype(float)
    has_shared = 1.0 if shared_experts else 0.0
    mlp = (1.0 - moe_share) + moe_share * has_shared
    moe_rerun = recomputes(s, "moe") | recomputes(s, "shared_experts") if shared_experts else False
    mlp_rerun = (1.0 - moe_share) * recomputes(s, "mlp") + moe_share * has_shared * moe_rerun
    per_pass = (1.0 + mlp) * tp_on
    return {
        "forward": np.asarray(per_pass),
        "recompute": np.where(s.recompute == FULL, 1.0 + mlp, mlp_rerun) * tp_on * rerun,
        "backward": np.asarray(per_pass),
        "sp_regather": per_pass * s.sequence_parallel.astype(float),
        "mlp": np.asarray(mlp * tp_on),
    }


def expert_tp_message_bytes(model: Model, s: StrategyArrays) -> FloatArray:
    """The all-gather result of the routed experts' tensor parallelism on one GPU: the token
    slots its expert_tp group dispatched to it (top_k·slot_factor per token, etp/tp of its tp
    group's b·s/cp tokens), h bf16 values each (`token_dispatcher.py` `dispatch_postprocess`)."""
    slots = model.top_k * slot_factor(model, s.ep) * s.etp / s.tp
    return np.asarray(tp_message_bytes(model, s) * slots)


def expert_tp_combine_byte_ratio(s: StrategyArrays) -> FloatArray:
    """Bytes of the routed experts' combine-side reduce-scatter (and of its gradient's
    all-gather) over a BF16 one: 2 with an FP32 router, whose dtype it takes
    (`token_dispatcher.py` `combine_preprocess`, core_v0.12.1: "the precision of TP
    reduce_scatter should be the same as the router_dtype"), else 1 (and with DeepEP's flex
    dispatcher, for which no source states it)."""
    fp32 = (s.router_dtype == ROUTER_FP32) & (s.ep_dispatch != EP_DEEPEP)
    return np.asarray(np.where(fp32, 2.0, 1.0))


def expert_tp_ops_per_moe_layer(
    s: StrategyArrays, rerun: FloatArray | float = 1.0
) -> dict[str, FloatArray]:
    """Routed-expert TP collectives per MoE layer and micro-batch (0 when expert_tp = 1), in
    all-reduce equivalents: forward the all-gather of the dispatched slots and the
    reduce-scatter of the experts' output, backward their gradients (a reduce-scatter and an
    all-gather), and the forward's again when the MoE block is recomputed (full, or selective
    with `moe`; in the `rerun` share of the layers recomputed at all)."""
    on = (s.etp > 1).astype(float)
    return {
        "forward": np.asarray(on),
        "recompute": np.where(recomputes(s, "moe"), 1.0, 0.0) * on * rerun,
        "backward": np.asarray(on),
    }


def pp_message_bytes(model: Model, s: StrategyArrays) -> FloatArray:
    """Bytes one GPU sends to its next-stage peer per micro-batch and boundary, one way: 1/tp of
    the stage's activation with sequence parallelism (already split) or Megatron-LM 2021-22's
    scatter/gather (`Strategy.p2p_scatter_gather`), the whole of it otherwise (Megatron-Core's
    `get_tensor_shapes`: the sequence is divided by tp only with sequence parallelism)."""
    split = (s.sequence_parallel > 0) | (s.p2p_scatter_gather > 0)
    return np.asarray(tp_message_bytes(model, s) / np.where(split, s.tp, 1))


def pp_boundaries_per_micro_batch(s: StrategyArrays) -> FloatArray:
    """Stage boundaries a micro-batch crosses between GPUs, per direction, seen from one
    pipeline (DualPipeV's turn at the last rank stays on that GPU)."""
    crossings = (s.pp - 1) * s.interleave + (s.interleave - 1)
    return np.asarray(np.where(s.dualpipev, crossings - 1, crossings), dtype=float)


def dp_gradient_bytes(
    model: Model, s: StrategyArrays, embedding: bool = True, layers: FloatArray | None = None
) -> FloatArray:
    """Non-expert gradient buffer each GPU reduces over its data-parallel group per iteration
    (all gradients for a dense model); `embedding`: first/last stage (the critical one);
    `layers`: the stage's layers (default: the fullest stage's)."""
    return np.asarray(dense_stage_params(model, s, embedding, layers) * s.grad_reduce_bytes)


DP_TIMINGS = ("end", "micro_batch_forward", "micro_batch_backward")


def dp_schedule(s: StrategyArrays) -> dict[str, dict[str, FloatArray]]:
    """Data-parallel collectives by when they run — `end` (once per iteration),
    `micro_batch_forward` / `micro_batch_backward` (once per micro-batch) — and kind: gradient
    `all_reduce`, gradient `reduce_scatter`, weight `all_gather`; counts per occurrence.

    ZeRO 0: one all-reduce at the end; 1 (distributed optimizer): reduce-scatter + all-gather
    at the end; 2: gradients reduce-scattered after every backward pass (DeepSpeed), weights
    gathered at the end; 3: weights gathered before every forward and backward pass, gradients
    reduce-scattered after every backward pass (Rajbhandari et al. 2020: 3Ψ per step). A
    recomputed forward runs under the backward's gather: FSDP wraps each transformer block with
    the activation checkpoint inside the unit (Composer's `prepare_fsdp_module`, torchtitan's
    `apply_ac` before `fully_shard`), so recompute adds no gather. With `zero_schedule` = step,
    ZeRO 2/3 keep weights and gradients whole across the micro-batches and communicate once per
    step like ZeRO 1 (Megatron-Core's distributed optimizer with pipelines).

    Hybrid sharding (`zero_shard`, replicas > 1): the reduce-scatters and all-gathers run within
    the shard group, and every gradient reduce-scatter is followed by a `replica_all_reduce` of
    the rank's shard across the replicas (PyTorch FSDP `HYBRID_SHARD`; Megatron-Core's
    `start_grad_sync` with several distributed-optimizer instances)."""
    z = s.zero_sharding
    zero, one = np.zeros(z.shape), np.ones(z.shape)
    hybrid = s.replicas > 1
    out: dict[str, dict[str, FloatArray]] = {
        "end": {
            "all_reduce": np.where(z == 0, one, zero),
            "reduce_scatter": np.where(z == 1, one, zero),
            "all_gather": np.where((z == 1) | (z == 2), one, zero),
        },
        "micro_batch_forward": {
            "all_reduce": zero,
            "reduce_scatter": zero,
            "all_gather": np.where(z == 3, one, zero),
        },
        "micro_batch_backward": {
            "all_reduce": zero,
            "reduce_scatter": np.where(z >= 2, one, zero),
            "all_gather": np.where(z == 3, one, zero),
        },
    }
    for counts in out.values():
        counts["replica_all_reduce"] = (
            np.where(hybrid, counts["reduce_scatter"], 0.0) if bool(np.any(hybrid)) else zero
        )
    return out


# Megatron-Core's DistributedDataParallelConfig.bucket_size default: max(40,000,000,
# 1,000,000 × dp_size) parameters per bucket ("larger DP sizes need larger buckets to ensure
# collectives do not become latency-bound", megatron/core/distributed/
# distributed_data_parallel_config.py).
MCORE_MIN_BUCKET_PARAMS = 40e6
MCORE_BUCKET_PARAMS_PER_RANK = 1e6


def dp_collectives(
    s: StrategyArrays, params: FloatArray, group_ranks: FloatArray, layers: FloatArray
) -> FloatArray:
    """How many collectives one data-parallel reduction (or weight gather) of `params`
    parameters is split into, each paying the group's latency. Overlapped (the reduction runs
    behind the backward pass as gradients become ready): Megatron-Core's buckets of
    max(40M, 1M × group ranks) parameters; ZeRO-3 gathering every micro-batch (FSDP,
    DeepSpeed): one per layer (FSDP wraps each transformer block, llm-foundry's and
    torchtitan's default). Not overlapped: one collective over the whole buffer (Megatron's
    2021-22 local DDP)."""
    bucket = np.maximum(MCORE_MIN_BUCKET_PARAMS, MCORE_BUCKET_PARAMS_PER_RANK * group_ranks)
    buckets = np.maximum(np.ceil(params / bucket), 1.0)
    per_layer = (s.zero_sharding == 3) & (s.zero_schedule == 0)
    split = np.where(per_layer, np.maximum(layers, 1.0), buckets)
    return np.asarray(np.where(s.overlap_dp.astype(bool), split, 1.0), dtype=np.float64)


def dp_iteration_bytes(
    s: StrategyArrays, grad_bytes: FloatArray, weight_bytes: FloatArray, expert: bool = False
) -> dict[str, FloatArray]:
    """Bytes one GPU sends per iteration, in all-gather passes of the buffer (a reduce-scatter
    or all-gather is one pass, an all-reduce two) — what the traffic matrix spreads over a
    group's ring or hierarchical edges: `shard` over the group ZeRO shards over (the whole
    data-parallel group without hybrid sharding), `replica` over the replicas of one shard
    (the all-reduce of the rank's 1/N of the gradients; 0 without hybrid sharding). `expert`:
    the buffers are the expert states (sharded over `expert_shard_ranks`)."""
    sched = dp_schedule(s)
    m = s.micro_batches.astype(float)
    shard = np.asarray(s.expert_shard_ranks if expert else s.shard_ranks, dtype=np.float64)
    out = {"shard": np.zeros(np.shape(m)), "replica": np.zeros(np.shape(m))}
    for timing in DP_TIMINGS:
        c = sched[timing]
        times = 1.0 if timing == "end" else m
        passes_grad = 2.0 * c["all_reduce"] + c["reduce_scatter"]
        out["shard"] = out["shard"] + times * (
            passes_grad * grad_bytes + c["all_gather"] * weight_bytes
        )
        out["replica"] = out["replica"] + times * 2.0 * c["replica_all_reduce"] * grad_bytes / shard
    return {k: np.asarray(v) for k, v in out.items()}


def dp_weight_gather_bytes(
    model: Model, s: StrategyArrays, embedding: bool = True, layers: FloatArray | None = None
) -> FloatArray:
    """With a distributed optimizer (ZeRO ≥ 1): the non-expert weights all-gathered over the
    data-parallel group (BF16; the GEMM weights in FP8 with `fp8_param_gather`:
    `memory.gathered_weight_bytes`, of the same stage: its `layers`, and the head's
    projections where it holds the `embedding`)."""
    params = dense_stage_params(model, s, embedding, layers)
    gathered = gathered_weight_bytes(model, s, params, layers=layers, head=embedding)
    return np.asarray(np.where(s.zero >= 1, gathered, 0.0))


def dp_expert_weight_gather_bytes(
    model: Model, s: StrategyArrays, layers: FloatArray | None = None
) -> FloatArray:
    """With ZeRO ≥ 1: the expert weights all-gathered over the expert-data-parallel group."""
    params = expert_stage_params(model, s, layers)
    gathered = gathered_weight_bytes(model, s, params, expert=True, layers=layers)
    return np.asarray(np.where(s.zero >= 1, gathered, 0.0))


def embedding_gradient_bytes(model: Model, s: StrategyArrays) -> FloatArray:
    """Tied embeddings with pp > 1: first and last stage all-reduce this many bytes (none with
    DualPipeV, whose rank 0 holds both ends); likewise the input embedding the last stage's
    multi-token prediction modules read (Megatron-Core `finalize_model_grads` all-reduces it
    over the embedding group when `mtp_num_layers` is set)."""
    tied = model.tied_embeddings or model.mtp_layers > 0
    size = model.vocab * model.hidden / s.tp * s.grad_reduce_bytes
    return np.asarray(np.where((s.pp > 1) & tied & ~s.dualpipev, size, 0.0))


def ep_pair_bytes(model: Model, s: StrategyArrays) -> FloatArray:
    """Bytes one GPU sends to each other expert-parallel rank in one all-to-all: its tokens
    (`ep_token_bytes`) × top_k·capacity slots each, / ep."""
    slots = model.top_k * slot_factor(model, s.ep)
    return np.asarray(ep_token_bytes(model, s) * slots / s.ep)


def ep_token_bytes(model: Model, s: StrategyArrays) -> FloatArray:
    """Bytes of one copy of the tokens one GPU dispatches (DeepEP-style, `ep_dispatch` deepep):
    its b·s/cp tokens, split over the tp ranks, h bf16 values each."""
    return np.asarray(local_tokens(model, s) / s.tp * model.hidden * ACT_BYTES)


def ep_dispatch_byte_ratio(s: StrategyArrays) -> FloatArray:
    """Bytes of the all-to-alls that carry tokens to the experts (the forward dispatch, its
    recompute, and the backward combine's gradient for the down-projection), relative to
    BF16: FP8 with `fp8_dispatch` (DeepSeek-V3 §3.3.2: the activation before the MoE
    up-projection and the activation gradient before the down-projection are quantized and
    dispatched in FP8, both combines stay BF16), else 1. The other half of
    `ep_all_to_alls_per_moe_layer` (the combine and the dispatch's gradient) is BF16."""
    return np.asarray(np.where(s.fp8_dispatched, FP8_DISPATCH_BYTES / ACT_BYTES, 1.0))


def ep_all_to_alls_per_moe_layer(
    s: StrategyArrays, rerun: FloatArray | float = 1.0
) -> dict[str, FloatArray]:
    """All-to-alls per MoE layer and micro-batch: dispatch + combine forward, their gradients
    backward, and the forward's again when the MoE block is recomputed (full, or selective
    with `moe`; in the `rerun` share of the layers recomputed at all) (0 when ep = 1). Half of
    each pass's all-to-alls carry tokens to the experts (`ep_dispatch_byte_ratio`)."""
    on = (s.ep > 1).astype(float)
    return {
        "forward": 2.0 * on,
        "recompute": np.where(recomputes(s, "moe"), 2.0, 0.0) * on * rerun,
        "backward": 2.0 * on,
    }


def dp_expert_gradient_bytes(
    model: Model, s: StrategyArrays, layers: FloatArray | None = None
) -> FloatArray:
    """Expert gradients each GPU reduces over its expert-data-parallel group
    (`StrategyArrays.expert_grad_ranks`)."""
    return np.asarray(expert_stage_params(model, s, layers) * s.grad_reduce_bytes)
