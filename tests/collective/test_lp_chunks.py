"""Several all-gather chunks per rank (TE-CCL's num_chunks) in the LP (collective/lp.py): a
case by hand, the replay of multi-chunk schedules, the cut bound, and one chunk as before."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from railplan.collective import lp, lpsym
from railplan.collective.bound import graph_bound_s
from railplan.collective.lpbuild import Net, all_gather, network
from railplan.collective.optimal import best_all_gather
from railplan.errors import RailplanError

B = 10e9  # bytes/s
DOMAINS = [["0", "1"], ["2", "3"]]


def _two_domains(fast: float = 10.0, rail: float = 1.0) -> nx.DiGraph:
    """Ranks 0, 1 and 2, 3 joined by fast links (domains), 0-2 and 1-3 by slow ones (rails)."""
    g = nx.DiGraph()
    for u, v, c in (("0", "1", fast), ("2", "3", fast), ("0", "2", rail), ("1", "3", rail)):
        g.add_edge(u, v, capacity=c * B)
        g.add_edge(v, u, capacity=c * B)
    return g


def test_two_chunks_pipeline_the_rail_and_the_domain_hop() -> None:
    # 4 MB, 1 MB per rank. One chunk: it crosses the rail in one epoch of 100 us and the domain
    # in the next, 200 us. Two chunks of 0.5 MB, epochs of 50 us: each rail carries one half
    # per epoch, so rank 0 gets 2a and 2b over its rail in epochs 0 and 1 while 3a, 3b reach 1
    # and follow over the fast link one epoch later: 3 epochs, 150 us, and 2 are too few (the
    # last half crosses the rail in epoch 1 at the earliest, then the domain)
    ranks = ["0", "1", "2", "3"]
    one = lp.synthesize(_two_domains(), ranks, "all-gather", 4e6)
    assert (one.epochs, one.chunks, one.optimal) == (2, 1, True)
    assert one.time_s == pytest.approx(200e-6)
    two = lp.synthesize(_two_domains(), ranks, "all-gather", 4e6, chunks=2)
    assert (two.epochs, two.chunks, two.optimal) == (3, 2, True)
    assert two.epoch_s == pytest.approx(50e-6)
    assert two.time_s == pytest.approx(150e-6)
    assert two.delivered_bytes == pytest.approx(3 * 4e6)  # each rank gets the 3 MB it lacks
    # the domain rotation is an automorphism: symmetric two-chunk schedules find the same
    swap = {"0": "2", "2": "0", "1": "3", "3": "1"}
    sym = lp.synthesize(_two_domains(), ranks, "all-gather", 4e6, symmetry=swap, chunks=2)
    assert sym.epochs == 3


def test_best_all_gather_keeps_the_fastest_chunk_count() -> None:
    # four chunks: 5 epochs of 25 us (the rail carries a quarter per epoch, the last one
    # crosses the domain one epoch later); the cut bound: domain {0, 1} takes 2 MB over two
    # 10 GB/s rails, 100 us
    g = _two_domains()
    r = best_all_gather(g, ["0", "1", "2", "3"], 4e6)
    assert (r.chunks, r.epochs) == (4, 5)
    assert r.time_s == pytest.approx(125e-6)
    bound = graph_bound_s(g, ["0", "1", "2", "3"], "all-gather", 4e6, DOMAINS)
    assert bound == pytest.approx(100e-6)
    assert r.time_s >= bound
    # whole chunks: two ranks, a link of 1.5 chunks per epoch each way carries 1 whole, so the
    # 3 chunks a rank lacks take 3 epochs (2 if chunks could split)
    pair = nx.DiGraph()
    pair.add_edges_from([("a", "b"), ("b", "a")], capacity=1.5 * B)
    tau = (2e6 / 6) / B
    assert lp.whole_chunk_lower(pair, ["a", "b"], 2e6, tau, 3) == 3
    assert lp.synthesize(pair, ["a", "b"], "all-gather", 2e6, tau, chunks=3).epochs == 3


def _pair_net() -> Net:
    g = nx.DiGraph()
    g.add_edge("a", "b", capacity=B)
    g.add_edge("b", "a", capacity=B)
    return network(g, ["a", "b"], 1e6, 1e-4, "all-gather")  # one chunk per link and epoch


def _flows(net: Net, sends: list[tuple[int, str, str, int]], chunks: int = 2) -> np.ndarray:
    """f[c, e, k] for k = 0..2 from (chunk, tail, head, epoch); chunks 0, 1 are a's."""
    f = np.zeros((2 * chunks, len(net.tail), 3))
    node = {"a": 0, "b": 1}
    for c, u, v, k in sends:
        e = int(np.flatnonzero((net.tail == node[u]) & (net.head == node[v]))[0])
        f[c, e, k] += 1
    return f


def test_replay_checks_each_chunk() -> None:
    net = _pair_net()
    ok = [(0, "a", "b", 0), (1, "a", "b", 1), (2, "b", "a", 0), (3, "b", "a", 1)]
    lpsym.check_all_gather(_flows(net, ok), net, 2, 2, chunks=2)
    broken = {
        "never receives chunk 3": ok[:3],
        "capacity": [(0, "a", "b", 0), (1, "a", "b", 0), *ok[2:]],
        "sends chunk 3 it lacks": [*ok, (3, "a", "b", 0)],
    }
    for message, sends in broken.items():
        with pytest.raises(RailplanError, match=message):
            lpsym.check_all_gather(_flows(net, sends), net, 2, 2, chunks=2)
    with pytest.raises(RailplanError, match="5 chunks, not 2 ranks x 2"):
        lpsym.check_all_gather(np.zeros((5, len(net.tail), 3)), net, 2, 2, chunks=2)


def test_program_has_a_commodity_per_chunk() -> None:
    net = _pair_net()
    one, two = all_gather(net, 2, 2), all_gather(net, 2, 2, chunks=2)
    assert len(two.c) == 2 * len(one.c)
    assert two.b_eq.sum() == 2 * one.b_eq.sum()  # each rank starts with its two chunks


@pytest.mark.parametrize(
    "kwargs",
    [{"chunks": 0}, {"chunks": 1.5}, {"chunks": True}, {"chunks": 2, "op": "all-to-all"}],
)
def test_bad_chunk_counts(kwargs: dict[str, object]) -> None:
    op = str(kwargs.pop("op", "all-gather"))
    with pytest.raises(RailplanError, match="chunks"):
        lp.synthesize(_two_domains(), ["0", "1", "2", "3"], op, 4e6, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(RailplanError, match="chunks"):
        lp.synthesize(
            _two_domains(), ["0", "1", "2", "3"], "all-gather", 4e6, chunks=2, groups=[["0"]]
        )


@pytest.mark.parametrize(
    "graph",
    [_two_domains(), _two_domains(3.0, 2.0), nx.cycle_graph(5, create_using=nx.DiGraph)],
)
def test_one_chunk_is_the_program_before(graph: nx.DiGraph) -> None:
    # chunks=1 is the default: the same schedule, epochs and flag as a call without it
    for u, v in graph.edges:
        graph.edges[u, v].setdefault("capacity", B)
    ranks = [str(v) for v in graph.nodes]
    g = nx.relabel_nodes(graph, str)
    a = lp.synthesize(g, ranks, "all-gather", 1e6)
    b = lp.synthesize(g, ranks, "all-gather", 1e6, chunks=1)
    assert (a.epochs, a.epoch_s, a.optimal, a.chunks) == (b.epochs, b.epoch_s, b.optimal, 1)
    assert a.delivered_bytes == b.delivered_bytes


@settings(max_examples=15, deadline=None)
@given(
    fast=st.sampled_from([1.0, 2.5, 10.0]),
    rail=st.sampled_from([0.5, 1.0, 3.0]),
    latency=st.sampled_from([0.0, 2e-6, 3e-5]),
    size=st.sampled_from([1e4, 1e6, 1e8]),
    chunks=st.integers(1, 4),
)
def test_chunked_schedules_never_beat_the_cut_bound(
    fast: float, rail: float, latency: float, size: float, chunks: int
) -> None:
    g = _two_domains(fast, rail)
    for u, v in g.edges:
        g.edges[u, v]["latency_s"] = latency
    ranks = ["0", "1", "2", "3"]
    r = lp.synthesize(g, ranks, "all-gather", size, chunks=chunks, budget_s=10.0)
    assert r.time_s >= graph_bound_s(g, ranks, "all-gather", size, DOMAINS) * (1 - 1e-9)
    assert r.delivered_bytes >= (len(ranks) - 1) * size * (1 - 1e-9)
    assert r.epochs >= r.epochs_lower
    # the bound optimal.py prunes with (whole chunks per link and epoch) never exceeds a schedule
    assert r.epochs >= lp.whole_chunk_lower(g, ranks, size, r.epoch_s, chunks)
