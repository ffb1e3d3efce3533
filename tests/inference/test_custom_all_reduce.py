"""Serving's tensor-parallel all-reduce: the framework's measured kernel inside an HB domain
(TensorRT-LLM / vLLM / SGLang custom all-reduce), else NCCL."""

from __future__ import annotations

from functools import cache
from itertools import pairwise
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from railplan.inference.engine import Deployment, StepLoad, stage_parts, tp_all_reduce_s
from railplan.inference.estimate import infer
from railplan.perf.comm_time import group_collective_s
from railplan.specs import Network
from railplan.specs.catalog import load_model, load_system


@cache
def dep(
    custom: bool, system: str = "dgx-h100", tp: int = 8, network: str = "rail-optimized"
) -> Deployment:
    return Deployment(
        load_model("llama-3-405b"),
        load_system(system),
        Network(architecture=network),
        tp,
        tp,
        1,
        1,
        "fp8",
        custom_all_reduce=custom,
    )


def test_one_token_all_reduce_takes_the_measured_kernel() -> None:
    # one decode token of a 16,384-wide model: 32 KiB in bf16, between the 16 KiB and 128 KiB
    # measurements over 8 H100 (5.7 → taken as 5.9 µs, never below the 2 KiB one, and 7.8 µs)
    d = dep(True)
    size = np.asarray([16384 * 2.0])
    expected = 5.9 + (32768 - 16384) / (131072 - 16384) * (7.8 - 5.9)
    assert float(tp_all_reduce_s(d, size)[0]) == pytest.approx(expected * 1e-6)
    nccl = float(group_collective_s(d.links, d.shapes["tp"], size)[0])
    assert float(tp_all_reduce_s(dep(False), size)[0]) == pytest.approx(nccl)
    assert nccl > 2 * expected * 1e-6


def test_large_messages_stay_on_nccl() -> None:
    d = dep(True)
    # up to 8 MiB the faster of the kernel (extrapolated from 4 MiB: 57.2 µs) and NCCL (at
    # 8 MiB its NVLink SHARP, on by default on H100, is a little faster); above, vLLM and SGLang
    # hand the message to NCCL
    at, above = np.asarray([8 * 2.0**20]), np.asarray([8 * 2.0**20 + 2])
    slope = (33.8 - 22.1) / (4194304 - 2097152)
    kernel = (33.8 + slope * 4194304) * 1e-6
    nccl_at = float(group_collective_s(d.links, d.shapes["tp"], at)[0])
    assert float(tp_all_reduce_s(d, at)[0]) == pytest.approx(min(kernel, nccl_at))
    nccl = float(group_collective_s(d.links, d.shapes["tp"], above)[0])
    assert float(tp_all_reduce_s(d, above)[0]) == pytest.approx(nccl)
    # at 4 MiB the measured kernel is faster than NCCL's ring and its NVLS alike
    four = np.asarray([4 * 2.0**20])
    assert float(tp_all_reduce_s(d, four)[0]) == pytest.approx(33.8e-6)
    assert float(group_collective_s(d.links, d.shapes["tp"], four)[0]) > 33.8e-6


def test_no_measurement_or_too_many_ranks_means_nccl() -> None:
    size = np.asarray([32768.0])
    for d in (
        dep(True, "dgx-b200"),  # no measured kernel on NVLink 5
        dep(True, "dgx-h100", 16, "ideal"),  # 16 ranks: the kernels run 2, 4, 6, 8
        dep(True, "hgx-h800"),  # half of H100's NVLink: not the measured links
    ):
        nccl = float(group_collective_s(d.links, d.shapes["tp"], size)[0])
        assert float(tp_all_reduce_s(d, size)[0]) == pytest.approx(nccl)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 512), st.integers(16, 8192))
def test_the_kernel_never_slows_a_step(batch: int, context: int) -> None:
    load = StepLoad(np.asarray([float(batch)]), np.asarray([float(batch * context)]))
    on = stage_parts(dep(True), load).parts
    off = stage_parts(dep(False), load).parts
    assert float(on["tp_comm"][0]) <= float(off["tp_comm"][0]) + 1e-15
    for key in on:
        if key != "tp_comm":
            assert float(on[key][0]) == pytest.approx(float(off[key][0]))


def test_tpot_at_batch_one() -> None:
    on, off = infer(dep(True), 1, 1024, 256), infer(dep(False), 1, 1024, 256)
    assert on.custom_all_reduce and not off.custom_all_reduce
    assert on.tpot_s < off.tpot_s
    # 126 layers × 2 all-reduces of one token's 32 KiB, each ≈ 6.2 µs (the steady state's
    # average step also carries 1/256 of a prompt, whose all-reduces are larger)
    assert on.breakdown_s["tp_comm"] == pytest.approx(252 * 6.17e-6, rel=0.15)
    assert not infer(dep(True, "dgx-b200"), 1, 1024, 256).custom_all_reduce


def test_three_ranks_and_slower_links_keep_nccl(cli: Any) -> None:
    # the frameworks run their kernel on 2, 4, 6 or 8 ranks; an --hb-tbps override leaves the
    # H100 measurement behind
    three = ("infer", "--model", "gpt-1.7b", "--gpus", "3", "--tp", "3", "--batch", "1")
    assert cli.json(*three)["custom_all_reduce"] is False
    slow = ("infer", "--model", "llama-3-70b", "--tp", "8", "--batch", "16", "--hb-tbps", "0.2")
    on, off = cli.json(*slow), cli.json(*slow, "--no-custom-all-reduce")
    assert on["custom_all_reduce"] is False
    assert on["breakdown_s"] == off["breakdown_s"]


def test_cli_flag(cli: Any) -> None:
    args = ("infer", "--model", "llama-3-405b", "--gpus", "8", "--tp", "8", "--batch", "1")
    on, off = cli.json(*args), cli.json(*args, "--no-custom-all-reduce")
    assert on["custom_all_reduce"] is True and off["custom_all_reduce"] is False
    assert on["breakdown_s"]["tp_comm"] < off["breakdown_s"]["tp_comm"]
    search = ("infer-search", "--model", "llama-2-70b", "--system", "dgx-h100", "--gpus", "8")
    assert cli.json(*search, "--no-custom-all-reduce")["best"]["custom_all_reduce"] is False


def test_faster_links_never_slow_the_step() -> None:
    # below the measured 3.6 Tbps the kernel's measurement does not hold (NCCL only); at or
    # above it the measured latencies stand as an upper bound
    base = load_system("dgx-h100")
    tpots = []
    for tbps in (3.5, 3.6, 3.61, 7.2):
        sy = base.model_copy(update={"hb_tbps": tbps})
        d = Deployment(
            load_model("llama-3-405b"), sy, Network(), 8, 8, 1, 1, "fp8", custom_all_reduce=True
        )
        tpots.append(infer(d, 1, 1024, 256).tpot_s)
    assert all(b <= a * (1 + 1e-12) for a, b in pairwise(tpots))
    assert tpots[1] < tpots[0]


def test_tp_must_split_the_heads(cli: Any) -> None:
    """Serving frameworks split the attention heads evenly and replicate KV heads: tp 12 for
    Llama 3.1 405B (128 heads) is a one-line error, and the search never tries it."""
    out = cli("infer", "--model", "llama-3-405b", "--gpus", "12", "--tp", "12", "--batch", "1")
    assert out.exit_code == 2
    assert "tp: must divide the model's 128 attention heads" in str(out.exception)
    # tp 16 over 8 KV heads replicates them: allowed
    ok = cli.json("infer", "--model", "llama-3-405b", "--gpus", "16", "--tp", "16", "--batch", "1")
    assert ok["fits"] is True
    from railplan.inference.search import deployments

    deps = deployments(load_model("llama-3-405b"), load_system("gb200-nvl72"), Network(), 72, "fp8")
    assert {d.tp for d in deps} == {1, 2, 4, 8}
