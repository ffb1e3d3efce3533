"""A hierarchical all-gather for chassis joined through one switch (TE-CCL's NDv2 beyond two
chassis): the inter-chassis exchange is fixed by a round-robin construction, and the integer
program (lp.py) then only decides the spread inside the chassis, on the full time-expanded
graph.

The shape (`exchange`): m groups of ranks (chassis) whose only links to other groups are one
link from a rank of each group to a switch node and one from the switch to a rank of each
group, each at least one chunk per epoch. Every chunk of a group must cross the switch into
each of the m − 1 other groups, so the exchange is a list of sends (`_sends`): in epoch k each
group sends chunks of its own that its egress rank can hold by then (by `dist`) to the groups
r + 1 ahead of it, r = 0..m−2 taken in turn; at most as many distinct chunks as its link to the
switch takes whole per epoch (the switch copies one chunk to several groups) and as many sends
as a group's link from the switch takes. Every group sends the same classes in the same epoch,
so no group receives more than its link takes; an epoch in which no chunk is yet available
(latency-bound sizes) is left empty. The construction is the same in every group, so it is
invariant under rotating the groups (lpsym's symmetry). `Exchange.epochs_min` (last arrival
plus the spread to the farthest rank of its group) is where lp.py starts to search.

What this fixes is a restriction: a program infeasible under it proves nothing about the full
program (lp.py reports such counts as "excluded", never as proven too few). TE-CCL itself
solves the whole program with Gurobi (its partitioned/A* variants split by time instead).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from railplan.collective.lpbuild import flow_column, grid

IntArr = NDArray[np.int64]


@dataclass(frozen=True)
class Exchange:
    """The fixed inter-chassis sends: epoch, commodity, egress edge and ingress edge of each."""

    epoch: IntArr
    chunk: IntArr
    out_edge: IntArr  # rank -> switch
    in_edge: IntArr  # switch -> rank of the receiving group
    switch_edges: IntArr  # every edge at the switch (their other flows are fixed at 0)
    epochs_min: int  # no program keeping these sends ends sooner (the last arrival's spread)


def _switch_links(
    tail: IntArr, head: IntArr, group_of: IntArr, n: int, m: int
) -> tuple[IntArr, IntArr, IntArr] | None:
    """(edge to the switch, edge from it) per group and the switch's edges, or None when the
    graph does not have the shape of the module's docstring."""
    cross = (tail < n) & (head < n) & (group_of[tail] != group_of[head])
    if cross.any() or (group_of[:n] < 0).any():
        return None
    for w in np.unique(np.concatenate([tail[tail >= n], head[head >= n]])):
        outs, ins = np.flatnonzero(head == w), np.flatnonzero(tail == w)
        at = np.concatenate([outs, ins])
        if len(outs) != m or len(ins) != m or len(at) != int(((tail >= n) | (head >= n)).sum()):
            return None
        g_out, g_in = group_of[tail[outs]], group_of[head[ins]]
        if sorted(g_out.tolist()) != list(range(m)) or sorted(g_in.tolist()) != list(range(m)):
            return None
        return outs[np.argsort(g_out)], ins[np.argsort(g_in)], at
    return None


def _sends(ready: list[float], classes: int, slots: tuple[int, int]) -> list[tuple[int, int, int]]:
    """(epoch, chunk, class) for one group: each chunk (available from epoch `ready`) to each
    class once; per epoch at most slots[0] distinct chunks (the link to the switch, which
    copies) and slots[1] sends (the receiving group's link), classes taken in turn."""
    todo = {r: list(range(len(ready))) for r in range(classes)}
    out: list[tuple[int, int, int]] = []
    k = turn = 0
    while any(todo.values()):
        chosen: set[int] = set()
        sends = 0
        for r in [(turn + i) % classes for i in range(classes)]:
            for j in [j for j in todo[r] if ready[j] <= k]:
                if sends == slots[1] or (j not in chosen and len(chosen) == slots[0]):
                    continue
                todo[r].remove(j)
                chosen.add(j)
                out.append((k, j, r))
                sends, turn = sends + 1, r + 1
        k += 1
    return out


def exchange(
    tail: IntArr,
    head: IntArr,
    cap: NDArray[np.float64],
    arr: IntArr,
    dist: NDArray[np.float64],
    groups: list[list[int]],
    n: int,
) -> Exchange | None:
    """The round-robin exchange of the module's docstring, or None if the shape differs."""
    m = len(groups)
    group_of = np.full(int(max(tail.max(), head.max())) + 1, -1, dtype=np.int64)
    for g, members in enumerate(groups):
        group_of[members] = g
    links = _switch_links(tail, head, group_of, n, m)
    if m < 2 or links is None or cap[links[2]].min() < 1:
        return None
    out_e, in_e, at = links
    slots = (int(cap[out_e].min()), int(cap[in_e].min()))
    rows: list[tuple[int, int, int, int]] = []
    for g, members in enumerate(groups):
        ready = [float(dist[c, tail[out_e[g]]]) for c in members]
        for k, j, r in _sends(ready, m - 1, slots):
            rows.append((k, members[j], g, (g + 1 + r) % m))
    ep, ch, src, dst = (np.array(col, dtype=np.int64) for col in zip(*rows, strict=True))
    # a chunk lands at the receiving rank, then must still reach its group's farthest rank
    spread = [float(dist[head[in_e[g]], members].max()) for g, members in enumerate(groups)]
    land = ep + arr[out_e[src]] + arr[in_e[dst]] + np.array(spread)[dst]
    return Exchange(ep, ch, out_e[src], in_e[dst], at, int(land.max()))


def fix(
    ex: Exchange,
    arr: IntArr,
    bounds: tuple[NDArray[np.float64], NDArray[np.float64]],
    n: int,
    n_edges: int,
    kf: int,
) -> bool:
    """Fix the switch's flows f[c, e, k] (column (c·E + e)·K + k, K = `kf`) in `bounds`
    (lo, hi, changed in place): 1 on the exchange's sends, 0 elsewhere. False if a send does
    not fit in the time-expanded program (its flow is already fixed at 0)."""
    lo, hi = bounds
    fwd = ex.epoch + arr[ex.out_edge]  # the switch forwards what arrives in the same epoch
    if (fwd >= kf).any():
        return False
    need = np.concatenate(
        [
            flow_column(ex.chunk, ex.out_edge, ex.epoch, n_edges, kf),
            flow_column(ex.chunk, ex.in_edge, fwd, n_edges, kf),
        ]
    )
    if (hi[need] < 1).any():
        return False
    c, e, k = grid(n, len(ex.switch_edges), kf)
    hi[flow_column(c, ex.switch_edges[e], k, n_edges, kf)] = 0.0
    lo[need] = hi[need] = 1.0
    return True
