"""HBM bytes the memory-bound (element-wise) kernels of one layer move, per micro-batch and GPU.

Counted per element (bf16 = 2 bytes, dropout masks 1 byte) for Megatron's fused kernels:

forward                                  backward
- layer norm ×2: read 2, write 2         read x 2, read dy 2, write dx 2
- bias-dropout-add ×2: read 2+2,         dropout: read dy 2, mask 1, write 2;
  write 2, mask 1                        residual: add two gradients, read 4, write 2
  (these 22·sbh are on every TP rank, ÷t with sequence parallelism)
- activation: read up (and gate),        read the inputs and dy, write the input gradients
  write output (÷t)
- softmax: read 2, write 2;              softmax: read y, dy, write dx (6);
  attention dropout: read 2, write 2,    dropout: read dy, mask, write (5)
  mask 1, on b·a·s² elements (÷t)
- context permute copy: read 2, write 2  the same copy back
- MLA's latent norms (query with q_lora_rank, and key-value), as the layer norms on the latent
  elements (q_lora_rank + kv_lora_rank per token; ÷t with sequence parallelism)
The loss over the vocabulary, per logit element (s·b·V/t), by `Strategy.cross_entropy` (the
kernels as Megatron-LM f2e5db4 writes them, `megatron/core/tensor_parallel/cross_entropy.py`
and `megatron/core/fusions/fused_cross_entropy.py`):
- unfused: cast the bf16 logits to fp32 (read 2, write 4), max (read 4), subtract in place
  (read 4, write 4), exp in place (8), sum (4), divide in place (8); backward: multiply by the
  loss gradient in place (8), cast back to bf16 (read 4, write 2): 52 bytes;
- fused (`cross_entropy_loss_fusion`): cast + max (6), subtract + exp + sum (8), divide (8),
  backward multiply + cast (6): 28 bytes;
- xentropy (one kernel per pass on bf16 logits, flash-attn's `csrc/xentropy` from Apex): max
  and sum of exp read the logits twice (4); backward reads them and writes the gradient (4):
  8 bytes;
- te (Transformer Engine's `transformer_engine/pytorch/triton/cross_entropy.py` in its 2025
  form, which Megatron-Core's `cross_entropy_fusion_impl="te"` calls; NeMo at 7a8f1cc7 pins
  TE bee4649c in `requirements/manifest.json`, the containers' own TE not checked):
  `online_softmax_kernel` reads the logits for the row max and sum (2), `cross_entropy_kernel`
  reads them again and writes the gradient over them in place (4), and the backward's
  `element_mul_kernel` scales it by the loss gradient in place (4): 10 bytes, three kernels.
  Today's TE (02965d2) computes the gradient in the backward instead (about 6 bytes).
All four keep one tensor of logits for the backward: the fp32 softmax (4 bytes per element),
xentropy and te the bf16 logits (2; te's hold the gradient by then).
MoE token permutation around the expert all-to-alls, per hidden element of one routed slot
(bf16; k = top_k), as Megatron-Core's token dispatchers run it with `moe_permute_fusion`
(core_v0.12.0 `transformer/moe/token_dispatcher.py`, `moe_utils.permute` / `unpermute` /
`sort_chunks_by_idxs` on Transformer Engine's fused kernels, one program per token row;
NeMo's DeepSeek-V3 performance recipe sets the fusion):
- alltoall dispatcher, on the token side (a GPU's own b·s/(tp·cp) tokens, k slots each, the
  capacity's with token dropping): `permute` reads each token once and writes its k slots
  (2/k + 2) before the dispatch; `unpermute` after the combine reads the slots and writes the
  probability-weighted sum per token (2 + 2/k). Backward: the unpermute's gradient reads each
  token's gradient once, the saved slot (for the probabilities' gradient) and writes the slot
  gradient (2/k + 4); the permute's sums the slots back per token (2 + 2/k): forward
  4 + 4/k, backward 6 + 4/k;
- alltoall dispatcher, on the expert side, with more than one local expert: `sort_chunks_by_idxs`
  regroups the received slots by local expert and back (read 2, write 2, each way, both passes;
  token drop with padding does the same copy as `transpose().contiguous()`);
- flex dispatcher (DeepEP): DeepEP's kernels place the tokens; the expert side permutes the
  tokens it received into slots and unpermutes them, R = received tokens per slot
  (`routing.touched_ranks` / k): forward 4 + 4·R, backward 6 + 4·R.
Kernels: the permute's row-id map (3) and one per permute, regroup and unpermute, each way.
The unfused PyTorch path (`index_select`, `scatter_add_` into a zeroed tensor, the probability
product as its own kernel) moves more, and DeepSpeed-MoE's einsum dispatch (`moe-1.3b`, Fig 5)
is a different computation altogether; neither is modelled: MoE layers are timed with
Megatron-Core's fused dispatch.
A fused (flash) attention kernel keeps the scores on chip: no softmax or attention-dropout
bytes through HBM. A model trained without dropout (`Model.dropout` false: Llama 3.1,
Nemotron-4, MPT) writes and reads no masks: the bias-dropout-adds become residual adds
(forward 2 of the 22 bytes fewer, backward the two dropout passes, 10 of 34, gone) and the
unfused attention has no dropout kernel on the scores.
"""

from __future__ import annotations

import numpy as np

from railplan.specs import CROSS_ENTROPY_CODES, Model
from railplan.specs.arrays import EP_DEEPEP, UNFUSED, FloatArray, StrategyArrays
from railplan.workload.routing import touched_ranks

LAYER_NORM_FORWARD = 4.0  # bytes per s·b·h element of one layer norm's forward: read 2, write 2
LAYER_NORM_BACKWARD = 6.0  # and its backward: read x 2, read dy 2, write dx 2
REPLICATED_FORWARD = 22.0  # bytes per s·b·h element (2 LN + 2 bias-dropout-add)
REPLICATED_BACKWARD = 2 * LAYER_NORM_BACKWARD + 2 * 5.0 + 2 * 6.0  # LN + dropout + residual adds
SCORES_FORWARD = 4.0 + 5.0  # softmax + attention dropout, per b·a·s² element
SCORES_BACKWARD = 6.0 + 5.0
PERMUTE = 4.0  # context [b·a, s, d] → [s, b, h] copy, per s·b·h/t element
# Without dropout: the two 1-byte masks of the forward, the two backward dropout passes, and the
# attention-dropout kernel on the scores (forward 5, backward 5).
DROPOUT_FORWARD, DROPOUT_BACKWARD, SCORES_DROPOUT = 2.0, 2 * 5.0, 5.0


# Per Strategy.cross_entropy: HBM bytes the loss moves per logit element (forward + backward),
# bytes per element it keeps for the backward, kernels it launches (module doc).
CROSS_ENTROPY = {
    "fused": (28.0, 4.0, 4.0),
    "unfused": (52.0, 4.0, 8.0),
    "xentropy": (8.0, 2.0, 2.0),
    "te": (10.0, 2.0, 3.0),
}
CROSS_ENTROPY_BYTES, CROSS_ENTROPY_KEPT_BYTES, CROSS_ENTROPY_KERNELS = np.array(
    [
        CROSS_ENTROPY[name]
        for name in sorted(CROSS_ENTROPY_CODES, key=lambda n: CROSS_ENTROPY_CODES[n])
    ]
).T


def cross_entropy_bytes(s: StrategyArrays) -> FloatArray:
    """HBM bytes per logit element of the loss, forward and backward (module doc)."""
    return np.asarray(CROSS_ENTROPY_BYTES[s.cross_entropy])


def cross_entropy_kernels(s: StrategyArrays) -> FloatArray:
    """Kernels the loss launches, forward and backward (module doc)."""
    return np.asarray(CROSS_ENTROPY_KERNELS[s.cross_entropy])


def cross_entropy_kept_bytes(s: StrategyArrays) -> FloatArray:
    """Bytes per logit element the loss keeps from its forward for its backward."""
    return np.asarray(CROSS_ENTROPY_KEPT_BYTES[s.cross_entropy])


def sp_share(s: StrategyArrays) -> FloatArray:
    """The share of a sequence's tokens a tensor-parallel rank holds outside the
    tensor-parallel GEMMs: 1/tp with sequence parallelism, else all of them."""
    return np.asarray(np.where(s.sequence_parallel.astype(bool), 1.0 / s.tp, 1.0))


def replicated_elements(model: Model, s: StrategyArrays) -> FloatArray:
    """s·b·h elements of a layer's activations kept on every tensor-parallel rank (÷tp with
    sequence parallelism): what the norms, residual adds and dropouts run over."""
    sbh = model.seq * s.micro_batch.astype(float) * model.hidden
    return np.asarray(sbh * sp_share(s))


def latent_width(model: Model) -> float:
    """MLA's query and key-value latents per token, q_lora_rank + kv_lora_rank (0 without
    MLA)."""
    return float((model.q_lora_rank or 0) + (model.kv_lora_rank or 0)) if model.mla else 0.0


def latent_elements(model: Model, s: StrategyArrays) -> FloatArray:
    """MLA's query and key-value latents of one layer (`latent_width` per token), which its
    latent norms run over: split by tp only with sequence parallelism, as Megatron-Core keeps
    them ([s/tp, b, rank]; `workload.memory` the same); 0 without MLA."""
    if not model.mla:
        return np.zeros(())
    return np.asarray(model.seq * s.micro_batch.astype(float) * latent_width(model) * sp_share(s))


def latent_norms(model: Model) -> int:
    """MLA's latent norms per layer (the query latent's only with q_lora_rank), one kernel each
    way; 0 without MLA."""
    return (1 + int(bool(model.q_lora_rank))) if model.mla else 0


def norm_forward_bytes(model: Model, s: StrategyArrays) -> FloatArray:
    """The two layer norms' forward bytes: what selective recompute of `layernorm` reruns."""
    return np.asarray(2.0 * LAYER_NORM_FORWARD * replicated_elements(model, s))


def layer_bytes(model: Model, s: StrategyArrays) -> dict[str, FloatArray]:
    """Forward and backward element-wise bytes of one layer, and the attention-score part
    (what selective recompute reruns)."""
    b, t = s.micro_batch.astype(float), s.tp.astype(float)
    sbh = model.seq * b * model.hidden
    replicated = replicated_elements(model, s)
    ffn_elements = model.ffn_ * model.seq * b / t
    gated = model.mlp_matrices == 3
    act_fwd = (6.0 if gated else 4.0) * ffn_elements
    act_bwd = (10.0 if gated else 6.0) * ffn_elements
    score_elements = np.where(s.attention != UNFUSED, 0.0, model.heads * model.seq**2 * b / t)
    off = 0.0 if model.dropout else 1.0  # no dropout: its bytes are not moved
    scores_fwd = SCORES_FORWARD - off * SCORES_DROPOUT
    latents = latent_elements(model, s)
    return {
        "forward": np.asarray(
            (REPLICATED_FORWARD - off * DROPOUT_FORWARD) * replicated
            + LAYER_NORM_FORWARD * latents
            + act_fwd
            + scores_fwd * score_elements
            + PERMUTE * sbh / t
        ),
        "backward": np.asarray(
            (REPLICATED_BACKWARD - off * DROPOUT_BACKWARD) * replicated
            + LAYER_NORM_BACKWARD * latents
            + act_bwd
            + (SCORES_BACKWARD - off * SCORES_DROPOUT) * score_elements
            + PERMUTE * sbh / t
        ),
        "scores_forward": np.asarray(scores_fwd * score_elements),
    }


def activation_function_bytes(model: Model, elements: FloatArray) -> dict[str, FloatArray]:
    """Forward and backward bytes of the MLP activation on `elements` ffn values."""
    gated = model.mlp_matrices == 3
    return {
        "forward": np.asarray((6.0 if gated else 4.0) * elements),
        "backward": np.asarray((10.0 if gated else 6.0) * elements),
    }


def moe_permutation_bytes(
    model: Model, s: StrategyArrays, token_slots: FloatArray, expert_slots: FloatArray
) -> dict[str, FloatArray]:
    """Forward and backward bytes and kernels of one MoE layer's token permutation on one GPU
    (module doc), for `token_slots` routed slots of its own tokens and `expert_slots` slots its
    local experts receive."""
    k = float(model.top_k)
    h = float(model.hidden)
    deepep = s.ep_dispatch == EP_DEEPEP
    sorted_locally = (model.experts / s.ep.astype(float)) > 1.0
    received = touched_ranks(model, s.ep) / k  # DeepEP: received tokens per slot
    token_fwd = np.where(deepep, 0.0, (4.0 + 4.0 / k) * token_slots)
    token_bwd = np.where(deepep, 0.0, (6.0 + 4.0 / k) * token_slots)
    regroup = np.where(sorted_locally, 8.0, 0.0)
    expert_fwd = np.where(deepep, 4.0 + 4.0 * received, regroup) * expert_slots
    expert_bwd = np.where(deepep, 6.0 + 4.0 * received, regroup) * expert_slots
    regroup_kernels = np.where(sorted_locally & ~deepep, 2.0, 0.0)
    return {
        "forward": np.asarray(h * (token_fwd + expert_fwd)),
        "backward": np.asarray(h * (token_bwd + expert_bwd)),
        "forward_kernels": np.asarray(5.0 + regroup_kernels),  # row-id map 3, permute, unpermute
        "backward_kernels": np.asarray(2.0 + regroup_kernels),
    }
