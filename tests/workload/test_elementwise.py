"""workload/elementwise.py on hand-computed bytes: the layer's element-wise kernels with fused
and unfused attention, and the MLP activation (GeLU vs SwiGLU)."""

from __future__ import annotations

import numpy as np
import pytest

from railplan.specs import Strategy
from railplan.specs.arrays import from_strategies
from railplan.workload import elementwise
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
