"""Collective schedules as steps of flows: direct and forwarding all-to-all, ring and
hierarchical all-reduce, and the traffic matrices they move."""

from __future__ import annotations

import numpy as np

from railplan.errors import RailplanError
from railplan.network.flowsim.fabric import FloatArray, IntArray
from railplan.network.flowsim.maxmin import Step


def uniform_pair_bytes(gpus: int, pair_bytes: float) -> FloatArray:
    """Uniform all-to-all: every ordered pair of distinct GPUs exchanges ``pair_bytes``."""
    m = np.full((gpus, gpus), float(pair_bytes))
    np.fill_diagonal(m, 0.0)
    return m


def zipf_pair_bytes(
    gpus: int, mean_pair_bytes: float, exponent: float, seed: int = 0
) -> FloatArray:
    """MoE all-to-all with Zipf expert load: GPU b hosts one expert whose popularity is
    ∝ 1/rank^exponent (ranks a seeded permutation of the GPUs); every GPU sends its tokens in
    those proportions, so pair (a, b) carries N·D·w_b/Σw (self-traffic dropped). Mean over all
    N² entries = D. Zipf expert skew: Fedus et al. 2022 (Switch Transformer) load imbalance."""
    if exponent < 0:
        raise RailplanError("skew", f"Zipf exponent must be ≥ 0; got {exponent}")
    rng = np.random.default_rng(seed)
    ranks = rng.permutation(gpus) + 1.0
    w = ranks**-exponent
    row = gpus * mean_pair_bytes * w / w.sum()
    m = np.tile(row, (gpus, 1))
    np.fill_diagonal(m, 0.0)
    return m


def alltoall_direct_steps(pair_bytes: FloatArray) -> list[Step]:
    """Direct all-to-all: one step with every pair (HB inside a domain, NIC between)."""
    return [Step("all-to-all", matrix=np.asarray(pair_bytes, dtype=np.float64))]


def alltoall_forwarding_steps(pair_bytes: FloatArray, hb_domain: int) -> list[Step]:
    """Rail-only all-to-all with forwarding (SYSTEM.md claim 3): step 1 all-to-all inside each
    rail, GPU (d, r) sending domain d' everything bound there (Σ_r' B[(d,r),(d',r')], x·D when
    uniform); step 2 inside each domain, GPU (d', r) forwarding to (d', r') everything it holds
    for it (Σ_d B[(d,r),(d',r')], y·D when uniform)."""
    b = np.asarray(pair_bytes, dtype=np.float64).copy()
    n = b.shape[0]
    k = hb_domain
    y = n // k
    np.fill_diagonal(b, 0.0)
    t = b.reshape(y, k, y, k)  # d, r, d', r'
    rail = t.sum(axis=3)  # (d, r, d'): to domain d' over rail r
    step1 = np.zeros((y, k, y, k))
    rr = np.arange(k)
    step1[:, rr, :, rr] = np.transpose(rail, (1, 0, 2))
    s1 = step1.reshape(n, n)
    np.fill_diagonal(s1, 0.0)  # (d,r)->(d,r): stays local
    hb = t.sum(axis=0)  # (r, d', r'): held by (d', r) for (d', r')
    step2 = np.zeros((y, k, y, k))
    dd = np.arange(y)
    step2[dd, :, dd, :] = np.transpose(hb, (1, 0, 2))
    s2 = step2.reshape(n, n)
    np.fill_diagonal(s2, 0.0)
    return [Step("rail phase", matrix=s1), Step("HB phase", matrix=s2)]


def _ring_step(groups: IntArray, chunk_bytes: float, name: str, repeat: int) -> Step:
    """Every member of each group (rows) sends ``chunk_bytes`` to the next one in its ring."""
    src = groups.reshape(-1)
    dst = np.roll(groups, -1, axis=1).reshape(-1)
    return Step(name, repeat, src=src, dst=dst, nbytes=np.full(len(src), float(chunk_bytes)))


def ring_allreduce_steps(gpus: int, hb_domain: int, size_bytes: float) -> list[Step]:
    """Ring all-reduce inside every rail at once (ring over the y domains, NIC-bound):
    2(y−1) identical steps of D/y per GPU (reduce-scatter then all-gather)."""
    y = gpus // hb_domain
    if y < 2:
        raise RailplanError("collective", "a ring inside a rail needs at least 2 HB domains")
    rails = np.arange(gpus).reshape(y, hb_domain).T  # rail r: GPUs (d, r)
    return [_ring_step(rails, size_bytes / y, "rail ring", 2 * (y - 1))]


def hierarchical_allreduce_steps(gpus: int, hb_domain: int, size_bytes: float) -> list[Step]:
    """Hierarchical all-reduce over all N = x·y GPUs (SYSTEM.md claim 2): reduce-scatter in the
    HB domain (ring, x−1 steps of D/x), reduce-scatter in the rail (ring, y−1 steps of D/(x·y)),
    then the reverse: all-gather in the rail, all-gather in the HB domain."""
    x = hb_domain
    y = gpus // x
    ids = np.arange(gpus)
    doms = ids.reshape(y, x)
    rails = doms.T
    steps: list[Step] = []
    if x > 1:
        steps.append(_ring_step(doms, size_bytes / x, "HB reduce-scatter", x - 1))
    if y > 1:
        steps.append(_ring_step(rails, size_bytes / (x * y), "rail reduce-scatter", y - 1))
        steps.append(_ring_step(rails, size_bytes / (x * y), "rail all-gather", y - 1))
    if x > 1:
        steps.append(_ring_step(doms, size_bytes / x, "HB all-gather", x - 1))
    return steps
