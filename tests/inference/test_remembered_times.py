"""The times the load simulation remembers (`compute.gemm_efficiency` of a scalar shape,
`engine.expert_layer_s` of a scalar token count) are the times it would compute: the same
numbers as the array path, whatever was asked before."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from railplan.inference.engine import Deployment, expert_layer_s
from railplan.perf.compute import gemm_efficiency
from railplan.specs import Network
from railplan.specs.catalog import load_model, load_system
from railplan.workload.gemms import Gemm

H100 = load_system("dgx-h100").gpu
DEP = Deployment(
    load_model("deepseek-v3"), load_system("hgx-h800"), Network(), 32, 1, 2, 16, "fp8", True
)


@given(
    batch=st.integers(1, 64),
    m=st.floats(1.0, 1e5),
    n=st.integers(1, 65536),
    fp8=st.booleans(),
)
def test_a_remembered_gemm_efficiency_is_the_array_paths(
    batch: int, m: float, n: int, fp8: bool
) -> None:
    g = Gemm("g", batch, m, n, 4096)
    first, again = gemm_efficiency(H100, g, fp8), gemm_efficiency(H100, g, fp8)
    arrays = Gemm("g", np.array([batch, 1]), np.array([m, 1.0]), np.array([n, 1]), 4096)
    assert float(first) == float(again) == float(gemm_efficiency(H100, arrays, fp8)[0])
    # another GPU with the same shape is not served the first one's figure
    other = load_system("dgx-a100").gpu
    assert float(gemm_efficiency(other, g)) == float(gemm_efficiency(other, arrays)[0])


@settings(max_examples=30)
@given(tokens=st.lists(st.floats(0.5, 5000.0), min_size=1, max_size=5))
def test_a_remembered_expert_layer_time_is_the_array_paths(tokens: list[float]) -> None:
    together = expert_layer_s(DEP, np.array(tokens))
    for i, t in enumerate(tokens):
        assert float(expert_layer_s(DEP, t)) == float(together[i])
        assert float(expert_layer_s(DEP, np.float64(t))) == float(together[i])
    # a deployment of other experts per rank remembers its own
    other = Deployment(
        load_model("deepseek-v3"), load_system("hgx-h800"), Network(), 32, 1, 2, 8, "fp8"
    )
    assert float(expert_layer_s(other, tokens[0])) == float(
        expert_layer_s(other, np.array(tokens))[0]
    )
