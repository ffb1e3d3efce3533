"""Collective schedules by linear programming over a time-expanded graph, as TE-CCL formulates it.

TE-CCL (Liu et al., "Rethinking Machine Learning Collective Communication as a Multi-Commodity
Flow Problem", SIGCOMM 2024; code: github.com/microsoft/TE-CCL, teccl/solvers/) cuts time into
epochs of equal length τ and lets every link carry, per epoch, capacity·τ bytes of any mix of
chunks (the commodities). A chunk sent over link (u, v) in epoch k can be forwarded from v in
epoch k + 1 + ⌈α/τ⌉, where α is the link latency (TE-CCL ignores α when α/τ ≤ 0.1,
`InstanceParams.alpha_threshold`). Nodes that are not ranks (switches, NICs) store nothing: what
leaves them in an epoch arrived in it.

* all-gather (TE-CCL allgather.py): one commodity per source rank, its D/n bytes, or with
  `chunks` = k (TE-CCL's num_chunks) k commodities of D/(n·k) per rank. Ranks keep
  what they receive ("buffers") and may copy it to every out-link; switches may copy too
  (`switch_copy`). Like TE-CCL, a switch's link to a rank takes no epoch of its own (the
  GPU-to-switch epoch carries the crossing, `switch_to_gpu_link_on = False`).
* all-to-all (TE-CCL alltoall.py, an LP there too): plain multi-commodity flow with storage at
  ranks; commodity = destination rank (flows to one sink aggregate losslessly), D/n per pair.

All-gather flows are whole chunks (TE-CCL's integer program: a fractional copy could count the
same bytes twice), so a link slower than one chunk per epoch carries a chunk over
⌈1/capacity⌉ epochs (TE-CCL's `beta_num_back` window); all-to-all flows split freely (its LP).
Solved with HiGHS through scipy.optimize.milp, all-gather for feasibility only (a zero
objective: the first schedule found ends the solve); constraints are sparse matrices built with
numpy, and flows that cannot be useful (before the chunk can be at the tail, or unable to reach a
rank by the horizon) are fixed at 0.

The epoch count is the smallest feasible one, searched from the cut/distance bound (lpsearch);
the time is epochs · τ. τ is chunk/slowest-link ("slow", TE-CCL's `EpochType.SLOWEST_LINK`),
chunk/fastest-link ("fast") or given, and never below the smallest latency /
`ALPHA_EPOCH_RATIO_MAX`. HiGHS gets a time limit per solve and the search a budget; when no
schedule is found in it, τ doubles (the time stays that of a valid schedule, only coarser).
`optimal` on a result says every smaller epoch count was proven infeasible. Limits: 64 ranks
(`MAX_RANKS`); in practice a 32-rank all-to-all on a built graph already falls back to coarse
epochs, and 64 ranks may find no schedule in the budget (a one-line error).

Two optional restrictions make HiGHS find integer schedules TE-CCL found with Gurobi (four NDv2
chassis: 26 epochs at 1 GB in about 11 s, where the plain program found none at its epoch in
four minutes): `symmetry`, an automorphism such as a chassis rotation, keeps one variable per
orbit (lpsym), and `groups` (chassis) joined by one switch fix the inter-chassis exchange by a
round-robin construction (lphier), leaving the program the spread inside the chassis. A
program infeasible under either proves nothing ("excluded"); the free program is then tried at
the bound and below the schedule found. Every all-gather schedule is checked against the full
program's rows and replayed on the time-expanded graph (`lpsym.check_all_gather`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace

import networkx as nx
import numpy as np
from numpy.typing import NDArray
from scipy.optimize import Bounds, LinearConstraint, milp

from railplan.collective import lphier, lpsym
from railplan.collective.lpbuild import Net, all_gather, all_to_all, network, order
from railplan.collective.lpsearch import MAX_EPOCHS as MAX_EPOCHS  # docs/model.md names it here
from railplan.collective.lpsearch import Found, Solve, bisect, search
from railplan.errors import RailplanError


class NoSchedule(RailplanError):
    """The solver found no schedule in its time (a sweep reports it for that size and goes on
    with the other algorithms)."""


MAX_RANKS = 64
LP_OPS: tuple[str, ...] = ("all-gather", "all-to-all")
EPOCH_KINDS: tuple[str, ...] = ("slow", "fast")
#: an epoch is at least the smallest link latency over this. TE-CCL uses 200
#: (`alpha_epoch_duration_ratio_max`); 16 keeps a latency-bound (small) collective to ~100-200
#: epochs, at the price of rounding each hop up to whole epochs of 1/16 of the smallest latency
#: (1-5 % at 1 KB on TE-CCL's chassis, benchmarks/collectives.py)
ALPHA_EPOCH_RATIO_MAX = 16
#: HiGHS time per feasibility solve; past it the epoch count counts as too few (see synthesize)
SOLVE_LIMIT_S = 10.0
#: seconds for the whole search, about (see synthesize for its split)
SEARCH_BUDGET_S = 50.0
#: times the epoch may be doubled when no schedule is found in time
COARSEN_STEPS = 3

IntArr = NDArray[np.int64]
_Sym = tuple[IntArr, IntArr]  # a symmetry's node and edge permutations (lpsym.node_perm)


@dataclass(frozen=True)
class LPResult:
    """A solved schedule: time_s = epochs · epoch_s (latency inside through the delays)."""

    op: str
    ranks: int
    size_bytes: float
    epochs: int
    epoch_s: float
    time_s: float
    algbw_gb_per_s: float
    delivered_bytes: float  # bytes that reached a rank needing them, over the whole schedule
    solve_s: float
    epochs_lower: int  # no schedule in fewer epochs (proven)
    optimal: bool  # epochs == epochs_lower
    chunks: int = 1  # all-gather chunks per rank (TE-CCL's num_chunks)


def _solve(
    net: Net,
    op: str,
    n: int,
    k_max: int,
    time_limit_s: float,
    sym: _Sym | None = None,
    ex: lphier.Exchange | None = None,
    chunks: int = 1,
) -> tuple[str, float]:
    """Whether `k_max` epochs suffice: ("feasible", delivered chunks), ("infeasible", 0),
    ("unknown", 0) when HiGHS hit its time limit first, or ("excluded", 0) when no schedule
    invariant under the symmetry `sym` or keeping the exchange `ex` exists (which proves
    nothing: see lpsym, lphier). All-gather is
    TE-CCL's integer program (whole chunks: a fractional copy could count the same bytes
    twice), solved for feasibility only (a zero objective: HiGHS stops at the first schedule);
    all-to-all is its LP, solved for the least traffic. A schedule found is checked against
    every row of the full program (and, for all-gather, replayed by `lpsym.check_all_gather`)."""
    integer = op == "all-gather"
    prob = all_gather(net, n, k_max, chunks) if integer else all_to_all(net, n, k_max)
    m = n * chunks  # commodities of the all-gather (chunks == 1 for all-to-all)
    n_state = prob.a_eq.shape[0] - (0 if integer else n)
    integrality = np.zeros(len(prob.c))
    if integer:
        integrality[: len(prob.c) - n_state] = 1
    cost = np.zeros(len(prob.c)) if integer else prob.c
    a_ub, a_eq, lo, hi = prob.a_ub, prob.a_eq, prob.lo.copy(), prob.hi.copy()
    kf = k_max + 1 if integer else k_max
    if ex is not None and not lphier.fix(ex, net.arr, (lo, hi), n, len(net.tail), kf):
        return "excluded", 0.0
    label = np.arange(len(prob.c))
    if sym is not None:
        blocks = (m, n if integer else net.n_nodes, k_max + 1)
        cols = lpsym.columns(sym[0], sym[1], len(net.tail), kf, blocks, chunks)
        label, orbits = lpsym.orbits(cols)
        p = lpsym.projector(label, orbits)
        a_ub, a_eq, cost = a_ub @ p, a_eq @ p, p.T @ cost
        lo, hi = lpsym.bounds(label, orbits, lo, hi)
        integrality = (p.T @ integrality > 0).astype(float)
    res = milp(
        cost,
        constraints=[
            LinearConstraint(a_ub, -np.inf, prob.b_ub),
            LinearConstraint(a_eq, prob.b_eq, prob.b_eq),
        ],
        integrality=integrality,
        bounds=Bounds(lo, hi),
        options={"time_limit": time_limit_s},
    )
    if res.x is not None and res.status in (0, 1):
        x = np.asarray(res.x)[label]
        if integer:  # the schedule reported is the whole-chunk one: check that, not HiGHS's
            x = np.rint(x)  # values within its integrality tolerance
        if not lpsym.satisfies(prob.a_ub, prob.b_ub, prob.a_eq, prob.b_eq, prob.lo, prob.hi, x):
            raise RailplanError(
                "schedule", "the solver's schedule breaks the time-expanded program"
            )
        if integer:
            flows = x[: len(net.tail) * kf * m].reshape(m, len(net.tail), kf)
            lpsym.check_all_gather(flows, net, n, k_max, chunks)
        return "feasible", float(np.sum(x[prob.delivered]))
    if res.status == 2:
        # an LP loses nothing to symmetry (the average of a solution's images is a symmetric
        # solution), an integer program may
        return ("infeasible" if (sym is None or not integer) and ex is None else "excluded"), 0.0
    return "unknown", 0.0


def epoch_s(dg: nx.DiGraph, chunk_bytes: float, kind: str) -> float:
    """TE-CCL's epoch: one chunk over the slowest ("slow") or fastest ("fast") link, but no
    shorter than the smallest link latency / `ALPHA_EPOCH_RATIO_MAX`."""
    if kind not in EPOCH_KINDS:
        raise RailplanError("epochs", f"{kind!r} is not allowed; choose slow or fast")
    caps = [float(c) for _, _, c in dg.edges(data="capacity") if float(c) > 0]
    alphas = [float(a) for _, _, a in dg.edges(data="latency_s", default=0.0) if float(a) > 0]
    tau = chunk_bytes / (min(caps) if kind == "slow" else max(caps))
    return max(tau, min(alphas, default=0.0) / ALPHA_EPOCH_RATIO_MAX)


def slowest_epoch_bound(
    dg: nx.DiGraph, ranks: list[str], op: str, size_bytes: float
) -> tuple[float, int]:
    """The slowest-link epoch and the fewest such epochs any schedule of `op` needs."""
    n = len(ranks)
    tau = epoch_s(dg, size_bytes / n, "slow")
    return tau, _epochs_lower(network(dg, ranks, size_bytes / n, tau, op), op, n)


def whole_chunk_lower(
    dg: nx.DiGraph, ranks: list[str], size_bytes: float, tau: float, chunks: int
) -> int:
    """Epochs of `tau` no all-gather of `chunks` per rank beats: `_epochs_lower` with each link
    that takes one chunk or more every epoch counted at the whole chunks it carries (7 on a
    link of 7.85 chunks per epoch: the program's flows are whole chunks)."""
    n = len(ranks)
    net = network(dg, ranks, size_bytes / (n * chunks), tau, "all-gather")
    whole = (net.window == 0) & (net.cap >= 1)
    cap = np.where(whole, np.floor(net.cap + 1e-9), net.cap)
    return _epochs_lower(replace(net, cap=cap), "all-gather", n, None, chunks)


def _epochs_lower(
    net: Net, op: str, n: int, groups: list[list[int]] | None = None, chunks: int = 1
) -> int:
    """Epochs no schedule can beat: the farthest pair (in epoch delays), one rank's in-links
    carrying the (n−1)·`chunks` chunks it lacks (the one-GPU cut of bound.py), and each of
    `groups` (chassis) taking the chunks it lacks over the links into it (a cut)."""
    d = net.dist[:n, :n]
    if not np.isfinite(d).all():
        s, r = (int(x[0]) for x in np.nonzero(~np.isfinite(d)))
        raise RailplanError("topology", f"rank {r} cannot be reached from rank {s}")
    far = int(d.max())
    in_cap = np.bincount(net.head, weights=net.cap, minlength=net.n_nodes)[:n]
    out_cap = np.bincount(net.tail, weights=net.cap, minlength=net.n_nodes)[:n]
    per_rank = in_cap.min() if op == "all-gather" else min(in_cap.min(), out_cap.min())
    cut = math.ceil(float((n - 1) * chunks / per_rank) - 1e-9)
    for members in groups or []:
        inside = np.zeros(net.n_nodes, dtype=bool)
        inside[members] = True
        m = len(members)
        cap = float(net.cap[inside[net.head] & ~inside[net.tail]].sum())
        if 0 < m < n and cap > 0:
            per = m if op == "all-to-all" else chunks
            cut = max(cut, math.ceil((n - m) * per / cap - 1e-9))
    return max(1, far, cut)


def _at_epoch(
    net: Net,
    op: str,
    groups: list[list[int]],
    sym: _Sym | None,
    limits: tuple[float, ...],
    chunks: int = 1,
) -> Found | None:
    """The search at one epoch length. With `groups` (chassis) of lphier's shape, the
    all-gather with the chassis exchange fixed first (half the find time, a quarter of the
    bisection's), then the free program below the schedule it gives (`_below`; `proven` from
    the bounds and the free program only)."""
    n = int(net.is_rank.sum())
    limit_s, find_s, bisect_s = limits
    lower = _epochs_lower(net, op, n, groups, chunks)

    def free(k: int, lim: float) -> tuple[str, float]:
        return _solve(net, op, n, k, lim, sym, chunks=chunks)

    ex = None
    if op == "all-gather" and groups:
        ex = lphier.exchange(net.tail, net.head, net.cap, net.arr, net.dist, groups, n)
    if ex is not None:

        def fixed(k: int, lim: float) -> tuple[str, float]:
            return _solve(net, op, n, k, lim, sym, ex)

        start = max(lower, ex.epochs_min)  # the restricted program's own bound, not a proof
        found = search(fixed, start, (min(limit_s, find_s / 2), find_s / 2, bisect_s / 4))
        if found is not None:
            return _below(free, lower, Found(found.epochs, lower, found.delivered), bisect_s)
        find_s, bisect_s = find_s / 2, 3 * bisect_s / 4
    return search(free, lower, (min(limit_s, find_s), find_s, bisect_s))


def _below(free: Solve, lower: int, found: Found, bisect_s: float) -> Found:
    """Fewer epochs than the fixed exchange's `found` with the free program: the bound
    `lower` first (often met when latency, not the chassis links, binds), then bisection, in
    three quarters of `bisect_s` (each solve at most `SOLVE_LIMIT_S`)."""
    if found.epochs <= lower:
        return found
    t0 = time.perf_counter()
    state, got = free(lower, min(SOLVE_LIMIT_S, 3 * bisect_s / 4))
    if state == "feasible":
        return Found(lower, lower, got)
    if state == "infeasible":
        found = Found(found.epochs, lower + 1, found.delivered)
    left = 3 * bisect_s / 4 - (time.perf_counter() - t0)
    return bisect(free, (lower + 1, found.epochs), found, (min(SOLVE_LIMIT_S, left), left))


def _group_indices(ranks: list[str], groups: list[list[str]]) -> list[list[int]]:
    """`groups` as rank indices (the program's first nodes); one-line errors unless each
    member is a rank in at most one group (a switch or a repeated rank would count in the
    groups' cut bound and could raise it above the true optimum)."""
    index = {v: i for i, v in enumerate(ranks)}
    seen: set[str] = set()
    for members in groups:
        for r in members:
            if r not in index:
                raise RailplanError("groups", f"{r!r} is not one of the ranks")
            if r in seen:
                raise RailplanError("groups", f"rank {r!r} is in more than one group")
            seen.add(r)
    return [[index[r] for r in members] for members in groups]


def _check_inputs(
    op: str, n: int, size_bytes: float, chunks: int, groups: list[list[str]] | None
) -> None:
    """One-line errors for an operation, rank count, size or chunk count the program lacks."""
    if op not in LP_OPS:
        raise RailplanError("op", f"{op!r} has no LP schedule; choose one of {', '.join(LP_OPS)}")
    if not 2 <= n <= MAX_RANKS:
        raise RailplanError("gpus", f"the LP schedule takes 2 to {MAX_RANKS} ranks; got {n}")
    if not (size_bytes > 0 and math.isfinite(size_bytes)):
        raise RailplanError("bytes", f"must be positive and finite; got {size_bytes}")
    if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
        raise RailplanError("chunks", f"must be a whole number of at least 1; got {chunks!r}")
    if chunks > 1 and (op != "all-gather" or groups):
        # all-to-all flows split freely already; lphier's exchange sends one chunk per rank
        raise RailplanError("chunks", "several chunks per rank: all-gather without groups only")


def synthesize(
    dg: nx.DiGraph,
    ranks: list[str],
    op: str,
    size_bytes: float,
    epochs: str | float = "slow",
    time_limit_s: float = SOLVE_LIMIT_S,
    budget_s: float = SEARCH_BUDGET_S,
    symmetry: Mapping[str, str] | None = None,
    groups: list[list[str]] | None = None,
    chunks: int = 1,
) -> LPResult:
    """The fastest schedule of `op` on `dg` (edge `capacity` in bytes/s per direction, optional
    `latency_s`); `size_bytes` as nccl-tests prints it (the gathered result; each rank's
    all-to-all send buffer). `epochs`: "slow", "fast" or an epoch length in seconds (TE-CCL's
    USER_INPUT).

    The epoch count is searched by `lpsearch.search`; when no schedule is found in its share of
    `budget_s` (too large a program for HiGHS: many ranks, or hundreds of fine epochs) the
    epoch doubles, up to `COARSEN_STEPS` times: a coarser epoch rounds each transfer and
    latency up, so the time stays that of a valid schedule. `optimal`: every smaller count was
    proven infeasible at the epoch used (`epochs_lower`: the fewest not proven too few).
    `symmetry` (an automorphism, lpsym) and `groups` (chassis, lphier) restrict the programs
    solved to symmetric schedules and a fixed chassis exchange; they never prove a count too
    few. `chunks`: all-gather chunks per rank (TE-CCL's num_chunks), each D/(n·chunks) bytes and
    routed and copied on its own; the slowest-link epoch shrinks with the chunk."""
    _check_inputs(op, len(ranks), size_bytes, chunks, groups)
    n = len(ranks)
    start = time.perf_counter()
    chunk = size_bytes / (n * chunks)
    tau = epochs if isinstance(epochs, float) else epoch_s(dg, chunk, epochs)
    if not (tau > 0 and math.isfinite(tau)):
        raise RailplanError("epochs", f"an epoch length must be positive; got {tau}")
    nodes, pairs = order(dg, ranks)
    sym = None if symmetry is None else lpsym.node_perm(dg, nodes, pairs, symmetry, n)
    grp = _group_indices(ranks, groups or [])
    # half the budget to find a schedule at the epoch asked, an eighth at each coarser one, a
    # quarter to bisect below the first found
    for step in range(COARSEN_STEPS + 1):
        tau_s = tau * 2**step
        found = _at_epoch(
            network(dg, ranks, chunk, tau_s, op),
            op,
            grp,
            sym,
            (min(time_limit_s, budget_s), budget_s / (2 if step == 0 else 8), budget_s / 4),
            chunks,
        )
        if found is not None:
            t = found.epochs * tau_s
            return LPResult(
                op,
                n,
                size_bytes,
                found.epochs,
                tau_s,
                t,
                size_bytes / t / 1e9,
                found.delivered * chunk,
                time.perf_counter() - start,
                found.proven,
                found.proven >= found.epochs,
                chunks,
            )
    raise NoSchedule(
        "gpus", f"no {op} schedule for {n} ranks found within the solver's time; use fewer ranks"
    )
