"""Flows of one step routed on the fabric: per-pair classes, or symmetric classes aggregated per
(source leaf, destination leaf) (see the package docstring)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from railplan.errors import RailplanError
from railplan.network.flowsim.fabric import (
    FloatArray,
    FlowNetwork,
    IntArray,
    check_incidence,
    switch_routes,
)

#: per-pair simulation limit (incidence rows); larger non-symmetric steps are refused
MAX_PAIR_FLOWS = 4_000_000


@dataclass(frozen=True, eq=False)
class FlowSet:
    """Flow classes of one step: ``incidence`` (classes × links, fraction of one flow of the
    class on the link), ``multiplicity`` (flows per class), ``flow_bytes`` (bytes of each flow of
    the class)."""

    incidence: sp.csr_matrix
    multiplicity: FloatArray
    flow_bytes: FloatArray

    @property
    def classes(self) -> int:
        return int(self.incidence.shape[0])

    @property
    def flows(self) -> int:
        return round(float(self.multiplicity.sum()))

    @property
    def total_bytes(self) -> float:
        return float(self.multiplicity @ self.flow_bytes)


def route_pairs(net: FlowNetwork, src: IntArray, dst: IntArray, nbytes: FloatArray) -> FlowSet:
    """One class per (src, dst) GPU pair (no aggregation). Zero-byte pairs are dropped."""
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    b = np.asarray(nbytes, dtype=np.float64)
    keep = b > 0
    src, dst, b = src[keep], dst[keep], b[keep]
    if np.any(src == dst):
        raise RailplanError("flows", "a flow from a GPU to itself")
    if np.any((src < 0) | (src >= net.gpus) | (dst < 0) | (dst >= net.gpus)):
        raise RailplanError("flows", f"GPU index outside 0..{net.gpus - 1}")
    if len(src) > MAX_PAIR_FLOWS:
        raise RailplanError(
            "flows", f"{len(src):,} flows exceed the per-pair limit {MAX_PAIR_FLOWS:,}"
        )
    k = net.hb_domain
    hb = (src // k) == (dst // k)
    f = np.arange(len(src))
    rows = [f[hb], f[hb]]
    cols = [net.gpu_hb_up[src[hb]], net.gpu_hb_down[dst[hb]]]
    vals = [np.ones(int(hb.sum())), np.ones(int(hb.sum()))]
    nic = ~hb
    fn = f[nic]
    sl, tl = net.gpu_leaf[src[nic]], net.gpu_leaf[dst[nic]]
    if np.any(sl < 0) or np.any(tl < 0):
        raise RailplanError("route", "a flow between HB domains needs NIC links (no network)")
    rows += [fn, fn]
    cols += [net.gpu_up[src[nic]], net.gpu_down[dst[nic]]]
    vals += [np.ones(len(fn)), np.ones(len(fn))]
    base = sp.csr_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
        shape=(len(src), net.links),
    )
    cross = sl != tl
    if np.any(cross):
        pairs = sl[cross] * len(net.switch_names) + tl[cross]
        uniq, inv = np.unique(pairs, return_inverse=True)
        routes = switch_routes(net, uniq // len(net.switch_names), uniq % len(net.switch_names))
        per_flow = np.diff(routes.indptr)[inv]
        check_incidence(2 * len(src) + int(per_flow.sum()), f"{len(src):,} flows")
        fab = routes[inv]
        sel = sp.csr_matrix(
            (np.ones(len(inv)), (fn[cross], np.arange(len(inv)))), shape=(len(src), len(inv))
        )
        base = base + sel @ fab
    return FlowSet(base.tocsr(), np.ones(len(src)), b)


def _group_reduce(
    a: FloatArray, order: IntArray, starts: IntArray, axis: int, op: np.ufunc
) -> FloatArray:
    return np.asarray(op.reduceat(np.take(a, order, axis=axis), starts, axis=axis))


#: one class of flows: link weights, link columns, (unused), flow count, bytes per flow
_Class = tuple[FloatArray, IntArray, FloatArray, float, float]


def _hb_classes(net: FlowNetwork, m: FloatArray, flow: NDArray[np.bool_]) -> list[_Class] | None:
    """One class per HB domain with traffic, or None when a domain's flows are not symmetric
    (unequal bytes, or GPUs sending or receiving unequal numbers of flows)."""
    k = net.hb_domain
    classes: list[_Class] = []
    if k <= 1:
        return classes
    for d in range(net.domains):
        sl = slice(d * k, (d + 1) * k)
        blk, fb = m[sl, sl], flow[sl, sl]
        cnt = float(fb.sum())
        if cnt == 0:
            continue
        vals = blk[fb]
        if vals.max() > vals.min() * (1 + 1e-12):
            return None
        out_c, in_c = fb.sum(axis=1), fb.sum(axis=0)
        if out_c.min() != out_c.max() or in_c.min() != in_c.max():
            return None
        g = np.arange(d * k, (d + 1) * k)
        cols = np.concatenate([net.gpu_hb_up[g], net.gpu_hb_down[g]])
        w = np.concatenate([out_c, in_c]) / cnt
        classes.append((w, cols, np.zeros(0), cnt, float(vals[0])))
    return classes


def aggregate_matrix(net: FlowNetwork, pair_bytes: FloatArray) -> FlowSet | None:
    """Exact class aggregation of a dense N×N byte matrix (see the module doc), or ``None`` when
    some class is not symmetric (then simulate flow by flow)."""
    m = np.array(pair_bytes, dtype=np.float64)
    n, k = net.gpus, net.hb_domain
    if m.shape != (n, n):
        raise RailplanError("pair_bytes", f"must be {n}×{n}; got {m.shape}")
    np.fill_diagonal(m, 0.0)
    domain = np.arange(n) // k
    flow = m > 0
    # --- HB classes: one per domain
    hb = _hb_classes(net, m, flow)
    if hb is None:
        return None
    classes: list[_Class] = hb
    # --- NIC classes: one per (src leaf, dst leaf)
    nicflow = flow & (domain[:, None] != domain[None, :])
    if nicflow.any():
        if np.any(net.gpu_leaf < 0):
            raise RailplanError("route", "a flow between HB domains needs NIC links (no network)")
        order = np.argsort(net.gpu_leaf, kind="stable")
        leaves_sorted = net.gpu_leaf[order]
        starts = np.flatnonzero(np.r_[True, leaves_sorted[1:] != leaves_sorted[:-1]])
        leaf_ids = leaves_sorted[starts]
        nf = nicflow.astype(np.float64)
        big = np.where(nicflow, m, np.inf)
        small = np.where(nicflow, m, -np.inf)
        # per (src GPU, dst leaf) and per (src leaf, dst GPU)
        out_cnt = _group_reduce(nf, order, starts, 1, np.add)  # n × L (rows in GPU order)
        in_cnt = _group_reduce(nf, order, starts, 0, np.add)  # L × n
        bmin = _group_reduce(
            _group_reduce(big, order, starts, 1, np.minimum), order, starts, 0, np.minimum
        )
        bmax = _group_reduce(
            _group_reduce(small, order, starts, 1, np.maximum), order, starts, 0, np.maximum
        )
        oc_min = _group_reduce(out_cnt, order, starts, 0, np.minimum)  # L × L
        oc_max = _group_reduce(out_cnt, order, starts, 0, np.maximum)
        ic_min = _group_reduce(in_cnt, order, starts, 1, np.minimum)
        ic_max = _group_reduce(in_cnt, order, starts, 1, np.maximum)
        total = _group_reduce(out_cnt, order, starts, 0, np.add)
        has = total > 0
        if np.any(has & ((oc_min != oc_max) | (ic_min != ic_max))):
            return None
        if np.any(has & (bmax > bmin * (1 + 1e-12))):
            return None
        si, ti = np.nonzero(has)
        routes = switch_routes(net, leaf_ids[si], leaf_ids[ti])
        members = np.split(order, starts[1:])
        ptr, ind, dat = routes.indptr, routes.indices, routes.data
        for c, (a, b) in enumerate(zip(si, ti, strict=True)):
            ga, gb = members[a], members[b]
            cnt = float(total[a, b])
            lo, hi = ptr[c], ptr[c + 1]
            cols = np.concatenate([net.gpu_up[ga], net.gpu_down[gb], ind[lo:hi]])
            w = np.concatenate([out_cnt[ga, b] / cnt, in_cnt[a, gb] / cnt, dat[lo:hi]])
            classes.append((w, cols.astype(np.int64), np.zeros(0), cnt, float(bmin[a, b])))
    if not classes:
        return FlowSet(sp.csr_matrix((0, net.links)), np.zeros(0), np.zeros(0))
    rows = np.concatenate([np.full(len(c[1]), i) for i, c in enumerate(classes)])
    inc = sp.csr_matrix(
        (np.concatenate([c[0] for c in classes]), (rows, np.concatenate([c[1] for c in classes]))),
        shape=(len(classes), net.links),
    )
    return FlowSet(
        inc,
        np.array([c[3] for c in classes], dtype=np.float64),
        np.array([c[4] for c in classes], dtype=np.float64),
    )


def flows_from_matrix(
    net: FlowNetwork,
    pair_bytes: FloatArray,
    aggregate: bool = True,
    max_pairs: int | None = None,
    step: str = "all-to-all",
) -> FlowSet:
    """Flows of a dense byte matrix: aggregated classes when exact, else one flow per pair,
    refused past ``max_pairs`` pairs (None: no limit; `step` names it in the error)."""
    if aggregate:
        fs = aggregate_matrix(net, pair_bytes)
        if fs is not None:
            return fs
    m = np.asarray(pair_bytes, dtype=np.float64).copy()
    np.fill_diagonal(m, 0.0)
    src, dst = np.nonzero(m > 0)
    if max_pairs is not None and len(src) > max_pairs:
        how = "cannot be aggregated into exact classes on this network"
        if not aggregate:
            how = "is not aggregated (--no-aggregate)"
        raise RailplanError(
            "gpus",
            f"the {step} step {how} and has {len(src):,} pair flows, past the per-pair limit "
            f"of {max_pairs:,} simulated one by one (128 GPUs' all-to-all; more can run for "
            "minutes); use fewer GPUs, or a cluster whose leaves carry the same traffic each "
            "(classes aggregate exactly when every leaf holds whole groups of GPUs that send "
            "alike, e.g. leaves of R/2 ports that divide the GPUs of a rail)",
        )
    return route_pairs(net, src, dst, m[src, dst])
