"""The times the load simulation remembers (`compute.gemm_efficiency` of a scalar shape,
`engine.expert_layer_s` of a scalar token count) are the times it would compute afresh,
whatever was asked before, and agree with the array path (to the last bits numpy's scalar and
vector kernels may differ in)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from railplan.inference.engine import Deployment, _expert_layer_s, expert_layer_s
from railplan.perf.compute import _tile_efficiency, gemm_efficiency
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
    fraction = H100.fp8_matmul_efficiency if fp8 else H100.matmul_efficiency
    assert float(first) == float(again) == float(_tile_efficiency(H100, g, fraction))
    arrays = Gemm("g", np.array([batch, 1]), np.array([m, 1.0]), np.array([n, 1]), 4096)
    assert float(first) == pytest.approx(float(gemm_efficiency(H100, arrays, fp8)[0]), rel=1e-12)
    # what is remembered is shared: no caller may change it in place
    assert not first.flags.writeable
    # another GPU with the same shape is not served the first one's figure
    other = load_system("dgx-a100").gpu
    assert float(gemm_efficiency(other, g)) == float(
        _tile_efficiency(other, g, other.matmul_efficiency)
    )


@settings(max_examples=30)
@given(tokens=st.lists(st.floats(0.5, 5000.0), min_size=1, max_size=5))
def test_a_remembered_expert_layer_time_is_the_array_paths(tokens: list[float]) -> None:
    together = expert_layer_s(DEP, np.array(tokens))
    for i, t in enumerate(tokens):
        fresh = float(_expert_layer_s(DEP, t))
        assert float(expert_layer_s(DEP, t)) == fresh == float(expert_layer_s(DEP, t))
        assert fresh == pytest.approx(float(together[i]), rel=1e-12)
    assert not expert_layer_s(DEP, tokens[0]).flags.writeable
    # a deployment of other experts per rank remembers its own
    other = Deployment(
        load_model("deepseek-v3"), load_system("hgx-h800"), Network(), 32, 1, 2, 8, "fp8"
    )
    assert float(expert_layer_s(other, tokens[0])) == float(_expert_layer_s(other, tokens[0]))
