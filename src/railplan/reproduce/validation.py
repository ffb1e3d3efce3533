"""Predict published Megatron-LM runs of 2021–22 and compare: nothing here is fitted to them
(the 2023–24 runs are `railplan.reproduce.modern_validation`).

Rows: Korthikanti et al. 2022 Tables 3/5 (iteration time) and Narayanan et al. 2021 Table 1
(achieved TFLOP/s per GPU), both on DGX A100 80GB (Selene). Software facts of those runs (not
tuned), from the papers and the Megatron-LM code of the time:
- the data-parallel gradient all-reduce ran after the backward pass (Megatron-LM overlapped it
  only from 2023, `--overlap-grad-reduce`; Korthikanti §6.3 says so for the 2,240-GPU run), no
  ZeRO; pipeline sends were blocking (batch_isend_irecv + cuda synchronize) and, without
  sequence parallelism, scattered over the tp ranks (`scatter_gather_tensors_in_pipeline`,
  Narayanan §4.1: `p2p_scatter_gather=True`);
- backward TP all-reduces overlapped the weight-gradient GEMM in Korthikanti's runs without
  sequence parallelism (§6.2); Megatron then disabled that asynchronous all-reduce when
  sequence parallelism was on (megatron/arguments.py of the time), and Narayanan's 2021 runs
  predate it (examples/sc21 pins the 20.12 container);
- Korthikanti trained with fp32 gradient reduction (bf16), Narayanan in fp16 (`--fp16` in
  examples/sc21) with fp16 gradient reduction;
- gradients were accumulated in a separate pass every micro-batch (local DDP
  `param.main_grad.add_(param.grad)`): the linear layers of 2021 and of the early-2022 code in
  which sequence parallelism is still `model_parallel_memory_opt` (commit 02bb1f5) return the
  weight gradient from a plain GEMM; fused accumulation (`--gradient-accumulation-fusion`)
  came later;
- attention was unfused: the score matrix was written to HBM, softmax and dropout ran as
  separate kernels (Megatron's fused softmax), and the scores were kept for backward;
- so was the loss: `mpu/cross_entropy.py`'s `vocab_parallel_cross_entropy` on the logits cast
  to fp32 (`--fp16-lm-cross-entropy` off), each step a separate kernel.
"""

from __future__ import annotations

import csv
from dataclasses import asdict, dataclass
from importlib import resources
from typing import Any

from railplan.perf.estimate import estimate
from railplan.specs import Model, Network, Strategy, load_system
from railplan.workload.flops import narayanan_flops

GOAL_MEAN_PCT = 3.0
GOAL_MAX_PCT = 8.0
CALCULON_KORTHIKANTI = (3.65, 8.87)  # mean, max % error (Isaev et al. 2023, Calculon)


@dataclass(frozen=True)
class Row:
    source: str
    label: str
    metric: str  # "iteration_s" or "tflops_per_gpu"
    measured: float
    predicted: float
    mfu: float
    hfu: float
    paper_mfu: float | None
    paper_hfu: float | None

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.predicted - self.measured) / self.measured


def read_rows(name: str) -> list[dict[str, str]]:
    text = resources.files("railplan.data.validation").joinpath(name).read_text()
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    return list(csv.DictReader(lines))


def _model(r: dict[str, str], name: str) -> Model:
    return Model(
        name=name,
        hidden=int(r["hidden"]),
        layers=int(r["layers"]),
        heads=int(r["heads"]),
        seq=int(r["seq"]),
        vocab=int(r["vocab"]),
    )


def _korthikanti_run(r: dict[str, str]) -> tuple[Model, Strategy]:
    selective = r["recompute"] == "selective+sp"
    return _model(r, r["model"]), Strategy(
        tp=int(r["tp"]),
        pp=int(r["pp"]),
        dp=int(r["dp"]),
        interleave=int(r["interleave"]),
        micro_batch=int(r["micro_batch"]),
        global_batch=int(r["global_batch"]),
        recompute="selective" if selective else "full",
        sequence_parallel=selective,
        overlap_dp=False,
        overlap_tp=not selective,
        tp_comm_overlap=False,  # userbuffers came in 2023
        overlap_p2p=False,
        p2p_scatter_gather=True,  # scatter_gather_tensors_in_pipeline, on in 2022's code
        grad_reduce_bytes=4,
        grad_accumulation_fusion=False,  # see the module doc
        attention="unfused",
        cross_entropy="unfused",  # Megatron-LM's vocab_parallel_cross_entropy of the time
    )


def _narayanan_run(r: dict[str, str]) -> tuple[Model, Strategy]:
    layers, pp, tp = int(r["layers"]), int(r["pp"]), int(r["tp"])
    lps = r["layers_per_virtual_stage"]
    return _model(r, f"gpt-{r['params_b']}b"), Strategy(
        tp=tp,
        pp=pp,
        dp=int(r["gpus"]) // (tp * pp),
        interleave=(layers // pp) // int(lps) if lps else 1,
        micro_batch=int(r["micro_batch"]),
        global_batch=int(r["global_batch"]),
        recompute="full",
        overlap_dp=False,
        overlap_tp=False,
        tp_comm_overlap=False,
        overlap_p2p=False,
        p2p_scatter_gather=True,  # the paper's §4.1 scatter/gather optimization
        grad_reduce_bytes=2,
        grad_accumulation_fusion=False,
        attention="unfused",
        cross_entropy="unfused",  # Megatron-LM's vocab_parallel_cross_entropy of the time
    )


def korthikanti_rows() -> list[Row]:
    system = load_system("dgx-a100")
    out = []
    for r in read_rows("korthikanti2022.csv"):
        model, strat = _korthikanti_run(r)
        e = estimate(model, system, strat, Network(), gpus=int(r["gpus"]))
        out.append(
            Row(
                "korthikanti2022",
                f"{r['model']} {r['recompute']} {r['gpus']} GPUs",
                "iteration_s",
                float(r["iteration_s"]),
                e.iteration_s,
                e.mfu,
                e.hfu,
                float(r["mfu"]) if r["mfu"] else None,
                float(r["hfu"]) if r["hfu"] else None,
            )
        )
    return out


def narayanan_rows() -> list[Row]:
    system = load_system("dgx-a100")
    out = []
    for r in read_rows("narayanan2021_table1.csv"):
        model, strat = _narayanan_run(r)
        e = estimate(model, system, strat, Network(), gpus=strat.gpus)
        out.append(
            Row(
                "narayanan2021",
                f"{r['params_b']}B {strat.gpus} GPUs",
                "tflops_per_gpu",
                float(r["achieved_tflops"]),
                e.hardware_tflops_per_gpu,
                e.mfu,
                e.hfu,
                None,
                None,
            )
        )
    return out


def layer_rows() -> list[dict[str, Any]]:
    """Korthikanti Table 4: one 22B layer's forward and backward time (a diagnostic that
    separates per-layer compute from pipeline and data-parallel effects)."""
    from railplan.perf.comm_time import links, tp_comm_times
    from railplan.perf.layer_time import layer_times
    from railplan.perf.layout import megatron_shapes
    from railplan.specs.arrays import from_strategies

    system = load_system("dgx-a100")
    model = Model(name="gpt-22b", hidden=6144, layers=48, heads=64, seq=2048, vocab=51200)
    out = []
    for r in read_rows("korthikanti2022_table4.csv"):
        strat = Strategy(
            tp=8,
            micro_batch=4,
            global_batch=4,
            recompute=r["recompute"],
            sequence_parallel=r["sequence_parallel"] == "true",
            overlap_dp=False,
            overlap_tp=r["sequence_parallel"] != "true",
            tp_comm_overlap=False,
            attention="unfused",
        )
        arrays = from_strategies(strat)
        lt = layer_times(model, system, arrays)
        lk = links(system, Network(), arrays.gpus.astype(float))
        tp_group = megatron_shapes(arrays.tp, arrays.dp, arrays.pp, arrays.ep, lk.hb_domain)["tp"]
        tpc = tp_comm_times(model, lk, arrays, lt, tp_group)
        fwd = float(lt["forward"] + tpc["forward"])
        bwd = float(lt["backward"] + lt["recompute"] + tpc["recompute"] + tpc["backward"])
        out.append(
            {
                "experiment": r["experiment"],
                "measured_forward_ms": float(r["forward_ms"]),
                "predicted_forward_ms": fwd * 1e3,
                "measured_backward_ms": float(r["backward_ms"]),
                "predicted_backward_ms": bwd * 1e3,
            }
        )
    return out


def _pipeline_key(model: Model, s: Strategy) -> tuple[int, ...]:
    """What one pipeline runs: the model's shape, tp, pp, chunks, micro-batch size and count."""
    return (model.hidden, model.layers, s.tp, s.pp, s.interleave, s.micro_batch, s.micro_batches)


def cross_paper_rows(
    k_rows: list[Row] | None = None, n_rows: list[Row] | None = None
) -> list[dict[str, Any]]:
    """Runs of the two papers with the same pipeline (model, tp, pp, chunks, micro-batch and
    micro-batches per pipeline; full recompute), only data parallelism and the year differing:
    Korthikanti's measured time beside the time Narayanan's TFLOP/s implies (their eq. 3), and
    ours for both. A check on the data: the model sees the same work in both."""
    k_rows = korthikanti_rows() if k_rows is None else k_rows
    n_rows = narayanan_rows() if n_rows is None else n_rows
    k_index = {}
    for r, row in zip(read_rows("korthikanti2022.csv"), k_rows, strict=True):
        if r["recompute"] == "full":
            k_index[_pipeline_key(*_korthikanti_run(r))] = (r["model"], row)
    out = []
    for r, row in zip(read_rows("narayanan2021_table1.csv"), n_rows, strict=True):
        model, strat = _narayanan_run(r)
        match = k_index.get(_pipeline_key(model, strat))
        if match is None:
            continue
        name, krow = match
        flops = narayanan_flops(model, float(strat.global_batch)) / (strat.gpus * 1e12)
        implied_s = flops / row.measured
        out.append(
            {
                "model": name,
                "korthikanti2022_measured_s": krow.measured,
                "narayanan2021_implied_s": implied_s,
                "measured_ratio": implied_s / krow.measured,
                "korthikanti2022_predicted_s": krow.predicted,
                "narayanan2021_predicted_s": flops / row.predicted,
                "narayanan_dp": strat.dp,
            }
        )
    return out


def validate() -> dict[str, Any]:
    """Every row with its error, and the summary per source and overall; the modern runs
    (`railplan.reproduce.modern_validation`) as a third table, the held-out runs of 2025
    stacks as a fourth, and the held-out MoE training runs (`moe_training_validation`) as a
    fifth."""
    from railplan.reproduce.modern_validation import heldout_summary, modern_summary
    from railplan.reproduce.moe_training_validation import moe_summary

    k_rows, n_rows = korthikanti_rows(), narayanan_rows()
    rows = k_rows + n_rows

    def summary(sel: list[Row]) -> dict[str, float]:
        errs = [abs(r.error_pct) for r in sel]
        return {"mean_abs_pct": sum(errs) / len(errs), "max_abs_pct": max(errs), "rows": len(sel)}

    return {
        "rows": [asdict(r) | {"error_pct": r.error_pct} for r in rows],
        "korthikanti2022": summary([r for r in rows if r.source == "korthikanti2022"]),
        "narayanan2021": summary([r for r in rows if r.source == "narayanan2021"]),
        "all": summary(rows),
        "layer_korthikanti2022_table4": layer_rows(),
        "same_pipeline_both_papers": cross_paper_rows(k_rows, n_rows),
        "goal": {"mean_abs_pct": GOAL_MEAN_PCT, "max_abs_pct": GOAL_MAX_PCT},
        "modern_runs": modern_summary(),
        "heldout_runs": heldout_summary(),
        "moe_runs": moe_summary(),
        "calculon_korthikanti": {
            "mean_abs_pct": CALCULON_KORTHIKANTI[0],
            "max_abs_pct": CALCULON_KORTHIKANTI[1],
        },
    }
