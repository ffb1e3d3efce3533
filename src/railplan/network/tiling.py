"""Multi-job tiling of a rail-only cluster into rectangles of HB domains × rails.

In a rail-only network a job may only use GPUs that form a rectangle: ``d`` HB domains × ``r``
rails (the same ``r`` local ranks in each of its ``d`` domains), so that all its NIC traffic stays
inside its rails and cross-rail traffic is forwarded inside its own part of each HB domain
(Rail-only, HOTI 2024; SYSTEM.md claim 10). The cluster is a grid of D = N/K domains (rows) by
K rails (columns).

Placement: jobs largest first; for each job the shapes d × r = size with r ≤ K, d ≤ D are tried
widest first (most HB-domain bandwidth per job), each at the lowest then leftmost position on a
skyline over the rails (bottom-left skyline packing); a job no shape of which fits on the
skyline goes to the lowest, then leftmost, free rectangle below it (a hole the skyline left),
widest shape first, so a job is left out only where no free rectangle of its size exists.
Fragmentation = 1 - (largest free rectangle)/(free GPUs): 0 when the free GPUs form one
rectangle.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from railplan.errors import RailplanError
from railplan.limits import check_int
from railplan.network.topology import check_cluster


@dataclass(frozen=True)
class Placement:
    """Job ``job`` (input index) of ``gpus`` GPUs on domains [d0, d1) × rails [r0, r1)."""

    job: int
    gpus: int
    domain_start: int
    domain_end: int
    rail_start: int
    rail_end: int

    @property
    def shape(self) -> tuple[int, int]:
        return self.domain_end - self.domain_start, self.rail_end - self.rail_start


@dataclass(frozen=True)
class Tiling:
    """Result of tiling: placements, jobs that did not fit, utilization and fragmentation."""

    gpus: int
    hb_domain: int
    domains: int
    placements: tuple[Placement, ...]
    unplaced: tuple[int, ...]
    used_gpus: int
    free_gpus: int
    largest_free_rectangle_gpus: int
    fragmentation: float

    @property
    def utilization(self) -> float:
        return self.used_gpus / self.gpus

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["placements"] = [asdict(p) | {"shape": list(p.shape)} for p in self.placements]
        d["unplaced"] = list(self.unplaced)
        d["utilization"] = self.utilization
        return d


def shapes(size: int, hb_domain: int, domains: int) -> list[tuple[int, int]]:
    """All (domains, rails) rectangles of ``size`` GPUs that fit, widest (most rails) first."""
    out = []
    for r in range(min(size, hb_domain), 0, -1):
        if size % r == 0 and size // r <= domains:
            out.append((size // r, r))
    return out


def largest_free_rectangle(free: np.ndarray) -> int:
    """Area of the largest all-True rectangle of a 2-D boolean grid (histogram method)."""
    rows, cols = free.shape
    heights = np.zeros(cols, dtype=np.int64)
    best = 0
    for i in range(rows):
        heights = np.where(free[i], heights + 1, 0)
        stack: list[int] = []
        for j in range(cols + 1):
            h = int(heights[j]) if j < cols else 0
            while stack and int(heights[stack[-1]]) >= h:
                top = stack.pop()
                width = j if not stack else j - stack[-1] - 1
                best = max(best, int(heights[top]) * width)
            stack.append(j)
    return best


def free_runs(used: np.ndarray) -> np.ndarray:
    """Per cell, the free cells from it down its column to the next used one (0 if used)."""
    rows = np.arange(used.shape[0], dtype=np.int32)[:, None]
    blocked = np.where(used, rows, np.int32(used.shape[0]))
    return np.asarray(np.minimum.accumulate(blocked[::-1], axis=0)[::-1] - rows)


def window_min(a: np.ndarray, r: int) -> np.ndarray:
    """Per row, the minimum over each window of `r` consecutive columns (K − r + 1 of them), by
    doubling: O(rows · K · log r) whatever r."""
    span, out = 1, a
    while 2 * span <= r:  # out[:, x] = min of a[:, x : x + 2·span]
        out = np.minimum(out[:, :-span], out[:, span:])
        span *= 2
    # two windows of `span` cover one of r (span ≤ r < 2·span)
    return np.asarray(np.minimum(out[:, : a.shape[1] - r + 1], out[:, r - span :]))


def _lowest_free(
    used: np.ndarray, options: list[tuple[int, int]], runs: np.ndarray | None = None
) -> tuple[int, int, int, int] | None:
    """The lowest, then leftmost, free rectangle of the first shape in `options` (d domains ×
    r rails) that has one anywhere in the grid, as (row, rail, d, r); None if none has.
    `runs`: `free_runs(used)`, if already at hand."""
    down = free_runs(used) if runs is None else runs
    for d, r in options:
        room = window_min(down, r) >= d
        if room.any():
            y, x = np.unravel_index(int(np.argmax(room)), room.shape)
            return int(y), int(x), d, r
    return None


def tile(gpus: int, hb_domain: int, jobs: list[int]) -> Tiling:
    """Place ``jobs`` (GPU counts) as domain × rail rectangles on a rail-only cluster."""
    check_cluster(gpus, hb_domain)
    gpus, hb_domain = int(gpus), int(hb_domain)  # numpy's integers too: results stay JSON
    if isinstance(jobs, str) or not hasattr(jobs, "__iter__"):
        raise RailplanError("jobs", f"give a list of job sizes, e.g. [512, 1024]; got {jobs!r}")
    jobs = [check_int("jobs", j, 1, gpus) for j in jobs]
    if not jobs:
        raise RailplanError("jobs", "give at least one job size, e.g. 512,1024")
    domains = gpus // hb_domain
    if domains * hb_domain > 50_000_000:
        raise RailplanError("gpus", "tiling supports up to 50,000,000 GPUs")
    skyline = np.zeros(hb_domain, dtype=np.int64)
    grid = np.zeros((domains, hb_domain), dtype=bool)
    placed: list[Placement] = []
    unplaced: list[int] = []
    free, runs = gpus, None  # free GPUs; the grid's free runs while it is unchanged
    order = sorted(range(len(jobs)), key=lambda i: (-jobs[i], i))
    for idx in order:
        size = jobs[idx]
        best: tuple[int, int, int, int] | None = None
        for d, r in shapes(size, hb_domain, domains):
            # lowest, then leftmost, window of r rails
            windows = np.lib.stride_tricks.sliding_window_view(skyline, r).max(axis=1)
            x = int(np.argmin(windows))
            y = int(windows[x])
            if y + d <= domains:
                best = (y, x, d, r)
                break
        if best is None and size <= free:  # no room on the skyline: a hole below it may
            if runs is None:  # (computed again only once the grid has changed)
                runs = free_runs(grid)
            best = _lowest_free(grid, shapes(size, hb_domain, domains), runs)
        if best is None:
            unplaced.append(idx)
            continue
        y, x, d, r = best
        skyline[x : x + r] = np.maximum(skyline[x : x + r], y + d)
        grid[y : y + d, x : x + r] = True
        placed.append(Placement(idx, size, y, y + d, x, x + r))
        free, runs = free - size, None
    used = int(grid.sum())
    largest = largest_free_rectangle(~grid) if free else 0
    frag = 0.0 if free == 0 else 1.0 - largest / free
    return Tiling(
        gpus,
        hb_domain,
        domains,
        tuple(sorted(placed, key=lambda p: p.job)),
        tuple(sorted(unplaced)),
        used,
        free,
        largest,
        frag,
    )
