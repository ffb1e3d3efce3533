"""The simulator's network: directed links with capacities, GPU attachments, the HB switch of
each domain, and shortest-path routes between switches (see the package docstring)."""

from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx
import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
from scipy.sparse.csgraph import shortest_path

from railplan.errors import RailplanError
from railplan.units import gbps_to_bytes_per_s

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


KIND_NIC_UP, KIND_NIC_DOWN, KIND_FABRIC, KIND_HB_UP, KIND_HB_DOWN = 0, 1, 2, 3, 4
KIND_NAMES = ("nic-up", "nic-down", "fabric", "hb-up", "hb-down")


MAX_INCIDENCE_NNZ = 30_000_000
"""Most (flow, link) entries one step's routes may hold, counted while they are built: the
all-to-all of 4,096 GPUs at radix 64 needs 26.2 million (2.8 GB peak, measured); 4,096 at
radix 16 is refused at 30 million (1.75 GB peak) instead of passing 4 GiB."""


def check_incidence(entries: int, what: str) -> None:
    """Refuse a step whose flow-by-link incidence would pass `MAX_INCIDENCE_NNZ` entries."""
    if entries > MAX_INCIDENCE_NNZ:
        raise RailplanError(
            "gpus",
            f"{what} need {entries:,} or more flow-link entries, over the simulator's budget "
            f"of {MAX_INCIDENCE_NNZ:,}; use fewer GPUs, a larger radix, "
            "aggregation (drop --no-aggregate) or the closed forms (railplan alltoall)",
        )


@dataclass(frozen=True, eq=False)
class FlowNetwork:
    """Directed links with capacities (bytes/s) and the GPU attachments the router needs.

    GPU g = domain·K + local. ``gpu_leaf`` is the switch index (into ``switch_names``) of the
    GPU's leaf, -1 if it has no NIC link; ``gpu_up``/``gpu_down`` its NIC link indices,
    ``gpu_hb_up``/``gpu_hb_down`` its HB link indices (-1 when K = 1).
    """

    arch: str
    gpus: int
    hb_domain: int
    link_src: list[str]
    link_dst: list[str]
    link_kind: IntArray
    capacity_bytes_per_s: FloatArray
    gpu_leaf: IntArray
    gpu_up: IntArray
    gpu_down: IntArray
    gpu_hb_up: IntArray
    gpu_hb_down: IntArray
    switch_names: list[str]
    fabric_u: IntArray  # switch index of each fabric link's tail (aligned with fabric_links)
    fabric_v: IntArray
    fabric_links: IntArray  # link index of each directed fabric link
    fabric_mult: FloatArray  # parallel physical links
    switch_dist: FloatArray = field(repr=False)  # hops between switches (inf: no path)
    switch_paths: FloatArray = field(repr=False)  # number of shortest paths (with multiplicity)

    @property
    def links(self) -> int:
        return len(self.link_src)

    @property
    def domains(self) -> int:
        return self.gpus // self.hb_domain

    def with_capacity(self, capacity_bytes_per_s: FloatArray) -> FlowNetwork:
        """The same network with other link capacities (for what-if checks)."""
        from dataclasses import replace

        cap = np.asarray(capacity_bytes_per_s, dtype=np.float64)
        if cap.shape != self.capacity_bytes_per_s.shape or np.any(cap <= 0):
            raise RailplanError("capacity", "one positive capacity per link is required")
        return replace(self, capacity_bytes_per_s=cap)


@dataclass
class _Links:
    """Directed links being built: parallel lists, one entry per link."""

    src: list[str] = field(default_factory=list)
    dst: list[str] = field(default_factory=list)
    kind: list[int] = field(default_factory=list)
    cap: list[float] = field(default_factory=list)
    mult: list[float] = field(default_factory=list)

    def both_ways(
        self, u: str, v: str, kinds: tuple[int, int], gbps: float, links: float
    ) -> tuple[int, int]:
        """Add the link u→v and v→u (kinds: up, down); return their indices."""
        first = len(self.src)
        for (x, y), kd in zip(((u, v), (v, u)), kinds, strict=True):
            self.src.append(x)
            self.dst.append(y)
            self.kind.append(kd)
            self.cap.append(gbps_to_bytes_per_s(gbps))
            self.mult.append(links)
        return first, first + 1


def _graph_links(
    g: nx.Graph, links: _Links, sidx: dict[str, int], k: int, n: int
) -> tuple[IntArray, IntArray, IntArray]:
    """Every edge of the graph both ways; per GPU: its leaf switch, NIC up and down links."""
    gpu_leaf = np.full(n, -1, dtype=np.int64)
    gpu_up = np.full(n, -1, dtype=np.int64)
    gpu_down = np.full(n, -1, dtype=np.int64)
    for a, b, data in g.edges(data=True):
        gbps = float(data["capacity_gbps"])
        mult = float(data.get("links", 1))
        ra, rb = g.nodes[a]["role"], g.nodes[b]["role"]
        if ra == "gpu" or rb == "gpu":
            gpu, sw = (a, b) if ra == "gpu" else (b, a)
            gi = int(g.nodes[gpu]["domain"]) * k + int(g.nodes[gpu]["local"])
            if gpu_leaf[gi] >= 0:
                raise RailplanError(
                    "graph", f"{gpu} has NIC links to two switches; the simulator needs one leaf"
                )
            gpu_leaf[gi] = sidx[sw]
            up_down = (KIND_NIC_UP, KIND_NIC_DOWN)
            gpu_up[gi], gpu_down[gi] = links.both_ways(gpu, sw, up_down, gbps, mult)
        else:
            links.both_ways(a, b, (KIND_FABRIC, KIND_FABRIC), gbps, mult)
    return gpu_leaf, gpu_up, gpu_down


def _hb_links(links: _Links, n: int, k: int, hb_gbps: float) -> tuple[IntArray, IntArray]:
    """Each GPU's links to its domain's HB switch (none when K = 1)."""
    gpu_hb_up = np.full(n, -1, dtype=np.int64)
    gpu_hb_down = np.full(n, -1, dtype=np.int64)
    if k > 1:
        for gi in range(n):
            hb = f"hb:{gi // k}"
            name = f"gpu:{gi // k}:{gi % k}"
            gpu_hb_up[gi], gpu_hb_down[gi] = links.both_ways(
                name, hb, (KIND_HB_UP, KIND_HB_DOWN), hb_gbps, 1.0
            )
    return gpu_hb_up, gpu_hb_down


def flow_network(g: nx.Graph, hb_gbps: float) -> FlowNetwork:
    """Directed-link view of a ``railplan.network.graph`` graph plus one HB switch per domain.

    ``hb_gbps`` is C_F per GPU per direction (Gbps).
    """
    if not hb_gbps > 0:
        raise RailplanError("hb_gbps", f"must be > 0; got {hb_gbps!r}")
    k = int(g.graph["hb_domain"])
    n = int(g.graph["gpus"])
    switches = sorted(
        (v for v, r in g.nodes(data="role") if r != "gpu"),
        key=lambda v: (int(g.nodes[v]["tier"]), v),
    )
    sidx = {v: i for i, v in enumerate(switches)}
    links = _Links()
    gpu_leaf, gpu_up, gpu_down = _graph_links(g, links, sidx, k, n)
    gpu_hb_up, gpu_hb_down = _hb_links(links, n, k, hb_gbps)
    src, dst = links.src, links.dst
    kind_a = np.asarray(links.kind, dtype=np.int64)
    fab = np.flatnonzero(kind_a == KIND_FABRIC)
    fu = np.array([sidx[src[i]] for i in fab], dtype=np.int64)
    fv = np.array([sidx[dst[i]] for i in fab], dtype=np.int64)
    fm = np.asarray(links.mult, dtype=np.float64)[fab]
    s = len(switches)
    dist, paths = _switch_paths(s, fu, fv, fm)
    return FlowNetwork(
        arch=str(g.graph.get("arch", "")),
        gpus=n,
        hb_domain=k,
        link_src=src,
        link_dst=dst,
        link_kind=kind_a,
        capacity_bytes_per_s=np.asarray(links.cap, dtype=np.float64),
        gpu_leaf=gpu_leaf,
        gpu_up=gpu_up,
        gpu_down=gpu_down,
        gpu_hb_up=gpu_hb_up,
        gpu_hb_down=gpu_hb_down,
        switch_names=switches,
        fabric_u=fu,
        fabric_v=fv,
        fabric_links=fab.astype(np.int64),
        fabric_mult=fm,
        switch_dist=dist,
        switch_paths=paths,
    )


def _switch_paths(
    s: int, fu: IntArray, fv: IntArray, fm: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """All-pairs hop distance and number of shortest paths (parallel links multiply)."""
    if s == 0:
        return np.zeros((0, 0)), np.zeros((0, 0))
    adj = sp.csr_matrix((fm, (fu, fv)), shape=(s, s))
    dist = np.asarray(shortest_path(adj, method="D", unweighted=True), dtype=np.float64)
    paths = np.zeros((s, s))
    paths[np.arange(s), np.arange(s)] = 1.0
    finite = dist[np.isfinite(dist)]
    for hop in range(1, int(finite.max()) + 1 if finite.size else 1):
        prev = np.where(dist == hop - 1, paths, 0.0)
        nxt = np.asarray((sp.csr_matrix(prev) @ adj).todense())
        paths = np.where(dist == hop, nxt, paths)
    return dist, paths


def network_for(
    arch: str,
    gpus: int,
    hb_domain: int,
    radix: int,
    nic_gbps: int,
    hb_gbps: float,
    nics_per_gpu: int = 1,
    oversubscription: float | None = None,
) -> FlowNetwork:
    """``flow_network(graph_for(...))`` in one call (arch as in ``topology.build_counts``)."""
    from railplan.network.graph import graph_for

    g = graph_for(
        arch,
        gpus,
        hb_domain,
        radix,
        nic_gbps,
        nics_per_gpu=nics_per_gpu,
        oversubscription=oversubscription,
    )
    return flow_network(g, hb_gbps)


def switch_routes(net: FlowNetwork, s_leaf: IntArray, t_leaf: IntArray) -> sp.csr_matrix:
    """Fabric-link fractions of ECMP routes between leaf pairs: (pairs × links) CSR.

    Link u→v carries σ(s,u)·m(u,v)·σ(v,t)/σ(s,t) of a flow s→t when it lies on a shortest path
    (d(s,u) + 1 + d(v,t) = d(s,t)); σ counts shortest paths with parallel links. Rows with
    s = t are empty; a pair with no path raises ``RailplanError``.
    """
    s_leaf = np.asarray(s_leaf, dtype=np.int64)
    t_leaf = np.asarray(t_leaf, dtype=np.int64)
    p = len(s_leaf)
    if p and np.any(~np.isfinite(net.switch_dist[s_leaf, t_leaf])):
        bad = int(np.flatnonzero(~np.isfinite(net.switch_dist[s_leaf, t_leaf]))[0])
        raise RailplanError(
            "route",
            f"no network path from {net.switch_names[s_leaf[bad]]} to "
            f"{net.switch_names[t_leaf[bad]]} ({net.arch}: use forwarding through the HB domain)",
        )
    e = len(net.fabric_links)
    rows: list[IntArray] = []
    cols: list[IntArray] = []
    vals: list[FloatArray] = []
    chunk = max(1, 4_000_000 // max(e, 1))
    d, sig = net.switch_dist, net.switch_paths
    u, v = net.fabric_u, net.fabric_v
    held = 0
    for start in range(0, p, chunk):
        s = s_leaf[start : start + chunk, None]
        t = t_leaf[start : start + chunk, None]
        on = d[s, u[None, :]] + 1 + d[v[None, :], t] == d[s, t]
        r, c = np.nonzero(on)
        held += len(r)
        check_incidence(held, f"the ECMP routes of {p:,} leaf pairs")
        sr, tr, ur, vr = s[r, 0], t[r, 0], u[c], v[c]
        frac = sig[sr, ur] * net.fabric_mult[c] * sig[vr, tr] / sig[sr, tr]
        rows.append(r + start)
        cols.append(net.fabric_links[c])
        vals.append(frac)
    if not rows:
        return sp.csr_matrix((p, net.links))
    return sp.csr_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
        shape=(p, net.links),
    )
