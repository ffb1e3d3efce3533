"""Traffic of a decode step and of the KV transfer: bytes conserved, HB vs NIC, cross-rail."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from railplan.errors import RailplanError
from railplan.inference.engine import ACT_BYTES, Deployment
from railplan.inference.traffic import decode_step_traffic, kv_transfer_traffic
from railplan.specs import Network
from railplan.specs.catalog import load_model, load_system


def dep(gpus: int, tp: int, pp: int = 1, k: int = 8) -> Deployment:
    sy = load_system("dgx-h100").model_copy(update={"hb_domain": k})
    return Deployment(
        load_model("llama-2-70b"), sy, Network(architecture="rail-only"), gpus, tp, pp
    )


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([1, 2, 4, 8, 16]), st.sampled_from([1, 2, 4]), st.integers(1, 512))
def test_tp_bytes_conserved(tp: int, pp: int, batch: int) -> None:
    d = dep(64, tp, pp)
    s = decode_step_traffic(d, batch).summary()
    m = d.model
    act = batch * m.hidden * ACT_BYTES
    groups = 64 // tp
    # each all-gather/reduce-scatter moves (n − 1)·D bytes; 2 all-reduces per layer
    expect = groups * 4.0 * (m.layers / pp) * act * (tp - 1)
    assert s["bytes_by_kind"]["tp"] == pytest.approx(expect)
    assert s["hb_bytes"] + s["nic_bytes"] == pytest.approx(s["total_bytes"])


def test_tp_inside_a_domain_never_touches_the_nic() -> None:
    s = decode_step_traffic(dep(16, 8), 64).summary()
    assert s["nic_bytes"] == 0 and s["cross_rail_bytes"] == 0


def test_kv_transfer_between_domains() -> None:
    d = dep(16, 4)  # four groups of 4: groups 0 and 1 in domain 0, 2 and 3 in domain 1
    s = kv_transfer_traffic(d, 2, 4, 1024).summary()
    size = 4 * 1024 * d.kv_bytes_per_token
    assert s["total_bytes"] == pytest.approx(8 * size)
    assert s["nic_bytes"] == pytest.approx(8 * size)
    # prefill group 1 (local ranks 4-7) sends to decode group 3 (local ranks 4-7): same rails
    assert s["cross_rail_bytes"] == 0
    # one prefill group of 4 sending to groups at other local ranks crosses rails
    odd = kv_transfer_traffic(dep(24, 4, k=8), 3, 1, 1024).summary()
    assert odd["cross_rail_bytes"] > 0


def test_bad_prefill_groups() -> None:
    with pytest.raises(RailplanError, match="prefill_groups"):
        kv_transfer_traffic(dep(8, 8), 1, 1, 1)
