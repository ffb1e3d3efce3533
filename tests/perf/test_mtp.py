"""Multi-token prediction (`Model.mtp_layers`, DeepSeek-V3 D = 1, Megatron-Core --mtp-num-layers).

Each module is a transformer layer of the stage with the LM head (the last; rank 0 with
DualPipeV), a 2h → h projection with two norms, and one more pass through the shared output
head with its own loss; the last stage of an untied model also holds the input embedding, whose
gradient the end stages all-reduce."""

from dataclasses import replace

import numpy as np
import pytest

from railplan.errors import RailplanError
from railplan.perf.iteration import iteration
from railplan.perf.layer_time import logits_times
from railplan.specs import Network, Strategy, load_model, load_system
from railplan.specs.arrays import (
    from_strategies,
    layers_of_stage,
    stage_layers,
)
from railplan.traffic.matrix import KIND_CODE, dp_stage_bytes, traffic
from railplan.traffic.placement import place
from railplan.workload import comm
from railplan.workload.flops import forward_flops_per_sequence, model_flops
from railplan.workload.gemms import logit_gemm
from railplan.workload.memory import dense_stage_params, logits_bytes, mtp_head_params
from tests.perf.batch_check import checked

BASE = load_model("llama-3.1-8b")  # untied embeddings, 32 layers
MTP = BASE.model_copy(update={"mtp_layers": 1})
SYSTEM = load_system("dgx-h100")


def _s(model=MTP, **fields):  # type: ignore[no-untyped-def]
    return checked(model, **fields)


def test_layers_sit_on_the_head_stage() -> None:
    s = _s(pp=4, dp=2, global_batch=8)
    assert [int(layers_of_stage(MTP, s, i)) for i in range(4)] == [8, 8, 8, 9]
    v = _s(pp=4, dp=2, interleave=2, global_batch=64, pipeline_schedule="dualpipev")
    assert [int(layers_of_stage(MTP, v, i)) for i in range(4)] == [9, 8, 8, 8]
    assert int(layers_of_stage(MTP, _s(dp=8, global_batch=8), 0)) == 33
    assert float(stage_layers(MTP, s)["mean"]) == pytest.approx(33 / 4)


def test_stage_table_matches_each_strategy_with_mixed_schedules() -> None:
    """The many-strategies path (a table per schedule) equals one strategy at a time."""
    items = [
        Strategy(pp=p, dp=16 // p, interleave=2, global_batch=256, pipeline_schedule=sched)
        for p in (2, 4, 8)
        for sched in ("1f1b", "dualpipev")
    ] * 12
    arrays = from_strategies(items)
    zero = np.zeros((), dtype=np.int64)  # one split rule for all: the table path
    many = stage_layers(MTP, replace(arrays, first_stage_layers=zero, last_stage_layers=zero))
    assert len(items) > 64
    for i, item in enumerate(items[:6]):
        one = stage_layers(MTP, from_strategies(item))
        for k in ("first", "middle", "last", "max", "fewest", "mean"):
            assert float(many[k][i]) == float(one[k]), (k, item.label())


def test_flops_by_hand() -> None:
    """One more average layer, the 2h·h projection on every token and one more head."""
    f0, f1 = forward_flops_per_sequence(BASE), forward_flops_per_sequence(MTP)
    h, s = BASE.hidden, BASE.seq
    one = np.float64(1.0)
    assert f1["layers"] - f0["layers"] == pytest.approx(
        f0["layers"] / BASE.layers + 2 * s * 2 * h * h
    )
    assert f1["logits"] == pytest.approx(2 * float(logit_gemm(BASE, one, one).flops))
    assert float(model_flops(MTP, 4) - model_flops(BASE, 4)) == pytest.approx(
        3 * 4 * (f1["layers"] - f0["layers"] + f0["logits"])
    )


def test_head_time_and_memory_by_hand() -> None:
    s = _s(pp=2, dp=4, global_batch=8)
    t0, t1 = logits_times(BASE, SYSTEM, s), logits_times(MTP, SYSTEM, s)
    assert float(t1["t"]) > 2 * float(t0["t"])  # two heads and the projection
    assert float(t1["wgrad"]) == float(t0["wgrad"])  # only the main head's is deferrable
    assert float(logits_bytes(MTP, s)) == pytest.approx(2 * float(logits_bytes(BASE, s)))
    h, v = BASE.hidden, BASE.vocab
    assert mtp_head_params(MTP) == 2 * h * h + 2 * h
    extra = float(dense_stage_params(MTP, s, True, np.asarray(16.0))) - float(
        dense_stage_params(BASE, s, True, np.asarray(16.0))
    )
    assert extra == pytest.approx(v * h + 2 * h * h + 2 * h)  # the embedding copy + head
    assert float(comm.embedding_gradient_bytes(BASE, s)) == 0.0  # untied, no MTP
    assert float(comm.embedding_gradient_bytes(MTP, s)) == pytest.approx(v * h * 4)


def test_traffic_gives_the_embedding_copy_to_the_head_stage_only() -> None:
    st = Strategy(pp=2, dp=4, global_batch=8)
    s = from_strategies(st)
    plain = MTP.model_copy(update={"mtp_layers": 0})
    first = dp_stage_bytes(plain, s, 16, True)
    head = dp_stage_bytes(MTP, s, 17, True)
    assert head["dense"] > first["dense"]
    p = place(1, 2, 4, 8)  # stage 0 on GPUs 0-3, stage 1 on 4-7

    def dp_bytes(model):  # type: ignore[no-untyped-def]
        t = traffic(model, st, p)
        dp = t.kind == KIND_CODE["dp"]
        first = dp & (t.src < 4) & (t.dst < 4)
        across = dp & ((t.src < 4) != (t.dst < 4))  # the embedding all-reduce
        return float(t.bytes[first].sum()), float(t.bytes[across].sum())

    (first_mtp, across_mtp), (first_base, across_base) = dp_bytes(MTP), dp_bytes(BASE)
    assert first_mtp == pytest.approx(first_base)  # the first stage holds no MTP part
    assert across_base == 0.0 and across_mtp > 0.0


def test_iteration_slower_and_dualpipev_balances_rank0() -> None:
    s = _s(pp=4, dp=2, global_batch=64)
    a = iteration(BASE, SYSTEM, Network(), s)
    b = iteration(MTP, SYSTEM, Network(), s)
    assert float(b.iteration_s) > float(a.iteration_s)
    assert float(b.mfu) > 0
    even = _s(pp=4, dp=2, interleave=2, global_batch=64, pipeline_schedule="dualpipev")
    lighter = _s(
        pp=4, dp=2, interleave=2, global_batch=64, pipeline_schedule="dualpipev",
        first_stage_layers=5,
    )  # fmt: skip
    assert [int(layers_of_stage(MTP, lighter, i)) for i in range(4)] == [6, 9, 9, 9]
    t_even = float(iteration(MTP, SYSTEM, Network(), even).iteration_s)
    assert float(iteration(MTP, SYSTEM, Network(), lighter).iteration_s) != t_even
    with pytest.raises(RailplanError, match="last_stage_layers"):
        _s(
            pp=4, dp=2, interleave=2, global_batch=64, pipeline_schedule="dualpipev",
            last_stage_layers=5,
        )  # fmt: skip


def test_search_tries_a_lighter_head_stage() -> None:
    """With MTP layers, each pipelined row once more with the LM-head stage lighter: the others
    take ⌊layers/pp⌋ + 1 each (32 layers, pp 4: 9, 9, 9 and 5; pp 8: 5 × 7 leaves −3);
    DualPipeV rows lighten rank 0. Every candidate is valid."""
    from railplan.explore.search import SearchSpace, candidate_rows, enumerate_and_evaluate
    from railplan.specs import Job
    from railplan.specs.arrays import valid_mask

    rows = candidate_rows(MTP, 16, 64, SearchSpace(pp=(4, 8), interleave=(1,)))
    pairs = set(zip(rows["pp"].tolist(), rows["last_stage_layers"].tolist(), strict=True))
    assert pairs == {(4, 0), (4, 5), (8, 0)}
    assert set(rows["first_stage_layers"].tolist()) == {0}
    plain = candidate_rows(BASE, 16, 64, SearchSpace(pp=(4,), interleave=(1,)))
    assert "last_stage_layers" not in plain  # the even split for all
    asked = candidate_rows(BASE, 16, 64, SearchSpace(pp=(4,), lighter_head_stage=True))
    assert 5 in set(asked["last_stage_layers"].tolist())
    space = SearchSpace(pp=(4,), pipeline_schedule="dualpipev", tp=(1,), cp=(1,))
    v = candidate_rows(MTP, 16, 64, space)
    two = v["interleave"] == 2
    assert 5 in set(v["first_stage_layers"][two].tolist())
    ev = enumerate_and_evaluate(Job(MTP, SYSTEM, Network(), 16, 64), space)
    assert bool(np.all(valid_mask(MTP, ev.strategies)))
    lighter = ev.strategies.first_stage_layers > 0
    assert bool(np.any(lighter & ev.strategies.dualpipev))


def test_cli_lighter_head_stage(cli) -> None:  # type: ignore[no-untyped-def]
    args = ["search", "--model", "llama-3.1-8b", "--system", "dgx-h100", "--gpus", "16"]
    args += ["--global-batch", "64", "--pp", "4", "--tp", "1", "--cp", "1", "--top", "5"]
    lighter = cli.json(*args, "--lighter-head-stage")
    even = cli.json(*args, "--even-stages")
    assert lighter["configurations_evaluated"] > even["configurations_evaluated"]
    assert all(c["strategy"]["last_stage_layers"] == 0 for c in even["top"])


def test_lighter_head_is_never_the_even_split_nor_on_the_wrong_stage() -> None:
    """61 layers on pp 2: the even split already gives the last stage 30 (the remainder goes
    to the first), so no lighter candidate repeats it; where DualPipeV cannot run (here with
    the deferred LM-head gradient, Megatron's), the lighter stage is the last, not rank 0."""
    from railplan.explore.search import SearchSpace, candidate_rows, enumerate_and_evaluate
    from railplan.specs import Job

    v3 = load_model("deepseek-v3")
    rows = candidate_rows(v3, 64, 256, SearchSpace(pp=(2, 4), tp=(1,), cp=(1,), ep=(1,)))
    pairs = set(zip(rows["pp"].tolist(), rows["last_stage_layers"].tolist(), strict=True))
    assert (2, 30) not in pairs and (4, 13) in pairs
    space = SearchSpace(
        pp=(4,), tp=(1,), cp=(1,), pipeline_schedule="dualpipev", defer_embedding_wgrad=True
    )
    ev = enumerate_and_evaluate(Job(MTP, SYSTEM, Network(), 16, 64), space)
    s = ev.strategies
    assert not bool(np.any(s.dualpipev))
    assert not bool(np.any(s.first_stage_layers > 0)) and bool(np.any(s.last_stage_layers > 0))
