"""`railplan infer` and `infer-search`: JSON keys, bad input as one-line errors (exit 2)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import Cli, unstated_context_model

INFER_KEYS = {
    "ttft_s",
    "tpot_s",
    "tokens_per_s_per_gpu",
    "kv_cache_gib_per_gpu",
    "max_batch",
    "fits",
    "breakdown_s",
}


def test_infer_json_has_the_keys(cli: Cli) -> None:
    out = cli.json("infer", "--tp", "2", "--input-tokens", "222", "--output-tokens", "219")
    assert set(out) >= INFER_KEYS
    assert out["fits"] and out["tokens_per_s_per_gpu"] > 0


def test_a_context_beyond_the_models_is_refused(cli: Cli) -> None:
    # the default model (Llama 2 70B) serves 4,096 tokens (its HF config's
    # max_position_embeddings, the catalog's context_tokens): 222 + 219 tokens pass quietly,
    # 4,000 + 200 are refused before any work, in infer and infer-search
    inside = cli.json("infer", "--tp", "2", "--input-tokens", "222", "--output-tokens", "219")
    assert "notes" not in inside
    for command in (
        ("infer", "--tp", "2"),
        ("infer-search", "--model", "llama-2-70b", "--gpus", "8"),
    ):
        beyond = cli(*command, "--input-tokens", "4000", "--output-tokens", "200")
        assert beyond.exit_code == 2, command
        message = str(beyond.exception)
        assert message.startswith("input_tokens: 4,000 prompt + 200 output tokens exceed")
        assert "4,096" in message and "at most 3,896" in message
        assert len(message.splitlines()) == 1


def test_a_context_beyond_an_unstated_one_is_noted(cli: Cli, tmp_path: Path) -> None:
    # a model file that does not state its context: a prompt beyond its training sequence is
    # costed with a note saying so
    spec = unstated_context_model(tmp_path, 8192, 80, 64, 28672, 32000, 4096)
    args = ("infer", "--model", spec, "--tp", "2")
    inside = cli.json(*args, "--input-tokens", "222", "--output-tokens", "219")
    beyond = cli.json(*args, "--input-tokens", "4000", "--output-tokens", "200")
    assert "notes" not in inside
    assert beyond["fits"] and beyond["ttft_s"] > inside["ttft_s"]
    (note,) = beyond["notes"]
    assert "4,000 prompt + 200 output tokens exceed" in note and "4,096" in note


def test_infer_sweep_writes_a_plot(cli: Cli, tmp_path: Path) -> None:
    plot = tmp_path / "curve.png"
    out = cli.json(
        "infer",
        "--tp",
        "2",
        "--arrival-rate",
        "5,20",
        "--requests",
        "300",
        "--plot",
        str(plot),
    )
    assert [s["arrival_rate"] for s in out["serving"]] == [5.0, 20.0]
    ttft = [s["ttft_mean_s"] for s in out["serving"]]
    assert ttft[0] <= ttft[1]
    assert plot.stat().st_size > 0


def test_infer_least_busy_dispatch(cli: Cli) -> None:
    # 8 H100 at tp 2 are 4 replicas: least-busy simulates all of them (300 requests each) and
    # at light load nearly every request finds an idle one, so its TTFT is no worse than the
    # random split's one-replica simulation
    args = ["infer", "--tp", "2", "--arrival-rate", "4", "--requests", "300"]
    busy = cli.json(*args, "--dispatch", "least-busy")
    split = cli.json(*args)
    assert busy["dispatch"] == "least-busy" and split["dispatch"] == "split"
    assert busy["serving"][0]["requests"] == 300
    assert busy["serving"][0]["ttft_mean_s"] <= split["serving"][0]["ttft_mean_s"]


def test_infer_search_json(cli: Cli) -> None:
    out = cli.json(
        "infer-search",
        "--model",
        "llama-2-70b",
        "--system",
        "dgx-h100",
        "--gpus",
        "16",
        "--input-tokens",
        "512",
        "--output-tokens",
        "128",
        "--ttft-slo",
        "2",
        "--tpot-slo",
        "0.2",
    )
    best = out["best"]
    assert best["ttft_s"] <= 2 and best["tpot_s"] <= 0.2
    assert set(best) >= INFER_KEYS
    nets = out["by_hb_domain"][0]["by_network"]
    assert set(nets) == {"rail-optimized", "rail-only", "ideal"}
    assert nets["ideal"]["tokens_per_s_per_gpu"] >= nets["rail-only"]["tokens_per_s_per_gpu"]


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["infer", "--precision", "int3"], "precision"),
        (["infer", "--precision", "fp4"], "precision"),
        (["infer", "--gpus", "7", "--tp", "2"], "gpus"),
        (["infer", "--tp", "0"], "tp"),
        (["infer", "--batch", "0"], "batch"),
        (["infer", "--gpus", "100000000000000000000"], "gpus"),  # was an OverflowError
        (["infer", "--batch", "1" + "0" * 400], "batch"),  # was an OverflowError
        (["infer", "--batch", "1" + "0" * 153], "batch"),  # was a TTFT of 1e147 s
        (["infer", "--system", "dgx-a100", "--precision", "bf16", "--tp", "8", "--nvls"], "system"),
        (["infer", "--nvls"], "nvls"),  # on by default where the GPU has it
        (["infer", "--network", "oversubscribed"], "oversubscription"),
        (["infer", "--input-tokens", "0"], "input_tokens"),
        (["infer", "--arrival-rate", "fast"], "arrival_rate"),
        (["infer", "--arrival-rate", "-3"], "arrival_rate"),
        (["infer", "--plot", "x.png"], "plot"),
        (["infer", "--arrival-rate", "1", "--plot", "x.txt"], "plot"),
        (["infer", "--network", "torus"], "network"),
        (["infer", "--arrival-rate", "5", "--dispatch", "random"], "dispatch"),
        (
            [
                "infer",
                "--gpus",
                "512",
                "--arrival-rate",
                "5000",
                "--requests",
                "200000",
                "--dispatch",
                "least-busy",
            ],
            "requests",
        ),
        (["infer", "--model", "llama-9"], "model"),
        (["infer", "--gpus", "32", "--tp", "2", "--prefill-gpus", "3"], "prefill_gpus"),
        (["infer", "--gpus", "32", "--tp", "2", "--prefill-gpus", "32"], "prefill_gpus"),
        (["infer", "--gpus", "32", "--tp", "2", "--prefill-gpus", "0"], "prefill_gpus"),
        (["infer", "--tp", "8", "--prefill-gpus", "8"], "prefill_gpus"),  # one instance
        (
            [
                "infer",
                "--gpus",
                "32",
                "--tp",
                "2",
                "--prefill-gpus",
                "8",
                "--arrival-rate",
                "5",
                "--dispatch",
                "split",
            ],
            "dispatch",
        ),
        (
            ["infer", "--gpus", "16", "--tp", "8", "--prefill-gpus", "8", "--chunked-prefill"],
            "chunked_prefill",
        ),
        (["infer-search", "--ttft-slo", "0"], "ttft_slo"),
        (["infer-search", "--hb-domains", "8,x"], "hb_domains"),
    ],
)
def test_bad_input_is_one_line_exit_2(cli: Cli, args: list[str], field: str) -> None:
    r = cli(*args)
    assert r.exit_code == 2, r.output
    assert str(r.exception).startswith(field)
    assert "\n" not in str(r.exception)


def test_infer_traffic_splits_hb_and_nic(cli: Cli) -> None:
    out = cli.json("infer", "--gpus", "16", "--tp", "16", "--batch", "8", "--traffic")
    tr = out["decode_step_traffic"]
    assert tr["nic_bytes"] > 0 and tr["hb_bytes"] > tr["nic_bytes"]
    assert tr["hb_bytes"] + tr["nic_bytes"] == pytest.approx(tr["total_bytes"])


def test_infer_heatmap(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "step.svg"
    r = cli("infer", "--gpus", "16", "--tp", "16", "--batch", "8", "--heatmap", str(out))
    assert r.exit_code == 0, r.output
    assert out.read_text().lstrip().startswith("<?xml")
    bad = cli("infer", "--heatmap", str(tmp_path / "step.txt"))
    assert bad.exit_code == 2 and str(bad.exception).startswith("heatmap")


def test_infer_search_traffic_gives_the_best_configurations_bytes(cli: Cli) -> None:
    # Llama 3.1 405B on 72 GB200 as nine 8-GPU domains: disaggregated, so one prompt's KV cache
    # crosses from a prefill instance to a decode instance over the NICs
    out = cli.json(
        "infer-search",
        "--model",
        "llama-3.1-405b",
        "--gpus",
        "72",
        "--hb-domains",
        "8",
        "--traffic",
    )
    best = out["best"]
    assert best["mode"] == "disaggregated"
    t = best["traffic"]
    for summary in t.values():
        assert summary["total_bytes"] == pytest.approx(summary["hb_bytes"] + summary["nic_bytes"])
    kv = t["kv_transfer_per_prompt"]
    assert kv["nic_bytes"] > 0 and kv["bytes_by_kind"]["kv"] == pytest.approx(kv["total_bytes"])
    # by hand: 2,048 tokens × 126 layers × 2 (K, V) × 8 KV heads × 128 × 1 byte (fp8 KV cache),
    # whatever the tp·pp split (the uneven pp stages counted once)
    assert kv["total_bytes"] == pytest.approx(2048 * 126 * 2 * 8 * 128)
    # the decode step runs on the decode instances only
    from railplan.inference.engine import Deployment
    from railplan.inference.search import with_hb_domain
    from railplan.inference.traffic import decode_step_traffic
    from railplan.specs import load_system

    sy = with_hb_domain(load_system("gb200-nvl72"), 8)
    dec = Deployment(
        "llama-3.1-405b",
        sy,
        best["network"],
        gpus=best["decode_gpus"],
        tp=best["tp"],
        pp=best["pp"],
        ep=best["ep"],
    )
    expected = decode_step_traffic(dec, best["batch"]).summary()["total_bytes"]
    assert t["decode_step"]["total_bytes"] == pytest.approx(expected)
    assert "traffic" not in cli.json("infer-search", "--model", "llama-3.1-405b")["best"]


def test_infer_disaggregated_steady_state_and_under_load(cli: Cli) -> None:
    # 32 H100 at tp 2: 4 of the 16 instances prefill; the steady state is what infer-search
    # reports for that split, and a light Poisson load keeps up with TTFT near its estimate
    args = ["infer", "--gpus", "32", "--tp", "2", "--batch", "64", "--prefill-gpus", "8"]
    out = cli.json(*args)
    assert out["prefill_gpus"] == 8 and out["kv_transfer_s"] > 0
    from railplan.inference.engine import Deployment
    from railplan.inference.search import disaggregated_choices

    dep = Deployment("llama-2-70b", "dgx-h100", "rail-optimized", 32, 2)
    (c,) = disaggregated_choices(dep, np.asarray([64]), 1024, 256, prefill_instances=4)
    assert out["ttft_s"] == pytest.approx(c.ttft_s) and out["tpot_s"] == pytest.approx(c.tpot_s)
    assert out["tokens_per_s_per_gpu"] == pytest.approx(c.tokens_per_s_per_gpu)
    rate = 0.3 * out["tokens_per_s"] / 256
    loaded = cli.json(*args, "--arrival-rate", f"{rate:.3f}", "--requests", "400")
    s = loaded["serving"][0]
    assert loaded["dispatch"] == "least-busy" and s["prefill_gpus"] == 8
    assert s["stable"] is True
    assert s["tpot_mean_s"] <= out["tpot_s"]  # a lighter batch than the full 64
    assert s["ttft_mean_s"] < 2.0 * out["ttft_s"]
    text = cli(*args, "--traffic")
    assert text.exit_code == 0 and "one prompt's KV cache" in text.output
    assert "prefill:decode GPUs" in text.output and "8:24" in text.output


def test_infer_search_proposes_a_load_check_that_runs(cli: Cli) -> None:
    import shlex

    out = cli.json(
        "infer-search",
        "--model",
        "llama-2-70b",
        "--system",
        "dgx-h100",
        "--gpus",
        "16",
        "--input-tokens",
        "512",
        "--output-tokens",
        "128",
    )
    command = shlex.split(out["best"]["load_check_command"])
    assert command[:2] == ["railplan", "infer"]
    loaded = cli.json(*command[1:], "--requests", "300")
    assert loaded["tp"] == out["best"]["tp"] and loaded["batch"] == out["best"]["batch"]
    assert loaded["serving"][0]["arrival_rate"] == pytest.approx(
        0.9 * out["best"]["tokens_per_s"] / 128, rel=1e-3
    )


def test_infer_search_says_when_lockstep_ranks_serve_less_under_load(cli: Cli) -> None:
    # an aggregated best with ep > 1 (DeepSeek-V3 on 32 H800): its capacity gives every rank the
    # same prompts per step; a dense best has no ep ranks to say it of
    moe = cli("infer-search", "--model", "deepseek-v3", "--system", "hgx-h800", "--gpus", "32")
    assert moe.exit_code == 0, moe.output
    assert "best: K = 8, rail-optimized, aggregated" in moe.output
    assert "note: its ep ranks step together" in moe.output
    dense = cli("infer-search", "--model", "llama-3.1-70b", "--system", "dgx-h100", "--gpus", "8")
    assert dense.exit_code == 0 and "ep ranks step together" not in dense.output


def test_infer_chunked_prefill(cli: Cli) -> None:
    # 16k prompts beside 64 sequences: whole, a step needs room for one (a note says the load
    # simulation's budget is raised); chunked, the budget stays 8,192 and the prompt runs in two
    # (Llama 3.1 70B: the default Llama 2 70B serves 4,096 tokens)
    args = ["infer", "--model", "llama-3.1-70b", "--tp", "2", "--batch", "64"]
    args += ["--input-tokens", "16000"]
    args += ["--output-tokens", "128", "--arrival-rate", "1", "--requests", "200"]
    whole, chunked = cli.json(*args), cli.json(*args, "--chunked-prefill")
    assert chunked["chunked_prefill"] and not whole["chunked_prefill"]
    assert chunked["serving"][0]["step_budget_tokens"] == 8192
    assert whole["serving"][0]["step_budget_tokens"] > 16000
    assert chunked["breakdown_s"] != whole["breakdown_s"]  # steps with a chunk, not a prompt
    text = cli(*args, "--chunked-prefill").output
    assert "chunked prefill" in text and "step budget" not in text


def test_the_simulated_engine_without_a_batch_stops_at_the_default_max_batch(cli: Cli) -> None:
    """Without --batch the load simulation's engine holds at most DEFAULT_MAX_BATCH (2,048)
    sequences, as the steady state's, and `serving_max_batch` says so (it said what the KV cache
    holds, 4,120 here)."""
    args = ["infer", "--model", "llama-3.1-8b", "--system", "dgx-h100", "--gpus", "1"]
    args += ["--input-tokens", "128", "--output-tokens", "128", "--arrival-rate", "50"]
    out = cli.json(*args, "--requests", "300")
    assert out["max_batch"] > 2048 and out["serving_max_batch"] == 2048 == out["batch"]
