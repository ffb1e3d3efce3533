"""Collective-communication times (alpha-beta), over numpy arrays.

Conventions: `size_bytes` is the collective's total buffer (the all-reduced vector, the gathered
result); bandwidths are achievable bytes/s per GPU per direction; latencies are seconds per step.
Group shape: x GPUs per HB domain × y HB domains (x·y members).

Sources: ring/tree/in-network costs as in seed 003 (ring 2(N−1)/N·D bytes per worker in O(N)
steps, tree the same bytes in O(log N) steps, in-network aggregation D bytes in O(1));
hierarchical AllGather/ReduceScatter and all-to-all with forwarding from the Rail-only paper
(SYSTEM.md formulas 2 and 3).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
Num = FloatArray | float | int | npt.NDArray[np.int64]


def _f(x: Num) -> FloatArray:
    return np.asarray(x, dtype=np.float64)


def ring_all_gather_s(n: Num, size_bytes: Num, bw: Num, latency_s: Num) -> FloatArray:
    """Ring all-gather (or reduce-scatter) of a `size_bytes` result over n ranks."""
    n = _f(n)
    return (n - 1) / n * _f(size_bytes) / _f(bw) + (n - 1) * _f(latency_s)


ring_reduce_scatter_s = ring_all_gather_s


def ring_all_reduce_s(n: Num, size_bytes: Num, bw: Num, latency_s: Num) -> FloatArray:
    """Ring all-reduce = reduce-scatter + all-gather: 2(n−1)/n·D/bw + 2(n−1)·α."""
    return 2.0 * ring_all_gather_s(n, size_bytes, bw, latency_s)


def tree_all_reduce_s(n: Num, size_bytes: Num, bw: Num, latency_s: Num) -> FloatArray:
    """Pipelined (double binary) tree all-reduce: ~2·D/bw bytes, 2·log2(n) latency steps."""
    n = _f(n)
    data = np.where(n > 1, 2.0 * _f(size_bytes) / _f(bw), 0.0)
    return data + 2.0 * np.ceil(np.log2(np.maximum(n, 1.0))) * _f(latency_s)


def in_network_all_reduce_s(n: Num, size_bytes: Num, bw: Num, latency_s: Num) -> FloatArray:
    """In-network aggregation (SHARP): each GPU sends and receives D once, O(1) steps."""
    n = _f(n)
    return np.where(n > 1, _f(size_bytes) / _f(bw) + 2.0 * _f(latency_s), 0.0)


def hierarchical_all_gather_s(
    x: Num, y: Num, size_bytes: Num, hb_bw: Num, nic_bw: Num, hb_lat_s: Num, nic_lat_s: Num
) -> FloatArray:
    """Rail phase then HB phase (SYSTEM.md formula 2):
    (y−1)·D/(x·y·C_S) + (x−1)·D/(x·C_F), plus (y−1)·α_S + (x−1)·α_F."""
    x, y, d = _f(x), _f(y), _f(size_bytes)
    rail = (y - 1) * d / (x * y * _f(nic_bw)) + (y - 1) * _f(nic_lat_s)
    domain = (x - 1) * d / (x * _f(hb_bw)) + (x - 1) * _f(hb_lat_s)
    return rail + domain


hierarchical_reduce_scatter_s = hierarchical_all_gather_s  # the reverse schedule, same cost


def hierarchical_data_s(
    x: Num, y: Num, size_bytes: Num, hb_bw: Num, nic_bw: Num, phases: float = 2.0
) -> FloatArray:
    """The Simple hierarchical ring's data time alone (no latency): an all-reduce (`phases` 2)
    or an all-gather / reduce-scatter (1); what NCCL's other protocols scale
    (`nccl_multinode_s`)."""
    return np.asarray(phases * hierarchical_all_gather_s(x, y, size_bytes, hb_bw, nic_bw, 0.0, 0.0))


def hierarchical_all_reduce_s(
    x: Num, y: Num, size_bytes: Num, hb_bw: Num, nic_bw: Num, hb_lat_s: Num, nic_lat_s: Num
) -> FloatArray:
    """AllReduce = ReduceScatter + AllGather, each hierarchical."""
    return 2.0 * hierarchical_all_gather_s(x, y, size_bytes, hb_bw, nic_bw, hb_lat_s, nic_lat_s)


def all_to_all_rail_optimized_s(
    x: Num, y: Num, pair_bytes: Num, hb_bw: Num, nic_bw: Num, hb_lat_s: Num, nic_lat_s: Num
) -> FloatArray:
    """Direct all-to-all on an any-to-any network: max((x−1)·D/C_F, x·(y−1)·D/C_S)."""
    x, y, d = _f(x), _f(y), _f(pair_bytes)
    hb = (x - 1) * d / _f(hb_bw) + np.where(x > 1, _f(hb_lat_s), 0.0)
    nic = x * (y - 1) * d / _f(nic_bw) + np.where(y > 1, _f(nic_lat_s), 0.0)
    return np.maximum(hb, nic)


def all_to_all_rail_only_s(
    x: Num, y: Num, pair_bytes: Num, hb_bw: Num, nic_bw: Num, hb_lat_s: Num, nic_lat_s: Num
) -> FloatArray:
    """Two-step all-to-all with forwarding: in each rail (shards of x·D), then in each HB
    domain: x·(y−1)·D/C_S + y·(x−1)·D/C_F."""
    x, y, d = _f(x), _f(y), _f(pair_bytes)
    rail = x * (y - 1) * d / _f(nic_bw) + np.where(y > 1, _f(nic_lat_s), 0.0)
    domain = y * (x - 1) * d / _f(hb_bw) + np.where(x > 1, _f(hb_lat_s), 0.0)
    return rail + domain


def all_to_all_deduplicated_s(
    x: Num,
    y: Num,
    token_bytes: Num,
    remote_domains: Num,
    slots: Num,
    hb_bw: Num,
    nic_bw: Num,
    hb_lat_s: Num,
    nic_lat_s: Num,
) -> FloatArray:
    """DeepEP-style dispatch (or combine) of `token_bytes` of tokens per GPU over x GPUs per
    HB domain × y domains: each token crosses once to each of its `remote_domains` other
    domains, over its own rail to the GPU of the same local rank, and its `slots` copies (one
    per GPU holding one of its experts, `routing.touched_ranks`) then reach their GPUs over
    NVLink unless already there ((x − 1)/x of them); the two phases overlap (DeepSeek-V3
    report §3.2.2): max(R·T/C_S, slots·(x−1)/x·T/C_F)."""
    x, y, t = _f(x), _f(y), _f(token_bytes)
    rail = _f(remote_domains) * t / _f(nic_bw)
    domain = _f(slots) * (x - 1) / x * t / _f(hb_bw)
    lat = np.where(y > 1, _f(nic_lat_s), 0.0) + np.where(x > 1, _f(hb_lat_s), 0.0)
    return np.asarray(np.maximum(rail, domain) + lat)


def group_shape(n: Num, stride: Num, hb_domain: Num) -> tuple[FloatArray, FloatArray]:
    """(x, y) of a group of n ranks spaced `stride` apart in a rank order that fills HB
    domains of size K in turn: x = members per domain, y = domains spanned."""
    n, stride, k = _f(n), _f(stride), _f(hb_domain)
    x = np.clip(np.floor(k / stride), 1.0, n)
    return x, np.ceil(n / x)


#: NVLink SHARP link efficiency on NVSwitch 3 (H100/H200 class): nccl-tests on 8× H200 peaks at
#: busbw 475 GB/s (NVIDIA/nccl-tests#272) = algbw 271 GB/s; NVLS moves (n+1)/n·D per GPU link
#: (NVIDIA/nccl-tests#212, PR #239), so the link carries 305 GB/s of 450 GB/s line rate: 0.679.
NVLS_LINK_EFFICIENCY = 0.679


def nvls_bytes_per_s(hb_tbps: float, hb_bytes_per_s: float) -> float:
    """Achievable NVLink SHARP bandwidth per GPU link, never above the ring's."""
    return min(hb_tbps * 1e12 / 8 * NVLS_LINK_EFFICIENCY, hb_bytes_per_s)


#: NCCL's tuning model for NVLink SHARP inside a node: one latency of 25 µs, not per step
#: (src/graph/tuning.cc: `latencies[coll][NVLS][p] = intraLat`, hwLatencies NVLINK NVLS Simple 25,
#: base 0), against the ring's 3.4 µs per step.
NCCL_NVLS_LATENCY_US = 25.0


def nvls_all_reduce_s(n: Num, size_bytes: Num, bw: Num) -> FloatArray:
    """NVLink SHARP all-reduce inside one NVSwitch domain: each GPU link carries (n+1)/n·D per
    direction (multimem load-reduce of the inputs, multicast store of its slice;
    NVIDIA/nccl-tests#212), at NCCL's NVLS latency; 0 for one rank."""
    n = _f(n)
    data = (n + 1) / np.maximum(n, 1.0) * _f(size_bytes) / _f(bw)
    return np.asarray(np.where(n > 1, data + NCCL_NVLS_LATENCY_US * 1e-6, 0.0))


def in_network_hierarchical_all_reduce_s(
    x: Num,
    y: Num,
    size_bytes: Num,
    hb_bw: Num,
    nic_bw: Num,
    hb_lat_s: Num,
    nic_lat_s: Num,
    nvls_bw: float,
    sharp: bool,
) -> FloatArray:
    """All-reduce over x GPUs per domain × y domains with in-network aggregation: NVLink SHARP in
    the domain when `nvls_bw` > 0 (else a ring), and over each rail on the 1/x shard SHARP when
    `sharp` (else a ring); the two phases pipelined (NCCL's NVLS-tree and CollNet stream chunks)."""
    x, y, d = _f(x), _f(y), _f(size_bytes)
    if nvls_bw > 0:
        intra = nvls_all_reduce_s(x, d, nvls_bw)
    else:
        intra = ring_all_reduce_s(x, d, hb_bw, hb_lat_s)
    if sharp:
        inter = in_network_all_reduce_s(y, d / x, nic_bw, nic_lat_s)
    else:
        inter = ring_all_reduce_s(y, d / x, nic_bw, nic_lat_s)
    return np.asarray(np.where(y > 1, np.maximum(intra, inter), intra))


# NCCL's tuning model (src/graph/tuning.cc, ncclTunerConstantsDefaults) for the LL protocol of
# the tree algorithm, which NCCL's tuner picks for small all-reduces across nodes: base latency,
# per NVLink hop inside a node, per network hop between nodes (µs).
NCCL_TREE_LL_BASE_US, NCCL_TREE_LL_NVLINK_US, NCCL_TREE_LL_NET_US = 6.8, 0.6, 5.0


def small_all_reduce_s(x: Num, y: Num) -> FloatArray:
    """Latency of an all-reduce of a few bytes over x GPUs per node × y nodes, as NCCL's tuning
    model predicts its tree/LL path: base + 2·((x − 1)·NVLink hop + ⌊log2 y⌋·network hop)
    (tuning.cc: `2 * ((nRanks / nNodes - 1) * intraLat + log2i(nNodes) * interLat)`); 0 for one
    rank."""
    x, y = _f(x), _f(y)
    hops = (x - 1.0) * NCCL_TREE_LL_NVLINK_US + np.floor(np.log2(np.maximum(y, 1.0))) * (
        NCCL_TREE_LL_NET_US
    )
    return np.where(x * y > 1, (NCCL_TREE_LL_BASE_US + 2.0 * hops) * 1e-6, 0.0)


#: NCCL's base latency of a ring or tree collective with the Simple protocol, once per
#: collective beside its per-step latencies (src/graph/tuning.cc, `baseLatencies` Tree / Ring
#: Simple 8.4 µs); added by `comm_time.group_collective_s` and `railplan collective` so the
#: Simple ring competes with the LL rings on NCCL's terms. NVLS and CollNet have none.
NCCL_SIMPLE_BASE_US = 8.4


# NCCL's tuning model for a ring all-reduce inside one node over NVLink (src/graph/tuning.cc at
# 5067397, ncclTunerConstantsDefaults): base latency and latency per NVLink step of the LL and
# LL128 protocols (µs; the Simple protocol's 3.4 µs step is `System.hb_latency_us`), and their
# bus-bandwidth factors: LL moves 4 bytes of data per 8-byte line (`busBw * .5`, capped by
# `llMaxBws`), LL128 120 of every 128 bytes (`busBw * 0.92`).
NCCL_RING_LL_BASE_US, NCCL_RING_LL_NVLINK_US, NCCL_LL_BW_FACTOR = 6.6, 0.6, 0.5
NCCL_RING_LL128_BASE_US, NCCL_RING_LL128_NVLINK_US, NCCL_LL128_BW_FACTOR = 14.0, 1.9, 0.92


def nccl_low_latency_ring_s(
    n: Num, size_bytes: Num, bw: Num, ll_max_bw: float, phases: float = 2.0
) -> FloatArray:
    """Ring all-reduce (`phases` 2) or all-gather / reduce-scatter (`phases` 1) of `size_bytes`
    over n GPUs of one NVLink domain with the faster of NCCL's low-latency protocols, as its
    tuning model times them: base + phases·(n−1) steps + phases·(n−1)/n·D over the protocol's
    bus bandwidth (LL: min(½·bw, `ll_max_bw`); LL128: 0.92·bw); 0 for one rank. NCCL picks
    the protocol its model predicts fastest, so the Simple ring competes with this one for
    every message (`comm_time.group_collective_s`)."""
    n, d, b = _f(n), _f(size_bytes), _f(bw)
    steps = phases * (n - 1.0)
    data = steps / np.maximum(n, 1.0) * d
    ll = (NCCL_RING_LL_BASE_US + steps * NCCL_RING_LL_NVLINK_US) * 1e-6 + data / np.minimum(
        NCCL_LL_BW_FACTOR * b, ll_max_bw
    )
    ll128 = (NCCL_RING_LL128_BASE_US + steps * NCCL_RING_LL128_NVLINK_US) * 1e-6 + data / (
        NCCL_LL128_BW_FACTOR * b
    )
    return np.asarray(np.where(n > 1, np.minimum(ll, ll128), 0.0))


# NCCL's tuning model across nodes (src/graph/tuning.cc at 5067397, ncclTunerConstantsDefaults and
# ncclTopoTuneModel), per protocol (LL, LL128, Simple): the tree's base latency, its latency per
# NVLink hop inside a node and per network hop; the ring's latency per network step (a ring with
# one GPU per node takes the tree's, `ppn == 1`); the tree all-reduce's bus-bandwidth factors
# (0.92 for every protocol, then LL ÷ 3.8, LL128 × 120/128; its algorithm bandwidth is half the
# bus bandwidth) and `treeCorrectionFactor`, by log2(bytes / 64), for 64 B up to 512 MiB.
NCCL_TREE_BASE_US = (6.8, 14.0, 8.4)
NCCL_TREE_NVLINK_US = (0.6, 1.25, 4.0)
NCCL_TREE_NET_US = (5.0, 8.5, 14.0)
NCCL_RING_NET_US = (2.7, 4.0, 14.0)
NCCL_TREE_BW_FACTOR = 0.92
NCCL_TREE_LL_BW_DIVISOR = 3.8
NCCL_TREE_LL128_BW_FACTOR = 120.0 / 128.0
NCCL_TREE_CORRECTION = np.array(
    [
        [1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0],  # noqa: E501
        [1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0],  # noqa: E501
        [.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9],  # noqa: E501
    ]
)  # fmt: skip
#: NCCL's cap on the LL protocol's bus bandwidth across nodes, by host CPU (tuning.cc `llMaxBws`,
#: row 1 for AMD hosts, row 0 for any other; column N2 for two nodes, N4 for more), GB/s.
NCCL_NET_LL_MAX_GBPS = {"amd": (22.5, 19.0), "intel": (39.0, 20.4), "arm": (39.0, 20.4)}
#: NCCL's network post overhead (`getNetOverhead`: 1 µs on Intel x86 hosts, 2 µs on AMD, 1 µs
#: otherwise), the least a ring step pays inside a node when the ring crosses nodes (× 3 for
#: Simple, which railplan's Simple hierarchical ring does not apply: docs/model.md).
NCCL_NET_OVERHEAD_US = {"amd": 2.0, "intel": 1.0, "arm": 1.0}


def _tree_correction(size_bytes: FloatArray) -> FloatArray:
    """`treeCorrectionFactor` rows (LL, LL128, Simple) at each size (`log2i(nBytes >> 6)` < 23):
    1 below 64 B and from 512 MiB, and for sizes that are not finite."""
    safe = np.where(np.isfinite(size_bytes), size_bytes, 0.0)
    log_size = np.floor(np.log2(np.maximum(safe, 1.0) / 64.0))
    index = np.clip(log_size, 0, 22).astype(np.int64)
    inside = (safe >= 64.0) & (log_size < 23)
    return np.asarray(np.where(inside, NCCL_TREE_CORRECTION[:, index], 1.0))


def nccl_net_ll_cap_bytes_per_s(nodes: Num, host_cpu: str) -> FloatArray:
    """NCCL's LL bus-bandwidth cap for a group over more than one node (`NCCL_NET_LL_MAX_GBPS`:
    its two-node column for two, its N4 column for more)."""
    ll_two, ll_more = NCCL_NET_LL_MAX_GBPS[host_cpu]
    return np.asarray(np.where(_f(nodes) <= 2, ll_two, ll_more) * 1e9)


def nccl_multinode_ring_s(
    x: Num,
    y: Num,
    size_bytes: Num,
    simple_data_s: Num,
    host_cpu: str,
    phases: float = 2.0,
    nodes: Num | None = None,
) -> FloatArray:
    """LL and LL128 rings, the faster, over x GPUs per HB domain × y > 1 domains (`nodes` HB
    domains spanned, y where every domain holds x), on railplan's hierarchical schedule with
    NCCL's protocol constants: `simple_data_s`, the Simple ring's data time (SYSTEM.md formula
    2), scaled by the protocol's bandwidth factor (LL: ½, and at most NCCL's cap across nodes;
    LL128: 0.92); phases·(x − 1) steps inside the domains, each at least NCCL's network post
    overhead, and phases·(nodes − 1) across, each at NCCL's network latency for the protocol
    (the tree's with one GPU per domain, `ppn == 1`). NCCL's own flat ring counts n − nodes
    steps inside per phase and is slower for small messages (16 KiB over two 8-GPU servers:
    ≈ 41 µs against this 27 µs); railplan keeps one step count for every protocol, the one its
    Simple ring has."""
    x, y, d, simple = _f(x), _f(y), _f(size_bytes), _f(simple_data_s)
    nodes_ = y if nodes is None else _f(nodes)
    n = x * y
    overhead = NCCL_NET_OVERHEAD_US[host_cpu]
    bus_bytes = phases * (n - 1) / np.maximum(n, 1.0) * d  # what a rank's bus carries
    intra, inter = phases * (x - 1), phases * (nodes_ - 1)

    def lat_s(p: int, base_us: float, nvlink_us: float) -> FloatArray:
        net_us = np.where(x <= 1, NCCL_TREE_NET_US[p], NCCL_RING_NET_US[p])
        return np.asarray((base_us + intra * max(nvlink_us, overhead) + inter * net_us) * 1e-6)

    cap = nccl_net_ll_cap_bytes_per_s(nodes_, host_cpu)
    ll = lat_s(0, NCCL_RING_LL_BASE_US, NCCL_RING_LL_NVLINK_US) + np.maximum(
        simple / NCCL_LL_BW_FACTOR, bus_bytes / cap
    )
    ll128 = lat_s(1, NCCL_RING_LL128_BASE_US, NCCL_RING_LL128_NVLINK_US) + (
        simple / NCCL_LL128_BW_FACTOR
    )
    return np.asarray(np.where(y > 1, np.minimum(ll, ll128), np.inf))


def nccl_tree_all_reduce_s(
    x: Num, y: Num, size_bytes: Num, simple_data_s: Num, host_cpu: str, nodes: Num | None = None
) -> FloatArray:
    """NCCL's tree all-reduce over x GPUs per HB domain × y > 1 domains (`nodes` HB domains
    spanned, y where every domain holds x; a chain inside each domain, a double binary tree
    across them), the fastest of its three protocols as its tuning model times them: latency
    base + 2·((n/nodes − 1)·NVLink hop + ⌊log2 nodes⌋·network hop); 2·D at the
    tree's bus bandwidth, 0.92 of the ring's (the one `simple_data_s` implies: the tree's data
    time scales with the ring's) and then LL ÷ 3.8 (at most NCCL's cap across nodes) or LL128
    × 120/128, divided by `treeCorrectionFactor`. That factor steps up at some powers of two,
    where NCCL's model has a message just below the step slower than one just above it; a
    message can always be sent as the larger one, so the time is the least over the sizes from
    D up (the model's at D and at every step above it)."""
    x, y, size, simple = _f(x), _f(y), _f(size_bytes), _f(simple_data_s)
    nodes_ = y if nodes is None else _f(nodes)
    finite = np.isfinite(size)
    d = np.where(finite, size, 0.0)
    n = x * y
    # data seconds per byte of the all-reduced vector at the Simple tree's bus bandwidth (the
    # ring's data time scales with D): 2·D / (0.92 · ring bus bandwidth)
    ring_bus = 2.0 * (n - 1) / np.maximum(n, 1.0)
    per_byte = np.where(
        finite, 2.0 * simple / (np.maximum(ring_bus * d, 1e-300) * NCCL_TREE_BW_FACTOR), 0.0
    )
    inv_cap = 2.0 / nccl_net_ll_cap_bytes_per_s(nodes_, host_cpu)  # LL s per byte at the cap
    hops = np.floor(np.log2(np.maximum(nodes_, 1.0)))
    per_node = n / np.maximum(nodes_, 1.0)
    lat = [
        (
            NCCL_TREE_BASE_US[p]
            + 2.0 * ((per_node - 1) * NCCL_TREE_NVLINK_US[p] + hops * NCCL_TREE_NET_US[p])
        )
        * 1e-6
        for p in range(3)
    ]
    ll_per_byte = np.maximum(per_byte * NCCL_TREE_LL_BW_DIVISOR, inv_cap)
    ll128_per_byte = per_byte / NCCL_TREE_LL128_BW_FACTOR

    def at(size: FloatArray | float, corr: FloatArray) -> FloatArray:
        return np.asarray(
            np.minimum(
                np.minimum(
                    lat[0] + ll_per_byte * (size / corr[0]),
                    lat[1] + ll128_per_byte * (size / corr[1]),
                ),
                lat[2] + per_byte * (size / corr[2]),
            )
        )

    best = at(d, _tree_correction(d))
    # the next size above D where a factor rises (the model's time grows from one such size to
    # the next, each at least twice the one before: the first one above D is the least)
    k = np.searchsorted(_TREE_STEP_SIZES, d, side="right")
    above = k < _TREE_STEP_SIZES.size
    k = np.minimum(k, _TREE_STEP_SIZES.size - 1)
    step = _TREE_STEP_SIZES[k]
    best = np.where(above, np.minimum(best, at(step, _TREE_STEP_CORRECTION[:, k])), best)
    best = np.where(finite, best, size)  # an infinite message takes forever, NaN stays NaN
    return np.asarray(np.where(y > 1, best, np.inf))


#: Sizes (64 B · 2^k) at which some protocol's `treeCorrectionFactor` rises over the one below.
_TREE_STEPS_BYTES = (
    *(
        64.0 * 2.0**k
        for k in range(1, NCCL_TREE_CORRECTION.shape[1])
        if bool(np.any(NCCL_TREE_CORRECTION[:, k] > NCCL_TREE_CORRECTION[:, k - 1]))
    ),
    64.0 * 2.0**23,  # from 512 MiB every factor is 1
)
_TREE_STEP_SIZES = np.asarray(_TREE_STEPS_BYTES)
_TREE_STEP_CORRECTION = _tree_correction(_TREE_STEP_SIZES)


def nccl_multinode_s(
    x: Num,
    y: Num,
    size_bytes: Num,
    simple_data_s: Num,
    host_cpu: str,
    phases: float = 2.0,
    nodes: Num | None = None,
) -> FloatArray:
    """Across y > 1 HB domains (`nodes` spanned), the fastest of the LL / LL128 rings
    (`nccl_multinode_ring_s`) and, for an all-reduce (`phases` 2), NCCL's tree with each
    protocol (`nccl_tree_all_reduce_s`). Left out of NCCL's model: its per-channel caps
    (railplan has no channel count), its PAT algorithm (all-gather / reduce-scatter with one GPU
    per node, at 0.75 of the ring's bandwidth), the 0.85 of a plain (unbalanced) tree pattern,
    and its Simple-ring refinements across nodes (3 × the post overhead per step inside a node,
    ×1.4 latency for large all-reduces), which railplan's Simple hierarchical ring does not
    apply."""
    ring = nccl_multinode_ring_s(x, y, size_bytes, simple_data_s, host_cpu, phases, nodes)
    if phases != 2.0:
        return ring
    tree = nccl_tree_all_reduce_s(x, y, size_bytes, simple_data_s, host_cpu, nodes)
    return np.asarray(np.minimum(ring, tree))
