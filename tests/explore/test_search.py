"""Strategy search: the vectorized result equals the scalar estimate, the enumeration is
complete, the best and the Pareto set are right, and the CLI works (incl. errors)."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from railplan.explore.search import (
    MEGATRON_SPACE,
    SearchSpace,
    divisors,
    enumerate_and_evaluate,
    pareto_front,
    search,
)
from railplan.perf.estimate import estimate
from railplan.specs import Job, Model, Network, Strategy, System, load_system
from railplan.specs.arrays import from_strategies, valid_mask

TINY = Model(name="tiny", hidden=512, layers=8, heads=8, seq=512, vocab=1000)
GQA = Model(
    name="tiny-gqa",
    hidden=512,
    layers=6,
    heads=8,
    kv_heads=2,
    seq=256,
    vocab=1000,
    gated_mlp=True,
    tied_embeddings=False,
)
NETWORKS = ("rail-optimized", "rail-only", "ideal")


def small_system(k: int) -> System:
    return System.parse(load_system("dgx-a100").model_dump() | {"hb_domain": k}, "system")


@settings(max_examples=25, deadline=None)
@given(
    model=st.sampled_from([TINY, GQA]),
    gpus=st.sampled_from([4, 8, 16, 24]),
    batch=st.sampled_from([24, 32, 48]),
    k=st.sampled_from([1, 2, 4, 8]),
    arch=st.sampled_from(NETWORKS),
    picks=st.lists(st.integers(0, 10**9), min_size=3, max_size=3),
)
def test_vectorized_equals_estimate(
    model: Model, gpus: int, batch: int, k: int, arch: str, picks: list[int]
) -> None:
    system, net = small_system(k), Network(architecture=arch)
    ev = enumerate_and_evaluate(Job(model, system, net, gpus, batch))
    n = len(ev.iteration_s)
    if n == 0:
        return
    for p in picks:
        i = p % n
        strat = ev.strategies.strategy(i)
        e = estimate(model, system, strat, net, gpus=gpus)
        assert e.iteration_s == pytest.approx(float(ev.iteration_s[i]), rel=1e-12)
        assert e.fits == bool(ev.fits[i])
        assert e.memory_gib_per_gpu * 2**30 == pytest.approx(float(ev.memory_bytes[i]), rel=1e-12)


def brute_force(model: Model, gpus: int, batch: int) -> set[tuple[int, ...]]:
    """Every valid strategy by plain loops and the model's own validity rules."""
    out: set[tuple[int, ...]] = set()
    for tp, pp, cp in itertools.product(range(1, gpus + 1), repeat=3):
        if gpus % (tp * pp * cp):
            continue
        dp = gpus // (tp * pp * cp)
        for mb, v, rc, sp, z in itertools.product(
            range(1, batch + 1), range(1, model.layers + 1), (0, 1, 2), (0, 1), (0, 1, 2, 3)
        ):
            if model.layers % v:  # the search tries the divisors of the layers (docs/search.md)
                continue
            if (sp and tp == 1) or (z and dp * cp == 1):
                continue
            s = (
                Strategy(
                    tp=tp,
                    pp=pp,
                    dp=dp,
                    interleave=v,
                    micro_batch=mb,
                    global_batch=batch,
                    recompute=("none", "selective", "full")[rc],
                    sequence_parallel=bool(sp),
                    zero=z,
                    cp=cp,
                )
                if batch % dp == 0
                else None
            )
            if s is not None and bool(valid_mask(model, from_strategies(s))):
                out.add((tp, pp, dp, v, mb, rc, sp, z, cp))
    return out


def test_enumeration_is_complete_and_valid() -> None:
    gpus, batch = 8, 16
    ev = enumerate_and_evaluate(Job(TINY, small_system(4), Network(), gpus, batch))
    s = ev.strategies
    assert bool(np.all(valid_mask(TINY, s)))
    assert bool(np.all(s.tp * s.cp * s.pp * s.dp == gpus))
    got = set(
        zip(
            *(
                np.asarray(c).tolist()
                for c in (
                    s.tp,
                    s.pp,
                    s.dp,
                    s.interleave,
                    s.micro_batch,
                    s.recompute,
                    s.sequence_parallel,
                    s.zero,
                    s.cp,
                )
            ),
            strict=True,
        )
    )
    assert len(got) == len(ev.iteration_s)  # no duplicates
    assert got == brute_force(TINY, gpus, batch)


def test_best_is_fastest_fitting_and_pareto_is_nondominated() -> None:
    system = small_system(8)
    r = search(Job(TINY, system, Network(), 16, 32), top=3)
    ev = enumerate_and_evaluate(Job(TINY, system, Network(), 16, 32))
    assert r.configurations_evaluated == len(ev.iteration_s)
    assert r.feasible == int(ev.fits.sum())
    assert r.best is not None
    assert r.best.iteration_s == pytest.approx(float(ev.iteration_s[ev.fits].min()))
    assert [c.iteration_s for c in r.top] == sorted(c.iteration_s for c in r.top)
    front = [(c.iteration_s, c.memory_gib_per_gpu) for c in r.pareto]
    assert front[0][0] == pytest.approx(r.best.iteration_s)
    for t, m in front:  # nothing fitting is both faster and smaller
        dominated = (ev.iteration_s[ev.fits] < t) & (ev.memory_bytes[ev.fits] / 2**30 < m - 1e-12)
        assert not bool(dominated.any())
    assert all(a[1] > b[1] for a, b in itertools.pairwise(front))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.floats(0.1, 10), st.floats(0.1, 10)), min_size=1, max_size=40))
def test_pareto_front_property(points: list[tuple[float, float]]) -> None:
    t = np.array([p[0] for p in points])
    m = np.array([p[1] for p in points])
    idx = set(pareto_front(t, m).tolist())
    for i in range(len(points)):
        dominated = bool(np.any((t <= t[i]) & (m <= m[i]) & ((t < t[i]) | (m < m[i]))))
        if i in idx:
            assert not dominated
        elif not dominated:  # an exact duplicate of a kept point
            assert any(t[j] == t[i] and m[j] == m[i] for j in idx)


def test_space_restricts_and_none_fits() -> None:
    system = small_system(8)
    r = search(
        Job(TINY, system, Network(), 16, 32), SearchSpace(tp=(2,), zero=(0,), recompute=("full",))
    )
    assert r.best is not None
    assert {c.strategy.tp for c in r.pareto} == {2}
    assert r.best.strategy.recompute == "full" and r.best.strategy.zero == 0
    meg = search(Job(TINY, system, Network(), 16, 32), MEGATRON_SPACE)
    assert meg.configurations_evaluated < r.configurations_evaluated * 100
    huge = Model(name="huge", hidden=32768, layers=8, heads=8, seq=512, vocab=1000)
    none = search(Job(huge, system, Network(), 2, 2))
    assert none.best is None and none.feasible == 0 and none.configurations_evaluated > 0


def test_divisors() -> None:
    assert divisors(12).tolist() == [1, 2, 3, 4, 6, 12]
    assert divisors(1).tolist() == [1]
    assert divisors(49).tolist() == [1, 7, 49]


def test_cli_search_json(cli) -> None:  # type: ignore[no-untyped-def]
    out = cli.json(
        "search",
        "--model",
        "gpt-1.7b",
        "--gpus",
        "16",
        "--global-batch",
        "64",
        "--system",
        "dgx-a100",
        "--network",
        "rail-only",
        "--hb-domain",
        "4",
        "--top",
        "3",
    )
    for key in ("best", "configurations_evaluated", "feasible", "elapsed_s", "pareto", "top"):
        assert key in out
    assert {"strategy", "iteration_s", "mfu"} <= set(out["best"])
    assert len(out["top"]) == 3
    s = out["best"]["strategy"]
    assert s["tp"] * s["pp"] * s["dp"] == 16
    e = cli.json(
        "estimate",
        "--model",
        "gpt-1.7b",
        "--gpus",
        "16",
        "--global-batch",
        "64",
        "--network",
        "rail-only",
        "--hb-domain",
        "4",
        "--tp",
        str(s["tp"]),
        "--pp",
        str(s["pp"]),
        "--interleave",
        str(s["interleave"]),
        "--micro-batch",
        str(s["micro_batch"]),
        "--recompute",
        s["recompute"],
        "--zero",
        str(s["zero"]),
        "--sequence-parallel" if s["sequence_parallel"] else "--no-sequence-parallel",
    )
    assert e["iteration_s"] == pytest.approx(out["best"]["iteration_s"], rel=1e-12)


def test_cli_search_table(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli("search", "--model", "gpt-1.7b", "--gpus", "8", "--global-batch", "32")
    assert r.exit_code == 0, r.output
    assert "Pareto" in r.output and "configurations evaluated" in r.output


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("--network", "spine"), "network"),
        (("--zero", "0,x"), "zero"),
        (("--model", "gpt-1.7b", "--gpus", "29", "--global-batch", "3"), "gpus"),
        (("--gpus", "0"), "gpus"),
        (("--top", "0"), "top"),
        (("--model", "gpt-1t", "--gpus", "1", "--global-batch", "1"), "gpus"),
    ],
)
def test_cli_search_errors(cli, args: tuple[str, ...], field: str) -> None:  # type: ignore[no-untyped-def]
    base = {"--model": "gpt-1.7b", "--gpus": "8", "--global-batch": "32"}
    opts = dict(base)
    rest = list(args)
    for i in range(0, len(rest), 2):
        opts[rest[i]] = rest[i + 1]
    r = cli("search", *itertools.chain.from_iterable(opts.items()))
    assert r.exit_code == 2
    assert str(r.exception).startswith(f"{field}:")


def test_search_includes_expert_parallelism() -> None:
    from railplan import Network, estimate, load_model, load_system
    from railplan.explore.search import search

    model, system = load_model("moe-1.3b"), load_system("dgx-a100")
    net = Network(architecture="rail-only")
    r = search(Job(model, system, net, 128, 512))
    assert r.best is not None
    assert r.best.strategy.ep > 1  # all 128 experts on every GPU does not fit
    e = estimate(model, system, r.best.strategy, net)
    assert e.iteration_s == pytest.approx(r.best.iteration_s, rel=1e-12)


def test_search_enumerates_precision_where_asked() -> None:
    from railplan.explore.search import SearchSpace, search
    from railplan.specs import Network, load_model, load_system

    m, sy = load_model("gpt-22b"), load_system("dgx-h100")
    space = SearchSpace(tp=(8,), pp=(1, 2), zero=(1,), precision=("bf16", "fp8"))
    both = search(Job(m, sy, Network(), 64, 256), space, top=50)
    bf16 = search(
        Job(m, sy, Network(), 64, 256), SearchSpace(tp=(8,), pp=(1, 2), zero=(1,)), top=50
    )
    assert both.configurations_evaluated == 2 * bf16.configurations_evaluated
    assert both.best is not None and bf16.best is not None
    assert both.best.strategy.precision == "fp8"
    assert bf16.best.strategy.precision == "bf16"
    assert both.best.iteration_s < bf16.best.iteration_s  # fp8 GEMMs run at twice the peak


def test_search_fp8_refused_without_fp8_tensor_cores() -> None:
    from railplan.errors import RailplanError
    from railplan.explore.search import SearchSpace, search
    from railplan.specs import Network, load_model, load_system

    with pytest.raises(RailplanError, match="precision"):
        search(
            Job(load_model("gpt-22b"), load_system("dgx-a100"), Network(), 64, 256),
            SearchSpace(tp=(8,), precision=("fp8",)),
        )


def test_search_overlap_ep_applies_where_allowed_and_matches_estimate() -> None:
    """`SearchSpace(overlap_ep=True)` sets overlap_ep on exactly the candidates Megatron-Core
    allows it on (ep > 1, interleaved when pp > 1, no full recompute); each such candidate is
    the scalar estimate of its strategy, never slower than without the overlap, and the best
    is at least as fast."""
    from railplan import load_model
    from railplan.specs.arrays import FULL

    model, system = load_model("moe-1.3b"), load_system("dgx-a100")
    job = Job(model, system, Network(architecture="rail-only"), 128, 1024)
    off = enumerate_and_evaluate(job)
    on = enumerate_and_evaluate(job, SearchSpace(overlap_ep=True))
    s = on.strategies
    allowed = (s.ep > 1) & ((s.pp == 1) | (s.interleave > 1)) & (s.recompute != FULL)
    assert np.array_equal(s.overlap_ep.astype(bool), allowed)
    assert bool(np.any(allowed)) and not bool(np.all(allowed))
    assert len(off.iteration_s) == len(on.iteration_s)
    assert np.all(on.iteration_s <= off.iteration_s * (1 + 1e-12))
    assert np.any(on.iteration_s < off.iteration_s)
    for i in np.flatnonzero(allowed)[:: max(1, int(allowed.sum()) // 5)]:
        e = estimate(model, system, s.strategy(int(i)), job.network, gpus=128)
        assert e.strategy.overlap_ep
        assert e.iteration_s == pytest.approx(float(on.iteration_s[i]), rel=1e-12)
    best_on = search(job, SearchSpace(overlap_ep=True)).best
    best_off = search(job).best
    assert best_on is not None and best_off is not None
    assert best_on.iteration_s <= best_off.iteration_s


def test_cli_search_overlap_ep(cli) -> None:  # type: ignore[no-untyped-def]
    args = ("search", "--model", "moe-1.3b", "--gpus", "128", "--global-batch", "1024")
    on = cli.json(*args, "--overlap-ep", "--network", "rail-optimized", "--top", "1")
    off = cli.json(*args, "--network", "rail-optimized", "--top", "1")
    assert on["best"]["iteration_s"] <= off["best"]["iteration_s"]
    assert off["best"]["strategy"]["overlap_ep"] is False


def test_search_dualpipev_applies_where_it_can_run_and_matches_estimate() -> None:
    """`SearchSpace(pipeline_schedule="dualpipev")` runs DualPipeV on exactly the candidates it
    can run (two chunks per rank, pp > 1, m ≥ 2·pp), tries v = 2 even where it does not divide
    the layers, and each such candidate is the scalar estimate of its strategy."""
    from railplan import load_model
    from railplan.specs.arrays import dualpipev_allowed

    model = Model(name="odd", hidden=1024, layers=9, heads=8, seq=1024, vocab=1000)
    system = load_system("dgx-a100")
    job = Job(model, system, Network(), 32, 256)
    plain = enumerate_and_evaluate(job)
    assert not np.any(plain.strategies.interleave == 2)  # 2 does not divide 9 layers
    dual = enumerate_and_evaluate(job, SearchSpace(pipeline_schedule="dualpipev"))
    s = dual.strategies
    on = s.pipeline_schedule == 1
    assert np.array_equal(on, (s.interleave == 2) & dualpipev_allowed(s))
    assert bool(np.any(on)) and np.all(s.micro_batches[on] >= 2 * s.pp[on])
    for i in np.flatnonzero(on)[:: max(1, int(on.sum()) // 4)]:
        e = estimate(model, system, s.strategy(int(i)), job.network, gpus=32)
        assert e.strategy.pipeline_schedule == "dualpipev"
        assert e.iteration_s == pytest.approx(float(dual.iteration_s[i]), rel=1e-12)
    deepseek = load_model("deepseek-v3")  # 61 layers
    big = Job(deepseek, load_system("hgx-h800"), Network(), 2048, 15360)
    fixed = SearchSpace(tp=(1,), pp=(16,), ep=(64,), precision=("fp8",), zero=(1,))
    rows = enumerate_and_evaluate(big, replace(fixed, pipeline_schedule="dualpipev"))
    assert np.any(rows.strategies.pipeline_schedule == 1)


def test_search_recompute_modules_apply_to_the_selective_candidates(cli) -> None:  # type: ignore[no-untyped-def]
    """`--recompute-modules` sets what the selective candidates rerun; the none and full ones
    keep the default, so every candidate is a valid strategy; names a model lacks, unknown
    names and moe with --overlap-ep are one-line errors (exit 2)."""
    from railplan.specs.arrays import SELECTIVE

    job = Job(TINY, load_system("dgx-a100"), Network(), 8, 64)
    space = SearchSpace(recompute_modules=("core_attn", "layernorm", "mlp"))
    ev = enumerate_and_evaluate(job, space)
    s = ev.strategies
    selective = s.recompute == SELECTIVE
    assert bool(np.any(selective)) and not bool(np.all(selective))
    assert np.all(s.recompute_modules[selective] == 1 | 2 | 16)
    assert np.all(s.recompute_modules[~selective] == 1)
    assert np.all(valid_mask(TINY, s))
    default = enumerate_and_evaluate(job)
    # Rerunning more modules never makes a selective candidate faster or larger.
    sel = np.flatnonzero(selective)
    assert np.all(ev.iteration_s[sel] >= default.iteration_s[sel] * (1 - 1e-12))
    assert np.all(ev.memory_bytes[sel] <= default.memory_bytes[sel] * (1 + 1e-12))
    args = ("search", "--model", "gpt-3-175b", "--gpus", "1024", "--global-batch", "1536")
    best = cli.json(*args, "--recompute-modules", "core_attn,mlp", "--top", "3")
    for c in best["top"]:
        want = ["core_attn", "mlp"] if c["strategy"]["recompute"] == "selective" else ["core_attn"]
        assert c["strategy"]["recompute_modules"] == want
    for flags in (("--recompute-modules", "moe_act"), ("--recompute-modules", "bogus")):
        r = cli(*args, *flags)
        assert r.exit_code == 2 and str(r.exception).startswith("recompute_modules: "), flags
    moe = ("search", "--model", "moe-1.3b", "--gpus", "128", "--global-batch", "1024")
    r = cli(*moe, "--overlap-ep", "--recompute-modules", "core_attn,moe")
    assert r.exit_code == 2 and str(r.exception).startswith("recompute_modules: ")


def test_moe_candidates_with_tp_run_sequence_parallelism_and_match_iteration() -> None:
    """Each row meets only the columns it can use: tp = 1 without sequence parallelism, MoE
    with tp > 1 with it (Megatron-Core's MoE layer raises without it); the results keep row
    order and equal one `iteration` over the flat strategies."""
    from railplan.perf.iteration import iteration
    from railplan.specs import load_model

    moe = load_model("mixtral-8x7b")
    job = Job(moe, load_system("dgx-h100"), Network(), 16, 16)
    ev = enumerate_and_evaluate(job, SearchSpace(pp=(1, 2)))
    s = ev.strategies
    tp, sp = np.asarray(s.tp), np.asarray(s.sequence_parallel)
    assert bool(np.all(sp[tp == 1] == 0)) and bool(np.all(sp[tp > 1] == 1))
    assert bool(np.any(tp == 1)) and bool(np.any(tp > 1))
    it = iteration(moe, job.system, job.network, s)
    assert np.array_equal(np.asarray(it.iteration_s), ev.iteration_s)
    assert np.array_equal(np.asarray(it.memory.total_bytes), ev.memory_bytes)
    dense = enumerate_and_evaluate(Job(TINY, small_system(4), Network(), 8, 16))
    assert bool(
        np.any((np.asarray(dense.strategies.tp) > 1) & (dense.strategies.sequence_parallel == 0))
    )
