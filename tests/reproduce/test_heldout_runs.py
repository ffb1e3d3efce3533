"""The held-out runs of 2025 stacks (data/validation/dgxc2025_runs.csv): every row enters as its
README states it, takes its recipe's facts, fits, and is reported but never fitted on."""

from __future__ import annotations

import pytest

from railplan.reproduce.modern_validation import (
    HELDOUT_FILE,
    heldout_summary,
    modern_rows,
    modern_run,
)
from railplan.reproduce.validation import read_rows


def test_every_heldout_row_enters_as_stated_and_fits() -> None:
    table = {r["id"]: r for r in read_rows(HELDOUT_FILE)}
    rows = modern_rows(file=HELDOUT_FILE)
    assert len(rows) == len(table) == 54
    for r in rows:
        row, s = table[r.id], r.estimate.strategy
        assert (s.tp, s.pp, s.cp, s.dp) == tuple(int(row[k]) for k in ("tp", "pp", "cp", "dp"))
        assert s.tp * s.pp * s.cp * s.dp == int(row["gpus"])
        assert (s.interleave, s.micro_batch, s.global_batch) == (
            int(row["interleave"]),
            int(row["micro_batch"]),
            int(row["global_batch"]),
        )
        assert s.precision == row["precision"]
        assert r.estimate.fits, r.id
        assert r.measured_s == float(row["measured_value"])


def test_recipe_facts_apply() -> None:
    """NeMo's performance recipes: bf16 gradient reduction everywhere, userbuffers TP overlap for
    tp > 1, the deferred embedding gradient where pipelined (Llama 3.1 70B and 405B, Nemotron-4
    340B), FP8 weights gathered in FP8, Llama 3.1 405B's first and last stage one layer short
    (account_for_embedding/loss_in_pipeline_split), and on GB200 the launcher's 16-node Slurm
    segments: 64 GPUs of each 72-GPU rack."""
    for row in read_rows(HELDOUT_FILE):
        _, system, s = modern_run(row)
        assert s.grad_reduce_bytes == 2
        assert s.fp8_param_gather == (s.precision == "fp8")
        assert s.tp_comm_overlap == (s.tp > 1)
        assert s.defer_embedding_wgrad == (s.pp > 1)
        layers = int(row["layers"])
        if "llama31-405b" in row["id"] and s.pp > 1:  # embedding and loss count as layers
            end = (layers + 2) // s.pp - 1
            assert (s.first_stage_layers, s.last_stage_layers) == (end, end)
            assert 2 * end + (s.pp - 2) * (end + 1) == layers
        else:
            assert (s.first_stage_layers, s.last_stage_layers) == (0, 0)
        # NeMo's 2025 performance scripts run Transformer Engine's loss (set_primary_perf_configs)
        assert s.cross_entropy == ("fused" if row["id"].startswith("dgxc25-h100-llama") else "te")
        gb200 = "gb200" in row["id"]
        assert system.name == ("gb200-nvl72" if gb200 else "dgx-h100")
        assert system.hb_domain == (64 if gb200 else 8)


def test_summary_groups_and_no_goal() -> None:
    h = heldout_summary()
    assert set(h["by_group"]) == {"h100-sxm bf16", "h100-sxm fp8", "gb200 bf16", "gb200 fp8"}
    assert sum(g["rows"] for g in h["by_group"].values()) == h["all"]["rows"] == 54
    assert "goal" not in h and "by_source" not in h
    worst = max(abs(r["error_pct"]) for r in h["rows"])
    assert h["all"]["max_abs_pct"] == pytest.approx(worst)


def test_validate_prints_the_heldout_table(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli("validate")
    assert r.exit_code == 0
    assert "Held out (2025 stacks" in r.stdout
    assert "held out, gb200 fp8: mean |error|" in r.stdout
    assert "held out, all: mean |error|" in r.stdout
    assert "modern runs, all: mean |error|" in r.stdout
    v = cli.json("validate")
    assert len(v["heldout_runs"]["rows"]) == 54
