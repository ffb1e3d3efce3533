"""Traffic figures like the Rail-only paper's Figs 2–5: heatmaps of the first N GPUs (log colour
scale, HB domains and rails highlighted) and per-kind bar charts. PNG or SVG via matplotlib's
Agg backend; files are written to a temporary file in the target folder, then renamed, so an
error never leaves a half-written figure or clobbers an existing one.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from railplan.errors import RailplanError
from railplan.figures import subplots
from railplan.fileio import atomic_write, check_target
from railplan.limits import check_int
from railplan.traffic.matrix import KIND_COLOURS, KINDS, TrafficStats

FIGURE_SUFFIXES = (".png", ".svg")


def check_suffix(path: str | Path, allowed: tuple[str, ...], field: str) -> Path:
    """The path, if its suffix is allowed (one-line error otherwise)."""
    p = Path(path)
    if p.suffix.lower() not in allowed:
        raise RailplanError(
            field, f"{p.name!r} must end in one of {', '.join(allowed)} to choose the format"
        )
    check_target(p, field)  # directory exists, name allowed, no symlink loop
    return p


def _save(fig: Any, path: Path, field: str = "output") -> Path:
    fmt = path.suffix.lower().lstrip(".")
    return atomic_write(path, lambda tmp: fig.savefig(tmp, format=fmt, dpi=150), field)


class DenseTraffic(Protocol):
    """What a heatmap needs: GPU count, HB-domain size and a dense byte matrix of the first GPUs
    (`traffic.Traffic`, `inference.traffic.InferenceTraffic`)."""

    @property
    def gpus(self) -> int: ...

    @property
    def hb_domain(self) -> int: ...

    def dense(self, first_gpus: int) -> Any: ...


# The most GPUs a heatmap shows: a 7.5-inch figure has no more pixels per side, and the dense
# matrix and its colours take 40 bytes per cell (2,048 GPUs: 0.17 GB).
MAX_HEATMAP_GPUS = 2048
DEFAULT_HEATMAP_GPUS = 64


def heatmap(
    t: DenseTraffic,
    path: str | Path,
    first_gpus: int = DEFAULT_HEATMAP_GPUS,
    title: str = "",
    unit: str = "bytes per iteration",
) -> Path:
    """Bytes src (row) → dst (column) of GPUs 0…first_gpus−1, log colour scale; GPU pairs in
    the same HB domain are shaded orange, pairs on the same rail in different domains pink
    (the paper's "Same HBD" / "Same Rail" highlights)."""
    out = check_suffix(path, FIGURE_SUFFIXES, "heatmap")
    check_int("first_gpus", first_gpus, 2, MAX_HEATMAP_GPUS)
    from matplotlib.colors import LogNorm

    n = min(int(first_gpus), t.gpus)
    k = t.hb_domain
    m = t.dense(n)
    ids = np.arange(n)
    same_hb = (ids[:, None] // k) == (ids[None, :] // k)
    same_rail = ((ids[:, None] % k) == (ids[None, :] % k)) & ~same_hb
    bg = np.ones((n, n, 4))
    bg[same_hb] = (1.0, 0.85, 0.6, 1.0)
    bg[same_rail] = (1.0, 0.9, 0.95, 1.0)
    fig, ax = subplots(figsize=(7.5, 6.2))
    ax.imshow(bg, interpolation="nearest")
    masked = np.ma.masked_less_equal(m, 0.0)
    if masked.count():
        lo, hi = float(masked.min()), float(masked.max())
        img = ax.imshow(
            masked,
            norm=LogNorm(vmin=lo, vmax=max(hi, lo * 1.0001)),
            cmap="viridis",
            interpolation="nearest",
        )
        fig.colorbar(img, ax=ax, label=f"{unit} (src → dst)")
    ax.set_xlabel("destination GPU")
    ax.set_ylabel("source GPU")
    ax.set_title(title or f"traffic of GPUs 0–{n - 1} (K = {k})")
    from matplotlib.patches import Patch

    ax.legend(
        handles=[
            Patch(color=(1.0, 0.85, 0.6), label="same HB domain"),
            Patch(color=(1.0, 0.9, 0.95), label="same rail"),
        ],
        loc="upper right",
        fontsize=8,
    )
    fig.tight_layout()
    return _save(fig, out, "heatmap")


def _part_pct(r: TrafficStats, kind: str, part: str) -> float:
    part_bytes = r.hb_bytes_by_kind[kind] if part == "HB" else r.nic_bytes_by_kind[kind]
    return 100.0 * part_bytes / r.total_bytes if r.total_bytes else 0.0


def kind_bars(
    results: Sequence[TrafficStats], labels: Sequence[str], path: str | Path, title: str = ""
) -> Path:
    """Two panels per model, like Fig 2: (a) share of bytes by kind (TP, PP, DP, EP, with
    DP split into HB and NIC parts as in Fig 4a); (b) share of GPU pairs by kind and idle."""
    out = check_suffix(path, FIGURE_SUFFIXES, "bars")
    if len(results) != len(labels) or not results:
        raise RailplanError("labels", "give one label per result (at least one)")
    fig, (a, b) = subplots(1, 2, figsize=(11, 4.2))
    x = np.arange(len(results))
    bottom = np.zeros(len(results))
    for kind in KINDS:
        for part, hatch in (("HB", ""), ("NIC", "//")):
            vals = np.array([_part_pct(r, kind, part) for r in results])
            if not np.any(vals > 0):
                continue
            a.bar(
                x,
                vals,
                bottom=bottom,
                color=KIND_COLOURS[kind],
                hatch=hatch,
                edgecolor="white",
                label=f"{kind.upper()} ({part})",
            )
            bottom += vals
    a.set_xticks(x, labels)
    a.set_ylabel("% of bytes")
    a.set_title("(a) traffic volume by kind")
    a.legend(fontsize=8)
    width = 0.8 / (len(KINDS) + 1)
    idle = [100 * (1 - r.pairs_with_traffic_fraction) for r in results]
    b.bar(x - 0.4 + width / 2, idle, width, color="#bbbbbb", label="no traffic")
    for i, kind in enumerate(KINDS):
        pairs = [100 * r.pairs_by_kind_fraction[kind] for r in results]
        if not any(pairs):
            continue
        b.bar(
            x - 0.4 + (i + 1.5) * width, pairs, width, color=KIND_COLOURS[kind], label=kind.upper()
        )
    b.set_yscale("log")
    b.set_xticks(x, labels)
    b.set_ylabel("% of GPU pairs (unordered)")
    b.set_title("(b) GPU pairs by traffic kind")
    b.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, out, "bars")
