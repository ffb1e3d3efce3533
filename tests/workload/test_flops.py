"""FLOPs: exact matmul counts against the published closed forms (hand-checked)."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from railplan.specs import Model, load_model
from railplan.specs.arrays import FULL, NONE, SELECTIVE
from railplan.workload import flops


@pytest.mark.parametrize("name", ["gpt-22b", "gpt-175b", "gpt-530b", "gpt-1t", "gpt-146b"])
def test_model_flops_equal_korthikanti_closed_form(name: str) -> None:
    # Korthikanti 2022 §6: 72·B·s·l·h²·(1 + s/6h + V/12lh) is exact for GPT with ffn = 4h.
    m = load_model(name)
    assert float(flops.model_flops(m, 64)) == pytest.approx(
        flops.korthikanti_model_flops(m, 64), rel=1e-12
    )


@pytest.mark.parametrize("name", ["gpt-22b", "gpt-175b", "gpt-1t"])
def test_full_recompute_equals_narayanan_eq3(name: str) -> None:
    # Narayanan 2021 eq. (3): 96·B·s·l·h²·(1 + s/6h + V/16lh).
    m = load_model(name)
    assert float(flops.hardware_flops(m, 8, FULL)) == pytest.approx(
        flops.narayanan_flops(m, 8), rel=1e-12
    )


def test_hand_computed_small_model() -> None:
    # h=4, l=1, a=1, s=2, V=8, B=1. Forward per layer: 24·s·h² + 4·s²·h = 768 + 64 = 832;
    # logits 2·s·h·V = 128. Model FLOPs = 3·(832 + 128) = 2880.
    m = Model(hidden=4, layers=1, heads=1, seq=2, vocab=8)
    assert float(flops.model_flops(m, 1)) == 2880.0
    # Selective recompute adds the score and context products: 4·s²·h = 64.
    assert float(flops.hardware_flops(m, 1, SELECTIVE)) == 2880.0 + 64.0
    assert float(flops.hardware_flops(m, 1, NONE)) == 2880.0


def test_gqa_and_gated_mlp_counts() -> None:
    # Llama-style layer: QKV with kv_dim, 3 MLP matrices.
    m = Model(
        hidden=8,
        layers=1,
        heads=4,
        kv_heads=2,
        ffn_hidden=12,
        gated_mlp=True,
        seq=2,
        vocab=16,
        tied_embeddings=False,
    )
    s, h, kv, f = 2, 8, 4, 12
    fwd = 2 * s * h * (h + 2 * kv) + 4 * s * s * h + 2 * s * h * h + 3 * 2 * s * h * f
    fwd_logits = 2 * s * h * 16
    assert float(flops.model_flops(m, 1)) == 3 * (fwd + fwd_logits)


@given(st.integers(1, 4096), st.integers(1, 4096))
def test_flops_linear_in_batch(b1: int, b2: int) -> None:
    m = load_model("gpt-22b")
    f = flops.model_flops(m, np.array([b1, b2, b1 + b2]))
    assert math.isclose(float(f[2]), float(f[0] + f[1]), rel_tol=1e-12)


def test_training_time_rule_seed_002() -> None:
    # 8·T·P/(n·X): 300B tokens, 175B params, 1024 GPUs at 140 TFLOP/s → ≈ 34 days (GPT-3 rule).
    days = flops.training_days(175e9, 300e9, 1024, 140)
    assert days == pytest.approx(8 * 300e9 * 175e9 / (1024 * 140e12) / 86400)
    assert 33 < days < 35
