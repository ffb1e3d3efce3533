"""The held-out MoE training rows: each printed command reproduces its prediction, and the rows
carry the sources' stated layout (no row refused, none over the GPU's memory)."""

from __future__ import annotations

import shlex

import pytest

from railplan.reproduce.moe_training_validation import rows, strategy
from railplan.reproduce.validation import read_rows


def test_commands_reproduce_the_predictions(cli) -> None:
    out = rows()
    assert [r.id for r in out] == [
        "dgxc-deepseek-v3-512",
        "dgxc-deepseek-v3-1024",
        "dgxc-deepseek-v3-gb200-128",
        "dgxc-deepseek-v3-gb200-256",
        "dgxc-deepseek-v3-gb200-512",
    ]
    for r in out:
        args = shlex.split(r.command)
        assert args[:2] == ["railplan", "estimate"]
        assert cli.json(*args[1:])["iteration_s"] == pytest.approx(
            r.estimate.iteration_s, rel=1e-12
        ), r.id
        assert r.estimate.fits


def test_the_stated_pipeline_layout_holds_every_layer() -> None:
    # NeMo's layout: 64/pp − 1 layers on the first stage, 64/pp − 2 on the last, 64/pp between
    for r in read_rows("moe_training_runs.csv"):
        s = strategy(r)
        middle = 64 // s.pp
        assert s.first_stage_layers == middle - 1 and s.last_stage_layers == middle - 2
        assert s.first_stage_layers + s.last_stage_layers + (s.pp - 2) * middle == 61
        assert s.tp * s.pp * s.dp == int(r["gpus"])


def test_gb200_rows_run_on_the_launchers_segments() -> None:
    """NeMo's GB200 executor asks Slurm for 16-node segments: 64 GPUs of each 72-GPU rack."""
    from railplan.reproduce.moe_training_validation import system

    for r in read_rows("moe_training_runs.csv"):
        k = system(r).hb_domain
        assert k == (64 if r["system"] == "gb200-nvl72" else 8), r["id"]
        assert ("--hb-domain 64" in next(x.command for x in rows() if x.id == r["id"])) == (k == 64)
