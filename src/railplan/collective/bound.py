"""A lower bound on any schedule of a collective: cut capacities by max-flow on the built graph.

The topology is `network.graph.graph_for` (GPUs, NICs, switch tiers) plus one node per HB domain
joined to its GPUs at the achievable HB bandwidth. For a set S of ranks, every schedule — even
with copies and reductions inside switches — must move across the cut between S and the other
ranks at least (nccl-tests sizes D, n ranks, m = |S|):

* all-gather: the (n−m) chunks of D/n that S lacks, into S; reduce-scatter: the mirror;
* all-reduce: D into S (the outside's partial sums) and D out of it;
* all-to-all: m·(n−m) blocks of D/n, each way.

The cut capacity is the max flow from the outside ranks to S (any switch on either side;
`cut_capacities`, scipy's Dinic), so time ≥ bytes / capacity. Cuts tried: one GPU, one HB
domain, half the domains. It is a bandwidth bound (latency 0), valid for every algorithm of
`algorithms`, including in-network aggregation. For broadcast from one root, the min over
these cuts equals the rate of the best spanning-tree packing (Edmonds' theorem); for the other
operations it is a lower bound only.
"""

from __future__ import annotations

import networkx as nx

from railplan.collective.algorithms import Built, Group
from railplan.errors import RailplanError
from railplan.network.graph import MAX_GRAPH_GPUS, graph_for


def topology(g: Group, built: Built) -> nx.DiGraph:
    """Directed graph with `capacity` in bytes/s per direction on every arc. `built.nic_gbps`
    is the line rate of one NIC port; `multi-plane` gives each GPU `built.planes` ports of it,
    one per plane (the GPU's achievable NIC bandwidth shared evenly among them)."""
    arch, radix, nic_gbps, planes = built.arch, built.radix, built.nic_gbps, built.planes
    if g.gpus > MAX_GRAPH_GPUS:  # the bound is a max flow on the whole graph
        raise RailplanError(
            "gpus", f"the lower bound supports up to {MAX_GRAPH_GPUS:,} GPUs; got {g.gpus:,}"
        )
    dg = nx.DiGraph()
    if arch == "ideal" or g.y == 1:
        for i in range(g.gpus):
            dg.add_edge(f"gpu:0:{i}", "hb:0", capacity=g.links.hb_bw)
            dg.add_edge("hb:0", f"gpu:0:{i}", capacity=g.links.hb_bw)
        return dg
    kw: dict[str, float | int] = {}
    if arch == "oversubscribed":
        kw["oversubscription"] = built.oversubscription
    elif arch == "multi-plane":
        kw["planes"] = planes
    base = graph_for(arch, g.gpus, g.x, radix, nic_gbps, **kw)
    ports = planes if arch == "multi-plane" else 1
    per_gbps = g.links.nic_bw / (nic_gbps * ports)  # achievable bytes/s per Gbps of line rate
    for a, b, cap in base.edges(data="capacity_gbps"):
        dg.add_edge(a, b, capacity=cap * per_gbps)
        dg.add_edge(b, a, capacity=cap * per_gbps)
    for d in range(g.y):
        for i in range(g.x):
            dg.add_edge(f"gpu:{d}:{i}", f"hb:{d}", capacity=g.links.hb_bw)
            dg.add_edge(f"hb:{d}", f"gpu:{d}:{i}", capacity=g.links.hb_bw)
    return dg


INT32_MAX = 2**31 - 1


def cut_capacities(dg: nx.DiGraph, cuts: list[set[str]], ranks: list[str]) -> list[float]:
    """Max flow (bytes/s) from the ranks outside each cut to those inside, any switch on
    either side. Solved with scipy's Dinic (`scipy.sparse.csgraph.maximum_flow`, C speed: a
    65,536-GPU rail-only graph in about a second, where networkx's preflow-push took a minute)
    on integer capacities: each arc's capacity is rounded *up* to the unit, so the flow is never
    below the true one and the time bound stays a lower bound; the unit (≥ 1 MB/s) keeps every
    flow within int32. A rank joins the source or sink by an arc of its own total capacity,
    which no flow through it can exceed."""
    import numpy as np
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import maximum_flow

    index = {v: i for i, v in enumerate(dg.nodes)}
    src, snk = len(index), len(index) + 1
    edges = list(dg.edges(data="capacity"))
    u = np.fromiter((index[a] for a, _, _ in edges), dtype=np.int64, count=len(edges))
    v = np.fromiter((index[b] for _, b, _ in edges), dtype=np.int64, count=len(edges))
    cap = np.fromiter((c for _, _, c in edges), dtype=np.float64, count=len(edges))
    unit = max(1e6, 2.0 * float(cap.sum()) / INT32_MAX)
    cap_units = np.ceil(cap / unit).astype(np.int64)
    rank_ids = np.array([index[r] for r in ranks], dtype=np.int64)
    own = np.bincount(u, weights=cap_units, minlength=src)[rank_ids]  # out-capacity per rank
    own_in = np.bincount(v, weights=cap_units, minlength=src)[rank_ids]
    out: list[float] = []
    for cut in cuts:
        inside = np.array([r in cut for r in ranks])
        uu = np.concatenate([u, np.full((~inside).sum(), src), rank_ids[inside]])
        vv = np.concatenate([v, rank_ids[~inside], np.full(inside.sum(), snk)])
        cc = np.concatenate([cap_units, own[~inside], own_in[inside]]).astype(np.int32)
        m = csr_matrix((cc, (uu, vv)), shape=(src + 2, src + 2))
        out.append(float(maximum_flow(m, src, snk, method="dinic").flow_value) * unit)
    return out


def bound_s(g: Group, op: str, size_bytes: float, built: Built) -> float:
    """The largest cut bound over the cuts tried on the `built` network (seconds, latency
    excluded)."""
    dg = topology(g, built)
    ranks = [f"gpu:{d}:{i}" for d in range(g.y) for i in range(g.x)]
    n, d = g.gpus, size_bytes
    cuts: list[set[str]] = [{ranks[0]}]
    if g.y > 1:
        cuts.append(set(ranks[: g.x]))
        cuts.append(set(ranks[: (g.y // 2) * g.x]))
    best = 0.0
    for s, cap in zip(cuts, cut_capacities(dg, cuts, ranks), strict=True):
        best = max(best, need_bytes(op, n, len(s), d) / cap)
    return best


def need_bytes(op: str, n: int, m: int, size_bytes: float) -> float:
    """Bytes every schedule moves into a set of m of the n ranks (and out, for all-to-all)."""
    if op == "all-reduce":
        return size_bytes
    if op == "all-to-all":
        return m * (n - m) * size_bytes / n
    return (n - m) * size_bytes / n


def graph_bound_s(
    dg: nx.DiGraph, ranks: list[str], op: str, size_bytes: float, groups: list[list[str]]
) -> float:
    """The cut bound on any graph (edge `capacity` in bytes/s): every single rank and every
    set of `groups` (e.g. one chassis) as the inside of a cut."""
    cuts: list[set[str]] = [{r} for r in ranks] + [set(grp) for grp in groups]
    caps = cut_capacities(dg, cuts, ranks)
    return max(
        need_bytes(op, len(ranks), len(c), size_bytes) / cap
        for c, cap in zip(cuts, caps, strict=True)
    )
