"""The search over epoch counts of lp.py: the fewest counts whose time-expanded program
`solve` finds feasible, with every count below `Found.proven` proven infeasible.

`solve(k, limit_s)` answers ("feasible", delivered), ("infeasible", 0) (proven), ("excluded", 0)
(no schedule of a restricted form, which proves nothing) or ("unknown", 0) (time limit)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

#: epochs the search may try (a larger time-expanded graph does not fit memory at 64 ranks)
MAX_EPOCHS = 1024

Solve = Callable[[int, float], tuple[str, float]]


@dataclass(frozen=True)
class Found:
    epochs: int
    proven: int  # fewest epochs not proven infeasible
    delivered: float


def search(solve: Solve, lower: int, limits: tuple[float, float, float]) -> Found | None:
    """Fewest feasible epochs: from `lower` (a count no schedule beats) up to a feasible count
    (None if none within `find_s`), then bisection below it for at most `budget_s`. A solve
    past `limit_s` counts as infeasible (not proven): the schedule returned is always valid.
    `limits` = (limit_s, find_s, budget_s)."""
    limit_s, find_s, budget_s = limits
    proven = lower  # every count below is infeasible
    lo = hi = proven
    give_up = time.perf_counter() + find_s
    state, delivered = solve(hi, limit_s)
    while state != "feasible":
        if state == "infeasible":  # fewer epochs never help: all counts up to hi are too few
            proven = hi + 1
        left = give_up - time.perf_counter()
        if hi >= MAX_EPOCHS or left <= 0:
            return None
        # a proven-infeasible count: the answer may be just above (grow by a quarter); a
        # timed-out one is hard to decide, and a count well above it solves quickly (double)
        step = hi if state == "unknown" else max(1, hi // 4)
        lo, hi = hi + 1, min(MAX_EPOCHS, hi + step)
        state, delivered = solve(hi, min(limit_s, max(1.0, left)))
    return bisect(solve, (lo, hi), Found(hi, proven, delivered), (limit_s, budget_s))


def bisect(solve: Solve, span: tuple[int, int], found: Found, limits: tuple[float, float]) -> Found:
    """Bisection for fewer epochs than `found` (feasible), over `span` = (lo, hi): lo the
    fewest not yet excluded, hi = found.epochs; `limits` = (limit_s per solve, budget_s)."""
    (lo, hi), proven, delivered = span, found.proven, found.delivered
    limit_s, budget_s = limits
    deadline = time.perf_counter() + budget_s
    while lo < hi and time.perf_counter() < deadline:
        mid = (lo + hi) // 2
        left = deadline - time.perf_counter()
        state, got = solve(mid, min(limit_s, max(1.0, left)))
        if state == "feasible":
            hi, delivered = mid, got
        else:
            lo = mid + 1
            if state == "infeasible":
                proven = max(proven, mid + 1)
    return Found(hi, min(proven, hi), delivered)
