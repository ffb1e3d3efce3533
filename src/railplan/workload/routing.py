"""How many token slots the busiest expert-parallel rank handles, relative to b·s·top_k.

Capacity-based MoE (GShard, DeepSpeed-MoE: `drop_tokens`) pads every expert to
capacity_factor × its fair share and drops the overflow, so the work per rank is
capacity_factor whatever the skew. Dropless MoE (MegaBlocks, Megatron-core) processes every
token, so the all-to-all and the expert GEMMs wait for the most loaded rank: with expert
popularity Zipf-distributed (share of expert i ∝ 1/i^z, z = `routing_zipf`, 0 = uniform) and
experts placed on ranks in contiguous blocks, that is ep × the largest block share.
"""

from __future__ import annotations

import numpy as np

from railplan.specs import Model
from railplan.specs.arrays import FloatArray, IntArray


def expert_shares(model: Model) -> FloatArray:
    """Share of routed tokens each expert receives (sums to 1)."""
    ranks = np.arange(1, model.experts + 1, dtype=np.float64)
    weights = ranks ** (-model.routing_zipf)
    return np.asarray(weights / weights.sum())


def max_rank_load(model: Model, ep: int) -> float:
    """Largest expert-parallel rank's share of tokens × ep (1.0 when balanced)."""
    blocks = expert_shares(model).reshape(ep, model.experts // ep).sum(axis=1)
    return float(blocks.max() * ep)


def slot_factor(model: Model, ep: IntArray | int) -> FloatArray:
    """Token slots per GPU over b·s·top_k: capacity_factor when tokens are dropped, else the
    busiest rank's load."""
    ep_arr = np.asarray(ep, dtype=np.int64)
    if model.drop_tokens or model.experts == 1:
        return np.asarray(np.full(ep_arr.shape, model.capacity_factor, dtype=np.float64))
    out = np.ones(ep_arr.shape, dtype=np.float64)
    for value in np.unique(ep_arr):
        if model.experts % int(value) == 0:
            out = np.where(ep_arr == value, max_rank_load(model, int(value)), out)
    return np.asarray(out)


def dropped_fraction(model: Model) -> float:
    """Share of routed tokens over capacity (dropped) with capacity-based routing, per expert."""
    if not model.drop_tokens or model.experts == 1:
        return 0.0
    share = expert_shares(model) * model.experts  # load relative to the fair share
    return float(np.maximum(share - model.capacity_factor, 0.0).sum() / model.experts)
