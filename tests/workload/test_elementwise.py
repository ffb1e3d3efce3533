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
    """DeepSeek-V3 (h 7168, top 8, 256 experts), 1,000 slots each side: the alltoall dispatcher
    with 4 local experts (ep 64) moves (6 + 2/8 + 8)·h forward and (8 + 2/8 + 8)·h backward per
    slot in 4 kernels; with one local expert (ep 256) no regrouping; DeepEP's flex dispatcher
    only the expert side's 8·h and 10·h in 2 kernels."""
    model = load_model("deepseek-v3")
    h, slots = 7168.0, np.asarray(1000.0)

    def got(**kw: object) -> tuple[float, float, float]:
        s = from_strategies(Strategy(global_batch=256, dp=256, **kw))  # type: ignore[arg-type]
        b = elementwise.moe_permutation_bytes(model, s, slots, slots)
        return float(b["forward"]), float(b["backward"]), float(b["kernels"])

    assert got(ep=64) == pytest.approx((14.25 * h * 1000, 16.25 * h * 1000, 4.0))
    assert got(ep=256) == pytest.approx((6.25 * h * 1000, 8.25 * h * 1000, 2.0))
    deepep = got(ep=64, ep_dispatch="deepep")
    assert deepep == pytest.approx((8.0 * h * 1000, 10.0 * h * 1000, 2.0))


def test_moe_permutation_is_in_the_layer_time() -> None:
    """The two dispatchers differ in the MoE layer's kernels only by their permutations: the
    difference of the layer's forward and backward between alltoall and deepep is exactly the
    difference of their permutation kernels' times at the forward element-wise bandwidth
    (DeepSeek-V3 on H800, ep 64, tp 2 so the token side holds s/2 tokens)."""
    from railplan.perf.compute import memory_time_s
    from railplan.perf.layer_time import moe_mlp_delta

    model, system = load_model("deepseek-v3"), load_system("hgx-h800")
    gpu = system.gpu
    times = {}
    for dispatch in ("alltoall", "deepep"):
        s = from_strategies(
            Strategy(global_batch=128, tp=2, dp=128, ep=64, ep_dispatch=dispatch)  # type: ignore[arg-type]
        )
        delta = moe_mlp_delta(model, system, s)
        slots = np.asarray(
            model.seq * model.top_k * float(np.asarray(routing.slot_factor(model, s.ep))) / 2
        )
        b = elementwise.moe_permutation_bytes(model, s, slots, slots * 2.0)
        eff = gpu.elementwise_forward_efficiency
        perm = [float(memory_time_s(gpu, b[k], b["kernels"], eff)) for k in ("forward", "backward")]
        times[dispatch] = (float(delta["forward"]), float(delta["backward"]), *perm)
    a, d = times["alltoall"], times["deepep"]
    assert a[0] - d[0] == pytest.approx(a[2] - d[2], rel=1e-9)
    assert a[1] - d[1] == pytest.approx(a[3] - d[3], rel=1e-9)
    assert a[2] != pytest.approx(d[2])
