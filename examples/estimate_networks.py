"""Estimate one training iteration of a fixed strategy on rail-optimized, rail-only and ideal.

python examples/estimate_networks.py
"""

from __future__ import annotations

from railplan import Network, Strategy, estimate, load_model, load_system


def main() -> None:
    model = load_model("gpt-175b")
    system = load_system("dgx-a100")
    strategy = Strategy(
        tp=8,
        pp=8,
        dp=1,
        interleave=3,
        micro_batch=1,
        global_batch=64,
        recompute="selective",
        sequence_parallel=True,
    )
    base = None
    for arch in ("rail-optimized", "rail-only", "ideal"):
        e = estimate(model, system, strategy, Network(architecture=arch))
        base = base or e.iteration_s
        overhead = max((k for k in e.breakdown_s if k != "compute"), key=e.breakdown_s.__getitem__)
        print(
            f"{arch:15s} {e.iteration_s:7.3f} s  MFU {e.mfu:5.1%}  "
            f"vs rail-optimized {e.iteration_s / base - 1:+6.1%}  "
            f"largest overhead: {overhead}"
        )


if __name__ == "__main__":
    main()
