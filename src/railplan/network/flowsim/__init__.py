"""Flow-level simulator: max-min fair sharing of link capacities on the network graphs.

A collective runs as a sequence of **steps**; a step is a set of (src GPU, dst GPU, bytes) flows
that start together and the step ends when its last flow finishes. Between events (a flow
finishing) every flow runs at its **max-min fair rate** (Bertsekas & Gallager, *Data Networks*,
§6.5.2, progressive filling), recomputed whenever a flow finishes.

Network (``flow_network``): every undirected edge of ``railplan.network.graph`` becomes two
directed links of ``capacity_gbps`` each (per direction). The graph has no HB (NVLink/NVSwitch)
edges, so each HB domain is added as one non-blocking switch node ``hb:{domain}`` with one link of
C_F per GPU and direction. Switches are non-blocking; links are the only shared resources.

Routing (documented choice): a flow between two GPUs of one HB domain goes over the HB switch
(GPU → ``hb:d`` → GPU); any other flow goes over the NIC network on **all shortest paths, split
evenly per physical path** (ECMP with fixed fractions: a link carries the share of the flow equal
to the share of the shortest paths, counted with parallel links, that cross it). A flow is one
rate (fractions fixed), not one rate per path. Rail-only has no path between rails: a direct flow
there raises ``RailplanError``; the all-to-all uses forwarding (SYSTEM.md claim 3).

Progressive filling is vectorized: a step's flows × links incidence is a ``scipy.sparse`` CSR
matrix (entry = fraction of the flow on the link) and every filling round is one sparse product
(no Python loop over flows).

**Aggregation** (``aggregate_matrix``): flows with the same (source leaf, destination leaf) — or
the same HB domain for HB flows — form one class when the class is *symmetric*: all its flows have
the same bytes, every GPU on the source leaf sends the same number of the class's flows and every
GPU on the destination leaf receives the same number. Then by uniqueness of the max-min
allocation all flows of a class get the same rate, all NIC links of one leaf carry the same load,
and a class row with averaged NIC fractions (fabric fractions are identical in a class) gives the
exact per-flow rates; a class of m flows counts m times in the link loads. The check is exact
(counts and bytes compared per GPU); a non-symmetric matrix (e.g. Zipf-skewed MoE traffic) is
simulated flow by flow. Tests compare both on small clusters.

Sources: Wang, Ghobadi et al., "Rail-only", HOTI 2024 / arXiv 2307.12169 (formulas 2 and 3 of
SYSTEM.md, which ``railplan.collectives`` implements); max-min fairness and progressive filling:
Bertsekas & Gallager 1992, §6.5.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
from scipy.sparse.csgraph import shortest_path

from railplan.errors import RailplanError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

#: relative tolerance: links within it of saturation saturate together, flows within it of
#: finishing finish together
REL_TOL = 1e-9
#: per-pair simulation limit (incidence rows); larger non-symmetric steps are refused
MAX_PAIR_FLOWS = 4_000_000

KIND_NIC_UP, KIND_NIC_DOWN, KIND_FABRIC, KIND_HB_UP, KIND_HB_DOWN = 0, 1, 2, 3, 4
KIND_NAMES = ("nic-up", "nic-down", "fabric", "hb-up", "hb-down")


# ---------------------------------------------------------------------------------------------
# network


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


def flow_network(g: nx.Graph, hb_gbps: float) -> FlowNetwork:
    """Directed-link view of a ``railplan.network.graph`` graph plus one HB switch per domain.

    ``hb_gbps`` is C_F per GPU per direction (Gbps).
    """
    if not hb_gbps > 0:
        raise RailplanError("hb_gbps", f"must be > 0; got {hb_gbps!r}")
    k = int(g.graph["hb_domain"])
    n = int(g.graph["gpus"])
    src: list[str] = []
    dst: list[str] = []
    kind: list[int] = []
    cap: list[float] = []
    mult: list[float] = []
    gpu_leaf = np.full(n, -1, dtype=np.int64)
    gpu_up = np.full(n, -1, dtype=np.int64)
    gpu_down = np.full(n, -1, dtype=np.int64)
    switches = sorted(
        (v for v, r in g.nodes(data="role") if r != "gpu"),
        key=lambda v: (int(g.nodes[v]["tier"]), v),
    )
    sidx = {v: i for i, v in enumerate(switches)}

    def gpu_id(v: str) -> int:
        a = g.nodes[v]
        return int(a["domain"]) * k + int(a["local"])

    for a, b, data in g.edges(data=True):
        gbps = float(data["capacity_gbps"])
        links = float(data.get("links", 1))
        ra, rb = g.nodes[a]["role"], g.nodes[b]["role"]
        if ra == "gpu" or rb == "gpu":
            gpu, sw = (a, b) if ra == "gpu" else (b, a)
            gi = gpu_id(gpu)
            if gpu_leaf[gi] >= 0:
                raise RailplanError(
                    "graph", f"{gpu} has NIC links to two switches; the simulator needs one leaf"
                )
            gpu_leaf[gi] = sidx[sw]
            gpu_up[gi] = len(src)
            src.append(gpu)
            dst.append(sw)
            kind.append(KIND_NIC_UP)
            gpu_down[gi] = len(src)
            src.append(sw)
            dst.append(gpu)
            kind.append(KIND_NIC_DOWN)
            cap += [gbps * 1e9 / 8] * 2
            mult += [links] * 2
        else:
            for u, v in ((a, b), (b, a)):
                src.append(u)
                dst.append(v)
                kind.append(KIND_FABRIC)
                cap.append(gbps * 1e9 / 8)
                mult.append(links)
    gpu_hb_up = np.full(n, -1, dtype=np.int64)
    gpu_hb_down = np.full(n, -1, dtype=np.int64)
    if k > 1:
        for gi in range(n):
            hb = f"hb:{gi // k}"
            name = f"gpu:{gi // k}:{gi % k}"
            gpu_hb_up[gi] = len(src)
            src.append(name)
            dst.append(hb)
            kind.append(KIND_HB_UP)
            gpu_hb_down[gi] = len(src)
            src.append(hb)
            dst.append(name)
            kind.append(KIND_HB_DOWN)
            cap += [hb_gbps * 1e9 / 8] * 2
            mult += [1.0, 1.0]
    kind_a = np.asarray(kind, dtype=np.int64)
    fab = np.flatnonzero(kind_a == KIND_FABRIC)
    fu = np.array([sidx[src[i]] for i in fab], dtype=np.int64)
    fv = np.array([sidx[dst[i]] for i in fab], dtype=np.int64)
    fm = np.asarray(mult, dtype=np.float64)[fab]
    s = len(switches)
    dist, paths = _switch_paths(s, fu, fv, fm)
    return FlowNetwork(
        arch=str(g.graph.get("arch", "")),
        gpus=n,
        hb_domain=k,
        link_src=src,
        link_dst=dst,
        link_kind=kind_a,
        capacity_bytes_per_s=np.asarray(cap, dtype=np.float64),
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


# ---------------------------------------------------------------------------------------------
# flows and the max-min solver


@dataclass(frozen=True, eq=False)
class FlowSet:
    """Flow classes of one step: ``incidence`` (classes × links, fraction of one flow of the
    class on the link), ``multiplicity`` (flows per class), ``flow_bytes`` (bytes of each flow of
    the class)."""

    incidence: sp.csr_matrix
    multiplicity: FloatArray
    flow_bytes: FloatArray

    @property
    def classes(self) -> int:
        return int(self.incidence.shape[0])

    @property
    def flows(self) -> int:
        return round(float(self.multiplicity.sum()))

    @property
    def total_bytes(self) -> float:
        return float(self.multiplicity @ self.flow_bytes)


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


def route_pairs(net: FlowNetwork, src: IntArray, dst: IntArray, nbytes: FloatArray) -> FlowSet:
    """One class per (src, dst) GPU pair (no aggregation). Zero-byte pairs are dropped."""
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    b = np.asarray(nbytes, dtype=np.float64)
    keep = b > 0
    src, dst, b = src[keep], dst[keep], b[keep]
    if np.any(src == dst):
        raise RailplanError("flows", "a flow from a GPU to itself")
    if np.any((src < 0) | (src >= net.gpus) | (dst < 0) | (dst >= net.gpus)):
        raise RailplanError("flows", f"GPU index outside 0..{net.gpus - 1}")
    if len(src) > MAX_PAIR_FLOWS:
        raise RailplanError(
            "flows", f"{len(src):,} flows exceed the per-pair limit {MAX_PAIR_FLOWS:,}"
        )
    k = net.hb_domain
    hb = (src // k) == (dst // k)
    f = np.arange(len(src))
    rows = [f[hb], f[hb]]
    cols = [net.gpu_hb_up[src[hb]], net.gpu_hb_down[dst[hb]]]
    vals = [np.ones(int(hb.sum())), np.ones(int(hb.sum()))]
    nic = ~hb
    fn = f[nic]
    sl, tl = net.gpu_leaf[src[nic]], net.gpu_leaf[dst[nic]]
    if np.any(sl < 0) or np.any(tl < 0):
        raise RailplanError("route", "a flow between HB domains needs NIC links (no network)")
    rows += [fn, fn]
    cols += [net.gpu_up[src[nic]], net.gpu_down[dst[nic]]]
    vals += [np.ones(len(fn)), np.ones(len(fn))]
    base = sp.csr_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
        shape=(len(src), net.links),
    )
    cross = sl != tl
    if np.any(cross):
        pairs = sl[cross] * len(net.switch_names) + tl[cross]
        uniq, inv = np.unique(pairs, return_inverse=True)
        routes = switch_routes(net, uniq // len(net.switch_names), uniq % len(net.switch_names))
        per_flow = np.diff(routes.indptr)[inv]
        check_incidence(2 * len(src) + int(per_flow.sum()), f"{len(src):,} flows")
        fab = routes[inv]
        sel = sp.csr_matrix(
            (np.ones(len(inv)), (fn[cross], np.arange(len(inv)))), shape=(len(src), len(inv))
        )
        base = base + sel @ fab
    return FlowSet(base.tocsr(), np.ones(len(src)), b)


def _group_reduce(
    a: FloatArray, order: IntArray, starts: IntArray, axis: int, op: np.ufunc
) -> FloatArray:
    return np.asarray(op.reduceat(np.take(a, order, axis=axis), starts, axis=axis))


def aggregate_matrix(net: FlowNetwork, pair_bytes: FloatArray) -> FlowSet | None:
    """Exact class aggregation of a dense N×N byte matrix (see the module doc), or ``None`` when
    some class is not symmetric (then simulate flow by flow)."""
    m = np.array(pair_bytes, dtype=np.float64)
    n, k = net.gpus, net.hb_domain
    if m.shape != (n, n):
        raise RailplanError("pair_bytes", f"must be {n}×{n}; got {m.shape}")
    np.fill_diagonal(m, 0.0)
    domain = np.arange(n) // k
    flow = m > 0
    classes: list[tuple[FloatArray, IntArray, FloatArray, float, float]] = []
    # --- HB classes: one per domain
    if k > 1:
        for d in range(net.domains):
            sl = slice(d * k, (d + 1) * k)
            blk, fb = m[sl, sl], flow[sl, sl]
            cnt = float(fb.sum())
            if cnt == 0:
                continue
            vals = blk[fb]
            if vals.max() > vals.min() * (1 + 1e-12):
                return None
            out_c, in_c = fb.sum(axis=1), fb.sum(axis=0)
            if out_c.min() != out_c.max() or in_c.min() != in_c.max():
                return None
            g = np.arange(d * k, (d + 1) * k)
            cols = np.concatenate([net.gpu_hb_up[g], net.gpu_hb_down[g]])
            w = np.concatenate([out_c, in_c]) / cnt
            classes.append((w, cols, np.zeros(0), cnt, float(vals[0])))
    # --- NIC classes: one per (src leaf, dst leaf)
    nicflow = flow & (domain[:, None] != domain[None, :])
    if nicflow.any():
        if np.any(net.gpu_leaf < 0):
            raise RailplanError("route", "a flow between HB domains needs NIC links (no network)")
        order = np.argsort(net.gpu_leaf, kind="stable")
        leaves_sorted = net.gpu_leaf[order]
        starts = np.flatnonzero(np.r_[True, leaves_sorted[1:] != leaves_sorted[:-1]])
        leaf_ids = leaves_sorted[starts]
        nf = nicflow.astype(np.float64)
        big = np.where(nicflow, m, np.inf)
        small = np.where(nicflow, m, -np.inf)
        # per (src GPU, dst leaf) and per (src leaf, dst GPU)
        out_cnt = _group_reduce(nf, order, starts, 1, np.add)  # n × L (rows in GPU order)
        in_cnt = _group_reduce(nf, order, starts, 0, np.add)  # L × n
        bmin = _group_reduce(
            _group_reduce(big, order, starts, 1, np.minimum), order, starts, 0, np.minimum
        )
        bmax = _group_reduce(
            _group_reduce(small, order, starts, 1, np.maximum), order, starts, 0, np.maximum
        )
        oc_min = _group_reduce(out_cnt, order, starts, 0, np.minimum)  # L × L
        oc_max = _group_reduce(out_cnt, order, starts, 0, np.maximum)
        ic_min = _group_reduce(in_cnt, order, starts, 1, np.minimum)
        ic_max = _group_reduce(in_cnt, order, starts, 1, np.maximum)
        total = _group_reduce(out_cnt, order, starts, 0, np.add)
        has = total > 0
        if np.any(has & ((oc_min != oc_max) | (ic_min != ic_max))):
            return None
        if np.any(has & (bmax > bmin * (1 + 1e-12))):
            return None
        si, ti = np.nonzero(has)
        routes = switch_routes(net, leaf_ids[si], leaf_ids[ti])
        members = np.split(order, starts[1:])
        ptr, ind, dat = routes.indptr, routes.indices, routes.data
        for c, (a, b) in enumerate(zip(si, ti, strict=True)):
            ga, gb = members[a], members[b]
            cnt = float(total[a, b])
            lo, hi = ptr[c], ptr[c + 1]
            cols = np.concatenate([net.gpu_up[ga], net.gpu_down[gb], ind[lo:hi]])
            w = np.concatenate([out_cnt[ga, b] / cnt, in_cnt[a, gb] / cnt, dat[lo:hi]])
            classes.append((w, cols.astype(np.int64), np.zeros(0), cnt, float(bmin[a, b])))
    if not classes:
        return FlowSet(sp.csr_matrix((0, net.links)), np.zeros(0), np.zeros(0))
    rows = np.concatenate([np.full(len(c[1]), i) for i, c in enumerate(classes)])
    inc = sp.csr_matrix(
        (np.concatenate([c[0] for c in classes]), (rows, np.concatenate([c[1] for c in classes]))),
        shape=(len(classes), net.links),
    )
    return FlowSet(
        inc,
        np.array([c[3] for c in classes], dtype=np.float64),
        np.array([c[4] for c in classes], dtype=np.float64),
    )


def flows_from_matrix(net: FlowNetwork, pair_bytes: FloatArray, aggregate: bool = True) -> FlowSet:
    """Flows of a dense byte matrix: aggregated classes when exact, else one flow per pair."""
    if aggregate:
        fs = aggregate_matrix(net, pair_bytes)
        if fs is not None:
            return fs
    m = np.asarray(pair_bytes, dtype=np.float64).copy()
    np.fill_diagonal(m, 0.0)
    src, dst = np.nonzero(m > 0)
    return route_pairs(net, src, dst, m[src, dst])


def _filling_matrices(
    incidence: sp.csr_matrix, multiplicity: FloatArray
) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """(links × classes load per unit rate, classes × links 0/1 touch) of a step."""
    a = sp.csr_matrix(incidence)
    if np.any(np.diff(a.indptr) == 0):
        raise RailplanError("flows", "a flow crosses no link (unbounded rate)")
    wt = sp.csr_matrix(a.multiply(np.asarray(multiplicity, dtype=np.float64)[:, None]).T)
    touch = sp.csr_matrix(a, copy=True)
    touch.data = (touch.data > 0).astype(np.float64)
    return wt, touch


def _fill(
    wt: sp.csr_matrix, touch: sp.csr_matrix, capacity: FloatArray, active: BoolArray
) -> FloatArray:
    """Progressive filling over the ``active`` classes (the others have rate 0)."""
    f = touch.shape[0]
    rate = np.zeros(f)
    frozen = ~active
    resid = np.asarray(capacity, dtype=np.float64).copy()
    while not frozen.all():
        grow = wt @ (~frozen).astype(np.float64)
        pos = grow > 0
        ratio = np.full(len(resid), np.inf)
        ratio[pos] = np.maximum(resid[pos], 0.0) / grow[pos]
        delta = float(ratio.min())
        rate[~frozen] += delta
        resid -= delta * grow
        sat = pos & (ratio <= delta * (1 + REL_TOL) + 1e-300)
        frozen |= (touch @ sat.astype(np.float64)) > 0
    return rate


def max_min_rates(
    incidence: sp.csr_matrix, capacity: FloatArray, multiplicity: FloatArray | None = None
) -> FloatArray:
    """Max-min fair rate (bytes/s) of one flow of each class, by progressive filling.

    All unfrozen flows grow at the same speed; the first links to saturate (within ``REL_TOL``)
    freeze every class that crosses them; repeat until all are frozen. Each round is two sparse
    matrix-vector products (no loop over flows). A class of ``multiplicity`` m loads a link
    m × fraction × rate. Bertsekas & Gallager, *Data Networks*, §6.5.2.
    """
    f = incidence.shape[0]
    if f == 0:
        return np.zeros(0)
    mult = np.ones(f) if multiplicity is None else np.asarray(multiplicity, dtype=np.float64)
    wt, touch = _filling_matrices(incidence, mult)
    return _fill(wt, touch, capacity, np.ones(f, dtype=bool))


# ---------------------------------------------------------------------------------------------
# steps and collectives


@dataclass(frozen=True, eq=False)
class Step:
    """One step of a collective: a dense N×N byte matrix or (src, dst, bytes) pair arrays,
    run ``repeat`` times in a row (identical steps of a ring are simulated once)."""

    name: str
    repeat: int = 1
    matrix: FloatArray | None = None
    src: IntArray | None = None
    dst: IntArray | None = None
    nbytes: FloatArray | None = None

    def flowset(self, net: FlowNetwork, aggregate: bool = True) -> FlowSet:
        if self.matrix is not None:
            return flows_from_matrix(net, self.matrix, aggregate)
        assert self.src is not None and self.dst is not None and self.nbytes is not None
        return route_pairs(net, self.src, self.dst, self.nbytes)


@dataclass(frozen=True)
class StepResult:
    """Outcome of one step (times for a single repetition)."""

    name: str
    repeat: int
    time_s: float
    flows: int
    classes: int
    events: int
    bytes: float
    sent_bytes: float
    max_link_utilization: float
    link_bound_s: float

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


def simulate_flowset(
    fs: FlowSet, capacity: FloatArray, name: str = "", repeat: int = 1
) -> StepResult:
    """Run one step: rates by max-min fairness, recomputed whenever flows finish."""
    cap = np.asarray(capacity, dtype=np.float64)
    remaining = fs.flow_bytes.astype(np.float64).copy()
    sent = np.zeros_like(remaining)
    active = remaining > 0
    a = fs.incidence
    t = 0.0
    events = 0
    util = 0.0
    if fs.classes:
        wt, touch = _filling_matrices(a, fs.multiplicity)
    while active.any():
        r = _fill(wt, touch, cap, active)
        util = max(util, float(np.max((wt @ r) / cap)))
        idx = np.flatnonzero(active)
        left = remaining[idx] / r[idx]
        dt = float(left.min())
        done = idx[left <= dt * (1 + REL_TOL)]
        t += dt
        sent[idx] += r[idx] * dt
        remaining[idx] -= r[idx] * dt
        remaining[done] = 0.0
        active[done] = False
        events += 1
    load_bytes = a.T @ (fs.multiplicity * fs.flow_bytes)
    bound = float(np.max(load_bytes / cap)) if len(load_bytes) else 0.0
    return StepResult(
        name=name,
        repeat=repeat,
        time_s=t,
        flows=fs.flows,
        classes=fs.classes,
        events=events,
        bytes=fs.total_bytes,
        sent_bytes=float(fs.multiplicity @ sent),
        max_link_utilization=util,
        link_bound_s=bound,
    )


@dataclass(frozen=True)
class SimResult:
    """A whole collective: the sum of its steps (each × its repeat)."""

    steps: tuple[StepResult, ...]

    @property
    def time_s(self) -> float:
        return sum(s.time_s * s.repeat for s in self.steps)

    @property
    def link_bound_s(self) -> float:
        return sum(s.link_bound_s * s.repeat for s in self.steps)

    @property
    def step_count(self) -> int:
        return sum(s.repeat for s in self.steps)

    @property
    def flows(self) -> int:
        return sum(s.flows * s.repeat for s in self.steps)


def simulate(net: FlowNetwork, steps: list[Step], aggregate: bool = True) -> SimResult:
    """Run the steps one after another on ``net``."""
    out = []
    for st in steps:
        if st.repeat < 1:
            continue
        fs = st.flowset(net, aggregate)
        out.append(simulate_flowset(fs, net.capacity_bytes_per_s, st.name, st.repeat))
    return SimResult(tuple(out))


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


def oversubscribed_alltoall_bound_s(net: FlowNetwork, pair_bytes: FloatArray) -> float:
    """Cut bound of a direct all-to-all: max over the GPU NIC and HB links and over every leaf's
    uplinks (bytes leaving the leaf ÷ its uplink capacity). Equals the closed form
    max((x−1)D/C_F, x(y−1)D/C_S) without oversubscription; with o:1 leaves the leaf term is
    o × the cross-leaf bytes per GPU / C_S ("slowed by the ratio" for the traffic that leaves)."""
    m = np.asarray(pair_bytes, dtype=np.float64).copy()
    np.fill_diagonal(m, 0.0)
    n, k = net.gpus, net.hb_domain
    dom = np.arange(n) // k
    same = dom[:, None] == dom[None, :]
    cap = net.capacity_bytes_per_s
    hb_s = 0.0
    if k > 1:
        hb_s = float(np.max(np.where(same, m, 0).sum(axis=1) / cap[net.gpu_hb_up]))
        hb_s = max(hb_s, float(np.max(np.where(same, m, 0).sum(axis=0) / cap[net.gpu_hb_down])))
    nic = np.where(same, 0.0, m)
    nic_s = float(np.max(nic.sum(axis=1) / cap[net.gpu_up])) if nic.any() else 0.0
    nic_s = max(nic_s, float(np.max(nic.sum(axis=0) / cap[net.gpu_down])) if nic.any() else 0.0)
    leaf_s = 0.0
    for leaf in np.unique(net.gpu_leaf):
        inside = net.gpu_leaf == leaf
        out_bytes = float(nic[inside][:, ~inside].sum())
        up_cap = float(cap[net.fabric_links[net.fabric_u == leaf]].sum())
        if out_bytes > 0 and up_cap > 0:
            leaf_s = max(leaf_s, out_bytes / up_cap)
    return max(hb_s, nic_s, leaf_s)


def measure(fn: Any, *args: Any, **kw: Any) -> tuple[Any, float]:
    """``fn(*args, **kw)`` and its wall-clock seconds (for the CLI's ``elapsed_s``)."""
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    return out, time.perf_counter() - t0


# ---------------------------------------------------------------------------------------------
# one call: build, simulate, compare with the closed form

COLLECTIVES: tuple[str, ...] = ("alltoall", "allreduce-ring", "allreduce-hierarchical")
SIM_ARCHS: tuple[str, ...] = ("rail-optimized", "rail-only", "oversubscribed")
SCHEDULES: tuple[str, ...] = ("auto", "direct", "forwarding")
#: the all-to-all holds an N×N traffic matrix: 8,192 GPUs take ~2 min and ~12 GB
MAX_ALLTOALL_GPUS = 8192
DEFAULT_OVERSUBSCRIPTION = 3.0


def parse_skew(text: str | None) -> float | None:
    """``zipf:S`` → S (the Zipf exponent); ``None``/``""``/``uniform`` → None."""
    if text is None or text in ("", "uniform", "none"):
        return None
    kind, _, val = text.partition(":")
    if kind != "zipf":
        raise RailplanError("skew", f"{text!r}: use zipf:S (e.g. zipf:1.2) or uniform")
    try:
        s = float(val)
    except ValueError:
        raise RailplanError("skew", f"{text!r}: the Zipf exponent must be a number") from None
    if not 0 <= s <= 10:
        raise RailplanError("skew", f"Zipf exponent must be in [0, 10]; got {s}")
    return s


@dataclass(frozen=True)
class FlowsimReport:
    """Result of ``run``: simulated time beside the closed form (bandwidths are line rates)."""

    inputs: dict[str, Any]
    simulated_s: float
    closed_form_s: float | None
    closed_form: str
    closed_form_applies: bool
    relative_error: float | None
    link_bound_s: float
    cut_bound_s: float | None
    flows: int
    classes: int
    links: int
    steps: int
    aggregated: bool
    elapsed_s: float
    step_detail: tuple[StepResult, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "inputs": self.inputs,
            "simulated_s": self.simulated_s,
            "closed_form_s": self.closed_form_s,
            "closed_form": self.closed_form,
            "closed_form_applies": self.closed_form_applies,
            "relative_error": self.relative_error,
            "link_bound_s": self.link_bound_s,
            "cut_bound_s": self.cut_bound_s,
            "flows": self.flows,
            "classes": self.classes,
            "links": self.links,
            "steps": self.steps,
            "aggregated": self.aggregated,
            "elapsed_s": self.elapsed_s,
            "step_detail": [s.to_dict() for s in self.step_detail],
        }


def closed_form_s(
    collective: str,
    schedule: str,
    x: int,
    y: int,
    nbytes: float,
    hb_bytes_per_s: float,
    nic_bytes_per_s: float,
    oversubscription: float = 1.0,
) -> tuple[float, str]:
    """The closed form of ``railplan.collectives`` for a case, latency 0, and its name.

    ``nbytes`` is the per-pair D for all-to-all, the vector size for all-reduce. Oversubscription
    divides C_S as the iteration model does ("NIC bandwidth between HB domains ÷ ratio")."""
    from railplan import collectives as col

    cf, cs = hb_bytes_per_s, nic_bytes_per_s / oversubscription
    if collective == "alltoall":
        if schedule == "forwarding":
            return float(col.all_to_all_rail_only_s(x, y, nbytes, cf, cs, 0, 0)), (
                "x(y-1)D/C_S + y(x-1)D/C_F"
            )
        return float(col.all_to_all_rail_optimized_s(x, y, nbytes, cf, cs, 0, 0)), (
            "max((x-1)D/C_F, x(y-1)D/C_S)"
        )
    if collective == "allreduce-ring":
        return float(col.ring_all_reduce_s(y, nbytes, cs, 0)), "2(y-1)/y D/C_S"
    if collective == "allreduce-hierarchical":
        return float(col.hierarchical_all_reduce_s(x, y, nbytes, cf, cs, 0, 0)), (
            "2[(y-1)D/(xyC_S) + (x-1)D/(xC_F)]"
        )
    raise RailplanError("collective", f"{collective!r}: choose one of {', '.join(COLLECTIVES)}")


def run(
    system: str,
    gpus: int,
    arch: str = "rail-optimized",
    collective: str = "alltoall",
    pair_bytes: float | None = None,
    size_bytes: float | None = None,
    radix: int = 64,
    oversubscription: float | None = None,
    skew: str | None = None,
    schedule: str = "auto",
    aggregate: bool = True,
    seed: int = 0,
) -> FlowsimReport:
    """Simulate one collective on a catalog system and compare it with its closed form.

    All-to-all: ``pair_bytes`` per ordered pair (or ``size_bytes`` per GPU, split in N);
    all-reduce: ``size_bytes`` (the reduced vector). Line rates are used on both sides:
    C_S = nic_gbps × nics_per_gpu, C_F = hb_tbps (no efficiency factors).
    ``oversubscription`` is for arch ``oversubscribed`` only (default 3); with any other arch
    it is an error rather than a silently ignored option.
    """
    from railplan.limits import check_int
    from railplan.network.graph import MAX_GRAPH_GPUS
    from railplan.specs import load_system
    from railplan.specs.base import BYTES

    t0 = time.perf_counter()
    if arch not in SIM_ARCHS:
        raise RailplanError("arch", f"{arch!r}: choose one of {', '.join(SIM_ARCHS)}")
    if collective not in COLLECTIVES:
        raise RailplanError("collective", f"{collective!r}: choose one of {', '.join(COLLECTIVES)}")
    if schedule not in SCHEDULES:
        raise RailplanError("schedule", f"{schedule!r}: choose one of {', '.join(SCHEDULES)}")
    if arch == "oversubscribed" and oversubscription is None:
        oversubscription = DEFAULT_OVERSUBSCRIPTION
    if pair_bytes is not None and size_bytes is not None:
        raise RailplanError("bytes", "give --bytes-per-pair or --bytes, not both")
    if pair_bytes is not None:
        pair_bytes = BYTES.check("bytes_per_pair", pair_bytes)
    if size_bytes is not None:
        size_bytes = BYTES.check("bytes", size_bytes)
    limit = MAX_ALLTOALL_GPUS if collective == "alltoall" else MAX_GRAPH_GPUS
    if not 1 <= gpus <= limit:
        why = "an N×N traffic matrix" if collective == "alltoall" else "the whole network graph"
        raise RailplanError(
            "gpus",
            f"must be in [1, {limit:,}] for {collective} (the flow simulator holds {why}); "
            f"got {gpus:,}; for larger clusters use the closed forms (railplan alltoall, estimate)",
        )
    check_int("seed", seed, 0, 2**63 - 1)
    sysm = load_system(system)
    k = int(sysm.hb_domain)
    nics = int(sysm.nics_per_gpu)
    if nics != sysm.nics_per_gpu:
        raise RailplanError("system", "the simulator needs a whole number of NICs per GPU")
    net = network_for(
        arch, gpus, k, radix, int(sysm.nic_gbps), sysm.hb_tbps * 1000, nics, oversubscription
    )
    ratio = oversubscription or 1.0
    y = gpus // k
    hb_bps = sysm.hb_tbps * 1e12 / 8
    nic_bps = sysm.nic_gbps * sysm.nics_per_gpu * 1e9 / 8
    zipf = parse_skew(skew)
    cut: float | None = None
    if collective == "alltoall":
        if pair_bytes is None:
            pair_bytes = (size_bytes / gpus) if size_bytes is not None else float(2**20)
        sched = (
            schedule if schedule != "auto" else ("forwarding" if arch == "rail-only" else "direct")
        )
        b = (
            uniform_pair_bytes(gpus, pair_bytes)
            if zipf is None
            else zipf_pair_bytes(gpus, pair_bytes, zipf, seed)
        )
        if sched == "forwarding":
            steps = alltoall_forwarding_steps(b, k)
        else:
            steps = alltoall_direct_steps(b)
            cut = oversubscribed_alltoall_bound_s(net, b)
        nbytes = float(pair_bytes)
    else:
        if pair_bytes is not None:
            raise RailplanError("bytes_per_pair", "is for alltoall; use --bytes for all-reduce")
        if zipf is not None:
            raise RailplanError("skew", "skewed traffic applies to alltoall only")
        sched = "ring" if collective == "allreduce-ring" else "hierarchical"
        nbytes = float(size_bytes) if size_bytes is not None else float(2**30)
        steps = (
            ring_allreduce_steps(gpus, k, nbytes)
            if collective == "allreduce-ring"
            else hierarchical_allreduce_steps(gpus, k, nbytes)
        )
    res = simulate(net, steps, aggregate)
    cf_s, cf_name = closed_form_s(collective, sched, k, y, nbytes, hb_bps, nic_bps, ratio)
    applies = zipf is None
    rel = res.time_s / cf_s - 1 if cf_s > 0 else None
    inputs = {
        "system": sysm.name if sysm.name != "custom" else system,
        "gpus": gpus,
        "hb_domain": k,
        "arch": arch,
        "collective": collective,
        "schedule": sched,
        "bytes_per_pair" if collective == "alltoall" else "bytes": nbytes,
        "radix": radix,
        "oversubscription": ratio,
        "skew": skew or "uniform",
        "hb_gbps": sysm.hb_tbps * 1000,
        "nic_gbps": sysm.nic_gbps * sysm.nics_per_gpu,
    }
    return FlowsimReport(
        inputs=inputs,
        simulated_s=res.time_s,
        closed_form_s=cf_s,
        closed_form=cf_name if applies else cf_name + " (uniform, same mean bytes)",
        closed_form_applies=applies,
        relative_error=rel,
        link_bound_s=res.link_bound_s,
        cut_bound_s=cut,
        flows=res.flows,
        classes=sum(s.classes for s in res.steps),
        links=net.links,
        steps=res.step_count,
        aggregated=all(s.classes < s.flows for s in res.steps if s.flows > 1),
        elapsed_s=time.perf_counter() - t0,
        step_detail=res.steps,
    )
