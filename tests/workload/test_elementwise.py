"""workload/elementwise.py on hand-computed bytes: the layer's element-wise kernels with fused
and unfused attention, and the MLP activation (GeLU vs SwiGLU)."""

from __future__ import annotations

import numpy as np
import pytest

from railplan.specs import Strategy, load_system
from railplan.specs.arrays import from_strategies
from railplan.specs.catalog import load_model
from railplan.workload import elementwise, routing
from tests.kernel_fixtures import MODEL


def test_elementwise_bytes_by_hand() -> None:
    """tp 1, micro-batch 1, flash: forward 22·sbh + activation (4·s·4h) + permute 4·sbh."""
    s = from_strategies(Strategy(global_batch=1))
    sbh = MODEL.seq * MODEL.hidden
    got = elementwise.layer_bytes(MODEL, s)
    assert float(got["forward"]) == pytest.approx(22 * sbh + 4 * 4 * sbh + 4 * sbh)
    assert float(got["scores_forward"]) == 0.0
    unfused = from_strategies(Strategy(global_batch=1, attention="unfused"))
    scores = elementwise.layer_bytes(MODEL, unfused)["scores_forward"]
    assert float(scores) == pytest.approx(9 * MODEL.heads * MODEL.seq**2)


def test_activation_bytes_gelu_and_swiglu() -> None:
    """GeLU reads and writes 2 B per value forward (4 B), SwiGLU reads two and writes one
    (6 B); backward 6 B and 10 B."""
    n = np.asarray(1000.0)
    gelu = elementwise.activation_function_bytes(MODEL, n)
    assert (float(gelu["forward"]), float(gelu["backward"])) == (4000.0, 6000.0)
    swiglu = MODEL.model_copy(update={"gated_mlp": True})
    got = elementwise.activation_function_bytes(swiglu, n)
    assert (float(got["forward"]), float(got["backward"])) == (6000.0, 10000.0)


def test_layer_bytes_split_by_tp() -> None:
    """With sequence parallelism the replicated kernels (LN, dropout-add) split over tp: at tp 4
    the forward bytes are a quarter of tp 1's (activation and permute split too)."""
    one_ = elementwise.layer_bytes(MODEL, from_strategies(Strategy(global_batch=1)))
    four = elementwise.layer_bytes(
        MODEL, from_strategies(Strategy(global_batch=1, tp=4, sequence_parallel=True))
    )
    assert float(four["forward"]) == pytest.approx(float(one_["forward"]) / 4)


def test_layer_bytes_without_dropout() -> None:
    """A model trained without dropout moves no masks: forward 20·sbh instead of 22, backward
    24·sbh instead of 34 (the two dropout passes gone), and unfused scores 4 bytes forward, 6
    backward per element (no attention-dropout kernel)."""
    sbh = MODEL.seq * MODEL.hidden
    plain = MODEL.model_copy(update={"dropout": False})
    for attention in ("flash", "unfused"):
        s = from_strategies(Strategy(global_batch=1, attention=attention))
        with_d, without = elementwise.layer_bytes(MODEL, s), elementwise.layer_bytes(plain, s)
        scores = 0.0 if attention == "flash" else MODEL.heads * MODEL.seq**2
        assert float(with_d["forward"] - without["forward"]) == pytest.approx(2 * sbh + 5 * scores)
        assert float(with_d["backward"] - without["backward"]) == pytest.approx(
            10 * sbh + 5 * scores
        )
        assert float(without["scores_forward"]) == pytest.approx(4 * scores)


def test_moe_permutation_bytes_by_hand() -> None:
    """DeepSeek-V3 (h 7168, top 8, 256 experts), 1,000 own slots and 3,000 received: the
    alltoall dispatcher with 4 local experts (ep 64) moves (4 + 4/8)·h per own slot and 8·h per
    received one forward, (6 + 4/8)·h and 8·h backward, in 7 and 4 kernels; with one local
    expert (ep 256) no regrouping; DeepEP's flex dispatcher only the received slots,
    (4 + 4·R)·h and (6 + 4·R)·h, R the received tokens per slot."""
    model = load_model("deepseek-v3")
    h, own, received = 7168.0, np.asarray(1000.0), np.asarray(3000.0)

    def got(**kw: object) -> tuple[float, ...]:
        s = from_strategies(Strategy(global_batch=256, dp=256, **kw))  # type: ignore[arg-type]
        b = elementwise.moe_permutation_bytes(model, s, own, received)
        return tuple(
            float(b[k]) for k in ("forward", "backward", "forward_kernels", "backward_kernels")
        )

    assert got(ep=64) == pytest.approx(
        (h * (4.5 * 1000 + 8 * 3000), h * (6.5 * 1000 + 8 * 3000), 7, 4)
    )
    assert got(ep=256) == pytest.approx((h * 4.5 * 1000, h * 6.5 * 1000, 5, 2))
    r = float(np.asarray(routing.touched_ranks(model, 64))) / 8
    assert 0.5 < r <= 1.0  # node-limited routing: a token's 8 experts on fewer than 8 GPUs
    deepep = got(ep=64, ep_dispatch="deepep")
    assert deepep == pytest.approx((h * (4 + 4 * r) * 3000, h * (6 + 4 * r) * 3000, 5, 2))


def _permutation_times(model: object, **kw: object) -> tuple[float, float]:
    """The MoE layer's forward and backward delta over a dense layer (`moe_mlp_delta`)."""
    from railplan.perf.layer_time import moe_mlp_delta

    system = load_system("hgx-h800")
    s = from_strategies(Strategy(global_batch=128, **kw))  # type: ignore[arg-type]
    delta = moe_mlp_delta(model, system, s)  # type: ignore[arg-type]
    return float(delta["forward"]), float(delta["backward"])


def test_moe_permutation_is_in_the_layer_time_with_its_slot_counts() -> None:
    """The dispatchers differ in the MoE layer's kernels only by their permutations, on the
    slots their sides hold: own tokens b·s·k/(tp·cp), received slots × etp. Checked for
    tp 2 with whole experts (etp 1) and with experts split (etp 2), and context parallelism 2."""
    from railplan.perf.compute import memory_time_s

    model = load_model("deepseek-v3")
    gpu = load_system("hgx-h800").gpu
    eff = gpu.elementwise_forward_efficiency
    for kw in ({"tp": 2, "expert_tp": 1}, {"tp": 2, "expert_tp": 2}, {"tp": 1, "cp": 2}):
        tp, cp = int(kw.get("tp", 1)), int(kw.get("cp", 1))
        etp = int(kw.get("expert_tp", tp))
        own = model.seq * model.top_k / tp / cp
        sf = float(np.asarray(routing.slot_factor(model, np.asarray(64))))
        received = own * sf * etp
        times = {}
        for dispatch in ("alltoall", "deepep"):
            args = {**kw, "ep": 64, "ep_dispatch": dispatch, "dp": 128 // (tp * cp)}
            s = from_strategies(Strategy(global_batch=128, **args))  # type: ignore[arg-type]
            b = elementwise.moe_permutation_bytes(model, s, np.asarray(own), np.asarray(received))
            perm = [
                float(memory_time_s(gpu, b[p], b[f"{p}_kernels"], eff))
                for p in ("forward", "backward")
            ]
            times[dispatch] = (*_permutation_times(model, **args), *perm)
        a, d = times["alltoall"], times["deepep"]
        assert a[0] - d[0] == pytest.approx(a[2] - d[2], rel=1e-9), kw
        assert a[1] - d[1] == pytest.approx(a[3] - d[3], rel=1e-9), kw


def test_routing_skew_does_not_grow_the_senders_permutation() -> None:
    """Skewed (Zipf) dropless routing concentrates slots on the busiest expert rank, not on the
    GPUs that send them: each GPU permutes exactly k slots per own token; only the expert side
    grows with `slot_factor`."""
    model = load_model("deepseek-v3")
    skewed = model.model_copy(update={"routing_zipf": 1.0})
    assert routing.token_slot_factor(skewed) == 1.0
    assert float(np.asarray(routing.slot_factor(skewed, np.asarray(64)))) > 2.0
    dropped = model.model_copy(update={"drop_tokens": True, "capacity_factor": 1.25})
    assert routing.token_slot_factor(dropped) == 1.25
