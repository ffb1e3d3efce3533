"""Rank placement: which physical GPU runs each logical (pp, dp, tp) rank, and who talks to whom.

Physical GPUs are numbered 0…N−1 and fill HB domains of K GPUs in turn: GPU g sits in HB
domain g // K at local rank (rail) g % K (SYSTEM.md vocabulary: rail i = GPU i of every domain).

A placement is a mixed-radix numbering of the logical grid. `order` names the dimensions from
fastest to slowest; Megatron-LM's default is tp fastest, then cp, then dp, then pp (Shoeybi 2019,
Narayanan 2021 §3: tensor-parallel ranks share a server, pipeline stages are furthest apart;
Megatron-Core puts the context-parallel ranks next to tp, order tp-cp-ep-dp-pp). An order that
leaves out cp places it right after tp.
Expert parallelism (`ep`) is a hook for MoE work and is 1 for dense models.

This module also turns placed rank groups into the edges a collective algorithm uses (ring, or
hierarchical: rail phase then HB phase, SYSTEM.md formula 2), so that `railplan.traffic.matrix` only
has to attach byte counts from `railplan.workload.comm`. Everything is vectorized over numpy
arrays; nothing here knows bytes.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from railplan.errors import RailplanError
from railplan.limits import MAX_GPUS, check_int

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

DIMS: tuple[str, ...] = ("tp", "dp", "pp")
MEGATRON_ORDER: tuple[str, ...] = ("tp", "dp", "pp")
CP_DIMS: tuple[str, ...] = ("tp", "cp", "dp", "pp")
PLACEMENTS: tuple[str, ...] = ("megatron", "rail-aligned")


@dataclass(frozen=True)
class Placement:
    """GPU id of every logical rank: `gpu[p, r, t]` for pipeline stage p, tensor-parallel rank
    t and r = d·cp + c for data-parallel rank d and context-parallel rank c (r = d when cp = 1).
    `hb_domain` is K."""

    tp: int
    pp: int
    dp: int
    hb_domain: int
    order: tuple[str, ...]
    gpu: IntArray
    cp: int = 1

    @property
    def gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    def domain(self, ids: IntArray) -> IntArray:
        """HB domain of each GPU id."""
        return np.asarray(ids // self.hb_domain)

    def rail(self, ids: IntArray) -> IntArray:
        """Local rank (rail) of each GPU id."""
        return np.asarray(ids % self.hb_domain)

    def groups(self, kind: str) -> IntArray:
        """Communication groups as rows of GPU ids, members in logical rank order.

        `tp`: one row per (stage, dp rank, cp rank); `dp`: the dp·cp ranks that reduce
        gradients, one row per (stage, tp rank); `cp`: the context-parallel ring of each (stage,
        dp rank, tp rank); `pp`: the pipeline of each (dp, cp, tp rank), stage 0 first;
        `embedding`: first and last stage of each pipeline (tied embeddings)."""
        g = self.gpu
        r = self.dp * self.cp
        if kind == "tp":
            return np.asarray(g.reshape(self.pp * r, self.tp))
        if kind == "dp":
            return np.asarray(g.transpose(0, 2, 1).reshape(self.pp * self.tp, r))
        if kind == "cp":
            grid = g.reshape(self.pp, self.dp, self.cp, self.tp)
            return np.asarray(grid.transpose(0, 1, 3, 2).reshape(-1, self.cp))
        if kind == "pp":
            return np.asarray(g.transpose(1, 2, 0).reshape(r * self.tp, self.pp))
        if kind == "embedding":
            chains = self.groups("pp")
            return np.asarray(chains[:, [0, -1]])
        raise RailplanError(
            "kind", f"{kind!r} is not a group kind; choose tp, dp, cp, pp, embedding"
        )


def expert_groups(
    p: Placement, ep: int, etp: int | None = None
) -> tuple[IntArray, IntArray, IntArray]:
    """MoE: (expert-parallel groups, expert-data-parallel groups, expert tensor-parallel
    groups). Megatron-Core's expert rank grid (`RankGenerator(tp=etp, ep=ep, dp=…, cp=1)`,
    order tp-ep-dp-pp) lays the stage's tp·cp·dp ranks, in Megatron's rank order, out as
    etp × ep × expert-dp, etp fastest: stage rank q is expert-TP rank q % etp, expert rank
    (q // etp) % ep, expert-data-parallel rank q // (etp·ep). An EP group is ep ranks etp apart;
    the expert weights are data-parallel over the tp·cp·dp/(etp·ep) ranks etp·ep apart. `etp`
    defaults to tp (DeepSpeed-MoE's and Megatron-Core's default: the ep ranks then come from
    the dp·cp ranks, tp apart)."""
    e = p.tp if etp is None else etp
    r = p.tp * p.dp * p.cp
    if e < 1 or p.tp % e:
        raise RailplanError("expert_tp", f"must divide tp ({p.tp})")
    if ep < 1 or r % (ep * e):
        raise RailplanError("ep", f"ep·expert_tp must divide tp·cp·dp ({r})")
    g = p.gpu.reshape(p.pp, r // (ep * e), ep, e)
    ep_groups = g.transpose(0, 1, 3, 2).reshape(-1, ep)
    edp_groups = g.transpose(0, 2, 3, 1).reshape(-1, r // (ep * e))
    return np.asarray(ep_groups), np.asarray(edp_groups), np.asarray(g.reshape(-1, e))


def all_to_all_edges(groups: IntArray) -> Edges:
    """Every ordered pair of distinct members of each group row, share 1 (a uniform
    all-to-all: each member sends the same message to every other member)."""
    if groups.size == 0 or groups.shape[1] < 2:
        return Edges.empty()
    n = groups.shape[1]
    i, j = np.nonzero(~np.eye(n, dtype=bool))
    src = groups[:, i].ravel()
    dst = groups[:, j].ravel()
    return Edges(np.asarray(src), np.asarray(dst), np.ones(src.size))


def deduplicated_all_to_all_edges(
    groups: IntArray, hb_domain: int
) -> tuple[Edges, Edges, int, int] | None:
    """DeepEP-style all-to-all over each group row (`Strategy.ep_dispatch` deepep): (rail
    edges, domain edges, x, y) — every ordered pair of members at the same position in
    different HB domains (the rail phase: a token crosses once per domain, to the same local
    rank) and every ordered pair inside a domain (the NVLink forwarding), share 1 each; None
    unless every row has x members in each of y domains."""
    if groups.size == 0 or groups.shape[1] < 2:
        return None
    x, y, regular = group_layout(groups, hb_domain)
    if not bool(np.all(regular)) or np.unique(x).size != 1 or np.unique(y).size != 1:
        return None
    xv, yv = int(x[0]), int(y[0])
    grid = np.sort(groups, axis=1).reshape(-1, yv, xv)  # [group, domain, local position]
    rails = grid.transpose(0, 2, 1).reshape(-1, yv)
    return all_to_all_edges(rails), all_to_all_edges(grid.reshape(-1, xv)), xv, yv


def parse_order(text: str | tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """`"tp,dp,pp"` → ('tp', 'dp', 'pp'): a permutation of tp, dp, pp (and optionally cp),
    fastest first."""
    items = text.split(",") if isinstance(text, str) else list(text)
    order = tuple(i.strip().lower() for i in items if i.strip())
    if sorted(order) not in (sorted(DIMS), sorted(CP_DIMS)):
        raise RailplanError(
            "order",
            f"{','.join(order) or '(empty)'} is not allowed; give each of tp, dp, pp (and "
            "optionally cp) once, fastest first (e.g. tp,dp,pp or tp,cp,dp,pp)",
        )
    return order


def _with_cp(order: tuple[str, ...]) -> tuple[str, ...]:
    """The order with cp in it: right after tp when the order leaves it out."""
    if "cp" in order:
        return order
    i = order.index("tp") + 1
    return (*order[:i], "cp", *order[i:])


def _check_sizes(tp: int, pp: int, dp: int, hb_domain: int, cp: int = 1) -> None:
    for field, value in (("tp", tp), ("pp", pp), ("dp", dp), ("hb_domain", hb_domain), ("cp", cp)):
        if int(value) < 1:
            raise RailplanError(field, "must be a positive integer")


def place(
    tp: int,
    pp: int,
    dp: int,
    hb_domain: int,
    order: tuple[str, ...] = MEGATRON_ORDER,
    cp: int = 1,
) -> Placement:
    """Number the ranks in `order` (fastest first): GPU id = Σ rank_dim · stride_dim, the
    stride of a dimension being the product of the sizes of the faster ones."""
    _check_sizes(tp, pp, dp, hb_domain, cp)
    order = parse_order(order)
    sizes = {"tp": int(tp), "cp": int(cp), "dp": int(dp), "pp": int(pp)}
    strides: dict[str, int] = {}
    acc = 1
    for dim in _with_cp(order):
        strides[dim] = acc
        acc *= sizes[dim]
    p = np.arange(pp, dtype=np.int64)[:, None, None, None] * strides["pp"]
    d = np.arange(dp, dtype=np.int64)[None, :, None, None] * strides["dp"]
    c = np.arange(cp, dtype=np.int64)[None, None, :, None] * strides["cp"]
    t = np.arange(tp, dtype=np.int64)[None, None, None, :] * strides["tp"]
    ids = np.asarray((p + d + c + t).reshape(int(pp), int(dp) * int(cp), int(tp)))
    shown = _with_cp(order) if cp > 1 else order
    return Placement(int(tp), int(pp), int(dp), int(hb_domain), shown, ids, int(cp))


@dataclass(frozen=True)
class Edges:
    """Directed GPU pairs of a communication pattern. `share` is the fraction of the collective's
    buffer D (or of one point-to-point message) that `src` sends to `dst` in one pass."""

    src: IntArray
    dst: IntArray
    share: FloatArray

    @staticmethod
    def empty() -> Edges:
        z = np.zeros(0, dtype=np.int64)
        return Edges(z, z.copy(), np.zeros(0, dtype=np.float64))

    @staticmethod
    def concat(parts: list[Edges]) -> Edges:
        if not parts:
            return Edges.empty()
        return Edges(
            np.concatenate([e.src for e in parts]),
            np.concatenate([e.dst for e in parts]),
            np.concatenate([e.share for e in parts]),
        )

    def __len__(self) -> int:
        return int(self.src.size)


def ring_edges(groups: IntArray, share: float | FloatArray) -> Edges:
    """Each member sends to its ring successor (next member in row order, last to first)."""
    n = groups.shape[1] if groups.ndim == 2 else 0
    if groups.size == 0 or n < 2:
        return Edges.empty()
    src = groups.ravel()
    dst = np.roll(groups, -1, axis=1).ravel()
    s = np.broadcast_to(np.asarray(share, dtype=np.float64), src.shape)
    return Edges(np.asarray(src), np.asarray(dst), np.array(s))


def group_layout(groups: IntArray, hb_domain: int) -> tuple[IntArray, IntArray, BoolArray]:
    """Per group row: (x members per HB domain, y domains, regular). `regular` holds when every
    domain the group touches holds the same number of its members."""
    g, n = groups.shape
    dom = np.sort(groups // hb_domain, axis=1)
    new = np.zeros((g, n), dtype=bool)
    new[:, 1:] = dom[:, 1:] != dom[:, :-1]
    run = np.cumsum(new, axis=1)
    y = run[:, -1] + 1
    x = n // y
    idx = np.arange(n, dtype=np.int64)[None, :]
    regular = (n % y == 0) & np.all(run == idx // x[:, None], axis=1)
    return np.asarray(x, dtype=np.int64), np.asarray(y, dtype=np.int64), np.asarray(regular)


def collective_edges(groups: IntArray, hb_domain: int) -> Edges:
    """Edges of one all-gather (or reduce-scatter) of a buffer D over each group row; an
    all-reduce is two of these (reduce-scatter + all-gather).

    - Group inside one HB domain, or one member per domain, or irregular: ring in row order,
      each member sends (n−1)/n·D to its successor (seed 003).
    - x > 1 members in each of y > 1 domains: hierarchical (SYSTEM.md formula 2). Rail phase:
      the j-th member (by local rank) of every domain forms a ring over D/x, sending
      (y−1)/y·D/x to its successor; HB phase: a ring inside each domain over D, sending
      (x−1)/x·D. Totals are those of `collectives.hierarchical_all_gather_s`, and both algorithms
      move (n−1)·D bytes in all, so byte conservation does not depend on the choice.
    """
    if groups.size == 0 or groups.shape[1] < 2:
        return Edges.empty()
    n = groups.shape[1]
    x, y, regular = group_layout(groups, hb_domain)
    hier = regular & (x > 1) & (y > 1)
    parts = [ring_edges(groups[~hier], (n - 1) / n)]
    if np.any(hier):
        for xv, yv in {(int(a), int(b)) for a, b in zip(x[hier], y[hier], strict=True)}:
            rows = np.sort(groups[hier & (x == xv) & (y == yv)], axis=1)  # by domain, local rank
            grid = rows.reshape(-1, yv, xv)  # [group, domain, j]
            rails = grid.transpose(0, 2, 1).reshape(-1, yv)
            parts.append(ring_edges(rails, (yv - 1) / yv / xv))
            parts.append(ring_edges(grid.reshape(-1, xv), (xv - 1) / xv))
    return Edges.concat(parts)


def pipeline_edges(chains: IntArray, interleave: int, wrap: bool = True) -> Edges:
    """Point-to-point edges of the pipeline, per micro-batch, `share` = messages sent.

    Stage i sends its activations to stage i+1 (v times with v virtual stages per GPU) and
    receives the gradients back; with interleaving (v > 1) the last stage also feeds the first
    stage's next chunk v−1 times (Narayanan 2021 §2.2: (pp−1)·v + (v−1) boundaries), unless
    not `wrap` (DualPipeV: the V turns on the last GPU and comes back along the chain)."""
    if chains.size == 0 or chains.shape[1] < 2:
        return Edges.empty()
    fwd_src, fwd_dst = chains[:, :-1].ravel(), chains[:, 1:].ravel()
    parts = [
        Edges(fwd_src, fwd_dst, np.full(fwd_src.size, float(interleave))),
        Edges(fwd_dst, fwd_src, np.full(fwd_src.size, float(interleave))),
    ]
    if interleave > 1 and wrap:
        last, first = chains[:, -1], chains[:, 0]
        turns = np.full(last.size, float(interleave - 1))
        parts += [Edges(last, first, turns), Edges(first, last, turns.copy())]
    return Edges.concat(parts)


def cross_rail(src: IntArray, dst: IntArray, hb_domain: int) -> BoolArray:
    """Pairs in different HB domains on different rails: a rail-only network has no path for
    them and must forward through the HB domain (SYSTEM.md, rail-only)."""
    return np.asarray((src // hb_domain != dst // hb_domain) & (src % hb_domain != dst % hb_domain))


def pattern(p: Placement, interleave: int = 1, embedding: bool = True) -> dict[str, Edges]:
    """Every edge the Megatron pattern uses under placement `p`, by group kind."""
    out = {
        "tp": collective_edges(p.groups("tp"), p.hb_domain),
        "dp": collective_edges(p.groups("dp"), p.hb_domain),
        "pp": pipeline_edges(p.groups("pp"), interleave),
        "cp": ring_edges(p.groups("cp"), 1.0),
    }
    if embedding and p.pp > 1:
        out["embedding"] = collective_edges(p.groups("embedding"), p.hb_domain)
    return out


def cross_rail_edges(p: Placement, interleave: int = 1, embedding: bool = True) -> int:
    """Number of directed edges of the pattern that cross rails between HB domains."""
    return sum(
        int(np.count_nonzero(cross_rail(e.src, e.dst, p.hb_domain)))
        for e in pattern(p, interleave, embedding).values()
    )


def rail_aligned(
    tp: int,
    pp: int,
    dp: int,
    hb_domain: int,
    interleave: int = 1,
    embedding: bool = True,
    cp: int = 1,
) -> Placement:
    """A placement whose NIC-domain edges all join GPUs of the same local rank.

    Of the dimension orders with no cross-rail edge, the one whose tensor-parallel (then
    context-parallel) groups send the fewest edges between HB domains, Megatron's order first
    on a tie: the heaviest traffic stays on the HB links that `estimate` times it on, and an
    order that is rail-aligned only because it spreads tp over the NICs (tp 3 on 8-GPU
    servers: one tp rank per server) loses to one that keeps it inside. Raises a one-line
    RailplanError when none exists (e.g. tp not dividing K with groups straddling domains),
    and when the only ones put a tp group of at most K GPUs across HB domains."""
    _check_sizes(tp, pp, dp, hb_domain, cp)
    dims = DIMS if cp == 1 else CP_DIMS
    first = MEGATRON_ORDER if cp == 1 else CP_DIMS
    orders = [first] + [o for o in itertools.permutations(dims) if tuple(o) != first]
    best: tuple[tuple[int, ...], Placement] | None = None
    for order in orders:
        p = place(tp, pp, dp, hb_domain, tuple(order), cp)
        edges = pattern(p, interleave, embedding)
        if sum(int(np.count_nonzero(cross_rail(e.src, e.dst, hb_domain))) for e in edges.values()):
            continue
        rank = tuple(
            int(np.count_nonzero(edges[k].src // hb_domain != edges[k].dst // hb_domain))
            for k in ("tp", "cp")
        )
        if best is None or rank < best[0]:
            best = (rank, p)
    if best is not None and (best[0][0] == 0 or tp > hb_domain):
        return best[1]
    if best is not None:  # rail-aligned only by putting tp groups across HB domains
        raise RailplanError(
            "placement",
            f"no rail-aligned placement of tp={tp}, cp={cp}, pp={pp}, dp={dp} on HB domains of "
            f"K={hb_domain} keeps each tp group inside one HB domain (those that avoid "
            "cross-rail bytes send tensor-parallel traffic over the NICs); choose tp dividing K, "
            "or use --placement megatron",
        )
    raise RailplanError(
        "placement",
        f"no rail-aligned placement of tp={tp}, cp={cp}, pp={pp}, dp={dp} on HB domains of "
        f"K={hb_domain} "
        "(every dimension order sends NIC bytes across rails); choose tp, dp, pp so that "
        "tp divides K and tp·dp is a multiple or divisor of K, or use --placement megatron",
    )


def build_placement(
    kind: str,
    tp: int,
    pp: int,
    dp: int,
    hb_domain: int,
    order: str | tuple[str, ...] | None = None,
    interleave: int = 1,
    embedding: bool = True,
    cp: int = 1,
) -> Placement:
    """`megatron` (optionally with a user `order`) or `rail-aligned`."""
    if kind not in PLACEMENTS:
        raise RailplanError(
            "placement", f"{kind!r} is not allowed; choose one of {', '.join(PLACEMENTS)}"
        )
    tp, pp, dp, hb_domain, interleave, cp = (
        check_int(name, v, 1, MAX_GPUS)
        for name, v in (
            ("tp", tp),
            ("pp", pp),
            ("dp", dp),
            ("hb_domain", hb_domain),
            ("interleave", interleave),
            ("cp", cp),
        )
    )
    if kind == "rail-aligned":
        if order is not None:
            raise RailplanError("order", "cannot be combined with --placement rail-aligned")
        return rail_aligned(tp, pp, dp, hb_domain, interleave, embedding, cp)
    return place(tp, pp, dp, hb_domain, parse_order(order) if order else MEGATRON_ORDER, cp)
