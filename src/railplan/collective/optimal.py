"""The LP schedule (`lp.synthesize`) on the railplan-built topology, as one more algorithm of
`railplan collective` (`--algorithm optimal`)."""

from __future__ import annotations

import networkx as nx

from railplan.collective.algorithms import Built, Group, Result, checked
from railplan.collective.lp import slowest_epoch_bound, synthesize
from railplan.errors import RailplanError

#: all-to-all on a built graph: the epoch is the slowest-link one × its epoch bound / this
#: (slowest-link epochs can leave only a handful, each rounding the finish up by a whole one)
A2A_EPOCHS = 8
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
    if built.arch == "multi-plane":
        # a schedule of one plane at planes × the port rate runs split evenly over the planes
        # (each chunk in `planes` parts, one per plane) in the same time; whole chunks on the
        # multi-plane graph would each take one port at 1/planes of the rate
        built = Built("rail-optimized", built.radix, built.nic_gbps * built.planes)
    dg, ranks = built_graph(g, built)
    if op == "all-to-all":  # flows split freely: finer epochs than the slowest link's
        tau, lower = slowest_epoch_bound(dg, ranks, op, size_bytes)
        try:
            r = synthesize(dg, ranks, op, size_bytes, tau * min(1.0, lower / A2A_EPOCHS))
        except RailplanError:  # too large for fine epochs in the time: the slowest link's
            r = synthesize(dg, ranks, op, size_bytes, "slow")
    else:
        graph = dg if op == "all-gather" else dg.reverse(copy=True)
        r = synthesize(graph, ranks, "all-gather", size_bytes)
    t = 2 * r.time_s if op == "all-reduce" else r.time_s
    proof = "optimal" if r.optimal else f"not proven below {r.epochs_lower}"
    how = {
        "all-reduce": "reduce-scatter + all-gather, each ",
        "reduce-scatter": "all-gather reversed, ",
    }.get(op, "")
    note = (
        f"TE-CCL LP on the built graph: {how}{r.epochs} epochs of "
        f"{r.epoch_s * 1e6:.3g} us ({proof}); solved in {r.solve_s:.1f} s"
    )
    return Result.timed("optimal", op, g, size_bytes, t, note)
