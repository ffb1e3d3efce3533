"""FP8 MoE dispatch in training (`Strategy.fp8_dispatch`, DeepSeek-V3 §3.3.2).

The all-to-alls that carry tokens to the experts (the forward dispatch, its recompute, and the
backward combine's gradient for the down-projection) move FP8 values with one fp32 scale per
128 (1.03125 bytes per element); the combine and the dispatch's gradient stay BF16. Needs
precision fp8 and DeepEP dispatch."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from railplan.errors import RailplanError
from railplan.explore.search import SearchSpace, search
from railplan.perf.comm_time import links, one_all_to_all_s
from railplan.perf.iteration import iteration
from railplan.perf.layout import megatron_shapes
from railplan.specs import Job, Network, Strategy, load_model, load_system
from railplan.specs.arrays import from_strategies
from railplan.traffic.matrix import KIND_CODE, traffic
from railplan.traffic.placement import place
from railplan.workload import comm
from tests.conftest import Cli
from tests.perf.batch_check import batch_equals_each_alone, checked
from tests.perf.properties import (
    ARCHS,
    BANDWIDTH_FIELDS,
    FACTORS,
    check_more_bandwidth_never_slower,
    check_network_order,
)

MOE = load_model("mixtral-8x7b")  # 8 experts, top 2, 32 layers, all MoE
SYSTEM = load_system("dgx-h100")
BASE = {
    "tp": 1,
    "dp": 16,
    "ep": 8,
    "global_batch": 32,
    "zero": 1,
    "precision": "fp8",
    "ep_dispatch": "deepep",
}
RATIO = (1 + 4 / 128) / 2  # an FP8 element with its share of the fp32 scale, over bf16's 2 B


def test_byte_ratio() -> None:
    """Half the all-to-alls at (1 + 4/128)/2 of BF16's bytes; only with fp8 and DeepEP."""
    on = checked(MOE, **BASE, fp8_dispatch=True)
    assert float(comm.ep_dispatch_byte_ratio(on)) == RATIO == 0.515625
    assert float(comm.ep_dispatch_byte_ratio(checked(MOE, **BASE))) == 1.0
    # the same flag as arrays where the run cannot dispatch in FP8 changes nothing
    bf16 = from_strategies(Strategy(**BASE | {"precision": "bf16"}, fp8_dispatch=True))
    assert float(comm.ep_dispatch_byte_ratio(bf16)) == 1.0


def test_rules() -> None:
    with pytest.raises(RailplanError, match="fp8_dispatch needs precision fp8"):
        checked(MOE, **BASE | {"precision": "bf16"}, fp8_dispatch=True)
    with pytest.raises(RailplanError, match="ep_dispatch deepep"):
        checked(MOE, **BASE | {"ep_dispatch": "alltoall"}, fp8_dispatch=True)


def test_time_by_hand() -> None:
    """Exposed all-to-all time (no overlap): each pass's dispatch at the FP8 bytes, its combine
    at BF16's, so the ratio to all-BF16 is (1 + t(FP8 bytes)/t(BF16 bytes))/2, t the one
    all-to-all of the ep group; above the bytes' ratio (latency does not shrink), below 1."""
    for arch in ("rail-optimized", "rail-only"):
        net = Network(architecture=arch)
        off, on = checked(MOE, **BASE), checked(MOE, **BASE, fp8_dispatch=True)
        t_off = float(iteration(MOE, SYSTEM, net, off).breakdown_s["ep_comm"])
        t_on = float(iteration(MOE, SYSTEM, net, on).breakdown_s["ep_comm"])
        shape = megatron_shapes(1, 16, 1, SYSTEM.hb_domain, 8)["ep"]
        lk = links(SYSTEM, net, np.asarray(16.0))
        bf16 = float(one_all_to_all_s(MOE, lk, on, shape, 1.0))
        fp8 = float(one_all_to_all_s(MOE, lk, on, shape, RATIO))
        assert t_on / t_off == pytest.approx((1 + fp8 / bf16) / 2, rel=1e-12)
        assert (1 + RATIO) / 2 < t_on / t_off < 1


def test_traffic_bytes() -> None:
    """The traffic matrix's all-to-all bytes shrink by exactly (1 + ratio)/2; nothing else
    moves."""
    p = place(1, 1, 16, 8)

    def by_kind(strategy: Strategy) -> dict[str, float]:
        t = traffic(MOE, strategy, p)
        return {k: float(t.bytes[t.kind == c].sum()) for k, c in KIND_CODE.items()}

    off = by_kind(Strategy(**BASE))
    on = by_kind(Strategy(**BASE, fp8_dispatch=True))
    assert off["ep"] > 0
    assert on["ep"] == pytest.approx(off["ep"] * (1 + RATIO) / 2, rel=1e-12)
    assert {k: v for k, v in on.items() if k != "ep"} == {k: v for k, v in off.items() if k != "ep"}


def test_memory_unchanged_and_label() -> None:
    off = iteration(MOE, SYSTEM, Network(), checked(MOE, **BASE))
    on = iteration(MOE, SYSTEM, Network(), checked(MOE, **BASE, fp8_dispatch=True))
    assert float(on.memory.total_bytes) == float(off.memory.total_bytes)
    assert float(on.iteration_s) < float(off.iteration_s)
    assert "FP8-dispatch" in Strategy(**BASE, fp8_dispatch=True).label()
    assert "FP8-dispatch" not in Strategy(**BASE).label()


def test_search_applies_it_where_it_can() -> None:
    """Asked for, the search dispatches in FP8 on its FP8 DeepEP candidates only."""
    job = Job(MOE, SYSTEM, Network(), 16, 32)
    space = {"tp": (1,), "pp": (1,), "ep": (8,), "ep_dispatch": "deepep", "fp8_dispatch": True}
    r = search(job, SearchSpace(precision=("bf16", "fp8"), **space), top=50)
    kinds = {(c.strategy.precision, c.strategy.fp8_dispatch) for c in r.top}
    assert ("fp8", True) in kinds and ("bf16", False) in kinds
    assert ("fp8", False) not in kinds and ("bf16", True) not in kinds
    plain = search(job, SearchSpace(precision=("fp8",), **space | {"fp8_dispatch": False}), top=1)
    assert r.best is not None and plain.best is not None
    assert r.best.iteration_s < plain.best.iteration_s


def test_mixed_batches_equal_each_alone() -> None:
    items = [
        Strategy(**BASE, fp8_dispatch=True),
        Strategy(**BASE),
        Strategy(**BASE | {"ep": 2}, fp8_dispatch=True, overlap_ep=True),
        Strategy(**BASE | {"ep": 4, "tp": 2, "dp": 8, "sequence_parallel": True}),
    ]
    assert batch_equals_each_alone(MOE, items) == len(items)


@settings(max_examples=20, deadline=None)
@given(
    ep=st.sampled_from([2, 4, 8]),
    fp8_dispatch=st.booleans(),
    field=BANDWIDTH_FIELDS,
    factor=FACTORS,
    arch=ARCHS,
)
def test_properties(ep: int, fp8_dispatch: bool, field: str, factor: float, arch: str) -> None:
    """More bandwidth is never slower, ideal ≤ rail-optimized ≤ rail-only, and FP8 dispatch is
    never slower than BF16."""
    strategy = Strategy(**BASE | {"ep": ep}, fp8_dispatch=fp8_dispatch)
    check_more_bandwidth_never_slower(MOE, SYSTEM, strategy, field, factor, arch)
    check_network_order(MOE, SYSTEM, strategy)
    net = Network(architecture=arch)
    fp8 = iteration(MOE, SYSTEM, net, checked(MOE, **BASE | {"ep": ep}, fp8_dispatch=True))
    bf16 = iteration(MOE, SYSTEM, net, checked(MOE, **BASE | {"ep": ep}))
    assert float(fp8.iteration_s) <= float(bf16.iteration_s) * (1 + 1e-12)
    assert bool(np.isfinite(fp8.iteration_s))


def test_cli(cli: Cli) -> None:
    args = ["--model", "mixtral-8x7b", "--system", "dgx-h100", "--gpus", "16"]
    args += ["--ep", "8", "--global-batch", "32", "--precision", "fp8", "--zero", "1"]
    out = cli.json("estimate", *args, "--ep-dispatch", "deepep", "--fp8-dispatch")
    assert out["strategy"]["fp8_dispatch"] is True
    bad = cli("estimate", *args, "--fp8-dispatch")
    assert bad.exit_code == 2 and "fp8_dispatch" in str(bad.exception)
    assert "\n" not in str(bad.exception)
    t = cli.json("traffic", *args, "--ep-dispatch", "deepep", "--fp8-dispatch")
    assert t["strategy"]["fp8_dispatch"] is True
    fixed = ["--tp", "1", "--pp", "1", "--ep", "8", "--global-batch", "32", "--top", "1"]
    found = cli(
        "search",
        *args[:6],
        *fixed,
        "--precision",
        "fp8",
        "--ep-dispatch",
        "deepep",
        "--fp8-dispatch",
    )
    assert found.exit_code == 0 and "FP8-dispatch" in found.output
    # asked for where the search cannot apply it: an error, not silence
    for extra in (["--precision", "bf16", "--ep-dispatch", "deepep"], ["--precision", "fp8"]):
        bad = cli("search", *args[:6], *fixed, *extra, "--fp8-dispatch")
        assert bad.exit_code == 2 and str(bad.exception).startswith("fp8_dispatch:")
    bad = cli("search", *args[:6], *fixed, "--precision", "bf16", "--fp8-param-gather")
    assert bad.exit_code == 2 and str(bad.exception).startswith("fp8_param_gather:")
