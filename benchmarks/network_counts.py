"""Throughput of the network counts and graph builder (run by hand; not part of the tests).

python benchmarks/network_counts.py
"""

from __future__ import annotations

import time

from railplan.network.cost import compare
from railplan.network.graph import build_graph
from railplan.network.topology import Cluster, rail_only, rail_optimized


def main() -> None:
    t0 = time.perf_counter()
    n = 0
    for gpus in (2**i for i in range(8, 24)):
        for radix in (32, 64, 128, 256):
            compare(Cluster(gpus, 256, radix))
            n += 1
    dt = time.perf_counter() - t0
    print(f"compare(): {n} clusters in {dt * 1e3:.1f} ms ({dt / n * 1e6:.0f} µs each)")
    for gpus in (1024, 4096, 8192):
        for f in (rail_optimized, rail_only):
            t0 = time.perf_counter()
            g = build_graph(f(Cluster(gpus, 8, 64)))
            dt = time.perf_counter() - t0
            print(
                f"build_graph({f.__name__}, {gpus} GPUs): {g.number_of_nodes()} nodes, "
                f"{g.number_of_edges()} edges in {dt:.2f} s"
            )


if __name__ == "__main__":
    main()
