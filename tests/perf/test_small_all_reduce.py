"""Small all-reduces: NCCL's LL / LL128 rings inside a domain (tuning.cc) and the serving
frameworks' measured custom all-reduce kernel (System.custom_all_reduce)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from railplan.errors import RailplanError
from railplan.perf import collectives as c
from railplan.perf.comm_time import group_collective_s, links
from railplan.perf.layout import Shape
from railplan.specs import Network
from railplan.specs.catalog import load_system
from railplan.specs.hardware import CustomAllReduceCurve

H100 = load_system("dgx-h100")
CURVE = H100.custom_all_reduce
assert CURVE is not None


def test_ll_ring_by_hand() -> None:
    # 8 ranks, 32 KiB, bus bandwidth 369 GB/s, LL cap 141 GB/s: LL = 6.6 + 14·0.6 µs plus
    # 14/8·32768 B at min(184.5, 141) GB/s; LL128 = 14 + 14·1.9 µs plus the bytes at 0.92·369
    ll = 15.0e-6 + 14 / 8 * 32768 / 141e9
    ll128 = 40.6e-6 + 14 / 8 * 32768 / (0.92 * 369e9)
    got = float(c.nccl_low_latency_ring_s(8, 32768, 369e9, 141e9))
    assert got == pytest.approx(min(ll, ll128))
    assert got == pytest.approx(ll)
    # 64 MiB: LL128's bandwidth wins over LL's capped one
    big = 64 * 2**20
    ll128_big = 40.6e-6 + 14 / 8 * big / (0.92 * 369e9)
    assert float(c.nccl_low_latency_ring_s(8, big, 369e9, 141e9)) == pytest.approx(ll128_big)
    assert float(c.nccl_low_latency_ring_s(1, big, 369e9, 141e9)) == 0.0


def _inside(n: int) -> Shape:
    one = np.ones(1)
    return Shape(x=one * n, y=one, domains=one, cross_rail=np.zeros(1, dtype=bool))


def test_group_all_reduce_takes_the_faster_protocol() -> None:
    lk = links(H100, Network(architecture="rail-optimized"), np.asarray([8.0]))
    base = c.NCCL_SIMPLE_BASE_US * 1e-6
    # the Simple ring: 8.4 µs + 14 steps of 3.4 µs + bytes
    simple = base + float(c.ring_all_reduce_s(8, 32768, lk.hb_bw, lk.hb_lat_s))
    got = float(group_collective_s(lk, _inside(8), np.asarray([32768.0]))[0])
    assert got < simple
    assert got == pytest.approx(float(c.nccl_low_latency_ring_s(8, 32768, lk.hb_bw, lk.ll_max_bw)))
    # a large message keeps the Simple ring
    big = 256e6
    assert float(group_collective_s(lk, _inside(8), np.asarray([big]))[0]) == pytest.approx(
        base + float(c.ring_all_reduce_s(8, big, lk.hb_bw, lk.hb_lat_s))
    )
    # all-gathers and reduce-scatters take NCCL's LL ring too, over n − 1 steps
    gather = float(group_collective_s(lk, _inside(8), np.asarray([32768.0]), gather_only=True)[0])
    assert gather == pytest.approx(
        float(c.nccl_low_latency_ring_s(8, 32768, lk.hb_bw, lk.ll_max_bw, 1.0))
    )
    assert gather == pytest.approx(6.6e-6 + 7 * 0.6e-6 + 7 / 8 * 32768 / 141e9)
    big_gather = float(group_collective_s(lk, _inside(8), np.asarray([big]), gather_only=True)[0])
    assert big_gather == pytest.approx(
        base + float(c.ring_all_gather_s(8, big, lk.hb_bw, lk.hb_lat_s))
    )
    # a group of one rank pays nothing
    assert float(group_collective_s(lk, _inside(1), np.asarray([32768.0]))[0]) == 0.0


def test_no_nccl_constants_no_low_latency_protocols() -> None:
    mi = load_system("mi300x")
    assert mi.gpu.nccl_ll_max_bus_bytes_per_s is None
    lk = links(mi, Network(architecture="rail-optimized"), np.asarray([8.0]))
    got = float(group_collective_s(lk, _inside(8), np.asarray([32768.0]))[0])
    assert got == pytest.approx(
        c.NCCL_SIMPLE_BASE_US * 1e-6 + float(c.ring_all_reduce_s(8, 32768, lk.hb_bw, lk.hb_lat_s))
    )


sizes = st.floats(1.0, 1e10)


@given(st.integers(2, 72), sizes, sizes, st.floats(1e9, 1e13), st.floats(1.0, 4.0))
def test_low_latency_ring_monotone_and_never_above_simple_with_its_base(
    n: int, d1: float, d2: float, bw: float, factor: float
) -> None:
    lo, hi = sorted((d1, d2))
    t = c.nccl_low_latency_ring_s
    assert float(t(n, lo, bw, 141e9)) <= float(t(n, hi, bw, 141e9))
    assert float(t(n, hi, bw * factor, 141e9)) <= float(t(n, hi, bw, 141e9))
    # at least its own latency: base + 2(n − 1) steps of the cheaper protocol
    assert float(t(n, lo, bw, 141e9)) >= (6.6 + 2 * (n - 1) * 0.6) * 1e-6 - 1e-15


def test_custom_curve_reproduces_its_measurements() -> None:
    # the measured latencies, each at least the one of the next smaller size (the 4- and
    # 8-rank rows dip between their two smallest sizes: 4.8 → 3.7 and 5.9 → 5.7 µs)
    for n, row in zip(CURVE.ranks, CURVE.latency_us, strict=True):
        got = CURVE.time_s(np.full(len(row), n), np.asarray(CURVE.sizes_bytes))
        assert got * 1e6 == pytest.approx(np.maximum.accumulate(row))
    assert CURVE.latency_us[1][:2] == [4.8, 3.7]
    assert float(CURVE.time_s(4, 16384)) * 1e6 == pytest.approx(4.8)


def test_custom_curve_sizes_are_bytes() -> None:
    # SGLang's table counts fp32 elements (sgl-kernel/tests/test_trt_reduce.py): 512 of them
    # are 2 KiB, 1,048,576 are 4 MiB
    assert CURVE.sizes_bytes[0] == 512 * 4 and CURVE.sizes_bytes[-1] == 4 * 2**20


def test_custom_curve_between_and_beyond() -> None:
    # 6 ranks: halfway between the 4- and 8-rank measurements (vLLM runs 2, 4, 6, 8)
    assert float(CURVE.time_s(6, 131072)) * 1e6 == pytest.approx((4.8 + 7.8) / 2)
    # between two sizes: linear in bytes
    mid = (1048576 + 2097152) / 2
    assert float(CURVE.time_s(8, mid)) * 1e6 == pytest.approx((16.7 + 22.1) / 2)
    # beyond 4 MiB: the last interval's slope; below 2 KiB: the 2 KiB latency
    slope = (33.8 - 22.1) / (4194304 - 2097152)
    assert float(CURVE.time_s(8, 2 * 4194304)) * 1e6 == pytest.approx(33.8 + slope * 4194304)
    assert float(CURVE.time_s(8, 64)) * 1e6 == pytest.approx(5.9)
    # not applicable: 3, 5, 7 or 16 ranks (the frameworks run 2, 4, 6, 8), above 8 MiB
    for n in (3, 5, 7, 16):
        assert np.isinf(CURVE.time_s(n, 4096))
    assert np.isinf(CURVE.time_s(8, 8 * 2**20 + 1))
    assert float(CURVE.time_s(1, 4096)) == 0.0


@example(4, 2048.0, 16384.0)
@example(8, 2048.0, 16384.0)
@example(4, 1.0, 10000.0)
@given(st.sampled_from([2, 4, 6, 8]), st.floats(1.0, 8 * 2**20), st.floats(1.0, 8 * 2**20))
def test_custom_curve_monotone_in_bytes(n: int, d1: float, d2: float) -> None:
    lo, hi = sorted((d1, d2))
    assert float(CURVE.time_s(n, lo)) <= float(CURVE.time_s(n, hi)) + 1e-15


def test_custom_curve_only_on_the_measured_links() -> None:
    assert H100.custom_all_reduce_curve is CURVE
    slower = H100.model_copy(update={"hb_tbps": 0.2})
    assert slower.custom_all_reduce is CURVE and slower.custom_all_reduce_curve is None
    # on faster links the measured latencies are an upper bound: kept
    assert H100.model_copy(update={"hb_tbps": 7.2}).custom_all_reduce_curve is CURVE
    assert load_system("hgx-h800").custom_all_reduce_curve is None  # H800: half the NVLink


def test_custom_curve_rejects_misaligned_tables() -> None:
    good = CURVE.model_dump()
    with pytest.raises(RailplanError, match="one list per rank count"):
        CustomAllReduceCurve(**(good | {"latency_us": good["latency_us"][:2]}))
    with pytest.raises(RailplanError, match="sizes_bytes must increase"):
        CustomAllReduceCurve(**(good | {"sizes_bytes": list(reversed(good["sizes_bytes"]))}))


def _shape(x: int, y: int) -> Shape:
    one = np.ones(1)
    return Shape(x=one * x, y=one * y, domains=one * y, cross_rail=np.zeros(1, dtype=bool))


@given(
    st.integers(1, 72),
    st.integers(1, 64),
    st.floats(1.0, 1e10),
    st.floats(1.0, 1e10),
    st.booleans(),
    st.booleans(),
    st.sampled_from(["dgx-h100", "dgx-a100", "gb200-nvl72", "mi300x"]),
)
def test_group_all_reduce_is_nccls_fastest_and_monotone(
    x: int, y: int, d1: float, d2: float, nvls: bool, sharp: bool, system: str
) -> None:
    sy = load_system(system).model_copy(update={"nvls": nvls})
    lk = links(sy, Network(architecture="rail-optimized", sharp=sharp), np.asarray([8.0]))
    shape, lo, hi = _shape(x, y), *sorted((d1, d2))
    t_lo = float(group_collective_s(lk, shape, np.asarray([lo]))[0])
    t_hi = float(group_collective_s(lk, shape, np.asarray([hi]))[0])
    assert 0.0 <= t_lo <= t_hi * (1 + 1e-12)  # a bigger message is never faster
    ring = c.NCCL_SIMPLE_BASE_US * 1e-6 + float(
        c.hierarchical_all_reduce_s(x, y, hi, lk.hb_bw, lk.nic_bw, lk.hb_lat_s, lk.nic_lat_s)
    )
    assert t_hi <= ring * (1 + 1e-12) or x * y == 1  # never slower than the Simple ring
    faster = lk.__class__(**(lk.__dict__ | {"hb_bw": 2 * lk.hb_bw, "nic_bw": 2 * lk.nic_bw}))
    assert float(group_collective_s(faster, shape, np.asarray([hi]))[0]) <= t_hi * (1 + 1e-12)
