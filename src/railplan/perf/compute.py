"""Time of the work on one GPU: GEMMs from their shapes, element-wise kernels from bytes moved.

GEMM efficiency is not one constant. A GEMM runs as output tiles spread over the SMs in waves
(cuBLAS/CUTLASS thread-block tiles); its efficiency is the best, over the usual tile shapes, of
    matmul_efficiency · wave_fill · padding_fill · min(1, tile_intensity / l2_flops_per_byte)
bounded by the HBM roofline (operands read once, result written once). FP8 GEMMs (Transformer
Engine) run at the GPU's dense FP8 peak with 1-byte operands; the tile factors are the same,
since FP8 doubles both the FLOPs per clock and the elements per L2 byte. `matmul_efficiency` is the
measured best case for large GEMMs (MAMF; for FP8 GEMMs `fp8_matmul_efficiency`, the FP8 MAMF,
where the catalog has it); the other factors come from the shape alone:
- wave_fill: tiles / (waves · SMs): the last wave leaves SMs idle;
- padding_fill: useful share of the padded output (M, N rounded up to the tile);
- tile_intensity = mt·nt/(mt+nt) FLOP per byte fetched from L2 per k-step; a tile below the
  L2 intensity of the GPU is L2-bandwidth bound.
"""

from __future__ import annotations

import numpy as np

from railplan.errors import RailplanError
from railplan.specs import GPU
from railplan.specs.arrays import FloatArray, remembered
from railplan.workload.gemms import Gemm

# Thread-block tiles (M×N) of the CUTLASS/cuBLAS Ampere/Hopper bf16 kernels.
TILES: tuple[tuple[int, int], ...] = (
    (256, 128),
    (128, 256),
    (128, 128),
    (256, 64),
    (64, 256),
    (128, 64),
    (64, 128),
    (64, 64),
)
BYTES_PER_ELEMENT = 2.0  # bf16/fp16 operands
FP8_BYTES_PER_ELEMENT = 1.0
FP32_BYTES_PER_ELEMENT = 4.0
# An FP32 GEMM runs on the tensor cores in TF32 where PyTorch allows it (NGC PyTorch containers
# set TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1), at half the dense BF16 rate on every NVIDIA datasheet
# since Ampere (A100 156 / 312, H100 SXM 494.7 / 989.4, GB200 1.25 / 2.5 PF dense).
TF32_PEAK_SHARE = 0.5
# Fused attention with a causal mask skips the key blocks above the diagonal: about half the
# score and context work (FlashAttention-2, Dao 2023, §3.1.1: causal blocks skipped, 1.7-1.8x).
CAUSAL_WORK_FRACTION = 0.5
# The fused backward pass runs five matmuls to the forward's two (it recomputes the scores):
# 2.5x the forward FLOPs (FlashAttention-2, Dao 2023, §4.1 FLOP count).
FLASH_BACKWARD_FLOPS_RATIO = 2.5


_TILE_M = np.array([t[0] for t in TILES], dtype=np.float64)
_TILE_N = np.array([t[1] for t in TILES], dtype=np.float64)
_TILE_INTENSITY = _TILE_M * _TILE_N / (_TILE_M + _TILE_N)  # FLOP per L2 byte per k-step


#: scalar shapes already evaluated (the serving simulation asks for the same few shapes
#: thousands of times), keyed by everything `gemm_efficiency` reads; emptied when full
_SCALAR_EFFICIENCY: dict[tuple[float, ...], FloatArray] = {}
_SCALAR_EFFICIENCY_MAX = 1 << 16


def gemm_efficiency(gpu: GPU, g: Gemm, fp8: bool = False) -> FloatArray:
    """Fraction of peak tensor FLOP/s the GEMM reaches when compute-bound (0..1]: the best tile,
    all tiles evaluated at once along a leading axis; `fp8`: of the FP8 peak, from the GPU's FP8
    MAMF fraction where the catalog has one. A scalar shape is evaluated once and remembered."""
    mamf = gpu.fp8_matmul_efficiency if fp8 and gpu.fp8_matmul_efficiency else None
    fraction = mamf or gpu.matmul_efficiency
    if np.ndim(g.batch) == np.ndim(g.m) == np.ndim(g.n) == 0:
        key = (
            float(gpu.sm_count),
            float(gpu.l2_flops_per_byte),
            float(fraction),
            float(g.batch),
            float(g.m),
            float(g.n),
        )
        return remembered(
            _SCALAR_EFFICIENCY,
            key,
            lambda: _tile_efficiency(gpu, g, fraction),
            _SCALAR_EFFICIENCY_MAX,
        )
    return _tile_efficiency(gpu, g, fraction)


def _tile_efficiency(gpu: GPU, g: Gemm, fraction: float) -> FloatArray:
    """`gemm_efficiency` evaluated: `fraction` (the MAMF share) × the best tile's fills."""
    batch, m, n = np.broadcast_arrays(
        *(np.asarray(x, dtype=np.float64) for x in (g.batch, g.m, g.n))
    )
    extra = (slice(None),) + (None,) * m.ndim
    mt, nt = _TILE_M[extra], _TILE_N[extra]
    rows, cols = np.ceil(m / mt), np.ceil(n / nt)
    tiles = batch * rows * cols
    waves = np.ceil(tiles / gpu.sm_count)
    wave_fill = tiles / (waves * gpu.sm_count)
    padding_fill = (m * n) / (rows * mt * cols * nt)
    l2_fill = np.minimum(1.0, _TILE_INTENSITY / gpu.l2_flops_per_byte)[extra]
    best = (wave_fill * padding_fill * l2_fill).max(axis=0)
    return np.asarray(fraction * best)


def fp8_peak_tflops(gpu: GPU) -> float:
    """The GPU's dense FP8 peak; a one-line error for a GPU without FP8 tensor cores."""
    if gpu.fp8_tflops is None:
        raise RailplanError(
            "precision", f"fp8 needs a GPU with fp8 tensor cores ({gpu.name} has none)"
        )
    return gpu.fp8_tflops


def gemm_time_s(gpu: GPU, g: Gemm, fp8: bool = False, tf32: bool = False) -> FloatArray:
    """Time of one GEMM: compute at its shape efficiency, or the HBM roofline, plus overhead;
    `fp8`: at the FP8 peak with 1-byte operands; `tf32`: FP32 operands on the tensor cores in
    TF32, at half the BF16 peak (`TF32_PEAK_SHARE`)."""
    peak = fp8_peak_tflops(gpu) if fp8 else gpu.peak_tflops * (TF32_PEAK_SHARE if tf32 else 1.0)
    width = FP8_BYTES_PER_ELEMENT if fp8 else FP32_BYTES_PER_ELEMENT if tf32 else BYTES_PER_ELEMENT
    compute_s = g.flops / (
        peak * 1e12 * gemm_efficiency(gpu, g, fp8) * gpu.sustained_tensor_fraction
    )
    moved_bytes = width * g.batch * (g.m * g.k + g.k * g.n + g.m * g.n)
    memory_s = moved_bytes / (gpu.memory_tbps * 1e12 * gpu.memory_efficiency)
    return np.maximum(compute_s, memory_s) + gpu.kernel_overhead_us * 1e-6


def memory_time_s(
    gpu: GPU,
    moved_bytes: FloatArray | float,
    kernels: FloatArray | float = 1.0,
    efficiency: float | None = None,
) -> FloatArray:
    """Time of memory-bound kernels moving `moved_bytes` through HBM at `efficiency` of the
    peak bandwidth (default: the streaming efficiency `gpu.memory_efficiency`)."""
    bw = gpu.memory_tbps * 1e12 * (gpu.memory_efficiency if efficiency is None else efficiency)
    return np.asarray(moved_bytes, dtype=np.float64) / bw + kernels * gpu.kernel_overhead_us * 1e-6


def flash_attention_time_s(
    gpu: GPU,
    forward_flops: FloatArray,
    seq_tokens: FloatArray | float,
    generation: int = 3,
    causal_share: FloatArray | float = 1.0,
) -> dict[str, FloatArray]:
    """Forward and backward time of fused causal attention kernels over sequences of
    `seq_tokens` whose unmasked score and context products would take `forward_flops`: the
    causal half of the work, the backward at 2.5x the forward FLOPs, each pass at the kernel's
    measured efficiency at that length (`GPU.flash_efficiencies`: today's kernel;
    FlashAttention-2's with `generation` 2, the first generation's with 1), a `causal_share`
    of the work in kernels with the causal mask, the rest in kernels without it."""
    fwd_eff, bwd_eff = gpu.flash_efficiencies(generation, seq_tokens, causal_share)
    work = (
        np.asarray(forward_flops, dtype=np.float64)
        * CAUSAL_WORK_FRACTION
        / (gpu.peak_tflops * 1e12 * gpu.sustained_tensor_fraction)
    )
    overhead = gpu.kernel_overhead_us * 1e-6
    return {
        "forward": np.asarray(work / fwd_eff + overhead),
        "backward": np.asarray(FLASH_BACKWARD_FLOPS_RATIO * work / bwd_eff + overhead),
    }
