"""KV-cache memory: bytes per token (GQA or MLA), paged allocation, the largest batch that fits.

Per token and layer a GQA model stores K and V: 2 · kv_heads · head_dim elements; tensor
parallelism splits the KV heads over tp ranks (each rank keeps at least one head: with
tp > kv_heads the heads are replicated, as vLLM and TensorRT-LLM do). Multi-head latent attention
(DeepSeek-V2/V3) stores one compressed latent of `kv_lora_rank` plus the shared RoPE key of
`rope_dim` per token and layer, replicated on every tp rank (it is not split by heads).
Allocation is paged (vLLM's PagedAttention): a sequence holds whole pages of `page_tokens`.
"""

from __future__ import annotations

import math

from railplan.errors import RailplanError
from railplan.specs import Model

#: tokens per KV page: vLLM's default block size (vllm EngineArgs.block_size = 16)
PAGE_TOKENS = 16
#: share of the memory left after the weights that the engine gives the KV cache:
#: TensorRT-LLM's kv_cache_free_gpu_mem_fraction as set in NVIDIA's MLPerf Inference v4.1
#: Llama 2 70B configs (kvcache_free_gpu_mem_frac = 0.90); the rest holds activations.
KV_FREE_FRACTION = 0.90
GIB = float(1 << 30)


def gqa_kv_bytes_per_token(
    layers: int, kv_heads: int, head_dim: int, element_bytes: float, tp: int = 1
) -> float:
    """KV bytes one token occupies on one of the tp GPUs holding `layers` layers."""
    if tp < 1:
        raise RailplanError("tp", f"must be a positive integer; got {tp}")
    heads_per_gpu = math.ceil(kv_heads / tp)
    return 2.0 * layers * heads_per_gpu * head_dim * element_bytes


def mla_kv_bytes_per_token(
    layers: int, kv_lora_rank: int, rope_dim: int, element_bytes: float
) -> float:
    """MLA: the latent (kv_lora_rank) and the decoupled RoPE key (rope_dim) per layer, on every
    tp rank (DeepSeek-V2, arXiv 2405.04434 §2.1: (d_c + d_h^R)·l elements per token)."""
    return float(layers * (kv_lora_rank + rope_dim) * element_bytes)


def model_kv_bytes_per_token(model: Model, element_bytes: float, tp: int, pp: int) -> float:
    """KV bytes per token on one GPU of a tp × pp instance of `model` (GQA/MHA; MLA when the
    model carries `kv_lora_rank`)."""
    layers = math.ceil(model.layers / pp)
    lora = getattr(model, "kv_lora_rank", None)
    if isinstance(lora, int) and lora > 0:
        rope = getattr(model, "qk_rope_head_dim", None)
        return mla_kv_bytes_per_token(
            layers, lora, rope if isinstance(rope, int) else 0, element_bytes
        )
    return gqa_kv_bytes_per_token(layers, model.kv_heads_, model.head_dim, element_bytes, tp)


def paged_tokens(tokens: int, page_tokens: int = PAGE_TOKENS) -> int:
    """Tokens a sequence of `tokens` reserves: whole pages."""
    return page_tokens * math.ceil(tokens / page_tokens)


def kv_capacity_bytes(memory_bytes: float, weight_bytes: float) -> float:
    """KV-cache pool of one GPU: KV_FREE_FRACTION of what the weights leave (≤ 0: no room)."""
    return KV_FREE_FRACTION * (memory_bytes - weight_bytes)


def max_batch(
    capacity_bytes: float, bytes_per_token: float, seq_tokens: int, page_tokens: int = PAGE_TOKENS
) -> int:
    """Most sequences of `seq_tokens` (prompt + output, reserved in full so that none is
    evicted) whose pages fit in `capacity_bytes`."""
    if capacity_bytes <= 0:
        return 0
    per_seq = paged_tokens(seq_tokens, page_tokens) * bytes_per_token
    return int(capacity_bytes // per_seq)
