"""MoE serving's two-batch overlap (DeepSeek's dual-batch overlap): bounds, SM split, errors."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from railplan.errors import RailplanError
from railplan.inference.engine import (
    DEEPEP_NORMAL_SMS,
    Deployment,
    StepLoad,
    expert_stage_s,
    experts_s,
    logits_s,
    stage_parts,
    stage_time_s,
    step_time_s,
)
from railplan.inference.estimate import first_token_s, infer
from railplan.inference.search import candidates
from railplan.specs import Network
from railplan.specs.catalog import load_model, load_system


@cache
def dep(tbo: bool, network: str = "rail-optimized", nic_gbps: float = 400.0) -> Deployment:
    sy = load_system("hgx-h800")
    sy = sy.model_copy(update={"nic_gbps": nic_gbps})
    return Deployment(
        load_model("deepseek-v3"), sy, Network(architecture=network), 32, 1, 1, 32, "fp8", tbo
    )


def halves(load: StepLoad) -> StepLoad:
    return load.scaled(0.5)


def moe_layers() -> float:
    m = load_model("deepseek-v3")
    return float(m.moe_layers)


DECODE = StepLoad(decode=128, context_tokens=128 * 4096)
PREFILL = StepLoad(prefill_tokens=16384, prefill_seqs=4)


@pytest.mark.parametrize("load", [DECODE, PREFILL], ids=["decode", "prefill"])
def test_step_by_hand(load: StepLoad) -> None:
    # every layer twice at half the load, the vocabulary GEMM once, and per MoE layer the
    # longer of the compute (plus, in prefill, the 24 of 132 SMs the normal kernels hold while
    # they run) and both micro-batches' all-to-alls
    d = dep(True)
    half = stage_parts(d, halves(load))
    total, parts = step_time_s(d, load)
    for k in ("gemm", "attention", "elementwise", "tp_comm"):
        assert parts[k] == pytest.approx(2 * float(half.parts[k]))
    assert parts["logits"] == pytest.approx(float(logits_s(d, load)))
    compute = 2 * float(half.moe_layer_s)
    ll = 2 * float(half.low_latency["dispatch"] + half.low_latency["combine"])
    normal = 2 * float(half.normal["dispatch"] + half.normal["combine"])
    if load is DECODE:
        assert normal == 0 and ll > 0
        layer = max(compute, ll)
        last = float(half.low_latency["combine"])
    else:
        assert ll == 0 and normal > 0
        layer = max(compute + DEEPEP_NORMAL_SMS / 132 * normal, normal)
        last = float(half.normal["combine"])
    assert parts["ep_comm"] == pytest.approx(moe_layers() * (layer - compute) + last)
    assert total == pytest.approx(sum(parts.values()))


@settings(max_examples=25, deadline=None)
@given(
    st.integers(1, 512),
    st.integers(0, 8192),
    st.sampled_from([0.0, 1.0, 2.0, 4.0]),  # whole prompts (shares are mixtures, below)
    st.sampled_from([100.0, 200.0, 400.0, 800.0]),
)
def test_overlap_never_beats_its_bounds(batch: int, ctx: int, prompts: float, nic: float) -> None:
    # never faster than the compute of both micro-batches alone, nor than the all-to-alls
    # alone; never slower than running the two micro-batches without any overlap
    d = dep(True, nic_gbps=nic)
    load = StepLoad(batch, batch * ctx, prompts * 2048, prompts)
    total, parts = step_time_s(d, load)
    if batch + prompts < 2:  # a lone sequence is not split: the step runs as one batch
        assert total == pytest.approx(step_time_s(dep(False, nic_gbps=nic), load)[0])
        return
    half = stage_parts(d, halves(load))
    ep = (
        2
        * moe_layers()
        * float(
            sum(half.low_latency.values(), np.zeros(())) + sum(half.normal.values(), np.zeros(()))
        )
    )
    # the layers twice at half the load, the vocabulary GEMM once on the whole batch
    twice = 2 * sum(float(v) for k, v in half.parts.items() if k != "logits")
    serial = twice + float(logits_s(d, load))
    compute = serial - 2 * float(half.parts["ep_comm"])
    assert total >= compute * (1 - 1e-12)
    assert total >= ep * (1 - 1e-12)
    assert parts["ep_comm"] >= 0
    # the SMs the prompts' kernels hold cost at most 24/132 of their time, which the serial
    # run spends waiting anyway; only the last combine is exposed beyond that
    last = float(half.low_latency["combine"] + half.normal["combine"])
    assert total <= serial + last + 1e-12


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 512), st.sampled_from(["rail-optimized", "rail-only"]))
def test_overlap_is_monotone_in_nic_bandwidth(batch: int, network: str) -> None:
    load = StepLoad(batch, batch * 4096, 2048.0, 1.0)
    slow = step_time_s(dep(True, network, 200.0), load)[0]
    fast = step_time_s(dep(True, network, 400.0), load)[0]
    assert fast <= slow


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 1024), st.sampled_from([0.0, 0.1, 1.0, 3.0]))
def test_rail_only_never_serves_faster(batch: int, prompts: float) -> None:
    # its low-latency all-to-alls are forwarded, its prompts' ones the same as rail-optimized
    load = StepLoad(batch, batch * 2048, prompts * 1024, prompts)
    only = step_time_s(dep(True, "rail-only"), load)[0]
    assert only >= step_time_s(dep(True, "rail-optimized"), load)[0] * (1 - 1e-12)


def test_overlap_hides_most_of_the_decode_all_to_all_and_rail_only_cost() -> None:
    # DeepSeek's decode shape (128 requests per GPU, 4K context): without the overlap the
    # all-to-all is exposed and rail-only pays its forwarding; with it both vanish
    loads = {}
    for tbo in (False, True):
        for net in ("rail-optimized", "rail-only"):
            loads[tbo, net] = step_time_s(dep(tbo, net), DECODE)
    assert loads[False, "rail-only"][0] > loads[False, "rail-optimized"][0]
    assert (
        loads[True, "rail-optimized"][1]["ep_comm"]
        < 0.05 * loads[False, "rail-optimized"][1]["ep_comm"]
    )
    assert loads[True, "rail-only"][0] < loads[False, "rail-optimized"][0]


def test_small_batches_lose_to_the_second_weight_stream() -> None:
    # a micro-batch of one sequence reads the same weights as a batch of two: at batch 2 the
    # overlap streams the weights twice and hides little, so it is slower
    load = StepLoad(decode=2, context_tokens=2 * 1024)
    assert step_time_s(dep(True), load)[0] > step_time_s(dep(False), load)[0]


def test_needs_expert_parallelism(cli) -> None:  # type: ignore[no-untyped-def]
    m, sy = load_model("llama-2-70b"), load_system("dgx-h100")
    with pytest.raises(RailplanError) as e:
        Deployment(m, sy, Network(), 8, 2, two_batch_overlap=True)
    assert e.value.field == "two_batch_overlap"
    r = cli("infer", "--two-batch-overlap")
    assert r.exit_code == 2
    assert str(r.exception).startswith("two_batch_overlap:")
    assert "\n" not in str(r.exception)


def test_infer_and_the_search_carry_the_choice() -> None:
    r = infer(dep(True), 64, 2048, 256).to_dict()
    assert r["two_batch_overlap"] is True
    cs = candidates(
        load_model("deepseek-v3"), load_system("hgx-h800"), Network(), 32, "fp8", 2048, 256
    )
    by = {(c.ep, c.two_batch_overlap) for c in cs}
    assert (32, True) in by and (32, False) in by
    assert not any(c.two_batch_overlap for c in cs if c.ep == 1)


@pytest.mark.parametrize("share", [0.1, 0.25, 0.5, 1.0])
def test_a_share_of_a_prompt_runs_that_share_of_its_kernel(share: float) -> None:
    # a step carrying a fraction of a prompt (steady state, pp micro-batches, a two-batch
    # overlap's half) runs the whole prompt's causal kernel on that fraction of the steps
    d = dep(False)
    whole = float(stage_parts(d, StepLoad(prefill_tokens=8192, prefill_seqs=1)).parts["attention"])
    part = stage_parts(d, StepLoad(prefill_tokens=8192 * share, prefill_seqs=share))
    assert float(part.parts["attention"]) == pytest.approx(share * whole)


def test_the_overlap_keeps_a_single_prompts_attention_whole() -> None:
    load = StepLoad(prefill_tokens=32768, prefill_seqs=1)
    plain = step_time_s(dep(False), load)[1]["attention"]
    assert step_time_s(dep(True), load)[1]["attention"] == pytest.approx(plain, rel=1e-6)


@pytest.mark.parametrize("tbo", [False, True])
@pytest.mark.parametrize("share", [0.05, 0.5, 0.9])
def test_a_share_of_a_prompt_is_a_mixture_of_steps(tbo: bool, share: float) -> None:
    # each of the 32 ep ranks carries the whole prompt in `share` of the steps, none in the
    # others, independently; the ranks step together, so 1 − (1 − share)^32 of the steps last
    # as long as one carrying it, the rest as one carrying none: every component is that
    # mixture, but the experts of the long steps see the ranks' mean load (the mixture of the
    # two loads' expert GEMMs at `share`), not the prompt rank's
    d = dep(tbo)
    mixed = step_time_s(d, StepLoad(64, 64 * 2048, share * 2048, share))[1]
    whole_load = StepLoad(64, 64 * 2048, 2048, 1.0)
    whole = step_time_s(d, whole_load)[1]
    none = step_time_s(d, StepLoad(64, 64 * 2048))[1]
    ours, others = expert_stage_s(d, 64 + 2048, 65), expert_stage_s(d, 64, 64)
    assert float(experts_s(d, whole_load)) == pytest.approx(float(ours))
    slow = 1 - (1 - share) ** 32
    carrying = share / slow  # the ranks carrying the prompt, in a step where one does
    for k, v in mixed.items():
        long = float(whole[k])
        if k == "gemm":
            long += float((1 - carrying) * (others - ours))
        assert float(v) == pytest.approx(slow * long + (1 - slow) * float(none[k]))
    # one rank's own pipeline stage: the plain mixture
    mixed = stage_time_s(d, StepLoad(64, 64 * 2048, share * 2048, share))
    whole = stage_time_s(d, whole_load)
    none = stage_time_s(d, StepLoad(64, 64 * 2048))
    for k, v in mixed.items():
        assert float(v) == pytest.approx(share * float(whole[k]) + (1 - share) * float(none[k]))
    # a dense model's (or one rank's) steps: the plain mixture
    dense = Deployment(load_model("llama-3.1-70b"), load_system("dgx-h100"), Network(), 8, 8)
    mixed = stage_time_s(dense, StepLoad(64, 64 * 2048, share * 2048, share))
    whole = stage_time_s(dense, StepLoad(64, 64 * 2048, 2048, 1.0))
    none = stage_time_s(dense, StepLoad(64, 64 * 2048))
    for k, v in mixed.items():
        assert float(v) == pytest.approx(share * float(whole[k]) + (1 - share) * float(none[k]))


def test_array_loads_are_their_scalar_loads() -> None:
    # shares below, at and above one prompt in one array, as the search evaluates them
    shares = np.array([0.0, 0.3, 1.0, 1.7, 2.5])
    load = StepLoad(np.full(5, 48.0), np.full(5, 48 * 2048.0), shares * 2048, shares)
    for tbo in (False, True):
        arr = stage_time_s(dep(tbo), load)
        for i, n in enumerate(shares):
            one = stage_time_s(dep(tbo), StepLoad(48.0, 48 * 2048.0, n * 2048, n))
            for k, v in one.items():
                assert float(arr[k][i]) == pytest.approx(float(v), rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("pp", [2, 4, 8])
def test_a_lone_prompt_crosses_every_stage(pp: int) -> None:
    # pipelining does not shorten one prompt: it still runs through all its layers
    m, sy = load_model("llama-3-405b"), load_system("gb200-nvl72")
    alone = first_token_s(Deployment(m, sy, Network(), 8, 1, 1), 2048)
    piped = first_token_s(Deployment(m, sy, Network(), 8, 1, pp), 2048)
    assert alone <= piped < 1.1 * alone


def test_the_simulation_fills_an_empty_pipeline() -> None:
    # a request reaching an idle engine waits for its prompt to cross every stage, as alone
    from railplan.inference.serving import step_fn

    m, sy = load_model("llama-3-405b"), load_system("gb200-nvl72")
    for pp in (1, 4):
        d = Deployment(m, sy, Network(), 8, 1, pp)
        step = step_fn(d)(StepLoad(prefill_tokens=2048, prefill_seqs=1))
        assert step == pytest.approx(first_token_s(d, 2048))


def test_moe_deployments_divide_the_gpus() -> None:
    # 72 GPUs (an NVL72 rack): every expert-parallel size tried divides them, so the search
    # finds configurations instead of failing on ep = 16 (72 is no multiple of 16)
    from railplan.inference.search import deployments
    from railplan.specs import Network, load_model, load_system

    deps = deployments(load_model("deepseek-v3"), load_system("gb200-nvl72"), Network(), 72, "fp8")
    assert deps and all(72 % (d.tp * d.pp * d.ep) == 0 for d in deps)
    assert {d.ep for d in deps} >= {1, 2, 4, 8}
