"""Hardware specs: the GPU, and the system (HB domain + NIC domain) built from it."""

from __future__ import annotations

from itertools import pairwise
from typing import Annotated, Literal

import numpy as np
import numpy.typing as npt
from pydantic import Field, PositiveInt, model_validator

from railplan.limits import MAX_GPUS
from railplan.specs.base import Range, Spec

#: achievable fraction of a peak or a line rate
Efficiency = Annotated[float, Range(0.01, 1.0)]
#: a per-kernel or per-step overhead
Microseconds = Annotated[float, Range(0.0, 10_000.0, "µs")]
#: NICs per GPU: 1/8 (one NIC shared by an 8-GPU node) up to 16 NIC ports per GPU
NICS_PER_GPU = Range(0.125, 16.0, hint="1/8 = one NIC per 8 GPUs, 1 = one NIC per GPU")


#: a tensor throughput: a peak or a measured kernel's
TFLOPS = Annotated[float, Range(1.0, 100_000.0, "TFLOP/s")]
#: the kernel names of `Strategy.attention` that have a fused kernel, by generation
AttentionKernel = Literal["flash", "flash2", "flash1"]
HostCpu = Literal["intel", "amd", "arm"]  # the servers' CPU vendor (System.host_cpu)
ATTENTION_GENERATIONS: dict[int, AttentionKernel] = {3: "flash", 2: "flash2", 1: "flash1"}


class AttentionCurve(Spec):
    """A fused attention kernel's measured TFLOP/s per pass over sequence length, at head
    dimension 128, FLOPs counted as FlashAttention's benchmark counts them (4·s²·d per head
    forward, halved with the causal mask; the backward 2.5x the forward): with the causal mask
    (`forward_tflops`, `backward_tflops`) and without it (`*_noncausal_tflops`; absent: as
    with it). Between the measured lengths the TFLOP/s are interpolated in log2(s); outside
    them they stay at the nearest measurement."""

    seq_tokens: list[Annotated[int, Range(1, 10_000_000, "tokens")]] = Field(min_length=1)
    forward_tflops: list[TFLOPS]
    backward_tflops: list[TFLOPS]
    forward_noncausal_tflops: list[TFLOPS] | None = None
    backward_noncausal_tflops: list[TFLOPS] | None = None
    source: str = ""

    @property
    def series(self) -> tuple[list[float], ...]:
        """The four measured series: forward and backward, with the mask and without it."""
        return (
            self.forward_tflops,
            self.backward_tflops,
            self.forward_noncausal_tflops or self.forward_tflops,
            self.backward_noncausal_tflops or self.backward_tflops,
        )

    @model_validator(mode="after")
    def _aligned(self) -> AttentionCurve:
        n = len(self.seq_tokens)
        if any(len(values) != n for values in self.series):
            raise ValueError("seq_tokens and each *_tflops list need one value each")
        if any(b <= a for a, b in zip(self.seq_tokens, self.seq_tokens[1:], strict=False)):
            raise ValueError("seq_tokens must increase")
        return self

    def tflops(
        self, seq_tokens: npt.ArrayLike, causal_share: npt.ArrayLike = 1.0
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """(forward, backward) TFLOP/s over sequences of `seq_tokens` when a `causal_share` of
        the work runs under the causal mask and the rest without it (context parallelism's
        off-diagonal blocks): the work-weighted harmonic mean of the two measurements."""
        x = np.log2(np.maximum(np.asarray(seq_tokens, dtype=np.float64), 1.0))
        points = np.log2(np.asarray(self.seq_tokens, dtype=np.float64))
        share = np.asarray(causal_share, dtype=np.float64)

        def at(causal: list[float], noncausal: list[float]) -> npt.NDArray[np.float64]:
            c = np.interp(x, points, np.asarray(causal))
            n = np.interp(x, points, np.asarray(noncausal))
            return np.asarray(1.0 / (share / c + (1.0 - share) / n))

        fwd, bwd, fwd_noncausal, bwd_noncausal = self.series
        return at(fwd, fwd_noncausal), at(bwd, bwd_noncausal)


class CustomAllReduceCurve(Spec):
    """A serving framework's all-reduce kernel inside one NVLink domain, measured: latency
    (µs) by ranks and message size (the one-shot / two-shot kernels TensorRT-LLM, vLLM and
    SGLang run for tensor parallelism in place of NCCL, with peer memory over NVLink). A
    bigger message is never faster: each latency is taken as at least the one of the next
    smaller size (the measurements dip by up to 1.1 µs between their two smallest sizes).
    Between the measured sizes the latency is interpolated linearly in bytes, beyond the
    largest it grows with the last interval's slope, below the smallest it stays at the
    smallest's; between measured rank counts it is interpolated linearly in ranks. The kernel
    applies to the rank counts the frameworks run it for (`supported_ranks`), messages up to
    `max_bytes`, groups inside one HB domain, and only on links at least as fast as the
    measured ones (`hb_tbps`; `System.custom_all_reduce_curve`)."""

    ranks: list[Annotated[int, Range(2, 72, "ranks")]] = Field(min_length=1)
    sizes_bytes: list[Annotated[int, Range(1, 1 << 40, "bytes")]] = Field(min_length=2)
    latency_us: list[list[Microseconds]] = Field(
        description="one list per entry of `ranks`, one latency per entry of `sizes_bytes`"
    )
    supported_ranks: list[Annotated[int, Range(2, 72, "ranks")]] = Field(
        min_length=1, description="the rank counts the frameworks run the kernel for"
    )
    max_bytes: Annotated[int, Range(1, 1 << 40, "bytes")] = Field(
        description="the largest message the framework sends through the kernel"
    )
    hb_tbps: Annotated[float, Range(0.01, 1000.0, "Tbps")] = Field(
        description="HB bandwidth per GPU per direction of the system measured"
    )
    source: str = ""

    @model_validator(mode="after")
    def _aligned(self) -> CustomAllReduceCurve:
        if len(self.latency_us) != len(self.ranks) or any(
            len(row) != len(self.sizes_bytes) for row in self.latency_us
        ):
            raise ValueError("latency_us needs one list per rank count, one value per size")
        for name, xs in (("ranks", self.ranks), ("sizes_bytes", self.sizes_bytes)):
            if any(b <= a for a, b in pairwise(xs)):
                raise ValueError(f"{name} must increase")
        return self

    def time_s(self, ranks: npt.ArrayLike, size_bytes: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """Seconds per all-reduce of `size_bytes` over `ranks` GPUs of one domain; inf where
        the kernel does not apply (a rank count not in `supported_ranks` or outside the
        measured ones, a message above `max_bytes`); 0 for one rank."""
        n = np.asarray(ranks, dtype=np.float64)
        d = np.asarray(size_bytes, dtype=np.float64)
        sizes = np.asarray(self.sizes_bytes, dtype=np.float64)
        per_rank = []
        for row in self.latency_us:
            lat = np.maximum.accumulate(np.asarray(row, dtype=np.float64))
            slope = (lat[-1] - lat[-2]) / (sizes[-1] - sizes[-2])
            inside = np.interp(d, sizes, lat)
            per_rank.append(np.where(d > sizes[-1], lat[-1] + slope * (d - sizes[-1]), inside))
        points = [float(r) for r in self.ranks]
        t = np.where(n == points[0], per_rank[0], np.inf)
        for lo, hi, a, b in zip(points, points[1:], per_rank, per_rank[1:], strict=False):
            w = (n - lo) / (hi - lo)  # linear in ranks between two measured counts
            t = np.where((n > lo) & (n <= hi), (1.0 - w) * a + w * b, t)
        ok = np.isin(n, self.supported_ranks) & (n >= points[0]) & (n <= points[-1])
        ok = ok & (d <= self.max_bytes)
        t = t * 1e-6
        return np.asarray(np.where(n <= 1, 0.0, np.where(ok, t, np.inf)))


class GPU(Spec):
    """One accelerator. Every performance number has a source in the catalog entry."""

    name: str = "custom"
    peak_tflops: TFLOPS = Field(description="peak dense bf16/fp16 tensor TFLOP/s")
    fp8_tflops: TFLOPS | None = Field(
        default=None, description="peak dense fp8 tensor TFLOP/s (None: no fp8 tensor cores)"
    )
    fp4_tflops: TFLOPS | None = Field(
        default=None, description="peak dense fp4 tensor TFLOP/s (None: no fp4 tensor cores)"
    )
    memory_gib: Annotated[float, Range(1.0, 65_536.0, "GiB")]
    memory_tbps: Annotated[float, Range(0.1, 1000.0, "TB/s")] = Field(
        description="HBM bandwidth, TB/s (10^12 bytes/s)"
    )
    sm_count: PositiveInt = Field(description="streaming multiprocessors (or compute units)")
    matmul_efficiency: Efficiency = Field(
        description="achievable fraction of peak on large GEMMs (measured MAMF)"
    )
    fp8_matmul_efficiency: Efficiency | None = Field(
        default=None,
        description="achievable fraction of the FP8 peak on large FP8 GEMMs (measured FP8 "
        "MAMF; None: as matmul_efficiency)",
    )
    l2_flops_per_byte: Annotated[float, Range(1.0, 10_000.0, "FLOP/byte")] = Field(
        description="tensor FLOPs per byte of L2 bandwidth: the intensity a GEMM tile needs"
    )
    memory_efficiency: Efficiency = Field(
        default=0.85, description="achievable fraction of HBM bandwidth"
    )
    elementwise_forward_efficiency: Efficiency = Field(
        default=0.58,
        description="HBM bandwidth share of fused element-wise kernels, forward (apex fused "
        "LayerNorm forward: 896 GB/s of 1555 on A100, NVIDIA/apex PR #1037)",
    )
    elementwise_backward_efficiency: Efficiency = Field(
        default=0.37,
        description="the same for backward kernels (apex fused LayerNorm backward: 572 GB/s of "
        "1555 on A100, NVIDIA/apex PR #1037)",
    )
    kernel_overhead_us: Microseconds = Field(
        default=4.0, description="launch/tail overhead added to each kernel"
    )
    nvlink_sharp: bool = Field(
        default=False,
        description="its NVLink domain reduces in the switches (NVLink SHARP: NVSwitch 3 and "
        "later, Hopper and Blackwell; A100's NVSwitch 2 and AMD Infinity Fabric have none)",
    )
    nccl_ll_max_bus_bytes_per_s: Annotated[float, Range(1e9, 1e14, "bytes/s")] | None = Field(
        default=None,
        description="NCCL's cap on the LL protocol's bus bandwidth inside one node (tuning.cc "
        "llMaxBws, one-node column, by compute capability); None: NCCL's tuning model does not "
        "apply (e.g. RCCL) and all-reduces are timed as Simple-protocol rings only",
    )
    source: str = ""
    sustained_tensor_fraction: Efficiency = Field(
        default=1.0,
        description="share of its microbenchmarked tensor throughput (MAMF GEMMs, fused "
        "attention) the GPU sustains through a training step; fitted on the published runs "
        "with leave-one-source-out error reported (docs/validation.md), 1.0 where not fitted",
    )
    attention_curves: dict[AttentionKernel, AttentionCurve] = Field(
        default_factory=dict,
        description="measured TFLOP/s per pass over sequence length of a fused attention "
        "kernel, by `Strategy.attention` name (one point: the same speed at every length)",
    )

    @model_validator(mode="after")
    def _curves_below_peak(self) -> GPU:
        for name, curve in self.attention_curves.items():
            fastest = max(max(values) for values in curve.series)
            if fastest > self.peak_tflops:
                raise ValueError(
                    f"attention_curves.{name}: {fastest:g} TFLOP/s is above the bf16 peak "
                    f"peak_tflops = {self.peak_tflops:g}"
                )
        return self

    def flash_efficiencies(
        self, generation: int, seq_tokens: npt.ArrayLike, causal_share: npt.ArrayLike = 1.0
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """(forward, backward) efficiency (of the bf16 peak) of a fused attention kernel over
        sequences of `seq_tokens`, a `causal_share` of its work under the causal mask
        (`AttentionCurve.tflops`): generation 3 is today's (cuDNN / FlashAttention-3 on
        Hopper), 2 is FlashAttention-2's, 1 the first generation's; a generation the catalog
        has no curve for takes the next newer one's, and the GEMM efficiency when none has
        one."""
        for g in range(generation, 4):
            curve = self.attention_curves.get(ATTENTION_GENERATIONS[g])
            if curve is not None:
                fwd, bwd = curve.tflops(seq_tokens, causal_share)
                return fwd / self.peak_tflops, bwd / self.peak_tflops
        gemm = np.asarray(self.matmul_efficiency, dtype=np.float64)
        return gemm, gemm


class System(Spec):
    """A cluster building block: K GPUs per HB domain, their HB and NIC bandwidths.

    Bandwidths are per GPU per direction. `hb_tbps` is C_F of the paper, `nic_gbps` × `nics_per_gpu`
    is C_S. The `*_efficiency` fields are the fraction of the line rate that collectives achieve
    (measured bus bandwidth over line rate, from nccl-tests).
    """

    name: str = "custom"
    gpu: GPU
    hb_domain: PositiveInt = Field(
        le=MAX_GPUS,
        description="K: GPUs per high-bandwidth domain (at most railplan.limits.MAX_GPUS)",
    )
    hb_tbps: Annotated[float, Range(0.01, 1000.0, "Tbps")] = Field(
        description="C_F: HB bandwidth per GPU per direction, Tbps"
    )
    nic_gbps: Annotated[float, Range(1.0, 100_000.0, "Gbps")] = Field(
        description="line rate of one NIC per direction, Gbps"
    )
    nics_per_gpu: Annotated[float, NICS_PER_GPU] = 1.0
    hb_efficiency: Efficiency = 0.8
    nic_efficiency: Efficiency = 0.92
    hb_latency_us: Microseconds = Field(default=2.0, description="per collective step")
    nic_latency_us: Microseconds = Field(default=5.0, description="per collective step")
    comm_sm_fraction: Annotated[float, Range(0.0, 1.0, high_open=True)] = Field(
        default=0.15,
        description="share of SMs a running collective occupies (NCCL: one thread block per "
        "channel, ~16 channels of 108 SMs on 8x A100; Calculon uses 0.15)",
    )
    source: str = ""
    custom_all_reduce: CustomAllReduceCurve | None = Field(
        default=None,
        description="serving frameworks' measured all-reduce kernel inside the HB domain "
        "(railplan infer); None: no measurement, NCCL's all-reduce is used",
    )
    host_cpu: HostCpu = Field(
        default="intel",
        description="the servers' CPU vendor: NCCL's tuning model caps the LL protocol's bus "
        "bandwidth across nodes and sets its network post overhead by it (tuning.cc llMaxBws, "
        "getNetOverhead); 'intel' when unstated",
    )
    nvls: bool = Field(
        default=False,
        description="all-reduces inside the HB domain use NVLink SHARP (NVSwitch 3 and later; "
        "docs/collectives.md)",
    )

    @model_validator(mode="after")
    def _nvls_needs_nvlink_sharp(self) -> System:
        if self.nvls and not self.gpu.nvlink_sharp:
            raise ValueError(
                f"nvls: {self.gpu.name}'s HB domain has no NVLink SHARP (NVSwitch 3 and later: "
                "GPUs with nvlink_sharp true, e.g. h100-sxm, h200, b200, gb200)"
            )
        return self

    @property
    def custom_all_reduce_curve(self) -> CustomAllReduceCurve | None:
        """`custom_all_reduce` where this system's HB links are at least as fast as the
        measured ones (on faster links its latencies are an upper bound), else None: on slower
        links (an `hb_tbps` override or sweep) the measurement does not hold."""
        curve = self.custom_all_reduce
        if curve is None or self.hb_tbps < curve.hb_tbps * (1.0 - 1e-9):
            return None
        return curve

    @property
    def nic_bytes_per_s(self) -> float:
        """Achievable C_S in bytes/s per GPU per direction."""
        return self.nic_line_bytes_per_s * self.nic_efficiency

    @property
    def hb_bytes_per_s(self) -> float:
        """Achievable C_F in bytes/s per GPU per direction."""
        return self.hb_line_bytes_per_s * self.hb_efficiency

    @property
    def nic_line_bytes_per_s(self) -> float:
        """C_S at line rate (all NICs of a GPU, no efficiency) in bytes/s per direction."""
        return self.nic_gbps * self.nics_per_gpu * 1e9 / 8

    @property
    def hb_line_bytes_per_s(self) -> float:
        """C_F at line rate (no efficiency) in bytes/s per GPU per direction."""
        return self.hb_tbps * 1e12 / 8
