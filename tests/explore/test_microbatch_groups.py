"""The search interleaves micro-batch counts that are not a multiple of pp through Megatron-Core's
micro-batch groups (`Strategy.microbatch_group`), taking the smallest group N it accepts."""

import numpy as np

from railplan.explore.search import (
    MEGATRON_SPACE,
    SearchSpace,
    candidate_rows,
    enumerate_and_evaluate,
    smallest_group,
)
from railplan.specs import Job, Network, Strategy, load_model, load_system
from railplan.specs.arrays import check, from_strategies, valid_mask

MODEL = load_model("gpt-39b")  # 48 layers


def test_smallest_group_by_hand() -> None:
    """m mod N must be 0 or at least pp: pp 4, m 9 -> 5 (9 mod 5 = 4); m 17 -> 6 (17 mod 6 = 5);
    m 6 -> 6; pp 8, m 33 -> 11; m below pp has none (0)."""
    m = np.array([9, 17, 6, 33, 3])
    pp = np.array([4, 4, 4, 8, 4])
    assert smallest_group(m, pp).tolist() == [5, 6, 6, 11, 0]
    for mi, pi, n in zip(m, pp, smallest_group(m, pp), strict=True):
        if n:  # every smaller N is refused
            assert all(mi % k and mi % k < pi for k in range(pi, n))


def test_groups_only_where_needed_and_valid() -> None:
    """gpt-39b on 64 GPUs, batch 36: with tp 8, pp 4, dp 2 there are 18 micro-batches, not a
    multiple of 4: interleaved rows carry a group; rows with m a multiple of pp carry none;
    every row is valid; the Megatron/Calculon space of the paper has none."""
    rows = candidate_rows(MODEL, 64, 36, SearchSpace())
    v, pp, n = rows["interleave"], rows["pp"], rows["microbatch_group"]
    m = 36 // (rows["dp"] * rows["micro_batch"])
    assert bool(np.all((n > 0) == ((v > 1) & (m % pp != 0))))
    assert (n > 0).any()
    paper = candidate_rows(MODEL, 64, 36, MEGATRON_SPACE)
    assert not (paper["microbatch_group"] > 0).any()
    job = Job(MODEL, load_system("dgx-a100"), Network(), 64, 36)
    ev = enumerate_and_evaluate(job, SearchSpace())
    assert bool(np.all(valid_mask(MODEL, ev.strategies)))


def test_a_grouped_row_estimates_as_given() -> None:
    s = Strategy(tp=8, pp=4, dp=2, interleave=2, global_batch=36, microbatch_group=6)
    check(MODEL, from_strategies(s))
    rows = candidate_rows(MODEL, 64, 36, SearchSpace(tp=(8,), pp=(4,), micro_batch=(1,)))
    sel = (rows["interleave"] == 2) & (rows["dp"] == 2)
    assert set(rows["microbatch_group"][sel].tolist()) == {6}  # 18 mod 5 = 3 < 4; 18 mod 6 = 0
