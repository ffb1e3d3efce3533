"""FLOPs of one training iteration: exact matmul counts and the published closed forms.

Model FLOPs count forward + backward (3× forward) matmuls once; hardware FLOPs add what
activation recomputation runs again (full: every layer's forward; selective: the attention
score/context products, Korthikanti et al. 2022 §5). Element-wise work is not counted, as in
both papers' MFU/HFU.
"""

from __future__ import annotations

import numpy as np

from railplan.specs import Model
from railplan.specs.arrays import FULL, FloatArray, IntArray, rerun_modules
from railplan.specs.strategy import RECOMPUTE_MODULE_BITS
from railplan.workload.gemms import (
    attention_gemms,
    layer_gemms,
    logit_gemm,
    mlp_gemms,
    mtp_projection_gemm,
)


def forward_flops_per_sequence(model: Model) -> dict[str, float]:
    """Forward matmul FLOPs of one sequence, split into layers, attention products and logits."""
    one = np.float64(1.0)
    dense_layer = sum(float(g.flops) for g in layer_gemms(model, one, one))
    attn_products = sum(float(g.flops) for g in attention_gemms(model, one, one) if g.attention)
    moe_extra = 0.0
    if model.moe_layers:
        dense_mlp = sum(float(g.flops) for g in mlp_gemms(model, one, one))
        expert_mlp = sum(float(g.flops) for g in mlp_gemms(model, one, one, model.expert_ffn_))
        router = 2.0 * model.seq * model.hidden * model.experts
        per_token_experts = model.top_k + model.shared_experts
        moe_extra = model.moe_layers * (per_token_experts * expert_mlp + router - dense_mlp)
    # Multi-token prediction (`Model.mtp_layers`), counted as Megatron-Core counts it: each
    # module one more transformer layer (here the model's average layer, as the time model
    # takes it), its 2h → h projection and one more pass through the output head.
    depth = (model.layers + model.mtp_layers) / model.layers
    projection = model.mtp_layers * float(mtp_projection_gemm(model, one, one).flops)
    return {
        "layers": depth * (model.layers * dense_layer + moe_extra) + projection,
        "attention_products": depth * model.layers * attn_products,
        "logits": (1 + model.mtp_layers) * float(logit_gemm(model, one, one).flops),
    }


def model_flops(model: Model, global_batch: IntArray | int) -> FloatArray:
    """Model FLOPs per iteration (no recomputation): 3 × forward matmuls."""
    f = forward_flops_per_sequence(model)
    return 3.0 * np.asarray(global_batch, dtype=np.float64) * (f["layers"] + f["logits"])


def recomputed_module_flops(model: Model) -> dict[str, float]:
    """Forward matmul FLOPs of one sequence that each selective-recompute module reruns
    (`Strategy.recompute_modules`); the norms and activation functions are element-wise."""
    one = np.float64(1.0)
    f = forward_flops_per_sequence(model)
    dense_mlp = sum(float(g.flops) for g in mlp_gemms(model, one, one))
    expert_mlp = sum(float(g.flops) for g in mlp_gemms(model, one, one, model.expert_ffn_))
    router = 2.0 * model.seq * model.hidden * model.experts
    up = sum(float(g.flops) for g in attention_gemms(model, one, one) if g.name.endswith("_up"))
    moe = float(model.moe_layers)
    depth = (model.layers + model.mtp_layers) / model.layers  # the MTP layers rerun alike
    return {
        "core_attn": f["attention_products"],
        "layernorm": 0.0,
        "moe_act": 0.0,
        "mla_up_proj": depth * model.layers * up,
        "mlp": depth * (model.layers - moe) * dense_mlp,
        "moe": depth * moe * ((model.top_k + model.shared_experts) * expert_mlp + router),
        "shared_experts": depth * moe * model.shared_experts * expert_mlp,
    }


def hardware_flops(
    model: Model,
    global_batch: IntArray | int,
    recompute: IntArray | int,
    recompute_modules: IntArray | int = RECOMPUTE_MODULE_BITS["core_attn"],
    rerun: FloatArray | float = 1.0,
) -> FloatArray:
    """Hardware FLOPs per iteration: model FLOPs plus the recomputed forward matmuls (full:
    every layer, or the `rerun` share of them (`recomputed_share`); selective: the modules it
    reruns)."""
    f = forward_flops_per_sequence(model)
    bits = rerun_modules(recompute, recompute_modules)
    selective = sum(
        (
            np.where((bits & RECOMPUTE_MODULE_BITS[name]) > 0, flops, 0.0)
            for name, flops in recomputed_module_flops(model).items()
        ),
        np.zeros(()),
    )
    extra = np.where(np.asarray(recompute) == FULL, f["layers"] * rerun, selective)
    return model_flops(model, global_batch) + np.asarray(global_batch, dtype=np.float64) * extra


def narayanan_flops(model: Model, global_batch: float) -> float:
    """Narayanan et al. 2021 eq. (3): 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)), full recompute."""
    b, s, l, h, v = global_batch, model.seq, model.layers, model.hidden, model.vocab
    return 96.0 * b * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h))


def korthikanti_model_flops(model: Model, global_batch: float) -> float:
    """Korthikanti et al. 2022 §6: model FLOPs 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h))."""
    b, s, l, h, v = global_batch, model.seq, model.layers, model.hidden, model.vocab
    return 72.0 * b * s * l * h * h * (1 + s / (6 * h) + v / (12 * l * h))


def korthikanti_hardware_flops_selective(model: Model, global_batch: float) -> float:
    """Korthikanti et al. 2022 §6: hardware FLOPs with selective recompute, s/(6h) → s/(3h)."""
    b, s, l, h, v = global_batch, model.seq, model.layers, model.hidden, model.vocab
    return 72.0 * b * s * l * h * h * (1 + s / (3 * h) + v / (12 * l * h))


def training_days(params: float, tokens: float, gpus: int, achieved_tflops: float) -> float:
    """Seed 002's rule: time ≈ 8·T·P/(n·X) (forward+backward+recompute), in days."""
    return 8.0 * tokens * params / (gpus * achieved_tflops * 1e12) / 86400.0
