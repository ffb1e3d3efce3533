"""Step times: monotone in batch, context and bandwidth; the network's effect on serving."""

from __future__ import annotations

from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from railplan.errors import RailplanError
from railplan.inference.engine import Deployment, StepLoad, step_time_s
from railplan.inference.estimate import infer
from railplan.inference.search import kv_transfer_s
from railplan.specs import Network
from railplan.specs.catalog import load_model, load_system


@cache
def dep(tp: int = 2, network: str = "rail-optimized", gpus: int = 8, k: int = 8) -> Deployment:
    sy = load_system("dgx-h100")
    sy = sy.model_copy(update={"hb_domain": k})
    return Deployment(load_model("llama-2-70b"), sy, Network(architecture=network), gpus, tp)


def decode_s(d: Deployment, batch: int, context: int) -> float:
    return step_time_s(d, StepLoad(decode=batch, context_tokens=batch * context))[0]


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 2048),
    st.integers(1, 2048),
    st.integers(1, 8192),
    st.integers(0, 8192),
)
def test_decode_time_monotone_in_batch_and_context(b: int, db: int, c: int, dc: int) -> None:
    d = dep()
    base = decode_s(d, b, c)
    assert decode_s(d, b + db, c) >= base
    assert decode_s(d, b, c + dc) >= base


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 1024), st.floats(1.0, 4.0))
def test_decode_time_monotone_in_hbm_bandwidth(b: int, faster: float) -> None:
    d = dep()
    gpu = d.system.gpu
    quick_gpu = gpu.model_copy(update={"memory_tbps": gpu.memory_tbps * faster})
    quick = Deployment(d.model, d.system.model_copy(update={"gpu": quick_gpu}), d.network, 8, 2)
    assert decode_s(quick, b, 512) <= decode_s(d, b, 512)


def test_small_batch_decode_is_a_weight_stream() -> None:
    # batch 1: reading the weights at HBM speed bounds the step from below
    d = dep()
    gpu = d.system.gpu
    floor = d.weight_bytes_per_gpu / (gpu.memory_tbps * 1e12)
    assert floor < decode_s(d, 1, 256) < 3 * floor


def test_infer_reports_fit_and_tokens() -> None:
    r = infer(dep(), None, 222, 219)
    assert r.fits and r.batch == r.max_batch
    assert r.kv_cache_gib_per_gpu <= r.kv_capacity_gib_per_gpu
    assert r.tokens_per_s == pytest.approx(r.tokens_per_s_per_gpu * 8)
    too_big = infer(dep(), r.max_batch + 1, 222, 219)
    assert not too_big.fits


def test_tp_across_domains_is_slower_on_the_nic() -> None:
    inside = dep(tp=8, gpus=8, k=8)
    spanning = dep(tp=8, gpus=8, k=4)  # the tp group spans two 4-GPU domains
    # large all-reduces (1024 tokens · 16 KiB) are bandwidth-bound: the NIC phase costs more
    assert decode_s(spanning, 1024, 512) > decode_s(inside, 1024, 512)


def test_kv_transfer_pays_forwarding_on_rail_only_only_across_rails() -> None:
    # tp 4 on 8-GPU domains: prefill and decode groups start at different local ranks
    ro, rl = dep(4, "rail-optimized", 16), dep(4, "rail-only", 16)
    assert kv_transfer_s(rl, 4, 1024) > kv_transfer_s(ro, 4, 1024)
    # tp 8 fills a domain: the peer sits on the same rail, no forwarding
    ro8, rl8 = dep(8, "rail-optimized", 16), dep(8, "rail-only", 16)
    assert kv_transfer_s(rl8, 4, 1024) == pytest.approx(kv_transfer_s(ro8, 4, 1024))
    # inside one HB domain the transfer uses NVLink
    assert kv_transfer_s(dep(4, "rail-only", 8), 4, 1024) < kv_transfer_s(ro, 4, 1024)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"precision": "int4"}, "precision"),
        ({"precision": "fp4"}, "precision"),  # H100 has no fp4 tensor cores
        ({"tp": 3}, "gpus"),
        ({"ep": 2}, "ep"),
        ({"tp": 0}, "tp"),
    ],
)
def test_bad_deployments_name_the_field(kwargs: dict[str, object], field: str) -> None:
    args: dict[str, object] = {"gpus": 8, "tp": 1} | kwargs
    with pytest.raises(RailplanError) as err:
        Deployment(
            load_model("llama-2-70b"),
            load_system("dgx-h100"),
            Network(),
            **args,  # type: ignore[arg-type]
        )
    assert err.value.field == field


def test_moe_wide_ep_pays_forwarding_on_rail_only() -> None:
    m = load_model("moe-1.3b")
    sy = load_system("dgx-h100")
    load = StepLoad(decode=256, context_tokens=256 * 1024)

    def ep_comm(net: str, ep: int) -> float:
        d = Deployment(m, sy, Network(architecture=net), 16, 1, 1, ep, "bf16")
        return step_time_s(d, load)[1]["ep_comm"]

    # ep = 8 inside one DGX: the same on both networks; ep = 16 spans two: rail-only forwards
    assert ep_comm("rail-only", 8) == pytest.approx(ep_comm("rail-optimized", 8))
    assert ep_comm("rail-only", 16) > ep_comm("rail-optimized", 16) > 0


def test_batch_grid() -> None:
    from railplan.inference.search import batches

    assert batches(16).tolist() == [1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 13, 16]
    assert batches(12).tolist()[-1] == 12
    assert batches(0).size == 0


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 4096), st.integers(0, 8192), st.integers(0, 16), st.integers(1, 4096))
def test_step_never_beats_the_hardware_bounds(batch: int, ctx: int, new: int, prompt: int) -> None:
    # no step is faster than streaming the weights at peak HBM bandwidth, nor than its GEMM
    # FLOPs (2 per weight per token) at the precision's dense peak
    d = dep()
    load = StepLoad(batch, batch * ctx, new * prompt, new)
    if batch + new == 0:
        return
    gpu = d.system.gpu
    layer_weights = d.weight_bytes_per_gpu  # fp8: one byte per weight
    tokens = batch + new * prompt
    floor = max(
        0.9 * layer_weights / (gpu.memory_tbps * 1e12),
        2.0 * 0.9 * layer_weights * tokens / (d.peak_tflops * 1e12),
    )
    assert step_time_s(d, load)[0] >= floor


def _with_sustained(d: Deployment, fraction: float) -> Deployment:
    gpu = d.system.gpu.model_copy(update={"sustained_tensor_fraction": fraction})
    system = d.system.model_copy(update={"gpu": gpu})
    return Deployment(d.model, system, d.network, d.gpus, d.tp, d.pp, d.ep, d.precision)


def test_sustained_tensor_fraction_slows_compute_not_the_weight_stream() -> None:
    # the training model's sustained fraction applies to the inference GEMMs too: a
    # compute-bound prefill step slows by ~1/fraction, a batch-1 decode (a weight stream) barely
    d = dep()
    full = _with_sustained(d, 1.0)
    half = _with_sustained(d, 0.5)
    prefill = StepLoad(prefill_tokens=8192, prefill_seqs=4)
    parts_full, parts_half = step_time_s(full, prefill)[1], step_time_s(half, prefill)[1]
    assert parts_half["gemm"] == pytest.approx(2.0 * parts_full["gemm"], rel=0.01)
    assert decode_s(half, 1, 256) < 1.05 * decode_s(full, 1, 256)
    assert d.system.gpu.sustained_tensor_fraction < 1.0  # h100-sxm carries the fitted 0.712


def test_moe_dispatch_bytes_and_all_to_all_by_hand() -> None:
    """DeepSeek-V3 on 16 H800 (two servers), ep 16, fp8: each token's 8 copies, 7,168 FP8
    values plus 56 fp32 scales dispatched, 7,168 bf16 values combined, 1/16 of them to each
    rank; the direct all-to-all then moves 8 ranks' shares over the NIC and 7 over NVLink,
    each phase with its link's latency (rail-optimized), the larger phase setting the time."""
    from railplan.inference.engine import ep_all_to_all_s, ep_pair_bytes

    model, system = load_model("deepseek-v3"), load_system("hgx-h800")
    d = Deployment(model, system, Network(), 16, 1, 1, 16, "fp8")
    pairs = ep_pair_bytes(d, 128.0)
    assert float(pairs["dispatch"]) == pytest.approx(128 * 8 * (7168 + 56 * 4) / 16)
    assert float(pairs["combine"]) == pytest.approx(128 * 8 * 7168 * 2 / 16)
    nic = 400e9 / 8 * system.nic_efficiency
    hb = 1.6e12 / 8 * system.hb_efficiency
    for name, pair in pairs.items():
        want = max(
            8 * float(pair) / nic + system.nic_latency_us * 1e-6,
            7 * float(pair) / hb + system.hb_latency_us * 1e-6,
        )
        assert float(ep_all_to_all_s(d, 128.0)[name]) == pytest.approx(want)
    bf16 = Deployment(model, system, Network(), 16, 1, 1, 16, "bf16")
    assert float(ep_pair_bytes(bf16, 128.0)["dispatch"]) == pytest.approx(float(pairs["combine"]))
    only = Deployment(model, system, Network(architecture="rail-only"), 16, 1, 1, 16, "fp8")
    assert float(ep_all_to_all_s(only, 128.0)["dispatch"]) > float(
        ep_all_to_all_s(d, 128.0)["dispatch"]
    )


def test_prefill_runs_deepeps_normal_kernels() -> None:
    """Prompts go through DeepEP's normal kernels: each token once over its rail to each other
    server holding one of its experts, then once to each GPU holding one (DeepSeek-V3 at ep 16
    on two HGX H800: max(R·T/C_S, n·7/8·T/C_F) + both latencies), the same on rail-only
    (rail-aligned); the running sequences' tokens through the low-latency kernels, which
    rail-only forwards; a step carrying both pays both, as two batches."""
    from railplan.inference.engine import ep_all_to_all_s, ep_normal_all_to_all_s
    from railplan.workload.routing import touched_domains

    model, system = load_model("deepseek-v3"), load_system("hgx-h800")
    d = Deployment(model, system, Network(), 16, 1, 1, 16, "fp8")
    only = Deployment(model, system, Network(architecture="rail-only"), 16, 1, 1, 16, "fp8")
    nic = 400e9 / 8 * system.nic_efficiency
    hb = 1.6e12 / 8 * system.hb_efficiency
    lat = (system.nic_latency_us + system.hb_latency_us) * 1e-6
    remote = touched_domains(256, 8, 8, 4, 2) / 2
    gpus = touched_domains(256, 8, 8, 4, 16)
    for name, per_value in (("dispatch", 1 + 4 / 128), ("combine", 2.0)):
        t = 4096 * 7168 * per_value
        want = max(remote * t / nic, gpus * 7 / 8 * t / hb) + lat
        assert float(ep_normal_all_to_all_s(d, 4096.0)[name]) == pytest.approx(want)
        assert float(ep_normal_all_to_all_s(only, 4096.0)[name]) == pytest.approx(want)
    layers = model.moe_layers
    prefill = StepLoad(prefill_tokens=4096, prefill_seqs=2)
    normal = ep_normal_all_to_all_s(d, 4096.0)
    got = step_time_s(d, prefill)[1]["ep_comm"]
    assert got == pytest.approx(layers * float(normal["dispatch"] + normal["combine"]))
    assert step_time_s(only, prefill)[1]["ep_comm"] == pytest.approx(got)
    decode = StepLoad(decode=128, context_tokens=128 * 512)
    ll = ep_all_to_all_s(d, 128.0)
    got = step_time_s(d, decode)[1]["ep_comm"]
    assert got == pytest.approx(layers * float(ll["dispatch"] + ll["combine"]))
    assert step_time_s(only, decode)[1]["ep_comm"] > got
    both = StepLoad(decode=128, context_tokens=128 * 512, prefill_tokens=4096, prefill_seqs=2)
    want = step_time_s(d, prefill)[1]["ep_comm"] + step_time_s(d, decode)[1]["ep_comm"]
    assert step_time_s(d, both)[1]["ep_comm"] == pytest.approx(want)
    # a steady-state step carries a share of a prompt: the prompt's all-to-all runs on the
    # steps where any of the 16 ranks, stepping together, carries one (each in 1/8 of the
    # steps), at a whole prompt's bytes (its latencies not paid on every step)
    whole = step_time_s(d, StepLoad(prefill_tokens=2048, prefill_seqs=1))[1]["ep_comm"]
    part = StepLoad(
        decode=128, context_tokens=128 * 512, prefill_tokens=2048 / 8, prefill_seqs=1 / 8
    )
    want = step_time_s(d, decode)[1]["ep_comm"] + whole * (1 - (7 / 8) ** 16)
    assert step_time_s(d, part)[1]["ep_comm"] == pytest.approx(want)


def test_mla_models_serve() -> None:
    """DeepSeek-V3 (MLA) is served: its attention projections are MLA's down- and
    up-projections, its prefill attention spans 192-wide Q·K and 128-wide P·V heads, and
    decode attends on the cached latent, 2·(2·512 + 64) FLOPs per head and cached token."""
    from railplan.inference.engine import decode_head_flops

    model, system = load_model("deepseek-v3"), load_system("hgx-h800")
    assert decode_head_flops(model) == 2 * (2 * 512 + 64)
    assert decode_head_flops(load_model("llama-2-70b")) == 4 * 128
    d = Deployment(model, system, Network(), 16, 1, 1, 16, "fp8")
    r = infer(d, None, 1024, 256)
    assert r.fits and r.tokens_per_s_per_gpu > 0 and r.ttft_s > r.tpot_s > 0
    one = StepLoad(prefill_tokens=1024, prefill_seqs=1)
    two = StepLoad(prefill_tokens=2048, prefill_seqs=1)
    # a prompt twice as long: its causal attention takes at least twice as long
    assert step_time_s(d, two)[1]["attention"] > 2 * step_time_s(d, one)[1]["attention"]


def test_deepep_rows_are_the_published_table() -> None:
    from railplan.inference.validation import deepep_rows

    rows = deepep_rows()
    assert [(r["ep"], r["pass"]) for r in rows[:2]] == [(8, "dispatch"), (8, "combine")]
    assert len(rows) == 12 and rows[-1]["measured_s"] == pytest.approx(360e-6)
    by = {(r["ep"], r["pass"]): r["predicted_s"] for r in rows}
    for name in ("dispatch", "combine"):  # more ranks, more bytes over the NIC
        times = [by[(ep, name)] for ep in (8, 16, 32, 64, 128, 256)]
        assert times == sorted(times)
