"""Time of one serving-engine step: prefill and decode tokens through a tp × pp (× ep) instance.

One step is one forward pass of the engine (continuous batching: TensorRT-LLM's in-flight
batching, vLLM's chunked prefill fuse the prompts of newly admitted requests into the decode
step of the running ones). Per layer on one GPU:
- weight GEMMs (QKV, projection, MLP or experts) over all tokens of the step, shapes from
  `workload.gemms` (Megatron tensor parallelism), each the roofline max of compute — at the
  precision's dense peak times the shape efficiency of `compute.gemm_efficiency` times the
  GPU's `sustained_tensor_fraction`, as in a training step (docs/model.md) — and HBM
  traffic (weights at the precision's bytes, bf16 activations) at the GPU's streaming
  efficiency (`compute.memory_time_s`): a decode GEMV is a weight stream;
- attention: prefill is fused causal attention timed as a training step's forward kernel
  (`compute.flash_attention_time_s`: the masked half skipped, at the GPU's measured kernel
  speed for the prompt length, `attention_curves`), then decode reads every running
  sequence's KV cache from HBM (a separate kernel, as TensorRT-LLM's context and generation
  phases run);
- the fused element-wise kernels (norms, residual, activation, RoPE) as in training;
- tensor-parallel all-reduces (2 per layer) of bf16 activations and expert all-to-alls
  (dispatch and combine per MoE layer; the dispatch in FP8 with fp8/fp4 weights,
  `ep_pair_bytes`), timed by the training model's collectives on the network's links
  (`comm_time.links`): inside an HB domain or over the NIC, with rail-only forwarding, as
  DeepEP's low-latency kernels send the running sequences' tokens; the prompts go through
  its normal kernels as a batch of their own (`ep_normal_all_to_all_s`: deduplicated and
  rail-aligned, as in training).
Pipeline parallelism splits the batch into pp micro-batches in flight; a token then advances
once every pp stage times (plus the sends between stages). Prompts come whole: a step with a
share of one is a mixture of steps with and without it (`stage_time_s`). Two options of the
deployment change the step: DeepSeek's two-batch overlap of the expert all-to-alls
(`overlapped_stage_time_s`) and speculative decoding with the model's own prediction module
(`step_times`, `draft_s`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from railplan.errors import RailplanError
from railplan.inference import kvcache
from railplan.limits import MAX_GPUS, as_int, check_int
from railplan.perf.comm_time import (
    Links,
    deduplicated_all_to_all_s,
    direct_all_to_all_s,
    group_collective_s,
    links,
    p2p_s,
)
from railplan.perf.compute import flash_attention_time_s, gemm_efficiency, memory_time_s
from railplan.perf.layer_time import ELEMENTWISE_KERNELS_PER_LAYER
from railplan.perf.layout import Shape, worst_shape
from railplan.specs import GPU, Model, Network, System, load_model, load_network, load_system
from railplan.specs.arrays import BoolArray, FloatArray, remembered
from railplan.specs.hardware import CustomAllReduceCurve
from railplan.workload.comm import FP8_DISPATCH_BYTES
from railplan.workload.gemms import (
    Gemm,
    attention_gemms,
    expert_gemms,
    logit_gemm,
    mlp_gemms,
    mtp_projection_gemm,
    router_gemm,
)

PRECISIONS: tuple[str, ...] = ("bf16", "fp8", "fp4")
#: bytes per weight: bf16; fp8 (E4M3, per-tensor scales); NVFP4 (4-bit values plus one fp8
#: scale per 16: NVIDIA "Introducing NVFP4", 2025) = 0.5 + 1/16
WEIGHT_BYTES: dict[str, float] = {"bf16": 2.0, "fp8": 1.0, "fp4": 0.5625}
#: KV-cache element bytes: bf16, or fp8 with fp8/fp4 weights (TensorRT-LLM's FP8 KV cache)
KV_BYTES: dict[str, float] = {"bf16": 2.0, "fp8": 1.0, "fp4": 1.0}
ACT_BYTES = 2.0  # bf16 activations between layers and in the collectives
#: Acceptance of a drafted token (the chance the model keeps it, given it kept the ones before):
#: DeepSeek-V3 report (arXiv 2412.19437) §5.4.3, its MTP module's second token is accepted
#: "between 85% and 90%" of the time; the low end
DEFAULT_ACCEPTANCE = 0.85
#: draft tokens per step at most (SGLang's EAGLE-style MTP runs 1-4 steps)
MAX_SPECULATIVE_TOKENS = 16
#: SMs DeepEP's normal (prefill) kernels hold: 24 of the H800's 132 in DeepSeek's prefill
#: profile (deepseek-ai/profile-data README figure; DeepEP docs/legacy.md's example
#: `Buffer.set_num_sms(24)`); the low-latency (decode) kernels receive through a hook
#: "without any SM occupation" (same page), so they hold none
DEEPEP_NORMAL_SMS = 24


def check_precision(precision: str, gpu: GPU) -> float:
    """The dense tensor peak (TFLOP/s) of `precision` on `gpu`, or a one-line error."""
    if precision not in PRECISIONS:
        raise RailplanError(
            "precision", f"{precision!r} is not allowed; choose one of {', '.join(PRECISIONS)}"
        )
    peak = {"bf16": gpu.peak_tflops, "fp8": gpu.fp8_tflops, "fp4": gpu.fp4_tflops}[precision]
    if peak is None:
        allowed = [p for p in PRECISIONS if p == "bf16" or getattr(gpu, f"{p}_tflops")]
        raise RailplanError(
            "precision", f"{gpu.name} has no {precision} tensor cores; choose {', '.join(allowed)}"
        )
    return float(peak)


def tp_splits_heads(model: Model, tp: int) -> bool:
    """Whether serving frameworks run `tp`: it splits the attention heads evenly (vLLM
    `total_num_heads % tp_size == 0`; TensorRT-LLM and SGLang alike) and either splits the KV
    heads evenly or replicates them (tp a multiple of the KV heads)."""
    kv = model.kv_heads_
    return model.heads % tp == 0 and (kv % tp == 0 or tp % kv == 0)


@dataclass(frozen=True)
class Deployment:
    """A model served on `gpus` GPUs of `system` as replicas of tp × pp × ep GPUs.

    With ep > 1 (MoE) the ep ranks each run their own batch through the dense layers
    (attention data-parallel) and share the experts: E/ep per rank (DeepSeek-style wide EP).
    `two_batch_overlap` runs each step as two micro-batches that hide each other's expert
    all-to-alls (`stage_time_s`). `speculative_tokens` D > 0 drafts D tokens per running
    sequence and step with the model's multi-token prediction module and verifies them in the
    next step (`step_times`), each accepted with probability `acceptance` given the ones before.
    `custom_all_reduce` lets the tensor-parallel all-reduces inside an HB domain take the
    serving framework's own kernel where the system has its measurement (`tp_all_reduce_s`).
    """

    model: Model
    system: System
    network: Network
    gpus: int
    tp: int = 1
    pp: int = 1
    ep: int = 1
    precision: str = "fp8"
    two_batch_overlap: bool = False
    speculative_tokens: int = 0
    acceptance: float = DEFAULT_ACCEPTANCE
    custom_all_reduce: bool = True

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: names, paths and mappings load here (one-line errors)
        # `expert_layer_s` of each scalar token count met (the load simulation asks for the
        # same counts thousands of times); not a field: no part of equality or hashing
        set_(self, "_expert_layer_s", {})
        set_(self, "model", load_model(self.model))
        set_(self, "system", load_system(self.system))
        set_(self, "network", load_network(self.network))
        for field in ("gpus", "tp", "pp", "ep", "speculative_tokens"):
            n = as_int(getattr(self, field))
            if n is not None:  # numpy's integers too
                set_(self, field, n)
        for field in ("gpus", "tp", "pp", "ep"):
            check_int(field, getattr(self, field), 1, MAX_GPUS)
        self.peak_tflops  # noqa: B018 — validates the precision
        if self.gpus % self.instance_gpus:
            raise RailplanError(
                "gpus", f"must be a multiple of tp·pp·ep = {self.instance_gpus}; got {self.gpus}"
            )
        if self.pp > self.model.layers:
            raise RailplanError("pp", f"must be at most the {self.model.layers} layers")
        if not tp_splits_heads(self.model, self.tp):
            kv_heads = f", and divide its {self.model.kv_heads_} KV heads or be a multiple of them"
            kv = "" if self.model.mla else kv_heads
            raise RailplanError(
                "tp",
                f"must divide the model's {self.model.heads} attention heads{kv} (vLLM, "
                "TensorRT-LLM and SGLang split heads evenly and replicate KV heads); "
                f"got {self.tp}",
            )
        if self.ep > 1 and (self.model.experts == 1 or self.model.experts % self.ep):
            raise RailplanError(
                "ep", f"must divide the model's {self.model.experts} experts (1 for dense models)"
            )
        d = check_int("speculative_tokens", self.speculative_tokens, 0, MAX_SPECULATIVE_TOKENS)
        if d and self.model.mtp_layers == 0:
            raise RailplanError(
                "speculative_tokens",
                f"drafts with the model's multi-token prediction modules; {self.model.name} "
                "has none (mtp_layers 0)",
            )
        a = self.acceptance
        if isinstance(a, bool) or not isinstance(a, (int, float)) or not 0.0 <= a <= 1.0:
            raise RailplanError("acceptance", f"must be a number in [0, 1]; got {a!r}")
        if self.two_batch_overlap and self.ep == 1:
            raise RailplanError(
                "two_batch_overlap",
                "overlaps the expert all-to-alls: needs an MoE model served with ep > 1",
            )

    @cached_property
    def peak_tflops(self) -> float:
        return check_precision(self.precision, self.system.gpu)

    @property
    def verified_tokens(self) -> int:
        """Tokens a running sequence puts through the model per step: its last token and the
        drafts to verify."""
        return 1 + self.speculative_tokens

    @property
    def tokens_per_step(self) -> float:
        """Output tokens a running sequence gains per step on average: the verified token,
        then each draft while every one before it was accepted, 1 + a + a² + … + a^D."""
        return float(sum(self.acceptance**k for k in range(self.speculative_tokens + 1)))

    @property
    def instance_gpus(self) -> int:
        return self.tp * self.pp * self.ep

    @property
    def replicas(self) -> int:
        return self.gpus // self.instance_gpus

    @cached_property
    def links(self) -> Links:
        """The collective model's links; all-reduces inside an HB domain may take NVLink SHARP
        wherever the GPU has it, as NCCL does by default on NVSwitch 3 and later (its tuner
        takes NVLS only where faster: for large messages, such as a prefill's at tp 8, and
        large groups, such as 64 ranks of an NVL72; not for a decode step's small all-reduces
        at tp ≤ 8)."""
        sy = self.system
        if sy.gpu.nvlink_sharp and not sy.nvls:
            sy = sy.model_copy(update={"nvls": True})
        return links(sy, self.network, np.asarray(float(self.gpus)))

    @cached_property
    def shapes(self) -> dict[str, Shape]:
        """Layouts of the tp group (consecutive ranks), the ep group (tp apart) and the
        pipeline chain (tp·ep apart) over the HB domains, replicas packed in rank order."""
        k = self.links.hb_domain
        inst = self.instance_gpus
        return {
            "tp": worst_shape(self.tp, 1, self.tp, 1, self.gpus // self.tp, k),
            "ep": worst_shape(
                self.ep, self.tp, self.tp * self.ep, self.tp, self.replicas * self.pp, k
            ),
            "pp": worst_shape(
                self.pp, self.tp * self.ep, inst, self.tp * self.ep, self.replicas, k
            ),
        }

    @cached_property
    def framework_all_reduce(self) -> CustomAllReduceCurve | None:
        """The serving framework's measured all-reduce kernel (`System.custom_all_reduce`:
        TensorRT-LLM's one-shot / two-shot kernel, which vLLM and SGLang run too) where the
        tensor-parallel all-reduces may take it: allowed (`custom_all_reduce`), measured on
        this system's links, and run by the frameworks for this group (tp in
        `supported_ranks`, all of it inside one HB domain); else None."""
        curve = self.system.custom_all_reduce_curve
        if not self.custom_all_reduce or curve is None or self.tp not in curve.supported_ranks:
            return None
        return curve if bool(np.all(self.shapes["tp"].inside)) else None

    @property
    def stage_layers(self) -> int:
        """Layers of the fullest pipeline stage."""
        return math.ceil(self.model.layers / self.pp)

    @property
    def stage_moe_layers(self) -> float:
        """MoE layers of the fullest stage (the model's share of them)."""
        return self.model.moe_layers * self.stage_layers / self.model.layers

    @cached_property
    def token_model(self) -> Model:
        """The model with one-token sequences: GEMM shapes per token (b = tokens, s = 1)."""
        return self.model.model_copy(update={"seq": 1})

    @property
    def draft_layers(self) -> int:
        """Layers of the multi-token prediction modules the last stage loads to draft with
        (none without speculative decoding)."""
        return self.model.mtp_layers if self.speculative_tokens else 0

    @cached_property
    def weight_bytes_per_gpu(self) -> float:
        """Weights one GPU holds: its stage's layers split by tp, experts also by ep; with
        speculative decoding also the prediction modules (a layer of the model's MoE kind and
        its 2h → h projection each; embedding and head shared), as on the last stage. The
        embedding and LM head in bf16 at every precision."""
        m = self.model
        wb = WEIGHT_BYTES[self.precision]
        layers, moe = self.stage_layers, self.stage_moe_layers
        # an MoE layer: attention and norms and the shared experts on every ep rank (split by
        # tp), the routed experts split over the ep ranks, the router (h × E, bf16, as vLLM
        # and SGLang keep the gate) whole on every GPU, as `stage_parts` reads it
        moe_dense = m.layer_params() - m.mlp_params_dense() + m.shared_experts * m.expert_params()
        dense = (layers - moe) * m.layer_params() + moe * moe_dense
        experts = moe * m.experts * m.expert_params() / self.ep
        embed = m.embedding_params() / (2 if not m.tied_embeddings and self.pp > 1 else 1)
        if m.moe_layers:
            module = moe_dense + m.experts * m.expert_params() / self.ep
        else:
            module = m.layer_params()
        drafter = self.draft_layers * (module + 2 * m.hidden * m.hidden)
        routers = (moe + (self.draft_layers if m.moe_layers else 0)) * m.hidden * m.experts
        # the embedding and LM head stay bf16 in quantized checkpoints (`logits_s`)
        tp_split = wb * (dense + experts + drafter) + WEIGHT_BYTES["bf16"] * embed
        return tp_split / self.tp + WEIGHT_BYTES["bf16"] * routers

    @property
    def dispatch_value_bytes(self) -> float:
        """Bytes per hidden value of an MoE dispatch: FP8 with its scales when the weights are
        fp8 or fp4 (`comm.FP8_DISPATCH_BYTES`), else bf16; the combine is always bf16."""
        return FP8_DISPATCH_BYTES if self.precision in ("fp8", "fp4") else ACT_BYTES

    @cached_property
    def layer_kv_bytes_per_token(self) -> float:
        """KV-cache bytes per token of one layer on one GPU of the instance."""
        return (
            kvcache.model_kv_bytes_per_token(self.model, KV_BYTES[self.precision], self.tp, self.pp)
            / self.stage_layers
        )

    @property
    def kv_bytes_per_token(self) -> float:
        """KV-cache bytes per token on one GPU of the instance: its stage's layers, and with
        speculative decoding the prediction modules' own layers (as on the last stage)."""
        return self.layer_kv_bytes_per_token * (self.stage_layers + self.draft_layers)

    @property
    def memory_bytes(self) -> float:
        return self.system.gpu.memory_gib * kvcache.GIB

    def max_batch(self, seq_tokens: int) -> int:
        """Most sequences of `seq_tokens` one tp × pp group can hold in its KV cache."""
        cap = kvcache.kv_capacity_bytes(self.memory_bytes, self.weight_bytes_per_gpu)
        return kvcache.max_batch(cap, self.kv_bytes_per_token, seq_tokens)


Num = float | FloatArray


def gemm_s(gpu: GPU, g: Gemm, peak_tflops: float, weight_bytes: Num | None) -> FloatArray:
    """Roofline time of a GEMM: compute at `peak_tflops` × shape efficiency × the GPU's sustained
    tensor fraction (the training model's, unchanged: power-capped clocks under sustained tensor
    load), or HBM traffic of its operands — an (k × n) weight of `weight_bytes` per element (None:
    both operands are bf16 activations) and bf16 activations in and out — plus the kernel
    overhead."""
    rate = peak_tflops * 1e12 * gemm_efficiency(gpu, g) * gpu.sustained_tensor_fraction
    compute = g.flops / rate
    wb = ACT_BYTES if weight_bytes is None else weight_bytes
    moved = g.batch * (wb * g.k * g.n + ACT_BYTES * (g.m * g.k + g.m * g.n))
    return np.maximum(compute + gpu.kernel_overhead_us * 1e-6, memory_time_s(gpu, moved))


@dataclass(frozen=True)
class StepLoad:
    """What one engine step carries on one tp × pp group (one ep rank's share with ep > 1):
    `decode` running sequences whose KV caches hold `context_tokens` in all, and
    `prefill_tokens` prompt tokens of `prefill_seqs` prompts (whole, or with chunked prefill
    chunks of them). `prefill_cross_tokens`: the query-key pairs of those prompt tokens with
    their own prompts' tokens already in the KV cache (a chunk of c tokens after o cached ones:
    c·o; 0 for whole prompts), which the attention kernel computes unmasked beside each chunk's
    own causal c²/2. `prefill_square_tokens`: Σ c² over those prompts or chunks, where their
    lengths differ (0: all of the mean length, `prefill_tokens²/prefill_seqs`). Fields may be
    numpy arrays (one load per element; the step times come back as arrays)."""

    decode: Num = 0.0
    context_tokens: Num = 0.0
    prefill_tokens: Num = 0.0
    prefill_seqs: Num = 0.0
    prefill_cross_tokens: Num = 0.0
    prefill_square_tokens: Num = 0.0

    @property
    def tokens(self) -> Num:
        return self.decode + self.prefill_tokens

    def _per_prompt(self, total: Num) -> FloatArray:
        """`total` per prompt (or chunk) the step carries: their mean, 0 where it carries none."""
        seqs = np.asarray(self.prefill_seqs, dtype=np.float64)
        per = np.asarray(total, dtype=np.float64) / np.where(seqs > 0, seqs, 1.0)
        return np.asarray(np.where(seqs > 0, per, 0.0))

    @property
    def prompt_tokens(self) -> FloatArray:
        """Tokens per admitted prompt (their mean; 0 where the step admits none)."""
        return self._per_prompt(self.prefill_tokens)

    @property
    def own_pairs(self) -> FloatArray:
        """Σ c² over the prompts (or chunks): `prefill_square_tokens`, or where not given
        prompts of the mean length."""
        given = np.asarray(self.prefill_square_tokens, dtype=np.float64)
        mean = np.asarray(self.prefill_tokens, dtype=np.float64) * self.prompt_tokens
        return np.asarray(np.where(given > 0, given, mean))

    @property
    def square_per_prompt(self) -> FloatArray:
        """`own_pairs` per prompt (0 where the step carries none)."""
        return self._per_prompt(self.own_pairs)

    @property
    def cross_per_prompt(self) -> FloatArray:
        """`prefill_cross_tokens` per prompt (their mean; 0 where the step carries none)."""
        return self._per_prompt(self.prefill_cross_tokens)

    def with_prompts(self, seqs: Num, decode: Num | None = None) -> StepLoad:
        """The same running sequences (or `decode` of them) with `seqs` prompts of this load's
        mean prompt (tokens and cached pairs)."""
        return StepLoad(
            self.decode if decode is None else decode,
            self.context_tokens,
            self.prompt_tokens * seqs,
            seqs,
            self.cross_per_prompt * seqs,
            self.square_per_prompt * seqs,
        )

    def scaled(self, by: float) -> StepLoad:
        """This load's share `by` (every field times it): a micro-batch's."""
        return StepLoad(
            self.decode * by,
            self.context_tokens * by,
            self.prefill_tokens * by,
            self.prefill_seqs * by,
            self.prefill_cross_tokens * by,
            self.prefill_square_tokens * by,
        )


def _fields(load: StepLoad) -> tuple[Num, ...]:
    """A load's fields, in StepLoad's order."""
    return (
        load.decode,
        load.context_tokens,
        load.prefill_tokens,
        load.prefill_seqs,
        load.prefill_cross_tokens,
        load.prefill_square_tokens,
    )


def ep_pair_bytes(dep: Deployment, tokens: Num) -> dict[str, FloatArray]:
    """Bytes one ep rank sends to each ep rank (itself included) in the `dispatch` of `tokens`
    tokens' top_k copies to their experts and in the `combine` of the experts' outputs: a
    uniform all-to-all, each copy sent to its expert's rank (DeepEP's low-latency kernels send
    one per token and expert)."""
    m = dep.model
    per_copy = m.hidden / dep.ep * np.asarray(tokens, dtype=np.float64) * m.top_k
    return {
        "dispatch": np.asarray(per_copy * dep.dispatch_value_bytes),
        "combine": np.asarray(per_copy * ACT_BYTES),
    }


def ep_all_to_all_s(dep: Deployment, tokens: Num) -> dict[str, FloatArray]:
    """Time of one MoE layer's `dispatch` and `combine` of `tokens` tokens per ep rank on the
    ep group's layout (`Deployment.shapes`): the direct all-to-all (one NIC and one NVLink
    latency, each phase at its link's bandwidth) on any-to-any networks; on rail-only, whose
    rails do not reach each other, through the HB domain (the two-step all-to-all with
    forwarding, SYSTEM.md formula 3)."""
    return {
        k: direct_all_to_all_s(dep.links, dep.shapes["ep"], d)
        for k, d in ep_pair_bytes(dep, tokens).items()
    }


def ep_normal_all_to_all_s(dep: Deployment, tokens: Num) -> dict[str, FloatArray]:
    """Time of one MoE layer's `dispatch` and `combine` of `tokens` tokens per ep rank with
    DeepEP's normal (throughput) kernels, which serving runs for prefill (SGLang's `--deepep-mode
    auto`: normal kernels for prefill batches, low-latency ones for decode; DeepEP: "suitable
    for both training and inference prefilling"): the training model's deduplicated
    all-to-all (`comm_time.deduplicated_all_to_all_s`), each token once over its own rail to every
    other HB domain holding one of its experts (`routing.remote_domains`), then over NVLink to
    each GPU holding one (`routing.touched_ranks`). Rail-aligned, so rail-only pays no
    forwarding. Bytes as `ep_pair_bytes` (FP8 dispatch with fp8/fp4 weights)."""
    per_token = dep.model.hidden * np.asarray(tokens, dtype=np.float64)
    bytes_of = {"dispatch": dep.dispatch_value_bytes, "combine": ACT_BYTES}
    return {
        k: deduplicated_all_to_all_s(dep.model, dep.links, dep.shapes["ep"], per_token * b, dep.ep)
        for k, b in bytes_of.items()
    }


def decode_head_flops(m: Model) -> float:
    """FLOPs of one head of a decode step's attention per cached token: Q·K and P·V over the
    head width, 4·head_dim; MLA attends on the cached latent itself (the up-projections
    absorbed into the query and output, as DeepSeek-V2 §2.1.3 describes and FlashMLA runs),
    so Q·K spans kv_lora_rank + the RoPE width and P·V kv_lora_rank."""
    if m.mla and m.kv_lora_rank is not None:
        return 2.0 * (2.0 * m.kv_lora_rank + float(m.qk_rope_head_dim or 0))
    return 4.0 * m.head_dim


@dataclass(frozen=True)
class StageParts:
    """One pipeline stage's step by component (`parts`), with what the two-batch overlap needs:
    one MoE layer's compute (`moe_layer_s`: its GEMMs, attention, element-wise kernels and
    tensor-parallel collectives) and its all-to-alls by kind, per MoE layer of the step
    (`low_latency`: the running sequences' tokens; `normal`: the prompts', over the share of
    steps that carry one)."""

    parts: dict[str, FloatArray]
    moe_layer_s: FloatArray
    low_latency: dict[str, FloatArray]
    normal: dict[str, FloatArray]


def logits_s(dep: Deployment, load: StepLoad, queries: float = 1.0) -> FloatArray:
    """The vocabulary GEMM of the last stage: one row per prompt (its first token) and
    `queries` per running sequence (its next token and the drafts to verify). In bf16 whatever
    the deployment's precision: quantized checkpoints leave the LM head unquantized (ModelOpt's
    FP8 and NVFP4 recipes disable `*lm_head*`), as the training model's FP8 keeps it in bf16."""
    g = logit_gemm(dep.token_model, load.decode * queries + load.prefill_seqs, dep.tp)
    gpu = dep.system.gpu
    return gemm_s(gpu, g, gpu.peak_tflops, WEIGHT_BYTES["bf16"])


def expert_layer_s(dep: Deployment, tokens: FloatArray) -> FloatArray:
    """One MoE layer's expert GEMMs on one ep rank when every ep rank carries `tokens` tokens:
    the routed experts, the shared experts and the router (a scalar count evaluated once per
    deployment and remembered)."""
    if np.ndim(tokens) == 0:
        memo: dict[float, FloatArray] = dep._expert_layer_s  # type: ignore[attr-defined]
        return remembered(memo, float(tokens), lambda: _expert_layer_s(dep, tokens))
    return _expert_layer_s(dep, tokens)


def _expert_layer_s(dep: Deployment, tokens: FloatArray) -> FloatArray:
    """`expert_layer_s` evaluated."""
    m, gpu, t = dep.model, dep.system.gpu, dep.tp
    peak, wb = dep.peak_tflops, WEIGHT_BYTES[dep.precision]
    one = dep.token_model  # shapes per token: b = tokens, s = 1
    zero = np.zeros_like(tokens)
    # Each ep rank receives tokens·top_k routed tokens over its E/ep experts; at small batch
    # only the experts some token picks are read: each of the ep ranks' tokens picks top_k
    # distinct experts of E, so an expert goes unread with (1 − top_k/E)^(tokens·ep)
    touched = 1.0 - (1.0 - m.top_k / m.experts) ** (tokens * dep.ep)
    # the grouped GEMM runs the touched experts only (an expert with no token has no tile),
    # each on its share of the routed tokens
    share = np.where(touched > 0, touched, 1.0)  # (no token: nothing to divide)
    active = [
        replace(g, batch=g.batch * share, m=g.m / share)
        for g in expert_gemms(one, tokens, t, dep.ep)
    ]
    experts = sum((gemm_s(gpu, g, peak, wb) for g in active), zero)
    # every token also passes the shared experts (a dense MLP of shared × expert width, split
    # by tp as the dense MLP is) and the router (h → E, bf16), as in training
    shared_width = m.shared_experts * m.expert_ffn_
    if m.shared_experts:
        shared = mlp_gemms(one, tokens, t, shared_width)
        experts = experts + sum((gemm_s(gpu, g, peak, wb) for g in shared), zero)
    return np.asarray(experts + gemm_s(gpu, router_gemm(one, tokens), gpu.peak_tflops, ACT_BYTES))


def stage_parts(dep: Deployment, load: StepLoad, queries: float | None = None) -> StageParts:
    """Time of one pipeline stage for `load` (loads with at least one token), by component;
    each running sequence puts `queries` tokens through it (default
    `Deployment.verified_tokens`), which read its KV cache once."""
    m, gpu, t = dep.model, dep.system.gpu, dep.tp
    peak, wb = dep.peak_tflops, WEIGHT_BYTES[dep.precision]
    q = float(dep.verified_tokens if queries is None else queries)
    decode = np.asarray(load.decode, dtype=np.float64) * q  # the running sequences' tokens
    tokens = decode + np.asarray(load.prefill_tokens, dtype=np.float64)
    zero = np.zeros_like(tokens)
    layers, moe_layers = dep.stage_layers, dep.stage_moe_layers
    one = dep.token_model  # shapes per token: b = tokens, s = 1
    # the attention block's linear layers (QKV and output; MLA's down- and up-projections)
    projections = [g for g in attention_gemms(one, tokens, t) if not g.attention]
    dense_mlp = sum((gemm_s(gpu, g, peak, wb) for g in mlp_gemms(one, tokens, t)), zero)
    per_layer = sum((gemm_s(gpu, g, peak, wb) for g in projections), zero)
    gemm = layers * per_layer + (layers - moe_layers) * dense_mlp
    experts = expert_layer_s(dep, tokens) if moe_layers else zero
    gemm = gemm + moe_layers * experts
    # attention: the prompts' fused causal kernel, timed as in training (the forward pass at
    # the kernel's measured speed for the prompt length), then the decode kernel: every running
    # sequence's KV cache read from HBM (its FLOPs at the MAMF rate, a bound it never reaches)
    heads = math.ceil(m.heads / t)
    # Q·K over the query-key head width, P·V over the value width (MLA: 192 and 128)
    head_flops = 2.0 * (m.qk_head_dim + m.v_head_dim_)
    # each chunk's own tokens causally (c² unmasked, half of it computed), and its cached
    # prefix unmasked (c·o, counted twice here as the kernel time halves every unmasked FLOP)
    own = load.own_pairs
    cached = np.asarray(load.prefill_cross_tokens, dtype=np.float64)
    cross = 2.0 * cached
    unmasked_flops = head_flops * (own + cross) * heads
    # the kernel's length, as its query tokens see it: the chunk (the prompt when whole) and
    # the prefix their queries read; for a step of equal prompts, their length (a step
    # carrying a share of a prompt, or half of one in a two-batch overlap's micro-batch, still
    # runs the whole prompt's kernel on that share)
    tokens_in = np.asarray(load.prefill_tokens, dtype=np.float64)
    kernel_len = (own + cached) / np.where(tokens_in > 0, tokens_in, 1.0)
    # A steady-state step carries a fraction of a prompt (`estimate.steady_load`): the prompt
    # kernels then run on that share of the steps, each with a whole prompt's work.
    share = np.clip(np.asarray(load.prefill_seqs, dtype=np.float64), 0.0, 1.0)
    runs = np.where(share > 0, share, 1.0)  # the share of steps a prompt kernel runs on
    per_run = 1.0 / runs
    causal = np.where(own + cross > 0, own / np.where(own + cross > 0, own + cross, 1.0), 1.0)
    prefill = flash_attention_time_s(
        gpu, unmasked_flops * per_run, np.maximum(kernel_len, 1.0), causal_share=causal
    )["forward"]
    pre_s = np.where(share > 0, share * prefill, 0.0)
    bf16 = gpu.peak_tflops * 1e12 * gpu.matmul_efficiency * gpu.sustained_tensor_fraction
    dec_flops = decode_head_flops(m) * load.context_tokens * heads * q
    kv_layer = dep.layer_kv_bytes_per_token
    decoding = np.asarray(np.asarray(load.decode) > 0, dtype=np.float64)
    dec_s = np.maximum(
        memory_time_s(gpu, load.context_tokens * kv_layer, decoding),
        dec_flops / bf16 + decoding * 1e-6 * gpu.kernel_overhead_us,
    )
    ew_bytes = ELEMENTWISE_KERNELS_PER_LAYER * 2.0 * ACT_BYTES * tokens * m.hidden
    ew_s = memory_time_s(
        gpu, ew_bytes, ELEMENTWISE_KERNELS_PER_LAYER, gpu.elementwise_forward_efficiency
    )
    act = tokens * m.hidden * ACT_BYTES
    lk, shapes = dep.links, dep.shapes
    tp_layer = 2.0 * tp_all_reduce_s(dep, act)
    out = {
        "gemm": gemm,
        "attention": layers * (pre_s + dec_s),
        "elementwise": layers * ew_s,
        "tp_comm": layers * tp_layer,
        "ep_comm": zero,
        "pp_comm": zero,
        "logits": logits_s(dep, load, q),
    }
    ll = normal = {"dispatch": zero, "combine": zero}
    if moe_layers and dep.ep > 1:
        # the prompts go through DeepEP's normal kernels and the running sequences' tokens
        # through the low-latency ones, as two batches (SGLang's --deepep-mode auto runs
        # prefill and decode batches apart)
        prompts = np.asarray(load.prefill_tokens, dtype=np.float64)
        ll = {k: np.where(decode > 0, v, 0.0) for k, v in ep_all_to_all_s(dep, decode).items()}
        normal = {
            k: np.where(prompts > 0, runs * v, 0.0)
            for k, v in ep_normal_all_to_all_s(dep, prompts * per_run).items()
        }
        per_moe_layer = ll["dispatch"] + ll["combine"] + normal["dispatch"] + normal["combine"]
        out["ep_comm"] = np.asarray(moe_layers * per_moe_layer)
    if dep.pp > 1:
        out["pp_comm"] = p2p_s(lk, act, shapes["pp"])
    parts = {k: np.where(tokens > 0, v, 0.0) for k, v in out.items()}
    moe_layer_s = per_layer + experts + pre_s + dec_s + ew_s + tp_layer
    return StageParts(parts, np.asarray(moe_layer_s), ll, normal)


def tp_all_reduce_s(dep: Deployment, size_bytes: FloatArray) -> FloatArray:
    """One tensor-parallel all-reduce of `size_bytes` per GPU: NCCL's (`group_collective_s`:
    the faster of its Simple and low-latency rings inside a domain), or the serving
    framework's own kernel where it applies and is faster (`Deployment.framework_all_reduce`;
    TensorRT-LLM's AUTO strategy and vLLM fall back to NCCL above its size limit)."""
    shape = dep.shapes["tp"]
    nccl = group_collective_s(dep.links, shape, size_bytes)
    curve = dep.framework_all_reduce
    if curve is None:
        return nccl
    return np.asarray(np.minimum(nccl, curve.time_s(shape.x, size_bytes)))


@dataclass(frozen=True)
class PromptSplit:
    """A load of n = k + f prompts (k whole) as the two loads it stands for: `more` with
    k + 1 prompts, in the share `f` of the steps (`part`: where 0 < f), and `fewer` with k,
    timed at one running sequence where that leaves nothing to run (`empty`: to keep 0/0 out
    of the GEMMs; such steps count 0)."""

    f: FloatArray
    part: BoolArray
    empty: BoolArray
    more: StepLoad
    fewer: StepLoad


def split_prompts(load: StepLoad) -> PromptSplit:
    """`load`'s share of a prompt as the steps with one more and one fewer (`PromptSplit`)."""
    n = np.asarray(load.prefill_seqs, dtype=np.float64)
    k = np.floor(n)
    f = n - k
    decode = np.asarray(load.decode, dtype=np.float64)
    empty = (k == 0) & (decode <= 0)
    more = load.with_prompts(k + 1.0)
    fewer = load.with_prompts(k, np.where(empty, 1.0, decode))
    return PromptSplit(f, np.asarray(f > 0), np.asarray(empty), more, fewer)


def stage_time_s(dep: Deployment, load: StepLoad) -> dict[str, FloatArray]:
    """Time of one pipeline stage for `load` (loads with at least one token), by component.

    Prompts come whole: a load carrying n = k + f prompts (k whole, 0 < f < 1; the steady
    state's average step, a pipeline stage's micro-batch) stands for f of the steps carrying
    k + 1 prompts and 1 − f carrying k, each prompt of the load's mean length: every component
    is that mixture, since a step is not a step with a fraction of a prompt (its GEMMs may be
    compute-bound where the others stream weights). The step itself is
    `overlapped_stage_time_s`."""
    sp = split_prompts(load)
    f, part, empty = sp.f, sp.part, sp.empty
    if not bool(np.any(part)):
        return overlapped_stage_time_s(dep, load)
    a = overlapped_stage_time_s(dep, sp.more)
    b = overlapped_stage_time_s(dep, sp.fewer)
    whole = overlapped_stage_time_s(dep, load) if bool(np.any(~part)) else a
    return {
        key: np.asarray(
            np.where(part, f * v + (1.0 - f) * np.where(empty, 0.0, b[key]), whole[key])
        )
        for key, v in a.items()
    }


def overlapped_stage_time_s(dep: Deployment, load: StepLoad) -> dict[str, FloatArray]:
    """One pipeline stage's step for `load`, by component (`stage_parts`), or with
    `two_batch_overlap` as two micro-batches.

    With `two_batch_overlap` the step runs as two micro-batches of half the load each, which
    alternate layer by layer (DeepSeek-V3/R1 inference system overview, "dual-batch overlap":
    "the communication cost of one microbatch is hidden behind the computation of the
    other"; SGLang's and vLLM's two-batch overlap). Every layer runs twice at half the load (a
    memory-bound GEMM streams its weights twice; the vocabulary GEMM after the layers runs once
    on the whole batch). Each MoE layer then takes the longer of its compute of both
    micro-batches (plus the SM time the all-to-all kernels take from it) and their
    all-to-alls: in decode the low-latency kernels hold no SMs, so compute runs on all of them;
    in prefill DeepEP's normal kernels hold `DEEPEP_NORMAL_SMS` while they run, and the compute
    runs on the rest (deepseek-ai/profile-data: "Computation 108 SMs, Communication 24 SMs" in
    prefill, "132 SMs, 0 SMs" in decode). Only the last micro-batch's combine of the stage's
    last MoE layer has nothing to hide behind. The time beyond the compute alone is
    `ep_comm`. A step of fewer than two sequences runs as one batch (a sequence is not split).
    """
    if not dep.two_batch_overlap:
        return stage_parts(dep, load).parts
    st = stage_parts(dep, load.scaled(0.5))
    tokens = np.asarray(load.tokens, dtype=np.float64)
    parts = {k: 2.0 * v for k, v in st.parts.items()}
    parts["logits"] = np.where(tokens > 0, logits_s(dep, load, dep.verified_tokens), 0.0)
    normal = 2.0 * (st.normal["dispatch"] + st.normal["combine"])
    comm = 2.0 * (st.low_latency["dispatch"] + st.low_latency["combine"]) + normal
    compute = 2.0 * st.moe_layer_s
    # while the normal kernels run they hold their SMs, and the compute loses that SM time
    held = DEEPEP_NORMAL_SMS / dep.system.gpu.sm_count * normal
    layer = np.maximum(compute + held, comm)
    last = st.low_latency["combine"] + st.normal["combine"]
    parts["ep_comm"] = np.where(tokens > 0, dep.stage_moe_layers * (layer - compute) + last, 0.0)
    # a lone sequence is not split in two: such a step runs as one batch, without the overlap
    # (timed for those loads only: a search's arrays hold a few of them among many)
    seqs = np.asarray(load.decode, dtype=np.float64) + np.asarray(load.prefill_seqs)
    alone = seqs < 2.0
    if not np.any(alone):
        return parts
    if seqs.ndim == 0:
        return stage_parts(dep, load).parts
    at = np.nonzero(alone)
    sub = StepLoad(
        *(np.broadcast_to(np.asarray(f, dtype=np.float64), seqs.shape)[at] for f in _fields(load))
    )
    one = stage_parts(dep, sub).parts
    out = {}
    for k, v in parts.items():
        full = np.array(np.broadcast_to(v, seqs.shape), dtype=np.float64)
        full[at] = one[k]
        out[k] = full
    return out


def draft_s(dep: Deployment, load: StepLoad) -> FloatArray:
    """Time to draft `Deployment.speculative_tokens` tokens for each of `load`'s running
    sequences: as many passes, one after the other, of the multi-token prediction module over
    one token per sequence (DeepSeek-V3 report §2.2: a transformer layer, its 2h → h projection
    and the shared output head), the layer timed as the stage's average layer (with its own
    KV cache), as the training model counts the module."""
    d = dep.speculative_tokens
    decode = np.asarray(load.decode, dtype=np.float64)
    if not d:
        return np.zeros_like(decode)
    # timed at one sequence where none runs (and masked below), to keep 0/0 out of the GEMMs
    running = StepLoad(decode=np.where(decode > 0, decode, 1.0), context_tokens=load.context_tokens)
    st = stage_parts(dep, running, queries=1.0).parts
    layer = (sum(st.values()) - st["logits"] - st["pp_comm"]) / dep.stage_layers
    proj = gemm_s(
        dep.system.gpu,
        mtp_projection_gemm(dep.token_model, running.decode, dep.tp),
        dep.peak_tflops,
        WEIGHT_BYTES[dep.precision],
    )
    return np.asarray(np.where(decode > 0, d * (layer + proj + st["logits"]), 0.0))


def whole_share(n: Num, pp: float) -> FloatArray:
    """What one of pp micro-batches carries of `n` sequences or prompts, none split: n/pp, or
    one whole where fewer than pp run (all of them where less than one)."""
    n = np.asarray(n, dtype=np.float64)
    return np.asarray(np.maximum(n / pp, np.minimum(n, 1.0)))


def micro_batch_load(load: StepLoad, pp: float) -> StepLoad:
    """One of the pp micro-batches in flight: a 1/pp share of the load, but a running sequence
    is not split: with fewer sequences than stages each micro-batch holds one, whose token
    crosses every stage in turn (a step is then pp stage times of one sequence, each reading
    its whole KV cache of that stage), and the other stages wait."""
    if pp == 1:
        return load
    dec = np.asarray(load.decode, dtype=np.float64)
    whole = whole_share(dec, pp)  # sequences per micro-batch
    by = np.where(dec > 0, whole / np.where(dec > 0, dec, 1.0), 1.0 / pp)
    return StepLoad(
        dec * by,
        np.asarray(load.context_tokens, dtype=np.float64) * by,
        np.asarray(load.prefill_tokens, dtype=np.float64) / pp,
        np.asarray(load.prefill_seqs, dtype=np.float64) / pp,
        np.asarray(load.prefill_cross_tokens, dtype=np.float64) / pp,
        np.asarray(load.prefill_square_tokens, dtype=np.float64) / pp,
    )


def step_times(dep: Deployment, load: StepLoad) -> tuple[FloatArray, dict[str, FloatArray]]:
    """Time of one engine step carrying `load` on a tp × pp group, by component, as arrays: pp
    stages, each with the batch split in pp micro-batches in flight. A running sequence gains
    one token per step, or `Deployment.tokens_per_step` on average with speculative decoding:
    then every step verifies each running sequence's drafts with its token and drafts the next
    ones on the last stage (`draft`, `draft_s`).

    With ep > 1 the ep ranks step together (`lockstep_step_s`). A steady-state load of
    n = k + f prompts per rank (0 < f < 1: each rank carries the k + 1st prompt in f of the
    steps, independently of the others) then stands for F = 1 − (1 − f)^ep of the steps
    lasting as long as a rank's step with k + 1 prompts, the steps where any rank carries one,
    and 1 − F as one with k; in the former the experts see the ranks' mean load, f/F of them
    carrying the k + 1st prompt (`experts_s`). A load of whole prompts is one rank's step."""
    sp = split_prompts(load)
    f, part, empty = sp.f, sp.part, sp.empty
    if dep.ep == 1 or not bool(np.any(part)):
        return _rank_step_times(dep, load)
    _, a = _rank_step_times(dep, sp.more)
    _, b = _rank_step_times(dep, sp.fewer)
    whole = _rank_step_times(dep, load)[1] if bool(np.any(~part)) else a
    slow = 1.0 - (1.0 - f) ** dep.ep
    carrying = f / np.where(slow > 0, slow, 1.0)
    others = np.where(empty, 0.0, experts_s(dep, sp.fewer))
    a = dict(a)
    swap = (1.0 - carrying) * (others - experts_s(dep, sp.more))
    a["gemm"] = a["gemm"] + np.where(part, swap, 0.0)
    parts = {
        key: np.asarray(
            np.where(part, slow * v + (1.0 - slow) * np.where(empty, 0.0, b[key]), whole[key])
        )
        for key, v in a.items()
    }
    return np.asarray(sum(parts.values())), parts


def _rank_step_times(dep: Deployment, load: StepLoad) -> tuple[FloatArray, dict[str, FloatArray]]:
    """`step_times` of one rank's own load, however its ep peers' steps go."""
    p = float(dep.pp)
    share = micro_batch_load(load, p)
    parts = {k: p * v for k, v in stage_time_s(dep, share).items()}
    if dep.speculative_tokens:
        parts["draft"] = p * draft_s(dep, share)
    return np.asarray(sum(parts.values())), parts


def prompt_traversal_s(
    dep: Deployment, load: StepLoad, peers: StepLoad | None = None
) -> FloatArray:
    """Time from the start of a step carrying `load` until its prompts' first tokens come out
    of the last stage: the micro-batch that carries a prompt takes it whole (serving engines
    do not split a prompt over pipeline micro-batches: vLLM and TensorRT-LLM schedule whole
    requests per micro-batch), with its share of the running sequences (`micro_batch_load`: at
    least one whole sequence where any runs) and its 1/pp share of the step's other prompts,
    and crosses all pp stages at that micro-batch's stage time. Without pipelining it is the
    rank's own step (`step_times` of its load).

    With ep > 1 the rank's expert GEMMs see the ranks' mean load, its own and that of its
    ep − 1 `peers` (default: the same as its own), micro-batch by micro-batch
    (`lockstep_step_s`); a rank carrying a prompt the others do not is the slowest."""
    p = float(dep.pp)
    if dep.pp == 1:
        micro = load
        total = _rank_step_times(dep, load)[0]
    else:
        seqs = np.asarray(load.prefill_seqs, dtype=np.float64)
        carried = whole_share(seqs, p)  # at least the whole prompt
        running = micro_batch_load(load, p)  # its share of the running sequences, none split
        micro = load.with_prompts(carried, running.decode)
        micro = replace(micro, context_tokens=running.context_tokens)
        # (a first token needs no drafting: the drafts of the step are not waited for)
        total = p * np.asarray(sum(stage_time_s(dep, micro).values()))
    if dep.ep == 1 or peers is None:
        return np.asarray(total)
    theirs = micro_batch_load(peers, p) if dep.pp > 1 else peers
    mean = mean_load([micro, theirs], [1.0, dep.ep - 1.0])
    swap = micro_batch_experts_s(dep, mean) - micro_batch_experts_s(dep, micro)
    return np.asarray(total + p * swap)


def micro_batch_entries_s(dep: Deployment, load: StepLoad, prompts: int) -> FloatArray:
    """When each of a step's `prompts` prompts (or chunks), in admission order, enters the
    first stage after the step's start: the step's micro-batches enter one stage time apart,
    m = pp of them where sequences run (`micro_batch_load`), else one per prompt, at most pp
    (`pipeline_fill_s`), each a stage time of period / m, and the prompts take them in turn
    (vLLM gives each new request to a micro-batch's scheduler in turn). All 0 without
    pipelining."""
    if dep.pp == 1 or prompts <= 0:
        return np.zeros(max(prompts, 0))
    running = float(np.asarray(load.decode)) > 0
    m = dep.pp if running else min(prompts, dep.pp)
    stage = step_time_s(dep, load)[0] / m
    return np.asarray((np.arange(prompts) % m) * stage)


def prompt_exits_s(dep: Deployment, load: StepLoad) -> FloatArray:
    """Time from the start of a step carrying `load` (whole prompts, `prefill_seqs` of them)
    until each prompt's first token comes out of the last stage, in admission order: its
    micro-batch's entry (`micro_batch_entries_s`) and its crossing of every stage
    (`prompt_traversal_s`). The first prompt's is the traversal; in a step that starts an
    empty pipeline the last one's is the step and its fill (`cold_step_s`). Without pipelining
    each is the step."""
    n = round(float(np.asarray(load.prefill_seqs)))
    cross = float(prompt_traversal_s(dep, load))
    return np.asarray(cross + micro_batch_entries_s(dep, load, n))


def pipeline_fill_s(dep: Deployment, step_s: Num, prompts: Num) -> FloatArray:
    """What the last of a step's micro-batches waits beyond the step (`step_times`: a pipeline
    period) when `prompts` prompts start an empty pipeline alone, as a lone request or a
    prefill chunk does: they fill m = min(prompts, pp) micro-batches of one stage time each,
    step / m, and the last still crosses pp − 1 stages (0 without pipelining)."""
    m = np.minimum(np.maximum(np.asarray(prompts, dtype=np.float64), 1.0), dep.pp)
    return np.asarray((dep.pp - 1) * np.asarray(step_s, dtype=np.float64) / m)


def cold_step_s(dep: Deployment, load: StepLoad) -> float:
    """Time of a step (`step_time_s`); one with no running sequence starts an empty pipeline
    (a lone request, a static batch's prefill, the step that starts an idle engine) and lasts
    until its last prompt has crossed every stage (`pipeline_fill_s` more)."""
    step = step_time_s(dep, load)[0]
    if np.any(np.asarray(load.decode) > 0):
        return step
    return step + float(pipeline_fill_s(dep, step, load.prefill_seqs))


def step_time_s(dep: Deployment, load: StepLoad) -> tuple[float, dict[str, float]]:
    """`step_times` of one (scalar) load, in seconds."""
    total, parts = step_times(dep, load)
    return float(total), {k: float(v) for k, v in parts.items()}


def expert_stage_s(dep: Deployment, tokens: Num, sequences: Num) -> FloatArray:
    """The expert GEMMs of one stage's micro-batch that puts `tokens` tokens of `sequences`
    sequences through each MoE layer, on every ep rank: the stage's MoE layers, with
    `two_batch_overlap` each as two halves (a lone sequence is not split), as `stage_parts`
    and `overlapped_stage_time_s` count them; 0 for a dense model or no token."""
    tok = np.asarray(tokens, dtype=np.float64)
    if not dep.stage_moe_layers:
        return np.zeros_like(tok)
    safe = np.where(tok > 0, tok, 1.0)  # (timed at one token where none runs, masked below)
    per = expert_layer_s(dep, safe)
    if dep.two_batch_overlap:
        split = np.asarray(sequences, dtype=np.float64) >= 2.0
        per = np.where(split, 2.0 * expert_layer_s(dep, np.asarray(0.5 * safe)), per)
    return np.asarray(np.where(tok > 0, dep.stage_moe_layers * per, 0.0))


def experts_s(dep: Deployment, load: StepLoad) -> FloatArray:
    """The expert GEMMs of a step carrying `load` on one ep rank, as `step_times` counts them
    for a rank's own load: pp micro-batches (`micro_batch_load`) over the stage's MoE layers
    (`micro_batch_experts_s`); 0 for a dense model."""
    p = float(dep.pp)
    return np.asarray(p * micro_batch_experts_s(dep, micro_batch_load(load, p)))


def micro_batch_experts_s(dep: Deployment, micro: StepLoad) -> FloatArray:
    """The expert GEMMs of one stage's micro-batch `micro` (`expert_stage_s`), one carrying a
    share of a prompt as that mixture of its steps (`stage_time_s`)."""
    q = dep.verified_tokens

    def experts(ld: StepLoad) -> FloatArray:
        decode = np.asarray(ld.decode, dtype=np.float64)
        tokens = decode * q + np.asarray(ld.prefill_tokens, dtype=np.float64)
        return expert_stage_s(dep, tokens, decode + np.asarray(ld.prefill_seqs))

    sp = split_prompts(micro)
    fewer = np.where(sp.empty, 0.0, experts(sp.fewer))
    return np.asarray(
        np.where(sp.part, sp.f * experts(sp.more) + (1.0 - sp.f) * fewer, experts(micro))
    )


def mean_load(loads: list[StepLoad], ranks: list[float] | None = None) -> StepLoad:
    """The ranks' mean load, field by field (what each rank's experts see, tokens being routed
    over every rank's experts), each load standing for `ranks` of them (default one each);
    fields may be arrays."""
    weights = ranks if ranks is not None else [1.0] * len(loads)
    total = float(sum(weights))
    columns = zip(*map(_fields, loads), strict=True)
    return StepLoad(
        *(
            sum(
                (w * np.asarray(v, dtype=np.float64) for w, v in zip(weights, vs, strict=True)),
                np.zeros(()),
            )
            / total
            for vs in columns
        )
    )


def lockstep_step_s(
    dep: Deployment,
    loads: list[StepLoad],
    rank_s: list[float],
    experts: Callable[[StepLoad], float] | None = None,
) -> float:
    """One step of an instance whose ep ranks step together, each with its own batch (`loads`;
    an empty load for a rank with nothing to run) that alone would take `rank_s`: the slowest
    rank, since every MoE layer's dispatch waits for all of them (DeepSeek-style data-parallel
    attention with expert parallelism: SGLang's DP attention runs an idle batch on a rank with
    no request so that the others' all-to-alls complete). Its experts do not see its own
    tokens but the ranks' mean load (tokens are routed over every rank's experts), so each
    rank's time has its own expert GEMMs (`experts_s`) replaced by the mean load's
    (`mean_load`; a prompt on one of ep ranks counts as that share of a step carrying it, the
    mixture of `stage_time_s`, which overstates the experts' time where they stream their
    weights whatever the tokens: by ≈ 1/ep of a prompt step's expert GEMMs). The rest of
    a rank's step (its attention, dense layers, all-to-alls of its own tokens) stays its own.
    With the two-batch overlap the expert GEMMs are taken as additive, though an all-to-all
    longer than a layer's compute would hide a change in them. `experts`: `experts_s` of a
    load, cached by the caller (default: it)."""
    ex = experts or (lambda ld: float(experts_s(dep, ld)))
    mean = ex(mean_load(loads))
    busy = [s - ex(ld) + mean for ld, s in zip(loads, rank_s, strict=True) if float(ld.tokens) > 0]
    return max(busy, default=0.0)
