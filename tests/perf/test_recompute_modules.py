"""Selective recompute by module (Megatron-Core `--recompute-modules`): what each module drops
from memory by hand, what it costs in time and hardware FLOPs, and its one-line errors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from railplan import Network, RailplanError, Strategy, estimate, load_model, load_system
from railplan.perf.layer_time import layer_times
from railplan.specs.arrays import from_strategies, recomputes
from railplan.workload.flops import forward_flops_per_sequence, hardware_flops, model_flops
from railplan.workload.gemms import attention_gemms
from railplan.workload.memory import layer_activation_bytes
from railplan.workload.routing import slot_factor

MOE = load_model("moe-1.3b")  # every other layer MoE, top-1, GeLU experts, no shared experts
V3 = load_model("deepseek-v3")  # MLA, 1 shared + 256 routed experts, top-8, SwiGLU
MODULES = ("core_attn", "layernorm", "moe_act", "mla_up_proj", "mlp", "moe", "shared_experts")


def _arrays(model_name: str, modules: tuple[str, ...], **kw: object) -> object:
    base: dict[str, object] = {"global_batch": 8, "micro_batch": 2, "dp": 8, "ep": 8}
    return from_strategies(
        Strategy(**(base | kw), recompute="selective", recompute_modules=modules)  # type: ignore[arg-type]
    )


def _bytes(model_name: str, modules: tuple[str, ...], **kw: object) -> float:
    model = load_model(model_name)
    return float(layer_activation_bytes(model, _arrays(model_name, modules, **kw)))  # type: ignore[arg-type]


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_each_module_drops_its_tensors_by_hand(precision: str) -> None:
    """Per token of one average layer (moe-1.3b: half the layers MoE, capacity 1, tp 1):
    layernorm drops the two norm outputs (2 + 2 bytes per hidden element in BF16; in FP8 only
    an expert layer's pre-MLP one, which its BF16 router saved: the GEMMs keep FP8 copies);
    moe_act the experts' activation output (2 bytes per expert_ffn element in BF16); mlp the
    dense layers' MLP activations; moe the expert layers' slots and routed inputs (the block
    keeps its input, the norm's BF16 output, which the BF16 router kept anyway)."""
    fp8 = precision == "fp8"
    tokens = MOE.seq * 2
    h, f, fe = MOE.hidden, MOE.ffn_, MOE.expert_ffn_
    slots = float(MOE.top_k * slot_factor(MOE, np.asarray(8)))
    base = _bytes("moe-1.3b", ("core_attn",), precision=precision)
    drops = {
        "layernorm": 0.5 * 2.0 * h if fp8 else 4.0 * h,
        "moe_act": 0.0 if fp8 else 0.5 * slots * 2.0 * fe,
        "mlp": 0.5 * (4.0 - fp8) * f,
        "moe": 0.5 * slots * ((4.0 - fp8) * fe + (2.0 - fp8) * h),
    }
    for module, per_token in drops.items():
        got = base - _bytes("moe-1.3b", ("core_attn", module), precision=precision)
        assert got == pytest.approx(tokens * per_token), module


def test_mla_up_proj_and_shared_experts_by_hand() -> None:
    """DeepSeek-V3 (tp 1): mla_up_proj drops Q, K and V (2 bytes per element of each width)
    and the latent norms' outputs (2 bytes per latent element: the norms are fused into the up
    projections it reruns, so only the latents it starts from are kept); shared_experts the
    shared expert's SwiGLU activations (gate, up, product: 6 bytes per element) on its MoE
    layers."""
    tokens = V3.seq * 2
    q, k, v, _ = V3.attention_widths
    latents = V3.q_lora_rank + V3.kv_lora_rank
    base = _bytes("deepseek-v3", ("core_attn",))
    mla = base - _bytes("deepseek-v3", ("core_attn", "mla_up_proj"))
    assert mla == pytest.approx(tokens * (2.0 * (q + k + v) + 2.0 * latents))
    shared = base - _bytes("deepseek-v3", ("core_attn", "shared_experts"))
    share = V3.moe_layers / V3.layers
    assert shared == pytest.approx(tokens * share * 6.0 * V3.shared_experts * V3.expert_ffn_)


def test_recompute_time_is_the_sum_of_the_modules_forward() -> None:
    """The recompute time of a set of separate modules is the sum of each alone (each reruns
    its own forward), and without selective recompute nothing is rerun."""
    system = load_system("dgx-h100")

    def t(modules: tuple[str, ...]) -> float:
        return float(layer_times(V3, system, _arrays("deepseek-v3", modules))["recompute"])  # type: ignore[arg-type]

    alone = {m: t((m,)) for m in MODULES}
    assert all(x > 0 for x in alone.values())
    separate = tuple(m for m in MODULES if m != "moe")  # moe holds moe_act and shared_experts
    assert t(separate) == pytest.approx(sum(alone[m] for m in separate))
    none = from_strategies(Strategy(global_batch=8, micro_batch=2, dp=8, ep=8))
    assert float(layer_times(V3, system, none)["recompute"]) == 0.0
    # moe reruns the block, which holds its activation and its shared expert
    assert alone["moe"] > alone["moe_act"] + alone["shared_experts"]


def test_hardware_flops_add_each_module_matmuls() -> None:
    """HFU counts the recomputed matmuls: the attention products (core_attn), the
    up-projections (mla_up_proj), the routed and shared experts with the router (moe), the
    dense layers' MLPs (mlp); the norms and activations are element-wise (no FLOPs)."""
    from railplan.workload.gemms import mlp_gemms

    one = np.float64(1.0)
    f = forward_flops_per_sequence(V3)
    bits = {m: 1 << i for i, m in enumerate(MODULES)}
    base = float(model_flops(V3, 1))

    def extra(m: str) -> float:
        return float(hardware_flops(V3, 1, 1, bits[m])) - base

    up = sum(float(g.flops) for g in attention_gemms(V3, one, one) if g.name in ("q_up", "kv_up"))
    expert = sum(float(g.flops) for g in mlp_gemms(V3, one, one, V3.expert_ffn_))
    dense = sum(float(g.flops) for g in mlp_gemms(V3, one, one))
    router = 2.0 * V3.seq * V3.hidden * V3.experts
    # the MTP module (deepseek-v3: one) is one more average layer, recomputed alike
    depth = (V3.layers + V3.mtp_layers) / V3.layers
    assert V3.mtp_layers == 1
    assert extra("core_attn") == pytest.approx(f["attention_products"])
    assert extra("mla_up_proj") == pytest.approx(depth * V3.layers * up)
    assert extra("mlp") == pytest.approx(depth * (V3.layers - V3.moe_layers) * dense)
    assert extra("moe") == pytest.approx(depth * V3.moe_layers * (9 * expert + router))
    assert extra("shared_experts") == pytest.approx(depth * V3.moe_layers * expert)
    assert extra("layernorm") == extra("moe_act") == 0.0


@settings(max_examples=30, deadline=None)
@given(
    st.sets(st.sampled_from(["core_attn", "layernorm", "moe_act", "mlp", "moe"]), min_size=1),
    st.sampled_from(["layernorm", "moe_act", "mlp", "moe"]),
    st.sampled_from(["bf16", "fp8"]),
    st.sampled_from(["rail-only", "rail-optimized"]),
)
def test_one_more_module_never_more_memory_never_less_time(
    modules: set[str], more: str, precision: str, arch: str
) -> None:
    """Rerunning one more module keeps no more activations and takes no less time."""

    def run(ms: set[str]) -> tuple[float, float]:
        strat = Strategy(
            dp=64,
            ep=8,
            pp=2,
            interleave=2,
            micro_batch=2,
            global_batch=512,
            recompute="selective",
            recompute_modules=tuple(ms),  # type: ignore[arg-type]
            precision=precision,  # type: ignore[arg-type]
        )
        e = estimate(MOE, "dgx-h100", strat, Network(architecture=arch))  # type: ignore[arg-type]
        return e.memory_breakdown_gib["activations"], e.iteration_s

    mem0, t0 = run(modules)
    mem1, t1 = run(modules | {more})
    assert mem1 <= mem0 * (1 + 1e-12)
    assert t1 >= t0 * (1 - 1e-12)


def test_modules_are_canonical_and_labelled() -> None:
    s = Strategy(global_batch=8, recompute="selective", recompute_modules=("moe", "core_attn"))
    assert s.recompute_modules == ("core_attn", "moe")
    assert "rc=selective[core_attn+moe]" in s.label()
    assert "rc=selective " in Strategy(global_batch=8, recompute="selective").label() + " "
    a = from_strategies(s)
    assert a.strategy().recompute_modules == ("core_attn", "moe")
    assert bool(recomputes(a, "moe")) and not bool(recomputes(a, "layernorm"))


@pytest.mark.parametrize(
    ("model", "kw", "message"),
    [
        ("moe-1.3b", {"recompute": "full", "recompute_modules": ("moe",)}, "needs recompute sel"),
        ("gpt-22b", {"recompute_modules": ("moe_act",)}, "need an MoE model"),
        ("moe-1.3b", {"recompute_modules": ("shared_experts",)}, "with shared experts"),
        ("moe-1.3b", {"recompute_modules": ("mla_up_proj",)}, "needs an MLA model"),
        ("moe-1.3b", {"recompute_modules": ("moe",), "overlap_ep": True}, "overlap_ep"),
    ],
)
def test_module_errors_are_one_line(model: str, kw: dict[str, object], message: str) -> None:
    base: dict[str, object] = {"dp": 8, "global_batch": 16, "recompute": "selective"}
    if model == "moe-1.3b":
        base["ep"] = 8
    with pytest.raises(RailplanError, match=rf"^recompute_modules: .*{message}"):
        estimate(model, "dgx-a100", Strategy(**(base | kw)))  # type: ignore[arg-type]


def test_cli_recompute_modules(cli) -> None:  # type: ignore[no-untyped-def]
    args = ("estimate", "--model", "moe-1.3b", "--gpus", "64", "--ep", "8")
    args += ("--global-batch", "128", "--recompute", "selective")
    d = cli.json(*args, "--recompute-modules", "core_attn,moe")
    assert d["strategy"]["recompute_modules"] == ["core_attn", "moe"]
    plain = cli.json(*args)
    assert plain["strategy"]["recompute_modules"] == ["core_attn"]
    assert d["memory_gib_per_gpu"] < plain["memory_gib_per_gpu"]
    bad = cli(*args, "--recompute-modules", "core_attn,attention")
    assert bad.exit_code == 2
    assert "recompute_modules" in str(bad.exception) and "core_attn" in str(bad.exception)
    assert len(str(bad.exception).splitlines()) == 1


def test_every_pair_of_modules_runs() -> None:
    """Every pair of modules is a valid DeepSeek-V3 strategy with finite results."""
    for pair in itertools.combinations(MODULES, 2):
        e = estimate(
            V3,
            "hgx-h800",
            Strategy(
                pp=16,
                dp=128,
                ep=64,
                global_batch=2048,
                recompute="selective",
                recompute_modules=pair,  # type: ignore[arg-type]
            ),
        )
        assert np.isfinite(e.iteration_s) and e.iteration_s > 0, pair


def test_the_moe_block_subsumes_its_activation_and_shared_experts() -> None:
    """Rerunning the whole MoE block reruns its activation and shared experts once: adding
    moe_act or shared_experts to moe changes neither time, FLOPs nor memory."""
    system = load_system("dgx-h100")

    def run(modules: tuple[str, ...]) -> tuple[float, float, float]:
        a = _arrays("deepseek-v3", modules)
        bits = int(a.recompute_modules)  # type: ignore[attr-defined]
        return (
            float(layer_times(V3, system, a)["recompute"]),  # type: ignore[arg-type]
            float(hardware_flops(V3, 1, 1, bits)),
            float(layer_activation_bytes(V3, a)),  # type: ignore[arg-type]
        )

    block = run(("moe",))
    assert run(("moe", "moe_act", "shared_experts")) == pytest.approx(block)
    assert run(("moe_act", "shared_experts"))[0] < block[0]


@pytest.mark.parametrize(("precision", "per_element"), [("bf16", 4.0), ("fp8", 3.0)])
def test_mla_keeps_its_latents(precision: str, per_element: float) -> None:
    """DeepSeek-V3 keeps its query latent (1,536 per token) and key-value latent (512): each
    latent norm's input (2 bytes) and output, the up-projection's input (2 bytes, 1 in FP8).
    Without a query latent (q_lora_rank 0: the query projected from the hidden state, the
    same attention widths) the layer keeps 1,536 × per_element bytes less per token."""
    tokens = V3.seq * 2
    a = _arrays("deepseek-v3", ("core_attn",), precision=precision)
    no_q_latent = V3.model_copy(update={"q_lora_rank": 0})
    assert no_q_latent.attention_widths == V3.attention_widths
    diff = float(layer_activation_bytes(V3, a)) - float(  # type: ignore[arg-type]
        layer_activation_bytes(no_q_latent, a)  # type: ignore[arg-type]
    )
    assert diff == pytest.approx(tokens * per_element * 1536)
