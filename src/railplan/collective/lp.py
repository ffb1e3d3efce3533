"""Collective schedules by linear programming over a time-expanded graph, as TE-CCL formulates it.

TE-CCL (Liu et al., "Rethinking Machine Learning Collective Communication as a Multi-Commodity
Flow Problem", SIGCOMM 2024; code: github.com/microsoft/TE-CCL, teccl/solvers/) cuts time into
epochs of equal length τ and lets every link carry, per epoch, capacity·τ bytes of any mix of
chunks (the commodities). A chunk sent over link (u, v) in epoch k can be forwarded from v in
epoch k + 1 + ⌈α/τ⌉, where α is the link latency (TE-CCL ignores α when α/τ ≤ 0.1,
`InstanceParams.alpha_threshold`). Nodes that are not ranks (switches, NICs) store nothing: what
leaves them in an epoch arrived in it.

* all-gather (TE-CCL allgather.py): one commodity per source rank, its D/n bytes. Ranks keep
  what they receive ("buffers") and may copy it to every out-link; switches may copy too
  (`switch_copy`). Like TE-CCL, a switch's link to a rank takes no epoch of its own (the
  GPU-to-switch epoch carries the crossing, `switch_to_gpu_link_on = False`).
* all-to-all (TE-CCL alltoall.py, an LP there too): plain multi-commodity flow with storage at
  ranks; commodity = destination rank (flows to one sink aggregate losslessly), D/n per pair.

All-gather flows are whole chunks (TE-CCL's integer program: a fractional copy could count the
same bytes twice), so a link slower than one chunk per epoch carries a chunk over
⌈1/capacity⌉ epochs (TE-CCL's `beta_num_back` window); all-to-all flows split freely (its LP).
Solved with HiGHS through scipy.optimize.milp, all-gather for feasibility only (a zero
objective: the first schedule found ends the solve); constraints are sparse matrices built with
numpy, and flows that cannot be useful (before the chunk can be at the tail, or unable to reach a
rank by the horizon) are fixed at 0.

The epoch count is the smallest feasible one, searched from the cut/distance bound (`_search`);
the time is epochs · τ. τ is chunk/slowest-link ("slow", TE-CCL's `EpochType.SLOWEST_LINK`),
chunk/fastest-link ("fast") or given, and never below the smallest latency /
`ALPHA_EPOCH_RATIO_MAX`. HiGHS gets a time limit per solve and the search a budget; when no
schedule is found in it, τ doubles (the time stays that of a valid schedule, only coarser).
`optimal` on a result says every smaller epoch count was proven infeasible. Limits: 64 ranks
(`MAX_RANKS`); in practice a 32-rank all-to-all on a built graph already falls back to coarse
epochs, and 64 ranks may find no schedule in the budget (a one-line error).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import networkx as nx
import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray
from scipy.optimize import Bounds, LinearConstraint, milp

from railplan.errors import RailplanError

MAX_RANKS = 64
#: TE-CCL ignores a link latency below this fraction of an epoch (input_data.py)
ALPHA_THRESHOLD = 0.1
LP_OPS: tuple[str, ...] = ("all-gather", "all-to-all")
EPOCH_KINDS: tuple[str, ...] = ("slow", "fast")
#: an epoch is at least the smallest link latency over this. TE-CCL uses 200
#: (`alpha_epoch_duration_ratio_max`); 16 keeps a latency-bound (small) collective to ~100-200
#: epochs, at the price of rounding each hop up to whole epochs of 1/16 of the smallest latency
#: (1-5 % at 1 KB on TE-CCL's chassis, benchmarks/collectives.py)
ALPHA_EPOCH_RATIO_MAX = 16
#: HiGHS time per feasibility solve; past it the epoch count counts as too few (see synthesize)
SOLVE_LIMIT_S = 10.0
#: seconds for the whole search, about (see synthesize for its split)
SEARCH_BUDGET_S = 50.0
#: times the epoch may be doubled when no schedule is found in time
COARSEN_STEPS = 3
#: epochs the search may try (a larger time-expanded graph does not fit memory at 64 ranks)
MAX_EPOCHS = 1024

IntArr = NDArray[np.int64]


@dataclass(frozen=True)
class LPResult:
    """A solved schedule: time_s = epochs · epoch_s (latency inside through the delays)."""

    op: str
    ranks: int
    size_bytes: float
    epochs: int
    epoch_s: float
    time_s: float
    algbw_gb_per_s: float
    delivered_bytes: float  # bytes that reached a rank needing them, over the whole schedule
    solve_s: float
    epochs_lower: int  # no schedule in fewer epochs (proven)
    optimal: bool  # epochs == epochs_lower


@dataclass(frozen=True)
class _Net:
    tail: IntArr  # per edge
    head: IntArr
    cap: NDArray[np.float64]  # chunks per epoch
    arr: IntArr  # epoch offset from send to usable at head
    window: IntArr  # epochs one chunk takes on the edge, less one (TE-CCL's beta_num_back)
    dist: NDArray[np.float64]  # node x node: fewest epochs from send at one to usable at other
    is_rank: NDArray[np.bool_]  # per node
    rank_idx: IntArr  # node -> rank number or -1
    n_nodes: int


def _net(dg: nx.DiGraph, ranks: list[str], chunk_bytes: float, epoch_s: float, op: str) -> _Net:
    nodes = list(ranks) + [v for v in dg.nodes if v not in set(ranks)]
    index = {v: i for i, v in enumerate(nodes)}
    edges = [(u, v, d) for u, v, d in dg.edges(data=True) if float(d["capacity"]) > 0]
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
    return _Net(
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


def _grid(*shape: int) -> tuple[IntArr, ...]:
    return tuple(a.ravel() for a in np.meshgrid(*[np.arange(s) for s in shape], indexing="ij"))


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
class _Problem:
    c: NDArray[np.float64]
    a_ub: sp.csr_matrix
    b_ub: NDArray[np.float64]
    a_eq: sp.csr_matrix
    b_eq: NDArray[np.float64]
    lo: NDArray[np.float64]
    hi: NDArray[np.float64]
    delivered: IntArr  # flow columns whose arrival serves a demand


def _flows(net: _Net, n: int, k_max: int) -> tuple[IntArr, IntArr, IntArr, IntArr]:
    """Flow variables f[c, e, k] (column (c·E + e)·K + k): commodity, edge, epoch, arrival."""
    c, e, k = _grid(n, len(net.tail), k_max)
    return c, e, k, k + net.arr[e]


def _capacity(coo: _Coo, net: _Net, e: IntArr, k: IntArr, k_max: int, row0: int) -> int:
    """Row (edge, epoch j): what the edge carries in epochs j - window .. j is at most
    (window + 1) · capacity (TE-CCL's capacity_constraints; window 0: one epoch)."""
    cols = np.arange(len(e))
    for lag in range(int(net.window.max(initial=0)) + 1):
        sel = (net.window[e] >= lag) & (k + lag < k_max)
        coo.add(row0 + e[sel] * k_max + k[sel] + lag, cols[sel], 1.0)
    return row0 + len(net.tail) * k_max


def _capacity_rhs(net: _Net, k_max: int) -> NDArray[np.float64]:
    return np.repeat(net.cap * (net.window + 1), k_max)


def _allgather(net: _Net, n: int, k_max: int) -> _Problem:
    """Buffers b[c, r, t] (t = 0..K) after the flows: b_t = b_(t-1) + arrivals at t. As in
    TE-CCL, a chunk sent to a switch in the last epoch K-1 counts as delivered in it: the
    switch's links to ranks get one more epoch, K, whose flows land in b_K."""
    kf = k_max + 1  # flow epochs 0..K; only switch-to-rank flows may use epoch K
    c, e, k, at = _flows(net, n, kf)
    nf, kk = len(c), k_max + 1
    nb = n * n * kk
    head_r, tail_r = net.rank_idx[net.head[e]], net.rank_idx[net.tail[e]]
    eq = _Coo()
    bc, br, bt = _grid(n, n, kk)
    eq.add(np.arange(nb), nf + np.arange(nb), 1.0)
    later = np.flatnonzero(bt > 0)
    eq.add(later, nf + later - 1, -1.0)
    useful = (head_r >= 0) & (head_r != c) & (at <= k_max)
    eq.add((c[useful] * n + head_r[useful]) * kk + at[useful], np.flatnonzero(useful), -1.0)
    b_eq = np.where((bc == br) & (bt == 0), 1.0, 0.0)
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
    hi_f = np.where((k < net.dist[c, net.tail[e]]) | (reach > k_max), 0.0, np.inf)
    hi = np.concatenate([hi_f, np.ones(nb)])
    cost = np.concatenate([np.ones(nf), np.zeros(nb)])
    return _Problem(
        cost,
        ub.matrix(end, nf + nb),
        b_ub,
        eq.matrix(nb, nf + nb),
        b_eq,
        lo,
        hi,
        np.flatnonzero(useful),
    )


def _alltoall(net: _Net, n: int, k_max: int) -> _Problem:
    """Held amounts h[c, v, t] (commodity c = destination; t = 0..K) at every node but c."""
    c, e, k, at = _flows(net, n, k_max)
    nf, kk, nv = len(c), k_max + 1, net.n_nodes
    nh = n * nv * kk
    hc, hv, ht = _grid(n, nv, kk)
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
    return _Problem(
        np.concatenate([np.ones(nf), np.zeros(nh)]),
        ub.matrix(end, nf + nh),
        _capacity_rhs(net, k_max),
        eq.matrix(nh + n, nf + nh),
        b_eq,
        np.zeros(nf + nh),
        np.concatenate([hi_f, hi_h]),
        done,
    )


def _solve(net: _Net, op: str, n: int, k_max: int, time_limit_s: float) -> tuple[str, float]:
    """Whether `k_max` epochs suffice: ("feasible", delivered chunks), ("infeasible", 0) or
    ("unknown", 0) when HiGHS hit its time limit first. All-gather is TE-CCL's integer program
    (whole chunks: a fractional copy could count the same bytes twice), solved for feasibility
    only (a zero objective: HiGHS stops at the first schedule); all-to-all is its LP, solved
    for the least traffic."""
    prob = (_allgather if op == "all-gather" else _alltoall)(net, n, k_max)
    integer = op == "all-gather"
    integrality = np.zeros(len(prob.c))
    if integer:
        integrality[: len(prob.c) - prob.a_eq.shape[0]] = 1
    res = milp(
        np.zeros(len(prob.c)) if integer else prob.c,
        constraints=[
            LinearConstraint(prob.a_ub, -np.inf, prob.b_ub),
            LinearConstraint(prob.a_eq, prob.b_eq, prob.b_eq),
        ],
        integrality=integrality,
        bounds=Bounds(prob.lo, prob.hi),
        options={"time_limit": time_limit_s},
    )
    if res.x is not None and res.status in (0, 1):
        return "feasible", float(np.sum(res.x[prob.delivered]))
    return ("infeasible" if res.status == 2 else "unknown"), 0.0


def epoch_s(dg: nx.DiGraph, chunk_bytes: float, kind: str) -> float:
    """TE-CCL's epoch: one chunk over the slowest ("slow") or fastest ("fast") link, but no
    shorter than the smallest link latency / `ALPHA_EPOCH_RATIO_MAX`."""
    if kind not in EPOCH_KINDS:
        raise RailplanError("epochs", f"{kind!r} is not allowed; choose slow or fast")
    caps = [float(c) for _, _, c in dg.edges(data="capacity") if float(c) > 0]
    alphas = [float(a) for _, _, a in dg.edges(data="latency_s", default=0.0) if float(a) > 0]
    tau = chunk_bytes / (min(caps) if kind == "slow" else max(caps))
    return max(tau, min(alphas, default=0.0) / ALPHA_EPOCH_RATIO_MAX)


def slowest_epoch_bound(
    dg: nx.DiGraph, ranks: list[str], op: str, size_bytes: float
) -> tuple[float, int]:
    """The slowest-link epoch and the fewest such epochs any schedule of `op` needs."""
    n = len(ranks)
    tau = epoch_s(dg, size_bytes / n, "slow")
    return tau, _epochs_lower(_net(dg, ranks, size_bytes / n, tau, op), op, n)


def _epochs_lower(net: _Net, op: str, n: int) -> int:
    """Epochs no schedule can beat: the farthest pair (in epoch delays), and one rank's
    in-links carrying the n−1 chunks it lacks (the one-GPU cut of bound.py)."""
    d = net.dist[:n, :n]
    if not np.isfinite(d).all():
        s, r = (int(x[0]) for x in np.nonzero(~np.isfinite(d)))
        raise RailplanError("topology", f"rank {r} cannot be reached from rank {s}")
    far = int(d.max())
    in_cap = np.bincount(net.head, weights=net.cap, minlength=net.n_nodes)[:n]
    out_cap = np.bincount(net.tail, weights=net.cap, minlength=net.n_nodes)[:n]
    per_rank = in_cap.min() if op == "all-gather" else min(in_cap.min(), out_cap.min())
    return max(1, far, math.ceil(float((n - 1) / per_rank) - 1e-9))


@dataclass(frozen=True)
class _Found:
    epochs: int
    proven: int  # fewest epochs not proven infeasible
    delivered: float


def _search(
    net: _Net, op: str, n: int, limit_s: float, find_s: float, budget_s: float
) -> _Found | None:
    """Fewest feasible epochs: from the cut/distance bound up to a feasible count
    (None if none within `find_s`), then bisection below it for at most `budget_s`. A solve
    past `limit_s` counts as infeasible (not proven): the schedule returned is always valid."""
    proven = _epochs_lower(net, op, n)  # every count below is infeasible
    lo = hi = proven
    give_up = time.perf_counter() + find_s
    state, delivered = _solve(net, op, n, hi, limit_s)
    while state != "feasible":
        if state == "infeasible":  # fewer epochs never help: all counts up to hi are too few
            proven = hi + 1
        left = give_up - time.perf_counter()
        if hi >= MAX_EPOCHS or left <= 0:
            return None
        # a proven-infeasible count: the answer may be just above (grow by a quarter); a
        # timed-out one is hard to decide, and a count well above it solves quickly (double)
        step = hi if state == "unknown" else max(1, hi // 4)
        lo, hi = hi + 1, min(MAX_EPOCHS, hi + step)
        state, delivered = _solve(net, op, n, hi, min(limit_s, max(1.0, left)))
    deadline = time.perf_counter() + budget_s
    while lo < hi and time.perf_counter() < deadline:
        mid = (lo + hi) // 2
        state, got = _solve(net, op, n, mid, min(limit_s, max(1.0, deadline - time.perf_counter())))
        if state == "feasible":
            hi, delivered = mid, got
        else:
            lo = mid + 1
            if state == "infeasible":
                proven = max(proven, mid + 1)
    return _Found(hi, min(proven, hi), delivered)


def synthesize(
    dg: nx.DiGraph,
    ranks: list[str],
    op: str,
    size_bytes: float,
    epochs: str | float = "slow",
    time_limit_s: float = SOLVE_LIMIT_S,
    budget_s: float = SEARCH_BUDGET_S,
) -> LPResult:
    """The fastest schedule of `op` on `dg` (edge `capacity` in bytes/s per direction, optional
    `latency_s`); `size_bytes` as nccl-tests prints it (the gathered result; each rank's
    all-to-all send buffer). `epochs`: "slow", "fast" or an epoch length in seconds (TE-CCL's
    USER_INPUT).

    The epoch count is searched by `_search`; when no schedule is found in its share of
    `budget_s` (the
    time-expanded program is too large for HiGHS: many ranks, or latency-bound sizes that take
    hundreds of fine epochs) the epoch is doubled, up to `COARSEN_STEPS` times — a coarser
    epoch rounds each transfer and latency up, so the time stays that of a valid schedule.
    `optimal` says whether every smaller count was proven infeasible at the epoch used
    (`epochs_lower`: the fewest epochs not proven too few)."""
    if op not in LP_OPS:
        raise RailplanError("op", f"{op!r} has no LP schedule; choose one of {', '.join(LP_OPS)}")
    n = len(ranks)
    if not 2 <= n <= MAX_RANKS:
        raise RailplanError("gpus", f"the LP schedule takes 2 to {MAX_RANKS} ranks; got {n}")
    if not (size_bytes > 0 and math.isfinite(size_bytes)):
        raise RailplanError("bytes", f"must be positive and finite; got {size_bytes}")
    start = time.perf_counter()
    chunk = size_bytes / n
    tau = epochs if isinstance(epochs, float) else epoch_s(dg, chunk, epochs)
    if not (tau > 0 and math.isfinite(tau)):
        raise RailplanError("epochs", f"an epoch length must be positive; got {tau}")
    # half the budget to find a schedule at the epoch asked, an eighth at each coarser one, a
    # quarter to bisect below the first found
    for step in range(COARSEN_STEPS + 1):
        tau_s = tau * 2**step
        net = _net(dg, ranks, chunk, tau_s, op)
        find_s = budget_s / (2 if step == 0 else 8)
        found = _search(net, op, n, min(time_limit_s, find_s), find_s, budget_s / 4)
        if found is not None:
            t = found.epochs * tau_s
            return LPResult(
                op,
                n,
                size_bytes,
                found.epochs,
                tau_s,
                t,
                size_bytes / t / 1e9,
                found.delivered * chunk,
                time.perf_counter() - start,
                found.proven,
                found.proven >= found.epochs,
            )
    raise RailplanError(
        "gpus", f"no {op} schedule for {n} ranks found within the solver's time; use fewer ranks"
    )
