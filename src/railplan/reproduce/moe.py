"""Fig 5 of the Rail-only paper: MoE-1.3B (128 experts) on 16 DGX A100.

Paper: the expert-parallel all-to-all is uniform across GPU pairs and carries ≈ 27 % of the
bytes; rail-only forwards its cross-rail part through the HB domain.

Our configuration is DeepSpeed's published recipe for this model
(microsoft/Megatron-DeepSpeed, examples_deepspeed/MoE/ds_pretrain_gpt_1.3B_MoE128.sh): global
batch 512, sequence 2048, top-1 gating, capacity factor 1.0, activation checkpointing on (full
recompute), ZeRO stage 1, no tensor or pipeline parallelism; with 128 experts on 128 GPUs the
expert-parallel degree is 128 (one expert per GPU, `min(experts, GPUs)` in the script).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from railplan.perf.estimate import estimate
from railplan.specs import Network, Strategy, load_model, load_system
from railplan.traffic.matrix import stats, traffic
from railplan.traffic.placement import place

PAPER_EP_SHARE = 0.27
SOURCE = (
    "microsoft/Megatron-DeepSpeed examples_deepspeed/MoE/ds_pretrain_gpt_1.3B_MoE128.sh "
    "(batch 512, top-1, capacity 1.0, activation checkpointing, ZeRO-1)"
)


def fig5_strategy(ep: int = 128) -> Strategy:
    return Strategy(
        tp=1, pp=1, dp=128, ep=ep, micro_batch=4, global_batch=512, recompute="full", zero=1
    )


def fig5(heatmap: str | Path | None = None, first_gpus: int = 64) -> dict[str, Any]:
    """Traffic shares and iteration time on the three networks, ours beside the paper's."""
    model, system = load_model("moe-1.3b"), load_system("dgx-a100")
    strategy = fig5_strategy()
    t = traffic(model, strategy, place(1, 1, 128, system.hb_domain))
    st = stats(t)
    times = {
        arch: estimate(model, system, strategy, Network(architecture=arch))
        for arch in ("rail-optimized", "rail-only", "ideal")
    }
    ro, rl = times["rail-optimized"], times["rail-only"]
    files: dict[str, str] = {}
    if heatmap is not None:
        from railplan.traffic.plots import heatmap as draw

        files["heatmap"] = str(
            draw(t, heatmap, first_gpus, "MoE-1.3B, 16 DGX A100: bytes per pair")
        )
    return {
        "figure": "fig5",
        "setup": {
            "model": "moe-1.3b",
            "system": "dgx-a100",
            "gpus": 128,
            "strategy": strategy.model_dump(),
            "source": SOURCE,
        },
        "share_by_kind": st.share_by_kind,
        "pairs_with_traffic_fraction": st.pairs_with_traffic_fraction,
        "nic_cross_rail_fraction": st.nic_cross_rail_bytes / st.total_bytes,
        "comparisons": [
            {
                "claim": "EP all-to-all share of bytes",
                "paper": PAPER_EP_SHARE,
                "ours": st.share_by_kind["ep"],
            },
        ],
        "iteration_s": {arch: e.iteration_s for arch, e in times.items()},
        "ep_comm_s": {arch: e.breakdown_s["ep_comm"] for arch, e in times.items()},
        "rail_only_overhead": rl.iteration_s / ro.iteration_s - 1.0,
        "rail_only_ep_comm_overhead": rl.breakdown_s["ep_comm"] / ro.breakdown_s["ep_comm"] - 1.0,
        "files": files,
    }
