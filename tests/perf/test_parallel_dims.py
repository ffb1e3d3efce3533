"""Context parallelism, uneven pipelines and ZeRO-2/3 with pipelines (issue 12, part B)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from railplan.errors import RailplanError
from railplan.explore.search import SearchSpace, enumerate_and_evaluate
from railplan.perf.iteration import iteration
from railplan.perf.layout import megatron_shapes
from railplan.specs import Job, Model, Network, Strategy, load_model, load_system
from railplan.specs.arrays import check, from_strategies, layers_of_stage, stage_layers, valid_mask
from railplan.workload.memory import memory
from tests.conftest import Cli

LLAMA = Model(
    name="llama-like",
    hidden=1024,
    layers=10,
    heads=16,
    kv_heads=4,
    ffn_hidden=3584,
    gated_mlp=True,
    vocab=32000,
    seq=8192,
    tied_embeddings=False,
)
H100 = load_system("dgx-h100")


def run(model: Model, **kw: object) -> tuple[float, dict[str, float], float]:
    """(iteration_s, breakdown, memory bytes) of one strategy."""
    s = from_strategies(Strategy.model_validate(kw))
    check(model, s)
    it = iteration(model, H100, Network(), s)
    return (
        float(it.iteration_s),
        {k: float(v) for k, v in it.breakdown_s.items()},
        float(it.memory.total_bytes),
    )


# --- stage layers -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("layers", "pp", "first", "last", "want"),
    [
        (126, 16, 7, 7, (7, 8, 7)),  # Llama 3 405B: one layer off the first and last stage
        (126, 16, 0, 0, (7, 8, 7)),  # spread: 126 = 16·7 + 14, the 14 middle stages get 8
        (70, 12, 0, 0, (5, 6, 5)),  # BLOOM: 70 = 12·5 + 10, the extras on the middle stages
        (10, 4, 0, 0, (2, 3, 2)),
        (96, 8, 0, 0, (12, 12, 12)),
        (12, 1, 0, 0, (12, 0, 12)),
    ],
)
def test_stage_layers(
    layers: int, pp: int, first: int, last: int, want: tuple[int, int, int]
) -> None:
    m = LLAMA.model_copy(update={"layers": layers})
    s = from_strategies(
        Strategy(pp=pp, global_batch=pp, first_stage_layers=first, last_stage_layers=last)
    )
    st_ = stage_layers(m, s)
    assert (int(st_["first"]), int(st_["middle"]), int(st_["last"])) == want


@settings(max_examples=80, deadline=None)
@given(
    layers=st.integers(1, 130),
    pp=st.integers(1, 40),
    first=st.sampled_from([0, 0, 1, 3, 7]),
    last=st.sampled_from([0, 0, 1, 5, 7]),
)
def test_stages_add_up_and_spread_differs_by_at_most_one(
    layers: int, pp: int, first: int, last: int
) -> None:
    m = LLAMA.model_copy(update={"layers": layers})
    s = from_strategies(
        Strategy(pp=pp, global_batch=pp, first_stage_layers=first, last_stage_layers=last)
    )
    assume(bool(valid_mask(m, s)))
    counts = layers_of_stage(m, s, np.arange(pp))
    assert int(counts.sum()) == layers and int(counts.min()) >= 1
    if first:
        assert int(counts[0]) == first
    if last:
        assert int(counts[-1]) == last
    free = counts[(first > 0) :] if pp > 1 else counts
    free = free[: len(free) - (last > 0)] if pp > 1 else free
    if len(free):
        assert int(free.max()) - int(free.min()) <= (1 if not (first or last) else 0)
    st_ = stage_layers(m, s)
    assert float(st_["max"]) == float(counts.max())
    assert float(st_["first"]) == counts[0] and float(st_["last"]) == counts[-1]


# --- uneven pipelines: the slowest stage sets the pace, never below the balanced bound ----------


@settings(max_examples=40, deadline=None)
@given(
    first=st.integers(0, 4),
    last=st.integers(0, 4),
    pp=st.sampled_from([2, 3, 4, 5]),
    v=st.sampled_from([1, 2, 3]),
)
def test_uneven_never_faster_than_balanced_bound(first: int, last: int, pp: int, v: int) -> None:
    # interleaved too, with virtual stages of unequal layers (stages of 3 layers in 2 chunks)
    kw = dict(
        tp=2, pp=pp, dp=1, global_batch=60, interleave=v,
        first_stage_layers=first, last_stage_layers=last,
    )  # fmt: skip
    s = from_strategies(Strategy.model_validate(kw))
    assume(bool(valid_mask(LLAMA, s)))
    it = iteration(LLAMA, H100, Network(), s)
    stages = it.stage_s
    pace = max(float(stages["first"]), float(stages["middle"]), float(stages["last"]))
    assert pace >= float(stages["balanced"]) * (1 - 1e-12)
    m = float(s.micro_batches)
    bubble = float(it.breakdown_s["pipeline_bubble"])
    assert float(it.iteration_s) >= m * float(stages["balanced"]) + bubble
    assert sum(float(v) for v in it.breakdown_s.values()) == pytest.approx(float(it.iteration_s))
    assert all(float(v) >= 0 for v in it.breakdown_s.values())


def test_interleaving_with_unequal_virtual_stages() -> None:
    # Llama 3 405B's split, 7 + 14·8 + 7 layers, scaled to 10 layers on 4 stages: 2, 3, 3, 2.
    # Today's Megatron-Core (--pipeline-model-parallel-layout) puts any number of layers in a
    # virtual stage, so 2 chunks per stage are allowed (1 + 2 layers on the middle stages); the
    # fill and drain shrink with v, never below one layer per chunk.
    times = {v: run(LLAMA, tp=2, pp=4, global_batch=8, interleave=v) for v in (1, 2)}
    assert times[2][0] < times[1][0]
    s = from_strategies(Strategy.model_validate(dict(tp=2, pp=4, dp=1, global_batch=8)))
    assert bool(valid_mask(LLAMA, replace(s, interleave=np.asarray(2))))
    assert not bool(valid_mask(LLAMA, replace(s, interleave=np.asarray(3))))


def test_moving_a_layer_to_the_slowest_stage_slows_the_pipeline() -> None:
    # 10 layers on 4 stages: 2, 3, 3, 2 (spread) against 1, 3, 3, 3 (first given: the last
    # stage, which also runs the logits, gets the layer)
    even, _, _ = run(LLAMA, tp=2, pp=4, global_batch=8)
    worse, _, _ = run(LLAMA, tp=2, pp=4, global_batch=8, first_stage_layers=1)
    assert worse > even


# --- context parallelism -----------------------------------------------------------------------


@settings(max_examples=20, deadline=None)
@given(cp=st.sampled_from([1, 2, 4, 8]), recompute=st.sampled_from(["none", "selective", "full"]))
def test_activation_memory_divides_by_cp(cp: int, recompute: str) -> None:
    base = Strategy(tp=2, pp=2, global_batch=8, recompute=recompute)
    one = memory(LLAMA, from_strategies(base))
    more = memory(LLAMA, from_strategies(base.model_copy(update={"cp": cp})))
    assert float(more.activations_bytes) == pytest.approx(float(one.activations_bytes) / cp)
    assert float(more.total_bytes) <= float(one.total_bytes)


def test_cp_shards_zero_state_over_dp_times_cp() -> None:
    z1 = Strategy(tp=2, dp=2, global_batch=8, zero=1)
    a = memory(LLAMA, from_strategies(z1))
    b = memory(LLAMA, from_strategies(z1.model_copy(update={"cp": 4})))
    assert float(b.optimizer_bytes) == pytest.approx(float(a.optimizer_bytes) / 4)
    assert float(b.weights_bytes) == pytest.approx(float(a.weights_bytes))


def test_cp_splits_the_work_and_adds_ring_time_over_the_nic() -> None:
    # same dp: cp = 2 doubles the GPUs, halves every GPU's tokens and compute
    _, b1, _ = run(LLAMA, tp=1, dp=1, global_batch=4)
    _, b2, _ = run(LLAMA, tp=1, dp=1, cp=2, global_batch=4)
    assert b2["compute"] == pytest.approx(b1["compute"] / 2, rel=0.15)
    assert b1["cp_comm"] == 0.0
    # a slow NIC ring (cp ranks in different domains, tp = 8 fills each domain) is exposed
    slow = H100.model_copy(update={"nic_gbps": 1.0})
    s = from_strategies(Strategy(tp=8, cp=2, global_batch=2))
    it = iteration(LLAMA.model_copy(update={"seq": 1024}), slow, Network(), s)
    assert float(it.breakdown_s["cp_comm"]) > 0
    assert float(it.groups["cp"].domains) == 2


def test_cp_layout_fills_the_domain_with_tp_cp_first() -> None:
    g = megatron_shapes(4, 2, 1, 1, 8, 2)  # tp 4 · cp 2 = one DGX
    assert float(g["cp"].domains) == 1 and float(g["cp"].x) == 2
    assert float(g["dp"].x * g["dp"].y) == 4  # gradients over dp·cp ranks
    assert float(g["dp"].domains) == 2  # the two dp ranks are in different domains
    g = megatron_shapes(8, 1, 1, 1, 8, 2)
    assert float(g["cp"].domains) == 2 and not bool(g["cp"].cross_rail)
    # tp 8 · cp 4 on K = 16: the ring's send from local rank 8 of one domain to local rank 0
    # of the next changes rail (rail-only must forward it)
    g = megatron_shapes(8, 1, 1, 1, 16, 4)
    assert float(g["cp"].domains) == 2 and bool(g["cp"].cross_rail)


# --- ZeRO-2/3 with pipelines -------------------------------------------------------------------


def test_memory_falls_with_zero_stage_under_pipelines() -> None:
    totals = []
    for zero in (0, 1, 2, 3):
        _, _, mem = run(LLAMA, tp=2, pp=2, dp=4, global_batch=16, zero=zero)
        totals.append(mem)
    assert totals[0] > totals[1] > totals[2] > totals[3]


def test_zero_once_per_step_is_zero_one() -> None:
    kw = dict(tp=2, pp=2, dp=4, global_batch=16)
    z1 = run(LLAMA, **kw, zero=1)
    z3_step = run(LLAMA, **kw, zero=3, zero_schedule="step")
    z3_mb = run(LLAMA, **kw, zero=3)
    assert z3_step[0] == pytest.approx(z1[0]) and z3_step[2] == pytest.approx(z1[2])
    assert z3_mb[2] < z1[2]
    assert z3_mb[1]["zero_comm"] >= 0.0


# --- published runs are accepted ---------------------------------------------------------------


def test_llama3_405b_tp8_pp16_on_16384_h100_is_accepted_and_fits_with_zero() -> None:
    m = load_model("llama-3-405b")
    s = from_strategies(
        Strategy(
            tp=8,
            pp=16,
            dp=128,
            global_batch=2048,
            sequence_parallel=True,
            recompute="selective",
            zero=2,
            first_stage_layers=7,
            last_stage_layers=7,
        )
    )
    check(m, s, 16384)
    it = iteration(m, H100, Network(), s)
    assert bool(it.fits)


# --- one-line errors, exit 2 ------------------------------------------------------------------

EST = ["estimate", "--model", "llama-3-8b", "--system", "dgx-h100", "--global-batch", "16"]


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--gpus", "6", "--cp", "3"], "cp"),  # 8192 is not a multiple of 2·3
        (
            ["--gpus", "8", "--pp", "4", "--first-stage-layers", "7", "--last-stage-layers", "10"],
            "first_stage_layers",
        ),
        (["--gpus", "8", "--pp", "4", "--first-stage-layers", "40"], "first_stage_layers"),
        (["--gpus", "8", "--first-stage-layers", "4"], "first_stage_layers"),
        (["--gpus", "5", "--pp", "5", "--interleave", "2"], "interleave"),  # 16 micro-batches
        # stages of 2, 10, 10, 10 layers: 3 virtual stages cannot each hold a layer of the first
        (
            ["--gpus", "4", "--pp", "4", "--first-stage-layers", "2", "--interleave", "3"],
            "interleave",
        ),
        (["--gpus", "40", "--pp", "40"], "pp"),
        (["--gpus", "8", "--zero", "2", "--zero-schedule", "sometimes"], "zero_schedule"),
        (["--gpus", "8", "--cp", "0"], "cp"),
        (["--gpus", "9", "--cp", "2"], "gpus"),
        (["--gpus", "8", "--optimizer-state", "fp16"], "optimizer_state"),
        (["--gpus", "8", "--grad-reduce-bytes", "3"], "strategy.grad_reduce_bytes"),
    ],
)
def test_bad_values_are_one_line_errors(cli: Cli, args: list[str], field: str) -> None:
    r = cli(*EST, *args)
    assert r.exit_code == 2, r.output
    assert isinstance(r.exception, RailplanError)
    assert str(r.exception).startswith(f"{field}:") and "\n" not in str(r.exception)


def test_console_script_prints_one_line_and_exits_2() -> None:
    exe = Path(sys.executable).with_name("railplan")
    args = [str(exe), *EST, "--gpus", "6", "--cp", "3"]
    r = subprocess.run(args, capture_output=True, text=True, check=False)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "cp" in r.stderr and "Traceback" not in r.stderr


def test_estimate_json_has_cp_and_uneven_stages(cli: Cli) -> None:
    out = cli.json(*EST, "--gpus", "24", "--cp", "2", "--pp", "3", "--tp", "2")
    assert out["strategy"]["cp"] == 2 and out["strategy"]["dp"] == 2
    assert out["breakdown_s"]["cp_comm"] >= 0
    assert out["group_layout"]["cp"]["members"] == 2


# --- search -------------------------------------------------------------------------------------


def test_search_enumerates_cp_and_uneven_pp_and_takes_fixed_values() -> None:
    ev = enumerate_and_evaluate(Job(LLAMA, H100, Network(), 16, 16))
    s = ev.strategies
    assert set(np.unique(s.cp).tolist()) >= {1, 2, 4}
    assert bool(np.any(LLAMA.layers % s.pp != 0))  # pp = 4, 8, 16 do not divide 10 layers
    assert bool(np.any((s.zero >= 2) & (s.pp > 1)))
    # virtual stages of unequal layers (10 layers, pp 2: 5 per stage in 2 chunks), each with one
    # layer or more; the 2021-22 space builds equal chunks only
    assert bool(np.any((s.interleave > 1) & ((LLAMA.layers // s.pp) % s.interleave != 0)))
    assert bool(np.all(s.interleave <= LLAMA.layers // s.pp))
    old = enumerate_and_evaluate(
        Job(LLAMA, H100, Network(), 16, 16), SearchSpace(uneven_pp=False, cp=(1,))
    ).strategies
    assert bool(np.all((LLAMA.layers // old.pp) % old.interleave == 0))
    fixed = enumerate_and_evaluate(
        Job(LLAMA, H100, Network(), 16, 16), SearchSpace(tp=(2,), cp=(2,), pp=(2,))
    )
    f = fixed.strategies
    assert len(f) > 0
    assert set(f.tp.tolist()) == {2} and set(f.cp.tolist()) == {2} and set(f.pp.tolist()) == {2}
    assert set(f.dp.tolist()) == {2}
    with pytest.raises(RailplanError):
        SearchSpace(cp=(0,))


SEARCH = [
    "search",
    *("--model", "llama-3-8b", "--system", "dgx-h100", "--gpus", "16", "--global-batch", "32"),
    *("--cp", "2", "--tp", "2"),
]


def test_search_cli_shows_cp_and_fixes_values(cli: Cli) -> None:
    out = cli.json(*SEARCH)
    assert all(c["strategy"]["cp"] == 2 and c["strategy"]["tp"] == 2 for c in out["top"])
    text = cli(*SEARCH, "--top", "1")
    assert text.exit_code == 0 and "cp=2" in text.output


def test_report_traffic_section_places_a_cp_strategy() -> None:
    from railplan.report.sections import traffic_section
    from railplan.specs.strategy import strategy_label
    from tests.report.conftest import small_inputs

    inp = small_inputs(gpus=16, global_batch=16)
    s = Strategy(tp=4, cp=2, dp=2, global_batch=16).model_dump()
    out = traffic_section(inp, s)
    assert out["stats"]["bytes_by_kind"]["cp"] > 0
    assert "cp=2" in strategy_label(s)


def test_traffic_figures_draw_the_cp_kind(tmp_path: Path) -> None:
    from railplan.traffic.matrix import stats, traffic
    from railplan.traffic.placement import place
    from railplan.traffic.plots import heatmap, kind_bars

    s = Strategy(tp=2, cp=4, pp=2, dp=1, global_batch=4)
    t = traffic(LLAMA, s, place(2, 2, 1, 8, cp=4))
    assert stats(t).bytes_by_kind["cp"] > 0
    assert heatmap(t, tmp_path / "h.png", 16, "cp").stat().st_size > 0
    assert kind_bars([stats(t)], ["cp"], tmp_path / "b.svg", "cp").stat().st_size > 0


def test_placement_orders_cp_after_tp() -> None:
    from railplan.traffic.placement import parse_order, place

    p = place(2, 1, 2, 8, cp=2)  # GPU id = t + 2·(c + 2·d)
    assert p.order == ("tp", "cp", "dp", "pp") and p.gpus == 8
    assert p.groups("cp").tolist() == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert p.groups("dp").tolist() == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert p.groups("tp").tolist() == [[0, 1], [2, 3], [4, 5], [6, 7]]
    q = place(2, 1, 2, 8, ("dp", "tp", "cp", "pp"), cp=2)  # id = d + 2·(t + 2·c)
    assert q.groups("cp").tolist() == [[0, 4], [2, 6], [1, 5], [3, 7]]
    with pytest.raises(RailplanError, match="order"):
        parse_order("tp,cp,pp")


def test_traffic_cli_takes_cp_and_stage_layers(cli: Cli) -> None:
    base = ["traffic", "--model", "llama-3-8b", "--system", "dgx-h100", "--global-batch", "8"]
    out = cli.json(*base, "--gpus", "16", "--tp", "2", "--cp", "2", "--pp", "4")
    assert out["bytes_by_kind"]["cp"] > 0 and out["placement"]["order"] == ["tp", "cp", "dp", "pp"]
    even = cli.json(*base, "--gpus", "4", "--pp", "4", "--zero", "2", "--dp", "1")
    uneven = cli.json(*base, "--gpus", "4", "--pp", "4", "--first-stage-layers", "5")
    # the same layers in all: TP and PP bytes agree, only their spread over stages differs
    assert even["bytes_by_kind"]["pp"] == pytest.approx(uneven["bytes_by_kind"]["pp"])
    r = cli(*base, "--gpus", "4", "--pp", "4", "--first-stage-layers", "6")  # 26 ∤ 3 stages
    assert r.exit_code == 2 and str(r.exception).startswith("first_stage_layers:")
