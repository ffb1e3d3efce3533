"""Bytes every GPU pair exchanges in one training iteration, by kind (tp, pp, dp, ep, cp).

Sizes and counts come only from `railplan.workload.comm` (the source the iteration-time model
uses); who sends to whom comes from `railplan.traffic.placement` (ring, or hierarchical when a group
spans HB and NIC domains: SYSTEM.md formula 2, the algorithm `comm_time.group_collective_s` times).
Per iteration and TP group: the stage's layers (`strategies.layers_of_stage`) · m micro-batches
· (forward + recompute + backward) all-reduces of b·s·h activations, plus the sequence-parallel
backward re-gathers; per pipeline boundary: `comm.pp_message_bytes` each way per micro-batch
(b·s·h, or b·s·h/t with SP or the 2021-22 scatter/gather); per DP group: the
gradient and weight collectives of its ZeRO stage (`comm.dp_schedule`: ZeRO 2/3 communicate
every micro-batch; with hybrid sharding within each shard group, then across the replicas);
tied embeddings: first and last stage all-reduce the embedding gradient (counted as `dp`: it
is a gradient reduction). MoE (ep > 1): per MoE layer and micro-batch, uniform all-to-alls
among the ep ranks (`ep`; with DeepEP-style dispatch, same-rail edges between HB domains and
NVLink edges inside them), and the expert gradients reduced over the tp·cp·dp/(etp·ep)
expert-data-parallel ranks (counted as `dp`); with expert_tp > 1 the routed experts'
all-gathers and reduce-scatters among the etp ranks (counted as `tp`). Context parallelism
(cp > 1): per layer and micro-batch each GPU sends `comm.cp_steps_per_layer` K/V (and
K/V-gradient) blocks to its successor on the cp ring (`cp`); gradients are reduced over the
dp·cp ranks.

Storage is sparse: COO arrays (src, dst, kind, bytes), coalesced per (src, dst, kind); per-kind
scipy.sparse matrices on demand. Statistics use unordered pairs {i, j}, i < j, of distinct GPUs;
a pair's volume is the sum of both directions.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from railplan.errors import RailplanError
from railplan.fileio import atomic_write, check_target
from railplan.limits import MAX_GPUS, check_int
from railplan.specs import Model, Strategy, load_model
from railplan.specs.arrays import (
    StrategyArrays,
    check,
    from_strategies,
    layers_of_stage,
    moe_layers_by_stage,
    recomputed_share,
)
from railplan.traffic.placement import (
    Edges,
    Placement,
    all_to_all_edges,
    collective_edges,
    cross_rail,
    deduplicated_all_to_all_edges,
    expert_groups,
    pipeline_edges,
    ring_edges,
)
from railplan.workload import comm
from railplan.workload.routing import remote_domains, slot_factor, touched_ranks

KINDS: tuple[str, ...] = ("tp", "pp", "dp", "ep", "cp")
KIND_CODE: dict[str, int] = {k: i for i, k in enumerate(KINDS)}
# One colour per kind for every figure (matplotlib's tab10 colours)
KIND_COLOURS = {
    "tp": "#1f77b4",
    "pp": "#2ca02c",
    "dp": "#d62728",
    "ep": "#9467bd",
    "cp": "#8c564b",
}

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Traffic:
    """One iteration's traffic as coalesced COO arrays over `gpus` GPUs in HB domains of
    `hb_domain`; `kind` holds codes into KINDS."""

    gpus: int
    hb_domain: int
    src: IntArray
    dst: IntArray
    kind: npt.NDArray[np.int8]
    bytes: FloatArray
    #: where the matrix departs from what the iteration model times (one line each)
    notes: tuple[str, ...] = ()

    def __len__(self) -> int:
        return int(self.src.size)

    def matrix(self, kind: str | None = None) -> sp.csr_matrix:
        """N×N sparse matrix of bytes src→dst (rows send), for one kind or all kinds."""
        _check_kind(kind)
        sel = slice(None) if kind is None else self.kind == KIND_CODE[kind]
        n = self.gpus
        return sp.csr_matrix((self.bytes[sel], (self.src[sel], self.dst[sel])), shape=(n, n))

    def dense(self, first_gpus: int, kind: str | None = None) -> FloatArray:
        """Dense bytes matrix of GPUs 0…first_gpus−1 (for heatmaps)."""
        _check_kind(kind)
        n = min(check_int("first_gpus", first_gpus, 1, MAX_GPUS), self.gpus)
        sel = (self.src < n) & (self.dst < n)
        if kind is not None:
            sel &= self.kind == KIND_CODE[kind]
        out = np.zeros((n, n), dtype=np.float64)
        np.add.at(out, (self.src[sel], self.dst[sel]), self.bytes[sel])
        return out

    def kind_names(self) -> npt.NDArray[np.str_]:
        return np.asarray(KINDS)[self.kind]


def _check_kind(kind: str | None) -> None:
    if kind is not None and kind not in KIND_CODE:
        raise RailplanError("kind", f"{kind!r} is not allowed; choose one of {', '.join(KINDS)}")


def _coalesce(
    n: int, src: IntArray, dst: IntArray, kind: IntArray, size: FloatArray
) -> tuple[IntArray, IntArray, npt.NDArray[np.int8], FloatArray]:
    keep = size > 0
    src, dst, kind, size = src[keep], dst[keep], kind[keep], size[keep]
    key = (kind * n + src) * n + dst
    uniq, inv = np.unique(key, return_inverse=True)
    total = np.bincount(inv.ravel(), weights=size, minlength=uniq.size)
    k, rest = np.divmod(uniq, n * n)
    s, d = np.divmod(rest, n)
    return np.asarray(s), np.asarray(d), k.astype(np.int8), np.asarray(total, dtype=np.float64)


def _scale(e: Edges, factor: float) -> tuple[IntArray, IntArray, FloatArray]:
    return e.src, e.dst, np.asarray(e.share * factor, dtype=np.float64)


def kind_volumes(model: Model, s: StrategyArrays) -> dict[str, float]:
    """Multipliers that turn placement edges into bytes, all from `railplan.workload.comm`:
    `tp`, `cp`: bytes per unit edge share per group per layer of the stage per iteration;
    `etp`: the same for the routed experts' expert_tp groups per MoE layer;
    `ep`: bytes per all-to-all edge per MoE layer; `pp`: bytes per message per micro-batch
    count; `embedding`: the tied-embedding all-reduce buffer, two passes."""
    m = float(s.micro_batches)
    rerun = recomputed_share(model, s)
    tp_d = float(comm.tp_message_bytes(model, s))
    fp8_gather = float(comm.tp_gather_byte_ratio(s))

    def tp_bytes(moe_share: float) -> float:
        """`tp` for layers of which a `moe_share` are MoE layers (their MLP's collectives only
        for shared experts: `comm.tp_ops_per_layer`)."""
        ops = comm.tp_ops_per_layer(s, moe_share, rerun, model.shared_experts)
        all_reduces = float(ops["forward"] + ops["recompute"] + ops["backward"])
        gathers = float(ops["sp_regather"])
        return m * tp_d * ((1.0 + fp8_gather) * all_reduces + fp8_gather * gathers)

    e_ops = comm.expert_tp_ops_per_moe_layer(s, rerun)
    expert_all_reduces = float(e_ops["forward"] + e_ops["recompute"] + e_ops["backward"])
    cp_steps = comm.cp_steps_per_layer(s, rerun)
    sends = float(cp_steps["forward"] + cp_steps["recompute"] + cp_steps["backward"])
    a2a = comm.ep_all_to_alls_per_moe_layer(s, rerun)
    # in BF16 all-to-alls: half carry the tokens to the experts, in FP8 with `fp8_dispatch`
    wire = 0.5 * (1.0 + float(comm.ep_dispatch_byte_ratio(s)))
    a2a_bf16 = float(a2a["forward"] + a2a["recompute"] + a2a["backward"]) * wire
    return {
        # per ring edge: the K/V (and gradient) blocks of every micro-batch
        "cp": m * sends * float(comm.cp_block_bytes(model, s)),
        # each all-reduce (or SP reduce-scatter + all-gather) is two gather passes; in FP8 an
        # SP all-gather carries 1 byte per element (`comm.tp_gather_byte_ratio`)
        "tp": tp_bytes(model.moe_layers / model.layers),
        # the same per dense layer and per MoE layer (each stage takes its own mix)
        "tp_dense": tp_bytes(0.0),
        "tp_moe": tp_bytes(1.0) if model.moe_layers else 0.0,
        # the routed experts' all-gather / reduce-scatter pairs on the expert_tp group (the
        # reduce-scatter in FP32 with an FP32 router)
        "etp": m
        * (1.0 + float(comm.expert_tp_combine_byte_ratio(s)))
        * expert_all_reduces
        * float(comm.expert_tp_message_bytes(model, s)),
        "ep": m * a2a_bf16 * float(comm.ep_pair_bytes(model, s)),
        # DeepEP-style dispatch: all-to-alls × one copy of the GPU's tokens (`deepep_pair_bytes`
        # gives each edge's multiple of it)
        "ep_tokens": m * a2a_bf16 * float(comm.ep_token_bytes(model, s)),
        "pp": m * float(comm.pp_message_bytes(model, s)),
        "embedding": 2.0 * float(comm.embedding_gradient_bytes(model, s)),
    }


def dp_stage_bytes(model: Model, s: StrategyArrays, layers: float, end: bool) -> dict[str, float]:
    """Gradient and weight collectives of one stage of `layers` layers by ZeRO stage
    (comm.dp_schedule), per iteration, in gather passes: `dense` over the dp·cp ranks (an end
    stage also holds the vocabulary matrix) and `expert` over the expert-data-parallel ranks
    (`StrategyArrays.expert_grad_ranks`); with hybrid
    sharding those run within each shard group and `dense_replica` / `expert_replica` across
    the replicas of a shard (`comm.dp_iteration_bytes`)."""
    n = np.asarray(float(layers))
    grad = comm.dp_gradient_bytes(model, s, end, n)
    weights = comm.dp_weight_gather_bytes(model, s, end, n)
    e_grad = comm.dp_expert_gradient_bytes(model, s, n)
    e_weights = comm.dp_expert_weight_gather_bytes(model, s, n)
    dense = comm.dp_iteration_bytes(s, grad, weights)
    expert = comm.dp_iteration_bytes(s, e_grad, e_weights, expert=True)
    return {
        "dense": float(dense["shard"]),
        "dense_replica": float(dense["replica"]),
        "expert": float(expert["shard"]),
        "expert_replica": float(expert["replica"]),
    }


def deepep_pair_bytes(model: Model, s: StrategyArrays, x: int, y: int) -> tuple[float, float]:
    """DeepEP-style dispatch over x GPUs per domain × y domains, in copies of a GPU's tokens
    per edge and all-to-all: to each same-rail peer in another domain the expected remote
    domains ÷ (y − 1) (`routing.remote_domains`), to each peer in its domain the expected GPUs
    holding one of a token's experts ÷ x (`routing.touched_ranks`: one copy per GPU, each on
    one of the x GPUs of its domain); both × the busiest rank's `slot_factor`, as the time
    model."""
    sf = float(slot_factor(model, s.ep))
    remote = float(remote_domains(model, np.asarray(float(y))))
    rail = remote / (y - 1) if y > 1 else 0.0
    return sf * rail, sf * float(touched_ranks(model, s.ep)) / x


def hybrid_groups(rows: IntArray, replicas: int) -> tuple[IntArray, IntArray]:
    """A data-parallel group's rows (members in logical rank order) as the shard groups of
    hybrid sharding (consecutive members, 1/`replicas` of the row each) and the replica groups
    (the members at the same position of each shard group)."""
    g, n = rows.shape
    shard = n // max(replicas, 1)
    grid = rows.reshape(g, replicas, shard)
    return (
        np.asarray(grid.reshape(-1, shard)),
        np.asarray(grid.transpose(0, 2, 1).reshape(-1, replicas)),
    )


_Key = TypeVar("_Key", bound=Hashable)


def _per_stage(
    groups: IntArray, rows_per_stage: int, keys: Sequence[_Key]
) -> list[tuple[_Key, IntArray]]:
    """The group rows (stage-major, `rows_per_stage` per stage) of the stages sharing each
    distinct key of `keys` (one key per stage)."""
    stage_of_row = np.arange(groups.shape[0]) // max(rows_per_stage, 1)
    out = []
    for key in dict.fromkeys(keys):
        stage_has_key = np.array([k == key for k in keys])
        out.append((key, groups[stage_has_key[stage_of_row]]))
    return out


def traffic(
    model: Model | str | dict[str, Any], strategy: Strategy | dict[str, Any], p: Placement
) -> Traffic:
    """Bytes each GPU pair exchanges in one iteration of `strategy` placed by `p`; every stage
    with its own layers (`strategies.layers_of_stage`: pipelines need not divide the layers).
    The model may be a catalog name, YAML path or mapping and the strategy a mapping of its
    fields."""
    model = load_model(model)
    if isinstance(strategy, dict):
        strategy = Strategy.parse(strategy)
    if not isinstance(strategy, Strategy):
        raise RailplanError(
            "strategy", f"give a Strategy or a mapping of its fields; got {type(strategy).__name__}"
        )
    if not isinstance(p, Placement):
        raise RailplanError(
            "placement", f"give a Placement (build_placement); got {type(p).__name__}"
        )
    s = from_strategies(strategy)
    check(model, s, p.gpus)
    if (int(s.tp), int(s.pp), int(s.dp), int(s.cp)) != (p.tp, p.pp, p.dp, p.cp):
        raise RailplanError(
            "placement",
            f"is for tp={p.tp}, cp={p.cp}, pp={p.pp}, dp={p.dp}, not the strategy's sizes",
        )
    vol = kind_volumes(model, s)
    k = p.hb_domain
    stages = np.arange(p.pp)
    layers = layers_of_stage(model, s, stages).tolist()
    dualpipev = bool(s.dualpipev)  # rank 0 holds both ends and the V turns on the last rank
    end = ((stages == 0) | ((stages == p.pp - 1) & (not dualpipev))).tolist()
    # The stage with the LM head (the last; rank 0 with DualPipeV) also holds the multi-token
    # prediction modules' embedding copy and projections; the other end stage does not.
    head = (stages == (0 if dualpipev else p.pp - 1)).tolist()
    keys = [(int(n), bool(e), bool(h)) for n, e, h in zip(layers, end, head, strict=True)]
    plain = model.model_copy(update={"mtp_layers": 0}) if model.mtp_layers else model
    only_layers = [(n, False, False) for n, _, _ in keys]
    notes: list[str] = []
    pieces: list[tuple[str, tuple[IntArray, IntArray, FloatArray]]] = [
        ("pp", _scale(pipeline_edges(p.groups("pp"), int(s.interleave), not dualpipev), vol["pp"])),
    ]
    # each stage's own MoE layers (`moe_layers_by_stage`), as the time counts them
    moe_counts = moe_layers_by_stage(model, s)
    tp_keys = [(n, c) for (n, _, _), c in zip(only_layers, moe_counts, strict=True)]
    for (n, c), rows in _per_stage(p.groups("tp"), p.dp * p.cp, tp_keys):
        tp_bytes = (n - c) * vol["tp_dense"] + c * vol["tp_moe"]
        pieces.append(("tp", _scale(collective_edges(rows, k), tp_bytes)))
    if p.cp > 1:
        for (n, _, _), rows in _per_stage(p.groups("cp"), p.dp * p.tp, only_layers):
            pieces.append(("cp", _scale(ring_edges(rows, 1.0), vol["cp"] * n)))
    r = int(s.replicas)

    def reduction(rows: IntArray, shard_bytes: float, replica_bytes: float) -> None:
        """A data-parallel reduction over group `rows`: within each shard group, then (hybrid
        sharding) across the replicas of each shard."""
        shards, replicas = hybrid_groups(rows, r)
        pieces.append(("dp", _scale(collective_edges(shards, k), shard_bytes)))
        if r > 1:
            pieces.append(("dp", _scale(collective_edges(replicas, k), replica_bytes)))

    for (n, e, h), rows in _per_stage(p.groups("dp"), p.tp, keys):
        b = dp_stage_bytes(model if h else plain, s, n, e)
        reduction(rows, b["dense"], b["dense_replica"])
    if vol["embedding"] > 0:
        pieces.append(("dp", _scale(collective_edges(p.groups("embedding"), k), vol["embedding"])))
    if model.moe_layers:
        ep, etp = int(s.ep), int(s.etp)
        moe_share = model.moe_layers / model.layers
        ep_groups, edp_groups, etp_groups = expert_groups(p, ep, etp)
        # each stage's own MoE layers (the leading dense layers on the first stage, an MoE
        # multi-token prediction layer on the head's: `moe_layers_by_stage`), as the time
        # counts them
        if etp > 1:
            for c, rows in _per_stage(etp_groups, p.tp * p.dp * p.cp // etp, moe_counts):
                pieces.append(("tp", _scale(collective_edges(rows, k), vol["etp"] * c)))
        for c, rows in _per_stage(edp_groups, ep * etp, moe_counts):
            # the expert parameters of c MoE layers: those of c / share average layers
            b = dp_stage_bytes(model, s, c / moe_share, False)
            reduction(rows, b["expert"], b["expert_replica"])
        if ep > 1:
            # uniform all-to-alls among the ep ranks of each MoE layer of the stage: the
            # logical demand src → dst (forwarding is the timing's concern, SYSTEM.md 3)
            ep_stages = _per_stage(ep_groups, p.tp * p.dp * p.cp // ep, moe_counts)
            dedup = [
                deduplicated_all_to_all_edges(rows, k) if strategy.ep_dispatch == "deepep" else None
                for _, rows in ep_stages
            ]
            # DeepEP-style edges only where every group has x members in each of y domains
            regular = len({None if d is None else d[2:] for d in dedup}) == 1
            as_plain = False  # some stage's DeepEP dispatch laid out as a plain all-to-all
            for (c, rows), parts in zip(ep_stages, dedup, strict=True):
                scale = float(c)
                if parts is None or not regular:
                    pieces.append(("ep", _scale(all_to_all_edges(rows), vol["ep"] * scale)))
                    as_plain = True
                    continue
                rail, domain, x, y = parts
                per_rail, per_domain = deepep_pair_bytes(model, s, x, y)
                pieces.append(("ep", _scale(rail, vol["ep_tokens"] * per_rail * scale)))
                pieces.append(("ep", _scale(domain, vol["ep_tokens"] * per_domain * scale)))
            if as_plain and strategy.ep_dispatch == "deepep":
                notes.append(
                    "ep: the expert-parallel groups do not hold the same GPUs in each HB domain "
                    "they span, so the matrix shows DeepEP's dispatch as a plain all-to-all; the "
                    "iteration time is DeepEP's on the worst group (docs/traffic.md)"
                )
    src = np.concatenate([x[0] for _, x in pieces])
    dst = np.concatenate([x[1] for _, x in pieces])
    size = np.concatenate([x[2] for _, x in pieces])
    kind = np.concatenate(
        [np.full(x[0].size, KIND_CODE[name], dtype=np.int64) for name, x in pieces]
    )
    s_, d_, k_, b_ = _coalesce(p.gpus, src, dst, kind, size)
    return Traffic(p.gpus, k, s_, d_, k_, b_, tuple(notes))


@dataclass(frozen=True)
class TrafficStats:
    """Summary of one iteration's traffic (unordered pairs i < j of distinct GPUs)."""

    gpus: int
    hb_domain: int
    bytes_by_kind: dict[str, float]
    share_by_kind: dict[str, float]
    total_bytes: float
    hb_bytes: float
    nic_bytes: float
    hb_bytes_by_kind: dict[str, float]
    nic_bytes_by_kind: dict[str, float]
    nic_cross_rail_bytes: float
    pairs_total: int
    pairs_with_traffic: int
    pairs_with_traffic_fraction: float
    pairs_by_kind_fraction: dict[str, float]
    pairs_with_tp_fraction: float
    max_pair_bytes_hb: float
    max_pair_bytes_nic: float
    mean_pair_bytes_hb: float
    mean_pair_bytes_nic: float

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _pair_keys(n: int, src: IntArray, dst: IntArray) -> IntArray:
    lo, hi = np.minimum(src, dst), np.maximum(src, dst)
    return np.asarray(lo * n + hi)


def stats(t: Traffic) -> TrafficStats:
    """Bytes by kind and share, HB vs NIC bytes, cross-rail NIC bytes, pair fractions and the
    largest / mean pair volume inside HB domains and across the NIC domain.

    `mean_pair_bytes_hb`: HB bytes over all unordered pairs of GPUs that share an HB domain
    (independent of the collective algorithm: ring or all-pairs move the same bytes);
    `mean_pair_bytes_nic`: NIC bytes over the unordered cross-domain pairs that carry traffic."""
    n, k = t.gpus, t.hb_domain
    by_kind = {name: float(t.bytes[t.kind == code].sum()) for name, code in KIND_CODE.items()}
    total = float(t.bytes.sum())
    same_domain = (t.src // k) == (t.dst // k)
    hb = float(t.bytes[same_domain].sum())
    cross = cross_rail(t.src, t.dst, k)
    pairs_total = n * (n - 1) // 2

    key = _pair_keys(n, t.src, t.dst)
    uniq, inv = np.unique(key, return_inverse=True)
    pair_bytes = np.bincount(inv.ravel(), weights=t.bytes, minlength=uniq.size)
    lo, hi = np.divmod(uniq, n)
    pair_hb = (lo // k) == (hi // k)
    kind_pairs = {
        name: int(np.unique(key[t.kind == code]).size) for name, code in KIND_CODE.items()
    }
    # pairs sharing an HB domain: full domains plus a partial last one
    full, rest = divmod(n, k)
    hb_pairs = full * k * (k - 1) // 2 + rest * (rest - 1) // 2
    nic_pairs = int(np.count_nonzero(~pair_hb))

    def frac(x: int) -> float:
        return x / pairs_total if pairs_total else 0.0

    def top(mask: npt.NDArray[np.bool_]) -> float:
        return float(pair_bytes[mask].max()) if np.any(mask) else 0.0

    return TrafficStats(
        gpus=n,
        hb_domain=k,
        bytes_by_kind=by_kind,
        share_by_kind={name: (v / total if total else 0.0) for name, v in by_kind.items()},
        total_bytes=total,
        hb_bytes=hb,
        nic_bytes=total - hb,
        hb_bytes_by_kind={
            name: float(t.bytes[same_domain & (t.kind == c)].sum()) for name, c in KIND_CODE.items()
        },
        nic_bytes_by_kind={
            name: float(t.bytes[~same_domain & (t.kind == c)].sum())
            for name, c in KIND_CODE.items()
        },
        nic_cross_rail_bytes=float(t.bytes[cross].sum()),
        pairs_total=pairs_total,
        pairs_with_traffic=int(uniq.size),
        pairs_with_traffic_fraction=frac(int(uniq.size)),
        pairs_by_kind_fraction={name: frac(c) for name, c in kind_pairs.items()},
        pairs_with_tp_fraction=frac(kind_pairs["tp"]),
        max_pair_bytes_hb=top(pair_hb),
        max_pair_bytes_nic=top(~pair_hb),
        mean_pair_bytes_hb=hb / hb_pairs if hb_pairs else 0.0,
        mean_pair_bytes_nic=(total - hb) / nic_pairs if nic_pairs else 0.0,
    )


def to_columns(t: Traffic) -> dict[str, Any]:
    """Columns src, dst, kind (name), bytes for export."""
    return {"src": t.src, "dst": t.dst, "kind": t.kind_names(), "bytes": t.bytes}


EXPORT_SUFFIXES = (".csv", ".parquet")


def _write_csv(t: Traffic, tmp: Path) -> None:
    names = np.asarray(KINDS)[t.kind]
    with tmp.open("w", encoding="utf-8", newline="") as f:
        f.write("src,dst,kind,bytes\n")
        step = 1 << 16
        for i in range(0, len(t), step):
            rows = zip(
                t.src[i : i + step].tolist(),
                t.dst[i : i + step].tolist(),
                names[i : i + step].tolist(),
                t.bytes[i : i + step].tolist(),
                strict=True,
            )
            f.write("".join(f"{s},{d},{k},{b!r}\n" for s, d, k, b in rows))


def export(t: Traffic, path: str | Path) -> Path:
    """Write columns src, dst, kind, bytes as CSV, or Parquet when pyarrow is importable."""
    out = Path(path)
    suffix = out.suffix.lower()
    if suffix not in EXPORT_SUFFIXES:
        raise RailplanError(
            "export", f"{out.name!r} must end in .csv or .parquet to choose the format"
        )
    check_target(out, "export")
    if suffix == ".csv":
        return atomic_write(out, lambda tmp: _write_csv(t, tmp), "export")
    try:
        import pyarrow as pa  # type: ignore[import-not-found,unused-ignore]
        import pyarrow.parquet as pq  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        raise RailplanError(
            "export", "Parquet needs pyarrow, which is not installed; use a .csv file instead"
        ) from None
    table = pa.table(
        {
            "src": pa.array(t.src),
            "dst": pa.array(t.dst),
            "kind": pa.array(t.kind_names().tolist()),
            "bytes": pa.array(t.bytes),
        }
    )
    return atomic_write(out, lambda tmp: pq.write_table(table, str(tmp)), "export")
