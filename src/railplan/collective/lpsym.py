"""Symmetric schedules for the LP (lp.py), and a check of an all-gather schedule on the full
time-expanded graph.

Symmetry: when a permutation σ of the nodes is an automorphism of the graph (it maps ranks to
ranks and every link to a link of the same capacity and latency; e.g. TE-CCL's identical
chassis rotated by one), σ maps any schedule to a schedule: commodity c on edge e in epoch k
becomes commodity σ(c) on σ(e) in epoch k. `reduce` keeps one variable per orbit of that map
(x[j] = x[σ(j)] for every column j), so HiGHS solves a program a cycle length smaller whose
schedules are the σ-invariant ones. Every solution expands (`x_full = x[orbit]`) to a
solution of the full program (each of its rows is a row of the reduced one), but an
infeasible reduced program proves nothing about the full one: a solution may exist that is not
σ-invariant. lp.py therefore never counts such a count of epochs as proven too few.

The check (`check_all_gather`) replays the schedule epoch by epoch on the time-expanded graph,
independently of the program's rows: a rank sends only a chunk it holds (its own, or one that
arrived by that epoch), a switch forwards only what arrived in the same epoch, no edge carries
more than its capacity over any window of a chunk's transfer, and every rank holds every chunk
at the end. With several chunks per rank (TE-CCL's num_chunks) each is its own commodity and
the same rules hold chunk by chunk.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import networkx as nx
import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from railplan.collective.lpbuild import flow_column, grid
from railplan.errors import RailplanError

IntArr = NDArray[np.int64]


def node_perm(
    dg: nx.DiGraph,
    nodes: list[str],
    edges: list[tuple[str, str]],
    sigma: Mapping[str, str],
    ranks: int,
) -> tuple[IntArr, IntArr]:
    """σ on node indices and edge indices; RailplanError unless σ is an automorphism of `dg`
    that maps ranks (the first `ranks` nodes) to ranks."""
    index = {v: i for i, v in enumerate(nodes)}
    full = {v: sigma.get(v, v) for v in nodes}
    if sorted(full.values(), key=lambda v: index.get(v, -1)) != nodes:
        raise RailplanError("symmetry", "is not a permutation of the graph's nodes")
    perm = np.array([index[full[v]] for v in nodes], dtype=np.int64)
    if (perm[:ranks] >= ranks).any():
        v = nodes[int(np.flatnonzero(perm[:ranks] >= ranks)[0])]
        raise RailplanError("symmetry", f"maps rank {v} to {full[v]}, which is not a rank")
    where = {e: i for i, e in enumerate(edges)}
    eperm = np.empty(len(edges), dtype=np.int64)
    for i, (u, v) in enumerate(edges):
        image = (full[u], full[v])
        a, b = dg.edges[u, v], dg.edges.get(image)
        same = b is not None and all(
            float(a.get(key, 0.0)) == float(b.get(key, 0.0)) for key in ("capacity", "latency_s")
        )
        if image not in where or not same:
            raise RailplanError("symmetry", f"maps link {u}->{v} to no link like it")
        eperm[i] = where[image]
    return perm, eperm


def orbits(colperm: IntArr) -> tuple[IntArr, int]:
    """Orbit label (0..m-1) of every column under the column permutation, and m."""
    label = np.arange(len(colperm))
    image = colperm.copy()
    while not np.array_equal(image, np.arange(len(colperm))):
        label = np.minimum(label, image)
        image = colperm[image]
    _, compact = np.unique(label, return_inverse=True)
    return compact.astype(np.int64), int(compact.max()) + 1


def columns(
    perm: IntArr,
    eperm: IntArr,
    n_edges: int,
    flow_epochs: int,
    blocks: tuple[int, int, int],
    chunks: int = 1,
) -> IntArr:
    """Column permutation of lp's layout: flows (c·E + e)·K + k, then state variables
    (c·S + s)·T + t where s is a rank or node index (`blocks` = (commodities, S, T)); with
    `chunks` per rank, commodity c (chunk c mod chunks of rank c // chunks) maps to the same
    chunk of the image of its rank."""
    m, s_count, t_count = blocks
    cs = np.arange(m, dtype=np.int64)
    cperm = perm[cs // chunks] * chunks + cs % chunks
    c, e, k = grid(m, n_edges, flow_epochs)
    flows = flow_column(cperm[c], eperm[e], k, n_edges, flow_epochs)
    c2, s, t = grid(*blocks)
    state = len(flows) + (cperm[c2] * s_count + perm[s]) * t_count + t
    return np.concatenate([flows, state]).astype(np.int64)


def projector(label: IntArr, m: int) -> sp.csr_matrix:
    """P with x_full = P·x (one column per orbit): the reduced program's rows are A·P."""
    return sp.csr_matrix(
        (np.ones(len(label)), (np.arange(len(label)), label)), shape=(len(label), m)
    )


def bounds(
    label: IntArr, m: int, lo: NDArray[np.float64], hi: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The tightest bounds of each orbit's columns."""
    lo_r = np.full(m, -np.inf)
    hi_r = np.full(m, np.inf)
    np.maximum.at(lo_r, label, lo)
    np.minimum.at(hi_r, label, hi)
    return lo_r, hi_r


def satisfies(
    a_ub: sp.csr_matrix,
    b_ub: NDArray[np.float64],
    a_eq: sp.csr_matrix,
    b_eq: NDArray[np.float64],
    lo: NDArray[np.float64],
    hi: NDArray[np.float64],
    x: NDArray[np.float64],
) -> bool:
    """x meets every row and bound of the full program (to a relative 1e-6: HiGHS's own
    tolerances are 1e-7 on rows and bounds)."""
    tol = 1e-6 * max(1.0, float(np.abs(x).max(initial=0.0)))
    return bool(
        (a_ub @ x <= b_ub + tol).all()
        and np.allclose(a_eq @ x, b_eq, rtol=0.0, atol=tol)
        and (x >= lo - tol).all()
        and (x <= hi + tol).all()
    )


class Links(Protocol):
    """The per-edge arrays of lp's network (tail, head, chunks per epoch, arrival offset,
    window of epochs one chunk takes, less one)."""

    @property
    def tail(self) -> IntArr: ...
    @property
    def head(self) -> IntArr: ...
    @property
    def cap(self) -> NDArray[np.float64]: ...
    @property
    def arr(self) -> IntArr: ...
    @property
    def window(self) -> IntArr: ...


def check_all_gather(
    f: NDArray[np.float64], net: Links, n: int, k_max: int, chunks: int = 1
) -> None:
    """Replay whole-chunk flows f[c, e, k] (k = 0..K) on the time-expanded graph; a
    RailplanError names the first rule broken (see the module's docstring). With `chunks` per
    rank, chunk c starts at rank c // `chunks` (f has n · chunks commodities)."""
    tail, head, cap, arr, window = net.tail, net.head, net.cap, net.arr, net.window
    x = np.rint(f).astype(np.int64)
    if np.abs(f - x).max(initial=0.0) > 1e-6 or x.min(initial=0) < 0:
        raise RailplanError("schedule", "flows are not whole chunks")
    c_n, e_n, k_n = x.shape
    if c_n != n * chunks:
        raise RailplanError("schedule", f"{c_n} chunks, not {n} ranks x {chunks}")
    held = np.full((c_n, n), k_max + 1)  # epoch from which rank r holds chunk c
    held[np.arange(c_n), np.arange(c_n) // chunks] = 0
    for k in range(k_n):
        sent = np.nonzero(x[:, :, k])
        for c, e in zip(*sent, strict=True):
            if head[e] < n and k + arr[e] <= k_max:
                held[c, head[e]] = min(held[c, head[e]], k + arr[e])
        for c, e in zip(*sent, strict=True):
            u = int(tail[e])
            if u < n and held[c, u] > k:
                raise RailplanError("schedule", f"rank {u} sends chunk {c} it lacks (epoch {k})")
            ins = np.flatnonzero((head == u) & (k - arr >= 0))
            if u >= n and x[c, e, k] > x[c, ins, k - arr[ins]].sum():
                raise RailplanError("schedule", f"switch {u} forwards chunk {c} it lacks")
    load = x.sum(axis=0)  # edge x epoch
    for e in range(e_n):
        w = int(window[e]) + 1
        sums = np.convolve(load[e], np.ones(w, dtype=np.int64))[:k_n]
        if sums.max(initial=0) > cap[e] * w + 1e-6:
            raise RailplanError("schedule", f"edge {e} carries more than its capacity")
    if (held > k_max).any():
        c, r = (int(a[0]) for a in np.nonzero(held > k_max))
        raise RailplanError("schedule", f"rank {r} never receives chunk {c}")
