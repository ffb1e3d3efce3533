"""Bytes every GPU pair exchanges in one decode step, and in the prefill→decode KV transfer.

Ranks are numbered tp fastest, then ep, then pp, then replica (GPU id = t + tp·(e + ep·(p +
pp·r))), and fill HB domains in id order. Per decode step of `batch` sequences per tp × pp
group: every layer all-reduces the bf16 activations of the batch twice in its tp group (each
all-reduce = reduce-scatter + all-gather, with the ring/hierarchical pattern of the training
traffic, `placement.collective_edges`); every MoE layer dispatches and combines each token's
top_k copies among the ep ranks (uniform all-to-all); each pipeline boundary forwards the
batch's activations once. Disaggregated serving: the first `prefill_groups` tp·pp·ep instances
prefill, the others decode; GPU j of a prefill instance sends the KV cache of its prompts to GPU
j of a decode instance (round robin over the decode instances).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from railplan.errors import RailplanError
from railplan.inference.engine import ACT_BYTES, Deployment, ep_pair_bytes
from railplan.specs.arrays import FloatArray, IntArray
from railplan.traffic.placement import Edges, all_to_all_edges, collective_edges, cross_rail

KINDS: tuple[str, ...] = ("tp", "ep", "pp", "kv")


@dataclass(frozen=True)
class InferenceTraffic:
    """Directed GPU pairs with bytes, by kind, on HB domains of `hb_domain` GPUs."""

    gpus: int
    hb_domain: int
    src: IntArray
    dst: IntArray
    kind: IntArray  # index into KINDS
    bytes: FloatArray

    def summary(self) -> dict[str, Any]:
        """Total, HB-domain, NIC and cross-rail bytes, overall and by kind."""
        k = self.hb_domain
        same = self.src // k == self.dst // k
        cross = cross_rail(self.src, self.dst, k)
        by_kind = {name: float(self.bytes[self.kind == i].sum()) for i, name in enumerate(KINDS)}
        total = float(self.bytes.sum())
        return {
            "total_bytes": total,
            "hb_bytes": float(self.bytes[same].sum()),
            "nic_bytes": float(self.bytes[~same].sum()),
            "cross_rail_bytes": float(self.bytes[cross].sum()),
            "bytes_by_kind": by_kind,
            "pairs_with_traffic": int(np.unique(self.src * self.gpus + self.dst).size),
        }

    def dense(self, first_gpus: int) -> FloatArray:
        """Dense byte matrix of GPUs 0…first_gpus−1 (src row, dst column), for heatmaps."""
        n = min(int(first_gpus), self.gpus)
        sel = (self.src < n) & (self.dst < n)
        m = np.zeros((n, n))
        np.add.at(m, (self.src[sel], self.dst[sel]), self.bytes[sel])
        return m


def _ids(dep: Deployment) -> IntArray:
    """GPU ids as [replica, pp, ep, tp]."""
    return np.arange(dep.gpus, dtype=np.int64).reshape(-1, dep.pp, dep.ep, dep.tp)


def _build(dep: Deployment, parts: list[tuple[int, Edges, float]]) -> InferenceTraffic:
    kept = [(i, e, size) for i, e, size in parts if len(e)]
    if not kept:
        z = np.zeros(0, dtype=np.int64)
        src, dst, kind, vol = z, z.copy(), z.copy(), np.zeros(0)
    else:
        src = np.concatenate([e.src for _, e, _ in kept])
        dst = np.concatenate([e.dst for _, e, _ in kept])
        kind = np.concatenate([np.full(len(e), i, dtype=np.int64) for i, e, _ in kept])
        vol = np.concatenate([e.share * size for _, e, size in kept])
    k = int(np.max(dep.links.hb_domain))
    return InferenceTraffic(dep.gpus, k, src, dst, kind, vol)


def decode_step_traffic(dep: Deployment, batch: int) -> InferenceTraffic:
    """Pair bytes of one decode step with `batch` sequences on every tp × pp group. With
    speculative decoding each sequence puts its token and its drafts through the layers
    (`Deployment.verified_tokens`), and the last stage drafts D tokens with the prediction
    module, one MoE layer per draft (`engine.draft_s`): D/pp layers more per group on average."""
    if batch < 1:
        raise RailplanError("batch", f"must be a positive integer; got {batch}")
    m, ids = dep.model, _ids(dep)
    k = int(np.max(dep.links.hb_domain))
    layers = m.layers / dep.pp
    drafts = dep.speculative_tokens / dep.pp  # draft layers per group, on average
    act = batch * m.hidden * ACT_BYTES
    tp_groups = ids.reshape(-1, dep.tp)
    # two all-reduces per layer, each reduce-scatter + all-gather of the activations
    tp_bytes = 2.0 * 2.0 * act * (layers * dep.verified_tokens + drafts)
    parts = [(0, collective_edges(tp_groups, k), tp_bytes)]
    if dep.ep > 1:
        ep_groups = ids.transpose(0, 1, 3, 2).reshape(-1, dep.ep)

        def pair(tokens: float) -> float:
            pairs = ep_pair_bytes(dep, tokens)
            return float(pairs["dispatch"] + pairs["combine"])

        ep_bytes = (m.moe_layers / dep.pp) * pair(float(batch * dep.verified_tokens))
        ep_bytes += drafts * pair(float(batch))
        parts.append((1, all_to_all_edges(ep_groups), ep_bytes))
    if dep.pp > 1:
        chains = ids.transpose(0, 2, 3, 1).reshape(-1, dep.pp)
        src, dst = chains[:, :-1].ravel(), chains[:, 1:].ravel()
        parts.append((2, Edges(src, dst, np.ones(src.size)), act * dep.verified_tokens))
    return _build(dep, parts)


def kv_transfer_traffic(
    dep: Deployment, prefill_groups: int, prompts: float, input_tokens: int
) -> InferenceTraffic:
    """Pair bytes of shipping the KV caches of `prompts` prompts (per prefill group) to the
    decode groups."""
    groups = dep.replicas
    if not 1 <= prefill_groups < groups:
        raise RailplanError(
            "prefill_groups", f"must be in [1, {groups - 1}] (tp·pp·ep instances: {groups})"
        )
    g = np.arange(dep.gpus, dtype=np.int64).reshape(groups, -1)  # tp·pp·ep per instance
    pre, dec = g[:prefill_groups], g[prefill_groups:]
    target = dec[np.arange(prefill_groups) % dec.shape[0]]
    size = prompts * input_tokens * dep.kv_bytes_per_token
    e = Edges(pre.ravel(), target.ravel(), np.ones(pre.size))
    return _build(dep, [(3, e, size)])


def configuration_traffic(
    dep: Deployment, batch: int, input_tokens: int, prefill_gpus: int = 0
) -> dict[str, Any]:
    """What a served configuration moves, summarized (`InferenceTraffic.summary`): one decode
    step at `batch` on the GPUs that decode and, when `prefill_gpus` of `dep`'s GPUs prefill
    (disaggregated), one prompt's KV cache shipped from a prefill instance to a decode one."""
    if not prefill_gpus:
        return {"decode_step": decode_step_traffic(dep, batch).summary()}
    decoding = replace(dep, gpus=dep.gpus - prefill_gpus)
    return {
        "decode_step": decode_step_traffic(decoding, batch).summary(),
        "kv_transfer_per_prompt": prompt_kv_traffic(dep, input_tokens, prefill_gpus).summary(),
    }


def prompt_kv_traffic(dep: Deployment, input_tokens: int, prefill_gpus: int) -> InferenceTraffic:
    """Pair bytes of one prompt's KV cache shipped from a prefill instance (`prefill_gpus` of
    `dep`'s GPUs prefill) to a decode instance."""
    groups = prefill_gpus // dep.instance_gpus
    # one prompt lives on one ep rank's tp·pp GPUs (attention data-parallel), whose stages hold
    # the model's layers once (kv_bytes_per_token is the fullest stage's)
    share = dep.model.layers / (dep.pp * dep.stage_layers) / (groups * dep.ep)
    return kv_transfer_traffic(dep, groups, share, input_tokens)
