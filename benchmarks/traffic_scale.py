"""Traffic matrix of 65,536 GPUs: time and peak memory beside the goal (< 10 s, < 2 GB).

Run by hand (not a timed test):  python benchmarks/traffic_scale.py
Measures placement + traffic + statistics for GPT-1T on 65,536 GPUs, K = 8 (DGX H100, TP8 PP64
DP128, Megatron placement) and K = 256 (DGX GH200, TP8 PP8 DP1024: hierarchical DP groups).
Peak memory is the process's peak resident set size (ru_maxrss), which includes the Python
interpreter and imported libraries.
"""

from __future__ import annotations

import resource
import sys
import time

GOAL_S = 10.0
GOAL_BYTES = 2 * 1024**3


def peak_rss_bytes() -> int:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)


def main() -> None:
    from railplan.specs import Strategy, load_model
    from railplan.traffic.matrix import stats, traffic
    from railplan.traffic.placement import place

    model = load_model("gpt-1t")
    cases = [
        ("K=8   TP8 PP64 DP128", 8, Strategy(tp=8, pp=64, dp=128, global_batch=4096)),
        ("K=256 TP8 PP8 DP1024", 256, Strategy(tp=8, pp=8, dp=1024, global_batch=4096)),
    ]
    worst_s = 0.0
    for label, k, s in cases:
        t0 = time.perf_counter()
        t = traffic(model, s, place(s.tp, s.pp, s.dp, k))
        r = stats(t)
        dt = time.perf_counter() - t0
        worst_s = max(worst_s, dt)
        print(
            f"{label}: {r.gpus:,} GPUs, {len(t):,} (src, dst, kind) entries, "
            f"{r.pairs_with_traffic:,} pairs with traffic: {dt:.2f} s (goal < {GOAL_S:g} s)"
        )
    peak = peak_rss_bytes()
    print(
        f"peak resident memory {peak / 1024**2:.0f} MiB (goal < {GOAL_BYTES / 1024**2:.0f} MiB); "
        f"slowest case {worst_s:.2f} s: "
        + ("within goal" if worst_s < GOAL_S and peak < GOAL_BYTES else "OVER GOAL")
    )


if __name__ == "__main__":
    main()
