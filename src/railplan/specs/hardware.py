"""Hardware specs: the GPU, and the system (HB domain + NIC domain) built from it."""

from __future__ import annotations

from typing import Self

from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt, model_validator

from railplan.specs.base import Spec


class GPU(Spec):
    """One accelerator. Every performance number has a source in the catalog entry."""

    name: str = "custom"
    peak_tflops: PositiveFloat = Field(description="peak dense bf16/fp16 tensor TFLOP/s")
    memory_gib: PositiveFloat
    memory_tbps: PositiveFloat = Field(description="HBM bandwidth, TB/s (10^12 bytes/s)")
    sm_count: PositiveInt = Field(description="streaming multiprocessors (or compute units)")
    matmul_efficiency: float = Field(
        gt=0, le=1, description="achievable fraction of peak on large GEMMs (measured MAMF)"
    )
    l2_flops_per_byte: PositiveFloat = Field(
        description="tensor FLOPs per byte of L2 bandwidth: the intensity a GEMM tile needs"
    )
    memory_efficiency: float = Field(
        default=0.85, gt=0, le=1, description="achievable fraction of HBM bandwidth"
    )
    elementwise_forward_efficiency: float = Field(
        default=0.58,
        gt=0,
        le=1,
        description="HBM bandwidth share of fused element-wise kernels, forward (apex fused "
        "LayerNorm forward: 896 GB/s of 1555 on A100, NVIDIA/apex PR #1037)",
    )
    elementwise_backward_efficiency: float = Field(
        default=0.37,
        gt=0,
        le=1,
        description="the same for backward kernels (apex fused LayerNorm backward: 572 GB/s of "
        "1555 on A100, NVIDIA/apex PR #1037)",
    )
    kernel_overhead_us: NonNegativeFloat = Field(
        default=4.0, description="launch/tail overhead added to each kernel"
    )
    source: str = ""


class System(Spec):
    """A cluster building block: K GPUs per HB domain, their HB and NIC bandwidths.

    Bandwidths are per GPU per direction. `hb_tbps` is C_F of the paper, `nic_gbps` × `nics_per_gpu`
    is C_S. The `*_efficiency` fields are the fraction of the line rate that collectives achieve
    (measured bus bandwidth over line rate, from nccl-tests).
    """

    name: str = "custom"
    gpu: GPU
    hb_domain: PositiveInt = Field(description="K: GPUs per high-bandwidth domain")
    hb_tbps: PositiveFloat = Field(description="C_F: HB bandwidth per GPU per direction, Tbps")
    nic_gbps: PositiveFloat = Field(description="line rate of one NIC per direction, Gbps")
    nics_per_gpu: PositiveFloat = 1.0
    hb_efficiency: float = Field(default=0.8, gt=0, le=1)
    nic_efficiency: float = Field(default=0.92, gt=0, le=1)
    hb_latency_us: NonNegativeFloat = Field(default=2.0, description="per collective step")
    nic_latency_us: NonNegativeFloat = Field(default=5.0, description="per collective step")
    comm_sm_fraction: float = Field(
        default=0.15,
        ge=0,
        lt=1,
        description="share of SMs a running collective occupies (NCCL: one thread block per "
        "channel, ~16 channels of 108 SMs on 8x A100; Calculon uses 0.15)",
    )
    source: str = ""

    @model_validator(mode="after")
    def _check(self) -> Self:
        return self

    @property
    def nic_bytes_per_s(self) -> float:
        """Achievable C_S in bytes/s per GPU per direction."""
        return self.nic_gbps * self.nics_per_gpu * 1e9 / 8 * self.nic_efficiency

    @property
    def hb_bytes_per_s(self) -> float:
        """Achievable C_F in bytes/s per GPU per direction."""
        return self.hb_tbps * 1e12 / 8 * self.hb_efficiency
