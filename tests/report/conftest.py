"""Fixtures of the report tests: one small report (GPT-7.5B on 256 DGX A100 GPUs), built once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from railplan import load_model, load_system
from railplan.network.cost import load_price_book
from railplan.report import ReportInputs, build, write_report


def small_inputs(
    model: str = "gpt-7.5b", system: str = "dgx-a100", gpus: int = 256, global_batch: int = 512
) -> ReportInputs:
    return ReportInputs(
        model=load_model(model),
        system=load_system(system),
        gpus=gpus,
        global_batch=global_batch,
        radix=64,
        price_book=load_price_book(None),
        mc_trials=200,
    )


@pytest.fixture(scope="session")
def report_data() -> dict[str, Any]:
    return build(small_inputs())


@pytest.fixture(scope="session")
def report_file(report_data: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_report(report_data, tmp_path_factory.mktemp("report") / "report.html")
