"""How many token slots the busiest expert-parallel rank handles, relative to b·s·top_k.

Capacity-based MoE (GShard, DeepSpeed-MoE: `drop_tokens`) pads every expert to
capacity_factor × its fair share and drops the overflow, so the work per rank is
capacity_factor whatever the skew. Dropless MoE (MegaBlocks, Megatron-core) processes every
token, so the all-to-all and the expert GEMMs wait for the most loaded rank: with expert
popularity Zipf-distributed (share of expert i ∝ 1/i^z, z = `routing_zipf`, 0 = uniform) and
experts placed on ranks in contiguous blocks, that is ep × the largest block share.

DeepEP-style dispatch sends a token once to every HB domain holding one of its experts
(`remote_domains`), which group-limited routing (DeepSeek-V3: at most 4 of 8 groups, one per
node) bounds, and there once to every GPU holding one of them (`touched_ranks`).
"""

from __future__ import annotations

from functools import lru_cache
from math import comb

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


def token_slot_factor(model: Model) -> float:
    """Token slots a GPU makes of its own tokens, over b·s·top_k: the capacity factor when
    tokens are dropped and padded to the capacity, else 1 (each token has exactly top_k;
    routing skew concentrates them on some ranks, `slot_factor`, not on their senders)."""
    return float(model.capacity_factor) if model.drop_tokens and model.experts > 1 else 1.0


def dropped_fraction(model: Model) -> float:
    """Share of routed tokens over capacity (dropped) with capacity-based routing, per expert."""
    if not model.drop_tokens or model.experts == 1:
        return 0.0
    share = expert_shares(model) * model.experts  # load relative to the fair share
    return float(np.maximum(share - model.capacity_factor, 0.0).sum() / model.experts)


@lru_cache(maxsize=4096)
def touched_domains(experts: int, top_k: int, groups: int, route_groups: int, y: int) -> float:
    """Expected HB domains a token's `top_k` experts lie on, for an expert-parallel group
    spanning `y` domains (each holding experts/y consecutive experts) under uniform routing:
    the token picks `route_groups` of the `groups` consecutive expert groups (all when 0), then
    its experts among theirs. Σ over domains of P(domain holds one of them), each P exact
    (hypergeometric over the chosen groups' overlap with the domain)."""
    if y <= 1 or experts <= 1:
        return 1.0
    per_domain, per_group = experts // y, experts // groups
    chosen = groups if route_groups in (0, groups) else route_groups
    pool = chosen * per_group  # experts the token chooses from
    total = 0.0
    for d in range(y):
        lo, hi = d * per_domain, (d + 1) * per_domain
        overlap = [
            max(0, min(hi, (g + 1) * per_group) - max(lo, g * per_group)) for g in range(groups)
        ]
        # ways[j][o]: subsets of j groups whose overlap with the domain sums to o
        ways = [[0] * (per_domain + 1) for _ in range(chosen + 1)]
        ways[0][0] = 1
        for ov in overlap:
            for j in range(chosen, 0, -1):
                row, prev = ways[j], ways[j - 1]
                for o in range(per_domain, ov - 1, -1):
                    row[o] += prev[o - ov]
        subsets = comb(groups, chosen)
        miss = sum(
            count * comb(pool - o, top_k) for o, count in enumerate(ways[chosen]) if count
        ) / (subsets * comb(pool, top_k))
        total += 1.0 - miss
    return total


def touched_ranks(model: Model, ep: IntArray | int) -> FloatArray:
    """Expected expert-parallel ranks a token's top_k experts lie on (each rank holding
    experts/ep consecutive experts; group-limited routing as in `touched_domains`): the copies
    of a token DeepEP's normal kernels move, one per destination rank, which then hands it to
    each of its experts there (deep_ep `get_dispatch_layout`'s `is_token_in_rank`; its tests
    count the bytes received per rank the same way). top_k where the experts do not split
    evenly over the ranks."""
    ep_arr = np.asarray(ep, dtype=np.int64)
    out = np.full(ep_arr.shape, float(model.top_k))
    for value in np.unique(ep_arr):
        v = int(value)
        if v >= 1 and model.experts % v == 0:
            d = touched_domains(
                model.experts, model.top_k, model.expert_groups, model.route_groups, v
            )
            out = np.where(ep_arr == v, d, out)
    return np.asarray(out)


def remote_domains(model: Model, y: FloatArray) -> FloatArray:
    """Expected HB domains other than its own a token's experts lie on (`touched_domains`
    × (y − 1)/y: routing does not depend on where the token is), for expert-parallel groups
    spanning `y` domains (rounded)."""
    ys = np.rint(np.asarray(y, dtype=np.float64)).astype(np.int64)
    out = np.zeros(ys.shape, dtype=np.float64)
    for value in np.unique(ys):
        v = int(value)
        if v > 1 and model.experts % v == 0:
            d = touched_domains(
                model.experts, model.top_k, model.expert_groups, model.route_groups, v
            )
            out = np.where(ys == v, d * (v - 1) / v, out)
        elif v > 1:  # experts not split evenly over the domains: every slot may be remote
            out = np.where(ys == v, model.top_k * (v - 1) / v, out)
    return np.asarray(out)
