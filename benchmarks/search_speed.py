"""Strategy-search speed: valid configurations evaluated per second on one core.

Goal (issue 5): ≥ 300,000 configurations per second (Calculon: ~350 per core). Times whole
searches (enumeration, evaluation through `iteration`, best/top/Pareto). Run:
    python benchmarks/search_speed.py
"""

from __future__ import annotations

import os
import time

from railplan.explore.search import SearchSpace, search
from railplan.specs import Job, Network, System, load_model, load_system

GOAL_PER_S = 300_000
CASES = (  # model, system, K, network, GPUs, global batch
    ("gpt-175b", "dgx-a100", 8, "rail-optimized", 3072, 3072),
    ("gpt-1t", "dgx-gh200", 8, "rail-only", 16384, 4096),
    ("gpt-146b", "dgx-gh200", 256, "rail-only", 4096, 6144),
    ("llama-3-70b", "dgx-h100", 8, "rail-only", 1536, 1536),
    # an MoE model with leading dense layers and an MTP layer: each stage's own MoE layers
    ("deepseek-v3", "hgx-h800", 8, "rail-optimized", 2048, 15360),
)


def main() -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    total_n, total_s = 0, 0.0
    for name, sys_name, k, arch, gpus, batch in CASES:
        model = load_model(name)
        system = System.parse(load_system(sys_name).model_dump() | {"hb_domain": k}, "system")
        net = Network(architecture=arch)
        search(Job(model, system, net, gpus, batch), SearchSpace())  # warm-up
        t0 = time.perf_counter()
        r = search(Job(model, system, net, gpus, batch), SearchSpace())
        dt = time.perf_counter() - t0
        total_n += r.configurations_evaluated
        total_s += dt
        print(
            f"{name:>12} {gpus:>6} GPUs K={k:<3} {arch:<14} {r.configurations_evaluated:>8,} "
            f"configs in {dt * 1e3:7.1f} ms: {r.configurations_evaluated / dt:>10,.0f}/s"
        )
    rate = total_n / total_s
    print(
        f"measured {rate:,.0f} configurations per second on one core "
        f"(goal ≥ {GOAL_PER_S:,}): {'met' if rate >= GOAL_PER_S else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
