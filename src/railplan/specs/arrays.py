"""Strategies as numpy arrays: the one representation every model function computes over.

A single `Strategy` becomes 0-d arrays; the search builds 1-d arrays of hundreds of thousands of
strategies. Both go through the same functions, so the scalar estimate and the vectorized search
can never disagree.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from railplan.errors import RailplanError
from railplan.limits import MAX_GLOBAL_BATCH, MAX_GPUS, check_int
from railplan.specs import ATTENTION_CODES, CROSS_ENTROPY_CODES, PRECISION_CODES, Model, Strategy
from railplan.specs.strategy import (
    CODED_FIELDS,
    EP_DISPATCH_CODES,
    PIPELINE_SCHEDULE_CODES,
    RECOMPUTE_MODULE_BITS,
    ROUTER_DTYPE_CODES,
)

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


def remembered(
    memo: dict[Any, FloatArray],
    key: Hashable,
    compute: Callable[[], object],
    most: int | None = None,
) -> FloatArray:
    """`memo[key]`, computed by `compute` the first time as a read-only array (shared by every
    caller: none may change it in place); with `most`, the memo is emptied when it holds that
    many."""
    hit = memo.get(key)
    if hit is None:
        if most is not None and len(memo) >= most:
            memo.clear()
        hit = memo[key] = np.asarray(compute())
        hit.flags.writeable = False
    return hit


NONE, SELECTIVE, FULL = 0, 1, 2
FLASH, UNFUSED, FLASH2, FLASH1 = (
    ATTENTION_CODES[k] for k in ("flash", "unfused", "flash2", "flash1")
)
BF16, FP8 = PRECISION_CODES["bf16"], PRECISION_CODES["fp8"]
CE_FUSED = CROSS_ENTROPY_CODES["fused"]
DUALPIPEV = PIPELINE_SCHEDULE_CODES["dualpipev"]
EP_DEEPEP = EP_DISPATCH_CODES["deepep"]
ROUTER_FP32 = ROUTER_DTYPE_CODES["fp32"]


def head_rank(pp: IntArray, dualpipev: BoolArray | bool) -> IntArray:
    """The pipeline rank holding the LM head and the multi-token prediction layers: the last,
    or rank 0 with pp = 1 or DualPipeV (its V's last stage)."""
    pp = np.asarray(pp)
    return np.asarray(np.where((pp <= 1) | np.asarray(dualpipev), 0, pp - 1))


def resolve_expert_tp(expert_tp: IntArray, tp: IntArray) -> IntArray:
    """The routed experts' tensor-parallel degree: `expert_tp`, or tp where it is 0 (as
    Megatron-Core defaults --expert-tensor-parallel-size to tp)."""
    return np.asarray(np.where(expert_tp > 0, expert_tp, tp))


def expert_dp_ranks(tp: IntArray, dp_cp: IntArray, etp: IntArray, ep: IntArray) -> IntArray:
    """The expert grid's data-parallel ranks, tp·cp·dp/(etp·ep): the ranks that hold the same
    expert weights (dp·cp/ep when etp = tp)."""
    return np.asarray(np.maximum(tp * dp_cp // np.maximum(etp * ep, 1), 1))


@dataclass(frozen=True)
class StrategyArrays:
    """Broadcastable integer arrays, one per strategy field (recompute as 0/1/2)."""

    tp: IntArray
    pp: IntArray
    dp: IntArray
    interleave: IntArray
    micro_batch: IntArray
    global_batch: IntArray
    recompute: IntArray
    sequence_parallel: IntArray
    zero: IntArray
    overlap_dp: IntArray
    grad_reduce_bytes: IntArray
    ep: IntArray = field(default_factory=lambda: np.ones((), dtype=np.int64))
    overlap_tp: IntArray = field(default_factory=lambda: np.ones((), dtype=np.int64))
    overlap_p2p: IntArray = field(default_factory=lambda: np.ones((), dtype=np.int64))
    p2p_scatter_gather: IntArray = field(default_factory=lambda: np.zeros((), dtype=np.int64))
    tp_comm_overlap: IntArray = field(default_factory=lambda: np.ones((), dtype=np.int64))
    grad_accumulation_fusion: IntArray = field(default_factory=lambda: np.ones((), dtype=np.int64))
    cp: IntArray = field(default_factory=lambda: np.ones((), dtype=np.int64))
    first_stage_layers: IntArray = field(default_factory=lambda: np.zeros((), dtype=np.int64))
    last_stage_layers: IntArray = field(default_factory=lambda: np.zeros((), dtype=np.int64))
    zero_schedule: IntArray = field(default_factory=lambda: np.zeros((), dtype=np.int64))
    overlap_backward_gather: IntArray = field(default_factory=lambda: np.ones((), dtype=np.int64))
    attention: IntArray = field(default_factory=lambda: np.full((), FLASH, dtype=np.int64))
    precision: IntArray = field(default_factory=lambda: np.full((), BF16, dtype=np.int64))
    optimizer_state: IntArray = field(default_factory=lambda: np.zeros((), dtype=np.int64))
    defer_embedding_wgrad: IntArray = field(default_factory=lambda: np.zeros((), dtype=np.int64))
    wgrad_deferral_limit: IntArray = field(default_factory=lambda: np.zeros((), dtype=np.int64))
    cross_entropy: IntArray = field(default_factory=lambda: np.full((), CE_FUSED, dtype=np.int64))
    overlap_ep: IntArray = field(default_factory=lambda: np.zeros((), dtype=np.int64))
    microbatch_group: IntArray = field(default_factory=lambda: np.zeros((), dtype=np.int64))
    # Strategy.recompute_modules as bits (RECOMPUTE_MODULE_BITS; 1 = core_attn, the default)
    recompute_modules: IntArray = field(default_factory=lambda: np.ones((), dtype=np.int64))
    pipeline_schedule: IntArray = field(default_factory=lambda: np.zeros((), dtype=np.int64))
    recompute_num_layers: IntArray = field(default_factory=lambda: np.zeros((), dtype=np.int64))
    zero_shard: IntArray = field(default_factory=lambda: np.zeros((), dtype=np.int64))
    fp8_param_gather: IntArray = field(default_factory=lambda: np.zeros((), dtype=np.int64))
    fp8_dispatch: IntArray = field(default_factory=lambda: np.zeros((), dtype=np.int64))
    ep_dispatch: IntArray = field(default_factory=lambda: np.zeros((), dtype=np.int64))
    expert_tp: IntArray = field(default_factory=lambda: np.zeros((), dtype=np.int64))
    router_dtype: IntArray = field(default_factory=lambda: np.zeros((), dtype=np.int64))
    shared_expert_overlap: IntArray = field(default_factory=lambda: np.zeros((), dtype=np.int64))

    @property
    def gpus(self) -> IntArray:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def group_size(self) -> IntArray:
        """The interleaved schedule's micro-batch group N (`microbatch_group`, 0 = pp)."""
        return np.where(self.microbatch_group > 0, self.microbatch_group, self.pp)

    @property
    def dualpipev(self) -> BoolArray:
        """Where the schedule is DualPipeV (`pipeline_schedule`)."""
        return np.asarray(self.pipeline_schedule == DUALPIPEV)

    @property
    def head_rank(self) -> IntArray:
        """The pipeline rank with the LM head (`head_rank`)."""
        return head_rank(self.pp, self.dualpipev)

    def warmup_chunks(self, rank: int | IntArray) -> FloatArray:
        """Chunk forwards pipeline rank `rank` runs before its first backward, as Megatron-Core
        counts them (`get_pp_rank_microbatches`): 1F1B pp − rank − 1; interleaved
        2·(pp − rank − 1) + (v − 1)·N (N the micro-batch group); one more with the MoE
        all-to-all overlap (`overlap_ep`, which also runs one forward alone without a
        pipeline); never more than the step's m·v chunks. DualPipeV: 2·pp on every rank
        (`dualpipev.py` steps 1-2: 2·(pp − rank − 1) chunk-0 forwards, then rank + 1 of each
        chunk), its merged pairs already counted."""
        pp, v = self.pp.astype(np.float64), self.interleave.astype(np.float64)
        extra = ((self.overlap_ep > 0) & (self.ep > 1)).astype(np.float64)
        interleaved = 2.0 * (pp - rank - 1) + (v - 1) * self.group_size
        plain = np.where(self.pp > 1, pp - rank - 1, 0.0)
        warmup = np.where(self.interleave > 1, interleaved, plain) + extra
        if bool(np.any(self.dualpipev)):
            warmup = np.where(self.dualpipev, 2.0 * pp, warmup)
        return np.asarray(np.minimum(warmup, self.micro_batches * v))

    @property
    def grad_ranks(self) -> IntArray:
        """Ranks that hold the same weights and reduce their gradients (and shard ZeRO state):
        the dp·cp ranks (Megatron-Core's data-parallel group with context parallelism)."""
        return np.asarray(self.dp * self.cp)

    @property
    def fp8_gathered(self) -> BoolArray:
        """Where the GEMM weights are kept and gathered in FP8 (`fp8_param_gather` with
        precision fp8)."""
        return np.asarray((self.fp8_param_gather > 0) & (self.precision == FP8))

    @property
    def fp8_dispatched(self) -> BoolArray:
        """Where the MoE tokens go to the experts in FP8 (`fp8_dispatch` with precision fp8 and
        DeepEP dispatch)."""
        return np.asarray(
            (self.fp8_dispatch > 0) & (self.precision == FP8) & (self.ep_dispatch == EP_DEEPEP)
        )

    @property
    def replicas(self) -> IntArray:
        """Copies of the ZeRO-sharded states across the data-parallel group: dp·cp/N with
        hybrid sharding over groups of N (`zero_shard`), else 1."""
        n = self.zero_shard
        if not bool(np.any(n > 0)):  # the usual case costs nothing
            return np.ones((), dtype=np.int64)
        return np.asarray(np.where(n > 0, np.maximum(self.grad_ranks // np.maximum(n, 1), 1), 1))

    @property
    def shard_ranks(self) -> IntArray:
        """Ranks ZeRO shards the dense states over: the dp·cp ranks ÷ `replicas`."""
        return np.asarray(self.grad_ranks // self.replicas)

    @property
    def etp(self) -> IntArray:
        """The routed experts' tensor-parallel degree (`resolve_expert_tp`)."""
        return resolve_expert_tp(self.expert_tp, self.tp)

    @property
    def expert_grad_ranks(self) -> IntArray:
        """Ranks that hold the same expert weights and reduce their gradients
        (`expert_dp_ranks`)."""
        return expert_dp_ranks(self.tp, self.grad_ranks, self.etp, self.ep)

    @property
    def expert_shard_ranks(self) -> IntArray:
        """Ranks ZeRO shards the expert states over: the expert-data-parallel ranks
        (`expert_grad_ranks`) ÷ `replicas` (Megatron-Core's intra-partial expert data-parallel
        group)."""
        return np.asarray(np.maximum(self.expert_grad_ranks // self.replicas, 1))

    @property
    def zero_sharding(self) -> IntArray:
        """The ZeRO stage as memory and communication see it: ZeRO-2/3 with `zero_schedule` =
        step (code 1) keep weights and gradients whole across the micro-batches, so only the
        optimizer state stays sharded, as in ZeRO-1."""
        return np.asarray(np.where((self.zero >= 2) & (self.zero_schedule == 1), 1, self.zero))

    @property
    def micro_batches(self) -> IntArray:
        return np.asarray(self.global_batch // np.maximum(self.dp * self.micro_batch, 1))

    @property
    def deferred_wgrad_micro_batches(self) -> IntArray:
        """Micro-batches whose LM-head weight gradient the last stage defers to the pipeline
        flush: the first `wgrad_deferral_limit` (0 = all) with `defer_embedding_wgrad`, where
        Megatron-Core allows it (pp > 1 and gradient-accumulation fusion); else 0 (a scalar
        when no strategy defers: the search's usual case costs nothing)."""
        if not np.any(self.defer_embedding_wgrad > 0):
            return np.zeros((), dtype=np.int64)
        m = self.micro_batches
        limit = self.wgrad_deferral_limit
        k = np.where(limit > 0, np.minimum(limit, m), m)
        on = (self.defer_embedding_wgrad > 0) & (self.pp > 1) & (self.grad_accumulation_fusion > 0)
        return np.asarray(np.where(on, k, 0))

    def __len__(self) -> int:
        return int(np.broadcast(*self.columns()).size)

    def columns(self) -> list[IntArray]:
        return [getattr(self, f.name) for f in fields(self)]

    def take(self, index: IntArray | BoolArray) -> StrategyArrays:
        """The strategies at `index` (arrays are broadcast to a common shape first)."""
        cols = np.broadcast_arrays(*self.columns())
        return StrategyArrays(*(np.asarray(c)[index] for c in cols))

    def strategy(self, i: int = 0) -> Strategy:
        """Strategy number `i` as a spec."""
        cols = [np.ravel(c) for c in np.broadcast_arrays(*self.columns())]
        v = {f.name: int(c[i]) for f, c in zip(fields(self), cols, strict=True)}
        # the named choices back from their codes
        named = {
            f: next(n for n, c in codes.items() if c == v[f]) for f, codes in CODED_FIELDS.items()
        }
        return Strategy(
            tp=v["tp"],
            pp=v["pp"],
            dp=v["dp"],
            interleave=v["interleave"],
            micro_batch=v["micro_batch"],
            global_batch=v["global_batch"],
            sequence_parallel=bool(v["sequence_parallel"]),
            zero=v["zero"],
            overlap_dp=bool(v["overlap_dp"]),
            grad_reduce_bytes=v["grad_reduce_bytes"],
            ep=v["ep"],
            overlap_tp=bool(v["overlap_tp"]),
            overlap_p2p=bool(v["overlap_p2p"]),
            p2p_scatter_gather=bool(v["p2p_scatter_gather"]),
            tp_comm_overlap=bool(v["tp_comm_overlap"]),
            grad_accumulation_fusion=bool(v["grad_accumulation_fusion"]),
            cp=v["cp"],
            first_stage_layers=v["first_stage_layers"],
            last_stage_layers=v["last_stage_layers"],
            overlap_backward_gather=bool(v["overlap_backward_gather"]),
            defer_embedding_wgrad=bool(v["defer_embedding_wgrad"]),
            wgrad_deferral_limit=v["wgrad_deferral_limit"],
            overlap_ep=bool(v["overlap_ep"]),
            microbatch_group=v["microbatch_group"],
            recompute_num_layers=v["recompute_num_layers"],
            zero_shard=v["zero_shard"],
            fp8_param_gather=bool(v["fp8_param_gather"]),
            fp8_dispatch=bool(v["fp8_dispatch"]),
            shared_expert_overlap=bool(v["shared_expert_overlap"]),
            expert_tp=v["expert_tp"],
            recompute_modules=tuple(
                name for name, bit in RECOMPUTE_MODULE_BITS.items() if v["recompute_modules"] & bit
            ),
            **named,
        )


def check_bounds(s: Strategy) -> None:
    """Degrees, GPUs and batch sizes within `railplan.limits` before they enter int64 arrays."""
    for name in ("tp", "pp", "dp", "interleave", "ep", "cp"):
        check_int(name, getattr(s, name), 1, MAX_GPUS)
    for name in ("first_stage_layers", "last_stage_layers"):
        check_int(name, getattr(s, name), 0, MAX_GPUS)
    for name in ("micro_batch", "global_batch"):
        check_int(name, getattr(s, name), 1, MAX_GLOBAL_BATCH)
    check_int("wgrad_deferral_limit", s.wgrad_deferral_limit, 0, MAX_GLOBAL_BATCH)
    check_int("microbatch_group", s.microbatch_group, 0, MAX_GLOBAL_BATCH)
    check_int("recompute_num_layers", s.recompute_num_layers, 0, MAX_GPUS)
    check_int("zero_shard", s.zero_shard, 0, MAX_GPUS)
    check_int("expert_tp", s.expert_tp, 0, MAX_GPUS)
    check_int("gpus", s.gpus, 1, MAX_GPUS)  # tp·cp·pp·dp


_MOE_MODULE_BITS = sum(RECOMPUTE_MODULE_BITS[m] for m in ("moe_act", "moe", "shared_experts"))


def module_bits(modules: Sequence[str]) -> int:
    """`Strategy.recompute_modules` as the bits of `RECOMPUTE_MODULE_BITS`."""
    return sum({RECOMPUTE_MODULE_BITS[m] for m in modules})


_ALL_MODULE_BITS = sum(RECOMPUTE_MODULE_BITS.values())
_INSIDE_MOE_BITS = RECOMPUTE_MODULE_BITS["moe_act"] | RECOMPUTE_MODULE_BITS["shared_experts"]


def rerun_modules(recompute: IntArray | int, modules: IntArray | int) -> IntArray:
    """The modules whose forward the backward pass runs again, as `RECOMPUTE_MODULE_BITS`:
    every one under full recompute, the named ones (`Strategy.recompute_modules`) under
    selective, none without recompute. A rerun MoE block holds its activation and shared
    experts, so those two are not rerun a second time on their own."""
    r = np.asarray(recompute)
    bits = np.where(r == FULL, _ALL_MODULE_BITS, np.where(r == SELECTIVE, modules, 0))
    block = (bits & RECOMPUTE_MODULE_BITS["moe"]) > 0
    return np.asarray(np.where(block, bits & ~_INSIDE_MOE_BITS, bits), dtype=np.int64)


def recomputes(s: StrategyArrays, module: str) -> BoolArray:
    """Where the backward pass runs `module`'s forward again (`rerun_modules`), in the layers it
    recomputes at all (`recomputed_share`)."""
    bits = rerun_modules(s.recompute, s.recompute_modules)
    return np.asarray((bits & RECOMPUTE_MODULE_BITS[module]) > 0)


def recomputed_share(
    model: Model, s: StrategyArrays, layers: FloatArray | None = None
) -> FloatArray:
    """The share of a stage's layers whose forward the backward reruns: every layer, except
    under full recompute with `recompute_num_layers` N > 0 (Megatron's block method), where the
    first N layers of each of its v model chunks are. `layers`: the stage's (default the mean,
    layers/pp, which the time model uses for every stage)."""
    n = s.recompute_num_layers.astype(np.float64)
    if not bool(np.any(n > 0)):  # the usual case costs nothing
        return np.ones(())
    stage = model.layers / np.maximum(s.pp, 1) if layers is None else layers
    chunk = np.asarray(stage, dtype=np.float64) / np.maximum(s.interleave, 1)
    block = np.minimum(n, chunk) / np.maximum(chunk, 1.0)
    return np.asarray(np.where((s.recompute == FULL) & (n > 0), block, 1.0))


def from_strategies(strategies: Strategy | Sequence[Strategy]) -> StrategyArrays:
    """Arrays from one Strategy (0-d) or a sequence of them (1-d)."""
    many = not isinstance(strategies, Strategy)
    try:
        items = [strategies] if isinstance(strategies, Strategy) else list(strategies)
    except TypeError:
        raise RailplanError(
            "strategies", f"give a Strategy or a list of them; got {type(strategies).__name__}"
        ) from None
    for s in items:
        if not isinstance(s, Strategy):
            raise RailplanError("strategies", f"give Strategy objects; got {type(s).__name__}")
        check_bounds(s)

    def col(get: Callable[[Strategy], int]) -> IntArray:
        vals = np.array([get(s) for s in items], dtype=np.int64)
        return vals if many else vals.reshape(())

    def coded(field: str) -> IntArray:
        """A named choice as its code (`CODED_FIELDS`)."""
        codes = CODED_FIELDS[field]
        return col(lambda s: codes[getattr(s, field)])

    return StrategyArrays(
        tp=col(lambda s: s.tp),
        pp=col(lambda s: s.pp),
        dp=col(lambda s: s.dp),
        interleave=col(lambda s: s.interleave),
        micro_batch=col(lambda s: s.micro_batch),
        global_batch=col(lambda s: s.global_batch),
        sequence_parallel=col(lambda s: int(s.sequence_parallel)),
        zero=col(lambda s: s.zero),
        overlap_dp=col(lambda s: int(s.overlap_dp)),
        grad_reduce_bytes=col(lambda s: s.grad_reduce_bytes),
        ep=col(lambda s: s.ep),
        overlap_tp=col(lambda s: int(s.overlap_tp)),
        overlap_p2p=col(lambda s: int(s.overlap_p2p)),
        p2p_scatter_gather=col(lambda s: int(s.p2p_scatter_gather)),
        tp_comm_overlap=col(lambda s: int(s.tp_comm_overlap)),
        grad_accumulation_fusion=col(lambda s: int(s.grad_accumulation_fusion)),
        cp=col(lambda s: s.cp),
        first_stage_layers=col(lambda s: s.first_stage_layers),
        last_stage_layers=col(lambda s: s.last_stage_layers),
        overlap_backward_gather=col(lambda s: int(s.overlap_backward_gather)),
        defer_embedding_wgrad=col(lambda s: int(s.defer_embedding_wgrad)),
        wgrad_deferral_limit=col(lambda s: s.wgrad_deferral_limit),
        overlap_ep=col(lambda s: int(s.overlap_ep)),
        microbatch_group=col(lambda s: s.microbatch_group),
        recompute_num_layers=col(lambda s: s.recompute_num_layers),
        zero_shard=col(lambda s: s.zero_shard),
        fp8_param_gather=col(lambda s: int(s.fp8_param_gather)),
        fp8_dispatch=col(lambda s: int(s.fp8_dispatch)),
        shared_expert_overlap=col(lambda s: int(s.shared_expert_overlap)),
        expert_tp=col(lambda s: s.expert_tp),
        recompute_modules=col(lambda s: module_bits(s.recompute_modules)),
        **{f: coded(f) for f in CODED_FIELDS},
    )


def layers_of_stage(model: Model, s: StrategyArrays, stage: IntArray | int) -> IntArray:
    """Transformer layers of pipeline stage `stage` (0 = first; broadcasts with `s`): the
    strategy's pipeline, given layers and schedule in `stage_layer_counts`."""
    return stage_layer_counts(
        model,
        s.pp,
        stage,
        s.first_stage_layers,
        s.last_stage_layers,
        s.pipeline_schedule == DUALPIPEV,
    )


def stage_layer_counts(
    model: Model,
    pp: IntArray,
    stage: IntArray | int,
    given_f: IntArray | int = 0,
    given_l: IntArray | int = 0,
    dualpipev: BoolArray | bool = False,
) -> IntArray:
    """Transformer layers of pipeline stage `stage` (0 = first) of `pp` stages.

    Unless given (`first_stage_layers`, `last_stage_layers`, as Megatron's
    --decoder-first/last-pipeline-num-layers), the layers are spread so that stages differ by at
    most one: the stages not given get ⌊rest/n⌋, and the remainder goes one layer each to the
    middle stages from the first on, then to the end stages (which also hold the embedding and
    the LM head). With pp = 1 the one stage holds every layer. The model's multi-token
    prediction layers (`Model.mtp_layers`) are layers of the stage with the LM head, the last
    (Megatron-Core `mtp_on_this_rank` without a custom layout), rank 0 with DualPipeV."""
    i = np.asarray(stage, dtype=np.int64)
    pp = np.maximum(pp, 1).astype(np.int64)
    given_f, given_l = np.asarray(given_f), np.asarray(given_l)
    first_free, last_free = given_f == 0, given_l == 0
    free_stages = np.maximum(pp - (~first_free).astype(np.int64) - (~last_free), 1)
    free_layers = model.layers - given_f - given_l
    base, r = free_layers // free_stages, free_layers % free_stages
    mid_extra = np.minimum(r, np.maximum(pp - 2, 0))
    end_extra = r - mid_extra  # left for the free end stages: the first, then the last
    first = np.where(first_free, base + (end_extra >= 1), given_f)
    last = np.where(last_free, base + (end_extra - first_free >= 1), given_l)
    middle = base + (i - 1 < mid_extra)
    out = np.where(i == 0, first, np.where(i == pp - 1, last, middle))
    out = np.where(pp == 1, model.layers, out)
    if model.mtp_layers:
        out = out + np.where(i == head_rank(pp, dualpipev), model.mtp_layers, 0)
    return np.asarray(out, dtype=np.int64)


#: `stage_layers`' layouts of distinct (pp, first/last stage layers, schedule) rules, by model
#: and rules: the search asks for the same ones in every chunk (emptied when full)
_STAGE_TABLES: dict[tuple[Model, bytes], dict[str, FloatArray]] = {}
_STAGE_TABLES_MAX = 256


def stage_layers(model: Model, s: StrategyArrays) -> dict[str, FloatArray]:
    """Layers of the `first`, the fullest `middle` (stage 1, which takes the first extra layer;
    0 when pp ≤ 2) and the `last` stage (`layers_of_stage`), their `max`, the `fewest` any stage
    holds (the middle stages' fewest is the last one's, pp − 2), the `mean` layers/pp, and
    the MoE layers of the first, middle and last stage and the middle stages with the most and
    the fewest of them (`first_moe`, `middle_moe`, `last_moe`, `heavy`, `heavy_moe`,
    `heavy_rank`, `light`, `light_moe`, `light_rank`: `_stage_moe_layers`)."""
    # the MoE layers of an interleaved rank follow its chunks (`_chunk_starts`); a dense
    # model's layout does not depend on them
    chunks = s.interleave if model.moe_layers else np.ones_like(s.interleave)
    cols = np.broadcast_arrays(
        np.asarray(s.pp), s.first_stage_layers, s.last_stage_layers, s.pipeline_schedule, chunks
    )
    if cols[0].size > 64 and model.layers < 1 << 14:
        # Many strategies, few stage split rules: each distinct (pp, first and last stage
        # layers, schedule, chunks) laid out once, then looked up (the search asks for the same
        # few in every chunk: remembered, emptied when full). One integer per rule (pp below
        # 2^14, the stage layers and chunks below 2^15, the schedule code below 16; a pp or
        # chunk count beyond the model's layers is invalid, its layout any).
        mask = (1 << 15) - 1
        pp, first, last, code, v = (np.asarray(c, dtype=np.int64) for c in cols)
        pp = np.minimum(pp, (1 << 14) - 1)
        v, first, last = (np.minimum(x, mask) for x in (v, first, last))
        rule = (((pp << 15 | v) << 15 | first) << 15 | last) << 4 | code
        distinct, inverse = np.unique(rule.ravel(), return_inverse=True)
        key = (model, distinct.tobytes())
        table = _STAGE_TABLES.get(key)
        if table is None:
            if len(_STAGE_TABLES) >= _STAGE_TABLES_MAX:
                _STAGE_TABLES.clear()
            sub = replace(
                s,
                pp=distinct >> 49,
                interleave=distinct >> 34 & mask,
                first_stage_layers=distinct >> 19 & mask,
                last_stage_layers=distinct >> 4 & mask,
                pipeline_schedule=distinct & 15,
            )
            table = _STAGE_TABLES[key] = _stage_layers(model, sub)
        at = inverse.reshape(pp.shape)
        return {k: np.asarray(v[at]) for k, v in table.items()}
    return _stage_layers(model, s)


#: the stages memory and the pipeline compare: the first, the fullest middle one (rank 1),
#: the middle ones with the most and the fewest MoE layers (`heavy`, `light`) and the last
STAGE_KEYS = ("first", "middle", "heavy", "light", "last")


def compared_stages(st: dict[str, FloatArray]) -> tuple[str, ...]:
    """The `STAGE_KEYS` of `st` (`stage_layers`) worth comparing: `heavy` and `light` only
    where some strategy's is a middle rank other than rank 1 (elsewhere they are `middle`)."""
    return tuple(
        k
        for k in STAGE_KEYS
        if k not in ("heavy", "light")
        or (k in st and bool(np.any((st[k] > 0) & (st[k + "_rank"] != 1))))
    )


def stage_ranks(st: dict[str, FloatArray], s: StrategyArrays) -> dict[str, IntArray]:
    """The pipeline rank of each of `STAGE_KEYS` (0 = the first stage)."""
    return {
        "first": np.zeros_like(s.pp),
        "middle": np.ones_like(s.pp),
        "heavy": np.asarray(st["heavy_rank"], dtype=np.int64),
        "light": np.asarray(st["light_rank"], dtype=np.int64),
        "last": np.asarray(s.pp - 1),
    }


def moe_layers_before(model: Model, n: IntArray | int) -> IntArray:
    """MoE layers among the first `n` transformer layers: after the `first_dense_layers`, every
    `moe_layer_interval`-th layer (the interval-th, the 2·interval-th, …: `Model.moe_layers` of
    them in all)."""
    n = np.asarray(n, dtype=np.int64)
    if not model.moe_layers:
        return np.zeros_like(n)
    return np.asarray(np.maximum(n - model.first_dense_layers, 0) // model.moe_layer_interval)


def _stage_layers(model: Model, s: StrategyArrays) -> dict[str, FloatArray]:
    pp = np.maximum(s.pp, 1)
    first = layers_of_stage(model, s, 0)
    middle = np.where(pp > 2, layers_of_stage(model, s, 1), 0)
    last = layers_of_stage(model, s, pp - 1)
    fewest_middle = np.where(pp > 2, layers_of_stage(model, s, np.maximum(pp - 2, 1)), last)
    f = [np.asarray(x, dtype=np.float64) for x in (first, middle, last, fewest_middle)]
    moe = _stage_moe_layers(model, s, pp)
    return {
        "first": f[0],
        "middle": f[1],
        "last": f[2],
        "max": np.asarray(np.maximum(np.maximum(f[0], f[1]), f[2])),
        "fewest": np.asarray(np.minimum(np.minimum(f[0], f[2]), f[3])),
        "mean": np.asarray((model.layers + model.mtp_layers) / pp.astype(np.float64)),
    } | moe


def _rank_moe_counts(
    model: Model, s: StrategyArrays, pp: IntArray
) -> Iterator[tuple[int, IntArray, FloatArray]]:
    """(rank r, its layers, its MoE layers; 0 beyond a strategy's pp) for r = 0 … max pp − 1,
    by the rule of `_stage_moe_layers`."""

    def between(a: IntArray, b: IntArray) -> IntArray:
        return np.asarray(moe_layers_before(model, b) - moe_layers_before(model, a))

    if np.size(pp) == 0:
        return
    dual = np.asarray(s.pipeline_schedule == DUALPIPEV)
    head = head_rank(pp, dual)
    mtp = model.mtp_layers
    # a rank past the model's layers holds none: no valid strategy has one
    ranks = range(min(int(np.max(pp)), model.layers + model.mtp_layers))
    counts = [np.asarray(layers_of_stage(model, s, r)) for r in ranks]
    owns = [np.where(r == head, n - mtp, n) for r, n in zip(ranks, counts, strict=True)]
    # Interleaved (Megatron's virtual stages, not DualPipeV): rank r's own layers in v chunks,
    # chunk j of each rank in round j, the rounds one after another (`chunk_starts`); more
    # chunks than layers (invalid) lay out as one layer per chunk
    v = np.where(dual, 1, np.clip(np.asarray(s.interleave), 1, model.layers))
    starts = _chunk_starts(owns, pp, v) if bool(np.any(v > 1)) else None
    start = np.zeros(np.shape(pp), dtype=np.int64)  # contiguous stages: where rank r starts
    front_end = np.zeros_like(start)  # DualPipeV: the front chunks so far end here, and
    back_start = np.full_like(start, model.layers)  # the back chunks so far start here
    for r, n, own in zip(ranks, counts, owns, strict=True):
        here = r < pp
        front = (own + 1) // 2
        back = own - front
        dual_moe = between(front_end, front_end + front) + between(back_start - back, back_start)
        run = between(start, start + own)
        if starts is not None:
            chunked = sum(
                (between(c, c + _chunk_size(own, v, j)) for j, c in enumerate(starts[r])),
                np.zeros_like(run),
            )
            run = np.where(v > 1, chunked, run)
        count = np.where(dual, dual_moe, run) + np.where(r == head, mtp, 0)
        yield r, n, np.where(here, count, 0).astype(np.float64)
        start = start + np.where(here, own, 0)
        front_end = front_end + np.where(here, front, 0)
        back_start = back_start - np.where(here, back, 0)


def _chunk_size(own: IntArray, v: IntArray, j: int) -> IntArray:
    """Layers of chunk j of a rank holding `own` in v chunks (the first ones take the extra
    layers where v does not divide them; 0 for j ≥ v)."""
    return np.asarray(np.where(j < v, own // v + (j < own % v), 0))


def _chunk_starts(owns: list[IntArray], pp: IntArray, v: IntArray) -> list[list[IntArray]]:
    """The first layer of chunk j of each rank r, [r][j], in Megatron-Core's interleaved
    layout (`get_transformer_layer_offset`, core_v0.12.1: chunk j of rank r is virtual stage
    j·pp + r, so round j holds every rank's chunk j in rank order, after rounds 0 … j − 1)."""
    ranks = len(owns)
    rounds = int(np.max(v))
    sizes = [
        [np.where(r < pp, _chunk_size(owns[r], v, j), 0) for j in range(rounds)]
        for r in range(ranks)
    ]
    out: list[list[IntArray]] = [[] for _ in range(ranks)]
    round_start = np.zeros(np.shape(pp), dtype=np.int64)
    for j in range(rounds):
        at = round_start
        for r in range(ranks):
            out[r].append(np.asarray(at))
            at = at + sizes[r][j]
        round_start = at
    return out


def moe_layers_by_stage(model: Model, s: StrategyArrays) -> list[int]:
    """The MoE layers of each pipeline stage of one strategy, rank 0 first (`_stage_moe_layers`'
    rule)."""
    pp = np.maximum(np.asarray(s.pp), 1)
    if not model.moe_layers:
        return [0] * int(pp)
    return [int(c) for r, _, c in _rank_moe_counts(model, s, pp) if r < int(pp)]


def _stage_moe_layers(model: Model, s: StrategyArrays, pp: IntArray) -> dict[str, FloatArray]:
    """The MoE layers of the first, the middle (rank 1) and the last stage, and the middle
    stages with the most and the fewest of them (`heavy`, `light`: their layers, MoE layers and
    ranks; the lowest rank on a tie, which holds the most layers and micro-batches; none with
    pp ≤ 2: an MoE layer may cost more than a dense one or, where it skips the MLP's
    tensor-parallel collectives, less), walking the ranks from where each one's layers
    start. A stage's layers are contiguous; interleaved, each of its chunks is
    (`_chunk_starts`: Megatron-Core's virtual stages); with DualPipeV (deepseek-ai/DualPipe
    `dualpipev.py`) rank r runs chunk r of the front half and chunk 2·pp − 1 − r of the back
    half, its layers taken half from each (the front chunk the larger). The multi-token
    prediction layers sit on the stage with the LM head (`stage_layer_counts`) and are MoE
    layers where the model has any (Megatron-Core builds them with the decoder's last layer
    spec, `get_gpt_mtp_block_spec`)."""
    zero = np.zeros(np.shape(pp))
    if not model.moe_layers:
        return {
            "first_moe": zero,
            "middle_moe": zero,
            "last_moe": zero,
            "heavy": zero,
            "heavy_moe": zero,
            "heavy_rank": np.ones(np.shape(pp)),
            "light": zero,
            "light_moe": zero,
            "light_rank": np.ones(np.shape(pp)),
        }

    first = middle = last = heavy = heavy_moe = light = np.zeros(np.shape(pp))
    light_moe = np.full(np.shape(pp), np.inf)
    heavy_rank = light_rank = np.ones(np.shape(pp))
    for r, n, count in _rank_moe_counts(model, s, pp):
        here = r < pp
        if r == 0:
            first = count
        if r == 1:
            middle = np.where(pp > 2, count, 0.0)
        last = np.where(here & (r == pp - 1), count, last)
        inner = here & (r >= 1) & (r <= pp - 2)
        more = inner & (count > heavy_moe)
        heavy = np.where(more, n, heavy)
        heavy_moe = np.where(more, count, heavy_moe)
        heavy_rank = np.where(more, r, heavy_rank)
        fewer = inner & (count < light_moe)
        light = np.where(fewer, n, light)
        light_moe = np.where(fewer, count, light_moe)
        light_rank = np.where(fewer, r, light_rank)
    return {
        "first_moe": np.asarray(first),
        "middle_moe": np.asarray(middle),
        "last_moe": np.asarray(last),
        "heavy": np.asarray(heavy, dtype=np.float64),
        "heavy_moe": np.asarray(heavy_moe),
        "heavy_rank": np.asarray(heavy_rank, dtype=np.float64),
        "light": np.asarray(light, dtype=np.float64),
        "light_moe": np.asarray(np.where(np.isfinite(light_moe), light_moe, 0.0)),
        "light_rank": np.asarray(light_rank, dtype=np.float64),
    }


def overlap_ep_rules(s: StrategyArrays) -> list[tuple[BoolArray, str]]:
    """Where the MoE all-to-all overlap (`overlap_ep`) is allowed, one condition each, as
    Megatron-Core asserts them."""
    return [
        (np.asarray(s.ep > 1), "overlap_ep needs ep > 1"),
        (
            np.asarray((s.pp == 1) | (s.interleave > 1)),
            "overlap_ep with pp > 1 needs interleave > 1 (as Megatron-Core asserts)",
        ),
        (
            np.asarray(s.recompute != FULL),
            "overlap_ep needs recompute none or selective (as Megatron-Core asserts)",
        ),
    ]


def dualpipev_rules(s: StrategyArrays) -> list[tuple[BoolArray, str]]:
    """What DualPipeV needs, one condition each (`dualpipev.py` asserts m ≥ 2·pp; the V is two
    chunks per rank). Micro-batch groups belong to Megatron's schedules; rank 0's layers (its
    two chunks, with both ends) may be given as `first_stage_layers`."""
    return [
        (np.asarray(s.pp > 1), "dualpipev needs pp > 1"),
        (np.asarray(s.interleave == 2), "dualpipev runs two chunks per rank: needs interleave 2"),
        (
            np.asarray(s.micro_batches >= 2 * s.pp),
            "dualpipev needs at least 2·pp micro-batches per replica (as dualpipev.py asserts)",
        ),
        (
            np.asarray(s.last_stage_layers == 0),
            "dualpipev's rank 0 holds both ends: give its layers with first_stage_layers, not "
            "last_stage_layers",
        ),
        (np.asarray(s.microbatch_group == 0), "microbatch_group is Megatron's, not dualpipev's"),
        (
            np.asarray(s.defer_embedding_wgrad == 0),
            "defer_embedding_wgrad is Megatron's; dualpipev runs weight gradients apart already",
        ),
    ]


def dualpipev_allowed(s: StrategyArrays) -> BoolArray:
    """Where every `dualpipev_rules` condition holds."""
    allowed = np.ones((), dtype=bool)
    for ok, _ in dualpipev_rules(s):
        allowed = allowed & ok
    return np.asarray(allowed)


def overlap_ep_allowed(s: StrategyArrays) -> BoolArray:
    """Where every `overlap_ep_rules` condition holds."""
    allowed = np.ones((), dtype=bool)
    for ok, _ in overlap_ep_rules(s):
        allowed = allowed & ok
    return np.asarray(allowed)


def shared_expert_overlap_rules(model: Model, s: StrategyArrays) -> list[tuple[BoolArray, str]]:
    """What `shared_expert_overlap` needs: the alltoall dispatcher (Megatron-Core core_v0.12.1
    `transformer_config.py` asserts it), neither `overlap_ep` nor the `shared_experts`
    recompute module (later versions, core_v0.19.0, assert both), and shared experts (without
    them Megatron-Core ignores the flag: railplan's rule, it would change nothing)."""
    every = np.ones_like(s.tp, dtype=bool)
    return [
        (
            every & (model.shared_experts > 0),
            f"shared_expert_overlap needs a model with shared experts ({model.name} has none)",
        ),
        (s.ep_dispatch != EP_DEEPEP, "shared_expert_overlap needs ep_dispatch alltoall"),
        (s.overlap_ep == 0, "shared_expert_overlap cannot run with overlap_ep"),
        (
            (s.recompute != SELECTIVE)
            | ((s.recompute_modules & RECOMPUTE_MODULE_BITS["shared_experts"]) == 0),
            "shared_expert_overlap cannot run with the shared_experts recompute module",
        ),
    ]


def shared_expert_overlap_changes(s: StrategyArrays) -> BoolArray:
    """Where `shared_expert_overlap` changes anything: all-to-alls to run beside (ep > 1), or
    a sequence-parallel input its shared experts gather themselves (tp > 1)."""
    return np.asarray((s.ep > 1) | ((s.tp > 1) & (s.sequence_parallel > 0)))


# Each rule: (field named in the error, predicate of validity, what is allowed).
def validity(model: Model, s: StrategyArrays) -> list[tuple[str, BoolArray, str]]:
    """Structural validity rules, vectorized. Every rule is one allowed-values statement."""
    per_replica = s.global_batch // np.maximum(s.dp, 1)
    st = stage_layers(model, s)
    fixed = (s.first_stage_layers > 0).astype(np.int64) + (s.last_stage_layers > 0)
    rest_layers = model.layers - s.first_stage_layers - s.last_stage_layers
    rest_stages = s.pp - fixed
    v = np.maximum(s.interleave, 1)
    chunks = 2 * s.cp  # causal load balancing: each sequence in 2·cp chunks (Megatron-Core)
    return [
        ("tp", model.heads % s.tp == 0, f"tp must divide heads ({model.heads})"),
        ("tp", model.kv_heads_ % s.tp == 0, f"tp must divide kv_heads ({model.kv_heads_})"),
        ("pp", s.pp <= model.layers, f"pp must be at most layers ({model.layers})"),
        (
            "first_stage_layers",
            ((s.first_stage_layers == 0) & (s.last_stage_layers == 0)) | (s.pp > 1),
            "first/last_stage_layers need pp > 1",
        ),
        (
            "first_stage_layers",
            (fixed == 0)
            | np.where(
                rest_stages > 0,
                (rest_layers >= rest_stages) & (rest_layers % np.maximum(rest_stages, 1) == 0),
                rest_layers == 0,
            ),
            f"first_stage_layers + last_stage_layers must leave the other stages an equal "
            f"number (≥ 1) of the {model.layers} layers (as Megatron requires)",
        ),
        ("global_batch", s.global_batch % s.dp == 0, "global_batch must be a multiple of dp"),
        (
            "micro_batch",
            per_replica % s.micro_batch == 0,
            "micro_batch must divide the per-replica batch (global_batch / dp)",
        ),
        (
            "interleave",
            (v == 1) | (st["fewest"] >= v),
            "interleave must be at most the layers of the smallest pipeline stage (each "
            "virtual stage holds one layer or more)",
        ),
        ("interleave", (s.interleave == 1) | (s.pp > 1), "interleave > 1 needs pp > 1"),
        (
            "interleave",
            (s.interleave == 1)
            | (s.microbatch_group > 0)
            | (s.micro_batches % s.pp == 0)
            | s.dualpipev,
            "interleaved schedule needs micro-batches per replica to be a multiple of pp, or a "
            "microbatch_group N (pp ≤ N ≤ m, m mod N 0 or ≥ pp)",
        ),
        (
            "microbatch_group",
            (s.microbatch_group == 0) | (s.interleave > 1),
            "microbatch_group needs interleave > 1",
        ),
        (
            "microbatch_group",
            (s.microbatch_group == 0)
            | (
                (s.microbatch_group >= s.pp)
                & (s.microbatch_group <= s.micro_batches)
                & (
                    (s.micro_batches % np.maximum(s.microbatch_group, 1) == 0)
                    | (s.micro_batches % np.maximum(s.microbatch_group, 1) >= s.pp)
                )
            ),
            "microbatch_group N must lie in [pp, micro-batches per replica m] with m mod N "
            "0 or ≥ pp (as Megatron-Core requires)",
        ),
        (
            "cp",
            (s.cp == 1) | (model.seq % chunks == 0),
            f"cp must divide seq ({model.seq}) into 2·cp chunks (causal load balancing)",
        ),
        ("ep", (s.ep == 1) | (model.experts > 1), "ep > 1 needs an MoE model (experts > 1)"),
        (
            "sequence_parallel",
            (model.experts == 1) | (s.tp == 1) | (s.sequence_parallel > 0),
            "an MoE model with tp > 1 needs sequence parallelism (Megatron-Core's MoE layer "
            "raises without it in training: moe_layer.py)",
        ),
        ("ep", model.experts % s.ep == 0, f"ep must divide experts ({model.experts})"),
        (
            "expert_tp",
            (s.expert_tp == 0) | (s.expert_tp == s.tp) | (model.experts > 1),
            "expert_tp needs an MoE model (experts > 1)",
        ),
        (
            "expert_tp",
            s.tp % s.etp == 0,
            "expert_tp must divide tp (0 = tp; the expert tensor-parallel ranks are the first "
            "of each tp group)",
        ),
        (
            "ep",
            (s.tp * s.grad_ranks) % (s.etp * s.ep) == 0,
            "ep·expert_tp must divide tp·cp·dp (the expert grid expert_tp × ep × expert-dp "
            "fills a stage; with expert_tp = tp, the default: ep must divide dp·cp)",
        ),
        *(("overlap_ep", (s.overlap_ep == 0) | ok, rule) for ok, rule in overlap_ep_rules(s)),
        *(("pipeline_schedule", ~s.dualpipev | ok, rule) for ok, rule in dualpipev_rules(s)),
        (
            "recompute_modules",
            (s.recompute_modules == RECOMPUTE_MODULE_BITS["core_attn"])
            | (s.recompute == SELECTIVE),
            "recompute_modules needs recompute selective (Megatron-Core "
            "--recompute-granularity selective)",
        ),
        (
            "defer_embedding_wgrad",
            (s.defer_embedding_wgrad == 0) | (s.pp > 1),
            "defer_embedding_wgrad needs pp > 1 (the LM head's weight gradients run in the "
            "pipeline's cooldown)",
        ),
        (
            "wgrad_deferral_limit",
            (s.wgrad_deferral_limit == 0) | (s.defer_embedding_wgrad > 0),
            "wgrad_deferral_limit needs defer_embedding_wgrad",
        ),
        (
            "recompute_num_layers",
            (s.recompute_num_layers == 0) | (s.recompute == FULL),
            "recompute_num_layers needs recompute full (Megatron --recompute-granularity full "
            "--recompute-method block)",
        ),
        (
            "fp8_param_gather",
            (s.fp8_param_gather == 0) | s.fp8_gathered,
            "fp8_param_gather needs precision fp8 (the weights are kept in FP8 only then)",
        ),
        (
            "fp8_dispatch",
            (s.fp8_dispatch == 0) | s.fp8_dispatched,
            "fp8_dispatch needs precision fp8 and ep_dispatch deepep (DeepEP's FP8 dispatch, "
            "which feeds the experts' FP8 GEMMs)",
        ),
        (
            "router_dtype",
            (s.router_dtype != ROUTER_FP32) | (model.moe_layers > 0),
            f"router_dtype fp32 needs an MoE model ({model.name} has no router)",
        ),
        *(
            ("shared_expert_overlap", (s.shared_expert_overlap == 0) | ok, rule)
            for ok, rule in shared_expert_overlap_rules(model, s)
        ),
        (
            "shared_expert_overlap",
            (s.shared_expert_overlap == 0) | shared_expert_overlap_changes(s),
            "shared_expert_overlap changes nothing with ep 1 and no sequence-parallel tp > 1 "
            "(no all-to-all to run beside, no input to gather)",
        ),
        (
            "zero_shard",
            (s.zero_shard == 0) | (s.grad_ranks % np.maximum(s.zero_shard, 1) == 0),
            "zero_shard must divide the dp·cp data-parallel ranks (0 = shard over all of them)",
        ),
        (
            "zero_schedule",
            (s.zero_schedule == 0) | (s.zero >= 2),
            "zero_schedule step needs zero 2 or 3 (only they communicate per micro-batch, "
            "which step moves to once per step)",
        ),
        (
            "zero_shard",
            (s.zero_shard == 0) | (s.zero >= 1),
            "zero_shard needs zero ≥ 1 (there is nothing to shard without ZeRO)",
        ),
        (
            "zero_shard",
            (s.replicas == 1) | (s.expert_grad_ranks % s.replicas == 0),
            "with ep > 1, the replicas dp·cp/zero_shard must divide the expert data-parallel "
            "ranks tp·cp·dp/(expert_tp·ep) (as Megatron-Core requires)",
        ),
        (
            "ep_dispatch",
            (s.ep_dispatch != EP_DEEPEP) | (model.experts > 1),
            "ep_dispatch deepep needs an MoE model (experts > 1)",
        ),
        (
            "recompute_modules",
            (model.experts > 1) | ((s.recompute_modules & _MOE_MODULE_BITS) == 0),
            "recompute_modules moe, moe_act and shared_experts need an MoE model",
        ),
        (
            "recompute_modules",
            (model.shared_experts > 0)
            | ((s.recompute_modules & RECOMPUTE_MODULE_BITS["shared_experts"]) == 0),
            "recompute_modules shared_experts needs a model with shared experts",
        ),
        (
            "recompute_modules",
            bool(model.mla) | ((s.recompute_modules & RECOMPUTE_MODULE_BITS["mla_up_proj"]) == 0),
            "recompute_modules mla_up_proj needs an MLA model",
        ),
        (
            "recompute_modules",
            (s.overlap_ep == 0) | ((s.recompute_modules & RECOMPUTE_MODULE_BITS["moe"]) == 0),
            "recompute_modules moe with overlap_ep is refused (as Megatron-Core asserts)",
        ),
    ]


def valid_mask(model: Model, s: StrategyArrays) -> BoolArray:
    """True where every validity rule holds."""
    mask = np.ones(np.broadcast(*s.columns()).shape, dtype=bool)
    for _, ok, _ in validity(model, s):
        mask &= ok
    return mask


def check(model: Model, s: StrategyArrays, gpus: int | None = None) -> None:
    """Raise a one-line RailplanError for the first broken rule of a single strategy."""
    if gpus is not None and int(s.gpus) != gpus:
        raise RailplanError(
            "gpus",
            f"tp·cp·pp·dp = {int(s.tp)}·{int(s.cp)}·{int(s.pp)}·{int(s.dp)} = {int(s.gpus)} "
            f"but gpus = {gpus}; tp·cp·pp·dp must equal gpus",
        )
    for name, ok, allowed in validity(model, s):
        if not bool(np.all(ok)):
            raise RailplanError(name, f"{allowed}; {_values_text(model, s, name)}")


def _values_text(model: Model, s: StrategyArrays, field: str) -> str:
    """The numbers behind a broken rule of one strategy, and for tp/pp the values that work."""
    here = ", ".join(
        f"{k}={int(getattr(s, k).flat[0])}"
        for k in ("tp", "pp", "dp", "cp", "ep", "global_batch", "micro_batch", "interleave", "zero")
        if hasattr(s, k)
    )
    if field == "tp":
        tps = [t for t in range(1, model.heads + 1) if model.heads % t == 0 == model.kv_heads_ % t]
        return f"here {here}; tp values that work: {tps}"
    if field == "pp":
        even = [p for p in range(1, model.layers + 1) if model.layers % p == 0]
        return (
            f"here {here}; pp values that work: 1 to {model.layers} (stages may hold unequal "
            f"layers); these split the {model.layers} layers evenly: {even}"
        )
    return f"here {here}"
