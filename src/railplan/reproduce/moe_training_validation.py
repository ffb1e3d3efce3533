"""Published MoE training runs (data/validation/moe_training_runs.csv) against `estimate`,
held out: nothing is fitted to them, and they are not among the modern rows whose errors set
issue 13's goals or fit the H100's sustained fraction.

NVIDIA's dgxc-benchmarking DeepSeek-V3 recipe (NeMo 25.04.01, BF16, on H100 and GB200) is
entered with every setting its launch script and NeMo's performance script state (the CSV's
header cites them): the catalog's deepseek-v3 (MLA, 1 shared + 256 routed experts, top 8, three
dense layers, one MTP layer), Megatron-Core's all-to-all dispatcher, selective recompute of the
MLA up-projections (of the core attention on GB200), the distributed optimizer with fp32
gradient reduction overlapped with the backward pass and the precision-aware optimizer's
remainders of the FP32 master weights (`fp32-remainder`), sequence parallelism, TP communication not
overlapped with the forward GEMMs (no userbuffers), the uneven pipeline layout and Transformer
Engine's loss (`cross_entropy_fusion_impl` te). NeMo drops
tokens over a capacity factor of 1.0 and pads to it: with the uniform routing railplan assumes,
every expert then receives exactly its share, as the catalog's dropless routing gives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from railplan.perf.estimate import estimate
from railplan.reproduce.modern_validation import (
    ModernRow,
    launcher_system,
    rows_summary,
    summary_by,
)
from railplan.reproduce.validation import read_rows
from railplan.specs import Network, Strategy, System
from railplan.specs.catalog import load_model

DATA = "moe_training_runs.csv"
SOURCE = (
    "NVIDIA dgxc-benchmarking, NeMo 25.04.01, DeepSeek-V3 BF16 "
    "(data/validation/moe_training_runs.csv)"
)


@dataclass(frozen=True)
class MoeRun(ModernRow):
    """A row, predicted (`ModernRow`: its error), and the command that predicts it."""

    command: str


def strategy(r: dict[str, str]) -> Strategy:
    """The row's strategy, every field its sources state."""
    return Strategy(
        tp=int(r["tp"]),
        pp=int(r["pp"]),
        dp=int(r["dp"]),
        ep=int(r["ep"]),
        expert_tp=int(r["etp"]),
        interleave=int(r["interleave"]),
        micro_batch=int(r["micro_batch"]),
        global_batch=int(r["global_batch"]),
        first_stage_layers=int(r["first_stage_layers"]),
        last_stage_layers=int(r["last_stage_layers"]),
        recompute="selective",
        recompute_modules=r["recompute_modules"].split(","),
        sequence_parallel=True,
        zero=1,
        precision=r["precision"],
        # NeMo's performance scripts turn Megatron-Core's precision-aware optimizer on for BF16
        # (`scripts/performance/utils.py` at 7a8f1cc7: use_precision_aware_optimizer), which
        # with Transformer Engine >= 2.1 keeps the master weights' 16-bit remainders
        # (`megatron/core/optimizer/__init__.py` at core_v0.12.1: store_param_remainders):
        # FP32 moments and 2 bytes per parameter beside the BF16 weight
        optimizer_state="fp32-remainder",
        grad_reduce_bytes=4,
        overlap_dp=True,
        overlap_tp=True,
        tp_comm_overlap=False,
        ep_dispatch="alltoall",
        cross_entropy="te",
        # `pretrain_deepseek_v3.py` sets `moe_router_dtype = 'fp32'`; NeMo's `DeepSeekConfig`
        # (`nemo/collections/llm/gpt/model/deepseek.py`) `moe_shared_expert_overlap = True`
        router_dtype="fp32",
        shared_expert_overlap=True,
    )


def system(r: dict[str, str]) -> System:
    """The row's system: the catalog's, with the run's GPUs per HB domain where its launcher
    fixes them (`hb_domain`: the 16-node Slurm segments of NeMo's GB200 executor)."""
    return launcher_system(r["system"], r["hb_domain"])


def command(r: dict[str, str]) -> str:
    """The `railplan estimate` command line that predicts the row."""
    domain = f"--hb-domain {r['hb_domain']} " if r["hb_domain"] else ""
    return (
        f"railplan estimate --model {r['model']} --system {r['system']} {domain}--gpus {r['gpus']} "
        f"--tp {r['tp']} --pp {r['pp']} --dp {r['dp']} --ep {r['ep']} --expert-tp {r['etp']} "
        f"--interleave {r['interleave']} --micro-batch {r['micro_batch']} "
        f"--global-batch {r['global_batch']} --first-stage-layers {r['first_stage_layers']} "
        f"--last-stage-layers {r['last_stage_layers']} --recompute selective "
        f"--recompute-modules {r['recompute_modules']} --sequence-parallel --zero 1 "
        f"--precision {r['precision']} --optimizer-state fp32-remainder --grad-reduce-bytes 4 "
        "--overlap-dp --overlap-tp --no-tp-comm-overlap --ep-dispatch alltoall --cross-entropy te "
        "--router-dtype fp32 --shared-expert-overlap"
    )


def moe_summary() -> dict[str, Any]:
    """The held-out MoE training rows as `modern_validation.heldout_summary` gives the dense
    ones (each row predicted, mean/max |error| over all and per GPU, `by_group`), and the
    command that predicts each."""
    runs = rows()
    summary = rows_summary(list(runs))
    for row, run in zip(summary["rows"], runs, strict=True):
        row["command"] = run.command
    return summary | {"by_group": summary_by(list(runs), lambda r: r.estimate.system.gpu.name)}


def moe_commands() -> list[dict[str, str]]:
    """Per held-out MoE row: its id, source and the command that predicts it (no estimate)."""
    return [{"id": r["id"], "source": SOURCE, "command": command(r)} for r in read_rows(DATA)]


def rows() -> list[MoeRun]:
    """Every row, predicted."""
    out = []
    for r in read_rows(DATA):
        e = estimate(
            load_model(r["model"]),
            system(r),
            strategy(r),
            Network(),
            gpus=int(r["gpus"]),
        )
        source = r["id"].split("-")[0]
        out.append(MoeRun(r["id"], source, float(r["measured_s"]), e, command(r)))
    return out
