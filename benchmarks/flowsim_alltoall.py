"""Benchmark: 4,096-GPU uniform all-to-all (DGX H100, K=8, radix 64) on rail-optimized
(direct, 16.8M GPU pairs) and rail-only (forwarding), aggregated classes. Goal: < 30 s each on
2 cores. Prints measured time beside the goal and the agreement with SYSTEM.md formula 3."""

from __future__ import annotations

import time

from railplan.network.flowsim import run

GOAL_S = 30.0


def main() -> None:
    for arch in ("rail-optimized", "rail-only"):
        t0 = time.perf_counter()
        rep = run("dgx-h100", 4096, arch, "alltoall", pair_bytes=2**20, radix=64)
        wall = time.perf_counter() - t0
        err = rep.relative_error if rep.relative_error is not None else float("nan")
        print(
            f"{arch:15s} flows {rep.flows:>11,} classes {rep.classes:>7,} links {rep.links:>6,}"
            f"  simulated {rep.simulated_s * 1e3:8.3f} ms  closed form "
            f"{(rep.closed_form_s or 0) * 1e3:8.3f} ms  error {100 * err:+.4f}%"
            f"  wall {wall:6.2f} s (goal < {GOAL_S:.0f} s: {'met' if wall < GOAL_S else 'MISSED'})"
        )


if __name__ == "__main__":
    main()
