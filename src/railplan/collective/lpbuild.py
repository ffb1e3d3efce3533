"""The time-expanded programs of lp.py, built as sparse matrices with numpy (never element by
element): the network in epochs (`network`) and TE-CCL's all-gather (`all_gather`) and
all-to-all (`all_to_all`) programs on it; lp.py's docstring describes the formulation."""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

#: TE-CCL ignores a link latency below this fraction of an epoch (input_data.py)
ALPHA_THRESHOLD = 0.1

IntArr = NDArray[np.int64]


@dataclass(frozen=True)
class Net:
    tail: IntArr  # per edge
    head: IntArr
    cap: NDArray[np.float64]  # chunks per epoch
    arr: IntArr  # epoch offset from send to usable at head
    window: IntArr  # epochs one chunk takes on the edge, less one (TE-CCL's beta_num_back)
    dist: NDArray[np.float64]  # node x node: fewest epochs from send at one to usable at other
    is_rank: NDArray[np.bool_]  # per node
    rank_idx: IntArr  # node -> rank number or -1
    n_nodes: int


def order(dg: nx.DiGraph, ranks: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """Node order (ranks first) and edge order of the program's columns."""
    nodes = list(ranks) + [v for v in dg.nodes if v not in set(ranks)]
    return nodes, [(u, v) for u, v, c in dg.edges(data="capacity") if float(c) > 0]


def network(dg: nx.DiGraph, ranks: list[str], chunk_bytes: float, epoch_s: float, op: str) -> Net:
    nodes, pairs = order(dg, ranks)
    index = {v: i for i, v in enumerate(nodes)}
    edges = [(u, v, dg.edges[u, v]) for u, v in pairs]
    tail = np.array([index[u] for u, _, _ in edges], dtype=np.int64)
    head = np.array([index[v] for _, v, _ in edges], dtype=np.int64)
    cap_bps = np.array([float(d["capacity"]) for _, _, d in edges])
    lat = np.array([float(d.get("latency_s", 0.0)) for _, _, d in edges]) / epoch_s
    delay = np.where(lat > ALPHA_THRESHOLD, np.ceil(lat - 1e-9), 0).astype(np.int64)
    is_rank = np.zeros(len(nodes), dtype=bool)
    is_rank[: len(ranks)] = True
    cap = cap_bps * epoch_s / chunk_bytes
    hop = np.ones(len(edges), dtype=np.int64)
    window = np.zeros(len(edges), dtype=np.int64)
    if op == "all-gather":
        to_rank = ~is_rank[tail] & is_rank[head]
        hop[to_rank] = 0  # switch -> rank takes no epoch of its own (TE-CCL all-gather)
        # whole chunks on a link slower than one chunk per epoch take ceil(1/cap) epochs
        window = np.where(to_rank, 0, np.maximum(0, np.ceil(1 / cap - 1e-9) - 1)).astype(np.int64)
    rank_idx = np.full(len(nodes), -1, dtype=np.int64)
    rank_idx[: len(ranks)] = np.arange(len(ranks))
    arr = hop + delay + window
    return Net(
        tail,
        head,
        cap,
        arr,
        window,
        _distances(tail, head, arr, len(nodes)),
        is_rank,
        rank_idx,
        len(nodes),
    )


def _distances(tail: IntArr, head: IntArr, arr: IntArr, n_nodes: int) -> NDArray[np.float64]:
    """All-pairs shortest epoch offsets (scipy's Dijkstra; a zero offset is stored as 1e-6,
    as sparse graphs drop zeros, and floored away after: paths have far fewer than 1e6 arcs)."""
    from scipy.sparse.csgraph import shortest_path

    w = sp.csr_matrix((arr + 1e-6, (tail, head)), shape=(n_nodes, n_nodes))
    d = np.asarray(shortest_path(w, method="D", directed=True), dtype=np.float64)
    d[np.isfinite(d)] = np.floor(d[np.isfinite(d)])
    return d


def grid(*shape: int) -> tuple[IntArr, ...]:
    """Every index tuple of an array of `shape`, in C order, as one flat array per axis."""
    return tuple(a.ravel() for a in np.meshgrid(*[np.arange(s) for s in shape], indexing="ij"))


def flow_column(c: IntArr, e: IntArr, k: IntArr, n_edges: int, epochs: int) -> IntArr:
    """The programs' column of flow f[c, e, k]: (c·E + e)·K + k, E = `n_edges`, K = `epochs`
    (the flows come first; lpsym and lphier address them through this)."""
    return (c * n_edges + e) * epochs + k


class _Coo:
    """Sparse rows accumulated block by block (numpy arrays, never element by element)."""

    def __init__(self) -> None:
        self.rows: list[IntArr] = []
        self.cols: list[IntArr] = []
        self.vals: list[NDArray[np.float64]] = []

    def add(self, rows: IntArr, cols: IntArr, val: float) -> None:
        self.rows.append(rows)
        self.cols.append(cols)
        self.vals.append(np.full(len(rows), val))

    def matrix(self, n_rows: int, n_cols: int) -> sp.csr_matrix:
        return sp.csr_matrix(
            (np.concatenate(self.vals), (np.concatenate(self.rows), np.concatenate(self.cols))),
            shape=(n_rows, n_cols),
        )


@dataclass(frozen=True)
class Problem:
    c: NDArray[np.float64]
    a_ub: sp.csr_matrix
    b_ub: NDArray[np.float64]
    a_eq: sp.csr_matrix
    b_eq: NDArray[np.float64]
    lo: NDArray[np.float64]
    hi: NDArray[np.float64]
    delivered: IntArr  # flow columns whose arrival serves a demand


def _flows(net: Net, n: int, k_max: int) -> tuple[IntArr, IntArr, IntArr, IntArr]:
    """Flow variables f[c, e, k] (column (c·E + e)·K + k): commodity, edge, epoch, arrival."""
    c, e, k = grid(n, len(net.tail), k_max)
    return c, e, k, k + net.arr[e]


def _capacity(coo: _Coo, net: Net, e: IntArr, k: IntArr, k_max: int, row0: int) -> int:
    """Row (edge, epoch j): what the edge carries in epochs j - window .. j is at most
    (window + 1) · capacity (TE-CCL's capacity_constraints; window 0: one epoch)."""
    cols = np.arange(len(e))
    for lag in range(int(net.window.max(initial=0)) + 1):
        sel = (net.window[e] >= lag) & (k + lag < k_max)
        coo.add(row0 + e[sel] * k_max + k[sel] + lag, cols[sel], 1.0)
    return row0 + len(net.tail) * k_max


def _capacity_rhs(net: Net, k_max: int) -> NDArray[np.float64]:
    return np.repeat(net.cap * (net.window + 1), k_max)


def all_gather(net: Net, n: int, k_max: int, chunks: int = 1) -> Problem:
    """Buffers b[c, r, t] (t = 0..K) after the flows: b_t = b_(t-1) + arrivals at t. As in
    TE-CCL, a chunk sent to a switch in the last epoch K-1 counts as delivered in it: the
    switch's links to ranks get one more epoch, K, whose flows land in b_K. With `chunks` per
    rank (TE-CCL's num_chunks) commodity c is chunk c mod `chunks` of rank c // `chunks`."""
    kf = k_max + 1  # flow epochs 0..K; only switch-to-rank flows may use epoch K
    m = n * chunks
    src = np.arange(m, dtype=np.int64) // chunks  # commodity -> the rank it starts at
    c, e, k, at = _flows(net, m, kf)
    nf, kk = len(c), k_max + 1
    nb = m * n * kk
    head_r, tail_r = net.rank_idx[net.head[e]], net.rank_idx[net.tail[e]]
    eq = _Coo()
    bc, br, bt = grid(m, n, kk)
    eq.add(np.arange(nb), nf + np.arange(nb), 1.0)
    later = np.flatnonzero(bt > 0)
    eq.add(later, nf + later - 1, -1.0)
    useful = (head_r >= 0) & (head_r != src[c]) & (at <= k_max)
    eq.add((c[useful] * n + head_r[useful]) * kk + at[useful], np.flatnonzero(useful), -1.0)
    b_eq = np.where((src[bc] == br) & (bt == 0), 1.0, 0.0)
    ub = _Coo()
    fr = np.flatnonzero(tail_r >= 0)  # a rank sends (copies) what it holds
    ub.add(np.arange(len(fr)), fr, 1.0)
    ub.add(np.arange(len(fr)), nf + (c[fr] * n + tail_r[fr]) * kk + np.minimum(k[fr], k_max), -1.0)
    row = len(fr)
    fs = np.flatnonzero(tail_r < 0)  # a switch sends (copies) what arrives in the epoch
    sw_row = np.full(nf, -1, dtype=np.int64)
    sw_row[fs] = row + np.arange(len(fs))
    ub.add(sw_row[fs], fs, 1.0)
    e_count = len(net.tail)
    for eo in np.flatnonzero(net.rank_idx[net.tail] < 0):
        ins = np.flatnonzero((net.head[e] == net.tail[eo]) & (at < kf))
        ub.add(sw_row[(c[ins] * e_count + eo) * kf + at[ins]], ins, -1.0)
    row += len(fs)
    end = _capacity(ub, net, e, k, kf, row)
    b_ub = np.concatenate([np.zeros(row), _capacity_rhs(net, kf)])
    lo = np.zeros(nf + nb)
    lo[nf + np.flatnonzero(bt == k_max)] = 1.0  # every rank holds every chunk at the end
    # a flow is 0 before its chunk can be at the tail, or if it can reach no rank by epoch K
    to_rank = net.dist[:, :n].copy()
    to_rank[np.arange(n), np.arange(n)] = np.inf  # (a rank's own chunk: see below)
    reach = np.where(net.is_rank[net.head[e]], at, at + to_rank[net.head[e]].min(axis=1))
    hi_f = np.where((k < net.dist[src[c], net.tail[e]]) | (reach > k_max), 0.0, np.inf)
    hi = np.concatenate([hi_f, np.ones(nb)])
    cost = np.concatenate([np.ones(nf), np.zeros(nb)])
    return Problem(
        cost,
        ub.matrix(end, nf + nb),
        b_ub,
        eq.matrix(nb, nf + nb),
        b_eq,
        lo,
        hi,
        np.flatnonzero(useful),
    )


def all_to_all(net: Net, n: int, k_max: int) -> Problem:
    """Held amounts h[c, v, t] (commodity c = destination; t = 0..K) at every node but c."""
    c, e, k, at = _flows(net, n, k_max)
    nf, kk, nv = len(c), k_max + 1, net.n_nodes
    nh = n * nv * kk
    hc, hv, ht = grid(n, nv, kk)
    eq = _Coo()  # h_t - h_(t-1) - arrivals(t) + departures(t) = supply (t = 0)
    eq.add(np.arange(nh), nf + np.arange(nh), 1.0)
    later = np.flatnonzero(ht > 0)
    eq.add(later, nf + later - 1, -1.0)
    head_r = net.rank_idx[net.head[e]]
    transit = np.flatnonzero((head_r != c) & (at <= k_max))
    eq.add((c[transit] * nv + net.head[e[transit]]) * kk + at[transit], transit, -1.0)
    eq.add((c * nv + net.tail[e]) * kk + k, np.arange(nf), 1.0)
    done = np.flatnonzero((head_r == c) & (at <= k_max))
    eq.add(nh + c[done], done, 1.0)  # all n-1 blocks reach their destination
    own = net.rank_idx[hv]
    b_eq = np.concatenate(
        [np.where((own >= 0) & (own != hc) & (ht == 0), 1.0, 0.0), np.full(n, n - 1.0)]
    )
    ub = _Coo()
    end = _capacity(ub, net, e, k, k_max, 0)
    hi_h = np.where((own >= 0) & (own != hc), np.inf, 0.0)  # switches and the sink hold nothing
    # 0 from the destination itself, or when the block cannot reach its destination by epoch K
    hi_f = np.where(
        (net.rank_idx[net.tail[e]] == c) | (at + net.dist[net.head[e], c] > k_max), 0.0, np.inf
    )
    return Problem(
        np.concatenate([np.ones(nf), np.zeros(nh)]),
        ub.matrix(end, nf + nh),
        _capacity_rhs(net, k_max),
        eq.matrix(nh + n, nf + nh),
        b_eq,
        np.zeros(nf + nh),
        np.concatenate([hi_f, hi_h]),
        done,
    )
