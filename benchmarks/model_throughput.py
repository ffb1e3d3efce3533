"""Speed of the vectorized model: strategies evaluated per second on one core.

Goal (search issue): ≥ 300,000 configurations per second. Run: python benchmarks/model_throughput.py
"""

from __future__ import annotations

import time

import numpy as np

from railplan.perf.iteration import iteration
from railplan.specs import Network, load_model, load_system
from railplan.specs.arrays import StrategyArrays, valid_mask

GOAL_PER_S = 300_000


def random_strategies(n: int, gpus: int, seed: int = 0) -> StrategyArrays:
    rng = np.random.default_rng(seed)
    tp = 2 ** rng.integers(0, 4, n)
    pp = 2 ** rng.integers(0, 6, n)
    dp = np.maximum(gpus // (tp * pp), 1)
    return StrategyArrays(
        tp=tp,
        pp=pp,
        dp=dp,
        interleave=rng.integers(1, 3, n),
        micro_batch=2 ** rng.integers(0, 3, n),
        global_batch=np.full(n, 4096),
        recompute=rng.integers(0, 3, n),
        sequence_parallel=rng.integers(0, 2, n),
        zero=rng.integers(0, 2, n),
        overlap_dp=np.ones(n, dtype=np.int64),
        grad_reduce_bytes=np.full(n, 4),
    )


def main() -> None:
    model, system = load_model("gpt-1t"), load_system("dgx-gh200")
    s = random_strategies(200_000, 16384)
    iteration(model, system, Network(), s.take(np.arange(1000)))  # warm-up
    t0 = time.perf_counter()
    it = iteration(model, system, Network(), s)
    valid_mask(model, s)
    dt = time.perf_counter() - t0
    rate = len(s) / dt
    print(
        f"evaluated {len(s):,} strategies in {dt:.3f} s: {rate:,.0f} per second "
        f"(goal ≥ {GOAL_PER_S:,}); finite: {bool(np.isfinite(it.iteration_s).all())}"
    )


if __name__ == "__main__":
    main()
