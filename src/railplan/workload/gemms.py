"""The matrix multiplications of one transformer layer, per GPU, per micro-batch.

Shapes follow Megatron-LM's tensor parallelism (Shoeybi et al. 2019): QKV and MLP-up are
column-parallel (output split by tp), attention projection and MLP-down are row-parallel (input
split by tp); attention is split by heads. A GEMM is (batch, M, N, K) with 2·batch·M·N·K FLOPs.
Everything is written over numpy arrays (b = micro-batch, t = tp) so that one call covers any
number of strategies.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from railplan.specs import Model
from railplan.workload.routing import slot_factor

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Gemm:
    """One forward GEMM of a layer: `batch` independent (M×K)·(K×N) products."""

    name: str
    batch: FloatArray
    m: FloatArray
    n: FloatArray
    k: FloatArray
    attention: bool = False  # the score/context products (recomputed by selective recompute)
    # Transformer Engine's FP8 data flow (layer_time.fp8_cast_times_s): `column_parallel`, its
    # input is all-gathered under sequence parallelism; `norm_input`, that input comes from a
    # norm fused into the GEMM's module (Megatron-Core's TELayerNormColumnParallelLinear), which
    # writes it in FP8; `row_parallel`, its output is reduce-scattered under sequence
    # parallelism, so its output gradient is all-gathered
    column_parallel: bool = False
    norm_input: bool = False
    row_parallel: bool = False

    @property
    def flops(self) -> FloatArray:
        return 2.0 * self.batch * self.m * self.n * self.k

    def backward(self) -> tuple[Gemm, Gemm]:
        """Input-gradient (M×N)·(N×K) and weight-gradient (K×M)·(M×N) products."""
        return (
            Gemm(self.name + ".dgrad", self.batch, self.m, self.k, self.n, self.attention),
            Gemm(self.name + ".wgrad", self.batch, self.k, self.n, self.m, self.attention),
        )


def _f(x: object) -> FloatArray:
    return np.asarray(x, dtype=np.float64)


def attention_gemms(model: Model, b: object, t: object, sp: object = 0.0) -> list[Gemm]:
    """QKV, score (QKᵀ), context (softmax·V) and output projection of one layer.

    MLA (DeepSeek-V2/V3, Megatron-Core's MLASelfAttention): the down-projections into the
    query and key-value latents run duplicated on every tensor-parallel rank, on its
    sequence-parallel shard where `sp` (Megatron-Core's TE spec since core_v0.14.0: `TELinear`,
    `parallel_mode="duplicated"`, on the s/tp hidden states; inference engines replicate them
    over every token, SGLang's and vLLM's `ReplicatedLinear`); the
    up-projections, the heads and the output projection are split by tp. The column-parallel
    projections whose backward all-reduce hides behind their weight gradient are named
    `qkv` (standard) or `q_up`/`kv_up` (MLA): ATTENTION_INPUT_GEMMS."""
    b, t = _f(b), _f(t)
    s, h = float(model.seq), float(model.hidden)
    tokens = b * s
    shard_tokens = tokens / np.where(_f(sp) > 0, t, 1.0)  # a duplicated GEMM's rows
    one = np.ones_like(b * t)
    heads = b * model.heads / t
    qk, v = float(model.qk_head_dim), float(model.v_head_dim_)
    core = [
        Gemm("score", heads, s * one, s * one, qk * one, attention=True),
        Gemm("context", heads, s * one, v * one, s * one, attention=True),
        Gemm("proj", one, tokens, h * one, model.heads * v / t, row_parallel=True),
    ]
    if not model.mla:
        qkv_n = (h + 2.0 * model.kv_dim) / t
        return [_norm_fed("qkv", one, tokens, qkv_n, h * one), *core]
    a = float(model.heads)
    kv_lora, rope = float(model.kv_lora_rank or 0), float(model.qk_rope_head_dim or 0)
    nope = float(model.qk_nope_head_dim or 0)
    if model.q_lora_rank:
        q_lora = float(model.q_lora_rank)
        q = [
            Gemm("q_down", one, shard_tokens, q_lora * one, h * one),
            _norm_fed("q_up", one, tokens, a * qk / t, q_lora * one),
        ]
    else:
        q = [Gemm("q_up", one, tokens, a * qk / t, h * one, column_parallel=True)]
    kv = [
        Gemm("kv_down", one, shard_tokens, (kv_lora + rope) * one, h * one),
        _norm_fed("kv_up", one, tokens, a * (nope + v) / t, kv_lora * one),
    ]
    return [*q, *kv, *core]


ATTENTION_INPUT_GEMMS = ("qkv", "q_up", "kv_up")


def _norm_fed(name: str, batch: FloatArray, m: FloatArray, n: FloatArray, k: FloatArray) -> Gemm:
    """A column-parallel GEMM whose input a norm fused into its module writes: QKV
    (TELayerNormColumnParallelLinear), MLA's up projections after the latent norms
    (Megatron-Core core_v0.12.0 with qk_layernorm)."""
    return Gemm(name, batch, m, n, k, column_parallel=True, norm_input=True)


def mlp_gemms(model: Model, b: object, t: object, ffn: int | None = None) -> list[Gemm]:
    """MLP up (and gate) and down projections; `ffn` overrides the width (MoE experts). The
    dense MLP's up projection has the pre-MLP norm fused into it; an MoE layer's (shared)
    experts take their input from a norm of its own, which also feeds the router."""
    b, t = _f(b), _f(t)
    f = float(ffn or model.ffn_)
    tokens = b * model.seq
    one = np.ones_like(b * t)
    up_width = f * (model.mlp_matrices - 1)
    return [
        Gemm(
            "mlp_up",
            one,
            tokens,
            up_width / t,
            model.hidden * one,
            column_parallel=True,
            norm_input=ffn is None,
        ),
        Gemm("mlp_down", one, tokens, model.hidden * one, f / t, row_parallel=True),
    ]


def layer_gemms(model: Model, b: object, t: object, sp: object = 0.0) -> list[Gemm]:
    """All forward GEMMs of one dense layer on one GPU (`sp`: sequence parallelism)."""
    return attention_gemms(model, b, t, sp) + mlp_gemms(model, b, t)


def logit_gemm(model: Model, b: object, t: object) -> Gemm:
    """The output (vocabulary) projection, split by tp over the vocabulary."""
    b, t = _f(b), _f(t)
    one = np.ones_like(b * t)
    return Gemm("logits", one, b * model.seq, model.vocab / t, model.hidden * one)


def mtp_projection_gemm(model: Model, b: object, t: object) -> Gemm:
    """A multi-token prediction module's projection of the concatenated 2h → h (`eh_proj`,
    column-parallel: its output split by tp)."""
    b, t = _f(b), _f(t)
    one = np.ones_like(b * t)
    # TEColumnParallelLinear (Megatron-Core `multi_token_prediction.py`, core_v0.14.0), fed by
    # the concatenated outputs of two separate norms
    return Gemm(
        "eh_proj",
        one,
        b * model.seq,
        model.hidden / t,
        2.0 * model.hidden * one,
        column_parallel=True,
    )


def expert_gemms(
    model: Model, b: object, t: object, ep: object, etp: object | None = None
) -> list[Gemm]:
    """Expert MLPs of one MoE layer on one GPU, as grouped GEMMs over its experts/ep experts.

    A tp group's b·s tokens carry b·s·top_k·slot_factor token slots (capacity-padded, or the
    busiest rank's load when dropless: workload/routing.py); a GPU runs those of its expert
    tensor-parallel group of `etp` ranks (default tp), etp/tp of them, with the expert weights
    split over the etp ranks (at etp = tp: every slot of the tp group, 1/tp of each expert).
    """
    slots_per_token = model.top_k * slot_factor(model, np.asarray(ep, dtype=np.int64))
    b, t, ep = _f(b), _f(t), _f(ep)
    e = t if etp is None else _f(etp)
    local_experts = model.experts / ep
    slots = b * model.seq * slots_per_token * e / t
    per_expert = slots / local_experts
    f = float(model.expert_ffn_)
    one = np.ones_like(b * t * ep * e)
    return [
        Gemm(
            "expert_up",
            local_experts * one,
            per_expert,
            f * (model.mlp_matrices - 1) / e,
            model.hidden * one,
        ),
        Gemm("expert_down", local_experts * one, per_expert, model.hidden * one, f / e),
    ]


def router_gemm(model: Model, b: object) -> Gemm:
    """The gating projection h → experts of one MoE layer."""
    b = _f(b)
    one = np.ones_like(b)
    return Gemm("router", one, b * model.seq, model.experts * one, model.hidden * one)
