"""Switches, transceivers, dollars and watts of rail-optimized vs rail-only (paper Table II).

python examples/cost_comparison.py
"""

from __future__ import annotations

from railplan.network.cost import compare
from railplan.network.topology import Cluster


def main() -> None:
    print(
        f"{'GPUs':>7} {'K':>4} {'radix':>5} {'switches':>13} {'transceivers':>17} "
        f"{'cost (M$)':>15} {'saving':>7}"
    )
    for gpus, k, radix in ((4096, 8, 64), (32768, 256, 64), (32768, 256, 128)):
        c = compare(Cluster(gpus, k, radix))
        a, b = c.rail_optimized, c.rail_only
        ca, cb = c.rail_optimized_cost.cost_usd / 1e6, c.rail_only_cost.cost_usd / 1e6
        print(
            f"{gpus:7,} {k:4} {radix:5} {a.switches:6,} →{b.switches:6,} "
            f"{a.transceivers:8,} →{b.transceivers:8,} {ca:6.1f} →{cb:6.1f} "
            f"{c.savings_cost or 0:7.1%}"
        )


if __name__ == "__main__":
    main()
