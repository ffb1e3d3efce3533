"""One collective on one group of GPUs, timed by every algorithm behind one interface.

The group is `gpus` GPUs of a system filling whole HB domains (x = K per domain, y = gpus/K
domains; one domain when gpus ≤ K). `size_bytes` is the size nccl-tests prints: the all-reduced
vector, the gathered result, the reduce-scattered input, or each rank's all-to-all send buffer.
Bandwidths are the system's achievable ones (railplan.specs.System). Every closed form comes from
railplan.perf.collectives; this module only picks the bandwidth and latency each algorithm sees.

Bus bandwidth as nccl-tests defines it (doc/PERFORMANCE.md): algbw = size/time, busbw = algbw ×
2(n−1)/n for all-reduce and (n−1)/n for all-gather, reduce-scatter and all-to-all.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from railplan.errors import RailplanError
from railplan.perf import collectives as coll
from railplan.perf.comm_time import Links, links
from railplan.records import Record
from railplan.specs import Network, System
from railplan.specs.base import BYTES
from railplan.specs.hardware import CustomAllReduceCurve

OPS: tuple[str, ...] = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")
ALGORITHMS: tuple[str, ...] = ("ring", "ring-ll", "tree", "hierarchical", "nvls", "sharp", "custom")


@dataclass(frozen=True)
class Group:
    """The shape and bandwidths (bytes/s per GPU per direction) one collective sees."""

    gpus: int
    x: int  # members per HB domain
    y: int  # HB domains
    links: Links  # the bandwidths and latencies the iteration model uses
    nvls_bw: float  # 0: the HB domain has no NVLink SHARP
    custom: CustomAllReduceCurve | None = None  # serving frameworks' kernel, where measured

    @property
    def flat_bw(self) -> float:
        """Per-GPU bandwidth of a flat ring over the group: NCCL runs one ring per NIC, each
        crossing a domain once, so x NICs carry x rings: min(C_F, x·C_S)."""
        lk = self.links
        return lk.hb_bw if self.y == 1 else min(lk.hb_bw, self.x * lk.nic_bw)

    @property
    def flat_lat_s(self) -> float:
        return self.links.hb_lat_s if self.y == 1 else self.links.nic_lat_s


@dataclass(frozen=True)
class Built:
    """The built network the bound, the flow simulation and the LP schedule run on: its
    architecture, switch radix and NIC port line rate, the leaves' down:up ratio
    (`oversubscribed`) and the ports per GPU, one in each plane (`multi-plane`)."""

    arch: str
    radix: int = 64
    nic_gbps: int = 400
    oversubscription: float = 1.0
    planes: int = 1

    def one_plane(self) -> Built:
        """The network a schedule is worked out on. Multi-plane's planes are identical Clos
        networks and a GPU's traffic is spread evenly over its ports (as NCCL spreads its
        channels over a GPU's NICs, each chunk in `planes` parts): each plane carries 1/planes
        of every flow at 1/planes of the rate, so one rail-optimized plane at planes × the port
        rate takes the same time. Every other network is itself."""
        if self.arch != "multi-plane":
            return self
        return Built("rail-optimized", self.radix, self.nic_gbps * self.planes)


def group(system: System, network: Network, gpus: int, nvls: bool = True) -> Group:
    """The group of `gpus` GPUs filling HB domains in turn (`ideal`: one domain of all)."""
    k = gpus if network.architecture == "ideal" else system.hb_domain
    if gpus < 2:
        raise RailplanError("gpus", f"a collective needs at least 2 GPUs; got {gpus}")
    if gpus > k and gpus % k:
        raise RailplanError("gpus", f"must be at most {k} or a multiple of the HB-domain size {k}")
    x = min(gpus, k)
    has_nvls = system.nvls or (nvls and system.gpu.nvlink_sharp)
    return Group(
        gpus=gpus,
        x=x,
        y=gpus // x,
        links=links(system, network, np.asarray(float(gpus))),
        nvls_bw=coll.nvls_bytes_per_s(system.hb_tbps, system.hb_bytes_per_s) if has_nvls else 0.0,
        custom=system.custom_all_reduce_curve,
    )


def busbw_factor(op: str, n: int) -> float:
    """nccl-tests' bus-bandwidth correction factor."""
    return 2.0 * (n - 1) / n if op == "all-reduce" else (n - 1) / n


def time_s(g: Group, op: str, algorithm: str, size_bytes: float) -> tuple[float | None, str]:
    """(seconds, note); seconds is None when the algorithm does not apply (the note says why)."""
    d, n, x, y, lk = size_bytes, g.gpus, g.x, g.y, g.links
    if op == "all-to-all":
        pair = d / n
        if algorithm == "ring":
            if lk.rail_only and y > 1:
                return None, "rail-only has no path between rails: use hierarchical (PXN)"
            t = coll.all_to_all_rail_optimized_s(
                x, y, pair, lk.hb_bw, lk.nic_bw_spread, lk.hb_lat_s, lk.nic_lat_s
            )
            return float(t), "direct pairwise exchange"
        if algorithm == "hierarchical":
            t = coll.all_to_all_rail_only_s(
                x, y, pair, lk.hb_bw, lk.nic_bw_spread, lk.hb_lat_s, lk.nic_lat_s
            )
            return float(t), "rail phase then HB phase (forwarding, NCCL PXN)"
        return None, f"{algorithm} does not apply to all-to-all"
    base = coll.NCCL_SIMPLE_BASE_US * 1e-6  # once per ring or tree collective (Simple)
    if algorithm == "ring":
        t = coll.ring_all_gather_s(n, d, g.flat_bw, g.flat_lat_s)
        return base + float(t * (2.0 if op == "all-reduce" else 1.0)), "flat ring, one per rail"
    if algorithm == "ring-ll":
        if lk.ll_max_bw <= 0:
            return None, "no NCCL tuning constants for this GPU (RCCL): Simple rings only"
        phases = 2.0 if op == "all-reduce" else 1.0
        if y > 1:
            simple = coll.hierarchical_data_s(x, y, d, lk.hb_bw, lk.nic_bw, phases)
            sec = float(coll.nccl_multinode_ring_s(x, y, d, simple, lk.host_cpu, phases))
            note = "LL / LL128 ring across HB domains, the faster: railplan's hierarchical"
            return sec, note + " schedule with NCCL's protocol latencies and bandwidth factors"
        sec = float(coll.nccl_low_latency_ring_s(n, d, lk.hb_bw, lk.ll_max_bw, phases))
        return sec, "NCCL's LL / LL128 ring, the faster (its tuning model)"
    if algorithm == "hierarchical":
        if y == 1:
            return None, "the group lies in one HB domain: hierarchical is the ring"
        hier = coll.hierarchical_all_gather_s(
            x, y, d, lk.hb_bw, lk.nic_bw, lk.hb_lat_s, lk.nic_lat_s
        ) * (2.0 if op == "all-reduce" else 1.0)
        return base + float(hier), "rail phase plus HB phase (paper formula 2)"
    if op != "all-reduce":
        return None, f"{algorithm} is an all-reduce algorithm"
    if algorithm == "tree":
        if y > 1 and lk.ll_max_bw > 0:
            simple = coll.hierarchical_data_s(x, y, d, lk.hb_bw, lk.nic_bw)
            sec = float(coll.nccl_tree_all_reduce_s(x, y, d, simple, lk.host_cpu))
            note = "NCCL's tree: a chain in each HB domain, a double binary tree across"
            return sec, note + " (its tuning model, the fastest protocol)"
        tree = float(coll.tree_all_reduce_s(n, d, g.flat_bw, g.flat_lat_s))
        return base + tree, "double binary tree"
    if algorithm == "custom":
        if y > 1:
            return None, "custom is modelled inside one HB domain only"
        if g.custom is None:
            return None, "no measurement of a serving framework's all-reduce kernel on these links"
        sec = float(g.custom.time_s(n, d))
        if not np.isfinite(sec):
            return None, (
                "the measured kernel runs "
                f"{', '.join(map(str, g.custom.supported_ranks))} ranks and "
                f"at most {g.custom.max_bytes:,} bytes"
            )
        return sec, "serving frameworks' one-shot / two-shot kernel (measured)"
    args = (x, y, d, lk.hb_bw, lk.nic_bw, lk.hb_lat_s, lk.nic_lat_s)
    if algorithm == "nvls":
        if g.nvls_bw <= 0:
            return None, "the HB domain has no NVLink SHARP (NVSwitch 3, H100 and later)"
        sec = float(coll.in_network_hierarchical_all_reduce_s(*args, g.nvls_bw, False))
        return sec, "NVLink SHARP in the HB domain" + (", ring across domains" if y > 1 else "")
    if algorithm == "sharp":
        if y == 1:
            return None, "the group lies in one HB domain: no switch to aggregate in"
        sec = float(coll.in_network_hierarchical_all_reduce_s(*args, g.nvls_bw, True))
        return sec, "InfiniBand SHARP on the rail switches for the 1/x shard of each rail"
    raise RailplanError("algorithm", f"{algorithm!r} is not allowed; choose one of {ALGORITHMS}")


@dataclass(frozen=True)
class Result(Record):
    algorithm: str
    time_s: float | None
    algbw_gb_per_s: float | None
    busbw_gb_per_s: float | None
    note: str

    @classmethod
    def timed(cls, algorithm: str, op: str, g: Group, size: float, t: float, note: str) -> Result:
        """The result of a collective of `size` bytes that took `t` seconds: algbw = size/t,
        busbw = algbw × nccl-tests' factor (None when t is 0)."""
        alg = size / t / 1e9 if t > 0 else None
        bus = None if alg is None else alg * busbw_factor(op, g.gpus)
        return cls(algorithm, t, alg, bus, note)


def checked(op: str, size_bytes: float) -> float:
    """`size_bytes` as checked bytes, after checking `op` (one rule for every algorithm)."""
    if op not in OPS:
        raise RailplanError("op", f"{op!r} is not allowed; choose one of {', '.join(OPS)}")
    return BYTES.check("bytes", size_bytes)


def run(g: Group, op: str, algorithm: str, size_bytes: float) -> Result:
    """Time, algbw and busbw (GB/s, 10^9 bytes/s, as nccl-tests prints) of one algorithm."""
    size = checked(op, size_bytes)
    if algorithm not in ALGORITHMS:
        allowed = ", ".join(ALGORITHMS)
        raise RailplanError("algorithm", f"{algorithm!r} is not allowed; choose one of {allowed}")
    t, note = time_s(g, op, algorithm, size)
    if t is None:
        return Result(algorithm, None, None, None, note)
    return Result.timed(algorithm, op, g, size, t, note)
