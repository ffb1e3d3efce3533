"""A lower bound on any schedule of a collective: cut capacities by max-flow on the built graph.

The topology is `network.graph.graph_for` (GPUs, NICs, switch tiers) plus one node per HB domain
joined to its GPUs at the achievable HB bandwidth. For a set S of ranks, every schedule — even
with copies and reductions inside switches — must move across the cut between S and the other
ranks at least (nccl-tests sizes D, n ranks, m = |S|):

* all-gather: the (n−m) chunks of D/n that S lacks, into S; reduce-scatter: the mirror;
* all-reduce: D into S (the outside's partial sums) and D out of it;
* all-to-all: m·(n−m) blocks of D/n, each way.

The cut capacity is the max flow from the outside ranks to S (any switch on either side),
so time ≥ bytes / capacity. Cuts tried: one GPU, one HB domain, half the domains. It is a
bandwidth bound (latency 0), valid for every algorithm of `algorithms`, including in-network
aggregation. For broadcast from one root, the min over these cuts equals the rate of the best
spanning-tree packing (Edmonds' theorem); for the other operations it is a lower bound only.
"""

from __future__ import annotations

import networkx as nx

from railplan.collective.algorithms import Group
from railplan.network.graph import graph_for


def topology(g: Group, arch: str, radix: int, nic_gbps: int, oversubscription: float) -> nx.DiGraph:
    """Directed graph with `capacity` in bytes/s per direction on every arc."""
    dg = nx.DiGraph()
    if arch == "ideal" or g.y == 1:
        for i in range(g.gpus):
            dg.add_edge(f"gpu:0:{i}", "hb:0", capacity=g.hb_bw)
            dg.add_edge("hb:0", f"gpu:0:{i}", capacity=g.hb_bw)
        return dg
    kw = {"oversubscription": oversubscription} if arch == "oversubscribed" else {}
    base = graph_for(arch, g.gpus, g.x, radix, nic_gbps, **kw)
    per_gbps = g.nic_bw / nic_gbps  # achievable bytes/s per Gbps of line rate
    for a, b, cap in base.edges(data="capacity_gbps"):
        dg.add_edge(a, b, capacity=cap * per_gbps)
        dg.add_edge(b, a, capacity=cap * per_gbps)
    for d in range(g.y):
        for i in range(g.x):
            dg.add_edge(f"gpu:{d}:{i}", f"hb:{d}", capacity=g.hb_bw)
            dg.add_edge(f"hb:{d}", f"gpu:{d}:{i}", capacity=g.hb_bw)
    return dg


def _cut_bytes_per_s(dg: nx.DiGraph, inside: set[str], ranks: list[str]) -> float:
    h = dg.copy()
    for r in ranks:
        if r in inside:
            h.add_edge(r, "_sink")  # no capacity attribute: unbounded
        else:
            h.add_edge("_source", r)
    return float(nx.maximum_flow_value(h, "_source", "_sink"))


def bound_s(
    g: Group,
    op: str,
    size_bytes: float,
    arch: str,
    radix: int = 64,
    nic_gbps: int = 400,
    oversubscription: float = 1.0,
) -> float:
    """The largest cut bound over the cuts tried (seconds, latency excluded)."""
    dg = topology(g, arch, radix, nic_gbps, oversubscription)
    ranks = [f"gpu:{d}:{i}" for d in range(g.y) for i in range(g.x)]
    n, d = g.gpus, size_bytes
    cuts: list[set[str]] = [{ranks[0]}]
    if g.y > 1:
        cuts.append(set(ranks[: g.x]))
        cuts.append(set(ranks[: (g.y // 2) * g.x]))
    best = 0.0
    for s in cuts:
        m = len(s)
        cap = _cut_bytes_per_s(dg, s, ranks)
        if op == "all-reduce":
            need = d
        elif op == "all-to-all":
            need = m * (n - m) * d / n
        else:
            need = (n - m) * d / n
        best = max(best, need / cap)
    return best
