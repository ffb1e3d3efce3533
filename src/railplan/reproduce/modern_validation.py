"""Published runs of 2023–24 stacks (data/validation/modern_runs.csv): each row as railplan
enters it, its prediction, the one fitted constant with its cross-validation, and the command
line that reproduces each prediction. The same builder predicts the held-out runs of 2025 stacks
(data/validation/dgxc2025_runs.csv: NeMo 2 recipes on H100 and GB200), which are never fitted.

One builder (`modern_run`) for every row: stated values as the CSV gives them; the software
facts a row's config states from `modern_facts.csv` (with whether its model trains with
dropout); a knob the source leaves unstated takes the fastest value that fits
(`fastest_fitting`); railplan's defaults for today's stacks otherwise (fused attention,
overlapped DP/TP/pipeline communication, fused gradient accumulation, fp32 gradient reduction).
MosaicML rows run FSDP FULL_SHARD (ZeRO-3, stated in their notes), Megatron-Core/NeMo rows the
distributed optimizer (ZeRO-1); bf16, amp_bf16 and "bf16 PURE" are bf16, "fp8 (hybrid)" is fp8;
H100 rows on DGX H100, A100 rows on DGX A100 (40 GB rows on dgx-a100-40gb), GB200 rows on a
GB200 NVL72 with the GPUs per rack the run's launcher used (`hb_domain` in the facts).
The H100's `sustained_tensor_fraction` is fitted here on the H100 rows, and its
leave-one-source-out error reported (`cross_validation`); nothing else is fitted.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from railplan.perf.estimate import Estimate, estimate
from railplan.reproduce.validation import read_rows
from railplan.specs import Model, Network, Strategy, System, load_system
from railplan.specs.build import build_system

MODERN_FILE = "modern_runs.csv"
HELDOUT_FILE = "dgxc2025_runs.csv"  # held out: predicted with the fit, never fitted on
FACTS_FILE = "modern_facts.csv"  # software facts of the rows of both, from their configs
_GPU_SYSTEM = {
    "H100-SXM-80GB": "dgx-h100",
    "H100-80GB": "dgx-h100",
    "A100-80GB": "dgx-a100",
    "A100-40GB": "dgx-a100-40gb",
    "GB200": "gb200-nvl72",
}


def _lead(value: str) -> str:
    """The stated (or assumed) value of a cell such as "1 (unstated)" or "assumed True"."""
    return value.replace("assumed", "").split("(")[0].strip()


@functools.cache
def _software_facts() -> dict[str, dict[str, str]]:
    """modern_facts.csv by row id (empty cells dropped: the default applies), read once."""
    return {f["id"]: {k: v for k, v in f.items() if v} for f in read_rows(FACTS_FILE)}


def launcher_system(name: str, hb_domain: str) -> System:
    """A published run's system: the catalog's `name`, with the GPUs per HB domain its launcher
    used where a source states them (`hb_domain`, e.g. the 16-node Slurm segments of NeMo's GB200
    executor: 64 of an NVL72's 72; empty: the catalog's K)."""
    k = int(hb_domain) if hb_domain else None
    return build_system(name, hb_domain=k, hb_tbps=None, nic_gbps=None, nics_per_gpu=None)


def modern_run(r: dict[str, str], sustained: float | None = None) -> tuple[Model, System, Strategy]:
    """Model, system and strategy of one modern_runs.csv (or dgxc2025_runs.csv) row
    (`sustained`: a Hopper GPU's sustained tensor fraction in place of the catalog's, for the
    fit)."""
    facts = _software_facts().get(r["id"], {})
    model = Model(
        name=r["model_name"],
        hidden=int(r["hidden"]),
        layers=int(r["layers"]),
        heads=int(r["heads"]),
        kv_heads=int(r["kv_heads"]),
        ffn_hidden=int(r["ffn_hidden"]),
        gated_mlp=r["gated_mlp"] == "True",
        vocab=int(r["vocab"]),
        tied_embeddings=r["tied_embeddings"] == "True",
        seq=int(r["seq"]),
        dropout=facts.get("dropout", "True") == "True",
    )
    system = launcher_system(_GPU_SYSTEM[r["gpu_type"]], facts.get("hb_domain", ""))
    if sustained is not None and system.gpu.name in HOPPER_GPUS:
        gpu = system.gpu.model_copy(update={"sustained_tensor_fraction": sustained})
        system = system.model_copy(update={"gpu": gpu})
    strategy = Strategy(
        tp=int(r["tp"]),
        pp=int(r["pp"]),
        dp=int(r["dp"]),
        ep=int(r["ep"]),
        interleave=int(_lead(r["interleave"])),
        micro_batch=int(_lead(r["micro_batch"])),
        global_batch=int(r["global_batch"]),
        recompute=_lead(r["recompute"]),
        sequence_parallel=_lead(r["sequence_parallel"]) == "True",
        zero=3 if "FULL_SHARD" in r["notes"] else 1,
        precision="fp8" if r["precision"].startswith("fp8") else "bf16",
        cp=int(r["cp"]),
        optimizer_state=facts.get("optimizer_state", "fp32"),
        grad_reduce_bytes=int(facts.get("grad_reduce_bytes", "4")),
        attention=facts.get("attention", "flash"),
        cross_entropy=facts.get("cross_entropy", "fused"),
        tp_comm_overlap=facts.get("tp_comm_overlap", "True") == "True",
        overlap_p2p=facts.get("overlap_p2p", "True") == "True",
        overlap_backward_gather=facts.get("overlap_backward_gather", "True") == "True",
        defer_embedding_wgrad=facts.get("defer_embedding_wgrad", "False") == "True",
        wgrad_deferral_limit=int(facts.get("wgrad_deferral_limit", "0")),
        fp8_param_gather=facts.get("fp8_param_gather", "False") == "True",
        first_stage_layers=int(facts.get("first_stage_layers", "0")),
        last_stage_layers=int(facts.get("last_stage_layers", "0")),
    )
    unstated = [k for k in UNSTATED_KNOBS if "unstated" in r[k] or "assumed" in r[k]]
    return model, system, fastest_fitting(model, system, strategy, unstated)


# The knobs a source may leave unstated; each such knob takes, among the values Megatron-Core
# accepts, the one that makes the run fastest while it fits in memory (a tuned production
# run): one rule for every row, never chosen per row.
UNSTATED_KNOBS = ("micro_batch", "interleave", "recompute", "sequence_parallel")
MAX_MICRO_BATCH = 16


def knob_values(model: Model, s: Strategy, knob: str) -> list[Any]:
    """The values `knob` may take for strategy `s` (the rules of the rows' Megatron-Core r0.8 and
    NeMo 24.x: the micro-batch divides each rank's sequences; interleaving needs pp > 1, an
    equal number of layers per virtual stage — unequal ones came with the 2025 layout flag,
    docs/model.md — and a micro-batch count that is a multiple of pp)."""
    per_rank = s.global_batch // s.dp
    if knob == "micro_batch":
        return [b for b in range(1, min(per_rank, MAX_MICRO_BATCH) + 1) if per_rank % b == 0]
    if knob == "interleave":
        per_stage = model.layers // s.pp
        return [1] + [v for v in range(2, per_stage + 1) if s.pp > 1 and per_stage % v == 0]
    if knob == "recompute":
        # Full recompute of every layer, or of the first N of each chunk (--recompute-method
        # block, in Megatron-LM since 2022; N at or above a chunk's layers is every layer).
        per_stage = -(-model.layers // s.pp)
        block = [{"recompute": "full", "recompute_num_layers": n} for n in range(1, per_stage)]
        return ["none", "selective", "full", *block]
    return [False, True] if s.tp > 1 else [False]


def with_knobs(s: Strategy, knobs: Sequence[str], values: Sequence[Any]) -> Strategy:
    """`s` with each knob set to its value (`knob_values`: a value that is a dict sets several
    fields, as block recompute sets `recompute` and `recompute_num_layers`)."""
    update: dict[str, Any] = {}
    for knob, value in zip(knobs, values, strict=True):
        update |= value if isinstance(value, dict) else {knob: value}
    return s.model_copy(update=update)


def fastest_fitting(model: Model, system: System, s: Strategy, unstated: list[str]) -> Strategy:
    """`s` with each knob in `unstated` set to the fastest combination that fits (the stated
    values where nothing fits)."""
    import itertools

    from railplan.perf.iteration import iteration
    from railplan.specs.arrays import from_strategies

    if not unstated:
        return s
    options = [knob_values(model, s, k) for k in unstated]
    candidates = []
    for combo in itertools.product(*options):
        c = with_knobs(s, unstated, combo)
        if c.interleave > 1 and c.micro_batches % c.pp:
            continue
        candidates.append(c)
    it = iteration(model, system, Network(), from_strategies(candidates))
    times = np.where(np.asarray(it.fits, dtype=bool), it.iteration_s, np.inf)
    return s if not np.isfinite(times).any() else candidates[int(np.argmin(times))]


@dataclass(frozen=True)
class ModernRow:
    id: str
    source: str
    measured_s: float
    estimate: Estimate

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.estimate.iteration_s - self.measured_s) / self.measured_s


HOPPER_GPUS = ("h100-sxm",)  # the GPUs of the modern rows whose sustained fraction is fitted


def modern_rows(
    sustained: float | None = None,
    sources: tuple[str, ...] | None = None,
    file: str = MODERN_FILE,
) -> list[ModernRow]:
    """Every modern run predicted as published; `sustained` replaces the fitted
    `sustained_tensor_fraction` of the Hopper GPUs (for the fit), `sources` keeps only the rows
    of those sources on those GPUs; `file`: HELDOUT_FILE for the held-out runs."""
    out = []
    for r in read_rows(file):
        source = r["id"].split("-")[0]
        if sources is not None and (
            source not in sources
            or load_system(_GPU_SYSTEM[r["gpu_type"]]).gpu.name not in HOPPER_GPUS
        ):
            continue
        model, system, strat = modern_run(r, sustained)
        e = estimate(model, system, strat, Network(), gpus=int(r["gpus"]))
        out.append(ModernRow(r["id"], source, float(r["measured_iteration_s"]), e))
    return out


MODERN_SOURCES = ("meg", "dgxc", "mosaic")
# Goal on the modern runs (issue 13): mean |error| ≤ 5 %, no row over 12 %, and
# leave-one-source-out mean ≤ 7 % for the fitted constant.
MODERN_GOAL_MEAN_PCT, MODERN_GOAL_MAX_PCT, MODERN_GOAL_LOSO_PCT = 5.0, 12.0, 7.0


def _mean_abs_error(rows: list[ModernRow]) -> float:
    return sum(abs(r.error_pct) for r in rows) / max(len(rows), 1)


def fit_sustained_fraction(sources: tuple[str, ...] = MODERN_SOURCES) -> float:
    """The Hopper sustained tensor fraction that minimizes the mean |error| of the Hopper rows
    of `sources` (bounded scalar search, HiGHS-free: scipy's Brent on [0.5, 1])."""
    from scipy.optimize import minimize_scalar

    res = minimize_scalar(
        lambda f: _mean_abs_error(modern_rows(float(f), sources)),
        bounds=(0.5, 1.0),
        method="bounded",
        options={"xatol": 0.002},
    )
    return round(float(res.x), 3)


def cross_validation() -> dict[str, Any]:
    """The fit on every source, and leave-one-source-out: fit on the others, predict the one
    left out (its Hopper rows). A change that helps in sample but not out of sample shows here."""
    fitted = fit_sustained_fraction()
    out: dict[str, Any] = {"fitted_all": fitted, "by_source": {}}
    for left in MODERN_SOURCES:
        others = tuple(s for s in MODERN_SOURCES if s != left)
        f = fit_sustained_fraction(others)
        out["by_source"][left] = {
            "fitted_on_others": f,
            "mean_abs_pct_in_sample": _mean_abs_error(modern_rows(fitted, (left,))),
            "mean_abs_pct_left_out": _mean_abs_error(modern_rows(f, (left,))),
            "mean_abs_pct_unfitted": _mean_abs_error(modern_rows(1.0, (left,))),
        }
    held = [v["mean_abs_pct_left_out"] for v in out["by_source"].values()]
    out["loso_mean_abs_pct"] = sum(held) / len(held)
    return out


def _error_summary(errors: list[float]) -> dict[str, Any]:
    """Mean and max of absolute errors (%), and how many."""
    return {
        "mean_abs_pct": sum(errors) / max(len(errors), 1),
        "max_abs_pct": max(errors, default=0.0),
        "rows": len(errors),
    }


def summary_by(rows: list[ModernRow], key: Callable[[ModernRow], str]) -> dict[str, dict[str, Any]]:
    """`_error_summary` of the rows of each `key`, in the rows' order."""
    groups: dict[str, list[float]] = {}
    for r in rows:
        groups.setdefault(key(r), []).append(abs(r.error_pct))
    return {k: _error_summary(v) for k, v in groups.items()}


def rows_summary(rows: list[ModernRow]) -> dict[str, Any]:
    """Each row (predicted iteration time vs measured) and the mean/max |error| of them all."""
    out = [
        {
            "id": r.id,
            "source": r.source,
            "measured_s": r.measured_s,
            "predicted_s": r.estimate.iteration_s,
            "error_pct": r.error_pct,
            "mfu": r.estimate.mfu,
            "memory_gib_per_gpu": r.estimate.memory_gib_per_gpu,
            "fits": r.estimate.fits,
        }
        for r in rows
    ]
    return {"rows": out, "all": _error_summary([abs(r.error_pct) for r in rows])}


def modern_summary(rows: list[ModernRow] | None = None) -> dict[str, Any]:
    """Modern rows (predicted iteration time vs measured) and mean/max |error| per source
    (dgxc, meg, mosaic) and over all rows, beside the goal (MODERN_GOAL_*)."""
    rows = modern_rows() if rows is None else rows
    summary = rows_summary(rows)
    return {
        "rows": summary["rows"],
        "by_source": summary_by(rows, lambda r: r.source),
        "all": summary["all"],
        "goal": {
            "mean_abs_pct": MODERN_GOAL_MEAN_PCT,
            "max_abs_pct": MODERN_GOAL_MAX_PCT,
            "loso_mean_abs_pct": MODERN_GOAL_LOSO_PCT,
        },
    }


def heldout_summary() -> dict[str, Any]:
    """The held-out runs of 2025 stacks (HELDOUT_FILE), as `modern_summary` gives the modern
    ones, with mean/max |error| per GPU and precision (`by_group`, e.g. "h100-sxm fp8") and no
    goal. Nothing here is fitted: the catalog's constants, as every other prediction uses them."""
    rows = modern_rows(file=HELDOUT_FILE)

    def group(r: ModernRow) -> str:
        return f"{r.estimate.system.gpu.name} {r.estimate.strategy.precision}"

    return rows_summary(rows) | {"by_group": summary_by(rows, group)}


MODERN_MODELS_DIR = "modern"  # one model file per distinct model of modern_runs.csv
HELDOUT_MODELS_DIR = "heldout"  # and of dgxc2025_runs.csv (its 405B has 8 KV heads)
# where they are shipped (package data), and that place as a checkout's working directory sees it
MODELS_PACKAGE = "railplan.data.validation"
MODELS_IN_CHECKOUT = Path("src/railplan/data/validation/models")


def model_file(model: Model, directory: str = MODERN_MODELS_DIR) -> str:
    """The path of a modern (or held-out) run's model file (name and sequence length, under
    `directory`) that `--model` reads from the current directory: relative in a checkout's
    root, where the tests and the docs run, else where the installed package holds it."""
    slug = model.name.lower().replace(" ", "-").replace(".", "p")
    name = f"{slug}-s{model.seq}.yaml"
    local = MODELS_IN_CHECKOUT / directory / name
    if local.is_file():
        return local.as_posix()
    return str(Path(str(resources.files(MODELS_PACKAGE))) / "models" / directory / name)


def model_yaml(model: Model) -> str:
    """A modern run's model as the YAML that `--model` reads (fields that differ from the
    defaults)."""
    import yaml

    data = model.model_dump(exclude_defaults=True)
    data["name"] = model.name
    return yaml.safe_dump(data, sort_keys=False)


def _catalog_k(system: System) -> int:
    """The catalog's GPUs per HB domain for `system` (a command spells out only an override)."""
    return load_system(system.name).hb_domain


def estimate_command(
    model: Model, system: System, s: Strategy, gpus: int, directory: str = MODERN_MODELS_DIR
) -> str:
    """The `railplan estimate` command line that predicts this run, every software knob
    spelled out (the resolved values of unstated ones included; its model file under
    `directory`)."""
    flags = [
        f"--model {model_file(model, directory)}",
        f"--system {system.name}",
        *([f"--hb-domain {system.hb_domain}"] if system.hb_domain != _catalog_k(system) else []),
        f"--gpus {gpus}",
        f"--tp {s.tp} --pp {s.pp} --cp {s.cp} --dp {s.dp}",
        f"--interleave {s.interleave} --micro-batch {s.micro_batch}",
        f"--global-batch {s.global_batch}",
        *([f"--first-stage-layers {s.first_stage_layers}"] if s.first_stage_layers else []),
        *([f"--last-stage-layers {s.last_stage_layers}"] if s.last_stage_layers else []),
        f"--recompute {s.recompute}"
        + (f" --recompute-num-layers {s.recompute_num_layers}" if s.recompute_num_layers else ""),
        "--sequence-parallel" if s.sequence_parallel else "--no-sequence-parallel",
        f"--zero {s.zero}",
        f"--precision {s.precision} --attention {s.attention}"
        + (" --fp8-param-gather" if s.fp8_param_gather else ""),
        f"--cross-entropy {s.cross_entropy}",
        f"--optimizer-state {s.optimizer_state} --grad-reduce-bytes {s.grad_reduce_bytes}",
        "--overlap-dp" if s.overlap_dp else "--no-overlap-dp",
        "--overlap-tp" if s.overlap_tp else "--no-overlap-tp",
        "--tp-comm-overlap" if s.tp_comm_overlap else "--no-tp-comm-overlap",
        "--overlap-p2p" if s.overlap_p2p else "--no-overlap-p2p",
        "--overlap-backward-gather"
        if s.overlap_backward_gather
        else "--no-overlap-backward-gather",
        (
            f"--defer-embedding-wgrad --wgrad-deferral-limit {s.wgrad_deferral_limit}"
            if s.defer_embedding_wgrad
            else "--no-defer-embedding-wgrad"
        ),
    ]
    return "railplan estimate " + " ".join(flags)


def modern_commands(file: str = MODERN_FILE) -> list[dict[str, str]]:
    """Per modern row (or held-out row, `file` HELDOUT_FILE): its id, source, the command that
    reproduces its prediction, and the model file that command reads."""
    directory = MODERN_MODELS_DIR if file == MODERN_FILE else HELDOUT_MODELS_DIR
    out = []
    for r in read_rows(file):
        model, system, s = modern_run(r)
        out.append(
            {
                "id": r["id"],
                "source": r["source"],
                "command": estimate_command(model, system, s, int(r["gpus"]), directory),
                "model_file": model_file(model, directory),
                "model_yaml": model_yaml(model),
            }
        )
    return out


@functools.cache
def best_published_mfu() -> dict[str, tuple[float, str]]:
    """Per catalog GPU, the highest MFU of a published BF16 training run railplan is checked
    against (the modern runs' stated MFU, Korthikanti 2022's), with the run: above it, a
    prediction is an extrapolation no measurement supports."""
    best: dict[str, tuple[float, str]] = {}

    def keep(gpu: str, mfu: float, run: str) -> None:
        if mfu > best.get(gpu, (0.0, ""))[0]:
            best[gpu] = (mfu, run)

    for r in read_rows(MODERN_FILE):
        if r["measured_mfu"] and "fp8" not in r["precision"]:
            gpu = load_system(_GPU_SYSTEM[r["gpu_type"]]).gpu.name
            keep(gpu, float(r["measured_mfu"]), r["id"])
    a100 = load_system("dgx-a100").gpu.name  # Korthikanti's DGX A100 80GB
    for r in read_rows("korthikanti2022.csv"):
        if r["mfu"]:
            keep(a100, float(r["mfu"]), f"korthikanti2022 {r['model']} {r['gpus']} GPUs")
    return best


# How far above the best published MFU of its GPU a prediction is flagged as an extrapolation.
EXTRAPOLATION_MFU = 0.05


def extrapolation(gpu: str, precision: str, mfu: float) -> str | None:
    """Why a BF16 prediction of `mfu` on `gpu` is an extrapolation (more than EXTRAPOLATION_MFU
    above the best published run of that GPU, `best_published_mfu`), or None."""
    ceiling = best_published_mfu().get(gpu)
    if ceiling is None or precision != "bf16" or mfu <= ceiling[0] + EXTRAPOLATION_MFU:
        return None
    return (
        f"MFU {mfu:.1%} is above every published {gpu} BF16 run railplan is checked against "
        f"(best {ceiling[0]:.1%}, {ceiling[1]}): an extrapolation (docs/validation.md)"
    )
