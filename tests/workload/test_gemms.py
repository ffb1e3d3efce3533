"""workload/gemms.py on hand-computed shapes: FLOPs and backward shapes, a dense GPT layer,
GQA's narrower K/V, a gated (SwiGLU) MLP, MLA's projections, the experts and the router."""

from __future__ import annotations

import pytest

from railplan.specs import Model
from railplan.workload.gemms import (
    Gemm,
    attention_gemms,
    expert_gemms,
    layer_gemms,
    logit_gemm,
    mlp_gemms,
    router_gemm,
)
from tests.kernel_fixtures import MODEL, one


def test_gemm_flops_and_backward_shapes() -> None:
    g = Gemm("x", one(2), one(3), one(5), one(7))
    assert float(g.flops) == 2 * 2 * 3 * 5 * 7
    dgrad, wgrad = g.backward()
    assert (float(dgrad.m), float(dgrad.n), float(dgrad.k)) == (3, 7, 5)
    assert (float(wgrad.m), float(wgrad.n), float(wgrad.k)) == (7, 5, 3)
    assert float(dgrad.flops) == float(wgrad.flops) == float(g.flops)


def test_layer_gemm_flops_are_24bsh2_plus_attention() -> None:
    """A dense GPT layer (4h MLP): 24·b·s·h² linear FLOPs + 4·b·s²·h attention FLOPs forward,
    divided by tp."""
    b, t = 2, 4
    s, h = MODEL.seq, MODEL.hidden
    gemms = layer_gemms(MODEL, b, t)
    linear = sum(float(g.flops) for g in gemms if not g.attention)
    core = sum(float(g.flops) for g in gemms if g.attention)
    assert linear == pytest.approx(24 * b * s * h * h / t)
    assert core == pytest.approx(4 * b * s * s * h / t)
    up, down = mlp_gemms(MODEL, b, t)
    assert float(up.n) == 4 * h / t and float(down.k) == 4 * h / t
    assert float(logit_gemm(MODEL, b, t).n) == MODEL.vocab / t


def _by_name(gemms: list[Gemm]) -> dict[str, Gemm]:
    return {g.name: g for g in gemms}


def test_gqa_qkv_width() -> None:
    """8 query heads of 128, 2 KV heads: QKV output width h + 2·2·128 = 1,536, over tp 2."""
    gqa = MODEL.model_copy(update={"kv_heads": 2})
    qkv = _by_name(attention_gemms(gqa, 1, 2))["qkv"]
    assert float(qkv.n) == (1024 + 2 * 2 * 128) / 2
    assert float(qkv.m) == 512 and float(qkv.k) == 1024


def test_gated_mlp_up_has_two_matrices() -> None:
    """SwiGLU: up and gate fused into one GEMM of width 2·ffn; down reads ffn."""
    swiglu = MODEL.model_copy(update={"gated_mlp": True, "ffn_hidden": 2816})
    up, down = mlp_gemms(swiglu, 2, 4)
    assert float(up.n) == 2 * 2816 / 4 and float(up.m) == 2 * 512
    assert float(down.k) == 2816 / 4 and float(down.n) == 1024


def test_mla_projections() -> None:
    """MLA with q_lora 256, kv_lora 128, nope 32 + rope 16 per head, v 32: the down-projections
    are whole on every tp rank, the up-projections split by tp."""
    mla = MODEL.model_copy(
        update={
            "q_lora_rank": 256,
            "kv_lora_rank": 128,
            "qk_nope_head_dim": 32,
            "qk_rope_head_dim": 16,
            "v_head_dim": 32,
        }
    )
    g = _by_name(attention_gemms(mla, 1, 2))
    assert (float(g["q_down"].n), float(g["q_down"].k)) == (256, 1024)
    assert (float(g["q_up"].n), float(g["q_up"].k)) == (8 * 48 / 2, 256)
    assert (float(g["kv_down"].n), float(g["kv_down"].k)) == (128 + 16, 1024)
    assert (float(g["kv_up"].n), float(g["kv_up"].k)) == (8 * (32 + 32) / 2, 128)
    assert float(g["score"].k) == 48 and float(g["context"].n) == 32
    assert float(g["proj"].k) == 8 * 32 / 2
    assert "qkv" not in g


def test_expert_and_router_gemms() -> None:
    """16 experts top-2, capacity 1.0 dropped tokens, ep 4: 4 local experts share
    b·s·2 = 2,048 slots (512 each); the router maps h to 16 logits."""
    moe = MODEL.model_copy(
        update={"experts": 16, "top_k": 2, "drop_tokens": True, "capacity_factor": 1.0}
    )
    up, down = expert_gemms(moe, 2, 1, 4)
    assert float(up.batch) == 4 and float(up.m) == 2 * 512 * 2 / 4
    assert float(up.n) == 4096 and float(down.k) == 4096
    router = router_gemm(moe, 2)
    assert (float(router.m), float(router.n), float(router.k)) == (1024, 16, 1024)
    assert float(router.flops) == pytest.approx(2 * 1024 * 16 * 1024)


def test_logits_split_by_tp_over_the_vocabulary() -> None:
    g = logit_gemm(MODEL, 3, 4)
    assert (float(g.m), float(g.n), float(g.k)) == (3 * 512, 1000 / 4, 1024)
    assert isinstance(MODEL, Model)
