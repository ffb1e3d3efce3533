"""Wall time of the whole evaluation reproduction (Figs 7-10 and the NIC-count experiment).

Goal (issue 5): under 60 s on 2 cores. The figures run in 2 processes. Run:
    python benchmarks/reproduce_evaluation.py
"""

from __future__ import annotations

import time
from concurrent.futures import ProcessPoolExecutor

from railplan.reproduce import evaluation as ev

GOAL_S = 60.0


def _one(name: str) -> tuple[str, float, int]:
    t0 = time.perf_counter()
    r = ev.run(name)
    return name, time.perf_counter() - t0, len(r["points"])


def main() -> None:
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(_one, ev.FIGURES))
    total = time.perf_counter() - t0
    for name, dt, n in results:
        print(f"{name:>10}: {n:3d} points in {dt:6.2f} s")
    print(
        f"measured {total:.1f} s for the whole reproduction on 2 processes "
        f"(goal < {GOAL_S:.0f} s): {'met' if total < GOAL_S else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
