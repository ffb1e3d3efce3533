"""The two chassis TE-CCL's published schedules use, as its repository defines them.

Source: github.com/microsoft/TE-CCL, teccl/topologies/dgx2.py and ndv2.py (2 chassis). Capacities
there are GB/s divided by the chunk size in GB (TE-CCL's sizes are decimal: "1KB" = 1e-6 GB), so
here they are 10^9 bytes/s; latencies (TE-CCL's α) in seconds.

* DGX-2: per chassis 16 GPUs and one NVSwitch node; each GPU–switch link 125 GB/s each way,
  α 0.35 µs. Between two chassis, GPU 2j+1 of one links to GPU 2j of the other (8 links each
  way, TE-CCL's `taccl` map) at 12.5 GB/s, α 2.6 µs.
* NDv2 (Azure, 8× V100 per chassis): NVLink hybrid cube-mesh from TE-CCL's capacity matrix,
  50 GB/s for a 23 µs/MB entry and 25 GB/s for 46 µs/MB, α 0.7 µs; for two chassis the
  InfiniBand path is two direct links, GPU 0 → GPU 9 and GPU 8 → GPU 1 (its entries of 107 after
  the matrix is transposed), 12.5 GB/s, α 1.3 µs; for more chassis, one switch node that GPU 0
  of every chassis sends to and GPU 1 of every chassis receives from.
"""

from __future__ import annotations

import networkx as nx

DGX2_NVLINK_BYTES_PER_S = 125e9
DGX2_NVLINK_LATENCY_S = 0.35e-6
DGX2_IB_BYTES_PER_S = 12.5e9
DGX2_IB_LATENCY_S = 2.6e-6
NDV2_FAST_BYTES_PER_S = 50e9  # TE-CCL's "23" entries
NDV2_SLOW_BYTES_PER_S = 25e9  # its "46" entries
NDV2_NVLINK_LATENCY_S = 0.7e-6
NDV2_IB_BYTES_PER_S = 12.5e9  # its "107" entries
NDV2_IB_LATENCY_S = 1.3e-6

#: one NDv2 chassis: NVLink entries of TE-CCL's matrix (0 none, 23 → 50 GB/s, 46 → 25 GB/s)
NDV2_MATRIX: tuple[tuple[int, ...], ...] = (
    (0, 23, 46, 46, 23, 0, 0, 0),
    (23, 0, 46, 23, 0, 46, 0, 0),
    (46, 46, 0, 23, 0, 0, 23, 0),
    (46, 23, 23, 0, 0, 0, 0, 46),
    (23, 0, 0, 0, 0, 23, 46, 46),
    (0, 46, 0, 0, 23, 0, 46, 23),
    (0, 0, 23, 0, 46, 46, 0, 23),
    (0, 0, 0, 46, 46, 23, 23, 0),
)


def _link(g: nx.DiGraph, a: str, b: str, bytes_per_s: float, latency_s: float) -> None:
    g.add_edge(a, b, capacity=bytes_per_s, latency_s=latency_s)


def dgx2(chassis: int = 2) -> tuple[nx.DiGraph, list[str]]:
    """TE-CCL's DGX-2 pair: (graph, ranks)."""
    g = nx.DiGraph()
    ranks = [f"gpu:{c}:{i}" for c in range(chassis) for i in range(16)]
    for c in range(chassis):
        for i in range(16):
            for a, b in ((f"gpu:{c}:{i}", f"nvswitch:{c}"), (f"nvswitch:{c}", f"gpu:{c}:{i}")):
                _link(g, a, b, DGX2_NVLINK_BYTES_PER_S, DGX2_NVLINK_LATENCY_S)
    for c in range(chassis):
        for d in range(chassis):
            if c != d:
                for j in range(8):
                    _link(
                        g,
                        f"gpu:{c}:{2 * j + 1}",
                        f"gpu:{d}:{2 * j}",
                        DGX2_IB_BYTES_PER_S,
                        DGX2_IB_LATENCY_S,
                    )
    return g, ranks


def ndv2(chassis: int = 2) -> tuple[nx.DiGraph, list[str]]:
    """TE-CCL's NDv2 chassis (ranks 0..8·chassis-1 in its numbering): (graph, ranks). Two
    chassis link GPU 0 → GPU 9 and GPU 8 → GPU 1 directly; more go through one switch node
    that GPU 0 of every chassis sends to and GPU 1 of every chassis receives from (its
    matrix, transposed as TE-CCL does)."""
    g = nx.DiGraph()
    ranks = [f"gpu:{i}" for i in range(8 * chassis)]
    rate = {23: NDV2_FAST_BYTES_PER_S, 46: NDV2_SLOW_BYTES_PER_S}
    for c in range(chassis):
        for i, row in enumerate(NDV2_MATRIX):
            for j, entry in enumerate(row):
                if entry:
                    _link(g, ranks[8 * c + i], ranks[8 * c + j], rate[entry], NDV2_NVLINK_LATENCY_S)
    if chassis == 2:
        _link(g, ranks[0], ranks[9], NDV2_IB_BYTES_PER_S, NDV2_IB_LATENCY_S)
        _link(g, ranks[8], ranks[1], NDV2_IB_BYTES_PER_S, NDV2_IB_LATENCY_S)
    elif chassis > 2:
        for c in range(chassis):
            _link(g, ranks[8 * c], "ibswitch", NDV2_IB_BYTES_PER_S, NDV2_IB_LATENCY_S)
            _link(g, "ibswitch", ranks[8 * c + 1], NDV2_IB_BYTES_PER_S, NDV2_IB_LATENCY_S)
    return g, ranks


def groups(ranks: list[str], chassis: int) -> list[list[str]]:
    """The ranks of each chassis (ranks as `dgx2` and `ndv2` list them)."""
    per = len(ranks) // chassis
    return [ranks[c * per : (c + 1) * per] for c in range(chassis)]


def rotation(ranks: list[str], chassis: int) -> dict[str, str]:
    """Every chassis to the next, an automorphism of `dgx2(chassis)` and `ndv2(chassis)`
    (rank i to rank i + ranks per chassis, NVSwitch c to c + 1; the IB switch stays)."""
    n = len(ranks)
    sigma = {r: ranks[(i + n // chassis) % n] for i, r in enumerate(ranks)}
    sigma.update({f"nvswitch:{c}": f"nvswitch:{(c + 1) % chassis}" for c in range(chassis)})
    return sigma
