"""What one iteration communicates (sizes and counts, no time): the single source for both the
iteration-time model and the traffic matrices.

Megatron-LM's pattern (Shoeybi 2019, Narayanan 2021, Korthikanti 2022):
- TP: per layer and micro-batch, 2 all-reduces of the activation (b·s·h bf16) in the forward
  pass, 2 in the backward pass, 2 more when full recompute reruns the forward; with sequence
  parallelism each all-reduce becomes a reduce-scatter + all-gather of the same buffer, and the
  backward pass all-gathers the sharded inputs of QKV and MLP-up once more (2 all-gathers).
- PP: per micro-batch and stage boundary, the activation forward and its gradient backward,
  scattered over the tp ranks (each GPU sends b·s·h/t bf16 to its peer); v× more boundaries
  with the interleaved schedule.
- DP: once per iteration, the gradients of the GPU's stage (all-reduce; with ZeRO ≥ 1 a
  reduce-scatter of gradients then an all-gather of the bf16 weights); with tied embeddings
  and pp > 1, first and last stage all-reduce the embedding gradient.
"""

from __future__ import annotations

import numpy as np

from railplan.specs import Model
from railplan.strategies import FULL, FloatArray, StrategyArrays
from railplan.workload.memory import WEIGHT_BYTES, stage_params

ACT_BYTES = 2.0  # bf16 activations


def tp_message_bytes(model: Model, s: StrategyArrays) -> FloatArray:
    """The buffer of one TP all-reduce (or all-gather result): b·s·h activations."""
    return np.asarray(ACT_BYTES * model.seq * s.micro_batch.astype(float) * model.hidden)


def tp_ops_per_layer(s: StrategyArrays) -> dict[str, FloatArray]:
    """TP collectives per layer and micro-batch, in all-reduce equivalents by pass, and the
    extra all-gathers of sequence parallelism in the backward pass."""
    tp_on = (s.tp > 1).astype(float)
    return {
        "forward": 2.0 * tp_on,
        "recompute": np.where(s.recompute == FULL, 2.0, 0.0) * tp_on,
        "backward": 2.0 * tp_on,
        "sp_regather": 2.0 * tp_on * s.sequence_parallel.astype(float),
    }


def pp_message_bytes(model: Model, s: StrategyArrays) -> FloatArray:
    """Bytes one GPU sends to its next-stage peer per micro-batch and boundary, one way."""
    return np.asarray(tp_message_bytes(model, s) / s.tp)


def pp_boundaries_per_micro_batch(s: StrategyArrays) -> FloatArray:
    """Stage boundaries a micro-batch crosses, per direction, seen from one pipeline."""
    return np.asarray((s.pp - 1) * s.interleave + (s.interleave - 1), dtype=float)


def dp_gradient_bytes(model: Model, s: StrategyArrays) -> FloatArray:
    """Gradient buffer each GPU reduces over its data-parallel group per iteration."""
    return np.asarray(stage_params(model, s) * s.grad_reduce_bytes)


def dp_weight_gather_bytes(model: Model, s: StrategyArrays) -> FloatArray:
    """With a distributed optimizer (ZeRO ≥ 1): the bf16 weights all-gathered after the step."""
    return np.asarray(np.where(s.zero >= 1, stage_params(model, s) * WEIGHT_BYTES, 0.0))


def embedding_gradient_bytes(model: Model, s: StrategyArrays) -> FloatArray:
    """Tied embeddings with pp > 1: first and last stage all-reduce this many bytes."""
    tied = model.tied_embeddings
    size = model.vocab * model.hidden / s.tp * s.grad_reduce_bytes
    return np.asarray(np.where((s.pp > 1) & tied, size, 0.0))
