"""Memory per GPU: weights, gradients, optimizer states (ZeRO), activations, in-flight
micro-batches of the pipeline schedule.

Activation bytes per layer follow Korthikanti et al. 2022 §4 (sbh·(34 + 5as/h) for GPT with
tp = 1), generalized to GQA, other MLP widths and gated MLPs by counting the same tensors:
- kept whole on every tensor-parallel rank (split by tp only with sequence parallelism):
  10·sbh = two layer-norm inputs (4), attention input + dropout mask (3), MLP input + mask (3);
- split by tp: Q and context output 4·sbh, K and V 4·sb·kv_dim (MLA: its Q, K, V and context
  widths, Model.attention_widths), MLP 4·sb·ffn (non-gated:
  up output + activation output) or 6·sb·ffn (gated: gate, up, product), and the attention
  score tensors 5·a·s²·b (softmax output 2, dropout mask 1, dropout output 2).
A model trained without dropout (`Model.dropout` false) keeps no masks: 8·sbh replicated, and
2·a·s²·b of scores (the softmax output, which the context GEMM reads directly).
An MoE layer keeps its experts' activations per routed token slot (top_k·slot_factor slots of
expert_ffn, plus the shared experts') and, kept like the MLP input, the routed copies of the
token that the experts' first grouped GEMM reads (2·h per slot): Megatron-Core's grouped
linear layers save their input for the weight gradient as every linear does. An MLA layer
also keeps its query and key-value latents (q_lora_rank + kv_lora_rank per token): each latent
norm's input and its output, the up-projection's input (4 bytes; 3 in FP8), split by tp with
sequence parallelism as Megatron-Core keeps them.
Selective recompute drops the 5·a·s²·b term; full recompute keeps only each layer's input
(2·sbh, split by tp with sequence parallelism) plus one layer's activations while it is
recomputed. The 1F1B schedule keeps `pp` micro-batches in flight on the first stage;
the interleaved schedule multiplies that by 1 + (pp−1)/(pp·v) (Korthikanti §4.2.3) as long as
the step has that many chunk passes to run: with m micro-batches it never holds more than
all m of them (Megatron-Core caps its warm-up at the step's m·v chunk forwards).

Fused (flash) attention never materializes the score tensors: it keeps only the softmax
log-sum-exp per query and head (fp32, 4·a·s·b bytes, split by tp) and recomputes the scores
blockwise in the backward pass (Dao et al. 2022, FlashAttention §3.1; FlashAttention-2 §3.1).

FP8 (Transformer Engine): the inputs of the FP8 GEMMs are saved for backward in FP8, 1 byte
instead of 2 (QKV input and MLP input in the 10·sbh, the context before the output projection,
and the MLP-down input); each FP8 GEMM's weight also has a cached FP8 copy and its FP8
transpose (TE's fp8 weight caching over micro-batches), 2 bytes per GEMM parameter beside the
BF16 weight and the FP32 master copy (docs/model.md cites the TE documentation).

ZeRO-3 / FSDP gathers each layer's full weights before using it and frees them after; with
prefetching the next layer's gather overlaps the current layer, so two layers' full BF16 weights
are live at once, and the backward pass holds one layer's full gradient until it is
reduce-scattered (PyTorch FSDP, Zhao et al. 2023 §3.3-3.4: at most two in-flight all-gathers
by the rate limiter; DeepSpeed ZeRO-3 prefetches the same way).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from railplan.specs import GPU, Model
from railplan.specs.arrays import (
    FP8,
    FULL,
    ROUTER_FP32,
    STAGE_KEYS,
    UNFUSED,
    FloatArray,
    IntArray,
    StrategyArrays,
    compared_stages,
    recomputed_share,
    recomputes,
    stage_layers,
    stage_ranks,
)
from railplan.workload import elementwise
from railplan.workload.routing import slot_factor

GIB = float(1 << 30)
WEIGHT_BYTES = 2.0  # bf16 weights
OPTIMIZER_BYTES = 12.0  # fp32 master weights + Adam m and v
# Adam state bytes per parameter by Strategy.optimizer_state code (docs/model.md "Optimizer
# state"): fp32 master + fp32 m, v (Megatron distributed optimizer); fp32 m, v + the 16-bit
# remainder of the fp32 master (Apex DistributedFusedAdam `store_param_remainders`); bf16 m, v
# and no master (NeMo `distributed_fused_adam` with `optim.dtype: bf16`); fp32 master + bf16 m, v
# (Megatron-Core's precision-aware optimizer with --exp-avg-dtype / --exp-avg-sq-dtype bf16).
OPTIMIZER_STATE_BYTES = np.array([OPTIMIZER_BYTES, 4.0 + 4.0 + 2.0, 2.0 + 2.0, 4.0 + 2.0 + 2.0])
# CUDA context, NCCL buffers and allocator fragmentation: PyTorch's CUDA context alone is ~0.5-1
# GiB on A100/H100; Megatron runs reserve ~1-2 GiB more for NCCL and cuBLAS workspaces.
RESERVED_BYTES = 2.0 * GIB
FP8_WEIGHT_COPY_BYTES = 2.0  # TE: cached fp8 weight + its fp8 transpose, per GEMM parameter
FP8_PARAM_BYTES = 1.0  # an FP8 weight as fp8_param_gather stores and gathers it
SOFTMAX_STATS_BYTES = 4.0  # flash attention: fp32 log-sum-exp per query and head
ZERO3_GATHERED_LAYERS = 2.0  # FSDP/ZeRO-3: the layer in use + the prefetched one


@dataclass(frozen=True)
class Memory:
    """Bytes per GPU on the most loaded pipeline stage."""

    weights_bytes: FloatArray
    gradients_bytes: FloatArray
    optimizer_bytes: FloatArray
    activations_bytes: FloatArray
    reserved_bytes: FloatArray
    total_bytes: FloatArray
    gathered_bytes: FloatArray  # ZeRO-3: full weights of the gathered layers, one layer's grads
    #: the pipeline rank whose memory this is (0 = the first stage)
    peak_rank: FloatArray = field(default_factory=lambda: np.zeros(()))

    def fits(self, gpu: GPU) -> FloatArray:
        return np.asarray(self.total_bytes <= gpu.memory_gib * GIB)


def without_recompute(s: StrategyArrays) -> StrategyArrays:
    """`s` with nothing recomputed: what a layer keeps when its forward is not rerun."""
    none = np.zeros_like(s.recompute)
    return replace(s, recompute=none, recompute_num_layers=np.zeros_like(none))


def layer_activation_bytes(
    model: Model,
    s: StrategyArrays,
    layers: FloatArray | None = None,
    moe_share: FloatArray | None = None,
) -> FloatArray:
    """Activation bytes one layer keeps for one micro-batch on one GPU, on average over a
    stage of `layers` layers (block recompute: `recomputed_share`; default the mean stage) of
    which a `moe_share` are MoE layers (default the model's, moe_layers/layers)."""
    b, t = s.micro_batch.astype(np.float64), s.tp.astype(np.float64)
    seq, h = float(model.seq), float(model.hidden)
    sbh = seq * b * h
    # FP8 saves the QKV and MLP inputs, the context and the MLP-down input in 1 byte.
    fp8 = (s.precision == FP8).astype(np.float64)
    masks = 0.0 if model.dropout else 2.0  # the two hidden-dropout masks (1 byte each)
    # Selective recompute of the norms drops their BF16 outputs, the next GEMMs' inputs (in
    # FP8 those GEMMs keep their own FP8 copies, which it does not free).
    norms = 4.0 * (1.0 - fp8) * recomputes(s, "layernorm")
    replicated = (10.0 - masks - 2.0 * fp8 - norms) * sbh
    mlp_bytes = (6.0 if model.gated_mlp else 4.0) - fp8
    mlp_per_token = mlp_bytes * model.ffn_ * (1.0 - recomputes(s, "mlp"))
    if model.moe_layers:
        # Expert layers keep top_k·slot_factor slots of expert_ffn activations per token, and
        # the routed token copies their first grouped GEMM reads (its input, saved for the
        # weight gradient like any linear's: 2 bytes per hidden element, 1 in FP8). With
        # sequence parallelism a GPU dispatches the slots of its 1/tp of the tokens and the
        # dispatcher all-gathers those of its expert_tp group (`dispatch_postprocess`), so it
        # keeps etp/tp of them (all of them at the default etp = tp); without, every tp rank
        # holds every token. Recomputing the activation drops
        # its BF16 output (2 bytes per slot element; none in FP8, as for the norms), the
        # shared experts or the whole block all of theirs.
        slots = model.top_k * slot_factor(model, s.ep)
        per_slot = mlp_bytes * model.expert_ffn_
        act_out = 2.0 * (1.0 - fp8) * model.expert_ffn_ * recomputes(s, "moe_act")
        shared = per_slot * model.shared_experts * (1.0 - recomputes(s, "shared_experts"))
        block = 1.0 - recomputes(s, "moe")
        expert = block * ((per_slot - act_out) * slots + shared)
        share = model.moe_layers / model.layers if moe_share is None else moe_share
        mlp_per_token = (1 - share) * mlp_per_token + share * expert
        routed_copies = block * share * slots * (2.0 - fp8) * sbh
        # `whole` below divides the replicated tensors by tp with sequence parallelism
        routed_copies = np.where(s.sequence_parallel > 0, routed_copies * s.etp, routed_copies)
        replicated = replicated + routed_copies
        # What an MoE layer keeps of its MLP input (the pre-MLP norm's BF16 output, a shard
        # with sequence parallelism), in place of the dense layer's slot that `replicated`
        # counts ((2 − fp8) bytes, less what a recomputed norm frees): Megatron-Core's router
        # and shared experts each save their own input for the backward pass.
        # - The router: a BF16 one (`router_dtype` bf16) saves the norm's output itself (2
        #   bytes, in FP8 runs too: the gate is no FP8 GEMM), which a recomputed norm frees; an
        #   FP32 one an FP32 copy (4 bytes, which it does not free), and a copy of its weight
        #   (experts × hidden, whole on every rank, per micro-batch: `router_weight` below).
        # - The shared experts' first GEMM: in BF16 the norm's output itself (the router's very
        #   tensor, when that is BF16), in FP8 its own FP8 cast (1 byte); overlapped with the
        #   all-to-alls (`shared_expert_overlap`) under sequence parallelism, the whole
        #   sequence it gathered itself (tp shards, in BF16 or its FP8 cast); recomputed
        #   (`shared_experts`), only its checkpoint's input, the norm's output.
        # - A recomputed MoE block (`moe`) keeps only its checkpoint's input, the norm's output.
        # (the search's hot path: terms constant over the strategies skipped where zero)
        fp32_router = (s.router_dtype == ROUTER_FP32).astype(np.float64)
        any_fp32, any_fp8 = bool(np.any(fp32_router)), bool(np.any(fp8))
        overlapped: FloatArray | float = 0.0
        if model.shared_experts and bool(np.any(s.shared_expert_overlap)):
            gathers = (s.shared_expert_overlap > 0) & (s.sequence_parallel > 0) & (s.tp > 1)
            overlapped = gathers.astype(np.float64)
        if any_fp32 or any_fp8 or bool(np.any(overlapped)):
            frees = recomputes(s, "layernorm").astype(np.float64)
            kept_shard = 2.0 * (1.0 - frees)  # the norm's BF16 output, if anything keeps it
            shard_kept: FloatArray | float = 1.0
            shared_copy: FloatArray | float = 0.0
            if model.shared_experts:
                rerun_shared = recomputes(s, "shared_experts").astype(np.float64)
                # the BF16 shard is kept by a BF16 router, or by shared experts on their own
                # input (BF16, or recomputed)
                own_input = np.maximum(1.0 - fp8, rerun_shared)
                if any_fp32:
                    shard_kept = np.maximum(1.0 - fp32_router, (1.0 - overlapped) * own_input)
                fp8_copy = fp8 * (1.0 - rerun_shared)
                shared_copy = np.where(overlapped > 0, (2.0 - fp8) * t, fp8_copy)
            elif any_fp32:
                shard_kept = 1.0 - fp32_router
            kept = 4.0 * fp32_router + shard_kept * kept_shard + shared_copy
            slot = (2.0 - fp8) - 2.0 * (1.0 - fp8) * frees
            kept = block * kept + (1.0 - block) * kept_shard
            replicated = replicated + share * (kept - slot) * sbh
        # per micro-batch, not per token; times cp since the stage's activations are divided by it
        router_weight = block * share * fp32_router * 4.0 * model.experts * h * s.cp
    if model.mla:
        # MLA's latents (query and key-value), split by tp only with sequence parallelism as
        # Megatron-Core keeps them ([s/tp, b, rank]): each latent norm's input (2 bytes) and
        # its output, the up-projection's input (1 byte in FP8), which recomputing
        # `mla_up_proj` drops with the rest of the up-projections it reruns (the norms are
        # fused into them: `CheckpointWithoutOutput` keeps only the latents it starts from).
        latents = elementwise.latent_width(model)
        norm_out = (2.0 - fp8) * (1.0 - recomputes(s, "mla_up_proj"))
        replicated = replicated + (2.0 + norm_out) * latents * seq * b
    q, k, v, context = model.attention_widths
    # MLA's up-projections recomputed: Q, K and V (the attention core's inputs) are dropped.
    qkv = 2.0 * (q + k + v) * (1.0 - recomputes(s, "mla_up_proj"))
    split = seq * b * (qkv + (2.0 - fp8) * context + mlp_per_token)
    scores = np.where(
        s.attention != UNFUSED,
        SOFTMAX_STATS_BYTES * model.heads * seq * b,
        (5.0 if model.dropout else 2.0) * model.heads * seq * seq * b,
    )
    sp = s.sequence_parallel.astype(bool)
    whole = np.where(sp, replicated / t, replicated)
    # Selective recompute reruns the attention core (unfused: the score tensors; flash: the
    # fused kernel, Megatron-Core's checkpointed core attention), keeping neither.
    stored = whole + (split + np.where(recomputes(s, "core_attn"), 0.0, scores)) / t
    if model.moe_layers:
        stored = stored + router_weight
    full: FloatArray = np.asarray(np.where(sp, 2.0 * sbh / t, 2.0 * sbh))  # the layer's input
    rerun = recomputed_share(model, s, layers)
    if bool(np.any(rerun != 1.0)):
        # Block recompute of N layers per chunk: the other layers keep everything.
        kept = layer_activation_bytes(model, without_recompute(s), moe_share=moe_share)
        full = np.asarray(rerun * full + (1.0 - rerun) * kept)
    return np.asarray(np.where(s.recompute == FULL, full, stored))


def in_flight_stage_passes(s: StrategyArrays, rank: int | IntArray) -> FloatArray:
    """Micro-batches of its whole stage whose activations pipeline rank `rank` holds at its
    peak, in units of the stage's layers × one micro-batch (module doc): its warm-up chunk
    forwards (`StrategyArrays.warmup_chunks`) and one more before its first backward, each
    chunk 1/v of the stage, but never more than all m·v chunks of the step."""
    v = s.interleave.astype(np.float64)
    chunks = np.minimum(s.warmup_chunks(rank) + 1.0, s.micro_batches * v)
    return np.asarray(chunks / v)


def _stage_moe_share(st: dict[str, FloatArray], key: str) -> FloatArray:
    """The MoE share of stage `key`'s layers (`stage_layers`: its MoE layers over its layers)."""
    return np.asarray(st[key + "_moe"] / np.maximum(st[key], 1.0))


def per_layer_by_stage(
    model: Model, s: StrategyArrays, st: dict[str, FloatArray]
) -> dict[str, FloatArray]:
    """`layer_activation_bytes` of the stages of `st` (`stage_layers`) that memory compares
    (`compared_stages`), each at its own share of MoE layers and, with block recompute, its
    own recomputed share; one figure for all where neither differs (a dense model without
    block recompute)."""
    keys = compared_stages(st)
    if not model.moe_layers and not bool(np.any(s.recompute_num_layers > 0)):
        one = layer_activation_bytes(model, s)
        return dict.fromkeys(keys, one)
    return {k: layer_activation_bytes(model, s, st[k], _stage_moe_share(st, k)) for k in keys}


def stage_activation_bytes(
    model: Model, s: StrategyArrays, st: dict[str, FloatArray] | None = None
) -> dict[str, FloatArray]:
    """Activation bytes of the stages memory compares (`compared_stages`: the first, the
    fullest middle one, rank 1, the middle ones with the most and the fewest MoE layers and
    the last), each with the micro-batches it holds in flight at its peak
    (`in_flight_stage_passes`), on one GPU before context parallelism divides them: the
    first stage also keeps each in-flight micro-batch's embedding dropout mask, the stage
    with the LM head one micro-batch's logits (and, with a deferred LM-head weight gradient,
    its buffers: `deferred_wgrad_bytes`); with
    DualPipeV every rank holds rank 0's chunk passes and rank 0, which runs the LM head, the
    logits; with pp = 1 the one stage keeps both ends'. Full recompute adds one layer's
    complete activations while it is recomputed (an MoE layer's on a stage with any); the loss
    frees the logits before the first layer's backward starts, so the stage with the head
    holds the larger of the two, not both."""
    st = stage_layers(model, s) if st is None else st
    per_layer = per_layer_by_stage(model, s, st)
    full = s.recompute == FULL
    kept: dict[str, FloatArray] = {}
    rerun: dict[str, FloatArray] = {}
    ranks = stage_ranks(st, s)
    for key in per_layer:
        rank = ranks[key]
        kept[key] = np.asarray(per_layer[key] * st[key] * in_flight_stage_passes(s, rank))
        rerun[key] = np.zeros(())
        if bool(np.any(full)):
            heaviest = np.where(st[key + "_moe"] > 0, 1.0, 0.0)
            one = layer_activation_bytes(model, without_recompute(s), moe_share=heaviest)
            rerun[key] = np.asarray(np.where(full & (st[key] > 0), one, 0.0))
    # The embedding's dropout mask of each in-flight micro-batch (first stage): s·b·h bytes
    # (/tp with SP), none without dropout; its output is the first layer's input, counted
    # there. DualPipeV's rank 0 holds 2·pp chunk-0 micro-batches at its peak (2·pp − 1
    # warm-up forwards and the merged pair's).
    in_flight = np.minimum(s.pp, s.micro_batches).astype(np.float64)
    dualpipev = s.dualpipev
    any_dualpipev = bool(np.any(dualpipev))
    if any_dualpipev:
        in_flight = np.where(dualpipev, 2.0 * s.pp, in_flight)
    b, t = s.micro_batch.astype(np.float64), s.tp.astype(np.float64)
    mask = 1.0 if model.dropout else 0.0
    embed = (
        mask * model.seq * b * model.hidden * np.where(s.sequence_parallel.astype(bool), 1 / t, 1)
    )
    logits = logits_bytes(model, s)
    deferred: FloatArray = np.zeros(())
    if bool(np.any(s.deferred_wgrad_micro_batches > 0)):
        deferred = deferred_wgrad_bytes(model, s)
    single = s.pp <= 1
    head_first = s.head_rank == 0

    def head(key: str) -> FloatArray:
        return np.asarray(np.maximum(logits, rerun[key]) + deferred)

    first = kept["first"] + embed * in_flight + np.where(head_first, head("first"), rerun["first"])
    last = np.where(head_first, 0.0, kept["last"] + head("last"))
    if any_dualpipev:  # every rank holds rank 0's chunk passes
        v_shape = per_layer["last"] * st["last"] * in_flight_stage_passes(s, 0)
        last = np.where(dualpipev, v_shape + rerun["last"], last)
    middles = {
        k: np.asarray(np.where(st[k] > 0, kept[k] + rerun[k], 0.0))
        for k in per_layer
        if k not in ("first", "last")
    }
    return (
        {"first": np.asarray(first)} | middles | {"last": np.asarray(np.where(single, first, last))}
    )


def logits_bytes(model: Model, s: StrategyArrays) -> FloatArray:
    """Last stage: the logits one micro-batch's loss keeps for its backward, split by tp over
    the vocab (fp32 softmax, or the bf16 logits for `xentropy` and `te`:
    `elementwise.cross_entropy_kept_bytes`)."""
    kept = elementwise.cross_entropy_kept_bytes(s)
    heads = 1 + model.mtp_layers  # each multi-token prediction module's loss keeps its own
    return np.asarray(
        heads * kept * model.seq * s.micro_batch * model.vocab / s.tp, dtype=np.float64
    )


def deferred_wgrad_bytes(model: Model, s: StrategyArrays) -> FloatArray:
    """Last stage, `defer_embedding_wgrad`: what Megatron-Core keeps per deferred micro-batch
    until the flush (`embedding_activation_buffer`, `grad_output_buffer`): the output layer's
    BF16 input (s·b·h, split by tp with sequence parallelism) and its BF16 output gradient
    (s·b·V/tp), for each of the k deferred micro-batches."""
    b, t = s.micro_batch.astype(np.float64), s.tp.astype(np.float64)
    tokens = model.seq * b
    inputs = WEIGHT_BYTES * tokens * model.hidden / np.where(s.sequence_parallel > 0, t, 1.0)
    grads = WEIGHT_BYTES * tokens * model.vocab / t
    return np.asarray(s.deferred_wgrad_micro_batches * (inputs + grads))


def dense_stage_params(
    model: Model,
    s: StrategyArrays,
    embedding: bool = True,
    layers: FloatArray | None = None,
    moe: FloatArray | None = None,
    ends: FloatArray | None = None,
) -> FloatArray:
    """Non-expert parameters one GPU of a stage holds: its layers' attention, norms, dense MLPs
    and routers, plus (first and last stage, `embedding`) the vocabulary matrix, split by tp.
    `layers`: the stage's layers (default: the fullest stage's), `moe` of them MoE layers
    (default their moe_layers/layers share); `ends`: the stage's own vocabulary and MTP
    parameters (`end_params`) instead of both ends' (`embedding`)."""
    layers, moe = _stage_counts(model, s, layers, moe)
    # an MoE layer swaps its dense MLP for the router and the shared experts
    moe_extra = (
        model.hidden * model.experts
        + model.shared_experts * model.expert_params()
        - model.mlp_params_dense()
    )
    own = layers * model.layer_params() + (moe * moe_extra if model.moe_layers else 0.0)
    if ends is None:  # the heavier end stage's (`end_params`), if `embedding`
        end = end_params(model, s)
        ends = np.maximum(end["first"], end["last"]) * embedding
    return np.asarray((own + ends) / s.tp, dtype=np.float64)


def _stage_counts(
    model: Model, s: StrategyArrays, layers: FloatArray | None, moe: FloatArray | None
) -> tuple[FloatArray, FloatArray]:
    """A stage's layers (default: the fullest stage's) and its MoE layers (default: their
    moe_layers/layers share)."""
    layers = stage_layers(model, s)["max"] if layers is None else layers
    return layers, model.moe_layers / model.layers * layers if moe is None else moe


def end_params(model: Model, s: StrategyArrays) -> dict[str, FloatArray]:
    """The vocabulary matrices and MTP parameters (besides its layers) of the first, middle and
    last stage, before tp splits them: the first holds the input embedding; the last the output
    layer (a copy of the embedding when tied) and, with multi-token prediction, the MTP
    modules' projections and norms (`mtp_head_params`) and, untied, the input embedding they
    read (Megatron-Core builds it where `mtp_process`); with pp = 1 or DualPipeV rank 0 holds
    both ends (one matrix when tied, the MTP modules reading its embedding)."""
    vh = float(model.vocab * model.hidden)
    untied = 0.0 if model.tied_embeddings else 1.0
    mtp = float(mtp_head_params(model))
    both = vh * (1.0 + untied) + mtp
    last = vh * (1.0 + (untied if model.mtp_layers else 0.0)) + mtp
    head = s.head_rank
    return dict.fromkeys(STAGE_KEYS, np.zeros(np.shape(s.pp))) | {
        "first": np.asarray(np.where(head == 0, both, vh)),
        "last": np.asarray(np.where(s.pp <= 1, both, np.where(head == s.pp - 1, last, 0.0))),
    }


def mtp_projection_params(model: Model) -> int:
    """Weights of the multi-token prediction modules' 2h → h projections (Megatron-Core's
    eh_proj; DeepSeek-V3 report §2.2's M_k): GEMM weights."""
    return model.mtp_layers * 2 * model.hidden * model.hidden


def mtp_head_params(model: Model) -> int:
    """Parameters of the multi-token prediction modules besides their transformer layers: per
    module the projection (`mtp_projection_params`) and two RMSNorms of h (enorm, hnorm)."""
    return mtp_projection_params(model) + model.mtp_layers * 2 * model.hidden


def expert_stage_params(
    model: Model, s: StrategyArrays, layers: FloatArray | None = None, moe: FloatArray | None = None
) -> FloatArray:
    """Expert parameters one GPU holds: its stage's MoE layers × experts/ep experts, split over
    the expert tensor-parallel ranks (`StrategyArrays.etp`, tp by default) (`moe`, or a
    moe_layers/layers share of the stage's `layers`; default: the fullest stage's)."""
    _, moe = _stage_counts(model, s, layers, moe)
    return np.asarray(moe * (model.experts / s.ep) * model.expert_params() / s.etp, np.float64)


def stage_params(model: Model, s: StrategyArrays) -> FloatArray:
    """Parameters held by one GPU of the first (or last) stage: dense + its share of experts."""
    return np.asarray(dense_stage_params(model, s) + expert_stage_params(model, s))


def gemm_stage_params(
    model: Model,
    s: StrategyArrays,
    layers: FloatArray | None = None,
    head: bool | FloatArray = True,
    moe: FloatArray | None = None,
) -> tuple[FloatArray, FloatArray]:
    """Weights of the linear GEMMs of one GPU's stage (what FP8 runs and caches in FP8), as
    (non-expert, expert): everything but the embedding, norms and routers (the projections'
    biases are counted with them: a negligible share). `layers`: the stage's (default: the
    fullest stage's); `head`: with the multi-token prediction projections of the stage with
    the LM head (counted where `dense_stage_params` counts that stage's head parameters);
    `moe`: the stage's MoE layers (default their moe_layers/layers share)."""
    h = model.hidden
    layers, moe = _stage_counts(model, s, layers, moe)
    expert_mlp = model.mlp_matrices * h * model.expert_ffn_
    dense = (
        layers * model.attention_params()
        + (layers - moe) * model.mlp_matrices * h * model.ffn_
        + moe * model.shared_experts * expert_mlp
    )
    expert = moe * expert_mlp * model.experts / s.ep
    proj = mtp_projection_params(model) * np.asarray(head, dtype=np.float64)
    return (
        np.asarray((dense + proj) / s.tp, dtype=np.float64),
        np.asarray(expert / s.etp, dtype=np.float64),
    )


def gathered_weight_bytes(
    model: Model,
    s: StrategyArrays,
    params: FloatArray,
    expert: bool = False,
    layers: FloatArray | None = None,
    head: bool = True,
) -> FloatArray:
    """Bytes of `params` of the stage's non-expert (or `expert`) weights as data-parallel weight
    gathers move them and ZeRO-3 holds them gathered: BF16, except the GEMM weights in FP8
    (1 B) where `fp8_param_gather` (`StrategyArrays.fp8_gathered`). `layers` and `head` (the
    LM-head stage's own parameters counted): as for `params`."""
    bf16 = np.asarray(params * WEIGHT_BYTES)
    if not bool(np.any(s.fp8_gathered)):  # the usual case costs nothing
        return bf16
    gemm = gemm_stage_params(model, s, layers, head)[1 if expert else 0]
    saved = np.where(s.fp8_gathered, WEIGHT_BYTES - FP8_PARAM_BYTES, 0.0)
    return np.asarray(bf16 - saved * gemm)


def zero3_gathered_bytes(model: Model, s: StrategyArrays) -> FloatArray:
    """ZeRO-3: full weights of the gathered layers (two, or the stage's only one; BF16, or FP8
    GEMM weights with `fp8_param_gather`) and one layer's full gradient (0 for ZeRO < 3). A
    layer's experts are gathered over their expert-data-parallel group (experts/ep experts per
    rank, split over etp)."""
    layers = stage_layers(model, s)["max"]
    dense = dense_stage_params(model, s, False, layers)
    expert = expert_stage_params(model, s, layers)
    weights = gathered_weight_bytes(
        model, s, dense, False, layers, head=False
    ) + gathered_weight_bytes(model, s, expert, True, layers)
    gathered = np.minimum(ZERO3_GATHERED_LAYERS, layers)  # a 1-layer stage has nothing to prefetch
    live = (gathered * weights + (dense + expert) * s.grad_reduce_bytes) / layers
    return np.asarray(np.where(s.zero_sharding >= 3, live, 0.0))


def zero_share(
    s: StrategyArrays, zero_stage: int, dense: FloatArray, expert: FloatArray
) -> FloatArray:
    """What one GPU holds of a per-parameter state of the stage's `dense` and `expert`
    parameters (counts or bytes) that ZeRO shards from `zero_stage` on (1: optimizer state, 2:
    gradients, 3: weights; `zero_sharding`): dense over the dp·cp ranks, experts over the
    tp·cp·dp/(etp·ep) expert-data-parallel ranks, each ÷ the replicas of hybrid sharding
    (`StrategyArrays.shard_ranks`, `expert_shard_ranks`)."""
    sharded = s.zero_sharding >= zero_stage
    dense_ranks = s.shard_ranks.astype(np.float64)
    expert_ranks = s.expert_shard_ranks.astype(np.float64)
    return np.asarray(
        dense / np.where(sharded, dense_ranks, 1.0) + expert / np.where(sharded, expert_ranks, 1.0)
    )


def memory(model: Model, s: StrategyArrays) -> Memory:
    """Memory per GPU of the most loaded pipeline stage: the first, the fullest middle one
    (rank 1), the middle ones with the most and the fewest MoE layers or the last
    (`compared_stages`),
    each with its own layers (and MoE layers among them), its own end parameters
    (`end_params`) and its own activations (`stage_activation_bytes`), the stage whose total
    is largest reported; with
    ZeRO stage 1/2/3 sharding optimizer states / gradients / weights over the data-parallel
    group: the dp·cp ranks for the dense
    parameters, the tp·cp·dp/(etp·ep) expert-data-parallel ranks for the expert parameters
    (`StrategyArrays.expert_grad_ranks`), each ÷ the replicas of hybrid sharding
    (`zero_shard`). `zero_sharding`: ZeRO-2/3 once per step keep weights and gradients whole.
    Context parallelism divides every activation by cp (each GPU holds s/cp tokens)."""

    def sharded(
        per_param: FloatArray | float, stage: int, params: tuple[FloatArray, FloatArray]
    ) -> FloatArray:
        return zero_share(s, stage, params[0] * per_param, params[1] * per_param)

    # FP8: TE's cached FP8 weight and transpose beside the BF16 weight; with fp8_param_gather
    # the FP8 weight and its transpose are all there is (2 B, as the BF16 weight counted).
    fp8_copy = np.where((s.precision == FP8) & ~s.fp8_gathered, FP8_WEIGHT_COPY_BYTES, 0.0)
    gathered = zero3_gathered_bytes(model, s)
    st = stage_layers(model, s)
    acts = stage_activation_bytes(model, s, st)
    ends = end_params(model, s)
    head = s.head_rank
    has_head = dict.fromkeys(STAGE_KEYS, np.zeros(np.shape(s.pp), dtype=bool)) | {
        "first": head == 0,
        "last": head == s.pp - 1,
    }
    parts: dict[str, list[FloatArray]] = {k: [] for k in ("weights", "grads", "opt", "acts")}
    ranks = stage_ranks(st, s)
    rank_list: list[FloatArray] = []
    for key in acts:  # the stages compared (`compared_stages`)
        layers, moe = st[key], st[key + "_moe"]
        params = (
            dense_stage_params(model, s, layers=layers, moe=moe, ends=ends[key]),
            expert_stage_params(model, s, layers, moe),
        )
        gemm = gemm_stage_params(model, s, layers, has_head[key], moe)
        weights = sharded(WEIGHT_BYTES, 3, params) + sharded(fp8_copy, 3, gemm)
        parts["weights"].append(weights)
        parts["grads"].append(sharded(s.grad_reduce_bytes.astype(np.float64), 2, params))
        parts["opt"].append(sharded(OPTIMIZER_STATE_BYTES[s.optimizer_state], 1, params))
        parts["acts"].append(np.asarray(acts[key] / s.cp))
        rank_list.append(np.asarray(ranks[key], dtype=np.float64))
    stacked = {k: np.stack(np.broadcast_arrays(*v)) for k, v in parts.items()}
    totals = sum(stacked.values())
    pick = np.argmax(totals, axis=0)[None]

    def at_peak(x: FloatArray) -> FloatArray:
        return np.asarray(np.take_along_axis(x, pick, axis=0)[0])

    weights, grads, optimizer, activations = (
        at_peak(stacked[k]) for k in ("weights", "grads", "opt", "acts")
    )
    shape = stacked["weights"].shape[1:]
    peak_rank = at_peak(np.stack([np.broadcast_to(r, shape) for r in rank_list]))
    reserved = np.full_like(activations, RESERVED_BYTES)
    total = weights + grads + optimizer + activations + reserved + gathered
    return Memory(
        weights_bytes=weights,
        gradients_bytes=grads,
        optimizer_bytes=optimizer,
        activations_bytes=activations,
        reserved_bytes=reserved,
        total_bytes=total,
        gathered_bytes=np.asarray(np.broadcast_to(gathered, np.shape(total))),
        peak_rank=peak_rank,
    )
