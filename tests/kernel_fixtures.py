"""A GPU and a model with explicit numbers for the kernel-level tests (perf/compute and
workload/*), so catalog changes do not move their hand-computed expectations."""

from __future__ import annotations

import numpy as np

from railplan.specs import GPU, Model
from railplan.specs.hardware import AttentionCurve

GPU_T = GPU(
    name="test",
    peak_tflops=100.0,
    memory_gib=80,
    memory_tbps=1.0,
    sm_count=100,
    matmul_efficiency=0.8,
    l2_flops_per_byte=10.0,
    memory_efficiency=0.5,
    kernel_overhead_us=0.0,
    # today's fused attention at one speed for every length: 0.5 / 0.25 of the peak
    attention_curves={
        "flash": AttentionCurve(seq_tokens=[2048], forward_tflops=[50.0], backward_tflops=[25.0])
    },
)
MODEL = Model(name="m", hidden=1024, layers=4, heads=8, seq=512, vocab=1000)


def one(x: float) -> np.ndarray:
    """A 0-d float array: one strategy's value."""
    return np.asarray(float(x))
