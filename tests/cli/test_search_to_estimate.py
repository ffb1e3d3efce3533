"""`search` names the `estimate` command of its best, and `Strategy.estimate_flags` gives any
strategy back to `estimate`: for every candidate a search lists, that command predicts the
same strategy, time and memory (search and estimate agree, flag by flag)."""

from __future__ import annotations

import shlex

import pytest

from railplan.specs import Strategy
from tests.conftest import Cli

CASES = {
    "dense, ZeRO and recompute": ["--model", "gpt-1.7b", "--gpus", "16", "--global-batch", "32"],
    "context parallel, H100": [
        "--model",
        "llama-3-70b",
        "--system",
        "dgx-h100",
        "--gpus",
        "64",
        "--global-batch",
        "128",
    ],
    "MoE, FP8, rail-only": [
        "--model",
        "mixtral-8x7b",
        "--system",
        "dgx-h100",
        "--gpus",
        "64",
        "--global-batch",
        "256",
        "--precision",
        "bf16,fp8",
        "--network",
        "rail-only",
    ],
    "HSDP, overrides, stack settings": [
        "--model",
        "llama-3-8b",
        "--system",
        "dgx-h100",
        "--gpus",
        "32",
        "--global-batch",
        "64",
        "--zero",
        "3",
        "--zero-shard",
        "0,8",
        "--hb-domain",
        "4",
        "--nic-gbps",
        "200",
        "--gpu-memory-gib",
        "60",
        "--optimizer-state",
        "fp32-remainder",
        "--grad-reduce-bytes",
        "2",
        "--no-overlap-dp",
        "--cross-entropy",
        "te",
    ],
    "pipelines, oversubscribed": [
        "--model",
        "gpt-175b",
        "--gpus",
        "256",
        "--global-batch",
        "512",
        "--network",
        "oversubscribed",
        "--oversubscription",
        "2",
        "--pp",
        "8,16",
        "--defer-embedding-wgrad",
        "--wgrad-deferral-limit",
        "2",
        "--recompute-num-layers",
        "0,2",
    ],
    "DeepSeek-V3, FP8, DualPipeV, DeepEP": [
        "--model",
        "deepseek-v3",
        "--system",
        "hgx-h800",
        "--gpus",
        "2048",
        "--global-batch",
        "15360",
        "--precision",
        "fp8",
        "--overlap-ep",
        "--optimizer-state",
        "bf16-moments",
        "--pipeline-schedule",
        "dualpipev",
        "--ep-dispatch",
        "deepep",
        "--fp8-dispatch",
        "--router-dtype",
        "fp32",
    ],
}


@pytest.mark.parametrize("case", list(CASES))
def test_every_listed_candidate_is_its_estimate(cli: Cli, case: str) -> None:
    args = CASES[case]
    found = cli.json("search", *args, "--top", "4")
    command = shlex.split(found["estimate_command"])
    assert command[:2] == ["railplan", "estimate"]
    # the job and network part of the command: what comes before the strategy's flags
    best_flags = Strategy(**found["best"]["strategy"]).estimate_flags()
    assert command[-len(best_flags) :] == best_flags
    job = command[2 : -len(best_flags)]
    assert "--network" in job
    candidates = found["top"] + found["pareto"]
    assert len(candidates) >= 2
    for c in candidates:
        flags = Strategy(**c["strategy"]).estimate_flags()
        e = cli.json("estimate", *job, *flags)
        assert e["strategy"] == c["strategy"], Strategy(**c["strategy"]).label()
        assert e["iteration_s"] == pytest.approx(c["iteration_s"], rel=1e-9)
        assert e["memory_gib_per_gpu"] == pytest.approx(c["memory_gib_per_gpu"], rel=1e-9)
        assert e["fits"]


def test_the_table_ends_with_the_command(cli: Cli) -> None:
    r = cli("search", *CASES["dense, ZeRO and recompute"], "--top", "1")
    assert r.exit_code == 0
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("the best in full: railplan estimate --model gpt-1.7b --system ")


def test_flags_of_the_defaults_are_the_layout_alone() -> None:
    """Strategy's defaults are estimate's: a default strategy needs only its layout, and each
    field that differs is named once."""
    plain = Strategy(global_batch=8, dp=8)
    assert plain.estimate_flags() == [
        *("--tp", "1", "--pp", "1", "--dp", "8", "--interleave", "1"),
        *("--micro-batch", "1", "--global-batch", "8", "--ep", "1", "--cp", "1"),
    ]
    s = Strategy(global_batch=8, dp=8, recompute="selective", overlap_tp=False)
    extra = [f for f in s.estimate_flags() if f not in plain.estimate_flags()]
    assert extra == ["--recompute", "selective", "--no-overlap-tp"]


def test_estimate_defaults_are_the_strategy_defaults(cli: Cli) -> None:
    """What `estimate` takes when a flag is left out is `Strategy`'s default, so the flags a
    strategy leaves out mean the same to estimate."""
    e = cli.json("estimate", "--model", "gpt-1.7b", "--gpus", "8", "--global-batch", "8")
    assert e["strategy"] == Strategy(global_batch=8, dp=8).model_dump(mode="json")
