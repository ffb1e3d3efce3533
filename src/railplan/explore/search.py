"""Strategy search: every valid parallelization of a job, evaluated in chunks by `iteration`.

The candidates are built with numpy, never one Python call per configuration:

1. *rows* — the valid (tp, cp, pp, micro_batch, interleave, zero, ep) tuples: tp divides gpus,
   heads and kv_heads; cp splits the sequence into 2·cp chunks; pp is at most the layers (layers
   spread so that stages differ by at most one: `strategies.stage_layers`); dp =
   gpus/(tp·cp·pp) divides the global batch; the micro-batch divides the per-replica batch; the
   interleave divides the model's layers and is at most the layers of the smallest stage
   (chunks may hold unequal layers; with `uneven_pp` off, as the 2021-22 code, it divides the
   layers of every stage; when > 1, it needs pp > 1 and a multiple of pp micro-batches);
   ZeRO stages with dp·cp = 1 are skipped (identical to no ZeRO); ZeRO-2/3 run per micro-batch
   (once per step they equal ZeRO-1). Fixed values (`SearchSpace`) narrow every dimension.
2. *columns* — the (recompute, sequence_parallel) pairs; sequence parallelism with tp = 1 is
   skipped (identical to none), and MoE candidates with tp > 1 run it (Megatron-Core's MoE
   layer raises in training without it) wherever the space allows it. A row meets only the
   columns it can use (`row_columns`), so nothing evaluated is thrown away.

Rows and columns go through the model as a 2-D broadcast (rows × columns), so every quantity
that depends only on a row (the GEMM shapes depend on tp and the micro-batch) is computed once
per row. The model is `railplan.perf.iteration.iteration`, the same function `estimate` uses for one
strategy; the search never has a copy of it.

Result: the fastest strategy that fits in memory, the `top` fastest, and the Pareto set of
iteration time vs memory per GPU (no other fitting strategy is both faster and smaller).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from railplan.errors import RailplanError
from railplan.limits import MAX_GLOBAL_BATCH, MAX_GPUS, MAX_TOP, as_int, check_int
from railplan.perf.iteration import iteration
from railplan.specs import (
    ATTENTION_CODES,
    CROSS_ENTROPY_CODES,
    EP_DISPATCH_CODES,
    OPTIMIZER_STATE_CODES,
    PIPELINE_SCHEDULE_CODES,
    PRECISION_CODES,
    RECOMPUTE_CODES,
    ROUTER_DTYPE_CODES,
    Job,
    Model,
    Network,
    Strategy,
    System,
)
from railplan.specs.arrays import (
    FULL,
    SELECTIVE,
    BoolArray,
    FloatArray,
    IntArray,
    StrategyArrays,
    dualpipev_allowed,
    expert_dp_ranks,
    from_strategies,
    module_bits,
    overlap_ep_allowed,
    resolve_expert_tp,
    shared_expert_overlap_changes,
    shared_expert_overlap_rules,
    stage_layer_counts,
    validity,
)
from railplan.specs.strategy import RECOMPUTE_MODULE_BITS
from railplan.workload.memory import GIB

DEFAULT_MODULES = RECOMPUTE_MODULE_BITS["core_attn"]  # Megatron-Core's --recompute-modules

CHUNK_ELEMENTS = 16_384  # rows × columns per call of `iteration`: fits the CPU caches


@dataclass(frozen=True)
class SearchSpace:
    """Which strategy fields the search varies. `None` means every value the rules allow.

    `zero` lists the ZeRO stages tried; `overlap_dp` and `grad_reduce_bytes` are fixed settings
    of the software stack rather than choices (overlapping the gradient reduction never hurts).
    `uneven_pp` lets pp be any value up to the layers and the virtual stages hold unequal
    numbers of layers (today's Megatron-Core); False, as the 2021-22 code: pp divides the layers
    and interleaving builds equal chunks.
    """

    tp: tuple[int, ...] | None = None
    pp: tuple[int, ...] | None = None
    micro_batch: tuple[int, ...] | None = None
    interleave: tuple[int, ...] | None = None
    ep: tuple[int, ...] | None = None
    recompute: tuple[str, ...] = ("none", "selective", "full")
    sequence_parallel: tuple[bool, ...] = (False, True)
    zero: tuple[int, ...] = (0, 1, 2, 3)
    overlap_dp: bool = True
    grad_reduce_bytes: int = 4
    cp: tuple[int, ...] | None = None
    dp: tuple[int, ...] | None = None
    uneven_pp: bool = True  # pp need not divide the layers
    attention: str = "flash"
    # bf16 by default (today's common practice); ("bf16", "fp8") searches both where the GPU
    # has fp8 tensor cores
    precision: tuple[str, ...] = ("bf16",)
    optimizer_state: str = "fp32"
    # the loss kernels (Strategy.cross_entropy)
    cross_entropy: str = "fused"
    # TE userbuffers for the forward TP collectives (a 2023+ stack; the paper's model has none)
    tp_comm_overlap: bool = True
    # Megatron-LM 2021-22's scatter/gather of pipeline sends without sequence parallelism
    # (Strategy.p2p_scatter_gather; off, as in Megatron-Core)
    p2p_scatter_gather: bool = False
    # Megatron-Core defer_embedding_wgrad_compute / wgrad_deferral_limit (off by default, as
    # in Megatron-Core; no effect where pp = 1)
    defer_embedding_wgrad: bool = False
    wgrad_deferral_limit: int = 0
    # Megatron-Core --overlap-moe-expert-parallel-comm, on every candidate that allows it (ep > 1,
    # interleaved when pp > 1, no full recompute); off by default, as in Megatron-Core
    overlap_ep: bool = False
    # what the selective-recompute candidates rerun (Strategy.recompute_modules; Megatron-Core's
    # default, core_attn, unless given); the none and full candidates are unaffected
    recompute_modules: tuple[str, ...] = ("core_attn",)
    # the full-recompute candidates: every layer (0) and/or block recompute of the first N
    # layers of each model chunk (Strategy.recompute_num_layers), one candidate per value
    recompute_num_layers: tuple[int, ...] = (0,)
    # "dualpipev": every candidate DualPipeV can run (two chunks per rank, m ≥ 2·pp) runs it
    # instead of the interleaved schedule; "1f1b" (default): Megatron's schedules only
    pipeline_schedule: str = "1f1b"
    # interleaved candidates whose micro-batch count is not a multiple of pp take the smallest
    # micro-batch group that lets them interleave (Strategy.microbatch_group; Megatron-Core's
    # --microbatch-group-size-per-virtual-pipeline-stage); False: they are left out (the
    # 2021-22 code had no groups)
    microbatch_groups: bool = True
    # hybrid sharding (Strategy.zero_shard) tried on the ZeRO candidates: 0 (default) shards
    # over every dp·cp rank; N > 0 also tries shard groups of N where N divides dp·cp
    zero_shard: tuple[int, ...] = (0,)
    # Megatron-Core --fp8-param-gather on the FP8 candidates (Strategy.fp8_param_gather)
    fp8_param_gather: bool = False
    # DeepEP's FP8 dispatch on the FP8 candidates that dispatch with deepep
    # (Strategy.fp8_dispatch)
    fp8_dispatch: bool = False
    # MoE token dispatch (Strategy.ep_dispatch): alltoall (default) | deepep
    ep_dispatch: str = "alltoall"
    # the MoE gating GEMM's precision (Strategy.router_dtype): bf16 | fp32
    router_dtype: str = "bf16"
    # the shared experts beside the all-to-alls (Strategy.shared_expert_overlap)
    shared_expert_overlap: bool = False
    # the routed experts' tensor-parallel degrees tried on MoE models (Strategy.expert_tp):
    # 0 = tp (Megatron-Core's default), N where it divides tp (N = tp is 0); (0, 1), the
    # default, also tries whole experts on one GPU (expert_tp 1, common in today's MoE recipes)
    expert_tp: tuple[int, ...] = (0, 1)
    # pipelines whose stage with the LM head (the last; rank 0 with DualPipeV) holds fewer
    # layers than the others, which split the rest equally (Strategy.last_stage_layers /
    # first_stage_layers; Megatron-Core --decoder-last-pipeline-num-layers, the balancing its
    # pipeline layouts do for the loss and MTP layers): tried beside the even split. None (the
    # default): where the model has multi-token prediction layers, whose module and second
    # head sit on that stage
    lighter_head_stage: bool | None = None

    def __post_init__(self) -> None:
        self._as_tuples()
        for name in ("tp", "pp", "micro_batch", "interleave", "ep", "cp", "dp"):
            values = getattr(self, name)
            if values is not None and (not values or min(values) < 1):
                raise RailplanError(name, "give positive integers")
        for r in self.recompute:
            if r not in RECOMPUTE_CODES:
                raise RailplanError("recompute", f"{r!r} is not one of none, selective, full")
        if not self.recompute or not self.sequence_parallel or not self.zero:
            raise RailplanError("space", "recompute, sequence_parallel and zero need a value")
        if any(z not in (0, 1, 2, 3) for z in self.zero):
            raise RailplanError("zero", "stages are 0, 1, 2, 3")
        if self.grad_reduce_bytes not in (2, 4):
            raise RailplanError("grad_reduce_bytes", "must be 2 or 4")
        if self.attention not in ATTENTION_CODES:
            raise RailplanError("attention", "must be one of " + ", ".join(ATTENTION_CODES))
        if not self.precision or any(p not in PRECISION_CODES for p in self.precision):
            raise RailplanError("precision", "give bf16, fp8 or both (bf16,fp8)")
        if self.optimizer_state not in OPTIMIZER_STATE_CODES:
            raise RailplanError(
                "optimizer_state", "must be one of " + ", ".join(OPTIMIZER_STATE_CODES)
            )
        if self.cross_entropy not in CROSS_ENTROPY_CODES:
            raise RailplanError("cross_entropy", "must be one of " + ", ".join(CROSS_ENTROPY_CODES))
        check_int("wgrad_deferral_limit", self.wgrad_deferral_limit, 0, MAX_GLOBAL_BATCH)
        if self.wgrad_deferral_limit and not self.defer_embedding_wgrad:
            raise RailplanError(
                "wgrad_deferral_limit", "needs defer_embedding_wgrad (it limits the deferral)"
            )
        if not self.recompute_num_layers:
            raise RailplanError("recompute_num_layers", "give integers ≥ 0 (0 = every layer)")
        for n in self.recompute_num_layers:
            check_int("recompute_num_layers", n, 0, MAX_GPUS)
        if not self.zero_shard:
            raise RailplanError("zero_shard", "give integers ≥ 0 (0 = shard over every rank)")
        for n in self.zero_shard:
            check_int("zero_shard", n, 0, MAX_GPUS)
        allowed = ", ".join(RECOMPUTE_MODULE_BITS)
        if not self.recompute_modules or any(
            m not in RECOMPUTE_MODULE_BITS for m in self.recompute_modules
        ):
            raise RailplanError("recompute_modules", f"give one or more of {allowed}")
        if self.ep_dispatch not in EP_DISPATCH_CODES:
            raise RailplanError("ep_dispatch", "must be one of " + ", ".join(EP_DISPATCH_CODES))
        if self.router_dtype not in ROUTER_DTYPE_CODES:
            raise RailplanError("router_dtype", "must be one of " + ", ".join(ROUTER_DTYPE_CODES))
        if self.fp8_param_gather and "fp8" not in self.precision:
            raise RailplanError("fp8_param_gather", "needs fp8 among the precisions searched")
        if self.fp8_dispatch and ("fp8" not in self.precision or self.ep_dispatch != "deepep"):
            raise RailplanError(
                "fp8_dispatch", "needs fp8 among the precisions searched and ep_dispatch deepep"
            )
        if not self.expert_tp:
            raise RailplanError("expert_tp", "give integers ≥ 0 (0 = tp)")
        for n in self.expert_tp:
            check_int("expert_tp", n, 0, MAX_GPUS)
        if self.pipeline_schedule not in PIPELINE_SCHEDULE_CODES:
            raise RailplanError(
                "pipeline_schedule", "must be one of " + ", ".join(PIPELINE_SCHEDULE_CODES)
            )

    def _as_tuples(self) -> None:
        """The list fields as tuples: one value stands for a list of one, a list or numpy
        array for its values; integers of any type become Python ints."""
        for f in fields(self):
            value = getattr(self, f.name)
            if "tuple" not in str(f.type) or value is None or isinstance(value, tuple):
                continue
            values = (value,) if isinstance(value, str | bool | int | float | np.generic) else value
            try:
                values = tuple(values.tolist() if isinstance(values, np.ndarray) else values)
            except TypeError:
                raise RailplanError(
                    f.name, f"give a value or a list of values; got {type(value).__name__}"
                ) from None
            object.__setattr__(self, f.name, values)
        for name in ("grad_reduce_bytes", "wgrad_deferral_limit"):  # single integers
            n = as_int(getattr(self, name))
            if n is not None:
                object.__setattr__(self, name, n)
        for name in INT_LISTS:
            values = getattr(self, name)
            if values is None:
                continue
            ints = tuple(as_int(v) for v in values)
            if any(n is None for n in ints):
                raise RailplanError(name, f"give integers; got {list(values)!r}"[:120])
            object.__setattr__(self, name, ints)


# the SearchSpace fields that list integers
INT_LISTS = (
    "tp",
    "pp",
    "micro_batch",
    "interleave",
    "ep",
    "cp",
    "dp",
    "zero",
    "recompute_num_layers",
    "zero_shard",
    "expert_tp",
)


# The strategy space of Megatron-LM as Calculon searches it (the paper's evaluation):
# TP, PP, DP, interleaving, micro-batch, recompute (none / attention-only / full), sequence
# parallelism, and the distributed optimizer (ZeRO-1); no ZeRO-2/3, no context parallelism, pp
# dividing the layers; unfused attention and loss kernels (the paper's model is validated on
# Korthikanti et al. 2022's Megatron runs, which ran both unfused); no micro-batch groups; the
# pipeline sends scattered over tp (that code's scatter/gather optimization).
MEGATRON_SPACE = SearchSpace(
    microbatch_groups=False,
    zero=(0, 1),
    cp=(1,),
    uneven_pp=False,
    attention="unfused",
    cross_entropy="unfused",
    tp_comm_overlap=False,
    p2p_scatter_gather=True,  # the scatter/gather pipeline sends of Narayanan et al. 2021 §4.1
    expert_tp=(0,),
)


@dataclass(frozen=True)
class Candidate:
    """One evaluated strategy with its headline numbers."""

    strategy: Strategy
    iteration_s: float
    mfu: float
    hfu: float
    memory_gib_per_gpu: float
    breakdown_s: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy.model_dump(),
            "iteration_s": self.iteration_s,
            "mfu": self.mfu,
            "hfu": self.hfu,
            "memory_gib_per_gpu": self.memory_gib_per_gpu,
            "breakdown_s": self.breakdown_s,
        }


@dataclass(frozen=True)
class SearchResult:
    """What a search of `job` found. `best` is None when no valid strategy fits in memory."""

    job: Job
    best: Candidate | None
    top: list[Candidate]
    pareto: list[Candidate]
    configurations_evaluated: int
    feasible: int
    elapsed_s: float
    space: SearchSpace = field(default_factory=SearchSpace)

    def __repr__(self) -> str:
        """A line a notebook can show: the job, the counts and the best (the lists and the
        specs printed 100 KB)."""
        j = self.job
        best = "none fits" if self.best is None else repr(self.best)
        return (
            f"SearchResult({j.model.name} on {j.gpus:,} {j.system.gpu.name}, "
            f"{j.network.architecture}, global batch {j.global_batch:,}: "
            f"{self.configurations_evaluated:,} evaluated, {self.feasible:,} fit, "
            f"{len(self.top)} top, {len(self.pareto)} Pareto; best={best})"
        )

    def require_best(self) -> Candidate:
        """The best strategy, or a one-line error saying why there is none: no valid strategy
        (with the GPU counts near this one that have one), or none that fits in memory."""
        model, gpus, global_batch = self.job.model, self.job.gpus, self.job.global_batch
        if self.configurations_evaluated == 0:
            culprit = fixed_culprit(self.job, self.space)
            if culprit is not None:
                name, allowed = culprit
                raise RailplanError(name, allowed)
            raise RailplanError(
                "gpus",
                f"no valid strategy for {gpus:,} GPUs and global batch "
                f"{global_batch:,}: tp·cp·pp·dp = gpus needs dp to divide the batch, tp the "
                f"{model.heads} heads, pp at most the {model.layers} layers, 2·cp to divide the "
                f"sequence ({model.seq}); "
                f"{working_counts(model, gpus, global_batch, self.space)}",
            )
        if self.best is None:
            raise RailplanError(
                "gpus",
                f"none of the {self.configurations_evaluated} valid strategies fits in "
                f"{self.job.system.gpu.memory_gib:g} GiB per GPU; add GPUs or use a smaller model",
            )
        return self.best

    @property
    def configurations_per_s(self) -> float:
        return self.configurations_evaluated / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.job.model.name,
            "system": self.job.system.name,
            "network": self.job.network.architecture,
            "gpus": self.job.gpus,
            "global_batch": self.job.global_batch,
            "best": self.best.to_dict() if self.best else None,
            "top": [c.to_dict() for c in self.top],
            "pareto": [c.to_dict() for c in self.pareto],
            "configurations_evaluated": self.configurations_evaluated,
            "feasible": self.feasible,
            "elapsed_s": self.elapsed_s,
            "configurations_per_s": self.configurations_per_s,
        }


def divisors(n: int) -> IntArray:
    """The positive divisors of n, ascending."""
    d = np.arange(1, int(np.sqrt(n)) + 1, dtype=np.int64)
    small = d[n % d == 0]
    return np.unique(np.concatenate([small, n // small]))


def _allowed(candidates: IntArray, chosen: tuple[int, ...] | None) -> IntArray:
    return candidates if chosen is None else candidates[np.isin(candidates, chosen)]


def _cross(cols: dict[str, IntArray], name: str, values: IntArray) -> dict[str, IntArray]:
    """Every row of `cols` paired with every value (a Cartesian product, rows major)."""
    n, k = len(next(iter(cols.values()))), len(values)
    out = {c: np.repeat(v, k) for c, v in cols.items()}
    out[name] = np.tile(values, n)
    return out


def _select(cols: dict[str, IntArray], keep: BoolArray) -> dict[str, IntArray]:
    return {c: v[keep] for c, v in cols.items()}


def candidate_rows(
    model: Model, gpus: int, global_batch: int, space: SearchSpace, hb_domain: int | None = None
) -> dict[str, IntArray]:
    """The valid (tp, cp, pp, dp, micro_batch, interleave, zero, expert_tp, ep, zero_shard) tuples,
    as 1-d arrays. Expert parallelism is paired with context parallelism only where the cp ring
    stays inside an HB domain of `hb_domain` GPUs (tp·cp ≤ K), unless the space fixes cp: a
    bound on the MoE search, which every (ep, cp) pair would multiply by the cp values, not a
    rule of Megatron-Core (`estimate` takes any pair)."""
    tps = _allowed(divisors(gpus), space.tp)
    tps = tps[(model.heads % tps == 0) & (model.kv_heads_ % tps == 0)]
    cps = _allowed(divisors(gpus), space.cp)
    cps = cps[(cps == 1) | (model.seq % (2 * cps) == 0)]
    pps = _allowed(divisors(gpus), space.pp)
    pps = pps[(pps <= model.layers) & (space.uneven_pp | (model.layers % pps == 0))]
    rows = _cross(_cross({"tp": tps}, "cp", cps), "pp", pps)
    rows = _select(rows, gpus % (rows["tp"] * rows["cp"] * rows["pp"]) == 0)
    rows["dp"] = gpus // (rows["tp"] * rows["cp"] * rows["pp"])
    rows = _select(rows, global_batch % rows["dp"] == 0)
    if space.dp is not None:
        rows = _select(rows, np.isin(rows["dp"], space.dp))

    rows = _cross(rows, "micro_batch", _allowed(divisors(global_batch), space.micro_batch))
    per_replica = global_batch // rows["dp"]
    rows = _select(rows, per_replica % rows["micro_batch"] == 0)

    # The interleaves tried are the divisors of the model's layers (every v up to a stage's
    # layers would triple the space for little: `estimate` takes any valid v).
    # DualPipeV's two chunks per rank are tried whatever the layers (61 for DeepSeek-V3).
    interleaves = divisors(model.layers)
    if space.pipeline_schedule == "dualpipev":
        interleaves = np.union1d(interleaves, [2]).astype(np.int64)
    rows = _cross(rows, "interleave", _allowed(interleaves, space.interleave))
    micro_batches = global_batch // (rows["dp"] * rows["micro_batch"])
    v, pp = rows["interleave"], rows["pp"]
    # Interleaving: today's Megatron-Core places any number of layers in each virtual stage
    # (`--pipeline-model-parallel-layout`), so v may be up to the smallest stage's ⌊layers/pp⌋
    # layers; the 2021-22 code (`uneven_pp` off) built equal chunks: every stage the same layers,
    # divisible by v.
    even = (model.layers % pp == 0) & ((model.layers // pp) % v == 0)
    chunks_ok = np.where(space.uneven_pp, v <= model.layers // pp, even)
    # DualPipeV (`pipeline_schedule`) takes any m ≥ 2·pp micro-batches on its two chunks.
    dualpipev = (
        (space.pipeline_schedule == "dualpipev")
        & (v == 2)
        & (micro_batches >= 2 * pp)
        & (not space.defer_embedding_wgrad)  # as `dualpipev_rules`: Megatron's, refused with it
    )
    # A micro-batch count that is not a multiple of pp interleaves with a micro-batch group N
    # (`microbatch_groups`): the smallest N ≥ pp that Megatron-Core accepts (m mod N 0 or ≥ pp),
    # which holds the fewest extra warm-up forwards ((v − 1)·(N − pp)).
    grouped = (
        space.microbatch_groups
        & (v > 1)
        & (micro_batches % pp != 0)
        & (micro_batches >= pp)
        & ~dualpipev
    )
    rows["microbatch_group"] = np.zeros_like(v)
    rows["microbatch_group"][grouped] = smallest_group(micro_batches[grouped], pp[grouped])
    m_ok = (micro_batches % pp == 0) | dualpipev | grouped
    rows["dualpipev"] = dualpipev.astype(np.int64)
    rows = _select(rows, (v == 1) | (chunks_ok & (pp > 1) & m_ok))
    rows = _lighter_head_stage(model, rows, space)

    rows = _cross(rows, "zero", np.array(sorted(set(space.zero)), dtype=np.int64))
    z = rows["zero"]
    rows = _select(rows, (z == 0) | (rows["dp"] * rows["cp"] > 1))

    # MoE: the routed experts' tensor-parallel degrees (0 = tp; others dividing tp), and
    # expert-parallel degrees dividing the experts with etp·ep dividing tp·cp·dp
    # (Megatron-Core's expert grid: etp × ep × expert-dp fills a stage).
    moe = model.experts > 1
    etps = np.array(sorted(set(space.expert_tp) if moe else {0}), dtype=np.int64)
    rows = _cross(rows, "expert_tp", etps)
    e, tp = rows["expert_tp"], rows["tp"]
    # N = tp is the default, 0: one candidate, kept once when the space holds both
    keep = (e == 0) | ((tp % np.maximum(e, 1) == 0) & ((e != tp) | (0 not in space.expert_tp)))
    rows = _select(rows, keep)
    rows["expert_tp"] = np.where(rows["expert_tp"] == rows["tp"], 0, rows["expert_tp"])
    eps = _allowed(divisors(model.experts), space.ep) if moe else np.ones(1, np.int64)
    rows = _cross(rows, "ep", eps)
    etp = resolve_expert_tp(rows["expert_tp"], rows["tp"])
    stage = rows["tp"] * rows["dp"] * rows["cp"]
    rows = _select(rows, stage % (etp * rows["ep"]) == 0)
    if space.cp is None and hb_domain is not None:
        folded = (rows["ep"] > 1) & (rows["cp"] > 1)
        rows = _select(rows, ~folded | (rows["tp"] * rows["cp"] <= hb_domain))

    # Hybrid sharding: each N of `zero_shard` on the ZeRO candidates whose dp·cp ranks it splits
    # into 2 or more replicas that also divide the expert data-parallel ranks (N = dp·cp is the
    # plain ZeRO candidate, 0). Candidates without ZeRO shard nothing and stay, with 0.
    if space.zero_shard == (0,):  # the default: no hybrid candidates, nothing to filter
        rows["zero_shard"] = np.zeros_like(rows["zero"])
        return rows
    shards = np.array(sorted(set(space.zero_shard) | {0}), dtype=np.int64)
    rows = _cross(rows, "zero_shard", shards)
    n, ranks = rows["zero_shard"], rows["dp"] * rows["cp"]
    etp = resolve_expert_tp(rows["expert_tp"], rows["tp"])
    replicas = ranks // np.maximum(n, 1)
    hybrid = (
        (rows["zero"] >= 1)
        & (n > 0)
        & (n < ranks)
        & (ranks % np.maximum(n, 1) == 0)
        & (expert_dp_ranks(rows["tp"], ranks, etp, rows["ep"]) % np.maximum(replicas, 1) == 0)
    )
    plain = (n == 0) & ((rows["zero"] == 0) | (0 in space.zero_shard))
    return _select(rows, plain | hybrid)


def _lighter_head_stage(
    model: Model, rows: dict[str, IntArray], space: SearchSpace
) -> dict[str, IntArray]:
    """`rows`, and where `SearchSpace.lighter_head_stage` asks for it, with `first_stage_layers`
    and `last_stage_layers` (0: the even split) and each pipelined row once more with the stage
    holding the LM head lighter: the others take q = ⌊layers/pp⌋ + 1 layers each and the head
    stage the rest, layers − q·(pp − 1), where that is at least 1, fewer than the even split
    gives it and (with its MTP layers) at least the interleave. The head stage is rank 0
    (`first_stage_layers`) where the row runs DualPipeV, the last stage (`last_stage_layers`)
    otherwise."""
    dualpipev = rows.pop("dualpipev").astype(bool)
    wanted = model.mtp_layers > 0 if space.lighter_head_stage is None else space.lighter_head_stage
    if not wanted or not space.uneven_pp:
        return rows  # the even split for all (StrategyArrays' scalar 0: stage_layers' table)
    zero = np.zeros_like(rows["pp"])
    rows |= {"first_stage_layers": zero, "last_stage_layers": zero.copy()}
    pp, v = rows["pp"], rows["interleave"]
    q = model.layers // np.maximum(pp, 1) + 1
    head = model.layers - q * (pp - 1)
    # the head stage's decoder layers in the even split (its MTP layers aside)
    at = np.where(dualpipev, 0, pp - 1)
    even_head = stage_layer_counts(model, pp, at, dualpipev=dualpipev) - model.mtp_layers
    ok = (pp > 1) & (head >= 1) & (head < q) & (head < even_head)
    ok &= head + model.mtp_layers >= v
    extra = {k: c[ok] for k, c in rows.items()}
    on_first = dualpipev[ok]
    extra["first_stage_layers"] = np.where(on_first, head[ok], 0)
    extra["last_stage_layers"] = np.where(on_first, 0, head[ok])
    return {k: np.concatenate([rows[k], extra[k]]) for k in rows}


def smallest_group(m: IntArray, pp: IntArray) -> IntArray:
    """Per row, the smallest micro-batch group N in [pp, m] with m mod N = 0 or ≥ pp (N = m
    always qualifies), as Megatron-Core's interleaved schedule accepts it."""
    m, pp = np.asarray(m, dtype=np.int64), np.asarray(pp, dtype=np.int64)
    out = np.where(m >= pp, m, 0)
    todo = m >= pp
    n = pp.copy()
    while bool(np.any(todo)):
        ok = todo & (n <= m) & ((m % np.maximum(n, 1) == 0) | (m % np.maximum(n, 1) >= pp))
        out = np.where(ok, n, out)
        todo = todo & ~ok & (n < m)
        n = n + 1
    return np.asarray(out, dtype=np.int64)


def candidate_columns(space: SearchSpace) -> dict[str, IntArray]:
    """The (recompute, sequence_parallel, precision) combinations as 1-d arrays; full recompute
    once per `recompute_num_layers` value (block recompute), the others with 0."""
    pairs = sorted(
        {
            (RECOMPUTE_CODES[r], n if RECOMPUTE_CODES[r] == FULL else 0)
            for r in space.recompute
            for n in space.recompute_num_layers
        }
    )
    rc = {
        "recompute": np.array([r for r, _ in pairs], dtype=np.int64),
        "recompute_num_layers": np.array([n for _, n in pairs], dtype=np.int64),
    }
    sp = np.array(sorted({int(b) for b in space.sequence_parallel}), dtype=np.int64)
    pr = np.array(sorted({PRECISION_CODES[p] for p in space.precision}), dtype=np.int64)
    return _cross(_cross(rc, "sequence_parallel", sp), "precision", pr)


def _fixed_codes(global_batch: int, space: SearchSpace) -> dict[str, int]:
    """The strategy fields every candidate shares (the batch and what the space fixes), as
    the codes `StrategyArrays` holds."""
    return {
        "global_batch": global_batch,
        "overlap_dp": int(space.overlap_dp),
        "grad_reduce_bytes": space.grad_reduce_bytes,
        "attention": ATTENTION_CODES[space.attention],
        "optimizer_state": OPTIMIZER_STATE_CODES[space.optimizer_state],
        "cross_entropy": CROSS_ENTROPY_CODES[space.cross_entropy],
        "tp_comm_overlap": int(space.tp_comm_overlap),
        "p2p_scatter_gather": int(space.p2p_scatter_gather),
        "defer_embedding_wgrad": int(space.defer_embedding_wgrad),
        "wgrad_deferral_limit": space.wgrad_deferral_limit,
        "overlap_ep": int(space.overlap_ep),
        "pipeline_schedule": PIPELINE_SCHEDULE_CODES[space.pipeline_schedule],
        "recompute_modules": module_bits(space.recompute_modules),
        "fp8_param_gather": int(space.fp8_param_gather),
        "fp8_dispatch": int(space.fp8_dispatch),
        "ep_dispatch": EP_DISPATCH_CODES[space.ep_dispatch],
        "router_dtype": ROUTER_DTYPE_CODES[space.router_dtype],
        "shared_expert_overlap": int(space.shared_expert_overlap),
    }


def _arrays(
    rows: dict[str, IntArray], cols: dict[str, IntArray], fixed: dict[str, int]
) -> StrategyArrays:
    """rows (as a column vector) × columns (as a row vector): a broadcastable 2-d grid."""
    one = np.ones((1, 1), dtype=np.int64)
    return _where_allowed(
        StrategyArrays(
            **{k: v[:, None] for k, v in rows.items()},
            **{k: v[None, :] for k, v in cols.items()},
            **{k: one * v for k, v in fixed.items()},
        )
    )


def _where_allowed(s: StrategyArrays) -> StrategyArrays:
    """DualPipeV asked for the whole space applies where it can run (`dualpipev_allowed`),
    the interleaved schedule elsewhere; `fp8_param_gather` on the FP8 candidates, and
    `fp8_dispatch` on those that dispatch with DeepEP; `defer_embedding_wgrad` (with its limit)
    on the pipelined candidates; `p2p_scatter_gather` on the pipelined
    tp > 1 candidates without sequence parallelism (elsewhere it changes nothing); `overlap_ep`
    where Megatron-Core allows it (ep > 1, interleaving when pp > 1, no full recompute), off
    elsewhere; `shared_expert_overlap` where it changes anything."""
    if bool(np.any(s.dualpipev)):
        s = replace(s, pipeline_schedule=np.asarray(s.dualpipev & dualpipev_allowed(s), np.int64))
    if bool(np.any(s.fp8_param_gather)):  # the FP8 candidates only
        s = replace(s, fp8_param_gather=np.asarray(s.fp8_gathered, dtype=np.int64))
    if bool(np.any(s.fp8_dispatch)):  # the FP8 candidates with DeepEP dispatch only
        s = replace(s, fp8_dispatch=np.asarray(s.fp8_dispatched, dtype=np.int64))
    if bool(np.any(s.recompute_modules != DEFAULT_MODULES)):  # selective candidates only
        modules = np.where(s.recompute == SELECTIVE, s.recompute_modules, DEFAULT_MODULES)
        s = replace(s, recompute_modules=np.asarray(modules, dtype=np.int64))
    if bool(np.any(s.defer_embedding_wgrad)):  # the pipelined candidates only
        on = (s.defer_embedding_wgrad > 0) & (s.pp > 1)
        limit = np.where(on, s.wgrad_deferral_limit, 0)
        s = replace(
            s,
            defer_embedding_wgrad=np.asarray(on, dtype=np.int64),
            wgrad_deferral_limit=np.asarray(limit, dtype=np.int64),
        )
    if bool(np.any(s.p2p_scatter_gather)):  # pipelined tp > 1 candidates without SP only
        on = (s.p2p_scatter_gather > 0) & (s.sequence_parallel == 0) & (s.pp > 1) & (s.tp > 1)
        s = replace(s, p2p_scatter_gather=np.asarray(on, dtype=np.int64))
    if bool(np.any(s.shared_expert_overlap)):  # where it changes anything
        on = (s.shared_expert_overlap > 0) & shared_expert_overlap_changes(s)
        s = replace(s, shared_expert_overlap=np.asarray(on, dtype=np.int64))
    if not bool(np.any(s.overlap_ep)):
        return s
    on = (s.overlap_ep > 0) & overlap_ep_allowed(s)
    return replace(s, overlap_ep=np.asarray(on, dtype=np.int64))


@dataclass(frozen=True)
class Evaluated:
    """Flat arrays over every valid configuration: the strategies and what the model says."""

    strategies: StrategyArrays
    iteration_s: FloatArray
    memory_bytes: FloatArray
    fits: BoolArray


@dataclass(frozen=True)
class Chunk:
    """One call of `iteration`'s results, flat: each configuration's place in the search order
    (`slot`: rows in order, each row's columns in order), its row and column indices into the
    grid, and what the model says of it."""

    slot: IntArray
    row: IntArray
    col: IntArray
    iteration_s: FloatArray
    memory_bytes: FloatArray
    fits: BoolArray

    def take(self, keep: IntArray | BoolArray) -> Chunk:
        return Chunk(*(getattr(self, f.name)[keep] for f in fields(Chunk)))

    @staticmethod
    def join(parts: list[Chunk]) -> Chunk:
        return Chunk(*(np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(Chunk)))


@dataclass(frozen=True)
class Grid:
    """The search's valid rows (tp, pp, dp, ... per row) and option columns, with the fields
    every configuration shares (`fixed`); `chunks` evaluates them."""

    job: Job
    rows: dict[str, IntArray]
    cols: dict[str, IntArray]
    fixed: dict[str, int]
    sets: list[tuple[BoolArray, IntArray]]
    first: IntArray  # each row's first slot
    total: int  # configurations

    @staticmethod
    def of(job: Job, space: SearchSpace) -> Grid:
        # the system's HB domain, whatever the network: every network searches the same space
        rows = candidate_rows(job.model, job.gpus, job.global_batch, space, job.system.hb_domain)
        cols = candidate_columns(space)
        sets = row_columns(job.model, rows, cols)
        # Each row's results land at its place in row order, then column order, as one grid
        # gives them (ties in time and memory then resolve alike whatever the column sets): a
        # row's first slot is the columns of the rows before it.
        per_row = np.zeros(len(rows["tp"]), dtype=np.int64)
        for mask, use in sets:
            per_row[mask] = use.size
        first = np.concatenate([[0], np.cumsum(per_row)[:-1]]) if per_row.size else per_row
        fixed = _fixed_codes(job.global_batch, space)
        return Grid(job, rows, cols, fixed, sets, first, int(per_row.sum()))

    def chunks(self) -> Iterator[Chunk]:
        """Every configuration through `iteration`, in chunks of rows, each row with the
        columns it can use (`row_columns`)."""
        job = self.job
        for mask, use in self.sets:
            at_all = np.flatnonzero(mask)
            if at_all.size == 0 or use.size == 0:
                continue
            step = max(1, CHUNK_ELEMENTS // use.size)
            sub_cols = {k: v[use] for k, v in self.cols.items()}
            for lo in range(0, at_all.size, step):
                at = at_all[lo : lo + step]
                s = _arrays({k: v[at] for k, v in self.rows.items()}, sub_cols, self.fixed)
                it = iteration(job.model, job.system, job.network, s)
                shape = (at.size, use.size)
                yield Chunk(
                    slot=(self.first[at][:, None] + np.arange(use.size)[None, :]).ravel(),
                    row=np.repeat(at, use.size),
                    col=np.tile(use, at.size),
                    iteration_s=np.broadcast_to(it.iteration_s, shape).ravel(),
                    memory_bytes=np.broadcast_to(it.memory.total_bytes, shape).ravel(),
                    fits=np.broadcast_to(it.fits, shape).ravel(),
                )

    def strategies(self, row: IntArray, col: IntArray) -> StrategyArrays:
        """The configurations at (row, col), flat."""
        return _where_allowed(
            StrategyArrays(
                **{k: v[row] for k, v in self.rows.items()},
                **{k: v[col] for k, v in self.cols.items()},
                **{k: np.full(len(row), v, dtype=np.int64) for k, v in self.fixed.items()},
            )
        )


def row_columns(
    model: Model, rows: dict[str, IntArray], cols: dict[str, IntArray]
) -> list[tuple[BoolArray, IntArray]]:
    """The rows that meet each set of columns, as (row mask, column indices): with tp = 1 the
    columns without sequence parallelism (with it they are the same strategy); MoE with tp > 1
    the columns with it (Megatron-Core's MoE layer raises in training without it), unless the
    space holds none; every column otherwise."""
    sp = cols["sequence_parallel"] == 1
    every = np.arange(sp.size)
    single = rows["tp"] == 1
    sets = [(single, every[~sp] if bool(np.any(~sp)) else every)]
    if model.experts > 1 and bool(np.any(sp)):
        sets.append((~single, every[sp]))
    else:
        sets.append((~single, every))
    return sets


def enumerate_and_evaluate(job: Job, space: SearchSpace = SearchSpace()) -> Evaluated:
    """Every valid configuration of the space for `job`, evaluated through `iteration`, flat
    and in search order (rows in order, each row's columns in order). Holds every
    configuration at once: `search` keeps only the best and the Pareto set as it goes."""
    grid = Grid.of(job, space)
    parts = list(grid.chunks())
    empty = np.zeros(0, dtype=np.int64)
    if parts:
        whole = Chunk.join(parts)
    else:
        whole = Chunk(empty, empty, empty, np.zeros(0), np.zeros(0), np.zeros(0, dtype=bool))
    whole = whole.take(np.argsort(whole.slot, kind="stable"))
    return Evaluated(
        strategies=grid.strategies(whole.row, whole.col),
        iteration_s=whole.iteration_s,
        memory_bytes=whole.memory_bytes,
        fits=whole.fits,
    )


def pareto_front(
    time_s: FloatArray, memory_bytes: FloatArray, order_key: IntArray | None = None
) -> IntArray:
    """Indices of the time-vs-memory Pareto set, fastest first: each is smaller in memory than
    every faster point (ties in time go to the smaller memory, ties in both to the smaller
    `order_key`, by default the earlier index)."""
    key = np.arange(len(time_s)) if order_key is None else order_key
    order = np.lexsort((key, memory_bytes, time_s))
    mem_sorted = memory_bytes[order]
    prev_min = np.concatenate([[np.inf], np.minimum.accumulate(mem_sorted)[:-1]])
    return np.asarray(order[mem_sorted < prev_min], dtype=np.int64)


def fastest(c: Chunk, top: int) -> Chunk:
    """The `top` fastest of `c`, fastest first (ties: smaller memory, then earlier slot)."""
    return c.take(np.lexsort((c.slot, c.memory_bytes, c.iteration_s))[:top])


def describe(
    model: Model, system: System, network: Network, strategies: StrategyArrays
) -> list[Candidate]:
    """Candidates with full detail for a few strategies (one more pass through `iteration`)."""
    if len(strategies) == 0:
        return []
    it = iteration(model, system, network, strategies)
    out = []
    for i in range(len(strategies)):
        out.append(
            Candidate(
                strategy=strategies.strategy(i),
                iteration_s=float(it.iteration_s[i]),
                mfu=float(it.mfu[i]),
                hfu=float(it.hfu[i]),
                memory_gib_per_gpu=float(it.memory.total_bytes[i] / GIB),
                breakdown_s={k: float(v[i]) for k, v in it.breakdown_s.items()},
            )
        )
    return out


def check_modules(model: Model, space: SearchSpace) -> None:
    """The space's recompute modules against the model (MoE ones need experts, mla_up_proj
    MLA) and the overlap (no `moe` with `overlap_ep`): the rules `estimate` reports, as a
    one-line error, before any search."""
    one = Strategy(
        global_batch=1,
        recompute="selective" if "selective" in space.recompute else "none",
        recompute_modules=space.recompute_modules,
        overlap_ep=space.overlap_ep,
        ep_dispatch=space.ep_dispatch,
        router_dtype=space.router_dtype,
        shared_expert_overlap=space.shared_expert_overlap,
    )
    arrays = from_strategies(one)
    for name, ok, rule in validity(model, arrays):
        if name in ("recompute_modules", "ep_dispatch", "router_dtype") and not bool(np.all(ok)):
            raise RailplanError(name, rule)
    # what the model and the space's other choices allow (where it changes anything, the
    # search applies it: `_where_allowed`)
    if space.shared_expert_overlap:
        for ok, rule in shared_expert_overlap_rules(model, arrays):
            if not bool(np.all(ok)):
                raise RailplanError("shared_expert_overlap", rule)
    if model.experts <= 1 and space.ep is not None and max(space.ep) > 1:
        raise RailplanError("ep", f"ep > 1 needs an MoE model (experts > 1); {model.name} is dense")


def search(
    job: Job,
    space: SearchSpace = SearchSpace(),
    top: int = 5,
    on_progress: Callable[[int, int], None] | None = None,
) -> SearchResult:
    """Evaluate every valid strategy for the job's GPUs; return the fastest that fit, the `top`
    fastest, and the time-vs-memory Pareto set. Raises RailplanError on impossible input.
    `on_progress(done, total)` is called after each chunk of configurations."""
    check_int("gpus", job.gpus, 1, MAX_GPUS)
    check_int("global_batch", job.global_batch, 1, MAX_GLOBAL_BATCH)
    check_int("top", top, 1, MAX_TOP)
    check_modules(job.model, space)
    t0 = time.perf_counter()
    grid = Grid.of(job, space)
    # Only the fitting configurations matter, and of them only the `top` fastest and the
    # Pareto set: both are kept chunk by chunk, so memory stays bounded by a chunk whatever
    # the size of the space.
    best: Chunk | None = None
    front: Chunk | None = None
    feasible = 0
    done = 0
    for chunk in grid.chunks():
        done += len(chunk.slot)
        if on_progress is not None:
            on_progress(done, grid.total)
        ok = chunk.take(chunk.fits)
        feasible += len(ok.slot)
        if not len(ok.slot):
            continue
        best = fastest(ok if best is None else Chunk.join([best, ok]), top)
        pool = ok if front is None else Chunk.join([front, ok])
        front = pool.take(pareto_front(pool.iteration_s, pool.memory_bytes, pool.slot))
    chosen = [c for c in (best, front) if c is not None]
    picked = Chunk.join(chosen) if chosen else None
    both = (
        describe(job.model, job.system, job.network, grid.strategies(picked.row, picked.col))
        if picked is not None
        else []
    )
    n_top = len(best.slot) if best is not None else 0
    n = grid.total
    top_c, pareto = both[:n_top], both[n_top:]
    elapsed = time.perf_counter() - t0
    return SearchResult(
        job=job,
        best=top_c[0] if top_c else None,
        top=top_c,
        pareto=pareto,
        configurations_evaluated=n,
        feasible=feasible,
        elapsed_s=elapsed,
        space=space,
    )


# The dimensions a search can fix (--tp, --pp, ...), in the order they are blamed.
FIXABLE = ("tp", "cp", "pp", "dp", "ep", "interleave", "micro_batch")


def fixed_culprit(job: Job, space: SearchSpace) -> tuple[str, str] | None:
    """When a search finds no valid strategy: the first dimension the user fixed that has none
    on its own (every other dimension free), with the values of it that would have some, as
    (field, message); None when each fixed value is possible alone (their combination, or the
    GPU count, is not)."""
    model, hb = job.model, job.system.hb_domain
    free = replace(space, **dict.fromkeys(FIXABLE))  # type: ignore[arg-type]
    for name in FIXABLE:
        chosen = getattr(space, name)
        if chosen is None:
            continue
        alone = replace(free, **{name: chosen})
        if len(candidate_rows(model, job.gpus, job.global_batch, alone, hb)["tp"]):
            continue
        rows = candidate_rows(model, job.gpus, job.global_batch, free, hb)
        values = sorted({int(v) for v in rows[name]}) if len(rows["tp"]) else []
        shown = ", ".join(str(v) for v in values[:16]) + (", ..." if len(values) > 16 else "")
        given = ", ".join(str(v) for v in chosen)
        return (
            name,
            f"{given} gives no valid strategy for {job.gpus:,} GPUs and global batch "
            f"{job.global_batch:,}; "
            + (f"allowed values: {shown}" if values else "no value works: change the GPUs"),
        )
    return None


def working_counts(model: Model, gpus: int, global_batch: int, space: SearchSpace) -> str:
    """GPU counts near `gpus` that have at least one valid strategy, as text."""

    def works(n: int) -> bool:
        return n > 0 and len(candidate_rows(model, n, global_batch, space)["tp"]) > 0

    below = next((n for n in range(gpus - 1, max(gpus - 4097, 0), -1) if works(n)), None)
    above = next((n for n in range(gpus + 1, gpus + 4097) if works(n)), None)
    found = [f"{n:,}" for n in (below, above) if n is not None]
    return (
        ("GPU counts near it that work: " + " or ".join(found))
        if found
        else ("no GPU count within 4,096 of it works with this batch")
    )
