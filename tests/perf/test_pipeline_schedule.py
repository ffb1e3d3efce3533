"""The pipeline's closed form against Megatron's schedule run op by op.

`_megatron_makespan` replays the order in which each pipeline rank runs its forward and backward
chunks in Megatron-Core's `forward_backward_pipelining_with_interleaving` (warm-up of
(pp − rank − 1)·2 + (v − 1)·pp chunks, then one forward and one backward in turn, then the
cooldown) and in the 1F1B schedule (warm-up of pp − rank − 1), starting each chunk when its rank
is free and its input has arrived, `send_s` after the chunk that produced it on another rank.
`pipeline` must give the same iteration time without sends, and with overlapped sends in the
interleaved schedule: the fill and the drain cross all v·pp − 1 chunk boundaries."""

import numpy as np
import pytest

from railplan.perf.iteration import DataParallel, pipeline
from tests.perf.pipeline_arrays import pipeline_arrays

NO_DP = DataParallel(*(np.zeros(()) for _ in range(7)))
FORWARD_S, BACKWARD_S = 1.0, 2.0  # per layer


def _table(m: int, v: int, group: int) -> list[tuple[int, int]]:
    """(micro-batch, chunk) of each virtual micro-batch: Megatron-Core's
    `get_schedule_table`, groups of `group` micro-batches run chunk after chunk, the last group
    taking what is left."""
    out: list[tuple[int, int]] = []
    for first in range(0, m, group):
        last = m if first + group >= m else first + group
        out += [(mb, c) for c in range(v) for mb in range(first, last)]
    return out


def _order(pp: int, v: int, m: int, rank: int, group: int = 0) -> list[tuple[str, int, int]]:
    """(pass, chunk, micro-batch) in the order `rank` runs them; `group` is the micro-batch
    group N of the interleaved schedule (0: pp, Megatron-Core's default)."""
    total = m * v
    n = group or pp
    table = _table(m, v, n)

    def chunk(k: int) -> int:
        return table[k][1]

    def micro_batch(k: int) -> int:
        return table[k][0]

    warmup = min(pp - rank - 1 if v == 1 else (pp - rank - 1) * 2 + (v - 1) * n, total)
    ops = [("F", chunk(k), micro_batch(k)) for k in range(warmup)]
    for k in range(warmup, total):
        ops.append(("F", chunk(k), micro_batch(k)))
        b = k - warmup
        ops.append(("B", v - 1 - chunk(b), micro_batch(b)))
    for b in range(total - warmup, total):
        ops.append(("B", v - 1 - chunk(b), micro_batch(b)))
    return ops


def _megatron_makespan(
    pp: int, v: int, m: int, layers: int, send_s: float, head_s: float = 0.0, group: int = 0
) -> float:
    """Time until the last rank's last backward ends; every rank holds `layers` layers, and
    the last chunk of the last rank also the LM head (`head_s`: forward 1/3, backward 2/3)."""
    pass_s = {"F": FORWARD_S * layers / v, "B": BACKWARD_S * layers / v}
    head = {"F": head_s / 3, "B": 2 * head_s / 3}
    orders = [_order(pp, v, m, r, group) for r in range(pp)]
    done: dict[tuple[int, str, int, int], float] = {}
    position, free = [0] * pp, [0.0] * pp
    moved = True
    while moved:
        moved = False
        for r in range(pp):
            while position[r] < len(orders[r]):
                kind, c, i = orders[r][position[r]]
                if kind == "F":
                    dep = (r - 1, "F", c, i) if r > 0 else (pp - 1, "F", c - 1, i)
                    needed = r > 0 or c > 0
                else:
                    dep = (r + 1, "B", c, i) if r < pp - 1 else (0, "B", c + 1, i)
                    needed = r < pp - 1 or c < v - 1
                if needed and dep not in done:
                    break
                ready = done[dep] + (send_s if dep[0] != r else 0.0) if needed else 0.0
                extra = head[kind] if (r, c) == (pp - 1, v - 1) else 0.0
                free[r] = max(free[r], ready) + pass_s[kind] + extra
                done[(r, kind, c, i)] = free[r]
                position[r] += 1
                moved = True
    assert position == [len(o) for o in orders], "the schedule deadlocked"
    return max(free)


def _railplan(
    pp: int,
    v: int,
    m: int,
    layers: int,
    send_s: float,
    overlap: bool,
    head_s: float = 0.0,
    group: int = 0,
) -> float:
    n = np.asarray(float(layers))
    stages = {"first": n, "middle": n, "last": n, "mean": n}
    lt = {"forward": np.asarray(FORWARD_S), "backward": np.asarray(BACKWARD_S)}
    lt["recompute"] = np.asarray(0.0)
    p = pipeline(
        pipeline_arrays(pp, v, m, overlap_p2p=int(overlap), microbatch_group=group),
        stages,
        lt,
        np.asarray(FORWARD_S + BACKWARD_S),
        {"t": np.asarray(head_s), "wgrad": np.asarray(0.0)},
        np.asarray(send_s),
        NO_DP,
        np.asarray(0.0),
        0.0,
        np.asarray(BACKWARD_S),
    )
    return float(p.steady_s + p.bubble_s)


SCHEDULES = [(2, 1, 8, 4), (4, 1, 16, 4), (2, 2, 4, 4), (4, 2, 16, 4), (4, 4, 8, 8), (8, 2, 16, 4)]


@pytest.mark.parametrize(("pp", "v", "m", "layers"), SCHEDULES)
def test_closed_form_is_the_schedule_without_sends(pp: int, v: int, m: int, layers: int) -> None:
    """m·(f + b) + (pp − 1)/v·(f + b): what the op-by-op schedule takes."""
    expected = _megatron_makespan(pp, v, m, layers, 0.0)
    assert _railplan(pp, v, m, layers, 0.0, True) == pytest.approx(expected)


@pytest.mark.parametrize(("pp", "v", "m", "layers"), [s for s in SCHEDULES if s[1] > 1])
def test_overlapped_sends_cost_the_fill_and_the_drain(pp: int, v: int, m: int, layers: int) -> None:
    """Sends far shorter than a chunk: the interleaved steady state hides them, the fill and
    the drain do not (2·(v·pp − 1) sends on the critical path); `pipeline` matches the schedule."""
    send_s = 0.01
    expected = _megatron_makespan(pp, v, m, layers, send_s)
    extra = expected - _megatron_makespan(pp, v, m, layers, 0.0)
    assert extra == pytest.approx(2 * (v * pp - 1) * send_s)
    assert _railplan(pp, v, m, layers, send_s, True) == pytest.approx(expected)


@pytest.mark.parametrize(("pp", "m"), [(2, 8), (4, 16)])
def test_one_f_one_b_sends_are_not_hidden(pp: int, m: int) -> None:
    """Without interleaving the sends never overlap (Megatron-Core turns overlap_p2p_comm off):
    asking for it changes nothing, and the blocking sends cost at least what the op-by-op
    schedule with free asynchronous sends pays."""
    send_s = 0.01
    blocking = _railplan(pp, 1, m, 4, send_s, False)
    assert _railplan(pp, 1, m, 4, send_s, True) == blocking
    assert blocking >= _megatron_makespan(pp, 1, m, 4, send_s) - 1e-12


@pytest.mark.parametrize(("pp", "v", "m", "layers"), SCHEDULES)
def test_lm_head_on_the_last_chunk(pp: int, v: int, m: int, layers: int) -> None:
    """The LM head runs in the last rank's last chunk only; the closed form charges it to the
    last stage's pace and 1/pp of it to the bubble. With a head of 1–10 % of a stage it is
    never below the op-by-op schedule and at most 1 % above it (the fill hides part of the
    head's share of the bubble)."""
    for head_s in (0.01 * layers * 3, 0.1 * layers * 3):
        expected = _megatron_makespan(pp, v, m, layers, 0.0, head_s)
        got = _railplan(pp, v, m, layers, 0.0, True, head_s)
        assert expected - 1e-9 <= got <= 1.01 * expected


def _peak_outstanding_chunks(pp: int, v: int, m: int, rank: int, group: int = 0) -> int:
    """The most chunk forwards whose backward has not run yet, on `rank`, replaying the same
    order: what the rank's activations hold at their peak."""
    held = peak = 0
    for kind, _, _ in _order(pp, v, m, rank, group):
        held += 1 if kind == "F" else -1
        peak = max(peak, held)
    return peak


@pytest.mark.parametrize("pp", [2, 4, 8, 16])
@pytest.mark.parametrize("v", [1, 2, 3, 7])
@pytest.mark.parametrize("groups", [1, 2, 3])
def test_activations_in_flight_match_the_schedule(pp: int, v: int, groups: int) -> None:
    """`in_flight_stage_passes` (whole-stage micro-batches held at the peak) is the replayed
    schedule's peak of outstanding chunks ÷ v on the first two ranks, including the steps
    with m = pp micro-batches whose every forward is a warm-up one."""
    from railplan.specs.arrays import from_strategies
    from railplan.specs.strategy import Strategy
    from railplan.workload.memory import in_flight_stage_passes

    m = groups * pp
    s = from_strategies([Strategy(tp=1, pp=pp, dp=1, interleave=v, micro_batch=1, global_batch=m)])
    for rank in (0, 1):
        want = _peak_outstanding_chunks(pp, v, m, rank) / v
        assert float(in_flight_stage_passes(s, rank)[0]) == pytest.approx(want)


# (pp, v, m, N): micro-batch counts that are not a multiple of pp, run with a larger group N
# whose remainder m mod N is 0 or ≥ pp (Megatron-Core's rule), and N > pp on multiples of pp.
GROUPED = [(2, 2, 5, 5), (4, 2, 10, 5), (4, 2, 9, 9), (4, 3, 12, 8), (3, 2, 7, 4), (4, 2, 16, 8)]


@pytest.mark.parametrize(("pp", "v", "m", "group"), GROUPED)
def test_grouped_schedule_keeps_the_closed_form(pp: int, v: int, m: int, group: int) -> None:
    """With a micro-batch group N ≥ pp (`microbatch_group`), the op-by-op schedule still takes
    m·(f + b) + (pp − 1)/v·(f + b) without sends, and the fill and the drain still cross
    v·pp − 1 chunk boundaries each: the closed form holds."""
    layers = 4 * v
    assert _railplan(pp, v, m, layers, 0.0, True, group=group) == pytest.approx(
        _megatron_makespan(pp, v, m, layers, 0.0, group=group)
    )
    send_s = 0.01
    assert _railplan(pp, v, m, layers, send_s, True, group=group) == pytest.approx(
        _megatron_makespan(pp, v, m, layers, send_s, group=group)
    )


@pytest.mark.parametrize(("pp", "v", "m", "group"), GROUPED)
def test_grouped_schedule_holds_its_larger_warm_up(pp: int, v: int, m: int, group: int) -> None:
    """Memory: the first two ranks hold what the replayed grouped schedule holds at its peak."""
    from railplan.specs.arrays import from_strategies
    from railplan.specs.strategy import Strategy
    from railplan.workload.memory import in_flight_stage_passes

    s = from_strategies(
        [
            Strategy(
                tp=1,
                pp=pp,
                dp=1,
                interleave=v,
                micro_batch=1,
                global_batch=m,
                microbatch_group=group,
            )
        ]
    )
    for rank in (0, 1):
        want = _peak_outstanding_chunks(pp, v, m, rank, group) / v
        assert float(in_flight_stage_passes(s, rank)[0]) == pytest.approx(want)


@pytest.mark.parametrize(("pp", "v", "m", "group"), GROUPED)
@pytest.mark.parametrize("send_s", [0.3, 1.0, 2.0])
def test_grouped_schedule_with_long_sends_is_never_optimistic(
    pp: int, v: int, m: int, group: int, send_s: float
) -> None:
    """Sends of 7–50 % of a chunk: where the group's slack does not cover a round of sends the
    closed form charges every boundary, never less than the schedule takes and at most 2 %
    more."""
    layers = 4 * v
    got = _railplan(pp, v, m, layers, send_s, True, group=group)
    want = _megatron_makespan(pp, v, m, layers, send_s, group=group)
    assert want - 1e-9 <= got <= 1.02 * want


def test_microbatch_group_default_is_pp_and_its_rules_are_one_line_errors(cli) -> None:  # type: ignore[no-untyped-def]
    """N = pp is the default schedule; a group outside [pp, m], a remainder below pp, or a
    group without interleaving are one-line errors naming `microbatch_group` (exit 2)."""
    base = ("estimate", "--model", "gpt-3-175b", "--system", "dgx-h100", "--gpus", "128")
    base += ("--tp", "4", "--pp", "8", "--global-batch", "64")  # dp 4: m = 16
    plain = cli.json(*base, "--interleave", "12")
    same = cli.json(*base, "--interleave", "12", "--microbatch-group", "8")
    assert plain["strategy"]["microbatch_group"] == 0
    assert same["iteration_s"] == plain["iteration_s"]
    assert same["memory_gib_per_gpu"] == plain["memory_gib_per_gpu"]
    wide = cli.json(*base, "--interleave", "12", "--microbatch-group", "16")
    assert wide["memory_gib_per_gpu"] > plain["memory_gib_per_gpu"]
    not_multiple = (*base[:-1], "72")  # m = 18: interleaves only with N = 9 or 18
    refused = cli(*not_multiple, "--interleave", "12")
    assert refused.exit_code == 2 and str(refused.exception).startswith("interleave: ")
    grouped = cli.json(*not_multiple, "--interleave", "12", "--microbatch-group", "9")
    assert grouped["strategy"]["microbatch_group"] == 9 and grouped["iteration_s"] > 0
    for flags, field in (
        (("--interleave", "12", "--microbatch-group", "4"), "microbatch_group"),  # < pp
        (("--interleave", "12", "--microbatch-group", "12"), "microbatch_group"),  # 16 mod 12
        (("--interleave", "12", "--microbatch-group", "40"), "microbatch_group"),  # > m
        (("--microbatch-group", "8"), "microbatch_group"),  # not interleaved
    ):
        r = cli(*base, *flags)
        assert r.exit_code == 2, flags
        assert str(r.exception).startswith(f"{field}: "), (flags, r.exception)
