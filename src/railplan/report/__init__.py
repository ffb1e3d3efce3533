"""The HTML report a network architect shares: one self-contained page (plotly.js inlined)
with the best strategy per network, cost and power, traffic, sensitivities, failures and the
assumptions with their sources. `sections` gathers library results as plain data, `figures`
turns them into plotly figures, `html` renders and writes the page."""

from __future__ import annotations

from railplan.report.html import render, write_report
from railplan.report.sections import STEPS, ReportInputs, build

__all__ = ["STEPS", "ReportInputs", "build", "render", "write_report"]
