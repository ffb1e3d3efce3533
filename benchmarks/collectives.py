"""Collective validations beside their goals, and rail-only vs rail-optimized per operation.

Run: python benchmarks/collectives.py
"""

from __future__ import annotations

from railplan.collective import algorithms as alg
from railplan.collective.bound import bound_s
from railplan.specs import Network, load_system


def main() -> None:
    h100 = load_system("dgx-h100")
    g8 = alg.group(h100, Network(architecture="rail-optimized"), 8)
    big = 8 * 2**30
    ring = alg.run(g8, "all-reduce", "ring", big).busbw_gb_per_s or 0.0
    nvls = alg.run(g8, "all-reduce", "nvls", big).busbw_gb_per_s or 0.0
    print("validation (8x H100 all-reduce, 8 GiB)      ours     goal (source)")
    print(f"  ring busbw GB/s                       {ring:7.1f}   365-370 (NVIDIA/nccl-tests#212)")
    print(f"  NVLS busbw GB/s                       {nvls:7.1f}   ~480 (NVIDIA/nccl-tests#212)")
    from railplan import collectives as coll

    y, d, bw = 8, 2**30, 50e9
    ratio = float(coll.in_network_all_reduce_s(y, d, bw, 0) / coll.ring_all_reduce_s(y, d, bw, 0))
    print(
        f"  seed 003: SHARP / ring bytes per link, N=8 {ratio:7.3f}   "
        f"{y / (2 * (y - 1)):.3f} = K / (2(N-1)/N K)"
    )
    print("  TE-CCL LP comparison                      not done (no LP synthesizer yet)")
    print()
    print("64 GPUs of DGX H100, 1 GiB: best algorithm and max-flow bound (us)")
    for op in alg.OPS:
        for arch in ("rail-optimized", "rail-only"):
            g = alg.group(h100, Network(architecture=arch), 64)
            times = {a: alg.time_s(g, op, a, 2**30)[0] for a in alg.ALGORITHMS}
            ok = {a: t for a, t in times.items() if t is not None}
            best = min(ok, key=lambda a: ok[a])
            b = bound_s(g, op, 2**30, arch)
            print(
                f"  {op:15s} {arch:15s} best {best:12s} {ok[best] * 1e6:9.1f}  "
                f"bound {b * 1e6:9.1f}  ratio {ok[best] / b:5.2f}"
            )


if __name__ == "__main__":
    main()
