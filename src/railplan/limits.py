"""Bounds on the counts railplan accepts, checked up front with the limit named.

Every GPU count, parallel degree and batch size is a Python int until it enters numpy's int64
arrays; past these bounds it would overflow (int64 holds < 9.3·10^18) or make the divisor
enumeration of the search allocate O(√n) memory (√(9.2·10^18) ≈ 3·10^9 entries, 24 GB). The
bounds sit far above any real cluster (the largest announced ones have ~10^5–10^6 GPUs) so that
products such as tp·pp·dp and gpus·seq_len stay inside int64.
"""

from __future__ import annotations

import numbers
from typing import Any

from railplan.errors import RailplanError

MAX_GPUS = 10**9
"""Most GPUs in a job or cluster, and the largest parallel degree."""
MAX_GLOBAL_BATCH = 10**9
"""Most sequences per iteration (and per micro-batch)."""
MAX_TOKENS = 10**7
"""Most prompt or output tokens per request the serving model takes."""
MAX_TOP = 1000
"""Most candidates `search --top` lists (each one is described in detail)."""


def as_int(value: Any) -> int | None:
    """``value`` as a Python int if it is an integer of any type (numpy's too, as a loop over
    ``np.arange`` or a pandas column gives them), else None; a bool is not a count."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    return None


def check_int(fld: str, value: Any, low: int = 1, high: int = MAX_GPUS) -> int:
    """``value`` as a Python int in [low, high], else a one-line RailplanError naming ``fld``."""
    n = as_int(value)
    if n is None or not low <= n <= high:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise RailplanError(fld, f"must be an integer in [{low:,}, {high:,}]; got {shown}")
    return n
