"""Properties of DualPipeV and block recompute over random strategies: more bandwidth is never
slower, the networks keep their order, and a batch of mixed strategies (1F1B, interleaved,
DualPipeV; every layer, block or no recompute) equals each strategy estimated alone."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from railplan.specs import Strategy, load_model, load_system
from tests.perf.batch_check import batch_equals_each_alone
from tests.perf.properties import (
    ARCHS,
    BANDWIDTH_FIELDS,
    FACTORS,
    check_more_bandwidth_never_slower,
    check_network_order,
)

MODEL = load_model("gpt-39b")  # 48 layers
MOE = load_model("moe-1.3b")

schedules = st.builds(
    lambda pp, dp, mb, k, rc, n, dual: Strategy(
        tp=2,
        pp=pp,
        dp=dp,
        micro_batch=mb,
        global_batch=dp * mb * 2 * pp * k,
        interleave=2,
        recompute=rc,
        recompute_num_layers=n if rc == "full" else 0,
        sequence_parallel=True,
        pipeline_schedule="dualpipev" if dual else "1f1b",
    ),
    st.sampled_from([2, 4, 8]),
    st.sampled_from([1, 2, 8]),
    st.sampled_from([1, 2]),
    st.integers(1, 3),
    st.sampled_from(["none", "selective", "full"]),
    st.integers(0, 4),
    st.booleans(),
)


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(schedules, BANDWIDTH_FIELDS, FACTORS, ARCHS)
def test_more_bandwidth_is_never_slower(
    strategy: Strategy, field: str, factor: float, arch: str
) -> None:
    check_more_bandwidth_never_slower(MODEL, load_system("dgx-h100"), strategy, field, factor, arch)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(schedules)
def test_network_order(strategy: Strategy) -> None:
    check_network_order(MODEL, load_system("dgx-h100"), strategy)


@pytest.mark.parametrize("model", [MODEL, MOE], ids=["dense", "moe"])
def test_mixed_batch_equals_each_alone(model) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(11)
    items = []
    for _ in range(200):
        pp = int(rng.choice([2, 4, 8]))
        dp = int(rng.choice([2, 4, 8]))
        rc = str(rng.choice(["none", "selective", "full"]))
        dual = bool(rng.integers(2))
        ep = int(rng.choice([1, 2])) if model.experts > 1 else 1
        items.append(
            Strategy(
                tp=2,
                pp=pp,
                dp=dp,
                ep=ep,
                micro_batch=1,
                global_batch=dp * 2 * pp * int(rng.integers(1, 4)),
                interleave=2 if dual or rng.integers(2) else 1,
                recompute=rc,
                recompute_num_layers=int(rng.integers(0, 4)) if rc == "full" else 0,
                sequence_parallel=True,
                pipeline_schedule="dualpipev" if dual else "1f1b",
                overlap_ep=bool(ep > 1 and rc != "full" and rng.integers(2)),
            )
        )
    assert batch_equals_each_alone(model, items) > 50
