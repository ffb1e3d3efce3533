"""CLI: estimate/validate happy paths, JSON keys, and every documented error path."""

import subprocess
import sys

import pytest

from tests.conftest import Cli

BASE = [
    "estimate",
    "--model",
    "gpt-175b",
    "--system",
    "dgx-a100",
    "--gpus",
    "64",
    "--global-batch",
    "64",
]


def test_estimate_json_keys(cli) -> None:  # type: ignore[no-untyped-def]
    out = cli.json(
        *BASE, "--tp", "8", "--pp", "8", "--recompute", "selective", "--sequence-parallel"
    )
    for key in ("iteration_s", "mfu", "hfu", "memory_gib_per_gpu", "fits", "breakdown_s"):
        assert key in out
    assert out["fits"] is True
    assert 0 < out["mfu"] <= out["hfu"] < 1
    assert sum(out["breakdown_s"].values()) == pytest.approx(out["iteration_s"])


def test_estimate_overrides_change_result(cli) -> None:  # type: ignore[no-untyped-def]
    args = [*BASE, "--tp", "8", "--pp", "8", "--recompute", "full"]
    slow = cli.json(*args, "--nic-gbps", "25")["iteration_s"]
    fast = cli.json(*args, "--nic-gbps", "400")["iteration_s"]
    assert slow > fast
    ideal = cli.json(*args, "--network", "ideal")["iteration_s"]
    assert ideal <= fast
    k16 = cli.json(*args, "--hb-domain", "16", "--hb-tbps", "4.8")["iteration_s"]
    assert k16 <= cli.json(*args)["iteration_s"]


def test_estimate_in_network_all_reduce_flags(cli) -> None:  # type: ignore[no-untyped-def]
    # GPT-3 175B on 128 H100, ZeRO 0 (a DP all-reduce), TP all-reduces without sequence
    # parallelism: --nvls shortens the DP one (and the TP ones at tp 8), --sharp the DP one's
    # rail phase; with ZeRO-1 and SP
    # (reduce-scatter / all-gather only) neither changes anything
    job = ["estimate", "--model", "gpt-3-175b", "--system", "dgx-h100", "--gpus", "128"]
    args = [*job, "--global-batch", "256", "--tp", "4", "--pp", "8", "--no-overlap-dp"]
    plain = cli.json(*args)
    nvls, sharp = cli.json(*args, "--nvls"), cli.json(*args, "--sharp")
    assert nvls["breakdown_s"]["dp_comm_exposed"] < plain["breakdown_s"]["dp_comm_exposed"]
    # at tp 4 NVLS (1.25·D at 68 % of the link, 25 µs) barely beats the ring (1.5·D at 82 %,
    # 8.4 + 6 × 3.4 µs); at tp 8 clearly (1.125·D against 1.75·D)
    assert nvls["breakdown_s"]["tp_comm"] <= plain["breakdown_s"]["tp_comm"]
    tp8 = [*job, "--global-batch", "256", "--tp", "8", "--pp", "4", "--no-overlap-dp"]
    assert (
        cli.json(*tp8, "--nvls")["breakdown_s"]["tp_comm"]
        < cli.json(*tp8)["breakdown_s"]["tp_comm"]
    )
    assert sharp["breakdown_s"]["dp_comm_exposed"] < plain["breakdown_s"]["dp_comm_exposed"]
    assert sharp["breakdown_s"]["tp_comm"] == plain["breakdown_s"]["tp_comm"]
    rs_ag = [*args, "--zero", "1", "--sequence-parallel"]
    both, neither = cli.json(*rs_ag, "--nvls", "--sharp"), cli.json(*rs_ag)
    assert both["network"]["sharp"]
    # only the tied embedding's all-reduce between the first and last stage may take SHARP,
    # which saves NCCL's Simple base latency of 8.4 µs
    a, b = both["breakdown_s"], neither["breakdown_s"]
    assert {k: v for k, v in a.items() if k != "dp_comm_exposed"} == {
        k: v for k, v in b.items() if k != "dp_comm_exposed"
    }
    assert 0.0 <= b["dp_comm_exposed"] - a["dp_comm_exposed"] <= 8.4e-6 + 1e-12


def test_estimate_table(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli(*BASE, "--tp", "8", "--pp", "8")
    assert r.exit_code == 0
    assert "iteration time" in r.stdout


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--tp", "7", "--dp", "1", "--pp", "1", "--gpus", "7"], "tp"),
        (["--tp", "8", "--pp", "8", "--dp", "2"], "gpus"),
        (["--tp", "8", "--pp", "128", "--gpus", "1024"], "pp"),
        (["--tp", "8", "--pp", "8", "--micro-batch", "3"], "micro_batch"),
        (["--tp", "8", "--pp", "8", "--interleave", "13"], "interleave"),  # 12 layers a stage
        (["--tp", "8", "--pp", "8", "--recompute", "some"], "recompute"),
        (["--tp", "8", "--pp", "8", "--network", "torus"], "network"),
        (["--tp", "8", "--pp", "8", "--hb-domain", "0"], "system.hb_domain"),
        (["--tp", "8", "--pp", "8", "--nic-gbps", "-5"], "system.nic_gbps"),
        (["--tp", "8", "--pp", "8", "--hb-tbps", "inf"], "system.hb_tbps"),
        (["--tp", "8", "--pp", "8", "--hb-tbps", "nan"], "system.hb_tbps"),
        (["--tp", "8", "--pp", "8", "--nic-gbps", "1e-9"], "system.nic_gbps"),
        (["--tp", "8", "--pp", "8", "--nics-per-gpu", "0.001"], "system.nics_per_gpu"),
        (["--tp", "8", "--pp", "8", "--nics-per-gpu", "1e308"], "system.nics_per_gpu"),
        (
            ["--tp", "8", "--pp", "8", "--network", "oversubscribed", "--oversubscription", "nan"],
            "network.oversubscription",
        ),
        (["--tp", "0"], "tp"),
        # options that would change nothing here
        (
            ["--tp", "8", "--pp", "1", "--dp", "8", "--defer-embedding-wgrad"],
            "defer_embedding_wgrad",
        ),
        (["--tp", "8", "--pp", "8", "--wgrad-deferral-limit", "2"], "wgrad_deferral_limit"),
        (["--tp", "8", "--pp", "8", "--network", "ideal", "--nic-gbps", "100"], "network"),
        (["--tp", "8", "--pp", "8", "--network", "ideal", "--sharp"], "network"),
        (["--tp", "8", "--pp", "8", "--radix", "32"], "radix"),
    ],
)
def test_estimate_errors_name_field(cli, args: list[str], field: str) -> None:  # type: ignore[no-untyped-def]
    base = [a for a in BASE]
    if "--gpus" in args:
        i = base.index("--gpus")
        del base[i : i + 2]
    r = cli(*base, *args)
    assert r.exit_code == 2, r.output
    assert str(r.exception).startswith(field + ":"), str(r.exception)
    assert "\n" not in str(r.exception)


def test_unknown_model_lists_close_matches(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli("estimate", "--model", "gpt-175", "--gpus", "8", "--global-batch", "8")
    assert r.exit_code == 2
    assert "gpt-175b" in str(r.exception)


def test_malformed_yaml(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "m.yaml"
    bad.write_text("hidden: [1, 2\nlayers: 3")
    r = cli("estimate", "--model", str(bad), "--gpus", "8", "--global-batch", "8")
    assert r.exit_code == 2
    assert "malformed YAML" in str(r.exception)
    typo = tmp_path / "t.yaml"
    typo.write_text("hidden: 1024\nlayers: 4\nheads: 8\nhiden: 3\n")
    r = cli("estimate", "--model", str(typo), "--gpus", "8", "--global-batch", "8")
    assert r.exit_code == 2
    assert "model.hiden" in str(r.exception)
    neg = tmp_path / "n.yaml"
    neg.write_text("hidden: -1024\nlayers: 4\nheads: 8\n")
    r = cli("estimate", "--model", str(neg), "--gpus", "8", "--global-batch", "8")
    assert r.exit_code == 2
    assert str(r.exception).startswith("model.hidden")


def test_yaml_model_file(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    f = tmp_path / "llama.yaml"
    f.write_text(
        "name: mine\nhidden: 4096\nlayers: 32\nheads: 32\nkv_heads: 8\n"
        "ffn_hidden: 14336\ngated_mlp: true\nvocab: 128256\nseq: 8192\n"
    )
    out = cli.json(
        "estimate",
        "--model",
        str(f),
        "--system",
        "dgx-h100",
        "--gpus",
        "8",
        "--tp",
        "8",
        "--global-batch",
        "8",
        "--recompute",
        "selective",
    )
    assert out["model"] == "mine"


def test_console_script_exit_code_and_no_traceback() -> None:
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "from railplan.cli import main; main()",
            "estimate",
            "--model",
            "nope",
            "--gpus",
            "8",
            "--global-batch",
            "8",
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert r.stderr.strip().startswith("error: model:")
    assert len(r.stderr.strip().splitlines()) == 1


def test_validate_json(cli) -> None:  # type: ignore[no-untyped-def]
    out = cli.json("validate")
    assert len(out["rows"]) == 19
    assert out["goal"] == {"mean_abs_pct": 3.0, "max_abs_pct": 8.0}
    for r in out["rows"]:
        assert r["predicted"] > 0


def test_catalog_lists(cli) -> None:  # type: ignore[no-untyped-def]
    out = cli.json("catalog", "systems")
    assert {"dgx-a100", "dgx-h100", "dgx-gh200", "gb200-nvl72", "mi300x"} <= set(out)


def test_validate_pairs_the_same_pipeline_across_papers(cli) -> None:  # type: ignore[no-untyped-def]
    # GPT-530B and GPT-1T ran the same pipeline in both papers (only dp and the year differ):
    # the 2021 runs are 8.7-10.3 % slower (from the papers' own numbers), our model is not.
    pairs = {r["model"]: r for r in cli.json("validate")["same_pipeline_both_papers"]}
    assert set(pairs) == {"gpt-530b", "gpt-1t"}
    assert pairs["gpt-530b"]["measured_ratio"] == pytest.approx(1.1026, abs=1e-3)
    assert pairs["gpt-1t"]["measured_ratio"] == pytest.approx(1.0870, abs=1e-3)
    for r in pairs.values():
        ours = r["narayanan2021_predicted_s"] / r["korthikanti2022_predicted_s"]
        assert abs(ours - 1.0) < 0.01


def test_estimate_and_search_defer_embedding_wgrad(cli) -> None:  # type: ignore[no-untyped-def]
    """--defer-embedding-wgrad moves the LM head's weight gradient off the last stage's pace
    (GPT-175B, pp 8: the last stage paces); --wgrad-deferral-limit bounds how many."""
    args = [*BASE, "--tp", "8", "--pp", "8", "--sequence-parallel"]
    off = cli.json(*args)["iteration_s"]
    on = cli.json(*args, "--defer-embedding-wgrad")
    one = cli.json(*args, "--defer-embedding-wgrad", "--wgrad-deferral-limit", "1")
    assert on["iteration_s"] < one["iteration_s"] < off
    assert sum(on["breakdown_s"].values()) == pytest.approx(on["iteration_s"])
    found = cli.json(
        "search", "--model", "gpt-175b", "--gpus", "64", "--global-batch", "64",
        "--pp", "8", "--tp", "8", "--defer-embedding-wgrad", "--top", "1",
    )  # fmt: skip
    assert found["best"]["strategy"]["defer_embedding_wgrad"] is True


def test_interrupt_exits_130_with_a_message(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """^C inside a command: exit code 130 and one line, not 0 (click catches the
    KeyboardInterrupt itself and hands back 130 outside standalone mode)."""
    import railplan.perf.estimate

    def interrupted(*_: object, **__: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(railplan.perf.estimate, "estimate", interrupted)
    from railplan.cli import run

    code = run(["estimate", "--model", "gpt-1.7b", "--gpus", "8", "--global-batch", "8"])
    assert code == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == "interrupted"


def test_partial_domain_note_names_whole_domains_and_the_override(  # type: ignore[no-untyped-def]
    cli, monkeypatch
) -> None:
    """128 GPUs on 72-GPU racks: the note offers whole racks, or --hb-domain with the GPUs a job
    uses per rack (NeMo's GB200 launcher: 16-node segments, 64 of 72); with --hb-domain 64 the
    job fills whole domains and the note goes."""
    args = ("estimate", "--model", "gpt-22b", "--system", "gb200-nvl72", "--gpus", "128")
    args += ("--tp", "8", "--pp", "2", "--global-batch", "64")
    monkeypatch.setenv("COLUMNS", "240")
    out = " ".join(cli(*args).stdout.split())
    assert "128 is not a multiple of K=72; whole domains: 72 or 144 GPUs" in out
    assert "--hb-domain N for N GPUs of each domain (NeMo's GB200 jobs: 64 of 72)" in out
    assert "partial HB domain" not in cli(*args, "--hb-domain", "64").stdout


def test_mfu_above_100_percent_is_explained(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # 256k tokens: the full s² attention MFU counts is about twice what the causal kernel runs
    f = tmp_path / "long.yaml"
    f.write_text("name: long\nhidden: 4096\nlayers: 32\nheads: 32\nseq: 262144\nvocab: 50000\n")
    args = ["estimate", "--model", str(f), "--gpus", "8", "--global-batch", "8"]
    assert cli.json(*args)["mfu"] > 1.0
    r = cli(*args)
    assert r.exit_code == 0 and "MFU above 100" in r.stdout
    assert "MFU above 100 %" in [w["warning"] for w in cli.json(*args)["warnings"]]


def test_an_mfu_beyond_the_published_runs_is_flagged(cli) -> None:  # type: ignore[no-untyped-def]
    # today's defaults on A100 (75 % MFU) exceed every published A100 run (best 64.2 %)
    args = ["estimate", "--model", "gpt-3-175b", "--system", "dgx-a100", "--gpus", "256"]
    args += ["--tp", "8", "--pp", "8", "--global-batch", "6144", "--sequence-parallel"]
    r = cli(*args)
    assert r.exit_code == 0 and "beyond published runs" in r.stdout
    # --json says so too (it said nothing)
    (w,) = cli.json(*args)["warnings"]
    assert w["warning"] == "beyond published runs" and "best 64.2%" in w["text"]
    # the README's first command (a measured H100 run, 50.8 %) is not flagged
    readme = ["estimate", "--model", "gpt-3-175b", "--system", "dgx-h100", "--gpus", "128"]
    readme += ["--tp", "4", "--pp", "8", "--interleave", "12", "--global-batch", "256"]
    readme += ["--sequence-parallel", "--zero", "1", "--grad-reduce-bytes", "2"]
    r = cli(*readme, "--cross-entropy", "unfused")
    assert r.exit_code == 0 and "beyond published runs" not in r.stdout
    assert cli.json(*readme, "--cross-entropy", "unfused")["warnings"] == []
    partial = cli.json(*readme[:5], "--gpus", "100", "--global-batch", "100")["warnings"]
    assert [w["warning"] for w in partial] == [
        "dp groups: uneven or cross-rail over HB domains",
        "partial HB domain",
    ]


@pytest.mark.parametrize(
    "extra",
    [
        ["--tp", "8", "--pp", "4", "--sequence-parallel"],  # already split by SP
        ["--tp", "8", "--pp", "1"],  # no pipeline
        ["--tp", "1", "--pp", "4"],  # nothing to split
    ],
)
def test_p2p_scatter_gather_is_refused_where_it_changes_nothing(cli: Cli, extra: list[str]) -> None:
    r = cli(
        "estimate",
        "--model",
        "gpt-22b",
        "--gpus",
        "32",
        "--global-batch",
        "32",
        *extra,
        "--p2p-scatter-gather",
    )
    assert r.exit_code == 2 and str(r.exception).startswith("p2p_scatter_gather")


def test_p2p_scatter_gather_splits_the_pipeline_bytes_over_tp(cli: Cli) -> None:
    # GPT-1T on 384 DGX A100 (the paper's Fig 2): 2021's scattered sends carry 1/8 of
    # Megatron-Core's whole activations
    args = [
        "traffic",
        "--model",
        "gpt-1t",
        "--gpus",
        "3072",
        "--tp",
        "8",
        "--pp",
        "64",
        "--global-batch",
        "3072",
        "--placement",
        "rail-aligned",
    ]
    whole = cli.json(*args)["bytes_by_kind"]["pp"]
    split = cli.json(*args, "--p2p-scatter-gather")["bytes_by_kind"]["pp"]
    assert whole == pytest.approx(8 * split)


def test_oversubscription_needs_uplinks(cli) -> None:  # type: ignore[no-untyped-def]
    """64 H100 have 64 NIC ports: one radix-64 switch, no uplinks to oversubscribe (as
    `topology` says); with 32-port switches there are, and the ratio slows the pipeline."""
    job = ["--model", "llama-3-70b", "--system", "dgx-h100", "--gpus", "64"]
    job += ["--global-batch", "64", "--cp", "16", "--pp", "4", "--zero", "1"]
    over = ["--network", "oversubscribed", "--oversubscription", "4"]
    r = cli("estimate", *job, *over)
    assert r.exit_code == 2 and str(r.exception).startswith("oversubscription: a 1-tier Clos")
    base = cli.json("estimate", *job)["breakdown_s"]
    small = cli.json("estimate", *job, *over, "--radix", "32")["breakdown_s"]
    assert small["pp_comm"] > base["pp_comm"] and small["cp_comm"] == base["cp_comm"]


def test_estimate_names_the_rank_whose_memory_it_reports(cli) -> None:  # type: ignore[no-untyped-def]
    """Llama 3.1 405B on tp 8, pp 16: rank 1 peaks (8 layers, 15 micro-batches in flight)."""
    args = ["estimate", "--model", "llama-3.1-405b", "--system", "dgx-h100", "--gpus", "16384"]
    args += ["--tp", "8", "--pp", "16", "--global-batch", "2048", "--sequence-parallel"]
    args += ["--zero", "1"]
    assert cli.json(*args)["memory_peak_rank"] == 1
    r = cli(*args)
    assert r.exit_code == 0 and "peak on pipeline rank" in r.stdout and "1 (ranks 0–15)" in r.stdout
