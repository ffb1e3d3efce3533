"""What a serving engine cannot do, held as properties of the model (a review of the serving
side found each of these broken): every weight read, no fraction of a sequence or of a step,
no engine faster than its own HBM, and no bigger NVLink domain slower than a smaller one."""

from __future__ import annotations

import pytest

from railplan import load_model
from railplan.inference.engine import WEIGHT_BYTES, Deployment, StepLoad, step_time_s
from railplan.inference.estimate import infer
from railplan.inference.serving import MAX_NUM_TOKENS, serve


def test_every_weight_of_deepseek_v3_is_held_and_read() -> None:
    # the shared expert (2.55 B parameters over 58 MoE layers) and the routers (0.11 B) were
    # missing from the weights and from the GEMMs
    m = load_model("deepseek-v3")
    d = Deployment(m, "hgx-h800", None, gpus=1, tp=1, ep=1, precision="bf16")
    assert d.weight_bytes_per_gpu / WEIGHT_BYTES["bf16"] == pytest.approx(m.params(), rel=1e-6)
    # one decode token streams the shared expert beside its 8 routed ones: dropping the shared
    # expert from the model makes the step faster by about its weights' HBM time
    alone = StepLoad(decode=1.0, context_tokens=1024.0)
    without = m.model_copy(update={"shared_experts": 0})
    full = step_time_s(Deployment(m, "hgx-h800", None, gpus=8, tp=1, ep=8), alone)[1]["gemm"]
    less = step_time_s(Deployment(without, "hgx-h800", None, gpus=8, tp=1, ep=8), alone)[1]["gemm"]
    assert full > less


def test_a_token_reads_exactly_its_top_k_experts() -> None:
    # one token picks top_k distinct experts of 8: top_k/8 of the expert weights are streamed
    # (not 1 − (7/8)^top_k, picks with replacement). At one token the expert GEMMs stream
    # weights, so the differences between top_k 2, 4 and 8 are (0.5 − 0.25)/(1 − 0.25) = 1/3
    # (0.427 with replacement)
    m = load_model("mixtral-8x7b")
    one = StepLoad(decode=1.0, context_tokens=1.0)

    def gemm(top_k: int) -> float:
        variant = m.model_copy(update={"top_k": top_k})
        d = Deployment(variant, "dgx-h100", None, gpus=1, tp=1, precision="bf16")
        return step_time_s(d, one)[1]["gemm"]

    g2, g4, g8 = gemm(2), gemm(4), gemm(8)
    assert (g4 - g2) / (g8 - g2) == pytest.approx(1 / 3, rel=0.02)


@pytest.mark.parametrize("drafts", [1, 3, 16])
def test_drafts_never_help_a_sequence_with_one_token_to_decode(drafts: int) -> None:
    # two output tokens: the prompt's step makes the first, one decode step the second, and
    # no draft can make it sooner (TPOT was step / E, below one step)
    m = load_model("deepseek-v3")
    base = Deployment(m, "hgx-h800", None, gpus=32, tp=1, ep=32)
    spec = Deployment(m, "hgx-h800", None, gpus=32, tp=1, ep=32, speculative_tokens=drafts)
    plain, drafted = infer(base, 8, 1024, 2), infer(spec, 8, 1024, 2)
    assert drafted.batch == 8  # 4 prompts a step: within the 8,192-token step budget
    # the step, timed apart from infer: 8 running sequences, half of them new each step (a
    # sequence lives two steps: its prompt's and one decode step)
    load = StepLoad(
        decode=8.0, context_tokens=8 * 1025.5, prefill_tokens=4 * 1024.0, prefill_seqs=4.0
    )
    step = step_time_s(spec, load)[0]
    assert drafted.tpot_s == pytest.approx(step)  # one whole step for the one decoded token
    assert drafted.tokens_per_s_per_gpu <= plain.tokens_per_s_per_gpu * (1 + 1e-9)


def test_a_lone_sequence_crosses_every_pipeline_stage_in_turn() -> None:
    # one sequence on 8 stages: its token reads the whole KV cache (8 stages in turn), so TPOT
    # is at least that read at HBM speed, as on one GPU (it was an eighth of it)
    # (its served context, 131,072 tokens, lifted: this is the engine's physics)
    m = load_model("llama-3.1-70b").model_copy(update={"context_tokens": None})
    d = Deployment(m, "dgx-h100", None, gpus=8, pp=8, precision="fp8")
    r = infer(d, 1, 500_000, 500_000)
    gpu = d.system.gpu
    kv_bytes = 750_000 * d.kv_bytes_per_token * d.pp  # the whole model's KV of one sequence
    hbm = gpu.memory_tbps * 1e12 * gpu.memory_efficiency
    assert r.tpot_s >= kv_bytes / hbm


def test_two_batch_overlap_does_not_split_one_sequence() -> None:
    m = load_model("deepseek-v3")
    load = StepLoad(decode=1.0, context_tokens=4096.0)
    args = {"gpus": 32, "tp": 1, "ep": 32}
    one = step_time_s(Deployment(m, "hgx-h800", None, **args), load)[0]  # type: ignore[arg-type]
    tbo = step_time_s(
        Deployment(m, "hgx-h800", None, two_batch_overlap=True, **args),  # type: ignore[arg-type]
        load,
    )[0]
    assert tbo == pytest.approx(one)


def test_a_larger_nvlink_domain_is_never_slower() -> None:
    # 64 ranks of tensor parallelism in one NVL72 against eight NVL8 domains: NCCL takes
    # NVLink SHARP in the rack (its default), not a 64-rank ring (which was 35 % slower)
    m = load_model("llama-3.1-405b")
    rack = infer(Deployment(m, "gb200-nvl72", None, gpus=64, tp=64), 1, 2048, 256)
    from railplan.specs import load_system

    nvl8 = load_system("gb200-nvl72").model_copy(update={"hb_domain": 8})
    servers = infer(Deployment(m, nvl8, None, gpus=64, tp=64), 1, 2048, 256)
    assert rack.tpot_s < servers.tpot_s
    # the ideal network (one HB domain) bounds the real ones on H100 too
    ideal = infer(Deployment(m, "dgx-h100", "ideal", gpus=32, tp=32), 1, 2048, 256)
    rail = infer(Deployment(m, "dgx-h100", "rail-optimized", gpus=32, tp=32), 1, 2048, 256)
    assert ideal.tpot_s <= rail.tpot_s


def test_long_prompts_are_served_beside_the_running_batch() -> None:
    # 16k prompts do not fit a step budget of 8,192 beside running sequences: the engine served
    # one sequence at a time (10 tokens/s per GPU against infer's 40); the budget now makes
    # room for a prompt beside the full batch
    m = load_model("llama-3.1-70b")
    d = Deployment(m, "dgx-h100", None, gpus=8, tp=8)
    steady = infer(d, None, 16384, 256)
    run = serve(d, 4.0, 16384, 256, requests=1000)
    assert run.step_budget_tokens > MAX_NUM_TOKENS
    assert run.tokens_per_s_per_gpu >= 0.8 * steady.tokens_per_s_per_gpu
