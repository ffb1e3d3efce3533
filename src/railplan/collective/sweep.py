"""Size sweep of one collective by every algorithm, and its plot (time and busbw vs size, as
nccl-tests prints them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from railplan.collective import algorithms as alg
from railplan.errors import RailplanError
from railplan.fileio import atomic_write


def sweep(
    g: alg.Group, op: str, sizes: list[float], algorithms: tuple[str, ...] = alg.ALGORITHMS
) -> list[dict[str, Any]]:
    """One row per size: each algorithm's result (`algorithms.run`)."""
    return [
        {"bytes": size, "algorithms": [alg.run(g, op, a, size).to_dict() for a in algorithms]}
        for size in sizes
    ]


def plot(rows: list[dict[str, Any]], out: str | Path, title: str) -> Path:
    """Two panels (time in µs, busbw in GB/s vs bytes, log axes) to `out` (.png/.svg/.pdf)."""
    p = Path(out)
    if p.suffix not in (".png", ".svg", ".pdf"):
        raise RailplanError("plot", f"{p.name!r}: use a .png, .svg or .pdf file name")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_b) = plt.subplots(1, 2, figsize=(11, 4.2))
    for a in alg.ALGORITHMS:
        pts = [
            (row["bytes"], r["time_s"], r["busbw_gb_per_s"])
            for row in rows
            for r in row["algorithms"]
            if r["algorithm"] == a and r["time_s"] is not None
        ]
        if not pts:
            continue
        xs = [q[0] for q in pts]
        ax_t.plot(xs, [q[1] * 1e6 for q in pts], "-o", ms=3, label=a)
        ax_b.plot(xs, [q[2] for q in pts], "-o", ms=3, label=a)
    ax_t.set_ylabel("time (µs)")
    ax_b.set_ylabel("busbw (GB/s)")
    for ax in (ax_t, ax_b):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("size (bytes, as nccl-tests)")
        ax.grid(True, which="both", alpha=0.3)
    ax_t.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    try:
        return atomic_write(p, lambda tmp: fig.savefig(tmp, format=p.suffix[1:]), field="plot")
    finally:
        plt.close(fig)
