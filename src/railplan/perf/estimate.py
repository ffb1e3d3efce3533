"""The scalar API: one model, system, network and strategy → one result as plain data."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from railplan.errors import RailplanError
from railplan.limits import MAX_GPUS, check_int
from railplan.perf.iteration import Iteration, iteration
from railplan.specs import (
    Model,
    Network,
    Strategy,
    System,
    load_model,
    load_network,
    load_system,
)
from railplan.specs.arrays import check, from_strategies


@dataclass(frozen=True)
class Estimate:
    """One strategy's predicted iteration: serializes straight to JSON with `to_dict`."""

    # the specs stay out of the repr (the system alone prints ~3 KB): a notebook shows the result
    model: Model = field(repr=False)
    system: System = field(repr=False)
    network: Network = field(repr=False)
    strategy: Strategy
    iteration_s: float
    mfu: float
    hfu: float
    memory_gib_per_gpu: float
    fits: bool
    breakdown_s: dict[str, float]
    memory_breakdown_gib: dict[str, float]
    #: the pipeline rank whose memory `memory_gib_per_gpu` is (0 = the first stage)
    memory_peak_rank: int
    model_tflops_per_gpu: float
    hardware_tflops_per_gpu: float
    group_layout: dict[str, dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.name,
            "system": self.system.name,
            "network": self.network.model_dump(),
            "gpus": self.strategy.gpus,
            "strategy": self.strategy.model_dump(),
            "iteration_s": self.iteration_s,
            "mfu": self.mfu,
            "hfu": self.hfu,
            "model_tflops_per_gpu": self.model_tflops_per_gpu,
            "hardware_tflops_per_gpu": self.hardware_tflops_per_gpu,
            "memory_gib_per_gpu": self.memory_gib_per_gpu,
            "memory_breakdown_gib": self.memory_breakdown_gib,
            "memory_peak_rank": self.memory_peak_rank,
            "fits": self.fits,
            "breakdown_s": self.breakdown_s,
            "group_layout": self.group_layout,
        }

    def straddling_groups(self) -> list[str]:
        """Kinds of group whose worst member split over HB domains is uneven or crosses rails:
        a size that does not divide the HB domain (see `railplan.perf.layout`)."""
        return [
            kind
            for kind, g in self.group_layout.items()
            if g["domains"] > 1 and g["cross_rail"]  # an uneven split also crosses rails
        ]


def estimate(
    model: Model | str,
    system: System | str,
    strategy: Strategy | dict[str, Any],
    network: Network | str | None = None,
    gpus: int | None = None,
) -> Estimate:
    """Predict one training iteration. Raises RailplanError (one line) on invalid input."""
    m, sy = load_model(model), load_system(system)
    if isinstance(strategy, dict):  # a mapping of Strategy's fields, as a YAML file holds them
        strategy = Strategy.parse(strategy)
    if not isinstance(strategy, Strategy):
        raise RailplanError(
            "strategy", f"give a Strategy or a mapping of its fields; got {type(strategy).__name__}"
        )
    net = load_network(network)  # also an architecture name, as the CLI's --network takes it
    if gpus is not None:
        gpus = check_int("gpus", gpus, 1, MAX_GPUS)
    arrays = from_strategies(strategy)
    check(m, arrays, gpus)
    it: Iteration = iteration(m, sy, net, arrays)
    hybrid = int(arrays.replicas) > 1  # hybrid sharding (zero_shard)
    experts = m.moe_layers > 0 and strategy.ep > 1
    present = {  # kinds of group this run has besides tp, dp and pp
        "ep": experts,
        "expert_dp": experts,
        # the routed experts' own tensor-parallel groups, where they differ from tp
        "etp": m.moe_layers > 0 and int(arrays.etp) not in (1, strategy.tp),
        # tied embeddings, or the embedding copy of the multi-token prediction layers
        "embedding": m.tied_embeddings or m.mtp_layers > 0,
        "dp_shard": hybrid,
        "dp_replica": hybrid,
        "expert_dp_shard": experts and hybrid,
        "expert_dp_replica": experts and hybrid,
    }
    n = strategy.gpus
    mem = it.memory
    gib = float(1 << 30)
    return Estimate(
        model=m,
        system=sy,
        network=net,
        strategy=strategy,
        iteration_s=float(it.iteration_s),
        mfu=float(it.mfu),
        hfu=float(it.hfu),
        memory_gib_per_gpu=float(it.memory_gib_per_gpu),
        fits=bool(it.fits),
        breakdown_s={k: float(v) for k, v in it.breakdown_s.items()},
        memory_breakdown_gib={
            "weights": float(mem.weights_bytes) / gib,
            "gradients": float(mem.gradients_bytes) / gib,
            "optimizer": float(mem.optimizer_bytes) / gib,
            "activations": float(mem.activations_bytes) / gib,
            "reserved": float(mem.reserved_bytes) / gib,
            "zero3_gathered": float(mem.gathered_bytes) / gib,
        },
        memory_peak_rank=int(mem.peak_rank),
        model_tflops_per_gpu=float(it.model_flops) / float(it.iteration_s) / n / 1e12,
        hardware_tflops_per_gpu=float(it.hardware_flops) / float(it.iteration_s) / n / 1e12,
        group_layout={
            kind: {
                "members": round(float(sh.x * sh.y)),  # y = members / x (railplan.perf.layout)
                "fewest_per_domain": int(sh.x),
                "domains": int(sh.domains),
                "cross_rail": bool(sh.cross_rail),
            }
            for kind, sh in it.groups.items()
            if present.get(kind, True) and round(float(sh.x * sh.y)) > 1
        },
    )
