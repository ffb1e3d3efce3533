"""`railplan validate --commands`: each modern run's command reproduces its prediction, and the
model files it reads are the CSV's models (no drift)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from railplan.reproduce.modern_validation import HELDOUT_FILE, modern_commands, modern_rows
from railplan.reproduce.moe_training_validation import moe_commands
from railplan.reproduce.moe_training_validation import rows as moe_rows

ROOT = Path(__file__).resolve().parents[2]


def test_model_files_match_the_csv() -> None:
    for c in modern_commands() + modern_commands(HELDOUT_FILE):
        path = ROOT / c["model_file"]
        assert path.read_text() == c["model_yaml"], f"regenerate {c['model_file']}"


def test_heldout_commands_reproduce_the_predictions(cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    predicted = {r.id: r.estimate.iteration_s for r in modern_rows(file=HELDOUT_FILE)}
    commands = modern_commands(HELDOUT_FILE)
    assert len(commands) == len(predicted) == 54
    for c in commands:
        out = cli.json(*shlex.split(c["command"])[1:])
        assert out["iteration_s"] == pytest.approx(predicted[c["id"]], rel=1e-12), c["id"]


def test_commands_reproduce_the_predictions(cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    predicted = {r.id: r.estimate.iteration_s for r in modern_rows()}
    commands = modern_commands()
    assert len(commands) == len(predicted) == 32
    for c in commands:
        args = shlex.split(c["command"])
        assert args[:2] == ["railplan", "estimate"]
        out = cli.json(*args[1:])
        assert out["iteration_s"] == pytest.approx(predicted[c["id"]], rel=1e-12), c["id"]


def test_validate_commands_cli(cli) -> None:
    r = cli("validate", "--commands")
    assert r.exit_code == 0
    models = "railplan estimate --model src/railplan/data/validation/models/"
    assert r.stdout.count(models + "modern/") == 32
    assert r.stdout.count(models + "heldout/") == 54
    rows = cli.json("validate", "--commands")
    every = modern_commands() + modern_commands(HELDOUT_FILE) + moe_commands()
    assert [row["id"] for row in rows] == [c["id"] for c in every]
    assert r.stdout.count("railplan estimate --model deepseek-v3 ") == 5


def test_moe_commands_reproduce_the_predictions(cli) -> None:
    """The held-out MoE rows: `validate --commands` prints each one's command, which gives the
    prediction `validate` reports (its table and JSON `moe_runs`)."""
    predicted = {r.id: r.estimate.iteration_s for r in moe_rows()}
    commands = moe_commands()
    assert len(commands) == len(predicted) == 5
    for c in commands:
        out = cli.json(*shlex.split(c["command"])[1:])
        assert out["iteration_s"] == pytest.approx(predicted[c["id"]], rel=1e-12), c["id"]
    v = cli.json("validate")
    assert {r["id"]: r["predicted_s"] for r in v["moe_runs"]["rows"]} == pytest.approx(predicted)


def test_unstated_knobs_take_the_fastest_fitting_value() -> None:
    """The rule for knobs a source leaves unstated: no other allowed value of them is faster
    while it fits (checked on one row by brute force)."""
    import itertools

    from railplan.perf.estimate import estimate
    from railplan.reproduce.modern_validation import (
        UNSTATED_KNOBS,
        knob_values,
        modern_run,
        with_knobs,
    )
    from railplan.reproduce.validation import read_rows
    from railplan.specs import Network

    row = next(r for r in read_rows("modern_runs.csv") if r["id"] == "meg-h100-16B")
    model, system, chosen = modern_run(row)
    best = estimate(model, system, chosen, Network(), gpus=int(row["gpus"])).iteration_s
    for combo in itertools.product(*(knob_values(model, chosen, k) for k in UNSTATED_KNOBS)):
        s = with_knobs(chosen, UNSTATED_KNOBS, combo)
        if s.interleave > 1 and s.micro_batches % s.pp:
            continue
        e = estimate(model, system, s, Network(), gpus=int(row["gpus"]))
        assert not e.fits or e.iteration_s >= best - 1e-12


def test_unstated_recompute_can_take_block_recompute() -> None:
    """Where nothing fits without recompute, the rule may take full recompute of the first N
    layers of each chunk (Megatron's block method): Llama 3.1 405B on 12,288 H100 (tp 8, pp 12,
    ZeRO-1: stages of 10 and 11 layers) does not fit without recompute, and a few recomputed
    layers per stage are faster than all of them."""
    from railplan.reproduce.modern_validation import fastest_fitting, knob_values
    from railplan.specs import Strategy, load_model, load_system

    model, system = load_model("llama-3.1-405b"), load_system("dgx-h100")
    s = Strategy(tp=8, pp=12, dp=128, global_batch=2048, sequence_parallel=True, zero=1)
    values = knob_values(model, s, "recompute")
    assert {"recompute": "full", "recompute_num_layers": 1} in values
    chosen = fastest_fitting(model, system, s, ["recompute"])
    assert chosen.recompute == "full" and 1 <= chosen.recompute_num_layers < 10


def test_catalog_holds_the_fitted_sustained_fraction() -> None:
    """The one fitted constant is what the fit gives on the shared rows (refit if they change)."""
    from railplan.reproduce.modern_validation import fit_sustained_fraction
    from railplan.specs import load_gpu

    assert load_gpu("h100-sxm").sustained_tensor_fraction == fit_sustained_fraction()


def test_every_catalog_copy_of_the_sustained_fraction_is_the_fit() -> None:
    """The fitted Hopper fraction is carried by the H100 die's other parts and, as a rule, by
    Blackwell (docs/model.md): each copy in the catalog is h100-sxm's; the rest are unfitted."""
    from railplan.specs import load_gpu

    fitted = load_gpu("h100-sxm").sustained_tensor_fraction
    for name in ("h800", "h200", "b200", "gb200"):
        assert load_gpu(name).sustained_tensor_fraction == fitted, name
    for name in ("a100-80gb", "a100-40gb", "gh200", "mi300x"):
        assert load_gpu(name).sustained_tensor_fraction == 1.0, name


def test_commands_run_from_any_directory(cli, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside a checkout the model paths point at the installed package's copies."""
    monkeypatch.chdir(tmp_path)
    c = modern_commands()[0]
    assert Path(c["model_file"]).is_absolute() and Path(c["model_file"]).is_file()
    out = cli.json(*shlex.split(c["command"])[1:])
    assert out["iteration_s"] == pytest.approx(modern_rows()[0].estimate.iteration_s, rel=1e-12)
