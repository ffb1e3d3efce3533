"""Model spec: the transformer's shape (dense GPT/Llama-style, optionally MoE)."""

from __future__ import annotations

from typing import Annotated, Self

from pydantic import Field, PositiveInt, model_validator

from railplan.specs.base import Range, Spec


class Model(Spec):
    """A decoder-only transformer.

    `ffn_hidden` defaults to 4·hidden; `gated_mlp` means SwiGLU-style MLPs with three matrices
    (up, gate, down). `kv_heads` < `heads` is grouped-query attention. MoE fields describe expert
    layers (used by the MoE work; a dense model has `experts == 1`).
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
    tied_embeddings: bool = True
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
    source: str = ""

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
        if self.heads % self.kv_heads_:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads")
        if self.top_k > self.experts:
            raise ValueError(f"top_k ({self.top_k}) must be at most experts ({self.experts})")
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
    def kv_dim(self) -> int:
        """Width of K (and of V): kv_heads × head_dim."""
        return self.kv_heads_ * self.head_dim

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.gated_mlp else 2

    @property
    def moe_layers(self) -> int:
        return self.layers // self.moe_layer_interval if self.experts > 1 else 0

    @property
    def expert_ffn_(self) -> int:
        return self.expert_ffn_hidden or self.ffn_

    def layer_params(self) -> int:
        """Parameters of one dense transformer layer (weights + biases + 2 layer norms)."""
        h = self.hidden
        attn = h * (h + 2 * self.kv_dim) + (h + 2 * self.kv_dim) + h * h + h
        mlp = self.mlp_matrices * h * self.ffn_ + self.ffn_ * (self.mlp_matrices - 1) + h
        return attn + mlp + 4 * h

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
            + self.experts * self.expert_params()
            + self.hidden * self.experts
        )
        return dense_layers * self.layer_params() + moe + self.embedding_params() + 2 * self.hidden

    def mlp_params_dense(self) -> int:
        h = self.hidden
        return self.mlp_matrices * h * self.ffn_ + self.ffn_ * (self.mlp_matrices - 1) + h
