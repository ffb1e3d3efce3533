"""KV-cache memory by hand-computed examples (GQA, MLA, pages, largest batch)."""

from __future__ import annotations

import pytest

from railplan.errors import RailplanError
from railplan.inference import kvcache
from railplan.specs.catalog import load_model


def test_gqa_llama2_70b_by_hand() -> None:
    # 80 layers · (K and V) · 8 KV heads · 128 dims · 2 bytes = 327,680 bytes per token
    assert kvcache.gqa_kv_bytes_per_token(80, 8, 128, 2.0) == 327_680
    # tp = 2 splits the 8 KV heads: 4 per GPU
    assert kvcache.gqa_kv_bytes_per_token(80, 8, 128, 2.0, tp=2) == 163_840
    # tp = 16 > 8 KV heads: each GPU keeps one (replicated) head
    assert kvcache.gqa_kv_bytes_per_token(80, 8, 128, 1.0, tp=16) == 2 * 80 * 128


def test_model_kv_matches_the_catalog_shape() -> None:
    m = load_model("llama-2-70b")  # hidden 8192, 64 heads -> head_dim 128, 8 KV heads
    assert kvcache.model_kv_bytes_per_token(m, 1.0, tp=2, pp=2) == 2 * 40 * 4 * 128


def test_mla_deepseek_v3_by_hand() -> None:
    # DeepSeek-V3: 61 layers, latent 512 + RoPE key 64 per layer, bf16 -> 61·576·2 bytes
    assert kvcache.mla_kv_bytes_per_token(61, 512, 64, 2.0) == 70_272


def test_pages_and_max_batch() -> None:
    assert kvcache.paged_tokens(17, 16) == 32
    assert kvcache.paged_tokens(32, 16) == 32
    # 1e6 bytes of pool, 100 bytes per token, 17 tokens -> 2 pages = 3,200 bytes per sequence
    assert kvcache.max_batch(1e6, 100.0, 17, 16) == 312
    assert kvcache.max_batch(-5.0, 100.0, 17) == 0


def test_capacity_is_the_free_fraction_of_what_weights_leave() -> None:
    assert kvcache.kv_capacity_bytes(100.0, 40.0) == pytest.approx(kvcache.KV_FREE_FRACTION * 60)


def test_bad_tp_is_a_one_line_error() -> None:
    with pytest.raises(RailplanError, match="tp"):
        kvcache.gqa_kv_bytes_per_token(80, 8, 128, 2.0, tp=0)
