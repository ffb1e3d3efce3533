"""Cost and power vs cluster size for rail-optimized and rail-only at several radices."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from railplan.errors import RailplanError
from railplan.fileio import atomic_write
from railplan.network.cost import PriceBook, compare, load_price_book
from railplan.network.topology import Cluster

#: the largest cluster the cost plot draws (K·2^i GPUs up to it)
MAX_PLOT_GPUS = 131072


def cost_series(
    sizes: list[int],
    radices: list[int],
    hb_domain: int = 256,
    nic_gbps: int = 400,
    book: PriceBook | None = None,
) -> list[dict[str, Any]]:
    """One row per (radix, N): cost (USD) and power (W) of both designs."""
    book = book or load_price_book()
    rows = []
    for radix in radices:
        for n in sizes:
            c = compare(Cluster(n, hb_domain, radix, nic_gbps), book)
            rows.append(
                {
                    "radix": radix,
                    "gpus": n,
                    "rail_optimized_cost_usd": c.rail_optimized_cost.cost_usd,
                    "rail_only_cost_usd": c.rail_only_cost.cost_usd,
                    "rail_optimized_power_w": c.rail_optimized_cost.power_w,
                    "rail_only_power_w": c.rail_only_cost.power_w,
                }
            )
    return rows


def cost_plot(
    out: str | Path,
    sizes: list[int] | None = None,
    radices: list[int] | None = None,
    hb_domain: int = 256,
    nic_gbps: int = 400,
    book: PriceBook | None = None,
) -> Path:
    """Write a two-panel figure (cost in $M, power in MW vs N) to ``out`` (.png, .svg or .pdf),
    all or nothing; OS errors are one-line errors naming the path."""
    p = Path(out)
    if p.suffix not in (".png", ".svg", ".pdf"):
        raise RailplanError("out", f"{p.name!r}: use a .png, .svg or .pdf file name")
    from railplan.figures import color_cycle, subplots

    sizes = sizes or [hb_domain * 2**i for i in range(0, 20) if hb_domain * 2**i <= MAX_PLOT_GPUS]
    if not sizes:
        raise RailplanError(
            "hb_domain",
            f"the plot's cluster sizes are K·2^i up to {MAX_PLOT_GPUS:,} GPUs: K must be at most "
            f"{MAX_PLOT_GPUS:,}; got {hb_domain:,}",
        )
    radices = radices or [32, 64, 128, 256]
    rows = cost_series(sizes, radices, hb_domain, nic_gbps, book)
    has_power = all(r["rail_optimized_power_w"] is not None for r in rows)
    fig, axes = subplots(1, 2 if has_power else 1, figsize=(11 if has_power else 6, 4.2))
    axs = list(axes) if has_power else [axes]
    colors = color_cycle()
    for i, radix in enumerate(radices):
        sel = [r for r in rows if r["radix"] == radix]
        xs = [r["gpus"] for r in sel]
        col = colors[i % len(colors)]
        for design, style in (("rail_optimized", "-o"), ("rail_only", "--s")):
            label = f"{design.replace('_', '-')} R={radix}"
            costs = [r[f"{design}_cost_usd"] / 1e6 for r in sel]
            axs[0].plot(xs, costs, style, c=col, ms=3, label=label)
            if has_power:
                axs[1].plot(xs, [r[f"{design}_power_w"] / 1e6 for r in sel], style, c=col, ms=3)
    axs[0].set_ylabel("network cost ($M)")
    if has_power:
        axs[1].set_ylabel("network power (MW)")
    for ax in axs:
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(f"GPUs (K={hb_domain}, {nic_gbps} Gbps)")
        ax.grid(True, which="both", alpha=0.3)
    axs[0].legend(fontsize=7, ncol=2)
    fig.suptitle("Rail-optimized (solid) vs rail-only (dashed), paper cost model (eqs. 4-5)")
    fig.tight_layout()
    return atomic_write(p, lambda tmp: fig.savefig(tmp, format=p.suffix[1:]), field="out")
