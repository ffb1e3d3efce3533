"""Where each kind of rank group sits relative to the HB domains, for the iteration model.

Megatron-LM numbers ranks tp fastest, then cp (context parallelism), then dp, then pp (GPU id =
t + tp·(c + cp·(d + dp·p)); Megatron-Core's default order tp-cp-ep-dp-pp), and the cluster fills
HB domains of K GPUs in id order: an HB domain fills with tp·cp first. A group of n ranks
`stride` apart then has x members in each of y domains — when sizes divide K. When they do not
(tp = 16 on a 72-GPU NVL72 domain, dp = 16 at stride 8 on it, a pipeline boundary at tp·dp = 48
on K = 64), groups straddle domain edges unevenly, and because every group of a kind runs in
lock-step with the others (pipeline and data-parallel synchronisation), the slowest group sets
the pace.

`worst_shape` therefore returns, over all groups of a kind, the worst layout:
- `x`: the fewest members any spanned domain holds. In a hierarchical collective that domain's
  few NICs carry its whole share, so the NIC phase takes (n − x)/n · D/(x·C_S): exactly the
  hierarchical formula with x members per domain and y = n/x domains (SYSTEM.md formula 2);
- `y` = n / x (fractional when the split is uneven), `domains`: the most domains a group spans;
- `cross_rail`: whether a spanned group's members in different domains sit at different local
  ranks (rails), so a rail-only network must forward its NIC bytes through the HB domain; for
  a pipeline chain, whether a send between neighbouring stages in different domains changes
  rail (true whenever the stage size tp·dp is not a multiple of K).

`x` and `domains` are worst cases taken separately (they may come from different groups); the
HB phase is timed with x, which slightly understates domains holding more members.

The scalar work is cached per distinct layout; a search holds few distinct (tp, dp, pp, ep).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from railplan.specs.arrays import BoolArray, FloatArray, IntArray


@dataclass(frozen=True)
class Shape:
    """The worst group of one kind, as arrays over strategies."""

    x: FloatArray
    y: FloatArray
    domains: FloatArray
    cross_rail: BoolArray

    @property
    def inside(self) -> BoolArray:
        """Every group of this kind lies within one HB domain."""
        return np.asarray(self.domains <= 1)


@lru_cache(maxsize=65536)
def worst_layout(
    n: int, stride: int, period: int, offsets: int, repeats: int, k: int
) -> tuple[float, float, bool]:
    """(fewest members in a spanned domain, most domains spanned, crosses rails) over the groups
    {b + j·stride : j < n} with bases b = t + q·period, t < offsets, q < repeats, domains of k."""
    if n <= 1:
        return 1.0, 1.0, False
    if (offsets - 1) + (repeats - 1) * period + (n - 1) * stride < k:
        return float(n), 1.0, False  # every group lies in the first domain
    if stride >= k:  # consecutive members always land in different domains
        return 1.0, float(n), stride % k != 0
    g = math.gcd(period, k)
    q = np.arange(min(repeats, k // g), dtype=np.int64) * period % k
    t = np.arange(min(offsets, k), dtype=np.int64)
    r = np.unique((t[:, None] + q[None, :]) % k)  # residues of the bases modulo k
    last = (r + (n - 1) * stride) // k  # domain of the last member, counted from the first's
    span = int(last.max()) + 1
    dom = np.arange(span, dtype=np.int64)[None, :]
    valid = dom <= last[:, None]
    rr = r[:, None]
    first_j = np.maximum(0, -((rr - dom * k) // stride))  # ceil((dom·k − r)/stride), ≥ 0
    end_j = np.minimum(n, -((rr - (dom + 1) * k) // stride))
    count = np.where(valid, end_j - first_j, n)
    spanned = last >= 1
    if not spanned.any():
        return float(n), 1.0, False
    x_min = int(count[spanned].min())
    local = np.where(valid, rr + first_j * stride - dom * k, -1)  # first member's local rank
    rows = np.flatnonzero(spanned)
    cross = False
    for i in rows:
        v = valid[i]
        if np.unique(local[i, v]).size > 1 or np.unique(count[i, v]).size > 1:
            cross = True
            break
    return float(x_min), float(int(last.max()) + 1), cross


def worst_shape(
    n: npt.ArrayLike,
    stride: npt.ArrayLike,
    period: npt.ArrayLike,
    offsets: npt.ArrayLike,
    repeats: npt.ArrayLike,
    k: npt.ArrayLike,
) -> Shape:
    """`worst_layout` over arrays (broadcast), evaluated once per distinct layout."""
    cols = np.broadcast_arrays(
        *(np.asarray(a, dtype=np.int64) for a in (n, stride, period, offsets, repeats, k))
    )
    shape = cols[0].shape
    flat = np.stack([c.ravel() for c in cols], axis=1)
    if flat.shape[0] <= 1024:  # few rows: the cache is faster than sorting
        res = np.array([worst_layout(*row) for row in flat.tolist()], dtype=np.float64)
        res = res.reshape(-1, 3)  # also when there are no rows
    else:
        uniq, inverse = np.unique(flat, axis=0, return_inverse=True)
        res = np.array([worst_layout(*row) for row in uniq.tolist()], dtype=np.float64)
        res = res[inverse.ravel()]
    x, domains, cross = res[:, 0], res[:, 1], res[:, 2] > 0
    nf = flat[:, 0].astype(np.float64)
    y = np.where(domains > 1, nf / x, 1.0)
    x = np.where(domains > 1, x, nf)
    return Shape(
        x=x.reshape(shape),
        y=y.reshape(shape),
        domains=domains.reshape(shape),
        cross_rail=cross.reshape(shape),
    )


def megatron_shapes(
    tp: npt.ArrayLike,
    dp: npt.ArrayLike,
    pp: npt.ArrayLike,
    ep: npt.ArrayLike,
    k: npt.ArrayLike,
    cp: npt.ArrayLike = 1,
    replicas: npt.ArrayLike = 1,
    etp: npt.ArrayLike | None = None,
) -> dict[str, Shape]:
    """The worst layout of every kind of group under Megatron's rank order on HB domains of k: `tp`
    (consecutive), `cp` (the context-parallel ring, tp apart), `dp` (the dp·cp ranks that reduce
    gradients, tp apart), `pp` (a pipeline chain, tp·cp·dp apart), and on Megatron-Core's expert
    grid (the stage's tp·cp·dp ranks as etp × ep × expert-dp, etp fastest; `etp` the routed
    experts' tensor-parallel degree, default tp) `etp` (consecutive), `ep` (etp apart) and
    `expert_dp` (tp·cp·dp/(etp·ep) ranks etp·ep apart); `embedding` (first and last stage of a
    pipeline). With hybrid sharding over `replicas` copies (`StrategyArrays.replicas`), the
    dp·cp/replicas consecutive ranks of a `dp` group that shard the states (`dp_shard`) and the
    ranks holding the same shard, one per shard group (`dp_replica`); likewise `expert_dp_shard`
    and `expert_dp_replica` (Megatron-Core's intra- and inter-instance groups, torchtitan's
    dp_shard and dp_replicate mesh dimensions); without, `dp_shard` is `dp` and a replica group
    is one rank. Arrays broadcast; evaluated once per distinct (tp, dp, pp, ep, k, cp, replicas,
    etp)."""
    etp = tp if etp is None else etp
    cols = np.broadcast_arrays(
        *(np.asarray(a, dtype=np.int64) for a in (tp, dp, pp, ep, k, cp, replicas, etp))
    )
    shape = cols[0].shape
    flat = [c.ravel() for c in cols]
    inverse, uniq = _distinct(flat)
    out = _shapes(*uniq)
    return {
        name: Shape(
            *(
                np.asarray(getattr(sh, f)[inverse].reshape(shape))
                for f in ("x", "y", "domains", "cross_rail")
            )
        )
        for name, sh in out.items()
    }


def _distinct(cols: list[IntArray]) -> tuple[IntArray, list[IntArray]]:
    """Index of each row's distinct combination and the distinct combinations' columns."""
    radices = [int(c.max()) + 1 if c.size else 1 for c in cols]
    if float(np.prod(np.asarray(radices, dtype=np.float64))) < 2.0**62:
        key = np.zeros(cols[0].shape, dtype=np.int64)
        for c, r in zip(cols, radices, strict=True):
            key = key * r + c
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    else:
        _, first, inverse = np.unique(
            np.stack(cols, axis=1), axis=0, return_index=True, return_inverse=True
        )
    return np.asarray(inverse).ravel(), [c[first] for c in cols]


def _shapes(
    tp: IntArray,
    dp: IntArray,
    pp: IntArray,
    ep: IntArray,
    k: IntArray,
    cp: IntArray,
    replicas: IntArray,
    etp: IntArray,
) -> dict[str, Shape]:
    gpus = tp * cp * dp * pp
    one = np.ones_like(gpus)
    stage = tp * cp * dp
    e = np.maximum(etp, 1) * np.maximum(ep, 1)  # an expert-dp rank's span: etp·ep ranks
    edp = np.maximum(stage // e, 1)  # the expert grid folds over tp·cp·dp
    r = np.maximum(replicas, 1)
    shard = np.maximum(dp * cp // r, 1)  # a dp group's consecutive shard groups
    e_shard = np.maximum(edp // r, 1) * e  # an expert shard group's span of ranks
    chain = worst_shape(pp, stage, gpus, stage, one, k)
    # A pipeline send crosses rails when its two ends sit in different domains at different
    # local ranks: for a chain spanning domains, whenever the stage size is not a multiple of k
    # (the wrap-around send of the interleaved schedule spans (pp-1)·stage, covered alike).
    chain = replace(chain, cross_rail=np.asarray((chain.domains > 1) & (stage % k != 0)))
    # The cp ring sends from each rank to the next (tp apart) and from the last back to the
    # first ((cp−1)·tp apart): a send between domains changes rail unless that distance is a
    # multiple of k.
    ring = worst_shape(cp, tp, tp * cp, tp, dp * pp, k)
    ring = replace(
        ring,
        cross_rail=np.asarray((ring.domains > 1) & ((tp % k != 0) | ((cp - 1) * tp % k != 0))),
    )
    dp_group = worst_shape(dp * cp, tp, stage, tp, pp, k)
    expert_dp = worst_shape(edp, e, stage, e, pp, k)
    if bool(np.any(r > 1)):
        hybrid = {
            "dp_shard": worst_shape(shard, tp, shard * tp, tp, r * pp, k),
            "dp_replica": worst_shape(r, shard * tp, stage, shard * tp, pp, k),
            "expert_dp_shard": worst_shape(e_shard // e, e, e_shard, e, r * pp, k),
            "expert_dp_replica": worst_shape(r, e_shard, stage, e_shard, pp, k),
        }
    else:  # no hybrid sharding: a shard group is the whole group, a replica one rank
        single = worst_shape(one, one, one, one, one, k)
        hybrid = {
            "dp_shard": dp_group,
            "dp_replica": single,
            "expert_dp_shard": expert_dp,
            "expert_dp_replica": single,
        }
    return {
        **hybrid,
        "tp": worst_shape(tp, one, tp, one, cp * dp * pp, k),
        "cp": ring,
        "dp": dp_group,
        "pp": chain,
        "ep": worst_shape(ep, etp, e, etp, edp * pp, k),
        "etp": worst_shape(etp, one, etp, one, gpus // np.maximum(etp, 1), k),
        "expert_dp": expert_dp,
        "embedding": worst_shape(
            np.where(pp > 1, 2, 1), np.maximum((pp - 1) * stage, 1), gpus, stage, one, k
        ),
    }
