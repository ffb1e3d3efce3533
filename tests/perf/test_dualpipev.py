"""DualPipeV (`pipeline_schedule` dualpipev) against its schedule run op by op.

`_ops` is the order in which rank r of pp runs its chunks in deepseek-ai/DualPipe's
`dualpipev.py` (`DualPipeV.step`, steps 1-8): chunk 0 of rank r is stage r, chunk 1 is stage
2·pp − 1 − r; "FB" is a forward merged with another chunk's backward, "Bi" a backward of the input
gradient alone (the weight gradient "W" runs later, zero-bubble style). `_replay` starts each op
when its rank is free and its input has arrived, and counts the chunks whose activations a rank
holds. `pipeline` must give the replay's iteration time within a few per cent (the
README's bubble formula is a closed form, the replay's critical path switches between ranks),
and `in_flight_stage_passes` its peak exactly."""

import numpy as np
import pytest

from railplan.perf.iteration import DataParallel, pipeline
from railplan.specs.arrays import from_strategies
from railplan.specs.strategy import Strategy
from tests.perf.pipeline_arrays import pipeline_arrays

NO_DP = DataParallel(*(np.zeros(()) for _ in range(7)))

Op = tuple[str, ...]


def _ops(r: int, pp: int, m: int) -> list[Op]:
    out: list[Op] = [("F", "0")] * (2 * (pp - r - 1))  # step 1
    for _ in range(r + 1):  # step 2
        out += [("F", "0"), ("F", "1")]
    for _ in range(pp - r - 1):  # step 3
        out += [("Bi", "1"), ("W",), ("F", "1")]
    for i in range(m - 2 * pp + r + 1):  # step 4
        out += [("F", "0"), ("B", "1")] if (i == 0 and r == pp - 1) else [("FB", "0", "1")]
        out += [("FB", "1", "0")]
    for _ in range(pp - r - 1):  # step 5
        out += [("B", "1"), ("FB", "1", "0")]
    split = False
    for i in range(r + 1):  # step 6
        if i == (r + 1) // 2 and r % 2 == 1:
            split = True
        out += [("Bi" if split else "B", "1")]
        if i == (r + 1) // 2 and r % 2 == 0:
            split = True
        out += [("Bi" if split else "B", "0")]
    for _ in range(pp - r - 1):  # step 7
        out += [("W",), ("Bi", "0")]
    return out + [("W",)] * (r + 1)  # step 8


def _replay(pp: int, m: int, f: float, b: float, w: float, fb: float) -> tuple[float, list[int]]:
    """Makespan and each rank's peak of chunks holding activations, for chunk forward `f`,
    backward `b` (of which `w` weight gradients) and merged pair `fb`."""

    def stage(r: int, chunk: str) -> int:
        return r if chunk == "0" else 2 * pp - 1 - r

    orders = [_ops(r, pp, m) for r in range(pp)]
    fwd: dict[tuple[int, int], float] = {}
    bwd: dict[tuple[int, int], float] = {}
    nxt_f = [{"0": 0, "1": 0} for _ in range(pp)]
    nxt_b = [{"0": 0, "1": 0} for _ in range(pp)]
    pos, free, held, peak = [0] * pp, [0.0] * pp, [0] * pp, [0] * pp

    def ready_f(k: int, i: int) -> float | None:
        return 0.0 if k == 0 else fwd.get((k - 1, i))

    def ready_b(k: int, i: int) -> float | None:
        if (k, i) not in fwd:
            return None
        return fwd[(k, i)] if k == 2 * pp - 1 else bwd.get((k + 1, i))

    moved = True
    while moved:
        moved = False
        for r in range(pp):
            while pos[r] < len(orders[r]):
                op = orders[r][pos[r]]
                if op[0] == "W":
                    free[r] += w
                elif op[0] == "F":
                    k, i = stage(r, op[1]), nxt_f[r][op[1]]
                    t = ready_f(k, i)
                    if t is None:
                        break
                    free[r] = fwd[(k, i)] = max(free[r], t) + f
                    nxt_f[r][op[1]] += 1
                    held[r] += 1
                elif op[0] in ("B", "Bi"):
                    k, i = stage(r, op[1]), nxt_b[r][op[1]]
                    t = ready_b(k, i)
                    if t is None:
                        break
                    free[r] = bwd[(k, i)] = max(free[r], t) + (b - w if op[0] == "Bi" else b)
                    nxt_b[r][op[1]] += 1
                    held[r] -= 1
                else:  # a forward merged with a backward
                    kf, i_f = stage(r, op[1]), nxt_f[r][op[1]]
                    kb, i_b = stage(r, op[2]), nxt_b[r][op[2]]
                    tf, tb = ready_f(kf, i_f), ready_b(kb, i_b)
                    if tf is None or tb is None:
                        break
                    free[r] = fwd[(kf, i_f)] = bwd[(kb, i_b)] = max(free[r], tf, tb) + fb
                    nxt_f[r][op[1]] += 1
                    nxt_b[r][op[2]] += 1
                    peak[r] = max(peak[r], held[r] + 1)  # the forward's before the backward frees
                peak[r] = max(peak[r], held[r])
                pos[r] += 1
                moved = True
    assert pos == [len(o) for o in orders], "the schedule deadlocked"
    return max(free), peak


def _railplan(pp: int, m: int, layers: int, f: float, b: float, w: float) -> float:
    """`pipeline` for DualPipeV with `layers` layers per rank (two chunks of layers/2), per
    layer forward `f`, backward `b` and weight gradients `w`; nothing hides behind the merged
    pairs (no MoE overlap), so a pair takes a forward and a backward."""
    n = np.asarray(float(layers))
    stages = {"first": n, "middle": n, "last": n, "mean": n}
    lt = {k: np.asarray(x) for k, x in (("forward", f), ("backward", b), ("wgrad", w))}
    lt["recompute"] = np.asarray(0.0)
    p = pipeline(
        pipeline_arrays(pp, 2, m, pipeline_schedule=1),
        stages,
        lt,
        np.asarray(f + b),
        {"t": np.asarray(0.0), "wgrad": np.asarray(0.0)},
        np.asarray(0.0),
        NO_DP,
        np.asarray(0.0),
        0.0,
        np.asarray(b),
    )
    return float(p.steady_s + p.bubble_s)


CASES = [(2, 4), (2, 9), (4, 8), (4, 13), (4, 32), (8, 16), (8, 27), (8, 64), (16, 32), (16, 80)]


@pytest.mark.parametrize(("pp", "m"), CASES)
@pytest.mark.parametrize("w_share", [0.3, 0.4, 0.5])
def test_closed_form_follows_the_replayed_schedule(pp: int, m: int, w_share: float) -> None:
    """Within 4 % of the op-by-op schedule (exact when W is half of B), closer with more
    micro-batches: the bubble is what the README's formula says, the steady state all m
    micro-batches of a rank's two chunks."""
    layers, f, b = 4, 1.0, 2.0
    w = w_share * b
    chunk = layers / 2
    want, _ = _replay(pp, m, chunk * f, chunk * b, chunk * w, chunk * (f + b))
    got = _railplan(pp, m, layers, f, b, w)
    assert got == pytest.approx(want, rel=0.04)
    if w_share == 0.5:
        assert got == pytest.approx(want, rel=1e-9)
    if m >= 4 * pp:
        assert got == pytest.approx(want, rel=0.015)


@pytest.mark.parametrize(("pp", "m"), CASES)
def test_activations_in_flight_match_the_schedule(pp: int, m: int) -> None:
    """Every rank peaks at 2·pp + 1 chunks (the README's PP + 1 stages of a 2·pp-stage V):
    `in_flight_stage_passes` gives it in whole-stage (two-chunk) units."""
    from railplan.workload.memory import in_flight_stage_passes

    _, peak = _replay(pp, m, 1.0, 2.0, 1.0, 3.0)
    assert set(peak) == {2 * pp + 1}
    s = from_strategies(
        Strategy(pp=pp, interleave=2, global_batch=m, pipeline_schedule="dualpipev")
    )
    assert float(in_flight_stage_passes(s, 0)) * 2 == 2 * pp + 1


def test_merged_share_is_rank_zeros() -> None:
    """With the MoE overlap, rank 0 (which merges the fewest) runs 3·pp − 1 of its 2·m
    forwards alone: 2·m minus its merged pairs in the replayed order."""
    from railplan.perf.comm_time import ep_merged_share

    pp, m = 4, 20
    merged = sum(op[0] == "FB" for op in _ops(0, pp, m))
    assert merged == 2 * m - (3 * pp - 1)
    s = from_strategies(
        Strategy(
            pp=pp,
            dp=2,
            ep=2,
            interleave=2,
            global_batch=2 * m,
            overlap_ep=True,
            pipeline_schedule="dualpipev",
        )
    )
    assert float(ep_merged_share(s)) == pytest.approx(merged / (2 * m))
    assert min(sum(op[0] == "FB" for op in _ops(r, pp, m)) for r in range(pp)) == merged


def test_rank_zero_holds_both_ends() -> None:
    """Rank 0 runs the first and the last stage: both vocabulary matrices of an untied model
    and one micro-batch's logits; a tied model needs no embedding all-reduce; the pipeline's
    traffic has no wrap-around edge from the last rank to the first."""
    from railplan.specs import load_model
    from railplan.traffic.placement import pipeline_edges
    from railplan.workload import comm
    from railplan.workload.memory import dense_stage_params

    model = load_model("llama-3.1-8b")  # untied
    plain = from_strategies(Strategy(pp=4, interleave=2, global_batch=16))
    dual = from_strategies(
        Strategy(pp=4, interleave=2, global_batch=16, pipeline_schedule="dualpipev")
    )
    extra = float(dense_stage_params(model, dual) - dense_stage_params(model, plain))
    assert extra == model.vocab * model.hidden
    tied = load_model("gpt-3-175b")
    assert tied.tied_embeddings
    assert float(comm.embedding_gradient_bytes(tied, plain)) > 0
    assert float(comm.embedding_gradient_bytes(tied, dual)) == 0
    chains = np.arange(4).reshape(1, 4)
    wrapped = pipeline_edges(chains, 2)
    v_shape = pipeline_edges(chains, 2, wrap=False)
    assert (3, 0) in set(zip(wrapped.src.tolist(), wrapped.dst.tolist(), strict=True))
    assert (3, 0) not in set(zip(v_shape.src.tolist(), v_shape.dst.tolist(), strict=True))


def test_estimate_and_its_rules(cli) -> None:  # type: ignore[no-untyped-def]
    """DualPipeV holds fewer activations than the interleaved schedule it replaces (2·pp + 1
    chunks against 3·pp − 1); what it needs are one-line errors naming `pipeline_schedule`."""
    base = ("estimate", "--model", "gpt-3-175b", "--system", "dgx-h100", "--gpus", "128")
    base += ("--tp", "4", "--pp", "8", "--global-batch", "64")  # dp 4: m = 16
    inter = cli.json(*base, "--interleave", "2")
    dual = cli.json(*base, "--interleave", "2", "--pipeline-schedule", "dualpipev")
    assert dual["strategy"]["pipeline_schedule"] == "dualpipev"
    acts = "memory_breakdown_gib"
    assert dual[acts]["activations"] < inter[acts]["activations"]
    for flags in (
        ("--pipeline-schedule", "dualpipev"),  # interleave 1
        ("--interleave", "4", "--pipeline-schedule", "dualpipev"),
        (
            "--interleave",
            "2",
            "--pipeline-schedule",
            "dualpipev",
            "--first-stage-layers",
            "6",
            "--last-stage-layers",
            "6",
        ),
        ("--interleave", "2", "--pipeline-schedule", "dualpipev", "--microbatch-group", "16"),
    ):
        r = cli(*base, *flags)
        assert r.exit_code == 2, flags
        assert str(r.exception).startswith("pipeline_schedule: "), (flags, r.exception)
    few = cli(*base[:-1], "32", "--interleave", "2", "--pipeline-schedule", "dualpipev")  # m 8
    assert few.exit_code == 2 and "2·pp micro-batches" in str(few.exception)
    bad = cli(*base, "--interleave", "2", "--pipeline-schedule", "dualpipe")
    assert bad.exit_code == 2 and str(bad.exception).startswith("pipeline_schedule: ")


def test_traffic_has_one_boundary_fewer(cli) -> None:  # type: ignore[no-untyped-def]
    """`railplan traffic --pipeline-schedule dualpipev`: a micro-batch crosses 2·(pp − 1) GPU
    boundaries each way, not the interleaved (pp − 1)·2 + 1 (the V turns on the last rank)."""
    base = ("traffic", "--model", "gpt-3-175b", "--gpus", "128", "--global-batch", "64")
    base += ("--tp", "8", "--pp", "4", "--interleave", "2")
    inter = cli.json(*base)["bytes_by_kind"]["pp"]
    dual = cli.json(*base, "--pipeline-schedule", "dualpipev")["bytes_by_kind"]["pp"]
    assert dual == pytest.approx(inter * 6 / 7)


def _dualpipe_steps(rank: int, ranks: int, chunks: int) -> list[int]:
    """Steps 1-8 of deepseek-ai/DualPipe `dualpipe.py` (`DualPipe.step`) on rank `rank` of
    `ranks` with `chunks` micro-batches, as the file counts them (with its asserts)."""
    assert ranks % 2 == 0 and chunks % 2 == 0 and chunks >= ranks * 2
    half_ranks, half_rank, half_chunks = ranks // 2, min(rank, ranks - 1 - rank), chunks // 2
    rest, own = half_ranks - half_rank - 1, half_rank + 1
    return [2 * rest, own, rest, half_chunks - ranks + half_rank + 1, rest, own, rest, own]


def _dualpipev_steps(rank: int, ranks: int, chunks: int) -> list[int]:
    """Steps 1-8 of `dualpipev.py` (`DualPipeV.step`), likewise."""
    assert chunks >= ranks * 2
    rest, own = ranks - rank - 1, rank + 1
    return [2 * rest, own, rest, chunks - ranks * 2 + rank + 1, rest, own, rest, own]


@pytest.mark.parametrize(("ranks", "chunks"), [(2, 4), (4, 8), (8, 20), (16, 32), (16, 60)])
def test_dualpipe_is_dualpipev_on_half_the_ranks(ranks: int, chunks: int) -> None:
    """Rank r of DualPipe on p ranks runs the op sequence of rank min(r, p − 1 − r) of
    DualPipeV on p/2 ranks with half the micro-batches (the same step kinds, nF0 … nW, in the
    same counts): how docs/model.md enters DualPipe."""
    for r in range(ranks):
        half = min(r, ranks - 1 - r)
        assert _dualpipe_steps(r, ranks, chunks) == _dualpipev_steps(half, ranks // 2, chunks // 2)
        assert _dualpipev_steps(half, ranks // 2, chunks // 2) == [
            len(x) for x in _step_groups(half, ranks // 2, chunks // 2)
        ]


def _step_groups(r: int, pp: int, m: int) -> list[list[int]]:
    """`_ops`'s steps as groups of repetitions (step 2 and 4 repeat pairs), to tie the counts
    above to the op order the replay runs."""
    counts = [2 * (pp - r - 1), r + 1, pp - r - 1, m - 2 * pp + r + 1]
    counts += [pp - r - 1, r + 1, pp - r - 1, r + 1]
    total_ops = len(_ops(r, pp, m))
    per_step = [1, 2, 3, 2, 2, 2, 2, 1]  # ops per repetition of each step
    # the last rank's first main-step pair is not merged (F0, B1 apart: one op more)
    unmerged = 1 if r == pp - 1 and counts[3] > 0 else 0
    assert total_ops == sum(c * k for c, k in zip(counts, per_step, strict=True)) + unmerged
    return [[0] * c for c in counts]
