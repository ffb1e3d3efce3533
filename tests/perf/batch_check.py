"""A batch of strategies evaluated as arrays must equal each strategy estimated alone."""

from typing import Any

import pytest

from railplan.perf.estimate import estimate
from railplan.perf.iteration import iteration
from railplan.specs import Model, Network, Strategy, load_system
from railplan.specs.arrays import StrategyArrays, check, from_strategies, valid_mask


def batch_equals_each_alone(model: Model, items: list[Strategy]) -> int:
    """Check time and memory of every valid strategy of `items` (H100, rail-only) against its
    own estimate; return how many were valid."""
    s = from_strategies(items)
    ok = valid_mask(model, s)
    sy, net = load_system("dgx-h100"), Network(architecture="rail-only")
    it = iteration(model, sy, net, s)
    checked = 0
    for i, strat in enumerate(items):
        if not ok[i]:
            continue
        e = estimate(model, sy, strat, net)
        assert e.iteration_s == pytest.approx(float(it.iteration_s[i]), rel=1e-12)
        assert e.memory_gib_per_gpu == pytest.approx(float(it.memory_gib_per_gpu[i]), rel=1e-12)
        checked += 1
    return checked


def checked(model: Model, **fields: Any) -> StrategyArrays:
    """One strategy as arrays, refused (RailplanError) where `check` refuses it."""
    s = from_strategies(Strategy(**fields))
    check(model, s)
    return s
