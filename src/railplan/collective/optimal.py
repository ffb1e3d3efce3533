"""The LP schedule (`lp.synthesize`) on the railplan-built topology, as one more algorithm of
`railplan collective` (`--algorithm optimal`)."""

from __future__ import annotations

import math
import time
from dataclasses import replace

import networkx as nx

from railplan.collective.algorithms import Built, Group, Result, checked
from railplan.collective.lp import (
    MAX_RANKS,
    SEARCH_BUDGET_S,
    SOLVE_LIMIT_S,
    LPResult,
    epoch_s,
    slowest_epoch_bound,
    synthesize,
    whole_chunk_lower,
)
from railplan.errors import RailplanError

#: all-to-all on a built graph: the epoch is the slowest-link one × its epoch bound / this
#: (slowest-link epochs can leave only a handful, each rounding the finish up by a whole one)
A2A_EPOCHS = 8
#: all-gather chunks per rank tried on a built graph (TE-CCL's num_chunks), fewest first
CHUNK_CHOICES: tuple[int, ...] = (1, 2, 4)
#: seconds the tries beyond one chunk at slowest-link epochs may take in all (16 GPUs need about
#: one; at 32 they found nothing better in any share, so they must not hold a command for long)
EXTRA_TRIES_S = 10.0
#: networks whose built graph the LP runs on (bound.topology)
LP_ARCHS: tuple[str, ...] = (
    "rail-optimized",
    "rail-only",
    "multi-plane",
    "oversubscribed",
    "ideal",
)


def built_graph(g: Group, built: Built) -> tuple[nx.DiGraph, list[str]]:
    """The railplan-built topology of `bound.topology` with latencies: the system's HB latency
    on GPU→HB-domain arcs and its NIC latency on GPU→NIC arcs (once per network crossing)."""
    from railplan.collective.bound import topology

    dg = topology(g, built)
    for a, b, data in dg.edges(data=True):
        if a.startswith("gpu:"):
            data["latency_s"] = g.links.hb_lat_s if b.startswith("hb:") else g.links.nic_lat_s
    ranks = [f"gpu:{d}:{i}" for d in range(g.y) for i in range(g.x)]
    return dg, ranks


def _epochs(dg: nx.DiGraph, chunk: float) -> list[float]:
    """Epochs tried for `chunk`: the slowest link's (TE-CCL's), and that one stretched until the
    fastest link carries a whole number of chunks per epoch (whole chunks on a link of 7.85
    chunks per epoch carry 7; stretched 2 %, 8), when it differs."""
    slow = epoch_s(dg, chunk, "slow")
    fast = max(float(c) for _, _, c in dg.edges(data="capacity"))
    whole = max(slow, chunk * math.ceil(fast * slow / chunk - 1e-9) / fast)
    return [slow] if whole <= slow * (1 + 1e-9) else [slow, whole]


def best_all_gather(dg: nx.DiGraph, ranks: list[str], size_bytes: float) -> LPResult:
    """The fastest all-gather schedule over `CHUNK_CHOICES` chunks per rank and `_epochs`,
    within about `SEARCH_BUDGET_S` in all: one chunk at slowest-link epochs first (the schedule
    TE-CCL and earlier railplan give, with the whole budget), then the others within
    `EXTRA_TRIES_S`, most promising first by their bound (`whole_chunk_lower`), each in half an
    equal share of what is left (a
    search may overrun its budget by a solve). More chunks are tried only while the epoch
    shrinks with the chunk (not at the latency floor), with at most `MAX_RANKS` chunks in all
    (a program the size of 64 ranks' one: more overran their budget several times at 32 ranks
    × 4), and while their bound is below the schedule kept; a try that finds no schedule in its
    share is skipped."""
    start = time.perf_counter()
    n = len(ranks)
    floor = epoch_s(dg, 0.0, "slow")  # the latency floor of an epoch
    slow = epoch_s(dg, size_bytes / n, "slow")
    best = synthesize(dg, ranks, "all-gather", size_bytes, slow)
    tries = sorted(
        (whole_chunk_lower(dg, ranks, size_bytes, tau, k) * tau, k, tau)
        for k in CHUNK_CHOICES
        if k == 1 or (n * k <= MAX_RANKS and epoch_s(dg, size_bytes / (n * k), "slow") > floor)
        for tau in _epochs(dg, size_bytes / (n * k))
        if (k, tau) != (1, slow)
    )
    tries = [t for t in tries if t[0] < best.time_s * (1 - 1e-9)]
    now = time.perf_counter()
    deadline = now + min(SEARCH_BUDGET_S - (now - start), EXTRA_TRIES_S)
    for i, (lower_s, k, tau) in enumerate(tries):
        share = (deadline - time.perf_counter()) / (len(tries) - i)
        if share < 1.0:
            break
        if lower_s >= best.time_s * (1 - 1e-9):
            continue  # cannot beat the schedule kept
        try:
            r = synthesize(
                dg,
                ranks,
                "all-gather",
                size_bytes,
                tau,
                time_limit_s=min(SOLVE_LIMIT_S, share / 2),
                budget_s=share / 2,
                chunks=k,
            )
        except RailplanError:
            continue
        if r.time_s < best.time_s * (1 - 1e-9):
            best = r
    return replace(best, solve_s=time.perf_counter() - start)


def optimal(g: Group, op: str, size_bytes: float, built: Built) -> Result:
    """The synthesized schedule on the railplan-built topology, as an algorithm's `Result`.
    All-gather and all-to-all are solved directly; reduce-scatter is all-gather on the reversed
    graph (the same schedule run backwards, reducing where it copied); all-reduce is that
    reduce-scatter followed by the all-gather (the best such pair, not a proven optimum)."""
    size_bytes = checked(op, size_bytes)
    if built.arch not in LP_ARCHS:
        raise RailplanError(
            "network", f"the LP schedule runs on {', '.join(LP_ARCHS)}; got {built.arch!r}"
        )
    # whole chunks on the multi-plane graph would each take one port at 1/planes of the rate
    dg, ranks = built_graph(g, built.one_plane())
    if op == "all-to-all":  # flows split freely: finer epochs than the slowest link's
        tau, lower = slowest_epoch_bound(dg, ranks, op, size_bytes)
        try:
            r = synthesize(dg, ranks, op, size_bytes, tau * min(1.0, lower / A2A_EPOCHS))
        except RailplanError:  # too large for fine epochs in the time: the slowest link's
            r = synthesize(dg, ranks, op, size_bytes, "slow")
    else:
        graph = dg if op == "all-gather" else dg.reverse(copy=True)
        r = best_all_gather(graph, ranks, size_bytes)
    t = 2 * r.time_s if op == "all-reduce" else r.time_s
    chunks = f"{r.chunks} chunks per rank, " if r.chunks > 1 else ""
    proof = "optimal" if r.optimal else f"not proven below {r.epochs_lower}"
    how = {
        "all-reduce": "reduce-scatter + all-gather, each ",
        "reduce-scatter": "all-gather reversed, ",
    }.get(op, "")
    note = (
        f"TE-CCL LP on the built graph: {how}{chunks}{r.epochs} epochs of "
        f"{r.epoch_s * 1e6:.3g} us ({proof}); solved in {r.solve_s:.1f} s"
    )
    return Result.timed("optimal", op, g, size_bytes, t, note)
