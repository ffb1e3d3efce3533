"""FP8 weights kept and gathered in FP8 (`fp8_param_gather`: Megatron-Core --fp8-param-gather,
NeMo fp8_params, torchao enable_fsdp_float8_all_gather): the GEMM weights have no BF16 copy and
the data-parallel weight gathers move them at 1 B per parameter."""

import numpy as np
import pytest

from railplan.errors import RailplanError
from railplan.explore.search import SearchSpace, enumerate_and_evaluate, search
from railplan.reproduce.modern_validation import MODERN_FILE, modern_commands, modern_run, read_rows
from railplan.specs import PRECISION_CODES, Job, Network, Strategy, load_model, load_system
from railplan.specs.arrays import check, from_strategies
from railplan.workload import comm
from railplan.workload.memory import (
    dense_stage_params,
    expert_stage_params,
    gemm_stage_params,
    memory,
    zero3_gathered_bytes,
)

MODEL = load_model("llama-3.1-8b")
MOE = load_model("mixtral-8x7b")


def _arrays(model=MODEL, **fields):  # type: ignore[no-untyped-def]
    s = from_strategies(Strategy(precision="fp8", **fields))  # type: ignore[arg-type]
    check(model, s)
    return s


def test_weights_memory_loses_the_bf16_copy() -> None:
    """FP8: BF16 weight (2 B) + cached FP8 weight and transpose (2 B) per GEMM parameter;
    with fp8_param_gather only the FP8 weight and transpose (2 B)."""
    plain = _arrays(global_batch=8, dp=8, zero=1)
    fp8 = _arrays(global_batch=8, dp=8, zero=1, fp8_param_gather=True)
    gemm, _ = gemm_stage_params(MODEL, plain)
    saved = float(memory(MODEL, plain).weights_bytes) - float(memory(MODEL, fp8).weights_bytes)
    assert saved == pytest.approx(2.0 * float(gemm))
    assert float(memory(MODEL, fp8).weights_bytes) == pytest.approx(
        2.0 * float(dense_stage_params(MODEL, fp8))
    )


def test_gathers_move_gemm_weights_at_one_byte() -> None:
    """ZeRO-1's all-gather: 2 B for the embedding and norms, 1 B for the GEMM weights; experts
    (all GEMM weights) at 1 B."""
    for model, ep in ((MODEL, 1), (MOE, 2)):
        plain = _arrays(model, global_batch=8, dp=8, ep=ep, zero=1)
        fp8 = _arrays(model, global_batch=8, dp=8, ep=ep, zero=1, fp8_param_gather=True)
        dense, expert = dense_stage_params(model, fp8), expert_stage_params(model, fp8)
        g_dense, g_expert = gemm_stage_params(model, fp8)
        assert float(comm.dp_weight_gather_bytes(model, fp8)) == pytest.approx(
            2.0 * float(dense) - float(g_dense)
        )
        assert float(comm.dp_weight_gather_bytes(model, plain)) == pytest.approx(2.0 * float(dense))
        assert float(comm.dp_expert_weight_gather_bytes(model, fp8)) == pytest.approx(
            2.0 * float(expert) - float(g_expert)
        )
        if model.experts > 1:  # expert weights are GEMM weights (all but a tiny share)
            assert float(g_expert) == pytest.approx(float(expert), rel=1e-3)


def test_zero3_holds_its_gathered_layers_in_fp8() -> None:
    plain = _arrays(global_batch=8, dp=8, zero=3)
    fp8 = _arrays(global_batch=8, dp=8, zero=3, fp8_param_gather=True)
    layers = 32.0
    g_dense, _ = gemm_stage_params(MODEL, fp8)
    # two gathered layers, each 1 B less per GEMM parameter
    want = float(zero3_gathered_bytes(MODEL, plain)) - 2 * float(g_dense) / layers
    assert float(zero3_gathered_bytes(MODEL, fp8)) == pytest.approx(want)


def test_needs_fp8() -> None:
    s = from_strategies(Strategy(global_batch=8, dp=8, zero=1, fp8_param_gather=True))
    with pytest.raises(RailplanError, match="fp8_param_gather needs precision fp8"):
        check(MODEL, s)


def test_search_sets_it_on_the_fp8_candidates_only() -> None:
    job = Job(MODEL, load_system("dgx-h100"), Network(), 16, 32)
    space = SearchSpace(precision=("bf16", "fp8"), fp8_param_gather=True, tp=(1, 2), pp=(1,))
    ev = enumerate_and_evaluate(job, space)
    fp8 = ev.strategies.precision == PRECISION_CODES["fp8"]
    flag = np.broadcast_to(ev.strategies.fp8_param_gather, fp8.shape) > 0
    assert fp8.any() and (~fp8).any()
    assert bool(np.all(flag == fp8))
    assert search(job, space, top=1).best is not None


def test_validation_reads_the_fact_and_prints_the_flag() -> None:
    rows = {r["id"]: r for r in read_rows(MODERN_FILE)}
    _, _, fp8 = modern_run(rows["dgxc-gpt3-175b-fp8-128"])
    _, _, bf16 = modern_run(rows["dgxc-gpt3-175b-128"])
    assert fp8.fp8_param_gather and not bf16.fp8_param_gather
    commands = {c["id"]: c["command"] for c in modern_commands()}
    assert "--fp8-param-gather" in commands["dgxc-gpt3-175b-fp8-2048"]
    assert "--fp8-param-gather" not in commands["dgxc-gpt3-175b-2048"]


def test_time_never_rises() -> None:
    """Fewer bytes gathered: the iteration is never slower (ZeRO 1 and 3, one and many DGX)."""
    from railplan.perf.iteration import iteration

    sy = load_system("dgx-h100")
    for zero in (1, 3):
        for dp in (8, 64):
            a = _arrays(global_batch=dp, dp=dp, zero=zero)
            b = _arrays(global_batch=dp, dp=dp, zero=zero, fp8_param_gather=True)
            ta = float(iteration(MODEL, sy, Network(), a).iteration_s)
            tb = float(iteration(MODEL, sy, Network(), b).iteration_s)
            assert tb <= ta * (1 + 1e-12)
    assert np.isfinite(tb)


def test_each_stage_gathers_its_own_fp8_weights() -> None:
    """The traffic matrix's data-parallel weight gather of a stage saves FP8's byte on that
    stage's own GEMM weights, not the fullest stage's: an end stage of one layer gathers
    its embedding in BF16 and one layer's GEMM weights in FP8 (this was negative before, and
    the matrix dropped the edge)."""
    s = _arrays(
        tp=8,
        pp=4,
        dp=2,
        global_batch=16,
        zero=3,
        fp8_param_gather=True,
        first_stage_layers=1,
        last_stage_layers=1,
    )
    for layers, end in ((1.0, True), (15.0, False)):
        n = np.asarray(layers)
        params = float(dense_stage_params(MODEL, s, end, n))
        gemm = float(gemm_stage_params(MODEL, s, n, head=end)[0])
        gathered = float(comm.dp_weight_gather_bytes(MODEL, s, end, n))
        assert gathered == pytest.approx(2.0 * params - gemm)
        assert 0.0 < gathered < 2.0 * params
