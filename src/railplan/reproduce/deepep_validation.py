"""DeepEP's published normal-kernel bandwidths (data/validation/deepep_normal.csv) against the
training all-to-all of `ep_dispatch` deepep with `fp8_dispatch` (`comm_time.one_all_to_all_s`).

Each row is DeepSeek's benchmark of one dispatch and one combine of 4,096 tokens per rank,
hidden 7,168, top 8 of 256 experts, on H800 servers of 8 GPUs with one 400 Gb/s NIC each. Its
routing (the test's): one expert group per server, each token picking min(servers, 4) of them,
then its 8 experts among theirs. The published figure is a bandwidth: the bytes a rank moves,
counted the test's way, over the kernel's time; the row compares the time that implies with
the model's time for the same bytes. Held out: nothing is fitted to them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from railplan.perf.comm_time import links, one_all_to_all_s
from railplan.perf.layout import megatron_shapes
from railplan.reproduce.validation import read_rows
from railplan.specs import Model, Network, Strategy
from railplan.specs.arrays import check, from_strategies
from railplan.specs.catalog import load_system
from railplan.workload import comm
from railplan.workload.routing import touched_domains, touched_ranks

DATA = "deepep_normal.csv"
TOKENS, HIDDEN, EXPERTS, TOP_K, GPUS_PER_SERVER = 4096, 7168, 256, 8, 8


def benchmark_model(servers: int) -> Model:
    """DeepSeek-V3's MoE shape as DeepEP's test routes it: one group per server, each token
    picking min(servers, 4) groups (all of them below 5 servers)."""
    return Model(
        name=f"deepep-test-{servers}",
        hidden=HIDDEN,
        layers=1,
        heads=128,
        experts=EXPERTS,
        top_k=TOP_K,
        expert_ffn_hidden=2048,
        drop_tokens=False,
        seq=TOKENS,
        expert_groups=servers,
        route_groups=min(servers, 4) if servers > 4 else 0,
    )


def counted_tokens(model: Model, ep: int, link: str) -> float:
    """Token copies per rank the published bandwidth counts: intranode, those a rank receives
    (one per source token and receiving rank holding one of its experts); internode, those a
    rank sends over RDMA (one per token and server holding one of its experts), own included."""
    if link == "nvlink":
        return TOKENS * float(touched_ranks(model, ep))
    servers = ep // GPUS_PER_SERVER
    return TOKENS * touched_domains(
        model.experts, model.top_k, model.expert_groups, model.route_groups, servers
    )


def rows() -> list[dict[str, Any]]:
    """Per row and pass: the published bandwidth, the time it implies for the counted bytes,
    the model's time and its error (%)."""
    out: list[dict[str, Any]] = []
    system = load_system("hgx-h800")
    for r in read_rows(DATA):
        ep = int(r["ep"])
        model = benchmark_model(max(ep // GPUS_PER_SERVER, 1))
        strategy = Strategy(
            dp=ep,
            ep=ep,
            global_batch=ep,
            precision="fp8",
            ep_dispatch="deepep",
            fp8_dispatch=True,
        )
        s = from_strategies(strategy)
        check(model, s)
        lk = links(system, Network(), np.asarray(float(ep)))
        shape = megatron_shapes(s.tp, s.dp, s.pp, s.ep, lk.hb_domain, s.cp)["ep"]
        ratio = comm.ep_dispatch_byte_ratio(s)
        copies = counted_tokens(model, ep, r["link"])
        for name, byte_ratio in (("dispatch", ratio), ("combine", np.asarray(1.0))):
            counted_bytes = copies * HIDDEN * comm.ACT_BYTES * float(byte_ratio)
            gbps = float(r[f"{name}_gbps"])
            measured = counted_bytes / (gbps * 1e9)
            predicted = float(one_all_to_all_s(model, lk, s, shape, byte_ratio))
            out.append(
                {
                    "ep": ep,
                    "link": r["link"],
                    "pass": name,
                    "published_gbps": gbps,
                    "predicted_gbps": counted_bytes / predicted / 1e9,
                    "measured_s": measured,
                    "predicted_s": predicted,
                    "error_pct": 100.0 * (predicted - measured) / measured,
                }
            )
    return out
