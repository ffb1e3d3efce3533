"""DeepEP's normal-kernel bandwidths against the training all-to-all: the bytes each published
figure counts, and the model's time for them, by hand."""

from math import comb

import numpy as np
import pytest

from railplan.perf.comm_time import links
from railplan.reproduce.deepep_validation import benchmark_model, counted_tokens, rows
from railplan.specs import Network
from railplan.specs.catalog import load_system
from railplan.workload.routing import touched_domains

FP8 = 1 + 4 / 128  # bytes per value with its share of the fp32 scale


def test_counted_tokens_by_hand() -> None:
    """Intranode: a rank receives each token once from each of the 8 ranks where one of its 8
    experts lies (32 per rank); internode: a rank sends each token once to each server holding
    one of them (one group per server; 4 of 8 groups chosen at 8 servers)."""
    one = 4096 * 8 * (1 - comb(224, 8) / comb(256, 8))
    assert counted_tokens(benchmark_model(1), 8, "nvlink") == pytest.approx(one)
    two = 4096 * 2 * (1 - comb(128, 8) / comb(256, 8))
    assert counted_tokens(benchmark_model(2), 16, "rdma") == pytest.approx(two)
    eight = 4096 * 4 * (1 - comb(96, 8) / comb(128, 8))
    assert counted_tokens(benchmark_model(8), 64, "rdma") == pytest.approx(eight)


def test_rows_by_hand() -> None:
    """Published bandwidth → time for the counted bytes (FP8 dispatch, BF16 combine); at ep 64
    the model's time is the rail phase: the other servers a token reaches, its FP8 bytes each,
    over the NIC, plus one NIC and one NVLink latency."""
    got = {(r["ep"], r["pass"]): r for r in rows()}
    assert len(got) == 8
    r = got[64, "dispatch"]
    counted = counted_tokens(benchmark_model(8), 64, "rdma") * 7168 * FP8
    assert r["measured_s"] == pytest.approx(counted / 51e9)
    lk = links(load_system("hgx-h800"), Network(), np.asarray(64.0))
    remote = touched_domains(256, 8, 8, 4, 8) * 7 / 8
    want = remote * 4096 * 7168 * FP8 / float(lk.nic_bw) + float(lk.nic_lat_s + lk.hb_lat_s)
    assert r["predicted_s"] == pytest.approx(want)
    c = got[64, "combine"]
    assert c["measured_s"] == pytest.approx(counted * 2 / FP8 / 50e9)
    for row in got.values():
        assert row["predicted_s"] > 0 and np.isfinite(row["error_pct"])
