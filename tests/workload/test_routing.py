"""workload/routing.py on hand-computed loads: uniform and Zipf-skewed expert popularity,
capacity slots, dropped tokens."""

from __future__ import annotations

import numpy as np
import pytest

from railplan.specs import Model
from railplan.workload import routing


def test_routing_uniform_and_skewed() -> None:
    uniform = Model(name="u", hidden=64, layers=2, heads=4, experts=8, top_k=2, drop_tokens=False)
    assert routing.expert_shares(uniform).sum() == pytest.approx(1.0)
    assert routing.max_rank_load(uniform, 4) == pytest.approx(1.0)
    skewed = uniform.model_copy(update={"routing_zipf": 1.0})
    # Zipf z=1 over 8 experts, 2 per rank: the first rank holds (1 + 1/2) / H_8 of the tokens.
    h8 = sum(1 / i for i in range(1, 9))
    assert routing.max_rank_load(skewed, 4) == pytest.approx(4 * 1.5 / h8)
    capped = uniform.model_copy(update={"drop_tokens": True, "capacity_factor": 1.25})
    assert float(routing.slot_factor(capped, 4)) == 1.25
    assert routing.dropped_fraction(capped) == 0.0


def test_dropped_fraction_by_hand() -> None:
    """Zipf z=1 over 4 experts: shares (1, 1/2, 1/3, 1/4)/H_4, H_4 = 25/12, i.e. load relative to
    the fair share 4·12/25·(1, 1/2, 1/3, 1/4) = (1.92, 0.96, 0.64, 0.48); at capacity 1.25 only
    the first expert overflows, by 0.67 of a fair share: 0.67 / 4 of the tokens are dropped."""
    m = Model(
        name="z",
        hidden=64,
        layers=2,
        heads=4,
        experts=4,
        top_k=1,
        routing_zipf=1.0,
        drop_tokens=True,
        capacity_factor=1.25,
    )
    assert routing.dropped_fraction(m) == pytest.approx((1.92 - 1.25) / 4)


def test_slot_factor_vectorized_and_dense() -> None:
    """Per ep value in one array; dropless routing; a dense model (one expert)
    uses the capacity factor (1.0)."""
    m = Model(
        name="u",
        hidden=64,
        layers=2,
        heads=4,
        experts=8,
        top_k=2,
        routing_zipf=1.0,
        drop_tokens=False,
    )
    got = routing.slot_factor(m, np.array([1, 2, 8]))
    assert float(got[0]) == pytest.approx(1.0)  # one rank holds every expert
    assert float(got[1]) == pytest.approx(routing.max_rank_load(m, 2))
    assert float(got[2]) == pytest.approx(8 * float(routing.expert_shares(m)[0]))
    dense = Model(name="d", hidden=64, layers=2, heads=4)
    assert float(routing.slot_factor(dense, 1)) == dense.capacity_factor
