"""Kernel time of one layer on one GPU, per micro-batch, over arrays of strategies.

The layer's GEMMs (linear layers in the strategy's precision, the attention core unfused or as
one fused kernel), its element-wise kernels at their measured bandwidths, the FP8 casts, the MoE
expert delta and the vocabulary projection with the loss. Kernel times depend only on a few
strategy fields (`SHAPE_FIELDS`): `per_shape` evaluates them once per distinct combination.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, replace

import numpy as np

from railplan.perf.compute import flash_attention_time_s, gemm_time_s, memory_time_s
from railplan.specs import GPU, Model, System
from railplan.specs.arrays import (
    FLASH1,
    FLASH2,
    FP8,
    FULL,
    ROUTER_FP32,
    UNFUSED,
    FloatArray,
    IntArray,
    StrategyArrays,
    recomputes,
)
from railplan.workload import comm, elementwise, routing
from railplan.workload.gemms import (
    ATTENTION_INPUT_GEMMS,
    Gemm,
    expert_gemms,
    layer_gemms,
    logit_gemm,
    mlp_gemms,
    mtp_projection_gemm,
    router_gemm,
)

# 2 layer norms, 2 bias-dropout-adds, activation, softmax, attention dropout, embedding/misc:
# Megatron's fused kernels per layer forward (flash attention fuses the softmax and attention
# dropout into its kernel: two fewer)
ELEMENTWISE_KERNELS_PER_LAYER = 8.0
FP8_CAST_BYTES = 4.0  # TE cast-transpose: read 2 (bf16), write 1 (fp8) + 1 (fp8 transpose)
FP8_TRANSPOSE_BYTES = 2.0  # TE fp8_transpose: read 1, write 1
ACT_BYTES, FP8_BYTES = comm.ACT_BYTES, comm.FP8_ACT_BYTES  # bytes per BF16 / FP8 element


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
    """Transformer Engine's FP8 casts around the linear GEMMs, as net bytes over the BF16 step,
    at the element-wise kernel efficiencies (`transformer_engine/pytorch/module/
    layernorm_linear.py`, `linear.py`, `base.py: grad_output_preprocess` and, in 2.x,
    `distributed.py`'s FP8 gather; v1.11 and 2.x agree but where noted):
    - a GEMM fed by a fused norm (`Gemm.norm_input`): the norm writes its output in FP8, one
      byte fewer per element of its (sequence-parallel) shard than the BF16 norm of
      `workload.elementwise`; the weight gradient needs the gathered input transposed: read 1,
      write 1 per element (`FP8_TRANSPOSE_BYTES`);
    - another column-parallel GEMM under sequence parallelism (tp > 1; a shared expert's up
      projection): its input cast on the shard (read 2, write 1), gathered in FP8, transposed
      for the weight gradient (v1.11, and 2.x from v2.2; v2.1 keeps the BF16 shard and casts
      it again for the backward's gather, 3/tp bytes more per element: not modelled);
    - any other GEMM: a fused cast-transpose of its input (read 2, write 1 + 1 transposed:
      `FP8_CAST_BYTES`; TE 2.x's rule for a row-parallel input; TE 1.x casts it and transposes
      it apart under sequence parallelism, a byte more per element: not modelled);
    - backward, each output gradient: a fused cast-transpose, except where sequence
      parallelism all-gathers it (`Gemm.row_parallel`): cast on the shard, gathered in FP8,
      then transposed.
    The forward term is negative where the norms' savings exceed the casts (tp 16 and more
    without sequence parallelism): a net saving on the norms' own kernels. Weights are cast once
    per step (TE caches them over micro-batches: not counted here)."""
    fp8 = s.precision == FP8
    if not bool(np.any(fp8)):  # the search's usual BF16 strategies: nothing to cast
        return {"forward": np.zeros(()), "backward": np.zeros(())}
    on = fp8.astype(np.float64)
    gathered = ((s.sequence_parallel > 0) & (s.tp > 1)).astype(np.float64)
    shard = elementwise.sp_share(s)  # a sequence-parallel shard's share
    cast_on_shard = (ACT_BYTES + FP8_BYTES) * shard  # bytes per gathered element
    forward, backward = np.zeros(()), np.zeros(())
    forward_kernels, backward_kernels = np.zeros(()), np.zeros(())
    for g in gemms:
        inputs, outputs = g.batch * g.m * g.k, g.batch * g.m * g.n
        split_in = gathered if g.column_parallel else np.zeros(())
        if g.norm_input:
            forward = forward - (ACT_BYTES - FP8_BYTES) * inputs * shard
            backward = backward + FP8_TRANSPOSE_BYTES * inputs
            backward_kernels = backward_kernels + 1.0
        else:
            apart = cast_on_shard * inputs  # cast on the shard; transposed in the backward
            forward = forward + split_in * apart + (1.0 - split_in) * FP8_CAST_BYTES * inputs
            backward = backward + split_in * FP8_TRANSPOSE_BYTES * inputs
            forward_kernels = forward_kernels + 1.0
            backward_kernels = backward_kernels + split_in
        split_out = gathered if g.row_parallel else np.zeros(())
        gather_cast = cast_on_shard * outputs + FP8_TRANSPOSE_BYTES * outputs
        backward = backward + split_out * gather_cast + (1.0 - split_out) * FP8_CAST_BYTES * outputs
        backward_kernels = backward_kernels + 1.0 + split_out  # gathered: cast, then transpose
    fwd_eff, bwd_eff = gpu.elementwise_forward_efficiency, gpu.elementwise_backward_efficiency
    fwd = memory_time_s(gpu, forward, forward_kernels, fwd_eff)
    bwd = memory_time_s(gpu, backward, backward_kernels, bwd_eff)
    return {"forward": np.asarray(on * fwd), "backward": np.asarray(on * bwd)}


def layer_times(model: Model, system: System, s: StrategyArrays) -> dict[str, FloatArray]:
    """Per layer, per micro-batch, on one GPU: forward, backward and recompute compute time.

    Linear GEMMs run in the strategy's precision; the attention core stays BF16: unfused, the
    score and context GEMMs plus the softmax/dropout kernels on the s×s scores; flash, one fused
    kernel (compute.flash_attention_time_s) with no score traffic through HBM."""
    gpu = system.gpu
    b, t = s.micro_batch.astype(float), s.tp.astype(float)
    gemms = local(layer_gemms(model, b, t, s.sequence_parallel), s)
    linear = [g for g in gemms if not g.attention]
    core = [g for g in gemms if g.attention]
    flash = s.attention != UNFUSED  # a fused kernel (today's or an older generation's)

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
    # Each attention kernel sees the rank's s/cp queries; under context parallelism only the
    # diagonal step (1/cp of a rank's causal work, load-balanced) runs with the causal mask,
    # the cp − 1 ring steps over other ranks' keys without it.
    cp = s.cp.astype(float)
    kernel_seq, causal_share = model.seq / cp, 1.0 / cp
    fused = flash_attention_time_s(gpu, core_flops, kernel_seq, causal_share=causal_share)
    for code, generation in ((FLASH2, 2), (FLASH1, 1)):  # older kernels, where asked for
        if bool(np.any(s.attention == code)):
            old = flash_attention_time_s(
                gpu, core_flops, kernel_seq, generation=generation, causal_share=causal_share
            )
            fused = {k: np.where(s.attention == code, old[k], v) for k, v in fused.items()}
    attn_fwd = np.where(flash, fused["forward"], unfused_fwd)
    attn_bwd = np.where(flash, fused["backward"], unfused_bwd)

    # Element-wise kernels run well below streaming bandwidth: measured fused-kernel
    # efficiencies (GPU spec) on the bytes of workload/elementwise.py.
    fwd_eff, bwd_eff = gpu.elementwise_forward_efficiency, gpu.elementwise_backward_efficiency
    ew = {k: v / s.cp for k, v in elementwise.layer_bytes(model, s).items()}
    kernels = np.where(flash, ELEMENTWISE_KERNELS_PER_LAYER - 2.0, ELEMENTWISE_KERNELS_PER_LAYER)
    kernels = kernels + elementwise.latent_norms(model)
    ew_fwd = memory_time_s(gpu, ew["forward"], kernels, fwd_eff)
    ew_bwd = memory_time_s(gpu, ew["backward"], kernels, bwd_eff)
    ew_scores = memory_time_s(gpu, ew["scores_forward"], 2.0 * (1.0 - flash), fwd_eff)

    forward = lin_fwd + attn_fwd + ew_fwd + casts["forward"]
    backward = lin_bwd + attn_bwd + ew_bwd + casts["backward"]
    # The weight-gradient GEMMs alone (part of `backward`: what a zero-bubble schedule runs
    # apart from the input gradients).
    weight_grads = total(list(wgrad.values()))
    share = model.moe_layers / model.layers
    # what one MoE layer adds over a dense one, by pass (nothing in a dense model)
    per_moe: dict[str, FloatArray] = dict.fromkeys(MOE_DELTA_KEYS, np.zeros(()))
    if model.moe_layers:
        # Average layer: a moe_layers/layers share of layers swaps its dense MLP for experts.
        delta = moe_mlp_delta(model, system, s)
        forward = forward + share * delta["forward"]
        backward = backward + share * delta["backward"]
        weight_grads = weight_grads + share * delta["wgrad"]
    # Selective recompute: the forward of each module it reruns (`Strategy.recompute_modules`).
    act = elementwise.activation_function_bytes(model, b * model.seq * model.ffn_ / t / s.cp)
    dense_mlp = (
        fprop["mlp_up"] + fprop["mlp_down"] + memory_time_s(gpu, act["forward"], 1.0, fwd_eff)
    )
    norms = elementwise.norm_forward_bytes(model, s) / s.cp
    latent_bytes = elementwise.LAYER_NORM_FORWARD * elementwise.latent_elements(model, s) / s.cp
    latent_norms_fwd = memory_time_s(
        gpu, latent_bytes, float(elementwise.latent_norms(model)), fwd_eff
    )
    rerun = {
        "core_attn": attn_fwd + ew_scores,
        "layernorm": memory_time_s(gpu, norms, 2.0, fwd_eff),
        # the up projections with the latent norms fused into them
        "mla_up_proj": total([fprop[n] for n in ("q_up", "kv_up") if n in fprop])
        + latent_norms_fwd,
        "mlp": (1.0 - share) * dense_mlp,
    }
    if model.moe_layers:
        rerun["moe_act"] = share * delta["activation_forward"]
        rerun["shared_experts"] = share * delta["shared_forward"]
        rerun["moe"] = share * (dense_mlp + delta["forward"])
    selective = total([np.where(recomputes(s, name), t_s, 0.0) for name, t_s in rerun.items()])
    # Full recompute reruns the whole layer (`iteration` scales it to the layers recomputed at
    # all, `recomputed_share`: the stage's chunks are not a shape field).
    recompute = np.where(s.recompute == FULL, forward, selective)
    if model.moe_layers:
        # each term above is linear in the MoE share: its slope, one MoE layer over a dense one
        rerun_slope = {
            "mlp": -dense_mlp,
            "moe_act": delta["activation_forward"],
            "shared_experts": delta["shared_forward"],
            "moe": dense_mlp + delta["forward"],
        }
        selective_slope = total(
            [np.where(recomputes(s, name), t_s, 0.0) for name, t_s in rerun_slope.items()]
        )
        per_moe = {
            "moe_shared_up_forward": delta["shared_up_forward"],
            "moe_shared_down_forward": delta["shared_down_forward"],
            "moe_shared_up_backward": delta["shared_up_backward"],
            "moe_shared_down_backward": delta["shared_down_backward"],
            "moe_forward": np.asarray(delta["forward"]),
            "moe_backward": np.asarray(delta["backward"]),
            "moe_recompute": np.asarray(
                np.where(s.recompute == FULL, delta["forward"], selective_slope)
            ),
        }
    return {
        "forward": np.asarray(forward),
        "backward": np.asarray(backward),
        "recompute": np.asarray(recompute),
        "wgrad": np.asarray(weight_grads),
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
    } | {k: np.asarray(v) for k, v in per_moe.items()}


#: an MoE layer's shared experts' passes in the pieces `shared_expert_overlap` runs beside the
#: all-to-alls (`comm_time.ep_comm_time_s`)
SHARED_PIECES = (
    "moe_shared_up_forward",
    "moe_shared_down_forward",
    "moe_shared_up_backward",
    "moe_shared_down_backward",
)
#: `layer_times`' slopes in the MoE share: what one MoE layer adds over a dense one, by pass;
#: and its `SHARED_PIECES`
MOE_DELTA_KEYS = ("moe_forward", "moe_backward", "moe_recompute", *SHARED_PIECES)


def moe_mlp_delta(model: Model, system: System, s: StrategyArrays) -> dict[str, FloatArray]:
    """Extra compute of one MoE layer over a dense one: router + experts − dense MLP, with the
    activation-function traffic of the expert slots and the token permutation around the
    all-to-alls (experts in the strategy's precision, the router in BF16, or TF32 with
    `router_dtype` fp32); and the forward of the two parts selective recompute can rerun
    alone: the routed experts' activation over their slots (`activation_forward`) and the
    shared experts' GEMMs with their activation (`shared_forward`)."""
    gpu = system.gpu
    fwd_eff = gpu.elementwise_forward_efficiency
    b, t, ep = s.micro_batch.astype(float), s.tp.astype(float), s.ep.astype(float)
    dense = local(mlp_gemms(model, b, t), s)
    routed = local(expert_gemms(model, b, t, ep, s.etp.astype(float)), s)
    # Shared experts: a dense MLP of shared·expert_ffn width on every token.
    shared_width = model.shared_experts * model.expert_ffn_
    shared = local(mlp_gemms(model, b, t, shared_width), s) if model.shared_experts else []
    experts = routed + shared
    zero = np.zeros(())
    # each GEMM's forward, and its backward pair (input gradient, weight gradient)
    expert_fprop = [linear_time_s(gpu, g, s) for g in experts]
    expert_bprop = [[linear_time_s(gpu, h, s) for h in g.backward()] for g in experts]

    def fwd_bwd(
        gs: list[Gemm], fprop: list[FloatArray], bprop: list[list[FloatArray]]
    ) -> tuple[FloatArray, ...]:
        f = sum(fprop, zero)
        bw = sum((t_s for pair in bprop for t_s in pair), zero)
        wg = sum((pair[1] for pair in bprop), zero)
        c = fp8_cast_times_s(gpu, gs, s)
        return np.asarray(f + c["forward"]), np.asarray(bw + c["backward"]), np.asarray(wg)

    ef, eb, ew = fwd_bwd(experts, expert_fprop, expert_bprop)
    dense_fprop = [linear_time_s(gpu, g, s) for g in dense]
    dense_bprop = [[linear_time_s(gpu, h, s) for h in g.backward()] for g in dense]
    df, db, dw = fwd_bwd(dense, dense_fprop, dense_bprop)
    # the router sees the rank's tokens: s/cp, and /tp, since an MoE layer with tp > 1 runs
    # sequence-parallel (`specs.arrays` validity) and routes its s/tp shard
    (router,) = local([router_gemm(model, b)], s)
    router = replace(router, m=np.asarray(router.m / t))
    # an FP32 router (`router_dtype` fp32) runs its three GEMMs in TF32
    fp32_router = s.router_dtype == ROUTER_FP32

    def router_time_s(g: Gemm) -> FloatArray:
        bf16 = gemm_time_s(gpu, g)
        if not bool(np.any(fp32_router)):
            return bf16
        return np.asarray(np.where(fp32_router, gemm_time_s(gpu, g, tf32=True), bf16))

    rf = router_time_s(router)
    router_bprop = [router_time_s(h) for h in router.backward()]  # input, weight gradients
    rb = sum(router_bprop, zero)
    routed_slots = b * model.seq * model.top_k * routing.slot_factor(model, s.ep)
    slots = routed_slots + b * model.seq * model.shared_experts
    extra = elementwise.activation_function_bytes(
        model, (slots * model.expert_ffn_ - b * model.seq * model.ffn_) / t / s.cp
    )
    ew_f = memory_time_s(gpu, extra["forward"], 0.0, fwd_eff)
    ew_b = memory_time_s(gpu, extra["backward"], 0.0, gpu.elementwise_backward_efficiency)
    # Token permutation around the all-to-alls (elementwise.moe_permutation_bytes): row gathers
    # and scatters in both passes, without the column reductions that slow the layer-norm
    # backward the backward efficiency was measured on: at the forward efficiency. A GPU
    # permutes its own tokens' k slots each (the capacity's with token dropping), its experts
    # the slots they receive (the busiest rank's with skewed routing), etp/tp of the tp group's.
    own = b * model.seq * model.top_k * routing.token_slot_factor(model) / t / s.cp
    perm = elementwise.moe_permutation_bytes(
        model, s, own, routed_slots * s.etp.astype(float) / t / s.cp
    )
    perm_f = memory_time_s(gpu, perm["forward"], perm["forward_kernels"], fwd_eff)
    perm_b = memory_time_s(gpu, perm["backward"], perm["backward_kernels"], fwd_eff)

    def activation_s(elements: FloatArray) -> tuple[FloatArray, FloatArray]:
        """The activation kernel over `elements` of the micro-batch: (forward, backward)."""
        act = elementwise.activation_function_bytes(model, elements / t / s.cp)
        bwd_eff = gpu.elementwise_backward_efficiency
        return (
            memory_time_s(gpu, act["forward"], 1.0, fwd_eff),
            memory_time_s(gpu, act["backward"], 1.0, bwd_eff),
        )

    # the shared experts' passes in two pieces each: up projection and activation, down
    # projection (`shared_expert_overlap` runs them beside the dispatch and the combine, and
    # their gradients beside those all-to-alls' gradients)
    shared_up = shared_down = shared_act = shared_act_b = shared_up_b = shared_down_b = zero
    if model.shared_experts:
        shared_up, shared_down = expert_fprop[len(routed) :]
        shared_up_b, shared_down_b = (sum(pair, zero) for pair in expert_bprop[len(routed) :])
        shared_act, shared_act_b = activation_s(b * model.seq * shared_width)
    return {
        "forward": ef + rf - df + ew_f + perm_f,
        "backward": eb + rb - db + ew_b + perm_b,
        "wgrad": ew + router_bprop[1] - dw,
        "activation_forward": activation_s(routed_slots * model.expert_ffn_)[0],
        "shared_forward": np.asarray(shared_up + shared_down + shared_act),
        "shared_up_forward": np.asarray(shared_up + shared_act),
        "shared_down_forward": np.asarray(shared_down),
        "shared_up_backward": np.asarray(shared_up_b + shared_act_b),
        "shared_down_backward": np.asarray(shared_down_b),
    }


def logits_times(model: Model, system: System, s: StrategyArrays) -> dict[str, FloatArray]:
    """Per micro-batch on the last stage: `t`, the vocabulary projection forward + backward and
    the cross-entropy as `Strategy.cross_entropy` runs it, once more for each multi-token
    prediction module (`Model.mtp_layers`: its own logits and loss through the shared head)
    with its 2h → h projection (`eh_proj`, column-parallel, in the strategy's precision with
    its FP8 casts; its transformer layer is a layer of the stage, `layers_of_stage`); `wgrad`,
    the main head's weight-gradient GEMM alone (part of `t`: what `defer_embedding_wgrad` moves
    to the pipeline flush)."""
    (g,) = local([logit_gemm(model, s.micro_batch.astype(float), s.tp.astype(float))], s)
    dgrad, wgrad = g.backward()
    t_wgrad = gemm_time_s(system.gpu, wgrad)
    gemm = gemm_time_s(system.gpu, g) + (gemm_time_s(system.gpu, dgrad) + t_wgrad)
    # The loss kernels (`elementwise.cross_entropy_bytes`): plain streaming passes and row
    # reductions over a multi-GB tensor, at the GPU's streaming efficiency.
    logits = comm.local_tokens(model, s) * model.vocab / s.tp
    loss = memory_time_s(
        system.gpu,
        elementwise.cross_entropy_bytes(s) * logits,
        elementwise.cross_entropy_kernels(s),
    )
    head = gemm + loss
    if model.mtp_layers:
        b, tp = s.micro_batch.astype(float), s.tp.astype(float)
        (proj,) = local([mtp_projection_gemm(model, b, tp)], s)
        casts = fp8_cast_times_s(system.gpu, [proj], s)  # its FP8 casts (0 in BF16)
        proj_s = (
            linear_time_s(system.gpu, proj, s)
            + sum((linear_time_s(system.gpu, h, s) for h in proj.backward()), np.zeros(()))
            + casts["forward"]
            + casts["backward"]
        )
        head = head * (1.0 + model.mtp_layers) + model.mtp_layers * proj_s
    return {"t": np.asarray(head), "wgrad": np.asarray(t_wgrad)}


# The strategy fields that per-layer kernel times depend on.
SHAPE_FIELDS = (
    "micro_batch",
    "tp",
    "sequence_parallel",
    "recompute",
    "ep",
    "expert_tp",
    "ep_dispatch",
    "cp",
    "attention",
    "precision",
    "cross_entropy",
    "recompute_modules",
    "router_dtype",
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
