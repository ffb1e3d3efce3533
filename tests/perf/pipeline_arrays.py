"""One pipeline's strategy arrays for the schedule tests: tp = dp = micro-batch = 1, pp stages,
v chunks, m micro-batches, everything else at its default unless given."""

import numpy as np

from railplan.specs.arrays import StrategyArrays


def pipeline_arrays(pp: int, v: int, m: int, **fields: int) -> StrategyArrays:
    one = np.ones((), dtype=np.int64)
    return StrategyArrays(
        tp=one,
        pp=one * pp,
        dp=one,
        interleave=one * v,
        micro_batch=one,
        global_batch=one * m,
        recompute=0 * one,
        sequence_parallel=0 * one,
        zero=0 * one,
        overlap_dp=one,
        grad_reduce_bytes=4 * one,
        **{k: one * value for k, value in fields.items()},
    )
