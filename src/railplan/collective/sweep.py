"""Size sweep of one collective by every algorithm, and its plot (time and busbw vs size, as
nccl-tests prints them)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from railplan.collective import algorithms as alg
from railplan.collective.algorithms import Built
from railplan.errors import RailplanError
from railplan.fileio import atomic_write

#: the closed forms, the flow-level simulation (collective/flow.py) and the LP schedule
#: (collective/lp.py), in the order tables show them; the last two run on the built network
ALL_ALGORITHMS: tuple[str, ...] = (*alg.ALGORITHMS, "flow", "optimal")
BUILT_ALGORITHMS: tuple[str, ...] = ("flow", "optimal")


def run(g: alg.Group, op: str, algorithm: str, size: float, built: Built) -> alg.Result:
    """One algorithm's result: a closed form (`algorithms.run`), the flow-level simulation or the
    LP schedule, all behind this one call."""
    if algorithm not in BUILT_ALGORITHMS:
        return alg.run(g, op, algorithm, size)
    if algorithm == "flow":
        from railplan.collective.flow import flow

        return flow(g, op, size, built)
    from railplan.collective.lp import NoSchedule
    from railplan.collective.optimal import optimal

    try:
        return optimal(g, op, size, built)
    except NoSchedule as err:  # the solver ran out of time: a row, not the end of the others
        return alg.Result(algorithm, None, None, None, err.problem)


def sweep(
    g: alg.Group,
    op: str,
    sizes: list[float],
    algorithms: tuple[str, ...] = alg.ALGORITHMS,
    built: Built | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """One row per size: each algorithm's result; "flow" and "optimal" need the `built`
    network."""
    needs = [a for a in algorithms if a in BUILT_ALGORITHMS]
    if needs and built is None:
        raise RailplanError(
            "algorithm", f"{needs[0]} needs the built network (architecture, radix)"
        )
    rows = []
    for size in sizes:
        results = []
        for a in algorithms:
            if progress is not None and a == "optimal":
                progress(f"solving the {op} schedule of {size:,.0f} bytes on {g.gpus} GPUs")
            results.append(run(g, op, a, size, built or Built("")).to_dict())
        rows.append({"bytes": size, "algorithms": results})
    return rows


def plot(rows: list[dict[str, Any]], out: str | Path, title: str) -> Path:
    """Two panels (time in µs, busbw in GB/s vs bytes, log axes) to `out` (.png/.svg/.pdf)."""
    p = Path(out)
    if p.suffix not in (".png", ".svg", ".pdf"):
        raise RailplanError("plot", f"{p.name!r}: use a .png, .svg or .pdf file name")
    from railplan.figures import subplots

    fig, (ax_t, ax_b) = subplots(1, 2, figsize=(11, 4.2))
    for a in ALL_ALGORITHMS:
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
    return atomic_write(p, lambda tmp: fig.savefig(tmp, format=p.suffix[1:]), field="plot")
