"""Model spec: the transformer's shape (dense GPT/Llama-style, optionally MoE)."""

from __future__ import annotations

from typing import Annotated, Self

from pydantic import Field, PositiveInt, StrictInt, model_validator

from railplan.specs.base import Range, Spec


class Model(Spec):
    """A decoder-only transformer.

    `ffn_hidden` defaults to 4·hidden; `gated_mlp` means SwiGLU-style MLPs with three matrices
    (up, gate, down). `kv_heads` < `heads` is grouped-query attention. MoE fields describe expert
    layers (used by the MoE work; a dense model has `experts == 1`): `experts` routed experts of
    width `expert_ffn_hidden`, `top_k` of them per token, plus `shared_experts` that every token
    passes (DeepSeekMoE); the first `first_dense_layers` layers are dense, then every
    `moe_layer_interval`-th layer is an MoE layer.
    MLA (multi-head latent attention, DeepSeek-V2/V3) when `kv_lora_rank` is set: queries through
    a `q_lora_rank` bottleneck (or a full projection when None), keys and values from a
    `kv_lora_rank` latent; per head `qk_nope_head_dim` + `qk_rope_head_dim` for Q·K and
    `v_head_dim` for V.
    Group-limited routing (DeepSeek-V3's node-limited routing): the routed experts form
    `expert_groups` equal groups and each token picks its experts from at most `route_groups`
    of them (0 = from all).
    """

    name: str = "custom"
    hidden: PositiveInt
    layers: PositiveInt
    heads: PositiveInt
    kv_heads: PositiveInt | None = None
    ffn_hidden: PositiveInt | None = None
    gated_mlp: bool = False
    vocab: PositiveInt = 51200
    seq: PositiveInt = 2048
    context_tokens: Annotated[StrictInt, Range(3, 1 << 30)] | None = Field(
        default=None,
        description="the longest context (prompt + answer) the released model serves: its "
        "config's max_position_embeddings; None: not stated (`seq` is the training length); "
        "at least 3 (a prompt token and two output tokens)",
    )
    tied_embeddings: bool = True
    dropout: bool = Field(
        default=True,
        description="trains with dropout on the hidden states and attention probabilities "
        "(Megatron-LM's default, 0.1); false: no dropout masks written, read or kept "
        "(Llama 3.1, Nemotron-4 and MPT configs set every dropout to 0)",
    )
    experts: PositiveInt = 1
    top_k: PositiveInt = 1
    moe_layer_interval: PositiveInt = Field(
        default=1, description="every n-th layer is an MoE layer (when experts > 1)"
    )
    expert_ffn_hidden: PositiveInt | None = None
    capacity_factor: Annotated[float, Range(0.1, 100.0)] = Field(
        default=1.0,
        description="expert capacity / (tokens·top_k/experts); buffers are padded to it",
    )
    routing_zipf: Annotated[float, Range(0.0, 10.0)] = Field(
        default=0.0, description="expert popularity ∝ 1/rank^z (0 = uniform routing)"
    )
    drop_tokens: bool = Field(
        default=True, description="capacity-based routing (drops overflow); false = dropless"
    )
    expert_groups: PositiveInt = Field(
        default=1,
        description="routed experts in this many equal groups (DeepSeek-V3 n_group 8; "
        "Megatron-Core --moe-router-num-groups)",
    )
    route_groups: int = Field(
        default=0,
        ge=0,
        description="each token's experts come from at most this many groups (DeepSeek-V3 "
        "topk_group 4: at most 4 nodes; Megatron-Core --moe-router-group-topk); 0 = all",
    )
    mtp_layers: int = Field(
        default=0,
        ge=0,
        le=16,
        description="multi-token prediction modules (DeepSeek-V3 MTP depth D = 1; Megatron-Core "
        "--mtp-num-layers): each a norm pair, a 2h→h projection, a transformer layer and the "
        "shared output head with its own loss, on the stage with the LM head",
    )
    source: str = ""
    shared_experts: int = Field(default=0, ge=0, le=64, description="always-active experts")
    first_dense_layers: int = Field(default=0, ge=0, description="leading dense layers (MoE)")
    q_lora_rank: PositiveInt | None = None
    kv_lora_rank: PositiveInt | None = None
    qk_nope_head_dim: PositiveInt | None = None
    qk_rope_head_dim: PositiveInt | None = None
    v_head_dim: PositiveInt | None = None

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
        if self.heads % self.kv_heads_:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads")
        if self.top_k > self.experts:
            raise ValueError(f"top_k ({self.top_k}) must be at most experts ({self.experts})")
        if self.experts % self.expert_groups:
            raise ValueError(
                f"expert_groups ({self.expert_groups}) must divide experts ({self.experts})"
            )
        if self.route_groups > self.expert_groups:
            raise ValueError(
                f"route_groups ({self.route_groups}) must be at most expert_groups "
                f"({self.expert_groups})"
            )
        if self.route_groups and self.route_groups * self.experts < self.top_k * self.expert_groups:
            raise ValueError("route_groups groups must hold at least top_k experts")
        if self.first_dense_layers >= self.layers and self.experts > 1:
            raise ValueError(f"first_dense_layers must be below layers ({self.layers})")
        if self.experts > 1 and not self.moe_layers:
            raise ValueError(
                f"moe_layer_interval ({self.moe_layer_interval}) must leave an MoE layer among "
                f"the {self.layers - self.first_dense_layers} layers after first_dense_layers "
                "(experts > 1 with no MoE layer: give experts 1 for a dense model)"
            )
        mla = (self.kv_lora_rank, self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim)
        if any(x is not None for x in mla) and any(x is None for x in mla):
            raise ValueError(
                "MLA needs kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim and v_head_dim"
            )
        if self.q_lora_rank is not None and self.kv_lora_rank is None:
            raise ValueError("q_lora_rank needs MLA (kv_lora_rank and the head dims)")
        return self

    @property
    def kv_heads_(self) -> int:
        return self.kv_heads or self.heads

    @property
    def ffn_(self) -> int:
        return self.ffn_hidden or 4 * self.hidden

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def kv_dim(self) -> int:
        """Width of K (and of V) for standard attention: kv_heads × head_dim."""
        return self.kv_heads_ * self.head_dim

    @property
    def qk_head_dim(self) -> int:
        """Per-head width of Q and K (MLA: nope + rope)."""
        if self.qk_nope_head_dim is not None and self.qk_rope_head_dim is not None:
            return self.qk_nope_head_dim + self.qk_rope_head_dim
        return self.head_dim

    @property
    def v_head_dim_(self) -> int:
        return self.v_head_dim or self.head_dim

    @property
    def attention_widths(self) -> tuple[int, int, int, int]:
        """Activation widths per token: Q, K, V (all heads) and the context (heads × v dim)."""
        if self.mla:
            q = self.heads * self.qk_head_dim
            return q, q, self.heads * self.v_head_dim_, self.heads * self.v_head_dim_
        return self.hidden, self.kv_dim, self.kv_dim, self.hidden

    def attention_params(self) -> int:
        """Weights and biases of one attention block (projections; norms counted apart)."""
        h = self.hidden
        if not self.mla:
            return h * (h + 2 * self.kv_dim) + (h + 2 * self.kv_dim) + h * h + h
        assert self.kv_lora_rank is not None and self.qk_rope_head_dim is not None
        qk, v, a = self.qk_head_dim, self.v_head_dim_, self.heads
        if self.q_lora_rank:
            q = h * self.q_lora_rank + self.q_lora_rank * a * qk + self.q_lora_rank  # + q norm
        else:
            q = h * a * qk
        kv_down = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank  # + norm
        kv_up = self.kv_lora_rank * a * (self.qk_nope_head_dim or 0) + self.kv_lora_rank * a * v
        return q + kv_down + kv_up + a * v * h

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.gated_mlp else 2

    @property
    def moe_layers(self) -> int:
        if self.experts == 1:
            return 0
        return (self.layers - self.first_dense_layers) // self.moe_layer_interval

    @property
    def expert_ffn_(self) -> int:
        return self.expert_ffn_hidden or self.ffn_

    def layer_params(self) -> int:
        """Parameters of one dense transformer layer (weights + biases + 2 layer norms)."""
        h = self.hidden
        mlp = self.mlp_matrices * h * self.ffn_ + self.ffn_ * (self.mlp_matrices - 1) + h
        return self.attention_params() + mlp + 4 * h

    def expert_params(self) -> int:
        """Parameters of one expert's MLP."""
        h, f = self.hidden, self.expert_ffn_
        return self.mlp_matrices * h * f + f * (self.mlp_matrices - 1) + h

    def embedding_params(self) -> int:
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    def params(self) -> int:
        """Total parameters (all experts counted)."""
        dense_layers = self.layers - self.moe_layers
        moe = self.moe_layers * (
            self.layer_params()
            - self.mlp_params_dense()
            + (self.experts + self.shared_experts) * self.expert_params()
            + self.hidden * self.experts
        )
        return dense_layers * self.layer_params() + moe + self.embedding_params() + 2 * self.hidden

    def mlp_params_dense(self) -> int:
        h = self.hidden
        return self.mlp_matrices * h * self.ffn_ + self.ffn_ * (self.mlp_matrices - 1) + h
