"""Strategies as numpy arrays: the one representation every model function computes over.

A single `Strategy` becomes 0-d arrays; the search builds 1-d arrays of hundreds of thousands of
strategies. Both go through the same functions, so the scalar estimate and the vectorized search
can never disagree.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields

import numpy as np
import numpy.typing as npt

from railplan.errors import RailplanError
from railplan.specs import RECOMPUTE_CODES, Model, Strategy

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

NONE, SELECTIVE, FULL = 0, 1, 2


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
    grad_accumulation_fusion: IntArray = field(default_factory=lambda: np.ones((), dtype=np.int64))

    @property
    def gpus(self) -> IntArray:
        return self.tp * self.pp * self.dp

    @property
    def micro_batches(self) -> IntArray:
        return np.asarray(self.global_batch // np.maximum(self.dp * self.micro_batch, 1))

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
        code_to_name = {c: n for n, c in RECOMPUTE_CODES.items()}
        return Strategy(
            tp=v["tp"],
            pp=v["pp"],
            dp=v["dp"],
            interleave=v["interleave"],
            micro_batch=v["micro_batch"],
            global_batch=v["global_batch"],
            recompute=code_to_name[v["recompute"]],
            sequence_parallel=bool(v["sequence_parallel"]),
            zero=v["zero"],
            overlap_dp=bool(v["overlap_dp"]),
            grad_reduce_bytes=v["grad_reduce_bytes"],
            ep=v["ep"],
            overlap_tp=bool(v["overlap_tp"]),
            overlap_p2p=bool(v["overlap_p2p"]),
            grad_accumulation_fusion=bool(v["grad_accumulation_fusion"]),
        )


def from_strategies(strategies: Strategy | Sequence[Strategy]) -> StrategyArrays:
    """Arrays from one Strategy (0-d) or a sequence of them (1-d)."""
    many = not isinstance(strategies, Strategy)
    items = list(strategies) if isinstance(strategies, Sequence) else [strategies]

    def col(get: Callable[[Strategy], int]) -> IntArray:
        vals = np.array([get(s) for s in items], dtype=np.int64)
        return vals if many else vals.reshape(())

    return StrategyArrays(
        tp=col(lambda s: s.tp),
        pp=col(lambda s: s.pp),
        dp=col(lambda s: s.dp),
        interleave=col(lambda s: s.interleave),
        micro_batch=col(lambda s: s.micro_batch),
        global_batch=col(lambda s: s.global_batch),
        recompute=col(lambda s: RECOMPUTE_CODES[s.recompute]),
        sequence_parallel=col(lambda s: int(s.sequence_parallel)),
        zero=col(lambda s: s.zero),
        overlap_dp=col(lambda s: int(s.overlap_dp)),
        grad_reduce_bytes=col(lambda s: s.grad_reduce_bytes),
        ep=col(lambda s: s.ep),
        overlap_tp=col(lambda s: int(s.overlap_tp)),
        overlap_p2p=col(lambda s: int(s.overlap_p2p)),
        grad_accumulation_fusion=col(lambda s: int(s.grad_accumulation_fusion)),
    )


# Each rule: (field named in the error, predicate of validity, what is allowed).
def validity(model: Model, s: StrategyArrays) -> list[tuple[str, BoolArray, str]]:
    """Structural validity rules, vectorized. Every rule is one allowed-values statement."""
    per_replica = s.global_batch // np.maximum(s.dp, 1)
    layers_per_stage = model.layers // np.maximum(s.pp, 1)
    return [
        ("tp", model.heads % s.tp == 0, f"tp must divide heads ({model.heads})"),
        ("tp", model.kv_heads_ % s.tp == 0, f"tp must divide kv_heads ({model.kv_heads_})"),
        ("pp", s.pp <= model.layers, f"pp must be at most layers ({model.layers})"),
        ("pp", model.layers % s.pp == 0, f"pp must divide layers ({model.layers})"),
        ("global_batch", s.global_batch % s.dp == 0, "global_batch must be a multiple of dp"),
        (
            "micro_batch",
            per_replica % s.micro_batch == 0,
            "micro_batch must divide the per-replica batch (global_batch / dp)",
        ),
        (
            "interleave",
            layers_per_stage % s.interleave == 0,
            "interleave must divide the layers per stage (layers / pp)",
        ),
        ("interleave", (s.interleave == 1) | (s.pp > 1), "interleave > 1 needs pp > 1"),
        (
            "interleave",
            (s.interleave == 1) | (s.micro_batches % s.pp == 0),
            "interleaved schedule needs micro-batches per replica to be a multiple of pp",
        ),
        ("zero", (s.zero <= 1) | (s.pp == 1), "ZeRO stage 2-3 needs pp = 1"),
        ("ep", (s.ep == 1) | (model.experts > 1), "ep > 1 needs an MoE model (experts > 1)"),
        ("ep", model.experts % s.ep == 0, f"ep must divide experts ({model.experts})"),
        ("ep", s.dp % s.ep == 0, "ep must divide dp (expert-parallel ranks come from dp)"),
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
            f"tp·pp·dp = {int(s.tp)}·{int(s.pp)}·{int(s.dp)} = {int(s.gpus)} "
            f"but gpus = {gpus}; tp·pp·dp must equal gpus",
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
    fits = {
        "tp": [t for t in range(1, model.heads + 1) if model.heads % t == 0 == model.kv_heads_ % t],
        "pp": [p for p in range(1, model.layers + 1) if model.layers % p == 0],
    }.get(field)
    return f"here {here}" + ("" if fits is None else f"; {field} values that work: {fits}")
